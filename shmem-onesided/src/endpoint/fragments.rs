//! Pipelined and fragmented messages: publishing chunks, reassembly, and
//! binding a message to the receive it will match.

use super::*;

/// Before each chunk of a pipelined message, every block in flight is
/// checked for release while there are at most this many (a cheap scan);
/// beyond, only the oldest ones are ([`EagerArea::reclaim_front`]).
pub(super) const RECLAIM_SCAN: usize = 64;

/// A fragmented or pipelined message being received from one peer. It
/// arrives (is handed to the matcher) with its last fragment, as a whole.
#[derive(Debug)]
pub(super) struct Assembly {
    /// The first fragment's header: envelope, whole length, flags.
    pub(super) hdr: Header,
    /// Bytes of the message received so far.
    pub(super) got: usize,
    /// Where its fragments go.
    pub(super) into: AsmTarget,
}

/// Where the fragments of a message being received go.
#[derive(Debug)]
pub(super) enum AsmTarget {
    /// Left in the sender's eager area (these fragment headers, in order)
    /// until a receive is known: then copied once, straight into it. Copied
    /// out to a private buffer if the sender runs short of eager space.
    Held(Vec<Header>),
    /// A private buffer: the receive that matches it copies it once more.
    Private(Vec<u8>),
    /// Straight into the buffer (`ptr`, `cap` bytes) of receive request
    /// `key` (`owned`: an `irecv`'s buffer; otherwise the blocked
    /// [`Endpoint::recv`]'s), which the message is bound to match when its
    /// last fragment arrives (see [`Endpoint::bind_target`]).
    Bound {
        key: u64,
        ptr: usize,
        cap: usize,
        owned: bool,
    },
}

/// The fragment size for an eager area of `eager_bytes`: a quarter of it,
/// less the flag line.
pub(super) fn frag_size(eager_bytes: u64) -> usize {
    (eager_bytes / 4).saturating_sub(EAGER_PREFIX).max(64) as usize
}

/// The chunk size of pipelined and fragmented messages: the configured
/// `TMX_SHMEM_TUNE=pipeline_chunk`, at most [`frag_size`] of the eager area.
pub(super) fn chunk_size(cfg: &crate::config::Config) -> usize {
    (cfg.pipeline_chunk.min(frag_size(cfg.eager_bytes) as u64) as usize).max(64)
}

/// Copies chunks of `data[*off..]` into fresh eager blocks and publishes
/// each one at once (after anything already queued in `out`), so that the
/// receiver copies a chunk out while the next one is copied in. Before each
/// chunk, blocks the receiver has released are reclaimed (all of them, or
/// the oldest ones when many are in flight), so that the first-fit
/// allocator hands back a block that is still in cache. Stops
/// when all is out (returns true), when the eager area is full or when the
/// ring is full (false: the rest waits for progress). `first`: the next
/// chunk is the message's first.
#[allow(clippy::too_many_arguments)]
pub(super) fn publish_chunks(
    seg: &Segment,
    eager: &mut EagerArea,
    out: &mut Outbox,
    dest: u32,
    count: &mut dyn FnMut(&Header),
    tmpl: &Header,
    data: &[u8],
    off: &mut usize,
    first: &mut bool,
    chunk: usize,
) -> bool {
    let ring = seg.ring(seg.rank(), dest);
    while *off < data.len() {
        let c = &data[*off..data.len().min(*off + chunk)];
        let mut h = *tmpl;
        h.kind = Kind::Frag.byte();
        h.flags = if *first {
            (Flags::FIRST | Flags::from_bits(tmpl.flags)).bits()
        } else {
            Flags::NONE.bits()
        };
        h.ext[..8].copy_from_slice(&(c.len() as u64).to_le_bytes());
        if eager.in_flight() <= RECLAIM_SCAN {
            eager.reclaim(released(seg));
        } else {
            eager.reclaim_front(released(seg));
        }
        let Some(h) = eager_block(seg, eager, c, h) else {
            return false;
        };
        *off += c.len();
        *first = false;
        if out.send_with(ring, h, count) == Sent::Queued && *off < data.len() {
            return false;
        }
    }
    true
}

/// The buffer of the receive a fragmented message is bound to
/// (`(key, ptr, cap, owned)` of [`AsmTarget::Bound`]), if it is still
/// there: the owned buffer of pending request `key`, or `buf` while it is
/// the blocked `recv`'s (`blocked`).
pub(super) fn bound_dst<'a>(
    requests: &'a mut Requests,
    blocked: Option<u64>,
    (key, ptr, cap, owned): (u64, usize, usize, bool),
    buf: &'a mut [u8],
) -> Option<&'a mut [u8]> {
    if owned {
        match requests.reqs.get_mut(key) {
            Some(Req {
                done: None,
                buf: b @ (ReqBuf::Owned(_) | ReqBuf::Lent(_)),
                ..
            }) => b
                .memory()
                .filter(|v| v.as_ptr() as usize == ptr && v.len() == cap),
            _ => None,
        }
    } else if blocked == Some(key) && buf.as_ptr() as usize == ptr && buf.len() == cap {
        Some(buf)
    } else {
        None
    }
}

/// Discards a message being received: releases its held fragments (one
/// `uncopied_eager` message less).
pub(super) fn drop_assembly(seg: &Segment, area: u64, uncopied: &mut usize, a: Assembly) {
    if let AsmTarget::Held(frags) = a.into {
        for f in &frags {
            let _ = get_eager(seg, area, f, &mut []);
        }
        *uncopied -= 1;
    }
}

impl Endpoint {
    /// Takes one fragment of the message being received from its sender;
    /// returns the message once whole. While no receive is known, the
    /// fragments stay in the sender's eager area ([`AsmTarget::Held`], one
    /// `uncopied_eager` message, copied out under eager pressure). Once the
    /// message is bound to match a receive (see [`Endpoint::bind_target`];
    /// checked at every fragment), what arrived so far and every later
    /// fragment are copied straight into that receive's buffer
    /// ([`AsmTarget::Bound`]: `buf`, the blocked `recv`'s, or an `irecv`'s
    /// owned one). A message complete while still held arrives held
    /// ([`Flags::HELD`]): the receive that matches it copies it once, from
    /// the sender's eager area.
    pub(super) fn take_fragment(&mut self, mut h: Header, buf: &mut [u8]) -> Option<Unexpected> {
        // Local markers only: never taken from the wire.
        h.clear(Flags::IN_PLACE | Flags::HELD);
        let seg = self.node.segment();
        let area = self.node.config().eager_bytes;
        let src = h.source as usize;
        if h.has(Flags::FIRST) {
            if let Some(old) = self.peers[src].assembly.take() {
                tracing::warn!(
                    source = h.source,
                    "fragmented message restarted before completion"
                );
                drop_assembly(seg, area, &mut self.uncopied_eager, old);
            }
            self.uncopied_eager += 1;
            self.peers[src].assembly = Some(Assembly {
                hdr: h,
                got: 0,
                into: AsmTarget::Held(Vec::new()),
            });
        }
        let Some(mut a) = self.peers[src].assembly.take() else {
            tracing::warn!(
                source = h.source,
                "fragment without a first fragment ignored"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            return None;
        };
        let total = a.hdr.nbytes as usize;
        let n = eager_len(&h) as usize;
        // The receive it was bound to gave up (an error): what was copied
        // into its buffer is gone.
        let lost = matches!(a.into, AsmTarget::Bound { key, ptr, cap, owned }
            if bound_dst(&mut self.requests, self.blocked_recv, (key, ptr, cap, owned), buf).is_none());
        if lost || a.got.saturating_add(n) > total || eager_src(area, &h).is_err() {
            tracing::warn!(
                source = h.source,
                lost,
                "malformed or abandoned fragmented message: marked corrupt"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            let hdr = a.hdr;
            drop_assembly(seg, area, &mut self.uncopied_eager, a);
            // The receive reports it: an incomplete message with no data.
            return Some(Unexpected { hdr, data: None });
        }
        if !matches!(a.into, AsmTarget::Bound { .. }) {
            if let Some(target) = self.bind_target(&a.hdr, buf) {
                let AsmTarget::Bound {
                    key,
                    ptr,
                    cap,
                    owned,
                } = target
                else {
                    return None; // bind_target returns Bound only
                };
                if let Some(dst) = bound_dst(
                    &mut self.requests,
                    self.blocked_recv,
                    (key, ptr, cap, owned),
                    buf,
                ) {
                    let k = a.got.min(dst.len());
                    match core::mem::replace(&mut a.into, target) {
                        AsmTarget::Held(frags) => {
                            copy_fragments(seg, area, &frags, dst);
                            self.uncopied_eager -= 1;
                        }
                        AsmTarget::Private(v) => dst[..k].copy_from_slice(&v[..k]),
                        AsmTarget::Bound { .. } => {}
                    }
                    tracing::debug!(
                        source = h.source,
                        moved = k,
                        owned,
                        "pipelined message bound to its receive: copied in place"
                    );
                }
            }
        }
        // Bounds were checked just above; the copies cannot fail.
        match &mut a.into {
            AsmTarget::Held(frags) => frags.push(h),
            AsmTarget::Private(v) => {
                if v.capacity() == 0 {
                    v.reserve_exact(total);
                }
                let _ = get_eager_append(seg, area, &h, v);
            }
            AsmTarget::Bound {
                key,
                ptr,
                cap,
                owned,
            } => {
                let t = (*key, *ptr, *cap, *owned);
                if let Some(dst) = bound_dst(&mut self.requests, self.blocked_recv, t, buf) {
                    let (lo, hi) = (a.got.min(*cap), (a.got + n).min(*cap));
                    let _ = get_eager(seg, area, &h, &mut dst[lo..hi]);
                }
            }
        }
        a.got += n;
        if a.got < total {
            self.peers[src].assembly = Some(a);
            return None;
        }
        let mut hdr = a.hdr;
        let data = match a.into {
            AsmTarget::Held(frags) => {
                // Stays counted in `uncopied_eager` until delivered or copied out.
                hdr.set(Flags::HELD);
                self.held_fragments.insert((hdr.source, hdr.word), frags);
                None
            }
            AsmTarget::Private(v) => Some(v),
            AsmTarget::Bound { ptr, cap, .. } => {
                self.counters.pipelined_in_place += 1;
                self.in_place_buffers.push((ptr, cap));
                hdr.set(Flags::IN_PLACE);
                None
            }
        };
        Some(Unexpected { hdr, data })
    }

    /// The receive a fragmented message with first header `h` is bound to
    /// match when it arrives, as an [`AsmTarget::Bound`], if its buffer can
    /// take the fragments now: the receive the model would give the message
    /// to if it arrived now ([`Offload::peek_arrival`]: the oldest posted
    /// receive that matches it), provided it is not deferred (deferred
    /// receives take whole messages from the front of the ring), it names
    /// the sender (no other source's message can
    /// take it first; nothing else from that sender comes before this
    /// message's last fragment, whose counted first fragment keeps the
    /// sender from trusting a prepost until then), is not advertised as a
    /// prepost (a sender may have written an earlier message straight into
    /// it, its DONE not seen yet), and is the blocked `recv`'s (its `buf`:
    /// nothing is posted or cancelled while it blocks) or an `irecv`'s
    /// owned buffer (later receives are younger; `cancel_recv` refuses a
    /// bound receive). `try_recv`'s receive is never bound (it returns at
    /// once).
    pub(super) fn bind_target(&self, h: &Header, buf: &[u8]) -> Option<AsmTarget> {
        if self.matching.deferred_len() != 0 {
            return None;
        }
        let p = self.matching.peek_arrival(&envelope(h))?;
        if p.offloaded || p.deferred {
            return None;
        }
        let key = *p.recv;
        let r = self.requests.get(key)?;
        // The receive matches the message: it names its sender unless it
        // is an `ANY_SOURCE` one.
        if r.done.is_some() || r.spec.source == Source::Any {
            return None;
        }
        match &r.buf {
            ReqBuf::Caller if self.blocked_recv == Some(key) => Some(AsmTarget::Bound {
                key,
                ptr: buf.as_ptr() as usize,
                cap: buf.len(),
                owned: false,
            }),
            ReqBuf::Owned(v) => Some(AsmTarget::Bound {
                key,
                ptr: v.as_ptr() as usize,
                cap: v.len(),
                owned: true,
            }),
            ReqBuf::Lent(l) => Some(AsmTarget::Bound {
                key,
                ptr: l.addr,
                cap: l.len,
                owned: true,
            }),
            ReqBuf::Caller => None,
        }
    }

    /// Whether a fragmented message is being copied into receive `key`.
    pub(super) fn is_bound(&self, key: u64) -> bool {
        self.peers.iter().any(|p| {
            matches!(p.assembly, Some(Assembly { into: AsmTarget::Bound { key: k, .. }, .. }) if k == key)
        })
    }
}
