//! tm-match against two plain list matchers (the MPICH ch3/ch4 MPIDIG design:
//! one posted and one unexpected queue, linear scans), side by side in one
//! run: `list` keeps each queue in a `Vec` (contiguous, the fastest possible
//! scan), `linked` in a `std::collections::LinkedList` (one heap node per
//! entry, as MPICH's utlist requests). Each iteration is one match plus one refill, so the queue depth stays
//! constant:
//!
//! - `posted/wW/dD`: D receives posted, W% of them wildcards that never match
//!   (`(*,t')` and `(s',*)` with tags/sources no message uses: pure overhead);
//!   a message for a random exact receive arrives, then that receive is
//!   re-posted (it goes to the tail).
//! - `unexpected/wW/dD`: D unexpected messages with distinct envelopes; a
//!   receive for a random one is posted, `ANY_SOURCE` with probability W%;
//!   then the same message arrives again (tail).
//! - `collide/dD`: D exact receives from one source whose tags are multiples
//!   of 1021·1024 (same residue for UCX's `% 1021` bucket hash and for any
//!   low-bits hash); otherwise as `posted`.
//!
//! Run: `cargo bench -p tm-match -- --warm-up-time 1 --measurement-time 2`.

use std::collections::LinkedList;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tm_match::{Arrived, Matcher, Posted};
use tm_proto::{Envelope, MatchSpec, Source, Tag};

/// The baseline: one vector per queue, scanned from the front.
#[derive(Default)]
struct ListMatcher {
    posted: Vec<(MatchSpec, u32)>,
    unexpected: Vec<(Envelope, u32)>,
}

impl ListMatcher {
    #[inline]
    fn post(&mut self, spec: MatchSpec, r: u32) -> Option<u32> {
        if let Some(i) = self.unexpected.iter().position(|(e, _)| spec.matches(e)) {
            return Some(self.unexpected.remove(i).1);
        }
        self.posted.push((spec, r));
        None
    }

    #[inline]
    fn arrive(&mut self, env: Envelope, m: u32) -> Option<u32> {
        if let Some(i) = self.posted.iter().position(|(s, _)| s.matches(&env)) {
            return Some(self.posted.remove(i).1);
        }
        self.unexpected.push((env, m));
        None
    }
}

/// The baseline: MPICH-style doubly-linked lists (one heap node per
/// entry), scanned from the head; unlinking the found node.
#[derive(Default)]
struct LinkedMatcher {
    posted: LinkedList<(MatchSpec, u32)>,
    unexpected: LinkedList<(Envelope, u32)>,
}

/// Removes the element at `i` (std has no stable cursor API: split, pop, join).
fn unlink_at<T>(l: &mut LinkedList<T>, i: usize) -> Option<T> {
    let mut tail = l.split_off(i);
    let x = tail.pop_front();
    l.append(&mut tail);
    x
}

impl LinkedMatcher {
    #[inline]
    fn post(&mut self, spec: MatchSpec, r: u32) -> Option<u32> {
        if let Some(i) = self.unexpected.iter().position(|(e, _)| spec.matches(e)) {
            return unlink_at(&mut self.unexpected, i).map(|(_, m)| m);
        }
        self.posted.push_back((spec, r));
        None
    }

    #[inline]
    fn arrive(&mut self, env: Envelope, m: u32) -> Option<u32> {
        if let Some(i) = self.posted.iter().position(|(s, _)| s.matches(&env)) {
            return unlink_at(&mut self.posted, i).map(|(_, r)| r);
        }
        self.unexpected.push_back((env, m));
        None
    }
}

/// xorshift64*: deterministic, shared by both engines.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const DEPTHS: [usize; 5] = [1, 8, 64, 1024, 10_000];
const WILD: [u32; 3] = [0, 10, 50];
const CTX: u32 = 3;

fn exact(src: u32, tag: u32) -> MatchSpec {
    MatchSpec {
        context_id: CTX,
        source: Source::Rank(src),
        tag: Tag::Value(tag),
    }
}

fn env(src: u32, tag: u32) -> Envelope {
    Envelope {
        context_id: CTX,
        source: src,
        tag,
    }
}

/// `depth` receives: exact ones keyed `(i % 64, i / 64)`, and `wild`% wildcards
/// that no message matches. Returns the specs in posting order and the exact keys.
fn posted_workload(depth: usize, wild: u32, rng: &mut Rng) -> (Vec<MatchSpec>, Vec<(u32, u32)>) {
    let mut specs = Vec::with_capacity(depth);
    let mut keys = Vec::new();
    for i in 0..depth {
        if (rng.below(100) as u32) < wild && i > 0 {
            specs.push(if i % 2 == 0 {
                MatchSpec {
                    context_id: CTX,
                    source: Source::Any,
                    tag: Tag::Value(1_000_000 + i as u32),
                }
            } else {
                MatchSpec {
                    context_id: CTX,
                    source: Source::Rank(1_000_000 + i as u32),
                    tag: Tag::Any,
                }
            });
        } else {
            let k = ((i % 64) as u32, (i / 64) as u32);
            keys.push(k);
            specs.push(exact(k.0, k.1));
        }
    }
    (specs, keys)
}

fn bench_posted(c: &mut Criterion) {
    for wild in WILD {
        let mut g = c.benchmark_group(format!("posted/w{wild}"));
        for depth in DEPTHS {
            let (specs, keys) = posted_workload(depth, wild, &mut Rng(0x9e37_79b9_7f4a_7c15));
            let mut m: Matcher<u32, u32> = Matcher::new();
            let mut l = ListMatcher::default();
            let mut ll = LinkedMatcher::default();
            for (i, s) in specs.iter().enumerate() {
                let _ = m.post(*s, i as u32).expect("queue full");
                let _ = l.post(*s, i as u32);
                let _ = ll.post(*s, i as u32);
            }
            let mut rng = Rng(42);
            g.bench_function(BenchmarkId::new("tm-match", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let got = m.arrive(env(s, t), 0).expect("queue full");
                    let Arrived::Matched { recv, .. } = got else {
                        panic!("no match")
                    };
                    let r = m.post(exact(s, t), recv).expect("queue full");
                    black_box(matches!(r, Posted::Queued(_)));
                })
            });
            let mut rng = Rng(42);
            g.bench_function(BenchmarkId::new("list", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let recv = l.arrive(env(s, t), 0).expect("no match");
                    black_box(l.post(exact(s, t), recv).is_none());
                })
            });
            let mut rng = Rng(42);
            g.bench_function(BenchmarkId::new("linked", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let recv = ll.arrive(env(s, t), 0).expect("no match");
                    black_box(ll.post(exact(s, t), recv).is_none());
                })
            });
        }
        g.finish();
    }
}

fn bench_unexpected(c: &mut Criterion) {
    for wild in WILD {
        let mut g = c.benchmark_group(format!("unexpected/w{wild}"));
        for depth in DEPTHS {
            let keys: Vec<(u32, u32)> = (0..depth)
                .map(|i| ((i % 64) as u32, (i / 64) as u32))
                .collect();
            let mut m: Matcher<u32, u32> = Matcher::new();
            let mut l = ListMatcher::default();
            let mut ll = LinkedMatcher::default();
            for (i, &(s, t)) in keys.iter().enumerate() {
                let _ = m.arrive(env(s, t), i as u32).expect("queue full");
                let _ = l.arrive(env(s, t), i as u32);
                let _ = ll.arrive(env(s, t), i as u32);
            }
            let spec_for = move |rng: &mut Rng, s: u32, t: u32| {
                if (rng.below(100) as u32) < wild {
                    MatchSpec {
                        context_id: CTX,
                        source: Source::Any,
                        tag: Tag::Value(t),
                    }
                } else {
                    exact(s, t)
                }
            };
            let mut rng = Rng(7);
            g.bench_function(BenchmarkId::new("tm-match", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let spec = spec_for(&mut rng, s, t);
                    let Posted::Matched { msg, env: e, .. } = m.post(spec, 0).expect("queue full")
                    else {
                        panic!("no match")
                    };
                    let r = m.arrive(e, msg).expect("queue full");
                    black_box(matches!(r, Arrived::Queued(_)));
                })
            });
            let mut rng = Rng(7);
            g.bench_function(BenchmarkId::new("list", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let spec = spec_for(&mut rng, s, t);
                    // An ANY_SOURCE receive may take another source's message:
                    // refill with the one taken (the token is its key index).
                    let msg = l.post(spec, 0).expect("no match");
                    let (s, t) = keys[msg as usize];
                    black_box(l.arrive(env(s, t), msg).is_none());
                })
            });
            let mut rng = Rng(7);
            g.bench_function(BenchmarkId::new("linked", depth), |b| {
                b.iter(|| {
                    let (s, t) = keys[rng.below(keys.len())];
                    let spec = spec_for(&mut rng, s, t);
                    let msg = ll.post(spec, 0).expect("no match");
                    let (s, t) = keys[msg as usize];
                    black_box(ll.arrive(env(s, t), msg).is_none());
                })
            });
        }
        g.finish();
    }
}

fn bench_collide(c: &mut Criterion) {
    let mut g = c.benchmark_group("collide");
    for depth in [1024usize, 10_000] {
        let tags: Vec<u32> = (0..depth as u32)
            .map(|k| k.wrapping_mul(1021 * 1024) & 0x7fff_ffff)
            .collect();
        let mut m: Matcher<u32, u32> = Matcher::new();
        let mut l = ListMatcher::default();
        let mut ll = LinkedMatcher::default();
        for (i, &t) in tags.iter().enumerate() {
            let _ = m.post(exact(0, t), i as u32).expect("queue full");
            let _ = l.post(exact(0, t), i as u32);
            let _ = ll.post(exact(0, t), i as u32);
        }
        let mut rng = Rng(99);
        g.bench_function(BenchmarkId::new("tm-match", depth), |b| {
            b.iter(|| {
                let t = tags[rng.below(tags.len())];
                let Arrived::Matched { recv, .. } = m.arrive(env(0, t), 0).expect("queue full")
                else {
                    panic!("no match")
                };
                let r = m.post(exact(0, t), recv).expect("queue full");
                black_box(matches!(r, Posted::Queued(_)));
            })
        });
        let mut rng = Rng(99);
        g.bench_function(BenchmarkId::new("list", depth), |b| {
            b.iter(|| {
                let t = tags[rng.below(tags.len())];
                let recv = l.arrive(env(0, t), 0).expect("no match");
                black_box(l.post(exact(0, t), recv).is_none());
            })
        });
        let mut rng = Rng(99);
        g.bench_function(BenchmarkId::new("linked", depth), |b| {
            b.iter(|| {
                let t = tags[rng.below(tags.len())];
                let recv = ll.arrive(env(0, t), 0).expect("no match");
                black_box(ll.post(exact(0, t), recv).is_none());
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_posted, bench_unexpected, bench_collide);
criterion_main!(benches);
