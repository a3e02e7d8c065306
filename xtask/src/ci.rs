//! The `ci` and `bench` commands.
//!
//! `ci` runs a fixed list of steps, keeps going after a failure so that one run
//! shows every problem, and ends with a summary table (step, result, time, tests).
//! The exit status is non-zero if any step failed.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::state::{self, State};

mod ab;
mod abi;

/// System packages that tests or benchmarks need: (program looked for on PATH,
/// or an absolute file path; Debian package that provides it; what needs it).
pub(crate) const SYSTEM_PACKAGES: &[(&str, &str, &str)] = &[
    (
        "mpiexec.hydra",
        "mpich",
        "launcher interop tests (our PMI client under Hydra) and the MPICH baselines",
    ),
    (
        "mpicc.mpich",
        "mpich",
        "compiling the small MPICH C programs used by interop tests and benchmarks",
    ),
    (
        "/usr/share/doc/libmpich-dev/copyright",
        "libmpich-dev",
        "mpi.h for compiling the MPICH C test programs with mpicc.mpich",
    ),
    (
        "mpiexec.openmpi",
        "openmpi-bin",
        "launcher interop test: no silent singletons under Open MPI's mpiexec (PMIx)",
    ),
    (
        "ip",
        "iproute2",
        "launcher multi-host tests over network namespaces (`ip netns`)",
    ),
    (
        "/usr/include/infiniband/tm_types.h",
        "libibverbs-dev",
        "tm-proto golden tests: rdma-core's struct ibv_tmh/ibv_rvh, compiled with cc",
    ),
];

/// Crates with loom tests, and the crate-specific cfg that switches that crate's
/// sync shim to loom. A crate takes part once it has `tests/loom.rs`.
pub(crate) const LOOM_CRATES: &[(&str, &str)] = &[
    ("tm-match", "tmx_match_loom"),
    ("shmem-onesided", "tmx_shmem_loom"),
    ("verbs-tm", "tmx_verbs_loom"),
    ("rma-epoch", "tmx_rma_loom"),
    ("adi", "tmx_adi_loom"),
];

pub(crate) const STEPS: &[&str] = &[
    "system", "fmt", "clippy", "test", "cluster", "slurm", "doc", "loom", "proptest", "ibverbs",
];

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.passed += o.passed;
        self.failed += o.failed;
        self.ignored += o.ignored;
    }
}

#[derive(Debug)]
struct Outcome {
    name: &'static str,
    ok: bool,
    detail: String,
    took: Duration,
    tests: Option<Counts>,
}

pub(crate) fn workspace_root() -> PathBuf {
    // xtask lives one level below the workspace root.
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

fn show(cmd: &Command) -> String {
    let mut s = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            s.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command, streaming its output through and also returning it.
fn run_tee(mut cmd: Command) -> Result<(bool, String), String> {
    println!("\n$ {}", show(&cmd));
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", show(&cmd)))?;
    let buf = Arc::new(Mutex::new(String::new()));
    let mut pumps = Vec::new();
    let out: Option<Box<dyn Read + Send>> = child.stdout.take().map(|s| Box::new(s) as _);
    let err: Option<Box<dyn Read + Send>> = child.stderr.take().map(|s| Box::new(s) as _);
    for (stream, to_stderr) in [(out, false), (err, true)] {
        let Some(stream) = stream else { continue };
        let buf = Arc::clone(&buf);
        pumps.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if to_stderr {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
                if let Ok(mut b) = buf.lock() {
                    b.push_str(&line);
                    b.push('\n');
                }
            }
        }));
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for child: {e}"))?;
    for p in pumps {
        let _ = p.join();
    }
    let text = buf.lock().map(|b| b.clone()).unwrap_or_default();
    Ok((status.success(), text))
}

fn run_plain(mut cmd: Command) -> Result<bool, String> {
    println!("\n$ {}", show(&cmd));
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start `{}`: {e}", show(&cmd)))?;
    Ok(status.success())
}

/// Sums libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...` lines.
fn count_tests(output: &str) -> Counts {
    let mut total = Counts::default();
    for line in output.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        let mut c = Counts::default();
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            // "ok. 3 passed" / "FAILED. 1 passed" / "2 failed" / "0 ignored"
            let (num, what) = match words.as_slice() {
                [_, n, w, ..] if n.parse::<u64>().is_ok() => (*n, *w),
                [n, w, ..] => (*n, *w),
                _ => continue,
            };
            let Ok(n) = num.parse::<u64>() else { continue };
            match what {
                "passed" => c.passed += n,
                "failed" => c.failed += n,
                "ignored" => c.ignored += n,
                _ => {}
            }
        }
        total.add(c);
    }
    total
}

pub(crate) fn on_path(program: &str) -> bool {
    if program.starts_with('/') {
        return Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
        .unwrap_or(false)
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn step_system() -> Result<String, String> {
    // Slurm and munge serve the root-only `slurm` step: wanted only as root.
    let root = is_root();
    let wanted: Vec<&(&str, &str, &str)> = SYSTEM_PACKAGES
        .iter()
        .chain(crate::slurm::SLURM_PACKAGES.iter().filter(|_| root))
        .collect();
    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|(bin, _, _)| !on_path(bin))
        .map(|(_, pkg, _)| *pkg)
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return Ok("all present".into());
    }
    let list = missing.join(" ");
    if !(root && on_path("apt-get")) {
        let why: Vec<String> = wanted
            .iter()
            .filter(|(_, p, _)| missing.contains(p))
            .map(|(b, p, w)| format!("  {b} (Debian package `{p}`): {w}"))
            .collect();
        return Err(format!(
            "missing system packages; install them with\n  sudo apt-get install -y {list}\nneeded for:\n{}",
            why.join("\n")
        ));
    }
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    if !run_plain(update)? {
        return Err("apt-get update failed".into());
    }
    let mut install = Command::new("apt-get");
    install
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive");
    if !run_plain(install)? {
        return Err(format!("apt-get install {list} failed"));
    }
    let still: Vec<&str> = wanted
        .iter()
        .filter(|(bin, _, _)| !on_path(bin))
        .map(|(bin, _, _)| *bin)
        .collect();
    if still.is_empty() {
        Ok(format!("installed {list}"))
    } else {
        Err(format!(
            "installed {list} but still missing: {}",
            still.join(", ")
        ))
    }
}

fn crate_has(krate: &str, rel: &str) -> bool {
    workspace_root().join(krate).join(rel).exists()
}

fn run_step(name: &'static str) -> Outcome {
    let start = Instant::now();
    let mut tests = None;
    let result: Result<String, String> = match name {
        "system" => step_system(),
        "fmt" => {
            let mut c = cargo();
            c.args(["fmt", "--all", "--", "--check"]);
            run_plain(c).and_then(|ok| {
                ok.then(|| "formatted".to_string())
                    .ok_or_else(|| "run `cargo fmt --all`".to_string())
            })
        }
        "clippy" => {
            let mut c = cargo();
            c.args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]);
            run_plain(c).and_then(|ok| {
                ok.then(|| "no warnings".to_string())
                    .ok_or_else(|| "clippy reported problems".to_string())
            })
        }
        "cluster" => {
            // The launcher's multi-host tests ran in `test`; adi's jobs
            // across hosts here (`local:` hosts, and netns hosts as root).
            crate::cluster::run(&["--no-launcher".to_string()]).and_then(|t| {
                tests = Some(Counts {
                    passed: t.passed,
                    failed: t.failed,
                    ignored: 0,
                });
                if t.failed == 0 {
                    Ok(format!("{} jobs passed", t.passed))
                } else {
                    Err(format!("{} passed, {} failed", t.passed, t.failed))
                }
            })
        }
        "test" => {
            let mut c = cargo();
            c.args(["test", "--workspace"])
                .env("TMX_REQUIRE_SYSTEM_PACKAGES", "1");
            run_tee(c).and_then(|(ok, out)| {
                let n = count_tests(&out);
                tests = Some(n);
                if ok && n.failed == 0 {
                    Ok(format!("{} passed, {} ignored", n.passed, n.ignored))
                } else {
                    Err(format!("{} passed, {} failed", n.passed, n.failed))
                }
            })
        }
        "doc" => {
            let mut c = cargo();
            c.args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings");
            run_plain(c).and_then(|ok| {
                ok.then(|| "no warnings".to_string())
                    .ok_or_else(|| "rustdoc reported problems".to_string())
            })
        }
        "slurm" => crate::slurm::step_slurm(),
        "loom" => step_loom(&mut tests),
        "ibverbs" => step_ibverbs(&mut tests),
        "proptest" => {
            // Heavy property tests are `#[ignore]`d in the normal test step and run
            // here, optimised, with a bounded case count.
            let cases = std::env::var("TMX_PROPTEST_CASES").unwrap_or_else(|_| "2000".into());
            let mut c = cargo();
            c.args(["test", "--workspace", "--release", "--", "--ignored"])
                .env("PROPTEST_CASES", &cases)
                .env("TMX_REQUIRE_SYSTEM_PACKAGES", "1");
            run_tee(c).and_then(|(ok, out)| {
                let n = count_tests(&out);
                tests = Some(n);
                if ok && n.failed == 0 {
                    Ok(format!("{} heavy tests, {cases} cases each", n.passed))
                } else {
                    Err(format!("{} passed, {} failed", n.passed, n.failed))
                }
            })
        }
        other => Err(format!("unknown step `{other}`")),
    };
    let (ok, detail) = match result {
        Ok(d) => (true, d),
        Err(d) => (false, d),
    };
    Outcome {
        name,
        ok,
        detail,
        took: start.elapsed(),
        tests,
    }
}

fn step_loom(tests: &mut Option<Counts>) -> Result<String, String> {
    let preemptions = std::env::var("LOOM_MAX_PREEMPTIONS").unwrap_or_else(|_| "2".into());
    let mut total = Counts::default();
    let mut ran = Vec::new();
    let mut failed = Vec::new();
    for (krate, cfg) in LOOM_CRATES {
        if !crate_has(krate, "tests/loom.rs") {
            continue;
        }
        let mut c = cargo();
        c.args(["test", "-p", krate, "--test", "loom", "--release"])
            .env("RUSTFLAGS", format!("--cfg {cfg}"))
            .env("LOOM_MAX_PREEMPTIONS", &preemptions)
            // A separate target dir keeps the loom cfg from invalidating the
            // normal build cache.
            .env(
                "CARGO_TARGET_DIR",
                workspace_root().join("target").join("loom"),
            );
        let (ok, out) = run_tee(c)?;
        let n = count_tests(&out);
        total.add(n);
        ran.push(*krate);
        if !ok || n.failed > 0 {
            failed.push(*krate);
        }
    }
    *tests = Some(total);
    if !failed.is_empty() {
        return Err(format!("loom failed in {}", failed.join(", ")));
    }
    if ran.is_empty() {
        Ok("no crate has loom tests yet".into())
    } else {
        Ok(format!("{} models in {}", total.passed, ran.join(", ")))
    }
}

/// verbs-tm's `ibverbs` feature (the C shim over the system libibverbs):
/// lint it, and run the shim against its C test double of the verbs
/// context (no NIC needed).
fn step_ibverbs(tests: &mut Option<Counts>) -> Result<String, String> {
    let mut c = cargo();
    c.args([
        "clippy",
        "-p",
        "verbs-tm",
        "--features",
        "ibverbs",
        "--all-targets",
    ])
    .args(["--", "-D", "warnings"]);
    if !run_plain(c)? {
        return Err("clippy reported problems with --features ibverbs".into());
    }
    let mut c = cargo();
    c.args([
        "test",
        "-p",
        "verbs-tm",
        "--features",
        "ibverbs",
        "--test",
        "ibverbs_shim",
    ])
    .env("TMX_REQUIRE_SYSTEM_PACKAGES", "1");
    let (ok, out) = run_tee(c)?;
    let n = count_tests(&out);
    *tests = Some(n);
    if ok && n.failed == 0 && n.passed > 0 {
        Ok("clippy clean; shim test double passed".into())
    } else {
        Err(format!(
            "shim test: {} passed, {} failed",
            n.passed, n.failed
        ))
    }
}

pub(crate) fn run_ci(args: &[String]) -> Result<(), String> {
    env_count("TMX_PROPTEST_CASES", 2000, 1, 10_000_000)?;
    let selected: Vec<&'static str> = if args.is_empty() {
        STEPS.to_vec()
    } else {
        let mut v = Vec::new();
        for a in args {
            let step = STEPS
                .iter()
                .find(|s| **s == a.as_str())
                .ok_or_else(|| format!("unknown step `{a}`; steps: {}", STEPS.join(" ")))?;
            v.push(*step);
        }
        v
    };
    let start = Instant::now();
    let mut outcomes = Vec::new();
    for step in selected {
        println!("\n==== xtask ci: {step} ====");
        let o = run_step(step);
        println!(
            "==== {step}: {} ({})",
            if o.ok { "ok" } else { "FAILED" },
            o.detail
        );
        outcomes.push(o);
    }
    let mut total = Counts::default();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n==== xtask ci summary ====");
    let _ = writeln!(out, "{:<10} {:<7} {:>8}  detail", "step", "result", "time");
    for o in &outcomes {
        if let Some(n) = o.tests {
            total.add(n);
        }
        let _ = writeln!(
            out,
            "{:<10} {:<7} {:>7.1}s  {}",
            o.name,
            if o.ok { "ok" } else { "FAILED" },
            o.took.as_secs_f64(),
            o.detail.lines().next().unwrap_or("")
        );
    }
    let failed: Vec<&str> = outcomes.iter().filter(|o| !o.ok).map(|o| o.name).collect();
    let _ = writeln!(
        out,
        "total: {:.1}s; tests: {} passed, {} failed, {} ignored (ignored = heavy tests, run in the proptest step)",
        start.elapsed().as_secs_f64(),
        total.passed,
        total.failed,
        total.ignored
    );
    // The plain closing line CI tooling reads.
    let _ = writeln!(out, "{} passed, {} failed", total.passed, total.failed);
    drop(out);
    for o in outcomes.iter().filter(|o| !o.ok) {
        eprintln!("\nstep `{}` failed:\n{}", o.name, o.detail);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("failed steps: {}", failed.join(", ")))
    }
}

pub(crate) fn run_bench(args: &[String]) -> Result<(), String> {
    if let Some((first, rest)) = args.split_first() {
        if first == "ab" {
            return ab::run_ab(rest);
        }
        if first == "abi" {
            return abi::run_abi(rest);
        }
        if first == "internode" {
            return crate::internode::run(rest);
        }
    }
    let root = workspace_root();
    let mut crates: Vec<String> = Vec::new();
    if args.is_empty() {
        for (krate, _) in LOOM_CRATES
            .iter()
            .chain(&[("tm-proto", ""), ("launcher", "")])
        {
            if root.join(krate).join("benches").is_dir() {
                crates.push((*krate).to_string());
            }
        }
        if root.join("adi/examples/osu.rs").is_file() && !crates.iter().any(|c| c == "adi") {
            crates.push("adi".into());
        }
    } else {
        crates.extend(args.iter().cloned());
    }
    if crates.is_empty() {
        return Err("no crate has benchmarks yet".into());
    }
    for krate in &crates {
        if krate == "shmem-onesided" {
            run_shmem_bench()?;
            continue;
        }
        if krate == "adi" {
            run_adi_bench()?;
            continue;
        }
        if krate == "internode" {
            crate::internode::run(&[])?;
            continue;
        }
        if krate == "adi-pairs" {
            run_adi_pairs()?;
            continue;
        }
        if krate == "state" {
            for _ in 0..5 {
                println!("machine state: {}", state::probe().describe());
                std::thread::sleep(Duration::from_millis(200));
            }
            continue;
        }
        let mut c = cargo();
        c.args(["bench", "-p", krate]);
        if !run_plain(c)? {
            return Err(format!("benchmarks of {krate} failed"));
        }
    }
    Ok(())
}

/// The MPICH ping-pong kept next to shmem-onesided's benchmark.
const MPICH_PINGPONG: &str = "shmem-onesided/bench/mpich_pingpong.c";
/// Interleaved rounds of (MPICH, tmx) in one `cargo xtask bench` run; each
/// side's figure is its best over the rounds (the machine is noisy).
const SHMEM_BENCH_ROUNDS: usize = 5;

/// shmem-onesided: builds the MPICH C ping-pong, runs it and our benchmark
/// alternately, and prints one table of both.
fn run_shmem_bench() -> Result<(), String> {
    let root = workspace_root();
    let mpich = build_mpich(&root, MPICH_PINGPONG, "mpich_pingpong")?;
    let mut ours = Figures::default();
    let mut theirs = Figures::default();
    for round in 1..=SHMEM_BENCH_ROUNDS {
        if let Some(bin) = &mpich {
            let out = run_mpich_pair(bin, "MPICH ping-pong")?;
            theirs.merge(&out, "mpich");
        }
        let mut c = cargo();
        c.args(["bench", "-p", "shmem-onesided", "--bench", "pingpong"]);
        let (ok, out) = run_captured(c)?;
        if !ok {
            return Err("benchmarks of shmem-onesided failed".into());
        }
        ours.merge(&out, "");
        println!("(round {round} of {SHMEM_BENCH_ROUNDS} done)");
    }
    println!(
        "\n==== shmem-onesided vs MPICH ({SHMEM_BENCH_ROUNDS} interleaved rounds, best of each) ====\n"
    );
    print!("{}", shmem_table(&ours, mpich.is_some().then_some(&theirs)));
    Ok(())
}

/// Compiles the C program `src` (relative to the workspace) with
/// `mpicc.mpich` into the target directory as `name`; `None` (after saying
/// what to install) when MPICH is missing.
pub(crate) fn build_mpich(root: &Path, src: &str, name: &str) -> Result<Option<PathBuf>, String> {
    let missing: Vec<String> = SYSTEM_PACKAGES
        .iter()
        .filter(|(prog, pkg, _)| matches!(*pkg, "mpich" | "libmpich-dev") && !on_path(prog))
        .map(|(prog, pkg, _)| format!("{prog} (package {pkg})"))
        .collect();
    if !missing.is_empty() {
        println!(
            "MPICH baseline skipped: missing {}.\nInstall it with\n  sudo apt-get install -y mpich libmpich-dev\n",
            missing.join(", ")
        );
        return Ok(None);
    }
    let target = target_dir(root);
    std::fs::create_dir_all(&target).map_err(|e| format!("{}: {e}", target.display()))?;
    let bin = target.join(name);
    let mut c = Command::new("mpicc.mpich");
    c.args(["-O2", "-Wall", "-o"]).arg(&bin).arg(root.join(src));
    if !run_plain(c)? {
        return Err(format!("compiling {src} failed"));
    }
    Ok(Some(bin))
}

/// `$CARGO_TARGET_DIR` (relative to the workspace) or `target`.
pub(crate) fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|t| if t.is_relative() { root.join(t) } else { t })
        .unwrap_or_else(|| root.join("target"))
}

/// The MPICH side of adi's OSU-style benchmark.
pub(crate) const MPICH_OSU: &str = "adi/bench/mpich_osu.c";
/// Interleaved rounds of (MPICH, tmx) in one `cargo xtask bench adi`
/// (`TMX_BENCH_ROUNDS` overrides it).
const ADI_BENCH_ROUNDS: usize = 5;

/// The number of rounds: `TMX_BENCH_ROUNDS` (1 to 100) or `default`.
pub(crate) fn bench_rounds(default: usize) -> Result<usize, String> {
    env_count("TMX_BENCH_ROUNDS", default, 1, 100)
}

/// adi: our `osu` example under `tmrun -n 2 --bind-to core`, and the same
/// measurements over Debian's MPICH under `mpiexec.hydra -n 2 -bind-to core`,
/// alternately; one table with ratios for 1 B–4 MiB.
fn run_adi_bench() -> Result<(), String> {
    let root = workspace_root();
    let mpich = build_mpich(&root, MPICH_OSU, "mpich_osu")?;
    let rel = build_osu(&root)?;
    let rounds = bench_rounds(ADI_BENCH_ROUNDS)?;
    let mut ours = Figures::default();
    let mut theirs = Figures::default();
    // Each round's pair of runs, for the paired ratios, and the machine's
    // state before each of the two (see `state.rs`).
    let mut pairs = Vec::new();
    let mut states = Vec::new();
    for round in 1..=rounds {
        let (mut o, mut t) = (Figures::default(), Figures::default());
        let (mut before_tmx, mut before_mpich) = (State::Unknown, State::Unknown);
        // Odd rounds run MPICH first, even ones tmx first, so that a drift
        // of the machine's speed within a round favours neither side.
        for mpich_turn in if round % 2 == 1 {
            [true, false]
        } else {
            [false, true]
        } {
            if mpich_turn {
                if let Some(bin) = &mpich {
                    before_mpich = state::probe();
                    let out = run_mpich_pair(bin, "MPICH OSU benchmark")?;
                    theirs.merge(&out, "mpich");
                    t.merge(&out, "mpich");
                }
            } else {
                before_tmx = state::probe();
                let out = run_tmrun_pair(&rel, "osu")?;
                ours.merge(&out, "tmx");
                o.merge(&out, "tmx");
            }
        }
        pairs.push((o, t));
        states.push((before_tmx, before_mpich));
        println!(
            "(round {round} of {rounds} done; machine state before tmx {}, before MPICH {})",
            before_tmx.describe(),
            before_mpich.describe()
        );
    }
    println!(
        "\n==== adi (osu example) vs MPICH ({rounds} interleaved rounds, best of each) ====\n"
    );
    println!(
        "thread level: tmx `adi::init_thread(Funneled)` (one thread owns the device, no core \
         lock; osu --threads multiple for the locked mode), MPICH `MPI_Init` (MPI_THREAD_SINGLE)\n"
    );
    print!("{}", adi_table(&ours, mpich.is_some().then_some(&theirs)));
    if mpich.is_some() {
        println!(
            "\n==== the same runs, paired: each round's tmx figure over the same round's MPICH \
             figure (> 1: tmx is better); median, and the lowest and highest of the {rounds} \
             rounds ====\n"
        );
        print!("{}", paired_table(&pairs));
        print!("{}", paired_by_state(&pairs, &states));
    }
    run_adi_rma_bench(&root, &rel, rounds)
}

/// Builds `tmrun` and adi's `osu` example (release); returns the release
/// directory that holds them.
pub(crate) fn build_osu(root: &Path) -> Result<PathBuf, String> {
    let mut c = cargo();
    c.args([
        "build",
        "--release",
        "-p",
        "launcher",
        "--bin",
        "tmrun",
        "-p",
        "adi",
        "--example",
        "osu",
    ]);
    if !run_plain(c)? {
        return Err("building tmrun and adi's osu example failed".into());
    }
    Ok(target_dir(root).join("release"))
}

/// Short paired runs of `adi-pairs` per (test, size): `TMX_BENCH_PAIRS`.
const ADI_PAIRS: usize = 6;
/// Largest size of `adi-pairs`: `TMX_BENCH_PAIR_MAX_BYTES`.
const ADI_PAIR_MAX: u64 = 64 << 10;

/// `cargo xtask bench adi-pairs`: the comparison with MPICH that the
/// machine's changes of speed do not decide. For each test (latency,
/// bandwidth, bi-bandwidth) and each size from `TMX_BENCH_PAIR_MIN_BYTES`
/// (default 1 B, rounded up to a power of two) to `TMX_BENCH_PAIR_MAX_BYTES`
/// (default 64 KiB), `TMX_BENCH_PAIRS` (default 6) times: MPICH, tmx, tmx,
/// MPICH, each a run of that one size of that one test (`osu` and
/// `mpich_osu` with `--tests`, `--min-size`, `--max-size`; a fraction of a
/// second each), so that each tmx run has an MPICH run right beside it.
/// Prints per size the median of the pairs' ratios (> 1: tmx is better)
/// and their quartiles, and lists the medians below 1. The whole-range
/// rounds of `bench adi` are a minute long each: a change of the VM's
/// speed within a round (2× and more, see the adi README) decides their
/// ratios; here a pair is about a second apart.
fn run_adi_pairs() -> Result<(), String> {
    let root = workspace_root();
    let Some(mpich) = build_mpich(&root, MPICH_OSU, "mpich_osu")? else {
        return Err("adi-pairs needs Debian's mpich (mpicc.mpich, mpiexec.hydra)".into());
    };
    let rel = build_osu(&root)?;
    for (old, new) in [
        ("TMX_BENCH_PAIR_MAX", "TMX_BENCH_PAIR_MAX_BYTES"),
        ("TMX_BENCH_PAIR_MIN", "TMX_BENCH_PAIR_MIN_BYTES"),
    ] {
        if std::env::var_os(old).is_some() {
            return Err(format!("{old} is no longer read: it was renamed {new}"));
        }
    }
    let pairs = env_count("TMX_BENCH_PAIRS", ADI_PAIRS, 1, 1000)?;
    let max = env_count(
        "TMX_BENCH_PAIR_MAX_BYTES",
        ADI_PAIR_MAX as usize,
        1,
        4 << 20,
    )? as u64;
    let min = env_count("TMX_BENCH_PAIR_MIN_BYTES", 1, 1, 4 << 20)? as u64;
    let one = |tmx: bool, test: &str, b: u64| -> Result<f64, String> {
        let size = b.to_string();
        let mut cmd = if tmx {
            let mut c = Command::new(rel.join("tmrun"));
            c.args(["-n", "2", "--bind-to", "core"])
                .arg(rel.join("examples").join("osu"))
                .args([
                    "--raw",
                    "--tests",
                    if test == "lat" { "latency" } else { test },
                ]);
            c
        } else {
            let mut c = Command::new("mpiexec.hydra");
            c.args(["-n", "2", "-bind-to", "core"]).arg(&mpich).args([
                "--no-one-buffer",
                "--tests",
                test,
            ]);
            c
        };
        cmd.args(["--min-size", &size, "--max-size", &size]);
        let out = cmd
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot start `{}`: {e}", show(&cmd)))?;
        if !out.status.success() {
            return Err(format!("`{}` failed", show(&cmd)));
        }
        let mut f = Figures::default();
        f.merge(&String::from_utf8_lossy(&out.stdout), "x");
        f.get(test, "x", b)
            .ok_or_else(|| format!("`{}` printed no {test} figure for {b} B", show(&cmd)))
    };
    println!(
        "\n==== adi (osu) vs MPICH, one size at a time: {pairs} x (MPICH, tmx, tmx, MPICH) per \
         size; median of the pairs' ratios (> 1: tmx is better) and quartiles ====\n"
    );
    let mut s = String::from(
        "| size | lat median | lat quartiles | bw median | bw quartiles | bibw median | bibw quartiles |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut below = Vec::new();
    let mut b = 1u64;
    while b < min {
        b *= 2;
    }
    while b <= max {
        s.push_str(&format!("| {} |", size_name(b)));
        for test in ["lat", "bw", "bibw"] {
            let mut r = Vec::with_capacity(2 * pairs);
            for _ in 0..pairs {
                let m1 = one(false, test, b)?;
                let t1 = one(true, test, b)?;
                let t2 = one(true, test, b)?;
                let m2 = one(false, test, b)?;
                r.extend(ratio(test, Some(t1), Some(m1)));
                r.extend(ratio(test, Some(t2), Some(m2)));
            }
            r.sort_by(f64::total_cmp);
            match median(&r) {
                Some(m) => {
                    let n = r.len();
                    s.push_str(&format!(
                        " {m:.2} | {:.2}–{:.2} |",
                        r[n / 4],
                        r[(3 * n) / 4]
                    ));
                    if m < 1.0 {
                        below.push(format!("{test} {} ({m:.2})", size_name(b)));
                    }
                }
                None => s.push_str(" – | – |"),
            }
        }
        s.push('\n');
        println!("({} done)", size_name(b));
        b *= 2;
    }
    print!("\n{s}");
    if below.is_empty() {
        println!("\nEvery median is at or above 1.");
    } else {
        println!("\nMedians below 1: {}.", below.join(", "));
    }
    Ok(())
}

/// An integer from `lo` to `hi` in environment variable `var`, or `default`.
fn env_count(var: &str, default: usize, lo: usize, hi: usize) -> Result<usize, String> {
    match std::env::var(var) {
        Err(std::env::VarError::NotPresent) => Ok(default),
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(format!(
                "{var}={v:?}: expected an integer from {lo} to {hi}"
            )),
        },
        Err(e) => Err(format!("{var}: {e}")),
    }
}

/// Per size and measurement, the ratios of the rounds' (tmx, MPICH)
/// figures (> 1: tmx is better): median, lowest and highest. The best-of
/// table compares each side's luckiest run, which on a machine whose speed
/// moves by 2× within minutes can be from different phases; a pair ran
/// back to back, and the median of the pairs is what a phase does not
/// decide. A closing line lists the sizes whose median is below 1.
fn paired_table(pairs: &[(Figures, Figures)]) -> String {
    let all: Vec<&(Figures, Figures)> = pairs.iter().collect();
    let mut s = String::from(
        "| size | lat ratio median | lat lowest–highest | bw ratio median | bw lowest–highest | bibw ratio median | bibw lowest–highest |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let rows = paired_rows(&all);
    for (b, cells) in &rows {
        s.push_str(&format!("| {} |", size_name(*b)));
        for cell in cells {
            match cell {
                Some((m, lo, hi)) => s.push_str(&format!(" {m:.2} | {lo:.2}–{hi:.2} |")),
                None => s.push_str(" – | – |"),
            }
        }
        s.push('\n');
    }
    s.push_str(&format!("\n{}\n", below_one("Paired medians", &rows)));
    s
}

/// The kinds of figure of the paired tables, in column order.
const PAIRED_KINDS: [&str; 3] = ["lat", "bw", "bibw"];

/// One cell of a paired table: the median, lowest and highest of the
/// per-round ratios (`None` without any).
type PairedCell = Option<(f64, f64, f64)>;

/// Per size (ascending), per kind of [`PAIRED_KINDS`]: the cell of the
/// per-round ratios of `pairs`.
fn paired_rows(pairs: &[&(Figures, Figures)]) -> Vec<(u64, [PairedCell; 3])> {
    let mut sizes: Vec<u64> = pairs.iter().flat_map(|(o, _)| o.sizes()).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|b| {
            let cells = PAIRED_KINDS.map(|kind| {
                let mut r: Vec<f64> = pairs
                    .iter()
                    .filter_map(|(o, t)| {
                        ratio(kind, o.get(kind, "tmx", b), t.get(kind, "mpich", b))
                    })
                    .collect();
                r.sort_by(f64::total_cmp);
                median(&r).map(|m| (m, r[0], r[r.len() - 1]))
            });
            (b, cells)
        })
        .collect()
}

/// The medians of `rows` below 1, as `"{what} below 1: bw 64 B (0.95),
/// ..."`, or that every one is at or above 1.
fn below_one(what: &str, rows: &[(u64, [PairedCell; 3])]) -> String {
    let mut below: Vec<String> = Vec::new();
    for (b, cells) in rows {
        for (kind, cell) in PAIRED_KINDS.iter().zip(cells) {
            if let Some((m, _, _)) = cell.filter(|&(m, _, _)| m < 1.0) {
                below.push(format!("{kind} {} ({m:.2})", size_name(*b)));
            }
        }
    }
    if below.is_empty() {
        format!("{what}: every one at or above 1.")
    } else {
        format!("{what} below 1: {}.", below.join(", "))
    }
}

/// The paired medians again, of the rounds in which the probe found the
/// machine fast before both programs, and of those in which it found it
/// slow before both ([`state`]); rounds of mixed or unknown state are
/// left out of both.
fn paired_by_state(pairs: &[(Figures, Figures)], states: &[(State, State)]) -> String {
    let of = |slow: bool| -> Vec<&(Figures, Figures)> {
        pairs
            .iter()
            .zip(states)
            .filter(|(_, s)| match s {
                (State::Fast(_), State::Fast(_)) => !slow,
                (State::Slow(_), State::Slow(_)) => slow,
                _ => false,
            })
            .map(|(p, _)| p)
            .collect()
    };
    let mut s = format!(
        "\nBy the machine's state before both programs of a round (cache-line round trip \
         below or at least {:.0} ns; `xtask/src/state.rs`):\n",
        state::SLOW_NS
    );
    for (name, slow) in [("fast", false), ("slow", true)] {
        let rounds = of(slow);
        s.push_str(&format!(
            "- {name}: {} of {} rounds",
            rounds.len(),
            pairs.len()
        ));
        if rounds.is_empty() {
            s.push_str(".\n");
        } else {
            let rows = paired_rows(&rounds);
            s.push_str(&format!("; {}\n", below_one("paired medians", &rows)));
        }
    }
    s
}

/// The median of sorted `v` (the mean of the middle two when even).
fn median(v: &[f64]) -> Option<f64> {
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The MPICH side of adi's RMA benchmark.
const MPICH_RMA: &str = "adi/bench/mpich_rma.c";

/// RMA windows (`osu_rma --raw` under tmrun, `mpich_rma` under Hydra),
/// then non-contiguous sends (`osu_ddt --raw`, `mpich_ddt`), each pair
/// alternately; one table (test × size) each, with ratios (> 1: tmx is
/// better).
fn run_adi_rma_bench(root: &Path, rel: &Path, rounds: usize) -> Result<(), String> {
    run_pair_bench(
        root,
        rel,
        rounds,
        (MPICH_RMA, "mpich_rma"),
        "osu_rma",
        "RMA",
        "adi RMA windows (osu_rma)",
    )?;
    run_pair_bench(
        root,
        rel,
        rounds,
        (MPICH_DDT, "mpich_ddt"),
        "osu_ddt",
        "datatype",
        "adi non-contiguous sends, MPI_Type_vector(n, 1, 2, MPI_DOUBLE) (osu_ddt; size = packed bytes)",
    )
}

/// The MPICH side of adi's datatype benchmark.
const MPICH_DDT: &str = "adi/bench/mpich_ddt.c";

/// Runs adi's `example --raw` and the MPICH program `mpich_src` (built as
/// `mpich_name`) alternately for `rounds` rounds; both print
/// `test bytes value` lines (a test whose name contains `_bw_` is a
/// bandwidth, higher is better; anything else a time, lower is better).
/// Prints one table (test × size) of each side's best with ratios (> 1:
/// tmx is better).
fn run_pair_bench(
    root: &Path,
    rel: &Path,
    rounds: usize,
    (mpich_src, mpich_name): (&str, &str),
    example: &str,
    what: &str,
    title: &str,
) -> Result<(), String> {
    let mpich = build_mpich(root, mpich_src, mpich_name)?;
    let mut c = cargo();
    c.args(["build", "--release", "-p", "adi", "--example", example]);
    if !run_plain(c)? {
        return Err(format!("building adi's {example} example failed"));
    }
    type Best = std::collections::BTreeMap<(String, u64), f64>;
    let merge = |best: &mut Best, out: &str| {
        for line in out.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let [test, bytes, value] = w.as_slice() else {
                continue;
            };
            let (Ok(bytes), Ok(value)) = (bytes.parse::<u64>(), value.parse::<f64>()) else {
                continue;
            };
            let bw = test.contains("_bw_");
            let e = best.entry((test.to_string(), bytes)).or_insert(if bw {
                0.0
            } else {
                f64::INFINITY
            });
            *e = if bw { e.max(value) } else { e.min(value) };
        }
    };
    let (mut ours, mut theirs) = (Best::new(), Best::new());
    for round in 1..=rounds {
        if let Some(bin) = &mpich {
            let out = run_mpich_pair(bin, &format!("MPICH {what} benchmark"))?;
            merge(&mut theirs, &out);
        }
        let out = run_tmrun_pair(rel, example)?;
        merge(&mut ours, &out);
        println!("({what} round {round} of {rounds} done)");
    }
    println!("\n==== {title} vs MPICH ({rounds} interleaved rounds, best of each) ====\n");
    let mut s = String::from("| test | size | tmx | MPICH | ratio |\n|---|---:|---:|---:|---:|\n");
    for ((test, b), v) in &ours {
        let bw = test.contains("_bw_");
        let m = theirs.get(&(test.clone(), *b)).copied();
        let prec = if bw { 0 } else { 2 };
        let ratio = match m {
            Some(m) if m > 0.0 && *v > 0.0 => format!("{:.2}", if bw { v / m } else { m / v }),
            _ => "–".into(),
        };
        let unit = if bw { "MB/s" } else { "µs" };
        s.push_str(&format!(
            "| {test} ({unit}) | {} | {v:.prec$} | {} | {ratio} |\n",
            size_name(*b),
            m.map_or("–".into(), |m| format!("{m:.prec$}"))
        ));
    }
    print!("{s}");
    Ok(())
}

/// One Markdown table: per size, latency, bandwidth and bi-bandwidth of tmx
/// and MPICH with the ratio (> 1: tmx is better). MPICH's bandwidths are
/// measured as ours, each operation of a window with its own buffer; its
/// OSU-classic figures (one buffer for the whole window, path `one`) follow
/// each bandwidth group without a ratio.
fn adi_table(ours: &Figures, mpich: Option<&Figures>) -> String {
    let cell = |v: Option<f64>, prec: usize| v.map_or("–".to_string(), |v| format!("{v:.prec$}"));
    let sizes = ours.sizes();
    let mut s = String::from(
        "| size | lat µs tmx | lat µs MPICH | ratio | bw MB/s tmx | bw MB/s MPICH | ratio | bw MPICH one buffer | bibw MB/s tmx | bibw MB/s MPICH | ratio | bibw MPICH one buffer |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for b in sizes {
        s.push_str(&format!("| {} |", size_name(b)));
        for kind in ["lat", "bw", "bibw"] {
            let t = ours.get(kind, "tmx", b);
            let m = mpich.and_then(|f| f.get(kind, "mpich", b));
            let ratio = ratio(kind, t, m);
            let prec = if kind == "lat" { 2 } else { 0 };
            s.push_str(&format!(
                " {} | {} | {} |",
                cell(t, prec),
                cell(m, prec),
                cell(ratio, 2)
            ));
            if kind != "lat" {
                // OSU's classic form: one buffer for the whole window.
                let one = mpich.and_then(|f| f.get(kind, "one", b));
                s.push_str(&format!(" {} |", cell(one, 0)));
            }
        }
        s.push('\n');
    }
    s
}

/// Runs the MPICH program `bin` on 2 ranks pinned to cores under Hydra and
/// returns its output; `what` names it in the error.
fn run_mpich_pair(bin: &Path, what: &str) -> Result<String, String> {
    let mut c = Command::new("mpiexec.hydra");
    c.args(["-n", "2", "-bind-to", "core"]).arg(bin);
    let (ok, out) = run_captured(c)?;
    if ok {
        Ok(out)
    } else {
        Err(format!("the {what} failed"))
    }
}

/// Runs adi's `example --raw` on 2 ranks pinned to cores under tmrun (both
/// in the release dir `rel`) and returns its output.
fn run_tmrun_pair(rel: &Path, example: &str) -> Result<String, String> {
    let mut c = Command::new(rel.join("tmrun"));
    c.args(["-n", "2", "--bind-to", "core"])
        .arg(rel.join("examples").join(example))
        .arg("--raw");
    let (ok, out) = run_captured(c)?;
    if ok {
        Ok(out)
    } else {
        Err(format!("adi's {example} example failed under tmrun"))
    }
}

/// Runs `cmd`, echoing its standard output line by line, and returns it too.
pub(crate) fn run_captured(mut cmd: Command) -> Result<(bool, String), String> {
    println!("\n$ {}", show(&cmd));
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{}`: {e}", show(&cmd)))?;
    let mut all = String::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.map_err(|e| format!("reading `{}`: {e}", show(&cmd)))?;
            println!("{line}");
            all.push_str(&line);
            all.push('\n');
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for `{}`: {e}", show(&cmd)))?;
    Ok((status.success(), all))
}

/// Benchmark figures keyed by (path, bytes); the best of every merge.
#[derive(Debug, Default)]
struct Figures {
    /// one-way latency, µs (lower is better)
    lat: std::collections::BTreeMap<(String, u64), f64>,
    /// bandwidth, MB/s (higher is better)
    bw: std::collections::BTreeMap<(String, u64), f64>,
    /// bi-directional bandwidth, MB/s (higher is better)
    bibw: std::collections::BTreeMap<(String, u64), f64>,
    /// single-thread memcpy, MB/s
    memcpy: std::collections::BTreeMap<u64, f64>,
    /// the bare-ring 8-byte latency of every merged run, µs: shows which
    /// phase the (noisy) machine was in
    ring: Vec<f64>,
}

/// tmx's figure over MPICH's for `kind` (`lat`: MPICH's time over ours),
/// so that > 1 means tmx is better; `None` without both.
fn ratio(kind: &str, tmx: Option<f64>, mpich: Option<f64>) -> Option<f64> {
    match (tmx, mpich) {
        (Some(t), Some(m)) if t > 0.0 && m > 0.0 => Some(if kind == "lat" { m / t } else { t / m }),
        _ => None,
    }
}

impl Figures {
    /// Every size with a latency, bandwidth or bi-bandwidth figure, sorted.
    fn sizes(&self) -> Vec<u64> {
        let mut v: Vec<u64> = (self
            .lat
            .keys()
            .chain(self.bw.keys())
            .chain(self.bibw.keys()))
        .map(|k| k.1)
        .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The figure of `kind` (`lat`, `bw` or `bibw`) for `path` at `b` bytes.
    fn get(&self, kind: &str, path: &str, b: u64) -> Option<f64> {
        let m = match kind {
            "lat" => &self.lat,
            "bw" => &self.bw,
            _ => &self.bibw,
        };
        m.get(&(path.to_string(), b)).copied()
    }

    /// Reads `lat [path] <bytes> <usec>`, `bw`/`bibw [path] <bytes> <MB/s>` and
    /// `memcpy <bytes> <MB/s>` lines; a line without a path gets `default_path`.
    fn merge(&mut self, output: &str, default_path: &str) {
        for line in output.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            let (kind, path, bytes, value) = match w.as_slice() {
                [k, b, v] => (*k, default_path, *b, *v),
                [k, p, b, v] => (*k, *p, *b, *v),
                _ => continue,
            };
            let (Ok(bytes), Ok(value)) = (bytes.parse::<u64>(), value.parse::<f64>()) else {
                continue;
            };
            if (kind, path) == ("lat", "ring") {
                self.ring.push(value);
            }
            let key = (path.to_string(), bytes);
            match kind {
                "lat" => {
                    let e = self.lat.entry(key).or_insert(f64::INFINITY);
                    *e = e.min(value);
                }
                "bw" => {
                    let e = self.bw.entry(key).or_insert(0.0);
                    *e = e.max(value);
                }
                "bibw" => {
                    let e = self.bibw.entry(key).or_insert(0.0);
                    *e = e.max(value);
                }
                "memcpy" if path == default_path => {
                    let e = self.memcpy.entry(bytes).or_insert(0.0);
                    *e = e.max(value);
                }
                _ => {}
            }
        }
    }
}

/// Our paths, in table order.
const SHMEM_PATHS: &[&str] = &["inline", "eager", "prepost", "cma"];

fn size_name(b: u64) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else if b >= 1 << 10 && b % (1 << 10) == 0 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// One Markdown table: latency rows then bandwidth rows, every tmx path, the
/// best of them, MPICH, the ratio (> 1: tmx is better) and, for bandwidth,
/// memcpy and the best path's share of it.
fn shmem_table(ours: &Figures, mpich: Option<&Figures>) -> String {
    let cell = |v: Option<f64>, prec: usize| v.map_or("–".to_string(), |v| format!("{v:.prec$}"));
    let mut s = String::new();
    s.push_str("| | size |");
    for p in SHMEM_PATHS {
        s.push_str(&format!(" {p} |"));
    }
    s.push_str(" best tmx | MPICH | ratio | memcpy | best / memcpy |\n|---|---:|");
    s.push_str(&"---:|".repeat(SHMEM_PATHS.len() + 5));
    s.push('\n');
    for (is_lat, unit) in [(true, "lat µs"), (false, "bw MB/s")] {
        let (mine, theirs) = if is_lat {
            (&ours.lat, mpich.map(|m| &m.lat))
        } else {
            (&ours.bw, mpich.map(|m| &m.bw))
        };
        let mut sizes: Vec<u64> = mine
            .keys()
            .filter(|(p, _)| SHMEM_PATHS.contains(&p.as_str()))
            .map(|k| k.1)
            .chain(theirs.into_iter().flat_map(|t| t.keys().map(|k| k.1)))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        let prec = if is_lat { 2 } else { 0 };
        for b in sizes {
            s.push_str(&format!("| {unit} | {} |", size_name(b)));
            let mut best: Option<(f64, &str)> = None;
            for p in SHMEM_PATHS {
                let v = mine.get(&(p.to_string(), b)).copied();
                s.push_str(&format!(" {} |", cell(v, prec)));
                if let Some(v) = v {
                    let better = best.is_none_or(|(bv, _)| if is_lat { v < bv } else { v > bv });
                    if better {
                        best = Some((v, p));
                    }
                }
            }
            let m = theirs.and_then(|t| t.get(&("mpich".to_string(), b)).copied());
            let ratio = match (best, m) {
                (Some((v, _)), Some(m)) if v > 0.0 && m > 0.0 => {
                    Some(if is_lat { m / v } else { v / m })
                }
                _ => None,
            };
            let best_cell = best.map_or("–".to_string(), |(v, p)| format!("{v:.prec$} ({p})"));
            s.push_str(&format!(
                " {best_cell} | {} | {} |",
                cell(m, prec),
                cell(ratio, 2)
            ));
            if is_lat {
                s.push_str(" | |\n");
            } else {
                let mc = ours.memcpy.get(&b).copied();
                let share = match (best, mc) {
                    (Some((v, _)), Some(mc)) if mc > 0.0 => Some(format!("{:.0}%", 100.0 * v / mc)),
                    _ => None,
                };
                s.push_str(&format!(
                    " {} | {} |\n",
                    cell(mc, 0),
                    share.unwrap_or_else(|| "–".into())
                ));
            }
        }
    }
    if !ours.ring.is_empty() {
        let rounds: Vec<String> = ours.ring.iter().map(|r| format!("{r:.3}")).collect();
        s.push_str(&format!(
            "\nbare header ring (no endpoint), 8 B one-way, per round: {} µs \
             (≈ 0.05 when the two vCPUs are placed well; higher means a slow phase)\n",
            rounds.join(", ")
        ));
    }
    s.push_str(
        "\nratio: MPICH / tmx for latency, tmx / MPICH for bandwidth (> 1: tmx is better); \
         best tmx = best path at that size; memcpy = single-thread, same run.\n",
    );
    if mpich.is_none() {
        s.push_str("MPICH column empty: install `mpich libmpich-dev`.\n");
    }
    s
}

/// `cargo xtask cluster` (see [`crate::cluster`]).
pub(crate) fn run_cluster(args: &[String]) -> Result<(), String> {
    let t = crate::cluster::run(args)?;
    if t.failed == 0 {
        Ok(())
    } else {
        Err(format!("{} cluster jobs failed", t.failed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_libtest_summaries() {
        let out = "\
test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s
running 0 tests
test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
";
        let n = count_tests(out);
        assert_eq!((n.passed, n.failed, n.ignored), (15, 1, 2));
    }

    #[test]
    fn shmem_table_takes_best_of_rounds_and_computes_ratios() {
        let mut ours = Figures::default();
        ours.merge("# note\nlat inline 8 0.50\nlat eager 1024 1.00\nbw eager 1048576 20000.0\nmemcpy 1048576 40000.0\nlat ring 8 0.05\n", "");
        ours.merge("lat inline 8 0.40\nbw eager 1048576 10000.0\nbw cma 1048576 8000\nmemcpy 1048576 30000\n", "");
        let mut mpich = Figures::default();
        mpich.merge("lat 8 0.80\nlat 1024 0.50\nbw 1048576 8000.0\n", "mpich");
        mpich.merge("lat 8 1.20\n", "mpich");
        assert_eq!(ours.lat[&("inline".to_string(), 8)], 0.40);
        assert_eq!(ours.bw[&("eager".to_string(), 1 << 20)], 20000.0);
        assert_eq!(ours.memcpy[&(1 << 20)], 40000.0);
        assert_eq!(mpich.lat[&("mpich".to_string(), 8)], 0.80);
        let t = shmem_table(&ours, Some(&mpich));
        let row = |prefix: &str| {
            t.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no row {prefix} in\n{t}"))
                .to_string()
        };
        // 8 B: MPICH 0.80 / ours 0.40 = 2.00
        assert!(
            row("| lat µs | 8 B |").contains("| 0.40 (inline) | 0.80 | 2.00 |"),
            "{t}"
        );
        // 1 KiB: 0.50 / 1.00
        assert!(
            row("| lat µs | 1 KiB |").contains("| 1.00 (eager) | 0.50 | 0.50 |"),
            "{t}"
        );
        // 1 MiB: 20000 / 8000 = 2.50, and 50% of memcpy
        let bw = row("| bw MB/s | 1 MiB |");
        assert!(
            bw.contains("| 20000 (eager) | 8000 | 2.50 | 40000 | 50% |"),
            "{t}"
        );
        assert!(t.contains("per round: 0.050 µs"), "{t}");
        assert!(shmem_table(&ours, None).contains("install `mpich libmpich-dev`"));
        // every row has as many cells as the header
        let cells = |l: &str| l.matches('|').count();
        let header = t.lines().next().unwrap_or("");
        for l in t.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(cells(l), cells(header), "{l}");
        }
    }

    #[test]
    fn adi_table_compares_the_same_workload_and_shows_osu_classic() {
        let mut ours = Figures::default();
        ours.merge(
            "lat 8 0.10\nbw 1048576 20000.0\nbibw 1048576 12000.0\n",
            "tmx",
        );
        let mut mpich = Figures::default();
        mpich.merge(
            "lat 8 0.13\nbw 1048576 8000.0\nbibw 1048576 15000.0\nbw one 1048576 14000.0\nbibw one 1048576 27000.0\n",
            "mpich",
        );
        let t = adi_table(&ours, Some(&mpich));
        let row = |prefix: &str| {
            t.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no row {prefix} in\n{t}"))
                .to_string()
        };
        assert!(row("| 8 B |").contains("| 0.10 | 0.13 | 1.30 |"), "{t}");
        // ratios against the distinct-buffer figures; the classic ones follow
        assert!(
            row("| 1 MiB |")
                .contains("| 20000 | 8000 | 2.50 | 14000 | 12000 | 15000 | 0.80 | 27000 |"),
            "{t}"
        );
        let cells = |l: &str| l.matches('|').count();
        let header = t.lines().next().unwrap_or("");
        for l in t.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(cells(l), cells(header), "{l}");
        }
    }

    /// One round of the paired tables from `--raw` outputs.
    fn round(ours: &str, mpich: &str) -> (Figures, Figures) {
        let (mut o, mut t) = (Figures::default(), Figures::default());
        o.merge(ours, "tmx");
        t.merge(mpich, "mpich");
        (o, t)
    }

    #[test]
    fn paired_table_takes_the_median_of_per_round_ratios() {
        let pairs = [
            // lat 8 B: 0.10 vs 0.20 (2.00); bw 64 B: 900 vs 1000 (0.90)
            round("lat 8 0.10\nbw 64 900\n", "lat 8 0.20\nbw 64 1000\n"),
            // 1.00 and 1.20
            round("lat 8 0.20\nbw 64 1200\n", "lat 8 0.20\nbw 64 1000\n"),
            // 0.50 and 0.95; MPICH's best bw (2000) is in another round
            round("lat 8 0.40\nbw 64 1900\n", "lat 8 0.20\nbw 64 2000\n"),
        ];
        let t = paired_table(&pairs);
        let row = t
            .lines()
            .find(|l| l.starts_with("| 8 B |"))
            .unwrap_or_else(|| panic!("no 8 B row in\n{t}"));
        assert!(row.contains("| 1.00 | 0.50–2.00 |"), "{t}");
        let row = t
            .lines()
            .find(|l| l.starts_with("| 64 B |"))
            .unwrap_or_else(|| panic!("no 64 B row in\n{t}"));
        assert!(row.contains("| 0.95 | 0.90–1.20 |"), "{t}");
        assert!(t.contains("Paired medians below 1: bw 64 B (0.95)."), "{t}");
        assert_eq!(median(&[1.0, 2.0, 4.0, 8.0]), Some(3.0));
        assert_eq!(median(&[]), None);
        let cells = |l: &str| l.matches('|').count();
        let header = t.lines().next().unwrap_or("");
        for l in t.lines().filter(|l| l.starts_with('|')) {
            assert_eq!(cells(l), cells(header), "{l}");
        }
    }

    #[test]
    fn paired_medians_split_by_the_machine_state() {
        let pairs = [
            // fast: bibw 1 B 1.10
            round("bibw 1 11.0\n", "bibw 1 10.0\n"),
            // slow: 0.80
            round("bibw 1 4.0\n", "bibw 1 5.0\n"),
            // fast: 1.20
            round("bibw 1 12.0\n", "bibw 1 10.0\n"),
            // mixed (left out of both): 0.50
            round("bibw 1 5.0\n", "bibw 1 10.0\n"),
            // unknown (left out of both): 0.50
            round("bibw 1 5.0\n", "bibw 1 10.0\n"),
        ];
        let (f, s) = (State::Fast(110.0), State::Slow(450.0));
        let states = [(f, f), (s, s), (f, f), (f, s), (State::Unknown, f)];
        let t = paired_by_state(&pairs, &states);
        assert!(
            t.contains("- fast: 2 of 5 rounds; paired medians: every one at or above 1."),
            "{t}"
        );
        assert!(
            t.contains("- slow: 1 of 5 rounds; paired medians below 1: bibw 1 B (0.80)."),
            "{t}"
        );
        // All five rounds together: 0.50, 0.50, 0.80, 1.10, 1.20.
        assert!(
            paired_table(&pairs).contains("Paired medians below 1: bibw 1 B (0.80)."),
            "{}",
            paired_table(&pairs)
        );
        let none = paired_by_state(&pairs[..1], &[(s, f)]);
        assert!(none.contains("- fast: 0 of 1 rounds.\n"), "{none}");
    }

    #[test]
    fn sizes_are_named_in_binary_units() {
        assert_eq!(size_name(1), "1 B");
        assert_eq!(size_name(1024), "1 KiB");
        assert_eq!(size_name(256 << 10), "256 KiB");
        assert_eq!(size_name(4 << 20), "4 MiB");
    }

    #[test]
    fn every_step_has_a_name_the_cli_accepts() {
        for s in STEPS {
            assert!(STEPS.contains(s));
        }
        assert!(run_ci(&["nonsense".into()]).is_err());
    }
}
