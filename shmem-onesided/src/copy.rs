//! The sender's copy of a payload into its eager block.
//!
//! A buffered message's block was last read by the receiver's core, so
//! the sender's stores must first take ownership of each of its lines.
//! `memcpy`'s vector loop does that line by line with read-for-ownership
//! requests, and the receiver's next copy-out waits for the last of them
//! (the header is published after the payload). `rep movsb` on a CPU with
//! ERMS ("enhanced rep movsb", CPUID 7.0:EBX bit 9) writes whole lines
//! without reading them first. glibc's `memcpy` switches to it only from
//! `x86_rep_movsb_threshold` (2,112 bytes on the project's VM), and
//! below that a ping-pong of 1.1–2 KiB messages ran 1.21–1.27× slower
//! than with `rep movsb`.
//!
//! [`to_block`] takes `rep movsb` from a threshold
//! (`TMX_SHMEM_TUNE=movsb_min`, default 1K) on CPUs with ERMS and `memcpy`
//! otherwise; under loom and on other targets always `memcpy`.

/// Copies `n` bytes from `src` to `dst`, with `rep movsb` when `n >=
/// movsb_min` (which [`movsb_min`] set to `usize::MAX` where it is not
/// available).
///
/// # Safety
/// As [`core::ptr::copy_nonoverlapping`]: `src` valid for `n` reads, `dst`
/// for `n` writes, the two not overlapping.
#[inline(always)]
pub(crate) unsafe fn to_block(src: *const u8, dst: *mut u8, n: usize, movsb_min: usize) {
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    if n >= movsb_min {
        // SAFETY: the caller's contract (valid, non-overlapping ranges of
        // `n` bytes); the direction flag is clear at every call (System V
        // ABI), so the copy goes forward from `src` and `dst`.
        unsafe {
            core::arch::asm!(
                "rep movsb",
                inout("rcx") n => _,
                inout("rsi") src => _,
                inout("rdi") dst => _,
                options(nostack, preserves_flags)
            )
        };
        return;
    }
    #[cfg(not(all(target_arch = "x86_64", not(tmx_shmem_loom))))]
    let _ = movsb_min;
    // SAFETY: the caller's contract.
    unsafe { core::ptr::copy_nonoverlapping(src, dst, n) }
}

/// The threshold [`to_block`] is given for a configured `TMX_SHMEM_TUNE=movsb_min`
/// of `configured` bytes (`u64::MAX`: off): `usize::MAX` (never) where the
/// CPU lacks ERMS, under loom and on other targets.
pub(crate) fn movsb_min(configured: u64) -> usize {
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    {
        if has_erms() {
            return usize::try_from(configured).unwrap_or(usize::MAX);
        }
    }
    let _ = configured;
    usize::MAX
}

/// Whether CPUID reports ERMS (leaf 7, subleaf 0, EBX bit 9).
#[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
fn has_erms() -> bool {
    use core::arch::x86_64::{__cpuid, __cpuid_count};
    __cpuid(0).eax >= 7 && __cpuid_count(7, 0).ebx & (1 << 9) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length and misalignment around the threshold copies exactly
    /// `n` bytes, on both paths.
    #[test]
    fn to_block_copies_exactly_n_bytes() {
        let src: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
        for min in [0usize, 64, usize::MAX] {
            for n in [0usize, 1, 63, 64, 65, 1023, 1024, 1025, 2111, 2112, 2500] {
                for off in [0usize, 1, 7] {
                    let mut dst = vec![0xeeu8; n + 16];
                    // SAFETY: `src[off..off + n]` and `dst[..n]` are in
                    // bounds and distinct allocations.
                    unsafe { to_block(src.as_ptr().add(off), dst.as_mut_ptr(), n, min) };
                    assert_eq!(dst[..n], src[off..off + n], "n {n} off {off} min {min}");
                    assert!(dst[n..].iter().all(|&b| b == 0xee), "wrote past n");
                }
            }
        }
    }

    #[test]
    fn off_is_never() {
        assert_eq!(movsb_min(u64::MAX), usize::MAX);
    }
}
