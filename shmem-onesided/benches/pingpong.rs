//! OSU-style benchmark: two processes (this binary and a copy of itself),
//! pinned to CPUs 0 and 1, over a real node segment.
//!
//! - one-way latency (ping-pong / 2) for 1, 8, 64 B, 1 KiB, 64 KiB, 1 MiB
//! - unidirectional bandwidth (window of blocking sends, one ack) for
//!   64 KiB, 256 KiB, 1 MiB, 4 MiB
//! - single-thread memcpy bandwidth at the same sizes, measured in the same
//!   run, as the baseline the bandwidth is reported against
//! - the endpoint's CPU cost per message with nothing to wait for (both
//!   endpoints in one thread, a `#` line): the overhead above the ring
//!
//! Each configuration runs in a fresh job, one per path: `eager` (CMA off:
//! inline <= 40 B, copied through the eager area above, in pipelined chunks
//! above the `pipeline_min` of `TMX_SHMEM_TUNE`), `cma` (CMA
//! rendezvous for every message above 40 B, when permitted, prepost protocol
//! off) and `prepost` (the prepost protocol for every message above 40 B: a
//! CMA write into the receiver's advertised buffer; a send that finds no
//! trusted prepost takes the eager path, see the counters), and a baseline in
//! the same run: the bare header ring (one 64-byte slot each way, no
//! matching, no endpoint), the floor the endpoint's latency is compared with.
//!
//! Output is machine-readable, one figure per line (medians of 5 rounds after
//! a warm-up round), the same form as the MPICH baseline
//! `bench/mpich_pingpong.c` prints (without the path):
//!
//! ```text
//! lat <path> <bytes> <usec>
//! bw <path> <bytes> <MB/s>
//! memcpy <bytes> <MB/s>
//! ```
//!
//! Other lines start with `#` or `==`. `cargo bench -p shmem-onesided`;
//! `cargo xtask bench shmem-onesided` runs it next to the MPICH program and
//! prints one table.
#![allow(clippy::unwrap_used)] // a benchmark driver, like a test

use shmem_onesided::{CmaStatus, Endpoint, Node};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;
use tm_proto::{MatchSpec, Source, Tag};

const LAT_SIZES: &[usize] = &[1, 8, 64, 1024, 65536, 1 << 20];
const BW_SIZES: &[usize] = &[65536, 256 << 10, 1 << 20, 4 << 20];
const ROUNDS: usize = 5;
/// Largest message carried inline in the header slot.
const INLINE_MAX: usize = 40;
const ROLE: &str = "TMX_SHMEM_BENCH_RANK";
/// The path a configuration measures (`eager`, `cma`, `prepost`).
const PATH: &str = "TMX_SHMEM_BENCH_PATH";

fn iters(len: usize) -> usize {
    match len {
        0..=1024 => 20_000,
        1025..=65536 => 2_000,
        _ => 200,
    }
}

fn window(len: usize) -> usize {
    if len >= 1 << 20 {
        8
    } else {
        64
    }
}

fn pin(cpu: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write into our local
    // set, and sched_setaffinity(0, ...) reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn spec(src: u32) -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(src),
        tag: Tag::Any,
    }
}

/// Both ranks run the same schedule; rank 0 times it.
fn run(rank: u32) -> Vec<String> {
    pin(rank as usize);
    let mut ep = Endpoint::new(Node::init_from_env(rank, 2).unwrap());
    let peer = 1 - rank;
    let mut buf = vec![0u8; 4 << 20];
    let data = vec![0x5au8; 4 << 20];
    let path = std::env::var(PATH).unwrap_or_else(|_| "eager".into());
    let mut lines = Vec::new();
    let cma = matches!(ep.node().cma_status(), CmaStatus::Available);
    if rank == 0 {
        lines.push(format!("# cma available: {cma}"));
    }
    if path != "eager" && !cma {
        // Without CMA these configurations would measure the eager path again.
        lines.push(format!("# {path}: skipped, CMA not available"));
        ep.finalize().unwrap();
        return lines;
    }
    for &len in LAT_SIZES {
        if len <= INLINE_MAX && path != "eager" {
            continue; // inline in every configuration: measured once
        }
        let mut samples = Vec::new();
        for round in 0..=ROUNDS {
            let n = iters(len);
            let t = Instant::now();
            for _ in 0..n {
                // Receives into a buffer of the message's size, as
                // `MPI_Recv(rbuf, len, ...)` in the MPICH baseline.
                if rank == 0 {
                    ep.send(peer, 1, 0, &data[..len]).unwrap();
                    ep.recv(spec(peer), &mut buf[..len]).unwrap();
                } else {
                    ep.recv(spec(peer), &mut buf[..len]).unwrap();
                    ep.send(peer, 1, 0, &data[..len]).unwrap();
                }
            }
            if round > 0 {
                // round 0 warms up
                samples.push(t.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64));
            }
        }
        samples.sort_by(f64::total_cmp);
        let label = if len <= INLINE_MAX { "inline" } else { &path };
        lines.push(format!("lat {label} {len} {:.3}", samples[ROUNDS / 2]));
    }
    for &len in BW_SIZES {
        let mut samples = Vec::new();
        let reps = if len >= 1 << 20 { 10 } else { 50 };
        for round in 0..=ROUNDS {
            let t = Instant::now();
            for _ in 0..reps {
                if rank == 0 {
                    for _ in 0..window(len) {
                        ep.send(peer, 2, 0, &data[..len]).unwrap();
                    }
                    ep.recv(spec(peer), &mut buf[..64]).unwrap();
                } else {
                    for _ in 0..window(len) {
                        ep.recv(spec(peer), &mut buf[..len]).unwrap();
                    }
                    ep.send(peer, 3, 0, b"ack").unwrap();
                }
            }
            if round > 0 {
                let bytes = (reps * window(len) * len) as f64;
                samples.push(bytes / t.elapsed().as_secs_f64() / 1e6);
            }
        }
        samples.sort_by(f64::total_cmp);
        // memcpy baseline, same sizes, same run
        let mut dst = vec![0u8; len];
        let mut m = Vec::new();
        for _ in 0..ROUNDS {
            let t = Instant::now();
            let k = reps * window(len);
            for i in 0..k {
                dst.copy_from_slice(&data[..len]);
                std::hint::black_box(&mut dst);
                std::hint::black_box(i);
            }
            m.push((k * len) as f64 / t.elapsed().as_secs_f64() / 1e6);
        }
        m.sort_by(f64::total_cmp);
        let (bw, mc) = (samples[ROUNDS / 2], m[ROUNDS / 2]);
        lines.push(format!("bw {path} {len} {bw:.1}"));
        lines.push(format!("memcpy {len} {mc:.1}"));
    }
    let c = ep.finalize().unwrap();
    lines.push(format!("# counters (rank {rank}): {c}"));
    lines
}

/// Baseline: ping-pong of one header slot over the bare rings.
fn run_raw(rank: u32) -> Vec<String> {
    use shmem_onesided::ring::{Consumer, Header, Producer};
    pin(rank as usize);
    let node = Node::init_from_env(rank, 2).unwrap();
    let seg = node.segment();
    let peer = 1 - rank;
    let (out, inb) = (seg.ring(rank, peer), seg.ring(peer, rank));
    let (mut p, mut c) = (Producer::new(), Consumer::new(16));
    let mut h = Header {
        kind: 1,
        ..Header::default()
    };
    h.set_inline(&[7u8; 8]);
    let mut samples = Vec::new();
    for round in 0..=ROUNDS {
        let n = iters(8);
        let t = Instant::now();
        for _ in 0..n {
            if rank == 0 {
                while p.try_push(out, &h).is_err() {}
                while c.poll(inb).is_none() {
                    core::hint::spin_loop();
                }
            } else {
                while c.poll(inb).is_none() {
                    core::hint::spin_loop();
                }
                while p.try_push(out, &h).is_err() {}
            }
        }
        if round > 0 {
            samples.push(t.elapsed().as_secs_f64() * 1e6 / (2.0 * n as f64));
        }
    }
    samples.sort_by(f64::total_cmp);
    vec![format!("lat ring 8 {:.3}", samples[ROUNDS / 2])]
}

/// The endpoint's own CPU cost per message, without any waiting: both
/// ranks' endpoints live in this one thread (attached from two threads,
/// then moved here), and each `send` is followed at once by the matching
/// `recv` on the other endpoint, so the message is always already in the
/// ring. Best of 5 rounds; printed as a `#` line (not part of the table).
fn endpoint_cost() {
    use shmem_onesided::{CmaMode, Config};
    let job = format!("benchcost{}", std::process::id());
    let attach = |r: u32| {
        let j = job.clone();
        std::thread::spawn(move || {
            let c = Config {
                cma: CmaMode::Off,
                ..Config::default()
            };
            Endpoint::new(Node::init(&j, r, 2, c).unwrap())
        })
    };
    let (h0, h1) = (attach(0), attach(1));
    let (mut e0, mut e1) = (h0.join().unwrap(), h1.join().unwrap());
    for len in [8usize, 1024] {
        let data = vec![0x5au8; len];
        let mut buf = vec![0u8; len];
        let n = 200_000;
        let mut best = f64::MAX;
        for _ in 0..ROUNDS {
            let t = Instant::now();
            for _ in 0..n {
                e0.send(1, 1, 0, &data).unwrap();
                e1.recv(spec(0), &mut buf).unwrap();
                e1.send(0, 1, 0, &data).unwrap();
                e0.recv(spec(1), &mut buf).unwrap();
            }
            best = best.min(t.elapsed().as_secs_f64() * 1e9 / (2.0 * n as f64));
        }
        println!(
            "# endpoint CPU cost, {len} B: {best:.0} ns per message (send + matched recv, one thread, nothing to wait for)"
        );
    }
    e0.finalize().unwrap();
    e1.finalize().unwrap();
}

fn main() {
    if let Ok(r) = std::env::var(ROLE) {
        let lines = if std::env::var("TMX_SHMEM_BENCH_RAW").is_ok() {
            run_raw(r.parse().unwrap())
        } else {
            run(r.parse().unwrap())
        };
        if r == "0" {
            for l in lines {
                println!("{l}");
            }
        }
        return;
    }
    pin(0);
    endpoint_cost();
    let exe = std::env::current_exe().unwrap();
    for (i, (name, env)) in [
        (
            "bare ring baseline",
            &[("TMX_SHMEM_BENCH_RAW", "1"), ("TMX_SHMEM_CMA", "off")][..],
        ),
        (
            "inline <= 40 B, eager (two-copy) above (CMA off)",
            &[(PATH, "eager"), ("TMX_SHMEM_CMA", "off")][..],
        ),
        (
            "cma rendezvous above 40 B (prepost off)",
            &[
                (PATH, "cma"),
                ("TMX_SHMEM_CMA", "auto"),
                ("TMX_SHMEM_TUNE", "cma_threshold=40,prepost=off"),
            ][..],
        ),
        (
            "prepost-direct (CMA write) above 40 B, eager when no prepost is trusted",
            &[
                (PATH, "prepost"),
                ("TMX_SHMEM_CMA", "auto"),
                ("TMX_SHMEM_TUNE", "prepost=on,prepost_min=41"),
            ][..],
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let job = format!("bench{}-{i}", std::process::id());
        let kids: Vec<_> = (0..2)
            .map(|r| {
                let mut c = Command::new(&exe);
                c.env(ROLE, r.to_string())
                    .env("TMX_JOB_ID", &job)
                    .env("TMX_SHMEM_EAGER_BYTES", "64M")
                    .stdout(Stdio::piped());
                for (k, v) in env {
                    c.env(k, v);
                }
                // Each rank in its own session, as tmrun and Hydra start
                // ranks (the MPICH side of `cargo xtask bench` runs under
                // mpiexec.hydra): with sched_autogroup both sides then get
                // the same CPU shares.
                // SAFETY: runs in the child between fork and exec and only
                // calls setsid, an async-signal-safe system call; the child
                // is not a process-group leader, so it cannot fail with
                // EPERM, and any error fails the spawn.
                unsafe {
                    c.pre_exec(|| {
                        if libc::setsid() < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                c.spawn().unwrap()
            })
            .collect();
        println!("\n== shmem-onesided {name} ==");
        for k in kids {
            let out = k.wait_with_output().unwrap();
            print!("{}", String::from_utf8_lossy(&out.stdout));
            assert!(out.status.success(), "benchmark rank failed");
        }
    }
}
