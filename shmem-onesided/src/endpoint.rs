//! Two-sided messaging over the header rings (the MP_Lite model, without the
//! prepost protocol, which waits for tm-match's offload model).
//!
//! # Paths
//!
//! | size | path | what happens |
//! |---|---|---|
//! | ≤ 40 B | inline | payload in the header slot; one cache line moves |
//! | ≤ eager area − 64 B | buffered (eager) | sender copies into its eager area, header carries the offset; receiver gets (copies out) and raises the block's release flag; the sender reclaims it |
//! | > `TMX_SHMEM_CMA_THRESHOLD`, or larger than the eager area, CMA available | CMA | header carries the sender's address; the receiver `process_vm_readv`s into the user buffer and returns a FIN; the blocking send waits for the FIN |
//! | larger than the eager area, no CMA | fragments | consecutive eager fragments of ≤ ¼ of the eager area; the receiver copies each out on arrival and reassembles; the send blocks (running progress) while the eager area is full |
//!
//! # Completion and ordering
//!
//! - [`Endpoint::send`] returns when the user buffer may be reused: the data
//!   is inline in a published slot, copied to the eager area, held in a local
//!   queue, or (CMA) already read by the receiver.
//! - Per ordered pair, messages are delivered in send order: the ring is FIFO,
//!   and once anything is queued locally for a peer, later sends to that peer
//!   queue behind it (backpressure never reorders and never drops).
//! - [`Endpoint::recv`] matches `(context, source, tag)` with MPI rules
//!   (wildcards allowed) against headers in arrival order.
//!
//! # Blocking and liveness
//!
//! Every blocking call (a receive, the CMA or fragmented send,
//! [`Endpoint::flush`], [`Endpoint::finalize`]) runs [`Endpoint::progress`],
//! which drains all inbound rings into a local queue (so two ranks flooding
//! each other both finish), pushes locally queued sends, and reclaims eager
//! buffers. A rank blocked in a CMA send also pulls crossed CMA messages into
//! private memory and returns their FINs, so ranks that rendezvous-send to
//! each other before receiving finish too. Every
//! `TMX_SHMEM_LIVENESS_MS` it checks that the peers it waits for are alive,
//! and returns [`Error::PeerDied`] instead of hanging.

use crate::counters::Counters;
use crate::error::{Error, Result};
use crate::heap::SymHeap;
use crate::node::{CmaStatus, Node};
use crate::ring::{Consumer, Header, Outbox, Sent, INLINE_MAX};
use crate::segment::Segment;
use core::sync::atomic::{AtomicU32, Ordering};
use std::collections::{HashSet, VecDeque};
use std::time::Instant;
use tm_proto::{Envelope, MatchSpec};

/// Header kind: payload inline in the slot.
pub const KIND_INLINE: u8 = 1;
/// Header kind: payload in the sender's eager area at offset `word`.
pub const KIND_EAGER: u8 = 2;
/// Header kind: payload at address `word` of the sender process (CMA).
pub const KIND_CMA: u8 = 3;
/// Header kind: the receiver finished reading CMA cookie `word`.
pub const KIND_FIN: u8 = 4;
/// Header kind: one fragment of a message larger than the eager area (sent
/// when CMA is unavailable). `nbytes` is the whole message's length,
/// `ext[0..8]` this fragment's length, `word` its eager offset; the first
/// fragment has [`FLAG_FIRST`] and carries the envelope. The fragments of one
/// message are consecutive in the pair's ring.
pub const KIND_FRAG: u8 = 5;
/// Header flag: the first fragment of a fragmented message.
pub const FLAG_FIRST: u8 = 1;

/// Bytes before the data in an eager block (the release flag's cache line).
const EAGER_PREFIX: u64 = 64;
/// Headers taken from one inbound ring per progress call.
const POLL_BUDGET: usize = 32;

/// What a completed receive matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender's local rank.
    pub source: u32,
    /// The message tag.
    pub tag: u32,
    /// The context id.
    pub context: u32,
    /// Bytes delivered.
    pub len: usize,
}

#[derive(Debug)]
enum Staged {
    /// Waiting for eager-area space; the data is held here and `hdr` is
    /// sent once it has a block.
    Data { hdr: Header, bytes: Vec<u8> },
    /// A header queued behind staged data (to keep order).
    Ready(Header),
}

#[derive(Debug)]
struct Peer {
    out: Outbox,
    inb: Consumer,
    staged: VecDeque<Staged>,
    /// A fragmented message from this peer being reassembled.
    assembly: Option<Unexpected>,
}

/// A header that arrived before its receive. An eager payload stays in the
/// sender's eager area (the receive copies it once, straight to the user
/// buffer) unless the sender raises its eager-pressure flag: then progress
/// copies it out here and frees the sender's block, so receipt never depends
/// on matching and a full eager area always drains.
#[derive(Debug)]
struct Unexpected {
    hdr: Header,
    data: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Copy)]
enum Watch {
    One(u32),
    All,
    Pending,
}

/// A messaging endpoint: a [`Node`] plus rings, queues and counters.
#[derive(Debug)]
pub struct Endpoint {
    node: Node,
    peers: Vec<Peer>,
    unexpected: VecDeque<Unexpected>,
    scratch: Vec<Header>,
    eager: SymHeap,
    in_flight: Vec<u64>,
    fins: HashSet<u64>,
    next_cookie: u64,
    /// Unexpected eager messages still in their sender's eager area.
    uncopied: usize,
    /// Our eager-pressure flag is raised.
    pressure: bool,
    /// A fragmented send waits for eager space.
    frag_waiting: bool,
    counters: Counters,
}

fn eager_flag(seg: &Segment, pe: u32, off: u64) -> &AtomicU32 {
    // SAFETY: `off` is the start of an eager block inside pe's eager area
    // (checked by the caller against eager_bytes), 64-byte aligned; the
    // word is valid for any bit pattern and lives as long as the mapping.
    unsafe { AtomicU32::from_ptr(seg.eager_ptr(pe).add(off as usize).cast()) }
}

fn envelope(h: &Header) -> Envelope {
    Envelope {
        context_id: h.context,
        source: h.source,
        tag: h.tag,
    }
}

/// Frees eager blocks whose receiver raised the release flag.
fn reclaim(seg: &Segment, eager: &mut SymHeap, in_flight: &mut Vec<u64>) -> usize {
    let me = seg.rank();
    let before = in_flight.len();
    in_flight.retain(|&off| {
        if eager_flag(seg, me, off).load(Ordering::Acquire) == 1 {
            // The offset came from our own allocator.
            let _ = eager.free(off);
            false
        } else {
            true
        }
    });
    before - in_flight.len()
}

/// Checks an eager or fragment header against the sender's eager area of
/// `area` bytes; returns the data's offset in that area.
fn eager_src(area: u64, h: &Header) -> Result<u64> {
    let ok = h.word % 64 == 0
        && h.word
            .checked_add(EAGER_PREFIX)
            .and_then(|x| x.checked_add(eager_len(h)))
            .is_some_and(|end| end <= area);
    if ok {
        Ok(h.word + EAGER_PREFIX)
    } else {
        Err(Error::BadHeader {
            source_pe: h.source,
            reason: "eager block outside the sender's eager area",
        })
    }
}

/// Copies an eager payload into `dst` (at most `dst.len()` bytes) and
/// releases the sender's block.
fn get_eager(seg: &Segment, area: u64, h: &Header, dst: &mut [u8]) -> Result<()> {
    let src = eager_src(area, h)?;
    let n = (dst.len() as u64).min(eager_len(h)) as usize;
    // SAFETY: [src, src + n) is inside the sender's eager area (eager_src
    // checked src + eager_len <= area, and n <= eager_len); the sender wrote
    // it before publishing the header we acquired and does not reuse it
    // before we raise the flag below. `dst` is private memory.
    unsafe {
        core::ptr::copy_nonoverlapping(
            seg.eager_ptr(h.source).add(src as usize),
            dst.as_mut_ptr(),
            n,
        )
    };
    eager_flag(seg, h.source, h.word).store(1, Ordering::Release);
    Ok(())
}

/// Bytes of payload an eager or fragment header points at.
fn eager_len(h: &Header) -> u64 {
    if h.kind == KIND_FRAG {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h.ext[..8]);
        u64::from_le_bytes(b)
    } else {
        u64::from(h.nbytes)
    }
}

/// Copies `data` into a fresh eager block and returns `tmpl` pointing at it,
/// or `None` if the eager area has no room even after reclaiming.
fn eager_block(
    seg: &Segment,
    eager: &mut SymHeap,
    in_flight: &mut Vec<u64>,
    data: &[u8],
    mut tmpl: Header,
) -> Option<Header> {
    let need = EAGER_PREFIX + data.len() as u64;
    let off = match eager.alloc(need, 64) {
        Ok(o) => o,
        Err(_) => {
            reclaim(seg, eager, in_flight);
            eager.alloc(need, 64).ok()?
        }
    };
    let me = seg.rank();
    eager_flag(seg, me, off).store(0, Ordering::Relaxed);
    // SAFETY: [off + 64, off + 64 + len) is inside our eager area (the
    // allocator's block); no receiver reads it before the header that names
    // it is published (Release), and we do not reuse it before the release
    // flag says the receiver is done.
    unsafe {
        core::ptr::copy_nonoverlapping(
            data.as_ptr(),
            seg.eager_ptr(me).add((off + EAGER_PREFIX) as usize),
            data.len(),
        )
    };
    in_flight.push(off);
    tmpl.source = me;
    tmpl.word = off;
    Some(tmpl)
}

impl Endpoint {
    /// An endpoint over an initialised node.
    pub fn new(node: Node) -> Self {
        let n = node.size();
        let batch = u64::from(node.config().publish_batch);
        let eager = SymHeap::new(node.config().eager_bytes);
        Endpoint {
            peers: (0..n)
                .map(|_| Peer {
                    out: Outbox::new(),
                    inb: Consumer::new(batch),
                    staged: VecDeque::new(),
                    assembly: None,
                })
                .collect(),
            node,
            unexpected: VecDeque::new(),
            scratch: Vec::new(),
            eager,
            in_flight: Vec::new(),
            fins: HashSet::new(),
            next_cookie: 1,
            uncopied: 0,
            pressure: false,
            frag_waiting: false,
            counters: Counters::default(),
        }
    }

    /// The node (one-sided API, segment, configuration).
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// The node, mutably (symmetric `malloc`/`free`).
    pub fn node_mut(&mut self) -> &mut Node {
        &mut self.node
    }

    /// This process's local rank.
    pub fn rank(&self) -> u32 {
        self.node.rank()
    }

    /// Number of local ranks.
    pub fn size(&self) -> u32 {
        self.node.size()
    }

    /// The counters so far.
    pub fn counters(&self) -> Counters {
        let mut c = self.counters;
        c.backpressure_events = self.peers.iter().map(|p| p.out.backpressure_events()).sum();
        c.index_rereads = self.peers.iter().map(|p| p.out.producer().rereads()).sum();
        c
    }

    /// Sends held locally (ring full or eager area full), over all peers.
    pub fn queued(&self) -> usize {
        self.peers
            .iter()
            .map(|p| p.out.pending() + p.staged.len())
            .sum()
    }

    /// The largest message one eager block can hold (the allocator's size,
    /// a multiple of 64, minus the flag line), so that it always fits once
    /// the area drains.
    fn eager_max(&self) -> u64 {
        self.eager
            .size()
            .saturating_sub(EAGER_PREFIX)
            .min(u64::from(u32::MAX))
    }

    fn cma_ok(&self) -> bool {
        *self.node.cma_status() == CmaStatus::Available
    }

    /// Publishes `hdr` to `dest` after everything queued for it.
    fn enqueue(&mut self, dest: u32, hdr: Header) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            p.staged.push_back(Staged::Ready(hdr));
            return;
        }
        if p.out.send(seg.ring(seg.rank(), dest), hdr) == Sent::Queued {
            tracing::debug!(dest, kind = hdr.kind, "send queued locally (backpressure)");
        }
    }

    /// Moves `dest`'s local queues into its ring, in order, as far as they go.
    fn flush_peer(&mut self, dest: u32) -> usize {
        let seg = self.node.segment();
        let ring = seg.ring(seg.rank(), dest);
        let p = &mut self.peers[dest as usize];
        let before = p.out.pending() + p.staged.len();
        if before == 0 {
            return 0;
        }
        if p.out.flush(ring) == 0 {
            while let Some(front) = p.staged.front() {
                let hdr = match front {
                    Staged::Ready(h) => *h,
                    Staged::Data { hdr, bytes } => {
                        match eager_block(seg, &mut self.eager, &mut self.in_flight, bytes, *hdr) {
                            Some(h) => h,
                            None => break,
                        }
                    }
                };
                p.staged.pop_front();
                if p.out.send(ring, hdr) == Sent::Queued {
                    break;
                }
            }
        }
        before - (p.out.pending() + p.staged.len())
    }

    /// Sends `data` to local rank `dest` with `(tag, context)`. Returns when
    /// `data` may be reused (see the module docs). Never drops a message:
    /// when the ring or the eager area is full it queues locally.
    pub fn send(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<()> {
        if dest >= self.size() {
            return Err(Error::BadPe {
                pe: dest,
                size: self.size(),
            });
        }
        let me = self.rank();
        if self.peers[dest as usize].out.pending() + self.peers[dest as usize].staged.len() > 0 {
            self.flush_peer(dest);
        }
        let len = data.len() as u64;
        if data.len() <= INLINE_MAX {
            let mut h = Header {
                kind: KIND_INLINE,
                nbytes: len as u32,
                source: me,
                tag,
                context,
                ..Header::default()
            };
            h.set_inline(data);
            self.counters.inline_sends += 1;
            tracing::trace!(dest, len, "inline send");
            self.enqueue(dest, h);
            return Ok(());
        }
        let eager_max = self.eager_max();
        if self.cma_ok() && (len > self.node.config().cma_threshold || len > eager_max) {
            if len > u64::from(u32::MAX) {
                return Err(Error::MessageTooLarge {
                    len,
                    max: u64::from(u32::MAX),
                });
            }
            return self.send_cma(dest, tag, context, data);
        }
        if len > u64::from(u32::MAX) {
            return Err(Error::MessageTooLarge {
                len,
                max: u64::from(u32::MAX),
            });
        }
        let tmpl = Header {
            kind: KIND_EAGER,
            // <= u32::MAX, checked above
            nbytes: len as u32,
            source: me,
            tag,
            context,
            ..Header::default()
        };
        if len > eager_max {
            return self.send_fragmented(dest, tmpl, data);
        }
        self.counters.buffered_sends += 1;
        self.send_eager(dest, tmpl, data);
        Ok(())
    }

    /// Copies `data` to an eager block and publishes `tmpl` for it, or holds
    /// it locally (never blocks).
    fn send_eager(&mut self, dest: u32, tmpl: Header, data: &[u8]) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        let hdr = if p.staged.is_empty() {
            eager_block(seg, &mut self.eager, &mut self.in_flight, data, tmpl)
        } else {
            None
        };
        match hdr {
            Some(h) => {
                tracing::trace!(dest, len = data.len(), "buffered (eager) send");
                self.enqueue(dest, h);
            }
            None => {
                self.counters.staged_sends += 1;
                tracing::debug!(
                    dest,
                    len = data.len(),
                    "eager area full or sends queued: holding the message locally"
                );
                self.peers[dest as usize].staged.push_back(Staged::Data {
                    hdr: tmpl,
                    bytes: data.to_vec(),
                });
            }
        }
    }

    /// A message larger than the eager area, without CMA: consecutive
    /// fragments of at most a quarter of the eager area. Blocks (running
    /// progress) while the eager area is full rather than copying the whole
    /// message aside; the receiver copies fragments out as they arrive, so
    /// two ranks doing this to each other both finish.
    fn send_fragmented(&mut self, dest: u32, tmpl: Header, data: &[u8]) -> Result<()> {
        let frag = (self.node.config().eager_bytes / 4)
            .saturating_sub(EAGER_PREFIX)
            .max(64) as usize;
        self.counters.fragmented_sends += 1;
        tracing::debug!(dest, len = data.len(), frag, "fragmented send (no CMA)");
        for (k, chunk) in data.chunks(frag).enumerate() {
            let mut h = tmpl;
            h.kind = KIND_FRAG;
            h.flags = if k == 0 { FLAG_FIRST } else { 0 };
            h.ext[..8].copy_from_slice(&(chunk.len() as u64).to_le_bytes());
            self.block(Watch::One(dest), |ep| {
                let ev = ep.progress()?;
                let seg = ep.node.segment();
                let p = &mut ep.peers[dest as usize];
                if !p.staged.is_empty() {
                    return Ok((None, ev));
                }
                match eager_block(seg, &mut ep.eager, &mut ep.in_flight, chunk, h) {
                    Some(h) => {
                        ep.frag_waiting = false;
                        ep.enqueue(dest, h);
                        Ok((Some(()), ev))
                    }
                    None => {
                        // Let receivers know we wait for space.
                        ep.frag_waiting = true;
                        if !ep.pressure {
                            ep.pressure = true;
                            ep.node.segment().set_eager_pressure(true);
                        }
                        Ok((None, ev))
                    }
                }
            })?;
        }
        Ok(())
    }

    fn send_cma(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<()> {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut h = Header {
            kind: KIND_CMA,
            nbytes: data.len() as u32,
            source: self.rank(),
            tag,
            context,
            word: data.as_ptr() as u64,
            ..Header::default()
        };
        h.ext[..8].copy_from_slice(&cookie.to_le_bytes());
        self.counters.cma_sends += 1;
        tracing::debug!(dest, len = data.len(), "CMA rendezvous send");
        self.enqueue(dest, h);
        // `data` stays borrowed (and so valid at that address) until the
        // receiver's FIN says it finished reading.
        self.block(Watch::One(dest), |ep| {
            let ev = ep.progress()? + ep.relieve_rendezvous();
            Ok((ep.fins.remove(&cookie).then_some(()), ev))
        })
    }

    /// Drains inbound rings, pushes queued sends and reclaims eager buffers.
    /// Returns how many events happened (0 = nothing to do).
    pub fn progress(&mut self) -> Result<usize> {
        let (delivered, events) = self.progress_for(None, &mut [])?;
        debug_assert!(delivered.is_none());
        Ok(events)
    }

    /// One progress pass; an arriving header that matches `waiting` (and
    /// nothing queued before it did) is delivered straight into `buf`.
    fn progress_for(
        &mut self,
        waiting: Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<(Option<Status>, usize)> {
        let mut events = 0;
        let mut batch = core::mem::take(&mut self.scratch);
        {
            let seg = self.node.segment();
            let me = seg.rank();
            for s in 0..seg.size() {
                let ring = seg.ring(s, me);
                let p = &mut self.peers[s as usize];
                for _ in 0..POLL_BUDGET {
                    let Some(mut h) = p.inb.poll(ring) else { break };
                    // The ring identifies the sender; never trust the field.
                    h.source = s;
                    batch.push(h);
                }
            }
        }
        events += batch.len();
        let mut delivered: Option<Result<Status>> = None;
        for h in batch.drain(..) {
            if h.kind == KIND_FIN {
                self.fins.insert(h.word);
                continue;
            }
            let h = if h.kind == KIND_FRAG {
                match self.take_fragment(h) {
                    Some(u) => {
                        // The last fragment completed a message: it arrives now.
                        if let Some(spec) = waiting {
                            if delivered.is_none() && spec.matches(&envelope(&u.hdr)) {
                                delivered = Some(self.deliver(u.hdr, u.data, buf));
                                continue;
                            }
                        }
                        self.counters.unexpected += 1;
                        self.unexpected.push_back(u);
                        continue;
                    }
                    None => continue,
                }
            } else {
                h
            };
            if let Some(spec) = waiting {
                if delivered.is_none() && spec.matches(&envelope(&h)) {
                    delivered = Some(self.deliver(h, None, buf));
                    continue;
                }
            }
            if h.kind == KIND_EAGER {
                self.uncopied += 1;
            }
            self.counters.unexpected += 1;
            self.unexpected.push_back(Unexpected { hdr: h, data: None });
        }
        self.scratch = batch;
        if self.uncopied > 0 {
            events += self.relieve_pressure();
        }
        self.counters.unexpected_max = self
            .counters
            .unexpected_max
            .max(self.unexpected.len() as u64);
        for d in 0..self.size() {
            events += self.flush_peer(d);
        }
        if !self.in_flight.is_empty() {
            events += reclaim(self.node.segment(), &mut self.eager, &mut self.in_flight);
        }
        let staged = self
            .peers
            .iter()
            .any(|p| p.staged.iter().any(|s| matches!(s, Staged::Data { .. })))
            || self.frag_waiting;
        if staged != self.pressure {
            self.pressure = staged;
            self.node.segment().set_eager_pressure(staged);
            tracing::debug!(pressure = staged, "eager-pressure flag changed");
        }
        match delivered {
            Some(r) => Ok((Some(r?), events)),
            None => Ok((None, events)),
        }
    }

    /// Copies a fragment out of the sender's eager area (freeing its block)
    /// into the message being reassembled; returns the message once whole.
    fn take_fragment(&mut self, h: Header) -> Option<Unexpected> {
        let seg = self.node.segment();
        let area = self.node.config().eager_bytes;
        let p = &mut self.peers[h.source as usize];
        if h.flags & FLAG_FIRST != 0 {
            if p.assembly.is_some() {
                tracing::warn!(
                    source = h.source,
                    "fragmented message restarted before completion"
                );
            }
            p.assembly = Some(Unexpected {
                hdr: h,
                data: Some(Vec::with_capacity(h.nbytes as usize)),
            });
        }
        let Some(a) = p.assembly.as_mut() else {
            tracing::warn!(
                source = h.source,
                "fragment without a first fragment ignored"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            return None;
        };
        let total = a.hdr.nbytes as usize;
        let data = a.data.get_or_insert_with(Vec::new);
        let start = data.len();
        let n = eager_len(&h) as usize;
        if start.saturating_add(n) > total || eager_src(area, &h).is_err() {
            tracing::warn!(
                source = h.source,
                "malformed fragment: message marked corrupt"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            // The receive reports it: an incomplete message with no data.
            let mut bad = p.assembly.take()?;
            bad.data = None;
            return Some(bad);
        }
        data.resize(start + n, 0);
        // Bounds were checked just above; cannot fail.
        let _ = get_eager(seg, area, &h, &mut data[start..]);
        if data.len() == total {
            return p.assembly.take();
        }
        None
    }

    fn get_eager(&self, h: &Header, dst: &mut [u8]) -> Result<()> {
        get_eager(self.node.segment(), self.node.config().eager_bytes, h, dst)
    }

    /// Copies out the unexpected eager messages of senders that wait for
    /// eager space, freeing their blocks. Returns how many were copied.
    fn relieve_pressure(&mut self) -> usize {
        let mut copied = 0;
        for i in 0..self.unexpected.len() {
            let u = &self.unexpected[i];
            if u.hdr.kind != KIND_EAGER
                || u.data.is_some()
                || !self.node.segment().eager_pressure(u.hdr.source)
            {
                continue;
            }
            let h = u.hdr;
            let mut v = vec![0u8; h.nbytes as usize];
            // A malformed header keeps `None`: its receive reports the error.
            if self.get_eager(&h, &mut v).is_ok() {
                self.unexpected[i].data = Some(v);
                self.uncopied -= 1;
                copied += 1;
            }
        }
        if copied > 0 {
            tracing::debug!(
                copied,
                "copied unexpected eager messages out for senders under pressure"
            );
        }
        copied
    }

    fn check_watch(&self, w: Watch) -> Result<()> {
        let seg = self.node.segment();
        match w {
            Watch::One(pe) => seg.check_alive(pe),
            Watch::All => (0..self.size()).try_for_each(|pe| seg.check_alive(pe)),
            Watch::Pending => (0..self.size())
                .filter(|&pe| {
                    let p = &self.peers[pe as usize];
                    p.out.pending() + p.staged.len() > 0
                })
                .try_for_each(|pe| seg.check_alive(pe)),
        }
    }

    /// Runs `step` (which makes progress itself and reports its events)
    /// until it returns a value, spinning, then yielding, when idle, and
    /// checking `watch`'s liveness every `TMX_SHMEM_LIVENESS_MS`.
    fn block<T>(
        &mut self,
        watch: Watch,
        mut step: impl FnMut(&mut Self) -> Result<(Option<T>, usize)>,
    ) -> Result<T> {
        let interval = self.node.config().liveness_interval;
        let mut last = Instant::now();
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
            if idle < 128 {
                core::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            if idle % 64 == 0 && last.elapsed() >= interval {
                last = Instant::now();
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

    /// Receives the oldest message matching `spec` into `buf` if one has
    /// arrived; never blocks (but does run one progress pass).
    pub fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if let Some(st) = self.take_match(spec, buf)? {
            return Ok(Some(st));
        }
        Ok(self.progress_for(Some(spec), buf)?.0)
    }

    /// Receives the oldest message matching `spec` (MPI rules; wildcards
    /// allowed) into `buf`, blocking until one arrives. Fails with
    /// [`Error::PeerDied`] if the peer it waits for (any peer, for
    /// `ANY_SOURCE`) dies first, and with [`Error::Truncated`] (after
    /// consuming the message) if `buf` is too small.
    pub fn recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Status> {
        if let Some(st) = self.take_match(spec, buf)? {
            return Ok(st);
        }
        let watch = match spec.source {
            tm_proto::Source::Rank(r) if r < self.size() => Watch::One(r),
            tm_proto::Source::Rank(r) => {
                return Err(Error::BadPe {
                    pe: r,
                    size: self.size(),
                })
            }
            tm_proto::Source::Any => Watch::All,
        };
        self.block(watch, |ep| {
            if let Some(st) = ep.take_match(spec, buf)? {
                return Ok((Some(st), 1));
            }
            ep.progress_for(Some(spec), buf)
        })
    }

    fn take_match(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        let Some(i) = self
            .unexpected
            .iter()
            .position(|u| spec.matches(&envelope(&u.hdr)))
        else {
            return Ok(None);
        };
        let Some(u) = self.unexpected.remove(i) else {
            return Ok(None);
        };
        if u.hdr.kind == KIND_EAGER && u.data.is_none() {
            self.uncopied -= 1;
        }
        self.deliver(u.hdr, u.data, buf).map(Some)
    }

    fn deliver(&mut self, h: Header, data: Option<Vec<u8>>, buf: &mut [u8]) -> Result<Status> {
        let len = h.nbytes as usize;
        let st = Status {
            source: h.source,
            tag: h.tag,
            context: h.context,
            len,
        };
        let truncated = Error::Truncated {
            len: len as u64,
            capacity: buf.len() as u64,
        };
        self.counters.received += 1;
        match h.kind {
            KIND_INLINE => {
                let (bytes, n) = h.inline_payload();
                if n != len {
                    return Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "inline length differs from message length",
                    });
                }
                let dst = buf.get_mut(..n).ok_or(truncated)?;
                dst.copy_from_slice(&bytes[..n]);
            }
            KIND_EAGER | KIND_FRAG => match data {
                Some(v) => {
                    let dst = buf.get_mut(..len).ok_or(truncated)?;
                    dst.copy_from_slice(v.get(..len).ok_or(Error::BadHeader {
                        source_pe: h.source,
                        reason: "eager copy shorter than the header says",
                    })?);
                }
                None if h.kind == KIND_FRAG => {
                    return Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "incomplete fragmented message",
                    })
                }
                None => {
                    let fits = len <= buf.len();
                    let n = len.min(buf.len());
                    self.get_eager(&h, &mut buf[..n])?;
                    if !fits {
                        return Err(truncated);
                    }
                }
            },
            KIND_CMA => match data {
                // Pulled while we were blocked in a CMA send; FIN already sent.
                Some(v) => {
                    let dst = buf.get_mut(..len).ok_or(truncated)?;
                    dst.copy_from_slice(v.get(..len).ok_or(Error::BadHeader {
                        source_pe: h.source,
                        reason: "CMA copy shorter than the header says",
                    })?);
                }
                None => {
                    let res = match buf.get_mut(..len) {
                        Some(dst) => self.node.cma_read(h.source, h.word, dst),
                        None => Err(truncated),
                    };
                    self.send_fin(&h);
                    res?;
                }
            },
            _ => {
                return Err(Error::BadHeader {
                    source_pe: h.source,
                    reason: "unknown header kind",
                })
            }
        }
        Ok(st)
    }

    /// Tells a CMA sender that we finished reading its buffer.
    fn send_fin(&mut self, h: &Header) {
        let mut c = [0u8; 8];
        c.copy_from_slice(&h.ext[..8]);
        let fin = Header {
            kind: KIND_FIN,
            source: self.rank(),
            word: u64::from_le_bytes(c),
            ..Header::default()
        };
        self.enqueue(h.source, fin);
    }

    /// While blocked in a CMA send: pulls every unexpected CMA message into
    /// private memory and returns its FIN, so ranks that rendezvous-send to
    /// each other (in a cycle) before receiving all finish. Returns how many
    /// were pulled.
    fn relieve_rendezvous(&mut self) -> usize {
        let mut pulled = 0;
        for i in 0..self.unexpected.len() {
            let u = &self.unexpected[i];
            if u.hdr.kind != KIND_CMA || u.data.is_some() {
                continue;
            }
            let h = u.hdr;
            let mut v = vec![0u8; h.nbytes as usize];
            match self.node.cma_read(h.source, h.word, &mut v) {
                Ok(()) => self.unexpected[i].data = Some(v),
                // The receive reports the failure (data stays None: it will
                // retry the read and answer the FIN then).
                Err(e) => {
                    tracing::warn!(error = %e, "pulling a crossed CMA message failed");
                    continue;
                }
            }
            self.send_fin(&h);
            pulled += 1;
        }
        if pulled > 0 {
            tracing::debug!(
                pulled,
                "pulled crossed CMA messages while blocked in a CMA send"
            );
        }
        pulled
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
        self.flush()?;
        let c = self.counters();
        tracing::info!(rank = self.rank(), counters = %c, "shmem endpoint finalized");
        self.node.finalize();
        Ok(c)
    }
}
