//! [`Sim`]: the deterministic driver of the software device.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use super::nic::{Frame, Nic, NicStats};
use super::SoftConfig;
use crate::verbs::{
    errno, CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, SrqId,
    SrqInitAttr, Wc,
};
use crate::{Error, Mr, Provider, Result};

#[derive(Debug, Default)]
struct Fabric {
    nics: Vec<Nic>,
    /// (nic, local qp) → (nic, remote qp).
    links: HashMap<(usize, u32), (usize, u32)>,
    /// Frames on the wire toward (nic, qp), oldest first.
    wires: HashMap<(usize, u32), VecDeque<Frame>>,
}

impl Fabric {
    /// Moves every frame a device has queued onto the wire toward its peer.
    fn route(&mut self, nic: usize) {
        while let Some((qp, frame)) = self.nics[nic].take_out() {
            match self.links.get(&(nic, qp.0)) {
                Some(&dst) => self.wires.entry(dst).or_default().push_back(frame),
                None => {
                    // Not connected: a real RC QP could not have sent it.
                    self.nics[nic].set_qp_state(qp, QpState::Error("not connected".into()));
                }
            }
        }
    }

    /// Delivers up to `n` frames arriving at (nic, qp); stops at an RNR.
    fn deliver(&mut self, nic: usize, qp: u32, n: usize) -> usize {
        let mut done = 0;
        while done < n {
            let Some(frame) = self.wires.get_mut(&(nic, qp)).and_then(VecDeque::pop_front) else {
                break;
            };
            match self.nics[nic].receive(QpId(qp), frame.as_ref()) {
                Ok(()) => done += 1,
                Err(_rnr) => {
                    if let Some(w) = self.wires.get_mut(&(nic, qp)) {
                        w.push_front(frame);
                    }
                    break;
                }
            }
            self.route(nic);
        }
        done
    }

    /// Runs every device until nothing moves; returns the steps taken.
    fn run(&mut self) -> usize {
        let mut steps = 0;
        loop {
            let mut moved = 0;
            for i in 0..self.nics.len() {
                for srq in self.nics[i].srqs_with_ops() {
                    moved += self.nics[i].exec_ops(srq, usize::MAX);
                }
                moved += self.nics[i].complete_data(usize::MAX);
                self.route(i);
            }
            let keys: Vec<(usize, u32)> = {
                let mut k: Vec<_> = self
                    .wires
                    .iter()
                    .filter(|(_, w)| !w.is_empty())
                    .map(|(k, _)| *k)
                    .collect();
                k.sort_unstable();
                k
            };
            for (nic, qp) in keys {
                moved += self.deliver(nic, qp, usize::MAX);
            }
            if moved == 0 {
                return steps;
            }
            steps += moved;
        }
    }
}

/// A snapshot of a TM-SRQ's state, for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TmSnapshot {
    /// `hw_phase_cnt`: unexpected tagged messages delivered, mod 2^16.
    pub h: u16,
    /// `sw_phase_cnt`: the last count applied by an op with `TM_SYNC`.
    pub s: u16,
    /// The list in device order: `(handle, active)`.
    pub list: Vec<(u32, bool)>,
    /// Tag slots still held (live, waiting for completions).
    pub live_slots: usize,
    /// Command-queue slots in use (posted, not reclaimed).
    pub outstanding_ops: usize,
    /// Ops posted and not executed.
    pub queued_ops: usize,
    /// The provider's `(unexp_in, unexp_out)`.
    pub unexp: (u32, u32),
}

/// The deterministic driver of the software device.
///
/// Devices of one fabric share a lock (so a `Sim` is `Send` and two
/// endpoints of a test can live on two threads), but nothing moves on its
/// own: frames a device sends wait on the wire toward their QP until a test
/// delivers them, list operations wait in the command queue until executed,
/// multi-packet data waits until completed. [`Sim::set_auto`] makes every
/// poll run the whole fabric to quiescence first, for tests that do not
/// care about the interleaving.
#[derive(Debug, Clone)]
pub struct Sim {
    fabric: Arc<Mutex<Fabric>>,
    nic: usize,
    auto: bool,
}

impl Sim {
    /// A device on a new fabric.
    pub fn new(cfg: SoftConfig) -> Self {
        let fabric = Fabric {
            nics: vec![Nic::new(cfg)],
            ..Fabric::default()
        };
        Sim {
            fabric: Arc::new(Mutex::new(fabric)),
            nic: 0,
            auto: false,
        }
    }

    /// Another device on this device's fabric.
    pub fn add_device(&self, cfg: SoftConfig) -> Sim {
        let mut f = self.lock();
        f.nics.push(Nic::new(cfg));
        Sim {
            fabric: Arc::clone(&self.fabric),
            nic: f.nics.len() - 1,
            auto: self.auto,
        }
    }

    /// With `auto`, every `poll_cq` of this handle first runs the whole
    /// fabric to quiescence ([`Sim::run`]).
    pub fn set_auto(&mut self, auto: bool) {
        self.auto = auto;
    }

    fn lock(&self) -> MutexGuard<'_, Fabric> {
        // A panic while holding the lock (a failed test) leaves the fabric
        // as it was: keep using it.
        self.fabric
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn with<T>(&self, f: impl FnOnce(&mut Nic) -> T) -> T {
        let mut fab = self.lock();
        let r = f(&mut fab.nics[self.nic]);
        fab.route(self.nic);
        r
    }

    /// Hardware step: executes up to `n` queued list operations of `srq`.
    pub fn exec_ops(&self, srq: SrqId, n: usize) -> usize {
        self.with(|nic| nic.exec_ops(srq, n))
    }

    /// Hardware step: delivers up to `n` frames arriving at `qp` (stops at
    /// an RNR: no SRQ buffer).
    pub fn deliver(&self, qp: QpId, n: usize) -> usize {
        let nic = self.nic;
        self.lock().deliver(nic, qp.0, n)
    }

    /// Frames on the wire toward `qp`.
    pub fn in_flight(&self, qp: QpId) -> usize {
        let nic = self.nic;
        self.lock().wires.get(&(nic, qp.0)).map_or(0, VecDeque::len)
    }

    /// Hardware step: completes up to `n` delayed `DATA_VALID`s of
    /// multi-packet messages matched by this device.
    pub fn complete_data(&self, n: usize) -> usize {
        self.with(|nic| nic.complete_data(n))
    }

    /// Delayed `DATA_VALID`s waiting.
    pub fn late_data(&self) -> usize {
        self.with(|nic| nic.late_data())
    }

    /// Runs every device of the fabric until nothing moves.
    pub fn run(&self) -> usize {
        self.lock().run()
    }

    /// Puts a SEND (or SEND_WITH_IMM) on the wire toward `qp`, as if a peer
    /// had sent it.
    pub fn inject_send(&self, qp: QpId, imm: Option<u32>, data: Vec<u8>) {
        let nic = self.nic;
        self.lock()
            .wires
            .entry((nic, qp.0))
            .or_default()
            .push_back(Frame::Send { imm, data });
    }

    /// Misuse recorded since the last call (see the [module docs](super)).
    pub fn misuse(&self) -> Vec<String> {
        self.with(Nic::take_misuse)
    }

    /// The TM state of `srq`.
    pub fn tm_state(&self, srq: SrqId) -> Option<TmSnapshot> {
        self.with(|nic| {
            let tm = nic.tm(srq)?;
            Some(TmSnapshot {
                h: tm.h,
                s: tm.s,
                list: tm.list().map(|e| (e.handle, e.active)).collect(),
                live_slots: tm.live_slots(),
                outstanding_ops: tm.outstanding_ops(),
                queued_ops: tm.queued_ops(),
                unexp: tm.unexp_counts(),
            })
        })
    }

    /// Untagged WQEs posted to `srq` and not consumed.
    pub fn srq_wqes(&self, srq: SrqId) -> usize {
        self.with(|nic| nic.srq_wqes(srq))
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqId) -> usize {
        self.with(|nic| nic.cq_len(cq))
    }

    /// READs outstanding on this device.
    pub fn reads_pending(&self) -> usize {
        self.with(|nic| nic.reads_pending())
    }

    /// Device counters.
    pub fn stats(&self) -> NicStats {
        self.with(|nic| nic.stats())
    }

    /// Puts a QP in the error state, as a broken link would.
    pub fn fail_qp(&self, qp: QpId, reason: &str) {
        self.with(|nic| nic.set_qp_state(qp, QpState::Error(reason.into())));
    }
}

fn parse_addr(remote: &[u8]) -> Result<(usize, u32)> {
    let bad = || Error::BadAddress(format!("soft-sim address of {} bytes", remote.len()));
    let nic: [u8; 4] = remote
        .get(0..4)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    let qpn: [u8; 4] = remote
        .get(4..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(bad)?;
    if remote.len() != 8 {
        return Err(bad());
    }
    Ok((u32::from_le_bytes(nic) as usize, u32::from_le_bytes(qpn)))
}

impl Provider for Sim {
    fn name(&self) -> &str {
        "soft-sim"
    }

    fn query_device(&self) -> Result<DeviceCaps> {
        Ok(self.with(|nic| nic.caps()))
    }

    fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId> {
        self.with(|nic| nic.create_cq(attr))
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.with(|nic| nic.destroy_cq(cq))
    }

    fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId> {
        self.with(|nic| nic.create_srq(attr))
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.with(|nic| nic.destroy_srq(srq))
    }

    fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()> {
        self.with(|nic| nic.post_srq_ops(srq, wrs))
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        self.with(|nic| nic.post_srq_recv(srq, wr))
    }

    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId> {
        self.with(|nic| nic.create_qp(attr))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let nic = self.nic;
        let mut f = self.lock();
        f.nics[nic].destroy_qp(qp)?;
        if let Some(peer) = f.links.remove(&(nic, qp.0)) {
            // The peer sees an orderly close.
            f.links.remove(&peer);
            f.nics[peer.0].set_qp_state(QpId(peer.1), QpState::Closed);
        }
        f.wires.remove(&(nic, qp.0));
        Ok(())
    }

    fn qp_num(&self, qp: QpId) -> Result<u32> {
        self.with(|nic| nic.qp_num(qp))
    }

    fn local_address(&self, qp: QpId) -> Result<Vec<u8>> {
        let qpn = self.with(|nic| nic.qp_num(qp))?;
        let mut a = (self.nic as u32).to_le_bytes().to_vec();
        a.extend_from_slice(&qpn.to_le_bytes());
        Ok(a)
    }

    fn connect(&mut self, qp: QpId, remote: &[u8]) -> Result<()> {
        let (rnic, rqpn) = parse_addr(remote)?;
        let nic = self.nic;
        let mut f = self.lock();
        let Some(rqp) = f.nics.get(rnic).and_then(|n| n.qp_by_num(rqpn)) else {
            return Err(Error::BadAddress(format!(
                "soft-sim device {rnic} has no QP {rqpn}"
            )));
        };
        if f.nics[nic].qp_state(qp) != QpState::Reset {
            return Err(Error::verbs("ibv_modify_qp", errno::EINVAL));
        }
        f.links.insert((nic, qp.0), (rnic, rqp.0));
        f.nics[nic].set_qp_state(qp, QpState::Ready);
        Ok(())
    }

    fn qp_state(&self, qp: QpId) -> QpState {
        self.with(|nic| nic.qp_state(qp))
    }

    fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        self.with(|nic| nic.post_send(qp, wr))
    }

    fn reg_mr(&mut self, buf: Vec<u8>, access: u32) -> core::result::Result<Mr, (Error, Vec<u8>)> {
        self.with(|nic| nic.reg_mr(buf, access))
    }

    fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>> {
        self.with(|nic| nic.dereg_mr(mr))
    }

    fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.with(|nic| nic.mr_read(mr, offset, dst))
    }

    fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()> {
        self.with(|nic| nic.mr_write(mr, offset, src))
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        let nic = self.nic;
        let mut f = self.lock();
        if self.auto {
            f.run();
        }
        let r = f.nics[nic].poll_cq(cq, out, max);
        f.route(nic);
        r
    }
}
