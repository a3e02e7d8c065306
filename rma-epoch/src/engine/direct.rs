//! The engine's side of the direct backend: per-target epoch state of the
//! targets an origin loads and stores itself, the gate every direct
//! operation passes, and the [`DirectAction`]s that ask the driver for
//! shared-memory synchronization.
//!
//! The epoch machine is the same as for active-message targets (the access
//! and exposure states, the lock-epoch count, the PSCW group and its posts
//! live in [`WinCore`]); what is kept here is what a direct target needs
//! instead of a target element: whether its lock is held (a direct
//! operation is complete when it returns, so it never waits in an op
//! list), whose posts were asked for, and whose completes are awaited.
//!
//! The calls that the same-node data path makes per operation and per
//! epoch (the gate, `lock`/`unlock`, `flush`, and, on a window whose ranks
//! are all direct, `fence` and `post`/`start`/`complete`/`wait`) have short
//! paths here that leave the same state, steps and errors as the general
//! algorithms would, without running them. [`Engine::fence_direct_now`]
//! hands the fence barrier to a driver that carries it out at once instead
//! of queuing it.

use super::*;
use crate::backend::{Backends, DirectAction, DirectFence, Gate};

/// How a direct target's lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LockMode {
    Shared,
    Exclusive,
    /// `MODE_NOCHECK`: no lock taken.
    NoCheck,
}

/// A passive-target lock on a direct target (a lock epoch, or a lazy lock
/// of `lock_all`).
#[derive(Debug, Clone, Copy)]
pub(super) struct DirectLock {
    pub(super) rank: Rank,
    pub(super) mode: LockMode,
    /// The driver reported the grant.
    pub(super) granted: bool,
}

/// Per-window state of the direct targets.
#[derive(Debug, Default)]
pub(super) struct DirectCore {
    pub(super) backends: Backends,
    /// Every rank of the window is direct.
    pub(super) all: bool,
    /// Locks held or requested on direct targets.
    pub(super) locks: Vec<DirectLock>,
    /// PSCW access: direct members of the start group whose post was asked
    /// for ([`DirectAction::AwaitPost`]) and not reported yet.
    pub(super) post_requested: Vec<Rank>,
    /// PSCW exposure: direct origins whose complete is still expected, and
    /// whether it was asked for ([`DirectAction::AwaitComplete`]).
    pub(super) completes: Vec<(Rank, bool)>,
    /// Work for the driver, in order.
    pub(super) out: DirectQueue,
    /// The fence barrier in flight ends the epoch (`MODE_NOSUCCEED`).
    pub(super) fence_ends_epoch: bool,
}

/// A FIFO of [`DirectAction`]s that keeps its buffer: a vector and a read
/// position (cheaper than a ring for the one or two steps a call asks for).
#[derive(Debug, Default)]
pub(super) struct DirectQueue {
    items: Vec<DirectAction>,
    taken: usize,
}

impl DirectQueue {
    #[inline]
    pub(super) fn push_back(&mut self, a: DirectAction) {
        self.items.push(a);
    }

    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<DirectAction> {
        let a = self.items.get(self.taken).copied();
        match a {
            Some(_) => self.taken += 1,
            None => {
                self.items.clear();
                self.taken = 0;
            }
        }
        a
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.taken >= self.items.len()
    }

    pub(super) fn len(&self) -> usize {
        self.items.len() - self.taken
    }

    pub(super) fn capacity(&self) -> usize {
        self.items.capacity()
    }
}

impl DirectCore {
    pub(super) fn new(backends: Backends, comm_size: u32) -> Self {
        let all = backends.direct_ranks().len() == comm_size as usize;
        DirectCore {
            backends,
            all,
            ..DirectCore::default()
        }
    }

    #[inline]
    pub(super) fn is_direct(&self, rank: Rank) -> bool {
        self.all || self.backends.is_direct(rank)
    }

    #[inline]
    pub(super) fn lock_of(&self, rank: Rank) -> Option<usize> {
        self.locks.iter().position(|l| l.rank == rank)
    }

    /// Whether an operation to `target` (a valid rank) may go now without
    /// asking for anything: the fast path of the gate (the slow path decides
    /// the rest, errors included).
    #[inline]
    pub(super) fn open_now(
        &self,
        access: AccessState,
        nocheck: bool,
        group: &[Rank],
        target: Rank,
    ) -> bool {
        use AccessState::*;
        if !self.is_direct(target) {
            return false;
        }
        match access {
            FenceGranted => true,
            PscwGranted => group.binary_search(&target).is_ok(),
            PerTarget => self.locks.iter().any(|l| l.rank == target && l.granted),
            LockAllCalled | LockAllIssued | LockAllGranted => {
                nocheck || self.locks.iter().any(|l| l.rank == target && l.granted)
            }
            _ => false,
        }
    }

    /// Asks for `target`'s post unless already asked.
    pub(super) fn request_post(&mut self, target: Rank) {
        if !self.post_requested.contains(&target) {
            self.post_requested.push(target);
            self.out.push_back(DirectAction::AwaitPost { target });
        }
    }

    /// Asks for every expected complete not asked for yet; true if any.
    pub(super) fn request_completes(&mut self) -> bool {
        let mut any = false;
        for (origin, asked) in self.completes.iter_mut() {
            if !*asked {
                *asked = true;
                any = true;
                self.out
                    .push_back(DirectAction::AwaitComplete { origin: *origin });
            }
        }
        any
    }

    /// Releases every lock of a `lock_all` epoch (all granted).
    pub(super) fn release_all(&mut self) {
        for l in self.locks.drain(..) {
            if l.mode != LockMode::NoCheck {
                self.out.push_back(DirectAction::Unlock {
                    target: l.rank,
                    exclusive: l.mode == LockMode::Exclusive,
                });
            }
        }
    }

    pub(super) fn all_granted(&self) -> bool {
        self.locks.iter().all(|l| l.granted)
    }

    pub(super) fn heap_bytes(&self) -> usize {
        self.backends.direct_ranks().len() * 4
            + self.locks.capacity() * core::mem::size_of::<DirectLock>()
            + self.post_requested.capacity() * 4
            + self.completes.capacity() * core::mem::size_of::<(Rank, bool)>()
            + self.out.capacity() * core::mem::size_of::<DirectAction>()
    }
}

impl WinCore {
    pub(super) fn wrong_backend(&self, target: Rank) -> Error {
        Error::WrongBackend {
            win: self.id,
            target,
            direct: self.direct.is_direct(target),
        }
    }

    fn flush_name(rank: bool, local: bool) -> &'static str {
        match (rank, local) {
            (true, false) => "flush",
            (true, true) => "flush_local",
            (false, false) => "flush_all",
            (false, true) => "flush_local_all",
        }
    }
}

impl Engine {
    /// Creates a window whose `backends` name the ranks this process reaches
    /// directly (see [`crate::backend`]); [`Engine::create_window`] is this
    /// with every rank on active messages.
    pub fn create_window_with(
        &mut self,
        cfg: WindowConfig,
        backends: Backends,
    ) -> Result<WinId, Error> {
        if let Some(&r) = backends
            .direct_ranks()
            .iter()
            .find(|r| **r >= cfg.comm_size)
        {
            return Err(Error::RankOutOfRange {
                win: u32::try_from(self.windows.len()).unwrap_or(u32::MAX),
                rank: r,
                comm_size: cfg.comm_size,
            });
        }
        let id = self.create_window(cfg)?;
        if let Ok(c) = self.core_mut(id) {
            c.side.set_shared_lock(!backends.direct_ranks().is_empty());
            c.direct = DirectCore::new(backends, cfg.comm_size);
        }
        Ok(id)
    }

    #[inline]
    pub(super) fn core_mut(&mut self, win: WinId) -> Result<&mut WinCore, Error> {
        // A match, not `ok_or`: the error is built only when it is returned
        // (this is on every call's path).
        match self.windows.get_mut(win as usize) {
            Some(Some(w)) => Ok(&mut w.core),
            _ => Err(Error::NoSuchWindow(win)),
        }
    }

    /// Whether `target` is reached directly in `win`.
    pub fn is_direct(&self, win: WinId, target: Rank) -> bool {
        self.core(win).is_ok_and(|c| c.direct.is_direct(target))
    }

    /// The gate of an operation to the direct `target` (the driver then
    /// loads or stores the target's memory itself): [`Gate::Open`] if the
    /// access epoch allows it now; [`Gate::Wait`] if a lock, a post or a
    /// barrier must be waited for first (run [`Engine::poll_direct`]'s
    /// actions and ask again); an error (`MPI_ERR_RMA_SYNC` class) if no
    /// epoch allows it. A `lock_all` epoch takes its shared lock on the
    /// target here, lazily, as MPICH does.
    #[inline(always)]
    pub fn direct_access(&mut self, win: WinId, target: Rank) -> Result<Gate, Error> {
        // The common cases first, inlined into the driver's data path: an
        // epoch that already allows the access.
        if let Some(Some(w)) = self.windows.get_mut(win as usize) {
            let c = &mut w.core;
            if target < c.cfg.comm_size
                && c.direct
                    .open_now(c.access, c.lock_all_nocheck, &c.group, target)
            {
                c.counters.direct_ops += 1;
                return Ok(Gate::Open);
            }
        }
        self.direct_access_slow(win, target)
    }

    fn direct_access_slow(&mut self, win: WinId, target: Rank) -> Result<Gate, Error> {
        use AccessState::*;
        let c = self.core_mut(win)?;
        c.check_rank(target)?;
        if !c.direct.is_direct(target) {
            return Err(c.wrong_backend(target));
        }
        let gate = match c.access {
            FenceGranted => Gate::Open,
            FenceIssued => Gate::Wait,
            PerTarget => match c.direct.lock_of(target) {
                Some(i) if c.direct.locks[i].granted => Gate::Open,
                Some(_) => Gate::Wait,
                None if c.lock_epoch_count == 0 => {
                    return Err(Error::NoEpoch {
                        win: c.id,
                        state: c.access,
                    })
                }
                None => return Err(Error::NotLocked { win: c.id, target }),
            },
            LockAllCalled | LockAllIssued | LockAllGranted => {
                if c.lock_all_nocheck {
                    Gate::Open
                } else {
                    match c.direct.lock_of(target) {
                        Some(i) if c.direct.locks[i].granted => Gate::Open,
                        Some(_) => Gate::Wait,
                        None => {
                            c.direct.locks.push(DirectLock {
                                rank: target,
                                mode: LockMode::Shared,
                                granted: false,
                            });
                            c.direct.out.push_back(DirectAction::Lock {
                                target,
                                exclusive: false,
                            });
                            Gate::Wait
                        }
                    }
                }
            }
            PscwGranted | PscwIssued => match c.group.binary_search(&target) {
                Err(_) => return Err(Error::NotInGroup { win: c.id, target }),
                Ok(i) if c.posted.get(i).copied().unwrap_or(false) || c.posts_missing == 0 => {
                    Gate::Open
                }
                Ok(_) => {
                    c.direct.request_post(target);
                    Gate::Wait
                }
            },
            Unset => {
                return Err(Error::NoEpoch {
                    win: c.id,
                    state: c.access,
                })
            }
        };
        if gate == Gate::Open {
            c.counters.direct_ops += 1;
        }
        Ok(gate)
    }

    /// Whether this origin's lock on the direct `target` is granted (`None`:
    /// it holds or asked for none).
    pub fn direct_lock(&self, win: WinId, target: Rank) -> Option<bool> {
        let c = self.core(win).ok()?;
        c.direct.lock_of(target).map(|i| c.direct.locks[i].granted)
    }

    /// This process's own lock of `win` in shared memory, as held for
    /// active-message origins (always [`crate::TargetLock::Free`] without
    /// direct ranks).
    pub fn target_lock(&self, win: WinId) -> Result<crate::TargetLock, Error> {
        Ok(self.core(win)?.side.target_lock)
    }

    /// Whether any action waits in [`Engine::poll_action`] (cheaper than
    /// polling when the answer is no).
    #[inline]
    pub fn has_actions(&self) -> bool {
        !self.out.is_empty() || self.cursors > 0
    }

    /// Whether a call on `win` is in progress (as [`Engine::blocked`], but
    /// cheaper).
    #[inline]
    pub fn is_blocked(&self, win: WinId) -> bool {
        self.windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.core.blocked.is_some())
    }

    /// Whether `win` has neither a call in progress nor steps waiting in
    /// [`Engine::poll_direct`] (as `!is_blocked && !has_direct`, one
    /// look-up).
    #[inline]
    pub fn is_idle(&self, win: WinId) -> bool {
        self.windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .is_some_and(|w| w.core.blocked.is_none() && w.core.direct.out.is_empty())
    }

    /// Whether `win` has steps waiting in [`Engine::poll_direct`].
    #[inline]
    pub fn has_direct(&self, win: WinId) -> bool {
        self.windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .is_some_and(|w| !w.core.direct.out.is_empty())
    }

    /// The next shared-memory step the direct backend must take for `win`.
    #[inline]
    pub fn poll_direct(&mut self, win: WinId) -> Option<DirectAction> {
        self.windows
            .get_mut(win as usize)?
            .as_mut()?
            .core
            .direct
            .out
            .pop_front()
    }

    /// The direct backend holds the lock on `target` that
    /// [`DirectAction::Lock`] asked for.
    pub fn handle_direct_lock_granted(&mut self, win: WinId, target: Rank) -> Result<(), Error> {
        let c = self.core_mut(win)?;
        match c.direct.lock_of(target) {
            Some(i) if !c.direct.locks[i].granted => {
                c.direct.locks[i].granted = true;
                c.counters.direct_locks += 1;
            }
            _ => {
                c.counters.stray_packets += 1;
                return Ok(());
            }
        }
        if c.blocked.is_some() {
            self.ctx(win)?.progress();
        }
        Ok(())
    }

    /// The direct backend saw `from`'s PSCW post (asked for by
    /// [`DirectAction::AwaitPost`]).
    pub fn handle_post(&mut self, win: WinId, from: Rank) -> Result<(), Error> {
        let c = self.core_mut(win)?;
        c.check_rank(from)?;
        c.direct.post_requested.retain(|r| *r != from);
        if !(c.access == AccessState::PscwIssued && c.mark_posted(from)) {
            c.early_posts.push(from);
        }
        if c.access == AccessState::PscwIssued && c.posts_missing == 0 {
            c.access = AccessState::PscwGranted;
        }
        if c.blocked.is_some() || !c.active.is_empty() {
            self.ctx(win)?.progress();
        }
        Ok(())
    }

    /// The direct backend saw `from`'s PSCW complete (asked for by
    /// [`DirectAction::AwaitComplete`]).
    pub fn handle_complete(&mut self, win: WinId, from: Rank) -> Result<(), Error> {
        let c = self.core_mut(win)?;
        c.check_rank(from)?;
        match c.direct.completes.iter().position(|(r, _)| *r == from) {
            Some(i) => {
                c.direct.completes.swap_remove(i);
                c.side.at_completion_counter -= 1;
            }
            None => {
                c.counters.stray_packets += 1;
                return Ok(());
            }
        }
        if matches!(c.blocked, Some(Blocked::Wait)) && c.direct.all && c.active.is_empty() {
            // The short path of a pending `wait` (what progress would do).
            if c.side.at_completion_counter <= 0 {
                c.exposure = ExposureState::None;
                c.blocked = None;
                self.out.push_back(Action::Completed {
                    win,
                    call: Call::Wait,
                });
            }
            return Ok(());
        }
        if c.blocked.is_some() {
            self.ctx(win)?.progress();
        }
        Ok(())
    }

    /// The driver holds this process's own window lock (in shared memory) in
    /// mode `exclusive`, as an [`Action::TargetLock`] asked: lock requests
    /// of active-message origins waiting for it are granted now (queued
    /// operations are applied to `mem`). The mode is the one the driver
    /// entered: an exclusive request replaced by a shared one may still be
    /// granted before the driver saw the replacement, and is then taken as
    /// granted (the driver ignores a `TargetLock` that arrives while it
    /// holds the lock).
    pub fn handle_target_lock_granted<M: WindowMemory + ?Sized>(
        &mut self,
        win: WinId,
        exclusive: bool,
        mem: &mut M,
    ) -> Result<(), Error> {
        let mut c = self.ctx(win)?;
        let size = c.w.cfg.size;
        let mut view = MemView { win, size, mem };
        c.w.side
            .target_lock_granted(exclusive, &mut view, &mut c.w.counters, c.out);
        c.progress();
        self.reap_freed();
        Ok(())
    }

    /// `lock` of a direct target: no message, the driver takes the lock
    /// ([`DirectAction::Lock`]). `None` if `rank` is not direct.
    #[inline]
    pub(super) fn lock_direct(
        &mut self,
        win: WinId,
        exclusive: bool,
        rank: Rank,
        assert: u32,
    ) -> Result<Option<CallStatus>, Error> {
        use AccessState::*;
        let c = self.core_mut(win)?;
        if rank >= c.cfg.comm_size || !c.direct.is_direct(rank) {
            return Ok(None);
        }
        if let Some(b) = &c.blocked {
            return Err(Error::CallInProgress {
                win,
                call: b.call().name(),
            });
        }
        if !matches!(c.access, Unset | FenceIssued | FenceGranted | PerTarget) {
            return Err(c.wrong("lock"));
        }
        if c.access == PerTarget && c.direct.lock_of(rank).is_some() {
            return Err(Error::AlreadyLocked { win, target: rank });
        }
        if c.access != PerTarget {
            c.lock_evictions = 0;
        }
        c.access = PerTarget;
        c.lock_epoch_count += 1;
        let nocheck = assert & assert::NOCHECK != 0;
        c.direct.locks.push(DirectLock {
            rank,
            mode: if nocheck {
                LockMode::NoCheck
            } else if exclusive {
                LockMode::Exclusive
            } else {
                LockMode::Shared
            },
            granted: nocheck,
        });
        if !nocheck {
            c.direct.out.push_back(DirectAction::Lock {
                target: rank,
                exclusive,
            });
        }
        Ok(Some(CallStatus::Done))
    }

    /// `unlock` of a direct target: every operation to it is already
    /// complete, so the lock is released at once ([`DirectAction::Unlock`]).
    #[inline]
    pub(super) fn unlock_direct(
        &mut self,
        win: WinId,
        rank: Rank,
    ) -> Result<Option<CallStatus>, Error> {
        let c = self.core_mut(win)?;
        if rank >= c.cfg.comm_size || !c.direct.is_direct(rank) {
            return Ok(None);
        }
        if let Some(b) = &c.blocked {
            return Err(Error::CallInProgress {
                win,
                call: b.call().name(),
            });
        }
        if c.access != AccessState::PerTarget {
            return Err(c.wrong("unlock"));
        }
        let Some(i) = c.direct.lock_of(rank) else {
            return Err(Error::NotLocked { win, target: rank });
        };
        let l = c.direct.locks[i];
        if !l.granted {
            return Err(Error::CallInProgress { win, call: "lock" });
        }
        c.direct.locks.swap_remove(i);
        if l.mode != LockMode::NoCheck {
            c.direct.out.push_back(DirectAction::Unlock {
                target: rank,
                exclusive: l.mode == LockMode::Exclusive,
            });
        }
        c.lock_epoch_count = c.lock_epoch_count.saturating_sub(1);
        if c.lock_epoch_count == 0 {
            c.access = AccessState::Unset;
        }
        Ok(Some(CallStatus::Done))
    }

    /// `flush*` to a direct target (or, `rank` `None`, of a window whose
    /// ranks are all direct): operations are complete when they return, so
    /// only the epoch is checked. `None` when the general algorithm runs.
    #[inline]
    pub(super) fn flush_direct(
        &mut self,
        win: WinId,
        rank: Option<Rank>,
        local: bool,
    ) -> Result<Option<CallStatus>, Error> {
        use AccessState::*;
        let c = self.core_mut(win)?;
        match rank {
            Some(r) if r >= c.cfg.comm_size || !c.direct.is_direct(r) => return Ok(None),
            None if !(c.direct.all && c.active.is_empty()) => return Ok(None),
            _ => {}
        }
        if !matches!(
            c.access,
            PerTarget | LockAllCalled | LockAllIssued | LockAllGranted
        ) {
            return Err(c.wrong(WinCore::flush_name(rank.is_some(), local)));
        }
        Ok(Some(CallStatus::Done))
    }

    /// `fence` of a window whose ranks are all direct and that has nothing
    /// in flight: the barrier is [`DirectAction::Barrier`] (queued). `None`
    /// when the general algorithm runs.
    #[inline]
    pub(super) fn fence_direct(
        &mut self,
        win: WinId,
        assert: u32,
    ) -> Result<Option<CallStatus>, Error> {
        Ok(match self.fence_lean(win, assert, None::<fn() -> bool>)? {
            DirectFence::General => None,
            DirectFence::Done => Some(CallStatus::Done),
            DirectFence::Barrier => {
                self.core_mut(win)?
                    .direct
                    .out
                    .push_back(DirectAction::Barrier);
                Some(CallStatus::Done)
            }
        })
    }

    /// `fence` of a window whose ranks are all direct and that has nothing
    /// in flight (no steps waiting in [`Engine::poll_direct`] either), for a
    /// driver that carries out the barrier itself, at once: `barrier` is
    /// called (only if a barrier is needed) to start it (arrive) and says
    /// whether it completed already (every rank arrived); see
    /// [`DirectFence`]. [`Engine::fence`] is this with the barrier queued
    /// as a [`DirectAction`]. Errors as [`Engine::fence`] (found before
    /// `barrier` is called).
    #[inline]
    pub fn fence_direct_now(
        &mut self,
        win: WinId,
        assert: u32,
        barrier: impl FnOnce() -> bool,
    ) -> Result<DirectFence, Error> {
        self.fence_lean(win, assert, Some(barrier))
    }

    /// The short path of `fence`. With `now`, only if no direct step is
    /// queued (they would have to go first), and `now` starts the barrier
    /// (if it completes at once, so does the fence).
    #[inline]
    fn fence_lean(
        &mut self,
        win: WinId,
        assert: u32,
        now: Option<impl FnOnce() -> bool>,
    ) -> Result<DirectFence, Error> {
        use AccessState::*;
        let c = self.core_mut(win)?;
        if !c.direct.all
            || !c.active.is_empty()
            || c.barriers_in_flight > 0
            || (now.is_some() && !c.direct.out.is_empty())
        {
            return Ok(DirectFence::General);
        }
        if let Some(b) = &c.blocked {
            return Err(Error::CallInProgress {
                win,
                call: b.call().name(),
            });
        }
        if !matches!(c.access, Unset | FenceIssued | FenceGranted) {
            return Err(c.wrong("fence"));
        }
        if c.exposure != ExposureState::None {
            return Err(c.wrong_exposure("fence"));
        }
        let both = assert::NOPRECEDE | assert::NOSUCCEED;
        if assert & both == both {
            c.access = Unset;
            return Ok(DirectFence::Done);
        }
        // Nothing to complete first (every operation is complete when it
        // returns): the barrier goes out now and the call is done, as a
        // `NOPRECEDE` fence is. Until the barrier completes the window is
        // not ready (the gate waits); then the epoch opens, or ends with
        // `NOSUCCEED`.
        let ends = assert & assert::NOSUCCEED != 0;
        if let Some(barrier) = now {
            if barrier() {
                // Every rank arrived already: the barrier is over.
                c.access = if ends { Unset } else { FenceGranted };
                return Ok(DirectFence::Done);
            }
        }
        c.barriers_in_flight += 1;
        c.direct.fence_ends_epoch = ends;
        c.access = FenceIssued;
        Ok(DirectFence::Barrier)
    }

    /// [`Engine::handle_barrier_complete`] of a window whose ranks are all
    /// direct, with nothing but a fence in progress; `false` when the
    /// general path runs.
    #[inline]
    pub(super) fn barrier_complete_direct(&mut self, win: WinId) -> Result<bool, Error> {
        let c = self.core_mut(win)?;
        // The common case first: the one barrier of a fence that returned.
        if c.barriers_in_flight == 1
            && c.access == AccessState::FenceIssued
            && c.blocked.is_none()
            && c.direct.all
            && c.active.is_empty()
        {
            c.barriers_in_flight = 0;
            c.access = if std::mem::take(&mut c.direct.fence_ends_epoch) {
                AccessState::Unset
            } else {
                AccessState::FenceGranted
            };
            return Ok(true);
        }
        if !c.direct.all
            || !c.active.is_empty()
            || !matches!(
                c.blocked,
                None | Some(Blocked::Fence {
                    phase: FencePhase::Barrier,
                    ..
                })
            )
        {
            return Ok(false);
        }
        c.barriers_in_flight = c.barriers_in_flight.saturating_sub(1);
        if c.barriers_in_flight > 0 {
            return Ok(true);
        }
        if c.access == AccessState::FenceIssued {
            c.access = if std::mem::take(&mut c.direct.fence_ends_epoch) {
                AccessState::Unset
            } else {
                AccessState::FenceGranted
            };
        }
        if let Some(Blocked::Fence { assert, .. }) = c.blocked {
            c.blocked = None;
            if assert & assert::NOSUCCEED != 0 {
                c.access = AccessState::Unset;
            }
            self.out.push_back(Action::Completed {
                win,
                call: Call::Fence,
            });
        }
        Ok(true)
    }

    /// The window's core if its ranks are all direct and nothing is in
    /// flight or in progress (no active-message target, no pending call):
    /// the state in which the PSCW calls have short paths.
    #[inline]
    fn lean_core(&mut self, win: WinId) -> Option<&mut WinCore> {
        lean(&mut self.windows, win)
    }

    /// `start` of a window whose ranks are all direct (see
    /// [`Engine::lean_core`]): the general body without the call machinery
    /// (there is nothing for progress to do). `None` when the general
    /// algorithm runs.
    #[inline]
    pub(super) fn start_direct(
        &mut self,
        win: WinId,
        group: &[Rank],
        assert: u32,
    ) -> Result<Option<CallStatus>, Error> {
        let Some(c) = self.lean_core(win) else {
            return Ok(None);
        };
        c.begin_start(group, assert)?;
        Ok(Some(CallStatus::Done))
    }

    /// `post` of a window whose ranks are all direct, `group` sorted
    /// without duplicates. `None` when the general algorithm runs.
    #[inline]
    pub(super) fn post_direct(
        &mut self,
        win: WinId,
        group: &[Rank],
        assert: u32,
    ) -> Result<Option<CallStatus>, Error> {
        if !super::is_set(group) {
            return Ok(None);
        }
        let Some(c) = lean(&mut self.windows, win) else {
            return Ok(None);
        };
        // Every rank is direct: no packet goes out.
        c.begin_post(group, assert, &mut self.out)?;
        Ok(Some(CallStatus::Done))
    }

    /// `complete` of a window whose ranks are all direct, every post seen:
    /// its operations completed when they returned, so the completes are
    /// signalled ([`DirectAction::Complete`]) and the epoch ends at once.
    /// `None` when the general algorithm runs.
    #[inline]
    pub(super) fn complete_direct(&mut self, win: WinId) -> Result<Option<CallStatus>, Error> {
        let Some(c) = self.lean_core(win) else {
            return Ok(None);
        };
        if c.access != AccessState::PscwGranted || c.outstanding_acks != 0 {
            return Ok(None);
        }
        for &rank in &c.group {
            c.direct
                .out
                .push_back(DirectAction::Complete { target: rank });
        }
        c.access = AccessState::Unset;
        c.group.clear();
        c.posted.clear();
        c.direct.post_requested.clear();
        Ok(Some(CallStatus::Done))
    }

    /// `wait` of a window whose ranks are all direct: done if every
    /// complete was seen; otherwise the completes are asked for
    /// ([`DirectAction::AwaitComplete`]) and the call is pending until
    /// [`Engine::handle_complete`] has seen the last. `None` when the
    /// general algorithm runs.
    #[inline]
    pub(super) fn wait_direct(&mut self, win: WinId) -> Result<Option<CallStatus>, Error> {
        let Some(c) = self.lean_core(win) else {
            return Ok(None);
        };
        if c.exposure != ExposureState::PscwExpo {
            return Err(c.wrong_exposure("wait"));
        }
        if c.side.at_completion_counter <= 0 {
            c.exposure = ExposureState::None;
            return Ok(Some(CallStatus::Done));
        }
        c.direct.request_completes();
        c.blocked = Some(Blocked::Wait);
        Ok(Some(CallStatus::Pending))
    }

    /// `unlock_all` of a window whose ranks are all direct, every lazy lock
    /// granted: released at once. `None` when the general algorithm runs.
    pub(super) fn unlock_all_direct(&mut self, win: WinId) -> Result<Option<CallStatus>, Error> {
        use AccessState::*;
        let c = self.core_mut(win)?;
        if !c.direct.all || !c.active.is_empty() || c.cursor.is_some() {
            return Ok(None);
        }
        if let Some(b) = &c.blocked {
            return Err(Error::CallInProgress {
                win,
                call: b.call().name(),
            });
        }
        if !matches!(c.access, LockAllCalled | LockAllIssued | LockAllGranted) {
            return Err(c.wrong("unlock_all"));
        }
        if !c.direct.all_granted() {
            return Ok(None);
        }
        c.direct.release_all();
        c.access = Unset;
        Ok(Some(CallStatus::Done))
    }
}

/// [`Engine::lean_core`] on the engine's windows.
#[inline]
fn lean(windows: &mut [Option<Box<Window>>], win: WinId) -> Option<&mut WinCore> {
    let c = &mut windows.get_mut(win as usize)?.as_mut()?.core;
    (c.direct.all && c.active.is_empty() && c.blocked.is_none()).then_some(c)
}

impl Ctx<'_> {
    /// Whether `rank` is reached directly.
    #[inline]
    pub(super) fn is_direct(&self, rank: Rank) -> bool {
        self.w.direct.is_direct(rank)
    }
}

/// The target-side view of one window's memory: bounds from the window's
/// size, accesses through the driver's [`WindowMemory`].
pub(crate) struct MemView<'a, M: ?Sized> {
    pub(crate) win: WinId,
    pub(crate) size: u64,
    pub(crate) mem: &'a mut M,
}

impl<M: WindowMemory + ?Sized> MemView<'_, M> {
    /// `f` on `[disp, disp + len)` if it lies inside the window.
    pub(crate) fn with_range(
        &mut self,
        disp: u64,
        len: usize,
        access: crate::Access,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let inside = disp
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.size);
        inside && self.mem.with_range(self.win, disp, len, access, f)
    }
}
