//! Replies (inline or by CMA in a ping-pong), CMA reads in a progress pass
//! and duplex traffic.

use super::*;

/// Both sides of `n` round trips of `len`-byte messages with tag
/// `tag` between ranks 0 and 1: rank 0 sends message i, rank 1
/// answers with message i + 1; every byte is checked.
fn ping_pong(me: u32, ep: &mut Endpoint, tag: u32, len: usize, n: u32) {
    let peer = 1 - me;
    let mut buf = vec![0u8; len];
    for i in 0..n {
        let (out, back) = if me == 0 { (i, i + 1) } else { (i + 1, i) };
        if me == 0 {
            ep.send(peer, tag, 4, &data(out, len)).unwrap();
        }
        let st = ep.recv(spec(peer, tag), &mut buf).unwrap();
        assert_eq!((st.len, &buf[..]), (len, &data(back, len)[..]));
        if me == 1 {
            ep.send(peer, tag, 4, &data(out, len)).unwrap();
        }
    }
}

/// How a reply goes another way than an eager block: its setting in
/// the configuration, a size that takes it, one that does not, and the
/// counter of its sends.
#[derive(Clone, Copy)]
struct ReplyWay {
    name: &'static str,
    set: fn(&mut Config, bool),
    len: usize,
    other_len: usize,
    count: fn(&crate::Counters) -> u64,
}

/// Checks a `ReplyWay` on and off: in a ping-pong every reply takes
/// it (all but rank 0's first send), in a window of sends only the
/// window's first, a message of `other_len` never, and with the
/// setting off nothing does; every message arrives whole.
fn check_reply_way(way: ReplyWay) {
    for on in [true, false] {
        let mut cfg = test_cfg(64);
        (way.set)(&mut cfg, on);
        pair_cfg(&format!("{}{on}", way.name), cfg, move |me, mut ep| {
            let peer = 1 - me;
            let len = way.len;
            ping_pong(me, &mut ep, 1, len, 10);
            let c = ep.counters();
            let replies = if on { 10 - u64::from(me == 0) } else { 0 };
            assert_eq!(
                ((way.count)(&c), c.buffered_sends),
                (replies, 10 - replies),
                "{c}"
            );
            let (taken, eager) = ((way.count)(&c), c.buffered_sends);
            // A window of 8 from rank 0: only its first follows a take.
            if me == 0 {
                let reqs: Vec<_> = (0..8u32)
                    .map(|i| {
                        ep.isend(peer, 2, 4, data(50 + i, len), SendMode::Standard)
                            .unwrap()
                    })
                    .collect();
                for r in reqs {
                    ep.wait_send(r).unwrap();
                }
                let c = ep.counters();
                let first = u64::from(on);
                assert_eq!(
                    ((way.count)(&c) - taken, c.buffered_sends - eager),
                    (first, 8 - first),
                    "{c}"
                );
            } else {
                let mut buf = vec![0u8; len];
                for i in 0..8u32 {
                    let st = ep.recv(spec(peer, 2), &mut buf).unwrap();
                    assert_eq!((st.len, &buf[..]), (len, &data(50 + i, len)[..]));
                }
            }
            // A size the setting leaves to eager blocks.
            let before = (way.count)(&ep.counters());
            ping_pong(me, &mut ep, 3, way.other_len, 5);
            assert_eq!((way.count)(&ep.counters()), before, "rank {me}");
            ep.finalize().unwrap();
        });
    }
}

/// `TMX_SHMEM_TUNE=cma_reply`: a 7,000-byte reply goes by CMA (6,144 bytes
/// does not), where CMA is available.
#[test]
fn cma_reply_in_a_ping_pong_not_in_a_window() {
    let job = format!("ut{}-cmaprobe", std::process::id());
    let node = Node::init(&job, 0, 1, test_cfg(64)).unwrap();
    if *node.cma_status() != CmaStatus::Available {
        eprintln!("CMA not available here: nothing to check");
        return;
    }
    drop(node);
    check_reply_way(ReplyWay {
        name: "cmareply",
        // Duplex CMA off: after the ping-pong, the window would go by
        // CMA whole (traffic both ways).
        set: |c, on| {
            c.cma_reply = if on { 6 << 10 } else { u64::MAX };
            c.cma_duplex = u64::MAX;
        },
        len: 7000,
        other_len: 6144,
        count: |c| c.cma_sends,
    });
}

/// Whether CMA works between two endpoints of this process (tests of
/// CMA paths have nothing to check where it does not).
fn cma_here(name: &str) -> bool {
    let job = format!("ut{}-{name}probe", std::process::id());
    let node = Node::init(&job, 0, 1, test_cfg(64)).unwrap();
    let ok = *node.cma_status() == CmaStatus::Available;
    if !ok {
        eprintln!("CMA not available here: nothing to check");
    }
    ok
}

/// Posts `n` receives of `cap` bytes from the peer (tag 7), tells the
/// peer (tag 8) and waits for them; returns them in order.
fn posted_window(ep: &mut Endpoint, peer: u32, n: u32, cap: usize) -> Vec<(Status, Vec<u8>)> {
    let reqs: Vec<_> = (0..n)
        .map(|_| ep.irecv(spec(peer, 7), vec![0u8; cap]).unwrap())
        .collect();
    ep.send(peer, 8, 4, &[1]).unwrap();
    reqs.into_iter().map(|r| ep.wait(r).unwrap()).collect()
}

/// A reply of an eager size sent by CMA (`TMX_SHMEM_TUNE=cma_reply`) that
/// arrives before its receive is read aside and its FIN returned: the
/// blocking send completes although the receiver posts its receive only
/// after a message the sender sends next.
#[test]
fn unexpected_cma_reply_does_not_wait_for_its_receive() {
    if !cma_here("pullaside") {
        return;
    }
    pair_cfg("pullaside", test_cfg(64), move |me, mut ep| {
        let peer = 1 - me;
        ping_pong(me, &mut ep, 1, 7000, 4);
        // Rank 1's last reply has had its FIN (its blocking send
        // returned) before rank 0 sends: rank 1 is not waiting for a
        // FIN of its own, which would pull the message aside too.
        if me == 0 {
            let mut go = [0u8; 1];
            ep.recv(spec(peer, 9), &mut go).unwrap();
        } else {
            ep.send(peer, 9, 4, &[1]).unwrap();
        }
        if me == 0 {
            let before = ep.counters().cma_sends;
            let r = ep
                .isend(peer, 5, 4, data(77, 7000), SendMode::Standard)
                .unwrap();
            assert_eq!(ep.counters().cma_sends, before + 1, "a reply by CMA");
            // Completes without its receive (a deadline, not a hang,
            // if it does not).
            let t0 = Instant::now();
            while !ep.test_send(&r).unwrap() {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "the send waits for its receive"
                );
                std::thread::yield_now();
            }
            ep.wait_send(r).unwrap();
            ep.send(peer, 6, 4, &[1]).unwrap();
        } else {
            let mut tok = [0u8; 1];
            let t0 = Instant::now();
            while ep.try_recv(spec(peer, 6), &mut tok).unwrap().is_none() {
                assert!(t0.elapsed() < Duration::from_secs(30), "no token");
                std::thread::yield_now();
            }
            let mut buf = vec![0u8; 7000];
            let st = ep.recv(spec(peer, 5), &mut buf).unwrap();
            assert!(st.len == 7000 && buf == data(77, 7000), "{st:?}");
            assert!(ep.counters().cma_pulled >= 1, "{}", ep.counters());
        }
        ep.finalize().unwrap();
    });
}

/// The sender's side of the CMA batch tests: once `peer` says go (tag
/// 8), sends `n` messages of `len` bytes (tag 7, `data(100 + i)`),
/// raises `all_sent` once all are in the ring, waits for them and
/// checks that every one went by CMA.
fn send_cma_when_told(
    ep: &mut Endpoint,
    peer: u32,
    n: u32,
    len: usize,
    all_sent: &std::sync::atomic::AtomicBool,
) {
    let mut go = [0u8; 1];
    ep.recv(spec(peer, 8), &mut go).unwrap();
    let reqs: Vec<_> = (0..n)
        .map(|i| {
            ep.isend(peer, 7, 4, data(100 + i, len), SendMode::Standard)
                .unwrap()
        })
        .collect();
    all_sent.store(true, Ordering::Release);
    for r in reqs {
        ep.wait_send(r).unwrap();
    }
    assert_eq!(ep.counters().cma_sends, u64::from(n), "{}", ep.counters());
}

/// `TMX_SHMEM_TUNE=cma_batch`: CMA messages that match posted receives in
/// one progress pass are read in one `process_vm_readv` call (a
/// truncating receive among them gets its prefix), and arrive whole;
/// off, each is read alone.
#[test]
fn posted_cma_receives_read_in_one_call() {
    if !cma_here("cmabatch") {
        return;
    }
    for on in [true, false] {
        let mut cfg = test_cfg(64);
        cfg.cma_batch = on;
        // Rank 0 raises it once all its sends are in the ring: rank 1
        // makes no endpoint call until then, so that one progress pass
        // finds them all however the two threads are scheduled.
        let all_sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        pair_cfg(&format!("cmabatch{on}"), cfg, move |me, mut ep| {
            let peer = 1 - me;
            let len = 20_000;
            let n = 12u32;
            if me == 1 {
                // The fifth receive is 5,000 bytes short.
                let got = {
                    let reqs: Vec<_> = (0..n)
                        .map(|i| {
                            let cap = if i == 4 { len - 5000 } else { len };
                            ep.irecv(spec(peer, 7), vec![0u8; cap]).unwrap()
                        })
                        .collect();
                    ep.send(peer, 8, 4, &[1]).unwrap();
                    while !all_sent.load(Ordering::Acquire) {
                        std::thread::yield_now();
                    }
                    reqs.into_iter()
                        .map(|r| ep.wait(r).unwrap())
                        .collect::<Vec<_>>()
                };
                for (i, (st, buf)) in got.into_iter().enumerate() {
                    let want = data(100 + i as u32, len);
                    if i == 4 {
                        assert!(st.truncated(), "{st:?}");
                        assert!(buf[..] == want[..len - 5000], "message {i}'s prefix");
                    } else {
                        assert!(st.len == len && buf == want, "message {i}: {st:?}");
                    }
                }
                let c = ep.counters();
                if on {
                    // One pass matched all 12: one call read them.
                    assert!(c.cma_batches >= 1 && c.cma_batched == u64::from(n), "{c}");
                } else {
                    assert_eq!((c.cma_batches, c.cma_batched), (0, 0), "{c}");
                }
            } else {
                send_cma_when_told(&mut ep, peer, n, len, &all_sent);
            }
            ep.finalize().unwrap();
        });
    }
}

/// A nonblocking receive made after CMA messages arrived does not read
/// the one an earlier receive matches while it hands the ring to the
/// model: that copy waits for the next progress pass with the
/// receive's own (read together, one `process_vm_readv`). Read inside
/// the call, a rank behind its peer posted its own sends only after
/// it had read the peer's whole window (`bibw`: the ranks copied in
/// turn). Both arrive whole.
#[test]
fn cma_of_an_earlier_receive_waits_for_the_next_pass() {
    if !cma_here("cmaposted") {
        return;
    }
    let all_sent = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    pair_cfg("cmaposted", test_cfg(64), move |me, mut ep| {
        let peer = 1 - me;
        let len = 20_000;
        if me == 1 {
            let first = match ep.irecv_or_done(spec(peer, 7), vec![0u8; len]).unwrap() {
                Started::Pending(r) => r,
                Started::Done(_) => panic!("nothing was sent yet"),
            };
            ep.send(peer, 8, 4, &[1]).unwrap();
            while !all_sent.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            let second = match ep.irecv_or_done(spec(peer, 7), vec![0u8; len]).unwrap() {
                Started::Pending(r) => r,
                Started::Done(_) => panic!("a CMA message is never read inside irecv"),
            };
            let read_in_calls = ep.counters().received;
            // Matched, though not read yet: neither can be cancelled.
            assert!(!ep.cancel_recv(&first).unwrap(), "first cancelled");
            assert!(!ep.cancel_recv(&second).unwrap(), "second cancelled");
            for (i, r) in [first, second].into_iter().enumerate() {
                let (st, buf) = ep.wait(r).unwrap();
                assert!(
                    st.len == len && buf == data(100 + i as u32, len),
                    "{i}: {st:?}"
                );
            }
            // Checked once both are read: the sender's waits end.
            assert_eq!(read_in_calls, 0, "neither was read inside the calls");
            let c = ep.counters();
            assert!(c.cma_batches == 1 && c.cma_batched == 2, "{c}");
        } else {
            send_cma_when_told(&mut ep, peer, 2, len, &all_sent);
        }
        ep.finalize().unwrap();
    });
}

/// `TMX_SHMEM_TUNE=cma_duplex`: 7,000-byte messages streamed one way go
/// through eager blocks; exchanged both ways (both ranks post their
/// receives, then send), most go by CMA; with the setting off, none.
/// Every message arrives whole.
#[test]
fn cma_duplex_both_ways_not_one_way() {
    if !cma_here("duplex") {
        return;
    }
    for on in [true, false] {
        let mut cfg = test_cfg(64);
        cfg.cma_duplex = if on { 6 << 10 } else { u64::MAX };
        cfg.cma_reply = u64::MAX;
        pair_cfg(&format!("duplex{on}"), cfg, move |me, mut ep| {
            let peer = 1 - me;
            let len = 7000;
            let n = 16u32;
            // One way: rank 0 streams a window of n.
            if me == 0 {
                let mut go = [0u8; 1];
                ep.recv(spec(peer, 8), &mut go).unwrap();
                let reqs: Vec<_> = (0..n)
                    .map(|i| {
                        ep.isend(peer, 7, 4, data(i, len), SendMode::Standard)
                            .unwrap()
                    })
                    .collect();
                for r in reqs {
                    ep.wait_send(r).unwrap();
                }
                assert_eq!(ep.counters().cma_sends, 0, "{}", ep.counters());
            } else {
                for (i, (st, buf)) in posted_window(&mut ep, peer, n, len).into_iter().enumerate() {
                    assert!(st.len == len && buf == data(i as u32, len), "{i}: {st:?}");
                }
            }
            // Both ways: four windows of n each way.
            let before = ep.counters().cma_sends;
            for w in 0..4u32 {
                let seed = |i: u32| 1000 + w * 100 + i * 2 + me;
                let rreqs: Vec<_> = (0..n)
                    .map(|_| ep.irecv(spec(peer, 9), vec![0u8; len]).unwrap())
                    .collect();
                let sreqs: Vec<_> = (0..n)
                    .map(|i| {
                        ep.isend(peer, 9, 4, data(seed(i), len), SendMode::Standard)
                            .unwrap()
                    })
                    .collect();
                for r in sreqs {
                    ep.wait_send(r).unwrap();
                }
                for (i, r) in rreqs.into_iter().enumerate() {
                    let (st, buf) = ep.wait(r).unwrap();
                    let want = data(1000 + w * 100 + i as u32 * 2 + peer, len);
                    assert!(st.len == len && buf == want, "window {w}, {i}: {st:?}");
                }
            }
            let by_cma = ep.counters().cma_sends - before;
            if on {
                assert!(
                    by_cma >= u64::from(2 * n),
                    "{by_cma} of {}: {}",
                    4 * n,
                    ep.counters()
                );
            } else {
                assert_eq!(by_cma, 0, "{}", ep.counters());
            }
            ep.finalize().unwrap();
        });
    }
}

/// Both ranks sending before receiving, each message after one taken
/// from the other (so replies, by CMA above `TMX_SHMEM_TUNE=cma_reply`):
/// each blocked send finishes, because a blocked rank copies the
/// other's CMA message aside and returns its FIN.
#[test]
fn head_to_head_replies_finish() {
    pair_cfg("h2h", test_cfg(64), move |me, mut ep| {
        let peer = 1 - me;
        let mut buf = vec![0u8; 7000];
        for i in 0..20u32 {
            ep.send(peer, 1, 4, &data(i * 2 + me, 7000)).unwrap();
            let st = ep.recv(spec(peer, 1), &mut buf).unwrap();
            assert_eq!((st.len, &buf[..]), (7000, &data(i * 2 + peer, 7000)[..]));
        }
        if *ep.node().cma_status() == CmaStatus::Available {
            assert!(ep.counters().cma_sends > 0, "{}", ep.counters());
        }
        ep.finalize().unwrap();
    });
}

/// `TMX_SHMEM_TUNE=inline_reply`: a 200-byte reply goes inline (400 bytes,
/// above the cap of 300, does not).
#[test]
fn inline_reply_in_a_ping_pong_not_in_a_window() {
    check_reply_way(ReplyWay {
        name: "inlinereply",
        set: |c, on| c.inline_reply = if on { 300 } else { 0 },
        len: 200,
        other_len: 400,
        count: |c| c.inline_sends,
    });
}

/// Replies of up to `TMX_SHMEM_TUNE=inline_reply` bytes (17 continuation
/// slots at 1 KiB) reach every kind of receive whole: a blocking
/// receive, a receive posted before its message (deferred, then
/// drained), one made after it arrived, a probe then a receive, and a
/// receive into a short buffer (truncated, counted once).
#[test]
fn replies_inline_reach_every_receive_kind() {
    let cfg = Config {
        inline_reply: 1024,
        ..test_cfg(64)
    };
    pair_cfg("replykinds", cfg, move |me, mut ep| {
        let peer = 1 - me;
        let sizes = [129usize, 500, 1000, 1024, 160];
        let rounds = 40u32;
        let mut buf = vec![0u8; 1024];
        for i in 0..rounds {
            let len = sizes[i as usize % sizes.len()];
            let seed = i * 2 + me;
            // Rank 1 answers; rank 0 starts each round.
            if me == 1 {
                let want = data(i * 2, len);
                match i % 5 {
                    0 => {
                        let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                        assert_eq!((st.len, &buf[..len]), (len, &want[..]), "round {i}");
                    }
                    1 => {
                        // Posted before the message exists.
                        let r = ep.irecv(spec(peer, i), vec![0u8; 1024]).unwrap();
                        let (st, got) = ep.wait(r).unwrap();
                        assert_eq!((st.len, &got[..len]), (len, &want[..]), "round {i}");
                    }
                    2 => {
                        let st = ep.probe(spec(peer, i)).unwrap();
                        assert_eq!(st.msg_len, len, "round {i}");
                        let r = ep.irecv(spec(peer, i), vec![0u8; len]).unwrap();
                        let (st, got) = ep.wait(r).unwrap();
                        assert_eq!((st.len, got), (len, want), "round {i}");
                    }
                    3 => {
                        // Into a buffer shorter than the message.
                        let mut short = vec![0u8; 70];
                        let st = ep.recv(spec(peer, i), &mut short).unwrap();
                        assert_eq!((st.len, st.msg_len), (70, len), "round {i}");
                        assert_eq!(short[..], want[..70], "round {i}");
                    }
                    _ => {
                        let st = ep.probe(spec(peer, i)).unwrap();
                        assert_eq!(st.msg_len, len);
                        match ep.recv_arrived(spec(peer, i), &mut buf).unwrap() {
                            Some(st) => assert_eq!((st.len, &buf[..len]), (len, &want[..])),
                            None => {
                                let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                                assert_eq!((st.len, &buf[..len]), (len, &want[..]));
                            }
                        }
                    }
                }
                ep.send(peer, i, 4, &data(seed, len)).unwrap();
            } else {
                ep.send(peer, i, 4, &data(seed, len)).unwrap();
                let st = ep.recv(spec(peer, i), &mut buf).unwrap();
                assert_eq!((st.len, &buf[..len]), (len, &data(i * 2 + 1, len)[..]));
            }
        }
        let c = ep.counters();
        assert_eq!(c.received, u64::from(rounds), "rank {me}: {c}");
        // Every send but rank 0's first is a reply.
        assert_eq!(c.inline_sends, u64::from(rounds - 1 + me), "rank {me}: {c}");
        if me == 1 {
            assert_eq!(c.truncated, u64::from(rounds / 5), "{c}");
        }
        ep.finalize().unwrap();
    });
}

/// Inline messages with continuation slots arriving for receives
/// posted before them go from the slots straight into the receives'
/// own buffers: the right bytes, truncation to a short buffer in the
/// status and counted once, every message counted as received.
#[test]
fn posted_inline_ext_into_short_owned_buffers() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    let sizes = [41usize, 60, 100, 221, 280, 48];
    let cfg = Config {
        inline_ext: 280,
        ..test_cfg(64)
    };
    pair_cfg("extpost", cfg, move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            gate.wait();
            for (i, &len) in sizes.iter().enumerate() {
                ep.send(peer, 7, 4, &data(i as u32, len)).unwrap();
            }
        } else {
            let posted: Vec<_> = sizes
                .iter()
                .map(|_| ep.irecv(spec(peer, 7), vec![0u8; 50]).unwrap())
                .collect();
            gate.wait();
            for (i, r) in posted.into_iter().enumerate() {
                let len = sizes[i];
                let (st, got) = ep.wait(r).unwrap();
                assert_eq!((st.len, st.msg_len), (len.min(50), len), "message {i}");
                assert_eq!(got[..st.len], data(i as u32, len)[..st.len], "message {i}");
            }
            let c = ep.counters();
            assert_eq!(c.received, sizes.len() as u64, "{c}");
            assert_eq!(c.truncated, 4, "{c}");
        }
        ep.finalize().unwrap();
    });
}
