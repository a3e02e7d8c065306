#![cfg(tmx_shmem_loom)]
//! Loom models of the header ring and the prepost ring, on heap-backed
//! memory (`RingMem`, `PrepostMem`): the same code that runs on the node
//! segment, with `sync` switched to loom's atomics and cells; of the
//! split-copy hand-off in a ring's control block; and of the RMA window
//! synchronization (`winsync`) on heap-allocated words.
//!
//! Run: `RUSTFLAGS="--cfg tmx_shmem_loom" LOOM_MAX_PREEMPTIONS=2 \
//!       cargo test -p shmem-onesided --test loom --release`
//!
//! Models (ids from shmem-transport-design.md §d.5):
//! - L1 `publish_then_consume`: header bytes read after the Acquire of `seq`
//!   are the ones written. Negative controls: `relaxed_publish_is_rejected`
//!   (a Relaxed `seq` publish) and `relaxed_consumer_release_is_rejected` (a
//!   Relaxed `consumed` publish) must make loom report a causality violation.
//! - L1b `inline_push_then_consume`: the same for inline messages written
//!   straight into their slot (`Producer::try_push_inline`), two through a
//!   one-slot ring.
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
//! - `win_fence_relaxed_arrive_is_rejected`: negative control of the fence
//!   counters (a Relaxed arrival).
//! - `win_region_table_never_torn`: a dynamic window's region table (a
//!   sequence lock) read while its owner moves an entry never accepts an
//!   address that only a torn mix of two states contains. Negative control
//!   `win_region_table_without_version_is_rejected`.
//! - L7 `gap_prepost_never_overtakes`: the MP_Lite gap with the phase
//!   counters. The receiver preposts a receive (count 0) while the sender
//!   sends two matching messages, each one either into a trusted prepost
//!   (`Phase::synced`) or counted (the ring's own counter, a plain store
//!   by its one producer) and buffered; the receiver processes ring
//!   messages by withdrawing the prepost first (the offload model's delete)
//!   and applies its count after each. The receive must get the *first*
//!   message, every message exactly once. Negative control
//!   `gap_without_phase_is_rejected`: a sender that trusts every prepost
//!   lets the second message overtake the first, and loom must find it.
//! - `win_lock_exclusive_mutual_exclusion`: two origins each take a
//!   `RwTicket` ticket, lock exclusively, increment the target's word and
//!   unlock (PUT + UNLOCK): no race, no lost update, the lock idle after.
//!   Negative control `win_lock_relaxed_release_is_rejected`
//!   (`release_exclusive_relaxed`) must make loom report a causality
//!   violation.
//! - `win_lock_shared_then_exclusive`: a reader thread against a writer that
//!   then reads again: the reader sees the written value exactly when its
//!   ticket is behind the writer's, and never races the store.
//! - `win_lock_two_readers_one_writer`: the same with two readers (three
//!   spinning threads), bounded to 1 preemption (tokio-rs/loom#53).
//! - `win_fence_counters_publish_puts`: two ranks put into each other's
//!   window, `arrive`/`arrived` (fence 1), read their own; fence 2 orders
//!   those reads before the next puts, fence 3 publishes them (counter
//!   reuse over three fences).
//! - `win_pscw_post_start_complete_wait`: two exposure epochs of post
//!   (`signal`) / start (`observed`) / put / complete / wait: the origin
//!   sees the target's store made before post, the target sees the put
//!   after wait. Negative control `win_pscw_relaxed_complete_is_rejected`
//!   (`RwTicket::signal_relaxed` as complete) must make loom report a
//!   causality violation.
//! - `split_handoff_each_byte_copied_once`: the split-copy hand-off
//!   (`ring::SplitWords`) between a CMA receiver, which offers its sender
//!   the second half of a two-word message, copies the first and then
//!   waits or withdraws, and an idle sender serving the offer: each word
//!   is copied exactly once and never concurrently, the sender reads the
//!   offer words the receiver wrote, it reuses its buffer only after the
//!   FIN, the receiver reads a complete message, and the ring is left
//!   `READY` or `IDLE`. Each test also checks that loom reached every
//!   outcome (read whole, shared with and without waiting, withdrawn,
//!   claimed). `split_handoff_sender_takes_ready_back`: the same with the
//!   sender's take-back of `READY` (`unready`) racing the offer;
//!   `split_handoff_failed_write`: a sender whose write fails after
//!   writing part of its half. Negative control
//!   `split_withdraw_by_store_is_rejected`
//!   (`SplitWords::poll_offer_withdraw_by_store`: the withdrawal as a load
//!   then a store, not a compare-exchange) must make loom report the two
//!   concurrent writes of the second half.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use shmem_onesided::prepost::{Claimer, Phase, PostState, Poster, Prepost, PrepostMem, Withdraw};
use shmem_onesided::ring::{
    Consumer, Header, InlineFields, Outbox, Producer, RingMem, Sent, SplitOffer, SplitPoll,
    SplitWords, SPLIT_IDLE, SPLIT_OFFERED, SPLIT_READY,
};
use shmem_onesided::winsync::{arrive, arrived, observed, signal, RegionTable, RwTicket, RW_WORDS};

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

/// The fields of message `i` for the direct inline pushes (as `hdr(i)`:
/// kind 1, source 1, tag 100 + i, context 7).
fn fields(i: u32) -> InlineFields {
    InlineFields {
        kind: 1,
        flags: 0,
        source: 1,
        tag: 100 + i,
        context: 7,
    }
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

/// L1b: an inline message written straight into its slot
/// (`try_push_inline`) is read whole after the Acquire of `seq`, on a
/// one-slot ring (the second push waits for the consumer's release).
#[test]
fn inline_push_then_consume() {
    loom::model(|| {
        let mem = Arc::new(RingMem::new(1));
        let m2 = mem.clone();
        let t = thread::spawn(move || {
            let mut p = Producer::new();
            for i in 0..2u32 {
                while p
                    .try_push_inline(m2.view(), fields(i), &[i as u8; 12])
                    .is_err()
                {
                    thread::yield_now();
                }
            }
        });
        let mut c = Consumer::new(1);
        for i in 0..2u32 {
            let h = loop {
                match c.poll(mem.view()) {
                    Some(h) => break h,
                    None => thread::yield_now(),
                }
            };
            assert_eq!((h.tag, h.context, h.source, h.nbytes), (100 + i, 7, 1, 12));
            let (b, n) = h.inline_payload();
            assert_eq!(&b[..n], &[i as u8; 12], "inline bytes");
        }
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

/// Continuation slots: a header plus a 2-slot tail ([`Producer::try_push_ext`])
/// interleaved with plain headers in a 4-slot ring, wrapping around: the
/// consumer reads every tail byte the producer wrote ([`Consumer::take_ext`])
/// and the producer never overwrites a tail the consumer is still reading.
#[test]
fn continuation_slots_wrap_around() {
    continuation_model(false);
}

/// [`continuation_slots_wrap_around`] with the direct inline push
/// ([`Producer::try_push_inline_ext`]: the header's fields and the first
/// 40 bytes written straight into the header slot, the rest copied into
/// the continuation slots, then `seq`).
#[test]
fn inline_continuation_slots_wrap_around() {
    continuation_model(true);
}

fn continuation_model(direct: bool) {
    loom::model(move || {
        let mem = Arc::new(RingMem::new(4));
        let m2 = mem.clone();
        let tail = |i: u32| -> Vec<u8> { (0..100).map(|k| (k as u32 * 7 + i) as u8).collect() };
        // The direct push's whole message: 40 inline bytes, then the tail.
        let whole = move |i: u32| -> Vec<u8> {
            let mut v = vec![i as u8; shmem_onesided::ring::INLINE_MAX];
            v.extend(tail(i));
            v
        };
        let t = thread::spawn(move || {
            let mut p = Producer::new();
            for i in 0..3 {
                if i % 2 == 0 && direct {
                    while p
                        .try_push_inline_ext(m2.view(), fields(i), &whole(i))
                        .is_err()
                    {
                        thread::yield_now();
                    }
                } else if i % 2 == 0 {
                    while p.try_push_ext(m2.view(), &hdr(i), &tail(i)).is_err() {
                        thread::yield_now();
                    }
                } else {
                    while p.try_push(m2.view(), &hdr(i)).is_err() {
                        thread::yield_now();
                    }
                }
            }
        });
        let mut c = Consumer::new(1);
        for i in 0..3 {
            let h = loop {
                match c.poll(mem.view()) {
                    Some(h) => break h,
                    None => thread::yield_now(),
                }
            };
            if i % 2 == 0 && direct {
                assert_eq!(h.tag, 100 + i, "FIFO order");
                assert_eq!((h.nbytes, h.context, h.source), (140, 7, 1), "header");
                let (b, n) = h.inline_payload();
                assert_eq!(&b[..n], &whole(i)[..n], "inline bytes");
            } else {
                check(&h, i);
            }
            if i % 2 == 0 {
                let mut got = vec![0u8; 100];
                assert!(c.take_ext(mem.view(), &mut got));
                assert_eq!(got, tail(i), "tail bytes");
            }
        }
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
    trust: impl Fn(&Phase, &RingMem) -> bool,
) {
    let mut cl = Claimer::new();
    let mut prod = Producer::new();
    for id in 1..=2u32 {
        if let Some(c) = cl.claim_first(pre.view(), |p| p.tag == 5 && trust(phase, ring)) {
            // SAFETY: (test) the claim owns the receive buffer until DONE.
            rbuf.with_mut(|p| unsafe { *p = u64::from(id) });
            cl.complete(pre.view(), &c, u64::from(id));
            continue;
        }
        ring.view().count_message();
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

fn gap_model(trust: fn(&Phase, &RingMem) -> bool) {
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
    gap_model(|phase, ring| phase.synced(|| ring.view().counted()));
}

/// Negative control: without the phase check the second message can take
/// the prepost that crossed the first (buffered) one.
#[test]
fn gap_without_phase_is_rejected() {
    let msg = loom_rejects(|| gap_model(|_, _| true));
    assert!(msg.contains("MPI order"), "unexpected failure: {msg}");
}

// ---------------------------------------------------------------------------
// RMA window synchronization (`winsync`): the data each protocol protects is
// an unsynchronized loom cell, so a missing happens-before edge between a
// store and a conflicting access is a causality violation.
// ---------------------------------------------------------------------------

/// One target's lock words (`next`, `write`, `read`) and one word of its
/// window memory.
struct LockedWin {
    words: [AtomicU64; RW_WORDS],
    data: UnsafeCell<u64>,
}

impl LockedWin {
    fn new() -> Arc<Self> {
        Arc::new(LockedWin {
            words: [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
            data: UnsafeCell::new(0),
        })
    }

    fn lock(&self) -> RwTicket<'_> {
        RwTicket::new(&self.words[0], &self.words[1], &self.words[2])
    }

    /// `MPI_Win_lock(EXCLUSIVE)`, a put that increments the word (a
    /// read-modify-write, so a lost update or a race shows), unlock with
    /// `release`.
    fn put_locked(&self, release: fn(&RwTicket<'_>)) {
        let l = self.lock();
        let t = l.ticket();
        while !l.try_exclusive(t) {
            thread::yield_now();
        }
        // SAFETY: (test) the exclusive hold orders every other access.
        self.data.with_mut(|p| unsafe { *p += 1 });
        release(&l);
    }

    /// `MPI_Win_lock(SHARED)` and a get: returns the ticket and the value.
    fn get_shared(&self) -> (u64, u64) {
        let l = self.lock();
        let t = l.ticket();
        while !l.try_shared(t) {
            thread::yield_now();
        }
        // SAFETY: (test) the shared hold excludes every writer.
        let v = self.data.with(|p| unsafe { *p });
        l.release_shared();
        (t, v)
    }
}

fn lock_exclusive_model(release: fn(&RwTicket<'_>)) {
    loom::model(move || {
        let win = LockedWin::new();
        let w2 = win.clone();
        let t = thread::spawn(move || w2.put_locked(release));
        win.put_locked(release);
        t.join().unwrap();
        // SAFETY: (test) the join orders the other origin's put.
        assert_eq!(win.data.with(|p| unsafe { *p }), 2, "lost update");
        assert!(win.lock().is_idle());
    });
}

/// PUT + UNLOCK from two origins under exclusive locks: mutual exclusion and
/// the first holder's store visible to the second.
#[test]
fn win_lock_exclusive_mutual_exclusion() {
    lock_exclusive_model(|l| l.release_exclusive());
}

/// Negative control: a writer releasing with Relaxed increments does not
/// publish its store; loom must report the next holder's access.
#[test]
fn win_lock_relaxed_release_is_rejected() {
    let msg = loom_rejects(|| lock_exclusive_model(|l| l.release_exclusive_relaxed()));
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

/// A reader thread against a writer that then reads again (two threads;
/// a third spinning thread makes loom's search explode): the reader sees
/// the written value exactly when its ticket is behind the writer's (FIFO
/// grant; the store visible through the release), never races the store,
/// and may share the lock with the writer's own later read.
#[test]
fn win_lock_shared_then_exclusive() {
    loom::model(|| {
        let win = LockedWin::new();
        let w2 = win.clone();
        let reader = thread::spawn(move || w2.get_shared());
        let l = win.lock();
        let wt = l.ticket();
        while !l.try_exclusive(wt) {
            thread::yield_now();
        }
        // SAFETY: (test) the exclusive hold orders every other access.
        win.data.with_mut(|p| unsafe { *p = 7 });
        l.release_exclusive();
        let (mt, mv) = win.get_shared();
        assert!(mt > wt);
        assert_eq!(mv, 7, "the writer's own later read");
        let (rt, rv) = reader.join().unwrap();
        let want = if rt > wt { 7 } else { 0 };
        assert_eq!(rv, want, "reader ticket {rt}, writer ticket {wt}");
        assert!(win.lock().is_idle());
    });
}

/// The way `adi` waits for a lock: spin on `may_enter` (no change to the
/// lock), then enter with `try_*`, which must then succeed. A reader and a
/// writer, each waiting that way: the writer's store is seen by a later
/// reader, and never half by an earlier one.
#[test]
fn win_lock_may_enter_then_enter() {
    loom::model(|| {
        let win = LockedWin::new();
        let w2 = win.clone();
        let reader = thread::spawn(move || {
            let l = w2.lock();
            let t = l.ticket();
            while !l.may_enter(t, false) {
                thread::yield_now();
            }
            assert!(l.try_shared(t), "may_enter said yes");
            // SAFETY: (test) the shared hold excludes every writer.
            let v = w2.data.with(|p| unsafe { *p });
            l.release_shared();
            (t, v)
        });
        let l = win.lock();
        let wt = l.ticket();
        while !l.may_enter(wt, true) {
            thread::yield_now();
        }
        assert!(l.try_exclusive(wt), "may_enter said yes");
        // SAFETY: (test) the exclusive hold orders every other access.
        win.data.with_mut(|p| unsafe { *p = 7 });
        l.release_exclusive();
        let (rt, rv) = reader.join().unwrap();
        assert_eq!(rv, if rt > wt { 7 } else { 0 }, "reader ticket {rt}");
        assert!(win.lock().is_idle());
    });
}

/// Two readers (one is the main thread) and a writer, all three spinning:
/// same property as `win_lock_shared_then_exclusive`, plus two readers
/// inside together. Bounded to 1 preemption whatever
/// `LOOM_MAX_PREEMPTIONS` says: with 2, loom's scheduler oscillates
/// between the two threads spinning on the third (tokio-rs/loom#53) and
/// the model exceeds its branch limit.
#[test]
fn win_lock_two_readers_one_writer() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    b.check(|| {
        let win = LockedWin::new();
        let (w2, w3) = (win.clone(), win.clone());
        let writer = thread::spawn(move || {
            let l = w2.lock();
            let t = l.ticket();
            while !l.try_exclusive(t) {
                thread::yield_now();
            }
            // SAFETY: (test) the exclusive hold orders every other access.
            w2.data.with_mut(|p| unsafe { *p = 7 });
            l.release_exclusive();
            t
        });
        let reader = thread::spawn(move || w3.get_shared());
        let (rt0, rv0) = win.get_shared();
        let wt = writer.join().unwrap();
        let (rt1, rv1) = reader.join().unwrap();
        for (rt, rv) in [(rt0, rv0), (rt1, rv1)] {
            let want = if rt > wt { 7 } else { 0 };
            assert_eq!(rv, want, "reader ticket {rt}, writer ticket {wt}");
        }
        assert!(win.lock().is_idle());
    });
}

/// `MPI_Win_lock(EXCLUSIVE)` as windows take it (no ticket: enter only when
/// the lock is idle), a put that increments the word, unlock.
fn put_locked_idle(win: &LockedWin, enter: fn(&RwTicket<'_>) -> Option<u64>) -> u64 {
    let l = win.lock();
    let t = loop {
        if let Some(t) = enter(&l) {
            break t;
        }
        thread::yield_now();
    };
    // SAFETY: (test) the exclusive hold orders every other access.
    win.data.with_mut(|p| unsafe { *p += 1 });
    l.release_exclusive();
    t
}

fn idle_writers_model(enter: fn(&RwTicket<'_>) -> Option<u64>) {
    loom::model(move || {
        let win = LockedWin::new();
        let w2 = win.clone();
        let t = thread::spawn(move || put_locked_idle(&w2, enter));
        put_locked_idle(&win, enter);
        t.join().unwrap();
        // SAFETY: (test) the join orders the other origin's put.
        assert_eq!(win.data.with(|p| unsafe { *p }), 2, "lost update");
        assert!(win.lock().is_idle());
    });
}

/// Two writers entering only when the lock is idle: mutual exclusion, the
/// first one's store visible to the second.
#[test]
fn win_lock_idle_writers_exclude() {
    idle_writers_model(|l| l.try_exclusive_idle());
}

/// Negative control: entering on a `Relaxed` load of the release word does
/// not see the previous holder's store; loom must report it.
#[test]
fn win_lock_idle_writer_relaxed_is_rejected() {
    let msg = loom_rejects(|| idle_writers_model(|l| l.try_exclusive_idle_relaxed()));
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

/// A reader (ticket) against a writer entering only when idle: the reader
/// sees the store exactly when its ticket comes after the writer's, never a
/// race.
#[test]
fn win_lock_reader_and_idle_writer() {
    loom::model(|| {
        let win = LockedWin::new();
        let w2 = win.clone();
        let reader = thread::spawn(move || w2.get_shared());
        let l = win.lock();
        let wt = loop {
            if let Some(t) = l.try_exclusive_idle() {
                break t;
            }
            thread::yield_now();
        };
        // SAFETY: (test) the exclusive hold orders every other access.
        win.data.with_mut(|p| unsafe { *p = 7 });
        l.release_exclusive();
        let (rt, rv) = reader.join().unwrap();
        assert_eq!(rv, if rt > wt { 7 } else { 0 }, "reader ticket {rt}");
        assert!(win.lock().is_idle());
    });
}

/// One rank of the fence model: its arrival word and its window word.
struct FenceRank {
    word: AtomicU64,
    data: UnsafeCell<u64>,
}

/// `MPI_Win_fence` number `epoch`: arrive, then wait for the peer.
fn fence(me: &FenceRank, peer: &FenceRank, epoch: u64) {
    arrive(&me.word, epoch);
    while !arrived(&peer.word, epoch) {
        thread::yield_now();
    }
}

/// Rank `id`'s program: put, fence 1, read own window; fence 2 (ends the
/// reads before the next puts); put again, fence 3, read.
fn fence_rank(ranks: &[FenceRank; 2], id: usize) {
    let (me, peer) = (&ranks[id], &ranks[1 - id]);
    let id = id as u64;
    for (round, epoch) in [(1u64, 1u64), (2, 3)] {
        // SAFETY: (test) the previous fence orders the peer's reads of its
        // window before this put.
        peer.data.with_mut(|p| unsafe { *p = 10 * round + id });
        fence(me, peer, epoch);
        // SAFETY: (test) the fence orders the peer's put before this read.
        let got = me.data.with(|p| unsafe { *p });
        assert_eq!(got, 10 * round + (1 - id), "peer's put in round {round}");
        if round == 1 {
            fence(me, peer, 2);
        }
    }
}

/// Negative control: a fence whose arrival is a Relaxed store does not
/// publish the put; loom must report the read of the peer's window.
#[test]
fn win_fence_relaxed_arrive_is_rejected() {
    let msg = loom_rejects(|| {
        loom::model(|| {
            let mk = || FenceRank {
                word: AtomicU64::new(0),
                data: UnsafeCell::new(0),
            };
            let ranks = Arc::new([mk(), mk()]);
            let r2 = ranks.clone();
            let t = thread::spawn(move || {
                let (me, peer) = (&r2[1], &r2[0]);
                // SAFETY: (test) deliberately unsynchronized by the weak fence.
                peer.data.with_mut(|p| unsafe { *p = 11 });
                shmem_onesided::winsync::arrive_relaxed(&me.word, 1);
                while !arrived(&peer.word, 1) {
                    thread::yield_now();
                }
            });
            let (me, peer) = (&ranks[0], &ranks[1]);
            arrive(&me.word, 1);
            while !arrived(&peer.word, 1) {
                thread::yield_now();
            }
            // SAFETY: (test) the read loom must flag.
            let got = me.data.with(|p| unsafe { *p });
            assert_eq!(got, 11);
            t.join().unwrap();
        });
    });
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

/// Fence = PROC_SYNC with MEM_SYNC: each rank's put into the other's window
/// is visible after the fence, and the counters are reused over three
/// fences (the middle one orders a rank's reads before the peer's next put).
#[test]
fn win_fence_counters_publish_puts() {
    loom::model(|| {
        let mk = || FenceRank {
            word: AtomicU64::new(0),
            data: UnsafeCell::new(0),
        };
        let ranks = Arc::new([mk(), mk()]);
        let r2 = ranks.clone();
        let t = thread::spawn(move || fence_rank(&r2, 1));
        fence_rank(&ranks, 0);
        t.join().unwrap();
    });
}

/// A PSCW pair: the origin's `post` word (bumped by the target), the
/// target's `complete` word (bumped by the origin) and the target's window.
struct Pscw {
    post: AtomicU64,
    complete: AtomicU64,
    data: UnsafeCell<u64>,
}

/// Origin: start (wait for post `e`), get the target's value, put, complete.
fn pscw_origin(s: &Pscw, epochs: u64, complete: fn(&AtomicU64)) {
    for e in 0..epochs {
        while !observed(&s.post, e) {
            thread::yield_now();
        }
        // SAFETY: (test) the post (Acquire) orders the target's store.
        let v = s.data.with(|p| unsafe { *p });
        assert_eq!(v, 100 + e, "origin saw the target's store before post {e}");
        // SAFETY: (test) as above; the target does not touch its window
        // until it waits for this complete.
        s.data.with_mut(|p| unsafe { *p = 200 + e });
        complete(&s.complete);
    }
}

/// Target: store, post, wait for complete `e`, read the origin's put.
fn pscw_target(s: &Pscw, epochs: u64) {
    for e in 0..epochs {
        // SAFETY: (test) the previous wait orders the origin's accesses.
        s.data.with_mut(|p| unsafe { *p = 100 + e });
        signal(&s.post);
        while !observed(&s.complete, e) {
            thread::yield_now();
        }
        // SAFETY: (test) the complete (Acquire) orders the origin's put.
        let v = s.data.with(|p| unsafe { *p });
        assert_eq!(v, 200 + e, "origin's put in epoch {e}");
    }
}

fn pscw_model(epochs: u64, complete: fn(&AtomicU64)) {
    loom::model(move || {
        let s = Arc::new(Pscw {
            post: AtomicU64::new(0),
            complete: AtomicU64::new(0),
            data: UnsafeCell::new(0),
        });
        let s2 = s.clone();
        let t = thread::spawn(move || pscw_origin(&s2, epochs, complete));
        pscw_target(&s, epochs);
        t.join().unwrap();
    });
}

/// Post / start / complete / wait over two exposure epochs: the origin sees
/// the target's store made before post, the target sees the origin's put
/// after wait, and the counters are reused.
#[test]
fn win_pscw_post_start_complete_wait() {
    pscw_model(2, signal);
}

/// Negative control: a Relaxed complete does not publish the origin's put.
#[test]
fn win_pscw_relaxed_complete_is_rejected() {
    let msg = loom_rejects(|| pscw_model(1, RwTicket::signal_relaxed));
    assert!(
        msg.contains("Causality violation"),
        "rejected for another reason: {msg}"
    );
}

/// The region table of a dynamic window (sequence lock, one writer): the
/// owner moves one entry from `[0x1000, 0x1010)` to `[0x2000, 0x3000)`
/// while an origin checks an address that neither state contains but a
/// torn mix of them (`0x1000` with `0x1000` bytes) would. A read the
/// version check accepts is never torn.
fn region_model(checked: bool) {
    loom::model(move || {
        let words: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
        let w2 = words.clone();
        let owner = thread::spawn(move || {
            let t = RegionTable::new(&w2).unwrap();
            t.set(0, 0x1000, 0x10);
            t.set(0, 0x2000, 0x1000);
        });
        let t = RegionTable::new(&words).unwrap();
        loop {
            let inside = if checked {
                match t.contains(0x1100, 8) {
                    Some(v) => v,
                    None => {
                        thread::yield_now();
                        continue;
                    }
                }
            } else {
                t.contains_ignoring_version(0x1100, 8)
            };
            assert!(!inside, "a torn region accepted an access");
            break;
        }
        owner.join().unwrap();
        assert_eq!(t.contains(0x2ff8, 8), Some(true));
        assert_eq!(t.contains(0x1000, 8), Some(false));
    });
}

#[test]
fn win_region_table_never_torn() {
    region_model(true);
}

/// Negative control: without the version check loom finds the torn read.
#[test]
fn win_region_table_without_version_is_rejected() {
    let msg = loom_rejects(|| region_model(false));
    assert!(
        msg.contains("torn region"),
        "rejected for another reason: {msg}"
    );
}

// ---------------------------------------------------------------------------
// Split copies (`ring::SplitWords`): a CMA receiver offers its sender the
// second half of a message. The two buffers are unsynchronized loom cells,
// standing for `process_vm_readv`/`process_vm_writev`: the receiver reads
// the sender's buffer (its own half, and the rest after a withdrawal or a
// failed write), the sender reads it and writes the receiver's buffer
// after a claim, and reuses its buffer once it sees the FIN.
// ---------------------------------------------------------------------------

/// What a CMA sender and its receiver share in the split model.
struct SplitPair {
    /// Their ring (only its control block's split words are used).
    ring: RingMem,
    /// The sender's buffer: a message of two words.
    src: [UnsafeCell<u64>; 2],
    /// The receiver's buffer.
    dst: [UnsafeCell<u64>; 2],
    /// The receiver's FIN (a ring message in the endpoint: a Release
    /// publish and an Acquire poll).
    fin: AtomicBool,
    /// Whole copies of the second word, by either side.
    copies: AtomicU64,
}

/// The message (the sender's buffer until the FIN).
const SPLIT_MSG: [u64; 2] = [0x1111, 0x2222];
/// The send's request id, as the receiver names it in its offer.
const SPLIT_ID: u64 = 42;

/// What the sender does besides serving offers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SplitSender {
    /// Every pass is idle: it serves (`serve_splits`).
    Serve,
    /// After its first pass it copies a message of its own, taking its
    /// `READY` back first (`unready_splits`), then serves again.
    Unready,
    /// Its write fails after writing part of the destination.
    Fail,
}

/// `process_vm_readv` of word `i` of the sender's buffer into the
/// receiver's.
fn split_copy(p: &SplitPair, i: usize) {
    // SAFETY: (test) the sender writes its buffer only after the FIN.
    let v = p.src[i].with(|s| unsafe { *s });
    // SAFETY: (test) the hand-off gives each word to one side at a time.
    p.dst[i].with_mut(|d| unsafe { *d = v });
}

/// The receiver's side (`Endpoint::split_read`), withdrawing with `poll`.
/// Returns how the hand-off went and the message as the receive's caller
/// then reads it from its buffer.
fn split_receiver(
    p: &SplitPair,
    poll: fn(&SplitWords<'_>) -> SplitPoll,
) -> (&'static str, [u64; 2]) {
    let w = p.ring.view().split();
    let offer = SplitOffer {
        id: SPLIT_ID,
        addr: 1,
        len: 1,
        start: 1,
    };
    let offered = w.offer(offer);
    split_copy(p, 0);
    let (mut how, mut shared) = ("whole", false);
    if offered {
        let mut waited = false;
        how = loop {
            match poll(&w) {
                SplitPoll::Done if waited => break "shared after waiting",
                SplitPoll::Done => break "shared",
                SplitPoll::Claimed => {
                    waited = true;
                    thread::yield_now();
                }
                SplitPoll::Withdrawn => break "withdrawn",
                SplitPoll::Failed => break "failed",
            }
        };
        shared = how.starts_with("shared");
        w.release(shared);
    }
    if !shared {
        split_copy(p, 1);
        p.copies.fetch_add(1, Ordering::Relaxed);
    }
    p.fin.store(true, Ordering::Release);
    // SAFETY: (test) the hand-off is over: `DONE` (Acquire) ordered the
    // sender's write, or the receiver wrote the word itself.
    let got = p.dst.each_ref().map(|c| c.with(|d| unsafe { *d }));
    (how, got)
}

/// The sender's side: idle progress passes (`Endpoint::serve_splits`)
/// until the FIN, then it reuses its buffer. Returns whether it claimed
/// the offer.
fn split_sender(p: &SplitPair, plan: SplitSender) -> bool {
    let w = p.ring.view().split();
    // The first pass on a fresh ring: `serve_splits` loads the state
    // first, which can only be `IDLE` here (the receiver never moves the
    // state out of `IDLE`), so the model goes straight to the
    // compare-exchange. With that load, the `Unready` variant needs a
    // third preemption to reach a receiver waiting on a claim.
    assert!(w.mark_ready());
    if plan == SplitSender::Unready {
        w.unready();
    }
    let mut claimed = false;
    loop {
        match w.state() {
            SPLIT_IDLE => {
                w.mark_ready();
            }
            SPLIT_OFFERED => {
                if let Some(o) = w.claim() {
                    claimed = true;
                    let want = (SPLIT_ID, 1, 1, 1);
                    assert_eq!((o.id, o.addr, o.len, o.start), want, "offer words");
                    let (from, to) = (o.start as usize, o.addr as usize);
                    if plan == SplitSender::Fail {
                        // SAFETY: (test) the claim gives the sender this
                        // word until DONE/FAILED.
                        p.dst[to].with_mut(|d| unsafe { *d = 0xbad });
                        w.complete(false);
                    } else {
                        // SAFETY: (test) its own buffer, reused only after
                        // the FIN.
                        let v = p.src[from].with(|s| unsafe { *s });
                        // SAFETY: (test) the claim gives the sender this
                        // word until DONE/FAILED.
                        p.dst[to].with_mut(|d| unsafe { *d = v });
                        p.copies.fetch_add(1, Ordering::Relaxed);
                        w.complete(true);
                    }
                }
            }
            _ => {}
        }
        if p.fin.load(Ordering::Acquire) {
            break;
        }
        thread::yield_now();
    }
    for s in &p.src {
        // SAFETY: (test) after the FIN the buffer is the sender's again.
        s.with_mut(|s| unsafe { *s = 0xdead });
    }
    claimed
}

/// Runs the split model; returns the outcomes it reached (the receiver's,
/// and "claimed" when the sender claimed), so that a test can check that
/// loom explored each of them.
fn split_model(
    plan: SplitSender,
    poll: fn(&SplitWords<'_>) -> SplitPoll,
) -> std::collections::BTreeSet<&'static str> {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let seen2 = seen.clone();
    loom::model(move || {
        let p = Arc::new(SplitPair {
            ring: RingMem::new(1),
            src: SPLIT_MSG.map(UnsafeCell::new),
            dst: [UnsafeCell::new(0), UnsafeCell::new(0)],
            fin: AtomicBool::new(false),
            copies: AtomicU64::new(0),
        });
        let p2 = p.clone();
        // The sender is the main thread. Spawned and starting with a load
        // of the state, its `READY` never preceded the receiver's first
        // load, whatever the preemption bound: loom's DPOR tracks one
        // last access per atomic, and the sender's own load hid the race
        // of its compare-exchange with the receiver's load
        // (tokio-rs/loom#166, #392). The outcome checks in the tests
        // catch such blind spots.
        let receiver = thread::spawn(move || split_receiver(&p2, poll));
        let claimed = split_sender(&p, plan);
        let (how, got) = receiver.join().unwrap();
        assert_eq!(got, SPLIT_MSG, "the receiver's buffer");
        assert_eq!(
            p.copies.load(Ordering::Relaxed),
            1,
            "the second half copied twice (or never)"
        );
        let state = p.ring.view().split().state();
        assert!(
            state == SPLIT_READY || state == SPLIT_IDLE,
            "hand-off left in state {state}"
        );
        let mut seen = seen2.lock().unwrap();
        seen.insert(how);
        if claimed {
            seen.insert("claimed");
        }
    });
    let seen = seen.lock().unwrap().clone();
    seen
}

/// The split hand-off with an idle sender: whether the sender claims the
/// offer before the receiver finishes its half or not, each word of the
/// message is copied exactly once, the sender writes only after a claim
/// and reads the offer words the receiver wrote, the sender's buffer is
/// not reused before the receiver's last read of it (the FIN), and the
/// ring is `READY` or `IDLE` for the next message.
#[test]
fn split_handoff_each_byte_copied_once() {
    let seen = split_model(SplitSender::Serve, |w| w.poll_offer());
    assert_eq!(seen, SERVED.into(), "outcomes loom explored");
}

/// What loom must reach with a sender that serves every offer it sees.
const SERVED: [&str; 5] = [
    "claimed",
    "shared",
    "shared after waiting",
    "whole",
    "withdrawn",
];

/// The same with a sender that takes its `READY` back at once (a copy of
/// its own, `unready_splits`) and then serves again: the take-back races
/// the offer.
#[test]
fn split_handoff_sender_takes_ready_back() {
    let seen = split_model(SplitSender::Unready, |w| w.poll_offer());
    assert_eq!(seen, SERVED.into(), "outcomes loom explored");
}

/// The same with a sender whose write fails after writing part of its
/// half: the receiver copies that half after `FAILED`, over the partial
/// write and never concurrently with it.
#[test]
fn split_handoff_failed_write() {
    let seen = split_model(SplitSender::Fail, |w| w.poll_offer());
    assert_eq!(
        seen,
        ["claimed", "failed", "whole", "withdrawn"].into(),
        "outcomes loom explored"
    );
}

/// Negative control: a withdrawal that stores `WITHDRAWN` after the load
/// that saw `OFFERED` (not a compare-exchange) lets the sender claim in
/// between, so both sides write the second half; loom must report it.
#[test]
fn split_withdraw_by_store_is_rejected() {
    let msg = loom_rejects(|| {
        split_model(SplitSender::Serve, |w| w.poll_offer_withdraw_by_store());
    });
    assert!(
        msg.contains("Causality violation: Concurrent write accesses to `UnsafeCell`"),
        "rejected for another reason: {msg}"
    );
}
