//! The one-sided API: a PE's view of the node segment.
//!
//! # Completion semantics
//!
//! - [`Node::put`] and [`Node::get`] are `memcpy` through the shared mapping;
//!   they are **synchronous**: when `put` returns the bytes are in the target's
//!   symmetric memory (the source buffer may be reused), and when `get` returns
//!   the destination holds them. There is no outstanding operation to wait for.
//! - *Visibility to another process* follows the memory model: the target (or
//!   a third PE) is guaranteed to see the bytes of a put only after it
//!   synchronises with the putter — typically through a signal word written
//!   with Release after the data ([`Node::put_signal`]) and read with Acquire
//!   ([`Node::wait_until`]).
//! - [`Node::fence`] orders every put issued before it before every put and
//!   signal issued after it (a Release fence). [`Node::quiet`] additionally
//!   orders them before any later load (a SeqCst fence). Because puts complete
//!   synchronously, neither has anything to wait for.
//! - CMA transfers ([`Node::cma_write`], [`Node::cma_read`]) are synchronous
//!   system calls with the same meaning; they copy to/from arbitrary memory of
//!   a local process, addressed by its virtual address, and need ptrace-level
//!   permission over it (checked once at init: [`Node::cma_status`]).
//!
//! # CMA and Yama's ptrace scope
//!
//! `process_vm_readv/writev` need the same permission as `ptrace` attach.
//! Under Yama's `kernel.yama.ptrace_scope = 1` (restricted ptrace, the
//! default of many distributions) a process may only attach to its own
//! descendants, or to a process that named it (or one of its ancestors)
//! its tracer with `prctl(PR_SET_PTRACER)`. The local ranks are siblings,
//! children of one launcher process (`tmrun`, Hydra's proxy, slurmstepd),
//! so each rank names **its parent** the tracer: exactly the launcher's
//! descendants (the job's ranks on this node, and whatever else that
//! launcher started) may then read and write its memory, rather than every
//! process of the user (`PR_SET_PTRACER_ANY`, which weakens Yama for the
//! whole job's lifetime). A rank alone on its node, or with CMA off
//! (`TMX_SHMEM_CMA=off`: large messages then take the two-copy eager path),
//! names no tracer at all. Without Yama the call fails harmlessly; the
//! probe at init decides either way ([`Node::ptracer`] tells what was
//! declared).

use crate::calibrate::{self, Calibration};
use crate::config::{CmaMode, Config};
use crate::error::{Error, Result};
use crate::heap::SymHeap;
use crate::segment::{Place, Segment};
use core::sync::atomic::{fence, AtomicU64, Ordering};
use memmap2::MmapRaw;
use nix::errno::Errno;
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use std::io::{IoSlice, IoSliceMut};
use std::sync::Arc;
use std::time::Instant;

/// An address in the symmetric heap: an offset valid on every PE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SymAddr(pub u64);

impl SymAddr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> SymAddr {
        SymAddr(self.0 + bytes)
    }
}

/// Whether CMA single copy can be used, decided at init.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmaStatus {
    /// `process_vm_readv/writev` work between the local ranks.
    Available,
    /// Not usable; the reason (disabled by configuration, or the probe's errno).
    Unavailable(String),
}

/// A PE attached to the node segment.
#[derive(Debug)]
pub struct Node {
    seg: Segment,
    cfg: Config,
    heap: SymHeap,
    cma: CmaStatus,
    view: NodeView,
    /// The CMA calibration's outcome, if it ran.
    calibration: Option<Calibration>,
    /// Who may trace this process (for CMA), as declared at init.
    ptracer: Ptracer,
    /// Kept alive (and at a fixed address) for peers' CMA probes.
    _probe: Box<u64>,
}

impl Node {
    /// Attaches local rank `local_rank` of `local_size` to job `job_id`'s
    /// node segment (creating it on local rank 0), waits for all local ranks,
    /// probes CMA and, when [`Config::cma_calibrate`] is set, measures
    /// eager against CMA between local ranks 0 and 1 ([`Calibration`]). All local ranks must call this with the same job id,
    /// size and configuration; they may be started independently.
    pub fn init(job_id: &str, local_rank: u32, local_size: u32, cfg: Config) -> Result<Self> {
        Self::init_at(
            Place::of_job(job_id, local_rank)?,
            local_rank,
            local_size,
            cfg,
        )
    }

    /// [`Node::init`] with the segment at an explicit [`Place`]: on local
    /// rank 0 the object [`Segment::reserve`] made (under a fresh name if
    /// the job's own was taken), elsewhere the name rank 0 published.
    pub fn init_at(place: Place, local_rank: u32, local_size: u32, cfg: Config) -> Result<Self> {
        // The sizes left to the node's size are chosen now, so that
        // `config()` reports what the segment uses.
        let mut cfg = cfg.resolved(local_size);
        let probe = Box::new(0x746d_785f_7072_6f62u64 ^ u64::from(std::process::id()));
        let ptracer = if cfg.cma != CmaMode::Off && local_size > 1 {
            allow_ptrace_by_launcher()
        } else {
            Ptracer::None
        };
        let seg = Segment::attach_with_probe(
            place,
            local_rank,
            local_size,
            &cfg,
            (&*probe as *const u64) as u64,
            *probe,
        )?;
        let cma = match cfg.cma {
            CmaMode::Off => CmaStatus::Unavailable("disabled by TMX_SHMEM_CMA=off".into()),
            _ => probe_cma(&seg),
        };
        if let CmaStatus::Unavailable(why) = &cma {
            if cfg.cma == CmaMode::On {
                return Err(Error::CmaUnavailable {
                    reason: why.clone(),
                });
            }
            tracing::info!(reason = %why, "CMA single copy unavailable: large messages use the two-copy eager path");
        } else {
            tracing::info!("CMA single copy available");
        }
        let calibration = calibrate::run(&seg, &cfg, cma == CmaStatus::Available);
        if let Some(c) = &calibration {
            c.apply(&mut cfg);
        }
        let view = NodeView::new(&seg, &cfg, &cma);
        Ok(Node {
            calibration,
            ptracer,
            heap: SymHeap::new(cfg.heap_bytes),
            seg,
            cfg,
            cma,
            view,
            _probe: probe,
        })
    }

    /// [`Node::init`] with the job id from `TMX_JOB_ID` (exported by `tmrun`)
    /// and the configuration from the `TMX_SHMEM_*` variables.
    pub fn init_from_env(local_rank: u32, local_size: u32) -> Result<Self> {
        let job = std::env::var("TMX_JOB_ID").map_err(|_| Error::Config {
            var: "TMX_JOB_ID",
            value: String::new(),
            reason: "must be set (tmrun exports it)",
        })?;
        Self::init(&job, local_rank, local_size, Config::from_env()?)
    }

    /// This PE's local rank.
    pub fn rank(&self) -> u32 {
        self.seg.rank()
    }

    /// Number of local PEs.
    pub fn size(&self) -> u32 {
        self.seg.size()
    }

    /// The configuration in use (with the thresholds the CMA calibration
    /// raised, if it did).
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// What the init-time CMA calibration (`TMX_SHMEM_TUNE=cma_calibrate`)
    /// decided, or `None` when it did not run (off, CMA unavailable, one
    /// local rank, more local ranks than CPUs, or it timed out).
    pub fn calibration(&self) -> Option<&Calibration> {
        self.calibration.as_ref()
    }

    /// Who may `ptrace` (and so use CMA on) this process, as declared at
    /// init (see the module docs).
    pub fn ptracer(&self) -> &Ptracer {
        &self.ptracer
    }

    /// The segment (rings, prepost rings, layout, liveness).
    pub fn segment(&self) -> &Segment {
        &self.seg
    }

    /// The CMA status decided at init.
    pub fn cma_status(&self) -> &CmaStatus {
        &self.cma
    }

    /// Allocates `len` bytes of symmetric memory (64-byte aligned). PEs that
    /// make the same sequence of `malloc`/`free` calls get the same addresses.
    pub fn malloc(&mut self, len: u64) -> Result<SymAddr> {
        self.heap.alloc(len, 64).map(SymAddr)
    }

    /// Frees a block from [`Node::malloc`].
    pub fn free(&mut self, addr: SymAddr) -> Result<()> {
        self.heap.free(addr.0)
    }

    /// A cloneable, thread-safe handle to the symmetric heaps and the
    /// local processes ([`NodeView`]), usable without holding the `Node`.
    pub fn view(&self) -> NodeView {
        self.view.clone()
    }

    /// Copies `src` into `pe`'s symmetric memory at `dst`. Complete on return.
    pub fn put(&self, pe: u32, dst: SymAddr, src: &[u8]) -> Result<()> {
        self.view.put(pe, dst, src)
    }

    /// Copies `dst.len()` bytes from `pe`'s symmetric memory at `src`.
    pub fn get(&self, pe: u32, src: SymAddr, dst: &mut [u8]) -> Result<()> {
        self.view.get(pe, src, dst)
    }

    /// A 64-bit atomic in `pe`'s symmetric memory (`addr` 8-byte aligned),
    /// for signals, counters and locks.
    pub fn atomic_u64(&self, pe: u32, addr: SymAddr) -> Result<&AtomicU64> {
        self.view.atomic_u64(pe, addr)
    }

    /// Puts `src` at `dst` on `pe`, then stores `value` to the signal word
    /// `sig` on `pe` with Release: a PE that sees `value` with Acquire
    /// ([`Node::wait_until`]) sees the data.
    pub fn put_signal(
        &self,
        pe: u32,
        dst: SymAddr,
        src: &[u8],
        sig: SymAddr,
        value: u64,
    ) -> Result<()> {
        self.put(pe, dst, src)?;
        self.atomic_u64(pe, sig)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Waits until the local signal word at `sig` satisfies `pred` (Acquire),
    /// and returns its value. While waiting it checks every
    /// `TMX_SHMEM_LIVENESS_MS` that `watch` (the PE expected to signal) is
    /// alive, returning [`Error::PeerDied`] if not.
    pub fn wait_until(
        &self,
        sig: SymAddr,
        watch: u32,
        mut pred: impl FnMut(u64) -> bool,
    ) -> Result<u64> {
        let w = self.atomic_u64(self.rank(), sig)?;
        let mut last_check = Instant::now();
        let mut spins = 0u32;
        loop {
            let v = w.load(Ordering::Acquire);
            if pred(v) {
                return Ok(v);
            }
            spins = spins.wrapping_add(1);
            if spins % 256 == 0 {
                std::thread::yield_now();
                if last_check.elapsed() >= self.cfg.liveness_interval {
                    last_check = Instant::now();
                    if let Err(e) = self.seg.check_alive(watch) {
                        let v = w.load(Ordering::Acquire);
                        return if pred(v) { Ok(v) } else { Err(e) };
                    }
                }
            } else {
                core::hint::spin_loop();
            }
        }
    }

    /// Orders earlier puts before later puts and signals (a Release fence).
    pub fn fence(&self) {
        fence(Ordering::Release);
    }

    /// Orders earlier puts before everything later (a SeqCst fence). Puts are
    /// synchronous, so there is nothing outstanding to complete.
    pub fn quiet(&self) {
        fence(Ordering::SeqCst);
    }

    /// Single copy: writes `src` to virtual address `remote_addr` of `pe`'s
    /// process (`process_vm_writev`). Complete on return.
    pub fn cma_write(&self, pe: u32, remote_addr: u64, src: &[u8]) -> Result<()> {
        self.view.cma_write(pe, remote_addr, src)
    }

    /// Single copy: reads `dst.len()` bytes from virtual address
    /// `remote_addr` of `pe`'s process (`process_vm_readv`).
    pub fn cma_read(&self, pe: u32, remote_addr: u64, dst: &mut [u8]) -> Result<()> {
        self.view.cma_read(pe, remote_addr, dst)
    }

    /// Single copy of several pieces in one `process_vm_readv` call: reads
    /// `pieces[i].1` bytes from virtual address `pieces[i].0` of `pe`'s
    /// process into `dst[i]`, in order, and returns how many bytes it
    /// read. A short count means the pieces after that point were not
    /// read (one failed, or the kernel stopped there): the caller reads
    /// them again one by one.
    pub(crate) fn cma_readv(
        &self,
        pe: u32,
        dst: &mut [IoSliceMut<'_>],
        pieces: &[RemoteIoVec],
    ) -> Result<usize> {
        self.view.cma_readv(pe, dst, pieces)
    }

    /// Marks this PE finalized in the segment (peers see it in liveness
    /// reports) and detaches.
    pub fn finalize(self) {
        self.seg.mark_finalized();
    }
}

/// A cloneable, thread-safe handle to the node segment's symmetric heaps
/// and to the local processes (for CMA), from [`Node::view`].
///
/// It keeps the mapping alive by itself, so a holder (an RMA window, say)
/// can copy and use atomics without borrowing the [`Node`] or taking the
/// lock its owner keeps the `Node` under. Same completion semantics as
/// [`Node::put`]/[`Node::get`]/[`Node::cma_write`]/[`Node::cma_read`].
#[derive(Debug, Clone)]
pub struct NodeView {
    map: Arc<MmapRaw>,
    /// Offset of each PE's symmetric heap in the mapping.
    heaps: Arc<[u64]>,
    /// Each PE's pid (registered before the attach barrier).
    pids: Arc<[u32]>,
    heap_bytes: u64,
    rank: u32,
    cma: CmaStatus,
}

impl NodeView {
    fn new(seg: &Segment, cfg: &Config, cma: &CmaStatus) -> Self {
        NodeView {
            map: seg.map_arc(),
            heaps: (0..seg.size()).map(|pe| seg.heap_offset(pe)).collect(),
            pids: (0..seg.size()).map(|pe| seg.pid_of(pe)).collect(),
            heap_bytes: cfg.heap_bytes,
            rank: seg.rank(),
            cma: cma.clone(),
        }
    }

    /// This PE's local rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of local PEs.
    pub fn size(&self) -> u32 {
        self.heaps.len() as u32
    }

    /// Whether CMA single copy works between the local ranks.
    pub fn cma_available(&self) -> bool {
        self.cma == CmaStatus::Available
    }

    /// Checks that `pe`'s process is alive ([`Error::PeerDied`] if not).
    pub fn check_alive(&self, pe: u32) -> Result<()> {
        let pid = self.pid(pe)?;
        if pe == self.rank || pid == 0 || crate::segment::process_alive(pid) {
            Ok(())
        } else {
            Err(Error::PeerDied { rank: pe, pid })
        }
    }

    fn pid(&self, pe: u32) -> Result<u32> {
        self.pids
            .get(pe as usize)
            .copied()
            .ok_or_else(|| Error::BadPe {
                pe,
                size: self.size(),
            })
    }

    #[inline]
    fn heap_range(&self, pe: u32, addr: SymAddr, len: usize) -> Result<*mut u8> {
        let base = *self.heaps.get(pe as usize).ok_or_else(|| Error::BadPe {
            pe,
            size: self.size(),
        })?;
        let limit = self.heap_bytes;
        match addr.0.checked_add(len as u64) {
            Some(end) if end <= limit => {}
            _ => {
                return Err(Error::OutOfBounds {
                    pe,
                    offset: addr.0,
                    len: len as u64,
                    limit,
                })
            }
        }
        // SAFETY: `base` is pe's heap offset from the Layout the mapping was
        // sized by, and addr + len <= heap_bytes (checked), so the pointer
        // stays inside pe's heap, inside the mapping that `self.map` keeps
        // alive.
        Ok(unsafe { self.map.as_mut_ptr().add((base + addr.0) as usize) })
    }

    /// The address, in this process's mapping, of `len` bytes at `addr`
    /// of `pe`'s symmetric heap (bounds checked), valid while this view
    /// (or any clone of it) lives. For a caller that hands the memory to
    /// code loading and storing through pointers (a C program's
    /// `MPI_Win_allocate` base): dereferencing it is that caller's
    /// `unsafe`, and concurrent accesses are ordered as for [`put`](Self::put).
    pub fn heap_ptr(&self, pe: u32, addr: SymAddr, len: usize) -> Result<*mut u8> {
        self.heap_range(pe, addr, len)
    }

    /// Copies `src` into `pe`'s symmetric memory at `dst`. Complete on return.
    #[inline]
    pub fn put(&self, pe: u32, dst: SymAddr, src: &[u8]) -> Result<()> {
        let p = self.heap_range(pe, dst, src.len())?;
        // SAFETY: `p..p+len` is inside the shared mapping (checked) and cannot
        // overlap `src`, a Rust slice that borrows private memory or another
        // part of the mapping through a shared reference that this call does
        // not write. Concurrent access by other processes to the same bytes is
        // the program's business, as in OpenSHMEM; we only move bytes.
        unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes from `pe`'s symmetric memory at `src`.
    #[inline]
    pub fn get(&self, pe: u32, src: SymAddr, dst: &mut [u8]) -> Result<()> {
        let p = self.heap_range(pe, src, dst.len())?;
        // SAFETY: as in `put`, with the roles swapped; `dst` is an exclusive
        // Rust slice, so it does not overlap the shared source range.
        unsafe { core::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// A 64-bit atomic in `pe`'s symmetric memory (`addr` 8-byte aligned),
    /// for signals, counters and locks.
    #[inline]
    pub fn atomic_u64(&self, pe: u32, addr: SymAddr) -> Result<&AtomicU64> {
        if addr.0 % 8 != 0 {
            return Err(Error::InvalidArgument(
                "atomic address must be 8-byte aligned",
            ));
        }
        let p = self.heap_range(pe, addr, 8)?;
        // SAFETY: in bounds (checked), 8-byte aligned (heap offsets are page
        // aligned plus an aligned addr), valid for any bit pattern, and alive
        // as long as `self` (which holds the mapping).
        Ok(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// `n` consecutive 64-bit atomics in `pe`'s symmetric memory from
    /// `addr` (8-byte aligned): tables of counters or regions.
    #[inline]
    pub fn atomic_u64_slice(&self, pe: u32, addr: SymAddr, n: usize) -> Result<&[AtomicU64]> {
        if addr.0 % 8 != 0 {
            return Err(Error::InvalidArgument(
                "atomic address must be 8-byte aligned",
            ));
        }
        let bytes = n
            .checked_mul(8)
            .ok_or(Error::InvalidArgument("atomic table too large"))?;
        let p = self.heap_range(pe, addr, bytes)?;
        // SAFETY: `n * 8` bytes from `p` are in bounds (checked), 8-byte
        // aligned, valid for any bit pattern as `AtomicU64`s (which have the
        // size and alignment of u64), and alive as long as `self`.
        Ok(unsafe { core::slice::from_raw_parts(p.cast::<AtomicU64>(), n) })
    }

    fn peer_pid(&self, pe: u32) -> Result<Pid> {
        let pid = self.pid(pe)?;
        i32::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .map(Pid::from_raw)
            .ok_or(Error::PeerDied { rank: pe, pid })
    }

    fn require_cma(&self) -> Result<()> {
        match &self.cma {
            CmaStatus::Available => Ok(()),
            CmaStatus::Unavailable(r) => Err(Error::CmaUnavailable { reason: r.clone() }),
        }
    }

    /// Single copy: writes `src` to virtual address `remote_addr` of `pe`'s
    /// process (`process_vm_writev`). Complete on return.
    pub fn cma_write(&self, pe: u32, remote_addr: u64, src: &[u8]) -> Result<()> {
        self.require_cma()?;
        let pid = self.peer_pid(pe)?;
        let mut done = 0usize;
        while done < src.len() {
            let remote = [RemoteIoVec {
                base: remote_addr as usize + done,
                len: src.len() - done,
            }];
            match process_vm_writev(pid, &[IoSlice::new(&src[done..])], &remote) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(Errno::EINTR) => {}
                Err(e) => return Err(cma_error(pe, pid, "process_vm_writev", e)),
            }
        }
        if done < src.len() {
            return Err(Error::CmaShort {
                pe,
                done: done as u64,
                len: src.len() as u64,
            });
        }
        Ok(())
    }

    /// [`Node::cma_readv`]: one `process_vm_readv` call over several
    /// pieces; how many bytes it read.
    pub(crate) fn cma_readv(
        &self,
        pe: u32,
        dst: &mut [IoSliceMut<'_>],
        pieces: &[RemoteIoVec],
    ) -> Result<usize> {
        self.require_cma()?;
        let pid = self.peer_pid(pe)?;
        loop {
            match process_vm_readv(pid, dst, pieces) {
                Ok(n) => return Ok(n),
                Err(Errno::EINTR) => {}
                Err(e) => return Err(cma_error(pe, pid, "process_vm_readv", e)),
            }
        }
    }

    /// Single copy: reads `dst.len()` bytes from virtual address
    /// `remote_addr` of `pe`'s process (`process_vm_readv`).
    pub fn cma_read(&self, pe: u32, remote_addr: u64, dst: &mut [u8]) -> Result<()> {
        let len = dst.len();
        let mut done = 0usize;
        while done < len {
            let remote = [RemoteIoVec {
                base: remote_addr as usize + done,
                len: len - done,
            }];
            match self.cma_readv(pe, &mut [IoSliceMut::new(&mut dst[done..])], &remote)? {
                0 => break,
                n => done += n,
            }
        }
        if done < len {
            return Err(Error::CmaShort {
                pe,
                done: done as u64,
                len: len as u64,
            });
        }
        Ok(())
    }
}

/// The error of a failed `process_vm_readv/writev` (`call`) on local rank
/// `pe` (process `pid`): `PeerDied` if the process is gone.
fn cma_error(pe: u32, pid: Pid, call: &'static str, e: Errno) -> Error {
    if e == Errno::ESRCH {
        Error::PeerDied {
            rank: pe,
            pid: pid.as_raw() as u32,
        }
    } else {
        Error::os(call, e)
    }
}

/// What a rank declared with `prctl(PR_SET_PTRACER)` at init ([`Node::ptracer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ptracer {
    /// Nothing declared: CMA is off, or the rank is alone on its node.
    None,
    /// The launcher process (this rank's parent) and its descendants, the
    /// job's local ranks among them, may trace this process.
    Launcher {
        /// The launcher's pid.
        pid: u32,
    },
    /// The declaration failed (no Yama in the kernel: nothing to declare);
    /// the CMA probe decides.
    Failed {
        /// Why.
        reason: String,
    },
}

/// Lets the local peers use `process_vm_readv/writev` on this process under
/// Yama `ptrace_scope = 1`: names the launcher (our parent) the tracer, so
/// that its descendants, the job's ranks on this node, may attach (see the
/// module docs), not every process of the user.
fn allow_ptrace_by_launcher() -> Ptracer {
    let parent = nix::unistd::getppid().as_raw();
    let Ok(pid) = u32::try_from(parent) else {
        return Ptracer::Failed {
            reason: format!("parent pid {parent}"),
        };
    };
    // SAFETY: prctl(PR_SET_PTRACER, pid) takes integer arguments only and
    // touches no memory of ours.
    let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::c_ulong::from(pid), 0, 0, 0) };
    if rc == 0 {
        tracing::debug!(launcher = pid, "ptracer: the launcher's descendants");
        Ptracer::Launcher { pid }
    } else {
        let reason = std::io::Error::last_os_error().to_string();
        tracing::debug!(%reason, "prctl(PR_SET_PTRACER) failed (no Yama?); CMA probe decides");
        Ptracer::Failed { reason }
    }
}

/// Reads the next local rank's probe word with `process_vm_readv` (our own
/// when alone) and compares it with the value it published.
fn probe_cma(seg: &Segment) -> CmaStatus {
    let peer = (seg.rank() + 1) % seg.size();
    let info = seg.rank_info(peer);
    let addr = info.probe_addr.load(Ordering::Acquire);
    let want = info.probe_value.load(Ordering::Acquire);
    let Ok(pid) = i32::try_from(seg.pid_of(peer)) else {
        return CmaStatus::Unavailable("peer pid out of range".into());
    };
    let mut got = [0u8; 8];
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: 8,
    }];
    match process_vm_readv(
        Pid::from_raw(pid),
        &mut [IoSliceMut::new(&mut got)],
        &remote,
    ) {
        Ok(8) if u64::from_ne_bytes(got) == want => CmaStatus::Available,
        Ok(n) => CmaStatus::Unavailable(format!(
            "probe of local rank {peer} read {n} bytes with a wrong value"
        )),
        Err(e) => CmaStatus::Unavailable(format!("process_vm_readv on local rank {peer}: {e}")),
    }
}
