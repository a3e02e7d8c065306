//! The receive API: blocking, nonblocking and arrived receives, and their
//! waits.

use super::*;

/// A spinning `try_recv` that finds its source's ring empty runs a full
/// progress pass only every this many times (unless it has local work).
pub(super) const IDLE_FULL_PASS: u32 = 8;

/// [`Endpoint::recv_arrived_with`] asks for every line of a payload of
/// up to this many bytes before its consumer reads it, and of a larger one
/// only when no other header follows it in the ring (a lone message, as in
/// a ping-pong). In a stream of larger messages the consumer's reads
/// stream well enough by themselves and the hints only wait: `osu_ddt`'s
/// window of 8 KiB messages was 1.05–1.07× faster without them, while
/// from 512 B to 4 KiB they made it 1.06–1.20× faster.
pub(super) const IN_PLACE_PREFETCH_STREAM: usize = 4096;

impl Endpoint {
    /// Files the program's receive under `key` (the endpoint's next id;
    /// `id` its matcher id), posted or deferred.
    #[inline(always)]
    pub(super) fn file_user_recv(&mut self, key: u64, id: RecvId, spec: MatchSpec, buf: ReqBuf) {
        self.next_id += 1;
        let req = Req {
            spec,
            buf,
            done: None,
            id: Some(id),
            user: true,
            fed: Fed::No,
        };
        match self.requests.reqs.vacant(key) {
            Some(slot) => slot.fill(req),
            None => self.requests.reqs.insert(key, req),
        }
    }

    /// Files a receive the matcher has just queued in software under `key`
    /// (`id` its matcher id): the request, then the matcher's output.
    #[inline]
    fn queued_in_software(
        &mut self,
        key: u64,
        id: RecvId,
        spec: MatchSpec,
        buf: ReqBuf,
    ) -> Result<RecvRequest> {
        self.file_user_recv(key, id, spec, buf);
        if self.matching.has_output() {
            self.poll_matching(&mut [])?;
        }
        self.counters.posted_recvs += 1;
        Ok(RecvRequest(key))
    }

    /// For a waiter outside this endpoint's lock: a handle on `source`'s
    /// header ring into this rank and the index of the next header this
    /// endpoint will take from it. While [`ArrivalWatch::published`] says
    /// `false` for that index, no new header has come from `source`, so a
    /// blocked receive from it can spin on the watch instead of taking its
    /// lock for a progress pass. `None` for this rank itself (self-sends use
    /// no ring) or a rank out of range.
    pub fn arrival_watch(&self, source: u32) -> Option<(ArrivalWatch, u64)> {
        let seg = self.node.segment();
        if source == seg.rank() || source >= seg.size() {
            return None;
        }
        let next = self.peers[source as usize].inbox.consumed();
        Some((seg.arrival_watch(source, seg.rank()), next))
    }

    /// Whether a progress pass has work here besides reading rings: sends
    /// held locally, copies owed to a pressured sender, preposts (the
    /// condition under which [`Endpoint::try_recv`]'s idle look runs a full
    /// pass at once). A waiter on an [`ArrivalWatch`] that sees `false` may
    /// run its full passes less often: until a header arrives, only such
    /// passes (or another thread's calls) create work.
    pub fn has_local_work(&self) -> bool {
        self.local_work()
    }

    /// Whether a sender a receive from `source` may take from is under
    /// eager pressure (waits for space in its eager area).
    #[inline]
    fn source_pressured(&self, source: Source) -> bool {
        let seg = self.node.segment();
        match source {
            Source::Rank(pe) => seg.eager_pressure(pe),
            Source::Any => (0..seg.size()).any(|pe| seg.eager_pressure(pe)),
        }
    }

    /// Receives the oldest message matching `spec` into `buf` if one has
    /// arrived; never blocks (but does run one progress pass). Never
    /// preposted.
    pub fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        self.check_source(spec)?;
        self.undefer()?;
        // A receive posted now can match at once only a queued unexpected
        // message (`Offload::post` looks nowhere else). With none queued
        // (and none parked behind a delete), the pass runs first with
        // nothing posted: what arrives either matches an earlier-posted
        // receive (which MPI's order prefers anyway) or is queued, and only
        // then is this receive posted, against the queue. An idle poll (a
        // blocking receive's spin) then costs one pass, not a post, a pass
        // and a cancel in the matcher. Not while a sender it may receive
        // from is under eager pressure: the pass would copy an eager
        // arrival out of that sender's area before the receive takes it.
        let pressured = self.source_pressured(spec.source);
        if !pressured && self.matching.queues_empty() {
            // The quick look first: the next header of the source's ring.
            if let Some(r) = self.take_now(Taker::Unposted(spec), buf)? {
                self.idle_looks = 0;
                return r.map(Some);
            }
            match self.poll_direct(spec, buf)? {
                Quick::Taken(r) => {
                    self.idle_looks = 0;
                    return r.map(Some);
                }
                Quick::Other => self.idle_looks = 0,
                Quick::Empty => {
                    // A spinning receive runs the full pass (other rings,
                    // FINs, reclaim) every IDLE_FULL_PASS-th empty look,
                    // or at once when it has sends or copies of its own.
                    self.idle_looks = self.idle_looks.wrapping_add(1);
                    if self.idle_looks % IDLE_FULL_PASS != 0 && !self.local_work() {
                        return Ok(None);
                    }
                }
            }
        }
        self.try_recv_pass(spec, buf, pressured)
    }

    /// [`Endpoint::try_recv`] without its quick look at the source's ring:
    /// always one full progress pass, for a waiter that has just watched
    /// that ring ([`Endpoint::arrival_watch`]) and seen nothing for a while.
    pub fn try_recv_full(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        self.check_source(spec)?;
        self.undefer()?;
        let pressured = self.source_pressured(spec.source);
        self.try_recv_pass(spec, buf, pressured)
    }

    /// The part of [`Endpoint::try_recv`] after its quick look: one full
    /// pass, the receive taking the first matching arrival when nothing
    /// queued can match, else posted against the queue for the pass.
    fn try_recv_pass(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
        pressured: bool,
    ) -> Result<Option<Status>> {
        let mut pass = true;
        if !pressured && self.matching.unexpected_len() == 0 && self.matching.parked_len() == 0 {
            // Nothing queued can match: the first matching arrival of this
            // pass is taken directly when nothing is posted either.
            let (_, got) = self.progress_want(Some(spec), buf)?;
            if let Some(r) = got {
                return r.map(Some);
            }
            if self.matching.unexpected_len() == 0 {
                return Ok(None);
            }
            pass = false;
        }
        let (key, id) = self.post(spec, ReqBuf::Caller, 0, false, (false, false), buf)?;
        let r = match id {
            Some(_) if pass => self.progress_for(buf).map(|_| ()),
            _ => Ok(()),
        };
        if let Some(done) = self.take_done(key) {
            return done.map(Some);
        }
        // Not matched: a software-only receive is cancelled at once.
        if let Some(id) = id {
            let _ = self.matching.cancel(id);
        }
        self.requests.remove(key);
        r?;
        Ok(None)
    }

    /// Receives the oldest message matching `spec` (MPI rules; wildcards
    /// allowed) into `buf`, blocking until one arrives. Fails with
    /// [`Error::PeerDied`] if the peer it waits for (any peer, for
    /// `ANY_SOURCE`) dies first. A message longer than `buf` is not an
    /// error: exactly `buf.len()` bytes are written, the message is
    /// consumed, and the status says `msg_len > len` ([`Status::truncated`]).
    /// `spec.source` may be this rank (self-sends).
    ///
    /// With the prepost protocol on, an exact-source receive that finds no
    /// message is advertised to its sender, which may write the message
    /// straight into `buf`.
    pub fn recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Status> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        if !self.advertisable(spec, buf.len())
            && buf.len() as u64 <= self.node.config().pipeline_min
        {
            // Never preposted, and too small for a pipelined message to be
            // copied into it chunk by chunk: poll as `try_recv` does (its
            // quick look at the source's ring, no post and cancel per pass).
            return self.block(watch, |ep| Ok((ep.try_recv(spec, buf)?, 0)));
        }
        let addr = buf.as_mut_ptr() as u64;
        let (key, id) = self.post(spec, ReqBuf::Caller, addr, true, (false, false), buf)?;
        if let Some(done) = self.take_done(key) {
            return done;
        }
        let Some(id) = id else {
            return Err(Error::InvalidArgument("receive neither queued nor matched"));
        };
        self.counters.posted_recvs += 1;
        // A pipelined message bound to match this receive is copied
        // straight into `buf` (see `take_fragment`).
        self.blocked_recv = Some(key);
        let r = self.block(watch, |ep| {
            let ev = ep.progress_for(buf)?;
            // A receive completes only through an event of this pass.
            if ev == 0 {
                return Ok((None, 0));
            }
            Ok((ep.take_done(key), ev))
        });
        self.blocked_recv = None;
        match r {
            Ok(done) => done,
            Err(e) => {
                self.abandon(key, id, buf);
                Err(e)
            }
        }
    }

    /// Starts a nonblocking receive into `buf` (the endpoint owns it until
    /// [`Endpoint::wait`] hands it back). With the prepost protocol on, an
    /// exact-source receive is advertised to its sender when the matching
    /// rules allow (see the crate README, "How a message travels").
    pub fn irecv(&mut self, spec: MatchSpec, mut buf: Vec<u8>) -> Result<RecvRequest> {
        self.check_source(spec)?;
        self.undefer()?;
        let addr = buf.as_mut_ptr() as u64;
        self.defer_cma_at_post = true;
        let posted = self.post(spec, ReqBuf::Owned(buf), addr, true, (true, true), &mut []);
        self.defer_cma_at_post = false;
        let (key, id) = posted?;
        if id.is_some() {
            self.counters.posted_recvs += 1;
        }
        Ok(RecvRequest(key))
    }

    /// [`Endpoint::irecv`] for a caller that wants a receive that matches at
    /// once back at once: [`Started::Done`] with `(result, buf)` when it
    /// matched a message that had already arrived (the result
    /// [`Endpoint::wait`] would give, and the buffer; nothing is recorded and
    /// nothing will be reported); [`Started::Pending`] holds a pending
    /// request exactly as [`Endpoint::irecv`]
    /// returns it.
    ///
    /// **Deferred receives** (`TMX_SHMEM_TUNE=defer_recv`, on by default): an
    /// exact-source receive that is never advertised and finds its source's
    /// ring empty is deferred when the matching model allows it
    /// ([`Offload::defer`]: nothing posted, queued or parked, and every
    /// deferred receive names the same source): it waits in the model's
    /// deferred queue, oldest first, not in its posted queue. Progress, and
    /// the next `irecv_or_done`, offer the message at the front of the ring
    /// to the oldest deferred receive ([`Offload::take_deferred`]) and
    /// complete it from there as a receive that found its message would be
    /// (no posted entry, no match against a posted list); the moment the
    /// front message is not one the oldest deferred receive takes directly,
    /// all of them are posted in order, and every call that matches against
    /// the model's queues (a probe, `recv`, `try_recv`, `irecv`, a cancel,
    /// `wait`, `finalize`) posts them first; the model itself posts them
    /// before anything else enters its queues. The result is a schedule in
    /// which they were posted when made, as MPI orders it: tm-match's
    /// differential tests check the model against its reference matcher,
    /// and `tests/deferred.rs` checks MPI's order rules on random programs
    /// with deferral on and off.
    pub fn irecv_or_done(
        &mut self,
        spec: MatchSpec,
        mut buf: Vec<u8>,
    ) -> Result<Started<RecvRequest, RecvDone>> {
        self.check_source(spec)?;
        if self.matching.deferred_len() != 0 {
            // Older deferred receives first: their messages, then (if any
            // is left) either this one joins them (the model decides: the
            // same source) or they are posted. The common case, nothing
            // arrived and nothing to post, is the first test
            // `take_deferred` would make, answered here without the call
            // (a window of receives made before its messages).
            if !self.deferred_quiet() {
                self.take_deferred()?;
            }
            if self.matching.deferred_len() != 0 {
                if self.may_defer(spec, buf.len()) {
                    match self.defer(spec, buf) {
                        Ok(req) => return Ok(Started::Pending(req)),
                        Err(back) => buf = back,
                    }
                }
                self.post_deferred()?;
            }
        }
        // What has arrived from the source goes to the model first, so that
        // a receive whose message is already here completes in this call
        // (taken straight into `buf` when nothing posted or queued could
        // claim it first).
        self.defer_cma_of_posted = true;
        let drained = self.drain_source(spec, &mut buf);
        self.defer_cma_of_posted = false;
        if let Some(result) = drained? {
            return Ok(Started::Done((result, buf)));
        }
        if self.may_defer(spec, buf.len()) {
            if let Source::Rank(s) = spec.source {
                if self.ring_empty(s) {
                    match self.defer(spec, buf) {
                        Ok(req) => return Ok(Started::Pending(req)),
                        Err(back) => buf = back,
                    }
                }
            }
        }
        if !self.advertisable(spec, buf.len()) {
            // Never offered to the sender (`post` would find it not
            // eligible): queued in software at once when no queued message
            // could match it, exactly as `post` would queue it, without its
            // general outcome handling.
            let key = self.next_id;
            if let Ok(id) = self.matching.post_software(spec, key)? {
                return self
                    .queued_in_software(key, id, spec, ReqBuf::Owned(buf))
                    .map(Started::Pending);
            }
        }
        let addr = buf.as_mut_ptr() as u64;
        self.defer_cma_at_post = true;
        let posted = self.post(spec, ReqBuf::Owned(buf), addr, true, (true, false), &mut []);
        self.defer_cma_at_post = false;
        let (key, id) = posted?;
        if id.is_some() {
            self.counters.posted_recvs += 1;
            return Ok(Started::Pending(RecvRequest(key)));
        }
        if self.late_cma.back().is_some_and(|&(k, _)| k == key) {
            return Ok(Started::Pending(RecvRequest(key)));
        }
        match self.requests.remove_if_done(key) {
            Some(req) => {
                let buf = req.buf.into_vec();
                let result = match req.done {
                    Some(d) => unbox(d),
                    None => Err(Error::InvalidArgument("receive request not complete")),
                };
                Ok(Started::Done((result, buf)))
            }
            None => Err(Error::InvalidArgument("receive neither queued nor matched")),
        }
    }

    /// [`Endpoint::irecv_or_done`] into memory the caller lends instead of
    /// a buffer it hands over: `len` bytes at `ptr`, written in place (a
    /// message already here is copied into it at once, an eager or
    /// pipelined one when it matches, a preposted one by its sender, a
    /// CMA one read into it). [`Started::Done`] holds the result of a
    /// receive that completed in the call; a pending request completes as
    /// an [`Endpoint::irecv`] one does, reported with an empty buffer.
    /// Deferred as [`Endpoint::irecv_or_done`] defers (the front message
    /// is then copied into the lent memory when the receive takes it), so
    /// that a window of receives made before their messages costs no post
    /// each and the message of a later receive can be taken directly.
    ///
    /// # Safety
    ///
    /// `ptr` is valid for writes of `len` bytes (any pointer if `len` is
    /// 0), and that memory stays valid, and is neither read nor written by
    /// anyone else, until the receive completes (or is cancelled), which
    /// this endpoint reports through [`Endpoint::wait`],
    /// [`Endpoint::take_completed`] or a cancel. A receive abandoned
    /// after an error (a dead peer) may still be written by a live sender
    /// that claimed it, until that sender finishes.
    #[inline(always)]
    pub unsafe fn irecv_or_done_lent(
        &mut self,
        spec: MatchSpec,
        ptr: *mut u8,
        len: usize,
    ) -> Result<Started<RecvRequest, Result<Status>>> {
        self.check_source(spec)?;
        let lent = Lent {
            addr: ptr as usize,
            len,
        };
        if self.matching.deferred_len() != 0 {
            // Older deferred receives first, then this one joins those
            // still waiting or they are posted (as in `irecv_or_done`).
            if !self.deferred_quiet() {
                self.take_deferred()?;
            }
            if self.matching.deferred_len() != 0 {
                if self.may_defer(spec, len) {
                    if let Ok(req) = self.defer_into(spec, ReqBuf::Lent(lent)) {
                        return Ok(Started::Pending(req));
                    }
                }
                self.post_deferred()?;
            }
        }
        {
            // SAFETY: the caller's contract; no request holds this memory
            // yet, so this slice is the only reference to it.
            let buf = unsafe { lent.bytes() };
            self.defer_cma_of_posted = true;
            let drained = self.drain_source(spec, buf);
            self.defer_cma_of_posted = false;
            if let Some(result) = drained? {
                return Ok(Started::Done(result));
            }
        }
        if self.may_defer(spec, len) {
            if let Source::Rank(s) = spec.source {
                if self.ring_empty(s) {
                    if let Ok(req) = self.defer_into(spec, ReqBuf::Lent(lent)) {
                        return Ok(Started::Pending(req));
                    }
                }
            }
        }
        if !self.advertisable(spec, len) {
            // Queued in software at once when nothing queued could match
            // (as in `irecv_or_done`).
            let key = self.next_id;
            if let Ok(id) = self.matching.post_software(spec, key)? {
                return self
                    .queued_in_software(key, id, spec, ReqBuf::Lent(lent))
                    .map(Started::Pending);
            }
            // A message is queued: the model's post searches the queue once.
            // Matched, the message is delivered into the lent memory with no
            // request made; not, the receive is queued in software.
            match self.matching.post(spec, key, false)? {
                PostOutcome::Matched { msg, .. } => {
                    // SAFETY: the caller's contract; no request holds this
                    // memory, so this slice is the only reference to it.
                    let buf = unsafe { lent.bytes() };
                    return self.deliver_matched(msg, buf).map(Started::Done);
                }
                PostOutcome::Queued { id, .. } => {
                    return self
                        .queued_in_software(key, id, spec, ReqBuf::Lent(lent))
                        .map(Started::Pending);
                }
            }
        }
        self.defer_cma_at_post = true;
        let posted = self.post(
            spec,
            ReqBuf::Lent(lent),
            lent.addr as u64,
            true,
            (true, false),
            &mut [],
        );
        self.defer_cma_at_post = false;
        let (key, id) = posted?;
        if id.is_some() {
            self.counters.posted_recvs += 1;
            return Ok(Started::Pending(RecvRequest(key)));
        }
        match self.requests.remove_if_done(key) {
            Some(req) => Ok(Started::Done(match req.done {
                Some(d) => unbox(d),
                None => Err(Error::InvalidArgument("receive request not complete")),
            })),
            // Matched at the post, lent memory is filled in the call (it
            // never waits in `late_cma`).
            None => Err(Error::InvalidArgument("receive neither queued nor matched")),
        }
    }

    /// The receive half of [`Endpoint::irecv_or_done`] that completes at
    /// once, into the caller's `buf`: if a message that a receive for `spec`
    /// posted now would match has already arrived, it is received into
    /// `buf` (as [`Endpoint::recv`] does: a longer message fills `buf` and
    /// says so in the status) and its status returned; otherwise
    /// `Ok(None)`, and nothing was received or posted (arrivals may have
    /// moved from the rings to the matcher's queues). A caller that then
    /// wants the receive to wait calls [`Endpoint::irecv_or_done`] with a
    /// buffer of its own.
    ///
    /// For an upper layer that unpacks a small message (a datatype receive)
    /// from a buffer on its stack instead of a staging buffer it must keep
    /// with the request. Unlike [`Endpoint::try_recv`] it neither posts the
    /// deferred receives nor runs a progress pass: a miss costs one look at
    /// the source's ring (and, with messages queued, one post and cancel
    /// in the matcher), and deferral stays as it was. While an older
    /// deferred receive is still waiting, nothing is taken (the model
    /// refuses: the older receive comes first).
    // Inlined: its result, returned through memory, was copied on in
    // overlapping pieces that stalled store forwarding in the caller.
    #[inline]
    pub fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if let Some(st) = self.recv_arrived(spec, buf)? {
            return Ok(Some(st));
        }
        self.check_source(spec)?;
        if self.matching.deferred_len() != 0 {
            self.take_deferred()?;
            if self.matching.deferred_len() != 0 {
                return Ok(None);
            }
        }
        if let Some(r) = self.drain_source(spec, buf)? {
            return r.map(Some);
        }
        if self.matching.unexpected_len() == 0 && self.matching.parked_len() == 0 {
            // Nothing queued could match (and what was in the ring that
            // could went to the queue or was taken above).
            return Ok(None);
        }
        // A queued message may match: the receive is posted against the
        // queue (no pass), and withdrawn if it did not match at once.
        let (key, id) = self.post(spec, ReqBuf::Caller, 0, false, (false, false), buf)?;
        if let Some(done) = self.take_done(key) {
            return done.map(Some);
        }
        if let Some(id) = id {
            let _ = self.matching.cancel(id);
        }
        self.requests.remove(key);
        Ok(None)
    }

    /// The arrived fast path of [`Endpoint::irecv_or_done`] (and of
    /// [`Endpoint::recv_now`]): a receive whose message is already the next
    /// header of its source's ring, in the one case where nothing can come
    /// between them. If
    /// - `spec` names one other rank, the source is not under eager
    ///   pressure, and the matching model gives a receive posted nowhere
    ///   its turn ([`Offload::unposted_turn`]: no receive posted or
    ///   deferred, nothing parked, nothing queued),
    ///   and
    /// - the next header of that rank's ring is an inline, inline-ext or
    ///   eager message (well formed, not synchronous, one the model can
    ///   count) that fits `buf` whole and that `spec` matches (the model's
    ///   decision: `UnpostedTurn::take`),
    ///
    /// the message is received into `buf[..len]` and its status returned.
    /// This is what `irecv_or_done` would do in that case (its
    /// `take_now`): same counters, same model accounting, same status.
    /// Otherwise `Ok(None)` and nothing was taken; the caller goes on to
    /// `irecv_or_done`, which decides every other case.
    ///
    /// It exists for its cost: no request, no staging, a small result, and
    /// no large `Result` moved through memory (the general call costs about
    /// twice its instructions for the same message).
    #[inline(always)]
    pub fn recv_arrived(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if self.matching.deferred_len() != 0 {
            return Ok(None);
        }
        self.take_front(Taker::Unposted(spec), buf)
    }

    /// [`Endpoint::recv_arrived`] for a consumer that reads the payload
    /// where it lies instead of having it copied into a buffer: a datatype
    /// receive that unpacks straight from the sender's eager block (one
    /// copy less than receiving into a staging buffer and unpacking from
    /// there).
    ///
    /// The same conditions as [`Endpoint::recv_arrived`], with `cap` for
    /// the buffer's length, and one more: the message is an eager one (in
    /// a block; inline messages are left to the copying calls). Then
    /// `f` is called once with the whole payload (the message's `len`
    /// bytes, at most `cap`), the block is released after it returns, and
    /// the status is returned. Otherwise `Ok(None)`: nothing was taken and
    /// `f` was not called.
    ///
    /// `f` reads memory the sender wrote and will reuse once the block is
    /// released; it runs before that, and must not keep the slice.
    pub fn recv_arrived_with(
        &mut self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Status>> {
        if self.matching.deferred_len() != 0 {
            return Ok(None);
        }
        let Some((s, h)) = self.eager_front(Taker::Unposted(spec), cap)? else {
            return Ok(None);
        };
        self.consume_front(s, &h, f).map(Some)
    }

    /// Takes eager message `h` from the front of `s`'s ring (checked and
    /// counted by [`Endpoint::eager_front`]): `f` reads its payload where
    /// it lies, then the block is released. Returns its status.
    pub(super) fn consume_front(
        &mut self,
        s: u32,
        h: &Header,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Status> {
        let seg = self.node.segment();
        let me = seg.rank();
        self.peers[s as usize].inbox.skip(seg.ring(s, me));
        let len = h.nbytes as usize;
        // Cannot fail: `eager_front` checked the block.
        let src = eager_src(self.node.config().eager_bytes, h)? as usize;
        // SAFETY: [src, src + len) is inside the sender's eager area
        // (`eager_src` checked src + len <= area); the sender wrote it
        // before publishing the header we acquired, and does not write it
        // again before we raise the release flag below, after `f` has
        // returned (the slice does not outlive this call).
        let payload = unsafe { core::slice::from_raw_parts(seg.eager_ptr(s).add(src), len) };
        if len <= IN_PLACE_PREFETCH_STREAM
            || self.peers[s as usize].inbox.peek(seg.ring(s, me)).is_none()
        {
            prefetch::read_range(payload.as_ptr(), len);
        }
        f(payload);
        eager_flag(seg, s, h.word).store(1, Ordering::Release);
        self.counters.received += 1;
        Ok(Status {
            source: s,
            tag: h.tag,
            context: h.context,
            len,
            msg_len: len,
            cancelled: false,
        })
    }

    /// Whether a receive for `spec` could be taken at the front of its
    /// source's ring when its message comes ([`Endpoint::recv_arrived`]'s
    /// conditions that do not depend on the message): an exact source
    /// other than this rank, the matching model ready to give a receive
    /// posted nowhere its turn ([`Offload::unposted_may_take`]), and the
    /// source not under eager pressure. While it is `false`, waiting for
    /// [`Endpoint::recv_arrived_with`] to succeed is pointless: take the
    /// general path.
    pub fn front_open(&self, spec: MatchSpec) -> bool {
        let Source::Rank(s) = spec.source else {
            return false;
        };
        let seg = self.node.segment();
        s != seg.rank()
            && s < seg.size()
            && self.matching.unposted_may_take(&spec)
            && !seg.eager_pressure(s)
    }

    /// Whether `req` has completed (runs one progress pass).
    pub fn test(&mut self, req: &RecvRequest) -> Result<bool> {
        self.refile_finished();
        if !self.is_done(req.0) {
            self.progress_for(&mut [])?;
        }
        Ok(self.is_done(req.0))
    }

    /// Blocks until `req` completes; returns its status and buffer (a
    /// truncated message fills it and says so in the status; a cancelled
    /// receive returns it untouched with `status.cancelled`). On an error
    /// (a dead peer) the buffer is dropped.
    pub fn wait(&mut self, req: RecvRequest) -> Result<(Status, Vec<u8>)> {
        let key = req.0;
        self.refile_finished();
        self.undefer()?;
        // Already complete (the common case when an upper layer collects
        // what `take_completed` reported): one lookup, no progress.
        if let Some(req) = self.requests.remove_if_done(key) {
            return self.finish_wait(req);
        }
        let spec = match self.requests.get(key) {
            Some(r) => r.spec,
            None => return Err(Error::InvalidArgument("unknown receive request")),
        };
        let watch = self.check_source(spec)?;
        let r = self.block(watch, |ep| {
            if ep.is_done(key) {
                return Ok((Some(()), 1));
            }
            let ev = ep.progress_for(&mut [])?;
            if ev == 0 {
                return Ok((None, 0));
            }
            Ok((ep.is_done(key).then_some(()), ev))
        });
        if let Err(e) = r {
            if let Some(id) = self.recv_id(key) {
                self.abandon(key, id, &mut []);
            }
            return Err(e);
        }
        let Some(req) = self.requests.remove(key) else {
            return Err(Error::InvalidArgument("unknown receive request"));
        };
        self.finish_wait(req)
    }

    /// The result of a completed receive request removed by its waiter.
    pub(super) fn finish_wait(&mut self, req: Req) -> Result<(Status, Vec<u8>)> {
        self.unfeed(req.fed);
        let buf = req.buf.into_vec();
        match req.done {
            Some(Ok(st)) => Ok((st, buf)),
            Some(Err(e)) => Err(*e),
            None => Err(Error::InvalidArgument("receive request not complete")),
        }
    }
}
