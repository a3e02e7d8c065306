//! The same-node path of RMA windows: direct load/store and single copy.
//!
//! When every rank of a window shares this node (always, until verbs-tm
//! brings an inter-node transport), the origin executes each operation
//! itself and returns, as MPICH does for shared-memory windows
//! (`rma-implementation-notes.md` §a.6, item 29) and Open MPI's `osc/sm`:
//!
//! - **Memory.** [`Win::allocate`](super::Win::allocate) places each rank's
//!   window in its symmetric heap of the node segment (`Mem::Heap`): put and
//!   get are `memcpy` through the shared mapping. A window too large for the
//!   heap (`TMX_SHMEM_HEAP_BYTES`), and every [`Win::create`](super::Win::create)
//!   window, stays in the owner's private memory (`Mem::User`) and is reached
//!   by CMA single copy (`process_vm_readv/writev`) at its address.
//! - **Control block.** Each rank also allocates a small block in its heap:
//!   the passive-target lock and the accumulate lock (each a
//!   [`RwTicket`]), its fence counter, and one PSCW `post` and `complete`
//!   counter per rank of the window.
//! - **Synchronization** is [`shmem_onesided::winsync`]: `lock`/`unlock`
//!   take and release the target's ticket lock; `fence` is a counter barrier
//!   among the window's ranks; `post` bumps a counter in each origin's
//!   block and `complete` one in each target's; `flush*` and `sync` are a
//!   full memory barrier (every operation is complete when its call
//!   returns).
//! - **Atomicity.** Accumulate, get-accumulate, fetch-and-op and
//!   compare-and-swap hold the target's accumulate lock around their
//!   read-modify-write (as MPICH's SHM mutex and `osc/sm`'s
//!   `accumulate_lock`), so they are atomic per element with respect to each
//!   other from every rank.
//! - **Waiting** (for a lock, a fence, a post or a complete) spins, runs the
//!   device's progress (so point-to-point traffic keeps flowing) and checks
//!   that the window's ranks are alive (the one waited for, and the others,
//!   since a lock may be held by a third rank): a dead peer is an error, not
//!   a hang.

use super::{Held, LockType, Mem, Target};
use crate::attr::ANY_TAG;
use crate::comm::Comm;
use crate::request::{Request, Status};
use crate::Error;
use rma_epoch::{acc, assert, AccOp, AccessState, ElemType};
use shmem_onesided::winsync::{self, RegionTable, RwTicket};
use shmem_onesided::{NodeView, SymAddr};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Control-block offsets (bytes). Each lock and the fence counter get a
/// cache line of their own.
const CB_LOCK: u64 = 0;
const CB_ACC: u64 = 64;
const CB_FENCE: u64 = 128;
const CB_POST: u64 = 192;

/// Offset of the region table (dynamic windows) in a control block.
fn cb_regions(n: u32) -> u64 {
    (CB_POST + 16 * u64::from(n)).div_ceil(64) * 64
}

/// Bytes of a control block for a window of `n` ranks.
pub(super) fn cb_bytes(n: u32) -> u64 {
    (cb_regions(n) + 8 * winsync::REGION_WORDS as u64).div_ceil(64) * 64
}

fn cb_complete(n: u32) -> u64 {
    CB_POST + 8 * u64::from(n)
}

/// Largest accumulate scratch buffer kept between operations.
const SCRATCH_KEEP: usize = 16 << 20;
/// Spins before the first progress pass of a wait.
const PURE_SPINS: u32 = 64;
/// Progress passes between liveness checks of the rank waited for.
const LIVENESS_EVERY: u32 = 1024;

/// This rank's access epoch on a direct window.
#[derive(Debug)]
enum Access {
    None,
    /// Between two fences (the last one without `NOSUCCEED`).
    Fence,
    /// `start(group)`: `posted[i]` once `group[i]`'s post was consumed.
    Pscw {
        group: Vec<u32>,
        posted: Vec<bool>,
    },
    /// `lock` epochs: target → how it is held.
    Locks(Vec<(u32, Held)>),
    /// `lock_all`: shared locks taken lazily, per target.
    LockAll {
        nocheck: bool,
        held: Vec<bool>,
    },
}

impl Access {
    fn state(&self) -> AccessState {
        match self {
            Access::None => AccessState::Unset,
            Access::Fence => AccessState::FenceGranted,
            Access::Pscw { .. } => AccessState::PscwGranted,
            Access::Locks(_) => AccessState::PerTarget,
            Access::LockAll { .. } => AccessState::LockAllGranted,
        }
    }
}

#[derive(Debug)]
struct Epochs {
    access: Access,
    /// The PSCW exposure group, between `post` and `wait`.
    exposure: Option<Vec<u32>>,
    fence_no: u64,
    /// Posts consumed, per target rank (from this rank's control block).
    post_seen: Vec<u64>,
    /// Completes consumed, per origin rank.
    complete_seen: Vec<u64>,
}

/// Process-wide counters of the direct path (printed at finalize with
/// `TMX_ADI_COUNTERS=1`, see [`super::RmaCounters`]).
pub(super) static GLOBAL: Global = Global {
    ops: AtomicU64::new(0),
    rmw: AtomicU64::new(0),
    locks: AtomicU64::new(0),
    lock_waits: AtomicU64::new(0),
    fences: AtomicU64::new(0),
};

#[derive(Debug)]
pub(super) struct Global {
    pub(super) ops: AtomicU64,
    pub(super) rmw: AtomicU64,
    pub(super) locks: AtomicU64,
    pub(super) lock_waits: AtomicU64,
    pub(super) fences: AtomicU64,
}

/// Counters of a direct window.
#[derive(Debug, Default)]
struct Stats {
    ops: AtomicU64,
    lock_waits: AtomicU64,
}

/// A window whose ranks are all on this node.
#[derive(Debug)]
pub(super) struct Direct {
    comm: Comm,
    id: rma_epoch::WinId,
    view: NodeView,
    me: u32,
    targets: Vec<Target>,
    /// This rank's window memory when it is private (`Mem::User`).
    own: Mutex<Vec<u8>>,
    /// The block of this rank's heap holding window memory (freed at
    /// `free`); `None` for private memory and for the segments of a
    /// contiguous shared window other than rank 0's.
    heap_block: Option<SymAddr>,
    /// Regions attached to a dynamic window: (address, memory, table slot).
    attached: Mutex<Vec<(u64, Vec<u8>, usize)>>,
    st: Mutex<Epochs>,
    /// Read-modify-write buffer of accumulates (reused).
    scratch: Mutex<Vec<u8>>,
    stats: Stats,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Direct {
    pub(super) fn new(
        comm: Comm,
        id: rma_epoch::WinId,
        view: NodeView,
        targets: Vec<Target>,
        own: Vec<u8>,
        heap_block: Option<SymAddr>,
    ) -> Direct {
        let n = targets.len();
        Direct {
            me: comm.rank() as u32,
            comm,
            id,
            view,
            targets,
            own: Mutex::new(own),
            heap_block,
            attached: Mutex::new(Vec::new()),
            st: Mutex::new(Epochs {
                access: Access::None,
                exposure: None,
                fence_no: 0,
                post_seen: vec![0; n],
                complete_seen: vec![0; n],
            }),
            scratch: Mutex::new(Vec::new()),
            stats: Stats::default(),
        }
    }

    fn t(&self, rank: u32) -> Result<&Target, Error> {
        self.targets
            .get(rank as usize)
            .ok_or_else(|| Error::InvalidRank {
                rank: rank as i32,
                size: self.targets.len() as i32,
            })
    }

    fn word(&self, rank: u32, off: u64) -> Result<&AtomicU64, Error> {
        let t = self.t(rank)?;
        Ok(self.view.atomic_u64(t.pe, t.cb.offset(off))?)
    }

    fn rw(&self, rank: u32, base: u64) -> Result<RwTicket<'_>, Error> {
        Ok(RwTicket::new(
            self.word(rank, base)?,
            self.word(rank, base + 8)?,
            self.word(rank, base + 16)?,
        ))
    }

    /// Spins until `ready()`, with progress and liveness checks of `rank`.
    fn wait_for(&self, rank: u32, mut ready: impl FnMut() -> bool) -> Result<(), Error> {
        let dev = self.comm.dev();
        let pe = self.t(rank)?.pe;
        let mut idle = 0u32;
        loop {
            if ready() {
                return Ok(());
            }
            idle = idle.wrapping_add(1);
            if idle < PURE_SPINS {
                std::hint::spin_loop();
                continue;
            }
            dev.check(false)?;
            if idle % LIVENESS_EVERY == 0 {
                // The rank waited for, and every other rank of the window:
                // a lock may be held by a third rank that died.
                self.view.check_alive(pe)?;
                for t in &self.targets {
                    self.view.check_alive(t.pe)?;
                }
            }
            dev.relax(idle)?;
        }
    }

    fn acquire(&self, rank: u32, ty: LockType) -> Result<(), Error> {
        let l = self.rw(rank, CB_LOCK)?;
        let ticket = l.ticket();
        GLOBAL.locks.fetch_add(1, Ordering::Relaxed);
        let granted = |l: &RwTicket<'_>| match ty {
            LockType::Exclusive => l.try_exclusive(ticket),
            LockType::Shared => l.try_shared(ticket),
        };
        if !granted(&l) {
            self.stats.lock_waits.fetch_add(1, Ordering::Relaxed);
            GLOBAL.lock_waits.fetch_add(1, Ordering::Relaxed);
            self.wait_for(rank, || granted(&l))?;
        }
        tracing::trace!(win = self.id, rank, ?ty, "direct lock granted");
        Ok(())
    }

    fn release(&self, rank: u32, held: Held) -> Result<(), Error> {
        fence(Ordering::SeqCst);
        let l = self.rw(rank, CB_LOCK)?;
        match held {
            Held::Exclusive => l.release_exclusive(),
            Held::Shared => l.release_shared(),
            Held::NoCheck => {}
        }
        Ok(())
    }

    // ------------------------------------------------ synchronization

    pub(super) fn fence(&self, a: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        if !matches!(st.access, Access::None | Access::Fence) {
            return Err(self.wrong("fence", &st));
        }
        if st.exposure.is_some() {
            return Err(Error::Rma(rma_epoch::Error::WrongExposure {
                win: self.id,
                call: "fence",
                exposed: true,
            }));
        }
        let both = assert::NOPRECEDE | assert::NOSUCCEED;
        if a & both != both {
            fence(Ordering::SeqCst);
            GLOBAL.fences.fetch_add(1, Ordering::Relaxed);
            st.fence_no += 1;
            let no = st.fence_no;
            winsync::arrive(self.word(self.me, CB_FENCE)?, no);
            for r in 0..self.targets.len() as u32 {
                if r != self.me {
                    let w = self.word(r, CB_FENCE)?;
                    self.wait_for(r, || winsync::arrived(w, no))?;
                }
            }
            fence(Ordering::SeqCst);
        }
        st.access = if a & assert::NOSUCCEED != 0 {
            Access::None
        } else {
            Access::Fence
        };
        Ok(())
    }

    fn wrong(&self, call: &'static str, st: &Epochs) -> Error {
        Error::Rma(rma_epoch::Error::WrongEpoch {
            win: self.id,
            call,
            state: st.access.state(),
        })
    }

    pub(super) fn start(&self, group: Vec<u32>, a: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        if !matches!(st.access, Access::None | Access::Fence) {
            return Err(self.wrong("start", &st));
        }
        let posted = vec![a & assert::NOCHECK != 0; group.len()];
        st.access = Access::Pscw { group, posted };
        Ok(())
    }

    /// Waits for (and consumes) the post of `group[i]` if not yet seen.
    fn await_post(&self, st: &mut Epochs, i: usize) -> Result<(), Error> {
        let Access::Pscw { group, posted } = &st.access else {
            return Ok(());
        };
        let (Some(&t), Some(false)) = (group.get(i), posted.get(i).copied()) else {
            return Ok(());
        };
        let seen = st.post_seen.get(t as usize).copied().unwrap_or(0);
        let w = self.word(self.me, CB_POST + 8 * u64::from(t))?;
        self.wait_for(t, || winsync::observed(w, seen))?;
        fence(Ordering::SeqCst);
        if let Some(s) = st.post_seen.get_mut(t as usize) {
            *s += 1;
        }
        if let Access::Pscw { posted, .. } = &mut st.access {
            if let Some(p) = posted.get_mut(i) {
                *p = true;
            }
        }
        Ok(())
    }

    pub(super) fn complete(&self) -> Result<(), Error> {
        let mut st = lock(&self.st);
        let Access::Pscw { group, .. } = &st.access else {
            return Err(self.wrong("complete", &st));
        };
        let group = group.clone();
        for i in 0..group.len() {
            self.await_post(&mut st, i)?;
        }
        fence(Ordering::SeqCst);
        let n = self.targets.len() as u32;
        for &t in &group {
            winsync::signal(self.word(t, cb_complete(n) + 8 * u64::from(self.me))?);
        }
        st.access = Access::None;
        Ok(())
    }

    pub(super) fn post(&self, group: Vec<u32>, a: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        if st.exposure.is_some() {
            return Err(Error::Rma(rma_epoch::Error::WrongExposure {
                win: self.id,
                call: "post",
                exposed: true,
            }));
        }
        fence(Ordering::SeqCst);
        if a & assert::NOCHECK == 0 {
            for &o in &group {
                winsync::signal(self.word(o, CB_POST + 8 * u64::from(self.me))?);
            }
        }
        st.exposure = Some(group);
        Ok(())
    }

    /// `wait` (blocking) or `test`: consumes every origin's complete once
    /// all are in.
    pub(super) fn wait(&self, blocking: bool) -> Result<bool, Error> {
        let mut st = lock(&self.st);
        let Some(group) = st.exposure.clone() else {
            return Err(Error::Rma(rma_epoch::Error::WrongExposure {
                win: self.id,
                call: if blocking { "wait" } else { "test" },
                exposed: false,
            }));
        };
        let n = self.targets.len() as u32;
        for &o in &group {
            let seen = st.complete_seen.get(o as usize).copied().unwrap_or(0);
            let w = self.word(self.me, cb_complete(n) + 8 * u64::from(o))?;
            if blocking {
                self.wait_for(o, || winsync::observed(w, seen))?;
            } else if !winsync::observed(w, seen) {
                return Ok(false);
            }
        }
        for &o in &group {
            if let Some(s) = st.complete_seen.get_mut(o as usize) {
                *s += 1;
            }
        }
        fence(Ordering::SeqCst);
        st.exposure = None;
        Ok(true)
    }

    pub(super) fn lock(&self, ty: LockType, rank: u32, a: u32) -> Result<(), Error> {
        self.t(rank)?;
        let mut st = lock(&self.st);
        match &st.access {
            Access::None | Access::Fence => {}
            Access::Locks(held) if held.iter().any(|(r, _)| *r == rank) => {
                return Err(Error::Rma(rma_epoch::Error::AlreadyLocked {
                    win: self.id,
                    target: rank,
                }))
            }
            Access::Locks(_) => {}
            _ => return Err(self.wrong("lock", &st)),
        }
        let held = if a & assert::NOCHECK != 0 {
            Held::NoCheck
        } else {
            self.acquire(rank, ty)?;
            match ty {
                LockType::Exclusive => Held::Exclusive,
                LockType::Shared => Held::Shared,
            }
        };
        fence(Ordering::SeqCst);
        match &mut st.access {
            Access::Locks(v) => v.push((rank, held)),
            a => *a = Access::Locks(vec![(rank, held)]),
        }
        Ok(())
    }

    pub(super) fn unlock(&self, rank: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        let Access::Locks(v) = &mut st.access else {
            return Err(self.wrong("unlock", &st));
        };
        let Some(i) = v.iter().position(|(r, _)| *r == rank) else {
            return Err(Error::Rma(rma_epoch::Error::NotLocked {
                win: self.id,
                target: rank,
            }));
        };
        let (_, held) = v.swap_remove(i);
        if v.is_empty() {
            st.access = Access::None;
        }
        self.release(rank, held)
    }

    pub(super) fn lock_all(&self, a: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        if !matches!(st.access, Access::None | Access::Fence) {
            return Err(self.wrong("lock_all", &st));
        }
        st.access = Access::LockAll {
            nocheck: a & assert::NOCHECK != 0,
            held: vec![false; self.targets.len()],
        };
        Ok(())
    }

    pub(super) fn unlock_all(&self) -> Result<(), Error> {
        let mut st = lock(&self.st);
        let Access::LockAll { held, .. } = &st.access else {
            return Err(self.wrong("unlock_all", &st));
        };
        let held = held.clone();
        st.access = Access::None;
        for (r, h) in held.into_iter().enumerate() {
            if h {
                self.release(r as u32, Held::Shared)?;
            }
        }
        Ok(())
    }

    /// `flush`, `flush_local`, their `_all` forms: every operation is
    /// complete when it returns, so this is the memory barrier MPI places
    /// before a flush.
    pub(super) fn flush(&self, call: &'static str, rank: Option<u32>) -> Result<(), Error> {
        if let Some(r) = rank {
            self.t(r)?;
        }
        let st = lock(&self.st);
        if !matches!(st.access, Access::Locks(_) | Access::LockAll { .. }) {
            return Err(self.wrong(call, &st));
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    // ------------------------------------------------------ operations

    /// Checks that an operation to `rank` fits the access epoch, taking a
    /// lazy `lock_all` lock or waiting for a PSCW post if needed.
    fn may_access(&self, rank: u32) -> Result<(), Error> {
        let mut st = lock(&self.st);
        match &st.access {
            Access::None => Err(Error::Rma(rma_epoch::Error::NoEpoch {
                win: self.id,
                state: AccessState::Unset,
            })),
            Access::Fence => Ok(()),
            Access::Locks(v) => {
                if v.iter().any(|(r, _)| *r == rank) {
                    Ok(())
                } else {
                    Err(Error::Rma(rma_epoch::Error::NotLocked {
                        win: self.id,
                        target: rank,
                    }))
                }
            }
            Access::LockAll { nocheck, held } => {
                if *nocheck || held.get(rank as usize).copied().unwrap_or(true) {
                    return Ok(());
                }
                self.acquire(rank, LockType::Shared)?;
                fence(Ordering::SeqCst);
                if let Access::LockAll { held, .. } = &mut st.access {
                    if let Some(h) = held.get_mut(rank as usize) {
                        *h = true;
                    }
                }
                Ok(())
            }
            Access::Pscw { group, .. } => match group.binary_search(&rank) {
                Ok(i) => self.await_post(&mut st, i),
                Err(_) => Err(Error::Rma(rma_epoch::Error::NotInGroup {
                    win: self.id,
                    target: rank,
                })),
            },
        }
    }

    /// Copies `data` to `disp` of `rank`'s window (range checked by the
    /// caller).
    fn store(&self, rank: u32, disp: u64, data: &[u8]) -> Result<(), Error> {
        let t = self.t(rank)?;
        match t.mem {
            Mem::Heap(a) => self.view.put(t.pe, a.offset(disp), data)?,
            Mem::User(_) if rank == self.me => {
                let mut own = lock(&self.own);
                let d = disp as usize;
                own.get_mut(d..d + data.len())
                    .ok_or_else(|| Error::Abandoned)?
                    .copy_from_slice(data);
            }
            Mem::User(base) => self.view.cma_write(t.pe, base + disp, data)?,
            Mem::Dynamic if rank == self.me => {
                self.with_region(disp, data.len(), |m| m.copy_from_slice(data))?
            }
            Mem::Dynamic => {
                self.check_attached(rank, disp, data.len())?;
                self.view.cma_write(t.pe, disp, data)?
            }
        }
        Ok(())
    }

    fn load(&self, rank: u32, disp: u64, buf: &mut [u8]) -> Result<(), Error> {
        let t = self.t(rank)?;
        match t.mem {
            Mem::Heap(a) => self.view.get(t.pe, a.offset(disp), buf)?,
            Mem::User(_) if rank == self.me => {
                let own = lock(&self.own);
                let d = disp as usize;
                buf.copy_from_slice(own.get(d..d + buf.len()).ok_or_else(|| Error::Abandoned)?);
            }
            Mem::User(base) => self.view.cma_read(t.pe, base + disp, buf)?,
            Mem::Dynamic if rank == self.me => {
                self.with_region(disp, buf.len(), |m| buf.copy_from_slice(m))?
            }
            Mem::Dynamic => {
                self.check_attached(rank, disp, buf.len())?;
                self.view.cma_read(t.pe, disp, buf)?
            }
        }
        Ok(())
    }

    // ------------------------------------------------- dynamic windows

    pub(super) fn is_dynamic(&self) -> bool {
        self.own_target()
            .is_some_and(|t| matches!(t.mem, Mem::Dynamic))
    }

    fn regions(&self, rank: u32) -> Result<RegionTable<'_>, Error> {
        let t = self.t(rank)?;
        let n = self.targets.len() as u32;
        let words =
            self.view
                .atomic_u64_slice(t.pe, t.cb.offset(cb_regions(n)), winsync::REGION_WORDS)?;
        RegionTable::new(words).ok_or_else(|| Error::Abandoned)
    }

    /// Checks `[addr, addr + len)` against `rank`'s attached regions.
    fn check_attached(&self, rank: u32, addr: u64, len: usize) -> Result<(), Error> {
        let table = self.regions(rank)?;
        let mut tries = 0u32;
        loop {
            match table.contains(addr, len as u64) {
                Some(true) => return Ok(()),
                Some(false) => {
                    return Err(Error::RmaRange {
                        target: rank as i32,
                        disp: addr,
                        len,
                        size: 0,
                    })
                }
                // The owner is attaching or detaching: read again.
                None => {
                    tries = tries.wrapping_add(1);
                    if tries % 64 == 0 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }

    /// `f` on the bytes `[addr, addr + len)` of this rank's attached memory.
    fn with_region<T>(
        &self,
        addr: u64,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, Error> {
        let mut regions = lock(&self.attached);
        for (base, mem, _) in regions.iter_mut() {
            let Some(off) = addr.checked_sub(*base) else {
                continue;
            };
            let Ok(off) = usize::try_from(off) else {
                continue;
            };
            if let Some(m) = off.checked_add(len).and_then(|end| mem.get_mut(off..end)) {
                return Ok(f(m));
            }
        }
        Err(Error::RmaRange {
            target: self.me as i32,
            disp: addr,
            len,
            size: 0,
        })
    }

    pub(super) fn attach(&self, mem: Vec<u8>) -> Result<u64, Error> {
        let table = self.regions(self.me)?;
        let mut regions = lock(&self.attached);
        let slot = (0..table.slots())
            .find(|i| regions.iter().all(|(_, _, s)| s != i))
            .ok_or_else(|| Error::InvalidArgument {
                what: "attach: every region slot of this dynamic window is in use",
            })?;
        // A zero-length Vec has a dangling (but non-zero) address: it gets
        // a slot like any other region and matches only empty accesses.
        let base = mem.as_ptr() as u64;
        table.set(slot, base, mem.len() as u64);
        regions.push((base, mem, slot));
        tracing::debug!(win = self.id, base, slot, "region attached");
        Ok(base)
    }

    pub(super) fn detach(&self, base: u64) -> Result<Vec<u8>, Error> {
        let table = self.regions(self.me)?;
        let mut regions = lock(&self.attached);
        let i = regions
            .iter()
            .position(|(b, _, _)| *b == base)
            .ok_or_else(|| Error::InvalidArgument {
                what: "detach: no region is attached at this address",
            })?;
        let (_, mem, slot) = regions.swap_remove(i);
        table.set(slot, 0, 0);
        Ok(mem)
    }

    pub(super) fn with_attached<T>(
        &self,
        base: u64,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, Error> {
        let me = self.me;
        let l = self.rw(me, CB_ACC)?;
        let ticket = l.ticket();
        if !l.try_exclusive(ticket) {
            self.wait_for(me, || l.try_exclusive(ticket))?;
        }
        let res = {
            let mut regions = lock(&self.attached);
            match regions.iter_mut().find(|(b, _, _)| *b == base) {
                Some((_, mem, _)) => Ok(f(mem)),
                None => Err(Error::InvalidArgument {
                    what: "with_attached: no region is attached at this address",
                }),
            }
        };
        l.release_exclusive();
        res
    }

    pub(super) fn put(&self, rank: u32, disp: u64, data: &[u8]) -> Result<(), Error> {
        self.may_access(rank)?;
        self.stats.ops.fetch_add(1, Ordering::Relaxed);
        GLOBAL.ops.fetch_add(1, Ordering::Relaxed);
        self.store(rank, disp, data)
    }

    pub(super) fn get(&self, rank: u32, disp: u64, len: usize) -> Result<Request, Error> {
        let mut buf = vec![0u8; len];
        self.get_into(rank, disp, &mut buf)?;
        Ok(completed_read(rank as i32, buf))
    }

    pub(super) fn get_into(&self, rank: u32, disp: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.may_access(rank)?;
        self.stats.ops.fetch_add(1, Ordering::Relaxed);
        GLOBAL.ops.fetch_add(1, Ordering::Relaxed);
        self.load(rank, disp, buf)
    }

    /// The read-modify-write of every accumulate-like operation, under the
    /// target's accumulate lock: returns the old bytes if `fetch`.
    fn rmw(
        &self,
        rank: u32,
        disp: u64,
        len: usize,
        fetch: bool,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<Option<Vec<u8>>, Error> {
        self.may_access(rank)?;
        self.stats.ops.fetch_add(1, Ordering::Relaxed);
        GLOBAL.ops.fetch_add(1, Ordering::Relaxed);
        GLOBAL.rmw.fetch_add(1, Ordering::Relaxed);
        let l = self.rw(rank, CB_ACC)?;
        let ticket = l.ticket();
        if !l.try_exclusive(ticket) {
            self.wait_for(rank, || l.try_exclusive(ticket))?;
        }
        let res = (|| {
            // One scratch buffer per window: a fresh large buffer per
            // operation costs a page fault per page.
            let mut scratch = lock(&self.scratch);
            scratch.clear();
            scratch.resize(len, 0);
            self.load(rank, disp, &mut scratch)?;
            let old = fetch.then(|| scratch.clone());
            f(&mut scratch);
            self.store(rank, disp, &scratch)?;
            if scratch.capacity() > SCRATCH_KEEP {
                *scratch = Vec::new();
            }
            Ok(old)
        })();
        l.release_exclusive();
        res
    }

    pub(super) fn accumulate(
        &self,
        rank: u32,
        disp: u64,
        data: &[u8],
        elem: ElemType,
        op: AccOp,
        fetch: bool,
    ) -> Result<Option<Vec<u8>>, Error> {
        if !acc::op_valid(op, elem) || data.len() % elem.size() != 0 {
            return Err(Error::Rma(rma_epoch::Error::InvalidAccumulate {
                op,
                elem,
                len: data.len(),
            }));
        }
        self.rmw(rank, disp, data.len(), fetch, |cur| {
            acc::apply(op, elem, cur, data)
        })
    }

    pub(super) fn compare_and_swap(
        &self,
        rank: u32,
        disp: u64,
        origin: &[u8],
        compare: &[u8],
        elem: ElemType,
    ) -> Result<Vec<u8>, Error> {
        if origin.len() != compare.len() || origin.len() != elem.size() {
            return Err(Error::Rma(rma_epoch::Error::InvalidAccumulate {
                op: AccOp::Replace,
                elem,
                len: origin.len(),
            }));
        }
        let old = self.rmw(rank, disp, origin.len(), true, |cur| {
            if cur == compare {
                cur.copy_from_slice(origin);
            }
        })?;
        Ok(old.unwrap_or_default())
    }

    // ------------------------------------------------------ local access

    /// `f` on this rank's memory, under its accumulate lock (atomic with
    /// respect to every accumulate-like operation). Heap memory is copied
    /// out and the bytes `f` changed are written back.
    pub(super) fn with_local<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        let me = self.me;
        let l = self.rw(me, CB_ACC)?;
        let ticket = l.ticket();
        if !l.try_exclusive(ticket) {
            self.wait_for(me, || l.try_exclusive(ticket))?;
        }
        let res = (|| {
            let t = self.t(me)?;
            match t.mem {
                Mem::User(_) | Mem::Dynamic => Ok(f(&mut lock(&self.own))),
                Mem::Heap(a) => {
                    let mut snap = vec![0u8; t.size as usize];
                    self.view.get(t.pe, a, &mut snap)?;
                    let mut work = snap.clone();
                    let r = f(&mut work);
                    write_back(&self.view, t.pe, a, &snap, &work)?;
                    Ok(r)
                }
            }
        })();
        l.release_exclusive();
        res
    }

    pub(super) fn ops(&self) -> (u64, u64) {
        (
            self.stats.ops.load(Ordering::Relaxed),
            self.stats.lock_waits.load(Ordering::Relaxed),
        )
    }

    /// Whether every epoch is closed (the precondition of `free`).
    pub(super) fn check_free(&self) -> Result<(), Error> {
        let st = lock(&self.st);
        if !matches!(st.access, Access::None | Access::Fence) || st.exposure.is_some() {
            return Err(Error::Rma(rma_epoch::Error::FreeInEpoch {
                win: self.id,
                state: st.access.state(),
            }));
        }
        Ok(())
    }

    /// This rank's memory, taken out of the window (at free).
    pub(super) fn take_own(&self) -> Result<Vec<u8>, Error> {
        let t = self.t(self.me)?;
        match t.mem {
            Mem::User(_) | Mem::Dynamic => Ok(std::mem::take(&mut *lock(&self.own))),
            Mem::Heap(a) => {
                let mut v = vec![0u8; t.size as usize];
                self.view.get(t.pe, a, &mut v)?;
                Ok(v)
            }
        }
    }

    pub(super) fn heap_block(&self) -> Option<SymAddr> {
        self.heap_block
    }

    pub(super) fn targets(&self) -> &[Target] {
        &self.targets
    }

    pub(super) fn own_target(&self) -> Option<&Target> {
        self.targets.get(self.me as usize)
    }
}

/// Writes the runs of bytes where `new` differs from `old` back to `pe`'s
/// heap at `a` (so bytes the closure did not change are not overwritten).
fn write_back(view: &NodeView, pe: u32, a: SymAddr, old: &[u8], new: &[u8]) -> Result<(), Error> {
    let mut i = 0;
    while i < new.len() {
        if old.get(i) == new.get(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < new.len() && old.get(i) != new.get(i) {
            i += 1;
        }
        view.put(pe, a.offset(start as u64), &new[start..i])?;
    }
    Ok(())
}

/// A read request already complete with `buf` as its data (`rank` is
/// the target as the user named it, `PROC_NULL` included).
pub(super) fn completed_read(rank: i32, buf: Vec<u8>) -> Request {
    Request::ready_with_buffer(Status::new(rank, ANY_TAG, buf.len()), buf)
}
