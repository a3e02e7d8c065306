//! # adi: the thin ADI of tmx
//!
//! The device layer after MPICH's second-generation ADI (Gropp and Lusk's
//! ADI-2 paper): contiguous fast paths,
//! datatype paths built on them, requests owned by the upper layer.
//!
//! **What it does.** [`init`] bootstraps through the launcher's PMI client
//! (`tmrun`, Hydra, Slurm, or a singleton) and returns `MPI_COMM_WORLD` as a
//! [`Comm`]; the [`device`] chooses a transport per peer (self → local copy,
//! same node → `shmem-onesided`, other node → the remote transport:
//! `verbs-tm`'s TM-SRQ endpoint, over a tag-matching RDMA NIC or its
//! software provider over TCP, or the socket test double that
//! [`ENV_TEST_NODES`] turns on) and progresses requests through one
//! internal transport seam; matching and protocols are the transports'. On top:
//! blocking, nonblocking, synchronous, ready
//! and buffered sends, probes and matched probes, cancel, persistent
//! requests, datatype sends, `sendrecv`; groups ([`Group`]),
//! communicators ([`Comm::dup`], [`Comm::split`], [`Comm::create`], ...),
//! intercommunicators ([`InterComm`]), topologies ([`topo`]), and every
//! MPI collective, blocking and nonblocking, on packed data for any
//! [`Op`] and datatype (algorithms chosen by size and process count as
//! MPICH does; [`ENV_COLL_ALGORITHMS`]).
//!
//! ```
//! // Without a launcher this is a singleton (rank 0 of 1): talk to itself.
//! let world = adi::init()?;
//! let me = world.rank();
//! let mut r = world.irecv(vec![0u8; 16], adi::Source::Any, adi::Tag::Any)?;
//! world.send(b"hello", me, 7)?;
//! let st = world.wait(&mut r)?;
//! assert_eq!((st.source, st.tag, st.count), (me, 7, 5));
//! assert_eq!(&r.take_buffer().unwrap()[..5], b"hello");
//! adi::finalize()?;
//! # Ok::<(), adi::Error>(())
//! ```
//!
//! The building blocks stand on their own:
//!
//! - [`datatype`]: [`Datatype`] constructors (contiguous, vector, hvector,
//!   indexed, hindexed, indexed_block, hindexed_block, struct, subarray,
//!   darray, resized, dup, nested), envelope and contents, bounds, commit,
//!   a flattened form, pack/unpack with resumable byte-offset parts,
//!   `external32`, and the paper's three-case [`plan_send`] for
//!   non-contiguous sends.
//! - [`mod@request`]: the [`Request`]/[`Completer`] pair (made by [`request()`]) and its loom-checked
//!   completion hand-off, [`Status`], the [`Progress`] hook, and
//!   test/wait/waitall/waitany/waitsome/testall/testany/testsome.
//! - [`error`]: [`ErrorClass`] (MPI-3 classes with MPICH's values) and
//!   [`Error`], with the `tm_proto`, `shmem_onesided` and launcher mappings.
//! - [`wtime`]/[`wtick`] and the attributes in [`attr`] ([`attr::TAG_UB`],
//!   ...).
//! - [`mod@win`]: RMA windows ([`Win`]: create/allocate/free, put/get/
//!   accumulate/get_accumulate/fetch_and_op/compare_and_swap and their
//!   request forms, every synchronization call; dynamic windows): one epoch
//!   machine (`rma_epoch::Engine`) per process, and per target a backend:
//!   same-node targets by direct load/store through the node segment (or
//!   CMA) with shared-memory synchronization, others by active messages
//!   inside the device's progress; and shared-memory windows
//!   ([`SharedWin`]).
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
//! `unsafe_code` is denied crate-wide and allowed only where memory is
//! lent across a call or owned by one thread, each block with its
//! `SAFETY` comment: `core_cell`, the device core owned by one thread
//! under [`ThreadLevel::Funneled`] (a `RefCell` plus a thread check,
//! instead of a lock); [`lent`] and the device's and transports' lent
//! paths, whose callers lend their memory until a request completes
//! (MPI's own rule: [`Comm::isend_raw`], [`Comm::irecv_raw`]); the
//! blocking collectives that send and receive on the caller's memory
//! (`coll::algo::direct`, `coll::task`); and `win::mem`, the slice over
//! memory a window borrows from its caller ([`Win::create_raw`],
//! [`Win::attach_raw`], whose contracts make it sound). Otherwise buffers
//! are slices and every access is bounds-checked before any byte moves.
#![deny(unsafe_code)]
#![warn(missing_docs)]
// `option.ok_or(Error::…)` builds the error before it knows it is needed,
// and on the success path calls `Error`'s drop glue out of line to get rid
// of it: 7.8% of a small datatype send's samples in `perf`.
// The crate writes `ok_or_else(|| Error::…)`, which clippy calls unneeded.
#![allow(clippy::unnecessary_lazy_evaluations)]

pub mod attr;
mod coll;
pub mod comm;
#[allow(unsafe_code)]
mod core_cell;
pub mod datatype;
pub mod device;
pub mod error;
pub mod group;
mod init;
pub mod inter;
#[allow(unsafe_code)]
pub mod lent;
mod mem;
#[allow(unsafe_code)]
mod p2p;
pub mod request;
mod sync;
mod time;
pub mod topo;
mod transport;
pub mod win;

pub use coll::op::{reduce_local, Op, UserFn};
pub use coll::{equal_blocks, InterRoot, ReduceOp, Reducible, ENV_COLL_ALGORITHMS};
pub use comm::{startall, Attributes, Comm, Message, Persistent, Source, Tag};
pub use core_cell::ThreadLevel;
pub use device::{Counters, Route, BSEND_OVERHEAD, DEFAULT_SPIN, ENV_COUNTERS, ENV_SPIN};
pub use init::{
    abort, finalize, init, init_thread, is_initialized, on_peer_death, query_thread, OnPeerDeath,
};
pub use transport::double::ENV_TEST_NODES;

pub use attr::UNDEFINED;
pub use datatype::{plan_send, BasicType, Combiner, Datatype, PlanLimits, SendPlan};
pub use error::{Error, ErrorClass};
pub use group::{Comparison, Group};
pub use inter::InterComm;
pub use request::{
    request, testall, testany, testsome, waitall, waitany, waitsome, AnyOutcome, Completer,
    Progress, Request, Status, YieldProgress,
};
pub use time::{wtick, wtime};
pub use win::{AccOp, ElemType, LockType, SharedRegion, SharedWin, Win, WinPath};

// Communicators and requests may move between and be shared by threads
// (the device is thread-safe): checked at compile time.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Comm>();
    send_sync::<Request>();
    send_sync::<Persistent>();
    send_sync::<Message>();
};

// The README's examples are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
