//! The C suite: differential testing against MPICH.
//!
//! Every program of `c/` is compiled once with Debian's `mpicc.mpich`
//! and run, unchanged, twice for each rank count its first line names
//! (`/* ranks: 1 2 4 */`): under MPICH (`mpiexec.hydra`, with MPICH's own
//! `libmpich.so.12`) and under tmx (the launcher's library, what `tmrun`
//! runs, with this crate's `libmpich.so` first on the ranks' loader
//! path). The programs print lines `r<rank>: ...` (results, error
//! classes); each rank's lines keep their order, ranks are sorted, and the
//! two outputs and exit statuses must be identical. A program MPICH cannot
//! run (it hangs on MPICH's own send-cancel case) is compared with its
//! `<name>.out` file instead.
//!
//! Without `mpicc.mpich`/`mpiexec.hydra` the suite is skipped with a
//! printed reason, unless `TMX_REQUIRE_SYSTEM_PACKAGES` is set (as
//! `cargo xtask ci` does), when it fails. `TMX_CSUITE_FILTER=name` runs
//! only the programs whose file name contains `name`.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Per-run limit (a hang is a failure, not a stuck CI).
const TIMEOUT: Duration = Duration::from_secs(60);

fn on_path(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}

/// This crate's `libmpich.so`, beside the test binary's `deps/`.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    dir.join(launcher::mpilib::LIB_FILE)
}

/// The rank counts a program asks for (its first line).
fn rank_counts(src: &str) -> Vec<usize> {
    let first = src.lines().next().unwrap_or("");
    let v: Vec<usize> = first
        .split("ranks:")
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|w| w.trim_end_matches("*/").parse().ok())
        .collect();
    if v.is_empty() {
        vec![1, 2, 4]
    } else {
        v
    }
}

/// The lines `r<rank>: ...`, ranks in order, each rank's lines in its
/// order.
fn normalize(out: &str) -> Vec<String> {
    let mut lines: Vec<(u32, String)> = out
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('r')?;
            let (num, _) = rest.split_once(':')?;
            let r: u32 = num.parse().ok()?;
            Some((r, l.to_string()))
        })
        .collect();
    lines.sort_by_key(|(r, _)| *r);
    lines.into_iter().map(|(_, l)| l).collect()
}

/// Runs `cmd` with the time limit: its exit status (124 on timeout) and
/// standard output.
fn run_limited(mut cmd: Command) -> (i32, String) {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
    let ereader = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code().unwrap_or(128);
        }
        if start.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break 124;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = reader.join().unwrap_or_default();
    let stderr = ereader.join().unwrap_or_default();
    if code != 0 && !stderr.is_empty() {
        eprintln!("    stderr:\n{}", indent(&stderr));
    }
    (code, stdout)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("      {l}\n")).collect()
}

/// Launcher mode: `c_suite --tmrun N PROGRAM` runs the job through the
/// launcher's library with this crate's library on the loader path, and
/// exits with the job's status.
fn tmrun(n: usize, program: &str) -> ExitCode {
    let lib = library();
    let libs = lib.display().to_string();
    let env = |k: &str| {
        if k == launcher::mpilib::ENV_MPI_LIB {
            Some(libs.clone())
        } else {
            std::env::var(k).ok()
        }
    };
    let mut spec = launcher::run::JobSpec::new(n, program, Vec::new());
    spec.timeout = Some(TIMEOUT);
    spec.kill_grace = Duration::from_millis(500);
    let _dir = launcher::mpilib::MpiLibDir::prepare(&mut spec, &env).unwrap();
    let report = launcher::run::run_job(&spec).unwrap();
    ExitCode::from(u8::try_from(report.exit_code & 0xff).unwrap_or(255))
}

/// Builds this crate's library, in the profile and target directory of
/// this test: `cargo test` builds a `cdylib`-only crate's test targets
/// but not the library itself, so without this the suite would run
/// whatever `libmpich.so` an earlier `cargo build` left.
fn build_library() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // <target>/<profile directory>/deps/c_suite-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("no target directory")?;
    let target = profile_dir.parent().ok_or("no target directory")?;
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev",
        Some(other) => other,
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--quiet", "-p", "mpi-abi", "--profile", profile])
        .arg("--target-dir")
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map_err(|e| format!("cargo build -p mpi-abi: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("cargo build -p mpi-abi: {status}"))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--tmrun") {
        return tmrun(args[2].parse().unwrap(), &args[3]);
    }
    // libtest-style arguments (filters, --list) are ignored; the suite is
    // one test.
    if args.iter().any(|a| a == "--list") {
        println!("c_suite: test");
        return ExitCode::SUCCESS;
    }
    let required = std::env::var_os("TMX_REQUIRE_SYSTEM_PACKAGES").is_some();
    for prog in ["mpicc.mpich", "mpiexec.hydra"] {
        if !on_path(prog) {
            let why = format!("{prog} not found (Debian packages mpich, libmpich-dev)");
            if required {
                eprintln!("c_suite: FAILED: {why}, and TMX_REQUIRE_SYSTEM_PACKAGES is set");
                return ExitCode::FAILURE;
            }
            println!("c_suite: skipped: {why}");
            println!(
                "\ntest result: ok. 0 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out"
            );
            return ExitCode::SUCCESS;
        }
    }
    if let Err(why) = build_library() {
        eprintln!("c_suite: FAILED: {why}");
        return ExitCode::FAILURE;
    }
    let lib = library();
    assert!(lib.is_file(), "{} was not built", lib.display());
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("c");
    let out_dir = std::env::temp_dir().join(format!("tmx-csuite-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let filter = std::env::var("TMX_CSUITE_FILTER").unwrap_or_default();
    let mut programs: Vec<PathBuf> = std::fs::read_dir(&src_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(&filter))
        .collect();
    programs.sort();
    let (mut passed, mut failed) = (0usize, Vec::new());
    let t0 = Instant::now();
    for src in &programs {
        let name = src.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(src).unwrap();
        let exe = out_dir.join(&name);
        let cc = Command::new("mpicc.mpich")
            .args(["-O1", "-Wall", "-o"])
            .arg(&exe)
            .arg(src)
            .arg("-I")
            .arg(&src_dir)
            .output()
            .unwrap();
        if !cc.status.success() {
            eprintln!(
                "{name}: does not compile:\n{}",
                String::from_utf8_lossy(&cc.stderr)
            );
            failed.push(format!("{name} (compile)"));
            continue;
        }
        // A program MPICH cannot run (it hangs or crashes on it) has its
        // expected output in `<name>.out` instead, explained in its header.
        let expected = std::fs::read_to_string(src_dir.join(format!("{name}.out"))).ok();
        for n in rank_counts(&text) {
            let label = format!("{name} -n {n}");
            let (mcode, mout) = match &expected {
                Some(out) => (0, out.clone()),
                None => {
                    let mut mpich = Command::new("mpiexec.hydra");
                    mpich.args(["-n", &n.to_string()]).arg(&exe);
                    mpich.env_remove("LD_LIBRARY_PATH");
                    run_limited(mpich)
                }
            };
            let mut tmx = Command::new(std::env::current_exe().unwrap());
            tmx.args(["--tmrun", &n.to_string()]).arg(&exe);
            let (tcode, tout) = run_limited(tmx);
            let (m, t) = (normalize(&mout), normalize(&tout));
            if m == t && mcode == tcode && !m.is_empty() {
                println!("test {label} ... ok ({} lines)", m.len());
                passed += 1;
            } else {
                println!("test {label} ... FAILED");
                let reference = if expected.is_some() {
                    "expected"
                } else {
                    "MPICH"
                };
                println!("  {reference} (exit {mcode}):\n{}", indent(&m.join("\n")));
                println!("  tmx (exit {tcode}):\n{}", indent(&t.join("\n")));
                failed.push(label);
            }
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    println!(
        "\nc_suite: {} programs, {passed} runs identical under MPICH and tmx, {} differ, {:.1?}",
        programs.len(),
        failed.len(),
        t0.elapsed()
    );
    for f in &failed {
        println!("  differs: {f}");
    }
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {} failed; 0 ignored; 0 measured; 0 filtered out",
        failed.len()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
