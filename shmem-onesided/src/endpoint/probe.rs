//! Probes, matched probes (mprobe/mrecv) and the cancel of a receive.

use super::*;

impl Endpoint {
    /// The status of the oldest queued message matching `spec`, if any (no
    /// progress).
    pub(super) fn peek(&self, spec: &MatchSpec) -> Option<Status> {
        let p = self.matching.probe(spec)?;
        let msg_len = match p.msg {
            Msg::Stored(k) => self.unexpected.get(k)?.hdr.nbytes as usize,
            Msg::Direct(w) => (w & 0xffff_ffff) as usize,
        };
        Some(Status {
            source: p.env.source,
            tag: p.env.tag,
            context: p.env.context_id,
            len: msg_len,
            msg_len,
            cancelled: false,
        })
    }

    /// `MPI_Iprobe`: the status of the oldest arrived message matching
    /// `spec` (it stays queued), after one progress pass. `len` and
    /// `msg_len` are the message's length.
    pub fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<Status>> {
        self.check_source(spec)?;
        self.undefer()?;
        self.progress()?;
        Ok(self.peek(&spec))
    }

    /// `MPI_Probe`: blocks until a message matching `spec` has arrived;
    /// it stays queued. Fails with [`Error::PeerDied`] like a receive.
    pub fn probe(&mut self, spec: MatchSpec) -> Result<Status> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        self.block(watch, |ep| {
            if let Some(st) = ep.peek(&spec) {
                return Ok((Some(st), 1));
            }
            let ev = ep.progress()?;
            Ok((ep.peek(&spec), ev))
        })
    }

    /// `MPI_Improbe`: after one progress pass, removes the oldest arrived
    /// message matching `spec` from matching (no receive can take it any
    /// more) and binds it to the returned handle; receive it with
    /// [`Endpoint::mrecv`] or [`Endpoint::imrecv`]. A synchronous sender
    /// learns of the match now.
    pub fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(Message, Status)>> {
        self.check_source(spec)?;
        self.undefer()?;
        self.progress()?;
        self.take_probed(&spec)
    }

    pub(super) fn take_probed(&mut self, spec: &MatchSpec) -> Result<Option<(Message, Status)>> {
        let Some(m) = self.matching.improbe(spec) else {
            return Ok(None);
        };
        let Msg::Stored(key) = m.msg else {
            return Err(Error::InvalidArgument(
                "matcher returned a message written into a receive",
            ));
        };
        let Some(u) = self.unexpected.get_mut(&key) else {
            return Err(Error::InvalidArgument(
                "matcher returned a message the endpoint does not hold",
            ));
        };
        let h = u.hdr;
        let copied = u.data.is_some();
        if h.has(Flags::SYNC) && (h.kind != Kind::Cma || copied) {
            // Acknowledge now, and not again at mrecv. (An uncopied CMA
            // message is acknowledged by its FIN at mrecv.)
            u.hdr.clear(Flags::SYNC);
            self.matched_sync(&h, copied);
        }
        let msg_len = h.nbytes as usize;
        let st = Status {
            source: m.env.source,
            tag: m.env.tag,
            context: m.env.context_id,
            len: msg_len,
            msg_len,
            cancelled: false,
        };
        Ok(Some((Message(key), st)))
    }

    /// `MPI_Mprobe`: blocks until [`Endpoint::improbe`] finds a message.
    pub fn mprobe(&mut self, spec: MatchSpec) -> Result<(Message, Status)> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        self.block(watch, |ep| {
            if let Some(m) = ep.take_probed(&spec)? {
                return Ok((Some(m), 1));
            }
            let ev = ep.progress()?;
            Ok((ep.take_probed(&spec)?, ev))
        })
    }

    /// `MPI_Mrecv`: receives a message taken by a matched probe into `buf`
    /// (`min(msg_len, buf.len())` bytes; see [`Status::truncated`]).
    pub fn mrecv(&mut self, msg: Message, buf: &mut [u8]) -> Result<Status> {
        let u = self.take_stored(msg.0)?;
        let st = self.deliver(u.hdr, u.data, buf)?;
        if st.truncated() {
            self.counters.truncated += 1;
        }
        Ok(st)
    }

    /// `MPI_Imrecv`: [`Endpoint::mrecv`] into an owned buffer. The message
    /// has arrived, so the request completes at once (it is in the feed);
    /// [`Endpoint::wait`] hands the buffer back.
    pub fn imrecv(&mut self, msg: Message, mut buf: Vec<u8>) -> Result<RecvRequest> {
        let u = self.take_stored(msg.0)?;
        let spec = MatchSpec {
            context_id: u.hdr.context,
            source: Source::Rank(u.hdr.source),
            tag: tm_proto::Tag::Value(u.hdr.tag),
        };
        let result = self.deliver(u.hdr, u.data, &mut buf);
        if let Ok(st) = &result {
            if st.truncated() {
                self.counters.truncated += 1;
            }
        }
        let key = self.next_id;
        self.next_id += 1;
        self.requests.insert(
            key,
            Req {
                spec,
                buf: ReqBuf::Owned(buf),
                done: Some(boxed(result)),
                id: None,
                user: true,
                fed: Fed::No,
            },
            false,
        );
        self.record_recv(key);
        Ok(RecvRequest(key))
    }

    /// Cancels a receive that has not matched (`MPI_Cancel`). `Ok(true)`:
    /// removed; the request completes with `status.cancelled` (and
    /// [`Endpoint::wait`] hands the buffer back). `Ok(false)`: already
    /// matched, preposted and claimed by a sender that is writing into it,
    /// or a pipelined message bound to match it is being copied into it
    /// (it completes normally).
    pub fn cancel_recv(&mut self, req: &RecvRequest) -> Result<bool> {
        self.refile_finished();
        self.undefer()?;
        let Some(r) = self.requests.get(req.0) else {
            return Err(Error::InvalidArgument("unknown receive request"));
        };
        if self.is_bound(req.0) {
            // A pipelined message is being copied into it (bound to match
            // it): it completes with that message.
            return Ok(false);
        }
        let Some(id) = r.id.filter(|_| r.done.is_none()) else {
            return Ok(false);
        };
        match self.matching.cancel(id) {
            tm_match::CancelOutcome::Cancelled(key) => {
                self.counters.cancelled_recvs += 1;
                self.finish_recv(key, Ok(Status::cancelled()));
                tracing::debug!(key, "receive cancelled");
                Ok(true)
            }
            tm_match::CancelOutcome::Pending => {
                // Withdraw the prepost; the answer comes as a completion.
                self.poll_matching(&mut [])?;
                let cancelled = matches!(
                    self.requests.get(req.0),
                    Some(Req {
                        done: Some(Ok(Status {
                            cancelled: true,
                            ..
                        })),
                        ..
                    })
                );
                tracing::debug!(key = req.0, cancelled, "cancel of a preposted receive");
                Ok(cancelled)
            }
            tm_match::CancelOutcome::Failed => Ok(false),
        }
    }
}
