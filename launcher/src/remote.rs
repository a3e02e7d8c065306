//! Multi-host jobs: host kinds, the pluggable remote-start command, and the
//! per-host proxy (`tmrun --proxy ...`).
//!
//! Topology: `tmrun` listens on TCP at `--server-addr` (ephemeral port) and
//! starts one proxy per host with the host's remote-start command. Each proxy
//! connects back, authenticates with a per-job token, receives the job
//! description, and starts its ranks with `PMI_PORT=<server>` and
//! `PMI_ID=<rank>`: every rank then speaks PMI-1 to `tmrun` directly over TCP
//! (Hydra's `-pmi-port` mode, `initack` handshake). The proxy forwards the
//! ranks' output and wait statuses over its control connection and relays
//! teardown signals; if that connection breaks, it SIGKILLs its ranks.
//!
//! Control protocol (text lines; `<hex>` is [`wire::hex_encode`]d):
//! proxy → server `tmx-proxy host=<i> token=<t>`, then `started <rank> <pid>`,
//! `out <rank> <1|2> <len>` + `len` raw bytes, `exit <rank> <raw wait status>`,
//! `done`; server → proxy `job <hex>`, `size <n>`, `server <hex>`,
//! `program <hex>`, `arg <hex>`*, `env <hex K=V>`*, `rank <r>`*, `go`, and later
//! `signal <n>`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tracing::{debug, warn};

use crate::client::ENV_JOB_ID;
use crate::error::{Error, Result};
use crate::mapping::{format_blocks, Block};
use crate::run::{Dest, Ev, JobSpec, Output, Sink};
use crate::wire;

/// Default remote-start command for plain host names: `{host}` is replaced,
/// and the proxy's command line is appended.
pub const DEFAULT_LAUNCHER: &str = "ssh -o BatchMode=yes {host}";
/// Default address proxies and ranks connect back to.
pub const DEFAULT_SERVER_ADDR: &str = "127.0.0.1";
/// Environment variable naming the `tmrun` executable on remote hosts (default: this one's path).
pub const ENV_REMOTE_TMRUN: &str = "TMX_LAUNCHER_REMOTE_TMRUN";
/// How long a proxy may take to connect back.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a host's proxy is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// `local:<name>`: on this machine, directly (for tests and single-box runs).
    Local,
    /// `netns:<name>`: on this machine inside network namespace `<name>`, via `ip netns exec`.
    Netns,
    /// `<name>`: with the remote-start command (`--launcher`, default ssh).
    Command,
}

/// One host of a multi-host job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// How its proxy is started.
    pub kind: HostKind,
    /// Its name (namespace name for [`HostKind::Netns`]).
    pub name: String,
}

/// Parses `--hosts a,netns:b,local:c`.
pub fn parse_hosts(list: &str) -> Result<Vec<Host>> {
    let mut hosts = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, name) = match item.split_once(':') {
            Some(("netns", n)) => (HostKind::Netns, n),
            Some(("local", n)) => (HostKind::Local, n),
            Some((k, _)) => {
                return Err(Error::Usage(format!(
                    "--hosts: unknown host kind {k:?} (netns:, local:, or a plain name)"
                )))
            }
            None => (HostKind::Command, item),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
        {
            return Err(Error::Usage(format!("--hosts: bad host name {name:?}")));
        }
        hosts.push(Host {
            kind,
            name: name.to_string(),
        });
    }
    if hosts.is_empty() {
        return Err(Error::Usage("--hosts: empty list".into()));
    }
    Ok(hosts)
}

/// Which ranks run on which host: host `i` gets `ppn` consecutive ranks.
pub fn place(spec: &JobSpec) -> Result<Vec<Vec<usize>>> {
    let h = spec.hosts.len().max(1);
    let ppn = spec.ppn.unwrap_or(spec.nprocs.div_ceil(h)).max(1);
    if spec.nprocs > h.saturating_mul(ppn) {
        return Err(Error::Usage(format!(
            "-n {} does not fit on {h} hosts with -ppn {ppn}",
            spec.nprocs
        )));
    }
    Ok((0..h)
        .map(|i| (i * ppn..((i + 1) * ppn).min(spec.nprocs)).collect())
        .collect())
}

/// `PMI_process_mapping` for a placement.
pub fn mapping_of(placement: &[Vec<usize>]) -> String {
    let mut blocks: Vec<Block> = Vec::new();
    for (node, ranks) in placement.iter().enumerate() {
        if ranks.is_empty() {
            continue;
        }
        match blocks.last_mut() {
            Some(b) if b.ranks_per_node == ranks.len() && b.start_node + b.n_nodes == node => {
                b.n_nodes += 1
            }
            _ => blocks.push(Block {
                start_node: node,
                n_nodes: 1,
                ranks_per_node: ranks.len(),
            }),
        }
    }
    format_blocks(&blocks)
}

/// The command that starts host `index`'s proxy.
///
/// `template` applies to [`HostKind::Command`] hosts: it is split at spaces,
/// `{host}` is replaced by the host name (or the name is appended if there is
/// no `{host}`), and the proxy command line is appended; e.g. the default
/// `ssh -o BatchMode=yes {host}`. The remote `tmrun` path is this executable's
/// path unless `TMX_LAUNCHER_REMOTE_TMRUN` says otherwise.
pub fn launch_command(
    host: &Host,
    template: &str,
    server: &str,
    index: usize,
    token: &str,
) -> Result<Command> {
    let exe = match std::env::var(ENV_REMOTE_TMRUN) {
        Ok(p) if !p.is_empty() => p,
        _ => std::env::current_exe()
            .map_err(|e| Error::io("finding the tmrun executable", e))?
            .to_string_lossy()
            .into_owned(),
    };
    let proxy = vec![
        exe,
        "--proxy".to_string(),
        server.to_string(),
        "--proxy-host".to_string(),
        index.to_string(),
        "--proxy-token".to_string(),
        token.to_string(),
    ];
    let mut argv: Vec<String> = match host.kind {
        HostKind::Local => Vec::new(),
        HostKind::Netns => vec![
            "ip".into(),
            "netns".into(),
            "exec".into(),
            host.name.clone(),
        ],
        HostKind::Command => {
            let mut v: Vec<String> = template.split_whitespace().map(String::from).collect();
            if v.is_empty() {
                return Err(Error::Usage("--launcher: empty command".into()));
            }
            if v.iter().any(|a| a.contains("{host}")) {
                for a in &mut v {
                    *a = a.replace("{host}", &host.name);
                }
            } else {
                v.push(host.name.clone());
            }
            v
        }
    };
    argv.extend(proxy);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .process_group(0);
    crate::run::child_hygiene(&mut cmd);
    Ok(cmd)
}

/// What the server learns from a proxy's control stream.
#[derive(Debug)]
pub(crate) enum ProxyMsg {
    Up(TcpStream),
    Started { rank: usize, pid: u32 },
    Exited { rank: usize, raw: i32 },
    Gone { clean: bool },
}

/// What a proxy needs to start its ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct JobDesc {
    pub job_id: String,
    pub size: usize,
    pub server: String,
    pub program: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub placement: Vec<Vec<usize>>,
    pub token: String,
}

impl JobDesc {
    fn encode_for(&self, host: usize) -> Vec<u8> {
        let h = |s: &str| wire::hex_encode(s.as_bytes());
        let mut out = format!(
            "job {}\nsize {}\nserver {}\nprogram {}\n",
            h(&self.job_id),
            self.size,
            h(&self.server),
            h(&self.program)
        );
        for a in &self.args {
            out.push_str(&format!("arg {}\n", h(a)));
        }
        for (k, v) in &self.env {
            out.push_str(&format!("env {}\n", h(&format!("{k}={v}"))));
        }
        for r in self.placement.get(host).into_iter().flatten() {
            out.push_str(&format!("rank {r}\n"));
        }
        out.push_str("go\n");
        out.into_bytes()
    }

    fn decode(reader: &mut impl BufRead) -> Result<(JobDesc, Vec<usize>)> {
        let mut d = JobDesc::default();
        let mut ranks = Vec::new();
        let text = |v: &str| -> Result<String> {
            let bytes = wire::hex_decode(v).map_err(|r| Error::malformed(r, v.as_bytes()))?;
            String::from_utf8(bytes).map_err(|_| Error::malformed("not UTF-8", v.as_bytes()))
        };
        loop {
            let mut line = String::new();
            let n = reader
                .take(1 << 20)
                .read_line(&mut line)
                .map_err(|e| Error::io("reading the job description", e))?;
            if n == 0 {
                return Err(Error::Closed {
                    waiting_for: "the job description".into(),
                });
            }
            let line = line.trim_end();
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            let num = |v: &str| {
                v.parse::<usize>()
                    .map_err(|_| Error::malformed("not a number", line.as_bytes()))
            };
            match k {
                "job" => d.job_id = text(v)?,
                "size" => d.size = num(v)?,
                "server" => d.server = text(v)?,
                "program" => d.program = text(v)?,
                "arg" => d.args.push(text(v)?),
                "env" => {
                    let kv = text(v)?;
                    let (a, b) = kv.split_once('=').unwrap_or((kv.as_str(), ""));
                    d.env.push((a.to_string(), b.to_string()));
                }
                "rank" => ranks.push(num(v)?),
                "go" => return Ok((d, ranks)),
                _ => {
                    return Err(Error::malformed(
                        "unknown job description line",
                        line.as_bytes(),
                    ))
                }
            }
        }
    }
}

/// Serves one accepted TCP connection: a rank's PMI stream or a proxy's control stream.
pub(crate) fn serve_connection(
    stream: TcpStream,
    desc: &JobDesc,
    tx: &SyncSender<Ev>,
    output: &Output,
) {
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(CONNECT_TIMEOUT));
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut first = Vec::new();
    if (&mut reader)
        .take(4096)
        .read_until(b'\n', &mut first)
        .is_err()
    {
        return;
    }
    let _ = stream.set_read_timeout(None);
    if first.starts_with(b"cmd=initack") {
        let rank = wire::parse_pmi1(&first)
            .ok()
            .and_then(|m| m.get("pmiid").and_then(|v| v.parse::<usize>().ok()));
        let Some(rank) = rank.filter(|r| *r < desc.size) else {
            warn!("a PMI connection sent a bad initack; closing it");
            return;
        };
        let mut initial = first;
        initial.extend_from_slice(reader.buffer());
        drop(reader);
        crate::run::remote_pmi(rank, stream, &initial, tx);
        return;
    }
    let Some(hello) = first
        .strip_prefix(b"tmx-proxy ")
        .and_then(|h| std::str::from_utf8(h).ok())
    else {
        debug!("an unknown connection; closing it");
        return;
    };
    let mut host = None;
    let mut token_ok = false;
    for tok in hello.split_whitespace() {
        match tok.split_once('=') {
            Some(("host", h)) => host = h.parse::<usize>().ok(),
            Some(("token", t)) => token_ok = t == desc.token,
            _ => {}
        }
    }
    let Some(host) = host.filter(|h| token_ok && *h < desc.placement.len()) else {
        warn!("a proxy connection with a bad host index or token; closing it");
        return;
    };
    let mut w = &stream;
    if w.write_all(&desc.encode_for(host)).is_err() {
        return;
    }
    let Ok(ctl) = stream.try_clone() else {
        return;
    };
    let mine = &desc.placement[host];
    if !crate::run::proxy_event(tx, ProxyMsg::Up(ctl), host) {
        return;
    }
    let clean = proxy_stream(&mut reader, mine, host, tx, output);
    crate::run::proxy_event(tx, ProxyMsg::Gone { clean }, host);
}

/// Reads a proxy's messages until `done` (true) or a broken stream (false).
fn proxy_stream(
    reader: &mut BufReader<TcpStream>,
    mine: &[usize],
    host: usize,
    tx: &SyncSender<Ev>,
    output: &Output,
) -> bool {
    loop {
        let mut line = String::new();
        match reader.take(4096).read_line(&mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let rank_of = |s: &str| s.parse::<usize>().ok().filter(|r| mine.contains(r));
        match words.as_slice() {
            ["done"] => return true,
            ["started", r, pid] => {
                if let (Some(rank), Ok(pid)) = (rank_of(r), pid.parse::<u32>()) {
                    crate::run::proxy_event(tx, ProxyMsg::Started { rank, pid }, host);
                }
            }
            ["exit", r, raw] => {
                if let (Some(rank), Ok(raw)) = (rank_of(r), raw.parse::<i32>()) {
                    crate::run::proxy_event(tx, ProxyMsg::Exited { rank, raw }, host);
                }
            }
            ["out", r, d, len] => {
                let Some(len) = len.parse::<usize>().ok().filter(|l| *l <= 1 << 20) else {
                    return false;
                };
                let mut data = vec![0u8; len];
                if reader.read_exact(&mut data).is_err() {
                    return false;
                }
                let dest = if *d == "2" { Dest::Err } else { Dest::Out };
                if let Some(rank) = rank_of(r) {
                    output.emit(rank, dest, &data);
                }
            }
            _ => {
                warn!(host, line = %line.trim_end(), "bad message from a proxy");
                return false;
            }
        }
    }
}

/// Sends rank output over the proxy's control connection.
struct ProxySink {
    ctl: Arc<Mutex<TcpStream>>,
}

impl Sink for ProxySink {
    fn emit(&self, rank: usize, dest: Dest, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let d = if dest == Dest::Err { 2 } else { 1 };
        if let Ok(mut s) = self.ctl.lock() {
            let _ = s
                .write_all(format!("out {rank} {d} {}\n", data.len()).as_bytes())
                .and_then(|()| s.write_all(data));
        }
    }
}

fn send(ctl: &Mutex<TcpStream>, line: &str) {
    if let Ok(mut s) = ctl.lock() {
        let _ = s.write_all(line.as_bytes());
    }
}

fn kill_groups(pids: &[u32], sig: Signal) {
    for p in pids {
        if let Ok(p) = i32::try_from(*p) {
            let _ = killpg(Pid::from_raw(p), sig);
        }
    }
}

/// The proxy's main (`tmrun --proxy SERVER --proxy-host I --proxy-token T`);
/// returns its exit status.
pub fn run_proxy(server: &str, host: usize, token: &str) -> Result<i32> {
    let stream =
        TcpStream::connect(server).map_err(|e| Error::io(format!("connecting to {server}"), e))?;
    let _ = stream.set_nodelay(true);
    let mut w = &stream;
    w.write_all(format!("tmx-proxy host={host} token={token}\n").as_bytes())
        .map_err(|e| Error::io("sending the proxy hello", e))?;
    let mut reader = BufReader::new(
        stream
            .try_clone()
            .map_err(|e| Error::io("cloning the control stream", e))?,
    );
    let (desc, ranks) = JobDesc::decode(&mut reader)?;
    let ctl = Arc::new(Mutex::new(stream));
    let nlocal = ranks.len().to_string();
    // Start every rank before creating threads (nothing here blocks signals,
    // but keep the same discipline as the local launcher).
    let mut children: Vec<(usize, Child)> = Vec::new();
    for (i, &rank) in ranks.iter().enumerate() {
        let mut cmd = Command::new(&desc.program);
        cmd.args(&desc.args);
        for (k, v) in &desc.env {
            cmd.env(k, v);
        }
        cmd.env_remove("PMI_FD")
            .env_remove("PMI_RANK")
            .env_remove("PMI_SIZE")
            .env("PMI_PORT", &desc.server)
            .env("PMI_ID", rank.to_string())
            .env("MPI_LOCALNRANKS", &nlocal)
            .env("MPI_LOCALRANKID", i.to_string())
            .env(ENV_JOB_ID, &desc.job_id)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        crate::run::own_session(&mut cmd);
        crate::run::child_hygiene(&mut cmd);
        match cmd.spawn() {
            Ok(child) => {
                send(&ctl, &format!("started {rank} {}\n", child.id()));
                children.push((rank, child));
            }
            Err(e) => {
                let msg = format!(
                    "tmrun proxy {host}: cannot start {:?} for rank {rank}: {e}\n",
                    desc.program
                );
                ProxySink {
                    ctl: Arc::clone(&ctl),
                }
                .emit(rank, Dest::Err, msg.as_bytes());
                send(&ctl, &format!("exit {rank} {}\n", 127 << 8));
            }
        }
    }
    let pids: Vec<u32> = children.iter().map(|(_, c)| c.id()).collect();
    {
        // Teardown signals from the server; a broken control stream kills everything.
        let pids = pids.clone();
        thread::Builder::new()
            .name("proxy-ctl".into())
            .spawn(move || {
                for line in reader.lines() {
                    let Ok(line) = line else { break };
                    if let Some(n) = line.strip_prefix("signal ") {
                        if let Some(sig) = n
                            .trim()
                            .parse::<i32>()
                            .ok()
                            .and_then(|n| Signal::try_from(n).ok())
                        {
                            kill_groups(&pids, sig);
                        }
                    }
                }
                kill_groups(&pids, Signal::SIGKILL);
            })
            .map_err(|e| Error::io("starting the proxy control thread", e))?;
    }
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut pumps = 0;
    let mut waiters = Vec::new();
    for (rank, mut child) in children {
        for (dest, src) in [
            (
                Dest::Out,
                child.stdout.take().map(|s| Box::new(s) as Box<dyn ReadFd>),
            ),
            (
                Dest::Err,
                child.stderr.take().map(|s| Box::new(s) as Box<dyn ReadFd>),
            ),
        ] {
            let Some(src) = src else { continue };
            let sink = ProxySink {
                ctl: Arc::clone(&ctl),
            };
            let d = done_tx.clone();
            pumps += 1;
            thread::Builder::new()
                .name(format!("proxy-out-{rank}"))
                .spawn(move || {
                    crate::run::pump(rank, dest, src, &sink);
                    let _ = d.send(());
                })
                .map_err(|e| Error::io("starting a proxy output thread", e))?;
        }
        let ctl = Arc::clone(&ctl);
        waiters.push(
            thread::Builder::new()
                .name(format!("proxy-wait-{rank}"))
                .spawn(move || {
                    let raw = match child.wait() {
                        Ok(st) => st.into_raw(),
                        Err(_) => 255 << 8,
                    };
                    send(&ctl, &format!("exit {rank} {raw}\n"));
                })
                .map_err(|e| Error::io("starting a proxy wait thread", e))?,
        );
    }
    drop(done_tx);
    for w in waiters {
        let _ = w.join();
    }
    let until = std::time::Instant::now() + Duration::from_secs(1);
    for _ in 0..pumps {
        if done_rx
            .recv_timeout(until.saturating_duration_since(std::time::Instant::now()))
            .is_err()
        {
            break;
        }
    }
    kill_groups(&pids, Signal::SIGKILL);
    send(&ctl, "done\n");
    Ok(0)
}

/// A readable pipe whose descriptor can be polled.
trait ReadFd: Read + std::os::fd::AsFd + Send {}
impl<T: Read + std::os::fd::AsFd + Send> ReadFd for T {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_placement() {
        let h = parse_hosts("a, netns:b,local:c").unwrap();
        assert_eq!(h[0].kind, HostKind::Command);
        assert_eq!(
            h[1],
            Host {
                kind: HostKind::Netns,
                name: "b".into()
            }
        );
        assert!(parse_hosts("x:y").is_err());
        assert!(parse_hosts("a;rm").is_err());
        let mut spec = JobSpec::new(5, "p", vec![]);
        spec.hosts = h;
        spec.ppn = Some(2);
        let p = place(&spec).unwrap();
        assert_eq!(p, vec![vec![0, 1], vec![2, 3], vec![4]]);
        assert_eq!(mapping_of(&p), "(vector,(0,2,2),(2,1,1))");
        spec.nprocs = 7;
        assert!(place(&spec).is_err());
    }

    #[test]
    fn job_description_roundtrip() {
        let d = JobDesc {
            job_id: "ab".into(),
            size: 3,
            server: "10.0.0.1:99".into(),
            program: "/bin/prog with space".into(),
            args: vec!["-x".into(), "a b\nc".into()],
            env: vec![("K".into(), "v=1".into())],
            placement: vec![vec![0, 1], vec![2]],
            token: "t".into(),
        };
        let bytes = d.encode_for(1);
        let (got, ranks) = JobDesc::decode(&mut &bytes[..]).unwrap();
        assert_eq!(ranks, vec![2]);
        assert_eq!((got.program, got.args, got.env), (d.program, d.args, d.env));
    }
}
