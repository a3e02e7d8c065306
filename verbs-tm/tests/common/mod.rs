//! A receiver device with a TM-SRQ and a sender device, connected by one RC
//! QP pair (or more), on one `soft::Sim` fabric.

#![allow(dead_code, clippy::unwrap_used)]

use tm_proto::{Opcode, Rvh, Tmh};
use verbs_tm::soft::{Sim, SoftConfig};
use verbs_tm::verbs::*;
use verbs_tm::{Mr, Provider};

pub const SRQ_BUF: usize = 256;
pub const SRQ_WQES: usize = 40;

pub struct Rig {
    pub rx: Sim,
    pub tx: Sim,
    pub cq: CqId,
    pub srq: SrqId,
    pub tx_cq: CqId,
    pub tx_srq: SrqId,
    /// Receiver QPs (attached to the TM-SRQ) and their sender peers.
    pub rqps: Vec<QpId>,
    pub sqps: Vec<QpId>,
    pub srq_mr: Mr,
    pub tx_srq_mr: Mr,
    pub next_wr: u64,
}

pub fn tm_cq_attr(cqe: u32) -> CqInitAttr {
    CqInitAttr {
        cqe,
        wc_flags: IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_TM_INFO,
        extended: true,
    }
}

impl Rig {
    pub fn new(cfg: SoftConfig) -> Self {
        Self::with_qps(cfg, 1, SRQ_WQES)
    }

    pub fn with_qps(cfg: SoftConfig, nqp: usize, wqes: usize) -> Self {
        let mut rx = Sim::new(cfg);
        let mut tx = rx.add_device(SoftConfig::small());
        let cq = rx.create_cq(&tm_cq_attr(4096)).unwrap();
        let tags = cfg.caps.tm.max_num_tags;
        let ops = cfg.caps.tm.max_ops;
        let mut attr = SrqInitAttr::tm(cq, 1024, tags, ops);
        let srq = rx.create_srq(&mut attr).unwrap();
        let tx_cq = tx.create_cq(&tm_cq_attr(4096)).unwrap();
        let mut battr = SrqInitAttr {
            comp_mask: IBV_SRQ_INIT_ATTR_PD,
            ..SrqInitAttr::tm(tx_cq, 1024, 1, 1)
        };
        let tx_srq = tx.create_srq(&mut battr).unwrap();
        let mut rqps = Vec::new();
        let mut sqps = Vec::new();
        for _ in 0..nqp {
            let r = rx
                .create_qp(&QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    srq: Some(srq),
                    max_send_wr: 64,
                    max_send_sge: 1,
                })
                .unwrap();
            let s = tx
                .create_qp(&QpInitAttr {
                    send_cq: tx_cq,
                    recv_cq: tx_cq,
                    srq: Some(tx_srq),
                    max_send_wr: 64,
                    max_send_sge: 1,
                })
                .unwrap();
            let ra = rx.local_address(r).unwrap();
            let sa = tx.local_address(s).unwrap();
            rx.connect(r, &sa).unwrap();
            tx.connect(s, &ra).unwrap();
            rqps.push(r);
            sqps.push(s);
        }
        let srq_mr = rx
            .reg_mr(vec![0; SRQ_BUF * wqes.max(1)], IBV_ACCESS_LOCAL_WRITE)
            .unwrap();
        let tx_srq_mr = tx
            .reg_mr(vec![0; SRQ_BUF * 8], IBV_ACCESS_LOCAL_WRITE)
            .unwrap();
        let mut rig = Rig {
            rx,
            tx,
            cq,
            srq,
            tx_cq,
            tx_srq,
            rqps,
            sqps,
            srq_mr,
            tx_srq_mr,
            next_wr: 1000,
        };
        for i in 0..wqes {
            rig.post_srq_buf(i);
        }
        for i in 0..8 {
            let sge = rig.tx_srq_mr.sge(i * SRQ_BUF, SRQ_BUF).unwrap();
            rig.tx
                .post_srq_recv(
                    rig.tx_srq,
                    &RecvWr {
                        wr_id: 9000 + i as u64,
                        sg_list: &[sge],
                    },
                )
                .unwrap();
        }
        rig
    }

    /// Posts untagged buffer `i` (wr_id = i).
    pub fn post_srq_buf(&mut self, i: usize) {
        let sge = self.srq_mr.sge(i * SRQ_BUF, SRQ_BUF).unwrap();
        self.rx
            .post_srq_recv(
                self.srq,
                &RecvWr {
                    wr_id: i as u64,
                    sg_list: &[sge],
                },
            )
            .unwrap();
    }

    /// Bytes of untagged buffer `i`.
    pub fn srq_bytes(&self, i: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.rx
            .mr_read(&self.srq_mr, i as usize * SRQ_BUF, &mut v)
            .unwrap();
        v
    }

    pub fn wr(&mut self) -> u64 {
        self.next_wr += 1;
        self.next_wr
    }

    /// A tagged buffer of `len` bytes.
    pub fn buffer(&mut self, len: usize) -> Mr {
        self.rx
            .reg_mr(vec![0; len], IBV_ACCESS_LOCAL_WRITE)
            .unwrap()
    }

    /// Posts one op; returns the handle (for ADD).
    pub fn post_op(&mut self, mut wr: OpsWr<'_>) -> Result<u32, verbs_tm::Error> {
        let mut wrs = [wr];
        self.rx.post_srq_ops(self.srq, &mut wrs)?;
        wr = wrs[0];
        Ok(wr.handle)
    }

    /// Signaled ADD with an optional TM_SYNC count.
    pub fn add(
        &mut self,
        buf: &Mr,
        recv_wr_id: u64,
        tag: u64,
        mask: u64,
        count: Option<u16>,
    ) -> (u64, u32) {
        let wr_id = self.wr();
        let sge = [buf.sge(0, buf.len()).unwrap()];
        let mut op = OpsWr::add(
            wr_id,
            count.unwrap_or(0),
            TmAdd {
                recv_wr_id,
                sg_list: &sge,
                tag,
                mask,
            },
        );
        if count.is_none() {
            op.flags &= !IBV_OPS_TM_SYNC;
        }
        let h = self.post_op(op).unwrap();
        (wr_id, h)
    }

    pub fn del(&mut self, handle: u32, count: Option<u16>, signaled: bool) -> u64 {
        let wr_id = self.wr();
        let mut op = OpsWr::del(wr_id, count.unwrap_or(0), handle);
        if count.is_none() {
            op.flags &= !IBV_OPS_TM_SYNC;
        }
        if !signaled {
            op.flags &= !IBV_OPS_SIGNALED;
        }
        self.post_op(op).unwrap();
        wr_id
    }

    pub fn sync(&mut self, count: u16, signaled: bool) -> u64 {
        let wr_id = self.wr();
        let mut op = OpsWr::sync(wr_id, count);
        if !signaled {
            op.flags &= !IBV_OPS_SIGNALED;
        }
        self.post_op(op).unwrap();
        wr_id
    }

    pub fn exec(&self, n: usize) -> usize {
        self.rx.exec_ops(self.srq, n)
    }

    /// Sends raw bytes from the sender on QP pair `q` (SEND or SEND_WITH_IMM).
    pub fn send_raw(&mut self, q: usize, bytes: &[u8], imm: Option<u32>) {
        let mr = self
            .tx
            .reg_mr(bytes.to_vec(), IBV_ACCESS_LOCAL_WRITE)
            .unwrap();
        let sge = [mr.sge(0, bytes.len()).unwrap()];
        self.tx
            .post_send(
                self.sqps[q],
                &SendWr {
                    wr_id: 0,
                    opcode: if imm.is_some() {
                        WrOpcode::SEND_WITH_IMM
                    } else {
                        WrOpcode::SEND
                    },
                    send_flags: 0,
                    sg_list: &sge,
                    imm_data: imm.unwrap_or(0),
                    remote_addr: 0,
                    rkey: 0,
                },
            )
            .unwrap();
        // The soft device copies at post: the region can go.
        self.tx.dereg_mr(mr).unwrap();
    }

    pub fn send_eager(&mut self, q: usize, tag: u64, payload: &[u8]) {
        self.send_eager_imm(q, tag, payload, None)
    }

    pub fn send_eager_imm(&mut self, q: usize, tag: u64, payload: &[u8], imm: Option<u32>) {
        let mut m = Tmh::new(Opcode::Eager, 0x55, tag).to_bytes().to_vec();
        m.extend_from_slice(payload);
        self.send_raw(q, &m, imm);
    }

    /// A rendezvous request for `data`, registered at the sender for READ;
    /// returns the sender's region and the request bytes.
    pub fn send_rndv(&mut self, q: usize, tag: u64, app_ctx: u32, data: &[u8]) -> (Mr, Vec<u8>) {
        let mr = self
            .tx
            .reg_mr(
                data.to_vec(),
                IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ,
            )
            .unwrap();
        let rvh = Rvh {
            va: mr.addr(),
            rkey: mr.rkey(),
            len: data.len() as u32,
        };
        let mut m = Tmh::new(Opcode::Rndv, app_ctx, tag).to_bytes().to_vec();
        m.extend_from_slice(&rvh.to_bytes());
        self.send_raw(q, &m, None);
        (mr, m)
    }

    pub fn deliver(&self, n: usize) -> usize {
        self.rx.deliver(self.rqps[0], n)
    }

    pub fn deliver_on(&self, q: usize, n: usize) -> usize {
        self.rx.deliver(self.rqps[q], n)
    }

    pub fn poll(&mut self) -> Vec<Wc> {
        let mut v = Vec::new();
        self.rx.poll_cq(self.cq, &mut v, usize::MAX).unwrap();
        v
    }

    pub fn poll_tx(&mut self) -> Vec<Wc> {
        let mut v = Vec::new();
        self.tx.poll_cq(self.tx_cq, &mut v, usize::MAX).unwrap();
        v
    }

    pub fn read_buf(&self, mr: &Mr, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.rx.mr_read(mr, 0, &mut v).unwrap();
        v
    }
}

pub fn tmh_bytes(op: Opcode, app_ctx: u32, tag: u64) -> Vec<u8> {
    Tmh::new(op, app_ctx, tag).to_bytes().to_vec()
}
