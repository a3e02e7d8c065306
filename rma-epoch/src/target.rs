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
//! them releases, it gives it back ([`Action::TargetUnlock`]). Shared requests
//! join a shared hold only while nobody queues, so a waiting exclusive
//! request is not overtaken.

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

    /// The driver holds the lock asked for: grant what waits for it.
    pub(crate) fn target_lock_granted<M: WindowMemory + ?Sized>(
        &mut self,
        mem: &mut MemView<'_, M>,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        match self.target_lock {
            TargetLock::Requested { exclusive } => {
                self.target_lock = TargetLock::Held { exclusive };
                self.drain(mem, c, out);
                // Nothing could use it (cannot happen: it was asked for the
                // queue's front): give it back.
                if self.lock == LockHolder::Free {
                    self.give_back(out);
                }
            }
            _ => c.stray_packets += 1,
        }
    }

    /// Asks for the shared-memory lock if requests wait and nothing holds
    /// it.
    fn want_target_lock(&mut self, out: &mut VecDeque<Action>) {
        if !self.shared_lock
            || self.target_lock != TargetLock::Free
            || self.lock != LockHolder::Free
        {
            return;
        }
        if let Some(front) = self.queue.front() {
            let exclusive = front.header.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
            self.target_lock = TargetLock::Requested { exclusive };
            out.push_back(Action::TargetLock {
                win: self.win,
                exclusive,
            });
        }
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

    fn try_acquire(&mut self, from: Rank, exclusive: bool) -> bool {
        let nobody_queues = self.queue.is_empty();
        self.try_acquire_as(from, exclusive, nobody_queues)
    }

    /// [`TargetSide::try_acquire`] for the front of the lock queue.
    fn try_acquire_front(&mut self, from: Rank, exclusive: bool) -> bool {
        self.try_acquire_as(from, exclusive, true)
    }

    fn try_acquire_as(&mut self, from: Rank, exclusive: bool, first_in_line: bool) -> bool {
        if self.shared_lock {
            // Only inside the shared-memory lock, in its mode; shared
            // requests join only while nobody queues.
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
                (LockHolder::Shared(v), Some(false)) if !exclusive && first_in_line => {
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

    /// Grants queued requests in FIFO order while they are compatible.
    fn drain<M: WindowMemory + ?Sized>(
        &mut self,
        mem: &mut MemView<'_, M>,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        while let Some(front) = self.queue.front() {
            let excl = front.header.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
            let from = front.from;
            if !self.try_acquire_front(from, excl) {
                if self.lock == LockHolder::Free
                    && matches!(self.target_lock, TargetLock::Held { exclusive } if exclusive != excl)
                {
                    // Held in the other mode: give it back, ask again.
                    self.give_back(out);
                }
                self.want_target_lock(out);
                break;
            }
            let Some(e) = self.queue.pop_front() else {
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
        // without queueing first: it keeps one entry even when configured
        // with none.
        let cap = if self.shared_lock {
            self.queue_cap.max(1)
        } else {
            self.queue_cap
        };
        if self.queue.len() >= cap {
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
