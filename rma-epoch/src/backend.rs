//! Per-target backends: how an origin reaches a target's memory.
//!
//! A window's epochs (fence, PSCW, lock/lock_all, flush and their errors) are
//! this crate's state machine whatever the target. What differs per target is
//! the *backend* that carries the data and the synchronization:
//!
//! - **Active messages** (the default): operations become [`Action::Send`]
//!   packets, the target's engine applies them, and locks, flushes and PSCW
//!   travel as packets (`tm_proto::rma`). This is the path to any target a
//!   process cannot address directly (another node).
//! - **Direct**: the origin itself loads and stores the target's memory (a
//!   shared mapping, or single copy), so an operation is complete when its
//!   call returns. The engine only decides *whether* the access is allowed
//!   now ([`Engine::direct_access`] answers with a [`Gate`]) and asks the
//!   driver, through [`DirectAction`]s, for the shared-memory
//!   synchronization: take or release the target's lock, a barrier among
//!   the window's ranks, PSCW post and complete signals. The driver reports
//!   back with `handle_direct_lock_granted`, `handle_barrier_complete`,
//!   `handle_post` and `handle_complete`.
//!
//! A window may mix both: its [`Backends`] name the direct ranks. The
//! classification must be an equivalence (in practice: "on the same node"),
//! so it is symmetric and every rank of the window agrees whether *all*
//! pairs are direct (then the fence barrier is [`DirectAction::Barrier`],
//! otherwise [`Action::Barrier`]).
//!
//! A target reached by both kinds of origin has one lock. Direct origins take
//! it in shared memory; the target's engine takes the same lock on behalf of
//! its active-message origins ([`Action::TargetLock`],
//! [`Engine::handle_target_lock_granted`], [`Action::TargetUnlock`]) before
//! granting them, so the two kinds exclude each other as MPI requires.
//! Likewise target-side accumulates of a window with direct ranks are
//! [`Access::ReadModifyWrite`] accesses, which the driver makes atomic with
//! respect to the direct origins' accumulates.
//!
//! [`Action::Send`]: crate::Action::Send
//! [`Action::Barrier`]: crate::Action::Barrier
//! [`Action::TargetLock`]: crate::Action::TargetLock
//! [`Action::TargetUnlock`]: crate::Action::TargetUnlock
//! [`Engine::direct_access`]: crate::Engine::direct_access
//! [`Engine::handle_target_lock_granted`]: crate::Engine::handle_target_lock_granted
//! [`Access::ReadModifyWrite`]: crate::Access::ReadModifyWrite

use crate::Rank;

/// The ranks of a window that this process reaches through the direct
/// backend; every other rank takes active messages.
///
/// It holds the direct ranks only (the ranks of one node), never a table of
/// every rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backends {
    /// Sorted, without duplicates.
    direct: Vec<Rank>,
}

impl Backends {
    /// Every target by active messages.
    pub fn active_messages() -> Self {
        Backends::default()
    }

    /// These ranks direct, the others by active messages. The caller's own
    /// rank should be among them whenever any is (a process can always
    /// address its own memory).
    pub fn direct(ranks: impl IntoIterator<Item = Rank>) -> Self {
        let mut direct: Vec<Rank> = ranks.into_iter().collect();
        direct.sort_unstable();
        direct.dedup();
        Backends { direct }
    }

    /// Whether `rank` is reached directly.
    #[inline]
    pub fn is_direct(&self, rank: Rank) -> bool {
        self.direct.binary_search(&rank).is_ok()
    }

    /// The direct ranks, sorted.
    pub fn direct_ranks(&self) -> &[Rank] {
        &self.direct
    }
}

/// The engine's answer to a direct operation ([`crate::Engine::direct_access`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The epoch allows the access now: load or store the target's memory.
    Open,
    /// Not yet: run the window's [`DirectAction`]s (a lock to take, a post
    /// or a barrier to wait for, possibly requested by this very call) until
    /// they report their events, then ask again.
    Wait,
}

/// Shared-memory synchronization the engine asks of the driver for the
/// direct targets of one window ([`crate::Engine::poll_direct`]), in order.
///
/// The `Unlock`, `Post` and `Complete` steps are one-shot (execute once,
/// after a full memory barrier). The others are conditions: start them once
/// (take a lock ticket, arrive at the barrier) and poll until they hold,
/// then report the event named in each variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectAction {
    /// Take `target`'s lock (shared or exclusive); report
    /// [`crate::Engine::handle_direct_lock_granted`] once held. Readers
    /// first, as MPICH grants: a shared request may queue, an exclusive one
    /// enters only when the lock is idle and holds no place in the queue
    /// while it waits, so no shared request ever waits behind a waiting
    /// exclusive one (lock_all and nested shared epochs rely on it to be
    /// free of deadlock).
    Lock {
        /// The target.
        target: Rank,
        /// Exclusive (`MPI_LOCK_EXCLUSIVE`) or shared.
        exclusive: bool,
    },
    /// Release `target`'s lock (after a full memory barrier).
    Unlock {
        /// The target.
        target: Rank,
        /// How it was held.
        exclusive: bool,
    },
    /// A barrier over every rank of the window through shared memory (all
    /// of them are direct); report [`crate::Engine::handle_barrier_complete`].
    Barrier,
    /// PSCW `post`: tell `origin` that this rank exposes its window.
    Post {
        /// The origin.
        origin: Rank,
    },
    /// Wait until `target` posted; report [`crate::Engine::handle_post`].
    AwaitPost {
        /// The target.
        target: Rank,
    },
    /// PSCW `complete`: tell `target` that this origin's epoch is over
    /// (after a full memory barrier).
    Complete {
        /// The target.
        target: Rank,
    },
    /// Wait until `origin` completed; report
    /// [`crate::Engine::handle_complete`].
    AwaitComplete {
        /// The origin.
        origin: Rank,
    },
}

/// The answer of [`crate::Engine::fence_direct_now`]: the short path of
/// `fence` for a driver that carries out the barrier itself, at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectFence {
    /// The short path does not apply (a rank not direct, operations or a
    /// barrier in flight, steps queued): nothing changed, run
    /// [`crate::Engine::fence`].
    General,
    /// The fence is over: nothing to synchronize (`MODE_NOPRECEDE |
    /// MODE_NOSUCCEED`), or the barrier completed at once. The window is
    /// idle ([`crate::Engine::is_idle`]): the short path applies only
    /// with no call in progress and no steps queued.
    Done,
    /// The barrier ([`DirectAction::Barrier`], started by the driver, not
    /// queued for [`crate::Engine::poll_direct`]) did not complete at once:
    /// wait until it does, then report
    /// [`crate::Engine::handle_barrier_complete`]; until then the window is
    /// not ready (the gate answers [`Gate::Wait`]).
    Barrier,
}

/// What a target-side operation does to the window memory
/// ([`crate::WindowMemory::with_range`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only reads (get).
    Read,
    /// Overwrites every byte of the range (put).
    Write,
    /// Reads, combines and writes back (accumulate, get-accumulate,
    /// fetch-and-op, compare-and-swap): must be atomic with respect to every
    /// other read-modify-write of the same window.
    ReadModifyWrite,
}
