//! # shmem-onesided
//!
//! Intra-node SHMEM put/get transport: node segment, symmetric heap, per-peer circular header queues, single-copy paths.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! issue #4 (shmem-onesided: the intra-node SHMEM put/get transport) fills it. Nothing here pretends otherwise.

#![warn(missing_docs)]
