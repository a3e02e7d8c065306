//! Buffers sized by a caller's arguments (counts times extents, packed
//! messages, collectives' temporaries), allocated fallibly: a size the
//! system cannot give is [`Error::NoMem`] (`MPI_ERR_NO_MEM`), never a
//! "capacity overflow" panic or an allocation-failure abort.
//!
//! The memory is reserved first (`try_reserve_exact`) and only then zeroed,
//! so a request beyond the address space or beyond what the kernel will
//! commit fails cleanly. (A size the kernel commits but cannot back with
//! pages is left to the kernel's out-of-memory handling, as for any
//! allocation.)

use crate::Error;

/// `len` zero bytes, or [`Error::NoMem`].
pub(crate) fn zeroed(len: usize, what: &'static str) -> Result<Vec<u8>, Error> {
    let mut v = Vec::new();
    grow(&mut v, len, what)?;
    Ok(v)
}

/// Grows `v` with zeros to `len` bytes (no-op if it is that long already),
/// or [`Error::NoMem`] with `v` unchanged.
pub(crate) fn grow(v: &mut Vec<u8>, len: usize, what: &'static str) -> Result<(), Error> {
    if len > v.len() {
        v.try_reserve_exact(len - v.len())
            .map_err(|_| Error::NoMem { bytes: len, what })?;
        v.resize(len, 0);
    }
    Ok(())
}

/// `a * b` bytes, or [`Error::NoMem`] when the product overflows.
pub(crate) fn bytes(a: usize, b: usize, what: &'static str) -> Result<usize, Error> {
    a.checked_mul(b).ok_or(Error::NoMem {
        bytes: usize::MAX,
        what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_not_aborts() {
        for len in [usize::MAX, isize::MAX as usize, 1 << 45, 1 << 40] {
            let e = zeroed(len, "test").unwrap_err();
            assert_eq!(e.class(), crate::ErrorClass::NoMem, "{len}");
        }
        let mut v = vec![1u8; 4];
        assert!(grow(&mut v, usize::MAX, "test").is_err());
        assert_eq!(v, vec![1; 4]);
        grow(&mut v, 6, "test").unwrap();
        assert_eq!(v, vec![1, 1, 1, 1, 0, 0]);
        assert_eq!(zeroed(3, "test").unwrap(), vec![0; 3]);
        assert!(bytes(usize::MAX, 2, "test").is_err());
        assert_eq!(bytes(3, 4, "test").unwrap(), 12);
    }
}
