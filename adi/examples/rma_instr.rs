//! A small window program for instruction counts of the RMA direct path
//! (run it under `valgrind --tool=callgrind`; it is not a timing
//! benchmark). One rank (a singleton: start it without a launcher) loops
//! over one synchronization pattern on a window that targets itself, so no
//! time is spent waiting for a peer and the count is repeatable:
//!
//! | pattern | per iteration |
//! |---|---|
//! | `put_flush` | one 8-byte put, `flush` (inside one `lock`) |
//! | `get_flush` | one 8-byte `get_into`, `flush` (inside one `lock`) |
//! | `acc_flush` | one 8-byte accumulate (`SUM` of `i64`), `flush` |
//! | `fop_flush` | one `fetch_and_op` (`SUM` of `i64`), `flush` |
//! | `lock_put_unlock` | `lock(SHARED)`, one put, `unlock` |
//! | `put_fence` | one put, `fence(0)` |
//! | `lock_all_put` | `lock_all`, one put, `unlock_all` |
//! | `pscw` | `post`, `start`, one put, `complete`, `wait` |
//!
//! ```text
//! cargo build --release -p adi --example rma_instr
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/rma_instr put_flush 1000
//! ```
//!
//! Two runs with different iteration counts give the instructions per
//! iteration: `(I(n2) - I(n1)) / (n2 - n1)`. Options: `<pattern> <iters>`
//! (`all` runs every pattern), `--create` (a `Win::create` window).
#![allow(clippy::unwrap_used)]

use adi::win::assert::{NOPRECEDE, NOSUCCEED};
use adi::{AccOp, ElemType, LockType, Win};

const PATTERNS: [&str; 8] = [
    "put_flush",
    "get_flush",
    "acc_flush",
    "fop_flush",
    "lock_put_unlock",
    "put_fence",
    "lock_all_put",
    "pscw",
];

fn run(win: &Win, pattern: &str, iters: usize) {
    let data = 7i64.to_ne_bytes();
    let mut buf = vec![0u8; 8];
    match pattern {
        "put_flush" | "get_flush" | "acc_flush" | "fop_flush" => {
            win.lock(LockType::Shared, 0, 0).unwrap();
            for _ in 0..iters {
                match pattern {
                    "put_flush" => win.put(0, 0, &data).unwrap(),
                    "get_flush" => {
                        let mut r = win.get_into(0, 0, std::mem::take(&mut buf)).unwrap();
                        win.wait_request(&mut r).unwrap();
                        buf = r.take_buffer().unwrap();
                    }
                    "acc_flush" => win
                        .accumulate(0, 0, &data, ElemType::I64, AccOp::Sum)
                        .unwrap(),
                    _ => {
                        let mut r = win
                            .fetch_and_op(0, 0, &data, ElemType::I64, AccOp::Sum)
                            .unwrap();
                        win.wait_request(&mut r).unwrap();
                        assert_eq!(r.take_buffer().unwrap().len(), 8);
                    }
                }
                win.flush(0).unwrap();
            }
            win.unlock(0).unwrap();
        }
        "lock_put_unlock" => {
            for _ in 0..iters {
                win.lock(LockType::Shared, 0, 0).unwrap();
                win.put(0, 0, &data).unwrap();
                win.unlock(0).unwrap();
            }
        }
        "put_fence" => {
            win.fence(NOPRECEDE).unwrap();
            for _ in 0..iters {
                win.put(0, 0, &data).unwrap();
                win.fence(0).unwrap();
            }
            win.fence(NOSUCCEED).unwrap();
        }
        "lock_all_put" => {
            for _ in 0..iters {
                win.lock_all(0).unwrap();
                win.put(0, 0, &data).unwrap();
                win.unlock_all().unwrap();
            }
        }
        "pscw" => {
            for _ in 0..iters {
                win.post(&[0], 0).unwrap();
                win.start(&[0], 0).unwrap();
                win.put(0, 0, &data).unwrap();
                win.complete().unwrap();
                win.wait().unwrap();
            }
        }
        other => panic!("unknown pattern {other}; known: {}", PATTERNS.join(",")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let create = args.iter().any(|a| a == "--create");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let pattern = pos.first().map(|s| s.as_str()).unwrap_or("all");
    let iters: usize = pos.get(1).map(|s| s.parse().unwrap()).unwrap_or(1000);
    let w = adi::init().unwrap();
    let win = if create {
        Win::create(&w, vec![0u8; 64]).unwrap()
    } else {
        Win::allocate(&w, 64).unwrap()
    };
    if pattern == "all" {
        for p in PATTERNS {
            run(&win, p, iters);
        }
    } else {
        run(&win, pattern, iters);
    }
    win.free().unwrap();
    adi::finalize().unwrap();
}
