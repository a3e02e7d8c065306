//! The FFI boundary: the macro that exports a function under its `MPI_`
//! and `PMPI_` names, and the helpers that turn the C caller's pointers
//! into Rust values. Every `unsafe` block of the crate relies on one
//! contract, the MPI standard's: the pointers a program passes are valid
//! for what the called function reads and writes (a buffer for `count`
//! elements of its datatype, an `int *` for an `int`, ...), for the
//! duration of the call, or, for a nonblocking operation, until it
//! completes.

use crate::abi::*;
use crate::err::{check, err, R};
use core::ffi::{c_char, c_int, c_void, CStr};

/// Exports an MPI function as `MPI_x` and `PMPI_x` (the profiling
/// interface: a tool's `MPI_x` may call our `PMPI_x`). The body is the
/// `PMPI_` one; `MPI_x` calls it.
macro_rules! mpi_fn {
    (
        $(#[$m:meta])*
        fn $mpi:ident / $pmpi:ident ( $($a:ident : $t:ty),* $(,)? ) -> $r:ty $body:block
    ) => {
        $(#[$m])*
        ///
        /// # Safety
        ///
        /// Called from C with arguments as the MPI standard describes
        /// them: every pointer valid for what the function reads and
        /// writes.
        #[no_mangle]
        pub unsafe extern "C" fn $mpi($($a: $t),*) -> $r {
            // SAFETY: the same arguments, under the same contract.
            unsafe { $pmpi($($a),*) }
        }

        /// The profiling-interface (`PMPI_`) name of the function above.
        ///
        /// # Safety
        ///
        /// As for the `MPI_` name.
        #[no_mangle]
        #[allow(unused_unsafe)]
        pub unsafe extern "C" fn $pmpi($($a: $t),*) -> $r $body
    };
}

/// Reads `*p` (`MPI_ERR_ARG` for a null pointer).
///
/// # Safety
/// `p` is null or points to a readable `T`.
pub(crate) unsafe fn get<T: Copy>(p: *const T) -> R<T> {
    check(!p.is_null(), MPI_ERR_ARG, "null pointer argument")?;
    // SAFETY: non-null, and readable by the caller's contract.
    Ok(unsafe { p.read_unaligned() })
}

/// Writes `v` to `*p` (`MPI_ERR_ARG` for a null pointer).
///
/// # Safety
/// `p` is null or points to a writable `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> R<()> {
    check(!p.is_null(), MPI_ERR_ARG, "null pointer argument")?;
    // SAFETY: non-null, and writable by the caller's contract.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// `n` values at `p` (an empty slice for `n == 0`, whatever `p`).
///
/// # Safety
/// For `n > 0`, `p` points to `n` readable `T`s that stay unchanged
/// while the slice is used.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize) -> R<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    check(!p.is_null(), MPI_ERR_ARG, "null array argument")?;
    check(
        p as usize % core::mem::align_of::<T>() == 0,
        MPI_ERR_ARG,
        "misaligned array argument",
    )?;
    // SAFETY: non-null, aligned, `n` elements by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts(p, n) })
}

/// `n` writable values at `p`.
///
/// # Safety
/// For `n > 0`, `p` points to `n` writable `T`s not otherwise accessed
/// while the slice is used.
pub(crate) unsafe fn array_mut<'a, T>(p: *mut T, n: usize) -> R<&'a mut [T]> {
    if n == 0 {
        return Ok(&mut []);
    }
    check(!p.is_null(), MPI_ERR_ARG, "null array argument")?;
    check(
        p as usize % core::mem::align_of::<T>() == 0,
        MPI_ERR_ARG,
        "misaligned array argument",
    )?;
    // SAFETY: non-null, aligned, `n` elements by the caller's contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(p, n) })
}

/// An `int` count argument as a length (`MPI_ERR_COUNT` if negative).
pub(crate) fn count(n: c_int) -> R<usize> {
    usize::try_from(n).map_err(|_| err(MPI_ERR_COUNT, format!("negative count {n}")))
}

/// The bytes `addr + lo .. addr + lo + len` of user memory.
///
/// # Safety
/// For `len > 0` the range is readable memory of the program that stays
/// unchanged while the slice is used (MPI's rule for send buffers).
pub(crate) unsafe fn bytes<'a>(addr: *const c_void, lo: isize, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    let p = (addr as *const u8).wrapping_offset(lo);
    // SAFETY: the caller's contract; `u8` has no alignment.
    unsafe { core::slice::from_raw_parts(p, len) }
}

/// The writable bytes `addr + lo .. addr + lo + len` of user memory.
///
/// # Safety
/// For `len > 0` the range is writable memory of the program that nothing
/// else accesses while the slice is used (MPI's rule for receive buffers).
pub(crate) unsafe fn bytes_mut<'a>(addr: *mut c_void, lo: isize, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    let p = (addr as *mut u8).wrapping_offset(lo);
    // SAFETY: the caller's contract; `u8` has no alignment.
    unsafe { core::slice::from_raw_parts_mut(p, len) }
}

/// A NUL-terminated C string as UTF-8 (lossy).
///
/// # Safety
/// `s` is null or a NUL-terminated string.
pub(crate) unsafe fn c_str(s: *const c_char) -> R<String> {
    check(!s.is_null(), MPI_ERR_ARG, "null string argument")?;
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    Ok(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

/// Whether a status pointer asks for no status (`NULL` is accepted too).
pub(crate) fn ignore_status(p: *mut MPI_Status) -> bool {
    p.is_null() || p as usize == MPI_STATUS_IGNORE
}

/// Writes `s` unless the pointer is `MPI_STATUS_IGNORE`.
///
/// # Safety
/// `p` is `MPI_STATUS_IGNORE`, null, or points to a writable status.
pub(crate) unsafe fn put_status(p: *mut MPI_Status, s: MPI_Status) {
    if !ignore_status(p) {
        // SAFETY: a status pointer that is not ignored is writable.
        unsafe { p.write_unaligned(s) };
    }
}

/// Whether `p` is `MPI_IN_PLACE`.
pub(crate) fn in_place(p: *const c_void) -> bool {
    p as usize == MPI_IN_PLACE
}

/// An `int` flag.
pub(crate) fn flag(b: bool) -> c_int {
    c_int::from(b)
}
