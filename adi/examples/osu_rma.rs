//! OSU-style one-sided benchmark over adi windows, for two ranks (rank 0
//! is the origin, rank 1 the target): every test on a `Win::allocate`
//! window, then on a `Win::create` window (rows suffixed `@create`).
//!
//! | test | per iteration (rank 0) | rank 1 | value |
//! |---|---|---|---|
//! | `put_lat_fence` / `get_lat_fence` / `acc_lat_fence` | one put / get / accumulate (`SUM` of `i32`), `fence(0)` | `fence(0)` | usec per iteration |
//! | `put_lat_lock` / `get_lat_lock` | `lock(SHARED, 1)`, one put / get, `unlock(1)` | nothing (passive; waits in a barrier) | usec per iteration |
//! | `put_lat_flush` / `get_lat_flush` | one put / get, `flush(1)` (inside one lock epoch) | passive | usec per iteration |
//! | `put_bw_flush` / `get_bw_flush` | 64 puts / gets at displacement 0, `flush(1)` (inside one lock epoch) | passive | MB/s (10^6 bytes/s) |
//!
//! Sizes 8 B .. 1 MiB (powers of 4 from 8, and 1 MiB). Iterations: latency
//! 1000 (≤ 8 KiB) or 100, bandwidth 20 (≤ 64 KiB) or 5 windows of 64; a
//! tenth of them (at least one) first as warm-up; each figure is the
//! median of 5 such rounds (`--rounds N`). `adi/bench/mpich_rma.c`
//! runs the same loops over MPICH with `MPI_Win_allocate`, then
//! `MPI_Win_create`. Gets read into one reused origin buffer
//! ([`Win::get_into`]), as the C benchmark's `MPI_Get` into `rbuf`.
//!
//! ```text
//! cargo build --release -p launcher -p adi --examples --bin tmrun
//! target/release/tmrun -n 2 target/release/examples/osu_rma --raw
//! ```
//!
//! Options: `--raw` (lines `<test> <bytes> <value>`, as `mpich_rma`
//! prints), `--quick` (1/20 of the iterations), `--tests a,b` (a subset),
//! `--max-size BYTES`, `--rounds N`.
use adi::win::assert::{NOPRECEDE, NOSUCCEED};
use adi::{AccOp, Comm, ElemType, Error, LockType, Win};
use std::process::ExitCode;

const WINDOW: usize = 64;
const ALL: [&str; 9] = [
    "put_lat_fence",
    "get_lat_fence",
    "acc_lat_fence",
    "put_lat_lock",
    "get_lat_lock",
    "put_lat_flush",
    "get_lat_flush",
    "put_bw_flush",
    "get_bw_flush",
];

struct Opts {
    rounds: usize,
    raw: bool,
    quick: bool,
    max_size: usize,
    tests: Vec<String>,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        rounds: 5,
        raw: false,
        quick: false,
        max_size: 1 << 20,
        tests: ALL.iter().map(|s| s.to_string()).collect(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--raw" => o.raw = true,
            "--quick" => o.quick = true,
            "--max-size" => {
                let v = args.next().ok_or("--max-size needs a value")?;
                o.max_size = v.parse().map_err(|_| format!("bad --max-size {v:?}"))?;
            }
            "--rounds" => {
                let v = args.next().ok_or("--rounds needs a value")?;
                o.rounds = v.parse().map_err(|_| format!("bad --rounds {v:?}"))?;
                o.rounds = o.rounds.max(1);
            }
            "--tests" => {
                let v = args.next().ok_or("--tests needs a value")?;
                o.tests = v.split(',').map(str::to_string).collect();
                if let Some(bad) = o.tests.iter().find(|t| !ALL.contains(&t.as_str())) {
                    return Err(format!("unknown test {bad:?}; known: {}", ALL.join(",")));
                }
            }
            "-h" | "--help" => return Err(
                "usage: osu_rma [--raw] [--quick] [--rounds N] [--max-size BYTES] [--tests a,b]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn sizes(max: usize) -> Vec<usize> {
    let mut v = Vec::new();
    let mut s = 8;
    while s <= max {
        v.push(s);
        s *= 4;
    }
    if max >= 1 << 20 && v.last() != Some(&(1 << 20)) {
        v.push(1 << 20);
    }
    v
}

fn iters(test: &str, size: usize, quick: bool) -> usize {
    let n = if test.contains("_bw_") {
        if size <= 65_536 {
            20
        } else {
            5
        }
    } else if size <= 8192 {
        1000
    } else {
        100
    };
    if quick {
        (n / 20).max(2)
    } else {
        n
    }
}

/// Runs `iters` iterations of `test` at `size`; rank 0 returns the value.
fn run(w: &Comm, win: &Win, test: &str, size: usize, iters: usize) -> Result<f64, Error> {
    let me = w.rank();
    let buf = vec![1u8; size];
    // Origin buffer of the gets, reused (as MPI_Get's is).
    let mut gbuf = vec![0u8; size];
    let warm = (iters / 10).max(1);
    let fence = test.ends_with("_fence");
    w.barrier()?;
    if me != 0 {
        if fence {
            win.fence(NOPRECEDE)?;
            for _ in 0..warm + iters {
                win.fence(0)?;
            }
            win.fence(NOSUCCEED)?;
        }
        // Passive target: progress happens while waiting in the barrier.
        w.barrier()?;
        return Ok(0.0);
    }
    let mut t0 = adi::wtime();
    let mut elapsed = None;
    match test {
        "put_lat_fence" | "get_lat_fence" | "acc_lat_fence" => {
            win.fence(NOPRECEDE)?;
            for i in 0..warm + iters {
                if i == warm {
                    t0 = adi::wtime();
                }
                match test {
                    "put_lat_fence" => win.put(1, 0, &buf)?,
                    "get_lat_fence" => {
                        let mut r = win.get_into(1, 0, std::mem::take(&mut gbuf))?;
                        win.fence(0)?;
                        win.wait_request(&mut r)?;
                        gbuf = r.take_buffer().unwrap_or_default();
                        continue;
                    }
                    _ => win.accumulate(1, 0, &buf, ElemType::I32, AccOp::Sum)?,
                }
                win.fence(0)?;
            }
            elapsed = Some(adi::wtime() - t0);
            win.fence(NOSUCCEED)?;
        }
        "put_lat_lock" | "get_lat_lock" => {
            for i in 0..warm + iters {
                if i == warm {
                    t0 = adi::wtime();
                }
                win.lock(LockType::Shared, 1, 0)?;
                if test == "put_lat_lock" {
                    win.put(1, 0, &buf)?;
                } else {
                    let mut r = win.get_into(1, 0, std::mem::take(&mut gbuf))?;
                    win.unlock(1)?;
                    win.wait_request(&mut r)?;
                    gbuf = r.take_buffer().unwrap_or_default();
                    continue;
                }
                win.unlock(1)?;
            }
        }
        "put_lat_flush" | "get_lat_flush" | "put_bw_flush" | "get_bw_flush" => {
            let per = if test.contains("_bw_") { WINDOW } else { 1 };
            win.lock(LockType::Shared, 1, 0)?;
            let mut pending = Vec::new();
            for i in 0..warm + iters {
                if i == warm {
                    t0 = adi::wtime();
                }
                for _ in 0..per {
                    if test.starts_with("put") {
                        win.put(1, 0, &buf)?;
                    } else {
                        // One origin buffer for every get of the window, as
                        // the C benchmark does; a get still in flight (the
                        // engine path) keeps its buffer until the flush.
                        let mut r = win.get_into(1, 0, std::mem::take(&mut gbuf))?;
                        match r.is_complete() {
                            true => {
                                win.wait_request(&mut r)?;
                                gbuf = r.take_buffer().unwrap_or_default();
                            }
                            false => {
                                pending.push(r);
                                gbuf = vec![0u8; size];
                            }
                        }
                    }
                }
                win.flush(1)?;
                pending.clear();
            }
            win.unlock(1)?;
        }
        _ => {}
    }
    let t = elapsed.unwrap_or_else(|| adi::wtime() - t0);
    if gbuf.len() != size {
        return Err(Error::InvalidArgument {
            what: "osu_rma: a get did not hand its origin buffer back",
        });
    }
    w.barrier()?;
    Ok(if test.contains("_bw_") {
        (size * WINDOW * iters) as f64 / t / 1e6
    } else {
        t * 1e6 / iters as f64
    })
}

fn main() -> ExitCode {
    let o = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let w = match adi::init() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("init: {e}");
            return ExitCode::FAILURE;
        }
    };
    if w.size() != 2 {
        eprintln!("osu_rma needs exactly 2 ranks, got {}", w.size());
        let _ = adi::finalize();
        return ExitCode::FAILURE;
    }
    let r = (|| -> Result<(), Error> {
        for create in [false, true] {
            // Flavour 1: `Win::allocate` (the symmetric heap: load/store);
            // flavour 2: `Win::create` on private memory (CMA), rows
            // suffixed "@create".
            let len = o.max_size.max(8);
            let win = if create {
                Win::create(&w, vec![0u8; len])?
            } else {
                Win::allocate(&w, len)?
            };
            let flavour = if create { "@create" } else { "" };
            if w.rank() == 0 && !o.raw {
                let how = if create {
                    "Win::create"
                } else {
                    "Win::allocate"
                };
                println!(
                    "# adi osu_rma (rank 0 -> rank 1, {how}, {:?} path)",
                    win.path()
                );
                println!("# {:<14} {:>10} {:>14}", "test", "bytes", "value");
            }
            for test in ALL.iter().filter(|t| o.tests.iter().any(|x| x == *t)) {
                for size in sizes(o.max_size) {
                    let mut vals = Vec::with_capacity(o.rounds);
                    for _ in 0..o.rounds {
                        vals.push(run(&w, &win, test, size, iters(test, size, o.quick))?);
                    }
                    vals.sort_by(f64::total_cmp);
                    let v = vals[vals.len() / 2];
                    if w.rank() == 0 {
                        let unit = if test.contains("_bw_") { "MB/s" } else { "us" };
                        let name = format!("{test}{flavour}");
                        if o.raw {
                            println!("{name} {size} {v:.2}");
                        } else {
                            println!("  {name:<21} {size:>10} {v:>14.2} {unit}");
                        }
                    }
                }
            }
            win.free()?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        eprintln!("rank {}: {e}", w.rank());
        w.abort(1, "osu_rma failed");
    }
    match adi::finalize() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("finalize: {e}");
            ExitCode::FAILURE
        }
    }
}
