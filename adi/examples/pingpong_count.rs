//! A fixed number of small blocking ping-pongs between ranks 0 and 1, for
//! counting what one round trip costs (system calls under `strace -f`,
//! context switches, instructions) rather than timing it: run it with two
//! counts and take the difference, which leaves out start-up and
//! finalize.
//!
//! ```text
//! cargo build --release -p launcher -p adi --example pingpong_count --bin tmrun
//! ITERS=2000 target/release/tmrun --hosts local:a,local:b -ppn 1 \
//!     strace -f -c -o pp.%p target/release/examples/pingpong_count
//! ```
//!
//! `ITERS` round trips (default 1000) of `LEN` bytes (default 8) after 100
//! for warm-up; each rank prints its round trips and the voluntary and
//! involuntary context switches of each of its threads over them.
use std::process::ExitCode;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Context switches (voluntary, involuntary) of each thread of this
/// process, by thread name.
fn switches() -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in dir.flatten() {
        let p = t.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let status = std::fs::read_to_string(p.join("status")).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0u64)
        };
        out.push((
            name.trim().to_string(),
            field("voluntary_ctxt_switches:"),
            field("nonvoluntary_ctxt_switches:"),
        ));
    }
    out.sort();
    out
}

fn run() -> Result<(), adi::Error> {
    let world = adi::init()?;
    let (me, n) = (world.rank(), world.size());
    if n < 2 {
        eprintln!("pingpong_count needs 2 ranks");
        return adi::finalize();
    }
    let iters = env("ITERS", 1000);
    let len = env("LEN", 8);
    if me < 2 {
        let peer = 1 - me;
        let msg = vec![me as u8; len];
        let mut buf = vec![0u8; len];
        let mut round = |k: usize| -> Result<(), adi::Error> {
            for _ in 0..k {
                if me == 0 {
                    world.send(&msg, peer, 1)?;
                    world.recv(&mut buf, peer, 1)?;
                } else {
                    world.recv(&mut buf, peer, 1)?;
                    world.send(&msg, peer, 1)?;
                }
            }
            Ok(())
        };
        round(100)?;
        let before = switches();
        round(iters)?;
        let after = switches();
        for ((name, v0, i0), (_, v1, i1)) in before.iter().zip(&after) {
            println!(
                "rank {me}: {iters} round trips of {len} B: thread {name}: voluntary switches {}, involuntary {}",
                v1 - v0,
                i1 - i0
            );
        }
    }
    world.barrier()?;
    adi::finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pingpong_count: {e} ({})", e.class());
            ExitCode::FAILURE
        }
    }
}
