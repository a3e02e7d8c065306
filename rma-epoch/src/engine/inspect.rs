//! Read-only views of the engine's state: what tests, counters and drivers
//! look at.

use super::*;

impl Engine {
    /// The call in progress on `win`, if any.
    pub fn blocked(&self, win: WinId) -> Option<Call> {
        self.core(win).ok()?.blocked.as_ref().map(Blocked::call)
    }

    /// The access state of `win`.
    pub fn access_state(&self, win: WinId) -> Result<AccessState, Error> {
        Ok(self.core(win)?.access)
    }

    /// The exposure state of `win`.
    pub fn exposure_state(&self, win: WinId) -> Result<ExposureState, Error> {
        Ok(self.core(win)?.exposure)
    }

    /// The per-target state of `rank` in `win`, if it has a target element.
    pub fn target_state(&self, win: WinId, rank: Rank) -> Result<Option<TargetState>, Error> {
        let w = self
            .windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::NoSuchWindow(win))?;
        let slot = (rank as usize) % w.core.slots.len().max(1);
        let found = w.core.slots.get(slot).and_then(|s| {
            s.iter().find_map(|r| {
                let t = match r.pool {
                    crate::pool::PoolKind::Window => w.targets.get(r.idx),
                    crate::pool::PoolKind::Global => self.global_targets.get(r.idx),
                }?;
                (t.rank == rank).then_some(t.state)
            })
        });
        Ok(found)
    }

    /// Protocol counters of `win`.
    pub fn counters(&self, win: WinId) -> Result<&Counters, Error> {
        Ok(&self.core(win)?.counters)
    }

    /// Who holds `win`'s lock on this process (target side).
    pub fn lock_holder(&self, win: WinId) -> Result<&LockHolder, Error> {
        Ok(&self.core(win)?.side.lock)
    }

    /// Target-side lock-queue length and buffered bytes of `win`.
    pub fn lock_queue(&self, win: WinId) -> Result<(usize, usize), Error> {
        let s = &self.core(win)?.side;
        Ok((s.queued(), s.queued_data_bytes()))
    }

    /// Occupancy of `win`'s op and target pools.
    pub fn window_pools(&self, win: WinId) -> Result<(PoolStats, PoolStats), Error> {
        let w = self
            .windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::NoSuchWindow(win))?;
        Ok((w.ops.stats(), w.targets.stats()))
    }

    /// Occupancy of the global op and target pools.
    pub fn global_pools(&self) -> (PoolStats, PoolStats) {
        (self.global_ops.stats(), self.global_targets.stats())
    }

    /// Heap bytes `win` holds now (slot array, target list, element slabs
    /// and what their elements own, lock queue, PSCW group), not counting the
    /// global pools. It depends on the slot count, the pool high-water marks
    /// and the traffic, never on the communicator size beyond
    /// `min(slots, comm_size)`.
    pub fn footprint(&self, win: WinId) -> Result<usize, Error> {
        let w = self
            .windows
            .get(win as usize)
            .and_then(Option::as_ref)
            .ok_or(Error::NoSuchWindow(win))?;
        let c = &w.core;
        let refs = core::mem::size_of::<ElemRef>();
        let slots = c.slots.capacity() * core::mem::size_of::<Vec<ElemRef>>()
            + c.slots.iter().map(|s| s.capacity() * refs).sum::<usize>();
        let lists = c.active.capacity() * refs
            + (c.group.capacity() + c.early_posts.capacity()) * 4
            + c.posted.capacity();
        let ops = w.ops.heap_bytes(|o| o.data.capacity());
        let targets = w
            .targets
            .heap_bytes(|t| (t.pending.capacity() + t.issued.capacity()) * refs);
        Ok(slots + lists + ops + targets + c.side.heap_bytes() + c.direct.heap_bytes())
    }

    /// Entries of `win`'s slot array (fixed at creation: `min(slots,
    /// comm_size)`), and the number of target elements alive.
    pub fn table_size(&self, win: WinId) -> Result<(usize, usize), Error> {
        let c = self.core(win)?;
        Ok((c.slots.len(), c.active.len()))
    }

    /// True if `win` exists.
    pub fn has_window(&self, win: WinId) -> bool {
        self.core(win).is_ok()
    }

    /// True if nothing is in flight on `win` from this side: no call pending,
    /// no target element, no lock held or queued here, no expected ack.
    pub fn is_quiescent(&self, win: WinId) -> bool {
        match self.core(win) {
            Err(_) => true,
            Ok(c) => {
                c.blocked.is_none()
                    && c.active.is_empty()
                    && c.side.lock == LockHolder::Free
                    && c.side.queued() == 0
                    && c.outstanding_acks == 0
                    && c.outstanding_locks == 0
                    && c.cursor.is_none()
                    && c.side.target_lock_idle()
                    && c.direct.locks.is_empty()
                    && c.direct.out.is_empty()
            }
        }
    }
}
