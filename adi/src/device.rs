//! The device: transport choice, the operation table and the progress engine.
//!
//! "Thin" in the sense of issue #6: this module holds no matching and no
//! transport logic. Matching, protocols (inline / eager / rendezvous) and
//! self-sends live in `shmem_onesided::Endpoint` (which matches through
//! `tm-match`); the device chooses a transport per peer ([`choose_route`]),
//! starts operations on it, and turns the endpoint's completion feed
//! (`Endpoint::take_finished`) into completed [`Request`]s. An operation
//! the endpoint finishes inside its call (an inline, eager or self send; a
//! receive whose message had arrived) is born complete instead: no
//! operation-table entry, and for a plain success no shared slot
//! ([`Request::ready_with_buffer`]).
//!
//! # Locks (paper §6.3: per-structure locks, no global lock around waits)
//!
//! - `core` (`CoreCell<Option<Core>>`: a `Mutex` under
//!   [`ThreadLevel::Multiple`], owned by the initializing thread and
//!   reached without a lock under [`ThreadLevel::Funneled`]): the endpoint
//!   and the table of outstanding operations. Held only for *non-blocking*
//!   endpoint calls
//!   (start an operation, one progress pass, take completions, cancel,
//!   probe). Every wait loop runs outside it: a waiter calls
//!   `Device::check`, which takes the lock for one pass and releases it.
//! - each request's own state (see [`mod@crate::request`]): completers run
//!   *after* `core` is released, so unpacking a datatype receive never
//!   holds up other threads. The one thing done for a request under `core`
//!   is completing a plain receive or send of the waiting thread's own
//!   requests in place (`Device::harvest`): a few moves into a request the
//!   caller holds, no other lock, no user code.
//! - `bsend` (the attached buffer), `contexts` (free context ids),
//!   `staging` (a pool of receive staging buffers), `pmi`: each its own
//!   lock. Order when nested: `bsend` → `core`; nothing else nests.
//!
//! A blocking `Device::check` returns as soon as any request completes,
//! whether this thread completed it or another one did (a completion epoch
//! counter), and otherwise after a bounded number of idle passes (spurious
//! returns are allowed by the [`Progress`] contract; waits loop).

use crate::attr::{ANY_SOURCE, ANY_TAG, PROC_NULL};
use crate::core_cell::{CoreCell, ThreadLevel};
use crate::request::{
    request_into, Completer, Outcome, Progress, ProgressOn, Request, SparePairs, Status,
};
use crate::{Datatype, Error, PlanLimits};
use launcher::{NodeLayout, Pmi};
use shmem_onesided::{
    Endpoint, IdTable, InPlace, Message as EpMessage, RecvFinished, RecvRequest, SendMode,
    SendRequest, Started, Status as EpStatus,
};
use std::collections::BTreeMap;
use std::fmt;
use std::mem;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tm_proto::MatchSpec;

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

/// A blocking exact-source receive that found nothing spins this many times
/// on its source's ring (lock-free, [`shmem_onesided::ArrivalWatch`])
/// before its next progress pass under the core lock.
const WATCH_SPINS: u32 = 32;
/// Of those, the first this many look without a PAUSE in between.
const WATCH_EAGER: u32 = 8;
/// Looks at its source's ring that a blocking datatype receive waiting
/// for its message in place ([`Device::recv_in_place`]) takes before it
/// receives the general way: about 50 µs of spinning (a PAUSE is ~27 ns on
/// the project's VM), many round trips of a ping-pong.
const IN_PLACE_SPINS: u32 = 2048;
/// Default of [`ENV_SPIN`] when the node has at least as many CPUs as
/// local ranks (otherwise the default is 0). Busy-polling is what gives
/// MPICH-like latency between processes on different cores; yielding after
/// 64 passes made a 1-byte ping-pong about 5x slower on a loaded 2-core
/// machine.
pub const DEFAULT_SPIN: u32 = 4096;
/// Idle passes of a blocking check, after its spinning ones, before it
/// returns (a spurious return; waits loop).
const YIELD_PASSES: u32 = 256;
/// Staging buffers kept for reuse (two windows of 64 datatype operations
/// in flight: a window's receives and its sends), and the bytes of
/// capacity they may hold in all (so also the largest one kept). With 8
/// kept, a 64-message window of `irecv_typed` allocated 56 buffers per
/// window and freed them (the adi README, Speed, "Non-contiguous sends").
const STAGING_KEEP: usize = 128;
const STAGING_BYTES: usize = 64 << 20;

/// The staging pool: buffers and the sum of their capacities.
#[derive(Debug, Default)]
struct StagingPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

/// How this rank reaches a peer: the one place that chooses a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The peer is this rank: a local copy, made by the endpoint through the
    /// same matcher as every other message (so `ANY_SOURCE` ordering and
    /// non-overtaking hold for self-messages too).
    SelfCopy {
        /// This rank's index on the node.
        local: u32,
    },
    /// Same node: `shmem-onesided`.
    Shmem {
        /// The peer's index on the node.
        local: u32,
    },
    /// Another node. No transport yet (verbs-tm comes in a later issue):
    /// init fails with [`Error::NoInterNodeTransport`].
    Remote {
        /// The peer's node.
        node: usize,
    },
}

/// The transport for world rank `peer`, given the node layout. Adding the
/// inter-node transport changes this function (and `Device::local_of`,
/// which dispatches on its result) and nothing else.
pub fn choose_route(layout: &NodeLayout, peer: usize) -> Route {
    let local_of = |r: usize| {
        let me = layout.node_of(r);
        (0..r).filter(|q| layout.node_of(*q) == me).count() as u32
    };
    if peer == layout.rank() {
        Route::SelfCopy {
            local: local_of(peer),
        }
    } else if layout.is_local(peer) {
        Route::Shmem {
            local: local_of(peer),
        }
    } else {
        Route::Remote {
            node: layout.node_of(peer).unwrap_or(usize::MAX),
        }
    }
}

/// Every peer's route; fails on the first peer no transport reaches.
pub fn routes(layout: &NodeLayout, size: usize) -> Result<Vec<Route>, Error> {
    let mut v = Vec::with_capacity(size);
    for peer in 0..size {
        let r = choose_route(layout, peer);
        if let Route::Remote { node } = r {
            return Err(Error::NoInterNodeTransport {
                rank: peer as u32,
                node,
                my_node: layout.my_node(),
            });
        }
        v.push(r);
    }
    Ok(v)
}

/// A communicator's group: communicator rank → world rank and back.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) world: Vec<u32>,
    /// World rank → communicator rank (`-1`: not a member).
    pub(crate) of_world: Vec<i32>,
    /// Communicator rank = world rank for every world rank (the world's
    /// group and its duplicates): operations need not keep the group.
    identity: bool,
}

impl Group {
    pub(crate) fn new(world: Vec<u32>, world_size: usize) -> Group {
        let mut of_world = vec![-1; world_size];
        for (i, w) in world.iter().enumerate() {
            if let Some(slot) = of_world.get_mut(*w as usize) {
                *slot = i as i32;
            }
        }
        let identity =
            world.len() == world_size && world.iter().enumerate().all(|(i, w)| *w as usize == i);
        Group {
            world,
            of_world,
            identity,
        }
    }

    /// The group an operation keeps for its completion: `None` for an
    /// identity group (no reference counting per operation).
    fn kept(group: &Arc<Group>) -> Option<Arc<Group>> {
        (!group.identity).then(|| Arc::clone(group))
    }

    fn comm_rank_of(&self, world: u32) -> i32 {
        self.of_world.get(world as usize).copied().unwrap_or(-1)
    }
}

/// Protocol counters of the ADI (the transport keeps its own:
/// `shmem_onesided::Counters`). Printed at finalize with
/// `TMX_ADI_COUNTERS=1`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counters {
    /// Sends to this rank itself (local copy through the matcher).
    pub self_sends: u64,
    /// Sends to another rank of the node (shmem-onesided).
    pub shmem_sends: u64,
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
    /// (no staging copy; see the README's "Datatype receives unpacked in
    /// place").
    pub unpacked_in_place: u64,
    /// Probes (`probe`, `iprobe`, `mprobe`, `improbe`) that found a message.
    pub probes_matched: u64,
    /// Cancels the transport accepted.
    pub cancelled: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "self_sends={} shmem_sends={} sync_sends={} ready_sends={} buffered_sends={} \
             bsend_full={} proc_null_ops={} recvs={} recv_fast_hits={} truncations={} \
             packed_sends={} unpacked_recvs={} unpacked_in_place={} probes_matched={} \
             cancelled={}",
            self.self_sends,
            self.shmem_sends,
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
            self.cancelled
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
    cancelled
);

/// The endpoint's mode of a send. A ready send may be sent as a standard
/// one (MPI allows it): the endpoint has no cheaper path for "receive
/// known posted".
fn endpoint_mode(mode: Mode) -> SendMode {
    match mode {
        Mode::Synchronous => SendMode::Synchronous,
        Mode::Standard | Mode::Ready => SendMode::Standard,
    }
}

/// The trace event of a started send ([`Device::start_send`]).
#[cold]
#[inline(never)]
fn trace_sent(dest: u32, tag: u32, context: u32, len: usize, mode: Mode, at_once: bool) {
    tracing::debug!(dest, tag, context, len, ?mode, at_once, "send started");
}

/// Records a receive the endpoint did not finish in its call: an
/// operation-table entry and the request the caller waits on.
#[inline(always)]
fn record_recv(core: &mut Core, rreq: RecvRequest, into: RecvInto, group: &Arc<Group>) -> Request {
    let mut req = Request::null();
    record_recv_into(core, rreq, into, group, &mut req);
    req
}

/// [`record_recv`] making `out` the request (in place: built aside and
/// assigned, it was copied through the stack).
#[inline(always)]
fn record_recv_into(
    core: &mut Core,
    rreq: RecvRequest,
    into: RecvInto,
    group: &Arc<Group>,
    out: &mut Request,
) {
    let id = rreq.id();
    let completer = request_into(&mut core.spares, Some(id), out);
    let op = Op {
        kind: OpKind::Recv {
            rreq,
            into,
            group: Group::kept(group),
        },
        completer,
    };
    match core.ops.vacant(id) {
        Some(slot) => slot.fill(op),
        None => core.ops.insert(id, op),
    }
}

/// Records a send the endpoint did not finish in its call: an
/// operation-table entry and the request the caller waits on.
fn record_send(core: &mut Core, sreq: SendRequest, len: usize, bsend: Option<usize>) -> Request {
    let mut req = Request::null();
    record_send_into(core, sreq, len, bsend, &mut req);
    req
}

/// [`record_send`] making `out` the request in place.
#[inline(always)]
fn record_send_into(
    core: &mut Core,
    sreq: SendRequest,
    len: usize,
    bsend: Option<usize>,
    out: &mut Request,
) {
    let id = sreq.id();
    let completer = request_into(&mut core.spares, Some(id), out);
    let op = Op {
        kind: OpKind::Send {
            sreq,
            len,
            bsend,
            cancelled: false,
        },
        completer,
    };
    match core.ops.vacant(id) {
        Some(slot) => slot.fill(op),
        None => core.ops.insert(id, op),
    }
}

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

/// The status and error of a datatype receive from its unpack error and
/// the receive's MPI result: an unpack error wins (with the receive's
/// status, if it had one); a truncation keeps the status of what was
/// delivered; another error has the empty status.
pub(crate) fn typed_result(
    unpack_error: Option<Error>,
    res: Result<Status, Error>,
) -> (Status, Option<Error>) {
    match (unpack_error, res) {
        (Some(e), r) => (r.unwrap_or(Status::EMPTY), Some(e)),
        (None, Ok(s)) => (s, None),
        (None, Err(Error::RecvTruncated { status, msg_len })) => {
            (status, Some(Error::RecvTruncated { status, msg_len }))
        }
        (None, Err(e)) => (Status::EMPTY, Some(e)),
    }
}

/// Where a receive's data goes once the endpoint delivers it.
#[derive(Debug)]
pub(crate) enum RecvInto {
    /// The endpoint's buffer is the user's: hand it back as is.
    Owned,
    /// The endpoint filled a staging buffer with the packed stream: unpack
    /// it into the user's buffer (boxed: the plain receive's operation and
    /// its drop stay small).
    Typed(Box<TypedInto>),
}

/// Where a datatype receive unpacks ([`RecvInto::Typed`]).
#[derive(Debug)]
pub(crate) struct TypedInto {
    /// The user's buffer (empty while `slot` holds it).
    pub(crate) user: Vec<u8>,
    /// The operation's own clone of the datatype.
    pub(crate) datatype: Datatype,
    pub(crate) count: i64,
    /// A receive made with an in-place consumer
    /// ([`Endpoint::irecv_or_done_in_place`]): the user's buffer, shared
    /// with the consumer, and what its unpack returned if it ran.
    pub(crate) slot: Option<Arc<InPlaceSlot>>,
}

/// The user's buffer of a datatype receive that the endpoint may unpack
/// into where the payload lies (see [`TypedInto::slot`]), and the unpack's
/// result once it has.
#[derive(Debug, Default)]
pub(crate) struct InPlaceSlot(Mutex<InPlaceState>);

#[derive(Debug, Default)]
struct InPlaceState {
    user: Vec<u8>,
    unpacked: Option<Result<usize, Error>>,
}

impl InPlaceSlot {
    /// A slot holding `user`.
    pub(crate) fn new(user: Vec<u8>) -> Arc<Self> {
        Arc::new(InPlaceSlot(Mutex::new(InPlaceState {
            user,
            unpacked: None,
        })))
    }

    /// The consumer the endpoint calls with the payload: unpacks it into
    /// the user's buffer and records the result.
    pub(crate) fn consumer(self: &Arc<Self>, datatype: Datatype, count: i64) -> InPlace {
        let slot = Arc::clone(self);
        Box::new(move |payload: &[u8]| {
            let mut g = lock(&slot.0);
            let st = &mut *g;
            st.unpacked = Some(datatype.unpack_part(payload, &mut st.user, count, 0));
        })
    }
}

impl TypedInto {
    /// The user's buffer, and the consumer's unpack result if the payload
    /// was unpacked in place (then the staging buffer holds nothing).
    fn take_user(self) -> (Vec<u8>, Datatype, i64, Option<Result<usize, Error>>) {
        match self.slot {
            Some(slot) => {
                let mut g = lock(&slot.0);
                let user = mem::take(&mut g.user);
                (user, self.datatype, self.count, g.unpacked.take())
            }
            None => (self.user, self.datatype, self.count, None),
        }
    }
}

#[derive(Debug)]
enum OpKind {
    Send {
        sreq: SendRequest,
        len: usize,
        /// Region of the attached buffer (buffered sends).
        bsend: Option<usize>,
        cancelled: bool,
    },
    Recv {
        rreq: RecvRequest,
        into: RecvInto,
        /// `None`: the identity group.
        group: Option<Arc<Group>>,
    },
}

#[derive(Debug)]
struct Op {
    kind: OpKind,
    completer: Completer,
}

/// An operation taken out of the table, finished outside the lock.
#[derive(Debug)]
enum Finished {
    Send {
        completer: Completer,
        result: Result<Option<Vec<u8>>, Error>,
        len: usize,
        bsend: Option<usize>,
        cancelled: bool,
    },
    Recv {
        completer: Completer,
        result: Result<(EpStatus, Vec<u8>), Error>,
        into: RecvInto,
        /// `None`: the identity group.
        group: Option<Arc<Group>>,
    },
}

/// The operations pending on the endpoint, by its request id.
type OpTable = IdTable<Op>;

#[derive(Debug)]
struct Core {
    ep: Endpoint,
    ops: OpTable,
    /// Spare lists for the endpoint's finished sends and receives.
    sends_done: Vec<(u64, SendDone)>,
    recvs_done: Vec<RecvFinished>,
    /// Spare request slots: given back by completions in place during a
    /// harvest, taken by the next operations started (both under the lock).
    spares: SparePairs,
    /// Pending sends whose owned buffer is the device's (a packed message
    /// of `Comm::isend_typed`): at completion it goes back to the staging
    /// pool instead of to the request ([`Device::keep_staged`]).
    staged: std::collections::HashSet<u64>,
}

/// What `Endpoint::take_finished` reports for a send (as `wait_send`).
type SendDone = shmem_onesided::Result<Option<Vec<u8>>>;

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

/// The attached buffer of buffered sends: first-fit regions of one `Vec`.
#[derive(Debug, Default)]
struct BsendPool {
    buf: Option<Vec<u8>>,
    /// start → length of every region in use.
    used: BTreeMap<usize, usize>,
}

impl BsendPool {
    fn reserve(&mut self, need: usize) -> Result<usize, Error> {
        let cap = self.buf.as_ref().map_or(0, Vec::len);
        let mut at = 0usize;
        let mut largest = 0usize;
        for (&start, &len) in &self.used {
            let gap = start.saturating_sub(at);
            if gap >= need {
                self.used.insert(at, need);
                return Ok(at);
            }
            largest = largest.max(gap);
            at = start + len;
        }
        let tail = cap.saturating_sub(at);
        if tail >= need && self.buf.is_some() {
            self.used.insert(at, need);
            return Ok(at);
        }
        Err(Error::BsendBufferFull {
            need,
            free: largest.max(tail),
            attached: cap,
        })
    }
}

/// Context-id pairs of the default tag layout: `(2k, 2k + 1)` for `k <
/// context_pairs()`.
fn context_pairs() -> usize {
    (tm_proto::TagLayout::DEFAULT.max_context_id() as usize).div_ceil(2)
}

/// The p2p context id of the last pair, which no communicator gets: the
/// device's own traffic (the inline reply calibration at init).
pub(crate) fn internal_context() -> u32 {
    (2 * (context_pairs() - 1)) as u32
}

/// Free context-id pairs: pair `k` is p2p context `2k` and collective
/// context `2k + 1`. Bit set = free on this rank.
#[derive(Debug)]
pub(crate) struct ContextPool {
    pub(crate) free: Vec<u64>,
}

impl ContextPool {
    fn new(pairs: usize) -> ContextPool {
        let words = pairs.div_ceil(64);
        let mut free = vec![u64::MAX; words];
        if pairs % 64 != 0 {
            if let Some(last) = free.last_mut() {
                *last = (1u64 << (pairs % 64)) - 1;
            }
        }
        // Pair 0 is MPI_COMM_WORLD's.
        if let Some(first) = free.first_mut() {
            *first &= !1;
        }
        ContextPool { free }
    }

    pub(crate) fn pairs(&self) -> usize {
        self.free.len() * 64
    }

    pub(crate) fn take(&mut self, k: usize) {
        if let Some(w) = self.free.get_mut(k / 64) {
            *w &= !(1u64 << (k % 64));
        }
    }

    pub(crate) fn release(&mut self, k: usize) {
        if let Some(w) = self.free.get_mut(k / 64) {
            *w |= 1u64 << (k % 64);
        }
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
    /// Node index → world rank.
    local_to_world: Vec<u32>,
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
    /// The largest nonblocking standard send that may complete through
    /// [`Device::send_inline_now`] (the endpoint's inline-with-continuation
    /// limit, `TMX_SHMEM_INLINE_EXT`).
    pub(crate) inline_send_max: usize,
    start: Instant,
    last_alive_ms: AtomicU64,
    /// RMA: the process's `rma_epoch::Engine` and its windows, behind their
    /// own lock (see [`crate::win`]). Lock order: `rma` → `core`.
    pub(crate) rma: crate::win::Rma,
}

/// Data of a send: moved into the endpoint, or read in place.
pub(crate) enum SendData<'a> {
    Owned(Vec<u8>),
    Borrowed(&'a [u8]),
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
    pub(crate) fn new(
        pmi: Pmi,
        ep: Endpoint,
        routes: Vec<Route>,
        local_to_world: Vec<u32>,
        node_name: String,
        level: ThreadLevel,
    ) -> Result<Device, Error> {
        let print_counters = parse_flag(ENV_COUNTERS, std::env::var(ENV_COUNTERS).ok())?;
        // Oversubscribed node (more local ranks than CPUs): busy-polling only
        // steals the CPU from the peer we wait for, so yield at once.
        // The node's online CPUs, not this process's affinity mask: under
        // `tmrun --bind-to core` / `mpiexec -bind-to core` every rank sees one
        // CPU, yet the ranks sit on different CPUs and spinning is right.
        let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
            .ok()
            .flatten()
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from));
        let default_spin = if local_to_world.len() > cpus {
            0
        } else {
            DEFAULT_SPIN
        };
        let spin = parse_count(ENV_SPIN, std::env::var(ENV_SPIN).ok(), default_spin)?;
        tracing::info!(spin, cpus, local = local_to_world.len(), "wait policy");
        let inline_send_max = ep.inline_ext_max();
        let pairs = context_pairs();
        let mut contexts = ContextPool::new(pairs);
        // The last pair is the device's own (`internal_context`).
        contexts.take(pairs - 1);
        Ok(Device {
            world_rank: pmi.rank() as u32,
            world_size: pmi.size() as u32,
            appnum: pmi.appnum(),
            core: CoreCell::new(
                Some(Core {
                    ep,
                    ops: OpTable::default(),
                    sends_done: Vec::new(),
                    recvs_done: Vec::new(),
                    spares: SparePairs::default(),
                    staged: std::collections::HashSet::new(),
                }),
                level,
            ),
            epoch: AtomicU64::new(0),
            routes,
            local_to_world,
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
            inline_send_max,
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

    /// Runs `f` on the transport's node (symmetric heap) under the core
    /// lock: shared-memory windows (`crate::win::SharedWin`).
    pub(crate) fn with_node<T>(
        &self,
        f: impl FnOnce(&mut shmem_onesided::Node) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.with_core(|core| f(core.ep.node_mut()))
    }

    /// The endpoint's rank (node index) of world rank `world`.
    #[inline]
    pub(crate) fn local_of(&self, world: u32) -> Result<u32, Error> {
        match self.routes.get(world as usize) {
            Some(Route::SelfCopy { local }) | Some(Route::Shmem { local }) => Ok(*local),
            Some(Route::Remote { node }) => Err(Error::NoInterNodeTransport {
                rank: world,
                node: *node,
                my_node: 0,
            }),
            None => Err(Error::InvalidRank {
                rank: world as i32,
                size: self.world_size as i32,
            }),
        }
    }

    /// Counts a send by route; only under the core lock.
    fn count_route(&self, world: u32) {
        if world == self.world_rank {
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

    /// Converts an endpoint status into an MPI status for `group` (`None`:
    /// the identity group).
    fn status_of(&self, st: &EpStatus, group: Option<&Group>) -> Status {
        let world = self
            .local_to_world
            .get(st.source as usize)
            .copied()
            .unwrap_or(u32::MAX);
        let rank = match group {
            Some(g) => g.comm_rank_of(world),
            None if world < self.world_size => world as i32,
            None => -1,
        };
        Status::new(rank, st.tag as i32, st.len)
    }

    // ------------------------------------------------------------ sends

    /// Counts a send by its mode (synchronous and ready sends).
    fn count_mode(&self, mode: Mode) {
        match mode {
            Mode::Synchronous => bump(&self.counters.sync_sends),
            Mode::Ready => bump(&self.counters.ready_sends),
            Mode::Standard => {}
        }
    }

    /// Starts a send of `data` to world rank `dest`. The returned request
    /// completes when the endpoint says the send is complete (for a
    /// synchronous send: once the receiver matched it).
    pub(crate) fn start_send(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: SendData<'_>,
        mode: Mode,
        bsend: Option<usize>,
    ) -> Result<Request, Error> {
        let s = match data {
            SendData::Owned(v) => return self.start_send_owned(dest, tag, context, v, mode, bsend),
            SendData::Borrowed(s) => s,
        };
        let local = self.local_of(dest)?;
        let len = s.len();
        let ep_mode = endpoint_mode(mode);
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        let req = match core.ep.isend_borrowed(local, tag, context, s, ep_mode) {
            Ok(sreq) => {
                self.count_route(dest);
                record_send(core, sreq, len, bsend)
            }
            Err(e) => return Err(e.into()),
        };
        drop(g);
        self.sent(dest, tag, context, len, mode, false);
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
        let local = self.local_of(dest)?;
        let len = v.len();
        let ep_mode = endpoint_mode(mode);
        // A send that completes inside the endpoint call (inline, eager,
        // prepost-direct, self) is born complete: no slot, no
        // operation-table entry, nothing for progress to harvest. The lock
        // is taken here rather than through `with_core`, and each outcome
        // is matched where the endpoint returns it and builds its request
        // directly: moving the endpoint's result, then a `(Request, bool)`,
        // through locals cost more than the rest.
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        let req = match core.ep.isend_or_done(local, tag, context, v, ep_mode) {
            Ok(Started::Done(buf)) => {
                self.count_route(dest);
                drop(g);
                let status = Status::new(ANY_SOURCE, ANY_TAG, len);
                self.sent(dest, tag, context, len, mode, true);
                return Ok(Request::ready_with_buffer(status, buf));
            }
            Ok(Started::Pending(sreq)) => {
                self.count_route(dest);
                record_send(core, sreq, len, bsend)
            }
            Err(e) => return Err(e.into()),
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
    /// A send that completes inside the endpoint call (inline, eager,
    /// prepost-direct, self) is born complete: no slot, no operation-table
    /// entry, nothing for progress to harvest. The lock is taken here
    /// rather than through `with_core`. The common case, a send the
    /// endpoint finishes at once, borrows the buffer
    /// (`Endpoint::isend_now`) and stores the request's fields straight
    /// into `out`: moving the buffer through the endpoint call and back,
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
        let local = self.local_of(dest)?;
        let len = v.len();
        let ep_mode = endpoint_mode(mode);
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        if core.ep.isend_now(local, tag, context, &v, ep_mode) {
            self.count_route(dest);
            drop(g);
            self.sent(dest, tag, context, len, mode, true);
            out.set_ready_with_buffer(Status::new(ANY_SOURCE, ANY_TAG, len), v);
            return Ok(());
        }
        match core.ep.isend_or_done(local, tag, context, v, ep_mode) {
            Ok(Started::Done(buf)) => {
                self.count_route(dest);
                drop(g);
                self.sent(dest, tag, context, len, mode, true);
                out.set_ready_with_buffer(Status::new(ANY_SOURCE, ANY_TAG, len), buf);
                return Ok(());
            }
            Ok(Started::Pending(sreq)) => {
                self.count_route(dest);
                record_send_into(core, sreq, len, None, out);
            }
            Err(e) => return Err(e.into()),
        };
        drop(g);
        self.sent(dest, tag, context, len, mode, false);
        Ok(())
    }

    /// A standard send of `data` (at most [`Device::inline_send_max`]
    /// bytes) to world rank `dest`, if it goes inline (with continuation
    /// slots above 40 bytes) into the destination's header ring now
    /// (`Endpoint::isend_inline_now`, `Endpoint::isend_inline_ext_now`),
    /// counted and traced as [`Device::start_send_owned_into`] does;
    /// `false`: nothing was sent (a self-send, a held or full ring, the
    /// device shared between threads, busy or finalized), and the caller
    /// takes the general path. Out of line and small on purpose, one
    /// function per kind of slot: the nonblocking send of a small message
    /// is the part of a window whose stores wait behind the previous ring
    /// slot's line transfer, and inside the general path's frame it made
    /// about 24 more of them (saved registers and spills; adi README, "Stores
    /// per message").
    #[inline]
    pub(crate) fn send_inline_now(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        if data.len() <= shmem_onesided::ring::INLINE_MAX {
            self.send_inline_slot(dest, tag, context, data)
        } else {
            self.send_inline_slots(dest, tag, context, data)
        }
    }

    /// [`Device::send_inline_now`] of at most 40 bytes.
    #[inline(never)]
    fn send_inline_slot(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_inline_with(dest, tag, context, data, |ep, local| {
            ep.isend_inline_now(local, tag, context, data)
        })
    }

    /// [`Device::send_inline_now`] of more than 40 bytes.
    #[inline(never)]
    fn send_inline_slots(&self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_inline_with(dest, tag, context, data, |ep, local| {
            ep.isend_inline_ext_now(local, tag, context, data)
        })
    }

    #[inline(always)]
    fn send_inline_with(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        push: impl FnOnce(&mut Endpoint, u32) -> bool,
    ) -> bool {
        let Some(Route::Shmem { local }) = self.routes.get(dest as usize) else {
            return false;
        };
        let sent = self.core.with_owned(|core| match core {
            Some(core) => push(&mut core.ep, *local),
            None => false,
        });
        if sent != Some(true) {
            return false;
        }
        self.count_route(dest);
        self.sent(dest, tag, context, data.len(), Mode::Standard, true);
        true
    }

    /// A standard send of `len` bytes to world rank `dest` that `fill`
    /// writes straight into the transport, if it completes in the call
    /// (`Endpoint::send_now_with`: inline, or packed into an eager block in
    /// shared memory). `Ok(false)`: nothing was sent (a size or state that
    /// needs the general path, a self-send, or `fill` gave up); the caller
    /// packs into a buffer and sends that. `fill` runs under the core lock.
    pub(crate) fn send_fill_now(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> Result<bool, Error> {
        let local = self.local_of(dest)?;
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        if !core.ep.send_now_with(local, tag, context, len, fill) {
            return Ok(false);
        }
        self.count_route(dest);
        drop(g);
        self.sent(dest, tag, context, len, Mode::Standard, true);
        Ok(true)
    }

    /// A standard send of `data` to world rank `dest` if it completes in
    /// the call (`Endpoint::isend_now`: inline or eager, the data copied
    /// into the transport). `Ok(false)`: nothing was sent (a size or state
    /// that needs the general path, or a self-send).
    ///
    /// `staged`: `data` is a staging buffer just packed, which the caller
    /// reuses once this returns: it is copied into an eager block above
    /// the CMA threshold too (`Endpoint::send_copied_now`), rather than
    /// kept until the receiver's single copy of it.
    pub(crate) fn send_slice_now(
        &self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        staged: bool,
    ) -> Result<bool, Error> {
        let local = self.local_of(dest)?;
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        let sent = if staged {
            core.ep.send_copied_now(local, tag, context, data)
        } else {
            core.ep
                .isend_now(local, tag, context, data, SendMode::Standard)
        };
        if !sent {
            return Ok(false);
        }
        self.count_route(dest);
        drop(g);
        self.sent(dest, tag, context, data.len(), Mode::Standard, true);
        Ok(true)
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

    /// A blocking send of `data` to world rank `dest` (`MPI_Send`,
    /// `MPI_Ssend`, `MPI_Rsend`). When the endpoint completes the send at
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
        let local = self.local_of(dest)?;
        let len = data.len();
        let ep_mode = endpoint_mode(mode);
        // The lock is taken directly (not through `with_core`): the common
        // case (finished in the call) returns no request at all.
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        let pending = match core.ep.send_or_start(local, tag, context, data, ep_mode) {
            Err(e) => return Err(e.into()),
            Ok(Started::Done(())) => {
                self.count_route(dest);
                None
            }
            Ok(Started::Pending(sreq)) => {
                self.count_route(dest);
                Some(record_send(core, sreq, len, None))
            }
        };
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
        let region = match pool.buf.as_mut() {
            Some(b) => &mut b[start..start + data.len()],
            None => {
                return Err(Error::InvalidArgument {
                    what: "no buffer attached",
                })
            }
        };
        region.copy_from_slice(data);
        let from_pool = match pool.buf.as_ref() {
            Some(b) => &b[start..start + data.len()],
            None => {
                return Err(Error::InvalidArgument {
                    what: "no buffer attached",
                })
            }
        };
        // The region stays reserved (and the attached Vec is never resized
        // while attached) until the send completes, so the endpoint may read
        // it in place.
        match self.start_send(
            dest,
            tag,
            context,
            SendData::Borrowed(from_pool),
            Mode::Standard,
            Some(start),
        ) {
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

    pub(crate) fn attach(&self, buf: Vec<u8>) -> Result<(), Error> {
        let mut pool = lock(&self.bsend);
        if pool.buf.is_some() {
            return Err(Error::InvalidArgument {
                what: "a buffer is already attached",
            });
        }
        pool.buf = Some(buf);
        Ok(())
    }

    /// Waits until every buffered send has completed, then hands the buffer
    /// back.
    pub(crate) fn detach(&self) -> Result<Vec<u8>, Error> {
        loop {
            {
                let mut pool = lock(&self.bsend);
                if pool.used.is_empty() {
                    return pool.buf.take().ok_or_else(|| Error::InvalidArgument {
                        what: "no buffer attached",
                    });
                }
            }
            self.check(true)?;
        }
    }

    // --------------------------------------------------------- receives

    /// Takes a staging buffer of exactly `len` bytes (reused when possible);
    /// [`Error::NoMem`] if `len` bytes cannot be had.
    pub(crate) fn staging(&self, len: usize) -> Result<Vec<u8>, Error> {
        let mut pool = lock(&self.staging);
        // A kept buffer large enough, else the warmest one grown: a pool
        // full of small buffers from earlier traffic must not turn every
        // larger request into an allocation (it did: a 4 KiB window after
        // the smaller sizes ran at a quarter of the speed).
        let fit = pool.bufs.iter().rposition(|v| v.capacity() >= len);
        if let Some(i) = fit.or_else(|| pool.bufs.len().checked_sub(1)) {
            let mut v = pool.bufs.swap_remove(i);
            pool.bytes -= v.capacity();
            if v.len() >= len {
                v.truncate(len);
            } else if let Err(e) = crate::mem::grow(&mut v, len, "a staging buffer") {
                pool.bytes += v.capacity();
                pool.bufs.push(v);
                return Err(e);
            }
            return Ok(v);
        }
        drop(pool);
        crate::mem::zeroed(len, "a staging buffer")
    }

    /// Makes the owned buffer of pending send `req` (a packed message the
    /// caller never sees) go back to the staging pool when the send
    /// completes, instead of to the request: a window of `isend_typed` by
    /// CMA (which keeps the buffer until the receiver's FIN) then reuses
    /// its buffers instead of allocating and faulting in new ones every
    /// window. A send already harvested keeps its buffer in its request.
    pub(crate) fn keep_staged(&self, req: &Request) -> Result<(), Error> {
        let Some(id) = req.op() else {
            return Ok(());
        };
        self.with_core(|core| {
            if core.ops.get(id).is_some() {
                core.staged.insert(id);
            }
            Ok(())
        })
    }

    /// Returns a staging buffer to the pool (dropped if the pool is full).
    pub(crate) fn give_back_staging(&self, v: Vec<u8>) {
        let mut pool = lock(&self.staging);
        if pool.bufs.len() < STAGING_KEEP && pool.bytes + v.capacity() <= STAGING_BYTES {
            pool.bytes += v.capacity();
            pool.bufs.push(v);
        }
    }

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
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        bump_locked(&self.counters.recvs);
        let consumer = match &into {
            RecvInto::Typed(t) => t
                .slot
                .as_ref()
                .map(|slot| slot.consumer(t.datatype.clone(), t.count)),
            RecvInto::Owned => None,
        };
        let started = match consumer {
            Some(c) => core.ep.irecv_or_done_in_place(spec, buf, c),
            None => core.ep.irecv_or_done(spec, buf),
        };
        match started {
            Err(e) => Err(e.into()),
            Ok(Started::Pending(rreq)) => Ok(record_recv(core, rreq, into, group)),
            Ok(Started::Done(done)) => {
                drop(g);
                Ok(self.recv_done_at_once(done, into, group))
            }
        }
    }

    /// [`Device::start_recv_in`] of a receive into the user's own buffer
    /// (`Comm::irecv`), with the common outcome of a message already here
    /// (a plain success) built straight from the endpoint's result, read
    /// in place: the result is large, and moving it (twice) cost more than
    /// the rest of the path. Kept apart from
    /// [`Device::start_recv_owned_into`], as [`Device::start_send_owned`]
    /// is: returned through it, the request cost 2–3% of a bi-directional
    /// window.
    #[inline]
    pub(crate) fn start_recv_owned(
        &self,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<Request, Error> {
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        bump_locked(&self.counters.recvs);
        let mut buf = buf;
        // The common case first: its message is the next in the ring.
        if let Some(st) = core.ep.recv_arrived(spec, &mut buf)? {
            drop(g);
            let group = (!group.identity).then_some(&**group);
            return Ok(Request::ready_with_buffer(self.status_of(&st, group), buf));
        }
        let mut started = core.ep.irecv_or_done(spec, buf);
        match started {
            Ok(Started::Done((Ok(ref st), ref mut buf))) if !st.cancelled && !st.truncated() => {
                drop(g);
                let group = (!group.identity).then_some(&**group);
                let status = self.status_of(st, group);
                Ok(Request::ready_with_buffer(status, mem::take(buf)))
            }
            Ok(Started::Pending(rreq)) => Ok(record_recv(core, rreq, RecvInto::Owned, group)),
            Ok(Started::Done(done)) => {
                drop(g);
                Ok(self.recv_done_at_once(done, RecvInto::Owned, group))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`Device::start_recv_in`] of a receive into the user's own buffer,
    /// writing the request into `out` (the caller's storage, as
    /// `MPI_Irecv`'s request argument; `Comm::irecv_into`). On an error
    /// `out` is left as it was. The common outcome of a message already
    /// here (a plain success) is built from the endpoint's result read in
    /// place (the result is large: moving it cost more than the rest of
    /// the path), and both it and a pending request are stored field by
    /// field into `out` (see [`Device::start_send_owned_into`]).
    #[inline(always)]
    pub(crate) fn start_recv_owned_into(
        &self,
        out: &mut Request,
        spec: MatchSpec,
        buf: Vec<u8>,
        group: &Arc<Group>,
    ) -> Result<(), Error> {
        let mut g = self.core.lock()?;
        let Some(core) = g.as_mut() else {
            return Err(Error::NotInitialized { what: "finalized" });
        };
        bump_locked(&self.counters.recvs);
        let mut buf = buf;
        // The common case first: its message is the next in the ring.
        if let Some(st) = core.ep.recv_arrived(spec, &mut buf)? {
            drop(g);
            let group = (!group.identity).then_some(&**group);
            out.set_ready_with_buffer(self.status_of(&st, group), buf);
            return Ok(());
        }
        let mut started = core.ep.irecv_or_done(spec, buf);
        match started {
            Ok(Started::Done((Ok(ref st), ref mut buf))) if !st.cancelled && !st.truncated() => {
                drop(g);
                let group = (!group.identity).then_some(&**group);
                let status = self.status_of(st, group);
                out.set_ready_with_buffer(status, mem::take(buf));
            }
            Ok(Started::Pending(rreq)) => record_recv_into(core, rreq, RecvInto::Owned, group, out),
            Ok(Started::Done(done)) => {
                drop(g);
                *out = self.recv_done_at_once(done, RecvInto::Owned, group);
            }
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// The request of a receive the endpoint finished inside its call
    /// (born complete, no slot).
    #[inline(never)]
    fn recv_done_at_once(
        &self,
        (result, buf): (shmem_onesided::Result<EpStatus>, Vec<u8>),
        into: RecvInto,
        group: &Arc<Group>,
    ) -> Request {
        let group = (!group.identity).then_some(&**group);
        match (result, into) {
            (Ok(st), RecvInto::Owned) if !st.cancelled && !st.truncated() => {
                Request::ready_with_buffer(self.status_of(&st, group), buf)
            }
            (result, into) => Request::from_outcome(match result {
                Err(e) => Outcome {
                    status: Status::EMPTY,
                    error: Some(e.into()),
                    buffer: None,
                },
                Ok(st) => self.recv_outcome(&st, buf, into, group),
            }),
        }
    }

    /// Receives into `buf` a message already here that a receive for
    /// `spec` posted now would match (`Endpoint::recv_now`): `Some` of the
    /// MPI result ([`Device::recv_result`]: a longer message fills `buf`
    /// and is `RecvTruncated`), counted as a started receive; `None` when
    /// no such message has arrived, and then nothing was received, posted
    /// or counted. For datatype receives that unpack from a buffer on the
    /// caller's stack (`Comm::irecv_typed`). Inlined: its result, returned
    /// through memory, stalled store forwarding in the caller.
    #[inline(always)]
    pub(crate) fn recv_now(
        &self,
        spec: MatchSpec,
        buf: &mut [u8],
        group: &Group,
    ) -> Result<Option<Result<Status, Error>>, Error> {
        let got = self.with_core(|core| {
            let got = core.ep.recv_now(spec, buf)?;
            if got.is_some() {
                bump_locked(&self.counters.recvs);
            }
            Ok(got)
        })?;
        Ok(got.map(|st| self.recv_result(&st, (!group.identity).then_some(group))))
    }

    /// Counts a datatype receive that unpacked.
    pub(crate) fn note_unpacked(&self) {
        bump(&self.counters.unpacked_recvs);
    }

    /// Starts a receive of matched message `msg` into `buf`.
    pub(crate) fn start_mrecv(
        &self,
        msg: EpMessage,
        buf: Vec<u8>,
        into: RecvInto,
        group: Arc<Group>,
    ) -> Result<Request, Error> {
        self.track_recv(into, group, |ep| ep.imrecv(msg, buf))
    }

    /// Starts an endpoint receive with `start` under the core lock and
    /// records it in the operation table; the returned request completes
    /// when the endpoint reports it.
    fn track_recv(
        &self,
        into: RecvInto,
        group: Arc<Group>,
        start: impl FnOnce(&mut Endpoint) -> shmem_onesided::Result<RecvRequest>,
    ) -> Result<Request, Error> {
        self.with_core(|core| {
            bump_locked(&self.counters.recvs);
            let rreq = start(&mut core.ep)?;
            Ok(record_recv(core, rreq, into, &group))
        })
    }

    /// A blocking receive into a borrowed buffer, delivered straight into
    /// `buf` (no staging copy): each pass takes the core lock for one
    /// non-blocking `try_recv` (which runs a progress pass and matches the
    /// oldest waiting message, or a CMA/eager message straight into `buf`)
    /// plus the completion feed of the other operations, then releases it
    /// and relaxes. The receive is not *posted* between passes, which MPI
    /// allows: a later-posted receive of the same thread cannot exist (this
    /// call blocks it), and the order between receives of different threads
    /// is undefined. Peer liveness is checked every [`LIVENESS_EVERY`] (the
    /// source, or every peer for `ANY_SOURCE`).
    pub(crate) fn recv_into(
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
        loop {
            // Empty (no allocation); `harvest` fills it from the thread's
            // spare list only when something finished.
            let mut finished = Vec::new();
            let got = self.with_core(|core| {
                let r = core.ep.try_recv(spec, buf);
                if first {
                    bump_locked(&self.counters.recvs);
                    if matches!(r, Ok(Some(_))) {
                        bump_locked(&self.counters.recv_fast_hits);
                    }
                }
                if let (Ok(None), tm_proto::Source::Rank(p)) = (&r, spec.source) {
                    watch = core.ep.arrival_watch(p);
                }
                self.harvest(core, &mut finished, &mut [], &mut 0);
                Ok(r)
            })?;
            first = false;
            let n = self.complete_all_into(finished, &mut [], &mut 0);
            self.note_completed(n);
            // Passive-target RMA progress also runs in blocking receives;
            // applying RMA packets counts as activity (keeps spinning).
            let rma_active = crate::win::progress(self)?.packets > 0;
            if let Some(st) = got? {
                return self.recv_result(&st, (!group.identity).then_some(&**group));
            }
            idle = if rma_active { 1 } else { idle.wrapping_add(1) };
            if idle % 64 == 0 {
                if let Err(e) = self.source_alive(spec.source) {
                    // Deliver what the peer sent before it died, if it matches.
                    for _ in 0..64 {
                        if let Some(st) =
                            self.with_core(|core| Ok(core.ep.try_recv(spec, buf)?))?
                        {
                            return self.recv_result(&st, (!group.identity).then_some(&**group));
                        }
                    }
                    return Err(e);
                }
            }
            if idle < self.spin {
                match &watch {
                    // Nothing new from the source: spin on its ring's next
                    // slot, up to WATCH_SPINS times, before the next pass.
                    Some((w, next)) => {
                        for i in 0..WATCH_SPINS {
                            if w.published(*next) {
                                break;
                            }
                            // The first looks back to back: a PAUSE costs
                            // ~27 ns on the project's VM, a fifth of a
                            // small message's one-way time.
                            if i >= WATCH_EAGER {
                                std::hint::spin_loop();
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
    /// [`Endpoint::recv_arrived_with`]), if its message is the next in its
    /// source's ring now; `cap`: the packed capacity. `Ok(None)`: nothing
    /// was taken and `f` did not run.
    pub(crate) fn recv_arrived_with(
        &self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
        group: &Group,
    ) -> Result<Option<Status>, Error> {
        let got = self.with_core(|core| Ok(core.ep.recv_arrived_with(spec, cap, &mut *f)?))?;
        Ok(got.map(|st| self.in_place_status(&st, group)))
    }

    /// The status of a receive unpacked in place, counted as one.
    fn in_place_status(&self, st: &EpStatus, group: &Group) -> Status {
        bump(&self.counters.recvs);
        bump(&self.counters.unpacked_in_place);
        self.status_of(st, (!group.identity).then_some(group))
    }

    /// The blocking form of [`Device::recv_arrived_with`]: while the
    /// message can still be taken at the front of its source's ring
    /// ([`Endpoint::front_open`]), spins on that ring (lock-free, as
    /// [`Device::recv_into`] does between its passes) for up to
    /// [`IN_PLACE_SPINS`] looks (none with `TMX_ADI_SPIN=0`), taking the
    /// message when it comes.
    /// `Ok(None)` as soon as it cannot be taken there (another message is
    /// in front, something entered the matcher) or the spins run out:
    /// nothing was taken and the caller receives the general way
    /// ([`Device::recv_into`], which also runs the progress this wait
    /// skipped).
    pub(crate) fn recv_in_place(
        &self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
        group: &Group,
    ) -> Result<Option<Status>, Error> {
        let tm_proto::Source::Rank(p) = spec.source else {
            return Ok(None);
        };
        // No spinning where blocking checks yield at once (`TMX_ADI_SPIN=0`:
        // more ranks than cores, the sender may need this core).
        let budget = if self.spin == 0 { 0 } else { IN_PLACE_SPINS };
        let mut spins = 0u32;
        loop {
            let (got, watch) = self.with_core(|core| {
                let r = core.ep.recv_arrived_with(spec, cap, &mut *f)?;
                let w = match r {
                    None if core.ep.front_open(spec) => core.ep.arrival_watch(p),
                    _ => None,
                };
                Ok((r, w))
            })?;
            if let Some(st) = got {
                return Ok(Some(self.in_place_status(&st, group)));
            }
            let Some((w, next)) = watch else {
                return Ok(None);
            };
            if w.published(next) {
                // A header is in front that this receive cannot take.
                return Ok(None);
            }
            loop {
                if spins >= budget {
                    return Ok(None);
                }
                spins += 1;
                if w.published(next) {
                    break;
                }
                if spins > WATCH_EAGER {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Liveness of the peer(s) a blocking receive waits for, at most every
    /// [`LIVENESS_EVERY`].
    fn source_alive(&self, source: tm_proto::Source) -> Result<(), Error> {
        let now = self.start.elapsed().as_millis() as u64;
        let last = self.last_alive_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LIVENESS_EVERY.as_millis() as u64 {
            return Ok(());
        }
        self.last_alive_ms.store(now, Ordering::Relaxed);
        let me = self.local_of(self.world_rank)?;
        let n = self.local_to_world.len() as u32;
        self.with_core(|core| {
            match source {
                tm_proto::Source::Rank(p) => {
                    if p != me {
                        core.ep.check_alive(Some(p))?;
                    }
                }
                tm_proto::Source::Any => {
                    for p in (0..n).filter(|p| *p != me) {
                        core.ep.check_alive(Some(p))?;
                    }
                }
            }
            Ok(())
        })
    }

    /// The MPI result of a completed endpoint receive: truncation is an
    /// error carrying the status of what was delivered.
    fn recv_result(&self, st: &EpStatus, group: Option<&Group>) -> Result<Status, Error> {
        let status = self.status_of(st, group);
        if st.msg_len > st.len {
            bump(&self.counters.truncations);
            return Err(Error::RecvTruncated {
                status,
                msg_len: st.msg_len,
            });
        }
        Ok(status)
    }

    // ------------------------------------------------------------ probes

    pub(crate) fn iprobe(&self, spec: MatchSpec, group: &Group) -> Result<Option<Status>, Error> {
        let st = self.with_core(|core| Ok(core.ep.iprobe(spec)?))?;
        Ok(st.map(|st| {
            bump(&self.counters.probes_matched);
            let mut s = self.status_of(&st, Some(group));
            s.count = st.msg_len;
            s
        }))
    }

    pub(crate) fn improbe(
        &self,
        spec: MatchSpec,
        group: &Group,
    ) -> Result<Option<(EpMessage, Status)>, Error> {
        let m = self.with_core(|core| Ok(core.ep.improbe(spec)?))?;
        Ok(m.map(|(msg, st)| {
            bump(&self.counters.probes_matched);
            let mut s = self.status_of(&st, Some(group));
            s.count = st.msg_len;
            (msg, s)
        }))
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
            let Core { ep, ops, .. } = core;
            match ops.get_mut(id) {
                None => Ok(false),
                Some(Op {
                    kind: OpKind::Recv { rreq, .. },
                    ..
                }) => Ok(ep.cancel_recv(rreq)?),
                Some(Op {
                    kind:
                        OpKind::Send {
                            sreq, cancelled, ..
                        },
                    ..
                }) => {
                    let ok = ep.cancel_send(sreq)?;
                    *cancelled |= ok;
                    Ok(ok)
                }
            }
        })?;
        if ok {
            bump(&self.counters.cancelled);
        }
        tracing::debug!(id, ok, "cancel");
        Ok(ok)
    }

    // ---------------------------------------------------------- progress

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
            let r = core.ep.progress();
            let here = self.harvest(core, &mut finished, mine, hint);
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

    /// Under one core lock: the oldest message matching `spec` (probed for
    /// its length, then received whole into `buf`, which grows as needed
    /// and is reused across calls), with its sender's world rank and
    /// length. Used by RMA progress for the packets of a window's RMA
    /// context.
    pub(crate) fn try_take(
        &self,
        spec: MatchSpec,
        buf: &mut Vec<u8>,
    ) -> Result<Option<(u32, usize)>, Error> {
        let got = self.with_core(|core| {
            let Some(st) = core.ep.iprobe(spec)? else {
                return Ok(None);
            };
            let exact = MatchSpec {
                source: tm_proto::Source::Rank(st.source),
                ..spec
            };
            if buf.len() < st.msg_len {
                buf.resize(st.msg_len, 0);
            }
            let into = buf.get_mut(..st.msg_len).unwrap_or(&mut []);
            match core.ep.try_recv(exact, into)? {
                Some(r) => Ok(Some((r.source, r.len))),
                None => Ok(None),
            }
        })?;
        Ok(got.map(|(local, len)| {
            let world = self
                .local_to_world
                .get(local as usize)
                .copied()
                .unwrap_or(u32::MAX);
            (world, len)
        }))
    }

    /// Takes the endpoint's finished requests and finishes those operations'
    /// endpoint side (under the lock). A plain one (a receive into the
    /// request's own buffer, or a send not from the attached buffer) whose
    /// request is in `mine` is completed in place right here: its outcome
    /// is a few moves, with no other lock taken and no user code run. The
    /// others go to `finished`, completed once the lock is released
    /// ([`complete_all_into`](Self::complete_all_into)). Returns how many
    /// were completed in place.
    fn harvest(
        &self,
        core: &mut Core,
        finished: &mut Vec<Finished>,
        mine: &mut [Request],
        hint: &mut usize,
    ) -> usize {
        let Core {
            ep,
            ops,
            sends_done,
            recvs_done,
            spares,
            staged,
        } = core;
        ep.take_finished(sends_done, recvs_done);
        if sends_done.is_empty() && recvs_done.is_empty() {
            return 0;
        }
        let mut here = 0;
        // The entries are read in place, field by field, and only the
        // buffer is moved out (`mem::take`): moving whole entries out of
        // the list the endpoint has just written (`drain`) made wide
        // copies of narrowly written memory, which stalled on
        // store-to-load forwarding. The lists are cleared at the end.
        for (id, result) in sends_done.iter_mut() {
            if !staged.is_empty() && staged.remove(id) {
                // A packed message's buffer: back to the pool (the
                // request hands back none).
                if let Ok(b) = result {
                    if let Some(v) = b.take() {
                        self.give_back_staging(v);
                    }
                }
            }
            match ops.remove(*id) {
                Some(Op {
                    kind:
                        OpKind::Send {
                            len,
                            bsend,
                            cancelled,
                            ..
                        },
                    completer,
                }) => {
                    if bsend.is_none() {
                        if let Some(r) = take_mine(mine, &completer, hint) {
                            // The common case: the status of a send
                            // straight into the request.
                            if let (Ok(buf), false) = (&mut *result, cancelled) {
                                let status = Status::new(ANY_SOURCE, ANY_TAG, len);
                                r.finish_ok_here(completer, status, buf.take(), spares);
                                here += 1;
                                continue;
                            }
                            let result = take_result(result).map_err(Error::from);
                            r.finish_here(completer, send_outcome(result, len, cancelled));
                            here += 1;
                            continue;
                        }
                    }
                    push_finished(
                        finished,
                        Finished::Send {
                            completer,
                            result: take_result(result).map_err(Error::from),
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
        sends_done.clear();
        for f in recvs_done.iter_mut() {
            match ops.remove(f.id) {
                Some(Op {
                    kind: OpKind::Recv { into, group, .. },
                    completer,
                }) => {
                    if matches!(into, RecvInto::Owned) {
                        if let Some(r) = take_mine(mine, &completer, hint) {
                            // The common case: a plain successful receive
                            // (not cancelled, not truncated): its status
                            // and buffer straight into the request.
                            if let Ok(st) = &f.result {
                                if !st.cancelled && !st.truncated() {
                                    let status = self.status_of(st, group.as_deref());
                                    r.finish_ok_here(
                                        completer,
                                        status,
                                        Some(mem::take(&mut f.buf)),
                                        spares,
                                    );
                                    here += 1;
                                    continue;
                                }
                            }
                            let result = take_recv(f).map_err(Error::from);
                            r.finish_here(
                                completer,
                                self.recv_done(result, into, group.as_deref()),
                            );
                            here += 1;
                            continue;
                        }
                    }
                    push_finished(
                        finished,
                        Finished::Recv {
                            completer,
                            result: take_recv(f).map_err(Error::from),
                            into,
                            group,
                        },
                    );
                }
                Some(op) => drop(op),
                None => {}
            }
        }
        recvs_done.clear();
        here
    }

    /// Completes harvested operations (outside the lock): those of `mine`
    /// in place, the others through their completers (see
    /// [`poll_into`](Self::poll_into)); returns how many (the caller bumps
    /// the epoch: [`note_completed`](Self::note_completed)).
    #[inline]
    fn complete_all_into(
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
    fn note_completed(&self, n: usize) {
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

    /// What a finished operation's request completes with (outside the core
    /// lock), and its completer.
    fn outcome(&self, f: Finished) -> (Completer, Outcome) {
        match f {
            Finished::Send {
                completer,
                result,
                len,
                bsend,
                cancelled,
            } => {
                if let Some(start) = bsend {
                    lock(&self.bsend).used.remove(&start);
                }
                (completer, send_outcome(result, len, cancelled))
            }
            Finished::Recv {
                completer,
                result,
                into,
                group,
            } => (completer, self.recv_done(result, into, group.as_deref())),
        }
    }

    /// What a receive the endpoint reported with `result` completes with.
    fn recv_done(
        &self,
        result: Result<(EpStatus, Vec<u8>), Error>,
        into: RecvInto,
        group: Option<&Group>,
    ) -> Outcome {
        match result {
            Err(e) => Outcome {
                status: Status::EMPTY,
                error: Some(e),
                buffer: None,
            },
            Ok((st, buf)) => self.recv_outcome(&st, buf, into, group),
        }
    }

    /// What a receive the endpoint finished with `st` into `buf` completes
    /// with: the user's buffer back (unpacked first for a datatype
    /// receive), a truncation error with the status of what was delivered,
    /// or the cancelled status.
    fn recv_outcome(
        &self,
        st: &EpStatus,
        buf: Vec<u8>,
        into: RecvInto,
        group: Option<&Group>,
    ) -> Outcome {
        if st.cancelled {
            let user = match into {
                RecvInto::Owned => buf,
                RecvInto::Typed(typed) => {
                    self.give_back_staging(buf);
                    typed.take_user().0
                }
            };
            return Outcome {
                status: Status::cancelled(),
                error: None,
                buffer: Some(user),
            };
        }
        if matches!(into, RecvInto::Owned) && !st.truncated() {
            // The common case, built directly (not through `recv_result`'s
            // `Result<Status, Error>`).
            return Outcome {
                status: self.status_of(st, group),
                error: None,
                buffer: Some(buf),
            };
        }
        let res = self.recv_result(st, group);
        let (user, unpack_error) = match into {
            RecvInto::Owned => (buf, None),
            RecvInto::Typed(typed) => {
                let (mut user, datatype, count, in_place) = typed.take_user();
                bump(&self.counters.unpacked_recvs);
                let unpacked = match in_place {
                    Some(r) => {
                        bump(&self.counters.unpacked_in_place);
                        r
                    }
                    None => {
                        let n = st.len.min(buf.len());
                        datatype.unpack_part(&buf[..n], &mut user, count, 0)
                    }
                };
                self.give_back_staging(buf);
                (user, unpacked.err())
            }
        };
        let (status, error) = typed_result(unpack_error, res);
        Outcome {
            status,
            error,
            buffer: Some(user),
        }
    }

    /// Checks, at most every [`LIVENESS_EVERY`], that the peers we wait
    /// for are alive.
    fn liveness(&self) -> Result<(), Error> {
        let now = self.start.elapsed().as_millis() as u64;
        let last = self.last_alive_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) < LIVENESS_EVERY.as_millis() as u64 {
            return Ok(());
        }
        self.last_alive_ms.store(now, Ordering::Relaxed);
        self.with_core(|core| Ok(core.ep.check_alive(None)?))
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

    /// Cancels every receive still posted (an MPI program must not finalize
    /// with pending receives; this keeps finalize from hanging on one) and
    /// returns how many there were.
    fn cancel_pending_recvs(&self) -> Result<usize, Error> {
        self.with_core(|core| {
            let Core { ep, ops, .. } = core;
            let mut n = 0;
            for op in ops.values() {
                if let OpKind::Recv { rreq, .. } = &op.kind {
                    n += 1;
                    ep.cancel_recv(rreq)?;
                }
            }
            Ok(n)
        })
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

    /// `MPID_End`: completes every outstanding send (including freed
    /// requests and buffered sends), cancels receives still posted (with a
    /// warning: that is an erroneous program, but finalize must not hang on
    /// it), then a PMI barrier, then closes the endpoint and the PMI
    /// connection. Prints the counters if asked.
    pub(crate) fn finalize(&self) -> Result<(), Error> {
        while self.outstanding_sends()? > 0 {
            self.check(true)?;
        }
        // A send completes once its data is safe (copied); its header may
        // still wait inside the endpoint for ring space. Push every such
        // header into its ring before the PMI barrier, or a receiver still
        // receiving waits forever for it.
        while self.with_core(|core| Ok(core.ep.queued()))? > 0 {
            self.check(true)?;
        }
        let pending = self.cancel_pending_recvs()?;
        if pending > 0 {
            tracing::warn!(pending, "finalize with receives still posted: cancelled");
            self.check(false)?;
        }
        self.with_pmi(|p| p.barrier())?;
        let core = self.core.lock()?.take();
        let thresholds = core.as_ref().filter(|_| self.print_counters).map(|core| {
            let n = core.ep.node();
            let c = n.config();
            let size = |v: u64| {
                if v == u64::MAX {
                    "off".to_owned()
                } else {
                    v.to_string()
                }
            };
            let how = match n.calibration() {
                None => "not calibrated".to_owned(),
                Some(cal) => match cal.raised_to {
                    None => "calibrated: eager did not win at any measured size, kept".to_owned(),
                    Some(s) => format!("calibrated: raised to {s}"),
                },
            };
            let reply = match core.ep.reply_calibration() {
                None => "not calibrated".to_owned(),
                Some(cal) => match cal.lowered_to {
                    None => "calibrated: inline did not lose at any measured size, kept".to_owned(),
                    Some(s) => format!("calibrated: lowered to {s}"),
                },
            };
            format!(
                "cma threshold {}, cma reply {}, cma duplex {} ({how}); inline reply {} ({reply})",
                size(c.cma_threshold),
                size(c.cma_reply),
                size(c.cma_duplex),
                core.ep.reply_cap()
            )
        });
        let shmem = match core {
            Some(core) => Some(core.ep.finalize()?),
            None => None,
        };
        if self.print_counters {
            eprintln!(
                "adi counters (rank {}): {}",
                self.world_rank,
                self.counters()
            );
            if let Some(c) = shmem {
                eprintln!("shmem counters (rank {}): {c}", self.world_rank);
            }
            if let Some(t) = thresholds {
                eprintln!("shmem thresholds (rank {}): {t}", self.world_rank);
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

/// What a send the endpoint reported with `result` completes with.
fn send_outcome(result: Result<Option<Vec<u8>>, Error>, len: usize, cancelled: bool) -> Outcome {
    match result {
        Ok(buffer) => Outcome {
            status: if cancelled {
                Status::cancelled()
            } else {
                Status::new(ANY_SOURCE, ANY_TAG, len)
            },
            error: None,
            buffer,
        },
        Err(e) => Outcome {
            status: Status::EMPTY,
            error: Some(e),
            buffer: None,
        },
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

/// Moves an endpoint result out of a harvest list entry, leaving a
/// placeholder error (the entry is cleared right after).
fn take_result<T>(r: &mut shmem_onesided::Result<T>) -> shmem_onesided::Result<T> {
    mem::replace(
        r,
        Err(shmem_onesided::Error::InvalidArgument("result taken")),
    )
}

/// The result of a finished receive read in place (its buffer taken, the
/// entry left to be cleared), as `Endpoint::wait` would return it.
fn take_recv(f: &mut RecvFinished) -> shmem_onesided::Result<(EpStatus, Vec<u8>)> {
    match &mut f.result {
        Ok(st) => Ok((*st, mem::take(&mut f.buf))),
        Err(e) => Err(mem::replace(
            &mut **e,
            shmem_onesided::Error::InvalidArgument("result taken"),
        )),
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

/// The status of an operation on `MPI_PROC_NULL`.
pub(crate) const PROC_NULL_STATUS: Status = Status::new(PROC_NULL, ANY_TAG, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_the_layout() {
        let layout = NodeLayout::from_mapping("(vector,(0,2,2))", 2, 4).unwrap();
        // Ranks 0,1 on node 0; 2,3 on node 1; this is rank 2.
        assert_eq!(choose_route(&layout, 2), Route::SelfCopy { local: 0 });
        assert_eq!(choose_route(&layout, 3), Route::Shmem { local: 1 });
        assert_eq!(choose_route(&layout, 0), Route::Remote { node: 0 });
        let err = routes(&layout, 4).unwrap_err();
        assert_eq!(
            err,
            Error::NoInterNodeTransport {
                rank: 0,
                node: 0,
                my_node: 1
            }
        );
        assert_eq!(err.class(), crate::ErrorClass::Other);
        assert!(err.to_string().contains("verbs-tm"));
        let single = NodeLayout::single_node(1, 3);
        assert_eq!(
            routes(&single, 3).unwrap(),
            vec![
                Route::Shmem { local: 0 },
                Route::SelfCopy { local: 1 },
                Route::Shmem { local: 2 }
            ]
        );
    }

    #[test]
    fn bsend_pool_is_first_fit_and_full_is_an_error() {
        let mut p = BsendPool::default();
        assert!(matches!(
            p.reserve(64),
            Err(Error::BsendBufferFull { attached: 0, .. })
        ));
        p.buf = Some(vec![0; 256]);
        assert_eq!(p.reserve(64).unwrap(), 0);
        assert_eq!(p.reserve(128).unwrap(), 64);
        let e = p.reserve(128).unwrap_err();
        assert_eq!(
            e,
            Error::BsendBufferFull {
                need: 128,
                free: 64,
                attached: 256
            }
        );
        assert_eq!(e.class(), crate::ErrorClass::Buffer);
        p.used.remove(&0);
        assert_eq!(p.reserve(64).unwrap(), 0);
        p.used.remove(&64);
        assert_eq!(p.reserve(128).unwrap(), 64);
    }

    #[test]
    fn the_device_context_is_the_last_pair() {
        let c = internal_context();
        assert_eq!(c % 2, 0, "a p2p context");
        assert_eq!(c as usize / 2, context_pairs() - 1);
        assert!(c < tm_proto::TagLayout::DEFAULT.max_context_id());
    }

    #[test]
    fn context_pool_reserves_world_and_releases() {
        let mut c = ContextPool::new(100);
        assert_eq!(c.free.len(), 2);
        assert_eq!(c.free[0] & 1, 0, "pair 0 is the world's");
        assert_eq!(c.free[1], (1u64 << 36) - 1);
        c.take(5);
        assert_eq!(c.free[0] & (1 << 5), 0);
        c.release(5);
        assert_ne!(c.free[0] & (1 << 5), 0);
    }

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
}
