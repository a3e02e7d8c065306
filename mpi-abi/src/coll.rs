//! Collective communication, blocking and nonblocking: every call packs
//! its send data, runs `adi`'s collective on packed bytes
//! (`Comm::*_packed`, `gatherv`, `alltoallv`, ...), and unpacks the
//! result into the receive buffer (for a nonblocking call, when its
//! request completes). `MPI_IN_PLACE` becomes the corresponding data of
//! the receive buffer. Arguments significant only at the root are read
//! only there.

use crate::abi::*;
use crate::comm::{comm, comm_ref, CommObj};
use crate::err::{check, err, run, On, R};
use crate::ffi;
use crate::op::{op_for, predefined_op};
use crate::req::{new_request, Finish, Req};
use crate::types::{dense_size, dtype, dtype_ref, TypeObj};
use core::ffi::{c_int, c_void};
use std::sync::Arc;

mod inter;

/// A buffer argument of the program: address, element count, datatype.
#[derive(Debug, Clone)]
struct Buf {
    addr: usize,
    count: i64,
    t: Arc<TypeObj>,
}

impl Buf {
    fn new(addr: *const c_void, count: c_int, datatype: MPI_Datatype) -> R<Buf> {
        let count = ffi::count(count)? as i64;
        let t = committed(datatype)?;
        Ok(Buf {
            addr: addr as usize,
            count,
            t,
        })
    }

    /// Packed bytes of `count` elements.
    fn packed_len(&self) -> R<usize> {
        self.t.packed(self.count)
    }

    /// The address `elems` elements (extents) past the start.
    fn at(&self, elems: i64) -> usize {
        (self.addr as isize).wrapping_add((elems as isize).wrapping_mul(self.t.dt.extent()))
            as usize
    }

    /// Packs the `count` elements at `addr`.
    ///
    /// # Safety
    /// The program's buffer holds them (MPI's contract for the call).
    unsafe fn pack(&self, addr: usize) -> R<Vec<u8>> {
        // SAFETY: the caller's contract.
        unsafe { self.t.pack_from(addr as *const c_void, self.count) }
    }

    /// Unpacks `data` into the `count` elements at `addr`.
    ///
    /// # Safety
    /// The program's buffer has room for them (MPI's contract for the
    /// call, or, nonblocking, until its request completes).
    unsafe fn unpack(&self, addr: usize, data: &[u8]) -> R<()> {
        // SAFETY: the caller's contract.
        unsafe { self.t.unpack_to(addr as *mut c_void, self.count, data) }
    }
}

/// Blocks of the given sizes one after the other.
pub(crate) fn consecutive(sizes: &[usize]) -> Vec<(usize, usize)> {
    let mut off = 0;
    sizes
        .iter()
        .map(|&s| {
            let b = (off, s);
            off += s;
            b
        })
        .collect()
}

/// `n` ints of a counts or displacements array.
///
/// # Safety
/// `p` holds `n` ints.
unsafe fn ints<'a>(p: *const c_int, n: i32) -> R<&'a [c_int]> {
    // SAFETY: the caller's contract.
    unsafe { ffi::array(p, n as usize) }
}

/// Registers a nonblocking collective's request.
///
/// # Safety
/// `out` points to a request handle.
unsafe fn submit(c: MPI_Comm, out: *mut MPI_Request, r: adi::Request, finish: Finish) -> R<()> {
    let h = new_request(
        c,
        Req::Coll {
            r,
            finish: Some(finish),
        },
    )?;
    // SAFETY: the caller's contract.
    unsafe { ffi::put(out, h) }
}

/// Runs a collective: blocking (`nb` is `None`: `blocking` then `finish`),
/// or nonblocking (`nonblocking` and a request whose completion runs
/// `finish`).
///
/// # Safety
/// `nb` is `None` or points to a request handle.
pub(crate) unsafe fn go(
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
    blocking: impl FnOnce() -> R<Vec<u8>>,
    nonblocking: impl FnOnce() -> R<adi::Request>,
    finish: Finish,
) -> R<()> {
    match nb {
        None => {
            let out = blocking()?;
            finish.call(&out)
        }
        Some(p) => {
            let r = nonblocking()?;
            // SAFETY: the caller's contract.
            unsafe { submit(c, p, r, finish) }
        }
    }
}

fn nothing() -> Finish {
    Finish::new(|_| Ok(()))
}

/// `MPI_ERR_BUFFER` for a send buffer that is also the receive buffer.
fn not_aliased(send: *const c_void, recv: *const c_void, bytes: usize) -> R<()> {
    check(
        bytes == 0 || send != recv,
        MPI_ERR_BUFFER,
        "send and receive buffers are the same (use MPI_IN_PLACE)",
    )
}

fn intra(o: &CommObj) -> R<&adi::Comm> {
    o.intra()
}

// -------------------------------------------------------------- barrier

/// # Safety
/// `nb` as in [`go`].
unsafe fn barrier(c: MPI_Comm, nb: Option<*mut MPI_Request>) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe { inter::barrier(ic, c, nb) };
    }
    let w = intra(&o)?;
    // SAFETY: the caller's contract.
    unsafe {
        go(
            c,
            nb,
            || {
                w.barrier()?;
                Ok(Vec::new())
            },
            || Ok(w.ibarrier()?),
            nothing(),
        )
    }
}

/// The contiguous byte range of `n` elements of committed type `t`
/// (handle `h`), as [`TypeObj::contig`]: a dense predefined type's is
/// answered from its size alone.
fn contig(h: MPI_Datatype, n: i64, t: &TypeObj) -> R<Option<(isize, usize)>> {
    match dense_size(h) {
        Some(size) => (n as usize)
            .checked_mul(size)
            .map(|l| Some((0, l)))
            .ok_or_else(|| err(MPI_ERR_COUNT, "message size overflows")),
        None => t.contig(n),
    }
}

// ---------------------------------------------------------------- bcast

/// # Safety
/// MPI's contract for `MPI_Bcast`'s buffer; `nb` as in [`go`].
unsafe fn bcast(
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm_ref(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe { inter::bcast(ic, buf, count, datatype, root, c, nb) };
    }
    let w = intra(&o)?;
    if nb.is_none() {
        // Blocking on a contiguous range: in place, without `Buf`.
        let n = ffi::count(count)? as i64;
        let t = dtype_ref(datatype)?;
        check(
            t.dt.is_committed(),
            MPI_ERR_TYPE,
            "datatype used before MPI_Type_commit",
        )?;
        check((0..w.size()).contains(&root), MPI_ERR_ROOT, "invalid root")?;
        if let Some((s, l)) = contig(datatype, n, &t)? {
            // SAFETY: MPI: `buf` holds `count` elements; a contiguous range.
            let data = unsafe { ffi::bytes_mut(buf, s, l) };
            return Ok(w.bcast(data, root)?);
        }
    }
    let b = Buf::new(buf, count, datatype)?;
    check((0..w.size()).contains(&root), MPI_ERR_ROOT, "invalid root")?;
    let me = w.rank();
    let data = if me == root {
        // SAFETY: MPI: the root's buffer holds the data.
        unsafe { b.pack(b.addr) }?
    } else {
        vec![0u8; b.packed_len()?]
    };
    let finish: Finish = Finish::new(move |out: &[u8]| {
        if me == root {
            return Ok(());
        }
        // SAFETY: MPI: the buffer stays valid until the call (or its
        // request) completes, which is now.
        unsafe { b.unpack(b.addr, out) }
    });
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut d = data.clone();
                w.bcast(&mut d, root)?;
                Ok(d)
            },
            || Ok(w.ibcast(data.clone(), root)?),
            finish,
        )
    }
}

// ----------------------------------------------------------- reductions

/// The send data of a reduction: the send buffer, or (`MPI_IN_PLACE`)
/// the receive buffer's.
///
/// # Safety
/// MPI's contract for the buffers.
unsafe fn reduction_input(
    sendbuf: *const c_void,
    recvbuf: *const c_void,
    count: c_int,
    datatype: MPI_Datatype,
) -> R<Vec<u8>> {
    let src = if ffi::in_place(sendbuf) {
        recvbuf
    } else {
        sendbuf
    };
    let b = Buf::new(src, count, datatype)?;
    if !ffi::in_place(sendbuf) {
        not_aliased(sendbuf, recvbuf, b.packed_len()?)?;
    }
    // SAFETY: the caller's contract.
    unsafe { b.pack(b.addr) }
}

/// A finish that unpacks the result into `count` elements at `recvbuf`
/// (when `keep` is true).
fn unpack_into(
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    keep: bool,
) -> R<Finish> {
    if !keep {
        return Ok(nothing());
    }
    let b = Buf::new(recvbuf, count, datatype)?;
    Ok(Finish::new(move |out: &[u8]| {
        // SAFETY: MPI: the receive buffer stays valid until the call (or
        // its request) completes, which is now.
        unsafe { b.unpack(b.addr, out) }
    }))
}

/// # Safety
/// MPI's contract for `MPI_Reduce`'s buffers; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn reduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe { inter::reduce(ic, sendbuf, recvbuf, count, datatype, op, root, c, nb) };
    }
    let w = intra(&o)?;
    ffi::count(count)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    check((0..w.size()).contains(&root), MPI_ERR_ROOT, "invalid root")?;
    let me = w.rank();
    check(
        me == root || !ffi::in_place(sendbuf),
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is for the root only",
    )?;
    let recv = if me == root {
        recvbuf.cast_const()
    } else {
        core::ptr::null()
    };
    // SAFETY: the caller's contract.
    let send = unsafe { reduction_input(sendbuf, recv, count, datatype) }?;
    let finish = unpack_into(recvbuf, count, datatype, me == root)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; if me == root { send.len() } else { 0 }];
                w.reduce_packed(&send, &mut out, &dt, &aop, root)?;
                Ok(out)
            },
            || Ok(w.ireduce_packed(send.clone(), &dt, &aop, root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Allreduce`'s buffers; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn allreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm_ref(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe { inter::allreduce(ic, sendbuf, recvbuf, count, datatype, op, c, nb) };
    }
    let w = intra(&o)?;
    let n = ffi::count(count)? as i64;
    let t = dtype_ref(datatype)?;
    let aop = match predefined_op(op) {
        Some(a) => a,
        None => op_for(op, &t.to_arc(), datatype)?,
    };
    if nb.is_none() {
        check(
            t.dt.is_committed(),
            MPI_ERR_TYPE,
            "datatype used before MPI_Type_commit",
        )?;
        if let Some((s, l)) = contig(datatype, n, &t)? {
            let mut apart = true;
            if !ffi::in_place(sendbuf) {
                not_aliased(sendbuf, recvbuf, l)?;
                let from = (sendbuf as usize).wrapping_add_signed(s);
                let to = (recvbuf as usize).wrapping_add_signed(s);
                apart = from.saturating_add(l) <= to || to.saturating_add(l) <= from;
                if !apart && l > 0 {
                    // Overlapping buffers (erroneous in MPI): the send
                    // data copied into the receive buffer, reduced there.
                    // SAFETY: MPI: both hold `count` elements, the bytes
                    // `s .. s + l`; `copy` allows the overlap.
                    unsafe { core::ptr::copy(from as *const u8, to as *mut u8, l) };
                }
            }
            // SAFETY: MPI: the receive buffer holds `count` elements for
            // the call; a contiguous range.
            let data = unsafe { ffi::bytes_mut(recvbuf, s, l) };
            if ffi::in_place(sendbuf) || !apart {
                return Ok(w.allreduce_in_place(data, &t.dt, &aop)?);
            }
            // SAFETY: MPI: the send buffer holds `count` elements, the
            // same contiguous range, apart from the receive buffer's
            // (checked).
            let send = unsafe { ffi::bytes(sendbuf, s, l) };
            return Ok(w.allreduce_packed(send, data, &t.dt, &aop)?);
        }
    }
    // SAFETY: the caller's contract.
    let send = unsafe { reduction_input(sendbuf, recvbuf, count, datatype) }?;
    let finish = unpack_into(recvbuf, count, datatype, true)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; send.len()];
                w.allreduce_packed(&send, &mut out, &dt, &aop)?;
                Ok(out)
            },
            || Ok(w.iallreduce_packed(send.clone(), &dt, &aop)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for the buffers; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn scan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    c: MPI_Comm,
    exclusive: bool,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    let w = intra(&o)?;
    ffi::count(count)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    // SAFETY: the caller's contract.
    let send = unsafe { reduction_input(sendbuf, recvbuf, count, datatype) }?;
    // Exscan leaves rank 0's receive buffer alone.
    let keep = !(exclusive && w.rank() == 0);
    let finish = unpack_into(recvbuf, count, datatype, keep)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; send.len()];
                if exclusive {
                    w.exscan_packed(&send, &mut out, &dt, &aop)?;
                } else {
                    w.scan_packed(&send, &mut out, &dt, &aop)?;
                }
                Ok(out)
            },
            || {
                Ok(if exclusive {
                    w.iexscan_packed(send.clone(), &dt, &aop)?
                } else {
                    w.iscan_packed(send.clone(), &dt, &aop)?
                })
            },
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for the buffers (`rcounts` holds one count per rank);
/// `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    datatype: MPI_Datatype,
    op: MPI_Op,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe {
            inter::reduce_scatter(ic, sendbuf, recvbuf, rcounts, datatype, op, c, nb)
        };
    }
    let w = intra(&o)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    let counts: Vec<usize> = rcounts.iter().map(|&n| ffi::count(n)).collect::<R<_>>()?;
    let total: usize = counts.iter().sum();
    let total = c_int::try_from(total).map_err(|_| err(MPI_ERR_COUNT, "total count overflows"))?;
    // SAFETY: the caller's contract.
    let send = unsafe { reduction_input(sendbuf, recvbuf, total, datatype) }?;
    let size = t.dt.size();
    let blocks = consecutive(&counts.iter().map(|n| n * size).collect::<Vec<_>>());
    let mine = rcounts[w.rank() as usize];
    let finish = unpack_into(recvbuf, mine, datatype, true)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; blocks[w.rank() as usize].1];
                w.reduce_scatter_packed(&send, &mut out, &blocks, &dt, &aop)?;
                Ok(out)
            },
            || Ok(w.ireduce_scatter_packed(send.clone(), blocks.clone(), &dt, &aop)?),
            finish,
        )
    }
}

// ------------------------------------------------------ gather, scatter

/// # Safety
/// MPI's contract for `MPI_Gatherv`'s arguments (`rcounts`/`displs` hold
/// one value per rank at the root); `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn gatherv(
    sendbuf: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    displs: &[c_int],
    rtype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe {
            inter::gatherv(
                ic, sendbuf, scount, stype, recvbuf, rcounts, displs, rtype, root, c, nb,
            )
        };
    }
    let w = intra(&o)?;
    check((0..w.size()).contains(&root), MPI_ERR_ROOT, "invalid root")?;
    let me = w.rank();
    let at_root = me == root;
    check(
        at_root || !ffi::in_place(sendbuf),
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is for the root only",
    )?;
    // At the root: where each rank's block goes.
    let (rb, rblocks) = if at_root {
        let rb = Buf::new(recvbuf, 0, rtype)?;
        let size = rb.t.dt.size();
        let counts: Vec<usize> = rcounts.iter().map(|&n| ffi::count(n)).collect::<R<_>>()?;
        (
            Some(rb),
            consecutive(&counts.iter().map(|n| n * size).collect::<Vec<_>>()),
        )
    } else {
        (None, Vec::new())
    };
    let send = if ffi::in_place(sendbuf) {
        let rb = rb
            .as_ref()
            .ok_or_else(|| err(MPI_ERR_BUFFER, "MPI_IN_PLACE"))?;
        let mine = Buf {
            count: rcounts[me as usize] as i64,
            ..rb.clone()
        };
        // SAFETY: MPI: the root's block of the receive buffer holds its data.
        unsafe { mine.pack(rb.at(displs[me as usize] as i64)) }?
    } else {
        let sb = Buf::new(sendbuf, scount, stype)?;
        // SAFETY: MPI: the send buffer holds `scount` elements.
        unsafe { sb.pack(sb.addr) }?
    };
    let total: usize = rblocks.iter().map(|b| b.1).sum();
    let finish: Finish = match rb {
        None => nothing(),
        Some(rb) => {
            let (counts, displs, blocks) = (rcounts.to_vec(), displs.to_vec(), rblocks.clone());
            Finish::new(move |out: &[u8]| {
                for (i, &(off, len)) in blocks.iter().enumerate() {
                    let b = Buf {
                        count: counts[i] as i64,
                        ..rb.clone()
                    };
                    // SAFETY: MPI: the root's receive buffer has room for
                    // `rcounts[i]` elements at `displs[i]`, valid until the
                    // call (or its request) completes: now.
                    unsafe { b.unpack(rb.at(displs[i] as i64), &out[off..off + len]) }?;
                }
                Ok(())
            })
        }
    };
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                w.gatherv(&send, &mut out, &rblocks, root)?;
                Ok(out)
            },
            || Ok(w.igatherv(send.clone(), vec![0u8; total], rblocks.clone(), root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Scatterv`'s arguments; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn scatterv(
    sendbuf: *const c_void,
    scounts: &[c_int],
    displs: &[c_int],
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe {
            inter::scatterv(
                ic, sendbuf, scounts, displs, stype, recvbuf, rcount, rtype, root, c, nb,
            )
        };
    }
    let w = intra(&o)?;
    check((0..w.size()).contains(&root), MPI_ERR_ROOT, "invalid root")?;
    let me = w.rank();
    let at_root = me == root;
    let in_place = ffi::in_place(recvbuf);
    check(
        at_root || !in_place,
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is for the root only",
    )?;
    let (send, sblocks) = if at_root {
        let sb = Buf::new(sendbuf, 0, stype)?;
        let mut data = Vec::new();
        let mut sizes = Vec::new();
        for (i, (&n, &d)) in scounts.iter().zip(displs).enumerate() {
            let b = Buf {
                count: ffi::count(n)? as i64,
                ..sb.clone()
            };
            let p = if in_place && i as i32 == root {
                vec![0u8; b.packed_len()?]
            } else {
                // SAFETY: MPI: the root's send buffer holds `scounts[i]`
                // elements at `displs[i]`.
                unsafe { b.pack(sb.at(d as i64)) }?
            };
            sizes.push(p.len());
            data.extend_from_slice(&p);
        }
        (data, consecutive(&sizes))
    } else {
        (Vec::new(), Vec::new())
    };
    let (rlen, finish) = if in_place {
        (sblocks[me as usize].1, nothing())
    } else {
        let rb = Buf::new(recvbuf, rcount, rtype)?;
        (rb.packed_len()?, unpack_into(recvbuf, rcount, rtype, true)?)
    };
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; rlen];
                let n = w.scatterv(&send, &sblocks, &mut out, root)?;
                out.truncate(n);
                Ok(out)
            },
            || Ok(w.iscatterv(send.clone(), sblocks.clone(), rlen, root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Allgatherv`'s arguments; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
unsafe fn allgatherv(
    sendbuf: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    displs: &[c_int],
    rtype: MPI_Datatype,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe {
            inter::allgatherv(
                ic, sendbuf, scount, stype, recvbuf, rcounts, displs, rtype, c, nb,
            )
        };
    }
    let w = intra(&o)?;
    let me = w.rank() as usize;
    let rb = Buf::new(recvbuf, 0, rtype)?;
    let size = rb.t.dt.size();
    let counts: Vec<usize> = rcounts.iter().map(|&n| ffi::count(n)).collect::<R<_>>()?;
    let rblocks = consecutive(&counts.iter().map(|n| n * size).collect::<Vec<_>>());
    let send = if ffi::in_place(sendbuf) {
        let mine = Buf {
            count: rcounts[me] as i64,
            ..rb.clone()
        };
        // SAFETY: MPI: this rank's block of the receive buffer holds its data.
        unsafe { mine.pack(rb.at(displs[me] as i64)) }?
    } else {
        let sb = Buf::new(sendbuf, scount, stype)?;
        not_aliased(sendbuf, recvbuf, sb.packed_len()?)?;
        // SAFETY: MPI: the send buffer holds `scount` elements.
        unsafe { sb.pack(sb.addr) }?
    };
    let total: usize = rblocks.iter().map(|b| b.1).sum();
    let (cs, ds, bs) = (rcounts.to_vec(), displs.to_vec(), rblocks.clone());
    let finish: Finish = Finish::new(move |out: &[u8]| {
        for (i, &(off, len)) in bs.iter().enumerate() {
            let b = Buf {
                count: cs[i] as i64,
                ..rb.clone()
            };
            // SAFETY: MPI: the receive buffer has room for `rcounts[i]`
            // elements at `displs[i]`, valid until completion: now.
            unsafe { b.unpack(rb.at(ds[i] as i64), &out[off..off + len]) }?;
        }
        Ok(())
    });
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                w.allgatherv(&send, &mut out, &rblocks)?;
                Ok(out)
            },
            || Ok(w.iallgatherv(send.clone(), vec![0u8; total], rblocks.clone())?),
            finish,
        )
    }
}

/// One side of an all-to-all: per rank a count, a byte displacement and
/// a datatype.
pub(crate) struct Side {
    pub(crate) addr: usize,
    pub(crate) counts: Vec<i64>,
    pub(crate) bytes: Vec<isize>,
    pub(crate) types: Vec<Arc<TypeObj>>,
}

impl Side {
    pub(crate) fn blocks(&self) -> R<Vec<(usize, usize)>> {
        let sizes: Vec<usize> = self
            .counts
            .iter()
            .zip(&self.types)
            .map(|(&n, t)| t.packed(n))
            .collect::<R<_>>()?;
        Ok(consecutive(&sizes))
    }

    /// Packs every block.
    ///
    /// # Safety
    /// The program's buffer holds them.
    pub(crate) unsafe fn pack(&self) -> R<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..self.counts.len() {
            let a = (self.addr as isize).wrapping_add(self.bytes[i]) as *const c_void;
            // SAFETY: the caller's contract.
            out.extend_from_slice(&unsafe { self.types[i].pack_from(a, self.counts[i]) }?);
        }
        Ok(out)
    }

    /// Unpacks every block of `data` (laid out as [`blocks`](Self::blocks)).
    ///
    /// # Safety
    /// The program's buffer has room for them.
    pub(crate) unsafe fn unpack(&self, data: &[u8]) -> R<()> {
        // SAFETY: the caller's contract.
        unsafe { self.unpack_but(data, &[]) }
    }

    /// [`unpack`](Self::unpack), leaving out the blocks marked in `skip`.
    ///
    /// # Safety
    /// The program's buffer has room for the blocks unpacked.
    pub(crate) unsafe fn unpack_but(&self, data: &[u8], skip: &[bool]) -> R<()> {
        for (i, (off, len)) in self.blocks()?.into_iter().enumerate() {
            if skip.get(i).copied().unwrap_or(false) {
                continue;
            }
            let a = (self.addr as isize).wrapping_add(self.bytes[i]) as *mut c_void;
            // SAFETY: the caller's contract.
            unsafe { self.types[i].unpack_to(a, self.counts[i], &data[off..off + len]) }?;
        }
        Ok(())
    }
}

/// One side of an all-to-all whose blocks are each one contiguous range of
/// memory: the span `lo .. lo + len` (addresses) they lie in, and each
/// block's `(offset in the span, length)`.
struct Direct {
    lo: usize,
    len: usize,
    blocks: Vec<(usize, usize)>,
}

impl Side {
    /// The side as contiguous ranges, if every block is one.
    fn direct(&self) -> R<Option<Direct>> {
        let mut at = Vec::with_capacity(self.counts.len());
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for i in 0..self.counts.len() {
            let Some((s, l)) = self.types[i].contig(self.counts[i])? else {
                return Ok(None);
            };
            let a = (self.addr as isize)
                .wrapping_add(self.bytes[i])
                .wrapping_add(s) as usize;
            if l > 0 {
                let Some(end) = a.checked_add(l) else {
                    return Ok(None);
                };
                lo = lo.min(a);
                hi = hi.max(end);
            }
            at.push((a, l));
        }
        if hi == 0 {
            lo = 0;
        }
        let blocks = at
            .into_iter()
            .map(|(a, l)| (if l > 0 { a - lo } else { 0 }, l))
            .collect();
        Ok(Some(Direct {
            lo,
            len: hi - lo,
            blocks,
        }))
    }
}

/// Whether blocks (offset, length) overlap one another (empty ones never
/// do).
fn overlapping(blocks: &[(usize, usize)]) -> bool {
    let mut b: Vec<(usize, usize)> = blocks.iter().copied().filter(|b| b.1 > 0).collect();
    b.sort_unstable();
    b.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0)
}

/// A side with one datatype and displacements in its extents.
pub(crate) fn side_v(
    addr: *const c_void,
    counts: &[c_int],
    displs: &[c_int],
    datatype: MPI_Datatype,
) -> R<Side> {
    let t = dtype(datatype)?;
    check(
        t.dt.is_committed(),
        MPI_ERR_TYPE,
        "datatype used before MPI_Type_commit",
    )?;
    let ext = t.dt.extent();
    Ok(Side {
        addr: addr as usize,
        counts: counts
            .iter()
            .map(|&n| ffi::count(n).map(|n| n as i64))
            .collect::<R<_>>()?,
        bytes: displs
            .iter()
            .map(|&d| (d as isize).wrapping_mul(ext))
            .collect(),
        types: vec![t; counts.len()],
    })
}

/// A side with per-rank datatypes and byte displacements (`alltoallw`).
pub(crate) fn side_w(
    addr: *const c_void,
    counts: &[c_int],
    displs: Vec<isize>,
    types: &[MPI_Datatype],
) -> R<Side> {
    Ok(Side {
        addr: addr as usize,
        counts: counts
            .iter()
            .map(|&n| ffi::count(n).map(|n| n as i64))
            .collect::<R<_>>()?,
        bytes: displs,
        types: types.iter().map(|&h| committed(h)).collect::<R<_>>()?,
    })
}

/// An all-to-all of two sides (`send` already from the receive side for
/// `MPI_IN_PLACE`).
///
/// # Safety
/// MPI's contract for both buffers; `nb` as in [`go`].
unsafe fn alltoall_sides(
    send: Side,
    recv: Side,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let o = comm(c)?;
    if let Some(ic) = &o.inter {
        // SAFETY: the caller's contract.
        return unsafe { inter::alltoall_sides(ic, send, recv, c, nb) };
    }
    let w = intra(&o)?;
    if nb.is_none() {
        if let (Some(s), Some(r)) = (send.direct()?, recv.direct()?) {
            let apart = s.len == 0 || r.len == 0 || s.lo + s.len <= r.lo || r.lo + r.len <= s.lo;
            if apart && !overlapping(&r.blocks) {
                // SAFETY: MPI: each block of the send side holds its
                // data, each of the receive side has room for its data,
                // for the call; the two spans are apart (checked).
                let (sb, rb) = unsafe {
                    (
                        ffi::bytes(s.lo as *const c_void, 0, s.len),
                        ffi::bytes_mut(r.lo as *mut c_void, 0, r.len),
                    )
                };
                return Ok(w.alltoallv_direct(sb, &s.blocks, rb, &r.blocks)?);
            }
        }
    }
    let sblocks = send.blocks()?;
    let rblocks = recv.blocks()?;
    // SAFETY: the caller's contract.
    let data = unsafe { send.pack() }?;
    let total: usize = rblocks.iter().map(|b| b.1).sum();
    let finish: Finish = Finish::new(move |out: &[u8]| {
        // SAFETY: MPI: the receive buffer stays valid until the call (or
        // its request) completes: now.
        unsafe { recv.unpack(out) }
    });
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                w.alltoallv(&data, &sblocks, &mut out, &rblocks)?;
                Ok(out)
            },
            || {
                Ok(w.ialltoallv(
                    data.clone(),
                    sblocks.clone(),
                    vec![0u8; total],
                    rblocks.clone(),
                )?)
            },
            finish,
        )
    }
}

/// A committed datatype handle (`MPI_ERR_TYPE` before `MPI_Type_commit`).
fn committed(datatype: MPI_Datatype) -> R<Arc<TypeObj>> {
    let t = dtype(datatype)?;
    check(
        t.dt.is_committed(),
        MPI_ERR_TYPE,
        "datatype used before MPI_Type_commit",
    )?;
    Ok(t)
}

/// One side of an `MPI_Alltoall` whose `n` blocks of `count` elements
/// are each one contiguous range, equally spaced and apart: the span
/// holding them (start address and length), the block length and the
/// spacing. `None` when it is not so (a gap-free span too large for the
/// address space, overlapping or backward blocks, or a count the general
/// path is to report on).
fn equal_span(addr: usize, count: i64, t: &TypeObj, n: usize) -> Option<Span> {
    let Ok(Some((s, l))) = t.contig(count) else {
        return None;
    };
    if l == 0 || n == 0 {
        return Some(Span::default());
    }
    let step = usize::try_from(t.dt.extent().checked_mul(count as isize)?).ok()?;
    if step < l {
        return None;
    }
    let lo = addr.wrapping_add_signed(s);
    let len = (n - 1).checked_mul(step)?.checked_add(l)?;
    lo.checked_add(len)?;
    Some(Span {
        lo,
        len,
        block: l,
        step,
    })
}

/// The memory of one side of an `MPI_Alltoall` ([`equal_span`]).
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    /// Address of the first block.
    lo: usize,
    /// Bytes from the first block's start to the last one's end.
    len: usize,
    /// Bytes per block.
    block: usize,
    /// Bytes from one block's start to the next one's.
    step: usize,
}

impl Span {
    /// Each rank's block, (offset in the span, length), into `out`.
    fn blocks(self, out: &mut [(usize, usize)]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = if self.len == 0 {
                (0, 0)
            } else {
                (i * self.step, self.block)
            };
        }
    }
}

/// Communicators up to this size describe an `MPI_Alltoall`'s blocks on
/// the stack.
const STACK_RANKS: usize = 16;

/// Blocking `MPI_Alltoall` on an intracommunicator when both sides are
/// [`equal_span`]s apart from each other: straight between the buffers
/// ([`adi::Comm::alltoallv_direct`]), without per-rank descriptions of
/// the sides. The same checks, in the same order, as the general path;
/// `Ok(false)` when it does not apply (nothing done).
///
/// # Safety
/// MPI's contract for `MPI_Alltoall`'s buffers.
#[allow(clippy::too_many_arguments)]
unsafe fn alltoall_equal(
    sendbuf: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    c: MPI_Comm,
) -> R<bool> {
    let o = comm(c)?;
    if o.inter.is_some() || ffi::in_place(sendbuf) {
        return Ok(false);
    }
    let w = intra(&o)?;
    let n = w.size() as usize;
    let rc = ffi::count(rcount)? as i64;
    let rt = committed(rtype)?;
    let sc = ffi::count(scount)? as i64;
    let st = committed(stype)?;
    let (Some(s), Some(r)) = (
        equal_span(sendbuf as usize, sc, &st, n),
        equal_span(recvbuf as usize, rc, &rt, n),
    ) else {
        return Ok(false);
    };
    not_aliased(sendbuf, recvbuf, s.block.saturating_mul(n))?;
    let apart = s.len == 0 || r.len == 0 || s.lo + s.len <= r.lo || r.lo + r.len <= s.lo;
    if !apart {
        return Ok(false);
    }
    // SAFETY: MPI: the send buffer holds the `n` blocks of the call, the
    // receive buffer has room for them; each span is theirs, and the two
    // are apart (checked).
    let (sb, rb) = unsafe {
        (
            ffi::bytes(s.lo as *const c_void, 0, s.len),
            ffi::bytes_mut(r.lo as *mut c_void, 0, r.len),
        )
    };
    let mut stack = [(0usize, 0usize); 2 * STACK_RANKS];
    let mut heap = Vec::new();
    let all = if n <= STACK_RANKS {
        &mut stack[..2 * n]
    } else {
        heap.resize(2 * n, (0, 0));
        &mut heap[..]
    };
    let (sblocks, rblocks) = all.split_at_mut(n);
    s.blocks(sblocks);
    r.blocks(rblocks);
    w.alltoallv_direct(sb, sblocks, rb, rblocks)?;
    Ok(true)
}

/// Byte displacements of an `int` array.
fn bytes(d: &[c_int]) -> Vec<isize> {
    d.iter().map(|&v| v as isize).collect()
}

/// Equal counts and consecutive displacements for `n` ranks.
pub(crate) fn equal(n: i32, count: c_int) -> (Vec<c_int>, Vec<c_int>) {
    (
        vec![count; n as usize],
        (0..n).map(|i| i.wrapping_mul(count)).collect(),
    )
}

fn size_of(c: MPI_Comm) -> R<i32> {
    Ok(comm(c)?.comm.size())
}

// ---------------------------------------------------- the C functions

/// The request out-pointer of a nonblocking call.
fn nbreq(p: *mut MPI_Request) -> Option<*mut MPI_Request> {
    Some(p)
}

macro_rules! both {
    (
        $(#[$m:meta])* $mpi:ident / $pmpi:ident, $(#[$mi:meta])* $impi:ident / $ipmpi:ident,
        $c:ident, ( $($a:ident : $t:ty),* ), |$nb:ident| $body:expr
    ) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi($($a: $t),*) -> c_int {
                run(stringify!($mpi), On::Comm($c), || {
                    let $nb: Option<*mut MPI_Request> = None;
                    // SAFETY: MPI's contract for this call's arguments.
                    unsafe { $body }
                })
            }
        }
        mpi_fn! {
            $(#[$mi])*
            fn $impi / $ipmpi($($a: $t,)* request: *mut MPI_Request) -> c_int {
                run(stringify!($impi), On::Comm($c), || {
                    let $nb = nbreq(request);
                    // SAFETY: MPI's contract for this call's arguments;
                    // the buffers stay valid until the request completes.
                    unsafe { $body }
                })
            }
        }
    };
}

both!(
    /// `MPI_Barrier`.
    MPI_Barrier / PMPI_Barrier,
    /// `MPI_Ibarrier`.
    MPI_Ibarrier / PMPI_Ibarrier,
    c, (c: MPI_Comm), |nb| barrier(c, nb)
);

both!(
    /// `MPI_Bcast`.
    MPI_Bcast / PMPI_Bcast,
    /// `MPI_Ibcast`.
    MPI_Ibcast / PMPI_Ibcast,
    c, (buf: *mut c_void, count: c_int, datatype: MPI_Datatype, root: c_int, c: MPI_Comm),
    |nb| bcast(buf, count, datatype, root, c, nb)
);

both!(
    /// `MPI_Reduce`.
    MPI_Reduce / PMPI_Reduce,
    /// `MPI_Ireduce`.
    MPI_Ireduce / PMPI_Ireduce,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, root: c_int, c: MPI_Comm),
    |nb| reduce(sendbuf, recvbuf, count, datatype, op, root, c, nb)
);

both!(
    /// `MPI_Allreduce`.
    MPI_Allreduce / PMPI_Allreduce,
    /// `MPI_Iallreduce`.
    MPI_Iallreduce / PMPI_Iallreduce,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, c: MPI_Comm),
    |nb| allreduce(sendbuf, recvbuf, count, datatype, op, c, nb)
);

both!(
    /// `MPI_Scan`.
    MPI_Scan / PMPI_Scan,
    /// `MPI_Iscan`.
    MPI_Iscan / PMPI_Iscan,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, c: MPI_Comm),
    |nb| scan(sendbuf, recvbuf, count, datatype, op, c, false, nb)
);

both!(
    /// `MPI_Exscan`.
    MPI_Exscan / PMPI_Exscan,
    /// `MPI_Iexscan`.
    MPI_Iexscan / PMPI_Iexscan,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, count: c_int, datatype: MPI_Datatype, op: MPI_Op, c: MPI_Comm),
    |nb| scan(sendbuf, recvbuf, count, datatype, op, c, true, nb)
);

both!(
    /// `MPI_Reduce_scatter`.
    MPI_Reduce_scatter / PMPI_Reduce_scatter,
    /// `MPI_Ireduce_scatter`.
    MPI_Ireduce_scatter / PMPI_Ireduce_scatter,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, rcounts: *const c_int, datatype: MPI_Datatype, op: MPI_Op, c: MPI_Comm),
    |nb| {
        let n = local_size_of(c)?;
        reduce_scatter(sendbuf, recvbuf, ints(rcounts, n)?, datatype, op, c, nb)
    }
);

both!(
    /// `MPI_Reduce_scatter_block`.
    MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block,
    /// `MPI_Ireduce_scatter_block`.
    MPI_Ireduce_scatter_block / PMPI_Ireduce_scatter_block,
    c, (sendbuf: *const c_void, recvbuf: *mut c_void, rcount: c_int, datatype: MPI_Datatype, op: MPI_Op, c: MPI_Comm),
    |nb| {
        let n = local_size_of(c)?;
        ffi::count(rcount)?;
        reduce_scatter(sendbuf, recvbuf, &vec![rcount; n as usize], datatype, op, c, nb)
    }
);

/// Whether this rank is the root of communicator `c` (root-only
/// arguments are read only there).
fn is_root(c: MPI_Comm, root: c_int) -> R<bool> {
    let o = comm(c)?;
    Ok(match o.inter {
        Some(_) => root == MPI_ROOT,
        None => o.comm.rank() == root,
    })
}

/// The local group's size (`MPI_Comm_size`; the per-rank arrays of
/// reduce-scatter describe it, on an intercommunicator too).
fn local_size_of(c: MPI_Comm) -> R<i32> {
    Ok(comm(c)?.size())
}

/// `MPI_ERR_BUFFER` for `MPI_IN_PLACE` on an intercommunicator (where the
/// all-to-all forms' arrays describe the remote group).
fn in_place_here(c: MPI_Comm, sendbuf: *const c_void) -> R<bool> {
    let p = ffi::in_place(sendbuf);
    check(
        !(p && comm(c)?.inter.is_some()),
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is not defined on an intercommunicator",
    )?;
    Ok(p)
}

both!(
    /// `MPI_Gather`.
    MPI_Gather / PMPI_Gather,
    /// `MPI_Igather`.
    MPI_Igather / PMPI_Igather,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, root: c_int, c: MPI_Comm),
    |nb| {
        let (counts, displs) = if is_root(c, root)? {
            ffi::count(rcount)?;
            equal(size_of(c)?, rcount)
        } else {
            (Vec::new(), Vec::new())
        };
        gatherv(sendbuf, scount, stype, recvbuf, &counts, &displs, rtype, root, c, nb)
    }
);

both!(
    /// `MPI_Gatherv`.
    MPI_Gatherv / PMPI_Gatherv,
    /// `MPI_Igatherv`.
    MPI_Igatherv / PMPI_Igatherv,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, displs: *const c_int, rtype: MPI_Datatype, root: c_int, c: MPI_Comm),
    |nb| {
        let n = if is_root(c, root)? { size_of(c)? } else { 0 };
        gatherv(sendbuf, scount, stype, recvbuf, ints(rcounts, n)?, ints(displs, n)?, rtype, root, c, nb)
    }
);

both!(
    /// `MPI_Scatter`.
    MPI_Scatter / PMPI_Scatter,
    /// `MPI_Iscatter`.
    MPI_Iscatter / PMPI_Iscatter,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, root: c_int, c: MPI_Comm),
    |nb| {
        let (counts, displs) = if is_root(c, root)? {
            ffi::count(scount)?;
            equal(size_of(c)?, scount)
        } else {
            (Vec::new(), Vec::new())
        };
        scatterv(sendbuf, &counts, &displs, stype, recvbuf, rcount, rtype, root, c, nb)
    }
);

both!(
    /// `MPI_Scatterv`.
    MPI_Scatterv / PMPI_Scatterv,
    /// `MPI_Iscatterv`.
    MPI_Iscatterv / PMPI_Iscatterv,
    c, (sendbuf: *const c_void, scounts: *const c_int, displs: *const c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, root: c_int, c: MPI_Comm),
    |nb| {
        let n = if is_root(c, root)? { size_of(c)? } else { 0 };
        scatterv(sendbuf, ints(scounts, n)?, ints(displs, n)?, stype, recvbuf, rcount, rtype, root, c, nb)
    }
);

both!(
    /// `MPI_Allgather`.
    MPI_Allgather / PMPI_Allgather,
    /// `MPI_Iallgather`.
    MPI_Iallgather / PMPI_Iallgather,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        ffi::count(rcount)?;
        let (counts, displs) = equal(size_of(c)?, rcount);
        allgatherv(sendbuf, scount, stype, recvbuf, &counts, &displs, rtype, c, nb)
    }
);

both!(
    /// `MPI_Allgatherv`.
    MPI_Allgatherv / PMPI_Allgatherv,
    /// `MPI_Iallgatherv`.
    MPI_Iallgatherv / PMPI_Iallgatherv,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, displs: *const c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let n = size_of(c)?;
        allgatherv(sendbuf, scount, stype, recvbuf, ints(rcounts, n)?, ints(displs, n)?, rtype, c, nb)
    }
);

both!(
    /// `MPI_Alltoall`.
    MPI_Alltoall / PMPI_Alltoall,
    /// `MPI_Ialltoall`.
    MPI_Ialltoall / PMPI_Ialltoall,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        if nb.is_none() && alltoall_equal(sendbuf, scount, stype, recvbuf, rcount, rtype, c)? {
            return Ok(());
        }
        let n = size_of(c)?;
        ffi::count(rcount)?;
        let (rc, rd) = equal(n, rcount);
        let recv = side_v(recvbuf, &rc, &rd, rtype)?;
        let send = if in_place_here(c, sendbuf)? {
            side_v(recvbuf, &rc, &rd, rtype)?
        } else {
            ffi::count(scount)?;
            let (sc, sd) = equal(n, scount);
            let s = side_v(sendbuf, &sc, &sd, stype)?;
            not_aliased(sendbuf, recvbuf, s.blocks()?.iter().map(|b| b.1).sum())?;
            s
        };
        alltoall_sides(send, recv, c, nb)
    }
);

both!(
    /// `MPI_Alltoallv`.
    MPI_Alltoallv / PMPI_Alltoallv,
    /// `MPI_Ialltoallv`.
    MPI_Ialltoallv / PMPI_Ialltoallv,
    c, (sendbuf: *const c_void, scounts: *const c_int, sdispls: *const c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let n = size_of(c)?;
        let recv = side_v(recvbuf, ints(rcounts, n)?, ints(rdispls, n)?, rtype)?;
        let send = if in_place_here(c, sendbuf)? {
            side_v(recvbuf, ints(rcounts, n)?, ints(rdispls, n)?, rtype)?
        } else {
            side_v(sendbuf, ints(scounts, n)?, ints(sdispls, n)?, stype)?
        };
        alltoall_sides(send, recv, c, nb)
    }
);

both!(
    /// `MPI_Alltoallw`.
    MPI_Alltoallw / PMPI_Alltoallw,
    /// `MPI_Ialltoallw`.
    MPI_Ialltoallw / PMPI_Ialltoallw,
    c, (sendbuf: *const c_void, scounts: *const c_int, sdispls: *const c_int, stypes: *const MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rtypes: *const MPI_Datatype, c: MPI_Comm),
    |nb| {
        let n = size_of(c)?;
        let rts = ffi::array(rtypes, n as usize)?;
        let recv = side_w(recvbuf, ints(rcounts, n)?, bytes(ints(rdispls, n)?), rts)?;
        let send = if in_place_here(c, sendbuf)? {
            side_w(recvbuf, ints(rcounts, n)?, bytes(ints(rdispls, n)?), rts)?
        } else {
            let sts = ffi::array(stypes, n as usize)?;
            side_w(sendbuf, ints(scounts, n)?, bytes(ints(sdispls, n)?), sts)?
        };
        alltoall_sides(send, recv, c, nb)
    }
);
