//! Datatypes: the predefined ones (MPICH's handles, names and sizes),
//! the constructors, and how a `(buffer, count, datatype)` triple of C
//! becomes bytes for `adi`.
//!
//! `adi`'s datatypes address a slice; a C buffer is an address. The
//! bytes `count` elements touch are `addr + true_lb .. addr + span_end`
//! ([`adi::Datatype::span`]); the library lends `adi` exactly that range
//! as a slice, with the type shifted so that its first data byte is the
//! slice's first byte ([`TypeObj::at_data`], made once per type). So a
//! type reaching below its buffer's address (negative displacements, or
//! absolute addresses from `MPI_BOTTOM`) works as it does in MPICH.

use crate::abi::*;
use crate::err::{check, err, run, MpiErr, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use adi::{BasicType, Datatype};
use core::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A datatype object.
#[derive(Debug)]
pub(crate) struct TypeObj {
    pub(crate) dt: Datatype,
    /// `dt` shifted so that its first data byte is at 0.
    at_data: OnceLock<Datatype>,
    pub(crate) name: Mutex<String>,
    /// Predefined types cannot be freed.
    pub(crate) predefined: bool,
}

impl TypeObj {
    pub(crate) fn new(dt: Datatype) -> TypeObj {
        TypeObj {
            dt,
            at_data: OnceLock::new(),
            name: Mutex::new(String::new()),
            predefined: false,
        }
    }

    /// The type relative to its first data byte (`true_lb`).
    fn at_data(&self) -> R<Datatype> {
        let lb = self.dt.true_lb();
        if lb == 0 {
            return Ok(self.dt.clone());
        }
        if let Some(t) = self.at_data.get() {
            return Ok(t.clone());
        }
        let t = Datatype::hindexed(&[1], &[-lb], &self.dt)?;
        t.commit()?;
        Ok(self.at_data.get_or_init(|| t).clone())
    }

    /// The contiguous byte range `(start, len)` `count` elements occupy,
    /// if they occupy one.
    pub(crate) fn contig(&self, count: i64) -> R<Option<(isize, usize)>> {
        Ok(self.dt.contiguous_range(count)?)
    }

    /// The byte range `count` elements touch: `(offset from addr, len)`.
    fn range(&self, count: i64) -> R<(isize, usize)> {
        let (lo, hi) = self.dt.span(count)?;
        let lo = isize::try_from(lo).map_err(|_| err(MPI_ERR_COUNT, "buffer span overflows"))?;
        let len = usize::try_from(hi - lo as i128)
            .map_err(|_| err(MPI_ERR_COUNT, "buffer span overflows"))?;
        Ok((lo, len))
    }

    /// The program's memory holding `count` elements at `addr`, as a
    /// slice and the type that addresses it.
    ///
    /// # Safety
    /// `addr` holds `count` elements of this type, readable and unchanged
    /// while the slice is used.
    pub(crate) unsafe fn view<'a>(
        &self,
        addr: *const c_void,
        count: i64,
    ) -> R<(&'a [u8], Datatype)> {
        self.check_committed()?;
        let (lo, len) = self.range(count)?;
        // SAFETY: the caller's contract covers exactly this range.
        let bytes = unsafe { ffi::bytes(addr, lo, len) };
        Ok((bytes, self.at_data()?))
    }

    /// [`view`](Self::view) for writing.
    ///
    /// # Safety
    /// `addr` holds room for `count` elements of this type, writable and
    /// accessed by nothing else while the slice is used.
    pub(crate) unsafe fn view_mut<'a>(
        &self,
        addr: *mut c_void,
        count: i64,
    ) -> R<(&'a mut [u8], Datatype)> {
        self.check_committed()?;
        let (lo, len) = self.range(count)?;
        // SAFETY: the caller's contract covers exactly this range.
        let bytes = unsafe { ffi::bytes_mut(addr, lo, len) };
        Ok((bytes, self.at_data()?))
    }

    fn check_committed(&self) -> R<()> {
        check(
            self.dt.is_committed(),
            MPI_ERR_TYPE,
            "datatype used before MPI_Type_commit",
        )
    }

    /// `count` elements at `addr`, packed into a new buffer.
    ///
    /// # Safety
    /// As for [`view`](Self::view).
    pub(crate) unsafe fn pack_from(&self, addr: *const c_void, count: i64) -> R<Vec<u8>> {
        self.check_committed()?;
        if let Some((start, len)) = self.contig(count)? {
            // SAFETY: the caller's contract; a contiguous range of it.
            return Ok(unsafe { ffi::bytes(addr, start, len) }.to_vec());
        }
        // SAFETY: the caller's contract.
        let (src, dt) = unsafe { self.view(addr, count) }?;
        let mut out = Vec::new();
        dt.pack_append(src, count, &mut out)?;
        Ok(out)
    }

    /// Unpacks `data` (packed bytes of up to `count` elements; a prefix
    /// is allowed) into the program's memory at `addr`.
    ///
    /// # Safety
    /// As for [`view_mut`](Self::view_mut).
    pub(crate) unsafe fn unpack_to(&self, addr: *mut c_void, count: i64, data: &[u8]) -> R<()> {
        self.check_committed()?;
        if let Some((start, len)) = self.contig(count)? {
            let n = data.len().min(len);
            // SAFETY: the caller's contract; a contiguous range of it.
            unsafe { ffi::bytes_mut(addr, start, n) }.copy_from_slice(&data[..n]);
            return Ok(());
        }
        // SAFETY: the caller's contract.
        let (dst, dt) = unsafe { self.view_mut(addr, count) }?;
        dt.unpack_part(data, dst, count, 0)?;
        Ok(())
    }

    /// The packed size of `count` elements.
    pub(crate) fn packed(&self, count: i64) -> R<usize> {
        Ok(self.dt.pack_size(count)?)
    }
}

/// The predefined datatypes: handle, name, representation.
const PREDEFINED: &[(MPI_Datatype, &str, BasicType)] = {
    use BasicType::*;
    &[
        (MPI_CHAR, "MPI_CHAR", Char),
        (MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR", I8),
        (MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR", U8),
        (MPI_BYTE, "MPI_BYTE", Byte),
        (MPI_WCHAR, "MPI_WCHAR", WChar),
        (MPI_SHORT, "MPI_SHORT", I16),
        (MPI_UNSIGNED_SHORT, "MPI_UNSIGNED_SHORT", U16),
        (MPI_INT, "MPI_INT", I32),
        (MPI_UNSIGNED, "MPI_UNSIGNED", U32),
        (MPI_LONG, "MPI_LONG", I64),
        (MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG", U64),
        (MPI_FLOAT, "MPI_FLOAT", F32),
        (MPI_DOUBLE, "MPI_DOUBLE", F64),
        (MPI_LONG_DOUBLE, "MPI_LONG_DOUBLE", LongDouble),
        (MPI_LONG_LONG_INT, "MPI_LONG_LONG_INT", I64),
        (MPI_UNSIGNED_LONG_LONG, "MPI_UNSIGNED_LONG_LONG", U64),
        (MPI_PACKED, "MPI_PACKED", Byte),
        (MPI_FLOAT_INT, "MPI_FLOAT_INT", FloatInt),
        (MPI_DOUBLE_INT, "MPI_DOUBLE_INT", DoubleInt),
        (MPI_LONG_INT, "MPI_LONG_INT", LongInt),
        (MPI_SHORT_INT, "MPI_SHORT_INT", ShortInt),
        (MPI_2INT, "MPI_2INT", TwoInt),
        (MPI_LONG_DOUBLE_INT, "MPI_LONG_DOUBLE_INT", LongDoubleInt),
        (MPI_COMPLEX, "MPI_COMPLEX", ComplexF32),
        (MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", ComplexF64),
        (MPI_LOGICAL, "MPI_LOGICAL", I32),
        (MPI_REAL, "MPI_REAL", F32),
        (MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION", F64),
        (MPI_INTEGER, "MPI_INTEGER", I32),
        (MPI_2INTEGER, "MPI_2INTEGER", TwoInt),
        (MPI_2REAL, "MPI_2REAL", TwoF32),
        (MPI_2DOUBLE_PRECISION, "MPI_2DOUBLE_PRECISION", TwoF64),
        (MPI_CHARACTER, "MPI_CHARACTER", Char),
        (MPI_REAL4, "MPI_REAL4", F32),
        (MPI_REAL8, "MPI_REAL8", F64),
        (MPI_REAL16, "MPI_REAL16", LongDouble),
        (MPI_COMPLEX8, "MPI_COMPLEX8", ComplexF32),
        (MPI_COMPLEX16, "MPI_COMPLEX16", ComplexF64),
        (MPI_COMPLEX32, "MPI_COMPLEX32", ComplexLongDouble),
        (MPI_INTEGER1, "MPI_INTEGER1", I8),
        (MPI_INTEGER2, "MPI_INTEGER2", I16),
        (MPI_INTEGER4, "MPI_INTEGER4", I32),
        (MPI_INTEGER8, "MPI_INTEGER8", I64),
        (MPI_INT8_T, "MPI_INT8_T", I8),
        (MPI_INT16_T, "MPI_INT16_T", I16),
        (MPI_INT32_T, "MPI_INT32_T", I32),
        (MPI_INT64_T, "MPI_INT64_T", I64),
        (MPI_UINT8_T, "MPI_UINT8_T", U8),
        (MPI_UINT16_T, "MPI_UINT16_T", U16),
        (MPI_UINT32_T, "MPI_UINT32_T", U32),
        (MPI_UINT64_T, "MPI_UINT64_T", U64),
        (MPI_C_BOOL, "MPI_C_BOOL", Bool),
        (MPI_C_FLOAT_COMPLEX, "MPI_C_COMPLEX", ComplexF32),
        (MPI_C_DOUBLE_COMPLEX, "MPI_C_DOUBLE_COMPLEX", ComplexF64),
        (
            MPI_C_LONG_DOUBLE_COMPLEX,
            "MPI_C_LONG_DOUBLE_COMPLEX",
            ComplexLongDouble,
        ),
        (MPI_AINT, "MPI_AINT", I64),
        (MPI_OFFSET, "MPI_OFFSET", I64),
        (MPI_COUNT, "MPI_COUNT", I64),
        (MPI_CXX_BOOL, "MPI_CXX_BOOL", Bool),
        (MPI_CXX_FLOAT_COMPLEX, "MPI_CXX_FLOAT_COMPLEX", ComplexF32),
        (MPI_CXX_DOUBLE_COMPLEX, "MPI_CXX_DOUBLE_COMPLEX", ComplexF64),
        (
            MPI_CXX_LONG_DOUBLE_COMPLEX,
            "MPI_CXX_LONG_DOUBLE_COMPLEX",
            ComplexLongDouble,
        ),
    ]
};

/// The predefined type objects, by handle.
#[derive(Debug)]
struct Predefined {
    /// `0x4c0000xx` handles by their low byte.
    builtin: Vec<Option<(MPI_Datatype, Arc<TypeObj>)>>,
    /// `0x8c00000x` handles (the pair types) by their low bits.
    pairs: Vec<Option<Arc<TypeObj>>>,
    /// Each `0x4c0000xx` handle whose elements are dense (size = extent,
    /// data from byte 0) with its element size, by its low byte; size 0
    /// for the others.
    dense: [(MPI_Datatype, u32); 256],
}

fn predefined() -> &'static Predefined {
    static P: OnceLock<Predefined> = OnceLock::new();
    P.get_or_init(|| {
        let mut p = Predefined {
            builtin: vec![None; 256],
            pairs: vec![None; 8],
            dense: [(MPI_DATATYPE_NULL, 0); 256],
        };
        for &(h, name, b) in PREDEFINED {
            let obj = Arc::new(TypeObj {
                dt: Datatype::basic(b),
                at_data: OnceLock::new(),
                name: Mutex::new(name.to_string()),
                predefined: true,
            });
            if h as u32 & 0xffff_0000 == 0x4c00_0000 {
                let dt = &obj.dt;
                let size = dt.size();
                if size > 0 && dt.extent() == size as isize && dt.lb() == 0 && dt.true_lb() == 0 {
                    p.dense[(h & 0xff) as usize] = (h, u32::try_from(size).unwrap_or(0));
                }
                p.builtin[(h & 0xff) as usize] = Some((h, obj));
            } else {
                p.pairs[(h & 0x7) as usize] = Some(obj);
            }
        }
        p
    })
}

/// The handle of the predefined type whose `adi` type is `dt`.
fn predefined_handle(dt: &Datatype) -> Option<MPI_Datatype> {
    let p = predefined();
    p.builtin
        .iter()
        .flatten()
        .find(|(_, o)| o.dt.same(dt))
        .map(|(h, _)| *h)
        .or_else(|| {
            p.pairs
                .iter()
                .enumerate()
                .find(|(_, o)| o.as_ref().is_some_and(|o| o.dt.same(dt)))
                .map(|(i, _)| (0x8c00_0000_u32 as i32) | i as i32)
        })
}

/// The derived datatypes.
pub(crate) static TYPES: Table<TypeObj> = Table::new(prefix::DATATYPE);

/// The datatype of handle `h` (`MPI_ERR_TYPE` if invalid).
pub(crate) fn dtype(h: MPI_Datatype) -> R<Arc<TypeObj>> {
    let bad = || err(MPI_ERR_TYPE, "invalid datatype");
    let u = h as u32;
    if u & 0xffff_0000 == 0x4c00_0000 {
        return match &predefined().builtin[(u & 0xff) as usize] {
            Some((hh, o)) if *hh == h => Ok(Arc::clone(o)),
            _ => Err(bad()),
        };
    }
    if u & 0xffff_fff8 == 0x8c00_0000 {
        return predefined().pairs[(u & 7) as usize].clone().ok_or_else(bad);
    }
    TYPES.get(h).ok_or_else(bad)
}

/// A datatype object borrowed for a call: a predefined one without a
/// reference count, a derived one shared.
#[derive(Debug)]
pub(crate) enum TypeRef {
    /// A predefined datatype (its object lives as long as the process).
    Predefined(&'static Arc<TypeObj>),
    /// A derived datatype.
    Shared(Arc<TypeObj>),
}

impl core::ops::Deref for TypeRef {
    type Target = TypeObj;
    #[inline(always)]
    fn deref(&self) -> &TypeObj {
        match self {
            TypeRef::Predefined(o) => o,
            TypeRef::Shared(o) => o,
        }
    }
}

impl TypeRef {
    /// The object as a shared reference (kept by a pending operation).
    pub(crate) fn to_arc(&self) -> Arc<TypeObj> {
        match self {
            TypeRef::Predefined(o) => Arc::clone(o),
            TypeRef::Shared(o) => Arc::clone(o),
        }
    }
}

/// [`dtype`] for the length of one call: a builtin datatype without a
/// reference count (the point-to-point calls' fast path).
#[inline]
pub(crate) fn dtype_ref(h: MPI_Datatype) -> R<TypeRef> {
    let u = h as u32;
    if u & 0xffff_0000 == 0x4c00_0000 {
        return match &predefined().builtin[(u & 0xff) as usize] {
            Some((hh, o)) if *hh == h => Ok(TypeRef::Predefined(o)),
            _ => Err(err(MPI_ERR_TYPE, "invalid datatype")),
        };
    }
    dtype(h).map(TypeRef::Shared)
}

/// The bytes `count` elements of predefined type `h` take, if `h` is a
/// predefined type whose elements are dense (every basic type: size =
/// extent, data from byte 0): the point-to-point calls' fast path, which
/// goes to `adi` with the bytes at once. `None` for any other handle
/// (derived, pair or invalid types: the general path decides).
/// `count` negative, or the bytes overflowing, is `MPI_ERR_COUNT`.
#[inline]
pub(crate) fn dense_bytes(h: MPI_Datatype, count: c_int) -> Option<R<usize>> {
    dense_size(h).map(|size| dense_len(count, size))
}

/// The size of one element of `h` if `h` is a predefined type whose
/// elements are dense (as [`dense_bytes`]); `None` for any other handle.
/// Answered in registers: the one-sided calls' fast path.
#[inline]
pub(crate) fn dense_size(h: MPI_Datatype) -> Option<usize> {
    let u = h as u32;
    if u & 0xffff_0000 != 0x4c00_0000 {
        return None;
    }
    let (hh, size) = predefined().dense[(u & 0xff) as usize];
    (hh == h && size != 0).then_some(size as usize)
}

/// The bytes of `count` elements of `size` bytes (`MPI_ERR_COUNT` if
/// `count` is negative or the bytes overflow).
#[inline]
pub(crate) fn dense_len(count: c_int, size: usize) -> R<usize> {
    crate::ffi::count(count).and_then(|n| {
        n.checked_mul(size)
            .ok_or_else(|| err(MPI_ERR_COUNT, "message size overflows"))
    })
}

/// A new handle for a derived type.
pub(crate) fn new_type(dt: Datatype) -> R<MPI_Datatype> {
    TYPES
        .insert(TypeObj::new(dt))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many datatypes"))
}

/// A handle for `dt` (`MPI_Type_get_contents`): the predefined handle,
/// or a new handle for a derived type (the program frees it).
fn handle_for(dt: &Datatype) -> R<MPI_Datatype> {
    match predefined_handle(dt) {
        Some(h) => Ok(h),
        None => new_type(dt.clone()),
    }
}

/// An `int` result: the value, or `MPI_UNDEFINED` if it does not fit.
fn int_or_undefined(v: i64) -> c_int {
    c_int::try_from(v).unwrap_or(MPI_UNDEFINED)
}

/// Writes a new type handle.
///
/// # Safety
/// `out` points to an `MPI_Datatype`.
unsafe fn put_new(out: *mut MPI_Datatype, dt: Datatype) -> R<()> {
    let h = new_type(dt)?;
    // SAFETY: the caller's contract.
    unsafe { ffi::put(out, h) }
}

/// The `i64`s of an `int` array.
///
/// # Safety
/// `p` holds `n` ints.
unsafe fn ints(p: *const c_int, n: usize) -> R<Vec<i64>> {
    // SAFETY: the caller's contract.
    Ok(unsafe { ffi::array(p, n) }?
        .iter()
        .map(|&v| v as i64)
        .collect())
}

/// The `isize`s of an `MPI_Aint` array.
///
/// # Safety
/// `p` holds `n` `MPI_Aint`s.
unsafe fn aints(p: *const MPI_Aint, n: usize) -> R<Vec<isize>> {
    // SAFETY: the caller's contract.
    Ok(unsafe { ffi::array(p, n) }?
        .iter()
        .map(|&v| v as isize)
        .collect())
}

mpi_fn! {
    /// `MPI_Type_size`.
    fn MPI_Type_size / PMPI_Type_size(datatype: MPI_Datatype, size: *mut c_int) -> c_int {
        run("MPI_Type_size", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `size` points to an int.
            unsafe { ffi::put(size, int_or_undefined(t.dt.size() as i64)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_size_x`.
    fn MPI_Type_size_x / PMPI_Type_size_x(datatype: MPI_Datatype, size: *mut MPI_Count) -> c_int {
        run("MPI_Type_size_x", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `size` points to an MPI_Count.
            unsafe { ffi::put(size, t.dt.size() as MPI_Count) }
        })
    }
}

/// Writes `(a, b)` to two `MPI_Aint`-like outputs.
///
/// # Safety
/// Both point to writable values.
unsafe fn put2<T>(a: *mut T, va: T, b: *mut T, vb: T) -> R<()> {
    // SAFETY: the caller's contract.
    unsafe {
        ffi::put(a, va)?;
        ffi::put(b, vb)
    }
}

mpi_fn! {
    /// `MPI_Type_get_extent`.
    fn MPI_Type_get_extent / PMPI_Type_get_extent(datatype: MPI_Datatype, lb: *mut MPI_Aint, extent: *mut MPI_Aint) -> c_int {
        run("MPI_Type_get_extent", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: both point to MPI_Aints.
            unsafe { put2(lb, t.dt.lb() as MPI_Aint, extent, t.dt.extent() as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_get_extent_x`.
    fn MPI_Type_get_extent_x / PMPI_Type_get_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count) -> c_int {
        run("MPI_Type_get_extent_x", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: both point to MPI_Counts.
            unsafe { put2(lb, t.dt.lb() as MPI_Count, extent, t.dt.extent() as MPI_Count) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_get_true_extent`.
    fn MPI_Type_get_true_extent / PMPI_Type_get_true_extent(datatype: MPI_Datatype, lb: *mut MPI_Aint, extent: *mut MPI_Aint) -> c_int {
        run("MPI_Type_get_true_extent", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: both point to MPI_Aints.
            unsafe { put2(lb, t.dt.true_lb() as MPI_Aint, extent, t.dt.true_extent() as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_get_true_extent_x`.
    fn MPI_Type_get_true_extent_x / PMPI_Type_get_true_extent_x(datatype: MPI_Datatype, lb: *mut MPI_Count, extent: *mut MPI_Count) -> c_int {
        run("MPI_Type_get_true_extent_x", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: both point to MPI_Counts.
            unsafe { put2(lb, t.dt.true_lb() as MPI_Count, extent, t.dt.true_extent() as MPI_Count) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_extent` (removed in MPI-3.0; MPICH still has it).
    fn MPI_Type_extent / PMPI_Type_extent(datatype: MPI_Datatype, extent: *mut MPI_Aint) -> c_int {
        run("MPI_Type_extent", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `extent` points to an MPI_Aint.
            unsafe { ffi::put(extent, t.dt.extent() as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_lb` (removed in MPI-3.0).
    fn MPI_Type_lb / PMPI_Type_lb(datatype: MPI_Datatype, lb: *mut MPI_Aint) -> c_int {
        run("MPI_Type_lb", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `lb` points to an MPI_Aint.
            unsafe { ffi::put(lb, t.dt.lb() as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_ub` (removed in MPI-3.0).
    fn MPI_Type_ub / PMPI_Type_ub(datatype: MPI_Datatype, ub: *mut MPI_Aint) -> c_int {
        run("MPI_Type_ub", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `ub` points to an MPI_Aint.
            unsafe { ffi::put(ub, t.dt.ub() as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_commit` (a no-op for predefined types).
    fn MPI_Type_commit / PMPI_Type_commit(datatype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_commit", On::World, || {
            // SAFETY: MPI: `datatype` points to a handle.
            let t = dtype(unsafe { ffi::get(datatype) }?)?;
            t.dt.commit()?;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Type_free`: the handle becomes `MPI_DATATYPE_NULL`; operations
    /// using the type keep it alive.
    fn MPI_Type_free / PMPI_Type_free(datatype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_free", On::World, || {
            // SAFETY: MPI: `datatype` points to a handle.
            let h = unsafe { ffi::get(datatype) }?;
            let t = dtype(h)?;
            check(!t.predefined, MPI_ERR_TYPE, "cannot free a predefined datatype")?;
            crate::attr::delete_all(crate::attr::Kind::Type, h)?;
            TYPES.remove(h);
            // SAFETY: as above.
            unsafe { ffi::put(datatype, MPI_DATATYPE_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_dup`.
    fn MPI_Type_dup / PMPI_Type_dup(oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_dup", On::World, || {
            let t = dtype(oldtype)?;
            let h = new_type(t.dt.dup()?)?;
            crate::attr::copy_all(crate::attr::Kind::Type, oldtype, h)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { ffi::put(newtype, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_contiguous`.
    fn MPI_Type_contiguous / PMPI_Type_contiguous(count: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_contiguous", On::World, || {
            ffi::count(count)?;
            let t = dtype(oldtype)?;
            let dt = Datatype::contiguous(count as i64, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_vector`.
    fn MPI_Type_vector / PMPI_Type_vector(count: c_int, blocklength: c_int, stride: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_vector", On::World, || {
            ffi::count(count)?;
            ffi::count(blocklength)?;
            let t = dtype(oldtype)?;
            let dt = Datatype::vector(count as i64, blocklength as i64, stride as i64, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

/// `MPI_Type_create_hvector` and `MPI_Type_hvector`.
fn hvector(
    count: c_int,
    blocklength: c_int,
    stride: MPI_Aint,
    oldtype: MPI_Datatype,
) -> R<Datatype> {
    ffi::count(count)?;
    ffi::count(blocklength)?;
    let t = dtype(oldtype)?;
    Ok(Datatype::hvector(
        count as i64,
        blocklength as i64,
        stride as isize,
        &t.dt,
    )?)
}

mpi_fn! {
    /// `MPI_Type_create_hvector`.
    fn MPI_Type_create_hvector / PMPI_Type_create_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_hvector", On::World, || {
            let dt = hvector(count, blocklength, stride, oldtype)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_hvector` (removed in MPI-3.0).
    fn MPI_Type_hvector / PMPI_Type_hvector(count: c_int, blocklength: c_int, stride: MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_hvector", On::World, || {
            let dt = hvector(count, blocklength, stride, oldtype)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_indexed`.
    fn MPI_Type_indexed / PMPI_Type_indexed(count: c_int, blocklengths: *const c_int, displs: *const c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_indexed", On::World, || {
            let n = ffi::count(count)?;
            let t = dtype(oldtype)?;
            // SAFETY: MPI: both arrays hold `count` ints.
            let (b, d) = unsafe { (ints(blocklengths, n)?, ints(displs, n)?) };
            let dt = Datatype::indexed(&b, &d, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

/// `MPI_Type_create_hindexed` and `MPI_Type_hindexed`.
///
/// # Safety
/// The arrays hold `count` values.
unsafe fn hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displs: *const MPI_Aint,
    oldtype: MPI_Datatype,
) -> R<Datatype> {
    let n = ffi::count(count)?;
    let t = dtype(oldtype)?;
    // SAFETY: the caller's contract.
    let (b, d) = unsafe { (ints(blocklengths, n)?, aints(displs, n)?) };
    Ok(Datatype::hindexed(&b, &d, &t.dt)?)
}

mpi_fn! {
    /// `MPI_Type_create_hindexed`.
    fn MPI_Type_create_hindexed / PMPI_Type_create_hindexed(count: c_int, blocklengths: *const c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_hindexed", On::World, || {
            // SAFETY: MPI: both arrays hold `count` values.
            let dt = unsafe { hindexed(count, blocklengths, displs, oldtype) }?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_hindexed` (removed in MPI-3.0).
    fn MPI_Type_hindexed / PMPI_Type_hindexed(count: c_int, blocklengths: *const c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_hindexed", On::World, || {
            // SAFETY: MPI: both arrays hold `count` values.
            let dt = unsafe { hindexed(count, blocklengths, displs, oldtype) }?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

/// `MPI_Type_create_struct` and `MPI_Type_struct`.
///
/// # Safety
/// The arrays hold `count` values.
unsafe fn struct_type(
    count: c_int,
    blocklengths: *const c_int,
    displs: *const MPI_Aint,
    types: *const MPI_Datatype,
) -> R<Datatype> {
    let n = ffi::count(count)?;
    // SAFETY: the caller's contract.
    let (b, d, ts) = unsafe {
        (
            ints(blocklengths, n)?,
            aints(displs, n)?,
            ffi::array(types, n)?,
        )
    };
    let ts: Vec<Datatype> = ts
        .iter()
        .map(|&h| dtype(h).map(|t| t.dt.clone()))
        .collect::<R<_>>()?;
    Ok(Datatype::struct_type(&b, &d, &ts)?)
}

mpi_fn! {
    /// `MPI_Type_create_struct`.
    fn MPI_Type_create_struct / PMPI_Type_create_struct(count: c_int, blocklengths: *const c_int, displs: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_struct", On::World, || {
            // SAFETY: MPI: the arrays hold `count` values.
            let dt = unsafe { struct_type(count, blocklengths, displs, types) }?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_struct` (removed in MPI-3.0).
    fn MPI_Type_struct / PMPI_Type_struct(count: c_int, blocklengths: *const c_int, displs: *const MPI_Aint, types: *const MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_struct", On::World, || {
            // SAFETY: MPI: the arrays hold `count` values.
            let dt = unsafe { struct_type(count, blocklengths, displs, types) }?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_create_resized`.
    fn MPI_Type_create_resized / PMPI_Type_create_resized(oldtype: MPI_Datatype, lb: MPI_Aint, extent: MPI_Aint, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_resized", On::World, || {
            let t = dtype(oldtype)?;
            let dt = Datatype::resized(&t.dt, lb as isize, extent as isize)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_set_name`.
    fn MPI_Type_set_name / PMPI_Type_set_name(datatype: MPI_Datatype, name: *const c_char) -> c_int {
        run("MPI_Type_set_name", On::World, || {
            let t = dtype(datatype)?;
            // SAFETY: MPI: `name` is a C string.
            let s = unsafe { ffi::c_str(name) }?;
            check(s.len() < MPI_MAX_OBJECT_NAME, MPI_ERR_ARG, "name too long")?;
            *t.name.lock().unwrap_or_else(PoisonError::into_inner) = s;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Type_get_name`.
    fn MPI_Type_get_name / PMPI_Type_get_name(datatype: MPI_Datatype, name: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Type_get_name", On::World, || {
            let t = dtype(datatype)?;
            let s = t.name.lock().unwrap_or_else(PoisonError::into_inner).clone();
            // SAFETY: MPI: `name` holds MPI_MAX_OBJECT_NAME chars.
            unsafe { crate::err::put_string(name, len, MPI_MAX_OBJECT_NAME, &s) }
        })
    }
}

mpi_fn! {
    /// `MPI_Get_address`.
    fn MPI_Get_address / PMPI_Get_address(location: *const c_void, address: *mut MPI_Aint) -> c_int {
        run("MPI_Get_address", On::World, || {
            // SAFETY: MPI: `address` points to an MPI_Aint.
            unsafe { ffi::put(address, location as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Address` (removed in MPI-3.0).
    fn MPI_Address / PMPI_Address(location: *const c_void, address: *mut MPI_Aint) -> c_int {
        run("MPI_Address", On::World, || {
            // SAFETY: MPI: `address` points to an MPI_Aint.
            unsafe { ffi::put(address, location as MPI_Aint) }
        })
    }
}

/// `MPI_Aint_add`.
#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

/// `MPI_Aint_add` (profiling name).
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: MPI_Aint, disp: MPI_Aint) -> MPI_Aint {
    base.wrapping_add(disp)
}

/// `MPI_Aint_diff`.
#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: MPI_Aint, b: MPI_Aint) -> MPI_Aint {
    a.wrapping_sub(b)
}

/// `MPI_Aint_diff` (profiling name).
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(a: MPI_Aint, b: MPI_Aint) -> MPI_Aint {
    a.wrapping_sub(b)
}

/// `MPI_Get_count` of a status: whole elements, or `MPI_UNDEFINED`.
fn get_count(st: &MPI_Status, t: &TypeObj) -> c_int {
    let bytes = st.count();
    match t.dt.size() {
        0 if bytes == 0 => 0,
        0 => MPI_UNDEFINED,
        s if bytes % s as i64 == 0 => int_or_undefined(bytes / s as i64),
        _ => MPI_UNDEFINED,
    }
}

mpi_fn! {
    /// `MPI_Get_count`.
    fn MPI_Get_count / PMPI_Get_count(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut c_int) -> c_int {
        run("MPI_Get_count", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            let st = unsafe { ffi::get(status) }?;
            let t = dtype(datatype)?;
            // SAFETY: MPI: `count` points to an int.
            unsafe { ffi::put(count, get_count(&st, &t)) }
        })
    }
}

/// `MPI_Get_elements`: basic elements in the status's bytes.
fn get_elements(st: &MPI_Status, t: &TypeObj) -> i64 {
    let bytes = usize::try_from(st.count()).unwrap_or(usize::MAX);
    t.dt.elements_in(bytes)
        .map_or(MPI_UNDEFINED as i64, |n| n as i64)
}

mpi_fn! {
    /// `MPI_Get_elements`.
    fn MPI_Get_elements / PMPI_Get_elements(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut c_int) -> c_int {
        run("MPI_Get_elements", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            let st = unsafe { ffi::get(status) }?;
            let t = dtype(datatype)?;
            // SAFETY: MPI: `count` points to an int.
            unsafe { ffi::put(count, int_or_undefined(get_elements(&st, &t))) }
        })
    }
}

mpi_fn! {
    /// `MPI_Get_elements_x`.
    fn MPI_Get_elements_x / PMPI_Get_elements_x(status: *const MPI_Status, datatype: MPI_Datatype, count: *mut MPI_Count) -> c_int {
        run("MPI_Get_elements_x", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            let st = unsafe { ffi::get(status) }?;
            let t = dtype(datatype)?;
            // SAFETY: MPI: `count` points to an MPI_Count.
            unsafe { ffi::put(count, get_elements(&st, &t)) }
        })
    }
}

/// Sets a status's byte count to `count` elements of `datatype`.
///
/// # Safety
/// `status` points to a status.
unsafe fn set_elements(status: *mut MPI_Status, datatype: MPI_Datatype, count: i64) -> R<()> {
    let t = dtype(datatype)?;
    check(count >= 0, MPI_ERR_COUNT, "negative count")?;
    // SAFETY: the caller's contract.
    let mut st = unsafe { ffi::get(status) }?;
    st.set_count(count * t.dt.size() as i64);
    // SAFETY: the caller's contract.
    unsafe { ffi::put(status, st) }
}

mpi_fn! {
    /// `MPI_Status_set_elements`.
    fn MPI_Status_set_elements / PMPI_Status_set_elements(status: *mut MPI_Status, datatype: MPI_Datatype, count: c_int) -> c_int {
        run("MPI_Status_set_elements", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            unsafe { set_elements(status, datatype, count as i64) }
        })
    }
}

mpi_fn! {
    /// `MPI_Status_set_elements_x`.
    fn MPI_Status_set_elements_x / PMPI_Status_set_elements_x(status: *mut MPI_Status, datatype: MPI_Datatype, count: MPI_Count) -> c_int {
        run("MPI_Status_set_elements_x", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            unsafe { set_elements(status, datatype, count) }
        })
    }
}

mpi_fn! {
    /// `MPI_Status_set_cancelled`.
    fn MPI_Status_set_cancelled / PMPI_Status_set_cancelled(status: *mut MPI_Status, flag: c_int) -> c_int {
        run("MPI_Status_set_cancelled", On::World, || {
            // SAFETY: MPI: `status` points to a status.
            let mut st = unsafe { ffi::get(status) }?;
            st.set_cancelled(flag != 0);
            // SAFETY: as above.
            unsafe { ffi::put(status, st) }
        })
    }
}

mpi_fn! {
    /// `MPI_Pack`.
    fn MPI_Pack / PMPI_Pack(inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: c_int, position: *mut c_int, comm: MPI_Comm) -> c_int {
        run("MPI_Pack", On::Comm(comm), || {
            crate::comm::comm(comm)?;
            let n = ffi::count(incount)?;
            let t = dtype(datatype)?;
            let size = ffi::count(outsize)?;
            // SAFETY: MPI: `position` points to an int.
            let pos = unsafe { ffi::get(position) }?;
            let mut p = ffi::count(pos)?;
            // SAFETY: MPI: `inbuf` holds `incount` elements, `outbuf` `outsize` bytes.
            let (src, dt) = unsafe { t.view(inbuf, n as i64) }?;
            // SAFETY: as above.
            let out = unsafe { ffi::bytes_mut(outbuf, 0, size) };
            dt.pack(src, n as i64, out, &mut p).map_err(|e| match e {
                adi::Error::Truncated { .. } | adi::Error::OffsetOutOfRange { .. } => {
                    err(MPI_ERR_TRUNCATE, "MPI_Pack: output buffer too small")
                }
                e => MpiErr::from(e),
            })?;
            // SAFETY: as above.
            unsafe { ffi::put(position, p as c_int) }
        })
    }
}

mpi_fn! {
    /// `MPI_Unpack`.
    fn MPI_Unpack / PMPI_Unpack(inbuf: *const c_void, insize: c_int, position: *mut c_int, outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype, comm: MPI_Comm) -> c_int {
        run("MPI_Unpack", On::Comm(comm), || {
            crate::comm::comm(comm)?;
            let n = ffi::count(outcount)?;
            let t = dtype(datatype)?;
            let size = ffi::count(insize)?;
            // SAFETY: MPI: `position` points to an int.
            let pos = unsafe { ffi::get(position) }?;
            let mut p = ffi::count(pos)?;
            // SAFETY: MPI: `inbuf` holds `insize` bytes, `outbuf` `outcount` elements.
            let input = unsafe { ffi::bytes(inbuf, 0, size) };
            // SAFETY: as above.
            let (dst, dt) = unsafe { t.view_mut(outbuf, n as i64) }?;
            dt.unpack(input, &mut p, dst, n as i64).map_err(|e| match e {
                adi::Error::Truncated { .. } | adi::Error::OffsetOutOfRange { .. } => {
                    err(MPI_ERR_TRUNCATE, "MPI_Unpack: input buffer too short")
                }
                e => MpiErr::from(e),
            })?;
            // SAFETY: as above.
            unsafe { ffi::put(position, p as c_int) }
        })
    }
}

mpi_fn! {
    /// `MPI_Pack_size`.
    fn MPI_Pack_size / PMPI_Pack_size(incount: c_int, datatype: MPI_Datatype, comm: MPI_Comm, size: *mut c_int) -> c_int {
        run("MPI_Pack_size", On::Comm(comm), || {
            crate::comm::comm(comm)?;
            let n = ffi::count(incount)?;
            let t = dtype(datatype)?;
            let s = t.packed(n as i64)?;
            // SAFETY: MPI: `size` points to an int.
            unsafe { ffi::put(size, int_or_undefined(s as i64)) }
        })
    }
}

/// `MPI_Type_match_size`: the predefined C type of a class and size.
fn match_size(class: c_int, size: c_int) -> R<MPI_Datatype> {
    let candidates: &[MPI_Datatype] = match class {
        MPI_TYPECLASS_INTEGER => &[MPI_SIGNED_CHAR, MPI_SHORT, MPI_INT, MPI_LONG],
        MPI_TYPECLASS_REAL => &[MPI_FLOAT, MPI_DOUBLE, MPI_LONG_DOUBLE],
        MPI_TYPECLASS_COMPLEX => &[
            MPI_C_FLOAT_COMPLEX,
            MPI_C_DOUBLE_COMPLEX,
            MPI_C_LONG_DOUBLE_COMPLEX,
        ],
        _ => return Err(err(MPI_ERR_ARG, "invalid type class")),
    };
    candidates
        .iter()
        .copied()
        .find(|&h| dtype(h).is_ok_and(|t| t.dt.size() as c_int == size))
        .ok_or_else(|| err(MPI_ERR_ARG, "no type of that class and size"))
}

mpi_fn! {
    /// `MPI_Type_match_size`.
    fn MPI_Type_match_size / PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_match_size", On::World, || {
            let h = match_size(typeclass, size)?;
            // SAFETY: MPI: `datatype` points to a handle.
            unsafe { ffi::put(datatype, h) }
        })
    }
}

/// The C combiner of an `adi` type.
fn combiner_code(c: adi::Combiner) -> c_int {
    use adi::Combiner as C;
    match c {
        C::Named => MPI_COMBINER_NAMED,
        C::Dup => MPI_COMBINER_DUP,
        C::Contiguous => MPI_COMBINER_CONTIGUOUS,
        C::Vector => MPI_COMBINER_VECTOR,
        C::Hvector => MPI_COMBINER_HVECTOR,
        C::Indexed => MPI_COMBINER_INDEXED,
        C::Hindexed => MPI_COMBINER_HINDEXED,
        C::IndexedBlock => MPI_COMBINER_INDEXED_BLOCK,
        C::HindexedBlock => MPI_COMBINER_HINDEXED_BLOCK,
        C::Struct => MPI_COMBINER_STRUCT,
        C::Subarray => MPI_COMBINER_SUBARRAY,
        C::Darray => MPI_COMBINER_DARRAY,
        C::Resized => MPI_COMBINER_RESIZED,
        _ => MPI_COMBINER_NAMED,
    }
}

mpi_fn! {
    /// `MPI_Type_get_envelope`.
    fn MPI_Type_get_envelope / PMPI_Type_get_envelope(datatype: MPI_Datatype, ni: *mut c_int, na: *mut c_int, nd: *mut c_int, combiner: *mut c_int) -> c_int {
        run("MPI_Type_get_envelope", On::World, || {
            let t = dtype(datatype)?;
            let (i, a, d, c) = match (t.predefined, t.dt.contents()) {
                (false, Some(c)) => (c.integers.len(), c.addresses.len(), c.types.len(), combiner_code(t.dt.combiner())),
                _ => (0, 0, 0, MPI_COMBINER_NAMED),
            };
            // SAFETY: MPI: the four point to ints.
            unsafe {
                ffi::put(ni, i as c_int)?;
                ffi::put(na, a as c_int)?;
                ffi::put(nd, d as c_int)?;
                ffi::put(combiner, c)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_get_contents`: derived datatypes come back as new handles.
    fn MPI_Type_get_contents / PMPI_Type_get_contents(datatype: MPI_Datatype, maxi: c_int, maxa: c_int, maxd: c_int, ints: *mut c_int, addrs: *mut MPI_Aint, types: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_get_contents", On::World, || {
            let t = dtype(datatype)?;
            let c = match (t.predefined, t.dt.contents()) {
                (false, Some(c)) => c,
                _ => return Err(err(MPI_ERR_TYPE, "a predefined datatype has no contents")),
            };
            check(
                c.integers.len() <= maxi.max(0) as usize
                    && c.addresses.len() <= maxa.max(0) as usize
                    && c.types.len() <= maxd.max(0) as usize,
                MPI_ERR_ARG,
                "arrays too short for the contents",
            )?;
            // SAFETY: MPI: the arrays hold `maxi`, `maxa`, `maxd` values.
            unsafe {
                let i = ffi::array_mut(ints, c.integers.len())?;
                for (o, v) in i.iter_mut().zip(&c.integers) {
                    *o = *v as c_int;
                }
                let a = ffi::array_mut(addrs, c.addresses.len())?;
                for (o, v) in a.iter_mut().zip(&c.addresses) {
                    *o = *v as MPI_Aint;
                }
                let d = ffi::array_mut(types, c.types.len())?;
                for (o, v) in d.iter_mut().zip(&c.types) {
                    *o = handle_for(v)?;
                }
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Type_create_indexed_block`.
    fn MPI_Type_create_indexed_block / PMPI_Type_create_indexed_block(count: c_int, blocklength: c_int, displs: *const c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_indexed_block", On::World, || {
            let n = ffi::count(count)?;
            ffi::count(blocklength)?;
            let t = dtype(oldtype)?;
            // SAFETY: MPI: `displs` holds `count` ints.
            let d = unsafe { ints(displs, n) }?;
            let dt = Datatype::indexed_block(blocklength as i64, &d, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_create_hindexed_block`.
    fn MPI_Type_create_hindexed_block / PMPI_Type_create_hindexed_block(count: c_int, blocklength: c_int, displs: *const MPI_Aint, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_hindexed_block", On::World, || {
            let n = ffi::count(count)?;
            ffi::count(blocklength)?;
            let t = dtype(oldtype)?;
            // SAFETY: MPI: `displs` holds `count` addresses.
            let d = unsafe { aints(displs, n) }?;
            let dt = Datatype::hindexed_block(blocklength as i64, &d, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

fn order(o: c_int) -> R<adi::datatype::Order> {
    match o {
        MPI_ORDER_C => Ok(adi::datatype::Order::C),
        MPI_ORDER_FORTRAN => Ok(adi::datatype::Order::Fortran),
        _ => Err(err(MPI_ERR_ARG, "invalid array order")),
    }
}

mpi_fn! {
    /// `MPI_Type_create_subarray`.
    fn MPI_Type_create_subarray / PMPI_Type_create_subarray(ndims: c_int, sizes: *const c_int, subsizes: *const c_int, starts: *const c_int, ord: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_subarray", On::World, || {
            check(ndims > 0, MPI_ERR_DIMS, "ndims must be positive")?;
            let n = ndims as usize;
            let t = dtype(oldtype)?;
            // SAFETY: MPI: the three arrays hold `ndims` ints.
            let (a, b, c) = unsafe { (ints(sizes, n)?, ints(subsizes, n)?, ints(starts, n)?) };
            let dt = Datatype::subarray(&a, &b, &c, order(ord)?, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

mpi_fn! {
    /// `MPI_Type_create_darray`.
    fn MPI_Type_create_darray / PMPI_Type_create_darray(size: c_int, rank: c_int, ndims: c_int, gsizes: *const c_int, distribs: *const c_int, dargs: *const c_int, psizes: *const c_int, ord: c_int, oldtype: MPI_Datatype, newtype: *mut MPI_Datatype) -> c_int {
        run("MPI_Type_create_darray", On::World, || {
            check(ndims > 0, MPI_ERR_DIMS, "ndims must be positive")?;
            let n = ndims as usize;
            let t = dtype(oldtype)?;
            // SAFETY: MPI: the arrays hold `ndims` ints.
            let (g, d, a, p) = unsafe { (ints(gsizes, n)?, ints(distribs, n)?, ints(dargs, n)?, ints(psizes, n)?) };
            use adi::datatype::Distribution as D;
            let darg = |v: i64| (v != MPI_DISTRIBUTE_DFLT_DARG as i64).then_some(v);
            let dist: Vec<D> = d
                .iter()
                .zip(&a)
                .map(|(&k, &v)| match k as c_int {
                    MPI_DISTRIBUTE_BLOCK => Ok(D::Block(darg(v))),
                    MPI_DISTRIBUTE_CYCLIC => Ok(D::Cyclic(darg(v))),
                    MPI_DISTRIBUTE_NONE => Ok(D::None),
                    _ => Err(err(MPI_ERR_ARG, "invalid distribution")),
                })
                .collect::<R<_>>()?;
            let dt = Datatype::darray(size, rank, &g, &dist, &p, order(ord)?, &t.dt)?;
            // SAFETY: MPI: `newtype` points to a handle.
            unsafe { put_new(newtype, dt) }
        })
    }
}

/// Only `external32` is a known data representation.
///
/// # Safety
/// `datarep` is a C string.
unsafe fn external32(datarep: *const c_char) -> R<()> {
    // SAFETY: the caller's contract.
    let d = unsafe { ffi::c_str(datarep) }?;
    check(
        d == "external32",
        MPI_ERR_ARG,
        "unknown data representation",
    )
}

mpi_fn! {
    /// `MPI_Pack_external` (`external32`).
    fn MPI_Pack_external / PMPI_Pack_external(datarep: *const c_char, inbuf: *const c_void, incount: c_int, datatype: MPI_Datatype, outbuf: *mut c_void, outsize: MPI_Aint, position: *mut MPI_Aint) -> c_int {
        run("MPI_Pack_external", On::World, || {
            // SAFETY: MPI: `datarep` is a C string.
            unsafe { external32(datarep) }?;
            let n = ffi::count(incount)? as i64;
            let t = dtype(datatype)?;
            let size = usize::try_from(outsize).map_err(|_| err(MPI_ERR_ARG, "negative size"))?;
            // SAFETY: MPI: `position` points to an MPI_Aint.
            let pos = unsafe { ffi::get(position) }?;
            let mut p = usize::try_from(pos).map_err(|_| err(MPI_ERR_ARG, "negative position"))?;
            // SAFETY: MPI: `inbuf` holds `incount` elements, `outbuf` `outsize` bytes.
            let (src, dt) = unsafe { t.view(inbuf, n) }?;
            // SAFETY: as above.
            let out = unsafe { ffi::bytes_mut(outbuf, 0, size) };
            dt.pack_external(src, n, out, &mut p)?;
            // SAFETY: as above.
            unsafe { ffi::put(position, p as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Unpack_external` (`external32`).
    fn MPI_Unpack_external / PMPI_Unpack_external(datarep: *const c_char, inbuf: *const c_void, insize: MPI_Aint, position: *mut MPI_Aint, outbuf: *mut c_void, outcount: c_int, datatype: MPI_Datatype) -> c_int {
        run("MPI_Unpack_external", On::World, || {
            // SAFETY: MPI: `datarep` is a C string.
            unsafe { external32(datarep) }?;
            let n = ffi::count(outcount)? as i64;
            let t = dtype(datatype)?;
            let size = usize::try_from(insize).map_err(|_| err(MPI_ERR_ARG, "negative size"))?;
            // SAFETY: MPI: `position` points to an MPI_Aint.
            let pos = unsafe { ffi::get(position) }?;
            let mut p = usize::try_from(pos).map_err(|_| err(MPI_ERR_ARG, "negative position"))?;
            // SAFETY: MPI: `inbuf` holds `insize` bytes, `outbuf` `outcount` elements.
            let input = unsafe { ffi::bytes(inbuf, 0, size) };
            // SAFETY: as above.
            let (dst, dt) = unsafe { t.view_mut(outbuf, n) }?;
            dt.unpack_external(input, &mut p, dst, n)?;
            // SAFETY: as above.
            unsafe { ffi::put(position, p as MPI_Aint) }
        })
    }
}

mpi_fn! {
    /// `MPI_Pack_external_size` (`external32`).
    fn MPI_Pack_external_size / PMPI_Pack_external_size(datarep: *const c_char, incount: c_int, datatype: MPI_Datatype, size: *mut MPI_Aint) -> c_int {
        run("MPI_Pack_external_size", On::World, || {
            // SAFETY: MPI: `datarep` is a C string.
            unsafe { external32(datarep) }?;
            let n = ffi::count(incount)? as i64;
            let t = dtype(datatype)?;
            let s = t.dt.pack_external_size(n)?;
            // SAFETY: MPI: `size` points to an MPI_Aint.
            unsafe { ffi::put(size, s as MPI_Aint) }
        })
    }
}

/// Drops every derived type (finalize).
pub(crate) fn finalize() {
    TYPES.clear();
}
