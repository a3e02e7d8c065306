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
//!   that overlaps it. The check is O(1): up to 16 software-resident
//!   receives are a list scanned in full, beyond that per-key counters, the
//!   same four shapes as the matcher (dropped when left unread for long and
//!   rebuilt from the shadow on the next eligible post: amortized O(1)).
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
//! The engine's own rule, which both follow, is [`EngineScan`]: a message
//! goes to the first entry in list order whose tag and mask match it, and
//! only to that one.
//!
//! # Fast paths the transport takes, decided here
//!
//! Every match decision is the model's; a transport feeds envelopes in and
//! does what comes out. Three fast paths let it skip queueing a message or a
//! receive without deciding anything itself:
//!
//! - **A receive that is not posted** (a blocking receive that looks at
//!   arrivals before it posts): [`Offload::offer_unposted`] /
//!   [`Offload::consume_arrival`] say whether it takes an arriving message
//!   ([`Unposted::Taken`]), whether the message is not its own
//!   ([`Unposted::NotMine`]), or whether it must go through the model
//!   ([`Unposted::Queue`]: a posted or deferred receive, a parked message or
//!   a queued message exists; the receive then posts, and the model
//!   matches it against the queue once).
//! - **A message a posted software receive takes at once**:
//!   [`Offload::take_matching_posted`].
//! - **Deferred receives** ([`Offload::defer`], [`Offload::take_deferred`],
//!   [`Offload::post_deferred`]): exact-source receives made while nothing
//!   is posted, queued or parked, kept in a queue of their own and
//!   completed in order by their source's messages (below).
//!
//! Each leaves the model exactly as the general path would have (the
//! differential tests check them against
//! [`crate::reference::ReferenceMatcher`]).
//!
//! # Deferred receives
//!
//! A receive may be deferred ([`Offload::defer`]) when it names one source,
//! the shadow is empty (no receive posted, no message queued or parked) and
//! every receive deferred already names the same source. It is then a
//! posted receive in every respect but its storage: it has a handle (which
//! stays valid when it moves into the posted queue), it can be cancelled,
//! and it is older than every receive posted later.
//!
//! While any receive is deferred the shadow stays empty: every operation
//! that would put something there ([`Offload::post`],
//! [`Offload::post_software`], [`Offload::arrive`], an engine
//! [`EngineEvent::Unexpected`]) first moves
//! the deferred receives into the posted queue, oldest first, as if they had
//! been posted when they were deferred ([`Offload::post_deferred`], which
//! the caller may also call itself). Their messages come from one source, in
//! that source's order; the caller offers each one, as it arrives, to the
//! oldest deferred receive ([`Offload::take_deferred`]): taken when that
//! receive matches it (the receive is then complete), otherwise the caller
//! hands it to the model the usual way (which moves the deferred receives in
//! first, so that it reaches whichever of them matches it, or is queued).
//!
//! The outcome is the schedule in which every deferred receive was posted
//! when it was made, as MPI orders it: the differential tests replay every
//! operation on [`crate::reference::ReferenceMatcher`], where a deferred
//! receive is a plain post.
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

use tm_proto::{Envelope, MatchSpec, TagLayout, TagMask};
use tracing::debug;

use crate::hash::FastMap;
use crate::{Error, Matcher, MsgId, RecvId, Shape};

mod deferred;
mod engine;
mod sw_index;

use deferred::Deferred;
pub use deferred::PeekedRecv;
pub use engine::EngineScan;
use sw_index::SwIndex;

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

/// A receive's turn to take an arrival without being posted
/// ([`Offload::unposted_turn`]).
#[derive(Debug)]
pub struct UnpostedTurn<'a, R, M> {
    off: &'a mut Offload<R, M>,
    spec: MatchSpec,
}

impl<R, M> UnpostedTurn<'_, R, M> {
    /// The arrival with envelope `env` (`from_engine`: it came through the
    /// engine, as [`EngineEvent::Unexpected`]): `true` when the receive's
    /// spec matches it and the receive takes it, the model changing as for
    /// [`Unposted::Taken`] (the caller delivers the message); `false`,
    /// nothing changed, when it is not the receive's.
    #[inline(always)]
    pub fn take(self, env: &Envelope, from_engine: bool) -> bool {
        if !self.spec.matches(env) {
            return false;
        }
        self.off.stats.sw_matches += 1;
        if from_engine {
            self.off.counted();
        }
        true
    }
}

/// What a receive that is not posted may do with an arriving message
/// ([`Offload::offer_unposted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Unposted {
    /// The receive takes the message; the caller delivers it.
    Taken,
    /// Not the receive's message: hand it to the model; the receive may
    /// take a later one.
    NotMine,
    /// The receive's kind of message, but it goes through the model: hand
    /// it to the model and post the receive (it takes no later message
    /// directly).
    Queue,
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
    /// Receives deferred ([`Offload::defer`]).
    pub deferred: u64,
    /// Deferred receives moved into the posted queue
    /// ([`Offload::post_deferred`], or before an operation that needs
    /// them there).
    pub deferred_posted: u64,
}

impl fmt::Display for OffloadStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "offload: {} adds, {} deletes, {} syncs, {} engine matches, {} sw matches, \
             {} unexpected, {} withdrawals, {} delete races, {} kept in sw, \
             {} deferred, {} deferred then posted",
            self.adds,
            self.deletes,
            self.syncs,
            self.engine_matches,
            self.sw_matches,
            self.unexpected,
            self.withdrawals,
            self.delete_races,
            self.kept_in_sw,
            self.deferred,
            self.deferred_posted
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
    /// Deferred receives, oldest first ([`Offload::defer`]): posted
    /// receives kept outside the shadow. While any exists the shadow is
    /// empty (nothing posted, queued or parked): every operation that
    /// would put something there moves them in first.
    deferred: VecDeque<Deferred<R>>,
    /// The source of every deferred receive (meaningful while any exists).
    deferred_source: u32,
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
            deferred: VecDeque::new(),
            deferred_source: 0,
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

    /// Receives in the posted queue (software and engine). Deferred
    /// receives are not counted here ([`Offload::deferred_len`]).
    #[inline]
    pub fn posted_len(&self) -> usize {
        self.shadow.posted_len()
    }

    /// Whether the posted and unexpected queues are empty and nothing is
    /// parked (deferred receives aside: while any exists this is always
    /// true).
    #[inline]
    pub fn queues_empty(&self) -> bool {
        self.shadow.posted_len() == 0 && self.shadow.unexpected_len() == 0 && self.parked_len() == 0
    }

    /// Queued unexpected messages.
    #[inline]
    pub fn unexpected_len(&self) -> usize {
        self.shadow.unexpected_len()
    }

    /// Messages waiting for a delete to resolve before they can be matched.
    #[inline]
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

    /// The queued receives in posting order, deferred ones included (last:
    /// they are the youngest), with whether the engine holds them
    /// (diagnostics and tests; O(n log n)).
    pub fn posted(&self) -> Vec<(RecvId, MatchSpec, &R, bool)> {
        let mut v: Vec<_> = self
            .shadow
            .posted()
            .into_iter()
            .map(|e| (e.id, e.spec, &e.recv.recv, e.recv.state != HwState::Sw))
            .collect();
        let source = self.deferred_source;
        v.extend(
            self.deferred
                .iter()
                .map(|d| (d.id, d.spec(source), &d.recv, false)),
        );
        v
    }

    /// The next action for the engine.
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The next completion for the caller.
    pub fn poll_completion(&mut self) -> Option<Completion<R, M>> {
        self.completions.pop_front()
    }

    /// Whether an action or a completion waits for the caller
    /// ([`Offload::poll_action`], [`Offload::poll_completion`]).
    #[inline]
    pub fn has_output(&self) -> bool {
        !self.actions.is_empty() || !self.completions.is_empty()
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

    #[inline(never)]
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
    /// Deferred receives, older, are moved into the posted queue first.
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher.
    pub fn post(
        &mut self,
        spec: MatchSpec,
        recv: R,
        eligible: bool,
    ) -> Result<PostOutcome<R, M>, Error> {
        if !self.deferred.is_empty() {
            self.post_deferred()?;
        }
        // The earliest-arrived queued message it matches, if any (what
        // `Matcher::post` does first; nothing to look at in the usual case
        // of a receive posted before its message).
        if self.shadow.unexpected_len() != 0 {
            if let Some(m) = self.shadow.improbe(&spec) {
                self.stats.sw_matches += 1;
                return Ok(PostOutcome::Matched {
                    recv,
                    env: m.env,
                    msg: m.msg,
                });
            }
        }
        let shape_ok = match Shape::of(&spec) {
            Shape::Exact => true,
            Shape::AnyTag => self.cfg.any_tag,
            Shape::AnySource => self.cfg.any_source,
            Shape::AnyAny => self.cfg.any_source && self.cfg.any_tag,
        };
        let entry =
            if eligible && shape_ok && self.live < self.cfg.capacity && !self.sw_overlaps(&spec) {
                self.cfg.layout.match_bits(spec).ok()
            } else {
                None
            };
        let state = if entry.is_some() {
            HwState::Engine
        } else {
            HwState::Sw
        };
        let id = self.shadow.enqueue_posted(spec, Slot { recv, state })?;
        match entry {
            Some(entry) => {
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

    /// [`Offload::post`] with `eligible = false` (a receive the caller
    /// does not offer to the engine: a small buffer, say) when no message
    /// is queued: the receive is queued in software, behind every earlier
    /// receive, and its handle returned, the model changing exactly as
    /// after that `post` (which would answer `Queued { offloaded: false
    /// }`). `Ok(Err(recv))`, changing nothing, when a queued message might
    /// match it: call [`Offload::post`] then.
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher.
    #[inline(always)]
    pub fn post_software(&mut self, spec: MatchSpec, recv: R) -> Result<Result<RecvId, R>, Error> {
        // The refusal (a message is queued, the case of a receive posted
        // after its message came) answered without a call.
        if self.deferred.is_empty() && self.shadow.unexpected_len() != 0 {
            return Ok(Err(recv));
        }
        self.post_software_queued(spec, recv)
    }

    /// [`Offload::post_software`] past its first test.
    #[inline]
    fn post_software_queued(
        &mut self,
        spec: MatchSpec,
        recv: R,
    ) -> Result<Result<RecvId, R>, Error> {
        if !self.deferred.is_empty() {
            self.post_deferred()?;
        }
        if self.shadow.unexpected_len() != 0 {
            return Ok(Err(recv));
        }
        let id = self.shadow.enqueue_posted(
            spec,
            Slot {
                recv,
                state: HwState::Sw,
            },
        )?;
        self.sw.add(&spec);
        Ok(Ok(id))
    }

    /// Whether a software-resident receive overlaps `spec` (the prefix rule).
    #[inline]
    fn sw_overlaps(&mut self, spec: &MatchSpec) -> bool {
        if self.sw.is_stale() {
            let mut all = Vec::with_capacity(self.sw.len);
            self.shadow.for_each_posted(|spec, slot| {
                if slot.state == HwState::Sw {
                    all.push(spec);
                }
            });
            debug!(
                receives = all.len(),
                "tm-match offload: rebuilding the prefix index"
            );
            self.sw.rebuild(all);
        }
        self.sw.overlaps(spec)
    }

    /// `MPI_Cancel` of a posted receive (a deferred one included).
    pub fn cancel(&mut self, id: RecvId) -> CancelOutcome<R> {
        if !self.deferred.is_empty() {
            if let Some(recv) = self.cancel_deferred(id) {
                return CancelOutcome::Cancelled(recv);
            }
        }
        let Some(loc) = self.shadow.locate_posted(id) else {
            return CancelOutcome::Failed;
        };
        match self.shadow.recv_at(loc).state {
            HwState::Sw => {
                let (_, spec, slot) = self.shadow.take_posted(loc);
                self.sw.remove(&spec);
                CancelOutcome::Cancelled(slot.recv)
            }
            HwState::Engine => {
                self.shadow.recv_at_mut(loc).state = HwState::Deleting {
                    cancel: true,
                    for_match: false,
                };
                let count = self.count;
                self.emit(Action::Delete { handle: id, count });
                CancelOutcome::Pending
            }
            HwState::Deleting { for_match, .. } => {
                self.shadow.recv_at_mut(loc).state = HwState::Deleting {
                    cancel: true,
                    for_match,
                };
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

    /// Withdraws queued unexpected message `id` (its sender cancelled it):
    /// no receive can match it any more. `None` if it is no longer queued
    /// (matched, probed away, or never queued here).
    pub fn cancel_message(&mut self, id: MsgId) -> Option<(Envelope, M)> {
        self.shadow.cancel_message(id)
    }

    /// A message that reached this process without going through the engine
    /// (shared memory, self, another NIC). It is matched against the whole
    /// shadow (deferred receives are moved into it first); the outcome comes
    /// as a [`Completion`].
    ///
    /// # Errors
    /// [`Error::QueueFull`] from the matcher.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Result<(), Error> {
        if !self.deferred.is_empty() {
            self.post_deferred()?;
        }
        self.process(Pending {
            env,
            msg,
            from_engine: false,
        })
    }

    /// A receive the caller has **not** posted (a blocking receive that
    /// looks at arrivals before posting) is offered a message that has just
    /// arrived, before the message is handed to the model; `deliverable`:
    /// the caller could deliver this message to it now (its kind, its
    /// size). The model answers:
    ///
    /// - [`Unposted::NotMine`]: `spec` does not match the message. Hand the
    ///   message to the model as usual; the receive may take a later one.
    /// - [`Unposted::Taken`]: the receive takes it. Had the receive been
    ///   posted now, it would have taken exactly this message: no receive is
    ///   posted (software, engine or deferred), nothing is parked, and no
    ///   queued unexpected message matches `spec` (it would be older). The
    ///   model changes exactly as after [`Offload::arrive`] (`from_engine =
    ///   false`) or [`EngineEvent::Unexpected`] (`from_engine = true`)
    ///   followed by a [`Offload::post`] that takes the message: an
    ///   engine-path message is counted (and a sync emitted when due); no
    ///   completion is queued. The caller delivers the message.
    /// - [`Unposted::Queue`]: the message is the receive's kind but must
    ///   reach it (or an older receive) through the model: the caller
    ///   cannot deliver it (`deliverable` false), or a posted or deferred
    ///   receive, a parked message or an older queued message comes first.
    ///   Hand it to the model, and take no later message for this receive
    ///   directly (it would overtake this one): post it.
    ///
    /// `NotMine` and `Queue` change nothing.
    #[inline(always)]
    pub fn offer_unposted(
        &mut self,
        spec: &MatchSpec,
        env: &Envelope,
        from_engine: bool,
        deliverable: bool,
    ) -> Unposted {
        if !spec.matches(env) {
            return Unposted::NotMine;
        }
        if !deliverable || !self.unposted_may_take(spec) {
            return Unposted::Queue;
        }
        self.stats.sw_matches += 1;
        if from_engine {
            self.counted();
        }
        Unposted::Taken
    }

    /// Whether a receive for `spec` that is not posted may take an arrival
    /// directly now (what [`Offload::unposted_turn`] checks): no receive is
    /// posted (software, engine or deferred), nothing is parked, and no
    /// message is queued. (With messages queued the receive takes the
    /// general path, which matches the queue once: looking for an older
    /// match here first would search the queue twice exactly when one is
    /// there, the common case of a receive posted after its message came.)
    #[inline(always)]
    pub fn unposted_may_take(&self, _spec: &MatchSpec) -> bool {
        self.shadow.posted_len() == 0
            && self.parked_len() == 0
            && self.deferred.is_empty()
            && self.shadow.unexpected_len() == 0
    }

    /// The turn of a receive for `spec` that is not posted, for a caller
    /// that looks at its next arrival only if the receive could take it:
    /// `Some` when it may take an arrival now (nothing posted, deferred or
    /// parked, and no older queued message it matches). The turn borrows
    /// the model, so nothing can change it before [`UnpostedTurn::take`]
    /// decides; dropping the turn changes nothing.
    #[inline(always)]
    pub fn unposted_turn(&mut self, spec: MatchSpec) -> Option<UnpostedTurn<'_, R, M>> {
        if !self.unposted_may_take(&spec) {
            return None;
        }
        Some(UnpostedTurn { off: self, spec })
    }

    /// [`Offload::offer_unposted`] of a message the caller can deliver:
    /// `true` when the receive takes it ([`Unposted::Taken`]), `false`
    /// (nothing changed) otherwise.
    #[inline(always)]
    pub fn consume_arrival(&mut self, spec: &MatchSpec, env: &Envelope, from_engine: bool) -> bool {
        self.offer_unposted(spec, env, from_engine, true) == Unposted::Taken
    }

    /// The arrival fast path: if a message with envelope `env` that arrives
    /// now would complete a software-resident posted receive at once (the
    /// oldest matching one is in software and nothing is parked), takes
    /// that receive and returns its handle and the caller's `R`. The model
    /// then changes exactly as after [`Offload::arrive`] (`from_engine =
    /// false`) or [`EngineEvent::Unexpected`] (`from_engine = true`) and
    /// the [`Completion::Matched`] it would queue, which is not queued: the
    /// caller holds the message and completes the receive itself.
    ///
    /// Returns `None`, changing nothing, in every other case (no match, the
    /// match is held by the engine, a message is parked, the receives are
    /// deferred): hand the message to [`Offload::arrive`] /
    /// [`Offload::handle_event`] then.
    #[inline(always)]
    pub fn take_matching_posted(
        &mut self,
        env: &Envelope,
        from_engine: bool,
    ) -> Option<(RecvId, R)> {
        if self.parked_len() != 0 || self.shadow.posted_len() == 0 {
            return None;
        }
        let loc = self.shadow.find_posted(env)?;
        if self.shadow.recv_at(loc).state != HwState::Sw {
            return None;
        }
        let (rid, spec, slot) = self.shadow.take_posted(loc);
        self.sw.remove(&spec);
        self.stats.sw_matches += 1;
        if from_engine {
            self.counted();
        }
        Some((rid, slot.recv))
    }

    fn state(&self, id: RecvId) -> Option<HwState> {
        self.shadow.get_posted(id).map(|e| e.recv.state)
    }

    /// One processed engine-unexpected message: bump the counter and sync.
    /// Inlined (a receive fast path runs it per message); the sync, due at
    /// most once per `sync_interval` messages, is not.
    #[inline(always)]
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
        let Some(loc) = self.shadow.find_posted(&p.env) else {
            let Pending {
                env,
                msg,
                from_engine,
            } = p;
            let id = self.shadow.enqueue_unexpected(env, msg)?;
            self.completions.push_back(Completion::Queued { id, env });
            if from_engine {
                self.counted();
            }
            return Ok(());
        };
        match self.shadow.recv_at(loc).state {
            HwState::Sw => {
                let (rid, spec, slot) = self.shadow.take_posted(loc);
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
            HwState::Engine => {
                let rid = self.shadow.posted_id(loc);
                debug!(
                    ?rid,
                    "tm-match offload: message matches an engine entry, withdrawing it"
                );
                self.stats.withdrawals += 1;
                self.shadow.recv_at_mut(loc).state = HwState::Deleting {
                    cancel: false,
                    for_match: true,
                };
                let count = self.count;
                self.emit(Action::Delete { handle: rid, count });
                self.parked = Some((rid, p));
            }
            HwState::Deleting { cancel, .. } => {
                let rid = self.shadow.posted_id(loc);
                self.stats.withdrawals += 1;
                self.shadow.recv_at_mut(loc).state = HwState::Deleting {
                    cancel,
                    for_match: true,
                };
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
                let loc = self.shadow.locate_posted(handle);
                match loc.map(|loc| (loc, self.shadow.recv_at(loc).state)) {
                    Some((_, HwState::Sw)) => {
                        return Err(Error::UnexpectedEvent {
                            event: "Matched",
                            handle,
                            state: HwState::Sw.name(),
                        })
                    }
                    Some((loc, state)) => {
                        let (_, _, slot) = self.shadow.take_posted(loc);
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
                let loc = self.shadow.locate_posted(handle);
                let state = loc.map(|loc| self.shadow.recv_at(loc).state);
                let (Some(loc), Some(HwState::Deleting { cancel, for_match })) = (loc, state)
                else {
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
                let (_, _, slot) = self.shadow.take_posted(loc);
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
                let loc = self.shadow.locate_posted(handle);
                let state = loc.map(|loc| self.shadow.recv_at(loc).state);
                let (Some(loc), Some(HwState::Deleting { cancel, .. })) = (loc, state) else {
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
                let (_, spec, slot) = self.shadow.take_posted(loc);
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
                if !self.deferred.is_empty() {
                    self.post_deferred()?;
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tm_proto::{Source, Tag};

    /// Some message matches both specs (brute force over the fields).
    fn overlap(a: &MatchSpec, b: &MatchSpec) -> bool {
        a.context_id == b.context_id
            && match (a.source, b.source) {
                (Source::Rank(x), Source::Rank(y)) => x == y,
                _ => true,
            }
            && match (a.tag, b.tag) {
                (Tag::Value(x), Tag::Value(y)) => x == y,
                _ => true,
            }
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn random_spec(rng: &mut Rng) -> MatchSpec {
        MatchSpec {
            context_id: rng.below(2) as u32,
            source: if rng.below(8) == 0 {
                Source::Any
            } else {
                Source::Rank(rng.below(12) as u32)
            },
            tag: if rng.below(8) == 0 {
                Tag::Any
            } else {
                Tag::Value(rng.below(12) as u32)
            },
        }
    }

    /// `SwIndex` against a plain list, across the switch between its list
    /// form (≤ 16 receives) and its counter form, both ways, with counters
    /// dropping to zero and being reused and swept, and with queries so rare
    /// in some rounds that the counter form goes stale and is rebuilt.
    #[test]
    fn sw_index_matches_brute_force_across_forms() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (mut saw_stale, mut saw_indexed) = (0, 0);
        for round in 0..42 {
            let mut idx = SwIndex::default();
            let mut live: Vec<MatchSpec> = Vec::new();
            // Grow past the list form, shrink to empty, grow again.
            let target = [5usize, 40, 0, 17, 100, 3, 0][round % 7];
            // Queries after every update, or only every 500th.
            let every = if round % 3 == 2 { 500 } else { 1 };
            for step in 0..1500 {
                let grow = live.len() < target || (live.len() == target && rng.below(2) == 0);
                if grow || live.is_empty() {
                    let s = random_spec(&mut rng);
                    idx.add(&s);
                    live.push(s);
                } else {
                    let i = rng.below(live.len() as u64) as usize;
                    let s = live.swap_remove(i);
                    idx.remove(&s);
                }
                assert_eq!(idx.indexed, idx.len > 0, "form and count disagree");
                assert!(!idx.stale || idx.indexed, "stale list form");
                if idx.indexed {
                    assert_eq!(idx.len, live.len());
                    saw_indexed += 1;
                } else {
                    assert_eq!(idx.small.len(), live.len());
                }
                if step % every != 0 {
                    continue;
                }
                if idx.is_stale() {
                    saw_stale += 1;
                    idx.rebuild(live.iter().copied());
                }
                for _ in 0..4 {
                    let q = random_spec(&mut rng);
                    let want = live.iter().any(|s| overlap(s, &q));
                    assert_eq!(idx.overlaps(&q), want, "{q:?} against {live:?}");
                }
            }
            while let Some(s) = live.pop() {
                idx.remove(&s);
            }
            assert!(!idx.indexed && !idx.stale && idx.small.is_empty() && idx.counts.is_empty());
        }
        assert!(
            saw_stale > 0 && saw_indexed > 0,
            "a form was never exercised"
        );
    }

    /// `consume_arrival` leaves the model exactly as an arrival followed by
    /// a post that takes it: same counter, same actions, same stats, nothing
    /// queued; and it refuses (changing nothing) while a receive is queued.
    #[test]
    fn consume_arrival_equals_arrive_then_post() {
        let layout = TagLayout::DEFAULT;
        let mut cfg = OffloadConfig::new(layout, 4);
        cfg.sync_interval = 3;
        let mut slow: Offload<u32, u32> = Offload::new(cfg).unwrap();
        let mut fast: Offload<u32, u32> = Offload::new(cfg).unwrap();
        let spec = MatchSpec {
            context_id: 1,
            source: Source::Rank(2),
            tag: Tag::Value(7),
        };
        let env = Envelope {
            context_id: 1,
            source: 2,
            tag: 7,
        };
        let tag = layout.encode(env).unwrap();
        for i in 0..10u32 {
            let from_engine = i % 3 != 1;
            if from_engine {
                slow.handle_event(EngineEvent::Unexpected {
                    tag,
                    msg: i,
                    sync_request: false,
                })
                .unwrap();
            } else {
                slow.arrive(env, i).unwrap();
            }
            match slow.post(spec, i, false).unwrap() {
                PostOutcome::Matched { msg, .. } => assert_eq!(msg, i),
                PostOutcome::Queued { .. } => panic!("the arrival was not taken"),
            }
            assert!(fast.consume_arrival(&spec, &env, from_engine));
            assert_eq!(fast.count(), slow.count());
            assert_eq!(fast.unexpected_len(), 0);
            while let Some(c) = slow.poll_completion() {
                assert!(matches!(c, Completion::Queued { .. }), "{c:?}");
            }
            assert!(fast.poll_completion().is_none());
            loop {
                let (a, b) = (slow.poll_action(), fast.poll_action());
                assert_eq!(a, b);
                if a.is_none() {
                    break;
                }
            }
        }
        assert_eq!(fast.stats().unexpected, slow.stats().unexpected);
        assert_eq!(fast.stats().sw_matches, slow.stats().sw_matches);
        assert_eq!(fast.stats().syncs, slow.stats().syncs);
        assert!(
            fast.stats().syncs > 0,
            "the sync interval was never reached"
        );
        // A queued receive could claim the message first: refused.
        let _ = fast.post(spec, 99, false).unwrap();
        let (count, stats) = (fast.count(), fast.stats());
        assert!(!fast.consume_arrival(&spec, &env, true));
        assert_eq!((fast.count(), fast.stats()), (count, stats));
    }

    /// `take_matching_posted` against `arrive` + the queued completion (and
    /// `post_software` against `post` for non-eligible receives), on
    /// random posts (exact, wildcard, some offloaded) and arrivals: the same
    /// receives complete with the same messages in the same order, and the
    /// counters, actions and queues agree.
    /// `has_output` says whether `poll_action`/`poll_completion` have
    /// something.
    #[test]
    fn has_output_follows_the_queues() {
        let cfg = OffloadConfig::new(TagLayout::DEFAULT, 3);
        let mut off: Offload<u32, u32> = Offload::new(cfg).unwrap();
        assert!(!off.has_output());
        let env = Envelope {
            context_id: 0,
            source: 1,
            tag: 2,
        };
        off.arrive(env, 7).unwrap();
        assert!(off.has_output());
        while off.poll_action().is_some() || off.poll_completion().is_some() {}
        assert!(!off.has_output());
    }

    #[test]
    fn take_matching_posted_equals_arrive() {
        let layout = TagLayout::DEFAULT;
        let mut cfg = OffloadConfig::new(layout, 3);
        cfg.sync_interval = 5;
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut fast_hits, mut refusals, mut soft_posts) = (0, 0, 0);
        for round in 0..20 {
            let mut slow: Offload<u32, u32> = Offload::new(cfg).unwrap();
            let mut fast: Offload<u32, u32> = Offload::new(cfg).unwrap();
            let (mut done_slow, mut done_fast) = (Vec::new(), Vec::new());
            // Odd rounds post more than arrives, so that the unexpected
            // queue is often empty (what `post_software` needs).
            let post_odds = if round % 2 == 0 { 4 } else { 7 };
            for step in 0..400u32 {
                if rng.below(8) < post_odds {
                    let spec = random_spec(&mut rng);
                    let eligible = rng.below(4) == 0;
                    let a = slow.post(spec, step, eligible).unwrap();
                    // The fast model posts a non-eligible receive through
                    // `post_software` when it accepts it.
                    let b = match (!eligible).then(|| fast.post_software(spec, step).unwrap()) {
                        Some(Ok(id)) => {
                            soft_posts += 1;
                            PostOutcome::Queued {
                                id,
                                offloaded: false,
                            }
                        }
                        Some(Err(recv)) => fast.post(spec, recv, false).unwrap(),
                        None => fast.post(spec, step, eligible).unwrap(),
                    };
                    if let (
                        PostOutcome::Queued { offloaded: x, .. },
                        PostOutcome::Queued { offloaded: y, .. },
                    ) = (&a, &b)
                    {
                        assert_eq!(x, y, "step {step}");
                    }
                    for (o, done) in [(a, &mut done_slow), (b, &mut done_fast)] {
                        if let PostOutcome::Matched { recv, msg, .. } = o {
                            done.push((recv, msg));
                        }
                    }
                } else {
                    let env = Envelope {
                        context_id: rng.below(2) as u32,
                        source: rng.below(12) as u32,
                        tag: rng.below(12) as u32,
                    };
                    let from_engine = rng.below(3) != 0;
                    let feed = |o: &mut Offload<u32, u32>| {
                        if from_engine {
                            o.handle_event(EngineEvent::Unexpected {
                                tag: layout.encode(env).unwrap(),
                                msg: step,
                                sync_request: false,
                            })
                            .unwrap();
                        } else {
                            o.arrive(env, step).unwrap();
                        }
                    };
                    feed(&mut slow);
                    match fast.take_matching_posted(&env, from_engine) {
                        Some((_, recv)) => {
                            fast_hits += 1;
                            done_fast.push((recv, step));
                        }
                        None => {
                            refusals += 1;
                            feed(&mut fast);
                        }
                    }
                }
                // Answer the engine's deletes at once (the entry was never
                // claimed), in both models alike.
                for (o, done) in [(&mut slow, &mut done_slow), (&mut fast, &mut done_fast)] {
                    loop {
                        if let Some(a) = o.poll_action() {
                            if let Action::Delete { handle, .. } = a {
                                o.handle_event(EngineEvent::Deleted {
                                    handle,
                                    sync_request: false,
                                })
                                .unwrap();
                            }
                        } else if let Some(c) = o.poll_completion() {
                            if let Completion::Matched { recv, msg, .. } = c {
                                done.push((recv, msg));
                            }
                        } else {
                            break;
                        }
                    }
                }
                assert_eq!(done_fast, done_slow, "step {step}");
                assert_eq!(fast.count(), slow.count());
                assert_eq!(fast.posted_len(), slow.posted_len());
                assert_eq!(fast.unexpected_len(), slow.unexpected_len());
                assert_eq!(fast.engine_len(), slow.engine_len());
            }
            assert_eq!(fast.stats(), slow.stats());
        }
        assert!(
            fast_hits > 100 && refusals > 100 && soft_posts > 100,
            "{fast_hits} hits, {refusals} refusals, {soft_posts} software posts"
        );
    }
}
