//! The device's pools: the attached buffer of buffered sends, staging
//! buffers, and context ids.

use super::{lock, Device};
use crate::request::Request;
use crate::Error;
use std::collections::BTreeMap;

/// Staging buffers kept for reuse (two windows of 64 datatype operations
/// in flight: a window's receives and its sends), and the bytes of
/// capacity they may hold in all (so also the largest one kept). With 8
/// kept, a 64-message window of `irecv_typed` allocated 56 buffers per
/// window and freed them.
const STAGING_KEEP: usize = 128;
const STAGING_BYTES: usize = 64 << 20;

/// The staging pool: buffers and the sum of their capacities.
#[derive(Debug, Default)]
pub(super) struct StagingPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

/// The attached buffer of buffered sends: first-fit regions of one `Vec`.
#[derive(Debug, Default)]
pub(super) struct BsendPool {
    pub(super) buf: Option<Vec<u8>>,
    /// start → length of every region in use.
    pub(super) used: BTreeMap<usize, usize>,
}

impl BsendPool {
    pub(super) fn reserve(&mut self, need: usize) -> Result<usize, Error> {
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
pub(super) fn context_pairs() -> usize {
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
    pub(super) fn new(pairs: usize) -> ContextPool {
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

impl Device {
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

    /// Releases the region of the attached buffer that a buffered send
    /// starting at `start` used.
    pub(super) fn release_bsend(&self, start: usize) {
        lock(&self.bsend).used.remove(&start);
    }

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
