//! In-process tests of the nonblocking and MPI-3 parts of the endpoint API
//! (local ranks are threads, each with its own mapping of the real segment):
//! `isend`/`test_send`/`wait_send` that never block, synchronous mode,
//! self-sends, truncation, probes and matched probes, receive
//! cancellation, and the completion feed.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use shmem_onesided::{
    CmaMode, CmaStatus, Config, Counters, Endpoint, Error, Node, RecvRequest, SendMode,
    SendRequest, Started,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tm_proto::{MatchSpec, Source, Tag};

mod common;

fn job(name: &str) -> String {
    common::job("nb", name)
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

fn no_cma() -> Config {
    Config {
        cma: CmaMode::Off,
        ..cfg()
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
        context_id: 4,
        source: source.map_or(Source::Any, Source::Rank),
        tag: tag.map_or(Tag::Any, Tag::Value),
    }
}

/// `len` bytes of a pattern seeded by `seed`, with period 251: one
/// period computed, then copied (cheap for messages of megabytes in an
/// unoptimised test build).
fn pattern(seed: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len.min(251))
        .map(|i| (seed as usize * 131 + i * 7 % 251) as u8)
        .collect();
    v.reserve_exact(len - v.len());
    while v.len() < len {
        // `v.len()` is a multiple of 251 until the last copy.
        let k = (len - v.len()).min(v.len());
        v.extend_from_within(..k);
    }
    v
}

#[test]
fn pattern_is_its_formula() {
    for len in [0, 1, 250, 251, 252, 502, 503, 4097, 100_000] {
        let slow: Vec<u8> = (0..len).map(|i| (7 * 131 + i * 7 % 251) as u8).collect();
        assert!(pattern(7, len) == slow, "len {len}");
    }
}

fn cma(ep: &Endpoint) -> bool {
    *ep.node().cma_status() == CmaStatus::Available
}

const BIG: usize = 4 << 20;

/// The classic deadlock if `isend` blocked: both ranks start large sends
/// (CMA, or fragments without CMA) to each other before either receives,
/// then exchange small messages (a "barrier"), then wait. `wait_first`:
/// wait for the sends before posting the receives (CMA: the waiting rank
/// pulls the crossed message aside; fragments: progress drains them).
fn crossing(cfg: Config, wait_first: bool) {
    let out = ranks("cross", 2, cfg, move |me, mut ep| {
        let peer = 1 - me;
        let owned = ep
            .isend(peer, 1, 4, pattern(me, BIG), SendMode::Standard)
            .unwrap();
        let second = pattern(me + 10, BIG);
        let borrowed = ep
            .isend_borrowed(peer, 2, 4, &second, SendMode::Standard)
            .unwrap();
        if cma(&ep) {
            // Nothing can have read it: no progress ran yet.
            assert!(!ep.is_complete(owned.id()) && !ep.is_complete(borrowed.id()));
        }
        // The barrier: small messages queue behind the large ones (same
        // pair, non-overtaking) and still get through.
        ep.send(peer, 3, 4, &[me as u8; 8]).unwrap();
        let mut b = [0u8; 8];
        let st = ep.recv(spec(Some(peer), Some(3)), &mut b).unwrap();
        assert_eq!((st.len, b), (8, [peer as u8; 8]));
        let mut got1 = vec![0u8; BIG];
        let mut got2 = vec![0u8; BIG];
        if wait_first {
            assert_eq!(ep.wait_send(owned).unwrap().unwrap(), pattern(me, BIG));
            assert_eq!(ep.wait_send(borrowed).unwrap(), None);
            ep.recv(spec(Some(peer), Some(1)), &mut got1).unwrap();
            ep.recv(spec(Some(peer), Some(2)), &mut got2).unwrap();
        } else {
            let r1 = ep.irecv(spec(Some(peer), Some(1)), got1).unwrap();
            ep.recv(spec(Some(peer), Some(2)), &mut got2).unwrap();
            assert_eq!(ep.wait_send(owned).unwrap().unwrap(), pattern(me, BIG));
            assert_eq!(ep.wait_send(borrowed).unwrap(), None);
            got1 = ep.wait(r1).unwrap().1;
        }
        assert!(got1 == pattern(peer, BIG), "first large message");
        assert!(got2 == pattern(peer + 10, BIG), "second large message");
        (cma(&ep), ep.finalize().unwrap())
    });
    for (cma, c) in out {
        if cma {
            assert_eq!(c.cma_sends, 2, "{c}");
        } else {
            assert_eq!(c.fragmented_sends, 2, "{c}");
        }
    }
}

#[test]
fn isend_large_both_ways_then_barrier_then_wait() {
    crossing(cfg(), false);
    crossing(cfg(), true);
}

#[test]
fn isend_fragments_both_ways_then_barrier_then_wait() {
    crossing(no_cma(), false);
    crossing(no_cma(), true);
}

/// Rank 0 starts `n` `isend`s of `len` bytes to rank 1 (a window that
/// overflows the 1 MiB eager area; with `last_pending`, the last one must
/// still be pending before rank 1 receives), then rank 1 receives them in
/// order and checks every byte. Rank 0's counters, or `None` without CMA.
fn overflow_window(name: &str, n: u32, len: usize, last_pending: bool) -> Option<Counters> {
    let bar = Arc::new(Barrier::new(2));
    // The two-copy paths under test: CMA only where they give way to it
    // (the default threshold, 32K, would send every message by CMA).
    let two_copy = Config {
        cma_threshold: 8 << 20,
        ..cfg()
    };
    let mut out = ranks(name, 2, two_copy, move |me, mut ep| {
        if !cma(&ep) {
            return None;
        }
        if me == 0 {
            let reqs: Vec<SendRequest> = (0..n)
                .map(|k| {
                    ep.isend(1, 9, 4, pattern(k, len), SendMode::Standard)
                        .unwrap()
                })
                .collect();
            if last_pending {
                assert!(!ep.is_complete(reqs[n as usize - 1].id()));
            }
            bar.wait();
            for (k, r) in reqs.into_iter().enumerate() {
                assert!(ep.wait_send(r).unwrap().unwrap() == pattern(k as u32, len));
            }
        } else {
            // Receive only once every send has been started.
            bar.wait();
            for k in 0..n {
                let mut b = vec![0u8; len];
                let st = ep.recv(spec(Some(0), Some(9)), &mut b).unwrap();
                assert_eq!(st.len, len);
                assert!(b == pattern(k, len), "message {k} out of order or corrupt");
            }
        }
        Some(ep.finalize().unwrap())
    });
    out.swap_remove(0)
}

/// A window of large `isend`s that overflows the eager area: the first go
/// buffered, the rest by CMA rendezvous (never copied aside), in order, and
/// every byte arrives.
#[test]
fn eager_area_overflow_goes_by_cma_not_staging() {
    const N: u32 = 16;
    if let Some(c) = overflow_window("overflow", N, 96 << 10, false) {
        // 1 MiB eager area: some fit, the others go by pointer.
        assert!(c.buffered_sends > 0 && c.cma_sends > 0, "{c}");
        assert_eq!(c.buffered_sends + c.cma_sends, u64::from(N), "{c}");
        assert_eq!(c.staged_sends, 0, "{c}");
    }
}

/// A window of owned pipelined `isend`s (above `TMX_SHMEM_TUNE=pipeline_min`)
/// that overflows the eager area: with CMA available none goes by CMA (the
/// pipeline is faster than the receiver's `process_vm_readv`); what does
/// not fit waits in its request and is published by progress, in order,
/// without a copy aside.
#[test]
fn pipelined_overflow_waits_for_eager_space_not_cma() {
    const N: u32 = 12;
    // 3 MiB through a 1 MiB eager area the receiver does not drain yet:
    // the last ones cannot be out.
    if let Some(c) = overflow_window("pipeover", N, 256 << 10, true) {
        assert_eq!(c.pipelined_sends, u64::from(N), "{c}");
        assert_eq!(c.cma_sends, 0, "{c}");
        assert_eq!(c.staged_sends, 0, "{c}");
    }
}

/// A fragmented `isend` without CMA returns at once with the request
/// pending; `progress` publishes the rest while the receiver drains.
#[test]
fn fragmented_isend_is_progressed_by_progress() {
    let bar = Arc::new(Barrier::new(2));
    ranks("frag", 2, no_cma(), move |me, mut ep| {
        if me == 0 {
            let r = ep
                .isend(1, 9, 4, pattern(3, BIG), SendMode::Standard)
                .unwrap();
            // 4 MiB through a 1 MiB eager area the receiver does not drain
            // yet: cannot be out.
            assert!(!ep.is_complete(r.id()));
            assert!(!ep.test_send(&r).unwrap());
            bar.wait();
            while !ep.test_send(&r).unwrap() {}
            assert_eq!(ep.wait_send(r).unwrap().unwrap().len(), BIG);
        } else {
            bar.wait();
            let mut v = vec![0u8; BIG];
            let st = ep.recv(spec(Some(0), Some(9)), &mut v).unwrap();
            assert_eq!(st.len, BIG);
            assert!(v == pattern(3, BIG));
        }
        ep.finalize().unwrap()
    });
}

/// `ssend` semantics for every path: the send does not complete while the
/// message has arrived but is unmatched (the receiver probes it to be sure
/// it arrived), and completes once the receive is posted.
fn ssend_waits_for_match(cfg: Config, len: usize) {
    let bar = Arc::new(Barrier::new(2));
    let seen = Arc::new(std::sync::atomic::AtomicBool::new(false));
    ranks("ssend", 2, cfg, move |me, mut ep| {
        if me == 0 {
            let data = pattern(5, len);
            let r = ep
                .isend_borrowed(1, 6, 4, &data, SendMode::Synchronous)
                .unwrap();
            // Keep progressing (a fragmented send needs it) until the
            // receiver saw the whole message arrive.
            while !seen.load(Ordering::Acquire) {
                assert!(
                    !ep.test_send(&r).unwrap(),
                    "ssend of {len} B done unmatched"
                );
            }
            for _ in 0..200 {
                assert!(
                    !ep.test_send(&r).unwrap(),
                    "ssend of {len} B done unmatched"
                );
            }
            bar.wait(); // 2: now it may receive
            assert_eq!(ep.wait_send(r).unwrap(), None);
            assert!(ep.counters().sync_sends == 1);
        } else {
            let st = ep.probe(spec(Some(0), Some(6))).unwrap();
            assert_eq!(st.msg_len, len);
            seen.store(true, Ordering::Release);
            bar.wait(); // 2
            let mut v = vec![0u8; len];
            let st = ep.recv(spec(Some(0), Some(6)), &mut v).unwrap();
            assert_eq!(st.len, len);
            assert!(v == pattern(5, len));
        }
        ep.finalize().unwrap()
    });
}

#[test]
fn ssend_not_complete_before_receive_posted() {
    for len in [0, 8, 1000, 100_000] {
        ssend_waits_for_match(cfg(), len);
    }
    // CMA (beyond the eager area; the FIN says "matched").
    ssend_waits_for_match(cfg(), BIG);
    // Fragments without CMA.
    ssend_waits_for_match(no_cma(), BIG);
}

/// A blocking `ssend` against a receive posted first (possibly preposted and
/// written directly: matched by construction), and against a matched probe.
#[test]
fn ssend_against_posted_receive_and_mprobe() {
    let c = Config {
        prepost_min: 41,
        ..cfg()
    };
    let bar = Arc::new(Barrier::new(2));
    ranks("ssend2", 2, c, move |me, mut ep| {
        if me == 0 {
            bar.wait();
            ep.ssend(1, 1, 4, &pattern(1, 5000)).unwrap();
            ep.ssend(1, 2, 4, &pattern(2, 300)).unwrap();
            ep.ssend(1, 3, 4, &pattern(3, BIG)).unwrap();
        } else {
            let r = ep.irecv(spec(Some(0), Some(1)), vec![0; 5000]).unwrap();
            bar.wait();
            let (st, v) = ep.wait(r).unwrap();
            assert_eq!((st.len, v), (5000, pattern(1, 5000)));
            let (m, st) = ep.mprobe(spec(Some(0), None)).unwrap();
            assert_eq!((st.tag, st.msg_len), (2, 300));
            let mut v = vec![0u8; 300];
            ep.mrecv(m, &mut v).unwrap();
            assert!(v == pattern(2, 300));
            let (m, st) = ep.mprobe(spec(Some(0), None)).unwrap();
            assert_eq!((st.tag, st.msg_len), (3, BIG));
            let mut v = vec![0u8; BIG];
            ep.mrecv(m, &mut v).unwrap();
            assert!(v == pattern(3, BIG));
        }
        ep.finalize().unwrap()
    });
}

/// Self-sends go through the matcher: posted `ANY_SOURCE` receives take
/// them in order, later ones are unexpected in order, mixed with a peer's
/// messages each source stays FIFO; a synchronous self-send completes only
/// once received.
#[test]
fn self_send_ordering_with_any_source() {
    let bar = Arc::new(Barrier::new(2));
    ranks("selfany", 2, cfg(), move |me, mut ep| {
        if me == 1 {
            for k in 0..20u32 {
                ep.send(0, k, 4, &pattern(100 + k, 64 + k as usize))
                    .unwrap();
            }
            // Our ring holds 8: the rest waits in the outbox until rank 0
            // drains (a queued send is progressed only inside our calls).
            ep.flush().unwrap();
            bar.wait();
            return ep.finalize().unwrap();
        }
        let any = spec(None, None);
        let posted: Vec<RecvRequest> = (0..3)
            .map(|_| ep.irecv(any, vec![0; 4096]).unwrap())
            .collect();
        // Self-sends of every size, blocking and not.
        let mut reqs: Vec<SendRequest> = Vec::new();
        for k in 0..20u32 {
            let len = [0usize, 7, 40, 41, 3000, 200_000][k as usize % 6];
            if k % 2 == 0 {
                ep.send(0, k, 4, &pattern(k, len)).unwrap();
            } else {
                reqs.push(
                    ep.isend(0, k, 4, pattern(k, len), SendMode::Standard)
                        .unwrap(),
                );
            }
        }
        for r in reqs {
            ep.wait_send(r).unwrap();
        }
        // The three posted receives took the first three self-sends (the
        // peer's messages may have arrived first for some of them: each
        // source is FIFO, and the peer only sends tags 0..20 in order).
        let mut next = [0u32; 2];
        let check = |st: shmem_onesided::Status, buf: &[u8], next: &mut [u32; 2]| {
            let s = st.source as usize;
            assert_eq!(st.tag, next[s], "FIFO from {s}");
            let want = if s == 0 {
                pattern(
                    st.tag,
                    [0usize, 7, 40, 41, 3000, 200_000][st.tag as usize % 6],
                )
            } else {
                pattern(100 + st.tag, 64 + st.tag as usize)
            };
            assert_eq!(st.msg_len, want.len());
            assert!(buf[..st.len] == want[..st.len.min(want.len())]);
            next[s] += 1;
        };
        for r in posted {
            let (st, v) = ep.wait(r).unwrap();
            check(st, &v, &mut next);
        }
        let mut buf = vec![0u8; 200_000];
        while next != [20, 20] {
            let st = ep.recv(any, &mut buf).unwrap();
            check(st, &buf, &mut next);
        }
        // Synchronous self-send: pending until the receive is posted.
        let r = ep
            .isend(0, 77, 4, vec![9; 10], SendMode::Synchronous)
            .unwrap();
        for _ in 0..50 {
            assert!(!ep.test_send(&r).unwrap());
        }
        let mut b = [0u8; 10];
        ep.recv(spec(Some(0), Some(77)), &mut b).unwrap();
        assert!(ep.test_send(&r).unwrap());
        assert_eq!(ep.wait_send(r).unwrap(), Some(vec![9; 10]));
        bar.wait();
        let c = ep.finalize().unwrap();
        assert_eq!(c.self_sends, 21, "{c}");
        c
    });
}

/// Truncation on every path: exactly `buf.len()` bytes are written (guard
/// bytes after a sub-slice stay), the status carries both lengths, the
/// message is consumed (the next receive gets the next message).
fn truncation(cfg: Config) {
    const SIZES: [usize; 5] = [30, 1000, 100_000, 2 << 20, 0];
    let out = ranks("trunc", 2, cfg, |me, mut ep| {
        if me == 0 {
            for (k, &len) in SIZES.iter().enumerate() {
                ep.send(1, k as u32, 4, &pattern(k as u32, len)).unwrap();
                ep.send(1, 100 + k as u32, 4, b"next").unwrap();
            }
            ep.send(1, 50, 4, &pattern(50, 5000)).unwrap();
            // Truncation of a self-send, too.
            ep.send(0, 51, 4, &pattern(51, 300)).unwrap();
            let mut g = [0xeeu8; 20];
            let st = ep.recv(spec(Some(0), Some(51)), &mut g[..16]).unwrap();
            assert_eq!((st.len, st.msg_len), (16, 300));
            assert_eq!(&g[..16], &pattern(51, 300)[..16]);
            assert_eq!(&g[16..], &[0xee; 4]);
        } else {
            for (k, &len) in SIZES.iter().enumerate() {
                let cap = len / 3;
                let mut buf = vec![0xeeu8; cap + 64];
                let st = ep
                    .recv(spec(Some(0), Some(k as u32)), &mut buf[..cap])
                    .unwrap();
                assert_eq!((st.len, st.msg_len), (cap, len), "size {len}");
                assert_eq!(st.truncated(), cap < len);
                assert!(buf[..cap] == pattern(k as u32, len)[..cap], "size {len}");
                assert!(
                    buf[cap..].iter().all(|&b| b == 0xee),
                    "wrote past, size {len}"
                );
                let mut n = [0u8; 4];
                let st = ep
                    .recv(spec(Some(0), Some(100 + k as u32)), &mut n)
                    .unwrap();
                assert_eq!((st.len, &n), (4, b"next"));
            }
            // irecv into a short Vec, and mrecv.
            let (m, st) = ep.mprobe(spec(Some(0), Some(50))).unwrap();
            assert_eq!(st.msg_len, 5000);
            let r = ep.imrecv(m, vec![0; 10]).unwrap();
            let (st, v) = ep.wait(r).unwrap();
            assert_eq!(
                (st.len, st.msg_len, &v[..]),
                (10, 5000, &pattern(50, 5000)[..10])
            );
        }
        ep.finalize().unwrap()
    });
    assert_eq!(out[1].truncated, 5, "{}", out[1]);
}

#[test]
fn truncation_writes_exactly_the_buffer() {
    truncation(cfg());
    truncation(no_cma());
    // With preposts for every size (a prepost too small is never claimed:
    // the message is buffered and truncated in software).
    truncation(Config {
        prepost_min: 41,
        ..cfg()
    });
}

#[test]
fn probe_mprobe_mrecv() {
    let bar = Arc::new(Barrier::new(2));
    ranks("probe", 2, cfg(), move |me, mut ep| {
        if me == 0 {
            ep.send(1, 1, 4, &pattern(1, 100)).unwrap(); // A
            ep.send(1, 2, 4, &pattern(2, 2000)).unwrap(); // B
            ep.send(1, 1, 4, &pattern(3, 30)).unwrap(); // C
            ep.send(1, 3, 4, &pattern(4, BIG)).unwrap(); // D (CMA when available)
            bar.wait();
        } else {
            // Probe: the oldest match, left queued.
            let st = ep.probe(spec(Some(0), Some(1))).unwrap();
            assert_eq!((st.source, st.tag, st.len, st.msg_len), (0, 1, 100, 100));
            let st = ep.probe(spec(None, Some(1))).unwrap();
            assert_eq!(st.msg_len, 100, "probe does not consume");
            assert_eq!(ep.iprobe(spec(Some(0), Some(9))).unwrap(), None);
            // Matched probe takes A out of matching: a receive gets C.
            let (a, st) = ep.improbe(spec(Some(0), Some(1))).unwrap().unwrap();
            assert_eq!(st.msg_len, 100);
            let mut c = [0u8; 30];
            let st = ep.recv(spec(Some(0), Some(1)), &mut c).unwrap();
            assert_eq!((st.len, &c[..]), (30, &pattern(3, 30)[..]));
            let mut av = [0u8; 100];
            let st = ep.mrecv(a, &mut av).unwrap();
            assert_eq!((st.tag, &av[..]), (1, &pattern(1, 100)[..]));
            // mprobe with wildcards, imrecv: complete at once, in the feed.
            let (b, st) = ep.mprobe(spec(None, None)).unwrap();
            assert_eq!((st.tag, st.msg_len), (2, 2000));
            let r = ep.imrecv(b, vec![0; 2000]).unwrap();
            assert!(ep.is_complete(r.id()));
            let mut done = Vec::new();
            ep.take_completed(&mut done);
            assert_eq!(done, vec![r.id()]);
            let (_, v) = ep.wait(r).unwrap();
            assert!(v == pattern(2, 2000));
            let st = ep.probe(spec(None, None)).unwrap();
            assert_eq!((st.tag, st.msg_len), (3, BIG));
            let (d, _) = ep.mprobe(spec(None, Some(3))).unwrap();
            let mut dv = vec![0u8; BIG];
            ep.mrecv(d, &mut dv).unwrap();
            assert!(dv == pattern(4, BIG));
            assert_eq!(ep.improbe(spec(None, None)).unwrap().map(|x| x.1), None);
            bar.wait();
        }
        ep.finalize().unwrap()
    });
}

/// A cancelled receive completes with `cancelled` and hands its buffer
/// back; a message arriving later is received by a later receive (nothing
/// lost). Also for a receive that was preposted (withdrawn), and a receive
/// that already matched cannot be cancelled.
#[test]
fn cancel_recv_then_message_still_received() {
    let c = Config {
        prepost_min: 41,
        ..cfg()
    };
    let bar = Arc::new(Barrier::new(2));
    ranks("cancel", 2, c, move |me, mut ep| {
        if me == 1 {
            let r = ep.irecv(spec(Some(0), Some(7)), vec![3; 64]).unwrap();
            // Exact source and a large buffer: preposted when CMA is on.
            let p = ep.irecv(spec(Some(0), Some(8)), vec![4; 4096]).unwrap();
            let any = ep.irecv(spec(None, Some(9)), vec![5; 64]).unwrap();
            assert!(ep.cancel_recv(&r).unwrap());
            assert!(ep.cancel_recv(&p).unwrap());
            assert!(ep.cancel_recv(&any).unwrap());
            assert!(!ep.cancel_recv(&r).unwrap(), "cancelled twice");
            for (req, fill) in [(r, 3u8), (p, 4), (any, 5)] {
                assert!(ep.is_complete(req.id()));
                let (st, v) = ep.wait(req).unwrap();
                assert!(st.cancelled && st.len == 0, "{st:?}");
                assert!(
                    v.iter().all(|&b| b == fill),
                    "a cancelled buffer was written"
                );
            }
            bar.wait(); // the sender may send now
            let mut b = vec![0u8; 4096];
            for tag in [7, 8, 9] {
                let st = ep.recv(spec(Some(0), Some(tag)), &mut b).unwrap();
                assert_eq!(
                    (st.tag, st.cancelled, st.len),
                    (tag, false, 100 * tag as usize)
                );
                assert!(b[..st.len] == pattern(tag, st.len)[..]);
            }
            // A matched receive cannot be cancelled.
            bar.wait();
            let m = ep.irecv(spec(Some(0), Some(10)), vec![0; 10]).unwrap();
            while !ep.test(&m).unwrap() {}
            assert!(!ep.cancel_recv(&m).unwrap());
            let (st, _) = ep.wait(m).unwrap();
            assert!(!st.cancelled && st.len == 10);
            let c = ep.finalize().unwrap();
            assert_eq!(c.cancelled_recvs, 3, "{c}");
            c
        } else {
            bar.wait();
            for tag in [7, 8, 9] {
                ep.send(1, tag, 4, &pattern(tag, 100 * tag as usize))
                    .unwrap();
            }
            ep.send(1, 10, 4, &[1; 10]).unwrap();
            bar.wait();
            ep.finalize().unwrap()
        }
    });
}

/// The completion feed reports every user request exactly once (including
/// requests complete at once), never internal ones, never one handed to a
/// waiter before it was reported.
#[test]
fn take_completed_reports_each_id_once() {
    ranks("feed", 2, cfg(), |me, mut ep| {
        let peer = 1 - me;
        let mut all = HashSet::new();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for k in 0..30u32 {
            let len = [0usize, 100, 5000, BIG][k as usize % 4];
            let r = ep.irecv(spec(Some(peer), Some(k)), vec![0; len]).unwrap();
            all.insert(r.id());
            recvs.push(r);
            let s = ep
                .isend(peer, k, 4, pattern(k, len), SendMode::Standard)
                .unwrap();
            assert!(all.insert(s.id()), "ids unique across sends and receives");
            sends.push(s);
        }
        // Internal requests (blocking calls) are not reported.
        ep.send(peer, 999, 4, b"x").unwrap();
        let mut b = [0u8; 1];
        ep.recv(spec(Some(peer), Some(999)), &mut b).unwrap();
        let mut seen = Vec::new();
        while seen.len() < all.len() {
            ep.progress().unwrap();
            ep.take_completed(&mut seen);
        }
        let uniq: HashSet<u64> = seen.iter().copied().collect();
        assert_eq!(uniq.len(), seen.len(), "an id reported twice");
        assert_eq!(uniq, all);
        assert!(seen.iter().all(|&id| ep.is_complete(id)));
        for s in sends {
            ep.wait_send(s).unwrap();
        }
        for (k, r) in recvs.into_iter().enumerate() {
            let (st, v) = ep.wait(r).unwrap();
            assert!(v[..st.len] == pattern(k as u32, st.len)[..]);
        }
        let mut more = Vec::new();
        ep.take_completed(&mut more);
        assert!(more.is_empty(), "{more:?}");
        // Waited for before being reported: not reported.
        let s = ep
            .isend(peer, 1000, 4, vec![1; 8], SendMode::Standard)
            .unwrap();
        ep.wait_send(s).unwrap();
        let r = ep.irecv(spec(Some(peer), Some(1000)), vec![0; 8]).unwrap();
        ep.wait(r).unwrap();
        ep.take_completed(&mut more);
        assert!(more.is_empty(), "{more:?}");
        ep.finalize().unwrap()
    });
}

#[test]
fn check_alive_and_bad_arguments() {
    ranks("alive", 2, cfg(), |me, mut ep| {
        let peer = 1 - me;
        ep.check_alive(None).unwrap();
        ep.check_alive(Some(peer)).unwrap();
        assert!(matches!(
            ep.check_alive(Some(5)),
            Err(Error::BadPe { pe: 5, size: 2 })
        ));
        assert!(matches!(
            ep.isend(7, 0, 0, vec![], SendMode::Standard),
            Err(Error::BadPe { pe: 7, .. })
        ));
        let r = ep.irecv(spec(Some(peer), Some(1)), vec![0; 8]).unwrap();
        ep.check_alive(None).unwrap();
        let s = ep
            .isend(peer, 1, 4, vec![2; 8], SendMode::Standard)
            .unwrap();
        assert!(!ep.cancel_send(&s).unwrap());
        ep.wait_send(s).unwrap();
        ep.wait(r).unwrap();
        ep.finalize().unwrap()
    });
}

/// A preposted receive that a sender has claimed (and is writing into)
/// cannot be cancelled: `cancel_recv` answers false and the receive then
/// completes normally with the sender's data. Rank 0 plays the sender by
/// hand with the prepost primitives, so the claim is held across the cancel.
#[test]
fn claimed_prepost_cannot_be_cancelled() {
    use shmem_onesided::prepost::Claimer;
    let j = job("claimed");
    let c = Config {
        prepost_min: 41,
        ..cfg()
    };
    let bar = Arc::new(Barrier::new(2));
    let sender = {
        let (j, c, bar) = (j.clone(), c.clone(), bar.clone());
        std::thread::spawn(move || {
            let node = Node::init(&j, 0, 2, c).unwrap();
            let on = *node.cma_status() == CmaStatus::Available;
            bar.wait(); // 1: the receive is posted
            let ring = node.segment().prepost(1, 0);
            let mut cl = Claimer::new();
            let claim = if on {
                Some(cl.claim_first(ring, |p| p.capacity >= 100).unwrap())
            } else {
                None
            };
            bar.wait(); // 2: claimed
            bar.wait(); // 3: the receiver tried to cancel
            if let Some(claim) = claim {
                node.cma_write(1, claim.prepost.offset, &pattern(5, 100))
                    .unwrap();
                cl.complete(ring, &claim, (5u64 << 32) | 100);
            }
            bar.wait(); // 4
            on
        })
    };
    let mut ep = Endpoint::new(Node::init(&j, 1, 2, c).unwrap());
    let r = ep.irecv(spec(Some(0), Some(5)), vec![0; 4096]).unwrap();
    bar.wait(); // 1
    bar.wait(); // 2
    let on = cma(&ep);
    assert_eq!(ep.cancel_recv(&r).unwrap(), !on, "claimed: not cancellable");
    bar.wait(); // 3
    bar.wait(); // 4
    let on_sender = sender.join().unwrap();
    assert_eq!(on, on_sender);
    let (st, v) = ep.wait(r).unwrap();
    if on {
        assert!(!st.cancelled);
        assert_eq!((st.source, st.tag, st.len), (0, 5, 100));
        assert!(v[..100] == pattern(5, 100)[..]);
        assert_eq!(ep.counters().preposted_hits, 0, "counted by the sender");
    } else {
        assert!(st.cancelled);
    }
    ep.finalize().unwrap();
}

/// Random programs of self-sends (standard and synchronous, owned and
/// borrowed), nonblocking receives with and without wildcards and with
/// short buffers, probes, matched probes and cancels on one rank, against a
/// literal model of MPI matching: after every step each request's
/// completion (a synchronous send: matched) and each probe agree with the
/// model, and at the end every receive got exactly the model's message
/// (truncated to its buffer) or was cancelled, and the completion feed
/// reported exactly the completed requests.
mod self_model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Send {
            tag: u32,
            len: usize,
            sync: bool,
            owned: bool,
        },
        Irecv {
            tag: Option<u32>,
            cap: usize,
        },
        Iprobe {
            tag: Option<u32>,
        },
        Mprobe {
            tag: Option<u32>,
            cap: usize,
        },
        Cancel {
            k: usize,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        let tag = proptest::option::weighted(0.7, 0u32..3);
        prop_oneof![
            3 => (0u32..3, 0usize..3000, any::<bool>(), any::<bool>())
                .prop_map(|(tag, len, sync, owned)| Op::Send { tag, len, sync, owned }),
            3 => (tag.clone(), 0usize..3000).prop_map(|(tag, cap)| Op::Irecv { tag, cap }),
            1 => tag.clone().prop_map(|tag| Op::Iprobe { tag }),
            1 => (tag, 0usize..3000).prop_map(|(tag, cap)| Op::Mprobe { tag, cap }),
            1 => (0usize..8).prop_map(|k| Op::Cancel { k }),
        ]
    }

    /// A receive in the model: pending (`None`), cancelled (`Some(None)`) or
    /// matched to `(tag, data)`.
    type Outcome = Option<Option<(u32, Vec<u8>)>>;

    fn want(tag: Option<u32>) -> MatchSpec {
        spec(Some(0), tag)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn self_programs_match_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            let j = job("selfmodel");
            let mut ep = Endpoint::new(Node::init(&j, 0, 1, cfg()).unwrap());
            // Model state.
            let mut unexpected: Vec<(u32, Vec<u8>, usize)> = Vec::new(); // tag, data, send index
            let mut posted: Vec<(usize, Option<u32>)> = Vec::new(); // recv index, tag
            // Per send: request, data, matched. Per receive: request, cap,
            // outcome (None pending, Some(None) cancelled, Some(Some((tag, data)))).
            let mut sends: Vec<(SendRequest, Vec<u8>, bool, bool)> = Vec::new();
            let mut recvs: Vec<(RecvRequest, usize, Outcome)> = Vec::new();
            let mut borrowed: Vec<Vec<u8>> = Vec::new();
            for (step, o) in ops.iter().enumerate() {
                match o.clone() {
                    Op::Send { tag, len, sync, owned } => {
                        let data = pattern(step as u32, len);
                        let mode = if sync { SendMode::Synchronous } else { SendMode::Standard };
                        let r = if owned {
                            ep.isend(0, tag, 4, data.clone(), mode).unwrap()
                        } else {
                            borrowed.push(data.clone());
                            ep.isend_borrowed(0, tag, 4, borrowed.last().unwrap(), mode).unwrap()
                        };
                        let si = sends.len();
                        sends.push((r, data.clone(), sync, false));
                        match posted.iter().position(|(_, t)| t.is_none_or(|t| t == tag)) {
                            Some(p) => {
                                let (ri, _) = posted.remove(p);
                                recvs[ri].2 = Some(Some((tag, data)));
                                sends[si].3 = true;
                            }
                            None => unexpected.push((tag, data, si)),
                        }
                    }
                    Op::Irecv { tag, cap } => {
                        let r = ep.irecv(want(tag), vec![0xee; cap]).unwrap();
                        let ri = recvs.len();
                        match unexpected.iter().position(|(t, ..)| tag.is_none_or(|w| w == *t)) {
                            Some(u) => {
                                let (t, d, si) = unexpected.remove(u);
                                sends[si].3 = true;
                                recvs.push((r, cap, Some(Some((t, d)))));
                            }
                            None => {
                                recvs.push((r, cap, None));
                                posted.push((ri, tag));
                            }
                        }
                    }
                    Op::Iprobe { tag } => {
                        let got = ep.iprobe(want(tag)).unwrap().map(|st| (st.tag, st.msg_len));
                        let exp = unexpected
                            .iter()
                            .find(|(t, ..)| tag.is_none_or(|w| w == *t))
                            .map(|(t, d, _)| (*t, d.len()));
                        prop_assert_eq!(got, exp, "iprobe at step {}", step);
                    }
                    Op::Mprobe { tag, cap } => {
                        let got = ep.improbe(want(tag)).unwrap();
                        match unexpected.iter().position(|(t, ..)| tag.is_none_or(|w| w == *t)) {
                            Some(u) => {
                                let (t, d, si) = unexpected.remove(u);
                                sends[si].3 = true;
                                let (m, st) = got.unwrap();
                                prop_assert_eq!((st.tag, st.msg_len), (t, d.len()));
                                let mut b = vec![0xeeu8; cap + 8];
                                let st = ep.mrecv(m, &mut b[..cap]).unwrap();
                                let n = cap.min(d.len());
                                prop_assert_eq!((st.len, st.msg_len), (n, d.len()));
                                prop_assert_eq!(&b[..n], &d[..n]);
                                prop_assert!(b[n..].iter().all(|&x| x == 0xee));
                            }
                            None => prop_assert!(got.is_none(), "improbe at step {}", step),
                        }
                    }
                    Op::Cancel { k } => {
                        if let Some((r, _, state)) = recvs.get_mut(k) {
                            let ok = ep.cancel_recv(r).unwrap();
                            let pending = state.is_none();
                            prop_assert_eq!(ok, pending, "cancel at step {}", step);
                            if pending {
                                *state = Some(None);
                                posted.retain(|(ri, _)| *ri != k);
                            }
                        }
                    }
                }
                for (r, _, sync, matched) in &sends {
                    prop_assert_eq!(ep.is_complete(r.id()), !*sync || *matched, "send at step {}", step);
                }
                for (r, _, state) in &recvs {
                    prop_assert_eq!(ep.is_complete(r.id()), state.is_some(), "receive at step {}", step);
                }
            }
            // The feed: exactly the completed requests, each once.
            let mut fed = Vec::new();
            ep.take_completed(&mut fed);
            let fed_set: HashSet<u64> = fed.iter().copied().collect();
            prop_assert_eq!(fed_set.len(), fed.len());
            let done: HashSet<u64> = sends
                .iter()
                .filter(|(_, _, sync, m)| !*sync || *m)
                .map(|(r, ..)| r.id())
                .chain(recvs.iter().filter(|(_, _, s)| s.is_some()).map(|(r, ..)| r.id()))
                .collect();
            prop_assert_eq!(fed_set, done);
            // Post a catch-all for every unmatched message so that every
            // synchronous send completes, then check every receive.
            for _ in 0..unexpected.len() {
                let mut b = vec![0u8; 3000];
                ep.recv(want(None), &mut b).unwrap();
            }
            for (r, data, _, _) in sends {
                let back = ep.wait_send(r).unwrap();
                prop_assert!(back.is_none() || back.as_deref() == Some(&data[..]));
            }
            for (r, cap, mut state) in recvs {
                if state.is_none() {
                    // Still posted (no message for it): cancel it.
                    prop_assert!(ep.cancel_recv(&r).unwrap());
                    state = Some(None);
                }
                let (st, v) = ep.wait(r).unwrap();
                match state {
                    Some(None) => {
                        prop_assert!(st.cancelled);
                        prop_assert!(v.iter().all(|&x| x == 0xee));
                    }
                    Some(Some((t, d))) => {
                        let n = cap.min(d.len());
                        prop_assert!(!st.cancelled);
                        prop_assert_eq!((st.tag, st.len, st.msg_len), (t, n, d.len()));
                        prop_assert_eq!(&v[..n], &d[..n]);
                        prop_assert!(v[n..].iter().all(|&x| x == 0xee));
                    }
                    None => unreachable!("cancelled above"),
                }
            }
            ep.finalize().unwrap();
        }
    }
}

/// A CMA message that a nonblocking receive matches as it is posted (it
/// had arrived first) is not read inside `irecv` / `irecv_or_done`: the
/// receive comes back pending, cannot be cancelled (it has matched), and
/// the next progress pass reads it, including the passes of a `try_recv`
/// that spins for another message which the sender sends only once the
/// first one's FIN came back (a progress dependency that would hang if
/// the copy waited for `wait`).
#[test]
fn cma_matched_by_irecv_is_read_by_the_next_progress_pass() {
    const LEN: usize = 64 << 10;
    let cfg = Config {
        cma_threshold: 4096,
        ..cfg()
    };
    ranks("late", 2, cfg, move |me, mut ep| {
        if !cma(&ep) {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        if me == 1 {
            for tag in [1u32, 2] {
                let data = pattern(tag, LEN);
                let s = ep.isend(0, tag, 4, data, SendMode::Standard).unwrap();
                while !ep.test_send(&s).unwrap() {
                    assert!(std::time::Instant::now() < deadline, "no FIN for tag {tag}");
                }
                assert_eq!(ep.wait_send(s).unwrap().unwrap(), pattern(tag, LEN));
            }
            // Both again, this time through `irecv_or_done`.
            for tag in [3u32, 4] {
                let s = ep
                    .isend(0, tag, 4, pattern(tag, LEN), SendMode::Standard)
                    .unwrap();
                while !ep.test_send(&s).unwrap() {
                    assert!(std::time::Instant::now() < deadline, "no FIN for tag {tag}");
                }
                ep.wait_send(s).unwrap();
            }
        } else {
            for (first, second, or_done) in [(1u32, 2u32, false), (3, 4, true)] {
                // Wait until the first message has arrived (queued unexpected).
                while ep.iprobe(spec(Some(1), Some(first))).unwrap().is_none() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "tag {first} never came"
                    );
                }
                let req = if or_done {
                    match ep
                        .irecv_or_done(spec(Some(1), Some(first)), vec![0u8; LEN])
                        .unwrap()
                    {
                        Started::Pending(r) => r,
                        Started::Done(_) => panic!("a CMA message was read inside irecv_or_done"),
                    }
                } else {
                    ep.irecv(spec(Some(1), Some(first)), vec![0u8; LEN])
                        .unwrap()
                };
                assert!(!ep.is_complete(req.id()), "read inside the receive call");
                assert!(
                    !ep.cancel_recv(&req).unwrap(),
                    "a matched receive was cancelled"
                );
                let mut got = vec![0u8; LEN];
                let st = loop {
                    if let Some(st) = ep.try_recv(spec(Some(1), Some(second)), &mut got).unwrap() {
                        break st;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "tag {second} never came"
                    );
                };
                assert_eq!((st.len, st.tag), (LEN, second));
                assert!(got == pattern(second, LEN), "tag {second} data");
                let (st, v) = ep.wait(req).unwrap();
                assert_eq!((st.len, st.tag, st.cancelled), (LEN, first, false));
                assert!(v == pattern(first, LEN), "tag {first} data");
            }
        }
        let c = ep.finalize().unwrap();
        if me == 1 {
            assert_eq!(c.cma_sends, 4, "{c}");
        }
    });
}

/// Split CMA copies (`TMX_SHMEM_TUNE=cma_split`): a sender waiting for its
/// FIN writes the second half of the receive buffer while the receiver
/// reads the first; a sender that stopped progressing after saying it
/// could help has its offer withdrawn, and the receiver reads the rest;
/// a sender that never said so (busy) has its message read whole. Every
/// way the data arrives intact, also truncated into a shorter buffer.
#[test]
fn cma_split_copies_shared_withdrawn_or_whole() {
    // Sharing needs the sender's thread to run while the receiver reads
    // its half (a millisecond or so for 4 MiB), which a loaded machine
    // (tests in parallel) may not grant: the sender waits for its FIN in
    // short sleeps (a thread that mostly sleeps is run soon after it
    // wakes, where one that spins waits for its turn), and the shared
    // cases are retried, a fresh message each time (cheap to make), until
    // each has happened once or the time for it is up.
    const LEN: usize = (8 << 20) + 4097;
    // The time for the shared cases (within the 60 s deadline).
    const TRY_FOR: Duration = Duration::from_secs(40);
    let cfg = Config {
        cma_threshold: 4096,
        cma_split: 32 << 10,
        ..cfg()
    };
    let gate = Arc::new(Barrier::new(2));
    let more = Arc::new(AtomicBool::new(true));
    let out = ranks("split", 2, cfg, move |me, mut ep| {
        if !cma(&ep) {
            return None;
        }
        let start = std::time::Instant::now();
        let deadline = start + Duration::from_secs(60);
        if me == 1 {
            // 2: withdrawn (one idle pass says READY, then we stop until
            // the receiver is done); 3: whole (never an idle pass before
            // the receiver reads it); then 10, 11, ...: shared (we
            // progress until the FIN), into a full or a shorter buffer.
            let mut tag = 2u32;
            loop {
                let s = ep
                    .isend(0, tag, 4, pattern(tag, LEN), SendMode::Standard)
                    .unwrap();
                if tag != 3 {
                    // Passes with nothing else to do mark the ring READY
                    // (the first may still have work of its own).
                    for _ in 0..3 {
                        ep.progress().unwrap();
                    }
                }
                gate.wait(); // the receiver may start
                if tag == 2 || tag == 3 {
                    gate.wait(); // it has read the message
                }
                while !ep.test_send(&s).unwrap() {
                    assert!(std::time::Instant::now() < deadline, "no FIN for tag {tag}");
                    std::thread::sleep(Duration::from_micros(20));
                }
                assert!(ep.wait_send(s).unwrap().unwrap() == pattern(tag, LEN));
                if tag >= 10 {
                    gate.wait(); // the receiver says whether to go on
                    if !more.load(Ordering::SeqCst) {
                        break;
                    }
                }
                tag = if tag == 3 { 10 } else { tag + 1 };
            }
        } else {
            let (mut full, mut short) = (false, false);
            let mut tag = 2u32;
            loop {
                gate.wait();
                // From tag 10 on: a full buffer until a message was shared
                // into one, then a shorter one (truncated).
                let cap = if full { LEN - 100_000 } else { LEN };
                let before = ep.counters();
                let mut got = vec![0u8; cap];
                let st = ep.recv(spec(Some(1), Some(tag)), &mut got).unwrap();
                assert_eq!((st.len, st.msg_len, st.tag), (cap, LEN, tag));
                assert!(got[..] == pattern(tag, LEN)[..cap], "tag {tag} data");
                let after = ep.counters();
                let shared = after.cma_split_shared - before.cma_split_shared;
                let withdrawn = after.cma_split_withdrawn - before.cma_split_withdrawn;
                match tag {
                    2 => assert_eq!((shared, withdrawn), (0, 1), "tag 2: {after}"),
                    3 => assert_eq!((shared, withdrawn), (0, 0), "tag 3: {after}"),
                    _ => {
                        assert_eq!(shared + withdrawn, 1, "tag {tag}: {after}");
                        full |= shared == 1 && cap == LEN;
                        short |= shared == 1 && cap < LEN;
                    }
                }
                if tag == 2 || tag == 3 {
                    gate.wait();
                } else {
                    let go_on = !(full && short) && start.elapsed() < TRY_FOR;
                    more.store(go_on, Ordering::SeqCst);
                    gate.wait();
                    if !go_on {
                        break;
                    }
                }
                tag = if tag == 3 { 10 } else { tag + 1 };
            }
            let tries = tag - 9;
            assert!(full, "never shared into a full buffer in {tries} tries");
            assert!(short, "never shared into a shorter buffer in {tries} tries");
        }
        Some(ep.finalize().unwrap())
    });
    if let Some(c) = out[1] {
        // At least tags 2, 3 and two shared ones.
        assert!(c.cma_sends >= 4, "{c}");
    }
}
