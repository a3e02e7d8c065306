//! The device: transport choice, the operation table and the progress engine.
//!
//! "Thin": this module holds no matching and no transport logic. The
//! device chooses a transport per peer ([`choose_route`]), starts
//! operations on it through the crate's internal transport seam (one
//! `Transport` trait that every transport implements), and turns the
//! transports' completion feeds into completed [`Request`](crate::Request)s.
//! Matching, protocols (inline / eager / rendezvous) and self-sends are
//! the transports'. An operation a transport finishes inside its call (an
//! inline, eager or self send; a receive whose message had arrived) is
//! born complete instead: no operation-table entry, and for a plain
//! success no shared slot
//! ([`Request::ready_with_buffer`](crate::Request::ready_with_buffer)).
//!
//! The rooms:
//!
//! - `route`: routes ([`Route`], [`routes`]), groups and where a peer is
//!   reached;
//! - `send`: every send, blocking or not, buffered, packed in place;
//! - `recv`: receives, probes, cancel;
//! - `shared`: `ANY_SOURCE` receives across transports;
//! - `ops`: the table of pending operations and what completes them;
//! - `progress`: progress passes, the harvest, waits, liveness, finalize;
//! - `pools`: the attached buffer, staging buffers, context ids.
//!
//! # Transports
//!
//! The core holds one transport per kind of [`Route`]: the node-local one
//! (this rank and its node: `shmem-onesided`) and, when one is
//! configured, a remote one for [`Route::Remote`] peers: `verbs-tm`'s
//! endpoint (`transport::verbs`), or the socket test double
//! ([`crate::ENV_TEST_NODES`]). A job whose ranks span nodes fails at init
//! with [`Error::NoInterNodeTransport`] only if no `verbs-tm` provider can
//! start.
//!
//! # Locks (the ADI paper §6.3: per-structure locks, no global lock around waits)
//!
//! - `core` (`CoreCell<Option<Core>>`: a `Mutex` under
//!   [`ThreadLevel::Multiple`], owned by the initializing thread and
//!   reached without a lock under [`ThreadLevel::Funneled`]): the
//!   transports and the table of outstanding operations. Held only for
//!   *non-blocking* transport calls (start an operation, one progress
//!   pass, take completions, cancel, probe). Every wait loop runs outside
//!   it: a waiter calls `Device::check`, which takes the lock for one pass
//!   and releases it.
//! - each request's own state (see [`mod@crate::request`]): completers run
//!   *after* `core` is released, so unpacking a datatype receive never
//!   holds up other threads. The one thing done for a request under `core`
//!   is completing a plain receive or send of the waiting thread's own
//!   requests in place (the harvest): a few moves into a request the
//!   caller holds, no other lock, no user code.
//! - `bsend` (the attached buffer), `contexts` (free context ids),
//!   `staging` (a pool of receive staging buffers), `pmi`: each its own
//!   lock. Order when nested: `bsend` → `core` → `staging`; nothing else
//!   nests.
//!
//! A blocking `Device::check` returns as soon as any request completes,
//! whether this thread completed it or another one did (a completion epoch
//! counter), and otherwise after a bounded number of idle passes (spurious
//! returns are allowed by the [`Progress`](crate::Progress) contract;
//! waits loop).

#[allow(unsafe_code)]
mod lent;
mod ops;
mod pools;
mod progress;
mod recv;
pub(crate) mod route;
mod send;
mod shared;

pub(crate) use lent::LentInto;
pub(crate) use ops::{typed_result, InPlaceSlot, RecvInto, TypedInto};
pub(crate) use pools::{internal_context, ContextPool};
pub(crate) use progress::DeviceProgress;
pub use route::{choose_route, routes, Route};
pub(crate) use route::{fake_nodes, Group};

use crate::attr::{ANY_TAG, PROC_NULL};
use crate::core_cell::{CoreCell, ThreadLevel};
use crate::request::{SparePairs, Status};
use crate::transport::{OpTable, RecvStatus, Remote, ShmemTransport, SmallSend, Transport};
use crate::{Error, PlanLimits};
use launcher::Pmi;
use ops::Op;
use pools::{BsendPool, StagingPool};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tm_proto::{MatchSpec, Source};

/// Environment variable: print the ADI and transport counters on stderr at
/// finalize (`1`/`true`/`yes`/`on`; default off).
pub const ENV_COUNTERS: &str = "TMX_ADI_COUNTERS";

/// `MPI_BSEND_OVERHEAD`: bytes of the attached buffer that each buffered
/// send uses beyond its data. The device keeps its bookkeeping outside the
/// buffer, but reserves this much per message so that a buffer sized by
/// the MPI rule (`sum of (size + MPI_BSEND_OVERHEAD)`) behaves as in other
/// MPI implementations (MPICH's value is 96 on 64-bit; ours is 64).
pub const BSEND_OVERHEAD: usize = 64;

/// How long a blocking `Device::check` may go without checking that the
/// peers it waits for are alive.
const LIVENESS_EVERY: Duration = Duration::from_millis(200);
/// Environment variable: idle passes a blocking `Device::check` spins
/// (busy-polls) before it starts yielding the processor between passes
/// (default [`DEFAULT_SPIN`]; `0` yields at once, which suits more threads
/// than cores but costs latency).
pub const ENV_SPIN: &str = "TMX_ADI_SPIN";

/// Default of [`ENV_SPIN`] when the machine has at least as many CPUs as
/// the job has ranks on it, whatever node they belong to (otherwise the
/// default is 0). Busy-polling is what gives
/// MPICH-like latency between processes on different cores; yielding after
/// 64 passes made a 1-byte ping-pong about 5x slower on a loaded 2-core
/// machine.
pub const DEFAULT_SPIN: u32 = 4096;

/// Protocol counters of the ADI (each transport keeps its own, printed
/// with these). Printed at finalize with `TMX_ADI_COUNTERS=1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Sends to this rank itself (local copy through the matcher).
    pub self_sends: u64,
    /// Sends to another rank of the node (shmem-onesided).
    pub shmem_sends: u64,
    /// Sends to a rank of another node (the remote transport).
    pub remote_sends: u64,
    /// Synchronous sends (`ssend`, `issend`).
    pub sync_sends: u64,
    /// Ready sends (`rsend`).
    pub ready_sends: u64,
    /// Buffered sends (`bsend`).
    pub buffered_sends: u64,
    /// Buffered sends refused because the attached buffer was full.
    pub bsend_full: u64,
    /// Operations on `MPI_PROC_NULL`.
    pub proc_null_ops: u64,
    /// Receives started (blocking or not).
    pub recvs: u64,
    /// Blocking receives satisfied at once from the unexpected queue
    /// (delivered straight into the user buffer).
    pub recv_fast_hits: u64,
    /// Receives that matched a longer message (`MPI_ERR_TRUNCATE`).
    pub truncations: u64,
    /// Datatype sends that packed (non-contiguous data).
    pub packed_sends: u64,
    /// Datatype receives that unpacked.
    pub unpacked_recvs: u64,
    /// Of those, the ones unpacked straight from the sender's eager block
    /// (no staging copy).
    pub unpacked_in_place: u64,
    /// Probes (`probe`, `iprobe`, `mprobe`, `improbe`) that found a message.
    pub probes_matched: u64,
    /// Cancels the transport accepted.
    pub cancelled: u64,
    /// `ANY_SOURCE` receives posted to more than one transport (a
    /// communicator whose members span transports).
    pub shared_recvs: u64,
    /// Of those, the ones a remote transport's message completed (its
    /// proposal committed, the node-local post withdrawn).
    pub shared_remote_wins: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "self_sends={} shmem_sends={} remote_sends={} sync_sends={} ready_sends={} \
             buffered_sends={} bsend_full={} proc_null_ops={} recvs={} recv_fast_hits={} \
             truncations={} packed_sends={} unpacked_recvs={} unpacked_in_place={} \
             probes_matched={} cancelled={} shared_recvs={} shared_remote_wins={}",
            self.self_sends,
            self.shmem_sends,
            self.remote_sends,
            self.sync_sends,
            self.ready_sends,
            self.buffered_sends,
            self.bsend_full,
            self.proc_null_ops,
            self.recvs,
            self.recv_fast_hits,
            self.truncations,
            self.packed_sends,
            self.unpacked_recvs,
            self.unpacked_in_place,
            self.probes_matched,
            self.cancelled,
            self.shared_recvs,
            self.shared_remote_wins
        )
    }
}

macro_rules! atomic_counters {
    ($($f:ident),*) => {
        #[derive(Debug, Default)]
        struct AtomicCounters { $($f: AtomicU64,)* }
        impl AtomicCounters {
            fn snapshot(&self) -> Counters {
                Counters { $($f: self.$f.load(Ordering::Relaxed),)* }
            }
        }
    };
}
atomic_counters!(
    self_sends,
    shmem_sends,
    remote_sends,
    sync_sends,
    ready_sends,
    buffered_sends,
    bsend_full,
    proc_null_ops,
    recvs,
    recv_fast_hits,
    truncations,
    packed_sends,
    unpacked_recvs,
    unpacked_in_place,
    probes_matched,
    cancelled,
    shared_recvs,
    shared_remote_wins
);

#[inline]
fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Bumps a counter that is only ever bumped under the core lock: a plain
/// load and store (no read-modify-write; the lock orders the bumps).
#[inline]
fn bump_locked(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// The device's state behind the core lock: the transports and the
/// operations pending on them.
#[derive(Debug)]
pub(crate) struct Core {
    /// The node-local transport (this rank and its node).
    pub(crate) local: ShmemTransport,
    /// The transport of [`Route::Remote`] peers, if one is configured.
    remote: Option<Remote>,
    ops: OpTable<Op>,
    /// Spare request slots: given back by completions in place during a
    /// harvest, taken by the next operations started (both under the lock).
    spares: SparePairs,
    /// Pending sends whose owned buffer is the device's (a packed message
    /// of `Comm::isend_typed`): at completion it goes back to the staging
    /// pool instead of to the request ([`Device::keep_staged`]).
    staged: std::collections::HashSet<u64>,
    /// Work the harvest leaves for after the transports' feeds: shared
    /// receives' proposals to answer and remote posts to withdraw.
    shared: shared::Pending,
}

/// Where a peer is reached: the transport, and the peer's address there
/// (see [`crate::transport`], "Addresses").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    /// The node-local transport, node index.
    Local(u32),
    /// The remote transport, world rank.
    Remote(u32),
}

/// The transport(s) a receive or probe goes to, with its spec in that
/// transport's addresses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RecvOn {
    /// The node-local transport.
    Local(MatchSpec),
    /// The remote transport.
    Remote(MatchSpec),
    /// `ANY_SOURCE` over members on both: posted to both
    /// ([`crate::transport`], "`ANY_SOURCE` across transports").
    Both(MatchSpec),
}

/// Locks the core (the prologue every operation starts with, written
/// once): binds `$core` to it, or returns [`Error::NotInitialized`] once
/// finalized (and the cell's error for a thread the level refuses). The
/// guard `$g` is the caller's to drop early.
macro_rules! lock_core {
    ($dev:expr, $g:ident, $core:ident) => {
        let mut $g = $dev.core.lock()?;
        let Some($core) = $g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
    };
}
pub(crate) use lock_core;

/// One transport of the core, chosen at compile time: each operation is
/// written once, generic over the transport it runs on, and dispatched on
/// the peer's route ([`dispatch!`]). Static dispatch: the node-local
/// transport's calls inline into the device's fast paths.
pub(crate) trait Via {
    /// The remote transport (counted as such).
    const REMOTE: bool;
    /// The transport.
    type T: Transport;
    /// The transport, out of the core.
    fn pick(core: &mut Core) -> Result<&mut Self::T, Error>;
}

/// The node-local transport ([`Via`]).
pub(crate) enum OnLocal {}
/// The remote transport ([`Via`]).
pub(crate) enum OnRemote {}

impl Via for OnLocal {
    const REMOTE: bool = false;
    type T = ShmemTransport;
    #[inline(always)]
    fn pick(core: &mut Core) -> Result<&mut ShmemTransport, Error> {
        Ok(&mut core.local)
    }
}

impl Via for OnRemote {
    const REMOTE: bool = true;
    type T = Remote;
    #[inline(always)]
    fn pick(core: &mut Core) -> Result<&mut Remote, Error> {
        core.remote_mut()
    }
}

/// Runs `f` out of line (and as unlikely): the paths of the remote
/// transport, and of `ANY_SOURCE` over both, stay out of the frames of
/// the node-local fast paths (every saved register or spill there is a
/// store on the send path).
#[cold]
#[inline(never)]
pub(crate) fn cold<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// `$e` with `$v` the [`Via`] of the transport that [`Dest`] `$dest`
/// names and `$peer` the peer's address there: inline for the node-local
/// transport, out of line ([`cold`]) for the remote one.
macro_rules! dispatch {
    ($dest:expr, |$v:ident, $peer:ident| $e:expr) => {
        match $dest {
            $crate::device::Dest::Local($peer) => {
                type $v = $crate::device::OnLocal;
                $e
            }
            $crate::device::Dest::Remote($peer) => $crate::device::cold(move || {
                type $v = $crate::device::OnRemote;
                $e
            }),
        }
    };
}
pub(crate) use dispatch;

/// A receive or probe of `$spec` (its source a world rank, or any) on a
/// communicator with group `$group` (`Option<&Group>`): `$e` with `$v`
/// the [`Via`] of the transport that reaches the source and `$s` the spec
/// there — inline for the node-local transport, out of line ([`cold`])
/// for the remote one — or, out of line, `$both` with `$bs` for
/// `ANY_SOURCE` over members on both ([`RecvOn::Both`]).
macro_rules! dispatch_recv {
    ($dev:expr, $spec:expr, $group:expr, |$v:ident, $s:ident| $e:expr, |$bs:ident| $both:expr) => {{
        if let Some(source) = $dev.local_source($spec.source) {
            let $s = tm_proto::MatchSpec { source, ..$spec };
            type $v = $crate::device::OnLocal;
            $e
        } else {
            $crate::device::cold(move || match $dev.recv_on($spec, $group)? {
                // `ANY_SOURCE` on a communicator of this node's ranks, with
                // a remote transport configured.
                $crate::device::RecvOn::Local($s) => {
                    type $v = $crate::device::OnLocal;
                    $e
                }
                $crate::device::RecvOn::Remote($s) => {
                    type $v = $crate::device::OnRemote;
                    $e
                }
                $crate::device::RecvOn::Both($bs) => $both,
            })
        }
    }};
}
pub(crate) use dispatch_recv;

impl Core {
    /// The remote transport ([`Error::InvalidArgument`] if none: a remote
    /// route exists only when one is configured).
    #[inline]
    fn remote_mut(&mut self) -> Result<&mut Remote, Error> {
        self.remote.as_mut().ok_or_else(|| Error::InvalidArgument {
            what: "no remote transport",
        })
    }
}

/// The device of one process.
#[derive(Debug)]
pub(crate) struct Device {
    core: CoreCell<Option<Core>>,
    epoch: AtomicU64,
    pub(crate) world_rank: u32,
    pub(crate) world_size: u32,
    routes: Vec<Route>,
    /// A remote transport is configured.
    has_remote: bool,
    counters: AtomicCounters,
    bsend: Mutex<BsendPool>,
    pub(crate) contexts: Mutex<ContextPool>,
    /// Serializes communicator creation on this process (see `Comm::dup`).
    pub(crate) comm_create: Mutex<()>,
    pmi: Mutex<Option<Pmi>>,
    staging: Mutex<StagingPool>,
    pub(crate) node_name: String,
    pub(crate) appnum: i64,
    pub(crate) limits: PlanLimits,
    print_counters: bool,
    spin: u32,
    /// The node-local transport's small-message policy
    /// ([`Device::send_small_now`]), read once: no lock to consult it.
    small: SmallSend,
    start: Instant,
    last_alive_ms: AtomicU64,
    /// RMA: the process's `rma_epoch::Engine` and its windows, behind their
    /// own lock (see [`crate::win`]). Lock order: `rma` → `core`.
    pub(crate) rma: crate::win::Rma,
}

/// Data of a nonblocking send: moved into the transport. (Borrowed data
/// is sent by the blocking and the buffered sends, which keep it alive
/// until the send completes.)
pub(crate) enum SendData {
    Owned(Vec<u8>),
}

/// The send modes the device starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Standard,
    Synchronous,
    Ready,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        // A panic in another thread while it held the lock: the data is
        // plain bookkeeping that every path leaves consistent between calls.
        Err(poisoned) => poisoned.into_inner(),
    }
}

pub(crate) fn parse_flag(var: &'static str, value: Option<String>) -> Result<bool, Error> {
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(false),
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(true),
            "0" | "false" | "no" | "off" => Ok(false),
            _ => Err(Error::Config {
                var,
                value: v.to_string(),
                reason: "expected 1/0, true/false, yes/no or on/off",
            }),
        },
    }
}

pub(crate) fn parse_count(
    var: &'static str,
    value: Option<String>,
    default: u32,
) -> Result<u32, Error> {
    match value.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some(v) => v.parse::<u32>().map_err(|_| Error::Config {
            var,
            value: v.to_string(),
            reason: "expected a non-negative integer below 2^32",
        }),
    }
}

impl Device {
    /// A device over the node-local transport `local` and, for
    /// [`Route::Remote`] peers, `remote`; `machine_ranks` ranks of the job
    /// run on this machine (on this node, or on other nodes that share its
    /// CPUs: `local:` and `netns:` hosts, fake nodes).
    pub(crate) fn new(
        pmi: Pmi,
        local: ShmemTransport,
        remote: Option<Remote>,
        routes: Vec<Route>,
        machine_ranks: usize,
        node_name: String,
        level: ThreadLevel,
    ) -> Result<Device, Error> {
        let print_counters = parse_flag(ENV_COUNTERS, std::env::var(ENV_COUNTERS).ok())?;
        // Oversubscribed machine (more of the job's ranks than CPUs):
        // busy-polling only steals the CPU from the peer we wait for, so
        // yield at once.
        // The node's online CPUs, not this process's affinity mask: under
        // `tmrun --bind-to core` / `mpiexec -bind-to core` every rank sees one
        // CPU, yet the ranks sit on different CPUs and spinning is right.
        let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let default_spin = if machine_ranks > cpus {
            0
        } else {
            DEFAULT_SPIN
        };
        let spin = parse_count(ENV_SPIN, std::env::var(ENV_SPIN).ok(), default_spin)?;
        tracing::info!(spin, cpus, machine_ranks, "wait policy");
        let small = local.small_send();
        let pairs = pools::context_pairs();
        let mut contexts = ContextPool::new(pairs);
        // The last pair is the device's own (`internal_context`).
        contexts.take(pairs - 1);
        Ok(Device {
            world_rank: pmi.rank() as u32,
            world_size: pmi.size() as u32,
            appnum: pmi.appnum(),
            has_remote: remote.is_some(),
            core: CoreCell::new(
                Some(Core {
                    local,
                    remote,
                    ops: OpTable::default(),
                    spares: SparePairs::default(),
                    staged: std::collections::HashSet::new(),
                    shared: shared::Pending::default(),
                }),
                level,
            ),
            epoch: AtomicU64::new(0),
            routes,
            counters: AtomicCounters::default(),
            bsend: Mutex::new(BsendPool::default()),
            contexts: Mutex::new(contexts),
            comm_create: Mutex::new(()),
            pmi: Mutex::new(Some(pmi)),
            staging: Mutex::new(StagingPool::default()),
            node_name,
            limits: PlanLimits::DEFAULT,
            print_counters,
            spin,
            small,
            start: Instant::now(),
            last_alive_ms: AtomicU64::new(0),
            rma: crate::win::Rma::from_env()?,
        })
    }

    /// The thread level the device provides.
    pub(crate) fn thread_level(&self) -> ThreadLevel {
        self.core.level()
    }

    /// Whether this thread may call the device ([`Error::ThreadLevel`]
    /// if not).
    pub(crate) fn check_thread(&self) -> Result<(), Error> {
        self.core.lock().map(drop)
    }

    /// The ADI counters so far.
    pub(crate) fn counters(&self) -> Counters {
        self.counters.snapshot()
    }

    /// Runs `f` on the core under its lock.
    fn with_core<T>(&self, f: impl FnOnce(&mut Core) -> Result<T, Error>) -> Result<T, Error> {
        let mut g = self.core.lock()?;
        match g.as_mut() {
            Some(core) => f(core),
            None => Err(Error::NotInitialized { what: "finalized" }),
        }
    }

    /// Runs `f` on the node-local transport under the core lock
    /// (same-node windows map its node segment).
    pub(crate) fn with_local<T>(
        &self,
        f: impl FnOnce(&mut ShmemTransport) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.with_core(|core| f(&mut core.local))
    }

    /// Where world rank `world` is reached.
    #[inline]
    pub(crate) fn dest_of(&self, world: u32) -> Result<Dest, Error> {
        match self.routes.get(world as usize) {
            Some(Route::SelfCopy { local }) | Some(Route::Shmem { local }) => {
                Ok(Dest::Local(*local))
            }
            Some(Route::Remote { .. }) => Ok(Dest::Remote(world)),
            None => Err(Error::InvalidRank {
                rank: world as i32,
                size: self.world_size as i32,
            }),
        }
    }

    /// The node index of world rank `world`, for same-node windows: an
    /// error for a rank on another node.
    pub(crate) fn node_index_of(&self, world: u32) -> Result<u32, Error> {
        match self.dest_of(world)? {
            Dest::Local(local) => Ok(local),
            Dest::Remote(_) => Err(Error::NoInterNodeTransport {
                rank: world,
                node: match self.routes.get(world as usize) {
                    Some(Route::Remote { node }) => *node,
                    _ => usize::MAX,
                },
                my_node: usize::MAX,
                reason: "a same-node path asked for a rank of another node".into(),
            }),
        }
    }

    /// The node-local transport's address of a receive's or probe's
    /// `source` (a world rank, or any), if the node-local transport alone
    /// takes it: the source is on this node, or any source without a
    /// remote transport. `None` otherwise ([`Device::recv_on`] says where
    /// it goes, or what is wrong with it).
    #[inline(always)]
    pub(crate) fn local_source(&self, source: Source) -> Option<Source> {
        match source {
            Source::Rank(w) => match self.routes.get(w as usize) {
                Some(Route::SelfCopy { local }) | Some(Route::Shmem { local }) => {
                    Some(Source::Rank(*local))
                }
                _ => None,
            },
            Source::Any if !self.has_remote => Some(Source::Any),
            Source::Any => None,
        }
    }

    /// The transport(s) a receive or probe of `spec` (its source a world
    /// rank, or any) goes to, on a communicator with `group` (`None`:
    /// every rank of the job).
    pub(crate) fn recv_on(&self, spec: MatchSpec, group: Option<&Group>) -> Result<RecvOn, Error> {
        match spec.source {
            Source::Rank(w) => Ok(match self.dest_of(w)? {
                Dest::Local(local) => RecvOn::Local(MatchSpec {
                    source: Source::Rank(local),
                    ..spec
                }),
                Dest::Remote(_) => RecvOn::Remote(spec),
            }),
            Source::Any if !self.has_remote => Ok(RecvOn::Local(spec)),
            Source::Any => Ok(self.any_on(spec, group)),
        }
    }

    /// [`Device::recv_on`] of `ANY_SOURCE` with a remote transport.
    #[inline(never)]
    fn any_on(&self, spec: MatchSpec, group: Option<&Group>) -> RecvOn {
        let spans = match group {
            Some(g) => g.spans_remote(&self.routes),
            None => true,
        };
        if spans {
            RecvOn::Both(spec)
        } else {
            RecvOn::Local(spec)
        }
    }

    /// Counts a send to world rank `world` on the transport of `V`; only
    /// under the core lock.
    #[inline(always)]
    fn count_send<V: Via>(&self, world: u32) {
        if V::REMOTE {
            bump_locked(&self.counters.remote_sends);
        } else if world == self.world_rank {
            bump_locked(&self.counters.self_sends);
        } else {
            bump_locked(&self.counters.shmem_sends);
        }
    }

    pub(crate) fn note_packed(&self) {
        bump(&self.counters.packed_sends);
    }

    pub(crate) fn note_proc_null(&self) {
        bump(&self.counters.proc_null_ops);
    }

    /// Counts a datatype receive that unpacked.
    pub(crate) fn note_unpacked(&self) {
        bump(&self.counters.unpacked_recvs);
    }

    /// Converts a transport's status into an MPI status for `group`
    /// (`None`: the identity group).
    #[inline]
    fn status_of(&self, st: &RecvStatus, group: Option<&Group>) -> Status {
        let rank = match group {
            Some(g) => g.comm_rank_of(st.source),
            None if st.source < self.world_size => st.source as i32,
            None => -1,
        };
        Status::new(rank, st.tag as i32, st.len)
    }

    // ------------------------------------------------------------- PMI

    pub(crate) fn with_pmi<T>(
        &self,
        f: impl FnOnce(&mut Pmi) -> Result<T, launcher::Error>,
    ) -> Result<T, Error> {
        let mut g = lock(&self.pmi);
        match g.as_mut() {
            Some(p) => Ok(f(p)?),
            None => Err(Error::NotInitialized { what: "finalized" }),
        }
    }

    /// Aborts the job through the launcher (the exit code reaches it), or
    /// exits this process if there is no PMI connection any more.
    pub(crate) fn abort(&self, code: i32, message: &str) -> ! {
        let pmi = lock(&self.pmi).take();
        match pmi {
            Some(p) => p.abort(code, message),
            None => {
                eprintln!(
                    "tmx: rank {} aborting with code {code}: {message}",
                    self.world_rank
                );
                std::process::exit(code)
            }
        }
    }
}

/// The status of an operation on `MPI_PROC_NULL`.
pub(crate) const PROC_NULL_STATUS: Status = Status::new(PROC_NULL, ANY_TAG, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_flag_parses_strictly() {
        assert!(!parse_flag(ENV_COUNTERS, None).unwrap());
        assert!(parse_flag(ENV_COUNTERS, Some("1".into())).unwrap());
        assert!(parse_flag(ENV_COUNTERS, Some("On".into())).unwrap());
        assert!(!parse_flag(ENV_COUNTERS, Some("0".into())).unwrap());
        let e = parse_flag(ENV_COUNTERS, Some("maybe".into())).unwrap_err();
        assert_eq!(e.class(), crate::ErrorClass::Other);
        assert_eq!(parse_count(ENV_SPIN, None, 7).unwrap(), 7);
        assert_eq!(parse_count(ENV_SPIN, Some(" 0 ".into()), 7).unwrap(), 0);
        assert!(matches!(
            parse_count(ENV_SPIN, Some("-1".into()), 7),
            Err(Error::Config { var: ENV_SPIN, .. })
        ));
    }

    #[test]
    fn counters_display_names_every_field() {
        let c = Counters {
            remote_sends: 3,
            shared_recvs: 2,
            ..Counters::default()
        };
        let s = c.to_string();
        assert!(s.contains("remote_sends=3"), "{s}");
        assert!(s.contains("shared_recvs=2"), "{s}");
        assert!(s.contains("shared_remote_wins=0"), "{s}");
    }
}
