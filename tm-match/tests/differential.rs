//! Differential tests: `Matcher` against the literal `ReferenceMatcher` over
//! long random interleavings of post, arrive, probe, mprobe and cancel, with
//! small source/tag alphabets and several contexts so that collisions and
//! wildcards are frequent. Every result and, after every operation, both
//! queues (in order) must be identical.

#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tm_match::reference::ReferenceMatcher;
use tm_match::{Arrived, Matcher, Posted, RecvId};
use tm_proto::{Envelope, MatchSpec, Source, Tag};

#[derive(Debug, Clone)]
enum Op {
    Post(MatchSpec),
    Arrive(Envelope),
    Probe(MatchSpec),
    Improbe(MatchSpec),
    /// Cancel the i-th (mod len) queued receive, in posting order.
    Cancel(usize),
    /// Cancel a receive token that may be long gone (stale handle).
    CancelStale(u32),
    /// Send-side cancel of the i-th queued message.
    CancelMessage(usize),
    /// Many posts or arrivals in a row, to push queues past the linear form.
    BurstPost(Vec<MatchSpec>),
    BurstArrive(Vec<Envelope>),
}

fn spec(ctxs: u32, srcs: u32, tags: u32, wild: u32) -> impl Strategy<Value = MatchSpec> {
    (0..ctxs, 0..srcs, 0..tags, 0..100u32, 0..100u32).prop_map(move |(c, s, t, ws, wt)| MatchSpec {
        context_id: c,
        source: if ws < wild {
            Source::Any
        } else {
            Source::Rank(s)
        },
        tag: if wt < wild { Tag::Any } else { Tag::Value(t) },
    })
}

fn env(ctxs: u32, srcs: u32, tags: u32) -> impl Strategy<Value = Envelope> {
    (0..ctxs, 0..srcs, 0..tags).prop_map(|(c, s, t)| Envelope {
        context_id: c,
        source: s,
        tag: t,
    })
}

fn op(ctxs: u32, srcs: u32, tags: u32, wild: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => spec(ctxs, srcs, tags, wild).prop_map(Op::Post),
        6 => env(ctxs, srcs, tags).prop_map(Op::Arrive),
        2 => spec(ctxs, srcs, tags, wild).prop_map(Op::Probe),
        2 => spec(ctxs, srcs, tags, wild).prop_map(Op::Improbe),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => any::<u32>().prop_map(Op::CancelStale),
        1 => any::<usize>().prop_map(Op::CancelMessage),
        1 => prop::collection::vec(spec(ctxs, srcs, tags, wild), 1..40).prop_map(Op::BurstPost),
        1 => prop::collection::vec(env(ctxs, srcs, tags), 1..40).prop_map(Op::BurstArrive),
    ]
}

/// Arrival-heavy traffic: the unexpected queue grows well past its
/// 64-message linear form (and empties again), so receives, probes and
/// cancels meet both forms and the switches between them.
fn deep_unexpected_op(ctxs: u32, srcs: u32, tags: u32, wild: u32) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => spec(ctxs, srcs, tags, wild).prop_map(Op::Post),
        4 => env(ctxs, srcs, tags).prop_map(Op::Arrive),
        2 => spec(ctxs, srcs, tags, wild).prop_map(Op::Probe),
        2 => spec(ctxs, srcs, tags, wild).prop_map(Op::Improbe),
        1 => any::<usize>().prop_map(Op::Cancel),
        2 => any::<usize>().prop_map(Op::CancelMessage),
        1 => prop::collection::vec(spec(ctxs, srcs, tags, wild), 1..80).prop_map(Op::BurstPost),
        3 => prop::collection::vec(env(ctxs, srcs, tags), 20..90).prop_map(Op::BurstArrive),
    ]
}

/// Runs `ops` on both engines and fails at the first difference.
fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mut m: Matcher<u32, u32> = Matcher::new();
    let mut r: ReferenceMatcher<u32, u32> = ReferenceMatcher::new();
    let mut ids: HashMap<u32, RecvId> = HashMap::new();
    let mut next_recv = 0u32;
    let mut next_msg = 0u32;
    let mut stale: Vec<RecvId> = Vec::new();

    let mut post = |m: &mut Matcher<u32, u32>,
                    r: &mut ReferenceMatcher<u32, u32>,
                    ids: &mut HashMap<u32, RecvId>,
                    s: MatchSpec|
     -> Result<(), TestCaseError> {
        let tok = next_recv;
        next_recv += 1;
        let got = m.post(s, tok).unwrap();
        let want = r.post(s, tok);
        match (got, want) {
            (Posted::Matched { recv, env, msg, .. }, Some((wenv, wmsg))) => {
                prop_assert_eq!(recv, tok);
                prop_assert_eq!(
                    (env, msg),
                    (wenv, wmsg),
                    "post {:?} took the wrong message",
                    s
                );
            }
            (Posted::Queued(id), None) => {
                ids.insert(tok, id);
            }
            (g, w) => prop_assert!(false, "post {:?}: matcher {:?}, reference {:?}", s, g, w),
        }
        Ok(())
    };
    let mut arrive = |m: &mut Matcher<u32, u32>,
                      r: &mut ReferenceMatcher<u32, u32>,
                      ids: &mut HashMap<u32, RecvId>,
                      stale: &mut Vec<RecvId>,
                      e: Envelope|
     -> Result<(), TestCaseError> {
        let tok = next_msg;
        next_msg += 1;
        let got = m.arrive(e, tok).unwrap();
        let want = r.arrive(e, tok);
        match (got, want) {
            (
                Arrived::Matched {
                    recv,
                    spec,
                    msg,
                    id,
                },
                Some((wspec, wrecv)),
            ) => {
                prop_assert_eq!(msg, tok);
                prop_assert_eq!(
                    (recv, spec),
                    (wrecv, wspec),
                    "arrival {:?} went to the wrong receive",
                    e
                );
                prop_assert_eq!(ids.remove(&recv), Some(id));
                stale.push(id);
            }
            (Arrived::Queued(_), None) => {}
            (g, w) => prop_assert!(false, "arrive {:?}: matcher {:?}, reference {:?}", e, g, w),
        }
        Ok(())
    };

    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Post(s) => post(&mut m, &mut r, &mut ids, *s)?,
            Op::BurstPost(v) => {
                for s in v {
                    post(&mut m, &mut r, &mut ids, *s)?;
                }
            }
            Op::Arrive(e) => arrive(&mut m, &mut r, &mut ids, &mut stale, *e)?,
            Op::BurstArrive(v) => {
                for e in v {
                    arrive(&mut m, &mut r, &mut ids, &mut stale, *e)?;
                }
            }
            Op::Probe(s) => {
                let got = m.probe(s).map(|p| (p.env, *p.msg));
                let want = r.probe(s).map(|(e, msg)| (e, *msg));
                prop_assert_eq!(got, want, "probe {:?}", s);
                // Idempotent.
                prop_assert_eq!(m.probe(s).map(|p| (p.env, *p.msg)), got);
            }
            Op::Improbe(s) => {
                let got = m.improbe(s).map(|p| (p.env, p.msg));
                let want = r.improbe(s);
                prop_assert_eq!(got, want, "improbe {:?}", s);
            }
            Op::Cancel(i) => {
                let posted = m.posted();
                if posted.is_empty() {
                    continue;
                }
                let e = posted[i % posted.len()];
                let (id, tok) = (e.id, *e.recv);
                let got = m.cancel(id);
                let want = r.cancel_where(|t| *t == tok);
                prop_assert_eq!(got, want, "cancel of receive {}", tok);
                ids.remove(&tok);
                stale.push(id);
                prop_assert_eq!(m.cancel(id), None, "second cancel must fail");
            }
            Op::CancelStale(i) => {
                if stale.is_empty() {
                    continue;
                }
                let id = stale[*i as usize % stale.len()];
                prop_assert_eq!(m.cancel(id), None, "stale handle cancelled a live receive");
            }
            Op::CancelMessage(i) => {
                let q = m.unexpected();
                if q.is_empty() {
                    continue;
                }
                let p = q[i % q.len()];
                let (id, tok) = (p.id, *p.msg);
                let got = m.cancel_message(id);
                let want = r.cancel_message_where(|t| *t == tok);
                prop_assert_eq!(got, want);
                prop_assert_eq!(m.cancel_message(id), None);
            }
        }
        // Whole queues, in order, after every step.
        let mp: Vec<(MatchSpec, u32)> = m.posted().iter().map(|e| (e.spec, *e.recv)).collect();
        prop_assert_eq!(
            &mp[..],
            r.posted(),
            "posted queue differs after step {}",
            step
        );
        let mu: Vec<(Envelope, u32)> = m.unexpected().iter().map(|p| (p.env, *p.msg)).collect();
        prop_assert_eq!(
            &mu[..],
            r.unexpected(),
            "unexpected queue differs after step {}",
            step
        );
        prop_assert_eq!(m.posted_len(), r.posted().len());
        prop_assert_eq!(m.unexpected_len(), r.unexpected().len());
    }
    Ok(())
}

/// Failing cases are kept in `proptest-regressions/` (tests live outside
/// `src/`, where proptest's default persistence cannot find the crate root).
fn config(cases: Option<u32>) -> ProptestConfig {
    let base = ProptestConfig::default();
    ProptestConfig {
        cases: cases.unwrap_or(base.cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/differential.txt",
        ))),
        ..base
    }
}

proptest! {
    #![proptest_config(config(Some(48)))]

    /// Tiny alphabets: 2 contexts, 3 sources, 3 tags, 25% wildcards per field.
    #[test]
    fn matches_reference_small_alphabet(ops in prop::collection::vec(op(2, 3, 3, 25), 1..300)) {
        run(&ops)?;
    }

    /// Wildcard-heavy: half of the fields are wildcards.
    #[test]
    fn matches_reference_wildcard_heavy(ops in prop::collection::vec(op(3, 4, 4, 50), 1..300)) {
        run(&ops)?;
    }

    /// No wildcards, more keys: exercises the exact-key lists.
    #[test]
    fn matches_reference_exact_only(ops in prop::collection::vec(op(2, 6, 8, 0), 1..300)) {
        run(&ops)?;
    }

    /// Deep unexpected queues (past the linear form), wildcards included.
    #[test]
    fn matches_reference_deep_unexpected(ops in prop::collection::vec(deep_unexpected_op(2, 3, 4, 25), 1..200)) {
        run(&ops)?;
    }
}

proptest! {
    #![proptest_config(config(None))]

    /// Long interleavings (heavy).
    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_matches_reference_long(ops in prop::collection::vec(op(3, 4, 4, 20), 1..2000)) {
        run(&ops)?;
    }

    /// Long interleavings with many keys (table growth and sweeps; heavy).
    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_matches_reference_many_keys(ops in prop::collection::vec(op(4, 16, 40, 10), 1..2000)) {
        run(&ops)?;
    }
}
