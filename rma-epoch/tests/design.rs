//! Tests of the design's mechanisms: O(active targets) memory, pools and
//! their restore paths, the LOCK_ALL fallback, the target lock queue, and
//! typed errors on misuse and malformed packets.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use common::{all, one, op, u64b, Sim};
use proptest::prelude::*;
use rma_epoch::{
    assert, AccOp, AccessState, Action, Call, CallStatus, ElemType, Engine, Error, GlobalConfig,
    LockHolder, TargetState, WindowConfig,
};
use tm_proto::rma::{RmaFlags, RmaHeader, RmaKind, RmaPacket};

const W: u32 = 0;

/// A driver for a few engines that live in a huge communicator: only the
/// listed ranks exist.
struct Sparse {
    ranks: Vec<u32>,
    engines: Vec<Engine>,
    mem: Vec<Vec<u8>>,
    sent: usize,
}

impl Sparse {
    fn new(p: u32, ranks: &[u32]) -> Self {
        let mut engines = Vec::new();
        for &r in ranks {
            let mut e = Engine::default();
            e.create_window(WindowConfig::new(p, r, 64)).unwrap();
            engines.push(e);
        }
        Sparse {
            ranks: ranks.to_vec(),
            engines,
            mem: vec![vec![0; 64]; ranks.len()],
            sent: 0,
        }
    }

    fn idx(&self, r: u32) -> usize {
        self.ranks.iter().position(|x| *x == r).unwrap()
    }

    /// Delivers everything (FIFO overall, which is one valid interleaving).
    fn settle(&mut self) {
        loop {
            let mut moved = false;
            for i in 0..self.engines.len() {
                while let Some(a) = self.engines[i].poll_action() {
                    moved = true;
                    if let Action::Send { to, bytes } = a {
                        self.sent += 1;
                        let j = self.idx(to);
                        let from = self.ranks[i];
                        self.engines[j]
                            .handle_packet(from, &bytes, self.mem[j].as_mut_slice())
                            .unwrap();
                    }
                }
            }
            if !moved {
                break;
            }
        }
    }
}

#[test]
fn million_ranks_three_active_targets_allocate_three() {
    // The same traffic in a communicator of 10^6 and of 10^7 ranks costs the
    // same bytes.
    let small = three_targets_in(1_000_000);
    let large = three_targets_in(10_000_000);
    assert_eq!(small, large, "window bytes depend on P");
    eprintln!("window footprint with three targets: {small} bytes");
    // 1024 slots of 24 bytes plus a few KiB of elements; an O(P) array of
    // even one byte per rank would be 10^6.
    assert!(small < 64 * 1024, "footprint {small} bytes");
}

/// Runs a lock_all epoch with four puts to each of three targets on a window
/// of `p` ranks; returns the origin's window footprint at its peak.
fn three_targets_in(p: u32) -> usize {
    let targets = [7u32, 500_000, 999_999];
    let mut ranks = vec![0u32];
    ranks.extend(targets);
    let mut s = Sparse::new(p, &ranks);
    let e = &mut s.engines[0];
    // The op table is a fixed slot array, not O(P).
    assert_eq!(e.table_size(W).unwrap(), (1024, 0));
    assert_eq!(e.lock_all(W, 0).unwrap(), CallStatus::Done);
    for (i, &t) in targets.iter().enumerate() {
        for k in 0..4u64 {
            let st = e.put(W, t, k * 8, &u64b(i as u64 * 10 + k)).unwrap();
            assert_eq!(st.status, CallStatus::Done);
        }
    }
    let (ops, tgts) = e.window_pools(W).unwrap();
    assert_eq!(tgts.constructed, 3, "three target elements, whatever P is");
    assert_eq!(tgts.in_use, 3);
    assert_eq!(ops.constructed, 12);
    assert_eq!(e.table_size(W).unwrap(), (1024, 3));
    assert_eq!(e.global_pools().0.constructed, 0);
    assert_eq!(e.global_pools().1.constructed, 0);
    let peak = e.footprint(W).unwrap();
    assert_eq!(e.unlock_all(W).unwrap(), CallStatus::Pending);
    s.settle();
    // Per-target protocol: one packet per op at most, plus answers; never a
    // message per rank of the communicator.
    // Per target: the first put carries the LOCK, the last the UNLOCK; one
    // LOCK_OP_ACK and one ACK come back.
    assert_eq!(s.sent, 3 * (4 + 2));
    assert_eq!(s.engines[0].blocked(W), None);
    for (i, &t) in targets.iter().enumerate() {
        let j = s.idx(t);
        assert_eq!(
            u64::from_ne_bytes(s.mem[j][24..32].try_into().unwrap()),
            i as u64 * 10 + 3
        );
        assert_eq!(*s.engines[j].lock_holder(W).unwrap(), LockHolder::Free);
    }
    let (ops, tgts) = s.engines[0].window_pools(W).unwrap();
    assert_eq!((ops.in_use, tgts.in_use), (0, 0));
    // A fence epoch to the same three targets needs no more.
    let e = &mut s.engines[0];
    e.fence(W, assert::NOPRECEDE).unwrap();
    e.handle_barrier_complete(W).unwrap();
    for &t in &targets {
        e.accumulate(W, t, 0, &u64b(1), ElemType::U64, AccOp::Sum)
            .unwrap();
    }
    assert_eq!(e.window_pools(W).unwrap().1.constructed, 3);
    peak.max(e.footprint(W).unwrap())
}

#[test]
fn lock_all_falls_back_to_window_protocol() {
    for seed in 0..20 {
        let n = 5;
        let mut s = Sim::new(
            n,
            seed,
            GlobalConfig {
                op_global_pool: 0,
                target_global_pool: 0,
            },
        );
        s.create_window((n * 8) as u64, |c| c.target_win_pool = 1);
        one(&mut s, 0, Call::UnlockAll, |e| e.lock_all(W, 0));
        for t in 1..n as u32 {
            op(&mut s, 0, |e| e.put(W, t, 0, &u64b(t as u64)));
            op(&mut s, 0, |e| {
                e.accumulate(W, t, 8, &u64b(2), ElemType::U64, AccOp::Sum)
            });
        }
        let c = s.procs[0].counters(W).unwrap();
        assert_eq!(c.lock_all_fallbacks, 1);
        assert!(c.restore_target >= 2);
        assert_eq!(
            s.procs[0].access_state(W).unwrap(),
            AccessState::LockAllGranted
        );
        one(&mut s, 0, Call::UnlockAll, |e| e.unlock_all(W));
        s.settle(10_000);
        for t in 1..n {
            assert_eq!(s.read_u64(t, W, 0), t as u64);
            assert_eq!(s.read_u64(t, W, 1), 2);
            assert_eq!(
                *s.procs[t].lock_holder(W).unwrap(),
                LockHolder::Free,
                "seed {seed} rank {t}"
            );
        }
        assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
        assert!(s.procs[0].is_quiescent(W));
    }
}

#[test]
fn lock_all_nocheck_sends_no_lock() {
    let mut s = Sim::new(3, 1, GlobalConfig::default());
    s.create_window(16, |_| {});
    one(&mut s, 0, Call::UnlockAll, |e| {
        e.lock_all(W, assert::NOCHECK)
    });
    assert_eq!(
        s.procs[0].access_state(W).unwrap(),
        AccessState::LockAllGranted
    );
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(3)));
    one(&mut s, 0, Call::UnlockAll, |e| e.unlock_all(W));
    let c = s.procs[0].counters(W).unwrap();
    assert_eq!((c.lock_packets, c.unlock_packets), (0, 0));
    assert_eq!(s.read_u64(1, W, 0), 3);
}

#[test]
fn lock_queue_buffers_data_then_discards_when_full() {
    let mut s = Sim::new(3, 3, GlobalConfig::default());
    s.create_window(32, |c| c.lock_data_bytes = 8);
    // Rank 0 holds its own lock.
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 0, 0));
    op(&mut s, 0, |e| e.put(W, 0, 0, &u64b(1)));
    one(&mut s, 0, Call::Flush, |e| e.flush(W, 0));
    // Ranks 1 and 2: LOCK piggybacked on a put; 8 bytes of buffer for both.
    for r in 1..3 {
        one(&mut s, r, Call::Lock, |e| e.lock(W, true, 0, 0));
        op(&mut s, r, |e| {
            e.put(W, 0, r as u64 * 8, &u64b(10 + r as u64))
        });
        one(&mut s, r, Call::FlushLocal, |e| {
            e.flush_local(W, 0).map(|_| CallStatus::Done)
        });
        s.settle(1000);
    }
    let c = s.procs[0].counters(W).unwrap();
    assert_eq!(c.lock_data_queued, 1);
    assert_eq!(c.lock_data_discarded, 1);
    assert_eq!(s.procs[0].lock_queue(W).unwrap(), (2, 8));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 0));
    for r in 1..3 {
        s.finish(r, W, Call::FlushLocal, CallStatus::Pending);
        one(&mut s, r, Call::Unlock, |e| e.unlock(W, 0));
    }
    s.settle(1000);
    assert_eq!(s.read_u64(0, W, 1), 11);
    assert_eq!(s.read_u64(0, W, 2), 12);
    let retrans: u64 = (1..3)
        .map(|r| s.procs[r].counters(W).unwrap().retransmits)
        .sum();
    assert_eq!(retrans, 1, "the discarded op is re-sent after the grant");
    assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
    assert_eq!(s.procs[0].lock_queue(W).unwrap(), (0, 0));
}

#[test]
fn lock_discarded_when_queue_full_is_retried() {
    for seed in 0..10 {
        let mut s = Sim::new(4, seed, GlobalConfig::default());
        s.create_window(32, |c| c.lock_entries = 1);
        one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 0, 0));
        op(&mut s, 0, |e| e.put(W, 0, 0, &u64b(1)));
        one(&mut s, 0, Call::Flush, |e| e.flush(W, 0));
        let mut st = Vec::new();
        for r in 1..4 {
            one(&mut s, r, Call::Lock, |e| e.lock(W, true, 0, 0));
            op(&mut s, r, |e| {
                e.accumulate(W, 0, 8, &u64b(r as u64), ElemType::U64, AccOp::Sum)
            });
            st.push(s.procs[r].unlock(W, 0).unwrap());
        }
        s.pump_all();
        for _ in 0..200 {
            s.deliver_one();
        }
        assert!(s.procs[0].counters(W).unwrap().locks_discarded > 0);
        one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 0));
        for (i, x) in st.into_iter().enumerate() {
            s.finish(i + 1, W, Call::Unlock, x);
        }
        s.settle(100_000);
        assert_eq!(s.read_u64(0, W, 1), 6);
        assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
    }
}

#[test]
fn nocheck_lock_sends_no_lock_and_flushes_instead_of_unlock() {
    let mut s = Sim::new(2, 1, GlobalConfig::default());
    s.create_window(8, |_| {});
    let before = s.sent;
    one(&mut s, 0, Call::Lock, |e| {
        e.lock(W, false, 1, assert::NOCHECK)
    });
    assert_eq!(
        s.procs[0].target_state(W, 1).unwrap(),
        Some(TargetState::LockGranted)
    );
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(4)));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    // PUT(FLUSH) and its ACK.
    assert_eq!(s.sent - before, 2);
    let c = s.procs[0].counters(W).unwrap();
    assert_eq!((c.lock_packets, c.unlock_packets), (0, 0));
    assert_eq!(s.procs[1].counters(W).unwrap().locks_granted_at_once, 0);
    assert_eq!(s.read_u64(1, W, 0), 4);
}

#[test]
fn restore_target_in_lock_mode_and_recreated_nocheck_target() {
    let mut s = Sim::new(
        4,
        4,
        GlobalConfig {
            op_global_pool: 0,
            target_global_pool: 0,
        },
    );
    s.create_window(32, |c| c.target_win_pool = 1);
    one(&mut s, 0, Call::Lock, |e| {
        e.lock(W, false, 1, assert::NOCHECK)
    });
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(1)));
    // The second lock needs the only element: target 1 is flushed and freed.
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 2, 0));
    assert_eq!(s.procs[0].target_state(W, 1).unwrap(), None);
    op(&mut s, 0, |e| e.put(W, 2, 0, &u64b(2)));
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 3, 0));
    op(&mut s, 0, |e| e.put(W, 3, 0, &u64b(3)));
    // Re-created targets have lost MODE_NOCHECK: target 1 receives an UNLOCK
    // it never granted and tolerates it.
    for t in [1u32, 2, 3] {
        one(&mut s, 0, Call::Unlock, |e| e.unlock(W, t));
    }
    s.settle(1000);
    assert_eq!(s.procs[1].counters(W).unwrap().spurious_unlocks, 1);
    for t in 1..4 {
        assert_eq!(s.read_u64(t, W, 0), t as u64);
        assert_eq!(*s.procs[t].lock_holder(W).unwrap(), LockHolder::Free);
    }
    assert!(s.procs[0].counters(W).unwrap().restore_target >= 2);
    assert_eq!(s.procs[0].access_state(W).unwrap(), AccessState::Unset);
}

#[test]
fn element_returns_to_the_pool_it_came_from() {
    let mut s = Sim::new(
        2,
        1,
        GlobalConfig {
            op_global_pool: 4,
            target_global_pool: 4,
        },
    );
    s.create_window(8, |c| c.op_win_pool = 1);
    all(&mut s, Call::Fence, |e, _| e.fence(W, 0));
    for v in 0..3 {
        op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(v)));
    }
    let (w, _) = s.procs[0].window_pools(W).unwrap();
    let (g, _) = s.procs[0].global_pools();
    assert_eq!(
        (w.in_use, g.in_use),
        (1, 2),
        "window pool first, then global"
    );
    all(&mut s, Call::Fence, |e, _| e.fence(W, assert::NOSUCCEED));
    let (w, _) = s.procs[0].window_pools(W).unwrap();
    let (g, _) = s.procs[0].global_pools();
    assert_eq!((w.in_use, g.in_use), (0, 0));
    assert_eq!((w.high_water, g.high_water), (1, 2));
    assert_eq!(s.read_u64(1, W, 0), 2);
}

#[test]
fn two_windows_share_the_global_pool() {
    let mut s = Sim::new(
        2,
        5,
        GlobalConfig {
            op_global_pool: 2,
            target_global_pool: 0,
        },
    );
    s.create_window(16, |c| c.op_win_pool = 1);
    s.create_window(16, |c| c.op_win_pool = 1);
    for w in 0..2u32 {
        let st: Vec<_> = (0..2).map(|r| s.procs[r].fence(w, 0).unwrap()).collect();
        for (r, x) in st.into_iter().enumerate() {
            s.finish(r, w, Call::Fence, x);
        }
    }
    for i in 0..10u64 {
        for w in 0..2u32 {
            let p = s.procs[0].put(w, 1, 0, &u64b(i + w as u64)).unwrap();
            s.finish(0, w, Call::Op, p.status);
            s.pools_ok();
        }
    }
    for w in 0..2u32 {
        let st: Vec<_> = (0..2)
            .map(|r| s.procs[r].fence(w, assert::NOSUCCEED).unwrap())
            .collect();
        for (r, x) in st.into_iter().enumerate() {
            s.finish(r, w, Call::Fence, x);
        }
    }
    assert_eq!(s.read_u64(1, 0, 0), 9);
    assert_eq!(s.read_u64(1, 1, 0), 10);
    assert!(s.procs[0].global_pools().0.high_water <= 2);
}

#[test]
fn pscw_ops_wait_for_the_post() {
    let mut s = Sim::new(2, 6, GlobalConfig::default());
    s.create_window(8, |c| c.piggyback_threshold = 0);
    one(&mut s, 0, Call::Complete, |e| e.start(W, &[1], 0));
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(1)));
    s.settle(100);
    assert_eq!(s.sent, 0, "nothing may reach the target before its post");
    one(&mut s, 1, Call::Wait, |e| e.post(W, &[0], 0));
    one(&mut s, 0, Call::Complete, |e| e.complete(W));
    one(&mut s, 1, Call::Wait, |e| e.wait(W));
    assert_eq!(s.read_u64(1, W, 0), 1);
}

#[test]
fn misuse_returns_typed_errors() {
    let mut e = Engine::default();
    assert!(matches!(e.fence(3, 0), Err(Error::NoSuchWindow(3))));
    let w = e.create_window(WindowConfig::new(2, 0, 16)).unwrap();
    assert!(matches!(e.put(w, 1, 0, &[1]), Err(Error::NoEpoch { .. })));
    assert!(matches!(
        e.unlock(w, 1),
        Err(Error::WrongEpoch { call: "unlock", .. })
    ));
    assert!(matches!(
        e.complete(w),
        Err(Error::WrongEpoch {
            call: "complete",
            ..
        })
    ));
    assert!(matches!(
        e.flush(w, 1),
        Err(Error::WrongEpoch { call: "flush", .. })
    ));
    assert!(matches!(e.wait(w), Err(Error::WrongExposure { .. })));
    assert!(matches!(e.test(w), Err(Error::WrongExposure { .. })));
    assert!(matches!(
        e.lock(w, true, 2, 0),
        Err(Error::RankOutOfRange { rank: 2, .. })
    ));
    e.lock_all(w, 0).unwrap();
    assert!(matches!(
        e.fence(w, 0),
        Err(Error::WrongEpoch { call: "fence", .. })
    ));
    assert!(matches!(
        e.lock(w, true, 1, 0),
        Err(Error::WrongEpoch { call: "lock", .. })
    ));
    assert!(matches!(e.start(w, &[1], 0), Err(Error::WrongEpoch { .. })));
    assert!(matches!(
        e.accumulate(w, 1, 0, &[1, 2, 3], ElemType::U64, AccOp::Sum),
        Err(Error::InvalidAccumulate { .. })
    ));
    assert!(matches!(
        e.accumulate(w, 1, 0, &[1], ElemType::Byte, AccOp::Sum),
        Err(Error::InvalidAccumulate { .. })
    ));
    assert!(matches!(
        e.compare_and_swap(w, 1, 0, &[1; 8], &[1; 4], ElemType::U64),
        Err(Error::InvalidAccumulate { .. })
    ));
    e.put(w, 1, 0, &[1; 8]).unwrap();
    assert_eq!(e.unlock_all(w).unwrap(), CallStatus::Pending);
    assert!(matches!(
        e.flush_all(w),
        Err(Error::CallInProgress {
            call: "unlock_all",
            ..
        })
    ));
    assert!(matches!(
        e.free_window(w),
        Err(Error::CallInProgress { .. })
    ));
    // Malformed packets and bad senders are errors, not panics.
    let mut mem = vec![0u8; 16];
    assert!(matches!(
        e.handle_packet(1, &[1, 2, 3], mem.as_mut_slice()),
        Err(Error::Packet { from: 1, .. })
    ));
    let flush = RmaHeader::new(RmaKind::Flush, w).to_bytes();
    assert!(matches!(
        e.handle_packet(9, &flush, mem.as_mut_slice()),
        Err(Error::RankOutOfRange { rank: 9, .. })
    ));
    let other = RmaHeader::new(RmaKind::Flush, 7).to_bytes();
    assert!(matches!(
        e.handle_packet(1, &other, mem.as_mut_slice()),
        Err(Error::NoSuchWindow(7))
    ));
    // Configuration.
    let bad = WindowConfig {
        op_win_pool: 0,
        ..WindowConfig::new(2, 0, 8)
    };
    assert!(matches!(e.create_window(bad), Err(Error::Config { .. })));
    assert!(matches!(
        e.create_window(WindowConfig::new(2, 2, 8)),
        Err(Error::Config { .. })
    ));
    let env = |k: &str| (k == "TMX_RMA_SLOTS").then(|| "lots".to_string());
    assert!(matches!(
        WindowConfig::from_lookup(2, 0, 8, env),
        Err(Error::Config {
            name: "TMX_RMA_SLOTS",
            ..
        })
    ));
    let env = |k: &str| (k == "TMX_RMA_OP_WIN_POOL").then(|| "7".to_string());
    assert_eq!(
        WindowConfig::from_lookup(2, 0, 8, env).unwrap().op_win_pool,
        7
    );
    let env = |k: &str| (k == "TMX_RMA_DELAY_ISSUING").then(|| "0".to_string());
    assert!(
        !WindowConfig::from_lookup(2, 0, 8, env)
            .unwrap()
            .delay_issuing
    );
    let env = |k: &str| (k == "TMX_RMA_OP_GLOBAL_POOL").then(|| "-1".to_string());
    assert!(GlobalConfig::from_lookup(env).is_err());
}

fn any_packet(win: u32) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(RmaKind::ALL.to_vec()),
        any::<u16>(),
        prop_oneof![Just(u32::MAX), Just(u32::MAX - 1), 0u32..4, any::<u32>()],
        prop_oneof![0u32..4, any::<u32>()],
        0u64..40,
        0u32..24,
        0u8..7,
        0u8..12,
    )
        .prop_map(move |(kind, flags, op_id, sync_id, disp, len, elem, acc)| {
            let h = RmaHeader::new(kind, win)
                .with_flags(RmaFlags(flags))
                .with_ids(op_id, sync_id)
                .with_target(disp, len)
                .with_acc(
                    tm_proto::rma::AccOp::try_from(acc).unwrap(),
                    tm_proto::rma::ElemType::try_from(elem).unwrap(),
                );
            let payload = vec![7u8; h.payload_len().unwrap()];
            let pkt = RmaPacket {
                header: h,
                payload: &payload,
            };
            let mut b = vec![0u8; pkt.len()];
            pkt.encode(&mut b).unwrap();
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary (well-formed or not) packets in any epoch never panic, and
    /// the engine keeps answering user calls with Ok or a typed error.
    #[test]
    fn hostile_packets_never_panic(
        mode in 0u8..5,
        pkts in prop::collection::vec((0u32..3, prop_oneof![any_packet(0), prop::collection::vec(any::<u8>(), 0..48)]), 1..40),
    ) {
        let mut e = Engine::default();
        e.create_window(WindowConfig { lock_entries: 1, lock_data_bytes: 8, ..WindowConfig::new(3, 0, 32) }).unwrap();
        match mode {
            0 => { e.fence(W, assert::NOPRECEDE).unwrap(); }
            1 => { e.lock(W, true, 1, 0).unwrap(); e.put(W, 1, 0, &[1; 8]).unwrap(); }
            2 => { e.lock_all(W, 0).unwrap(); e.get(W, 2, 0, 8).unwrap(); }
            3 => { e.start(W, &[1, 2], 0).unwrap(); e.post(W, &[1], 0).unwrap(); }
            _ => {}
        }
        let mut mem = vec![0u8; 32];
        for (from, bytes) in pkts {
            let _ = e.handle_packet(from, &bytes, mem.as_mut_slice());
            while e.poll_action().is_some() {}
        }
        let _ = e.flush_all(W);
        let _ = e.unlock_all(W);
        let _ = e.fence(W, 0);
        while e.poll_action().is_some() {}
        prop_assert!(e.window_pools(W).unwrap().0.in_use <= 256);
    }
}

#[test]
fn flush_local_returns_before_remote_completion() {
    let mut s = Sim::new(2, 8, GlobalConfig::default());
    s.create_window(16, |_| {});
    one(&mut s, 0, Call::Lock, |e| {
        e.lock(W, true, 1, assert::NOCHECK)
    });
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(5)));
    // Local completion: the put is handed to the transport, nothing delivered.
    assert_eq!(s.procs[0].flush_local(W, 1).unwrap(), CallStatus::Done);
    assert_eq!(s.read_u64(1, W, 0), 0);
    // Remote completion needs the target's ACK.
    op(&mut s, 0, |e| e.put(W, 1, 8, &u64b(6)));
    assert_eq!(s.procs[0].flush(W, 1).unwrap(), CallStatus::Pending);
    s.wait_call(0, W, Call::Flush);
    assert_eq!((s.read_u64(1, W, 0), s.read_u64(1, W, 1)), (5, 6));
    // The element is kept after a flush (lazy release) and freed by unlock.
    assert_eq!(s.procs[0].table_size(W).unwrap().1, 1);
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.procs[0].table_size(W).unwrap().1, 0);
    let text = s.procs[0].counters(W).unwrap().to_string();
    assert!(text.contains("ops issued: 2"), "{text}");
}

#[test]
fn out_of_bounds_ops_are_dropped_and_counted() {
    let mut s = Sim::new(2, 9, GlobalConfig::default());
    s.create_window(16, |_| {});
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| e.put(W, 1, 12, &u64b(1)));
    let g = op(&mut s, 0, |e| e.get(W, 1, u64::MAX - 2, 8));
    op(&mut s, 0, |e| e.put(W, 1, 8, &u64b(2)));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.results[0][&g.token.0], Vec::<u8>::new());
    assert_eq!(s.procs[1].counters(W).unwrap().out_of_bounds, 2);
    assert_eq!((s.read_u64(1, W, 0), s.read_u64(1, W, 1)), (0, 2));
}
