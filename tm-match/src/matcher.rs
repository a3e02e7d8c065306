//! The software matching core: posted-receive and unexpected-message queues
//! with O(1) expected cost for every receive shape.
//!
//! # Data structure
//!
//! A receive has one of four *shapes* per context id: `(s,t)`, `(s,*)`,
//! `(*,t)` and `(*,*)`. Posted receives are kept in one FIFO list per *exact
//! key* of their shape — `(ctx,s,t)`, `(ctx,s)`, `(ctx,t)` and `(ctx)` — so
//! every receive in the list an arriving message selects is a true match, and
//! that list's head is the oldest match of that shape. An arrival therefore
//! looks at no more than four list heads (and skips shapes with no posted
//! receive at all) and takes the one with the smallest posting sequence.
//!
//! The unexpected side mirrors this: each message is threaded, in arrival
//! order, onto four lists, keyed `(ctx,s,t)`, `(ctx,s)`, `(ctx,t)` and `(ctx)`.
//! A receive of a given shape reads exactly one head. List heads live in a
//! slab indexed through a hash map keyed by the packed key, so unlinking a
//! node never hashes; empty lists are reclaimed lazily in bulk (amortized
//! O(1)), so memory stays proportional to the queue contents and no array is
//! ever sized by the number of ranks.
//!
//! While a side holds at most [`SMALL`] messages or [`PSMALL`] receives it
//! is a plain ring buffer of the entries themselves (the usual match is the
//! oldest entry, a pop from the front), scanned in order (what a list does,
//! without the pointer chasing, the slab or any hashing); it moves to the
//! indexed form on the 65th message or receive and back when it empties. Handles stay valid across the
//! move: an entry queued in the linear form is named by its sequence number
//! (and found through a small map once moved), an indexed one by its slab
//! index and generation.

use std::collections::VecDeque;
use tm_proto::{Envelope, MatchSpec, Source, Tag};

use crate::hash::FastMap;
use crate::slab::{Slab, MAX_SLOTS};
use crate::Error;

/// List terminator.
const NIL: u32 = u32::MAX;

/// Messages the unexpected side holds in its linear form: a ring buffer,
/// so that the common take (the oldest message, first in line: a window
/// of messages from one sender, each taken by the next receive) is a pop
/// from the front, and a window of 64 such messages is neither linked
/// onto four lists as it arrives nor unlinked from them as it is taken.
pub const SMALL: usize = 64;

/// Receives the posted side holds in its linear form: a ring buffer, so
/// that the common match (the oldest receive, first in line) is a pop
/// from the front, and a window of 64 receives with one signature (the
/// OSU pattern) never switches to the index.
pub const PSMALL: usize = 64;

/// Handle of a posted receive, returned by [`Matcher::post`] when the receive
/// is queued. It stays valid until the receive is matched or cancelled; a
/// stale handle never names a later receive (generation check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecvId(u64);

/// Top bit of a [`RecvId`]: set for a receive posted while the side was
/// indexed (then `gen:31 | idx:32`), clear for one posted in the linear form
/// (then its posting sequence number, unique for the matcher's lifetime).
const NODE_ID: u64 = 1 << 63;
const GEN31: u32 = 0x7fff_ffff;

impl RecvId {
    #[inline]
    const fn small(seq: u64) -> Self {
        RecvId(seq & !NODE_ID)
    }

    #[inline]
    const fn node(idx: u32, gen: u32) -> Self {
        RecvId(NODE_ID | (((gen & GEN31) as u64) << 32) | idx as u64)
    }

    /// The handle as 64 bits (for a driver's work-request id).
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// The handle back from [`Self::to_bits`]. Any value is accepted; one that
    /// names no queued receive is simply not found.
    pub const fn from_bits(bits: u64) -> Self {
        RecvId(bits)
    }
}

/// Handle of a queued unexpected message, returned by [`Matcher::arrive`] when
/// the message is queued. Same encoding as [`RecvId`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(u64);

impl MsgId {
    #[inline]
    const fn small(seq: u64) -> Self {
        MsgId(seq & !NODE_ID)
    }

    #[inline]
    const fn node(idx: u32, gen: u32) -> Self {
        MsgId(NODE_ID | (((gen & GEN31) as u64) << 32) | idx as u64)
    }

    /// The handle as 64 bits.
    pub const fn to_bits(self) -> u64 {
        self.0
    }

    /// The handle back from [`Self::to_bits`]. Any value is accepted; one that
    /// names no queued message is simply not found.
    pub const fn from_bits(bits: u64) -> Self {
        MsgId(bits)
    }
}

/// The four shapes a receive can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// `(source, tag)`.
    Exact = 0,
    /// `(source, ANY_TAG)`.
    AnyTag = 1,
    /// `(ANY_SOURCE, tag)`.
    AnySource = 2,
    /// `(ANY_SOURCE, ANY_TAG)`.
    AnyAny = 3,
}

impl Shape {
    /// The shape of a match spec.
    pub const fn of(spec: &MatchSpec) -> Shape {
        match (spec.source, spec.tag) {
            (Source::Rank(_), Tag::Value(_)) => Shape::Exact,
            (Source::Rank(_), Tag::Any) => Shape::AnyTag,
            (Source::Any, Tag::Value(_)) => Shape::AnySource,
            (Source::Any, Tag::Any) => Shape::AnyAny,
        }
    }
}

/// Packed list key of shape `k` for `(ctx, src, tag)`: the fields the shape
/// wildcards are zeroed.
#[inline]
fn key(k: usize, ctx: u32, src: u32, tag: u32) -> u128 {
    let src = if k & 2 == 0 { src } else { 0 };
    let tag = if k & 1 == 0 { tag } else { 0 };
    (u128::from(ctx) << 96) | ((k as u128) << 64) | (u128::from(src) << 32) | u128::from(tag)
}

#[inline]
fn spec_key(spec: &MatchSpec) -> u128 {
    let k = Shape::of(spec) as usize;
    let src = match spec.source {
        Source::Rank(r) => r,
        Source::Any => 0,
    };
    let tag = match spec.tag {
        Tag::Value(t) => t,
        Tag::Any => 0,
    };
    key(k, spec.context_id, src, tag)
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    len: u32,
}

/// Exact-key lists: hash map from packed key to a stable list slot.
#[derive(Debug, Clone, Default)]
struct ListIndex {
    map: FastMap<u128, u32>,
    lists: Vec<List>,
    free: Vec<u32>,
    empty: usize,
    /// The last key looked up and its list: a run of receives or messages
    /// with one envelope (a window of `irecv`s, a stream from one sender)
    /// then hashes once. Cleared whenever a list slot is freed.
    last: core::cell::Cell<Option<(u128, u32)>>,
}

impl ListIndex {
    #[inline]
    fn find(&self, key: u128) -> Option<u32> {
        if let Some((k, li)) = self.last.get() {
            if k == key {
                return Some(li);
            }
        }
        let li = self.map.get(&key).copied()?;
        self.last.set(Some((key, li)));
        Some(li)
    }

    #[inline]
    fn find_or_insert(&mut self, key: u128) -> u32 {
        if let Some((k, li)) = self.last.get() {
            if k == key {
                if self.lists[li as usize].len == 0 {
                    self.empty -= 1;
                }
                return li;
            }
        }
        let li = self.find_or_insert_slow(key);
        self.last.set(Some((key, li)));
        li
    }

    fn find_or_insert_slow(&mut self, key: u128) -> u32 {
        match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let li = *e.get();
                if self.lists[li as usize].len == 0 {
                    self.empty -= 1;
                }
                li
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                let empty = List {
                    head: NIL,
                    tail: NIL,
                    len: 0,
                };
                let li = match self.free.pop() {
                    Some(li) => {
                        self.lists[li as usize] = empty;
                        li
                    }
                    None => {
                        self.lists.push(empty);
                        (self.lists.len() - 1) as u32
                    }
                };
                e.insert(li);
                li
            }
        }
    }

    /// Reclaims empty lists once they outnumber the live entries: amortized
    /// O(1), and memory stays proportional to the contents.
    #[inline]
    fn maybe_sweep(&mut self, live: usize) {
        if self.empty > live + 64 {
            self.last.set(None);
            let lists = &self.lists;
            let free = &mut self.free;
            self.map.retain(|_, li| {
                if lists[*li as usize].len == 0 {
                    free.push(*li);
                    false
                } else {
                    true
                }
            });
            self.empty = 0;
        }
    }

    fn clear(&mut self) {
        self.last.set(None);
        self.map.clear();
        self.lists.clear();
        self.free.clear();
        self.empty = 0;
    }
}

#[derive(Debug, Clone)]
struct PNode<R> {
    recv: R,
    /// The spec as scalars (`shape` says which fields are wildcards): copying
    /// a `MatchSpec` the caller just built field by field as one 16-byte load
    /// stalls on store forwarding.
    ctx: u32,
    src: u32,
    tag: u32,
    shape: u8,
    /// Posted in the linear form: its handle is its sequence number, found
    /// through `Matcher::migrated`.
    small: bool,
    seq: u64,
    /// Its list in `Matcher::plists` (valid while indexed).
    list: u32,
    prev: u32,
    next: u32,
}

impl<R> PNode<R> {
    #[inline]
    fn spec(&self) -> MatchSpec {
        let shape = usize::from(self.shape);
        MatchSpec {
            context_id: self.ctx,
            source: if shape & 2 == 0 {
                Source::Rank(self.src)
            } else {
                Source::Any
            },
            tag: if shape & 1 == 0 {
                Tag::Value(self.tag)
            } else {
                Tag::Any
            },
        }
    }

    #[inline]
    fn key(&self) -> u128 {
        key(usize::from(self.shape), self.ctx, self.src, self.tag)
    }
}

#[derive(Debug, Clone)]
struct UNode<M> {
    msg: M,
    env: Envelope,
    /// Arrived in the linear form: found through `Matcher::umigrated`.
    small: bool,
    seq: u64,
    list: [u32; 4],
    prev: [u32; 4],
    next: [u32; 4],
}

/// A posted receive in the linear form: everything inline, no slab.
#[derive(Debug, Clone)]
struct PSmall<R> {
    ctx: u32,
    src: u32,
    tag: u32,
    smask: u32,
    tmask: u32,
    seq: u64,
    recv: R,
}

impl<R> PSmall<R> {
    #[inline]
    fn shape(&self) -> u8 {
        (u8::from(self.smask == 0) << 1) | u8::from(self.tmask == 0)
    }

    #[inline]
    fn spec(&self) -> MatchSpec {
        MatchSpec {
            context_id: self.ctx,
            source: if self.smask != 0 {
                Source::Rank(self.src)
            } else {
                Source::Any
            },
            tag: if self.tmask != 0 {
                Tag::Value(self.tag)
            } else {
                Tag::Any
            },
        }
    }

    /// Short-circuit compare: a branch-free one gets SLP-vectorized into a
    /// paired load of the caller's envelope, which stalls on store forwarding.
    #[inline]
    fn matches(&self, ctx: u32, src: u32, tag: u32) -> bool {
        self.ctx == ctx && (src ^ self.src) & self.smask == 0 && (tag ^ self.tag) & self.tmask == 0
    }
}

/// Where a queued receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PLoc {
    /// Position in the linear form.
    Small(usize),
    /// Slab index of an indexed node.
    Node(u32),
}

/// A queued message in the linear form: everything inline, no slab.
#[derive(Debug, Clone)]
struct USmall<M> {
    ctx: u32,
    src: u32,
    tag: u32,
    seq: u64,
    msg: M,
}

impl<M> USmall<M> {
    #[inline]
    fn env(&self) -> Envelope {
        Envelope {
            context_id: self.ctx,
            source: self.src,
            tag: self.tag,
        }
    }

    #[inline]
    fn matches(&self, ctx: u32, src: u32, tag: u32, smask: u32, tmask: u32) -> bool {
        self.ctx == ctx && (src ^ self.src) & smask == 0 && (tag ^ self.tag) & tmask == 0
    }
}

/// Where a queued message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ULoc {
    /// Position in the linear form.
    Small(usize),
    /// Slab index of an indexed node.
    Node(u32),
}

/// The spec as `(ctx, src, tag, src mask, tag mask)`.
#[inline]
fn spec_fields(spec: &MatchSpec) -> (u32, u32, u32, u32, u32) {
    let (src, smask) = match spec.source {
        Source::Rank(r) => (r, u32::MAX),
        Source::Any => (0, 0),
    };
    let (tag, tmask) = match spec.tag {
        Tag::Value(t) => (t, u32::MAX),
        Tag::Any => (0, 0),
    };
    (spec.context_id, src, tag, smask, tmask)
}

/// Result of [`Matcher::post`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Posted<R, M> {
    /// The earliest-arrived matching unexpected message was taken; the receive
    /// is handed back with it and was never queued.
    Matched {
        /// The receive, handed back.
        recv: R,
        /// The message's former queue handle.
        msg_id: MsgId,
        /// The message's envelope.
        env: Envelope,
        /// The message.
        msg: M,
    },
    /// No queued message matched; the receive is queued under this handle.
    Queued(RecvId),
}

/// Result of [`Matcher::arrive`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Arrived<R, M> {
    /// The earliest-posted matching receive took the message.
    Matched {
        /// The receive's former handle.
        id: RecvId,
        /// What the receive asked for.
        spec: MatchSpec,
        /// The receive.
        recv: R,
        /// The message, handed back.
        msg: M,
    },
    /// No posted receive matched; the message is queued under this handle.
    Queued(MsgId),
}

/// A queued message as [`Matcher::probe`] and [`Matcher::unexpected`] show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peeked<'a, M> {
    /// The message's handle.
    pub id: MsgId,
    /// Its envelope.
    pub env: Envelope,
    /// The message.
    pub msg: &'a M,
}

/// A message removed by [`Matcher::improbe`] (MPI_Improbe/MPI_Mprobe): no
/// receive can match it any more; the caller completes it with its own
/// `MPI_Mrecv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchedMessage<M> {
    /// Its handle while it was queued.
    pub id: MsgId,
    /// Its envelope.
    pub env: Envelope,
    /// The message.
    pub msg: M,
}

/// A queued receive as [`Matcher::posted`] shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedEntry<'a, R> {
    /// The receive's handle.
    pub id: RecvId,
    /// What it accepts.
    pub spec: MatchSpec,
    /// The receive.
    pub recv: &'a R,
}

/// The MPI matching engine, generic over the caller's receive handle `R` and
/// message handle `M`.
///
/// Every operation is expected O(1) whatever the receive shapes and queue
/// depths; see the [module docs](self) for the data structure and the crate
/// docs for an example.
#[derive(Debug, Clone)]
pub struct Matcher<R, M> {
    pnodes: Slab<PNode<R>>,
    unodes: Slab<UNode<M>>,
    /// Posted lists. Empty ones stay (no hash-table churn when a key is
    /// reused) and are swept once they outnumber the receives; a node names
    /// its list, so unlinking never hashes.
    plists: ListIndex,
    ulists: ListIndex,
    psmall: VecDeque<PSmall<R>>,
    /// Sequence number → node, for receives posted in the linear form and
    /// since moved to the index (at most [`SMALL`] per switch).
    migrated: FastMap<u64, u32>,
    usmall: VecDeque<USmall<M>>,
    umigrated: FastMap<u64, u32>,
    p_indexed: bool,
    u_indexed: bool,
    /// Indexed posted receives per shape (an arrival skips empty shapes).
    pshape: [u32; 4],
    pseq: u64,
    useq: u64,
}

impl<R, M> Default for Matcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R, M> Matcher<R, M> {
    /// An empty matcher. It allocates nothing until entries are queued.
    pub fn new() -> Self {
        Matcher {
            pnodes: Slab::default(),
            unodes: Slab::default(),
            plists: ListIndex::default(),
            ulists: ListIndex::default(),
            psmall: VecDeque::new(),
            migrated: FastMap::default(),
            usmall: VecDeque::new(),
            umigrated: FastMap::default(),
            p_indexed: false,
            u_indexed: false,
            pshape: [0; 4],
            pseq: 0,
            useq: 0,
        }
    }

    /// Number of queued receives.
    pub fn posted_len(&self) -> usize {
        if self.p_indexed {
            self.pnodes.len()
        } else {
            self.psmall.len()
        }
    }

    /// Number of queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        if self.u_indexed {
            self.unodes.len()
        } else {
            self.usmall.len()
        }
    }

    /// Whether both queues are empty.
    pub fn is_empty(&self) -> bool {
        self.posted_len() == 0 && self.unexpected_len() == 0
    }

    /// Posts a receive (`MPI_Irecv`): it takes the earliest-arrived queued
    /// message it matches, or is queued behind every earlier receive.
    ///
    /// # Errors
    /// [`Error::QueueFull`] if `u32::MAX - 1` receives are already queued.
    #[inline(always)]
    pub fn post(&mut self, spec: MatchSpec, recv: R) -> Result<Posted<R, M>, Error> {
        if let Some(loc) = self.find_unexpected(&spec) {
            let (msg_id, env, msg) = self.take_unexpected(loc);
            return Ok(Posted::Matched {
                recv,
                msg_id,
                env,
                msg,
            });
        }
        self.enqueue_posted(spec, recv).map(Posted::Queued)
    }

    /// Queues a receive without looking at the unexpected queue. Only for
    /// callers that already know no queued message matches (the offload
    /// model); [`Self::post`] is the MPI operation.
    #[inline(always)]
    pub(crate) fn enqueue_posted(&mut self, spec: MatchSpec, recv: R) -> Result<RecvId, Error> {
        let seq = self.pseq;
        let (ctx, src, tag, smask, tmask) = spec_fields(&spec);
        if !self.p_indexed {
            if self.psmall.len() < PSMALL {
                self.psmall.push_back(PSmall {
                    ctx,
                    src,
                    tag,
                    smask,
                    tmask,
                    seq,
                    recv,
                });
                self.pseq += 1;
                return Ok(RecvId::small(seq));
            }
            self.p_migrate();
        }
        let shape = Shape::of(&spec) as u8;
        let (idx, gen) = self
            .pnodes
            .insert(PNode {
                recv,
                ctx,
                src,
                tag,
                shape,
                small: false,
                seq,
                list: NIL,
                prev: NIL,
                next: NIL,
            })
            .ok_or(Error::QueueFull {
                side: "posted",
                max: MAX_SLOTS as u64,
            })?;
        self.pseq += 1;
        self.pshape[usize::from(shape)] += 1;
        self.p_index(idx);
        Ok(RecvId::node(idx, gen))
    }

    /// Reserves the handle of a receive that [`Self::enqueue_reserved`]
    /// queues later: it is younger than every receive queued or reserved
    /// so far, and older than every later one.
    #[inline(always)]
    pub(crate) fn reserve_posted(&mut self) -> RecvId {
        let seq = self.pseq;
        self.pseq += 1;
        RecvId::small(seq)
    }

    /// Queues a receive under a handle from [`Self::reserve_posted`],
    /// without looking at the unexpected queue. The caller guarantees that
    /// every receive queued now is older (queued or reserved before `id`)
    /// and that `id` is queued at most once; the handle stays valid as any
    /// other (it is a sequence number: found directly in the linear form,
    /// through `migrated` once indexed).
    ///
    /// # Errors
    /// [`Error::QueueFull`] if `u32::MAX - 1` receives are already queued;
    /// the receive is handed back with it.
    pub(crate) fn enqueue_reserved(
        &mut self,
        id: RecvId,
        spec: MatchSpec,
        recv: R,
    ) -> Result<(), (Error, R)> {
        debug_assert!(id.0 & NODE_ID == 0, "tm-match: not a reserved handle");
        let seq = id.0;
        let (ctx, src, tag, smask, tmask) = spec_fields(&spec);
        if !self.p_indexed {
            if self.psmall.len() < PSMALL {
                self.psmall.push_back(PSmall {
                    ctx,
                    src,
                    tag,
                    smask,
                    tmask,
                    seq,
                    recv,
                });
                return Ok(());
            }
            self.p_migrate();
        }
        let full = Error::QueueFull {
            side: "posted",
            max: MAX_SLOTS as u64,
        };
        // Below the limit an insert cannot fail (a free slot, or room to
        // grow): the receive is handed back untouched otherwise.
        if self.pnodes.len() >= MAX_SLOTS {
            return Err((full, recv));
        }
        let shape = Shape::of(&spec) as u8;
        let Some((idx, _)) = self.pnodes.insert(PNode {
            recv,
            ctx,
            src,
            tag,
            shape,
            small: true,
            seq,
            list: NIL,
            prev: NIL,
            next: NIL,
        }) else {
            unreachable!("tm-match: the slab refused an entry below its limit")
        };
        self.pshape[usize::from(shape)] += 1;
        self.migrated.insert(seq, idx);
        self.p_index(idx);
        Ok(())
    }

    /// A message arrives (in per-source send order): the earliest-posted
    /// matching receive takes it, or it is queued behind every earlier message.
    ///
    /// # Errors
    /// [`Error::QueueFull`] if `u32::MAX - 1` messages are already queued.
    #[inline(always)]
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Result<Arrived<R, M>, Error> {
        if let Some(loc) = self.find_posted(&env) {
            let (id, spec, recv) = self.take_posted(loc);
            return Ok(Arrived::Matched {
                id,
                spec,
                recv,
                msg,
            });
        }
        self.enqueue_unexpected(env, msg).map(Arrived::Queued)
    }

    /// Queues a message without looking at the posted queue. Only for
    /// callers that already know no queued receive matches (the offload
    /// model); [`Self::arrive`] is the MPI operation.
    #[inline(always)]
    pub(crate) fn enqueue_unexpected(&mut self, env: Envelope, msg: M) -> Result<MsgId, Error> {
        let seq = self.useq;
        if !self.u_indexed {
            if self.usmall.len() < SMALL {
                self.usmall.push_back(USmall {
                    ctx: env.context_id,
                    src: env.source,
                    tag: env.tag,
                    seq,
                    msg,
                });
                self.useq += 1;
                return Ok(MsgId::small(seq));
            }
            self.u_migrate();
        }
        let (idx, gen) = self
            .unodes
            .insert(UNode {
                msg,
                env,
                small: false,
                seq,
                list: [NIL; 4],
                prev: [NIL; 4],
                next: [NIL; 4],
            })
            .ok_or(Error::QueueFull {
                side: "unexpected",
                max: MAX_SLOTS as u64,
            })?;
        self.useq += 1;
        self.u_index(idx);
        Ok(MsgId::node(idx, gen))
    }

    /// The queued receive at `loc` (from [`Self::find_posted`] or
    /// [`Self::locate_posted`], with nothing removed since).
    #[inline]
    pub(crate) fn recv_at(&self, loc: PLoc) -> &R {
        match loc {
            PLoc::Small(pos) => &self.psmall[pos].recv,
            PLoc::Node(idx) => &self.pnodes.at(idx).recv,
        }
    }

    /// Mutable [`Self::recv_at`].
    #[inline]
    pub(crate) fn recv_at_mut(&mut self, loc: PLoc) -> &mut R {
        match loc {
            PLoc::Small(pos) => &mut self.psmall[pos].recv,
            PLoc::Node(idx) => &mut self.pnodes.at_mut(idx).recv,
        }
    }

    /// Every queued receive with its spec, in no particular order.
    pub(crate) fn for_each_posted(&self, mut f: impl FnMut(MatchSpec, &R)) {
        if self.p_indexed {
            for (_, n) in self.pnodes.iter() {
                f(n.spec(), &n.recv);
            }
        } else {
            for p in &self.psmall {
                f(p.spec(), &p.recv);
            }
        }
    }

    /// The receive an arriving message with this envelope would match, without
    /// changing anything.
    pub fn peek_arrival(&self, env: &Envelope) -> Option<RecvId> {
        self.find_posted(env).map(|loc| self.posted_id(loc))
    }

    /// `MPI_Iprobe`: the message a receive with `spec` would take now, left in
    /// place. Repeated probes return the same message until something changes.
    pub fn probe(&self, spec: &MatchSpec) -> Option<Peeked<'_, M>> {
        let loc = self.find_unexpected(spec)?;
        Some(self.peek_loc(loc))
    }

    /// `MPI_Improbe`/`MPI_Mprobe`: removes the message a receive with `spec`
    /// would take and hands it out; no receive can match it afterwards.
    #[inline]
    pub fn improbe(&mut self, spec: &MatchSpec) -> Option<MatchedMessage<M>> {
        let loc = self.find_unexpected(spec)?;
        let (id, env, msg) = self.take_unexpected(loc);
        Some(MatchedMessage { id, env, msg })
    }

    /// `MPI_Cancel` of a receive: removes it if it is still queued and hands it
    /// back with its spec. `None` if it was already matched or cancelled (or
    /// the handle is stale): the cancel failed.
    pub fn cancel(&mut self, id: RecvId) -> Option<(MatchSpec, R)> {
        let loc = self.locate_posted(id)?;
        let (_, spec, recv) = self.take_posted(loc);
        Some((spec, recv))
    }

    /// Removes a queued unexpected message by handle (send-side cancel).
    /// `None` if it is no longer queued.
    pub fn cancel_message(&mut self, id: MsgId) -> Option<(Envelope, M)> {
        let loc = self.locate_unexpected(id)?;
        let (_, env, msg) = self.take_unexpected(loc);
        Some((env, msg))
    }

    /// A queued receive by handle.
    pub fn get_posted(&self, id: RecvId) -> Option<PostedEntry<'_, R>> {
        Some(match self.locate_posted(id)? {
            PLoc::Small(pos) => {
                let p = &self.psmall[pos];
                PostedEntry {
                    id,
                    spec: p.spec(),
                    recv: &p.recv,
                }
            }
            PLoc::Node(idx) => {
                let n = self.pnodes.at(idx);
                PostedEntry {
                    id,
                    spec: n.spec(),
                    recv: &n.recv,
                }
            }
        })
    }

    /// Mutable access to a queued receive's handle.
    pub fn get_posted_mut(&mut self, id: RecvId) -> Option<&mut R> {
        match self.locate_posted(id)? {
            PLoc::Small(pos) => self.psmall.get_mut(pos).map(|p| &mut p.recv),
            PLoc::Node(idx) => self.pnodes.get_mut(idx).map(|n| &mut n.recv),
        }
    }

    /// A queued message by handle.
    pub fn get_unexpected(&self, id: MsgId) -> Option<Peeked<'_, M>> {
        let loc = self.locate_unexpected(id)?;
        Some(self.peek_loc(loc))
    }

    /// The queued receives in posting order (diagnostics; O(n log n)).
    pub fn posted(&self) -> Vec<PostedEntry<'_, R>> {
        if !self.p_indexed {
            return self
                .psmall
                .iter()
                .map(|p| PostedEntry {
                    id: RecvId::small(p.seq),
                    spec: p.spec(),
                    recv: &p.recv,
                })
                .collect();
        }
        let mut v: Vec<(u64, PostedEntry<'_, R>)> = self
            .pnodes
            .iter()
            .map(|(i, n)| {
                (
                    n.seq,
                    PostedEntry {
                        id: self.posted_id(PLoc::Node(i)),
                        spec: n.spec(),
                        recv: &n.recv,
                    },
                )
            })
            .collect();
        v.sort_unstable_by_key(|(s, _)| *s);
        v.into_iter().map(|(_, e)| e).collect()
    }

    /// The queued messages in arrival order (diagnostics; O(n log n)).
    pub fn unexpected(&self) -> Vec<Peeked<'_, M>> {
        if !self.u_indexed {
            return (0..self.usmall.len())
                .map(|pos| self.peek_loc(ULoc::Small(pos)))
                .collect();
        }
        let mut v: Vec<(u64, Peeked<'_, M>)> = self
            .unodes
            .iter()
            .map(|(i, n)| (n.seq, self.peek_loc(ULoc::Node(i))))
            .collect();
        v.sort_unstable_by_key(|(s, _)| *s);
        v.into_iter().map(|(_, e)| e).collect()
    }

    /// Removes every queued receive, in posting order (e.g. at communicator
    /// free or finalize).
    pub fn drain_posted(&mut self) -> Vec<(RecvId, MatchSpec, R)> {
        let ids: Vec<RecvId> = self.posted().iter().map(|e| e.id).collect();
        ids.into_iter()
            .filter_map(|id| self.cancel(id).map(|(s, r)| (id, s, r)))
            .collect()
    }

    /// Removes every queued message, in arrival order.
    pub fn drain_unexpected(&mut self) -> Vec<(MsgId, Envelope, M)> {
        let ids: Vec<MsgId> = self.unexpected().iter().map(|e| e.id).collect();
        ids.into_iter()
            .filter_map(|id| self.cancel_message(id).map(|(e, m)| (id, e, m)))
            .collect()
    }

    // ----- internals -----

    /// Earliest-posted receive matching `env`.
    #[inline(always)]
    pub(crate) fn find_posted(&self, env: &Envelope) -> Option<PLoc> {
        if !self.p_indexed {
            // Fields as scalars: comparing them as a packed pair would load
            // across the caller's separate stores (a store-forwarding stall).
            let (ctx, src, tag) = (env.context_id, env.source, env.tag);
            // The oldest receive is the usual match (a window of receives
            // with one signature): checked before the scan, whose iterator
            // over the ring's two halves costs some 30 instructions more.
            match self.psmall.front() {
                None => return None,
                Some(p) if p.matches(ctx, src, tag) => return Some(PLoc::Small(0)),
                Some(_) => {}
            }
            return self
                .psmall
                .iter()
                .skip(1)
                .position(|p| p.matches(ctx, src, tag))
                .map(|i| PLoc::Small(i + 1));
        }
        self.find_posted_indexed(env).map(PLoc::Node)
    }

    /// The handle the caller holds for a queued receive.
    #[inline]
    pub(crate) fn posted_id(&self, loc: PLoc) -> RecvId {
        match loc {
            PLoc::Small(pos) => RecvId::small(self.psmall[pos].seq),
            PLoc::Node(idx) => {
                let n = self.pnodes.at(idx);
                if n.small {
                    RecvId::small(n.seq)
                } else {
                    RecvId::node(idx, self.pnodes.generation(idx))
                }
            }
        }
    }

    /// Where a handle's receive is, if it is still queued.
    pub(crate) fn locate_posted(&self, id: RecvId) -> Option<PLoc> {
        if id.0 & NODE_ID == 0 {
            let seq = id.0;
            if self.p_indexed {
                self.migrated.get(&seq).copied().map(PLoc::Node)
            } else {
                self.psmall
                    .iter()
                    .position(|p| p.seq == seq)
                    .map(PLoc::Small)
            }
        } else {
            let idx = id.0 as u32;
            let gen = (id.0 >> 32) as u32 & GEN31;
            match self.pnodes.get(idx) {
                Some(n) if !n.small && self.pnodes.generation(idx) & GEN31 == gen => {
                    Some(PLoc::Node(idx))
                }
                _ => None,
            }
        }
    }

    #[inline(never)]
    fn find_posted_indexed(&self, env: &Envelope) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for k in 0..4 {
            if self.pshape[k] == 0 {
                continue;
            }
            let Some(li) = self
                .plists
                .find(key(k, env.context_id, env.source, env.tag))
            else {
                continue;
            };
            let h = self.plists.lists[li as usize].head;
            if h == NIL {
                continue;
            }
            let s = self.pnodes.at(h).seq;
            if best.is_none_or(|(bs, _)| s < bs) {
                best = Some((s, h));
            }
        }
        best.map(|(_, h)| h)
    }

    /// Earliest-arrived message matching `spec`.
    #[inline(always)]
    fn find_unexpected(&self, spec: &MatchSpec) -> Option<ULoc> {
        if !self.u_indexed {
            let (ctx, src, tag, smask, tmask) = spec_fields(spec);
            // The oldest message is the usual match: checked before the
            // scan (whose iterator over the ring's two halves costs more).
            match self.usmall.front() {
                None => return None,
                Some(u) if u.matches(ctx, src, tag, smask, tmask) => return Some(ULoc::Small(0)),
                Some(_) => {}
            }
            return self
                .usmall
                .iter()
                .skip(1)
                .position(|u| u.matches(ctx, src, tag, smask, tmask))
                .map(|i| ULoc::Small(i + 1));
        }
        self.find_unexpected_indexed(spec).map(ULoc::Node)
    }

    #[inline(never)]
    fn find_unexpected_indexed(&self, spec: &MatchSpec) -> Option<u32> {
        let li = self.ulists.find(spec_key(spec))?;
        let h = self.ulists.lists[li as usize].head;
        (h != NIL).then_some(h)
    }

    /// The handle the caller holds for a queued message.
    #[inline]
    fn msg_id(&self, loc: ULoc) -> MsgId {
        match loc {
            ULoc::Small(pos) => MsgId::small(self.usmall[pos].seq),
            ULoc::Node(idx) => {
                let n = self.unodes.at(idx);
                if n.small {
                    MsgId::small(n.seq)
                } else {
                    MsgId::node(idx, self.unodes.generation(idx))
                }
            }
        }
    }

    fn peek_loc(&self, loc: ULoc) -> Peeked<'_, M> {
        let id = self.msg_id(loc);
        match loc {
            ULoc::Small(pos) => {
                let u = &self.usmall[pos];
                Peeked {
                    id,
                    env: u.env(),
                    msg: &u.msg,
                }
            }
            ULoc::Node(idx) => {
                let n = self.unodes.at(idx);
                Peeked {
                    id,
                    env: n.env,
                    msg: &n.msg,
                }
            }
        }
    }

    /// Where a handle's message is, if it is still queued.
    fn locate_unexpected(&self, id: MsgId) -> Option<ULoc> {
        if id.0 & NODE_ID == 0 {
            let seq = id.0;
            if self.u_indexed {
                self.umigrated.get(&seq).copied().map(ULoc::Node)
            } else {
                self.usmall
                    .iter()
                    .position(|u| u.seq == seq)
                    .map(ULoc::Small)
            }
        } else {
            let idx = id.0 as u32;
            let gen = (id.0 >> 32) as u32 & GEN31;
            match self.unodes.get(idx) {
                Some(n) if !n.small && self.unodes.generation(idx) & GEN31 == gen => {
                    Some(ULoc::Node(idx))
                }
                _ => None,
            }
        }
    }

    #[inline(never)]
    fn p_index(&mut self, idx: u32) {
        let k = self.pnodes.at(idx).key();
        let li = self.plists.find_or_insert(k);
        let l = &mut self.plists.lists[li as usize];
        let tail = l.tail;
        l.tail = idx;
        l.len += 1;
        if tail == NIL {
            l.head = idx;
        } else {
            self.pnodes.at_mut(tail).next = idx;
        }
        let n = self.pnodes.at_mut(idx);
        n.list = li;
        n.prev = tail;
        n.next = NIL;
    }

    /// Moves the linear form into the index (the slab is empty: it holds
    /// only indexed receives).
    #[inline(never)]
    fn p_migrate(&mut self) {
        let small = core::mem::take(&mut self.psmall);
        self.p_indexed = true;
        for p in small {
            let shape = p.shape();
            let seq = p.seq;
            let Some((idx, _)) = self.pnodes.insert(PNode {
                recv: p.recv,
                ctx: p.ctx,
                src: p.src,
                tag: p.tag,
                shape,
                small: true,
                seq,
                list: NIL,
                prev: NIL,
                next: NIL,
            }) else {
                unreachable!("tm-match: an empty slab refused {PSMALL} entries")
            };
            self.pshape[usize::from(shape)] += 1;
            self.migrated.insert(seq, idx);
            self.p_index(idx);
        }
    }

    /// Removes a queued receive: `(its handle, spec, receive)`.
    #[inline(always)]
    pub(crate) fn take_posted(&mut self, loc: PLoc) -> (RecvId, MatchSpec, R) {
        match loc {
            PLoc::Small(pos) => {
                // The first entry (the oldest: the usual match) is a
                // plain pop from the front (`VecDeque::remove` costs about
                // 50 instructions more even there); the last (the only
                // one, in a ping-pong) is a pop too, and others shift the
                // shorter side of the ring.
                let p = if pos == 0 {
                    self.psmall.pop_front()
                } else {
                    self.psmall.remove(pos)
                };
                let p = match p {
                    Some(p) => p,
                    None => unreachable!("tm-match: posted entry {pos} vanished"),
                };
                (RecvId::small(p.seq), p.spec(), p.recv)
            }
            PLoc::Node(idx) => self.take_posted_node(idx),
        }
    }

    #[inline(never)]
    fn take_posted_node(&mut self, idx: u32) -> (RecvId, MatchSpec, R) {
        let id = self.posted_id(PLoc::Node(idx));
        self.unlink_posted(idx);
        let node = match self.pnodes.remove(idx) {
            Some(n) => n,
            None => unreachable!("tm-match: posted node {idx} not live"),
        };
        if node.small {
            self.migrated.remove(&node.seq);
        }
        self.pshape[usize::from(node.shape)] -= 1;
        if self.pnodes.len() == 0 {
            self.p_indexed = false;
            self.plists.clear();
            self.migrated.clear();
        } else {
            self.plists.maybe_sweep(self.pnodes.len());
        }
        let spec = node.spec();
        (id, spec, node.recv)
    }

    #[inline(never)]
    fn unlink_posted(&mut self, idx: u32) {
        let (li, prev, next) = {
            let n = self.pnodes.at(idx);
            (n.list, n.prev, n.next)
        };
        if prev == NIL {
            self.plists.lists[li as usize].head = next;
        } else {
            self.pnodes.at_mut(prev).next = next;
        }
        if next == NIL {
            self.plists.lists[li as usize].tail = prev;
        } else {
            self.pnodes.at_mut(next).prev = prev;
        }
        let l = &mut self.plists.lists[li as usize];
        l.len -= 1;
        if l.len == 0 {
            self.plists.empty += 1;
        }
    }

    #[inline(never)]
    fn u_index(&mut self, idx: u32) {
        let env = self.unodes.at(idx).env;
        for k in 0..4 {
            let li = self
                .ulists
                .find_or_insert(key(k, env.context_id, env.source, env.tag));
            let l = &mut self.ulists.lists[li as usize];
            let tail = l.tail;
            l.tail = idx;
            l.len += 1;
            if tail == NIL {
                l.head = idx;
            } else {
                self.unodes.at_mut(tail).next[k] = idx;
            }
            let n = self.unodes.at_mut(idx);
            n.list[k] = li;
            n.prev[k] = tail;
            n.next[k] = NIL;
        }
    }

    #[inline(never)]
    fn u_migrate(&mut self) {
        let small = core::mem::take(&mut self.usmall);
        self.u_indexed = true;
        for u in small {
            let env = u.env();
            let seq = u.seq;
            let Some((idx, _)) = self.unodes.insert(UNode {
                msg: u.msg,
                env,
                small: true,
                seq,
                list: [NIL; 4],
                prev: [NIL; 4],
                next: [NIL; 4],
            }) else {
                unreachable!("tm-match: an empty slab refused {SMALL} entries")
            };
            self.umigrated.insert(seq, idx);
            self.u_index(idx);
        }
    }

    /// Removes a queued message: `(its handle, envelope, message)`.
    #[inline(always)]
    fn take_unexpected(&mut self, loc: ULoc) -> (MsgId, Envelope, M) {
        match loc {
            ULoc::Small(pos) => {
                // The oldest (the usual take) and the newest are pops;
                // others shift the shorter side of the ring.
                let u = if pos == 0 {
                    self.usmall.pop_front()
                } else {
                    self.usmall.remove(pos)
                };
                let u = match u {
                    Some(u) => u,
                    None => unreachable!("tm-match: queued message {pos} vanished"),
                };
                (MsgId::small(u.seq), u.env(), u.msg)
            }
            ULoc::Node(idx) => self.take_unexpected_node(idx),
        }
    }

    #[inline(never)]
    fn take_unexpected_node(&mut self, idx: u32) -> (MsgId, Envelope, M) {
        let id = self.msg_id(ULoc::Node(idx));
        self.unlink_unexpected(idx);
        // Only the fields needed, not the whole node (links included).
        let (env, small, seq) = {
            let n = self.unodes.at(idx);
            (n.env, n.small, n.seq)
        };
        let msg = match self.unodes.remove(idx) {
            Some(n) => n.msg,
            None => unreachable!("tm-match: message node {idx} not live"),
        };
        if small {
            self.umigrated.remove(&seq);
        }
        if self.unodes.len() == 0 {
            self.u_indexed = false;
            self.ulists.clear();
            self.umigrated.clear();
        } else {
            self.ulists.maybe_sweep(self.unodes.len());
        }
        (id, env, msg)
    }

    #[inline(never)]
    fn unlink_unexpected(&mut self, idx: u32) {
        {
            for k in 0..4 {
                let (li, prev, next) = {
                    let n = self.unodes.at(idx);
                    (n.list[k], n.prev[k], n.next[k])
                };
                if prev == NIL {
                    self.ulists.lists[li as usize].head = next;
                } else {
                    self.unodes.at_mut(prev).next[k] = next;
                }
                if next == NIL {
                    self.ulists.lists[li as usize].tail = prev;
                } else {
                    self.unodes.at_mut(next).prev[k] = prev;
                }
                let l = &mut self.ulists.lists[li as usize];
                l.len -= 1;
                if l.len == 0 {
                    self.ulists.empty += 1;
                }
            }
        }
    }
}
