//! Target side of a window: applies operations, grants locks, queues the
//! requests it cannot grant yet, and answers with acknowledgements.
//!
//! Grant rule (MPICH `Try_acquire_win_lock`): a shared request is granted when
//! the lock is free or shared; an exclusive one only when it is free. Anything
//! else waits in a FIFO lock queue of bounded size; an op that arrives with a
//! piggybacked LOCK keeps its data in a bounded buffer
//! (`LOCK_QUEUED_DATA_QUEUED`) or drops it (`LOCK_QUEUED_DATA_DISCARDED`, the
//! origin re-sends the op after the grant). With no free entry the request is
//! refused with `LOCK_DISCARDED` and the origin retries.
//!
//! When the window has direct origins (see [`crate::backend`]), they take this
//! process's lock in shared memory themselves. The target side then holds the
//! same lock on behalf of its active-message holders: before it grants any, it
//! asks the driver for the lock in their mode ([`Action::TargetLock`]) and
//! waits for [`crate::Engine::handle_target_lock_granted`]; when the last of
//! them releases, it gives it back ([`Action::TargetUnlock`]). The grant rule
//! stays MPICH's: readers first. The shared-memory lock admits a writer only
//! when it is idle, so no direct reader waits behind a waiting writer; here a
//! shared request joins any shared hold, a waiting exclusive request for the
//! shared-memory lock is replaced by a shared one as soon as a shared request
//! queues, and queued shared requests are granted before queued exclusive
//! ones (each mode has its own bound of queue entries, so shared requests
//! are never refused for want of room taken by exclusive ones). A waiting
//! exclusive request is overtaken, as in MPICH, and a lock_all epoch or
//! nested shared locks never wait behind one, whatever order they take
//! their targets in.

use std::collections::VecDeque;

use tm_proto::rma::{RmaFlags, RmaHeader, RmaKind};
use tracing::debug;

use crate::engine::MemView;
use crate::engine::WindowMemory;
use crate::{acc, emit, Access, Action, Counters, Rank, WinId, NO_OP_ID};

/// Who holds this window's lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum LockHolder {
    /// Nobody.
    #[default]
    Free,
    /// These origins hold it shared (one entry per grant).
    Shared(Vec<Rank>),
    /// This origin holds it exclusively.
    Exclusive(Rank),
}

/// This process's lock in shared memory, held for the active-message holders
/// of a window with direct origins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TargetLock {
    /// Not held (or the window has no direct origin).
    #[default]
    Free,
    /// Asked for ([`Action::TargetLock`]), not granted yet.
    Requested {
        /// The mode asked for.
        exclusive: bool,
    },
    /// Held.
    Held {
        /// The mode it is held in.
        exclusive: bool,
    },
}

#[derive(Debug)]
struct LockEntry {
    from: Rank,
    header: RmaHeader,
    data: Vec<u8>,
}

#[derive(Debug)]
pub(crate) struct TargetSide {
    win: WinId,
    pub(crate) lock: LockHolder,
    queue: VecDeque<LockEntry>,
    queue_cap: usize,
    data_bytes: usize,
    data_cap: usize,
    /// PSCW access-completion counter (incremented by `post`, decremented by
    /// DECR_AT_COUNTER).
    pub(crate) at_completion_counter: i64,
    /// Direct origins share this process's lock (see the module docs).
    shared_lock: bool,
    pub(crate) target_lock: TargetLock,
}

impl TargetSide {
    pub(crate) fn new(win: WinId, queue_cap: usize, data_cap: usize) -> Self {
        TargetSide {
            win,
            lock: LockHolder::Free,
            queue: VecDeque::new(),
            queue_cap,
            data_bytes: 0,
            data_cap,
            at_completion_counter: 0,
            shared_lock: false,
            target_lock: TargetLock::Free,
        }
    }

    /// Direct origins take this process's lock too.
    pub(crate) fn set_shared_lock(&mut self, on: bool) {
        self.shared_lock = on;
    }

    pub(crate) fn target_lock_idle(&self) -> bool {
        self.target_lock == TargetLock::Free
    }

    /// The driver holds the lock in mode `exclusive`: grant what waits for
    /// it. (An exclusive request replaced by a shared one may be granted
    /// before the driver saw the replacement: it is taken as granted; the
    /// driver ignores the replacing request.)
    pub(crate) fn target_lock_granted<M: WindowMemory + ?Sized>(
        &mut self,
        exclusive: bool,
        mem: &mut MemView<'_, M>,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        match self.target_lock {
            TargetLock::Requested { exclusive: asked } => {
                if asked != exclusive {
                    debug!(
                        win = self.win,
                        exclusive, "own lock granted in the mode it was first asked for"
                    );
                }
                self.target_lock = TargetLock::Held { exclusive };
                // Grants what the mode admits; gives it back if nothing
                // could use it.
                self.drain(mem, c, out);
            }
            _ => c.stray_packets += 1,
        }
    }

    /// Asks for the shared-memory lock if requests wait and no
    /// active-message origin holds it: shared if any queued request is
    /// shared (readers first), else exclusive. A waiting exclusive request
    /// is replaced by a shared one once a shared request queues (the driver
    /// holds no place in the lock's queue for it).
    fn want_target_lock(&mut self, out: &mut VecDeque<Action>) {
        if !self.shared_lock || self.lock != LockHolder::Free || self.queue.is_empty() {
            return;
        }
        let any_shared = self.queued_shared() > 0;
        match self.target_lock {
            TargetLock::Free => {}
            TargetLock::Requested { exclusive: true } if any_shared => {
                debug!(
                    win = self.win,
                    "own lock: a shared request overtakes the waiting exclusive one"
                );
            }
            _ => return,
        }
        let exclusive = !any_shared;
        self.target_lock = TargetLock::Requested { exclusive };
        out.push_back(Action::TargetLock {
            win: self.win,
            exclusive,
        });
    }

    fn queued_shared(&self) -> usize {
        self.queue
            .iter()
            .filter(|e| !e.header.flags.contains(RmaFlags::LOCK_EXCLUSIVE))
            .count()
    }

    /// Gives the shared-memory lock back once no active-message origin holds
    /// it, then asks again if requests wait.
    fn give_back(&mut self, out: &mut VecDeque<Action>) {
        if self.lock != LockHolder::Free {
            return;
        }
        if let TargetLock::Held { exclusive } = self.target_lock {
            self.target_lock = TargetLock::Free;
            out.push_back(Action::TargetUnlock {
                win: self.win,
                exclusive,
            });
        }
        self.want_target_lock(out);
    }

    pub(crate) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        let holders = match &self.lock {
            LockHolder::Shared(v) => v.capacity() * 4,
            _ => 0,
        };
        holders
            + self.queue.capacity() * core::mem::size_of::<LockEntry>()
            + self.queue.iter().map(|e| e.data.capacity()).sum::<usize>()
    }

    pub(crate) fn queued_data_bytes(&self) -> usize {
        self.data_bytes
    }

    /// Handles a packet addressed to the target side.
    pub(crate) fn handle<M: WindowMemory + ?Sized>(
        &mut self,
        from: Rank,
        h: &RmaHeader,
        payload: &[u8],
        mem: &mut MemView<'_, M>,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        let lock_flags = h
            .flags
            .intersects(RmaFlags::LOCK_SHARED | RmaFlags::LOCK_EXCLUSIVE);
        match h.kind {
            RmaKind::Lock => {
                let excl = h.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
                if self.try_acquire(from, excl) {
                    c.locks_granted_at_once += 1;
                    self.reply(from, RmaKind::LockAck, h, RmaFlags::LOCK_GRANTED, c, out);
                } else {
                    self.enqueue(from, h, payload, c, out);
                    self.want_target_lock(out);
                }
            }
            RmaKind::Unlock => {
                self.release(from, c, out);
                if !h.flags.contains(RmaFlags::UNLOCK_NO_ACK) {
                    self.reply(from, RmaKind::Ack, h, RmaFlags::ACK, c, out);
                }
                self.drain(mem, c, out);
            }
            RmaKind::Flush => self.reply(from, RmaKind::Ack, h, RmaFlags::ACK, c, out),
            RmaKind::DecrAtCounter => {
                self.at_completion_counter -= 1;
                if h.flags.contains(RmaFlags::FLUSH) {
                    self.reply(from, RmaKind::Ack, h, RmaFlags::ACK, c, out);
                }
            }
            k if k.is_op() => {
                if lock_flags {
                    let excl = h.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
                    if self.try_acquire(from, excl) {
                        c.locks_granted_at_once += 1;
                        self.perform(from, h, payload, mem, true, false, c, out);
                    } else {
                        self.enqueue(from, h, payload, c, out);
                        self.want_target_lock(out);
                    }
                } else {
                    self.perform(from, h, payload, mem, false, false, c, out);
                }
                self.drain(mem, c, out);
            }
            _ => c.stray_packets += 1,
        }
    }

    /// MPICH's `Try_acquire_win_lock`: shared joins a free or shared lock,
    /// exclusive takes a free one; with direct origins, only inside the
    /// shared-memory lock held in that mode.
    fn try_acquire(&mut self, from: Rank, exclusive: bool) -> bool {
        if self.shared_lock {
            let held = match self.target_lock {
                TargetLock::Held { exclusive } => Some(exclusive),
                _ => None,
            };
            return match (&mut self.lock, held) {
                (LockHolder::Free, Some(mode)) if mode == exclusive => {
                    self.lock = if exclusive {
                        LockHolder::Exclusive(from)
                    } else {
                        LockHolder::Shared(vec![from])
                    };
                    true
                }
                (LockHolder::Shared(v), Some(false)) if !exclusive => {
                    v.push(from);
                    true
                }
                _ => false,
            };
        }
        match (&mut self.lock, exclusive) {
            (LockHolder::Free, true) => {
                self.lock = LockHolder::Exclusive(from);
                true
            }
            (LockHolder::Free, false) => {
                self.lock = LockHolder::Shared(vec![from]);
                true
            }
            (LockHolder::Shared(v), false) => {
                v.push(from);
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, from: Rank, c: &mut Counters, out: &mut VecDeque<Action>) {
        self.release_holder(from, c);
        if self.shared_lock {
            self.give_back(out);
        }
    }

    fn release_holder(&mut self, from: Rank, c: &mut Counters) {
        match &mut self.lock {
            LockHolder::Exclusive(r) if *r == from => self.lock = LockHolder::Free,
            LockHolder::Shared(v) => {
                if let Some(i) = v.iter().position(|r| *r == from) {
                    v.swap_remove(i);
                    if v.is_empty() {
                        self.lock = LockHolder::Free;
                    }
                } else {
                    c.spurious_unlocks += 1;
                }
            }
            _ => c.spurious_unlocks += 1,
        }
    }

    /// Grants queued requests: in FIFO order while they are compatible; with
    /// direct origins, every queued request the held mode admits (readers
    /// first, see the module docs), then gives the shared-memory lock back
    /// or asks for it as the queue needs.
    fn drain<M: WindowMemory + ?Sized>(
        &mut self,
        mem: &mut MemView<'_, M>,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        let mut i = 0;
        while let Some(e) = self.queue.get(i) {
            let excl = e.header.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
            let from = e.from;
            if !self.try_acquire(from, excl) {
                if !self.shared_lock {
                    break;
                }
                i += 1;
                continue;
            }
            let Some(e) = self.queue.remove(i) else {
                break;
            };
            self.data_bytes = self.data_bytes.saturating_sub(e.data.len());
            debug!(
                win = self.win,
                origin = from,
                exclusive = excl,
                "lock granted from queue"
            );
            if e.header.kind == RmaKind::Lock {
                self.reply(
                    from,
                    RmaKind::LockAck,
                    &e.header,
                    RmaFlags::LOCK_GRANTED,
                    c,
                    out,
                );
            } else {
                self.perform(from, &e.header, &e.data, mem, true, true, c, out);
            }
        }
        if self.shared_lock {
            if self.lock == LockHolder::Free && matches!(self.target_lock, TargetLock::Held { .. })
            {
                // Held, and nothing queued can use it: give it back (and ask
                // again in the mode the queue needs).
                self.give_back(out);
            } else {
                self.want_target_lock(out);
            }
        }
    }

    fn enqueue(
        &mut self,
        from: Rank,
        h: &RmaHeader,
        payload: &[u8],
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        // A window whose lock is shared with direct origins grants nothing
        // without queueing first: it keeps one entry per mode even when
        // configured with none, and bounds each mode on its own, so shared
        // requests always find room to overtake queued exclusive ones.
        let full = if self.shared_lock {
            let cap = self.queue_cap.max(1);
            let shared = self.queued_shared();
            if h.flags.contains(RmaFlags::LOCK_EXCLUSIVE) {
                self.queue.len() - shared >= cap
            } else {
                shared >= cap
            }
        } else {
            self.queue.len() >= self.queue_cap
        };
        if full {
            c.locks_discarded += 1;
            debug!(
                win = self.win,
                origin = from,
                "lock queue full: LOCK_DISCARDED"
            );
            self.reply(from, RmaKind::LockAck, h, RmaFlags::LOCK_DISCARDED, c, out);
            return;
        }
        c.locks_queued += 1;
        if payload.is_empty() {
            self.queue.push_back(LockEntry {
                from,
                header: *h,
                data: Vec::new(),
            });
            return;
        }
        let fits = self
            .data_bytes
            .checked_add(payload.len())
            .is_some_and(|n| n <= self.data_cap);
        if fits {
            c.lock_data_queued += 1;
            self.data_bytes += payload.len();
            self.queue.push_back(LockEntry {
                from,
                header: *h,
                data: payload.to_vec(),
            });
            self.reply(
                from,
                RmaKind::LockAck,
                h,
                RmaFlags::LOCK_QUEUED_DATA_QUEUED,
                c,
                out,
            );
        } else {
            c.lock_data_discarded += 1;
            // Keep only the lock request; the origin re-sends the op (and any
            // FLUSH/UNLOCK/DECR it carried) after the grant.
            let lock_only = RmaHeader::new(RmaKind::Lock, h.win)
                .with_flags(RmaFlags(
                    h.flags.0 & (RmaFlags::LOCK_SHARED.0 | RmaFlags::LOCK_EXCLUSIVE.0),
                ))
                .with_ids(NO_OP_ID, 0);
            self.queue.push_back(LockEntry {
                from,
                header: lock_only,
                data: Vec::new(),
            });
            self.reply(
                from,
                RmaKind::LockAck,
                h,
                RmaFlags::LOCK_QUEUED_DATA_DISCARDED,
                c,
                out,
            );
        }
    }

    /// Applies an op, answers it, then honours its DECR and UNLOCK flags.
    #[allow(clippy::too_many_arguments)]
    fn perform<M: WindowMemory + ?Sized>(
        &mut self,
        from: Rank,
        h: &RmaHeader,
        payload: &[u8],
        mem: &mut MemView<'_, M>,
        granted_now: bool,
        from_queue: bool,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        c.ops_applied += 1;
        let len = h.len as usize;
        let mut result = Vec::new();
        let origin = payload.get(..len).unwrap_or(&[]);
        let access = match h.kind {
            RmaKind::Get => Access::Read,
            RmaKind::Put if origin.len() == len => Access::Write,
            RmaKind::Put => Access::Read,
            _ => Access::ReadModifyWrite,
        };
        let applied = mem.with_range(h.disp, len, access, &mut |m| match h.kind {
            RmaKind::Put if origin.len() == m.len() => m.copy_from_slice(origin),
            RmaKind::Get => result = m.to_vec(),
            RmaKind::Accumulate => acc::apply(h.acc_op, h.elem, m, origin),
            RmaKind::GetAccumulate | RmaKind::FetchAndOp => {
                result = m.to_vec();
                acc::apply(h.acc_op, h.elem, m, origin);
            }
            RmaKind::CompareAndSwap => {
                result = m.to_vec();
                let compare = payload.get(len..).unwrap_or(&[]);
                if *m == *compare && origin.len() == m.len() {
                    m.copy_from_slice(origin);
                }
            }
            _ => {}
        });
        if !applied {
            // Dropped; a read gets an empty answer (never a buffer sized by
            // the wire).
            c.out_of_bounds += 1;
        }
        let unlock = h.flags.contains(RmaFlags::UNLOCK);
        let wants_ack = h.flags.contains(RmaFlags::FLUSH)
            || (unlock && !h.flags.contains(RmaFlags::UNLOCK_NO_ACK));
        let mut flags = RmaFlags::NONE;
        if granted_now {
            flags |= RmaFlags::LOCK_GRANTED;
        }
        if wants_ack {
            flags |= RmaFlags::ACK;
        }
        if h.kind.is_read() {
            let kind = match h.kind {
                RmaKind::Get => RmaKind::GetResp,
                RmaKind::GetAccumulate => RmaKind::GetAccumulateResp,
                RmaKind::FetchAndOp => RmaKind::FetchAndOpResp,
                _ => RmaKind::CompareAndSwapResp,
            };
            let hdr = RmaHeader::new(kind, h.win)
                .with_flags(flags)
                .with_ids(h.op_id, h.sync_id)
                .with_target(h.disp, u32::try_from(result.len()).unwrap_or(0));
            if wants_ack || granted_now {
                c.acks_sent += 1;
            }
            emit(out, from, hdr, &result);
        } else if granted_now && !from_queue {
            self.reply(from, RmaKind::LockOpAck, h, flags, c, out);
        } else if granted_now {
            // The origin already freed the op on LOCK_QUEUED_DATA_QUEUED.
            let mut hh = *h;
            hh.op_id = NO_OP_ID;
            self.reply(from, RmaKind::LockAck, &hh, flags, c, out);
        } else if wants_ack {
            self.reply(from, RmaKind::Ack, h, flags, c, out);
        }
        if h.flags.contains(RmaFlags::DECR_AT_COUNTER) {
            self.at_completion_counter -= 1;
        }
        if unlock {
            self.release(from, c, out);
        }
    }

    fn reply(
        &self,
        to: Rank,
        kind: RmaKind,
        req: &RmaHeader,
        flags: RmaFlags,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        c.acks_sent += 1;
        let hdr = RmaHeader::new(kind, req.win)
            .with_flags(flags)
            .with_ids(req.op_id, req.sync_id);
        emit(out, to, hdr, &[]);
    }
}
