//! # launcher
//!
//! tmrun and the PMI-1/PMI-2 client and server, interoperable with MPICH's Hydra and Slurm.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! issue #5 (launcher: tmrun and the PMI wire protocol) fills it. Nothing here pretends otherwise.

#![warn(missing_docs)]
