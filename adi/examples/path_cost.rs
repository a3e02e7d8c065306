//! Instruction and store counts of the device's small-message paths
//! (through the transport seam), for before/after comparisons under
//! `valgrind --tool=callgrind --cache-sim=yes` (repeatable whatever the
//! machine is doing, unlike timings; the cache simulation counts the
//! stores, `Dw`, that a send's path makes: see the README's notes on
//! stores per message).
//!
//! Two ranks. Each measured function runs while the other rank is blocked
//! in a receive, so the measured rank takes the same path every time:
//! `post_pending` (64 `irecv_into` that stay pending, then cancelled),
//! `idle_passes` (64 `test`s of one of them: a progress pass with 64
//! receives pending and nothing arriving),
//! `post_matched` (64 `irecv_into` of messages already here),
//! `recv_matched` (64 blocking `recv` of messages already here),
//! `send_window` (64 `isend_into` of `LEN` bytes, inline) and
//! `send_blocking` (64 blocking `send`). Divide a function's inclusive
//! count by 64 × `REPS` (× 2 for `post_matched` and `recv_matched`) for
//! the cost per call.
//!
//! ```text
//! cargo build --release -p adi -p launcher --example path_cost --bin tmrun
//! REPS=20 TMX_SHMEM_TUNE=inline_calibrate=off target/release/tmrun -n 2 \
//!     valgrind --tool=callgrind --cache-sim=yes \
//!     --callgrind-out-file=cg.%p target/release/examples/path_cost
//! callgrind_annotate --inclusive=yes cg.<pid> | grep path_cost::
//! ```
//!
//! (`inline_calibrate=off`: under valgrind the init-time calibration can
//! leave the endpoint in another state, and its paths differ.)
#![allow(clippy::unwrap_used)] // an example's failure is a panic
use adi::{Comm, Request, ThreadLevel};

const WINDOW: usize = 64;

/// 64 receives that stay pending (nothing is sent with tag 9).
#[inline(never)]
fn post_pending(w: &Comm, reqs: &mut [Request], pool: &mut Vec<Vec<u8>>, peer: i32) {
    for r in reqs.iter_mut() {
        let b = pool.pop().unwrap_or_else(|| vec![0u8; 1]);
        w.irecv_into(r, b, peer, 9).unwrap();
    }
}

/// 64 progress passes (`test` of a pending receive) while 64 receives
/// are pending and nothing arrives.
#[inline(never)]
fn idle_passes(w: &Comm, reqs: &mut [Request]) {
    for _ in 0..WINDOW {
        assert!(w.test(&mut reqs[0]).unwrap().is_none());
    }
}

/// 64 receives whose messages are already here (unexpected).
#[inline(never)]
fn post_matched(w: &Comm, reqs: &mut [Request], pool: &mut Vec<Vec<u8>>, peer: i32) {
    for r in reqs.iter_mut() {
        let b = pool.pop().unwrap_or_else(|| vec![0u8; 1]);
        w.irecv_into(r, b, peer, 2).unwrap();
    }
}

/// 64 blocking receives whose messages are already here.
#[inline(never)]
fn recv_matched(w: &Comm, buf: &mut [u8], peer: i32) {
    for _ in 0..WINDOW {
        w.recv(buf, peer, 4).unwrap();
    }
}

/// 64 nonblocking sends in place.
#[inline(never)]
fn send_window(w: &Comm, reqs: &mut [Request], pool: &mut Vec<Vec<u8>>, peer: i32, len: usize) {
    for r in reqs.iter_mut() {
        let b = pool.pop().unwrap_or_else(|| vec![0x5au8; len]);
        w.isend_into(r, b, peer, 2).unwrap();
    }
}

/// 64 blocking sends.
#[inline(never)]
fn send_blocking(w: &Comm, peer: i32, data: &[u8]) {
    for _ in 0..WINDOW {
        w.send(data, peer, 4).unwrap();
    }
}

fn take_back(reqs: &mut [Request], pool: &mut Vec<Vec<u8>>) {
    for r in reqs.iter_mut() {
        if let Some(b) = r.take_buffer() {
            pool.push(b);
        }
    }
}

fn main() {
    let (w, _) = adi::init_thread(ThreadLevel::Funneled).unwrap();
    let me = w.rank();
    let peer = 1 - me;
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let len: usize = std::env::var("LEN")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut pool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; len]).collect();
    let mut reqs: Vec<Request> = (0..WINDOW).map(|_| Request::null()).collect();
    let mut tok = [0u8; 1];
    let mut buf = vec![0u8; len.max(8)];
    for _ in 0..reps {
        if me == 1 {
            // Pending posts (rank 0 waits for the token), then cancelled.
            post_pending(&w, &mut reqs, &mut pool, peer);
            idle_passes(&w, &mut reqs);
            for r in reqs.iter_mut() {
                w.cancel(r).unwrap();
            }
            w.waitall(&mut reqs).unwrap();
            take_back(&mut reqs, &mut pool);
            w.send(&tok, peer, 3).unwrap();
            // Rank 0 sends 64 + 64 messages and a token; all are here
            // once the token is.
            w.recv(&mut tok, peer, 3).unwrap();
            post_matched(&w, &mut reqs, &mut pool, peer);
            w.waitall(&mut reqs).unwrap();
            take_back(&mut reqs, &mut pool);
            recv_matched(&w, &mut buf[..len], peer);
            // Rank 0's sends, received after its token.
            w.send(&tok, peer, 3).unwrap();
            w.recv(&mut tok, peer, 3).unwrap();
            post_matched(&w, &mut reqs, &mut pool, peer);
            w.waitall(&mut reqs).unwrap();
            take_back(&mut reqs, &mut pool);
            recv_matched(&w, &mut buf[..len], peer);
        } else {
            w.recv(&mut tok, peer, 3).unwrap();
            for _ in 0..WINDOW {
                w.send(&buf[..len], peer, 2).unwrap();
            }
            for _ in 0..WINDOW {
                w.send(&buf[..len], peer, 4).unwrap();
            }
            w.send(&tok, peer, 3).unwrap();
            // Measured: sends while rank 1 is blocked in its receive.
            w.recv(&mut tok, peer, 3).unwrap();
            send_window(&w, &mut reqs, &mut pool, peer, len);
            w.waitall(&mut reqs).unwrap();
            take_back(&mut reqs, &mut pool);
            send_blocking(&w, peer, &buf[..len]);
            w.send(&tok, peer, 3).unwrap();
        }
    }
    adi::finalize().unwrap();
}
