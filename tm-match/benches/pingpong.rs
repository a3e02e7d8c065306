//! The per-message cost of matching in a ping-pong: one receive posted and one
//! message matched per iteration, the pattern of an 8-byte latency test.
//!
//! Through [`Offload`], as shmem-onesided's `Endpoint` drives it
//! (`OffloadConfig::new(TagLayout::DEFAULT, N)`, completions and actions
//! polled until empty after every call):
//!
//! - `offload/post_arrive_sw`: an exact receive that stays in software
//!   (`eligible = false`: a small eager message), then the matching message
//!   arrives on the bypass path (`Offload::arrive`).
//! - `offload/arrive_post_sw`: the message first (queued unexpected), then
//!   the receive (matched at post).
//! - `offload/post_unexpected_sw`: as `post_arrive_sw`, but the message
//!   comes as a counted engine-unexpected event (`EngineEvent::Unexpected`,
//!   what the endpoint does for a message its sender counted).
//! - `offload/post_engine_match`: an eligible exact receive (an `Add` action),
//!   then the engine reports `Matched` for it (the prepost-direct path).
//! - `offload/post_arrive_sw_1000`: as `post_arrive_sw` with 1,000 unrelated
//!   software receives already posted.
//!
//! Through [`Matcher`]:
//!
//! - `matcher/post_arrive`: empty queues, post then arrive.
//! - `matcher/arrive_post`: empty queues, arrive (unexpected) then post.
//! - `matcher/post_arrive_1000`: post then arrive with 1,000 unrelated
//!   posted receives present (the indexed form).
//! - `matcher/arrive_post_1000`: arrive then post with 1,000 unrelated posted
//!   receives present.
//!
//! Run: `cargo bench -p tm-match --bench pingpong`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use tm_match::offload::{Action, Completion, EngineEvent, Offload, OffloadConfig, PostOutcome};
use tm_match::{Arrived, Matcher, Posted};
use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout};

const CTX: u32 = 0;
const PEER: u32 = 1;
const TAG: u32 = 7;

fn spec() -> MatchSpec {
    MatchSpec {
        context_id: CTX,
        source: Source::Rank(PEER),
        tag: Tag::Value(TAG),
    }
}

fn env() -> Envelope {
    Envelope {
        context_id: CTX,
        source: PEER,
        tag: TAG,
    }
}

/// 1,000 exact receives from sources no message in the bench uses.
fn unrelated(i: u32) -> MatchSpec {
    MatchSpec {
        context_id: CTX,
        source: Source::Rank(100 + i % 50),
        tag: Tag::Value(i),
    }
}

fn offload() -> Offload<u64, u64> {
    Offload::new(OffloadConfig::new(TagLayout::DEFAULT, 64)).expect("valid config")
}

/// Polls actions and completions until both are empty (what the endpoint's
/// `pump` does); returns a checksum so nothing is optimized away.
#[inline(always)]
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

fn bench_offload(c: &mut Criterion) {
    let mut g = c.benchmark_group("offload");

    let mut off = offload();
    let mut i = 0u64;
    g.bench_function("post_arrive_sw", |b| {
        b.iter(|| {
            i += 1;
            let out = off.post(black_box(spec()), i, false).expect("post");
            assert!(matches!(out, PostOutcome::Queued { .. }));
            let mut s = pump(&mut off);
            off.arrive(black_box(env()), i).expect("arrive");
            s = s.wrapping_add(pump(&mut off));
            black_box(s)
        })
    });

    let mut off = offload();
    let mut i = 0u64;
    g.bench_function("arrive_post_sw", |b| {
        b.iter(|| {
            i += 1;
            off.arrive(black_box(env()), i).expect("arrive");
            let s = pump(&mut off);
            let out = off.post(black_box(spec()), i, false).expect("post");
            let PostOutcome::Matched { msg, .. } = out else {
                panic!("no match at post")
            };
            black_box(s.wrapping_add(msg))
        })
    });

    let mut off = offload();
    let tag = TagLayout::DEFAULT.encode(env()).expect("tag fits");
    let mut i = 0u64;
    g.bench_function("post_unexpected_sw", |b| {
        b.iter(|| {
            i += 1;
            let out = off.post(black_box(spec()), i, false).expect("post");
            assert!(matches!(out, PostOutcome::Queued { .. }));
            let mut s = pump(&mut off);
            off.handle_event(EngineEvent::Unexpected {
                tag: black_box(tag),
                msg: i,
                sync_request: false,
            })
            .expect("unexpected");
            s = s.wrapping_add(pump(&mut off));
            black_box(s)
        })
    });

    let mut off = offload();
    let mut i = 0u64;
    g.bench_function("post_engine_match", |b| {
        b.iter(|| {
            i += 1;
            let out = off.post(black_box(spec()), i, true).expect("post");
            let PostOutcome::Queued {
                id,
                offloaded: true,
            } = out
            else {
                panic!("not offloaded")
            };
            let mut s = pump(&mut off);
            off.handle_event(EngineEvent::Matched {
                handle: id,
                tag,
                msg: i,
            })
            .expect("matched");
            s = s.wrapping_add(pump(&mut off));
            black_box(s)
        })
    });

    let mut off = offload();
    for k in 0..1000 {
        let _ = off.post(unrelated(k), u64::from(k), false).expect("post");
    }
    let mut i = 0u64;
    g.bench_function("post_arrive_sw_1000", |b| {
        b.iter(|| {
            i += 1;
            let out = off.post(black_box(spec()), i, false).expect("post");
            assert!(matches!(out, PostOutcome::Queued { .. }));
            let mut s = pump(&mut off);
            off.arrive(black_box(env()), i).expect("arrive");
            s = s.wrapping_add(pump(&mut off));
            black_box(s)
        })
    });
    g.finish();
}

fn bench_matcher(c: &mut Criterion) {
    let mut g = c.benchmark_group("matcher");
    for depth in [0u32, 1000] {
        let mut m: Matcher<u64, u64> = Matcher::new();
        for k in 0..depth {
            let _ = m.post(unrelated(k), u64::from(k)).expect("post");
        }
        let sfx = if depth == 0 {
            String::new()
        } else {
            format!("_{depth}")
        };
        let mut i = 0u64;
        g.bench_function(format!("post_arrive{sfx}"), |b| {
            b.iter(|| {
                i += 1;
                let Posted::Queued(_) = m.post(black_box(spec()), i).expect("post") else {
                    panic!("matched at post")
                };
                let Arrived::Matched { recv, .. } = m.arrive(black_box(env()), i).expect("arrive")
                else {
                    panic!("no match")
                };
                black_box(recv)
            })
        });
        let mut i = 0u64;
        g.bench_function(format!("arrive_post{sfx}"), |b| {
            b.iter(|| {
                i += 1;
                let Arrived::Queued(_) = m.arrive(black_box(env()), i).expect("arrive") else {
                    panic!("matched at arrival")
                };
                let Posted::Matched { msg, .. } = m.post(black_box(spec()), i).expect("post")
                else {
                    panic!("no match")
                };
                black_box(msg)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_offload, bench_matcher);
criterion_main!(benches);
