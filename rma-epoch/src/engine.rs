//! The engine: windows, their origin-side operation tables, and the algorithms
//! for every synchronization mode.

use std::collections::VecDeque;

use tm_proto::rma::{AccOp, ElemType, RmaFlags, RmaHeader, RmaKind, RmaPacket};
use tracing::{debug, info};

use crate::config::{GlobalConfig, WindowConfig};
use crate::pool::{ElemRef, PoolStats, Pools, Slab};
use crate::target::{LockHolder, TargetSide};
mod direct;
mod inspect;
mod ops;
mod origin;

use direct::DirectCore;
pub(crate) use direct::MemView;

use crate::{
    acc, emit, Action, Call, CallStatus, Counters, Error, OpToken, Rank, WinId, NO_OP_ID,
    PROC_NULL, WIN_LOCK_ID,
};

/// `MPI_MODE_*` assertion bits, as passed to `fence`, `start`, `post`, `lock`
/// and `lock_all`.
pub mod assert {
    /// `MPI_MODE_NOCHECK`: no conflicting lock / the matching post already
    /// happened.
    pub const NOCHECK: u32 = 1;
    /// `MPI_MODE_NOSTORE` (accepted, unused).
    pub const NOSTORE: u32 = 2;
    /// `MPI_MODE_NOPUT` (accepted, unused).
    pub const NOPUT: u32 = 4;
    /// `MPI_MODE_NOPRECEDE`: the fence closes no epoch.
    pub const NOPRECEDE: u32 = 8;
    /// `MPI_MODE_NOSUCCEED`: the fence opens no epoch.
    pub const NOSUCCEED: u32 = 16;
}

/// The window's access state: the design's nine window states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessState {
    /// `MPIDI_EPOCH_UNSET`: no access epoch.
    Unset,
    /// A fence barrier is in flight; ops are queued until it completes.
    FenceIssued,
    /// Inside a fence epoch.
    FenceGranted,
    /// `start` called; waiting for the targets' posts.
    PscwIssued,
    /// Every target in the start group has posted.
    PscwGranted,
    /// `lock_all` called: per-target protocol, targets locked lazily.
    LockAllCalled,
    /// Window protocol: locks sent to every rank, waiting for the grants.
    LockAllIssued,
    /// Window protocol: every rank is locked (or `MODE_NOCHECK`).
    LockAllGranted,
    /// One or more `lock` epochs (per-target states below).
    PerTarget,
}

/// The exposure state (MPICH's `PSCW_EXPO`, which the design page omits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExposureState {
    /// No PSCW exposure epoch.
    None,
    /// Between `post` and a successful `wait`/`test`.
    PscwExpo,
}

/// Per-target state: the design's three lock states, plus `Active` for
/// fence/PSCW targets (MPICH's `MPIDI_RMA_NONE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TargetState {
    /// A fence or PSCW target: no lock involved.
    #[default]
    Active,
    /// `lock` called, no LOCK sent yet.
    LockCalled,
    /// LOCK sent (alone or piggybacked), not granted yet.
    LockIssued,
    /// Lock held (or `MODE_NOCHECK`).
    LockGranted,
}

/// The sync flag lattice `NONE < FLUSH_LOCAL < FLUSH < UNLOCK` (only raised).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
enum SyncFlag {
    #[default]
    None,
    FlushLocal,
    Flush,
    Unlock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum OpStatus {
    #[default]
    Pending,
    /// Sent with a piggybacked LOCK; kept until the lock answer, since it may
    /// have to be re-sent.
    AwaitLock,
    /// A read waiting for its response.
    AwaitResponse,
}

/// An operation element.
#[derive(Debug)]
struct OpElem {
    kind: RmaKind,
    target: Rank,
    disp: u64,
    len: u32,
    acc_op: AccOp,
    elem: ElemType,
    /// Origin data (CAS: origin value then compare value).
    data: Vec<u8>,
    token: u64,
    status: OpStatus,
    sent_flags: RmaFlags,
}

impl Default for OpElem {
    fn default() -> Self {
        OpElem {
            kind: RmaKind::Put,
            target: 0,
            disp: 0,
            len: 0,
            acc_op: AccOp::Replace,
            elem: ElemType::Byte,
            data: Vec::new(),
            token: 0,
            status: OpStatus::Pending,
            sent_flags: RmaFlags::NONE,
        }
    }
}

/// A target element.
#[derive(Debug, Default)]
struct TargetElem {
    rank: Rank,
    /// Unique per window; echoed by ACKs as `sync_id`.
    serial: u32,
    state: TargetState,
    exclusive: bool,
    nocheck: bool,
    /// This element runs its own lock (LOCK/per-target LOCK_ALL protocol); a
    /// window-protocol element does not.
    per_target_lock: bool,
    pending: VecDeque<ElemRef>,
    issued: Vec<ElemRef>,
    sync: SyncFlag,
    acks: u32,
    flush_not_issued: u32,
    win_complete: bool,
    unlock_sent: bool,
    evicting: bool,
    /// Issue the pending ops now ([`Engine::issue_now`]), without waiting
    /// for a synchronization or the batching threshold.
    urgent: bool,
}

/// A user op waiting to enter the op table.
#[derive(Debug, Clone)]
struct NewOp {
    kind: RmaKind,
    target: Rank,
    disp: u64,
    len: u32,
    acc_op: AccOp,
    elem: ElemType,
    data: Vec<u8>,
    token: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FencePhase {
    WaitPrevious,
    Flush,
    Barrier,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnlockAllPhase {
    WaitGranted,
    Drain,
    Cursor,
}

#[derive(Debug, Clone)]
enum Blocked {
    Fence {
        assert: u32,
        phase: FencePhase,
    },
    Complete {
        armed: bool,
    },
    Wait,
    Lock {
        rank: Rank,
        exclusive: bool,
        nocheck: bool,
    },
    Unlock {
        rank: Rank,
        armed: bool,
    },
    UnlockAll {
        phase: UnlockAllPhase,
    },
    Flush {
        rank: Rank,
        local: bool,
        armed: bool,
    },
    FlushAll {
        local: bool,
        armed: bool,
    },
    PostOp {
        op: Box<NewOp>,
    },
    Free,
}

impl Blocked {
    fn call(&self) -> Call {
        match self {
            Blocked::Fence { .. } => Call::Fence,
            Blocked::Complete { .. } => Call::Complete,
            Blocked::Wait => Call::Wait,
            Blocked::Lock { .. } => Call::Lock,
            Blocked::Unlock { .. } => Call::Unlock,
            Blocked::UnlockAll { .. } => Call::UnlockAll,
            Blocked::Flush { local: false, .. } => Call::Flush,
            Blocked::Flush { local: true, .. } => Call::FlushLocal,
            Blocked::FlushAll { local: false, .. } => Call::FlushAll,
            Blocked::FlushAll { local: true, .. } => Call::FlushLocalAll,
            Blocked::PostOp { .. } => Call::Op,
            Blocked::Free => Call::Free,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CursorKind {
    Lock,
    Unlock,
}

/// A lazy broadcast over every rank (window-protocol LOCK / UNLOCK), emitted
/// one packet per `poll_action` so that no O(P) queue is ever built.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    kind: CursorKind,
    next: u32,
}

/// Window bookkeeping (everything but the element slabs).
#[derive(Debug)]
struct WinCore {
    id: WinId,
    cfg: WindowConfig,
    access: AccessState,
    exposure: ExposureState,
    slots: Vec<Vec<ElemRef>>,
    /// Every target element, in creation order (ISSUE_OPS_WIN walks this, so
    /// progress costs O(active targets), never O(slots) or O(P)).
    active: Vec<ElemRef>,
    side: TargetSide,
    counters: Counters,
    barriers_in_flight: u32,
    lock_epoch_count: u32,
    /// Target elements of lock epochs freed by RESTORE since the window
    /// entered PER_TARGET; while zero, a missing element means "not locked".
    lock_evictions: u64,
    lock_all_nocheck: bool,
    outstanding_locks: u64,
    /// Window-level RMA_DONE_ACKs still expected (targets freed early).
    outstanding_acks: u64,
    cursor: Option<Cursor>,
    group: Vec<Rank>,
    posted: Vec<bool>,
    posts_missing: usize,
    early_posts: Vec<Rank>,
    blocked: Option<Blocked>,
    in_call: bool,
    freed: bool,
    next_serial: u32,
    next_token: u64,
    /// The direct targets' state (see `direct.rs`).
    direct: DirectCore,
}

#[derive(Debug)]
struct Window {
    core: WinCore,
    ops: Slab<OpElem>,
    targets: Slab<TargetElem>,
}

/// Where target-side operations read and write: the caller's window memory.
pub trait WindowMemory {
    /// This process's memory of window `win`, or `None` if it has none (every
    /// op is then out of bounds, unless [`WindowMemory::with_range`] is
    /// provided).
    fn window_mut(&mut self, win: WinId) -> Option<&mut [u8]>;

    /// Runs `f` on the bytes `[disp, disp + len)` of window `win` (inside the
    /// window's size, checked by the engine) and returns whether they exist.
    /// The default takes them from [`WindowMemory::window_mut`]. A driver
    /// whose memory is not one slice of its own (shared memory reached
    /// through a mapping) implements this instead: copy in, run `f`, copy
    /// back what `access` may have changed, and make
    /// [`Access::ReadModifyWrite`] atomic with respect to the direct
    /// origins' accumulates.
    ///
    /// [`Access::ReadModifyWrite`]: crate::Access::ReadModifyWrite
    fn with_range(
        &mut self,
        win: WinId,
        disp: u64,
        len: usize,
        access: crate::Access,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let _ = access;
        let Some(m) = self.window_mut(win) else {
            return false;
        };
        let range = usize::try_from(disp)
            .ok()
            .and_then(|d| Some(d..d.checked_add(len)?));
        match range.and_then(|r| m.get_mut(r)) {
            Some(m) => {
                f(m);
                true
            }
            None => false,
        }
    }
}

impl WindowMemory for [u8] {
    fn window_mut(&mut self, _win: WinId) -> Option<&mut [u8]> {
        Some(self)
    }
}

impl WindowMemory for Vec<Vec<u8>> {
    fn window_mut(&mut self, win: WinId) -> Option<&mut [u8]> {
        self.get_mut(win as usize).map(|v| v.as_mut_slice())
    }
}

/// All RMA state of one process: the global element pools and its windows.
///
/// Methods follow quinn's taxonomy: user calls (`fence`, `put`, `lock`, ...)
/// return at once with [`CallStatus::Done`] or [`CallStatus::Pending`];
/// `handle_*` feed events in (packets, barrier completions); `poll_action`
/// takes actions out (packets to send, barriers to start, results, completed
/// calls). A window with a pending call refuses other user calls with
/// [`Error::CallInProgress`] until an [`Action::Completed`] for it is polled.
#[derive(Debug)]
pub struct Engine {
    global_ops: Slab<OpElem>,
    global_targets: Slab<TargetElem>,
    /// Indexed by window id; a freed window leaves a `None` (a pointer's
    /// worth: ids are not reused, so that packets of a freed window can
    /// never reach a new one).
    windows: Vec<Option<Box<Window>>>,
    out: VecDeque<Action>,
    /// Windows with a lazy broadcast (window-protocol LOCK/UNLOCK) in
    /// progress: `poll_action` visits windows only when there is one.
    cursors: usize,
    /// A window's Free completed and it waits to be reaped.
    freed_pending: bool,
}

struct Ctx<'a> {
    w: &'a mut WinCore,
    ops: Pools<'a, OpElem>,
    tg: Pools<'a, TargetElem>,
    out: &'a mut VecDeque<Action>,
    /// The engine's count of windows with a lazy broadcast in progress.
    cursors: &'a mut usize,
    /// Set when the window's Free call completes (the engine reaps it).
    freed: &'a mut bool,
}

/// The result of posting an RMA operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Posted {
    /// Names the [`Action::Result`] that carries a read's data.
    pub token: OpToken,
    /// `Pending` when the op table was full and resources are being
    /// reclaimed: drive progress until [`Action::Completed`] with [`Call::Op`].
    pub status: CallStatus,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(GlobalConfig::default())
    }
}

impl Engine {
    /// An engine with global pools of the given sizes.
    pub fn new(cfg: GlobalConfig) -> Self {
        Engine {
            global_ops: Slab::new(cfg.op_global_pool),
            global_targets: Slab::new(cfg.target_global_pool),
            windows: Vec::new(),
            out: VecDeque::new(),
            cursors: 0,
            freed_pending: false,
        }
    }

    /// Creates a window (collective in MPI: every process creates its windows
    /// in the same order, so ids agree).
    pub fn create_window(&mut self, cfg: WindowConfig) -> Result<WinId, Error> {
        cfg.validate()?;
        let id = u32::try_from(self.windows.len()).map_err(|_| Error::Config {
            name: "windows",
            value: self.windows.len().to_string(),
            reason: "too many windows",
        })?;
        let nslots = cfg.slots.min(cfg.comm_size as usize).max(1);
        let target_cap = cfg.target_win_pool.min(cfg.comm_size as usize).max(1);
        let core = WinCore {
            id,
            cfg,
            access: AccessState::Unset,
            exposure: ExposureState::None,
            slots: (0..nslots).map(|_| Vec::new()).collect(),
            active: Vec::new(),
            side: TargetSide::new(id, cfg.lock_entries, cfg.lock_data_bytes),
            counters: Counters::default(),
            barriers_in_flight: 0,
            lock_epoch_count: 0,
            lock_evictions: 0,
            lock_all_nocheck: false,
            outstanding_locks: 0,
            outstanding_acks: 0,
            cursor: None,
            group: Vec::new(),
            posted: Vec::new(),
            posts_missing: 0,
            early_posts: Vec::new(),
            blocked: None,
            in_call: false,
            freed: false,
            next_serial: 1,
            next_token: 1,
            direct: DirectCore::default(),
        };
        info!(
            win = id,
            comm_size = cfg.comm_size,
            slots = nslots,
            "RMA window created"
        );
        self.windows.push(Some(Box::new(Window {
            core,
            ops: Slab::new(cfg.op_win_pool),
            targets: Slab::new(target_cap),
        })));
        Ok(id)
    }

    fn ctx(&mut self, win: WinId) -> Result<Ctx<'_>, Error> {
        let Some(Some(w)) = self.windows.get_mut(win as usize) else {
            return Err(Error::NoSuchWindow(win));
        };
        Ok(Ctx {
            w: &mut w.core,
            ops: Pools {
                local: &mut w.ops,
                global: &mut self.global_ops,
            },
            tg: Pools {
                local: &mut w.targets,
                global: &mut self.global_targets,
            },
            out: &mut self.out,
            cursors: &mut self.cursors,
            freed: &mut self.freed_pending,
        })
    }

    fn core(&self, win: WinId) -> Result<&WinCore, Error> {
        match self.windows.get(win as usize) {
            Some(Some(w)) => Ok(&w.core),
            _ => Err(Error::NoSuchWindow(win)),
        }
    }

    /// Starts a user call that may block: checks nothing is in progress, runs
    /// `f`, then progress; returns `Done` if the call finished already.
    fn call(
        &mut self,
        win: WinId,
        f: impl FnOnce(&mut Ctx<'_>) -> Result<Option<Blocked>, Error>,
    ) -> Result<CallStatus, Error> {
        let mut c = self.ctx(win)?;
        if let Some(b) = &c.w.blocked {
            return Err(Error::CallInProgress {
                win,
                call: b.call().name(),
            });
        }
        let blocked = f(&mut c)?;
        c.w.blocked = blocked;
        c.w.in_call = true;
        c.progress();
        c.w.in_call = false;
        Ok(if c.w.blocked.is_some() {
            CallStatus::Pending
        } else {
            CallStatus::Done
        })
    }

    // ----- active target: fence -----

    /// `MPI_Win_fence(assert)`.
    #[inline]
    pub fn fence(&mut self, win: WinId, assert: u32) -> Result<CallStatus, Error> {
        if let Some(st) = self.fence_direct(win, assert)? {
            return Ok(st);
        }
        self.fence_general(win, assert)
    }

    fn fence_general(&mut self, win: WinId, assert: u32) -> Result<CallStatus, Error> {
        self.call(win, |c| {
            use AccessState::*;
            if !matches!(c.w.access, Unset | FenceIssued | FenceGranted) {
                return Err(c.w.wrong("fence"));
            }
            if c.w.exposure != ExposureState::None {
                return Err(Error::WrongExposure {
                    win: c.w.id,
                    call: "fence",
                    exposed: true,
                });
            }
            if assert & assert::NOPRECEDE != 0 {
                // Nothing to complete: the previous barrier (if any) is left
                // to finish on its own.
                if assert & assert::NOSUCCEED != 0 {
                    c.w.access = Unset;
                } else {
                    c.w.start_barrier(c.out);
                    c.w.access = FenceIssued;
                }
                return Ok(None);
            }
            Ok(Some(Blocked::Fence {
                assert,
                phase: FencePhase::WaitPrevious,
            }))
        })
    }

    /// The collective layer reports that the barrier requested by
    /// [`Action::Barrier`] for `win` completed.
    #[inline]
    pub fn handle_barrier_complete(&mut self, win: WinId) -> Result<(), Error> {
        if self.barrier_complete_direct(win)? {
            return Ok(());
        }
        self.barrier_complete_general(win)
    }

    fn barrier_complete_general(&mut self, win: WinId) -> Result<(), Error> {
        let mut c = self.ctx(win)?;
        c.w.barriers_in_flight = c.w.barriers_in_flight.saturating_sub(1);
        if c.w.barriers_in_flight == 0 && c.w.access == AccessState::FenceIssued {
            c.w.access = if std::mem::take(&mut c.w.direct.fence_ends_epoch) {
                AccessState::Unset
            } else {
                AccessState::FenceGranted
            };
        }
        c.progress();
        self.reap_freed();
        Ok(())
    }

    // ----- active target: PSCW -----

    /// `MPI_Win_start(group, assert)`: opens an access epoch to `group`.
    #[inline]
    pub fn start(&mut self, win: WinId, group: &[Rank], assert: u32) -> Result<CallStatus, Error> {
        if let Some(st) = self.start_direct(win, group, assert)? {
            return Ok(st);
        }
        self.call(win, |c| c.w.begin_start(group, assert).map(|()| None))
    }

    /// `MPI_Win_complete`: ends the PSCW access epoch.
    #[inline]
    pub fn complete(&mut self, win: WinId) -> Result<CallStatus, Error> {
        if let Some(st) = self.complete_direct(win)? {
            return Ok(st);
        }
        self.call(win, |c| {
            if !matches!(
                c.w.access,
                AccessState::PscwIssued | AccessState::PscwGranted
            ) {
                return Err(c.w.wrong("complete"));
            }
            Ok(Some(Blocked::Complete { armed: false }))
        })
    }

    /// `MPI_Win_post(group, assert)`: exposes this window to `group`.
    #[inline]
    pub fn post(&mut self, win: WinId, group: &[Rank], assert: u32) -> Result<CallStatus, Error> {
        if let Some(st) = self.post_direct(win, group, assert)? {
            return Ok(st);
        }
        self.call(win, |c| {
            if is_set(group) {
                c.w.begin_post(group, assert, c.out)?;
            } else {
                let mut g = group.to_vec();
                g.sort_unstable();
                g.dedup();
                c.w.begin_post(&g, assert, c.out)?;
            }
            Ok(None)
        })
    }

    /// `MPI_Win_wait`: ends the exposure epoch once every origin completed.
    #[inline]
    pub fn wait(&mut self, win: WinId) -> Result<CallStatus, Error> {
        if let Some(st) = self.wait_direct(win)? {
            return Ok(st);
        }
        self.call(win, |c| {
            if c.w.exposure != ExposureState::PscwExpo {
                return Err(c.w.wrong_exposure("wait"));
            }
            Ok(Some(Blocked::Wait))
        })
    }

    /// `MPI_Win_test`: `true` (and the exposure epoch ends) if `wait` would
    /// return now.
    pub fn test(&mut self, win: WinId) -> Result<bool, Error> {
        let c = self.ctx(win)?;
        if c.w.exposure != ExposureState::PscwExpo {
            return Err(c.w.wrong_exposure("test"));
        }
        if c.w.side.at_completion_counter <= 0 {
            c.w.exposure = ExposureState::None;
            Ok(true)
        } else {
            // Completes of direct origins are seen only when asked for.
            c.w.direct.request_completes();
            Ok(false)
        }
    }

    // ----- passive target -----

    /// `MPI_Win_lock(lock_type, rank, assert)`.
    #[inline]
    pub fn lock(
        &mut self,
        win: WinId,
        exclusive: bool,
        rank: Rank,
        assert: u32,
    ) -> Result<CallStatus, Error> {
        if let Some(st) = self.lock_direct(win, exclusive, rank, assert)? {
            return Ok(st);
        }
        self.lock_general(win, exclusive, rank, assert)
    }

    fn lock_general(
        &mut self,
        win: WinId,
        exclusive: bool,
        rank: Rank,
        assert: u32,
    ) -> Result<CallStatus, Error> {
        self.call(win, |c| {
            use AccessState::*;
            c.w.check_rank(rank)?;
            if !matches!(c.w.access, Unset | FenceIssued | FenceGranted | PerTarget) {
                return Err(c.w.wrong("lock"));
            }
            if c.w.access == PerTarget {
                if let Some(t) = c.find(rank) {
                    if c.tg.get(t).is_some_and(|t| t.per_target_lock) {
                        return Err(Error::AlreadyLocked {
                            win: c.w.id,
                            target: rank,
                        });
                    }
                }
            }
            if c.w.access != PerTarget {
                c.w.lock_evictions = 0;
            }
            c.w.access = PerTarget;
            c.w.lock_epoch_count += 1;
            Ok(Some(Blocked::Lock {
                rank,
                exclusive,
                nocheck: assert & assert::NOCHECK != 0,
            }))
        })
    }

    /// `MPI_Win_unlock(rank)`.
    #[inline]
    pub fn unlock(&mut self, win: WinId, rank: Rank) -> Result<CallStatus, Error> {
        if let Some(st) = self.unlock_direct(win, rank)? {
            return Ok(st);
        }
        self.unlock_general(win, rank)
    }

    fn unlock_general(&mut self, win: WinId, rank: Rank) -> Result<CallStatus, Error> {
        self.call(win, |c| {
            c.w.check_rank(rank)?;
            if c.w.access != AccessState::PerTarget {
                return Err(c.w.wrong("unlock"));
            }
            if c.w.lock_epoch_count == 0 || (c.find(rank).is_none() && c.w.lock_evictions == 0) {
                return Err(Error::NotLocked {
                    win: c.w.id,
                    target: rank,
                });
            }
            Ok(Some(Blocked::Unlock { rank, armed: false }))
        })
    }

    /// `MPI_Win_lock_all(assert)`: no message; targets are locked lazily.
    pub fn lock_all(&mut self, win: WinId, assert: u32) -> Result<CallStatus, Error> {
        self.call(win, |c| {
            use AccessState::*;
            if !matches!(c.w.access, Unset | FenceIssued | FenceGranted) {
                return Err(c.w.wrong("lock_all"));
            }
            c.w.lock_all_nocheck = assert & assert::NOCHECK != 0;
            c.w.access = if c.w.lock_all_nocheck {
                LockAllGranted
            } else {
                LockAllCalled
            };
            Ok(None)
        })
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&mut self, win: WinId) -> Result<CallStatus, Error> {
        if let Some(st) = self.unlock_all_direct(win)? {
            return Ok(st);
        }
        self.call(win, |c| {
            use AccessState::*;
            if !matches!(c.w.access, LockAllCalled | LockAllIssued | LockAllGranted) {
                return Err(c.w.wrong("unlock_all"));
            }
            Ok(Some(Blocked::UnlockAll {
                phase: UnlockAllPhase::WaitGranted,
            }))
        })
    }

    #[inline]
    fn flush_impl(
        &mut self,
        win: WinId,
        rank: Option<Rank>,
        local: bool,
    ) -> Result<CallStatus, Error> {
        if let Some(st) = self.flush_direct(win, rank, local)? {
            return Ok(st);
        }
        self.flush_general(win, rank, local)
    }

    fn flush_general(
        &mut self,
        win: WinId,
        rank: Option<Rank>,
        local: bool,
    ) -> Result<CallStatus, Error> {
        self.call(win, |c| {
            use AccessState::*;
            if let Some(r) = rank {
                c.w.check_rank(r)?;
            }
            if !matches!(
                c.w.access,
                PerTarget | LockAllCalled | LockAllIssued | LockAllGranted
            ) {
                return Err(c.w.wrong(match (rank.is_some(), local) {
                    (true, false) => "flush",
                    (true, true) => "flush_local",
                    (false, false) => "flush_all",
                    (false, true) => "flush_local_all",
                }));
            }
            Ok(Some(match rank {
                Some(rank) => Blocked::Flush {
                    rank,
                    local,
                    armed: false,
                },
                None => Blocked::FlushAll {
                    local,
                    armed: false,
                },
            }))
        })
    }

    /// Issues the operations queued for `rank` now (taking its lock if the
    /// epoch takes it lazily) instead of holding them for the closing
    /// synchronization or the batching threshold: what a request-based
    /// operation (`MPI_Rget`, `MPI_Rget_accumulate`) needs, whose wait must
    /// complete without a later synchronization call. Nothing to issue (or
    /// an unknown target) is no error.
    pub fn issue_now(&mut self, win: WinId, rank: Rank) -> Result<(), Error> {
        let mut c = self.ctx(win)?;
        if let Some(r) = c.find(rank) {
            if let Some(t) = c.tg.get_mut(r) {
                t.urgent = !t.pending.is_empty();
            }
            c.progress();
        }
        Ok(())
    }

    /// `MPI_Win_flush(rank)`: remote completion of every op to `rank`.
    #[inline]
    pub fn flush(&mut self, win: WinId, rank: Rank) -> Result<CallStatus, Error> {
        self.flush_impl(win, Some(rank), false)
    }

    /// `MPI_Win_flush_local(rank)`: local completion of every op to `rank`.
    pub fn flush_local(&mut self, win: WinId, rank: Rank) -> Result<CallStatus, Error> {
        self.flush_impl(win, Some(rank), true)
    }

    /// `MPI_Win_flush_all`.
    pub fn flush_all(&mut self, win: WinId) -> Result<CallStatus, Error> {
        self.flush_impl(win, None, false)
    }

    /// `MPI_Win_flush_local_all`.
    pub fn flush_local_all(&mut self, win: WinId) -> Result<CallStatus, Error> {
        self.flush_impl(win, None, true)
    }

    /// `MPI_Win_free`: waits until nobody holds or waits for this process's
    /// lock, every PSCW origin completed and no barrier is in flight, then
    /// forgets the window.
    pub fn free_window(&mut self, win: WinId) -> Result<CallStatus, Error> {
        let st = self.call(win, |c| {
            use AccessState::*;
            if !matches!(c.w.access, Unset | FenceIssued | FenceGranted)
                || c.w.exposure != ExposureState::None
            {
                return Err(Error::FreeInEpoch {
                    win: c.w.id,
                    state: c.w.access,
                });
            }
            Ok(Some(Blocked::Free))
        })?;
        self.reap_freed();
        Ok(st)
    }

    // ----- events and actions -----

    /// A packet arrived from `from`. Target-side packets read and write
    /// `mem`'s window memory.
    pub fn handle_packet<M: WindowMemory + ?Sized>(
        &mut self,
        from: Rank,
        bytes: &[u8],
        mem: &mut M,
    ) -> Result<(), Error> {
        let pkt = RmaPacket::decode(bytes).map_err(|source| Error::Packet { from, source })?;
        let h = pkt.header;
        let mut c = self.ctx(h.win)?;
        c.w.check_rank(from)?;
        match h.kind {
            k if k.is_op()
                || matches!(
                    k,
                    RmaKind::Lock | RmaKind::Unlock | RmaKind::Flush | RmaKind::DecrAtCounter
                ) =>
            {
                let mut view = MemView {
                    win: h.win,
                    size: c.w.cfg.size,
                    mem,
                };
                c.w.side
                    .handle(from, &h, pkt.payload, &mut view, &mut c.w.counters, c.out);
            }
            _ => c.origin_packet(from, &h, pkt.payload),
        }
        c.progress();
        self.reap_freed();
        Ok(())
    }

    /// The next action, or `None` when there is nothing to do until an event
    /// arrives.
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.out.pop_front() {
            return Some(a);
        }
        // Lazy broadcasts (window protocol of LOCK_ALL).
        for i in 0..self.windows.len() {
            if self.cursors == 0 {
                break;
            }
            let has = self
                .windows
                .get(i)
                .and_then(Option::as_ref)
                .is_some_and(|w| w.core.cursor.is_some());
            if has {
                if let Ok(mut c) = self.ctx(i as WinId) {
                    c.cursor_step();
                    c.progress();
                }
                self.reap_freed();
                if let Some(a) = self.out.pop_front() {
                    return Some(a);
                }
            }
        }
        self.reap_freed();
        self.out.pop_front()
    }

    fn reap_freed(&mut self) {
        // A window whose Free call completed is removed here, once its
        // completion action was queued.
        if !std::mem::take(&mut self.freed_pending) {
            return;
        }
        for w in self.windows.iter_mut() {
            if w.as_ref().is_some_and(|w| w.core.freed) {
                *w = None;
            }
        }
    }
}

impl Call {
    /// The MPI-ish name of the call.
    pub fn name(self) -> &'static str {
        match self {
            Call::Fence => "fence",
            Call::Complete => "complete",
            Call::Wait => "wait",
            Call::Lock => "lock",
            Call::Unlock => "unlock",
            Call::UnlockAll => "unlock_all",
            Call::Flush => "flush",
            Call::FlushLocal => "flush_local",
            Call::FlushAll => "flush_all",
            Call::FlushLocalAll => "flush_local_all",
            Call::Op => "rma op",
            Call::Free => "free",
        }
    }
}

impl WinCore {
    fn wrong(&self, call: &'static str) -> Error {
        Error::WrongEpoch {
            win: self.id,
            call,
            state: self.access,
        }
    }

    fn wrong_exposure(&self, call: &'static str) -> Error {
        Error::WrongExposure {
            win: self.id,
            call,
            exposed: self.exposure != ExposureState::None,
        }
    }

    /// The body of `start`: the access epoch to `group` opens (granted if
    /// every post is in or `MODE_NOCHECK`; else the direct targets' posts
    /// are asked for).
    fn begin_start(&mut self, group: &[Rank], assert: u32) -> Result<(), Error> {
        use AccessState::*;
        if !matches!(self.access, Unset | FenceIssued | FenceGranted) {
            return Err(self.wrong("start"));
        }
        for &r in group {
            self.check_rank(r)?;
        }
        // The group and its post flags keep their buffers from epoch to
        // epoch.
        let g = &mut self.group;
        g.clear();
        g.extend_from_slice(group);
        if !is_set(g) {
            g.sort_unstable();
            g.dedup();
        }
        let n = g.len();
        self.posted.clear();
        self.posted.resize(n, false);
        self.direct.post_requested.clear();
        if assert & assert::NOCHECK != 0 {
            self.posts_missing = 0;
        } else {
            self.posts_missing = n;
            // Posts that arrived before start.
            let mut i = 0;
            while i < self.early_posts.len() {
                let r = self.early_posts[i];
                if self.mark_posted(r) {
                    self.early_posts.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        self.access = if self.posts_missing == 0 {
            PscwGranted
        } else {
            // Direct targets' posts are seen when asked for: ask now, as
            // MPICH waits for same-node posts inside start.
            for i in 0..self.group.len() {
                let (Some(&r), Some(false)) = (self.group.get(i), self.posted.get(i).copied())
                else {
                    continue;
                };
                if self.direct.is_direct(r) {
                    self.direct.request_post(r);
                }
            }
            PscwIssued
        };
        Ok(())
    }

    /// The body of `post` (`group` sorted, no duplicates): the exposure
    /// epoch opens and the posts go out (direct origins: a
    /// [`crate::DirectAction::Post`] each; others: a packet).
    fn begin_post(
        &mut self,
        group: &[Rank],
        assert: u32,
        out: &mut VecDeque<Action>,
    ) -> Result<(), Error> {
        if self.exposure != ExposureState::None {
            return Err(self.wrong_exposure("post"));
        }
        for &r in group {
            self.check_rank(r)?;
        }
        self.exposure = ExposureState::PscwExpo;
        self.side.at_completion_counter += group.len() as i64;
        let nocheck = assert & assert::NOCHECK != 0;
        for &r in group {
            if self.direct.is_direct(r) {
                // A direct origin always signals its complete; only the
                // post may be skipped.
                self.direct.completes.push((r, false));
                if !nocheck {
                    self.direct
                        .out
                        .push_back(crate::DirectAction::Post { origin: r });
                }
            } else if !nocheck {
                emit(out, r, RmaHeader::new(RmaKind::Post, self.id), &[]);
            }
        }
        Ok(())
    }

    fn check_rank(&self, rank: Rank) -> Result<(), Error> {
        if rank < self.cfg.comm_size {
            Ok(())
        } else {
            Err(Error::RankOutOfRange {
                win: self.id,
                rank,
                comm_size: self.cfg.comm_size,
            })
        }
    }

    /// Asks for a barrier over the window: through shared memory when every
    /// rank is direct, otherwise over the communicator.
    fn start_barrier(&mut self, out: &mut VecDeque<Action>) {
        self.barriers_in_flight += 1;
        if self.direct.all {
            self.direct.out.push_back(crate::DirectAction::Barrier);
        } else {
            out.push_back(Action::Barrier { win: self.id });
        }
    }

    /// Records a post from `r` if `r` is in the start group and had not
    /// posted yet.
    fn mark_posted(&mut self, r: Rank) -> bool {
        match self.group.binary_search(&r) {
            Ok(i) if !self.posted.get(i).copied().unwrap_or(true) => {
                if let Some(p) = self.posted.get_mut(i) {
                    *p = true;
                }
                self.posts_missing = self.posts_missing.saturating_sub(1);
                true
            }
            _ => false,
        }
    }

    fn window_ready(&self) -> bool {
        !matches!(
            self.access,
            AccessState::FenceIssued | AccessState::PscwIssued | AccessState::LockAllIssued
        )
    }
}

/// Whether `g` is sorted with no duplicates (a group as the engine keeps
/// it).
#[inline]
fn is_set(g: &[Rank]) -> bool {
    g.windows(2).all(|w| w[0] < w[1])
}
