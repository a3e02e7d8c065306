//! The progress pass and blocking: draining the rings, pushing local queues,
//! reclaiming eager blocks, liveness.

use super::*;

/// Headers taken from one inbound ring per progress call.
pub(super) const POLL_BUDGET: usize = 32;

/// Progress passes in a row with nothing to do after which unexpected CMA
/// messages of eager sizes are read aside ([`Endpoint::pull_unexpected_cma`]).
/// The adi stress test with replies by CMA from 129 B (thousands of
/// blocking sends waiting this long) takes 1.7–1.8 s with 512, 7.5–8.0 s
/// with 4096; `osu`'s ping-pong replies at 7,000 B and 8 KiB are never
/// read aside with 512.
pub(super) const PULL_IDLE_PASSES: u32 = 512;

#[derive(Debug, Clone, Copy)]
pub(super) enum Watch {
    One(u32),
    All,
    Pending,
}

impl Endpoint {
    /// Drains inbound rings, pushes queued sends and reclaims eager buffers.
    /// Returns how many events happened (0 = nothing to do).
    pub fn progress(&mut self) -> Result<usize> {
        self.progress_for(&mut [])
    }

    /// One progress pass; a message matched to the receive of the blocked
    /// `recv`/`try_recv` call (if any) is delivered into `buf`.
    pub(super) fn progress_for(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.progress_want(None, buf).map(|(n, _)| n)
    }

    /// The ring part of a progress pass: up to [`POLL_BUDGET`] headers
    /// from each inbound ring, each handled as soon as it is taken (see
    /// [`Endpoint::progress_want`]). Returns how many it took.
    pub(super) fn poll_rings(
        &mut self,
        me: u32,
        size: u32,
        want: &mut Option<MatchSpec>,
        got: &mut Option<Result<Status>>,
        buf: &mut [u8],
    ) -> Result<usize> {
        let mut events = 0;
        for s in 0..size {
            for _ in 0..POLL_BUDGET {
                let seg = self.node.segment();
                let ring = seg.ring(s, me);
                let p = &mut self.peers[s as usize];
                let Some(mut h) = p.inbox.poll(ring) else {
                    break;
                };
                // The ring identifies the sender; never trust the field.
                h.source = s;
                events += 1;
                let data = if h.kind == Kind::InlineExt {
                    match self.take_ext_in_pass(s, &h, want, got, buf)? {
                        Some(data) => data,
                        None => continue,
                    }
                } else {
                    None
                };
                self.handle_header(h, data, want, got, buf)?;
            }
        }
        Ok(events)
    }

    /// [`Endpoint::progress_for`] for a blocked receive that is **not**
    /// posted (`try_recv`'s first pass): the first arrival of this pass
    /// that matches `want` is delivered into `buf` at once, without
    /// queueing it as unexpected and posting against it, when the model
    /// allows it ([`Offload::offer_unposted`]: no receive posted or
    /// deferred, nothing parked, nothing queued).
    /// Returns the events and that receive's result.
    /// A pass [`Endpoint::quiet`] finds nothing for costs its checks only
    /// (not the whole pass's call).
    #[inline]
    pub(super) fn progress_want(
        &mut self,
        want: Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<(usize, Option<Result<Status>>)> {
        if self.quiet() {
            return Ok((self.quiet_pass(), None));
        }
        self.full_pass(want, buf)
    }

    /// [`Endpoint::progress_want`]'s pass when there is something to do.
    #[inline(never)]
    fn full_pass(
        &mut self,
        mut want: Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<(usize, Option<Result<Status>>)> {
        let mut got = None;
        let mut events = 0;
        if !self.late_cma.is_empty() {
            events += self.copy_late(buf);
        }
        if self.matching.deferred_len() != 0 {
            events += self.take_deferred()?;
        }
        // While the offload model waits for a claimed prepost's DONE, later
        // arrivals would only be parked behind it: leave them in the rings,
        // which bounds the counted messages in flight by the ring sizes
        // (see PHASE_WINDOW). The claimer finishes without our help.
        //
        // Each header is handled as soon as it is taken (in the same order
        // a batch of the pass would be: ring by ring, in ring order), not
        // collected first: no copy of it into and out of a batch.
        if self.matching.parked_len() == 0 {
            let (me, size) = {
                let seg = self.node.segment();
                (seg.rank(), seg.size())
            };
            self.batch_cma_now = self.cma_batch_enabled;
            let polled = self.poll_rings(me, size, &mut want, &mut got, buf);
            self.batch_cma_now = false;
            events += polled?;
            if !self.late_cma.is_empty() {
                events += self.copy_late(buf);
            }
        }
        if !self.requests.engine.is_empty() {
            events += self.poll_engine(buf)?;
        }
        if events == 0 && !self.split_sends.is_empty() {
            // Only a pass with nothing of its own to do helps a receiver
            // copy: a busy one leaves the offer, which the receiver then
            // withdraws (both ranks copying their own messages already).
            events += self.serve_splits();
        }
        if self.uncopied_eager > 0 {
            events += self.relieve_pressure();
        }
        if events > 0 {
            self.counters.unexpected_max = self
                .counters
                .unexpected_max
                .max(self.matching.unexpected_len() as u64);
        }
        for d in 0..self.size() {
            events += self.flush_peer(d);
        }
        if self.eager.in_flight() > 0 {
            events += self.eager.reclaim_pass(released(self.node.segment()));
        }
        if events == 0 && !self.unexpected.is_empty() {
            events += self.idle_with_unexpected();
        } else {
            self.idle_passes = 0;
        }
        let staged = self.peers.iter().any(|p| {
            p.staged
                .iter()
                .any(|s| matches!(s, Staged::Data { .. } | Staged::Frag { .. }))
        });
        if staged != self.pressure_raised {
            self.pressure_raised = staged;
            self.node.segment().set_eager_pressure(staged);
            tracing::debug!(pressure = staged, "eager-pressure flag changed");
        }
        Ok((events, got))
    }

    /// Whether a progress pass would find nothing to do: no header in any
    /// inbound ring, nothing queued for a peer, no local work (late CMA
    /// copies, engine requests, split sends, copies owed to a pressured
    /// sender, a raised pressure flag), no deferred receive its pass would
    /// post, no parked message, and no eager block a pass would take back
    /// (at most one in flight, not released yet; with more, a pass takes
    /// back released ones out of order). The idle pass of a wait then
    /// costs these loads instead of the whole pass.
    ///
    /// An empty ring's look ([`Consumer::peek`]) publishes the consumer
    /// index, as the pass's poll does.
    #[inline]
    pub(super) fn quiet(&mut self) -> bool {
        let seg = self.node.segment();
        let busy = !self.late_cma.is_empty()
            || self.matching.parked_len() != 0
            || !self.requests.engine.is_empty()
            || !self.split_sends.is_empty()
            || self.owes_copies()
            || self.pressure_raised;
        if busy {
            return false;
        }
        // The pass would post the deferred receives for a pressured sender.
        if self.matching.deferred_len() != 0
            && self
                .matching
                .deferred_source()
                .is_some_and(|s| seg.eager_pressure(s))
        {
            return false;
        }
        match self.eager.in_flight() {
            0 => {}
            1 => {
                if self.eager.oldest().is_some_and(released(seg)) {
                    return false;
                }
            }
            _ => return false,
        }
        let me = seg.rank();
        for (s, p) in self.peers.iter_mut().enumerate() {
            if p.outbox.pending() + p.staged.len() > 0 {
                return false;
            }
            if p.inbox.peek(seg.ring(s as u32, me)).is_some() {
                return false;
            }
        }
        true
    }

    /// The rest of a progress pass [`Endpoint::quiet`] found nothing for:
    /// the count of idle passes while unexpected messages are stored
    /// ([`Endpoint::idle_with_unexpected`]). Returns its events.
    #[inline]
    pub(super) fn quiet_pass(&mut self) -> usize {
        if self.unexpected.is_empty() {
            self.idle_passes = 0;
            0
        } else {
            self.idle_with_unexpected()
        }
    }

    /// The progress pass's handling of the continuation of inline-ext
    /// message `h`, just taken from `s`'s ring ([`Endpoint::take_ext`];
    /// out of line: the inline messages' loop stays lean): `None` when a
    /// receive took it from the slots (the blocked call's result, if it was
    /// its own, left in `got`), otherwise its payload copied out for the
    /// general path.
    #[inline(never)]
    pub(super) fn take_ext_in_pass(
        &mut self,
        s: u32,
        h: &Header,
        want: &mut Option<MatchSpec>,
        got: &mut Option<Result<Status>>,
        buf: &mut [u8],
    ) -> Result<Option<Option<Vec<u8>>>> {
        Ok(match self.take_ext(s, h, want, buf)? {
            ExtTaken::Unposted(r) => {
                *got = Some(r);
                None
            }
            ExtTaken::Posted => None,
            ExtTaken::Data(data) => Some(data),
        })
    }

    /// [`Endpoint::handle_header`]'s offer of message `h` (and its copied
    /// `data`) to the blocked receive that is not posted, `want` (out of
    /// line: a progress pass has none). `true` when the receive took it:
    /// delivered into `buf`, its result in `got`.
    #[inline(never)]
    pub(super) fn offer_to_want(
        &mut self,
        h: &Header,
        data: &mut Option<Vec<u8>>,
        want: &mut Option<MatchSpec>,
        got: &mut Option<Result<Status>>,
        buf: &mut [u8],
    ) -> Result<bool> {
        let Some(spec) = *want else {
            return Ok(false);
        };
        let direct = matches!(
            Kind::of(h.kind),
            Some(Kind::Inline | Kind::Eager | Kind::InlineExt)
        );
        match self.offer_unposted(&spec, h, direct)? {
            Unposted::Taken => {
                *want = None;
                let r = self.deliver(*h, data.take(), buf);
                if matches!(&r, Ok(st) if st.truncated()) {
                    self.counters.truncated += 1;
                }
                *got = Some(r);
                Ok(true)
            }
            // Its message, going through the model: nothing later may
            // overtake it.
            Unposted::Queue => {
                *want = None;
                Ok(false)
            }
            Unposted::NotMine => Ok(false),
        }
    }

    /// One header from a ring (its `source` set from the ring): a FIN or
    /// ACK for our sends, a fragment, or a message for the model. With
    /// `want` (a blocked receive that is not posted), the model is offered
    /// the message for it first ([`Endpoint::offer_unposted`]): taken, it
    /// is delivered into `buf` directly, its result left in `got`; `want`
    /// is cleared at the receive's first message either way (a later one
    /// must not overtake it).
    #[inline(always)]
    pub(super) fn handle_header(
        &mut self,
        h: Header,
        mut data: Option<Vec<u8>>,
        want: &mut Option<MatchSpec>,
        got: &mut Option<Result<Status>>,
        buf: &mut [u8],
    ) -> Result<()> {
        if h.kind == Kind::Fin {
            self.peers[h.source as usize].control_in += 1;
            self.handle_fin(h.word, h.has(Flags::MATCHED));
            return Ok(());
        }
        if h.kind == Kind::Ack {
            self.peers[h.source as usize].control_in += 1;
            self.handle_ack(h.word);
            return Ok(());
        }
        if h.kind == Kind::Cancel || h.kind == Kind::Cancelled {
            self.peers[h.source as usize].control_in += 1;
            return self.on_cancel_header(&h);
        }
        if want.is_some() && self.offer_to_want(&h, &mut data, want, got, buf)? {
            return Ok(());
        }
        if h.kind == Kind::Frag {
            // The last fragment completes a message: it arrives then.
            return match self.take_fragment(h, buf) {
                Some(u) => self.handle_arrival(u.hdr, u.data, buf),
                None => Ok(()),
            };
        }
        self.handle_arrival(h, data, buf)
    }

    /// Work of our own that a progress pass does besides reading rings:
    /// sends held locally, copies owed to a pressured sender, preposts.
    pub(super) fn local_work(&self) -> bool {
        self.uncopied_eager > 0
            || !self.late_cma.is_empty()
            || !self.split_sends.is_empty()
            || self.pressure_raised
            || !self.requests.engine.is_empty()
            || self
                .peers
                .iter()
                .any(|p| p.outbox.pending() > 0 || !p.staged.is_empty())
    }

    pub(super) fn check_watch(&self, w: Watch) -> Result<()> {
        let seg = self.node.segment();
        match w {
            Watch::One(pe) => seg.check_alive(pe),
            Watch::All => (0..self.size()).try_for_each(|pe| seg.check_alive(pe)),
            Watch::Pending => (0..self.size())
                .filter(|&pe| {
                    let p = &self.peers[pe as usize];
                    p.outbox.pending() + p.staged.len() > 0
                })
                .try_for_each(|pe| seg.check_alive(pe)),
        }
    }

    /// Runs `step` (which makes progress itself and reports its events)
    /// until it returns a value, spinning, then yielding, when idle, and
    /// checking `watch`'s liveness every `TMX_SHMEM_LIVENESS_MS`.
    pub(super) fn block<T>(
        &mut self,
        watch: Watch,
        mut step: impl FnMut(&mut Self) -> Result<(Option<T>, usize)>,
    ) -> Result<T> {
        let interval = self.node.config().liveness_interval;
        // Read the clock only once idle (a blocking call that completes
        // within a few spins, as in a ping-pong, never does).
        let mut last: Option<Instant> = None;
        let mut idle = 0u32;
        loop {
            let (done, events) = step(self)?;
            if let Some(t) = done {
                return Ok(t);
            }
            if events > 0 {
                idle = 0;
                continue;
            }
            idle = idle.wrapping_add(1);
            if idle < 16 {
                // The first looks back to back: a PAUSE costs ~27 ns here,
                // a fifth of a small message's one-way time.
            } else if idle < 128 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            if idle % 64 != 0 {
                continue;
            }
            let Some(since) = last else {
                last = Some(Instant::now());
                continue;
            };
            if since.elapsed() >= interval {
                last = Some(Instant::now());
                if let Err(e) = self.check_watch(watch) {
                    // Deliver what the peer managed to send before dying:
                    // drain until nothing moves any more.
                    loop {
                        match step(self)? {
                            (Some(t), _) => return Ok(t),
                            (None, 0) => break,
                            (None, _) => {}
                        }
                    }
                    tracing::info!(error = %e, "peer gone while blocked");
                    return Err(e);
                }
            }
        }
    }

    /// Non-blocking liveness check for upper layers that run their own wait
    /// loops: [`Error::PeerDied`] if `peer` died (or exited without
    /// finalizing); with `None`, any peer a pending request of ours waits
    /// for (a send's receiver, an exact-source receive's sender, every peer
    /// for a pending `ANY_SOURCE` receive, a peer with sends queued
    /// locally).
    pub fn check_alive(&mut self, peer: Option<u32>) -> Result<()> {
        let seg = self.node.segment();
        if let Some(p) = peer {
            if p >= self.size() {
                return Err(Error::BadPe {
                    pe: p,
                    size: self.size(),
                });
            }
            return seg.check_alive(p);
        }
        let me = self.rank();
        let mut any = false;
        let mut watched = vec![false; self.size() as usize];
        for r in self.sends.values().filter(|r| !r.done()) {
            watched[r.dest as usize] = true;
        }
        for r in self.requests.values().filter(|r| r.done.is_none()) {
            match r.spec.source {
                Source::Rank(s) => {
                    if let Some(w) = watched.get_mut(s as usize) {
                        *w = true;
                    }
                }
                Source::Any => any = true,
            }
        }
        for (pe, w) in watched.iter().enumerate() {
            let pe = pe as u32;
            if pe != me && (any || *w || self.queued_for(pe) > 0) {
                seg.check_alive(pe)?;
            }
        }
        Ok(())
    }

    /// Counts a progress pass that had nothing to do while unexpected
    /// messages are stored; every [`PULL_IDLE_PASSES`]-th in a row reads
    /// the CMA ones of eager sizes aside ([`Endpoint::pull_unexpected_cma`]).
    /// Returns how many it read.
    #[cold]
    #[inline(never)]
    pub(super) fn idle_with_unexpected(&mut self) -> usize {
        self.idle_passes += 1;
        if self.idle_passes < PULL_IDLE_PASSES {
            return 0;
        }
        self.idle_passes = 0;
        self.pull_unexpected_cma()
    }

    /// After [`PULL_IDLE_PASSES`] progress passes in a row with nothing to
    /// do: reads every unexpected CMA message no larger than
    /// `TMX_SHMEM_TUNE=cma_threshold` into private memory and returns its FIN;
    /// returns how many. Such a message went by CMA as a reply or while
    /// traffic flowed both ways, at a size that otherwise goes through an
    /// eager block, and its sender must not wait for the receive any more
    /// than it would have with the eager block: a program whose standard
    /// sends of such sizes must complete before they are matched (as they
    /// do with MPICH) would otherwise hang, every rank waiting. Reading
    /// them only once idle leaves the single copy to a receive posted
    /// soon, as in a ping-pong. A read that fails leaves the message as
    /// it was (its receive reads it and reports the failure).
    pub(super) fn pull_unexpected_cma(&mut self) -> usize {
        let pulled = self.read_cma_aside(self.node.config().cma_threshold);
        if pulled > 0 {
            self.counters.cma_pulled += pulled as u64;
            tracing::debug!(pulled, "unexpected CMA messages read aside while idle");
        }
        pulled
    }

    /// While blocked in a CMA send: pulls every unexpected CMA message into
    /// private memory and returns its FIN, so ranks that rendezvous-send to
    /// each other (in a cycle) before receiving all finish. Returns how many
    /// were pulled.
    pub(super) fn relieve_rendezvous(&mut self) -> usize {
        let pulled = self.read_cma_aside(u64::MAX);
        if pulled > 0 {
            tracing::debug!(
                pulled,
                "pulled crossed CMA messages while blocked in a CMA send"
            );
        }
        pulled
    }

    /// Reads every unexpected CMA message of at most `max` bytes not read
    /// yet into private memory and returns its FIN (not a match: a
    /// synchronous send still gets its acknowledgement when a receive
    /// takes it); returns how many. A read that fails leaves its message
    /// as it was: its receive retries the read and reports the failure.
    pub(super) fn read_cma_aside(&mut self, max: u64) -> usize {
        let mut pulled = Vec::new();
        for u in self.unexpected.values_mut() {
            let h = u.hdr;
            if h.kind != Kind::Cma || u.data.is_some() || u64::from(h.nbytes) > max {
                continue;
            }
            let mut v = vec![0u8; h.nbytes as usize];
            match self.node.cma_read(h.source, h.word, &mut v) {
                Ok(()) => u.data = Some(v),
                Err(e) => {
                    tracing::warn!(error = %e, "reading an unexpected CMA message aside failed");
                    continue;
                }
            }
            pulled.push(h);
        }
        for h in &pulled {
            self.send_fin(h, false);
        }
        pulled.len()
    }

    /// Blocks until nothing is queued locally: every send is in a ring.
    pub fn flush(&mut self) -> Result<()> {
        self.block(Watch::Pending, |ep| {
            let ev = ep.progress()?;
            Ok(((ep.queued() == 0).then_some(()), ev))
        })
    }

    /// Flushes, marks this rank finalized and returns the counters.
    pub fn finalize(mut self) -> Result<Counters> {
        self.undefer()?;
        self.copy_late(&mut []);
        self.flush()?;
        let c = self.counters();
        tracing::info!(rank = self.rank(), counters = %c, "shmem endpoint finalized");
        self.node.finalize();
        Ok(c)
    }
}
