//! # adi: the thin ADI of tmx
//!
//! The device layer after MPICH's second-generation ADI
//! (`../shared/seeds/mpich-second-generation-adi.txt`): contiguous fast paths,
//! datatype paths built on them, requests owned by the upper layer.
//!
//! **Status.** This release holds the parts that stand on their own; the
//! composition with matching, transports and the launcher (init/finalize,
//! point-to-point protocols, communicators) comes later and plugs into them:
//!
//! - [`datatype`]: [`Datatype`] constructors (contiguous, vector, hvector,
//!   indexed, hindexed, struct, resized, nested), bounds, commit, a flattened
//!   form, pack/unpack with resumable byte-offset parts, and the paper's
//!   three-case [`plan_send`] for non-contiguous sends.
//! - [`mod@request`]: the [`Request`]/[`Completer`] pair (made by [`request()`]) and its loom-checked
//!   completion hand-off, [`Status`], the [`Progress`] hook, and
//!   test/wait/waitall/waitany/waitsome/testall/testany/testsome.
//! - [`error`]: [`ErrorClass`] (MPI-3 classes with MPICH's values) and
//!   [`Error`], with the `tm_proto` error mapping.
//! - [`wtime`]/[`wtick`] and the transport-independent attributes in
//!   [`attr`] ([`attr::TAG_UB`], ...).
//!
//! ```
//! use adi::{BasicType, Datatype, request, Status, YieldProgress};
//!
//! // A struct { i32 a; f64 b; } laid out as in C: 4 bytes of padding.
//! let t = Datatype::struct_type(
//!     &[1, 1],
//!     &[0, 8],
//!     &[Datatype::basic(BasicType::I32), Datatype::basic(BasicType::F64)],
//! )?;
//! t.commit()?;
//! assert_eq!((t.size(), t.extent()), (12, 16));
//!
//! // The upper layer owns the request; the device completes it.
//! let (mut req, done) = request();
//! done.complete(Status::new(0, 5, 12));
//! assert_eq!(req.wait(&mut YieldProgress)?.count_of(&t), Some(1));
//! # Ok::<(), adi::Error>(())
//! ```
//!
//! No `unsafe` code: buffers are slices and every access is bounds-checked
//! before any byte moves.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attr;
pub mod datatype;
pub mod error;
pub mod request;
mod sync;
mod time;

pub use datatype::{plan_send, BasicType, Combiner, Datatype, PlanLimits, SendPlan};
pub use error::{Error, ErrorClass};
pub use request::{
    request, testall, testany, testsome, waitall, waitany, waitsome, AnyOutcome, Completer,
    Progress, Request, Status, YieldProgress,
};
pub use time::{wtick, wtime};
