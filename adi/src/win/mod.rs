//! RMA windows (`MPI_Win`): one epoch machine, two backends per target.
//!
//! Every window's epochs (fence, PSCW, lock/lock_all, flush, and the
//! errors of their misuse) are the state machine of the device's one
//! `rma_epoch::Engine`. What differs per target is the *backend* that
//! carries the data and the synchronization:
//!
//! - **Direct** (ranks on this node, the default). The origin executes
//!   each operation itself and returns: [`Win::allocate`] places every
//!   rank's window in its symmetric heap of the node segment, so put and
//!   get are `memcpy` through the shared mapping; [`Win::create`] windows
//!   (and allocations larger than the heap, `TMX_SHMEM_HEAP_BYTES`) stay in
//!   private memory and are reached by CMA single copy. The engine only
//!   checks that the epoch allows the access (a gate per operation) and
//!   asks for the synchronization, which is atomics in a per-rank control
//!   block (`shmem_onesided::winsync`, loom-checked): a ticket
//!   reader-writer lock per target for `lock`/`unlock`, readers first
//!   (writers enter only when it is idle, as MPICH grants), and one for
//!   accumulates (FIFO, which makes them atomic per element), a counter barrier
//!   for `fence`, per-pair post/complete counters for PSCW; `flush*` and
//!   `sync` are a full memory barrier, since every direct operation is
//!   complete when its call returns. This is MPICH's direct execution on
//!   SHM windows and Open MPI `osc/sm`'s design. See `direct.rs`.
//! - **Active messages** (every other target). Operations become
//!   `tm_proto::rma` packets on the window's private communicator, applied
//!   by the target's engine inside its progress; locks, flushes and PSCW
//!   travel as packets too. `TMX_RMA_DIRECT=0` puts every target of every
//!   window on this backend (the engine path of earlier releases); remote
//!   targets take it through the inter-node transport. See `am.rs`.
//!
//! A window may have targets of both kinds ([`WinPath::Mixed`]). The lock
//! of a rank reached both ways is one lock: direct origins take it in
//! shared memory, and the rank's engine takes the same lock on behalf of
//! its active-message origins before granting them; read-modify-writes
//! that arrive by active messages hold the rank's accumulate lock too.
//! The fence barrier is the shared-memory counter barrier when every rank
//! is direct, otherwise a dissemination barrier of messages.
//!
//! The choice is collective: the direct backend needs every rank to be
//! able to take it (a control block fits in its heap, and CMA works if any
//! window memory is private); otherwise every target takes active messages.
//! `TMX_RMA_TEST_SPLIT=k` (a test switch, default off) puts rank `r` on
//! simulated node `r % k`: pairs on different simulated nodes use active
//! messages, so every window is mixed on one machine.
//!
//! # Misuse
//!
//! Ops outside an epoch, unlock without lock, ... are [`Error::Rma`]
//! (`MPI_ERR_RMA_SYNC`); a target outside the communicator is
//! [`Error::InvalidRank`]; an access past the end of the target's window
//! is [`Error::RmaRange`] (`MPI_ERR_RMA_RANGE`), checked at the origin
//! against the sizes exchanged at creation. A size that cannot be
//! allocated is [`Error::NoMem`] on every rank of the constructor. A
//! window dropped without [`Win::free`] prints a warning to stderr and
//! makes the other ranks' `free` fail ([`Error::WinAbandoned`]) instead of
//! waiting for it.

mod am;
mod create;
mod direct;
#[allow(unsafe_code)]
mod mem;
mod ops;
mod shared;
mod sync;

use crate::attr::ANY_TAG;
use crate::comm::Comm;
use crate::Error;
use rma_epoch::WinId;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub(crate) use am::{idle, progress, Rma};
pub use rma_epoch::assert;
pub use rma_epoch::{AccOp, ElemType};
pub use shared::{SharedRegion, SharedWin};

/// The kind of a passive-target lock (`MPI_LOCK_SHARED`,
/// `MPI_LOCK_EXCLUSIVE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    /// `MPI_LOCK_SHARED`.
    Shared,
    /// `MPI_LOCK_EXCLUSIVE`.
    Exclusive,
}

/// Whether same-node windows use the direct backend (`TMX_RMA_DIRECT`,
/// default on).
pub const ENV_DIRECT: &str = "TMX_RMA_DIRECT";

/// Whether the memory of [`Win::allocate`] and [`Win::create`] windows goes
/// in the symmetric heap when it fits (`TMX_RMA_HEAP_WINDOWS`, default on;
/// a created window's memory is copied in at creation and out at free).
/// Off, window memory stays private and same-node origins reach it by CMA
/// (shared windows always use the heap).
pub const ENV_HEAP_WINDOWS: &str = "TMX_RMA_HEAP_WINDOWS";

/// Test switch (`TMX_RMA_TEST_SPLIT=k`, default off): rank `r` of a window
/// sits on simulated node `r % k`, and pairs on different simulated nodes
/// use active messages even on one machine, so every window with `k > 1`
/// is [`WinPath::Mixed`]. Shared and dynamic windows ignore it (they are
/// direct by definition).
pub const ENV_TEST_SPLIT: &str = "TMX_RMA_TEST_SPLIT";

/// Which backends a window's targets take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WinPath {
    /// Every target direct: the origin loads and stores the target's memory
    /// itself (heap windows) or copies by CMA (private memory), and the
    /// synchronization is atomics in shared memory.
    Direct,
    /// Every target by active messages through the `rma_epoch` engine (the
    /// path remote targets take; forced for every window by
    /// `TMX_RMA_DIRECT=0`).
    Engine,
    /// Some targets direct, the others by active messages.
    Mixed,
}

/// Windows created on each path by this process.
static WINDOWS_DIRECT: AtomicU64 = AtomicU64::new(0);
static WINDOWS_ENGINE: AtomicU64 = AtomicU64::new(0);
static WINDOWS_MIXED: AtomicU64 = AtomicU64::new(0);

/// Process-wide RMA counters (printed at finalize with
/// `TMX_ADI_COUNTERS=1`): windows per path, and the direct backend's
/// operations, read-modify-writes (accumulate-like ops, each under the
/// target's accumulate lock), passive-target lock acquisitions, how many
/// of those had to wait, and fence barriers. The epoch machine's counters
/// are per window ([`Win::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RmaCounters {
    /// Windows whose targets are all direct.
    pub windows_direct: u64,
    /// Windows whose targets all take active messages.
    pub windows_engine: u64,
    /// Windows with targets of both kinds.
    pub windows_mixed: u64,
    /// Direct operations (put, get, accumulate-like).
    pub direct_ops: u64,
    /// Of those, read-modify-writes under an accumulate lock.
    pub direct_rmw: u64,
    /// Passive-target lock acquisitions on direct targets (including lazy
    /// lock_all ones).
    pub lock_acquires: u64,
    /// Acquisitions that found the lock held and waited.
    pub lock_waits: u64,
    /// Shared-memory fence barriers.
    pub fences: u64,
}

/// The process-wide RMA counters.
pub fn rma_counters() -> RmaCounters {
    let g = &direct::GLOBAL;
    RmaCounters {
        windows_direct: WINDOWS_DIRECT.load(Ordering::Relaxed),
        windows_engine: WINDOWS_ENGINE.load(Ordering::Relaxed),
        windows_mixed: WINDOWS_MIXED.load(Ordering::Relaxed),
        direct_ops: g.ops.load(Ordering::Relaxed),
        direct_rmw: g.rmw.load(Ordering::Relaxed),
        lock_acquires: g.locks.load(Ordering::Relaxed),
        lock_waits: g.lock_waits.load(Ordering::Relaxed),
        fences: g.fences.load(Ordering::Relaxed),
    }
}

impl std::fmt::Display for RmaCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "windows direct {}, engine {}, mixed {}; direct ops {} (read-modify-write {}), \
             lock acquires {} (waited {}), fences {}",
            self.windows_direct,
            self.windows_engine,
            self.windows_mixed,
            self.direct_ops,
            self.direct_rmw,
            self.lock_acquires,
            self.lock_waits,
            self.fences
        )
    }
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

fn env_switch(var: &'static str) -> Result<bool, Error> {
    match env(var).as_deref().map(str::trim) {
        None | Some("") | Some("1") | Some("on") | Some("true") | Some("yes") => Ok(true),
        Some("0") | Some("off") | Some("false") | Some("no") => Ok(false),
        Some(v) => Err(Error::Config {
            var,
            value: v.to_string(),
            reason: "expected 1/on or 0/off",
        }),
    }
}

/// `TMX_RMA_TEST_SPLIT`: the number of simulated nodes (1: off).
fn test_split() -> Result<u32, Error> {
    match env(ENV_TEST_SPLIT).as_deref().map(str::trim) {
        None | Some("") | Some("0") | Some("off") => Ok(1),
        Some(v) => match v.parse::<u32>() {
            Ok(k) if k >= 1 => Ok(k),
            _ => Err(Error::Config {
                var: ENV_TEST_SPLIT,
                value: v.to_string(),
                reason: "expected a number of simulated nodes (1 or more), or 0/off",
            }),
        },
    }
}

/// An RMA window (`MPI_Win`).
///
/// Created collectively by [`Win::create`] (memory given by the caller and
/// handed back by [`Win::free`]), [`Win::allocate`],
/// [`Win::create_dynamic`] or [`Win::allocate_shared`]. Displacements are
/// in bytes (a displacement unit of 1). All calls take `&self` and may come
/// from several threads at once (the RMA design's valid interleavings: op
/// and op, op and fence, op and flush, flush and flush). On a window with
/// active-message targets, synchronization calls run one at a time
/// (another thread's call waits for the one in progress).
#[derive(Debug)]
pub struct Win {
    comm: Comm,
    id: WinId,
    sizes: Arc<[u64]>,
    freed: bool,
    /// The direct backend, when the window has direct targets.
    direct: Option<Arc<direct::DirectWin>>,
    /// Every target is direct.
    all_direct: bool,
    /// Distinguishes this window's `free` messages from those of a dropped
    /// window whose context was reused.
    nonce: u32,
    /// Synchronization calls that may wait for active messages run one at
    /// a time per window (the engine's rule); another thread's call waits
    /// here for it instead of failing.
    calls: Mutex<()>,
}

impl Win {
    /// `MPI_Win_attach`: exposes `mem` through this dynamic window (which
    /// owns it until [`detach`](Win::detach) hands it back) and returns its
    /// address, the displacement origins use to reach its first byte (send
    /// it to them, as an MPI program sends `MPI_Get_address`'s result).
    /// Local (not collective).
    pub fn attach(&self, mem: Vec<u8>) -> Result<u64, Error> {
        match &self.direct {
            Some(d) if d.is_dynamic() => d.attach(mem::WinBuf::Owned(mem)),
            _ => Err(Error::InvalidArgument {
                what: "attach: not a dynamic window",
            }),
        }
    }

    /// `MPI_Win_attach` of memory the caller keeps: exposes the `len`
    /// bytes at `base` through this dynamic window; origins reach them at
    /// displacement `base as u64` (the address, which this returns). Local.
    /// [`detach`](Win::detach) of that address withdraws them (and
    /// returns an empty `Vec`).
    ///
    /// # Safety
    ///
    /// As for [`Win::create_raw`]: for `len > 0`, the memory is this
    /// process's, readable and writable, valid and not moved until it is
    /// detached (or the window freed), and the caller's accesses to it
    /// follow MPI's rules on conflicting accesses.
    // An unsafe fn for its contract only: its body has no unsafe code.
    #[allow(unsafe_code)]
    pub unsafe fn attach_raw(&self, base: *mut u8, len: usize) -> Result<u64, Error> {
        if base.is_null() {
            return Err(Error::InvalidArgument {
                what: "attach_raw: null base",
            });
        }
        let addr = base as usize;
        match &self.direct {
            Some(d) if d.is_dynamic() => d.attach(mem::WinBuf::Raw { addr, len }),
            _ => Err(Error::InvalidArgument {
                what: "attach: not a dynamic window",
            }),
        }
    }

    /// `MPI_Win_detach`: withdraws the region attached at `base` and hands
    /// its memory back. MPI requires that no origin still accesses it (an
    /// epoch that reached it has ended). Local.
    pub fn detach(&self, base: u64) -> Result<Vec<u8>, Error> {
        match &self.direct {
            Some(d) if d.is_dynamic() => d.detach(base),
            _ => Err(Error::InvalidArgument {
                what: "detach: not a dynamic window",
            }),
        }
    }

    /// Local access to the region attached at `base` of this dynamic
    /// window (atomic with respect to accumulate-like operations, as
    /// [`Win::with_local`]).
    pub fn with_attached<T>(&self, base: u64, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        match &self.direct {
            Some(d) if d.is_dynamic() => d.with_attached(base, f),
            _ => Err(Error::InvalidArgument {
                what: "with_attached: not a dynamic window",
            }),
        }
    }

    /// Which backends this window's targets take.
    pub fn path(&self) -> WinPath {
        match (&self.direct, self.all_direct) {
            (Some(_), true) => WinPath::Direct,
            (Some(_), false) => WinPath::Mixed,
            (None, _) => WinPath::Engine,
        }
    }

    /// This rank in the window's group.
    pub fn rank(&self) -> i32 {
        self.comm.rank()
    }

    /// Ranks in the window's group.
    pub fn size(&self) -> i32 {
        self.comm.size()
    }

    /// Bytes of `rank`'s window (exchanged at creation); `None` for a rank
    /// outside the group.
    pub fn target_size(&self, rank: i32) -> Option<u64> {
        usize::try_from(rank)
            .ok()
            .and_then(|r| self.sizes.get(r).copied())
    }

    /// The window's private communicator (a duplicate of the one it was
    /// created on; `MPI_Win_get_group` is its group).
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// Local access to this rank's window memory, atomic with respect to
    /// every accumulate-like operation (with a direct backend: under this
    /// rank's accumulate lock, heap memory copied out and only the bytes
    /// `f` changed written back; otherwise under the RMA lock). MPI's rules
    /// on conflicting local and remote accesses still apply: use it between
    /// epochs, or inside an epoch on bytes nobody else accesses.
    pub fn with_local<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        if let Some(d) = &self.direct {
            return d.with_local(f);
        }
        let mut g = am::lock(&self.comm.dev().rma.state);
        match &mut g.slot(self.id)?.mem {
            am::SlotMem::Private(v) => Ok(f(v)),
            am::SlotMem::Direct(d) => d.with_local(f),
        }
    }

    /// The address of this rank's window memory in this process (`None`
    /// for a dynamic window, which has none of its own): for a program
    /// that loads and stores it in place, as a C program does through
    /// `MPI_Win_allocate`'s base pointer. It stays valid until
    /// [`Win::free`]: an allocated window's memory is in the symmetric
    /// heap (where same-node origins store directly) or in a private
    /// buffer that never moves; a [`Win::create_raw`] window's is the
    /// caller's; a [`Win::create`] window's may be a heap copy of the
    /// given `Vec` (`TMX_RMA_HEAP_WINDOWS`).
    ///
    /// Reading or writing through it is the caller's `unsafe`, under MPI's
    /// rules: local accesses that conflict with RMA operations are
    /// separated from them by the synchronization of an epoch (remote
    /// updates are visible after it; [`Win::with_local`] is the safe,
    /// accumulate-atomic form).
    pub fn local_base(&self) -> Result<Option<*mut u8>, Error> {
        if let Some(d) = &self.direct {
            return d.local_ptr(self.comm.rank() as u32);
        }
        let mut g = am::lock(&self.comm.dev().rma.state);
        Ok(match &mut g.slot(self.id)?.mem {
            am::SlotMem::Private(v) => Some(v.as_mut_ptr()),
            am::SlotMem::Direct(d) => d.local_ptr(self.comm.rank() as u32)?,
        })
    }

    /// A copy of this rank's window memory.
    pub fn local_copy(&self) -> Result<Vec<u8>, Error> {
        self.with_local(|m| m.to_vec())
    }

    /// Waits for a request of this window's operations (`MPI_Wait` with
    /// this device's progress).
    pub fn wait_request(&self, req: &mut crate::Request) -> Result<crate::Status, Error> {
        self.comm.wait(req)
    }

    /// The epoch machine's counters of this window (ops issued, locks,
    /// packets, target-side applications, direct operations, ...).
    pub fn counters(&self) -> Result<rma_epoch::Counters, Error> {
        let g = am::lock(&self.comm.dev().rma.state);
        Ok(g.engine.counters(self.id)?.clone())
    }

    /// The engine rank of `rank` (`PROC_NULL` maps to the engine's).
    fn target(&self, rank: i32) -> Result<u32, Error> {
        if rank == crate::attr::PROC_NULL {
            return Ok(rma_epoch::PROC_NULL);
        }
        if (0..self.size()).contains(&rank) {
            Ok(rank as u32)
        } else {
            Err(Error::InvalidRank {
                rank,
                size: self.size(),
            })
        }
    }

    /// The direct backend if `t` is reached directly.
    #[inline]
    fn direct_to(&self, t: u32) -> Option<&direct::DirectWin> {
        match &self.direct {
            Some(d) if self.all_direct || d.is_direct(t) => Some(d),
            _ => None,
        }
    }
}

// Compile-time check: windows may be shared between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Win>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;
    use rma_epoch::WindowConfig;

    #[test]
    fn rma_errors_map_to_mpi_classes() {
        use rma_epoch::{AccessState, Error as R};
        let cases = [
            (
                R::NoEpoch {
                    win: 0,
                    state: AccessState::Unset,
                },
                ErrorClass::RmaSync,
            ),
            (R::NotLocked { win: 0, target: 1 }, ErrorClass::RmaSync),
            (
                R::RankOutOfRange {
                    win: 0,
                    rank: 9,
                    comm_size: 2,
                },
                ErrorClass::Rank,
            ),
            (
                R::InvalidAccumulate {
                    op: AccOp::Band,
                    elem: ElemType::F64,
                    len: 8,
                },
                ErrorClass::Op,
            ),
            (R::NoSuchWindow(3), ErrorClass::Win),
        ];
        for (e, class) in cases {
            let e: Error = e.into();
            assert_eq!(e.class(), class, "{e}");
        }
        let r = Error::RmaRange {
            target: 1,
            disp: 8,
            len: 16,
            size: 16,
        };
        assert_eq!(r.class(), ErrorClass::RmaRange);
        assert!(r.to_string().contains("window of 16 bytes"));
    }

    #[test]
    fn engine_config_comes_from_the_environment_lookup() {
        // Malformed TMX_RMA_* values are typed errors (Other), not panics.
        let e = WindowConfig::from_lookup(2, 0, 8, |k| {
            (k == "TMX_RMA_SLOTS").then(|| "many".to_string())
        })
        .map_err(Error::from)
        .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Other);
    }
}
