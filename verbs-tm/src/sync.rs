//! The sync shim: `core`'s atomics normally, loom's under
//! `--cfg tmx_verbs_loom`, so that `tests/loom.rs` model-checks the very
//! hand-off code [`crate::soft::Live`] runs (crossbeam's `primitive`
//! pattern; see CONTRIBUTING.md).

#[cfg(not(tmx_verbs_loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
#[cfg(tmx_verbs_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
