//! The tag-matching part of a software TM-SRQ: the matching list, the tag
//! slots and their free list, the 16-bit phase counters, the unexpected
//! counts of the provider, and the command queue of list operations.
//!
//! This is rdma-core's TM-SRQ as its tag-matching documentation and the mlx5
//! provider define it (see the crate docs, "Behaviour"), split in the two
//! halves the provider has: the synchronous *post* (slot taken, handle
//! written, counts recorded) and the asynchronous *execution* by the device
//! (entry appended or removed, `S` applied), with the provider's bookkeeping
//! done when completions are *polled* (slots released, command-queue slots
//! reclaimed, `IBV_WC_TM_SYNC_REQ` of unexpected messages).

use std::collections::VecDeque;

use crate::verbs::{
    errno, OpsOpcode, OpsWr, Sge, WcOpcode, WcStatus, IBV_OPS_SIGNALED, IBV_OPS_TM_SYNC,
};

/// mlx5's `MLX5_TM_MAX_SYNC_DIFF`: an unexpected completion asks for a sync
/// once software is this far behind.
pub(crate) const MAX_SYNC_DIFF: i32 = 0x3fff;

/// One entry of the device's matching list.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub handle: u32,
    pub gen: u32,
    pub tag: u64,
    pub mask: u64,
    pub sge: Option<Sge>,
    pub recv_wr_id: u64,
    /// The provider's `unexp_out` when the ADD was posted (16 bits).
    pub phase: u16,
    /// Appended while `S == H` (or activated by a sync since).
    pub active: bool,
}

#[derive(Debug, Clone, Default)]
struct Slot {
    live: bool,
    gen: u32,
    /// Completions still to poll before the slot is free (mlx5 `expect_cqe`).
    expect: i32,
    phase: u16,
    del_posted: bool,
    unsignaled_del: bool,
}

#[derive(Debug, Clone)]
enum OpKind {
    Add(Entry),
    Del { handle: u32, gen: u32 },
    Sync,
}

#[derive(Debug, Clone)]
struct Op {
    seq: u64,
    wr_id: u64,
    kind: OpKind,
    signaled: bool,
    sync: Option<u16>,
}

/// What executing one op produced: its completion, if it was signaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpDone {
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub status: WcStatus,
    pub sync_req: bool,
    /// Poll-time effect: reclaim the command queue up to this op and release
    /// the slot `n` times.
    pub seq: u64,
    pub release: Option<(u32, u32, i32)>,
}

/// How a consumed entry's slot looks to the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlotCheck {
    /// The slot still belongs to the entry and expects its consumption.
    Ok,
    /// An unsignaled DEL was posted for it (or freed it): mlx5 would report
    /// `IBV_WC_GENERAL_ERR` or give the completion to another handle.
    Misuse,
}

/// A TM-SRQ's tag-matching state.
#[derive(Debug, Clone)]
pub(crate) struct Tm {
    strict: bool,
    list: Vec<Entry>,
    slots: Vec<Slot>,
    free: VecDeque<u32>,
    pub h: u16,
    pub s: u16,
    unexp_in: u32,
    unexp_out: u32,
    cmdq: VecDeque<Op>,
    /// Posted ops not yet reclaimed (their sequence numbers).
    ring: VecDeque<u64>,
    cap: usize,
    next_seq: u64,
}

impl Tm {
    /// `max_num_tags + 1` slots in a FIFO free list, a command queue of
    /// `max_ops`.
    pub fn new(max_num_tags: u32, max_ops: u32, strict: bool) -> Self {
        let n = max_num_tags as usize + 1;
        Tm {
            strict,
            list: Vec::new(),
            slots: vec![Slot::default(); n],
            free: (0..n as u32).collect(),
            h: 0,
            s: 0,
            unexp_in: 0,
            unexp_out: 0,
            cmdq: VecDeque::new(),
            ring: VecDeque::new(),
            cap: max_ops as usize,
            next_seq: 0,
        }
    }

    /// Ops posted and not executed yet.
    pub fn queued_ops(&self) -> usize {
        self.cmdq.len()
    }

    /// Command-queue slots in use (posted, not reclaimed).
    pub fn outstanding_ops(&self) -> usize {
        self.ring.len()
    }

    /// Slots in use (live, waiting for completions).
    pub fn live_slots(&self) -> usize {
        self.slots.iter().filter(|s| s.live).count()
    }

    /// The provider's unexpected counts `(unexp_in, unexp_out)`.
    pub fn unexp_counts(&self) -> (u32, u32) {
        (self.unexp_in, self.unexp_out)
    }

    /// The list entries (handle, active), in list order.
    pub fn list(&self) -> impl Iterator<Item = &Entry> {
        self.list.iter()
    }

    /// The synchronous part of posting one work request (`index` in the
    /// chain). The ADD's buffer was checked by the caller.
    pub fn post(&mut self, wr: &mut OpsWr<'_>, max_sge: u32) -> Result<(), i32> {
        if self.ring.len() >= self.cap {
            return Err(errno::ENOMEM);
        }
        let signaled = wr.flags & IBV_OPS_SIGNALED != 0;
        let sync = (wr.flags & IBV_OPS_TM_SYNC != 0).then_some(wr.unexpected_cnt as u16);
        let kind = match wr.opcode {
            OpsOpcode::TAG_ADD => {
                if wr.add.sg_list.len() > max_sge as usize {
                    return Err(errno::EINVAL);
                }
                // "tag matching list is full": never take the last free slot.
                if self.free.len() <= 1 {
                    return Err(errno::ENOMEM);
                }
                let Some(handle) = self.free.pop_front() else {
                    return Err(errno::ENOMEM);
                };
                if sync.is_some() {
                    self.unexp_out = wr.unexpected_cnt;
                }
                let phase = self.unexp_out as u16;
                let slot = &mut self.slots[handle as usize];
                slot.live = true;
                slot.expect = 1 + i32::from(signaled);
                slot.phase = phase;
                slot.del_posted = false;
                slot.unsignaled_del = false;
                wr.handle = handle;
                OpKind::Add(Entry {
                    handle,
                    gen: slot.gen,
                    tag: wr.add.tag,
                    mask: wr.add.mask,
                    sge: wr.add.sg_list.first().copied(),
                    recv_wr_id: wr.add.recv_wr_id,
                    phase,
                    active: false,
                })
            }
            OpsOpcode::TAG_DEL => {
                let Some(slot) = self.slots.get_mut(wr.handle as usize) else {
                    return Err(errno::EINVAL);
                };
                if !slot.live || slot.del_posted {
                    return Err(errno::EINVAL);
                }
                slot.del_posted = true;
                let gen = slot.gen;
                if signaled {
                    slot.expect += 1;
                } else {
                    // mlx5: an unsignaled DEL assumes no consumption will
                    // complete, and releases the slot's share now.
                    slot.unsignaled_del = true;
                    slot.expect -= 1;
                    if slot.expect <= 0 {
                        self.free_slot(wr.handle);
                    }
                }
                OpKind::Del {
                    handle: wr.handle,
                    gen,
                }
            }
            OpsOpcode::TAG_SYNC => OpKind::Sync,
            _ => return Err(errno::EINVAL),
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        self.ring.push_back(seq);
        self.cmdq.push_back(Op {
            seq,
            wr_id: wr.wr_id,
            kind,
            signaled,
            sync,
        });
        Ok(())
    }

    fn free_slot(&mut self, handle: u32) {
        let slot = &mut self.slots[handle as usize];
        slot.live = false;
        slot.expect = 0;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push_back(handle);
    }

    /// Applies an op's `IBV_OPS_TM_SYNC` count: `S = count`, and if that puts
    /// the device in phase, every pending entry becomes active.
    fn apply_sync(&mut self, count: Option<u16>) {
        if let Some(c) = count {
            self.s = c;
        }
        if self.s == self.h {
            for e in &mut self.list {
                e.active = true;
            }
        }
    }

    /// Executes the oldest queued op: `None` if none is queued, `Some(None)`
    /// for an unsignaled one.
    pub fn exec_one(&mut self) -> Option<Option<OpDone>> {
        let op = self.cmdq.pop_front()?;
        self.apply_sync(op.sync);
        let done = match op.kind {
            OpKind::Add(mut e) => {
                e.active = self.s == self.h;
                let sync_req = self.h != e.phase;
                let (handle, gen) = (e.handle, e.gen);
                self.list.push(e);
                op.signaled.then_some(OpDone {
                    wr_id: op.wr_id,
                    opcode: WcOpcode::TM_ADD,
                    status: WcStatus::SUCCESS,
                    sync_req,
                    seq: op.seq,
                    release: Some((handle, gen, 1)),
                })
            }
            OpKind::Del { handle, gen } => {
                let phase = self.slots[handle as usize].phase;
                let sync_req = self.h != phase;
                let pos = self
                    .list
                    .iter()
                    .position(|e| e.handle == handle && e.gen == gen);
                let removed = pos.map(|i| self.list.remove(i)).is_some();
                op.signaled.then_some(OpDone {
                    wr_id: op.wr_id,
                    opcode: WcOpcode::TM_DEL,
                    status: if removed {
                        WcStatus::SUCCESS
                    } else {
                        WcStatus::TM_ERR
                    },
                    sync_req,
                    seq: op.seq,
                    // Success: once for the op, once for the consumption that
                    // will never come.
                    release: Some((handle, gen, if removed { 2 } else { 1 })),
                })
            }
            OpKind::Sync => op.signaled.then_some(OpDone {
                wr_id: op.wr_id,
                opcode: WcOpcode::TM_SYNC,
                status: WcStatus::SUCCESS,
                sync_req: false,
                seq: op.seq,
                release: None,
            }),
        };
        Some(done)
    }

    /// The first entry that matches `tag` now, in list order.
    pub fn find_match(&self, tag: u64) -> Option<usize> {
        if self.strict && self.s != self.h {
            return None;
        }
        self.list
            .iter()
            .position(|e| (self.strict || e.active) && ((tag ^ e.tag) & e.mask) == 0)
    }

    /// Removes the matched entry; says whether its slot still expects it.
    pub fn take_entry(&mut self, i: usize) -> (Entry, SlotCheck) {
        let e = self.list.remove(i);
        let slot = &self.slots[e.handle as usize];
        let check = if slot.live && slot.gen == e.gen && !slot.unsignaled_del {
            SlotCheck::Ok
        } else {
            SlotCheck::Misuse
        };
        (e, check)
    }

    /// A tagged message was delivered unexpected: `H += 1`.
    pub fn unexpected_delivered(&mut self) {
        self.h = self.h.wrapping_add(1);
    }

    /// Poll-time effect of an op completion.
    pub fn poll_op(&mut self, seq: u64, release: Option<(u32, u32, i32)>) -> Result<(), String> {
        while self.ring.front().is_some_and(|s| *s <= seq) {
            self.ring.pop_front();
        }
        match release {
            Some((h, gen, n)) => self.release(h, gen, n),
            None => Ok(()),
        }
    }

    /// Poll-time effect of a consumption's final completion.
    pub fn poll_consume(&mut self, handle: u32, gen: u32) -> Result<(), String> {
        self.release(handle, gen, 1)
    }

    fn release(&mut self, handle: u32, gen: u32, n: i32) -> Result<(), String> {
        let slot = &mut self.slots[handle as usize];
        if !slot.live || slot.gen != gen {
            return Err(format!(
                "completion for tag slot {handle} which is not held (mlx5: \"got idx {handle} which wasn't added\")"
            ));
        }
        slot.expect -= n;
        if slot.expect <= 0 {
            let under = slot.expect < 0;
            self.free_slot(handle);
            if under {
                return Err(format!("tag slot {handle} released more often than held"));
            }
        }
        Ok(())
    }

    /// Poll-time effect of an unexpected `TM_RECV`: `unexp_in += 1`; whether
    /// the completion carries `IBV_WC_TM_SYNC_REQ`.
    pub fn poll_unexpected(&mut self) -> bool {
        self.unexp_in = self.unexp_in.wrapping_add(1);
        self.unexp_in.wrapping_sub(self.unexp_out) as i32 > MAX_SYNC_DIFF
    }
}
