//! In-process tests of pipelined large messages (local ranks are threads,
//! each with its own mapping of the real segment): messages above
//! `TMX_SHMEM_TUNE=pipeline_min` go as chunks through the eager area, held in
//! the sender's area until a receive is known, copied straight into a
//! blocked `recv`'s buffer when they are bound to match it. Small eager
//! areas, chunks and rings force backpressure in the middle of messages.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use shmem_onesided::{CmaMode, Config, Endpoint, Node, SendMode};

use std::sync::{Arc, Barrier};
use std::time::Duration;
use tm_proto::{MatchSpec, Source, Tag};

mod common;

fn job(name: &str) -> String {
    common::job("pl", name)
}

/// A 64 KiB eager area, 4 KiB chunks, messages above 8 KiB pipelined
/// (above 64 KiB − 64 B: fragmented), 4-slot rings, no CMA.
fn pcfg() -> Config {
    Config {
        ring_slots: 4,
        heap_bytes: 1 << 20,
        eager_bytes: 64 << 10,
        cma: CmaMode::Off,
        pipeline_min: 8 << 10,
        pipeline_chunk: 4 << 10,
        attach_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

/// [`pcfg`] with a 16 KiB eager area (three chunks of 4032 B fit) and
/// 2-slot rings: a sender stalls in the middle of every pipelined message.
fn tiny() -> Config {
    Config {
        ring_slots: 2,
        eager_bytes: 16 << 10,
        ..pcfg()
    }
}

/// Runs `f(rank, endpoint)` on `size` threads over one real segment and
/// checks that nothing is left in `/dev/shm`.
fn ranks<T: Send + 'static>(
    name: &str,
    size: u32,
    cfg: Config,
    f: impl Fn(u32, Endpoint) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    common::endpoint_ranks(job(name), size, cfg, f)
}

fn spec(source: Option<u32>, tag: Option<u32>) -> MatchSpec {
    MatchSpec {
        context_id: 6,
        source: source.map_or(Source::Any, Source::Rank),
        tag: tag.map_or(Tag::Any, Tag::Value),
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as usize * 131 + i * 7 + i / 4096) as u8)
        .collect()
}

/// What ranks 1 and 2 send to rank 0, in order: `(tag, length, sync)`.
/// Small (eager, inline), pipelined (8 KiB < len ≤ 64 KiB − 64) and
/// fragmented (larger than the eager area) messages interleaved.
const PLAN: &[(u32, usize, bool)] = &[
    (1, 100, false),
    (2, 30_000, false),
    (1, 8, false),
    (3, 50_000, true),
    (2, 200_000, false),
    (4, 20_000, false),
    (1, 9_000, true),
    (5, 0, false),
];

/// Two senders interleave small, pipelined, fragmented and synchronous
/// messages; the receiver takes them with `ANY_SOURCE`/`ANY_TAG` and exact
/// receives into buffers that are sometimes too short (guard bytes after
/// the slice): each source stays FIFO, every receive gets exactly
/// `min(msg_len, capacity)` bytes of the right message and reports
/// `msg_len`, nothing is written past the buffer.
#[test]
fn pipelined_interleaved_any_source_truncation() {
    let out = ranks("mix", 3, pcfg(), |me, mut ep| {
        if me != 0 {
            for (i, &(tag, len, sync)) in PLAN.iter().enumerate() {
                let data = pattern(me * 100 + i as u32, len);
                if sync {
                    ep.ssend(0, tag, 6, &data).unwrap();
                } else {
                    ep.send(0, tag, 6, &data).unwrap();
                }
            }
            return ep.finalize().unwrap();
        }
        let mut next = [0usize; 3];
        let mut received = 0;
        let mut k = 0u32;
        while received < 2 * PLAN.len() {
            k += 1;
            // Alternate: ANY_SOURCE into a 16 KiB buffer (truncates the
            // large ones), exact source into a buffer as large as the
            // largest message, exact source into 25 000 bytes.
            let (src, cap) = match k % 3 {
                0 => (None, 16 << 10),
                1 => (Some(1 + (k / 3) % 2), 200_000),
                _ => (Some(1 + (k / 3 + 1) % 2), 25_000),
            };
            if let Some(s) = src {
                if next[s as usize] == PLAN.len() {
                    continue;
                }
            }
            let mut buf = vec![0xeeu8; cap + 64];
            let st = ep.recv(spec(src, None), &mut buf[..cap]).unwrap();
            let s = st.source as usize;
            assert!(s == 1 || s == 2, "{st:?}");
            let i = next[s];
            next[s] += 1;
            received += 1;
            let (tag, len, _) = PLAN[i];
            assert_eq!((st.tag, st.msg_len), (tag, len), "source {s} message {i}");
            assert_eq!(st.len, len.min(cap), "source {s} message {i}");
            let want = pattern(s as u32 * 100 + i as u32, len);
            assert!(buf[..st.len] == want[..st.len], "source {s} message {i}");
            // MPI: only the message's bytes are modified.
            assert!(
                buf[st.len..].iter().all(|&b| b == 0xee),
                "written past the message (source {s} message {i})"
            );
        }
        ep.finalize().unwrap()
    });
    assert_eq!(out[0].received, 2 * PLAN.len() as u64, "{}", out[0]);
    assert!(out[0].truncated > 0, "{}", out[0]);
    for c in &out[1..] {
        assert_eq!(c.pipelined_sends, 4, "{c}");
        assert_eq!(c.fragmented_sends, 1, "{c}");
        assert_eq!(c.sync_sends, 2, "{c}");
    }
}

/// The receive is posted after the first chunks arrived (the receiver took
/// them in an `iprobe` pass while the sender was stalled on its full eager
/// area): the message still lands whole in the receive buffer, bound to it
/// for the rest of its chunks; an `irecv` posted the same way and a receive
/// of a message that arrived whole before it was posted get theirs too.
#[test]
fn receive_posted_after_first_chunk() {
    let bar = Arc::new(Barrier::new(2));
    let out = ranks("late", 2, tiny(), move |me, mut ep| {
        let lens = [40_000usize, 60_000, 12_000];
        if me == 1 {
            let reqs: Vec<_> = lens
                .iter()
                .enumerate()
                .map(|(i, &l)| {
                    ep.isend(0, i as u32, 6, pattern(i as u32, l), SendMode::Standard)
                        .unwrap()
                })
                .collect();
            // The first chunks are published (the rest waits for space).
            bar.wait();
            for r in reqs {
                ep.wait_send(r).unwrap();
            }
            return ep.finalize().unwrap();
        }
        bar.wait();
        // One pass: the first chunks of message 0 arrive, nothing matches.
        assert_eq!(ep.iprobe(spec(Some(1), None)).unwrap(), None);
        let mut buf = vec![0u8; 40_000];
        let st = ep.recv(spec(Some(1), Some(0)), &mut buf).unwrap();
        assert_eq!((st.len, st.msg_len), (40_000, 40_000));
        assert!(buf == pattern(0, 40_000));
        let req = ep.irecv(spec(Some(1), Some(1)), vec![0u8; 70_000]).unwrap();
        let (st, v) = ep.wait(req).unwrap();
        assert_eq!((st.len, st.msg_len), (60_000, 60_000));
        assert!(v[..60_000] == pattern(1, 60_000)[..]);
        // Message 2 arrives whole (probe), then is received.
        let st = ep.probe(spec(Some(1), Some(2))).unwrap();
        assert_eq!(st.msg_len, 12_000);
        let mut b2 = vec![0u8; 12_000];
        ep.recv(spec(Some(1), Some(2)), &mut b2).unwrap();
        assert!(b2 == pattern(2, 12_000));
        ep.finalize().unwrap()
    });
    assert_eq!(out[0].received, 3, "{}", out[0]);
    assert!(out[0].pipelined_in_place >= 1, "{}", out[0]);
    // 40 000 and 60 000 B exceed the 16 KiB eager area: fragmented.
    assert_eq!(
        (out[1].pipelined_sends, out[1].fragmented_sends),
        (1, 2),
        "{}",
        out[1]
    );
}

/// A synchronous pipelined send completes only once the receiver matched
/// it: it has arrived whole (the probe sees it) and is still not complete;
/// the receive completes it. A blocking `ssend` into a receive already
/// blocked (copied in place) completes too.
#[test]
fn pipelined_ssend_completes_only_when_matched() {
    let bar = Arc::new(Barrier::new(2));
    // 16 ring slots: all ten chunks of the first message go out at once.
    let c = Config {
        ring_slots: 16,
        ..pcfg()
    };
    ranks("sync", 2, c, move |me, mut ep| {
        if me == 1 {
            let req = ep
                .isend(0, 7, 6, pattern(7, 40_000), SendMode::Synchronous)
                .unwrap();
            bar.wait(); // all chunks published (the area holds them)
            bar.wait(); // the receiver has probed it
            for _ in 0..200 {
                assert!(!ep.test_send(&req).unwrap(), "completed before matched");
            }
            bar.wait();
            assert_eq!(ep.wait_send(req).unwrap().unwrap(), pattern(7, 40_000));
            std::thread::sleep(Duration::from_millis(50));
            ep.ssend(0, 8, 6, &pattern(8, 30_000)).unwrap();
            let c = ep.finalize().unwrap();
            assert_eq!((c.sync_sends, c.pipelined_sends), (2, 2), "{c}");
            return;
        }
        bar.wait();
        let st = ep.probe(spec(Some(1), Some(7))).unwrap();
        assert_eq!(st.msg_len, 40_000);
        bar.wait();
        bar.wait();
        let mut buf = vec![0u8; 40_000];
        ep.recv(spec(Some(1), Some(7)), &mut buf).unwrap();
        assert!(buf == pattern(7, 40_000));
        // Posted before the sender starts: bound, copied in place.
        let mut b2 = vec![0u8; 30_000];
        let st = ep.recv(spec(Some(1), Some(8)), &mut b2).unwrap();
        assert_eq!(st.len, 30_000);
        assert!(b2 == pattern(8, 30_000));
        let c = ep.finalize().unwrap();
        assert_eq!(c.sync_acks, 2, "{c}");
        assert_eq!(c.pipelined_in_place, 1, "{c}");
    });
}

/// Both ranks send pipelined and fragmented messages to each other with
/// blocking sends before either receives, through a 16 KiB eager area and
/// 2-slot rings (each sender stalls in the middle of every message), then
/// nonblocking owned and borrowed ones: everything arrives, in order.
#[test]
fn tiny_eager_area_mutual_pipelined_flood() {
    ranks("flood", 2, tiny(), |me, mut ep| {
        let peer = 1 - me;
        let lens = [10_000usize, 50_000, 12_345, 9_000, 30_000];
        for (i, &l) in lens.iter().enumerate() {
            ep.send(peer, i as u32, 6, &pattern(me * 10 + i as u32, l))
                .unwrap();
        }
        let owned = ep
            .isend(peer, 10, 6, pattern(me + 50, 20_000), SendMode::Standard)
            .unwrap();
        let second = pattern(me + 60, 33_000);
        let borrowed = ep
            .isend_borrowed(peer, 11, 6, &second, SendMode::Standard)
            .unwrap();
        for (i, &l) in lens.iter().enumerate() {
            let mut buf = vec![0u8; l];
            let st = ep.recv(spec(Some(peer), None), &mut buf).unwrap();
            assert_eq!((st.tag, st.len), (i as u32, l));
            assert!(buf == pattern(peer * 10 + i as u32, l), "message {i}");
        }
        let mut b = vec![0u8; 33_000];
        let st = ep.recv(spec(Some(peer), Some(11)), &mut b).unwrap();
        assert_eq!(st.len, 33_000);
        assert!(b == pattern(peer + 60, 33_000));
        let st = ep.recv(spec(Some(peer), Some(10)), &mut b).unwrap();
        assert_eq!(st.len, 20_000);
        assert!(b[..20_000] == pattern(peer + 50, 20_000)[..]);
        assert_eq!(
            ep.wait_send(owned).unwrap().unwrap(),
            pattern(me + 50, 20_000)
        );
        assert_eq!(ep.wait_send(borrowed).unwrap(), None);
        let c = ep.finalize().unwrap();
        assert_eq!(c.received, 7, "{c}");
        assert_eq!((c.pipelined_sends, c.fragmented_sends), (3, 4), "{c}");
    });
}

/// An older posted `irecv` that matches takes the pipelined message, not the
/// blocked `recv` posted after it (the message is never copied into the
/// later receive's buffer); the next message goes to the `recv`. The same
/// with an `ANY_SOURCE` blocked receive while two senders send: whatever
/// it gets, only that message's bytes are in its buffer.
#[test]
fn older_irecv_and_any_source_are_never_bypassed() {
    let bar = Arc::new(Barrier::new(3));
    ranks("older", 3, pcfg(), move |me, mut ep| {
        if me != 0 {
            bar.wait(); // the receives are posted
            if me == 1 {
                ep.send(0, 9, 6, &pattern(90, 30_000)).unwrap();
                ep.send(0, 9, 6, &pattern(91, 20_000)).unwrap();
                // The last chunk may still be queued locally (full ring).
                ep.flush().unwrap();
            }
            bar.wait();
            // Both send to an ANY_SOURCE receive, rank 2 a small message.
            let len = if me == 1 { 40_000 } else { 100 };
            ep.send(0, 12, 6, &pattern(me + 120, len)).unwrap();
            ep.finalize().unwrap();
            return;
        }
        let req = ep.irecv(spec(Some(1), None), vec![0xee; 50_000]).unwrap();
        bar.wait();
        let mut buf = vec![0xeeu8; 50_000];
        let st = ep.recv(spec(Some(1), Some(9)), &mut buf).unwrap();
        assert_eq!(st.len, 20_000);
        assert!(buf[..20_000] == pattern(91, 20_000)[..]);
        assert!(buf[20_000..].iter().all(|&b| b == 0xee));
        let (st, v) = ep.wait(req).unwrap();
        assert_eq!(st.len, 30_000);
        assert!(v[..30_000] == pattern(90, 30_000)[..]);
        bar.wait();
        for _ in 0..2 {
            let mut buf = vec![0xeeu8; 50_000];
            let st = ep.recv(spec(None, Some(12)), &mut buf).unwrap();
            let len = if st.source == 1 { 40_000 } else { 100 };
            assert_eq!(st.len, len);
            assert!(buf[..len] == pattern(st.source + 120, len)[..]);
            assert!(
                buf[len..].iter().all(|&b| b == 0xee),
                "another message's bytes in the buffer"
            );
        }
        ep.finalize().unwrap();
    });
}

/// An `irecv` a pipelined message is being copied into (bound to match
/// it) cannot be cancelled any more: it completes with the message. An
/// `ANY_SOURCE` receive, which a message is never copied into before it
/// matches, is cancelled with its buffer untouched; the message it would
/// have matched goes to a later matched probe and `mrecv` (truncated).
#[test]
fn cancel_and_mprobe_during_pipelined_message() {
    let bar = Arc::new(Barrier::new(2));
    ranks("cancel", 2, tiny(), move |me, mut ep| {
        if me == 1 {
            let b = ep
                .isend(0, 6, 6, pattern(6, 40_000), SendMode::Standard)
                .unwrap();
            // Three chunks are out; we make no progress until the receiver
            // has tried to cancel, so the message stays half-sent.
            bar.wait();
            bar.wait();
            let a = ep
                .isend(0, 5, 6, pattern(5, 40_000), SendMode::Standard)
                .unwrap();
            ep.wait_send(b).unwrap();
            ep.wait_send(a).unwrap();
            ep.finalize().unwrap();
            return;
        }
        let any = ep.irecv(spec(None, Some(5)), vec![0xab; 50_000]).unwrap();
        let exact = ep.irecv(spec(Some(1), Some(6)), vec![0u8; 50_000]).unwrap();
        bar.wait();
        // One pass: the first chunks arrive and are copied into `exact`.
        assert!(!ep.test(&exact).unwrap());
        assert!(
            !ep.cancel_recv(&exact).unwrap(),
            "a bound receive was cancelled"
        );
        assert!(ep.cancel_recv(&any).unwrap());
        let (st, v) = ep.wait(any).unwrap();
        assert!(st.cancelled);
        assert!(v.iter().all(|&b| b == 0xab), "cancelled buffer written");
        bar.wait();
        let (st, v) = ep.wait(exact).unwrap();
        assert_eq!((st.len, st.msg_len, st.cancelled), (40_000, 40_000, false));
        assert!(v[..40_000] == pattern(6, 40_000)[..]);
        let (msg, st) = ep.mprobe(spec(Some(1), None)).unwrap();
        assert_eq!((st.tag, st.msg_len), (5, 40_000));
        let mut buf = vec![0u8; 30_000];
        let st = ep.mrecv(msg, &mut buf).unwrap();
        assert_eq!((st.len, st.msg_len), (30_000, 40_000));
        assert!(buf[..] == pattern(5, 40_000)[..30_000]);
        let c = ep.finalize().unwrap();
        assert_eq!(c.pipelined_in_place, 1, "{c}");
    });
}

mod model {
    use super::*;
    use proptest::prelude::*;

    /// Inline, eager, pipelined (> 8 KiB) and fragmented (> 16 KiB eager
    /// area) lengths.
    const LENS: &[usize] = &[0, 40, 3000, 8193, 12_000, 16_300, 40_000];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(16))]
        /// Rank 1 sends random tags and lengths through a 2-slot ring and a
        /// 16 KiB eager area (every pipelined message stalls mid-way) while
        /// rank 0 receives in a random order of (wildcard) tags, with
        /// blocking receives (pipelined messages bound to them are copied
        /// in place), `irecv` + `wait` or a `try_recv` loop, into full or
        /// short buffers: every
        /// receive gets exactly the oldest matching message, truncated to
        /// its buffer.
        #[test]
        fn pipelined_matches_like_the_reference(
            sends in proptest::collection::vec((0u32..3, 0usize..LENS.len()), 1..24),
            recvs in proptest::collection::vec(
                (proptest::option::of(0u32..3), any::<bool>(), 0u8..3),
                1..30,
            ),
        ) {
            let c = tiny();
            let j = job("model");
            let reference: Vec<(u32, Vec<u8>)> = sends
                .iter()
                .enumerate()
                .map(|(i, (tag, l))| (*tag, pattern(i as u32, LENS[*l])))
                .collect();
            let sender = {
                let (j, c, msgs) = (j.clone(), c.clone(), reference.clone());
                std::thread::spawn(move || {
                    let mut ep = Endpoint::new(Node::init(&j, 1, 2, c).unwrap());
                    for (tag, data) in msgs {
                        ep.send(0, tag, 6, &data).unwrap();
                    }
                    ep.finalize().unwrap()
                })
            };
            let mut reference = reference;
            let mut ep = Endpoint::new(Node::init(&j, 0, 2, c).unwrap());
            for (want, short, how) in recvs {
                let spec = spec(Some(1), want);
                let Some(i) = reference.iter().position(|(t, _)| want.is_none_or(|w| w == *t)) else {
                    continue;
                };
                let (tag, data) = reference.remove(i);
                let cap = if short { data.len() / 2 } else { 40_000 };
                let (st, buf) = match how {
                    0 => {
                        let r = ep.irecv(spec, vec![0xee; cap]).unwrap();
                        ep.wait(r).unwrap()
                    }
                    1 => {
                        let mut buf = vec![0xee; cap];
                        let st = ep.recv(spec, &mut buf).unwrap();
                        (st, buf)
                    }
                    _ => {
                        // The ADI's blocking receive: `try_recv` polled.
                        let mut buf = vec![0xee; cap];
                        let st = loop {
                            if let Some(st) = ep.try_recv(spec, &mut buf).unwrap() {
                                break st;
                            }
                        };
                        (st, buf)
                    }
                };
                prop_assert_eq!((st.tag, st.msg_len, st.len), (tag, data.len(), data.len().min(cap)));
                prop_assert_eq!(&buf[..st.len], &data[..st.len]);
                prop_assert!(buf[st.len..].iter().all(|&b| b == 0xee));
            }
            for (tag, data) in reference {
                let mut buf = vec![0u8; 40_000];
                let st = ep.recv(super::spec(None, None), &mut buf).unwrap();
                prop_assert_eq!((st.tag, &buf[..st.len]), (tag, &data[..]));
            }
            let c = ep.finalize().unwrap();
            prop_assert_eq!(c.received as usize, sends.len());
            sender.join().unwrap();
        }
    }
}
