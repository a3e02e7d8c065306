//! The test double of a transport between nodes: a simple, complete
//! [`Transport`] over Unix stream sockets, which stands in for a second
//! node in tests on one host.
//!
//! # Enabling it
//!
//! [`ENV_TEST_NODES`] (`TMX_ADI_TEST_NODES=<n>`, `n` ≥ 2) in every rank's
//! environment: [`crate::init`] then splits the job's ranks into `n` fake
//! nodes of consecutive ranks and reaches every rank of another fake node
//! through this double ([`Route::Remote`](crate::Route::Remote)). The
//! double's sockets live in the Linux abstract namespace
//! (`tmx-<job>-double-<rank>`): nothing to clean up, but every fake node
//! must be on the same host (and network namespace).
//!
//! # What it does
//!
//! One connection per pair of ranks on different fake nodes, set up at
//! init (each rank listens; after the PMI barrier it connects to the
//! lower ranks and accepts the higher ones). A message is a 32-byte
//! header (kind, flags, context, source world rank, tag, length, a
//! synchronous send's id) and its payload. Sends are buffered: a standard
//! send is complete once copied into the connection's outgoing buffer; a
//! synchronous one when the receiver's acknowledgement comes back (sent
//! when the message is matched: received, or taken by a matched probe).
//! Progress writes what the sockets take and reads what they have, without
//! blocking. Matching is `tm_match::Matcher`'s: posted receives and
//! unexpected messages, wildcards, probes and cancel, per-source order.
//! Shared posts (`ANY_SOURCE` across transports, see
//! [`crate::transport`]) propose: an arriving message that would match one
//! stops the processing of arrivals, in order, until the device commits or
//! withdraws it. A connection closed without the peer's goodbye is a dead
//! peer ([`Error::PeerDied`]). It counts messages,
//! bytes and proposals, printed at finalize with `TMX_ADI_COUNTERS=1`.
//!
//! It is a test transport: no flow control (a sender's outgoing buffer
//! grows as needed), one copy in and one out, a system call per peer and
//! pass. Speed is not its purpose.

use super::{
    Alive, InPlace, RecvStart, RecvStatus, SendMode, SendStart, SharedStart, Sink, Transport,
    REMOTE_ID,
};
use crate::Error;
use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};
use tm_match::{Arrived, Matcher, Posted, RecvId};
use tm_proto::{Envelope, MatchSpec};

/// Environment variable (a test switch): `TMX_ADI_TEST_NODES=<n>` with
/// `n` ≥ 2 splits the job into `n` fake nodes on one host and reaches the
/// ranks of the other fake nodes through a socket test double of a
/// transport between nodes; unset, `0` or `1` (the default): off.
///
/// The ranks are split into nodes of consecutive ranks, `ceil(size / n)`
/// each (4 ranks, `n = 2`: ranks 0–1 and 2–3). Each fake node has its own
/// shared-memory segment (removed by the launcher's cleanup like any of
/// the job's), and every pair of ranks on different fake nodes talks
/// through the double: a Unix stream socket in the Linux abstract
/// namespace, with matching by `tm-match` as in every transport. So
/// point-to-point, probes, cancel, datatypes, communicators, collectives
/// and windows run over two transports at once, `ANY_SOURCE` receives
/// included. Every rank must see the same value, and every fake node must
/// run on the same host (and network namespace). Without it, ranks on
/// different nodes talk through `verbs-tm` (`transport::verbs`).
///
/// To enable it for a test, put it in the ranks' environment:
///
/// ```no_run
/// let mut spec = launcher::run::JobSpec::new(4, "/path/to/rank-program", vec![]);
/// spec.env.push((adi::ENV_TEST_NODES.into(), "2".into()));
/// let report = launcher::run::run_job(&spec)?;
/// assert_eq!(report.exit_code, 0);
/// # Ok::<(), launcher::Error>(())
/// ```
///
/// or from a shell, `TMX_ADI_TEST_NODES=2 tmrun -n 4 prog`. The double
/// buffers every send (no flow control) and is not built for speed.
pub const ENV_TEST_NODES: &str = "TMX_ADI_TEST_NODES";

/// How long init waits for the other ranks' connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Header bytes of a frame.
const HEADER: usize = 32;
/// Frame kinds.
const MSG: u8 = 1;
const ACK: u8 = 2;
const BYE: u8 = 3;
const HELLO: u8 = 4;
/// The sender asks to withdraw its unmatched synchronous send `id`.
const CANCEL: u8 = 5;
/// The answer to [`CANCEL`] for send `id` ([`WITHDRAWN`] if it was).
const CANCELLED: u8 = 6;
/// Flag: a synchronous send (acknowledge the match with its id).
const SYNC: u8 = 1;
/// Flag of [`CANCELLED`]: the message was withdrawn, no receive will
/// ever take it.
const WITHDRAWN: u8 = 1;
/// Bytes read from a socket per call.
const READ_CHUNK: usize = 256 << 10;

/// The fake node count of [`ENV_TEST_NODES`]: `None` if unset, `0` or `1`.
pub(crate) fn test_nodes_from_env() -> Result<Option<usize>, Error> {
    let n = crate::device::parse_count(ENV_TEST_NODES, std::env::var(ENV_TEST_NODES).ok(), 0)?;
    Ok((n >= 2).then_some(n as usize))
}

/// A frame's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Frame {
    kind: u8,
    flags: u8,
    context: u32,
    source: u32,
    tag: u32,
    len: u64,
    id: u64,
}

impl Frame {
    fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0] = self.kind;
        h[1] = self.flags;
        h[4..8].copy_from_slice(&self.context.to_le_bytes());
        h[8..12].copy_from_slice(&self.source.to_le_bytes());
        h[12..16].copy_from_slice(&self.tag.to_le_bytes());
        h[16..24].copy_from_slice(&self.len.to_le_bytes());
        h[24..32].copy_from_slice(&self.id.to_le_bytes());
        h
    }

    fn decode(h: &[u8]) -> Option<Frame> {
        let u32_at = |i: usize| Some(u32::from_le_bytes(h.get(i..i + 4)?.try_into().ok()?));
        let u64_at = |i: usize| Some(u64::from_le_bytes(h.get(i..i + 8)?.try_into().ok()?));
        Some(Frame {
            kind: *h.first()?,
            flags: *h.get(1)?,
            context: u32_at(4)?,
            source: u32_at(8)?,
            tag: u32_at(12)?,
            len: u64_at(16)?,
            id: u64_at(24)?,
        })
    }
}

/// A message that has arrived (queued unexpected, or matched).
#[derive(Debug)]
struct Stored {
    source: u32,
    tag: u32,
    data: Vec<u8>,
    /// The sender's operation id of a synchronous send.
    sync: Option<u64>,
}

/// A posted receive.
#[derive(Debug)]
struct Post {
    recv: RecvId,
    buf: Vec<u8>,
    /// A shared post: proposes instead of matching.
    shared: bool,
}

/// One connection.
#[derive(Debug)]
struct Conn {
    stream: UnixStream,
    /// Bytes not yet written, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// Bytes read and not yet parsed: `inb[in_at..in_end]`.
    inb: Vec<u8>,
    in_at: usize,
    in_end: usize,
    /// The peer said goodbye (a close after it is not a death).
    bye: bool,
    /// The peer closed its end (read end of file).
    closed: bool,
    /// Why the connection died, if it did.
    dead: Option<String>,
}

impl Conn {
    fn new(stream: UnixStream) -> Conn {
        Conn {
            stream,
            out: Vec::new(),
            out_at: 0,
            inb: Vec::new(),
            in_at: 0,
            in_end: 0,
            bye: false,
            closed: false,
            dead: None,
        }
    }

    fn push(&mut self, f: &Frame, payload: &[u8]) {
        self.out.extend_from_slice(&f.encode());
        self.out.extend_from_slice(payload);
    }

    /// Writes what the socket takes now.
    fn flush(&mut self) -> usize {
        let mut n = 0;
        while self.dead.is_none() && self.out_at < self.out.len() {
            match nix::sys::socket::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.stream),
                &self.out[self.out_at..],
                nix::sys::socket::MsgFlags::MSG_NOSIGNAL | nix::sys::socket::MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(k) => {
                    self.out_at += k;
                    n += k;
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => self.dead = Some(format!("send: {e}")),
            }
        }
        if self.out_at == self.out.len() {
            self.out.clear();
            self.out_at = 0;
        }
        n
    }

    /// Reads what the socket has now.
    fn fill(&mut self) -> usize {
        let mut n = 0;
        if self.dead.is_some() {
            return 0;
        }
        loop {
            if self.in_at == self.in_end {
                self.in_at = 0;
                self.in_end = 0;
            }
            if self.in_end == self.inb.len() {
                if self.in_at > 0 {
                    // Move the unparsed tail to the front.
                    self.inb.copy_within(self.in_at..self.in_end, 0);
                    self.in_end -= self.in_at;
                    self.in_at = 0;
                } else {
                    // Grow (zeroed once, not per read).
                    let grow = self.inb.len().max(READ_CHUNK);
                    self.inb.resize(self.inb.len() + grow, 0);
                }
            }
            match self.stream.read(&mut self.inb[self.in_end..]) {
                Ok(0) => {
                    // Dead unless its goodbye is among what was read (the
                    // caller decides once it has parsed it).
                    self.closed = true;
                    return n;
                }
                Ok(k) => {
                    self.in_end += k;
                    n += k;
                }
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock => return n,
                    ErrorKind::Interrupted => {}
                    _ => {
                        if !self.bye {
                            self.dead = Some(format!("recv: {e}"));
                        }
                        return n;
                    }
                },
            }
        }
    }

    /// The next whole frame read, with its payload.
    fn next_frame(&mut self) -> Option<(Frame, Vec<u8>)> {
        let avail = &self.inb[self.in_at..self.in_end];
        let f = Frame::decode(avail.get(..HEADER)?)?;
        let len = usize::try_from(f.len).ok()?;
        let payload = avail.get(HEADER..HEADER.checked_add(len)?)?.to_vec();
        self.in_at += HEADER + len;
        Some((f, payload))
    }
}

/// A finished send: the owned buffer back, or why it failed.
type SendResult = Result<Option<Vec<u8>>, Error>;

/// Counters of the double.
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    msgs_sent: u64,
    msgs_received: u64,
    bytes_sent: u64,
    proposals: u64,
    commits: u64,
    withdrawn: u64,
    cancelled_sends: u64,
}

/// The socket test double.
#[derive(Debug)]
pub(crate) struct DoubleTransport {
    me: u32,
    /// World rank → connection (`None`: same fake node, or this rank).
    conns: Vec<Option<Conn>>,
    matcher: Matcher<u64, Stored>,
    posts: HashMap<u64, Post>,
    next_id: u64,
    /// Synchronous sends waiting for their acknowledgement: id → the
    /// owned buffer to hand back, and the peer.
    syncs: HashMap<u64, (Option<Vec<u8>>, u32)>,
    /// Matched probes: handle → message.
    probed: HashMap<u64, Stored>,
    /// Arrived frames not yet processed (behind a proposal), in order.
    inbox: VecDeque<(u32, Frame, Vec<u8>)>,
    /// The shared post whose proposal holds the front of `inbox`.
    held: Option<u64>,
    done_sends: Vec<(u64, SendResult)>,
    done_recvs: Vec<(u64, Result<RecvStatus, Error>, Vec<u8>)>,
    proposals: Vec<(u64, RecvStatus)>,
    /// Answers to our [`CANCEL`]s: `(send id, withdrawn)`.
    cancel_answers: Vec<(u64, bool)>,
    counters: Counters,
}

/// A bound listener of the double, between init's two phases.
#[derive(Debug)]
pub(crate) struct Listening {
    listener: UnixListener,
    job: String,
    me: u32,
}

/// The abstract socket name of `rank`'s listener in job `job`.
fn address(job: &str, rank: u32) -> Result<SocketAddr, Error> {
    SocketAddr::from_abstract_name(format!("tmx-{job}-double-{rank}").as_bytes()).map_err(|e| {
        Error::Launcher {
            detail: format!("test double: socket name of rank {rank}: {e}"),
        }
    })
}

/// [`Error::PeerDied`] of `rank`, after the process's policy for a dead
/// peer ([`crate::OnPeerDeath`]: by default this process exits).
fn dead(rank: u32, detail: &str) -> Error {
    crate::init::remote_peer_died(rank, detail);
    Error::PeerDied {
        rank,
        detail: detail.to_owned(),
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Launcher {
        detail: format!("test double: {what}: {e}"),
    }
}

impl DoubleTransport {
    /// Phase one of the setup: listens for the other fake nodes' ranks
    /// (before the PMI barrier that tells every rank the others listen).
    pub(crate) fn listen(job: &str, me: u32) -> Result<Listening, Error> {
        let listener =
            UnixListener::bind_addr(&address(job, me)?).map_err(|e| io_error("listen", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| io_error("listen", e))?;
        Ok(Listening {
            listener,
            job: job.to_owned(),
            me,
        })
    }

    /// Phase two: connects to every rank of `remote` (world ranks on
    /// other fake nodes) — to the lower ones, accepting the higher ones —
    /// in a job of `size` ranks.
    pub(crate) fn connect(l: Listening, remote: &[u32], size: usize) -> Result<Self, Error> {
        let me = l.me;
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut conns: Vec<Option<Conn>> = (0..size).map(|_| None).collect();
        let late = |what: String| Error::Launcher {
            detail: format!("test double: {what} (waited {CONNECT_TIMEOUT:?})"),
        };
        for &q in remote.iter().filter(|&&q| q < me) {
            let addr = address(&l.job, q)?;
            let mut s = loop {
                match UnixStream::connect_addr(&addr) {
                    Ok(s) => break s,
                    Err(_) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(2))
                    }
                    Err(e) => return Err(late(format!("connect to rank {q}: {e}"))),
                }
            };
            let hello = Frame {
                kind: HELLO,
                flags: 0,
                context: 0,
                source: me,
                tag: 0,
                len: 0,
                id: 0,
            };
            s.write_all(&hello.encode())
                .map_err(|e| io_error("hello", e))?;
            if let Some(slot) = conns.get_mut(q as usize) {
                *slot = Some(Conn::new(s));
            }
        }
        let mut waiting = remote.iter().filter(|&&q| q > me).count();
        while waiting > 0 {
            match l.listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(|e| io_error("accept", e))?;
                    s.set_read_timeout(Some(CONNECT_TIMEOUT))
                        .map_err(|e| io_error("accept", e))?;
                    let mut h = [0u8; HEADER];
                    s.read_exact(&mut h).map_err(|e| io_error("hello", e))?;
                    let f = Frame::decode(&h)
                        .filter(|f| f.kind == HELLO)
                        .ok_or_else(|| Error::Launcher {
                            detail: "test double: a connection did not say hello".into(),
                        })?;
                    match conns.get_mut(f.source as usize) {
                        Some(slot @ None) if remote.contains(&f.source) => {
                            *slot = Some(Conn::new(s));
                            waiting -= 1;
                        }
                        _ => {
                            return Err(Error::Launcher {
                                detail: format!(
                                    "test double: unexpected hello from rank {}",
                                    f.source
                                ),
                            })
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(late(format!("accept ({waiting} ranks missing): {e}"))),
            }
        }
        for c in conns.iter_mut().flatten() {
            c.stream
                .set_read_timeout(None)
                .and_then(|()| c.stream.set_nonblocking(true))
                .map_err(|e| io_error("connection setup", e))?;
        }
        tracing::info!(
            rank = me,
            peers = remote.len(),
            "test double: connected to the other fake nodes"
        );
        Ok(Self::over(me, conns))
    }

    /// The transport of rank `me` over connections `conns` (by world rank).
    fn over(me: u32, conns: Vec<Option<Conn>>) -> Self {
        DoubleTransport {
            me,
            conns,
            matcher: Matcher::new(),
            posts: HashMap::new(),
            next_id: REMOTE_ID | 1,
            syncs: HashMap::new(),
            probed: HashMap::new(),
            inbox: VecDeque::new(),
            held: None,
            done_sends: Vec::new(),
            done_recvs: Vec::new(),
            proposals: Vec::new(),
            cancel_answers: Vec::new(),
            counters: Counters::default(),
        }
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn conn(&mut self, peer: u32) -> Result<&mut Conn, Error> {
        let c = self
            .conns
            .get_mut(peer as usize)
            .and_then(Option::as_mut)
            .ok_or(Error::InvalidRank {
                rank: peer as i32,
                size: -1,
            })?;
        match &c.dead {
            Some(why) => Err(dead(peer, why)),
            None => Ok(c),
        }
    }

    /// Queues a message for `peer` and writes what the socket takes.
    fn send_frame(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        sync: Option<u64>,
    ) -> Result<(), Error> {
        let me = self.me;
        let c = self.conn(peer)?;
        c.push(
            &Frame {
                kind: MSG,
                flags: if sync.is_some() { SYNC } else { 0 },
                context,
                source: me,
                tag,
                len: data.len() as u64,
                id: sync.unwrap_or(0),
            },
            data,
        );
        c.flush();
        self.counters.msgs_sent += 1;
        self.counters.bytes_sent += data.len() as u64;
        Ok(())
    }

    /// Acknowledges the match of a synchronous message.
    fn ack(&mut self, m: &Stored) {
        let Some(id) = m.sync else {
            return;
        };
        if let Ok(c) = self.conn(m.source) {
            c.push(
                &Frame {
                    kind: ACK,
                    flags: 0,
                    context: 0,
                    source: 0,
                    tag: 0,
                    len: 0,
                    id,
                },
                &[],
            );
            c.flush();
        }
    }

    /// Delivers matched message `m` into `buf`; its status.
    fn deliver(&mut self, m: Stored, buf: &mut [u8]) -> RecvStatus {
        let n = m.data.len().min(buf.len());
        buf[..n].copy_from_slice(&m.data[..n]);
        self.ack(&m);
        RecvStatus {
            source: m.source,
            tag: m.tag,
            len: n,
            msg_len: m.data.len(),
            cancelled: false,
        }
    }

    fn peek_status(source: u32, tag: u32, len: usize) -> RecvStatus {
        RecvStatus {
            source,
            tag,
            len,
            msg_len: len,
            cancelled: false,
        }
    }

    /// Processes arrived frames in order until none are left or one
    /// proposes (a shared post would match it).
    fn process(&mut self) -> Result<usize, Error> {
        let mut n = 0;
        while self.held.is_none() {
            let Some((peer, f, payload)) = self.inbox.pop_front() else {
                break;
            };
            n += 1;
            match f.kind {
                MSG => {
                    let env = Envelope {
                        context_id: f.context,
                        source: f.source,
                        tag: f.tag,
                    };
                    if let Some(rid) = self.matcher.peek_arrival(&env) {
                        let post = self.matcher.get_posted(rid).map(|e| *e.recv);
                        if let Some(id) =
                            post.filter(|id| self.posts.get(id).is_some_and(|p| p.shared))
                        {
                            // Hold it (and everything behind it) for the device.
                            let st = Self::peek_status(f.source, f.tag, payload.len());
                            self.inbox.push_front((peer, f, payload));
                            self.held = Some(id);
                            self.proposals.push((id, st));
                            self.counters.proposals += 1;
                            break;
                        }
                    }
                    self.counters.msgs_received += 1;
                    let m = Stored {
                        source: f.source,
                        tag: f.tag,
                        data: payload,
                        sync: (f.flags & SYNC != 0).then_some(f.id),
                    };
                    match self.matcher.arrive(env, m).map_err(match_error)? {
                        Arrived::Matched { recv: id, msg, .. } => {
                            if let Some(mut p) = self.posts.remove(&id) {
                                let st = self.deliver(msg, &mut p.buf);
                                self.done_recvs.push((id, Ok(st), p.buf));
                            }
                        }
                        Arrived::Queued(_) => {}
                    }
                }
                ACK => {
                    if let Some((buf, _)) = self.syncs.remove(&f.id) {
                        self.done_sends.push((f.id, Ok(buf)));
                    }
                }
                _ => return Err(dead(peer, &format!("malformed frame of kind {}", f.kind))),
            }
        }
        Ok(n)
    }

    /// A [`CANCEL`] from `peer` (withdraw its message if no receive has
    /// taken it, and answer) or a [`CANCELLED`] answer to ours.
    #[cold]
    fn on_cancel_frame(&mut self, peer: u32, f: &Frame) {
        if f.kind == CANCELLED {
            self.cancel_answers.push((f.id, f.flags & WITHDRAWN != 0));
            return;
        }
        let ok = self.withdraw_message(peer, f.id);
        tracing::debug!(peer, id = f.id, ok, "test double: send cancel asked");
        if ok {
            self.counters.cancelled_sends += 1;
        }
        let answer = Frame {
            kind: CANCELLED,
            flags: if ok { WITHDRAWN } else { 0 },
            context: 0,
            source: self.me,
            tag: 0,
            len: 0,
            id: f.id,
        };
        if let Ok(c) = self.conn(peer) {
            c.push(&answer, &[]);
            c.flush();
        }
    }

    /// Removes synchronous message `id` of `source` if no receive has
    /// taken it: still among the arrived frames (unless a proposal holds
    /// it: the device is deciding on it), or queued unexpected in the
    /// matcher (which withdraws it, `Matcher::cancel_message`). A message
    /// matched, or taken by a matched probe, stays.
    fn withdraw_message(&mut self, source: u32, id: u64) -> bool {
        let unprocessed = self.inbox.iter().position(|(p, f, _)| {
            *p == source && f.kind == MSG && f.flags & SYNC != 0 && f.id == id
        });
        if let Some(i) = unprocessed {
            if i == 0 && self.held.is_some() {
                return false;
            }
            return self.inbox.remove(i).is_some();
        }
        let queued = self
            .matcher
            .unexpected()
            .iter()
            .find(|p| p.msg.source == source && p.msg.sync == Some(id))
            .map(|p| p.id);
        queued.is_some_and(|m| self.matcher.cancel_message(m).is_some())
    }

    /// Fails the pending operations that wait for a dead peer.
    fn fail_dead(&mut self) {
        for (p, c) in self.conns.iter().enumerate() {
            let Some(Conn {
                dead: Some(why), ..
            }) = c
            else {
                continue;
            };
            let p = p as u32;
            let ids: Vec<u64> = self
                .syncs
                .iter()
                .filter(|(_, (_, to))| *to == p)
                .map(|(id, _)| *id)
                .collect();
            for id in ids {
                self.syncs.remove(&id);
                self.done_sends.push((id, Err(dead(p, why))));
            }
        }
    }
}

fn match_error(e: tm_match::Error) -> Error {
    Error::InvalidArgument {
        what: match e {
            tm_match::Error::QueueFull { .. } => "test double: matching queue full",
            _ => "test double: matching failed",
        },
    }
}

impl Transport for DoubleTransport {
    type Matched = u64;

    fn send_now(&mut self, peer: u32, tag: u32, context: u32, data: &[u8], _copy: bool) -> bool {
        self.send_frame(peer, tag, context, data, None).is_ok()
    }

    fn send_fill_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        let mut data = vec![0u8; len];
        fill(&mut data) && self.send_frame(peer, tag, context, &data, None).is_ok()
    }

    fn isend(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        mode: SendMode,
    ) -> Result<SendStart, Error> {
        match mode {
            SendMode::Standard => {
                self.send_frame(peer, tag, context, &data, None)?;
                Ok(SendStart::Done(data))
            }
            SendMode::Synchronous => {
                let id = self.next_id();
                self.send_frame(peer, tag, context, &data, Some(id))?;
                self.syncs.insert(id, (Some(data), peer));
                Ok(SendStart::Pending(id))
            }
        }
    }

    fn send_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<Option<u64>, Error> {
        match mode {
            SendMode::Standard => {
                self.send_frame(peer, tag, context, data, None)?;
                Ok(None)
            }
            SendMode::Synchronous => {
                let id = self.next_id();
                self.send_frame(peer, tag, context, data, Some(id))?;
                self.syncs.insert(id, (None, peer));
                Ok(Some(id))
            }
        }
    }

    fn isend_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        mode: SendMode,
    ) -> Result<u64, Error> {
        match self.send_borrowed(peer, tag, context, data, mode)? {
            Some(id) => Ok(id),
            None => {
                // Copied: complete, reported through the feed.
                let id = self.next_id();
                self.done_sends.push((id, Ok(None)));
                Ok(id)
            }
        }
    }

    /// A synchronous send (the only kind that is ever pending here) not
    /// yet matched is withdrawn by its receiver, which answers during its
    /// progress: this call progresses until the answer comes.
    fn cancel_send(&mut self, id: u64) -> Result<bool, Error> {
        let Some(&(_, peer)) = self.syncs.get(&id) else {
            return Ok(false);
        };
        let ask = Frame {
            kind: CANCEL,
            flags: 0,
            context: 0,
            source: self.me,
            tag: 0,
            len: 0,
            id,
        };
        let c = self.conn(peer)?;
        c.push(&ask, &[]);
        c.flush();
        tracing::debug!(peer, id, "test double: send cancel requested");
        loop {
            if let Some(i) = self.cancel_answers.iter().position(|a| a.0 == id) {
                let (_, ok) = self.cancel_answers.swap_remove(i);
                if ok {
                    self.counters.cancelled_sends += 1;
                    if let Some((buf, _)) = self.syncs.remove(&id) {
                        self.done_sends.push((id, Ok(buf)));
                    }
                }
                tracing::debug!(peer, id, ok, "test double: send cancel answered");
                return Ok(ok);
            }
            let progressed = self.progress()?;
            let c = self.conn(peer)?;
            if c.bye && c.closed {
                // The receiver finalized without answering: it never
                // received the message unless its acknowledgement came.
                let acked = self
                    .inbox
                    .iter()
                    .any(|(p, f, _)| *p == peer && f.kind == ACK && f.id == id);
                if acked {
                    return Ok(false);
                }
                let Some((buf, _)) = self.syncs.remove(&id) else {
                    return Ok(false);
                };
                self.done_sends.push((id, Ok(buf)));
                return Ok(true);
            }
            if progressed == 0 {
                std::thread::yield_now();
            }
        }
    }

    fn irecv(
        &mut self,
        spec: MatchSpec,
        mut buf: Vec<u8>,
        _consumer: Option<InPlace>,
    ) -> Result<RecvStart, Error> {
        let id = self.next_id();
        match self.matcher.post(spec, id).map_err(match_error)? {
            Posted::Matched { msg, .. } => {
                let st = self.deliver(msg, &mut buf);
                Ok(RecvStart::Done(Ok(st), buf))
            }
            Posted::Queued(recv) => {
                self.posts.insert(
                    id,
                    Post {
                        recv,
                        buf,
                        shared: false,
                    },
                );
                Ok(RecvStart::Pending(id))
            }
        }
    }

    fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        Ok(self
            .matcher
            .improbe(&spec)
            .map(|m| self.deliver(m.msg, buf)))
    }

    fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        self.progress()?;
        self.recv_now(spec, buf)
    }

    fn cancel_recv(&mut self, id: u64) -> Result<bool, Error> {
        let Some(p) = self.posts.get(&id) else {
            return Ok(false);
        };
        if self.matcher.cancel(p.recv).is_none() {
            return Ok(false);
        }
        if let Some(p) = self.posts.remove(&id) {
            self.done_recvs.push((id, Ok(RecvStatus::CANCELLED), p.buf));
        }
        Ok(true)
    }

    fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<RecvStatus>, Error> {
        self.progress()?;
        Ok(self
            .matcher
            .probe(&spec)
            .map(|p| Self::peek_status(p.msg.source, p.msg.tag, p.msg.data.len())))
    }

    fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(u64, RecvStatus)>, Error> {
        self.progress()?;
        let Some(m) = self.matcher.improbe(&spec) else {
            return Ok(None);
        };
        let st = Self::peek_status(m.msg.source, m.msg.tag, m.msg.data.len());
        // A synchronous sender learns of the match now.
        self.ack(&m.msg);
        let mut msg = m.msg;
        msg.sync = None;
        let id = self.next_id();
        self.probed.insert(id, msg);
        Ok(Some((id, st)))
    }

    fn imrecv(&mut self, msg: u64, mut buf: Vec<u8>) -> Result<RecvStart, Error> {
        let m = self.probed.remove(&msg).ok_or(Error::InvalidArgument {
            what: "test double: unknown matched message",
        })?;
        let st = self.deliver(m, &mut buf);
        Ok(RecvStart::Done(Ok(st), buf))
    }

    fn post_shared(&mut self, spec: MatchSpec, _cap: usize) -> Result<SharedStart, Error> {
        if let Some(p) = self.matcher.probe(&spec) {
            return Ok(SharedStart::Proposed(Self::peek_status(
                p.msg.source,
                p.msg.tag,
                p.msg.data.len(),
            )));
        }
        let id = self.next_id();
        match self.matcher.post(spec, id).map_err(match_error)? {
            Posted::Queued(recv) => {
                self.posts.insert(
                    id,
                    Post {
                        recv,
                        buf: Vec::new(),
                        shared: true,
                    },
                );
                Ok(SharedStart::Posted(id))
            }
            Posted::Matched { .. } => Err(Error::InvalidArgument {
                what: "test double: a shared post matched although the probe found nothing",
            }),
        }
    }

    fn commit(&mut self, id: u64, buf: &mut [u8]) -> Result<RecvStatus, Error> {
        if self.held != Some(id) {
            return Err(Error::InvalidArgument {
                what: "test double: commit of a post that proposes nothing",
            });
        }
        let (_, f, payload) = self.inbox.pop_front().ok_or(Error::InvalidArgument {
            what: "test double: the proposed message is gone",
        })?;
        self.held = None;
        if let Some(p) = self.posts.remove(&id) {
            self.matcher.cancel(p.recv);
        }
        self.counters.commits += 1;
        self.counters.msgs_received += 1;
        let m = Stored {
            source: f.source,
            tag: f.tag,
            data: payload,
            sync: (f.flags & SYNC != 0).then_some(f.id),
        };
        Ok(self.deliver(m, buf))
    }

    fn withdraw(&mut self, id: u64) -> Result<(), Error> {
        if let Some(p) = self.posts.remove(&id) {
            self.matcher.cancel(p.recv);
            self.counters.withdrawn += 1;
        }
        if self.held == Some(id) {
            // The held message is matched as if the post had never been.
            self.held = None;
        }
        Ok(())
    }

    fn progress(&mut self) -> Result<usize, Error> {
        let mut n = 0;
        // Cancel requests and answers, handled once every frame before
        // them on their connection is in `inbox`, not behind a proposal.
        let mut cancels = Vec::new();
        for (peer, c) in self.conns.iter_mut().enumerate() {
            let Some(c) = c else {
                continue;
            };
            n += c.flush();
            n += c.fill();
            while let Some((f, payload)) = c.next_frame() {
                match f.kind {
                    BYE => c.bye = true,
                    CANCEL | CANCELLED => cancels.push((peer as u32, f)),
                    _ => self.inbox.push_back((peer as u32, f, payload)),
                }
            }
            if c.closed && !c.bye && c.dead.is_none() {
                c.dead = Some("connection closed".into());
            }
        }
        n += cancels.len();
        for (peer, f) in cancels {
            self.on_cancel_frame(peer, &f);
        }
        self.fail_dead();
        Ok(n + self.process()?)
    }

    fn collect(&mut self) -> bool {
        !(self.done_sends.is_empty() && self.done_recvs.is_empty() && self.proposals.is_empty())
    }

    fn drain<S: Sink>(&mut self, sink: &mut S) {
        for (id, r) in self.done_sends.drain(..) {
            match r {
                Ok(mut b) => sink.send_done(id, Ok(&mut b)),
                Err(e) => sink.send_done(id, Err(e)),
            }
        }
        for (id, r, mut buf) in self.done_recvs.drain(..) {
            sink.recv_done(id, r, &mut buf);
        }
        for (id, st) in self.proposals.drain(..) {
            sink.proposed(id, st);
        }
    }

    fn queued(&self) -> usize {
        self.conns
            .iter()
            .flatten()
            .filter(|c| c.dead.is_none())
            .map(|c| c.out.len() - c.out_at)
            .sum()
    }

    fn check_alive(&mut self, which: Alive) -> Result<(), Error> {
        let check = |p: usize, c: &Option<Conn>| match c {
            Some(Conn {
                dead: Some(why), ..
            }) => Err(dead(p as u32, why)),
            _ => Ok(()),
        };
        match which {
            Alive::Peer(p) => match self.conns.get(p as usize) {
                Some(c) => check(p as usize, c),
                None => Ok(()),
            },
            // A pending receive from anyone, or any pending synchronous
            // send, waits for every connection.
            Alive::Waited if self.posts.is_empty() && self.syncs.is_empty() => Ok(()),
            Alive::Waited | Alive::All => self
                .conns
                .iter()
                .enumerate()
                .try_for_each(|(p, c)| check(p, c)),
        }
    }

    fn finalize(mut self) -> Result<Vec<(&'static str, String)>, Error> {
        let bye = Frame {
            kind: BYE,
            flags: 0,
            context: 0,
            source: self.me,
            tag: 0,
            len: 0,
            id: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in self.conns.iter_mut().flatten() {
            c.push(&bye, &[]);
            while c.dead.is_none() && c.out_at < c.out.len() && Instant::now() < deadline {
                if c.flush() == 0 {
                    std::thread::yield_now();
                }
            }
        }
        let c = self.counters;
        Ok(vec![(
            "double counters",
            format!(
                "msgs_sent={} msgs_received={} bytes_sent={} proposals={} commits={} withdrawn={} \
                 cancelled_sends={}",
                c.msgs_sent,
                c.msgs_received,
                c.bytes_sent,
                c.proposals,
                c.commits,
                c.withdrawn,
                c.cancelled_sends
            ),
        )])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tm_proto::{Source, Tag};

    /// Ranks 0 and 1 of a job of 2, connected in this process.
    fn pair() -> (DoubleTransport, DoubleTransport) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (
            DoubleTransport::over(0, vec![None, Some(Conn::new(a))]),
            DoubleTransport::over(1, vec![Some(Conn::new(b)), None]),
        )
    }

    fn spec(source: Source, tag: Tag) -> MatchSpec {
        MatchSpec {
            context_id: 0,
            source,
            tag,
        }
    }

    /// What a drain hands over.
    #[derive(Default)]
    struct Got {
        sends: Vec<(u64, bool)>,
        recvs: Vec<(u64, RecvStatus, Vec<u8>)>,
        proposals: Vec<(u64, RecvStatus)>,
    }

    impl Sink for Got {
        fn send_done(&mut self, id: u64, result: Result<&mut Option<Vec<u8>>, Error>) {
            self.sends.push((id, result.is_ok()));
        }
        fn recv_done(&mut self, id: u64, result: Result<RecvStatus, Error>, buf: &mut Vec<u8>) {
            self.recvs.push((id, result.unwrap(), std::mem::take(buf)));
        }
        fn proposed(&mut self, id: u64, status: RecvStatus) {
            self.proposals.push((id, status));
        }
    }

    /// Progress until `t` has collected something (bounded).
    fn settle(t: &mut DoubleTransport) -> Got {
        let mut got = Got::default();
        for _ in 0..10_000 {
            t.progress().unwrap();
            if t.collect() {
                t.drain(&mut got);
                return got;
            }
        }
        got
    }

    fn send(t: &mut DoubleTransport, to: u32, tag: u32, data: &[u8]) {
        assert!(matches!(
            t.isend(to, tag, 0, data.to_vec(), SendMode::Standard)
                .unwrap(),
            SendStart::Done(_)
        ));
        t.progress().unwrap();
    }

    #[test]
    fn frames_round_trip() {
        let f = Frame {
            kind: MSG,
            flags: SYNC,
            context: 7,
            source: 3,
            tag: 0x7fff_ffff,
            len: 1 << 40,
            id: REMOTE_ID | 9,
        };
        assert_eq!(Frame::decode(&f.encode()), Some(f));
        assert_eq!(Frame::decode(&f.encode()[..31]), None);
    }

    #[test]
    fn a_posted_receive_takes_its_message_and_synchronous_sends_wait_for_the_match() {
        let (mut a, mut b) = pair();
        let RecvStart::Pending(r) = a
            .irecv(spec(Source::Rank(1), Tag::Value(5)), vec![0; 8], None)
            .unwrap()
        else {
            panic!("nothing has arrived")
        };
        let SendStart::Pending(s) = b
            .isend(0, 5, 0, b"hello".to_vec(), SendMode::Synchronous)
            .unwrap()
        else {
            panic!("a synchronous send waits for the match")
        };
        let got = settle(&mut a);
        assert_eq!(got.recvs.len(), 1);
        let (id, st, buf) = &got.recvs[0];
        assert_eq!(
            (*id, st.source, st.tag, st.len, st.msg_len),
            (r, 1, 5, 5, 5)
        );
        assert_eq!(&buf[..5], b"hello");
        let got = settle(&mut b);
        assert_eq!(got.sends, vec![(s, true)], "acknowledged once matched");
        assert!(r & REMOTE_ID != 0 && s & REMOTE_ID != 0, "remote ids");
    }

    #[test]
    fn unexpected_messages_probe_match_and_keep_their_order() {
        let (mut a, mut b) = pair();
        for k in 0..3u8 {
            send(&mut b, 0, 9, &[k; 3]);
        }
        // All three arrive; a probe sees the first, a matched probe takes
        // it, receives get the others in order, a longer one truncated.
        let mut st = None;
        for _ in 0..10_000 {
            st = a.iprobe(spec(Source::Any, Tag::Any)).unwrap();
            if a.matcher.unexpected_len() == 3 {
                break;
            }
        }
        assert_eq!(st.map(|s| (s.source, s.tag, s.msg_len)), Some((1, 9, 3)));
        let (m, _) = a
            .improbe(spec(Source::Rank(1), Tag::Value(9)))
            .unwrap()
            .unwrap();
        let RecvStart::Done(Ok(st), buf) = a.imrecv(m, vec![0; 3]).unwrap() else {
            panic!()
        };
        assert_eq!((st.len, &buf[..]), (3, &[0u8; 3][..]));
        let mut two = [0u8; 2];
        let st = a
            .recv_now(spec(Source::Any, Tag::Value(9)), &mut two)
            .unwrap()
            .unwrap();
        assert_eq!(
            (st.len, st.msg_len, two),
            (2, 3, [1, 1]),
            "truncated to the buffer"
        );
        let RecvStart::Done(Ok(st), buf) = a
            .irecv(spec(Source::Any, Tag::Any), vec![0; 4], None)
            .unwrap()
        else {
            panic!("a message is here")
        };
        assert_eq!((st.len, &buf[..3]), (3, &[2u8; 3][..]));
        assert_eq!(a.iprobe(spec(Source::Any, Tag::Any)).unwrap(), None);
    }

    #[test]
    fn a_cancelled_receive_takes_nothing() {
        let (mut a, mut b) = pair();
        let RecvStart::Pending(r) = a
            .irecv(spec(Source::Any, Tag::Value(1)), vec![7; 4], None)
            .unwrap()
        else {
            panic!()
        };
        assert!(a.cancel_recv(r).unwrap());
        assert!(!a.cancel_recv(r).unwrap(), "once");
        let got = settle(&mut a);
        assert_eq!(got.recvs.len(), 1);
        assert!(got.recvs[0].1.cancelled);
        assert_eq!(got.recvs[0].2, vec![7; 4], "the buffer back, untouched");
        send(&mut b, 0, 1, b"x");
        for _ in 0..10_000 {
            if a.iprobe(spec(Source::Any, Tag::Value(1)))
                .unwrap()
                .is_some()
            {
                return;
            }
        }
        panic!("the message was not left for another receive");
    }

    /// A shared post never takes a message on its own: it proposes, holds
    /// the message (and what came after it) until committed or withdrawn.
    #[test]
    fn a_shared_post_proposes_and_holds_until_committed() {
        let (mut a, mut b) = pair();
        let SharedStart::Posted(p) = a.post_shared(spec(Source::Any, Tag::Value(4)), 8).unwrap()
        else {
            panic!("nothing queued")
        };
        send(&mut b, 0, 4, b"first");
        send(&mut b, 0, 4, b"second");
        let got = settle(&mut a);
        assert_eq!(got.proposals.len(), 1);
        assert_eq!(got.proposals[0].0, p);
        assert_eq!(got.proposals[0].1.msg_len, 5);
        assert!(got.recvs.is_empty());
        // Held: nothing behind it is processed, not even into the queue.
        for _ in 0..100 {
            a.progress().unwrap();
        }
        assert_eq!(a.matcher.unexpected_len(), 0);
        assert!(a.iprobe(spec(Source::Any, Tag::Any)).unwrap().is_none());
        let mut buf = [0u8; 8];
        let st = a.commit(p, &mut buf).unwrap();
        assert_eq!((st.source, st.len, &buf[..5]), (1, 5, &b"first"[..]));
        // Released: the second message queues as unexpected.
        let mut st = None;
        for _ in 0..10_000 {
            st = a.iprobe(spec(Source::Any, Tag::Value(4))).unwrap();
            if st.is_some() {
                break;
            }
        }
        assert_eq!(st.map(|s| s.msg_len), Some(6));
        assert!(a.commit(p, &mut buf).is_err(), "a post commits once");
    }

    /// A withdrawn shared post's held message is matched as if the post
    /// had never been there: by the next posted receive, in order.
    #[test]
    fn a_withdrawn_shared_post_loses_nothing_and_keeps_order() {
        let (mut a, mut b) = pair();
        let SharedStart::Posted(p) = a.post_shared(spec(Source::Any, Tag::Any), 8).unwrap() else {
            panic!()
        };
        // A receive posted after the shared one.
        let RecvStart::Pending(r) = a
            .irecv(spec(Source::Rank(1), Tag::Any), vec![0; 8], None)
            .unwrap()
        else {
            panic!()
        };
        send(&mut b, 0, 1, b"one");
        send(&mut b, 0, 2, b"two");
        let got = settle(&mut a);
        assert_eq!(
            got.proposals.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![p]
        );
        a.withdraw(p).unwrap();
        let got = settle(&mut a);
        assert_eq!(got.recvs.len(), 1);
        assert_eq!(
            (got.recvs[0].0, &got.recvs[0].2[..3]),
            (r, &b"one"[..]),
            "the held message first"
        );
        let mut buf = [0u8; 8];
        let mut st = None;
        for _ in 0..10_000 {
            a.progress().unwrap();
            st = a.recv_now(spec(Source::Any, Tag::Any), &mut buf).unwrap();
            if st.is_some() {
                break;
            }
        }
        assert_eq!((st.map(|s| s.tag), &buf[..3]), (Some(2), &b"two"[..]));
        // A shared post with a match already queued proposes at once and
        // posts nothing.
        send(&mut b, 0, 3, b"three");
        for _ in 0..10_000 {
            if a.iprobe(spec(Source::Any, Tag::Any)).unwrap().is_some() {
                break;
            }
        }
        assert!(matches!(
            a.post_shared(spec(Source::Any, Tag::Any), 8).unwrap(),
            SharedStart::Proposed(RecvStatus { tag: 3, .. })
        ));
        assert_eq!(a.posts.len(), 0);
    }

    /// A connection closed without the peer's goodbye is a dead peer; the
    /// operations waiting for it fail.
    #[test]
    fn a_closed_connection_is_a_dead_peer() {
        crate::on_peer_death(crate::OnPeerDeath::Return);
        let (mut a, b) = pair();
        let SendStart::Pending(s) = a.isend(1, 5, 0, vec![1], SendMode::Synchronous).unwrap()
        else {
            panic!()
        };
        assert!(a.check_alive(Alive::Peer(1)).is_ok());
        drop(b);
        let got = settle(&mut a);
        assert_eq!(got.sends, vec![(s, false)], "the synchronous send failed");
        assert!(matches!(
            a.check_alive(Alive::Peer(1)),
            Err(Error::PeerDied { rank: 1, .. })
        ));
        assert!(a.check_alive(Alive::All).is_err());
        assert!(matches!(
            a.isend(1, 5, 0, vec![1], SendMode::Standard),
            Err(Error::PeerDied { rank: 1, .. })
        ));
    }

    #[test]
    fn a_goodbye_then_a_close_is_not_a_death() {
        let (mut a, b) = pair();
        b.finalize().unwrap();
        for _ in 0..1000 {
            a.progress().unwrap();
        }
        assert!(a.check_alive(Alive::All).is_ok());
    }

    #[test]
    fn the_switch_parses_strictly() {
        // (Through the parser the variable uses, not the environment:
        // tests run in parallel.)
        let p = |v: Option<&str>| {
            crate::device::parse_count(ENV_TEST_NODES, v.map(str::to_owned), 0)
                .map(|n| (n >= 2).then_some(n))
        };
        assert_eq!(p(None).unwrap(), None);
        assert_eq!(p(Some("1")).unwrap(), None);
        assert_eq!(p(Some("2")).unwrap(), Some(2));
        assert!(matches!(
            p(Some("two")),
            Err(Error::Config {
                var: ENV_TEST_NODES,
                ..
            })
        ));
    }

    /// Runs `f` while another thread progresses `t` (a cancel waits for
    /// its receiver's answer); `t` comes back.
    fn progressing<T>(mut t: DoubleTransport, f: impl FnOnce() -> T) -> (DoubleTransport, T) {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let stop = Arc::new(AtomicBool::new(false));
        let halt = Arc::clone(&stop);
        let h = std::thread::spawn(move || {
            while !halt.load(Ordering::Relaxed) {
                t.progress().unwrap();
                std::thread::yield_now();
            }
            t
        });
        let r = f();
        stop.store(true, Ordering::Relaxed);
        (h.join().unwrap(), r)
    }

    #[test]
    fn an_unmatched_synchronous_send_is_withdrawn_and_a_matched_one_is_not() {
        let (a, mut b) = pair();
        let SendStart::Pending(s1) = b
            .isend(0, 1, 0, b"never".to_vec(), SendMode::Synchronous)
            .unwrap()
        else {
            panic!("a synchronous send waits for the match")
        };
        let (mut a, ok) = progressing(a, || b.cancel_send(s1).unwrap());
        assert!(ok, "queued unexpected: withdrawn");
        let got = settle(&mut b);
        assert_eq!(got.sends, vec![(s1, true)], "the cancelled send completes");
        assert_eq!(a.matcher.unexpected_len(), 0, "the receiver forgot it");
        assert_eq!(a.counters.cancelled_sends, 1);
        // A receive posted afterwards does not get it.
        let RecvStart::Pending(_) = a
            .irecv(spec(Source::Rank(1), Tag::Value(1)), vec![0; 8], None)
            .unwrap()
        else {
            panic!("the withdrawn message was received")
        };
        // Matched first: the cancel fails, the acknowledgement completes it.
        let SendStart::Pending(s2) = b
            .isend(0, 1, 0, b"taken".to_vec(), SendMode::Synchronous)
            .unwrap()
        else {
            panic!("a synchronous send waits for the match")
        };
        let got = settle(&mut a);
        assert_eq!(got.recvs.len(), 1);
        assert_eq!(&got.recvs[0].2[..5], b"taken");
        let (_a, ok) = progressing(a, || b.cancel_send(s2).unwrap());
        assert!(!ok, "a matched send is not cancelled");
        let got = settle(&mut b);
        assert_eq!(got.sends, vec![(s2, true)]);
        // Unknown or complete: nothing to cancel.
        assert!(!b.cancel_send(s2).unwrap());
    }

    #[test]
    fn a_cancel_withdraws_a_message_waiting_behind_a_proposal_but_not_the_proposed_one() {
        let (mut a, mut b) = pair();
        let SharedStart::Posted(p) = a.post_shared(spec(Source::Any, Tag::Value(4)), 8).unwrap()
        else {
            panic!("nothing has arrived")
        };
        let mut ids = Vec::new();
        for m in [&b"first"[..], b"second"] {
            let SendStart::Pending(s) =
                b.isend(0, 4, 0, m.to_vec(), SendMode::Synchronous).unwrap()
            else {
                panic!("a synchronous send waits for the match")
            };
            ids.push(s);
        }
        let mut proposed = Vec::new();
        for _ in 0..10_000 {
            a.progress().unwrap();
            if a.collect() {
                let mut got = Got::default();
                a.drain(&mut got);
                proposed = got.proposals;
            }
            if !proposed.is_empty() && a.inbox.len() == 2 {
                break;
            }
        }
        assert_eq!(proposed.len(), 1, "the first message proposes");
        assert_eq!(a.inbox.len(), 2, "the second waits behind it");
        let (mut a, (first, second)) = progressing(a, || {
            (
                b.cancel_send(ids[0]).unwrap(),
                b.cancel_send(ids[1]).unwrap(),
            )
        });
        assert!(!first, "the proposed message is the device's to decide");
        assert!(second, "the one behind it is withdrawn");
        let mut buf = [0u8; 8];
        let st = a.commit(p, &mut buf).unwrap();
        assert_eq!((st.msg_len, &buf[..5]), (5, &b"first"[..]));
        assert!(a.inbox.is_empty());
        let mut done = Vec::new();
        for _ in 0..10_000 {
            done.extend(settle(&mut b).sends);
            if done.len() == 2 {
                break;
            }
        }
        done.sort_unstable();
        assert_eq!(done, vec![(ids[0], true), (ids[1], true)]);
    }
}
