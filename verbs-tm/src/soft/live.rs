//! [`Live`]: the software device over TCP.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, IoSliceMut, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, info, trace, warn};

mod conn;
mod helper;
mod poller;

pub use self::conn::WireStats;
use self::conn::{Conn, Direct, Phase};
use self::helper::{LiveWorld, Pipe, Signals, Timer, Watch};
use self::poller::{Poller, Ready, LINGER};
use super::handoff::{helper_loop, Handoff};
use super::nic::{Frame, FrameRef, Nic, NicStats, Outgoing, Rnr};
use super::wire::{self, FrameError, Wire, WireRef};
use super::SoftConfig;
use crate::config::var_size;
use crate::verbs::{
    errno, CqId, CqInitAttr, DeviceCaps, OpsWr, QpId, QpInitAttr, QpState, RecvWr, SendWr, SrqId,
    SrqInitAttr, Wc, WcStatus,
};
use crate::{Error, Mr, Provider, Result};

/// Settings of a [`Live`] device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveConfig {
    /// The device's caps and activation rule.
    pub soft: SoftConfig,
    /// The job: connections from another job are refused.
    pub job_id: u64,
    /// This process's rank (in handshakes and messages).
    pub rank: u32,
    /// The address the listener binds (`TMX_VERBS_LISTEN`).
    pub listen: SocketAddr,
    /// Once a socket is ready, how long the helper thread leaves it to the
    /// owner before it runs the device (`TMX_VERBS_HELPER_IDLE_US`).
    pub helper_idle: Duration,
    /// How long a QP may stay connecting (`TMX_VERBS_CONNECT_TIMEOUT_MS`).
    pub connect_timeout: Duration,
    /// Whether to start the helper thread (on by default).
    pub helper: bool,
    /// A READ request from the peer waits (in order with the frames after
    /// it) while its connection has at least this many bytes unsent, so
    /// that READ responses are produced as the socket takes them (4 MiB).
    pub read_backlog: usize,
}

impl LiveConfig {
    /// The defaults: [`SoftConfig::large`], listening on every address on
    /// a free port, 1 ms idle time, 30 s connect timeout, with the helper,
    /// a 4 MiB READ backlog.
    pub const fn new(job_id: u64, rank: u32) -> Self {
        LiveConfig {
            soft: SoftConfig::large(),
            job_id,
            rank,
            listen: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0),
            helper_idle: Duration::from_micros(1000),
            connect_timeout: Duration::from_secs(30),
            helper: true,
            read_backlog: READ_BACKLOG,
        }
    }

    /// [`LiveConfig::new`] with the `TMX_VERBS_*` environment variables.
    pub fn from_env(job_id: u64, rank: u32) -> Result<Self> {
        Self::from_lookup(job_id, rank, |k| std::env::var(k).ok())
    }

    /// [`LiveConfig::from_env`] with another source of variables.
    pub fn from_lookup(
        job_id: u64,
        rank: u32,
        look: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let mut c = Self::new(job_id, rank);
        c.soft = SoftConfig::from_lookup(c.soft, &look)?;
        if let Some(v) = look("TMX_VERBS_LISTEN") {
            c.listen = v.trim().parse().map_err(|_| Error::Config {
                var: "TMX_VERBS_LISTEN",
                value: v,
                reason: "expected IP:PORT",
            })?;
        }
        if let Some(us) = var_size(&look, "TMX_VERBS_HELPER_IDLE_US", 1, 60_000_000)? {
            c.helper_idle = Duration::from_micros(us);
        }
        if let Some(ms) = var_size(&look, "TMX_VERBS_CONNECT_TIMEOUT_MS", 1, 3_600_000)? {
            c.connect_timeout = Duration::from_millis(ms);
        }
        Ok(c)
    }
}

/// [`LiveConfig::read_backlog`]'s default.
const READ_BACKLOG: usize = 4 << 20;
/// Bytes asked of the socket per read, at least.
const READ_CHUNK: usize = 256 << 10;
/// READ responses at least this large are received straight into the
/// requester's memory region (no copy through the receive buffer).
const DIRECT_MIN: usize = 64 << 10;
/// SENDs of at least this many bytes are written to the socket from the
/// sender's send buffer (completing once written); smaller ones are copied
/// into the outbox with their header and complete when posted.
const IN_PLACE_SEND_MIN: usize = 4 << 10;
/// The largest inline SEND ([`Provider::post_send_inline`]) copied into
/// the outbox: below the in-place sends, whose payload is not copied at
/// all. A larger inline SEND is written through from the caller's memory
/// (only its unwritten rest copied), or declined.
const INLINE_MAX: usize = IN_PLACE_SEND_MIN - 1;

/// A QP that waits for its peer to connect.
#[derive(Debug)]
struct Expect {
    qp: QpId,
    remote_qpn: u32,
    deadline: Instant,
}

#[derive(Debug)]
struct Core {
    nic: Nic,
    cfg: LiveConfig,
    listener: TcpListener,
    addr: SocketAddr,
    conns: Vec<Conn>,
    /// Connections closed by us, kept (half closed, drained) until drop so
    /// that the peer reads our CLOSE before any reset; `true` while the
    /// socket is in the readiness set (until the peer's end of file).
    lingering: Vec<(TcpStream, bool)>,
    /// Which sockets have bytes: one `epoll_wait` per run.
    poller: Poller,
    /// The ready sockets of a run (kept for its allocation).
    ready: Vec<Ready>,
    /// The connection of each QP, by QP index (QPs are small indexes).
    qp_conn: QpConns,
    pre_out: HashMap<u32, Vec<Wire>>,
    expect: HashMap<u32, Expect>,
    hold: HashMap<u32, VecDeque<Frame>>,
    /// Bumped whenever the set of sockets changes.
    gen: u64,
    /// Protocol errors of peers, for [`Live::frame_errors`].
    frame_errors: Vec<(Option<u32>, FrameError)>,
    /// What the helper thread watches, as last published.
    published: Watch,
    sig: Arc<Signals>,
}

fn set_keepalive(s: &TcpStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = setsockopt(s, sockopt::KeepAlive, &true);
    let _ = setsockopt(s, sockopt::TcpKeepIdle, &1);
    let _ = setsockopt(s, sockopt::TcpKeepInterval, &1);
    let _ = setsockopt(s, sockopt::TcpKeepCount, &3);
}

fn prepare(s: &TcpStream) -> Result<()> {
    s.set_nodelay(true)
        .and_then(|()| s.set_nonblocking(true))
        .map_err(|e| Error::io("socket setup", e))?;
    set_keepalive(s);
    Ok(())
}

/// The address this host is reached at when the listener binds every
/// address: the source address of a route to a documentation address (no
/// packet is sent), or loopback.
fn outbound_ip() -> IpAddr {
    UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| {
            s.connect("192.0.2.1:9")?;
            s.local_addr()
        })
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified())
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

const ADDR_MAGIC: &[u8; 4] = b"TMXL";

fn encode_addr(addr: SocketAddr, job: u64, rank: u32, qpn: u32) -> Vec<u8> {
    let mut a = ADDR_MAGIC.to_vec();
    a.extend_from_slice(&job.to_le_bytes());
    a.extend_from_slice(&rank.to_le_bytes());
    a.extend_from_slice(&qpn.to_le_bytes());
    a.extend_from_slice(addr.to_string().as_bytes());
    a
}

fn decode_addr(b: &[u8]) -> Result<(SocketAddr, u64, u32, u32)> {
    let bad = |why: &str| Error::BadAddress(format!("soft-live QP address: {why}"));
    if b.len() < 20 || &b[..4] != ADDR_MAGIC {
        return Err(bad("not a soft-live address"));
    }
    let mut j = [0u8; 8];
    j.copy_from_slice(&b[4..12]);
    let u32_at = |at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    let addr = std::str::from_utf8(&b[20..])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad socket address"))?;
    Ok((addr, u64::from_le_bytes(j), u32_at(12), u32_at(16)))
}

impl Core {
    fn bump(&mut self) {
        self.gen = self.gen.wrapping_add(1);
    }

    /// A peer broke the wire protocol: recorded, and the connection fails.
    fn frame_error(&mut self, c: usize, e: FrameError) {
        let peer = self.conns[c].peer;
        warn!(?peer, error = %e, "verbs-tm soft-live: protocol error");
        self.frame_errors.push((peer, e.clone()));
        self.fail_conn(c, format!("protocol error: {e}"));
    }

    /// Registers connection `c` in the readiness set; a connection that
    /// cannot be registered fails (it would never be read).
    fn watch(&mut self, c: usize) {
        if let Err(e) = self.poller.add(&self.conns[c].stream, c as u64) {
            self.fail_conn(c, format!("cannot watch the socket: {e}"));
        }
    }

    fn fail_conn(&mut self, c: usize, reason: String) {
        if self.conns[c].dead {
            return;
        }
        self.poller.remove(&self.conns[c].stream);
        let conn = &mut self.conns[c];
        conn.dead = true;
        conn.flush_sends();
        let closed = conn.saw_close;
        if let Some(qp) = conn.qp {
            if closed {
                debug!(qp = qp.0, "verbs-tm soft-live: peer closed its QP");
                self.nic.set_qp_state(qp, QpState::Closed);
            } else {
                warn!(qp = qp.0, %reason, "verbs-tm soft-live: connection lost");
                self.nic.set_qp_state(qp, QpState::Error(reason));
            }
        }
        self.bump();
    }

    /// Binds an accepted connection whose HELLO names a QP we expect.
    fn try_bind(&mut self, c: usize) {
        let Some((rank, src, dst)) = self.conns[c].hello else {
            return;
        };
        let Some(e) = self.expect.get(&dst) else {
            return;
        };
        if e.remote_qpn != src {
            return;
        }
        let Some(e) = self.expect.remove(&dst) else {
            return;
        };
        let (job, me) = (self.cfg.job_id, self.cfg.rank);
        let conn = &mut self.conns[c];
        conn.hello = None;
        conn.qp = Some(e.qp);
        conn.phase = Phase::Bound;
        conn.push(Wire::HelloAck {
            refused: 0,
            job,
            rank: me,
            qpn: dst,
        });
        for w in self.pre_out.remove(&e.qp.0).unwrap_or_default() {
            self.conns[c].push(w);
        }
        self.qp_conn.insert(e.qp, c);
        self.nic.set_qp_state(e.qp, QpState::Ready);
        debug!(
            qp = e.qp.0,
            peer = rank,
            "verbs-tm soft-live: QP connected (accepted)"
        );
        self.bump();
    }

    /// Whether a QP of this device waits for its peer to connect. Only
    /// then is the listener asked: an `accept` that finds nothing still
    /// allocates (and frees) a socket in the kernel, which cost more than
    /// half of a busy-polling owner's time. A peer that connects before its
    /// QP is expected waits in the listen backlog until then.
    fn accepting(&self) -> bool {
        !self.expect.is_empty()
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((s, from)) => {
                    if prepare(&s).is_err() {
                        continue;
                    }
                    debug!(%from, "verbs-tm soft-live: connection accepted");
                    let deadline = Instant::now() + self.cfg.connect_timeout;
                    self.conns.push(Conn::new(s, deadline));
                    self.watch(self.conns.len() - 1);
                    self.bump();
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    warn!(error = %e, "verbs-tm soft-live: accept failed");
                    break;
                }
            }
        }
    }

    /// Reads what a connection has (one large read per pass when the
    /// socket holds less than the buffer's room) and parses its frames.
    fn read_conn(&mut self, c: usize) {
        let mut eof = None;
        loop {
            let conn = &mut self.conns[c];
            if conn.dead {
                return;
            }
            if let Some(mut d) = conn.direct {
                // The rest of the READ response straight into memory, and
                // what follows it into the receive buffer, in one call.
                let want = d.len - d.got;
                if conn.rbuf.len() < READ_CHUNK {
                    conn.rbuf.resize(READ_CHUNK, 0);
                }
                let dst = if d.ok {
                    self.nic.region_mut(d.mr, d.key, d.off + d.got, want)
                } else {
                    None
                };
                let (r, room) = match dst {
                    Some(dst) => {
                        let tail = &mut conn.rbuf[conn.rend..];
                        let room = want + tail.len();
                        let mut iov = [IoSliceMut::new(dst), IoSliceMut::new(tail)];
                        ((&conn.stream).read_vectored(&mut iov), room)
                    }
                    None => {
                        // The region went away: read and drop.
                        d.ok = false;
                        let n = want.min(conn.rbuf.len());
                        ((&conn.stream).read(&mut conn.rbuf[..n]), n)
                    }
                };
                match r {
                    Ok(0) => {
                        conn.stats.reads += 1;
                        eof = Some(
                            "connection closed by the peer without CLOSE (its process died?)"
                                .to_string(),
                        );
                        break;
                    }
                    Ok(n) => {
                        conn.stats.reads += 1;
                        conn.stats.bytes_in += n as u64;
                        let placed = n.min(want);
                        d.got += placed;
                        if d.ok {
                            // Bytes past the response landed in `rbuf`.
                            conn.rend += n - placed;
                        }
                        if d.got == d.len {
                            conn.direct = None;
                            self.nic.finish_read_placed(d.id, d.len, d.ok);
                            self.parse(c);
                        } else {
                            conn.direct = Some(d);
                        }
                        if n < room {
                            break;
                        }
                        continue;
                    }
                    Err(e) => match e.kind() {
                        ErrorKind::WouldBlock => {
                            conn.stats.empty_reads += 1;
                            break;
                        }
                        ErrorKind::Interrupted => continue,
                        _ => {
                            eof = Some(format!("connection failed: {e}"));
                            break;
                        }
                    },
                }
            }
            if conn.rbuf.len() - conn.rend < READ_CHUNK / 4 {
                if conn.rpos > 0 {
                    conn.rbuf.copy_within(conn.rpos..conn.rend, 0);
                    conn.rend -= conn.rpos;
                    conn.rpos = 0;
                }
                if conn.rbuf.len() - conn.rend < READ_CHUNK / 4 {
                    let want = conn.rend + READ_CHUNK;
                    conn.rbuf.resize(want, 0);
                }
            }
            let room = conn.rbuf.len() - conn.rend;
            let r = (&conn.stream).read(&mut conn.rbuf[conn.rend..]);
            match r {
                Ok(0) => {
                    conn.stats.reads += 1;
                    eof = Some(
                        "connection closed by the peer without CLOSE (its process died?)"
                            .to_string(),
                    );
                    break;
                }
                Ok(n) => {
                    conn.stats.reads += 1;
                    conn.stats.bytes_in += n as u64;
                    conn.rend += n;
                    self.parse(c);
                    if n < room {
                        // The socket had less than the room: it is
                        // (most likely) empty; what comes later is read
                        // in the next pass, without an EAGAIN now.
                        break;
                    }
                }
                Err(e) => match e.kind() {
                    ErrorKind::WouldBlock => {
                        conn.stats.empty_reads += 1;
                        break;
                    }
                    ErrorKind::Interrupted => {}
                    _ => {
                        eof = Some(format!("connection failed: {e}"));
                        break;
                    }
                },
            }
        }
        self.parse(c);
        if let Some(reason) = eof {
            self.fail_conn(c, reason);
        }
    }

    /// Reads the sockets that have bytes: those the readiness set reports
    /// (one `epoll_wait`), or, with at most one socket registered, that
    /// socket directly (one `read`, which finds a frame that arrived).
    fn read_ready(&mut self) {
        let mut ready = std::mem::take(&mut self.ready);
        let asked = if self.poller.watched() > 1 {
            self.poller.ready(&mut ready)
        } else {
            Err(ErrorKind::Unsupported.into())
        };
        if asked.is_err() {
            // One socket (or a set that cannot be asked): every socket.
            ready.clear();
            ready.extend((0..self.conns.len()).map(Ready::Conn));
            ready.extend((0..self.lingering.len()).map(Ready::Linger));
        }
        for &r in &ready {
            match r {
                Ready::Conn(c) if c < self.conns.len() => self.read_conn(c),
                Ready::Linger(i) => self.drain_lingering(i),
                Ready::Conn(_) => {}
            }
        }
        self.ready = ready;
    }

    /// Reads and drops what a lingering socket has; at the peer's end of
    /// file (or an error) it leaves the readiness set.
    fn drain_lingering(&mut self, i: usize) {
        let Some((s, watched)) = self.lingering.get_mut(i) else {
            return;
        };
        if !*watched {
            return;
        }
        let mut sink = [0u8; 4096];
        loop {
            match (&*s).read(&mut sink) {
                Ok(n) if n > 0 => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                _ => break,
            }
        }
        *watched = false;
        self.poller.remove(&*s);
    }

    /// Whether frames of `qp` wait (RNR or READ backlog): later frames of
    /// the QP queue behind them.
    fn held(&self, qp: QpId) -> bool {
        self.hold.get(&qp.0).is_some_and(|q| !q.is_empty())
    }

    /// Hands the device a frame that borrows nothing from a connection (a
    /// held frame, a READ request); `Err(Rnr)` if it must wait.
    fn deliver(&mut self, qp: QpId, f: FrameRef<'_>) -> core::result::Result<(), Rnr> {
        if let FrameRef::ReadReq { .. } = f {
            let limit = self.cfg.read_backlog;
            let conn = self.qp_conn.get(qp).and_then(|c| self.conns.get_mut(c));
            if let Some(conn) = conn.filter(|c| c.out_bytes >= limit) {
                conn.stats.read_waits += 1;
                return Err(Rnr);
            }
            self.nic.receive(qp, f)?;
            // The response goes to the outbox now, so that the next READ
            // request sees it in the backlog.
            self.route();
            return Ok(());
        }
        self.nic.receive(qp, f)
    }

    /// Parses the frames received on a connection, in place: device
    /// frames go to the device straight from the receive buffer (one copy,
    /// into the memory they land in), unless they must wait.
    fn parse(&mut self, c: usize) {
        loop {
            let conn = &mut self.conns[c];
            if conn.dead || conn.hello.is_some() || conn.direct.is_some() {
                break;
            }
            let avail = conn.rend - conn.rpos;
            if avail < wire::HDR {
                break;
            }
            let start = conn.rpos;
            // The caps, from the header alone: nothing is buffered for an
            // oversized frame.
            let plen = match wire::check_header(&conn.rbuf[start..]) {
                Ok(n) => n,
                Err(e) => {
                    self.frame_error(c, e);
                    return;
                }
            };
            if let (Some((id, _)), Some(qp)) =
                (wire::read_resp_header(&conn.rbuf[start..]), conn.qp)
            {
                // A READ response is at most what its READ asked for (and
                // only an answer to a READ that waits has any data), unless
                // the QP left the ready state (the device drops it then).
                let max = self.nic.read_len(id).unwrap_or(0);
                if plen > max && self.nic.qp_state(qp) == QpState::Ready {
                    let e = FrameError::TooLarge {
                        kind: "READ_RESP",
                        len: plen,
                        max,
                    };
                    self.frame_error(c, e);
                    return;
                }
            }
            let end = start + wire::HDR + plen;
            if plen >= DIRECT_MIN && conn.direct.is_none() {
                if let (Some((id, WcStatus::SUCCESS)), Some(qp)) =
                    (wire::read_resp_header(&conn.rbuf[start..]), conn.qp)
                {
                    let held = self.hold.get(&qp.0).is_some_and(|q| !q.is_empty());
                    if let Some((mr, key, off)) = self.nic.read_target(id, plen).filter(|_| !held) {
                        // Straight into memory: what is here, then the
                        // rest from the socket.
                        let have = (avail - wire::HDR).min(plen);
                        let from = start + wire::HDR;
                        let ok = match self.nic.region_mut(mr, key, off, have) {
                            Some(dst) => {
                                dst.copy_from_slice(&conn.rbuf[from..from + have]);
                                true
                            }
                            None => false,
                        };
                        conn.stats.frames_in += 1;
                        conn.stats.direct += 1;
                        conn.rpos = from + have;
                        if have == plen {
                            self.nic.finish_read_placed(id, plen, ok);
                        } else {
                            conn.direct = Some(Direct {
                                id,
                                mr,
                                key,
                                off,
                                len: plen,
                                got: have,
                                ok,
                            });
                        }
                        continue;
                    }
                }
            }
            if avail < wire::HDR + plen {
                // Make room for the whole frame at once.
                let need = wire::HDR + plen;
                if conn.rbuf.len() - start < need {
                    conn.rbuf.copy_within(start..conn.rend, 0);
                    conn.rend -= start;
                    conn.rpos = 0;
                    if conn.rbuf.len() < need {
                        conn.rbuf.resize(need, 0);
                    }
                }
                break;
            }
            conn.stats.frames_in += 1;
            let qp = conn.qp;
            match (wire::decode(&conn.rbuf[start..end]), qp) {
                (Ok(WireRef::Dev(FrameRef::ReadReq { id, va, rkey, len })), Some(qp)) => {
                    conn.rpos = end;
                    let f = FrameRef::ReadReq { id, va, rkey, len };
                    if self.held(qp) || self.deliver(qp, f).is_err() {
                        self.hold.entry(qp.0).or_default().push_back(f.to_owned());
                    }
                }
                (Ok(WireRef::Dev(f)), Some(qp)) => {
                    let held = self.hold.get(&qp.0).is_some_and(|q| !q.is_empty());
                    if held || self.nic.receive(qp, f).is_err() {
                        self.hold.entry(qp.0).or_default().push_back(f.to_owned());
                    }
                    conn.rpos = end;
                }
                (Ok(w), _) => {
                    let w = w.to_owned();
                    conn.rpos = end;
                    self.on_wire(c, w);
                }
                (Err(e), _) => {
                    self.frame_error(c, e);
                    return;
                }
            }
        }
        let conn = &mut self.conns[c];
        if conn.rpos == conn.rend {
            conn.rpos = 0;
            conn.rend = 0;
        }
    }

    fn on_wire(&mut self, c: usize, w: Wire) {
        let (job, me) = (self.cfg.job_id, self.cfg.rank);
        match (w, self.conns[c].qp) {
            (
                Wire::Hello {
                    job: j,
                    rank,
                    src_qpn,
                    dst_qpn,
                    version,
                },
                None,
            ) => {
                if j != job || version != wire::VERSION {
                    let conn = &mut self.conns[c];
                    conn.push(Wire::HelloAck {
                        refused: 1,
                        job,
                        rank: me,
                        qpn: dst_qpn,
                    });
                    let _ = conn.flush(&self.nic);
                    self.fail_conn(
                        c,
                        format!("handshake from job {j:#x} version {version} refused"),
                    );
                    return;
                }
                self.conns[c].hello = Some((rank, src_qpn, dst_qpn));
                self.conns[c].peer = Some(rank);
                self.try_bind(c);
            }
            (Wire::HelloAck { refused, qpn, .. }, Some(qp)) => {
                if refused != 0 {
                    self.fail_conn(
                        c,
                        format!("the peer refused the connection to its QP {qpn}"),
                    );
                } else {
                    self.conns[c].phase = Phase::Bound;
                    self.nic.set_qp_state(qp, QpState::Ready);
                    debug!(qp = qp.0, "verbs-tm soft-live: QP connected");
                }
            }
            (Wire::Close, _) => self.conns[c].saw_close = true,
            (other, _) => {
                let what = format!("protocol error: unexpected {other:?}");
                self.fail_conn(c, what);
            }
        }
    }

    /// Moves the device's frames to their connections' outboxes.
    fn route(&mut self) {
        while let Some((qp, o)) = self.nic.take_out_ref() {
            match (self.qp_conn.get(qp), o) {
                (Some(c), o) if self.conns[c].dead => {
                    if let Outgoing::Send {
                        done: Some((cq, wc)),
                        ..
                    } = o
                    {
                        let st = WcStatus::WR_FLUSH_ERR;
                        self.nic.complete_send(qp, cq, wc, st);
                    }
                }
                (Some(c), Outgoing::Frame(f)) => self.conns[c].push(Wire::Dev(f)),
                (Some(c), Outgoing::Send { imm, data, done }) => {
                    self.conns[c].push_send(imm, data, done);
                }
                (Some(c), Outgoing::ReadResp { id, data }) => {
                    self.conns[c].push_read_resp(id, data, &self.nic);
                }
                (None, o) => {
                    let f = self.nic.own(o);
                    self.pre_out.entry(qp.0).or_default().push(Wire::Dev(f));
                }
            }
        }
    }

    /// Copies the queued READ responses that refer to region `mr` out of
    /// it, before it is deregistered (a connection where that fails is
    /// failed: it could not send them). Dead connections are never written
    /// again: their outboxes are left as they are.
    fn own_region(&mut self, mr: &Mr) {
        self.route();
        for c in 0..self.conns.len() {
            if self.conns[c].dead {
                continue;
            }
            let (conn, nic) = (&mut self.conns[c], &mut self.nic);
            if let Err(e) = conn.own_region(mr.id(), mr.lkey(), nic) {
                self.fail_conn(c, e.to_string());
            }
        }
    }

    /// Moves the device's frames to their connections and writes.
    fn route_and_flush(&mut self) {
        self.route();
        for c in 0..self.conns.len() {
            self.flush_conn(c);
        }
        self.publish();
    }

    /// Writes connection `c`'s outbox (as much as the socket takes), gives
    /// the written payload buffers back to the device and completes the
    /// in-place SENDs that left.
    fn flush_conn(&mut self, c: usize) {
        if !self.conns[c].dead && !self.conns[c].out.is_empty() {
            if let Err(e) = self.conns[c].flush(&self.nic) {
                self.fail_conn(c, format!("send failed: {e}"));
            }
        }
        for v in self.conns[c].written.drain(..) {
            self.nic.recycle(v);
        }
        if !self.conns[c].sent.is_empty() {
            let conn = &mut self.conns[c];
            let qp = conn.qp;
            for (cq, wc, st) in conn.sent.drain(..) {
                if let Some(qp) = qp {
                    self.nic.complete_send(qp, cq, wc, st);
                }
            }
        }
    }

    /// An inline SEND ([`Provider::post_send_inline`]): its frame is copied
    /// straight into the connection's outbox, behind what the device
    /// queued before it, and written at once. `false` (nothing done) unless
    /// the QP is ready on a live connection.
    ///
    /// A frame over [`INLINE_MAX`] is written from `parts` themselves, and
    /// only when nothing waits before it (else `false`: the caller's send
    /// buffer path keeps it in order and bounded); a short write copies
    /// the rest into the outbox.
    fn send_inline(&mut self, qp: QpId, parts: &[&[u8]], len: usize) -> bool {
        if !self.nic.qp_ready(qp) {
            return false;
        }
        let Some(c) = self.qp_conn.get(qp) else {
            return false;
        };
        if self.conns[c].dead {
            return false;
        }
        if len > INLINE_MAX {
            if self.nic.has_out() || !self.conns[c].out.is_empty() {
                return false;
            }
            if let Err(e) = self.conns[c].write_through(parts, len) {
                self.fail_conn(c, format!("send failed: {e}"));
            }
            if !self.conns[c].out.is_empty() || self.published.out != 0 {
                self.publish();
            }
            return true;
        }
        // What was posted before it goes first (then every outbox with
        // something routed to it is written, as after any post).
        let routed = self.nic.has_out();
        if routed {
            self.route();
        }
        self.conns[c].push_inline(parts, len);
        trace!(qp = qp.0, len, "verbs-tm soft-live: inline SEND");
        if routed {
            self.route_and_flush();
            return true;
        }
        self.flush_conn(c);
        // The helper watches output left in an outbox; nothing to tell it
        // when this one emptied and none was watched.
        if !self.conns[c].out.is_empty() || self.published.out != 0 {
            self.publish();
        }
        true
    }

    /// Runs the device once: accept, read, deliver, execute list
    /// operations, complete data, send.
    fn step(&mut self) {
        if self.accepting() {
            self.accept();
        }
        // Frames held first (they precede what the sockets have).
        if self.hold.values().any(|q| !q.is_empty()) {
            // A flush first: a READ held for the backlog may go now.
            self.route_and_flush();
            let mut qps: Vec<u32> = self
                .hold
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            qps.sort_unstable();
            for qp in qps {
                while let Some(f) = self.hold.get_mut(&qp).and_then(VecDeque::pop_front) {
                    if self.deliver(QpId(qp), f.as_ref()).is_err() {
                        if let Some(q) = self.hold.get_mut(&qp) {
                            q.push_front(f);
                        }
                        break;
                    }
                }
            }
        }
        // The list operations posted since the last run before the
        // arrivals: a receive posted before its message came in is in the
        // tag list when the message is delivered (executed after them, it
        // would find it unexpected: a software match, a SYNC and a DEL of
        // the posted buffer).
        self.nic.exec_all_ops();
        self.read_ready();
        self.nic.exec_all_ops();
        self.nic.complete_data(usize::MAX);
        // Publishes what the helper watches.
        self.route_and_flush();
        // Connect deadlines: no clock read, and nothing more to publish,
        // unless a QP waits for its peer or a handshake for its answer
        // (an established job's run ends here).
        let waiting = !self.expect.is_empty()
            || self
                .conns
                .iter()
                .any(|c| matches!(c.phase, Phase::Handshake { .. }));
        if !waiting {
            return;
        }
        let now = Instant::now();
        let late: Vec<u32> = self
            .expect
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in late {
            if let Some(e) = self.expect.remove(&k) {
                self.nic.set_qp_state(
                    e.qp,
                    QpState::Error("connect timeout: the peer never connected".into()),
                );
            }
        }
        for c in 0..self.conns.len() {
            if let Phase::Handshake { deadline } = self.conns[c].phase {
                if deadline <= now && !self.conns[c].dead && self.conns[c].qp.is_some() {
                    self.fail_conn(c, "connect timeout: no handshake answer".into());
                }
            }
        }
        self.publish();
    }
}

/// The connection index of each QP, indexed by the QP's index: a lookup
/// per send and per arrival, without hashing.
#[derive(Debug, Default)]
struct QpConns(Vec<Option<usize>>);

impl QpConns {
    fn get(&self, qp: QpId) -> Option<usize> {
        self.0.get(qp.0 as usize).copied().flatten()
    }

    fn insert(&mut self, qp: QpId, c: usize) {
        let i = qp.0 as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, None);
        }
        self.0[i] = Some(c);
    }

    fn remove(&mut self, qp: QpId) -> Option<usize> {
        self.0.get_mut(qp.0 as usize).and_then(Option::take)
    }
}

#[derive(Debug)]
struct Shared {
    core: Mutex<Core>,
    handoff: Handoff,
    sig: Arc<Signals>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic under the lock (a bug) leaves a device in a consistent
        // state between two steps: keep using it.
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The software device over TCP.
///
/// Each RC QP is one TCP connection carrying the frames of
/// the wire (a 24-byte header, then a payload): SEND / SEND_IMM, READ_REQ / READ_RESP, and a handshake
/// (`HELLO` with the job id, the rank and both QP numbers; `HELLO_ACK`)
/// and an orderly `CLOSE`. Of the two ends of a QP pair, the one with the
/// smaller `(address, QPN)` connects; the other accepts on its listener.
/// Everything is nonblocking: sends that do not fit the socket wait in the
/// connection's outbox.
///
/// Costs per message: one frame (a message is one SEND; there are no
/// acknowledgement frames: a SEND under 4 KiB completes when it is posted,
/// its bytes copied into the outbox with its header; a larger one is
/// written from the sender's region and completes once written; TCP
/// delivers it or the connection fails); one `writev` per pass carries
/// every frame queued on a connection; one `read` per pass
/// takes what the socket has into a per-connection buffer (256 KiB and up)
/// whose frames are parsed and delivered in place, so the payload is
/// copied once, into the memory it lands in. A READ response of 64 KiB or
/// more is read from the socket straight into the requester's memory
/// region, in one frame for the whole READ; the responder writes it to the
/// socket from its region (a large response is a `writev` entry into the
/// region, kept until the socket took it; a region deregistered meanwhile
/// is copied out first), and answers a READ request only while
/// fewer than [`LiveConfig::read_backlog`] bytes wait to be sent on that
/// connection. [`Live::wire_stats`] counts frames, bytes and calls.
///
/// The device runs in the owner's [`Provider::poll_cq`] (which never blocks:
/// if the helper thread holds the device it returns no completion), and in
/// the helper thread when a socket is ready and the owner has not called
/// into the device (any call but queries) for `TMX_VERBS_HELPER_IDLE_US`
/// since (see [`super::Handoff`]). The helper blocks in poll(2) without a
/// timer: what it watches is published by the device in atomics, and the
/// device signals it only when it must watch more. While the owner calls
/// in, the device lock is uncontended: the owner's poll is one `try_lock`,
/// no system call.
///
/// While the owner computes, the helper thread serves READs and sends FINs;
/// messages that arrive for the owner (FINs of its rendezvous sends,
/// unexpected messages) wait in its untagged buffers (`TMX_VERBS_SRQ_WQES`)
/// until it polls. Once they are all used, later frames on that connection
/// wait for the owner as well (the RC rule: nothing overtakes a SEND the
/// receiver has no buffer for).
///
/// A connection that ends without `CLOSE` (the peer's process died: its
/// kernel closed the socket) or fails puts its QP in the error state at
/// once; a host that goes silent is detected by TCP keepalive (probes after
/// 1 s idle, 1 s apart, 3 of them).
#[derive(Debug)]
pub struct Live {
    shared: Arc<Shared>,
    helper: Option<JoinHandle<()>>,
}

impl Live {
    /// Opens a device: binds the listener and starts the helper thread.
    pub fn new(cfg: LiveConfig) -> Result<Self> {
        let listener = TcpListener::bind(cfg.listen).map_err(|e| Error::io("listen", e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| Error::io("listen", e))?;
        let local = listener.local_addr().map_err(|e| Error::io("listen", e))?;
        let ip = if local.ip().is_unspecified() {
            outbound_ip()
        } else {
            local.ip()
        };
        let addr = SocketAddr::new(ip, local.port());
        let sig = Arc::new(Signals {
            gen: AtomicU64::new(0),
            out: AtomicU64::new(0),
            accepting: AtomicBool::new(false),
            deadline: AtomicU64::new(u64::MAX),
            base: Instant::now(),
            watching: AtomicU64::new(u64::MAX),
            wake: Pipe::new().map_err(|e| Error::io("wake-up pipe", e))?,
            helper_wakes: AtomicU64::new(0),
            helper_steps: AtomicU64::new(0),
            timer: Timer::new(cfg.helper_idle).map_err(|e| Error::io("helper timer", e))?,
            kicked: AtomicBool::new(false),
        });
        let mut nic = Nic::new(cfg.soft);
        nic.set_in_place_reads(true);
        nic.set_in_place_sends(Some(IN_PLACE_SEND_MIN));
        let core = Core {
            nic,
            cfg,
            listener,
            addr,
            conns: Vec::new(),
            lingering: Vec::new(),
            poller: Poller::new().map_err(|e| Error::io("epoll set", e))?,
            ready: Vec::new(),
            qp_conn: QpConns::default(),
            pre_out: HashMap::new(),
            expect: HashMap::new(),
            hold: HashMap::new(),
            gen: 0,
            frame_errors: Vec::new(),
            published: Watch {
                gen: 0,
                out: 0,
                accepting: false,
                deadline: u64::MAX,
            },
            sig: Arc::clone(&sig),
        };
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            handoff: Handoff::new(),
            sig,
        });
        let helper = if cfg.helper {
            let mut world = LiveWorld {
                shared: Arc::clone(&shared),
                idle: cfg.helper_idle,
                gen: None,
                socks: Vec::new(),
                listener: None,
            };
            let h = std::thread::Builder::new()
                .name(format!("tmx-verbs-helper-{}", cfg.rank))
                .spawn(move || {
                    let s = Arc::clone(&world.shared);
                    helper_loop(&s.handoff, &mut world);
                })
                .map_err(|e| Error::io("helper thread", e))?;
            Some(h)
        } else {
            None
        };
        info!(%addr, rank = cfg.rank, "verbs-tm soft-live: device open");
        Ok(Live { shared, helper })
    }

    /// The address peers connect to.
    pub fn listen_addr(&self) -> SocketAddr {
        self.shared.lock().addr
    }

    /// Protocol errors of peers since the last call (each failed its
    /// connection): the peer's rank when its handshake had named it, and
    /// what was wrong (an oversized frame, an unknown kind, ...).
    pub fn frame_errors(&self) -> Vec<(Option<u32>, FrameError)> {
        std::mem::take(&mut self.shared.lock().frame_errors)
    }

    /// Misuse recorded since the last call.
    pub fn misuse(&self) -> Vec<String> {
        self.shared.lock().nic.take_misuse()
    }

    /// Device counters.
    pub fn stats(&self) -> NicStats {
        self.shared.lock().nic.stats()
    }

    /// Counters of the connections (open and closed since the device
    /// opened): frames and bytes each way, `writev` and `read` calls.
    pub fn wire_stats(&self) -> WireStats {
        let core = self.shared.lock();
        let mut w = WireStats::default();
        for c in &core.conns {
            w.add(&c.stats);
        }
        w.polls = core.poller.waits;
        w.helper_wakes = self.shared.sig.helper_wakes.load(Ordering::Relaxed);
        w.helper_steps = self.shared.sig.helper_steps.load(Ordering::Relaxed);
        w
    }

    /// Bytes and frames written to the connections' outboxes and not yet
    /// taken by the sockets.
    pub fn unsent(&self) -> usize {
        let core = self.shared.lock();
        core.conns.iter().map(|c| c.out.len()).sum::<usize>()
            + core.pre_out.values().map(Vec::len).sum::<usize>()
    }

    /// Runs the device once, as the owner (what `poll_cq` does first).
    pub fn step(&self) {
        self.owner().step();
    }

    /// The device, for the owner: every call of the owner counts as a
    /// poll of the hand-off (the owner is not computing), so the helper
    /// thread stays out of its way (no lock contention while it calls in).
    fn owner(&self) -> MutexGuard<'_, Core> {
        self.shared.handoff.owner_enter();
        self.shared.sig.timer.owner_called(self.shared.sig.base);
        self.shared.lock()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Nic) -> T) -> T {
        let mut core = self.owner();
        let r = f(&mut core.nic);
        core.route_and_flush();
        r
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.shared.handoff.stop_and_wake(&self.shared.sig.wake);
        if let Some(h) = self.helper.take() {
            let _ = h.join();
        }
    }
}

impl Provider for Live {
    fn name(&self) -> &str {
        "soft-live"
    }

    fn query_device(&self) -> Result<DeviceCaps> {
        Ok(self.shared.lock().nic.caps())
    }

    fn create_cq(&mut self, attr: &CqInitAttr) -> Result<CqId> {
        self.with(|n| n.create_cq(attr))
    }

    fn destroy_cq(&mut self, cq: CqId) -> Result<()> {
        self.with(|n| n.destroy_cq(cq))
    }

    fn create_srq(&mut self, attr: &mut SrqInitAttr) -> Result<SrqId> {
        self.with(|n| n.create_srq(attr))
    }

    fn destroy_srq(&mut self, srq: SrqId) -> Result<()> {
        self.with(|n| n.destroy_srq(srq))
    }

    fn post_srq_ops(&mut self, srq: SrqId, wrs: &mut [OpsWr<'_>]) -> Result<()> {
        // Queued for the next run; nothing for the wire.
        self.owner().nic.post_srq_ops(srq, wrs)
    }

    fn post_srq_recv(&mut self, srq: SrqId, wr: &RecvWr<'_>) -> Result<()> {
        // A buffer for the next run; nothing for the wire.
        self.owner().nic.post_srq_recv(srq, wr)
    }

    fn create_qp(&mut self, attr: &QpInitAttr) -> Result<QpId> {
        self.with(|n| n.create_qp(attr))
    }

    fn destroy_qp(&mut self, qp: QpId) -> Result<()> {
        let mut core = self.owner();
        if let Some(c) = core.qp_conn.remove(qp) {
            let core = &mut *core;
            let (conn, nic) = (&mut core.conns[c], &core.nic);
            if !conn.dead {
                conn.push(Wire::Close);
                // Best effort, bounded: the CLOSE should reach the peer.
                let until = Instant::now() + Duration::from_secs(2);
                while !conn.out.is_empty() && Instant::now() < until {
                    if conn.flush(nic).is_err() {
                        break;
                    }
                    if !conn.out.is_empty() {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
                conn.dead = true;
                let _ = conn.stream.shutdown(std::net::Shutdown::Write);
                let lingering = conn.stream.try_clone();
                let core = &mut *core;
                core.poller.remove(&core.conns[c].stream);
                if let Ok(s) = lingering {
                    let token = LINGER | core.lingering.len() as u64;
                    let watched = core.poller.add(&s, token).is_ok();
                    core.lingering.push((s, watched));
                }
            }
            core.bump();
        }
        core.expect.retain(|_, e| e.qp != qp);
        core.pre_out.remove(&qp.0);
        core.hold.remove(&qp.0);
        let r = core.nic.destroy_qp(qp);
        core.publish();
        r
    }

    fn qp_num(&self, qp: QpId) -> Result<u32> {
        self.shared.lock().nic.qp_num(qp)
    }

    fn local_address(&self, qp: QpId) -> Result<Vec<u8>> {
        let core = self.shared.lock();
        let qpn = core.nic.qp_num(qp)?;
        Ok(encode_addr(core.addr, core.cfg.job_id, core.cfg.rank, qpn))
    }

    fn connect(&mut self, qp: QpId, remote: &[u8]) -> Result<()> {
        let (raddr, job, rrank, rqpn) = decode_addr(remote)?;
        let mut core = self.owner();
        if job != core.cfg.job_id {
            return Err(Error::BadAddress(format!(
                "address of job {job:#x}, this is job {:#x}",
                core.cfg.job_id
            )));
        }
        if core.nic.qp_state(qp) != QpState::Reset {
            return Err(Error::verbs("ibv_modify_qp", errno::EINVAL));
        }
        let qpn = core.nic.qp_num(qp)?;
        core.nic.set_qp_state(qp, QpState::Connecting);
        let deadline = Instant::now() + core.cfg.connect_timeout;
        let initiator = (core.addr.to_string(), qpn) < (raddr.to_string(), rqpn);
        if initiator {
            let t = core.cfg.connect_timeout.min(Duration::from_secs(10));
            let s = match TcpStream::connect_timeout(&raddr, t) {
                Ok(s) => s,
                Err(e) => {
                    let why = format!("cannot connect to {raddr}: {e}");
                    core.nic.set_qp_state(qp, QpState::Error(why.clone()));
                    return Err(Error::Io {
                        what: "connect",
                        message: why,
                    });
                }
            };
            prepare(&s)?;
            let mut conn = Conn::new(s, deadline);
            conn.qp = Some(qp);
            conn.peer = Some(rrank);
            conn.push(Wire::Hello {
                job,
                rank: core.cfg.rank,
                src_qpn: qpn,
                dst_qpn: rqpn,
                version: wire::VERSION,
            });
            for w in core.pre_out.remove(&qp.0).unwrap_or_default() {
                conn.push(w);
            }
            core.conns.push(conn);
            let c = core.conns.len() - 1;
            core.watch(c);
            core.qp_conn.insert(qp, c);
            core.bump();
            debug!(qp = qp.0, peer = rrank, %raddr, "verbs-tm soft-live: connecting");
        } else {
            core.expect.insert(
                qpn,
                Expect {
                    qp,
                    remote_qpn: rqpn,
                    deadline,
                },
            );
            // The peer may have connected already.
            for c in 0..core.conns.len() {
                if core.conns[c].hello.is_some() {
                    core.try_bind(c);
                    core.parse(c);
                }
            }
        }
        core.route_and_flush();
        Ok(())
    }

    fn qp_state(&self, qp: QpId) -> QpState {
        self.shared.lock().nic.qp_state(qp)
    }

    fn post_send(&mut self, qp: QpId, wr: &SendWr<'_>) -> Result<()> {
        self.with(|n| n.post_send(qp, wr))
    }

    /// Payloads under 4 KiB (`INLINE_MAX`) are copied into the
    /// connection's outbox with their frame header and written at once,
    /// under one device lock; larger ones are written from `parts` when
    /// nothing is queued before them on the connection (declined
    /// otherwise), the unwritten rest of a short write copied.
    fn post_send_inline(&mut self, qp: QpId, parts: &[&[u8]]) -> Result<bool> {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        Ok(self.owner().send_inline(qp, parts, len))
    }

    fn reg_mr(&mut self, buf: Vec<u8>, access: u32) -> core::result::Result<Mr, (Error, Vec<u8>)> {
        self.owner().nic.reg_mr(buf, access)
    }

    fn dereg_mr(&mut self, mr: Mr) -> Result<Vec<u8>> {
        let mut core = self.owner();
        core.own_region(&mr);
        core.nic.dereg_mr(mr)
    }

    fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.owner().nic.mr_read(mr, offset, dst)
    }

    fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> Result<()> {
        self.owner().nic.mr_write(mr, offset, src)
    }

    fn poll_cq(&mut self, cq: CqId, out: &mut Vec<Wc>, max: usize) -> Result<usize> {
        self.shared.handoff.owner_enter();
        self.shared.sig.timer.owner_called(self.shared.sig.base);
        let mut core = match self.shared.core.try_lock() {
            Ok(g) => g,
            // The helper runs the device right now: nothing to report yet.
            Err(TryLockError::WouldBlock) => return Ok(0),
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
        };
        core.step();
        let n = core.nic.poll_cq(cq, out, max)?;
        if n > 0 {
            self.shared.sig.owner_took();
        }
        Ok(n)
    }
}
