//! The `tmrun` runtime: start N local ranks, serve PMI-1/PMI-2 on per-rank
//! socketpairs, forward output, and tear the job down on the first failure.
//!
//! One thread per rank reads its PMI socket (cut by [`Framer`]), one per output
//! stream forwards lines, one waits for the process; all report to a single
//! event loop that owns the [`Server`] state machine, so PMI handling is
//! sequential and needs no locks.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;
use tracing::{debug, info, warn};

use crate::client::ENV_JOB_ID;
use crate::error::{Error, Result};
use crate::job;
use crate::mapping::{format_blocks, Block};
use crate::server::{Server, ServerConfig, ServerEvent};
use crate::wire::Framer;

/// Exit status when the job ran past `--timeout` / `MPIEXEC_TIMEOUT`.
pub const EXIT_TIMEOUT: i32 = 124;
/// Exit status when the program could not be started.
pub const EXIT_CANNOT_START: i32 = 127;
/// Exit status for a command-line error.
pub const EXIT_USAGE: i32 = 2;
/// Exit status when a rank broke the PMI protocol beyond repair, or `tmrun` failed.
pub const EXIT_LAUNCHER_ERROR: i32 = 255;
/// Exit status when a rank that spoke PMI exited 0 (or closed PMI) without finalize.
pub const EXIT_NO_FINALIZE: i32 = 1;
/// Exit status of a rank that ends because a peer process died (`adi` exits
/// with it when the transport finds a peer gone); `tmrun` then looks for
/// the peer's own death before it names a cause.
pub const EXIT_PEER_DIED: i32 = 250;

/// Default time between SIGTERM and SIGKILL during a teardown.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_millis(1000);

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Number of ranks (≥ 1).
    pub nprocs: usize,
    /// Program started for every rank.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment (`--env K=V`); PMI variables set by the launcher win.
    pub env: Vec<(String, String)>,
    /// Prefix every output line with `[rank] `.
    pub tag_output: bool,
    /// End the job after this long.
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL during a teardown.
    pub kill_grace: Duration,
    /// Turn SIGINT/SIGTERM/SIGHUP sent to the launcher into a job teardown
    /// (blocks those signals in the calling thread; meant for the `tmrun` binary).
    pub handle_signals: bool,
    /// Job id; `None` generates one ([`job::new_job_id`]).
    pub job_id: Option<String>,
    /// Hosts for a multi-host job; empty means every rank runs here.
    pub hosts: Vec<crate::remote::Host>,
    /// Ranks per host (multi-host jobs); `None` spreads `nprocs` evenly.
    pub ppn: Option<usize>,
    /// Remote-start command template for [`crate::remote::HostKind::Command`] hosts.
    pub launcher: String,
    /// Address the proxies and remote ranks connect back to.
    pub server_addr: String,
    /// Pin each local rank to one CPU (`--bind-to core`).
    pub bind: Bind,
}

/// Process binding of local ranks (`tmrun --bind-to`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Bind {
    /// No binding: the kernel places ranks (the default).
    #[default]
    None,
    /// Local rank `i` runs only on the `i mod n`-th of the `n` CPUs `tmrun`
    /// itself may use (as Hydra's `-bind-to core` on a machine without SMT).
    Core,
}

impl Bind {
    /// Parses `core` or `none`.
    pub fn parse(s: &str) -> Option<Bind> {
        match s {
            "core" => Some(Bind::Core),
            "none" => Some(Bind::None),
            _ => None,
        }
    }
}

/// The CPU local rank `rank` is bound to under [`Bind::Core`]: the
/// `rank mod n`-th CPU of this process's affinity mask.
fn core_for(rank: usize) -> Result<nix::sched::CpuSet> {
    use nix::sched::{sched_getaffinity, CpuSet};
    let allowed = sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(|e| Error::sys("reading the CPU affinity mask", e))?;
    let cpus: Vec<usize> = (0..CpuSet::count())
        .filter(|&c| allowed.is_set(c).unwrap_or(false))
        .collect();
    let mut set = CpuSet::new();
    if let Some(&c) = cpus.get(rank % cpus.len().max(1)) {
        set.set(c)
            .map_err(|e| Error::sys("building a CPU set", e))?;
    } else {
        return Ok(allowed);
    }
    Ok(set)
}

impl JobSpec {
    /// A spec with defaults: no tags, no timeout, the default grace, no signal handling.
    pub fn new(nprocs: usize, program: impl Into<String>, args: Vec<String>) -> Self {
        JobSpec {
            nprocs,
            program: program.into(),
            args,
            env: Vec::new(),
            tag_output: false,
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            handle_signals: false,
            job_id: None,
            hosts: Vec::new(),
            ppn: None,
            launcher: crate::remote::DEFAULT_LAUNCHER.to_string(),
            server_addr: crate::remote::DEFAULT_SERVER_ADDR.to_string(),
            bind: Bind::None,
        }
    }
}

/// Why a job was torn down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// A rank exited non-zero before finalize.
    Exited {
        /// Its exit code.
        code: i32,
    },
    /// A rank was killed by a signal before finalize.
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// A rank called PMI abort.
    Aborted {
        /// The requested exit code.
        code: i32,
        /// Its message, if any.
        message: Option<String>,
    },
    /// A rank that spoke PMI exited 0 without finalize.
    NoFinalize,
    /// A rank exited with status 0 without ever speaking PMI while other
    /// ranks wait for it in a PMI barrier, which can then never complete.
    ExitedBeforeInit,
    /// A rank that spoke PMI closed its PMI connection before finalize and kept running.
    Disconnected,
    /// A rank's PMI byte stream could not be framed.
    Protocol {
        /// What was wrong.
        reason: String,
    },
    /// The job ran past its time limit.
    Timeout {
        /// The limit.
        after: Duration,
    },
    /// A host's proxy could not be started or lost contact.
    HostLost {
        /// The host.
        host: String,
        /// What happened.
        reason: String,
    },
    /// The launcher itself received a signal.
    Interrupted {
        /// The signal number.
        signal: i32,
    },
}

/// The first failure of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The rank that failed (none for timeouts and signals to the launcher).
    pub rank: Option<usize>,
    /// Its pid.
    pub pid: Option<u32>,
    /// What happened.
    pub cause: Cause,
}

fn signal_name(sig: i32) -> &'static str {
    Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?")
}

impl Failure {
    /// The launcher's exit status for this failure (see the crate README):
    /// exit code as is, 128+N for signal N, the abort code (low 8 bits),
    /// 124 for a timeout, 1 for a missing finalize (or a rank that exited 0
    /// before PMI init while others wait for it), 255 for a protocol breach
    /// (including a client that does not read its replies).
    pub fn exit_code(&self) -> i32 {
        match &self.cause {
            Cause::Exited { code } => *code & 0xff,
            Cause::Signaled { signal } | Cause::Interrupted { signal } => 128 + signal,
            Cause::Aborted { code, .. } => *code & 0xff,
            Cause::NoFinalize | Cause::Disconnected | Cause::ExitedBeforeInit => EXIT_NO_FINALIZE,
            Cause::Protocol { .. } | Cause::HostLost { .. } => EXIT_LAUNCHER_ERROR,
            Cause::Timeout { .. } => EXIT_TIMEOUT,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(r) = self.rank {
            write!(f, "rank {r}")?;
            if let Some(p) = self.pid {
                write!(f, " (pid {p})")?;
            }
            write!(f, " ")?;
        }
        match &self.cause {
            Cause::Exited { code } if *code == EXIT_PEER_DIED => write!(
                f,
                "exited with status {code} before finalize because a peer died \
                 (the peer's own failure was not seen)"
            ),
            Cause::Exited { code } => write!(f, "exited with status {code} before finalize"),
            Cause::Signaled { signal } => write!(
                f,
                "was killed by signal {signal} ({}) before finalize",
                signal_name(*signal)
            ),
            Cause::Aborted { code, message } => {
                write!(f, "called abort with exit code {code}")?;
                if let Some(m) = message {
                    write!(f, ": {m}")?;
                }
                Ok(())
            }
            Cause::NoFinalize => write!(f, "exited with status 0 without calling PMI finalize"),
            Cause::ExitedBeforeInit => write!(
                f,
                "exited with status 0 without initializing PMI while other ranks wait \
                 for it in a PMI barrier (the job cannot go on)"
            ),
            Cause::Disconnected => write!(f, "closed its PMI connection before finalize"),
            Cause::Protocol { reason } => write!(f, "broke the PMI protocol: {reason}"),
            Cause::Timeout { after } => write!(
                f,
                "job timed out after {} s (--timeout / MPIEXEC_TIMEOUT)",
                after.as_secs_f64()
            ),
            Cause::HostLost { host, reason } => write!(f, "host {host} lost: {reason}"),
            Cause::Interrupted { signal } => write!(
                f,
                "tmrun received signal {signal} ({})",
                signal_name(*signal)
            ),
        }
    }
}

/// What happened to a job.
#[derive(Debug)]
pub struct JobReport {
    /// The job id.
    pub job_id: String,
    /// The launcher's exit status (see [`Failure::exit_code`]).
    pub exit_code: i32,
    /// The first failure, if the job was torn down.
    pub failure: Option<Failure>,
    /// Every rank's wait status.
    pub statuses: Vec<Option<ExitStatus>>,
    /// Time from the first failure until every rank was reaped.
    pub teardown: Option<Duration>,
    /// Shared-memory objects of the job removed after it ended.
    pub shm_removed: Vec<PathBuf>,
}

#[derive(Debug)]
pub(crate) enum Ev {
    Frame(usize, crate::wire::Frame),
    Unframeable(usize, String),
    PmiClosed(usize),
    Exited(usize, ExitStatus),
    WaitFailed(usize, String),
    Signal(Signal),
    /// A remote rank's PMI connection said `initack`; replies go to this stream.
    PmiConnected(usize, std::net::TcpStream),
    /// A host's proxy connected (host index, control stream).
    ProxyUp(usize, std::net::TcpStream),
    /// A proxy started a rank (rank, pid on its host).
    ProxyStarted(usize, usize, u32),
    /// A proxy reported a rank's wait status (host, rank, status).
    ProxyExited(usize, usize, ExitStatus),
    /// A proxy finished (true) or its control connection broke (false).
    ProxyGone(usize, bool),
    /// A host's remote-start command exited.
    LauncherExited(usize, ExitStatus),
    /// A host's proxy did not connect in time.
    ProxyTimeout,
}

/// Where forwarded output goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dest {
    Out = 0,
    Err = 1,
}

/// Receives forwarded output chunks (complete lines, or a flushed partial line).
pub(crate) trait Sink {
    fn emit(&self, rank: usize, dest: Dest, data: &[u8]);
}

impl Sink for Output {
    fn emit(&self, rank: usize, dest: Dest, data: &[u8]) {
        Output::emit(self, rank, dest, data);
    }
}

/// Line-atomic output shared by all pump threads.
#[derive(Debug)]
pub(crate) struct Output {
    tag: bool,
    /// Per destination: the rank whose partial line was written last, if any.
    open: Mutex<[Option<usize>; 2]>,
}

impl Output {
    pub(crate) fn new(tag: bool) -> Self {
        Output {
            tag,
            open: Mutex::new([None, None]),
        }
    }

    pub(crate) fn emit(&self, rank: usize, dest: Dest, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let Ok(mut open) = self.open.lock() else {
            return;
        };
        let slot = &mut open[dest as usize];
        let mut out = Vec::with_capacity(data.len() + 16);
        let mut at_start = true;
        match *slot {
            Some(o) if o == rank => at_start = false,
            // Another rank left a partial line: end it so ours starts clean.
            Some(_) => out.push(b'\n'),
            None => {}
        }
        for piece in data.split_inclusive(|b| *b == b'\n') {
            if at_start && self.tag {
                out.extend_from_slice(format!("[{rank}] ").as_bytes());
            }
            out.extend_from_slice(piece);
            at_start = piece.ends_with(b"\n");
        }
        *slot = if at_start { None } else { Some(rank) };
        let _ = match dest {
            Dest::Out => {
                let mut o = std::io::stdout().lock();
                o.write_all(&out).and_then(|()| o.flush())
            }
            Dest::Err => {
                let mut e = std::io::stderr().lock();
                e.write_all(&out).and_then(|()| e.flush())
            }
        };
    }
}

/// Time a partial line (a prompt without newline) waits before it is flushed.
const PARTIAL_FLUSH: u16 = 100;
/// Longest partial line kept before it is flushed anyway.
const PARTIAL_MAX: usize = 64 * 1024;

pub(crate) fn pump<R: Read + AsFd, S: Sink + ?Sized>(rank: usize, dest: Dest, mut src: R, out: &S) {
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if !pending.is_empty() {
            let mut fds = [PollFd::new(src.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PARTIAL_FLUSH) {
                Ok(0) => {
                    out.emit(rank, dest, &pending);
                    pending.clear();
                    continue;
                }
                Err(nix::errno::Errno::EINTR) => continue,
                _ => {}
            }
        }
        let n = match src.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        pending.extend_from_slice(&chunk[..n]);
        if let Some(last) = pending.iter().rposition(|b| *b == b'\n') {
            out.emit(rank, dest, &pending[..=last]);
            pending.drain(..=last);
        }
        if pending.len() > PARTIAL_MAX {
            out.emit(rank, dest, &pending);
            pending.clear();
        }
    }
    out.emit(rank, dest, &pending);
}

fn pmi_reader<R: Read>(rank: usize, mut stream: R, initial: &[u8], tx: SyncSender<Ev>) {
    let mut framer = Framer::default();
    framer.push(initial);
    let mut first = true;
    let mut buf = vec![0u8; 16 * 1024];
    'read: loop {
        let n = if first {
            first = false;
            0
        } else {
            match stream.read(&mut buf) {
                Ok(0) => break 'read,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(rank, error = %e, "PMI socket read failed");
                    break;
                }
            }
        };
        framer.push(&buf[..n]);
        loop {
            match framer.next_frame() {
                Ok(Some(f)) => {
                    if tx.send(Ev::Frame(rank, f)).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let _ = tx.send(Ev::Unframeable(rank, e.to_string()));
                    break 'read;
                }
            }
        }
    }
    if framer.pending() > 0 {
        debug!(
            rank,
            bytes = framer.pending(),
            "PMI connection closed in the middle of a message"
        );
    }
    let _ = tx.send(Ev::PmiClosed(rank));
}

struct RankProc {
    /// The pid (on its host); `None` until a remote proxy reports it.
    pid: Option<u32>,
    /// The host index for remote ranks, `None` for local ones.
    host: Option<usize>,
    writer: Option<Box<dyn Write + Send>>,
    alive: bool,
    pmi_closed: bool,
    status: Option<ExitStatus>,
    settled: bool,
    settle_at: Option<Instant>,
}

/// How long an exited rank's PMI stream may stay open (held by a grandchild)
/// before its exit is judged without it.
const SETTLE_AFTER_EXIT: Duration = Duration::from_millis(200);
/// How long a PMI-active rank may live on after closing PMI before it counts as failed.
const SETTLE_AFTER_EOF: Duration = Duration::from_millis(500);
/// How long output pumps may keep draining after the last rank was reaped.
const DRAIN_LIMIT: Duration = Duration::from_millis(1000);
/// How long a PMI reply may wait for room in a rank's socket. A client
/// sends one request and reads its reply, so only a client that sends
/// requests without reading replies fills the socket; it ends the job.
pub const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a rank's failure by exit status is held before it is named the
/// job's cause: a rank killed by a signal and reaped within this window is
/// the cause instead (a survivor that noticed the dead peer may be reaped
/// first).
pub const BLAME_WINDOW: Duration = Duration::from_millis(300);
/// The same window for a rank that exited with [`EXIT_PEER_DIED`]: it says
/// outright that another rank failed first.
pub const PEER_DIED_WINDOW: Duration = Duration::from_millis(1500);

/// A host's proxy, as the server sees it.
#[derive(Debug)]
struct ProxyState {
    name: String,
    ctl: Option<std::net::TcpStream>,
    connected: bool,
    finished: bool,
    launcher_pgid: Option<u32>,
}

struct Job<'a> {
    spec: &'a JobSpec,
    proxies: Vec<ProxyState>,
    job_id: String,
    server: Server,
    ranks: Vec<RankProc>,
    failure: Option<Failure>,
    /// A failure by exit status held for [`BLAME_WINDOW`] (see [`Job::fail`]).
    pending: Option<(Failure, Instant)>,
    /// A rank that exited 0 without speaking PMI (see [`Cause::ExitedBeforeInit`]).
    silent_exit: Option<usize>,
    failed_at: Option<Instant>,
    kill_at: Option<Instant>,
    post_finalize: Option<i32>,
}

impl Job<'_> {
    /// Records a rank's failure. The first failure by cause ends the job:
    /// a failure by exit status (exited non-zero, no finalize, PMI closed)
    /// is held for [`BLAME_WINDOW`] first ([`PEER_DIED_WINDOW`] for
    /// [`EXIT_PEER_DIED`]), and a rank reaped dead of a signal in the
    /// meantime is named instead; so is another rank's exit in place of a
    /// "peer died" exit. Any other cause ends the job at once.
    fn fail(&mut self, rank: Option<usize>, cause: Cause) {
        if self.failure.is_some() {
            return;
        }
        let f = Failure {
            rank,
            pid: rank.and_then(|r| self.ranks.get(r)).and_then(|r| r.pid),
            cause,
        };
        let peer_died =
            |f: &Failure| matches!(f.cause, Cause::Exited { code } if code == EXIT_PEER_DIED);
        let deferrable = f.rank.is_some()
            && matches!(
                f.cause,
                Cause::Exited { .. }
                    | Cause::NoFinalize
                    | Cause::Disconnected
                    | Cause::ExitedBeforeInit
            );
        let now = Instant::now();
        match self.pending.take() {
            None if deferrable => {
                let window = if peer_died(&f) {
                    PEER_DIED_WINDOW
                } else {
                    BLAME_WINDOW
                };
                debug!(failure = %f, "holding a failure by exit status");
                self.pending = Some((f, now + window));
            }
            None => self.commit(f),
            Some((held, until)) => {
                if matches!(f.cause, Cause::Signaled { .. }) {
                    self.commit(f);
                } else if deferrable {
                    if peer_died(&held) && !peer_died(&f) {
                        self.pending = Some((f, until.min(now + BLAME_WINDOW)));
                    } else {
                        self.pending = Some((held, until));
                    }
                } else {
                    self.commit(held);
                }
            }
        }
    }

    /// Names `f` the job's failure and starts the teardown.
    fn commit(&mut self, f: Failure) {
        if self.failure.is_some() {
            return;
        }
        self.pending = None;
        eprintln!("tmrun: {f}; terminating job {}", self.job_id);
        info!(job_id = %self.job_id, failure = %f, "tearing the job down");
        self.failure = Some(f);
        let now = Instant::now();
        self.failed_at = Some(now);
        self.kill_at = Some(now + self.spec.kill_grace);
        self.signal_all(Signal::SIGCONT);
        self.signal_all(Signal::SIGTERM);
    }

    fn signal_all(&mut self, sig: Signal) {
        for r in self.ranks.iter().filter(|r| r.alive && r.host.is_none()) {
            if let Some(pid) = r.pid.and_then(|p| i32::try_from(p).ok()) {
                let _ = killpg(Pid::from_raw(pid), sig);
            }
        }
        for p in self.proxies.iter_mut().filter(|p| !p.finished) {
            if let Some(ctl) = p.ctl.as_mut() {
                if ctl
                    .write_all(format!("signal {}\n", sig as i32).as_bytes())
                    .is_err()
                {
                    p.ctl = None;
                }
            }
        }
    }

    fn host_lost(&mut self, host: usize, reason: String) {
        let name = self
            .proxies
            .get(host)
            .map(|p| p.name.clone())
            .unwrap_or_default();
        let mut lost = Vec::new();
        for (i, r) in self.ranks.iter_mut().enumerate() {
            if r.host == Some(host) && r.alive {
                r.alive = false;
                r.settled = true;
                r.settle_at = None;
                lost.push(i.to_string());
            }
        }
        if !lost.is_empty() {
            self.fail(
                None,
                Cause::HostLost {
                    host: name,
                    reason: format!("{reason} (ranks {} were running there)", lost.join(",")),
                },
            );
        }
    }

    fn settle(&mut self, rank: usize) {
        let Some(r) = self.ranks.get_mut(rank) else {
            return;
        };
        if r.settled {
            return;
        }
        r.settled = true;
        r.settle_at = None;
        let finalized = self.server.is_finalized(rank);
        let active = self.server.is_active(rank);
        match r.status {
            None => {
                if active && !finalized {
                    self.fail(Some(rank), Cause::Disconnected);
                }
            }
            Some(st) => {
                let code = match (st.code(), st.signal()) {
                    (Some(c), _) => c,
                    (None, Some(s)) => 128 + s,
                    (None, None) => EXIT_LAUNCHER_ERROR,
                };
                if code == 0 {
                    if active && !finalized {
                        self.fail(Some(rank), Cause::NoFinalize);
                    } else if !active && self.silent_exit.is_none() {
                        self.silent_exit = Some(rank);
                        self.check_silent_exit();
                    }
                } else if finalized {
                    self.post_finalize.get_or_insert(code & 0xff);
                } else if let Some(sig) = st.signal() {
                    self.fail(Some(rank), Cause::Signaled { signal: sig });
                } else {
                    self.fail(Some(rank), Cause::Exited { code });
                }
            }
        }
    }

    /// A rank that exited without speaking PMI, while another waits in a
    /// barrier (which needs every rank), ends the job.
    fn check_silent_exit(&mut self) {
        if let Some(rank) = self.silent_exit {
            if self.server.waiting_in_barrier() > 0 {
                self.fail(Some(rank), Cause::ExitedBeforeInit);
            }
        }
    }

    fn on_event(&mut self, ev: Ev) {
        match ev {
            Ev::Frame(rank, frame) => {
                let step = self.server.handle(rank, frame);
                for (to, bytes) in step.replies {
                    let Some(w) = self.ranks.get_mut(to).and_then(|r| r.writer.as_mut()) else {
                        continue;
                    };
                    if let Err(e) = w.write_all(&bytes) {
                        self.ranks[to].writer = None;
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) {
                            // The socket stayed full for the whole write
                            // timeout: the rank sends requests without
                            // reading the replies. It cannot be served, and
                            // waiting would leave the job hanging.
                            self.fail(
                                Some(to),
                                Cause::Protocol {
                                    reason: format!(
                                        "it does not read its PMI replies (a reply could not \
                                         be written for {} s: requests sent without reading \
                                         the replies)",
                                        REPLY_WRITE_TIMEOUT.as_secs()
                                    ),
                                },
                            );
                        } else {
                            // The rank closed its end: its EOF or exit tells the rest.
                            debug!(rank = to, error = %e, "cannot write a PMI reply");
                        }
                    }
                }
                self.check_silent_exit();
                for ev in step.events {
                    match ev {
                        ServerEvent::Abort {
                            rank,
                            code,
                            message,
                        } => self.fail(Some(rank), Cause::Aborted { code, message }),
                        ServerEvent::Protocol { rank, reason } => {
                            warn!(rank, %reason, "bad PMI request (answered with rc=-1)");
                        }
                        ServerEvent::Finalized { rank } => debug!(rank, "finalized"),
                        ServerEvent::BarrierReleased => debug!("barrier released"),
                    }
                }
            }
            Ev::Unframeable(rank, reason) => self.fail(Some(rank), Cause::Protocol { reason }),
            Ev::PmiClosed(rank) => {
                let active = self.server.is_active(rank);
                let finalized = self.server.is_finalized(rank);
                if let Some(r) = self.ranks.get_mut(rank) {
                    r.pmi_closed = true;
                    r.writer = None;
                    if r.status.is_some() {
                        self.settle(rank);
                    } else if active && !finalized && r.settle_at.is_none() {
                        r.settle_at = Some(Instant::now() + SETTLE_AFTER_EOF);
                    }
                }
            }
            Ev::Exited(rank, st) => {
                debug!(rank, status = ?st, "rank exited");
                if let Some(r) = self.ranks.get_mut(rank) {
                    r.alive = false;
                    r.status = Some(st);
                    if r.pmi_closed {
                        self.settle(rank);
                    } else {
                        r.settle_at = Some(Instant::now() + SETTLE_AFTER_EXIT);
                    }
                }
            }
            Ev::WaitFailed(rank, e) => {
                warn!(rank, error = %e, "cannot wait for a rank");
                if let Some(r) = self.ranks.get_mut(rank) {
                    r.alive = false;
                }
                self.fail(
                    Some(rank),
                    Cause::Protocol {
                        reason: format!("waitpid failed: {e}"),
                    },
                );
            }
            Ev::PmiConnected(rank, stream) => {
                if let Some(r) = self.ranks.get_mut(rank) {
                    debug!(rank, "remote PMI connection");
                    let _ = stream.set_write_timeout(Some(REPLY_WRITE_TIMEOUT));
                    let _ = stream.set_nodelay(true);
                    r.writer = Some(Box::new(stream));
                    r.pmi_closed = false;
                }
            }
            Ev::ProxyUp(host, stream) => {
                if let Some(p) = self.proxies.get_mut(host) {
                    info!(host = %p.name, "proxy connected");
                    p.connected = true;
                    p.ctl = Some(stream);
                }
                if self.failure.is_some() {
                    self.signal_all(Signal::SIGKILL);
                }
            }
            Ev::ProxyStarted(host, rank, pid) => {
                if let Some(r) = self.ranks.get_mut(rank).filter(|r| r.host == Some(host)) {
                    r.pid = Some(pid);
                }
            }
            Ev::ProxyExited(host, rank, st) => {
                if self.ranks.get(rank).is_some_and(|r| r.host == Some(host)) {
                    self.on_event(Ev::Exited(rank, st));
                }
            }
            Ev::ProxyGone(host, clean) => {
                if let Some(p) = self.proxies.get_mut(host) {
                    p.finished = true;
                    p.ctl = None;
                }
                let reason = if clean {
                    "its proxy finished while ranks were still running".to_string()
                } else {
                    "lost the connection to its proxy".to_string()
                };
                self.host_lost(host, reason);
            }
            Ev::LauncherExited(host, st) => {
                let connected = self.proxies.get(host).is_some_and(|p| p.connected);
                if let Some(p) = self.proxies.get_mut(host) {
                    p.launcher_pgid = None;
                    if !connected {
                        p.finished = true;
                    }
                }
                if !connected {
                    self.host_lost(
                        host,
                        format!(
                            "the remote-start command exited ({st}) before its proxy connected"
                        ),
                    );
                }
            }
            Ev::ProxyTimeout => {
                let late: Vec<usize> = (0..self.proxies.len())
                    .filter(|h| !self.proxies[*h].connected && !self.proxies[*h].finished)
                    .collect();
                for h in late {
                    if let Some(p) = self.proxies.get_mut(h) {
                        p.finished = true;
                    }
                    self.host_lost(
                        h,
                        format!(
                            "its proxy did not connect within {} s",
                            crate::remote::CONNECT_TIMEOUT.as_secs()
                        ),
                    );
                }
            }
            Ev::Signal(sig) => {
                if self.failure.is_some() {
                    // A second signal: stop being polite.
                    self.signal_all(Signal::SIGKILL);
                } else {
                    self.fail(None, Cause::Interrupted { signal: sig as i32 });
                }
            }
        }
    }

    fn on_tick(&mut self, now: Instant, timeout_at: Option<Instant>) {
        if self
            .pending
            .as_ref()
            .is_some_and(|(_, until)| now >= *until)
        {
            if let Some((f, _)) = self.pending.take() {
                self.commit(f);
            }
        }
        if let Some(t) = timeout_at {
            if now >= t && self.failure.is_none() {
                let after = self.spec.timeout.unwrap_or_default();
                self.fail(None, Cause::Timeout { after });
            }
        }
        if let Some(k) = self.kill_at {
            if now >= k {
                self.kill_at = None;
                warn!("ranks still alive after the grace period: SIGKILL");
                self.signal_all(Signal::SIGKILL);
            }
        }
        let due: Vec<usize> = (0..self.ranks.len())
            .filter(|r| self.ranks[*r].settle_at.is_some_and(|t| now >= t))
            .collect();
        for r in due {
            self.settle(r);
        }
    }

    fn next_deadline(&self, timeout_at: Option<Instant>) -> Option<Instant> {
        let mut all: Vec<Instant> = self.ranks.iter().filter_map(|r| r.settle_at).collect();
        all.extend(self.kill_at);
        all.extend(self.pending.as_ref().map(|(_, until)| *until));
        if self.failure.is_none() {
            all.extend(timeout_at);
        }
        all.into_iter().min()
    }
}

fn spawn_rank(spec: &JobSpec, job_id: &str, rank: usize) -> Result<(Child, UnixStream)> {
    let (parent, child_end) =
        UnixStream::pair().map_err(|e| Error::io("creating a PMI socketpair", e))?;
    // The child's end must survive exec; std creates both ends close-on-exec.
    // Ranks are spawned one at a time from this thread, so no other child can
    // inherit it by accident; the parent closes it right after the spawn.
    nix::fcntl::fcntl(
        &child_end,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .map_err(|e| Error::sys("clearing FD_CLOEXEC on the PMI socket", e))?;
    let n = spec.nprocs.to_string();
    let r = rank.to_string();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    cmd.env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env("PMI_FD", child_end.as_raw_fd().to_string())
        .env("PMI_RANK", &r)
        .env("PMI_SIZE", &n)
        .env("MPI_LOCALNRANKS", &n)
        .env("MPI_LOCALRANKID", &r)
        .env(ENV_JOB_ID, job_id)
        .stdin(if rank == 0 {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    own_session(&mut cmd);
    child_hygiene(&mut cmd);
    if spec.bind == Bind::Core {
        let set = core_for(rank)?;
        // SAFETY: runs in the child between fork and exec; sched_setaffinity
        // is a plain system call (async-signal-safe) on a CpuSet built in the
        // parent and moved in; nothing is allocated or shared.
        unsafe {
            cmd.pre_exec(move || {
                nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
                    .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
            });
        }
    }
    let child = cmd.spawn().map_err(|source| Error::Spawn {
        program: spec.program.clone(),
        rank,
        source,
    })?;
    drop(child_end);
    Ok((child, parent))
}

/// Makes a rank the leader of its own session (`setsid`), as Hydra starts
/// ranks: with the scheduler's autogroups (`sched_autogroup`, on by default
/// in Debian) each session is one task group, so ranks in the caller's
/// session would share one CPU share between them. The session's process
/// group is the rank's own, so a teardown (`killpg`) still reaches the
/// rank's children too (a shell's `sleep`, an MPI progress helper...);
/// `PR_SET_PDEATHSIG` ([`child_hygiene`]) still ties the rank to the
/// launcher; and a terminal's Ctrl-C reaches only the launcher, which turns
/// it into a teardown.
pub(crate) fn own_session(cmd: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls setsid (a plain system call, async-signal-safe); the child is
    // not a process-group leader (no `process_group` is set), so setsid
    // cannot fail with EPERM, and on any error the spawn fails cleanly.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(|e| std::io::Error::from_raw_os_error(e as i32))
        });
    }
}

/// Prepares a child of the launcher (a rank, a proxy, a remote-start command):
/// it starts with an empty signal mask (the launcher blocks SIGINT, SIGTERM and
/// SIGHUP for its signal thread, and children would inherit that), and gets
/// SIGKILL if the launcher dies first (`PR_SET_PDEATHSIG`), so even a
/// `kill -9` of `tmrun` leaves no ranks behind.
pub(crate) fn child_hygiene(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed. It calls sigprocmask, prctl and
    // getppid (plain system calls, async-signal-safe), builds the error from
    // an errno without allocating, and touches no state shared with the parent.
    unsafe {
        cmd.pre_exec(move || {
            let _ = nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&SigSet::empty()),
                None,
            );
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            // The launcher may have died before prctl took effect.
            if u32::try_from(nix::unistd::getppid().as_raw()).ok() != Some(parent) {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// Runs a job to completion and reports how it ended.
///
/// Errors are launcher failures before the job could start (a rank's program
/// cannot be executed, no sockets); everything that happens to ranks is in
/// the [`JobReport`].
pub fn run_job(spec: &JobSpec) -> Result<JobReport> {
    if spec.nprocs == 0 {
        return Err(Error::Usage("-n must be at least 1".into()));
    }
    let job_id = spec.job_id.clone().unwrap_or_else(job::new_job_id);
    info!(job_id = %job_id, nprocs = spec.nprocs, program = %spec.program, "starting job");
    let (tx, rx): (SyncSender<Ev>, Receiver<Ev>) = mpsc::sync_channel(4096);
    // Block the signals before anything is spawned (children get a clean mask
    // back in `child_hygiene`), so no SIGINT can kill tmrun and orphan ranks.
    if spec.handle_signals {
        let mut set = SigSet::empty();
        for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            set.add(s);
        }
        set.thread_block()
            .map_err(|e| Error::sys("blocking SIGINT/SIGTERM/SIGHUP", e))?;
        let tx = tx.clone();
        thread::Builder::new()
            .name("tmrun-signals".into())
            .spawn(move || {
                while let Ok(sig) = set.wait() {
                    if tx.send(Ev::Signal(sig)).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| Error::io("starting the signal thread", e))?;
    }
    let output = Arc::new(Output::new(spec.tag_output));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut pumps = 0usize;
    let mut ranks: Vec<RankProc> = Vec::with_capacity(spec.nprocs);
    let start = Instant::now();
    if spec.nprocs > crate::cli::MAX_LOCAL_RANKS * spec.hosts.len().max(1) {
        return Err(Error::Usage(format!("too many ranks: {}", spec.nprocs)));
    }
    let mut proxies: Vec<ProxyState> = Vec::new();
    let mapping;
    if spec.hosts.is_empty() {
        mapping = format_blocks(&[Block {
            start_node: 0,
            n_nodes: 1,
            ranks_per_node: spec.nprocs,
        }]);
        // Start every rank before any thread exists and before signals are
        // blocked: children inherit the signal mask, and a rank with SIGTERM
        // blocked could not be torn down politely.
        let mut started: Vec<(Child, UnixStream)> = Vec::with_capacity(spec.nprocs);
        for rank in 0..spec.nprocs {
            match spawn_rank(spec, &job_id, rank) {
                Ok(x) => started.push(x),
                Err(e) => {
                    // Do not leave the ranks already started behind.
                    for (child, _) in &mut started {
                        if let Ok(pid) = i32::try_from(child.id()) {
                            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
                        }
                        let _ = child.wait();
                    }
                    job::cleanup_shm(&job_id);
                    return Err(e);
                }
            }
        }

        for (rank, (mut child, parent)) in started.into_iter().enumerate() {
            let pid = child.id();
            debug!(rank, pid, "rank started");
            let writer = parent.try_clone().ok();
            if let Some(w) = &writer {
                let _ = w.set_write_timeout(Some(REPLY_WRITE_TIMEOUT));
            }
            {
                let tx = tx.clone();
                thread::Builder::new()
                    .name(format!("tmrun-pmi-{rank}"))
                    .spawn(move || pmi_reader(rank, parent, &[], tx))
                    .map_err(|e| Error::io("starting a PMI reader thread", e))?;
            }
            if let Some(out) = child.stdout.take() {
                let o = Arc::clone(&output);
                let d = done_tx.clone();
                pumps += 1;
                thread::Builder::new()
                    .name(format!("tmrun-out-{rank}"))
                    .spawn(move || {
                        pump(rank, Dest::Out, out, &*o);
                        let _ = d.send(());
                    })
                    .map_err(|e| Error::io("starting an output thread", e))?;
            }
            if let Some(err) = child.stderr.take() {
                let o = Arc::clone(&output);
                let d = done_tx.clone();
                pumps += 1;
                thread::Builder::new()
                    .name(format!("tmrun-err-{rank}"))
                    .spawn(move || {
                        pump(rank, Dest::Err, err, &*o);
                        let _ = d.send(());
                    })
                    .map_err(|e| Error::io("starting an output thread", e))?;
            }
            if let Some(mut stdin) = child.stdin.take() {
                // stdin goes to rank 0 only (as Hydra does); other ranks get /dev/null.
                thread::Builder::new()
                    .name("tmrun-stdin".into())
                    .spawn(move || {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut input = std::io::stdin();
                        loop {
                            match input.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) => {
                                    if stdin.write_all(&buf[..n]).is_err() {
                                        break;
                                    }
                                }
                                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                                Err(_) => break,
                            }
                        }
                    })
                    .map_err(|e| Error::io("starting the stdin thread", e))?;
            }
            {
                let tx = tx.clone();
                thread::Builder::new()
                    .name(format!("tmrun-wait-{rank}"))
                    .spawn(move || {
                        let ev = match child.wait() {
                            Ok(st) => Ev::Exited(rank, st),
                            Err(e) => Ev::WaitFailed(rank, e.to_string()),
                        };
                        let _ = tx.send(ev);
                    })
                    .map_err(|e| Error::io("starting a wait thread", e))?;
            }
            ranks.push(RankProc {
                pid: Some(pid),
                host: None,
                writer: writer.map(|w| Box::new(w) as Box<dyn Write + Send>),
                alive: true,
                pmi_closed: false,
                status: None,
                settled: false,
                settle_at: None,
            });
        }
    } else {
        let placement = crate::remote::place(spec)?;
        mapping = crate::remote::mapping_of(&placement);
        let listener = std::net::TcpListener::bind((spec.server_addr.as_str(), 0))
            .map_err(|e| Error::io(format!("listening on {}", spec.server_addr), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading the listening address", e))?
            .port();
        let server = format!("{}:{port}", spec.server_addr);
        let token = job::new_job_id();
        info!(%server, hosts = spec.hosts.len(), "multi-host job: waiting for proxies");
        let mut launchers = Vec::new();
        for (h, host) in spec.hosts.iter().enumerate() {
            if placement[h].is_empty() {
                continue;
            }
            let mut cmd = crate::remote::launch_command(host, &spec.launcher, &server, h, &token)?;
            let child = cmd.spawn().map_err(|source| Error::Spawn {
                program: format!("remote-start command for host {}", host.name),
                rank: placement[h].first().copied().unwrap_or(0),
                source,
            })?;
            launchers.push((h, child));
        }
        for (h, host) in spec.hosts.iter().enumerate() {
            proxies.push(ProxyState {
                name: host.name.clone(),
                ctl: None,
                connected: false,
                finished: placement[h].is_empty(),
                launcher_pgid: launchers.iter().find(|(i, _)| *i == h).map(|(_, c)| c.id()),
            });
        }
        for rank in 0..spec.nprocs {
            let host = placement.iter().position(|rs| rs.contains(&rank));
            ranks.push(RankProc {
                pid: None,
                host,
                writer: None,
                alive: true,
                // Until it connects, a remote rank has no PMI stream to wait for.
                pmi_closed: true,
                status: None,
                settled: false,
                settle_at: None,
            });
        }

        for (h, mut child) in launchers {
            let tx = tx.clone();
            thread::Builder::new()
                .name(format!("tmrun-launch-{h}"))
                .spawn(move || {
                    if let Ok(st) = child.wait() {
                        let _ = tx.send(Ev::LauncherExited(h, st));
                    }
                })
                .map_err(|e| Error::io("starting a launcher wait thread", e))?;
        }
        {
            let tx = tx.clone();
            let output = Arc::clone(&output);
            let desc = crate::remote::JobDesc {
                job_id: job_id.clone(),
                size: spec.nprocs,
                server: server.clone(),
                program: spec.program.clone(),
                args: spec.args.clone(),
                env: spec.env.clone(),
                placement: placement.clone(),
                token: token.clone(),
            };
            thread::Builder::new()
                .name("tmrun-accept".into())
                .spawn(move || accept_loop(listener, desc, tx, output))
                .map_err(|e| Error::io("starting the accept thread", e))?;
        }
        {
            let tx = tx.clone();
            thread::Builder::new()
                .name("tmrun-connect-timer".into())
                .spawn(move || {
                    thread::sleep(crate::remote::CONNECT_TIMEOUT);
                    let _ = tx.send(Ev::ProxyTimeout);
                })
                .map_err(|e| Error::io("starting a timer thread", e))?;
        }
    }
    drop(done_tx);

    let mut job = Job {
        spec,
        proxies,
        job_id: job_id.clone(),
        server: Server::new(ServerConfig {
            size: spec.nprocs,
            kvsname: format!("kvs_tmx_{job_id}"),
            process_mapping: mapping,
            appnum: 0,
        }),
        ranks,
        failure: None,
        pending: None,
        silent_exit: None,
        failed_at: None,
        kill_at: None,
        post_finalize: None,
    };
    let timeout_at = spec.timeout.map(|t| start + t);

    while job.ranks.iter().any(|r| r.alive || !r.settled) {
        let now = Instant::now();
        let wait = job
            .next_deadline(timeout_at)
            .map(|d| d.saturating_duration_since(now))
            .unwrap_or(Duration::from_secs(3600));
        match rx.recv_timeout(wait) {
            Ok(ev) => job.on_event(ev),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        job.on_tick(Instant::now(), timeout_at);
    }
    // Every rank is gone before a held failure's window ended.
    if let Some((f, _)) = job.pending.take() {
        job.commit(f);
    }
    let teardown = job.failed_at.map(|t| t.elapsed());

    // Proxies still send output after their ranks' exits; wait for them (bounded).
    let proxies_until = Instant::now() + DRAIN_LIMIT * 2;
    while job.proxies.iter().any(|p| p.connected && !p.finished) {
        let left = proxies_until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            warn!("a proxy did not finish in time");
            break;
        }
        match rx.recv_timeout(left) {
            Ok(ev) => job.on_event(ev),
            Err(_) => break,
        }
    }
    // Whatever a rank left behind in its process group goes too (remote
    // proxies do the same on their hosts), and so do the remote-start commands.
    for r in job.ranks.iter().filter(|r| r.host.is_none()) {
        if let Some(pid) = r.pid.and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    for p in &job.proxies {
        if let Some(pid) = p.launcher_pgid.and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let drain_until = Instant::now() + DRAIN_LIMIT;
    for _ in 0..pumps {
        if done_rx
            .recv_timeout(drain_until.saturating_duration_since(Instant::now()))
            .is_err()
        {
            warn!("some output was still open after the job ended; not waiting for it");
            break;
        }
    }
    let shm_removed = job::cleanup_shm(&job_id);

    let exit_code = match &job.failure {
        Some(f) => f.exit_code(),
        None => job.post_finalize.unwrap_or(0),
    };
    if let Some(f) = &job.failure {
        let secs = teardown.map(|d| d.as_secs_f64()).unwrap_or(0.0);
        eprintln!(
            "tmrun: job {job_id} failed: {f}; exit status {exit_code} (teardown took {secs:.3} s)"
        );
    }
    let statuses = job.ranks.iter().map(|r| r.status).collect();
    let mut by_code: BTreeMap<i32, usize> = BTreeMap::new();
    for r in &job.ranks {
        if let Some(c) = r.status.and_then(|s| s.code()) {
            *by_code.entry(c).or_default() += 1;
        }
    }
    info!(job_id = %job_id, exit_code, codes = ?by_code, "job finished");
    Ok(JobReport {
        job_id,
        exit_code,
        failure: job.failure,
        statuses,
        teardown,
        shm_removed,
    })
}

/// Accepts remote PMI connections (`cmd=initack`) and proxy control
/// connections (`tmx-proxy`), each on its own thread.
fn accept_loop(
    listener: std::net::TcpListener,
    desc: crate::remote::JobDesc,
    tx: SyncSender<Ev>,
    output: Arc<Output>,
) {
    let desc = Arc::new(desc);
    for conn in listener.incoming() {
        let Ok(stream) = conn else { continue };
        let tx = tx.clone();
        let output = Arc::clone(&output);
        let desc = Arc::clone(&desc);
        let _ = thread::Builder::new()
            .name("tmrun-conn".into())
            .spawn(move || crate::remote::serve_connection(stream, &desc, &tx, &output));
    }
}

/// Called by [`crate::remote`] for a connection that turned out to be a rank's PMI stream.
pub(crate) fn remote_pmi(
    rank: usize,
    stream: std::net::TcpStream,
    initial: &[u8],
    tx: &SyncSender<Ev>,
) {
    let Ok(writer) = stream.try_clone() else {
        return;
    };
    if tx.send(Ev::PmiConnected(rank, writer)).is_err() {
        return;
    }
    pmi_reader(rank, stream, initial, tx.clone());
}

/// Called by [`crate::remote`] for each message of a proxy's control stream.
pub(crate) fn proxy_event(tx: &SyncSender<Ev>, ev: crate::remote::ProxyMsg, host: usize) -> bool {
    use crate::remote::ProxyMsg;
    let ev = match ev {
        ProxyMsg::Up(stream) => Ev::ProxyUp(host, stream),
        ProxyMsg::Started { rank, pid } => Ev::ProxyStarted(host, rank, pid),
        ProxyMsg::Exited { rank, raw } => Ev::ProxyExited(host, rank, ExitStatus::from_raw(raw)),
        ProxyMsg::Gone { clean } => Ev::ProxyGone(host, clean),
    };
    tx.send(ev).is_ok()
}
