//! Receives taken from the front of the ring (`recv_arrived`, deferred
//! receives, `irecv_or_done`) and the arrival watch.

use super::*;

/// `irecv_or_done` drains what has arrived before posting: an older
/// posted receive still takes the first matching message and the new
/// one the next (never overtaking), and with nothing posted or queued a
/// receive takes its message (inline, or inline with continuation
/// slots) straight from the ring, never queueing it as unexpected.
#[test]
fn recv_arrived_takes_only_the_front_message_nothing_can_come_between() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("arrived", move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            // Inline, inline-ext (one continuation slot, then a full
            // one), eager, then a synchronous one.
            for (k, len) in [(1u32, 8usize), (2, 64), (3, 100), (4, 300)] {
                ep.send(peer, 5, 4, &data(k, len)).unwrap();
            }
            let sync = ep
                .isend(peer, 5, 4, data(6, 8), SendMode::Synchronous)
                .unwrap();
            gate.wait();
            gate.wait();
            ep.send(peer, 5, 4, &data(5, 8)).unwrap();
            gate.wait();
            ep.wait_send(sync).unwrap();
        } else {
            gate.wait();
            let received = ep.counters().received;
            let mut buf = vec![0u8; 128];
            // Another tag: declined, nothing taken.
            assert_eq!(ep.recv_arrived(spec(peer, 6), &mut buf).unwrap(), None);
            let st = ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().unwrap();
            assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
            assert_eq!((st.len, st.msg_len, &buf[..8]), (8, 8, &data(1, 8)[..]));
            // Too small a buffer: declined (the general path truncates).
            let mut small = vec![0u8; 10];
            assert_eq!(ep.recv_arrived(spec(peer, 5), &mut small).unwrap(), None);
            for (k, len) in [(2u32, 64usize), (3, 100), (4, 300)] {
                let mut buf = vec![0u8; len];
                let st = ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().unwrap();
                assert_eq!((st.len, st.msg_len, buf), (len, len, data(k, len)));
            }
            assert_eq!(ep.counters().received, received + 4);
            // A synchronous message is the general path's (it owes an
            // acknowledgement).
            assert_eq!(ep.recv_arrived(spec(peer, 5), &mut [0; 8]).unwrap(), None);
            match ep.irecv_or_done(spec(peer, 5), vec![0; 8]).unwrap() {
                Started::Done((Ok(st), buf)) => assert_eq!((st.len, buf), (8, data(6, 8))),
                Started::Pending(r) => {
                    let (st, buf) = ep.wait(r).unwrap();
                    assert_eq!((st.len, buf), (8, data(6, 8)));
                }
                Started::Done((Err(e), _)) => panic!("failed: {e}"),
            }
            // An older receive (deferred: the ring is empty) comes first.
            let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 8]).unwrap() {
                Started::Pending(r) => r,
                Started::Done(done) => panic!("nothing was left: {done:?}"),
            };
            gate.wait();
            gate.wait();
            let mut buf = vec![0u8; 8];
            while ep.ring_empty(peer) {
                std::hint::spin_loop();
            }
            assert_eq!(ep.recv_arrived(spec(peer, 5), &mut buf).unwrap(), None);
            let (st, buf) = ep.wait(older).unwrap();
            assert_eq!((st.len, buf), (8, data(5, 8)));
        }
        ep.finalize().unwrap();
    });
}

/// `recv_arrived_with` hands the front eager message's payload to its
/// consumer where it lies, exactly once, and releases its block; it
/// declines (consumer not called, nothing taken) an inline message, a
/// buffer too small, another tag, and anything once the matcher holds
/// a message; `front_open` says when waiting for it is pointless.
#[test]
fn recv_arrived_with_reads_eager_payloads_in_place() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("in-place", move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            // Inline, then eager (3000 B: hinted whole; 5000 B with a
            // header behind it: not), then eager on another tag.
            for (k, tag, len) in [
                (1u32, 5u32, 8usize),
                (2, 5, 3000),
                (3, 5, 5000),
                (4, 6, 2000),
            ] {
                ep.send(peer, tag, 4, &data(k, len)).unwrap();
            }
            assert_eq!(ep.eager.in_flight(), 3);
            gate.wait();
            gate.wait();
            // Every block came back: the in-place takes released theirs.
            let seg = ep.node.segment();
            ep.eager.reclaim(released(seg));
            assert_eq!(ep.eager.in_flight(), 0);
        } else {
            gate.wait();
            let mut seen: Vec<Vec<u8>> = Vec::new();
            let mut f = |p: &[u8]| seen.push(p.to_vec());
            // The inline message in front is not for it.
            assert_eq!(
                ep.recv_arrived_with(spec(peer, 5), 100, &mut f).unwrap(),
                None
            );
            let mut buf = [0u8; 8];
            assert!(ep.recv_arrived(spec(peer, 5), &mut buf).unwrap().is_some());
            assert!(ep.front_open(spec(peer, 5)));
            let any = MatchSpec {
                source: Source::Any,
                ..spec(peer, 5)
            };
            assert!(!ep.front_open(any));
            assert!(!ep.front_open(spec(me, 5)));
            // Too small, another tag: declined.
            assert_eq!(
                ep.recv_arrived_with(spec(peer, 5), 2999, &mut f).unwrap(),
                None
            );
            assert_eq!(
                ep.recv_arrived_with(spec(peer, 6), 4000, &mut f).unwrap(),
                None
            );
            let received = ep.counters().received;
            for (k, len) in [(2u32, 3000usize), (3, 5000)] {
                let st = ep
                    .recv_arrived_with(spec(peer, 5), 6000, &mut f)
                    .unwrap()
                    .unwrap();
                assert_eq!((st.source, st.tag, st.context), (peer, 5, 4));
                assert_eq!((st.len, st.msg_len), (len, len));
                let _ = k;
            }
            assert_eq!(ep.counters().received, received + 2);
            // Once a pass has queued the last one, the general path's.
            ep.progress().unwrap();
            assert!(!ep.front_open(spec(peer, 6)));
            assert_eq!(
                ep.recv_arrived_with(spec(peer, 6), 4000, &mut f).unwrap(),
                None
            );
            let mut buf = vec![0u8; 2000];
            let st = ep.recv(spec(peer, 6), &mut buf).unwrap();
            assert_eq!((st.len, buf), (2000, data(4, 2000)));
            assert_eq!(seen, vec![data(2, 3000), data(3, 5000)]);
            gate.wait();
        }
        ep.finalize().unwrap();
    });
}

/// A deferred receive made with a consumer: an eager message is read
/// where it lies (buffer untouched, consumer called once with exactly
/// the payload), an inline one copied; a receive that is not deferred,
/// or posted later, drops its consumer uncalled and copies.
#[test]
fn deferred_receive_with_consumer_reads_in_place() {
    use std::sync::{Arc, Mutex};
    let gate = Arc::new(std::sync::Barrier::new(2));
    pair_cfg(
        "consumer",
        Config {
            // No eager pressure or ring backpressure in the way.
            ring_slots: 64,
            publish_batch: 32,
            ..test_cfg(64)
        },
        move |me, mut ep| {
            let peer = 1 - me;
            if me == 1 {
                // Each batch goes out once the receiver has made its
                // receives, and is in the ring before it looks.
                gate.wait();
                for (k, len) in [(1u32, 3000usize), (2, 5000), (3, 8)] {
                    ep.send(peer, 5, 4, &data(k, len)).unwrap();
                }
                gate.wait();
                gate.wait();
                ep.send(peer, 6, 4, &data(4, 4000)).unwrap();
                gate.wait();
                gate.wait();
                ep.send(peer, 7, 4, &data(5, 2000)).unwrap();
                gate.wait();
                gate.wait();
            } else {
                let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
                let consumer = |seen: &Arc<Mutex<Vec<Vec<u8>>>>| -> InPlace {
                    let seen = Arc::clone(seen);
                    Box::new(move |p: &[u8]| seen.lock().unwrap().push(p.to_vec()))
                };
                let pending = |r| match r {
                    Started::Pending(r) => r,
                    Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
                };
                // Completed by progress passes, as the adi collects
                // them (`wait` would post the deferred receives first).
                let collect = |ep: &mut Endpoint, reqs: &[&RecvRequest]| {
                    let (mut sends, mut done) = (Vec::new(), Vec::new());
                    while done.len() < reqs.len() {
                        ep.progress().unwrap();
                        ep.take_finished(&mut sends, &mut done);
                    }
                    reqs.iter()
                        .map(|r| {
                            let i = done.iter().position(|d| d.id == r.id()).unwrap();
                            done.swap_remove(i).into_result().unwrap()
                        })
                        .collect::<Vec<_>>()
                };
                // Three deferred receives (nothing has arrived).
                let reqs: Vec<RecvRequest> = (0..3)
                    .map(|_| {
                        let c = consumer(&seen);
                        pending(
                            ep.irecv_or_done_in_place(spec(peer, 5), vec![0; 6000], c)
                                .unwrap(),
                        )
                    })
                    .collect();
                assert_eq!(
                    (ep.matching.deferred_len(), ep.in_place_consumers.len()),
                    (3, 3)
                );
                gate.wait();
                gate.wait();
                let got = collect(&mut ep, &reqs.iter().collect::<Vec<_>>());
                // Eager: read in place, the buffer untouched.
                for (i, (k, len)) in [(1u32, 3000usize), (2, 5000)].into_iter().enumerate() {
                    assert_eq!((got[i].0.len, got[i].0.tag), (len, 5));
                    assert!(got[i].1.iter().all(|b| *b == 0), "buffer {i} written");
                    assert_eq!(seen.lock().unwrap()[i], data(k, len));
                }
                // Inline: copied, its consumer dropped.
                assert_eq!((got[2].0.len, &got[2].1[..8]), (8, &data(3, 8)[..]));
                assert_eq!(seen.lock().unwrap().len(), 2);
                assert!(ep.in_place_consumers.is_empty());
                // Not deferred (`ANY_SOURCE`): dropped uncalled, copied.
                let any = MatchSpec {
                    source: Source::Any,
                    ..spec(peer, 6)
                };
                let c = consumer(&seen);
                let r = pending(ep.irecv_or_done_in_place(any, vec![0; 6000], c).unwrap());
                assert!(ep.in_place_consumers.is_empty());
                gate.wait();
                gate.wait();
                let got = collect(&mut ep, &[&r]);
                assert_eq!(
                    (got[0].0.len, &got[0].1[..4000]),
                    (4000, &data(4, 4000)[..])
                );
                // Deferred, then posted by a wildcard receive: dropped.
                let c = consumer(&seen);
                let r = pending(
                    ep.irecv_or_done_in_place(spec(peer, 7), vec![0; 6000], c)
                        .unwrap(),
                );
                assert_eq!(ep.in_place_consumers.len(), 1);
                let other = pending(ep.irecv_or_done(any, vec![0; 8]).unwrap());
                assert!(ep.in_place_consumers.is_empty());
                gate.wait();
                gate.wait();
                let got = collect(&mut ep, &[&r]);
                assert_eq!(
                    (got[0].0.len, &got[0].1[..2000]),
                    (2000, &data(5, 2000)[..])
                );
                assert!(ep.cancel_recv(&other).unwrap());
                let _ = ep.wait(other);
                assert_eq!(seen.lock().unwrap().len(), 2);
                // Every consumer is gone: only this handle is left.
                assert_eq!(Arc::strong_count(&seen), 1);
                gate.wait();
            }
            ep.finalize().unwrap();
        },
    );
}

#[test]
fn irecv_or_done_drains_in_order() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("drain", move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            gate.wait();
            for (k, len) in [(1u32, 8usize), (2, 100), (3, 24)] {
                ep.send(peer, 5, 4, &data(k, len)).unwrap();
            }
            gate.wait();
            ep.send(peer, 6, 4, &data(9, 16)).unwrap();
            gate.wait();
            ep.send(peer, 7, 4, &data(10, 8)).unwrap();
            ep.send(peer, 7, 4, &data(11, 100)).unwrap();
            gate.wait();
        } else {
            let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 128]).unwrap() {
                Started::Pending(r) => r,
                Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
            };
            gate.wait();
            gate.wait();
            // m1 goes to `older` (drained before this receive is
            // posted); this one gets m2, at once or when waited for.
            let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; 128]).unwrap() {
                Started::Done((r, buf)) => (r.unwrap(), buf),
                Started::Pending(r) => ep.wait(r).unwrap(),
            };
            assert_eq!((st.len, &buf[..100]), (100, &data(2, 100)[..]));
            let (st, buf) = ep.wait(older).unwrap();
            assert_eq!((st.len, &buf[..8]), (8, &data(1, 8)[..]));
            gate.wait();
            for (tag, k, len) in [(6u32, 9u32, 16usize), (5, 3, 24)] {
                let (st, buf) = match ep.irecv_or_done(spec(peer, tag), vec![0; len]).unwrap() {
                    Started::Done((r, buf)) => (r.unwrap(), buf),
                    Started::Pending(r) => ep.wait(r).unwrap(),
                };
                assert_eq!((st.len, buf), (len, data(k, len)));
            }
            gate.wait();
            let queued = ep.counters().unexpected;
            for (k, len) in [(10u32, 8usize), (11, 100)] {
                match ep.irecv_or_done(spec(peer, 7), vec![0; len]).unwrap() {
                    Started::Done((Ok(st), buf)) => assert_eq!((st.len, buf), (len, data(k, len))),
                    other => panic!("not finished at once: {other:?}"),
                }
            }
            assert_eq!(ep.counters().unexpected, queued, "taken through the queue");
        }
        ep.finalize().unwrap();
    });
}

/// Deferred receives that a progress pass completes go straight to the
/// finished list (`ready`), in order, with their data; a receive looked
/// up by id afterwards (`test`, `cancel_recv`, `take_completed`,
/// `wait`) finds it complete, exactly once.
#[test]
fn deferred_receives_finished_in_a_drain_stay_visible_by_id() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("ready", move |me, mut ep| {
        let peer = 1 - me;
        let sizes = [(1u32, 8usize), (2, 100), (3, 24), (4, 40)];
        if me == 1 {
            for _round in 0..2 {
                gate.wait();
                for (k, len) in sizes {
                    ep.send(peer, 5, 4, &data(k, len)).unwrap();
                }
                gate.wait();
            }
        } else {
            // Round 1: the finished list, taken as the ADI takes it.
            let mut ids = Vec::new();
            for (_, len) in sizes {
                match ep.irecv_or_done(spec(peer, 5), vec![0; len]).unwrap() {
                    Started::Pending(r) => ids.push(r.id()),
                    Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
                }
            }
            assert_eq!(ep.matching.deferred_len(), sizes.len(), "all deferred");
            gate.wait();
            gate.wait();
            while ep.finished.len() < sizes.len() {
                ep.progress().unwrap();
            }
            assert!(ids.iter().all(|&id| ep.is_complete(id)));
            let (mut sends, mut recvs) = (Vec::new(), Vec::new());
            ep.take_finished(&mut sends, &mut recvs);
            assert!(ep.finished.is_empty() && sends.is_empty());
            let got: Vec<_> = recvs
                .drain(..)
                .map(|f| (f.id, f.result.unwrap().len, f.buf))
                .collect();
            let want: Vec<_> = ids
                .iter()
                .zip(sizes)
                .map(|(&id, (k, len))| (id, len, data(k, len)))
                .collect();
            assert_eq!(got, want);
            ep.take_finished(&mut sends, &mut recvs);
            assert!(recvs.is_empty(), "handed over twice");

            // Round 2: the same receives looked up by id instead.
            let mut reqs = Vec::new();
            for (_, len) in sizes {
                match ep.irecv_or_done(spec(peer, 5), vec![0; len]).unwrap() {
                    Started::Pending(r) => reqs.push(r),
                    Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
                }
            }
            gate.wait();
            gate.wait();
            while ep.finished.len() < sizes.len() {
                ep.progress().unwrap();
            }
            assert!(!ep.cancel_recv(&reqs[1]).unwrap(), "a finished receive");
            assert!(ep.finished.is_empty(), "put back for the lookup");
            assert!(ep.test(&reqs[0]).unwrap());
            let mut reported = Vec::new();
            ep.take_completed(&mut reported);
            let ids: Vec<u64> = reqs.iter().map(|r| r.id()).collect();
            assert_eq!(reported, ids, "each reported once, in order");
            reported.clear();
            ep.take_completed(&mut reported);
            assert!(reported.is_empty());
            for (r, (k, len)) in reqs.into_iter().zip(sizes).rev() {
                let (st, buf) = ep.wait(r).unwrap();
                assert_eq!((st.len, st.cancelled, buf), (len, false, data(k, len)));
            }
        }
        ep.finalize().unwrap();
    });
}

/// A receive that finds older posted receives drains the ring into
/// them and then takes its own message at once (the one after theirs),
/// instead of posting behind them: the receiver of a window never stays
/// one message behind. A pipelined message in between is not overtaken
/// by the small one after it, and the posted-first counter says which
/// receives were queued.
#[test]
fn irecv_or_done_catches_up_with_older_posted_receives() {
    catch_up("catchup", false);
}

/// The same with the older receives deferred (`TMX_SHMEM_TUNE=defer_recv`,
/// the default): none is posted; the later `irecv_or_done` first
/// completes them from the ring, in order, then takes its own message.
/// The race of a progress pass with a deferred receive: its message
/// reaches the matching model (handed to it as an arrival) after the pass
/// looked at the deferred receives and found the ring empty. The model
/// moves the deferred receive into its posted queue before it matches the
/// message, so the receive completes with it at once (before, the message
/// waited as unexpected for the next pass to post the receive); one that
/// only looked at the ring would wait for ever. Deterministic: both
/// endpoints in one thread.
#[test]
fn deferred_receive_gets_a_message_that_reached_the_matcher_first() {
    let job = format!("ut{}-dfrrace", std::process::id());
    let hs: Vec<_> = (0..2)
        .map(|r| {
            let j = job.clone();
            std::thread::spawn(move || Endpoint::new(Node::init(&j, r, 2, test_cfg(8)).unwrap()))
        })
        .collect();
    let mut eps: Vec<Endpoint> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    let mut e1 = eps.pop().unwrap();
    let mut e0 = eps.pop().unwrap();
    let r = match e1.irecv_or_done(spec(0, 5), vec![0; 16]).unwrap() {
        Started::Pending(r) => r,
        Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
    };
    assert_eq!(e1.counters().deferred_recvs, 1);
    e0.send(1, 5, 4, &data(1, 8)).unwrap();
    let mut want = None;
    assert!(matches!(
        e1.poll_one(0, &mut want, &mut []).unwrap(),
        Quick::Other
    ));
    assert_eq!(e1.matching.unexpected_len(), 0, "not queued as unexpected");
    assert_eq!(e1.matching.deferred_len(), 0, "posted by the model first");
    assert!(e1.is_complete(r.id()), "matched as it arrived");
    let mut passes = 0;
    while !e1.test(&r).unwrap() {
        passes += 1;
        assert!(passes < 1000, "the deferred receive never matched");
    }
    let (st, buf) = e1.wait(r).unwrap();
    assert_eq!((st.len, &buf[..8]), (8, &data(1, 8)[..]));
    e0.finalize().unwrap();
    e1.finalize().unwrap();
}

#[test]
fn irecv_or_done_completes_older_deferred_receives_first() {
    catch_up("catchup-defer", true);
}

fn catch_up(name: &str, defer: bool) {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    let big = 300 << 10;
    let cfg = Config {
        defer_recv: defer,
        ..test_cfg(64)
    };
    let (posted, deferred) = if defer { (0, 3) } else { (3, 0) };
    pair_cfg(name, cfg, move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            gate.wait();
            for k in 0..6u32 {
                ep.send(peer, 5, 4, &data(k, 8 + 200 * k as usize)).unwrap();
            }
            gate.wait();
            // Once the receiver posted for m20.
            gate.wait();
            ep.send(peer, 5, 4, &data(20, 16)).unwrap();
            ep.send(peer, 5, 4, &data(21, big)).unwrap();
            ep.send(peer, 5, 4, &data(22, 16)).unwrap();
        } else {
            let older: Vec<_> = (0..3)
                .map(
                    |_| match ep.irecv_or_done(spec(peer, 5), vec![0; 2048]).unwrap() {
                        Started::Pending(r) => r,
                        Started::Done(done) => panic!("nothing was sent yet: {done:?}"),
                    },
                )
                .collect();
            let c = ep.counters();
            assert_eq!((c.posted_recvs, c.deferred_recvs), (posted, deferred));
            gate.wait();
            gate.wait();
            // m0..m2 complete the older receives; this one takes m3.
            for k in 3..6u32 {
                match ep.irecv_or_done(spec(peer, 5), vec![0; 2048]).unwrap() {
                    Started::Done((Ok(st), buf)) => {
                        let len = 8 + 200 * k as usize;
                        assert_eq!((st.len, &buf[..len]), (len, &data(k, len)[..]), "m{k}");
                    }
                    other => panic!("m{k} not taken at once: {other:?}"),
                }
            }
            for (k, r) in older.into_iter().enumerate() {
                let (st, buf) = ep.wait(r).unwrap();
                let len = 8 + 200 * k;
                assert_eq!((st.len, &buf[..len]), (len, &data(k as u32, len)[..]));
            }
            assert_eq!(ep.counters().posted_recvs, posted, "none posted behind");
            let older = match ep.irecv_or_done(spec(peer, 5), vec![0; 16]).unwrap() {
                Started::Pending(r) => r,
                Started::Done(done) => panic!("m20 was not sent yet: {done:?}"),
            };
            gate.wait();
            // m20 completes `older`; the big m21 comes before m22.
            let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; big]).unwrap() {
                Started::Done((r, buf)) => (r.unwrap(), buf),
                Started::Pending(r) => ep.wait(r).unwrap(),
            };
            assert_eq!((st.len, buf == data(21, big)), (big, true), "m21 overtaken");
            let (st, buf) = match ep.irecv_or_done(spec(peer, 5), vec![0; 16]).unwrap() {
                Started::Done((r, buf)) => (r.unwrap(), buf),
                Started::Pending(r) => ep.wait(r).unwrap(),
            };
            assert_eq!((st.len, buf), (16, data(22, 16)));
            let (st, buf) = ep.wait(older).unwrap();
            assert_eq!((st.len, buf), (16, data(20, 16)));
        }
        ep.finalize().unwrap();
    });
}

/// `arrival_watch` tells, without the endpoint, whether the source has
/// published a header at the endpoint's next index: false before the
/// send, true after it (also for a message with continuation slots),
/// and false again at the new index once the receive took it.
#[test]
fn arrival_watch_sees_headers_at_the_next_index() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair_with("watch", 64, move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            for len in [8usize, 100] {
                gate.wait();
                ep.send(peer, 3, 4, &data(1, len)).unwrap();
                gate.wait();
            }
        } else {
            assert!(ep.arrival_watch(me).is_none(), "no ring to oneself");
            assert!(ep.arrival_watch(2).is_none(), "no such rank");
            for len in [8usize, 100] {
                let (w, next) = ep.arrival_watch(peer).unwrap();
                assert!(!w.published(next), "nothing sent yet");
                gate.wait();
                gate.wait();
                assert!(w.published(next), "the header is published");
                let mut buf = vec![0u8; len];
                let st = ep.recv(spec(peer, 3), &mut buf).unwrap();
                assert_eq!((st.len, buf), (len, data(1, len)));
                let (w2, next2) = ep.arrival_watch(peer).unwrap();
                assert!(next2 > next);
                assert!(!w2.published(next2), "nothing after it");
            }
        }
        ep.finalize().unwrap();
    });
}

/// Receives into lent memory are deferred as owned ones are, and keep
/// MPI's order: with two earlier lent receives deferred (one for any tag)
/// and their messages and a later receive's message all in the ring, the
/// later receive completes each older one with its own message first,
/// then takes the next; a front message the oldest deferred receive does
/// not match posts them all, and the later receive still takes only what
/// no older one matches.
#[test]
fn lent_receives_deferred_in_order() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("lentdefer", move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            gate.wait();
            for (k, tag) in [(1u32, 5u32), (2, 7), (3, 5)] {
                ep.send(peer, tag, 4, &data(k, 8)).unwrap();
            }
            gate.wait();
            gate.wait();
            ep.send(peer, 5, 4, &data(4, 8)).unwrap();
            ep.send(peer, 6, 4, &data(5, 8)).unwrap();
            gate.wait();
        } else {
            let mut mem = [[0u8; 8]; 5];
            let p: Vec<*mut u8> = mem.iter_mut().map(|m| m.as_mut_ptr()).collect();
            let any_tag = MatchSpec {
                tag: tm_proto::Tag::Any,
                ..spec(peer, 0)
            };
            // Every lent receive below: `mem` outlives the receives, each
            // gets its own 8 bytes, and nothing touches them until the
            // receive has completed.
            // SAFETY: lent as said above.
            let a = match unsafe { ep.irecv_or_done_lent(spec(peer, 5), p[0], 8) }.unwrap() {
                Started::Pending(r) => r,
                Started::Done(d) => panic!("nothing was sent yet: {d:?}"),
            };
            // SAFETY: lent as said above.
            let b = match unsafe { ep.irecv_or_done_lent(any_tag, p[1], 8) }.unwrap() {
                Started::Pending(r) => r,
                Started::Done(d) => panic!("nothing was sent yet: {d:?}"),
            };
            assert_eq!(ep.matching.deferred_len(), 2);
            assert_eq!(ep.matching.posted_len(), 0);
            gate.wait();
            gate.wait();
            while ep.ring_empty(peer) {
                std::hint::spin_loop();
            }
            // Tag 5 (1) goes to `a`, tag 7 (2) to `b` (any tag), and the
            // later receive takes tag 5 (3), never (1).
            // SAFETY: lent as said above.
            match unsafe { ep.irecv_or_done_lent(spec(peer, 5), p[2], 8) }.unwrap() {
                Started::Done(Ok(st)) => assert_eq!((st.tag, st.len), (5, 8)),
                other => panic!("the message was in the ring: {other:?}"),
            }
            assert_eq!(mem[2][..], data(3, 8)[..]);
            assert_eq!(ep.matching.deferred_len(), 0);
            let (st, buf) = ep.wait(a).unwrap();
            assert_eq!((st.tag, buf.len(), &mem[0][..]), (5, 0, &data(1, 8)[..]));
            let (st, _) = ep.wait(b).unwrap();
            assert_eq!((st.tag, &mem[1][..]), (7, &data(2, 8)[..]));
            // A deferred receive for tag 6, then tag 5 (4) and tag 6 (5)
            // arrive: the later tag-5 receive posts it and takes (4); (5)
            // is the older receive's.
            // SAFETY: lent as said above.
            let c = match unsafe { ep.irecv_or_done_lent(spec(peer, 6), p[3], 8) }.unwrap() {
                Started::Pending(r) => r,
                Started::Done(d) => panic!("nothing was sent yet: {d:?}"),
            };
            assert_eq!(ep.matching.deferred_len(), 1);
            gate.wait();
            gate.wait();
            // SAFETY: lent as said above.
            let r = unsafe { ep.irecv_or_done_lent(spec(peer, 5), p[4], 8) }.unwrap();
            assert_eq!(ep.matching.deferred_len(), 0);
            let st = match r {
                Started::Done(Ok(st)) => st,
                Started::Pending(r) => ep.wait(r).unwrap().0,
                Started::Done(Err(e)) => panic!("failed: {e}"),
            };
            assert_eq!((st.tag, &mem[4][..]), (5, &data(4, 8)[..]));
            let (st, _) = ep.wait(c).unwrap();
            assert_eq!((st.tag, &mem[3][..]), (6, &data(5, 8)[..]));
        }
        ep.finalize().unwrap();
    });
}

/// A receive into lent memory whose message is already queued as
/// unexpected takes it in the call, the oldest matching first, without
/// making a request (no request key used), truncating into a small
/// buffer as any receive does; a synchronous sender learns of the match.
#[test]
fn lent_receive_takes_its_queued_message_without_a_request() {
    let gate = std::sync::Arc::new(std::sync::Barrier::new(2));
    pair("lent-queued", move |me, mut ep| {
        let peer = 1 - me;
        if me == 1 {
            ep.send(peer, 7, 4, &data(1, 8)).unwrap();
            ep.send(peer, 5, 4, &data(2, 8)).unwrap();
            ep.send(peer, 5, 4, &data(3, 300)).unwrap();
            let sync = ep
                .isend(peer, 5, 4, data(4, 8), SendMode::Synchronous)
                .unwrap();
            gate.wait();
            ep.wait_send(sync).unwrap();
            gate.wait();
        } else {
            gate.wait();
            // A pass queues the arrivals: nothing is posted for them.
            while ep.matching.unexpected_len() < 4 {
                assert_eq!(ep.iprobe(spec(peer, 9)).unwrap(), None);
            }
            let lent = |ep: &mut Endpoint, tag: u32, buf: &mut [u8]| {
                let key = ep.next_id;
                // SAFETY: `buf` outlives the call, and the receive is
                // complete when it returns (asserted).
                let r =
                    unsafe { ep.irecv_or_done_lent(spec(peer, tag), buf.as_mut_ptr(), buf.len()) };
                assert_eq!(ep.next_id, key, "no request made");
                match r.unwrap() {
                    Started::Done(st) => st.unwrap(),
                    Started::Pending(_) => panic!("its message was queued"),
                }
            };
            let mut buf = vec![0u8; 300];
            let st = lent(&mut ep, 5, &mut buf);
            assert_eq!((st.source, st.tag, st.len), (peer, 5, 8));
            assert_eq!(&buf[..8], &data(2, 8)[..]);
            let st = lent(&mut ep, 5, &mut buf);
            assert_eq!((st.len, &buf), (300, &data(3, 300)));
            let st = lent(&mut ep, 5, &mut buf[..8]);
            assert_eq!((st.len, &buf[..8]), (8, &data(4, 8)[..]));
            let truncated = ep.counters().truncated;
            let mut small = [0u8; 4];
            let st = lent(&mut ep, 7, &mut small);
            assert_eq!((st.len, st.msg_len, &small[..]), (4, 8, &data(1, 8)[..4]));
            assert_eq!(ep.counters().truncated, truncated + 1);
            assert_eq!(ep.matching.unexpected_len(), 0);
            gate.wait();
        }
        ep.finalize().unwrap();
    });
}
