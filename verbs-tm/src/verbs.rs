//! The TM-SRQ verbs surface as plain Rust values, with rdma-core's numbers.
//!
//! Every constant here has the value of the enum member of the same name in
//! rdma-core's `infiniband/verbs.h` (opcodes, statuses, flags, masks), so a
//! [`Wc`] from the `ibverbs` provider and one from the software provider are
//! read the same way, and the values can be checked against the C headers
//! (the `ibverbs` feature's shim test does).
//!
//! Newtypes over `u32` (rather than Rust enums) keep every value a device may
//! report representable: an unknown status is still a status, printed by
//! number.

use core::fmt;

macro_rules! named_u32 {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$cm:meta])* $c:ident = $v:expr ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub u32);

        impl $name {
            $( $(#[$cm])* pub const $c: $name = $name($v); )*

            /// The rdma-core name of the value, if it has one.
            pub const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( v if v == $v => Some(stringify!($c)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({})", stringify!($name), self.0),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(self, f)
            }
        }
    };
}

named_u32! {
    /// `enum ibv_wc_status`.
    WcStatus {
        /// `IBV_WC_SUCCESS`.
        SUCCESS = 0,
        /// `IBV_WC_LOC_LEN_ERR`: the message did not fit the receive buffer.
        LOC_LEN_ERR = 1,
        /// `IBV_WC_LOC_QP_OP_ERR`.
        LOC_QP_OP_ERR = 2,
        /// `IBV_WC_LOC_PROT_ERR`: a local buffer outside its memory region.
        LOC_PROT_ERR = 4,
        /// `IBV_WC_WR_FLUSH_ERR`: the QP went to the error state.
        WR_FLUSH_ERR = 5,
        /// `IBV_WC_REM_INV_REQ_ERR`.
        REM_INV_REQ_ERR = 9,
        /// `IBV_WC_REM_ACCESS_ERR`: a READ was refused (bad rkey or bounds).
        REM_ACCESS_ERR = 10,
        /// `IBV_WC_REM_OP_ERR`.
        REM_OP_ERR = 11,
        /// `IBV_WC_RETRY_EXC_ERR`: the peer does not answer (it died).
        RETRY_EXC_ERR = 12,
        /// `IBV_WC_RNR_RETRY_EXC_ERR`: the receiver had no buffer posted.
        RNR_RETRY_EXC_ERR = 13,
        /// `IBV_WC_FATAL_ERR`.
        FATAL_ERR = 19,
        /// `IBV_WC_GENERAL_ERR`: mlx5's answer to a completion for a tag
        /// slot it already freed.
        GENERAL_ERR = 21,
        /// `IBV_WC_TM_ERR`: a tag DEL found the tag already consumed.
        TM_ERR = 22,
        /// `IBV_WC_TM_RNDV_INCOMPLETE`: a matched rendezvous request whose
        /// data did not fit; software finishes it (READ, then FIN).
        TM_RNDV_INCOMPLETE = 23,
    }
}

named_u32! {
    /// `enum ibv_wc_opcode`.
    WcOpcode {
        /// `IBV_WC_SEND`.
        SEND = 0,
        /// `IBV_WC_RDMA_WRITE`.
        RDMA_WRITE = 1,
        /// `IBV_WC_RDMA_READ`.
        RDMA_READ = 2,
        /// `IBV_WC_RECV`.
        RECV = 128,
        /// `IBV_WC_RECV_RDMA_WITH_IMM`.
        RECV_RDMA_WITH_IMM = 129,
        /// `IBV_WC_TM_ADD`: a signaled tag ADD executed.
        TM_ADD = 130,
        /// `IBV_WC_TM_DEL`: a signaled tag DEL executed.
        TM_DEL = 131,
        /// `IBV_WC_TM_SYNC`: a signaled SYNC executed.
        TM_SYNC = 132,
        /// `IBV_WC_TM_RECV`: a tagged message, matched or unexpected.
        TM_RECV = 133,
        /// `IBV_WC_TM_NO_TAG`: an untagged message (or a FIN) in an SRQ buffer.
        TM_NO_TAG = 134,
    }
}

named_u32! {
    /// `enum ibv_wr_opcode` (send work requests).
    WrOpcode {
        /// `IBV_WR_RDMA_WRITE`.
        RDMA_WRITE = 0,
        /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
        RDMA_WRITE_WITH_IMM = 1,
        /// `IBV_WR_SEND`.
        SEND = 2,
        /// `IBV_WR_SEND_WITH_IMM`.
        SEND_WITH_IMM = 3,
        /// `IBV_WR_RDMA_READ`.
        RDMA_READ = 4,
    }
}

named_u32! {
    /// `enum ibv_ops_wr_opcode`: tag-list operations of `ibv_post_srq_ops`.
    OpsOpcode {
        /// `IBV_WR_TAG_ADD`.
        TAG_ADD = 0,
        /// `IBV_WR_TAG_DEL`.
        TAG_DEL = 1,
        /// `IBV_WR_TAG_SYNC`.
        TAG_SYNC = 2,
    }
}

named_u32! {
    /// `enum ibv_srq_type`.
    SrqType {
        /// `IBV_SRQT_BASIC`.
        BASIC = 0,
        /// `IBV_SRQT_XRC`.
        XRC = 1,
        /// `IBV_SRQT_TM`: a tag-matching SRQ.
        TM = 2,
    }
}

/// `enum ibv_ops_flags`: the op completes on the CQ.
pub const IBV_OPS_SIGNALED: u32 = 1 << 0;
/// `enum ibv_ops_flags`: the op carries `unexpected_cnt` (16 bits used).
pub const IBV_OPS_TM_SYNC: u32 = 1 << 1;

/// `enum ibv_wc_flags`: `IBV_WC_GRH`.
pub const IBV_WC_GRH: u32 = 1 << 0;
/// `enum ibv_wc_flags`: `IBV_WC_WITH_IMM`, `imm_data` is valid.
pub const IBV_WC_WITH_IMM: u32 = 1 << 1;
/// `enum ibv_wc_flags`: `IBV_WC_TM_SYNC_REQ`, the device asks for a SYNC.
pub const IBV_WC_TM_SYNC_REQ: u32 = 1 << 4;
/// `enum ibv_wc_flags`: `IBV_WC_TM_MATCH`, a tagged buffer was matched
/// (`tm_info` is valid).
pub const IBV_WC_TM_MATCH: u32 = 1 << 5;
/// `enum ibv_wc_flags`: `IBV_WC_TM_DATA_VALID`, the data is in the buffer.
pub const IBV_WC_TM_DATA_VALID: u32 = 1 << 6;

/// `enum ibv_create_cq_wc_flags`: `IBV_WC_EX_WITH_BYTE_LEN`.
pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
/// `enum ibv_create_cq_wc_flags`: `IBV_WC_EX_WITH_IMM`.
pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
/// `enum ibv_create_cq_wc_flags`: `IBV_WC_EX_WITH_QP_NUM`.
pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
/// `enum ibv_create_cq_wc_flags`: `IBV_WC_EX_WITH_TM_INFO`, needed to read
/// `tm_info`.
pub const IBV_WC_EX_WITH_TM_INFO: u64 = 1 << 10;

/// `enum ibv_srq_init_attr_mask`: `IBV_SRQ_INIT_ATTR_TYPE`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1 << 0;
/// `enum ibv_srq_init_attr_mask`: `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `enum ibv_srq_init_attr_mask`: `IBV_SRQ_INIT_ATTR_XRCD`.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
/// `enum ibv_srq_init_attr_mask`: `IBV_SRQ_INIT_ATTR_CQ`.
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `enum ibv_srq_init_attr_mask`: `IBV_SRQ_INIT_ATTR_TM`.
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;

/// `enum ibv_tm_cap_flags`: `IBV_TM_CAP_RC`, tag matching on RC QPs.
pub const IBV_TM_CAP_RC: u32 = 1 << 0;

/// `enum ibv_send_flags`: `IBV_SEND_SIGNALED`.
pub const IBV_SEND_SIGNALED: u32 = 1 << 1;

/// `enum ibv_access_flags`: `IBV_ACCESS_LOCAL_WRITE`.
pub const IBV_ACCESS_LOCAL_WRITE: u32 = 1 << 0;
/// `enum ibv_access_flags`: `IBV_ACCESS_REMOTE_WRITE`.
pub const IBV_ACCESS_REMOTE_WRITE: u32 = 1 << 1;
/// `enum ibv_access_flags`: `IBV_ACCESS_REMOTE_READ`.
pub const IBV_ACCESS_REMOTE_READ: u32 = 1 << 2;

/// errno values the verbs return (Linux numbers; `libc` has the same).
pub mod errno {
    /// `EPERM`.
    pub const EPERM: i32 = 1;
    /// `ENOENT`.
    pub const ENOENT: i32 = 2;
    /// `EIO`.
    pub const EIO: i32 = 5;
    /// `EAGAIN`.
    pub const EAGAIN: i32 = 11;
    /// `ENOMEM`: a full tag list or command queue, or no memory.
    pub const ENOMEM: i32 = 12;
    /// `EFAULT`.
    pub const EFAULT: i32 = 14;
    /// `EBUSY`: destroying an SRQ with QPs attached.
    pub const EBUSY: i32 = 16;
    /// `EINVAL`: an invalid argument (bad mask, handle, opcode, size).
    pub const EINVAL: i32 = 22;
    /// `ENOSYS`: no RDMA subsystem (`/sys/class/infiniband_verbs` absent).
    pub const ENOSYS: i32 = 38;
    /// `EOPNOTSUPP`: the provider lacks the verb.
    pub const EOPNOTSUPP: i32 = 95;
    /// `ECONNREFUSED`.
    pub const ECONNREFUSED: i32 = 111;
    /// `ETIMEDOUT`.
    pub const ETIMEDOUT: i32 = 110;
}

/// `struct ibv_tm_caps`, as `ibv_query_device_ex` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmCaps {
    /// Largest rendezvous request message, whole (mlx5: 64).
    pub max_rndv_hdr_size: u32,
    /// Largest number of tagged buffers in one TM-SRQ list.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_RC` when tag matching on RC is supported.
    pub flags: u32,
    /// Largest number of outstanding list operations.
    pub max_ops: u32,
    /// Largest number of SGEs in a tagged buffer (mlx5: 1).
    pub max_sge: u32,
}

impl TmCaps {
    /// Whether the device can do tag matching on RC QPs (the `pyverbs` rule).
    pub const fn supported(&self) -> bool {
        self.flags & IBV_TM_CAP_RC != 0
    }
}

/// What a provider's device offers: the TM caps and the few other limits the
/// driver sizes itself by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// `ibv_device_attr_ex.tm_caps`.
    pub tm: TmCaps,
    /// `max_srq_wr`: largest SRQ.
    pub max_srq_wr: u32,
    /// `max_qp_wr`: largest send queue.
    pub max_qp_wr: u32,
    /// `max_cqe`: largest CQ.
    pub max_cqe: u32,
    /// Path MTU in bytes of the active port (messages above it arrive in
    /// several packets: a matched eager message then completes in two CQEs).
    pub path_mtu: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
}

/// `struct ibv_tm_cap`: what a TM-SRQ asks for at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmCap {
    /// Tagged buffers in the list (1..=`max_num_tags`).
    pub max_num_tags: u32,
    /// Outstanding list operations.
    pub max_ops: u32,
}

/// A CQ handle of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub u32);
/// An SRQ handle of a provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqId(pub u32);
/// A QP handle of a provider (not the QP number: see [`crate::Provider::qp_num`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QpId(pub u32);

/// `ibv_create_cq_ex` attributes (or `ibv_create_cq` when `extended` is false).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqInitAttr {
    /// Minimum number of entries.
    pub cqe: u32,
    /// `IBV_WC_EX_WITH_*` fields to report (extended CQs only).
    pub wc_flags: u64,
    /// Created with `ibv_create_cq_ex` (a TM-SRQ requires it on mlx5).
    pub extended: bool,
}

/// `struct ibv_srq_init_attr_ex`, with `attr.max_wr` / `attr.max_sge`
/// written back with the granted values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// `IBV_SRQ_INIT_ATTR_*` bits naming the fields that are set.
    pub comp_mask: u32,
    /// `srq_type`.
    pub srq_type: SrqType,
    /// The CQ for the SRQ's completions (TM-SRQ: also the list ops').
    pub cq: Option<CqId>,
    /// Untagged receive WQEs (in: requested; out: granted).
    pub max_wr: u32,
    /// SGEs per untagged WQE (in: requested; out: granted).
    pub max_sge: u32,
    /// `tm_cap`.
    pub tm_cap: TmCap,
}

impl SrqInitAttr {
    /// A TM-SRQ with every mask bit it needs set.
    pub const fn tm(cq: CqId, max_wr: u32, max_num_tags: u32, max_ops: u32) -> Self {
        SrqInitAttr {
            comp_mask: IBV_SRQ_INIT_ATTR_TYPE
                | IBV_SRQ_INIT_ATTR_PD
                | IBV_SRQ_INIT_ATTR_CQ
                | IBV_SRQ_INIT_ATTR_TM,
            srq_type: SrqType::TM,
            cq: Some(cq),
            max_wr,
            max_sge: 1,
            tm_cap: TmCap {
                max_num_tags,
                max_ops,
            },
        }
    }
}

/// `ibv_qp_init_attr` for an RC QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Send completions go here.
    pub send_cq: CqId,
    /// Receive completions go here (ignored with an SRQ: the SRQ's CQ).
    pub recv_cq: CqId,
    /// The (TM-)SRQ the QP receives through.
    pub srq: Option<SrqId>,
    /// Send queue depth.
    pub max_send_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
}

/// A QP's state as the driver sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QpState {
    /// Created, not connected yet.
    Reset,
    /// Connecting (the software provider's TCP handshake is in flight).
    Connecting,
    /// Ready to send and receive (RTS).
    Ready,
    /// The peer closed the connection in an orderly way.
    Closed,
    /// In the error state; the reason is for humans.
    Error(String),
}

/// `struct ibv_sge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Start address (inside the memory region of `lkey`).
    pub addr: u64,
    /// Bytes.
    pub length: u32,
    /// Local key of the memory region.
    pub lkey: u32,
}

/// `struct ibv_recv_wr` for `ibv_post_srq_recv` (one WR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Reported as the completion's `wr_id`.
    pub wr_id: u64,
    /// Scatter list.
    pub sg_list: &'a [Sge],
}

/// `struct ibv_send_wr` (one WR): SEND, SEND_WITH_IMM or RDMA_READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Reported as the completion's `wr_id`.
    pub wr_id: u64,
    /// What to do.
    pub opcode: WrOpcode,
    /// `IBV_SEND_*` flags.
    pub send_flags: u32,
    /// Gather list (SEND) or scatter list (READ).
    pub sg_list: &'a [Sge],
    /// Immediate data (host order; sent big-endian) for SEND_WITH_IMM.
    pub imm_data: u32,
    /// Remote address (READ).
    pub remote_addr: u64,
    /// Remote key (READ).
    pub rkey: u32,
}

/// The `tm.add` part of `struct ibv_ops_wr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmAdd<'a> {
    /// `wr_id` of the consumption completion(s).
    pub recv_wr_id: u64,
    /// The tagged buffer (mlx5 uses the first SGE only).
    pub sg_list: &'a [Sge],
    /// Tag to match (`((t ^ tag) & mask) == 0`).
    pub tag: u64,
    /// Mask.
    pub mask: u64,
}

/// `struct ibv_ops_wr`: one tag-list operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpsWr<'a> {
    /// Reported by the op's completion when signaled.
    pub wr_id: u64,
    /// ADD, DEL or SYNC.
    pub opcode: OpsOpcode,
    /// `IBV_OPS_SIGNALED` | `IBV_OPS_TM_SYNC`.
    pub flags: u32,
    /// With `IBV_OPS_TM_SYNC`: the unexpected messages software has handled
    /// (truncated to 16 bits by the device).
    pub unexpected_cnt: u32,
    /// ADD: written by the provider at post time. DEL: the entry to remove.
    pub handle: u32,
    /// ADD's arguments.
    pub add: TmAdd<'a>,
}

impl<'a> OpsWr<'a> {
    /// A signaled ADD carrying the count.
    pub fn add(wr_id: u64, count: u16, add: TmAdd<'a>) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TAG_ADD,
            flags: IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC,
            unexpected_cnt: u32::from(count),
            handle: 0,
            add,
        }
    }

    /// A signaled DEL carrying the count.
    pub fn del(wr_id: u64, count: u16, handle: u32) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TAG_DEL,
            flags: IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC,
            unexpected_cnt: u32::from(count),
            handle,
            add: TmAdd::default(),
        }
    }

    /// A signaled SYNC carrying the count.
    pub fn sync(wr_id: u64, count: u16) -> Self {
        OpsWr {
            wr_id,
            opcode: OpsOpcode::TAG_SYNC,
            flags: IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC,
            unexpected_cnt: u32::from(count),
            handle: 0,
            add: TmAdd::default(),
        }
    }
}

/// `struct ibv_wc_tm_info`: valid only with `IBV_WC_TM_MATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmInfo {
    /// The message's tag (host order).
    pub tag: u64,
    /// The TMH `app_ctx` (host order).
    pub priv_: u32,
}

/// One completion, as read with `ibv_start_poll`/`ibv_next_poll` and the
/// `ibv_wc_read_*` helpers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wc {
    /// The WR's id (`wr_id` of the op, the tagged buffer's `recv_wr_id`, or
    /// the SRQ WQE's).
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// `IBV_WC_*` flags (`WITH_IMM`, `TM_SYNC_REQ`, `TM_MATCH`,
    /// `TM_DATA_VALID`).
    pub wc_flags: u32,
    /// Bytes received.
    pub byte_len: u32,
    /// Immediate data (host order), with `IBV_WC_WITH_IMM`.
    pub imm_data: u32,
    /// QP number the completion belongs to (for receive completions: the QP
    /// the message came on).
    pub qp_num: u32,
    /// Tag info (with `IBV_WC_TM_MATCH`).
    pub tm_info: TmInfo,
}

impl Wc {
    /// Whether `flag` (an `IBV_WC_*` flag) is set.
    pub const fn has(&self, flag: u32) -> bool {
        self.wc_flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_unknown_values_print() {
        assert_eq!(format!("{:?}", WcOpcode::TM_RECV), "TM_RECV");
        assert_eq!(format!("{:?}", WcStatus(99)), "WcStatus(99)");
        assert_eq!(WcStatus::TM_RNDV_INCOMPLETE.0, 23);
        assert_eq!(WcOpcode::TM_NO_TAG.0, 134);
    }
}
