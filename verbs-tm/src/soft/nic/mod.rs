//! One software RDMA device: CQs, SRQs (basic and TM), RC QPs, memory
//! regions, and the "hardware" that executes list operations, processes
//! arriving messages, serves and completes RDMA READs.
//!
//! Sans-IO: frames for peers are queued in [`Nic::take_out`] and arriving
//! frames are handed to [`Nic::receive`]; a driver ([`super::Sim`] or
//! [`super::Live`]) moves them and decides when the device executes its
//! queued list operations ([`Nic::exec_ops`]) and when a multi-packet
//! message's data completes ([`Nic::complete_data`]).

use std::collections::{HashMap, VecDeque};

use tm_proto::{Opcode, Rvh, Tmh};
use tracing::{debug, warn};

use super::tm::{SlotCheck, Tm};
use super::SoftConfig;
use crate::verbs::{
    errno, CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, Sge,
    SrqId, SrqInitAttr, SrqType, TmInfo, Wc, WcOpcode, WcStatus, WrOpcode, IBV_ACCESS_LOCAL_WRITE,
    IBV_ACCESS_REMOTE_READ, IBV_SEND_SIGNALED, IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_PD,
    IBV_SRQ_INIT_ATTR_TM, IBV_SRQ_INIT_ATTR_TYPE, IBV_WC_EX_WITH_TM_INFO, IBV_WC_TM_DATA_VALID,
    IBV_WC_TM_MATCH, IBV_WC_TM_SYNC_REQ, IBV_WC_WITH_IMM,
};
use crate::{Error, Result};

mod frame;
mod mr;

pub(crate) use frame::{Frame, FrameRef, Outgoing, RegionRef, Rnr};

/// Most SGEs an untagged WQE may have.
const MAX_SRQ_SGE: u32 = 16;

#[derive(Debug, Clone, Copy)]
enum Effect {
    None,
    Op {
        srq: u32,
        seq: u64,
        release: Option<(u32, u32, i32)>,
    },
    Consume {
        srq: u32,
        handle: u32,
        gen: u32,
    },
    Unexpected {
        srq: u32,
    },
}

#[derive(Debug)]
struct CqState {
    cap: usize,
    extended: bool,
    tm_info: bool,
    q: VecDeque<(Wc, Effect)>,
    overrun: bool,
}

#[derive(Debug)]
struct RecvWqe {
    wr_id: u64,
    sges: Vec<Sge>,
}

#[derive(Debug)]
struct SrqState {
    cq: Option<CqId>,
    max_wr: u32,
    max_sge: u32,
    wqes: VecDeque<RecvWqe>,
    attached: u32,
    tm: Option<Tm>,
}

#[derive(Debug)]
struct QpEntry {
    qpn: u32,
    send_cq: CqId,
    recv_cq: CqId,
    srq: Option<SrqId>,
    max_send_wr: u32,
    reads_out: u32,
    state: QpState,
}

#[derive(Debug)]
struct MrEntry {
    buf: Vec<u8>,
    base: u64,
    access: u32,
    key: u32,
}

#[derive(Debug)]
enum PendingRead {
    /// A READ posted with `ibv_post_send`.
    Sw {
        qp: QpId,
        wr_id: u64,
        sges: Vec<Sge>,
        signaled: bool,
    },
    /// The device's own READ of a matched rendezvous request.
    Hw {
        qp: QpId,
        srq: u32,
        handle: u32,
        gen: u32,
        recv_wr_id: u64,
        sge: Option<Sge>,
        tmh: Tmh,
        rvh: Rvh,
    },
}

#[derive(Debug)]
struct LateData {
    cq: CqId,
    srq: u32,
    handle: u32,
    gen: u32,
    recv_wr_id: u64,
    byte_len: u32,
    imm: Option<u32>,
    qpn: u32,
}

/// Per-device counters of the software provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Tagged messages matched by the device.
    pub tm_matched: u64,
    /// Tagged messages delivered unexpected.
    pub tm_unexpected: u64,
    /// No-tag and FIN messages.
    pub no_tag: u64,
    /// Rendezvous requests the device completed itself (READ and FIN).
    pub hw_rndv: u64,
    /// Rendezvous requests reported `IBV_WC_TM_RNDV_INCOMPLETE`.
    pub rndv_incomplete: u64,
    /// READ requests served for peers.
    pub reads_served: u64,
    /// Arrivals refused for lack of an SRQ buffer (RNR).
    pub rnr: u64,
    /// List operations executed.
    pub ops_executed: u64,
    /// Payload buffers (SEND data, READ responses) taken from the pool of
    /// buffers the driver gave back.
    pub staging_reused: u64,
    /// Payload buffers allocated (or grown) because no pooled one fitted.
    pub staging_allocs: u64,
    /// Bytes of READ responses copied out of the responder's region into a
    /// payload buffer before they were sent: every response under
    /// `soft::Sim`; under `soft::Live` only the responses whose region was
    /// deregistered while they waited to be sent (the others are written
    /// to the socket from the region).
    pub read_bytes_staged: u64,
}

/// One software device. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct Nic {
    cfg: SoftConfig,
    cqs: Vec<Option<CqState>>,
    srqs: Vec<Option<SrqState>>,
    qps: Vec<Option<QpEntry>>,
    mrs: Vec<Option<MrEntry>>,
    free_mrs: Vec<u32>,
    keys: HashMap<u32, u32>,
    next_key: u32,
    reads: HashMap<u64, PendingRead>,
    next_read: u64,
    late: VecDeque<LateData>,
    out: VecDeque<(QpId, Outgoing)>,
    /// Successful READ responses are queued as references into the region
    /// ([`Outgoing::ReadResp`]) instead of copies.
    in_place_reads: bool,
    /// SENDs of at least this many bytes from one region are queued as
    /// references into it ([`Outgoing::Send`]); `usize::MAX`: never.
    in_place_sends: usize,
    misuse: Vec<String>,
    stats: NicStats,
    /// Payload buffers given back by the driver once written or copied,
    /// for the next READ response or SEND (no allocation, no page faults).
    pool: crate::pool::BufPool,
}

/// Where a READ response's data is: in the frame, or already written to
/// the requester's memory by the driver ([`Nic::read_target`]).
#[derive(Debug, Clone, Copy)]
enum ReadData<'a> {
    Frame(&'a [u8]),
    Placed(usize),
}

fn flags_imm(imm: Option<u32>) -> (u32, u32) {
    match imm {
        Some(v) => (IBV_WC_WITH_IMM, v),
        None => (0, 0),
    }
}

impl Nic {
    pub fn new(cfg: SoftConfig) -> Self {
        Nic {
            cfg,
            cqs: Vec::new(),
            srqs: Vec::new(),
            qps: Vec::new(),
            mrs: Vec::new(),
            free_mrs: Vec::new(),
            keys: HashMap::new(),
            next_key: 0x100,
            reads: HashMap::new(),
            next_read: 1,
            late: VecDeque::new(),
            out: VecDeque::new(),
            in_place_reads: false,
            in_place_sends: usize::MAX,
            misuse: Vec::new(),
            stats: NicStats::default(),
            pool: crate::pool::BufPool::new(mr::POOL_BUFS, mr::MIN_CAP, mr::POOL_MAX),
        }
    }

    pub fn caps(&self) -> DeviceCaps {
        self.cfg.caps
    }

    pub fn stats(&self) -> NicStats {
        self.stats
    }

    fn misuse(&mut self, what: String) {
        warn!(what = %what, "verbs-tm soft provider: misuse");
        self.misuse.push(what);
    }

    /// Misuse seen since the last call, oldest first.
    pub fn take_misuse(&mut self) -> Vec<String> {
        std::mem::take(&mut self.misuse)
    }

    /// Queues successful READ responses as references into the region
    /// (taken with [`Nic::take_out_ref`]), for a driver that writes them
    /// from there; off by default (every response a copy).
    pub fn set_in_place_reads(&mut self, on: bool) {
        self.in_place_reads = on;
    }

    /// Queues SENDs of at least `min` bytes from a single region as
    /// references into it (taken with [`Nic::take_out_ref`]), their
    /// completions held until the driver reports the payload sent
    /// ([`Nic::complete_send`]); off by default (`None`: every SEND is
    /// copied and completes when posted).
    pub fn set_in_place_sends(&mut self, min: Option<usize>) {
        self.in_place_sends = min.unwrap_or(usize::MAX);
    }

    /// Delivers the completion of an in-place SEND whose payload left (or
    /// was flushed: `status`), unless its QP or CQ is gone (a destroyed QP
    /// completes nothing more).
    pub fn complete_send(&mut self, qp: QpId, cq: CqId, mut wc: Wc, status: WcStatus) {
        if matches!(self.qps.get(qp.0 as usize), Some(Some(_)))
            && matches!(self.cqs.get(cq.0 as usize), Some(Some(_)))
        {
            wc.status = status;
            if status != WcStatus::SUCCESS {
                wc.byte_len = 0;
            }
            self.push_cqe(cq, wc, Effect::None);
        }
    }

    /// The next frame for a peer (a READ response referring to a region
    /// copied out of it).
    pub fn take_out(&mut self) -> Option<(QpId, Frame)> {
        let (qp, o) = self.out.pop_front()?;
        Some((qp, self.own(o)))
    }

    /// The next frame for a peer, as queued: READ responses may refer to
    /// their region ([`Nic::set_in_place_reads`]).
    pub fn take_out_ref(&mut self) -> Option<(QpId, Outgoing)> {
        self.out.pop_front()
    }

    /// An owned frame: a READ response's data copied out of its region
    /// (an access error if the region is gone).
    pub fn own(&mut self, o: Outgoing) -> Frame {
        match o {
            Outgoing::Frame(f) => f,
            Outgoing::Send { imm, data, done } => {
                // Copied: the SEND is complete.
                let bytes = self.region(&data).map(<[u8]>::to_vec);
                if let Some((cq, wc)) = done {
                    let ok = if bytes.is_some() {
                        WcStatus::SUCCESS
                    } else {
                        WcStatus::LOC_PROT_ERR
                    };
                    let qp = self.qp_by_num(wc.qp_num);
                    if let Some(qp) = qp {
                        self.complete_send(qp, cq, wc, ok);
                    }
                }
                Frame::Send {
                    imm,
                    data: bytes.unwrap_or_default(),
                }
            }
            Outgoing::ReadResp { id, data } => match self.staged(data) {
                Some(data) => Frame::ReadResp {
                    id,
                    status: WcStatus::SUCCESS,
                    data,
                },
                None => Frame::ReadResp {
                    id,
                    status: WcStatus::REM_ACCESS_ERR,
                    data: Vec::new(),
                },
            },
        }
    }

    fn push_out(&mut self, (qp, f): (QpId, Frame)) {
        self.out.push_back((qp, Outgoing::Frame(f)));
    }

    // ------------------------------------------------------------- CQs ---

    pub fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId> {
        if attr.cqe == 0 || attr.cqe > self.cfg.caps.max_cqe {
            return Err(Error::verbs("ibv_create_cq_ex", errno::EINVAL));
        }
        let id = self.cqs.len() as u32;
        self.cqs.push(Some(CqState {
            cap: attr.cqe as usize,
            extended: attr.extended,
            tm_info: attr.extended && attr.wc_flags & IBV_WC_EX_WITH_TM_INFO != 0,
            q: VecDeque::new(),
            overrun: false,
        }));
        Ok(CqId(id))
    }

    pub fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        let in_use = self.srqs.iter().flatten().any(|s| s.cq == Some(cq))
            || self
                .qps
                .iter()
                .flatten()
                .any(|q| q.send_cq == cq || q.recv_cq == cq);
        match self.cqs.get_mut(cq.0 as usize) {
            Some(slot @ Some(_)) if !in_use => {
                *slot = None;
                Ok(())
            }
            Some(Some(_)) => Err(Error::verbs("ibv_destroy_cq", errno::EBUSY)),
            _ => Err(Error::verbs("ibv_destroy_cq", errno::EINVAL)),
        }
    }

    fn push_cqe(&mut self, cq: CqId, wc: Wc, effect: Effect) {
        let Some(Some(c)) = self.cqs.get_mut(cq.0 as usize) else {
            self.misuse(format!("completion for destroyed CQ {}", cq.0));
            return;
        };
        if c.q.len() >= c.cap {
            c.overrun = true;
            let cap = c.cap;
            self.misuse(format!(
                "CQ {} overrun (capacity {cap}): the CQ is in error",
                cq.0
            ));
            return;
        }
        c.q.push_back((wc, effect));
    }

    /// Entries waiting in a CQ.
    pub fn cq_len(&self, cq: CqId) -> usize {
        match self.cqs.get(cq.0 as usize) {
            Some(Some(c)) => c.q.len(),
            _ => 0,
        }
    }

    pub fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        let mut n = 0;
        while n < max {
            let Some(Some(c)) = self.cqs.get_mut(cq.0 as usize) else {
                return Err(Error::verbs("ibv_start_poll", errno::EINVAL));
            };
            if c.overrun {
                return Err(Error::verbs("ibv_start_poll", errno::EIO));
            }
            let tm_info = c.tm_info;
            let Some((mut wc, effect)) = c.q.pop_front() else {
                break;
            };
            if !tm_info {
                wc.tm_info = TmInfo::default();
            }
            let r = match effect {
                Effect::None => Ok(()),
                Effect::Op { srq, seq, release } => match self.tm_mut(srq) {
                    Some(tm) => tm.poll_op(seq, release),
                    None => Ok(()),
                },
                Effect::Consume { srq, handle, gen } => match self.tm_mut(srq) {
                    Some(tm) => tm.poll_consume(handle, gen),
                    None => Ok(()),
                },
                Effect::Unexpected { srq } => {
                    if let Some(tm) = self.tm_mut(srq) {
                        if tm.poll_unexpected() {
                            wc.wc_flags |= IBV_WC_TM_SYNC_REQ;
                        }
                    }
                    Ok(())
                }
            };
            if let Err(what) = r {
                self.misuse(what);
                wc.status = WcStatus::GENERAL_ERR;
            }
            out.push(wc);
            n += 1;
        }
        Ok(n)
    }

    // ------------------------------------------------------------ SRQs ---

    fn tm_mut(&mut self, srq: u32) -> Option<&mut Tm> {
        self.srqs.get_mut(srq as usize)?.as_mut()?.tm.as_mut()
    }

    /// The TM state of an SRQ, for tests and diagnostics.
    pub(crate) fn tm(&self, srq: SrqId) -> Option<&Tm> {
        self.srqs.get(srq.0 as usize)?.as_ref()?.tm.as_ref()
    }

    pub fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId> {
        let call = "ibv_create_srq_ex";
        let inval = Err(Error::verbs(call, errno::EINVAL));
        let caps = self.cfg.caps;
        let typed = attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0;
        let tm = if !typed || attr.srq_type == SrqType::BASIC {
            // rdma-core's inline: without the TYPE bit (or with BASIC) a
            // basic SRQ, silently.
            false
        } else if attr.srq_type == SrqType::TM {
            true
        } else {
            return Err(Error::verbs(call, errno::EOPNOTSUPP));
        };
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 {
            return inval;
        }
        if attr.max_wr == 0 || attr.max_wr > caps.max_srq_wr {
            return inval;
        }
        if attr.max_sge == 0 || attr.max_sge > MAX_SRQ_SGE {
            return inval;
        }
        let mut cq = None;
        let mut tm_state = None;
        if tm {
            if attr.comp_mask & IBV_SRQ_INIT_ATTR_CQ == 0
                || attr.comp_mask & IBV_SRQ_INIT_ATTR_TM == 0
                || attr.tm_cap.max_num_tags == 0
            {
                return inval;
            }
            let Some(c) = attr.cq else { return inval };
            match self.cqs.get(c.0 as usize) {
                // "An extended CQ is required to read TM information from".
                Some(Some(state)) if state.extended => {}
                _ => return inval,
            }
            if caps.tm.flags & crate::verbs::IBV_TM_CAP_RC == 0 {
                return Err(Error::verbs(call, errno::EOPNOTSUPP));
            }
            if attr.tm_cap.max_num_tags > caps.tm.max_num_tags
                || attr.tm_cap.max_ops == 0
                || attr.tm_cap.max_ops > caps.tm.max_ops
            {
                return inval;
            }
            cq = Some(c);
            tm_state = Some(Tm::new(
                attr.tm_cap.max_num_tags,
                attr.tm_cap.max_ops,
                self.cfg.strict_activation,
            ));
        }
        let id = self.srqs.len() as u32;
        self.srqs.push(Some(SrqState {
            cq,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            wqes: VecDeque::new(),
            attached: 0,
            tm: tm_state,
        }));
        debug!(
            srq = id,
            tm,
            max_wr = attr.max_wr,
            "verbs-tm soft: SRQ created"
        );
        Ok(SrqId(id))
    }

    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        match self.srqs.get_mut(srq.0 as usize) {
            Some(Some(s)) if s.attached > 0 => Err(Error::verbs("ibv_destroy_srq", errno::EBUSY)),
            Some(slot @ Some(_)) => {
                *slot = None;
                Ok(())
            }
            _ => Err(Error::verbs("ibv_destroy_srq", errno::EINVAL)),
        }
    }

    fn check_sge(&self, sge: &Sge, need: u32) -> bool {
        let Some(&idx) = self.keys.get(&sge.lkey) else {
            return false;
        };
        let Some(Some(mr)) = self.mrs.get(idx as usize) else {
            return false;
        };
        if mr.access & need != need {
            return false;
        }
        let end = sge.addr.checked_add(u64::from(sge.length));
        sge.addr >= mr.base && end.is_some_and(|e| e <= mr.base + mr.buf.len() as u64)
    }

    pub fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()> {
        let max_sge = self.cfg.caps.tm.max_sge;
        let Some(Some(s)) = self.srqs.get(srq.0 as usize) else {
            return Err(Error::PostOps {
                bad_wr: 0,
                errno: errno::EINVAL,
            });
        };
        if s.tm.is_none() {
            return Err(Error::PostOps {
                bad_wr: 0,
                errno: errno::EINVAL,
            });
        }
        for (i, wr) in wrs.iter_mut().enumerate() {
            if wr.opcode == crate::verbs::OpsOpcode::TAG_ADD {
                if let Some(bad) = wr
                    .add
                    .sg_list
                    .iter()
                    .find(|g| !self.check_sge(g, IBV_ACCESS_LOCAL_WRITE))
                {
                    self.misuse(format!(
                        "tag ADD with a buffer outside any writable memory region: {bad:?}"
                    ));
                    return Err(Error::PostOps {
                        bad_wr: i,
                        errno: errno::EINVAL,
                    });
                }
            }
            let Some(tm) = self.tm_mut(srq.0) else {
                return Err(Error::PostOps {
                    bad_wr: i,
                    errno: errno::EINVAL,
                });
            };
            if let Err(e) = tm.post(wr, max_sge) {
                if e == errno::EINVAL && wr.opcode == crate::verbs::OpsOpcode::TAG_DEL {
                    let h = wr.handle;
                    self.misuse(format!(
                        "tag DEL of handle {h}, which is free or already being deleted"
                    ));
                }
                return Err(Error::PostOps {
                    bad_wr: i,
                    errno: e,
                });
            }
        }
        Ok(())
    }

    pub fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        let call = "ibv_post_srq_recv";
        let bad = wr
            .sg_list
            .iter()
            .any(|g| !self.check_sge(g, IBV_ACCESS_LOCAL_WRITE));
        let Some(Some(s)) = self.srqs.get_mut(srq.0 as usize) else {
            return Err(Error::verbs(call, errno::EINVAL));
        };
        if wr.sg_list.len() > s.max_sge as usize || bad {
            return Err(Error::verbs(call, errno::EINVAL));
        }
        if s.wqes.len() >= s.max_wr as usize {
            return Err(Error::verbs(call, errno::ENOMEM));
        }
        s.wqes.push_back(RecvWqe {
            wr_id: wr.wr_id,
            sges: wr.sg_list.to_vec(),
        });
        Ok(())
    }

    /// Untagged WQEs posted and not consumed.
    pub fn srq_wqes(&self, srq: SrqId) -> usize {
        match self.srqs.get(srq.0 as usize) {
            Some(Some(s)) => s.wqes.len(),
            _ => 0,
        }
    }

    /// Executes up to `n` queued list operations of a TM-SRQ (in post order);
    /// returns how many ran.
    pub fn exec_ops(&mut self, srq: SrqId, n: usize) -> usize {
        let Some(Some(s)) = self.srqs.get(srq.0 as usize) else {
            return 0;
        };
        let Some(cq) = s.cq else { return 0 };
        let mut done = 0;
        while done < n {
            let Some(tm) = self.tm_mut(srq.0) else { break };
            let Some(r) = tm.exec_one() else { break };
            done += 1;
            self.stats.ops_executed += 1;
            if let Some(d) = r {
                let wc = Wc {
                    wr_id: d.wr_id,
                    status: d.status,
                    opcode: d.opcode,
                    wc_flags: if d.sync_req { IBV_WC_TM_SYNC_REQ } else { 0 },
                    ..Wc::default()
                };
                self.push_cqe(
                    cq,
                    wc,
                    Effect::Op {
                        srq: srq.0,
                        seq: d.seq,
                        release: d.release,
                    },
                );
            }
        }
        done
    }

    /// Executes every queued list operation of every TM-SRQ (in post
    /// order within each); returns how many ran. Allocates nothing: a run
    /// of the device with no operation queued costs one look per SRQ.
    pub fn exec_all_ops(&mut self) -> usize {
        let mut done = 0;
        for i in 0..self.srqs.len() {
            let queued = self.srqs[i]
                .as_ref()
                .and_then(|s| s.tm.as_ref())
                .is_some_and(|tm| tm.queued_ops() > 0);
            if queued {
                done += self.exec_ops(SrqId(i as u32), usize::MAX);
            }
        }
        done
    }

    /// Every TM-SRQ of this device with queued operations.
    pub fn srqs_with_ops(&self) -> Vec<SrqId> {
        self.srqs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let tm = s.as_ref()?.tm.as_ref()?;
                (tm.queued_ops() > 0).then_some(SrqId(i as u32))
            })
            .collect()
    }

    // ------------------------------------------------------------- QPs ---

    pub fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId> {
        let call = "ibv_create_qp";
        let cq_ok = |c: CqId| matches!(self.cqs.get(c.0 as usize), Some(Some(_)));
        if !cq_ok(attr.send_cq) || !cq_ok(attr.recv_cq) {
            return Err(Error::verbs(call, errno::EINVAL));
        }
        if attr.max_send_wr > self.cfg.caps.max_qp_wr {
            return Err(Error::verbs(call, errno::EINVAL));
        }
        if let Some(srq) = attr.srq {
            match self.srqs.get_mut(srq.0 as usize) {
                Some(Some(s)) => s.attached += 1,
                _ => return Err(Error::verbs(call, errno::EINVAL)),
            }
        }
        let id = self.qps.len() as u32;
        self.qps.push(Some(QpEntry {
            qpn: id + 1,
            send_cq: attr.send_cq,
            recv_cq: attr.recv_cq,
            srq: attr.srq,
            max_send_wr: attr.max_send_wr.max(1),
            reads_out: 0,
            state: QpState::Reset,
        }));
        Ok(QpId(id))
    }

    pub fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let Some(Some(entry)) = self.qps.get(qp.0 as usize) else {
            return Err(Error::verbs("ibv_destroy_qp", errno::EINVAL));
        };
        if let Some(srq) = entry.srq {
            if let Some(Some(s)) = self.srqs.get_mut(srq.0 as usize) {
                s.attached = s.attached.saturating_sub(1);
            }
        }
        self.flush_reads(qp);
        self.qps[qp.0 as usize] = None;
        Ok(())
    }

    pub fn qp_num(&self, qp: QpId) -> Result<u32> {
        match self.qps.get(qp.0 as usize) {
            Some(Some(q)) => Ok(q.qpn),
            _ => Err(Error::verbs("ibv_query_qp", errno::EINVAL)),
        }
    }

    /// The QP with QP number `qpn`.
    pub fn qp_by_num(&self, qpn: u32) -> Option<QpId> {
        let i = qpn.checked_sub(1)?;
        matches!(self.qps.get(i as usize), Some(Some(_))).then_some(QpId(i))
    }

    pub fn qp_state(&self, qp: QpId) -> QpState {
        match self.qps.get(qp.0 as usize) {
            Some(Some(q)) => q.state.clone(),
            _ => QpState::Error("no such QP".into()),
        }
    }

    /// Whether QP `qp` is ready to send (RTS).
    pub fn qp_ready(&self, qp: QpId) -> bool {
        matches!(self.qps.get(qp.0 as usize), Some(Some(q)) if q.state == QpState::Ready)
    }

    /// Whether frames posted wait to be taken ([`Nic::take_out_ref`]).
    pub fn has_out(&self) -> bool {
        !self.out.is_empty()
    }

    /// Sets a QP's state (the driver's connection logic). Moving to an error
    /// state flushes its outstanding READs.
    pub fn set_qp_state(&mut self, qp: QpId, state: QpState) {
        let Some(Some(q)) = self.qps.get_mut(qp.0 as usize) else {
            return;
        };
        // Error and an orderly close are final.
        if matches!(q.state, QpState::Error(_) | QpState::Closed) {
            return;
        }
        let failing = matches!(state, QpState::Error(_) | QpState::Closed);
        q.state = state;
        if failing {
            self.flush_reads(qp);
        }
    }

    /// Completes every READ outstanding on `qp` with `IBV_WC_WR_FLUSH_ERR`.
    fn flush_reads(&mut self, qp: QpId) {
        let ids: Vec<u64> = self
            .reads
            .iter()
            .filter(|(_, r)| match r {
                PendingRead::Sw { qp: q, .. } | PendingRead::Hw { qp: q, .. } => *q == qp,
            })
            .map(|(id, _)| *id)
            .collect();
        let mut ids = ids;
        ids.sort_unstable();
        for id in ids {
            self.finish_read(id, WcStatus::WR_FLUSH_ERR, &[]);
        }
    }

    pub fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        let call = "ibv_post_send";
        let Some(Some(q)) = self.qps.get(qp.0 as usize) else {
            return Err(Error::verbs(call, errno::EINVAL));
        };
        let (qpn, send_cq) = (q.qpn, q.send_cq);
        let signaled = wr.send_flags & IBV_SEND_SIGNALED != 0;
        let completion = |status: WcStatus, opcode: WcOpcode, len: u32| Wc {
            wr_id: wr.wr_id,
            status,
            opcode,
            byte_len: len,
            qp_num: qpn,
            ..Wc::default()
        };
        match &q.state {
            QpState::Reset => return Err(Error::verbs(call, errno::EINVAL)),
            QpState::Error(_) | QpState::Closed => {
                // Posting to a QP in error succeeds; the WR is flushed.
                let opcode = if wr.opcode == WrOpcode::RDMA_READ {
                    WcOpcode::RDMA_READ
                } else {
                    WcOpcode::SEND
                };
                self.push_cqe(
                    send_cq,
                    completion(WcStatus::WR_FLUSH_ERR, opcode, 0),
                    Effect::None,
                );
                return Ok(());
            }
            QpState::Connecting | QpState::Ready => {}
        }
        match wr.opcode {
            WrOpcode::SEND | WrOpcode::SEND_WITH_IMM => {
                let total: usize = wr.sg_list.iter().map(|g| g.length as usize).sum();
                if let ([g], true) = (wr.sg_list, total >= self.in_place_sends) {
                    if self.check_sge(g, 0) {
                        if let Some((mr, off)) = self.locate(g.addr, g.lkey) {
                            let key = g.lkey;
                            let data = RegionRef {
                                mr,
                                key,
                                off,
                                len: total,
                            };
                            let imm = (wr.opcode == WrOpcode::SEND_WITH_IMM).then_some(wr.imm_data);
                            let wc = completion(WcStatus::SUCCESS, WcOpcode::SEND, total as u32);
                            let done = signaled.then_some((send_cq, wc));
                            self.out.push_back((qp, Outgoing::Send { imm, data, done }));
                            return Ok(());
                        }
                    }
                }
                let mut data = self.buf(total);
                for g in wr.sg_list {
                    if !self.check_sge(g, 0) {
                        self.push_cqe(
                            send_cq,
                            completion(WcStatus::LOC_PROT_ERR, WcOpcode::SEND, 0),
                            Effect::None,
                        );
                        self.set_qp_state(qp, QpState::Error("local protection error".into()));
                        return Ok(());
                    }
                    let (mr, off) = self
                        .locate(g.addr, g.lkey)
                        .ok_or(Error::verbs(call, errno::EFAULT))?;
                    let Some(Some(m)) = self.mrs.get(mr as usize) else {
                        return Err(Error::verbs(call, errno::EFAULT));
                    };
                    data.extend_from_slice(&m.buf[off..off + g.length as usize]);
                }
                let imm = (wr.opcode == WrOpcode::SEND_WITH_IMM).then_some(wr.imm_data);
                let len = data.len() as u32;
                self.push_out((qp, Frame::Send { imm, data }));
                if signaled {
                    self.push_cqe(
                        send_cq,
                        completion(WcStatus::SUCCESS, WcOpcode::SEND, len),
                        Effect::None,
                    );
                }
                Ok(())
            }
            WrOpcode::RDMA_READ => {
                if let Some(Some(q)) = self.qps.get(qp.0 as usize) {
                    if q.reads_out >= q.max_send_wr {
                        return Err(Error::verbs(call, errno::ENOMEM));
                    }
                }
                if wr
                    .sg_list
                    .iter()
                    .any(|g| !self.check_sge(g, IBV_ACCESS_LOCAL_WRITE))
                {
                    return Err(Error::verbs(call, errno::EINVAL));
                }
                let len: u64 = wr.sg_list.iter().map(|g| u64::from(g.length)).sum();
                let len = u32::try_from(len).map_err(|_| Error::verbs(call, errno::EINVAL))?;
                let id = self.next_read;
                self.next_read += 1;
                self.reads.insert(
                    id,
                    PendingRead::Sw {
                        qp,
                        wr_id: wr.wr_id,
                        sges: wr.sg_list.to_vec(),
                        signaled,
                    },
                );
                if let Some(Some(q)) = self.qps.get_mut(qp.0 as usize) {
                    q.reads_out += 1;
                }
                self.push_out((
                    qp,
                    Frame::ReadReq {
                        id,
                        va: wr.remote_addr,
                        rkey: wr.rkey,
                        len,
                    },
                ));
                Ok(())
            }
            _ => Err(Error::verbs(call, errno::EINVAL)),
        }
    }

    // --------------------------------------------------------- arrivals ---

    /// The device processes one frame arriving on `qp`. `Err(Rnr)` when it
    /// cannot be accepted yet (no SRQ buffer); nothing changed then and the
    /// caller keeps the frame.
    pub fn receive(&mut self, qp: QpId, frame: FrameRef<'_>) -> core::result::Result<(), Rnr> {
        let Some(Some(q)) = self.qps.get(qp.0 as usize) else {
            self.misuse(format!("frame for unknown QP {}", qp.0));
            return Ok(());
        };
        if matches!(q.state, QpState::Error(_) | QpState::Reset) {
            debug!(qp = qp.0, "verbs-tm soft: frame dropped on a QP not ready");
            return Ok(());
        }
        match frame {
            FrameRef::Send { imm, data } => self.receive_send(qp, imm, data),
            FrameRef::ReadReq { id, va, rkey, len } => {
                self.serve_read(qp, id, va, rkey, len);
                Ok(())
            }
            FrameRef::ReadResp { id, status, data } => {
                self.finish_read(id, status, data);
                Ok(())
            }
        }
    }

    fn serve_read(&mut self, qp: QpId, id: u64, va: u64, rkey: u32, len: u32) {
        // A zero-length READ checks no key and no bounds (InfiniBand): a
        // zero-length rendezvous names no memory region (key 0).
        if len == 0 {
            self.stats.reads_served += 1;
            self.push_out((
                qp,
                Frame::ReadResp {
                    id,
                    status: WcStatus::SUCCESS,
                    data: Vec::new(),
                },
            ));
            return;
        }
        let range = self.keys.get(&rkey).and_then(|&i| {
            let m = self.mrs.get(i as usize)?.as_ref()?;
            if m.access & IBV_ACCESS_REMOTE_READ == 0 {
                return None;
            }
            let off = usize::try_from(va.checked_sub(m.base)?).ok()?;
            let end = off.checked_add(len as usize)?;
            (end <= m.buf.len()).then_some((i, off, end))
        });
        self.stats.reads_served += 1;
        if let Some((i, off, end)) = range.filter(|_| self.in_place_reads) {
            let data = RegionRef {
                mr: i,
                key: rkey,
                off,
                len: end - off,
            };
            self.out.push_back((qp, Outgoing::ReadResp { id, data }));
            return;
        }
        let data = range.and_then(|(i, off, end)| {
            self.staged(RegionRef {
                mr: i,
                key: rkey,
                off,
                len: end - off,
            })
        });
        let (status, data) = match data {
            Some(d) => (WcStatus::SUCCESS, d),
            None => {
                debug!(rkey, va, len, "verbs-tm soft: READ refused (key or bounds)");
                (WcStatus::REM_ACCESS_ERR, Vec::new())
            }
        };
        self.push_out((qp, Frame::ReadResp { id, status, data }));
    }

    fn finish_read(&mut self, id: u64, status: WcStatus, data: &[u8]) {
        self.finish_read_with(id, status, ReadData::Frame(data));
    }

    /// Where the data of READ `id`'s response of `len` bytes may be written
    /// directly (a driver that receives it straight into memory): the
    /// region's index, key and offset, when the READ waits, targets one
    /// scatter entry of at least `len` bytes, and that entry is valid.
    pub fn read_target(&self, id: u64, len: usize) -> Option<(u32, u32, usize)> {
        let sge = match self.reads.get(&id)? {
            PendingRead::Sw { sges, .. } => match sges.as_slice() {
                [g] => *g,
                _ => return None,
            },
            PendingRead::Hw { sge, .. } => (*sge)?,
        };
        if (sge.length as usize) < len || !self.check_sge(&sge, IBV_ACCESS_LOCAL_WRITE) {
            return None;
        }
        let (mr, off) = self.locate(sge.addr, sge.lkey)?;
        Some((mr, sge.lkey, off))
    }

    /// The length READ `id` asked for, `None` if no such READ waits: the
    /// cap of its response.
    pub fn read_len(&self, id: u64) -> Option<usize> {
        Some(match self.reads.get(&id)? {
            PendingRead::Sw { sges, .. } => sges.iter().map(|g| g.length as usize).sum(),
            PendingRead::Hw { rvh, .. } => rvh.len as usize,
        })
    }

    /// Completes READ `id` whose `len` bytes the driver wrote at
    /// [`Nic::read_target`] (`ok`), or failed to (`!ok`: the region went
    /// away meanwhile, a local protection error).
    pub fn finish_read_placed(&mut self, id: u64, len: usize, ok: bool) {
        if !self.reads.contains_key(&id) {
            // Flushed meanwhile (the QP failed): as a frame on a QP in
            // error, dropped.
            debug!(
                id,
                "verbs-tm soft: READ response for a flushed READ dropped"
            );
            return;
        }
        if ok {
            self.finish_read_with(id, WcStatus::SUCCESS, ReadData::Placed(len));
        } else {
            self.finish_read_with(id, WcStatus::LOC_PROT_ERR, ReadData::Placed(0));
        }
    }

    fn finish_read_with(&mut self, id: u64, status: WcStatus, data: ReadData<'_>) {
        let Some(r) = self.reads.remove(&id) else {
            self.misuse(format!("READ response for unknown request {id}"));
            return;
        };
        match r {
            PendingRead::Sw {
                qp,
                wr_id,
                sges,
                signaled,
            } => {
                let Some(Some(q)) = self.qps.get_mut(qp.0 as usize) else {
                    return;
                };
                q.reads_out = q.reads_out.saturating_sub(1);
                let (qpn, cq) = (q.qpn, q.send_cq);
                let mut status = status;
                let mut len = 0;
                if status == WcStatus::SUCCESS {
                    match data {
                        ReadData::Frame(d) => match self.scatter(&sges, d) {
                            Ok(n) => len = n as u32,
                            Err(s) => status = s,
                        },
                        ReadData::Placed(n) => len = n as u32,
                    }
                }
                if status != WcStatus::SUCCESS && status != WcStatus::WR_FLUSH_ERR {
                    self.set_qp_state(qp, QpState::Error(format!("RDMA READ failed: {status:?}")));
                }
                if signaled || status != WcStatus::SUCCESS {
                    self.push_cqe(
                        cq,
                        Wc {
                            wr_id,
                            status,
                            opcode: WcOpcode::RDMA_READ,
                            byte_len: len,
                            qp_num: qpn,
                            ..Wc::default()
                        },
                        Effect::None,
                    );
                }
            }
            PendingRead::Hw {
                qp,
                srq,
                handle,
                gen,
                recv_wr_id,
                sge,
                tmh,
                rvh,
            } => {
                let Some(Some(s)) = self.srqs.get(srq as usize) else {
                    return;
                };
                let Some(cq) = s.cq else { return };
                let qpn = self.qp_num(qp).unwrap_or(0);
                let mut status = status;
                if status == WcStatus::SUCCESS {
                    if let ReadData::Frame(d) = data {
                        if let Err(s) = self.scatter(sge.as_slice(), d) {
                            status = s;
                        }
                    }
                }
                if status == WcStatus::SUCCESS {
                    let mut fin = Vec::with_capacity(tm_proto::FIN_LEN);
                    fin.extend_from_slice(&tmh.fin_reply().to_bytes());
                    fin.extend_from_slice(&rvh.to_bytes());
                    self.push_out((
                        qp,
                        Frame::Send {
                            imm: None,
                            data: fin,
                        },
                    ));
                    self.stats.hw_rndv += 1;
                } else if status != WcStatus::WR_FLUSH_ERR {
                    self.set_qp_state(
                        qp,
                        QpState::Error(format!("rendezvous READ failed: {status:?}")),
                    );
                }
                self.push_cqe(
                    cq,
                    Wc {
                        wr_id: recv_wr_id,
                        status,
                        opcode: WcOpcode::TM_RECV,
                        wc_flags: IBV_WC_TM_DATA_VALID,
                        byte_len: rvh.len,
                        qp_num: qpn,
                        ..Wc::default()
                    },
                    Effect::Consume { srq, handle, gen },
                );
            }
        }
    }

    /// Completes up to `n` delayed `DATA_VALID`s of multi-packet messages
    /// (oldest first); returns how many.
    pub fn complete_data(&mut self, n: usize) -> usize {
        let mut done = 0;
        while done < n {
            let Some(d) = self.late.pop_front() else {
                break;
            };
            let (f, imm) = flags_imm(d.imm);
            self.push_cqe(
                d.cq,
                Wc {
                    wr_id: d.recv_wr_id,
                    status: WcStatus::SUCCESS,
                    opcode: WcOpcode::TM_RECV,
                    wc_flags: IBV_WC_TM_DATA_VALID | f,
                    byte_len: d.byte_len,
                    imm_data: imm,
                    qp_num: d.qpn,
                    ..Wc::default()
                },
                Effect::Consume {
                    srq: d.srq,
                    handle: d.handle,
                    gen: d.gen,
                },
            );
            done += 1;
        }
        done
    }

    /// Delayed `DATA_VALID`s waiting.
    pub fn late_data(&self) -> usize {
        self.late.len()
    }

    /// Outstanding READs (posted by software or by the device).
    pub fn reads_pending(&self) -> usize {
        self.reads.len()
    }

    fn receive_send(
        &mut self,
        qp: QpId,
        imm: Option<u32>,
        data: &[u8],
    ) -> core::result::Result<(), Rnr> {
        let Some(Some(q)) = self.qps.get(qp.0 as usize) else {
            return Ok(());
        };
        let qpn = q.qpn;
        let Some(srq) = q.srq else {
            self.misuse(format!("SEND on QP {qpn} without an SRQ (not supported)"));
            return Ok(());
        };
        let recv_cq = q.recv_cq;
        let Some(Some(s)) = self.srqs.get(srq.0 as usize) else {
            return Ok(());
        };
        if s.tm.is_none() {
            // A basic SRQ: the completion goes to the QP's receive CQ.
            return self.deliver_untagged(qp, srq, recv_cq, WcOpcode::RECV, imm, data, false);
        }
        let Some(cq) = s.cq else { return Ok(()) };
        let op = data.first().copied();
        let opcode = match op.map(Opcode::try_from) {
            Some(Ok(o)) => o,
            other => {
                self.misuse(format!(
                    "message with opcode byte {other:?} on a TM-SRQ (not NO_TAG/RNDV/FIN/EAGER)"
                ));
                Opcode::NoTag
            }
        };
        if matches!(opcode, Opcode::NoTag | Opcode::Fin) {
            return self.deliver_untagged(qp, srq, cq, WcOpcode::TM_NO_TAG, imm, data, false);
        }
        let tmh = match Tmh::decode(data) {
            Ok(t) => t,
            Err(e) => {
                self.misuse(format!("tagged message shorter than a TMH: {e}"));
                return self.deliver_untagged(qp, srq, cq, WcOpcode::TM_NO_TAG, imm, data, false);
            }
        };
        let rvh = if opcode == Opcode::Rndv {
            if data.len() > self.cfg.caps.tm.max_rndv_hdr_size as usize {
                self.misuse(format!(
                    "rendezvous request of {} bytes exceeds max_rndv_hdr_size {}",
                    data.len(),
                    self.cfg.caps.tm.max_rndv_hdr_size
                ));
            }
            match Rvh::decode(&data[Tmh::LEN..]) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.misuse(format!("rendezvous request without an RVH: {e}"));
                    return self.deliver_untagged(
                        qp,
                        srq,
                        cq,
                        WcOpcode::TM_NO_TAG,
                        imm,
                        data,
                        false,
                    );
                }
            }
        } else {
            None
        };
        let found = self.tm_mut(srq.0).and_then(|tm| tm.find_match(tmh.tag));
        let Some(i) = found else {
            return self.deliver_untagged(qp, srq, cq, WcOpcode::TM_RECV, imm, data, true);
        };
        let Some(tm) = self.tm_mut(srq.0) else {
            return Ok(());
        };
        let (e, check) = tm.take_entry(i);
        self.stats.tm_matched += 1;
        let info = TmInfo {
            tag: tmh.tag,
            priv_: tmh.app_ctx,
        };
        let (imm_flag, imm_data) = flags_imm(imm);
        let base = Wc {
            wr_id: e.recv_wr_id,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::TM_RECV,
            qp_num: qpn,
            tm_info: info,
            ..Wc::default()
        };
        let consume = Effect::Consume {
            srq: srq.0,
            handle: e.handle,
            gen: e.gen,
        };
        if check == SlotCheck::Misuse {
            self.misuse(format!(
                "message matched tag handle {} after an unsignaled DEL was posted for it (mlx5: IBV_WC_GENERAL_ERR or a misattributed completion)",
                e.handle
            ));
            self.push_cqe(
                cq,
                Wc {
                    wr_id: 0,
                    status: WcStatus::GENERAL_ERR,
                    ..base
                },
                Effect::None,
            );
            return Ok(());
        }
        let buflen = e.sge.map_or(0, |g| g.length) as usize;
        let sges = e.sge.map(|g| vec![g]).unwrap_or_default();
        match rvh {
            None => {
                let payload = &data[Tmh::LEN..];
                let status = match self.scatter(&sges, &payload[..payload.len().min(buflen)]) {
                    Ok(_) if payload.len() > buflen => WcStatus::LOC_LEN_ERR,
                    Ok(_) => WcStatus::SUCCESS,
                    Err(s) => s,
                };
                let byte_len = payload.len() as u32;
                if status != WcStatus::SUCCESS || data.len() <= self.cfg.caps.path_mtu as usize {
                    self.push_cqe(
                        cq,
                        Wc {
                            status,
                            wc_flags: IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID | imm_flag,
                            byte_len,
                            imm_data,
                            ..base
                        },
                        consume,
                    );
                } else {
                    // Multi-packet: the match now, the data later.
                    self.push_cqe(
                        cq,
                        Wc {
                            wc_flags: IBV_WC_TM_MATCH,
                            ..base
                        },
                        Effect::None,
                    );
                    self.late.push_back(LateData {
                        cq,
                        srq: srq.0,
                        handle: e.handle,
                        gen: e.gen,
                        recv_wr_id: e.recv_wr_id,
                        byte_len,
                        imm,
                        qpn,
                    });
                }
            }
            Some(rvh) if rvh.len as usize <= buflen => {
                self.push_cqe(
                    cq,
                    Wc {
                        wc_flags: IBV_WC_TM_MATCH,
                        ..base
                    },
                    Effect::None,
                );
                let id = self.next_read;
                self.next_read += 1;
                self.reads.insert(
                    id,
                    PendingRead::Hw {
                        qp,
                        srq: srq.0,
                        handle: e.handle,
                        gen: e.gen,
                        recv_wr_id: e.recv_wr_id,
                        sge: e.sge,
                        tmh,
                        rvh,
                    },
                );
                self.push_out((
                    qp,
                    Frame::ReadReq {
                        id,
                        va: rvh.va,
                        rkey: rvh.rkey,
                        len: rvh.len,
                    },
                ));
            }
            Some(_) => {
                // The request's headers go to the buffer; software finishes.
                self.stats.rndv_incomplete += 1;
                let status = match self.scatter(&sges, &data[..data.len().min(buflen)]) {
                    Ok(_) => WcStatus::TM_RNDV_INCOMPLETE,
                    Err(s) => s,
                };
                self.push_cqe(
                    cq,
                    Wc {
                        status,
                        wc_flags: IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID | imm_flag,
                        byte_len: data.len() as u32,
                        imm_data,
                        ..base
                    },
                    consume,
                );
            }
        }
        Ok(())
    }

    /// A message into the next untagged WQE: unexpected tagged messages
    /// (`tagged`: `H += 1`), no-tag and FIN messages, basic-SRQ receives.
    #[allow(clippy::too_many_arguments)]
    fn deliver_untagged(
        &mut self,
        qp: QpId,
        srq: SrqId,
        cq: CqId,
        opcode: WcOpcode,
        imm: Option<u32>,
        data: &[u8],
        tagged: bool,
    ) -> core::result::Result<(), Rnr> {
        let qpn = self.qp_num(qp).unwrap_or(0);
        let Some(Some(s)) = self.srqs.get_mut(srq.0 as usize) else {
            return Ok(());
        };
        let Some(wqe) = s.wqes.pop_front() else {
            self.stats.rnr += 1;
            debug!(qpn, "verbs-tm soft: no SRQ buffer, RNR");
            return Err(Rnr);
        };
        let cap: u64 = wqe.sges.iter().map(|g| u64::from(g.length)).sum();
        let (imm_flag, imm_data) = flags_imm(imm);
        let base = Wc {
            wr_id: wqe.wr_id,
            opcode,
            byte_len: data.len() as u32,
            qp_num: qpn,
            ..Wc::default()
        };
        if data.len() as u64 > cap {
            self.push_cqe(
                cq,
                Wc {
                    status: WcStatus::LOC_LEN_ERR,
                    ..base
                },
                Effect::None,
            );
            self.set_qp_state(
                qp,
                QpState::Error(format!(
                    "message of {} bytes larger than the SRQ buffer ({cap})",
                    data.len()
                )),
            );
            return Ok(());
        }
        let status = match self.scatter(&wqe.sges, data) {
            Ok(_) => WcStatus::SUCCESS,
            Err(s) => s,
        };
        let effect = if tagged && status == WcStatus::SUCCESS {
            if let Some(tm) = self.tm_mut(srq.0) {
                tm.unexpected_delivered();
            }
            self.stats.tm_unexpected += 1;
            Effect::Unexpected { srq: srq.0 }
        } else {
            if opcode == WcOpcode::TM_NO_TAG {
                self.stats.no_tag += 1;
            }
            Effect::None
        };
        self.push_cqe(
            cq,
            Wc {
                status,
                wc_flags: imm_flag,
                imm_data,
                ..base
            },
            effect,
        );
        Ok(())
    }
}
