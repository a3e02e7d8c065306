//! [`AnyProvider`]: the provider a job uses, chosen at run time
//! (`TMX_VERBS_PROVIDER`): hardware when it can start, else the software
//! provider over TCP.

use tracing::info;

use crate::config::ProviderChoice;
use crate::soft::{Live, LiveConfig};
use crate::verbs::{
    CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, SrqId,
    SrqInitAttr, Wc,
};
use crate::{Error, Mr, Provider, Result};

/// One of the providers, behind one type (what an upper layer stores).
#[derive(Debug)]
#[non_exhaustive]
pub enum AnyProvider {
    /// The software provider over TCP.
    Soft(Live),
    /// A TM-capable device through libibverbs.
    #[cfg(feature = "ibverbs")]
    Ibverbs(crate::ibverbs::Device),
}

/// Whether a hardware TM device is usable: `Ok(name)` of the first active
/// device with `IBV_TM_CAP_RC`, or [`Error::NoDevice`] with the reason in
/// one line (no RDMA subsystem, no device, no TM capability, or a build
/// without the `ibverbs` feature).
pub fn probe_hardware() -> Result<String> {
    #[cfg(feature = "ibverbs")]
    {
        crate::ibverbs::Device::open(None).map(|d| d.name().to_string())
    }
    #[cfg(not(feature = "ibverbs"))]
    {
        Err(Error::NoDevice {
            reason: "built without the `ibverbs` feature".into(),
        })
    }
}

impl AnyProvider {
    /// Opens the provider `choice` asks for. With [`ProviderChoice::Auto`],
    /// a hardware device when one opens, else (saying why in one line) the
    /// software provider with `live`.
    pub fn open(choice: ProviderChoice, live: LiveConfig) -> Result<Self> {
        match choice {
            ProviderChoice::Soft => Ok(AnyProvider::Soft(Live::new(live)?)),
            ProviderChoice::Ibverbs => Self::hardware(),
            ProviderChoice::Auto => match Self::hardware() {
                Ok(p) => Ok(p),
                Err(Error::NoDevice { reason }) => {
                    info!(%reason, "verbs-tm: no TM hardware, using the software provider");
                    Ok(AnyProvider::Soft(Live::new(live)?))
                }
                Err(e) => Err(e),
            },
        }
    }

    fn hardware() -> Result<Self> {
        #[cfg(feature = "ibverbs")]
        {
            crate::ibverbs::Device::open(None).map(AnyProvider::Ibverbs)
        }
        #[cfg(not(feature = "ibverbs"))]
        {
            Err(Error::NoDevice {
                reason: "built without the `ibverbs` feature".into(),
            })
        }
    }
}

macro_rules! any {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            AnyProvider::Soft($p) => $e,
            #[cfg(feature = "ibverbs")]
            AnyProvider::Ibverbs($p) => $e,
        }
    };
}

impl Provider for AnyProvider {
    fn name(&self) -> &str {
        any!(self, p => p.name())
    }
    fn query_device(&self) -> Result<DeviceCaps> {
        any!(self, p => p.query_device())
    }
    fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId> {
        any!(self, p => p.create_cq(attr))
    }
    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        any!(self, p => p.destroy_cq(cq))
    }
    fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId> {
        any!(self, p => p.create_srq(attr))
    }
    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        any!(self, p => p.destroy_srq(srq))
    }
    fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()> {
        any!(self, p => p.post_srq_ops(srq, wrs))
    }
    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        any!(self, p => p.post_srq_recv(srq, wr))
    }
    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId> {
        any!(self, p => p.create_qp(attr))
    }
    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        any!(self, p => p.destroy_qp(qp))
    }
    fn qp_num(&self, qp: QpId) -> Result<u32> {
        any!(self, p => p.qp_num(qp))
    }
    fn local_address(&self, qp: QpId) -> Result<Vec<u8>> {
        any!(self, p => p.local_address(qp))
    }
    fn connect(&mut self, qp: QpId, remote: &[u8]) -> Result<()> {
        any!(self, p => p.connect(qp, remote))
    }
    fn qp_state(&self, qp: QpId) -> QpState {
        any!(self, p => p.qp_state(qp))
    }
    fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        any!(self, p => p.post_send(qp, wr))
    }
    fn post_send_inline(&mut self, qp: QpId, parts: &[&[u8]]) -> Result<bool> {
        any!(self, p => p.post_send_inline(qp, parts))
    }
    fn reg_mr(&mut self, buf: Vec<u8>, access: u32) -> core::result::Result<Mr, (Error, Vec<u8>)> {
        any!(self, p => p.reg_mr(buf, access))
    }
    fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>> {
        any!(self, p => p.dereg_mr(mr))
    }
    fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()> {
        any!(self, p => p.mr_read(mr, offset, dst))
    }
    fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()> {
        any!(self, p => p.mr_write(mr, offset, src))
    }
    fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        any!(self, p => p.poll_cq(cq, out, max))
    }
}
