//! Origin-side algorithms of a window: ISSUE_OPS, the closing-call state
//! machines, RESTORE_* and the handling of lock answers, responses and ACKs.

use super::*;

fn lock_flag(exclusive: bool) -> RmaFlags {
    if exclusive {
        RmaFlags::LOCK_EXCLUSIVE
    } else {
        RmaFlags::LOCK_SHARED
    }
}

fn local_done(t: &TargetElem) -> bool {
    t.pending.is_empty() && t.issued.is_empty()
}

fn remote_done(t: &TargetElem) -> bool {
    local_done(t)
        && t.acks == 0
        && t.sync == SyncFlag::None
        && t.flush_not_issued == 0
        && !t.win_complete
        && t.state != TargetState::LockIssued
}

fn unlock_done(t: &TargetElem) -> bool {
    remote_done(t)
        && (t.unlock_sent || !t.per_target_lock || t.nocheck || t.state == TargetState::LockCalled)
}

/// An element that holds nothing and can be dropped without losing
/// information (a per-target lock not yet sent cannot: its re-creation would
/// assume the lock is held).
fn idle(t: &TargetElem) -> bool {
    remote_done(t) && !(t.per_target_lock && t.state == TargetState::LockCalled)
}

/// Computes the FLUSH/UNLOCK/DECR flags the last op (or the closing packet)
/// carries, and records what they make us wait for.
fn closing_flags(t: &mut TargetElem, c: &mut Counters) -> RmaFlags {
    let mut f = RmaFlags::NONE;
    match t.sync {
        SyncFlag::Unlock if t.per_target_lock && !t.nocheck && !t.unlock_sent => {
            f |= RmaFlags::UNLOCK;
            t.unlock_sent = true;
            t.acks += 1;
            t.flush_not_issued = 0;
        }
        SyncFlag::Unlock | SyncFlag::Flush => {
            f |= RmaFlags::FLUSH;
            t.acks += 1;
            t.flush_not_issued = 0;
        }
        _ => {}
    }
    if t.win_complete {
        f |= RmaFlags::DECR_AT_COUNTER;
        t.win_complete = false;
    }
    if f != RmaFlags::NONE {
        c.sync_piggybacked += 1;
    }
    t.sync = SyncFlag::None;
    f
}

/// Undoes [`closing_flags`] for an op the target dropped (it will be re-sent).
fn revert_flags(t: &mut TargetElem, f: RmaFlags) {
    if f.contains(RmaFlags::UNLOCK) {
        t.unlock_sent = false;
        t.acks = t.acks.saturating_sub(1);
        t.sync = t.sync.max(SyncFlag::Unlock);
    } else if f.contains(RmaFlags::FLUSH) {
        t.acks = t.acks.saturating_sub(1);
        t.sync = t.sync.max(SyncFlag::Flush);
    }
    if f.contains(RmaFlags::DECR_AT_COUNTER) {
        t.win_complete = true;
    }
    // The op was issued once already: never hold it back again (a pending
    // flush may be waiting for it).
    t.sync = t.sync.max(SyncFlag::FlushLocal);
}

/// Hands one op to the transport.
fn send_op(
    w: &mut WinCore,
    ops: &mut Pools<'_, OpElem>,
    out: &mut VecDeque<Action>,
    t: &mut TargetElem,
    o: ElemRef,
    flags: RmaFlags,
) {
    let Some(op) = ops.get_mut(o) else {
        return;
    };
    let hdr = RmaHeader::new(op.kind, w.id)
        .with_flags(flags)
        .with_ids(o.to_u32(), t.serial)
        .with_target(op.disp, op.len)
        .with_acc(op.acc_op, op.elem);
    emit(out, t.rank, hdr, &op.data);
    op.sent_flags = flags;
    w.counters.ops_issued += 1;
    if flags.intersects(RmaFlags::LOCK_SHARED | RmaFlags::LOCK_EXCLUSIVE) {
        op.status = OpStatus::AwaitLock;
        t.issued.push(o);
    } else if op.kind.is_read() {
        op.status = OpStatus::AwaitResponse;
        t.issued.push(o);
    } else {
        // The packet carries a copy of the data: locally complete now.
        ops.free(o);
    }
}

fn send_lock(w: &mut WinCore, out: &mut VecDeque<Action>, t: &mut TargetElem) {
    let hdr = RmaHeader::new(RmaKind::Lock, w.id)
        .with_flags(lock_flag(t.exclusive))
        .with_ids(NO_OP_ID, t.serial);
    emit(out, t.rank, hdr, &[]);
    w.counters.lock_packets += 1;
    t.state = TargetState::LockIssued;
    debug!(win = w.id, target = t.rank, "LOCK sent");
}

impl Ctx<'_> {
    pub(super) fn find(&self, rank: Rank) -> Option<ElemRef> {
        let n = self.w.slots.len().max(1);
        let slot = self.w.slots.get(rank as usize % n)?;
        slot.iter()
            .copied()
            .find(|r| self.tg.get(*r).is_some_and(|t| t.rank == rank))
    }

    fn create_target(
        &mut self,
        rank: Rank,
        state: TargetState,
        per_target_lock: bool,
    ) -> Option<ElemRef> {
        let r = self.tg.alloc()?;
        let serial = self.w.next_serial;
        self.w.next_serial = self.w.next_serial.wrapping_add(1).max(1);
        let t = self.tg.get_mut(r)?;
        t.rank = rank;
        t.serial = serial;
        t.state = state;
        t.exclusive = false;
        t.nocheck = false;
        t.per_target_lock = per_target_lock;
        t.pending.clear();
        t.issued.clear();
        t.sync = SyncFlag::None;
        t.acks = 0;
        t.flush_not_issued = 0;
        t.win_complete = false;
        t.unlock_sent = false;
        t.evicting = false;
        t.urgent = false;
        let n = self.w.slots.len().max(1);
        if let Some(s) = self.w.slots.get_mut(rank as usize % n) {
            s.push(r);
        }
        self.w.active.push(r);
        Some(r)
    }

    fn free_target(&mut self, r: ElemRef) {
        let Some(t) = self.tg.get_mut(r) else {
            return;
        };
        let rank = t.rank;
        // ACKs still expected for a freed element are counted on the window.
        self.w.outstanding_acks += u64::from(t.acks);
        let leftovers: Vec<ElemRef> = t.pending.drain(..).chain(t.issued.drain(..)).collect();
        for o in leftovers {
            self.ops.free(o);
        }
        let n = self.w.slots.len().max(1);
        if let Some(s) = self.w.slots.get_mut(rank as usize % n) {
            s.retain(|x| *x != r);
        }
        self.w.active.retain(|x| *x != r);
        self.tg.free(r);
    }

    fn free_all_targets(&mut self) {
        while let Some(&r) = self.w.active.last() {
            self.free_target(r);
        }
    }

    fn all_targets(&self, pred: impl Fn(&TargetElem) -> bool) -> bool {
        self.w
            .active
            .iter()
            .all(|r| self.tg.get(*r).is_none_or(&pred))
    }

    fn raise_all(&mut self, f: impl Fn(&TargetElem) -> SyncFlag) {
        for i in 0..self.w.active.len() {
            if let Some(t) = self.w.active.get(i).and_then(|r| self.tg.get_mut(*r)) {
                t.sync = t.sync.max(f(t));
            }
        }
    }

    fn is_candidate(&self, o: ElemRef) -> bool {
        self.ops.get(o).is_some_and(|op| {
            op.kind.is_read() || (op.len as usize) <= self.w.cfg.piggyback_lock_data_size
        })
    }

    /// ISSUE_OPS_TARGET: issues what the target's state allows.
    fn issue_target(&mut self, r: ElemRef) {
        if !self.w.window_ready() {
            return;
        }
        let threshold = self.w.cfg.piggyback_threshold;
        let delay = self.w.cfg.delay_issuing;
        let front = self.tg.get(r).and_then(|t| t.pending.front().copied());
        let cand = front.is_some_and(|o| self.is_candidate(o));
        let Some(t) = self.tg.get_mut(r) else {
            return;
        };
        match t.state {
            TargetState::LockIssued => {}
            TargetState::LockCalled => match front {
                None => {
                    if t.evicting {
                        send_lock(self.w, self.out, t);
                    } else {
                        // Nothing to lock for: a closing call needs no message.
                        t.sync = SyncFlag::None;
                    }
                }
                Some(o) => {
                    let hold = delay
                        && t.pending.len() == 1
                        && cand
                        && t.sync == SyncFlag::None
                        && !t.evicting
                        && !t.urgent;
                    if hold {
                        // Single short op: wait for the unlock to ride along.
                        return;
                    }
                    if cand {
                        t.pending.pop_front();
                        let mut flags = lock_flag(t.exclusive);
                        if t.pending.is_empty() {
                            flags |= closing_flags(t, &mut self.w.counters);
                        }
                        self.w.counters.locks_piggybacked += 1;
                        if flags.contains(RmaFlags::UNLOCK) {
                            self.w.counters.lock_op_unlock += 1;
                        }
                        debug!(
                            win = self.w.id,
                            target = t.rank,
                            flags = flags.0,
                            "LOCK piggybacked on the first op"
                        );
                        t.state = TargetState::LockIssued;
                        send_op(self.w, &mut self.ops, self.out, t, o, flags);
                    } else {
                        send_lock(self.w, self.out, t);
                    }
                }
            },
            TargetState::Active | TargetState::LockGranted => {
                let go = t.sync != SyncFlag::None
                    || t.evicting
                    || t.urgent
                    || t.pending.len() > threshold;
                if !go {
                    return;
                }
                t.urgent = false;
                while let Some(o) = t.pending.pop_front() {
                    let flags = if t.pending.is_empty() {
                        closing_flags(t, &mut self.w.counters)
                    } else {
                        RmaFlags::NONE
                    };
                    let read = self.ops.get(o).is_some_and(|op| op.kind.is_read());
                    if !read && !flags.intersects(RmaFlags::FLUSH | RmaFlags::UNLOCK) {
                        t.flush_not_issued += 1;
                    }
                    send_op(self.w, &mut self.ops, self.out, t, o, flags);
                }
                self.check_and_switch(r);
            }
        }
    }

    /// The closing call found no op left to piggyback on: send what the sync
    /// flag still needs as a control packet.
    fn check_and_switch(&mut self, r: ElemRef) {
        let id = self.w.id;
        let Some(t) = self.tg.get_mut(r) else {
            return;
        };
        if !t.pending.is_empty() {
            return;
        }
        let unlock_now =
            t.sync == SyncFlag::Unlock && t.per_target_lock && !t.nocheck && !t.unlock_sent;
        if unlock_now {
            if t.state != TargetState::LockGranted {
                // Keep the request until the grant arrives.
                return;
            }
            let no_ack = t.flush_not_issued == 0;
            let mut flags = RmaFlags::UNLOCK;
            if no_ack {
                flags |= RmaFlags::UNLOCK_NO_ACK;
            } else {
                t.acks += 1;
            }
            let hdr = RmaHeader::new(RmaKind::Unlock, id)
                .with_flags(flags)
                .with_ids(NO_OP_ID, t.serial);
            emit(self.out, t.rank, hdr, &[]);
            t.unlock_sent = true;
            t.flush_not_issued = 0;
            self.w.counters.unlock_packets += 1;
        } else if t.sync >= SyncFlag::Flush && t.flush_not_issued > 0 {
            let hdr = RmaHeader::new(RmaKind::Flush, id).with_ids(NO_OP_ID, t.serial);
            emit(self.out, t.rank, hdr, &[]);
            t.acks += 1;
            t.flush_not_issued = 0;
            self.w.counters.flush_packets += 1;
        }
        t.sync = SyncFlag::None;
        if t.win_complete {
            let hdr = RmaHeader::new(RmaKind::DecrAtCounter, id).with_ids(NO_OP_ID, t.serial);
            emit(self.out, t.rank, hdr, &[]);
            t.win_complete = false;
            self.w.counters.decr_packets += 1;
        }
    }

    /// MAKE_RMA_PROGRESS_WIN plus the pending call's state machine, until
    /// nothing changes.
    pub(super) fn progress(&mut self) {
        for _ in 0..64 {
            if self.w.access == AccessState::PscwIssued && self.w.posts_missing == 0 {
                self.w.access = AccessState::PscwGranted;
            }
            if self.w.access == AccessState::LockAllIssued
                && self.w.cursor.is_none()
                && self.w.outstanding_locks == 0
            {
                self.w.access = AccessState::LockAllGranted;
            }
            for i in 0..self.w.active.len() {
                if let Some(&r) = self.w.active.get(i) {
                    self.issue_target(r);
                }
            }
            if !self.step_blocked() {
                break;
            }
        }
    }

    fn finish(&mut self, call: Call) {
        if call == Call::Free {
            self.w.freed = true;
            *self.freed = true;
        }
        if !self.w.in_call {
            self.out.push_back(Action::Completed {
                win: self.w.id,
                call,
            });
        }
    }

    /// Advances the pending call; true if anything changed.
    fn step_blocked(&mut self) -> bool {
        let Some(b) = self.w.blocked.take() else {
            return false;
        };
        let call = b.call();
        let (next, changed) = self.step(b);
        let done = next.is_none();
        self.w.blocked = next;
        if done {
            self.finish(call);
        }
        changed || done
    }

    fn step(&mut self, b: Blocked) -> (Option<Blocked>, bool) {
        use AccessState::*;
        match b {
            Blocked::Fence { assert, phase } => match phase {
                FencePhase::WaitPrevious => {
                    if self.w.barriers_in_flight > 0 {
                        return (Some(b), false);
                    }
                    if self.w.access == FenceIssued {
                        self.w.access = FenceGranted;
                    }
                    self.raise_all(|_| SyncFlag::Flush);
                    (
                        Some(Blocked::Fence {
                            assert,
                            phase: FencePhase::Flush,
                        }),
                        true,
                    )
                }
                FencePhase::Flush => {
                    if self.all_targets(remote_done) && self.w.outstanding_acks == 0 {
                        self.free_all_targets();
                        self.w.start_barrier(self.out);
                        self.w.access = FenceIssued;
                        (
                            Some(Blocked::Fence {
                                assert,
                                phase: FencePhase::Barrier,
                            }),
                            true,
                        )
                    } else {
                        (Some(b), false)
                    }
                }
                FencePhase::Barrier => {
                    if self.w.barriers_in_flight > 0 {
                        return (Some(b), false);
                    }
                    self.w.access = if assert & assert::NOSUCCEED != 0 {
                        Unset
                    } else {
                        FenceGranted
                    };
                    (None, true)
                }
            },
            Blocked::Complete { armed } => {
                if self.w.access == PscwIssued {
                    // The posts of direct targets are seen only when asked
                    // for.
                    let before = self.w.direct.out.len();
                    for i in 0..self.w.group.len() {
                        let (Some(&rank), Some(false)) =
                            (self.w.group.get(i), self.w.posted.get(i).copied())
                        else {
                            continue;
                        };
                        if self.is_direct(rank) {
                            self.w.direct.request_post(rank);
                        }
                    }
                    let asked = self.w.direct.out.len() != before;
                    return (Some(b), asked);
                }
                if !armed {
                    for i in 0..self.w.group.len() {
                        let Some(&rank) = self.w.group.get(i) else {
                            continue;
                        };
                        if self.is_direct(rank) {
                            // Its operations completed when they returned.
                            self.w
                                .direct
                                .out
                                .push_back(crate::DirectAction::Complete { target: rank });
                            continue;
                        }
                        if let Some(t) = self.find(rank).and_then(|r| self.tg.get_mut(r)) {
                            t.win_complete = true;
                            t.sync = t.sync.max(SyncFlag::FlushLocal);
                        } else {
                            let hdr = RmaHeader::new(RmaKind::DecrAtCounter, self.w.id)
                                .with_ids(NO_OP_ID, 0);
                            emit(self.out, rank, hdr, &[]);
                            self.w.counters.decr_packets += 1;
                        }
                    }
                    return (Some(Blocked::Complete { armed: true }), true);
                }
                if self.all_targets(|t| local_done(t) && !t.win_complete)
                    && self.w.outstanding_acks == 0
                {
                    self.free_all_targets();
                    self.w.access = Unset;
                    self.w.group.clear();
                    self.w.posted.clear();
                    self.w.direct.post_requested.clear();
                    (None, true)
                } else {
                    (Some(b), false)
                }
            }
            Blocked::Wait => {
                let asked = self.w.direct.request_completes();
                if self.w.side.at_completion_counter <= 0 {
                    self.w.exposure = ExposureState::None;
                    (None, true)
                } else {
                    (Some(b), asked)
                }
            }
            Blocked::Lock {
                rank,
                exclusive,
                nocheck,
            } => {
                let state = if nocheck {
                    TargetState::LockGranted
                } else {
                    TargetState::LockCalled
                };
                match self.create_target(rank, state, true) {
                    Some(r) => {
                        let eager = !self.w.cfg.delay_issuing && !nocheck;
                        if let Some(t) = self.tg.get_mut(r) {
                            t.exclusive = exclusive;
                            t.nocheck = nocheck;
                            if eager {
                                send_lock(self.w, self.out, t);
                            }
                        }
                        (None, true)
                    }
                    None => (Some(b), self.restore_target()),
                }
            }
            Blocked::Unlock { rank, armed } => {
                let r = match self.find(rank) {
                    Some(r) => r,
                    None => match self.create_target(rank, TargetState::LockGranted, true) {
                        Some(r) => r,
                        None => return (Some(b), self.restore_target()),
                    },
                };
                let Some(t) = self.tg.get_mut(r) else {
                    return (Some(b), false);
                };
                if !armed {
                    let f = if t.nocheck {
                        SyncFlag::Flush
                    } else {
                        SyncFlag::Unlock
                    };
                    t.sync = t.sync.max(f);
                    return (Some(Blocked::Unlock { rank, armed: true }), true);
                }
                if unlock_done(t) {
                    self.free_target(r);
                    self.w.lock_epoch_count = self.w.lock_epoch_count.saturating_sub(1);
                    if self.w.lock_epoch_count == 0 {
                        self.w.access = Unset;
                    }
                    (None, true)
                } else {
                    (Some(b), false)
                }
            }
            Blocked::UnlockAll { phase } => match phase {
                UnlockAllPhase::WaitGranted => {
                    if self.w.access == LockAllIssued || !self.w.direct.all_granted() {
                        return (Some(b), false);
                    }
                    // Direct targets: every operation is complete already.
                    self.w.direct.release_all();
                    self.raise_all(|t| {
                        if t.per_target_lock && !t.nocheck {
                            SyncFlag::Unlock
                        } else {
                            SyncFlag::Flush
                        }
                    });
                    (
                        Some(Blocked::UnlockAll {
                            phase: UnlockAllPhase::Drain,
                        }),
                        true,
                    )
                }
                UnlockAllPhase::Drain => {
                    if !(self.all_targets(unlock_done) && self.w.outstanding_acks == 0) {
                        return (Some(b), false);
                    }
                    if self.w.access == LockAllGranted && !self.w.lock_all_nocheck {
                        self.set_cursor(Some(Cursor {
                            kind: CursorKind::Unlock,
                            next: 0,
                        }));
                        (
                            Some(Blocked::UnlockAll {
                                phase: UnlockAllPhase::Cursor,
                            }),
                            true,
                        )
                    } else {
                        self.free_all_targets();
                        self.w.access = Unset;
                        (None, true)
                    }
                }
                UnlockAllPhase::Cursor => {
                    if self.w.cursor.is_none() && self.w.outstanding_acks == 0 {
                        self.free_all_targets();
                        self.w.access = Unset;
                        (None, true)
                    } else {
                        (Some(b), false)
                    }
                }
            },
            Blocked::Flush { rank, local, armed } => {
                let Some(r) = self.find(rank) else {
                    // No element: everything to it completed remotely before
                    // the element was freed.
                    return (None, true);
                };
                let Some(t) = self.tg.get_mut(r) else {
                    return (None, true);
                };
                if !armed {
                    let f = if local {
                        SyncFlag::FlushLocal
                    } else {
                        SyncFlag::Flush
                    };
                    t.sync = t.sync.max(f);
                    return (
                        Some(Blocked::Flush {
                            rank,
                            local,
                            armed: true,
                        }),
                        true,
                    );
                }
                let done = if local { local_done(t) } else { remote_done(t) };
                if done {
                    (None, true)
                } else {
                    (Some(b), false)
                }
            }
            Blocked::FlushAll { local, armed } => {
                if !armed {
                    let f = if local {
                        SyncFlag::FlushLocal
                    } else {
                        SyncFlag::Flush
                    };
                    self.raise_all(|_| f);
                    return (Some(Blocked::FlushAll { local, armed: true }), true);
                }
                let done = if local {
                    self.all_targets(local_done)
                } else {
                    self.all_targets(remote_done) && self.w.outstanding_acks == 0
                };
                if done {
                    (None, true)
                } else {
                    (Some(b), false)
                }
            }
            Blocked::PostOp { op } => self.step_post(op),
            Blocked::Free => {
                let s = &self.w.side;
                let done = s.lock == LockHolder::Free
                    && s.target_lock_idle()
                    && s.queued() == 0
                    && s.at_completion_counter <= 0
                    && self.w.barriers_in_flight == 0
                    && self.w.outstanding_acks == 0
                    && self.w.active.is_empty();
                if done {
                    (None, true)
                } else {
                    (Some(b), false)
                }
            }
        }
    }

    /// RMA_OP: finds or creates the target element, takes an op element and
    /// queues the op; reclaims resources when a pool is empty.
    fn step_post(&mut self, op: Box<NewOp>) -> (Option<Blocked>, bool) {
        use AccessState::*;
        let r = match self.find(op.target) {
            Some(r) => r,
            None => {
                let (state, ptl) = match self.w.access {
                    FenceIssued | FenceGranted | PscwIssued | PscwGranted => {
                        (TargetState::Active, false)
                    }
                    LockAllCalled => (TargetState::LockCalled, true),
                    LockAllIssued | LockAllGranted => (TargetState::LockGranted, false),
                    PerTarget => (TargetState::LockGranted, true),
                    Unset => return (None, true),
                };
                match self.create_target(op.target, state, ptl) {
                    Some(r) => {
                        let eager = state == TargetState::LockCalled && !self.w.cfg.delay_issuing;
                        let nocheck = self.w.lock_all_nocheck && !ptl;
                        if let Some(t) = self.tg.get_mut(r) {
                            t.nocheck = nocheck;
                            if eager {
                                send_lock(self.w, self.out, t);
                            }
                        }
                        r
                    }
                    None => {
                        let changed = self.restore_target();
                        return (Some(Blocked::PostOp { op }), changed);
                    }
                }
            }
        };
        let Some(o) = self.ops.alloc() else {
            let changed = self.restore_op();
            return (Some(Blocked::PostOp { op }), changed);
        };
        if let Some(e) = self.ops.get_mut(o) {
            let NewOp {
                kind,
                target,
                disp,
                len,
                acc_op,
                elem,
                data,
                token,
            } = *op;
            *e = OpElem {
                kind,
                target,
                disp,
                len,
                acc_op,
                elem,
                data,
                token,
                status: OpStatus::Pending,
                sent_flags: RmaFlags::NONE,
            };
        }
        if let Some(t) = self.tg.get_mut(r) {
            t.pending.push_back(o);
        }
        (None, true)
    }

    /// RESTORE_TARGET_ELEM_RESOURCES, one non-blocking step. True if it
    /// changed anything.
    fn restore_target(&mut self) -> bool {
        use AccessState::*;
        match self.w.access {
            FenceIssued | PscwIssued | LockAllIssued => {
                // While the window protocol's LOCKs go out, an element that
                // runs its own lock must stay: freed, its rank would get a
                // second lock from the broadcast.
                let lock_all = self.w.access == LockAllIssued;
                let victim = self.w.active.iter().copied().find(|r| {
                    self.tg
                        .get(*r)
                        .is_some_and(|t| idle(t) && !(lock_all && t.per_target_lock))
                });
                if let Some(r) = victim {
                    self.free_target(r);
                    self.w.counters.restore_target += 1;
                    true
                } else {
                    false
                }
            }
            FenceGranted | PscwGranted | LockAllGranted => self.evict(true),
            PerTarget => self.evict(false),
            LockAllCalled => {
                // Fall back to the window protocol: lock every rank that has
                // no element of its own, lazily.
                info!(
                    win = self.w.id,
                    "lock_all: target elements exhausted, switching to the window protocol"
                );
                self.w.access = LockAllIssued;
                self.set_cursor(Some(Cursor {
                    kind: CursorKind::Lock,
                    next: 0,
                }));
                self.w.counters.lock_all_fallbacks += 1;
                true
            }
            Unset => false,
        }
    }

    fn evict(&mut self, multi: bool) -> bool {
        let evicting = self
            .w
            .active
            .iter()
            .copied()
            .find(|r| self.tg.get(*r).is_some_and(|t| t.evicting));
        if let Some(r) = evicting {
            let done = self.tg.get(r).is_some_and(|t| {
                if multi {
                    // RMA_DONE sent, ops locally complete: the ACK is counted
                    // on the window and awaited by the closing call.
                    local_done(t)
                        && t.sync == SyncFlag::None
                        && t.flush_not_issued == 0
                        && matches!(t.state, TargetState::Active | TargetState::LockGranted)
                } else {
                    remote_done(t) && t.state == TargetState::LockGranted
                }
            });
            if done {
                self.free_target(r);
                self.w.counters.restore_target += 1;
                if !multi {
                    self.w.lock_evictions += 1;
                }
                return true;
            }
            return false;
        }
        // Pick a victim: granted first, then issued, then called.
        let rank_of = |s: TargetState| match s {
            TargetState::Active | TargetState::LockGranted => 0,
            TargetState::LockIssued => 1,
            TargetState::LockCalled => 2,
        };
        let victim = self
            .w
            .active
            .iter()
            .copied()
            .filter_map(|r| self.tg.get(r).map(|t| (rank_of(t.state), r)))
            .min_by_key(|(k, _)| *k)
            .map(|(_, r)| r);
        match victim.and_then(|r| self.tg.get_mut(r)) {
            Some(t) => {
                debug!(win = self.w.id, target = t.rank, "evicting target element");
                t.evicting = true;
                t.sync = t.sync.max(SyncFlag::Flush);
                true
            }
            None => false,
        }
    }

    /// RESTORE_OP_ELEM_RESOURCES, one non-blocking step.
    fn restore_op(&mut self) -> bool {
        let busy = self.w.active.iter().any(|r| {
            self.tg
                .get(*r)
                .is_some_and(|t| t.sync != SyncFlag::None && !t.pending.is_empty())
        });
        if busy {
            return false;
        }
        let victim = self
            .w
            .active
            .iter()
            .copied()
            .find(|r| self.tg.get(*r).is_some_and(|t| !t.pending.is_empty()));
        match victim.and_then(|r| self.tg.get_mut(r)) {
            Some(t) => {
                t.sync = t.sync.max(SyncFlag::FlushLocal);
                self.w.counters.restore_op += 1;
                true
            }
            None => false,
        }
    }

    fn ack(&mut self, from: Rank, sync_id: u32) {
        if sync_id != 0 {
            if let Some(t) = self.find(from).and_then(|r| self.tg.get_mut(r)) {
                if t.serial == sync_id && t.acks > 0 {
                    t.acks -= 1;
                    return;
                }
            }
        }
        if self.w.outstanding_acks > 0 {
            self.w.outstanding_acks -= 1;
        } else {
            self.w.counters.stray_packets += 1;
        }
    }

    /// A packet for the origin side: posts, lock answers, responses, ACKs.
    pub(super) fn origin_packet(&mut self, from: Rank, h: &RmaHeader, payload: &[u8]) {
        match h.kind {
            RmaKind::Post => {
                if !(self.w.access == AccessState::PscwIssued && self.w.mark_posted(from)) {
                    self.w.early_posts.push(from);
                }
                return;
            }
            RmaKind::Ack => {
                self.ack(from, h.sync_id);
                return;
            }
            _ => {}
        }
        if h.op_id == WIN_LOCK_ID {
            if h.flags.contains(RmaFlags::LOCK_GRANTED) {
                self.w.outstanding_locks = self.w.outstanding_locks.saturating_sub(1);
            } else if h.flags.contains(RmaFlags::LOCK_DISCARDED) {
                let hdr = RmaHeader::new(RmaKind::Lock, self.w.id)
                    .with_flags(RmaFlags::LOCK_SHARED)
                    .with_ids(WIN_LOCK_ID, 0);
                emit(self.out, from, hdr, &[]);
                self.w.counters.lock_packets += 1;
                self.w.counters.retransmits += 1;
            } else {
                self.w.counters.stray_packets += 1;
            }
            return;
        }
        if h.flags.contains(RmaFlags::ACK) {
            self.ack(from, h.sync_id);
        }
        let Some(r) = self.find(from) else {
            self.w.counters.stray_packets += 1;
            return;
        };
        let Some(t) = self.tg.get_mut(r) else {
            return;
        };
        if h.flags.contains(RmaFlags::LOCK_GRANTED) && t.state == TargetState::LockIssued {
            t.state = TargetState::LockGranted;
            debug!(win = self.w.id, target = from, "lock granted");
        }
        if h.op_id == NO_OP_ID {
            if h.flags.contains(RmaFlags::LOCK_DISCARDED) && t.state == TargetState::LockIssued {
                t.state = TargetState::LockCalled;
                self.w.counters.retransmits += 1;
            }
            return;
        }
        let o = ElemRef::from_u32(h.op_id);
        let Some(pos) = t.issued.iter().position(|x| *x == o) else {
            self.w.counters.stray_packets += 1;
            return;
        };
        let Some(op) = self.ops.get_mut(o).filter(|op| op.target == from) else {
            self.w.counters.stray_packets += 1;
            return;
        };
        let response = matches!(
            h.kind,
            RmaKind::GetResp
                | RmaKind::GetAccumulateResp
                | RmaKind::FetchAndOpResp
                | RmaKind::CompareAndSwapResp
        );
        let read = op.kind.is_read();
        if response {
            self.out.push_back(Action::Result {
                win: self.w.id,
                token: OpToken(op.token),
                data: payload.to_vec(),
            });
            t.issued.swap_remove(pos);
            self.ops.free(o);
        } else if h.flags.contains(RmaFlags::LOCK_DISCARDED)
            || h.flags.contains(RmaFlags::LOCK_QUEUED_DATA_DISCARDED)
        {
            // Re-send later: without the lock flag once the queued lock is
            // granted, or with it again after LOCK_DISCARDED.
            t.issued.swap_remove(pos);
            revert_flags(t, op.sent_flags);
            op.status = OpStatus::Pending;
            op.sent_flags = RmaFlags::NONE;
            t.pending.push_front(o);
            if h.flags.contains(RmaFlags::LOCK_DISCARDED) && t.state == TargetState::LockIssued {
                t.state = TargetState::LockCalled;
            }
            self.w.counters.retransmits += 1;
        } else if h.flags.contains(RmaFlags::LOCK_QUEUED_DATA_QUEUED) {
            if !read {
                t.issued.swap_remove(pos);
                self.ops.free(o);
            }
        } else if h.kind == RmaKind::LockOpAck {
            t.issued.swap_remove(pos);
            self.ops.free(o);
        }
    }

    /// Emits the next packet of a lazy broadcast.
    pub(super) fn cursor_step(&mut self) {
        let Some(cur) = self.w.cursor else {
            return;
        };
        let n = self.w.cfg.comm_size;
        let mut next = cur.next;
        while next < n {
            let rank = next;
            next += 1;
            // Direct ranks are locked by the direct backend, lazily.
            let skip = self.is_direct(rank)
                || self
                    .find(rank)
                    .and_then(|r| self.tg.get(r))
                    .is_some_and(|t| t.per_target_lock);
            if skip {
                continue;
            }
            match cur.kind {
                CursorKind::Lock => {
                    let hdr = RmaHeader::new(RmaKind::Lock, self.w.id)
                        .with_flags(RmaFlags::LOCK_SHARED)
                        .with_ids(WIN_LOCK_ID, 0);
                    emit(self.out, rank, hdr, &[]);
                    self.w.outstanding_locks += 1;
                    self.w.counters.lock_packets += 1;
                }
                CursorKind::Unlock => {
                    let hdr = RmaHeader::new(RmaKind::Unlock, self.w.id)
                        .with_flags(RmaFlags::UNLOCK | RmaFlags::UNLOCK_NO_ACK)
                        .with_ids(NO_OP_ID, 0);
                    emit(self.out, rank, hdr, &[]);
                    self.w.counters.unlock_packets += 1;
                }
            }
            break;
        }
        self.set_cursor((next < n).then_some(Cursor {
            kind: cur.kind,
            next,
        }));
    }

    /// Sets the window's lazy broadcast, keeping the engine's count.
    fn set_cursor(&mut self, cur: Option<Cursor>) {
        match (self.w.cursor.is_some(), cur.is_some()) {
            (false, true) => *self.cursors += 1,
            (true, false) => *self.cursors = self.cursors.saturating_sub(1),
            _ => {}
        }
        self.w.cursor = cur;
    }
}
