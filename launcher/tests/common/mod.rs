//! Helpers shared by the launcher's integration tests.
#![allow(dead_code, clippy::unwrap_used)] // test helpers may unwrap

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const TMRUN: &str = env!("CARGO_BIN_EXE_tmrun");
pub const PROBE: &str = env!("CARGO_BIN_EXE_tmx-pmi-check");

/// A generous bound: teardown is required to take < 2 s; this only catches hangs.
pub const TEARDOWN_BOUND: Duration = Duration::from_secs(5);
/// Hard limit for any one launcher run in a test.
const HARD_LIMIT: Duration = Duration::from_secs(40);

#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }
    /// The job id tmrun names in its messages, or the probe prints as `job=`.
    pub fn job_id(&self) -> Option<String> {
        for text in [&self.stderr, &self.stdout] {
            for marker in ["terminating job ", "job="] {
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
        }
        None
    }
}

/// Runs `cmd` to completion with `stdin` fed in, under a watchdog
/// (SIGTERM, then SIGKILL, if it runs past the hard limit).
pub fn run_with_input(mut cmd: Command, stdin: &[u8]) -> Outcome {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        let deadline = Instant::now() + HARD_LIMIT;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return false;
            }
            if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
                if stat.split_whitespace().nth(2) == Some("Z") {
                    return false;
                }
            }
        }
        let p = nix::unistd::Pid::from_raw(pid as i32);
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGTERM);
        std::thread::sleep(Duration::from_secs(3));
        let _ = nix::sys::signal::kill(p, nix::sys::signal::Signal::SIGKILL);
        true
    });
    let out = child.wait_with_output().expect("wait");
    let elapsed = start.elapsed();
    let _ = feeder.join();
    let fired = watchdog.join().unwrap_or(false);
    let o = Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed,
    };
    assert!(!fired, "watchdog fired: the launcher hung; {o:#?}");
    o
}

pub fn run(cmd: Command) -> Outcome {
    run_with_input(cmd, b"")
}

pub fn tmrun(args: &[&str]) -> Outcome {
    let mut c = Command::new(TMRUN);
    c.args(args)
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("TMX_LOG");
    run(c)
}

/// Whether the named programs/files exist; if not, skips (prints why) or, under
/// `TMX_REQUIRE_SYSTEM_PACKAGES`, fails.
pub fn require(what: &[(&str, &str)]) -> bool {
    let missing: Vec<String> = what
        .iter()
        .filter(|(p, _)| !found(p))
        .map(|(p, pkg)| format!("{p} (Debian package {pkg})"))
        .collect();
    if missing.is_empty() {
        return true;
    }
    let msg = format!("missing system packages: {}", missing.join(", "));
    if std::env::var_os("TMX_REQUIRE_SYSTEM_PACKAGES").is_some() {
        panic!("{msg}; TMX_REQUIRE_SYSTEM_PACKAGES is set, so this is a failure");
    }
    eprintln!("SKIPPED: {msg}");
    false
}

fn found(p: &str) -> bool {
    if p.starts_with('/') {
        return Path::new(p).exists();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|d| d.join(p).is_file()))
        .unwrap_or(false)
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let p = std::env::temp_dir().join(format!(
            "tmx-launcher-test-{tag}-{}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
    pub fn str(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // Field 3 is the state; a zombie is dead, just not reaped yet.
            let after = stat.rsplit(')').next().unwrap_or("");
            !after.trim_start().starts_with('Z')
        }
    }
}

/// Every pid written into `dir/*.pid` is gone (waits up to 2 s for reaping).
/// Returns how many pids were checked.
pub fn assert_no_orphans(dir: &Path) -> usize {
    let pids: Vec<i32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let left: Vec<i32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            return pids.len();
        }
        if Instant::now() > deadline {
            for p in &left {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*p),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("orphan processes left behind: {left:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No `/dev/shm` object of the job is left.
pub fn assert_no_shm(job_id: &str) {
    let left = launcher::job::job_shm_objects(Path::new(launcher::job::SHM_DIR), job_id);
    for p in &left {
        let _ = std::fs::remove_file(p);
    }
    assert!(left.is_empty(), "shared-memory objects left: {left:?}");
}
