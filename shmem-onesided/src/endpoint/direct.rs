//! Receive fast paths: a receive that takes its message from the front of its
//! source's ring without being posted.

use super::*;

/// Takes the header at the front of `$s`'s ring for `$taker` into `$h`
/// (returning `Ok(None)` from the enclosing function otherwise), looking
/// with `Consumer::$look` (`peek`, which publishes the consumer index when
/// the ring is empty, or `peek_ahead`). `$ok(&header, ring, eager_bytes)`
/// says whether this path can deliver it (kind, length, bounds); a
/// synchronous message, or one the model cannot count
/// ([`Endpoint::countable`]), never is. The model decides whether the
/// receive takes it: a receive posted nowhere through its turn
/// ([`Offload::unposted_turn`], taken before the look, so that a receive
/// that could take nothing does not touch the ring), the oldest deferred
/// receive through [`Offload::take_deferred`]. Past it the message is
/// accounted for (a sync it made due stored in our phase) and the caller
/// must take it. A macro, not a function: the header stays a local of
/// the fast path (returned through memory, it cost a store per field).
macro_rules! front_take {
    ($ep:ident, $taker:expr, $s:expr, $look:ident, $ok:expr => $h:ident) => {
        let taker: Taker = $taker;
        let s: u32 = $s;
        let layout_max = $ep.layout_max;
        let eager_bytes = $ep.node.config().eager_bytes;
        let seg = $ep.node.segment();
        let ring = seg.ring(s, seg.rank());
        let turn = match taker {
            Taker::Unposted(spec) => match $ep.matching.unposted_turn(spec) {
                Some(turn) => Some(turn),
                None => return Ok(None),
            },
            Taker::Deferred(_) => None,
        };
        let Some(mut $h) = $ep.peers[s as usize].inbox.$look(ring) else {
            return Ok(None);
        };
        // The ring identifies the sender; never trust the field.
        $h.source = s;
        let ok = $ok;
        if $h.has(Flags::SYNC) || !countable(layout_max, &$h) || !ok(&$h, ring, eager_bytes) {
            return Ok(None);
        }
        let env = envelope(&$h);
        let counted = $h.has(Flags::COUNTED);
        let taken = match turn {
            Some(turn) => turn.take(&env, counted),
            None => $ep.matching.take_deferred(&env, counted).is_some(),
        };
        if !taken {
            return Ok(None);
        }
        // A sync the count made due: store it in our phase now.
        if $ep.matching.has_output() {
            $ep.poll_actions()?;
        }
    };
}

/// The receive that takes a message from the front of its source's ring
/// on a fast path; the matching model decides whether it may
/// (`front_take!`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Taker {
    /// A receive for this spec that is posted nowhere (a blocked receive's
    /// quick look, an arrived receive): [`Offload::consume_arrival`].
    Unposted(MatchSpec),
    /// The oldest deferred receive (its spec):
    /// [`Offload::take_deferred`].
    Deferred(MatchSpec),
}

impl Taker {
    /// The receive's spec.
    #[inline(always)]
    pub(super) fn spec(self) -> MatchSpec {
        match self {
            Taker::Unposted(spec) | Taker::Deferred(spec) => spec,
        }
    }
}

/// What [`Endpoint::poll_direct`] found.
pub(super) enum Quick {
    /// The receive's message, delivered.
    Taken(Result<Status>),
    /// A header that was something else (handled as a full pass would).
    Other,
    /// Nothing in the ring(s).
    Empty,
}

impl Endpoint {
    /// Delivers inline-ext message `h`, just polled from `source`'s ring
    /// and taken by the blocked receive, straight from its continuation
    /// slots into `buf` (`min(nbytes, buf.len())` bytes; the whole
    /// continuation is consumed either way).
    #[inline(always)]
    pub(super) fn deliver_ext(&mut self, source: u32, h: Header, buf: &mut [u8]) -> Result<Status> {
        let seg = self.node.segment();
        let ring = seg.ring(source, seg.rank());
        let msg_len = h.nbytes as usize;
        let bad = Error::BadHeader {
            source_pe: source,
            reason: "inline message longer than its ring could carry",
        };
        if msg_len <= INLINE_MAX || ext_slots(msg_len - INLINE_MAX) + 1 > ring.capacity() {
            return Err(bad);
        }
        let n = msg_len.min(buf.len());
        copy_inline(&h, &mut buf[..n.min(INLINE_MAX)]);
        let inb = &mut self.peers[source as usize].inbox;
        let ok = if n == msg_len {
            inb.take_ext(ring, &mut buf[INLINE_MAX..msg_len])
        } else {
            let mut tail = vec![0u8; msg_len - INLINE_MAX];
            let ok = inb.take_ext(ring, &mut tail);
            if n > INLINE_MAX {
                buf[INLINE_MAX..n].copy_from_slice(&tail[..n - INLINE_MAX]);
            }
            ok
        };
        if !ok {
            return Err(bad);
        }
        Ok(delivered(&mut self.counters, source, &h, n, buf.len()))
    }

    /// `try_recv`'s quick look, when nothing is posted, queued or parked:
    /// takes the next header of the ring(s) `spec` can match (one header
    /// at most) and delivers it into `buf` if it is the receive's message.
    pub(super) fn poll_direct(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Quick> {
        let seg = self.node.segment();
        let me = seg.rank();
        let n = seg.size();
        // ANY_SOURCE looks at the rings round-robin, so that a flooding
        // sender does not starve the others.
        let (first, count) = match spec.source {
            Source::Rank(pe) => (pe, 1),
            Source::Any => {
                self.any_source_next = (self.any_source_next + 1) % n;
                (self.any_source_next, n)
            }
        };
        for i in 0..count {
            let s = (first + i) % n;
            if s == me {
                // Self-sends never use a ring.
                continue;
            }
            let mut want = Some(spec);
            match self.poll_one(s, &mut want, buf)? {
                Quick::Empty => continue,
                q => return Ok(q),
            }
        }
        Ok(Quick::Empty)
    }

    /// The quick look's fast path for an exact-source receive: if the next
    /// header of the source's ring is an inline, inline-ext or eager
    /// message (not synchronous, well formed) and the model lets `taker`
    /// take it (`front_take!`), it is taken and copied into
    /// `buf` here, as [`Endpoint::poll_one`] and [`Endpoint::deliver`]
    /// would (same counters, status and release of the eager block).
    /// Otherwise the header stays in the ring (`None`) for the general
    /// path. The caller checked that the source is not under eager
    /// pressure.
    // Always inlined: its large result, returned through memory, cost a
    // store-forwarding stall per receive in the caller.
    #[inline(always)]
    pub(super) fn take_now(
        &mut self,
        taker: Taker,
        buf: &mut [u8],
    ) -> Result<Option<Result<Status>>> {
        let Source::Rank(s) = taker.spec().source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        let me = seg.rank();
        if s == me || s >= seg.size() {
            return Ok(None);
        }
        front_take!(self, taker, s, peek, |h: &Header, _ring, eager_bytes| {
            let len = h.nbytes as usize;
            match Kind::of(h.kind) {
                Some(Kind::Inline) => usize::from(h.aux) == len && len <= INLINE_MAX,
                Some(Kind::InlineExt) => true,
                Some(Kind::Eager) => eager_src(eager_bytes, h).is_ok(),
                _ => false,
            }
        } => h);
        let msg_len = h.nbytes as usize;
        let seg = self.node.segment();
        self.peers[s as usize].inbox.skip(seg.ring(s, me));
        if h.kind == Kind::Eager && msg_len as u64 <= PREFETCH_MAX {
            self.prefetch_next_eager(s);
        }
        let n = msg_len.min(buf.len());
        match Kind::of(h.kind) {
            Some(Kind::InlineExt) => return Ok(Some(self.deliver_ext(s, h, buf))),
            Some(Kind::Inline) => copy_inline(&h, &mut buf[..n]),
            _ => {
                if let Err(e) = self.get_eager(&h, &mut buf[..n]) {
                    return Ok(Some(Err(e)));
                }
            }
        }
        Ok(Some(Ok(delivered(&mut self.counters, s, &h, n, buf.len()))))
    }

    /// Prefetches the payload of the eager message after the one just
    /// taken from `s`'s ring, if its header is already there: its lines,
    /// which the sender's core wrote, then arrive while this message is
    /// copied out (a hint only; see [`crate::prefetch`]).
    #[inline(always)]
    pub(super) fn prefetch_next_eager(&self, s: u32) {
        let seg = self.node.segment();
        let Some(next) = self.peers[s as usize]
            .inbox
            .peek_ahead(seg.ring(s, seg.rank()))
        else {
            return;
        };
        if next.kind != Kind::Eager {
            return;
        }
        if let Ok(src) = eager_src(self.node.config().eager_bytes, &next) {
            let len = eager_len(&next).min(PREFETCH_MAX) as usize;
            prefetch::read_range(seg.eager_ptr(s).wrapping_add(src as usize), len);
        }
    }

    /// Takes the next header of `s`'s ring, if any, and handles it as
    /// [`Endpoint::handle_header`] does (with `want`); an inline-ext message
    /// the blocked receive takes is copied straight out of its continuation
    /// slots ([`Endpoint::deliver_ext`]).
    ///
    /// The empty ring (what a receive posted before its message meets) is
    /// answered inline; a header is handled out of line
    /// ([`Endpoint::poll_one_got`]).
    #[inline(always)]
    pub(super) fn poll_one(
        &mut self,
        s: u32,
        want: &mut Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<Quick> {
        let seg = self.node.segment();
        let me = seg.rank();
        let Some(h) = self.peers[s as usize].inbox.poll(seg.ring(s, me)) else {
            return Ok(Quick::Empty);
        };
        self.poll_one_got(s, h, want, buf)
    }

    /// [`Endpoint::poll_one`] for header `h` just taken from `s`'s ring.
    #[inline(never)]
    pub(super) fn poll_one_got(
        &mut self,
        s: u32,
        mut h: Header,
        want: &mut Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<Quick> {
        h.source = s;
        let data = if h.kind == Kind::InlineExt {
            match self.take_ext(s, &h, want, buf)? {
                ExtTaken::Unposted(r) => return Ok(Quick::Taken(r)),
                ExtTaken::Posted => return Ok(Quick::Other),
                ExtTaken::Data(data) => data,
            }
        } else {
            None
        };
        let mut got = None;
        self.handle_header(h, data, want, &mut got, buf)?;
        Ok(match got {
            Some(r) => Quick::Taken(r),
            None => Quick::Other,
        })
    }

    /// For a receive about to be posted: hands the headers waiting in the
    /// ring(s) `spec` can match to the model one by one, in ring order, as
    /// a progress pass would (earlier posted receives take their messages,
    /// the rest are queued), until it meets the receive's own message. That
    /// one is delivered into `buf` directly when nothing is posted or
    /// queued that could claim it first ([`Offload::consume_arrival`]):
    /// its result is returned and the receive is never posted. At most
    /// [`POLL_BUDGET`] headers per ring; nothing while a message is parked
    /// or a sender is under eager pressure.
    pub(super) fn drain_source(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<Result<Status>>> {
        let seg = self.node.segment();
        let pressured = match spec.source {
            Source::Rank(pe) => seg.eager_pressure(pe),
            Source::Any => (0..seg.size()).any(|pe| seg.eager_pressure(pe)),
        };
        if pressured || self.matching.parked_len() != 0 {
            return Ok(None);
        }
        let me = seg.rank();
        let n = seg.size();
        let (first, count) = match spec.source {
            Source::Rank(pe) => (pe, 1),
            Source::Any => (0, n),
        };
        if self.matching.unexpected_len() == 0 && self.matching.posted_len() == 0 {
            // Nothing queued or posted: the fast path may take the front.
            if let Some(r) = self.take_now(Taker::Unposted(spec), buf)? {
                return Ok(Some(r));
            }
        }
        // A queued message could match: only the model may choose.
        let mut want = (self.matching.unexpected_len() == 0).then_some(spec);
        for i in 0..count {
            let s = (first + i) % n;
            if s == me {
                continue;
            }
            for _ in 0..POLL_BUDGET {
                if want.is_none()
                    && self.matching.unexpected_len() == 0
                    && self.peers[s as usize].assembly.is_none()
                {
                    // The header that matched ours went to an earlier
                    // posted receive (nothing is queued, no message is half
                    // assembled): ours may take the next one.
                    want = Some(spec);
                }
                // Once no receive is waiting (ours found its place, nothing
                // else is posted), what follows would only be queued as
                // unexpected: leave it in the ring for a later receive to
                // take directly.
                if want.is_none() && self.matching.posted_len() == 0 {
                    return Ok(None);
                }
                match self.poll_one(s, &mut want, buf)? {
                    Quick::Taken(r) => return Ok(Some(r)),
                    Quick::Other => {}
                    Quick::Empty => break,
                }
            }
        }
        Ok(None)
    }

    /// The eager message at the front of `taker`'s source's ring, if it may
    /// take it there into a buffer of `cap` bytes
    /// ([`Endpoint::recv_arrived`]'s conditions but the first), with its
    /// source. Past a `Some` the model has counted the message as taken
    /// (`front_take!`): the caller must take it.
    ///
    /// [`Endpoint::take_front`] keeps its own copy of these tests: built on
    /// this function (a `Header` returned through memory), the deferred
    /// receives of a bi-directional window lost 5–11% at 256 B – 4 KiB
    /// (A-B-B-A).
    #[inline(always)]
    pub(super) fn eager_front(
        &mut self,
        taker: Taker,
        cap: usize,
    ) -> Result<Option<(u32, Header)>> {
        let Source::Rank(s) = taker.spec().source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        if s == seg.rank() || s >= seg.size() || seg.eager_pressure(s) {
            return Ok(None);
        }
        front_take!(self, taker, s, peek_ahead, |h: &Header, _ring, eager_bytes| {
            h.kind == Kind::Eager && eager_src(eager_bytes, h).is_ok() && h.nbytes as usize <= cap
        } => h);
        Ok(Some((s, h)))
    }

    /// [`Endpoint::recv_arrived`] without its first condition (no deferred
    /// receive), for `taker`: a receive posted nowhere, or the oldest
    /// deferred receive itself ([`Endpoint::take_deferred`]), which nothing
    /// else may come before.
    #[inline(always)]
    pub(super) fn take_front(&mut self, taker: Taker, buf: &mut [u8]) -> Result<Option<Status>> {
        let Source::Rank(s) = taker.spec().source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        let me = seg.rank();
        if s == me || s >= seg.size() || seg.eager_pressure(s) {
            return Ok(None);
        }
        let cap = buf.len();
        front_take!(self, taker, s, peek_ahead, |h: &Header, ring: RingRef<'_>, eager_bytes| {
            let len = h.nbytes as usize;
            len <= cap
                && match Kind::of(h.kind) {
                    Some(Kind::Inline) => usize::from(h.aux) == len && len <= INLINE_MAX,
                    Some(Kind::InlineExt) => {
                        len > INLINE_MAX && ext_slots(len - INLINE_MAX) < ring.capacity()
                    }
                    Some(Kind::Eager) => eager_src(eager_bytes, h).is_ok(),
                    _ => false,
                }
        } => h);
        let len = h.nbytes as usize;
        let seg = self.node.segment();
        let ring = seg.ring(s, me);
        let inb = &mut self.peers[s as usize].inbox;
        inb.skip(ring);
        let dst = &mut buf[..len];
        if h.kind == Kind::Inline {
            copy_inline(&h, dst);
        } else if h.kind == Kind::InlineExt {
            let (head, tail) = dst.split_at_mut(INLINE_MAX);
            copy_inline(&h, head);
            // Cannot fail: the continuation fits the ring (checked above).
            let _ = inb.take_ext(ring, tail);
        } else {
            // Eager, as `take_now` takes it: the next block's prefetch
            // hint, then the copy-out, which cannot fail (its block was
            // checked above) and releases the block.
            if len as u64 <= PREFETCH_MAX {
                self.prefetch_next_eager(s);
            }
            let _ = self.get_eager(&h, dst);
        }
        self.counters.received += 1;
        Ok(Some(Status {
            source: s,
            tag: h.tag,
            context: h.context,
            len,
            msg_len: len,
            cancelled: false,
        }))
    }

    /// Whether `s`'s header ring into this rank holds no header now.
    #[inline]
    pub(super) fn ring_empty(&mut self, s: u32) -> bool {
        let seg = self.node.segment();
        self.peers[s as usize]
            .inbox
            .peek(seg.ring(s, seg.rank()))
            .is_none()
    }
}
