//! Operations on lent memory: the caller's own bytes, borrowed by a
//! pending operation until it completes ([`crate::lent`]).

use super::ops::{record_recv, record_send};
use super::{bump_locked, dispatch, dispatch_recv, lock_core, Device, Group, Mode, RecvInto, Via};
use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::request::{Outcome, Request, Status};
use crate::transport::{RecvStart, RecvStatus, SendMode, Transport};
use crate::Error;
use std::sync::Arc;
use tm_proto::MatchSpec;

impl Device {
    /// Starts a send of `data` to world rank `dest` that reads `data` in
    /// place until the returned request completes (a send the transport
    /// finishes in the call is born complete).
    ///
    /// # Safety
    ///
    /// `data` stays valid and unchanged until the request completes (or,
    /// freed, until the operation is complete: at the latest at finalize),
    /// although its borrow ends when this returns.
    pub(crate) unsafe fn start_send_lent(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<Request, Error> {
        let len = data.len();
        // SAFETY: the caller's contract.
        let started = unsafe { self.start_send_lent_or_done(dest, tag, context, data, mode) }?;
        Ok(started.unwrap_or_else(|| Request::completed(Status::new(ANY_SOURCE, ANY_TAG, len))))
    }

    /// [`Device::start_send_lent`], without a request for a send that
    /// completed in the call (successfully): `None` then (its status
    /// would be `ANY_SOURCE`, `ANY_TAG` and its length).
    ///
    /// # Safety
    ///
    /// As [`Device::start_send_lent`].
    pub(crate) unsafe fn start_send_lent_or_done(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<Option<Request>, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.start_send_lent_on::<V>(dest, peer, tag, context, data, mode)
        })
    }

    #[inline(always)]
    fn start_send_lent_on<V: Via>(
        &self,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<Option<Request>, Error> {
        let len = data.len();
        let t_mode = match mode {
            Mode::Synchronous => SendMode::Synchronous,
            Mode::Standard | Mode::Ready => SendMode::Standard,
        };
        lock_core!(self, g, core);
        // The transport reads `data` until it reports the completion (the
        // caller's contract keeps it valid that long).
        let started = V::pick(core)?.send_borrowed(peer, tag, context, data, t_mode)?;
        self.count_send::<V>(dest);
        let req = started.map(|id| record_send(core, id, len, None));
        drop(g);
        match mode {
            Mode::Synchronous => super::bump(&self.counters.sync_sends),
            Mode::Ready => super::bump(&self.counters.ready_sends),
            Mode::Standard => {}
        }
        tracing::debug!(
            dest,
            tag,
            context,
            len,
            ?mode,
            at_once = req.is_none(),
            "lent send started"
        );
        Ok(req)
    }
}

/// Lent memory a receive delivers into ([`RecvInto::Lent`]): `len` bytes
/// at `addr`, valid until the receive completes (the lender's contract).
///
/// [`RecvInto::Lent`]: super::RecvInto::Lent
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LentInto {
    pub(crate) addr: usize,
    pub(crate) len: usize,
}

impl LentInto {
    /// The lent bytes.
    ///
    /// # Safety
    ///
    /// The lender's contract holds (the receive is not complete) and no
    /// other reference to the memory is alive.
    unsafe fn bytes<'a>(self) -> &'a mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: the caller's contract.
        unsafe { core::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

impl Device {
    /// Starts a receive into lent memory `lent` (a message already here
    /// is delivered into it in the call: the request is born complete).
    ///
    /// # Safety
    ///
    /// `lent.len` bytes at `lent.addr` are valid for writes (any address
    /// if `len` is 0), and nothing else reads or writes them, until the
    /// returned request completes or is cancelled (freed: until the
    /// operation is complete, at the latest at finalize).
    pub(crate) unsafe fn start_recv_lent(
        &self,
        spec: MatchSpec,
        lent: LentInto,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.start_recv_lent_on::<V>(spec, lent, group),
            |spec| {
                // Posted to two transports: staged, copied in at completion.
                lock_core!(self, g, core);
                bump_locked(&self.counters.recvs);
                let stage = vec![0u8; lent.len];
                self.start_shared(core, spec, stage, RecvInto::Lent(lent), group)
            }
        )
    }

    #[inline(always)]
    fn start_recv_lent_on<V: Via>(
        &self,
        spec: MatchSpec,
        lent: LentInto,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        lock_core!(self, g, core);
        bump_locked(&self.counters.recvs);
        let t = V::pick(core)?;
        {
            // SAFETY: the caller's contract; no operation holds the lent
            // memory yet, so this is the only reference to it.
            let dst = unsafe { lent.bytes() };
            // The common case first: its message is the next in line.
            if let Some(st) = t.recv_arrived(spec, dst)? {
                drop(g);
                if st.truncated() {
                    let into = RecvInto::Lent(lent);
                    return Ok(self.recv_done_at_once(Ok(st), Vec::new(), into, group));
                }
                let status = self.status_of(&st, Group::as_kept(group));
                return Ok(Request::completed(status));
            }
        }
        // SAFETY: the caller's contract, handed to the transport.
        let started = unsafe { t.irecv_lent(spec, lent.addr as *mut u8, lent.len) }?;
        tracing::trace!(len = lent.len, "lent receive started");
        Ok(match started {
            RecvStart::Pending(id) => record_recv(core, id, RecvInto::Lent(lent), group),
            // Delivered into the lent memory in the call (a queued message
            // taken at the post; not staged: nothing left to copy in): the
            // same request as a receive of the front message above, no
            // outcome built.
            RecvStart::Done(Ok(st), buf) if buf.is_empty() && !st.cancelled && !st.truncated() => {
                drop(g);
                Request::completed(self.status_of(&st, Group::as_kept(group)))
            }
            RecvStart::Done(result, buf) => {
                drop(g);
                self.recv_done_at_once(result, buf, RecvInto::Lent(lent), group)
            }
        })
    }

    /// What a receive into lent memory completes with: a staged message
    /// (`buf` not empty) copied into the lent memory first; no buffer
    /// handed back.
    pub(super) fn lent_outcome(
        &self,
        st: &RecvStatus,
        buf: Vec<u8>,
        lent: LentInto,
        group: Option<&Group>,
    ) -> Outcome {
        if st.cancelled {
            return Outcome {
                status: Status::cancelled(),
                error: None,
                buffer: None,
            };
        }
        let n = st.len.min(buf.len()).min(lent.len);
        if n > 0 {
            // SAFETY: the lender's contract keeps `len` bytes at `addr`
            // valid, and untouched by anyone else, until this receive
            // completes, which is now; `n <= len`, and the staging buffer
            // is a separate allocation.
            unsafe { core::ptr::copy_nonoverlapping(buf.as_ptr(), lent.addr as *mut u8, n) };
        }
        let (status, error) = match self.recv_result(st, group) {
            Ok(s) => (s, None),
            Err(Error::RecvTruncated { status, msg_len }) => {
                (status, Some(Error::RecvTruncated { status, msg_len }))
            }
            Err(e) => (Status::EMPTY, Some(e)),
        };
        Outcome {
            status,
            error,
            buffer: None,
        }
    }
}
