//! `ANY_SOURCE` receives on a communicator whose members span transports.
//!
//! The strategy (see [`crate::transport`], "`ANY_SOURCE` across
//! transports"): the receive is posted to the node-local transport with
//! the user's buffer and to the remote transport as a *shared post*, which
//! never matches on its own but proposes. The node-local post may match
//! freely; when it does, the device withdraws the shared post. When the
//! remote transport proposes a message, the device cancels the node-local
//! post: if that succeeds it commits the proposal (the message goes into a
//! staging buffer, copied into the user's buffer when the node-local post
//! hands it back, cancelled), otherwise the node-local post has matched
//! and the proposal is withdrawn (the held message is matched as if the
//! shared post had never been there). One message completes the receive;
//! none is lost or taken twice.
//!
//! The operation-table entry (an [`OpKind::Recv`] marked `shared`) is keyed by the
//! node-local post's id, so the request, `MPI_Cancel` and the completion
//! all go through it; its state is here ([`Pending::recvs`]), and the
//! remote post's id maps back to it ([`Pending::partners`]).

use super::ops::{record_into, OpKind};
use super::{bump, bump_locked, Core, Device, Group};
use crate::request::Request;
use crate::transport::{RecvStart, RecvStatus, Remote, SharedStart, ShmemTransport, Transport};
use crate::Error;
use std::collections::HashMap;
use std::mem;
use std::sync::Arc;
use tm_proto::MatchSpec;

use super::ops::RecvInto;

/// The state of a shared receive.
#[derive(Debug)]
pub(super) struct Shared {
    /// The receive's capacity (the user's buffer).
    cap: usize,
    state: State,
}

#[derive(Debug)]
enum State {
    /// Posted on both; the remote post's id.
    Posted(u64),
    /// The remote transport's message won: its status and its data,
    /// waiting for the node-local post to come back (cancelled) with the
    /// user's buffer.
    Committed { status: RecvStatus, data: Vec<u8> },
    /// The remote post failed (after the node-local post was withdrawn):
    /// the receive completes with this error.
    Failed(Error),
    /// Only the node-local post is left (it matched, or was cancelled).
    Settled,
}

/// The shared receives: their state, and the work a harvest leaves for
/// after the transports' feeds (the transports cannot be called from
/// inside one).
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// Node-local post id → state of every pending shared receive.
    recvs: HashMap<u64, Shared>,
    /// Proposals of remote posts, to answer.
    proposals: Vec<(u64, RecvStatus)>,
    /// Remote posts to withdraw (their node-local post matched).
    withdrawals: Vec<u64>,
    /// Remote post id → node-local post id of every posted shared receive.
    partners: HashMap<u64, u64>,
    /// An error answering them, for the pass to report.
    pub(super) failed: Option<Error>,
}

impl Pending {
    /// Whether a harvest left work.
    #[inline(always)]
    pub(super) fn has_work(&self) -> bool {
        !self.proposals.is_empty() || !self.withdrawals.is_empty()
    }

    /// A remote transport proposed a message for shared post `id`.
    pub(super) fn propose(&mut self, id: u64, status: RecvStatus) {
        self.proposals.push((id, status));
    }
}

impl Device {
    /// Starts an `ANY_SOURCE` receive on both transports (under the core
    /// lock): the node-local post first (a message already here completes
    /// it at once), then the remote shared post.
    pub(super) fn start_shared(
        &self,
        core: &mut Core,
        spec: MatchSpec,
        buf: Vec<u8>,
        into: RecvInto,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        bump_locked(&self.counters.shared_recvs);
        let cap = buf.len();
        let id = match core.local.irecv(spec, buf, into.consumer())? {
            RecvStart::Pending(id) => id,
            RecvStart::Done(result, buf) => {
                return Ok(self.recv_done_at_once(result, buf, into, group));
            }
        };
        let Core {
            local,
            remote,
            shared,
            ..
        } = &mut *core;
        let remote = remote.as_mut().ok_or_else(|| Error::InvalidArgument {
            what: "no remote transport",
        })?;
        let state = match remote.post_shared(spec, cap) {
            Ok(SharedStart::Posted(rid)) => {
                shared.partners.insert(rid, id);
                State::Posted(rid)
            }
            Ok(SharedStart::Proposed(_)) => {
                // A remote message is here already: it wins if the
                // node-local post can still be withdrawn.
                if local.cancel_recv(id)? {
                    bump(&self.counters.shared_remote_wins);
                    match self.staging(cap) {
                        Ok(mut data) => match remote.recv_now(spec, &mut data) {
                            Ok(Some(status)) => State::Committed { status, data },
                            Ok(None) => State::Failed(Error::InvalidArgument {
                                what: "a proposed message was gone",
                            }),
                            Err(e) => State::Failed(e),
                        },
                        Err(e) => State::Failed(e),
                    }
                } else {
                    State::Settled
                }
            }
            Err(e) => {
                // Not posted remotely: the node-local post alone would
                // miss the remote members' messages. Withdraw it (its
                // cancelled completion finds no operation and is dropped).
                local.cancel_recv(id)?;
                return Err(e);
            }
        };
        core.shared.recvs.insert(id, Shared { cap, state });
        let mut req = Request::null();
        record_into(
            core,
            id,
            &mut req,
            OpKind::Recv {
                into,
                group: Group::kept(group),
                shared: true,
            },
        );
        Ok(req)
    }

    /// The result of a shared receive whose node-local post finished with
    /// `result` (into `buf`, the user's buffer): the remote message's if
    /// that won (copied into `buf`), otherwise the node-local one's, and
    /// then the remote post is to be withdrawn.
    pub(super) fn settle_shared(
        &self,
        pending: &mut Pending,
        id: u64,
        result: Result<RecvStatus, Error>,
        buf: &mut [u8],
    ) -> Result<RecvStatus, Error> {
        let Some(shared) = pending.recvs.remove(&id) else {
            return result;
        };
        match shared.state {
            State::Posted(rid) => {
                pending.partners.remove(&rid);
                pending.withdrawals.push(rid);
                result
            }
            State::Committed { status, data } => {
                let r = match &result {
                    Ok(st) if st.cancelled => {
                        let n = status.len.min(data.len()).min(buf.len());
                        buf[..n].copy_from_slice(&data[..n]);
                        Ok(status)
                    }
                    // The node-local post was withdrawn before the commit,
                    // so it cannot have matched: a transport broke its
                    // contract.
                    _ => Err(Error::InvalidArgument {
                        what: "a withdrawn node-local post of a shared receive matched",
                    }),
                };
                self.give_back_staging(data);
                r
            }
            State::Failed(e) => Err(e),
            State::Settled => result,
        }
    }

    /// Answers the proposals and withdraws the remote posts a harvest left
    /// (under the core lock; an error is left in [`Pending::failed`]).
    /// `true` if a proposal was committed: the node-local post's cancelled
    /// completion is then in its feed.
    pub(super) fn resolve_shared(&self, core: &mut Core) -> bool {
        match self.try_resolve_shared(core) {
            Ok(committed) => committed,
            Err(e) => {
                core.shared.failed = Some(e);
                false
            }
        }
    }

    fn try_resolve_shared(&self, core: &mut Core) -> Result<bool, Error> {
        let Core {
            local,
            remote,
            shared: pending,
            ..
        } = core;
        let Some(remote) = remote.as_mut() else {
            pending.proposals.clear();
            pending.withdrawals.clear();
            return Ok(false);
        };
        for rid in mem::take(&mut pending.withdrawals) {
            remote.withdraw(rid)?;
        }
        let mut committed = false;
        for (rid, _) in mem::take(&mut pending.proposals) {
            // A proposal of a post withdrawn since is stale: the withdraw
            // released its message.
            let Some(primary) = pending.partners.remove(&rid) else {
                continue;
            };
            let Some(shared) = pending.recvs.get_mut(&primary) else {
                remote.withdraw(rid)?;
                continue;
            };
            shared.state = if local.cancel_recv(primary)? {
                committed = true;
                bump(&self.counters.shared_remote_wins);
                match self.staging(shared.cap) {
                    Ok(mut data) => match remote.commit(rid, &mut data) {
                        Ok(status) => State::Committed { status, data },
                        Err(e) => State::Failed(e),
                    },
                    // No room for the message: it stays with the remote
                    // transport (withdrawn), the receive fails.
                    Err(e) => {
                        remote.withdraw(rid)?;
                        State::Failed(e)
                    }
                }
            } else {
                // The node-local post matched first.
                remote.withdraw(rid)?;
                State::Settled
            };
        }
        Ok(committed)
    }

    /// `MPI_Cancel` of shared receive `id`: withdraws both posts if the
    /// node-local one can still be withdrawn.
    pub(super) fn cancel_shared(
        &self,
        local: &mut ShmemTransport,
        remote: &mut Option<Remote>,
        pending: &mut Pending,
        id: u64,
    ) -> Result<bool, Error> {
        let Some(shared) = pending.recvs.get_mut(&id) else {
            return Ok(false);
        };
        let State::Posted(rid) = shared.state else {
            // Matched (on either side) or already cancelled.
            return Ok(false);
        };
        if !local.cancel_recv(id)? {
            return Ok(false);
        }
        if let Some(r) = remote.as_mut() {
            r.withdraw(rid)?;
        }
        pending.partners.remove(&rid);
        shared.state = State::Settled;
        Ok(true)
    }
}
