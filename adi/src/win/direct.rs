//! The direct backend: the memory of the targets on this node, loaded and
//! stored by the origin itself, and the shared-memory synchronization the
//! epoch machine asks for.
//!
//! The origin executes each operation to a direct target itself and
//! returns, as MPICH does for shared-memory windows and Open MPI's `osc/sm`
//! does for every window:
//!
//! - **Memory.** [`Win::allocate`](super::Win::allocate) places each
//!   rank's window in its symmetric heap of the node segment (`Mem::Heap`):
//!   put and get are `memcpy` through the shared mapping. A window too
//!   large for the heap (`TMX_SHMEM_HEAP_BYTES`) stays in the owner's
//!   private memory (`Mem::User`) and is reached by CMA single copy
//!   (`process_vm_readv/writev`) at its address; so is a dynamic window's
//!   attached memory (`Mem::Dynamic`).
//! - **Control block.** Each rank also allocates a small block in its heap:
//!   the passive-target lock and the accumulate lock (each a [`RwTicket`]),
//!   its fence arrival word, and one PSCW `post` and `complete` counter per
//!   rank of the window (and, for a dynamic window, its region table).
//! - **Synchronization** is [`shmem_onesided::winsync`], started and polled
//!   as the epoch machine's [`DirectAction`]s say: a shared lock is a
//!   ticket taken, then polled until granted; an exclusive lock is polled
//!   until the lock is idle and entered then, without queueing (readers
//!   first, as MPICH grants, so no shared lock waits behind a waiting
//!   writer); the fence barrier is an arrival,
//!   then every other rank's arrival polled; `post` bumps a counter in
//!   each origin's block and `complete` one in each target's. Each grant or
//!   observation is an `Acquire` load and each release, arrival or signal a
//!   `Release` write (the loom-checked protocols of `winsync`): that is the
//!   memory synchronization MPI asks of these calls, so no further fence
//!   is taken around them (`flush*` and `sync` take a full one).
//! - **Atomicity.** Accumulate, get-accumulate, fetch-and-op and
//!   compare-and-swap hold the target's accumulate lock around their
//!   read-modify-write (as MPICH's SHM mutex and `osc/sm`'s
//!   `accumulate_lock`), and so do the target-side read-modify-writes of
//!   operations that arrive by active messages in a window with both kinds
//!   of origin ([`DirectWin::target_access`]): they are atomic per element
//!   with respect to each other from every rank.

use super::mem::{FenceWords, WinBuf};
use super::{LockType, ANY_TAG};
use crate::request::{Request, Status};
use crate::Error;
use rma_epoch::{acc, AccOp, Access, DirectAction, ElemType};
use shmem_onesided::winsync::{self, RegionTable, RwTicket};
use shmem_onesided::{NodeView, SymAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Control-block offsets (bytes). Each lock and the fence word get a cache
/// line of their own.
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

/// Read-modify-writes of at most this many bytes work in a buffer on the
/// stack instead of the window's scratch buffer.
const SMALL_RMW: usize = 64;

/// Where a rank's window memory is, for the direct backend.
#[derive(Debug, Clone, Copy)]
pub(super) enum Mem {
    /// In its symmetric heap: load/store through the node segment.
    Heap(SymAddr),
    /// In its private memory at this address: CMA single copy.
    User(u64),
    /// A dynamic window: displacements are addresses in the target's
    /// attached regions (checked against its published region table),
    /// reached by CMA single copy.
    Dynamic,
}

/// A rank of a window reached directly, as every origin sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Target {
    /// Its node index (shmem PE).
    pub(super) pe: u32,
    pub(super) size: u64,
    pub(super) mem: Mem,
    /// Its control block (locks, counters) in its heap.
    pub(super) cb: SymAddr,
}

/// Process-wide counters of the direct backend (printed at finalize with
/// `TMX_ADI_COUNTERS=1`, see [`super::RmaCounters`]).
pub(super) static GLOBAL: Global = Global {
    ops: AtomicU64::new(0),
    rmw: AtomicU64::new(0),
    locks: AtomicU64::new(0),
    lock_waits: AtomicU64::new(0),
    fences: AtomicU64::new(0),
};

/// Adds one to a counter of [`GLOBAL`] that only the holder of the device's
/// RMA lock changes: a load and a store, no locked instruction.
#[inline]
pub(super) fn bump_locked(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

/// The counters: `ops`, `locks`, `lock_waits` and `fences` change only under
/// the device's RMA lock ([`bump_locked`]); `rmw` anywhere (`fetch_add`).
#[derive(Debug)]
pub(super) struct Global {
    pub(super) ops: AtomicU64,
    pub(super) rmw: AtomicU64,
    pub(super) locks: AtomicU64,
    pub(super) lock_waits: AtomicU64,
    pub(super) fences: AtomicU64,
}

/// A shared-memory condition the driver waits for, started by a
/// [`DirectAction`] and reported to the epoch machine once it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Poll {
    /// `target`'s lock: shared with its ticket taken; exclusive without
    /// one (`ticket` unused), entered once the lock is idle.
    Lock {
        target: u32,
        ticket: u64,
        exclusive: bool,
    },
    /// Every rank arrived at fence number `no`.
    Barrier { no: u64 },
    /// `target`'s post counter (in this rank's block) moved past `seen`.
    Post { target: u32, seen: u64 },
    /// `origin`'s complete counter (in this rank's block) moved past
    /// `seen`.
    Complete { origin: u32, seen: u64 },
}

/// A [`Poll`] with its shared words looked up ([`DirectWin::ready`]):
/// what a waiter spins on, a few loads per look (a look through
/// [`DirectWin::may_fire`] checks the rank, the bounds and the alignment
/// of every word each time).
#[derive(Debug)]
pub(super) enum Ready<'a> {
    /// [`Poll::Lock`].
    Lock {
        lock: RwTicket<'a>,
        ticket: u64,
        exclusive: bool,
    },
    /// [`Poll::Barrier`]: every other rank's fence word: the first one
    /// apart, so that the barrier of two ranks allocates nothing (`rest`
    /// is empty); `first` is `None` in a window of one rank.
    Barrier {
        first: Option<&'a AtomicU64>,
        rest: Vec<&'a AtomicU64>,
        no: u64,
    },
    /// [`Poll::Post`] and [`Poll::Complete`]: a counter in this rank's
    /// block.
    Counter { word: &'a AtomicU64, seen: u64 },
}

impl Ready<'_> {
    /// Whether the condition holds now ([`DirectWin::may_fire`]).
    #[inline(always)]
    pub(super) fn holds(&self) -> bool {
        match self {
            Ready::Lock {
                lock,
                ticket,
                exclusive,
            } => {
                if *exclusive {
                    lock.is_idle()
                } else {
                    lock.may_enter(*ticket, false)
                }
            }
            Ready::Barrier { first, rest, no } => {
                first.is_none_or(|w| winsync::arrived(w, *no))
                    && rest.iter().all(|w| winsync::arrived(w, *no))
            }
            Ready::Counter { word, seen } => winsync::observed(word, *seen),
        }
    }
}

/// What [`DirectWin::start`] did with a step.
#[derive(Debug, Clone, Copy)]
pub(super) enum Started {
    /// A one-shot step, done.
    Done,
    /// A condition that held at once (consumed): report it.
    Held(Poll),
    /// A condition to poll.
    Wait(Poll),
}

/// What the driver keeps of the PSCW protocol of one window: the counts
/// it consumed (its fence count is [`DirectWin`]'s).
#[derive(Debug, Default)]
pub(super) struct Seen {
    pub(super) posts: Vec<u64>,
    pub(super) completes: Vec<u64>,
}

/// The direct backend of one window: its direct targets' memory and
/// control blocks.
#[derive(Debug)]
pub(super) struct DirectWin {
    pub(super) view: NodeView,
    pub(super) me: u32,
    /// Ranks of the window; `None` for a rank reached by active messages.
    targets: Vec<Option<Target>>,
    /// This rank's window memory when it is private (`Mem::User`).
    own: Mutex<WinBuf>,
    /// The block of this rank's heap holding window memory (freed at
    /// `free`); `None` for private memory and for the segments of a
    /// contiguous shared window other than rank 0's.
    heap_block: Option<SymAddr>,
    /// Regions attached to a dynamic window: (address, memory, table slot).
    attached: Mutex<Vec<(u64, WinBuf, usize)>>,
    /// Read-modify-write buffer of accumulates (reused).
    scratch: Mutex<Vec<u8>>,
    /// Fence barriers this rank arrived at (changed only under the
    /// device's RMA lock, see [`bump_locked`]).
    fence_no: AtomicU64,
    /// Fence words of this rank and of every other rank of the window,
    /// resolved once; `None` if a rank is not direct (no shared-memory
    /// barrier then).
    fence: Option<FenceWords>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DirectWin {
    pub(super) fn new(
        view: NodeView,
        me: u32,
        targets: Vec<Option<Target>>,
        own: WinBuf,
        heap_block: Option<SymAddr>,
    ) -> DirectWin {
        let fence_word = |t: &Target| (t.pe, t.cb.offset(CB_FENCE));
        let fence_own = targets
            .get(me as usize)
            .and_then(Option::as_ref)
            .map(fence_word);
        let fence_others: Option<Vec<_>> = targets
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != me as usize)
            .map(|(_, t)| t.as_ref().map(fence_word))
            .collect();
        let fence = match (fence_own, fence_others) {
            (Some(own), Some(others)) => match FenceWords::new(&view, own, &others) {
                Ok(w) => Some(w),
                Err(e) => {
                    // Not expected (the control blocks are in the heaps);
                    // the window's fences then fail with `Abandoned`.
                    tracing::warn!(error = %e, "window fence words out of reach");
                    None
                }
            },
            _ => None,
        };
        DirectWin {
            view,
            me,
            targets,
            own: Mutex::new(own),
            heap_block,
            attached: Mutex::new(Vec::new()),
            scratch: Mutex::new(Vec::new()),
            fence_no: AtomicU64::new(0),
            fence,
        }
    }

    /// The ranks of the window.
    pub(super) fn n(&self) -> u32 {
        self.targets.len() as u32
    }

    /// Whether `rank` is reached directly.
    #[inline]
    pub(super) fn is_direct(&self, rank: u32) -> bool {
        matches!(self.targets.get(rank as usize), Some(Some(_)))
    }

    #[inline]
    fn t(&self, rank: u32) -> Result<&Target, Error> {
        match self.targets.get(rank as usize) {
            Some(Some(t)) => Ok(t),
            _ => Err(Error::InvalidRank {
                rank: rank as i32,
                size: self.targets.len() as i32,
            }),
        }
    }

    #[inline]
    fn word(&self, rank: u32, off: u64) -> Result<&AtomicU64, Error> {
        let t = self.t(rank)?;
        Ok(self.view.atomic_u64(t.pe, t.cb.offset(off))?)
    }

    #[inline]
    fn rw(&self, rank: u32, base: u64) -> Result<RwTicket<'_>, Error> {
        let t = self.t(rank)?;
        match self
            .view
            .atomic_u64_slice(t.pe, t.cb.offset(base), winsync::RW_WORDS)?
        {
            [next, write, read] => Ok(RwTicket::new(next, write, read)),
            _ => Err(Error::Abandoned),
        }
    }

    /// Checks that every direct rank of the window is alive (a lock or a
    /// barrier may wait for any of them).
    pub(super) fn check_alive(&self) -> Result<(), Error> {
        for t in self.targets.iter().flatten() {
            self.view.check_alive(t.pe)?;
        }
        Ok(())
    }

    // ------------------------------------------------ synchronization

    /// Starts `a`: a one-shot step is done at once ([`Started::Done`]); a
    /// condition is started and tried once: [`Started::Held`] if it holds
    /// already (and was consumed, as [`DirectWin::try_fire`] does), else
    /// [`Started::Wait`], to be polled with [`DirectWin::try_fire`].
    pub(super) fn start(&self, a: DirectAction, seen: &mut Seen) -> Result<Started, Error> {
        let n = self.n();
        let p = match a {
            DirectAction::Lock { target, exclusive } => {
                bump_locked(&GLOBAL.locks);
                let l = self.rw(target, CB_LOCK)?;
                // Readers queue by ticket; a writer takes none and enters
                // only when the lock is idle (see `winsync::RwTicket`).
                let ticket = if exclusive { 0 } else { l.ticket() };
                let p = Poll::Lock {
                    target,
                    ticket,
                    exclusive,
                };
                let held = if exclusive {
                    l.try_exclusive_idle().is_some()
                } else {
                    l.try_shared(ticket)
                };
                if held {
                    return Ok(Started::Held(p));
                }
                return Ok(Started::Wait(p));
            }
            DirectAction::Unlock { target, exclusive } => {
                let l = self.rw(target, CB_LOCK)?;
                if exclusive {
                    l.release_exclusive();
                } else {
                    l.release_shared();
                }
                return Ok(Started::Done);
            }
            DirectAction::Barrier => Poll::Barrier { no: self.arrive()? },
            DirectAction::Post { origin } => {
                winsync::signal(self.word(origin, CB_POST + 8 * u64::from(self.me))?);
                return Ok(Started::Done);
            }
            // The waits for a signal are tried here directly (what
            // `try_fire` does, without its second dispatch).
            DirectAction::AwaitPost { target } => {
                let slot = seen.posts.get_mut(target as usize);
                let s = slot.as_deref().copied().unwrap_or(0);
                let p = Poll::Post { target, seen: s };
                let w = self.word(self.me, CB_POST + 8 * u64::from(target))?;
                if !winsync::observed(w, s) {
                    return Ok(Started::Wait(p));
                }
                if let Some(c) = slot {
                    *c = s + 1;
                }
                return Ok(Started::Held(p));
            }
            DirectAction::Complete { target } => {
                winsync::signal(self.word(target, cb_complete(n) + 8 * u64::from(self.me))?);
                return Ok(Started::Done);
            }
            DirectAction::AwaitComplete { origin } => {
                let slot = seen.completes.get_mut(origin as usize);
                let s = slot.as_deref().copied().unwrap_or(0);
                let p = Poll::Complete { origin, seen: s };
                let w = self.word(self.me, cb_complete(n) + 8 * u64::from(origin))?;
                if !winsync::observed(w, s) {
                    return Ok(Started::Wait(p));
                }
                if let Some(c) = slot {
                    *c = s + 1;
                }
                return Ok(Started::Held(p));
            }
        };
        Ok(if self.try_fire(&p, seen)? {
            Started::Held(p)
        } else {
            Started::Wait(p)
        })
    }

    /// Arrives at the next fence barrier ([`DirectAction::Barrier`] without
    /// the generality of [`DirectWin::start`]; under the device's RMA
    /// lock); returns its number.
    #[inline]
    pub(super) fn arrive(&self) -> Result<u64, Error> {
        bump_locked(&GLOBAL.fences);
        let Some(w) = &self.fence else {
            return Err(Error::Abandoned);
        };
        let no = self.fence_no.load(Ordering::Relaxed) + 1;
        self.fence_no.store(no, Ordering::Relaxed);
        winsync::arrive(w.own(), no);
        Ok(no)
    }

    /// Whether every other rank arrived at fence barrier `no`.
    #[inline]
    pub(super) fn all_arrived(&self, no: u64) -> Result<bool, Error> {
        let Some(w) = &self.fence else {
            return Err(Error::Abandoned);
        };
        Ok(w.others().all(|o| winsync::arrived(o, no)))
    }

    /// Whether every other rank arrives at fence barrier `no` within
    /// `looks` looks, a spin-loop hint between two: the short wait a fence
    /// does under the device's RMA lock, so that a barrier the other ranks
    /// complete within it ends the fence in that one critical section
    /// (the longer wait, outside the lock, costs a second one). Out of
    /// line: what it counts is waiting, not work.
    #[inline(never)]
    pub(super) fn arrived_within(&self, no: u64, looks: u32) -> Result<bool, Error> {
        let Some(w) = &self.fence else {
            return Err(Error::Abandoned);
        };
        for _ in 1..looks {
            if w.others().all(|o| winsync::arrived(o, no)) {
                return Ok(true);
            }
            std::hint::spin_loop();
        }
        Ok(w.others().all(|o| winsync::arrived(o, no)))
    }

    /// Whether `p` holds now, without consuming it (what a waiter spins
    /// on, outside every lock).
    #[inline]
    pub(super) fn may_fire(&self, p: &Poll) -> Result<bool, Error> {
        let n = self.n();
        Ok(match *p {
            Poll::Lock {
                target,
                ticket,
                exclusive,
            } => {
                let l = self.rw(target, CB_LOCK)?;
                if exclusive {
                    l.is_idle()
                } else {
                    l.may_enter(ticket, false)
                }
            }
            Poll::Barrier { no } => self.all_arrived(no)?,
            Poll::Post { target, seen } => {
                winsync::observed(self.word(self.me, CB_POST + 8 * u64::from(target))?, seen)
            }
            Poll::Complete { origin, seen } => winsync::observed(
                self.word(self.me, cb_complete(n) + 8 * u64::from(origin))?,
                seen,
            ),
        })
    }

    /// `p` with its words looked up, for a waiter to spin on
    /// ([`Ready::holds`] answers as [`DirectWin::may_fire`] would).
    pub(super) fn ready(&self, p: &Poll) -> Result<Ready<'_>, Error> {
        let n = self.n();
        Ok(match *p {
            Poll::Lock {
                target,
                ticket,
                exclusive,
            } => Ready::Lock {
                lock: self.rw(target, CB_LOCK)?,
                ticket,
                exclusive,
            },
            Poll::Barrier { no } => {
                let Some(w) = &self.fence else {
                    return Err(Error::Abandoned);
                };
                let mut others = w.others();
                let first = others.next();
                let rest = match others.len() {
                    0 => Vec::new(),
                    _ => others.collect(),
                };
                Ready::Barrier { first, rest, no }
            }
            Poll::Post { target, seen } => Ready::Counter {
                word: self.word(self.me, CB_POST + 8 * u64::from(target))?,
                seen,
            },
            Poll::Complete { origin, seen } => Ready::Counter {
                word: self.word(self.me, cb_complete(n) + 8 * u64::from(origin))?,
                seen,
            },
        })
    }

    /// Consumes `p` if it holds (enters the lock, counts the post or
    /// complete as seen); the caller then reports it to the epoch machine.
    #[inline]
    pub(super) fn try_fire(&self, p: &Poll, seen: &mut Seen) -> Result<bool, Error> {
        let fired = match *p {
            Poll::Lock {
                target,
                ticket,
                exclusive,
            } => {
                let l = self.rw(target, CB_LOCK)?;
                if exclusive {
                    l.try_exclusive_idle().is_some()
                } else {
                    l.try_shared(ticket)
                }
            }
            Poll::Barrier { .. } => self.may_fire(p)?,
            Poll::Post { target, seen: s } => {
                let ok = self.may_fire(p)?;
                if ok {
                    if let Some(c) = seen.posts.get_mut(target as usize) {
                        *c = s + 1;
                    }
                }
                ok
            }
            Poll::Complete { origin, seen: s } => {
                let ok = self.may_fire(p)?;
                if ok {
                    if let Some(c) = seen.completes.get_mut(origin as usize) {
                        *c = s + 1;
                    }
                }
                ok
            }
        };
        Ok(fired)
    }

    /// Counts a lock acquisition that had to wait (statistics).
    pub(super) fn note_lock_wait(&self) {
        bump_locked(&GLOBAL.lock_waits);
    }

    /// This rank's own lock, for the target side of active messages: a
    /// ticket taken for a shared hold.
    pub(super) fn own_lock_ticket(&self) -> Result<u64, Error> {
        Ok(self.rw(self.me, CB_LOCK)?.ticket())
    }

    /// Whether this rank's own lock ticket entered as a reader (enters it if
    /// so).
    pub(super) fn own_lock_try_shared(&self, ticket: u64) -> Result<bool, Error> {
        Ok(self.rw(self.me, CB_LOCK)?.try_shared(ticket))
    }

    /// Enters this rank's own lock exclusively if it is idle.
    pub(super) fn own_lock_try_exclusive(&self) -> Result<bool, Error> {
        Ok(self.rw(self.me, CB_LOCK)?.try_exclusive_idle().is_some())
    }

    /// Releases this rank's own lock taken for active-message origins.
    pub(super) fn own_lock_release(&self, exclusive: bool) -> Result<(), Error> {
        let l = self.rw(self.me, CB_LOCK)?;
        if exclusive {
            l.release_exclusive();
        } else {
            l.release_shared();
        }
        Ok(())
    }

    // ------------------------------------------------------ operations

    /// Copies `data` to `disp` of `rank`'s window (range checked by the
    /// caller).
    pub(super) fn store(&self, rank: u32, disp: u64, data: &[u8]) -> Result<(), Error> {
        self.write(rank, disp, data)
    }

    fn write(&self, rank: u32, disp: u64, data: &[u8]) -> Result<(), Error> {
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

    /// Copies `buf.len()` bytes at `disp` of `rank`'s window into `buf`.
    pub(super) fn load(&self, rank: u32, disp: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.read(rank, disp, buf)
    }

    fn read(&self, rank: u32, disp: u64, buf: &mut [u8]) -> Result<(), Error> {
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

    /// Takes `rank`'s accumulate lock (spinning: its holders hold it only
    /// for one read-modify-write), checking the window's ranks are alive
    /// now and then.
    fn acc_lock(&self, rank: u32) -> Result<RwTicket<'_>, Error> {
        let l = self.rw(rank, CB_ACC)?;
        let ticket = l.ticket();
        let mut spins = 0u32;
        while !l.try_exclusive(ticket) {
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                // A dead holder stalls the lock: the job is ending.
                self.check_alive()?;
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        Ok(l)
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
        GLOBAL.rmw.fetch_add(1, Ordering::Relaxed);
        let l = self.acc_lock(rank)?;
        if len <= SMALL_RMW {
            // A few elements (the common accumulate): on the stack, without
            // the scratch buffer's lock.
            let mut buf = [0u8; SMALL_RMW];
            let cur = &mut buf[..len];
            let res = (|| {
                self.read(rank, disp, cur)?;
                let old = fetch.then(|| cur.to_vec());
                f(cur);
                self.write(rank, disp, cur)?;
                Ok(old)
            })();
            l.release_exclusive();
            return res;
        }
        let res = (|| {
            // One scratch buffer per window: a fresh large buffer per
            // operation costs a page fault per page.
            let mut scratch = lock(&self.scratch);
            scratch.clear();
            scratch.resize(len, 0);
            self.read(rank, disp, &mut scratch)?;
            let old = fetch.then(|| scratch.clone());
            f(&mut scratch);
            self.write(rank, disp, &scratch)?;
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
    ) -> Result<Vec<u8>, Error> {
        let old = self.rmw(rank, disp, origin.len(), true, |cur| {
            if cur == compare {
                cur.copy_from_slice(origin);
            }
        })?;
        Ok(old.unwrap_or_default())
    }

    /// The target side of active messages on this rank's memory: `f` on
    /// `[disp, disp + len)`, copied in and out of the heap; a
    /// read-modify-write holds this rank's accumulate lock, so it is atomic
    /// with respect to the direct origins' accumulates. `false` if the range
    /// is not there (a dynamic window has no memory of its own).
    pub(super) fn target_access(
        &self,
        disp: u64,
        len: usize,
        access: Access,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> bool {
        let me = self.me;
        let Ok(t) = self.t(me) else {
            return false;
        };
        if disp.checked_add(len as u64).is_none_or(|e| e > t.size) {
            return false;
        }
        let l = match access {
            Access::ReadModifyWrite => match self.acc_lock(me) {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::error!(error = %e, "active-message accumulate dropped");
                    return false;
                }
            },
            _ => None,
        };
        let ok = match t.mem {
            Mem::Heap(a) => {
                let mut scratch = lock(&self.scratch);
                scratch.clear();
                scratch.resize(len, 0);
                let read = access != Access::Write;
                let ok = !read || self.view.get(t.pe, a.offset(disp), &mut scratch).is_ok();
                if ok {
                    f(&mut scratch);
                }
                ok && (access == Access::Read
                    || self.view.put(t.pe, a.offset(disp), &scratch).is_ok())
            }
            Mem::User(_) => {
                let mut own = lock(&self.own);
                let d = disp as usize;
                match own.get_mut(d..d + len) {
                    Some(m) => {
                        f(m);
                        true
                    }
                    None => false,
                }
            }
            Mem::Dynamic => false,
        };
        if let Some(l) = l {
            l.release_exclusive();
        }
        ok
    }

    // ------------------------------------------------- dynamic windows

    pub(super) fn is_dynamic(&self) -> bool {
        self.own_target()
            .is_some_and(|t| matches!(t.mem, Mem::Dynamic))
    }

    fn regions(&self, rank: u32) -> Result<RegionTable<'_>, Error> {
        let t = self.t(rank)?;
        let n = self.n();
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

    pub(super) fn attach(&self, mem: WinBuf) -> Result<u64, Error> {
        let table = self.regions(self.me)?;
        let mut regions = lock(&self.attached);
        let slot = (0..table.slots())
            .find(|i| regions.iter().all(|(_, _, s)| s != i))
            .ok_or(Error::InvalidArgument {
                what: "attach: every region slot of this dynamic window is in use",
            })?;
        // A zero-length Vec has a dangling (but non-zero) address: it gets
        // a slot like any other region and matches only empty accesses.
        let base = mem.addr();
        if regions.iter().any(|(b, _, _)| *b == base) {
            return Err(Error::InvalidArgument {
                what: "attach: a region is already attached at this address",
            });
        }
        table.set(slot, base, mem.len() as u64);
        regions.push((base, mem, slot));
        tracing::debug!(base, slot, "region attached");
        Ok(base)
    }

    pub(super) fn detach(&self, base: u64) -> Result<Vec<u8>, Error> {
        let table = self.regions(self.me)?;
        let mut regions = lock(&self.attached);
        let i = regions
            .iter()
            .position(|(b, _, _)| *b == base)
            .ok_or(Error::InvalidArgument {
                what: "detach: no region is attached at this address",
            })?;
        let (_, mem, slot) = regions.swap_remove(i);
        table.set(slot, 0, 0);
        Ok(mem.into_vec())
    }

    pub(super) fn with_attached<T>(
        &self,
        base: u64,
        f: impl FnOnce(&mut [u8]) -> T,
    ) -> Result<T, Error> {
        let l = self.acc_lock(self.me)?;
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

    // ------------------------------------------------------ local access

    /// `f` on this rank's memory, under its accumulate lock (atomic with
    /// respect to every accumulate-like operation). Heap memory is copied
    /// out and the bytes `f` changed are written back.
    pub(super) fn with_local<T>(&self, f: impl FnOnce(&mut [u8]) -> T) -> Result<T, Error> {
        let me = self.me;
        let l = self.acc_lock(me)?;
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

    /// The address of `rank`'s window memory in this process, if this
    /// process can load and store it: its own private memory, or any
    /// segment in the symmetric heap of a process of this node.
    pub(super) fn local_ptr(&self, rank: u32) -> Result<Option<*mut u8>, Error> {
        let t = self.t(rank)?;
        Ok(match t.mem {
            Mem::Heap(a) => Some(self.view.heap_ptr(t.pe, a, t.size as usize)?),
            Mem::User(_) if rank == self.me => Some(lock(&self.own).addr() as *mut u8),
            Mem::User(_) | Mem::Dynamic => None,
        })
    }

    /// This rank's memory, taken out of the window (at free).
    pub(super) fn take_own(&self) -> Result<Vec<u8>, Error> {
        let t = self.t(self.me)?;
        match t.mem {
            Mem::User(_) | Mem::Dynamic => Ok(std::mem::take(&mut *lock(&self.own)).into_vec()),
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

    /// The ranks of the window (`None`: reached by active messages).
    pub(super) fn targets(&self) -> &[Option<Target>] {
        &self.targets
    }

    pub(super) fn own_target(&self) -> Option<&Target> {
        self.targets.get(self.me as usize).and_then(Option::as_ref)
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

impl LockType {
    pub(super) fn exclusive(self) -> bool {
        self == LockType::Exclusive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_holds_once_every_other_rank_arrived() {
        let (a, b, c) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
        // Two ranks: one word, nothing allocated.
        let two = Ready::Barrier {
            first: Some(&a),
            rest: Vec::new(),
            no: 1,
        };
        assert!(!two.holds());
        winsync::arrive(&a, 1);
        assert!(two.holds());
        // Four ranks: the first word has arrived, the rest must too.
        let four = Ready::Barrier {
            first: Some(&a),
            rest: vec![&b, &c],
            no: 1,
        };
        winsync::arrive(&b, 1);
        assert!(!four.holds(), "a rank of the rest has not arrived");
        winsync::arrive(&c, 2);
        assert!(four.holds());
        // One rank: nobody to wait for.
        let one = Ready::Barrier {
            first: None,
            rest: Vec::new(),
            no: 7,
        };
        assert!(one.holds());
    }
}
