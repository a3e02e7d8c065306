//! Eager blocks: copying payloads into the sender's eager area and out of a
//! peer's, release flags, prefetch hints, and copying messages out for a
//! sender under eager pressure.

use super::*;

/// Bytes before the data in an eager block (the release flag's cache line).
pub(super) const EAGER_PREFIX: u64 = 64;

#[inline]
pub(super) fn eager_flag(seg: &Segment, pe: u32, off: u64) -> &AtomicU32 {
    // SAFETY: `off` is the start of an eager block inside pe's eager area
    // (checked by the caller against eager_bytes), 64-byte aligned; the
    // word is valid for any bit pattern and lives as long as the mapping.
    unsafe { AtomicU32::from_ptr(seg.eager_ptr(pe).add(off as usize).cast()) }
}

/// Whether the receiver released our eager block at `off` (its flag).
#[inline]
pub(super) fn released(seg: &Segment) -> impl Fn(u64) -> bool + '_ {
    let me = seg.rank();
    move |off| eager_flag(seg, me, off).load(Ordering::Acquire) == 1
}

/// Checks an eager or fragment header against the sender's eager area of
/// `area` bytes; returns the data's offset in that area.
#[inline]
pub(super) fn eager_src(area: u64, h: &Header) -> Result<u64> {
    let ok = h.word % 64 == 0
        && h.word
            .checked_add(EAGER_PREFIX)
            .and_then(|x| x.checked_add(eager_len(h)))
            .is_some_and(|end| end <= area);
    if ok {
        Ok(h.word + EAGER_PREFIX)
    } else {
        Err(Error::BadHeader {
            source_pe: h.source,
            reason: "eager block outside the sender's eager area",
        })
    }
}

/// Largest eager payload for which the receiver's prefetch hint of
/// [`crate::prefetch`] is given (for the next message's block). Above it
/// a copy-out streams well enough by itself: at 4 and 8 KiB the hint (and
/// the early look at the next header) cost 1–6%.
pub(super) const PREFETCH_MAX: u64 = 2048;

/// Largest eager payload for which the sender's hint is given (`PREFETCHW`
/// of the block its next send of the same size takes). Up to 8 KiB the
/// sender's copy-in is what a window waits for: it takes ownership of
/// every line of a block the receiver's core last read. Raised from 2 KiB
/// on 2026-11-27 (one-size paired runs, 60 pairs each, median ratio
/// against 2 KiB): bandwidth 1.14× at 4 KiB and 1.09× at 8 KiB,
/// bi-bandwidth 1.10× and 1.04×; at 16 and 32 KiB it did not pay (0.91–1.01).
/// (A scratch both-ways window of bare endpoints was a third slower at
/// 4 KiB with the hint; the ADI's windows did not show it.)
pub(super) const PREFETCH_WRITE_MAX: u64 = 8192;

/// Bytes of a step of the sender's copy into its eager block, after each
/// of which it prefetches the matching part of the next block
/// ([`PREFETCH_WRITE_MAX`]), for payloads of at least four steps sent
/// while no receive is outstanding (a streaming sender). Prefetched after
/// the whole copy instead, the next block's ownership requests stalled
/// the sender on full line fill buffers. With 1 KiB steps for every
/// sender, A-B-B-A against the whole-copy order: `bw` 4 KiB 1.05–1.20,
/// 8 KiB 1.07–1.18; but `bibw` (both ranks copying in and out) 8 KiB
/// 0.96–0.98 and 2 KiB 0.95, hence a streaming sender and four steps.
pub(super) const PREFETCH_STEP: usize = 1024;

/// Copies an eager payload into `dst` (at most `dst.len()` bytes) and
/// releases the sender's block.
pub(super) fn get_eager(seg: &Segment, area: u64, h: &Header, dst: &mut [u8]) -> Result<()> {
    let src = eager_src(area, h)?;
    let n = (dst.len() as u64).min(eager_len(h)) as usize;
    // SAFETY: [src, src + n) is inside the sender's eager area (eager_src
    // checked src + eager_len <= area, and n <= eager_len); the sender wrote
    // it before publishing the header we acquired and does not reuse it
    // before we raise the flag below. `dst` is private memory.
    unsafe {
        core::ptr::copy_nonoverlapping(
            seg.eager_ptr(h.source).add(src as usize),
            dst.as_mut_ptr(),
            n,
        )
    };
    eager_flag(seg, h.source, h.word).store(1, Ordering::Release);
    Ok(())
}

/// Copies the payloads of consecutive fragments `frags` into `dst` (the
/// first at offset 0; clipped to `dst.len()`) and releases their blocks.
/// The headers were checked by `take_fragment` (`eager_src`).
pub(super) fn copy_fragments(seg: &Segment, area: u64, frags: &[Header], dst: &mut [u8]) {
    let mut at = 0usize;
    for f in frags {
        let n = eager_len(f) as usize;
        let (lo, hi) = (at.min(dst.len()), at.saturating_add(n).min(dst.len()));
        let _ = get_eager(seg, area, f, &mut dst[lo..hi]);
        at = at.saturating_add(n);
    }
}

/// Appends an eager (fragment) payload to `v` and releases the sender's
/// block.
pub(super) fn get_eager_append(
    seg: &Segment,
    area: u64,
    h: &Header,
    v: &mut Vec<u8>,
) -> Result<()> {
    let src = eager_src(area, h)?;
    let n = eager_len(h) as usize;
    v.reserve(n);
    // SAFETY: [src, src + n) is inside the sender's eager area (eager_src
    // checked src + eager_len <= area); the sender wrote it before
    // publishing the header we acquired and does not reuse it before we
    // raise the flag below. The destination is the spare capacity of `v`
    // (at least n bytes after the reserve), which we then mark initialised.
    unsafe {
        core::ptr::copy_nonoverlapping(
            seg.eager_ptr(h.source).add(src as usize),
            v.as_mut_ptr().add(v.len()),
            n,
        );
        v.set_len(v.len() + n);
    }
    eager_flag(seg, h.source, h.word).store(1, Ordering::Release);
    Ok(())
}

/// Bytes of payload an eager or fragment header points at.
#[inline]
pub(super) fn eager_len(h: &Header) -> u64 {
    if h.kind == Kind::Frag {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h.ext[..8]);
        u64::from_le_bytes(b)
    } else {
        u64::from(h.nbytes)
    }
}

/// Copies `data` into a fresh eager block and returns `tmpl` pointing at it,
/// or `None` if the eager area has no room even after reclaiming.
#[inline]
pub(super) fn eager_block(
    seg: &Segment,
    eager: &mut EagerArea,
    data: &[u8],
    mut tmpl: Header,
) -> Option<Header> {
    let off = eager_copy(seg, eager, data, false)?;
    tmpl.source = seg.rank();
    tmpl.word = off;
    Some(tmpl)
}

/// A fresh eager block for `len` bytes of data, its release flag lowered;
/// its offset, or `None` if the eager area has no room even after
/// reclaiming.
#[inline]
pub(super) fn eager_alloc(seg: &Segment, eager: &mut EagerArea, len: usize) -> Option<u64> {
    let off = eager.alloc(EAGER_PREFIX + len as u64, released(seg))?;
    eager_flag(seg, seg.rank(), off).store(0, Ordering::Relaxed);
    Some(off)
}

/// Copies `data` into a fresh eager block and returns the block's offset,
/// or `None` if the eager area has no room even after reclaiming. (The
/// send fast path fills its header itself: a `Header` returned through
/// memory was copied in wide loads of its narrow stores, which waited for
/// the payload copy's stores to drain.) `stream`: the sender has no
/// receive outstanding, so the next block's prefetch may go in steps
/// with the copy ([`PREFETCH_STEP`]).
#[inline]
pub(super) fn eager_copy(
    seg: &Segment,
    eager: &mut EagerArea,
    data: &[u8],
    stream: bool,
) -> Option<u64> {
    let off = eager_alloc(seg, eager, data.len())?;
    let me = seg.rank();
    let dst = seg
        .eager_ptr(me)
        .wrapping_add((off + EAGER_PREFIX) as usize);
    // Only while older blocks are still in flight (a window of sends): a
    // lone send (a ping-pong) takes its own block back before the next
    // one, so the kept block would be prefetched for nothing.
    let next = if data.len() as u64 <= PREFETCH_WRITE_MAX && eager.in_flight() > 1 {
        // The block the next send of this size will most likely take.
        eager.next_kept(EAGER_PREFIX + data.len() as u64)
    } else {
        None
    };
    let Some(next) = next else {
        // A lone send (a ping-pong's): this block's lines, last read by
        // the receiver's core, are asked for all at once before the copy
        // writes them (latency 2 KiB 1.09×, 6,000 B 1.10×). Up
        // to `PREFETCH_WRITE_MAX`: a packed 64 KiB ping-pong (a staged
        // typed send, copied) was 0.95× with the hint.
        if eager.in_flight() <= 1 && data.len() as u64 <= PREFETCH_WRITE_MAX {
            prefetch::write_range(dst, data.len());
        }
        // SAFETY: [off + 64, off + 64 + len) is inside our eager area (the
        // allocator's block); no receiver reads it before the header that
        // names it is published (Release), and we do not reuse it before
        // the release flag says the receiver is done. `rep movsb` from
        // `TMX_SHMEM_TUNE=movsb_min` (see `crate::copy`).
        unsafe { crate::copy::to_block(data.as_ptr(), dst, data.len(), eager.movsb_min()) };
        return Some(off);
    };
    // The copy and the next block's prefetch in steps (one step for a
    // message shorter than four), so that the ownership requests for the
    // next block go out while this one is copied rather than after it.
    let next = seg.eager_ptr(me).wrapping_add(next as usize);
    let total = EAGER_PREFIX as usize + data.len();
    let step = if stream && data.len() >= 4 * PREFETCH_STEP {
        PREFETCH_STEP
    } else {
        data.len()
    };
    let mut o = 0;
    while o < data.len() {
        let n = step.min(data.len() - o);
        // SAFETY: as above, for the part [o, o + n) of the payload
        // (o + n <= len).
        unsafe { crate::copy::to_block(data.as_ptr().add(o), dst.add(o), n, eager.movsb_min()) };
        // The last step takes the rest of the next block (its length
        // counts the flag line too).
        let end = if o + n == data.len() { total } else { o + n };
        prefetch::write_range(next.wrapping_add(o), end - o);
        o += n;
    }
    Some(off)
}

impl Endpoint {
    pub(super) fn get_eager(&self, h: &Header, dst: &mut [u8]) -> Result<()> {
        get_eager(self.node.segment(), self.node.config().eager_bytes, h, dst)
    }

    /// Whether [`Endpoint::relieve_pressure`] has anything to do: a
    /// stored message still in its sender's eager area, and some rank
    /// waiting for eager space. A message no receive takes costs the
    /// progress passes nothing until then.
    #[inline]
    pub(super) fn owes_copies(&self) -> bool {
        let seg = self.node.segment();
        self.uncopied_eager > 0 && (0..seg.size()).any(|pe| seg.eager_pressure(pe))
    }

    /// Copies out the unexpected eager messages of senders that wait for
    /// eager space, freeing their blocks. Returns how many were copied.
    pub(super) fn relieve_pressure(&mut self) -> usize {
        let mut copied = 0;
        // Held chunks of a pipelined message keep `uncopied_eager` above zero
        // for its whole transfer: skip the scans while no one is pressed.
        if !self.owes_copies() {
            return 0;
        }
        let seg = self.node.segment();
        let area = self.node.config().eager_bytes;
        for u in self.unexpected.values_mut() {
            if u.hdr.kind != Kind::Eager || u.data.is_some() || !seg.eager_pressure(u.hdr.source) {
                continue;
            }
            let h = u.hdr;
            let mut v = vec![0u8; h.nbytes as usize];
            // A malformed header keeps `None`: its receive reports the error.
            if get_eager(seg, area, &h, &mut v).is_ok() {
                u.data = Some(v);
                self.uncopied_eager -= 1;
                copied += 1;
            }
        }
        // Fragmented messages whose data is still held in such a sender's
        // eager area: arrived ones and ones still being received.
        for u in self.unexpected.values_mut() {
            if u.hdr.kind != Kind::Frag
                || !u.hdr.has(Flags::HELD)
                || u.data.is_some()
                || !seg.eager_pressure(u.hdr.source)
            {
                continue;
            }
            if let Some(frags) = self.held_fragments.remove(&(u.hdr.source, u.hdr.word)) {
                let mut v = vec![0u8; u.hdr.nbytes as usize];
                copy_fragments(seg, area, &frags, &mut v);
                u.data = Some(v);
                u.hdr.clear(Flags::HELD);
                self.uncopied_eager -= 1;
                copied += 1;
            }
        }
        for (s, p) in self.peers.iter_mut().enumerate() {
            let Some(a) = p.assembly.as_mut() else {
                continue;
            };
            if !seg.eager_pressure(s as u32) {
                continue;
            }
            if let AsmTarget::Held(frags) = &a.into {
                let mut v = Vec::with_capacity(a.hdr.nbytes as usize);
                v.resize(a.got, 0);
                copy_fragments(seg, area, frags, &mut v);
                a.into = AsmTarget::Private(v);
                self.uncopied_eager -= 1;
                copied += 1;
            }
        }
        if copied > 0 {
            tracing::debug!(
                copied,
                "copied unexpected eager messages out for senders under pressure"
            );
        }
        copied
    }
}
