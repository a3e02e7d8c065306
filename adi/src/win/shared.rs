//! Shared-memory windows (`MPI_Win_allocate_shared`,
//! `MPI_Win_shared_query`): every rank's segment in the node segment,
//! accessed by load/store through the transport's safe copy and atomic API,
//! and a full RMA window on the direct backend.

use super::create::Memory;
use super::direct::Mem;
use super::Win;
use crate::comm::Comm;
use crate::Error;
use std::sync::atomic::Ordering;

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
}

impl Win {
    /// `MPI_Win_allocate_shared`: see [`SharedWin`]. Collective over
    /// `comm`, whose ranks must all be on this node (on a communicator
    /// that spans nodes it fails with [`Error::SpansNodes`]).
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
            .filter_map(|(r, t)| t.as_ref().map(|t| (r, t)))
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
        Ok(SharedWin { win, regions })
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

    /// The address of `rank`'s segment in this process's mapping of the
    /// node segment (what `MPI_Win_shared_query` gives a C program), valid
    /// until [`SharedWin::free`]. Loads and stores through it are the
    /// caller's `unsafe`, ordered by [`SharedWin::sync`] and the window's
    /// synchronizations.
    pub fn base_ptr(&self, rank: i32) -> Result<*mut u8, Error> {
        let r = self.shared_query(rank)?;
        let d = self.win.direct.as_ref().ok_or(Error::InvalidRank {
            rank,
            size: self.size(),
        })?;
        Ok(d.view
            .heap_ptr(r.pe, shmem_onesided::SymAddr(r.offset), r.size as usize)?)
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
    /// this rank's segment goes back to its heap. Dropped without it, the
    /// window does what a dropped [`Win`] does (a warning on stderr, the
    /// segment leaked, the other ranks' `free` fails).
    pub fn free(mut self) -> Result<(), Error> {
        let comm = self.win.comm.clone();
        let win = std::mem::replace(&mut self.win, Win::null(comm));
        win.free().map(|_| ())
    }
}
