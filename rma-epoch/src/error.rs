//! The one error type of this crate.

use crate::{AccessState, Rank, WinId};

/// Invalid use of the RMA API, or a malformed packet.
///
/// Every user call checks its preconditions and returns one of these instead of
/// panicking; `adi` maps them to MPI error classes (`MPI_ERR_RMA_SYNC`,
/// `MPI_ERR_RANK`, `MPI_ERR_WIN`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No window with this id exists (never created, or freed).
    #[error("no window with id {0}")]
    NoSuchWindow(WinId),
    /// An RMA operation was posted outside any access epoch
    /// (`MPI_ERR_RMA_SYNC`).
    #[error("RMA operation on window {win} outside an access epoch (state {state:?})")]
    NoEpoch {
        /// The window.
        win: WinId,
        /// Its access state.
        state: AccessState,
    },
    /// A synchronization call that does not fit the current epoch, e.g.
    /// `complete` in a lock epoch or `fence` during PSCW (`MPI_ERR_RMA_SYNC`).
    #[error("{call} not allowed on window {win} in access state {state:?}")]
    WrongEpoch {
        /// The window.
        win: WinId,
        /// The call that was refused.
        call: &'static str,
        /// The access state it found.
        state: AccessState,
    },
    /// `post`/`wait`/`test`/`fence` did not fit the exposure epoch.
    #[error("{call} not allowed on window {win}: exposure epoch {exposed}")]
    WrongExposure {
        /// The window.
        win: WinId,
        /// The call that was refused.
        call: &'static str,
        /// Whether a PSCW exposure epoch is open.
        exposed: bool,
    },
    /// `lock` of a target this origin has already locked.
    #[error("target {target} of window {win} is already locked by this origin")]
    AlreadyLocked {
        /// The window.
        win: WinId,
        /// The target.
        target: Rank,
    },
    /// `unlock` (or an op) for a target that is not locked.
    #[error("target {target} of window {win} is not locked")]
    NotLocked {
        /// The window.
        win: WinId,
        /// The target.
        target: Rank,
    },
    /// An op in a PSCW epoch to a rank outside the `start` group.
    #[error("target {target} is not in the access group of window {win}")]
    NotInGroup {
        /// The window.
        win: WinId,
        /// The target.
        target: Rank,
    },
    /// A rank outside `0..comm_size`.
    #[error("rank {rank} out of range: window {win} has {comm_size} ranks")]
    RankOutOfRange {
        /// The window.
        win: WinId,
        /// The rank given.
        rank: Rank,
        /// Size of the window's communicator.
        comm_size: u32,
    },
    /// A blocking call is still in progress on this window: drive progress
    /// (deliver packets, barrier completions) until it completes first.
    #[error("window {win} is still completing {call}")]
    CallInProgress {
        /// The window.
        win: WinId,
        /// The call in progress.
        call: &'static str,
    },
    /// An accumulate whose operation does not apply to its element type, or
    /// whose length is not a whole number of elements.
    #[error("accumulate {op:?} on {len} bytes of {elem:?} is invalid")]
    InvalidAccumulate {
        /// The operation.
        op: tm_proto::rma::AccOp,
        /// The element type.
        elem: tm_proto::rma::ElemType,
        /// The data length in bytes.
        len: usize,
    },
    /// An operation larger than the wire allows (`u32::MAX` bytes).
    #[error("operation of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// Bytes requested.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A configuration value that cannot work (a zero pool, an unparsable
    /// `TMX_RMA_*` variable).
    #[error("invalid configuration {name}={value}: {reason}")]
    Config {
        /// The setting (environment variable name).
        name: &'static str,
        /// The value given.
        value: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A packet that does not decode.
    #[error("malformed RMA packet from rank {from}: {source}")]
    Packet {
        /// The sender.
        from: Rank,
        /// What the codec reported.
        source: tm_proto::Error,
    },
    /// An operation given to the wrong backend: a direct target's operation
    /// goes through [`crate::Engine::direct_access`] (the driver loads and
    /// stores itself), another target's through `put`, `get`, ...
    #[error("target {target} of window {win} is {}", if *direct { "reached directly, not by active messages" } else { "reached by active messages, not directly" })]
    WrongBackend {
        /// The window.
        win: WinId,
        /// The target.
        target: Rank,
        /// Whether it is a direct target.
        direct: bool,
    },
    /// `free_window` while epochs are open.
    #[error("window {win} cannot be freed in access state {state:?}")]
    FreeInEpoch {
        /// The window.
        win: WinId,
        /// Its access state.
        state: AccessState,
    },
}
