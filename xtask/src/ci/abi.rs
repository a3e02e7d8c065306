//! `cargo xtask bench abi [--quick]`: one compiled MPI program, run on
//! MPICH's library and on tmx's (`mpi-abi`'s `libmpich.so.12`), and on
//! Open MPI when it is installed: point-to-point, one-sided (put, get,
//! accumulate latency and put bandwidth) and collectives.
//!
//! `mpi-abi/bench/abi_bench.c` is compiled once with `mpicc.mpich`; the
//! same binary runs under `mpiexec.hydra` (Debian's MPICH) and under
//! `tmrun`, which puts tmx's library first on the ranks' loader path.
//! Open MPI has another ABI, so it gets its own build (`mpicc.openmpi`)
//! of the same source. Rounds alternate the order of the implementations;
//! each table cell is the median over the rounds of the per-round ratio
//! (other / tmx: > 1 means tmx is faster), with the lowest and highest.
//!
//! Rank counts: 2, and 4 when the machine has at least 4 cores (busy-polling
//! ranks on shared cores measure the scheduler); `TMX_BENCH_RANKS` (e.g.
//! `2,4`) overrides. `TMX_BENCH_ROUNDS` sets the rounds (default 5).
//! `--quick` runs one round of a few iterations: a smoke check of the
//! whole pipeline, not a measurement.

use super::*;

/// The benchmark's source, relative to the workspace.
const SOURCE: &str = "mpi-abi/bench/abi_bench.c";

/// `(test, ranks, bytes)` → microseconds of one run.
type Times = std::collections::BTreeMap<(String, u32, u64), f64>;

/// The implementations compared with tmx.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Tmx,
    Mpich,
    OpenMpi,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Tmx => "tmx",
            Side::Mpich => "MPICH",
            Side::OpenMpi => "Open MPI",
        }
    }
}

/// The `<test> <ranks> <bytes> <usec>` lines of `abi_bench`.
fn parse(out: &str) -> Times {
    let mut t = Times::new();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [test, ranks, bytes, usec] = w.as_slice() else {
            continue;
        };
        if let (Ok(r), Ok(b), Ok(u)) = (ranks.parse(), bytes.parse(), usec.parse::<f64>()) {
            t.insert((test.to_string(), r, b), u);
        }
    }
    t
}

/// The rank counts to run: `TMX_BENCH_RANKS` or 2 (and 4 with 4 cores).
fn rank_counts() -> Result<Vec<u32>, String> {
    if let Ok(v) = std::env::var("TMX_BENCH_RANKS") {
        let r: Result<Vec<u32>, _> = v.split(',').map(|s| s.trim().parse::<u32>()).collect();
        return match r {
            Ok(r) if !r.is_empty() && r.iter().all(|&n| (2..=64).contains(&n)) => Ok(r),
            _ => Err(format!(
                "TMX_BENCH_RANKS={v}: expected a list of rank counts 2..=64, e.g. 2,4"
            )),
        };
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(if cores >= 4 { vec![2, 4] } else { vec![2] })
}

/// Builds tmx's library and `tmrun` (release) and returns the release dir.
fn build_tmx(root: &Path) -> Result<PathBuf, String> {
    // Two builds: `--bin tmrun` would select only binaries of both packages.
    for args in [
        &["build", "--release", "-p", "mpi-abi", "--lib"][..],
        &["build", "--release", "-p", "launcher", "--bin", "tmrun"][..],
    ] {
        let mut c = cargo();
        c.current_dir(root).args(args);
        if !run_plain(c)? {
            return Err("building mpi-abi and tmrun failed".into());
        }
    }
    let rel = target_dir(root).join("release");
    if !rel.join("libmpich.so").is_file() {
        return Err(format!("{} has no libmpich.so", rel.display()));
    }
    Ok(rel)
}

/// Compiles [`SOURCE`] with Open MPI's `mpicc`, if it is installed.
fn build_openmpi(root: &Path) -> Result<Option<PathBuf>, String> {
    if !on_path("mpicc.openmpi") || !on_path("mpirun.openmpi") {
        println!(
            "Open MPI column skipped: mpicc.openmpi/mpirun.openmpi missing.\nInstall it with\n  sudo apt-get install -y openmpi-bin libopenmpi-dev\n"
        );
        return Ok(None);
    }
    let bin = target_dir(root).join("abi_bench_openmpi");
    let mut c = Command::new("mpicc.openmpi");
    c.args(["-O2", "-Wall", "-o"])
        .arg(&bin)
        .arg(root.join(SOURCE));
    if !run_plain(c)? {
        // `openmpi-bin` brings `mpicc.openmpi` but not `mpi.h`.
        println!(
            "Open MPI column skipped: compiling {SOURCE} with mpicc.openmpi failed (its headers come with libopenmpi-dev).\nInstall it with\n  sudo apt-get install -y libopenmpi-dev\n"
        );
        return Ok(None);
    }
    Ok(Some(bin))
}

/// The command that runs `bin` on `n` ranks with `side`'s launcher.
fn command(side: Side, n: u32, bin: &Path, rel: &Path, quick: bool) -> Command {
    let bind = std::thread::available_parallelism().map_or(1, |c| c.get()) >= n as usize;
    let n = n.to_string();
    let mut c = match side {
        Side::Tmx => {
            let mut c = Command::new(rel.join("tmrun"));
            c.args(["-n", &n]);
            if bind {
                c.args(["--bind-to", "core"]);
            }
            c.env("TMX_MPI_LIB", rel.join("libmpich.so"));
            c
        }
        Side::Mpich => {
            let mut c = Command::new("mpiexec.hydra");
            c.args(["-n", &n]);
            if bind {
                c.args(["-bind-to", "core"]);
            }
            c
        }
        Side::OpenMpi => {
            let mut c = Command::new("mpirun.openmpi");
            c.args(["--allow-run-as-root", "-n", &n]);
            if bind {
                c.args(["--bind-to", "core"]);
            } else {
                c.arg("--oversubscribe");
            }
            c
        }
    };
    c.arg(bin);
    if quick {
        c.arg("--quick");
    }
    c
}

pub(super) fn run_abi(args: &[String]) -> Result<(), String> {
    let quick = match args {
        [] => false,
        [q] if q == "--quick" => true,
        _ => return Err("usage: cargo xtask bench abi [--quick]".into()),
    };
    let root = workspace_root();
    let Some(mpich_bin) = build_mpich(&root, SOURCE, "abi_bench")? else {
        return Err("the abi benchmark needs MPICH (mpicc.mpich, mpiexec.hydra)".into());
    };
    let rel = build_tmx(&root)?;
    let ompi_bin = build_openmpi(&root)?;
    let rounds = if quick { 1 } else { bench_rounds(5)? };
    let ranks = rank_counts()?;
    let mut sides = vec![(Side::Mpich, mpich_bin.clone()), (Side::Tmx, mpich_bin)];
    if let Some(b) = ompi_bin {
        sides.push((Side::OpenMpi, b));
    }
    // all[round][side index]
    let mut all: Vec<Vec<Times>> = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..sides.len()).collect();
        order.rotate_left((round - 1) % sides.len());
        let mut got = vec![Times::new(); sides.len()];
        for &n in &ranks {
            for &i in &order {
                let (side, bin) = &sides[i];
                let (ok, out) = run_captured(command(*side, n, bin, &rel, quick))?;
                if !ok {
                    return Err(format!(
                        "abi_bench on {} with {n} ranks failed",
                        side.name()
                    ));
                }
                got[i].extend(parse(&out));
            }
        }
        println!(
            "(abi round {round} of {rounds} done; machine state now {})",
            state::probe().describe()
        );
        all.push(got);
    }
    print!(
        "{}",
        table(
            &sides.iter().map(|s| s.0).collect::<Vec<_>>(),
            &all,
            rounds,
            quick
        )
    );
    Ok(())
}

/// The results table: per measurement, tmx's median time and, per other
/// implementation, its median time and the median (lowest–highest) of the
/// per-round ratios other / tmx.
fn table(sides: &[Side], all: &[Vec<Times>], rounds: usize, quick: bool) -> String {
    let tmx = sides.iter().position(|&s| s == Side::Tmx).unwrap_or(0);
    let mut s = format!(
        "\n==== abi: the same binary on tmx and on other MPI libraries ({rounds} round{}{}); \
         µs, lower is better; ratio = other / tmx per round (> 1: tmx is faster) ====\n\n",
        if rounds == 1 { "" } else { "s" },
        if quick {
            ", --quick: NOT a measurement"
        } else {
            ""
        }
    );
    s.push_str("| test | ranks | size | tmx µs |");
    let mut rule = String::from("|---|---:|---:|---:|");
    for &side in sides.iter().filter(|&&x| x != Side::Tmx) {
        s.push_str(&format!(
            " {0} µs | {0} / tmx | lowest–highest |",
            side.name()
        ));
        rule.push_str("---:|---:|---:|");
    }
    s.push('\n');
    s.push_str(&rule);
    s.push('\n');
    let mut keys: Vec<(String, u32, u64)> = all
        .first()
        .map(|r| r[tmx].keys().cloned().collect())
        .unwrap_or_default();
    // The program's order: point-to-point, one-sided, then the collectives.
    const ORDER: [&str; 11] = [
        "latency",
        "bw",
        "bibw",
        "put_latency",
        "get_latency",
        "acc_latency",
        "put_bw",
        "allreduce",
        "bcast",
        "alltoall",
        "barrier",
    ];
    keys.sort_by_key(|(t, r, b)| (ORDER.iter().position(|o| o == t), *r, *b));
    let med = |i: usize, k: &(String, u32, u64)| {
        let mut v: Vec<f64> = all.iter().filter_map(|r| r[i].get(k).copied()).collect();
        v.sort_by(f64::total_cmp);
        median(&v)
    };
    for k in keys {
        let size = if k.0 == "barrier" {
            "–".to_string()
        } else {
            size_name(k.2)
        };
        s.push_str(&format!("| {} | {} | {size} |", k.0, k.1));
        match med(tmx, &k) {
            Some(t) => s.push_str(&format!(" {t:.2} |")),
            None => s.push_str(" – |"),
        }
        for (i, _) in sides.iter().enumerate().filter(|(i, _)| *i != tmx) {
            let mut r: Vec<f64> = all
                .iter()
                .filter_map(|round| {
                    let (o, t) = (*round[i].get(&k)?, *round[tmx].get(&k)?);
                    (o > 0.0 && t > 0.0).then_some(o / t)
                })
                .collect();
            r.sort_by(f64::total_cmp);
            match (med(i, &k), median(&r)) {
                (Some(o), Some(m)) => s.push_str(&format!(
                    " {o:.2} | {m:.2} | {:.2}–{:.2} |",
                    r[0],
                    r[r.len() - 1]
                )),
                (Some(o), None) => s.push_str(&format!(" {o:.2} | – | – |")),
                _ => s.push_str(" – | – | – |"),
            }
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bench_lines_and_ignores_the_rest() {
        let t = parse("latency 2 8 0.250\nnoise\nbarrier 4 0 1.5\nbw 2 x 1\n");
        assert_eq!(t.len(), 2);
        assert_eq!(t[&("latency".to_string(), 2, 8)], 0.25);
        assert_eq!(t[&("barrier".to_string(), 4, 0)], 1.5);
    }

    #[test]
    fn table_takes_the_median_of_per_round_ratios() {
        let sides = [Side::Mpich, Side::Tmx];
        let round = |m: f64, t: f64| {
            vec![
                parse(&format!("latency 2 8 {m}")),
                parse(&format!("latency 2 8 {t}")),
            ]
        };
        let all = vec![round(2.0, 1.0), round(3.0, 1.0), round(1.0, 1.0)];
        let s = table(&sides, &all, 3, false);
        let row = s.lines().find(|l| l.starts_with("| latency")).unwrap();
        assert_eq!(
            row,
            "| latency | 2 | 8 B | 1.00 | 2.00 | 2.00 | 1.00–3.00 |"
        );
    }
}
