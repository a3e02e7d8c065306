//! Reduction operations (`MPI_Op`): the predefined ones map to
//! [`adi::Op`]; a user function (`MPI_Op_create`) becomes an
//! [`adi::Op::User`] for each call, which knows the call's datatype: it
//! gets packed bytes from `adi`, lays them out as the datatype describes
//! (unless packed and laid-out data are the same bytes), calls the
//! program's function, and packs the result back.

use crate::abi::*;
use crate::err::{check, err, run, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use crate::types::{dtype, TypeObj};
use core::ffi::{c_int, c_void};
use std::sync::Arc;

/// `MPI_User_function`.
type UserFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int, *mut MPI_Datatype);

/// A user-defined operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserOp {
    f: usize,
    commute: bool,
}

static OPS: Table<UserOp> = Table::new(prefix::OP);

/// The operation of handle `h`, for data of datatype `t` (handle `th`).
pub(crate) fn op_for(h: MPI_Op, t: &Arc<TypeObj>, th: MPI_Datatype) -> R<adi::Op> {
    if let Some(o) = predefined_op(h) {
        return Ok(o);
    }
    let u = *OPS
        .get(h)
        .ok_or_else(|| err(MPI_ERR_OP, "invalid operation"))?;
    let t = Arc::clone(t);
    Ok(adi::Op::user(
        move |input, inout| call_user(u, &t, th, input, inout),
        u.commute,
    ))
}

/// The `adi` operation of a predefined `MPI_Op` handle (`None` for any
/// other): no datatype needed.
#[inline]
pub(crate) fn predefined_op(h: MPI_Op) -> Option<adi::Op> {
    Some(match h {
        MPI_MAX => adi::Op::Max,
        MPI_MIN => adi::Op::Min,
        MPI_SUM => adi::Op::Sum,
        MPI_PROD => adi::Op::Prod,
        MPI_LAND => adi::Op::Land,
        MPI_BAND => adi::Op::Band,
        MPI_LOR => adi::Op::Lor,
        MPI_BOR => adi::Op::Bor,
        MPI_LXOR => adi::Op::Lxor,
        MPI_BXOR => adi::Op::Bxor,
        MPI_MINLOC => adi::Op::MinLoc,
        MPI_MAXLOC => adi::Op::MaxLoc,
        MPI_REPLACE => adi::Op::Replace,
        MPI_NO_OP => adi::Op::NoOp,
        _ => return None,
    })
}

/// Calls user operation `u` on packed `input` and `inout` of type `t`.
fn call_user(
    u: UserOp,
    t: &TypeObj,
    th: MPI_Datatype,
    input: &[u8],
    inout: &mut [u8],
) -> Result<(), adi::Error> {
    let size = t.dt.size();
    let count = input.len().checked_div(size).unwrap_or(0);
    let mut len = c_int::try_from(count).map_err(|_| adi::Error::Overflow {
        what: "user operation element count",
    })?;
    let mut h = th;
    // SAFETY: `f` is the program's `MPI_User_function`, given to
    // `MPI_Op_create`; it is called as MPI calls it.
    let f: UserFn = unsafe { core::mem::transmute::<usize, UserFn>(u.f) };
    let dense = matches!(t.dt.contiguous_range(count as i64), Ok(Some((0, n))) if n == input.len());
    if dense {
        let mut a = input.to_vec();
        // SAFETY: both buffers hold `len` elements of the datatype laid
        // out contiguously from offset 0, as the function expects.
        unsafe {
            f(
                a.as_mut_ptr().cast(),
                inout.as_mut_ptr().cast(),
                &mut len,
                &mut h,
            )
        };
        return Ok(());
    }
    // Lay the elements out as the datatype says, in buffers covering
    // its span, call, and pack the result back.
    let (lo, hi) = t.dt.span(count as i64)?;
    let span = (hi - lo) as usize;
    let mut a = vec![0u8; span];
    let mut b = vec![0u8; span];
    let base = |v: &mut Vec<u8>| {
        v.as_mut_ptr()
            .wrapping_offset(-(lo as isize))
            .cast::<c_void>()
    };
    let (pa, pb) = (base(&mut a), base(&mut b));
    let io = |e: crate::err::MpiErr| adi::Error::InvalidArgument {
        what: if e.code == MPI_ERR_TYPE {
            "datatype"
        } else {
            "user operation buffer"
        },
    };
    // SAFETY: `pa`/`pb` address buffers that hold exactly the bytes
    // `count` elements touch (`span` from `lo`), owned here.
    unsafe {
        t.unpack_to(pa, count as i64, input).map_err(io)?;
        t.unpack_to(pb, count as i64, inout).map_err(io)?;
        f(pa, pb, &mut len, &mut h);
        let out = t.pack_from(pb, count as i64).map_err(io)?;
        inout.copy_from_slice(&out);
    }
    Ok(())
}

mpi_fn! {
    /// `MPI_Op_create`.
    fn MPI_Op_create / PMPI_Op_create(f: *const c_void, commute: c_int, op: *mut MPI_Op) -> c_int {
        run("MPI_Op_create", On::World, || {
            check(!f.is_null(), MPI_ERR_ARG, "null user function")?;
            let h = OPS
                .insert(UserOp { f: f as usize, commute: commute != 0 })
                .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many operations"))?;
            // SAFETY: MPI: `op` points to a handle.
            unsafe { ffi::put(op, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Op_free`.
    fn MPI_Op_free / PMPI_Op_free(op: *mut MPI_Op) -> c_int {
        run("MPI_Op_free", On::World, || {
            // SAFETY: MPI: `op` points to a handle.
            let h = unsafe { ffi::get(op) }?;
            OPS.remove(h).ok_or_else(|| err(MPI_ERR_OP, "not a user-defined operation"))?;
            // SAFETY: as above.
            unsafe { ffi::put(op, MPI_OP_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Op_commutative`.
    fn MPI_Op_commutative / PMPI_Op_commutative(op: MPI_Op, commute: *mut c_int) -> c_int {
        run("MPI_Op_commutative", On::World, || {
            let c = if (MPI_MAX..=MPI_NO_OP).contains(&op) {
                true
            } else {
                OPS.get(op).ok_or_else(|| err(MPI_ERR_OP, "invalid operation"))?.commute
            };
            // SAFETY: MPI: `commute` points to an int.
            unsafe { ffi::put(commute, ffi::flag(c)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Reduce_local`: `inoutbuf = inbuf op inoutbuf`.
    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op) -> c_int {
        run("MPI_Reduce_local", On::World, || {
            let n = ffi::count(count)? as i64;
            let t = dtype(datatype)?;
            let o = op_for(op, &t, datatype)?;
            // SAFETY: MPI: both buffers hold `count` elements.
            let (a, mut b) = unsafe { (t.pack_from(inbuf, n)?, t.pack_from(inoutbuf, n)?) };
            adi::reduce_local(&o, &t.dt, &a, &mut b)?;
            // SAFETY: as above.
            unsafe { t.unpack_to(inoutbuf, n, &b) }
        })
    }
}

/// Frees every user operation (finalize).
pub(crate) fn finalize() {
    OPS.clear();
}
