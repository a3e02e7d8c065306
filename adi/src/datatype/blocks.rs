//! The copy loops of packing and unpacking: blocks gathered from and
//! scattered into a user buffer ([`gather_blocks`], [`scatter_blocks`]).

use crate::Error;

/// The region of a buffer of `buf_len` bytes that `n` (> 0) blocks of `len`
/// bytes, `stride` apart from `start`, lie in, if the stride is at least
/// `len` (ascending, non-overlapping blocks): `(first byte, stride)`. The
/// copy loops then take the blocks as fixed-stride chunks of that region,
/// with one bounds check for the whole run.
#[inline(always)]
fn ascending(
    start: isize,
    len: usize,
    n: usize,
    stride: isize,
    buf_len: usize,
) -> Option<(usize, usize)> {
    let s0 = usize::try_from(start).ok()?;
    let st = usize::try_from(stride).ok().filter(|&st| st >= len)?;
    let span = (n - 1).checked_mul(st)?.checked_add(len)?;
    (s0.checked_add(span)? <= buf_len).then_some((s0, st))
}

/// Gathers `to.len() / len` blocks of `len` bytes from `src` (block `k` at
/// `start + k * stride`) into `to`. Fixed small lengths get fixed-size
/// copies (a vector of doubles moves 8 bytes per block without a call);
/// ascending runs are checked once, not per block.
#[inline]
pub(super) fn gather_blocks(
    src: &[u8],
    start: isize,
    len: usize,
    stride: isize,
    to: &mut [u8],
) -> Result<(), Error> {
    #[inline(always)]
    fn gather<const L: usize>(
        src: &[u8],
        start: isize,
        len: usize,
        stride: isize,
        to: &mut [u8],
    ) -> Result<(), Error> {
        let len = if L == 0 { len } else { L };
        let n = to.len() / len;
        if n == 0 {
            return Ok(());
        }
        if let Some((s0, st)) = ascending(start, len, n, stride, src.len()) {
            let region = &src[s0..s0 + (n - 1) * st + len];
            if (L == 4 || L == 8) && fixed_stride(L, st) {
                gather_fixed_stride(L, st, region, to);
                return Ok(());
            }
            let (head, last) = to.split_at_mut((n - 1) * len);
            for (o, c) in head.chunks_exact_mut(len).zip(region.chunks_exact(st)) {
                o.copy_from_slice(&c[..len]);
            }
            last.copy_from_slice(&region[(n - 1) * st..]);
            return Ok(());
        }
        let mut a = start;
        for o in to.chunks_exact_mut(len) {
            let s = usize::try_from(a).ok().and_then(|s| src.get(s..s + len));
            o.copy_from_slice(s.ok_or_else(|| oob(a, len, src.len()))?);
            a += stride;
        }
        Ok(())
    }
    match len {
        1 => gather::<1>(src, start, len, stride, to),
        2 => gather::<2>(src, start, len, stride, to),
        4 => gather::<4>(src, start, len, stride, to),
        8 => gather::<8>(src, start, len, stride, to),
        16 => gather::<16>(src, start, len, stride, to),
        _ => gather::<0>(src, start, len, stride, to),
    }
}

/// The stack chunk [`append_blocks`] gathers small blocks in (2 KiB: it
/// stays in the L1 cache, and is appended with vector moves).
pub(super) const APPEND_CHUNK: usize = 2048;

/// Appends to `out` the `n` blocks of `len` bytes of `src` (block `k` at
/// `start + k * stride`): the bytes [`gather_blocks`] would write into a
/// slice of `n * len`, without a zero-filled slice to overwrite. Blocks
/// of a quarter of `chunk` or more are appended from `src` as they are;
/// smaller ones are gathered `chunk` by `chunk` (a buffer that stays in
/// the L1 cache) and appended from there, so the copy loops of
/// [`gather_blocks`] still move them.
pub(super) fn append_blocks(
    src: &[u8],
    start: isize,
    len: usize,
    n: usize,
    stride: isize,
    chunk: &mut [u8; APPEND_CHUNK],
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    if len == 0 || n == 0 {
        return Ok(());
    }
    // Block `k`'s offset in `src` (checked: a block outside is reported).
    let at = |k: usize| {
        isize::try_from(k)
            .ok()
            .and_then(|k| k.checked_mul(stride))
            .and_then(|d| d.checked_add(start))
            .ok_or_else(|| oob(start, len, src.len()))
    };
    if len >= APPEND_CHUNK / 4 || n == 1 {
        for k in 0..n {
            let a = at(k)?;
            let s = usize::try_from(a)
                .ok()
                .and_then(|s| src.get(s..s.checked_add(len)?));
            out.extend_from_slice(s.ok_or_else(|| oob(a, len, src.len()))?);
        }
        return Ok(());
    }
    let per = APPEND_CHUNK / len;
    let mut k = 0;
    while k < n {
        let m = per.min(n - k);
        let to = &mut chunk[..m * len];
        gather_blocks(src, at(k)?, len, stride, to)?;
        out.extend_from_slice(to);
        k += m;
    }
    Ok(())
}

/// Whether blocks of `len` bytes `st` apart have a copy loop of their own
/// ([`gather_fixed_stride`]): 4- or 8-byte blocks (an `int`, `float` or
/// `double`) every second, third or fourth one (a vector with a stride of
/// 2–4 elements: the real parts of complex numbers, one field of a
/// three- or four-field record, a column of a narrow matrix).
#[inline(always)]
fn fixed_stride(len: usize, st: usize) -> bool {
    (len == 4 || len == 8) && (st == 2 * len || st == 3 * len || st == 4 * len)
}

/// [`gather_blocks`] for the ascending runs [`fixed_stride`] accepts:
/// `region` starts with the first block and ends with the last. With the
/// block and the stride constants, the compiler copies two 8-byte blocks
/// per 16-byte store at a stride of two (measured, `MPI_Type_vector(1024,
/// 1, 2, MPI_DOUBLE)` in cache: 0.16 µs against 0.21 with the stride in
/// a register).
fn gather_fixed_stride(len: usize, st: usize, region: &[u8], to: &mut [u8]) {
    match (len, st / len) {
        (4, 2) => gather_fixed::<4, 8>(region, to),
        (4, 3) => gather_fixed::<4, 12>(region, to),
        (4, _) => gather_fixed::<4, 16>(region, to),
        (_, 2) => gather_fixed::<8, 16>(region, to),
        (_, 3) => gather_fixed::<8, 24>(region, to),
        _ => gather_fixed::<8, 32>(region, to),
    }
}

/// [`gather_fixed_stride`] for one block size `L` and stride `ST`.
#[inline(never)]
fn gather_fixed<const L: usize, const ST: usize>(region: &[u8], to: &mut [u8]) {
    let n = to.len() / L;
    if n == 0 {
        return;
    }
    let (head, last) = to.split_at_mut((n - 1) * L);
    for (o, c) in head.chunks_exact_mut(L).zip(region.chunks_exact(ST)) {
        o.copy_from_slice(&c[..L]);
    }
    last.copy_from_slice(&region[(n - 1) * ST..]);
}

/// [`scatter_blocks`] for the ascending runs [`fixed_stride`] accepts: the
/// inverse of [`gather_fixed_stride`].
fn scatter_fixed_stride(len: usize, st: usize, from: &[u8], region: &mut [u8]) {
    match (len, st / len) {
        (4, 2) => scatter_fixed::<4, 8>(from, region),
        (4, 3) => scatter_fixed::<4, 12>(from, region),
        (4, _) => scatter_fixed::<4, 16>(from, region),
        (_, 2) => scatter_fixed::<8, 16>(from, region),
        (_, 3) => scatter_fixed::<8, 24>(from, region),
        _ => scatter_fixed::<8, 32>(from, region),
    }
}

/// [`scatter_fixed_stride`] for one block size `L` and stride `ST`.
#[inline(never)]
fn scatter_fixed<const L: usize, const ST: usize>(from: &[u8], region: &mut [u8]) {
    let n = from.len() / L;
    if n == 0 {
        return;
    }
    let (head, last) = from.split_at((n - 1) * L);
    let (body, tail) = region.split_at_mut((n - 1) * ST);
    for (i, c) in head.chunks_exact(L).zip(body.chunks_exact_mut(ST)) {
        c[..L].copy_from_slice(i);
    }
    tail.copy_from_slice(last);
}

/// Scatters `from` in blocks of `len` bytes into `dst` (block `k` at
/// `start + k * stride`); the inverse of [`gather_blocks`].
#[inline]
pub(super) fn scatter_blocks(
    from: &[u8],
    start: isize,
    len: usize,
    stride: isize,
    dst: &mut [u8],
) -> Result<(), Error> {
    #[inline(always)]
    fn scatter<const L: usize>(
        from: &[u8],
        start: isize,
        len: usize,
        stride: isize,
        dst: &mut [u8],
    ) -> Result<(), Error> {
        let len = if L == 0 { len } else { L };
        let n = from.len() / len;
        if n == 0 {
            return Ok(());
        }
        let dst_len = dst.len();
        if let Some((s0, st)) = ascending(start, len, n, stride, dst_len) {
            let region = &mut dst[s0..s0 + (n - 1) * st + len];
            if (L == 4 || L == 8) && fixed_stride(L, st) {
                scatter_fixed_stride(L, st, from, region);
                return Ok(());
            }
            let (head, last) = from.split_at((n - 1) * len);
            let (body, tail) = region.split_at_mut((n - 1) * st);
            for (i, c) in head.chunks_exact(len).zip(body.chunks_exact_mut(st)) {
                c[..len].copy_from_slice(i);
            }
            tail.copy_from_slice(last);
            return Ok(());
        }
        let mut a = start;
        for i in from.chunks_exact(len) {
            let d = usize::try_from(a)
                .ok()
                .and_then(|s| dst.get_mut(s..s + len));
            d.ok_or_else(|| oob(a, len, dst_len))?.copy_from_slice(i);
            a += stride;
        }
        Ok(())
    }
    match len {
        1 => scatter::<1>(from, start, len, stride, dst),
        2 => scatter::<2>(from, start, len, stride, dst),
        4 => scatter::<4>(from, start, len, stride, dst),
        8 => scatter::<8>(from, start, len, stride, dst),
        16 => scatter::<16>(from, start, len, stride, dst),
        _ => scatter::<0>(from, start, len, stride, dst),
    }
}

/// A block outside the buffer: unreachable after the buffer checks, and
/// reported rather than trusted.
#[cold]
fn oob(at: isize, len: usize, buf: usize) -> Error {
    Error::BufferOutOfBounds {
        lo: at as i128,
        hi: at as i128 + len as i128,
        len: buf,
    }
}
