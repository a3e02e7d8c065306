//! Completion of requests: the completion feed, send completion and the send
//! waits.

use super::*;

impl Endpoint {
    /// A request completed: to the feed if it is the user's, dropped if it
    /// was orphaned.
    pub(super) fn finish_send(&mut self, id: u64) {
        match self.sends.get_mut(&id) {
            Some(r) if r.orphan => {
                let fed = r.fed;
                self.sends.remove(&id);
                self.unfeed(fed);
            }
            Some(r) if r.user && r.fed == Fed::No => {
                r.fed = Fed::Queued;
                self.feed.push((id, true));
                self.feed_queued += 1;
            }
            _ => {}
        }
    }

    /// Finishes send `id` if nothing is outstanding any more.
    pub(super) fn check_send_done(&mut self, id: u64) {
        if self.sends.get(&id).is_some_and(SendReq::done) {
            self.finish_send(id);
        }
    }

    /// Records completed user receive `key` in the feed (once).
    pub(super) fn record_recv(&mut self, key: u64) {
        if let Some(r) = self.requests.get_mut(key) {
            feed_once(r, key, &mut self.feed, &mut self.feed_queued);
        }
    }

    /// A request whose feed state was `fed` was handed to its waiter (and
    /// removed): it is not reported by the feed. Drops the feed's dead
    /// entries when they outnumber the live ones.
    pub(super) fn unfeed(&mut self, fed: Fed) {
        if fed != Fed::Queued {
            return;
        }
        self.feed_queued -= 1;
        if self.feed.len() > 64 && self.feed.len() > 2 * self.feed_queued {
            let (sends, requests) = (&self.sends, &self.requests);
            self.feed.retain(|&(id, send)| {
                let fed = if send {
                    sends.get(&id).map(|r| r.fed)
                } else {
                    requests.get(id).map(|r| r.fed)
                };
                fed == Some(Fed::Queued)
            });
        }
    }

    /// Blocks until send `id` completes and removes it; returns its owned
    /// buffer. While it waits for a FIN, crossed CMA messages are pulled
    /// aside (their FINs returned) so ranks that rendezvous-send to each
    /// other before receiving all finish.
    pub(super) fn wait_send_id(&mut self, id: u64) -> Result<Option<Vec<u8>>> {
        // Already complete (the common case when an upper layer collects
        // what `take_completed` reported): one lookup, no progress.
        let dest = match self.sends.entry(id) {
            std::collections::hash_map::Entry::Occupied(o) if o.get().done() => {
                let r = o.remove();
                self.unfeed(r.fed);
                return Ok(r.owned);
            }
            std::collections::hash_map::Entry::Occupied(o) => o.get().dest,
            std::collections::hash_map::Entry::Vacant(_) => {
                return Err(Error::InvalidArgument("unknown send request"))
            }
        };
        let r = self.block(Watch::One(dest), |ep| {
            let (done, fin) = match ep.sends.get(&id) {
                Some(r) => (r.done(), r.fin),
                None => return Err(Error::InvalidArgument("unknown send request")),
            };
            if done {
                return Ok((Some(()), 1));
            }
            let mut ev = ep.progress()?;
            if fin {
                ev += ep.relieve_rendezvous();
            }
            Ok((
                ep.sends.get(&id).is_some_and(SendReq::done).then_some(()),
                ev,
            ))
        });
        match r {
            Ok(()) => {
                let r = self.sends.remove(&id);
                self.unfeed(r.as_ref().map_or(Fed::No, |r| r.fed));
                Ok(r.and_then(|r| r.owned))
            }
            Err(e) => {
                // A live receiver may still read (or a staged fragment still
                // need) the buffer: keep it until then.
                let keep = self.sends.get(&id).is_some_and(|r| {
                    (r.fin || r.frags) && self.node.segment().check_alive(r.dest).is_ok()
                });
                match self.sends.get_mut(&id) {
                    Some(r) if keep => r.orphan = true,
                    _ => {
                        let fed = self.sends.remove(&id).map_or(Fed::No, |r| r.fed);
                        self.unfeed(fed);
                    }
                }
                Err(e)
            }
        }
    }

    /// Whether send `req` has completed (runs one progress pass if not).
    /// While it waits for a CMA FIN, the pass also pulls crossed CMA
    /// messages aside as [`Endpoint::wait_send`] does, so upper layers that
    /// poll in their own wait loops do not deadlock on rendezvous sends
    /// crossing each other.
    pub fn test_send(&mut self, req: &SendRequest) -> Result<bool> {
        match self.sends.get(&req.0) {
            None => Err(Error::InvalidArgument("unknown send request")),
            Some(r) if r.done() => Ok(true),
            Some(r) => {
                let fin = r.fin;
                self.progress()?;
                if fin && !self.sends.get(&req.0).is_some_and(SendReq::done) {
                    self.relieve_rendezvous();
                }
                Ok(self.sends.get(&req.0).is_some_and(SendReq::done))
            }
        }
    }

    /// Blocks until send `req` completes; returns the owned buffer of an
    /// [`Endpoint::isend`] (`None` for [`Endpoint::isend_borrowed`]). Fails
    /// with [`Error::PeerDied`] if the receiver dies first (an owned buffer
    /// a live receiver may still read is then kept until its FIN).
    pub fn wait_send(&mut self, req: SendRequest) -> Result<Option<Vec<u8>>> {
        self.wait_send_id(req.0)
    }

    /// Appends to `out` the ids of the send and receive requests (from
    /// [`Endpoint::isend`], [`Endpoint::isend_borrowed`], [`Endpoint::irecv`],
    /// [`Endpoint::imrecv`]) completed since the last call, each exactly
    /// once, in completion order, including those that completed at once.
    /// A request handed to [`Endpoint::wait`] / [`Endpoint::wait_send`]
    /// before it was reported is not reported. Ids accumulate until taken.
    pub fn take_completed(&mut self, out: &mut Vec<u64>) {
        self.refile_finished();
        let (sends, requests) = (&mut self.sends, &mut self.requests);
        for (id, send) in self.feed.drain(..) {
            let fed = if send {
                sends.get_mut(&id).map(|r| &mut r.fed)
            } else {
                requests.get_mut(id).map(|r| &mut r.fed)
            };
            if let Some(f) = fed.filter(|f| **f == Fed::Queued) {
                *f = Fed::Reported;
                out.push(id);
            }
        }
        self.feed_queued = 0;
    }

    /// [`Endpoint::take_completed`] and the waits in one step: takes every
    /// request [`Endpoint::take_completed`] would report, removes it and
    /// appends its id with what [`Endpoint::wait_send`] (to `sends`) or
    /// [`Endpoint::wait`] (to `recvs`, as a [`RecvFinished`]) would return
    /// for it, each exactly once, in completion order per kind. For an upper layer that collects
    /// completions in its progress pass: one lookup per request.
    #[allow(clippy::type_complexity)]
    pub fn take_finished(
        &mut self,
        sends: &mut Vec<(u64, Result<Option<Vec<u8>>>)>,
        recvs: &mut Vec<RecvFinished>,
    ) {
        if !self.finished.is_empty() {
            // Completed before everything in the feed: first, and (as a
            // rule: the caller hands back its emptied list) without a copy.
            if recvs.is_empty() {
                core::mem::swap(recvs, &mut self.finished);
            } else {
                recvs.append(&mut self.finished);
            }
        }
        if self.feed.is_empty() {
            return;
        }
        let mut feed = core::mem::take(&mut self.feed);
        for (id, send) in feed.drain(..) {
            // A request still held with a feed entry is complete and queued
            // (an entry is pushed once, on `Fed::No` → `Fed::Queued`, and
            // drained here or by `take_completed`).
            if send {
                if let std::collections::hash_map::Entry::Occupied(o) = self.sends.entry(id) {
                    if o.get().fed == Fed::Queued && o.get().done() {
                        sends.push((id, Ok(o.remove().owned)));
                    }
                }
            } else {
                // The entry is pushed from inside the closure: returned
                // through memory and pushed after, it was copied in wide
                // loads of narrow stores, which the store buffer cannot
                // forward.
                self.requests.take_where(id, |req| {
                    // Reported already (not ours to take), or not
                    // complete: left where it is, untouched.
                    if req.fed != Fed::Queued {
                        return None;
                    }
                    let result = req.done.take()?;
                    // Only the result and the buffer are taken out; the
                    // rest of the request is dropped in its slot.
                    let buf = core::mem::replace(&mut req.buf, ReqBuf::Caller).into_vec();
                    recvs.push(RecvFinished { id, result, buf });
                    Some(())
                });
            }
        }
        self.feed = feed;
        self.feed_queued = 0;
    }

    /// Whether request `id` has completed (no progress). An id that is no
    /// longer held (already waited for) answers `true`; one never issued,
    /// `false`.
    pub fn is_complete(&self, id: u64) -> bool {
        if let Some(r) = self.sends.get(&id) {
            return r.done();
        }
        if let Some(r) = self.requests.get(id) {
            return r.done.is_some();
        }
        id != 0 && id < self.next_id
    }
}
