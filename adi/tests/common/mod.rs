//! Shared helpers of the multi-rank integration tests that use the normal
//! libtest harness (`tests/stress.rs`, `tests/bad_input.rs`).
//!
//! How a libtest binary becomes the ranks of a job: the parent test calls
//! [`launch`], which starts the *same* test binary `n` times through the
//! launcher's library (`launcher::run::run_job`, what `tmrun` runs) with
//! the arguments `--exact rank_entry_point` (so that libtest runs only that
//! one test in each rank) and the scenario's name in [`ROLE`]. The rank's
//! `rank_entry_point` test reads [`ROLE`], runs `adi::init()`, the scenario
//! and `adi::finalize()`; a failed assertion fails that test, libtest exits
//! non-zero, and the launcher reports it. `run_job` kills the job on the
//! first failure or after the timeout and removes the job's `/dev/shm`
//! objects whatever happens.
#![allow(dead_code)] // each test binary uses a subset
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use launcher::run::{run_job, JobSpec};
use std::sync::Mutex;
use std::time::Duration;

/// Environment variable carrying the scenario name to the ranks.
pub const ROLE: &str = "TMX_ADI_TEST_ROLE";

/// Jobs of one test binary run one at a time: libtest runs tests on
/// several threads, and several 4-rank jobs at once on a 2-core machine
/// would only slow each other down (and make timeouts likelier).
static JOBS: Mutex<()> = Mutex::new(());

/// Holds the one-job-at-a-time lock that [`launch`] takes, for tests that
/// call `run_job` themselves.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    JOBS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The scenario this process should run as a rank, if it is one.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// Runs the scenario `role` on `n` ranks (this test binary, filtered to
/// `rank_entry_point`), with `extra_env` added to every rank's environment;
/// returns the launcher's exit status (0 when every rank passed).
pub fn launch(role: &str, n: usize, extra_env: &[(String, String)], timeout: Duration) -> i32 {
    let _one_at_a_time = JOBS.lock().unwrap_or_else(|p| p.into_inner());
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        "rank_entry_point",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut spec = JobSpec::new(n, exe.to_string_lossy().to_string(), args);
    spec.env.push((ROLE.to_string(), role.to_string()));
    spec.env.extend(extra_env.iter().cloned());
    spec.timeout = Some(timeout);
    spec.kill_grace = Duration::from_millis(500);
    // "[rank] " before every output line: tells the ranks apart, and keeps
    // the ranks' own libtest summaries from being counted as tests of the
    // parent by tools that sum `test result:` lines (`cargo xtask ci`).
    spec.tag_output = true;
    let t = std::time::Instant::now();
    let report = run_job(&spec).unwrap();
    if let Some(f) = &report.failure {
        eprintln!("  job {role} (-n {n}): {f}");
    }
    eprintln!(
        "  job {role} (-n {n}) ran {:.1?}, exit status {}",
        t.elapsed(),
        report.exit_code
    );
    report.exit_code
}

/// A tiny xorshift64* generator: deterministic from its seed, no
/// dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value; zero is remapped).
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix(seed) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`; the bias is irrelevant here).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `per_mille / 1000`.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// SplitMix64's finalizer: a good 64-bit mix.
pub fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
