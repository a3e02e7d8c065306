//! The table of pending operations and what completes them.
//!
//! An operation a transport did not finish inside its call has an entry in
//! the core's table, keyed by its operation id (see
//! [`crate::transport`], "Operation ids"): the [`Completer`] of the
//! request the caller waits on and what the device needs to complete it
//! (where a receive's data goes, the communicator's group, a buffered
//! send's region). The transports report finished operations by id; the
//! harvest (`progress`) turns each into an [`Outcome`].

use super::lent::LentInto;
use super::{bump, Core, Device, Group};
use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::request::{request_into, Completer, Outcome, Request, Status};
use crate::transport::{InPlace, RecvStatus};
use crate::{Datatype, Error};
use std::mem;
use std::sync::{Arc, Mutex};

/// Where a receive's data goes once the transport delivers it.
#[derive(Debug)]
pub(crate) enum RecvInto {
    /// The transport's buffer is the user's: hand it back as is.
    Owned,
    /// The transport filled a staging buffer with the packed stream:
    /// unpack it into the user's buffer (boxed: the plain receive's
    /// operation and its drop stay small).
    Typed(Box<TypedInto>),
    /// The caller's lent memory ([`crate::lent`]): a transport that
    /// received into it in place hands back an empty buffer; one that
    /// staged the message (no lent receives, or `ANY_SOURCE` over two
    /// transports) hands back the staging buffer, copied in here.
    Lent(LentInto),
}

/// Where a datatype receive unpacks ([`RecvInto::Typed`]).
#[derive(Debug)]
pub(crate) struct TypedInto {
    /// The user's buffer (empty while `slot` holds it).
    pub(crate) user: Vec<u8>,
    /// The operation's own clone of the datatype.
    pub(crate) datatype: Datatype,
    pub(crate) count: i64,
    /// A receive made with an in-place consumer (the transport may unpack
    /// the payload where it lies): the user's buffer, shared with the
    /// consumer, and what its unpack returned if it ran.
    pub(crate) slot: Option<Arc<InPlaceSlot>>,
}

/// The user's buffer of a datatype receive that the transport may unpack
/// into where the payload lies (see [`TypedInto::slot`]), and the unpack's
/// result once it has.
#[derive(Debug, Default)]
pub(crate) struct InPlaceSlot(Mutex<InPlaceState>);

#[derive(Debug, Default)]
struct InPlaceState {
    user: Vec<u8>,
    unpacked: Option<Result<usize, Error>>,
}

impl InPlaceSlot {
    /// A slot holding `user`.
    pub(crate) fn new(user: Vec<u8>) -> Arc<Self> {
        Arc::new(InPlaceSlot(Mutex::new(InPlaceState {
            user,
            unpacked: None,
        })))
    }

    /// The consumer the transport calls with the payload: unpacks it into
    /// the user's buffer and records the result.
    pub(crate) fn consumer(self: &Arc<Self>, datatype: Datatype, count: i64) -> InPlace {
        let slot = Arc::clone(self);
        Box::new(move |payload: &[u8]| {
            let mut g = super::lock(&slot.0);
            let st = &mut *g;
            st.unpacked = Some(datatype.unpack_part(payload, &mut st.user, count, 0));
        })
    }
}

impl TypedInto {
    /// The user's buffer, and the consumer's unpack result if the payload
    /// was unpacked in place (then the staging buffer holds nothing).
    fn take_user(self) -> (Vec<u8>, Datatype, i64, Option<Result<usize, Error>>) {
        match self.slot {
            Some(slot) => {
                let mut g = super::lock(&slot.0);
                let user = mem::take(&mut g.user);
                (user, self.datatype, self.count, g.unpacked.take())
            }
            None => (self.user, self.datatype, self.count, None),
        }
    }
}

impl RecvInto {
    /// The consumer a transport may unpack this receive's payload with.
    pub(super) fn consumer(&self) -> Option<InPlace> {
        match self {
            RecvInto::Typed(t) => t
                .slot
                .as_ref()
                .map(|slot| slot.consumer(t.datatype.clone(), t.count)),
            RecvInto::Owned | RecvInto::Lent(_) => None,
        }
    }
}

#[derive(Debug)]
pub(super) enum OpKind {
    Send {
        len: usize,
        /// Region of the attached buffer (buffered sends).
        bsend: Option<usize>,
        cancelled: bool,
    },
    Recv {
        into: RecvInto,
        /// `None`: the identity group.
        group: Option<Arc<Group>>,
        /// An `ANY_SOURCE` receive posted to more than one transport (keyed
        /// by its node-local post; its state is kept in `shared`).
        shared: bool,
    },
}

#[derive(Debug)]
pub(super) struct Op {
    pub(super) kind: OpKind,
    pub(super) completer: Completer,
}

/// An operation taken out of the table, finished outside the lock.
#[derive(Debug)]
pub(super) enum Finished {
    Send {
        completer: Completer,
        result: Result<Option<Vec<u8>>, Error>,
        len: usize,
        bsend: Option<usize>,
        cancelled: bool,
    },
    Recv {
        completer: Completer,
        result: Result<(RecvStatus, Vec<u8>), Error>,
        into: RecvInto,
        /// `None`: the identity group.
        group: Option<Arc<Group>>,
    },
}

/// Records a receive the transport did not finish in its call: an
/// operation-table entry and the request the caller waits on.
#[inline(always)]
pub(super) fn record_recv(core: &mut Core, id: u64, into: RecvInto, group: &Arc<Group>) -> Request {
    let mut req = Request::null();
    record_recv_into(core, id, into, group, &mut req);
    req
}

/// [`record_recv`] making `out` the request (in place: built aside and
/// assigned, it was copied through the stack).
#[inline(always)]
pub(super) fn record_recv_into(
    core: &mut Core,
    id: u64,
    into: RecvInto,
    group: &Arc<Group>,
    out: &mut Request,
) {
    record_into(
        core,
        id,
        out,
        OpKind::Recv {
            into,
            group: Group::kept(group),
            shared: false,
        },
    );
}

/// Records a send the transport did not finish in its call: an
/// operation-table entry and the request the caller waits on.
pub(super) fn record_send(core: &mut Core, id: u64, len: usize, bsend: Option<usize>) -> Request {
    let mut req = Request::null();
    record_send_into(core, id, len, bsend, &mut req);
    req
}

/// [`record_send`] making `out` the request in place.
#[inline(always)]
pub(super) fn record_send_into(
    core: &mut Core,
    id: u64,
    len: usize,
    bsend: Option<usize>,
    out: &mut Request,
) {
    record_into(
        core,
        id,
        out,
        OpKind::Send {
            len,
            bsend,
            cancelled: false,
        },
    );
}

/// Makes `out` the request of operation `id` and records `kind` with its
/// completer.
#[inline(always)]
pub(super) fn record_into(core: &mut Core, id: u64, out: &mut Request, kind: OpKind) {
    let completer = request_into(&mut core.spares, Some(id), out);
    let op = Op { kind, completer };
    match core.ops.vacant(id) {
        Some(slot) => slot.fill(op),
        None => core.ops.insert(id, op),
    }
}

/// The status and error of a datatype receive from its unpack error and
/// the receive's MPI result: an unpack error wins (with the receive's
/// status, if it had one); a truncation keeps the status of what was
/// delivered; another error has the empty status.
pub(crate) fn typed_result(
    unpack_error: Option<Error>,
    res: Result<Status, Error>,
) -> (Status, Option<Error>) {
    match (unpack_error, res) {
        (Some(e), r) => (r.unwrap_or(Status::EMPTY), Some(e)),
        (None, Ok(s)) => (s, None),
        (None, Err(Error::RecvTruncated { status, msg_len })) => {
            (status, Some(Error::RecvTruncated { status, msg_len }))
        }
        (None, Err(e)) => (Status::EMPTY, Some(e)),
    }
}

/// What a send the transport reported with `result` completes with.
pub(super) fn send_outcome(
    result: Result<Option<Vec<u8>>, Error>,
    len: usize,
    cancelled: bool,
) -> Outcome {
    match result {
        Ok(buffer) => Outcome {
            status: if cancelled {
                Status::cancelled()
            } else {
                Status::new(ANY_SOURCE, ANY_TAG, len)
            },
            error: None,
            buffer,
        },
        Err(e) => Outcome {
            status: Status::EMPTY,
            error: Some(e),
            buffer: None,
        },
    }
}

impl Device {
    /// The MPI result of a completed receive: truncation is an error
    /// carrying the status of what was delivered.
    pub(super) fn recv_result(
        &self,
        st: &RecvStatus,
        group: Option<&Group>,
    ) -> Result<Status, Error> {
        let status = self.status_of(st, group);
        if st.msg_len > st.len {
            bump(&self.counters.truncations);
            return Err(Error::RecvTruncated {
                status,
                msg_len: st.msg_len,
            });
        }
        Ok(status)
    }

    /// The request of a receive the transport finished inside its call
    /// (born complete, no slot).
    #[inline(never)]
    pub(super) fn recv_done_at_once(
        &self,
        result: Result<RecvStatus, Error>,
        buf: Vec<u8>,
        into: RecvInto,
        group: &Arc<Group>,
    ) -> Request {
        let group = Group::as_kept(group);
        match (result, into) {
            (Ok(st), RecvInto::Owned) if !st.cancelled && !st.truncated() => {
                Request::ready_with_buffer(self.status_of(&st, group), buf)
            }
            (result, into) => Request::from_outcome(match result {
                Err(e) => Outcome {
                    status: Status::EMPTY,
                    error: Some(e),
                    buffer: None,
                },
                Ok(st) => self.recv_outcome(&st, buf, into, group),
            }),
        }
    }

    /// What a finished operation's request completes with (outside the core
    /// lock), and its completer.
    pub(super) fn outcome(&self, f: Finished) -> (Completer, Outcome) {
        match f {
            Finished::Send {
                completer,
                result,
                len,
                bsend,
                cancelled,
            } => {
                if let Some(start) = bsend {
                    self.release_bsend(start);
                }
                (completer, send_outcome(result, len, cancelled))
            }
            Finished::Recv {
                completer,
                result,
                into,
                group,
            } => (completer, self.recv_done(result, into, group.as_deref())),
        }
    }

    /// What a receive the transport reported with `result` completes with.
    pub(super) fn recv_done(
        &self,
        result: Result<(RecvStatus, Vec<u8>), Error>,
        into: RecvInto,
        group: Option<&Group>,
    ) -> Outcome {
        match result {
            Err(e) => Outcome {
                status: Status::EMPTY,
                error: Some(e),
                buffer: None,
            },
            Ok((st, buf)) => self.recv_outcome(&st, buf, into, group),
        }
    }

    /// What a receive the transport finished with `st` into `buf`
    /// completes with: the user's buffer back (unpacked first for a
    /// datatype receive), a truncation error with the status of what was
    /// delivered, or the cancelled status.
    pub(super) fn recv_outcome(
        &self,
        st: &RecvStatus,
        buf: Vec<u8>,
        into: RecvInto,
        group: Option<&Group>,
    ) -> Outcome {
        if let RecvInto::Lent(lent) = into {
            return self.lent_outcome(st, buf, lent, group);
        }
        if st.cancelled {
            let user = match into {
                RecvInto::Owned | RecvInto::Lent(_) => buf,
                RecvInto::Typed(typed) => {
                    self.give_back_staging(buf);
                    typed.take_user().0
                }
            };
            return Outcome {
                status: Status::cancelled(),
                error: None,
                buffer: Some(user),
            };
        }
        if matches!(into, RecvInto::Owned) && !st.truncated() {
            // The common case, built directly (not through `recv_result`'s
            // `Result<Status, Error>`).
            return Outcome {
                status: self.status_of(st, group),
                error: None,
                buffer: Some(buf),
            };
        }
        let res = self.recv_result(st, group);
        let (user, unpack_error) = match into {
            RecvInto::Owned | RecvInto::Lent(_) => (buf, None),
            RecvInto::Typed(typed) => {
                let (mut user, datatype, count, in_place) = typed.take_user();
                bump(&self.counters.unpacked_recvs);
                let unpacked = match in_place {
                    Some(r) => {
                        bump(&self.counters.unpacked_in_place);
                        r
                    }
                    None => {
                        let n = st.len.min(buf.len());
                        datatype.unpack_part(&buf[..n], &mut user, count, 0)
                    }
                };
                self.give_back_staging(buf);
                (user, unpacked.err())
            }
        };
        let (status, error) = typed_result(unpack_error, res);
        Outcome {
            status,
            error,
            buffer: Some(user),
        }
    }
}
