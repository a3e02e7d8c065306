//! A window's private memory: a `Vec` the window owns ([`Win::create`],
//! [`Win::allocate`] off the heap), or memory of the program the window
//! only borrows ([`Win::create_raw`], what `MPI_Win_create` exposes).
//!
//! This module holds the window code's only `unsafe`: turning the
//! borrowed range into a slice, under the contract of
//! [`Win::create_raw`]; and [`FenceWords`], the fence words of a window
//! resolved once to their addresses in the node mapping.
//!
//! [`Win::create`]: super::Win::create
//! [`Win::allocate`]: super::Win::allocate
//! [`Win::create_raw`]: super::Win::create_raw

use crate::Error;
use shmem_onesided::{NodeView, SymAddr};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::AtomicU64;

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

/// The fence words of a window whose ranks are all direct: this rank's and
/// every other rank's, each looked up (bounds and alignment checked) once
/// when the window is made and kept as an address in this process's
/// mapping of the node segment, so that a fence stores and loads them
/// without a lookup through the view. The value holds a clone of the view,
/// which keeps the mapping (fixed in place) alive as long as the addresses
/// are used.
#[derive(Debug)]
pub(super) struct FenceWords {
    /// Keeps the mapping the addresses point into alive.
    _view: NodeView,
    /// Address of this rank's word.
    own: usize,
    /// Addresses of the other ranks' words, in rank order.
    others: Box<[usize]>,
}

impl FenceWords {
    /// Looks the words up: `own` is this rank's (node index, address),
    /// `others` every other rank's.
    pub(super) fn new(
        view: &NodeView,
        own: (u32, SymAddr),
        others: &[(u32, SymAddr)],
    ) -> Result<FenceWords, Error> {
        let addr = |&(pe, a): &(u32, SymAddr)| -> Result<usize, Error> {
            Ok(view.atomic_u64(pe, a)? as *const AtomicU64 as usize)
        };
        Ok(FenceWords {
            own: addr(&own)?,
            others: others.iter().map(addr).collect::<Result<_, _>>()?,
            _view: view.clone(),
        })
    }

    /// The word at `addr`, one of this value's addresses.
    #[inline(always)]
    fn word(&self, addr: usize) -> &AtomicU64 {
        // SAFETY: `addr` is the address of an `AtomicU64` that
        // `NodeView::atomic_u64` returned (in bounds of a PE's heap, 8-byte
        // aligned) in the mapping that `self._view` keeps alive and never
        // moves; the returned reference does not outlive `self`. The word
        // is only ever accessed atomically, by every process.
        unsafe { &*(addr as *const AtomicU64) }
    }

    /// This rank's fence word.
    #[inline(always)]
    pub(super) fn own(&self) -> &AtomicU64 {
        self.word(self.own)
    }

    /// The other ranks' fence words, in rank order.
    #[inline(always)]
    pub(super) fn others(&self) -> impl ExactSizeIterator<Item = &AtomicU64> + '_ {
        self.others.iter().map(|&a| self.word(a))
    }
}
