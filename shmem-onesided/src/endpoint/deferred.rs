//! Deferred receives: nonblocking receives the matching model keeps out of
//! its posted queue while their messages come in order (tm-match's
//! [`Offload::defer`]), completed here from the front of their source's
//! ring, and the in-place consumers of their payloads.

use super::*;

/// A deferred receive's key and its [`InPlace`] consumer.
pub(super) struct PayloadConsumer(pub(super) u64, pub(super) InPlace);

impl core::fmt::Debug for PayloadConsumer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("PayloadConsumer")
            .field(&self.0)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// [`Endpoint::irecv_or_done`] with a consumer for the payload: if the
    /// receive is deferred (see [`Endpoint::irecv_or_done`]) and its
    /// message then comes as an eager block at the front of its source's
    /// ring, the drain of deferred receives calls `consumer` once with the
    /// payload where it lies (as [`Endpoint::recv_arrived_with`] does) and
    /// completes the receive with `buf` untouched. In every other case
    /// (not deferred, posted later, another kind of message) the consumer
    /// is dropped uncalled and the message is copied into `buf` as
    /// [`Endpoint::irecv_or_done`] copies it. The caller tells the two
    /// apart by what its consumer recorded.
    pub fn irecv_or_done_in_place(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        consumer: InPlace,
    ) -> Result<Started<RecvRequest, RecvDone>> {
        let r = self.irecv_or_done(spec, buf)?;
        if let Started::Pending(req) = &r {
            if self.matching.deferred_back() == Some(&req.0) {
                if self.matching.deferred_len() == 1 {
                    // Nothing older is deferred: whatever is kept is stale.
                    self.in_place_consumers.clear();
                }
                self.in_place_consumers
                    .push_back(PayloadConsumer(req.0, consumer));
            }
        }
        Ok(r)
    }

    /// Completes deferred receive `key`, which the model let take its
    /// message and whose payload its consumer read in place: `buf` back
    /// untouched, status `st` (what [`Endpoint::take_deferred`] does for a
    /// copied message).
    #[inline(never)]
    pub(super) fn finish_deferred_in_place(&mut self, key: u64, st: Status, buf: Vec<u8>) {
        if self.feed.is_empty() {
            self.requests.remove(key);
            self.finished.push(RecvFinished {
                id: key,
                result: Ok(st),
                buf,
            });
        } else {
            self.finish_recv_with(key, Ok(st), Some(buf));
        }
    }

    /// The drain's in-place take for deferred receive `key` (the oldest),
    /// whose message is at the front of the ring: if it has a consumer and
    /// that message is an eager one it may take (of at most `cap` bytes),
    /// the consumer reads it where it lies and the status is returned.
    /// The consumer is dropped either way (the caller copies the message
    /// or posts the receive), and so are stale ones (of receives no longer
    /// deferred).
    #[inline(never)]
    pub(super) fn take_in_place(
        &mut self,
        key: u64,
        spec: MatchSpec,
        cap: usize,
    ) -> Result<Option<Status>> {
        while self.in_place_consumers.front().is_some_and(|c| c.0 < key) {
            self.in_place_consumers.pop_front();
        }
        if self.in_place_consumers.front().is_none_or(|c| c.0 != key) {
            return Ok(None);
        }
        // Taken here or not, the consumer's turn is now: a front message
        // it cannot read goes the copying way or posts the receive.
        let Some(PayloadConsumer(_, mut consumer)) = self.in_place_consumers.pop_front() else {
            return Ok(None);
        };
        let Some((s, h)) = self.eager_front(Taker::Deferred(spec), cap)? else {
            return Ok(None);
        };
        self.consume_front(s, &h, &mut *consumer).map(Some)
    }

    /// Whether a nonblocking receive for `spec` into `capacity` bytes is
    /// one this endpoint defers now ([`Endpoint::defer`]): deferral is on,
    /// an exact other source, never advertised to its sender, and the
    /// model's rule lets it ([`Offload::may_defer`]: nothing posted, queued
    /// or parked, one source for all), asked first so that a receive the
    /// model would refuse (its message queued already) costs no look at
    /// the ring and no attempt.
    #[inline]
    pub(super) fn may_defer(&self, spec: MatchSpec, capacity: usize) -> bool {
        let Source::Rank(s) = spec.source else {
            return false;
        };
        self.defer_enabled
            && self.matching.may_defer(s)
            && s != self.rank()
            && !self.advertisable(spec, capacity)
    }

    /// Defers a nonblocking receive if the model lets it
    /// ([`Offload::defer`]: its source is the deferred receives' and
    /// nothing is posted, queued or parked): a request, and a handle in the
    /// model's deferred queue. Otherwise the buffer back, nothing changed.
    #[inline]
    pub(super) fn defer(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
    ) -> core::result::Result<RecvRequest, Vec<u8>> {
        self.defer_into(spec, ReqBuf::Owned(buf))
            .map_err(ReqBuf::into_vec)
    }

    /// [`Endpoint::defer`] of a receive into `buf`, an owned buffer or lent
    /// memory ([`Endpoint::irecv_or_done_lent`]); `buf` back, nothing
    /// changed, when the model refuses.
    #[inline(always)]
    pub(super) fn defer_into(
        &mut self,
        spec: MatchSpec,
        buf: ReqBuf,
    ) -> core::result::Result<RecvRequest, ReqBuf> {
        let key = self.next_id;
        let Ok(id) = self.matching.defer(spec, key) else {
            return Err(buf);
        };
        self.file_user_recv(key, id, spec, buf);
        Ok(RecvRequest(key))
    }

    /// Whether [`Endpoint::take_deferred`] would do nothing now: the
    /// deferred receives' source not under eager pressure and its ring
    /// empty (its own first test, inline).
    #[inline(always)]
    pub(super) fn deferred_quiet(&mut self) -> bool {
        let Some(s) = self.matching.deferred_source() else {
            return true;
        };
        !self.node.segment().eager_pressure(s) && self.ring_empty(s)
    }

    /// Completes deferred receives, oldest first, with the messages at the
    /// front of their source's ring, as a receive posted then would have
    /// been: the model lets the oldest deferred receive take the front
    /// message when it matches it ([`Offload::take_deferred`]; nothing is
    /// posted or queued while receives are deferred). Stops at an empty
    /// ring (the rest stay deferred: no message they could match exists
    /// yet); posts them all ([`Endpoint::post_deferred`]) as soon as the
    /// front message is not one the oldest takes directly, or its sender is
    /// under eager pressure. Returns how many completed.
    pub(super) fn take_deferred(&mut self) -> Result<usize> {
        let mut done = 0;
        while let Some(&key) = self.matching.deferred_front() {
            let Some(s) = self.matching.deferred_source() else {
                break;
            };
            if self.node.segment().eager_pressure(s) {
                self.post_deferred()?;
                return Ok(done);
            }
            if self.ring_empty(s) {
                // No message yet: they stay deferred (the common case of
                // a window of receives posted before the peer sends).
                return Ok(done);
            }
            let Some(req) = self.requests.get_mut(key) else {
                // Removed meanwhile (cannot happen: a deferred request is
                // removed only once the model has let it go): posted, it
                // is an abandoned receive, which consumes its message.
                self.post_deferred()?;
                return Ok(done);
            };
            let spec = req.spec;
            let mut buf = match &mut req.buf {
                ReqBuf::Owned(v) => core::mem::take(v),
                ReqBuf::Caller => Vec::new(),
                // Lent memory, written in place (out of line: the owned
                // path below stays as it was).
                ReqBuf::Lent(lent) => {
                    let lent = *lent;
                    if self.take_deferred_lent(key, spec, lent)? {
                        done += 1;
                        continue;
                    }
                    return Ok(done);
                }
            };
            // An eager message for a receive with a consumer, read where
            // it lies (out of line: the copying path below stays as lean
            // as it was; sharing it cost `bibw` 64–128 B 5%).
            if !self.in_place_consumers.is_empty() {
                match self.take_in_place(key, spec, buf.len()) {
                    Ok(Some(st)) => {
                        self.finish_deferred_in_place(key, st, buf);
                        done += 1;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        if let Some(req) = self.requests.get_mut(key) {
                            req.buf = ReqBuf::Owned(buf);
                        }
                        return Err(e);
                    }
                }
            }
            // An inline, inline-ext or eager message that fits by the
            // short path (`take_front`, small result), the rest (a
            // truncated one, CMA, fragments) as `take_now` takes it.
            let taker = Taker::Deferred(spec);
            let taken = match self.take_front(taker, &mut buf) {
                Ok(Some(st)) => Ok(Some(Ok(st))),
                Ok(None) => self.take_now(taker, &mut buf),
                Err(e) => Err(e),
            };
            match taken {
                Ok(Some(result)) => {
                    if self.feed.is_empty() {
                        // Straight to the finished list (see `finished`).
                        self.requests.remove(key);
                        self.finished.push(RecvFinished {
                            id: key,
                            result: boxed(result),
                            buf,
                        });
                    } else {
                        self.finish_recv_with(key, result, Some(buf));
                    }
                    done += 1;
                }
                taken => {
                    // The front message is not the oldest deferred
                    // receive's (or not one it may take directly), or the
                    // look failed: the buffer goes back first.
                    if let Some(req) = self.requests.get_mut(key) {
                        req.buf = ReqBuf::Owned(buf);
                    }
                    taken?;
                    self.post_deferred()?;
                    return Ok(done);
                }
            }
        }
        Ok(done)
    }

    /// [`Endpoint::take_deferred`]'s step for the oldest deferred receive
    /// `key` when it receives into lent memory `lent`
    /// ([`Endpoint::irecv_or_done_lent`]): the message at the front of the
    /// ring is copied into that memory as into an owned buffer, and the
    /// receive completes with an empty buffer (as a posted lent receive
    /// does). `false` when the front message is not one it may take
    /// directly: then every deferred receive has been posted.
    #[inline(never)]
    fn take_deferred_lent(&mut self, key: u64, spec: MatchSpec, lent: Lent) -> Result<bool> {
        // SAFETY: the lender's contract (`irecv_or_done_lent`): the memory
        // stays valid, and untouched by anyone else, until this pending
        // receive completes; the request only records its address, so
        // this slice is the only reference to it while it lives (to the
        // end of this function).
        let buf = unsafe { lent.bytes() };
        let taker = Taker::Deferred(spec);
        let taken = match self.take_front(taker, buf) {
            Ok(Some(st)) => Ok(Some(Ok(st))),
            Ok(None) => self.take_now(taker, buf),
            Err(e) => Err(e),
        };
        match taken? {
            Some(result) => {
                if self.feed.is_empty() {
                    self.requests.remove(key);
                    self.finished.push(RecvFinished {
                        id: key,
                        result: boxed(result),
                        buf: Vec::new(),
                    });
                } else {
                    self.finish_recv_with(key, result, None);
                }
                Ok(true)
            }
            None => {
                self.post_deferred()?;
                Ok(false)
            }
        }
    }

    /// Moves every deferred receive into the model's posted queue, oldest
    /// first, as `irecv_or_done` would have posted them when they were made
    /// ([`Offload::post_deferred`]; their handles stay): from then on they
    /// match like any posted receive. (The model also does this by itself
    /// before anything else enters its queues.)
    #[inline(never)]
    pub(super) fn post_deferred(&mut self) -> Result<()> {
        // Posted receives take their messages the copying way.
        self.in_place_consumers.clear();
        self.matching.post_deferred()?;
        Ok(())
    }

    /// Puts the receives of [`Endpoint::finished`] back into the request
    /// table as completed requests queued in the feed, ahead of what the
    /// feed holds (they completed first): for the calls that look a
    /// receive up by id.
    #[inline]
    pub(super) fn refile_finished(&mut self) {
        if !self.finished.is_empty() {
            self.refile_all_finished();
        }
    }

    #[cold]
    pub(super) fn refile_all_finished(&mut self) {
        let mut feed = Vec::with_capacity(self.finished.len() + self.feed.len());
        for f in self.finished.drain(..) {
            let req = Req {
                // Not used again: the request is complete.
                spec: MatchSpec {
                    context_id: 0,
                    source: Source::Any,
                    tag: tm_proto::Tag::Any,
                },
                buf: ReqBuf::Owned(f.buf),
                done: Some(f.result),
                id: None,
                user: true,
                fed: Fed::Queued,
            };
            self.requests.reqs.insert(f.id, req);
            feed.push((f.id, false));
            self.feed_queued += 1;
        }
        feed.append(&mut self.feed);
        self.feed = feed;
    }

    /// Posts the deferred receives, if any, before an operation that
    /// matches against the model (a probe, a blocking or plain receive, a
    /// cancel, a wait) or ends the endpoint.
    #[inline]
    pub(super) fn undefer(&mut self) -> Result<()> {
        if self.matching.deferred_len() == 0 {
            return Ok(());
        }
        self.post_deferred()
    }
}
