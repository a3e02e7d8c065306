//! Receives shared with another transport: `ANY_SOURCE` receives of an
//! upper layer that reaches some sources through this endpoint and others
//! through, say, shared memory.
//!
//! A shared post never takes a message on its own: when a message would
//! match it (it is the earliest-posted receive the message matches), the
//! endpoint *proposes* it ([`Endpoint::take_proposals`]) and holds that
//! message and every later arrival, in arrival order, until the owner
//! either commits ([`Endpoint::commit`]: the message is delivered into the
//! owner's buffer) or withdraws ([`Endpoint::withdraw`]: the message is
//! matched as if the post had never been there). Shared posts stay in
//! software, and so does every later receive that overlaps one (the
//! model's prefix rule), so an entry the device can match never competes
//! with a held message: device matches, list-operation answers and data
//! completions go on during a hold.
//!
//! While the model waits for a withdrawal's DEL (a parked message),
//! arrivals wait here rather than inside the model: the model then only
//! ever re-matches the one parked message when the DEL answers, so a
//! proposal always holds the first message that would take a shared post,
//! and nothing behind it has been matched.

use tm_match::offload::{CancelOutcome as OffCancel, EngineEvent, PostOutcome};
use tm_match::{Envelope, MatchSpec};

use super::{Endpoint, Finished, Msg, RecvBuf, RecvReq, SharedPost, Stalled, Status};
use crate::{Error, Provider, Result};

/// How a shared post started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedStart {
    /// A message already queued would match: nothing was posted and the
    /// message stays queued; take it with [`Endpoint::recv_now`] or leave
    /// it.
    Proposed(Status),
    /// Posted under this id: it proposes instead of matching.
    Posted(u64),
}

impl<P: Provider> Endpoint<P> {
    /// Whether an arrival may be fed to the model now: nothing waits before
    /// it, no proposal holds the input, and no message is parked in the
    /// model (waiting for a withdrawal's DEL). So the model only ever holds
    /// one message back itself, and a shared post always sees the first
    /// message that would take it.
    pub(super) fn gate_open(&self) -> bool {
        self.stalled.is_empty() && self.gate_open_ignoring_queue()
    }

    fn gate_open_ignoring_queue(&self) -> bool {
        self.holding.is_none() && self.off.parked_len() == 0
    }

    /// A message from this rank to itself, through the gate.
    pub(super) fn arrive_local(&mut self, env: Envelope, msg: Msg) -> Result<()> {
        if self.gate_open() {
            self.off.arrive(env, msg)?;
        } else {
            self.stalled.push_back(Stalled::Local { env, msg });
        }
        Ok(())
    }

    /// Feeds waiting model input, in order, while the gate is open.
    pub(super) fn release_stalled(&mut self) -> Result<()> {
        while !self.stalled.is_empty() && self.gate_open_ignoring_queue() {
            let Some(item) = self.stalled.pop_front() else {
                break;
            };
            match item {
                Stalled::Unexpected { tag, msg, sync } => {
                    self.off.handle_event(EngineEvent::Unexpected {
                        tag,
                        msg,
                        sync_request: sync,
                    })?
                }
                Stalled::Local { env, msg } => self.off.arrive(env, msg)?,
            }
            self.pump()?;
        }
        Ok(())
    }

    /// Posts a receive shared with another transport; `cap` is the capacity
    /// of the owner's buffer.
    ///
    /// It never takes a message on its own: when a message would match it,
    /// the endpoint proposes it ([`Endpoint::take_proposals`]) and holds
    /// that message and every later arrival, in order, until the owner
    /// commits ([`Endpoint::commit`]) or withdraws ([`Endpoint::withdraw`]:
    /// the message is matched as if the post had never been there).
    pub fn post_shared(&mut self, spec: MatchSpec, cap: usize) -> Result<SharedStart> {
        if let Some(p) = self.off.probe(&spec) {
            let n = p.msg.len();
            return Ok(SharedStart::Proposed(Status::of(&p.env, n.min(cap), n)));
        }
        let id = self.new_id();
        match self.off.post(spec, id, false)? {
            PostOutcome::Queued { id: rid, .. } => {
                self.shared.insert(
                    id,
                    SharedPost {
                        rid: Some(rid),
                        proposed: None,
                    },
                );
                Ok(SharedStart::Posted(id))
            }
            PostOutcome::Matched { .. } => Err(Error::Completion {
                opcode: crate::verbs::WcOpcode::TM_RECV,
                status: crate::verbs::WcStatus::SUCCESS,
                wr_id: id,
                reason: "a shared post matched although no message was queued",
            }),
        }
    }

    /// Proposals made since the last call: `(shared post id, status of the
    /// message it would take)`.
    pub fn take_proposals(&mut self, out: &mut Vec<(u64, Status)>) {
        out.append(&mut self.proposals);
    }

    /// Commits shared post `id`'s proposal: delivers the held message into
    /// `buf` (a rendezvous is read before this returns; the provider must
    /// run on its own, as for [`Endpoint::recv_now`]).
    pub fn commit(&mut self, id: u64, buf: &mut [u8]) -> Result<Status> {
        let Some((env, msg)) = self.shared.get_mut(&id).and_then(|s| s.proposed.take()) else {
            return Err(Error::UnknownRequest(id));
        };
        self.shared.remove(&id);
        if self.holding == Some(id) {
            self.holding = None;
        }
        let cap = buf.len();
        let st = match msg {
            Msg::Eager(data) => {
                let n = data.len().min(cap);
                buf[..n].copy_from_slice(&data[..n]);
                Status::of(&env, n, data.len())
            }
            Msg::Local { data, sync_send } => {
                let n = data.len().min(cap);
                buf[..n].copy_from_slice(&data[..n]);
                if let Some(s) = sync_send {
                    self.sends.remove(&s);
                    self.done.push(Finished {
                        id: s,
                        send: true,
                        result: Ok(Status::default()),
                        buf: Vec::new(),
                    });
                }
                Status::of(&env, n, data.len())
            }
            m @ Msg::Rndv { .. } => {
                let rid = self.new_id();
                self.recvs.insert(
                    rid,
                    RecvReq {
                        rid: None,
                        buf: RecvBuf::Plain(vec![0; cap]),
                        cap,
                    },
                );
                self.complete_from_msg(rid, env, m)?;
                loop {
                    if let Some(i) = self.done.iter().position(|f| f.id == rid) {
                        let f = self.done.remove(i);
                        let st = f.result?;
                        buf[..st.len].copy_from_slice(&f.buf[..st.len]);
                        break st;
                    }
                    self.progress()?;
                    std::thread::yield_now();
                }
            }
            Msg::Engine => {
                return Err(Error::UnknownRequest(id));
            }
        };
        self.release_stalled()?;
        Ok(st)
    }

    /// Withdraws shared post `id` (and releases its proposal: the held
    /// message is matched as if the post had never been there).
    pub fn withdraw(&mut self, id: u64) -> Result<()> {
        let Some(s) = self.shared.get_mut(&id) else {
            return Ok(());
        };
        if let Some((env, msg)) = s.proposed.take() {
            self.shared.remove(&id);
            if self.holding == Some(id) {
                self.holding = None;
            }
            // It already counted as an unexpected message of the device if
            // it came from there: it goes back in as a plain arrival.
            self.off.arrive(env, msg)?;
        } else if let Some(rid) = s.rid {
            match self.off.cancel(rid) {
                OffCancel::Cancelled(_) => {
                    self.shared.remove(&id);
                }
                OffCancel::Pending | OffCancel::Failed => {}
            }
        }
        self.pump()?;
        self.release_stalled()
    }
}
