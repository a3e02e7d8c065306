//! The sender side: eager sends, rendezvous requests, FINs, and the queue of
//! sends waiting for a send buffer.

use tm_match::Envelope;
use tm_proto::{Opcode, Rvh, Tmh};
use tracing::info;

use super::{Endpoint, Finished, Msg, Outgoing, SendMode, SendReq, SendStart, Status};
use crate::verbs::{
    errno, QpId, QpState, SendWr, Sge, WrOpcode, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_READ,
    IBV_SEND_SIGNALED,
};
use crate::{Error, Provider, Result};

impl<P: Provider> Endpoint<P> {
    /// Starts a send of `data` (contiguous, or packed by the caller) to
    /// `dest`. The data comes back in the send's [`Finished`]. A standard
    /// send up to the eager limit completes at once.
    pub fn isend(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart> {
        let t = self.encode_tag(tag, context)?;
        let id = self.new_id();
        if dest == self.rank {
            return self.send_self(id, tag, context, data, mode);
        }
        self.check_peer(dest)?;
        if mode == SendMode::Standard && data.len() <= self.eager_limit(dest) {
            self.counters.eager_sends += 1;
            self.queue_out(Outgoing::Eager {
                id,
                dest,
                tag: t,
                data,
            })?;
        } else {
            let len = u32::try_from(data.len()).map_err(|_| Error::TooLarge {
                len: data.len(),
                max: u32::MAX as usize,
            })?;
            self.counters.rndv_sends += 1;
            let (mr, data, va, rkey) = if len == 0 {
                // A zero-length READ checks no key (InfiniBand).
                (None, data, 0, 0)
            } else {
                let mr = self
                    .p
                    .reg_mr(data, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
                    .map_err(|(e, _)| e)?;
                let (va, rkey) = (mr.addr(), mr.rkey());
                (Some(mr), Vec::new(), va, rkey)
            };
            let ctx = self.next_ctx;
            self.next_ctx = self.next_ctx.wrapping_add(1).max(1);
            self.by_ctx.insert(ctx, id);
            self.sends.insert(
                id,
                SendReq {
                    dest,
                    mr,
                    data,
                    ctx: Some(ctx),
                },
            );
            self.queue_out(Outgoing::Rndv {
                id,
                dest,
                tag: t,
                ctx,
                rvh: Rvh { va, rkey, len },
            })?;
        }
        Ok(match self.take_done(id) {
            Some(f) => SendStart::Done(f.buf),
            None => SendStart::Pending(id),
        })
    }

    /// Takes request `id`'s completion back if it is the last one queued
    /// (an operation that finished inside the call that started it).
    pub(super) fn take_done(&mut self, id: u64) -> Option<Finished> {
        if self.done.last().is_some_and(|f| f.id == id) {
            self.done.pop()
        } else {
            None
        }
    }

    /// A standard send of borrowed `data` if it can go at once (eager size,
    /// nothing waiting before it, the QP ready, and the provider takes it
    /// inline or a send buffer is free); `false`: nothing was sent.
    ///
    /// The TM header and the payload are first offered to the provider as
    /// an inline SEND ([`Provider::post_send_inline`]: one call, no send
    /// buffer, no completion); a provider that declines gets them copied
    /// into a send buffer and posted.
    pub fn send_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<bool> {
        // One look at the peer (no self sends here: this rank has no QP).
        let Some(p) = self.peers.get(&dest) else {
            return Ok(false);
        };
        let (qp, connected) = (p.qp, p.connected);
        if data.len() > p.eager_max.min(self.cfg.eager_max) || !self.pending.is_empty() {
            return Ok(false);
        }
        let t = self.encode_tag(tag, context)?;
        if connected {
            let tmh = Tmh::new(Opcode::Eager, 0, t).to_bytes();
            if self.p.post_send_inline(qp, &[&tmh, data])? {
                self.counters.eager_sends += 1;
                self.counters.inline_sends += 1;
                return Ok(true);
            }
        }
        if self.free_slots.is_empty() || !self.is_connected(dest) {
            return Ok(false);
        }
        let Some(slot) = self.free_slots.pop() else {
            return Ok(false);
        };
        let Some(qp) = self.peers.get(&dest).map(|p| p.qp) else {
            return Ok(false);
        };
        let off = slot as usize * self.stride;
        let sent = match self.send_mr.as_ref() {
            Some(mr) => {
                self.p
                    .mr_write(mr, off, &Tmh::new(Opcode::Eager, 0, t).to_bytes())?;
                self.p.mr_write(mr, off + Tmh::LEN, data)?;
                match mr.sge(off, Tmh::LEN + data.len()) {
                    Some(sge) => self.post_slot(qp, slot, sge)?,
                    None => false,
                }
            }
            None => false,
        };
        if sent {
            self.counters.eager_sends += 1;
        } else {
            self.free_slots.push(slot);
        }
        Ok(sent)
    }

    /// Posts a SEND of send buffer `slot`; `false` if the send queue is full.
    fn post_slot(&mut self, qp: QpId, slot: u32, sge: Sge) -> Result<bool> {
        let wr = SendWr {
            wr_id: u64::from(slot),
            opcode: WrOpcode::SEND,
            send_flags: IBV_SEND_SIGNALED,
            sg_list: &[sge],
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
        };
        match self.p.post_send(qp, &wr) {
            Ok(()) => Ok(true),
            Err(e) if e.errno() == Some(errno::ENOMEM) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Starts a send of borrowed data: `None` if it completed in the call,
    /// else the pending request's id (the data was copied: the caller may
    /// reuse it at once; the completion hands the copy back, which
    /// [`recycle`](Self::recycle) takes for the next one).
    pub fn send_borrowed(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Option<u64>> {
        if mode == SendMode::Standard && self.send_now(dest, tag, context, data)? {
            return Ok(None);
        }
        let copy = self.spare.copy_of(data);
        Ok(match self.isend(dest, tag, context, copy, mode)? {
            SendStart::Done(b) => {
                self.spare.put(b);
                None
            }
            SendStart::Pending(id) => Some(id),
        })
    }

    fn send_self(
        &mut self,
        id: u64,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart> {
        self.counters.self_sends += 1;
        let env = Envelope {
            context_id: context,
            source: self.rank,
            tag,
        };
        let sync_send = (mode == SendMode::Synchronous).then_some(id);
        if sync_send.is_some() {
            self.sends.insert(
                id,
                SendReq {
                    dest: self.rank,
                    mr: None,
                    data: Vec::new(),
                    ctx: None,
                },
            );
        }
        self.arrive_local(env, Msg::Local { data, sync_send })?;
        self.pump()?;
        Ok(match sync_send {
            None => SendStart::Done(Vec::new()),
            Some(_) => match self.sends.contains_key(&id) {
                true => SendStart::Pending(id),
                false => match self.done.iter().position(|f| f.id == id) {
                    Some(i) => SendStart::Done(self.done.remove(i).buf),
                    None => SendStart::Pending(id),
                },
            },
        })
    }

    pub(super) fn check_peer(&self, dest: u32) -> Result<()> {
        if let Some(e) = self.dead.get(&dest) {
            return Err(e.clone());
        }
        match self.peers.get(&dest) {
            Some(p) if p.connected => Ok(()),
            _ => Err(Error::Unreachable {
                rank: dest,
                reason: "not connected through this endpoint",
            }),
        }
    }

    pub(super) fn queue_out(&mut self, o: Outgoing) -> Result<()> {
        if self.pending.is_empty() {
            if let Some(o) = self.try_post(o)? {
                self.counters.sends_held += 1;
                self.pending.push_back(o);
            }
        } else {
            self.counters.sends_held += 1;
            self.pending.push_back(o);
        }
        Ok(())
    }

    /// Posts pending sends in order while send buffers last.
    pub(super) fn flush_pending(&mut self) -> Result<()> {
        while let Some(o) = self.pending.pop_front() {
            if let Some(o) = self.try_post(o)? {
                self.pending.push_front(o);
                break;
            }
        }
        Ok(())
    }

    /// Posts one outgoing message; hands it back if no send buffer is free
    /// or its QP is not ready.
    fn try_post(&mut self, o: Outgoing) -> Result<Option<Outgoing>> {
        let dest = match &o {
            Outgoing::Eager { dest, .. }
            | Outgoing::Rndv { dest, .. }
            | Outgoing::Fin { dest, .. }
            | Outgoing::Control { dest, .. } => *dest,
        };
        if let Some(e) = self.dead.get(&dest).cloned() {
            self.fail_outgoing(o, e);
            return Ok(None);
        }
        let Some(peer) = self.peers.get(&dest) else {
            return Err(Error::Unreachable {
                rank: dest,
                reason: "no QP",
            });
        };
        let qp = peer.qp;
        match self.p.qp_state(qp) {
            QpState::Ready => {}
            QpState::Connecting | QpState::Reset => return Ok(Some(o)),
            QpState::Closed => {
                self.fail_outgoing(o, Error::PeerClosed { peer: dest });
                return Ok(None);
            }
            QpState::Error(reason) => {
                let e = Error::PeerDied { peer: dest, reason };
                self.peer_failed(dest, e.clone());
                self.fail_outgoing(o, e);
                return Ok(None);
            }
        }
        let Some(slot) = self.free_slots.pop() else {
            return Ok(Some(o));
        };
        let off = slot as usize * self.stride;
        let Some(mr) = self.send_mr.as_ref() else {
            return Err(Error::verbs("ibv_post_send", errno::EINVAL));
        };
        let len = match &o {
            Outgoing::Eager { tag, data, .. } => {
                self.p
                    .mr_write(mr, off, &Tmh::new(Opcode::Eager, 0, *tag).to_bytes())?;
                self.p.mr_write(mr, off + Tmh::LEN, data)?;
                Tmh::LEN + data.len()
            }
            Outgoing::Rndv { tag, ctx, rvh, .. } => {
                let mut b = [0u8; Tmh::LEN + Rvh::LEN];
                b[..Tmh::LEN].copy_from_slice(&Tmh::new(Opcode::Rndv, *ctx, *tag).to_bytes());
                b[Tmh::LEN..].copy_from_slice(&rvh.to_bytes());
                self.p.mr_write(mr, off, &b)?;
                b.len()
            }
            Outgoing::Fin { bytes, .. } => {
                self.p.mr_write(mr, off, bytes)?;
                bytes.len()
            }
            Outgoing::Control { bytes, .. } => {
                self.p.mr_write(mr, off, bytes)?;
                bytes.len()
            }
        };
        let Some(sge) = mr.sge(off, len) else {
            return Err(Error::verbs("ibv_post_send", errno::EINVAL));
        };
        match self.post_slot(qp, slot, sge) {
            Ok(true) => {}
            Ok(false) => {
                self.free_slots.push(slot);
                return Ok(Some(o));
            }
            Err(e) => {
                self.free_slots.push(slot);
                return Err(e);
            }
        }
        if let Outgoing::Eager { id, data, .. } = o {
            // Copied into the send buffer: the user's buffer is free.
            self.done.push(Finished {
                id,
                send: true,
                result: Ok(Status::default()),
                buf: data,
            });
        }
        Ok(None)
    }

    fn fail_outgoing(&mut self, o: Outgoing, e: Error) {
        match o {
            Outgoing::Eager { id, data, .. } => self.done.push(Finished {
                id,
                send: true,
                result: Err(e),
                buf: data,
            }),
            Outgoing::Rndv { id, .. } => self.fail_send(id, e),
            Outgoing::Fin { .. } | Outgoing::Control { .. } => {}
        }
    }

    pub(super) fn fail_send(&mut self, id: u64, e: Error) {
        if let Some(s) = self.sends.remove(&id) {
            if let Some(c) = s.ctx {
                self.by_ctx.remove(&c);
            }
            let buf = match s.mr {
                Some(mr) => self.p.dereg_mr(mr).unwrap_or_default(),
                None => s.data,
            };
            self.done.push(Finished {
                id,
                send: true,
                result: Err(e),
                buf,
            });
        }
    }

    /// Marks `peer` dead: its pending sends fail, and so do software READs
    /// from it and the receives waiting for them.
    pub(super) fn peer_failed(&mut self, peer: u32, e: Error) {
        if self.dead.contains_key(&peer) {
            return;
        }
        info!(peer, error = %e, "verbs-tm: peer lost");
        self.dead.insert(peer, e.clone());
        let ids: Vec<u64> = self
            .sends
            .iter()
            .filter(|(_, s)| s.dest == peer)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.fail_send(id, e.clone());
        }
    }
}
