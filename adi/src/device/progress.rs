//! Progress: passes over the transports, the harvest of their completion
//! feeds, the waits, liveness, and finalize.

use super::ops::{send_outcome, Finished, Op, OpKind, RecvInto};
use super::{lock, shared, Core, Device, LIVENESS_EVERY};
use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::core_cell::ThreadLevel;
use crate::request::{Completer, Progress, ProgressOn, Request, SparePairs, Status};
use crate::transport::{Alive, OpTable, RecvStatus, Sink, Transport};
use crate::Error;
use std::collections::HashSet;
use std::mem;
use std::sync::atomic::Ordering;

/// Idle passes of a blocking check, after its spinning ones, before it
/// returns (a spurious return; waits loop).
const YIELD_PASSES: u32 = 256;

thread_local! {
    /// This thread's spare list of harvested operations: every progress pass
    /// that completes something harvests into a list, and reusing one per
    /// thread spares a heap allocation and free per pass.
    static SCRATCH: std::cell::Cell<Vec<Finished>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Takes this thread's spare harvest list (empty; a fresh one if in use).
fn take_scratch() -> Vec<Finished> {
    SCRATCH.with(std::cell::Cell::take)
}

/// Gives an emptied harvest list back for the thread's next pass.
fn give_scratch(mut v: Vec<Finished>) {
    v.clear();
    if v.capacity() <= 4096 {
        SCRATCH.with(|c| c.set(v));
    }
}

/// Pushes `f` to a harvest list, which takes this thread's spare list on
/// its first push.
fn push_finished(finished: &mut Vec<Finished>, f: Finished) {
    if finished.capacity() == 0 {
        *finished = take_scratch();
    }
    finished.push(f);
}

/// The harvest of one pass: the [`Sink`] the transports hand their
/// finished operations to (under the core lock). A plain one (a receive
/// into the request's own buffer, or a send not from the attached buffer)
/// whose request is in `mine` is completed in place right here: its
/// outcome is a few moves, with no other lock taken and no user code run.
/// The others go to `finished`, completed once the lock is released
/// ([`Device::complete_all_into`]).
struct Harvest<'a> {
    dev: &'a Device,
    ops: &'a mut OpTable<Op>,
    spares: &'a mut SparePairs,
    staged: &'a mut HashSet<u64>,
    shared: &'a mut shared::Pending,
    finished: &'a mut Vec<Finished>,
    mine: &'a mut [Request],
    hint: &'a mut usize,
    /// How many were completed in place.
    here: usize,
}

impl Sink for Harvest<'_> {
    #[inline(always)]
    fn send_done(&mut self, id: u64, result: Result<&mut Option<Vec<u8>>, Error>) {
        let mut result = result;
        if !self.staged.is_empty() && self.staged.remove(&id) {
            // A packed message's buffer: back to the pool (the request
            // hands back none).
            if let Ok(b) = &mut result {
                if let Some(v) = b.take() {
                    self.dev.give_back_staging(v);
                }
            }
        }
        match self.ops.remove(id) {
            Some(Op {
                kind:
                    OpKind::Send {
                        len,
                        bsend,
                        cancelled,
                    },
                completer,
            }) => {
                if bsend.is_none() {
                    if let Some(r) = take_mine(self.mine, &completer, self.hint) {
                        // The common case: the status of a send straight
                        // into the request.
                        match (result, cancelled) {
                            (Ok(buf), false) => {
                                let status = Status::new(ANY_SOURCE, ANY_TAG, len);
                                r.finish_ok_here(completer, status, buf.take(), self.spares);
                            }
                            (result, _) => {
                                let result = result.map(Option::take);
                                r.finish_here(completer, send_outcome(result, len, cancelled));
                            }
                        }
                        self.here += 1;
                        return;
                    }
                }
                push_finished(
                    self.finished,
                    Finished::Send {
                        completer,
                        result: result.map(Option::take),
                        len,
                        bsend,
                        cancelled,
                    },
                );
            }
            // Not a send of ours (cannot happen: ids are unique): its
            // completer, if any, completes the request as abandoned.
            Some(op) => drop(op),
            None => {}
        }
    }

    #[inline(always)]
    fn recv_done(&mut self, id: u64, result: Result<RecvStatus, Error>, buf: &mut Vec<u8>) {
        match self.ops.remove(id) {
            Some(Op {
                kind:
                    OpKind::Recv {
                        into,
                        group,
                        shared: false,
                    },
                completer,
            }) => {
                // Lent memory received into in place (nothing staged to
                // copy) completes as an owned buffer does.
                let plain = match &into {
                    RecvInto::Owned => true,
                    RecvInto::Lent(_) => buf.is_empty(),
                    RecvInto::Typed(_) => false,
                };
                if plain {
                    if let Some(r) = take_mine(self.mine, &completer, self.hint) {
                        // The common case: a plain successful receive (not
                        // cancelled, not truncated): its status and buffer
                        // straight into the request.
                        if let Ok(st) = &result {
                            if !st.cancelled && !st.truncated() {
                                let status = self.dev.status_of(st, group.as_deref());
                                r.finish_ok_here(
                                    completer,
                                    status,
                                    Some(mem::take(buf)),
                                    self.spares,
                                );
                                self.here += 1;
                                return;
                            }
                        }
                        let result = result.map(|st| (st, mem::take(buf)));
                        r.finish_here(
                            completer,
                            self.dev.recv_done(result, into, group.as_deref()),
                        );
                        self.here += 1;
                        return;
                    }
                }
                push_finished(
                    self.finished,
                    Finished::Recv {
                        completer,
                        result: result.map(|st| (st, mem::take(buf))),
                        into,
                        group,
                    },
                );
            }
            Some(Op {
                kind:
                    OpKind::Recv {
                        into,
                        group,
                        shared: true,
                    },
                completer,
            }) => {
                let result = self.dev.settle_shared(self.shared, id, result, buf);
                push_finished(
                    self.finished,
                    Finished::Recv {
                        completer,
                        result: result.map(|st| (st, mem::take(buf))),
                        into,
                        group,
                    },
                );
            }
            Some(op) => drop(op),
            None => {}
        }
    }

    fn proposed(&mut self, id: u64, status: RecvStatus) {
        self.shared.propose(id, status);
    }
}

impl Device {
    /// One progress pass under the lock, by the thread that owns `mine`
    /// (may be empty); returns how many requests it completed. Completions
    /// of `mine` are delivered in place ([`Request::finish_here`]: no
    /// publish through their shared slots; plain ones during the harvest,
    /// the others after the lock is released), the others through their
    /// completers after the lock is released. `hint` is where in `mine` the
    /// next completion is looked for first (requests mostly complete in
    /// order); it moves past each one found.
    fn poll_into(&self, mine: &mut [Request], hint: &mut usize) -> Result<usize, Error> {
        let mut finished = Vec::new();
        let (progressed, here) = self.with_core(|core| {
            let mut r = core.local.progress().map(drop);
            if let Some(t) = core.remote.as_mut() {
                r = r.and(t.progress().map(drop));
            }
            let here = self.harvest(core, &mut finished, mine, hint);
            if let Some(e) = core.shared.failed.take() {
                r = r.and(Err(e));
            }
            Ok((r, here))
        })?;
        let mut n = here + self.complete_all_into(finished, mine, hint);
        self.note_completed(n);
        progressed?;
        // MAKE_RMA_PROGRESS: drain RMA packets and engine actions.
        let m = crate::win::progress(self)?.completed;
        if m > 0 {
            self.bump_epoch();
            n += m;
        }
        // The schedules of nonblocking collectives.
        let k = crate::coll::task::progress();
        if k > 0 {
            self.bump_epoch();
            n += k;
        }
        Ok(n)
    }

    /// Takes every transport's finished operations and finishes those
    /// operations' transport side (under the lock), then answers what the
    /// shared receives left ([`Device::resolve_shared`]; an error there is
    /// left in `Core::shared` for the caller's pass to report). Returns
    /// how many were completed in place (see [`Harvest`]). Inlined: a
    /// pass that finds nothing (every pass a blocking receive makes while
    /// it waits) costs the transports' tests and no call.
    #[inline(always)]
    pub(super) fn harvest(
        &self,
        core: &mut Core,
        finished: &mut Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
    ) -> usize {
        let local = core.local.collect();
        let remote = core.remote.as_mut().is_some_and(|r| r.collect());
        if !(local || remote || core.shared.has_work()) {
            return 0;
        }
        self.harvest_found(core, finished, mine, hint, local, remote)
    }

    /// [`Device::harvest`] once a transport collected something (`local`,
    /// `remote`) or the shared receives have work.
    #[inline(never)]
    fn harvest_found(
        &self,
        core: &mut Core,
        finished: &mut Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
        local: bool,
        remote: bool,
    ) -> usize {
        let mut here = 0;
        if local || remote {
            here = self.drain_all(core, finished, mine, hint, local, remote);
        }
        if core.shared.has_work() && self.resolve_shared(core) && core.local.collect() {
            // A committed proposal's node-local post came back cancelled:
            // complete its receive in this pass.
            here += self.drain_all(core, finished, mine, hint, true, false);
        }
        here
    }

    /// The feeds of the transports that collected something (`local`,
    /// `remote`) into one [`Harvest`].
    #[inline(always)]
    fn drain_all(
        &self,
        core: &mut Core,
        finished: &mut Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
        local: bool,
        remote: bool,
    ) -> usize {
        let Core {
            local: l,
            remote: r,
            ops,
            spares,
            staged,
            shared,
        } = core;
        let mut h = Harvest {
            dev: self,
            ops,
            spares,
            staged,
            shared,
            finished,
            mine,
            hint,
            here: 0,
        };
        if local {
            l.drain(&mut h);
        }
        if remote {
            if let Some(r) = r.as_mut() {
                r.drain(&mut h);
            }
        }
        h.here
    }

    /// Completes harvested operations (outside the lock): those of `mine`
    /// in place, the others through their completers (see
    /// [`poll_into`](Self::poll_into)); returns how many (the caller bumps
    /// the epoch: [`note_completed`](Self::note_completed)).
    #[inline]
    pub(super) fn complete_all_into(
        &self,
        finished: Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
    ) -> usize {
        // Nothing harvested (the list never took the thread's spare one):
        // no call.
        if finished.capacity() == 0 {
            return 0;
        }
        self.complete_harvested(finished, mine, hint)
    }

    /// [`complete_all_into`](Self::complete_all_into) of a non-empty list.
    fn complete_harvested(
        &self,
        mut finished: Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
    ) -> usize {
        let n = finished.len();
        for f in finished.drain(..) {
            let (completer, outcome) = self.outcome(f);
            match take_mine(mine, &completer, hint) {
                Some(r) => r.finish_here(completer, outcome),
                None => completer.finish(outcome),
            }
        }
        give_scratch(finished);
        n
    }

    /// Bumps the completion epoch after a pass that completed `n` requests.
    pub(super) fn note_completed(&self, n: usize) {
        if n > 0 {
            self.bump_epoch();
        }
    }

    /// One more completion epoch. Under [`ThreadLevel::Funneled`] only the
    /// owning thread runs passes (every pass starts with a successful
    /// `core` access), so it is the epoch's only writer: a load and a
    /// store, without the locked read-modify-write.
    #[inline]
    fn bump_epoch(&self) {
        if self.core.level() == ThreadLevel::Funneled {
            let e = self.epoch.load(Ordering::Relaxed);
            self.epoch.store(e.wrapping_add(1), Ordering::Release);
        } else {
            self.epoch.fetch_add(1, Ordering::Release);
        }
    }

    /// Checks, at most every [`LIVENESS_EVERY`], that the peers we wait
    /// for are alive (on every transport).
    fn liveness(&self) -> Result<(), Error> {
        let now = self.start.elapsed().as_millis() as u64;
        let last = self.last_alive_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LIVENESS_EVERY.as_millis() as u64 {
            return Ok(());
        }
        self.last_alive_ms.store(now, Ordering::Relaxed);
        self.with_core(|core| {
            core.local.check_alive(Alive::Waited)?;
            match core.remote.as_mut() {
                Some(r) => r.check_alive(Alive::Waited),
                None => Ok(()),
            }
        })
    }

    /// The completion epoch: bumped after every pass that completed
    /// requests.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// `MPID_DeviceCheck(blocking)`: one progress pass; if `blocking` and
    /// nothing completed, keeps polling (outside the lock between passes)
    /// until a request completes here or in another thread, or a bounded
    /// number of idle passes have gone by.
    pub(crate) fn check(&self, blocking: bool) -> Result<(), Error> {
        let mut seen = self.epoch();
        self.check_since(blocking, &mut seen)
    }

    /// [`check`](Self::check) that also returns at once if the epoch moved
    /// past `*seen` (a completion by any thread since the caller last
    /// looked); updates `*seen`.
    pub(crate) fn check_since(&self, blocking: bool, seen: &mut u64) -> Result<(), Error> {
        self.check_since_on(&mut [], &mut 0, blocking, seen)
    }

    /// [`check_since`](Self::check_since) by the thread that owns `mine`,
    /// whose completions its passes deliver in place (see
    /// [`poll_into`](Self::poll_into)).
    fn check_since_on(
        &self,
        mine: &mut [Request],
        hint: &mut usize,
        blocking: bool,
        seen: &mut u64,
    ) -> Result<(), Error> {
        let mut idle = 0u32;
        loop {
            let done = self.poll_into(mine, hint)?;
            let now = self.epoch();
            if done > 0 || !blocking || now != *seen {
                *seen = now;
                return Ok(());
            }
            idle += 1;
            if idle >= self.spin.saturating_add(YIELD_PASSES) {
                return Ok(());
            }
            self.relax(idle)?;
        }
    }

    /// The idle policy between progress passes of a blocking call: spin for
    /// the first `TMX_ADI_SPIN` passes, then yield; check peer liveness
    /// now and then.
    pub(crate) fn relax(&self, idle: u32) -> Result<(), Error> {
        if idle % 64 == 0 {
            self.liveness()?;
        }
        if idle < self.spin {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// `MPI_Wait` with this device's progress ([`DeviceProgress`], which
    /// completes `req` in place when its pass harvests it).
    pub(crate) fn wait(&self, req: &mut Request) -> Result<Status, Error> {
        req.wait_on(&mut DeviceProgress::new(self))
    }

    /// Number of send operations (also freed ones and buffered sends)
    /// still in the table.
    fn outstanding_sends(&self) -> Result<usize, Error> {
        self.with_core(|core| {
            Ok(core
                .ops
                .values()
                .filter(|op| matches!(op.kind, OpKind::Send { .. }))
                .count())
        })
    }

    /// Messages the transports accepted but have not handed on yet.
    fn queued(&self) -> Result<usize, Error> {
        self.with_core(|core| {
            Ok(core.local.queued() + core.remote.as_ref().map_or(0, |r| r.queued()))
        })
    }

    /// Cancels every receive still posted (an MPI program must not finalize
    /// with pending receives; this keeps finalize from hanging on one) and
    /// returns how many there were.
    fn cancel_pending_recvs(&self) -> Result<usize, Error> {
        self.with_core(|core| {
            let Core {
                local,
                remote,
                ops,
                shared,
                ..
            } = core;
            let ids: Vec<u64> = ops
                .iter()
                .filter(|(_, op)| !matches!(op.kind, OpKind::Send { .. }))
                .map(|(id, _)| id)
                .collect();
            for &id in &ids {
                match ops.get_mut(id) {
                    Some(Op {
                        kind: OpKind::Recv { shared: true, .. },
                        ..
                    }) => {
                        self.cancel_shared(local, remote, shared, id)?;
                    }
                    Some(_) => {
                        super::recv::by_id!(local, remote, id, |t| t.cancel_recv(id))?;
                    }
                    None => {}
                }
            }
            Ok(ids.len())
        })
    }

    /// `MPID_End`: completes every outstanding send (including freed
    /// requests and buffered sends), cancels receives still posted (with a
    /// warning: that is an erroneous program, but finalize must not hang on
    /// it), then a PMI barrier, then closes the transports and the PMI
    /// connection. Prints the counters if asked.
    pub(crate) fn finalize(&self) -> Result<(), Error> {
        while self.outstanding_sends()? > 0 {
            self.check(true)?;
        }
        // A send completes once its data is safe (copied); its header may
        // still wait inside the transport for room. Push every such
        // message out before the PMI barrier, or a receiver still
        // receiving waits forever for it.
        while self.queued()? > 0 {
            self.check(true)?;
        }
        let pending = self.cancel_pending_recvs()?;
        if pending > 0 {
            tracing::warn!(pending, "finalize with receives still posted: cancelled");
            self.check(false)?;
        }
        self.with_pmi(|p| p.barrier())?;
        let core = self.core.lock()?.take();
        let mut lines = Vec::new();
        if let Some(core) = core {
            let Core { local, remote, .. } = core;
            lines.extend(local.finalize()?);
            if let Some(r) = remote {
                lines.extend(r.finalize()?);
            }
        }
        if self.print_counters {
            eprintln!(
                "adi counters (rank {}): {}",
                self.world_rank,
                self.counters()
            );
            for (what, text) in lines {
                eprintln!("{what} (rank {}): {text}", self.world_rank);
            }
            eprintln!(
                "rma counters (rank {}): {}",
                self.world_rank,
                crate::win::rma_counters()
            );
        }
        let pmi = lock(&self.pmi).take();
        if let Some(p) = pmi {
            p.finalize()?;
        }
        tracing::info!(rank = self.world_rank, "adi finalized");
        Ok(())
    }
}

/// The [`Progress`] hook of a device: `Device::check_since`. It
/// remembers the completion epoch from its creation (which precedes the
/// wait's first look at its requests) and from each return, so a blocking
/// call returns at once when another thread completed something since the
/// waiter last looked: no completion can slip between a wait's check of
/// its request and its blocking progress call.
///
/// As the [`ProgressOn`] hook of the device's own waits and tests
/// (`Comm::wait`, `test`, `waitall`, `waitany`, ...), its passes complete
/// the requests the caller waits on in place when they harvest them
/// ([`Device::poll_into`]), looking for each from where the last one was
/// found.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeviceProgress<'a> {
    dev: &'a Device,
    seen: u64,
    hint: usize,
}

impl<'a> DeviceProgress<'a> {
    pub(crate) fn new(dev: &'a Device) -> Self {
        DeviceProgress {
            dev,
            seen: dev.epoch(),
            hint: 0,
        }
    }
}

impl Progress for DeviceProgress<'_> {
    fn progress(&mut self, blocking: bool) -> Result<(), Error> {
        self.dev.check_since(blocking, &mut self.seen)
    }
}

impl ProgressOn for DeviceProgress<'_> {
    fn progress_on(&mut self, reqs: &mut [Request], blocking: bool) -> Result<(), Error> {
        self.dev
            .check_since_on(reqs, &mut self.hint, blocking, &mut self.seen)
    }
}

/// The request of `mine` that `completer` completes, looked for from
/// `*hint` on ([`find_mine`]); moves `*hint` past it.
fn take_mine<'a>(
    mine: &'a mut [Request],
    completer: &Completer,
    hint: &mut usize,
) -> Option<&'a mut Request> {
    // The usual case: the completion is the hinted request's (requests
    // mostly complete in order), checked before the wrapping scan.
    let h = *hint;
    let i = if mine.get(h).is_some_and(|r| completer.completes(r)) {
        h
    } else {
        find_mine(mine, completer, h)?
    };
    *hint = i + 1;
    mine.get_mut(i)
}

/// How far [`find_mine`] looks for the request a completion belongs to.
const FIND_MINE_SCAN: usize = 64;

/// The index in `mine` of the request `completer` completes, looked for
/// from `hint` on (wrapping) among at most [`FIND_MINE_SCAN`] requests;
/// `None` if not found there (the completion then goes through the slot,
/// which is always correct).
fn find_mine(mine: &[Request], completer: &Completer, hint: usize) -> Option<usize> {
    let n = mine.len();
    if n == 0 {
        return None;
    }
    let start = if hint < n { hint } else { 0 };
    // `start + k` wraps at most once (`start < n`, `k < n`): a compare,
    // not a division per probe.
    (0..n.min(FIND_MINE_SCAN))
        .map(|k| {
            let i = start + k;
            if i >= n {
                i - n
            } else {
                i
            }
        })
        .find(|&i| mine.get(i).is_some_and(|r| completer.completes(r)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_mine_wraps_from_the_hint_and_scans_a_bounded_window() {
        let (reqs, completers): (Vec<Request>, Vec<Completer>) =
            (0..100).map(|_| crate::request::request()).unzip();
        // Every request is found from every hint when the list fits the
        // scan window (wrapping past the end).
        let few = &reqs[..10];
        for hint in 0..12 {
            for (k, c) in completers[..10].iter().enumerate() {
                assert_eq!(find_mine(few, c, hint), Some(k), "hint {hint} target {k}");
            }
        }
        // A completer of a request not in the list is never matched.
        assert_eq!(find_mine(few, &completers[50], 3), None);
        // Longer lists: only FIND_MINE_SCAN requests from the hint (wrapping).
        assert_eq!(find_mine(&reqs, &completers[99], 40), Some(99));
        assert_eq!(find_mine(&reqs, &completers[3], 40), Some(3), "wrapped");
        assert_eq!(
            find_mine(&reqs, &completers[39], 40),
            None,
            "beyond the window"
        );
        assert_eq!(
            find_mine(&reqs, &completers[5], 100),
            Some(5),
            "hint past the end"
        );
        let mut hint = 97;
        let mut mine = reqs;
        assert!(take_mine(&mut mine, &completers[98], &mut hint).is_some());
        assert_eq!(hint, 99);
        assert_eq!(find_mine(&[], &completers[0], 0), None);
    }

    /// The harvest keeps a group per operation only when it is not the
    /// identity.
    #[test]
    fn identity_groups_are_not_kept() {
        use crate::device::Group;
        let g = std::sync::Arc::new(Group::new(vec![0, 1], 2));
        assert!(Group::kept(&g).is_none());
        let h = std::sync::Arc::new(Group::new(vec![1], 2));
        assert!(Group::kept(&h).is_some());
    }
}
