//! # shmem-onesided
//!
//! The intra-node transport of tmx, after the MP_Lite SHMEM module: a node
//! segment shared by every local rank, a symmetric heap with one-sided
//! [`Node::put`]/[`Node::get`], CMA single copy to arbitrary memory of a local
//! process, and per-pair single-producer/single-consumer **header rings** of
//! 64-byte slots in the receiver's memory, with per-pair **prepost rings** in
//! the other direction.
//!
//! - [`ring`]: the header ring ([`ring::Producer`], [`ring::Consumer`],
//!   [`ring::Outbox`] for backpressure without loss), generic over the memory
//!   it lives in ([`ring::RingRef`]): the node segment, or the heap under loom.
//! - [`prepost`]: the prepost ring, its claim/withdraw race and the phase
//!   counters that make a prepost trustworthy (the MP_Lite "gap").
//! - [`heap`]: the deterministic symmetric-heap allocator.
//! - [`winsync`]: the shared-memory synchronization of RMA windows (ticket
//!   reader-writer lock, fence counters, PSCW counters).
//! - [`Segment`]: creation, attach protocol, layout, liveness.
//! - [`Node`]: the one-sided API and its completion semantics.
//! - [`Endpoint`]: tagged two-sided messaging (inline, buffered, CMA and
//!   prepost-direct paths; blocking and nonblocking receives), MPI matching
//!   and the prepost policy through tm-match's offload model, backpressure
//!   and blocking progress.
//!
//! Configuration comes from `TMX_SHMEM_*` variables ([`Config`]).
//!
//! ```no_run
//! use shmem_onesided::{Config, Endpoint, Node};
//! use tm_proto::{MatchSpec, Source, Tag};
//!
//! // Every local rank runs this with its own rank (e.g. from the launcher).
//! let (rank, size) = (0, 2);
//! let node = Node::init("job42", rank, size, Config::from_env()?)?;
//! let mut ep = Endpoint::new(node);
//! if rank == 0 {
//!     ep.send(1, 7, 0, b"hello")?;
//! } else {
//!     let mut buf = [0u8; 16];
//!     let st = ep.recv(MatchSpec { context_id: 0, source: Source::Rank(0), tag: Tag::Value(7) }, &mut buf)?;
//!     assert_eq!(&buf[..st.len], b"hello");
//! }
//! println!("{}", ep.finalize()?);
//! # Ok::<(), shmem_onesided::Error>(())
//! ```
#![warn(missing_docs)]

// The README's examples are compiled (and run, unless marked `no_run`) as
// doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod sync;

#[cfg(not(tmx_shmem_loom))]
mod calibrate;
pub mod config;
mod copy;
mod counters;
mod eager;
mod error;
pub mod heap;
#[cfg(not(tmx_shmem_loom))]
mod idmap;
#[cfg_attr(tmx_shmem_loom, allow(dead_code))]
mod prefetch;
pub mod prepost;
#[cfg(not(tmx_shmem_loom))]
mod reply_calibrate;
pub mod ring;
pub mod winsync;

#[cfg(not(tmx_shmem_loom))]
mod endpoint;
#[cfg(not(tmx_shmem_loom))]
mod node;
#[cfg(not(tmx_shmem_loom))]
pub mod segment;

#[cfg(not(tmx_shmem_loom))]
pub use calibrate::{Calibration, CalibrationPoint};
pub use config::{CmaMode, Config};
pub use counters::Counters;
#[cfg(not(tmx_shmem_loom))]
pub use endpoint::{
    Endpoint, Flags, InPlace, Kind, Message, RecvDone, RecvFinished, RecvRequest, SendMode,
    SendRequest, Started, Status,
};
pub use error::{Error, Result};
#[cfg(not(tmx_shmem_loom))]
pub use idmap::{IdTable, Vacant};
#[cfg(not(tmx_shmem_loom))]
pub use node::{CmaStatus, Node, NodeView, Ptracer, SymAddr};
#[cfg(not(tmx_shmem_loom))]
pub use reply_calibrate::{decide_reply, ReplyCalibration, ReplyPoint, REPLY_SIZES};
#[cfg(not(tmx_shmem_loom))]
pub use segment::{segment_name, ArrivalWatch, Layout, Place, Reservation, Segment};
