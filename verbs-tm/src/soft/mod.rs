//! The software provider: rdma-core's TM-SRQ reproduced in software.
//!
//! One state machine (a device with CQs, basic and tag-matching SRQs, RC
//! QPs and memory regions, whose TM-SRQ follows the model of the crate docs'
//! "Behaviour" section), and two drivers that decide when its "hardware"
//! runs and how its frames travel:
//!
//! - [`Sim`]: deterministic and in-process. Several devices share a fabric;
//!   nothing happens until a test says so: execute `n` queued list
//!   operations ([`Sim::exec_ops`]), deliver the next frames arriving at a QP
//!   ([`Sim::deliver`]), let a multi-packet message's data complete
//!   ([`Sim::complete_data`]), or run everything to quiescence
//!   ([`Sim::run`]). Every interleaving of the model is reachable.
//! - [`Live`]: each RC QP is a TCP connection. The owner's
//!   [`Provider::poll_cq`](crate::Provider::poll_cq) runs the device; a
//!   helper thread blocked in poll(2) runs it when the owner has not polled
//!   for a while, so a peer's READ is served (and a FIN sent) while the
//!   application computes.
//!
//! Misuse that real hardware answers with undefined behaviour (a DEL of a
//! free handle, an unsignaled DEL racing a consumption, a CQ overrun, a
//! malformed message) is recorded and can be read with `misuse()`; where
//! mlx5 returns an errno the software provider returns the same one.

pub mod handoff;
mod live;
mod nic;
mod sim;
pub(crate) mod tm;
mod wire;

pub use handoff::Handoff;
pub use live::{Live, LiveConfig, WireStats};
pub use nic::NicStats;
pub use sim::{Sim, TmSnapshot};
pub use wire::FrameError;

use crate::verbs::{DeviceCaps, TmCaps, IBV_TM_CAP_RC};

/// What a software device offers, and how its TM-SRQ activates entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SoftConfig {
    /// The caps `query_device` reports (and enforces).
    pub caps: DeviceCaps,
    /// The stricter activation rule: no entry matches at all while the
    /// device is out of phase (`S != H`), instead of only entries appended
    /// out of phase. Both preserve MPI ordering; drivers must work under
    /// both.
    pub strict_activation: bool,
}

impl SoftConfig {
    /// Small limits that tests reach easily: 15 tags, 16 outstanding list
    /// operations, a 64-byte rendezvous header, one SGE, a 4 KiB path MTU.
    pub const fn small() -> Self {
        SoftConfig {
            caps: DeviceCaps {
                tm: TmCaps {
                    max_rndv_hdr_size: 64,
                    max_num_tags: 15,
                    flags: IBV_TM_CAP_RC,
                    max_ops: 16,
                    max_sge: 1,
                },
                max_srq_wr: 1 << 15,
                max_qp_wr: 1 << 15,
                max_cqe: 1 << 22,
                path_mtu: 4096,
                max_mr_size: 1 << 32,
            },
            strict_activation: false,
        }
    }

    /// mlx5-like limits for real traffic: 1023 tags, 2048 outstanding list
    /// operations (UCX's sizing, `2 * tags + 2`, fits), otherwise as
    /// [`SoftConfig::small`].
    pub const fn large() -> Self {
        let mut c = Self::small();
        c.caps.tm.max_num_tags = 1023;
        c.caps.tm.max_ops = 2048;
        c
    }

    /// The same with other TM list limits.
    pub const fn with_tags(mut self, max_num_tags: u32, max_ops: u32) -> Self {
        self.caps.tm.max_num_tags = max_num_tags;
        self.caps.tm.max_ops = max_ops;
        self
    }

    /// The same with another path MTU.
    pub const fn with_mtu(mut self, path_mtu: u32) -> Self {
        self.caps.path_mtu = path_mtu;
        self
    }

    /// The same with the strict activation rule on or off.
    pub const fn strict(mut self, on: bool) -> Self {
        self.strict_activation = on;
        self
    }
}

impl SoftConfig {
    /// `base` with `TMX_VERBS_STRICT` applied.
    pub fn from_env(base: SoftConfig) -> crate::Result<Self> {
        Self::from_lookup(base, |k| std::env::var(k).ok())
    }

    /// [`SoftConfig::from_env`] with another source of variables.
    pub fn from_lookup(
        base: SoftConfig,
        look: impl Fn(&str) -> Option<String>,
    ) -> crate::Result<Self> {
        let mut c = base;
        if let Some(on) = crate::config::var_flag(&look, "TMX_VERBS_STRICT")? {
            c.strict_activation = on;
        }
        Ok(c)
    }
}

impl Default for SoftConfig {
    fn default() -> Self {
        Self::small()
    }
}
