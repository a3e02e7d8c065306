//! In-process tests of the node segment, the one-sided API and the endpoint:
//! local ranks are threads, each with its own mapping of the real segment.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use shmem_onesided::{CmaMode, Config, Endpoint, Error, Node, SymAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tm_proto::{MatchSpec, Source, Tag, TagLayout};

fn job(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "it{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn shm_leftovers(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("tmx-{job}-")))
        .collect()
}

fn cfg() -> Config {
    Config {
        ring_slots: 8,
        heap_bytes: 1 << 20,
        eager_bytes: 1 << 20,
        attach_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

/// Runs `f(rank)` on `size` threads, each attaching its own Node.
fn ranks<T: Send + 'static>(
    job: &str,
    size: u32,
    cfg: Config,
    f: impl Fn(u32, Result<Node, Error>) -> T + Send + Sync + Clone + 'static,
) -> Vec<T> {
    let hs: Vec<_> = (0..size)
        .map(|r| {
            let (job, cfg, f) = (job.to_owned(), cfg.clone(), f.clone());
            std::thread::spawn(move || {
                let run = || f(r, Node::init(&job, r, size, cfg));
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
                    Ok(v) => v,
                    Err(_) => {
                        // In-process ranks have no liveness: its peers
                        // would wait for this rank forever. Fail now (the
                        // panic's message is printed above).
                        eprintln!("rank {r} of job {job} panicked: ending the test binary");
                        std::process::exit(101);
                    }
                }
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn attach_unlinks_the_name_once_all_attached() {
    let j = job("attach");
    let seen = ranks(&j, 3, cfg(), {
        let j = j.clone();
        move |r, n| {
            let n = n.unwrap();
            assert_eq!((n.rank(), n.size()), (r, 3));
            // Every rank returns only after the name is gone.
            shm_leftovers(&j).len()
        }
    });
    assert_eq!(seen, vec![0, 0, 0]);
}

#[test]
fn attach_timeout_is_typed_and_cleans_up() {
    let j = job("timeout");
    let c = Config {
        attach_timeout: Duration::from_millis(300),
        ..cfg()
    };
    match Node::init(&j, 0, 2, c) {
        Err(Error::AttachTimeout {
            attached, expected, ..
        }) => assert_eq!((attached, expected), (1, 2)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn layout_mismatch_is_reported_and_cleans_up() {
    let j = job("mismatch");
    let out = ranks(&j, 2, cfg(), {
        move |_r, n| n.map(|_| ()).map_err(|e| e.to_string())
    });
    assert!(out.iter().all(|r| r.is_ok()));
    // Now a job whose rank 1 disagrees about the ring size.
    let j = job("mismatch2");
    let c0 = Config {
        attach_timeout: Duration::from_millis(2000),
        ..cfg()
    };
    let c1 = Config {
        ring_slots: 16,
        ..c0.clone()
    };
    let j1 = j.clone();
    let t1 = std::thread::spawn(move || Node::init(&j1, 1, 2, c1));
    let r0 = Node::init(&j, 0, 2, c0);
    let r1 = t1.join().unwrap();
    match r1 {
        Err(Error::LayoutMismatch {
            field,
            ours,
            theirs,
        }) => {
            assert_eq!((field, ours, theirs), ("ring_slots", 16, 8))
        }
        other => panic!("expected a mismatch, got {other:?}"),
    }
    assert!(matches!(r0, Err(Error::AttachTimeout { .. })), "{r0:?}");
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn bad_arguments_are_typed() {
    assert!(matches!(
        Node::init("bad/id", 0, 1, cfg()),
        Err(Error::InvalidJobId { .. })
    ));
    assert!(matches!(
        Node::init("", 0, 1, cfg()),
        Err(Error::InvalidJobId { .. })
    ));
    assert!(matches!(
        Node::init("ok", 2, 2, cfg()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn put_get_signal_and_bounds() {
    let j = job("putget");
    let res = ranks(&j, 2, cfg(), |r, n| {
        let mut n = n.unwrap();
        let buf = n.malloc(4096).unwrap();
        let sig = n.malloc(8).unwrap();
        let ctr = n.malloc(8).unwrap();
        // Same call sequence, same symmetric addresses.
        assert_eq!((buf, sig, ctr), (SymAddr(0), SymAddr(4096), SymAddr(4160)));
        let peer = 1 - r;
        let data: Vec<u8> = (0..4096u32).map(|i| (i as u8) ^ (r as u8 * 0x55)).collect();
        n.put_signal(peer, buf, &data, sig, 1).unwrap();
        n.wait_until(sig, peer, |v| v == 1).unwrap();
        let mut got = vec![0u8; 4096];
        n.get(r, buf, &mut got).unwrap();
        let want: Vec<u8> = (0..4096u32)
            .map(|i| (i as u8) ^ (peer as u8 * 0x55))
            .collect();
        assert_eq!(got, want, "rank {r} sees its peer's put");
        // Atomics on a peer's heap.
        n.atomic_u64(0, ctr.offset(0))
            .unwrap()
            .fetch_add(10, Ordering::AcqRel);
        n.quiet();
        assert!(matches!(
            n.put(peer, SymAddr((1 << 20) - 4), &[0; 8]),
            Err(Error::OutOfBounds { offset, len: 8, .. }) if offset == (1 << 20) - 4
        ));
        assert!(matches!(
            n.get(5, buf, &mut got),
            Err(Error::BadPe { pe: 5, size: 2 })
        ));
        assert!(n.atomic_u64(0, SymAddr(4)).is_err());
        n.free(buf).unwrap();
        n
    });
    // Both added 10 to the counter on rank 0.
    let v = res[0]
        .atomic_u64(0, SymAddr(4160))
        .unwrap()
        .load(Ordering::Acquire);
    assert_eq!(v, 20);
}

#[test]
fn cma_single_copy_or_clear_fallback() {
    let j = job("cma");
    let c = Config {
        cma: CmaMode::Auto,
        ..cfg()
    };
    ranks(&j, 1, c, |_r, n| {
        let n = n.unwrap();
        let src = vec![7u8; 10_000];
        let mut dst = vec![0u8; 10_000];
        match n.cma_status().clone() {
            shmem_onesided::CmaStatus::Available => {
                n.cma_read(0, src.as_ptr() as u64, &mut dst).unwrap();
                assert_eq!(dst, src);
                n.cma_write(0, dst.as_mut_ptr() as u64, &[9u8; 100])
                    .unwrap();
                assert_eq!(dst[..100], [9u8; 100]);
                assert_eq!(dst[100], 7);
            }
            shmem_onesided::CmaStatus::Unavailable(why) => {
                eprintln!("CMA unavailable here ({why}); checking the typed fallback error");
                assert!(matches!(
                    n.cma_read(0, src.as_ptr() as u64, &mut dst),
                    Err(Error::CmaUnavailable { .. })
                ));
            }
        }
    });
    let off = Config {
        cma: CmaMode::Off,
        ..cfg()
    };
    ranks(&job("cmaoff"), 1, off, |_r, n| {
        let n = n.unwrap();
        let mut d = [0u8; 8];
        assert!(matches!(
            n.cma_read(0, d.as_ptr() as u64, &mut d),
            Err(Error::CmaUnavailable { .. })
        ));
    });
}

fn spec(source: u32, tag: u32) -> MatchSpec {
    MatchSpec {
        context_id: 3,
        source: Source::Rank(source),
        tag: Tag::Value(tag),
    }
}

/// Every path between two ranks, with a 2-slot ring and a small eager area
/// so that sends queue locally: order per tag, fragments, truncation.
#[test]
fn all_paths_in_order_with_backpressure() {
    use std::sync::{Arc, Barrier};
    let j = job("paths");
    let c = Config {
        ring_slots: 2,
        // Not a multiple of 64: the largest eager message is still 8128 B.
        eager_bytes: 8200,
        cma: CmaMode::Off,
        ..cfg()
    };
    let bar = Arc::new(Barrier::new(2));
    let sizes = [0usize, 1, 8, 40, 41, 1000, 5000, 8128];
    let big: Vec<u8> = (0..20_000u32).map(|k| (k % 253) as u8).collect();
    let out = ranks(&j, 2, c, move |r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        if r == 0 {
            for (i, &s) in sizes.iter().enumerate() {
                let data: Vec<u8> = (0..s).map(|k| (k + i) as u8).collect();
                ep.send(1, i as u32 % 2, 3, &data).unwrap();
            }
            assert!(ep.queued() > 0, "a 2-slot ring must queue");
            bar.wait();
            // Larger than the eager area without CMA: fragments.
            ep.send(1, 5, 3, &big).unwrap();
            ep.send(1, 9, 3, &[1; 100]).unwrap();
        } else {
            bar.wait();
            // Tag 1 first: matching skips the tag-0 messages but keeps order per tag.
            let mut buf = vec![0u8; 9000];
            for (i, &s) in sizes.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
                let st = ep.recv(spec(0, 1), &mut buf).unwrap();
                assert_eq!((st.source, st.tag, st.len, st.msg_len), (0, 1, s, s));
                assert!(buf[..s]
                    .iter()
                    .enumerate()
                    .all(|(k, b)| *b == (k + i) as u8));
            }
            for (i, &s) in sizes.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
                let st = ep.recv(spec(0, 0), &mut buf).unwrap();
                assert_eq!(st.len, s);
                assert!(buf[..s]
                    .iter()
                    .enumerate()
                    .all(|(k, b)| *b == (k + i) as u8));
            }
            let mut bigbuf = vec![0u8; 20_000];
            let st = ep.recv(spec(0, 5), &mut bigbuf).unwrap();
            assert_eq!((st.len, &bigbuf[..]), (20_000, &big[..]));
            // Truncation is not an error: exactly the buffer is written, the
            // status says how long the message was, and it is consumed.
            let mut t = [7u8; 14];
            let st = ep.recv(spec(0, 9), &mut t[..10]).unwrap();
            assert_eq!((st.len, st.msg_len, st.truncated()), (10, 100, true));
            assert_eq!(t, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 7, 7, 7, 7]);
            assert_eq!(ep.try_recv(spec(0, 9), &mut buf).unwrap(), None);
        }
        ep.finalize().unwrap()
    });
    let (c0, c1) = (out[0], out[1]);
    assert_eq!(
        (c0.inline_sends, c0.buffered_sends, c0.fragmented_sends),
        (4, 5, 1),
        "{c0}"
    );
    assert_eq!((c1.received, c1.truncated), (10, 1), "{c1}");
    assert!(c0.backpressure_events > 0 && c0.index_rereads > 0, "{c0}");
    assert!(c0.to_string().contains("backpressure events"));
}

/// Sends to this rank itself, every size and path, blocking and not: a local
/// copy through the matcher, in order, each complete at once.
#[test]
fn self_send_all_sizes_in_order() {
    let j = job("self");
    let c = Config {
        eager_bytes: 8200,
        ..cfg()
    };
    ranks(&j, 1, c, |_r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        let sizes = [0usize, 1, 40, 41, 8128, 20_000, 100_000];
        for (i, &s) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..s).map(|k| (k + i) as u8).collect();
            if i % 2 == 0 {
                ep.send(0, 4, 3, &data).unwrap();
            } else {
                let r = ep
                    .isend(0, 4, 3, data, shmem_onesided::SendMode::Standard)
                    .unwrap();
                assert!(ep.is_complete(r.id()));
                assert_eq!(ep.wait_send(r).unwrap().map(|v| v.len()), Some(s));
            }
        }
        assert_eq!(ep.queued(), 0);
        let mut buf = vec![0u8; 100_000];
        for (i, &s) in sizes.iter().enumerate() {
            let st = ep.recv(spec(0, 4), &mut buf).unwrap();
            assert_eq!((st.source, st.tag, st.len, st.msg_len), (0, 4, s, s));
            assert!(buf[..s]
                .iter()
                .enumerate()
                .all(|(k, b)| *b == (k + i) as u8));
        }
        let c = ep.finalize().unwrap();
        assert_eq!((c.self_sends, c.received, c.inline_sends), (7, 7, 0), "{c}");
    });
}

/// The prepost primitive on the real segment: the receiver advertises a
/// buffer in its symmetric heap, the sender claims it, puts the data straight
/// there (no eager copy) and marks it done; a second prepost is withdrawn.
#[test]
fn prepost_direct_put_over_the_segment() {
    use shmem_onesided::prepost::{Claimer, PostState, Poster, Prepost, Withdraw};
    let j = job("prepost");
    ranks(&j, 2, cfg(), |r, n| {
        let mut n = n.unwrap();
        let buf = n.malloc(256).unwrap();
        let seg = n.segment();
        if r == 1 {
            // receiver
            let ring = seg.prepost(1, 0);
            let mut po = Poster::new();
            // Receives as tm-match's offload model hands them to an engine:
            // (tag, mask) from the TagLayout, plus the sync count.
            let p = |tag, cookie| {
                let e = TagLayout::DEFAULT
                    .match_bits(MatchSpec {
                        context_id: 1,
                        source: Source::Rank(0),
                        tag,
                    })
                    .unwrap();
                Prepost {
                    tag: e.tag,
                    mask: e.mask,
                    count: 0,
                    capacity: 256,
                    offset: buf.0,
                    cookie,
                    flags: 0,
                }
            };
            let i = po.post(ring, &p(Tag::Any, 7)).unwrap();
            let i2 = po.post(ring, &p(Tag::Value(43), 8)).unwrap();
            let len = loop {
                match po.state(ring, i) {
                    PostState::Done(len) => break len,
                    PostState::Posted | PostState::Claimed => std::thread::yield_now(),
                    PostState::Withdrawn => panic!("nobody withdrew entry {i}"),
                }
            };
            let mut got = vec![0u8; len as usize];
            n.get(1, buf, &mut got).unwrap();
            assert_eq!(got, b"straight into the receive buffer");
            // Tag 42 matched the ANY_TAG entry, not the tag-43 one, which can
            // still be withdrawn.
            assert_eq!(po.withdraw(ring, i2), Withdraw::Withdrawn);
        } else {
            // sender
            let ring = seg.prepost(1, 0);
            let mut cl = Claimer::new();
            let c = loop {
                let msg_tag = TagLayout::DEFAULT
                    .encode(tm_proto::Envelope {
                        context_id: 1,
                        source: 0,
                        tag: 42,
                    })
                    .unwrap();
                // The engine's rule: the first entry that matches, if it is
                // in phase.
                let mut scan = tm_match::offload::EngineScan::new(msg_tag);
                if let Some(c) = cl.claim_first(ring, |p| scan.offer(&p.entry()) && p.count == 0) {
                    break c;
                }
                std::thread::yield_now();
            };
            assert_eq!(c.prepost.cookie, 7);
            let msg = b"straight into the receive buffer";
            assert!(msg.len() as u64 <= c.prepost.capacity);
            n.put(1, SymAddr(c.prepost.offset), msg).unwrap();
            cl.complete(ring, &c, msg.len() as u64);
        }
    });
}

/// A name that already exists (a stale job with the same id) is reported,
/// and left alone: it is not ours to remove.
#[test]
fn existing_segment_is_reported_not_removed() {
    let j = job("exists");
    let path = format!("/dev/shm/tmx-{j}-shmem");
    std::fs::write(&path, b"stale").unwrap();
    let r = Node::init(&j, 0, 1, cfg());
    let still_there = std::path::Path::new(&path).exists();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(r, Err(Error::SegmentExists { .. })), "{r:?}");
    assert!(still_there);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    const LENS: &[usize] = &[0, 5, 40, 41, 300, 3000];

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Rank 1 sends through a 2-slot ring and an 8 KiB eager area while
        /// rank 0 receives in a random order of (possibly wildcard) tags:
        /// every receive gets exactly the oldest matching message, as MPI
        /// says, whatever was queued locally or relieved under eager
        /// pressure.
        #[test]
        fn matches_like_the_reference(
            sends in proptest::collection::vec((0u32..3, 0usize..LENS.len()), 1..40),
            recvs in proptest::collection::vec(proptest::option::of(0u32..3), 1..60),
        ) {
            let c = Config { ring_slots: 2, eager_bytes: 8192, cma: CmaMode::Off, ..cfg() };
            let j = job("model");
            let mut reference: Vec<(u32, Vec<u8>)> = Vec::new();
            for (i, (tag, l)) in sends.iter().enumerate() {
                let data: Vec<u8> = (0..LENS[*l]).map(|k| (k * 7 + i) as u8).collect();
                reference.push((*tag, data));
            }
            let sender = {
                let (j, c, msgs) = (j.clone(), c.clone(), reference.clone());
                std::thread::spawn(move || {
                    let mut ep = Endpoint::new(Node::init(&j, 1, 2, c).unwrap());
                    for (tag, data) in msgs {
                        ep.send(0, tag, 3, &data).unwrap();
                    }
                    ep.finalize().unwrap()
                })
            };
            let mut ep = Endpoint::new(Node::init(&j, 0, 2, c).unwrap());
            let mut buf = vec![0u8; 4096];
            for want in recvs {
                let spec = MatchSpec {
                    context_id: 3,
                    source: Source::Rank(1),
                    tag: want.map_or(Tag::Any, Tag::Value),
                };
                match reference.iter().position(|(t, _)| want.is_none_or(|w| w == *t)) {
                    Some(i) => {
                        let (tag, data) = reference.remove(i);
                        let st = ep.recv(spec, &mut buf).unwrap();
                        prop_assert_eq!((st.tag, st.len), (tag, data.len()));
                        prop_assert_eq!(&buf[..st.len], &data[..]);
                    }
                    None => prop_assert_eq!(ep.try_recv(spec, &mut buf).unwrap(), None),
                }
            }
            // Drain the rest in order.
            for (tag, data) in reference {
                let st = ep.recv(MatchSpec { context_id: 3, source: Source::Any, tag: Tag::Any }, &mut buf).unwrap();
                prop_assert_eq!((st.tag, &buf[..st.len]), (tag, &data[..]));
            }
            let c = ep.finalize().unwrap();
            prop_assert_eq!(c.received as usize, sends.len());
            let c1 = sender.join().unwrap();
            prop_assert_eq!(c1.inline_sends + c1.buffered_sends, sends.len() as u64);
        }
    }
}

/// Whether this machine lets the calibration run for 2 local ranks: CMA
/// permitted and at least 2 CPUs online.
fn calibration_possible(n: &Node) -> bool {
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let two_cpus = online.contains('-') || online.contains(',');
    *n.cma_status() == shmem_onesided::CmaStatus::Available && two_cpus
}

#[test]
fn cma_calibration_agrees_on_every_rank_and_leaves_the_transport_clean() {
    let j = job("calib");
    let c = Config {
        cma_calibrate: true,
        calibrate_deadline: LOAD_PROOF,
        ..cfg()
    };
    let defaults = c.clone();
    let seen = ranks(&j, 2, c, move |r, n| {
        let n = n.unwrap();
        let possible = calibration_possible(&n);
        let cal = n.calibration().cloned();
        let got = n.config().clone();
        // The eager areas the calibration used carry messages afterwards:
        // every size it measured, through the eager path and by CMA, with
        // the bytes checked.
        let mut ep = Endpoint::new(n);
        for (i, len) in [8usize << 10, 16 << 10, 40 << 10, 64 << 10, 100 << 10]
            .into_iter()
            .enumerate()
        {
            let tag = i as u32;
            if r == 0 {
                let data: Vec<u8> = (0..len).map(|b| (b * 7 + i) as u8).collect();
                ep.send(1, tag, 3, &data).unwrap();
            } else {
                let mut buf = vec![0u8; len];
                let st = ep.recv(spec(0, tag), &mut buf).unwrap();
                assert_eq!(st.len, len);
                assert!(buf.iter().enumerate().all(|(b, &x)| x == (b * 7 + i) as u8));
            }
        }
        ep.finalize().unwrap();
        (possible, cal, got)
    });
    for (r, (possible, cal, got)) in seen.iter().enumerate() {
        if !possible {
            assert_eq!(*cal, None, "rank {r}: cannot run here, must report None");
            continue;
        }
        let cal = cal.as_ref().expect("calibration ran");
        assert_eq!(
            cal.raised_to,
            seen[0].1.as_ref().unwrap().raised_to,
            "ranks agree"
        );
        if r == 0 {
            assert_eq!(cal.points.len(), 4, "rank 0 measured 8..64 KiB");
            for p in &cal.points {
                assert!(
                    p.eager_ns > 0 && p.cma_ns > 0 && p.cma_ns < u64::MAX,
                    "{p:?}"
                );
            }
        } else {
            assert!(cal.points.is_empty());
        }
        let mut want = defaults.clone();
        cal.apply(&mut want);
        assert_eq!(
            (got.cma_threshold, got.cma_reply, got.cma_duplex),
            (want.cma_threshold, want.cma_reply, want.cma_duplex)
        );
        if let Some(s) = cal.raised_to {
            assert!(got.cma_threshold >= s && got.cma_reply >= s && got.cma_duplex >= s);
        } else {
            assert_eq!(got.cma_threshold, defaults.cma_threshold);
        }
        eprintln!("rank {r}: {cal:?}");
    }
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn cma_calibration_off_or_impossible_keeps_the_thresholds() {
    let off = cfg();
    assert!(!off.cma_calibrate);
    let seen = ranks(&job("calib-off"), 2, off.clone(), |_r, n| {
        let n = n.unwrap();
        (n.calibration().cloned(), n.config().cma_threshold)
    });
    assert!(seen
        .iter()
        .all(|(c, t)| c.is_none() && *t == off.cma_threshold));
    // Without CMA there is nothing to compare; on one rank nobody to
    // compare with.
    let no_cma = Config {
        cma: CmaMode::Off,
        cma_calibrate: true,
        ..cfg()
    };
    let seen = ranks(&job("calib-nocma"), 2, no_cma, |_r, n| {
        n.unwrap().calibration().cloned()
    });
    assert!(seen.iter().all(Option::is_none));
    let one = Config {
        cma_calibrate: true,
        ..cfg()
    };
    let seen = ranks(&job("calib-one"), 1, one, |_r, n| {
        n.unwrap().calibration().cloned()
    });
    assert_eq!(seen, vec![None]);
}

#[test]
fn cma_calibration_on_one_rank_only_is_bounded_and_keeps_the_thresholds() {
    // A configuration mismatch: rank 0 calibrates, rank 1 does not (and
    // then the other way round). Neither may hang: rank 0 gives up
    // once it sees rank 1 decline (or at the deadline), and both keep the
    // static thresholds.
    for calibrating in [0u32, 1] {
        let j = job("calib-mismatch");
        let t0 = std::time::Instant::now();
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let j = j.clone();
                let c = Config {
                    cma_calibrate: r == calibrating,
                    ..cfg()
                };
                std::thread::spawn(move || {
                    let n = Node::init(&j, r, 2, c).unwrap();
                    (n.calibration().cloned(), n.config().cma_threshold)
                })
            })
            .collect();
        for h in hs {
            let (cal, t) = h.join().unwrap();
            assert_eq!(cal, None);
            assert_eq!(t, cfg().cma_threshold);
        }
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(1), "took {took:?}");
    }
}

/// A calibration deadline far beyond the ~10 ms a calibration takes, for
/// the tests about its outcome (not its bound): on a loaded machine the
/// default can pass while a rank is descheduled.
const LOAD_PROOF: Duration = Duration::from_secs(60);

/// The context id the inline reply calibration tests give it.
const CALIB_CTX: u32 = 9;

fn reply_cfg() -> Config {
    Config {
        ring_slots: 64,
        inline_calibrate: true,
        // Below every measured size, so that all four are measured.
        inline_ext: 128,
        ..cfg()
    }
}

#[test]
fn inline_reply_calibration_measures_only_sizes_above_the_inline_ext_cap() {
    // The default inline-ext cap (512 B) already sends 256 and 512 B
    // inline in any pattern: only 768 and 1024 B are left to decide.
    let c = Config {
        inline_ext: Config::default().inline_ext,
        calibrate_deadline: LOAD_PROOF,
        ..reply_cfg()
    };
    assert_eq!(c.inline_ext, 512);
    let seen = ranks(&job("rcalib-ext"), 2, c, move |_r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        let cal = ep.calibrate_inline_reply_within(CALIB_CTX, 2).unwrap();
        let cap = ep.reply_cap();
        ep.finalize().unwrap();
        (cal, cap)
    });
    let first = seen[0].0.clone().expect("rank 0 calibrated");
    let sizes: Vec<u64> = first.points.iter().map(|p| p.bytes).collect();
    assert_eq!(sizes, vec![768, 1024]);
    assert_eq!(
        first.lowered_to,
        shmem_onesided::decide_reply(&first.points, 512)
    );
    for (cal, cap) in &seen {
        let lowered = cal.as_ref().expect("both learn the outcome").lowered_to;
        assert_eq!(*cap as u64, lowered.unwrap_or(1024));
        assert!(*cap >= 512, "never below the inline-ext cap: {cap}");
    }
}

#[test]
fn inline_reply_calibration_agrees_on_every_rank_and_leaves_the_endpoint_clean() {
    // Three ranks (as if on three CPUs): rank 2 only learns the outcome.
    let j = job("rcalib");
    let c = Config {
        calibrate_deadline: LOAD_PROOF,
        ..reply_cfg()
    };
    let seen = ranks(&j, 3, c, move |r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        let before = ep.reply_cap();
        let cal = ep.calibrate_inline_reply_within(CALIB_CTX, 3).unwrap();
        let after = ep.reply_cap();
        // Nothing of the calibration counts or stays behind.
        let counters = ep.counters();
        let any = MatchSpec {
            context_id: CALIB_CTX,
            source: Source::Any,
            tag: Tag::Any,
        };
        assert_eq!(
            ep.iprobe(any).unwrap(),
            None,
            "rank {r}: a calibration message left over"
        );
        // Replies of every measured size still arrive whole, whichever
        // way the cap sends them.
        for (i, len) in [256usize, 300, 512, 700, 768, 1000, 1024]
            .into_iter()
            .enumerate()
        {
            let tag = i as u32;
            let data: Vec<u8> = (0..len).map(|b| (b * 3 + i) as u8).collect();
            let mut buf = vec![0u8; len];
            match r {
                0 => {
                    ep.send(1, tag, 3, &data).unwrap();
                    let st = ep.recv(spec(1, tag), &mut buf).unwrap();
                    assert_eq!((st.len, &buf), (len, &data));
                }
                1 => {
                    let st = ep.recv(spec(0, tag), &mut buf).unwrap();
                    assert_eq!((st.len, &buf), (len, &data));
                    ep.send(0, tag, 3, &data).unwrap();
                }
                _ => {}
            }
        }
        ep.finalize().unwrap();
        (before, cal, after, counters)
    });
    let first = seen[0].1.clone().expect("rank 0 calibrated");
    assert_eq!(first.points.len(), 4, "256, 512, 768 and 1024 B: {first:?}");
    for (k, p) in first.points.iter().enumerate() {
        assert_eq!(p.bytes, shmem_onesided::REPLY_SIZES[k]);
        assert!(p.inline_ns > 0 && p.inline_ns < u64::MAX, "{p:?}");
        assert!(p.eager_ns > 0 && p.eager_ns < u64::MAX, "{p:?}");
    }
    assert_eq!(
        first.lowered_to,
        shmem_onesided::decide_reply(&first.points, 128),
        "rank 0 applies its own rule"
    );
    for (r, (before, cal, after, counters)) in seen.iter().enumerate() {
        let cal = cal.as_ref().expect("every rank learns the outcome");
        assert_eq!(cal.lowered_to, first.lowered_to, "rank {r} agrees");
        if r > 0 {
            assert!(cal.points.is_empty());
        }
        assert_eq!(*before, 1024);
        assert_eq!(*after as u64, cal.lowered_to.unwrap_or(1024), "rank {r}");
        assert_eq!(*counters, shmem_onesided::Counters::default(), "rank {r}");
        eprintln!("rank {r}: {cal:?}");
    }
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn inline_reply_calibration_cut_short_leaves_nothing_queued() {
    // Rank 1 comes late: rank 0's wait for the answer to its first ping
    // ends first (half the deadline), then rank 1 answers that ping. No
    // message of the exchange may stay queued on either rank: an eager one
    // would hold its sender's block, and any keeps the unexpected queue
    // from ever being empty.
    use std::sync::{Arc, Barrier};
    let j = job("rcalib-late");
    let c = Config {
        calibrate_deadline: Duration::from_millis(1000),
        ..reply_cfg()
    };
    let both = Arc::new(Barrier::new(2));
    let seen = ranks(&j, 2, c, move |r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        if r == 1 {
            std::thread::sleep(Duration::from_millis(700));
        }
        let cal = ep.calibrate_inline_reply_within(CALIB_CTX, 2).unwrap();
        let cap = ep.reply_cap();
        // Both returned: what the other sent is in the ring by now.
        both.wait();
        let any = MatchSpec {
            context_id: CALIB_CTX,
            source: Source::Any,
            tag: Tag::Any,
        };
        let left = ep.iprobe(any).unwrap().map(|st| (st.tag, st.msg_len));
        let stored = (ep.unexpected_stored(), ep.uncopied_eager());
        both.wait();
        ep.finalize().unwrap();
        (cal, cap, left, stored)
    });
    for (r, s) in seen.iter().enumerate() {
        assert_eq!(*s, (None, 1024, None, (0, 0)), "rank {r}");
    }
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn an_unreceived_eager_message_leaves_the_receivers_waits_idle() {
    // A message no receive takes holds its sender's eager block, which
    // matters only once that sender runs short of space (it raises its
    // pressure flag). Until then a progress pass has nothing to do for
    // it, so the receiver's waits keep their idle look.
    use std::sync::{Arc, Barrier};
    let j = job("leftover-idle");
    let c = Config {
        cma: CmaMode::Off,
        ..cfg()
    };
    let both = Arc::new(Barrier::new(2));
    ranks(&j, 2, c, move |r, n| {
        let mut ep = Endpoint::new(n.unwrap());
        if r == 0 {
            ep.send(1, 77, 3, &[5u8; 4000]).unwrap();
            both.wait();
            both.wait();
        } else {
            both.wait();
            while ep.unexpected_stored() == 0 {
                ep.progress().unwrap();
            }
            assert_eq!(
                ep.uncopied_eager(),
                1,
                "the message waits in an eager block"
            );
            ep.progress().unwrap();
            assert!(ep.idle_now(), "a pass would do nothing");
            // Its receive still finds it whole.
            let mut buf = [0u8; 4000];
            let st = ep.recv(spec(0, 77), &mut buf).unwrap();
            assert_eq!(st.len, 4000);
            assert!(buf.iter().all(|&b| b == 5));
            assert_eq!(ep.uncopied_eager(), 0);
            both.wait();
        }
        ep.finalize().unwrap();
    });
    assert!(shm_leftovers(&j).is_empty());
}

#[test]
fn inline_reply_calibration_off_or_impossible_keeps_the_cap() {
    let run = |name: &str, size: u32, c: Config, cpus: usize| {
        ranks(&job(name), size, c, move |_r, n| {
            let mut ep = Endpoint::new(n.unwrap());
            let cal = ep.calibrate_inline_reply_within(CALIB_CTX, cpus).unwrap();
            let cap = ep.reply_cap();
            ep.finalize().unwrap();
            (cal, cap)
        })
    };
    // Off; one rank; more ranks than CPUs; a cap that leaves nothing to
    // measure (at most the inline-ext cap).
    let off = Config {
        inline_calibrate: false,
        ..reply_cfg()
    };
    assert!(run("rcalib-off", 2, off, 2)
        .iter()
        .all(|s| *s == (None, 1024)));
    assert_eq!(run("rcalib-one", 1, reply_cfg(), 2), vec![(None, 1024)]);
    assert!(run("rcalib-cpus", 3, reply_cfg(), 2)
        .iter()
        .all(|s| *s == (None, 1024)));
    let small = Config {
        inline_reply: 200,
        ..reply_cfg()
    };
    assert!(run("rcalib-small", 2, small, 2)
        .iter()
        .all(|s| *s == (None, 200)));
}

#[test]
fn inline_reply_calibration_on_one_rank_only_is_bounded_and_keeps_the_cap() {
    // A configuration mismatch: neither rank may hang, and both keep the
    // configured cap.
    for calibrating in [0u32, 1] {
        let j = job("rcalib-mismatch");
        let t0 = std::time::Instant::now();
        let seen = ranks(&j, 2, reply_cfg(), move |r, n| {
            let mut ep = Endpoint::new(n.unwrap());
            let cal = if r == calibrating {
                ep.calibrate_inline_reply_within(CALIB_CTX, 2).unwrap()
            } else {
                None
            };
            let cap = ep.reply_cap();
            // The other rank finalizes at once; the calibrating one must
            // come back by its deadlines.
            (cal, cap)
        });
        assert!(seen.iter().all(|s| *s == (None, 1024)), "{seen:?}");
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(5), "took {took:?}");
        assert!(shm_leftovers(&j).is_empty());
    }
}
