//! The node segment: one shared-memory object per job and node.
//!
//! # Naming, lifetime and cleanup
//!
//! The object is `/dev/shm/tmx-<jobid>-shmem` (POSIX name
//! `/tmx-<jobid>-shmem`), mode 0600. Local rank 0 creates it (`O_EXCL`, then
//! `fchmod` 0600 whatever the umask), sizes it and writes the header,
//! storing the magic word last (Release). With [`Segment::reserve`] (what
//! `adi` does, publishing the name through PMI) a name that is taken
//! already, by a stale job or by another user who guessed it, is not an
//! error: rank 0 retries under `/tmx-<jobid>-shmem-<16 random hex digits>`.
//! Every other local rank opens the name it is given ([`Place::Open`]) with
//! `O_NOFOLLOW`, and before it maps anything checks that the object is a
//! regular file owned by its own effective uid with mode 0600
//! ([`Error::SegmentNotOurs`] otherwise: an object planted by someone else is
//! never mapped). It then waits for the magic word, checks that its
//! parameters match the creator's, registers its pid and increments the
//! attach counter. The rank whose increment completes the count **unlinks the
//! name** at once and raises the `unlinked` flag; init returns on every rank
//! only after that flag is seen. From then on the memory lives only as long
//! as some process maps it, so a crash leaves nothing in `/dev/shm`. If init
//! fails or times out, the failing rank unlinks the name (best effort); the
//! launcher (`tmrun`) also removes any `/dev/shm/tmx-<jobid>-*` after a job.
//!
//! # Layout (all addresses are offsets from the segment start)
//!
//! ```text
//! 0          header page(s): magic, version, parameters, CMA calibration
//!            outcome, attach counter, unlinked flag, then one 128-byte
//!            RankInfo per local rank {pid, state, cma probe address, cma
//!            probe value, eager pressure, calibration sequence and address}
//! R(r)       region of local rank r (R(r) = header + r * stride), 4 KiB aligned:
//!   +0         inbound header rings, one per source s = 0..size:
//!              [RingCtl: consumed index | s's count of engine-unexpected messages, 2 x 64 B]
//!              [ring_slots x 64 B slots]
//!   +P         prepost rings, one per receiver d = 0..size (d posts, r claims):
//!              [prepost_slots x 64 B slots]
//!   +H         symmetric heap (heap_bytes): shmem_malloc-like, same offsets on every PE
//!   +E         eager area (eager_bytes): r's send buffers, read by receivers
//! ```

use crate::config::Config;
use crate::error::{Error, Result};
use crate::prepost::{Phase, PrepostRef, PrepostSlot};
use crate::ring::{RingCtl, RingRef, Slot, RING_CTL_BYTES, SLOT_BYTES};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use memmap2::{MmapOptions, MmapRaw};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAGIC: u64 = 0x746d_785f_7368_6d31; // "tmx_shm1"
const VERSION: u64 = 4;
const PAGE: u64 = 4096;
const RANK_INFO_BYTES: u64 = 128;
const RANK_INFO_START: u64 = 512;

/// Rank states recorded in the header.
pub(crate) const STATE_ATTACHED: u32 = 1;
pub(crate) const STATE_FINALIZED: u32 = 2;

#[repr(C)]
struct SegHeader {
    magic: AtomicU64,
    version: AtomicU64,
    local_size: AtomicU64,
    ring_slots: AtomicU64,
    prepost_slots: AtomicU64,
    heap_bytes: AtomicU64,
    eager_bytes: AtomicU64,
    total: AtomicU64,
    /// The CMA calibration's outcome, written once by local rank 0
    /// ([`crate::node`]): 0 while pending, then the encoded result.
    calib_result: AtomicU64,
    _pad0: [u64; 7],
    attached: AtomicU32,
    _pad1: [u32; 31],
    unlinked: AtomicU32,
}

/// Per-rank record in the header page.
#[repr(C, align(128))]
pub(crate) struct RankInfo {
    pub(crate) pid: AtomicU32,
    pub(crate) state: AtomicU32,
    pub(crate) probe_addr: AtomicU64,
    pub(crate) probe_value: AtomicU64,
    /// Raised by the rank while its eager area is full and sends wait for
    /// space: receivers then copy its unexpected eager messages out.
    pub(crate) eager_pressure: AtomicU32,
    /// The CMA calibration's ping-pong: the number of the last message
    /// this rank made ready (local ranks 0 and 1 only, at init).
    pub(crate) calib_seq: AtomicU32,
    /// The address, in this rank's process, of its calibration source
    /// buffer (read by the other rank with `process_vm_readv`).
    pub(crate) calib_addr: AtomicU64,
    _pad: [u32; 6],
    /// The rank's phase counter `s` as a receiver of preposted sends (own
    /// 64-byte line; the senders' counts are in the rings' control blocks).
    pub(crate) phase: Phase,
}

const _: () = assert!(core::mem::size_of::<SegHeader>() <= RANK_INFO_START as usize);
const _: () = assert!(core::mem::size_of::<RankInfo>() == RANK_INFO_BYTES as usize);
const _: () = assert!(core::mem::offset_of!(RankInfo, phase) == 64);
const _: () = assert!(core::mem::offset_of!(RankInfo, calib_addr) == 32);

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// A handle that tells, without the consumer's state or any lock, whether
/// a header has been published in one ring at a given consumer index: the
/// slot's sequence word says so ([`crate::ring`] protocol). Only a hint for
/// a waiter that then takes its lock and polls for real: a header another
/// thread took out since is still reported (the slot keeps its sequence
/// word until the producer's next lap). Keeps the mapping alive.
#[derive(Debug, Clone)]
pub struct ArrivalWatch {
    map: Arc<MmapRaw>,
    /// Offset of the ring's first slot.
    slots: u64,
    mask: u64,
}

impl ArrivalWatch {
    /// Whether the slot of consumer index `next` holds a header published
    /// for that index (a Relaxed load: a hint, not a synchronisation).
    #[inline]
    pub fn published(&self, next: u64) -> bool {
        let off = self.slots + (next & self.mask) * SLOT_BYTES as u64;
        // SAFETY: `off` is a slot of this ring inside the mapping (Layout:
        // `slots` and the mask come from the segment's own geometry), 64-byte
        // aligned; a slot starts with its `seq` word, an `AtomicU32` that
        // every process only ever accesses atomically; the Arc keeps the
        // mapping alive.
        let seq = unsafe { &*self.map.as_ptr().add(off as usize).cast::<AtomicU32>() };
        seq.load(Ordering::Relaxed) == (next as u32).wrapping_add(1)
    }
}

/// Byte offsets of everything in the segment, computed from the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Local ranks.
    pub local_size: u32,
    /// Header ring slots per pair.
    pub ring_slots: u32,
    /// Prepost ring slots per pair.
    pub prepost_slots: u32,
    /// Symmetric heap bytes per rank.
    pub heap_bytes: u64,
    /// Eager area bytes per rank.
    pub eager_bytes: u64,
    /// Bytes of the header pages.
    pub header_bytes: u64,
    /// Bytes of one inbound ring (control block + slots, 128-aligned).
    pub ring_bytes: u64,
    /// Offset of the prepost rings within a region.
    pub prepost_off: u64,
    /// Offset of the symmetric heap within a region.
    pub heap_off: u64,
    /// Offset of the eager area within a region.
    pub eager_off: u64,
    /// Distance between two ranks' regions.
    pub stride: u64,
    /// Total segment size.
    pub total: u64,
}

impl Layout {
    /// The layout for `local_size` ranks with `cfg`'s sizes.
    pub fn new(local_size: u32, cfg: &Config) -> Result<Self> {
        let cfg = &cfg.resolved(local_size);
        // A `Config` built in code skips `Config::from_env`'s checks; the
        // rings index their slots with a mask.
        let pow2 = |v: u32| v.is_power_of_two() && v <= 65536;
        if !pow2(cfg.ring_slots) || !pow2(cfg.prepost_slots) {
            return Err(Error::InvalidArgument(
                "ring and prepost slots must be powers of two from 1 to 65536",
            ));
        }
        let n = u64::from(local_size);
        let ring_bytes = round_up(
            RING_CTL_BYTES as u64 + u64::from(cfg.ring_slots) * SLOT_BYTES as u64,
            128,
        );
        let header_bytes = round_up(RANK_INFO_START + n * RANK_INFO_BYTES, PAGE);
        let prepost_off = n * ring_bytes;
        let heap_off = round_up(prepost_off + n * u64::from(cfg.prepost_slots) * 64, PAGE);
        let eager_off = heap_off + round_up(cfg.heap_bytes, PAGE);
        let stride = eager_off + round_up(cfg.eager_bytes, PAGE);
        let total = stride
            .checked_mul(n)
            .and_then(|t| t.checked_add(header_bytes))
            .filter(|t| *t <= isize::MAX as u64)
            .ok_or(Error::InvalidArgument("segment size overflows"))?;
        Ok(Layout {
            local_size,
            ring_slots: cfg.ring_slots,
            prepost_slots: cfg.prepost_slots,
            heap_bytes: cfg.heap_bytes,
            eager_bytes: cfg.eager_bytes,
            header_bytes,
            ring_bytes,
            prepost_off,
            heap_off,
            eager_off,
            stride,
            total,
        })
    }

    /// Offset of rank `r`'s region.
    #[inline]
    pub fn region(&self, r: u32) -> u64 {
        self.header_bytes + u64::from(r) * self.stride
    }
}

/// The object name for a job (`/tmx-<jobid>-shmem`), after validating the id.
pub fn segment_name(job_id: &str) -> Result<String> {
    let bad = |reason| Error::InvalidJobId {
        job_id: job_id.to_owned(),
        reason,
    };
    if job_id.is_empty() {
        return Err(bad("empty"));
    }
    if job_id.len() > 200 {
        return Err(bad("longer than 200 bytes"));
    }
    if !job_id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return Err(bad(
            "only ASCII letters, digits, '_', '.' and '-' are allowed",
        ));
    }
    Ok(format!("/tmx-{job_id}-shmem"))
}

/// How many fresh names [`Segment::reserve`] tries after the job's own.
const RESERVE_TRIES: usize = 8;

/// The node segment's object, created by local rank 0 before the other
/// local ranks know its name ([`Segment::reserve`]). Unlinked on drop
/// unless it was attached ([`Place::Create`]).
#[derive(Debug)]
pub struct Reservation {
    name: String,
    fd: Option<OwnedFd>,
}

impl Reservation {
    /// The `shm_open` name the other local ranks must open.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.fd.take().is_some() {
            unlink_quietly(&self.name);
        }
    }
}

/// Where a local rank finds the node segment.
#[derive(Debug)]
pub enum Place {
    /// Local rank 0: the object it reserved.
    Create(Reservation),
    /// Every other local rank: the name local rank 0 published.
    Open(String),
}

impl Place {
    /// The `shm_open` name.
    pub fn name(&self) -> &str {
        match self {
            Place::Create(r) => r.name(),
            Place::Open(n) => n,
        }
    }

    /// The job's own name for `local_rank`: rank 0 creates it (failing
    /// with [`Error::SegmentExists`] if it is taken), the others open it.
    pub fn of_job(job_id: &str, local_rank: u32) -> Result<Place> {
        let name = segment_name(job_id)?;
        if local_rank == 0 {
            create_exclusive(&name)?
                .map(|fd| {
                    Place::Create(Reservation {
                        name: name.clone(),
                        fd: Some(fd),
                    })
                })
                .ok_or(Error::SegmentExists { name })
        } else {
            Ok(Place::Open(name))
        }
    }
}

/// `shm_open(O_CREAT | O_EXCL)` with mode 0600 (set again with `fchmod`,
/// whatever the umask); `None` if the name is taken.
fn create_exclusive(name: &str) -> Result<Option<OwnedFd>> {
    let fd = match shm_open(
        name,
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR,
        Mode::S_IRUSR | Mode::S_IWUSR,
    ) {
        Ok(fd) => fd,
        Err(Errno::EEXIST) => return Ok(None),
        Err(e) => return Err(Error::os("shm_open(O_CREAT|O_EXCL)", e)),
    };
    if let Err(e) = nix::sys::stat::fchmod(&fd, Mode::S_IRUSR | Mode::S_IWUSR) {
        unlink_quietly(name);
        return Err(Error::os("fchmod(0600)", e));
    }
    Ok(Some(fd))
}

/// 16 random hex digits from the kernel (`getrandom`).
fn random_suffix() -> Result<String> {
    let mut b = [0u8; 8];
    let mut done = 0;
    while done < b.len() {
        let rest = &mut b[done..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`,
        // a live, exclusively borrowed buffer.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            done += n as usize;
        } else if Errno::last() != Errno::EINTR {
            return Err(Error::os("getrandom", Errno::last()));
        }
    }
    Ok(format!("{:016x}", u64::from_ne_bytes(b)))
}

/// Checks, before anything is mapped, that `file` (opened by name) is the
/// segment a local rank 0 of this user made: a regular file owned by our
/// effective uid, mode 0600.
fn check_ours(name: &str, file: &File) -> Result<()> {
    let meta = file
        .metadata()
        .map_err(|e| Error::os("fstat", Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
    let me = nix::unistd::geteuid().as_raw();
    let mode = meta.mode() & 0o7777;
    if meta.file_type().is_file() && meta.uid() == me && mode == 0o600 {
        return Ok(());
    }
    Err(Error::SegmentNotOurs {
        name: name.to_owned(),
        uid: meta.uid(),
        mode,
        expected_uid: me,
    })
}

/// An attached node segment.
#[derive(Debug)]
pub struct Segment {
    /// Shared with every [`crate::NodeView`], so the mapping outlives the
    /// last handle that can reach it.
    map: Arc<MmapRaw>,
    layout: Layout,
    name: String,
    rank: u32,
}

fn unlink_quietly(name: &str) {
    match shm_unlink(name) {
        Ok(()) => tracing::info!(name, "shmem segment unlinked"),
        Err(Errno::ENOENT) => {}
        Err(e) => tracing::warn!(name, error = %e, "shm_unlink failed"),
    }
}

impl Segment {
    /// Local rank 0's first step: creates the job's node-segment object
    /// (`O_EXCL`, mode 0600) under `/tmx-<jobid>-shmem`, or, if that name is
    /// taken, under `/tmx-<jobid>-shmem-<16 random hex digits>` (up to
    /// 8 tries). The caller publishes [`Reservation::name`] to the other
    /// local ranks (`adi` does it through PMI), which attach with
    /// [`Place::Open`]; rank 0 attaches with [`Place::Create`].
    pub fn reserve(job_id: &str) -> Result<Reservation> {
        let base = segment_name(job_id)?;
        let mut name = base.clone();
        for _ in 0..=RESERVE_TRIES {
            if let Some(fd) = create_exclusive(&name)? {
                if name != base {
                    tracing::warn!(taken = %base, name = %name, "shmem segment name taken; created a fresh one");
                }
                return Ok(Reservation { name, fd: Some(fd) });
            }
            name = format!("{base}-{}", random_suffix()?);
        }
        Err(Error::SegmentExists { name })
    }

    /// Creates (local rank 0) or attaches (others) the job's node segment and
    /// waits until every local rank attached and the name is unlinked.
    pub fn attach(job_id: &str, local_rank: u32, local_size: u32, cfg: &Config) -> Result<Self> {
        Self::attach_at(
            Place::of_job(job_id, local_rank)?,
            local_rank,
            local_size,
            cfg,
        )
    }

    /// [`Segment::attach`] at an explicit [`Place`] (from
    /// [`Segment::reserve`] on local rank 0, the published name elsewhere).
    pub fn attach_at(place: Place, local_rank: u32, local_size: u32, cfg: &Config) -> Result<Self> {
        Self::attach_with_probe(place, local_rank, local_size, cfg, 0, 0)
    }

    /// [`Segment::attach_at`], publishing a CMA probe word (its address in
    /// this process and its value) before the attach barrier.
    pub(crate) fn attach_with_probe(
        place: Place,
        local_rank: u32,
        local_size: u32,
        cfg: &Config,
        probe_addr: u64,
        probe_value: u64,
    ) -> Result<Self> {
        if local_size == 0 || local_rank >= local_size {
            return Err(Error::InvalidArgument("need local_rank < local_size"));
        }
        if matches!(place, Place::Create(_)) != (local_rank == 0) {
            return Err(Error::InvalidArgument(
                "local rank 0 creates the segment, every other local rank opens it",
            ));
        }
        let name = place.name().to_owned();
        let layout = Layout::new(local_size, cfg)?;
        let deadline = Instant::now() + cfg.attach_timeout;
        let res = Self::attach_inner(
            place,
            local_rank,
            layout,
            cfg,
            deadline,
            (probe_addr, probe_value),
        );
        match &res {
            // Not ours: another job (or a stale one, or another user) owns
            // that name.
            Ok(_) | Err(Error::SegmentExists { .. }) | Err(Error::SegmentNotOurs { .. }) => {}
            // Nothing must stay behind in /dev/shm when init fails.
            Err(_) => unlink_quietly(&name),
        }
        res
    }

    fn attach_inner(
        place: Place,
        rank: u32,
        layout: Layout,
        cfg: &Config,
        deadline: Instant,
        probe: (u64, u64),
    ) -> Result<Self> {
        let name = place.name().to_owned();
        let name = name.as_str();
        let file = if let Place::Create(mut res) = place {
            let fd = res.fd.take().ok_or(Error::InvalidArgument(
                "a segment reservation can be attached once",
            ))?;
            // total <= isize::MAX, checked by Layout::new.
            nix::unistd::ftruncate(&fd, layout.total as libc::off_t)
                .map_err(|e| Error::os("ftruncate", e))?;
            File::from(fd)
        } else {
            loop {
                match shm_open(name, OFlag::O_RDWR | OFlag::O_NOFOLLOW, Mode::empty()) {
                    Ok(fd) => {
                        let f = File::from(fd);
                        // Before anything is mapped: an object someone
                        // else planted under this name is never used.
                        check_ours(name, &f)?;
                        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                        if len >= PAGE {
                            break f;
                        }
                    }
                    Err(Errno::ENOENT) => {}
                    Err(e) => return Err(Error::os("shm_open", e)),
                }
                if Instant::now() >= deadline {
                    return Err(Error::AttachTimeout {
                        name: name.to_owned(),
                        attached: 0,
                        expected: layout.local_size,
                        waited_ms: cfg.attach_timeout.as_millis() as u64,
                    });
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        let len = file
            .metadata()
            .map_err(|e| Error::os("fstat", Errno::from_raw(e.raw_os_error().unwrap_or(0))))?
            .len();
        let map = MmapOptions::new()
            .len(len as usize)
            .map_raw(&file)
            .map_err(|e| Error::os("mmap", Errno::from_raw(e.raw_os_error().unwrap_or(0))))?;
        drop(file);
        let seg = Segment {
            map: Arc::new(map),
            layout,
            name: name.to_owned(),
            rank,
        };
        let h = seg.header();
        if rank == 0 {
            h.version.store(VERSION, Ordering::Relaxed);
            h.local_size
                .store(u64::from(layout.local_size), Ordering::Relaxed);
            h.ring_slots
                .store(u64::from(layout.ring_slots), Ordering::Relaxed);
            h.prepost_slots
                .store(u64::from(layout.prepost_slots), Ordering::Relaxed);
            h.heap_bytes.store(layout.heap_bytes, Ordering::Relaxed);
            h.eager_bytes.store(layout.eager_bytes, Ordering::Relaxed);
            h.total.store(layout.total, Ordering::Relaxed);
            h.magic.store(MAGIC, Ordering::Release);
        } else {
            while h.magic.load(Ordering::Acquire) != MAGIC {
                if Instant::now() >= deadline {
                    return Err(seg.timeout(cfg));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            for (field, ours, theirs) in [
                ("version", VERSION, h.version.load(Ordering::Relaxed)),
                (
                    "local_size",
                    u64::from(layout.local_size),
                    h.local_size.load(Ordering::Relaxed),
                ),
                (
                    "ring_slots",
                    u64::from(layout.ring_slots),
                    h.ring_slots.load(Ordering::Relaxed),
                ),
                (
                    "prepost_slots",
                    u64::from(layout.prepost_slots),
                    h.prepost_slots.load(Ordering::Relaxed),
                ),
                (
                    "heap_bytes",
                    layout.heap_bytes,
                    h.heap_bytes.load(Ordering::Relaxed),
                ),
                (
                    "eager_bytes",
                    layout.eager_bytes,
                    h.eager_bytes.load(Ordering::Relaxed),
                ),
                ("total", layout.total, len),
            ] {
                if ours != theirs {
                    return Err(Error::LayoutMismatch {
                        field,
                        ours,
                        theirs,
                    });
                }
            }
        }
        seg.prefault_own();
        let me = seg.rank_info(rank);
        let pid = std::process::id();
        if let Err(other) = me
            .pid
            .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Acquire)
        {
            return Err(Error::RankTaken { rank, pid: other });
        }
        me.probe_addr.store(probe.0, Ordering::Relaxed);
        me.probe_value.store(probe.1, Ordering::Relaxed);
        me.state.store(STATE_ATTACHED, Ordering::Release);
        let n = h.attached.fetch_add(1, Ordering::AcqRel) + 1;
        tracing::debug!(
            rank,
            attached = n,
            of = layout.local_size,
            "attached shmem segment"
        );
        if n == layout.local_size {
            unlink_quietly(name);
            h.unlinked.store(1, Ordering::Release);
        }
        let mut spins = 0u32;
        while h.unlinked.load(Ordering::Acquire) == 0 {
            if Instant::now() >= deadline {
                return Err(seg.timeout(cfg));
            }
            spins += 1;
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        tracing::info!(
            rank,
            size = layout.local_size,
            bytes = layout.total,
            name,
            "shmem node segment ready"
        );
        Ok(seg)
    }

    fn timeout(&self, cfg: &Config) -> Error {
        Error::AttachTimeout {
            name: self.name.clone(),
            attached: self.header().attached.load(Ordering::Acquire),
            expected: self.layout.local_size,
            waited_ms: cfg.attach_timeout.as_millis() as u64,
        }
    }

    /// Faults in this rank's rings and eager area (best effort), so that the
    /// first messages do not pay page faults (2-4 µs per 4 KiB here). The
    /// symmetric heap faults in lazily.
    fn prefault_own(&self) {
        let region = self.layout.region(self.rank);
        for (off, len) in [
            (0, self.layout.heap_off),
            (
                self.layout.eager_off,
                round_up(self.layout.eager_bytes, PAGE),
            ),
        ] {
            // SAFETY: [region + off, region + off + len) lies inside this
            // rank's region of the mapping (Layout: the rings end before
            // heap_off, the eager area is eager_bytes rounded up to a page
            // and ends at the region's end), page aligned;
            // MADV_POPULATE_WRITE only faults pages in and does not change
            // their contents.
            let rc = unsafe {
                libc::madvise(
                    self.map.as_mut_ptr().add((region + off) as usize).cast(),
                    len as usize,
                    23, // MADV_POPULATE_WRITE (Linux 5.14)
                )
            };
            if rc != 0 {
                tracing::debug!("MADV_POPULATE_WRITE unavailable; pages fault in lazily");
                return;
            }
        }
    }

    #[inline]
    fn at<T>(&self, off: u64) -> &T {
        debug_assert!(off as usize + core::mem::size_of::<T>() <= self.map.len());
        debug_assert!(off as usize % core::mem::align_of::<T>() == 0);
        // SAFETY: callers pass offsets computed by `Layout` from parameters
        // that were checked against the mapping's length at attach, suitably
        // aligned (the mapping is page aligned, every structure offset is a
        // multiple of its alignment). The memory starts zeroed (ftruncate)
        // and only ever holds atomics and plain bytes, for which every bit
        // pattern is valid; it stays mapped as long as `self`.
        unsafe { &*self.map.as_ptr().add(off as usize).cast::<T>() }
    }

    fn header(&self) -> &SegHeader {
        self.at(0)
    }

    /// The CMA calibration's outcome word (0: pending).
    pub(crate) fn calib_result(&self) -> &AtomicU64 {
        &self.header().calib_result
    }

    pub(crate) fn rank_info(&self, r: u32) -> &RankInfo {
        self.at(RANK_INFO_START + u64::from(r) * RANK_INFO_BYTES)
    }

    /// This process's local rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of local ranks.
    pub fn size(&self) -> u32 {
        self.layout.local_size
    }

    /// The layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The header ring from `src` to `dst` (in `dst`'s region).
    #[inline]
    pub fn ring(&self, src: u32, dst: u32) -> RingRef<'_> {
        let off = self.layout.region(dst) + u64::from(src) * self.layout.ring_bytes;
        let ctl: &RingCtl = self.at(off);
        let n = self.layout.ring_slots as usize;
        let first: &Slot = self.at(off + RING_CTL_BYTES as u64);
        // SAFETY: `n` slots follow the control block inside this ring's
        // `ring_bytes` (Layout), contiguous, aligned and zero-initialised.
        let slots = unsafe { core::slice::from_raw_parts(first as *const Slot, n) };
        RingRef::from_layout(ctl, slots)
    }

    /// The prepost ring on which `receiver` advertises receives to `sender`
    /// (in `sender`'s region).
    pub fn prepost(&self, receiver: u32, sender: u32) -> PrepostRef<'_> {
        let n = self.layout.prepost_slots as usize;
        let off = self.layout.region(sender)
            + self.layout.prepost_off
            + u64::from(receiver) * n as u64 * 64;
        let first: &PrepostSlot = self.at(off);
        // SAFETY: `n` prepost slots of 64 bytes lie at `off` (Layout), inside
        // the mapping, aligned and zero-initialised.
        let slots = unsafe { core::slice::from_raw_parts(first as *const PrepostSlot, n) };
        PrepostRef::new(slots)
    }

    /// The mapping, for handles that must keep it alive.
    /// A lock-free look at the ring `src → dst` ([`ArrivalWatch`]).
    pub fn arrival_watch(&self, src: u32, dst: u32) -> ArrivalWatch {
        let off = self.layout.region(dst)
            + u64::from(src) * self.layout.ring_bytes
            + RING_CTL_BYTES as u64;
        ArrivalWatch {
            map: Arc::clone(&self.map),
            slots: off,
            mask: u64::from(self.layout.ring_slots) - 1,
        }
    }

    pub(crate) fn map_arc(&self) -> Arc<MmapRaw> {
        Arc::clone(&self.map)
    }

    /// Offset of `pe`'s symmetric heap in the mapping.
    pub(crate) fn heap_offset(&self, pe: u32) -> u64 {
        self.layout.region(pe) + self.layout.heap_off
    }

    /// Base pointer of `pe`'s eager area (`eager_bytes` long).
    pub(crate) fn eager_ptr(&self, pe: u32) -> *mut u8 {
        let off = self.layout.region(pe) + self.layout.eager_off;
        // SAFETY: the offset is inside the mapping (Layout, pe < size).
        unsafe { self.map.as_mut_ptr().add(off as usize) }
    }

    /// The pid registered by local rank `pe`.
    pub fn pid_of(&self, pe: u32) -> u32 {
        self.rank_info(pe).pid.load(Ordering::Acquire)
    }

    /// Checks that local rank `pe`'s process still exists (and is not a
    /// zombie). Returns [`Error::PeerDied`] otherwise.
    pub fn check_alive(&self, pe: u32) -> Result<()> {
        let pid = self.pid_of(pe);
        if pid == 0 || pe == self.rank || process_alive(pid) {
            return Ok(());
        }
        Err(Error::PeerDied { rank: pe, pid })
    }

    /// Raises or clears this rank's eager-pressure flag.
    pub(crate) fn set_eager_pressure(&self, on: bool) {
        self.rank_info(self.rank)
            .eager_pressure
            .store(u32::from(on), Ordering::Relaxed);
    }

    /// Local rank `pe`'s phase counter `s` (as a receiver of preposted
    /// sends).
    pub fn phase(&self, pe: u32) -> &Phase {
        &self.rank_info(pe).phase
    }

    /// The senders' side `h` of `dst`'s phase: the sum of the
    /// engine-unexpected counts of every ring into `dst` (each read with
    /// Acquire; see [`Phase::synced`]).
    pub fn counted_to(&self, dst: u32) -> u64 {
        (0..self.size()).fold(0u64, |h, src| h.wrapping_add(self.ring(src, dst).counted()))
    }

    /// Whether `pe` is waiting for eager-area space.
    pub(crate) fn eager_pressure(&self, pe: u32) -> bool {
        self.rank_info(pe).eager_pressure.load(Ordering::Relaxed) != 0
    }

    /// Records that this rank finalized.
    pub(crate) fn mark_finalized(&self) {
        self.rank_info(self.rank)
            .state
            .store(STATE_FINALIZED, Ordering::Release);
    }

    /// Whether local rank `pe` finalized (it may have exited since; the
    /// segment and the messages it sent stay readable).
    pub fn finalized(&self, pe: u32) -> bool {
        self.rank_info(pe).state.load(Ordering::Acquire) == STATE_FINALIZED
    }
}

/// Whether process `pid` exists and is not a zombie (a killed child that
/// was not reaped yet still answers `kill(pid, 0)`).
pub(crate) fn process_alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if let Err(Errno::ESRCH) = nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        return false;
    }
    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next());
        if matches!(state, Some('Z' | 'X')) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Config` built in code (not from the environment) with ring
    /// geometry the masks cannot serve is refused with a typed error.
    #[test]
    fn layout_refuses_rings_that_are_not_powers_of_two() {
        let ok = Config::default();
        // `AUTO` ring slots (the default) are chosen by the node's size.
        assert_eq!(ok.ring_slots, crate::config::AUTO);
        assert_eq!(
            Layout::new(2, &ok).map(|l| l.ring_slots).ok(),
            Some(crate::config::RING_SLOTS_SMALL_NODE)
        );
        assert_eq!(
            Layout::new(65, &ok).map(|l| l.ring_slots).ok(),
            Some(crate::config::RING_SLOTS_LARGE_NODE)
        );
        for (ring_slots, prepost_slots) in [(3, 16), (64, 0), (64, 12), (1 << 17, 16)] {
            let c = Config {
                ring_slots,
                prepost_slots,
                ..Config::default()
            };
            assert!(
                matches!(Layout::new(2, &c), Err(Error::InvalidArgument(_))),
                "{ring_slots}/{prepost_slots}"
            );
        }
    }
}
