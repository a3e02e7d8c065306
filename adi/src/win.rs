//! RMA windows (`MPI_Win`): one-sided communication on two paths.
//!
//! # The two paths ([`WinPath`])
//!
//! - **Direct (same node, the default).** When every rank of the window is
//!   on this node, the origin executes each operation itself and returns:
//!   [`Win::allocate`] places every rank's window in its symmetric heap of
//!   the node segment, so put and get are `memcpy` through the shared
//!   mapping; [`Win::create`] windows (and allocations larger than the heap,
//!   `TMX_SHMEM_HEAP_BYTES`) stay in private memory and are reached by CMA
//!   single copy. Synchronization is atomics in a per-rank control block
//!   (`shmem_onesided::winsync`, loom-checked): a FIFO ticket reader-writer
//!   lock per target for `lock`/`unlock` (and one for accumulates, which
//!   makes them atomic per element), a counter barrier for `fence`, per-pair
//!   post/complete counters for PSCW; `flush*` and `sync` are a full memory
//!   barrier, since every operation is complete when its call returns. This
//!   is MPICH's direct execution on SHM windows and Open MPI `osc/sm`'s
//!   design (`rma-implementation-notes.md` §a.6, §4.5). See `win/direct.rs`.
//!   The choice is collective: every rank must be able to take the path (a
//!   control block fits in its heap, and CMA works if any window memory is
//!   private), or the window takes the engine path.
//! - **Engine (active messages).** `TMX_RMA_DIRECT=0` forces it for every
//!   window; remote (inter-node) targets will take it through verbs-tm. The
//!   device owns one sans-IO `rma_epoch::Engine` (behind its own lock)
//!   holding these windows: user calls go in (`fence`, `put`, `lock`, ...),
//!   actions come out (packets to send, barriers to start, read results,
//!   completions of pending calls).
//!
//! # The engine path in detail
//!
//! - **A private communicator per window.** Window creation duplicates the
//!   user's communicator ([`Comm::dup`], as MPICH does; both paths do). Its
//!   point-to-point context id is *reserved for RMA packets* of this window
//!   (tag 0, any size: `tm_proto::rma` packets, a 32-byte header plus
//!   payload); its collective context carries the window's barriers (tags
//!   `0x100 + round`) and the creation-time exchange of window sizes. A
//!   packet is mapped to its local window by the context it arrived on (the
//!   wire header's window id is rewritten to the local one, so windows
//!   created on different communicators never have to agree on engine ids).
//! - **MAKE_RMA_PROGRESS.** Every progress pass of the device (every
//!   wait, test, blocking receive and `device_check`) also runs
//!   MAKE_RMA_PROGRESS: it drains the RMA contexts (target-side packets are
//!   applied to the window memory right there, under the RMA lock), drains
//!   the engine's actions (packets go out through the same endpoint as
//!   point-to-point messages), and steps the windows' nonblocking
//!   barriers. A barrier asked for by the engine is a dissemination
//!   barrier of nonblocking sends and receives stepped by progress: no
//!   blocking call ever runs inside progress.
//! - **Atomicity.** Every target-side access (put, accumulate, the read of
//!   a get, fetch-and-op, compare-and-swap) happens inside one
//!   `Engine::handle_packet` under the RMA lock, and the owner's local
//!   accesses ([`Win::with_local`]) take the same lock: accumulates are
//!   atomic per element (per operation, in fact) with respect to every
//!   other RMA access, as MPI requires. The lock's acquire/release are the
//!   memory barriers around every process synchronization.
//! - **The seam for remote targets** is [`crate::device::choose_route`] (a
//!   remote peer is refused at init today) plus the packet formats, which
//!   are already `tm_proto::rma`'s.
//!
//! # Misuse
//!
//! Ops outside an epoch, unlock without lock, ... are
//! [`Error::Rma`] (`MPI_ERR_RMA_SYNC`); a target outside the communicator
//! is [`Error::InvalidRank`]; an access past the end of the target's window
//! is [`Error::RmaRange`] (`MPI_ERR_RMA_RANGE`), checked at the origin
//! against the sizes exchanged at creation.

use crate::attr::{ANY_TAG, PROC_NULL};
use crate::comm::Comm;
use crate::device::{Device, Group, Mode, RecvInto, SendData};
use crate::request::{request, Completer, Request, Status};
use crate::Error;
use rma_epoch::{Action, CallStatus, Engine, GlobalConfig, Posted, WinId, WindowConfig};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use rma_epoch::assert;
pub use rma_epoch::{AccOp, ElemType};

/// Tag of RMA packets on a window's RMA context.
const TAG_RMA: u32 = 0;
/// First tag of the window barrier's rounds (collective context).
const TAG_WIN_BARRIER: u32 = 0x100;
/// Largest receive buffer kept between progress passes.
const SCRATCH_KEEP: usize = 16 << 20;
/// Most packets one progress pass takes from one window.
const PACKETS_PER_PASS: usize = 64;

/// The kind of a passive-target lock (`MPI_LOCK_SHARED`,
/// `MPI_LOCK_EXCLUSIVE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockType {
    /// `MPI_LOCK_SHARED`.
    Shared,
    /// `MPI_LOCK_EXCLUSIVE`.
    Exclusive,
}

mod direct;

/// Whether same-node windows use the direct path (`TMX_RMA_DIRECT`,
/// default on).
pub const ENV_DIRECT: &str = "TMX_RMA_DIRECT";

/// How an origin holds a passive-target lock on a direct window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Shared,
    Exclusive,
    /// `MODE_NOCHECK`: no lock taken.
    NoCheck,
}

/// Where a rank's window memory is, on the direct path.
#[derive(Debug, Clone, Copy)]
enum Mem {
    /// In its symmetric heap: load/store through the node segment.
    Heap(shmem_onesided::SymAddr),
    /// In its private memory at this address: CMA single copy.
    User(u64),
    /// A dynamic window: displacements are addresses in the target's
    /// attached regions (checked against its published region table),
    /// reached by CMA single copy.
    Dynamic,
}

/// A rank of a direct window, as every origin sees it.
#[derive(Debug, Clone, Copy)]
struct Target {
    /// Its node index (shmem PE).
    pe: u32,
    size: u64,
    mem: Mem,
    /// Its control block (locks, counters) in its heap.
    cb: shmem_onesided::SymAddr,
}

/// Which path a window's operations take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WinPath {
    /// Same-node ranks: the origin loads and stores the target's memory
    /// itself (heap windows) or copies by CMA (private memory), and the
    /// synchronization is atomics in shared memory.
    Direct,
    /// Active messages through the `rma_epoch` engine (the path remote
    /// targets will take; forced for every window by `TMX_RMA_DIRECT=0`).
    Engine,
}

/// Windows created on each path by this process.
static WINDOWS_DIRECT: AtomicU64 = AtomicU64::new(0);
static WINDOWS_ENGINE: AtomicU64 = AtomicU64::new(0);

/// Process-wide RMA counters (printed at finalize with
/// `TMX_ADI_COUNTERS=1`): windows per path, and the direct path's
/// operations, read-modify-writes (accumulate-like ops, each under the
/// target's accumulate lock), passive-target lock acquisitions, how many
/// of those had to wait, and fence barriers. The engine path's counters
/// are per window ([`Win::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RmaCounters {
    /// Windows on the direct path.
    pub windows_direct: u64,
    /// Windows on the engine path.
    pub windows_engine: u64,
    /// Direct-path operations (put, get, accumulate-like).
    pub direct_ops: u64,
    /// Of those, read-modify-writes under an accumulate lock.
    pub direct_rmw: u64,
    /// Passive-target lock acquisitions (including lazy lock_all ones).
    pub lock_acquires: u64,
    /// Acquisitions that found the lock held and waited.
    pub lock_waits: u64,
    /// Fence barriers.
    pub fences: u64,
}

/// The process-wide RMA counters.
pub fn rma_counters() -> RmaCounters {
    let g = &direct::GLOBAL;
    RmaCounters {
        windows_direct: WINDOWS_DIRECT.load(Ordering::Relaxed),
        windows_engine: WINDOWS_ENGINE.load(Ordering::Relaxed),
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
            "windows direct {}, engine {}; direct ops {} (read-modify-write {}), \
             lock acquires {} (waited {}), fences {}",
            self.windows_direct,
            self.windows_engine,
            self.direct_ops,
            self.direct_rmw,
            self.lock_acquires,
            self.lock_waits,
            self.fences
        )
    }
}

/// Ids of direct windows (error messages, tracing): disjoint from the
/// engine's.
static DIRECT_IDS: AtomicU32 = AtomicU32::new(1 << 31);

/// Whether the memory of [`Win::allocate`] and [`Win::create`] windows goes
/// in the symmetric heap when it fits (`TMX_RMA_HEAP_WINDOWS`, default on;
/// a created window's memory is copied in at creation and out at free).
/// Off, window memory stays private and same-node origins reach it by CMA
/// (shared windows always use the heap).
pub const ENV_HEAP_WINDOWS: &str = "TMX_RMA_HEAP_WINDOWS";

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

fn direct_wanted() -> Result<bool, Error> {
    env_switch(ENV_DIRECT)
}

fn heap_windows() -> Result<bool, Error> {
    env_switch(ENV_HEAP_WINDOWS)
}

/// The memory a window is created with.
enum Memory {
    Given(Vec<u8>),
    Alloc(usize),
    /// `allocate_shared`: in the heap, direct path, or an error;
    /// `contiguous`: every rank's segment follows the previous rank's in
    /// one block of window rank 0's heap (MPI's default layout).
    Shared(usize, bool),
    /// `create_dynamic`: no memory until `attach`; direct path with CMA,
    /// or an error.
    Dynamic,
}

/// The RMA state of a device: the engine and the windows' memory.
#[derive(Debug)]
pub(crate) struct Rma {
    state: Mutex<RmaState>,
    /// Live windows: progress does not even take the lock when there are
    /// none.
    live: AtomicUsize,
}

#[derive(Debug)]
struct RmaState {
    engine: Engine,
    wins: HashMap<WinId, Slot>,
    /// Scratch list of window ids (reused by progress).
    ids: Vec<WinId>,
    /// Receive buffer of incoming packets, reused (a fresh buffer per
    /// MiB-sized packet costs hundreds of page faults).
    scratch: Vec<u8>,
}

/// One window's device-side state.
#[derive(Debug)]
struct Slot {
    mem: Vec<u8>,
    /// RMA context (the window communicator's point-to-point context).
    ctx: u32,
    /// Barrier context (its collective context).
    coll: u32,
    rank: u32,
    group: Arc<Group>,
    /// Reads waiting for their data: token → (completer, target rank,
    /// the origin buffer to fill if the caller gave one).
    results: HashMap<u64, (Completer, i32, Option<Vec<u8>>)>,
    barriers_wanted: u32,
    barrier: Option<IBarrier>,
}

/// A nonblocking dissemination barrier, stepped by progress.
#[derive(Debug)]
struct IBarrier {
    dist: u32,
    round: u32,
    reqs: Option<(Request, Request)>,
}

struct Mems<'a>(&'a mut HashMap<WinId, Slot>);

impl rma_epoch::WindowMemory for Mems<'_> {
    fn window_mut(&mut self, win: WinId) -> Option<&mut [u8]> {
        self.0.get_mut(&win).map(|s| s.mem.as_mut_slice())
    }
}

fn lock(m: &Mutex<RmaState>) -> MutexGuard<'_, RmaState> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

impl Rma {
    /// The engine with the global pool sizes of `TMX_RMA_*_GLOBAL_POOL_SIZE`.
    pub(crate) fn from_env() -> Result<Rma, Error> {
        let cfg = GlobalConfig::from_lookup(env)?;
        Ok(Rma {
            state: Mutex::new(RmaState {
                engine: Engine::new(cfg),
                wins: HashMap::new(),
                ids: Vec::new(),
                scratch: Vec::new(),
            }),
            live: AtomicUsize::new(0),
        })
    }
}

/// What one RMA progress pass did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Progressed {
    /// Reads delivered and pending calls completed.
    pub(crate) completed: usize,
    /// Packets received and applied.
    pub(crate) packets: usize,
}

/// MAKE_RMA_PROGRESS: one pass over every window (incoming packets, engine
/// actions, barriers). Never blocks: if another thread is inside the RMA
/// state, this pass skips it. Inlined: without windows (every
/// point-to-point progress pass calls it) it is one load.
#[inline]
pub(crate) fn progress(dev: &Device) -> Result<Progressed, Error> {
    if dev.rma.live.load(Ordering::Acquire) == 0 {
        return Ok(Progressed::default());
    }
    progress_windows(dev)
}

/// [`progress`] with windows alive.
fn progress_windows(dev: &Device) -> Result<Progressed, Error> {
    let mut g = match dev.rma.state.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::WouldBlock) => return Ok(Progressed::default()),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
    };
    let st = &mut *g;
    let mut done = 0;
    let mut packets = 0;
    let mut ids = std::mem::take(&mut st.ids);
    ids.clear();
    ids.extend(st.wins.keys().copied());
    let r = (|| {
        for &win in &ids {
            packets += receive_packets(dev, st, win)?;
        }
        for _ in 0..8 {
            done += drain_actions(dev, st)?;
            let mut barriers = 0;
            for &win in &ids {
                if step_barrier(dev, st, win)? {
                    st.engine.handle_barrier_complete(win)?;
                    barriers += 1;
                }
            }
            if barriers == 0 {
                break;
            }
        }
        done += drain_actions(dev, st)?;
        Ok::<(), Error>(())
    })();
    st.ids = ids;
    r.map(|()| Progressed {
        completed: done,
        packets,
    })
}

fn receive_packets(dev: &Device, st: &mut RmaState, win: WinId) -> Result<usize, Error> {
    let Some(slot) = st.wins.get(&win) else {
        return Ok(0);
    };
    let mut n = 0;
    let spec = tm_proto::MatchSpec {
        context_id: slot.ctx,
        source: tm_proto::Source::Any,
        tag: tm_proto::Tag::Value(TAG_RMA),
    };
    let group = Arc::clone(&slot.group);
    let mut scratch = std::mem::take(&mut st.scratch);
    let r = (|| {
        for _ in 0..PACKETS_PER_PASS {
            let Some((world, len)) = dev.try_take(spec, &mut scratch)? else {
                break;
            };
            let from = group.of_world.get(world as usize).copied().unwrap_or(-1);
            let Some(bytes) = scratch.get_mut(..len).filter(|b| b.len() >= 8 && from >= 0) else {
                tracing::warn!(world, len, "stray RMA packet dropped");
                continue;
            };
            // The header's window id is the sender's engine id: use ours.
            bytes[4..8].copy_from_slice(&win.to_be_bytes());
            tracing::trace!(win, from, len, "RMA packet");
            st.engine
                .handle_packet(from as u32, bytes, &mut Mems(&mut st.wins))?;
            n += 1;
        }
        Ok::<(), Error>(())
    })();
    if scratch.capacity() > SCRATCH_KEEP {
        scratch = Vec::new();
    }
    st.scratch = scratch;
    r.map(|()| n)
}

fn drain_actions(dev: &Device, st: &mut RmaState) -> Result<usize, Error> {
    let mut done = 0;
    while let Some(a) = st.engine.poll_action() {
        match a {
            Action::Send { to, bytes } => {
                let Some(slot) = st.wins.get(&engine_win_of_send(&bytes)) else {
                    tracing::warn!(to, "RMA packet of an unknown window not sent");
                    continue;
                };
                let world = slot.group.world.get(to as usize).copied().ok_or_else(|| {
                    Error::InvalidRank {
                        rank: to as i32,
                        size: slot.group.world.len() as i32,
                    }
                })?;
                let req = dev.start_send(
                    world,
                    TAG_RMA,
                    slot.ctx,
                    SendData::Owned(bytes),
                    Mode::Standard,
                    None,
                )?;
                req.free();
            }
            Action::Barrier { win } => {
                if let Some(slot) = st.wins.get_mut(&win) {
                    slot.barriers_wanted += 1;
                    tracing::debug!(win, "window barrier requested");
                }
            }
            Action::Result { win, token, data } => {
                if let Some((c, src, into)) = st
                    .wins
                    .get_mut(&win)
                    .and_then(|s| s.results.remove(&token.0))
                {
                    let status = Status::new(src, ANY_TAG, data.len());
                    match into {
                        Some(mut buf) => {
                            let n = buf.len().min(data.len());
                            buf[..n].copy_from_slice(&data[..n]);
                            c.complete_with_buffer(status, buf);
                        }
                        None => c.complete_with_buffer(status, data),
                    }
                    done += 1;
                }
            }
            Action::Completed { win, call } => {
                tracing::debug!(win, ?call, "RMA call completed");
                done += 1;
            }
        }
    }
    Ok(done)
}

/// The window id in an outgoing packet's header (bytes 4..8).
fn engine_win_of_send(bytes: &[u8]) -> WinId {
    match bytes.get(4..8) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => u32::MAX,
    }
}

/// Steps the window's barrier; `true` when one just completed.
fn step_barrier(dev: &Device, st: &mut RmaState, win: WinId) -> Result<bool, Error> {
    let Some(slot) = st.wins.get_mut(&win) else {
        return Ok(false);
    };
    if slot.barrier.is_none() && slot.barriers_wanted > 0 {
        slot.barriers_wanted -= 1;
        slot.barrier = Some(IBarrier {
            dist: 1,
            round: 0,
            reqs: None,
        });
    }
    let n = slot.group.world.len() as u32;
    let me = slot.rank;
    let Some(b) = slot.barrier.as_mut() else {
        return Ok(false);
    };
    loop {
        match &b.reqs {
            None => {
                if b.dist >= n {
                    slot.barrier = None;
                    tracing::debug!(win, "window barrier complete");
                    return Ok(true);
                }
                let to = (me + b.dist) % n;
                let from = (me + n - b.dist % n) % n;
                let tag = TAG_WIN_BARRIER + b.round;
                let world_to = slot.group.world.get(to as usize).copied().unwrap_or(0);
                let world_from = slot.group.world.get(from as usize).copied().unwrap_or(0);
                let spec = tm_proto::MatchSpec {
                    context_id: slot.coll,
                    source: tm_proto::Source::Rank(world_from),
                    tag: tm_proto::Tag::Value(tag),
                };
                let r =
                    dev.start_recv(spec, Vec::new(), RecvInto::Owned, Arc::clone(&slot.group))?;
                let s = dev.start_send(
                    world_to,
                    tag,
                    slot.coll,
                    SendData::Owned(Vec::new()),
                    Mode::Standard,
                    None,
                )?;
                b.reqs = Some((s, r));
            }
            Some((s, r)) => {
                if s.is_complete() && r.is_complete() {
                    b.reqs = None;
                    b.dist = b.dist.saturating_mul(2);
                    b.round += 1;
                } else {
                    return Ok(false);
                }
            }
        }
    }
}

/// An RMA window (`MPI_Win`).
///
/// Created collectively by [`Win::create`] (memory given by the caller and
/// handed back by [`Win::free`]) or [`Win::allocate`]. Displacements are in
/// bytes (a displacement unit of 1). All calls take `&self` and may come
/// from several threads at once (the RMA design's valid interleavings: op +
/// op, op + fence, op + flush, flush + flush). On the engine path calls on
/// one window run one at a time (another thread's call waits for the one
/// in progress).
#[derive(Debug)]
pub struct Win {
    comm: Comm,
    id: WinId,
    sizes: Arc<[u64]>,
    freed: bool,
    /// The same-node path, when the window takes it.
    direct: Option<Box<direct::Direct>>,
    /// Engine path: one call at a time per window (the engine's rule);
    /// another thread's call waits here for it instead of failing.
    calls: Mutex<()>,
}

impl Win {
    /// `MPI_Win_create`: exposes `mem` (owned by the window until
    /// [`Win::free`] returns it). Collective over `comm`.
    pub fn create(comm: &Comm, mem: Vec<u8>) -> Result<Win, Error> {
        Win::build(comm, Memory::Given(mem))
    }

    /// `MPI_Win_allocate`: a window of `size` zeroed bytes owned by the
    /// window (in this rank's symmetric heap when it fits, so that
    /// same-node origins load and store it directly). Collective over
    /// `comm`.
    pub fn allocate(comm: &Comm, size: usize) -> Result<Win, Error> {
        Win::build(comm, Memory::Alloc(size))
    }

    /// A placeholder that owns nothing (what a freed [`SharedWin`] keeps).
    fn null(comm: Comm) -> Win {
        Win {
            comm,
            id: 0,
            sizes: Arc::from(Vec::new()),
            freed: true,
            direct: None,
            calls: Mutex::new(()),
        }
    }

    /// `MPI_Win_create_dynamic`: a window with no memory until ranks
    /// [`attach`](Win::attach) some; a displacement is then an address in
    /// the target's attached memory (as `MPI_BOTTOM`-relative
    /// displacements are in MPI), checked against the regions the target
    /// attached (an access outside them is [`Error::RmaRange`]).
    /// Collective over `comm`.
    ///
    /// Takes the same-node direct path whatever `TMX_RMA_DIRECT` says, and
    /// needs CMA single copy on every rank (accesses are
    /// `process_vm_readv/writev` at the attached addresses); otherwise every
    /// rank gets [`Error::InvalidArgument`]. At most
    /// [`shmem_onesided::winsync::REGION_SLOTS`] regions per rank are
    /// attached at a time.
    pub fn create_dynamic(comm: &Comm) -> Result<Win, Error> {
        Win::build(comm, Memory::Dynamic)
    }

    /// `MPI_Win_attach`: exposes `mem` through this dynamic window (which
    /// owns it until [`detach`](Win::detach) hands it back) and returns its
    /// address, the displacement origins use to reach its first byte (send
    /// it to them, as an MPI program sends `MPI_Get_address`'s result).
    /// Local (not collective).
    pub fn attach(&self, mem: Vec<u8>) -> Result<u64, Error> {
        match &self.direct {
            Some(d) if d.is_dynamic() => d.attach(mem),
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

    /// Which path this window's operations take.
    pub fn path(&self) -> WinPath {
        if self.direct.is_some() {
            WinPath::Direct
        } else {
            WinPath::Engine
        }
    }

    fn build(comm: &Comm, memory: Memory) -> Result<Win, Error> {
        let wcomm = comm.dup()?;
        let n = wcomm.size() as u32;
        let me = wcomm.rank() as u32;
        let dev = wcomm.dev();
        let size = match &memory {
            Memory::Given(v) => v.len(),
            Memory::Alloc(s) | Memory::Shared(s, _) => *s,
            Memory::Dynamic => 0,
        };
        let shared = matches!(memory, Memory::Shared(..));
        // A contiguous shared window: window rank 0 allocates one block for
        // every segment (so it needs every rank's size first).
        let contig_sizes: Option<Vec<u64>> = match &memory {
            Memory::Shared(s, true) => Some(
                wcomm
                    .allgather(&(*s as u64).to_le_bytes())?
                    .chunks_exact(8)
                    .map(|c| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(c);
                        u64::from_le_bytes(b)
                    })
                    .collect(),
            ),
            _ => None,
        };
        let dynamic = matches!(memory, Memory::Dynamic);
        let given = matches!(memory, Memory::Given(_));
        // Local preparation of the direct path: a control block, and heap
        // memory for an allocated window when it fits.
        let mut prep: Option<(
            u32,
            Option<shmem_onesided::SymAddr>,
            shmem_onesided::SymAddr,
        )> = None;
        let mut cma = false;
        let heap_windows = heap_windows()?;
        if shared || dynamic || direct_wanted()? {
            let world = wcomm
                .world_rank_of(me as i32)
                .ok_or_else(|| Error::InvalidRank {
                    rank: me as i32,
                    size: n as i32,
                })?;
            let pe = dev.node_index_of(world)?;
            prep = dev.with_node(|node| {
                cma = *node.cma_status() == shmem_onesided::CmaStatus::Available;
                let cbn = direct::cb_bytes(n);
                let Ok(cb) = node.malloc(cbn) else {
                    return Ok(None);
                };
                node.put(pe, cb, &vec![0u8; cbn as usize])?;
                let heap = match &memory {
                    Memory::Alloc(s) if !heap_windows => {
                        let _ = s;
                        None
                    }
                    Memory::Shared(_, true) if me != 0 => None,
                    Memory::Shared(_, true) => {
                        let total: u64 = contig_sizes.iter().flatten().sum();
                        match node.malloc(total.max(1)) {
                            Ok(a) => {
                                node.put(pe, a, &vec![0u8; total as usize])?;
                                Some(a)
                            }
                            Err(_) => None,
                        }
                    }
                    Memory::Alloc(s) | Memory::Shared(s, false) => {
                        match node.malloc((*s).max(1) as u64) {
                            Ok(a) => {
                                node.put(pe, a, &vec![0u8; *s])?;
                                Some(a)
                            }
                            Err(_) => None,
                        }
                    }
                    // The window owns the given memory until free, so it
                    // may live in the heap meanwhile (copied in here, out
                    // at free): origins then load and store it directly
                    // instead of paying a CMA system call per operation.
                    Memory::Given(v) if heap_windows => match node.malloc(v.len().max(1) as u64) {
                        Ok(a) => {
                            node.put(pe, a, v)?;
                            Some(a)
                        }
                        Err(_) => None,
                    },
                    Memory::Given(_) | Memory::Dynamic => None,
                };
                Ok(Some((pe, heap, cb)))
            })?;
        }
        // Private memory (a created window, an allocated one off the heap,
        // or the engine path).
        let heap = prep.and_then(|p| p.1);
        // (A given Vec is kept even when copied to the heap: it is the
        // window's memory if the engine path is chosen below.)
        let own: Vec<u8> = match (memory, heap) {
            (Memory::Given(v), _) => v,
            (Memory::Dynamic, _) => Vec::new(),
            (Memory::Alloc(_) | Memory::Shared(..), Some(_)) => Vec::new(),
            (Memory::Alloc(s), None) => vec![0u8; s],
            // Never exposed: a shared window without heap memory fails below
            // (or, contiguous, lives in rank 0's block).
            (Memory::Shared(..), None) => Vec::new(),
        };
        let (flags, pe, addr, cb) = match prep {
            Some((pe, heap, cb)) => {
                let (user, addr) = match heap {
                    Some(a) => (0, a.0),
                    None if dynamic => (4 | 8, 0),
                    // A contiguous shared segment other than rank 0's.
                    None if contig_sizes.is_some() && me != 0 => (0, 0),
                    None => (4, own.as_ptr() as u64),
                };
                (1 | if cma { 2 } else { 0 } | user, pe, addr, cb.0)
            }
            None => (0, 0, 0, 0),
        };
        let rec: Vec<u8> = [size as u64, flags, u64::from(pe), addr, cb]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let all = wcomm.allgather(&rec)?;
        let word = |c: &[u8], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c[8 * i..8 * i + 8]);
            u64::from_le_bytes(b)
        };
        let recs: Vec<&[u8]> = all.chunks_exact(40).collect();
        let sizes: Arc<[u64]> = recs.iter().map(|c| word(c, 0)).collect();
        let all_ok = recs.iter().all(|c| word(c, 1) & 1 != 0);
        let any_user = recs.iter().any(|c| word(c, 1) & 4 != 0);
        let all_cma = recs.iter().all(|c| word(c, 1) & 2 != 0);
        let direct_ok = if shared {
            all_ok && !any_user
        } else if dynamic {
            all_ok && all_cma
        } else {
            all_ok && (!any_user || all_cma)
        };
        if direct_ok {
            let mut targets: Vec<Target> = recs
                .iter()
                .map(|c| Target {
                    pe: word(c, 2) as u32,
                    size: word(c, 0),
                    mem: if word(c, 1) & 8 != 0 {
                        Mem::Dynamic
                    } else if word(c, 1) & 4 != 0 {
                        Mem::User(word(c, 3))
                    } else {
                        Mem::Heap(shmem_onesided::SymAddr(word(c, 3)))
                    },
                    cb: shmem_onesided::SymAddr(word(c, 4)),
                })
                .collect();
            if let (Some(sizes), Some(root)) = (&contig_sizes, recs.first()) {
                // Rank r's segment starts where rank r-1's ends.
                let (pe0, mut at) = (word(root, 2) as u32, word(root, 3));
                for (t, len) in targets.iter_mut().zip(sizes) {
                    t.pe = pe0;
                    t.mem = Mem::Heap(shmem_onesided::SymAddr(at));
                    at += len;
                }
            }
            let view = dev.with_node(|node| Ok(node.view()))?;
            let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
            WINDOWS_DIRECT.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                win = id,
                size,
                heap = heap.is_some(),
                "window created (direct same-node path)"
            );
            let own = if heap.is_some() { Vec::new() } else { own };
            let d = direct::Direct::new(wcomm.clone(), id, view, targets, own, heap);
            return Ok(Win {
                comm: wcomm,
                id,
                sizes,
                freed: false,
                direct: Some(Box::new(d)),
                calls: Mutex::new(()),
            });
        }
        // Engine path (or a failed shared window): give back what the
        // direct path took.
        if let Some((_, heap, cb)) = prep {
            dev.with_node(|node| {
                node.free(cb)?;
                if let Some(a) = heap {
                    node.free(a)?;
                }
                Ok(())
            })?;
        }
        if dynamic {
            return Err(Error::InvalidArgument {
                what: "create_dynamic: dynamic windows need a control block in every rank's \
                       symmetric heap and CMA single copy on every rank",
            });
        }
        if shared {
            return Err(Error::InvalidArgument {
                what: "allocate_shared: the segments do not fit in the symmetric heap \
                       (TMX_SHMEM_HEAP_BYTES; contiguous: rank 0's holds them all)",
            });
        }
        let mem = match (heap, given) {
            (Some(_), false) => vec![0u8; size],
            _ => own,
        };
        Win::engine(wcomm, mem, sizes)
    }

    fn engine(wcomm: Comm, mem: Vec<u8>, sizes: Arc<[u64]>) -> Result<Win, Error> {
        let n = wcomm.size() as usize;
        let me = wcomm.rank();
        let cfg = WindowConfig::from_lookup(n as u32, me as u32, mem.len() as u64, env)?;
        let dev = wcomm.dev();
        let id = {
            let mut g = lock(&dev.rma.state);
            let id = g.engine.create_window(cfg)?;
            g.wins.insert(
                id,
                Slot {
                    mem,
                    ctx: wcomm.inner.ctx,
                    coll: wcomm.inner.coll,
                    rank: me as u32,
                    group: Arc::clone(&wcomm.inner.group),
                    results: HashMap::new(),
                    barriers_wanted: 0,
                    barrier: None,
                },
            );
            dev.rma.live.fetch_add(1, Ordering::AcqRel);
            WINDOWS_ENGINE.fetch_add(1, Ordering::Relaxed);
            id
        };
        tracing::info!(
            win = id,
            ctx = wcomm.inner.ctx,
            size = sizes.get(me as usize).copied().unwrap_or(0),
            "window created (engine path)"
        );
        Ok(Win {
            comm: wcomm,
            id,
            sizes,
            freed: false,
            direct: None,
            calls: Mutex::new(()),
        })
    }

    /// `MPI_Win_free`: collective; every rank must have closed its epochs.
    /// Waits until no rank still accesses this one (a barrier over the
    /// window's communicator, then the engine's free: locks released,
    /// acknowledgements in), and hands the memory back.
    pub fn free(mut self) -> Result<Vec<u8>, Error> {
        if let Some(d) = &self.direct {
            d.check_free()?;
            self.comm.barrier()?;
            let mem = d.take_own()?;
            if let Some(t) = d.own_target().copied() {
                let block = d.heap_block();
                self.comm.dev().with_node(|node| {
                    node.free(t.cb)?;
                    if let Some(a) = block {
                        node.free(a)?;
                    }
                    Ok(())
                })?;
            }
            self.freed = true;
            return Ok(mem);
        }
        self.comm.barrier()?;
        self.sync_call(|e, w| e.free_window(w))?;
        self.freed = true;
        Ok(self.remove().unwrap_or_default())
    }

    fn remove(&self) -> Option<Vec<u8>> {
        if self.direct.is_some() {
            return None;
        }
        let dev = self.comm.dev();
        let mut g = lock(&dev.rma.state);
        let s = g.wins.remove(&self.id)?;
        dev.rma.live.fetch_sub(1, Ordering::AcqRel);
        Some(s.mem)
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
    /// every accumulate-like operation (engine path: under the RMA lock;
    /// direct path: under this rank's accumulate lock; heap memory is
    /// copied out and only the bytes `f` changed are written back). MPI's
    /// rules on conflicting local and remote accesses still apply: use it
    /// between epochs, or inside an epoch on bytes nobody else accesses.
    pub fn with_local<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        if let Some(d) = &self.direct {
            return d.with_local(f);
        }
        let mut g = lock(&self.comm.dev().rma.state);
        let slot = g
            .wins
            .get_mut(&self.id)
            .ok_or_else(|| Error::Rma(rma_epoch::Error::NoSuchWindow(self.id)))?;
        Ok(f(&mut slot.mem))
    }

    /// A copy of this rank's window memory.
    pub fn local_copy(&self) -> Result<Vec<u8>, Error> {
        self.with_local(|m| m.to_vec())
    }

    // ------------------------------------------------------ plumbing

    /// Waits (driving progress) until the window has no pending call.
    fn wait_idle(&self) -> Result<(), Error> {
        let dev = self.comm.dev();
        let mut idle = 0u32;
        loop {
            if lock(&dev.rma.state).engine.blocked(self.id).is_none() {
                return Ok(());
            }
            dev.check(false)?;
            idle = idle.wrapping_add(1);
            dev.relax(idle)?;
        }
    }

    /// Runs a synchronization call on the engine and waits for it.
    fn sync_call(
        &self,
        f: impl FnOnce(&mut Engine, WinId) -> Result<CallStatus, rma_epoch::Error>,
    ) -> Result<(), Error> {
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.comm.dev();
        let st = {
            let mut g = lock(&dev.rma.state);
            f(&mut g.engine, self.id)?
        };
        dev.check(false)?;
        if st == CallStatus::Pending {
            self.wait_idle()?;
        }
        Ok(())
    }

    /// Posts an operation; for a read, returns the request its data
    /// completes.
    fn post_op(
        &self,
        read_from: Option<(i32, Option<Vec<u8>>)>,
        f: impl FnOnce(&mut Engine, WinId) -> Result<Posted, rma_epoch::Error>,
    ) -> Result<Option<Request>, Error> {
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.comm.dev();
        let (posted, req) = {
            let mut g = lock(&dev.rma.state);
            let p = f(&mut g.engine, self.id)?;
            let req = match read_from {
                Some((src, into)) => {
                    let (r, c) = request();
                    if let Some(s) = g.wins.get_mut(&self.id) {
                        s.results.insert(p.token.0, (c, src, into));
                    }
                    Some(r)
                }
                None => None,
            };
            (p, req)
        };
        dev.check(false)?;
        if posted.status == CallStatus::Pending {
            self.wait_idle()?;
        }
        Ok(req)
    }

    /// The engine rank of `rank` (`PROC_NULL` maps to the engine's).
    fn target(&self, rank: i32) -> Result<u32, Error> {
        if rank == PROC_NULL {
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

    /// Checks `disp..disp+len` against the target's window.
    fn check_range(&self, rank: i32, disp: u64, len: usize) -> Result<u32, Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL || len == 0 {
            return Ok(t);
        }
        if let Some(d) = &self.direct {
            if d.is_dynamic() {
                // Checked against the target's attached regions at access.
                return Ok(t);
            }
        }
        let size = self.sizes.get(t as usize).copied().unwrap_or(0);
        let end = disp.checked_add(len as u64);
        if end.is_none_or(|e| e > size) {
            return Err(Error::RmaRange {
                target: rank,
                disp,
                len,
                size,
            });
        }
        Ok(t)
    }

    // ----------------------------------------------- synchronization

    /// `MPI_Win_fence(assert)` ([`assert::NOPRECEDE`],
    /// [`assert::NOSUCCEED`], ...).
    pub fn fence(&self, assert: u32) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.fence(assert);
        }
        self.sync_call(|e, w| e.fence(w, assert))
    }

    fn group(&self, group: &[i32]) -> Result<Vec<u32>, Error> {
        let mut g = group
            .iter()
            .map(|r| match self.target(*r)? {
                rma_epoch::PROC_NULL => Err(Error::InvalidRank {
                    rank: *r,
                    size: self.size(),
                }),
                t => Ok(t),
            })
            .collect::<Result<Vec<u32>, Error>>()?;
        g.sort_unstable();
        g.dedup();
        Ok(g)
    }

    /// `MPI_Win_start`: an access epoch to the ranks of `group`.
    pub fn start(&self, group: &[i32], assert: u32) -> Result<(), Error> {
        let g = self.group(group)?;
        if let Some(d) = &self.direct {
            return d.start(g, assert);
        }
        self.sync_call(|e, w| e.start(w, &g, assert))
    }

    /// `MPI_Win_complete`.
    pub fn complete(&self) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.complete();
        }
        self.sync_call(|e, w| e.complete(w))
    }

    /// `MPI_Win_post`: an exposure epoch to the ranks of `group`.
    pub fn post(&self, group: &[i32], assert: u32) -> Result<(), Error> {
        let g = self.group(group)?;
        if let Some(d) = &self.direct {
            return d.post(g, assert);
        }
        self.sync_call(|e, w| e.post(w, &g, assert))
    }

    /// `MPI_Win_wait`.
    pub fn wait(&self) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.wait(true).map(|_| ());
        }
        self.sync_call(|e, w| e.wait(w))
    }

    /// `MPI_Win_test`: `true` if the exposure epoch ended (as `wait`).
    pub fn test(&self) -> Result<bool, Error> {
        if let Some(d) = &self.direct {
            let done = d.wait(false)?;
            if !done {
                self.comm.dev().check(false)?;
            }
            return Ok(done);
        }
        let _one_call = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        let dev = self.comm.dev();
        dev.check(false)?;
        let done = lock(&dev.rma.state).engine.test(self.id)?;
        if done {
            dev.check(false)?;
        }
        Ok(done)
    }

    /// `MPI_Win_lock(lock_type, rank, assert)`.
    pub fn lock(&self, lock_type: LockType, rank: i32, assert: u32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = &self.direct {
            return d.lock(lock_type, t, assert);
        }
        let ex = lock_type == LockType::Exclusive;
        self.sync_call(|e, w| e.lock(w, ex, t, assert))
    }

    /// `MPI_Win_unlock(rank)`: returns once every operation to `rank` is
    /// complete at the target and the lock is released.
    pub fn unlock(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = &self.direct {
            return d.unlock(t);
        }
        self.sync_call(|e, w| e.unlock(w, t))
    }

    /// `MPI_Win_lock_all(assert)`: a shared lock on every rank.
    pub fn lock_all(&self, assert: u32) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.lock_all(assert);
        }
        self.sync_call(|e, w| e.lock_all(w, assert))
    }

    /// `MPI_Win_unlock_all`.
    pub fn unlock_all(&self) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.unlock_all();
        }
        self.sync_call(|e, w| e.unlock_all(w))
    }

    /// `MPI_Win_flush(rank)`: operations to `rank` are complete there.
    pub fn flush(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = &self.direct {
            return d.flush("flush", Some(t));
        }
        self.sync_call(|e, w| e.flush(w, t))
    }

    /// `MPI_Win_flush_local(rank)`: operations to `rank` are complete here
    /// (origin buffers reusable, reads delivered).
    pub fn flush_local(&self, rank: i32) -> Result<(), Error> {
        let t = self.target(rank)?;
        if t == rma_epoch::PROC_NULL {
            return Ok(());
        }
        if let Some(d) = &self.direct {
            return d.flush("flush_local", Some(t));
        }
        self.sync_call(|e, w| e.flush_local(w, t))
    }

    /// `MPI_Win_flush_all`.
    pub fn flush_all(&self) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.flush("flush_all", None);
        }
        self.sync_call(|e, w| e.flush_all(w))
    }

    /// `MPI_Win_flush_local_all`.
    pub fn flush_local_all(&self) -> Result<(), Error> {
        if let Some(d) = &self.direct {
            return d.flush("flush_local_all", None);
        }
        self.sync_call(|e, w| e.flush_local_all(w))
    }

    /// `MPI_Win_sync`: a full memory barrier (SeqCst fence) between this
    /// process's earlier and later accesses to the window, and one progress
    /// pass.
    pub fn sync(&self) -> Result<(), Error> {
        std::sync::atomic::fence(Ordering::SeqCst);
        self.comm.dev().check(false)
    }

    // ---------------------------------------------------- operations

    /// `MPI_Put` of `data` at byte displacement `disp` of `target`. The
    /// data is copied at once (the origin buffer is free on return); it is
    /// complete at the target at the closing synchronization.
    pub fn put(&self, target: i32, disp: u64, data: &[u8]) -> Result<(), Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(d) = &self.direct {
            return if t == rma_epoch::PROC_NULL {
                Ok(())
            } else {
                d.put(t, disp, data)
            };
        }
        self.post_op(None, |e, w| e.put(w, t, disp, data))?;
        Ok(())
    }

    /// `MPI_Put` with datatypes: `origin_count` elements of `origin_type`
    /// read from `origin`, written as `target_count` elements of
    /// `target_type` starting at byte displacement `disp` of `target`
    /// (both committed; their sizes must match). The origin is packed
    /// once; each contiguous block of the target layout becomes one put
    /// (so a fine-grained target type costs one op per block).
    #[allow(clippy::too_many_arguments)]
    pub fn put_typed(
        &self,
        target: i32,
        disp: u64,
        origin: &[u8],
        origin_type: &crate::Datatype,
        origin_count: i64,
        target_type: &crate::Datatype,
        target_count: i64,
    ) -> Result<(), Error> {
        let total = origin_type.pack_size(origin_count)?;
        if target_type.pack_size(target_count)? != total {
            return Err(Error::InvalidArgument {
                what: "put_typed: origin and target describe different numbers of bytes",
            });
        }
        let t = self.target(target)?;
        if t == rma_epoch::PROC_NULL || total == 0 {
            return Ok(());
        }
        let mut packed = vec![0u8; total];
        origin_type.pack_part(origin, origin_count, 0, &mut packed)?;
        let size = self.sizes.get(t as usize).copied().unwrap_or(0);
        let avail = size.checked_sub(disp).ok_or_else(|| Error::RmaRange {
            target,
            disp,
            len: total,
            size,
        })?;
        let avail = usize::try_from(avail).unwrap_or(usize::MAX);
        let segs: Vec<(usize, usize)> = target_type
            .segments(avail, target_count, 0, total)
            .map_err(|_| Error::RmaRange {
                target,
                disp,
                len: total,
                size,
            })?
            .collect();
        let mut off = 0;
        for (start, len) in segs {
            let piece = packed.get(off..off + len).ok_or_else(|| Error::Truncated {
                need: off + len,
                have: total,
            })?;
            self.put(target, disp + start as u64, piece)?;
            off += len;
        }
        Ok(())
    }

    /// `MPI_Rput`: as [`Win::put`]; the request is locally complete at once
    /// (the data was copied), remote completion is by flush or unlock.
    pub fn rput(&self, target: i32, disp: u64, data: &[u8]) -> Result<Request, Error> {
        self.put(target, disp, data)?;
        Ok(Request::completed(Status::new(target, ANY_TAG, data.len())))
    }

    /// `MPI_Get`/`MPI_Rget` of `len` bytes at `disp` of `target`: the
    /// request completes with the data as its buffer
    /// ([`Request::take_buffer`]), at the latest at the closing
    /// synchronization (or a `flush_local`).
    pub fn get(&self, target: i32, disp: u64, len: usize) -> Result<Request, Error> {
        let t = self.check_range(target, disp, len)?;
        if let Some(d) = &self.direct {
            return if t == rma_epoch::PROC_NULL {
                Ok(direct::completed_read(target, Vec::new()))
            } else {
                d.get(t, disp, len)
            };
        }
        self.read(target, |e, w| e.get(w, t, disp, len))
    }

    /// `MPI_Get`/`MPI_Rget` into an origin buffer: reads `buf.len()` bytes
    /// at `disp` of `target` into `buf`, which the request owns until it
    /// completes and hands back by [`Request::take_buffer`] (so a loop of
    /// reads reuses one buffer instead of allocating one per read). On the
    /// same-node direct path the request is complete on return.
    pub fn get_into(&self, target: i32, disp: u64, mut buf: Vec<u8>) -> Result<Request, Error> {
        let len = buf.len();
        let t = self.check_range(target, disp, len)?;
        if let Some(d) = &self.direct {
            if t == rma_epoch::PROC_NULL {
                buf.clear();
            } else {
                d.get_into(t, disp, &mut buf)?;
            }
            return Ok(direct::completed_read(target, buf));
        }
        let r = self.post_op(Some((target, Some(buf))), |e, w| e.get(w, t, disp, len))?;
        r.ok_or_else(|| Error::Abandoned)
    }

    /// `MPI_Rget`: the same as [`Win::get`] (both return a request).
    pub fn rget(&self, target: i32, disp: u64, len: usize) -> Result<Request, Error> {
        self.get(target, disp, len)
    }

    fn read(
        &self,
        target: i32,
        f: impl FnOnce(&mut Engine, WinId) -> Result<Posted, rma_epoch::Error>,
    ) -> Result<Request, Error> {
        let r = self.post_op(Some((target, None)), f)?;
        r.ok_or_else(|| Error::Abandoned)
    }

    /// `MPI_Accumulate`: `target[disp..] = target[disp..] op data` element
    /// by element (`data` holds whole elements of `elem`), atomically per
    /// element.
    pub fn accumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<(), Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(d) = &self.direct {
            if t != rma_epoch::PROC_NULL {
                d.accumulate(t, disp, data, elem, op, false)?;
            }
            return Ok(());
        }
        self.post_op(None, |e, w| e.accumulate(w, t, disp, data, elem, op))?;
        Ok(())
    }

    /// `MPI_Raccumulate`: as [`Win::accumulate`], with a request that is
    /// locally complete at once.
    pub fn raccumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        self.accumulate(target, disp, data, elem, op)?;
        Ok(Request::completed(Status::new(target, ANY_TAG, data.len())))
    }

    /// `MPI_Get_accumulate` (and `MPI_Rget_accumulate`): accumulates
    /// `data` and returns the old contents as the request's buffer.
    /// [`AccOp::NoOp`] makes it an atomic read.
    pub fn get_accumulate(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(d) = &self.direct {
            return self.direct_fetch(d, target, t, disp, data, elem, op, false);
        }
        self.read(target, |e, w| e.get_accumulate(w, t, disp, data, elem, op))
    }

    /// `MPI_Fetch_and_op` on one element: `data` is one `elem`; the old
    /// value is the request's buffer.
    pub fn fetch_and_op(
        &self,
        target: i32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, data.len())?;
        if let Some(d) = &self.direct {
            return self.direct_fetch(d, target, t, disp, data, elem, op, true);
        }
        self.read(target, |e, w| e.fetch_and_op(w, t, disp, data, elem, op))
    }

    /// `MPI_Compare_and_swap` on one element: stores `origin` if the
    /// target equals `compare`; the old value is the request's buffer.
    pub fn compare_and_swap(
        &self,
        target: i32,
        disp: u64,
        origin: &[u8],
        compare: &[u8],
        elem: ElemType,
    ) -> Result<Request, Error> {
        let t = self.check_range(target, disp, origin.len())?;
        if let Some(d) = &self.direct {
            if t == rma_epoch::PROC_NULL {
                return Ok(direct::completed_read(target, Vec::new()));
            }
            let old = d.compare_and_swap(t, disp, origin, compare, elem)?;
            return Ok(direct::completed_read(target, old));
        }
        self.read(target, |e, w| {
            e.compare_and_swap(w, t, disp, origin, compare, elem)
        })
    }

    /// Get-accumulate and fetch-and-op on the direct path.
    #[allow(clippy::too_many_arguments)]
    fn direct_fetch(
        &self,
        d: &direct::Direct,
        target: i32,
        t: u32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
        one: bool,
    ) -> Result<Request, Error> {
        if one && data.len() != elem.size() {
            return Err(Error::Rma(rma_epoch::Error::InvalidAccumulate {
                op,
                elem,
                len: data.len(),
            }));
        }
        if t == rma_epoch::PROC_NULL {
            return Ok(direct::completed_read(target, Vec::new()));
        }
        let old = d.accumulate(t, disp, data, elem, op, true)?;
        Ok(direct::completed_read(target, old.unwrap_or_default()))
    }

    /// Waits for a request of this window's operations (`MPI_Wait` with
    /// this device's progress).
    pub fn wait_request(&self, req: &mut Request) -> Result<Status, Error> {
        self.comm.wait(req)
    }

    /// The engine's counters of this window (ops issued, locks, packets,
    /// target-side applications, ...).
    pub fn counters(&self) -> Result<rma_epoch::Counters, Error> {
        if let Some(d) = &self.direct {
            let (ops, _) = d.ops();
            return Ok(rma_epoch::Counters {
                ops_issued: ops,
                ..Default::default()
            });
        }
        let g = lock(&self.comm.dev().rma.state);
        Ok(g.engine.counters(self.id)?.clone())
    }
}

impl Drop for Win {
    /// Dropping a window that was not freed forgets its memory locally
    /// (with a warning): `MPI_Win_free` is collective, so only
    /// [`Win::free`] can end a window properly.
    /// A direct window's heap blocks stay allocated (other ranks may still
    /// access them): a leak, with the same warning.
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        if self.direct.is_some() || self.remove().is_some() {
            tracing::warn!(win = self.id, "window dropped without Win::free");
        }
    }
}

// Compile-time check: windows may be shared between threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Win>();
};

/// One rank's segment of a [`SharedWin`], as `MPI_Win_shared_query`
/// reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedRegion {
    /// The rank whose segment this is.
    pub rank: i32,
    /// Its size in bytes.
    pub size: u64,
    /// Its node index (the shmem PE whose symmetric heap holds it).
    pub pe: u32,
    /// Its offset in that PE's symmetric heap.
    pub offset: u64,
}

/// A shared-memory window (`MPI_Win_allocate_shared` +
/// `MPI_Win_shared_query`): every rank's segment lives in its own
/// symmetric heap of the node segment (`shmem_onesided::Node::malloc`;
/// size limit `TMX_SHMEM_HEAP_BYTES` per rank), and every rank of the
/// communicator reads and writes any segment directly, by load/store, with
/// no message and no target involvement.
///
/// adi has no `unsafe`, so the access is through the transport's safe
/// copy and atomic API ([`SharedWin::write`], [`SharedWin::read`],
/// [`SharedWin::fetch_add_u64`], [`SharedWin::compare_exchange_u64`], ...)
/// rather than a raw pointer; bounds are checked against the segment.
///
/// It is also a full RMA window on the direct path ([`SharedWin::win`]):
/// fence (with asserts), PSCW, lock/lock_all, flush and every operation
/// work on it, and their effects are the loads and stores of the segments
/// (a put then a flush is visible to the target's load after a
/// synchronization, as MPI's unified memory model says). A shared window
/// always takes the direct path, whatever `TMX_RMA_DIRECT` says.
///
/// **Layout:** by default (MPI's `alloc_shared_noncontig = false`) the
/// segments are contiguous: rank r's starts where rank r-1's ends, all in
/// one block of window rank 0's heap, as [`SharedWin::shared_query`]
/// shows; [`SharedWin::allocate_with`] chooses the non-contiguous layout
/// (each segment in its own rank's heap). Accesses are bounded by the
/// segment they name (no pointer arithmetic across segments: adi has no
/// raw pointers).
#[derive(Debug)]
pub struct SharedWin {
    win: Win,
    regions: Vec<SharedRegion>,
    freed: bool,
}

impl Win {
    /// `MPI_Win_allocate_shared`: see [`SharedWin`]. Collective over
    /// `comm`, whose ranks must all be on this node (they are: there is no
    /// inter-node transport yet).
    pub fn allocate_shared(comm: &Comm, size: usize) -> Result<SharedWin, Error> {
        SharedWin::allocate(comm, size)
    }
}

impl SharedWin {
    /// `MPI_Win_allocate_shared` of `size` zeroed bytes on this rank.
    pub fn allocate(comm: &Comm, size: usize) -> Result<SharedWin, Error> {
        SharedWin::allocate_with(comm, size, true)
    }

    /// `MPI_Win_allocate_shared` with the `alloc_shared_noncontig` info key:
    /// `contiguous` (MPI's default, what [`SharedWin::allocate`] does) puts
    /// every rank's segment right after the previous rank's, in one block
    /// of window rank 0's symmetric heap (which must hold them all); not
    /// contiguous, each segment lives in its own rank's heap (each rank's
    /// heap holds only its own).
    pub fn allocate_with(comm: &Comm, size: usize, contiguous: bool) -> Result<SharedWin, Error> {
        let win = Win::build(comm, Memory::Shared(size, contiguous))?;
        let targets = win.direct.as_ref().map(|d| d.targets()).unwrap_or(&[]);
        let regions = targets
            .iter()
            .enumerate()
            .map(|(r, t)| SharedRegion {
                rank: r as i32,
                pe: t.pe,
                offset: match t.mem {
                    Mem::Heap(a) => a.0,
                    Mem::User(_) | Mem::Dynamic => 0,
                },
                size: t.size,
            })
            .collect();
        tracing::info!(size, "shared window allocated");
        Ok(SharedWin {
            win,
            regions,
            freed: false,
        })
    }

    /// The window as an RMA window: fence, PSCW, locks, flush, put, get,
    /// accumulate, ... on the shared segments (displacements are offsets
    /// in the target's segment).
    pub fn win(&self) -> &Win {
        &self.win
    }

    /// `MPI_Win_shared_query(rank)`: where `rank`'s segment is and how big.
    pub fn shared_query(&self, rank: i32) -> Result<SharedRegion, Error> {
        usize::try_from(rank)
            .ok()
            .and_then(|r| self.regions.get(r).copied())
            .ok_or_else(|| Error::InvalidRank {
                rank,
                size: self.win.comm.size(),
            })
    }

    /// This rank in the window's group.
    pub fn rank(&self) -> i32 {
        self.win.comm.rank()
    }

    /// Ranks in the window's group.
    pub fn size(&self) -> i32 {
        self.win.comm.size()
    }

    fn range(&self, rank: i32, offset: u64, len: usize) -> Result<SharedRegion, Error> {
        let r = self.shared_query(rank)?;
        match offset.checked_add(len as u64) {
            Some(end) if end <= r.size => Ok(r),
            _ => Err(Error::RmaRange {
                target: rank,
                disp: offset,
                len,
                size: r.size,
            }),
        }
    }

    /// Stores `data` at `offset` of `rank`'s segment (complete on return).
    pub fn write(&self, rank: i32, offset: u64, data: &[u8]) -> Result<(), Error> {
        let r = self.range(rank, offset, data.len())?;
        let at = shmem_onesided::SymAddr(r.offset + offset);
        self.win
            .comm
            .dev()
            .with_node(|node| Ok(node.put(r.pe, at, data)?))
    }

    /// Loads `buf.len()` bytes at `offset` of `rank`'s segment.
    pub fn read(&self, rank: i32, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let r = self.range(rank, offset, buf.len())?;
        let at = shmem_onesided::SymAddr(r.offset + offset);
        self.win
            .comm
            .dev()
            .with_node(|node| Ok(node.get(r.pe, at, buf)?))
    }

    fn atomic<T>(
        &self,
        rank: i32,
        offset: u64,
        f: impl FnOnce(&std::sync::atomic::AtomicU64) -> T,
    ) -> Result<T, Error> {
        let r = self.range(rank, offset, 8)?;
        let at = shmem_onesided::SymAddr(r.offset + offset);
        self.win
            .comm
            .dev()
            .with_node(|node| Ok(f(node.atomic_u64(r.pe, at)?)))
    }

    /// Atomic load of the `u64` at `offset` (8-byte aligned) of `rank`'s
    /// segment.
    pub fn load_u64(&self, rank: i32, offset: u64) -> Result<u64, Error> {
        self.atomic(rank, offset, |a| a.load(Ordering::SeqCst))
    }

    /// Atomic store.
    pub fn store_u64(&self, rank: i32, offset: u64, v: u64) -> Result<(), Error> {
        self.atomic(rank, offset, |a| a.store(v, Ordering::SeqCst))
    }

    /// Atomic fetch-and-add (wrapping); returns the old value.
    pub fn fetch_add_u64(&self, rank: i32, offset: u64, v: u64) -> Result<u64, Error> {
        self.atomic(rank, offset, |a| a.fetch_add(v, Ordering::SeqCst))
    }

    /// Atomic compare-and-swap: `Ok(Ok(old))` if it stored `new`,
    /// `Ok(Err(actual))` if the value was not `current`.
    pub fn compare_exchange_u64(
        &self,
        rank: i32,
        offset: u64,
        current: u64,
        new: u64,
    ) -> Result<Result<u64, u64>, Error> {
        self.atomic(rank, offset, |a| {
            a.compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
        })
    }

    /// `MPI_Win_sync`: a full memory barrier between this process's
    /// earlier and later accesses to the window.
    pub fn sync(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// `MPI_Win_sync`, `MPI_Barrier`, `MPI_Win_sync`: after it, every
    /// rank's stores before the barrier are visible to every rank's loads.
    pub fn barrier(&self) -> Result<(), Error> {
        self.sync();
        self.win.comm.barrier()?;
        self.sync();
        Ok(())
    }

    /// `MPI_Win_free`: collective; every rank must have closed its RMA
    /// epochs. A barrier (no rank accesses the segments any more), then
    /// this rank's segment goes back to its heap.
    pub fn free(mut self) -> Result<(), Error> {
        self.freed = true;
        let comm = self.win.comm.clone();
        let win = std::mem::replace(&mut self.win, Win::null(comm));
        win.free().map(|_| ())
    }
}

impl Drop for SharedWin {
    /// A shared window dropped without [`SharedWin::free`] keeps its
    /// segment (other ranks may still access it): a leak, with a warning.
    fn drop(&mut self) {
        if !self.freed {
            tracing::warn!("shared window dropped without SharedWin::free: segment leaked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorClass;

    #[test]
    fn window_id_is_read_from_the_header() {
        let h = tm_proto::rma::RmaHeader::new(tm_proto::rma::RmaKind::Put, 0x0102_0304);
        assert_eq!(engine_win_of_send(&h.to_bytes()), 0x0102_0304);
        assert_eq!(engine_win_of_send(&[1, 2, 3]), u32::MAX);
    }

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
