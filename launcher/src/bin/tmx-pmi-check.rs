//! `tmx-pmi-check`: a PMI diagnostic and the rank program of the launcher's tests.
//!
//! Run it under any PMI launcher (`tmrun -n 4 tmx-pmi-check`,
//! `mpiexec.hydra -n 4 tmx-pmi-check`, `srun --mpi=pmi2 tmx-pmi-check --pmi 2`):
//! every rank puts text and binary (hex-encoded) values, checks that they are
//! invisible before the barrier and correct after it, checks the node layout,
//! and prints one `ok` line. Exit status 0 on success, 1 on any mismatch.
//!
//! Test options: `--fail-rank R --fail exit:N|abort:N|hang|sigkill|nofinalize`
//! makes rank R misbehave after the first barrier; `--shm` creates
//! `/dev/shm/tmx-<jobid>-check-<rank>` and leaves it; `--pid-dir DIR` writes
//! `DIR/<rank>.pid`; `--raw TEXT [--raw-replies N] [--raw-fill N]` sends TEXT
//! (with `\n` escapes, `@FILL@` replaced by N `B`s) on the inherited PMI socket
//! and prints N reply lines, with no handshake; `--raw-repeat K` sends TEXT K
//! times back to back, and `--raw-hold SECS` then waits that long without
//! reading (a client that pipelines requests and never reads the replies).

use std::io::{BufRead, BufReader, Write};
use std::process::ExitCode;
use std::time::Duration;

use launcher::{client, job, Error, InitOptions, Pmi, PmiVersion};

#[derive(Debug, Default)]
struct Opts {
    version: Option<PmiVersion>,
    keys: usize,
    fail_rank: Option<usize>,
    fail: Option<String>,
    shm: bool,
    pid_dir: Option<String>,
    raw: Option<String>,
    raw_replies: usize,
    raw_fill: usize,
    raw_repeat: usize,
    raw_hold: u64,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        keys: 2,
        raw_repeat: 1,
        ..Opts::default()
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let opt = args[i].clone();
        let next = args.get(i + 1).cloned();
        let mut val = || -> Result<String, String> {
            i += 1;
            next.clone().ok_or_else(|| format!("{opt} needs a value"))
        };
        match opt.as_str() {
            "--pmi" => {
                o.version = Some(match val()?.as_str() {
                    "1" => PmiVersion::V1,
                    "2" => PmiVersion::V2,
                    v => return Err(format!("--pmi {v}: expected 1 or 2")),
                })
            }
            "--keys" => o.keys = val()?.parse().map_err(|_| "--keys: not a number")?,
            "--fail-rank" => {
                o.fail_rank = Some(val()?.parse().map_err(|_| "--fail-rank: not a number")?)
            }
            "--fail" => o.fail = Some(val()?),
            "--shm" => o.shm = true,
            "--pid-dir" => o.pid_dir = Some(val()?),
            "--raw" => o.raw = Some(val()?.replace("\\n", "\n")),
            "--raw-fill" => o.raw_fill = val()?.parse().map_err(|_| "--raw-fill: not a number")?,
            "--raw-repeat" => {
                o.raw_repeat = val()?.parse().map_err(|_| "--raw-repeat: not a number")?
            }
            "--raw-hold" => o.raw_hold = val()?.parse().map_err(|_| "--raw-hold: not a number")?,
            "--raw-replies" => {
                o.raw_replies = val()?.parse().map_err(|_| "--raw-replies: not a number")?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
        i += 1;
    }
    Ok(o)
}

fn raw(text: &str, replies: usize, repeat: usize, hold: u64) -> Result<(), Error> {
    let mut s = client::take_inherited_socket()?;
    let mut all = Vec::with_capacity(text.len().saturating_mul(repeat));
    for _ in 0..repeat {
        all.extend_from_slice(text.as_bytes());
    }
    s.write_all(&all)
        .map_err(|e| Error::Io {
            context: "raw send".into(),
            source: e,
        })
        .ok();
    if hold > 0 {
        std::thread::sleep(Duration::from_secs(hold));
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut r = BufReader::new(s);
    for _ in 0..replies {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) => {
                println!("raw: EOF");
                break;
            }
            Ok(_) => println!("raw reply: {}", line.trim_end()),
            Err(e) => {
                println!("raw: read error {e}");
                break;
            }
        }
    }
    Ok(())
}

fn text_value(rank: usize, k: usize) -> String {
    format!("v={rank}.{k}=x")
}

fn bytes_value(rank: usize, k: usize) -> Vec<u8> {
    let mut v = format!("bin {rank} {k};\\\n").into_bytes();
    v.extend_from_slice(&[0, 0xff, b'=', rank as u8]);
    v
}

fn check(o: &Opts) -> Result<(), String> {
    let mut pmi = Pmi::init_with(InitOptions { version: o.version }).map_err(|e| e.to_string())?;
    let (rank, size) = (pmi.rank(), pmi.size());
    if let Some(dir) = &o.pid_dir {
        std::fs::write(format!("{dir}/{rank}.pid"), std::process::id().to_string())
            .map_err(|e| format!("pid file: {e}"))?;
    }
    if o.shm {
        let path = format!(
            "{}/{}check-{rank}",
            job::SHM_DIR,
            job::shm_prefix(pmi.job_id())
        );
        std::fs::write(&path, b"tmx").map_err(|e| format!("creating {path}: {e}"))?;
        println!("tmx-pmi-check: created {path}");
    }
    for k in 0..o.keys {
        pmi.put(&format!("t-{rank}-{k}"), &text_value(rank, k))
            .map_err(|e| e.to_string())?;
        pmi.put_bytes(&format!("b-{rank}-{k}"), &bytes_value(rank, k))
            .map_err(|e| e.to_string())?;
    }
    // PMI-1 servers (Hydra, tmrun) fence puts; Hydra's PMI-2 shows them at once,
    // which the PMI-2 spec allows, so only PMI-1 is held to it.
    if o.keys > 0 && pmi.version() == PmiVersion::V1 {
        match pmi.get(&format!("t-{rank}-0")) {
            Err(Error::KeyNotFound { .. }) => {}
            other => return Err(format!("own key visible before the barrier: {other:?}")),
        }
    }
    pmi.barrier().map_err(|e| e.to_string())?;
    for p in 0..size {
        for k in 0..o.keys {
            let t = pmi.get(&format!("t-{p}-{k}")).map_err(|e| e.to_string())?;
            if t != text_value(p, k) {
                return Err(format!("rank {p} key {k}: got {t:?}"));
            }
            let b = pmi
                .get_bytes(&format!("b-{p}-{k}"))
                .map_err(|e| e.to_string())?;
            if b != bytes_value(p, k) {
                return Err(format!("rank {p} bytes {k}: got {b:?}"));
            }
        }
    }
    let layout = pmi.layout().clone();
    if !layout.local_ranks().contains(&rank) {
        return Err(format!("layout does not contain me: {layout:?}"));
    }
    if o.fail_rank == Some(rank) {
        let mode = o.fail.clone().unwrap_or_default();
        eprintln!("tmx-pmi-check: rank {rank} failing on purpose: {mode}");
        match mode.split_once(':') {
            Some(("exit", n)) => std::process::exit(n.parse().unwrap_or(1)),
            Some(("abort", n)) => pmi.abort(n.parse().unwrap_or(1), "requested by --fail"),
            _ => {}
        }
        match mode.as_str() {
            "hang" => loop {
                std::thread::sleep(Duration::from_secs(3600));
            },
            "sigkill" => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::this(),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            "nofinalize" => std::process::exit(0),
            other => return Err(format!("unknown --fail mode {other:?}")),
        }
    }
    pmi.barrier().map_err(|e| e.to_string())?;
    println!(
        "tmx-pmi-check: rank {rank} of {size} ok (pmi={:?} bootstrap={:?} appnum={} kvs={} job={} nodes={} local={:?})",
        pmi.version(),
        pmi.bootstrap(),
        pmi.appnum(),
        pmi.kvsname(),
        pmi.job_id(),
        layout.num_nodes(),
        layout.local_ranks(),
    );
    pmi.finalize().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("tmx-pmi-check: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(text) = &o.raw {
        let text = text.replace("@FILL@", &"B".repeat(o.raw_fill));
        return match raw(&text, o.raw_replies, o.raw_repeat, o.raw_hold) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tmx-pmi-check: {e}");
                ExitCode::from(1)
            }
        };
    }
    match check(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tmx-pmi-check: FAILED: {e}");
            ExitCode::from(1)
        }
    }
}
