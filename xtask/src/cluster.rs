//! `cargo xtask cluster`: the multi-host tests.
//!
//! 1. The launcher's own multi-host tests (`cargo test -p launcher --test
//!    multihost`: proxies, PMI over TCP, teardown).
//! 2. adi's jobs across two hosts of two ranks each (`tmrun --hosts
//!    H1,H2 -ppn 2`; some roles on 2 or 3 ranks), ranks of different hosts
//!    talking through `verbs-tm`, ranks of one host through shared memory:
//!    ping-pong at every protocol size (0 B to 8 MiB), collectives and
//!    `split`, the 4-rank stress test (10⁵ messages, `ANY_SOURCE` /
//!    `ANY_TAG`, probes, cancels, checksums), roles of adi's `ranks` and
//!    `win` tests, and `kill -9` of a rank on the other host (the job ends
//!    non-zero within the launcher's teardown bound). After every job: no
//!    process of the job left, no new object in `/dev/shm`.
//!
//! The hosts are `local:` hosts always and, as root with iproute2, network
//! namespaces this command creates (a hub namespace with a bridge, one
//! namespace per host with a veth into it) and always deletes: on success,
//! on failure, and on Ctrl-C or a kill (a reaper process outside the
//! terminal's process group deletes them once this process is gone).
//!
//! Prints `N passed, M failed`. Arguments: substrings that select jobs by
//! name (`cargo xtask cluster stress`), `--local` (no namespaces),
//! `--no-launcher` (skip step 1).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ci::{cargo, is_root, on_path};

/// Passed and failed jobs.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
}

/// How long a job may run (the launcher's `--timeout`).
const JOB_TIMEOUT_SECS: u64 = 240;
/// A killed rank must end the job within this (the launcher's teardown
/// bound, with room for a loaded machine).
const KILL_BOUND: Duration = Duration::from_secs(15);
/// Messages of the stress test.
const STRESS_MESSAGES: &str = "100000";

/// One job of the suite.
struct Job {
    name: String,
    /// Test binary (`cluster`, `ranks`, `stress`, `win`).
    bin: &'static str,
    role: &'static str,
    nprocs: usize,
    ppn: usize,
    env: Vec<(String, String)>,
    args: Vec<String>,
    /// Must fail (with a non-zero status, within [`KILL_BOUND`]).
    killed: bool,
}

fn job(bin: &'static str, role: &'static str, nprocs: usize, ppn: usize) -> Job {
    Job {
        name: format!("{bin}_{role}_{nprocs}_ranks"),
        bin,
        role,
        nprocs,
        ppn,
        env: Vec::new(),
        args: Vec::new(),
        killed: false,
    }
}

/// The suite: 2 hosts, ranks split evenly (`ppn` = ranks / 2, rounded up).
fn jobs(seed: u64) -> Vec<Job> {
    let mut v = vec![
        job("cluster", "pingpong_sizes", 4, 2),
        job("cluster", "pingpong_sizes", 2, 1),
        job("cluster", "collectives", 4, 2),
        job("cluster", "send_cancel", 2, 1),
        job("cluster", "send_cancel", 4, 2),
    ];
    let mut stress = job("stress", "stress", 4, 2);
    stress.args = [
        "--exact",
        "rank_entry_point",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    stress.env = vec![
        ("TMX_STRESS_MESSAGES".into(), STRESS_MESSAGES.into()),
        ("TMX_STRESS_SEED".into(), seed.to_string()),
        ("TMX_SHMEM_RING_SLOTS".into(), "4".into()),
    ];
    v.push(stress);
    // adi's point-to-point roles whose assertions hold on any transport.
    for (role, n) in [
        ("pingpong", 2),
        ("truncation", 2),
        ("nonblocking", 2),
        ("send_modes", 2),
        ("probe_cancel", 2),
        ("datatypes", 2),
        ("persistent", 2),
        ("requests_into", 2),
        ("wait_mixes", 2),
        ("finalize_with_pending_recv", 2),
        ("comms", 4),
        ("many_to_one", 4),
    ] {
        v.push(job("ranks", role, n, n.div_ceil(2)));
    }
    // Windows spanning hosts: same-host targets direct, the other host's
    // by active messages; `allocate_shared` and `create_dynamic` refused;
    // a counter incremented by every rank under every synchronization.
    for (role, n) in [
        ("fence", 4),
        ("acc_ops", 4),
        ("pscw", 3),
        ("lock_contention", 3),
        ("fetch_add_counter", 3),
        ("flush_visibility", 3),
        ("cas_mutex", 3),
        ("lock_all_requests", 3),
        ("two_windows", 4),
        ("shared", 3),
        ("dynamic_list", 4),
        ("large", 2),
        ("mixed_counter", 4),
    ] {
        v.push(job("win", role, n, n.div_ceil(2)));
    }
    // Every target by active messages.
    for (role, n) in [("fence", 4), ("mixed_counter", 4)] {
        let mut j = job("win", role, n, n.div_ceil(2));
        j.name = format!("win_{role}_{n}_ranks_engine");
        j.env.push(("TMX_RMA_DIRECT".into(), "0".into()));
        v.push(j);
    }
    for j in &mut v {
        // Tells the test binaries their ranks span hosts.
        j.env.push(("TMX_ADI_TEST_HOSTS".into(), "2".into()));
    }
    // `datatypes` expects a 32 KiB packed send to complete at once: eager
    // at that size.
    if let Some(j) = v.iter_mut().find(|j| j.role == "datatypes") {
        j.env.push(("TMX_VERBS_EAGER_MAX".into(), "64K".into()));
    }
    // No provider can start: init fails with NoInterNodeTransport.
    let mut none = job("cluster", "no_provider", 2, 1);
    none.env
        .push(("TMX_VERBS_PROVIDER".into(), "ibverbs".into()));
    v.push(none);
    let mut kill = job("cluster", "kill", 4, 2);
    kill.name = "cluster_kill_9_on_the_other_host".into();
    kill.killed = true;
    v.push(kill);
    v
}

/// Where the hosts of a run are.
enum Hosts {
    Local,
    Netns(Namespaces),
}

impl Hosts {
    fn label(&self) -> &'static str {
        match self {
            Hosts::Local => "local",
            Hosts::Netns(_) => "netns",
        }
    }
}

/// The network namespaces of a run: a hub with a bridge at 10.231.0.1/24
/// and one namespace per host (10.231.0.2, .3, ...).
pub(crate) struct Namespaces {
    names: Vec<String>,
    reaper: Option<Child>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Kills every process in namespace `name` and deletes it.
fn delete_namespace(name: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("kill").args(["-9", pid]).status();
        }
    }
    let _ = Command::new("ip")
        .args(["netns", "del", name])
        .stderr(Stdio::null())
        .status();
}

impl Namespaces {
    /// The names: the hub first, then the hosts.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    pub(crate) fn create(hosts: usize) -> Result<Namespaces, String> {
        let base = format!("tmxc{}", std::process::id());
        let hub = format!("{base}h");
        let all: Vec<String> = std::iter::once(hub.clone())
            .chain((0..hosts).map(|i| format!("{base}n{i}")))
            .collect();
        // The reaper first: whatever happens to this process from now on,
        // the namespaces go. Its own process group keeps the terminal's
        // Ctrl-C away from it.
        let script = format!(
            "while kill -0 {pid} 2>/dev/null; do sleep 1; done; for n in {names}; do \
             for p in $(ip netns pids $n 2>/dev/null); do kill -9 $p; done; \
             ip netns del $n 2>/dev/null; done",
            pid = std::process::id(),
            names = all.join(" ")
        );
        let reaper = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start the namespace reaper: {e}"))?;
        let mut ns = Namespaces {
            names: vec![hub.clone()],
            reaper: Some(reaper),
        };
        ip(&["netns", "add", &hub])?;
        ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        ip(&["-n", &hub, "addr", "add", "10.231.0.1/24", "dev", "br0"])?;
        for (i, name) in all.iter().skip(1).enumerate() {
            ip(&["netns", "add", name])?;
            ns.names.push(name.clone());
            let veth = format!("vh{i}");
            ip(&[
                "-n", &hub, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                name,
            ])?;
            ip(&["-n", &hub, "link", "set", &veth, "master", "br0", "up"])?;
            ip(&["-n", name, "link", "set", "lo", "up"])?;
            ip(&["-n", name, "link", "set", "eth0", "up"])?;
            let addr = format!("10.231.0.{}/24", i + 2);
            ip(&["-n", name, "addr", "add", &addr, "dev", "eth0"])?;
        }
        Ok(ns)
    }

    pub(crate) fn hub(&self) -> &str {
        &self.names[0]
    }

    pub(crate) fn hosts_arg(&self) -> String {
        self.names[1..]
            .iter()
            .map(|n| format!("netns:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            delete_namespace(n);
        }
        if let Some(mut r) = self.reaper.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
    }
}

/// Whether a network namespace of this run is still listed.
fn namespaces_left(prefix: &str) -> Vec<String> {
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .filter(|n| n.starts_with(prefix))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Builds `tmrun` and the test binaries; their paths by target name.
fn build() -> Result<(PathBuf, Vec<(String, PathBuf)>), String> {
    let mut c = cargo();
    c.args(["build", "-p", "launcher", "--bin", "tmrun"]);
    if !c.status().map_err(|e| format!("cargo: {e}"))?.success() {
        return Err("building tmrun failed".into());
    }
    let tmrun = crate::ci::workspace_root().join("target/debug/tmrun");
    let mut c = cargo();
    c.args(["test", "-p", "adi", "--no-run", "--message-format=json"]);
    for t in ["cluster", "ranks", "stress", "win"] {
        c.args(["--test", t]);
    }
    let out = c
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err("building adi's test binaries failed".into());
    }
    Ok((tmrun, executables(&String::from_utf8_lossy(&out.stdout))))
}

/// `(target name, executable)` of cargo's JSON messages (no JSON parser:
/// the two fields are plain strings in each artifact line).
fn executables(json: &str) -> Vec<(String, PathBuf)> {
    let field = |line: &str, after: &str, key: &str| -> Option<String> {
        let from = line.find(after)? + after.len();
        let rest = &line[from..];
        let at = rest.find(key)? + key.len();
        let v = &rest[at..];
        Some(v[..v.find('"')?].to_string())
    };
    json.lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\""))
        .filter_map(|l| {
            let name = field(l, "\"target\":{", "\"name\":\"")?;
            let exe = field(l, "", "\"executable\":\"")?;
            Some((name, PathBuf::from(exe)))
        })
        .collect()
}

fn shm_names() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Processes running one of `exes` (their pids).
fn running(exes: &[PathBuf]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .map(|p| exes.iter().any(|e| paths_equal(&p, e)))
                .unwrap_or(false)
        })
        .collect()
}

fn paths_equal(a: &Path, b: &Path) -> bool {
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    canon(a) == canon(b)
}

/// The job id a job's output names (`job=<id>`, or the launcher's
/// `terminating job <id>`).
fn job_id_of(text: &str) -> Option<String> {
    for marker in ["job=", "terminating job "] {
        if let Some(p) = text.find(marker) {
            let id: String = text[p + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !id.is_empty() {
                return Some(id);
            }
        }
    }
    None
}

/// Runs one job on `hosts`: `Ok` (what it took) or why it failed, and the
/// job's id if its output named it.
fn run_job(
    tmrun: &Path,
    exe: &Path,
    j: &Job,
    hosts: &Hosts,
) -> (Result<String, String>, Option<String>) {
    let (r, text) = run_job_inner(tmrun, exe, j, hosts);
    let id = job_id_of(&text);
    (r, id)
}

fn run_job_inner(
    tmrun: &Path,
    exe: &Path,
    j: &Job,
    hosts: &Hosts,
) -> (Result<String, String>, String) {
    match run_job_text(tmrun, exe, j, hosts) {
        Ok((r, text)) => (r, text),
        Err(e) => (Err(e), String::new()),
    }
}

#[allow(clippy::type_complexity)]
fn run_job_text(
    tmrun: &Path,
    exe: &Path,
    j: &Job,
    hosts: &Hosts,
) -> Result<(Result<String, String>, String), String> {
    let mut c = match hosts {
        Hosts::Local => Command::new(tmrun),
        Hosts::Netns(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns.hub()]).arg(tmrun);
            c
        }
    };
    let host_list = match hosts {
        Hosts::Local => "local:a,local:b".to_string(),
        Hosts::Netns(ns) => ns.hosts_arg(),
    };
    c.args(["--hosts", &host_list, "-ppn", &j.ppn.to_string()])
        .args(["-n", &j.nprocs.to_string()])
        .args(["--timeout", &JOB_TIMEOUT_SECS.to_string()]);
    if let Hosts::Netns(_) = hosts {
        c.args(["--server-addr", "10.231.0.1"]);
    }
    c.args(["--env", &format!("TMX_ADI_TEST_ROLE={}", j.role)]);
    for (k, v) in &j.env {
        c.args(["--env", &format!("{k}={v}")]);
    }
    // Each rank says its job id first (the job's /dev/shm objects carry it).
    c.args([
        "-l",
        "sh",
        "-c",
        "echo \"job=$TMX_JOB_ID\"; exec \"$0\" \"$@\"",
    ])
    .arg(exe)
    .args(&j.args);
    c.env("TMX_LAUNCHER_REMOTE_TMRUN", tmrun);
    let t = Instant::now();
    let out = c.output().map_err(|e| format!("cannot start tmrun: {e}"))?;
    let took = t.elapsed();
    let code = out.status.code();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tail = |t: &str| {
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    };
    let r = if j.killed && code == Some(0) {
        Err(format!("a killed rank, yet exit status 0\n{}", tail(&text)))
    } else if j.killed && took > KILL_BOUND {
        Err(format!(
            "the job took {took:.1?} to end after a rank was killed (bound {KILL_BOUND:?})"
        ))
    } else if !j.killed && code != Some(0) {
        Err(format!("exit status {code:?}\n{}", tail(&text)))
    } else {
        Ok(format!(
            "{:.1}s, exit status {}",
            took.as_secs_f64(),
            code.unwrap_or(-1)
        ))
    };
    Ok((r, text))
}

/// Runs the suite on one kind of hosts; adds to `tally`.
fn run_suite(
    hosts: &Hosts,
    tmrun: &Path,
    bins: &[(String, PathBuf)],
    filter: &[String],
    tally: &mut Tally,
) {
    // A seed given in the environment replays a failed stress run.
    let seed = match std::env::var("TMX_STRESS_SEED") {
        Ok(v) => match v.parse::<u64>() {
            Ok(s) => s,
            Err(_) => {
                println!(
                    "test {}::stress ... FAILED (TMX_STRESS_SEED={v:?} is not a number)",
                    hosts.label()
                );
                tally.failed += 1;
                return;
            }
        },
        Err(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
                ^ u64::from(std::process::id())
        }
    };
    let exes: Vec<PathBuf> = bins.iter().map(|(_, p)| p.clone()).collect();
    for j in jobs(seed) {
        let name = format!("{}::{}", hosts.label(), j.name);
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let Some((_, exe)) = bins.iter().find(|(n, _)| n == j.bin) else {
            println!("test {name} ... FAILED (no `{}` test binary)", j.bin);
            tally.failed += 1;
            continue;
        };
        let (mut r, job_id) = run_job(tmrun, exe, &j, hosts);
        // Leftovers fail the job (and are removed).
        let orphans = running(&exes);
        if !orphans.is_empty() {
            for p in &orphans {
                let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
            }
            r = r.and(Err(format!("processes left behind: {orphans:?}")));
        }
        let new_shm: Vec<String> = match &job_id {
            Some(id) => shm_names()
                .into_iter()
                .filter(|n| n.contains(id.as_str()))
                .collect(),
            None => {
                r = r.and(Err("the job's output named no job id".to_string()));
                Vec::new()
            }
        };
        if !new_shm.is_empty() {
            for n in &new_shm {
                let _ = std::fs::remove_file(Path::new("/dev/shm").join(n));
            }
            r = r.and(Err(format!("/dev/shm objects left behind: {new_shm:?}")));
        }
        match r {
            Ok(how) => {
                println!("test {name} ... ok ({how})");
                tally.passed += 1;
            }
            Err(why) => {
                println!("test {name} ... FAILED\n{why}");
                if j.bin == "stress" {
                    println!("(stress seed {seed}: rerun with TMX_STRESS_SEED={seed})");
                }
                tally.failed += 1;
            }
        }
    }
}

/// The whole run: the launcher's multi-host tests (unless
/// `--no-launcher`), then adi's jobs on `local:` hosts and, as root, on
/// network namespaces.
pub(crate) fn run(args: &[String]) -> Result<Tally, String> {
    let local_only = args.iter().any(|a| a == "--local");
    let no_launcher = args.iter().any(|a| a == "--no-launcher");
    let filter: Vec<String> = args
        .iter()
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .collect();
    let mut tally = Tally::default();
    if !no_launcher && filter.is_empty() {
        let mut c = cargo();
        c.args([
            "test",
            "-p",
            "launcher",
            "--test",
            "multihost",
            "--",
            "--nocapture",
        ]);
        let ok = c.status().map_err(|e| format!("cargo: {e}"))?.success();
        println!(
            "test launcher::multihost ... {}",
            if ok { "ok" } else { "FAILED" }
        );
        if ok {
            tally.passed += 1;
        } else {
            tally.failed += 1;
        }
    }
    let (tmrun, bins) = build()?;
    println!("\n==== cluster: local: hosts (2 hosts on this machine) ====");
    run_suite(&Hosts::Local, &tmrun, &bins, &filter, &mut tally);
    let prefix = format!("tmxc{}", std::process::id());
    if local_only {
        println!("netns hosts: skipped (--local)");
    } else if !is_root() {
        println!("netns hosts: SKIPPED: network namespaces need root");
    } else if !on_path("ip") {
        println!("netns hosts: SKIPPED: no `ip` (install iproute2)");
    } else {
        println!("\n==== cluster: netns: hosts (2 network namespaces behind a bridge) ====");
        match Namespaces::create(2) {
            Ok(ns) => {
                let hosts = Hosts::Netns(ns);
                run_suite(&hosts, &tmrun, &bins, &filter, &mut tally);
                drop(hosts);
            }
            Err(e) => {
                println!("test netns::setup ... FAILED\n{e}");
                tally.failed += 1;
            }
        }
        let left = namespaces_left(&prefix);
        if left.is_empty() {
            println!("test netns::no_namespace_left ... ok");
            tally.passed += 1;
        } else {
            for n in &left {
                delete_namespace(n);
            }
            println!("test netns::no_namespace_left ... FAILED ({left:?})");
            tally.failed += 1;
        }
    }
    println!("\n{} passed, {} failed", tally.passed, tally.failed);
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_come_from_cargo_artifact_lines() {
        let json = r#"{"reason":"compiler-artifact","package_id":"x","target":{"kind":["test"],"crate_types":["bin"],"name":"cluster","src_path":"/w/adi/tests/cluster.rs"},"profile":{},"features":[],"filenames":["/w/target/debug/deps/cluster-1"],"executable":"/w/target/debug/deps/cluster-1","fresh":true}
{"reason":"compiler-artifact","target":{"name":"adi"},"executable":null}
{"reason":"build-finished","success":true}"#;
        let v = executables(json);
        assert_eq!(
            v,
            vec![(
                "cluster".to_string(),
                PathBuf::from("/w/target/debug/deps/cluster-1")
            )]
        );
    }

    #[test]
    fn the_suite_spans_two_hosts_and_has_the_kill_job() {
        let v = jobs(1);
        assert!(v.iter().all(|j| j.nprocs <= 2 * j.ppn && j.nprocs > j.ppn));
        assert_eq!(v.iter().filter(|j| j.killed).count(), 1);
        assert!(v.iter().any(|j| j.bin == "stress"));
    }
}
