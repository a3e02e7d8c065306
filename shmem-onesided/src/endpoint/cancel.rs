//! Send cancellation (`MPI_Cancel` of a send): [`Endpoint::cancel_send`]
//! withdraws a message no receive has matched, so that its wait returns
//! although nobody will ever receive it.
//!
//! A message still staged here (waiting for eager space) is withdrawn at
//! once. One published to a peer is withdrawn by the peer: the sender
//! sends a [`Kind::Cancel`] control header quoting the send's id; the
//! peer, during its progress (any call it makes), removes the message from
//! its unexpected queue if it is still there (releasing an eager block; a
//! CMA buffer is simply never read) and answers [`Kind::Cancelled`], with
//! [`Flags::WITHDRAWN`] if it did.

use super::*;

impl Endpoint {
    /// `MPI_Cancel` of a send: `Ok(true)` if the message was withdrawn
    /// before any receive matched it (it will never be received, and the
    /// request is complete), `Ok(false)` if it was matched, or is a kind
    /// that cannot be withdrawn (an inline or plain eager message, complete
    /// already; a fragmented one): it then completes normally.
    ///
    /// This call progresses until the peer's answer comes, so it returns
    /// as soon as the peer is inside any call, also one blocked on this
    /// very process.
    pub fn cancel_send(&mut self, req: &SendRequest) -> Result<bool> {
        let id = req.0;
        let Some(r) = self.sends.get(&id) else {
            return Err(Error::InvalidArgument("unknown send request"));
        };
        if r.done() || r.frags {
            return Ok(false);
        }
        let dest = r.dest;
        if dest == self.rank() {
            let ok = self.withdraw_stored(dest, id)?;
            if ok {
                self.finish_cancelled(id);
            }
            return Ok(ok);
        }
        if self.withdraw_staged(dest, id) {
            self.finish_cancelled(id);
            return Ok(true);
        }
        let ask = Header {
            kind: Kind::Cancel.byte(),
            source: self.rank(),
            word: id,
            ..Header::default()
        };
        tracing::debug!(dest, id, "send cancel requested");
        self.enqueue_ctl(dest, ask);
        let mut idle = 0u32;
        loop {
            if let Some(i) = self.cancel_answers.iter().position(|a| a.0 == id) {
                let (_, ok) = self.cancel_answers.swap_remove(i);
                if ok {
                    self.finish_cancelled(id);
                }
                tracing::debug!(dest, id, ok, "send cancel answered");
                return Ok(ok);
            }
            if self.progress()? == 0 {
                idle = idle.wrapping_add(1);
                if idle % 4096 == 0 {
                    self.check_alive(Some(dest))?;
                }
                std::hint::spin_loop();
            }
        }
    }

    /// A [`Kind::Cancel`] from a sender (withdraw its message if it is
    /// still unmatched here, and answer), or a [`Kind::Cancelled`] answer to
    /// ours.
    #[cold]
    pub(super) fn on_cancel_header(&mut self, h: &Header) -> Result<()> {
        if h.kind == Kind::Cancelled {
            self.cancel_answers.push((h.word, h.has(Flags::WITHDRAWN)));
            return Ok(());
        }
        let ok = self.withdraw_stored(h.source, h.word)?;
        tracing::debug!(source = h.source, id = h.word, ok, "send cancel asked");
        let answer = Header {
            kind: Kind::Cancelled.byte(),
            flags: if ok { Flags::WITHDRAWN } else { Flags::NONE }.bits(),
            source: self.rank(),
            word: h.word,
            ..Header::default()
        };
        self.enqueue_ctl(h.source, answer);
        Ok(())
    }

    /// Removes send `id` of `source` from the unexpected messages, if it
    /// is still there (no receive or matched probe has taken it): the
    /// matcher forgets it and its payload is released (a block of the
    /// sender's eager area is given back; a CMA buffer is simply not read).
    fn withdraw_stored(&mut self, source: u32, id: u64) -> Result<bool> {
        let store = &self.unexpected;
        let found = self.matching.unexpected().iter().find_map(|p| match p.msg {
            Msg::Stored(key) => store
                .get(key)
                .filter(|u| {
                    u.hdr.source == source
                        && (u.hdr.kind == Kind::Eager || u.hdr.kind == Kind::Cma)
                        && sync_id(&u.hdr) == id
                })
                .map(|_| (p.id, *key)),
            Msg::Direct(_) => None,
        });
        let Some((mid, key)) = found else {
            return Ok(false);
        };
        if self.matching.cancel_message(mid).is_none() {
            return Ok(false);
        }
        let u = self.take_stored(key)?;
        if u.hdr.kind == Kind::Eager && u.data.is_none() && source != self.rank() {
            let seg = self.node.segment();
            get_eager(seg, self.node.config().eager_bytes, &u.hdr, &mut [])?;
        }
        self.counters.cancelled_sends += 1;
        Ok(true)
    }

    /// Removes send `id` from `dest`'s local queue if it is still there
    /// (waiting for eager space or behind staged data): the peer never saw
    /// it.
    fn withdraw_staged(&mut self, dest: u32, id: u64) -> bool {
        let staged = &mut self.peers[dest as usize].staged;
        let at = staged.iter().position(|st| match st {
            Staged::Data { hdr, .. } | Staged::Ready(hdr) => {
                (hdr.kind == Kind::Eager || hdr.kind == Kind::Cma) && sync_id(hdr) == id
            }
            Staged::Frag { .. } => false,
        });
        match at {
            Some(i) => {
                staged.remove(i);
                self.counters.cancelled_sends += 1;
                true
            }
            None => false,
        }
    }

    /// Send `id` was withdrawn: nothing more will come for it (no FIN, no
    /// acknowledgement); it completes now.
    fn finish_cancelled(&mut self, id: u64) {
        self.settle_split(id);
        if let Some(r) = self.sends.get_mut(&id) {
            r.fin = false;
            r.ack = false;
        }
        self.check_send_done(id);
    }
}
