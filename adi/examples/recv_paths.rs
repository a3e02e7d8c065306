//! The receive side's cost per message on the two paths a window of
//! small `irecv`s takes, with every message already in the ring when the
//! receiver works (so the figure is the receiver's own work, not the
//! wait for the sender):
//!
//! - **arrived**: the messages are here before the `irecv`s; each `irecv`
//!   takes its message straight from the ring and completes in the call.
//! - **posted**: the `irecv`s are made before the messages exist (they are
//!   *deferred*: a request, no matching entry); the messages arrive while
//!   the receiver waits, and `waitall` drains them into the receives.
//!
//! `bibw` receives mostly on the posted path, `bw` mostly on the arrived
//! one (counters: `TMX_ADI_COUNTERS=1`, "deferred"). Under
//! `valgrind --tool=callgrind` the same runs give instructions per
//! message of each path (`rx_arrived`; `rx_posted` + `rx_drain`), repeatable whatever the
//! machine is doing.
//!
//! ```text
//! cargo build --release -p launcher -p adi --example recv_paths --bin tmrun
//! target/release/tmrun -n 2 --bind-to core target/release/examples/recv_paths [bytes] [window] [settle-us]
//! ```
//!
//! Defaults: 40 bytes, a window of 32, 100 µs for the messages to land
//! (raise it under valgrind, e.g. 3000).
use adi::{Comm, Error, Request};
use std::process::ExitCode;

/// Rounds per path.
const REPS: usize = 2000;
const DATA: i32 = 2;
const GO: i32 = 4;
const DONE: i32 = 5;

/// Waits `us` microseconds without progress (the messages land in the
/// ring meanwhile, untouched).
fn settle(us: f64) {
    let t = adi::wtime();
    while adi::wtime() - t < us * 1e-6 {
        std::hint::spin_loop();
    }
}

fn post(
    world: &Comm,
    reqs: &mut [Request],
    pool: &mut Vec<Vec<u8>>,
    len: usize,
) -> Result<(), Error> {
    for r in reqs.iter_mut() {
        let b = pool.pop().unwrap_or_else(|| vec![0u8; len]);
        world.irecv_into(r, b, 0, DATA)?;
    }
    Ok(())
}

/// The arrived path: receives made after their messages, then `waitall`.
#[inline(never)]
fn rx_arrived(
    world: &Comm,
    reqs: &mut [Request],
    pool: &mut Vec<Vec<u8>>,
    len: usize,
) -> Result<(), Error> {
    post(world, reqs, pool, len)?;
    world.waitall(reqs).map(|_| ())
}

/// The posted path, first half: receives made before their messages.
#[inline(never)]
fn rx_posted(
    world: &Comm,
    reqs: &mut [Request],
    pool: &mut Vec<Vec<u8>>,
    len: usize,
) -> Result<(), Error> {
    post(world, reqs, pool, len)
}

/// The posted path, second half: `waitall` once the messages are here.
#[inline(never)]
fn rx_drain(world: &Comm, reqs: &mut [Request]) -> Result<(), Error> {
    world.waitall(reqs).map(|_| ())
}

/// Rank 0's half: a window of sends to rank 1, completed.
fn send_window(world: &Comm, reqs: &mut [Request], len: usize) -> Result<(), Error> {
    for r in reqs.iter_mut() {
        world.isend_into(r, vec![0x5au8; len], 1, DATA)?;
    }
    world.waitall(reqs).map(|_| ())
}

/// Takes the window's buffers back, checking every payload, and clears
/// them for the next window.
fn take_back(world: &Comm, reqs: &mut [Request], pool: &mut Vec<Vec<u8>>, len: usize) {
    for r in reqs.iter_mut() {
        let mut b = r.take_buffer().unwrap_or_default();
        if b.len() != len || b.iter().any(|&x| x != 0x5a) {
            world.abort(1, "recv_paths: a payload did not arrive intact");
        }
        b.fill(0);
        pool.push(b);
    }
}

fn run() -> Result<(), Error> {
    let (world, _) = adi::init_thread(adi::ThreadLevel::Funneled)?;
    if world.size() != 2 {
        if world.rank() == 0 {
            eprintln!("recv_paths: needs exactly 2 ranks (tmrun -n 2)");
        }
        return adi::finalize();
    }
    let arg = |i: usize, d: f64| -> f64 {
        std::env::args()
            .nth(i)
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let len = arg(1, 40.0).max(0.0) as usize;
    let w = (arg(2, 32.0).max(1.0) as usize).min(1024);
    let us = arg(3, 100.0).max(0.0);
    let me = world.rank();
    let mut reqs: Vec<Request> = (0..w).map(|_| Request::null()).collect();
    let mut pool: Vec<Vec<u8>> = (0..w).map(|_| vec![0u8; len]).collect();
    let mut one = [0u8; 1];
    let (mut arrived, mut posted) = (0.0, 0.0);
    for _ in 0..REPS {
        if me == 0 {
            // Arrived: send the window, then wait for the receiver's word.
            send_window(&world, &mut reqs, len)?;
            world.recv(&mut one, 1, DONE)?;
            // Posted: send once the receiver has made its receives.
            world.recv(&mut one, 1, GO)?;
            send_window(&world, &mut reqs, len)?;
            world.recv(&mut one, 1, DONE)?;
        } else {
            settle(us);
            let t0 = adi::wtime();
            rx_arrived(&world, &mut reqs, &mut pool, len)?;
            arrived += adi::wtime() - t0;
            take_back(&world, &mut reqs, &mut pool, len);
            world.send(&one, 0, DONE)?;

            let t0 = adi::wtime();
            rx_posted(&world, &mut reqs, &mut pool, len)?;
            let t1 = adi::wtime();
            world.send(&one, 0, GO)?;
            settle(us);
            let t2 = adi::wtime();
            rx_drain(&world, &mut reqs)?;
            posted += (t1 - t0) + (adi::wtime() - t2);
            take_back(&world, &mut reqs, &mut pool, len);
            world.send(&one, 0, DONE)?;
        }
    }
    if me == 1 {
        let n = (REPS * w) as f64;
        println!(
            "recv_paths {len} B, window {w}: arrived {:.1} ns/msg, posted {:.1} ns/msg",
            arrived * 1e9 / n,
            posted * 1e9 / n
        );
    }
    adi::finalize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("recv_paths: {e}");
            ExitCode::FAILURE
        }
    }
}
