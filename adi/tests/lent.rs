//! Point-to-point operations on lent memory (`Comm::isend_raw`,
//! `Comm::issend_raw`, `Comm::irecv_raw`): sizes across the inline,
//! eager, CMA and pipeline thresholds, receives posted before and after
//! their message, windows of them, `ANY_SOURCE`, truncation and cancel,
//! each with the received bytes (and the bytes around them) checked; on
//! the node-local transport (which receives in place), without CMA, with
//! small preposts, and through the socket test double (which stages).
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::attr::{ANY_SOURCE, ANY_TAG};
use adi::{Comm, Error, Source, Tag};
use std::time::Duration;

/// Sizes across every protocol threshold of the default configuration.
const SIZES: [usize; 14] = [
    0,
    1,
    40,
    41,
    64,
    1000,
    4096,
    8193,
    65_536,
    65_537,
    200_000,
    1 << 20,
    (3 << 20) + 5,
    8 << 20,
];

/// Guard bytes around every receive buffer: never written.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xa5;

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed.wrapping_mul(131) + i * 7 + i / 251) % 253) as u8)
        .collect()
}

/// A receive area of `len` bytes between guards.
fn area(len: usize) -> Vec<u8> {
    vec![GUARD_BYTE; len + 2 * GUARD]
}

/// Checks that `a` holds `want` between untouched guards.
fn check_area(a: &[u8], want: &[u8], what: &str) {
    let len = a.len() - 2 * GUARD;
    assert!(
        a[..GUARD].iter().all(|&b| b == GUARD_BYTE),
        "{what}: guard before written"
    );
    assert!(
        a[GUARD + len..].iter().all(|&b| b == GUARD_BYTE),
        "{what}: guard after written"
    );
    let got = &a[GUARD..GUARD + want.len()];
    if let Some(i) = got.iter().zip(want).position(|(x, y)| x != y) {
        panic!("{what}: byte {i} is {} not {}", got[i], want[i]);
    }
}

/// Every size, rank 0 to rank 1 and back, with the receive posted before
/// its message (the sender waits for a go) and after it (the receiver
/// probes first); both sides lend their memory.
fn role_sizes(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    for (k, &len) in SIZES.iter().enumerate() {
        for posted_first in [true, false] {
            let tag = (2 * k + usize::from(posted_first)) as i32;
            let what = format!("{len} B, posted first {posted_first}");
            // Each rank sends to the other and receives from it.
            let data = pattern(k * 2 + me as usize, len);
            let want = pattern(k * 2 + peer as usize, len);
            let mut a = area(len);
            let recv_ptr = a[GUARD..].as_mut_ptr();
            let mut r = if posted_first {
                // SAFETY: `a` outlives the request and is not touched
                // until the wait below.
                let r = unsafe { w.irecv_raw(recv_ptr, len, peer, tag) }.unwrap();
                w.send(&[], peer, 1000).unwrap();
                w.recv(&mut [], peer, 1000).unwrap();
                r
            } else {
                w.send(&[], peer, 1000).unwrap();
                w.recv(&mut [], peer, 1000).unwrap();
                adi::Request::null()
            };
            // SAFETY: `data` is not touched until the wait below.
            let mut s = unsafe { w.isend_raw(data.as_ptr(), len, peer, tag) }.unwrap();
            if !posted_first {
                let st = w.probe(peer, tag).unwrap();
                assert_eq!(st.count, len, "{what}: probe");
                // SAFETY: as above.
                r = unsafe { w.irecv_raw(recv_ptr, len, peer, tag) }.unwrap();
            }
            let st = w.wait(&mut r).unwrap();
            assert_eq!((st.source, st.tag, st.count), (peer, tag, len), "{what}");
            assert!(!st.cancelled);
            assert!(r.take_buffer().is_none_or(|b| b.is_empty()), "{what}");
            w.wait(&mut s).unwrap();
            check_area(&a, &want, &what);
        }
    }
}

/// Windows of lent receives and sends (as a bandwidth test makes them),
/// synchronous sends among them, both directions at once.
fn role_windows(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    for &len in &[8usize, 4096, 65_536, 1 << 20] {
        let n = 8;
        let mut areas: Vec<Vec<u8>> = (0..n).map(|_| area(len)).collect();
        let datas: Vec<Vec<u8>> = (0..n)
            .map(|j| pattern(len + j * 10 + me as usize, len))
            .collect();
        for round in 0..3 {
            let mut reqs = Vec::new();
            for a in areas.iter_mut() {
                let p = a[GUARD..].as_mut_ptr();
                // SAFETY: `areas` outlives the requests, untouched until
                // the waits below.
                reqs.push(unsafe { w.irecv_raw(p, len, peer, 7) }.unwrap());
            }
            for (j, d) in datas.iter().enumerate() {
                let r = if j % 3 == 1 {
                    // SAFETY: `datas` outlives the requests, unchanged.
                    unsafe { w.issend_raw(d.as_ptr(), len, peer, 7) }
                } else {
                    // SAFETY: as above.
                    unsafe { w.isend_raw(d.as_ptr(), len, peer, 7) }
                };
                reqs.push(r.unwrap());
            }
            let sts = w.waitall(&mut reqs).unwrap();
            for (j, a) in areas.iter_mut().enumerate() {
                assert_eq!(sts[j].count, len);
                let want = pattern(len + j * 10 + peer as usize, len);
                check_area(a, &want, &format!("window {len} B round {round} #{j}"));
                a.fill(GUARD_BYTE);
            }
        }
    }
}

/// `ANY_SOURCE`/`ANY_TAG` lent receives on rank 0 from every other rank
/// (posted before and after the messages), the status naming each sender.
fn role_any_source(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    for &len in &[0usize, 100, 70_000, 2 << 20] {
        if me == 0 {
            let mut areas: Vec<Vec<u8>> = (1..n).map(|_| area(len)).collect();
            let mut reqs = Vec::new();
            for a in areas.iter_mut() {
                let p = a[GUARD..].as_mut_ptr();
                // SAFETY: `areas` outlives the requests.
                reqs.push(unsafe { w.irecv_raw(p, len, Source::Any, Tag::Any) }.unwrap());
            }
            w.barrier().unwrap();
            let sts = w.waitall(&mut reqs).unwrap();
            let mut seen: Vec<i32> = sts.iter().map(|s| s.source).collect();
            seen.sort_unstable();
            assert_eq!(seen, (1..n).collect::<Vec<_>>());
            for (st, a) in sts.iter().zip(&areas) {
                assert_eq!(st.tag, 40 + st.source);
                assert_eq!(st.count, len);
                check_area(a, &pattern(st.source as usize, len), "any source");
            }
            // After the messages: probed first, then received.
            w.barrier().unwrap();
            for _ in 1..n {
                let st = w.probe(ANY_SOURCE, ANY_TAG).unwrap();
                let mut a = area(len);
                let p = a[GUARD..].as_mut_ptr();
                // SAFETY: `a` outlives the request.
                let mut r = unsafe { w.irecv_raw(p, len, st.source, ANY_TAG) }.unwrap();
                let got = w.wait(&mut r).unwrap();
                assert_eq!((got.source, got.count), (st.source, len));
                check_area(&a, &pattern(st.source as usize + 50, len), "probed");
            }
        } else {
            let d = pattern(me as usize, len);
            w.barrier().unwrap();
            w.send(&d, 0, 40 + me).unwrap();
            w.barrier().unwrap();
            w.send(&pattern(me as usize + 50, len), 0, 3).unwrap();
        }
        w.barrier().unwrap();
    }
}

/// A message longer than the lent memory: truncation error with the
/// status of what was delivered, exactly `cap` bytes written; a cancelled
/// lent receive completes cancelled and writes nothing.
fn role_truncation_cancel(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    for &(len, cap) in &[
        (100usize, 10usize),
        (70_000, 1000),
        (2 << 20, 100_000),
        (5, 0),
    ] {
        let data = pattern(len, len);
        if me == 0 {
            w.recv(&mut [], peer, 1).unwrap();
            w.send(&data, peer, 2).unwrap();
        } else {
            let mut a = area(cap);
            let p = a[GUARD..].as_mut_ptr();
            // SAFETY: `a` outlives the request.
            let mut r = unsafe { w.irecv_raw(p, cap, peer, 2) }.unwrap();
            w.send(&[], peer, 1).unwrap();
            match w.wait(&mut r) {
                Err(Error::RecvTruncated { status, msg_len }) => {
                    assert_eq!((status.count, msg_len), (cap, len));
                }
                other => panic!("{len} B into {cap}: {other:?}"),
            }
            check_area(&a, &data[..cap], "truncated");
        }
    }
    // Cancel: never sent, posted on both ranks.
    for &len in &[0usize, 64, 1 << 20] {
        let mut a = area(len);
        let p = a[GUARD..].as_mut_ptr();
        // SAFETY: `a` outlives the request.
        let mut r = unsafe { w.irecv_raw(p, len, peer, 99) }.unwrap();
        assert!(w.cancel(&r).unwrap(), "an unmatched lent receive cancels");
        let st = w.wait(&mut r).unwrap();
        assert!(st.cancelled);
        assert!(a.iter().all(|&b| b == GUARD_BYTE), "cancelled: untouched");
    }
    // Both ranks are past their cancels before either sends with that tag
    // (else the peer's message below may match a receive being cancelled,
    // which then rightly is not cancelled).
    w.barrier().unwrap();
    // The next message with that tag still goes to a later receive.
    let data = pattern(3, 5000);
    let mut a = area(5000);
    let p = a[GUARD..].as_mut_ptr();
    // SAFETY: `a` outlives the request.
    let mut r = unsafe { w.irecv_raw(p, 5000, peer, 99) }.unwrap();
    w.send(&data, peer, 99).unwrap();
    assert_eq!(w.wait(&mut r).unwrap().count, 5000);
    check_area(&a, &data, "after cancel");
    w.barrier().unwrap();
}

#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    let w = adi::init().unwrap();
    match role.as_str() {
        "sizes" => role_sizes(&w),
        "windows" => role_windows(&w),
        "any_source" => role_any_source(&w),
        "truncation_cancel" => role_truncation_cancel(&w),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

fn run(role: &str, n: usize, env: &[(&str, &str)]) {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let code = common::launch(role, n, &env, Duration::from_secs(120));
    assert_eq!(
        code, 0,
        "job {role} -n {n} {env:?}: launcher exit status {code}"
    );
}

const NO_CMA: &[(&str, &str)] = &[("TMX_SHMEM_CMA", "off")];
const SMALL_PREPOST: &[(&str, &str)] = &[("TMX_SHMEM_TUNE", "prepost_min=1K,cma_threshold=64K")];
const ACROSS: &[(&str, &str)] = &[(adi::ENV_TEST_NODES, "2")];

#[test]
fn sizes() {
    run("sizes", 2, &[]);
}

#[test]
fn sizes_without_cma() {
    run("sizes", 2, NO_CMA);
}

#[test]
fn sizes_small_prepost() {
    run("sizes", 2, SMALL_PREPOST);
}

#[test]
fn sizes_across_nodes() {
    run("sizes", 2, ACROSS);
}

#[test]
fn windows() {
    run("windows", 2, &[]);
}

#[test]
fn windows_without_cma() {
    run("windows", 2, NO_CMA);
}

#[test]
fn any_source() {
    run("any_source", 3, &[]);
}

#[test]
fn any_source_across_nodes() {
    run("any_source", 3, ACROSS);
}

#[test]
fn truncation_cancel() {
    run("truncation_cancel", 2, &[]);
}

#[test]
fn truncation_cancel_small_prepost() {
    run("truncation_cancel", 2, SMALL_PREPOST);
}

#[test]
fn truncation_cancel_across_nodes() {
    run("truncation_cancel", 2, ACROSS);
}
