//! The PMI client: what a rank uses to find its peers.
//!
//! [`Pmi::init`] bootstraps the way MPICH's simple PMI does (`getPMIFD`):
//!
//! 1. `PMI_FD=<fd>`: an inherited, connected stream socket; rank and size come
//!    from `PMI_RANK` and `PMI_SIZE` (defaults 0 and 1). This is how Hydra's
//!    default mode, `tmrun` and Slurm's `srun --mpi=pmi2` start ranks.
//! 2. Otherwise `PMI_PORT=<host>:<port>`: a TCP connection; with `PMI_ID=<id>`
//!    the `initack` handshake supplies rank and size (Hydra's `-pmi-port`).
//! 3. Otherwise a singleton: rank 0 of 1 with a process-local KVS that keeps the
//!    same put → barrier → get visibility rule, and a random job id. Unless
//!    the environment says a launcher started this process as one rank of
//!    several without PMI-1/PMI-2 (Open MPI's `mpiexec`, `srun --mpi=pmix` or
//!    `--mpi=none`, a PMIx launcher, Hydra without `PMI_FD`): then init fails
//!    with [`Error::ForeignLauncher`], which names the launcher and what to
//!    use instead, rather than run N unrelated "rank 0 of 1" jobs.
//!
//! The wire version is PMI-1 unless `TMX_LAUNCHER_PMI_VERSION=2` (or
//! [`InitOptions::version`]) asks for PMI-2 (`cmd=fullinit`, length-prefixed).
//!
//! Key/value rules: a put is visible to `get` (even the putter's own) only after
//! the next [`Pmi::barrier`]. Text values must be printable ASCII without space,
//! `\` or `;` ([`crate::wire::check_value`]); [`Pmi::put_bytes`] hex-encodes any
//! bytes, as MPICH does, and [`Pmi::get_bytes`] decodes them.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::{debug, info};

use crate::error::{clip, Error, Result};
use crate::mapping::NodeLayout;
use crate::wire::{self, Message, Proto};

/// Environment variable that selects the wire version of [`Pmi::init`] (`1` or `2`; default `1`).
pub const ENV_PMI_VERSION: &str = "TMX_LAUNCHER_PMI_VERSION";
/// Environment variable through which `tmrun` gives every rank the job id.
pub const ENV_JOB_ID: &str = "TMX_JOB_ID";

/// The PMI wire version spoken by a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmiVersion {
    /// PMI-1.1 text lines.
    V1,
    /// PMI-2.0, length-prefixed.
    V2,
}

/// How the client found its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bootstrap {
    /// An inherited socket named by `PMI_FD`.
    Fd,
    /// A TCP connection to `PMI_PORT`.
    Port,
    /// No server: rank 0 of 1.
    Singleton,
}

/// Options for [`Pmi::init_with`].
#[derive(Debug, Clone, Default)]
pub struct InitOptions {
    /// Wire version; `None` reads `TMX_LAUNCHER_PMI_VERSION` (default PMI-1).
    pub version: Option<PmiVersion>,
}

/// The limits the server advertised (`get_maxes`), clamped to what the wire allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    /// Longest KVS name.
    pub kvsname_max: usize,
    /// Longest key.
    pub keylen_max: usize,
    /// Longest value this client will send.
    pub vallen_max: usize,
}

#[derive(Debug)]
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}

impl Stream {
    fn shutdown(&self) {
        let _ = match self {
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

/// Set once `PMI_FD` has been turned into an owned socket, so it is never owned twice.
static PMI_FD_TAKEN: AtomicBool = AtomicBool::new(false);

#[derive(Debug)]
struct Conn {
    io: BufReader<Stream>,
    proto: Proto,
}

impl Conn {
    fn send(&mut self, msg: &Message) -> Result<()> {
        debug!(target: "launcher::pmi", "-> {msg}");
        let bytes = msg.encode(self.proto);
        self.io
            .get_mut()
            .write_all(&bytes)
            .and_then(|()| self.io.get_mut().flush())
            .map_err(|e| Error::io(format!("sending PMI cmd={}", msg.cmd), e))
    }

    fn recv(&mut self, waiting_for: &str) -> Result<Message> {
        let msg = match self.proto {
            Proto::V1 => {
                let mut line = Vec::new();
                let n = (&mut self.io)
                    .take(wire::SERVER_MAX_MESSAGE as u64)
                    .read_until(b'\n', &mut line)
                    .map_err(|e| Error::io(format!("reading PMI reply {waiting_for}"), e))?;
                if n == 0 {
                    return Err(Error::Closed {
                        waiting_for: waiting_for.to_string(),
                    });
                }
                if line.last() != Some(&b'\n') {
                    return Err(Error::malformed("reply is not a complete line", &line));
                }
                wire::parse_pmi1(&line)?
            }
            Proto::V2 => {
                let mut prefix = [0u8; 6];
                self.io.read_exact(&mut prefix).map_err(|e| {
                    if e.kind() == std::io::ErrorKind::UnexpectedEof {
                        Error::Closed {
                            waiting_for: waiting_for.to_string(),
                        }
                    } else {
                        Error::io(format!("reading PMI-2 reply {waiting_for}"), e)
                    }
                })?;
                let len = wire::parse_pmi2_len(&prefix)?;
                if len > wire::SERVER_MAX_MESSAGE {
                    return Err(Error::malformed(
                        format!("PMI-2 reply of {len} bytes is too long"),
                        &prefix,
                    ));
                }
                let mut body = vec![0u8; len];
                self.io
                    .read_exact(&mut body)
                    .map_err(|e| Error::io(format!("reading PMI-2 reply {waiting_for}"), e))?;
                wire::parse_pmi2_body(&body)?
            }
        };
        debug!(target: "launcher::pmi", "<- {msg}");
        Ok(msg)
    }

    /// Sends `msg` and reads a reply whose `cmd` must be `expect`.
    fn call(&mut self, msg: &Message, expect: &str) -> Result<Message> {
        self.send(msg)?;
        let reply = self.recv(expect)?;
        if reply.cmd != expect {
            return Err(Error::UnexpectedReply {
                expected: expect.to_string(),
                got: clip(reply.to_string().as_bytes()),
            });
        }
        Ok(reply)
    }

    /// Like [`call`](Self::call), and `rc` (if present) must be 0.
    fn call_rc(&mut self, msg: &Message, expect: &str) -> Result<Message> {
        let reply = self.call(msg, expect)?;
        check_rc(&msg.cmd, &reply)?;
        Ok(reply)
    }
}

fn check_rc(cmd: &str, reply: &Message) -> Result<()> {
    match reply.rc()? {
        None | Some(0) => Ok(()),
        Some(rc) => Err(Error::Rc {
            cmd: cmd.to_string(),
            rc,
            msg: reply
                .get("msg")
                .or_else(|| reply.get("errmsg"))
                .unwrap_or("")
                .to_string(),
        }),
    }
}

fn required<'a>(reply: &'a Message, key: &str) -> Result<&'a str> {
    reply.get(key).ok_or_else(|| Error::Malformed {
        reason: format!("reply lacks {key}="),
        message: clip(reply.to_string().as_bytes()),
    })
}

fn required_num(reply: &Message, key: &str) -> Result<i64> {
    let v = required(reply, key)?;
    v.parse::<i64>().map_err(|_| Error::Malformed {
        reason: format!("{key}={v:?} is not a number"),
        message: clip(reply.to_string().as_bytes()),
    })
}

fn env_usize(get: &dyn Fn(&str) -> Option<String>, var: &str, default: usize) -> Result<usize> {
    match get(var) {
        None => Ok(default),
        Some(v) => v.trim().parse::<usize>().map_err(|_| Error::BadEnv {
            var: var.to_string(),
            value: v,
            reason: "not a non-negative integer".into(),
        }),
    }
}

/// Makes a job id usable inside file names: keeps `[A-Za-z0-9_]`, maps the rest to `_`.
pub fn sanitize_job_id(raw: &str) -> String {
    raw.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .take(64)
        .collect()
}

/// A PMI client connection (or a singleton stand-in).
///
/// `Pmi` does not finalize on drop: call [`finalize`](Self::finalize), or
/// [`abort`](Self::abort) to bring the whole job down.
#[derive(Debug)]
pub struct Pmi {
    conn: Option<Conn>,
    version: PmiVersion,
    bootstrap: Bootstrap,
    rank: usize,
    size: usize,
    appnum: i64,
    kvsname: String,
    job_id: String,
    maxes: Maxes,
    layout: NodeLayout,
    local_pending: Vec<(String, String)>,
    local_kvs: HashMap<String, String>,
}

impl Pmi {
    /// Bootstraps from the process environment (see the module docs).
    pub fn init() -> Result<Pmi> {
        Self::init_with(InitOptions::default())
    }

    /// Bootstraps from the process environment with explicit options.
    pub fn init_with(opts: InitOptions) -> Result<Pmi> {
        let get = |k: &str| std::env::var(k).ok();
        let version = match opts.version {
            Some(v) => v,
            None => version_from_env(&get)?,
        };
        if let Some(fd) = get("PMI_FD") {
            let fd = parse_pmi_fd(&fd)?;
            let rank = env_usize(&get, "PMI_RANK", 0)?;
            let size = env_usize(&get, "PMI_SIZE", 1)?;
            let stream = take_pmi_fd(fd)?;
            return Self::handshake(
                Stream::Unix(stream),
                Bootstrap::Fd,
                version,
                rank,
                size,
                None,
                get(ENV_JOB_ID),
            );
        }
        if let Some(port) = get("PMI_PORT") {
            let stream = TcpStream::connect(port.trim())
                .map_err(|e| Error::io(format!("connecting to PMI_PORT={port}"), e))?;
            let _ = stream.set_nodelay(true);
            let pmi_id = match get("PMI_ID") {
                None => None,
                Some(v) => Some(v.trim().parse::<usize>().map_err(|_| Error::BadEnv {
                    var: "PMI_ID".into(),
                    value: v.clone(),
                    reason: "not a non-negative integer".into(),
                })?),
            };
            let rank = env_usize(&get, "PMI_RANK", 0)?;
            let size = env_usize(&get, "PMI_SIZE", 1)?;
            return Self::handshake(
                Stream::Tcp(stream),
                Bootstrap::Port,
                version,
                rank,
                size,
                pmi_id,
                get(ENV_JOB_ID),
            );
        }
        if let Some(e) = foreign_launcher(&get) {
            return Err(e);
        }
        Ok(Self::singleton(version, get(ENV_JOB_ID)))
    }

    /// A client over an already-connected socket (for launchers that embed both ends).
    pub fn from_stream(
        stream: UnixStream,
        version: PmiVersion,
        rank: usize,
        size: usize,
    ) -> Result<Pmi> {
        Self::handshake(
            Stream::Unix(stream),
            Bootstrap::Fd,
            version,
            rank,
            size,
            None,
            None,
        )
    }

    fn singleton(version: PmiVersion, job_id: Option<String>) -> Pmi {
        let job_id = job_id
            .map(|j| sanitize_job_id(&j))
            // Random, so that nobody can take the job's shared-memory names
            // ahead of it (a pid is easy to guess).
            .unwrap_or_else(|| format!("s{}", crate::job::new_job_id()));
        info!(target: "launcher::pmi", job_id, "no PMI_FD or PMI_PORT: singleton (rank 0 of 1)");
        Pmi {
            conn: None,
            version,
            bootstrap: Bootstrap::Singleton,
            rank: 0,
            size: 1,
            appnum: 0,
            kvsname: format!("singinit_kvs_{}", std::process::id()),
            job_id,
            maxes: Maxes {
                kvsname_max: wire::KVSNAME_MAX,
                keylen_max: wire::KEYLEN_MAX,
                vallen_max: wire::PMI1_CLIENT_VALLEN,
            },
            layout: NodeLayout::single_node(0, 1),
            local_pending: Vec::new(),
            local_kvs: HashMap::new(),
        }
    }

    fn handshake(
        stream: Stream,
        bootstrap: Bootstrap,
        version: PmiVersion,
        mut rank: usize,
        mut size: usize,
        pmi_id: Option<usize>,
        env_job_id: Option<String>,
    ) -> Result<Pmi> {
        let mut conn = Conn {
            io: BufReader::new(stream),
            proto: Proto::V1,
        };
        if let Some(id) = pmi_id {
            if version == PmiVersion::V1 {
                // Hydra's -pmi-port handshake: four lines back.
                conn.call(
                    &Message::new("initack").arg("pmiid", id.to_string()),
                    "initack",
                )?;
                for _ in 0..3 {
                    let set = conn.recv("cmd=set")?;
                    if set.cmd != "set" {
                        return Err(Error::UnexpectedReply {
                            expected: "set".into(),
                            got: clip(set.to_string().as_bytes()),
                        });
                    }
                    if let Some(v) = set.get("size") {
                        size = parse_num(&set, "size", v)?;
                    }
                    if let Some(v) = set.get("rank") {
                        rank = parse_num(&set, "rank", v)?;
                    }
                }
            }
        }
        let (pv, ps) = match version {
            PmiVersion::V1 => ("1", "1"),
            PmiVersion::V2 => ("2", "0"),
        };
        // Hydra 4.0.2 reads the two by position: pmi_version first.
        let init = conn.call_rc(
            &Message::new("init")
                .arg("pmi_version", pv)
                .arg("pmi_subversion", ps),
            "response_to_init",
        )?;
        let got = required(&init, "pmi_version")?;
        if got != pv {
            return Err(Error::Rc {
                cmd: "init".into(),
                rc: -1,
                msg: format!("server answered pmi_version={got}, we asked for {pv}"),
            });
        }
        if size == 0 || rank >= size || size > crate::mapping::MAX_RANKS {
            return Err(Error::BadEnv {
                var: "PMI_RANK/PMI_SIZE".into(),
                value: format!("{rank}/{size}"),
                reason: "rank must be below size, and size in 1..=2^24".into(),
            });
        }
        let mut pmi = match version {
            PmiVersion::V1 => Self::init_v1(conn, bootstrap, rank, size)?,
            PmiVersion::V2 => Self::init_v2(conn, bootstrap, rank, pmi_id)?,
        };
        pmi.job_id = match env_job_id {
            Some(j) if !j.is_empty() => sanitize_job_id(&j),
            _ => sanitize_job_id(&pmi.kvsname),
        };
        info!(
            target: "launcher::pmi",
            rank = pmi.rank,
            size = pmi.size,
            kvsname = %pmi.kvsname,
            job_id = %pmi.job_id,
            version = ?pmi.version,
            "PMI initialized"
        );
        Ok(pmi)
    }

    fn init_v1(mut conn: Conn, bootstrap: Bootstrap, rank: usize, size: usize) -> Result<Pmi> {
        let maxes = conn.call_rc(&Message::new("get_maxes"), "maxes")?;
        let num = |k: &str, default: usize| -> Result<usize> {
            match maxes.get(k) {
                None => Ok(default),
                Some(v) => parse_num(&maxes, k, v),
            }
        };
        let maxes = Maxes {
            kvsname_max: num("kvsname_max", wire::KVSNAME_MAX)?,
            keylen_max: num("keylen_max", wire::KEYLEN_MAX)?.min(wire::KEYLEN_MAX),
            vallen_max: num("vallen_max", wire::VALLEN_MAX)?.min(wire::PMI1_CLIENT_VALLEN),
        };
        let appnum = conn.call_rc(&Message::new("get_appnum"), "appnum")?;
        let appnum = required_num(&appnum, "appnum")?;
        let kvs = conn.call_rc(&Message::new("get_my_kvsname"), "my_kvsname")?;
        let kvsname = required(&kvs, "kvsname")?.to_string();
        let mut pmi = Pmi {
            conn: Some(conn),
            version: PmiVersion::V1,
            bootstrap,
            rank,
            size,
            appnum,
            kvsname,
            job_id: String::new(),
            maxes,
            layout: NodeLayout::one_per_node(rank, size),
            local_pending: Vec::new(),
            local_kvs: HashMap::new(),
        };
        pmi.layout = match pmi.get("PMI_process_mapping") {
            Ok(m) => NodeLayout::from_mapping(&m, rank, size)?,
            Err(Error::KeyNotFound { .. }) => NodeLayout::one_per_node(rank, size),
            Err(e) => return Err(e),
        };
        Ok(pmi)
    }

    fn init_v2(
        mut conn: Conn,
        bootstrap: Bootstrap,
        rank: usize,
        pmi_id: Option<usize>,
    ) -> Result<Pmi> {
        conn.proto = Proto::V2;
        let fullinit = match pmi_id {
            Some(id) => Message::new("fullinit").arg("pmiid", id.to_string()),
            None => Message::new("fullinit").arg("pmirank", rank.to_string()),
        }
        .arg("threaded", "FALSE");
        let r = conn.call_rc(&fullinit, "fullinit-response")?;
        let rank = usize::try_from(required_num(&r, "rank")?).map_err(|_| Error::Malformed {
            reason: "negative rank".into(),
            message: clip(r.to_string().as_bytes()),
        })?;
        let size = usize::try_from(required_num(&r, "size")?)
            .ok()
            .filter(|s| (1..=crate::mapping::MAX_RANKS).contains(s) && rank < *s)
            .ok_or_else(|| Error::Malformed {
                reason: "size out of range, or rank not below size".into(),
                message: clip(r.to_string().as_bytes()),
            })?;
        let appnum = match r.get("appnum") {
            Some(v) => v.parse::<i64>().unwrap_or(0),
            None => 0,
        };
        let j = conn.call_rc(&Message::new("job-getid"), "job-getid-response")?;
        let kvsname = required(&j, "jobid")?.to_string();
        let attr = conn.call_rc(
            &Message::new("info-getjobattr").arg("key", "PMI_process_mapping"),
            "info-getjobattr-response",
        )?;
        let layout = match (attr.get("found"), attr.get("value")) {
            (Some("TRUE"), Some(m)) => NodeLayout::from_mapping(m, rank, size)?,
            _ => NodeLayout::one_per_node(rank, size),
        };
        Ok(Pmi {
            conn: Some(conn),
            version: PmiVersion::V2,
            bootstrap,
            rank,
            size,
            appnum,
            kvsname,
            job_id: String::new(),
            maxes: Maxes {
                kvsname_max: wire::KVSNAME_MAX,
                keylen_max: wire::KEYLEN_MAX,
                vallen_max: wire::VALLEN_MAX,
            },
            layout,
            local_pending: Vec::new(),
            local_kvs: HashMap::new(),
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }
    /// The application number (MPMD index), 0 for a single program.
    pub fn appnum(&self) -> i64 {
        self.appnum
    }
    /// The server's KVS name (PMI-2: the job id it reports).
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }
    /// The job id, safe to embed in file and shared-memory names (`[A-Za-z0-9_]`).
    ///
    /// `TMX_JOB_ID` when the launcher (`tmrun`) sets it, otherwise derived from
    /// the KVS name, or `s<pid>` for a singleton. Transports name shared objects
    /// [`crate::job::shm_prefix`]`(job_id)` + suffix so `tmrun` can clean them up.
    pub fn job_id(&self) -> &str {
        &self.job_id
    }
    /// Which ranks share which node (from `PMI_process_mapping`).
    pub fn layout(&self) -> &NodeLayout {
        &self.layout
    }
    /// The wire version in use.
    pub fn version(&self) -> PmiVersion {
        self.version
    }
    /// How the server was found.
    pub fn bootstrap(&self) -> Bootstrap {
        self.bootstrap
    }
    /// The server's limits.
    pub fn maxes(&self) -> Maxes {
        self.maxes
    }

    fn conn(&mut self) -> Option<&mut Conn> {
        self.conn.as_mut()
    }

    /// Stores `key=value`; visible to every rank after the next [`barrier`](Self::barrier).
    ///
    /// `value` must be printable ASCII without space, `\` or `;`
    /// (use [`put_bytes`](Self::put_bytes) otherwise) and fit [`Maxes::vallen_max`].
    pub fn put(&mut self, key: &str, value: &str) -> Result<()> {
        wire::check_key(key)?;
        if key.len() > self.maxes.keylen_max {
            return Err(Error::InvalidKey {
                key: key.into(),
                reason: format!("longer than keylen_max={}", self.maxes.keylen_max),
            });
        }
        wire::check_value(key, value)?;
        if value.len() > self.maxes.vallen_max {
            return Err(Error::ValueTooLong {
                key: key.into(),
                len: value.len(),
                max: self.maxes.vallen_max,
            });
        }
        let kvsname = self.kvsname.clone();
        let version = self.version;
        match self.conn() {
            None => {
                self.local_pending.push((key.into(), value.into()));
                Ok(())
            }
            Some(c) => match version {
                PmiVersion::V1 => c
                    .call_rc(
                        &Message::new("put")
                            .arg("kvsname", kvsname)
                            .arg("key", key)
                            .arg("value", value),
                        "put_result",
                    )
                    .map(|_| ()),
                PmiVersion::V2 => c
                    .call_rc(
                        &Message::new("kvs-put").arg("key", key).arg("value", value),
                        "kvs-put-response",
                    )
                    .map(|_| ()),
            },
        }
    }

    /// Stores arbitrary bytes, hex-encoded (`[0-9A-F]`, as MPICH encodes business cards).
    ///
    /// The encoded form must fit [`Maxes::vallen_max`], i.e. at most half of it in bytes.
    pub fn put_bytes(&mut self, key: &str, value: &[u8]) -> Result<()> {
        self.put(key, &wire::hex_encode(value))
    }

    /// The barrier (PMI-1 `barrier_in`/`barrier_out`, PMI-2 `kvs-fence`): returns when
    /// every rank has entered it, and makes all earlier puts visible.
    pub fn barrier(&mut self) -> Result<()> {
        let version = self.version;
        match self.conn() {
            None => {
                let pending = std::mem::take(&mut self.local_pending);
                self.local_kvs.extend(pending);
                Ok(())
            }
            Some(c) => match version {
                PmiVersion::V1 => c
                    .call_rc(&Message::new("barrier_in"), "barrier_out")
                    .map(|_| ()),
                PmiVersion::V2 => c
                    .call_rc(&Message::new("kvs-fence"), "kvs-fence-response")
                    .map(|_| ()),
            },
        }
    }

    /// The value of `key` as of the last barrier; [`Error::KeyNotFound`] if absent.
    pub fn get(&mut self, key: &str) -> Result<String> {
        wire::check_key(key)?;
        let kvsname = self.kvsname.clone();
        let version = self.version;
        let not_found = |msg: &str| Error::KeyNotFound {
            key: key.into(),
            msg: msg.into(),
        };
        let Some(c) = self.conn() else {
            return self
                .local_kvs
                .get(key)
                .cloned()
                .ok_or_else(|| not_found("singleton KVS"));
        };
        match version {
            PmiVersion::V1 => {
                let r = c.call(
                    &Message::new("get").arg("kvsname", kvsname).arg("key", key),
                    "get_result",
                )?;
                match r.rc()? {
                    Some(0) => Ok(required(&r, "value")?.to_string()),
                    // Hydra 4.0.2 says rc=-1, newer Hydra rc=1: any rc != 0 is "not found".
                    _ => Err(not_found(r.get("msg").unwrap_or("rc != 0"))),
                }
            }
            PmiVersion::V2 => {
                let r = c.call_rc(
                    &Message::new("kvs-get")
                        .arg("jobid", "")
                        .arg("srcid", "-1")
                        .arg("key", key),
                    "kvs-get-response",
                )?;
                match r.get("found") {
                    Some("TRUE") => Ok(required(&r, "value")?.to_string()),
                    _ => Err(not_found("found=FALSE")),
                }
            }
        }
    }

    /// The bytes stored with [`put_bytes`](Self::put_bytes).
    pub fn get_bytes(&mut self, key: &str) -> Result<Vec<u8>> {
        let text = self.get(key)?;
        wire::hex_decode(&text).map_err(|reason| Error::BadHex {
            key: key.into(),
            reason,
        })
    }

    /// Sends the abort request (no reply comes). The launcher then kills the job and
    /// exits with `code`. [`abort`](Self::abort) also exits this process.
    ///
    /// `message` is printed on stderr here (PMI-1 4.0.2 servers have no message
    /// field); PMI-2 sends it as `msg=` with spaces and `;` replaced.
    pub fn send_abort(&mut self, code: i32, message: &str) -> Result<()> {
        eprintln!(
            "tmx: rank {} aborting with code {code}: {message}",
            self.rank
        );
        let version = self.version;
        let Some(c) = self.conn() else {
            return Ok(());
        };
        let msg = match version {
            PmiVersion::V1 => Message::new("abort").arg("exitcode", code.to_string()),
            PmiVersion::V2 => {
                let text: String = message
                    .chars()
                    .map(|ch| {
                        if ch.is_ascii_graphic() && ch != ';' {
                            ch
                        } else {
                            '_'
                        }
                    })
                    .take(512)
                    .collect();
                Message::new("abort")
                    .arg("isworldabort", "TRUE")
                    .arg("msg", text)
                    .arg("exitcode", code.to_string())
            }
        };
        c.send(&msg)
    }

    /// Aborts the whole job with `code` and exits this process with it.
    pub fn abort(mut self, code: i32, message: &str) -> ! {
        let _ = self.send_abort(code, message);
        // Give the launcher a moment to start the teardown before our EOF arrives.
        std::thread::sleep(std::time::Duration::from_millis(100));
        std::process::exit(code)
    }

    /// Says goodbye to the server and closes the connection.
    pub fn finalize(mut self) -> Result<()> {
        let version = self.version;
        if let Some(mut c) = self.conn.take() {
            match version {
                PmiVersion::V1 => {
                    c.call(&Message::new("finalize"), "finalize_ack")?;
                }
                PmiVersion::V2 => {
                    c.call_rc(&Message::new("finalize"), "finalize-response")?;
                }
            }
            c.io.get_ref().shutdown();
        }
        Ok(())
    }
}

/// The launcher that, by the environment, started this process as one of
/// several ranks without giving it a PMI-1/PMI-2 connection (no `PMI_FD`,
/// no `PMI_PORT`): a rank above 0 or a size above 1 in the variables of
/// Open MPI, Slurm's `srun`, PMIx or Hydra. `None`: a singleton is right.
fn foreign_launcher(get: &dyn Fn(&str) -> Option<String>) -> Option<Error> {
    let num = |var: &str| -> Option<u64> { get(var).and_then(|v| v.trim().parse().ok()) };
    let many = |rank: Option<u64>, size: Option<u64>| {
        rank.is_some_and(|r| r > 0) || size.is_some_and(|s| s > 1)
    };
    let shown = |vars: &[&str]| -> String {
        vars.iter()
            .filter_map(|v| get(v).map(|x| format!("{v}={x}")))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let pmix = get("PMIX_RANK").is_some() || get("PMIX_NAMESPACE").is_some();
    let in_step = get("SLURM_STEP_ID").is_some() || get("SLURM_STEPID").is_some();
    if in_step && many(num("SLURM_PROCID"), num("SLURM_STEP_NUM_TASKS")) {
        let how = if pmix {
            "with PMIx (`srun --mpi=pmix`)"
        } else {
            "without PMI (`srun --mpi=none`, or another MPI plugin)"
        };
        return Some(Error::ForeignLauncher {
            launcher: format!("Slurm's srun {how}"),
            evidence: shown(&["SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "PMIX_RANK"]),
            instead: "`srun --mpi=pmi2` (or MpiDefault=pmi2 in slurm.conf)".into(),
        });
    }
    if many(num("OMPI_COMM_WORLD_RANK"), num("OMPI_COMM_WORLD_SIZE")) {
        return Some(Error::ForeignLauncher {
            launcher: "Open MPI's mpiexec/mpirun (PMIx)".into(),
            evidence: shown(&["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK"]),
            instead: "MPICH's `mpiexec.hydra` or `tmrun`".into(),
        });
    }
    if many(num("PMIX_RANK"), None) {
        return Some(Error::ForeignLauncher {
            launcher: "a PMIx launcher".into(),
            evidence: shown(&["PMIX_RANK", "PMIX_NAMESPACE"]),
            instead: "`mpiexec.hydra`, `tmrun` or `srun --mpi=pmi2`".into(),
        });
    }
    if many(num("PMI_RANK"), num("PMI_SIZE"))
        || many(num("MPI_LOCALRANKID"), num("MPI_LOCALNRANKS"))
    {
        return Some(Error::ForeignLauncher {
            launcher: "a PMI launcher (Hydra?) that gave no PMI_FD or PMI_PORT".into(),
            evidence: shown(&["PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"]),
            instead: "`mpiexec.hydra` or `tmrun`, and keep PMI_FD open in wrapper scripts".into(),
        });
    }
    None
}

fn parse_num(msg: &Message, key: &str, v: &str) -> Result<usize> {
    v.trim().parse::<usize>().map_err(|_| Error::Malformed {
        reason: format!("{key}={v:?} is not a non-negative integer"),
        message: clip(msg.to_string().as_bytes()),
    })
}

fn version_from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<PmiVersion> {
    match get(ENV_PMI_VERSION).as_deref().map(str::trim) {
        None | Some("") | Some("1") => Ok(PmiVersion::V1),
        Some("2") => Ok(PmiVersion::V2),
        Some(other) => Err(Error::BadEnv {
            var: ENV_PMI_VERSION.into(),
            value: other.into(),
            reason: "expected 1 or 2".into(),
        }),
    }
}

/// Takes the inherited `PMI_FD` socket without any handshake, for tools that
/// speak PMI themselves (a proxy, a protocol tester). Like [`Pmi::init`], this
/// can happen once per process; afterwards `Pmi::init` fails with
/// [`Error::AlreadyInitialized`].
pub fn take_inherited_socket() -> Result<UnixStream> {
    let raw = std::env::var("PMI_FD").map_err(|_| Error::BadEnv {
        var: "PMI_FD".into(),
        value: String::new(),
        reason: "not set".into(),
    })?;
    let fd = parse_pmi_fd(&raw)?;
    take_pmi_fd(fd)
}

/// Takes ownership of the inherited `PMI_FD` socket (once per process).
fn take_pmi_fd(fd: RawFd) -> Result<UnixStream> {
    if PMI_FD_TAKEN.swap(true, Ordering::SeqCst) {
        return Err(Error::AlreadyInitialized);
    }
    // SAFETY: F_GETFD only queries descriptor flags; it touches no memory and
    // fails with EBADF if `fd` is not open, which we check before owning it.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    if flags < 0 {
        return Err(Error::BadEnv {
            var: "PMI_FD".into(),
            value: fd.to_string(),
            reason: format!(
                "descriptor is not open: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    // SAFETY: `fd` is open (checked above), was inherited from the launcher for
    // exactly this purpose, and PMI_FD_TAKEN guarantees this process turns it
    // into an owned descriptor at most once, so no other owner closes it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Keep the PMI socket out of the rank's own children.
    nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .map_err(|e| Error::sys("setting FD_CLOEXEC on PMI_FD", e))?;
    Ok(UnixStream::from(owned))
}

/// `PMI_FD` as the launcher sets it: a non-negative descriptor number.
fn parse_pmi_fd(raw: &str) -> Result<RawFd, Error> {
    raw.trim()
        .parse::<RawFd>()
        .ok()
        .filter(|fd| *fd >= 0)
        .ok_or_else(|| Error::BadEnv {
            var: "PMI_FD".into(),
            value: raw.to_string(),
            reason: "not a file descriptor number".into(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_keeps_fence_semantics() {
        let mut p = Pmi::singleton(PmiVersion::V1, Some("abc-1".into()));
        assert_eq!((p.rank(), p.size()), (0, 1));
        assert_eq!(p.job_id(), "abc_1");
        p.put("k", "v=1").unwrap();
        assert!(matches!(p.get("k"), Err(Error::KeyNotFound { .. })));
        p.barrier().unwrap();
        assert_eq!(p.get("k").unwrap(), "v=1");
        p.put_bytes("b", &[0, 1, 255, b' ']).unwrap();
        p.barrier().unwrap();
        assert_eq!(p.get_bytes("b").unwrap(), vec![0, 1, 255, b' ']);
        assert!(matches!(
            p.put("k", "has space"),
            Err(Error::InvalidValue { .. })
        ));
        let long = "x".repeat(wire::PMI1_CLIENT_VALLEN + 1);
        assert!(matches!(
            p.put("k", &long),
            Err(Error::ValueTooLong { max, .. }) if max == wire::PMI1_CLIENT_VALLEN
        ));
        assert_eq!(p.layout().local_ranks(), vec![0]);
        p.finalize().unwrap();
    }

    #[test]
    fn foreign_launchers_are_named() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let says = |pairs: &'static [(&'static str, &'static str)]| {
            foreign_launcher(&env(pairs)).map(|e| e.to_string())
        };
        assert_eq!(says(&[]), None);
        let slurm = says(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "4"),
            ("PMIX_RANK", "0"),
        ])
        .unwrap();
        assert!(slurm.contains("--mpi=pmix"), "{slurm}");
        assert!(slurm.contains("srun --mpi=pmi2"), "{slurm}");
        // A one-task step, or an allocation's shell: singleton.
        assert_eq!(
            says(&[
                ("SLURM_STEP_ID", "0"),
                ("SLURM_PROCID", "0"),
                ("SLURM_STEP_NUM_TASKS", "1")
            ]),
            None
        );
        assert_eq!(says(&[("SLURM_JOB_ID", "3"), ("SLURM_NTASKS", "8")]), None);
        let ompi = says(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "0")]).unwrap();
        assert!(
            ompi.contains("Open MPI") && ompi.contains("mpiexec.hydra"),
            "{ompi}"
        );
        assert!(says(&[("PMIX_RANK", "2")]).unwrap().contains("PMIx"));
        assert_eq!(says(&[("PMIX_RANK", "0")]), None);
        assert!(says(&[("PMI_SIZE", "4")]).is_some());
        assert!(says(&[("MPI_LOCALNRANKS", "2"), ("MPI_LOCALRANKID", "0")]).is_some());
        assert_eq!(says(&[("PMI_SIZE", "1"), ("PMI_RANK", "0")]), None);
    }

    #[test]
    fn version_env_is_typed() {
        assert_eq!(version_from_env(&|_| None).unwrap(), PmiVersion::V1);
        assert_eq!(
            version_from_env(&|_| Some("2".into())).unwrap(),
            PmiVersion::V2
        );
        assert!(matches!(
            version_from_env(&|_| Some("3".into())),
            Err(Error::BadEnv { .. })
        ));
    }
}
