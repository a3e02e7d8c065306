//! Deferred receives (`TMX_SHMEM_TUNE=defer_recv`) against MPI's matching rules.
//!
//! One thread drives two endpoints of one segment (rank 0 sends, rank 1
//! receives), so every run is deterministic: a program of sends, nonblocking
//! receives (`irecv_or_done`, alone or after `recv_arrived` as the adi
//! makes them, into an owned buffer or lent memory, exact or `ANY_TAG`),
//! probes, cancels, plain
//! `irecv`s and progress passes, then a drain with `ANY_TAG` receives. The
//! outcome is checked against the rules, not against one schedule:
//!
//! - every message is received exactly once, by a receive whose spec it
//!   matches, with its own bytes;
//! - non-overtaking of messages: if message `a` was sent before `b` and both
//!   match the receive `r` that got `b`, then `a` went to a receive posted
//!   before `r`;
//! - non-overtaking of receives: if receives `r1` (older, not cancelled) and
//!   `r2` both match the message `m` that `r2` got, then `r1` got a message
//!   sent before `m`;
//! - a probe sees the oldest message that had left the sender before it
//!   (the sender holds messages back while the ring is full), matches it
//!   and was not taken by a receive posted before it; nothing if none;
//! - a successful cancel leaves the receive without a message.
//!
//! Every program runs with deferral on and off (the rules hold for both).
#![allow(clippy::unwrap_used)] // tests may unwrap

mod common;

use proptest::prelude::*;
use shmem_onesided::{CmaMode, Config, Endpoint, Node, RecvRequest, SendMode, Started};
use tm_proto::{MatchSpec, Source, Tag};

#[derive(Debug, Clone)]
enum Op {
    Send {
        tag: u32,
        len: usize,
    },
    Irecv {
        tag: Option<u32>,
    },
    /// As the adi makes one: `recv_arrived` first, `irecv_or_done` if it
    /// declines.
    ArrivedIrecv {
        tag: Option<u32>,
    },
    PlainIrecv {
        tag: Option<u32>,
    },
    /// As the adi makes one into lent memory: `recv_arrived`, then
    /// `irecv_or_done_lent` if it declines.
    LentIrecv {
        tag: Option<u32>,
    },
    Probe {
        tag: Option<u32>,
    },
    Cancel {
        k: usize,
    },
    Progress,
    SenderProgress,
}

fn op() -> impl Strategy<Value = Op> {
    let tag = prop_oneof![3 => (1u32..3).prop_map(Some), 1 => Just(None)];
    prop_oneof![
        5 => (1u32..3, prop_oneof![Just(8usize), Just(40), Just(64), Just(300)])
            .prop_map(|(tag, len)| Op::Send { tag, len }),
        4 => tag.clone().prop_map(|tag| Op::Irecv { tag }),
        4 => tag.clone().prop_map(|tag| Op::ArrivedIrecv { tag }),
        1 => tag.clone().prop_map(|tag| Op::PlainIrecv { tag }),
        3 => tag.clone().prop_map(|tag| Op::LentIrecv { tag }),
        1 => tag.prop_map(|tag| Op::Probe { tag }),
        1 => (0usize..16).prop_map(|k| Op::Cancel { k }),
        2 => Just(Op::Progress),
        1 => Just(Op::SenderProgress),
    ]
}

fn spec(tag: Option<u32>) -> MatchSpec {
    MatchSpec {
        context_id: 3,
        source: Source::Rank(0),
        tag: tag.map_or(Tag::Any, Tag::Value),
    }
}

fn matches(tag: Option<u32>, msg_tag: u32) -> bool {
    tag.is_none_or(|t| t == msg_tag)
}

/// Message `i`'s bytes: its index first, then a pattern.
fn payload(i: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|k| (k * 13 + i * 7) as u8).collect();
    v[..4].copy_from_slice(&(i as u32).to_le_bytes());
    v
}

/// How a nonblocking receive is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// `irecv`.
    Plain,
    /// `irecv_or_done`.
    OrDone,
    /// `recv_arrived`, then `irecv_or_done` if it declines.
    Arrived,
    /// `recv_arrived`, then `irecv_or_done_lent` if it declines.
    Lent,
}

struct Recv {
    tag: Option<u32>,
    /// Program step at which it was posted.
    at: usize,
    req: Option<RecvRequest>,
    /// Message index it got.
    got: Option<usize>,
    cancelled: bool,
    /// The memory lent to a pending `irecv_or_done_lent` receive.
    lent: Option<Box<[u8]>>,
}

struct Probe {
    tag: Option<u32>,
    at: usize,
    /// Messages that had left the sender before it (a prefix of the send
    /// order: the rest were still held in the sender's queue, ring full).
    sent_before: usize,
    /// (tag, length) it reported.
    saw: Option<(u32, usize)>,
}

fn pair(name: &str, defer: bool) -> (Endpoint, Endpoint) {
    let j = common::job("dfr", name);
    let cfg = Config {
        ring_slots: 8,
        publish_batch: 4,
        heap_bytes: 1 << 20,
        eager_bytes: 1 << 20,
        cma: CmaMode::Off,
        defer_recv: defer,
        ..Config::default()
    };
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let (j, c) = (j.clone(), cfg.clone());
            std::thread::spawn(move || Endpoint::new(Node::init(&j, r, 2, c).unwrap()))
        })
        .collect();
    let mut eps: Vec<Endpoint> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let e1 = eps.pop().unwrap();
    let e0 = eps.pop().unwrap();
    (e0, e1)
}

/// Records what the receiver's completion feed reports.
fn harvest(e1: &mut Endpoint, recvs: &mut [Recv], msgs: &[(u32, usize)]) {
    let (mut s, mut r) = (Vec::new(), Vec::new());
    e1.take_finished(&mut s, &mut r);
    for f in r {
        let st = f.result.unwrap();
        let rv = recvs
            .iter_mut()
            .find(|x| x.req.as_ref().is_some_and(|q| q.id() == f.id))
            .unwrap();
        rv.req = None;
        if st.cancelled {
            rv.cancelled = true;
        } else if let Some(mem) = rv.lent.take() {
            // Written in place; the feed hands back no buffer.
            assert!(f.buf.is_empty());
            record(rv, &st, &mem, msgs);
        } else {
            record(rv, &st, &f.buf, msgs);
        }
    }
}

fn record(rv: &mut Recv, st: &shmem_onesided::Status, buf: &[u8], msgs: &[(u32, usize)]) {
    let i = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
    assert!(i < msgs.len(), "message index {i} out of range");
    assert_eq!((st.tag, st.len), msgs[i], "status of message {i}");
    assert_eq!(
        &buf[..st.len],
        &payload(i, st.len)[..],
        "bytes of message {i}"
    );
    rv.got = Some(i);
}

/// Runs `ops`; returns how many receives were deferred.
fn run(ops: &[Op], defer: bool) -> u64 {
    let mode = if defer { "on" } else { "off" };
    let (mut e0, mut e1) = pair(mode, defer);
    let mut msgs: Vec<(u32, usize)> = Vec::new(); // tag, len
    let mut recvs: Vec<Recv> = Vec::new();
    let mut probes: Vec<Probe> = Vec::new();
    let mut pending_sends = 0usize;
    let (mut ss, mut sr) = (Vec::new(), Vec::new());
    let post = |e1: &mut Endpoint, recvs: &mut Vec<Recv>, msgs: &[(u32, usize)], tag, at, how| {
        let mut buf = vec![0u8; 300];
        let mut rv = Recv {
            tag,
            at,
            req: None,
            got: None,
            cancelled: false,
            lent: None,
        };
        if how == How::Lent {
            let mut mem = buf.into_boxed_slice();
            if let Some(st) = e1.recv_arrived(spec(tag), &mut mem).unwrap() {
                record(&mut rv, &st, &mem, msgs);
            } else {
                // SAFETY: the box's 300 bytes stay allocated, and are
                // neither read nor written here, until the receive has
                // finished (`harvest` takes them back then; every receive
                // finishes before the endpoints are finalized).
                match unsafe { e1.irecv_or_done_lent(spec(tag), mem.as_mut_ptr(), mem.len()) }
                    .unwrap()
                {
                    Started::Pending(r) => {
                        rv.req = Some(r);
                        rv.lent = Some(mem);
                    }
                    Started::Done(st) => record(&mut rv, &st.unwrap(), &mem, msgs),
                }
            }
        } else if how == How::Plain {
            rv.req = Some(e1.irecv(spec(tag), buf).unwrap());
        } else if let Some(st) = (how == How::Arrived)
            .then(|| e1.recv_arrived(spec(tag), &mut buf).unwrap())
            .flatten()
        {
            record(&mut rv, &st, &buf, msgs);
        } else {
            match e1.irecv_or_done(spec(tag), buf).unwrap() {
                Started::Pending(r) => rv.req = Some(r),
                Started::Done((st, buf)) => record(&mut rv, &st.unwrap(), &buf, msgs),
            }
        }
        recvs.push(rv);
    };
    for (step, o) in ops.iter().enumerate() {
        match *o {
            Op::Send { tag, len } => {
                let i = msgs.len();
                msgs.push((tag, len));
                if e0
                    .isend_or_done(1, tag, 3, payload(i, len), SendMode::Standard)
                    .unwrap()
                    .is_pending()
                {
                    pending_sends += 1;
                }
            }
            Op::Irecv { tag } => post(&mut e1, &mut recvs, &msgs, tag, step, How::OrDone),
            Op::ArrivedIrecv { tag } => {
                post(&mut e1, &mut recvs, &msgs, tag, step, How::Arrived);
            }
            Op::PlainIrecv { tag } => post(&mut e1, &mut recvs, &msgs, tag, step, How::Plain),
            Op::LentIrecv { tag } => post(&mut e1, &mut recvs, &msgs, tag, step, How::Lent),
            Op::Probe { tag } => {
                let saw = e1.iprobe(spec(tag)).unwrap().map(|st| (st.tag, st.len));
                probes.push(Probe {
                    tag,
                    at: step,
                    sent_before: msgs.len() - e0.queued(),
                    saw,
                });
            }
            Op::Cancel { k } => {
                let live: Vec<usize> = (0..recvs.len())
                    .filter(|&x| recvs[x].req.is_some())
                    .collect();
                if let Some(&x) = live.get(k % live.len().max(1)) {
                    let req = recvs[x].req.as_ref().unwrap();
                    e1.cancel_recv(req).unwrap();
                }
            }
            Op::Progress => {
                e1.progress().unwrap();
            }
            Op::SenderProgress => {
                e0.progress().unwrap();
                e0.take_finished(&mut ss, &mut sr);
                pending_sends -= ss.drain(..).count();
            }
        }
        harvest(&mut e1, &mut recvs, &msgs);
    }
    // Drain: the sender's held sends out, then ANY_TAG receives until every
    // message is taken and every receive has finished.
    let drain_at = ops.len();
    let mut spins = 0u64;
    loop {
        e0.progress().unwrap();
        e0.take_finished(&mut ss, &mut sr);
        pending_sends -= ss.drain(..).count();
        e1.progress().unwrap();
        harvest(&mut e1, &mut recvs, &msgs);
        let taken = recvs.iter().filter(|r| r.got.is_some()).count();
        let open = recvs.iter().filter(|r| r.req.is_some()).count();
        if taken == msgs.len() && pending_sends == 0 {
            // Nothing is left to match: every open receive cancels.
            for r in recvs.iter().filter(|r| r.req.is_some()) {
                assert!(
                    e1.cancel_recv(r.req.as_ref().unwrap()).unwrap(),
                    "no message left"
                );
            }
            harvest(&mut e1, &mut recvs, &msgs);
            assert!(
                recvs.iter().all(|r| r.req.is_none()),
                "a cancelled receive did not finish"
            );
            break;
        }
        let open_any = recvs
            .iter()
            .filter(|r| r.req.is_some() && r.tag.is_none())
            .count();
        if taken + open_any < msgs.len() {
            post(&mut e1, &mut recvs, &msgs, None, drain_at, How::OrDone);
        }
        spins += 1;
        assert!(
            spins < 1_000_000,
            "defer {mode}: drain does not finish: {taken} of {} taken, {open} open",
            msgs.len()
        );
    }
    // Every message exactly once, by a matching receive.
    let mut by_msg = vec![None; msgs.len()];
    for (x, r) in recvs.iter().enumerate() {
        if let Some(i) = r.got {
            assert!(!r.cancelled);
            assert!(by_msg[i].is_none(), "message {i} received twice");
            by_msg[i] = Some(x);
            assert!(
                matches(r.tag, msgs[i].0),
                "receive {x} got a message it does not match"
            );
        }
    }
    let by_msg: Vec<usize> = by_msg
        .into_iter()
        .enumerate()
        .map(|(i, x)| x.unwrap_or_else(|| panic!("message {i} never received")))
        .collect();
    // Receives are numbered in posting order (a drain receive after all).
    for (x, r) in recvs.iter().enumerate() {
        let Some(b) = r.got else { continue };
        for a in 0..b {
            if matches(r.tag, msgs[a].0) {
                assert!(
                    by_msg[a] < x,
                    "receive {x} got message {b} while the earlier message {a}, which it matches, \
                     went to the later receive {}",
                    by_msg[a]
                );
            }
        }
        for (y, older) in recvs[..x].iter().enumerate() {
            if older.cancelled || !matches(older.tag, msgs[b].0) {
                continue;
            }
            let og = older.got.unwrap();
            assert!(
                og < b,
                "receive {x} got message {b}, which the older pending receive {y} matches; \
                 {y} got {og}"
            );
        }
    }
    for p in &probes {
        let expect = (0..p.sent_before)
            .filter(|&i| matches(p.tag, msgs[i].0) && recvs[by_msg[i]].at > p.at)
            .map(|i| msgs[i])
            .next();
        assert_eq!(p.saw, expect, "probe at step {} (tag {:?})", p.at, p.tag);
    }
    let deferred = e1.counters().deferred_recvs;
    assert!(
        defer || deferred == 0,
        "deferred with TMX_SHMEM_TUNE=defer_recv off"
    );
    e0.finalize().unwrap();
    e1.finalize().unwrap();
    deferred
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn deferred_receives_follow_mpi_matching(ops in proptest::collection::vec(op(), 1..80)) {
        run(&ops, true);
        run(&ops, false);
    }
}

/// Heavy: the same with more cases (`cargo xtask ci`'s proptest step).
#[test]
#[ignore]
fn deferred_receives_follow_mpi_matching_heavy() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let deferred = std::cell::Cell::new(0u64);
    runner
        .run(&proptest::collection::vec(op(), 1..120), |ops| {
            deferred.set(deferred.get() + run(&ops, true));
            run(&ops, false);
            Ok(())
        })
        .unwrap();
    assert!(deferred.get() > 0, "no program deferred a receive");
    eprintln!("{} receives deferred in {cases} programs", deferred.get());
}
