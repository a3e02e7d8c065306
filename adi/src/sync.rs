//! The synchronization primitives of the request completion hand-off, swapped
//! for loom's under `--cfg tmx_adi_loom` (crossbeam's `primitive` pattern),
//! so that `tests/loom.rs` model-checks the very code that ships.
//!
//! Only cross-thread request state goes through this module. Datatypes use
//! `std::sync::{Arc, OnceLock}` directly: they are immutable after commit and
//! have no hand-off protocol of their own to check.

#[cfg(tmx_adi_loom)]
pub(crate) use loom::sync::{
    atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering},
    Arc, Mutex,
};
#[cfg(tmx_adi_loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(tmx_adi_loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
#[cfg(not(tmx_adi_loom))]
pub(crate) use std::sync::{Arc, Mutex};
#[cfg(not(tmx_adi_loom))]
pub(crate) use std::thread::yield_now;
