//! Two-sided messaging over the header rings and the prepost rings: the
//! MP_Lite model, with matching and the prepost policy from tm-match.
//!
//! # Paths
//!
//! | size | path | what happens |
//! |---|---|---|
//! | > 40 B, a trusted matching prepost (needs CMA) | prepost-direct | the sender claims the receiver's advertised receive, `process_vm_writev`s into the receive buffer and marks the entry done; no header, no copy |
//! | ≤ 40 B | inline | payload in the header slot; one cache line moves |
//! | 41 B – `TMX_SHMEM_INLINE_EXT` (512 B), room in the ring, nothing held for that peer, not synchronous | inline with continuation slots ([`KIND_INLINE_EXT`]) | the first 40 bytes in the header slot, the rest in the following ring slots (60 bytes each), written before the header is published; a blocked receive copies them straight out of the ring; no eager block, no release flag |
//! | ≤ `TMX_SHMEM_PIPELINE_MIN` (and ≤ eager area − 64 B) | buffered (eager) | sender copies into its eager area, header carries the offset; receiver gets (copies out) and raises the block's release flag; the sender reclaims it |
//! | > `TMX_SHMEM_PIPELINE_MIN`, ≤ eager area − 64 B, not CMA | pipelined | consecutive [`KIND_FRAG`] chunks of `TMX_SHMEM_PIPELINE_CHUNK` bytes, each published as soon as it is copied (reclaiming released blocks first, so they stay in cache); the receiver copies chunk *k* while the sender copies *k* + 1. A chunk the receiver cannot place yet stays in the sender's eager area (copied out only under eager pressure); once the message is bound to match the blocked [`Endpoint::recv`] or a posted [`Endpoint::irecv`] (see below) chunks go straight into its buffer; a message that arrived whole is copied once, from the sender's area, by the receive that matches it. The send completes when its last chunk is published (chunks that do not fit yet are published by progress; a blocking `send` publishes them from its own buffer) |
//! | > `TMX_SHMEM_CMA_THRESHOLD`, or larger than the eager area, or ≥ 32 KiB when the eager area is full or sends to that peer are held locally and the message would be copied aside (eager-sized, or pipelined from a borrowed buffer of a nonblocking send), or a reply above `TMX_SHMEM_CMA_REPLY` (6 KiB), or above `TMX_SHMEM_CMA_DUPLEX` (6 KiB) while messages flow both ways ([`Endpoint::duplex`]); CMA available | CMA | header carries the sender's address; the receiver `process_vm_readv`s into the user buffer (the messages of one sender that a progress pass matched to posted receives with buffers of their own in one call, [`Endpoint::read_late`]) and returns a FIN; the send request stays pending (its buffer kept) until the FIN |
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
//!   answers with a FIN carrying [`FLAG_MATCHED`]; every other synchronous
//!   message (never inline: it goes eager, with its send id in `ext[8..16]`)
//!   carries [`FLAG_SYNC`] and the receiver sends [`KIND_ACK`] when a
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
//! - **Receive fast paths**, each equivalent to that rule: a blocking
//!   receive that can never be preposted ([`Endpoint::try_recv`], and
//!   [`Endpoint::recv`] below `TMX_SHMEM_PREPOST_MIN` into a buffer of at
//!   most `TMX_SHMEM_PIPELINE_MIN`) is not posted while
//!   it polls; when nothing is posted, queued or parked it looks at the
//!   next header of its source's ring (round-robin for `ANY_SOURCE`) and
//!   takes an inline or eager message that matches straight into its
//!   buffer ([`Offload::consume_arrival`]); anything else in the ring, or a
//!   matching message of another kind (which then blocks later ones for
//!   that call), goes through the model as usual. An idle look runs the
//!   full progress pass every 8th time (at once if this rank holds sends or
//!   owes copies). An arrival that completes a posted software receive goes
//!   straight into it ([`Offload::take_matching_posted`]).
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
//!   peer) scans the ring in posting order for a matching entry large
//!   enough, and claims it only if the receiver's phase says `s == h` (see
//!   [`crate::prepost::Phase`]); then it CMA-writes the data and stores
//!   DONE with `length | tag << 32`. A matching entry that is not trusted is
//!   an *ignored prepost*; the message is buffered as usual.
//! - **Every message through a header ring** is counted in the receiver's
//!   phase `h` just before its header is published ([`FLAG_COUNTED`]; the
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
use tm_match::{Completion, EngineEvent, Offload, OffloadConfig, PostOutcome, RecvId};
use tm_proto::{Envelope, MatchSpec, Source, TagLayout};

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
/// Header kind: the receiver matched synchronous send `word` (sent for
/// [`FLAG_SYNC`] messages, except a CMA message read at match time, whose FIN
/// carries [`FLAG_MATCHED`] instead).
pub const KIND_ACK: u8 = 6;
/// Header kind: an inline message longer than one slot: its first 40 bytes
/// ride in the header (`word` + `ext`), the other `nbytes - 40` in the
/// following ring slots (continuation slots, 60 bytes each; see
/// [`crate::ring::Producer::try_push_ext`]). Up to `TMX_SHMEM_INLINE_EXT`
/// bytes, never synchronous.
pub const KIND_INLINE_EXT: u8 = 7;
/// Header kind: the sender asks to withdraw its unmatched send `word`
/// (`MPI_Cancel`); the receiver answers [`KIND_CANCELLED`].
pub const KIND_CANCEL: u8 = 8;
/// Header kind: the answer to [`KIND_CANCEL`] for send `word`:
/// [`FLAG_WITHDRAWN`] if the message was removed before any receive
/// matched it (it will never be received), none if it was matched.
pub const KIND_CANCELLED: u8 = 9;
/// Header flag: the first fragment of a fragmented message.
pub const FLAG_FIRST: u8 = 1;
/// [`KIND_CANCELLED`] flag: the message was withdrawn.
pub const FLAG_WITHDRAWN: u8 = 1;
/// Header flag: a synchronous-mode message; the receiver acknowledges its
/// match ([`KIND_ACK`]) quoting the send id in `ext[8..16]`.
pub const FLAG_SYNC: u8 = 4;
/// FIN flag: the receiver read the CMA message because a receive matched it
/// (so the FIN also acknowledges a synchronous send).
pub const FLAG_MATCHED: u8 = 8;
/// Header flag: the sender counted this message in the receiver's
/// [`Phase`](crate::prepost::Phase) before publishing it (an
/// engine-unexpected message of the prepost protocol).
pub const FLAG_COUNTED: u8 = 2;
/// Local marker on a reassembled fragmented message (never sent, cleared
/// from every arriving header): its payload was copied straight into the
/// buffer of the blocked receive it is bound to match.
const FLAG_IN_PLACE: u8 = 0x80;
/// On a CMA header: the sender may share the copy (`TMX_SHMEM_CMA_SPLIT`;
/// see [`crate::ring::SplitWords`]).
const FLAG_SPLIT: u8 = 0x10;
/// Local marker on a reassembled fragmented message (never sent): its
/// fragments are still in the sender's eager area, their headers in
/// `Endpoint::held` under `(source, first fragment's offset)`.
const FLAG_HELD: u8 = 0x40;

/// Prepost result word: the claimer's CMA write failed (no data).
const RESULT_FAILED: u64 = 1 << 63;
/// The prepost protocol is used only while the counted messages that can be
/// in flight to one receiver (one full ring per sender) stay below half the
/// 16-bit phase window, so that `s == h` is never a wrap-around accident.
const PHASE_WINDOW: u64 = 1 << 15;

/// Bytes before the data in an eager block (the release flag's cache line).
const EAGER_PREFIX: u64 = 64;
/// [`Endpoint::send_now_with`] fills messages of up to this many bytes on
/// the stack (they go inline, or are copied into an eager block).
const FILL_ON_STACK: usize = 256;
/// Smallest message that goes by CMA rendezvous instead of being copied
/// aside when the eager area is full (or sends to that peer are already
/// held locally): below it the extra copy is cheaper than the FIN round trip.
/// A pipelined message that needs no copy aside (an owned buffer, or a
/// blocking send's) never does: it waits in its request and goes chunk by
/// chunk as eager space frees, which keeps both ranks copying through
/// cache-resident chunks. Handing it to CMA instead (the receiver's
/// `process_vm_readv`, ~5 GB/s on the reference VM against ~20 GB/s for the
/// pipeline) cut the 256 KiB – 4 MiB bi-bandwidth of `cargo xtask bench
/// adi` to 55–75% (2026-11-22).
const STAGE_TO_CMA_MIN: u64 = 32 << 10;
/// Before each chunk of a pipelined message, every block in flight is
/// checked for release while there are at most this many (a cheap scan);
/// beyond, only the oldest ones are ([`EagerArea::reclaim_front`]).
const RECLAIM_SCAN: usize = 64;
/// Headers taken from one inbound ring per progress call.
const POLL_BUDGET: usize = 32;
/// [`Endpoint::duplex`] halves its counts of messages taken and sent once
/// together they pass this: it answers for about the last this many.
const DUPLEX_SPAN: u64 = 256;
/// [`Endpoint::duplex`] says no before it has seen this many messages
/// sent (the first sends of a stream follow the message that started
/// it).
const DUPLEX_MIN: u64 = 8;
/// Progress passes in a row with nothing to do after which unexpected CMA
/// messages of eager sizes are read aside ([`Endpoint::pull_unexpected_cma`]).
/// The adi stress test with replies by CMA from 129 B (thousands of
/// blocking sends waiting this long) takes 1.7–1.8 s with 512, 7.5–8.0 s
/// with 4096; `osu`'s ping-pong replies at 7,000 B and 8 KiB are never
/// read aside with 512.
const PULL_IDLE_PASSES: u32 = 512;
/// Most CMA messages [`Endpoint::read_late`] reads in one call.
const LATE_BATCH: usize = 64;
/// A spinning `try_recv` that finds its source's ring empty runs a full
/// progress pass only every this many times (unless it has local work).
const IDLE_FULL_PASS: u32 = 8;

/// A consumer of a deferred receive's payload, read where it lies in the
/// sender's eager block ([`Endpoint::irecv_or_done_in_place`]): called at
/// most once, before the block is released; it must not keep the slice.
pub type InPlace = Box<dyn FnMut(&[u8]) + Send>;

/// A deferred receive's key and its [`InPlace`] consumer.
struct PayloadConsumer(u64, InPlace);

impl core::fmt::Debug for PayloadConsumer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_tuple("PayloadConsumer")
            .field(&self.0)
            .finish_non_exhaustive()
    }
}

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
}

/// A message removed from matching by [`Endpoint::improbe`] /
/// [`Endpoint::mprobe`]; receive it with [`Endpoint::mrecv`] or
/// [`Endpoint::imrecv`].
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a matched message must be received (mrecv/imrecv)"]
pub struct Message(u64);

#[derive(Debug)]
enum Staged {
    /// Waiting for eager-area space; the data is held here and `hdr` is
    /// sent once it has a block.
    Data { hdr: Header, bytes: Vec<u8> },
    /// A header queued behind staged data (to keep order).
    Ready(Header),
    /// A pipelined message, or one larger than the eager area (no CMA),
    /// whose remaining chunks are published one by one as eager space and
    /// ring slots free (by [`Endpoint::progress`]); `off` bytes of the data
    /// are out; `bytes` says where the data is. `first`: the next chunk is
    /// the message's first (carries the envelope and [`FLAG_FIRST`]).
    Frag {
        id: u64,
        tmpl: Header,
        bytes: FragData,
        off: usize,
        first: bool,
    },
}

/// Where the data of a staged chunked send ([`Staged::Frag`]) is.
#[derive(Debug)]
enum FragData {
    /// The owned buffer of the send request.
    Owned,
    /// A private copy of what was left of a borrowed buffer.
    Copy(Vec<u8>),
    /// The borrowed buffer of the blocking [`Endpoint::send`] /
    /// [`Endpoint::ssend`] call that staged it: that call waits until the
    /// message is out, and turns this into a [`FragData::Copy`]
    /// ([`Endpoint::unlend`]) before it returns any other way.
    Lent { ptr: usize, len: usize },
}

/// A send request that has not completed, or a user request that completed
/// and waits for [`Endpoint::wait_send`].
#[derive(Debug)]
struct SendReq {
    dest: u32,
    /// The user's buffer ([`Endpoint::isend`]), handed back by `wait_send`.
    owned: Option<Vec<u8>>,
    /// Waiting for the receiver's FIN (CMA: it reads our buffer until then).
    fin: bool,
    /// Waiting for the receiver's match acknowledgement (synchronous mode).
    ack: bool,
    /// Fragments not all published yet.
    frags: bool,
    /// Created by the user (isend): its completion goes to the feed.
    user: bool,
    /// Where it stands in the completion feed.
    fed: Fed,
    /// Its wait failed while a live peer might still read the buffer: kept
    /// (buffer alive) until the FIN, then dropped silently.
    orphan: bool,
}

impl SendReq {
    fn done(&self) -> bool {
        !self.fin && !self.ack && !self.frags
    }
}

/// Where a user request stands in the completion feed
/// ([`Endpoint::take_completed`]). Kept in the request itself, so that
/// recording and reporting a completion costs no set operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Fed {
    /// Not complete, or not a user request.
    #[default]
    No,
    /// In the feed, not reported yet.
    Queued,
    /// Reported by `take_completed` (never again).
    Reported,
}

/// The send requests. Dropping it leaks (never frees) an owned buffer that
/// a receiver may still be reading by CMA (no FIN yet), so that the
/// receiver reads the data it was promised rather than reused memory.
#[derive(Debug, Default)]
struct Sends(IdMap<u64, SendReq>);

impl core::ops::Deref for Sends {
    type Target = IdMap<u64, SendReq>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl core::ops::DerefMut for Sends {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Sends {
    fn drop(&mut self) {
        for r in self.0.values_mut().filter(|r| r.fin) {
            if let Some(v) = r.owned.take() {
                core::mem::forget(v);
            }
        }
    }
}

#[derive(Debug)]
struct Peer {
    out: Outbox,
    inb: Consumer,
    staged: VecDeque<Staged>,
    /// A fragmented (pipelined) message from this peer being received.
    assembly: Option<Assembly>,
    /// Our side of the prepost ring on which we advertise receives to it.
    poster: Poster,
    /// Our side of the prepost ring on which it advertises receives to us.
    claimer: Claimer,
    /// `inb.consumed()` at the last send that asked
    /// [`Endpoint::ask_reply`]: a send finding it changed answers a
    /// message taken from this peer since.
    reply_mark: u64,
    /// Asks of [`Endpoint::ask_reply`] since `reply_mark` last moved.
    reply_run: u32,
    /// Control headers (FIN, ACK) taken from this peer's ring and
    /// published to it: the rest of each ring's traffic is messages.
    ctl_in: u64,
    ctl_out: u64,
    /// [`Endpoint::duplex`]'s view of the traffic with this peer: messages
    /// taken from it and sent to it, decayed (both halved once together
    /// they pass [`DUPLEX_SPAN`]), and the totals it last looked at.
    dx_in: u64,
    dx_out: u64,
    dx_seen: (u64, u64),
    /// [`Endpoint::duplex`]'s last answer (traced when it changes).
    dx_was: bool,
}

/// A fragmented or pipelined message being received from one peer. It
/// arrives (is handed to the matcher) with its last fragment, as a whole.
#[derive(Debug)]
struct Assembly {
    /// The first fragment's header: envelope, whole length, flags.
    hdr: Header,
    /// Bytes of the message received so far.
    got: usize,
    /// Where its fragments go.
    into: AsmTarget,
}

/// Where the fragments of a message being received go.
#[derive(Debug)]
enum AsmTarget {
    /// Left in the sender's eager area (these fragment headers, in order)
    /// until a receive is known: then copied once, straight into it. Copied
    /// out to a private buffer if the sender runs short of eager space.
    Held(Vec<Header>),
    /// A private buffer: the receive that matches it copies it once more.
    Private(Vec<u8>),
    /// Straight into the buffer (`ptr`, `cap` bytes) of receive request
    /// `key` (`owned`: an `irecv`'s buffer; otherwise the blocked
    /// [`Endpoint::recv`]'s), which the message is bound to match when its
    /// last fragment arrives (see [`Endpoint::bind_target`]).
    Bound {
        key: u64,
        ptr: usize,
        cap: usize,
        owned: bool,
    },
}

/// A message as the offload model holds it.
#[derive(Debug, Clone, Copy)]
enum Msg {
    /// Arrived through a header ring: key into `Endpoint::store`.
    Stored(u64),
    /// Written by the sender straight into a preposted receive buffer: the
    /// prepost result word (length | tag << 32, or `RESULT_FAILED`).
    Direct(u64),
}

/// What [`Endpoint::poll_direct`] found.
enum Quick {
    /// The receive's message, delivered.
    Taken(Result<Status>),
    /// A header that was something else (handled as a full pass would).
    Other,
    /// Nothing in the ring(s).
    Empty,
}

/// Where a receive request's data goes.
#[derive(Debug)]
enum ReqBuf {
    /// An [`Endpoint::irecv`] buffer, owned until the request completes.
    Owned(Vec<u8>),
    /// The buffer of the blocked [`Endpoint::recv`] / [`Endpoint::try_recv`]
    /// call, passed down to progress.
    Caller,
}

/// A completed receive's result as a request holds it: the (rare) error
/// boxed, so that a request stays small (`Error` is 64 bytes, `Status` 32)
/// and the per-message moves of [`Req`] stay short.
type Done = core::result::Result<Status, Box<Error>>;

/// A [`Done`] as the public `Result`.
#[inline(always)]
fn unbox(d: Done) -> Result<Status> {
    d.map_err(|e| *e)
}

/// A `Result` as a [`Done`].
#[inline(always)]
fn boxed(r: Result<Status>) -> Done {
    r.map_err(Box::new)
}

/// Records `d` as a request's result. A request completes once: the value
/// replaced is `None`, dropped inline (no call) if it ever is not.
#[inline(always)]
fn set_done(slot: &mut Option<Done>, d: Done) {
    if let Some(Err(e)) = slot.replace(d) {
        drop(e);
    }
}

/// Records completed user receive `req` (`key`) in the completion feed,
/// once (a request the user does not wait on through the feed is left).
#[inline(always)]
fn feed_once(req: &mut Req, key: u64, feed: &mut Vec<(u64, bool)>, queued: &mut usize) {
    if req.user && req.fed == Fed::No {
        req.fed = Fed::Queued;
        feed.push((key, false));
        *queued += 1;
    }
}

#[derive(Debug)]
struct Req {
    spec: MatchSpec,
    buf: ReqBuf,
    done: Option<Done>,
    /// Its handle in the offload model while queued there.
    id: Option<RecvId>,
    /// A user-visible request: its completion goes to the feed.
    user: bool,
    /// Where it stands in the completion feed.
    fed: Fed,
}

/// A receive the offload model handed to the "engine": advertised (or to be
/// advertised) in the prepost ring to `peer`.
#[derive(Debug, Clone, Copy)]
struct EngineEntry {
    /// The request it belongs to.
    key: u64,
    peer: u32,
    context: u32,
    addr: u64,
    capacity: u64,
    /// Index in the prepost ring once posted (`None`: not published, so the
    /// sender can never claim it).
    index: Option<u64>,
    /// A delete found it claimed: waiting for the sender's DONE.
    deleting: bool,
}

/// Receive requests and advertised entries. Dropping it leaks (never frees)
/// an owned buffer that a sender may still be writing into.
#[derive(Debug, Default)]
struct Requests {
    reqs: IdTable<Req>,
    engine: IdMap<RecvId, EngineEntry>,
    /// The receive of the blocked `recv`/`try_recv` call (there is at most
    /// one at a time), kept out of the map: the hot path of a blocking
    /// receive then does no hashing for its request.
    caller: Option<(u64, Req)>,
}

impl Requests {
    fn get(&self, key: u64) -> Option<&Req> {
        match &self.caller {
            Some((k, r)) if *k == key => Some(r),
            _ => self.reqs.get(key),
        }
    }

    fn get_mut(&mut self, key: u64) -> Option<&mut Req> {
        match &mut self.caller {
            Some((k, r)) if *k == key => Some(r),
            _ => self.reqs.get_mut(key),
        }
    }

    /// Records `req`. The blocked call's request, and one that completes
    /// inside its call (`at_once`: taken back before the call returns), go
    /// to the `caller` slot (no hashing); the others to the map.
    #[inline(always)]
    fn insert(&mut self, key: u64, req: Req, at_once: bool) {
        if at_once || matches!(req.buf, ReqBuf::Caller) {
            // A caller request left behind (never, normally) goes to the map.
            if let Some((k, old)) = self.caller.replace((key, req)) {
                self.reqs.insert(k, old);
            }
        } else {
            self.reqs.insert(key, req);
        }
    }

    fn remove(&mut self, key: u64) -> Option<Req> {
        match &self.caller {
            Some((k, _)) if *k == key => self.caller.take().map(|(_, r)| r),
            _ => self.reqs.remove(key),
        }
    }

    /// Removes request `key` if it has completed (one lookup).
    #[inline(always)]
    fn remove_if_done(&mut self, key: u64) -> Option<Req> {
        match &self.caller {
            Some((k, r)) if *k == key => {
                if r.done.is_some() {
                    self.caller.take().map(|(_, r)| r)
                } else {
                    None
                }
            }
            _ => {
                if self.reqs.get(key).is_some_and(|r| r.done.is_some()) {
                    self.reqs.remove(key)
                } else {
                    None
                }
            }
        }
    }

    /// [`IdTable::take_where`] over the caller slot and the map.
    #[inline(always)]
    fn take_where<R>(&mut self, key: u64, f: impl FnOnce(&mut Req) -> Option<R>) -> Option<R> {
        match &mut self.caller {
            Some((k, r)) if *k == key => {
                let out = f(r)?;
                self.caller = None;
                Some(out)
            }
            _ => self.reqs.take_where(key, f),
        }
    }

    fn values(&self) -> impl Iterator<Item = &Req> {
        self.reqs.values().chain(self.caller.iter().map(|(_, r)| r))
    }
}

impl Drop for Requests {
    fn drop(&mut self) {
        for e in self.engine.values() {
            if let Some(r) = self.reqs.get_mut(e.key) {
                if let ReqBuf::Owned(v) = core::mem::replace(&mut r.buf, ReqBuf::Caller) {
                    // A sender may still CMA-write into it: never free it.
                    core::mem::forget(v);
                }
            }
        }
    }
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

// The ADI keeps an endpoint in a `Mutex` shared across threads.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Endpoint>();
};

/// A messaging endpoint: a [`Node`] plus rings, queues and counters.
#[derive(Debug)]
pub struct Endpoint {
    node: Node,
    peers: Vec<Peer>,
    /// MPI matching and the prepost policy (tm-match's offload model over
    /// its exact matcher): posted receives and unexpected messages, whose
    /// messages are keys into `store`.
    off: Offload<u64, Msg>,
    requests: Requests,
    /// Unexpected messages by key (the matcher keeps their order).
    store: KeySlab<Unexpected>,
    /// Request ids (sends and receives share the sequence).
    next_id: u64,
    /// Send requests not yet complete, and completed user ones not waited for.
    sends: Sends,
    /// Completion feed: `(id, is a send)` in completion order. Some may
    /// have been waited for since: an entry is reported only if its request
    /// is still held with [`Fed::Queued`]; `feed_queued` counts those.
    feed: Vec<(u64, bool)>,
    feed_queued: usize,
    /// Deferred receives completed by [`Endpoint::take_deferred`] while the
    /// feed was empty, already taken out of the request table in the form
    /// [`Endpoint::take_finished`] hands over (which takes the whole list
    /// by a swap): draining a window of deferred receives then costs no
    /// table update, feed entry or second lookup per receive. Every entry
    /// completed before every receive in `feed`. The calls that look a
    /// receive up by id (`wait`, `test`, `cancel_recv`, `take_completed`)
    /// first put these back as ordinary completed requests
    /// ([`Endpoint::unready`]).
    ready: Vec<RecvFinished>,
    layout: TagLayout,
    /// `layout`'s largest context id, rank and tag: what
    /// [`Endpoint::recv_arrived`] checks a counted message against
    /// (`TagLayout::encode` would accept it), three comparisons per message.
    layout_max: (u32, u32, u32),
    /// The prepost protocol is on (config, CMA, phase window).
    prepost: bool,
    /// Largest message sent inline with continuation slots
    /// (`TMX_SHMEM_INLINE_EXT`, capped to a quarter of the ring; at most
    /// `INLINE_MAX` turns it off).
    ext_max: usize,
    /// Largest message sent inline as a reply (`TMX_SHMEM_INLINE_REPLY`,
    /// capped to half the ring; at most `ext_max` turns it off).
    reply_max: usize,
    eager: EagerArea,
    /// Unexpected eager messages still in their sender's eager area.
    uncopied: usize,
    /// Answers to our [`KIND_CANCEL`]s: `(send id, withdrawn)`.
    cancel_answers: Vec<(u64, bool)>,
    /// Consecutive `try_recv` quick looks that found nothing.
    idle_polls: u32,
    /// Deferred receives (`TMX_SHMEM_DEFER_RECV`, see
    /// [`Endpoint::irecv_or_done`]), oldest first: requests held in
    /// `requests` but not posted to the model. All have the exact source
    /// `deferred_src`; while any exists the model holds no posted receive
    /// (every deferred one is younger than anything ever posted), and
    /// nothing may be matched against the model's queues before they are
    /// posted ([`Endpoint::post_deferred`]).
    deferred: VecDeque<u64>,
    deferred_src: u32,
    defer_recv: bool,
    /// Consumers of deferred receives made by
    /// [`Endpoint::irecv_or_done_in_place`], oldest first (keyed by a
    /// subsequence of `deferred`; entries older than its front are stale
    /// and dropped).
    consumers: VecDeque<PayloadConsumer>,
    /// CMA messages matched by a nonblocking receive as it was posted (or
    /// by an earlier receive while it was made, see `late_posted`), and
    /// by posted receives in a progress pass (`batch_cma`), oldest first,
    /// whose single copy is left to the next progress pass (or the end of
    /// this one) ([`Endpoint::copy_late`]): the receive stays pending
    /// until then.
    /// Copying them inside `irecv` kept a rank that had fallen behind
    /// from posting its own sends until it had read every message of its
    /// peer's window, so the two ranks copied in turn instead of at once.
    late: VecDeque<(u64, Unexpected)>,
    /// Our CMA sends whose receivers may offer to share the copy
    /// (`TMX_SHMEM_CMA_SPLIT`; see [`crate::ring::SplitWords`]), by
    /// request id: the destination and the data (kept by the request
    /// until the FIN, which the receiver sends only once the hand-off is
    /// over).
    splits: std::collections::HashMap<u64, (u32, usize, usize)>,
    /// How many of `splits` go to each peer.
    split_out: Vec<u32>,
    /// We marked some ring `READY` since the last
    /// [`Endpoint::unready_splits`].
    ready_splits: bool,
    /// Set around the post of a nonblocking receive: a CMA message it
    /// matches at once joins `late` instead of being copied.
    late_ok: bool,
    /// Set while a nonblocking receive hands what has arrived to the
    /// model before it is posted ([`Endpoint::drain_source`]): a CMA
    /// message that matches an earlier receive the user holds (pending,
    /// with a buffer of its own) joins `late` too, for the same reason.
    late_posted: bool,
    /// Set while a progress pass reads its rings: a CMA message that
    /// matches a posted receive with a buffer of its own joins `late`, so
    /// that the pass reads all of them from one sender in one
    /// `process_vm_readv` call ([`Endpoint::read_late`]).
    batch_cma: bool,
    /// `TMX_SHMEM_CMA_BATCH`: whether progress passes read their CMA
    /// messages in batches (`batch_cma`).
    cma_batch: bool,
    /// Set by [`Endpoint::copy_late`] around the delivery of a late CMA
    /// message [`Endpoint::read_late`] already read: `deliver` sends its
    /// FIN without reading it again.
    cma_done: bool,
    /// Progress passes in a row with nothing to do while unexpected
    /// messages were stored (see [`Endpoint::idle_with_unexpected`]).
    idle_passes: u32,
    /// The ring an `ANY_SOURCE` quick look starts at.
    rr: u32,
    /// Our eager-pressure flag is raised.
    pressure: bool,
    /// The request of the blocked [`Endpoint::recv`] call, while it waits:
    /// a pipelined message bound to match it is copied straight into its
    /// buffer.
    blocked_recv: Option<u64>,
    /// Set by a blocking send around its `start_send`: chunks that cannot
    /// go at once are published later from the caller's buffer.
    lend: bool,
    /// `(address, length)` of the buffers messages received in place were
    /// written into, until delivered (checked then; normally at most one,
    /// delivered as soon as its last chunk arrives).
    in_place: Vec<(usize, usize)>,
    /// Fragment headers of arrived fragmented messages whose data is still
    /// in the sender's eager area ([`FLAG_HELD`]), by `(source, offset of
    /// the first fragment)` (unique while the block is not released).
    held: std::collections::HashMap<(u32, u64), Vec<Header>>,
    counters: Counters,
    /// Backpressure events and index re-reads of traffic that does not
    /// count (see [`Endpoint::restore_counters`]).
    uncounted: (u64, u64),
    /// What [`Endpoint::calibrate_inline_reply`] decided, if it ran.
    reply_calibration: Option<crate::reply_calibrate::ReplyCalibration>,
}

fn eager_flag(seg: &Segment, pe: u32, off: u64) -> &AtomicU32 {
    // SAFETY: `off` is the start of an eager block inside pe's eager area
    // (checked by the caller against eager_bytes), 64-byte aligned; the
    // word is valid for any bit pattern and lives as long as the mapping.
    unsafe { AtomicU32::from_ptr(seg.eager_ptr(pe).add(off as usize).cast()) }
}

// Split copies (`TMX_SHMEM_CMA_SPLIT`): the hand-off protocol, its states
// and its transitions are in `crate::ring::SplitWords` (where loom checks
// them); `Endpoint::split_read` is the receiver's side,
// `Endpoint::serve_splits` and `Endpoint::unready_splits` the sender's.

fn envelope(h: &Header) -> Envelope {
    Envelope {
        context_id: h.context,
        source: h.source,
        tag: h.tag,
    }
}

/// The largest inline-with-continuation message for a setting of
/// `wanted` bytes and a ring of `ring_slots`, whose header and
/// continuation slots take at most `1/share` of the ring (no continuation
/// at all if that is less than two slots): `TMX_SHMEM_INLINE_EXT` takes a
/// quarter, `TMX_SHMEM_INLINE_REPLY` half.
fn inline_cap(wanted: u64, ring_slots: u32, share: u32) -> usize {
    let slots = u64::from(ring_slots / share);
    if slots < 2 {
        return INLINE_MAX;
    }
    let cap = INLINE_MAX as u64 + (slots - 1) * crate::ring::EXT_SLOT_BYTES as u64;
    wanted.min(cap).max(INLINE_MAX as u64) as usize
}

/// The largest inline-with-continuation message for `inline_ext` and a ring
/// of `ring_slots`: a quarter of the ring (so a ring of fewer than 8 slots
/// has none).
fn ext_max(inline_ext: u64, ring_slots: u32) -> usize {
    inline_cap(inline_ext, ring_slots, 4)
}

/// The largest message sent inline as a reply for `inline_reply` and a
/// ring of `ring_slots`: half the ring.
fn reply_max(inline_reply: u64, ring_slots: u32) -> usize {
    inline_cap(inline_reply, ring_slots, 2)
}

/// Takes the continuation of inline-ext header `h` (just polled from `ring`)
/// out of the ring: the whole payload (the header's 40 bytes, then the
/// tail), or `None` for a length the ring cannot carry (a corrupt header;
/// the receive reports it).
fn take_ext_vec(inb: &mut Consumer, ring: RingRef<'_>, h: &Header) -> Option<Vec<u8>> {
    let len = h.nbytes as usize;
    if len <= INLINE_MAX || ext_slots(len - INLINE_MAX) + 1 > ring.capacity() {
        return None;
    }
    let (head, _) = h.inline_payload();
    let mut v = vec![0u8; len];
    v[..INLINE_MAX].copy_from_slice(&head);
    inb.take_ext(ring, &mut v[INLINE_MAX..]).then_some(v)
}

/// The fragment size for an eager area of `eager_bytes`: a quarter of it,
/// less the flag line.
fn frag_size(eager_bytes: u64) -> usize {
    (eager_bytes / 4).saturating_sub(EAGER_PREFIX).max(64) as usize
}

/// The chunk size of pipelined and fragmented messages: the configured
/// `TMX_SHMEM_PIPELINE_CHUNK`, at most [`frag_size`] of the eager area.
fn chunk_size(cfg: &crate::config::Config) -> usize {
    (cfg.pipeline_chunk.min(frag_size(cfg.eager_bytes) as u64) as usize).max(64)
}

/// Copies chunks of `data[*off..]` into fresh eager blocks and publishes
/// each one at once (after anything already queued in `out`), so that the
/// receiver copies a chunk out while the next one is copied in. Before each
/// chunk, blocks the receiver has released are reclaimed (all of them, or
/// the oldest ones when many are in flight), so that the first-fit
/// allocator hands back a block that is still in cache. Stops
/// when all is out (returns true), when the eager area is full or when the
/// ring is full (false: the rest waits for progress). `first`: the next
/// chunk is the message's first.
#[allow(clippy::too_many_arguments)]
fn publish_chunks(
    seg: &Segment,
    eager: &mut EagerArea,
    out: &mut Outbox,
    dest: u32,
    count: &mut dyn FnMut(&Header),
    tmpl: &Header,
    data: &[u8],
    off: &mut usize,
    first: &mut bool,
    chunk: usize,
) -> bool {
    let ring = seg.ring(seg.rank(), dest);
    while *off < data.len() {
        let c = &data[*off..data.len().min(*off + chunk)];
        let mut h = *tmpl;
        h.kind = KIND_FRAG;
        h.flags = if *first { FLAG_FIRST | tmpl.flags } else { 0 };
        h.ext[..8].copy_from_slice(&(c.len() as u64).to_le_bytes());
        if eager.in_flight() <= RECLAIM_SCAN {
            eager.reclaim(released(seg));
        } else {
            eager.reclaim_front(released(seg));
        }
        let Some(h) = eager_block(seg, eager, c, h) else {
            return false;
        };
        *off += c.len();
        *first = false;
        if out.send_with(ring, h, count) == Sent::Queued && *off < data.len() {
            return false;
        }
    }
    true
}

/// The synchronous-send id a [`FLAG_SYNC`] header quotes (`ext[8..16]`).
fn sync_id(h: &Header) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&h.ext[8..16]);
    u64::from_le_bytes(b)
}

/// The header of an inline message (`data`, at most [`INLINE_MAX`] bytes,
/// carried in the header itself).
#[inline(always)]
fn inline_header(source: u32, tag: u32, context: u32, flags: u8, data: &[u8]) -> Header {
    let mut h = Header {
        kind: KIND_INLINE,
        flags,
        // <= INLINE_MAX (the callers' condition)
        nbytes: data.len() as u32,
        source,
        tag,
        context,
        ..Header::default()
    };
    h.set_inline(data);
    h
}

/// Counts a message delivered from `source` into a buffer of `cap` bytes
/// (`n` of its `h.nbytes` bytes: truncated when fewer, which is counted and
/// traced, not an error) and returns its status.
#[inline(always)]
fn delivered(counters: &mut Counters, source: u32, h: &Header, n: usize, cap: usize) -> Status {
    let msg_len = h.nbytes as usize;
    counters.received += 1;
    if n < msg_len {
        counters.truncated += 1;
        tracing::debug!(
            source,
            msg_len,
            capacity = cap,
            "message truncated to the receive buffer"
        );
    }
    Status {
        source,
        tag: h.tag,
        context: h.context,
        len: n,
        msg_len,
        cancelled: false,
    }
}

/// Copies the first `dst.len()` (at most [`INLINE_MAX`]) inline bytes of
/// `h` (`word`, then `ext`) into `dst`, straight from the header's fields
/// (no intermediate array).
#[inline]
fn copy_inline(h: &Header, dst: &mut [u8]) {
    let n = dst.len().min(INLINE_MAX);
    let word = h.word.to_le_bytes();
    if let Some(d) = dst.first_chunk_mut::<8>() {
        // A fixed 8-byte store, not a `memcpy` call of a variable length.
        *d = word;
    } else {
        dst[..n].copy_from_slice(&word[..n]);
    }
    if n > 8 {
        dst[8..n].copy_from_slice(&h.ext[..n - 8]);
    }
}

/// Whether CMA message `h`, received into `buf`, is read with its
/// sender's help ([`Endpoint::split_read`]): a split offer and at least
/// `split_min` bytes to read.
fn split_size(h: &Header, buf: &ReqBuf, split_min: u64) -> bool {
    let cap = match buf {
        ReqBuf::Owned(v) => v.len(),
        ReqBuf::Caller => usize::MAX,
    };
    h.flags & FLAG_SPLIT != 0 && (h.nbytes as usize).min(cap) as u64 >= split_min
}

/// Whether the receiver released our eager block at `off` (its flag).
fn released(seg: &Segment) -> impl Fn(u64) -> bool + '_ {
    let me = seg.rank();
    move |off| eager_flag(seg, me, off).load(Ordering::Acquire) == 1
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

/// [`Endpoint::recv_arrived_with`] asks for every line of a payload of
/// up to this many bytes before its consumer reads it, and of a larger one
/// only when no other header follows it in the ring (a lone message, as in
/// a ping-pong). In a stream of larger messages the consumer's reads
/// stream well enough by themselves and the hints only wait: `osu_ddt`'s
/// window of 8 KiB messages was 1.05–1.07× faster without them, while
/// from 512 B to 4 KiB they made it 1.06–1.20× faster (session 23).
const IN_PLACE_PREFETCH_STREAM: usize = 4096;

/// Largest eager payload for which the receiver's prefetch hint of
/// [`crate::prefetch`] is given (for the next message's block). Above it
/// a copy-out streams well enough by itself: at 4 and 8 KiB the hint (and
/// the early look at the next header) cost 1–6% (sessions 15 and 16).
const PREFETCH_MAX: u64 = 2048;

/// Largest eager payload for which the sender's hint is given (`PREFETCHW`
/// of the block its next send of the same size takes). Up to 8 KiB the
/// sender's copy-in is what a window waits for: it takes ownership of
/// every line of a block the receiver's core last read. Raised from 2 KiB
/// on 2026-11-27 (one-size paired runs, 60 pairs each, median ratio
/// against 2 KiB): bandwidth 1.14× at 4 KiB and 1.09× at 8 KiB,
/// bi-bandwidth 1.10× and 1.04×; at 16 and 32 KiB it did not pay (0.91–1.01).
/// (Session 15 had measured a third slower at 4 KiB on a scratch
/// both-ways window of bare endpoints; the ADI's windows did not show it.)
const PREFETCH_WRITE_MAX: u64 = 8192;

/// Bytes of a step of the sender's copy into its eager block, after each
/// of which it prefetches the matching part of the next block
/// ([`PREFETCH_WRITE_MAX`]), for payloads of at least four steps sent
/// while no receive is outstanding (a streaming sender). Prefetched after
/// the whole copy instead, the next block's ownership requests stalled
/// the sender on full line fill buffers. With 1 KiB steps for every
/// sender, A-B-B-A against the whole-copy order: `bw` 4 KiB 1.05–1.20,
/// 8 KiB 1.07–1.18; but `bibw` (both ranks copying in and out) 8 KiB
/// 0.96–0.98 and 2 KiB 0.95, hence a streaming sender and four steps
/// (crate README, "Copying into eager blocks").
const PREFETCH_STEP: usize = 1024;

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

/// The buffer of the receive a fragmented message is bound to
/// (`(key, ptr, cap, owned)` of [`AsmTarget::Bound`]), if it is still
/// there: the owned buffer of pending request `key`, or `buf` while it is
/// the blocked `recv`'s (`blocked`).
fn bound_dst<'a>(
    requests: &'a mut Requests,
    blocked: Option<u64>,
    (key, ptr, cap, owned): (u64, usize, usize, bool),
    buf: &'a mut [u8],
) -> Option<&'a mut [u8]> {
    if owned {
        match requests.reqs.get_mut(key) {
            Some(Req {
                done: None,
                buf: ReqBuf::Owned(v),
                ..
            }) if v.as_ptr() as usize == ptr && v.len() == cap => Some(&mut v[..]),
            _ => None,
        }
    } else if blocked == Some(key) && buf.as_ptr() as usize == ptr && buf.len() == cap {
        Some(buf)
    } else {
        None
    }
}

/// Discards a message being received: releases its held fragments (one
/// `uncopied` message less).
fn drop_assembly(seg: &Segment, area: u64, uncopied: &mut usize, a: Assembly) {
    if let AsmTarget::Held(frags) = a.into {
        for f in &frags {
            let _ = get_eager(seg, area, f, &mut []);
        }
        *uncopied -= 1;
    }
}

/// Copies the payloads of consecutive fragments `frags` into `dst` (the
/// first at offset 0; clipped to `dst.len()`) and releases their blocks.
/// The headers were checked by `take_fragment` (`eager_src`).
fn copy_fragments(seg: &Segment, area: u64, frags: &[Header], dst: &mut [u8]) {
    let mut at = 0usize;
    for f in frags {
        let n = eager_len(f) as usize;
        let (lo, hi) = (at.min(dst.len()), at.saturating_add(n).min(dst.len()));
        let _ = get_eager(seg, area, f, &mut dst[lo..hi]);
        at = at.saturating_add(n);
    }
}

/// Appends an eager (fragment) payload to `v` and releases the sender's
/// block.
fn get_eager_append(seg: &Segment, area: u64, h: &Header, v: &mut Vec<u8>) -> Result<()> {
    let src = eager_src(area, h)?;
    let n = eager_len(h) as usize;
    v.reserve(n);
    // SAFETY: [src, src + n) is inside the sender's eager area (eager_src
    // checked src + eager_len <= area); the sender wrote it before
    // publishing the header we acquired and does not reuse it before we
    // raise the flag below. The destination is the spare capacity of `v`
    // (at least n bytes after the reserve), which we then mark initialised.
    unsafe {
        core::ptr::copy_nonoverlapping(
            seg.eager_ptr(h.source).add(src as usize),
            v.as_mut_ptr().add(v.len()),
            n,
        );
        v.set_len(v.len() + n);
    }
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
    eager: &mut EagerArea,
    data: &[u8],
    mut tmpl: Header,
) -> Option<Header> {
    let off = eager_copy(seg, eager, data, false)?;
    tmpl.source = seg.rank();
    tmpl.word = off;
    Some(tmpl)
}

/// A fresh eager block for `len` bytes of data, its release flag lowered;
/// its offset, or `None` if the eager area has no room even after
/// reclaiming.
#[inline]
fn eager_alloc(seg: &Segment, eager: &mut EagerArea, len: usize) -> Option<u64> {
    let off = eager.alloc(EAGER_PREFIX + len as u64, released(seg))?;
    eager_flag(seg, seg.rank(), off).store(0, Ordering::Relaxed);
    Some(off)
}

/// Copies `data` into a fresh eager block and returns the block's offset,
/// or `None` if the eager area has no room even after reclaiming. (The
/// send fast path fills its header itself: a `Header` returned through
/// memory was copied in wide loads of its narrow stores, which waited for
/// the payload copy's stores to drain.) `stream`: the sender has no
/// receive outstanding, so the next block's prefetch may go in steps
/// with the copy ([`PREFETCH_STEP`]).
#[inline]
fn eager_copy(seg: &Segment, eager: &mut EagerArea, data: &[u8], stream: bool) -> Option<u64> {
    let off = eager_alloc(seg, eager, data.len())?;
    let me = seg.rank();
    let dst = seg
        .eager_ptr(me)
        .wrapping_add((off + EAGER_PREFIX) as usize);
    // Only while older blocks are still in flight (a window of sends): a
    // lone send (a ping-pong) takes its own block back before the next
    // one, so the kept block would be prefetched for nothing.
    let next = if data.len() as u64 <= PREFETCH_WRITE_MAX && eager.in_flight() > 1 {
        // The block the next send of this size will most likely take.
        eager.next_kept(EAGER_PREFIX + data.len() as u64)
    } else {
        None
    };
    let Some(next) = next else {
        // A lone send (a ping-pong's): this block's lines, last read by
        // the receiver's core, are asked for all at once before the copy
        // writes them (latency 2 KiB 1.09×, 6,000 B 1.10×; session 23). Up
        // to `PREFETCH_WRITE_MAX`: a packed 64 KiB ping-pong (a staged
        // typed send, copied) was 0.95× with the hint.
        if eager.in_flight() <= 1 && data.len() as u64 <= PREFETCH_WRITE_MAX {
            prefetch::write_range(dst, data.len());
        }
        // SAFETY: [off + 64, off + 64 + len) is inside our eager area (the
        // allocator's block); no receiver reads it before the header that
        // names it is published (Release), and we do not reuse it before
        // the release flag says the receiver is done. `rep movsb` from
        // `TMX_SHMEM_MOVSB_MIN` (see `crate::copy`).
        unsafe { crate::copy::to_block(data.as_ptr(), dst, data.len(), eager.movsb_min()) };
        return Some(off);
    };
    // The copy and the next block's prefetch in steps (one step for a
    // message shorter than four), so that the ownership requests for the
    // next block go out while this one is copied rather than after it.
    let next = seg.eager_ptr(me).wrapping_add(next as usize);
    let total = EAGER_PREFIX as usize + data.len();
    let step = if stream && data.len() >= 4 * PREFETCH_STEP {
        PREFETCH_STEP
    } else {
        data.len()
    };
    let mut o = 0;
    while o < data.len() {
        let n = step.min(data.len() - o);
        // SAFETY: as above, for the part [o, o + n) of the payload
        // (o + n <= len).
        unsafe { crate::copy::to_block(data.as_ptr().add(o), dst.add(o), n, eager.movsb_min()) };
        // The last step takes the rest of the next block (its length
        // counts the flag line too).
        let end = if o + n == data.len() { total } else { o + n };
        prefetch::write_range(next.wrapping_add(o), end - o);
        o += n;
    }
    Some(off)
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
                    out: Outbox::new(),
                    inb: Consumer::new(batch),
                    staged: VecDeque::new(),
                    assembly: None,
                    poster: Poster::new(),
                    claimer: Claimer::new(),
                    reply_mark: 0,
                    reply_run: 0,
                    ctl_in: 0,
                    ctl_out: 0,
                    dx_in: 0,
                    dx_out: 0,
                    dx_seen: (0, 0),
                    dx_was: false,
                })
                .collect(),
            off: Offload::new(OffloadConfig::new(
                layout,
                (node.config().prepost_slots as usize).saturating_mul(n as usize),
            ))
            .expect("the default sync interval (2^14) is valid"),
            requests: Requests::default(),
            prepost,
            layout,
            layout_max: (layout.max_context_id(), layout.max_rank(), layout.max_tag()),
            node,
            store: KeySlab::default(),
            next_id: 1,
            sends: Sends::default(),
            feed: Vec::new(),
            feed_queued: 0,
            ready: Vec::new(),
            ext_max: ext_max(node_cfg_inline_ext, node_cfg_ring_slots),
            reply_max: reply_max(node_cfg_inline_reply, node_cfg_ring_slots),
            eager,
            uncopied: 0,
            cancel_answers: Vec::new(),
            idle_polls: 0,
            deferred: VecDeque::new(),
            consumers: VecDeque::new(),
            deferred_src: 0,
            late: VecDeque::new(),
            splits: std::collections::HashMap::new(),
            split_out: vec![0; n as usize],
            ready_splits: false,
            late_ok: false,
            late_posted: false,
            batch_cma: false,
            cma_batch: node_cfg_cma_batch,
            cma_done: false,
            idle_passes: 0,
            defer_recv,
            rr: 0,
            pressure: false,
            blocked_recv: None,
            lend: false,
            in_place: Vec::new(),
            held: std::collections::HashMap::new(),
            counters: Counters::default(),
            uncounted: (0, 0),
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
            .map(|p| p.out.backpressure_events())
            .sum::<u64>()
            .saturating_sub(self.uncounted.0);
        c.index_rereads = self
            .peers
            .iter()
            .map(|p| p.out.producer().rereads())
            .sum::<u64>()
            .saturating_sub(self.uncounted.1);
        c
    }

    /// Puts the counters back to `saved` (taken by [`Endpoint::counters`]
    /// before traffic that must not count, the inline reply calibration's).
    pub(crate) fn restore_counters(&mut self, saved: Counters) {
        let now = self.counters();
        self.uncounted.0 +=
            now.backpressure_events - saved.backpressure_events.min(now.backpressure_events);
        self.uncounted.1 += now.index_rereads - saved.index_rereads.min(now.index_rereads);
        self.counters = saved;
    }

    /// The inline-ext cap in bytes (`TMX_SHMEM_INLINE_EXT` as capped by the
    /// ring).
    pub(crate) fn ext_max(&self) -> usize {
        self.ext_max
    }

    /// The inline reply cap in bytes now (`TMX_SHMEM_INLINE_REPLY` as
    /// capped by the ring, or as the calibration lowered it).
    pub fn reply_cap(&self) -> usize {
        self.reply_max
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
        self.reply_max = cap;
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
    /// The inline send's fast path: publishes a standard send of at most
    /// [`INLINE_MAX`] bytes to another local rank `dest` (the caller
    /// checked all three) straight into its ring when nothing is held for
    /// it and the ring has room; `false` (nothing done) otherwise, and the
    /// general path sends it. What the general path does for it, without
    /// its request id and layers.
    #[inline(always)]
    fn send_inline_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        let seg = self.node.segment();
        let me = seg.rank();
        let flags = self.counted_flag();
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            return false;
        }
        let fields = InlineFields {
            kind: KIND_INLINE,
            flags,
            source: me,
            tag,
            context,
        };
        let ring = seg.ring(me, dest);
        let sent = p.out.try_send_inline_now(ring, fields, data, |flags| {
            if flags & FLAG_COUNTED != 0 {
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
    /// `TMX_SHMEM_PIPELINE_MIN` when the eager area has room, to another
    /// local rank `dest` (the caller checked `dest`) with nothing held for
    /// it. `false` (nothing done) when the message needs the general path:
    /// synchronous callers never come here; a prepost-direct, CMA,
    /// pipelined or fragmented size; the eager area full; sends held for
    /// `dest`. An eager header that finds the ring full is queued behind
    /// (the send is complete either way, as on the general path).
    #[inline]
    fn send_now(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        self.send_now_within(dest, tag, context, data, true)
    }

    /// [`Endpoint::send_now`]; `cma`: whether sizes above
    /// `TMX_SHMEM_CMA_THRESHOLD` are left to CMA (else they are copied
    /// into an eager block too, up to `TMX_SHMEM_PIPELINE_MIN`).
    #[inline(always)]
    fn send_now_within(
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
        if !p.staged.is_empty() || p.out.pending() != 0 {
            return false;
        }
        if (len <= self.ext_max || self.inline_as_reply(dest, len))
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

    /// Whether a message of `len` bytes (more than `ext_max`) may go
    /// through an eager block on [`Endpoint::send_now`]'s path: not a
    /// pipelined, prepost-direct or CMA size, and no larger than the eager
    /// area allows. `cma`: a CMA size counts (see
    /// [`Endpoint::send_now_within`]).
    #[inline]
    fn eager_size_ok(&self, len: usize, cma: bool) -> bool {
        let cfg = self.node.config();
        let len64 = len as u64;
        !(len64 > cfg.pipeline_min
            || len64 > self.eager_max()
            || (self.prepost && len64 >= cfg.prepost_min)
            || (cma && self.cma_ok() && len64 > cfg.cma_threshold))
    }

    /// A standard send of a buffer the caller is about to reuse (a
    /// packing layer's staging buffer, just written): copied into an eager
    /// block now if it fits, even above `TMX_SHMEM_CMA_THRESHOLD` (up to
    /// `TMX_SHMEM_PIPELINE_MIN` and the eager area), so that the send
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
    fn publish_eager_now(&mut self, dest: u32, tag: u32, context: u32, len: usize, off: u64) {
        let id = self.next_id;
        let seg = self.node.segment();
        let fields = HeaderFields {
            kind: KIND_EAGER,
            flags: self.counted_flag(),
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
        let sent = p.out.try_send_fields_now(ring, fields, |flags| {
            if flags & FLAG_COUNTED != 0 {
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
        // Larger inline messages (`TMX_SHMEM_INLINE_EXT` above the stack
        // buffer) take the general path, as `send_now` would send them.
        let p = &self.peers[dest as usize];
        if len <= self.ext_max
            || !p.staged.is_empty()
            || p.out.pending() != 0
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
        // for the ping-pong from 512 B to 8 KiB; session 23).
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

    fn enqueue(&mut self, dest: u32, hdr: Header) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            p.staged.push_back(Staged::Ready(hdr));
            return;
        }
        let ring = seg.ring(seg.rank(), dest);
        let mut count = |h: &Header| {
            if h.flags & FLAG_COUNTED != 0 {
                ring.count_message();
            }
        };
        if p.out.send_with(ring, hdr, &mut count) == Sent::Queued {
            tracing::debug!(dest, kind = hdr.kind, "send queued locally (backpressure)");
        }
    }

    /// Whether a message of `len` bytes (more than `ext_max`) to `dest`
    /// goes inline as a reply (`TMX_SHMEM_INLINE_REPLY`): at most
    /// `reply_max` bytes, and [`Endpoint::ask_reply`] says it is one. In
    /// a ping-pong every message is such a reply, and the receiver then
    /// reads the payload with its header instead of after it, from a block
    /// it must also release.
    #[inline]
    fn inline_as_reply(&mut self, dest: u32, len: usize) -> bool {
        len <= self.reply_max && self.ask_reply(dest)
    }

    /// Whether a message of `len` bytes is in the range that goes by CMA
    /// when it is a reply (`TMX_SHMEM_CMA_REPLY`): CMA available, above
    /// that setting and at most `TMX_SHMEM_CMA_THRESHOLD` (above which
    /// every message goes by CMA).
    #[inline]
    fn cma_reply_size(&self, len: usize) -> bool {
        let cfg = self.node.config();
        let len = len as u64;
        len > cfg.cma_reply && len <= cfg.cma_threshold && self.cma_ok()
    }

    /// Whether we have a receive outstanding: deferred, or posted to the
    /// matcher. A sender that has one is likely copying messages in as
    /// well as out (see `PREFETCH_STEP`).
    #[inline]
    fn recv_outstanding(&self) -> bool {
        !self.deferred.is_empty() || self.off.posted_len() > 0
    }

    /// Whether a message of `len` bytes to `dest` goes by CMA because
    /// messages flow both ways (`TMX_SHMEM_CMA_DUPLEX`): CMA available,
    /// above that setting and at most `TMX_SHMEM_CMA_THRESHOLD`, and
    /// [`Endpoint::duplex`]. The receiver reads it in one copy, with the
    /// others it matches in the same pass ([`Endpoint::read_late`]),
    /// instead of both cores copying it in and out while they also copy
    /// the other way's messages.
    #[inline]
    fn cma_duplex_now(&mut self, dest: u32, len: usize) -> bool {
        let cfg = self.node.config();
        let len = len as u64;
        len > cfg.cma_duplex && len <= cfg.cma_threshold && self.cma_ok() && self.duplex(dest)
    }

    /// Whether messages flow both ways between us and `dest`: over the
    /// recent traffic (decayed, see [`DUPLEX_SPAN`]) we sent it at least
    /// [`DUPLEX_MIN`] messages and took at least half as many from its
    /// ring (ring slots: an inline message with continuation slots counts
    /// for each). Control headers (FIN, ACK) do not count, so CMA sends,
    /// which bring a FIN back for each, do not make a stream look duplex.
    /// Asking twice in a row answers the same.
    fn duplex(&mut self, dest: u32) -> bool {
        let p = &mut self.peers[dest as usize];
        let taken = p.inb.consumed().saturating_sub(p.ctl_in);
        let sent = p.out.producer().pushed().saturating_sub(p.ctl_out);
        p.dx_in += taken.saturating_sub(p.dx_seen.0);
        p.dx_out += sent.saturating_sub(p.dx_seen.1);
        p.dx_seen = (taken, sent);
        if p.dx_in + p.dx_out > DUPLEX_SPAN {
            p.dx_in /= 2;
            p.dx_out /= 2;
        }
        let duplex = p.dx_out >= DUPLEX_MIN && p.dx_in * 2 >= p.dx_out;
        if duplex != p.dx_was {
            p.dx_was = duplex;
            tracing::debug!(
                dest,
                duplex,
                taken = p.dx_in,
                sent = p.dx_out,
                "traffic both ways changed"
            );
        }
        duplex
    }

    /// Records a send to `dest` of a size that a reply sends another way
    /// (inline, or by CMA) and says whether it is a reply: a message was
    /// taken from `dest`'s ring since the last send that asked, and that
    /// ask was the only one since the take before (strict alternation).
    /// Not while more than one eager block is in flight (a window of sends
    /// went before: the blocks are taken back lazily, so at the first send
    /// of the next window they still count). So at most one such message
    /// per message taken from `dest` goes the reply's way.
    #[inline]
    fn ask_reply(&mut self, dest: u32) -> bool {
        let reply = self.would_reply(dest);
        let p = &mut self.peers[dest as usize];
        let taken = p.inb.consumed();
        if taken == p.reply_mark {
            p.reply_run = p.reply_run.saturating_add(1);
        } else {
            p.reply_mark = taken;
            p.reply_run = 1;
        }
        reply
    }

    /// What [`Endpoint::ask_reply`] answers now, without recording the
    /// ask. A window of eager sends before it (more than one block in
    /// flight) says bandwidth, not a ping-pong.
    #[inline]
    fn would_reply(&self, dest: u32) -> bool {
        let p = &self.peers[dest as usize];
        p.inb.consumed() != p.reply_mark && p.reply_run <= 1 && self.eager.in_flight() <= 1
    }

    /// Sends `data` (more than [`INLINE_MAX`], at most `reply_max` bytes) to
    /// `dest` inline with continuation slots, if nothing is held for `dest`
    /// and its ring has room for all of it now; otherwise returns `false`
    /// and the caller sends it another way (eager).
    #[inline(always)]
    fn send_inline_ext(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> bool {
        let seg = self.node.segment();
        let me = seg.rank();
        let fields = InlineFields {
            kind: KIND_INLINE_EXT,
            flags: self.counted_flag(),
            source: me,
            tag,
            context,
        };
        let p = &mut self.peers[dest as usize];
        if !p.staged.is_empty() {
            return false;
        }
        let ring = seg.ring(me, dest);
        let sent = p.out.try_send_inline_ext_now(ring, fields, data, |flags| {
            if flags & FLAG_COUNTED != 0 {
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

    /// Publishes a control header (FIN, ACK) to `dest`: straight to the
    /// ring or its outbox, ahead of staged data (control carries no
    /// ordering with messages).
    fn enqueue_ctl(&mut self, dest: u32, hdr: Header) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        p.ctl_out += 1;
        if p.out
            .send_with(seg.ring(seg.rank(), dest), hdr, &mut |_| {})
            == Sent::Queued
        {
            tracing::debug!(dest, kind = hdr.kind, "control header queued locally");
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
        let mut count = |h: &Header| {
            if h.flags & FLAG_COUNTED != 0 {
                ring.count_message();
            }
        };
        let chunk = chunk_size(self.node.config());
        let mut frags_done = None;
        let mut chunks = 0;
        if p.out.flush_with(ring, &mut count) == 0 {
            'staged: while let Some(front) = p.staged.front_mut() {
                let hdr = match front {
                    Staged::Ready(h) => *h,
                    Staged::Data { hdr, bytes } => {
                        match eager_block(seg, &mut self.eager, bytes, *hdr) {
                            Some(h) => h,
                            None => break,
                        }
                    }
                    Staged::Frag {
                        id,
                        tmpl,
                        bytes,
                        off,
                        first,
                    } => {
                        let data: &[u8] = match bytes {
                            FragData::Copy(v) => &v[..],
                            FragData::Owned => self
                                .sends
                                .get(id)
                                .and_then(|r| r.owned.as_deref())
                                .unwrap_or(&[]),
                            // SAFETY: the `&[u8]` (`len` bytes) of the
                            // blocking send that staged it, still running
                            // (its `wait_send_id` runs this) until the entry
                            // is popped; `unlend` replaces the entry with a
                            // copy if it returns (or unwinds) before that.
                            FragData::Lent { ptr, len } => unsafe {
                                core::slice::from_raw_parts(*ptr as *const u8, *len)
                            },
                        };
                        let was = *off;
                        let all_out = publish_chunks(
                            seg,
                            &mut self.eager,
                            &mut p.out,
                            dest,
                            &mut count,
                            tmpl,
                            data,
                            off,
                            first,
                            chunk,
                        );
                        chunks += (*off - was).div_ceil(chunk);
                        if !all_out {
                            break 'staged;
                        }
                        frags_done = Some(*id);
                        p.staged.pop_front();
                        // The whole message is out: stop here (the caller
                        // finishes the request) and continue next time.
                        break;
                    }
                };
                p.staged.pop_front();
                if p.out.send_with(ring, hdr, &mut count) == Sent::Queued {
                    break;
                }
            }
        }
        let moved = (before + chunks).saturating_sub(p.out.pending() + p.staged.len());
        if let Some(id) = frags_done {
            tracing::debug!(dest, id, "last fragment published");
            if let Some(r) = self.sends.get_mut(&id) {
                r.frags = false;
            }
            self.check_send_done(id);
            return moved.max(1) + self.flush_peer(dest);
        }
        moved
    }

    /// Sends held locally for `dest`.
    fn queued_for(&self, dest: u32) -> usize {
        let p = &self.peers[dest as usize];
        p.out.pending() + p.staged.len()
    }

    /// [`FLAG_COUNTED`] when the prepost protocol is on: every message that
    /// goes through a header ring is then counted in the receiver's phase.
    fn counted_flag(&self) -> u8 {
        if self.prepost {
            FLAG_COUNTED
        } else {
            0
        }
    }

    /// MP_Lite's send-side check: claims the oldest posted receive of `dest`
    /// that matches, is large enough and is trusted (the receiver's phase
    /// says every message we published to it was processed), CMA-writes
    /// `data` into it and marks it done. Returns false (after counting an
    /// ignored prepost if a matching one was not trusted) to send buffered.
    fn send_preposted(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<bool> {
        let me = self.rank();
        let Ok(mtag) = self.layout.encode(Envelope {
            context_id: context,
            source: me,
            tag,
        }) else {
            return Ok(false);
        };
        let len = data.len() as u64;
        let seg = self.node.segment();
        let ring = seg.prepost(dest, me);
        let phase = seg.phase(dest);
        let mut untrusted = false;
        let mut seen = false;
        let claim = self.peers[dest as usize].claimer.claim_first(ring, |p| {
            // Only the oldest matching entry may take the message (MPI: the
            // earliest posted receive wins): if it is too small or not
            // trusted, no later one is used either.
            if seen || !p.matches(mtag) {
                return false;
            }
            seen = true;
            if p.capacity < len {
                return false;
            }
            // Read after the entry (claim_first loaded its word with
            // Acquire): see `Phase::synced`.
            if phase.synced(|| seg.counted_to(dest)) {
                true
            } else {
                untrusted = true;
                false
            }
        });
        let Some(c) = claim else {
            if untrusted {
                self.counters.ignored_preposts += 1;
                tracing::debug!(
                    dest,
                    tag,
                    "matching prepost not trusted yet (gap): buffering"
                );
            }
            return Ok(false);
        };
        let res = self.node.cma_write(dest, c.prepost.offset, data);
        let word = match res {
            Ok(()) => (u64::from(tag) << 32) | len,
            Err(_) => RESULT_FAILED,
        };
        let seg = self.node.segment();
        self.peers[dest as usize]
            .claimer
            .complete(seg.prepost(dest, me), &c, word);
        res?;
        self.counters.preposted_hits += 1;
        tracing::trace!(dest, len, "prepost-direct send (CMA write)");
        Ok(true)
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

    /// A blocking send: the chunks of a pipelined (or fragmented) message
    /// that cannot go at once are published later straight from `data`,
    /// which stays borrowed until this returns ([`FragData::Lent`]). Returns
    /// once every chunk is in the ring (none queued locally).
    #[inline(never)]
    fn send_blocking(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<()> {
        if data.len() as u64 <= self.node.config().pipeline_min.min(self.eager_max()) {
            // Never chunked: the plain path.
            let (id, done, _) = self.start_send(dest, tag, context, None, data, mode, false)?;
            if done {
                return Ok(());
            }
            return self.wait_send_id(id).map(|_| ());
        }
        // A panic unwinding out of here must not leave chunks staged that
        // point into `data` either: caught, unlent, resumed.
        let r = std::panic::catch_unwind(core::panic::AssertUnwindSafe(|| {
            self.lend = true;
            let r = self.start_send(dest, tag, context, None, data, mode, false);
            self.lend = false;
            match r {
                Ok((_, true, _)) => Ok(()),
                Ok((id, false, _)) => self.wait_send_id(id).map(|_| ()),
                Err(e) => Err(e),
            }
        }));
        match r {
            Ok(Ok(())) => {
                // Its last chunks may still be queued here behind a full
                // ring: a blocking send returns once they are in the ring,
                // so that the receiver gets the message even if this rank
                // makes no endpoint call for a while (one-sided waits).
                if self.peers[dest as usize].out.pending() == 0 {
                    return Ok(());
                }
                self.block(Watch::One(dest), |ep| {
                    let ev = ep.progress()?;
                    let idle = ep.peers[dest as usize].out.pending() == 0;
                    Ok((idle.then_some(()), ev))
                })
            }
            Ok(Err(e)) => {
                self.unlend(data);
                Err(e)
            }
            Err(panic) => {
                self.lend = false;
                self.unlend(data);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// Replaces a staged chunked send's lent buffer (`data`, the blocking
    /// send's) with a private copy of what is left of it: the blocking
    /// send returns with the send still pending (an error).
    fn unlend(&mut self, data: &[u8]) {
        for p in &mut self.peers {
            for st in &mut p.staged {
                if let Staged::Frag { bytes, off, .. } = st {
                    if let FragData::Lent { ptr, len } = *bytes {
                        if ptr == data.as_ptr() as usize && len == data.len() {
                            *bytes = FragData::Copy(data.get(*off..).unwrap_or(&[]).to_vec());
                            *off = 0;
                        }
                    }
                }
            }
        }
    }

    /// Starts a send; never blocks. Returns its id, whether it is complete
    /// and, for an internal request complete at once, its `owned` buffer.
    /// A user request is always recorded in `sends` (complete or not); an
    /// internal one only while pending. `owned` (if any) is the data;
    /// otherwise `borrowed` is.
    #[allow(clippy::too_many_arguments)]
    fn start_send(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        owned: Option<Vec<u8>>,
        borrowed: &[u8],
        mode: SendMode,
        user: bool,
    ) -> Result<(u64, bool, Option<Vec<u8>>)> {
        if dest >= self.size() {
            return Err(Error::BadPe {
                pe: dest,
                size: self.size(),
            });
        }
        let me = self.rank();
        // The inline fast path: an internal standard send of at most
        // INLINE_MAX bytes to another local rank with nothing held for it
        // completes here (what the general path below does for it, without
        // its request bookkeeping).
        if !user && mode != SendMode::Synchronous && dest != me && dest < self.size() {
            let data = owned.as_deref().unwrap_or(borrowed);
            let p = &self.peers[dest as usize];
            let clear = p.staged.is_empty() && p.out.pending() == 0;
            if clear
                && data.len() > INLINE_MAX
                && (data.len() <= self.ext_max || self.inline_as_reply(dest, data.len()))
                && self.send_inline_ext(dest, tag, context, data)
            {
                let id = self.next_id;
                self.next_id += 1;
                return Ok((id, true, owned));
            }
            if data.len() <= INLINE_MAX && clear {
                let id = self.next_id;
                self.next_id += 1;
                let h = inline_header(me, tag, context, self.counted_flag(), data);
                self.counters.inline_sends += 1;
                tracing::trace!(dest, len = data.len(), "inline send");
                self.enqueue(dest, h);
                return Ok((id, true, owned));
            }
        }
        let len = owned.as_ref().map_or(borrowed.len(), Vec::len) as u64;
        if len > u64::from(u32::MAX) {
            return Err(Error::MessageTooLarge {
                len,
                max: u64::from(u32::MAX),
            });
        }
        let id = self.next_id;
        self.next_id += 1;
        let sync = mode == SendMode::Synchronous;
        if sync {
            self.counters.sync_sends += 1;
        }
        let mut req = SendReq {
            dest,
            owned,
            fin: false,
            ack: false,
            frags: false,
            user,
            fed: Fed::No,
            orphan: false,
        };
        if dest == me {
            // The ack may come during the arrival itself (a posted receive
            // matches at once): record the request first.
            req.ack = sync;
            let copy = req.owned.as_deref().unwrap_or(borrowed).to_vec();
            self.sends.insert(id, req);
            let r = self.send_self(tag, context, copy, sync.then_some(id));
            if let Err(e) = r {
                self.sends.remove(&id);
                return Err(e);
            }
            let done = self.sends.get(&id).is_some_and(SendReq::done);
            let mut back = None;
            if done {
                self.finish_send(id);
                if !user {
                    back = self.sends.remove(&id).and_then(|r| r.owned);
                }
            }
            return Ok((id, done, back));
        }
        if self.queued_for(dest) > 0 {
            self.flush_peer(dest);
        }
        let data: &[u8] = req.owned.as_deref().unwrap_or(borrowed);
        let mut flags = self.counted_flag();
        if sync {
            flags |= FLAG_SYNC;
        }
        let mut tmpl = Header {
            kind: KIND_EAGER,
            flags,
            // <= u32::MAX, checked above
            nbytes: len as u32,
            source: me,
            tag,
            context,
            ..Header::default()
        };
        tmpl.ext[8..16].copy_from_slice(&id.to_le_bytes());
        let eager_max = self.eager_max();
        if self.prepost
            && data.len() > INLINE_MAX
            && len >= self.node.config().prepost_min
            && self.queued_for(dest) == 0
            && self.send_preposted(dest, tag, context, data)?
        {
            // Written into a matched receive: complete, synchronous or not.
        } else if data.len() <= INLINE_MAX && !sync {
            let mut h = tmpl;
            h.kind = KIND_INLINE;
            h.ext = [0; 32];
            h.set_inline(data);
            self.counters.inline_sends += 1;
            tracing::trace!(dest, len, "inline send");
            self.enqueue(dest, h);
        } else if !sync
            && (data.len() <= self.ext_max || self.inline_as_reply(dest, data.len()))
            && self.queued_for(dest) == 0
            && self.send_inline_ext(dest, tag, context, data)
        {
            // Inline in the ring, continued in the following slots.
        } else if self.cma_ok()
            && (len > self.node.config().cma_threshold
                || len > eager_max
                || self.cma_duplex_now(dest, data.len())
                || (self.cma_reply_size(data.len()) && self.ask_reply(dest)))
        {
            self.publish_cma(dest, tmpl, data, id, "CMA rendezvous send");
            // The receiver reads the buffer (owned: kept in the request;
            // borrowed: the caller's contract) until its FIN.
            req.fin = true;
            req.ack = sync;
        } else if len <= eager_max && len <= self.node.config().pipeline_min {
            let by_pointer = if self.cma_ok() && len >= STAGE_TO_CMA_MIN {
                // A large message that finds the eager area full (or sends
                // to that peer held locally) would be copied aside: hand it
                // over by pointer instead.
                !self.peers[dest as usize].staged.is_empty() || !self.try_eager(dest, tmpl, data)
            } else {
                self.counters.buffered_sends += 1;
                self.send_eager(dest, tmpl, data);
                false
            };
            if by_pointer {
                self.publish_cma(
                    dest,
                    tmpl,
                    data,
                    id,
                    "eager area full or sends queued: CMA rendezvous send",
                );
                req.fin = true;
            }
            req.ack = sync;
        } else {
            // Pipelined (above `TMX_SHMEM_PIPELINE_MIN`, within the eager
            // area) or fragmented (larger than the eager area, no CMA):
            // consecutive chunks, each published as soon as it is copied;
            // what does not fit now is published by progress as eager space
            // and ring slots free.
            let chunk = chunk_size(self.node.config());
            let pipelined = len <= eager_max;
            let (mut off, mut first) = (0usize, true);
            let seg = self.node.segment();
            let p = &mut self.peers[dest as usize];
            let all_out = p.staged.is_empty() && {
                let ring = seg.ring(me, dest);
                let mut count = |h: &Header| {
                    if h.flags & FLAG_COUNTED != 0 {
                        ring.count_message();
                    }
                };
                publish_chunks(
                    seg,
                    &mut self.eager,
                    &mut p.out,
                    dest,
                    &mut count,
                    &tmpl,
                    data,
                    &mut off,
                    &mut first,
                    chunk,
                )
            };
            let copy_aside = req.owned.is_none() && !self.lend;
            if off == 0 && pipelined && copy_aside && self.cma_ok() && len >= STAGE_TO_CMA_MIN {
                // Nothing could go (eager area full, or sends to that peer
                // held locally) and the rest would be copied aside: hand it
                // over by pointer instead, as for an eager message.
                self.publish_cma(
                    dest,
                    tmpl,
                    data,
                    id,
                    "eager area full or sends queued: CMA rendezvous send",
                );
                req.fin = true;
            } else {
                if pipelined {
                    self.counters.pipelined_sends += 1;
                } else {
                    self.counters.fragmented_sends += 1;
                }
                tracing::debug!(
                    dest,
                    len,
                    chunk,
                    pipelined,
                    out = off,
                    "chunked send (pipelined, or larger than the eager area without CMA)"
                );
                if !all_out {
                    // The rest goes from the owned buffer (kept in the
                    // request) or from a private copy of what is left.
                    let bytes = if req.owned.is_some() {
                        FragData::Owned
                    } else if self.lend {
                        // A blocking send: published from the caller's
                        // buffer while it waits (no copy aside).
                        FragData::Lent {
                            ptr: borrowed.as_ptr() as usize,
                            len: borrowed.len(),
                        }
                    } else {
                        let rest = borrowed[off..].to_vec();
                        off = 0;
                        FragData::Copy(rest)
                    };
                    self.peers[dest as usize].staged.push_back(Staged::Frag {
                        id,
                        tmpl,
                        bytes,
                        off,
                        first,
                    });
                    req.frags = true;
                }
            }
            req.ack = sync;
        }
        let done = req.done();
        if done && !user {
            return Ok((id, true, req.owned));
        }
        self.sends.insert(id, req);
        if done {
            self.finish_send(id);
        }
        Ok((id, done, None))
    }

    /// A send to this rank: a private copy handed to the matcher as an
    /// arrived message (so `ANY_SOURCE` ordering and non-overtaking hold).
    fn send_self(
        &mut self,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        sync: Option<u64>,
    ) -> Result<()> {
        let mut hdr = Header {
            kind: KIND_EAGER,
            nbytes: data.len() as u32,
            source: self.rank(),
            tag,
            context,
            ..Header::default()
        };
        if let Some(id) = sync {
            hdr.flags |= FLAG_SYNC;
            hdr.ext[8..16].copy_from_slice(&id.to_le_bytes());
        }
        self.counters.self_sends += 1;
        tracing::trace!(len = data.len(), "self send (local copy)");
        let key = self.store.insert(Unexpected {
            hdr,
            data: Some(data),
        });
        self.off.arrive(envelope(&hdr), Msg::Stored(key))?;
        self.pump(&mut [])
    }

    /// A request completed: to the feed if it is the user's, dropped if it
    /// was orphaned.
    fn finish_send(&mut self, id: u64) {
        match self.sends.get_mut(&id) {
            Some(r) if r.orphan => {
                let fed = r.fed;
                self.sends.remove(&id);
                self.unfeed(fed);
            }
            Some(r) if r.user && r.fed == Fed::No => {
                r.fed = Fed::Queued;
                self.feed.push((id, true));
                self.feed_queued += 1;
            }
            _ => {}
        }
    }

    /// Finishes send `id` if nothing is outstanding any more.
    fn check_send_done(&mut self, id: u64) {
        if self.sends.get(&id).is_some_and(SendReq::done) {
            self.finish_send(id);
        }
    }

    /// The receiver's FIN for CMA send `id` (`matched`: it also matched it).
    fn on_fin(&mut self, id: u64, matched: bool) {
        if !self.splits.is_empty() {
            self.settle_split(id);
        }
        let Some(r) = self.sends.get_mut(&id) else {
            tracing::warn!(id, "FIN for an unknown send ignored");
            return;
        };
        if !r.fin {
            return;
        }
        r.fin = false;
        if matched {
            r.ack = false;
        }
        if r.done() {
            self.finish_send(id);
        }
    }

    /// The receiver matched synchronous send `id`.
    fn on_ack(&mut self, id: u64) {
        let Some(r) = self.sends.get_mut(&id) else {
            tracing::warn!(id, "match acknowledgement for an unknown send ignored");
            return;
        };
        if !r.ack {
            return;
        }
        r.ack = false;
        if r.done() {
            self.finish_send(id);
        }
    }

    /// Records completed user receive `key` in the feed (once).
    fn record_recv(&mut self, key: u64) {
        if let Some(r) = self.requests.get_mut(key) {
            feed_once(r, key, &mut self.feed, &mut self.feed_queued);
        }
    }

    /// A request whose feed state was `fed` was handed to its waiter (and
    /// removed): it is not reported by the feed. Drops the feed's dead
    /// entries when they outnumber the live ones.
    fn unfeed(&mut self, fed: Fed) {
        if fed != Fed::Queued {
            return;
        }
        self.feed_queued -= 1;
        if self.feed.len() > 64 && self.feed.len() > 2 * self.feed_queued {
            let (sends, requests) = (&self.sends, &self.requests);
            self.feed.retain(|&(id, send)| {
                let fed = if send {
                    sends.get(&id).map(|r| r.fed)
                } else {
                    requests.get(id).map(|r| r.fed)
                };
                fed == Some(Fed::Queued)
            });
        }
    }

    /// Blocks until send `id` completes and removes it; returns its owned
    /// buffer. While it waits for a FIN, crossed CMA messages are pulled
    /// aside (their FINs returned) so ranks that rendezvous-send to each
    /// other before receiving all finish.
    fn wait_send_id(&mut self, id: u64) -> Result<Option<Vec<u8>>> {
        // Already complete (the common case when an upper layer collects
        // what `take_completed` reported): one lookup, no progress.
        let dest = match self.sends.entry(id) {
            std::collections::hash_map::Entry::Occupied(o) if o.get().done() => {
                let r = o.remove();
                self.unfeed(r.fed);
                return Ok(r.owned);
            }
            std::collections::hash_map::Entry::Occupied(o) => o.get().dest,
            std::collections::hash_map::Entry::Vacant(_) => {
                return Err(Error::InvalidArgument("unknown send request"))
            }
        };
        let r = self.block(Watch::One(dest), |ep| {
            let (done, fin) = match ep.sends.get(&id) {
                Some(r) => (r.done(), r.fin),
                None => return Err(Error::InvalidArgument("unknown send request")),
            };
            if done {
                return Ok((Some(()), 1));
            }
            let mut ev = ep.progress()?;
            if fin {
                ev += ep.relieve_rendezvous();
            }
            Ok((
                ep.sends.get(&id).is_some_and(SendReq::done).then_some(()),
                ev,
            ))
        });
        match r {
            Ok(()) => {
                let r = self.sends.remove(&id);
                self.unfeed(r.as_ref().map_or(Fed::No, |r| r.fed));
                Ok(r.and_then(|r| r.owned))
            }
            Err(e) => {
                // A live receiver may still read (or a staged fragment still
                // need) the buffer: keep it until then.
                let keep = self.sends.get(&id).is_some_and(|r| {
                    (r.fin || r.frags) && self.node.segment().check_alive(r.dest).is_ok()
                });
                match self.sends.get_mut(&id) {
                    Some(r) if keep => r.orphan = true,
                    _ => {
                        let fed = self.sends.remove(&id).map_or(Fed::No, |r| r.fed);
                        self.unfeed(fed);
                    }
                }
                Err(e)
            }
        }
    }

    /// Publishes a CMA rendezvous header for `data` (send `id`): the
    /// receiver reads it in place and answers with a FIN.
    fn publish_cma(&mut self, dest: u32, tmpl: Header, data: &[u8], id: u64, why: &'static str) {
        let mut h = tmpl;
        h.kind = KIND_CMA;
        h.word = data.as_ptr() as u64;
        h.ext[..8].copy_from_slice(&id.to_le_bytes());
        if data.len() as u64 >= self.node.config().cma_split {
            h.flags |= FLAG_SPLIT;
            if self
                .splits
                .insert(id, (dest, data.as_ptr() as usize, data.len()))
                .is_none()
            {
                self.split_out[dest as usize] += 1;
            }
        }
        self.counters.cma_sends += 1;
        tracing::debug!(
            dest,
            len = data.len(),
            sync = tmpl.flags & FLAG_SYNC != 0,
            "{why}"
        );
        self.enqueue(dest, h);
    }

    /// Copies `data` to an eager block and publishes `tmpl` for it if the
    /// eager area has room now; `false` (nothing done) if it has not.
    fn try_eager(&mut self, dest: u32, tmpl: Header, data: &[u8]) -> bool {
        let seg = self.node.segment();
        match eager_block(seg, &mut self.eager, data, tmpl) {
            Some(h) => {
                self.counters.buffered_sends += 1;
                tracing::trace!(dest, len = data.len(), "buffered (eager) send");
                self.enqueue(dest, h);
                true
            }
            None => false,
        }
    }

    /// Copies `data` to an eager block and publishes `tmpl` for it, or holds
    /// it locally (never blocks).
    fn send_eager(&mut self, dest: u32, tmpl: Header, data: &[u8]) {
        let seg = self.node.segment();
        let p = &mut self.peers[dest as usize];
        let hdr = if p.staged.is_empty() {
            eager_block(seg, &mut self.eager, data, tmpl)
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

    /// Drains inbound rings, pushes queued sends and reclaims eager buffers.
    /// Returns how many events happened (0 = nothing to do).
    pub fn progress(&mut self) -> Result<usize> {
        self.progress_for(&mut [])
    }

    /// One progress pass; a message matched to the receive of the blocked
    /// `recv`/`try_recv` call (if any) is delivered into `buf`.
    fn progress_for(&mut self, buf: &mut [u8]) -> Result<usize> {
        self.progress_want(None, buf).map(|(n, _)| n)
    }

    /// The ring part of a progress pass: up to [`POLL_BUDGET`] headers
    /// from each inbound ring, each handled as soon as it is taken (see
    /// [`Endpoint::progress_want`]). Returns how many it took.
    fn poll_rings(
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
                let Some(mut h) = p.inb.poll(ring) else { break };
                // The ring identifies the sender; never trust the field.
                h.source = s;
                events += 1;
                let data = if h.kind == KIND_INLINE_EXT {
                    match self.take_ext_for(s, &h, *want, buf)? {
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
    /// allows it ([`Offload::consume_arrival`]: no receive queued, nothing
    /// parked; the caller checked that no queued message matches `want`).
    /// Returns the events and that receive's result.
    fn progress_want(
        &mut self,
        mut want: Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<(usize, Option<Result<Status>>)> {
        let mut got = None;
        let mut events = 0;
        if !self.late.is_empty() {
            events += self.copy_late(buf);
        }
        if !self.deferred.is_empty() {
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
        if self.off.parked_len() == 0 {
            let (me, size) = {
                let seg = self.node.segment();
                (seg.rank(), seg.size())
            };
            self.batch_cma = self.cma_batch;
            let polled = self.poll_rings(me, size, &mut want, &mut got, buf);
            self.batch_cma = false;
            events += polled?;
            if !self.late.is_empty() {
                events += self.copy_late(buf);
            }
        }
        if !self.requests.engine.is_empty() {
            events += self.poll_engine(buf)?;
        }
        if events == 0 && !self.splits.is_empty() {
            // Only a pass with nothing of its own to do helps a receiver
            // copy: a busy one leaves the offer, which the receiver then
            // withdraws (both ranks copying their own messages already).
            events += self.serve_splits();
        }
        if self.uncopied > 0 {
            events += self.relieve_pressure();
        }
        if events > 0 {
            self.counters.unexpected_max = self
                .counters
                .unexpected_max
                .max(self.off.unexpected_len() as u64);
        }
        for d in 0..self.size() {
            events += self.flush_peer(d);
        }
        if self.eager.in_flight() > 0 {
            events += self.eager.reclaim(released(self.node.segment()));
        }
        if events == 0 && !self.store.is_empty() {
            events += self.idle_with_unexpected();
        } else {
            self.idle_passes = 0;
        }
        let staged = self.peers.iter().any(|p| {
            p.staged
                .iter()
                .any(|s| matches!(s, Staged::Data { .. } | Staged::Frag { .. }))
        });
        if staged != self.pressure {
            self.pressure = staged;
            self.node.segment().set_eager_pressure(staged);
            tracing::debug!(pressure = staged, "eager-pressure flag changed");
        }
        Ok((events, got))
    }

    /// Delivers inline-ext message `h`, just polled from `source`'s ring
    /// and taken by the blocked receive, straight from its continuation
    /// slots into `buf` (`min(nbytes, buf.len())` bytes; the whole
    /// continuation is consumed either way).
    #[inline(always)]
    fn deliver_ext(&mut self, source: u32, h: Header, buf: &mut [u8]) -> Result<Status> {
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
        let inb = &mut self.peers[source as usize].inb;
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

    /// One header from a ring (its `source` set from the ring): a FIN or
    /// ACK for our sends, a fragment, or a message for the model. With
    /// `want` (a blocked receive that is not posted), the first message
    /// matching it is delivered into `buf` directly if the model allows
    /// ([`Endpoint::take_direct`]), its result left in `got`; `want` is
    /// cleared at the first matching message either way (a later one must
    /// not overtake it).
    #[inline(always)]
    fn handle_header(
        &mut self,
        h: Header,
        data: Option<Vec<u8>>,
        want: &mut Option<MatchSpec>,
        got: &mut Option<Result<Status>>,
        buf: &mut [u8],
    ) -> Result<()> {
        if h.kind == KIND_FIN {
            self.peers[h.source as usize].ctl_in += 1;
            self.on_fin(h.word, h.flags & FLAG_MATCHED != 0);
            return Ok(());
        }
        if h.kind == KIND_ACK {
            self.peers[h.source as usize].ctl_in += 1;
            self.on_ack(h.word);
            return Ok(());
        }
        if h.kind == KIND_CANCEL || h.kind == KIND_CANCELLED {
            self.peers[h.source as usize].ctl_in += 1;
            return self.on_cancel_header(&h);
        }
        if let Some(spec) = *want {
            if spec.matches(&envelope(&h)) {
                *want = None;
                let direct = matches!(h.kind, KIND_INLINE | KIND_EAGER | KIND_INLINE_EXT);
                if direct && self.take_direct(&h)? {
                    let r = self.deliver(h, data, buf);
                    if matches!(&r, Ok(st) if st.truncated()) {
                        self.counters.truncated += 1;
                    }
                    *got = Some(r);
                    return Ok(());
                }
            }
        }
        if h.kind == KIND_FRAG {
            // The last fragment completes a message: it arrives then.
            return match self.take_fragment(h, buf) {
                Some(u) => self.arrive(u.hdr, u.data, buf),
                None => Ok(()),
            };
        }
        self.arrive(h, data, buf)
    }

    /// `try_recv`'s quick look, when nothing is posted, queued or parked:
    /// takes the next header of the ring(s) `spec` can match (one header
    /// at most) and delivers it into `buf` if it is the receive's message.
    fn poll_direct(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Quick> {
        let seg = self.node.segment();
        let me = seg.rank();
        let n = seg.size();
        // ANY_SOURCE looks at the rings round-robin, so that a flooding
        // sender does not starve the others.
        let (first, count) = match spec.source {
            Source::Rank(pe) => (pe, 1),
            Source::Any => {
                self.rr = (self.rr + 1) % n;
                (self.rr, n)
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
    /// message (not synchronous, well formed) that `spec` matches and the
    /// model lets the receive take it ([`Endpoint::take_direct`]), it is
    /// taken and copied into `buf` here, as [`Endpoint::poll_one`] and
    /// [`Endpoint::deliver`] would (same counters, status and release of
    /// the eager block). Otherwise the header stays in the ring (`None`)
    /// for the general path. The caller checked that nothing is posted,
    /// queued or parked and the source is not under eager pressure.
    // Always inlined: its large result, returned through memory, cost a
    // store-forwarding stall per receive in the caller.
    #[inline(always)]
    fn take_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Result<Status>>> {
        let Source::Rank(s) = spec.source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        let me = seg.rank();
        if s == me || s >= seg.size() {
            return Ok(None);
        }
        let Some(mut h) = self.peers[s as usize].inb.peek(seg.ring(s, me)) else {
            return Ok(None);
        };
        // The ring identifies the sender; never trust the field.
        h.source = s;
        let msg_len = h.nbytes as usize;
        let well_formed = match h.kind {
            KIND_INLINE => usize::from(h.aux) == msg_len && msg_len <= INLINE_MAX,
            KIND_INLINE_EXT => true,
            KIND_EAGER => eager_src(self.node.config().eager_bytes, &h).is_ok(),
            _ => false,
        };
        if !well_formed
            || h.flags & FLAG_SYNC != 0
            || !spec.matches(&envelope(&h))
            || !self.take_direct(&h)?
        {
            return Ok(None);
        }
        let seg = self.node.segment();
        self.peers[s as usize].inb.skip(seg.ring(s, me));
        if h.kind == KIND_EAGER && msg_len as u64 <= PREFETCH_MAX {
            self.prefetch_next_eager(s);
        }
        let n = msg_len.min(buf.len());
        match h.kind {
            KIND_INLINE_EXT => return Ok(Some(self.deliver_ext(s, h, buf))),
            KIND_INLINE => copy_inline(&h, &mut buf[..n]),
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
    fn prefetch_next_eager(&self, s: u32) {
        let seg = self.node.segment();
        let Some(next) = self.peers[s as usize]
            .inb
            .peek_ahead(seg.ring(s, seg.rank()))
        else {
            return;
        };
        if next.kind != KIND_EAGER {
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
    fn poll_one(&mut self, s: u32, want: &mut Option<MatchSpec>, buf: &mut [u8]) -> Result<Quick> {
        let seg = self.node.segment();
        let me = seg.rank();
        let Some(h) = self.peers[s as usize].inb.poll(seg.ring(s, me)) else {
            return Ok(Quick::Empty);
        };
        self.poll_one_got(s, h, want, buf)
    }

    /// [`Endpoint::poll_one`] for header `h` just taken from `s`'s ring.
    #[inline(never)]
    fn poll_one_got(
        &mut self,
        s: u32,
        mut h: Header,
        want: &mut Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<Quick> {
        let me = self.rank();
        h.source = s;
        let data = if h.kind == KIND_INLINE_EXT {
            if let Some(spec) = *want {
                if spec.matches(&envelope(&h)) {
                    // Taken here, or the normal way: nothing later may
                    // overtake it.
                    *want = None;
                    if self.take_direct(&h)? {
                        return Ok(Quick::Taken(self.deliver_ext(s, h, buf)));
                    }
                }
            }
            if self.arrive_ext_posted(s, &h, buf)? {
                return Ok(Quick::Other);
            }
            let seg = self.node.segment();
            take_ext_vec(&mut self.peers[s as usize].inb, seg.ring(s, me), &h)
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
    fn drain_source(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Result<Status>>> {
        let seg = self.node.segment();
        let pressured = match spec.source {
            Source::Rank(pe) => seg.eager_pressure(pe),
            Source::Any => (0..seg.size()).any(|pe| seg.eager_pressure(pe)),
        };
        if pressured || self.off.parked_len() != 0 {
            return Ok(None);
        }
        let me = seg.rank();
        let n = seg.size();
        let (first, count) = match spec.source {
            Source::Rank(pe) => (pe, 1),
            Source::Any => (0, n),
        };
        if self.off.unexpected_len() == 0 && self.off.posted_len() == 0 {
            // Nothing queued or posted: the fast path may take the front.
            if let Some(r) = self.take_now(spec, buf)? {
                return Ok(Some(r));
            }
        }
        // A queued message could match: only the model may choose.
        let mut want = (self.off.unexpected_len() == 0).then_some(spec);
        for i in 0..count {
            let s = (first + i) % n;
            if s == me {
                continue;
            }
            for _ in 0..POLL_BUDGET {
                if want.is_none()
                    && self.off.unexpected_len() == 0
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
                if want.is_none() && self.off.posted_len() == 0 {
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

    /// For a waiter outside this endpoint's lock: a handle on `source`'s
    /// header ring into this rank and the index of the next header this
    /// endpoint will take from it. While [`ArrivalWatch::published`] says
    /// `false` for that index, no new header has come from `source`, so a
    /// blocked receive from it can spin on the watch instead of taking its
    /// lock for a progress pass. `None` for this rank itself (self-sends use
    /// no ring) or a rank out of range.
    pub fn arrival_watch(&self, source: u32) -> Option<(ArrivalWatch, u64)> {
        let seg = self.node.segment();
        if source == seg.rank() || source >= seg.size() {
            return None;
        }
        let next = self.peers[source as usize].inb.consumed();
        Some((seg.arrival_watch(source, seg.rank()), next))
    }

    /// Whether a receive for `spec` into `capacity` bytes may ever be
    /// advertised to its sender (the prepost protocol is on, an exact
    /// other source, a buffer beyond inline size and at least
    /// `TMX_SHMEM_PREPOST_MIN`); `post` adds a free slot in that sender's
    /// prepost ring and the model its own rules.
    fn advertisable(&self, spec: MatchSpec, capacity: usize) -> bool {
        self.prepost
            && matches!(spec.source, Source::Rank(src) if src != self.rank())
            && capacity > INLINE_MAX
            && capacity as u64 >= self.node.config().prepost_min
    }

    /// Work of our own that a progress pass does besides reading rings:
    /// sends held locally, copies owed to a pressured sender, preposts.
    fn local_work(&self) -> bool {
        self.uncopied > 0
            || !self.late.is_empty()
            || !self.splits.is_empty()
            || self.pressure
            || !self.requests.engine.is_empty()
            || self
                .peers
                .iter()
                .any(|p| p.out.pending() > 0 || !p.staged.is_empty())
    }

    /// Whether the model lets a blocked, unposted receive take arrival `h`
    /// directly ([`Offload::consume_arrival`]); if so, `h` is accounted
    /// for (counted in the phase if its sender counted it). A counted
    /// message the tag layout cannot carry takes the normal path.
    // Always inlined: every fast path runs it per message; the sync it may
    // make due (once per `sync_interval` messages at most) is out of line.
    #[inline(always)]
    fn take_direct(&mut self, h: &Header) -> Result<bool> {
        let counted = h.flags & FLAG_COUNTED != 0;
        // `TagLayout::encode` would accept the envelope (three comparisons).
        let (max_context, max_rank, max_tag) = self.layout_max;
        let fits = h.context <= max_context && h.source <= max_rank && h.tag <= max_tag;
        if (counted && !fits) || !self.off.consume_arrival(counted) {
            return Ok(false);
        }
        // A sync the count made due: store it in our phase now.
        if self.off.has_output() {
            self.run_actions()?;
        }
        Ok(true)
    }

    /// The progress pass's handling of the continuation of inline-ext
    /// message `h`, just taken from `s`'s ring: `None` if a posted receive
    /// waiting for it took it straight from the slots
    /// ([`Endpoint::arrive_ext_posted`]; not the blocked call's own
    /// message, `want`), otherwise its payload copied out for the general
    /// path (out of line: the inline messages' loop stays lean).
    #[inline(never)]
    fn take_ext_for(
        &mut self,
        s: u32,
        h: &Header,
        want: Option<MatchSpec>,
        buf: &mut [u8],
    ) -> Result<Option<Option<Vec<u8>>>> {
        if want.is_none_or(|spec| !spec.matches(&envelope(h)))
            && self.arrive_ext_posted(s, h, buf)?
        {
            return Ok(None);
        }
        let seg = self.node.segment();
        Ok(Some(take_ext_vec(
            &mut self.peers[s as usize].inb,
            seg.ring(s, seg.rank()),
            h,
        )))
    }

    /// [`Endpoint::arrive`] for inline-ext message `h`, just taken from
    /// `s`'s ring (its continuation slots not yet consumed), when a
    /// software receive is waiting for it and it is not synchronous: the
    /// model takes that receive as `arrive` would, and the payload goes
    /// from the continuation slots straight into the receive's buffer
    /// ([`Endpoint::deliver_ext`]; `buf` for the blocked call's receive),
    /// with no intermediate vector. Same status, counters and completion
    /// as the general path (`take_ext_vec`, then `arrive` and `deliver`).
    /// `false`, with nothing consumed or changed, otherwise.
    #[inline(never)]
    fn arrive_ext_posted(&mut self, s: u32, h: &Header, buf: &mut [u8]) -> Result<bool> {
        if h.flags & FLAG_SYNC != 0 {
            return Ok(false);
        }
        let env = envelope(h);
        let counted = h.flags & FLAG_COUNTED != 0;
        if counted && self.layout.encode(env).is_err() {
            return Ok(false);
        }
        let Some((_, recv)) = self.off.take_matching_posted(&env, counted) else {
            return Ok(false);
        };
        // The continuation is consumed first, whatever happens next.
        let mut back = None;
        let result = match self.requests.get_mut(recv) {
            None => {
                // Abandoned receive: consumed as the general path does.
                let seg = self.node.segment();
                let data =
                    take_ext_vec(&mut self.peers[s as usize].inb, seg.ring(s, seg.rank()), h);
                let _ = self.deliver(*h, data, &mut []);
                None
            }
            Some(req) => Some(match &mut req.buf {
                ReqBuf::Caller => self.deliver_ext(s, *h, buf),
                ReqBuf::Owned(v) => {
                    let mut v = core::mem::take(v);
                    let r = self.deliver_ext(s, *h, &mut v);
                    back = Some(v);
                    r
                }
            }),
        };
        if let Some(result) = result {
            if result.is_err() {
                // (`deliver` counts a malformed message as received too.)
                self.counters.received += 1;
            }
            self.finish_recv_with(recv, result, back);
        }
        // A sync the count made due: store it in our phase now.
        while let Some(a) = self.off.poll_action() {
            self.execute(a)?;
        }
        Ok(true)
    }

    /// Hands one message from a header ring to the offload model: as an
    /// engine-unexpected message (counted in the phase) if the sender
    /// counted it, otherwise as one that bypassed the engine. A receive it
    /// completes is delivered (into `buf` for the blocked call's receive).
    ///
    /// The common case (a software receive waiting for it) is inlined into
    /// [`Endpoint::handle_header`], on the header and data as they came (the
    /// [`Unexpected`] is built only to be stored); the rest is
    /// [`Endpoint::arrive_queued`].
    #[inline(always)]
    fn arrive(&mut self, hdr: Header, data: Option<Vec<u8>>, buf: &mut [u8]) -> Result<()> {
        let env = envelope(&hdr);
        let counted = hdr.flags & FLAG_COUNTED != 0;
        // The common case first: a software receive is waiting for it. The
        // model takes that receive as `arrive` would, and the message goes
        // straight into it (no store, no queued completion).
        if !counted || self.layout.encode(env).is_ok() {
            if let Some((_, recv)) = self.off.take_matching_posted(&env, counted) {
                // A sync the count made due: store it in our phase now.
                while let Some(a) = self.off.poll_action() {
                    self.execute(a)?;
                }
                self.complete_stored(recv, hdr, data, buf);
                return Ok(());
            }
        }
        self.arrive_queued(Unexpected { hdr, data }, env, counted, buf)
    }

    /// [`Endpoint::arrive`] for a message no software receive takes at
    /// once: stored and handed to the model.
    #[inline(never)]
    fn arrive_queued(
        &mut self,
        u: Unexpected,
        env: Envelope,
        counted: bool,
        buf: &mut [u8],
    ) -> Result<()> {
        if u.hdr.kind == KIND_EAGER && u.data.is_none() {
            self.uncopied += 1;
        }
        let key = self.store.insert(u);
        match (counted, self.layout.encode(env)) {
            (true, Ok(tag)) => self.off.handle_event(EngineEvent::Unexpected {
                tag,
                msg: Msg::Stored(key),
                sync_request: false,
            })?,
            (true, Err(_)) => {
                // The layout cannot carry it, so the model cannot count it:
                // our phase stays behind from now on and senders ignore our
                // preposts (safe). See the README ("what remains").
                tracing::warn!(?env, "counted message outside the tag layout");
                self.off.arrive(env, Msg::Stored(key))?;
            }
            (false, _) => self.off.arrive(env, Msg::Stored(key))?,
        }
        self.pump(buf)
    }

    /// Executes the offload model's actions and handles its completions
    /// until it has nothing more to say.
    fn pump(&mut self, buf: &mut [u8]) -> Result<()> {
        loop {
            if let Some(a) = self.off.poll_action() {
                self.execute(a)?;
            } else if let Some(c) = self.off.poll_completion() {
                self.complete(c, buf)?;
            } else {
                return Ok(());
            }
        }
    }

    /// Executes the offload actions waiting (out of line: a sync is due
    /// once per `sync_interval` messages at most).
    #[cold]
    #[inline(never)]
    fn run_actions(&mut self) -> Result<()> {
        while let Some(a) = self.off.poll_action() {
            self.execute(a)?;
        }
        Ok(())
    }

    /// Executes one offload action on our prepost rings and phase.
    fn execute(&mut self, a: tm_match::Action) -> Result<()> {
        let seg = self.node.segment();
        let me = seg.rank();
        let phase = seg.phase(me);
        match a {
            tm_match::Action::Sync { count } => phase.apply(count),
            tm_match::Action::Add {
                handle,
                entry,
                count,
            } => {
                phase.apply(count);
                let Some(e) = self.requests.engine.get_mut(&handle) else {
                    return Err(Error::InvalidArgument(
                        "offload model added a receive the endpoint did not offload",
                    ));
                };
                let p = Prepost {
                    tag: entry.tag,
                    mask: entry.mask,
                    count,
                    capacity: e.capacity,
                    offset: e.addr,
                    cookie: handle.to_bits(),
                    flags: 0,
                };
                let peer = &mut self.peers[e.peer as usize];
                // `can_post` was checked when the receive was posted; if the
                // slot is still busy the entry is simply never published (a
                // later delete of it succeeds at once).
                e.index = peer.poster.post(seg.prepost(me, e.peer), &p).ok();
                if e.index.is_some() {
                    self.counters.preposts += 1;
                    tracing::trace!(peer = e.peer, "receive preposted");
                }
            }
            tm_match::Action::Delete { handle, count } => {
                phase.apply(count);
                let Some(e) = self.requests.engine.get_mut(&handle) else {
                    return Err(Error::InvalidArgument(
                        "offload model deleted a receive the endpoint does not hold",
                    ));
                };
                let outcome = match e.index {
                    None => Withdraw::Withdrawn,
                    Some(i) => {
                        let ring = seg.prepost(me, e.peer);
                        self.peers[e.peer as usize].poster.withdraw(ring, i)
                    }
                };
                match outcome {
                    Withdraw::Withdrawn => {
                        if e.index.is_some() {
                            self.counters.preposts_withdrawn += 1;
                        }
                        self.requests.engine.remove(&handle);
                        self.off.handle_event(EngineEvent::Deleted {
                            handle,
                            sync_request: false,
                        })?;
                    }
                    // The sender is writing: its DONE is picked up by
                    // `poll_engine`, then reported as matched + delete failed.
                    Withdraw::Claimed => e.deleting = true,
                    Withdraw::Done(word) => {
                        let e = *e;
                        self.requests.engine.remove(&handle);
                        self.engine_matched(handle, &e, word)?;
                        self.off
                            .handle_event(EngineEvent::DeleteFailed { handle })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Reports a prepost the sender completed as an engine match.
    fn engine_matched(&mut self, handle: RecvId, e: &EngineEntry, word: u64) -> Result<()> {
        let tag = (word >> 32) as u32 & 0x7fff_ffff;
        let env = Envelope {
            context_id: e.context,
            source: e.peer,
            tag,
        };
        // A failed write carries no tag: report the entry's own spec.
        let tag = self.layout.encode(env).map_err(|_| Error::BadHeader {
            source_pe: e.peer,
            reason: "prepost result tag outside the tag layout",
        })?;
        self.off.handle_event(EngineEvent::Matched {
            handle,
            tag,
            msg: Msg::Direct(word),
        })?;
        Ok(())
    }

    /// Picks up preposts their senders completed. Returns how many.
    fn poll_engine(&mut self, buf: &mut [u8]) -> Result<usize> {
        let seg = self.node.segment();
        let me = seg.rank();
        let done: Vec<(RecvId, EngineEntry, u64)> = self
            .requests
            .engine
            .iter()
            .filter_map(|(&id, e)| {
                let i = e.index?;
                match self.peers[e.peer as usize]
                    .poster
                    .state(seg.prepost(me, e.peer), i)
                {
                    PostState::Done(word) => Some((id, *e, word)),
                    _ => None,
                }
            })
            .collect();
        for (id, e, word) in &done {
            self.requests.engine.remove(id);
            self.engine_matched(*id, e, *word)?;
            if e.deleting {
                self.off
                    .handle_event(EngineEvent::DeleteFailed { handle: *id })?;
            }
        }
        if !done.is_empty() {
            self.pump(buf)?;
        }
        Ok(done.len())
    }

    /// Handles one completion of the offload model.
    fn complete(&mut self, c: Completion<u64, Msg>, buf: &mut [u8]) -> Result<()> {
        match c {
            Completion::Matched { recv, env, msg, .. } => match msg {
                Msg::Stored(k) => {
                    let u = self.take_stored(k)?;
                    self.complete_stored(recv, u.hdr, u.data, buf);
                }
                Msg::Direct(word) => self.complete_direct(recv, env, word, buf),
            },
            Completion::Queued { .. } => self.counters.unexpected += 1,
            Completion::Cancelled { recv, .. } => {
                self.counters.cancelled_recvs += 1;
                self.finish_recv(recv, Ok(Status::cancelled()));
            }
            Completion::CancelFailed { .. } => {}
        }
        Ok(())
    }

    /// Receive `recv` matched the message of header `hdr` (and `data`)
    /// from a header ring (or a self-send): delivers it into the request's
    /// buffer (`buf` for the blocked call's receive) and completes the
    /// request.
    ///
    /// The inline fast path is inlined, on the header as it came (no
    /// [`Unexpected`] built); the rest is
    /// [`Endpoint::complete_stored_slow`].
    #[inline(always)]
    fn complete_stored(&mut self, recv: u64, hdr: Header, data: Option<Vec<u8>>, buf: &mut [u8]) {
        // The common case of the posted-receive path: a well-formed,
        // non-synchronous inline message into an `irecv`'s own buffer.
        // Exactly what `deliver` and `finish_recv_with` do for it (same
        // copy, status, counters and feed entry), in one lookup, with no
        // buffer taken out and put back and no result passed around.
        let h = &hdr;
        let msg_len = h.nbytes as usize;
        if h.kind == KIND_INLINE
            && h.flags & FLAG_SYNC == 0
            && usize::from(h.aux) == msg_len
            && msg_len <= INLINE_MAX
        {
            if let Some(req) = self.requests.get_mut(recv) {
                if let ReqBuf::Owned(v) = &mut req.buf {
                    let n = msg_len.min(v.len());
                    copy_inline(h, &mut v[..n]);
                    let st = delivered(&mut self.counters, h.source, h, n, v.len());
                    set_done(&mut req.done, Ok(st));
                    req.id = None;
                    feed_once(req, recv, &mut self.feed, &mut self.feed_queued);
                    return;
                }
            }
        }
        self.complete_stored_slow(recv, Unexpected { hdr, data }, buf);
    }

    /// [`Endpoint::complete_stored`] in general: through [`Endpoint::deliver`].
    #[inline(never)]
    fn complete_stored_slow(&mut self, recv: u64, u: Unexpected, buf: &mut [u8]) {
        let Some(req) = self.requests.get_mut(recv) else {
            // The receive was abandoned (its call failed): consume the
            // message so that its sender's eager block is released (or its
            // CMA send gets the FIN).
            let _ = self.deliver(u.hdr, u.data, &mut []);
            return;
        };
        if (self.late_ok
            || (self.late_posted && req.user)
            || (self.batch_cma && !split_size(&u.hdr, &req.buf, self.node.config().cma_split)))
            && u.hdr.kind == KIND_CMA
            && u.data.is_none()
            && matches!(req.buf, ReqBuf::Owned(_))
        {
            // Matched as a nonblocking receive was posted: the copy waits
            // for the next progress pass, and the request, now pending,
            // reports its completion then. Matched in a progress pass: the
            // copy waits for the end of the pass, to be read together
            // with the others of the pass.
            if self.late_ok {
                req.user = true;
            }
            // Matched: no handle in the model any more (until the copy, a
            // cancel answers "not cancelled" without asking the model).
            req.id = None;
            self.late.push_back((recv, u));
            return;
        }
        // An owned buffer taken out for the delivery, put back by
        // `finish_recv_with` (one lookup for both).
        let mut back = None;
        let result = match &mut req.buf {
            ReqBuf::Caller => self.deliver(u.hdr, u.data, buf),
            ReqBuf::Owned(v) => {
                let mut v = core::mem::take(v);
                let r = self.deliver(u.hdr, u.data, &mut v);
                back = Some(v);
                r
            }
        };
        if matches!(&result, Ok(st) if st.truncated()) {
            self.counters.truncated += 1;
        }
        self.finish_recv_with(recv, result, back);
    }

    /// Receive `recv` was written by its sender through a prepost
    /// (`word`: the prepost result word): completes it.
    fn complete_direct(&mut self, recv: u64, env: Envelope, word: u64, buf: &[u8]) {
        let Some(req) = self.requests.get_mut(recv) else {
            return;
        };
        let result = if word & RESULT_FAILED != 0 {
            Err(Error::PrepostWriteFailed { pe: env.source })
        } else {
            let len = (word & 0xffff_ffff) as usize;
            let cap = match &req.buf {
                ReqBuf::Owned(v) => v.len(),
                ReqBuf::Caller => buf.len(),
            };
            self.counters.received += 1;
            if len > cap {
                // The claimer checked the capacity: a peer bug.
                Err(Error::BadHeader {
                    source_pe: env.source,
                    reason: "prepost result longer than the receive buffer",
                })
            } else {
                Ok(Status {
                    source: env.source,
                    tag: env.tag,
                    context: env.context_id,
                    len,
                    msg_len: len,
                    cancelled: false,
                })
            }
        };
        self.finish_recv_with(recv, result, None);
    }

    /// Marks receive `key` complete (to the feed if it is the user's).
    fn finish_recv(&mut self, key: u64, result: Result<Status>) {
        self.finish_recv_with(key, result, None);
    }

    /// [`Endpoint::finish_recv`] that also puts back the owned buffer
    /// `back` taken out for the delivery.
    #[inline]
    fn finish_recv_with(&mut self, key: u64, result: Result<Status>, back: Option<Vec<u8>>) {
        let Some(req) = self.requests.get_mut(key) else {
            return;
        };
        if let Some(v) = back {
            req.buf = ReqBuf::Owned(v);
        }
        set_done(&mut req.done, boxed(result));
        req.id = None;
        feed_once(req, key, &mut self.feed, &mut self.feed_queued);
    }

    /// Takes a queued unexpected message out of the store.
    fn take_stored(&mut self, key: u64) -> Result<Unexpected> {
        let u = self.store.remove(&key).ok_or(Error::InvalidArgument(
            "matcher returned a message the endpoint does not hold",
        ))?;
        if u.hdr.kind == KIND_EAGER && u.data.is_none() {
            self.uncopied -= 1;
        }
        Ok(u)
    }

    /// Takes one fragment of the message being received from its sender;
    /// returns the message once whole. While no receive is known, the
    /// fragments stay in the sender's eager area ([`AsmTarget::Held`], one
    /// `uncopied` message, copied out under eager pressure). Once the
    /// message is bound to match a receive (see [`Endpoint::bind_target`];
    /// checked at every fragment), what arrived so far and every later
    /// fragment are copied straight into that receive's buffer
    /// ([`AsmTarget::Bound`]: `buf`, the blocked `recv`'s, or an `irecv`'s
    /// owned one). A message complete while still held arrives held
    /// ([`FLAG_HELD`]): the receive that matches it copies it once, from
    /// the sender's eager area.
    fn take_fragment(&mut self, mut h: Header, buf: &mut [u8]) -> Option<Unexpected> {
        // Local markers only: never taken from the wire.
        h.flags &= !(FLAG_IN_PLACE | FLAG_HELD);
        let seg = self.node.segment();
        let area = self.node.config().eager_bytes;
        let src = h.source as usize;
        if h.flags & FLAG_FIRST != 0 {
            if let Some(old) = self.peers[src].assembly.take() {
                tracing::warn!(
                    source = h.source,
                    "fragmented message restarted before completion"
                );
                drop_assembly(seg, area, &mut self.uncopied, old);
            }
            self.uncopied += 1;
            self.peers[src].assembly = Some(Assembly {
                hdr: h,
                got: 0,
                into: AsmTarget::Held(Vec::new()),
            });
        }
        let Some(mut a) = self.peers[src].assembly.take() else {
            tracing::warn!(
                source = h.source,
                "fragment without a first fragment ignored"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            return None;
        };
        let total = a.hdr.nbytes as usize;
        let n = eager_len(&h) as usize;
        // The receive it was bound to gave up (an error): what was copied
        // into its buffer is gone.
        let lost = matches!(a.into, AsmTarget::Bound { key, ptr, cap, owned }
            if bound_dst(&mut self.requests, self.blocked_recv, (key, ptr, cap, owned), buf).is_none());
        if lost || a.got.saturating_add(n) > total || eager_src(area, &h).is_err() {
            tracing::warn!(
                source = h.source,
                lost,
                "malformed or abandoned fragmented message: marked corrupt"
            );
            let _ = get_eager(seg, area, &h, &mut []);
            let hdr = a.hdr;
            drop_assembly(seg, area, &mut self.uncopied, a);
            // The receive reports it: an incomplete message with no data.
            return Some(Unexpected { hdr, data: None });
        }
        if !matches!(a.into, AsmTarget::Bound { .. }) {
            if let Some(target) = self.bind_target(&a.hdr, buf) {
                let AsmTarget::Bound {
                    key,
                    ptr,
                    cap,
                    owned,
                } = target
                else {
                    return None; // bind_target returns Bound only
                };
                if let Some(dst) = bound_dst(
                    &mut self.requests,
                    self.blocked_recv,
                    (key, ptr, cap, owned),
                    buf,
                ) {
                    let k = a.got.min(dst.len());
                    match core::mem::replace(&mut a.into, target) {
                        AsmTarget::Held(frags) => {
                            copy_fragments(seg, area, &frags, dst);
                            self.uncopied -= 1;
                        }
                        AsmTarget::Private(v) => dst[..k].copy_from_slice(&v[..k]),
                        AsmTarget::Bound { .. } => {}
                    }
                    tracing::debug!(
                        source = h.source,
                        moved = k,
                        owned,
                        "pipelined message bound to its receive: copied in place"
                    );
                }
            }
        }
        // Bounds were checked just above; the copies cannot fail.
        match &mut a.into {
            AsmTarget::Held(frags) => frags.push(h),
            AsmTarget::Private(v) => {
                if v.capacity() == 0 {
                    v.reserve_exact(total);
                }
                let _ = get_eager_append(seg, area, &h, v);
            }
            AsmTarget::Bound {
                key,
                ptr,
                cap,
                owned,
            } => {
                let t = (*key, *ptr, *cap, *owned);
                if let Some(dst) = bound_dst(&mut self.requests, self.blocked_recv, t, buf) {
                    let (lo, hi) = (a.got.min(*cap), (a.got + n).min(*cap));
                    let _ = get_eager(seg, area, &h, &mut dst[lo..hi]);
                }
            }
        }
        a.got += n;
        if a.got < total {
            self.peers[src].assembly = Some(a);
            return None;
        }
        let mut hdr = a.hdr;
        let data = match a.into {
            AsmTarget::Held(frags) => {
                // Stays counted in `uncopied` until delivered or copied out.
                hdr.flags |= FLAG_HELD;
                self.held.insert((hdr.source, hdr.word), frags);
                None
            }
            AsmTarget::Private(v) => Some(v),
            AsmTarget::Bound { ptr, cap, .. } => {
                self.counters.pipelined_in_place += 1;
                self.in_place.push((ptr, cap));
                hdr.flags |= FLAG_IN_PLACE;
                None
            }
        };
        Some(Unexpected { hdr, data })
    }

    /// The receive a fragmented message with first header `h` is bound to
    /// match when it arrives, as an [`AsmTarget::Bound`], if its buffer can
    /// take the fragments now: the oldest posted receive that matches the
    /// message, provided it names the sender (no other source's message can
    /// take it first; nothing else from that sender comes before this
    /// message's last fragment, whose counted first fragment keeps the
    /// sender from trusting a prepost until then), is not advertised as a
    /// prepost (a sender may have written an earlier message straight into
    /// it, its DONE not seen yet), and is the blocked `recv`'s (its `buf`:
    /// nothing is posted or cancelled while it blocks) or an `irecv`'s
    /// owned buffer (later receives are younger; `cancel_recv` refuses a
    /// bound receive). `try_recv`'s receive is never bound (it returns at
    /// once).
    fn bind_target(&self, h: &Header, buf: &[u8]) -> Option<AsmTarget> {
        let env = envelope(h);
        let pending = |r: &Req| r.done.is_none() && r.id.is_some() && r.spec.matches(&env);
        let (key, r) = self
            .requests
            .reqs
            .iter()
            .chain(self.requests.caller.iter().map(|(k, r)| (*k, r)))
            .filter(|(_, r)| pending(r))
            .min_by_key(|(k, _)| *k)?;
        let offloaded =
            r.id.is_some_and(|id| self.requests.engine.contains_key(&id));
        if offloaded || r.spec.source != Source::Rank(h.source) {
            return None;
        }
        match &r.buf {
            ReqBuf::Caller if self.blocked_recv == Some(key) => Some(AsmTarget::Bound {
                key,
                ptr: buf.as_ptr() as usize,
                cap: buf.len(),
                owned: false,
            }),
            ReqBuf::Owned(v) => Some(AsmTarget::Bound {
                key,
                ptr: v.as_ptr() as usize,
                cap: v.len(),
                owned: true,
            }),
            ReqBuf::Caller => None,
        }
    }

    /// Whether a fragmented message is being copied into receive `key`.
    fn is_bound(&self, key: u64) -> bool {
        self.peers.iter().any(|p| {
            matches!(p.assembly, Some(Assembly { into: AsmTarget::Bound { key: k, .. }, .. }) if k == key)
        })
    }

    fn get_eager(&self, h: &Header, dst: &mut [u8]) -> Result<()> {
        get_eager(self.node.segment(), self.node.config().eager_bytes, h, dst)
    }

    /// Copies out the unexpected eager messages of senders that wait for
    /// eager space, freeing their blocks. Returns how many were copied.
    fn relieve_pressure(&mut self) -> usize {
        let mut copied = 0;
        let seg = self.node.segment();
        let area = self.node.config().eager_bytes;
        // Held chunks of a pipelined message keep `uncopied` above zero
        // for its whole transfer: skip the scans while no one is pressed.
        if !(0..seg.size()).any(|pe| seg.eager_pressure(pe)) {
            return 0;
        }
        for u in self.store.values_mut() {
            if u.hdr.kind != KIND_EAGER || u.data.is_some() || !seg.eager_pressure(u.hdr.source) {
                continue;
            }
            let h = u.hdr;
            let mut v = vec![0u8; h.nbytes as usize];
            // A malformed header keeps `None`: its receive reports the error.
            if get_eager(seg, area, &h, &mut v).is_ok() {
                u.data = Some(v);
                self.uncopied -= 1;
                copied += 1;
            }
        }
        // Fragmented messages whose data is still held in such a sender's
        // eager area: arrived ones and ones still being received.
        for u in self.store.values_mut() {
            if u.hdr.kind != KIND_FRAG
                || u.hdr.flags & FLAG_HELD == 0
                || u.data.is_some()
                || !seg.eager_pressure(u.hdr.source)
            {
                continue;
            }
            if let Some(frags) = self.held.remove(&(u.hdr.source, u.hdr.word)) {
                let mut v = vec![0u8; u.hdr.nbytes as usize];
                copy_fragments(seg, area, &frags, &mut v);
                u.data = Some(v);
                u.hdr.flags &= !FLAG_HELD;
                self.uncopied -= 1;
                copied += 1;
            }
        }
        for (s, p) in self.peers.iter_mut().enumerate() {
            let Some(a) = p.assembly.as_mut() else {
                continue;
            };
            if !seg.eager_pressure(s as u32) {
                continue;
            }
            if let AsmTarget::Held(frags) = &a.into {
                let mut v = Vec::with_capacity(a.hdr.nbytes as usize);
                v.resize(a.got, 0);
                copy_fragments(seg, area, frags, &mut v);
                a.into = AsmTarget::Private(v);
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

    /// Receives the oldest message matching `spec` into `buf` if one has
    /// arrived; never blocks (but does run one progress pass). Never
    /// preposted.
    pub fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        self.check_source(spec)?;
        self.undefer()?;
        // A receive posted now can match at once only a queued unexpected
        // message (`Offload::post` looks nowhere else). With none queued
        // (and none parked behind a delete), the pass runs first with
        // nothing posted: what arrives either matches an earlier-posted
        // receive (which MPI's order prefers anyway) or is queued, and only
        // then is this receive posted, against the queue. An idle poll (a
        // blocking receive's spin) then costs one pass, not a post, a pass
        // and a cancel in the matcher. Not while a sender it may receive
        // from is under eager pressure: the pass would copy an eager
        // arrival out of that sender's area before the receive takes it.
        let seg = self.node.segment();
        let pressured = match spec.source {
            Source::Rank(pe) => seg.eager_pressure(pe),
            Source::Any => (0..seg.size()).any(|pe| seg.eager_pressure(pe)),
        };
        let mut pass = true;
        if !pressured && self.matcher_empty() {
            // The quick look first: the next header of the source's ring.
            if let Some(r) = self.take_now(spec, buf)? {
                self.idle_polls = 0;
                return r.map(Some);
            }
            match self.poll_direct(spec, buf)? {
                Quick::Taken(r) => {
                    self.idle_polls = 0;
                    return r.map(Some);
                }
                Quick::Other => self.idle_polls = 0,
                Quick::Empty => {
                    // A spinning receive runs the full pass (other rings,
                    // FINs, reclaim) every IDLE_FULL_PASS-th empty look,
                    // or at once when it has sends or copies of its own.
                    self.idle_polls = self.idle_polls.wrapping_add(1);
                    if self.idle_polls % IDLE_FULL_PASS != 0 && !self.local_work() {
                        return Ok(None);
                    }
                }
            }
        }
        if !pressured && self.off.unexpected_len() == 0 && self.off.parked_len() == 0 {
            // Nothing queued can match: the first matching arrival of this
            // pass is taken directly when nothing is posted either.
            let (_, got) = self.progress_want(Some(spec), buf)?;
            if let Some(r) = got {
                return r.map(Some);
            }
            if self.off.unexpected_len() == 0 {
                return Ok(None);
            }
            pass = false;
        }
        let (key, id) = self.post(spec, ReqBuf::Caller, 0, false, (false, false), buf)?;
        let r = match id {
            Some(_) if pass => self.progress_for(buf).map(|_| ()),
            _ => Ok(()),
        };
        if let Some(done) = self.take_done(key) {
            return done.map(Some);
        }
        // Not matched: a software-only receive is cancelled at once.
        if let Some(id) = id {
            let _ = self.off.cancel(id);
        }
        self.requests.remove(key);
        r?;
        Ok(None)
    }

    /// Receives the oldest message matching `spec` (MPI rules; wildcards
    /// allowed) into `buf`, blocking until one arrives. Fails with
    /// [`Error::PeerDied`] if the peer it waits for (any peer, for
    /// `ANY_SOURCE`) dies first. A message longer than `buf` is not an
    /// error: exactly `buf.len()` bytes are written, the message is
    /// consumed, and the status says `msg_len > len` ([`Status::truncated`]).
    /// `spec.source` may be this rank (self-sends).
    ///
    /// With the prepost protocol on, an exact-source receive that finds no
    /// message is advertised to its sender, which may write the message
    /// straight into `buf`.
    pub fn recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Status> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        if !self.advertisable(spec, buf.len())
            && buf.len() as u64 <= self.node.config().pipeline_min
        {
            // Never preposted, and too small for a pipelined message to be
            // copied into it chunk by chunk: poll as `try_recv` does (its
            // quick look at the source's ring, no post and cancel per pass).
            return self.block(watch, |ep| Ok((ep.try_recv(spec, buf)?, 0)));
        }
        let addr = buf.as_mut_ptr() as u64;
        let (key, id) = self.post(spec, ReqBuf::Caller, addr, true, (false, false), buf)?;
        if let Some(done) = self.take_done(key) {
            return done;
        }
        let Some(id) = id else {
            return Err(Error::InvalidArgument("receive neither queued nor matched"));
        };
        self.counters.posted_recvs += 1;
        // A pipelined message bound to match this receive is copied
        // straight into `buf` (see `take_fragment`).
        self.blocked_recv = Some(key);
        let r = self.block(watch, |ep| {
            let ev = ep.progress_for(buf)?;
            // A receive completes only through an event of this pass.
            if ev == 0 {
                return Ok((None, 0));
            }
            Ok((ep.take_done(key), ev))
        });
        self.blocked_recv = None;
        match r {
            Ok(done) => done,
            Err(e) => {
                self.abandon(key, id, buf);
                Err(e)
            }
        }
    }

    /// Starts a nonblocking receive into `buf` (the endpoint owns it until
    /// [`Endpoint::wait`] hands it back). With the prepost protocol on, an
    /// exact-source receive is advertised to its sender when the matching
    /// rules allow (see the crate README).
    pub fn irecv(&mut self, spec: MatchSpec, mut buf: Vec<u8>) -> Result<RecvRequest> {
        self.check_source(spec)?;
        self.undefer()?;
        let addr = buf.as_mut_ptr() as u64;
        self.late_ok = true;
        let posted = self.post(spec, ReqBuf::Owned(buf), addr, true, (true, true), &mut []);
        self.late_ok = false;
        let (key, id) = posted?;
        if id.is_some() {
            self.counters.posted_recvs += 1;
        }
        Ok(RecvRequest(key))
    }

    /// [`Endpoint::irecv`] for a caller that wants a receive that matches at
    /// once back at once: `Err((result, buf))` when it matched a message
    /// that had already arrived (the result [`Endpoint::wait`] would give,
    /// and the buffer; nothing is recorded and nothing will be reported);
    /// `Ok(request)` is a pending request exactly as [`Endpoint::irecv`]
    /// returns it.
    ///
    /// **Deferred receives** (`TMX_SHMEM_DEFER_RECV`, on by default): an
    /// exact-source receive that is never advertised and finds its source's
    /// ring empty and the matcher empty (nothing posted, queued or parked)
    /// is not posted: it waits in a list, oldest first, with the later ones
    /// of the same kind. Progress, and the next `irecv_or_done`, complete
    /// them from the front of the ring as a receive that found its message
    /// would be (no matcher entry, no match against a posted list); the
    /// moment the front message is not the oldest deferred receive's, or the
    /// matcher holds anything, all of them are posted in order, and every
    /// call that matches against the matcher's queues (a probe, `recv`,
    /// `try_recv`, `irecv`, a cancel, `wait`, `finalize`) posts them first.
    /// A message leaves the ring only into a deferred receive or the
    /// matcher, and the matcher matches nothing while any is deferred, so
    /// the result is a schedule in which they were posted when made, as MPI
    /// orders it. `tests/deferred.rs` checks MPI's order rules on random
    /// programs with deferral on and off.
    #[allow(clippy::type_complexity)]
    pub fn irecv_or_done(
        &mut self,
        spec: MatchSpec,
        mut buf: Vec<u8>,
    ) -> Result<core::result::Result<RecvRequest, (Result<Status>, Vec<u8>)>> {
        self.check_source(spec)?;
        if !self.deferred.is_empty() {
            // Older deferred receives first: their messages, then (if any
            // is left) either this one joins them or they are posted. The
            // common case, nothing arrived and nothing to post, is the
            // first test `take_deferred` would make, answered here without
            // the call (a window of receives made before its messages).
            if !self.deferred_quiet() {
                self.take_deferred()?;
            }
            if !self.deferred.is_empty() {
                if self.may_defer(spec, buf.len()) && spec.source == Source::Rank(self.deferred_src)
                {
                    return Ok(Ok(self.defer(spec, buf)));
                }
                self.post_deferred()?;
            }
        }
        // What has arrived from the source goes to the model first, so that
        // a receive whose message is already here completes in this call
        // (taken straight into `buf` when nothing posted or queued could
        // claim it first).
        self.late_posted = true;
        let drained = self.drain_source(spec, &mut buf);
        self.late_posted = false;
        if let Some(result) = drained? {
            return Ok(Err((result, buf)));
        }
        if self.may_defer(spec, buf.len()) {
            if let Source::Rank(s) = spec.source {
                if self.ring_empty(s) {
                    self.deferred_src = s;
                    return Ok(Ok(self.defer(spec, buf)));
                }
            }
        }
        if !self.advertisable(spec, buf.len()) {
            // Never offered to the sender (`post` would find it not
            // eligible): queued in software at once when no queued message
            // could match it, exactly as `post` would queue it, without its
            // general outcome handling.
            let key = self.next_id;
            if let Ok(id) = self.off.post_software(spec, key)? {
                self.next_id += 1;
                let req = Req {
                    spec,
                    buf: ReqBuf::Owned(buf),
                    done: None,
                    id: Some(id),
                    user: true,
                    fed: Fed::No,
                };
                match self.requests.reqs.vacant(key) {
                    Some(slot) => slot.fill(req),
                    None => self.requests.reqs.insert(key, req),
                }
                if self.off.has_output() {
                    self.pump(&mut [])?;
                }
                self.counters.posted_recvs += 1;
                return Ok(Ok(RecvRequest(key)));
            }
        }
        let addr = buf.as_mut_ptr() as u64;
        self.late_ok = true;
        let posted = self.post(spec, ReqBuf::Owned(buf), addr, true, (true, false), &mut []);
        self.late_ok = false;
        let (key, id) = posted?;
        if id.is_some() {
            self.counters.posted_recvs += 1;
            return Ok(Ok(RecvRequest(key)));
        }
        if self.late.back().is_some_and(|&(k, _)| k == key) {
            return Ok(Ok(RecvRequest(key)));
        }
        match self.requests.remove_if_done(key) {
            Some(req) => {
                let buf = match req.buf {
                    ReqBuf::Owned(v) => v,
                    ReqBuf::Caller => Vec::new(),
                };
                let result = match req.done {
                    Some(d) => unbox(d),
                    None => Err(Error::InvalidArgument("receive request not complete")),
                };
                Ok(Err((result, buf)))
            }
            None => Err(Error::InvalidArgument("receive neither queued nor matched")),
        }
    }

    /// The receive half of [`Endpoint::irecv_or_done`] that completes at
    /// once, into the caller's `buf`: if a message that a receive for `spec`
    /// posted now would match has already arrived, it is received into
    /// `buf` (as [`Endpoint::recv`] does: a longer message fills `buf` and
    /// says so in the status) and its status returned; otherwise
    /// `Ok(None)`, and nothing was received or posted (arrivals may have
    /// moved from the rings to the matcher's queues). A caller that then
    /// wants the receive to wait calls [`Endpoint::irecv_or_done`] with a
    /// buffer of its own.
    ///
    /// For an upper layer that unpacks a small message (a datatype receive)
    /// from a buffer on its stack instead of a staging buffer it must keep
    /// with the request. Unlike [`Endpoint::try_recv`] it neither posts the
    /// deferred receives nor runs a progress pass: a miss costs one look at
    /// the source's ring (and, with messages queued, one post and cancel
    /// in the matcher), and deferral stays as it was. While an older
    /// deferred receive is still waiting, nothing is taken (the matcher
    /// matches nothing while any is deferred).
    // Inlined: its result, returned through memory, was copied on in
    // overlapping pieces that stalled store forwarding in the caller.
    #[inline]
    pub fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if let Some(st) = self.recv_arrived(spec, buf)? {
            return Ok(Some(st));
        }
        self.check_source(spec)?;
        if !self.deferred.is_empty() {
            self.take_deferred()?;
            if !self.deferred.is_empty() {
                return Ok(None);
            }
        }
        if let Some(r) = self.drain_source(spec, buf)? {
            return r.map(Some);
        }
        if self.off.unexpected_len() == 0 && self.off.parked_len() == 0 {
            // Nothing queued could match (and what was in the ring that
            // could went to the queue or was taken above).
            return Ok(None);
        }
        // A queued message may match: the receive is posted against the
        // queue (no pass), and withdrawn if it did not match at once.
        let (key, id) = self.post(spec, ReqBuf::Caller, 0, false, (false, false), buf)?;
        if let Some(done) = self.take_done(key) {
            return done.map(Some);
        }
        if let Some(id) = id {
            let _ = self.off.cancel(id);
        }
        self.requests.remove(key);
        Ok(None)
    }

    /// The arrived fast path of [`Endpoint::irecv_or_done`] (and of
    /// [`Endpoint::recv_now`]): a receive whose message is already the next
    /// header of its source's ring, in the one case where nothing can come
    /// between them. If
    /// - `spec` names one other rank, no deferred receive is waiting, the
    ///   matcher holds nothing (posted, queued or parked) and the source is
    ///   not under eager pressure, and
    /// - the next header of that rank's ring is an inline, inline-ext or
    ///   eager message (well formed, not synchronous) that `spec` matches,
    ///   that fits `buf` whole, and that the model lets a receive take
    ///   directly (the private `take_direct` check),
    ///
    /// the message is received into `buf[..len]` and its status returned.
    /// This is what `irecv_or_done` would do in that case (its
    /// `take_now`): same counters, same model accounting, same status.
    /// Otherwise `Ok(None)` and nothing was taken; the caller goes on to
    /// `irecv_or_done`, which decides every other case.
    ///
    /// It exists for its cost: no request, no staging, a small result, and
    /// no large `Result` moved through memory (the general call costs about
    /// twice its instructions for the same message; see the adi README).
    #[inline(always)]
    pub fn recv_arrived(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if !self.deferred.is_empty() {
            return Ok(None);
        }
        self.take_front(spec, buf)
    }

    /// [`Endpoint::recv_arrived`] for a consumer that reads the payload
    /// where it lies instead of having it copied into a buffer: a datatype
    /// receive that unpacks straight from the sender's eager block (one
    /// copy less than receiving into a staging buffer and unpacking from
    /// there).
    ///
    /// The same conditions as [`Endpoint::recv_arrived`], with `cap` for
    /// the buffer's length, and one more: the message is an eager one (in
    /// a block; inline messages are left to the copying calls). Then
    /// `f` is called once with the whole payload (the message's `len`
    /// bytes, at most `cap`), the block is released after it returns, and
    /// the status is returned. Otherwise `Ok(None)`: nothing was taken and
    /// `f` was not called.
    ///
    /// `f` reads memory the sender wrote and will reuse once the block is
    /// released; it runs before that, and must not keep the slice.
    pub fn recv_arrived_with(
        &mut self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<Status>> {
        if !self.deferred.is_empty() {
            return Ok(None);
        }
        let Some((s, h)) = self.eager_front(spec, cap)? else {
            return Ok(None);
        };
        self.consume_front(s, &h, f).map(Some)
    }

    /// Takes eager message `h` from the front of `s`'s ring (checked and
    /// counted by [`Endpoint::eager_front`]): `f` reads its payload where
    /// it lies, then the block is released. Returns its status.
    fn consume_front(&mut self, s: u32, h: &Header, f: &mut dyn FnMut(&[u8])) -> Result<Status> {
        let seg = self.node.segment();
        let me = seg.rank();
        self.peers[s as usize].inb.skip(seg.ring(s, me));
        let len = h.nbytes as usize;
        // Cannot fail: `eager_front` checked the block.
        let src = eager_src(self.node.config().eager_bytes, h)? as usize;
        // SAFETY: [src, src + len) is inside the sender's eager area
        // (`eager_src` checked src + len <= area); the sender wrote it
        // before publishing the header we acquired, and does not write it
        // again before we raise the release flag below, after `f` has
        // returned (the slice does not outlive this call).
        let payload = unsafe { core::slice::from_raw_parts(seg.eager_ptr(s).add(src), len) };
        if len <= IN_PLACE_PREFETCH_STREAM
            || self.peers[s as usize].inb.peek(seg.ring(s, me)).is_none()
        {
            prefetch::read_range(payload.as_ptr(), len);
        }
        f(payload);
        eager_flag(seg, s, h.word).store(1, Ordering::Release);
        self.counters.received += 1;
        Ok(Status {
            source: s,
            tag: h.tag,
            context: h.context,
            len,
            msg_len: len,
            cancelled: false,
        })
    }

    /// [`Endpoint::irecv_or_done`] with a consumer for the payload: if the
    /// receive is deferred (see [`Endpoint::irecv_or_done`]) and its
    /// message then comes as an eager block at the front of its source's
    /// ring, the drain of deferred receives calls `consumer` once with the
    /// payload where it lies (as [`Endpoint::recv_arrived_with`] does) and
    /// completes the receive with `buf` untouched. In every other case
    /// (not deferred, posted later, another kind of message) the consumer
    /// is dropped uncalled and the message is copied into `buf` as
    /// [`Endpoint::irecv_or_done`] copies it. The caller tells the two
    /// apart by what its consumer recorded.
    #[allow(clippy::type_complexity)] // as `irecv_or_done`'s
    pub fn irecv_or_done_in_place(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        consumer: InPlace,
    ) -> Result<core::result::Result<RecvRequest, (Result<Status>, Vec<u8>)>> {
        let r = self.irecv_or_done(spec, buf)?;
        if let Ok(req) = &r {
            if self.deferred.back() == Some(&req.0) {
                if self.deferred.len() == 1 {
                    // Nothing older is deferred: whatever is kept is stale.
                    self.consumers.clear();
                }
                self.consumers.push_back(PayloadConsumer(req.0, consumer));
            }
        }
        Ok(r)
    }

    /// Completes the oldest deferred receive, `key`, whose payload its
    /// consumer read in place: `buf` back untouched, status `st` (what
    /// [`Endpoint::take_deferred`] does for a copied message).
    #[inline(never)]
    fn finish_deferred_in_place(&mut self, key: u64, st: Status, buf: Vec<u8>) {
        self.deferred.pop_front();
        if self.feed.is_empty() {
            self.requests.remove(key);
            self.ready.push(RecvFinished {
                id: key,
                result: Ok(st),
                buf,
            });
        } else {
            self.finish_recv_with(key, Ok(st), Some(buf));
        }
    }

    /// The drain's in-place take for deferred receive `key` (the oldest),
    /// whose message is at the front of the ring: if it has a consumer and
    /// that message is an eager one it may take (of at most `cap` bytes),
    /// the consumer reads it where it lies and the status is returned.
    /// The consumer is dropped either way (the caller copies the message
    /// or posts the receive), and so are stale ones (of receives no longer
    /// deferred).
    #[inline(never)]
    fn take_in_place(&mut self, key: u64, spec: MatchSpec, cap: usize) -> Result<Option<Status>> {
        while self.consumers.front().is_some_and(|c| c.0 < key) {
            self.consumers.pop_front();
        }
        if self.consumers.front().is_none_or(|c| c.0 != key) {
            return Ok(None);
        }
        // Taken here or not, the consumer's turn is now: a front message
        // it cannot read goes the copying way or posts the receive.
        let Some(PayloadConsumer(_, mut consumer)) = self.consumers.pop_front() else {
            return Ok(None);
        };
        let Some((s, h)) = self.eager_front(spec, cap)? else {
            return Ok(None);
        };
        self.consume_front(s, &h, &mut *consumer).map(Some)
    }

    /// Whether a receive for `spec` could be taken at the front of its
    /// source's ring when its message comes ([`Endpoint::recv_arrived`]'s
    /// conditions that do not depend on the message): an exact source
    /// other than this rank, no deferred receive waiting, the matcher
    /// holding nothing, and the source not under eager pressure. While it
    /// is `false`, waiting for [`Endpoint::recv_arrived_with`] to succeed
    /// is pointless: take the general path.
    pub fn front_open(&self, spec: MatchSpec) -> bool {
        let Source::Rank(s) = spec.source else {
            return false;
        };
        let seg = self.node.segment();
        s != seg.rank()
            && s < seg.size()
            && self.deferred.is_empty()
            && self.matcher_empty()
            && !seg.eager_pressure(s)
    }

    /// The eager message at the front of `spec`'s source's ring, if a
    /// receive of `cap` bytes may take it there ([`Endpoint::recv_arrived`]'s
    /// conditions but the first), with its source. Past a `Some` the model
    /// has counted the message as taken (`take_direct`): the caller must
    /// take it.
    ///
    /// [`Endpoint::take_front`] keeps its own copy of these tests: built on
    /// this function (a `Header` returned through memory), the deferred
    /// receives of a bi-directional window lost 5–11% at 256 B – 4 KiB
    /// (A-B-B-A, session 23).
    #[inline(always)]
    fn eager_front(&mut self, spec: MatchSpec, cap: usize) -> Result<Option<(u32, Header)>> {
        let Source::Rank(s) = spec.source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        let me = seg.rank();
        if s == me || s >= seg.size() || !self.matcher_empty() || seg.eager_pressure(s) {
            return Ok(None);
        }
        let ring = seg.ring(s, me);
        let Some(mut h) = self.peers[s as usize].inb.peek_ahead(ring) else {
            return Ok(None);
        };
        // The ring identifies the sender; never trust the field.
        h.source = s;
        if h.kind != KIND_EAGER
            || eager_src(self.node.config().eager_bytes, &h).is_err()
            || h.nbytes as usize > cap
            || h.flags & FLAG_SYNC != 0
            || !spec.matches(&envelope(&h))
            || !self.take_direct(&h)?
        {
            return Ok(None);
        }
        Ok(Some((s, h)))
    }

    /// [`Endpoint::recv_arrived`] without its first condition (no deferred
    /// receive): for the oldest deferred receive itself
    /// ([`Endpoint::take_deferred`]), which nothing else may come before.
    #[inline(always)]
    fn take_front(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        let Source::Rank(s) = spec.source else {
            return Ok(None);
        };
        let seg = self.node.segment();
        let me = seg.rank();
        if s == me || s >= seg.size() || !self.matcher_empty() || seg.eager_pressure(s) {
            return Ok(None);
        }
        let ring = seg.ring(s, me);
        let Some(mut h) = self.peers[s as usize].inb.peek_ahead(ring) else {
            return Ok(None);
        };
        // The ring identifies the sender; never trust the field.
        h.source = s;
        let len = h.nbytes as usize;
        let whole = match h.kind {
            KIND_INLINE => usize::from(h.aux) == len && len <= INLINE_MAX,
            KIND_INLINE_EXT => len > INLINE_MAX && ext_slots(len - INLINE_MAX) < ring.capacity(),
            KIND_EAGER => eager_src(self.node.config().eager_bytes, &h).is_ok(),
            _ => false,
        };
        if !whole
            || len > buf.len()
            || h.flags & FLAG_SYNC != 0
            || !spec.matches(&envelope(&h))
            || !self.take_direct(&h)?
        {
            return Ok(None);
        }
        let seg = self.node.segment();
        let ring = seg.ring(s, me);
        let inb = &mut self.peers[s as usize].inb;
        inb.skip(ring);
        let dst = &mut buf[..len];
        if h.kind == KIND_INLINE {
            copy_inline(&h, dst);
        } else if h.kind == KIND_INLINE_EXT {
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

    /// Whether a nonblocking receive for `spec` into `capacity` bytes may
    /// be deferred now: deferral is on, an exact other source, never
    /// advertised to its sender, and the model empty (nothing posted,
    /// queued or parked: the receive would be queued at the end of an
    /// empty posted list, which a deferred receive stands for).
    #[inline]
    fn may_defer(&self, spec: MatchSpec, capacity: usize) -> bool {
        let Source::Rank(s) = spec.source else {
            return false;
        };
        self.defer_recv
            && s != self.rank()
            && self.matcher_empty()
            && !self.advertisable(spec, capacity)
    }

    /// Whether the matcher holds nothing: no receive posted, no message
    /// queued, nothing parked (what [`Endpoint::take_now`] requires).
    #[inline]
    fn matcher_empty(&self) -> bool {
        self.off.posted_len() == 0 && self.off.unexpected_len() == 0 && self.off.parked_len() == 0
    }

    /// Whether `s`'s header ring into this rank holds no header now.
    #[inline]
    fn ring_empty(&mut self, s: u32) -> bool {
        let seg = self.node.segment();
        self.peers[s as usize]
            .inb
            .peek(seg.ring(s, seg.rank()))
            .is_none()
    }

    /// Records a deferred receive: a request, no model entry.
    #[inline]
    fn defer(&mut self, spec: MatchSpec, buf: Vec<u8>) -> RecvRequest {
        let key = self.next_id;
        self.next_id += 1;
        let req = Req {
            spec,
            buf: ReqBuf::Owned(buf),
            done: None,
            id: None,
            user: true,
            fed: Fed::No,
        };
        match self.requests.reqs.vacant(key) {
            Some(slot) => slot.fill(req),
            None => self.requests.reqs.insert(key, req),
        }
        self.deferred.push_back(key);
        self.counters.deferred_recvs += 1;
        RecvRequest(key)
    }

    /// Completes deferred receives, oldest first, with the messages at the
    /// front of their source's ring, as a receive posted then would have
    /// been ([`Endpoint::take_now`]: nothing posted or queued could claim
    /// them first). Stops at an empty ring (the rest stay deferred: no
    /// message they could match exists yet); posts them all
    /// ([`Endpoint::post_deferred`]) as soon as the front message is not
    /// the oldest one's, or the model holds anything. Returns how many
    /// completed.
    /// Whether [`Endpoint::take_deferred`] would do nothing now: the
    /// matcher empty, the deferred receives' source not under eager
    /// pressure, and its ring empty (its own first test, inline).
    #[inline(always)]
    fn deferred_quiet(&mut self) -> bool {
        let s = self.deferred_src;
        self.matcher_empty() && !self.node.segment().eager_pressure(s) && self.ring_empty(s)
    }

    fn take_deferred(&mut self) -> Result<usize> {
        let mut done = 0;
        while let Some(&key) = self.deferred.front() {
            let s = self.deferred_src;
            if !self.matcher_empty() || self.node.segment().eager_pressure(s) {
                self.post_deferred()?;
                return Ok(done);
            }
            if self.ring_empty(s) {
                // No message yet: they stay deferred (the common case of
                // a window of receives posted before the peer sends).
                return Ok(done);
            }
            let Some(req) = self.requests.get_mut(key) else {
                // Removed meanwhile (cannot happen: deferred requests are
                // only removed through this list).
                self.deferred.pop_front();
                continue;
            };
            let spec = req.spec;
            let mut buf = match &mut req.buf {
                ReqBuf::Owned(v) => core::mem::take(v),
                ReqBuf::Caller => Vec::new(),
            };
            // An eager message for a receive with a consumer, read where
            // it lies (out of line: the copying path below stays as lean
            // as it was; sharing it cost `bibw` 64–128 B 5%).
            if !self.consumers.is_empty() {
                match self.take_in_place(key, spec, buf.len()) {
                    Ok(Some(st)) => {
                        self.finish_deferred_in_place(key, st, buf);
                        done += 1;
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        if let Some(req) = self.requests.get_mut(key) {
                            req.buf = ReqBuf::Owned(buf);
                        }
                        return Err(e);
                    }
                }
            }
            // An inline, inline-ext or eager message that fits by the
            // short path (`take_front`, small result), the rest (a
            // truncated one, CMA, fragments) as `take_now` takes it.
            let taken = match self.take_front(spec, &mut buf) {
                Ok(Some(st)) => Ok(Some(Ok(st))),
                Ok(None) => self.take_now(spec, &mut buf),
                Err(e) => Err(e),
            };
            match taken {
                Ok(Some(result)) => {
                    self.deferred.pop_front();
                    if self.feed.is_empty() {
                        // Straight to the finished list (see `ready`).
                        self.requests.remove(key);
                        self.ready.push(RecvFinished {
                            id: key,
                            result: boxed(result),
                            buf,
                        });
                    } else {
                        self.finish_recv_with(key, result, Some(buf));
                    }
                    done += 1;
                }
                taken => {
                    // The front message is not the oldest deferred
                    // receive's (or not one it may take directly), or the
                    // look failed: the buffer goes back first.
                    if let Some(req) = self.requests.get_mut(key) {
                        req.buf = ReqBuf::Owned(buf);
                    }
                    taken?;
                    self.post_deferred()?;
                    return Ok(done);
                }
            }
        }
        Ok(done)
    }

    /// Copies the CMA messages of [`Endpoint::late`] into their receives
    /// (and returns their FINs), completing the receives; returns how many.
    #[inline(never)]
    fn copy_late(&mut self, buf: &mut [u8]) -> usize {
        let read = if self.late.len() > 1 {
            self.read_late()
        } else {
            0
        };
        let mut n = 0;
        while let Some((key, u)) = self.late.pop_front() {
            self.cma_done = n < read;
            self.complete_stored_slow(key, u, buf);
            self.cma_done = false;
            n += 1;
        }
        n
    }

    /// Reads the first messages of `late` that come from one sender, as
    /// many as [`LATE_BATCH`], in one `process_vm_readv` call into their
    /// receives' own buffers; returns how many it read whole. It stops at
    /// the first message it cannot read that way (another sender, a split
    /// copy, no buffer of its own, nothing to read); those after it, and
    /// any the call did not read whole, are read one by one by
    /// `deliver`.
    #[inline(never)]
    fn read_late(&mut self) -> usize {
        let split_min = self.node.config().cma_split;
        let Some(src) = self.late.front().map(|(_, u)| u.hdr.source) else {
            return 0;
        };
        let mut dst: Vec<std::io::IoSliceMut<'_>> =
            Vec::with_capacity(self.late.len().min(LATE_BATCH));
        let mut pieces = Vec::with_capacity(dst.capacity());
        for (key, u) in self.late.iter().take(LATE_BATCH) {
            let h = &u.hdr;
            if h.kind != KIND_CMA || h.source != src || u.data.is_some() {
                break;
            }
            // The map or the caller slot: the receive `irecv_or_done`
            // made, which joined `late` as it was posted, stays there.
            let Some(Req { buf, .. }) = self.requests.get_mut(*key) else {
                break;
            };
            if split_size(h, buf, split_min) {
                // A split copy is read with the sender's help instead.
                break;
            }
            let ReqBuf::Owned(v) = buf else {
                break;
            };
            let n = (h.nbytes as usize).min(v.len());
            if n == 0 {
                break;
            }
            // SAFETY: `v` is the buffer of pending request `key`, which
            // no other entry of `late` names (a receive matches once); it
            // is neither moved nor touched until the call below returns
            // (this function holds `self` and does nothing else), and `n`
            // is at most its length.
            let slice = unsafe { core::slice::from_raw_parts_mut(v.as_mut_ptr(), n) };
            dst.push(std::io::IoSliceMut::new(slice));
            pieces.push(nix::sys::uio::RemoteIoVec {
                base: h.word as usize,
                len: n,
            });
        }
        if dst.len() < 2 {
            return 0;
        }
        let Ok(mut got) = self.node.cma_readv(src, &mut dst, &pieces) else {
            return 0;
        };
        let mut whole = 0;
        for p in &pieces {
            if got < p.len {
                break;
            }
            got -= p.len;
            whole += 1;
        }
        self.counters.cma_batches += 1;
        self.counters.cma_batched += whole as u64;
        tracing::trace!(
            source = src,
            messages = whole,
            of = pieces.len(),
            "CMA messages read in one call"
        );
        whole
    }

    /// Posts every deferred receive to the model, oldest first, as
    /// `irecv_or_done` would have posted them when they were made: from
    /// then on they match like any posted receive. A receive whose post
    /// fails completes with the error (the first error is returned).
    #[inline(never)]
    fn post_deferred(&mut self) -> Result<()> {
        // Posted receives take their messages the copying way.
        self.consumers.clear();
        let mut first_err = None;
        while let Some(key) = self.deferred.pop_front() {
            let Some(spec) = self.requests.get(key).map(|r| r.spec) else {
                continue;
            };
            if let Err(e) = self.post_existing(key, spec) {
                self.finish_recv_with(
                    key,
                    Err(Error::InvalidArgument(
                        "deferred receive could not be posted",
                    )),
                    None,
                );
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Posts recorded receive `key` (a deferred one: its request exists,
    /// never advertised) to the model.
    fn post_existing(&mut self, key: u64, spec: MatchSpec) -> Result<()> {
        match self.off.post(spec, key, false)? {
            PostOutcome::Queued { id, .. } => {
                self.counters.posted_recvs += 1;
                if let Some(req) = self.requests.get_mut(key) {
                    req.id = Some(id);
                }
                self.pump(&mut [])
            }
            PostOutcome::Matched { msg, env, .. } => self.complete_at_post(key, msg, env, &mut []),
        }
    }

    /// Completes receive `key`, which matched queued message `msg` when it
    /// was posted (`PostOutcome::Matched`).
    fn complete_at_post(
        &mut self,
        key: u64,
        msg: Msg,
        env: Envelope,
        buf: &mut [u8],
    ) -> Result<()> {
        self.complete(
            Completion::Matched {
                id: RecvId::from_bits(u64::MAX),
                recv: key,
                env,
                msg,
            },
            buf,
        )
    }

    /// Puts the receives of [`Endpoint::ready`] back into the request
    /// table as completed requests queued in the feed, ahead of what the
    /// feed holds (they completed first): for the calls that look a
    /// receive up by id.
    #[inline]
    fn unready(&mut self) {
        if !self.ready.is_empty() {
            self.unready_all();
        }
    }

    #[cold]
    fn unready_all(&mut self) {
        let mut feed = Vec::with_capacity(self.ready.len() + self.feed.len());
        for f in self.ready.drain(..) {
            let req = Req {
                // Not used again: the request is complete.
                spec: MatchSpec {
                    context_id: 0,
                    source: Source::Any,
                    tag: tm_proto::Tag::Any,
                },
                buf: ReqBuf::Owned(f.buf),
                done: Some(f.result),
                id: None,
                user: true,
                fed: Fed::Queued,
            };
            self.requests.reqs.insert(f.id, req);
            feed.push((f.id, false));
            self.feed_queued += 1;
        }
        feed.append(&mut self.feed);
        self.feed = feed;
    }

    /// Posts the deferred receives, if any, before an operation that
    /// matches against the model (a probe, a blocking or plain receive, a
    /// cancel, a wait) or ends the endpoint.
    #[inline]
    fn undefer(&mut self) -> Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        self.post_deferred()
    }

    /// Whether `req` has completed (runs one progress pass).
    pub fn test(&mut self, req: &RecvRequest) -> Result<bool> {
        self.unready();
        if !self.is_done(req.0) {
            self.progress_for(&mut [])?;
        }
        Ok(self.is_done(req.0))
    }

    /// Blocks until `req` completes; returns its status and buffer (a
    /// truncated message fills it and says so in the status; a cancelled
    /// receive returns it untouched with `status.cancelled`). On an error
    /// (a dead peer) the buffer is dropped.
    pub fn wait(&mut self, req: RecvRequest) -> Result<(Status, Vec<u8>)> {
        let key = req.0;
        self.unready();
        self.undefer()?;
        // Already complete (the common case when an upper layer collects
        // what `take_completed` reported): one lookup, no progress.
        if let Some(req) = self.requests.remove_if_done(key) {
            return self.finish_wait(req);
        }
        let spec = match self.requests.get(key) {
            Some(r) => r.spec,
            None => return Err(Error::InvalidArgument("unknown receive request")),
        };
        let watch = self.check_source(spec)?;
        let r = self.block(watch, |ep| {
            if ep.is_done(key) {
                return Ok((Some(()), 1));
            }
            let ev = ep.progress_for(&mut [])?;
            if ev == 0 {
                return Ok((None, 0));
            }
            Ok((ep.is_done(key).then_some(()), ev))
        });
        if let Err(e) = r {
            if let Some(id) = self.recv_id(key) {
                self.abandon(key, id, &mut []);
            }
            return Err(e);
        }
        let Some(req) = self.requests.remove(key) else {
            return Err(Error::InvalidArgument("unknown receive request"));
        };
        self.finish_wait(req)
    }

    /// The result of a completed receive request removed by its waiter.
    fn finish_wait(&mut self, req: Req) -> Result<(Status, Vec<u8>)> {
        self.unfeed(req.fed);
        let buf = match req.buf {
            ReqBuf::Owned(v) => v,
            ReqBuf::Caller => Vec::new(),
        };
        match req.done {
            Some(Ok(st)) => Ok((st, buf)),
            Some(Err(e)) => Err(*e),
            None => Err(Error::InvalidArgument("receive request not complete")),
        }
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
    /// loop (an upper layer's `MPI_Send`): `None` if it completed at once
    /// (inline, eager, prepost-direct, self without a pending match
    /// acknowledgement): nothing is recorded and there is nothing to wait
    /// for. Otherwise the pending request, exactly as
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
    ) -> Result<Option<SendRequest>> {
        if mode != SendMode::Synchronous
            && dest != self.rank()
            && dest < self.size()
            && self.send_now(dest, tag, context, data)
        {
            return Ok(None);
        }
        let (id, done, _) = self.start_send(dest, tag, context, None, data, mode, false)?;
        if done {
            return Ok(None);
        }
        // Pending: recorded in `sends` (an internal request is kept while
        // pending); from now on it is a user request like isend_borrowed's.
        match self.sends.get_mut(&id) {
            Some(r) => r.user = true,
            None => return Err(Error::InvalidArgument("pending send not recorded")),
        }
        Ok(Some(SendRequest(id)))
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
    /// slot's line transfer; adi README, "Stores per message").
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
            || data.len() > self.ext_max
            || dest == self.rank()
            || dest >= self.size()
        {
            return false;
        }
        let p = &self.peers[dest as usize];
        p.staged.is_empty()
            && p.out.pending() == 0
            && self.send_inline_ext(dest, tag, context, data)
    }

    /// The largest message [`Endpoint::isend_inline_ext_now`] may send
    /// (`TMX_SHMEM_INLINE_EXT`, capped by the ring).
    pub fn inline_ext_max(&self) -> usize {
        self.ext_max.max(INLINE_MAX)
    }

    /// [`Endpoint::isend`] for a caller that wants a send that completes at
    /// once back at once: `Err(data)` hands the buffer back when the send
    /// completed inside the call (inline, eager, prepost-direct, self
    /// without a pending match acknowledgement; nothing is recorded and
    /// nothing will be reported); `Ok(request)` is a pending request exactly
    /// as [`Endpoint::isend`] returns it.
    pub fn isend_or_done(
        &mut self,
        dest: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<core::result::Result<SendRequest, Vec<u8>>> {
        if self.isend_now(dest, tag, context, &data, mode) {
            return Ok(Err(data));
        }
        let (id, done, back) = self.start_send(dest, tag, context, Some(data), &[], mode, false)?;
        if done {
            return Ok(Err(back.unwrap_or_default()));
        }
        match self.sends.get_mut(&id) {
            Some(r) => r.user = true,
            None => return Err(Error::InvalidArgument("pending send not recorded")),
        }
        Ok(Ok(SendRequest(id)))
    }

    /// Whether send `req` has completed (runs one progress pass if not).
    /// While it waits for a CMA FIN, the pass also pulls crossed CMA
    /// messages aside as [`Endpoint::wait_send`] does, so upper layers that
    /// poll in their own wait loops do not deadlock on rendezvous sends
    /// crossing each other.
    pub fn test_send(&mut self, req: &SendRequest) -> Result<bool> {
        match self.sends.get(&req.0) {
            None => Err(Error::InvalidArgument("unknown send request")),
            Some(r) if r.done() => Ok(true),
            Some(r) => {
                let fin = r.fin;
                self.progress()?;
                if fin && !self.sends.get(&req.0).is_some_and(SendReq::done) {
                    self.relieve_rendezvous();
                }
                Ok(self.sends.get(&req.0).is_some_and(SendReq::done))
            }
        }
    }

    /// Blocks until send `req` completes; returns the owned buffer of an
    /// [`Endpoint::isend`] (`None` for [`Endpoint::isend_borrowed`]). Fails
    /// with [`Error::PeerDied`] if the receiver dies first (an owned buffer
    /// a live receiver may still read is then kept until its FIN).
    pub fn wait_send(&mut self, req: SendRequest) -> Result<Option<Vec<u8>>> {
        self.wait_send_id(req.0)
    }

    /// A synchronous-mode blocking send (`MPI_Ssend`): returns once the
    /// receiver has matched the message (a prepost-direct write is matched
    /// by construction; a CMA read at match time answers with a FIN that
    /// says so; otherwise the receiver acknowledges the match).
    pub fn ssend(&mut self, dest: u32, tag: u32, context: u32, data: &[u8]) -> Result<()> {
        self.send_blocking(dest, tag, context, data, SendMode::Synchronous)
    }

    /// `MPI_Cancel` of a send: `Ok(true)` if the message was withdrawn
    /// before any receive matched it (it will never be received, and the
    /// request is complete), `Ok(false)` if it was matched, or is a kind
    /// that cannot be withdrawn (an inline or plain eager message, complete
    /// already; a fragmented one): it then completes normally.
    ///
    /// A message still held here (waiting for eager space) is withdrawn at
    /// once. One published to a peer is withdrawn by the peer, which
    /// answers a [`KIND_CANCEL`] header during its progress (any MPI call
    /// it makes): this call progresses until the answer comes, so it
    /// returns as soon as the peer is inside any call, also one blocked on
    /// this very process.
    pub fn cancel_send(&mut self, req: &SendRequest) -> Result<bool> {
        let id = req.0;
        let Some(r) = self.sends.get(&id) else {
            return Err(Error::InvalidArgument("unknown send request"));
        };
        if r.done() || r.frags {
            return Ok(false);
        }
        let dest = r.dest;
        if dest == self.rank() {
            let ok = self.withdraw_stored(dest, id)?;
            if ok {
                self.finish_cancelled(id);
            }
            return Ok(ok);
        }
        if self.withdraw_staged(dest, id) {
            self.finish_cancelled(id);
            return Ok(true);
        }
        let ask = Header {
            kind: KIND_CANCEL,
            source: self.rank(),
            word: id,
            ..Header::default()
        };
        tracing::debug!(dest, id, "send cancel requested");
        self.enqueue_ctl(dest, ask);
        let mut idle = 0u32;
        loop {
            if let Some(i) = self.cancel_answers.iter().position(|a| a.0 == id) {
                let (_, ok) = self.cancel_answers.swap_remove(i);
                if ok {
                    self.finish_cancelled(id);
                }
                tracing::debug!(dest, id, ok, "send cancel answered");
                return Ok(ok);
            }
            if self.progress()? == 0 {
                idle = idle.wrapping_add(1);
                if idle % 4096 == 0 {
                    self.check_alive(Some(dest))?;
                }
                std::hint::spin_loop();
            }
        }
    }

    /// A [`KIND_CANCEL`] from a sender (withdraw its message if it is still
    /// unmatched here, and answer), or a [`KIND_CANCELLED`] answer to ours.
    fn on_cancel_header(&mut self, h: &Header) -> Result<()> {
        if h.kind == KIND_CANCELLED {
            self.cancel_answers
                .push((h.word, h.flags & FLAG_WITHDRAWN != 0));
            return Ok(());
        }
        let ok = self.withdraw_stored(h.source, h.word)?;
        tracing::debug!(source = h.source, id = h.word, ok, "send cancel asked");
        let answer = Header {
            kind: KIND_CANCELLED,
            flags: if ok { FLAG_WITHDRAWN } else { 0 },
            source: self.rank(),
            word: h.word,
            ..Header::default()
        };
        self.enqueue_ctl(h.source, answer);
        Ok(())
    }

    /// Removes send `id` of `source` from the unexpected messages, if it
    /// is still there (no receive or matched probe has taken it): the
    /// matcher forgets it and its payload is released (a block of the
    /// sender's eager area is given back; a CMA buffer is simply not read).
    fn withdraw_stored(&mut self, source: u32, id: u64) -> Result<bool> {
        let store = &self.store;
        let found = self.off.unexpected().iter().find_map(|p| match p.msg {
            Msg::Stored(key) => store
                .get(key)
                .filter(|u| {
                    u.hdr.source == source
                        && matches!(u.hdr.kind, KIND_EAGER | KIND_CMA)
                        && sync_id(&u.hdr) == id
                })
                .map(|_| (p.id, *key)),
            Msg::Direct(_) => None,
        });
        let Some((mid, key)) = found else {
            return Ok(false);
        };
        if self.off.cancel_message(mid).is_none() {
            return Ok(false);
        }
        let u = self.take_stored(key)?;
        if u.hdr.kind == KIND_EAGER && u.data.is_none() && source != self.rank() {
            let seg = self.node.segment();
            get_eager(seg, self.node.config().eager_bytes, &u.hdr, &mut [])?;
        }
        self.counters.cancelled_sends += 1;
        Ok(true)
    }

    /// Removes send `id` from `dest`'s local queue if it is still there
    /// (waiting for eager space or behind staged data): the peer never saw
    /// it.
    fn withdraw_staged(&mut self, dest: u32, id: u64) -> bool {
        let staged = &mut self.peers[dest as usize].staged;
        let at = staged.iter().position(|st| match st {
            Staged::Data { hdr, .. } | Staged::Ready(hdr) => {
                matches!(hdr.kind, KIND_EAGER | KIND_CMA) && sync_id(hdr) == id
            }
            Staged::Frag { .. } => false,
        });
        match at {
            Some(i) => {
                staged.remove(i);
                self.counters.cancelled_sends += 1;
                true
            }
            None => false,
        }
    }

    /// Send `id` was withdrawn: nothing more will come for it (no FIN, no
    /// acknowledgement); it completes now.
    fn finish_cancelled(&mut self, id: u64) {
        if !self.splits.is_empty() {
            self.settle_split(id);
        }
        if let Some(r) = self.sends.get_mut(&id) {
            r.fin = false;
            r.ack = false;
        }
        self.check_send_done(id);
    }

    /// Appends to `out` the ids of the send and receive requests (from
    /// [`Endpoint::isend`], [`Endpoint::isend_borrowed`], [`Endpoint::irecv`],
    /// [`Endpoint::imrecv`]) completed since the last call, each exactly
    /// once, in completion order, including those that completed at once.
    /// A request handed to [`Endpoint::wait`] / [`Endpoint::wait_send`]
    /// before it was reported is not reported. Ids accumulate until taken.
    pub fn take_completed(&mut self, out: &mut Vec<u64>) {
        self.unready();
        let (sends, requests) = (&mut self.sends, &mut self.requests);
        for (id, send) in self.feed.drain(..) {
            let fed = if send {
                sends.get_mut(&id).map(|r| &mut r.fed)
            } else {
                requests.get_mut(id).map(|r| &mut r.fed)
            };
            if let Some(f) = fed.filter(|f| **f == Fed::Queued) {
                *f = Fed::Reported;
                out.push(id);
            }
        }
        self.feed_queued = 0;
    }

    /// [`Endpoint::take_completed`] and the waits in one step: takes every
    /// request [`Endpoint::take_completed`] would report, removes it and
    /// appends its id with what [`Endpoint::wait_send`] (to `sends`) or
    /// [`Endpoint::wait`] (to `recvs`, as a [`RecvFinished`]) would return
    /// for it, each exactly once, in completion order per kind. For an upper layer that collects
    /// completions in its progress pass: one lookup per request.
    #[allow(clippy::type_complexity)]
    pub fn take_finished(
        &mut self,
        sends: &mut Vec<(u64, Result<Option<Vec<u8>>>)>,
        recvs: &mut Vec<RecvFinished>,
    ) {
        if !self.ready.is_empty() {
            // Completed before everything in the feed: first, and (as a
            // rule: the caller hands back its emptied list) without a copy.
            if recvs.is_empty() {
                core::mem::swap(recvs, &mut self.ready);
            } else {
                recvs.append(&mut self.ready);
            }
        }
        if self.feed.is_empty() {
            return;
        }
        let mut feed = core::mem::take(&mut self.feed);
        for (id, send) in feed.drain(..) {
            // A request still held with a feed entry is complete and queued
            // (an entry is pushed once, on `Fed::No` → `Fed::Queued`, and
            // drained here or by `take_completed`).
            if send {
                if let std::collections::hash_map::Entry::Occupied(o) = self.sends.entry(id) {
                    if o.get().fed == Fed::Queued && o.get().done() {
                        sends.push((id, Ok(o.remove().owned)));
                    }
                }
            } else {
                // The entry is pushed from inside the closure: returned
                // through memory and pushed after, it was copied in wide
                // loads of narrow stores, which the store buffer cannot
                // forward.
                self.requests.take_where(id, |req| {
                    // Reported already (not ours to take), or not
                    // complete: left where it is, untouched.
                    if req.fed != Fed::Queued {
                        return None;
                    }
                    let result = req.done.take()?;
                    // Only the result and the buffer are taken out; the
                    // rest of the request is dropped in its slot.
                    let buf = match core::mem::replace(&mut req.buf, ReqBuf::Caller) {
                        ReqBuf::Owned(v) => v,
                        ReqBuf::Caller => Vec::new(),
                    };
                    recvs.push(RecvFinished { id, result, buf });
                    Some(())
                });
            }
        }
        self.feed = feed;
        self.feed_queued = 0;
    }

    /// Whether request `id` has completed (no progress). An id that is no
    /// longer held (already waited for) answers `true`; one never issued,
    /// `false`.
    pub fn is_complete(&self, id: u64) -> bool {
        if let Some(r) = self.sends.get(&id) {
            return r.done();
        }
        if let Some(r) = self.requests.get(id) {
            return r.done.is_some();
        }
        id != 0 && id < self.next_id
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

    /// The status of the oldest queued message matching `spec`, if any (no
    /// progress).
    fn peek(&self, spec: &MatchSpec) -> Option<Status> {
        let p = self.off.probe(spec)?;
        let msg_len = match p.msg {
            Msg::Stored(k) => self.store.get(k)?.hdr.nbytes as usize,
            Msg::Direct(w) => (w & 0xffff_ffff) as usize,
        };
        Some(Status {
            source: p.env.source,
            tag: p.env.tag,
            context: p.env.context_id,
            len: msg_len,
            msg_len,
            cancelled: false,
        })
    }

    /// `MPI_Iprobe`: the status of the oldest arrived message matching
    /// `spec` (it stays queued), after one progress pass. `len` and
    /// `msg_len` are the message's length.
    pub fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<Status>> {
        self.check_source(spec)?;
        self.undefer()?;
        self.progress()?;
        Ok(self.peek(&spec))
    }

    /// `MPI_Probe`: blocks until a message matching `spec` has arrived;
    /// it stays queued. Fails with [`Error::PeerDied`] like a receive.
    pub fn probe(&mut self, spec: MatchSpec) -> Result<Status> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        self.block(watch, |ep| {
            if let Some(st) = ep.peek(&spec) {
                return Ok((Some(st), 1));
            }
            let ev = ep.progress()?;
            Ok((ep.peek(&spec), ev))
        })
    }

    /// `MPI_Improbe`: after one progress pass, removes the oldest arrived
    /// message matching `spec` from matching (no receive can take it any
    /// more) and binds it to the returned handle; receive it with
    /// [`Endpoint::mrecv`] or [`Endpoint::imrecv`]. A synchronous sender
    /// learns of the match now.
    pub fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(Message, Status)>> {
        self.check_source(spec)?;
        self.undefer()?;
        self.progress()?;
        self.take_probed(&spec)
    }

    fn take_probed(&mut self, spec: &MatchSpec) -> Result<Option<(Message, Status)>> {
        let Some(m) = self.off.improbe(spec) else {
            return Ok(None);
        };
        let Msg::Stored(key) = m.msg else {
            return Err(Error::InvalidArgument(
                "matcher returned a message written into a receive",
            ));
        };
        let Some(u) = self.store.get_mut(&key) else {
            return Err(Error::InvalidArgument(
                "matcher returned a message the endpoint does not hold",
            ));
        };
        let h = u.hdr;
        let copied = u.data.is_some();
        if h.flags & FLAG_SYNC != 0 && (h.kind != KIND_CMA || copied) {
            // Acknowledge now, and not again at mrecv. (An uncopied CMA
            // message is acknowledged by its FIN at mrecv.)
            u.hdr.flags &= !FLAG_SYNC;
            self.matched_sync(&h, copied);
        }
        let msg_len = h.nbytes as usize;
        let st = Status {
            source: m.env.source,
            tag: m.env.tag,
            context: m.env.context_id,
            len: msg_len,
            msg_len,
            cancelled: false,
        };
        Ok(Some((Message(key), st)))
    }

    /// `MPI_Mprobe`: blocks until [`Endpoint::improbe`] finds a message.
    pub fn mprobe(&mut self, spec: MatchSpec) -> Result<(Message, Status)> {
        let watch = self.check_source(spec)?;
        self.undefer()?;
        self.block(watch, |ep| {
            if let Some(m) = ep.take_probed(&spec)? {
                return Ok((Some(m), 1));
            }
            let ev = ep.progress()?;
            Ok((ep.take_probed(&spec)?, ev))
        })
    }

    /// `MPI_Mrecv`: receives a message taken by a matched probe into `buf`
    /// (`min(msg_len, buf.len())` bytes; see [`Status::truncated`]).
    pub fn mrecv(&mut self, msg: Message, buf: &mut [u8]) -> Result<Status> {
        let u = self.take_stored(msg.0)?;
        let st = self.deliver(u.hdr, u.data, buf)?;
        if st.truncated() {
            self.counters.truncated += 1;
        }
        Ok(st)
    }

    /// `MPI_Imrecv`: [`Endpoint::mrecv`] into an owned buffer. The message
    /// has arrived, so the request completes at once (it is in the feed);
    /// [`Endpoint::wait`] hands the buffer back.
    pub fn imrecv(&mut self, msg: Message, mut buf: Vec<u8>) -> Result<RecvRequest> {
        let u = self.take_stored(msg.0)?;
        let spec = MatchSpec {
            context_id: u.hdr.context,
            source: Source::Rank(u.hdr.source),
            tag: tm_proto::Tag::Value(u.hdr.tag),
        };
        let result = self.deliver(u.hdr, u.data, &mut buf);
        if let Ok(st) = &result {
            if st.truncated() {
                self.counters.truncated += 1;
            }
        }
        let key = self.next_id;
        self.next_id += 1;
        self.requests.insert(
            key,
            Req {
                spec,
                buf: ReqBuf::Owned(buf),
                done: Some(boxed(result)),
                id: None,
                user: true,
                fed: Fed::No,
            },
            false,
        );
        self.record_recv(key);
        Ok(RecvRequest(key))
    }

    /// Cancels a receive that has not matched (`MPI_Cancel`). `Ok(true)`:
    /// removed; the request completes with `status.cancelled` (and
    /// [`Endpoint::wait`] hands the buffer back). `Ok(false)`: already
    /// matched, preposted and claimed by a sender that is writing into it,
    /// or a pipelined message bound to match it is being copied into it
    /// (it completes normally).
    pub fn cancel_recv(&mut self, req: &RecvRequest) -> Result<bool> {
        self.unready();
        self.undefer()?;
        let Some(r) = self.requests.get(req.0) else {
            return Err(Error::InvalidArgument("unknown receive request"));
        };
        if self.is_bound(req.0) {
            // A pipelined message is being copied into it (bound to match
            // it): it completes with that message.
            return Ok(false);
        }
        let Some(id) = r.id.filter(|_| r.done.is_none()) else {
            return Ok(false);
        };
        match self.off.cancel(id) {
            tm_match::CancelOutcome::Cancelled(key) => {
                self.counters.cancelled_recvs += 1;
                self.finish_recv(key, Ok(Status::cancelled()));
                tracing::debug!(key, "receive cancelled");
                Ok(true)
            }
            tm_match::CancelOutcome::Pending => {
                // Withdraw the prepost; the answer comes as a completion.
                self.pump(&mut [])?;
                let cancelled = matches!(
                    self.requests.get(req.0),
                    Some(Req {
                        done: Some(Ok(Status {
                            cancelled: true,
                            ..
                        })),
                        ..
                    })
                );
                tracing::debug!(key = req.0, cancelled, "cancel of a preposted receive");
                Ok(cancelled)
            }
            tm_match::CancelOutcome::Failed => Ok(false),
        }
    }

    fn is_done(&self, key: u64) -> bool {
        self.requests.get(key).is_some_and(|r| r.done.is_some())
    }

    /// The completed result of the blocked call's request `key`, removing it.
    fn take_done(&mut self, key: u64) -> Option<Result<Status>> {
        self.requests.get(key)?.done.as_ref()?;
        self.requests.remove(key).and_then(|r| r.done).map(unbox)
    }

    /// The offload model's handle of a still-queued request.
    fn recv_id(&self, key: u64) -> Option<RecvId> {
        self.requests.get(key).and_then(|r| r.id)
    }

    /// Gives up on request `key` after an error: cancels it (withdrawing its
    /// prepost; if the sender claimed it, the sender is the dead peer the
    /// error is about and will not write any more).
    fn abandon(&mut self, key: u64, id: RecvId, buf: &mut [u8]) {
        if !self.is_done(key) {
            let _ = self.off.cancel(id);
            let _ = self.pump(buf);
        }
        // A sender that claimed its prepost is writing into the buffer: wait
        // for its DONE, unless it is dead.
        while let Some(peer) = self
            .requests
            .engine
            .values()
            .find(|e| e.key == key)
            .map(|e| e.peer)
        {
            if self.node.segment().check_alive(peer).is_err() {
                break;
            }
            match self.poll_engine(buf) {
                Ok(0) => std::thread::yield_now(),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if let Some(r) = self.requests.remove(key) {
            self.unfeed(r.fed);
            if let ReqBuf::Owned(v) = r.buf {
                let claimed = self.requests.engine.values().any(|e| e.key == key);
                if claimed {
                    // Never free a buffer a sender may still write into.
                    core::mem::forget(v);
                }
            }
        }
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

    /// Posts a receive request through the offload model; returns its key
    /// and, if it is queued, its handle (if it matched a queued message at
    /// once, it is complete: delivered into `buf` or its owned buffer).
    /// `may_prepost`: the caller keeps the buffer at `addr` valid until the
    /// request completes. `(user, user_at_once)`: whether the request is
    /// the user's (its completion goes to the feed), if it is queued and if
    /// it matches at once.
    fn post(
        &mut self,
        spec: MatchSpec,
        rbuf: ReqBuf,
        addr: u64,
        may_prepost: bool,
        (user, user_at_once): (bool, bool),
        buf: &mut [u8],
    ) -> Result<(u64, Option<RecvId>)> {
        let key = self.next_id;
        self.next_id += 1;
        let capacity = match &rbuf {
            ReqBuf::Owned(v) => v.len(),
            ReqBuf::Caller => buf.len(),
        };
        let me = self.rank();
        // The caller's part of the offload decision: a buffer the sender may
        // CMA-write into, large enough for the prepost-direct path
        // (`TMX_SHMEM_PREPOST_MIN`, and beyond inline), from a peer whose
        // prepost ring has a free slot. The model adds the rest
        // (exact source, no earlier software receive that overlaps it,
        // capacity, tag layout).
        let eligible = match spec.source {
            Source::Rank(src) if may_prepost && self.advertisable(spec, capacity) => self.peers
                [src as usize]
                .poster
                .can_post(self.node.segment().prepost(me, src)),
            _ => false,
        };
        // The model hands out nothing before `post` returns (a match at once
        // comes back as the outcome), so the request is recorded after it,
        // with its handle.
        let outcome = self.off.post(spec, key, eligible)?;
        let id = match &outcome {
            PostOutcome::Queued { id, .. } => Some(*id),
            PostOutcome::Matched { .. } => None,
        };
        self.requests.insert(
            key,
            Req {
                spec,
                buf: rbuf,
                done: None,
                id,
                user: if id.is_some() { user } else { user_at_once },
                fed: Fed::No,
            },
            id.is_none() && !user_at_once,
        );
        match outcome {
            PostOutcome::Matched { msg, env, .. } => {
                self.complete_at_post(key, msg, env, buf)?;
                Ok((key, None))
            }
            PostOutcome::Queued { id, offloaded } => {
                if offloaded {
                    if let Source::Rank(peer) = spec.source {
                        self.requests.engine.insert(
                            id,
                            EngineEntry {
                                key,
                                peer,
                                context: spec.context_id,
                                addr,
                                capacity: capacity as u64,
                                index: None,
                                deleting: false,
                            },
                        );
                    }
                }
                self.pump(buf)?;
                Ok((key, Some(id)))
            }
        }
    }

    /// Delivers a matched message into `buf`: `min(msg_len, buf.len())`
    /// bytes, never more (truncation is reported in the status, not as an
    /// error). Consumes the message either way (eager block released, CMA
    /// FIN sent, synchronous sender acknowledged).
    fn deliver(&mut self, h: Header, data: Option<Vec<u8>>, buf: &mut [u8]) -> Result<Status> {
        let msg_len = h.nbytes as usize;
        let n = msg_len.min(buf.len());
        let st = Status {
            source: h.source,
            tag: h.tag,
            context: h.context,
            len: n,
            msg_len,
            cancelled: false,
        };
        if n < msg_len {
            tracing::debug!(
                source = h.source,
                msg_len,
                capacity = buf.len(),
                "message truncated to the receive buffer"
            );
        }
        self.counters.received += 1;
        let cap = buf.len();
        let dst = &mut buf[..n];
        let r = match h.kind {
            KIND_INLINE => {
                let (bytes, len) = h.inline_payload();
                if len != msg_len {
                    Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "inline length differs from message length",
                    })
                } else {
                    dst.copy_from_slice(&bytes[..n]);
                    Ok(())
                }
            }
            KIND_EAGER | KIND_FRAG | KIND_CMA | KIND_INLINE_EXT if data.is_some() => {
                // Copied out already (eager pressure, a fragmented message,
                // a CMA message pulled while we were blocked, a self-send).
                match data.as_ref().and_then(|v| v.get(..n)) {
                    Some(v) => {
                        dst.copy_from_slice(v);
                        Ok(())
                    }
                    None => Err(Error::BadHeader {
                        source_pe: h.source,
                        reason: "copied payload shorter than the header says",
                    }),
                }
            }
            KIND_FRAG if h.flags & FLAG_HELD != 0 => match self.held.remove(&(h.source, h.word)) {
                // Still in the sender's eager area: one copy, straight in.
                Some(frags) => {
                    self.uncopied -= 1;
                    let seg = self.node.segment();
                    copy_fragments(seg, self.node.config().eager_bytes, &frags, dst);
                    Ok(())
                }
                None => Err(Error::BadHeader {
                    source_pe: h.source,
                    reason: "held fragmented message without its fragments",
                }),
            },
            KIND_FRAG if h.flags & FLAG_IN_PLACE != 0 => match self
                .in_place
                .iter()
                .position(|&e| e == (dst.as_ptr() as usize, cap))
            {
                // Copied into this very buffer fragment by fragment.
                Some(i) => {
                    self.in_place.swap_remove(i);
                    Ok(())
                }
                None => Err(Error::BadHeader {
                    source_pe: h.source,
                    reason: "pipelined message received in place into another buffer",
                }),
            },
            KIND_FRAG => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "incomplete fragmented message",
            }),
            KIND_INLINE_EXT => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "inline message longer than its ring could carry",
            }),
            KIND_EAGER => self.get_eager(&h, dst),
            KIND_CMA => {
                if self.ready_splits {
                    self.unready_splits();
                }
                let res = if n as u64 >= self.node.config().cma_split && h.flags & FLAG_SPLIT != 0 {
                    self.split_read(&h, dst)
                } else if n > 0 && !core::mem::take(&mut self.cma_done) {
                    self.node.cma_read(h.source, h.word, dst)
                } else {
                    Ok(())
                };
                self.send_fin(&h, true);
                res
            }
            _ => Err(Error::BadHeader {
                source_pe: h.source,
                reason: "unknown header kind",
            }),
        };
        self.matched_sync(&h, data.is_some());
        r.map(|()| st)
    }

    /// Reads CMA message `h` into `dst` with its sender's help (see
    /// [`crate::ring::SplitWords`]): offers it the second half of `dst`,
    /// reads the first half, then either waits for the sender's write to
    /// finish or, if the sender has not claimed the offer yet, withdraws
    /// it and reads the second half too.
    fn split_read(&mut self, h: &Header, dst: &mut [u8]) -> Result<()> {
        let src = h.source;
        let seg = self.node.segment();
        let w = seg.ring(src, seg.rank()).split();
        let n = dst.len();
        // The sender's part starts on a page boundary of `dst` near the
        // middle (fewer pages pinned by both copies), else at the middle.
        let base = dst.as_ptr() as usize;
        let page = (base + n / 2) & !4095;
        let mid = if page > base && page < base + n {
            page - base
        } else {
            n / 2
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(&h.ext[..8]);
        let offer = SplitOffer {
            id: u64::from_le_bytes(id),
            addr: (base + mid) as u64,
            len: (n - mid) as u64,
            start: mid as u64,
        };
        // Not `READY` (a busy sender), or taken back meanwhile: read it
        // whole.
        if !w.offer(offer) {
            return self.node.cma_read(src, h.word, dst);
        }
        let mine = self.node.cma_read(src, h.word, &mut dst[..mid]);
        let mut spins = 0u32;
        let theirs = loop {
            match w.poll_offer() {
                SplitPoll::Done => break Ok(true),
                SplitPoll::Claimed => {
                    // The sender is writing: wait (bounded by its copy),
                    // checking now and then that it is still alive.
                    spins = spins.wrapping_add(1);
                    if spins % 4096 == 0 {
                        if let Err(e) = seg.check_alive(src) {
                            break Err(e);
                        }
                    }
                    core::hint::spin_loop();
                }
                // Withdrawn before the sender claimed it, or its write
                // failed: read it ourselves.
                SplitPoll::Withdrawn | SplitPoll::Failed => break Ok(false),
            }
        };
        // Settled: the ring is free for the next hand-off (`READY` again
        // after the sender's part, which it takes back itself before a
        // copy of its own).
        w.release(matches!(theirs, Ok(true)));
        let theirs = theirs?;
        if theirs {
            self.counters.cma_split_shared += 1;
        } else {
            self.counters.cma_split_withdrawn += 1;
            let at = h.word.checked_add(mid as u64).ok_or(Error::BadHeader {
                source_pe: src,
                reason: "CMA address range wraps around",
            })?;
            self.node.cma_read(src, at, &mut dst[mid..])?;
        }
        mine
    }

    /// The FIN of send `id` came: the receiver is done with its data, so
    /// no offer can come for it any more.
    fn settle_split(&mut self, id: u64) {
        if let Some((dest, _, _)) = self.splits.remove(&id) {
            self.split_out[dest as usize] -= 1;
        }
    }

    /// About to copy a message of our own (a busy stretch): takes back the
    /// `READY` of our rings, so that their receivers read our messages
    /// whole rather than offer and withdraw.
    #[inline(never)]
    fn unready_splits(&mut self) {
        self.ready_splits = false;
        let seg = self.node.segment();
        let me = seg.rank();
        for (d, &k) in self.split_out.iter().enumerate() {
            if k == 0 {
                continue;
            }
            // Fails harmlessly if the receiver offered meanwhile.
            seg.ring(me, d as u32).split().unready();
        }
    }

    /// The sender's side of split copies, run by a progress pass that had
    /// nothing else to do: marks `READY` the rings of the receivers we
    /// have CMA sends to, and answers every offer on them (writes the
    /// part asked for). Returns how many parts it wrote.
    #[inline(never)]
    fn serve_splits(&mut self) -> usize {
        let seg = self.node.segment();
        let me = seg.rank();
        let mut wrote = 0;
        for d in 0..self.split_out.len() {
            if self.split_out[d] == 0 {
                continue;
            }
            let w = seg.ring(me, d as u32).split();
            match w.state() {
                SPLIT_IDLE if w.mark_ready() => {
                    self.ready_splits = true;
                }
                SPLIT_OFFERED => {
                    let Some(o) = w.claim() else {
                        continue;
                    };
                    let (id, addr) = (o.id, o.addr);
                    let (len, start) = (o.len as usize, o.start as usize);
                    let r = match self.splits.get(&id) {
                        Some(&(dest, ptr, n))
                            if dest as usize == d
                                && start.checked_add(len).is_some_and(|end| end <= n) =>
                        {
                            // SAFETY: [ptr + start, ptr + start + len) is
                            // inside send `id`'s data (checked above),
                            // which its request keeps until the FIN; the
                            // receiver sends the FIN only after our
                            // DONE/FAILED below.
                            let data = unsafe {
                                core::slice::from_raw_parts((ptr + start) as *const u8, len)
                            };
                            self.node.cma_write(dest, addr, data)
                        }
                        _ => Err(Error::InvalidArgument("split offer for an unknown send")),
                    };
                    if let Err(e) = &r {
                        tracing::warn!(error = %e, dest = d, "split copy failed: the receiver reads it");
                    }
                    w.complete(r.is_ok());
                    // After DONE the receiver leaves the ring `READY`:
                    // ours to take back before a copy of our own.
                    self.ready_splits |= r.is_ok();
                    wrote += 1;
                }
                // READY (no offer yet), CLAIMED (never seen here: we write
                // between the claim and DONE), or the receiver's to reset.
                _ => {}
            }
        }
        wrote
    }

    /// Tells a CMA sender that we finished reading its buffer.
    /// `matched`: the FIN is sent because a receive matched the message
    /// (not because it was pulled aside), so it also acknowledges a
    /// synchronous send ([`FLAG_MATCHED`]).
    fn send_fin(&mut self, h: &Header, matched: bool) {
        let mut c = [0u8; 8];
        c.copy_from_slice(&h.ext[..8]);
        let flags = if matched && h.flags & FLAG_SYNC != 0 {
            FLAG_MATCHED
        } else {
            0
        };
        let fin = Header {
            kind: KIND_FIN,
            flags,
            source: self.rank(),
            word: u64::from_le_bytes(c),
            ..Header::default()
        };
        self.enqueue_ctl(h.source, fin);
    }

    /// A message with [`FLAG_SYNC`] was matched (received, or taken by a
    /// matched probe): tells its sender, unless the CMA FIN just did.
    /// (The check inlined, the acknowledgement out of line: most messages
    /// are not synchronous.)
    #[inline(always)]
    fn matched_sync(&mut self, h: &Header, copied: bool) {
        if h.flags & FLAG_SYNC == 0 || (h.kind == KIND_CMA && !copied) {
            return;
        }
        self.ack_sync(h);
    }

    /// [`Endpoint::matched_sync`]'s acknowledgement.
    #[inline(never)]
    fn ack_sync(&mut self, h: &Header) {
        let id = sync_id(h);
        if h.source == self.rank() {
            self.on_ack(id);
            return;
        }
        self.counters.sync_acks += 1;
        let ack = Header {
            kind: KIND_ACK,
            source: self.rank(),
            word: id,
            ..Header::default()
        };
        tracing::debug!(dest = h.source, "synchronous message matched: ack");
        self.enqueue_ctl(h.source, ack);
    }

    /// Counts a progress pass that had nothing to do while unexpected
    /// messages are stored; every [`PULL_IDLE_PASSES`]-th in a row reads
    /// the CMA ones of eager sizes aside ([`Endpoint::pull_unexpected_cma`]).
    /// Returns how many it read.
    #[cold]
    #[inline(never)]
    fn idle_with_unexpected(&mut self) -> usize {
        self.idle_passes += 1;
        if self.idle_passes < PULL_IDLE_PASSES {
            return 0;
        }
        self.idle_passes = 0;
        self.pull_unexpected_cma()
    }

    /// After [`PULL_IDLE_PASSES`] progress passes in a row with nothing to
    /// do: reads every unexpected CMA message no larger than
    /// `TMX_SHMEM_CMA_THRESHOLD` into private memory and returns its FIN;
    /// returns how many. Such a message went by CMA as a reply or while
    /// traffic flowed both ways, at a size that otherwise goes through an
    /// eager block, and its sender must not wait for the receive any more
    /// than it would have with the eager block: a program whose standard
    /// sends of such sizes must complete before they are matched (as they
    /// do with MPICH) would otherwise hang, every rank waiting. Reading
    /// them only once idle leaves the single copy to a receive posted
    /// soon, as in a ping-pong. A read that fails leaves the message as
    /// it was (its receive reads it and reports the failure).
    fn pull_unexpected_cma(&mut self) -> usize {
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
    fn relieve_rendezvous(&mut self) -> usize {
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
    fn read_cma_aside(&mut self, max: u64) -> usize {
        let mut pulled = Vec::new();
        for u in self.store.values_mut() {
            let h = u.hdr;
            if h.kind != KIND_CMA || u.data.is_some() || u64::from(h.nbytes) > max {
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

#[cfg(test)]
mod tests {
    //! The upper layer's fast paths: sends and receives finished inside
    //! their call, and the completion feed taken with its results.
    #![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

    use super::*;
    use crate::config::Config;
    use std::collections::HashSet;
    use std::time::Duration;

    /// `set_inline` stores every length zero-padded, and `copy_inline`
    /// (both with a fixed 8-byte move from 8 bytes on) gives back every
    /// prefix of it.
    #[test]
    fn copy_inline_every_length() {
        let payload: Vec<u8> = (1..=INLINE_MAX as u8).collect();
        for len in 0..=INLINE_MAX {
            let mut h = Header::default();
            assert!(h.set_inline(&payload[..len]));
            // `set_inline` zero-pads `word` and `ext` past the payload.
            let mut all = h.word.to_le_bytes().to_vec();
            all.extend_from_slice(&h.ext);
            let mut want = payload[..len].to_vec();
            want.resize(INLINE_MAX, 0);
            assert_eq!(all, want, "len {len}");
            assert_eq!(usize::from(h.aux), len);
            for n in 0..=len {
                let mut dst = vec![0xee; n];
                copy_inline(&h, &mut dst);
                assert_eq!(dst, payload[..n], "len {len} n {n}");
            }
        }
    }
    use tm_proto::Tag;

    fn spec(source: u32, tag: u32) -> MatchSpec {
        MatchSpec {
            context_id: 4,
            source: Source::Rank(source),
            tag: Tag::Value(tag),
        }
    }

    fn data(seed: u32, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u32 * 7 + seed) as u8).collect()
    }

    /// Runs `f(rank, endpoint)` on two threads, each attaching its node.
    fn pair(name: &str, f: impl Fn(u32, Endpoint) + Send + Sync + Clone + 'static) {
        pair_with(name, 8, f)
    }

    fn pair_with(
        name: &str,
        ring_slots: u32,
        f: impl Fn(u32, Endpoint) + Send + Sync + Clone + 'static,
    ) {
        pair_cfg(name, test_cfg(ring_slots), f)
    }

    fn test_cfg(ring_slots: u32) -> Config {
        Config {
            ring_slots,
            publish_batch: ring_slots / 2,
            heap_bytes: 1 << 20,
            eager_bytes: 1 << 20,
            attach_timeout: Duration::from_secs(20),
            // These tests were written when the default was 128 bytes:
            // their 129–512-byte messages are meant to take eager blocks
            // (and the reply path), so keep that cap here.
            inline_ext: 128,
            ..Config::default()
        }
    }

    fn pair_cfg(
        name: &str,
        cfg: Config,
        f: impl Fn(u32, Endpoint) + Send + Sync + Clone + 'static,
    ) {
        let job = format!("ut{}-{name}", std::process::id());
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let (job, cfg, f) = (job.clone(), cfg.clone(), f.clone());
                std::thread::spawn(move || {
                    f(r, Endpoint::new(Node::init(&job, r, 2, cfg).unwrap()))
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    /// Lengths across the inline, eager and CMA (or staged) paths.
    const LENS: [usize; 4] = [0, 24, 3000, 200_000];

    #[test]
    fn take_finished_hands_each_request_over_once() {
        pair("finished", |me, mut ep| {
            let peer = 1 - me;
            let n = 24u32;
            let mut issued = HashSet::new();
            let mut recvs = Vec::new();
            let mut sends = Vec::new();
            for k in 0..n {
                let len = LENS[k as usize % 4];
                let r = ep.irecv(spec(peer, k), vec![0; len]).unwrap();
                issued.insert(r.id());
                recvs.push(r);
                let s = ep
                    .isend(peer, k, 4, data(k + me, len), SendMode::Standard)
                    .unwrap();
                issued.insert(s.id());
                sends.push(s);
            }
            let (mut sd, mut rd) = (Vec::new(), Vec::new());
            while sd.len() + rd.len() < issued.len() {
                ep.progress().unwrap();
                ep.take_finished(&mut sd, &mut rd);
            }
            let ids: HashSet<u64> = sd
                .iter()
                .map(|(id, _)| *id)
                .chain(rd.iter().map(|f: &RecvFinished| f.id))
                .collect();
            assert_eq!(ids.len(), sd.len() + rd.len(), "an id handed over twice");
            assert_eq!(ids, issued);
            for (id, r) in &sd {
                let k = sends.iter().position(|s| s.id() == *id).unwrap() as u32;
                let back = r.as_ref().unwrap().as_ref().unwrap();
                assert_eq!(
                    *back,
                    data(k + me, LENS[k as usize % 4]),
                    "send buffer handed back"
                );
            }
            for f in &rd {
                let k = recvs.iter().position(|q| q.id() == f.id).unwrap() as u32;
                let (st, v) = (f.result.as_ref().unwrap(), &f.buf);
                let len = LENS[k as usize % 4];
                assert_eq!((st.source, st.tag, st.len, st.msg_len), (peer, k, len, len));
                assert_eq!(*v, data(k + peer, len));
            }
            // Taken: neither reported again nor waitable.
            let mut more = Vec::new();
            ep.take_completed(&mut more);
            assert!(more.is_empty(), "{more:?}");
            ep.take_finished(&mut sd, &mut rd);
            assert_eq!(sd.len() + rd.len(), issued.len());
            assert!(ep.wait(recvs.pop().unwrap()).is_err());
            assert!(ep.wait_send(sends.pop().unwrap()).is_err());
            ep.finalize().unwrap();
        });
    }

    /// `send_now_with` delivers what `fill` wrote, on the stack (inline
    /// and small eager) and straight into an eager block; a `fill` that
    /// gives up sends nothing and leaves no block in flight; a self-send
    /// is refused without calling `fill`.
    #[test]
    fn send_now_with_sends_what_fill_writes() {
        const FILLED: [usize; 5] = [0, 24, 200, 3000, 8_000];
        // The receiver starts once the sender's checks are done: its
        // releases would otherwise let a refused send reclaim blocks and
        // move `in_flight` under the check.
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("fill", move |me, mut ep| {
            if me == 0 {
                for (k, &len) in FILLED.iter().enumerate() {
                    let want = data(k as u32, len);
                    let mut calls = 0;
                    let sent = ep.send_now_with(1, k as u32, 4, len, &mut |out| {
                        calls += 1;
                        assert_eq!(out.len(), len);
                        out.copy_from_slice(&want);
                        true
                    });
                    assert!(sent, "len {len}");
                    assert_eq!(calls, 1);
                }
                let in_flight = ep.eager.in_flight();
                for len in [100, 3000] {
                    assert!(!ep.send_now_with(1, 99, 4, len, &mut |_| false));
                    assert_eq!(ep.eager.in_flight(), in_flight, "len {len}");
                }
                let mut called = false;
                assert!(!ep.send_now_with(0, 99, 4, 8, &mut |_| {
                    called = true;
                    true
                }));
                assert!(!called, "fill called for a self-send");
                gate.wait();
                ep.send(1, 100, 4, b"end").unwrap();
            } else {
                gate.wait();
                for (k, &len) in FILLED.iter().enumerate() {
                    let mut buf = vec![0u8; len];
                    let st = ep.recv(spec(0, k as u32), &mut buf).unwrap();
                    assert_eq!(st.len, len);
                    assert_eq!(buf, data(k as u32, len), "len {len}");
                }
                let mut end = [0u8; 3];
                ep.recv(spec(0, 100), &mut end).unwrap();
                assert_eq!(&end, b"end");
                assert!(
                    ep.iprobe(spec(0, 99)).unwrap().is_none(),
                    "a refused send arrived"
                );
            }
            ep.finalize().unwrap();
        });
    }

    /// `send_copied_now` copies a CMA size into an eager block (where
    /// `isend_now` leaves it to CMA), and refuses a pipelined size and a
    /// self-send without sending anything.
    #[test]
    fn send_copied_now_copies_cma_sizes() {
        const LEN: usize = 40_000;
        pair("copied", |me, mut ep| {
            if me == 0 {
                let d = data(1, LEN);
                if ep.cma_ok() {
                    assert!(!ep.isend_now(1, 1, 4, &d, SendMode::Standard));
                }
                let buffered = ep.counters.buffered_sends;
                assert!(ep.send_copied_now(1, 1, 4, &d));
                assert_eq!(ep.counters.buffered_sends, buffered + 1);
                let in_flight = ep.eager.in_flight();
                assert!(!ep.send_copied_now(1, 99, 4, &data(2, 200_000)));
                assert!(!ep.send_copied_now(0, 99, 4, &d));
                assert_eq!(ep.eager.in_flight(), in_flight);
                ep.send(1, 100, 4, b"end").unwrap();
            } else {
                let mut buf = vec![0u8; LEN];
                let st = ep.recv(spec(0, 1), &mut buf).unwrap();
                assert_eq!(st.len, LEN);
                assert_eq!(buf, data(1, LEN));
                let mut end = [0u8; 3];
                ep.recv(spec(0, 100), &mut end).unwrap();
                assert!(
                    ep.iprobe(spec(0, 99)).unwrap().is_none(),
                    "a refused send arrived"
                );
            }
            ep.finalize().unwrap();
        });
    }

    /// `recv_now` takes only what a receive posted at that moment would
    /// match: nothing before it is sent; from the ring (inline, inline-ext,
    /// eager, truncated) and from the matcher's queue; never the message an
    /// earlier pending receive is owed; never the same message twice.
    #[test]
    fn recv_now_takes_only_what_a_receive_posted_now_would() {
        fn spin_now(ep: &mut Endpoint, spec: MatchSpec, buf: &mut [u8]) -> Status {
            let t0 = Instant::now();
            loop {
                if let Some(st) = ep.recv_now(spec, buf).unwrap() {
                    return st;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "{spec:?} never came"
                );
                std::thread::yield_now();
            }
        }
        // The handshakes give up too: a panicking peer must fail the test,
        // not leave this side blocked.
        fn recv_within(ep: &mut Endpoint, spec: MatchSpec, buf: &mut [u8]) {
            let t0 = Instant::now();
            while ep.try_recv(spec, buf).unwrap().is_none() {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "{spec:?} never came"
                );
                std::thread::yield_now();
            }
        }
        pair_with("recv-now", 64, |me, mut ep| {
            if me == 0 {
                let mut go = [0u8; 1];
                recv_within(&mut ep, spec(1, 50), &mut go);
                // Tag 3 twice: the first is owed to rank 1's earlier receive.
                for (tag, seed, len) in [(1, 1, 24), (3, 30, 100), (3, 31, 100), (2, 2, 3000)] {
                    ep.send(1, tag, 4, &data(seed, len)).unwrap();
                }
                ep.send(1, 4, 4, &data(4, 200)).unwrap();
                recv_within(&mut ep, spec(1, 51), &mut go);
                for tag in [6, 7, 52] {
                    ep.send(1, tag, 4, &data(tag, 64)).unwrap();
                }
            } else {
                let mut b24 = [0u8; 24];
                assert!(ep.recv_now(spec(0, 1), &mut b24).unwrap().is_none());
                let pending = match ep.irecv_or_done(spec(0, 3), vec![0; 100]).unwrap() {
                    Ok(req) => req,
                    Err(_) => panic!("tag 3 matched before it was sent"),
                };
                ep.send(0, 50, 4, b"g").unwrap();

                let st = spin_now(&mut ep, spec(0, 1), &mut b24);
                assert_eq!((st.source, st.tag, st.len), (0, 1, 24));
                assert_eq!(b24.to_vec(), data(1, 24));
                let mut b100 = [0u8; 100];
                let st = spin_now(&mut ep, spec(0, 3), &mut b100);
                assert_eq!(st.len, 100);
                assert_eq!(b100.to_vec(), data(31, 100), "took the earlier receive's");
                let t0 = Instant::now();
                while !ep.test(&pending).unwrap() {
                    assert!(t0.elapsed() < Duration::from_secs(20), "tag 3 never came");
                }
                let (st, v) = ep.wait(pending).unwrap();
                assert_eq!((st.tag, v), (3, data(30, 100)));
                let mut b3000 = vec![0u8; 3000];
                let st = spin_now(&mut ep, spec(0, 2), &mut b3000);
                assert_eq!((st.len, b3000), (3000, data(2, 3000)));
                let mut b50 = [0u8; 50];
                let st = spin_now(&mut ep, spec(0, 4), &mut b50);
                assert!(st.truncated());
                assert_eq!((st.len, st.msg_len), (50, 200));
                assert_eq!(b50.to_vec(), data(4, 50));
                ep.send(0, 51, 4, b"g").unwrap();

                // Tags 6 and 7 are queued as unexpected while tag 52 is
                // received: `recv_now` finds them in the queue.
                let mut b64 = [0u8; 64];
                recv_within(&mut ep, spec(0, 52), &mut b64);
                let st = ep.recv_now(spec(0, 7), &mut b64).unwrap().unwrap();
                assert_eq!((st.tag, b64.to_vec()), (7, data(7, 64)));
                let any = MatchSpec {
                    source: Source::Any,
                    ..spec(0, 6)
                };
                let st = ep.recv_now(any, &mut b64).unwrap().unwrap();
                assert_eq!((st.source, st.tag, b64.to_vec()), (0, 6, data(6, 64)));
                for tag in [1, 2, 3, 4, 6, 7] {
                    assert!(ep.recv_now(spec(0, tag), &mut b64).unwrap().is_none());
                }
                let all = MatchSpec {
                    tag: Tag::Any,
                    ..any
                };
                assert!(ep.iprobe(all).unwrap().is_none(), "a message left over");
            }
            ep.finalize().unwrap();
        });
    }

    #[test]
    fn sends_and_receives_finished_in_their_call() {
        pair("at-once", |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                // Inline and eager sends complete inside the call: the owned
                // buffer comes straight back, nothing is recorded.
                for (k, len) in [(1u32, 8usize), (2, 3000)] {
                    let back = ep
                        .isend_or_done(peer, k, 4, data(k, len), SendMode::Standard)
                        .unwrap();
                    assert_eq!(back.unwrap_err(), data(k, len));
                }
                assert!(ep
                    .send_or_start(peer, 3, 4, &data(3, 16), SendMode::Standard)
                    .unwrap()
                    .is_none());
                // A synchronous send waits for its match: a pending request.
                let s = ep
                    .isend_or_done(peer, 4, 4, data(4, 100), SendMode::Synchronous)
                    .unwrap()
                    .unwrap();
                assert!(!ep.is_complete(s.id()));
                let mut ids = Vec::new();
                ep.take_completed(&mut ids);
                assert!(ids.is_empty(), "{ids:?}");
                assert_eq!(ep.wait_send(s).unwrap(), Some(data(4, 100)));
            } else {
                // Wait until tags 1..=3 have arrived (probe leaves them queued).
                while ep.iprobe(spec(peer, 3)).unwrap().is_none() {}
                for (k, len) in [(1u32, 8usize), (2, 3000), (3, 16)] {
                    match ep.irecv_or_done(spec(peer, k), vec![0; len + 5]).unwrap() {
                        Err((Ok(st), buf)) => {
                            assert_eq!((st.tag, st.len, st.msg_len), (k, len, len));
                            assert_eq!(buf[..len], data(k, len)[..]);
                        }
                        other => panic!("tag {k}: not finished at once: {other:?}"),
                    }
                }
                // Truncation is reported in the status, as `wait` does.
                let r = ep.irecv_or_done(spec(peer, 4), vec![0; 10]).unwrap();
                let (st, buf) = match r {
                    Ok(req) => ep.wait(req).unwrap(),
                    Err((res, buf)) => (res.unwrap(), buf),
                };
                assert!(st.truncated());
                assert_eq!((st.len, st.msg_len), (10, 100));
                assert_eq!(buf, data(4, 100)[..10]);
                let mut ids = Vec::new();
                ep.take_completed(&mut ids);
                assert!(
                    ids.is_empty(),
                    "finished-at-once requests are not reported: {ids:?}"
                );
            }
            ep.finalize().unwrap();
        });
    }

    /// A polling receive (`try_recv`) takes inline and eager arrivals
    /// directly, but never one that overtakes an older matching message of
    /// another kind from the same pass (a CMA message or fragments), and
    /// the direct path keeps the model's count: the protocol stays usable.
    #[test]
    fn try_recv_takes_the_oldest_matching_arrival() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("direct", move |me, mut ep| {
            let peer = 1 - me;
            let big = 2 << 20;
            if me == 1 {
                let s = ep
                    .isend(peer, 5, 4, data(50, big), SendMode::Standard)
                    .unwrap();
                ep.send(peer, 5, 4, &data(51, 16)).unwrap();
                ep.send(peer, 6, 4, &data(60, 3000)).unwrap();
                ep.send(peer, 5, 4, &data(52, 24)).unwrap();
                // All four headers are in the ring (or staged behind the
                // first) before the receiver's first pass.
                gate.wait();
                assert_eq!(ep.wait_send(s).unwrap(), Some(data(50, big)));
            } else {
                gate.wait();
                let mut buf = vec![0u8; big + 1];
                let mut want = |ep: &mut Endpoint, tag: u32| loop {
                    if let Some(st) = ep.try_recv(spec(peer, tag), &mut buf).unwrap() {
                        return (st, buf[..st.len].to_vec());
                    }
                };
                let (st, got) = want(&mut ep, 5);
                assert_eq!((st.len, st.msg_len), (big, big), "overtaken: {st:?}");
                assert_eq!(got, data(50, big));
                let (st, got) = want(&mut ep, 5);
                assert_eq!((st.len, got), (16, data(51, 16)));
                let (st, got) = want(&mut ep, 6);
                assert_eq!((st.len, got), (3000, data(60, 3000)));
                let (st, got) = want(&mut ep, 5);
                assert_eq!((st.len, got), (24, data(52, 24)));
                assert_eq!(ep.counters().received, 4);
            }
            ep.finalize().unwrap();
        });
    }
    /// The inline fast paths (`send_inline_now`, `take_now`): a
    /// receive whose message is not at the front of the ring leaves the
    /// front to the general path (queued, then matched in order); a
    /// synchronous inline message is not taken by the fast path but still
    /// delivered and acknowledged; zero-byte and truncated messages get the
    /// general path's status and counters; a ring that fills queues later
    /// inline sends behind the earlier ones (8-slot ring).
    #[test]
    fn inline_fast_paths_keep_order_status_and_counters() {
        let fill_len = |i: u32| {
            if i % 5 == 3 {
                2000 + i as usize
            } else {
                1 + i as usize
            }
        };
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("fastinl", move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                ep.send(peer, 7, 4, &data(1, 8)).unwrap();
                ep.send(peer, 9, 4, &data(2, 40)).unwrap();
                let s = ep
                    .isend_borrowed(peer, 7, 4, &data(3, 16), SendMode::Synchronous)
                    .unwrap();
                assert!(ep
                    .send_or_start(peer, 7, 4, &[], SendMode::Standard)
                    .unwrap()
                    .is_none());
                ep.isend_or_done(peer, 7, 4, data(4, 20), SendMode::Standard)
                    .unwrap()
                    .unwrap_err();
                // More than the ring holds: the rest queue behind (some
                // eager ones among them).
                for i in 0..20 {
                    ep.send(peer, 8, 4, &data(10 + i, fill_len(i))).unwrap();
                }
                gate.wait();
                ep.wait_send(s).unwrap();
                // The tag-8 sends still queued here go into the ring first.
                ep.flush().unwrap();
                // Sent once the receiver has drained everything: taken by
                // its fast path.
                gate.wait();
                ep.send(peer, 5, 4, &data(5, 20)).unwrap();
                ep.send(peer, 5, 4, &data(6, 33)).unwrap();
                // Inline-ext and eager, each whole and truncated.
                ep.send(peer, 5, 4, &data(7, 100)).unwrap();
                ep.send(peer, 5, 4, &data(8, 100)).unwrap();
                ep.send(peer, 5, 4, &data(9, 3000)).unwrap();
                ep.send(peer, 5, 4, &data(10, 3000)).unwrap();
            } else {
                gate.wait();
                let mut buf = [0u8; 4096];
                let mut want = |ep: &mut Endpoint, tag: u32, cap: usize| loop {
                    if let Some(st) = ep.try_recv(spec(peer, tag), &mut buf[..cap]).unwrap() {
                        return (st, buf[..st.len].to_vec());
                    }
                };
                // Tag 9 is second in the ring: tag 7's message is queued.
                let (st, got) = want(&mut ep, 9, 64);
                assert_eq!((st.source, st.tag, st.context), (peer, 9, 4));
                assert_eq!((st.len, st.msg_len, got), (40, 40, data(2, 40)));
                let (st, got) = want(&mut ep, 7, 64);
                assert_eq!((st.len, got), (8, data(1, 8)), "order of tag 7");
                let (st, got) = want(&mut ep, 7, 64);
                assert_eq!((st.len, got), (16, data(3, 16)), "the synchronous one");
                let (st, _) = want(&mut ep, 7, 64);
                assert_eq!((st.len, st.msg_len, st.tag), (0, 0, 7), "zero bytes");
                let (st, got) = want(&mut ep, 7, 10);
                assert_eq!((st.len, st.msg_len), (10, 20), "truncated");
                assert!(st.truncated());
                assert_eq!(got, data(4, 20)[..10].to_vec());
                for i in 0..20 {
                    let (st, got) = want(&mut ep, 8, 4096);
                    assert_eq!(got, data(10 + i, fill_len(i)), "queued send {i}");
                    assert_eq!((st.source, st.tag, st.context), (peer, 8, 4));
                }
                gate.wait();
                let (st, got) = want(&mut ep, 5, 10);
                assert_eq!((st.len, st.msg_len, st.tag), (10, 20, 5), "truncated");
                assert_eq!(got, data(5, 20)[..10].to_vec());
                let (st, got) = want(&mut ep, 5, 64);
                assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
                assert_eq!((st.len, st.msg_len, got), (33, 33, data(6, 33)));
                let mut big = vec![0u8; 4000];
                let mut take = |ep: &mut Endpoint, cap: usize| loop {
                    if let Some(st) = ep.try_recv(spec(peer, 5), &mut big[..cap]).unwrap() {
                        assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
                        return (st, big[..st.len].to_vec());
                    }
                };
                let (st, got) = take(&mut ep, 4000);
                assert_eq!((st.len, st.msg_len, got), (100, 100, data(7, 100)));
                let (st, got) = take(&mut ep, 50);
                assert_eq!((st.len, st.msg_len), (50, 100));
                assert_eq!(got, data(8, 100)[..50].to_vec());
                let (st, got) = take(&mut ep, 4000);
                assert_eq!((st.len, st.msg_len, got), (3000, 3000, data(9, 3000)));
                let (st, got) = take(&mut ep, 1000);
                assert_eq!((st.len, st.msg_len), (1000, 3000));
                assert_eq!(got, data(10, 3000)[..1000].to_vec());
                let c = ep.counters();
                assert_eq!((c.received, c.truncated), (31, 4));
            }
            ep.finalize().unwrap();
        });
    }

    /// Inline messages with continuation slots (41..=280 B with a 64-slot
    /// ring) on every receive path: posted `irecv`s, a blocking receive
    /// that takes them straight from the ring, queued (unexpected) ones
    /// with truncation, `ANY_SOURCE`; the ring fills, so some fall back to
    /// the eager path, and per-tag order holds throughout.
    #[test]
    fn inline_ext_messages_on_every_receive_path() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        let sizes = [41usize, 60, 100, 101, 160, 221, 280, 281, 40, 8];
        let cfg = Config {
            inline_ext: 280,
            ..test_cfg(64)
        };
        pair_cfg("ext", cfg, move |me, mut ep| {
            let peer = 1 - me;
            let n = 90u32;
            if me == 1 {
                gate.wait();
                for i in 0..n {
                    let len = sizes[i as usize % sizes.len()];
                    ep.send(peer, i % 3, 4, &data(i, len)).unwrap();
                }
                let c = ep.counters();
                assert_eq!(c.inline_sends + c.buffered_sends, u64::from(n), "{c}");
                assert!(c.inline_sends > 27, "continuation slots unused: {c}");
            } else {
                // Tag 1: posted before anything arrives.
                let posted: Vec<_> = (0..n)
                    .filter(|i| i % 3 == 1)
                    .map(|_| ep.irecv(spec(peer, 1), vec![0u8; 300]).unwrap())
                    .collect();
                gate.wait();
                // Tag 0: blocking receives, in send order.
                let mut buf = vec![0u8; 300];
                for i in (0..n).filter(|i| i % 3 == 0) {
                    let len = sizes[i as usize % sizes.len()];
                    let st = ep.recv(spec(peer, 0), &mut buf).unwrap();
                    assert_eq!((st.tag, st.len, st.msg_len), (0, len, len), "message {i}");
                    assert_eq!(buf[..len], data(i, len)[..], "message {i}");
                }
                // Tag 2: mostly queued by now; received with ANY_SOURCE into a
                // 50-byte buffer (truncating the longer ones).
                let any = MatchSpec {
                    context_id: 4,
                    source: Source::Any,
                    tag: Tag::Value(2),
                };
                let mut short = vec![0u8; 50];
                for i in (0..n).filter(|i| i % 3 == 2) {
                    let len = sizes[i as usize % sizes.len()];
                    let st = ep.recv(any, &mut short).unwrap();
                    assert_eq!((st.source, st.msg_len), (peer, len), "message {i}");
                    assert_eq!(st.len, len.min(50));
                    assert_eq!(short[..st.len], data(i, len)[..st.len], "message {i}");
                }
                for (r, i) in posted.into_iter().zip((0..n).filter(|i| i % 3 == 1)) {
                    let len = sizes[i as usize % sizes.len()];
                    let (st, got) = ep.wait(r).unwrap();
                    assert_eq!((st.len, st.msg_len), (len, len), "message {i}");
                    assert_eq!(got[..len], data(i, len)[..], "message {i}");
                }
                let c = ep.counters();
                assert_eq!(c.received, u64::from(n), "{c}");
                assert!(c.truncated > 0, "{c}");
            }
            ep.finalize().unwrap();
        });
    }

    /// A streaming sender (no receive outstanding) copies 4–8 KiB eager
    /// payloads in steps with the next block's prefetch (`PREFETCH_STEP`):
    /// every byte of a window of them arrives, in order, as a window sent
    /// while a receive is outstanding does. A first window, received
    /// before the second is sent, leaves released blocks of each class for
    /// the second window's sends to prefetch.
    #[test]
    fn stepped_eager_copies_arrive_whole() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair_cfg("steps", test_cfg(64), move |me, mut ep| {
            let peer = 1 - me;
            let sizes = [4096usize, 5000, 8192, 4097, 6143];
            let n = 30u32;
            let mut buf = vec![0u8; 8192];
            // Checked after the last gate, so that a failure fails the test
            // instead of leaving the other thread at a gate.
            let mut bad = Vec::new();
            for (round, tag) in [(0u32, 1u32), (1, 2)] {
                if me == 0 {
                    // Round 1's second half with a receive outstanding.
                    let mut pending = None;
                    for i in 0..n {
                        if round == 1 && i == n / 2 {
                            pending = Some(ep.irecv(spec(peer, 9), vec![0u8; 8]).unwrap());
                        }
                        let len = sizes[i as usize % sizes.len()];
                        ep.send(peer, tag, 4, &data(i + 100 * round, len)).unwrap();
                    }
                    gate.wait();
                    if let Some(r) = pending {
                        let (st, _) = ep.wait(r).unwrap();
                        assert_eq!(st.len, 8);
                    }
                    // Round 0's blocks all released before round 1.
                    gate.wait();
                } else {
                    gate.wait();
                    for i in 0..n {
                        let len = sizes[i as usize % sizes.len()];
                        let st = ep.recv(spec(peer, tag), &mut buf).unwrap();
                        let want = data(i + 100 * round, len);
                        if st.len != len || buf[..len] != want[..] {
                            bad.push((round, i, st.len));
                        }
                    }
                    if round == 1 {
                        ep.send(peer, 9, 4, &[7u8; 8]).unwrap();
                    }
                    gate.wait();
                }
            }
            assert!(
                bad.is_empty(),
                "(round, message, len) received wrong: {bad:?}"
            );
            if me == 0 {
                let c = ep.counters();
                assert_eq!(c.buffered_sends, u64::from(2 * n), "{c}");
            }
            ep.finalize().unwrap();
        });
    }

    /// Both sides of `n` round trips of `len`-byte messages with tag
    /// `tag` between ranks 0 and 1: rank 0 sends message i, rank 1
    /// answers with message i + 1; every byte is checked.
    fn ping_pong(me: u32, ep: &mut Endpoint, tag: u32, len: usize, n: u32) {
        let peer = 1 - me;
        let mut buf = vec![0u8; len];
        for i in 0..n {
            let (out, back) = if me == 0 { (i, i + 1) } else { (i + 1, i) };
            if me == 0 {
                ep.send(peer, tag, 4, &data(out, len)).unwrap();
            }
            let st = ep.recv(spec(peer, tag), &mut buf).unwrap();
            assert_eq!((st.len, &buf[..]), (len, &data(back, len)[..]));
            if me == 1 {
                ep.send(peer, tag, 4, &data(out, len)).unwrap();
            }
        }
    }

    /// How a reply goes another way than an eager block: its setting in
    /// the configuration, a size that takes it, one that does not, and the
    /// counter of its sends.
    #[derive(Clone, Copy)]
    struct ReplyWay {
        name: &'static str,
        set: fn(&mut Config, bool),
        len: usize,
        other_len: usize,
        count: fn(&crate::Counters) -> u64,
    }

    /// Checks a `ReplyWay` on and off: in a ping-pong every reply takes
    /// it (all but rank 0's first send), in a window of sends only the
    /// window's first, a message of `other_len` never, and with the
    /// setting off nothing does; every message arrives whole.
    fn check_reply_way(way: ReplyWay) {
        for on in [true, false] {
            let mut cfg = test_cfg(64);
            (way.set)(&mut cfg, on);
            pair_cfg(&format!("{}{on}", way.name), cfg, move |me, mut ep| {
                let peer = 1 - me;
                let len = way.len;
                ping_pong(me, &mut ep, 1, len, 10);
                let c = ep.counters();
                let replies = if on { 10 - u64::from(me == 0) } else { 0 };
                assert_eq!(
                    ((way.count)(&c), c.buffered_sends),
                    (replies, 10 - replies),
                    "{c}"
                );
                let (taken, eager) = ((way.count)(&c), c.buffered_sends);
                // A window of 8 from rank 0: only its first follows a take.
                if me == 0 {
                    let reqs: Vec<_> = (0..8u32)
                        .map(|i| {
                            ep.isend(peer, 2, 4, data(50 + i, len), SendMode::Standard)
                                .unwrap()
                        })
                        .collect();
                    for r in reqs {
                        ep.wait_send(r).unwrap();
                    }
                    let c = ep.counters();
                    let first = u64::from(on);
                    assert_eq!(
                        ((way.count)(&c) - taken, c.buffered_sends - eager),
                        (first, 8 - first),
                        "{c}"
                    );
                } else {
                    let mut buf = vec![0u8; len];
                    for i in 0..8u32 {
                        let st = ep.recv(spec(peer, 2), &mut buf).unwrap();
                        assert_eq!((st.len, &buf[..]), (len, &data(50 + i, len)[..]));
                    }
                }
                // A size the setting leaves to eager blocks.
                let before = (way.count)(&ep.counters());
                ping_pong(me, &mut ep, 3, way.other_len, 5);
                assert_eq!((way.count)(&ep.counters()), before, "rank {me}");
                ep.finalize().unwrap();
            });
        }
    }

    /// `TMX_SHMEM_CMA_REPLY`: a 7,000-byte reply goes by CMA (6,144 bytes
    /// does not), where CMA is available.
    #[test]
    fn cma_reply_in_a_ping_pong_not_in_a_window() {
        let job = format!("ut{}-cmaprobe", std::process::id());
        let node = Node::init(&job, 0, 1, test_cfg(64)).unwrap();
        if *node.cma_status() != CmaStatus::Available {
            eprintln!("CMA not available here: nothing to check");
            return;
        }
        drop(node);
        check_reply_way(ReplyWay {
            name: "cmareply",
            // Duplex CMA off: after the ping-pong, the window would go by
            // CMA whole (traffic both ways).
            set: |c, on| {
                c.cma_reply = if on { 6 << 10 } else { u64::MAX };
                c.cma_duplex = u64::MAX;
            },
            len: 7000,
            other_len: 6144,
            count: |c| c.cma_sends,
        });
    }

    /// Whether CMA works between two endpoints of this process (tests of
    /// CMA paths have nothing to check where it does not).
    fn cma_here(name: &str) -> bool {
        let job = format!("ut{}-{name}probe", std::process::id());
        let node = Node::init(&job, 0, 1, test_cfg(64)).unwrap();
        let ok = *node.cma_status() == CmaStatus::Available;
        if !ok {
            eprintln!("CMA not available here: nothing to check");
        }
        ok
    }

    /// Posts `n` receives of `cap` bytes from the peer (tag 7), tells the
    /// peer (tag 8) and waits for them; returns them in order.
    fn posted_window(ep: &mut Endpoint, peer: u32, n: u32, cap: usize) -> Vec<(Status, Vec<u8>)> {
        let reqs: Vec<_> = (0..n)
            .map(|_| ep.irecv(spec(peer, 7), vec![0u8; cap]).unwrap())
            .collect();
        ep.send(peer, 8, 4, &[1]).unwrap();
        reqs.into_iter().map(|r| ep.wait(r).unwrap()).collect()
    }

    /// A reply of an eager size sent by CMA (`TMX_SHMEM_CMA_REPLY`) that
    /// arrives before its receive is read aside and its FIN returned: the
    /// blocking send completes although the receiver posts its receive only
    /// after a message the sender sends next.
    #[test]
    fn unexpected_cma_reply_does_not_wait_for_its_receive() {
        if !cma_here("pullaside") {
            return;
        }
        pair_cfg("pullaside", test_cfg(64), move |me, mut ep| {
            let peer = 1 - me;
            ping_pong(me, &mut ep, 1, 7000, 4);
            // Rank 1's last reply has had its FIN (its blocking send
            // returned) before rank 0 sends: rank 1 is not waiting for a
            // FIN of its own, which would pull the message aside too.
            if me == 0 {
                let mut go = [0u8; 1];
                ep.recv(spec(peer, 9), &mut go).unwrap();
            } else {
                ep.send(peer, 9, 4, &[1]).unwrap();
            }
            if me == 0 {
                let before = ep.counters().cma_sends;
                let r = ep
                    .isend(peer, 5, 4, data(77, 7000), SendMode::Standard)
                    .unwrap();
                assert_eq!(ep.counters().cma_sends, before + 1, "a reply by CMA");
                // Completes without its receive (a deadline, not a hang,
                // if it does not).
                let t0 = Instant::now();
                while !ep.test_send(&r).unwrap() {
                    assert!(
                        t0.elapsed() < Duration::from_secs(20),
                        "the send waits for its receive"
                    );
                    std::thread::yield_now();
                }
                ep.wait_send(r).unwrap();
                ep.send(peer, 6, 4, &[1]).unwrap();
            } else {
                let mut tok = [0u8; 1];
                let t0 = Instant::now();
                while ep.try_recv(spec(peer, 6), &mut tok).unwrap().is_none() {
                    assert!(t0.elapsed() < Duration::from_secs(30), "no token");
                    std::thread::yield_now();
                }
                let mut buf = vec![0u8; 7000];
                let st = ep.recv(spec(peer, 5), &mut buf).unwrap();
                assert!(st.len == 7000 && buf == data(77, 7000), "{st:?}");
                assert!(ep.counters().cma_pulled >= 1, "{}", ep.counters());
            }
            ep.finalize().unwrap();
        });
    }

    /// The sender's side of the CMA batch tests: once `peer` says go (tag
    /// 8), sends `n` messages of `len` bytes (tag 7, `data(100 + i)`),
    /// raises `all_sent` once all are in the ring, waits for them and
    /// checks that every one went by CMA.
    fn send_cma_when_told(
        ep: &mut Endpoint,
        peer: u32,
        n: u32,
        len: usize,
        all_sent: &std::sync::atomic::AtomicBool,
    ) {
        let mut go = [0u8; 1];
        ep.recv(spec(peer, 8), &mut go).unwrap();
        let reqs: Vec<_> = (0..n)
            .map(|i| {
                ep.isend(peer, 7, 4, data(100 + i, len), SendMode::Standard)
                    .unwrap()
            })
            .collect();
        all_sent.store(true, Ordering::Release);
        for r in reqs {
            ep.wait_send(r).unwrap();
        }
        assert_eq!(ep.counters().cma_sends, u64::from(n), "{}", ep.counters());
    }

    /// `TMX_SHMEM_CMA_BATCH`: CMA messages that match posted receives in
    /// one progress pass are read in one `process_vm_readv` call (a
    /// truncating receive among them gets its prefix), and arrive whole;
    /// off, each is read alone.
    #[test]
    fn posted_cma_receives_read_in_one_call() {
        if !cma_here("cmabatch") {
            return;
        }
        for on in [true, false] {
            let mut cfg = test_cfg(64);
            cfg.cma_batch = on;
            // Rank 0 raises it once all its sends are in the ring: rank 1
            // makes no endpoint call until then, so that one progress pass
            // finds them all however the two threads are scheduled.
            let all_sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            pair_cfg(&format!("cmabatch{on}"), cfg, move |me, mut ep| {
                let peer = 1 - me;
                let len = 20_000;
                let n = 12u32;
                if me == 1 {
                    // The fifth receive is 5,000 bytes short.
                    let got = {
                        let reqs: Vec<_> = (0..n)
                            .map(|i| {
                                let cap = if i == 4 { len - 5000 } else { len };
                                ep.irecv(spec(peer, 7), vec![0u8; cap]).unwrap()
                            })
                            .collect();
                        ep.send(peer, 8, 4, &[1]).unwrap();
                        while !all_sent.load(Ordering::Acquire) {
                            std::thread::yield_now();
                        }
                        reqs.into_iter()
                            .map(|r| ep.wait(r).unwrap())
                            .collect::<Vec<_>>()
                    };
                    for (i, (st, buf)) in got.into_iter().enumerate() {
                        let want = data(100 + i as u32, len);
                        if i == 4 {
                            assert!(st.truncated(), "{st:?}");
                            assert!(buf[..] == want[..len - 5000], "message {i}'s prefix");
                        } else {
                            assert!(st.len == len && buf == want, "message {i}: {st:?}");
                        }
                    }
                    let c = ep.counters();
                    if on {
                        // One pass matched all 12: one call read them.
                        assert!(c.cma_batches >= 1 && c.cma_batched == u64::from(n), "{c}");
                    } else {
                        assert_eq!((c.cma_batches, c.cma_batched), (0, 0), "{c}");
                    }
                } else {
                    send_cma_when_told(&mut ep, peer, n, len, &all_sent);
                }
                ep.finalize().unwrap();
            });
        }
    }

    /// A nonblocking receive made after CMA messages arrived does not read
    /// the one an earlier receive matches while it hands the ring to the
    /// model: that copy waits for the next progress pass with the
    /// receive's own (read together, one `process_vm_readv`). Read inside
    /// the call, a rank behind its peer posted its own sends only after
    /// it had read the peer's whole window (`bibw`: the ranks copied in
    /// turn). Both arrive whole.
    #[test]
    fn cma_of_an_earlier_receive_waits_for_the_next_pass() {
        if !cma_here("cmaposted") {
            return;
        }
        let all_sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        pair_cfg("cmaposted", test_cfg(64), move |me, mut ep| {
            let peer = 1 - me;
            let len = 20_000;
            if me == 1 {
                let first = match ep.irecv_or_done(spec(peer, 7), vec![0u8; len]).unwrap() {
                    Ok(r) => r,
                    Err(_) => panic!("nothing was sent yet"),
                };
                ep.send(peer, 8, 4, &[1]).unwrap();
                while !all_sent.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                let second = match ep.irecv_or_done(spec(peer, 7), vec![0u8; len]).unwrap() {
                    Ok(r) => r,
                    Err(_) => panic!("a CMA message is never read inside irecv"),
                };
                let read_in_calls = ep.counters().received;
                // Matched, though not read yet: neither can be cancelled.
                assert!(!ep.cancel_recv(&first).unwrap(), "first cancelled");
                assert!(!ep.cancel_recv(&second).unwrap(), "second cancelled");
                for (i, r) in [first, second].into_iter().enumerate() {
                    let (st, buf) = ep.wait(r).unwrap();
                    assert!(
                        st.len == len && buf == data(100 + i as u32, len),
                        "{i}: {st:?}"
                    );
                }
                // Checked once both are read: the sender's waits end.
                assert_eq!(read_in_calls, 0, "neither was read inside the calls");
                let c = ep.counters();
                assert!(c.cma_batches == 1 && c.cma_batched == 2, "{c}");
            } else {
                send_cma_when_told(&mut ep, peer, 2, len, &all_sent);
            }
            ep.finalize().unwrap();
        });
    }

    /// `TMX_SHMEM_CMA_DUPLEX`: 7,000-byte messages streamed one way go
    /// through eager blocks; exchanged both ways (both ranks post their
    /// receives, then send), most go by CMA; with the setting off, none.
    /// Every message arrives whole.
    #[test]
    fn cma_duplex_both_ways_not_one_way() {
        if !cma_here("duplex") {
            return;
        }
        for on in [true, false] {
            let mut cfg = test_cfg(64);
            cfg.cma_duplex = if on { 6 << 10 } else { u64::MAX };
            cfg.cma_reply = u64::MAX;
            pair_cfg(&format!("duplex{on}"), cfg, move |me, mut ep| {
                let peer = 1 - me;
                let len = 7000;
                let n = 16u32;
                // One way: rank 0 streams a window of n.
                if me == 0 {
                    let mut go = [0u8; 1];
                    ep.recv(spec(peer, 8), &mut go).unwrap();
                    let reqs: Vec<_> = (0..n)
                        .map(|i| {
                            ep.isend(peer, 7, 4, data(i, len), SendMode::Standard)
                                .unwrap()
                        })
                        .collect();
                    for r in reqs {
                        ep.wait_send(r).unwrap();
                    }
                    assert_eq!(ep.counters().cma_sends, 0, "{}", ep.counters());
                } else {
                    for (i, (st, buf)) in
                        posted_window(&mut ep, peer, n, len).into_iter().enumerate()
                    {
                        assert!(st.len == len && buf == data(i as u32, len), "{i}: {st:?}");
                    }
                }
                // Both ways: four windows of n each way.
                let before = ep.counters().cma_sends;
                for w in 0..4u32 {
                    let seed = |i: u32| 1000 + w * 100 + i * 2 + me;
                    let rreqs: Vec<_> = (0..n)
                        .map(|_| ep.irecv(spec(peer, 9), vec![0u8; len]).unwrap())
                        .collect();
                    let sreqs: Vec<_> = (0..n)
                        .map(|i| {
                            ep.isend(peer, 9, 4, data(seed(i), len), SendMode::Standard)
                                .unwrap()
                        })
                        .collect();
                    for r in sreqs {
                        ep.wait_send(r).unwrap();
                    }
                    for (i, r) in rreqs.into_iter().enumerate() {
                        let (st, buf) = ep.wait(r).unwrap();
                        let want = data(1000 + w * 100 + i as u32 * 2 + peer, len);
                        assert!(st.len == len && buf == want, "window {w}, {i}: {st:?}");
                    }
                }
                let by_cma = ep.counters().cma_sends - before;
                if on {
                    assert!(
                        by_cma >= u64::from(2 * n),
                        "{by_cma} of {}: {}",
                        4 * n,
                        ep.counters()
                    );
                } else {
                    assert_eq!(by_cma, 0, "{}", ep.counters());
                }
                ep.finalize().unwrap();
            });
        }
    }

    /// Both ranks sending before receiving, each message after one taken
    /// from the other (so replies, by CMA above `TMX_SHMEM_CMA_REPLY`):
    /// each blocked send finishes, because a blocked rank copies the
    /// other's CMA message aside and returns its FIN.
    #[test]
    fn head_to_head_replies_finish() {
        pair_cfg("h2h", test_cfg(64), move |me, mut ep| {
            let peer = 1 - me;
            let mut buf = vec![0u8; 7000];
            for i in 0..20u32 {
                ep.send(peer, 1, 4, &data(i * 2 + me, 7000)).unwrap();
                let st = ep.recv(spec(peer, 1), &mut buf).unwrap();
                assert_eq!((st.len, &buf[..]), (7000, &data(i * 2 + peer, 7000)[..]));
            }
            if *ep.node().cma_status() == CmaStatus::Available {
                assert!(ep.counters().cma_sends > 0, "{}", ep.counters());
            }
            ep.finalize().unwrap();
        });
    }

    /// `TMX_SHMEM_INLINE_REPLY`: a 200-byte reply goes inline (400 bytes,
    /// above the cap of 300, does not).
    #[test]
    fn inline_reply_in_a_ping_pong_not_in_a_window() {
        check_reply_way(ReplyWay {
            name: "inlinereply",
            set: |c, on| c.inline_reply = if on { 300 } else { 0 },
            len: 200,
            other_len: 400,
            count: |c| c.inline_sends,
        });
    }

    /// Replies of up to `TMX_SHMEM_INLINE_REPLY` bytes (17 continuation
    /// slots at 1 KiB) reach every kind of receive whole: a blocking
    /// receive, a receive posted before its message (deferred, then
    /// drained), one made after it arrived, a probe then a receive, and a
    /// receive into a short buffer (truncated, counted once).
    #[test]
    fn replies_inline_reach_every_receive_kind() {
        let cfg = Config {
            inline_reply: 1024,
            ..test_cfg(64)
        };
        pair_cfg("replykinds", cfg, move |me, mut ep| {
            let peer = 1 - me;
            let sizes = [129usize, 500, 1000, 1024, 160];
            let rounds = 40u32;
            let mut buf = vec![0u8; 1024];
            for i in 0..rounds {
                let len = sizes[i as usize % sizes.len()];
                let seed = i * 2 + me;
                // Rank 1 answers; rank 0 starts each round.
                if me == 1 {
                    let want = data(i * 2, len);
                    match i % 5 {
                        0 => {
                            let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                            assert_eq!((st.len, &buf[..len]), (len, &want[..]), "round {i}");
                        }
                        1 => {
                            // Posted before the message exists.
                            let r = ep.irecv(spec(peer, i), vec![0u8; 1024]).unwrap();
                            let (st, got) = ep.wait(r).unwrap();
                            assert_eq!((st.len, &got[..len]), (len, &want[..]), "round {i}");
                        }
                        2 => {
                            let st = ep.probe(spec(peer, i)).unwrap();
                            assert_eq!(st.msg_len, len, "round {i}");
                            let r = ep.irecv(spec(peer, i), vec![0u8; len]).unwrap();
                            let (st, got) = ep.wait(r).unwrap();
                            assert_eq!((st.len, got), (len, want), "round {i}");
                        }
                        3 => {
                            // Into a buffer shorter than the message.
                            let mut short = vec![0u8; 70];
                            let st = ep.recv(spec(peer, i), &mut short).unwrap();
                            assert_eq!((st.len, st.msg_len), (70, len), "round {i}");
                            assert_eq!(short[..], want[..70], "round {i}");
                        }
                        _ => {
                            let st = ep.probe(spec(peer, i)).unwrap();
                            assert_eq!(st.msg_len, len);
                            match ep.recv_arrived(spec(peer, i), &mut buf).unwrap() {
                                Some(st) => assert_eq!((st.len, &buf[..len]), (len, &want[..])),
                                None => {
                                    let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                                    assert_eq!((st.len, &buf[..len]), (len, &want[..]));
                                }
                            }
                        }
                    }
                    ep.send(peer, i, 4, &data(seed, len)).unwrap();
                } else {
                    ep.send(peer, i, 4, &data(seed, len)).unwrap();
                    let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                    assert_eq!((st.len, &buf[..len]), (len, &data(i * 2 + 1, len)[..]));
                }
            }
            let c = ep.counters();
            assert_eq!(c.received, u64::from(rounds), "rank {me}: {c}");
            // Every send but rank 0's first is a reply.
            assert_eq!(c.inline_sends, u64::from(rounds - 1 + me), "rank {me}: {c}");
            if me == 1 {
                assert_eq!(c.truncated, u64::from(rounds / 5), "{c}");
            }
            ep.finalize().unwrap();
        });
    }

    /// Inline messages with continuation slots arriving for receives
    /// posted before them go from the slots straight into the receives'
    /// own buffers: the right bytes, truncation to a short buffer in the
    /// status and counted once, every message counted as received.
    #[test]
    fn posted_inline_ext_into_short_owned_buffers() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        let sizes = [41usize, 60, 100, 221, 280, 48];
        let cfg = Config {
            inline_ext: 280,
            ..test_cfg(64)
        };
        pair_cfg("extpost", cfg, move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                gate.wait();
                for (i, &len) in sizes.iter().enumerate() {
                    ep.send(peer, 7, 4, &data(i as u32, len)).unwrap();
                }
            } else {
                let posted: Vec<_> = sizes
                    .iter()
                    .map(|_| ep.irecv(spec(peer, 7), vec![0u8; 50]).unwrap())
                    .collect();
                gate.wait();
                for (i, r) in posted.into_iter().enumerate() {
                    let len = sizes[i];
                    let (st, got) = ep.wait(r).unwrap();
                    assert_eq!((st.len, st.msg_len), (len.min(50), len), "message {i}");
                    assert_eq!(got[..st.len], data(i as u32, len)[..st.len], "message {i}");
                }
                let c = ep.counters();
                assert_eq!(c.received, sizes.len() as u64, "{c}");
                assert_eq!(c.truncated, 4, "{c}");
            }
            ep.finalize().unwrap();
        });
    }

    /// `irecv_or_done` drains what has arrived before posting: an older
    /// posted receive still takes the first matching message and the new
    /// one the next (never overtaking), and with nothing posted or queued a
    /// receive takes its message (inline, or inline with continuation
    /// slots) straight from the ring, never queueing it as unexpected.
    #[test]
    fn recv_arrived_takes_only_the_front_message_nothing_can_come_between() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("arrived", move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                // Inline, inline-ext (one continuation slot, then a full
                // one), eager, then a synchronous one.
                for (k, len) in [(1u32, 8usize), (2, 64), (3, 100), (4, 300)] {
                    ep.send(peer, 5, 4, &data(k, len)).unwrap();
                }
                let sync = ep
                    .isend(peer, 5, 4, data(6, 8), SendMode::Synchronous)
                    .unwrap();
                gate.wait();
                gate.wait();
                ep.send(peer, 5, 4, &data(5, 8)).unwrap();
                gate.wait();
                ep.wait_send(sync).unwrap();
            } else {
                gate.wait();
                let received = ep.counters().received;
                let mut buf = vec![0u8; 128];
                // Another tag: declined, nothing taken.
                assert_eq!(ep.recv_arrived(spec(peer, 6), &mut buf).unwrap(), None);
                let st = ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().unwrap();
                assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
                assert_eq!((st.len, st.msg_len, &buf[..8]), (8, 8, &data(1, 8)[..]));
                // Too small a buffer: declined (the general path truncates).
                let mut small = vec![0u8; 10];
                assert_eq!(ep.recv_arrived(spec(peer, 5), &mut small).unwrap(), None);
                for (k, len) in [(2u32, 64usize), (3, 100), (4, 300)] {
                    let mut buf = vec![0u8; len];
                    let st = ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().unwrap();
                    assert_eq!((st.len, st.msg_len, buf), (len, len, data(k, len)));
                }
                assert_eq!(ep.counters().received, received + 4);
                // A synchronous message is the general path's (it owes an
                // acknowledgement).
                assert_eq!(ep.recv_arrived(spec(peer, 5), &mut [0; 8]).unwrap(), None);
                match ep.irecv_or_done(spec(peer, 5), vec![0; 8]).unwrap() {
                    Err((Ok(st), buf)) => assert_eq!((st.len, buf), (8, data(6, 8))),
                    Ok(r) => {
                        let (st, buf) = ep.wait(r).unwrap();
                        assert_eq!((st.len, buf), (8, data(6, 8)));
                    }
                    Err((Err(e), _)) => panic!("failed: {e}"),
                }
                // An older receive (deferred: the ring is empty) comes first.
                let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 8]).unwrap() {
                    Ok(r) => r,
                    Err(done) => panic!("nothing was left: {done:?}"),
                };
                gate.wait();
                gate.wait();
                let mut buf = vec![0u8; 8];
                while ep.ring_empty(peer) {
                    std::hint::spin_loop();
                }
                assert_eq!(ep.recv_arrived(spec(peer, 5), &mut buf).unwrap(), None);
                let (st, buf) = ep.wait(older).unwrap();
                assert_eq!((st.len, buf), (8, data(5, 8)));
            }
            ep.finalize().unwrap();
        });
    }

    /// `recv_arrived_with` hands the front eager message's payload to its
    /// consumer where it lies, exactly once, and releases its block; it
    /// declines (consumer not called, nothing taken) an inline message, a
    /// buffer too small, another tag, and anything once the matcher holds
    /// a message; `front_open` says when waiting for it is pointless.
    #[test]
    fn recv_arrived_with_reads_eager_payloads_in_place() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("in-place", move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                // Inline, then eager (3000 B: hinted whole; 5000 B with a
                // header behind it: not), then eager on another tag.
                for (k, tag, len) in [
                    (1u32, 5u32, 8usize),
                    (2, 5, 3000),
                    (3, 5, 5000),
                    (4, 6, 2000),
                ] {
                    ep.send(peer, tag, 4, &data(k, len)).unwrap();
                }
                assert_eq!(ep.eager.in_flight(), 3);
                gate.wait();
                gate.wait();
                // Every block came back: the in-place takes released theirs.
                let seg = ep.node.segment();
                ep.eager.reclaim(released(seg));
                assert_eq!(ep.eager.in_flight(), 0);
            } else {
                gate.wait();
                let mut seen: Vec<Vec<u8>> = Vec::new();
                let mut f = |p: &[u8]| seen.push(p.to_vec());
                // The inline message in front is not for it.
                assert_eq!(
                    ep.recv_arrived_with(spec(peer, 5), 100, &mut f).unwrap(),
                    None
                );
                let mut buf = [0u8; 8];
                assert!(ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().is_some());
                assert!(ep.front_open(spec(peer, 5)));
                let any = MatchSpec {
                    source: Source::Any,
                    ..spec(peer, 5)
                };
                assert!(!ep.front_open(any));
                assert!(!ep.front_open(spec(me, 5)));
                // Too small, another tag: declined.
                assert_eq!(
                    ep.recv_arrived_with(spec(peer, 5), 2999, &mut f).unwrap(),
                    None
                );
                assert_eq!(
                    ep.recv_arrived_with(spec(peer, 6), 4000, &mut f).unwrap(),
                    None
                );
                let received = ep.counters().received;
                for (k, len) in [(2u32, 3000usize), (3, 5000)] {
                    let st = ep
                        .recv_arrived_with(spec(peer, 5), 6000, &mut f)
                        .unwrap()
                        .unwrap();
                    assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
                    assert_eq!((st.len, st.msg_len), (len, len));
                    let _ = k;
                }
                assert_eq!(ep.counters().received, received + 2);
                // Once a pass has queued the last one, the general path's.
                ep.progress().unwrap();
                assert!(!ep.front_open(spec(peer, 6)));
                assert_eq!(
                    ep.recv_arrived_with(spec(peer, 6), 4000, &mut f).unwrap(),
                    None
                );
                let mut buf = vec![0u8; 2000];
                let st = ep.recv(spec(peer, 6), &mut buf).unwrap();
                assert_eq!((st.len, buf), (2000, data(4, 2000)));
                assert_eq!(seen, vec![data(2, 3000), data(3, 5000)]);
                gate.wait();
            }
            ep.finalize().unwrap();
        });
    }

    /// A deferred receive made with a consumer: an eager message is read
    /// where it lies (buffer untouched, consumer called once with exactly
    /// the payload), an inline one copied; a receive that is not deferred,
    /// or posted later, drops its consumer uncalled and copies.
    #[test]
    fn deferred_receive_with_consumer_reads_in_place() {
        use std::sync::{Arc, Mutex};
        let gate = Arc::new(std::sync::Barrier::new(2));
        pair_cfg(
            "consumer",
            Config {
                // No eager pressure or ring backpressure in the way.
                ring_slots: 64,
                publish_batch: 32,
                ..test_cfg(64)
            },
            move |me, mut ep| {
                let peer = 1 - me;
                if me == 1 {
                    // Each batch goes out once the receiver has made its
                    // receives, and is in the ring before it looks.
                    gate.wait();
                    for (k, len) in [(1u32, 3000usize), (2, 5000), (3, 8)] {
                        ep.send(peer, 5, 4, &data(k, len)).unwrap();
                    }
                    gate.wait();
                    gate.wait();
                    ep.send(peer, 6, 4, &data(4, 4000)).unwrap();
                    gate.wait();
                    gate.wait();
                    ep.send(peer, 7, 4, &data(5, 2000)).unwrap();
                    gate.wait();
                    gate.wait();
                } else {
                    let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
                    let consumer = |seen: &Arc<Mutex<Vec<Vec<u8>>>>| -> InPlace {
                        let seen = Arc::clone(seen);
                        Box::new(move |p: &[u8]| seen.lock().unwrap().push(p.to_vec()))
                    };
                    let pending = |r| match r {
                        Ok(r) => r,
                        Err(done) => panic!("nothing was sent yet: {done:?}"),
                    };
                    // Completed by progress passes, as the adi collects
                    // them (`wait` would post the deferred receives first).
                    let collect = |ep: &mut Endpoint, reqs: &[&RecvRequest]| {
                        let (mut sends, mut done) = (Vec::new(), Vec::new());
                        while done.len() < reqs.len() {
                            ep.progress().unwrap();
                            ep.take_finished(&mut sends, &mut done);
                        }
                        reqs.iter()
                            .map(|r| {
                                let i = done.iter().position(|d| d.id == r.id()).unwrap();
                                done.swap_remove(i).into_result().unwrap()
                            })
                            .collect::<Vec<_>>()
                    };
                    // Three deferred receives (nothing has arrived).
                    let reqs: Vec<RecvRequest> = (0..3)
                        .map(|_| {
                            let c = consumer(&seen);
                            pending(
                                ep.irecv_or_done_in_place(spec(peer, 5), vec![0; 6000], c)
                                    .unwrap(),
                            )
                        })
                        .collect();
                    assert_eq!((ep.deferred.len(), ep.consumers.len()), (3, 3));
                    gate.wait();
                    gate.wait();
                    let got = collect(&mut ep, &reqs.iter().collect::<Vec<_>>());
                    // Eager: read in place, the buffer untouched.
                    for (i, (k, len)) in [(1u32, 3000usize), (2, 5000)].into_iter().enumerate() {
                        assert_eq!((got[i].0.len, got[i].0.tag), (len, 5));
                        assert!(got[i].1.iter().all(|b| *b == 0), "buffer {i} written");
                        assert_eq!(seen.lock().unwrap()[i], data(k, len));
                    }
                    // Inline: copied, its consumer dropped.
                    assert_eq!((got[2].0.len, &got[2].1[..8]), (8, &data(3, 8)[..]));
                    assert_eq!(seen.lock().unwrap().len(), 2);
                    assert!(ep.consumers.is_empty());
                    // Not deferred (`ANY_SOURCE`): dropped uncalled, copied.
                    let any = MatchSpec {
                        source: Source::Any,
                        ..spec(peer, 6)
                    };
                    let c = consumer(&seen);
                    let r = pending(ep.irecv_or_done_in_place(any, vec![0; 6000], c).unwrap());
                    assert!(ep.consumers.is_empty());
                    gate.wait();
                    gate.wait();
                    let got = collect(&mut ep, &[&r]);
                    assert_eq!(
                        (got[0].0.len, &got[0].1[..4000]),
                        (4000, &data(4, 4000)[..])
                    );
                    // Deferred, then posted by a wildcard receive: dropped.
                    let c = consumer(&seen);
                    let r = pending(
                        ep.irecv_or_done_in_place(spec(peer, 7), vec![0; 6000], c)
                            .unwrap(),
                    );
                    assert_eq!(ep.consumers.len(), 1);
                    let other = pending(ep.irecv_or_done(any, vec![0; 8]).unwrap());
                    assert!(ep.consumers.is_empty());
                    gate.wait();
                    gate.wait();
                    let got = collect(&mut ep, &[&r]);
                    assert_eq!(
                        (got[0].0.len, &got[0].1[..2000]),
                        (2000, &data(5, 2000)[..])
                    );
                    assert!(ep.cancel_recv(&other).unwrap());
                    let _ = ep.wait(other);
                    assert_eq!(seen.lock().unwrap().len(), 2);
                    // Every consumer is gone: only this handle is left.
                    assert_eq!(Arc::strong_count(&seen), 1);
                    gate.wait();
                }
                ep.finalize().unwrap();
            },
        );
    }

    #[test]
    fn irecv_or_done_drains_in_order() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("drain", move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                gate.wait();
                for (k, len) in [(1u32, 8usize), (2, 100), (3, 24)] {
                    ep.send(peer, 5, 4, &data(k, len)).unwrap();
                }
                gate.wait();
                ep.send(peer, 6, 4, &data(9, 16)).unwrap();
                gate.wait();
                ep.send(peer, 7, 4, &data(10, 8)).unwrap();
                ep.send(peer, 7, 4, &data(11, 100)).unwrap();
                gate.wait();
            } else {
                let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 128]).unwrap() {
                    Ok(r) => r,
                    Err(done) => panic!("nothing was sent yet: {done:?}"),
                };
                gate.wait();
                gate.wait();
                // m1 goes to `older` (drained before this receive is
                // posted); this one gets m2, at once or when waited for.
                let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; 128]).unwrap() {
                    Err((r, buf)) => (r.unwrap(), buf),
                    Ok(r) => ep.wait(r).unwrap(),
                };
                assert_eq!((st.len, &buf[..100]), (100, &data(2, 100)[..]));
                let (st, buf) = ep.wait(older).unwrap();
                assert_eq!((st.len, &buf[..8]), (8, &data(1, 8)[..]));
                gate.wait();
                for (tag, k, len) in [(6u32, 9u32, 16usize), (5, 3, 24)] {
                    let (st, buf) = match ep.irecv_or_done(spec(peer, tag), vec![0; len]).unwrap() {
                        Err((r, buf)) => (r.unwrap(), buf),
                        Ok(r) => ep.wait(r).unwrap(),
                    };
                    assert_eq!((st.len, buf), (len, data(k, len)));
                }
                gate.wait();
                let queued = ep.counters().unexpected;
                for (k, len) in [(10u32, 8usize), (11, 100)] {
                    match ep.irecv_or_done(spec(peer, 7), vec![0; len]).unwrap() {
                        Err((Ok(st), buf)) => assert_eq!((st.len, buf), (len, data(k, len))),
                        other => panic!("not finished at once: {other:?}"),
                    }
                }
                assert_eq!(ep.counters().unexpected, queued, "taken through the queue");
            }
            ep.finalize().unwrap();
        });
    }

    /// Deferred receives that a progress pass completes go straight to the
    /// finished list (`ready`), in order, with their data; a receive looked
    /// up by id afterwards (`test`, `cancel_recv`, `take_completed`,
    /// `wait`) finds it complete, exactly once.
    #[test]
    fn deferred_receives_finished_in_a_drain_stay_visible_by_id() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair("ready", move |me, mut ep| {
            let peer = 1 - me;
            let sizes = [(1u32, 8usize), (2, 100), (3, 24), (4, 40)];
            if me == 1 {
                for _round in 0..2 {
                    gate.wait();
                    for (k, len) in sizes {
                        ep.send(peer, 5, 4, &data(k, len)).unwrap();
                    }
                    gate.wait();
                }
            } else {
                // Round 1: the finished list, taken as the ADI takes it.
                let mut ids = Vec::new();
                for (_, len) in sizes {
                    match ep.irecv_or_done(spec(peer, 5), vec![0; len]).unwrap() {
                        Ok(r) => ids.push(r.id()),
                        Err(done) => panic!("nothing was sent yet: {done:?}"),
                    }
                }
                assert_eq!(ep.deferred.len(), sizes.len(), "all deferred");
                gate.wait();
                gate.wait();
                while ep.ready.len() < sizes.len() {
                    ep.progress().unwrap();
                }
                assert!(ids.iter().all(|&id| ep.is_complete(id)));
                let (mut sends, mut recvs) = (Vec::new(), Vec::new());
                ep.take_finished(&mut sends, &mut recvs);
                assert!(ep.ready.is_empty() && sends.is_empty());
                let got: Vec<_> = recvs
                    .drain(..)
                    .map(|f| (f.id, f.result.unwrap().len, f.buf))
                    .collect();
                let want: Vec<_> = ids
                    .iter()
                    .zip(sizes)
                    .map(|(&id, (k, len))| (id, len, data(k, len)))
                    .collect();
                assert_eq!(got, want);
                ep.take_finished(&mut sends, &mut recvs);
                assert!(recvs.is_empty(), "handed over twice");

                // Round 2: the same receives looked up by id instead.
                let mut reqs = Vec::new();
                for (_, len) in sizes {
                    match ep.irecv_or_done(spec(peer, 5), vec![0; len]).unwrap() {
                        Ok(r) => reqs.push(r),
                        Err(done) => panic!("nothing was sent yet: {done:?}"),
                    }
                }
                gate.wait();
                gate.wait();
                while ep.ready.len() < sizes.len() {
                    ep.progress().unwrap();
                }
                assert!(!ep.cancel_recv(&reqs[1]).unwrap(), "a finished receive");
                assert!(ep.ready.is_empty(), "put back for the lookup");
                assert!(ep.test(&reqs[0]).unwrap());
                let mut reported = Vec::new();
                ep.take_completed(&mut reported);
                let ids: Vec<u64> = reqs.iter().map(|r| r.id()).collect();
                assert_eq!(reported, ids, "each reported once, in order");
                reported.clear();
                ep.take_completed(&mut reported);
                assert!(reported.is_empty());
                for (r, (k, len)) in reqs.into_iter().zip(sizes).rev() {
                    let (st, buf) = ep.wait(r).unwrap();
                    assert_eq!((st.len, st.cancelled, buf), (len, false, data(k, len)));
                }
            }
            ep.finalize().unwrap();
        });
    }

    /// A receive that finds older posted receives drains the ring into
    /// them and then takes its own message at once (the one after theirs),
    /// instead of posting behind them: the receiver of a window never stays
    /// one message behind. A pipelined message in between is not overtaken
    /// by the small one after it, and the posted-first counter says which
    /// receives were queued.
    #[test]
    fn irecv_or_done_catches_up_with_older_posted_receives() {
        catch_up("catchup", false);
    }

    /// The same with the older receives deferred (`TMX_SHMEM_DEFER_RECV`,
    /// the default): none is posted; the later `irecv_or_done` first
    /// completes them from the ring, in order, then takes its own message.
    /// The race of a progress pass with a deferred receive: its message
    /// reaches the matcher (as unexpected) after the pass looked at the
    /// deferred receives and found the ring empty. The next pass must post
    /// the deferred receive (the matcher is no longer empty), which then
    /// matches the queued message; one that only looked at the ring would
    /// wait for ever. Deterministic: both endpoints in one thread.
    #[test]
    fn deferred_receive_gets_a_message_that_reached_the_matcher_first() {
        let job = format!("ut{}-dfrrace", std::process::id());
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let j = job.clone();
                std::thread::spawn(move || {
                    Endpoint::new(Node::init(&j, r, 2, test_cfg(8)).unwrap())
                })
            })
            .collect();
        let mut eps: Vec<Endpoint> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let mut e1 = eps.pop().unwrap();
        let mut e0 = eps.pop().unwrap();
        let r = match e1.irecv_or_done(spec(0, 5), vec![0; 16]).unwrap() {
            Ok(r) => r,
            Err(done) => panic!("nothing was sent yet: {done:?}"),
        };
        assert_eq!(e1.counters().deferred_recvs, 1);
        e0.send(1, 5, 4, &data(1, 8)).unwrap();
        let mut want = None;
        assert!(matches!(
            e1.poll_one(0, &mut want, &mut []).unwrap(),
            Quick::Other
        ));
        assert_eq!(e1.off.unexpected_len(), 1, "queued as unexpected");
        let mut passes = 0;
        while !e1.test(&r).unwrap() {
            passes += 1;
            assert!(passes < 1000, "the deferred receive never matched");
        }
        let (st, buf) = e1.wait(r).unwrap();
        assert_eq!((st.len, &buf[..8]), (8, &data(1, 8)[..]));
        e0.finalize().unwrap();
        e1.finalize().unwrap();
    }

    #[test]
    fn irecv_or_done_completes_older_deferred_receives_first() {
        catch_up("catchup-defer", true);
    }

    fn catch_up(name: &str, defer: bool) {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        let big = 300 << 10;
        let cfg = Config {
            defer_recv: defer,
            ..test_cfg(64)
        };
        let (posted, deferred) = if defer { (0, 3) } else { (3, 0) };
        pair_cfg(name, cfg, move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                gate.wait();
                for k in 0..6u32 {
                    ep.send(peer, 5, 4, &data(k, 8 + 200 * k as usize)).unwrap();
                }
                gate.wait();
                // Once the receiver posted for m20.
                gate.wait();
                ep.send(peer, 5, 4, &data(20, 16)).unwrap();
                ep.send(peer, 5, 4, &data(21, big)).unwrap();
                ep.send(peer, 5, 4, &data(22, 16)).unwrap();
            } else {
                let older: Vec<_> = (0..3)
                    .map(
                        |_| match ep.irecv_or_done(spec(peer, 5), vec![0; 2048]).unwrap() {
                            Ok(r) => r,
                            Err(done) => panic!("nothing was sent yet: {done:?}"),
                        },
                    )
                    .collect();
                let c = ep.counters();
                assert_eq!((c.posted_recvs, c.deferred_recvs), (posted, deferred));
                gate.wait();
                gate.wait();
                // m0..m2 complete the older receives; this one takes m3.
                for k in 3..6u32 {
                    match ep.irecv_or_done(spec(peer, 5), vec![0; 2048]).unwrap() {
                        Err((Ok(st), buf)) => {
                            let len = 8 + 200 * k as usize;
                            assert_eq!((st.len, &buf[..len]), (len, &data(k, len)[..]), "m{k}");
                        }
                        other => panic!("m{k} not taken at once: {other:?}"),
                    }
                }
                for (k, r) in older.into_iter().enumerate() {
                    let (st, buf) = ep.wait(r).unwrap();
                    let len = 8 + 200 * k;
                    assert_eq!((st.len, &buf[..len]), (len, &data(k as u32, len)[..]));
                }
                assert_eq!(ep.counters().posted_recvs, posted, "none posted behind");
                let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 16]).unwrap() {
                    Ok(r) => r,
                    Err(done) => panic!("m20 was not sent yet: {done:?}"),
                };
                gate.wait();
                // m20 completes `older`; the big m21 comes before m22.
                let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; big]).unwrap() {
                    Err((r, buf)) => (r.unwrap(), buf),
                    Ok(r) => ep.wait(r).unwrap(),
                };
                assert_eq!((st.len, buf == data(21, big)), (big, true), "m21 overtaken");
                let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; 16]).unwrap() {
                    Err((r, buf)) => (r.unwrap(), buf),
                    Ok(r) => ep.wait(r).unwrap(),
                };
                assert_eq!((st.len, buf), (16, data(22, 16)));
                let (st, buf) = ep.wait(older).unwrap();
                assert_eq!((st.len, buf), (16, data(20, 16)));
            }
            ep.finalize().unwrap();
        });
    }

    /// `arrival_watch` tells, without the endpoint, whether the source has
    /// published a header at the endpoint's next index: false before the
    /// send, true after it (also for a message with continuation slots),
    /// and false again at the new index once the receive took it.
    #[test]
    fn arrival_watch_sees_headers_at_the_next_index() {
        let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
        pair_with("watch", 64, move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                for len in [8usize, 100] {
                    gate.wait();
                    ep.send(peer, 3, 4, &data(1, len)).unwrap();
                    gate.wait();
                }
            } else {
                assert!(ep.arrival_watch(me).is_none(), "no ring to oneself");
                assert!(ep.arrival_watch(2).is_none(), "no such rank");
                for len in [8usize, 100] {
                    let (w, next) = ep.arrival_watch(peer).unwrap();
                    assert!(!w.published(next), "nothing sent yet");
                    gate.wait();
                    gate.wait();
                    assert!(w.published(next), "the header is published");
                    let mut buf = vec![0u8; len];
                    let st = ep.recv(spec(peer, 3), &mut buf).unwrap();
                    assert_eq!((st.len, buf), (len, data(1, len)));
                    let (w2, next2) = ep.arrival_watch(peer).unwrap();
                    assert!(next2 > next);
                    assert!(!w2.published(next2), "nothing after it");
                }
            }
            ep.finalize().unwrap();
        });
    }
}
