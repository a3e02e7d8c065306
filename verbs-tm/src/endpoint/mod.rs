//! [`Endpoint`]: the TM-SRQ driver, generic over a [`Provider`].

mod cancel;
mod rx;
mod shared;
mod spare;
mod tx;

pub use cancel::CancelSend;
pub use shared::SharedStart;

use std::collections::{HashMap, VecDeque};
use std::fmt;

use tm_match::offload::{Action, CancelOutcome as OffCancel, Offload, OffloadConfig, PostOutcome};
use tm_match::{Envelope, MatchSpec, RecvId, Source};
use tm_proto::{Rvh, TagLayout, Tmh};
use tracing::{debug, info};

use crate::config::EndpointConfig;
use crate::verbs::{
    errno, CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, SrqId,
    SrqInitAttr, TmAdd, Wc, WrOpcode, IBV_ACCESS_LOCAL_WRITE, IBV_SEND_SIGNALED,
    IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_IMM, IBV_WC_EX_WITH_QP_NUM, IBV_WC_EX_WITH_TM_INFO,
};
use crate::{Error, Mr, Provider, Result};

/// How a send completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SendMode {
    /// Once the buffer may be reused: at once for an eager message, on the
    /// FIN for a rendezvous.
    #[default]
    Standard,
    /// Only once the receiver has matched the message (`MPI_Ssend`): always
    /// rendezvous.
    Synchronous,
}

/// What a completed receive matched, or what a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Status {
    /// The sender's rank.
    pub source: u32,
    /// The message tag.
    pub tag: u32,
    /// The context id.
    pub context: u32,
    /// Bytes written into the buffer: `min(msg_len, buffer length)`.
    pub len: usize,
    /// Bytes the sender sent; `msg_len > len` means truncated.
    pub msg_len: usize,
    /// The receive was cancelled: nothing was written.
    pub cancelled: bool,
}

impl Status {
    /// Whether the message was longer than the buffer (`MPI_ERR_TRUNCATE`).
    pub fn truncated(&self) -> bool {
        self.msg_len > self.len
    }

    fn of(env: &Envelope, len: usize, msg_len: usize) -> Self {
        Status {
            source: env.source,
            tag: env.tag,
            context: env.context_id,
            len,
            msg_len,
            cancelled: false,
        }
    }
}

/// A finished request, as [`Endpoint::take_completions`] hands it over.
#[derive(Debug)]
pub struct Finished {
    /// The request's id ([`SendStart::Pending`] / [`RecvStart::Pending`]).
    pub id: u64,
    /// A send (`true`) or a receive.
    pub send: bool,
    /// Its status, or why it failed (a dead peer).
    pub result: Result<Status>,
    /// The buffer handed to the request, given back (a receive's holds the
    /// data; a send's is the caller's data, unchanged).
    pub buf: Vec<u8>,
}

/// How a send started.
#[derive(Debug)]
#[must_use = "a pending send completes through take_completions"]
pub enum SendStart {
    /// Done in the call (copied into a send buffer): the data back.
    Done(Vec<u8>),
    /// Pending under this request id (unique among this endpoint's
    /// requests, below 2^63): reported by [`Endpoint::take_completions`].
    Pending(u64),
}

/// How a receive started.
#[derive(Debug)]
#[must_use = "a pending receive completes through take_completions"]
pub enum RecvStart {
    /// Finished in the call (its message had arrived): result and buffer.
    Done(Result<Status>, Vec<u8>),
    /// Pending under this request id: reported by
    /// [`Endpoint::take_completions`].
    Pending(u64),
}

/// A message taken out of matching by [`Endpoint::improbe`]; receive it
/// with [`Endpoint::imrecv`].
#[derive(Debug, PartialEq, Eq, Hash)]
#[must_use = "a matched message must be received (imrecv)"]
pub struct MessageHandle(u64);

/// The answer to [`Endpoint::cancel_recv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// Cancelled at once: its completion (status `cancelled`) is queued.
    Cancelled,
    /// The device holds it: a DEL is in flight; the request completes either
    /// cancelled or, if a message won the race, normally.
    Pending,
    /// Too late: it matched (or the handle is stale).
    Failed,
}

/// Protocol counters, printable at finalize.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// The matching model's counters (adds, deletes, syncs, engine and
    /// software matches, unexpected messages, withdrawals, delete races).
    pub offload: tm_match::offload::OffloadStats,
    /// Eager sends.
    pub eager_sends: u64,
    /// Of the eager sends, those the provider took inline
    /// ([`Provider::post_send_inline`]).
    pub inline_sends: u64,
    /// Rendezvous sends.
    pub rndv_sends: u64,
    /// Rendezvous receives finished by a software READ + FIN.
    pub sw_reads: u64,
    /// Of those, requests the device reported `IBV_WC_TM_RNDV_INCOMPLETE`.
    pub rndv_incomplete: u64,
    /// Receives whose data the device placed (eager or its own READ).
    pub device_receives: u64,
    /// Times list operations had to wait for room (full list or queue).
    pub ops_held: u64,
    /// Times a send waited for a send buffer.
    pub sends_held: u64,
    /// Self sends (through the matcher, no device).
    pub self_sends: u64,
    /// Sends withdrawn by `MPI_Cancel` ([`Endpoint::cancel_send`]).
    pub cancelled_sends: u64,
    /// Large temporaries (a borrowed rendezvous send's copy, a blocking
    /// rendezvous receive's region; 64 KiB and more) taken from the
    /// endpoint's spares.
    pub temps_reused: u64,
    /// Large temporaries allocated because no spare held them.
    pub temps_allocated: u64,
}

impl fmt::Display for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.offload;
        write!(
            f,
            "verbs-tm: eager {} (inline {}) rndv {} self {} | device receives {} sw reads {} (rndv incomplete {}) | \
             adds {} deletes {} syncs {} engine matches {} sw matches {} unexpected {} withdrawals {} delete races {} | \
             ops held {} sends held {} cancelled sends {} | temps reused {} allocated {}",
            self.eager_sends,
            self.inline_sends,
            self.rndv_sends,
            self.self_sends,
            self.device_receives,
            self.sw_reads,
            self.rndv_incomplete,
            o.adds,
            o.deletes,
            o.syncs,
            o.engine_matches,
            o.sw_matches,
            o.unexpected,
            o.withdrawals,
            o.delete_races,
            self.ops_held,
            self.sends_held,
            self.cancelled_sends,
            self.temps_reused,
            self.temps_allocated
        )
    }
}

/// A message as the matching model holds it.
#[derive(Debug)]
enum Msg {
    /// Matched by the device: the data is (or will be) in the tagged buffer.
    Engine,
    /// An unexpected eager message's payload.
    Eager(Vec<u8>),
    /// An unexpected rendezvous request.
    Rndv { peer: u32, tmh: Tmh, rvh: Rvh },
    /// A message to self; a synchronous send completes when it is matched.
    Local {
        data: Vec<u8>,
        sync_send: Option<u64>,
    },
}

impl Msg {
    fn len(&self) -> usize {
        match self {
            Msg::Engine => 0,
            Msg::Eager(d) | Msg::Local { data: d, .. } => d.len(),
            Msg::Rndv { rvh, .. } => rvh.len as usize,
        }
    }
}

#[derive(Debug)]
enum RecvBuf {
    Plain(Vec<u8>),
    Registered(Mr),
    Taken,
}

#[derive(Debug)]
struct RecvReq {
    rid: Option<RecvId>,
    buf: RecvBuf,
    cap: usize,
}

/// Where a device-matched receive's data stands.
#[derive(Debug, Clone)]
enum DataState {
    /// `MATCH` seen, `DATA_VALID` not yet.
    Waiting,
    /// A software READ (after `RNDV_INCOMPLETE`) is in flight.
    Reading,
    /// Done: bytes in the buffer and the sender's length, or an error.
    Ready(core::result::Result<(usize, usize), Error>),
}

#[derive(Debug)]
struct EngineRecv {
    data: DataState,
    /// The model's completion (`env`), once it came.
    env: Option<Envelope>,
    req: u64,
}

#[derive(Debug)]
struct SendReq {
    dest: u32,
    /// A rendezvous send's registered data (or its data for a zero-length
    /// one), until the FIN.
    mr: Option<Mr>,
    data: Vec<u8>,
    ctx: Option<u32>,
}

/// A send waiting for a send buffer (kept in order).
#[derive(Debug)]
enum Outgoing {
    Eager {
        id: u64,
        dest: u32,
        tag: u64,
        data: Vec<u8>,
    },
    Rndv {
        id: u64,
        dest: u32,
        tag: u64,
        ctx: u32,
        rvh: Rvh,
    },
    Fin {
        dest: u32,
        bytes: [u8; tm_proto::FIN_LEN],
    },
    /// A driver control message ([`tm_proto::Control`]), untagged.
    Control {
        dest: u32,
        bytes: [u8; tm_proto::CONTROL_LEN],
    },
}

/// Model input that waits behind a shared post's proposal (or behind a
/// withdrawal in progress while shared posts exist), in arrival order.
#[derive(Debug)]
enum Stalled {
    Unexpected { tag: u64, msg: Msg, sync: bool },
    Local { env: Envelope, msg: Msg },
}

/// A receive shared with another transport ([`Endpoint::post_shared`]).
#[derive(Debug)]
struct SharedPost {
    rid: Option<RecvId>,
    proposed: Option<(Envelope, Msg)>,
}

/// A software READ in flight.
#[derive(Debug)]
struct ReadCtx {
    /// The receive request (or, for a device-matched one, its model handle).
    req: u64,
    engine: Option<RecvId>,
    peer: u32,
    fin: [u8; tm_proto::FIN_LEN],
    env: Envelope,
    len: usize,
    msg_len: usize,
    va: u64,
    rkey: u32,
}

#[derive(Debug, Clone, Copy)]
enum OpRec {
    Add(RecvId),
    Del(RecvId),
    Sync,
}

#[derive(Debug)]
struct Peer {
    qp: QpId,
    eager_max: usize,
    connected: bool,
}

const ADDR_MAGIC: &[u8; 4] = b"TMXV";

/// Bit of an untagged WQE's `wr_id` (the rest is its index): a tagged
/// buffer's `recv_wr_id` is a `RecvId`, which either has the top bit set or
/// is a sequence number far below this bit, so the two never collide.
pub(super) const SRQ_WR: u64 = 1 << 62;
const ADDR_VERSION: u8 = 1;

/// The TM-SRQ driver, generic over a [`Provider`].
///
/// One CQ, one TM-SRQ and one RC QP per remote peer. The matching decisions
/// are tm-match's [`Offload`]: it keeps every posted receive in a shadow
/// queue and says which ones the device's tag list may hold; the endpoint
/// turns its actions into list operations and the device's completions into
/// its events.
///
/// - **Actions → list operations.** `Add`, `Delete` and `Sync` become
///   signaled `ibv_post_srq_ops` work requests carrying `IBV_OPS_TM_SYNC`
///   and the model's 16-bit count. When the command queue or the tag list
///   is full (`ENOMEM`), the actions wait, in the model's order, until
///   completions free room.
/// - **Completions → events.** `IBV_WC_TM_ADD` → `Added`; a `TM_RECV` with
///   `IBV_WC_TM_MATCH` → `Matched` (the user's completion is held until
///   `IBV_WC_TM_DATA_VALID`); `TM_DEL` → `Deleted`, or `DeleteFailed` with
///   `IBV_WC_TM_ERR`; a `TM_RECV` without `MATCH` → `Unexpected`;
///   `IBV_WC_TM_SYNC_REQ` → the event's sync request.
/// - **Software rendezvous.** An unexpected rendezvous request matched later,
///   and a matched one reported `IBV_WC_TM_RNDV_INCOMPLETE`, are finished by
///   the endpoint: an RDMA READ of the sender's buffer, then a FIN.
/// - **Sender side.** The tag is `TagLayout::DEFAULT.encode(envelope)`.
///   Payloads up to the eager limit (the smaller of ours and the receiver's
///   `TMX_VERBS_EAGER_MAX`) go in one SEND (`TMH(EAGER) | payload`) and the
///   send completes at once; larger ones, and synchronous sends of any size,
///   send `TMH(RNDV) | RVH` and complete on the receiver's FIN, which names
///   the send by the TMH's `app_ctx`.
pub struct Endpoint<P: Provider> {
    p: P,
    cfg: EndpointConfig,
    caps: DeviceCaps,
    layout: TagLayout,
    rank: u32,
    size: u32,
    cq: CqId,
    srq: SrqId,
    srq_mr: Option<Mr>,
    stride: usize,
    send_mr: Option<Mr>,
    free_slots: Vec<u32>,
    /// Slots of sends posted, by wr_id.
    peers: HashMap<u32, Peer>,
    by_qpn: HashMap<u32, u32>,
    off: Offload<u64, Msg>,
    held: VecDeque<Action>,
    ops: HashMap<u64, OpRec>,
    next_op: u64,
    cmd_outstanding: usize,
    cmd_cap: usize,
    handles: HashMap<RecvId, u32>,
    /// Entries the device consumed while a DEL for them was still held.
    consumed: std::collections::HashSet<RecvId>,
    recvs: HashMap<u64, RecvReq>,
    rid_req: HashMap<RecvId, u64>,
    engine: HashMap<RecvId, EngineRecv>,
    sends: HashMap<u64, SendReq>,
    by_ctx: HashMap<u32, u64>,
    next_ctx: u32,
    pending: VecDeque<Outgoing>,
    reads: HashMap<u64, ReadCtx>,
    read_queue: VecDeque<ReadCtx>,
    next_read: u64,
    mprobed: HashMap<u64, (Envelope, Msg)>,
    done: Vec<Finished>,
    shared: HashMap<u64, SharedPost>,
    holding: Option<u64>,
    stalled: VecDeque<Stalled>,
    proposals: Vec<(u64, Status)>,
    dead: HashMap<u32, Error>,
    /// Send cancellations asked of a peer: request `app_ctx` → send id.
    cancels_asked: HashMap<u32, u64>,
    /// Their answers (send id → withdrawn), until collected.
    cancel_answers: HashMap<u64, bool>,
    next_id: u64,
    wcs: Vec<Wc>,
    /// Large temporaries of borrowed sends and blocking receives, reused.
    spare: spare::Spare,
    counters: Counters,
}

impl<P: Provider> fmt::Debug for Endpoint<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("provider", &self.p.name())
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("posted", &self.off.posted_len())
            .field("unexpected", &self.off.unexpected_len())
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Endpoint<P> {
    /// Opens the driver on `provider` for rank `rank` of a job of `size`:
    /// creates the CQ, the TM-SRQ and the buffers. Fails with
    /// [`Error::NoDevice`] when the device has no tag matching on RC.
    pub fn new(mut provider: P, cfg: EndpointConfig, rank: u32, size: u32) -> Result<Self> {
        let caps = provider.query_device()?;
        if !caps.tm.supported() {
            return Err(Error::NoDevice {
                reason: format!("{}: no IBV_TM_CAP_RC", provider.name()),
            });
        }
        let tags = cfg.tags.min(caps.tm.max_num_tags).max(1);
        // UCX's sizing: an ADD and a DEL per tag, plus SYNCs.
        let max_ops = (2 * tags + 2).min(caps.tm.max_ops).max(1);
        let wqes = cfg.srq_wqes.max(1);
        // Each tag: ADD, MATCH, DATA_VALID; list operations; untagged
        // buffers; sends (one per send buffer) and READs (as many).
        let cqe = (wqes + 3 * tags + max_ops + 2 * cfg.send_bufs.max(1) + 64).min(caps.max_cqe);
        let cq = provider.create_cq(&CqInitAttr {
            cqe,
            wc_flags: IBV_WC_EX_WITH_BYTE_LEN
                | IBV_WC_EX_WITH_IMM
                | IBV_WC_EX_WITH_QP_NUM
                | IBV_WC_EX_WITH_TM_INFO,
            extended: true,
        })?;
        let mut attr = SrqInitAttr::tm(cq, wqes, tags, max_ops);
        let srq = provider.create_srq(&mut attr)?;
        let stride = (cfg.eager_max + Tmh::LEN).max(caps.tm.max_rndv_hdr_size as usize);
        let srq_mr = provider
            .reg_mr(vec![0; stride * wqes as usize], IBV_ACCESS_LOCAL_WRITE)
            .map_err(|(e, _)| e)?;
        for i in 0..wqes as usize {
            let Some(sge) = srq_mr.sge(i * stride, stride) else {
                return Err(Error::verbs("ibv_post_srq_recv", errno::EINVAL));
            };
            provider.post_srq_recv(
                srq,
                &RecvWr {
                    wr_id: SRQ_WR | i as u64,
                    sg_list: &[sge],
                },
            )?;
        }
        let nbufs = cfg.send_bufs.max(1);
        let send_mr = provider
            .reg_mr(vec![0; stride * nbufs as usize], IBV_ACCESS_LOCAL_WRITE)
            .map_err(|(e, _)| e)?;
        let layout = TagLayout::DEFAULT;
        let mut ocfg = OffloadConfig::new(layout, tags as usize);
        ocfg.any_source = cfg.any_source;
        ocfg.sync_interval = cfg.sync_interval.clamp(1, 1 << 14);
        let off = Offload::new(ocfg)?;
        info!(
            provider = provider.name(),
            rank,
            tags,
            max_ops,
            eager_max = cfg.eager_max,
            "verbs-tm: endpoint open"
        );
        Ok(Endpoint {
            p: provider,
            cfg,
            caps,
            layout,
            rank,
            size,
            cq,
            srq,
            srq_mr: Some(srq_mr),
            stride,
            send_mr: Some(send_mr),
            free_slots: (0..nbufs).rev().collect(),
            peers: HashMap::new(),
            by_qpn: HashMap::new(),
            off,
            held: VecDeque::new(),
            ops: HashMap::new(),
            next_op: 1,
            cmd_outstanding: 0,
            cmd_cap: max_ops as usize,
            handles: HashMap::new(),
            consumed: std::collections::HashSet::new(),
            recvs: HashMap::new(),
            rid_req: HashMap::new(),
            engine: HashMap::new(),
            sends: HashMap::new(),
            by_ctx: HashMap::new(),
            next_ctx: 1,
            pending: VecDeque::new(),
            reads: HashMap::new(),
            read_queue: VecDeque::new(),
            next_read: 1,
            mprobed: HashMap::new(),
            done: Vec::new(),
            shared: HashMap::new(),
            holding: None,
            stalled: VecDeque::new(),
            proposals: Vec::new(),
            dead: HashMap::new(),
            cancels_asked: HashMap::new(),
            cancel_answers: HashMap::new(),
            next_id: 1,
            wcs: Vec::with_capacity(64),
            spare: spare::Spare::default(),
            counters: Counters::default(),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The job's size.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The provider's name.
    pub fn provider_name(&self) -> &str {
        self.p.name()
    }

    /// The provider (for its own diagnostics).
    pub fn provider(&self) -> &P {
        &self.p
    }

    /// Mutable access to the provider (tests step a `soft::Sim` with it).
    pub fn provider_mut(&mut self) -> &mut P {
        &mut self.p
    }

    /// The TM-SRQ (for diagnostics, and for tests that step a `soft::Sim`).
    pub fn srq(&self) -> SrqId {
        self.srq
    }

    /// The QP toward `peer`, if one was created.
    pub fn qp_of(&self, peer: u32) -> Option<QpId> {
        self.peers.get(&peer).map(|p| p.qp)
    }

    /// Pending operations not yet handed to the device (sends waiting for
    /// a send buffer, list operations waiting for room): progress until
    /// this is 0 before finalize.
    pub fn queued(&self) -> usize {
        self.pending.len() + self.held.len() + self.read_queue.len()
    }

    /// The device limits in use.
    pub fn caps(&self) -> DeviceCaps {
        self.caps
    }

    /// The largest eager payload toward `dest` (our limit and the peer's).
    pub fn eager_limit(&self, dest: u32) -> usize {
        self.peers
            .get(&dest)
            .map_or(self.cfg.eager_max, |p| p.eager_max.min(self.cfg.eager_max))
    }

    /// Protocol counters.
    pub fn stats(&self) -> Counters {
        Counters {
            offload: self.off.stats(),
            temps_reused: self.spare.reused,
            temps_allocated: self.spare.allocs,
            ..self.counters
        }
    }

    /// Takes back a buffer a completion handed out that the caller no
    /// longer needs (a [`send_borrowed`](Self::send_borrowed) copy): kept
    /// for the next large borrowed send or blocking receive when it is
    /// 64 KiB or more, else freed.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.spare.put(buf);
    }

    /// Messages queued unexpected in software (what probes see).
    pub fn unexpected_len(&self) -> usize {
        self.off.unexpected_len()
    }

    /// Posted receives (software and device).
    pub fn posted_len(&self) -> usize {
        self.off.posted_len()
    }

    /// Whether a receive is held by the device's tag list (or on its way).
    pub fn is_offloaded(&self, id: u64) -> bool {
        self.recvs
            .get(&id)
            .and_then(|r| r.rid)
            .is_some_and(|rid| self.off.is_offloaded(rid))
    }

    // ------------------------------------------------------- connection ---

    /// Creates the QPs toward `peers` and returns the address blob to
    /// publish (PMI): the device's QP addresses for each of them and this
    /// rank's eager limit. Each peer passes it to [`Endpoint::connect`].
    pub fn address(&mut self, peers: impl IntoIterator<Item = u32>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(ADDR_MAGIC);
        out.push(ADDR_VERSION);
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&(self.cfg.eager_max as u64).to_le_bytes());
        let mut entries = Vec::new();
        for peer in peers {
            if peer == self.rank || peer >= self.size {
                continue;
            }
            let qp = match self.peers.get(&peer) {
                Some(p) => p.qp,
                None => {
                    let qp = self.p.create_qp(&QpInitAttr {
                        send_cq: self.cq,
                        recv_cq: self.cq,
                        srq: Some(self.srq),
                        max_send_wr: (2 * self.cfg.send_bufs + 16).min(self.caps.max_qp_wr),
                        max_send_sge: 1,
                    })?;
                    let qpn = self.p.qp_num(qp)?;
                    self.by_qpn.insert(qpn, peer);
                    self.peers.insert(
                        peer,
                        Peer {
                            qp,
                            eager_max: self.cfg.eager_max,
                            connected: false,
                        },
                    );
                    qp
                }
            };
            entries.push((peer, self.p.local_address(qp)?));
        }
        out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        for (peer, a) in entries {
            out.extend_from_slice(&peer.to_le_bytes());
            out.extend_from_slice(&(a.len() as u32).to_le_bytes());
            out.extend_from_slice(&a);
        }
        Ok(out)
    }

    /// Connects to `peer` with the blob it published ([`Endpoint::address`]
    /// must have named `peer` here, and the blob must name this rank).
    pub fn connect(&mut self, peer: u32, blob: &[u8]) -> Result<()> {
        let parsed = parse_blob(blob)?;
        if parsed.rank != peer {
            return Err(Error::BadAddress(format!(
                "blob of rank {} given for rank {peer}",
                parsed.rank
            )));
        }
        let Some(addr) = parsed.entries.iter().find(|(r, _)| *r == self.rank) else {
            return Err(Error::BadAddress(format!(
                "rank {peer}'s address has no QP for rank {}",
                self.rank
            )));
        };
        let Some(p) = self.peers.get_mut(&peer) else {
            return Err(Error::Unreachable {
                rank: peer,
                reason: "no QP created for it (Endpoint::address)",
            });
        };
        p.eager_max = parsed.eager_max;
        if !p.connected {
            self.p.connect(p.qp, addr.1)?;
            p.connected = true;
        }
        debug!(peer, "verbs-tm: connecting");
        Ok(())
    }

    /// Whether the QP toward `peer` was connected ([`Endpoint::connect`]),
    /// without asking the device: it may still be finishing its handshake
    /// (see [`Endpoint::is_connected`]).
    pub fn connect_started(&self, peer: u32) -> bool {
        self.peers.get(&peer).is_some_and(|p| p.connected)
    }

    /// Whether the QP toward `peer` is ready (the software provider over TCP
    /// finishes its handshake asynchronously; sends wait until then).
    pub fn is_connected(&self, peer: u32) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| p.connected && self.p.qp_state(p.qp) == QpState::Ready)
    }

    // ------------------------------------------------------------ sends ---

    fn new_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn encode_tag(&self, tag: u32, context: u32) -> Result<u64> {
        Ok(self.layout.encode(Envelope {
            context_id: context,
            source: self.rank,
            tag,
        })?)
    }

    // --------------------------------------------------------- receives ---

    /// Posts a receive into `buf` (its length is the capacity). The buffer
    /// comes back, holding the data, in the receive's [`Finished`].
    pub fn irecv(&mut self, spec: MatchSpec, buf: Vec<u8>) -> Result<RecvStart> {
        let id = self.new_id();
        let cap = buf.len();
        let floor = self.caps.tm.max_rndv_hdr_size as usize;
        let eligible = cap >= self.cfg.tm_thresh.max(floor) && cap <= u32::MAX as usize;
        // Registered first, so that an ADD the model emits has its buffer.
        let buf = if eligible {
            match self.p.reg_mr(buf, IBV_ACCESS_LOCAL_WRITE) {
                Ok(mr) => RecvBuf::Registered(mr),
                Err((_, b)) => RecvBuf::Plain(b),
            }
        } else {
            RecvBuf::Plain(buf)
        };
        let eligible = matches!(buf, RecvBuf::Registered(_));
        match self.off.post(spec, id, eligible)? {
            PostOutcome::Matched { env, msg, .. } => {
                self.recvs.insert(
                    id,
                    RecvReq {
                        rid: None,
                        buf,
                        cap,
                    },
                );
                self.complete_from_msg(id, env, msg)?;
            }
            PostOutcome::Queued { id: rid, .. } => {
                self.rid_req.insert(rid, id);
                self.recvs.insert(
                    id,
                    RecvReq {
                        rid: Some(rid),
                        buf,
                        cap,
                    },
                );
            }
        }
        self.pump()?;
        Ok(self.recv_start(id))
    }

    fn recv_start(&mut self, id: u64) -> RecvStart {
        match self.take_done(id) {
            Some(f) => RecvStart::Done(f.result, f.buf),
            None => RecvStart::Pending(id),
        }
    }

    /// `MPI_Cancel` of receive `id` (see [`CancelOutcome`]).
    pub fn cancel_recv(&mut self, id: u64) -> Result<CancelOutcome> {
        let Some(rid) = self.recvs.get(&id).and_then(|r| r.rid) else {
            return Ok(CancelOutcome::Failed);
        };
        let out = match self.off.cancel(rid) {
            OffCancel::Cancelled(req) => {
                self.finish_cancelled(req);
                CancelOutcome::Cancelled
            }
            OffCancel::Pending => CancelOutcome::Pending,
            OffCancel::Failed => CancelOutcome::Failed,
        };
        self.pump()?;
        Ok(out)
    }

    /// [`Endpoint::cancel_recv`], then progress until the device answers a
    /// pending cancel: `true` if the receive was cancelled (its completion,
    /// cancelled, hands the buffer back), `false` if it matched. The
    /// provider must run on its own (hardware, `soft::Live`, or a
    /// `soft::Sim` in auto mode).
    pub fn cancel_recv_wait(&mut self, id: u64) -> Result<bool> {
        match self.cancel_recv(id)? {
            CancelOutcome::Cancelled => Ok(true),
            CancelOutcome::Failed => Ok(false),
            CancelOutcome::Pending => loop {
                self.progress()?;
                if let Some(f) = self.done.iter().find(|f| f.id == id) {
                    return Ok(matches!(
                        f.result,
                        Ok(Status {
                            cancelled: true,
                            ..
                        })
                    ));
                }
                if self.recvs.get(&id).is_none_or(|r| r.rid.is_none()) {
                    // Matched: it completes normally (perhaps later).
                    return Ok(false);
                }
                std::thread::yield_now();
            },
        }
    }

    /// Receives into `buf` a queued message that a receive posted now with
    /// `spec` would take; `None`: none (nothing received or posted). A
    /// rendezvous message is read before this returns (the provider must
    /// run on its own, as for [`Endpoint::cancel_recv_wait`], and the
    /// sender must keep polling now and then: the READ's answer travels on
    /// the connection its FINs use, and an RC connection stops behind a
    /// SEND the receiver has no buffer for).
    pub fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        if self.off.unexpected_len() == 0 || self.off.probe(&spec).is_none() {
            return Ok(None);
        }
        let Some(m) = self.off.improbe(&spec) else {
            return Ok(None);
        };
        let cap = buf.len();
        if let Msg::Eager(data) | Msg::Local { data, .. } = &m.msg {
            let n = data.len().min(cap);
            buf[..n].copy_from_slice(&data[..n]);
            let st = Status::of(&m.env, n, data.len());
            if let Msg::Local {
                sync_send: Some(s), ..
            } = m.msg
            {
                self.sends.remove(&s);
                self.done.push(Finished {
                    id: s,
                    send: true,
                    result: Ok(Status::default()),
                    buf: Vec::new(),
                });
            }
            return Ok(Some(st));
        }
        // A rendezvous: READ into a buffer of ours, then copy.
        let id = self.new_id();
        self.recvs.insert(
            id,
            RecvReq {
                rid: None,
                buf: RecvBuf::Plain(self.spare.take_len(cap)),
                cap,
            },
        );
        self.complete_from_msg(id, m.env, m.msg)?;
        loop {
            if let Some(i) = self.done.iter().position(|f| f.id == id) {
                let f = self.done.remove(i);
                let st = f.result?;
                buf[..st.len].copy_from_slice(&f.buf[..st.len]);
                self.spare.put(f.buf);
                return Ok(Some(st));
            }
            self.progress()?;
            std::thread::yield_now();
        }
    }

    /// One progress pass, then [`Endpoint::recv_now`].
    pub fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<Status>> {
        self.progress()?;
        self.recv_now(spec, buf)
    }

    /// `MPI_Iprobe`: one progress pass, then the queued message a receive
    /// with `spec` would take.
    pub fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<Status>> {
        self.progress()?;
        Ok(self
            .off
            .probe(&spec)
            .map(|p| Status::of(&p.env, p.msg.len(), p.msg.len())))
    }

    /// `MPI_Improbe`: one progress pass, then take the message a receive
    /// with `spec` would take.
    pub fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(MessageHandle, Status)>> {
        self.progress()?;
        let Some(m) = self.off.improbe(&spec) else {
            return Ok(None);
        };
        let st = Status::of(&m.env, m.msg.len(), m.msg.len());
        let id = self.new_id();
        self.mprobed.insert(id, (m.env, m.msg));
        Ok(Some((MessageHandle(id), st)))
    }

    /// `MPI_Imrecv`: receive a message taken by [`Endpoint::improbe`].
    pub fn imrecv(&mut self, msg: MessageHandle, buf: Vec<u8>) -> Result<RecvStart> {
        let Some((env, m)) = self.mprobed.remove(&msg.0) else {
            return Err(Error::UnknownRequest(msg.0));
        };
        let id = self.new_id();
        let cap = buf.len();
        self.recvs.insert(
            id,
            RecvReq {
                rid: None,
                buf: RecvBuf::Plain(buf),
                cap,
            },
        );
        self.complete_from_msg(id, env, m)?;
        Ok(self.recv_start(id))
    }

    /// Takes receive `id`'s buffer back as a `Vec`.
    fn take_buf(&mut self, id: u64) -> Vec<u8> {
        let Some(r) = self.recvs.get_mut(&id) else {
            return Vec::new();
        };
        match core::mem::replace(&mut r.buf, RecvBuf::Taken) {
            RecvBuf::Plain(v) => v,
            RecvBuf::Registered(mr) => self.p.dereg_mr(mr).unwrap_or_default(),
            RecvBuf::Taken => Vec::new(),
        }
    }

    fn finish_recv(&mut self, id: u64, result: Result<Status>) {
        let buf = self.take_buf(id);
        if let Some(rid) = self.recvs.remove(&id).and_then(|r| r.rid) {
            self.rid_req.remove(&rid);
        }
        self.done.push(Finished {
            id,
            send: false,
            result,
            buf,
        });
    }

    /// Completes receive `id` by copying `data` into its buffer.
    fn finish_copy(&mut self, id: u64, cap: usize, env: Envelope, data: &[u8]) {
        let mut buf = self.take_buf(id);
        let n = data.len().min(cap).min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        if let Some(rid) = self.recvs.remove(&id).and_then(|r| r.rid) {
            self.rid_req.remove(&rid);
        }
        self.done.push(Finished {
            id,
            send: false,
            result: Ok(Status::of(&env, n, data.len())),
            buf,
        });
    }

    fn finish_cancelled(&mut self, id: u64) {
        self.finish_recv(
            id,
            Ok(Status {
                cancelled: true,
                ..Status::default()
            }),
        );
    }

    /// Completes receive `id` with a message the model matched in software.
    fn complete_from_msg(&mut self, id: u64, env: Envelope, msg: Msg) -> Result<()> {
        let cap = self.recvs.get(&id).map_or(0, |r| r.cap);
        match msg {
            Msg::Eager(data) => {
                self.finish_copy(id, cap, env, &data);
            }
            Msg::Local { data, sync_send } => {
                // The synchronous sender first, so that the receive's
                // completion is the last one queued.
                if let Some(s) = sync_send {
                    self.sends.remove(&s);
                    self.done.push(Finished {
                        id: s,
                        send: true,
                        result: Ok(Status::default()),
                        buf: Vec::new(),
                    });
                }
                self.finish_copy(id, cap, env, &data);
            }
            Msg::Rndv { peer, tmh, rvh } => {
                self.counters.sw_reads += 1;
                let n = (rvh.len as usize).min(cap);
                self.start_read(id, None, peer, env, tmh, rvh, n)?;
            }
            Msg::Engine => {
                return Err(Error::Completion {
                    opcode: crate::verbs::WcOpcode::TM_RECV,
                    status: crate::verbs::WcStatus::SUCCESS,
                    wr_id: id,
                    reason: "a device match completed in software",
                })
            }
        }
        Ok(())
    }

    /// The software side of a rendezvous: READ `n` bytes of the sender's
    /// buffer into receive `id`'s, then FIN.
    #[allow(clippy::too_many_arguments)]
    fn start_read(
        &mut self,
        id: u64,
        engine: Option<RecvId>,
        peer: u32,
        env: Envelope,
        tmh: Tmh,
        rvh: Rvh,
        n: usize,
    ) -> Result<()> {
        let mut fin = [0u8; tm_proto::FIN_LEN];
        fin[..Tmh::LEN].copy_from_slice(&tmh.fin_reply().to_bytes());
        fin[Tmh::LEN..].copy_from_slice(&rvh.to_bytes());
        let ctx = ReadCtx {
            req: id,
            engine,
            peer,
            fin,
            env,
            len: n,
            msg_len: rvh.len as usize,
            va: rvh.va,
            rkey: rvh.rkey,
        };
        if let Some(e) = self.dead.get(&peer).cloned() {
            self.read_done(ctx, Err(e))?;
            return Ok(());
        }
        if n == 0 {
            return self.read_done(ctx, Ok(()));
        }
        // The target must be registered.
        if let Some(RecvReq { buf, .. }) = self.recvs.get_mut(&id) {
            if matches!(buf, RecvBuf::Plain(_)) {
                let RecvBuf::Plain(v) = core::mem::replace(buf, RecvBuf::Taken) else {
                    unreachable!("checked just above")
                };
                *buf = match self.p.reg_mr(v, IBV_ACCESS_LOCAL_WRITE) {
                    Ok(mr) => RecvBuf::Registered(mr),
                    Err((e, v)) => {
                        *buf = RecvBuf::Plain(v);
                        return Err(e);
                    }
                };
            }
        }
        if !self.peers.contains_key(&peer) {
            return Err(Error::Unreachable {
                rank: peer,
                reason: "rendezvous from a peer without a QP",
            });
        }
        // At most `send_bufs` READs in flight (the CQ is sized for them);
        // the rest wait in order.
        if self.reads.len() >= self.read_budget() || !self.read_queue.is_empty() {
            self.read_queue.push_back(ctx);
            return Ok(());
        }
        if let Some(ctx) = self.post_read(ctx)? {
            self.read_queue.push_back(ctx);
        }
        Ok(())
    }

    fn read_budget(&self) -> usize {
        self.cfg.send_bufs.max(1) as usize
    }

    /// Posts a READ; hands it back if the QP's send queue is full.
    fn post_read(&mut self, ctx: ReadCtx) -> Result<Option<ReadCtx>> {
        let sge = match self.recvs.get(&ctx.req).map(|r| &r.buf) {
            Some(RecvBuf::Registered(mr)) => mr.sge(0, ctx.len),
            _ => None,
        };
        let (Some(sge), Some(p)) = (sge, self.peers.get(&ctx.peer)) else {
            return Err(Error::Unreachable {
                rank: ctx.peer,
                reason: "rendezvous READ without a registered buffer or a QP",
            });
        };
        let wr_id = self.next_read;
        let r = self.p.post_send(
            p.qp,
            &SendWr {
                wr_id,
                opcode: WrOpcode::RDMA_READ,
                send_flags: IBV_SEND_SIGNALED,
                sg_list: &[sge],
                imm_data: 0,
                remote_addr: ctx.va,
                rkey: ctx.rkey,
            },
        );
        match r {
            Ok(()) => {
                self.next_read += 1;
                self.reads.insert(wr_id, ctx);
                Ok(None)
            }
            Err(e) if e.errno() == Some(errno::ENOMEM) => Ok(Some(ctx)),
            Err(e) => Err(e),
        }
    }

    /// Starts waiting READs while the budget allows.
    pub(super) fn start_queued_reads(&mut self) -> Result<()> {
        while self.reads.len() < self.read_budget() {
            let Some(ctx) = self.read_queue.pop_front() else {
                break;
            };
            if let Some(e) = self.dead.get(&ctx.peer).cloned() {
                self.read_done(ctx, Err(e))?;
                continue;
            }
            if let Some(ctx) = self.post_read(ctx)? {
                self.read_queue.push_front(ctx);
                break;
            }
        }
        Ok(())
    }

    /// A software READ finished: FIN the sender, complete the receive.
    fn read_done(&mut self, ctx: ReadCtx, r: core::result::Result<(), Error>) -> Result<()> {
        if r.is_ok() {
            self.queue_out(Outgoing::Fin {
                dest: ctx.peer,
                bytes: ctx.fin,
            })?;
        }
        let result = r.map(|()| (ctx.len, ctx.msg_len));
        match ctx.engine {
            Some(rid) => {
                if let Some(e) = self.engine.get_mut(&rid) {
                    e.data = DataState::Ready(result);
                }
                self.try_finish_engine(rid);
            }
            None => {
                let st = result.map(|(len, msg_len)| Status::of(&ctx.env, len, msg_len));
                self.finish_recv(ctx.req, st);
            }
        }
        Ok(())
    }

    /// Finishes a device-matched receive once both its model completion and
    /// its data are in.
    fn try_finish_engine(&mut self, rid: RecvId) {
        let ready = matches!(
            self.engine.get(&rid),
            Some(EngineRecv {
                data: DataState::Ready(_),
                env: Some(_),
                ..
            })
        );
        if !ready {
            return;
        }
        let Some(e) = self.engine.remove(&rid) else {
            return;
        };
        let (DataState::Ready(r), Some(env)) = (e.data, e.env) else {
            return;
        };
        self.counters.device_receives += 1;
        let st = r.map(|(len, msg_len)| Status::of(&env, len, msg_len));
        self.finish_recv(e.req, st);
    }

    // --------------------------------------------------------- progress ---

    /// One progress pass: polls the CQ, feeds the model, posts list
    /// operations and waiting sends. Returns the number of completions read.
    pub fn progress(&mut self) -> Result<usize> {
        let mut total = 0;
        loop {
            let mut wcs = core::mem::take(&mut self.wcs);
            wcs.clear();
            let n = self.p.poll_cq(self.cq, &mut wcs, 64);
            let n = match n {
                Ok(n) => n,
                Err(e) => {
                    self.wcs = wcs;
                    return Err(e);
                }
            };
            total += n;
            let mut r = Ok(());
            for wc in wcs.drain(..) {
                // The model's completions right after each event: a shared
                // post's proposal must hold the next completion's input.
                r = self.on_wc(wc).and_then(|()| self.model_completions());
                if r.is_err() {
                    break;
                }
            }
            self.wcs = wcs;
            r?;
            self.pump()?;
            if n < 64 {
                break;
            }
        }
        self.release_stalled()?;
        self.start_queued_reads()?;
        self.flush_pending()?;
        Ok(total)
    }

    /// Moves every finished request to `out` (in completion order).
    pub fn take_completions(&mut self, out: &mut Vec<Finished>) {
        out.append(&mut self.done);
    }

    /// Whether a finished request waits in [`Endpoint::take_completions`].
    pub fn has_completions(&self) -> bool {
        !self.done.is_empty()
    }

    /// Liveness: [`Error::PeerDied`] if `peer` (with `None`: any connected
    /// peer) is gone. Non-blocking.
    pub fn check_alive(&mut self, peer: Option<u32>) -> Result<()> {
        let peers: Vec<u32> = match peer {
            Some(p) => vec![p],
            None => self.peers.keys().copied().collect(),
        };
        for p in peers {
            if let Some(e) = self.dead.get(&p) {
                return Err(e.clone());
            }
            let Some(q) = self.peers.get(&p) else {
                continue;
            };
            if let QpState::Error(reason) = self.p.qp_state(q.qp) {
                let e = Error::PeerDied { peer: p, reason };
                self.peer_failed(p, e.clone());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Moves the model's actions to the device, then handles its
    /// completions.
    fn pump(&mut self) -> Result<()> {
        while let Some(a) = self.off.poll_action() {
            self.held.push_back(a);
        }
        self.post_held()?;
        self.model_completions()
    }

    /// Handles the matching model's completions.
    fn model_completions(&mut self) -> Result<()> {
        while let Some(c) = self.off.poll_completion() {
            self.on_model_completion(c)?;
        }
        Ok(())
    }

    /// Posts held list operations in order while the command queue has room.
    fn post_held(&mut self) -> Result<()> {
        // A DEL still held for an entry the device has consumed is never
        // posted (the slot may be free by now): its answer is `DeleteFailed`,
        // as the device would have given.
        while let Some(Action::Delete { handle, .. }) = self.held.front().copied() {
            if !self.consumed.remove(&handle) {
                break;
            }
            self.held.pop_front();
            self.off
                .handle_event(tm_match::offload::EngineEvent::DeleteFailed { handle })?;
        }
        while !self.held.is_empty() && self.cmd_outstanding < self.cmd_cap {
            let room = (self.cmd_cap - self.cmd_outstanding)
                .min(self.held.len())
                .min(32);
            // A DEL needs the handle its ADD gets at post time: the chain
            // ends before a DEL whose ADD is in it.
            let mut actions: Vec<Action> = Vec::with_capacity(room);
            for a in self.held.iter().take(room) {
                if let Action::Delete { handle, .. } = a {
                    if !self.handles.contains_key(handle) || self.consumed.contains(handle) {
                        break;
                    }
                }
                actions.push(*a);
            }
            if actions.is_empty() {
                // A DEL whose entry was consumed: answered above next time.
                if matches!(self.held.front(), Some(Action::Delete { handle, .. }) if self.consumed.contains(handle))
                {
                    return self.post_held();
                }
                return Err(Error::Completion {
                    opcode: crate::verbs::WcOpcode::TM_DEL,
                    status: crate::verbs::WcStatus::SUCCESS,
                    wr_id: 0,
                    reason: "a DEL for an entry the device was never given",
                });
            }
            let mut sges = Vec::with_capacity(actions.len());
            for a in &actions {
                let sge = match a {
                    Action::Add { handle, .. } => {
                        let req = self.off_req(*handle);
                        match req.and_then(|id| self.recvs.get(&id)).map(|r| &r.buf) {
                            Some(RecvBuf::Registered(mr)) => mr.sge(0, mr.len()),
                            _ => None,
                        }
                    }
                    _ => None,
                };
                sges.push(sge.map(|s| [s]));
            }
            let mut wrs = Vec::with_capacity(actions.len());
            let first_op = self.next_op;
            for (i, a) in actions.iter().enumerate() {
                let wr_id = first_op + i as u64;
                wrs.push(match a {
                    Action::Add {
                        handle,
                        entry,
                        count,
                    } => OpsWr::add(
                        wr_id,
                        *count,
                        TmAdd {
                            recv_wr_id: handle.to_bits(),
                            sg_list: sges[i].as_ref().map_or(&[][..], |s| &s[..]),
                            tag: entry.tag & entry.mask,
                            mask: entry.mask,
                        },
                    ),
                    Action::Delete { handle, count } => {
                        let h = self.handles.get(handle).copied().unwrap_or(u32::MAX);
                        OpsWr::del(wr_id, *count, h)
                    }
                    Action::Sync { count } => OpsWr::sync(wr_id, *count),
                });
            }
            let r = self.p.post_srq_ops(self.srq, &mut wrs);
            let posted = match &r {
                Ok(()) => wrs.len(),
                Err(Error::PostOps { bad_wr, .. }) => *bad_wr,
                Err(_) => 0,
            };
            for (i, wr) in wrs.iter().take(posted).enumerate() {
                let rec = match actions[i] {
                    Action::Add { handle, .. } => {
                        self.handles.insert(handle, wr.handle);
                        OpRec::Add(handle)
                    }
                    Action::Delete { handle, .. } => OpRec::Del(handle),
                    Action::Sync { .. } => OpRec::Sync,
                };
                self.ops.insert(wr.wr_id, rec);
                self.held.pop_front();
            }
            self.next_op += posted as u64;
            self.cmd_outstanding += posted;
            match r {
                Ok(()) => {}
                Err(Error::PostOps {
                    errno: errno::ENOMEM,
                    ..
                }) => break,
                Err(e) => return Err(e),
            }
        }
        if !self.held.is_empty() {
            debug!(
                held = self.held.len(),
                "verbs-tm: tag list or command queue full, holding"
            );
            self.counters.ops_held += 1;
        }
        Ok(())
    }

    /// The request id of a model receive handle.
    fn off_req(&self, rid: RecvId) -> Option<u64> {
        self.rid_req.get(&rid).copied()
    }

    /// Tears the endpoint down: QPs (the software provider closes its
    /// connections in an orderly way), buffers, the SRQ and the CQ. Returns
    /// the counters.
    pub fn finalize(mut self) -> Result<Counters> {
        let _ = self.progress();
        let counters = self.stats();
        let qps: Vec<QpId> = self.peers.values().map(|p| p.qp).collect();
        for qp in qps {
            self.p.destroy_qp(qp)?;
        }
        if let Some(mr) = self.srq_mr.take() {
            self.p.dereg_mr(mr)?;
        }
        if let Some(mr) = self.send_mr.take() {
            self.p.dereg_mr(mr)?;
        }
        self.p.destroy_srq(self.srq)?;
        self.p.destroy_cq(self.cq)?;
        info!(%counters, "verbs-tm: endpoint closed");
        Ok(counters)
    }

    /// Whether the source of `spec` is reached through this endpoint.
    pub fn reaches(&self, spec: &MatchSpec) -> bool {
        match spec.source {
            Source::Any => true,
            Source::Rank(r) => r == self.rank || self.peers.contains_key(&r),
        }
    }
}

struct Blob<'a> {
    rank: u32,
    eager_max: usize,
    entries: Vec<(u32, &'a [u8])>,
}

fn parse_blob(b: &[u8]) -> Result<Blob<'_>> {
    let bad = |what: &str| Error::BadAddress(format!("endpoint address: {what}"));
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = b.get(at..at + n).ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(s)
    };
    if take(4)? != ADDR_MAGIC {
        return Err(bad("not a verbs-tm address"));
    }
    if take(1)?[0] != ADDR_VERSION {
        return Err(bad("unknown version"));
    }
    let u32_at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let rank = u32_at(take(4)?);
    let e = take(8)?;
    let eager_max = u64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]);
    let n = u32_at(take(4)?);
    let mut entries = Vec::new();
    for _ in 0..n {
        let peer = u32_at(take(4)?);
        let len = u32_at(take(4)?) as usize;
        entries.push((peer, take(len)?));
    }
    Ok(Blob {
        rank,
        eager_max: usize::try_from(eager_max).map_err(|_| bad("eager limit"))?,
        entries,
    })
}
