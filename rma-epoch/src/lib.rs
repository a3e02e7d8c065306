//! # rma-epoch: MPI-3 RMA epochs as sans-IO state machines
//!
//! The origin and target sides of MPI one-sided communication after MPICH's
//! "New RMA Design", with the corrections its ch3 code makes:
//!
//! - an **operation table**: a fixed slot array of target lists, target elements
//!   with per-target lock state, and op elements that are pending or issued;
//! - **two-level element pools** (per window, then global), bounded; an element
//!   returns to the pool it came from; when both are empty the
//!   `RESTORE_*` steps flush a target to reclaim one, switching off the
//!   optimizations that hold resources;
//! - the **synchronization algorithms**: FENCE (with `NOPRECEDE`/`NOSUCCEED`),
//!   PSCW, LOCK/UNLOCK (shared/exclusive, `MODE_NOCHECK`), LOCK_ALL (lazy
//!   per-target locks, falling back to the window protocol when target elements
//!   run out), FLUSH/FLUSH_LOCAL(_ALL), the single-short-op LOCK-OP-UNLOCK
//!   packet and RMA_DONE (FLUSH) piggybacking;
//! - the **target side**: shared/exclusive grant rules, a bounded lock queue
//!   with a bounded buffer for piggybacked data, acknowledgements, the PSCW
//!   completion counter, and [`Counters`];
//! - **per-target backends** ([`backend`]): a target is reached by active
//!   messages (packets, the above) or directly (the driver loads and stores
//!   its memory itself, after the gate [`Engine::direct_access`], and
//!   carries out the [`DirectAction`]s: locks, barrier and PSCW signals in
//!   shared memory). One window may mix both; its epochs are this one
//!   state machine either way.
//!
//! **Architecture invariant:** this crate does no I/O, spawns no threads, reads
//! no clock and contains no `unsafe`. User calls and events go in
//! (`fence`, `put`, [`Engine::handle_packet`], [`Engine::handle_barrier_complete`]);
//! actions come out of [`Engine::poll_action`]: packets to send (encoded with
//! [`tm_proto::rma`]), barriers to start, read results, and completions of calls
//! that could not finish at once. Invalid use returns a typed [`Error`]; no
//! input from the caller or the wire makes it panic.
//!
//! Channels between two processes are assumed to deliver in order (as MPICH's
//! ch3 virtual connections do); different channels may interleave arbitrarily.
//!
//! ```
//! use rma_epoch::{Action, CallStatus, Engine, WindowConfig};
//!
//! // Two processes, one window of 8 bytes each, a fence epoch with one put.
//! let mut procs = [Engine::default(), Engine::default()];
//! let mut mem = [vec![0u8; 8], vec![0u8; 8]];
//! for (rank, e) in procs.iter_mut().enumerate() {
//!     e.create_window(WindowConfig::new(2, rank as u32, 8))?;
//!     e.fence(0, 0)?; // opening fence: waits for a barrier
//! }
//! // A tiny driver: deliver packets, complete a barrier once both asked.
//! fn drive(procs: &mut [Engine; 2], mem: &mut [Vec<u8>; 2]) {
//!     let mut barrier = [0u32; 2];
//!     loop {
//!         let mut moved = false;
//!         for me in 0..2 {
//!             while let Some(a) = procs[me].poll_action() {
//!                 moved = true;
//!                 match a {
//!                     Action::Send { to, bytes } => {
//!                         let to = to as usize;
//!                         procs[to].handle_packet(me as u32, &bytes, mem[to].as_mut_slice()).unwrap();
//!                     }
//!                     Action::Barrier { .. } => barrier[me] += 1,
//!                     _ => {}
//!                 }
//!             }
//!         }
//!         if barrier[0] > 0 && barrier[1] > 0 {
//!             barrier = [barrier[0] - 1, barrier[1] - 1];
//!             for p in procs.iter_mut() { p.handle_barrier_complete(0).unwrap(); }
//!             moved = true;
//!         }
//!         if !moved { break; }
//!     }
//! }
//! drive(&mut procs, &mut mem);
//! procs[0].put(0, 1, 0, &42u64.to_ne_bytes())?;
//! assert_eq!(procs[0].fence(0, rma_epoch::assert::NOSUCCEED)?, CallStatus::Pending);
//! assert_eq!(procs[1].fence(0, rma_epoch::assert::NOSUCCEED)?, CallStatus::Pending);
//! drive(&mut procs, &mut mem);
//! assert_eq!(procs[0].blocked(0), None);
//! assert_eq!(u64::from_ne_bytes(mem[1][..8].try_into().unwrap()), 42);
//! # Ok::<(), rma_epoch::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::VecDeque;

use tm_proto::rma::RmaHeader;

pub mod acc;
pub mod backend;
mod config;
mod counters;
mod engine;
mod error;
mod pool;
mod target;

pub use backend::{Access, Backends, DirectAction, DirectFence, Gate};
pub use config::{GlobalConfig, WindowConfig};
pub use counters::Counters;
pub use engine::{assert, AccessState, Engine, ExposureState, Posted, TargetState, WindowMemory};
pub use error::Error;
pub use pool::{PoolKind, PoolStats};
pub use target::{LockHolder, TargetLock};
pub use tm_proto::rma::{AccOp, ElemType};

/// A process rank in the window's communicator.
pub type Rank = u32;
/// A window id (windows are created collectively, so ids agree across ranks).
pub type WinId = u32;
/// `MPI_PROC_NULL`: an op to it is a no-op.
pub const PROC_NULL: Rank = u32::MAX;

/// `op_id` of packets that concern no op element.
pub(crate) const NO_OP_ID: u32 = u32::MAX;
/// `op_id` of the window protocol's LOCK packets (LOCK_ALL fallback).
pub(crate) const WIN_LOCK_ID: u32 = u32::MAX - 1;

/// Names a read's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpToken(pub u64);

/// Whether a user call finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// Finished: the next call may follow.
    Done,
    /// In progress: drive events until [`Action::Completed`] for this window.
    Pending,
}

/// The user calls that can be [`CallStatus::Pending`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// `MPI_Win_fence`.
    Fence,
    /// `MPI_Win_complete`.
    Complete,
    /// `MPI_Win_wait`.
    Wait,
    /// `MPI_Win_lock` (waiting for a target element).
    Lock,
    /// `MPI_Win_unlock`.
    Unlock,
    /// `MPI_Win_unlock_all`.
    UnlockAll,
    /// `MPI_Win_flush`.
    Flush,
    /// `MPI_Win_flush_local`.
    FlushLocal,
    /// `MPI_Win_flush_all`.
    FlushAll,
    /// `MPI_Win_flush_local_all`.
    FlushLocalAll,
    /// An RMA op waiting for pool resources.
    Op,
    /// `MPI_Win_free`.
    Free,
}

/// What the engine asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes (one [`tm_proto::rma::RmaPacket`]) to `to`, in order
    /// with earlier sends to the same rank.
    Send {
        /// Destination rank.
        to: Rank,
        /// The encoded packet.
        bytes: Vec<u8>,
    },
    /// Start a barrier over the window's communicator and report its end with
    /// [`Engine::handle_barrier_complete`].
    Barrier {
        /// The window.
        win: WinId,
    },
    /// A read (get, get-accumulate, fetch-and-op, compare-and-swap) finished.
    Result {
        /// The window.
        win: WinId,
        /// The token its call returned.
        token: OpToken,
        /// The data read (old contents for the atomics).
        data: Vec<u8>,
    },
    /// A call that returned [`CallStatus::Pending`] finished.
    Completed {
        /// The window.
        win: WinId,
        /// Which call.
        call: Call,
    },
    /// Take this process's own lock of `win` in shared memory (the one its
    /// direct origins take), on behalf of active-message origins, and report
    /// [`Engine::handle_target_lock_granted`] once held (see
    /// [`crate::backend`]), with the mode entered. Exclusive: enter only
    /// when the lock is idle, taking no place in its queue, because a later
    /// `TargetLock` (shared) replaces a request not granted yet. A
    /// `TargetLock` that arrives while the lock is held is stale (the
    /// request it replaced was granted first, and reported so): ignore it.
    /// A shared request is never replaced.
    TargetLock {
        /// The window.
        win: WinId,
        /// The mode.
        exclusive: bool,
    },
    /// Release the lock [`Action::TargetLock`] took (after a full memory
    /// barrier).
    TargetUnlock {
        /// The window.
        win: WinId,
        /// The mode it was held in.
        exclusive: bool,
    },
}

pub(crate) fn emit(out: &mut VecDeque<Action>, to: Rank, hdr: RmaHeader, payload: &[u8]) {
    let mut bytes = Vec::with_capacity(RmaHeader::LEN + payload.len());
    bytes.extend_from_slice(&hdr.to_bytes());
    bytes.extend_from_slice(payload);
    out.push_back(Action::Send { to, bytes });
}

// The README's examples are compiled (and run, unless marked `no_run`) as
// doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
