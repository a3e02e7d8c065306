//! Instruction counts of the endpoint's hot paths, for before/after
//! comparisons under `valgrind --tool=callgrind` (repeatable whatever the
//! machine is doing, unlike timings).
//!
//! One process, two endpoints (ranks 0 and 1 of a fresh node segment),
//! both driven from one thread once attached: every message is in the
//! ring before its receive looks, so no call waits or spins and every run
//! executes the same instructions. Each phase is a function of its own
//! (`phase_*`), run `REPS` times over a window of `WINDOW` messages; divide
//! its inclusive count by `REPS * WINDOW` for the cost per message.
//!
//! ```text
//! cargo build --release -p shmem-onesided --example endpoint_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out \
//!     target/release/examples/endpoint_cost [bytes...]
//! callgrind_annotate --inclusive=yes cg.out | grep phase_
//! ```
//!
//! Default sizes: 8, 40, 200 and 2000 bytes (inline, inline with
//! continuation slots, eager). CMA is off (its copies are system calls).
use shmem_onesided::{CmaMode, Config, Endpoint, Node, SendMode, Started};
use tm_proto::{MatchSpec, Source, Tag};

/// Windows per phase and size.
const REPS: usize = 200;
/// Messages per window (fits the default ring).
const WINDOW: usize = 32;

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn spec() -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(0),
        tag: Tag::Value(2),
    }
}

/// Sends of a window through the fast path adi's `isend` tries first.
#[inline(never)]
fn phase_send_now(ep: &mut Endpoint, data: &[u8]) -> Res<()> {
    for _ in 0..WINDOW {
        if !ep.isend_now(1, 2, 0, data, SendMode::Standard) {
            return Err("isend_now declined".into());
        }
    }
    Ok(())
}

/// Sends of a window through the general call (`isend_or_done`).
#[inline(never)]
fn phase_isend_or_done(ep: &mut Endpoint, pool: &mut Vec<Vec<u8>>) -> Res<()> {
    for _ in 0..WINDOW {
        let b = pool.pop().ok_or("send pool empty")?;
        match ep.isend_or_done(1, 2, 0, b, SendMode::Standard)? {
            Started::Done(b) => pool.push(b),
            Started::Pending(_) => return Err("send pending".into()),
        }
    }
    Ok(())
}

/// Blocking sends of a window (`send`).
#[inline(never)]
fn phase_send(ep: &mut Endpoint, data: &[u8]) -> Res<()> {
    for _ in 0..WINDOW {
        ep.send(1, 2, 0, data)?;
    }
    Ok(())
}

/// Receives of a window whose messages are here, as adi's `irecv` makes
/// them: `recv_arrived`, then `irecv_or_done` if it declines.
#[inline(never)]
fn phase_recv_arrived(ep: &mut Endpoint, pool: &mut Vec<Vec<u8>>) -> Res<()> {
    for _ in 0..WINDOW {
        let mut b = pool.pop().ok_or("receive pool empty")?;
        if ep.recv_arrived(spec(), &mut b)?.is_some() {
            pool.push(b);
            continue;
        }
        match ep.irecv_or_done(spec(), b)? {
            Started::Done((st, b)) => {
                st?;
                pool.push(b);
            }
            Started::Pending(_) => return Err("arrived receive pending".into()),
        }
    }
    Ok(())
}

/// Receives of a window made before their messages (`irecv_or_done`:
/// deferred by default).
#[inline(never)]
fn phase_recv_early(ep: &mut Endpoint, pool: &mut Vec<Vec<u8>>) -> Res<usize> {
    let mut pending = 0;
    for _ in 0..WINDOW {
        let b = pool.pop().ok_or("receive pool empty")?;
        match ep.irecv_or_done(spec(), b)? {
            Started::Done((st, b)) => {
                st?;
                pool.push(b);
            }
            Started::Pending(_) => pending += 1,
        }
    }
    Ok(pending)
}

/// Receives of a window posted to the matcher (`irecv`).
#[inline(never)]
fn phase_irecv(ep: &mut Endpoint, pool: &mut Vec<Vec<u8>>) -> Res<usize> {
    for _ in 0..WINDOW {
        let b = pool.pop().ok_or("receive pool empty")?;
        let _ = ep.irecv(spec(), b)?;
    }
    Ok(WINDOW)
}

/// Progress and `take_finished` until `pending` receives completed.
#[inline(never)]
fn phase_drain(ep: &mut Endpoint, pool: &mut Vec<Vec<u8>>, mut pending: usize) -> Res<()> {
    let (mut sends, mut recvs) = (Vec::new(), Vec::new());
    let mut idle = 0;
    while pending > 0 {
        ep.progress()?;
        ep.take_finished(&mut sends, &mut recvs);
        if recvs.is_empty() {
            idle += 1;
            if idle > 1000 {
                return Err("drain made no progress".into());
            }
        }
        for f in recvs.drain(..) {
            let (_, b) = f.into_result()?;
            pool.push(b);
            pending -= 1;
        }
    }
    Ok(())
}

/// Blocking receives of a window whose messages are here (`recv`).
#[inline(never)]
fn phase_recv(ep: &mut Endpoint, buf: &mut [u8]) -> Res<()> {
    for _ in 0..WINDOW {
        ep.recv(spec(), buf)?;
    }
    Ok(())
}

/// Progress passes with nothing to do.
#[inline(never)]
fn phase_idle(ep: &mut Endpoint) -> Res<()> {
    for _ in 0..WINDOW {
        ep.progress()?;
    }
    Ok(())
}

fn size(ep0: &mut Endpoint, ep1: &mut Endpoint, len: usize) -> Res<()> {
    let data = vec![7u8; len];
    let mut spool: Vec<Vec<u8>> = (0..WINDOW).map(|_| data.clone()).collect();
    let mut rpool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; len]).collect();
    let mut buf = vec![0u8; len];
    for _ in 0..REPS {
        phase_send_now(ep0, &data)?;
        phase_recv_arrived(ep1, &mut rpool)?;

        let pending = phase_recv_early(ep1, &mut rpool)?;
        phase_isend_or_done(ep0, &mut spool)?;
        phase_drain(ep1, &mut rpool, pending)?;

        let pending = phase_irecv(ep1, &mut rpool)?;
        phase_send(ep0, &data)?;
        phase_drain(ep1, &mut rpool, pending)?;

        phase_send_now(ep0, &data)?;
        phase_recv(ep1, &mut buf)?;

        phase_idle(ep1)?;
        ep0.progress()?;
    }
    Ok(())
}

fn main() -> Res<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![8, 40, 200, 2000]
    } else {
        sizes
    };
    let job = format!("pathcost{}", std::process::id());
    let init = |r: u32| {
        let job = job.clone();
        std::thread::spawn(move || -> Res<Endpoint> {
            let config = Config {
                cma: CmaMode::Off,
                ..Config::from_env()?
            };
            Ok(Endpoint::new(Node::init(&job, r, 2, config)?))
        })
    };
    let (h0, h1) = (init(0), init(1));
    let mut ep0 = h0.join().map_err(|_| "rank 0 panicked")??;
    let mut ep1 = h1.join().map_err(|_| "rank 1 panicked")??;
    for len in sizes {
        size(&mut ep0, &mut ep1, len)?;
        println!("{len} B: {REPS} windows of {WINDOW} per phase");
    }
    let h = std::thread::spawn(move || ep1.finalize().map(|_| ()));
    ep0.finalize()?;
    h.join().map_err(|_| "rank 1 panicked")??;
    Ok(())
}
