//! OSU-style point-to-point benchmark over the ADI, for two ranks:
//!
//! - **latency**: half the round trip of a blocking ping-pong
//!   (`send`/`recv`), as `osu_latency`;
//! - **bw**: rank 0 starts a window of 64 nonblocking sends (`isend`), rank
//!   1 a window of 64 nonblocking receives (`irecv`); both `waitall`, then
//!   rank 1 returns a 1-byte ack. Bytes moved / time, as `osu_bw`;
//! - **bibw**: both ranks send and receive a window of 64 at once, as
//!   `osu_bibw`.
//!
//! Sizes 1 B .. 4 MiB (powers of two). MB/s are 10^6 bytes per second, as
//! OSU prints them. Every operation of a window has a buffer of its own
//! (`isend`/`irecv` own their `Vec` until completion; MPI also requires
//! concurrent receives to use disjoint buffers), where OSU reuses one send
//! and one receive buffer for the whole window: from 128 KiB our window
//! works in memory where OSU's works in cache. `mpich_osu` measures both
//! forms; `cargo xtask bench adi` compares ours with the same form.
//!
//! The latency test's two buffers start on a page boundary, as OSU's
//! (and `mpich_osu`'s) do ([`page_aligned`]). The window buffers of `bw`
//! and `bibw` are `Vec`s the requests own, where they fall.
//!
//! Buffers of 128 KiB and more are mapped memory, whichever test runs
//! first: `osu` pins glibc's mmap threshold at its default 128 KiB
//! ([`pin_mmap_threshold`]). Unpinned, glibc raises the threshold to the
//! size of each mapped block freed, so after the `bw` sizes the `bibw`
//! buffers up to 4 MiB came from the heap, at offsets modulo 64 that
//! differ between sender and receiver, and `bibw` 512 KiB – 2 MiB ran
//! 2–5% slower than pinned (adi README, "`osu`'s large buffers mapped
//! whichever test runs first"). `mpich_osu` allocates its buffers once,
//! as one mapped area per direction, as OSU does.
//!
//! ```text
//! cargo build --release -p launcher -p adi --examples --bin tmrun
//! target/release/tmrun -n 2 target/release/examples/osu            # table
//! target/release/tmrun -n 2 target/release/examples/osu --csv      # CSV
//! mpiexec.hydra -n 2 target/release/examples/osu                   # under Hydra
//! ```
//!
//! Each figure is the median of 5 timed rounds after one warm-up round,
//! with the iteration counts of `adi/bench/mpich_osu.c` (the MPICH
//! baseline), which are OSU's: latency 10 000 / 1 000 round trips (≤ 8 KiB
//! / larger), bandwidth 100 / 20 windows. The ack is 1 byte. (Fewer
//! iterations above 64 KiB make rounds of a few milliseconds, which spread
//! by ±15%.)
//!
//! Options: `--csv` (rows `test,bytes,value,unit`), `--raw` (lines
//! `lat|bw|bibw <bytes> <value>`, the form `mpich_osu` prints),
//! `--min-size BYTES` (default 1), `--max-size BYTES` (default 4194304; the
//! sizes are the powers of two between, or exactly BYTES when both are equal),
//! `--scale N` (N times the iterations, for profiling), `--quick` (1/50 of the iterations,
//! for smoke tests), `--tests latency,bw,bibw` (a subset), `--threads
//! funneled|multiple` (the thread level asked of `adi::init_thread`;
//! default `funneled`, one thread calls the device, which is what OSU's
//! `MPI_Init` gives under MPICH: `MPI_THREAD_SINGLE`), `--requests
//! into|returned` (how a window's requests are started: `into` writes each
//! into its place in the window with `irecv_into`/`isend_into`, as OSU's C
//! passes `&request[j]` to `MPI_Irecv`/`MPI_Isend`; `returned` pushes the
//! requests `irecv`/`isend` return; default `into`).
use adi::{Comm, Error, Request, ThreadLevel};
use std::process::ExitCode;

const WINDOW: usize = 64;

#[derive(Debug, Clone)]
struct Opts {
    csv: bool,
    raw: bool,
    min_size: usize,
    max_size: usize,
    quick: bool,
    /// Multiplies the iteration counts (`--scale`), for profiling.
    scale: usize,
    tests: Vec<String>,
    threads: ThreadLevel,
    /// Requests written in place (`irecv_into`/`isend_into`), or returned.
    into: bool,
}

fn parse_opts() -> Result<Opts, String> {
    let mut o = Opts {
        csv: false,
        raw: false,
        min_size: 1,
        max_size: 4 << 20,
        quick: false,
        scale: 1,
        tests: vec!["latency".into(), "bw".into(), "bibw".into()],
        threads: ThreadLevel::Funneled,
        into: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--csv" => o.csv = true,
            "--raw" => o.raw = true,
            "--quick" => o.quick = true,
            "--max-size" => {
                let v = args.next().ok_or("--max-size needs a value")?;
                o.max_size = v.parse().map_err(|_| format!("bad --max-size {v:?}"))?;
            }
            "--min-size" => {
                let v = args.next().ok_or("--min-size needs a value")?;
                o.min_size = v.parse().map_err(|_| format!("bad --min-size {v:?}"))?;
            }
            "--scale" => {
                let v = args.next().ok_or("--scale needs a value")?;
                o.scale = match v.parse() {
                    Ok(n) if n >= 1 => n,
                    _ => return Err(format!("bad --scale {v:?} (a whole number, at least 1)")),
                };
            }
            "--tests" => {
                let v = args.next().ok_or("--tests needs a value")?;
                o.tests = v.split(',').map(str::to_string).collect();
            }
            "--threads" => {
                o.threads = match args.next().as_deref() {
                    Some("funneled") => ThreadLevel::Funneled,
                    Some("multiple") => ThreadLevel::Multiple,
                    v => return Err(format!("--threads needs funneled or multiple, got {v:?}")),
                };
            }
            "--requests" => {
                o.into = match args.next().as_deref() {
                    Some("into") => true,
                    Some("returned") => false,
                    v => return Err(format!("--requests needs into or returned, got {v:?}")),
                };
            }
            "-h" | "--help" => return Err(
                "usage: osu [--csv | --raw] [--quick] [--min-size BYTES] [--max-size BYTES] [--scale N] \
                 [--tests latency,bw,bibw] \
                 [--threads funneled|multiple] [--requests into|returned]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// The powers of two from `min` to `max`; just `min` if the two are equal
/// (any size, power of two or not).
fn sizes(min: usize, max: usize) -> Vec<usize> {
    if min == max {
        return vec![min];
    }
    let mut v = Vec::new();
    let mut s = 1;
    while s <= max {
        if s >= min {
            v.push(s);
        }
        s *= 2;
    }
    v
}

/// Iterations per timed round, OSU's own (`osu_util.h`: `LAT_LOOP_SMALL`
/// 10,000 and `LAT_LOOP_LARGE` 1,000 round trips, `BW_LOOP_SMALL` 100 and
/// `BW_LOOP_LARGE` 20 windows, above `LARGE_MESSAGE_SIZE` 8 KiB), as
/// `adi/bench/mpich_osu.c` (the MPICH baseline) counts them, so the two
/// print comparable figures.
fn lat_iters(len: usize) -> usize {
    if len <= 8192 {
        10_000
    } else {
        1_000
    }
}

fn bw_reps(len: usize) -> usize {
    if len <= 8192 {
        100
    } else {
        20
    }
}

/// Timed rounds per size after one warm-up round; the median is reported.
const ROUNDS: usize = 5;

fn scaled(n: usize, o: &Opts) -> usize {
    if o.quick {
        (n / 50).max(1)
    } else {
        n.saturating_mul(o.scale)
    }
}

/// Runs `round` (which returns the figure of one timed round) once to warm
/// up and [`ROUNDS`] times more; returns the median figure.
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

/// The page size (`sysconf(_SC_PAGESIZE)`; 4 KiB if it cannot be read).
fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// The `len` bytes of `v` (which holds at least `len + page`) that start
/// on a page boundary, as OSU aligns its buffers (`align_buffer(ptr,
/// getpagesize())`). Where a buffer starts matters to a single-copy
/// transfer: the kernel copies page by page, and a source and destination
/// at different offsets within their pages are copied more slowly
/// (latency 16 KiB by CMA: 1.52 µs page-aligned, 2.05 µs with `osu`'s
/// former heap buffers).
fn page_aligned(v: &mut [u8], len: usize, page: usize) -> &mut [u8] {
    let skip = (page - v.as_ptr() as usize % page) % page;
    &mut v[skip..skip + len]
}

fn latency(world: &Comm, len: usize, o: &Opts) -> Result<f64, Error> {
    let n = scaled(lat_iters(len), o);
    let me = world.rank();
    let page = page_size();
    let mut sv = vec![0x5au8; len + page];
    let mut rv = vec![0u8; len + page];
    let sbuf = &*page_aligned(&mut sv, len, page);
    let rbuf = page_aligned(&mut rv, len, page);
    median_of(world, || {
        let t0 = adi::wtime();
        for _ in 0..n {
            if me == 0 {
                world.send(sbuf, 1, 1)?;
                world.recv(rbuf, 1, 1)?;
            } else {
                world.recv(rbuf, 0, 1)?;
                world.send(sbuf, 0, 1)?;
            }
        }
        Ok((adi::wtime() - t0) * 1e6 / (2.0 * n as f64))
    })
}

fn take_back(reqs: &mut [Request], pool: &mut Vec<Vec<u8>>) {
    for r in reqs.iter_mut() {
        if let Some(b) = r.take_buffer() {
            pool.push(b);
        }
    }
}

fn bandwidth(world: &Comm, len: usize, o: &Opts, bi: bool) -> Result<f64, Error> {
    let reps = scaled(bw_reps(len), o);
    let me = world.rank();
    let peer = 1 - me;
    let mut spool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0x5au8; len]).collect();
    let mut rpool: Vec<Vec<u8>> = (0..WINDOW).map(|_| vec![0u8; len]).collect();
    let mut ack = [0u8; 1];
    let sender = me == 0 || bi;
    let receiver = me == 1 || bi;
    // The window's requests, in place (as OSU's `MPI_Request request[]`).
    let mut reqs: Vec<Request> = (0..2 * WINDOW).map(|_| Request::null()).collect();
    median_of(world, || {
        let t0 = adi::wtime();
        for _ in 0..reps {
            let mut n = 0;
            if !o.into {
                reqs.clear();
            }
            if receiver {
                for _ in 0..WINDOW {
                    let b = rpool.pop().unwrap_or_else(|| vec![0u8; len]);
                    if o.into {
                        world.irecv_into(&mut reqs[n], b, peer, 2)?;
                    } else {
                        reqs.push(world.irecv(b, peer, 2)?);
                    }
                    n += 1;
                }
            }
            if sender {
                for _ in 0..WINDOW {
                    let b = spool.pop().unwrap_or_else(|| vec![0x5au8; len]);
                    if o.into {
                        world.isend_into(&mut reqs[n], b, peer, 2)?;
                    } else {
                        reqs.push(world.isend(b, peer, 2)?);
                    }
                    n += 1;
                }
            }
            world.waitall(&mut reqs[..n])?;
            let split = if receiver { WINDOW } else { 0 };
            take_back(&mut reqs[..split], &mut rpool);
            take_back(&mut reqs[split..n], &mut spool);
            if bi {
                continue;
            }
            if me == 0 {
                world.recv(&mut ack, 1, 3)?;
            } else {
                world.send(&ack, 0, 3)?;
            }
        }
        let dt = adi::wtime() - t0;
        let bytes = (len * WINDOW * reps) as f64 * if bi { 2.0 } else { 1.0 };
        Ok(bytes / dt / 1e6)
    })
}

fn run(o: &Opts) -> Result<(), Error> {
    let (world, provided) = adi::init_thread(o.threads)?;
    if world.size() != 2 {
        if world.rank() == 0 {
            eprintln!(
                "osu: needs exactly 2 ranks (tmrun -n 2), got {}",
                world.size()
            );
        }
        adi::finalize()?;
        std::process::exit(2);
    }
    let me = world.rank();
    if me == 0 {
        if o.csv {
            println!("test,bytes,value,unit");
        } else if !o.raw {
            println!(
                "# tmx adi OSU-style benchmark, 2 ranks, window {WINDOW}, thread level {provided:?}, requests {}",
                if o.into { "into" } else { "returned" }
            );
        }
    }
    for test in &o.tests {
        if me == 0 && !o.csv && !o.raw {
            let unit = if test == "latency" {
                "latency (us)"
            } else {
                "bandwidth (MB/s)"
            };
            println!("# {test}\n{:<12}{:>18}", "# size", unit);
        }
        for len in sizes(o.min_size, o.max_size) {
            let (v, unit) = match test.as_str() {
                "latency" => (latency(&world, len, o)?, "us"),
                "bw" => (bandwidth(&world, len, o, false)?, "MB/s"),
                "bibw" => (bandwidth(&world, len, o, true)?, "MB/s"),
                other => {
                    if me == 0 {
                        eprintln!("osu: unknown test {other:?}");
                    }
                    break;
                }
            };
            if me == 0 {
                if o.csv {
                    println!("{test},{len},{v:.3},{unit}");
                } else if o.raw {
                    let key = if test == "latency" {
                        "lat"
                    } else {
                        test.as_str()
                    };
                    let prec = if test == "latency" { 3 } else { 1 };
                    println!("{key} {len} {v:.prec$}");
                } else {
                    println!("{len:<12}{v:>18.2}");
                }
            }
        }
    }
    world.barrier()?;
    adi::finalize()
}

/// Pins glibc's mmap threshold (`M_MMAP_THRESHOLD`) at its default,
/// 128 KiB, which turns off glibc's raising of it when a mapped block is
/// freed: every window buffer of 128 KiB or more is then a mapping of its
/// own, page-aligned plus glibc's 16-byte header, as in `bibw` run alone
/// and as in `mpich_osu`'s one area. No-op outside glibc.
fn pin_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only sets an allocator parameter (glibc takes
        // its arena lock); no memory is handed out or freed by the call.
        let ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10) };
        if ok == 0 {
            eprintln!(
                "osu: mallopt(M_MMAP_THRESHOLD) failed; buffer placement may vary by test order"
            );
        }
    }
}

fn main() -> ExitCode {
    pin_mmap_threshold();
    let filter = tracing_subscriber::EnvFilter::try_from_env("TMX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let o = match parse_opts() {
        Ok(o) => o,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("osu: {e} ({})", e.class());
            ExitCode::FAILURE
        }
    }
}
