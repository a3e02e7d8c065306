//! The general send path: send requests, the per-peer local queues
//! (backpressure), chunked sends, CMA rendezvous and prepost-direct writes.

use super::*;

/// Smallest message that goes by CMA rendezvous instead of being copied
/// aside when the eager area is full (or sends to that peer are already
/// held locally): below it the extra copy is cheaper than the FIN round trip.
/// A pipelined message that needs no copy aside (an owned buffer, or a
/// blocking send's) never does: it waits in its request and goes chunk by
/// chunk as eager space frees, which keeps both ranks copying through
/// cache-resident chunks. Handing it to CMA instead (the receiver's
/// `process_vm_readv`, ~5 GB/s on the reference VM against ~20 GB/s for the
/// pipeline) cut the 256 KiB – 4 MiB bi-bandwidth of `cargo xtask bench
/// adi` to 55–75% (2026-11-22).
pub(super) const STAGE_TO_CMA_MIN: u64 = 32 << 10;

#[derive(Debug)]
pub(super) enum Staged {
    /// Waiting for eager-area space; the data is held here and `hdr` is
    /// sent once it has a block.
    Data { hdr: Header, bytes: Vec<u8> },
    /// A header queued behind staged data (to keep order).
    Ready(Header),
    /// A pipelined message, or one larger than the eager area (no CMA),
    /// whose remaining chunks are published one by one as eager space and
    /// ring slots free (by [`Endpoint::progress`]).
    Frag {
        /// The send request.
        id: u64,
        /// The header every chunk starts from (envelope, whole length,
        /// flags).
        tmpl: Header,
        /// Where the data is.
        bytes: FragData,
        /// Bytes of the data published so far.
        sent: usize,
        /// The next chunk is the message's first (carries the envelope and
        /// [`Flags::FIRST`]).
        first: bool,
    },
}

/// Where the data of a staged chunked send ([`Staged::Frag`]) is.
#[derive(Debug)]
pub(super) enum FragData {
    /// The owned buffer of the send request.
    Owned,
    /// A private copy of what was left of a borrowed buffer.
    Copy(Vec<u8>),
    /// The borrowed buffer of the blocking [`Endpoint::send`] /
    /// [`Endpoint::ssend`] call that staged it: that call waits until the
    /// message is out, and turns this into a [`FragData::Copy`]
    /// ([`Endpoint::unlend`]) before it returns any other way.
    Lent { ptr: usize, len: usize },
}

impl Endpoint {
    pub(super) fn enqueue(&mut self, dest: u32, hdr: Header) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            p.staged.push_back(Staged::Ready(hdr));
            return;
        }
        let ring = seg.ring(seg.rank(), dest);
        let mut count = |h: &Header| {
            if h.has(Flags::COUNTED) {
                ring.count_message();
            }
        };
        if p.outbox.send_with(ring, hdr, &mut count) == Sent::Queued {
            tracing::debug!(dest, kind = hdr.kind, "send queued locally (backpressure)");
        }
    }

    /// Moves `dest`'s local queues into its ring, in order, as far as they go.
    pub(super) fn flush_peer(&mut self, dest: u32) -> usize {
        let seg = self.node.segment();
        let ring = seg.ring(seg.rank(), dest);
        let p = &mut self.peers[dest as usize];
        let before = p.outbox.pending() + p.staged.len();
        if before == 0 {
            return 0;
        }
        let mut count = |h: &Header| {
            if h.has(Flags::COUNTED) {
                ring.count_message();
            }
        };
        let chunk = chunk_size(self.node.config());
        let mut frags_done = None;
        let mut chunks = 0;
        if p.outbox.flush_with(ring, &mut count) == 0 {
            'staged: while let Some(front) = p.staged.front_mut() {
                let hdr = match front {
                    Staged::Ready(h) => *h,
                    Staged::Data { hdr, bytes } => {
                        match eager_block(seg, &mut self.eager, bytes, *hdr) {
                            Some(h) => h,
                            None => break,
                        }
                    }
                    Staged::Frag {
                        id,
                        tmpl,
                        bytes,
                        sent: off,
                        first,
                    } => {
                        let data: &[u8] = match bytes {
                            FragData::Copy(v) => &v[..],
                            FragData::Owned => self
                                .sends
                                .get(id)
                                .and_then(|r| r.owned.as_deref())
                                .unwrap_or(&[]),
                            // SAFETY: the `&[u8]` (`len` bytes) of the
                            // blocking send that staged it, still running
                            // (its `wait_send_id` runs this) until the entry
                            // is popped; `unlend` replaces the entry with a
                            // copy if it returns (or unwinds) before that.
                            FragData::Lent { ptr, len } => unsafe {
                                core::slice::from_raw_parts(*ptr as *const u8, *len)
                            },
                        };
                        let was = *off;
                        let all_out = publish_chunks(
                            seg,
                            &mut self.eager,
                            &mut p.outbox,
                            dest,
                            &mut count,
                            tmpl,
                            data,
                            off,
                            first,
                            chunk,
                        );
                        chunks += (*off - was).div_ceil(chunk);
                        if !all_out {
                            break 'staged;
                        }
                        frags_done = Some(*id);
                        p.staged.pop_front();
                        // The whole message is out: stop here (the caller
                        // finishes the request) and continue next time.
                        break;
                    }
                };
                p.staged.pop_front();
                if p.outbox.send_with(ring, hdr, &mut count) == Sent::Queued {
                    break;
                }
            }
        }
        let moved = (before + chunks).saturating_sub(p.outbox.pending() + p.staged.len());
        if let Some(id) = frags_done {
            tracing::debug!(dest, id, "last fragment published");
            if let Some(r) = self.sends.get_mut(&id) {
                r.frags = false;
            }
            self.check_send_done(id);
            return moved.max(1) + self.flush_peer(dest);
        }
        moved
    }

    /// Sends held locally for `dest`.
    pub(super) fn queued_for(&self, dest: u32) -> usize {
        let p = &self.peers[dest as usize];
        p.outbox.pending() + p.staged.len()
    }

    /// [`Flags::COUNTED`] when the prepost protocol is on: every message that
    /// goes through a header ring is then counted in the receiver's phase.
    pub(super) fn counted_flag(&self) -> Flags {
        if self.prepost_on {
            Flags::COUNTED
        } else {
            Flags::NONE
        }
    }

    /// MP_Lite's send-side check: claims the oldest posted receive of `dest`
    /// that matches, is large enough and is trusted (the receiver's phase
    /// says every message we published to it was processed), CMA-writes
    /// `data` into it and marks it done. Returns false (after counting an
    /// ignored prepost if a matching one was not trusted) to send buffered.
    pub(super) fn send_preposted(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
    ) -> Result<bool> {
        let me = self.rank();
        let Ok(mtag) = self.layout.encode(Envelope {
            context_id: context,
            source: me,
            tag,
        }) else {
            return Ok(false);
        };
        let len = data.len() as u64;
        let seg = self.node.segment();
        let ring = seg.prepost(dest, me);
        let phase = seg.phase(dest);
        let mut untrusted = false;
        // We are the engine of the receiver's offload model: the message
        // goes to the first entry, in posting order, whose tag and mask
        // match it (tm-match's rule); if that entry is too small or not
        // trusted, no later one is used either (MPI: the earliest posted
        // receive wins, in software then).
        let mut scan = EngineScan::new(mtag);
        let claim = self.peers[dest as usize].claimer.claim_first(ring, |p| {
            if !scan.offer(&p.entry()) {
                return false;
            }
            if p.capacity < len {
                return false;
            }
            // Read after the entry (claim_first loaded its word with
            // Acquire): see `Phase::synced`.
            if phase.synced(|| seg.counted_to(dest)) {
                true
            } else {
                untrusted = true;
                false
            }
        });
        let Some(c) = claim else {
            if untrusted {
                self.counters.ignored_preposts += 1;
                tracing::debug!(
                    dest,
                    tag,
                    "matching prepost not trusted yet (gap): buffering"
                );
            }
            return Ok(false);
        };
        let res = self.node.cma_write(dest, c.prepost.offset, data);
        let word = match res {
            Ok(()) => (u64::from(tag) << 32) | len,
            Err(_) => RESULT_FAILED,
        };
        let seg = self.node.segment();
        self.peers[dest as usize]
            .claimer
            .complete(seg.prepost(dest, me), &c, word);
        res?;
        self.counters.preposted_hits += 1;
        tracing::trace!(dest, len, "prepost-direct send (CMA write)");
        Ok(true)
    }

    /// A blocking send: the chunks of a pipelined (or fragmented) message
    /// that cannot go at once are published later straight from `data`,
    /// which stays borrowed until this returns ([`FragData::Lent`]). Returns
    /// once every chunk is in the ring (none queued locally).
    #[inline(never)]
    pub(super) fn send_blocking(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<()> {
        if data.len() as u64 <= self.node.config().pipeline_min.min(self.eager_max()) {
            // Never chunked: the plain path.
            let (id, done, _) = self.start_send(dest, tag, context, None, data, mode, false)?;
            if done {
                return Ok(());
            }
            return self.wait_send_id(id).map(|_| ());
        }
        // A panic unwinding out of here must not leave chunks staged that
        // point into `data` either: caught, unlent, resumed.
        let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
            self.lend_caller_buffer = true;
            let r = self.start_send(dest, tag, context, None, data, mode, false);
            self.lend_caller_buffer = false;
            match r {
                Ok((_, true, _)) => Ok(()),
                Ok((id, false, _)) => self.wait_send_id(id).map(|_| ()),
                Err(e) => Err(e),
            }
        }));
        match r {
            Ok(Ok(())) => {
                // Its last chunks may still be queued here behind a full
                // ring: a blocking send returns once they are in the ring,
                // so that the receiver gets the message even if this rank
                // makes no endpoint call for a while (one-sided waits).
                if self.peers[dest as usize].outbox.pending() == 0 {
                    return Ok(());
                }
                self.block(Watch::One(dest), |ep| {
                    let ev = ep.progress()?;
                    let idle = ep.peers[dest as usize].outbox.pending() == 0;
                    Ok((idle.then_some(()), ev))
                })
            }
            Ok(Err(e)) => {
                self.unlend(data);
                Err(e)
            }
            Err(panic) => {
                self.lend_caller_buffer = false;
                self.unlend(data);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Replaces a staged chunked send's lent buffer (`data`, the blocking
    /// send's) with a private copy of what is left of it: the blocking
    /// send returns with the send still pending (an error).
    pub(super) fn unlend(&mut self, data: &[u8]) {
        for p in &mut self.peers {
            for st in &mut p.staged {
                if let Staged::Frag {
                    bytes, sent: off, ..
                } = st
                {
                    if let FragData::Lent { ptr, len } = *bytes {
                        if ptr == data.as_ptr() as usize && len == data.len() {
                            *bytes = FragData::Copy(data.get(*off..).unwrap_or(&[]).to_vec());
                            *off = 0;
                        }
                    }
                }
            }
        }
    }

    /// Starts a send; never blocks. Returns its id, whether it is complete
    /// and, for an internal request complete at once, its `owned` buffer.
    /// A user request is always recorded in `sends` (complete or not); an
    /// internal one only while pending. `owned` (if any) is the data;
    /// otherwise `borrowed` is.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_send(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        owned: Option<Vec<u8>>,
        borrowed: &[u8],
        mode: SendMode,
        user: bool,
    ) -> Result<(u64, bool, Option<Vec<u8>>)> {
        if dest >= self.size() {
            return Err(Error::BadPe {
                pe: dest,
                size: self.size(),
            });
        }
        let me = self.rank();
        // The inline fast path: an internal standard send of at most
        // INLINE_MAX bytes to another local rank with nothing held for it
        // completes here (what the general path below does for it, without
        // its request bookkeeping).
        if !user && mode != SendMode::Synchronous && dest != me && dest < self.size() {
            let data = owned.as_deref().unwrap_or(borrowed);
            let p = &self.peers[dest as usize];
            let clear = p.staged.is_empty() && p.outbox.pending() == 0;
            if clear
                && data.len() > INLINE_MAX
                && (data.len() <= self.inline_ext_max || self.inline_as_reply(dest, data.len()))
                && self.send_inline_ext(dest, tag, context, data)
            {
                let id = self.next_id;
                self.next_id += 1;
                return Ok((id, true, owned));
            }
            if data.len() <= INLINE_MAX && clear {
                let id = self.next_id;
                self.next_id += 1;
                let h = inline_header(me, tag, context, self.counted_flag(), data);
                self.counters.inline_sends += 1;
                tracing::trace!(dest, len = data.len(), "inline send");
                self.enqueue(dest, h);
                return Ok((id, true, owned));
            }
        }
        let len = owned.as_ref().map_or(borrowed.len(), Vec::len) as u64;
        if len > u64::from(u32::MAX) {
            return Err(Error::MessageTooLarge {
                len,
                max: u64::from(u32::MAX),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let sync = mode == SendMode::Synchronous;
        if sync {
            self.counters.sync_sends += 1;
        }
        let mut req = SendReq {
            dest,
            owned,
            fin: false,
            ack: false,
            frags: false,
            user,
            fed: Fed::No,
            orphan: false,
        };
        if dest == me {
            // The ack may come during the arrival itself (a posted receive
            // matches at once): record the request first.
            req.ack = sync;
            let copy = req.owned.as_deref().unwrap_or(borrowed).to_vec();
            self.sends.insert(id, req);
            let r = self.send_self(tag, context, copy, sync.then_some(id));
            if let Err(e) = r {
                self.sends.remove(&id);
                return Err(e);
            }
            let done = self.sends.get(&id).is_some_and(SendReq::done);
            let mut back = None;
            if done {
                self.finish_send(id);
                if !user {
                    back = self.sends.remove(&id).and_then(|r| r.owned);
                }
            }
            return Ok((id, done, back));
        }
        if self.queued_for(dest) > 0 {
            self.flush_peer(dest);
        }
        let data: &[u8] = req.owned.as_deref().unwrap_or(borrowed);
        let mut flags = self.counted_flag();
        if sync {
            flags |= Flags::SYNC;
        }
        let mut tmpl = Header {
            kind: Kind::Eager.byte(),
            flags: flags.bits(),
            // <= u32::MAX, checked above
            nbytes: len as u32,
            source: me,
            tag,
            context,
            ..Header::default()
        };
        tmpl.ext[8..16].copy_from_slice(&id.to_le_bytes());
        let eager_max = self.eager_max();
        if self.prepost_on
            && data.len() > INLINE_MAX
            && len >= self.node.config().prepost_min
            && self.queued_for(dest) == 0
            && self.send_preposted(dest, tag, context, data)?
        {
            // Written into a matched receive: complete, synchronous or not.
        } else if data.len() <= INLINE_MAX && !sync {
            let mut h = tmpl;
            h.kind = Kind::Inline.byte();
            h.ext = [0; 32];
            h.set_inline(data);
            self.counters.inline_sends += 1;
            tracing::trace!(dest, len, "inline send");
            self.enqueue(dest, h);
        } else if !sync
            && (data.len() <= self.inline_ext_max || self.inline_as_reply(dest, data.len()))
            && self.queued_for(dest) == 0
            && self.send_inline_ext(dest, tag, context, data)
        {
            // Inline in the ring, continued in the following slots.
        } else if self.cma_ok()
            && (len > self.node.config().cma_threshold
                || len > eager_max
                || self.cma_duplex_now(dest, data.len())
                || (self.cma_reply_size(data.len()) && self.ask_reply(dest)))
        {
            self.publish_cma(dest, tmpl, data, id, "CMA rendezvous send");
            // The receiver reads the buffer (owned: kept in the request;
            // borrowed: the caller's contract) until its FIN.
            req.fin = true;
            req.ack = sync;
        } else if len <= eager_max && len <= self.node.config().pipeline_min {
            let by_pointer = if self.cma_ok() && len >= STAGE_TO_CMA_MIN {
                // A large message that finds the eager area full (or sends
                // to that peer held locally) would be copied aside: hand it
                // over by pointer instead.
                !self.peers[dest as usize].staged.is_empty() || !self.try_eager(dest, tmpl, data)
            } else {
                self.counters.buffered_sends += 1;
                self.send_eager(dest, tmpl, data);
                false
            };
            if by_pointer {
                self.publish_cma(
                    dest,
                    tmpl,
                    data,
                    id,
                    "eager area full or sends queued: CMA rendezvous send",
                );
                req.fin = true;
            }
            req.ack = sync;
        } else {
            // Pipelined (above `TMX_SHMEM_TUNE=pipeline_min`, within the eager
            // area) or fragmented (larger than the eager area, no CMA):
            // consecutive chunks, each published as soon as it is copied;
            // what does not fit now is published by progress as eager space
            // and ring slots free.
            let chunk = chunk_size(self.node.config());
            let pipelined = len <= eager_max;
            let (mut off, mut first) = (0usize, true);
            let seg = self.node.segment();
            let p = &mut self.peers[dest as usize];
            let all_out = p.staged.is_empty() && {
                let ring = seg.ring(me, dest);
                let mut count = |h: &Header| {
                    if h.has(Flags::COUNTED) {
                        ring.count_message();
                    }
                };
                publish_chunks(
                    seg,
                    &mut self.eager,
                    &mut p.outbox,
                    dest,
                    &mut count,
                    &tmpl,
                    data,
                    &mut off,
                    &mut first,
                    chunk,
                )
            };
            let copy_aside = req.owned.is_none() && !self.lend_caller_buffer;
            if off == 0 && pipelined && copy_aside && self.cma_ok() && len >= STAGE_TO_CMA_MIN {
                // Nothing could go (eager area full, or sends to that peer
                // held locally) and the rest would be copied aside: hand it
                // over by pointer instead, as for an eager message.
                self.publish_cma(
                    dest,
                    tmpl,
                    data,
                    id,
                    "eager area full or sends queued: CMA rendezvous send",
                );
                req.fin = true;
            } else {
                if pipelined {
                    self.counters.pipelined_sends += 1;
                } else {
                    self.counters.fragmented_sends += 1;
                }
                tracing::debug!(
                    dest,
                    len,
                    chunk,
                    pipelined,
                    out = off,
                    "chunked send (pipelined, or larger than the eager area without CMA)"
                );
                if !all_out {
                    // The rest goes from the owned buffer (kept in the
                    // request) or from a private copy of what is left.
                    let bytes = if req.owned.is_some() {
                        FragData::Owned
                    } else if self.lend_caller_buffer {
                        // A blocking send: published from the caller's
                        // buffer while it waits (no copy aside).
                        FragData::Lent {
                            ptr: borrowed.as_ptr() as usize,
                            len: borrowed.len(),
                        }
                    } else {
                        let rest = borrowed[off..].to_vec();
                        off = 0;
                        FragData::Copy(rest)
                    };
                    self.peers[dest as usize].staged.push_back(Staged::Frag {
                        id,
                        tmpl,
                        bytes,
                        sent: off,
                        first,
                    });
                    req.frags = true;
                }
            }
            req.ack = sync;
        }
        let done = req.done();
        if done && !user {
            return Ok((id, true, req.owned));
        }
        self.sends.insert(id, req);
        if done {
            self.finish_send(id);
        }
        Ok((id, done, None))
    }

    /// A send to this rank: a private copy handed to the matcher as an
    /// arrived message (so `ANY_SOURCE` ordering and non-overtaking hold).
    pub(super) fn send_self(
        &mut self,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        sync: Option<u64>,
    ) -> Result<()> {
        let mut hdr = Header {
            kind: Kind::Eager.byte(),
            nbytes: data.len() as u32,
            source: self.rank(),
            tag,
            context,
            ..Header::default()
        };
        if let Some(id) = sync {
            hdr.set(Flags::SYNC);
            hdr.ext[8..16].copy_from_slice(&id.to_le_bytes());
        }
        self.counters.self_sends += 1;
        tracing::trace!(len = data.len(), "self send (local copy)");
        let key = self.unexpected.insert(Unexpected {
            hdr,
            data: Some(data),
        });
        self.matching.arrive(envelope(&hdr), Msg::Stored(key))?;
        self.poll_matching(&mut [])
    }

    /// Publishes a CMA rendezvous header for `data` (send `id`): the
    /// receiver reads it in place and answers with a FIN.
    pub(super) fn publish_cma(
        &mut self,
        dest: u32,
        tmpl: Header,
        data: &[u8],
        id: u64,
        why: &'static str,
    ) {
        let mut h = tmpl;
        h.kind = Kind::Cma.byte();
        h.word = data.as_ptr() as u64;
        h.ext[..8].copy_from_slice(&id.to_le_bytes());
        if data.len() as u64 >= self.node.config().cma_split {
            h.set(Flags::SPLIT);
            if self
                .split_sends
                .insert(id, (dest, data.as_ptr() as usize, data.len()))
                .is_none()
            {
                self.split_sends_to[dest as usize] += 1;
            }
        }
        self.counters.cma_sends += 1;
        tracing::debug!(
            dest,
            len = data.len(),
            sync = tmpl.has(Flags::SYNC),
            "{why}"
        );
        self.enqueue(dest, h);
    }

    /// Copies `data` to an eager block and publishes `tmpl` for it if the
    /// eager area has room now; `false` (nothing done) if it has not.
    pub(super) fn try_eager(&mut self, dest: u32, tmpl: Header, data: &[u8]) -> bool {
        let seg = self.node.segment();
        match eager_block(seg, &mut self.eager, data, tmpl) {
            Some(h) => {
                self.counters.buffered_sends += 1;
                tracing::trace!(dest, len = data.len(), "buffered (eager) send");
                self.enqueue(dest, h);
                true
            }
            None => false,
        }
    }

    /// Copies `data` to an eager block and publishes `tmpl` for it, or holds
    /// it locally (never blocks).
    pub(super) fn send_eager(&mut self, dest: u32, tmpl: Header, data: &[u8]) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        let hdr = if p.staged.is_empty() {
            eager_block(seg, &mut self.eager, data, tmpl)
        } else {
            None
        };
        match hdr {
            Some(h) => {
                tracing::trace!(dest, len = data.len(), "buffered (eager) send");
                self.enqueue(dest, h);
            }
            None => {
                self.counters.staged_sends += 1;
                tracing::debug!(
                    dest,
                    len = data.len(),
                    "eager area full or sends queued: holding the message locally"
                );
                self.peers[dest as usize].staged.push_back(Staged::Data {
                    hdr: tmpl,
                    bytes: data.to_vec(),
                });
            }
        }
    }
}
