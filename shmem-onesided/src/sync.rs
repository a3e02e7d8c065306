//! The sync shim: one code path for the real build and for loom.
//!
//! Normally this re-exports `core::sync::atomic`; under
//! `RUSTFLAGS="--cfg tmx_shmem_loom"` it re-exports `loom::sync::atomic`, so
//! the ring and prepost code in this crate is model-checked exactly as it
//! runs (crossbeam's `primitive` pattern, see CONTRIBUTING.md).
//!
//! [`UnsafeCell`] has loom's `with`/`with_mut` API in both builds, so that loom
//! can report unsynchronised access to slot bodies as a causality violation.

#[cfg(not(tmx_shmem_loom))]
pub(crate) use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
#[cfg(tmx_shmem_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

/// `core::cell::UnsafeCell` with loom's closure API.
#[cfg(not(tmx_shmem_loom))]
#[derive(Debug)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(tmx_shmem_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        Self(core::cell::UnsafeCell::new(v))
    }
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(tmx_shmem_loom)]
pub(crate) use loom::cell::UnsafeCell;
