//! The offload model against a simulated engine (a TM-SRQ as
//! rdma-core's tag-matching documentation describes it: an ordered list of
//! entries, 16-bit `H`/`S` phase counters, pending entries until the counts
//! agree, one completion queue in engine order) that executes actions late and
//! interleaved at random with wire arrivals, with random capacity.
//!
//! The differential property: replaying, on the literal reference matcher,
//! every operation at the moment the model reports its outcome (posts at the
//! call, arrivals when matched or queued, engine cancels when the engine
//! answers) gives identical results, and the final queues are identical.

#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use std::collections::{HashMap, VecDeque};

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tm_match::offload::{
    Action, CancelOutcome, Completion, EngineEvent, EngineScan, Offload, OffloadConfig,
    PostOutcome, Unposted,
};
use tm_match::reference::ReferenceMatcher;
use tm_match::{Error, RecvId};
use tm_proto::{Envelope, MatchSpec, Source, Tag, TagLayout, TagMask};

const LAYOUT: TagLayout = TagLayout::DEFAULT;

// ---------------------------------------------------------------- engine ---

#[derive(Debug, Clone)]
struct Entry {
    handle: RecvId,
    entry: TagMask,
    active: bool,
}

/// A TM-SRQ-like engine: command queue, matching list, phase counters, CQ.
#[derive(Debug)]
struct Sim {
    capacity: usize,
    list: Vec<Entry>,
    h: u16,
    s: u16,
    cmdq: VecDeque<Action>,
    wire: VecDeque<(u64, u32)>,
    cq: VecDeque<EngineEvent<u32>>,
}

impl Sim {
    fn new(capacity: usize) -> Self {
        Sim {
            capacity,
            list: Vec::new(),
            h: 0,
            s: 0,
            cmdq: VecDeque::new(),
            wire: VecDeque::new(),
            cq: VecDeque::new(),
        }
    }

    fn apply_count(&mut self, c: u16) {
        self.s = c;
        if self.s == self.h {
            for e in &mut self.list {
                e.active = true;
            }
        }
    }

    /// Executes the oldest posted action.
    fn exec(&mut self) -> bool {
        let Some(a) = self.cmdq.pop_front() else {
            return false;
        };
        match a {
            Action::Add {
                handle,
                entry,
                count,
            } => {
                self.apply_count(count);
                assert!(
                    self.list.len() < self.capacity,
                    "the model overfilled the engine list"
                );
                let active = self.s == self.h;
                self.list.push(Entry {
                    handle,
                    entry,
                    active,
                });
                self.cq.push_back(EngineEvent::Added {
                    handle,
                    sync_request: !active,
                });
            }
            Action::Delete { handle, count } => {
                self.apply_count(count);
                match self.list.iter().position(|e| e.handle == handle) {
                    Some(i) => {
                        self.list.remove(i);
                        self.cq.push_back(EngineEvent::Deleted {
                            handle,
                            sync_request: false,
                        });
                    }
                    None => self.cq.push_back(EngineEvent::DeleteFailed { handle }),
                }
            }
            Action::Sync { count } => self.apply_count(count),
        }
        true
    }

    /// Processes the oldest wire message.
    fn deliver(&mut self) -> bool {
        let Some((tag, msg)) = self.wire.pop_front() else {
            return false;
        };
        match self
            .list
            .iter()
            .position(|e| e.active && e.entry.matches(tag))
        {
            Some(i) => {
                let e = self.list.remove(i);
                self.cq.push_back(EngineEvent::Matched {
                    handle: e.handle,
                    tag,
                    msg,
                });
            }
            None => {
                self.h = self.h.wrapping_add(1);
                self.cq.push_back(EngineEvent::Unexpected {
                    tag,
                    msg,
                    sync_request: false,
                });
            }
        }
        true
    }
}

// --------------------------------------------------------------- harness ---

/// The model, the engine, and the reference replayed in the model's order.
struct Harness {
    off: Offload<u32, u32>,
    sim: Sim,
    reference: ReferenceMatcher<u32, u32>,
    ids: HashMap<RecvId, u32>,
    outstanding: Vec<RecvId>,
    next_recv: u32,
    next_msg: u32,
    log: Vec<String>,
}

impl Harness {
    fn new(cfg: OffloadConfig) -> Self {
        Harness {
            off: Offload::new(cfg).unwrap(),
            sim: Sim::new(cfg.capacity),
            reference: ReferenceMatcher::new(),
            ids: HashMap::new(),
            outstanding: Vec::new(),
            next_recv: 0,
            next_msg: 0,
            log: Vec::new(),
        }
    }

    /// Moves actions to the engine and checks completions against the
    /// reference, in order.
    fn pump(&mut self) -> Result<(), TestCaseError> {
        while let Some(a) = self.off.poll_action() {
            self.sim.cmdq.push_back(a);
        }
        while let Some(c) = self.off.poll_completion() {
            self.log.push(format!("{c:?}"));
            match c {
                Completion::Matched { id, recv, env, msg } => {
                    prop_assert_eq!(self.ids.get(&id), Some(&recv));
                    let want = self.reference.arrive(env, msg);
                    prop_assert_eq!(
                        want.map(|(_, r)| r),
                        Some(recv),
                        "message {} ({:?})",
                        msg,
                        env
                    );
                    self.outstanding.retain(|x| *x != id);
                }
                Completion::Queued { id, env } => {
                    let msg = *self
                        .off
                        .get_unexpected(id)
                        .expect("queued message is visible")
                        .msg;
                    let want = self.reference.arrive(env, msg);
                    prop_assert_eq!(
                        want.map(|(_, r)| r),
                        None,
                        "message {} ({:?}) queued",
                        msg,
                        env
                    );
                }
                Completion::Cancelled { id, recv } => {
                    prop_assert_eq!(self.ids.get(&id), Some(&recv));
                    let want = self.reference.cancel_where(|r| *r == recv);
                    prop_assert!(
                        want.is_some(),
                        "engine cancel of {} succeeded, reference had it matched",
                        recv
                    );
                    self.outstanding.retain(|x| *x != id);
                }
                Completion::CancelFailed { id } => {
                    let tok = self.ids[&id];
                    prop_assert!(
                        !self.reference.posted().iter().any(|(_, r)| *r == tok),
                        "cancel of {} failed, but the reference still has it queued",
                        tok
                    );
                }
            }
        }
        let mu: Vec<(Envelope, u32)> = self
            .off
            .unexpected()
            .iter()
            .map(|p| (p.env, *p.msg))
            .collect();
        prop_assert_eq!(
            &mu[..],
            self.reference.unexpected(),
            "unexpected queues differ"
        );
        Ok(())
    }

    fn post(&mut self, spec: MatchSpec, eligible: bool) -> Result<(), TestCaseError> {
        let tok = self.next_recv;
        self.next_recv += 1;
        let got = self.off.post(spec, tok, eligible).unwrap();
        let want = self.reference.post(spec, tok);
        match (got, want) {
            (PostOutcome::Matched { recv, env, msg }, Some((wenv, wmsg))) => {
                prop_assert_eq!(recv, tok);
                prop_assert_eq!((env, msg), (wenv, wmsg));
            }
            (PostOutcome::Queued { id, .. }, None) => {
                self.ids.insert(id, tok);
                self.outstanding.push(id);
            }
            (g, w) => prop_assert!(false, "post {:?}: model {:?}, reference {:?}", spec, g, w),
        }
        self.pump()
    }

    /// A nonblocking receive the caller defers when the model lets it (its
    /// source: the deferred receives' if any, else `spec`'s); posted as
    /// usual (not eligible) otherwise. The reference posts it either way.
    fn defer(&mut self, spec: MatchSpec) -> Result<(), TestCaseError> {
        let spec = match (self.off.deferred_source(), spec.source) {
            (Some(s), Source::Rank(_)) => MatchSpec {
                source: Source::Rank(s),
                ..spec
            },
            _ => spec,
        };
        let tok = self.next_recv;
        // The query a transport asks before looking at its ring agrees
        // with the attempt.
        let may = match spec.source {
            Source::Rank(src) => Some(self.off.may_defer(src)),
            Source::Any => None,
        };
        let outcome = self.off.defer(spec, tok);
        if let Some(may) = may {
            prop_assert_eq!(may, outcome.is_ok(), "may_defer disagrees with defer");
        }
        match outcome {
            Ok(id) => {
                self.next_recv += 1;
                self.log.push(format!("defer {spec:?} -> {id:?}"));
                prop_assert!(matches!(spec.source, Source::Rank(_)));
                prop_assert_eq!(
                    self.reference.post(spec, tok),
                    None,
                    "deferred while the reference had a message for it"
                );
                prop_assert_eq!(self.off.deferred_back(), Some(&tok));
                self.ids.insert(id, tok);
                self.outstanding.push(id);
                self.pump()
            }
            Err(back) => {
                prop_assert_eq!(back, tok);
                self.post(spec, false)
            }
        }
    }

    /// A message on a path that bypasses the engine, from the deferred
    /// receives' source (nothing without deferred receives), offered first
    /// to the oldest deferred receive (as a transport does with the next
    /// message of that source), then handed to the model if that receive
    /// does not take it.
    fn take_deferred(&mut self, env: Envelope) -> Result<(), TestCaseError> {
        let Some(source) = self.off.deferred_source() else {
            return Ok(());
        };
        let env = Envelope { source, ..env };
        let msg = self.next_msg;
        self.next_msg += 1;
        let front = self.off.deferred_front().copied();
        match self.off.take_deferred(&env, false) {
            Some((id, recv)) => {
                self.log.push(format!("take_deferred {env:?} -> {recv}"));
                prop_assert_eq!(Some(recv), front, "not the oldest deferred receive");
                prop_assert_eq!(self.ids.get(&id), Some(&recv));
                let want = self.reference.arrive(env, msg);
                prop_assert_eq!(
                    want.map(|(_, r)| r),
                    Some(recv),
                    "message {} ({:?}) taken by a deferred receive",
                    msg,
                    env
                );
                self.outstanding.retain(|x| *x != id);
                Ok(())
            }
            None => {
                self.off.arrive(env, msg).unwrap();
                self.pump()
            }
        }
    }

    /// A message on a bypass path offered to a receive the caller has not
    /// posted (a blocking receive looking at arrivals); handed to the model
    /// if the receive does not take it.
    fn unposted(&mut self, spec: MatchSpec, env: Envelope) -> Result<(), TestCaseError> {
        let msg = self.next_msg;
        self.next_msg += 1;
        let would = self.reference.unposted_takes(&spec, &env);
        if msg % 2 == 0 {
            // The same through the receive's turn (the caller looks at the
            // arrival only if the receive could take one).
            if let Some(turn) = self.off.unposted_turn(spec) {
                if turn.take(&env, false) {
                    self.log
                        .push(format!("unposted turn {spec:?} took {env:?}"));
                    prop_assert!(
                        would,
                        "turn {:?} took {:?}; the reference says no",
                        spec,
                        env
                    );
                    return Ok(());
                }
                prop_assert!(!spec.matches(&env), "turn {:?} refused its {:?}", spec, env);
            }
            self.off.arrive(env, msg).unwrap();
            return self.pump();
        }
        match self.off.offer_unposted(&spec, &env, false, true) {
            Unposted::Taken => {
                self.log.push(format!("unposted {spec:?} took {env:?}"));
                prop_assert!(
                    would,
                    "unposted {:?} took {:?}; the reference says no",
                    spec,
                    env
                );
                Ok(())
            }
            other => {
                prop_assert_eq!(
                    other == Unposted::NotMine,
                    !spec.matches(&env),
                    "offer_unposted {:?} {:?}: {:?}",
                    spec,
                    env,
                    other
                );
                self.off.arrive(env, msg).unwrap();
                self.pump()
            }
        }
    }

    fn cancel(&mut self, i: usize) -> Result<(), TestCaseError> {
        if self.outstanding.is_empty() {
            return Ok(());
        }
        let id = self.outstanding[i % self.outstanding.len()];
        let tok = self.ids[&id];
        match self.off.cancel(id) {
            CancelOutcome::Cancelled(r) => {
                prop_assert_eq!(r, tok);
                prop_assert!(self.reference.cancel_where(|x| *x == tok).is_some());
                self.outstanding.retain(|x| *x != id);
            }
            CancelOutcome::Pending => {}
            CancelOutcome::Failed => {
                prop_assert!(!self.reference.posted().iter().any(|(_, r)| *r == tok));
            }
        }
        self.pump()
    }

    fn wire(&mut self, env: Envelope) {
        let msg = self.next_msg;
        self.next_msg += 1;
        self.sim.wire.push_back((LAYOUT.encode(env).unwrap(), msg));
    }

    fn sw_arrive(&mut self, env: Envelope) -> Result<(), TestCaseError> {
        let msg = self.next_msg;
        self.next_msg += 1;
        self.off.arrive(env, msg).unwrap();
        self.pump()
    }

    fn poll(&mut self, n: usize) -> Result<(), TestCaseError> {
        for _ in 0..n {
            let Some(ev) = self.sim.cq.pop_front() else {
                break;
            };
            // An engine-unexpected message is offered to the oldest
            // deferred receive first (the transport's order).
            if let EngineEvent::Unexpected { tag, msg, .. } = ev {
                if self.off.deferred_len() > 0 {
                    let env = LAYOUT.decode(tag);
                    let front = self.off.deferred_front().copied();
                    if let Some((id, recv)) = self.off.take_deferred(&env, true) {
                        prop_assert_eq!(Some(recv), front);
                        let want = self.reference.arrive(env, msg);
                        prop_assert_eq!(want.map(|(_, r)| r), Some(recv));
                        self.outstanding.retain(|x| *x != id);
                        self.pump()?;
                        continue;
                    }
                }
            }
            self.off.handle_event(ev).unwrap();
            self.pump()?;
        }
        Ok(())
    }

    fn probe(&mut self, spec: MatchSpec, take: bool) -> Result<(), TestCaseError> {
        if take {
            let got = self.off.improbe(&spec).map(|m| (m.env, m.msg));
            prop_assert_eq!(got, self.reference.improbe(&spec));
        } else {
            let got = self.off.probe(&spec).map(|p| (p.env, *p.msg));
            prop_assert_eq!(got, self.reference.probe(&spec).map(|(e, m)| (e, *m)));
        }
        Ok(())
    }

    /// Runs engine and model until nothing moves, then compares everything.
    fn quiesce(&mut self) -> Result<(), TestCaseError> {
        loop {
            let moved = self.sim.exec() | self.sim.deliver() | !self.sim.cq.is_empty();
            self.poll(usize::MAX)?;
            if !moved {
                break;
            }
        }
        prop_assert_eq!(self.off.parked_len(), 0);
        prop_assert!(self.sim.cmdq.is_empty());
        let mp: Vec<(MatchSpec, u32)> = self
            .off
            .posted()
            .iter()
            .map(|(_, s, r, _)| (*s, **r))
            .collect();
        prop_assert_eq!(
            &mp[..],
            self.reference.posted(),
            "posted queues differ at quiescence"
        );
        prop_assert_eq!(self.off.engine_len(), self.sim.list.len());
        Ok(())
    }
}

// ------------------------------------------------------------- proptests ---

#[derive(Debug, Clone)]
enum Op {
    Post(MatchSpec, bool),
    Cancel(usize),
    Wire(Envelope),
    Sw(Envelope),
    Exec(usize),
    Deliver(usize),
    Poll(usize),
    Probe(MatchSpec, bool),
    /// A receive deferred if the model lets it, posted otherwise.
    Defer(MatchSpec),
    /// A bypass-path message offered to the oldest deferred receive first.
    TakeDeferred(Envelope),
    /// A bypass-path message offered to a receive that is not posted.
    Unposted(MatchSpec, Envelope),
    /// The deferred receives moved into the posted queue.
    PostDeferred,
    /// Execute every queued action and process every event (no new wire
    /// deliveries): the engine comes back in phase.
    Settle,
}

fn spec(srcs: u32, tags: u32) -> impl Strategy<Value = MatchSpec> {
    (0..2u32, 0..srcs, 0..tags, 0..100u32, 0..100u32).prop_map(|(c, s, t, ws, wt)| MatchSpec {
        context_id: c,
        source: if ws < 25 {
            Source::Any
        } else {
            Source::Rank(s)
        },
        tag: if wt < 25 { Tag::Any } else { Tag::Value(t) },
    })
}

fn env(srcs: u32, tags: u32) -> impl Strategy<Value = Envelope> {
    (0..2u32, 0..srcs, 0..tags).prop_map(|(c, s, t)| Envelope {
        context_id: c,
        source: s,
        tag: t,
    })
}

fn op(sw_path: bool) -> BoxedStrategy<Op> {
    let sw_weight = if sw_path { 2 } else { 0 };
    let base = prop_oneof![
        5 => (spec(3, 3), prop::bool::weighted(0.8)).prop_map(|(s, e)| Op::Post(s, e)),
        1 => any::<usize>().prop_map(Op::Cancel),
        5 => env(3, 3).prop_map(Op::Wire),
        sw_weight => env(3, 3).prop_map(Op::Sw),
        3 => (1..4usize).prop_map(Op::Exec),
        4 => (1..4usize).prop_map(Op::Deliver),
        4 => (1..6usize).prop_map(Op::Poll),
        1 => (spec(3, 3), any::<bool>()).prop_map(|(s, t)| Op::Probe(s, t)),
        2 => Just(Op::Settle),
    ];
    if !sw_path {
        return base.boxed();
    }
    // Plus deferred receives, their messages, and receives that take an
    // arrival without being posted (all on the bypass path).
    prop_oneof![
        27 => base,
        3 => spec(3, 3).prop_map(Op::Defer),
        3 => env(3, 3).prop_map(Op::TakeDeferred),
        2 => (spec(3, 3), env(3, 3)).prop_map(|(s, e)| Op::Unposted(s, e)),
        1 => Just(Op::PostDeferred),
    ]
    .boxed()
}

/// Post-heavy traffic: the posted queue (and the software-resident part of
/// it) grows well past the 16-entry linear forms and shrinks back, so the
/// prefix check runs on both forms of its index and across the switches.
fn deep_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => spec(4, 8).prop_map(Op::Defer),
        3 => env(4, 8).prop_map(Op::TakeDeferred),
        1 => (spec(4, 8), env(4, 8)).prop_map(|(s, e)| Op::Unposted(s, e)),
        14 => (spec(4, 8), prop::bool::weighted(0.5)).prop_map(|(s, e)| Op::Post(s, e)),
        1 => any::<usize>().prop_map(Op::Cancel),
        4 => env(4, 8).prop_map(Op::Wire),
        3 => env(4, 8).prop_map(Op::Sw),
        3 => (1..4usize).prop_map(Op::Exec),
        3 => (1..4usize).prop_map(Op::Deliver),
        3 => (1..6usize).prop_map(Op::Poll),
        1 => (spec(4, 8), any::<bool>()).prop_map(|(s, t)| Op::Probe(s, t)),
        1 => Just(Op::Settle),
    ]
}

/// Deferral-heavy traffic: windows of receives deferred before their
/// messages, messages offered to the oldest deferred receive (taken, or
/// handed to the model, which posts the deferred receives first), cancels
/// of deferred receives, and enough posts, wire messages and probes in
/// between to move them into the posted queue at every point.
fn defer_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => spec(2, 3).prop_map(Op::Defer),
        8 => env(2, 3).prop_map(Op::TakeDeferred),
        2 => (spec(2, 3), env(2, 3)).prop_map(|(s, e)| Op::Unposted(s, e)),
        1 => Just(Op::PostDeferred),
        2 => any::<usize>().prop_map(Op::Cancel),
        1 => (spec(2, 3), prop::bool::weighted(0.5)).prop_map(|(s, e)| Op::Post(s, e)),
        1 => env(2, 3).prop_map(Op::Wire),
        1 => env(2, 3).prop_map(Op::Sw),
        1 => (1..4usize).prop_map(Op::Exec),
        1 => (1..4usize).prop_map(Op::Deliver),
        2 => (1..6usize).prop_map(Op::Poll),
        1 => (spec(2, 3), any::<bool>()).prop_map(|(s, t)| Op::Probe(s, t)),
        1 => Just(Op::Settle),
    ]
}

fn cfg_strategy() -> impl Strategy<Value = OffloadConfig> {
    (0..7usize, any::<bool>(), any::<bool>(), 1..5u16).prop_map(
        |(cap, any_source, any_tag, interval)| OffloadConfig {
            layout: LAYOUT,
            capacity: cap,
            any_source,
            any_tag,
            sync_interval: interval,
        },
    )
}

fn run(cfg: OffloadConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(cfg);
    for op in ops {
        match op {
            Op::Post(s, e) => h.post(*s, *e)?,
            Op::Cancel(i) => h.cancel(*i)?,
            Op::Wire(e) => h.wire(*e),
            Op::Sw(e) => h.sw_arrive(*e)?,
            Op::Exec(n) => {
                for _ in 0..*n {
                    h.sim.exec();
                }
            }
            Op::Deliver(n) => {
                for _ in 0..*n {
                    h.sim.deliver();
                }
            }
            Op::Poll(n) => h.poll(*n)?,
            Op::Probe(s, take) => h.probe(*s, *take)?,
            Op::Defer(s) => h.defer(*s)?,
            Op::TakeDeferred(e) => h.take_deferred(*e)?,
            Op::Unposted(s, e) => h.unposted(*s, *e)?,
            Op::PostDeferred => {
                h.off.post_deferred().unwrap();
                h.pump()?;
            }
            Op::Settle => loop {
                let moved = h.sim.exec() | !h.sim.cq.is_empty();
                h.poll(usize::MAX)?;
                if !moved {
                    break;
                }
            },
        }
    }
    h.quiesce()
}

fn config(cases: Option<u32>) -> ProptestConfig {
    let base = ProptestConfig::default();
    ProptestConfig {
        cases: cases.unwrap_or(base.cases),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/offload.txt",
        ))),
        ..base
    }
}

proptest! {
    #![proptest_config(config(Some(256)))]

    /// Engine-path traffic only, random capacity and shapes.
    #[test]
    fn offload_matches_reference(cfg in cfg_strategy(), ops in prop::collection::vec(op(false), 1..200)) {
        run(cfg, &ops)?;
    }

    /// Plus messages that bypass the engine (shared memory, self).
    #[test]
    fn offload_with_bypass_path_matches_reference(cfg in cfg_strategy(), ops in prop::collection::vec(op(true), 1..200)) {
        run(cfg, &ops)?;
    }

    /// Deferred receives against the reference (a deferred receive is a
    /// plain post there), with an engine beside them.
    #[test]
    fn offload_deferred_receives_match_reference(cfg in cfg_strategy(), ops in prop::collection::vec(defer_op(), 1..300)) {
        run(cfg, &ops)?;
    }

    /// Deep queues: more than 16 software-resident receives (the prefix
    /// check's counter form), then drained (back to its list form).
    #[test]
    fn offload_deep_queues_match_reference(cfg in cfg_strategy(), ops in prop::collection::vec(deep_op(), 1..300)) {
        run(cfg, &ops)?;
    }
}

proptest! {
    #![proptest_config(config(None))]

    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_offload_deferred_receives_match_reference(cfg in cfg_strategy(), ops in prop::collection::vec(defer_op(), 1..2000)) {
        run(cfg, &ops)?;
    }

    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_offload_matches_reference_long(cfg in cfg_strategy(), ops in prop::collection::vec(op(true), 1..1500)) {
        run(cfg, &ops)?;
    }
}

// ------------------------------------------------------------ unit tests ---

fn s(c: u32, src: Option<u32>, tag: Option<u32>) -> MatchSpec {
    MatchSpec {
        context_id: c,
        source: src.map_or(Source::Any, Source::Rank),
        tag: tag.map_or(Tag::Any, Tag::Value),
    }
}

fn e(c: u32, src: u32, tag: u32) -> Envelope {
    Envelope {
        context_id: c,
        source: src,
        tag,
    }
}

fn tag(c: u32, src: u32, t: u32) -> u64 {
    LAYOUT.encode(e(c, src, t)).unwrap()
}

fn queued(o: PostOutcome<u32, u32>) -> (RecvId, bool) {
    match o {
        PostOutcome::Queued { id, offloaded } => (id, offloaded),
        other => panic!("expected queued, got {other:?}"),
    }
}

fn completions(off: &mut Offload<u32, u32>) -> Vec<Completion<u32, u32>> {
    std::iter::from_fn(|| off.poll_completion()).collect()
}

fn actions(off: &mut Offload<u32, u32>) -> Vec<Action> {
    std::iter::from_fn(|| off.poll_action()).collect()
}

fn run_ok(cfg: OffloadConfig, ops: &[Op]) {
    if let Err(e) = run(cfg, ops) {
        panic!("{e}");
    }
}

#[test]
fn e28_m1_m2_b1_race_m1_goes_to_b1_and_m2_stays_unexpected() {
    // tag_matching.md: m1 arrives unexpected before b1's add executes; m2 then
    // must not match b1 in the engine, m1 must (in software).
    let cfg = OffloadConfig::new(LAYOUT, 4);
    let mut h = Harness::new(cfg);
    h.wire(e(0, 1, 5)); // m1 = message 0
    h.sim.deliver(); // unexpected: H = 1
    h.post(s(0, Some(1), Some(5)), true).unwrap(); // b1: Add with count 0
    assert_eq!(h.sim.cmdq.len(), 1);
    h.sim.exec(); // b1 pending (S = 0 != H = 1)
    assert!(!h.sim.list[0].active);
    h.wire(e(0, 1, 5)); // m2 = message 1
    h.sim.deliver();
    assert!(
        matches!(
            h.sim.cq.back(),
            Some(EngineEvent::Unexpected { msg: 1, .. })
        ),
        "m2 must not match the pending b1"
    );
    h.poll(usize::MAX).unwrap(); // m1 parks on b1: Delete emitted
    assert_eq!(h.off.parked_len(), 2, "m1 parked and m2 waiting behind it");
    h.quiesce().unwrap();
    assert!(h
        .log
        .iter()
        .any(|l| l.contains("Matched") && l.contains("recv: 0") && l.contains("msg: 0")));
    let q: Vec<u32> = h.off.unexpected().iter().map(|p| *p.msg).collect();
    assert_eq!(q, vec![1], "m2 waits in the software unexpected queue");
    assert_eq!(h.off.count(), 2);
    assert_eq!(h.off.stats().withdrawals, 1);
}

#[test]
fn e17_cancel_racing_with_engine_consumption_reports_not_cancelled_once() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let (id, offloaded) = queued(off.post(s(0, Some(2), Some(3)), 7, true).unwrap());
    assert!(offloaded);
    actions(&mut off);
    off.handle_event(EngineEvent::Added {
        handle: id,
        sync_request: false,
    })
    .unwrap();
    assert_eq!(off.cancel(id), CancelOutcome::Pending);
    assert!(matches!(actions(&mut off)[..], [Action::Delete { handle, .. }] if handle == id));
    // The engine consumed it before executing the delete.
    off.handle_event(EngineEvent::Matched {
        handle: id,
        tag: tag(0, 2, 3),
        msg: 99,
    })
    .unwrap();
    off.handle_event(EngineEvent::DeleteFailed { handle: id })
        .unwrap();
    assert_eq!(
        completions(&mut off),
        vec![
            Completion::Matched {
                id,
                recv: 7,
                env: e(0, 2, 3),
                msg: 99
            },
            Completion::CancelFailed { id },
        ]
    );
    assert_eq!(off.cancel(id), CancelOutcome::Failed);
    assert!(
        off.handle_event(EngineEvent::DeleteFailed { handle: id })
            .is_err(),
        "only once"
    );
    assert_eq!(off.engine_len(), 0);
}

#[test]
fn e17b_cancel_that_wins_the_race_hands_the_receive_back() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let (id, _) = queued(off.post(s(0, Some(2), Some(3)), 7, true).unwrap());
    assert_eq!(off.cancel(id), CancelOutcome::Pending);
    assert_eq!(
        off.cancel(id),
        CancelOutcome::Pending,
        "a second cancel emits nothing new"
    );
    assert_eq!(actions(&mut off).len(), 2, "add, delete");
    off.handle_event(EngineEvent::Added {
        handle: id,
        sync_request: false,
    })
    .unwrap();
    off.handle_event(EngineEvent::Deleted {
        handle: id,
        sync_request: false,
    })
    .unwrap();
    assert_eq!(
        completions(&mut off),
        vec![Completion::Cancelled { id, recv: 7 }]
    );
    assert_eq!(off.posted_len(), 0);
}

#[test]
fn delete_failed_before_matched_event_is_handled_in_either_order() {
    // A bypass-path message wins an engine entry the engine has just consumed
    // for a wire message; the engine reports the failure before the match.
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let (b1, _) = queued(
        off.post(s(0, None, Some(3)), 1, true)
            .unwrap_or_else(|_| unreachable!()),
    );
    // ANY_SOURCE is not offloadable by default: use an any_source engine.
    assert!(!off.is_offloaded(b1));
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig {
        any_source: true,
        ..OffloadConfig::new(LAYOUT, 4)
    })
    .unwrap();
    let (b1, offloaded) = queued(off.post(s(0, None, Some(3)), 1, true).unwrap());
    assert!(offloaded);
    let (b2, _) = queued(off.post(s(0, None, Some(3)), 2, false).unwrap());
    actions(&mut off);
    off.arrive(e(0, 9, 3), 500).unwrap(); // bypass message: b1 is the earliest -> withdraw
    assert!(matches!(actions(&mut off)[..], [Action::Delete { handle, .. }] if handle == b1));
    off.arrive(e(0, 9, 3), 501).unwrap(); // waits behind 500
    assert_eq!(off.parked_len(), 2);
    off.handle_event(EngineEvent::DeleteFailed { handle: b1 })
        .unwrap();
    // 500 re-matches to b2; 501 is queued.
    let c = completions(&mut off);
    assert!(
        matches!(c[0], Completion::Matched { id, msg: 500, .. } if id == b2),
        "{c:?}"
    );
    assert!(matches!(c[1], Completion::Queued { .. }), "{c:?}");
    off.handle_event(EngineEvent::Matched {
        handle: b1,
        tag: tag(0, 4, 3),
        msg: 400,
    })
    .unwrap();
    assert!(
        matches!(completions(&mut off)[..], [Completion::Matched { id, msg: 400, recv: 1, .. }] if id == b1)
    );
    assert_eq!(off.engine_len(), 0);
    assert_eq!(off.stats().delete_races, 1);
}

#[test]
fn e29_same_buffer_posted_twice_second_stays_in_software_both_match_in_order() {
    let mut h = Harness::new(OffloadConfig::new(LAYOUT, 8));
    h.post(s(0, Some(1), Some(1)), true).unwrap();
    // The driver refuses the same buffer twice (UCX ALREADY_EXISTS): not eligible.
    h.post(s(0, Some(1), Some(1)), false).unwrap();
    assert_eq!(
        h.off.posted().iter().map(|p| p.3).collect::<Vec<_>>(),
        vec![true, false]
    );
    h.wire(e(0, 1, 1));
    h.wire(e(0, 1, 1));
    h.quiesce().unwrap();
    assert_eq!(h.off.posted_len(), 0);
    assert_eq!(h.off.stats().engine_matches, 1);
    assert_eq!(h.off.stats().sw_matches, 1);
}

#[test]
fn bounded_prefix_blocks_overlapping_later_receives_only() {
    let cfg = OffloadConfig::new(LAYOUT, 8);
    let mut off: Offload<u32, u32> = Offload::new(cfg).unwrap();
    // ANY_SOURCE cannot go to a per-peer engine...
    assert!(!queued(off.post(s(0, None, Some(5)), 0, true).unwrap()).1);
    // ...so an exact receive it overlaps stays in software,
    assert!(!queued(off.post(s(0, Some(1), Some(5)), 1, true).unwrap()).1);
    // but one with another tag, or in another context, is offloaded.
    assert!(queued(off.post(s(0, Some(1), Some(6)), 2, true).unwrap()).1);
    assert!(queued(off.post(s(1, Some(1), Some(5)), 3, true).unwrap()).1);
    // (s,*) overlaps (*,5): stays; (s,*) in context 1 overlaps nothing in sw.
    assert!(!queued(off.post(s(0, Some(2), None), 4, true).unwrap()).1);
    assert!(queued(off.post(s(1, Some(2), None), 5, true).unwrap()).1);
    assert_eq!(off.stats().kept_in_sw, 3);
}

#[test]
fn list_full_keeps_receives_in_software_until_capacity_frees() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 2)).unwrap();
    let (a, oa) = queued(off.post(s(0, Some(1), Some(1)), 0, true).unwrap());
    let (_, ob) = queued(off.post(s(0, Some(1), Some(2)), 1, true).unwrap());
    let (_, oc) = queued(off.post(s(0, Some(1), Some(3)), 2, true).unwrap());
    assert_eq!((oa, ob, oc), (true, true, false));
    // Same key as the software one: blocked by the prefix rule even with room.
    off.handle_event(EngineEvent::Matched {
        handle: a,
        tag: tag(0, 1, 1),
        msg: 0,
    })
    .unwrap();
    assert!(!queued(off.post(s(0, Some(1), Some(3)), 3, true).unwrap()).1);
    // Another key: capacity freed, offloaded.
    assert!(queued(off.post(s(0, Some(1), Some(4)), 4, true).unwrap()).1);
    assert_eq!(off.engine_len(), 2);
}

#[test]
fn unexpected_counter_wraps_past_0xffff_and_adds_stay_in_phase() {
    let cfg = OffloadConfig::new(LAYOUT, 1);
    let mut h = Harness::new(cfg);
    let n: u32 = 70_000;
    for i in 0..n {
        h.wire(e(0, 0, 1)); // never matched: unexpected
        h.sim.deliver();
        h.poll(usize::MAX).unwrap();
        while h.sim.exec() {}
        if i % 5000 == 0 || (65_530..65_540).contains(&i) {
            // A receive for another tag goes to the engine in phase, and the
            // engine matches it itself.
            h.post(s(0, Some(0), Some(2)), true).unwrap();
            while h.sim.exec() {}
            assert!(
                h.sim.list[0].active,
                "entry added at count {} not active",
                h.off.count()
            );
            h.wire(e(0, 0, 2));
            h.sim.deliver();
            assert!(matches!(h.sim.cq.back(), Some(EngineEvent::Matched { .. })));
            h.poll(usize::MAX).unwrap();
        }
        // Drop the queued messages now and then (keeps the reference fast).
        if i % 64 == 63 {
            while h.off.improbe(&s(0, None, None)).is_some() {}
            while h.reference.improbe(&s(0, None, None)).is_some() {}
        }
    }
    assert_eq!(h.off.count(), (n % 65_536) as u16);
    assert_eq!(h.sim.h, h.off.count());
    assert!(h.off.stats().syncs >= u64::from(n) / (1 << 14));
    h.quiesce().unwrap();
}

#[test]
fn sync_requests_are_answered_with_the_current_count() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 2)).unwrap();
    off.handle_event(EngineEvent::Unexpected {
        tag: tag(0, 0, 0),
        msg: 1,
        sync_request: true,
    })
    .unwrap();
    off.handle_event(EngineEvent::SyncRequest).unwrap();
    assert_eq!(
        actions(&mut off),
        vec![Action::Sync { count: 1 }, Action::Sync { count: 1 }]
    );
}

#[test]
fn events_that_do_not_fit_the_model_are_errors_not_panics() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 2)).unwrap();
    let bogus = RecvId::from_bits(12345);
    assert!(matches!(
        off.handle_event(EngineEvent::Matched {
            handle: bogus,
            tag: 0,
            msg: 0
        }),
        Err(Error::UnknownHandle { .. })
    ));
    assert!(matches!(
        off.handle_event(EngineEvent::Deleted {
            handle: bogus,
            sync_request: false
        }),
        Err(Error::UnknownHandle { .. })
    ));
    let (sw, _) = queued(off.post(s(0, Some(0), Some(0)), 0, false).unwrap());
    assert!(matches!(
        off.handle_event(EngineEvent::Matched {
            handle: sw,
            tag: 0,
            msg: 0
        }),
        Err(Error::UnexpectedEvent { .. })
    ));
    assert!(matches!(
        off.handle_event(EngineEvent::DeleteFailed { handle: sw }),
        Err(Error::UnexpectedEvent { .. })
    ));
    assert!(Offload::<u32, u32>::new(OffloadConfig {
        sync_interval: 0,
        ..OffloadConfig::new(LAYOUT, 1)
    })
    .is_err());
    assert_eq!(off.posted_len(), 1, "the model is unchanged");
}

#[test]
fn deterministic_interleaving_with_late_engine_matches_reference() {
    // A fixed schedule mixing every event kind, as a readable smoke test of
    // the differential harness itself.
    let cfg = OffloadConfig {
        any_source: true,
        ..OffloadConfig::new(LAYOUT, 3)
    };
    let ops = vec![
        Op::Post(s(0, Some(1), Some(1)), true),
        Op::Wire(e(0, 1, 1)),
        Op::Post(s(0, None, Some(1)), true),
        Op::Deliver(1),
        Op::Exec(1),
        Op::Wire(e(0, 2, 1)),
        Op::Deliver(1),
        Op::Poll(2),
        Op::Cancel(0),
        Op::Sw(e(0, 1, 1)),
        Op::Exec(3),
        Op::Poll(9),
        Op::Probe(s(0, None, None), true),
    ];
    run_ok(cfg, &ops);
}

#[test]
fn prefix_rule_keeps_exact_receive_behind_older_any_any_in_software() {
    // (*,*) cannot be offloaded (per-peer engine); an exact receive posted after
    // it must not be either, or the engine would give it a message the older
    // (*,*) must get. The engine is in phase, so it would match at once.
    let cfg = OffloadConfig::new(LAYOUT, 4);
    let ops = vec![
        Op::Post(s(0, None, None), true),
        Op::Post(s(0, Some(1), Some(1)), true),
        Op::Settle,
        Op::Wire(e(0, 1, 1)),
        Op::Deliver(1),
        Op::Settle,
        Op::Wire(e(0, 1, 1)),
        Op::Deliver(1),
        Op::Settle,
    ];
    run_ok(cfg, &ops);
}

/// Many software receives, then a long run of small (ineligible) receives
/// posted and matched with no eligible post in between (the prefix index
/// goes stale and is rebuilt from the shadow at the next eligible post):
/// the prefix rule must still see every older software receive, and only
/// those.
#[test]
fn prefix_rule_holds_after_long_runs_without_eligible_posts() {
    let cfg = OffloadConfig::new(LAYOUT, 8);
    let mut off: Offload<u32, u32> = Offload::new(cfg).unwrap();
    for t in 0..100 {
        assert!(!queued(off.post(s(0, Some(1), Some(t)), t, false).unwrap()).1);
    }
    // An (s,*) receive that stays, and a churn of 300 post + match pairs.
    assert!(!queued(off.post(s(0, Some(3), None), 1000, false).unwrap()).1);
    for i in 0..300 {
        assert!(!queued(off.post(s(0, Some(2), Some(9)), 2000 + i, false).unwrap()).1);
        off.arrive(e(0, 2, 9), i).unwrap();
        let c = completions(&mut off);
        assert!(
            matches!(c.as_slice(), [Completion::Matched { recv, .. }] if *recv == 2000 + i),
            "{c:?}"
        );
    }
    // Overlaps an older software receive: stays in software.
    assert!(!queued(off.post(s(0, Some(1), Some(50)), 1, true).unwrap()).1);
    assert!(!queued(off.post(s(0, Some(3), Some(7)), 2, true).unwrap()).1);
    // Overlaps none (the churned ones are gone): offloaded.
    assert!(queued(off.post(s(0, Some(2), Some(9)), 3, true).unwrap()).1);
    assert!(queued(off.post(s(0, Some(1), Some(5000)), 4, true).unwrap()).1);
    assert!(queued(off.post(s(1, Some(1), Some(50)), 5, true).unwrap()).1);
    // Drain the software receives, churn again, and the rule sees them gone.
    for t in 0..100 {
        off.arrive(e(0, 1, t), 10_000 + t).unwrap();
    }
    off.arrive(e(0, 3, 1), 20_000).unwrap();
    let c = completions(&mut off);
    assert_eq!(
        c.iter()
            .filter(|c| matches!(c, Completion::Matched { .. }))
            .count(),
        101,
        "{c:?}"
    );
    for i in 0..300 {
        let _ = off.post(s(0, Some(2), Some(8)), 3000 + i, false).unwrap();
        off.arrive(e(0, 2, 8), i).unwrap();
    }
    // (1, 50) in software was posted (eligible, kept) before: it still
    // blocks; (3, 7) too. A fresh key does not.
    assert!(!queued(off.post(s(0, Some(1), Some(50)), 6, true).unwrap()).1);
    assert!(queued(off.post(s(0, Some(4), Some(4)), 7, true).unwrap()).1);
}

#[test]
fn deferred_receives_keep_their_handles_across_the_move_into_the_posted_queue() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    // More than the posted queue's linear form holds (64): the move
    // crosses into its indexed form.
    let ids: Vec<RecvId> = (0..100u32)
        .map(|i| off.defer(s(0, Some(3), Some(i % 5)), i).unwrap())
        .collect();
    assert_eq!(off.deferred_len(), 100);
    assert_eq!(off.deferred_source(), Some(3));
    assert_eq!(
        (off.deferred_front(), off.deferred_back()),
        (Some(&0), Some(&99))
    );
    // Another source, or an ANY_SOURCE receive, is not deferred.
    assert!(off.may_defer(3) && !off.may_defer(4));
    assert_eq!(off.defer(s(0, Some(4), Some(0)), 500), Err(500));
    assert_eq!(off.defer(s(0, None, Some(0)), 501), Err(501));
    // The oldest takes the next message from its source if it matches.
    assert_eq!(off.take_deferred(&e(0, 3, 0), false), Some((ids[0], 0)));
    assert_eq!(
        off.take_deferred(&e(0, 3, 4), false),
        None,
        "receive 1 wants tag 1"
    );
    assert_eq!(
        off.take_deferred(&e(0, 2, 1), false),
        None,
        "another source"
    );
    assert_eq!(off.stats().sw_matches, 1);
    // Cancel one in the middle.
    assert_eq!(off.cancel(ids[50]), CancelOutcome::Cancelled(50));
    assert_eq!(off.cancel(ids[50]), CancelOutcome::Failed);
    // A message the oldest does not take: handed to the model, which moves
    // the deferred receives in first and gives it to the oldest match
    // (receive 4, tag 4).
    off.arrive(e(0, 3, 4), 1000).unwrap();
    assert_eq!(off.deferred_len(), 0);
    assert_eq!(off.posted_len(), 97);
    assert_eq!(off.stats().deferred_posted, 98);
    assert_eq!(
        completions(&mut off),
        vec![Completion::Matched {
            id: ids[4],
            recv: 4,
            env: e(0, 3, 4),
            msg: 1000
        }]
    );
    // Every handle still names its receive; the posted order is the
    // deferral order.
    let order: Vec<u32> = off.posted().iter().map(|p| *p.2).collect();
    let want: Vec<u32> = (1..100).filter(|&i| i != 4 && i != 50).collect();
    assert_eq!(order, want);
    assert_eq!(off.cancel(ids[99]), CancelOutcome::Cancelled(99));
    assert_eq!(off.cancel(ids[1]), CancelOutcome::Cancelled(1));
    for (i, id) in ids.iter().enumerate().skip(2).take(40) {
        if i == 4 {
            continue;
        }
        assert!(!off.is_offloaded(*id));
        off.arrive(e(0, 3, (i % 5) as u32), 2000 + i as u32)
            .unwrap();
        let c = completions(&mut off);
        assert!(
            matches!(&c[..], [Completion::Matched { id: got, recv, .. }] if got == id && *recv == i as u32),
            "message for receive {i}: {c:?}"
        );
    }
}

#[test]
fn offer_unposted_decides_with_the_queues_it_holds() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let want = s(0, Some(1), Some(7));
    // Not its message: nothing changes, it may take a later one.
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 8), false, true),
        Unposted::NotMine
    );
    // Its message, but the caller cannot deliver it now.
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), false, false),
        Unposted::Queue
    );
    // A queued message it matches is older: never taken past it.
    off.arrive(e(0, 1, 7), 1).unwrap();
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), false, true),
        Unposted::Queue
    );
    // Any queued message, even one it does not match, sends it the
    // general way (posting matches the queue once).
    assert!(off.improbe(&want).is_some());
    off.arrive(e(0, 2, 7), 2).unwrap();
    completions(&mut off);
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), true, true),
        Unposted::Queue
    );
    assert!(off.improbe(&s(0, Some(2), Some(7))).is_some());
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), true, true),
        Unposted::Taken
    );
    assert_eq!(off.count(), 1, "an engine-path message is counted");
    // A posted receive (or a deferred one) would take it first.
    let _ = off.post(s(0, Some(1), Some(9)), 5, false).unwrap();
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), false, true),
        Unposted::Queue
    );
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    off.defer(s(0, Some(1), Some(9)), 6).unwrap();
    assert_eq!(
        off.offer_unposted(&want, &e(0, 1, 7), false, true),
        Unposted::Queue
    );
    assert!(!off.consume_arrival(&want, &e(0, 1, 7), false));
    assert!(
        off.unposted_turn(want).is_none(),
        "no turn while a receive is deferred"
    );
    // A turn: refused for another message (nothing changes), taken for its
    // own.
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let turn = off.unposted_turn(want).unwrap();
    assert!(!turn.take(&e(0, 2, 7), true));
    assert_eq!((off.count(), off.stats().sw_matches), (0, 0));
    assert!(off.unposted_turn(want).unwrap().take(&e(0, 1, 7), true));
    assert_eq!((off.count(), off.stats().sw_matches), (1, 1));
}

#[test]
fn peek_arrival_names_the_receive_an_arrival_would_take() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    assert!(off.peek_arrival(&e(0, 1, 7)).is_none());
    let (held, offloaded) = queued(off.post(s(0, Some(1), Some(7)), 1, true).unwrap());
    assert!(offloaded);
    let (soft, _) = queued(off.post(s(0, Some(1), None), 2, false).unwrap());
    let p = off.peek_arrival(&e(0, 1, 7)).unwrap();
    assert_eq!(
        (p.id, *p.recv, p.offloaded, p.deferred),
        (held, 1, true, false)
    );
    let p = off.peek_arrival(&e(0, 1, 8)).unwrap();
    assert_eq!(
        (p.id, *p.recv, p.offloaded, p.deferred),
        (soft, 2, false, false)
    );
    assert!(off.peek_arrival(&e(0, 2, 7)).is_none());
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    let a = off.defer(s(0, Some(1), Some(3)), 10).unwrap();
    let b = off.defer(s(0, Some(1), None), 11).unwrap();
    let p = off.peek_arrival(&e(0, 1, 3)).unwrap();
    assert_eq!((p.id, *p.recv, p.deferred), (a, 10, true));
    let p = off.peek_arrival(&e(0, 1, 4)).unwrap();
    assert_eq!((p.id, *p.recv, p.deferred), (b, 11, true));
    assert!(off.peek_arrival(&e(1, 1, 3)).is_none());
}

#[test]
fn engine_scan_gives_the_message_to_the_first_matching_entry_only() {
    let exact = |src, t| LAYOUT.match_bits(s(0, Some(src), Some(t))).unwrap();
    let any_tag = LAYOUT.match_bits(s(0, Some(1), None)).unwrap();
    let msg = tag(0, 1, 7);
    let mut scan = EngineScan::new(msg);
    let took: Vec<bool> = [exact(1, 6), exact(2, 7), any_tag, exact(1, 7)]
        .iter()
        .map(|entry| scan.offer(entry))
        .collect();
    assert_eq!(took, [false, false, true, false]);
    assert!(scan.found());
    let mut none = EngineScan::new(tag(0, 3, 7));
    assert!(!none.offer(&any_tag) && !none.found());
}

#[test]
fn post_software_refuses_while_a_message_is_queued_and_posts_deferred_ones_first() {
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    // Nothing queued: taken in software.
    assert!(off
        .post_software(s(0, Some(1), Some(1)), 1)
        .unwrap()
        .is_ok());
    // A message nobody takes is queued: refused (the fast test), nothing
    // changed.
    off.arrive(e(0, 2, 9), 100).unwrap();
    assert_eq!(off.unexpected_len(), 1);
    assert_eq!(
        off.post_software(s(0, Some(2), Some(9)), 2).unwrap(),
        Err(2)
    );
    assert_eq!(off.unexpected_len(), 1);
    // With receives deferred (only while nothing is queued or posted), a
    // software post moves them into the posted queue first, in order.
    let mut off: Offload<u32, u32> = Offload::new(OffloadConfig::new(LAYOUT, 4)).unwrap();
    off.defer(s(0, Some(3), Some(0)), 10).unwrap();
    assert!(!off.may_defer(4));
    assert!(off
        .post_software(s(0, Some(4), Some(0)), 11)
        .unwrap()
        .is_ok());
    assert_eq!(off.deferred_len(), 0);
    assert!(
        !off.may_defer(3),
        "receives are posted: nothing may be deferred"
    );
}
