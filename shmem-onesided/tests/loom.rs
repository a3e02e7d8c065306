#![cfg(tmx_shmem_loom)]
//! Loom models of the header ring and the prepost ring, on heap-backed
//! memory (`RingMem`, `PrepostMem`): the same code that runs on the node
//! segment, with `sync` switched to loom's atomics and cells.
//!
//! Run: `RUSTFLAGS="--cfg tmx_shmem_loom" LOOM_MAX_PREEMPTIONS=2 \
//!       cargo test -p shmem-onesided --test loom --release`
//!
//! Models (ids from shmem-transport-design.md §d.5):
//! - L1 `publish_then_consume`: header bytes read after the Acquire of `seq`
//!   are the ones written. Negative controls: `relaxed_publish_is_rejected`
//!   (a Relaxed `seq` publish) and `relaxed_consumer_release_is_rejected` (a
//!   Relaxed `consumed` publish) must make loom report a causality violation.
//! - L2 `wrap_around_fifo`: 2 slots, 5 messages: FIFO, no overwrite of an
//!   unconsumed slot, an old lap's `seq` never accepted.
//! - L3/L4 `batched_publication_no_stall`: consumer publishes every 2 (= N)
//!   messages and on empty polls; a retrying producer with a stale cached
//!   index never stalls and never overwrites.
//! - L10 `mutual_backpressure_blocking_sends`: 1-slot rings both ways, each
//!   side (3 messages each way) has a blocking send that drains its own inbound ring while the peer's ring is
//!   full: both finish, in order.
//! - `outbox_keeps_order_under_backpressure`: the local pending FIFO.
//! - prepost `claim_withdraw_race`: exactly one of claim and withdraw wins;
//!   a winning claim's data is visible at DONE.
//! - prepost `recycled_slot_never_claimed_torn`: a sender scanning while the
//!   receiver withdraws and reposts into the same slot never claims a torn or
//!   stale entry.
//! - L7 `gap_prepost_never_overtakes`: the MP_Lite gap with the phase
//!   counters. The receiver preposts a receive (count 0) while the sender
//!   sends two matching messages, each one either into a trusted prepost
//!   (`Phase::synced`) or counted and buffered; the receiver processes ring
//!   messages by withdrawing the prepost first (the offload model's delete)
//!   and applies its count after each. The receive must get the *first*
//!   message, every message exactly once. Negative control
//!   `gap_without_phase_is_rejected`: a sender that trusts every prepost
//!   lets the second message overtake the first, and loom must find it.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use shmem_onesided::prepost::{Claimer, Phase, PostState, Poster, Prepost, PrepostMem, Withdraw};
use shmem_onesided::ring::{Consumer, Header, Outbox, Producer, RingMem, Sent};

fn hdr(i: u32) -> Header {
    let mut h = Header {
        kind: 1,
        nbytes: i * 3,
        source: 1,
        tag: 100 + i,
        context: 7,
        ..Header::default()
    };
    h.set_inline(&[i as u8; 12]);
    h
}

fn check(h: &Header, i: u32) {
    assert_eq!(h.tag, 100 + i, "FIFO order");
    assert_eq!(
        (h.nbytes, h.context, h.source),
        (i * 3, 7, 1),
        "header bytes"
    );
    let (b, n) = h.inline_payload();
    assert_eq!(&b[..n], &[i as u8; 12], "inline bytes");
}

fn recv_all(mem: &RingMem, consumer: &mut Consumer, n: u32) {
    for i in 0..n {
        let h = loop {
            match consumer.poll(mem.view()) {
                Some(h) => break h,
                None => thread::yield_now(),
            }
        };
        check(&h, i);
    }
}

fn send_all(mem: &RingMem, n: u32) {
    let mut p = Producer::new();
    for i in 0..n {
        while p.try_push(mem.view(), &hdr(i)).is_err() {
            thread::yield_now();
        }
    }
}

#[test]
fn publish_then_consume() {
    loom::model(|| {
        let mem = Arc::new(RingMem::new(2));
        let m2 = mem.clone();
        let t = thread::spawn(move || send_all(&m2, 1));
        recv_all(&mem, &mut Consumer::new(1), 1);
        t.join().unwrap();
    });
}

/// Runs `f` (a loom model that must fail) and returns loom's panic message.
fn loom_rejects(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let res = std::panic::catch_unwind(f);
    let Err(payload) = res else {
        panic!("loom accepted a too-weak ordering: the model cannot be trusted");
    };
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Negative control: publishing `seq` with Relaxed lets the consumer read the
/// body without a happens-before edge; loom must report it.
#[test]
fn relaxed_publish_is_rejected() {
    let msg = loom_rejects(|| {
        loom::model(|| {
            let mem = Arc::new(RingMem::new(2));
            let m2 = mem.clone();
            let t = thread::spawn(move || {
                let mut p = Producer::new();
                p.try_push_relaxed_publish(m2.view(), &hdr(0)).unwrap();
            });
            recv_all(&mem, &mut Consumer::new(1), 1);
            t.join().unwrap();
        });
    });
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

/// Negative control: publishing the consumer index with Relaxed lets the
/// producer rewrite a slot the consumer is still reading; loom must report it.
#[test]
fn relaxed_consumer_release_is_rejected() {
    let msg = loom_rejects(|| {
        loom::model(|| {
            let mem = Arc::new(RingMem::new(1));
            let m2 = mem.clone();
            let t = thread::spawn(move || send_all(&m2, 2));
            let mut c = Consumer::new(1);
            for i in 0..2 {
                let h = loop {
                    match c.poll_relaxed_release(mem.view()) {
                        Some(h) => break h,
                        None => thread::yield_now(),
                    }
                };
                check(&h, i);
            }
            t.join().unwrap();
        });
    });
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

#[test]
fn wrap_around_fifo() {
    loom::model(|| {
        let mem = Arc::new(RingMem::new(2));
        let m2 = mem.clone();
        let t = thread::spawn(move || send_all(&m2, 5));
        recv_all(&mem, &mut Consumer::new(1), 5);
        t.join().unwrap();
    });
}

#[test]
fn batched_publication_no_stall() {
    loom::model(|| {
        let mem = Arc::new(RingMem::new(2));
        let m2 = mem.clone();
        let t = thread::spawn(move || send_all(&m2, 4));
        // Publishes only every 2 messages, or when a poll finds the ring empty.
        recv_all(&mem, &mut Consumer::new(2), 4);
        t.join().unwrap();
    });
}

#[test]
fn outbox_keeps_order_under_backpressure() {
    loom::model(|| {
        let mem = Arc::new(RingMem::new(1));
        let m2 = mem.clone();
        let t = thread::spawn(move || {
            let mut o = Outbox::new();
            let mut queued = 0u64;
            for i in 0..3 {
                if o.send(m2.view(), hdr(i)) == Sent::Queued {
                    queued += 1;
                }
            }
            // Once something queued, the later sends queued behind it.
            assert!(queued == 0 || o.backpressure_events() == 1);
            while o.flush(m2.view()) > 0 {
                thread::yield_now();
            }
        });
        recv_all(&mem, &mut Consumer::new(1), 3);
        t.join().unwrap();
    });
}

/// One side of L10: sends `n` headers with a *blocking* send (no local queue)
/// whose retry loop drains its own inbound ring into a local list.
fn blocking_peer(out: &RingMem, inb: &RingMem, n: u32) {
    let mut p = Producer::new();
    let mut c = Consumer::new(1);
    let mut got: Vec<Header> = Vec::new();
    for i in 0..n {
        while p.try_push(out.view(), &hdr(i)).is_err() {
            while let Some(h) = c.poll(inb.view()) {
                got.push(h);
            }
            thread::yield_now();
        }
    }
    while (got.len() as u32) < n {
        match c.poll(inb.view()) {
            Some(h) => got.push(h),
            None => thread::yield_now(),
        }
    }
    for (i, h) in got.iter().enumerate() {
        check(h, i as u32);
    }
}

#[test]
fn mutual_backpressure_blocking_sends() {
    loom::model(|| {
        let a_to_b = Arc::new(RingMem::new(1));
        let b_to_a = Arc::new(RingMem::new(1));
        let (x, y) = (a_to_b.clone(), b_to_a.clone());
        let t = thread::spawn(move || blocking_peer(&y, &x, 3));
        blocking_peer(&a_to_b, &b_to_a, 3);
        t.join().unwrap();
    });
}

fn pp(tag: u64, cookie: u64) -> Prepost {
    Prepost {
        tag,
        mask: u64::MAX,
        count: 1,
        capacity: 64,
        offset: 4096,
        cookie,
        flags: 0,
    }
}

#[test]
fn claim_withdraw_race() {
    loom::model(|| {
        let mem = Arc::new(PrepostMem::new(2));
        // The receive buffer the sender writes into on a successful claim.
        let rbuf = Arc::new(UnsafeCell::new(0u64));
        let mut poster = Poster::new();
        let idx = poster.post(mem.view(), &pp(5, 1)).unwrap();
        let (m2, b2) = (mem.clone(), rbuf.clone());
        let sender = thread::spawn(move || {
            let mut cl = Claimer::new();
            match cl.claim_first(m2.view(), |p| p.tag == 5) {
                Some(c) => {
                    assert_eq!((c.index, c.prepost), (0, pp(5, 1)));
                    // SAFETY: (test) the claim gives the sender the buffer
                    // until it marks the entry done.
                    b2.with_mut(|p| unsafe { *p = 0xfeed });
                    cl.complete(m2.view(), &c, 8);
                    true
                }
                None => false,
            }
        });
        let w = poster.withdraw(mem.view(), idx);
        let claimed = sender.join().unwrap();
        match w {
            Withdraw::Withdrawn => assert!(!claimed, "both claim and withdraw won"),
            Withdraw::Claimed | Withdraw::Done(_) => {
                assert!(claimed, "withdraw lost to nobody");
                let n = loop {
                    match poster.state(mem.view(), idx) {
                        PostState::Done(n) => break n,
                        PostState::Claimed => thread::yield_now(),
                        s => panic!("unexpected state {s:?}"),
                    }
                };
                assert_eq!(n, 8);
                // SAFETY: (test) DONE (Acquire) orders the sender's write first.
                assert_eq!(rbuf.with(|p| unsafe { *p }), 0xfeed);
            }
        }
    });
}

#[test]
fn recycled_slot_never_claimed_torn() {
    loom::model(|| {
        let mem = Arc::new(PrepostMem::new(1));
        let mut poster = Poster::new();
        let i0 = poster.post(mem.view(), &pp(10, 100)).unwrap();
        let m2 = mem.clone();
        let sender = thread::spawn(move || {
            let mut cl = Claimer::new();
            // Accepts either entry; whatever it claims must be consistent.
            let c = cl.claim_first(m2.view(), |p| p.tag == 10 || p.tag == 11)?;
            let want = if c.index == 0 {
                pp(10, 100)
            } else {
                pp(11, 101)
            };
            assert_eq!(c.prepost, want, "torn or stale prepost claimed");
            cl.complete(m2.view(), &c, 1);
            Some(c.index)
        });
        let first = poster.withdraw(mem.view(), i0);
        let reposted = if first == Withdraw::Withdrawn {
            Some(poster.post(mem.view(), &pp(11, 101)).unwrap())
        } else {
            None
        };
        let claimed = sender.join().unwrap();
        match (first, claimed) {
            (Withdraw::Withdrawn, Some(i)) => {
                assert_eq!(Some(i), reposted, "claimed a withdrawn entry")
            }
            (Withdraw::Withdrawn, None) => {}
            (_, Some(i)) => assert_eq!(i, 0),
            (_, None) => panic!("withdraw failed but nobody claimed"),
        }
    });
}

/// The sender of the gap model: messages 1 and 2 (tag 5), each into a
/// prepost if one matches and `trust` says so, otherwise counted and
/// buffered in the ring.
fn gap_sender(
    ring: &RingMem,
    pre: &PrepostMem,
    phase: &Phase,
    rbuf: &UnsafeCell<u64>,
    trust: impl Fn(&Phase) -> bool,
) {
    let mut cl = Claimer::new();
    let mut prod = Producer::new();
    for id in 1..=2u32 {
        if let Some(c) = cl.claim_first(pre.view(), |p| p.tag == 5 && trust(phase)) {
            // SAFETY: (test) the claim owns the receive buffer until DONE.
            rbuf.with_mut(|p| unsafe { *p = u64::from(id) });
            cl.complete(pre.view(), &c, u64::from(id));
            continue;
        }
        phase.count_message();
        let mut h = hdr(0);
        h.tag = id;
        while prod.try_push(ring.view(), &h).is_err() {
            thread::yield_now();
        }
    }
}

/// The receiver of the gap model (the endpoint's offload logic, reduced to
/// one receive): returns what the preposted receive got.
fn gap_receiver(ring: &RingMem, pre: &PrepostMem, phase: &Phase, rbuf: &UnsafeCell<u64>) -> u64 {
    let mut poster = Poster::new();
    phase.apply(0);
    let a = poster.post(pre.view(), &pp(5, 1)).unwrap();
    let mut consumer = Consumer::new(1);
    let (mut got, mut live, mut count, mut seen) = (None, true, 0u16, 0u32);
    let direct = |poster: &Poster| loop {
        match poster.state(pre.view(), a) {
            PostState::Done(w) => {
                // SAFETY: (test) DONE (Acquire) orders the sender's write.
                assert_eq!(rbuf.with(|p| unsafe { *p }), w, "direct data visible");
                break w;
            }
            PostState::Claimed => thread::yield_now(),
            s => panic!("unexpected state {s:?}"),
        }
    };
    loop {
        if live {
            if let PostState::Done(_) = poster.state(pre.view(), a) {
                got = Some(direct(&poster));
                live = false;
                seen += 1;
            }
        }
        if seen == 2 {
            break;
        }
        let Some(h) = consumer.poll(ring.view()) else {
            thread::yield_now();
            continue;
        };
        seen += 1;
        if got.is_none() {
            // The receive is the oldest match and the engine holds it:
            // delete it first (withdraw), as the offload model does.
            match poster.withdraw(pre.view(), a) {
                Withdraw::Withdrawn => got = Some(u64::from(h.tag)),
                Withdraw::Claimed | Withdraw::Done(_) => {
                    got = Some(direct(&poster));
                    seen += 1;
                }
            }
            live = false;
        }
        count += 1;
        phase.apply(count);
    }
    got.unwrap()
}

fn gap_model(trust: fn(&Phase) -> bool) {
    loom::model(move || {
        let ring = Arc::new(RingMem::new(2));
        let pre = Arc::new(PrepostMem::new(2));
        let phase = Arc::new(Phase::new());
        let rbuf = Arc::new(UnsafeCell::new(0u64));
        let (r2, p2, ph2, b2) = (ring.clone(), pre.clone(), phase.clone(), rbuf.clone());
        let sender = thread::spawn(move || gap_sender(&r2, &p2, &ph2, &b2, trust));
        let got = gap_receiver(&ring, &pre, &phase, &rbuf);
        sender.join().unwrap();
        assert_eq!(
            got, 1,
            "the preposted receive got a later message (MPI order)"
        );
    });
}

#[test]
fn gap_prepost_never_overtakes() {
    gap_model(Phase::synced);
}

/// Negative control: without the phase check the second message can take
/// the prepost that crossed the first (buffered) one.
#[test]
fn gap_without_phase_is_rejected() {
    let msg = loom_rejects(|| gap_model(|_| true));
    assert!(msg.contains("MPI order"), "unexpected failure: {msg}");
}
