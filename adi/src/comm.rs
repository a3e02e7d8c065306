//! Communicators and point-to-point communication.
//!
//! A [`Comm`] is a cheap handle (an `Arc`): clone it into threads freely.
//! Ranks and tags are `i32` as in MPI, so that the MPI special values
//! ([`PROC_NULL`], [`ANY_SOURCE`], [`ANY_TAG`]) keep their meaning and bad
//! values are typed errors ([`Error::InvalidRank`], [`Error::InvalidTag`])
//! rather than impossible to express.
//!
//! | MPI | here |
//! |---|---|
//! | `MPI_Send` / `Ssend` / `Rsend` / `Bsend` | [`Comm::send`], [`Comm::ssend`], [`Comm::rsend`], [`Comm::bsend`] (with [`Comm::attach_buffer`]/[`Comm::detach_buffer`]) |
//! | `MPI_Recv` | [`Comm::recv`] |
//! | `MPI_Isend` / `Issend` / `Irsend` / `Irecv` | [`Comm::isend`], [`Comm::issend`], [`Comm::irsend`], [`Comm::irecv`]: they take a `Vec<u8>` and hand it back through [`Request::take_buffer`] |
//! | datatypes | [`Comm::send_typed`], [`Comm::recv_typed`], [`Comm::isend_typed`], [`Comm::irecv_typed`] |
//! | `MPI_Probe` / `Iprobe` / `Mprobe` / `Improbe` / `Mrecv` / `Imrecv` | [`Comm::probe`], [`Comm::iprobe`], [`Comm::mprobe`], [`Comm::improbe`], [`Comm::mrecv`], [`Comm::imrecv`] |
//! | `MPI_Cancel` | [`Comm::cancel`] |
//! | `MPI_Wait` / `Test` / `Waitall` / `Waitany` / `Waitsome` / `Testall` / `Testany` / `Testsome` | [`Comm::wait`], [`Comm::test`], [`Comm::waitall`], ... (or the functions of [`mod@crate::request`] with [`Comm::progress`]) |
//! | `MPI_Send_init` / `Recv_init` / `Start` / `Startall` | [`Comm::send_init`], [`Comm::ssend_init`], [`Comm::recv_init`], [`Persistent::start`], [`startall`] |
//!
//! Truncation: a receive whose message is longer than the buffer delivers
//! the first `buf.len()` bytes (never more), consumes the message and
//! returns [`Error::RecvTruncated`] (`MPI_ERR_TRUNCATE`) carrying the status
//! of what was delivered.

use crate::attr::{ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB};
use crate::device::{
    typed_result, Device, DeviceProgress, Group, InPlaceSlot, Mode, RecvInto, SendData, TypedInto,
    PROC_NULL_STATUS,
};
use crate::request::{self, AnyOutcome, Outcome, Request, Status};
use crate::{plan_send, Datatype, Error, SendPlan};
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Instant;

/// The source a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// `MPI_ANY_SOURCE`.
    Any,
    /// This rank of the communicator, or [`PROC_NULL`].
    Rank(i32),
}

impl From<i32> for Source {
    /// [`ANY_SOURCE`] becomes [`Source::Any`], every other value a rank.
    fn from(r: i32) -> Source {
        if r == ANY_SOURCE {
            Source::Any
        } else {
            Source::Rank(r)
        }
    }
}

/// The tag a receive or probe accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tag {
    /// `MPI_ANY_TAG`.
    Any,
    /// Exactly this tag (`0..=TAG_UB`).
    Value(i32),
}

impl From<i32> for Tag {
    /// [`ANY_TAG`] becomes [`Tag::Any`], every other value a tag.
    fn from(t: i32) -> Tag {
        if t == ANY_TAG {
            Tag::Any
        } else {
            Tag::Value(t)
        }
    }
}

/// A message matched by [`Comm::mprobe`]/[`Comm::improbe`] (`MPI_Message`):
/// removed from matching and bound to this handle; receive it with
/// [`Comm::mrecv`] or [`Comm::imrecv`] on the same communicator.
#[derive(Debug)]
#[must_use = "a matched message must be received with mrecv/imrecv"]
pub struct Message {
    inner: Option<crate::transport::Matched>,
    status: Status,
    /// The group of the communicator it was probed on: `MPI_Mrecv` takes no
    /// communicator, so the status's source is translated with this one
    /// whichever `Comm` the receive is called through.
    group: Option<Arc<Group>>,
}

impl Message {
    /// The status the probe reported (source, tag, and the message length
    /// in `count`).
    pub fn status(&self) -> Status {
        self.status
    }

    /// Whether this is `MPI_MESSAGE_NO_PROC` (a probe of [`PROC_NULL`]).
    pub fn is_no_proc(&self) -> bool {
        self.inner.is_none()
    }
}

#[derive(Debug)]
pub(crate) struct CommInner {
    pub(crate) dev: Arc<Device>,
    /// Point-to-point context id.
    pub(crate) ctx: u32,
    /// Context id of collectives (and of context-id agreement).
    pub(crate) coll: u32,
    /// Context pair to release on drop (`None`: `MPI_COMM_WORLD`).
    pub(crate) pair: Option<usize>,
    pub(crate) rank: i32,
    pub(crate) group: Arc<Group>,
    /// The next collective sequence number (`coll::task::Coll::new`).
    pub(crate) coll_seq: AtomicU32,
}

impl Drop for CommInner {
    fn drop(&mut self) {
        if let Some(k) = self.pair {
            match self.dev.contexts.lock() {
                Ok(mut c) => c.release(k),
                Err(p) => p.into_inner().release(k),
            }
        }
    }
}

/// A communicator (`MPI_Comm`): a group of ranks and a private context for
/// point-to-point messages (plus a separate one for collectives).
///
/// Dropping the last handle is `MPI_Comm_free` (its context id becomes
/// reusable once it is free on every member).
#[derive(Debug, Clone)]
pub struct Comm {
    pub(crate) inner: Arc<CommInner>,
}

/// Largest packed size that [`Comm::send_packed_now`] packs straight into
/// the transport; larger data is packed into a staging buffer first, which
/// the transport then copies (or, above the CMA threshold,
/// `TMX_SHMEM_TUNE=cma_threshold`, the receiver reads by CMA).
///
/// Packing writes an eager block's lines 8 bytes at a time, and each
/// line, last read by the receiver's core, is fetched back before it is
/// written, where the copy of a packed buffer writes whole lines; the
/// endpoint asks for a lone block's lines before the pack
/// (`send_now_with`), and packing straight into blocks of up to 8 KiB
/// (the default CMA threshold, above which the endpoint refuses) measured
/// 1.04–1.15× the bandwidth and 1.04–1.10× the latency of the staging
/// copy from 2 to 8 KiB.
const PACK_DIRECT_MAX: usize = 8192;

/// Largest packed size that a datatype receive takes into a buffer on the
/// stack and unpacks from (a message already here, for
/// [`Comm::irecv_typed`]; any, for [`Comm::recv_typed`]), instead of a
/// staging buffer from the device's pool kept with the request.
const UNPACK_ON_STACK: usize = 256;

/// The byte range of a buffer of `len` bytes that `count` elements of
/// `datatype` occupy, if it is one contiguous range
/// ([`Datatype::contiguous_range`]) lying inside the buffer.
fn contiguous_in(
    datatype: &Datatype,
    count: i64,
    len: usize,
) -> Result<Option<core::ops::Range<usize>>, Error> {
    Ok(datatype.contiguous_range(count)?.and_then(|(start, n)| {
        let s = usize::try_from(start).ok()?;
        let e = s.checked_add(n)?;
        (e <= len).then_some(s..e)
    }))
}

/// The bytes a receive delivered into a buffer of `cap` bytes: the
/// status's count, also for a truncated message; none after another error.
fn delivered(r: &Result<Status, Error>, cap: usize) -> usize {
    match r {
        Ok(st) => st.count,
        Err(Error::RecvTruncated { status, .. }) => status.count,
        Err(_) => 0,
    }
    .min(cap)
}

impl Comm {
    pub(crate) fn dev(&self) -> &Device {
        &self.inner.dev
    }

    /// This process's rank in the communicator.
    pub fn rank(&self) -> i32 {
        self.inner.rank
    }

    /// Number of ranks in the communicator.
    pub fn size(&self) -> i32 {
        self.inner.group.world.len() as i32
    }

    /// The point-to-point context id (collectives use `context_id() + 1`).
    pub fn context_id(&self) -> u32 {
        self.inner.ctx
    }

    /// The `MPI_COMM_WORLD` rank of communicator rank `rank`.
    #[inline]
    pub fn world_rank_of(&self, rank: i32) -> Option<u32> {
        usize::try_from(rank)
            .ok()
            .and_then(|r| self.inner.group.world.get(r).copied())
    }

    /// The progress hook of this communicator's device, for the set
    /// operations of [`mod@crate::request`] (`waitall(&mut reqs, &mut
    /// comm.progress())`).
    pub fn progress(&self) -> impl request::Progress + '_ {
        DeviceProgress::new(self.dev())
    }

    /// `MPID_DeviceCheck`: one progress pass; with `blocking`, keeps
    /// polling until some request completes (here or in another thread),
    /// with a bounded number of idle passes (it may return without any
    /// completion; callers loop).
    pub fn device_check(&self, blocking: bool) -> Result<(), Error> {
        self.dev().check(blocking)
    }

    // ------------------------------------------------------------ checks

    /// Destination world rank (`None` for `PROC_NULL`).
    #[inline]
    pub(crate) fn dest(&self, dest: i32) -> Result<Option<u32>, Error> {
        if dest == PROC_NULL {
            return Ok(None);
        }
        // `ok_or_else`: the error is built only when needed (an eager
        // `ok_or` built and dropped one on every send).
        self.world_rank_of(dest)
            .map(Some)
            .ok_or_else(|| Error::InvalidRank {
                rank: dest,
                size: self.size(),
            })
    }

    #[inline]
    pub(crate) fn send_tag(tag: i32) -> Result<u32, Error> {
        if (0..=TAG_UB).contains(&tag) {
            Ok(tag as u32)
        } else {
            Err(Error::InvalidTag { tag, ub: TAG_UB })
        }
    }

    /// The match specification of a receive on context `ctx` (`None` for a
    /// receive from `PROC_NULL`).
    #[inline]
    pub(crate) fn spec_on(
        &self,
        ctx: u32,
        source: Source,
        tag: Tag,
    ) -> Result<Option<tm_proto::MatchSpec>, Error> {
        let tag = match tag {
            Tag::Any => tm_proto::Tag::Any,
            Tag::Value(t) => tm_proto::Tag::Value(Self::send_tag(t)?),
        };
        let source = match source {
            Source::Any => tm_proto::Source::Any,
            Source::Rank(r) if r == PROC_NULL => return Ok(None),
            Source::Rank(r) => {
                let world = self.world_rank_of(r).ok_or_else(|| Error::InvalidRank {
                    rank: r,
                    size: self.size(),
                })?;
                tm_proto::Source::Rank(world)
            }
        };
        Ok(Some(tm_proto::MatchSpec {
            context_id: ctx,
            source,
            tag,
        }))
    }

    #[inline]
    pub(crate) fn spec(
        &self,
        source: Source,
        tag: Tag,
    ) -> Result<Option<tm_proto::MatchSpec>, Error> {
        self.spec_on(self.inner.ctx, source, tag)
    }

    pub(crate) fn proc_null_request(&self, buf: Option<Vec<u8>>) -> Request {
        self.dev().note_proc_null();
        match buf {
            Some(b) => Request::ready_with_buffer(PROC_NULL_STATUS, b),
            None => Request::completed(PROC_NULL_STATUS),
        }
    }

    // ------------------------------------------------------------- sends

    pub(crate) fn send_on(
        &self,
        ctx: u32,
        buf: &[u8],
        dest: i32,
        tag: i32,
        mode: Mode,
    ) -> Result<(), Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            self.dev().note_proc_null();
            return Ok(());
        };
        self.dev().send_blocking(world, tag, ctx, buf, mode)
    }

    fn isend_mode(&self, buf: Vec<u8>, dest: i32, tag: i32, mode: Mode) -> Result<Request, Error> {
        self.isend_on(self.inner.ctx, buf, dest, tag, mode)
    }

    pub(crate) fn isend_on(
        &self,
        ctx: u32,
        buf: Vec<u8>,
        dest: i32,
        tag: i32,
        mode: Mode,
    ) -> Result<Request, Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            return Ok(self.proc_null_request(Some(buf)));
        };
        let dev = self.dev();
        // A small standard send completes inline at once (see
        // `isend_into`).
        if mode == Mode::Standard && dev.send_small_now(world, tag, ctx, &buf) {
            let status = Status::new(ANY_SOURCE, ANY_TAG, buf.len());
            return Ok(Request::ready_with_buffer(status, buf));
        }
        dev.start_send_owned(world, tag, ctx, buf, mode, None)
    }

    /// `MPI_Send`: returns once `buf` may be reused (the data is inline,
    /// copied, or, for large messages, read by the receiver).
    pub fn send(&self, buf: &[u8], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_on(self.inner.ctx, buf, dest, tag, Mode::Standard)
    }

    /// `MPI_Ssend`: returns only once the receiver has matched the message.
    pub fn ssend(&self, buf: &[u8], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_on(self.inner.ctx, buf, dest, tag, Mode::Synchronous)
    }

    /// `MPI_Rsend`: the caller asserts the receive is posted. Sent as a
    /// standard send (which MPI allows); an rsend without a posted receive
    /// is not detected.
    pub fn rsend(&self, buf: &[u8], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_on(self.inner.ctx, buf, dest, tag, Mode::Ready)
    }

    /// `MPI_Bsend`: copies `buf` into the attached buffer
    /// ([`attach_buffer`](Self::attach_buffer)) and returns at once. If the
    /// buffer has no room for `buf.len() + BSEND_OVERHEAD` bytes (or none
    /// is attached), [`Error::BsendBufferFull`]: an error, never a block.
    pub fn bsend(&self, buf: &[u8], dest: i32, tag: i32) -> Result<(), Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            self.dev().note_proc_null();
            return Ok(());
        };
        self.dev().bsend(world, tag, self.inner.ctx, buf)
    }

    /// `MPI_Buffer_attach` (process-wide, as in MPI): the buffer buffered
    /// sends copy into. Each message uses its length plus
    /// [`BSEND_OVERHEAD`](crate::BSEND_OVERHEAD) bytes.
    pub fn attach_buffer(&self, buf: Vec<u8>) -> Result<(), Error> {
        self.dev().attach(buf)
    }

    /// `MPI_Buffer_detach`: waits until every buffered send has completed
    /// and hands the buffer back.
    pub fn detach_buffer(&self) -> Result<Vec<u8>, Error> {
        self.dev().detach()
    }

    /// `MPI_Isend`: starts a send of `buf` (moved in; the request hands it
    /// back through [`Request::take_buffer`] once complete).
    pub fn isend(&self, buf: Vec<u8>, dest: i32, tag: i32) -> Result<Request, Error> {
        self.isend_mode(buf, dest, tag, Mode::Standard)
    }

    /// [`isend`](Self::isend) in the form of C's `MPI_Isend`, whose request
    /// argument is the caller's storage: the request is written into
    /// `req`. What `req` held is dropped first, as by an assignment (an
    /// active request there is freed: its operation still completes). On
    /// an error `req` is left as it was.
    ///
    /// For windows of requests kept in place, as OSU's benchmarks keep
    /// them (`world.isend_into(&mut reqs[j], buf, peer, tag)`): a request
    /// returned by value is stored field by field and then copied by the
    /// caller in wide loads, which the store buffer cannot forward; each
    /// such load waits for every older instruction to retire, including
    /// the previous message's ring store.
    #[inline]
    pub fn isend_into(
        &self,
        req: &mut Request,
        buf: Vec<u8>,
        dest: i32,
        tag: i32,
    ) -> Result<(), Error> {
        let tag = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            *req = self.proc_null_request(Some(buf));
            return Ok(());
        };
        let dev = self.dev();
        // A small standard send completes inline at once, through a
        // function of its own: inside the general path's frame it made about 24
        // more stores (saved registers, spills), each a store-buffer entry
        // waiting behind the previous message's ring slot.
        if dev.send_small_now(world, tag, self.inner.ctx, &buf) {
            let len = buf.len();
            req.set_ready_with_buffer(Status::new(ANY_SOURCE, ANY_TAG, len), buf);
            return Ok(());
        }
        dev.start_send_owned_into(req, world, tag, self.inner.ctx, buf, Mode::Standard)
    }

    /// `MPI_Issend`: completes only once the receiver has matched it.
    pub fn issend(&self, buf: Vec<u8>, dest: i32, tag: i32) -> Result<Request, Error> {
        self.isend_mode(buf, dest, tag, Mode::Synchronous)
    }

    /// `MPI_Irsend` (a standard send, see [`rsend`](Self::rsend)).
    pub fn irsend(&self, buf: Vec<u8>, dest: i32, tag: i32) -> Result<Request, Error> {
        self.isend_mode(buf, dest, tag, Mode::Ready)
    }

    // ---------------------------------------------------------- receives

    /// `MPI_Recv` into `buf`. A message longer than `buf` is
    /// [`Error::RecvTruncated`] after delivering `buf.len()` bytes.
    pub fn recv(
        &self,
        buf: &mut [u8],
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status, Error> {
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            self.dev().note_proc_null();
            return Ok(PROC_NULL_STATUS);
        };
        self.dev().recv_into(spec, buf, &self.inner.group)
    }

    pub(crate) fn recv_on(
        &self,
        ctx: u32,
        buf: &mut [u8],
        source: i32,
        tag: i32,
    ) -> Result<Status, Error> {
        let Some(spec) = self.spec_on(ctx, Source::Rank(source), Tag::Value(tag))? else {
            return Ok(PROC_NULL_STATUS);
        };
        self.dev().recv_into(spec, buf, &self.inner.group)
    }

    /// `MPI_Irecv` into `buf` (moved in; its length is the capacity). The
    /// filled buffer comes back through [`Request::take_buffer`] once the
    /// request completes (also after a truncation error).
    pub fn irecv(
        &self,
        buf: Vec<u8>,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request, Error> {
        self.irecv_in(buf, source.into(), tag.into())
    }

    /// [`irecv`](Self::irecv) in the form of C's `MPI_Irecv`: the request
    /// is written into `req` (see [`isend_into`](Self::isend_into): what
    /// `req` held is dropped first; on an error `req` is left as it was).
    pub fn irecv_into(
        &self,
        req: &mut Request,
        buf: Vec<u8>,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<(), Error> {
        self.irecv_into_in(req, buf, source.into(), tag.into())
    }

    /// [`irecv_into`](Self::irecv_into) past the conversions (not
    /// generic, as [`irecv_in`](Self::irecv_in)).
    fn irecv_into_in(
        &self,
        req: &mut Request,
        buf: Vec<u8>,
        source: Source,
        tag: Tag,
    ) -> Result<(), Error> {
        let Some(spec) = self.spec(source, tag)? else {
            *req = self.proc_null_request(Some(buf));
            return Ok(());
        };
        self.dev()
            .start_recv_owned_into(req, spec, buf, &self.inner.group)
    }

    /// [`irecv`](Self::irecv) past the conversions: not generic, so that
    /// it is compiled (and its helpers inlined) in this crate rather than
    /// in each caller's.
    fn irecv_in(&self, buf: Vec<u8>, source: Source, tag: Tag) -> Result<Request, Error> {
        let Some(spec) = self.spec(source, tag)? else {
            return Ok(self.proc_null_request(Some(buf)));
        };
        self.dev().start_recv_owned(spec, buf, &self.inner.group)
    }

    // --------------------------------------------------------- datatypes

    /// Packs (or, for contiguous data, copies) `count` elements of
    /// `datatype` from `buf` into one message buffer, following the
    /// three-case [`plan_send`]: contiguous data is copied as is; data that
    /// fits the envelope or one buffer is packed at once into a buffer of
    /// the device's staging pool (see [`Comm::recycle`]); larger data is
    /// packed part by part ([`SendPlan::parts`]) into a fresh message
    /// buffer. The transport then chooses inline / eager / rendezvous by
    /// size.
    fn pack_message(&self, buf: &[u8], count: i64, datatype: &Datatype) -> Result<Vec<u8>, Error> {
        let plan = plan_send(datatype, count, &self.dev().limits)?;
        match plan {
            SendPlan::Contiguous { start, len } => {
                let bad = || Error::BufferOutOfBounds {
                    lo: start as i128,
                    hi: start as i128 + len as i128,
                    len: buf.len(),
                };
                let start = usize::try_from(start).map_err(|_| bad())?;
                let end = start.checked_add(len).ok_or_else(bad)?;
                let from = buf.get(start..end).ok_or_else(bad)?;
                let mut out = self.dev().staging(len)?;
                out.copy_from_slice(from);
                Ok(out)
            }
            SendPlan::Envelope { len } | SendPlan::Packed { len } => {
                self.dev().note_packed();
                let mut out = self.dev().staging(len)?;
                let mut pos = 0;
                match datatype.pack(buf, count, &mut out, &mut pos) {
                    Ok(()) => Ok(out),
                    Err(e) => {
                        self.dev().give_back_staging(out);
                        Err(e)
                    }
                }
            }
            SendPlan::Pipelined { len, .. } => {
                self.dev().note_packed();
                // Packed whole (the parts' bytes in order), appended to an
                // empty buffer: never zero-filled first.
                let mut out = Vec::new();
                let n = datatype.pack_append(buf, count, &mut out)?;
                if n != len {
                    return Err(Error::Truncated { need: len, have: n });
                }
                Ok(out)
            }
        }
    }

    /// Sends `count` elements of `datatype` from `buf` to world rank
    /// `world` by packing them straight into the transport, if that send
    /// completes in the call (inline, or an eager block: see
    /// [`Device::send_fill_now`]): no staging buffer and no second copy.
    /// `Ok(false)`: nothing was sent, the caller takes the general path.
    /// Packing errors (a buffer too short for the type) are returned as
    /// they are. `packed`: the plan packs the data (counted as a packed
    /// send), not a contiguous range copied as is.
    #[allow(clippy::too_many_arguments)]
    fn send_packed_now(
        &self,
        world: u32,
        tag: u32,
        buf: &[u8],
        count: i64,
        datatype: &Datatype,
        len: usize,
        packed: bool,
    ) -> Result<bool, Error> {
        let mut failed = None;
        let mut fill = |out: &mut [u8]| match datatype.pack_part(buf, count, 0, out) {
            Ok(n) if n == out.len() => true,
            Ok(n) => {
                failed = Some(Error::Truncated {
                    need: out.len(),
                    have: n,
                });
                false
            }
            Err(e) => {
                failed = Some(e);
                false
            }
        };
        let sent = self
            .dev()
            .send_fill_now(world, tag, self.inner.ctx, len, &mut fill)?;
        if let Some(e) = failed {
            return Err(e);
        }
        if sent && packed {
            self.dev().note_packed();
        }
        Ok(sent)
    }

    /// The packed size of a send of `count` elements of `datatype` that
    /// [`Comm::send_packed_now`] may take: one packed at once by the plan
    /// (contiguous, envelope or one buffer) of at most [`PACK_DIRECT_MAX`]
    /// bytes, and whether the plan packs it (not contiguous); `None`
    /// otherwise.
    fn packs_at_once(
        &self,
        count: i64,
        datatype: &Datatype,
    ) -> Result<Option<(usize, bool)>, Error> {
        Ok(match plan_send(datatype, count, &self.dev().limits)? {
            SendPlan::Contiguous { len, .. } => Some((len, false)),
            SendPlan::Envelope { len } | SendPlan::Packed { len } => Some((len, true)),
            SendPlan::Pipelined { .. } => None,
        }
        .filter(|&(len, _)| len <= PACK_DIRECT_MAX))
    }

    /// `MPI_Send` of `count` elements of `datatype` (committed) from `buf`.
    pub fn send_typed(
        &self,
        buf: &[u8],
        count: i64,
        datatype: &Datatype,
        dest: i32,
        tag: i32,
    ) -> Result<(), Error> {
        let tag_u = Self::send_tag(tag)?;
        let Some(world) = self.dest(dest)? else {
            self.dev().note_proc_null();
            return Ok(());
        };
        if let Some(range) = contiguous_in(datatype, count, buf.len())? {
            return self.send(&buf[range], dest, tag);
        }
        if let Some((len, packed)) = self.packs_at_once(count, datatype)? {
            if self.send_packed_now(world, tag_u, buf, count, datatype, len, packed)? {
                return Ok(());
            }
        }
        let data = self.pack_message(buf, count, datatype)?;
        if self.send_staged_now(world, tag_u, &data)? {
            self.dev().give_back_staging(data);
            return Ok(());
        }
        let mut req = self.dev().start_send(
            world,
            tag_u,
            self.inner.ctx,
            SendData::Owned(data),
            Mode::Standard,
            None,
        )?;
        let r = self.dev().wait(&mut req).map(|_| ());
        self.recycle(&mut req);
        r
    }

    /// A standard send of `data`, a staging buffer just packed, if it
    /// completes in the call: copied into the transport even where a
    /// message of its size would otherwise be read by the receiver in
    /// place (CMA), so that the buffer goes back to the pool at once and
    /// the next pack writes into the same cache lines. (A window of CMA
    /// sends keeps one buffer each until its FIN: 64 sends of 32 KiB
    /// packed into 2 MiB that no longer fit the cache, and the receiver's
    /// single copy of data just packed saves nothing.)
    fn send_staged_now(&self, world: u32, tag: u32, data: &[u8]) -> Result<bool, Error> {
        self.dev()
            .send_slice_now(world, tag, self.inner.ctx, data, true)
    }

    /// Gives a completed send's packed buffer back to the staging pool, so
    /// that the next datatype send or receive reuses it instead of
    /// allocating (the request then hands back no buffer).
    fn recycle(&self, req: &mut Request) {
        if let Some(b) = req.take_ready_buffer().or_else(|| req.take_buffer()) {
            self.dev().give_back_staging(b);
        }
    }

    /// `MPI_Isend` of `count` elements of `datatype`: the data is packed at
    /// once, so `buf` (and `datatype`) may change or go right after the
    /// call. A send that completes in the call (inline or eager) is packed
    /// straight into the transport (the header ring, or an eager block in
    /// shared memory) and its request hands back no buffer. Otherwise the
    /// data is packed into a message buffer of the device's staging pool,
    /// which goes back to the pool when the send completes (the request
    /// hands back no buffer).
    pub fn isend_typed(
        &self,
        buf: &[u8],
        count: i64,
        datatype: &Datatype,
        dest: i32,
        tag: i32,
    ) -> Result<Request, Error> {
        let tag_u = Self::send_tag(tag)?;
        let world = self.dest(dest)?;
        if let Some(world) = world {
            if let Some(range) = contiguous_in(datatype, count, buf.len())? {
                // Contiguous: copied into the transport as is.
                let (ctx, data) = (self.inner.ctx, &buf[range]);
                if self.dev().send_slice_now(world, tag_u, ctx, data, false)? {
                    return Ok(Request::ready(Status::new(ANY_SOURCE, ANY_TAG, data.len())));
                }
            } else if let Some((len, packed)) = self.packs_at_once(count, datatype)? {
                if self.send_packed_now(world, tag_u, buf, count, datatype, len, packed)? {
                    return Ok(Request::ready(Status::new(ANY_SOURCE, ANY_TAG, len)));
                }
            }
        }
        let data = self.pack_message(buf, count, datatype)?;
        if let Some(world) = world {
            if self.send_staged_now(world, tag_u, &data)? {
                let len = data.len();
                self.dev().give_back_staging(data);
                return Ok(Request::ready(Status::new(ANY_SOURCE, ANY_TAG, len)));
            }
        }
        let mut req = self.isend(data, dest, tag)?;
        self.recycle(&mut req);
        self.dev().keep_staged(&req)?;
        Ok(req)
    }

    /// `MPI_Recv` of up to `count` elements of `datatype` into `buf`.
    /// `status.count` is in bytes; [`Status::count_of`] gives elements.
    pub fn recv_typed(
        &self,
        buf: &mut [u8],
        count: i64,
        datatype: &Datatype,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Status, Error> {
        // Checks commit, count and that `buf` covers every byte touched.
        datatype.segments(buf.len(), count, 0, 0)?;
        if let Some(range) = contiguous_in(datatype, count, buf.len())? {
            return self.recv(&mut buf[range], source, tag);
        }
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            self.dev().note_proc_null();
            return Ok(PROC_NULL_STATUS);
        };
        let packed = datatype.pack_size(count)?;
        if packed > UNPACK_ON_STACK {
            // Unpacked straight from the sender's eager block when the
            // message comes to the front of its source's ring.
            let mut unpacked = Ok(0);
            let mut f = |payload: &[u8]| {
                unpacked = datatype.unpack_part(payload, buf, count, 0);
            };
            if let Some(st) = self
                .dev()
                .recv_in_place(spec, packed, &mut f, &self.inner.group)?
            {
                self.dev().note_unpacked();
                unpacked?;
                return Ok(st);
            }
        }
        let mut small = [0u8; UNPACK_ON_STACK];
        let mut staged = match packed > UNPACK_ON_STACK {
            true => Some(self.dev().staging(packed)?),
            false => None,
        };
        let stage: &mut [u8] = match &mut staged {
            Some(v) => v,
            None => &mut small[..packed],
        };
        let r = self.dev().recv_into(spec, stage, &self.inner.group);
        let unpacked = datatype.unpack_part(&stage[..delivered(&r, stage.len())], buf, count, 0);
        if let Some(v) = staged {
            self.dev().give_back_staging(v);
        }
        if matches!(r, Ok(_) | Err(Error::RecvTruncated { .. })) {
            self.dev().note_unpacked();
        }
        unpacked?;
        r
    }

    /// `MPI_Irecv` of up to `count` elements of `datatype` into `buf`
    /// (moved in, handed back unpacked through [`Request::take_buffer`]).
    /// The operation holds its own clone of `datatype`: dropping yours
    /// (`MPI_Type_free`) while it runs is fine.
    pub fn irecv_typed(
        &self,
        buf: Vec<u8>,
        count: i64,
        datatype: &Datatype,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Request, Error> {
        datatype.segments(buf.len(), count, 0, 0)?;
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            return Ok(self.proc_null_request(Some(buf)));
        };
        let packed = datatype.pack_size(count)?;
        let range = contiguous_in(datatype, count, buf.len())?;
        if range.as_ref().is_some_and(|r| *r == (0..buf.len())) {
            // The data is the whole buffer: a plain receive into it.
            return self.dev().start_recv_owned(spec, buf, &self.inner.group);
        }
        let mut buf = if packed <= UNPACK_ON_STACK {
            match self.recv_typed_now(spec, buf, count, datatype, packed, range)? {
                Ok(done) => return Ok(done),
                Err(buf) => buf,
            }
        } else {
            buf
        };
        if packed > UNPACK_ON_STACK {
            // Already here: unpacked straight from the sender's eager block.
            let mut unpacked = Ok(0);
            let mut f = |payload: &[u8]| {
                unpacked = datatype.unpack_part(payload, &mut buf, count, 0);
            };
            if let Some(st) =
                self.dev()
                    .recv_arrived_with(spec, packed, &mut f, &self.inner.group)?
            {
                self.dev().note_unpacked();
                return Ok(match typed_result(unpacked.err(), Ok(st)) {
                    (status, None) => Request::ready_with_buffer(status, buf),
                    (status, error) => Request::from_outcome(Outcome {
                        status,
                        error,
                        buffer: Some(buf),
                    }),
                });
            }
        }
        // Above the stack size the user's buffer goes into a slot that the
        // endpoint's consumer unpacks into, should the message come as an
        // eager block while the receive is still deferred; otherwise it is
        // received into the staging buffer and unpacked on completion.
        let (user, slot) = if packed > UNPACK_ON_STACK {
            (Vec::new(), Some(InPlaceSlot::new(buf)))
        } else {
            (buf, None)
        };
        let stage = self.dev().staging(packed)?;
        self.dev().start_recv(
            spec,
            stage,
            RecvInto::Typed(Box::new(TypedInto {
                user,
                datatype: datatype.clone(),
                count,
                slot,
            })),
            Arc::clone(&self.inner.group),
        )
    }

    /// [`Comm::irecv_typed`] of a message already here (see
    /// [`Device::recv_now`]), finished in the call: received straight into
    /// `range` of `buf` when the data is that contiguous range, otherwise
    /// onto the stack (`packed` ≤ [`UNPACK_ON_STACK`] bytes) and unpacked
    /// from there. No staging buffer, nothing kept with the request.
    /// `Err(buf)`: no such message yet, nothing was received or posted.
    fn recv_typed_now(
        &self,
        spec: tm_proto::MatchSpec,
        mut buf: Vec<u8>,
        count: i64,
        datatype: &Datatype,
        packed: usize,
        range: Option<core::ops::Range<usize>>,
    ) -> Result<Result<Request, Vec<u8>>, Error> {
        let group = &self.inner.group;
        let (r, unpacked) = match range {
            Some(range) => match self.dev().recv_now(spec, &mut buf[range], group)? {
                Some(r) => (r, Ok(0)),
                None => return Ok(Err(buf)),
            },
            None => {
                let mut small = [0u8; UNPACK_ON_STACK];
                let stage = &mut small[..packed];
                let Some(r) = self.dev().recv_now(spec, stage, group)? else {
                    return Ok(Err(buf));
                };
                let n = delivered(&r, packed);
                self.dev().note_unpacked();
                (r, datatype.unpack_part(&stage[..n], &mut buf, count, 0))
            }
        };
        Ok(Ok(match typed_result(unpacked.err(), r) {
            (status, None) => Request::ready_with_buffer(status, buf),
            (status, error) => Request::from_outcome(Outcome {
                status,
                error,
                buffer: Some(buf),
            }),
        }))
    }

    // ------------------------------------------------------------ probes

    /// `MPI_Iprobe`: the status of the oldest matching message, if one has
    /// arrived (`count` is the message's length); the message stays
    /// queued.
    pub fn iprobe(
        &self,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Option<Status>, Error> {
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            return Ok(Some(PROC_NULL_STATUS));
        };
        self.dev().iprobe(spec, &self.inner.group)
    }

    /// `MPI_Probe`: blocks until a matching message has arrived.
    pub fn probe(&self, source: impl Into<Source>, tag: impl Into<Tag>) -> Result<Status, Error> {
        let (source, tag) = (source.into(), tag.into());
        let mut idle = 0u32;
        loop {
            // iprobe runs a progress pass itself (arrivals are not request
            // completions, so a blocking device check would not return).
            if let Some(st) = self.iprobe(source, tag)? {
                return Ok(st);
            }
            self.dev().check(false)?;
            idle = idle.wrapping_add(1);
            self.dev().relax(idle)?;
        }
    }

    /// `MPI_Improbe`: like [`iprobe`](Self::iprobe), but the message is
    /// removed from matching and bound to the returned [`Message`].
    pub fn improbe(
        &self,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Option<Message>, Error> {
        let Some(spec) = self.spec(source.into(), tag.into())? else {
            return Ok(Some(Message {
                inner: None,
                status: PROC_NULL_STATUS,
                group: None,
            }));
        };
        Ok(self
            .dev()
            .improbe(spec, &self.inner.group)?
            .map(|(m, status)| Message {
                inner: Some(m),
                status,
                group: Some(Arc::clone(&self.inner.group)),
            }))
    }

    /// `MPI_Mprobe`: blocks until a matching message has arrived, and binds
    /// it to the returned [`Message`].
    pub fn mprobe(&self, source: impl Into<Source>, tag: impl Into<Tag>) -> Result<Message, Error> {
        let (source, tag) = (source.into(), tag.into());
        let mut idle = 0u32;
        loop {
            if let Some(m) = self.improbe(source, tag)? {
                return Ok(m);
            }
            self.dev().check(false)?;
            idle = idle.wrapping_add(1);
            self.dev().relax(idle)?;
        }
    }

    /// `MPI_Mrecv`: receives the matched message into `buf`.
    pub fn mrecv(&self, msg: Message, buf: &mut [u8]) -> Result<Status, Error> {
        let mut req = self.imrecv(msg, self.dev().staging(buf.len())?)?;
        let r = self.dev().wait(&mut req);
        if let Some(stage) = req.take_buffer() {
            let n = match &r {
                Ok(st) => st.count,
                Err(Error::RecvTruncated { status, .. }) => status.count,
                Err(_) => 0,
            };
            if let (Some(to), Some(from)) = (buf.get_mut(..n), stage.get(..n)) {
                to.copy_from_slice(from);
            }
            self.dev().give_back_staging(stage);
        }
        r
    }

    /// `MPI_Imrecv`: starts the receive of the matched message into `buf`
    /// (handed back through [`Request::take_buffer`]).
    pub fn imrecv(&self, msg: Message, buf: Vec<u8>) -> Result<Request, Error> {
        match msg.inner {
            None => Ok(self.proc_null_request(Some(buf))),
            Some(m) => {
                let group = msg.group.unwrap_or_else(|| Arc::clone(&self.inner.group));
                self.dev().start_mrecv(m, buf, RecvInto::Owned, group)
            }
        }
    }

    // --------------------------------------------------- requests, cancel

    /// `MPI_Cancel`. A receive that has not matched is removed
    /// (`Ok(true)`); the request then completes with
    /// [`Status::cancelled`](Status) set, and its buffer comes back. A send
    /// that no receive has matched yet (a synchronous one, or one sent by
    /// rendezvous) is withdrawn from its receiver (`Ok(true)`, completing
    /// with `cancelled` set; the receiver does the withdrawal during its
    /// next progress, so this call returns once the receiver is inside any
    /// call). A receive already matched, or a send already complete (small
    /// eager sends), is not cancelled (`Ok(false)`): it completes normally.
    /// A null request is [`Error::InvalidRequest`].
    pub fn cancel(&self, req: &Request) -> Result<bool, Error> {
        self.dev().cancel(req)
    }

    /// `MPI_Wait`.
    pub fn wait(&self, req: &mut Request) -> Result<Status, Error> {
        self.dev().wait(req)
    }

    /// `MPI_Test`.
    pub fn test(&self, req: &mut Request) -> Result<Option<Status>, Error> {
        req.test_on(&mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Waitall`.
    pub fn waitall(&self, reqs: &mut [Request]) -> Result<Vec<Status>, Error> {
        request::waitall_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Waitany`.
    pub fn waitany(&self, reqs: &mut [Request]) -> Result<Option<(usize, Status)>, Error> {
        request::waitany_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Waitsome`.
    pub fn waitsome(&self, reqs: &mut [Request]) -> Result<Option<Vec<(usize, Status)>>, Error> {
        request::waitsome_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Testall`.
    pub fn testall(&self, reqs: &mut [Request]) -> Result<Option<Vec<Status>>, Error> {
        request::testall_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Testany`.
    pub fn testany(&self, reqs: &mut [Request]) -> Result<AnyOutcome, Error> {
        request::testany_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    /// `MPI_Testsome`.
    pub fn testsome(&self, reqs: &mut [Request]) -> Result<Option<Vec<(usize, Status)>>, Error> {
        request::testsome_on(reqs, &mut DeviceProgress::new(self.dev()))
    }

    // --------------------------------------------------------- persistent

    fn persistent(&self, buf: Vec<u8>, kind: PKind) -> Persistent {
        Persistent {
            comm: self.clone(),
            kind,
            buf: Some(buf),
            active: Request::null(),
        }
    }

    /// `MPI_Send_init`: a persistent standard send of `buf` (kept by the
    /// request between starts; change it with [`Persistent::buffer_mut`]).
    pub fn send_init(&self, buf: Vec<u8>, dest: i32, tag: i32) -> Result<Persistent, Error> {
        Self::send_tag(tag)?;
        self.dest(dest)?;
        Ok(self.persistent(
            buf,
            PKind::Send {
                dest,
                tag,
                mode: Mode::Standard,
            },
        ))
    }

    /// `MPI_Ssend_init`: a persistent synchronous send.
    pub fn ssend_init(&self, buf: Vec<u8>, dest: i32, tag: i32) -> Result<Persistent, Error> {
        Self::send_tag(tag)?;
        self.dest(dest)?;
        Ok(self.persistent(
            buf,
            PKind::Send {
                dest,
                tag,
                mode: Mode::Synchronous,
            },
        ))
    }

    /// `MPI_Recv_init`: a persistent receive into `buf`; wildcards are kept
    /// for every start.
    pub fn recv_init(
        &self,
        buf: Vec<u8>,
        source: impl Into<Source>,
        tag: impl Into<Tag>,
    ) -> Result<Persistent, Error> {
        let (source, tag) = (source.into(), tag.into());
        self.spec(source, tag)?;
        Ok(self.persistent(buf, PKind::Recv { source, tag }))
    }

    // ---------------------------------------------------------- misc

    /// `MPI_Abort`: tears the whole job down; `code` becomes the launcher's
    /// exit status (`tmrun`, Hydra).
    pub fn abort(&self, code: i32, message: &str) -> ! {
        self.dev().abort(code, message)
    }

    /// The ADI's protocol counters so far (process-wide).
    pub fn counters(&self) -> crate::Counters {
        self.dev().counters()
    }

    /// `MPI_Get_processor_name` (`MPID_Node_name`): this host's name.
    pub fn processor_name(&self) -> &str {
        &self.dev().node_name
    }

    /// The predefined attributes of this communicator.
    pub fn attributes(&self) -> Attributes {
        Attributes {
            tag_ub: TAG_UB,
            host: crate::attr::HOST,
            io: ANY_SOURCE,
            wtime_is_global: crate::attr::WTIME_IS_GLOBAL,
            appnum: self.dev().appnum,
            universe_size: self.dev().world_size as i32,
        }
    }

    /// Polls until `deadline` for a condition; used by tests and examples
    /// that must not hang. Not part of MPI.
    #[doc(hidden)]
    pub fn poll_until(
        &self,
        deadline: Instant,
        mut done: impl FnMut() -> Result<bool, Error>,
    ) -> Result<bool, Error> {
        while Instant::now() < deadline {
            if done()? {
                return Ok(true);
            }
            self.dev().check(true)?;
        }
        done()
    }
}

/// The predefined attributes (`MPI_Comm_get_attr` on `MPI_COMM_WORLD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attributes {
    /// `MPI_TAG_UB`.
    pub tag_ub: i32,
    /// `MPI_HOST`: `PROC_NULL` (no host process).
    pub host: i32,
    /// `MPI_IO`: `ANY_SOURCE`, every rank can do I/O (the launchers forward
    /// every rank's output).
    pub io: i32,
    /// `MPI_WTIME_IS_GLOBAL`: `false`.
    pub wtime_is_global: bool,
    /// `MPI_APPNUM`: the launcher's application number.
    pub appnum: i64,
    /// `MPI_UNIVERSE_SIZE`: the job's size (no dynamic processes).
    pub universe_size: i32,
}

#[derive(Debug, Clone, Copy)]
enum PKind {
    Send { dest: i32, tag: i32, mode: Mode },
    Recv { source: Source, tag: Tag },
}

/// A persistent request (`MPI_Send_init`/`MPI_Recv_init`): started any
/// number of times with [`start`](Self::start) / [`startall`], each start
/// completed with [`wait`](Self::wait) or [`test`](Self::test). The buffer
/// lives in the request between starts.
#[derive(Debug)]
pub struct Persistent {
    comm: Comm,
    kind: PKind,
    buf: Option<Vec<u8>>,
    active: Request,
}

impl Persistent {
    /// `MPI_Start`. Starting an active request is
    /// [`Error::InvalidRequest`].
    pub fn start(&mut self) -> Result<(), Error> {
        if !self.active.is_null() {
            return Err(Error::InvalidRequest {
                what: "start of an active persistent request",
            });
        }
        let buf = self.buf.take().ok_or_else(|| Error::InvalidRequest {
            what: "persistent request lost its buffer",
        })?;
        let r = match self.kind {
            PKind::Send { dest, tag, mode } => self.comm.isend_mode(buf, dest, tag, mode),
            PKind::Recv { source, tag } => self.comm.irecv(buf, source, tag),
        };
        match r {
            Ok(req) => {
                self.active = req;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    fn settle(&mut self, r: Result<Option<Status>, Error>) -> Result<Option<Status>, Error> {
        if self.active.is_null() {
            if let Some(b) = self.active.take_buffer() {
                self.buf = Some(b);
            }
        }
        r
    }

    /// `MPI_Wait` on the current start; the buffer returns to the request.
    /// An inactive request returns the empty status at once.
    pub fn wait(&mut self) -> Result<Status, Error> {
        let r = self.comm.wait(&mut self.active).map(Some);
        self.settle(r).map(|s| s.unwrap_or(Status::EMPTY))
    }

    /// `MPI_Test` on the current start.
    pub fn test(&mut self) -> Result<Option<Status>, Error> {
        let r = self.comm.test(&mut self.active);
        self.settle(r)
    }

    /// Whether a start is in progress.
    pub fn is_active(&self) -> bool {
        !self.active.is_null()
    }

    /// `MPI_Cancel` of the current start.
    pub fn cancel(&self) -> Result<bool, Error> {
        self.comm.cancel(&self.active)
    }

    /// The buffer (received data after a completed receive), if inactive.
    pub fn buffer(&self) -> Option<&[u8]> {
        self.buf.as_deref()
    }

    /// The buffer, to change what the next start sends (inactive only).
    pub fn buffer_mut(&mut self) -> Option<&mut Vec<u8>> {
        self.buf.as_mut()
    }
}

/// `MPI_Startall`: starts every request; stops at the first error.
pub fn startall(reqs: &mut [Persistent]) -> Result<(), Error> {
    reqs.iter_mut().try_for_each(Persistent::start)
}
