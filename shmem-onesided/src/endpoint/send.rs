//! The send API and its fast paths: sends that complete inside their call
//! (inline, inline with continuation slots, eager).

use super::*;

/// [`Endpoint::send_now_with`] fills messages of up to this many bytes on
/// the stack (they go inline, or are copied into an eager block).
pub(super) const FILL_ON_STACK: usize = 256;

impl Endpoint {
    /// Publishes `hdr` to `dest` after everything queued for it.
    /// The inline send's fast path: publishes a standard send of at most
    /// [`INLINE_MAX`] bytes to another local rank `dest` (the caller
    /// checked all three) straight into its ring when nothing is held for
    /// it and the ring has room; `false` (nothing done) otherwise, and the
    /// general path sends it. What the general path does for it, without
    /// its request id and layers.
    #[inline(always)]
    pub(super) fn send_inline_now(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
    ) -> bool {
        let seg = self.node.segment();
        let me = seg.rank();
        let flags = self.counted_flag().bits();
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            return false;
        }
        let fields = InlineFields {
            kind: Kind::Inline.byte(),
            flags,
            source: me,
            tag,
            context,
        };
        let ring = seg.ring(me, dest);
        let sent = p.outbox.try_send_inline_now(ring, fields, data, |flags| {
            if Flags::from_bits(flags).contains(Flags::COUNTED) {
                ring.count_message();
            }
        });
        if sent {
            self.counters.inline_sends += 1;
            tracing::trace!(dest, len = data.len(), "inline send");
        }
        sent
    }

    /// The standard send's fast path for every size that completes at
    /// once without a request: inline ([`Endpoint::send_inline_now`]),
    /// inline with continuation slots, and buffered (eager) up to
    /// `TMX_SHMEM_TUNE=pipeline_min` when the eager area has room, to another
    /// local rank `dest` (the caller checked `dest`) with nothing held for
    /// it. `false` (nothing done) when the message needs the general path:
    /// synchronous callers never come here; a prepost-direct, CMA,
    /// pipelined or fragmented size; the eager area full; sends held for
    /// `dest`. An eager header that finds the ring full is queued behind
    /// (the send is complete either way, as on the general path).
    #[inline]
    pub(super) fn send_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_now_within(dest, tag, context, data, true)
    }

    /// [`Endpoint::send_now`]; `cma`: whether sizes above
    /// `TMX_SHMEM_TUNE=cma_threshold` are left to CMA (else they are copied
    /// into an eager block too, up to `TMX_SHMEM_TUNE=pipeline_min`).
    #[inline(always)]
    pub(super) fn send_now_within(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        cma: bool,
    ) -> bool {
        let len = data.len();
        if len <= INLINE_MAX {
            return self.send_inline_now(dest, tag, context, data);
        }
        let p = &self.peers[dest as usize];
        if !p.staged.is_empty() || p.outbox.pending() != 0 {
            return false;
        }
        if (len <= self.inline_ext_max || self.inline_as_reply(dest, len))
            && self.send_inline_ext(dest, tag, context, data)
        {
            return true;
        }
        if cma && self.cma_duplex_now(dest, len) {
            // Both ways at once: the general path sends it by CMA.
            return false;
        }
        if cma && self.cma_reply_size(len) {
            if self.would_reply(dest) {
                // A reply by CMA: the general path asks and sends it so.
                return false;
            }
            let _ = self.ask_reply(dest);
        }
        if !self.eager_size_ok(len, cma) {
            return false;
        }
        let seg = self.node.segment();
        // A sender with no receive outstanding is streaming (its core is
        // not also copying messages in): see `PREFETCH_STEP`.
        let stream = !self.recv_outstanding();
        let Some(off) = eager_copy(seg, &mut self.eager, data, stream) else {
            return false;
        };
        self.publish_eager_now(dest, tag, context, len, off);
        true
    }

    /// Whether a message of `len` bytes (more than `inline_ext_max`) may go
    /// through an eager block on [`Endpoint::send_now`]'s path: not a
    /// pipelined, prepost-direct or CMA size, and no larger than the eager
    /// area allows. `cma`: a CMA size counts (see
    /// [`Endpoint::send_now_within`]).
    #[inline]
    pub(super) fn eager_size_ok(&self, len: usize, cma: bool) -> bool {
        let cfg = self.node.config();
        let len64 = len as u64;
        !(len64 > cfg.pipeline_min
            || len64 > self.eager_max()
            || (self.prepost_on && len64 >= cfg.prepost_min)
            || (cma && self.cma_ok() && len64 > cfg.cma_threshold))
    }

    /// A standard send of a buffer the caller is about to reuse (a
    /// packing layer's staging buffer, just written): copied into an eager
    /// block now if it fits, even above `TMX_SHMEM_TUNE=cma_threshold` (up to
    /// `TMX_SHMEM_TUNE=pipeline_min` and the eager area), so that the send
    /// completes in the call and the buffer is free again at once; inline
    /// as [`Endpoint::isend_now`] if small. A CMA send would keep the
    /// buffer until the receiver's FIN, and a window of such sends keeps a
    /// buffer each (a working set that no longer fits the cache the next
    /// pack writes into), while the receiver's single copy of data that
    /// was just packed saves nothing over two copies.
    ///
    /// `false` (nothing done) as for [`Endpoint::isend_now`]: `dest` is
    /// this rank or not a rank, sends are held for `dest`, a pipelined or
    /// prepost-direct size, or the eager area is full. The caller then
    /// sends it the general way.
    pub fn send_copied_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        dest != self.rank()
            && dest < self.size()
            && self.send_now_within(dest, tag, context, data, false)
    }

    /// Publishes the header of an eager message of `len` bytes whose data
    /// is in our eager block at `off` (queued behind if the ring is full:
    /// the send is complete either way).
    #[inline]
    pub(super) fn publish_eager_now(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        len: usize,
        off: u64,
    ) {
        let id = self.next_id;
        let seg = self.node.segment();
        let fields = HeaderFields {
            kind: Kind::Eager.byte(),
            flags: self.counted_flag().bits(),
            // <= pipeline_min, and the eager area (< 2^32)
            nbytes: len as u32,
            source: seg.rank(),
            tag,
            context,
            word: off,
            ext: [0, id, 0, 0],
            ..HeaderFields::default()
        };
        self.next_id += 1;
        self.counters.buffered_sends += 1;
        tracing::trace!(dest, len, "buffered (eager) send");
        let me = seg.rank();
        let p = &mut self.peers[dest as usize];
        let ring = seg.ring(me, dest);
        let sent = p.outbox.try_send_fields_now(ring, fields, |flags| {
            if Flags::from_bits(flags).contains(Flags::COUNTED) {
                ring.count_message();
            }
        });
        if !sent {
            self.enqueue(dest, fields.header());
        }
    }

    /// A standard send of `len` bytes that `fill` writes straight into
    /// where the message travels, if it completes at once: a message that
    /// goes inline (`fill` writes into a buffer on the stack) or through an
    /// eager block (`fill` writes into the block itself, in shared memory),
    /// as on [`Endpoint::isend_now`]'s path. This is how a packing layer
    /// (a datatype send) avoids packing into a buffer of its own that the
    /// transport then copies again.
    ///
    /// `fill` gets a slice of exactly `len` bytes and must write all of it
    /// (whatever it leaves is sent as found: zeros on the stack, stale
    /// bytes in a block); it returns `false` to give up (an error it keeps
    /// to itself), and then nothing is sent.
    ///
    /// `false` (nothing sent; `fill` may or may not have run) when the
    /// message needs the general path: `dest` is this rank or not a rank,
    /// sends are held for `dest`, a pipelined, prepost-direct or CMA size,
    /// the eager area or (inline) the ring is full, or `fill` gave up. The
    /// caller then packs into a buffer and sends that.
    pub fn send_now_with(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        if dest == self.rank() || dest >= self.size() {
            return false;
        }
        if len <= FILL_ON_STACK {
            let mut tmp = [0u8; FILL_ON_STACK];
            let data = &mut tmp[..len];
            return fill(data) && self.send_now(dest, tag, context, data);
        }
        // Larger inline messages (`TMX_SHMEM_TUNE=inline_ext` above the stack
        // buffer) take the general path, as `send_now` would send them.
        let p = &self.peers[dest as usize];
        if len <= self.inline_ext_max
            || !p.staged.is_empty()
            || p.outbox.pending() != 0
            || !self.eager_size_ok(len, true)
        {
            return false;
        }
        let seg = self.node.segment();
        let me = seg.rank();
        let Some(off) = eager_alloc(seg, &mut self.eager, len) else {
            return false;
        };
        // SAFETY: [off + 64, off + 64 + len) is inside our eager area (the
        // allocator's block of `need` bytes) and nobody else touches it: no
        // receiver reads it before the header that names it is published
        // (Release, below), and the block was released by its previous
        // receiver before the allocator handed it out again. The slice
        // lives only for the `fill` call.
        let block = unsafe {
            core::slice::from_raw_parts_mut(
                seg.eager_ptr(me).add((off + EAGER_PREFIX) as usize),
                len,
            )
        };
        // A lone send (a ping-pong: no older block in flight) asks for the
        // ownership of every line before `fill` writes them piecewise (a
        // packing layer's 8-byte stores), so that the requests go out
        // together rather than one store miss at a time. In a window the
        // hint only waited (`osu_ddt` 8 KiB window 0.97×, against 1.05–1.13×
        // for the ping-pong from 512 B to 8 KiB).
        if self.eager.in_flight() <= 1 {
            prefetch::write_range(block.as_ptr(), len);
        }
        if !fill(block) {
            self.eager.unalloc_last(off);
            return false;
        }
        self.publish_eager_now(dest, tag, context, len, off);
        true
    }

    /// Sends `data` (more than [`INLINE_MAX`], at most `inline_reply_max` bytes) to
    /// `dest` inline with continuation slots, if nothing is held for `dest`
    /// and its ring has room for all of it now; otherwise returns `false`
    /// and the caller sends it another way (eager).
    #[inline(always)]
    pub(super) fn send_inline_ext(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
    ) -> bool {
        let seg = self.node.segment();
        let me = seg.rank();
        let fields = InlineFields {
            kind: Kind::InlineExt.byte(),
            flags: self.counted_flag().bits(),
            source: me,
            tag,
            context,
        };
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            return false;
        }
        let ring = seg.ring(me, dest);
        let sent = p
            .outbox
            .try_send_inline_ext_now(ring, fields, data, |flags| {
                if Flags::from_bits(flags).contains(Flags::COUNTED) {
                    ring.count_message();
                }
            });
        if sent {
            self.counters.inline_sends += 1;
            tracing::trace!(
                dest,
                len = data.len(),
                "inline send with continuation slots"
            );
        }
        sent
    }

    /// Sends `data` to local rank `dest` with `(tag, context)`. Returns when
    /// `data` may be reused (see the module docs). Never drops a message:
    /// when the ring or the eager area is full it queues locally. A send to
    /// this rank itself is a local copy through the matcher.
    pub fn send(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<()> {
        if dest != self.rank() && dest < self.size() && self.send_now(dest, tag, context, data) {
            return Ok(());
        }
        if data.len() as u64 > INLINE_MAX as u64 {
            return self.send_blocking(dest, tag, context, data, SendMode::Standard);
        }
        let (id, done, _) =
            self.start_send(dest, tag, context, None, data, SendMode::Standard, false)?;
        if done {
            return Ok(());
        }
        self.wait_send_id(id).map(|_| ())
    }

    /// Starts a nonblocking send of `data` (owned by the endpoint until
    /// [`Endpoint::wait_send`] hands it back). Never blocks: an inline or
    /// eager message is published (or staged locally when the ring or the
    /// eager area is full) and the request completes at once; a CMA send
    /// stays pending until the receiver's FIN; a message larger than the
    /// eager area without CMA is published fragment by fragment by
    /// [`Endpoint::progress`]. Later sends to the same peer never overtake
    /// it. `dest` may be this rank (a local copy through the matcher).
    ///
    /// [`SendMode::Synchronous`] completes only once the receiver matched
    /// the message.
    pub fn isend(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendRequest> {
        let (id, _, _) = self.start_send(dest, tag, context, Some(data), &[], mode, true)?;
        Ok(SendRequest(id))
    }

    /// [`Endpoint::isend`] of a borrowed buffer. The receiver may read
    /// `data` in place (CMA) until the request is complete: the caller must
    /// keep it alive and unchanged until then. (If it does not, the
    /// receiver reads whatever is there or fails its read; this process
    /// never touches `data` after this call returns: a fragmented send
    /// without CMA works from a private copy.)
    pub fn isend_borrowed(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<SendRequest> {
        let (id, _, _) = self.start_send(dest, tag, context, None, data, mode, true)?;
        Ok(SendRequest(id))
    }

    /// A send of a borrowed buffer for a caller that blocks in its own wait
    /// loop (an upper layer's `MPI_Send`): [`Started::Done`] if it completed
    /// at once (inline, eager, prepost-direct, self without a pending match
    /// acknowledgement): nothing is recorded and there is nothing to wait
    /// for. Otherwise [`Started::Pending`] with the request, exactly as
    /// [`Endpoint::isend_borrowed`] returns it (reported by
    /// [`Endpoint::take_completed`], finished by [`Endpoint::wait_send`]);
    /// the caller must keep `data` alive and unchanged until then.
    pub fn send_or_start(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Started<SendRequest, ()>> {
        if mode != SendMode::Synchronous
            && dest != self.rank()
            && dest < self.size()
            && self.send_now(dest, tag, context, data)
        {
            return Ok(Started::Done(()));
        }
        let (id, done, _) = self.start_send(dest, tag, context, None, data, mode, false)?;
        if done {
            return Ok(Started::Done(()));
        }
        // Pending: recorded in `sends` (an internal request is kept while
        // pending); from now on it is a user request like isend_borrowed's.
        match self.sends.get_mut(&id) {
            Some(r) => r.user = true,
            None => return Err(Error::InvalidArgument("pending send not recorded")),
        }
        Ok(Started::Pending(SendRequest(id)))
    }

    /// The fast path of [`Endpoint::isend_or_done`] on a borrowed buffer:
    /// `true` if the send completed inside the call (inline, or copied into
    /// the eager area), so that the caller keeps `data` and nothing is
    /// recorded; `false`: nothing was done (send it with
    /// [`Endpoint::isend_or_done`]).
    #[inline]
    pub fn isend_now(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> bool {
        mode != SendMode::Synchronous
            && dest != self.rank()
            && dest < self.size()
            && self.send_now(dest, tag, context, data)
    }

    /// [`Endpoint::isend_now`] for a message of at most
    /// [`crate::ring::INLINE_MAX`] bytes in a standard send: `true` if it
    /// went into `dest`'s header ring inline (the send is complete: the
    /// bytes are in the slot); `false` (nothing done) for a longer
    /// message, a self-send or bad `dest`, sends held for `dest`, or a
    /// full ring. The whole of [`Endpoint::isend_now`]'s inline branch,
    /// without its other sizes, for a caller that keeps its own fast path
    /// small (the adi's `isend` of a small message: every store and saved
    /// register of the call is a store-buffer entry that waits behind the
    /// slot's line transfer).
    #[inline]
    pub fn isend_inline_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        data.len() <= INLINE_MAX
            && dest != self.rank()
            && dest < self.size()
            && self.send_inline_now(dest, tag, context, data)
    }

    /// [`Endpoint::isend_inline_now`] for the sizes above
    /// [`crate::ring::INLINE_MAX`]: inline with continuation slots, up to
    /// [`Endpoint::inline_ext_max`] bytes (a function of its own, so that
    /// the caller's path for the smaller sizes stays as small).
    #[inline]
    pub fn isend_inline_ext_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        if data.len() <= INLINE_MAX
            || data.len() > self.inline_ext_max
            || dest == self.rank()
            || dest >= self.size()
        {
            return false;
        }
        let p = &self.peers[dest as usize];
        p.staged.is_empty()
            && p.outbox.pending() == 0
            && self.send_inline_ext(dest, tag, context, data)
    }

    /// The largest message [`Endpoint::isend_inline_ext_now`] may send
    /// (`TMX_SHMEM_TUNE=inline_ext`, capped by the ring).
    pub fn inline_ext_max(&self) -> usize {
        self.inline_ext_max.max(INLINE_MAX)
    }

    /// [`Endpoint::isend`] for a caller that wants a send that completes at
    /// once back at once: [`Started::Done`] hands the buffer back when the
    /// send completed inside the call (inline, eager, prepost-direct, self
    /// without a pending match acknowledgement; nothing is recorded and
    /// nothing will be reported); [`Started::Pending`] holds a pending
    /// request exactly as [`Endpoint::isend`] returns it.
    pub fn isend_or_done(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<Started<SendRequest, Vec<u8>>> {
        if self.isend_now(dest, tag, context, &data, mode) {
            return Ok(Started::Done(data));
        }
        let (id, done, back) = self.start_send(dest, tag, context, Some(data), &[], mode, false)?;
        if done {
            return Ok(Started::Done(back.unwrap_or_default()));
        }
        match self.sends.get_mut(&id) {
            Some(r) => r.user = true,
            None => return Err(Error::InvalidArgument("pending send not recorded")),
        }
        Ok(Started::Pending(SendRequest(id)))
    }

    /// A synchronous-mode blocking send (`MPI_Ssend`): returns once the
    /// receiver has matched the message (a prepost-direct write is matched
    /// by construction; a CMA read at match time answers with a FIN that
    /// says so; otherwise the receiver acknowledges the match).
    pub fn ssend(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<()> {
        self.send_blocking(dest, tag, context, data, SendMode::Synchronous)
    }
}
