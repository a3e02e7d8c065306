//! # tm-match: an exact, constant-time MPI matching engine
//!
//! Pure matching logic for an MPI device layer, generic over the caller's
//! receive and message handles. No I/O, no threads, no clock, no `unsafe`.
//!
//! - [`Matcher`]: the posted-receive and unexpected-message queues. Post a
//!   receive, a message arrives, probe, improbe/mprobe, cancel, drain and
//!   inspect, with exact MPI ordering (non-overtaking per source and context,
//!   earliest posted receive wins, earliest arrived message wins) and expected
//!   O(1) cost for every receive shape — exact, `ANY_SOURCE`, `ANY_TAG` and
//!   both — at any queue depth. See [`matcher`] for the data structure.
//! - [`Offload`]: the software side of an engine that holds a bounded prefix of
//!   the posted receives (a TM-SRQ, or a shared-memory prepost queue): which
//!   receives it may hold, the 16-bit unexpected counter and phase sync, and
//!   the race where software must withdraw an entry the engine holds; the
//!   engine's own rule ([`EngineScan`]); and the transport's fast paths,
//!   decided by the model too (a receive that is not posted, deferred
//!   receives). See [`offload`].
//! - [`reference::ReferenceMatcher`]: the MPI rules written literally, for
//!   differential tests.
//!
//! Envelopes, match specs and tag/mask entries are tm-proto's [`Envelope`],
//! [`MatchSpec`] and [`TagMask`].
//!
//! ```
//! use tm_match::{Arrived, Matcher, Posted};
//! use tm_proto::{Envelope, MatchSpec, Source, Tag};
//!
//! let mut m: Matcher<&str, u32> = Matcher::new();
//! let any = MatchSpec { context_id: 0, source: Source::Any, tag: Tag::Any };
//! let exact = MatchSpec { context_id: 0, source: Source::Rank(1), tag: Tag::Value(5) };
//!
//! // Two receives; the earlier-posted wildcard wins the first message.
//! let Posted::Queued(_wild) = m.post(any, "wildcard")? else { unreachable!() };
//! let Posted::Queued(_ex) = m.post(exact, "exact")? else { unreachable!() };
//! let env = Envelope { context_id: 0, source: 1, tag: 5 };
//! let Arrived::Matched { recv, .. } = m.arrive(env, 100)? else { unreachable!() };
//! assert_eq!(recv, "wildcard");
//! let Arrived::Matched { recv, .. } = m.arrive(env, 101)? else { unreachable!() };
//! assert_eq!(recv, "exact");
//!
//! // Unexpected messages are found by probe and taken by mprobe in arrival order.
//! let _ = m.arrive(Envelope { context_id: 0, source: 2, tag: 9 }, 200)?;
//! let _ = m.arrive(Envelope { context_id: 0, source: 3, tag: 9 }, 201)?;
//! let by_tag = MatchSpec { context_id: 0, source: Source::Any, tag: Tag::Value(9) };
//! assert_eq!(m.probe(&by_tag).map(|p| *p.msg), Some(200));
//! assert_eq!(m.improbe(&by_tag).map(|p| p.msg), Some(200));
//! assert_eq!(m.improbe(&by_tag).map(|p| p.msg), Some(201));
//! # Ok::<(), tm_match::Error>(())
//! ```
//!
//! Messages must be handed to [`Matcher::arrive`] in per-(source, context)
//! send order; a transport that can reorder puts a sequence stage in front.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod hash;
pub mod matcher;
pub mod offload;
pub mod reference;
mod slab;

pub use error::Error;
pub use matcher::{
    Arrived, MatchedMessage, Matcher, MsgId, Peeked, Posted, PostedEntry, RecvId, Shape,
};
pub use offload::{
    Action, CancelOutcome, Completion, EngineEvent, EngineScan, Offload, OffloadConfig, PeekedRecv,
    PostOutcome, Unposted, UnpostedTurn,
};
pub use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout, TagMask};

// The README's examples are compiled (and run, unless marked `no_run`) as
// doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
