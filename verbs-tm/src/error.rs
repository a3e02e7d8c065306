//! The one error type of this crate.

use crate::verbs::{WcOpcode, WcStatus};

/// The name of an errno value, for messages.
pub fn errno_name(errno: i32) -> &'static str {
    use crate::verbs::errno::*;
    match errno {
        EPERM => "EPERM",
        ENOENT => "ENOENT",
        EIO => "EIO",
        EAGAIN => "EAGAIN",
        ENOMEM => "ENOMEM",
        EFAULT => "EFAULT",
        EBUSY => "EBUSY",
        EINVAL => "EINVAL",
        ENOSYS => "ENOSYS",
        EOPNOTSUPP => "EOPNOTSUPP",
        ECONNREFUSED => "ECONNREFUSED",
        ETIMEDOUT => "ETIMEDOUT",
        _ => "errno",
    }
}

/// Everything that can go wrong in a provider or the driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verb failed with an errno (`EINVAL`, `ENOMEM`, `EBUSY`, ...).
    #[error("{call} failed: {} ({errno})", errno_name(*errno))]
    Verbs {
        /// The verb (`ibv_create_srq_ex`, `ibv_post_send`, ...).
        call: &'static str,
        /// The errno it returned.
        errno: i32,
    },
    /// `ibv_post_srq_ops` stopped at work request `bad_wr` (0-based index in
    /// the chain); the work requests before it were posted.
    #[error("ibv_post_srq_ops: work request {bad_wr} failed: {} ({errno})", errno_name(*errno))]
    PostOps {
        /// Index of the first work request not posted.
        bad_wr: usize,
        /// The errno (`ENOMEM` for a full list or command queue, `EINVAL`).
        errno: i32,
    },
    /// No RDMA device with tag matching on RC (`IBV_TM_CAP_RC`) could be
    /// opened.
    #[error("no tag-matching RDMA device: {reason}")]
    NoDevice {
        /// Why (no RDMA subsystem, no device, no TM capability, ...).
        reason: String,
    },
    /// The software provider caught a use of the verbs that real hardware
    /// would answer with undefined behaviour or a corrupted list (a DEL of a
    /// free handle, an unsignaled DEL racing a consumption, a CQ overrun).
    #[error("verbs misuse: {0}")]
    Misuse(String),
    /// A peer's process died or its connection broke.
    #[error("peer {peer} is gone: {reason}")]
    PeerDied {
        /// The peer's rank.
        peer: u32,
        /// What was seen.
        reason: String,
    },
    /// A peer finalized (closed its connection in an orderly way) while an
    /// operation still needed it.
    #[error("peer {peer} has finalized")]
    PeerClosed {
        /// The peer's rank.
        peer: u32,
    },
    /// An address published by a peer (or given to `connect`) could not be
    /// used.
    #[error("bad address: {0}")]
    BadAddress(String),
    /// A configuration variable is malformed.
    #[error("{var}={value:?}: {reason}")]
    Config {
        /// The environment variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An operating-system call of the software provider failed.
    #[error("{what}: {message}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        message: String,
    },
    /// A completion the driver cannot explain (a device or driver bug).
    #[error("unexpected completion {opcode:?} (status {status:?}, wr_id {wr_id:#x}): {reason}")]
    Completion {
        /// Its opcode.
        opcode: WcOpcode,
        /// Its status.
        status: WcStatus,
        /// Its work-request id.
        wr_id: u64,
        /// Why it does not fit.
        reason: &'static str,
    },
    /// A request handle that names no outstanding request of this endpoint.
    #[error("unknown request {0:#x}")]
    UnknownRequest(u64),
    /// A rank outside the job, or one with no connection.
    #[error("rank {rank} is not reachable through this endpoint: {reason}")]
    Unreachable {
        /// The rank.
        rank: u32,
        /// Why.
        reason: &'static str,
    },
    /// A message larger than the protocol can describe (a rendezvous length
    /// is 32 bits).
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The matching model refused an event or a post.
    #[error(transparent)]
    Match(#[from] tm_match::Error),
    /// A header did not encode or decode.
    #[error(transparent)]
    Proto(#[from] tm_proto::Error),
}

impl Error {
    /// A verb's errno as an [`Error::Verbs`].
    pub const fn verbs(call: &'static str, errno: i32) -> Self {
        Error::Verbs { call, errno }
    }

    /// The errno of a verb failure, if this is one.
    pub const fn errno(&self) -> Option<i32> {
        match self {
            Error::Verbs { errno, .. } | Error::PostOps { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    pub(crate) fn io(what: &'static str, e: impl std::fmt::Display) -> Self {
        Error::Io {
            what,
            message: e.to_string(),
        }
    }
}

/// This crate's result.
pub type Result<T, E = Error> = core::result::Result<T, E>;
