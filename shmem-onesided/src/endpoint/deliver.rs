//! Delivering a matched message into a receive buffer, and the CMA reads left
//! to the end of a pass.

use super::*;

/// Most CMA messages [`Endpoint::read_late`] reads in one call.
pub(super) const LATE_BATCH: usize = 64;

impl Endpoint {
    /// Copies the CMA messages of [`Endpoint::late_cma`] into their receives
    /// (and returns their FINs), completing the receives; returns how many.
    #[inline(never)]
    pub(super) fn copy_late(&mut self, buf: &mut [u8]) -> usize {
        let read = if self.late_cma.len() > 1 {
            self.read_late()
        } else {
            0
        };
        let mut n = 0;
        while let Some((key, u)) = self.late_cma.pop_front() {
            self.cma_already_read = n < read;
            self.complete_stored_slow(key, u, buf);
            self.cma_already_read = false;
            n += 1;
        }
        n
    }

    /// Reads the first messages of `late_cma` that come from one sender, as
    /// many as [`LATE_BATCH`], in one `process_vm_readv` call into their
    /// receives' own buffers; returns how many it read whole. It stops at
    /// the first message it cannot read that way (another sender, a split
    /// copy, no buffer of its own, nothing to read); those after it, and
    /// any the call did not read whole, are read one by one by
    /// `deliver`.
    #[inline(never)]
    pub(super) fn read_late(&mut self) -> usize {
        let split_min = self.node.config().cma_split;
        let Some(src) = self.late_cma.front().map(|(_, u)| u.hdr.source) else {
            return 0;
        };
        let mut dst: Vec<std::io::IoSliceMut<'_>> =
            Vec::with_capacity(self.late_cma.len().min(LATE_BATCH));
        let mut pieces = Vec::with_capacity(dst.capacity());
        for (key, u) in self.late_cma.iter().take(LATE_BATCH) {
            let h = &u.hdr;
            if h.kind != Kind::Cma || h.source != src || u.data.is_some() {
                break;
            }
            // The map or the caller slot: the receive `irecv_or_done`
            // made, which joined `late_cma` as it was posted, stays there.
            let Some(Req { buf, .. }) = self.requests.get_mut(*key) else {
                break;
            };
            if split_size(h, buf, split_min) {
                // A split copy is read with the sender's help instead.
                break;
            }
            let ReqBuf::Owned(v) = buf else {
                break;
            };
            let n = (h.nbytes as usize).min(v.len());
            if n == 0 {
                break;
            }
            // SAFETY: `v` is the buffer of pending request `key`, which
            // no other entry of `late_cma` names (a receive matches once); it
            // is neither moved nor touched until the call below returns
            // (this function holds `self` and does nothing else), and `n`
            // is at most its length.
            let slice = unsafe { core::slice::from_raw_parts_mut(v.as_mut_ptr(), n) };
            dst.push(std::io::IoSliceMut::new(slice));
            pieces.push(nix::sys::uio::RemoteIoVec {
                base: h.word as usize,
                len: n,
            });
        }
        if dst.len() < 2 {
            return 0;
        }
        let Ok(mut got) = self.node.cma_readv(src, &mut dst, &pieces) else {
            return 0;
        };
        let mut whole = 0;
        for p in &pieces {
            if got < p.len {
                break;
            }
            got -= p.len;
            whole += 1;
        }
        self.counters.cma_batches += 1;
        self.counters.cma_batched += whole as u64;
        tracing::trace!(
            source = src,
            messages = whole,
            of = pieces.len(),
            "CMA messages read in one call"
        );
        whole
    }

    /// Delivers a matched message into `buf`: `min(msg_len, buf.len())`
    /// bytes, never more (truncation is reported in the status, not as an
    /// error). Consumes the message either way (eager block released, CMA
    /// FIN sent, synchronous sender acknowledged).
    pub(super) fn deliver(
        &mut self,
        h: Header,
        data: Option<Vec<u8>>,
        buf: &mut [u8],
    ) -> Result<Status> {
        let msg_len = h.nbytes as usize;
        let n = msg_len.min(buf.len());
        let st = Status {
            source: h.source,
            tag: h.tag,
            context: h.context,
            len: n,
            msg_len,
            cancelled: false,
        };
        if n < msg_len {
            tracing::debug!(
                source = h.source,
                msg_len,
                capacity = buf.len(),
                "message truncated to the receive buffer"
            );
        }
        self.counters.received += 1;
        let cap = buf.len();
        let dst = &mut buf[..n];
        let r = match Kind::of(h.kind) {
            Some(Kind::Inline) => {
                let (bytes, len) = h.inline_payload();
                if len != msg_len {
                    Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "inline length differs from message length",
                    })
                } else {
                    dst.copy_from_slice(&bytes[..n]);
                    Ok(())
                }
            }
            Some(Kind::Eager | Kind::Frag | Kind::Cma | Kind::InlineExt) if data.is_some() => {
                // Copied out already (eager pressure, a fragmented message,
                // a CMA message pulled while we were blocked, a self-send).
                match data.as_ref().and_then(|v| v.get(..n)) {
                    Some(v) => {
                        dst.copy_from_slice(v);
                        Ok(())
                    }
                    None => Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "copied payload shorter than the header says",
                    }),
                }
            }
            Some(Kind::Frag) if h.has(Flags::HELD) => {
                match self.held_fragments.remove(&(h.source, h.word)) {
                    // Still in the sender's eager area: one copy, straight in.
                    Some(frags) => {
                        self.uncopied_eager -= 1;
                        let seg = self.node.segment();
                        copy_fragments(seg, self.node.config().eager_bytes, &frags, dst);
                        Ok(())
                    }
                    None => Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "held fragmented message without its fragments",
                    }),
                }
            }
            Some(Kind::Frag) if h.has(Flags::IN_PLACE) => match self
                .in_place_buffers
                .iter()
                .position(|&e| e == (dst.as_ptr() as usize, cap))
            {
                // Copied into this very buffer fragment by fragment.
                Some(i) => {
                    self.in_place_buffers.swap_remove(i);
                    Ok(())
                }
                None => Err(Error::BadHeader {
                    source_pe: h.source,
                    reason: "pipelined message received in place into another buffer",
                }),
            },
            Some(Kind::Frag) => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "incomplete fragmented message",
            }),
            Some(Kind::InlineExt) => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "inline message longer than its ring could carry",
            }),
            Some(Kind::Eager) => self.get_eager(&h, dst),
            Some(Kind::Cma) => {
                if self.splits_marked_ready {
                    self.unready_splits();
                }
                let res = if n as u64 >= self.node.config().cma_split && h.has(Flags::SPLIT) {
                    self.split_read(&h, dst)
                } else if n > 0 && !core::mem::take(&mut self.cma_already_read) {
                    self.node.cma_read(h.source, h.word, dst)
                } else {
                    Ok(())
                };
                self.send_fin(&h, true);
                res
            }
            _ => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "unknown header kind",
            }),
        };
        self.matched_sync(&h, data.is_some());
        r.map(|()| st)
    }
}
