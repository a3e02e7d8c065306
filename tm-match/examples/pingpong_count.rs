//! Runs one ping-pong matching scenario of `benches/pingpong.rs` a given
//! number of times, for instruction counting under a deterministic tool
//! (the shared VM has no hardware counters, and its timings are noisy):
//!
//! ```sh
//! cargo build --release -p tm-match --example pingpong_count
//! for n in 0 100000; do
//!   valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
//!     target/release/examples/pingpong_count offload/post_arrive_sw $n 2>&1 | grep 'I *refs'
//! done
//! ```
//!
//! Instructions per iteration = (refs at N − refs at 0) / N. Scenarios:
//! `offload/post_arrive_sw`, `offload/arrive_post_sw`,
//! `offload/post_unexpected_sw`,
//! `offload/post_engine_match`, `offload/post_arrive_sw_1000`,
//! `matcher/post_arrive`, `matcher/arrive_post`, `matcher/post_arrive_1000`,
//! `matcher/arrive_post_1000`, and `depth/posted/D`, `depth/unexpected/D`
//! (`benches/matching.rs`'s `posted/w0/D` and `unexpected/w0/D` loops).

use std::hint::black_box;
use std::process::ExitCode;

use tm_match::offload::{Action, Completion, EngineEvent, Offload, OffloadConfig, PostOutcome};
use tm_match::{Arrived, Matcher, Posted};
use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout};

fn spec() -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(1),
        tag: Tag::Value(7),
    }
}

fn env() -> Envelope {
    Envelope {
        context_id: 0,
        source: 1,
        tag: 7,
    }
}

fn unrelated(i: u32) -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(100 + i % 50),
        tag: Tag::Value(i),
    }
}

fn pump(off: &mut Offload<u64, u64>) -> u64 {
    let mut sum = 0u64;
    loop {
        if let Some(a) = off.poll_action() {
            if let Action::Add { handle, .. } = a {
                sum = sum.wrapping_add(handle.to_bits());
            }
        } else if let Some(c) = off.poll_completion() {
            if let Completion::Matched { recv, msg, .. } = c {
                sum = sum.wrapping_add(recv ^ msg);
            }
        } else {
            return sum;
        }
    }
}

/// xorshift64*, as in `benches/matching.rs`.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
    }
}

/// `benches/matching.rs`'s `posted/w0/D` and `unexpected/w0/D` loops:
/// `D` exact receives (or messages) keyed `(i % 64, i / 64)`; one random key
/// is matched and refilled per iteration.
fn run_depth(side: &str, depth: usize, n: u64) -> Result<u64, String> {
    let err = |e: tm_match::Error| e.to_string();
    let keys: Vec<(u32, u32)> = (0..depth)
        .map(|i| ((i % 64) as u32, (i / 64) as u32))
        .collect();
    let spec = |(s, t): (u32, u32)| MatchSpec {
        context_id: 3,
        source: Source::Rank(s),
        tag: Tag::Value(t),
    };
    let env = |(s, t): (u32, u32)| Envelope {
        context_id: 3,
        source: s,
        tag: t,
    };
    let mut m: Matcher<u32, u32> = Matcher::new();
    let mut sum = 0u64;
    let mut rng = Rng(42);
    match side {
        "posted" => {
            for (i, k) in keys.iter().enumerate() {
                let _ = m.post(spec(*k), i as u32).map_err(err)?;
            }
            for _ in 0..n {
                let k = keys[rng.below(keys.len())];
                let Arrived::Matched { recv, .. } = m.arrive(env(k), 0).map_err(err)? else {
                    return Err("no match".into());
                };
                let r = m.post(spec(k), recv).map_err(err)?;
                sum = sum.wrapping_add(u64::from(matches!(r, Posted::Queued(_))));
            }
        }
        "unexpected" => {
            for (i, k) in keys.iter().enumerate() {
                let _ = m.arrive(env(*k), i as u32).map_err(err)?;
            }
            for _ in 0..n {
                let k = keys[rng.below(keys.len())];
                let Posted::Matched { msg, env: e, .. } = m.post(spec(k), 0).map_err(err)? else {
                    return Err("no match".into());
                };
                let r = m.arrive(e, msg).map_err(err)?;
                sum = sum.wrapping_add(u64::from(matches!(r, Arrived::Queued(_))));
            }
        }
        _ => return Err(format!("unknown side {side}")),
    }
    Ok(sum)
}

fn run(scenario: &str, n: u64) -> Result<u64, String> {
    if let Some(rest) = scenario.strip_prefix("depth/") {
        let (side, depth) = rest.split_once('/').ok_or("depth/<side>/<depth>")?;
        let depth: usize = depth.parse().map_err(|_| "depth is a number")?;
        if depth == 0 {
            return Err("depth must be at least 1".into());
        }
        return run_depth(side, depth, n);
    }
    let mut sum = 0u64;
    let err = |e: tm_match::Error| e.to_string();
    let depth = if scenario.ends_with("_1000") { 1000 } else { 0 };
    let mut off: Offload<u64, u64> =
        Offload::new(OffloadConfig::new(TagLayout::DEFAULT, 64)).map_err(err)?;
    let mut m: Matcher<u64, u64> = Matcher::new();
    for k in 0..depth {
        if scenario.starts_with("offload/") {
            let _ = off.post(unrelated(k), u64::from(k), false).map_err(err)?;
        } else {
            let _ = m.post(unrelated(k), u64::from(k)).map_err(err)?;
        }
    }
    let tag = TagLayout::DEFAULT
        .encode(env())
        .map_err(|e| e.to_string())?;
    // One loop per scenario: nothing but the operations inside it.
    match scenario {
        "offload/post_arrive_sw" | "offload/post_arrive_sw_1000" => {
            for i in 0..n {
                let _ = off.post(black_box(spec()), i, false).map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
                off.arrive(black_box(env()), i).map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
            }
        }
        "offload/post_unexpected_sw" => {
            for i in 0..n {
                let _ = off.post(black_box(spec()), i, false).map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
                off.handle_event(EngineEvent::Unexpected {
                    tag: black_box(tag),
                    msg: i,
                    sync_request: false,
                })
                .map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
            }
        }
        "offload/arrive_post_sw" => {
            for i in 0..n {
                off.arrive(black_box(env()), i).map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
                if let PostOutcome::Matched { msg, .. } =
                    off.post(black_box(spec()), i, false).map_err(err)?
                {
                    sum = sum.wrapping_add(msg);
                }
            }
        }
        "offload/post_engine_match" => {
            for i in 0..n {
                let PostOutcome::Queued { id, .. } =
                    off.post(black_box(spec()), i, true).map_err(err)?
                else {
                    return Err("matched at post".into());
                };
                sum = sum.wrapping_add(pump(&mut off));
                off.handle_event(EngineEvent::Matched {
                    handle: id,
                    tag,
                    msg: i,
                })
                .map_err(err)?;
                sum = sum.wrapping_add(pump(&mut off));
            }
        }
        "matcher/post_arrive" | "matcher/post_arrive_1000" => {
            for i in 0..n {
                let _ = m.post(black_box(spec()), i).map_err(err)?;
                if let Arrived::Matched { recv, .. } = m.arrive(black_box(env()), i).map_err(err)? {
                    sum = sum.wrapping_add(recv);
                }
            }
        }
        "matcher/arrive_post" | "matcher/arrive_post_1000" => {
            for i in 0..n {
                let _ = m.arrive(black_box(env()), i).map_err(err)?;
                if let Posted::Matched { msg, .. } = m.post(black_box(spec()), i).map_err(err)? {
                    sum = sum.wrapping_add(msg);
                }
            }
        }
        _ => return Err(format!("unknown scenario {scenario}")),
    }
    Ok(sum)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(scenario), Some(n)) = (args.get(1), args.get(2).and_then(|n| n.parse().ok())) else {
        eprintln!("usage: pingpong_count <group/scenario> <iterations>");
        return ExitCode::FAILURE;
    };
    match run(scenario, n) {
        Ok(sum) => {
            println!("{scenario} x{n}: checksum {sum}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pingpong_count: {e}");
            ExitCode::FAILURE
        }
    }
}
