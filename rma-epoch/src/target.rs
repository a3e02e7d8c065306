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

use std::collections::VecDeque;

use tm_proto::rma::{RmaFlags, RmaHeader, RmaKind};
use tracing::debug;

use crate::{acc, emit, Action, Counters, Rank, WinId, NO_OP_ID};

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
        }
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
    pub(crate) fn handle(
        &mut self,
        from: Rank,
        h: &RmaHeader,
        payload: &[u8],
        mem: &mut [u8],
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
                }
            }
            RmaKind::Unlock => {
                self.release(from, c);
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

    fn release(&mut self, from: Rank, c: &mut Counters) {
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
    fn drain(&mut self, mem: &mut [u8], c: &mut Counters, out: &mut VecDeque<Action>) {
        while let Some(front) = self.queue.front() {
            let excl = front.header.flags.contains(RmaFlags::LOCK_EXCLUSIVE);
            let from = front.from;
            if !self.try_acquire(from, excl) {
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
        if self.queue.len() >= self.queue_cap {
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
    fn perform(
        &mut self,
        from: Rank,
        h: &RmaHeader,
        payload: &[u8],
        mem: &mut [u8],
        granted_now: bool,
        from_queue: bool,
        c: &mut Counters,
        out: &mut VecDeque<Action>,
    ) {
        c.ops_applied += 1;
        let len = h.len as usize;
        let range = usize::try_from(h.disp)
            .ok()
            .and_then(|d| Some(d..d.checked_add(len)?))
            .filter(|r| r.end <= mem.len());
        let mut result = Vec::new();
        match range.and_then(|r| mem.get_mut(r)) {
            None => {
                // Dropped; a read gets an empty answer (never a buffer sized
                // by the wire).
                c.out_of_bounds += 1;
            }
            Some(m) => {
                let origin = payload.get(..len).unwrap_or(&[]);
                match h.kind {
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
                }
            }
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
            self.release(from, c);
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
