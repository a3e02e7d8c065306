//! # rma-epoch
//!
//! Sans-IO MPI-3 RMA epoch state machines after MPICH's new RMA design: op table, pools, origin and target sides.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! issue #7 (rma-epoch: MPI-3 RMA state machines) fills it. Nothing here pretends otherwise.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
