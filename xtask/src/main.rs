//! Workspace automation for tmx, after the cargo-xtask convention
//! (<https://github.com/matklad/cargo-xtask/>): one binary, no dependencies,
//! invoked as `cargo xtask <command>` through the alias in `.cargo/config.toml`.
//!
//! Commands:
//! - `cargo xtask ci [STEP...]` runs every check CI runs (all steps, or only the
//!   named ones) and prints a summary with the number of tests run.
//! - `cargo xtask bench [CRATE...]` runs the benchmarks of the crates that have
//!   them; for shmem-onesided and adi, side by side with Debian's MPICH in one
//!   table (adi: also a table of paired per-round ratios; `TMX_BENCH_ROUNDS`
//!   rounds, default 5).
//! - `cargo xtask cluster` runs the multi-host tests (`tmrun --hosts` over
//!   `local:` and network-namespace hosts: the launcher's, and adi's jobs
//!   across hosts, see `cluster.rs`); adi's also run in `ci` (step
//!   `cluster`).
//!
//! Policy checks ("tidy") live in `tidy.rs` and run as `cargo test -p xtask`.
#![forbid(unsafe_code)]

mod ci;
mod cluster;
mod internode;
mod slurm;
mod state;
#[cfg(test)]
mod tidy;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci [STEP...]      run all CI checks (or only the named steps) and print a summary
                    steps: system fmt clippy test cluster slurm doc loom proptest ibverbs
  bench [CRATE...]  run benchmarks (all crates that have benches/, or the named ones);
                    shmem-onesided and adi (its osu example under tmrun) run beside
                    Debian's MPICH and print one table with ratios (adi also a
                    table of paired per-round ratios: median, lowest, highest);
                    `bench adi-pairs`: one size at a time, many short alternating
                    runs of adi's osu and MPICH, median ratio per size;
                    `bench ab REV`: adi's osu, osu_rma and osu_ddt of this
                    tree against the same programs built from git revision
                    REV, interleaved; paired per-round ratios new / base;
                    `bench abi [--quick]`: mpi-abi/bench/abi_bench.c, built
                    once with mpicc.mpich, on MPICH's libmpich.so.12 and on
                    tmx's (and Open MPI's build), interleaved; ratios per round;
                    `bench internode [--quick]`: two network-namespace hosts,
                    one rank each, none bound to a CPU: adi's osu under tmrun
                    --hosts vs MPICH (UCX tcp) vs Open MPI (btl tcp) vs raw
                    TCP, veth byte counters checked, paired per-round medians
                    (root); --quick: one short smoke round;
                    `bench state`: the machine's state (fast or slow: the
                    round trip of a cache line between two threads), 5 probes
  cluster [ARGS]    multi-host tests: the launcher's, then adi's jobs on 2 hosts x 2
                    ranks (verbs-tm between hosts, shared memory within): `local:`
                    hosts, and `netns:` hosts it creates and always deletes (root,
                    iproute2); prints `N passed, M failed`. ARGS: job-name
                    substrings, --local (no namespaces), --no-launcher
  help              this text

environment:
  TMX_PROPTEST_CASES   cases per property in the heavy proptest step (default 2000)
  LOOM_MAX_PREEMPTIONS loom preemption bound in the loom step (default 2)
  TMX_BENCH_ROUNDS     rounds of `bench adi` (point-to-point and RMA), 1 to 100 (default 5)
  TMX_BENCH_RANKS      rank counts of `bench abi`, e.g. 2,4 (default 2; 2,4 with 4 cores)
  TMX_BENCH_PAIRS      (MPICH, tmx, tmx, MPICH) runs per size of `bench adi-pairs` (default 6)
  TMX_BENCH_PAIR_MAX_BYTES  largest size of `bench adi-pairs` (default 65536)
  TMX_BENCH_PAIR_MIN_BYTES  smallest size of `bench adi-pairs` (default 1)
  TMX_BENCH_QUICK      `1`: `bench internode` runs a fraction of the iterations (smoke test)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "ci" => ci::run_ci(rest),
        "bench" => ci::run_bench(rest),
        "cluster" => ci::run_cluster(rest),
        // The raw TCP floor of `bench internode` (started by it).
        "tcp-floor" => internode::tcp_floor(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod usage {
    /// The usage text names every step `cargo xtask ci` runs.
    #[test]
    fn usage_lists_every_ci_step() {
        let line = super::USAGE
            .lines()
            .find(|l| l.trim_start().starts_with("steps:"))
            .unwrap_or_default();
        let listed: Vec<&str> = line.split_whitespace().skip(1).collect();
        assert_eq!(listed, crate::ci::STEPS, "{line}");
    }
}
