//! Send cancellation (`MPI_Cancel` of a send).
//!
//! A send still waiting here for a send buffer never reached its peer: it
//! is withdrawn at once. A synchronous send to this rank that no receive
//! matched yet is taken out of the matching model's unexpected queue. A
//! rendezvous request the peer holds is withdrawn by the peer: the sender
//! sends a [`Control::CancelSend`] quoting the request's `app_ctx`; the
//! peer, during its progress, removes the request from its unexpected
//! queue if it is still there (its data is then never read and no FIN
//! follows) and answers [`Control::CancelAnswer`]. A request the peer
//! matched already (by the device or in software), or one waiting behind a
//! shared post's proposal, is not withdrawn: the send completes normally.
//! Eager sends complete when they are copied out, so there is nothing to
//! cancel once they left.

use tm_proto::Control;
use tracing::debug;

use super::{Endpoint, Finished, Msg, Outgoing, Status};
use crate::{Error, Provider, Result};

/// What [`Endpoint::start_cancel_send`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelSend {
    /// Decided here: `true` if the send was withdrawn (its completion is
    /// queued, with its buffer), `false` if it cannot be (complete, matched,
    /// or an eager send already out).
    Done(bool),
    /// The peer was asked; its answer comes during progress
    /// ([`Endpoint::cancel_send_answer`]).
    Asked,
}

impl<P: Provider> Endpoint<P> {
    /// `MPI_Cancel` of send `id`: withdraws it if no receive matched it.
    /// Returns `true` if it was withdrawn (it will never be received; its
    /// completion, with its buffer, comes through
    /// [`Endpoint::take_completions`]), `false` if it was matched or cannot
    /// be withdrawn (it completes normally).
    ///
    /// This call progresses until the peer's answer comes (the peer answers
    /// during its own progress, any call it makes); it fails with the
    /// peer's death if the peer dies meanwhile.
    pub fn cancel_send(&mut self, id: u64) -> Result<bool> {
        let dest = match self.start_cancel_send(id)? {
            CancelSend::Done(ok) => return Ok(ok),
            CancelSend::Asked => self.sends.get(&id).map(|s| s.dest),
        };
        let mut idle = 0u32;
        loop {
            if let Some(ok) = self.cancel_send_answer(id) {
                return Ok(ok);
            }
            if self.progress()? == 0 {
                idle = idle.wrapping_add(1);
                if idle % 1024 == 0 {
                    self.check_alive(dest)?;
                }
                std::hint::spin_loop();
            }
        }
    }

    /// The non-blocking start of [`Endpoint::cancel_send`].
    pub fn start_cancel_send(&mut self, id: u64) -> Result<CancelSend> {
        if self.cancels_asked.values().any(|v| *v == id) {
            return Ok(CancelSend::Asked);
        }
        if let Some(i) = self.pending.iter().position(|o| match o {
            Outgoing::Eager { id: x, .. } | Outgoing::Rndv { id: x, .. } => *x == id,
            _ => false,
        }) {
            let buf = match self.pending.remove(i) {
                Some(Outgoing::Eager { data, .. }) => data,
                _ => self.forget_send(id)?,
            };
            debug!(id, "verbs-tm: send withdrawn before it left");
            self.finish_send_cancelled(id, buf);
            return Ok(CancelSend::Done(true));
        }
        let Some(s) = self.sends.get(&id) else {
            return Ok(CancelSend::Done(false));
        };
        let dest = s.dest;
        if dest == self.rank {
            return self.cancel_self_send(id).map(CancelSend::Done);
        }
        let Some(ctx) = s.ctx else {
            return Ok(CancelSend::Done(false));
        };
        self.cancels_asked.insert(ctx, id);
        debug!(dest, id, ctx, "verbs-tm: send cancel asked");
        self.queue_out(Outgoing::Control {
            dest,
            bytes: Control::CancelSend { ctx }.encode(),
        })?;
        Ok(CancelSend::Asked)
    }

    /// The peer's answer to a cancellation [`Endpoint::start_cancel_send`]
    /// asked for, once it came (collected once).
    pub fn cancel_send_answer(&mut self, id: u64) -> Option<bool> {
        self.cancel_answers.remove(&id)
    }

    /// A synchronous send to this rank that is still unexpected.
    fn cancel_self_send(&mut self, id: u64) -> Result<bool> {
        let found = self.off.unexpected().iter().find_map(|p| match p.msg {
            Msg::Local {
                sync_send: Some(s), ..
            } if *s == id => Some(p.id),
            _ => None,
        });
        let Some(mid) = found else {
            return Ok(false);
        };
        let Some((_, Msg::Local { data, .. })) = self.off.cancel_message(mid) else {
            return Ok(false);
        };
        self.sends.remove(&id);
        self.finish_send_cancelled(id, data);
        Ok(true)
    }

    /// Forgets rendezvous send `id` (its context, its registration) and
    /// returns its buffer.
    fn forget_send(&mut self, id: u64) -> Result<Vec<u8>> {
        let Some(s) = self.sends.remove(&id) else {
            return Ok(Vec::new());
        };
        if let Some(ctx) = s.ctx {
            self.by_ctx.remove(&ctx);
        }
        Ok(match s.mr {
            Some(mr) => self.p.dereg_mr(mr)?,
            None => s.data,
        })
    }

    fn finish_send_cancelled(&mut self, id: u64, buf: Vec<u8>) {
        self.counters.cancelled_sends += 1;
        self.done.push(Finished {
            id,
            send: true,
            result: Ok(Status::default()),
            buf,
        });
    }

    /// A control message from `peer`.
    pub(super) fn on_control(&mut self, peer: u32, c: Control) -> Result<()> {
        match c {
            Control::CancelSend { ctx } => {
                let found = self.off.unexpected().iter().find_map(|p| match p.msg {
                    Msg::Rndv {
                        peer: from, tmh, ..
                    } if *from == peer && tmh.app_ctx == ctx => Some(p.id),
                    _ => None,
                });
                let withdrawn = found.is_some_and(|mid| self.off.cancel_message(mid).is_some());
                debug!(peer, ctx, withdrawn, "verbs-tm: send cancel answered");
                if peer == u32::MAX {
                    return Err(Error::Unreachable {
                        rank: peer,
                        reason: "control message from an unknown queue pair",
                    });
                }
                self.queue_out(Outgoing::Control {
                    dest: peer,
                    bytes: Control::CancelAnswer { ctx, withdrawn }.encode(),
                })
            }
            Control::CancelAnswer { ctx, withdrawn } => {
                let Some(id) = self.cancels_asked.remove(&ctx) else {
                    debug!(peer, ctx, "verbs-tm: cancel answer for no request");
                    return Ok(());
                };
                if withdrawn {
                    let buf = self.forget_send(id)?;
                    self.finish_send_cancelled(id, buf);
                }
                self.cancel_answers.insert(id, withdrawn);
                Ok(())
            }
        }
    }
}
