//! The provider trait: the verbs a TM-SRQ driver uses, one method per verb.

use crate::verbs::{
    CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, Sge, SrqId,
    SrqInitAttr, Wc,
};
use crate::Result;

/// A registered memory region. It owns the registered buffer: the buffer
/// comes back from [`Provider::dereg_mr`]. Its bytes are read and written
/// through [`Provider::mr_read`] / [`Provider::mr_write`] (the device may
/// write into it at any time while it is the target of a posted receive or
/// READ).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a memory region must be deregistered to get its buffer back"]
pub struct Mr {
    id: u32,
    addr: u64,
    len: usize,
    lkey: u32,
    rkey: u32,
}

impl Mr {
    /// A handle, for provider implementations: `id` is the provider's own
    /// index, `addr` the address the device knows the buffer by.
    pub const fn new(id: u32, addr: u64, len: usize, lkey: u32, rkey: u32) -> Self {
        Mr {
            id,
            addr,
            len,
            lkey,
            rkey,
        }
    }

    /// The provider's index of this region.
    pub const fn id(&self) -> u32 {
        self.id
    }

    /// Device address of byte 0.
    pub const fn addr(&self) -> u64 {
        self.addr
    }

    /// Registered length.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key.
    pub const fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key (for a peer's RDMA READ).
    pub const fn rkey(&self) -> u32 {
        self.rkey
    }

    /// An SGE for `len` bytes at `offset`, if that range is inside the region.
    pub fn sge(&self, offset: usize, len: usize) -> Option<Sge> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(Sge {
            addr: self.addr + offset as u64,
            length: u32::try_from(len).ok()?,
            lkey: self.lkey,
        })
    }
}

/// The provider trait: the verbs a TM-SRQ driver uses, one method per verb.
///
/// A provider is one opened device (an `ibv_context` with its protection
/// domain). Objects are named by small handles ([`CqId`], [`SrqId`],
/// [`QpId`]) and memory by [`Mr`], which owns its buffer from
/// [`Provider::reg_mr`] until [`Provider::dereg_mr`] gives it back: nothing
/// the device may write into can be freed or moved while it is registered.
///
/// Semantics are rdma-core's (see the crate docs for the exact TM-SRQ
/// behaviour): `post_srq_ops` posts a chain in order and stops at the first
/// failing work request, reporting its index; ADD writes the handle into
/// the work request at post time; completions are read in CQ order.
///
/// Implemented by [`crate::soft::Sim`], [`crate::soft::Live`] and, with the
/// `ibverbs` feature, `crate::ibverbs::Device`.
pub trait Provider: Send {
    /// A short name for messages ("soft-sim", "soft-live", "mlx5_0", ...).
    fn name(&self) -> &str;

    /// `ibv_query_device_ex`: the TM caps and the limits the driver uses.
    fn query_device(&self) -> Result<DeviceCaps>;

    /// `ibv_create_cq_ex` (or `ibv_create_cq` when `attr.extended` is false).
    fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId>;

    /// `ibv_destroy_cq`.
    fn destroy_cq(&mut self, cq: CqId) -> Result<()>;

    /// `ibv_create_srq_ex`. On success `attr.max_wr` and `attr.max_sge` hold
    /// the granted values. Without `IBV_SRQ_INIT_ATTR_TYPE` (or with
    /// `IBV_SRQT_BASIC`) a basic SRQ is created, as rdma-core's inline does.
    fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId>;

    /// `ibv_destroy_srq`: `EBUSY` while QPs are attached.
    fn destroy_srq(&mut self, srq: SrqId) -> Result<()>;

    /// `ibv_post_srq_ops`: posts the chain in order. On failure returns
    /// [`crate::Error::PostOps`] with the index of the first work request not
    /// posted (those before it are posted) and its errno. ADDs get their
    /// `handle` written.
    fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()>;

    /// `ibv_post_srq_recv` of one work request (an untagged buffer).
    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()>;

    /// `ibv_create_qp` of an RC QP.
    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId>;

    /// `ibv_destroy_qp` (the software provider closes the connection in an
    /// orderly way).
    fn destroy_qp(&mut self, qp: QpId) -> Result<()>;

    /// The QP number completions report in `qp_num`.
    fn qp_num(&self, qp: QpId) -> Result<u32>;

    /// What a peer needs to connect its QP to this one (to be published out
    /// of band, e.g. through PMI).
    fn local_address(&self, qp: QpId) -> Result<Vec<u8>>;

    /// Connects an RC QP to the peer QP whose [`Provider::local_address`] is
    /// `remote` (INIT → RTR → RTS). May complete asynchronously: see
    /// [`Provider::qp_state`]; sends posted before the QP is ready are held
    /// in order.
    fn connect(&mut self, qp: QpId, remote: &[u8]) -> Result<()>;

    /// The QP's state.
    fn qp_state(&self, qp: QpId) -> QpState;

    /// `ibv_post_send` of one work request (SEND, SEND_WITH_IMM, RDMA_READ).
    fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()>;

    /// An unsignaled SEND whose payload is `parts` one after the other,
    /// copied (or written out) at post time, like `ibv_post_send` with `IBV_SEND_INLINE`:
    /// the caller's buffers are free on return and no completion is
    /// generated. It goes after every send posted before it on `qp`.
    ///
    /// `Ok(false)`: nothing was posted (the provider has no inline path,
    /// the payload is over its inline limit, or the QP cannot take the send
    /// at once, e.g. it is not ready); the caller posts it the ordinary way.
    /// The default posts nothing.
    fn post_send_inline(&mut self, qp: QpId, parts: &[&[u8]]) -> Result<bool> {
        let _ = (qp, parts);
        Ok(false)
    }

    /// `ibv_reg_mr`: registers `buf` with `access` (`IBV_ACCESS_*`). The
    /// region owns the buffer; on failure the buffer is handed back.
    fn reg_mr(
        &mut self,
        buf: Vec<u8>,
        access: u32,
    ) -> core::result::Result<Mr, (crate::Error, Vec<u8>)>;

    /// `ibv_dereg_mr`: gives the buffer back.
    fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>>;

    /// Copies `dst.len()` bytes of the region from `offset`.
    fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()>;

    /// Copies `src` into the region at `offset`.
    fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()>;

    /// Polls up to `max` completions (`ibv_start_poll` / `ibv_next_poll` /
    /// `ibv_end_poll` with the `ibv_wc_read_*` helpers), appending them to
    /// `out`; returns how many.
    fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize>;
}
