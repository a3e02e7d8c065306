//! Receives, probes and cancel.
//!
//! A receive's spec names its source as a world rank (or any); the device
//! turns it into the spec of the transport that reaches that source
//! ([`Device::recv_on`]) and runs the receive, written once generic over
//! the transport ([`Via`]), on it (`dispatch_recv!`: the node-local
//! transport inline, the remote one out of line). An `ANY_SOURCE` receive
//! on a communicator whose members span transports goes to all of them
//! (`shared`).

use super::ops::{record_recv, record_recv_into, Op, OpKind, RecvInto};
use super::{
    bump, bump_locked, dispatch_recv, lock_core, Core, Device, Group, OnLocal, OnRemote, RecvOn,
    Via, LIVENESS_EVERY,
};
use crate::request::{Request, Status};
use crate::transport::{Alive, ArrivalWatch, Matched, RecvStart, RecvStatus, Transport};
use crate::Error;
use std::mem;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tm_proto::{MatchSpec, Source};

/// A blocking exact-source receive that found nothing spins this many times
/// on its source's ring (lock-free, an arrival watch) before its next
/// progress pass under the core lock.
const WATCH_SPINS: u32 = 32;
/// Of those, the first this many look without a PAUSE in between.
const WATCH_EAGER: u32 = 8;
/// While nothing but the watched ring can bring work (no other transport,
/// no sends or copies held by this rank, no shared receives, no window
/// with active-message targets, no nonblocking collective pending), a
/// blocking receive spins up to this many rounds of [`WATCH_SPINS`] looks
/// between two passes under the core lock, and that pass is a full one
/// (every ring, FINs, reclaim): the same cadence of full passes as a pass
/// after every round, whose quick look at the source's ring ran a full
/// pass every eighth time, without the quick looks the watch already made.
const WATCH_ROUNDS: u32 = 8;
/// Looks at its source's ring that a blocking datatype receive waiting
/// for its message in place ([`Device::recv_in_place`]) takes before it
/// receives the general way: about 50 µs of spinning (a PAUSE is ~27 ns on
/// the project's VM), many round trips of a ping-pong.
const IN_PLACE_SPINS: u32 = 2048;

/// `$e` on the transport a [`RecvOn`] names, with `$t` the transport and
/// `$spec` the spec in its addresses; `$both` for a receive on both.
macro_rules! on {
    ($core:expr, $on:expr, |$t:ident, $spec:ident| $e:expr, |$bspec:ident| $both:expr) => {
        match $on {
            RecvOn::Local($spec) => {
                let $t = &mut $core.local;
                $e
            }
            RecvOn::Remote($spec) => match $core.remote_mut() {
                Ok($t) => $e,
                Err(e) => return Err(e),
            },
            RecvOn::Both($bspec) => $both,
        }
    };
}

/// `$e` on the transport whose operation `$id` is (see
/// [`crate::transport`], "Operation ids").
macro_rules! by_id {
    ($local:expr, $remote:expr, $id:expr, |$t:ident| $e:expr) => {
        if $id & $crate::transport::REMOTE_ID == 0 {
            let $t = &mut *$local;
            $e
        } else {
            match $remote.as_mut() {
                Some($t) => $e,
                None => Err(Error::InvalidArgument {
                    what: "no remote transport",
                }),
            }
        }
    };
}
pub(super) use by_id;

impl Core {
    /// `try_recv` on the transport(s) of `on`: the node-local one first.
    fn try_recv_on(&mut self, on: RecvOn, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        match on {
            RecvOn::Local(spec) => OnLocal::try_recv(self, spec, buf),
            RecvOn::Remote(spec) => OnRemote::try_recv(self, spec, buf),
            RecvOn::Both(spec) => OnBoth::try_recv(self, spec, buf),
        }
    }
}

/// How a blocking receive ([`Device::recv_into`]) polls: on one transport
/// ([`OnLocal`], [`OnRemote`]), or on both ([`OnBoth`]).
trait Poll {
    /// [`Transport::try_recv`] on the transport(s).
    fn try_recv(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error>;
    /// One progress pass of the transport that `try_recv` does not poll
    /// (its queued sends keep moving while this rank waits), and the error
    /// a harvest left from answering shared receives.
    fn others(core: &mut Core) -> Result<(), Error>;
    /// A watch on the next arrival from the spec's source, if any.
    fn watch(core: &mut Core, spec: MatchSpec) -> Option<ArrivalWatch> {
        let _ = (core, spec);
        None
    }
    /// Whether, until the watched ring publishes a header, a pass under
    /// the lock has nothing to do besides what [`Poll::try_recv_full`] does
    /// (see [`WATCH_ROUNDS`]).
    fn quiet(core: &Core) -> bool {
        let _ = core;
        false
    }
    /// [`Poll::try_recv`] as one full progress pass, without a quick look
    /// at the source's ring (which the watch made).
    fn try_recv_full(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        Self::try_recv(core, spec, buf)
    }
    /// Which peers the receive waits for.
    fn alive(core: &mut Core, spec: MatchSpec) -> Result<(), Error>;
}

/// `ANY_SOURCE` over both transports ([`Poll`]).
enum OnBoth {}

/// The peers a receive of `spec` waits for.
fn waited(spec: MatchSpec) -> Alive {
    match spec.source {
        Source::Rank(p) => Alive::Peer(p),
        Source::Any => Alive::All,
    }
}

impl Poll for OnLocal {
    #[inline(always)]
    fn try_recv(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        core.local.try_recv(spec, buf)
    }

    #[inline(always)]
    fn others(core: &mut Core) -> Result<(), Error> {
        match core.remote.as_mut() {
            Some(r) => {
                r.progress()?;
                core.shared.failed.take().map_or(Ok(()), Err)
            }
            None => Ok(()),
        }
    }

    #[inline(always)]
    fn watch(core: &mut Core, spec: MatchSpec) -> Option<ArrivalWatch> {
        match spec.source {
            Source::Rank(p) => core.local.arrival_watch(p),
            Source::Any => None,
        }
    }

    #[inline(always)]
    fn quiet(core: &Core) -> bool {
        core.remote.is_none() && !core.shared.has_work() && !core.local.has_local_work()
    }

    fn try_recv_full(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        core.local.try_recv_full(spec, buf)
    }

    fn alive(core: &mut Core, spec: MatchSpec) -> Result<(), Error> {
        core.local.check_alive(waited(spec))
    }
}

impl Poll for OnRemote {
    fn try_recv(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        core.remote_mut()?.try_recv(spec, buf)
    }

    fn others(core: &mut Core) -> Result<(), Error> {
        core.local.progress()?;
        core.shared.failed.take().map_or(Ok(()), Err)
    }

    fn alive(core: &mut Core, spec: MatchSpec) -> Result<(), Error> {
        core.remote_mut()?.check_alive(waited(spec))
    }
}

impl Poll for OnBoth {
    fn try_recv(
        core: &mut Core,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        match core.local.try_recv(spec, buf)? {
            Some(st) => Ok(Some(st)),
            None => core.remote_mut()?.try_recv(spec, buf),
        }
    }

    fn others(core: &mut Core) -> Result<(), Error> {
        core.shared.failed.take().map_or(Ok(()), Err)
    }

    fn alive(core: &mut Core, _spec: MatchSpec) -> Result<(), Error> {
        core.local.check_alive(Alive::All)?;
        core.remote_mut()?.check_alive(Alive::All)
    }
}

impl Device {
    /// Starts a receive into `buf` (owned by the operation until it
    /// completes).
    ///
    /// A receive that matches a message already arrived is finished inside
    /// the call: no operation-table entry, nothing for progress to
    /// harvest, and (for a plain successful receive into the user's buffer)
    /// a request born complete with no slot.
    pub(crate) fn start_recv(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        into: RecvInto,
        group: Arc<Group>,
    ) -> Result<Request, Error> {
        self.start_recv_in(spec, buf, into, &group)
    }

    /// [`Device::start_recv`] with the communicator's group borrowed: an
    /// operation keeps a reference only if it stays pending on a
    /// non-identity group.
    pub(crate) fn start_recv_in(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        into: RecvInto,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.start_recv_in_on::<V>(spec, buf, into, group),
            |spec| {
                lock_core!(self, g, core);
                bump_locked(&self.counters.recvs);
                self.start_shared(core, spec, buf, into, group)
            }
        )
    }

    #[inline(always)]
    fn start_recv_in_on<V: Via>(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        into: RecvInto,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        lock_core!(self, g, core);
        bump_locked(&self.counters.recvs);
        let started = V::pick(core)?.irecv(spec, buf, into.consumer());
        match started {
            Ok(RecvStart::Pending(id)) => Ok(record_recv(core, id, into, group)),
            Ok(RecvStart::Done(result, buf)) => {
                drop(g);
                Ok(self.recv_done_at_once(result, buf, into, group))
            }
            Err(e) => Err(e),
        }
    }

    /// [`Device::start_recv_in`] of a receive into the user's own buffer
    /// (`Comm::irecv`), with the common outcome of a message already here
    /// (a plain success) built straight from the transport's result. Kept
    /// apart from [`Device::start_recv_owned_into`], as
    /// [`Device::start_send_owned`] is: returned through it, the request
    /// cost 2–3% of a bi-directional window.
    #[inline]
    pub(crate) fn start_recv_owned(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.start_recv_owned_on::<V>(spec, buf, group),
            |spec| {
                lock_core!(self, g, core);
                bump_locked(&self.counters.recvs);
                self.start_shared(core, spec, buf, RecvInto::Owned, group)
            }
        )
    }

    #[inline(always)]
    fn start_recv_owned_on<V: Via>(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        lock_core!(self, g, core);
        bump_locked(&self.counters.recvs);
        let mut buf = buf;
        let t = V::pick(core)?;
        // The common case first: its message is the next in line.
        if let Some(st) = t.recv_arrived(spec, &mut buf)? {
            drop(g);
            let status = self.status_of(&st, Group::as_kept(group));
            return Ok(Request::ready_with_buffer(status, buf));
        }
        // Matched where it lies (see `start_recv_owned_into_on`).
        let mut started = t.irecv(spec, buf, None);
        Ok(match started {
            Ok(RecvStart::Pending(id)) => record_recv(core, id, RecvInto::Owned, group),
            Ok(RecvStart::Done(Ok(ref st), ref mut buf)) if !st.cancelled && !st.truncated() => {
                drop(g);
                let status = self.status_of(st, Group::as_kept(group));
                Request::ready_with_buffer(status, mem::take(buf))
            }
            Ok(RecvStart::Done(result, buf)) => {
                drop(g);
                self.recv_done_at_once(result, buf, RecvInto::Owned, group)
            }
            Err(e) => return Err(e),
        })
    }

    /// [`Device::start_recv_in`] of a receive into the user's own buffer,
    /// writing the request into `out` (the caller's storage, as
    /// `MPI_Irecv`'s request argument; `Comm::irecv_into`). On an error
    /// `out` is left as it was. A message already here is taken first
    /// ([`Transport::recv_arrived`]), and both it and a pending request
    /// are stored field by field into `out` (see
    /// [`Device::start_send_owned_into`]).
    #[inline(always)]
    pub(crate) fn start_recv_owned_into(
        &self,
        out: &mut Request,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<(), Error> {
        dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.start_recv_owned_into_on::<V>(out, spec, buf, group),
            |spec| {
                lock_core!(self, g, core);
                bump_locked(&self.counters.recvs);
                *out = self.start_shared(core, spec, buf, RecvInto::Owned, group)?;
                Ok(())
            }
        )
    }

    #[inline(always)]
    fn start_recv_owned_into_on<V: Via>(
        &self,
        out: &mut Request,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<(), Error> {
        lock_core!(self, g, core);
        bump_locked(&self.counters.recvs);
        let mut buf = buf;
        let t = V::pick(core)?;
        // The common case first: its message is the next in line.
        if let Some(st) = t.recv_arrived(spec, &mut buf)? {
            drop(g);
            out.set_ready_with_buffer(self.status_of(&st, Group::as_kept(group)), buf);
            return Ok(());
        }
        // Matched where it lies (no `?`): the result is large, and moving
        // it cost more stores than the rest of the path.
        let mut started = t.irecv(spec, buf, None);
        match started {
            Ok(RecvStart::Pending(id)) => record_recv_into(core, id, RecvInto::Owned, group, out),
            Ok(RecvStart::Done(Ok(ref st), ref mut buf)) if !st.cancelled && !st.truncated() => {
                drop(g);
                out.set_ready_with_buffer(
                    self.status_of(st, Group::as_kept(group)),
                    mem::take(buf),
                );
            }
            Ok(RecvStart::Done(result, buf)) => {
                drop(g);
                *out = self.recv_done_at_once(result, buf, RecvInto::Owned, group);
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Receives into `buf` a message already here that a receive for
    /// `spec` posted now would match ([`Transport::recv_now`]): `Some` of
    /// the MPI result ([`Device::recv_result`]: a longer message fills
    /// `buf` and is `RecvTruncated`), counted as a started receive; `None`
    /// when no such message has arrived, and then nothing was received,
    /// posted or counted. For datatype receives that unpack from a buffer
    /// on the caller's stack (`Comm::irecv_typed`). Inlined: its result,
    /// returned through memory, stalled store forwarding in the caller.
    #[inline(always)]
    pub(crate) fn recv_now(
        &self,
        spec: MatchSpec,
        buf: &mut [u8],
        group: &Group,
    ) -> Result<Option<Result<Status, Error>>, Error> {
        let got = dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.with_core(|core| {
                let got = V::pick(core)?.recv_now(spec, buf)?;
                if got.is_some() {
                    bump_locked(&self.counters.recvs);
                }
                Ok(got)
            }),
            |spec| self.with_core(|core| {
                let got = match core.local.recv_now(spec, buf)? {
                    Some(st) => Some(st),
                    None => core.remote_mut()?.recv_now(spec, buf)?,
                };
                if got.is_some() {
                    bump_locked(&self.counters.recvs);
                }
                Ok(got)
            })
        )?;
        Ok(got.map(|st| self.recv_result(&st, Group::as_kept(group))))
    }

    /// Starts a receive of matched message `msg` into `buf`.
    pub(crate) fn start_mrecv(
        &self,
        msg: Matched,
        buf: Vec<u8>,
        into: RecvInto,
        group: Arc<Group>,
    ) -> Result<Request, Error> {
        lock_core!(self, g, core);
        bump_locked(&self.counters.recvs);
        let started = match msg {
            Matched::Local(m) => core.local.imrecv(m, buf)?,
            Matched::Remote(m) => core.remote_mut()?.imrecv(m, buf)?,
        };
        match started {
            RecvStart::Pending(id) => Ok(record_recv(core, id, into, &group)),
            RecvStart::Done(result, buf) => {
                drop(g);
                Ok(self.recv_done_at_once(result, buf, into, &group))
            }
        }
    }

    /// A blocking receive into a borrowed buffer, delivered straight into
    /// `buf` (no staging copy): each pass takes the core lock for one
    /// non-blocking [`Transport::try_recv`] (which runs a progress pass
    /// and matches the oldest waiting message, or a CMA/eager message
    /// straight into `buf`) plus the completion feed of the other
    /// operations, then releases it and relaxes. The receive is not
    /// *posted* between passes, which MPI allows: a later-posted receive of
    /// the same thread cannot exist (this call blocks it), and the order
    /// between receives of different threads is undefined (an `ANY_SOURCE`
    /// receive over both transports polls the node-local one first). Peer
    /// liveness is checked every [`LIVENESS_EVERY`] (the source, or every
    /// peer for `ANY_SOURCE`).
    pub(crate) fn recv_into(
        &self,
        spec: MatchSpec,
        buf: &mut [u8],
        group: &Arc<Group>,
    ) -> Result<Status, Error> {
        dispatch_recv!(
            self,
            spec,
            Some(group),
            |V, spec| self.recv_into_on::<V>(spec, buf, group),
            |spec| self.recv_into_on::<OnBoth>(spec, buf, group)
        )
    }

    #[inline(always)]
    fn recv_into_on<Q: Poll>(
        &self,
        spec: MatchSpec,
        buf: &mut [u8],
        group: &Arc<Group>,
    ) -> Result<Status, Error> {
        let mut idle = 0u32;
        let mut first = true;
        // Between passes, an exact-source receive watches its source's ring
        // without the lock (see `ArrivalWatch`).
        let mut watch = None;
        // Whether the last pass left nothing to do but watch, and whether
        // the watch then ran out of rounds (the next pass is a full one).
        let mut quiet = false;
        let mut ran_out = false;
        // Rounds of looks the last wait between passes ran: idle counts
        // rounds, so that the spinning before yielding lasts as long with
        // rounds between passes as without.
        let mut spun = 1u32;
        loop {
            // Empty (no allocation); `harvest` fills it from the thread's
            // spare list only when something finished.
            let mut finished = Vec::new();
            let got = {
                lock_core!(self, g, core);
                // After rounds in which the watch saw nothing: the full
                // pass they skipped, without the quick look at the source's
                // ring that the watch made.
                let mut r = if ran_out {
                    Q::try_recv_full(core, spec, buf)
                } else {
                    Q::try_recv(core, spec, buf)
                };
                if first {
                    bump_locked(&self.counters.recvs);
                    if matches!(r, Ok(Some(_))) {
                        bump_locked(&self.counters.recv_fast_hits);
                    }
                }
                if let Ok(None) = r {
                    watch = Q::watch(core, spec);
                    quiet = Q::quiet(core);
                }
                // A failed pass on another transport fails the receive
                // (once what this pass harvested is completed), unless it
                // received.
                if let Err(e) = Q::others(core) {
                    if let Ok(None) = r {
                        r = Err(e);
                    }
                }
                self.harvest(core, &mut finished, &mut [], &mut 0);
                drop(g);
                r
            };
            first = false;
            let n = self.complete_all_into(finished, &mut [], &mut 0);
            self.note_completed(n);
            // Passive-target RMA progress and the schedules of pending
            // nonblocking collectives also run in blocking receives (MPI's
            // progress rule: a rank blocked here may be the one another
            // rank's collective waits for); either counts as activity
            // (keeps spinning). With no collective pending the schedules'
            // check is one relaxed load.
            let rma_active = crate::win::progress(self)?.packets > 0;
            let coll_active = crate::coll::task::progress() > 0;
            if let Some(st) = got? {
                return self.recv_result(&st, Group::as_kept(group));
            }
            // No more rounds without a pass while windows or collectives
            // need this rank's progress.
            quiet &=
                !(rma_active || coll_active) && crate::win::idle(self) && crate::coll::task::idle();
            let step = mem::replace(&mut spun, 1);
            let active = rma_active || coll_active;
            idle = if active { 1 } else { idle.wrapping_add(step) };
            // Once every 64 rounds (`step` is at most WATCH_ROUNDS).
            if !active && idle % 64 < step {
                if let Err(e) = self.source_alive::<Q>(spec) {
                    // Deliver what the peer sent before it died, if it matches.
                    for _ in 0..64 {
                        if let Some(st) = self.with_core(|core| Q::try_recv(core, spec, buf))? {
                            return self.recv_result(&st, Group::as_kept(group));
                        }
                    }
                    return Err(e);
                }
            }
            ran_out = false;
            if idle < self.spin {
                match &watch {
                    // Nothing new from the source: spin on its ring's next
                    // slot, up to WATCH_SPINS times (WATCH_ROUNDS rounds of
                    // them while quiet), before the next pass.
                    Some(w) => {
                        let rounds = if quiet { WATCH_ROUNDS } else { 1 };
                        ran_out = quiet;
                        'watch: for round in 0..rounds {
                            spun = round + 1;
                            for i in 0..WATCH_SPINS {
                                if w.published() {
                                    ran_out = false;
                                    break 'watch;
                                }
                                // The first looks back to back: a PAUSE
                                // costs ~27 ns on the project's VM, a fifth
                                // of a small message's one-way time.
                                if i >= WATCH_EAGER {
                                    std::hint::spin_loop();
                                }
                            }
                            // Another thread may have started a collective
                            // or an RMA epoch meanwhile.
                            if round + 1 < rounds
                                && !(crate::win::idle(self) && crate::coll::task::idle())
                            {
                                ran_out = false;
                                break;
                            }
                        }
                    }
                    None => std::hint::spin_loop(),
                }
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// A receive whose payload `f` reads where it lies (a datatype receive
    /// unpacking straight from the sender's eager block, see
    /// [`Transport::recv_arrived_with`]), if its message is the next in its
    /// source's line now; `cap`: the packed capacity. `Ok(None)`: nothing
    /// was taken and `f` did not run.
    pub(crate) fn recv_arrived_with(
        &self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
        group: &Group,
    ) -> Result<Option<Status>, Error> {
        let on = self.recv_on(spec, Some(group))?;
        let got = self.with_core(|core| {
            on!(
                core,
                on,
                |t, spec| t.recv_arrived_with(spec, cap, &mut *f),
                |_spec| Ok(None)
            )
        })?;
        Ok(got.map(|st| self.in_place_status(&st, group)))
    }

    /// The status of a receive unpacked in place, counted as one.
    fn in_place_status(&self, st: &RecvStatus, group: &Group) -> Status {
        bump(&self.counters.recvs);
        bump(&self.counters.unpacked_in_place);
        self.status_of(st, Group::as_kept(group))
    }

    /// The blocking form of [`Device::recv_arrived_with`], for a source on
    /// this node: while the message can still be taken at the front of its
    /// source's line ([`Transport::front_open`]), spins on that ring
    /// (lock-free, as [`Device::recv_into`] does between its passes) for up
    /// to [`IN_PLACE_SPINS`] looks (none with `TMX_ADI_SPIN=0`), taking the
    /// message when it comes. `Ok(None)` as soon as it cannot be taken
    /// there (another message is in front, something entered the matcher),
    /// the spins run out, or the source is not on this node: nothing was
    /// taken and the caller receives the general way ([`Device::recv_into`],
    /// which also runs the progress this wait skipped).
    pub(crate) fn recv_in_place(
        &self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
        group: &Group,
    ) -> Result<Option<Status>, Error> {
        let RecvOn::Local(
            spec @ MatchSpec {
                source: Source::Rank(p),
                ..
            },
        ) = self.recv_on(spec, Some(group))?
        else {
            return Ok(None);
        };
        // No spinning where blocking checks yield at once (`TMX_ADI_SPIN=0`:
        // more ranks than cores, the sender may need this core).
        let budget = if self.spin == 0 { 0 } else { IN_PLACE_SPINS };
        let mut spins = 0u32;
        loop {
            let (got, watch) = self.with_core(|core| {
                let t = &mut core.local;
                let r = t.recv_arrived_with(spec, cap, &mut *f)?;
                let w = match r {
                    None if t.front_open(spec) => t.arrival_watch(p),
                    _ => None,
                };
                Ok((r, w))
            })?;
            if let Some(st) = got {
                return Ok(Some(self.in_place_status(&st, group)));
            }
            let Some(w) = watch else {
                return Ok(None);
            };
            if w.published() {
                // A header is in front that this receive cannot take.
                return Ok(None);
            }
            loop {
                if spins >= budget {
                    return Ok(None);
                }
                spins += 1;
                if w.published() {
                    break;
                }
                if spins > WATCH_EAGER {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Liveness of the peer(s) a blocking receive of `spec` polled by `Q`
    /// waits for, at most every [`LIVENESS_EVERY`].
    fn source_alive<Q: Poll>(&self, spec: MatchSpec) -> Result<(), Error> {
        let now = self.start.elapsed().as_millis() as u64;
        let last = self.last_alive_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LIVENESS_EVERY.as_millis() as u64 {
            return Ok(());
        }
        self.last_alive_ms.store(now, Ordering::Relaxed);
        self.with_core(|core| Q::alive(core, spec))
    }

    // ------------------------------------------------------------ probes

    /// `MPI_Iprobe`: the status of the oldest message matching `spec`
    /// (`count` is its length).
    pub(crate) fn iprobe(&self, spec: MatchSpec, group: &Group) -> Result<Option<Status>, Error> {
        let on = self.recv_on(spec, Some(group))?;
        let st = self.with_core(|core| {
            on!(core, on, |t, spec| t.iprobe(spec), |spec| {
                match core.local.iprobe(spec)? {
                    Some(st) => Ok(Some(st)),
                    None => core.remote_mut()?.iprobe(spec),
                }
            })
        })?;
        Ok(st.map(|st| {
            bump(&self.counters.probes_matched);
            let mut s = self.status_of(&st, Some(group));
            s.count = st.msg_len;
            s
        }))
    }

    /// `MPI_Improbe`: the oldest message matching `spec`, removed from
    /// matching, and its status.
    pub(crate) fn improbe(
        &self,
        spec: MatchSpec,
        group: &Group,
    ) -> Result<Option<(Matched, Status)>, Error> {
        let on = self.recv_on(spec, Some(group))?;
        let local = |t: &mut crate::transport::ShmemTransport, spec| {
            Ok::<_, Error>(t.improbe(spec)?.map(|(m, st)| (Matched::Local(m), st)))
        };
        let m = self.with_core(|core| match on {
            RecvOn::Local(spec) => local(&mut core.local, spec),
            RecvOn::Remote(spec) => Ok(core
                .remote_mut()?
                .improbe(spec)?
                .map(|(m, st)| (Matched::Remote(m), st))),
            RecvOn::Both(spec) => match local(&mut core.local, spec)? {
                Some(m) => Ok(Some(m)),
                None => Ok(core
                    .remote_mut()?
                    .improbe(spec)?
                    .map(|(m, st)| (Matched::Remote(m), st))),
            },
        })?;
        Ok(m.map(|(msg, st)| {
            bump(&self.counters.probes_matched);
            let mut s = self.status_of(&st, Some(group));
            s.count = st.msg_len;
            (msg, s)
        }))
    }

    /// Under one core lock: the oldest message matching `spec` (probed for
    /// its length, then received whole into `buf`, which grows as needed
    /// and is reused across calls), with its sender's world rank and
    /// length. Used by RMA progress for the packets of a window's RMA
    /// context (on every transport).
    pub(crate) fn try_take(
        &self,
        spec: MatchSpec,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(u32, usize)>, Error> {
        let on = self.recv_on(spec, None)?;
        self.with_core(|core| {
            let st = on!(core, on, |t, spec| t.iprobe(spec)?, |spec| {
                match core.local.iprobe(spec)? {
                    Some(st) => Some(st),
                    None => core.remote_mut()?.iprobe(spec)?,
                }
            });
            let Some(st) = st else {
                return Ok(None);
            };
            let exact = self.recv_on(
                MatchSpec {
                    source: Source::Rank(st.source),
                    ..spec
                },
                None,
            )?;
            if buf.len() < st.msg_len {
                buf.resize(st.msg_len, 0);
            }
            let into = buf.get_mut(..st.msg_len).unwrap_or(&mut []);
            Ok(core.try_recv_on(exact, into)?.map(|r| (r.source, r.len)))
        })
    }

    // ----------------------------------------------------------- cancel

    /// `MPI_Cancel`: `Ok(true)` if the transport removed the operation (the
    /// request then completes with `cancelled`), `Ok(false)` if it could not
    /// (already matched, or a send the transport will not cancel): the
    /// operation then completes normally.
    pub(crate) fn cancel(&self, req: &Request) -> Result<bool, Error> {
        let Some(id) = req.op() else {
            if req.is_null() {
                return Err(Error::InvalidRequest {
                    what: "cancel of a null request",
                });
            }
            // Complete already (PROC_NULL, or finished): nothing to cancel.
            return Ok(false);
        };
        let ok = self.with_core(|core| {
            let Core {
                local,
                remote,
                ops,
                shared,
                ..
            } = core;
            match ops.get_mut(id) {
                None => Ok(false),
                Some(Op {
                    kind: OpKind::Recv { shared: false, .. },
                    ..
                }) => by_id!(local, remote, id, |t| t.cancel_recv(id)),
                Some(Op {
                    kind: OpKind::Send { cancelled, .. },
                    ..
                }) => {
                    let ok = by_id!(local, remote, id, |t| t.cancel_send(id))?;
                    *cancelled |= ok;
                    Ok(ok)
                }
                Some(Op {
                    kind: OpKind::Recv { shared: true, .. },
                    ..
                }) => self.cancel_shared(local, remote, shared, id),
            }
        })?;
        if ok {
            bump(&self.counters.cancelled);
        }
        tracing::debug!(id, ok, "cancel");
        Ok(ok)
    }
}
