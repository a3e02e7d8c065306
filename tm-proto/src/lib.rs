//! # tm-proto: wire codecs for MPI tag matching
//!
//! The bytes tmx puts on a wire or in a shared ring, and nothing else:
//!
//! - [`Tmh`] and [`Rvh`]: the 16-byte Tag Matching Header and Rendezvous Header
//!   of rdma-core's `infiniband/tm_types.h`, byte for byte (big-endian fields), so
//!   our messages are matched by real ConnectX TM-SRQs and interoperate with other
//!   TM users such as UCX.
//! - [`Message`]: the four message kinds a TM-SRQ distinguishes (eager,
//!   rendezvous request, FIN, no-tag), decoded without copying and encoded into a
//!   caller's buffer; [`Control`]: the driver's own messages (a send's
//!   cancellation) in a no-tag message's body.
//! - [`TagLayout`]: the MPI envelope `(context id, source, tag)` packed into the
//!   64-bit TM tag, and a receive's [`MatchSpec`] turned into a [`TagMask`] so that
//!   `((msg_tag ^ tag) & mask) == 0` is exactly MPI matching.
//!
//! **Architecture invariant:** this crate does no I/O, spawns no threads, reads
//! no clock and contains no `unsafe`. Decoding arbitrary bytes returns `Ok` or a
//! typed [`Error`]; it never panics.
//!
//! ```
//! use tm_proto::{Envelope, Limits, Message, MatchSpec, Opcode, Source, Tag, TagLayout, Tmh};
//!
//! let layout = TagLayout::DEFAULT;
//! let tag = layout.encode(Envelope { context_id: 4, source: 1, tag: 99 })?;
//! let msg = Message::Eager { tmh: Tmh::new(Opcode::Eager, 0, tag), payload: b"hello" };
//! let mut buf = [0u8; 64];
//! let n = msg.encode(&mut buf, Limits::MLX5)?;
//! assert_eq!(Message::decode(&buf[..n], Limits::MLX5)?, msg);
//!
//! // A receive for (context 4, ANY_SOURCE, tag 99) as a TM-SRQ list entry:
//! let entry = layout.match_bits(MatchSpec { context_id: 4, source: Source::Any, tag: Tag::Value(99) })?;
//! assert!(entry.matches(tag));
//! # Ok::<(), tm_proto::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![no_std]

mod control;
mod envelope;
mod error;
mod fixed;
mod header;
mod message;
pub mod rma;

pub use control::{Control, CONTROL_LEN};
pub use envelope::{Envelope, MatchSpec, Source, Tag, TagLayout, TagMask};
pub use error::{Error, Field};
pub use header::{Opcode, Rvh, Tmh};
pub use message::{Limits, Message, FIN_LEN};

// The README's examples are compiled (and run, unless marked `no_run`) as
// doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
