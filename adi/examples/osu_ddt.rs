//! OSU-style benchmark of non-contiguous point-to-point over the ADI, for
//! two ranks: every message is one element of `MPI_Type_vector(n, 1, 2,
//! MPI_DOUBLE)` (every other double of a buffer twice the packed size), as
//! a column of a row-major matrix or one face of a halo exchange is.
//!
//! - **`ddt_lat_vector`**: half the round trip of a blocking ping-pong of
//!   `send_typed`/`recv_typed`, µs;
//! - **`ddt_bw_vector`**: rank 0 starts a window of 64 `isend_typed`, rank 1
//!   a window of 64 `irecv_typed`; both `waitall`, then rank 1 returns a
//!   1-byte ack. Packed bytes moved / time, MB/s (10^6 bytes).
//!
//! Sizes are packed bytes, 8 B .. 1 MiB (powers of two); each figure is the
//! median of 5 timed rounds after one warm-up round, with the iteration
//! counts `osu` had before it took OSU's (latency 10 000 / 1 000 / 100 round
//! trips up to 8 KiB / 64 KiB / larger, bandwidth 100 / 20 / 4 windows;
//! `osu` now has OSU's, without the third tier, which here would make
//! MPICH's side of a run of `cargo xtask bench adi` several minutes
//! longer). `adi/bench/mpich_ddt.c` measures the same over MPICH; `cargo
//! xtask bench adi` runs both and prints them side by side.
//!
//! ```text
//! cargo build --release -p launcher --bin tmrun -p adi --example osu_ddt
//! target/release/tmrun -n 2 target/release/examples/osu_ddt           # table
//! target/release/tmrun -n 2 target/release/examples/osu_ddt --raw     # `test bytes value` lines
//! ```
//!
//! Options: `--raw`, `--quick` (1/50 of the iterations, for smoke tests),
//! `--min-size BYTES` (default 8), `--max-size BYTES` (default 1048576; the
//! sizes are the powers of two from 8 B between the two), `--scale N` (N
//! times the iterations, for profiling).
use adi::{BasicType, Comm, Datatype, Error, Request, ThreadLevel};
use std::process::ExitCode;

const WINDOW: usize = 64;
const ROUNDS: usize = 5;

struct Opts {
    raw: bool,
    quick: bool,
    min_size: usize,
    max_size: usize,
    /// Multiplies the iteration counts (`--scale`), for profiling.
    scale: usize,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        raw: false,
        quick: false,
        min_size: 8,
        max_size: 1 << 20,
        scale: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--raw" => o.raw = true,
            "--quick" => o.quick = true,
            "--min-size" => {
                let v = args.next().ok_or("--min-size needs a value")?;
                o.min_size = v.parse().map_err(|_| format!("bad --min-size {v:?}"))?;
            }
            "--scale" => {
                let v = args.next().ok_or("--scale needs a value")?;
                o.scale = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("bad --scale {v:?}"))?;
            }
            "--max-size" => {
                let v = args.next().ok_or("--max-size needs a value")?;
                o.max_size = v.parse().map_err(|_| format!("bad --max-size {v:?}"))?;
            }
            "-h" | "--help" => {
                return Err("usage: osu_ddt [--raw] [--quick] [--min-size BYTES] [--max-size BYTES] [--scale N]".into())
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn scaled(n: usize, o: &Opts) -> usize {
    if o.quick {
        (n / 50).max(1)
    } else {
        n.saturating_mul(o.scale)
    }
}

fn lat_iters(len: usize) -> usize {
    match len {
        0..=8192 => 10_000,
        8193..=65536 => 1_000,
        _ => 100,
    }
}

fn bw_reps(len: usize) -> usize {
    match len {
        0..=8192 => 100,
        8193..=65536 => 20,
        _ => 4,
    }
}

/// One warm-up round, then the median of [`ROUNDS`] timed ones.
fn median_of(world: &Comm, mut round: impl FnMut() -> Result<f64, Error>) -> Result<f64, Error> {
    let mut samples = Vec::with_capacity(ROUNDS);
    for r in 0..=ROUNDS {
        world.barrier()?;
        let v = round()?;
        if r > 0 {
            samples.push(v);
        }
    }
    samples.sort_by(f64::total_cmp);
    Ok(samples[ROUNDS / 2])
}

fn latency(world: &Comm, t: &Datatype, len: usize, o: &Opts) -> Result<f64, Error> {
    let n = scaled(lat_iters(len), o);
    let me = world.rank();
    let sbuf = vec![0x5au8; 2 * len];
    let mut rbuf = vec![0u8; 2 * len];
    median_of(world, || {
        let t0 = adi::wtime();
        for _ in 0..n {
            if me == 0 {
                world.send_typed(&sbuf, 1, t, 1, 1)?;
                world.recv_typed(&mut rbuf, 1, t, 1, 1)?;
            } else {
                world.recv_typed(&mut rbuf, 1, t, 0, 1)?;
                world.send_typed(&sbuf, 1, t, 0, 1)?;
            }
        }
        Ok((adi::wtime() - t0) * 1e6 / (2.0 * n as f64))
    })
}

fn bandwidth(world: &Comm, t: &Datatype, len: usize, o: &Opts) -> Result<f64, Error> {
    let reps = scaled(bw_reps(len), o);
    let me = world.rank();
    let sbufs: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0x5au8; 2 * len]).collect();
    let mut rpool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; 2 * len]).collect();
    let mut ack = [0u8; 1];
    let mut reqs: Vec<Request> = Vec::with_capacity(WINDOW);
    median_of(world, || {
        let t0 = adi::wtime();
        for _ in 0..reps {
            reqs.clear();
            if me == 0 {
                for b in &sbufs {
                    reqs.push(world.isend_typed(b, 1, t, 1, 2)?);
                }
                world.waitall(&mut reqs)?;
                world.recv(&mut ack, 1, 3)?;
            } else {
                for _ in 0..WINDOW {
                    let b = rpool.pop().unwrap_or_else(|| vec![0u8; 2 * len]);
                    reqs.push(world.irecv_typed(b, 1, t, 0, 2)?);
                }
                world.waitall(&mut reqs)?;
                for r in reqs.iter_mut() {
                    if let Some(b) = r.take_buffer() {
                        rpool.push(b);
                    }
                }
                world.send(&ack, 0, 3)?;
            }
        }
        let dt = adi::wtime() - t0;
        Ok((len * WINDOW * reps) as f64 / dt / 1e6)
    })
}

fn run(o: &Opts) -> Result<(), Error> {
    let (world, _) = adi::init_thread(ThreadLevel::Funneled)?;
    if world.size() != 2 {
        if world.rank() == 0 {
            eprintln!("osu_ddt: needs exactly 2 ranks, got {}", world.size());
        }
        adi::finalize()?;
        return Err(Error::InvalidArgument {
            what: "osu_ddt needs exactly 2 ranks",
        });
    }
    let me = world.rank();
    let f64t = Datatype::basic(BasicType::F64);
    if me == 0 && !o.raw {
        println!("# non-contiguous: one MPI_Type_vector(n, 1, 2, MPI_DOUBLE) per message");
        println!("{:>10} {:>12} {:>14}", "bytes", "lat (us)", "bw (MB/s)");
    }
    let mut len = 8;
    while len <= o.max_size {
        if len < o.min_size {
            len *= 2;
            continue;
        }
        let t = Datatype::vector((len / 8) as i64, 1, 2, &f64t)?;
        t.commit()?;
        let lat = latency(&world, &t, len, o)?;
        let bw = bandwidth(&world, &t, len, o)?;
        if me == 0 {
            if o.raw {
                println!("ddt_lat_vector {len} {lat:.3}");
                println!("ddt_bw_vector {len} {bw:.1}");
            } else {
                println!("{len:>10} {lat:>12.2} {bw:>14.1}");
            }
        }
        len *= 2;
    }
    adi::finalize()
}

fn main() -> ExitCode {
    let o = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu_ddt: {e}");
            ExitCode::FAILURE
        }
    }
}
