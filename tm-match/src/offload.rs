//! The software side of a matching engine that holds a bounded prefix of the
//! posted receives: a NIC's TM-SRQ, or a peer that matches our preposted
//! receives in a shared-memory queue.
//!
//! [`Offload`] keeps the *whole* posted queue as a shadow in a [`Matcher`]
//! (every receive keeps its place in posting order, whether the engine holds it
//! or not) and decides which receives the engine may hold. It emits
//! [`Action`]s (add an entry with a tag and mask, delete one, sync the
//! unexpected counter), consumes [`EngineEvent`]s (added, matched, deleted or
//! delete-failed, unexpected arrival, sync request) and reports
//! [`Completion`]s to the caller. It does no I/O: a driver moves actions to the
//! engine and events back, in the engine's order.
//!
//! # Rules
//!
//! - **Bounded prefix (H1).** A receive is handed to the engine only if no
//!   older receive that stays in software could match a message it matches,
//!   the engine has room (`capacity`) and can express it (e.g. no
//!   `ANY_SOURCE` for a per-peer engine), and the caller says its buffer is
//!   eligible. Otherwise it stays in software, and so does every later receive
//!   that overlaps it. The check is O(1): per-key counters of software-resident
//!   receives, the same four shapes as the matcher.
//! - **Phase / sync (H3).** `count` is the number of engine-unexpected
//!   messages software has fully processed, a wrapping 16-bit counter. Every
//!   add and delete carries it, and a [`Action::Sync`] is emitted after each
//!   processed unexpected message while the engine holds entries, on every
//!   sync request, and at least every `sync_interval` unexpected messages. An
//!   engine must not let an entry added with a stale count match until the
//!   counts agree (TM-SRQ does this in hardware; a shared-memory peer compares
//!   the counter it reads with the one it has delivered).
//! - **Full-shadow matching (H4).** A message the engine reports unexpected, or
//!   one that arrived on a path bypassing the engine ([`Offload::arrive`]), is
//!   matched against every posted receive in posting order. If the winner is
//!   held by the engine, the model deletes it and parks the message (later
//!   arrivals wait behind it, so nothing overtakes it). `Deleted`: the match
//!   completes in software. `DeleteFailed` (the engine had already consumed
//!   that entry for another message, whose `Matched` event arrives in engine
//!   order): the parked message is matched again against what is left.
//! - **Exactly once (H5).** A receive completes either through the engine's
//!   `Matched` or in software after a successful delete, never both.
//! - **Cancel (H7).** A software receive is cancelled at once; an engine
//!   receive is deleted and the outcome ([`Completion::Cancelled`] or
//!   [`Completion::CancelFailed`]) follows the engine's answer.
//!
//! Receives that stay in software are never promoted to the engine later
//! (UCX does not either, except through its force threshold); capacity freed
//! by completions is used by later posts.
//!
//! # Two kinds of engine
//!
//! - **TM-SRQ** (`verbs-tm`): `Action::Add`/`Delete`/`Sync` become
//!   `ibv_post_srq_ops` work requests with `IBV_OPS_TM_SYNC` and the count;
//!   TM CQEs become events (`TM_ADD` → `Added`, a `TM_RECV` with `MATCH` →
//!   `Matched`, `TM_DEL` → `Deleted` or, with `IBV_WC_TM_ERR`,
//!   `DeleteFailed`, a `TM_RECV` without `MATCH` → `Unexpected`,
//!   `IBV_WC_TM_SYNC_REQ` → the `sync_request` flags). [`RecvId::to_bits`]
//!   fits a work-request id.
//! - **Shared-memory prepost queue** (`shmem-onesided`): `Add` publishes an
//!   entry `(tag, mask, count)` in the queue a peer reads; the peer matches its
//!   outgoing message against the active entries (those published with the
//!   count it has seen acknowledged), and either delivers into the buffer
//!   (`Matched`) or sends the message as unexpected (`Unexpected`, counted).
//!   `Delete` is a compare-and-swap that fails if the peer already claimed the
//!   entry (`DeleteFailed`). Configure `any_source = false` for a per-peer
//!   queue.
//!
//! # Example: a driver loop
//!
//! ```
//! use tm_match::offload::{Action, Completion, EngineEvent, Offload, OffloadConfig, PostOutcome};
//! use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout};
//!
//! let layout = TagLayout::DEFAULT;
//! let mut off: Offload<&str, Vec<u8>> = Offload::new(OffloadConfig::new(layout, 2))?;
//! let spec = MatchSpec { context_id: 1, source: Source::Rank(3), tag: Tag::Value(7) };
//!
//! // Post a receive: nothing is queued, so it is handed to the engine.
//! let PostOutcome::Queued { id, offloaded: true } = off.post(spec, "buf A", true)? else { panic!() };
//! let Some(Action::Add { handle, entry, count: 0 }) = off.poll_action() else { panic!() };
//! assert_eq!(handle, id);
//!
//! // The engine confirms, then matches a message to that entry.
//! off.handle_event(EngineEvent::Added { handle, sync_request: false })?;
//! let tag = layout.encode(Envelope { context_id: 1, source: 3, tag: 7 })?;
//! assert!(entry.matches(tag));
//! off.handle_event(EngineEvent::Matched { handle, tag, msg: b"hi".to_vec() })?;
//! let Some(Completion::Matched { recv, msg, .. }) = off.poll_completion() else { panic!() };
//! assert_eq!((recv, msg.as_slice()), ("buf A", &b"hi"[..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::fmt;

use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout, TagMask};
use tracing::debug;

use crate::hash::FastMap;
use crate::matcher::{Arrived, Posted};
use crate::{Error, Matcher, MsgId, RecvId, Shape};

/// What the engine can do, and how the model drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadConfig {
    /// Tag layout shared with the senders; entries and message tags use it.
    pub layout: TagLayout,
    /// Entries the engine can hold at once (TM-SRQ `max_num_tags`, or the
    /// prepost queue's depth). An entry is held from its add until the engine
    /// reports it matched or deleted.
    pub capacity: usize,
    /// Whether the engine sees messages from every source that can reach this
    /// matcher, so it may hold `ANY_SOURCE` receives. `false` for a per-peer
    /// engine, or when other paths (shared memory, self) bypass it.
    pub any_source: bool,
    /// Whether the engine can hold `ANY_TAG` receives (masks).
    pub any_tag: bool,
    /// Sync at least every this many engine-unexpected messages (TM-SRQ needs
    /// one before 2^14 unsynced messages). At least 1.
    pub sync_interval: u16,
}

impl OffloadConfig {
    /// A per-peer style configuration: capacity `capacity`, `ANY_TAG` allowed,
    /// `ANY_SOURCE` never offloaded, sync at least every 2^14 messages.
    pub const fn new(layout: TagLayout, capacity: usize) -> Self {
        OffloadConfig {
            layout,
            capacity,
            any_source: false,
            any_tag: true,
            sync_interval: 1 << 14,
        }
    }
}

/// An operation for the engine, in the order the model emitted it. The engine
/// must execute them in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Append an entry at the tail of the engine's list.
    Add {
        /// The model's name for it; the engine reports it back in events.
        handle: RecvId,
        /// What it matches: `((msg_tag ^ tag) & mask) == 0`.
        entry: TagMask,
        /// The unexpected counter to apply (TM-SRQ `IBV_OPS_TM_SYNC`).
        count: u16,
    },
    /// Remove an entry; answered by `Deleted` or `DeleteFailed`.
    Delete {
        /// The entry.
        handle: RecvId,
        /// The unexpected counter to apply.
        count: u16,
    },
    /// Only update the unexpected counter.
    Sync {
        /// The unexpected counter to apply.
        count: u16,
    },
}

/// What the engine reports, in its own order (for TM-SRQ: CQ order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineEvent<M> {
    /// An add was executed.
    Added {
        /// The entry.
        handle: RecvId,
        /// The engine asks for a sync (TM-SRQ `IBV_WC_TM_SYNC_REQ`).
        sync_request: bool,
    },
    /// The engine matched a message to an entry and removed the entry.
    Matched {
        /// The entry.
        handle: RecvId,
        /// The message's 64-bit tag.
        tag: u64,
        /// The message.
        msg: M,
    },
    /// A delete removed the entry; it will never match.
    Deleted {
        /// The entry.
        handle: RecvId,
        /// The engine asks for a sync.
        sync_request: bool,
    },
    /// A delete found the entry already consumed: its `Matched` event is (or
    /// will be) reported.
    DeleteFailed {
        /// The entry.
        handle: RecvId,
    },
    /// A message matched no active entry and is handed to software.
    Unexpected {
        /// The message's 64-bit tag.
        tag: u64,
        /// The message.
        msg: M,
        /// The engine asks for a sync.
        sync_request: bool,
    },
    /// The engine asks for a sync without any other event.
    SyncRequest,
}

/// What the caller learns, in linearization order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion<R, M> {
    /// A queued receive took a message (in the engine or in software).
    Matched {
        /// The receive's handle.
        id: RecvId,
        /// The receive.
        recv: R,
        /// The message's envelope.
        env: Envelope,
        /// The message.
        msg: M,
    },
    /// A message matched no receive and is now in the unexpected queue (a
    /// later post, probe or mprobe will find it).
    Queued {
        /// Its handle.
        id: MsgId,
        /// Its envelope.
        env: Envelope,
    },
    /// A cancel succeeded; the receive is handed back.
    Cancelled {
        /// The receive's handle.
        id: RecvId,
        /// The receive.
        recv: R,
    },
    /// A cancel failed: the receive was (or is being) matched.
    CancelFailed {
        /// The receive's handle.
        id: RecvId,
    },
}

/// Result of [`Offload::post`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum PostOutcome<R, M> {
    /// Matched at once from the unexpected queue.
    Matched {
        /// The receive, handed back.
        recv: R,
        /// The message's envelope.
        env: Envelope,
        /// The message.
        msg: M,
    },
    /// Queued; `offloaded` says whether an [`Action::Add`] was emitted.
    Queued {
        /// The receive's handle (also the engine handle).
        id: RecvId,
        /// Whether the engine was asked to hold it.
        offloaded: bool,
    },
}

/// Result of [`Offload::cancel`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum CancelOutcome<R> {
    /// Cancelled in software; the receive is handed back.
    Cancelled(R),
    /// The engine holds it: a delete was emitted (or was already in flight) and
    /// the answer comes as a [`Completion`].
    Pending,
    /// Not cancellable: already matched, or the handle is stale.
    Failed,
}

/// Protocol counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffloadStats {
    /// Adds emitted.
    pub adds: u64,
    /// Deletes emitted.
    pub deletes: u64,
    /// Syncs emitted.
    pub syncs: u64,
    /// Receives matched by the engine.
    pub engine_matches: u64,
    /// Receives matched in software.
    pub sw_matches: u64,
    /// Engine-unexpected messages processed.
    pub unexpected: u64,
    /// Matches that had to withdraw an engine entry first.
    pub withdrawals: u64,
    /// Deletes that found the entry consumed.
    pub delete_races: u64,
    /// Receives kept in software although eligible (prefix rule or full).
    pub kept_in_sw: u64,
}

impl fmt::Display for OffloadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offload: {} adds, {} deletes, {} syncs, {} engine matches, {} sw matches, \
             {} unexpected, {} withdrawals, {} delete races, {} kept in sw",
            self.adds,
            self.deletes,
            self.syncs,
            self.engine_matches,
            self.sw_matches,
            self.unexpected,
            self.withdrawals,
            self.delete_races,
            self.kept_in_sw
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HwState {
    /// Software only.
    Sw,
    /// Add emitted (confirmed or not).
    Engine,
    /// Delete emitted.
    Deleting { cancel: bool, for_match: bool },
}

impl HwState {
    fn name(self) -> &'static str {
        match self {
            HwState::Sw => "software-only",
            HwState::Engine => "in engine",
            HwState::Deleting { .. } => "deleting",
        }
    }
}

/// A receive as the shadow holds it.
#[derive(Debug, Clone)]
struct Slot<R> {
    recv: R,
    state: HwState,
}

#[derive(Debug, Clone)]
struct Pending<M> {
    env: Envelope,
    msg: M,
    from_engine: bool,
}

/// Counters of software-resident receives by overlap class, for the O(1)
/// prefix check.
#[derive(Debug, Clone, Default)]
struct SwIndex {
    counts: FastMap<(u8, u32, u32, u32), u32>,
}

// Counter kinds.
const E_ST: u8 = 0; // exact (s,t)
const E_SSHAPE: u8 = 1; // (s,*) by s
const E_TSHAPE: u8 = 2; // (*,t) by t
const E_BYSRC: u8 = 3; // exact or (s,*), by s
const E_BYTAG: u8 = 4; // exact or (*,t), by t
const E_CTXSHAPE: u8 = 5; // per ctx, per shape (in the src field)
const E_CTX: u8 = 6; // per ctx

impl SwIndex {
    fn keys(spec: &MatchSpec) -> smallvec::SmallVec<[(u8, u32, u32, u32); 6]> {
        let c = spec.context_id;
        let shape = Shape::of(spec) as u32;
        let mut v = smallvec::SmallVec::new();
        match (spec.source, spec.tag) {
            (Source::Rank(s), Tag::Value(t)) => {
                v.push((E_ST, c, s, t));
                v.push((E_BYSRC, c, s, 0));
                v.push((E_BYTAG, c, 0, t));
            }
            (Source::Rank(s), Tag::Any) => {
                v.push((E_SSHAPE, c, s, 0));
                v.push((E_BYSRC, c, s, 0));
            }
            (Source::Any, Tag::Value(t)) => {
                v.push((E_TSHAPE, c, 0, t));
                v.push((E_BYTAG, c, 0, t));
            }
            (Source::Any, Tag::Any) => {}
        }
        v.push((E_CTXSHAPE, c, shape, 0));
        v.push((E_CTX, c, 0, 0));
        v
    }

    fn add(&mut self, spec: &MatchSpec) {
        for k in Self::keys(spec) {
            *self.counts.entry(k).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, spec: &MatchSpec) {
        for k in Self::keys(spec) {
            if let Some(n) = self.counts.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&k);
                }
            }
        }
    }

    fn get(&self, k: (u8, u32, u32, u32)) -> u32 {
        self.counts.get(&k).copied().unwrap_or(0)
    }

    /// Software-resident receives that overlap `spec` (some message matches
    /// both).
    fn overlapping(&self, spec: &MatchSpec) -> u32 {
        let c = spec.context_id;
        let shape = |s: Shape| self.get((E_CTXSHAPE, c, s as u32, 0));
        match (spec.source, spec.tag) {
            (Source::Rank(s), Tag::Value(t)) => {
                self.get((E_ST, c, s, t))
                    + self.get((E_SSHAPE, c, s, 0))
                    + self.get((E_TSHAPE, c, 0, t))
                    + shape(Shape::AnyAny)
            }
            (Source::Rank(s), Tag::Any) => {
                self.get((E_BYSRC, c, s, 0)) + shape(Shape::AnySource) + shape(Shape::AnyAny)
            }
            (Source::Any, Tag::Value(t)) => {
                self.get((E_BYTAG, c, 0, t)) + shape(Shape::AnyTag) + shape(Shape::AnyAny)
            }
            (Source::Any, Tag::Any) => self.get((E_CTX, c, 0, 0)),
        }
    }
}

/// The offload policy and software shadow. `R` is the caller's receive
/// handle, `M` its message handle. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Offload<R, M> {
    cfg: OffloadConfig,
    shadow: Matcher<Slot<R>, M>,
    sw: SwIndex,
    /// Entries the engine holds (add emitted, not yet matched or deleted).
    live: usize,
    count: u16,
    since_sync: u32,
    parked: Option<(RecvId, Pending<M>)>,
    stalled: VecDeque<Pending<M>>,
    /// Consumed by the engine (delete failed) before its `Matched` event.
    consumed: FastMap<RecvId, (MatchSpec, R)>,
    /// `Matched` seen for an entry whose delete is still in flight: the
    /// `DeleteFailed` to expect, and whether it answers a cancel.
    expect_delete_failed: FastMap<RecvId, bool>,
    actions: VecDeque<Action>,
    completions: VecDeque<Completion<R, M>>,
    stats: OffloadStats,
}

impl<R, M> Offload<R, M> {
    /// A model for an engine described by `cfg`.
    ///
    /// # Errors
    /// [`Error::Capacity`] if `sync_interval` is 0.
    pub fn new(cfg: OffloadConfig) -> Result<Self, Error> {
        if cfg.sync_interval == 0 {
            return Err(Error::Capacity {
                reason: "sync_interval must be at least 1",
            });
        }
        Ok(Offload {
            cfg,
            shadow: Matcher::new(),
            sw: SwIndex::default(),
            live: 0,
            count: 0,
            since_sync: 0,
            parked: None,
            stalled: VecDeque::new(),
            consumed: FastMap::default(),
            expect_delete_failed: FastMap::default(),
            actions: VecDeque::new(),
            completions: VecDeque::new(),
            stats: OffloadStats::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &OffloadConfig {
        &self.cfg
    }

    /// The current unexpected counter (what the next action carries).
    pub fn count(&self) -> u16 {
        self.count
    }

    /// Entries the engine holds or will hold (adds not yet answered by a match
    /// or a delete).
    pub fn engine_len(&self) -> usize {
        self.live
    }

    /// Protocol counters.
    pub fn stats(&self) -> OffloadStats {
        self.stats
    }

    /// Queued receives (software and engine) and messages.
    pub fn posted_len(&self) -> usize {
        self.shadow.posted_len()
    }

    /// Queued unexpected messages.
    pub fn unexpected_len(&self) -> usize {
        self.shadow.unexpected_len()
    }

    /// Messages waiting for a delete to resolve before they can be matched.
    pub fn parked_len(&self) -> usize {
        usize::from(self.parked.is_some()) + self.stalled.len()
    }

    /// Whether a receive is held by (or handed to) the engine.
    pub fn is_offloaded(&self, id: RecvId) -> bool {
        self.shadow
            .get_posted(id)
            .is_some_and(|e| e.recv.state != HwState::Sw)
    }

    /// The queued unexpected messages in arrival order.
    pub fn unexpected(&self) -> Vec<crate::Peeked<'_, M>> {
        self.shadow.unexpected()
    }

    /// A queued unexpected message by handle.
    pub fn get_unexpected(&self, id: MsgId) -> Option<crate::Peeked<'_, M>> {
        self.shadow.get_unexpected(id)
    }

    /// The queued receives in posting order (`bool`: held by the engine).
    pub fn posted(&self) -> Vec<(RecvId, MatchSpec, &R, bool)> {
        self.shadow
            .posted()
            .into_iter()
            .map(|e| (e.id, e.spec, &e.recv.recv, e.recv.state != HwState::Sw))
            .collect()
    }

    /// The next action for the engine.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next completion for the caller.
    pub fn poll_completion(&mut self) -> Option<Completion<R, M>> {
        self.completions.pop_front()
    }

    fn emit(&mut self, a: Action) {
        match a {
            Action::Add { .. } => self.stats.adds += 1,
            Action::Delete { .. } => self.stats.deletes += 1,
            Action::Sync { .. } => {
                self.stats.syncs += 1;
                self.since_sync = 0;
            }
        }
        self.actions.push_back(a);
    }

    fn sync(&mut self) {
        debug!(count = self.count, "tm-match offload: sync");
        let count = self.count;
        self.emit(Action::Sync { count });
    }

    /// Posts a receive. `eligible` is the caller's part of the decision
    /// (contiguous, registered buffer above the size threshold, source reaches
    /// this engine); the model adds the prefix, capacity and shape rules. A
    /// spec the tag layout cannot carry (e.g. a tag above `max_tag`) stays in
    /// software, where it still matches messages from other paths.
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher.
    pub fn post(
        &mut self,
        spec: MatchSpec,
        recv: R,
        eligible: bool,
    ) -> Result<PostOutcome<R, M>, Error> {
        let slot = Slot {
            recv,
            state: HwState::Sw,
        };
        let id = match self.shadow.post(spec, slot)? {
            Posted::Matched { recv, env, msg, .. } => {
                self.stats.sw_matches += 1;
                return Ok(PostOutcome::Matched {
                    recv: recv.recv,
                    env,
                    msg,
                });
            }
            Posted::Queued(id) => id,
        };
        let shape_ok = match Shape::of(&spec) {
            Shape::Exact => true,
            Shape::AnyTag => self.cfg.any_tag,
            Shape::AnySource => self.cfg.any_source,
            Shape::AnyAny => self.cfg.any_source && self.cfg.any_tag,
        };
        let entry = if eligible
            && shape_ok
            && self.live < self.cfg.capacity
            && self.sw.overlapping(&spec) == 0
        {
            self.cfg.layout.match_bits(spec).ok()
        } else {
            None
        };
        match entry {
            Some(entry) => {
                if let Some(s) = self.shadow.get_posted_mut(id) {
                    s.state = HwState::Engine;
                }
                self.live += 1;
                let count = self.count;
                self.emit(Action::Add {
                    handle: id,
                    entry,
                    count,
                });
                Ok(PostOutcome::Queued {
                    id,
                    offloaded: true,
                })
            }
            None => {
                if eligible {
                    self.stats.kept_in_sw += 1;
                }
                self.sw.add(&spec);
                Ok(PostOutcome::Queued {
                    id,
                    offloaded: false,
                })
            }
        }
    }

    /// `MPI_Cancel` of a posted receive.
    pub fn cancel(&mut self, id: RecvId) -> CancelOutcome<R> {
        let Some(e) = self.shadow.get_posted(id) else {
            return CancelOutcome::Failed;
        };
        match e.recv.state {
            HwState::Sw => match self.shadow.cancel(id) {
                Some((spec, slot)) => {
                    self.sw.remove(&spec);
                    CancelOutcome::Cancelled(slot.recv)
                }
                None => CancelOutcome::Failed,
            },
            HwState::Engine => {
                self.set_state(
                    id,
                    HwState::Deleting {
                        cancel: true,
                        for_match: false,
                    },
                );
                let count = self.count;
                self.emit(Action::Delete { handle: id, count });
                CancelOutcome::Pending
            }
            HwState::Deleting { for_match, .. } => {
                self.set_state(
                    id,
                    HwState::Deleting {
                        cancel: true,
                        for_match,
                    },
                );
                CancelOutcome::Pending
            }
        }
    }

    /// `MPI_Iprobe` on the messages software has queued as unexpected so far
    /// (messages still inside the engine, or parked, are not visible yet).
    pub fn probe(&self, spec: &MatchSpec) -> Option<crate::Peeked<'_, M>> {
        self.shadow.probe(spec)
    }

    /// `MPI_Improbe`: take the message a receive with `spec` would take.
    pub fn improbe(&mut self, spec: &MatchSpec) -> Option<crate::MatchedMessage<M>> {
        self.shadow.improbe(spec)
    }

    /// A message that reached this process without going through the engine
    /// (shared memory, self, another NIC). It is matched against the whole
    /// shadow; the outcome comes as a [`Completion`].
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Result<(), Error> {
        self.process(Pending {
            env,
            msg,
            from_engine: false,
        })
    }

    fn set_state(&mut self, id: RecvId, state: HwState) {
        if let Some(s) = self.shadow.get_posted_mut(id) {
            s.state = state;
        }
    }

    fn state(&self, id: RecvId) -> Option<HwState> {
        self.shadow.get_posted(id).map(|e| e.recv.state)
    }

    /// One processed engine-unexpected message: bump the counter and sync.
    fn counted(&mut self) {
        self.count = self.count.wrapping_add(1);
        self.stats.unexpected += 1;
        self.since_sync += 1;
        if self.live > 0 || self.since_sync >= u32::from(self.cfg.sync_interval) {
            self.sync();
        }
    }

    /// Matches one arrival against the whole shadow, or parks it.
    fn process(&mut self, p: Pending<M>) -> Result<(), Error> {
        if self.parked.is_some() {
            self.stalled.push_back(p);
            return Ok(());
        }
        let Some(rid) = self.shadow.peek_arrival(&p.env) else {
            let Pending {
                env,
                msg,
                from_engine,
            } = p;
            match self.shadow.arrive(env, msg)? {
                Arrived::Queued(id) => self.completions.push_back(Completion::Queued { id, env }),
                Arrived::Matched { .. } => unreachable!("tm-match: peek and arrive disagree"),
            }
            if from_engine {
                self.counted();
            }
            return Ok(());
        };
        match self.state(rid) {
            Some(HwState::Sw) | None => {
                let Some((spec, slot)) = self.shadow.cancel(rid) else {
                    unreachable!("tm-match: peeked receive vanished")
                };
                self.sw.remove(&spec);
                self.stats.sw_matches += 1;
                let Pending {
                    env,
                    msg,
                    from_engine,
                } = p;
                self.completions.push_back(Completion::Matched {
                    id: rid,
                    recv: slot.recv,
                    env,
                    msg,
                });
                if from_engine {
                    self.counted();
                }
            }
            Some(HwState::Engine) => {
                debug!(
                    ?rid,
                    "tm-match offload: message matches an engine entry, withdrawing it"
                );
                self.stats.withdrawals += 1;
                self.set_state(
                    rid,
                    HwState::Deleting {
                        cancel: false,
                        for_match: true,
                    },
                );
                let count = self.count;
                self.emit(Action::Delete { handle: rid, count });
                self.parked = Some((rid, p));
            }
            Some(HwState::Deleting { cancel, .. }) => {
                self.stats.withdrawals += 1;
                self.set_state(
                    rid,
                    HwState::Deleting {
                        cancel,
                        for_match: true,
                    },
                );
                self.parked = Some((rid, p));
            }
        }
        Ok(())
    }

    /// Re-runs the parked message (its receive is gone) and whatever waited
    /// behind it.
    fn rematch_parked(&mut self) -> Result<(), Error> {
        if let Some((_, p)) = self.parked.take() {
            self.process(p)?;
        }
        self.drain_stalled()
    }

    fn drain_stalled(&mut self) -> Result<(), Error> {
        while self.parked.is_none() {
            let Some(p) = self.stalled.pop_front() else {
                break;
            };
            self.process(p)?;
        }
        Ok(())
    }

    fn parked_on(&self, id: RecvId) -> bool {
        matches!(self.parked, Some((r, _)) if r == id)
    }

    /// Feeds one engine event, in engine order.
    ///
    /// # Errors
    /// [`Error::UnknownHandle`] / [`Error::UnexpectedEvent`] if the event does
    /// not fit the model (a driver or engine bug; the model is unchanged), and
    /// [`Error::QueueFull`] from the matcher.
    pub fn handle_event(&mut self, ev: EngineEvent<M>) -> Result<(), Error> {
        match ev {
            EngineEvent::Added {
                handle,
                sync_request,
            } => {
                // Matched before its add completion, or already gone: the
                // engine may report in either order.
                if self.state(handle) == Some(HwState::Sw) {
                    return Err(Error::UnexpectedEvent {
                        event: "Added",
                        handle,
                        state: HwState::Sw.name(),
                    });
                }
                if sync_request {
                    self.sync();
                }
            }
            EngineEvent::Matched { handle, tag, msg } => {
                let env = self.cfg.layout.decode(tag);
                match self.state(handle) {
                    Some(HwState::Sw) => {
                        return Err(Error::UnexpectedEvent {
                            event: "Matched",
                            handle,
                            state: HwState::Sw.name(),
                        })
                    }
                    Some(state) => {
                        let Some((_, slot)) = self.shadow.cancel(handle) else {
                            unreachable!("tm-match: live receive vanished")
                        };
                        self.live -= 1;
                        self.stats.engine_matches += 1;
                        self.completions.push_back(Completion::Matched {
                            id: handle,
                            recv: slot.recv,
                            env,
                            msg,
                        });
                        if let HwState::Deleting { cancel, .. } = state {
                            self.stats.delete_races += 1;
                            self.expect_delete_failed.insert(handle, cancel);
                            if self.parked_on(handle) {
                                self.rematch_parked()?;
                            }
                        }
                    }
                    None => {
                        let Some((_, recv)) = self.consumed.remove(&handle) else {
                            return Err(Error::UnknownHandle {
                                event: "Matched",
                                handle,
                            });
                        };
                        self.live -= 1;
                        self.stats.engine_matches += 1;
                        self.completions.push_back(Completion::Matched {
                            id: handle,
                            recv,
                            env,
                            msg,
                        });
                    }
                }
            }
            EngineEvent::Deleted {
                handle,
                sync_request,
            } => {
                let state = self.state(handle);
                let Some(HwState::Deleting { cancel, for_match }) = state else {
                    return Err(match state {
                        Some(s) => Error::UnexpectedEvent {
                            event: "Deleted",
                            handle,
                            state: s.name(),
                        },
                        None => Error::UnknownHandle {
                            event: "Deleted",
                            handle,
                        },
                    });
                };
                let Some((_, slot)) = self.shadow.cancel(handle) else {
                    unreachable!("tm-match: live receive vanished")
                };
                self.live -= 1;
                if for_match && self.parked_on(handle) {
                    let Some((_, p)) = self.parked.take() else {
                        unreachable!("tm-match: parked message vanished")
                    };
                    self.stats.sw_matches += 1;
                    self.completions.push_back(Completion::Matched {
                        id: handle,
                        recv: slot.recv,
                        env: p.env,
                        msg: p.msg,
                    });
                    if cancel {
                        self.completions
                            .push_back(Completion::CancelFailed { id: handle });
                    }
                    if p.from_engine {
                        self.counted();
                    }
                } else {
                    self.completions.push_back(Completion::Cancelled {
                        id: handle,
                        recv: slot.recv,
                    });
                }
                if sync_request {
                    self.sync();
                }
                self.drain_stalled()?;
            }
            EngineEvent::DeleteFailed { handle } => {
                if let Some(cancel) = self.expect_delete_failed.remove(&handle) {
                    if cancel {
                        self.completions
                            .push_back(Completion::CancelFailed { id: handle });
                    }
                    return Ok(());
                }
                let state = self.state(handle);
                let Some(HwState::Deleting { cancel, .. }) = state else {
                    return Err(match state {
                        Some(s) => Error::UnexpectedEvent {
                            event: "DeleteFailed",
                            handle,
                            state: s.name(),
                        },
                        None => Error::UnknownHandle {
                            event: "DeleteFailed",
                            handle,
                        },
                    });
                };
                debug!(
                    ?handle,
                    "tm-match offload: delete raced with an engine match"
                );
                self.stats.delete_races += 1;
                let Some((spec, slot)) = self.shadow.cancel(handle) else {
                    unreachable!("tm-match: live receive vanished")
                };
                self.consumed.insert(handle, (spec, slot.recv));
                if cancel {
                    self.completions
                        .push_back(Completion::CancelFailed { id: handle });
                }
                if self.parked_on(handle) {
                    self.rematch_parked()?;
                }
            }
            EngineEvent::Unexpected {
                tag,
                msg,
                sync_request,
            } => {
                let env = self.cfg.layout.decode(tag);
                self.process(Pending {
                    env,
                    msg,
                    from_engine: true,
                })?;
                if sync_request {
                    self.sync();
                }
            }
            EngineEvent::SyncRequest => self.sync(),
        }
        Ok(())
    }
}
