//! Split CMA copies: a receiver reading a large message with its sender's
//! help.

use super::*;

/// Whether CMA message `h`, received into `buf`, is read with its
/// sender's help ([`Endpoint::split_read`]): a split offer and at least
/// `split_min` bytes to read.
#[inline]
pub(super) fn split_size(h: &Header, buf: &ReqBuf, split_min: u64) -> bool {
    let cap = buf.capacity().unwrap_or(usize::MAX);
    h.has(Flags::SPLIT) && (h.nbytes as usize).min(cap) as u64 >= split_min
}

impl Endpoint {
    /// Reads CMA message `h` into `dst` with its sender's help (see
    /// [`crate::ring::SplitWords`]): offers it the second half of `dst`,
    /// reads the first half, then either waits for the sender's write to
    /// finish or, if the sender has not claimed the offer yet, withdraws
    /// it and reads the second half too.
    pub(super) fn split_read(&mut self, h: &Header, dst: &mut [u8]) -> Result<()> {
        let src = h.source;
        let seg = self.node.segment();
        let w = seg.ring(src, seg.rank()).split();
        let n = dst.len();
        // The sender's part starts on a page boundary of `dst` near the
        // middle (fewer pages pinned by both copies), else at the middle.
        let base = dst.as_ptr() as usize;
        let page = (base + n / 2) & !4095;
        let mid = if page > base && page < base + n {
            page - base
        } else {
            n / 2
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&h.ext[..8]);
        let offer = SplitOffer {
            id: u64::from_le_bytes(id),
            addr: (base + mid) as u64,
            len: (n - mid) as u64,
            start: mid as u64,
        };
        // Not `READY` (a busy sender), or taken back meanwhile: read it
        // whole.
        if !w.offer(offer) {
            return self.node.cma_read(src, h.word, dst);
        }
        let mine = self.node.cma_read(src, h.word, &mut dst[..mid]);
        let mut spins = 0u32;
        let theirs = loop {
            match w.poll_offer() {
                SplitPoll::Done => break Ok(true),
                SplitPoll::Claimed => {
                    // The sender is writing: wait (bounded by its copy),
                    // checking now and then that it is still alive.
                    spins = spins.wrapping_add(1);
                    if spins % 4096 == 0 {
                        if let Err(e) = seg.check_alive(src) {
                            break Err(e);
                        }
                    }
                    core::hint::spin_loop();
                }
                // Withdrawn before the sender claimed it, or its write
                // failed: read it ourselves.
                SplitPoll::Withdrawn | SplitPoll::Failed => break Ok(false),
            }
        };
        // Settled: the ring is free for the next hand-off (`READY` again
        // after the sender's part, which it takes back itself before a
        // copy of its own).
        w.release(matches!(theirs, Ok(true)));
        let theirs = theirs?;
        if theirs {
            self.counters.cma_split_shared += 1;
        } else {
            self.counters.cma_split_withdrawn += 1;
            let at = h.word.checked_add(mid as u64).ok_or(Error::BadHeader {
                source_pe: src,
                reason: "CMA address range wraps around",
            })?;
            self.node.cma_read(src, at, &mut dst[mid..])?;
        }
        mine
    }

    /// The FIN of send `id` came: the receiver is done with its data, so
    /// no offer can come for it any more.
    pub(super) fn settle_split(&mut self, id: u64) {
        if let Some((dest, _, _)) = self.split_sends.remove(&id) {
            self.split_sends_to[dest as usize] -= 1;
        }
    }

    /// About to copy a message of our own (a busy stretch): takes back the
    /// `READY` of our rings, so that their receivers read our messages
    /// whole rather than offer and withdraw.
    #[inline(never)]
    pub(super) fn unready_splits(&mut self) {
        self.splits_marked_ready = false;
        let seg = self.node.segment();
        let me = seg.rank();
        for (d, &k) in self.split_sends_to.iter().enumerate() {
            if k == 0 {
                continue;
            }
            // Fails harmlessly if the receiver offered meanwhile.
            seg.ring(me, d as u32).split().unready();
        }
    }

    /// The sender's side of split copies, run by a progress pass that had
    /// nothing else to do: marks `READY` the rings of the receivers we
    /// have CMA sends to, and answers every offer on them (writes the
    /// part asked for). Returns how many parts it wrote.
    #[inline(never)]
    pub(super) fn serve_splits(&mut self) -> usize {
        let seg = self.node.segment();
        let me = seg.rank();
        let mut wrote = 0;
        for d in 0..self.split_sends_to.len() {
            if self.split_sends_to[d] == 0 {
                continue;
            }
            let w = seg.ring(me, d as u32).split();
            match w.state() {
                SPLIT_IDLE if w.mark_ready() => {
                    self.splits_marked_ready = true;
                }
                SPLIT_OFFERED => {
                    let Some(o) = w.claim() else {
                        continue;
                    };
                    let (id, addr) = (o.id, o.addr);
                    let (len, start) = (o.len as usize, o.start as usize);
                    let r = match self.split_sends.get(&id) {
                        Some(&(dest, ptr, n))
                            if dest as usize == d
                                && start.checked_add(len).is_some_and(|end| end <= n) =>
                        {
                            // SAFETY: [ptr + start, ptr + start + len) is
                            // inside send `id`'s data (checked above),
                            // which its request keeps until the FIN; the
                            // receiver sends the FIN only after our
                            // DONE/FAILED below.
                            let data = unsafe {
                                core::slice::from_raw_parts((ptr + start) as *const u8, len)
                            };
                            self.node.cma_write(dest, addr, data)
                        }
                        _ => Err(Error::InvalidArgument("split offer for an unknown send")),
                    };
                    if let Err(e) = &r {
                        tracing::warn!(error = %e, dest = d, "split copy failed: the receiver reads it");
                    }
                    w.complete(r.is_ok());
                    // After DONE the receiver leaves the ring `READY`:
                    // ours to take back before a copy of our own.
                    self.splits_marked_ready |= r.is_ok();
                    wrote += 1;
                }
                // READY (no offer yet), CLAIMED (never seen here: we write
                // between the claim and DONE), or the receiver's to reset.
                _ => {}
            }
        }
        wrote
    }
}
