//! # tm-match
//!
//! Sans-IO MPI matching engine: posted/unexpected queues, wildcards, probe/cancel, and the offload (bounded prefix, phase sync) model.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! issue #3 (tm-match: an exact, constant-time MPI matching engine) fills it. Nothing here pretends otherwise.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
