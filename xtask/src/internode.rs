//! `cargo xtask bench internode`: point-to-point between two hosts.
//!
//! Two network-namespace hosts behind a bridge (10.231.0.2 and .3, veths
//! into a hub namespace at 10.231.0.1), one rank on each, alternating
//! rounds (the order rotates every round) of:
//!
//! - tmx: adi's `osu` example under `tmrun --hosts netns:A,netns:B -ppn 1`
//!   (verbs-tm's provider between the hosts: the software one over TCP
//!   without a tag-matching NIC);
//! - MPICH: the same loops (`adi/bench/mpich_osu.c`) under Debian's MPICH
//!   (ch4:ucx) with `UCX_TLS=tcp,self`, started by `mpiexec.hydra` through
//!   a remote-start wrapper that enters the host's namespace;
//! - Open MPI: the same source built with `mpicc.openmpi`, TCP BTL
//!   (`--mca pml ob1 --mca btl tcp,self`), the same wrapper as `rsh` agent;
//! - the floor: a raw TCP ping-pong (8 B) and stream (64 KiB, 1 MiB) over
//!   the same veth (this binary's `tcp-floor` command).
//!
//! Each run's traffic is checked on the hub's veth byte counters: a side
//! whose bandwidth run did not move its bytes across the link (it found
//! shared memory after all) is reported as such, not compared. The tables:
//! per size, each side's median over the rounds, and the paired per-round
//! ratios of tmx against the best of MPICH and Open MPI in that round and
//! against the TCP floor (medians, > 1: tmx is better).
//!
//! No side is bound to a CPU (`tmrun --bind-to none`, Hydra's
//! `-bind-to none`, Open MPI's `--bind-to none`): each namespace host
//! looks like a whole machine to its launcher daemon, and Open MPI's
//! default would pin both hosts' ranks to CPU 0.
//!
//! Needs root (namespaces) and iproute2; MPICH (`mpich libmpich-dev`) and
//! Open MPI (`openmpi-bin libopenmpi-dev`) are skipped, with a message,
//! when missing. `TMX_BENCH_ROUNDS` (default 5) rounds; `--quick` (or
//! `TMX_BENCH_QUICK=1`) runs one round of a fraction of the iterations (a
//! smoke test, not a measurement).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use crate::ci::{
    bench_rounds, build_mpich, build_osu, is_root, on_path, run_captured, target_dir,
    workspace_root, MPICH_OSU,
};
use crate::cluster::Namespaces;

/// Host addresses (namespace `n0`, `n1`) and the hub's.
const HOSTS: [&str; 2] = ["10.231.0.2", "10.231.0.3"];
const HUB: &str = "10.231.0.1";
/// The TCP floor's port.
const FLOOR_PORT: u16 = 17_231;
/// The bandwidth sizes of the floor (and the largest of every side).
const BW_SIZES: [usize; 2] = [64 << 10, 1 << 20];
/// A bandwidth run moves at least this much; less on the veth: it did not
/// cross the link.
const MIN_LINK_BYTES: u64 = 8 << 20;

/// A side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Tmx,
    Mpich,
    Ompi,
    Floor,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Tmx => "tmx",
            Side::Mpich => "MPICH (UCX tcp)",
            Side::Ompi => "Open MPI (btl tcp)",
            Side::Floor => "raw TCP",
        }
    }
}

/// `(test, bytes) → value` of one run (`lat` µs, `bw`/`bibw` MB/s).
type Figures = BTreeMap<(String, u64), f64>;

fn parse(out: &str) -> Figures {
    let mut f = Figures::new();
    for line in out.lines() {
        // Tagged output (`[0] lat 8 1.5`) or plain.
        let line = line.trim_start_matches(|c: char| c == '[' || c.is_ascii_digit() || c == ']');
        let w: Vec<&str> = line.split_whitespace().collect();
        if let [t @ ("lat" | "bw" | "bibw"), b, v] = w.as_slice() {
            if let (Ok(b), Ok(v)) = (b.parse::<u64>(), v.parse::<f64>()) {
                f.insert((t.to_string(), b), v);
            }
        }
    }
    f
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Bytes through the hub's veth of host 0 (both directions).
fn veth_bytes(ns: &Namespaces) -> u64 {
    ["rx_bytes", "tx_bytes"]
        .iter()
        .filter_map(|c| {
            let out = Command::new("ip")
                .args(["netns", "exec", ns.hub(), "cat"])
                .arg(format!("/sys/class/net/vh0/statistics/{c}"))
                .output()
                .ok()?;
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The remote-start wrapper of Hydra and Open MPI: `[options] HOST
/// COMMAND...` runs COMMAND in HOST's namespace.
fn write_wrapper(ns: &Namespaces) -> Result<PathBuf, String> {
    let path = target_dir(&workspace_root()).join("tmx-netns-rsh.sh");
    let names = ns.names();
    let script = format!(
        "#!/bin/sh\n# Remote start into a network namespace (cargo xtask bench internode).\n\
         while [ $# -gt 0 ]; do case \"$1\" in -o|-p|-l|-i) shift 2;; -*) shift;; *) break;; esac; done\n\
         host=$1; shift\n\
         case \"$host\" in {h0}) ns={n0};; {h1}) ns={n1};; *) echo \"tmx-netns-rsh: unknown host $host\" >&2; exit 255;; esac\n\
         exec ip netns exec \"$ns\" sh -c \"$*\"\n",
        h0 = HOSTS[0],
        h1 = HOSTS[1],
        n0 = names[1],
        n1 = names[2],
    );
    std::fs::write(&path, script).map_err(|e| format!("{}: {e}", path.display()))?;
    let ok = Command::new("chmod")
        .arg("+x")
        .arg(&path)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        Ok(path)
    } else {
        Err("chmod of the remote-start wrapper failed".into())
    }
}

/// The programs of a run.
struct Programs {
    rel: PathBuf,
    mpich: Option<PathBuf>,
    ompi: Option<PathBuf>,
    wrapper: PathBuf,
    xtask: PathBuf,
    quick: bool,
}

/// The command of one side's run (all started from the hub namespace).
fn command(side: Side, p: &Programs, ns: &Namespaces) -> Option<Command> {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.hub()]);
    let max = BW_SIZES[1].to_string();
    match side {
        Side::Tmx => {
            c.arg(p.rel.join("tmrun"))
                .args(["--hosts", &ns.hosts_arg(), "-ppn", "1"])
                .args(["--bind-to", "none"])
                .args(["--server-addr", HUB])
                .arg(p.rel.join("examples/osu"))
                .args(["--raw", "--tests", "latency,bw", "--max-size", &max]);
            if p.quick {
                c.arg("--quick");
            }
        }
        Side::Mpich => {
            c.arg("mpiexec.hydra")
                .args(["-hosts", &HOSTS.join(","), "-n", "2", "-ppn", "1"])
                .args(["-bind-to", "none"])
                .args(["-launcher", "ssh", "-launcher-exec"])
                .arg(&p.wrapper)
                .args(["-iface", "br0"])
                .args(["-genv", "UCX_TLS", "tcp,self"])
                .args(["-genv", "UCX_NET_DEVICES", "eth0"])
                .arg(p.mpich.as_ref()?);
            if p.quick {
                c.arg("0.02");
            }
            c.args(["--tests", "lat,bw", "--max-size", &max]);
        }
        Side::Ompi => {
            c.arg("mpirun.openmpi")
                .args(["--allow-run-as-root", "-np", "2", "--map-by", "node"])
                // Each namespace host looks like a whole machine to its
                // daemon, which would pin its one rank to CPU 0: both ranks
                // on one CPU.
                .args(["--bind-to", "none"])
                .args(["--host", &format!("{},{}", HOSTS[0], HOSTS[1])])
                .args(["--mca", "plm_rsh_agent"])
                .arg(&p.wrapper)
                .args(["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"])
                .args(["--mca", "btl_tcp_if_include", "10.231.0.0/24"])
                .args(["--mca", "oob_tcp_if_include", "10.231.0.0/24"])
                .arg(p.ompi.as_ref()?);
            if p.quick {
                c.arg("0.02");
            }
            c.args(["--tests", "lat,bw", "--max-size", &max]);
        }
        Side::Floor => {
            // The server in host 1, the client in host 0 (through a shell:
            // both in one command).
            let x = p.xtask.to_string_lossy();
            let names = ns.names();
            let reps = if p.quick { "quick" } else { "full" };
            let script = format!(
                "ip netns exec {n1} {x} tcp-floor serve {h1}:{FLOOR_PORT} & \
                 sleep 0.3; ip netns exec {n0} {x} tcp-floor client {h1}:{FLOOR_PORT} {reps}; \
                 r=$?; wait; exit $r",
                n0 = names[1],
                n1 = names[2],
                h1 = HOSTS[1],
            );
            let mut c = Command::new("sh");
            c.args(["-c", &script]);
            return Some(c);
        }
    }
    Some(c)
}

/// `cargo xtask bench internode [--quick]`.
pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut quick = std::env::var("TMX_BENCH_QUICK").is_ok_and(|v| v == "1");
    for a in args {
        match a.as_str() {
            "--quick" => quick = true,
            other => return Err(format!("bench internode: unknown argument `{other}`")),
        }
    }
    if !is_root() {
        return Err("bench internode needs root (network namespaces)".into());
    }
    if !on_path("ip") {
        return Err("bench internode needs `ip` (install iproute2)".into());
    }
    let root = workspace_root();
    let rel = build_osu(&root)?;
    let mpich = build_mpich(&root, MPICH_OSU, "mpich_osu")?;
    let ompi = if on_path("mpicc.openmpi") && on_path("mpirun.openmpi") {
        let bin = target_dir(&root).join("ompi_osu");
        let ok = Command::new("mpicc.openmpi")
            .args(["-O2", "-Wall", "-o"])
            .arg(&bin)
            .arg(root.join(MPICH_OSU))
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            return Err("compiling the OSU loops with mpicc.openmpi failed".into());
        }
        Some(bin)
    } else {
        println!("Open MPI baseline skipped: install openmpi-bin libopenmpi-dev");
        None
    };
    let rounds = if quick { 1 } else { bench_rounds(5)? };
    let ns = Namespaces::create(2)?;
    let p = Programs {
        rel,
        mpich,
        ompi,
        wrapper: write_wrapper(&ns)?,
        xtask: std::env::current_exe().map_err(|e| format!("this executable: {e}"))?,
        quick,
    };
    let sides: Vec<Side> = [Side::Tmx, Side::Mpich, Side::Ompi, Side::Floor]
        .into_iter()
        .filter(|s| match s {
            Side::Mpich => p.mpich.is_some(),
            Side::Ompi => p.ompi.is_some(),
            _ => true,
        })
        .collect();
    // rounds[i][side] = figures of that side in round i (None: it failed
    // or did not cross the link).
    let mut all: Vec<BTreeMap<Side, Figures>> = Vec::new();
    for round in 0..rounds {
        let mut this = BTreeMap::new();
        let k = sides.len();
        for i in 0..k {
            let side = sides[(i + round) % k];
            let Some(c) = command(side, &p, &ns) else {
                continue;
            };
            let before = veth_bytes(&ns);
            let t = Instant::now();
            let (ok, out) = run_captured(c)?;
            let moved = veth_bytes(&ns).saturating_sub(before);
            println!(
                "({} round {}: {:.1}s, {:.1} MB through the veth)",
                side.name(),
                round + 1,
                t.elapsed().as_secs_f64(),
                moved as f64 / 1e6
            );
            if !ok {
                println!(
                    "{}: the run failed; left out of round {}",
                    side.name(),
                    round + 1
                );
                continue;
            }
            let min = if quick {
                MIN_LINK_BYTES / 50
            } else {
                MIN_LINK_BYTES
            };
            if moved < min {
                println!(
                    "{}: only {moved} bytes crossed the veth: it did not use the link; left out",
                    side.name()
                );
                continue;
            }
            this.insert(side, parse(&out));
        }
        all.push(this);
    }
    drop(ns);
    print!("{}", table(&sides, &all));
    if quick {
        println!("(--quick: a smoke run, not a measurement)");
    }
    Ok(())
}

/// The tables: medians per side, and paired per-round ratios.
fn table(sides: &[Side], all: &[BTreeMap<Side, Figures>]) -> String {
    let mut keys: Vec<(String, u64)> = all
        .iter()
        .flat_map(|r| r.values())
        .flat_map(|f| f.keys().cloned())
        .collect();
    keys.sort();
    keys.dedup();
    let mut s = format!(
        "\n==== internode: 2 netns hosts, 1 rank each ({} rounds; median of rounds) ====\n\n| test | size |",
        all.len()
    );
    for side in sides {
        s.push_str(&format!(" {} |", side.name()));
    }
    s.push_str(" tmx / best MPI (paired median) | tmx / raw TCP (paired median) |\n|---|---|");
    for _ in sides {
        s.push_str("---|");
    }
    s.push_str("---|---|\n");
    for (test, bytes) in keys {
        let key = (test.clone(), bytes);
        let lower_better = test == "lat";
        // > 1: tmx is better.
        let ratio = |tmx: f64, other: f64| {
            if lower_better {
                other / tmx
            } else {
                tmx / other
            }
        };
        s.push_str(&format!("| {test} | {bytes} |"));
        for side in sides {
            let v = median(
                all.iter()
                    .filter_map(|r| r.get(side)?.get(&key).copied())
                    .collect(),
            );
            s.push_str(&match v {
                Some(v) => format!(" {v:.2} |"),
                None => " – |".to_string(),
            });
        }
        let mut vs_mpi = Vec::new();
        let mut vs_floor = Vec::new();
        for r in all {
            let Some(t) = r.get(&Side::Tmx).and_then(|f| f.get(&key)) else {
                continue;
            };
            let best = [Side::Mpich, Side::Ompi]
                .iter()
                .filter_map(|x| r.get(x)?.get(&key).copied())
                .reduce(|a, b| if lower_better { a.min(b) } else { a.max(b) });
            if let Some(b) = best {
                vs_mpi.push(ratio(*t, b));
            }
            if let Some(f) = r.get(&Side::Floor).and_then(|f| f.get(&key)) {
                vs_floor.push(ratio(*t, *f));
            }
        }
        for v in [vs_mpi, vs_floor] {
            s.push_str(&match median(v) {
                Some(m) => format!(" {m:.2} |"),
                None => " – |".to_string(),
            });
        }
        s.push('\n');
    }
    s.push_str("\nlat: one-way latency in µs (half the round trip); bw: MB/s. Ratios > 1: tmx is better.\n");
    s
}

/// `cargo xtask tcp-floor serve ADDR | client ADDR quick|full`: the raw
/// TCP ping-pong and stream of the floor.
pub(crate) fn tcp_floor(args: &[String]) -> Result<(), String> {
    let io = |e: std::io::Error| format!("tcp-floor: {e}");
    match args {
        [mode, addr] if mode == "serve" => {
            let l = TcpListener::bind(addr.as_str()).map_err(io)?;
            let (mut s, _) = l.accept().map_err(io)?;
            s.set_nodelay(true).map_err(io)?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                // A request: op (1: ping-pong, 2: stream), size, count.
                let mut h = [0u8; 17];
                if s.read_exact(&mut h).is_err() {
                    return Ok(());
                }
                let size = u64::from_le_bytes(h[1..9].try_into().unwrap_or_default()) as usize;
                let count = u64::from_le_bytes(h[9..17].try_into().unwrap_or_default());
                let size = size.min(buf.len());
                for _ in 0..count {
                    s.read_exact(&mut buf[..size]).map_err(io)?;
                    if h[0] == 1 {
                        s.write_all(&buf[..size]).map_err(io)?;
                    }
                }
                if h[0] == 2 {
                    s.write_all(&[1]).map_err(io)?;
                }
            }
        }
        [mode, addr, reps] if mode == "client" => {
            let quick = reps == "quick";
            let s = (0..50)
                .find_map(|_| {
                    TcpStream::connect(addr.as_str()).ok().or_else(|| {
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        None
                    })
                })
                .ok_or_else(|| format!("tcp-floor: cannot connect to {addr}"))?;
            let mut s = s;
            s.set_nodelay(true).map_err(io)?;
            let req = |s: &mut TcpStream, op: u8, size: usize, count: u64| {
                let mut h = vec![op];
                h.extend_from_slice(&(size as u64).to_le_bytes());
                h.extend_from_slice(&count.to_le_bytes());
                s.write_all(&h)
            };
            let mut buf = vec![7u8; 1 << 20];
            let n: u64 = if quick { 200 } else { 10_000 };
            for &size in &[8usize] {
                req(&mut s, 1, size, n + 100).map_err(io)?;
                let mut t = Instant::now();
                for i in 0..n + 100 {
                    if i == 100 {
                        t = Instant::now();
                    }
                    s.write_all(&buf[..size]).map_err(io)?;
                    s.read_exact(&mut buf[..size]).map_err(io)?;
                }
                let us = t.elapsed().as_secs_f64() * 1e6 / (2 * n) as f64;
                println!("lat {size} {us:.3}");
            }
            for &size in &BW_SIZES {
                let count: u64 = if quick {
                    20
                } else {
                    (256u64 << 20) / size as u64
                };
                req(&mut s, 2, size, count).map_err(io)?;
                let t = Instant::now();
                for _ in 0..count {
                    s.write_all(&buf[..size]).map_err(io)?;
                }
                let mut ack = [0u8];
                s.read_exact(&mut ack).map_err(io)?;
                let mbs = (size as u64 * count) as f64 / t.elapsed().as_secs_f64() / 1e6;
                println!("bw {size} {mbs:.1}");
            }
            Ok(())
        }
        _ => Err("usage: cargo xtask tcp-floor serve ADDR | client ADDR quick|full".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_parse_tagged_and_plain_lines() {
        let f = parse("[0] lat 8 12.5\nbw 65536 900.0\n# note\n[1] bibw 1 3\nlat x 1\n");
        assert_eq!(f.get(&("lat".to_string(), 8)), Some(&12.5));
        assert_eq!(f.get(&("bw".to_string(), 65536)), Some(&900.0));
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn the_table_pairs_rounds_against_the_best_mpi_and_the_floor() {
        let round = |t: f64, m: f64, o: f64, fl: f64| {
            let mut r = BTreeMap::new();
            for (side, v) in [
                (Side::Tmx, t),
                (Side::Mpich, m),
                (Side::Ompi, o),
                (Side::Floor, fl),
            ] {
                r.insert(side, parse(&format!("lat 8 {v}\n")));
            }
            r
        };
        // tmx 10 µs vs best MPI 20 (ratio 2), vs floor 5 (0.5); then 20 vs
        // 10 (0.5) and 5 (0.25); then 10 vs 10 (1) and 10 (1).
        let all = vec![
            round(10.0, 20.0, 30.0, 5.0),
            round(20.0, 10.0, 40.0, 5.0),
            round(10.0, 12.0, 10.0, 10.0),
        ];
        let t = table(&[Side::Tmx, Side::Mpich, Side::Ompi, Side::Floor], &all);
        let row = t.lines().find(|l| l.starts_with("| lat | 8 |")).unwrap();
        assert!(
            row.ends_with("| 10.00 | 12.00 | 30.00 | 5.00 | 1.00 | 0.50 |"),
            "{t}"
        );
    }
}
