//! Completions: the device's work completions and the model's completions.

use tm_match::offload::{Completion, EngineEvent};
use tm_match::{Envelope, RecvId};
use tm_proto::{Limits, Message, Opcode, Rvh, Tmh};
use tracing::debug;

use super::{DataState, Endpoint, EngineRecv, Msg, OpRec, RecvBuf, Stalled, Status, SRQ_WR};
use crate::verbs::{
    RecvWr, Wc, WcOpcode, WcStatus, IBV_WC_TM_DATA_VALID, IBV_WC_TM_MATCH, IBV_WC_TM_SYNC_REQ,
};
use crate::{Error, Provider, Result};

impl<P: Provider> Endpoint<P> {
    fn unexplained(wc: &Wc, reason: &'static str) -> Error {
        Error::Completion {
            opcode: wc.opcode,
            status: wc.status,
            wr_id: wc.wr_id,
            reason,
        }
    }

    fn peer_of(&self, qpn: u32) -> Option<u32> {
        self.by_qpn.get(&qpn).copied()
    }

    fn lost(&mut self, wc: &Wc, what: &str) -> Error {
        let peer = self.peer_of(wc.qp_num).unwrap_or(u32::MAX);
        let reason = match self.peers.get(&peer).map(|p| self.p.qp_state(p.qp)) {
            Some(crate::verbs::QpState::Error(r)) => r,
            _ => format!("{what} failed with {:?}", wc.status),
        };
        let e = Error::PeerDied { peer, reason };
        if peer != u32::MAX {
            self.peer_failed(peer, e.clone());
        }
        e
    }

    /// Handles one work completion.
    pub(super) fn on_wc(&mut self, wc: Wc) -> Result<()> {
        match wc.opcode {
            WcOpcode::TM_ADD | WcOpcode::TM_DEL | WcOpcode::TM_SYNC => self.on_op(&wc),
            WcOpcode::TM_RECV if wc.has(IBV_WC_TM_MATCH) => self.on_match(&wc),
            // An untagged buffer's: unexpected. Otherwise a tagged buffer's
            // second completion (DATA_VALID, or an error of the device's
            // rendezvous READ).
            WcOpcode::TM_RECV if wc.wr_id & (SRQ_WR | 1 << 63) == SRQ_WR => self.on_unexpected(&wc),
            WcOpcode::TM_RECV => self.on_data(&wc),
            WcOpcode::TM_NO_TAG => self.on_no_tag(&wc),
            WcOpcode::SEND => {
                if wc.wr_id < u64::from(self.cfg.send_bufs.max(1)) {
                    self.free_slots.push(wc.wr_id as u32);
                }
                if wc.status != WcStatus::SUCCESS {
                    self.lost(&wc, "SEND");
                }
                Ok(())
            }
            WcOpcode::RDMA_READ => {
                let Some(ctx) = self.reads.remove(&wc.wr_id) else {
                    return Err(Self::unexplained(&wc, "READ completion for no READ"));
                };
                if wc.status == WcStatus::SUCCESS {
                    self.read_done(ctx, Ok(()))
                } else {
                    let e = self.lost(&wc, "RDMA READ");
                    self.read_done(ctx, Err(e))
                }
            }
            _ => Err(Self::unexplained(&wc, "opcode the driver never asks for")),
        }
    }

    fn on_op(&mut self, wc: &Wc) -> Result<()> {
        let Some(rec) = self.ops.remove(&wc.wr_id) else {
            return Err(Self::unexplained(
                wc,
                "list operation the driver did not post",
            ));
        };
        self.cmd_outstanding = self.cmd_outstanding.saturating_sub(1);
        let sync_request = wc.has(IBV_WC_TM_SYNC_REQ);
        match (rec, wc.status) {
            (OpRec::Add(handle), WcStatus::SUCCESS) => {
                self.off.handle_event(EngineEvent::Added {
                    handle,
                    sync_request,
                })?
            }
            (OpRec::Del(handle), WcStatus::SUCCESS) => {
                self.handles.remove(&handle);
                self.off.handle_event(EngineEvent::Deleted {
                    handle,
                    sync_request,
                })?;
            }
            (OpRec::Del(handle), WcStatus::TM_ERR) => {
                self.handles.remove(&handle);
                debug!(?handle, "verbs-tm: DEL lost the race with a consumption");
                self.off
                    .handle_event(EngineEvent::DeleteFailed { handle })?;
            }
            (OpRec::Sync, WcStatus::SUCCESS) => {}
            _ => return Err(Self::unexplained(wc, "list operation failed")),
        }
        Ok(())
    }

    /// A `TM_RECV` with `MATCH`: the device consumed a tagged buffer.
    fn on_match(&mut self, wc: &Wc) -> Result<()> {
        let rid = RecvId::from_bits(wc.wr_id);
        let Some(req) = self.rid_req.get(&rid).copied() else {
            return Err(Self::unexplained(
                wc,
                "match of a tag the driver does not hold",
            ));
        };
        let cap = self.recvs.get(&req).map_or(0, |r| r.cap);
        let data = match wc.status {
            WcStatus::SUCCESS if wc.has(IBV_WC_TM_DATA_VALID) => {
                let n = wc.byte_len as usize;
                DataState::Ready(Ok((n.min(cap), n)))
            }
            WcStatus::SUCCESS => DataState::Waiting,
            WcStatus::LOC_LEN_ERR => {
                // The message did not fit: `cap` bytes were written. mlx5
                // does not document `byte_len` here; take it if it says
                // more, else one more than the buffer.
                let n = (wc.byte_len as usize).max(cap + 1);
                DataState::Ready(Ok((cap, n)))
            }
            WcStatus::TM_RNDV_INCOMPLETE => DataState::Reading,
            _ => DataState::Ready(Err(self.lost(wc, "tagged receive"))),
        };
        let reading = matches!(data, DataState::Reading);
        // The device gave the slot up: no DEL may name it any more.
        self.handles.remove(&rid);
        if self.held.iter().any(
            |a| matches!(a, tm_match::offload::Action::Delete { handle, .. } if *handle == rid),
        ) {
            self.consumed.insert(rid);
        }
        self.engine.insert(
            rid,
            EngineRecv {
                data,
                env: None,
                req,
            },
        );
        if reading {
            self.rndv_incomplete(wc, rid, req, cap)?;
        }
        self.off.handle_event(EngineEvent::Matched {
            handle: rid,
            tag: wc.tm_info.tag,
            msg: Msg::Engine,
        })?;
        Ok(())
    }

    /// `IBV_WC_TM_RNDV_INCOMPLETE`: the request's headers are in the tagged
    /// buffer; READ what fits, then FIN.
    fn rndv_incomplete(&mut self, wc: &Wc, rid: RecvId, req: u64, cap: usize) -> Result<()> {
        let mut hdr = [0u8; Tmh::LEN + Rvh::LEN];
        match self.recvs.get(&req).map(|r| &r.buf) {
            Some(RecvBuf::Registered(mr)) if mr.len() >= hdr.len() => {
                self.p.mr_read(mr, 0, &mut hdr)?
            }
            _ => {
                return Err(Self::unexplained(
                    wc,
                    "RNDV_INCOMPLETE into a buffer without room for its headers",
                ))
            }
        }
        let tmh = Tmh::decode(&hdr)?;
        let rvh = Rvh::decode(&hdr[Tmh::LEN..])?;
        let Some(peer) = self.peer_of(wc.qp_num) else {
            return Err(Self::unexplained(wc, "rendezvous on an unknown QP"));
        };
        self.counters.rndv_incomplete += 1;
        self.counters.sw_reads += 1;
        let env = Envelope {
            context_id: 0,
            source: peer,
            tag: 0,
        };
        let n = (rvh.len as usize).min(cap);
        self.start_read(req, Some(rid), peer, env, tmh, rvh, n)
    }

    /// The second completion of a device-matched message: its data.
    fn on_data(&mut self, wc: &Wc) -> Result<()> {
        let rid = RecvId::from_bits(wc.wr_id);
        let result = if wc.status == WcStatus::SUCCESS {
            let n = wc.byte_len as usize;
            Ok((n, n))
        } else {
            Err(self.lost(wc, "rendezvous READ by the device"))
        };
        let Some(e) = self.engine.get_mut(&rid) else {
            return Err(Self::unexplained(
                wc,
                "data for a tag the driver does not hold",
            ));
        };
        if !matches!(e.data, DataState::Waiting) {
            return Err(Self::unexplained(wc, "second DATA_VALID"));
        }
        e.data = DataState::Ready(result);
        self.try_finish_engine(rid);
        Ok(())
    }

    /// Reads `len` bytes of untagged buffer `i` and posts it again.
    fn take_srq_buf(&mut self, wc: &Wc, skip: usize) -> Result<Vec<u8>> {
        let i = (wc.wr_id & !SRQ_WR) as usize;
        let len = wc.byte_len as usize;
        let Some(mr) = self.srq_mr.as_ref() else {
            return Err(Self::unexplained(wc, "no untagged buffers"));
        };
        if len > self.stride || i >= self.cfg.srq_wqes.max(1) as usize || len < skip {
            return Err(Self::unexplained(wc, "untagged completion out of range"));
        }
        let mut v = vec![0; len.saturating_sub(skip)];
        self.p.mr_read(mr, i * self.stride + skip, &mut v)?;
        let Some(sge) = mr.sge(i * self.stride, self.stride) else {
            return Err(Self::unexplained(wc, "untagged completion out of range"));
        };
        self.p.post_srq_recv(
            self.srq,
            &RecvWr {
                wr_id: SRQ_WR | i as u64,
                sg_list: &[sge],
            },
        )?;
        Ok(v)
    }

    /// A `TM_RECV` without `MATCH`: an unexpected eager message or
    /// rendezvous request, whole in an untagged buffer.
    fn on_unexpected(&mut self, wc: &Wc) -> Result<()> {
        let Some((tag, msg, sync)) = self.read_unexpected(wc)? else {
            return Ok(());
        };
        // An arrival waits (in order) while a shared post's proposal holds
        // the model's input (see `Endpoint::post_shared`). Device matches,
        // list-operation answers and data go on: an entry the device can
        // match never competes with a held message.
        if self.gate_open() {
            self.off.handle_event(EngineEvent::Unexpected {
                tag,
                msg,
                sync_request: sync,
            })?;
        } else {
            self.stalled
                .push_back(Stalled::Unexpected { tag, msg, sync });
        }
        Ok(())
    }

    /// Copies an unexpected message out of its untagged buffer (posted
    /// again): its tag, the message, and whether it asks for a sync.
    pub(super) fn read_unexpected(&mut self, wc: &Wc) -> Result<Option<(u64, Msg, bool)>> {
        if wc.status != WcStatus::SUCCESS {
            let e = self.lost(wc, "unexpected message");
            debug!(error = %e, "verbs-tm: unexpected message failed");
            return Ok(None);
        }
        let Some(peer) = self.peer_of(wc.qp_num) else {
            return Err(Self::unexplained(wc, "message on an unknown QP"));
        };
        let mut hdr = [0u8; Tmh::LEN];
        if (wc.byte_len as usize) < Tmh::LEN {
            return Err(Self::unexplained(wc, "tagged message shorter than a TMH"));
        }
        if let Some(mr) = self.srq_mr.as_ref() {
            self.p
                .mr_read(mr, (wc.wr_id & !SRQ_WR) as usize * self.stride, &mut hdr)?;
        }
        let tmh = Tmh::decode(&hdr)?;
        let msg = match tmh.opcode {
            Opcode::Eager => Msg::Eager(self.take_srq_buf(wc, Tmh::LEN)?),
            Opcode::Rndv => {
                let whole = self.take_srq_buf(wc, 0)?;
                let limits = Limits {
                    max_rndv_hdr_size: self.caps.tm.max_rndv_hdr_size as usize,
                };
                match Message::decode(&whole, limits)? {
                    Message::Rndv { tmh, rvh, .. } => Msg::Rndv { peer, tmh, rvh },
                    _ => {
                        return Err(Self::unexplained(
                            wc,
                            "rendezvous request that does not decode",
                        ))
                    }
                }
            }
            _ => return Err(Self::unexplained(wc, "untagged message reported as tagged")),
        };
        Ok(Some((tmh.tag, msg, wc.has(IBV_WC_TM_SYNC_REQ))))
    }

    /// A no-tag message: a FIN, or a control message.
    fn on_no_tag(&mut self, wc: &Wc) -> Result<()> {
        if wc.status != WcStatus::SUCCESS {
            self.lost(wc, "no-tag message");
            return Ok(());
        }
        let bytes = self.take_srq_buf(wc, 0)?;
        match Message::decode(&bytes, Limits::MLX5) {
            Ok(Message::Fin { tmh, .. }) => {
                let Some(id) = self.by_ctx.remove(&tmh.app_ctx) else {
                    debug!(ctx = tmh.app_ctx, "verbs-tm: FIN for no send");
                    return Ok(());
                };
                if let Some(s) = self.sends.remove(&id) {
                    let buf = match s.mr {
                        Some(mr) => self.p.dereg_mr(mr)?,
                        None => s.data,
                    };
                    self.done.push(super::Finished {
                        id,
                        send: true,
                        result: Ok(Status::default()),
                        buf,
                    });
                }
            }
            Ok(Message::NoTag { body }) => match tm_proto::Control::decode(body) {
                Ok(c) => {
                    let peer = self.peer_of(wc.qp_num).unwrap_or(u32::MAX);
                    self.on_control(peer, c)?;
                }
                Err(e) => debug!(%e, "verbs-tm: no-tag message ignored"),
            },
            other => debug!(?other, "verbs-tm: no-tag message ignored"),
        }
        Ok(())
    }

    /// Handles one completion of the matching model.
    pub(super) fn on_model_completion(&mut self, c: Completion<u64, Msg>) -> Result<()> {
        match c {
            Completion::Matched { id, recv, env, msg } if self.shared.contains_key(&recv) => {
                // A shared post would take it: hold it, and the model's
                // input behind it, until the owner commits or withdraws.
                let st = Status::of(&env, msg.len(), msg.len());
                if let Some(s) = self.shared.get_mut(&recv) {
                    s.rid = None;
                    s.proposed = Some((env, msg));
                }
                let _ = id;
                self.holding = Some(recv);
                self.proposals.push((recv, st));
            }
            Completion::Matched { id, recv, env, msg } => {
                self.rid_req.remove(&id);
                if let Some(r) = self.recvs.get_mut(&recv) {
                    r.rid = None;
                }
                match msg {
                    Msg::Engine => {
                        if let Some(e) = self.engine.get_mut(&id) {
                            e.env = Some(env);
                        }
                        self.try_finish_engine(id);
                    }
                    other => self.complete_from_msg(recv, env, other)?,
                }
            }
            Completion::Cancelled { recv, .. } if self.shared.remove(&recv).is_some() => {}
            Completion::Cancelled { id, recv } => {
                self.rid_req.remove(&id);
                if let Some(r) = self.recvs.get_mut(&recv) {
                    r.rid = None;
                }
                self.finish_cancelled(recv);
            }
            Completion::Queued { .. } | Completion::CancelFailed { .. } => {}
        }
        Ok(())
    }
}
