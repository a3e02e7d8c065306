//! The `slurm` step of `cargo xtask ci`: Slurm as a tested path.
//!
//! As root, it starts a one-node Slurm cluster from Debian's `slurm-wlm`
//! and `munge` in a fresh temporary directory (a generated `slurm.conf`,
//! a random munge key, free ports, `munged`, `slurmctld` and `slurmd` as
//! children of this process), runs
//!
//! 1. adi's `ring` example on 4 ranks under `srun --mpi=pmi2 -O`,
//! 2. adi's 4-rank stress test (a shorter run) under `srun --mpi=pmi2 -O`,
//! 3. `kill -9` of one rank of 4 in the middle of ring traffic under
//!    `srun`: the step must end with a non-zero status and leave nothing
//!    in `/dev/shm`,
//! 4. `tmx-pmi-check` under `srun --mpi=pmix`: every rank must refuse to
//!    run as a singleton and name `srun --mpi=pmi2` (skipped, and said so,
//!    when this srun cannot load its PMIx plugin and starts no rank),
//!
//! and always stops the cluster afterwards (also when a check fails or
//! this process panics: [`Cluster`]'s `Drop`). Without root it skips and
//! says why.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ci::{cargo, is_root, on_path, workspace_root};

/// Programs the step needs, with their Debian packages (installed by the
/// `system` step when running as root).
pub(crate) const SLURM_PACKAGES: &[(&str, &str, &str)] = &[
    ("srun", "slurm-wlm", "the slurm step: srun"),
    ("slurmctld", "slurm-wlm", "the slurm step: the controller"),
    ("slurmd", "slurm-wlm", "the slurm step: the node daemon"),
    ("munged", "munge", "the slurm step: Slurm's authentication"),
];

/// Messages of the shorter stress run under `srun`.
const STRESS_MESSAGES: &str = "20000";

/// A one-node cluster; dropping it stops every daemon it started.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    fn env(&self, c: &mut Command) {
        c.env("SLURM_CONF", &self.conf);
        for (k, _) in std::env::vars() {
            // A caller's own Slurm or PMI job must not leak into ours.
            if k.starts_with("SLURM_") || k.starts_with("PMI") || k.starts_with("PMIX_") {
                c.env_remove(k);
            }
        }
    }

    fn start() -> Result<Cluster, String> {
        let dir = std::env::temp_dir().join(format!("tmx-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["", "state", "spool"] {
            std::fs::create_dir_all(dir.join(sub))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        set_mode(&dir, 0o711)?;
        let mut key = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut key))
            .map_err(|e| format!("/dev/urandom: {e}"))?;
        let key_file = dir.join("munge.key");
        std::fs::write(&key_file, &key).map_err(|e| format!("munge key: {e}"))?;
        set_mode(&key_file, 0o400)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| {
                h.trim()
                    .split('.')
                    .next()
                    .unwrap_or("localhost")
                    .to_string()
            })
            .unwrap_or_else(|_| "localhost".into());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let (ctl_port, node_port) = (free_port()?, free_port()?);
        let socket = dir.join("munge.socket");
        let d = dir.display();
        let conf = format!(
            "ClusterName=tmx\n\
             SlurmctldHost={host}(127.0.0.1)\n\
             SlurmctldPort={ctl_port}\n\
             SlurmdPort={node_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             SchedulerType=sched/builtin\n\
             MpiDefault=none\n\
             ReturnToService=2\n\
             InactiveLimit=0\n\
             KillWait=2\n\
             MessageTimeout=10\n\
             NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
             PartitionName=tmx Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            socket = socket.display()
        );
        let conf_file = dir.join("slurm.conf");
        std::fs::write(&conf_file, conf).map_err(|e| format!("slurm.conf: {e}"))?;
        let mut cluster = Cluster {
            dir: dir.clone(),
            conf: conf_file,
            daemons: Vec::new(),
        };
        let log = |name: &str| -> Result<Stdio, String> {
            std::fs::File::create(dir.join(format!("{name}.out")))
                .map(Stdio::from)
                .map_err(|e| format!("{name}.out: {e}"))
        };
        let mut munged = Command::new("munged");
        munged
            .args(["-F", "--force"])
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--key-file={}", key_file.display()))
            .arg(format!("--log-file={d}/munged.log"))
            .arg(format!("--pid-file={d}/munged.pid"))
            .arg(format!("--seed-file={d}/munged.seed"))
            .stdout(log("munged")?)
            .stderr(log("munged.err")?);
        cluster.spawn("munged", munged)?;
        wait_for("munged's socket", Duration::from_secs(10), || {
            socket.exists()
        })?;
        let mut ctld = Command::new("slurmctld");
        ctld.args(["-D", "-i"])
            .stdout(log("slurmctld")?)
            .stderr(log("slurmctld.err")?);
        cluster.env(&mut ctld);
        cluster.spawn("slurmctld", ctld)?;
        let mut slurmd = Command::new("slurmd");
        slurmd
            .args(["-D", "-N", &host])
            .stdout(log("slurmd")?)
            .stderr(log("slurmd.err")?);
        cluster.env(&mut slurmd);
        cluster.spawn("slurmd", slurmd)?;
        let conf = cluster.conf.clone();
        wait_for("the node to become idle", Duration::from_secs(30), || {
            Command::new("sinfo")
                .args(["-h", "-o", "%t"])
                .env("SLURM_CONF", &conf)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
                .unwrap_or(false)
        })
        .map_err(|e| format!("{e}\n{}", cluster.logs()))?;
        println!("slurm: one-node cluster up in {d} (node {host}, {cpus} CPUs)");
        Ok(cluster)
    }

    fn spawn(&mut self, name: &'static str, mut c: Command) -> Result<(), String> {
        println!("$ {name} (as a child of xtask)");
        let child = c.spawn().map_err(|e| format!("cannot start {name}: {e}"))?;
        self.daemons.push((name, child));
        Ok(())
    }

    /// The daemons' logs, for a failure message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for f in [
            "slurmctld.log",
            "slurmd.log",
            "slurmd.err",
            "slurmctld.err",
            "munged.log",
        ] {
            if let Ok(t) = std::fs::read_to_string(self.dir.join(f)) {
                let tail: Vec<&str> = t.lines().rev().take(15).collect();
                s.push_str(&format!("--- {f} (last lines)\n"));
                for l in tail.into_iter().rev() {
                    s.push_str(l);
                    s.push('\n');
                }
            }
        }
        s
    }

    /// `srun` with this cluster's configuration.
    fn srun(&self, args: &[&str]) -> Command {
        let mut c = Command::new("srun");
        c.args(args);
        self.env(&mut c);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Jobs first (nothing may outlive the cluster), then the daemons in
        // reverse order: SIGTERM, a moment, SIGKILL.
        let mut scancel = Command::new("scancel");
        scancel.args(["--quiet", "--partition=tmx"]);
        self.env(&mut scancel);
        let _ = run_limited(scancel, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(300));
        while let Some((name, mut child)) = self.daemons.pop() {
            let pid = child.id().to_string();
            let _ = Command::new("kill").args(["-TERM", &pid]).status();
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
            println!("slurm: {name} stopped");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set_mode(p: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", p.display()))
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) -> Result<(), String> {
    let t = Instant::now();
    while !ok() {
        if t.elapsed() > limit {
            return Err(format!("timed out after {limit:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// What a command did within its time limit.
#[derive(Debug)]
struct Ran {
    /// Exit code (`None`: killed by a signal, or by the limit).
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
}

fn spawn_captured(mut c: Command) -> Result<Child, String> {
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c.spawn()
        .map_err(|e| format!("cannot start {:?}: {e}", c.get_program()))
}

fn finish(mut child: Child, limit: Duration) -> Ran {
    let pump = |s: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = String::new();
            if let Some(mut s) = s {
                let _ = s.read_to_string(&mut out);
            }
            out
        })
    };
    let out = pump(child.stdout.take().map(|s| Box::new(s) as _));
    let err = pump(child.stderr.take().map(|s| Box::new(s) as _));
    let t = Instant::now();
    let mut timed_out = false;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if t.elapsed() > limit => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let ran = Ran {
        code: status.and_then(|s| s.code()),
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        timed_out,
    };
    print!("{}", ran.stdout);
    eprint!("{}", ran.stderr);
    ran
}

fn run_limited(c: Command, limit: Duration) -> Result<Ran, String> {
    Ok(finish(spawn_captured(c)?, limit))
}

/// The test executables of `krate` named in `tests`, built by cargo.
fn test_executables(krate: &str, tests: &[&str]) -> Result<Vec<PathBuf>, String> {
    let mut c = cargo();
    c.args(["test", "-p", krate, "--no-run", "--message-format=json"]);
    for t in tests {
        c.args(["--test", t]);
    }
    let out = c
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo test --no-run: {e}"))?;
    if !out.status.success() {
        return Err(format!("building {krate}'s tests {tests:?} failed"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    tests
        .iter()
        .map(|t| {
            text.lines()
                .filter(|l| l.contains(&format!("\"name\":\"{t}\"")) && l.contains("\"test\""))
                .find_map(|l| {
                    let at = l.find("\"executable\":\"")? + "\"executable\":\"".len();
                    let end = l[at..].find('"')?;
                    Some(PathBuf::from(&l[at..at + end]))
                })
                .ok_or_else(|| format!("no executable for {krate}'s test {t}"))
        })
        .collect()
}

fn shm_tmx() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("tmx-") || n.starts_with("sem.tmx-"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs the step (see the module docs); `Ok` carries the summary line.
pub(crate) fn step_slurm() -> Result<String, String> {
    if !is_root() {
        let why = "skipped: needs root (it starts munged, slurmctld and slurmd)";
        println!("slurm: {why}");
        return Ok(why.into());
    }
    let missing: Vec<&str> = SLURM_PACKAGES
        .iter()
        .filter(|(p, _, _)| !on_path(p))
        .map(|(p, _, _)| *p)
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "missing {} (run the `system` step, or apt-get install slurm-wlm munge)",
            missing.join(", ")
        ));
    }
    let root = workspace_root();
    let mut build = cargo();
    build.args([
        "build",
        "-p",
        "launcher",
        "--bins",
        "-p",
        "adi",
        "--example",
        "ring",
    ]);
    if !build.status().map_err(|e| e.to_string())?.success() {
        return Err("building tmx-pmi-check and the ring example failed".into());
    }
    let tests = test_executables("adi", &["stress", "hardening"])?;
    let target = crate::ci::target_dir(&root).join("debug");
    let ring = target.join("examples").join("ring");
    let probe = target.join("tmx-pmi-check");
    let shm_before = shm_tmx();
    let t0 = Instant::now();
    let cluster = Cluster::start()?;
    let mut done = Vec::new();
    let mut failed = Vec::new();
    let rank_args = [
        "--exact",
        "rank_entry_point",
        "--nocapture",
        "--test-threads=1",
    ];

    // 1. The ring.
    let mut c = cluster.srun(&["--mpi=pmi2", "-n", "4", "-O"]);
    c.arg(&ring);
    let r = run_limited(c, Duration::from_secs(60))?;
    if r.code == Some(0) && r.stdout.contains("ring: 10 rounds over 4 ranks ok") {
        done.push("ring".to_string());
    } else {
        failed.push(format!("ring under srun --mpi=pmi2: {r:?}"));
    }

    // 2. The stress test, shorter.
    let seed = std::env::var("TMX_STRESS_SEED").unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            .to_string()
    });
    println!("slurm: stress seed {seed} (rerun with TMX_STRESS_SEED={seed})");
    let mut c = cluster.srun(&["--mpi=pmi2", "-n", "4", "-O"]);
    c.arg(&tests[0])
        .args(rank_args)
        .env("TMX_ADI_TEST_ROLE", "stress")
        .env("TMX_STRESS_SEED", &seed)
        .env("TMX_STRESS_MESSAGES", STRESS_MESSAGES)
        .env("TMX_SHMEM_RING_SLOTS", "4")
        .env("TMX_SHMEM_EAGER_BYTES", "16384");
    let r = run_limited(c, Duration::from_secs(240))?;
    if r.code == Some(0) {
        done.push(format!("stress ({STRESS_MESSAGES} messages)"));
    } else {
        failed.push(format!(
            "stress under srun --mpi=pmi2 (exit {:?}, timed out: {}, seed {seed})",
            r.code, r.timed_out
        ));
    }

    // 3. kill -9 of one rank under srun.
    let pids = cluster.dir.join("pids");
    std::fs::create_dir_all(&pids).map_err(|e| e.to_string())?;
    let mut c = cluster.srun(&["--mpi=pmi2", "-n", "4", "-O"]);
    c.arg(&tests[1])
        .args(rank_args)
        .env("TMX_ADI_TEST_ROLE", "traffic")
        .env("TMX_TEST_PID_DIR", &pids);
    let child = spawn_captured(c)?;
    let victim = pids.join("1.pid");
    let seen = wait_for(
        "4 ranks of the traffic job",
        Duration::from_secs(60),
        || (0..4).all(|r| pids.join(format!("{r}.pid")).exists()),
    );
    if seen.is_ok() {
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(pid) = std::fs::read_to_string(&victim) {
            println!("slurm: kill -9 {} (rank 1)", pid.trim());
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
    let r = finish(child, Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(500));
    let shm_left: Vec<String> = shm_tmx()
        .into_iter()
        .filter(|n| !shm_before.contains(n))
        .collect();
    if seen.is_ok() && r.code.is_some_and(|c| c != 0) && !r.timed_out && shm_left.is_empty() {
        done.push(format!("kill -9 (step status {})", r.code.unwrap_or(-1)));
    } else {
        failed.push(format!(
            "kill -9 under srun: ranks seen: {seen:?}, step exit {:?}, timed out {}, /dev/shm left {shm_left:?}",
            r.code, r.timed_out
        ));
    }

    // 4. PMIx: no silent singletons.
    let mut c = cluster.srun(&["--mpi=pmix", "-n", "2", "-O"]);
    c.arg(&probe);
    let r = run_limited(c, Duration::from_secs(60))?;
    if r.code.is_some_and(|c| c != 0)
        && r.stderr.contains("srun --mpi=pmi2")
        && !r.stdout.contains("rank 0 of 1 ok")
    {
        done.push("pmix refused".into());
    } else if r.code.is_some_and(|c| c != 0)
        && (r
            .stderr
            .contains("Couldn't load specified plugin name for mpi/pmix")
            || r.stderr.contains("Invalid MPI type 'pmix'"))
        && !r.stdout.contains("rank 0 of 1 ok")
    {
        // Debian's Slurm without a loadable PMIx library: srun refuses
        // the plugin itself and starts no rank, so none can run alone.
        done.push("pmix not loadable by this srun (no rank started: check skipped)".into());
    } else {
        failed.push(format!(
            "srun --mpi=pmix: ranks must refuse to be singletons: {r:?}"
        ));
    }
    let logs = if failed.is_empty() {
        String::new()
    } else {
        cluster.logs()
    };
    drop(cluster);
    let secs = t0.elapsed().as_secs_f64();
    if failed.is_empty() {
        Ok(format!("{} in {secs:.1} s", done.join(", ")))
    } else {
        Err(format!(
            "{} (ok: {})\n{logs}",
            failed.join("\n"),
            done.join(", ")
        ))
    }
}
