//! Two-sided messaging over the header rings and the prepost rings: the
//! MP_Lite model, with matching and the prepost policy from tm-match.
//!
//! # Rooms
//!
//! [`Endpoint`] is one type whose methods are spread over files by
//! concern, each with its own `impl Endpoint` block:
//!
//! | file | concern |
//! |---|---|
//! | `mod.rs` | the public types, the endpoint's state (every field documented), construction, accessors |
//! | `wire.rs` | the header format: [`Kind`], [`Flags`], building and reading headers |
//! | `send.rs` | the send API and the sends that complete inside their call |
//! | `reply.rs` | which way a send of a middle size goes (a reply in a ping-pong, traffic both ways) |
//! | `outbound.rs` | the general send path: requests, local queues, chunked sends, CMA rendezvous, prepost-direct writes |
//! | `eager.rs` | eager blocks: copies in and out, release flags, prefetch hints, eager pressure |
//! | `fragments.rs` | pipelined and fragmented messages: chunks out, reassembly, binding to a receive |
//! | `progress.rs` | the progress pass, blocking and liveness |
//! | `matching.rs` | feeding the matching model (tm-match) and executing what comes out |
//! | `recv.rs` | the receive API and the waits |
//! | `direct.rs` | receive fast paths: a message taken from the front of its ring |
//! | `deferred.rs` | deferred receives and their in-place consumers |
//! | `deliver.rs` | delivering a matched message into a buffer; the CMA reads left to the end of a pass |
//! | `split.rs` | split CMA copies (the sender helps the receiver copy) |
//! | `control.rs` | FIN and ACK headers |
//! | `probe.rs` | probes, matched probes, receive cancel |
//! | `completion.rs` | the completion feed, send completion and waits |
//! | `requests.rs` | the request types and tables |
//!
//! # Method taxonomy
//!
//! Names follow one scheme, after quinn-proto's (`handle_*` for input,
//! `poll_*` for output):
//!
//! - **Public methods** are the API an upper layer calls; their names are
//!   MPI's (`send`, `isend`, `irecv`, `wait`, `probe`, `cancel_recv`, ...).
//!   A `*_now` variant completes inside the call or does nothing; an
//!   `*_or_done` / `*_or_start` variant returns a [`Started`].
//! - **`handle_*`** takes one input and updates the state: a header taken
//!   from a ring ([`Endpoint::handle_header`]), a FIN or an ACK
//!   ([`Endpoint::handle_fin`], [`Endpoint::handle_ack`]), a message handed
//!   to the matching model ([`Endpoint::handle_arrival`]), one completion or
//!   one action the model emitted ([`Endpoint::handle_completion`],
//!   [`Endpoint::handle_action`]).
//! - **`poll_*`** looks for what is waiting, without blocking, and acts on
//!   it: the model's pending output ([`Endpoint::poll_matching`],
//!   [`Endpoint::poll_actions`]), the preposts senders completed
//!   ([`Endpoint::poll_engine`]), the headers waiting in the rings
//!   ([`Endpoint::poll_rings`], and a blocked receive's quick looks
//!   [`Endpoint::poll_direct`], [`Endpoint::poll_one`]).
//! - **`take_*`** removes one thing its caller then owns: a message from
//!   the front of a ring ([`Endpoint::take_now`], [`Endpoint::take_front`]),
//!   a stored unexpected message, a chunk, a completed request.
//! - **`send_*`, `publish_*`, `enqueue*`** put headers towards a peer;
//!   **`deliver*`, `copy_*`, `read_*`** move payload bytes into a receive
//!   buffer; **`finish_*`** record a request's completion.
//! - [`Endpoint::block`] is the one loop that waits: every blocking call
//!   runs its step (a progress pass and a check) through it, with the
//!   liveness checks.
//!
//! # Paths
//!
//! | size | path | what happens |
//! |---|---|---|
//! | > 40 B, a trusted matching prepost (needs CMA) | prepost-direct | the sender claims the receiver's advertised receive, `process_vm_writev`s into the receive buffer and marks the entry done; no header, no copy |
//! | ≤ 40 B | inline | payload in the header slot; one cache line moves |
//! | 41 B – `TMX_SHMEM_TUNE=inline_ext` (512 B), room in the ring, nothing held for that peer, not synchronous | inline with continuation slots ([`Kind::InlineExt`]) | the first 40 bytes in the header slot, the rest in the following ring slots (60 bytes each), written before the header is published; a blocked receive copies them straight out of the ring; no eager block, no release flag |
//! | ≤ `TMX_SHMEM_TUNE=pipeline_min` (and ≤ eager area − 64 B) | buffered (eager) | sender copies into its eager area, header carries the offset; receiver gets (copies out) and raises the block's release flag; the sender reclaims it |
//! | > `TMX_SHMEM_TUNE=pipeline_min`, ≤ eager area − 64 B, not CMA | pipelined | consecutive [`Kind::Frag`] chunks of `TMX_SHMEM_TUNE=pipeline_chunk` bytes, each published as soon as it is copied (reclaiming released blocks first, so they stay in cache); the receiver copies chunk *k* while the sender copies *k* + 1. A chunk the receiver cannot place yet stays in the sender's eager area (copied out only under eager pressure); once the message is bound to match the blocked [`Endpoint::recv`] or a posted [`Endpoint::irecv`] (see below) chunks go straight into its buffer; a message that arrived whole is copied once, from the sender's area, by the receive that matches it. The send completes when its last chunk is published (chunks that do not fit yet are published by progress; a blocking `send` publishes them from its own buffer) |
//! | > `TMX_SHMEM_TUNE=cma_threshold`, or larger than the eager area, or ≥ 32 KiB when the eager area is full or sends to that peer are held locally and the message would be copied aside (eager-sized, or pipelined from a borrowed buffer of a nonblocking send), or a reply above `TMX_SHMEM_TUNE=cma_reply` (6 KiB), or above `TMX_SHMEM_TUNE=cma_duplex` (6 KiB) while messages flow both ways ([`Endpoint::duplex`]); CMA available | CMA | header carries the sender's address; the receiver `process_vm_readv`s into the user buffer (the messages of one sender that a progress pass matched to posted receives with buffers of their own in one call, [`Endpoint::read_late`]) and returns a FIN; the send request stays pending (its buffer kept) until the FIN |
//! | larger than the eager area, no CMA | fragments | the pipelined path with chunks of at most ¼ of the eager area; the send request stays pending and [`Endpoint::progress`] publishes the next chunks as eager space frees |
//! | any, `dest` = this rank | self | a private copy handed to the matcher as an arrived message (no ring) |
//!
//! # Completion and ordering
//!
//! - Sends are nonblocking underneath ([`Endpoint::isend`],
//!   [`Endpoint::isend_borrowed`]): an inline, eager or self send completes
//!   at once (the data is in a published slot, in the eager area, in a local
//!   queue or in a private copy); a CMA send completes at the receiver's
//!   FIN; a fragmented send once its last fragment is published.
//!   [`Endpoint::send`] is such a send plus [`Endpoint::wait_send`]: it
//!   returns when the user buffer may be reused.
//! - **Synchronous mode** ([`Endpoint::ssend`], [`SendMode::Synchronous`])
//!   completes only once the receiver matched the message: a prepost-direct
//!   write is matched by construction; a CMA message read at match time
//!   answers with a FIN carrying [`Flags::MATCHED`]; every other synchronous
//!   message (never inline: it goes eager, with its send id in `ext[8..16]`)
//!   carries [`Flags::SYNC`] and the receiver sends [`Kind::Ack`] when a
//!   receive or a matched probe takes it (a CMA message pulled aside before
//!   its match is acknowledged the same way at the match).
//! - **Truncation** is not an error: a receive writes
//!   `min(msg_len, buffer length)` bytes, never more, consumes the message
//!   and reports both lengths in its [`Status`].
//! - Each user request (send or receive) is reported once by
//!   [`Endpoint::take_completed`] when it completes, unless it was handed
//!   to a waiter first; [`Endpoint::take_finished`] takes the same
//!   requests together with what their waits would return.
//! - For an upper layer with its own requests, [`Endpoint::isend_or_done`],
//!   [`Endpoint::irecv_or_done`] and [`Endpoint::send_or_start`] finish an
//!   operation that completes inside the call (inline, eager,
//!   prepost-direct or self send; a receive that matches a message already
//!   arrived) right there: nothing is recorded, nothing is reported later.
//! - A receive buffer that a sender may be writing into (claimed prepost) is
//!   never handed back or freed before its DONE; dropping an endpoint with
//!   such a request pending leaks that buffer rather than freeing it.
//! - Per ordered pair, messages are delivered in send order: the ring is FIFO,
//!   and once anything is queued locally for a peer, later sends to that peer
//!   queue behind it (backpressure never reorders and never drops).
//! - A fragmented or pipelined message is handed to the matcher when its
//!   last chunk arrives (per-pair order: its chunks are consecutive in the
//!   ring). Its chunks are copied straight into a receive's buffer only
//!   when that receive is the oldest posted one that matches the message,
//!   names the sender, is not advertised as a prepost, and is the blocked
//!   [`Endpoint::recv`]'s or an [`Endpoint::irecv`]'s (owned buffer): then,
//!   since later receives are younger, nothing else from that sender comes
//!   first and [`Endpoint::cancel_recv`] refuses such a receive, the
//!   matcher is bound to give the message to it, and a receive never sees
//!   bytes of a message it does not get. Otherwise the chunks wait in the
//!   sender's eager area.
//! - Matching is tm-match's [`Offload`] model over its exact matcher: a
//!   receive ([`Endpoint::recv`], [`Endpoint::irecv`]) is posted there
//!   (taking the earliest-arrived matching unexpected message if there is
//!   one), and every message from a header ring is handed to it in ring
//!   order, so MPI's rules hold exactly (`ANY_SOURCE`/`ANY_TAG`,
//!   non-overtaking per source and context) at O(1) expected cost per
//!   operation whatever the queue depth.
//! - **Receive fast paths**, each equivalent to that rule and each decided
//!   by the model (no match decision is made here): a blocking receive
//!   that can never be preposted ([`Endpoint::try_recv`], and
//!   [`Endpoint::recv`] below `TMX_SHMEM_TUNE=prepost_min` into a buffer of at
//!   most `TMX_SHMEM_TUNE=pipeline_min`) is not posted while it polls; it looks
//!   at the next header of its source's ring (round-robin for
//!   `ANY_SOURCE`) and offers it to the model, which lets it take an
//!   inline or eager message straight into its buffer when nothing posted,
//!   deferred, queued or parked comes first ([`Offload::offer_unposted`],
//!   [`Offload::consume_arrival`]); anything else in the ring, or a
//!   matching message of another kind (which then blocks later ones for
//!   that call), goes through the model as usual. An idle look runs the
//!   full progress pass every 8th time (at once if this rank holds sends or
//!   owes copies). An arrival that completes a posted software receive goes
//!   straight into it ([`Offload::take_matching_posted`]); deferred
//!   receives take their messages from the front of the ring
//!   ([`Offload::take_deferred`], see [`Endpoint::irecv_or_done`]).
//!
//! # The prepost protocol
//!
//! The per-sender prepost rings are the offload "engine" (one per sender,
//! all driven by one [`Offload`] model with `any_source = false`):
//!
//! - **Which receives are preposted** is the model's decision: an exact
//!   source, no older receive kept in software that could match the same
//!   message (so an `ANY_SOURCE` receive blocks every later overlapping
//!   prepost), room, a tag the layout carries; plus ours: CMA available, a
//!   buffer larger than an inline payload, a free slot in that sender's
//!   prepost ring, and a buffer that stays put until completion (`recv`,
//!   `irecv`; never `try_recv`). `Action::Add { entry, count }` posts
//!   `(tag, mask, count, buffer address, capacity)` in the ring.
//! - **The sender** (more than 40 bytes, nothing queued locally for that
//!   peer) is the engine of the receiver's model: it scans the ring in
//!   posting order for the first entry whose tag and mask match its
//!   message (tm-match's [`EngineScan`]), uses it only if it is large
//!   enough, and claims it only if the receiver's phase says `s == h` (see
//!   [`crate::prepost::Phase`]); then it CMA-writes the data and stores
//!   DONE with `length | tag << 32`. A matching entry that is not trusted is
//!   an *ignored prepost*; the message is buffered as usual.
//! - **Every message through a header ring** is counted in the receiver's
//!   phase `h` just before its header is published ([`Flags::COUNTED`]; the
//!   count is the sender's own counter in that ring's control block, and
//!   `h` is the sum over the senders) and
//!   handed to the model as `EngineEvent::Unexpected`; the model's 16-bit
//!   counter of processed ones is what every add, delete and sync stores in
//!   `s`. This is exactly the TM-SRQ phase rule, so a prepost that crossed a
//!   buffered send in flight (the gap) stays untrusted until the receiver
//!   has processed that send and synced.
//! - **Withdraw.** When a message from a ring matches a preposted receive
//!   in software, the model emits `Delete`: the receiver withdraws the
//!   entry with a CAS; `Withdrawn` → `Deleted` (the match completes in
//!   software), claimed or done → the sender's `Matched` plus
//!   `DeleteFailed`, and the message is matched again. Exactly one side
//!   wins, and a claimed entry's buffer is never released before DONE.
//!
//! # Blocking and liveness
//!
//! Every blocking call (a receive, a probe, a send or `wait_send` that waits,
//! [`Endpoint::flush`], [`Endpoint::finalize`]) runs [`Endpoint::progress`],
//! which drains all inbound rings into a local queue (so two ranks flooding
//! each other both finish), pushes locally queued sends, and reclaims eager
//! buffers. A rank waiting for a CMA send's FIN ([`Endpoint::wait_send`],
//! or polling it with [`Endpoint::test_send`]) also pulls crossed CMA
//! messages into private memory and returns their FINs, so ranks that
//! rendezvous-send to each other before receiving finish too. Every
//! `TMX_SHMEM_LIVENESS_MS` it checks that the peers it waits for are alive,
//! and returns [`Error::PeerDied`] instead of hanging.

mod cancel;
mod completion;
mod control;
mod deferred;
mod deliver;
mod direct;
mod eager;
mod fragments;
mod matching;
mod outbound;
mod probe;
mod progress;
mod recv;
mod reply;
mod requests;
mod send;
mod split;
mod wire;

use deferred::*;
use direct::*;
use eager::*;
use fragments::*;
use matching::*;
use outbound::*;
use progress::*;
use requests::*;
use split::*;
use wire::*;
pub use wire::{Flags, Kind};

use crate::counters::Counters;
use crate::eager::EagerArea;
use crate::error::{Error, Result};
use crate::idmap::{IdMap, IdTable, KeySlab};
use crate::node::{CmaStatus, Node};
use crate::prefetch;
use crate::prepost::{Claimer, PostState, Poster, Prepost, Withdraw};
use crate::ring::{
    ext_slots, Consumer, Header, HeaderFields, InlineFields, Outbox, RingRef, Sent, SplitOffer,
    SplitPoll, INLINE_MAX, SPLIT_IDLE, SPLIT_OFFERED,
};
use crate::segment::{ArrivalWatch, Segment};
use core::sync::atomic::{AtomicU32, Ordering};
use std::collections::VecDeque;
use std::time::Instant;
use tm_match::{
    Completion, EngineEvent, EngineScan, Offload, OffloadConfig, PostOutcome, RecvId, Unposted,
};
use tm_proto::{Envelope, MatchSpec, Source, TagLayout};

/// The prepost protocol is used only while the counted messages that can be
/// in flight to one receiver (one full ring per sender) stay below half the
/// 16-bit phase window, so that `s == h` is never a wrap-around accident.
const PHASE_WINDOW: u64 = 1 << 15;

/// A consumer of a deferred receive's payload, read where it lies in the
/// sender's eager block ([`Endpoint::irecv_or_done_in_place`]): called at
/// most once, before the block is released; it must not keep the slice.
pub type InPlace = Box<dyn FnMut(&[u8]) + Send>;

/// How an operation that may complete inside its call came out
/// ([`Endpoint::isend_or_done`], [`Endpoint::irecv_or_done`],
/// [`Endpoint::irecv_or_done_in_place`], [`Endpoint::send_or_start`]).
#[derive(Debug)]
#[must_use = "a pending request must be completed (wait, test, take_finished)"]
pub enum Started<R, D> {
    /// Started and not complete: the request, exactly as the plain call
    /// ([`Endpoint::isend`], [`Endpoint::irecv`], ...) returns it.
    Pending(R),
    /// Completed inside the call: nothing is recorded and nothing will be
    /// reported later; `D` is what the operation hands back.
    Done(D),
}

impl<R, D> Started<R, D> {
    /// Whether the operation completed inside the call.
    pub fn is_done(&self) -> bool {
        matches!(self, Started::Done(_))
    }

    /// Whether the operation is pending (a request to complete).
    pub fn is_pending(&self) -> bool {
        matches!(self, Started::Pending(_))
    }

    /// The request, if the operation is pending.
    pub fn pending(self) -> Option<R> {
        match self {
            Started::Pending(r) => Some(r),
            Started::Done(_) => None,
        }
    }

    /// What the operation handed back, if it completed inside the call.
    pub fn done(self) -> Option<D> {
        match self {
            Started::Pending(_) => None,
            Started::Done(d) => Some(d),
        }
    }
}

/// What a receive that completed inside its call hands back
/// ([`Started::Done`] of [`Endpoint::irecv_or_done`]): the result
/// [`Endpoint::wait`] would give, and the buffer.
pub type RecvDone = (Result<Status>, Vec<u8>);

/// A receive request finished, as [`Endpoint::take_finished`] hands it
/// over: what [`Endpoint::wait`] would return for it, in a compact form
/// (64 bytes: the rare error is boxed, so that the common entry is a few
/// plain moves).
#[derive(Debug)]
pub struct RecvFinished {
    /// The request's id ([`RecvRequest::id`]).
    pub id: u64,
    /// Its status, or the error it failed with (a dead peer).
    pub result: core::result::Result<Status, Box<Error>>,
    /// Its buffer (on an error, whatever it holds: [`Endpoint::wait`]
    /// drops it).
    pub buf: Vec<u8>,
}

impl RecvFinished {
    /// The entry as [`Endpoint::wait`] would return it.
    pub fn into_result(self) -> Result<(Status, Vec<u8>)> {
        match self.result {
            Ok(st) => Ok((st, self.buf)),
            Err(e) => Err(*e),
        }
    }
}

/// What a completed receive matched (or what a probe found).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// The sender's local rank.
    pub source: u32,
    /// The message tag.
    pub tag: u32,
    /// The context id.
    pub context: u32,
    /// Bytes delivered into the buffer: `min(msg_len, buffer length)` (for a
    /// probe, the message length).
    pub len: usize,
    /// Bytes the sender sent; `msg_len > len` means the message was
    /// truncated (the receive consumed it and wrote exactly `len` bytes).
    pub msg_len: usize,
    /// The receive was cancelled ([`Endpoint::cancel_recv`]): no message,
    /// nothing written, the other fields are zero.
    pub cancelled: bool,
}

impl Status {
    /// Whether the message was longer than the receive buffer (MPI maps it
    /// to `MPI_ERR_TRUNCATE`).
    pub fn truncated(&self) -> bool {
        self.msg_len > self.len
    }

    fn cancelled() -> Self {
        Status {
            cancelled: true,
            ..Status::default()
        }
    }
}

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendMode {
    /// Completes once the buffer may be reused (inline/eager copy, or the
    /// receiver's FIN for CMA).
    #[default]
    Standard,
    /// Completes only once the receiver has matched the message
    /// (`MPI_Ssend`).
    Synchronous,
}

/// A nonblocking send started by [`Endpoint::isend`] or
/// [`Endpoint::isend_borrowed`]; complete it with [`Endpoint::wait_send`]
/// (or watch it with [`Endpoint::test_send`] / [`Endpoint::take_completed`]).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a send request must be waited for"]
pub struct SendRequest(u64);

impl SendRequest {
    /// The request's id (unique across send and receive requests of this
    /// endpoint; what [`Endpoint::take_completed`] reports).
    pub fn id(&self) -> u64 {
        self.0
    }

    /// The request whose [`SendRequest::id`] is `id`, for an upper layer
    /// that keeps ids rather than handles (a table of operations over
    /// several transports). An id that names no send of the endpoint is
    /// refused by the calls that take the request
    /// ([`Error::InvalidArgument`]).
    pub fn from_id(id: u64) -> Self {
        SendRequest(id)
    }
}

/// A message removed from matching by [`Endpoint::improbe`] /
/// [`Endpoint::mprobe`]; receive it with [`Endpoint::mrecv`] or
/// [`Endpoint::imrecv`].
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a matched message must be received (mrecv/imrecv)"]
pub struct Message(u64);

#[derive(Debug)]
struct Peer {
    /// Our header ring into this peer (its producer side), with the
    /// headers held locally while the ring is full.
    outbox: Outbox,
    /// This peer's header ring into us (its consumer side).
    inbox: Consumer,
    /// Sends to this peer held back for eager-area space (and everything
    /// sent to it after them, in order), and the unsent chunks of its
    /// pipelined or fragmented sends.
    staged: VecDeque<Staged>,
    /// A fragmented (pipelined) message from this peer being received.
    assembly: Option<Assembly>,
    /// Our side of the prepost ring on which we advertise receives to it.
    poster: Poster,
    /// Our side of the prepost ring on which it advertises receives to us.
    claimer: Claimer,
    /// `inbox.consumed()` at the last send that asked
    /// [`Endpoint::ask_reply`]: a send finding it changed answers a
    /// message taken from this peer since.
    reply_mark: u64,
    /// Asks of [`Endpoint::ask_reply`] since `reply_mark` last moved.
    reply_run: u32,
    /// Control headers (FIN, ACK) taken from this peer's ring: the rest of
    /// the ring's traffic is messages.
    control_in: u64,
    /// Control headers (FIN, ACK) published to this peer.
    control_out: u64,
    /// [`Endpoint::duplex`]'s count of messages taken from this peer,
    /// decayed (halved with `duplex_out` once together they pass
    /// [`DUPLEX_SPAN`]).
    duplex_in: u64,
    /// [`Endpoint::duplex`]'s count of messages sent to this peer, decayed
    /// with `duplex_in`.
    duplex_out: u64,
    /// The totals (messages taken, messages sent) [`Endpoint::duplex`] last
    /// looked at.
    duplex_seen: (u64, u64),
    /// [`Endpoint::duplex`]'s last answer (traced when it changes).
    duplex_was: bool,
}

/// A nonblocking receive started by [`Endpoint::irecv`]; complete it with
/// [`Endpoint::wait`] (a request that is never waited for keeps its buffer
/// and its place in the posted queue until the endpoint is dropped).
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a receive request must be waited for"]
pub struct RecvRequest(u64);

impl RecvRequest {
    /// The request's id (unique across send and receive requests of this
    /// endpoint; what [`Endpoint::take_completed`] reports).
    pub fn id(&self) -> u64 {
        self.0
    }

    /// The request whose [`RecvRequest::id`] is `id`, for an upper layer
    /// that keeps ids rather than handles (a table of operations over
    /// several transports). An id that names no receive of the endpoint
    /// is refused by the calls that take the request
    /// ([`Error::InvalidArgument`]).
    pub fn from_id(id: u64) -> Self {
        RecvRequest(id)
    }
}

// The ADI keeps an endpoint in a `Mutex` shared across threads.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Endpoint>();
};

/// A messaging endpoint: a [`Node`] plus rings, queues and counters.
#[derive(Debug)]
pub struct Endpoint {
    /// The node: segment, one-sided API, configuration, CMA.
    node: Node,
    /// Per-peer ring state, indexed by local rank (ours included, unused).
    peers: Vec<Peer>,
    /// MPI matching and the prepost policy (tm-match's offload model over
    /// its exact matcher): posted receives and unexpected messages, whose
    /// messages are keys into `unexpected`.
    matching: Offload<u64, Msg>,
    /// Receive requests (by id) and the receives advertised to senders.
    requests: Requests,
    /// Unexpected messages by key (the matcher keeps their order).
    unexpected: KeySlab<Unexpected>,
    /// Request ids (sends and receives share the sequence).
    next_id: u64,
    /// Send requests not yet complete, and completed user ones not waited for.
    sends: Sends,
    /// Completion feed: `(id, is a send)` in completion order. Some may
    /// have been waited for since: an entry is reported only if its request
    /// is still held with [`Fed::Queued`]; `feed_queued` counts those.
    feed: Vec<(u64, bool)>,
    /// Entries of `feed` whose request is still held with [`Fed::Queued`].
    feed_queued: usize,
    /// Deferred receives completed by [`Endpoint::take_deferred`] while the
    /// feed was empty, already taken out of the request table in the form
    /// [`Endpoint::take_finished`] hands over (which takes the whole list
    /// by a swap): draining a window of deferred receives then costs no
    /// table update, feed entry or second lookup per receive. Every entry
    /// completed before every receive in `feed`. The calls that look a
    /// receive up by id (`wait`, `test`, `cancel_recv`, `take_completed`)
    /// first put these back as ordinary completed requests
    /// ([`Endpoint::refile_finished`]).
    finished: Vec<RecvFinished>,
    /// How envelopes become the 64-bit tags of the prepost entries.
    layout: TagLayout,
    /// `layout`'s largest context id, rank and tag: what
    /// [`Endpoint::recv_arrived`] checks a counted message against
    /// (`TagLayout::encode` would accept it), three comparisons per message.
    layout_max: (u32, u32, u32),
    /// The prepost protocol is on (config, CMA, phase window).
    prepost_on: bool,
    /// Largest message sent inline with continuation slots
    /// (`TMX_SHMEM_TUNE=inline_ext`, capped to a quarter of the ring; at most
    /// `INLINE_MAX` turns it off).
    inline_ext_max: usize,
    /// Largest message sent inline as a reply (`TMX_SHMEM_TUNE=inline_reply`,
    /// capped to half the ring; at most `inline_ext_max` turns it off).
    inline_reply_max: usize,
    /// Our eager area's allocator (the blocks our buffered sends copy into).
    eager: EagerArea,
    /// Unexpected eager messages still in their sender's eager area.
    uncopied_eager: usize,
    /// Answers to our [`Kind::Cancel`]s: `(send id, withdrawn)`.
    cancel_answers: Vec<(u64, bool)>,
    /// Consecutive `try_recv` quick looks that found nothing.
    idle_looks: u32,
    /// `TMX_SHMEM_TUNE=defer_recv`: nonblocking receives may be deferred (kept
    /// in the matching model's deferred queue, see
    /// [`Endpoint::irecv_or_done`] and [`Offload::defer`]).
    defer_enabled: bool,
    /// Consumers of deferred receives made by
    /// [`Endpoint::irecv_or_done_in_place`], oldest first (keyed by a
    /// subsequence of the model's deferred queue; entries older than its
    /// front are stale and dropped).
    in_place_consumers: VecDeque<PayloadConsumer>,
    /// CMA messages matched by a nonblocking receive as it was posted (or
    /// by an earlier receive while it was made, see `defer_cma_of_posted`), and
    /// by posted receives in a progress pass (`batch_cma_now`), oldest first,
    /// whose single copy is left to the next progress pass (or the end of
    /// this one) ([`Endpoint::copy_late`]): the receive stays pending
    /// until then.
    /// Copying them inside `irecv` kept a rank that had fallen behind
    /// from posting its own sends until it had read every message of its
    /// peer's window, so the two ranks copied in turn instead of at once.
    late_cma: VecDeque<(u64, Unexpected)>,
    /// Our CMA sends whose receivers may offer to share the copy
    /// (`TMX_SHMEM_TUNE=cma_split`; see [`crate::ring::SplitWords`]), by
    /// request id: the destination and the data (kept by the request
    /// until the FIN, which the receiver sends only once the hand-off is
    /// over).
    split_sends: IdMap<u64, (u32, usize, usize)>,
    /// How many of `split_sends` go to each peer.
    split_sends_to: Vec<u32>,
    /// We marked some ring `READY` since the last
    /// [`Endpoint::unready_splits`].
    splits_marked_ready: bool,
    /// Set around the post of a nonblocking receive: a CMA message it
    /// matches at once joins `late_cma` instead of being copied.
    defer_cma_at_post: bool,
    /// Set while a nonblocking receive hands what has arrived to the
    /// model before it is posted ([`Endpoint::drain_source`]): a CMA
    /// message that matches an earlier receive the user holds (pending,
    /// with a buffer of its own) joins `late_cma` too, for the same reason.
    defer_cma_of_posted: bool,
    /// Set while a progress pass reads its rings: a CMA message that
    /// matches a posted receive with a buffer of its own joins `late_cma`, so
    /// that the pass reads all of them from one sender in one
    /// `process_vm_readv` call ([`Endpoint::read_late`]).
    batch_cma_now: bool,
    /// `TMX_SHMEM_TUNE=cma_batch`: whether progress passes read their CMA
    /// messages in batches (`batch_cma_now`).
    cma_batch_enabled: bool,
    /// Set by [`Endpoint::copy_late`] around the delivery of a late CMA
    /// message [`Endpoint::read_late`] already read: `deliver` sends its
    /// FIN without reading it again.
    cma_already_read: bool,
    /// Progress passes in a row with nothing to do while unexpected
    /// messages were stored (see [`Endpoint::idle_with_unexpected`]).
    idle_passes: u32,
    /// The ring an `ANY_SOURCE` quick look starts at.
    any_source_next: u32,
    /// Our eager-pressure flag is raised.
    pressure_raised: bool,
    /// The request of the blocked [`Endpoint::recv`] call, while it waits:
    /// a pipelined message bound to match it is copied straight into its
    /// buffer.
    blocked_recv: Option<u64>,
    /// Set by a blocking send around its `start_send`: chunks that cannot
    /// go at once are published later from the caller's buffer.
    lend_caller_buffer: bool,
    /// `(address, length)` of the buffers messages received in place were
    /// written into, until delivered (checked then; normally at most one,
    /// delivered as soon as its last chunk arrives).
    in_place_buffers: Vec<(usize, usize)>,
    /// Fragment headers of arrived fragmented messages whose data is still
    /// in the sender's eager area ([`Flags::HELD`]), by `(source, offset of
    /// the first fragment)` (unique while the block is not released).
    held_fragments: std::collections::HashMap<(u32, u64), Vec<Header>>,
    /// Protocol counters (printed at finalize).
    counters: Counters,
    /// Backpressure events and index re-reads of traffic that does not
    /// count (see [`Endpoint::restore_counters`]).
    uncounted_ring_events: (u64, u64),
    /// What [`Endpoint::calibrate_inline_reply`] decided, if it ran.
    reply_calibration: Option<crate::reply_calibrate::ReplyCalibration>,
}

impl Endpoint {
    /// An endpoint over an initialised node.
    pub fn new(node: Node) -> Self {
        let n = node.size();
        let batch = u64::from(node.config().publish_batch);
        let eager = EagerArea::new(
            node.config().eager_bytes,
            crate::copy::movsb_min(node.config().movsb_min),
        );
        let layout = TagLayout::DEFAULT;
        let node_cfg_inline_ext = node.config().inline_ext;
        let node_cfg_inline_reply = node.config().inline_reply;
        let node_cfg_ring_slots = node.config().ring_slots;
        let prepost = node.config().prepost
            && *node.cma_status() == CmaStatus::Available
            && u64::from(n) * u64::from(node.config().ring_slots) < PHASE_WINDOW;
        tracing::info!(prepost, "shmem endpoint: prepost protocol");
        let defer_recv = node.config().defer_recv;
        let node_cfg_cma_batch = node.config().cma_batch;
        Endpoint {
            peers: (0..n)
                .map(|_| Peer {
                    outbox: Outbox::new(),
                    inbox: Consumer::new(batch),
                    staged: VecDeque::new(),
                    assembly: None,
                    poster: Poster::new(),
                    claimer: Claimer::new(),
                    reply_mark: 0,
                    reply_run: 0,
                    control_in: 0,
                    control_out: 0,
                    duplex_in: 0,
                    duplex_out: 0,
                    duplex_seen: (0, 0),
                    duplex_was: false,
                })
                .collect(),
            matching: Offload::new(OffloadConfig::new(
                layout,
                (node.config().prepost_slots as usize).saturating_mul(n as usize),
            ))
            .expect("the default sync interval (2^14) is valid"),
            requests: Requests::default(),
            prepost_on: prepost,
            layout,
            layout_max: (layout.max_context_id(), layout.max_rank(), layout.max_tag()),
            node,
            unexpected: KeySlab::default(),
            next_id: 1,
            sends: Sends::default(),
            feed: Vec::new(),
            feed_queued: 0,
            finished: Vec::new(),
            inline_ext_max: ext_max(node_cfg_inline_ext, node_cfg_ring_slots),
            inline_reply_max: reply_max(node_cfg_inline_reply, node_cfg_ring_slots),
            eager,
            uncopied_eager: 0,
            cancel_answers: Vec::new(),
            idle_looks: 0,
            in_place_consumers: VecDeque::new(),
            late_cma: VecDeque::new(),
            split_sends: IdMap::default(),
            split_sends_to: vec![0; n as usize],
            splits_marked_ready: false,
            defer_cma_at_post: false,
            defer_cma_of_posted: false,
            batch_cma_now: false,
            cma_batch_enabled: node_cfg_cma_batch,
            cma_already_read: false,
            idle_passes: 0,
            defer_enabled: defer_recv,
            any_source_next: 0,
            pressure_raised: false,
            blocked_recv: None,
            lend_caller_buffer: false,
            in_place_buffers: Vec::new(),
            held_fragments: std::collections::HashMap::new(),
            counters: Counters::default(),
            uncounted_ring_events: (0, 0),
            reply_calibration: None,
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
        c.backpressure_events = self
            .peers
            .iter()
            .map(|p| p.outbox.backpressure_events())
            .sum::<u64>()
            .saturating_sub(self.uncounted_ring_events.0);
        c.index_rereads = self
            .peers
            .iter()
            .map(|p| p.outbox.producer().rereads())
            .sum::<u64>()
            .saturating_sub(self.uncounted_ring_events.1);
        // Deferred receives the model moved into its posted queue (by
        // itself, or at our `post_deferred`) are posted receives too.
        c.posted_recvs += self.matching.stats().deferred_posted;
        c.deferred_recvs += self.matching.stats().deferred;
        c
    }

    /// Puts the counters back to `saved` (taken by [`Endpoint::counters`]
    /// before traffic that must not count, the inline reply calibration's).
    pub(crate) fn restore_counters(&mut self, saved: Counters) {
        let now = self.counters();
        self.uncounted_ring_events.0 +=
            now.backpressure_events - saved.backpressure_events.min(now.backpressure_events);
        self.uncounted_ring_events.1 +=
            now.index_rereads - saved.index_rereads.min(now.index_rereads);
        self.counters = saved;
        let stats = self.matching.stats();
        self.counters.posted_recvs = saved.posted_recvs.saturating_sub(stats.deferred_posted);
        self.counters.deferred_recvs = saved.deferred_recvs.saturating_sub(stats.deferred);
    }

    /// The inline-ext cap in bytes (`TMX_SHMEM_TUNE=inline_ext` as capped by the
    /// ring).
    pub(crate) fn ext_max(&self) -> usize {
        self.inline_ext_max
    }

    /// The inline reply cap in bytes now (`TMX_SHMEM_TUNE=inline_reply` as
    /// capped by the ring, or as the calibration lowered it).
    pub fn reply_cap(&self) -> usize {
        self.inline_reply_max
    }

    /// What [`Endpoint::calibrate_inline_reply`] decided (`None`: it did
    /// not run, or was cut short, and the configured cap stands).
    pub fn reply_calibration(&self) -> Option<&crate::reply_calibrate::ReplyCalibration> {
        self.reply_calibration.as_ref()
    }

    pub(crate) fn set_reply_calibration(&mut self, c: crate::reply_calibrate::ReplyCalibration) {
        self.reply_calibration = Some(c);
    }

    /// Sets the inline reply cap (0: no inline replies).
    pub(crate) fn set_reply_cap(&mut self, cap: usize) {
        self.inline_reply_max = cap;
    }

    /// Messages arrived and stored unexpected (no receive took them yet).
    #[doc(hidden)]
    pub fn unexpected_stored(&self) -> usize {
        self.unexpected.len()
    }

    /// Stored messages whose data still sits in their sender's eager area.
    #[doc(hidden)]
    pub fn uncopied_eager(&self) -> usize {
        self.uncopied_eager
    }

    /// Whether a progress pass now would only count an idle pass
    /// ([`Endpoint::quiet`]).
    #[doc(hidden)]
    pub fn idle_now(&mut self) -> bool {
        self.quiet()
    }

    /// Sends held locally (ring full or eager area full), over all peers.
    pub fn queued(&self) -> usize {
        self.peers
            .iter()
            .map(|p| p.outbox.pending() + p.staged.len())
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

    /// Whether a receive for `spec` into `capacity` bytes may ever be
    /// advertised to its sender (the prepost protocol is on, an exact
    /// other source, a buffer beyond inline size and at least
    /// `TMX_SHMEM_TUNE=prepost_min`); `post` adds a free slot in that sender's
    /// prepost ring and the model its own rules.
    fn advertisable(&self, spec: MatchSpec, capacity: usize) -> bool {
        self.prepost_on
            && matches!(spec.source, Source::Rank(src) if src != self.rank())
            && capacity > INLINE_MAX
            && capacity as u64 >= self.node.config().prepost_min
    }

    /// The liveness watch for a receive from `spec.source`.
    fn check_source(&self, spec: MatchSpec) -> Result<Watch> {
        match spec.source {
            Source::Rank(r) if r < self.size() => Ok(Watch::One(r)),
            Source::Rank(r) => Err(Error::BadPe {
                pe: r,
                size: self.size(),
            }),
            Source::Any => Ok(Watch::All),
        }
    }
}

#[cfg(test)]
mod tests;
