//! The cell that holds the device's core, and the thread levels it serves.
//!
//! Under [`ThreadLevel::Multiple`] (what [`crate::init`] gives) the core is
//! behind a `std::sync::Mutex`: any thread may call the device at any
//! time. On x86 an uncontended lock and unlock are two locked instructions,
//! each of which waits for the stores before it to leave the store buffer —
//! including the ring slot just written for the other core. On the
//! small-message paths that was ≈ 15% of a rank's time.
//!
//! Under [`ThreadLevel::Funneled`] (`MPI_THREAD_FUNNELED`: only the thread
//! that initialized the device calls it) the core is *owned* by that
//! thread: the cell records a token in a thread-local of the initializing
//! thread, and each access checks that token (one thread-local load and a
//! compare) instead of taking a lock. A call from any other thread gets
//! [`Error::ThreadLevel`] — a typed error, never a data race — as does a
//! re-entrant access on the owning thread (which under the mutex would have
//! been a deadlock).
//!
//! This module holds the only `unsafe` code of the crate: the owned cell
//! hands out `&mut` to its value after the two checks above, which is what
//! a `RefCell` does, plus the thread check that makes sharing it between
//! threads sound. There is no cross-thread protocol to model-check: no
//! thread other than the owner ever reads or writes the value or the
//! borrow flag (it fails the token check first).

use crate::Error;
use std::cell::{Cell, UnsafeCell};
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The thread support asked of, and provided by, [`crate::init_thread`]
/// (`MPI_THREAD_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ThreadLevel {
    /// `MPI_THREAD_SINGLE`: one thread in the process. Provided as
    /// [`ThreadLevel::Funneled`].
    Single,
    /// `MPI_THREAD_FUNNELED`: only the thread that called
    /// [`crate::init_thread`] calls the device; calls from other threads
    /// fail with [`Error::ThreadLevel`]. No lock on the fast paths.
    Funneled,
    /// `MPI_THREAD_SERIALIZED`: any thread, one at a time. Provided as
    /// [`ThreadLevel::Multiple`].
    Serialized,
    /// `MPI_THREAD_MULTIPLE`: any thread at any time (per-structure locks).
    Multiple,
}

impl ThreadLevel {
    /// The level the device provides when `self` is required: `Single` and
    /// `Funneled` give `Funneled`; `Serialized` and `Multiple` give
    /// `Multiple` (MPI allows providing more than required).
    pub fn provided(self) -> ThreadLevel {
        match self {
            ThreadLevel::Single | ThreadLevel::Funneled => ThreadLevel::Funneled,
            ThreadLevel::Serialized | ThreadLevel::Multiple => ThreadLevel::Multiple,
        }
    }
}

/// Source of owner tokens (0 is "owns nothing").
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The token of the owned cell this thread owns (0: none).
    static OWNER: Cell<u64> = const { Cell::new(0) };
}

/// The device core's cell: a mutex, or owned by one thread.
pub(crate) enum CoreCell<T> {
    /// [`ThreadLevel::Multiple`].
    Shared(Mutex<T>),
    /// [`ThreadLevel::Funneled`].
    Owned(Owned<T>),
}

/// A value only its owning thread may reach.
pub(crate) struct Owned<T> {
    /// Equal to the owning thread's `OWNER` value, and to no other
    /// thread's (tokens are never reused, and only [`CoreCell::new`] on the
    /// owning thread stores it).
    token: u64,
    /// Whether a guard is alive (read and written by the owner only).
    busy: Cell<bool>,
    value: UnsafeCell<T>,
}

// SAFETY: `Owned<T>` is shared between threads only as `&Owned<T>`, and
// the only way from `&Owned<T>` to `busy` or `value` is `CoreCell::lock`,
// which first checks that the calling thread's `OWNER` token equals
// `token`. Exactly one thread (the one that ran `CoreCell::new`) has that
// token, so `busy` and `value` are only ever touched by that one thread;
// the `busy` flag then makes the `&mut T` handed out unique, as `RefCell`
// does. `T: Send` because the value may be dropped (with the cell) on
// another thread once no reference remains.
unsafe impl<T: Send> Sync for Owned<T> {}

impl<T> CoreCell<T> {
    /// A cell for `level` (as provided, see [`ThreadLevel::provided`]);
    /// under `Funneled` the calling thread becomes its owner (and stops
    /// owning any cell it owned before).
    pub(crate) fn new(value: T, level: ThreadLevel) -> CoreCell<T> {
        match level.provided() {
            ThreadLevel::Funneled => {
                let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
                OWNER.with(|o| o.set(token));
                CoreCell::Owned(Owned {
                    token,
                    busy: Cell::new(false),
                    value: UnsafeCell::new(value),
                })
            }
            _ => CoreCell::Shared(Mutex::new(value)),
        }
    }

    /// The level this cell serves.
    pub(crate) fn level(&self) -> ThreadLevel {
        match self {
            CoreCell::Shared(_) => ThreadLevel::Multiple,
            CoreCell::Owned(_) => ThreadLevel::Funneled,
        }
    }

    /// Exclusive access: the mutex (poisoning ignored: the core is plain
    /// bookkeeping every path leaves consistent between calls), or the
    /// owned value if this is its owning thread and no guard is alive.
    #[inline]
    pub(crate) fn lock(&self) -> Result<CoreGuard<'_, T>, Error> {
        match self {
            CoreCell::Shared(m) => Ok(CoreGuard::Shared(ManuallyDrop::new(match m.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            }))),
            CoreCell::Owned(o) => {
                if OWNER.with(Cell::get) != o.token {
                    return Err(Error::ThreadLevel {
                        what: "called from a thread other than the one that initialized the \
                               device (ThreadLevel::Funneled)",
                    });
                }
                if o.busy.replace(true) {
                    return Err(Error::ThreadLevel {
                        what: "re-entrant call into the device core",
                    });
                }
                Ok(CoreGuard::Owned(o))
            }
        }
    }
}

impl<T> CoreCell<T> {
    /// `f` on the owned value, if this is an owned cell (`Funneled`), the
    /// calling thread its owner and no guard alive; `None` (and `f` not
    /// run) otherwise — a shared cell, another thread, a re-entrant call
    /// — for which the caller takes its general path through
    /// [`CoreCell::lock`], which reports the error if there is one. No
    /// guard value: the fast send path's `lock` guard was copied through
    /// the stack.
    #[inline(always)]
    pub(crate) fn with_owned<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let CoreCell::Owned(o) = self else {
            return None;
        };
        if OWNER.with(Cell::get) != o.token || o.busy.replace(true) {
            return None;
        }
        /// Clears `busy` when `f` returns or unwinds.
        struct Busy<'a>(&'a Cell<bool>);
        impl Drop for Busy<'_> {
            #[inline(always)]
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        let _busy = Busy(&o.busy);
        // SAFETY: as in `CoreGuard::deref_mut`: the owner token matched
        // (only the owning thread reaches `value`) and `busy` was false
        // and is now set until `_busy` drops, so this is the only
        // reference to the value.
        Some(f(unsafe { &mut *o.value.get() }))
    }
}

impl<T> std::fmt::Debug for CoreCell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreCell")
            .field("level", &self.level())
            .finish_non_exhaustive()
    }
}

/// Exclusive access to a [`CoreCell`]'s value (not `Send`: it stays on the
/// thread that took it).
///
/// The mutex guard is held in a `ManuallyDrop` and released out of line
/// by [`Drop`], so that dropping an owned guard is one inlined store: the
/// drop glue of the enum with a bare `MutexGuard` was a call (a return
/// address and saved registers on the stack, each a store-buffer entry on
/// the send path).
pub(crate) enum CoreGuard<'a, T> {
    Shared(ManuallyDrop<MutexGuard<'a, T>>),
    Owned(&'a Owned<T>),
}

impl<T> Deref for CoreGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        match self {
            CoreGuard::Shared(g) => g,
            // SAFETY: this guard was made by `CoreCell::lock` on the
            // owning thread, which set `busy`; until the guard drops no
            // other guard exists, and no other thread can reach `value`
            // (see the `Sync` impl of `Owned`), so no `&mut` aliases it.
            CoreGuard::Owned(o) => unsafe { &*o.value.get() },
        }
    }
}

impl<T> DerefMut for CoreGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        match self {
            CoreGuard::Shared(g) => g,
            // SAFETY: as in `deref`; `&mut self` makes this the only
            // reference obtained through the one live guard.
            CoreGuard::Owned(o) => unsafe { &mut *o.value.get() },
        }
    }
}

impl<T> Drop for CoreGuard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        match self {
            CoreGuard::Owned(o) => o.busy.set(false),
            CoreGuard::Shared(g) => unlock(g),
        }
    }
}

/// Releases a shared guard's mutex (out of line: see [`CoreGuard`]).
#[inline(never)]
fn unlock<T>(g: &mut ManuallyDrop<MutexGuard<'_, T>>) {
    // SAFETY: called once, from the guard's `drop`, which never touches
    // the field again.
    unsafe { ManuallyDrop::drop(g) }
}

// Compile-time checks: the cell may be shared between threads (the device
// is); the guard may not leave its thread.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<CoreCell<Vec<u8>>>();
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn shared_cell_serves_every_thread() {
        let c = Arc::new(CoreCell::new(0u64, ThreadLevel::Multiple));
        assert_eq!(c.level(), ThreadLevel::Multiple);
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        *c.lock().unwrap() += 1;
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(*c.lock().unwrap(), 4000);
    }

    #[test]
    fn owned_cell_refuses_other_threads_with_a_typed_error() {
        for level in [ThreadLevel::Single, ThreadLevel::Funneled] {
            let c = Arc::new(CoreCell::new(7u64, level));
            assert_eq!(c.level(), ThreadLevel::Funneled);
            *c.lock().unwrap() += 1;
            let c2 = Arc::clone(&c);
            let other = std::thread::spawn(move || c2.lock().err()).join().unwrap();
            match other {
                Some(Error::ThreadLevel { what }) => assert!(what.contains("other than")),
                other => panic!("expected Error::ThreadLevel, got {other:?}"),
            }
            // The owner still has it, unchanged by the refused attempt.
            assert_eq!(*c.lock().unwrap(), 8);
        }
    }

    #[test]
    fn owned_cell_refuses_re_entry_and_recovers_after_the_guard_drops() {
        let c = CoreCell::new(1u32, ThreadLevel::Funneled);
        let g = c.lock().unwrap();
        assert!(matches!(c.lock(), Err(Error::ThreadLevel { .. })));
        drop(g);
        assert_eq!(*c.lock().unwrap(), 1);
    }

    #[test]
    fn a_new_owned_cell_takes_over_the_thread() {
        let a = CoreCell::new(1u8, ThreadLevel::Funneled);
        let b = CoreCell::new(2u8, ThreadLevel::Funneled);
        assert!(matches!(a.lock(), Err(Error::ThreadLevel { .. })));
        assert_eq!(*b.lock().unwrap(), 2);
    }

    #[test]
    fn owned_cell_drops_its_value_on_another_thread() {
        let v = Arc::new(());
        let c = CoreCell::new(Arc::clone(&v), ThreadLevel::Funneled);
        std::thread::spawn(move || drop(c)).join().unwrap();
        assert_eq!(Arc::strong_count(&v), 1);
    }

    /// `with_owned` runs only where `lock` would hand out the owned value
    /// (the owner thread, no guard alive) and says `None` everywhere else
    /// (a shared cell, another thread, re-entry), leaving the value as it
    /// was; `busy` is cleared after it, also when the closure unwinds.
    #[test]
    fn with_owned_runs_only_where_lock_would_succeed() {
        let c = Arc::new(CoreCell::new(1u32, ThreadLevel::Funneled));
        assert_eq!(
            c.with_owned(|v| {
                *v += 1;
                *v
            }),
            Some(2)
        );
        let c2 = Arc::clone(&c);
        let other = std::thread::spawn(move || c2.with_owned(|v| *v = 100))
            .join()
            .unwrap();
        assert_eq!(other, None, "another thread");
        let g = c.lock().unwrap();
        assert_eq!(c.with_owned(|v| *v = 100), None, "a guard is alive");
        drop(g);
        assert_eq!(
            c.with_owned(|_| c.with_owned(|w| *w)).flatten(),
            None,
            "re-entry"
        );
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.with_owned(|_| panic!("inside"))
        }));
        assert!(unwound.is_err());
        assert_eq!(*c.lock().unwrap(), 2, "busy cleared, value unchanged");
        let shared = CoreCell::new(5u32, ThreadLevel::Multiple);
        assert_eq!(shared.with_owned(|v| *v), None, "a shared cell");
        assert_eq!(*shared.lock().unwrap(), 5);
    }

    #[test]
    fn provided_levels() {
        assert_eq!(ThreadLevel::Single.provided(), ThreadLevel::Funneled);
        assert_eq!(ThreadLevel::Funneled.provided(), ThreadLevel::Funneled);
        assert_eq!(ThreadLevel::Serialized.provided(), ThreadLevel::Multiple);
        assert_eq!(ThreadLevel::Multiple.provided(), ThreadLevel::Multiple);
    }
}
