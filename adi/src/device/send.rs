//! Sends: blocking and nonblocking, the four modes, buffered sends, and
//! datatype sends packed straight into the transport.
//!
//! Every send is written once, generic over the transport it runs on
//! ([`Via`]), and dispatched on the destination's route (`dispatch!`:
//! the node-local transport inline, the remote one out of line). It
//! starts the same way (`lock_core!`: the core under its lock, an error
//! once finalized) and ends the same way ([`Device::sent`]: counted by
//! mode, traced); in between it calls one [`Transport`] method.

use super::ops::{record_send, record_send_into};
use super::{
    bump, dispatch, lock, lock_core, Core, Device, Mode, Route, SendData, Via, BSEND_OVERHEAD,
};
use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::request::{Request, Status};
use crate::transport::{SendMode, SendStart, ShmemTransport, SmallKind, Transport};
use crate::Error;

/// The transport's mode of a send. A ready send is sent as a standard
/// one (MPI allows it): no transport has a cheaper path for "receive
/// known posted".
#[inline(always)]
fn transport_mode(mode: Mode) -> SendMode {
    match mode {
        Mode::Synchronous => SendMode::Synchronous,
        Mode::Standard | Mode::Ready => SendMode::Standard,
    }
}

/// The trace event of a started send ([`Device::sent`]).
#[cold]
#[inline(never)]
fn trace_sent(dest: u32, tag: u32, context: u32, len: usize, mode: Mode, at_once: bool) {
    tracing::debug!(dest, tag, context, len, ?mode, at_once, "send started");
}

impl Device {
    /// Counts a send by its mode (synchronous and ready sends).
    fn count_mode(&self, mode: Mode) {
        match mode {
            Mode::Synchronous => bump(&self.counters.sync_sends),
            Mode::Ready => bump(&self.counters.ready_sends),
            Mode::Standard => {}
        }
    }

    /// Counts a started send by its mode and traces it.
    #[inline(always)]
    fn sent(&self, dest: u32, tag: u32, context: u32, len: usize, mode: Mode, at_once: bool) {
        self.count_mode(mode);
        // The event's fields are built out of line, only when it may be
        // recorded (the inline form stored them before its level test).
        if tracing::level_enabled!(tracing::Level::DEBUG) {
            trace_sent(dest, tag, context, len, mode, at_once);
        }
    }

    /// Starts a send of `data` to world rank `dest`. The returned request
    /// completes when the transport says the send is complete (for a
    /// synchronous send: once the receiver matched it).
    pub(crate) fn start_send(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: SendData,
        mode: Mode,
        bsend: Option<usize>,
    ) -> Result<Request, Error> {
        match data {
            SendData::Owned(v) => self.start_send_owned(dest, tag, context, v, mode, bsend),
        }
    }

    /// Starts a buffered send of `data`, the region of the attached buffer
    /// at `start`, which stays reserved until the returned request
    /// completes (the transport may read it in place until then).
    fn start_bsend(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        start: usize,
    ) -> Result<Request, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.start_bsend_on::<V>(dest, peer, tag, context, data, start)
        })
    }

    #[inline(always)]
    fn start_bsend_on<V: Via>(
        &self,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        start: usize,
    ) -> Result<Request, Error> {
        let len = data.len();
        lock_core!(self, g, core);
        let id = V::pick(core)?.isend_borrowed(peer, tag, context, data, SendMode::Standard)?;
        self.count_send::<V>(dest);
        let req = record_send(core, id, len, Some(start));
        drop(g);
        self.sent(dest, tag, context, len, Mode::Standard, false);
        Ok(req)
    }

    /// [`Device::start_send`] of an owned buffer (`Comm::isend`; inline
    /// there). Kept apart from [`Device::start_send_owned_into`]: built
    /// through it and returned, the request was copied once more through
    /// the stack (see there; 2–3% of a bi-directional window, median of 12
    /// rotating rounds).
    #[inline]
    pub(crate) fn start_send_owned(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        v: Vec<u8>,
        mode: Mode,
        bsend: Option<usize>,
    ) -> Result<Request, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.start_send_owned_on::<V>(dest, peer, tag, context, v, mode, bsend)
        })
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn start_send_owned_on<V: Via>(
        &self,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        v: Vec<u8>,
        mode: Mode,
        bsend: Option<usize>,
    ) -> Result<Request, Error> {
        let len = v.len();
        let t_mode = transport_mode(mode);
        // A send that completes inside the transport call (inline, eager,
        // prepost-direct, self) is born complete: no slot, no
        // operation-table entry, nothing for progress to harvest. Each
        // outcome is matched where the transport returns it and builds its
        // request directly: moving the result, then a `(Request, bool)`,
        // through locals cost more than the rest.
        lock_core!(self, g, core);
        let req = match V::pick(core)?.isend(peer, tag, context, v, t_mode)? {
            SendStart::Done(buf) => {
                self.count_send::<V>(dest);
                drop(g);
                let status = Status::new(ANY_SOURCE, ANY_TAG, len);
                self.sent(dest, tag, context, len, mode, true);
                return Ok(Request::ready_with_buffer(status, buf));
            }
            SendStart::Pending(id) => {
                self.count_send::<V>(dest);
                record_send(core, id, len, bsend)
            }
        };
        drop(g);
        self.sent(dest, tag, context, len, mode, false);
        Ok(req)
    }

    /// [`Device::start_send`] of an owned buffer (not from the attached
    /// buffer), writing the request into `out` (the caller's storage, as
    /// `MPI_Isend`'s request argument; `Comm::isend_into`). On an error
    /// `out` is left as it was.
    ///
    /// A send that completes inside the transport call (inline, eager,
    /// prepost-direct, self) is born complete: no slot, no operation-table
    /// entry, nothing for progress to harvest. The common case, a send the
    /// transport finishes at once, borrows the buffer
    /// ([`Transport::send_now`]) and stores the request's fields straight
    /// into `out`: moving the buffer through the transport call and back,
    /// or building the request aside and assigning it, copied each through
    /// the stack in wide loads of narrow stores, which the store buffer
    /// cannot forward (each waited for the ring store of the message
    /// before it to reach the cache).
    #[inline(always)]
    pub(crate) fn start_send_owned_into(
        &self,
        out: &mut Request,
        dest: u32,
        tag: u32,
        context: u32,
        v: Vec<u8>,
        mode: Mode,
    ) -> Result<(), Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.start_send_owned_into_on::<V>(out, dest, peer, tag, context, v, mode)
        })
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn start_send_owned_into_on<V: Via>(
        &self,
        out: &mut Request,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        v: Vec<u8>,
        mode: Mode,
    ) -> Result<(), Error> {
        let len = v.len();
        let t_mode = transport_mode(mode);
        lock_core!(self, g, core);
        let t = V::pick(core)?;
        if t_mode == SendMode::Standard && t.send_now(peer, tag, context, &v, false) {
            self.count_send::<V>(dest);
            drop(g);
            self.sent(dest, tag, context, len, mode, true);
            out.set_ready_with_buffer(Status::new(ANY_SOURCE, ANY_TAG, len), v);
            return Ok(());
        }
        match t.isend(peer, tag, context, v, t_mode)? {
            SendStart::Done(buf) => {
                self.count_send::<V>(dest);
                drop(g);
                self.sent(dest, tag, context, len, mode, true);
                out.set_ready_with_buffer(Status::new(ANY_SOURCE, ANY_TAG, len), buf);
                return Ok(());
            }
            SendStart::Pending(id) => {
                self.count_send::<V>(dest);
                record_send_into(core, id, len, None, out);
            }
        };
        drop(g);
        self.sent(dest, tag, context, len, mode, false);
        Ok(())
    }

    /// A standard send of `data` to world rank `dest`, if the transport
    /// says it goes now ([`Transport::send_small_now`]: for the node-local
    /// transport, inline into the destination's header ring, with
    /// continuation slots above one slot), counted and traced as
    /// [`Device::start_send_owned_into`] does; `false`: nothing was sent (a
    /// size the transport's [`SmallSend`](crate::transport::SmallSend)
    /// policy does not take, a self-send, a held or full ring, the device
    /// shared between threads, busy or finalized), and the caller takes
    /// the general path. Out of line and small on purpose, one function
    /// per kind of slot: the nonblocking send of a small message is the
    /// part of a window whose stores wait behind the previous ring slot's
    /// line transfer, and inside the general path's frame it made about 24
    /// more of them (saved registers and spills).
    #[inline]
    pub(crate) fn send_small_now(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        match self.small.kind(data.len()) {
            Some(SmallKind::One) => self.send_small_one(dest, tag, context, data),
            Some(SmallKind::More) => self.send_small_more(dest, tag, context, data),
            None => false,
        }
    }

    /// [`Device::send_small_now`] of one slot.
    #[inline(never)]
    fn send_small_one(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_small_with(dest, tag, context, data, |t, local| {
            t.send_small_now(local, tag, context, data, SmallKind::One)
        })
    }

    /// [`Device::send_small_now`] of several slots.
    #[inline(never)]
    fn send_small_more(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_small_with(dest, tag, context, data, |t, local| {
            t.send_small_now(local, tag, context, data, SmallKind::More)
        })
    }

    /// The body of [`Device::send_small_now`] to a peer of this node, with
    /// `push` the node-local transport's call (the kind of slot a
    /// constant in it, so that nothing else is compiled in); a peer of
    /// another node goes out of line.
    #[inline(always)]
    fn send_small_with(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        push: impl FnOnce(&mut ShmemTransport, u32) -> bool,
    ) -> bool {
        let Some(Route::Shmem { local }) = self.routes.get(dest as usize) else {
            return self.send_small_other(dest, tag, context, data);
        };
        let sent = self.core.with_owned(|core| match core {
            Some(core) => push(&mut core.local, *local),
            None => false,
        });
        if sent != Some(true) {
            return false;
        }
        super::bump_locked(&self.counters.shmem_sends);
        self.sent(dest, tag, context, data.len(), Mode::Standard, true);
        true
    }

    /// [`Device::send_small_now`] to a peer not on this node (the remote
    /// transport's), or to none (this rank, a bad rank): `false` but for
    /// a remote transport that sends it now.
    #[cold]
    #[inline(never)]
    fn send_small_other(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        let Some(Route::Remote { .. }) = self.routes.get(dest as usize) else {
            return false;
        };
        let kind = self.small.kind(data.len()).unwrap_or(SmallKind::More);
        let sent = self.core.with_owned(|core| match core {
            Some(Core {
                remote: Some(r), ..
            }) => r.send_small_now(dest, tag, context, data, kind),
            _ => false,
        });
        if sent != Some(true) {
            return false;
        }
        super::bump_locked(&self.counters.remote_sends);
        self.sent(dest, tag, context, data.len(), Mode::Standard, true);
        true
    }

    /// A standard send of `len` bytes to world rank `dest` that `fill`
    /// writes straight into the transport, if it completes in the call
    /// ([`Transport::send_fill_now`]: for the node-local transport, inline,
    /// or packed into an eager block in shared memory). `Ok(false)`:
    /// nothing was sent (a size or state that needs the general path, a
    /// self-send, or `fill` gave up); the caller packs into a buffer and
    /// sends that. `fill` runs under the core lock.
    pub(crate) fn send_fill_now(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<bool, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            lock_core!(self, g, core);
            if !V::pick(core)?.send_fill_now(peer, tag, context, len, fill) {
                return Ok(false);
            }
            self.count_send::<V>(dest);
            drop(g);
            self.sent(dest, tag, context, len, Mode::Standard, true);
            Ok(true)
        })
    }

    /// A standard send of `data` to world rank `dest` if it completes in
    /// the call ([`Transport::send_now`]: inline or eager, the data copied
    /// into the transport). `Ok(false)`: nothing was sent (a size or state
    /// that needs the general path, or a self-send).
    ///
    /// `staged`: `data` is a staging buffer just packed, which the caller
    /// reuses once this returns: it is copied even where the transport
    /// would let the receiver read it in place (CMA), rather than kept
    /// until the receiver's single copy of it.
    pub(crate) fn send_slice_now(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        staged: bool,
    ) -> Result<bool, Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            lock_core!(self, g, core);
            if !V::pick(core)?.send_now(peer, tag, context, data, staged) {
                return Ok(false);
            }
            self.count_send::<V>(dest);
            drop(g);
            self.sent(dest, tag, context, data.len(), Mode::Standard, true);
            Ok(true)
        })
    }

    /// A blocking send of `data` to world rank `dest` (`MPI_Send`,
    /// `MPI_Ssend`, `MPI_Rsend`). When the transport completes the send at
    /// once (inline, eager or self: the data is already copied), the send
    /// is finished under the same lock, with no request, no operation-table
    /// entry and no progress pass; otherwise (CMA, synchronous, staged) it
    /// waits on a request as [`Device::start_send`] makes it.
    pub(crate) fn send_blocking(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<(), Error> {
        dispatch!(self.dest_of(dest)?, |V, peer| {
            self.send_blocking_on::<V>(dest, peer, tag, context, data, mode)
        })
    }

    #[inline(always)]
    fn send_blocking_on<V: Via>(
        &self,
        dest: u32,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: Mode,
    ) -> Result<(), Error> {
        let len = data.len();
        let t_mode = transport_mode(mode);
        // The common case (finished in the call) makes no request at all.
        lock_core!(self, g, core);
        let started = V::pick(core)?.send_borrowed(peer, tag, context, data, t_mode)?;
        self.count_send::<V>(dest);
        let pending = started.map(|id| record_send(core, id, len, None));
        drop(g);
        self.count_mode(mode);
        tracing::debug!(
            dest,
            tag,
            context,
            len,
            ?mode,
            at_once = pending.is_none(),
            "blocking send"
        );
        match pending {
            None => Ok(()),
            // `data` stays borrowed until the request completes.
            Some(mut req) => self.wait(&mut req).map(|_| ()),
        }
    }

    /// A buffered send: copies `data` into the attached buffer and sends it
    /// from there; returns at once. A full buffer is
    /// [`Error::BsendBufferFull`].
    pub(crate) fn bsend(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
    ) -> Result<(), Error> {
        let need = data.len() + BSEND_OVERHEAD;
        let mut pool = lock(&self.bsend);
        let start = match pool.reserve(need) {
            Ok(s) => s,
            Err(e) => {
                bump(&self.counters.bsend_full);
                tracing::debug!(need, "buffered send refused: attached buffer full");
                return Err(e);
            }
        };
        let no_buffer = || Error::InvalidArgument {
            what: "no buffer attached",
        };
        pool.buf
            .as_mut()
            .ok_or_else(no_buffer)?
            .get_mut(start..start + data.len())
            .ok_or_else(no_buffer)?
            .copy_from_slice(data);
        let from_pool = pool
            .buf
            .as_ref()
            .and_then(|b| b.get(start..start + data.len()))
            .ok_or_else(no_buffer)?;
        // The region stays reserved (and the attached Vec is never resized
        // while attached) until the send completes, so the transport may
        // read it in place.
        match self.start_bsend(dest, tag, context, from_pool, start) {
            Ok(req) => {
                bump(&self.counters.buffered_sends);
                req.free();
                Ok(())
            }
            Err(e) => {
                pool.used.remove(&start);
                Err(e)
            }
        }
    }
}
