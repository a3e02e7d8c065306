//! Feeding the offload model (tm-match) and executing what comes out:
//! arrivals, posts, actions on the prepost rings, completions.

use super::*;

/// A message as the offload model holds it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Msg {
    /// Arrived through a header ring: key into `Endpoint::unexpected`.
    Stored(u64),
    /// Written by the sender straight into a preposted receive buffer: the
    /// prepost result word (length | tag << 32, or `RESULT_FAILED`).
    Direct(u64),
}

/// [`Endpoint::countable`] with the layout's largest context id, rank and
/// tag.
#[inline(always)]
pub(super) fn countable((max_context, max_rank, max_tag): (u32, u32, u32), h: &Header) -> bool {
    !h.has(Flags::COUNTED) || (h.context <= max_context && h.source <= max_rank && h.tag <= max_tag)
}

/// Where the payload of an inline-ext message went ([`Endpoint::take_ext`]).
pub(super) enum ExtTaken {
    /// Into the blocked receive that is not posted (its result).
    Unposted(Result<Status>),
    /// Into a posted receive (completed).
    Posted,
    /// Copied out for the general path (`None`: a length the ring cannot
    /// carry; the receive reports it).
    Data(Option<Vec<u8>>),
}

/// A header that arrived before its receive. An eager payload stays in the
/// sender's eager area (the receive copies it once, straight to the user
/// buffer) unless the sender raises its eager-pressure flag: then progress
/// copies it out here and frees the sender's block, so receipt never depends
/// on matching and a full eager area always drains.
#[derive(Debug)]
pub(super) struct Unexpected {
    pub(super) hdr: Header,
    pub(super) data: Option<Vec<u8>>,
}

/// Copies inline message `h` into `buf` as [`Endpoint::deliver`] does
/// (truncated to `buf`) and returns the bytes copied; `None`, nothing
/// written, for any other header, a synchronous one (its match is
/// acknowledged) and a malformed one (`deliver` reports it).
#[inline(always)]
fn inline_into(h: &Header, buf: &mut [u8]) -> Option<usize> {
    if h.kind != Kind::Inline as u8 || h.has(Flags::SYNC) {
        return None;
    }
    let msg_len = h.nbytes as usize;
    let (bytes, len) = h.inline_payload();
    if len != msg_len {
        return None;
    }
    let n = msg_len.min(buf.len());
    buf[..n].copy_from_slice(&bytes[..n]);
    Some(n)
}

impl Endpoint {
    /// Whether the model can count arrival `h`: a message its sender
    /// counted in our phase must fit the tag layout (three comparisons:
    /// what `TagLayout::encode` would check), or it takes the normal path,
    /// where [`Endpoint::handle_arrival_queued`] reports it.
    #[inline(always)]
    pub(super) fn countable(&self, h: &Header) -> bool {
        countable(self.layout_max, h)
    }

    /// Offers arrival `h` (its source set from its ring) to a blocked
    /// receive for `spec` that is not posted; the model decides
    /// ([`Offload::offer_unposted`]). `deliverable`: this endpoint could
    /// deliver it into that receive's buffer now. On [`Unposted::Taken`]
    /// the message is accounted for and the caller must deliver it.
    #[inline(always)]
    pub(super) fn offer_unposted(
        &mut self,
        spec: &MatchSpec,
        h: &Header,
        deliverable: bool,
    ) -> Result<Unposted> {
        let deliverable = deliverable && self.countable(h);
        let taken =
            self.matching
                .offer_unposted(spec, &envelope(h), h.has(Flags::COUNTED), deliverable);
        // A sync the count made due: store it in our phase now.
        if taken == Unposted::Taken && self.matching.has_output() {
            self.poll_actions()?;
        }
        Ok(taken)
    }

    /// The continuation of inline-ext message `h`, just taken from `s`'s
    /// ring, before its header is handled (out of line: the inline
    /// messages' loop stays lean). The blocked receive that is not posted
    /// (`want`) takes it straight from the slots when the model lets it
    /// ([`Endpoint::offer_unposted`]; `want` is cleared once the message
    /// is its own, taken or not: nothing later may overtake it). Otherwise
    /// a posted receive waiting for it takes it from the slots
    /// ([`Endpoint::handle_ext_arrival_posted`]). Otherwise its payload is
    /// copied out for the general path.
    #[inline(never)]
    pub(super) fn take_ext(
        &mut self,
        s: u32,
        h: &Header,
        want: &mut Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<ExtTaken> {
        if let Some(spec) = *want {
            match self.offer_unposted(&spec, h, true)? {
                Unposted::Taken => {
                    *want = None;
                    return Ok(ExtTaken::Unposted(self.deliver_ext(s, *h, buf)));
                }
                Unposted::Queue => *want = None,
                Unposted::NotMine => {}
            }
        }
        if self.handle_ext_arrival_posted(s, h, buf)? {
            return Ok(ExtTaken::Posted);
        }
        let seg = self.node.segment();
        Ok(ExtTaken::Data(take_ext_vec(
            &mut self.peers[s as usize].inbox,
            seg.ring(s, seg.rank()),
            h,
        )))
    }

    /// [`Endpoint::handle_arrival`] for inline-ext message `h`, just taken from
    /// `s`'s ring (its continuation slots not yet consumed), when a
    /// software receive is waiting for it and it is not synchronous: the
    /// model takes that receive as `arrive` would, and the payload goes
    /// from the continuation slots straight into the receive's buffer
    /// ([`Endpoint::deliver_ext`]; `buf` for the blocked call's receive),
    /// with no intermediate vector. Same status, counters and completion
    /// as the general path (`take_ext_vec`, then `arrive` and `deliver`).
    /// `false`, with nothing consumed or changed, otherwise.
    #[inline(never)]
    pub(super) fn handle_ext_arrival_posted(
        &mut self,
        s: u32,
        h: &Header,
        buf: &mut [u8],
    ) -> Result<bool> {
        if h.has(Flags::SYNC) {
            return Ok(false);
        }
        let env = envelope(h);
        let counted = h.has(Flags::COUNTED);
        if counted && self.layout.encode(env).is_err() {
            return Ok(false);
        }
        let Some((_, recv)) = self.matching.take_matching_posted(&env, counted) else {
            return Ok(false);
        };
        // The continuation is consumed first, whatever happens next.
        let mut back = None;
        let result = match self.requests.get_mut(recv) {
            None => {
                // Abandoned receive: consumed as the general path does.
                let seg = self.node.segment();
                let data = take_ext_vec(
                    &mut self.peers[s as usize].inbox,
                    seg.ring(s, seg.rank()),
                    h,
                );
                let _ = self.deliver(*h, data, &mut []);
                None
            }
            Some(req) => Some(match &mut req.buf {
                ReqBuf::Caller => self.deliver_ext(s, *h, buf),
                ReqBuf::Owned(v) => {
                    let mut v = core::mem::take(v);
                    let r = self.deliver_ext(s, *h, &mut v);
                    back = Some(v);
                    r
                }
                ReqBuf::Lent(l) => {
                    let l = *l;
                    // SAFETY: the request is pending (matched just now);
                    // its lent memory is referred to by nothing else.
                    self.deliver_ext(s, *h, unsafe { l.bytes() })
                }
            }),
        };
        if let Some(result) = result {
            if result.is_err() {
                // (`deliver` counts a malformed message as received too.)
                self.counters.received += 1;
            }
            self.finish_recv_with(recv, result, back);
        }
        // A sync the count made due: store it in our phase now.
        while let Some(a) = self.matching.poll_action() {
            self.handle_action(a)?;
        }
        Ok(true)
    }

    /// Hands one message from a header ring to the offload model: as an
    /// engine-unexpected message (counted in the phase) if the sender
    /// counted it, otherwise as one that bypassed the engine. A receive it
    /// completes is delivered (into `buf` for the blocked call's receive).
    ///
    /// The common case (a software receive waiting for it) is inlined into
    /// [`Endpoint::handle_header`], on the header and data as they came (the
    /// [`Unexpected`] is built only to be stored); the rest is
    /// [`Endpoint::handle_arrival_queued`].
    #[inline(always)]
    pub(super) fn handle_arrival(
        &mut self,
        hdr: Header,
        data: Option<Vec<u8>>,
        buf: &mut [u8],
    ) -> Result<()> {
        let env = envelope(&hdr);
        let counted = hdr.has(Flags::COUNTED);
        // The common case first: a software receive is waiting for it. The
        // model takes that receive as `arrive` would, and the message goes
        // straight into it (no store, no queued completion).
        if !counted || self.layout.encode(env).is_ok() {
            if let Some((_, recv)) = self.matching.take_matching_posted(&env, counted) {
                // A sync the count made due: store it in our phase now.
                while let Some(a) = self.matching.poll_action() {
                    self.handle_action(a)?;
                }
                self.complete_stored(recv, hdr, data, buf);
                return Ok(());
            }
        }
        self.handle_arrival_queued(Unexpected { hdr, data }, env, counted, buf)
    }

    /// [`Endpoint::handle_arrival`] for a message no software receive takes at
    /// once: stored and handed to the model.
    #[inline(never)]
    pub(super) fn handle_arrival_queued(
        &mut self,
        u: Unexpected,
        env: Envelope,
        counted: bool,
        buf: &mut [u8],
    ) -> Result<()> {
        if u.hdr.kind == Kind::Eager && u.data.is_none() {
            self.uncopied_eager += 1;
        }
        let key = self.unexpected.insert(u);
        match (counted, self.layout.encode(env)) {
            (true, Ok(tag)) => self.matching.handle_event(EngineEvent::Unexpected {
                tag,
                msg: Msg::Stored(key),
                sync_request: false,
            })?,
            (true, Err(_)) => {
                // The layout cannot carry it, so the model cannot count it:
                // our phase stays behind from now on and senders ignore our
                // preposts (safe).
                tracing::warn!(?env, "counted message outside the tag layout");
                self.matching.arrive(env, Msg::Stored(key))?;
            }
            (false, _) => self.matching.arrive(env, Msg::Stored(key))?,
        }
        self.poll_matching(buf)
    }

    /// Executes the offload model's actions and handles its completions
    /// until it has nothing more to say.
    pub(super) fn poll_matching(&mut self, buf: &mut [u8]) -> Result<()> {
        loop {
            if let Some(a) = self.matching.poll_action() {
                self.handle_action(a)?;
            } else if let Some(c) = self.matching.poll_completion() {
                self.handle_completion(c, buf)?;
            } else {
                return Ok(());
            }
        }
    }

    /// Executes the offload actions waiting (out of line: a sync is due
    /// once per `sync_interval` messages at most).
    #[cold]
    #[inline(never)]
    pub(super) fn poll_actions(&mut self) -> Result<()> {
        while let Some(a) = self.matching.poll_action() {
            self.handle_action(a)?;
        }
        Ok(())
    }

    /// Executes one offload action on our prepost rings and phase.
    pub(super) fn handle_action(&mut self, a: tm_match::Action) -> Result<()> {
        let seg = self.node.segment();
        let me = seg.rank();
        let phase = seg.phase(me);
        match a {
            tm_match::Action::Sync { count } => phase.apply(count),
            tm_match::Action::Add {
                handle,
                entry,
                count,
            } => {
                phase.apply(count);
                let Some(e) = self.requests.engine.get_mut(&handle) else {
                    return Err(Error::InvalidArgument(
                        "offload model added a receive the endpoint did not offload",
                    ));
                };
                let p = Prepost {
                    tag: entry.tag,
                    mask: entry.mask,
                    count,
                    capacity: e.capacity,
                    offset: e.addr,
                    cookie: handle.to_bits(),
                    flags: 0,
                };
                let peer = &mut self.peers[e.peer as usize];
                // `can_post` was checked when the receive was posted; if the
                // slot is still busy the entry is simply never published (a
                // later delete of it succeeds at once).
                e.index = peer.poster.post(seg.prepost(me, e.peer), &p).ok();
                if e.index.is_some() {
                    self.counters.preposts += 1;
                    tracing::trace!(peer = e.peer, "receive preposted");
                }
            }
            tm_match::Action::Delete { handle, count } => {
                phase.apply(count);
                let Some(e) = self.requests.engine.get_mut(&handle) else {
                    return Err(Error::InvalidArgument(
                        "offload model deleted a receive the endpoint does not hold",
                    ));
                };
                let outcome = match e.index {
                    None => Withdraw::Withdrawn,
                    Some(i) => {
                        let ring = seg.prepost(me, e.peer);
                        self.peers[e.peer as usize].poster.withdraw(ring, i)
                    }
                };
                match outcome {
                    Withdraw::Withdrawn => {
                        if e.index.is_some() {
                            self.counters.preposts_withdrawn += 1;
                        }
                        self.requests.engine.remove(&handle);
                        self.matching.handle_event(EngineEvent::Deleted {
                            handle,
                            sync_request: false,
                        })?;
                    }
                    // The sender is writing: its DONE is picked up by
                    // `poll_engine`, then reported as matched + delete failed.
                    Withdraw::Claimed => e.deleting = true,
                    Withdraw::Done(word) => {
                        let e = *e;
                        self.requests.engine.remove(&handle);
                        self.engine_matched(handle, &e, word)?;
                        self.matching
                            .handle_event(EngineEvent::DeleteFailed { handle })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Reports a prepost the sender completed as an engine match.
    pub(super) fn engine_matched(
        &mut self,
        handle: RecvId,
        e: &EngineEntry,
        word: u64,
    ) -> Result<()> {
        let tag = (word >> 32) as u32 & 0x7fff_ffff;
        let env = Envelope {
            context_id: e.context,
            source: e.peer,
            tag,
        };
        // A failed write carries no tag: report the entry's own spec.
        let tag = self.layout.encode(env).map_err(|_| Error::BadHeader {
            source_pe: e.peer,
            reason: "prepost result tag outside the tag layout",
        })?;
        self.matching.handle_event(EngineEvent::Matched {
            handle,
            tag,
            msg: Msg::Direct(word),
        })?;
        Ok(())
    }

    /// Picks up preposts their senders completed. Returns how many.
    pub(super) fn poll_engine(&mut self, buf: &mut [u8]) -> Result<usize> {
        let seg = self.node.segment();
        let me = seg.rank();
        let done: Vec<(RecvId, EngineEntry, u64)> = self
            .requests
            .engine
            .iter()
            .filter_map(|(&id, e)| {
                let i = e.index?;
                match self.peers[e.peer as usize]
                    .poster
                    .state(seg.prepost(me, e.peer), i)
                {
                    PostState::Done(word) => Some((id, *e, word)),
                    _ => None,
                }
            })
            .collect();
        for (id, e, word) in &done {
            self.requests.engine.remove(id);
            self.engine_matched(*id, e, *word)?;
            if e.deleting {
                self.matching
                    .handle_event(EngineEvent::DeleteFailed { handle: *id })?;
            }
        }
        if !done.is_empty() {
            self.poll_matching(buf)?;
        }
        Ok(done.len())
    }

    /// Handles one completion of the offload model.
    pub(super) fn handle_completion(
        &mut self,
        c: Completion<u64, Msg>,
        buf: &mut [u8],
    ) -> Result<()> {
        match c {
            Completion::Matched { recv, env, msg, .. } => match msg {
                Msg::Stored(k) => {
                    let u = self.take_stored(k)?;
                    self.complete_stored(recv, u.hdr, u.data, buf);
                }
                Msg::Direct(word) => self.complete_direct(recv, env, word, buf),
            },
            Completion::Queued { .. } => self.counters.unexpected += 1,
            Completion::Cancelled { recv, .. } => {
                self.counters.cancelled_recvs += 1;
                self.finish_recv(recv, Ok(Status::cancelled()));
            }
            Completion::CancelFailed { .. } => {}
        }
        Ok(())
    }

    /// Receive `recv` matched the message of header `hdr` (and `data`)
    /// from a header ring (or a self-send): delivers it into the request's
    /// buffer (`buf` for the blocked call's receive) and completes the
    /// request.
    ///
    /// The inline fast path is inlined, on the header as it came (no
    /// [`Unexpected`] built); the rest is
    /// [`Endpoint::complete_stored_slow`].
    #[inline(always)]
    pub(super) fn complete_stored(
        &mut self,
        recv: u64,
        hdr: Header,
        data: Option<Vec<u8>>,
        buf: &mut [u8],
    ) {
        // The common case of the posted-receive path: a well-formed,
        // non-synchronous inline message into an `irecv`'s own buffer.
        // Exactly what `deliver` and `finish_recv_with` do for it (same
        // copy, status, counters and feed entry), in one lookup, with no
        // buffer taken out and put back and no result passed around.
        let h = &hdr;
        let msg_len = h.nbytes as usize;
        if h.kind == Kind::Inline
            && !h.has(Flags::SYNC)
            && usize::from(h.aux) == msg_len
            && msg_len <= INLINE_MAX
        {
            if let Some(req) = self.requests.get_mut(recv) {
                if let Some(v) = req.buf.memory() {
                    let n = msg_len.min(v.len());
                    copy_inline(h, &mut v[..n]);
                    let st = delivered(&mut self.counters, h.source, h, n, v.len());
                    set_done(&mut req.done, Ok(st));
                    req.id = None;
                    feed_once(req, recv, &mut self.feed, &mut self.feed_queued);
                    return;
                }
            }
        }
        self.complete_stored_slow(recv, Unexpected { hdr, data }, buf);
    }

    /// [`Endpoint::complete_stored`] in general: through [`Endpoint::deliver`].
    #[inline(never)]
    pub(super) fn complete_stored_slow(&mut self, recv: u64, u: Unexpected, buf: &mut [u8]) {
        let Some(req) = self.requests.get_mut(recv) else {
            // The receive was abandoned (its call failed): consume the
            // message so that its sender's eager block is released (or its
            // CMA send gets the FIN).
            let _ = self.deliver(u.hdr, u.data, &mut []);
            return;
        };
        if (self.defer_cma_at_post
            || (self.defer_cma_of_posted && req.user)
            || (self.batch_cma_now && !split_size(&u.hdr, &req.buf, self.node.config().cma_split)))
            && u.hdr.kind == Kind::Cma
            && u.data.is_none()
            && matches!(req.buf, ReqBuf::Owned(_))
        {
            // Matched as a nonblocking receive was posted: the copy waits
            // for the next progress pass, and the request, now pending,
            // reports its completion then. Matched in a progress pass: the
            // copy waits for the end of the pass, to be read together
            // with the others of the pass.
            if self.defer_cma_at_post {
                req.user = true;
            }
            // Matched: no handle in the model any more (until the copy, a
            // cancel answers "not cancelled" without asking the model).
            req.id = None;
            self.late_cma.push_back((recv, u));
            return;
        }
        // An owned buffer taken out for the delivery, put back by
        // `finish_recv_with` (one lookup for both).
        let mut back = None;
        let result = match &mut req.buf {
            ReqBuf::Caller => self.deliver(u.hdr, u.data, buf),
            ReqBuf::Owned(v) => {
                let mut v = core::mem::take(v);
                let r = self.deliver(u.hdr, u.data, &mut v);
                back = Some(v);
                r
            }
            ReqBuf::Lent(l) => {
                let l = *l;
                // SAFETY: the request is pending (matched just now); its
                // lent memory is referred to by nothing else.
                self.deliver(u.hdr, u.data, unsafe { l.bytes() })
            }
        };
        if matches!(&result, Ok(st) if st.truncated()) {
            self.counters.truncated += 1;
        }
        self.finish_recv_with(recv, result, back);
    }

    /// Receive `recv` was written by its sender through a prepost
    /// (`word`: the prepost result word): completes it.
    pub(super) fn complete_direct(&mut self, recv: u64, env: Envelope, word: u64, buf: &[u8]) {
        let Some(req) = self.requests.get_mut(recv) else {
            return;
        };
        let result = if word & RESULT_FAILED != 0 {
            Err(Error::PrepostWriteFailed { pe: env.source })
        } else {
            let len = (word & 0xffff_ffff) as usize;
            let cap = req.buf.capacity().unwrap_or(buf.len());
            self.counters.received += 1;
            if len > cap {
                // The claimer checked the capacity: a peer bug.
                Err(Error::BadHeader {
                    source_pe: env.source,
                    reason: "prepost result longer than the receive buffer",
                })
            } else {
                Ok(Status {
                    source: env.source,
                    tag: env.tag,
                    context: env.context_id,
                    len,
                    msg_len: len,
                    cancelled: false,
                })
            }
        };
        self.finish_recv_with(recv, result, None);
    }

    /// Marks receive `key` complete (to the feed if it is the user's).
    pub(super) fn finish_recv(&mut self, key: u64, result: Result<Status>) {
        self.finish_recv_with(key, result, None);
    }

    /// [`Endpoint::finish_recv`] that also puts back the owned buffer
    /// `back` taken out for the delivery.
    #[inline]
    pub(super) fn finish_recv_with(
        &mut self,
        key: u64,
        result: Result<Status>,
        back: Option<Vec<u8>>,
    ) {
        let Some(req) = self.requests.get_mut(key) else {
            return;
        };
        if let Some(v) = back {
            req.buf = ReqBuf::Owned(v);
        }
        set_done(&mut req.done, boxed(result));
        req.id = None;
        feed_once(req, key, &mut self.feed, &mut self.feed_queued);
    }

    /// Takes a queued unexpected message out of the store.
    pub(super) fn take_stored(&mut self, key: u64) -> Result<Unexpected> {
        let u = self.unexpected.remove(&key).ok_or(Error::InvalidArgument(
            "matcher returned a message the endpoint does not hold",
        ))?;
        if u.hdr.kind == Kind::Eager && u.data.is_none() {
            self.uncopied_eager -= 1;
        }
        Ok(u)
    }

    /// Delivers queued message `msg`, which a receive matched as it was
    /// posted (`PostOutcome::Matched`), into `buf`, memory the caller holds,
    /// as [`Endpoint::complete_stored_slow`] completes such a receive into
    /// lent memory (delivered in the call), but with no request made for
    /// it: the receive's result.
    pub(super) fn deliver_matched(&mut self, msg: Msg, buf: &mut [u8]) -> Result<Result<Status>> {
        let Msg::Stored(key) = msg else {
            // Prepost results complete the receive they were written into;
            // they are never queued as unexpected.
            return Err(Error::InvalidArgument(
                "matcher returned a message written into a receive",
            ));
        };
        // The common small case (an inline, not synchronous message) read
        // where it is stored and dropped there: the entry and its header
        // are not copied out and handed on (as `deliver` takes them).
        let cap = buf.len();
        if let Some(st) = self.unexpected.get(&key).and_then(|u| {
            let n = inline_into(&u.hdr, buf)?;
            Some(delivered(&mut self.counters, u.hdr.source, &u.hdr, n, cap))
        }) {
            self.unexpected.discard(key);
            tracing::trace!(source = st.source, "queued message taken at post");
            return Ok(Ok(st));
        }
        let u = self.take_stored(key)?;
        tracing::trace!(source = u.hdr.source, "queued message taken at post");
        let result = self.deliver(u.hdr, u.data, buf);
        if matches!(&result, Ok(st) if st.truncated()) {
            self.counters.truncated += 1;
        }
        Ok(result)
    }

    /// Completes receive `key`, which matched queued message `msg` when it
    /// was posted (`PostOutcome::Matched`).
    pub(super) fn complete_at_post(
        &mut self,
        key: u64,
        msg: Msg,
        env: Envelope,
        buf: &mut [u8],
    ) -> Result<()> {
        self.handle_completion(
            Completion::Matched {
                id: RecvId::from_bits(u64::MAX),
                recv: key,
                env,
                msg,
            },
            buf,
        )
    }

    pub(super) fn is_done(&self, key: u64) -> bool {
        self.requests.get(key).is_some_and(|r| r.done.is_some())
    }

    /// The completed result of the blocked call's request `key`, removing it.
    pub(super) fn take_done(&mut self, key: u64) -> Option<Result<Status>> {
        self.requests.get(key)?.done.as_ref()?;
        self.requests.remove(key).and_then(|r| r.done).map(unbox)
    }

    /// The offload model's handle of a still-queued request.
    pub(super) fn recv_id(&self, key: u64) -> Option<RecvId> {
        self.requests.get(key).and_then(|r| r.id)
    }

    /// Gives up on request `key` after an error: cancels it (withdrawing its
    /// prepost; if the sender claimed it, the sender is the dead peer the
    /// error is about and will not write any more).
    pub(super) fn abandon(&mut self, key: u64, id: RecvId, buf: &mut [u8]) {
        if !self.is_done(key) {
            let _ = self.matching.cancel(id);
            let _ = self.poll_matching(buf);
        }
        // A sender that claimed its prepost is writing into the buffer: wait
        // for its DONE, unless it is dead.
        while let Some(peer) = self
            .requests
            .engine
            .values()
            .find(|e| e.key == key)
            .map(|e| e.peer)
        {
            if self.node.segment().check_alive(peer).is_err() {
                break;
            }
            match self.poll_engine(buf) {
                Ok(0) => std::thread::yield_now(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if let Some(r) = self.requests.remove(key) {
            self.unfeed(r.fed);
            if let ReqBuf::Owned(v) = r.buf {
                let claimed = self.requests.engine.values().any(|e| e.key == key);
                if claimed {
                    // Never free a buffer a sender may still write into.
                    core::mem::forget(v);
                }
            }
        }
    }

    /// Posts a receive request through the offload model; returns its key
    /// and, if it is queued, its handle (if it matched a queued message at
    /// once, it is complete: delivered into `buf` or its owned buffer).
    /// `may_prepost`: the caller keeps the buffer at `addr` valid until the
    /// request completes. `(user, user_at_once)`: whether the request is
    /// the user's (its completion goes to the feed), if it is queued and if
    /// it matches at once.
    pub(super) fn post(
        &mut self,
        spec: MatchSpec,
        rbuf: ReqBuf,
        addr: u64,
        may_prepost: bool,
        (user, user_at_once): (bool, bool),
        buf: &mut [u8],
    ) -> Result<(u64, Option<RecvId>)> {
        let key = self.next_id;
        self.next_id += 1;
        let capacity = rbuf.capacity().unwrap_or(buf.len());
        let me = self.rank();
        // The caller's part of the offload decision: a buffer the sender may
        // CMA-write into, large enough for the prepost-direct path
        // (`TMX_SHMEM_TUNE=prepost_min`, and beyond inline), from a peer whose
        // prepost ring has a free slot. The model adds the rest
        // (exact source, no earlier software receive that overlaps it,
        // capacity, tag layout).
        let eligible = match spec.source {
            Source::Rank(src) if may_prepost && self.advertisable(spec, capacity) => self.peers
                [src as usize]
                .poster
                .can_post(self.node.segment().prepost(me, src)),
            _ => false,
        };
        // The model hands out nothing before `post` returns (a match at once
        // comes back as the outcome), so the request is recorded after it,
        // with its handle.
        let outcome = self.matching.post(spec, key, eligible)?;
        let id = match &outcome {
            PostOutcome::Queued { id, .. } => Some(*id),
            PostOutcome::Matched { .. } => None,
        };
        self.requests.insert(
            key,
            Req {
                spec,
                buf: rbuf,
                done: None,
                id,
                user: if id.is_some() { user } else { user_at_once },
                fed: Fed::No,
            },
            id.is_none() && !user_at_once,
        );
        match outcome {
            PostOutcome::Matched { msg, env, .. } => {
                self.complete_at_post(key, msg, env, buf)?;
                Ok((key, None))
            }
            PostOutcome::Queued { id, offloaded } => {
                if offloaded {
                    if let Source::Rank(peer) = spec.source {
                        self.requests.engine.insert(
                            id,
                            EngineEntry {
                                key,
                                peer,
                                context: spec.context_id,
                                addr,
                                capacity: capacity as u64,
                                index: None,
                                deleting: false,
                            },
                        );
                    }
                }
                self.poll_matching(buf)?;
                Ok((key, Some(id)))
            }
        }
    }
}
