//! Bi-directional windows on bare endpoints: the floor of `adi`'s `osu
//! bibw` for small messages, without the ADI.
//!
//! Two threads, one endpoint each (ranks 0 and 1 of a fresh node segment,
//! CMA off), repeat what an `osu_bibw` rank does: start 64 receives from
//! the other (`irecv_or_done`), 64 sends to it (`isend_or_done`), then
//! drive progress until every receive of the window completed
//! (`take_finished`). Prints the time per slot (one receive and one send
//! of each rank), which `adi`'s README compares with the same window
//! through the ADI and with MPICH (`adi/examples/osu`, `adi/bench`).
//!
//! ```text
//! cargo run --release -p shmem-onesided --example window            # 8 B
//! LEN=512 REPS=20000 cargo run --release -p shmem-onesided --example window
//! ```
//!
//! `LEN` (bytes per message, default 8) and `REPS` (windows, default
//! 20000). Run it with both CPUs idle; pin it with `taskset -c 0,1`.
use shmem_onesided::{CmaMode, Config, Endpoint, Node, SendMode, Started};
use std::sync::{Arc, Barrier};
use tm_proto::{MatchSpec, Source, Tag};

const WINDOW: usize = 64;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn env_usize(name: &str, default: usize) -> Res<usize> {
    match std::env::var(name) {
        Ok(v) => Ok(v
            .parse()
            .map_err(|_| format!("{name}={v:?} is not a count"))?),
        Err(_) => Ok(default),
    }
}

fn rank(job: &str, r: u32, len: usize, reps: usize, barrier: &Barrier) -> Res<f64> {
    let config = Config {
        cma: CmaMode::Off,
        ..Config::from_env()?
    };
    let mut ep = Endpoint::new(Node::init(job, r, 2, config)?);
    let peer = 1 - r;
    let spec = MatchSpec {
        context_id: 0,
        source: Source::Rank(peer),
        tag: Tag::Value(2),
    };
    let mut rpool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; len]).collect();
    let mut spool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![r as u8; len]).collect();
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    barrier.wait();
    let t = std::time::Instant::now();
    for _ in 0..reps {
        let mut pending = 0usize;
        for _ in 0..WINDOW {
            let b = rpool.pop().ok_or("receive pool empty")?;
            match ep.irecv_or_done(spec, b)? {
                Started::Pending(_) => pending += 1,
                Started::Done((status, b)) => {
                    status?;
                    rpool.push(b);
                }
            }
        }
        for _ in 0..WINDOW {
            let b = spool.pop().ok_or("send pool empty")?;
            match ep.isend_or_done(peer, 2, 0, b, SendMode::Standard)? {
                Started::Pending(_) => return Err("a small send stayed pending".into()),
                Started::Done(b) => spool.push(b),
            }
        }
        while pending > 0 {
            ep.progress()?;
            ep.take_finished(&mut sends, &mut recvs);
            for f in recvs.drain(..) {
                let (_, b) = f.into_result()?;
                if b.first().is_some_and(|&x| x != peer as u8) {
                    return Err("a receive got the wrong bytes".into());
                }
                rpool.push(b);
                pending -= 1;
            }
        }
    }
    let dt = t.elapsed().as_secs_f64();
    barrier.wait();
    ep.finalize()?;
    Ok(dt)
}

fn main() -> Res<()> {
    let len = env_usize("LEN", 8)?;
    let reps = env_usize("REPS", 20_000)?;
    let job = format!("tmxwindow{}", std::process::id());
    let barrier = Arc::new(Barrier::new(2));
    let ranks: Vec<_> = (0..2u32)
        .map(|r| {
            let (job, barrier) = (job.clone(), barrier.clone());
            std::thread::spawn(move || rank(&job, r, len, reps, &barrier))
        })
        .collect();
    let mut times = Vec::new();
    for h in ranks {
        times.push(h.join().map_err(|_| "a rank panicked")??);
    }
    let dt = times.iter().copied().fold(0.0, f64::max);
    println!(
        "window {WINDOW} x {len} B both ways, {reps} windows: {:.1} ns per slot",
        dt * 1e9 / (reps * WINDOW) as f64
    );
    Ok(())
}
