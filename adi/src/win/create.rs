//! Window construction and destruction: the collective exchange that picks
//! each target's backend, the memory of each kind of window, `free`, and
//! what a window dropped without `free` does.

use super::am::{self, Slot, SlotMem};
use super::direct::{self, DirectWin, Mem, Target};
use super::mem::WinBuf;
use super::{
    env, env_switch, test_split, Win, ENV_DIRECT, ENV_HEAP_WINDOWS, WINDOWS_DIRECT, WINDOWS_ENGINE,
    WINDOWS_MIXED,
};
use crate::comm::Comm;
use crate::device::{Mode, SendData};
use crate::{Error, ErrorClass};
use rma_epoch::{Backends, WindowConfig};
use shmem_onesided::SymAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Tags of the `free` barrier's rounds on a window's RMA context (whose
/// tag 0 carries RMA packets): `TAG_FREE_BARRIER + 32 * nonce + round`.
/// The nonce (window rank 0's count of windows, modulo [`NONCES`]) keeps a
/// stale message of a dropped window from matching in a later window that
/// reuses the context.
const TAG_FREE_BARRIER: u32 = 0x1000;
/// Tag on a window's RMA context of "this rank dropped the window":
/// `TAG_ABANDONED + nonce`.
const TAG_ABANDONED: u32 = 0x40000;
/// Nonces of the tags above.
const NONCES: u64 = 4096;

/// Windows this process created (the tag nonce of the windows it is rank
/// 0 of).
static SERIAL: AtomicU64 = AtomicU64::new(0);

/// The memory a window is created with.
pub(super) enum Memory {
    /// `create` (owned) and `create_raw` (the program's memory).
    Given(WinBuf),
    Alloc(usize),
    /// `allocate_shared`: in the heap, direct path, or an error;
    /// `contiguous`: every rank's segment follows the previous rank's in
    /// one block of window rank 0's heap (MPI's default layout).
    Shared(usize, bool),
    /// `create_dynamic`: no memory until `attach`; direct path with CMA,
    /// or an error.
    Dynamic,
}

/// `len` zeroed bytes, or [`Error::NoMem`] (never an abort) when they
/// cannot be had.
fn zeroed(len: usize, what: &'static str) -> Result<Vec<u8>, Error> {
    // Reserve first: a size beyond the address space or refused by the
    // system is an error here. The memory itself then comes zeroed from
    // the allocator (pages untouched until used), as `vec![0; len]` gives.
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(len)
        .map_err(|_| Error::NoMem { bytes: len, what })?;
    drop(probe);
    Ok(vec![0u8; len])
}

/// Flags of a rank's record in the creation exchange.
const F_CB: u64 = 1;
const F_CMA: u64 = 2;
const F_USER: u64 = 4;
const F_DYNAMIC: u64 = 8;
const F_NOMEM: u64 = 16;

impl Win {
    /// `MPI_Win_create`: exposes `mem` (owned by the window until
    /// [`Win::free`] returns it). Collective over `comm`.
    pub fn create(comm: &Comm, mem: Vec<u8>) -> Result<Win, Error> {
        Win::build(comm, Memory::Given(WinBuf::Owned(mem)))
    }

    /// `MPI_Win_create` over memory the caller keeps: exposes the `len`
    /// bytes at `base` (what C's `MPI_Win_create(base, size, ...)` does).
    /// Remote puts and accumulates change that memory itself, and the
    /// caller's loads see them after the synchronization that completes
    /// them (MPI's unified model); the caller's stores between epochs are
    /// what remote gets read. Collective over `comm`.
    ///
    /// The memory is never copied to the symmetric heap: same-node origins
    /// reach it by CMA single copy (or, without CMA, every target takes
    /// active messages), and this rank's own operations and the target
    /// side of active messages access it in place. [`Win::free`] returns
    /// an empty `Vec` (the memory stays the caller's).
    ///
    /// # Safety
    ///
    /// For `len > 0`, `base..base + len` is memory of this process,
    /// readable and writable, that stays valid and is not moved or freed
    /// until [`Win::free`] returns (or, if the window is dropped without
    /// `free`, for the rest of the process: other ranks may still access
    /// it). The caller's own accesses to it follow MPI's rules: no access
    /// that conflicts with an RMA operation of an epoch until the epoch's
    /// synchronization has completed it (the window may read and write the
    /// memory from any of its calls meanwhile).
    // An unsafe fn for its contract only: its body has no unsafe code.
    #[allow(unsafe_code)]
    pub unsafe fn create_raw(comm: &Comm, base: *mut u8, len: usize) -> Result<Win, Error> {
        let addr = if len == 0 { 0 } else { base as usize };
        if len > 0 && base.is_null() {
            return Err(Error::InvalidArgument {
                what: "create_raw: null base with a nonzero length",
            });
        }
        Win::build(comm, Memory::Given(WinBuf::Raw { addr, len }))
    }

    /// `MPI_Win_allocate`: a window of `size` zeroed bytes owned by the
    /// window (in this rank's symmetric heap when it fits, so that
    /// same-node origins load and store it directly). Collective over
    /// `comm`: a size that cannot be allocated on any rank is
    /// [`Error::NoMem`] (`MPI_ERR_NO_MEM`) on every rank.
    pub fn allocate(comm: &Comm, size: usize) -> Result<Win, Error> {
        Win::build(comm, Memory::Alloc(size))
    }

    /// `MPI_Win_create_dynamic`: a window with no memory until ranks
    /// [`attach`](Win::attach) some; a displacement is then an address in
    /// the target's attached memory (as `MPI_BOTTOM`-relative
    /// displacements are in MPI), checked against the regions the target
    /// attached (an access outside them is [`Error::RmaRange`]).
    /// Collective over `comm`.
    ///
    /// Takes the direct backend whatever `TMX_RMA_DIRECT` says, and needs
    /// CMA single copy on every rank (accesses are
    /// `process_vm_readv/writev` at the attached addresses); otherwise every
    /// rank gets [`Error::InvalidArgument`]. At most
    /// [`shmem_onesided::winsync::REGION_SLOTS`] regions per rank are
    /// attached at a time.
    pub fn create_dynamic(comm: &Comm) -> Result<Win, Error> {
        Win::build(comm, Memory::Dynamic)
    }

    /// A placeholder that owns nothing (what a freed [`super::SharedWin`]
    /// keeps).
    pub(super) fn null(comm: Comm) -> Win {
        Win {
            comm,
            id: u32::MAX,
            sizes: Arc::from(Vec::new()),
            freed: true,
            direct: None,
            all_direct: false,
            nonce: 0,
            calls: Mutex::new(()),
        }
    }

    pub(super) fn build(comm: &Comm, memory: Memory) -> Result<Win, Error> {
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
        let dynamic = matches!(memory, Memory::Dynamic);
        let given = matches!(memory, Memory::Given(_));
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
        // Local preparation of the direct backend: a control block, and heap
        // memory for an allocated window when it fits.
        let mut prep: Option<(u32, Option<SymAddr>, SymAddr)> = None;
        let mut cma = false;
        let heap_windows = env_switch(ENV_HEAP_WINDOWS)?;
        let split = if shared || dynamic { 1 } else { test_split()? };
        if shared || dynamic || env_switch(ENV_DIRECT)? {
            let world = wcomm.world_rank_of(me as i32).ok_or(Error::InvalidRank {
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
                // Heap memory, zeroed; `None` if it does not fit.
                let mut heap_of = |len: u64| -> Result<Option<SymAddr>, Error> {
                    match node.malloc(len.max(1)) {
                        Ok(a) => {
                            node.put(pe, a, &vec![0u8; len as usize])?;
                            Ok(Some(a))
                        }
                        Err(_) => Ok(None),
                    }
                };
                let heap = match &memory {
                    Memory::Alloc(_) if !heap_windows => None,
                    Memory::Shared(_, true) if me != 0 => None,
                    Memory::Shared(_, true) => {
                        let total = contig_sizes
                            .iter()
                            .flatten()
                            .try_fold(0u64, |a, s| a.checked_add(*s));
                        match total {
                            Some(t) => heap_of(t)?,
                            None => None,
                        }
                    }
                    Memory::Alloc(s) | Memory::Shared(s, false) => match u64::try_from(*s) {
                        Ok(s) => heap_of(s)?,
                        Err(_) => None,
                    },
                    // The window owns the given memory until free, so it
                    // may live in the heap meanwhile (copied in here, out
                    // at free): origins then load and store it directly
                    // instead of paying a CMA system call per operation.
                    Memory::Given(v) if heap_windows && v.is_owned() => {
                        match node.malloc(v.len().max(1) as u64) {
                            Ok(a) => {
                                node.put(pe, a, v)?;
                                Some(a)
                            }
                            Err(_) => None,
                        }
                    }
                    Memory::Given(_) | Memory::Dynamic => None,
                };
                Ok(Some((pe, heap, cb)))
            })?;
        }
        let heap = prep.and_then(|p| p.1);
        // Private memory (a created window, an allocated one off the heap):
        // a size that cannot be had is reported to every rank below.
        // (A given Vec is kept even when copied to the heap: it is the
        // window's memory if every target takes active messages.)
        let mut nomem = None;
        let own: WinBuf = match (memory, heap) {
            (Memory::Given(v), _) => v,
            (Memory::Dynamic, _) => WinBuf::default(),
            (Memory::Alloc(_) | Memory::Shared(..), Some(_)) => WinBuf::default(),
            (Memory::Alloc(s), None) => match zeroed(s, "Win::allocate") {
                Ok(v) => WinBuf::Owned(v),
                Err(e) => {
                    nomem = Some(e);
                    WinBuf::default()
                }
            },
            // Never exposed: a shared window without heap memory fails below
            // (or, contiguous, lives in rank 0's block).
            (Memory::Shared(..), None) => WinBuf::default(),
        };
        let (mut flags, pe, addr, cb) = match prep {
            Some((pe, heap, cb)) => {
                let (user, addr) = match heap {
                    Some(a) => (0, a.0),
                    None if dynamic => (F_USER | F_DYNAMIC, 0),
                    // A contiguous shared segment other than rank 0's.
                    None if contig_sizes.is_some() && me != 0 => (0, 0),
                    None => (F_USER, own.addr()),
                };
                (F_CB | if cma { F_CMA } else { 0 } | user, pe, addr, cb.0)
            }
            None => (0, 0, 0, 0),
        };
        if nomem.is_some() {
            flags |= F_NOMEM;
        }
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let rec: Vec<u8> = [size as u64, flags, u64::from(pe), addr, cb, serial]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let all = wcomm.allgather(&rec)?;
        let word = |c: &[u8], i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c[8 * i..8 * i + 8]);
            u64::from_le_bytes(b)
        };
        let recs: Vec<&[u8]> = all.chunks_exact(48).collect();
        let nonce = recs.first().map_or(0, |c| (word(c, 5) % NONCES) as u32);
        let sizes: Arc<[u64]> = recs.iter().map(|c| word(c, 0)).collect();
        let flag = |c: &[u8], f: u64| word(c, 1) & f != 0;
        let all_ok = recs.iter().all(|c| flag(c, F_CB));
        let any_user = recs.iter().any(|c| flag(c, F_USER));
        let all_cma = recs.iter().all(|c| flag(c, F_CMA));
        // Ranks on this node (with a transport between nodes, the others
        // are reached by active messages only).
        let on_my_node = |r: u32| {
            wcomm
                .world_rank_of(r as i32)
                .is_some_and(|w| dev.node_index_of(w).is_ok())
        };
        let one_node = (0..n).all(on_my_node);
        let direct_ok = if (shared || dynamic) && !one_node {
            false
        } else if shared {
            all_ok && !any_user
        } else if dynamic {
            all_ok && all_cma
        } else {
            all_ok && (!any_user || all_cma)
        };
        let failed = recs.iter().position(|c| flag(c, F_NOMEM));
        let give_back = || -> Result<(), Error> {
            if let Some((_, heap, cb)) = prep {
                dev.with_node(|node| {
                    node.free(cb)?;
                    if let Some(a) = heap {
                        node.free(a)?;
                    }
                    Ok(())
                })?;
            }
            Ok(())
        };
        if let Some(r) = failed {
            // Collectively: every rank learns that one could not allocate.
            give_back()?;
            return Err(nomem.unwrap_or(Error::NoMem {
                bytes: usize::try_from(word(recs[r], 0)).unwrap_or(usize::MAX),
                what: "Win::allocate (on another rank)",
            }));
        }
        if direct_ok {
            let mut targets: Vec<Target> = recs
                .iter()
                .map(|c| Target {
                    pe: word(c, 2) as u32,
                    size: word(c, 0),
                    mem: if flag(c, F_DYNAMIC) {
                        Mem::Dynamic
                    } else if flag(c, F_USER) {
                        Mem::User(word(c, 3))
                    } else {
                        Mem::Heap(SymAddr(word(c, 3)))
                    },
                    cb: SymAddr(word(c, 4)),
                })
                .collect();
            if let (Some(sizes), Some(root)) = (&contig_sizes, recs.first()) {
                // Rank r's segment starts where rank r-1's ends.
                let (pe0, mut at) = (word(root, 2) as u32, word(root, 3));
                for (t, len) in targets.iter_mut().zip(sizes) {
                    t.pe = pe0;
                    t.mem = Mem::Heap(SymAddr(at));
                    at += len;
                }
            }
            // Pairs on different nodes (or simulated nodes) take active
            // messages.
            let same_node = |r: u32| on_my_node(r) && r % split == me % split;
            let targets: Vec<Option<Target>> = targets
                .into_iter()
                .enumerate()
                .map(|(r, t)| same_node(r as u32).then_some(t))
                .collect();
            let all_direct = targets.iter().all(Option::is_some);
            let backends = if all_direct {
                Backends::direct(0..n)
            } else {
                Backends::direct((0..n).filter(|r| same_node(*r)))
            };
            let view = dev.with_node(|node| Ok(node.view()))?;
            let own = if heap.is_some() {
                WinBuf::default()
            } else {
                own
            };
            let d = Arc::new(DirectWin::new(view, me, targets, own, heap));
            let win = Win::register(
                wcomm.clone(),
                sizes,
                SlotMem::Direct(Arc::clone(&d)),
                backends,
                Some(d),
                all_direct,
                nonce,
            );
            if win.is_err() {
                give_back()?;
            }
            return win;
        }
        // Every target by active messages (or a failed shared window): give
        // back what the direct backend took.
        give_back()?;
        if (shared || dynamic) && !one_node {
            return Err(if shared {
                Error::SpansNodes {
                    what: "Win::allocate_shared",
                    class: ErrorClass::RmaShared,
                }
            } else {
                Error::SpansNodes {
                    what: "Win::create_dynamic",
                    class: ErrorClass::UnsupportedOperation,
                }
            });
        }
        if dynamic {
            return Err(Error::InvalidArgument {
                what: "create_dynamic: dynamic windows need a control block in every rank's \
                       symmetric heap and CMA single copy on every rank",
            });
        }
        if shared {
            return Err(Error::NoMem {
                bytes: size,
                what: "Win::allocate_shared: the segments do not fit in the symmetric heap \
                       (TMX_SHMEM_HEAP_BYTES; contiguous: rank 0's holds them all)",
            });
        }
        let mem = match (heap, given) {
            (Some(_), false) => WinBuf::Owned(zeroed(size, "Win::allocate")?),
            _ => own,
        };
        Win::register(
            wcomm,
            sizes,
            SlotMem::Private(mem),
            Backends::active_messages(),
            None,
            false,
            nonce,
        )
    }

    /// Creates the window in the epoch machine and its driver slot.
    fn register(
        wcomm: Comm,
        sizes: Arc<[u64]>,
        mem: SlotMem,
        backends: Backends,
        direct: Option<Arc<DirectWin>>,
        all_direct: bool,
        nonce: u32,
    ) -> Result<Win, Error> {
        let n = wcomm.size() as u32;
        let me = wcomm.rank() as u32;
        let my_size = sizes.get(me as usize).copied().unwrap_or(0);
        let cfg = WindowConfig::from_lookup(n, me, my_size, env)?;
        let dev = wcomm.dev();
        let am = !all_direct;
        let direct_ranks = backends.direct_ranks().len();
        let id = {
            let mut g = am::lock(&dev.rma.state);
            let id = g.engine.create_window_with(cfg, backends)?;
            let slot = Slot::new(
                mem,
                wcomm.inner.ctx,
                wcomm.inner.coll,
                me,
                Arc::clone(&wcomm.inner.group),
            );
            g.insert(&dev.rma, id, slot, am);
            id
        };
        let path = match (&direct, all_direct) {
            (Some(_), true) => {
                WINDOWS_DIRECT.fetch_add(1, Ordering::Relaxed);
                "direct"
            }
            (Some(_), false) => {
                WINDOWS_MIXED.fetch_add(1, Ordering::Relaxed);
                "mixed"
            }
            (None, _) => {
                WINDOWS_ENGINE.fetch_add(1, Ordering::Relaxed);
                "active messages"
            }
        };
        tracing::info!(
            win = id,
            ctx = wcomm.inner.ctx,
            size = my_size,
            direct_ranks,
            path,
            "window created"
        );
        Ok(Win {
            comm: wcomm,
            id,
            sizes,
            freed: false,
            direct,
            all_direct,
            nonce,
            calls: Mutex::new(()),
        })
    }

    /// `MPI_Win_free`: collective; every rank must have closed its epochs.
    /// Waits until no rank still accesses this one (a barrier over the
    /// window's communicator, then the epoch machine's free: locks
    /// released, acknowledgements in), and hands the memory back. If
    /// another rank dropped the window without freeing it, fails with
    /// [`Error::WinAbandoned`] instead of waiting for it.
    pub fn free(mut self) -> Result<Vec<u8>, Error> {
        let dev = self.comm.dev();
        {
            let g = am::lock(&dev.rma.state);
            let access = g.engine.access_state(self.id)?;
            let exposed = g.engine.exposure_state(self.id)? != rma_epoch::ExposureState::None;
            use rma_epoch::AccessState::*;
            if !matches!(access, Unset | FenceIssued | FenceGranted) || exposed {
                return Err(Error::Rma(rma_epoch::Error::FreeInEpoch {
                    win: self.id,
                    state: access,
                }));
            }
        }
        if let Err(e) = self.free_barrier() {
            // The window is unusable: forget it here, without waiting.
            self.freed = true;
            self.forget();
            return Err(e);
        }
        self.call(|e, w| e.free_window(w))?;
        let slot = am::lock(&dev.rma.state).remove(&dev.rma, self.id);
        self.freed = true;
        if let Some(d) = &self.direct {
            let mem = d.take_own()?;
            if let Some(t) = d.own_target().copied() {
                let block = d.heap_block();
                dev.with_node(|node| {
                    node.free(t.cb)?;
                    if let Some(a) = block {
                        node.free(a)?;
                    }
                    Ok(())
                })?;
            }
            return Ok(mem);
        }
        Ok(slot.and_then(|mut s| s.take_private()).unwrap_or_default())
    }

    /// The barrier of `free`: a dissemination barrier on the window's RMA
    /// context that also watches for another rank's "window dropped"
    /// message (and consumes it).
    fn free_barrier(&self) -> Result<(), Error> {
        let dev = self.comm.dev();
        let inner = &self.comm.inner;
        let n = self.size() as u32;
        let me = self.rank() as u32;
        let world = |r: u32| inner.group.world.get(r as usize).copied().unwrap_or(0);
        let abandoned = dev.start_recv(
            tm_proto::MatchSpec {
                context_id: inner.ctx,
                source: tm_proto::Source::Any,
                tag: tm_proto::Tag::Value(TAG_ABANDONED + self.nonce),
            },
            Vec::new(),
            crate::device::RecvInto::Owned,
            Arc::clone(&inner.group),
        )?;
        let mut dist = 1u32;
        let mut round = 0u32;
        let mut idle = 0u32;
        let r = (|| {
            while dist < n {
                let to = (me + dist) % n;
                let from = (me + n - dist % n) % n;
                let tag = TAG_FREE_BARRIER + 32 * self.nonce + round;
                let spec = tm_proto::MatchSpec {
                    context_id: inner.ctx,
                    source: tm_proto::Source::Rank(world(from)),
                    tag: tm_proto::Tag::Value(tag),
                };
                let mut r = dev.start_recv(
                    spec,
                    Vec::new(),
                    crate::device::RecvInto::Owned,
                    Arc::clone(&inner.group),
                )?;
                let s = dev.start_send(
                    world(to),
                    tag,
                    inner.ctx,
                    SendData::Owned(Vec::new()),
                    Mode::Standard,
                    None,
                )?;
                while !(s.is_complete() && r.is_complete()) {
                    if abandoned.is_complete() {
                        let _ = dev.cancel(&r);
                        let _ = dev.wait(&mut r);
                        return Ok(false);
                    }
                    dev.check(false)?;
                    idle = idle.wrapping_add(1);
                    dev.relax(idle)?;
                }
                dist = dist.saturating_mul(2);
                round += 1;
            }
            Ok::<bool, Error>(true)
        })();
        match r? {
            true => {
                if !dev.cancel(&abandoned)? && abandoned.is_complete() {
                    // Dropped by a rank after it passed the barrier?
                    tracing::warn!(win = self.id, "window dropped by a rank that freed it");
                }
                Ok(())
            }
            false => {
                let mut abandoned = abandoned;
                let st = dev.wait(&mut abandoned)?;
                Err(Error::WinAbandoned { rank: st.source })
            }
        }
    }

    /// Forgets this rank's part of a window that cannot be freed properly:
    /// progress stops visiting it; its memory stays allocated (other ranks
    /// may still access it).
    fn forget(&self) {
        let dev = self.comm.dev();
        am::lock(&dev.rma.state).remove(&dev.rma, self.id);
    }
}

impl Drop for Win {
    /// Dropping a window that was not freed cannot end it properly
    /// (`MPI_Win_free` is collective): it prints a warning to stderr, tells
    /// the other ranks (whose [`Win::free`] then fails with
    /// [`Error::WinAbandoned`] instead of waiting) and forgets the window
    /// locally. Its memory stays allocated: other ranks may still access
    /// it.
    fn drop(&mut self) {
        if self.freed {
            return;
        }
        eprintln!(
            "tmx: rank {} dropped an RMA window without Win::free (MPI_Win_free is \
             collective): its memory is leaked and the other ranks' free fails",
            self.comm.rank()
        );
        tracing::warn!(win = self.id, "window dropped without Win::free");
        let dev = self.comm.dev();
        let inner = &self.comm.inner;
        for (r, &world) in inner.group.world.iter().enumerate() {
            if r as i32 == self.comm.rank() {
                continue;
            }
            if let Ok(req) = dev.start_send(
                world,
                TAG_ABANDONED + self.nonce,
                inner.ctx,
                SendData::Owned(Vec::new()),
                Mode::Standard,
                None,
            ) {
                req.free();
            }
        }
        self.forget();
    }
}
