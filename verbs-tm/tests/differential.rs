//! Random traffic between two endpoints over `soft::Sim`, with the device
//! stepped in random order (list operations executed late, frames delivered
//! late, multi-packet data completed late, progress calls interleaved),
//! against `tm_match::reference::ReferenceMatcher`.
//!
//! With one sender, MPI's matching outcome does not depend on timing: the
//! earliest-posted receive takes the earliest-sent message it matches. So
//! the reference replays every receive that was not cancelled, in posting
//! order, then every message, in sending order; the endpoint must pair the
//! same receives with the same messages, deliver their bytes (truncated to
//! the buffer), and leave the same messages unexpected, in the same order.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tm_match::reference::ReferenceMatcher;
use tm_proto::{Envelope, MatchSpec, Source, Tag};
use verbs_tm::soft::{Sim, SoftConfig};
use verbs_tm::testing::{settle, sim_pair, take};
use verbs_tm::{CancelOutcome, Endpoint, EndpointConfig, RecvStart, SendMode, SendStart};

#[derive(Debug, Clone)]
enum Op {
    Post {
        any_source: bool,
        tag: Option<u32>,
        ctx: u32,
        cap: usize,
    },
    Send {
        tag: u32,
        ctx: u32,
        len: usize,
        sync: bool,
    },
    /// A receive shared with another transport: `commit` decides what the
    /// owner answers to its proposal (withdrawn: as if never posted).
    Shared {
        tag: Option<u32>,
        ctx: u32,
        cap: usize,
        commit: bool,
    },
    Cancel(usize),
    Exec(usize),
    DeliverB(usize),
    DeliverA(usize),
    Data(usize),
    ProgressA,
    ProgressB,
}

#[derive(Debug, Clone, Copy)]
struct Setup {
    strict: bool,
    tags: u32,
    max_ops: u32,
    mtu: u32,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        any::<bool>(),
        1..6u32,
        2..8u32,
        prop_oneof![Just(64u32), Just(4096u32)],
    )
        .prop_map(|(strict, tags, max_ops, mtu)| Setup {
            strict,
            tags,
            max_ops,
            mtu,
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (prop::bool::weighted(0.15), prop::option::weighted(0.8, 0..4u32), 0..2u32,
              prop_oneof![4..64usize, 64..400usize, 400..3000usize])
            .prop_map(|(any_source, tag, ctx, cap)| Op::Post { any_source, tag, ctx, cap }),
        5 => (0..4u32, 0..2u32, prop_oneof![4..200usize, 200..600usize, 600..5000usize],
              prop::bool::weighted(0.2))
            .prop_map(|(tag, ctx, len, sync)| Op::Send { tag, ctx, len, sync }),
        1 => any::<usize>().prop_map(Op::Cancel),
        1 => (prop::option::weighted(0.8, 0..4u32), 0..2u32, 4..3000usize, any::<bool>())
            .prop_map(|(tag, ctx, cap, commit)| Op::Shared { tag, ctx, cap, commit }),
        3 => (1..4usize).prop_map(Op::Exec),
        4 => (1..4usize).prop_map(Op::DeliverB),
        2 => (1..4usize).prop_map(Op::DeliverA),
        1 => (1..3usize).prop_map(Op::Data),
        2 => Just(Op::ProgressA),
        3 => Just(Op::ProgressB),
    ]
}

fn body(id: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).wrapping_add(id) as u8)
        .collect();
    v[..4].copy_from_slice(&id.to_le_bytes());
    v
}

/// Runs `f` (a blocking call of the receiver: a rendezvous READ) while the
/// sender keeps polling on another thread, with the fabric running on its
/// own: the READ's answer may wait behind the sender's untagged buffers
/// (its FINs), which only its progress posts again (an RC responder blocks
/// behind a SEND it must refuse for lack of a buffer, as hardware does).
fn with_sender_running<T>(a: &mut Endpoint<Sim>, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    a.provider_mut().set_auto(true);
    let out = std::thread::scope(|sc| {
        let stop = &stop;
        let a = &mut *a;
        sc.spawn(move || {
            while !stop.load(Ordering::Acquire) {
                a.progress().unwrap();
                std::thread::yield_now();
            }
        });
        let out = f();
        stop.store(true, Ordering::Release);
        out
    });
    a.provider_mut().set_auto(false);
    out
}

struct Run {
    a: Endpoint<Sim>,
    b: Endpoint<Sim>,
    /// Receive request id → (token, spec, capacity).
    recvs: HashMap<u64, (u32, MatchSpec, usize)>,
    order: Vec<u64>,
    /// Message id → (envelope, length).
    msgs: Vec<(Envelope, usize)>,
    finished: HashMap<u64, verbs_tm::Finished>,
    /// Shared posts: id → whether to commit.
    shared: HashMap<u64, bool>,
    /// Shared posts answered "withdraw" (left out of the reference).
    withdrawn: Vec<u64>,
}

impl Run {
    /// Answers every proposal (commit: the post takes the message, as a
    /// receive; withdraw: as if it had never been posted).
    fn proposals(&mut self) {
        let mut props = Vec::new();
        self.b.take_proposals(&mut props);
        for (id, _) in props {
            let commit = self.shared[&id];
            if commit {
                let cap = self.recvs[&id].2;
                let mut buf = vec![0; cap];
                let b = &mut self.b;
                let st = with_sender_running(&mut self.a, || b.commit(id, &mut buf));
                self.finished.insert(
                    id,
                    verbs_tm::Finished {
                        id,
                        send: false,
                        result: st,
                        buf,
                    },
                );
            } else {
                self.b.withdraw(id).unwrap();
                self.withdrawn.push(id);
            }
        }
    }

    fn collect(&mut self) {
        for f in take(&mut self.b) {
            if !f.send {
                self.finished.insert(f.id, f);
            }
        }
        for f in take(&mut self.a) {
            assert!(f.result.is_ok(), "send failed: {f:?}");
        }
    }
}

fn run(s: Setup, ops: &[Op]) -> Result<(), TestCaseError> {
    let soft = SoftConfig::small()
        .with_tags(s.tags.max(1), s.max_ops)
        .with_mtu(s.mtu)
        .strict(s.strict);
    let cfg = EndpointConfig {
        tags: s.tags,
        ..EndpointConfig::for_tests()
    };
    let (a, b) = sim_pair(soft, cfg);
    let mut r = Run {
        a,
        b,
        recvs: HashMap::new(),
        order: Vec::new(),
        msgs: Vec::new(),
        finished: HashMap::new(),
        shared: HashMap::new(),
        withdrawn: Vec::new(),
    };
    let qp_b = r.b.qp_of(0).unwrap();
    let qp_a = r.a.qp_of(1).unwrap();
    let mut cancelled = Vec::new();
    for op in ops {
        match op {
            Op::Post {
                any_source,
                tag,
                ctx,
                cap,
            } => {
                let spec = MatchSpec {
                    context_id: *ctx,
                    source: if *any_source {
                        Source::Any
                    } else {
                        Source::Rank(0)
                    },
                    tag: tag.map_or(Tag::Any, Tag::Value),
                };
                let token = r.order.len() as u32;
                let id = match r.b.irecv(spec, vec![0; *cap]).unwrap() {
                    RecvStart::Pending(id) => id,
                    RecvStart::Done(res, buf) => {
                        // Give it an id of our own for the bookkeeping.
                        let id = u64::MAX - u64::from(token);
                        r.finished.insert(
                            id,
                            verbs_tm::Finished {
                                id,
                                send: false,
                                result: res,
                                buf,
                            },
                        );
                        id
                    }
                };
                r.recvs.insert(id, (token, spec, *cap));
                r.order.push(id);
            }
            Op::Send {
                tag,
                ctx,
                len,
                sync,
            } => {
                let mid = r.msgs.len() as u32;
                r.msgs.push((
                    Envelope {
                        context_id: *ctx,
                        source: 0,
                        tag: *tag,
                    },
                    *len,
                ));
                let mode = if *sync {
                    SendMode::Synchronous
                } else {
                    SendMode::Standard
                };
                match r.a.isend(1, *tag, *ctx, body(mid, *len), mode).unwrap() {
                    SendStart::Done(back) => prop_assert_eq!(back, body(mid, *len)),
                    SendStart::Pending(_) => {}
                }
            }
            Op::Shared {
                tag,
                ctx,
                cap,
                commit,
            } => {
                let spec = MatchSpec {
                    context_id: *ctx,
                    source: Source::Any,
                    tag: tag.map_or(Tag::Any, Tag::Value),
                };
                let token = r.order.len() as u32;
                match r.b.post_shared(spec, *cap).unwrap() {
                    verbs_tm::SharedStart::Posted(id) => {
                        r.shared.insert(id, *commit);
                        r.recvs.insert(id, (token, spec, *cap));
                        r.order.push(id);
                        if !commit {
                            r.withdrawn.push(id);
                        }
                    }
                    verbs_tm::SharedStart::Proposed(_) if *commit => {
                        // Taken at once from the queue, like a receive.
                        let id = u64::MAX / 2 - u64::from(token);
                        let mut buf = vec![0; *cap];
                        let b = &mut r.b;
                        let st = with_sender_running(&mut r.a, || b.recv_now(spec, &mut buf))
                            .unwrap()
                            .map(Ok);
                        let st = st.expect("a proposed message is there");
                        r.recvs.insert(id, (token, spec, *cap));
                        r.order.push(id);
                        r.finished.insert(
                            id,
                            verbs_tm::Finished {
                                id,
                                send: false,
                                result: st,
                                buf,
                            },
                        );
                    }
                    verbs_tm::SharedStart::Proposed(_) => {}
                }
            }
            Op::Cancel(i) => {
                if r.order.is_empty() {
                    continue;
                }
                let id = r.order[i % r.order.len()];
                if r.shared.contains_key(&id) {
                    continue;
                }
                if r.b.cancel_recv(id).unwrap() != CancelOutcome::Failed {
                    cancelled.push(id);
                }
            }
            Op::Exec(n) => {
                r.b.provider().exec_ops(r.b.srq(), *n);
            }
            Op::DeliverB(n) => {
                r.b.provider().deliver(qp_b, *n);
            }
            Op::DeliverA(n) => {
                r.a.provider().deliver(qp_a, *n);
            }
            Op::Data(n) => {
                r.b.provider().complete_data(*n);
            }
            Op::ProgressA => {
                r.a.progress().unwrap();
            }
            Op::ProgressB => {
                r.b.progress().unwrap();
            }
        }
        r.collect();
        r.proposals();
    }
    loop {
        settle(&mut [&mut r.a, &mut r.b]);
        r.collect();
        let before = r.finished.len() + r.withdrawn.len();
        r.proposals();
        if r.finished.len() + r.withdrawn.len() == before {
            break;
        }
    }
    // The reference: every receive not cancelled, then every message.
    let mut reference: ReferenceMatcher<u64, u32> = ReferenceMatcher::new();
    for id in &r.order {
        let was_cancelled = r
            .finished
            .get(id)
            .is_some_and(|f| f.result.as_ref().is_ok_and(|s| s.cancelled));
        if !was_cancelled && !r.withdrawn.contains(id) {
            let (_, spec, _) = r.recvs[id];
            prop_assert!(reference.post(spec, *id).is_none());
        }
    }
    let mut want: HashMap<u64, u32> = HashMap::new();
    for (mid, (env, _)) in r.msgs.iter().enumerate() {
        if let Some((_, rid)) = reference.arrive(*env, mid as u32) {
            want.insert(rid, mid as u32);
        }
    }
    for id in &r.order {
        if r.withdrawn.contains(id) {
            prop_assert!(!r.finished.contains_key(id));
            continue;
        }
        let (token, _, cap) = r.recvs[id];
        let got = r.finished.get(id);
        match (want.get(id), got) {
            (Some(&mid), Some(f)) => {
                let st = f
                    .result
                    .as_ref()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    !st.cancelled,
                    "receive {} cancelled but matched in the reference",
                    token
                );
                let (env, len) = r.msgs[mid as usize];
                prop_assert_eq!(
                    (st.source, st.tag, st.context),
                    (0, env.tag, env.context_id)
                );
                prop_assert_eq!(
                    (st.len, st.msg_len),
                    (len.min(cap), len),
                    "receive {}",
                    token
                );
                let full = body(mid, len);
                prop_assert_eq!(&f.buf[..st.len], &full[..st.len], "receive {} bytes", token);
            }
            (None, Some(f)) => {
                let st = f
                    .result
                    .as_ref()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert!(
                    st.cancelled,
                    "receive {} took message {:?}, the reference none",
                    token,
                    f.buf.get(..4)
                );
            }
            (None, None) => {}
            (Some(mid), None) => {
                prop_assert!(false, "receive {} should have taken message {}", token, mid)
            }
        }
    }
    // The same messages are left, in the same order.
    let want_left: Vec<u32> = reference.unexpected().iter().map(|(_, m)| *m).collect();
    let mut left = Vec::new();
    let any = |ctx| MatchSpec {
        context_id: ctx,
        source: Source::Any,
        tag: Tag::Any,
    };
    for ctx in 0..2 {
        while let Some((m, st)) = r.b.improbe(any(ctx)).unwrap() {
            let rs = r.b.imrecv(m, vec![0; st.msg_len]).unwrap();
            let buf = match rs {
                RecvStart::Done(_, buf) => buf,
                RecvStart::Pending(id) => {
                    settle(&mut [&mut r.a, &mut r.b]);
                    let done = take(&mut r.b);
                    done.into_iter().find(|f| f.id == id).unwrap().buf
                }
            };
            left.push((ctx, u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]])));
        }
    }
    let mut want_by_ctx: Vec<(u32, u32)> = want_left
        .iter()
        .map(|m| (r.msgs[*m as usize].0.context_id, *m))
        .collect();
    want_by_ctx.sort_by_key(|(c, _)| *c);
    prop_assert_eq!(left, want_by_ctx, "unexpected messages left");
    prop_assert!(
        r.b.provider().misuse().is_empty(),
        "{:?}",
        r.b.provider().misuse()
    );
    prop_assert!(r.a.provider().misuse().is_empty());
    Ok(())
}

fn config(cases: Option<u32>) -> ProptestConfig {
    let mut c = match cases {
        Some(n) => ProptestConfig::with_cases(n),
        None => ProptestConfig::default(),
    };
    c.failure_persistence = Some(Box::new(FileFailurePersistence::WithSource("regressions")));
    c
}

proptest! {
    #![proptest_config(config(Some(128)))]
    #[test]
    fn random_traffic_matches_the_reference(s in setup(), ops in prop::collection::vec(op(), 1..60)) {
        run(s, &ops)?;
    }
}

proptest! {
    #![proptest_config(config(None))]
    #[test]
    #[ignore = "heavy: run by `cargo xtask ci proptest`"]
    fn random_traffic_matches_the_reference_heavy(s in setup(), ops in prop::collection::vec(op(), 1..240)) {
        run(s, &ops)?;
    }
}
