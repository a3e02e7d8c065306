//! Send cancellation (`Endpoint::cancel_send`): a send nobody has
//! matched is withdrawn, and its wait returns although the receiver never
//! receives it; a matched one is not, and completes normally. The
//! receiver here is busy in a blocking receive of another message while
//! the sender cancels (the case MPI requires to work: the sender's wait
//! must not depend on the receiver receiving).
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use shmem_onesided::{Config, Endpoint, SendMode};
use std::time::Duration;
use tm_proto::{MatchSpec, Source, Tag};

mod common;

fn cfg() -> Config {
    Config {
        ring_slots: 8,
        heap_bytes: 1 << 20,
        eager_bytes: 1 << 20,
        attach_timeout: Duration::from_secs(20),
        ..Config::default()
    }
}

fn spec(source: u32, tag: u32) -> MatchSpec {
    MatchSpec {
        context_id: 4,
        source: Source::Rank(source),
        tag: Tag::Value(tag),
    }
}

/// Rank 0 sends `len` bytes in `mode` with tag 1 and cancels it; rank 1
/// is blocked receiving tag 2 meanwhile, which rank 0 sends after its
/// wait with whether the cancel succeeded; rank 1 then receives tag 1 if
/// it was not cancelled, and checks that it is (not) there.
fn cancel_while_receiver_blocked(name: &str, len: usize, mode: SendMode) -> Vec<bool> {
    common::endpoint_ranks(
        common::job("cancel", name),
        2,
        cfg(),
        move |me, mut ep: Endpoint| {
            let out = if me == 0 {
                let s = ep.isend(1, 1, 4, vec![7u8; len], mode).unwrap();
                let ok = ep.cancel_send(&s).unwrap();
                ep.wait_send(s).unwrap();
                ep.send(1, 2, 4, &[u8::from(ok)]).unwrap();
                assert!(ep.counters().cancelled_sends <= 1);
                ok
            } else {
                let mut flag = [9u8];
                ep.recv(spec(0, 2), &mut flag).unwrap();
                let cancelled = flag[0] == 1;
                let mut buf = vec![0u8; len];
                let there = ep.iprobe(spec(0, 1)).unwrap().is_some();
                if cancelled {
                    assert!(!there, "a withdrawn message is still there");
                } else {
                    let st = ep.recv(spec(0, 1), &mut buf).unwrap();
                    assert_eq!(st.len, len);
                    assert!(buf.iter().all(|b| *b == 7));
                }
                cancelled
            };
            ep.finalize().unwrap();
            out
        },
    )
}

#[test]
fn unmatched_synchronous_sends_are_withdrawn() {
    for (i, len) in [1usize, 100, 60_000].into_iter().enumerate() {
        let got = cancel_while_receiver_blocked(&format!("sync{i}"), len, SendMode::Synchronous);
        assert_eq!(got, vec![true, true], "{len}-byte synchronous send");
    }
}

#[test]
fn unmatched_rendezvous_sends_are_withdrawn() {
    // Larger than the eager area: CMA if available (withdrawn), otherwise
    // fragmented (never withdrawn, received in full).
    let got = cancel_while_receiver_blocked("big", 3 << 20, SendMode::Standard);
    assert_eq!(got[0], got[1], "the receiver sees what cancel said");
}

#[test]
fn a_matched_send_is_not_withdrawn() {
    let r = common::endpoint_ranks(common::job("cancel", "matched"), 2, cfg(), |me, mut ep| {
        let ok = if me == 0 {
            // Wait until rank 1's receive has matched (its go-ahead).
            let mut go = [0u8];
            let s = ep
                .isend(1, 1, 4, vec![3u8; 100], SendMode::Synchronous)
                .unwrap();
            ep.recv(spec(1, 3), &mut go).unwrap();
            let ok = ep.cancel_send(&s).unwrap();
            ep.wait_send(s).unwrap();
            ok
        } else {
            let mut buf = [0u8; 100];
            ep.recv(spec(0, 1), &mut buf).unwrap();
            ep.send(0, 3, 4, &[1]).unwrap();
            false
        };
        ep.finalize().unwrap();
        ok
    });
    assert_eq!(r, vec![false, false]);
}
