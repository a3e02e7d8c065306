//! Cache prefetch hints for lines the other core wrote or last read.
//!
//! Two-copy messaging moves every payload line between the two cores'
//! caches twice: the sender's copy-in takes ownership of lines the receiver
//! last read, the receiver's copy-out fetches lines the sender just wrote.
//! Each message's copy waits for its first misses. Issuing them one
//! message ahead overlaps that wait with the current message's work.
//!
//! A prefetch is only a hint: it never faults, whatever the address, and
//! changes no value, so no protocol depends on it. Under loom, and on
//! targets other than x86_64, the hints are no-ops.

/// Lines are this many bytes apart.
const LINE: usize = 64;

/// Hints that the line holding `p` is about to be read.
#[inline(always)]
pub(crate) fn read(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    // SAFETY: PREFETCHT0 (SSE, part of the x86_64 baseline) is a hint: it
    // does not fault on any address and writes nothing.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(all(target_arch = "x86_64", not(tmx_shmem_loom))))]
    let _ = p;
}

/// Hints that the line holding `p` is about to be written: its ownership
/// is requested now, invalidating other cores' copies. Call it only when
/// [`has_write`] said yes.
#[inline(always)]
fn write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    // SAFETY: PREFETCHW is a hint: it does not fault on any address and
    // writes nothing; callers run it only on a CPU whose CPUID reports it
    // (`has_write`). `core::arch` offers it only behind an unstable target
    // feature, hence the one instruction of inline assembly.
    unsafe {
        core::arch::asm!(
            "prefetchw [{0}]",
            in(reg) p,
            options(nostack, preserves_flags, readonly)
        )
    };
    #[cfg(not(all(target_arch = "x86_64", not(tmx_shmem_loom))))]
    let _ = p;
}

/// Whether this CPU has PREFETCHW (CPUID 8000_0001h, ECX bit 8), asked
/// once and remembered.
#[inline(always)]
fn has_write() -> bool {
    #[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
    {
        use core::sync::atomic::{AtomicU8, Ordering};
        // 0: not asked yet, 1: yes, 2: no.
        static HAS: AtomicU8 = AtomicU8::new(0);
        match HAS.load(Ordering::Relaxed) {
            1 => true,
            2 => false,
            _ => {
                let yes = prfchw_in_cpuid();
                HAS.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
                yes
            }
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(tmx_shmem_loom))))]
    false
}

/// CPUID's answer on PREFETCHW (asked out of line, once).
#[cfg(all(target_arch = "x86_64", not(tmx_shmem_loom)))]
#[cold]
fn prfchw_in_cpuid() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaf 8000_0001h exists only if the highest extended leaf reaches it.
    __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
}

/// [`read`] of every line of `[p, p + len)`.
#[inline(always)]
pub(crate) fn read_range(p: *const u8, len: usize) {
    each_line(p, len, read);
}

/// PREFETCHW of every line of `[p, p + len)`, on a CPU that has it
/// (nothing otherwise).
#[inline(always)]
pub(crate) fn write_range(p: *const u8, len: usize) {
    if has_write() {
        each_line(p, len, write);
    }
}

/// `hint` for the address of every line of `[p, p + len)`.
#[inline(always)]
fn each_line(p: *const u8, len: usize, hint: fn(*const u8)) {
    let mut o = 0;
    while o < len {
        hint(p.wrapping_add(o));
        o += LINE;
    }
}
