//! The one error type of this crate.

use crate::{MatchSpec, RecvId};

/// Everything that can go wrong in [`Matcher`](crate::Matcher) and
/// [`Offload`](crate::Offload).
///
/// Matching itself never fails: an unmatched receive or message is queued. The
/// errors are about capacity limits, envelopes the engine's tag layout cannot
/// carry, and engine events that do not fit the model's state (a driver bug or
/// a misbehaving engine).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// More than `u32::MAX - 1` entries would be queued on one side.
    #[error("the {side} queue is full: at most {max} entries")]
    QueueFull {
        /// `"posted"` or `"unexpected"`.
        side: &'static str,
        /// The limit.
        max: u64,
    },
    /// The envelope or match spec does not fit the offload engine's tag layout.
    #[error("{spec:?} cannot be expressed in the engine's tag layout: {source}")]
    Layout {
        /// The receive or (as an exact spec) message that did not fit.
        spec: MatchSpec,
        /// What tm-proto reported.
        source: tm_proto::Error,
    },
    /// An engine event names a handle the model never handed to the engine, or
    /// one it no longer holds.
    #[error("engine event {event} for unknown handle {handle:?}")]
    UnknownHandle {
        /// The event's name.
        event: &'static str,
        /// The handle it carried.
        handle: RecvId,
    },
    /// An engine event arrived in a state where it cannot happen (for example a
    /// `Deleted` for a receive the model never asked to delete).
    #[error("engine event {event} for {handle:?} in state {state}")]
    UnexpectedEvent {
        /// The event's name.
        event: &'static str,
        /// The handle it carried.
        handle: RecvId,
        /// The model's state for that receive.
        state: &'static str,
    },
    /// The engine reported more occupied entries than the configured capacity
    /// allows, or a capacity of zero was asked for where one is needed.
    #[error("invalid engine capacity: {reason}")]
    Capacity {
        /// What is wrong.
        reason: &'static str,
    },
}
