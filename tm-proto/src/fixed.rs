//! Fixed-size fields at the start of a buffer, with typed errors: the one place
//! that turns "too short" into [`Error::BufferTooSmall`] / [`Error::Truncated`].

use crate::Error;

/// Copies `bytes` to the start of `dst`; returns `N`.
pub(crate) fn write<const N: usize>(
    dst: &mut [u8],
    what: &'static str,
    bytes: [u8; N],
) -> Result<usize, Error> {
    let got = dst.len();
    let out = dst
        .get_mut(..N)
        .ok_or(Error::BufferTooSmall { what, need: N, got })?;
    out.copy_from_slice(&bytes);
    Ok(N)
}

/// The first `N` bytes of `src` (extra bytes are left alone).
pub(crate) fn read<'a, const N: usize>(
    src: &'a [u8],
    what: &'static str,
) -> Result<&'a [u8; N], Error> {
    src.get(..N)
        .and_then(|s| s.try_into().ok())
        .ok_or(Error::Truncated {
            what,
            need: N,
            got: src.len(),
        })
}
