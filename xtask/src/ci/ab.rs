//! `cargo xtask bench ab REV`: adi's benchmark programs of this tree against
//! the same programs built from an earlier revision, interleaved in one run.
//!
//! A change that should not cost speed (a refactor, a new seam) is judged
//! by this comparison rather than against MPICH: both sides are tmx, built
//! the same way, run alternately under their own `tmrun`, so each round's
//! pair ran seconds apart on a machine whose speed changes within minutes.
//!
//! The earlier revision is checked out into a detached git worktree at
//! `target/ab/base` and built with its own target directory
//! (`target/ab/base-target`); the worktree is removed afterwards. Each
//! round runs `osu` (latency, bandwidth and bi-bandwidth, 1 B – 4 MiB),
//! `osu_rma` and `osu_ddt` of both builds, the order alternating between
//! rounds. The tables give per size the median of the per-round ratios
//! new / base (> 1: the new build is better) with the lowest and highest,
//! and list every median below [`TOLERANCE`].
//!
//! This kind of VM flips between a fast and a slow state (a cache-line
//! round trip of ~150 ns against ~450 ns, see `xtask/src/state.rs`) at
//! random moments, and a program run in the slow state is up to 3× slower
//! at small sizes: a round whose two `osu` runs fell in different states
//! says nothing about the builds. The state is therefore probed before
//! each `osu` run, and the pt2pt table is printed twice: over all rounds,
//! and over the rounds whose two runs started in the same state.

use super::*;

/// Paired medians below this are listed as regressions.
const TOLERANCE: f64 = 0.97;
/// The example programs compared.
const EXAMPLES: [&str; 3] = ["osu", "osu_rma", "osu_ddt"];

/// Builds `tmrun` and the [`EXAMPLES`] in `dir` (a workspace) into the
/// release directory of `target`; returns that release directory.
fn build_in(dir: &Path, target: &Path) -> Result<PathBuf, String> {
    let mut c = cargo();
    c.current_dir(dir).env("CARGO_TARGET_DIR", target).args([
        "build",
        "--release",
        "-p",
        "launcher",
        "--bin",
        "tmrun",
        "-p",
        "adi",
    ]);
    for e in EXAMPLES {
        c.args(["--example", e]);
    }
    if !run_plain(c)? {
        return Err(format!(
            "building the benchmark programs in {} failed",
            dir.display()
        ));
    }
    Ok(target.join("release"))
}

/// Checks `rev` out into a fresh detached worktree at `at`.
fn checkout(root: &Path, rev: &str, at: &Path) -> Result<(), String> {
    remove_worktree(root, at);
    let mut c = Command::new("git");
    c.current_dir(root)
        .args(["worktree", "add", "--detach", "--force"])
        .arg(at)
        .arg(rev);
    if !run_plain(c)? {
        return Err(format!(
            "`git worktree add {}` of {rev} failed",
            at.display()
        ));
    }
    Ok(())
}

/// Removes the worktree at `at` if there is one (best effort).
fn remove_worktree(root: &Path, at: &Path) {
    if at.exists() {
        let _ = Command::new("git")
            .current_dir(root)
            .args(["worktree", "remove", "--force"])
            .arg(at)
            .status();
    }
    let _ = Command::new("git")
        .current_dir(root)
        .args(["worktree", "prune"])
        .status();
}

/// `test bytes value` lines of `osu_rma`/`osu_ddt --raw`, keyed by
/// (test, bytes); a test whose name contains `_bw_` is a bandwidth.
type Raw = std::collections::BTreeMap<(String, u64), f64>;

fn raw(out: &str) -> Raw {
    let mut r = Raw::new();
    for line in out.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [test, bytes, value] = w.as_slice() else {
            continue;
        };
        if let (Ok(b), Ok(v)) = (bytes.parse::<u64>(), value.parse::<f64>()) {
            r.insert((test.to_string(), b), v);
        }
    }
    r
}

/// One round's outputs of both builds.
#[derive(Debug, Default)]
struct Round {
    /// `osu`: (new, base), labelled "tmx" and "mpich" for [`paired_rows`].
    pt2pt: (Figures, Figures),
    /// `osu_rma` and `osu_ddt`: (new, base).
    other: Vec<(Raw, Raw)>,
}

pub(super) fn run_ab(args: &[String]) -> Result<(), String> {
    let [rev] = args else {
        return Err("usage: cargo xtask bench ab REV (a git revision to compare against)".into());
    };
    let root = workspace_root();
    let target = target_dir(&root);
    let base_dir = target.join("ab").join("base");
    checkout(&root, rev, &base_dir)?;
    let result = build_in(&base_dir, &target.join("ab").join("base-target"))
        .and_then(|base| Ok((base, build_in(&root, &target)?)))
        .and_then(|(base, new)| run_rounds(rev, &base, &new));
    remove_worktree(&root, &base_dir);
    result
}

fn run_rounds(rev: &str, base: &Path, new: &Path) -> Result<(), String> {
    let rounds = bench_rounds(ADI_BENCH_ROUNDS)?;
    let mut all = Vec::with_capacity(rounds);
    // Per round, the machine's state before `osu` of (new, base).
    let mut states: Vec<(State, State)> = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        let mut r = Round::default();
        let order = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for (i, example) in EXAMPLES.iter().enumerate() {
            let (mut n, mut b) = (String::new(), String::new());
            let (mut sn, mut sb) = (State::Unknown, State::Unknown);
            for is_new in order {
                let st = if i == 0 {
                    state::probe()
                } else {
                    State::Unknown
                };
                let out = run_tmrun_pair(if is_new { new } else { base }, example)?;
                if is_new {
                    (n, sn) = (out, st);
                } else {
                    (b, sb) = (out, st);
                }
            }
            if i == 0 {
                states.push((sn, sb));
            }
            if i == 0 {
                r.pt2pt.0.merge(&n, "tmx");
                r.pt2pt.1.merge(&b, "mpich");
            } else {
                r.other.push((raw(&n), raw(&b)));
            }
        }
        println!(
            "(A/B round {round} of {rounds} done; machine state now {})",
            state::probe().describe()
        );
        all.push(r);
    }
    println!(
        "\n==== A/B: this tree over {rev} ({rounds} interleaved rounds): per-round ratios new / \
         base (> 1: new is better); median, lowest–highest ====\n"
    );
    let pairs: Vec<&(Figures, Figures)> = all.iter().map(|r| &r.pt2pt).collect();
    let mut below = Vec::new();
    print!("{}", pt2pt_table(&pairs, &mut below));
    let same: Vec<&(Figures, Figures)> = all
        .iter()
        .zip(&states)
        .filter(|(_, s)| same_state(s))
        .map(|(r, _)| &r.pt2pt)
        .collect();
    let described: Vec<String> = states
        .iter()
        .map(|(n, b)| format!("{}/{}", n.describe(), b.describe()))
        .collect();
    println!(
        "\nThe machine's state before each round's two `osu` runs (new/base): {}.",
        described.join(", ")
    );
    if same.is_empty() {
        println!("No round's two `osu` runs started in the same state.");
    } else {
        println!(
            "\n==== A/B osu, the {} of {rounds} rounds whose two runs started in the same state ====\n",
            same.len()
        );
        let mut below_same = Vec::new();
        print!("{}", pt2pt_table(&same, &mut below_same));
        if below_same.is_empty() {
            println!("\nSame-state rounds: every paired median is at or above {TOLERANCE}.");
        } else {
            println!(
                "\nSame-state rounds, paired medians below {TOLERANCE}: {}.",
                below_same.join(", ")
            );
        }
    }
    for (i, example) in EXAMPLES.iter().enumerate().skip(1) {
        println!("\n==== A/B {example}: per-round ratios new / base ====\n");
        let mut s =
            String::from("| test | size | median | lowest–highest |\n|---|---:|---:|---:|\n");
        let keys: Vec<(String, u64)> = all
            .first()
            .map(|r| r.other[i - 1].0.keys().cloned().collect())
            .unwrap_or_default();
        for key in keys {
            let bw = key.0.contains("_bw_");
            let mut r: Vec<f64> = all
                .iter()
                .filter_map(|round| {
                    let (n, b) = &round.other[i - 1];
                    let (n, b) = (*n.get(&key)?, *b.get(&key)?);
                    (n > 0.0 && b > 0.0).then(|| if bw { n / b } else { b / n })
                })
                .collect();
            r.sort_by(f64::total_cmp);
            if let Some(m) = median(&r) {
                s.push_str(&format!(
                    "| {} | {} | {m:.2} | {:.2}–{:.2} |\n",
                    key.0,
                    size_name(key.1),
                    r[0],
                    r[r.len() - 1]
                ));
                if m < TOLERANCE {
                    below.push(format!("{example} {} {} ({m:.2})", key.0, size_name(key.1)));
                }
            }
        }
        print!("{s}");
    }
    if below.is_empty() {
        println!("\nEvery paired median is at or above {TOLERANCE}.");
    } else {
        println!("\nPaired medians below {TOLERANCE}: {}.", below.join(", "));
    }
    Ok(())
}

/// Whether both runs of a round started in the same known state.
fn same_state(s: &(State, State)) -> bool {
    matches!(
        s,
        (State::Fast(_), State::Fast(_)) | (State::Slow(_), State::Slow(_))
    )
}

/// The pt2pt table of `pairs` (per size: median, lowest and highest of
/// the per-round ratios); the medians below [`TOLERANCE`] are pushed to
/// `below`.
fn pt2pt_table(pairs: &[&(Figures, Figures)], below: &mut Vec<String>) -> String {
    let rows = paired_rows(pairs);
    let mut s = String::from(
        "| size | lat median | lat lowest–highest | bw median | bw lowest–highest | bibw median | bibw lowest–highest |\n|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (b, cells) in &rows {
        s.push_str(&format!("| {} |", size_name(*b)));
        for (kind, cell) in PAIRED_KINDS.iter().zip(cells) {
            match cell {
                Some((m, lo, hi)) => {
                    s.push_str(&format!(" {m:.2} | {lo:.2}–{hi:.2} |"));
                    if *m < TOLERANCE {
                        below.push(format!("{kind} {} ({m:.2})", size_name(*b)));
                    }
                }
                None => s.push_str(" – | – |"),
            }
        }
        s.push('\n');
    }
    s
}
