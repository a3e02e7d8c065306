//! A window's private memory: a `Vec` the window owns ([`Win::create`],
//! [`Win::allocate`] off the heap), or memory of the program the window
//! only borrows ([`Win::create_raw`], what `MPI_Win_create` exposes).
//!
//! This module holds the window code's only `unsafe`: turning the
//! borrowed range into a slice, under the contract of
//! [`Win::create_raw`].
//!
//! [`Win::create`]: super::Win::create
//! [`Win::allocate`]: super::Win::allocate
//! [`Win::create_raw`]: super::Win::create_raw

use std::ops::{Deref, DerefMut};

/// Private window memory.
#[derive(Debug)]
pub(super) enum WinBuf {
    /// Owned by the window (handed back by `free`).
    Owned(Vec<u8>),
    /// The program's memory at `addr`, `len` bytes, valid and not moved
    /// until the window is freed (the contract of `Win::create_raw`).
    /// Kept as an address so that the window stays `Send + Sync`; every
    /// access holds the window's lock of this memory.
    Raw { addr: usize, len: usize },
}

impl Default for WinBuf {
    fn default() -> WinBuf {
        WinBuf::Owned(Vec::new())
    }
}

impl WinBuf {
    /// Whether the window owns the memory.
    pub(super) fn is_owned(&self) -> bool {
        matches!(self, WinBuf::Owned(_))
    }

    /// The address of the first byte (what other processes reach by CMA).
    pub(super) fn addr(&self) -> u64 {
        match self {
            WinBuf::Owned(v) => v.as_ptr() as u64,
            WinBuf::Raw { addr, .. } => *addr as u64,
        }
    }

    /// The owned memory, or an empty `Vec` for borrowed memory (which
    /// stays the program's).
    pub(super) fn into_vec(self) -> Vec<u8> {
        match self {
            WinBuf::Owned(v) => v,
            WinBuf::Raw { .. } => Vec::new(),
        }
    }
}

impl Deref for WinBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            WinBuf::Owned(v) => v,
            WinBuf::Raw { len: 0, .. } => &[],
            WinBuf::Raw { addr, len } => {
                // SAFETY: `Win::create_raw`'s contract: this process's
                // memory, valid and unmoved until the window (which this
                // value does not outlive) is freed; CMA writes and the
                // program's stores are ordered with this read by MPI's
                // epochs, and bytes are valid at any value.
                unsafe { std::slice::from_raw_parts(*addr as *const u8, *len) }
            }
        }
    }
}

impl DerefMut for WinBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            WinBuf::Owned(v) => v,
            WinBuf::Raw { len: 0, .. } => &mut [],
            // SAFETY: as in `deref`; the window reaches this memory only
            // through `&mut self` under its lock, and MPI forbids the
            // program's conflicting accesses during an epoch.
            WinBuf::Raw { addr, len } => unsafe {
                std::slice::from_raw_parts_mut(*addr as *mut u8, *len)
            },
        }
    }
}
