//! Point-to-point operations on lent memory: `MPI_Isend` and `MPI_Irecv`
//! as C programs make them, on bytes the caller owns and promises not to
//! touch until the request completes.
//!
//! [`Comm::isend`] and [`Comm::irecv`] take an owned `Vec<u8>`, which a
//! C binding would have to allocate and copy into (or out of) on every
//! call: for large messages a fresh allocation per message (with glibc's
//! default settings, a fresh mapping whose pages fault on first touch)
//! and a second copy of the data. The `_raw` forms here lend the caller's
//! memory to the transport instead: a send is read from it in place
//! (copied into shared memory, or read by the receiver with one
//! cross-memory copy), a receive is delivered into it.
//!
//! # The lent-buffer rule
//!
//! The caller promises what MPI requires of an `MPI_Isend` or
//! `MPI_Irecv` buffer: the memory stays valid (allocated, not freed or
//! unmapped) until the request completes; a send's bytes are not written
//! and a receive's bytes are neither read nor written meanwhile. A
//! request freed before it completes keeps the memory lent until its
//! operation is complete, which the caller can only know through other
//! communication (or finalize), as in MPI. A cancelled receive leaves the
//! memory untouched. Contiguous bytes only: datatype sends and receives
//! keep their typed calls ([`Comm::isend_typed`], [`Comm::irecv_typed`]).

use crate::comm::{Comm, Source, Tag};
use crate::device::{LentInto, Mode};
use crate::request::Request;
use crate::Error;

impl Comm {
    /// `MPI_Isend` of the `len` bytes at `ptr`, read in place (see
    /// [`crate::lent`]). The request's [`Request::take_buffer`] gives no
    /// data back (`None` or an empty buffer).
    ///
    /// # Safety
    ///
    /// `ptr` is valid for reads of `len` bytes (any pointer if `len` is
    /// 0), and those bytes stay valid and unchanged until the request
    /// completes (the lent-buffer rule of [`crate::lent`]).
    pub unsafe fn isend_raw(
        &self,
        ptr: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<Request, Error> {
        // SAFETY: the caller's contract.
        unsafe { self.isend_raw_mode(ptr, len, dest, tag, Mode::Standard) }
    }

    /// [`Comm::isend_raw`] without a request for a send that completed
    /// in the call: `Ok(None)` then (it succeeded; its status would be
    /// `ANY_SOURCE`, `ANY_TAG` and `len` bytes). A caller that keeps its
    /// own record of finished sends (a C binding's request handles)
    /// saves building and dropping one.
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    #[inline]
    pub unsafe fn isend_raw_or_done(
        &self,
        ptr: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<Option<Request>, Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            return Ok(Some(self.proc_null_request(None)));
        };
        // SAFETY: the caller's contract (as in `isend_raw_mode`).
        let data = unsafe { lent_bytes(ptr, len) };
        // SAFETY: the caller's contract keeps `data` valid and unchanged
        // until the request completes.
        unsafe {
            self.dev()
                .start_send_lent_or_done(world, tag, self.context_id(), data, Mode::Standard)
        }
    }

    /// `MPI_Issend` of lent bytes: as [`Comm::isend_raw`], completing
    /// once the receiver has matched the message.
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    pub unsafe fn issend_raw(
        &self,
        ptr: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<Request, Error> {
        // SAFETY: the caller's contract.
        unsafe { self.isend_raw_mode(ptr, len, dest, tag, Mode::Synchronous) }
    }

    /// `MPI_Irsend` of lent bytes (a standard send, as
    /// [`Comm::rsend`]).
    ///
    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    pub unsafe fn irsend_raw(
        &self,
        ptr: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
    ) -> Result<Request, Error> {
        // SAFETY: the caller's contract.
        unsafe { self.isend_raw_mode(ptr, len, dest, tag, Mode::Ready) }
    }

    /// # Safety
    ///
    /// As [`Comm::isend_raw`].
    unsafe fn isend_raw_mode(
        &self,
        ptr: *const u8,
        len: usize,
        dest: i32,
        tag: i32,
        mode: Mode,
    ) -> Result<Request, Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            return Ok(self.proc_null_request(None));
        };
        // SAFETY: the caller's contract.
        let data = unsafe { lent_bytes(ptr, len) };
        // SAFETY: the caller's contract keeps `data` valid and unchanged
        // until the request completes.
        unsafe {
            self.dev()
                .start_send_lent(world, tag, self.context_id(), data, mode)
        }
    }

    /// `MPI_Irecv` into the `len` bytes at `ptr`, written in place (see
    /// [`crate::lent`]). A message longer than `len` is
    /// [`Error::RecvTruncated`] after delivering `len` bytes, as in
    /// [`Comm::recv`]; a cancelled receive leaves the memory untouched.
    /// The request's [`Request::take_buffer`] gives no data back (`None`
    /// or an empty buffer).
    ///
    /// # Safety
    ///
    /// `ptr` is valid for writes of `len` bytes (any pointer if `len` is
    /// 0), and nothing else reads or writes those bytes until the request
    /// completes or is cancelled (the lent-buffer rule of [`crate::lent`]).
    pub unsafe fn irecv_raw(
        &self,
        ptr: *mut u8,
        len: usize,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request, Error> {
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            return Ok(self.proc_null_request(None));
        };
        let lent = LentInto {
            addr: ptr as usize,
            len,
        };
        // SAFETY: the caller's contract.
        unsafe { self.dev().start_recv_lent(spec, lent, &self.inner.group) }
    }
}

/// The `len` bytes at `ptr` (empty, whatever `ptr`, for 0).
///
/// # Safety
///
/// `ptr` is valid for reads of `len` bytes, unchanged while the borrow
/// (and the operation given it) lasts.
#[inline(always)]
unsafe fn lent_bytes<'a>(ptr: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(ptr, len) }
}
