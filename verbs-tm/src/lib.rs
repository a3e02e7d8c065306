//! # verbs-tm
//!
//! TM-SRQ driver over a provider trait: real ibverbs, and a faithful software provider for machines without an RDMA NIC.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! a later issue (the verbs-tm TM-SRQ driver; not yet filed) fills it. Nothing here pretends otherwise.

#![warn(missing_docs)]
