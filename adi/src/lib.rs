//! # adi
//!
//! The thin ADI: requests, progress, transport choice and datatypes composing matching, transports and launcher into MPI point-to-point.
//!
//! **Status: placeholder.** This crate compiles but has no functionality yet;
//! issue #6 (adi: the thin ADI) fills it. Nothing here pretends otherwise.

#![warn(missing_docs)]
