//! The transport seam: the one interface through which the device reaches
//! a transport.
//!
//! The device ([`crate::device`]) holds one transport per kind of
//! [`Route`](crate::Route): the node-local one ([`ShmemTransport`], for this
//! rank itself and for the ranks of its node) and a remote one
//! ([`Remote`], for [`Route::Remote`](crate::Route::Remote) peers: the
//! TM-SRQ endpoint of `verbs-tm` ([`verbs`]), or the socket test double). It chooses the
//! transport by route and calls it through [`Transport`]; it never reaches
//! into a transport otherwise. A new transport plugs in by implementing
//! [`Transport`] and adding a variant to [`Remote`]: no device function
//! that sends or receives changes.
//!
//! # What a transport provides
//!
//! - **Sends** of contiguous data (owned, borrowed, or written in place by
//!   a packing callback for datatypes), in standard or synchronous mode.
//!   A send that completes inside the call is *born complete* (nothing to
//!   harvest); otherwise the transport returns an operation id and reports
//!   the completion later. The transport alone decides what goes out at
//!   once ("inline now?", [`Transport::send_small_now`] with its
//!   [`SmallSend`] policy): the device asks, it does not know sizes.
//! - **Receives**: post (with an optional in-place consumer for datatype
//!   receives), take a message already here, cancel; **probes** and
//!   **matched probes** (`improbe`/`imrecv`). Matching is the transport's,
//!   and inside it only `tm-match` decides a match.
//! - **Progress** and **completions**: [`Transport::progress`] moves data;
//!   [`Transport::collect`] and [`Transport::drain`] hand every finished
//!   operation to a [`Sink`]
//!   with an owned [`RecvStatus`] (the sender as a world rank) and the
//!   operation's buffer.
//! - **Liveness** ([`Transport::check_alive`]: a dead peer is an error,
//!   never a hang) and **finalize** (flush, close, counters).
//!
//! # Addresses
//!
//! A peer is named by the transport's own address, the one its route
//! carries: the node-local index for [`ShmemTransport`]
//! (`Route::Shmem { local }`, `Route::SelfCopy { local }`), the world rank
//! for a remote transport. A [`MatchSpec`]'s source is in the same space.
//! What comes back ([`RecvStatus::source`]) is always a world rank.
//!
//! # Operation ids
//!
//! Every pending operation has a `u64` id unique in the process: the
//! node-local transport's ids have the top bit clear, a remote transport's
//! have it set ([`REMOTE_ID`]), so the device keeps one table of pending
//! operations for all transports.
//!
//! # `ANY_SOURCE` across transports
//!
//! A receive from `ANY_SOURCE` on a communicator whose members are reached
//! through more than one transport is *posted to every transport
//! involved*; the first match wins and the device withdraws the other
//! posts. So that two transports never both match it:
//!
//! - the node-local transport matches its post freely (it holds the
//!   user's buffer);
//! - every other transport *proposes* instead of matching: its post
//!   ([`Transport::post_shared`]) never takes a message on its own. When a
//!   message would match it, the transport stops there (that message and
//!   everything behind it wait, unprocessed, in arrival order) and reports
//!   [`Sink::proposed`]. The device then cancels the node-local post: if
//!   that succeeds, it commits the proposal ([`Transport::commit`]: the
//!   message is delivered, into a staging buffer that is copied into the
//!   user's once the node-local post hands it back); if the node-local post
//!   has matched already, it withdraws the proposal
//!   ([`Transport::withdraw`]) and the held message is matched as if the
//!   post had never been there.
//!
//! Exactly one message completes the receive, a withdrawn post never
//! takes or loses one, and per-source order holds because each source is
//! reached through one transport, whose matcher keeps its order (a held
//! message is processed before any later one from the same transport).
//! A remote transport whose matching runs in hardware keeps such shared
//! posts in software, as `tm_match::Offload` does for `ANY_SOURCE`
//! receives when its `any_source` is off. The device withdraws the shared
//! post as soon as it sees the node-local post complete, in the same
//! pass, so a proposal usually finds the node-local post still open; if
//! it has matched already (a match the transport reports only later), the
//! cancel says so and the proposal is withdrawn instead of committed.
//!
//! Blocking `ANY_SOURCE` receives, probes and matched probes over both
//! transports post nothing: they ask the node-local transport first, then
//! the remote one. Between the messages of two transports there is no
//! arrival order, so after a wildcard probe a *wildcard* receive may take
//! another transport's message; a receive with the probe's source and
//! tag gets the probed one, which is all MPI promises.

pub mod double;
pub(crate) mod shmem;
pub(crate) mod verbs;

use crate::Error;
use tm_proto::MatchSpec;

pub(crate) use double::DoubleTransport;
pub(crate) use shmem::ShmemTransport;
pub(crate) use verbs::VerbsTransport;

/// The id bit of a remote transport's operations (see the module docs).
pub(crate) const REMOTE_ID: u64 = 1 << 63;

/// The table of pending operations, keyed by operation id: the
/// direct-mapped table that `shmem-onesided` provides for ids issued in
/// increasing order (a remote id's top bit does not change its slot).
pub(crate) type OpTable<V> = shmem_onesided::IdTable<V>;

/// A datatype receive's consumer: unpacks the payload where it lies (the
/// sender's eager block), called at most once, by the transport.
pub(crate) type InPlace = Box<dyn FnMut(&[u8]) + Send>;

/// The mode of a send, as a transport sees it. A ready send is sent as a
/// standard one (MPI allows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// Completes once the buffer may be reused.
    Standard,
    /// Completes once the receiver has matched the message.
    Synchronous,
}

/// What a completed receive (or a probe) found: the sender as a world
/// rank, the tag, the bytes delivered and sent, and whether the receive
/// was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct RecvStatus {
    /// The sender's world rank.
    pub(crate) source: u32,
    /// The message tag.
    pub(crate) tag: u32,
    /// Bytes delivered: `min(msg_len, capacity)` (a probe: the length).
    pub(crate) len: usize,
    /// Bytes the sender sent.
    pub(crate) msg_len: usize,
    /// The receive was cancelled: nothing was delivered.
    pub(crate) cancelled: bool,
}

impl RecvStatus {
    /// The status of a cancelled receive.
    pub(crate) const CANCELLED: RecvStatus = RecvStatus {
        source: 0,
        tag: 0,
        len: 0,
        msg_len: 0,
        cancelled: true,
    };

    /// Whether the message was longer than the receive buffer.
    #[inline]
    pub(crate) fn truncated(&self) -> bool {
        self.msg_len > self.len
    }
}

/// How a send started: complete inside the call (the owned buffer handed
/// back), or pending under an operation id.
#[derive(Debug)]
pub(crate) enum SendStart {
    /// Done: the data is safe (copied, inline, delivered); the buffer back.
    Done(Vec<u8>),
    /// Pending: reported through [`Sink::send_done`].
    Pending(u64),
}

/// How a receive started.
#[derive(Debug)]
pub(crate) enum RecvStart {
    /// Finished inside the call (a message had arrived; or an error): its
    /// result and the buffer.
    Done(Result<RecvStatus, Error>, Vec<u8>),
    /// Posted: reported through [`Sink::recv_done`].
    Pending(u64),
}

/// How a shared post ([`Transport::post_shared`]) started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SharedStart {
    /// A message already here would match: nothing was posted and the
    /// message stays queued; the device takes it with
    /// [`Transport::recv_now`] or leaves it.
    Proposed(RecvStatus),
    /// Posted under this id: it never matches on its own, it proposes
    /// ([`Sink::proposed`]).
    Posted(u64),
}

/// Which peers [`Transport::check_alive`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alive {
    /// This peer (the transport's address).
    Peer(u32),
    /// Every peer a pending operation of this transport waits for.
    Waited,
    /// Every peer of this transport except this rank.
    All,
}

/// A transport's small-message policy, read once by the device: the
/// sizes that [`Transport::send_small_now`] may complete at once, by kind.
/// The device keeps a copy (no lock needed to read it) and asks the
/// transport with the kind it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SmallSend {
    /// Largest message of one slot ([`SmallKind::One`]).
    pub(crate) one: usize,
    /// Largest message of several slots ([`SmallKind::More`]); `0` or at
    /// most `one`: none.
    pub(crate) more: usize,
}

/// The kind of a small send (see [`SmallSend`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SmallKind {
    /// Fits one slot.
    One,
    /// Needs continuation slots.
    More,
}

impl SmallSend {
    /// No small sends.
    pub(crate) const NONE: SmallSend = SmallSend { one: 0, more: 0 };

    /// The kind of a send of `len` bytes, if it may go at once.
    #[inline(always)]
    pub(crate) fn kind(&self, len: usize) -> Option<SmallKind> {
        if len <= self.one {
            Some(SmallKind::One)
        } else if len <= self.more {
            Some(SmallKind::More)
        } else {
            None
        }
    }
}

/// A lock-free watch on the next arrival from one peer (the slot its
/// next header will be published in): a blocking receive spins on it
/// between progress passes instead of taking the core lock.
#[derive(Debug)]
pub(crate) struct ArrivalWatch(shmem::Watch);

impl ArrivalWatch {
    /// Whether the watched slot has been published.
    #[inline(always)]
    pub(crate) fn published(&self) -> bool {
        self.0.published()
    }
}

/// Where a transport hands its finished operations ([`Transport::drain`]).
pub(crate) trait Sink {
    /// Send `id` finished: `Ok` with the owned buffer to hand back (take
    /// it in place; `None` for a borrowed send), or the error it failed
    /// with (a dead peer).
    fn send_done(&mut self, id: u64, result: Result<&mut Option<Vec<u8>>, Error>);
    /// Receive `id` finished: its status (or error) and its buffer (take
    /// it in place).
    fn recv_done(&mut self, id: u64, result: Result<RecvStatus, Error>, buf: &mut Vec<u8>);
    /// Shared post `id` would match a message described by `status`;
    /// the transport holds it until [`Transport::commit`] or
    /// [`Transport::withdraw`].
    fn proposed(&mut self, id: u64, status: RecvStatus);
}

/// The interface a transport implements (see the module docs). Peers and
/// sources are the transport's addresses; statuses carry world ranks.
/// Methods with a default are optional fast paths: the default says "not
/// now", and the device takes its general path.
pub(crate) trait Transport {
    /// A message removed from matching by [`Transport::improbe`].
    type Matched;

    // ------------------------------------------------------------ sends

    /// The small-message policy ([`Transport::send_small_now`]).
    fn small_send(&self) -> SmallSend {
        SmallSend::NONE
    }

    /// A standard send of `data` (of `kind`, as [`SmallSend::kind`] said)
    /// to `peer` if it completes at once; `false`: nothing was sent.
    fn send_small_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        kind: SmallKind,
    ) -> bool {
        let _ = (peer, tag, context, data, kind);
        false
    }

    /// A standard send of `data` if it completes in the call (`copy`: the
    /// caller reuses `data` at once, so it must be copied even where the
    /// transport would otherwise let the receiver read it in place);
    /// `false`: nothing was sent.
    fn send_now(&mut self, peer: u32, tag: u32, context: u32, data: &[u8], copy: bool) -> bool {
        let _ = (peer, tag, context, data, copy);
        false
    }

    /// A standard send of `len` bytes that `fill` writes straight into the
    /// transport, if it completes in the call (`fill` returns `false` to
    /// give up); `false`: nothing was sent.
    fn send_fill_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        let _ = (peer, tag, context, len, fill);
        false
    }

    /// Starts a send of an owned buffer.
    fn isend(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart, Error>;

    /// Starts a send of borrowed data: `None` if it completed in the call;
    /// `Some(id)`: pending, and `data` must stay valid and unchanged until
    /// the completion is reported.
    fn send_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Option<u64>, Error>;

    /// Starts a send of borrowed data that completes only through the
    /// completion feed (a buffered send: its region of the attached buffer
    /// is released when the completion is harvested); `data` must stay
    /// valid and unchanged until then.
    fn isend_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<u64, Error>;

    /// `MPI_Cancel` of a pending send: `true` if the message was withdrawn
    /// before any receive matched it (no receive will ever take it; the
    /// send then completes through the completion feed, with nothing more
    /// owed to it), `false` if it was matched or cannot be withdrawn (it
    /// completes normally). May wait for the receiver's answer, which a
    /// transport gives during the receiver's progress (any call it makes);
    /// the default never cancels (MPI allows a cancel to fail).
    fn cancel_send(&mut self, id: u64) -> Result<bool, Error> {
        let _ = id;
        Ok(false)
    }

    // --------------------------------------------------------- receives

    /// Posts a receive into `buf` (finished at once if a message is here);
    /// `consumer`, if any, may unpack the payload where it lies instead.
    fn irecv(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        consumer: Option<InPlace>,
    ) -> Result<RecvStart, Error>;

    /// Posts a receive into lent memory, `len` bytes at `ptr`
    /// ([`crate::lent`]). A transport that writes into it in place hands
    /// back an empty buffer (at once in [`RecvStart::Done`], or through
    /// [`Sink::recv_done`]); the default stages: it posts an owned buffer
    /// of `len` bytes, which the device copies into the lent memory when
    /// it comes back.
    ///
    /// # Safety
    ///
    /// `ptr` is valid for writes of `len` bytes (any pointer if `len` is
    /// 0), and nothing else reads or writes that memory, until the receive
    /// completes or is cancelled.
    #[allow(unsafe_code)]
    unsafe fn irecv_lent(
        &mut self,
        spec: MatchSpec,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RecvStart, Error> {
        let _ = ptr;
        self.irecv(spec, vec![0u8; len], None)
    }

    /// The fast case of [`Transport::irecv`]: receives into `buf` a
    /// message that is next in line now, or `None` (nothing done).
    fn recv_arrived(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        let _ = (spec, buf);
        Ok(None)
    }

    /// Receives into `buf` a message already here that a receive posted
    /// now would match; `None`: none (nothing received or posted).
    fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error>;

    /// [`Transport::recv_now`] after one progress pass (a blocking
    /// receive's poll; never posts).
    fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error>;

    /// A receive whose payload `f` reads where it lies, if its message is
    /// next in line now (`cap`: the capacity); `None`: `f` did not run.
    fn recv_arrived_with(
        &mut self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<RecvStatus>, Error> {
        let _ = (spec, cap, f);
        Ok(None)
    }

    /// Whether a message for `spec` could still be taken at the front of
    /// its source's line ([`Transport::recv_arrived_with`]).
    fn front_open(&self, spec: MatchSpec) -> bool {
        let _ = spec;
        false
    }

    /// A watch on the next arrival from `peer`, if the transport has one.
    fn arrival_watch(&self, peer: u32) -> Option<ArrivalWatch> {
        let _ = peer;
        None
    }

    /// `MPI_Cancel` of a posted receive: `true` if removed (its completion,
    /// cancelled, hands the buffer back); `false` if it matched.
    fn cancel_recv(&mut self, id: u64) -> Result<bool, Error>;

    // ----------------------------------------------------------- probes

    /// `MPI_Iprobe` (after one progress pass): `len` is the length.
    fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<RecvStatus>, Error>;

    /// `MPI_Improbe` (after one progress pass).
    fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(Self::Matched, RecvStatus)>, Error>;

    /// `MPI_Imrecv` of a matched message into `buf`.
    fn imrecv(&mut self, msg: Self::Matched, buf: Vec<u8>) -> Result<RecvStart, Error>;

    // ----------------------------------------------- shared posts (ANY_SOURCE)

    /// Posts a receive shared with the node-local transport (see the module
    /// docs); `cap`: its capacity.
    fn post_shared(&mut self, spec: MatchSpec, cap: usize) -> Result<SharedStart, Error> {
        let _ = (spec, cap);
        Err(Error::InvalidArgument {
            what: "this transport takes no shared posts",
        })
    }

    /// Commits proposal `id`: delivers the held message into `buf`.
    fn commit(&mut self, id: u64, buf: &mut [u8]) -> Result<RecvStatus, Error> {
        let _ = (id, buf);
        Err(Error::InvalidArgument {
            what: "this transport takes no shared posts",
        })
    }

    /// Withdraws shared post `id` (and releases its proposal, if any).
    fn withdraw(&mut self, id: u64) -> Result<(), Error> {
        let _ = id;
        Ok(())
    }

    // --------------------------------------------------------- progress

    /// One progress pass; how many events it handled.
    fn progress(&mut self) -> Result<usize, Error>;

    /// Takes the operations finished since the last call aside (for
    /// [`Transport::drain`]); whether there are any (or proposals). A
    /// pass that finds none builds no sink.
    fn collect(&mut self) -> bool;

    /// Hands every operation [`Transport::collect`] took aside to `sink`,
    /// each once.
    fn drain<S: Sink>(&mut self, sink: &mut S);

    /// Messages (or bytes) accepted but not yet handed to the peer: the
    /// device makes progress until none are left before finalize.
    fn queued(&self) -> usize;

    /// [`Error`] if a peer of `which` has died.
    fn check_alive(&mut self, which: Alive) -> Result<(), Error>;

    /// Closes the transport; lines for the counters printout
    /// (`(what, text)`).
    fn finalize(self) -> Result<Vec<(&'static str, String)>, Error>;
}

/// The remote transport of the device: the one [`Route::Remote`] peers
/// go through (static dispatch: see ARCHITECTURE.md). A transport between nodes is added as a variant here.
///
/// [`Route::Remote`]: crate::Route::Remote
#[derive(Debug)]
pub(crate) enum Remote {
    /// The socket test double ([`double`]).
    Double(Box<DoubleTransport>),
    /// The TM-SRQ endpoint of `verbs-tm` ([`verbs`]).
    Verbs(Box<VerbsTransport>),
}

/// A message matched by a probe, on the transport that holds it.
#[derive(Debug)]
pub(crate) enum Matched {
    /// Node-local.
    Local(<ShmemTransport as Transport>::Matched),
    /// Remote.
    Remote(RemoteMatched),
}

/// A message matched by a remote transport's probe.
#[derive(Debug)]
pub(crate) enum RemoteMatched {
    /// The test double's.
    Double(<DoubleTransport as Transport>::Matched),
    /// The `verbs-tm` endpoint's.
    Verbs(<VerbsTransport as Transport>::Matched),
}

macro_rules! remote_dispatch {
    ($self:ident, $t:ident => $e:expr) => {
        match $self {
            Remote::Double($t) => $e,
            Remote::Verbs($t) => $e,
        }
    };
}

impl Transport for Remote {
    type Matched = RemoteMatched;

    fn small_send(&self) -> SmallSend {
        remote_dispatch!(self, t => t.small_send())
    }

    #[inline]
    fn send_small_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        kind: SmallKind,
    ) -> bool {
        remote_dispatch!(self, t => t.send_small_now(peer, tag, context, data, kind))
    }

    fn send_now(&mut self, peer: u32, tag: u32, context: u32, data: &[u8], copy: bool) -> bool {
        remote_dispatch!(self, t => t.send_now(peer, tag, context, data, copy))
    }

    fn send_fill_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        remote_dispatch!(self, t => t.send_fill_now(peer, tag, context, len, fill))
    }

    fn isend(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart, Error> {
        remote_dispatch!(self, t => t.isend(peer, tag, context, data, mode))
    }

    fn send_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Option<u64>, Error> {
        remote_dispatch!(self, t => t.send_borrowed(peer, tag, context, data, mode))
    }

    fn isend_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<u64, Error> {
        remote_dispatch!(self, t => t.isend_borrowed(peer, tag, context, data, mode))
    }

    fn cancel_send(&mut self, id: u64) -> Result<bool, Error> {
        remote_dispatch!(self, t => t.cancel_send(id))
    }

    fn irecv(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        consumer: Option<InPlace>,
    ) -> Result<RecvStart, Error> {
        remote_dispatch!(self, t => t.irecv(spec, buf, consumer))
    }

    #[allow(unsafe_code)]
    unsafe fn irecv_lent(
        &mut self,
        spec: MatchSpec,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RecvStart, Error> {
        // SAFETY: the caller's contract, passed on.
        remote_dispatch!(self, t => unsafe { t.irecv_lent(spec, ptr, len) })
    }

    fn recv_arrived(
        &mut self,
        spec: MatchSpec,
        buf: &mut [u8],
    ) -> Result<Option<RecvStatus>, Error> {
        remote_dispatch!(self, t => t.recv_arrived(spec, buf))
    }

    fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        remote_dispatch!(self, t => t.recv_now(spec, buf))
    }

    fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        remote_dispatch!(self, t => t.try_recv(spec, buf))
    }

    fn recv_arrived_with(
        &mut self,
        spec: MatchSpec,
        cap: usize,
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<Option<RecvStatus>, Error> {
        remote_dispatch!(self, t => t.recv_arrived_with(spec, cap, f))
    }

    fn front_open(&self, spec: MatchSpec) -> bool {
        remote_dispatch!(self, t => t.front_open(spec))
    }

    fn arrival_watch(&self, peer: u32) -> Option<ArrivalWatch> {
        remote_dispatch!(self, t => t.arrival_watch(peer))
    }

    fn cancel_recv(&mut self, id: u64) -> Result<bool, Error> {
        remote_dispatch!(self, t => t.cancel_recv(id))
    }

    fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<RecvStatus>, Error> {
        remote_dispatch!(self, t => t.iprobe(spec))
    }

    fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(Self::Matched, RecvStatus)>, Error> {
        match self {
            Remote::Double(t) => Ok(t
                .improbe(spec)?
                .map(|(m, st)| (RemoteMatched::Double(m), st))),
            Remote::Verbs(t) => Ok(t
                .improbe(spec)?
                .map(|(m, st)| (RemoteMatched::Verbs(m), st))),
        }
    }

    fn imrecv(&mut self, msg: Self::Matched, buf: Vec<u8>) -> Result<RecvStart, Error> {
        match (self, msg) {
            (Remote::Double(t), RemoteMatched::Double(m)) => t.imrecv(m, buf),
            (Remote::Verbs(t), RemoteMatched::Verbs(m)) => t.imrecv(m, buf),
            _ => Err(Error::InvalidArgument {
                what: "a matched message of another remote transport",
            }),
        }
    }

    fn post_shared(&mut self, spec: MatchSpec, cap: usize) -> Result<SharedStart, Error> {
        remote_dispatch!(self, t => t.post_shared(spec, cap))
    }

    fn commit(&mut self, id: u64, buf: &mut [u8]) -> Result<RecvStatus, Error> {
        remote_dispatch!(self, t => t.commit(id, buf))
    }

    fn withdraw(&mut self, id: u64) -> Result<(), Error> {
        remote_dispatch!(self, t => t.withdraw(id))
    }

    fn progress(&mut self) -> Result<usize, Error> {
        remote_dispatch!(self, t => t.progress())
    }

    fn collect(&mut self) -> bool {
        remote_dispatch!(self, t => t.collect())
    }

    fn drain<S: Sink>(&mut self, sink: &mut S) {
        remote_dispatch!(self, t => t.drain(sink))
    }

    fn queued(&self) -> usize {
        remote_dispatch!(self, t => t.queued())
    }

    fn check_alive(&mut self, which: Alive) -> Result<(), Error> {
        remote_dispatch!(self, t => t.check_alive(which))
    }

    fn finalize(self) -> Result<Vec<(&'static str, String)>, Error> {
        remote_dispatch!(self, t => t.finalize())
    }
}
