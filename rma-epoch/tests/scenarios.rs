//! Named tests for scenarios mirrored from MPICH's `test/mpi/rma`, run on the
//! simulator. `sNN_` numbers the scenario; `dNN_` tests run on windows with
//! direct targets.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use common::{all, one, op, u64b, Sim};
use rma_epoch::{
    assert, AccOp, Call, CallStatus, ElemType, GlobalConfig, LockHolder, TargetLock, TargetState,
    WindowConfig, PROC_NULL,
};

const W: u32 = 0;

fn sim(n: usize, cells: usize, seed: u64) -> Sim {
    sim_with(n, cells, seed, |_| {})
}

fn sim_with(n: usize, cells: usize, seed: u64, f: impl Fn(&mut WindowConfig)) -> Sim {
    let mut s = Sim::new(n, seed, GlobalConfig::default());
    s.create_window((cells * 8) as u64, f);
    s
}

fn fence(s: &mut Sim, a: u32) {
    all(s, Call::Fence, |e, _| e.fence(W, a));
}

#[test]
fn s01_fence_put_get_acc() {
    for seed in 0..10 {
        let mut s = sim(2, 8, seed);
        s.write_u64(1, W, 4, 77);
        fence(&mut s, 0);
        for i in 0..3 {
            op(&mut s, 0, |e| e.put(W, 1, i * 8, &u64b(10 + i)));
            op(&mut s, 1, |e| {
                e.accumulate(W, 0, 24, &u64b(i + 1), ElemType::U64, AccOp::Sum)
            });
        }
        let g = op(&mut s, 0, |e| e.get(W, 1, 32, 8));
        fence(&mut s, assert::NOSUCCEED);
        assert_eq!(
            (0..3).map(|i| s.read_u64(1, W, i)).collect::<Vec<_>>(),
            vec![10, 11, 12]
        );
        assert_eq!(s.read_u64(0, W, 3), 6);
        assert_eq!(s.result_u64(0, g), 77);
        assert_eq!(
            s.procs[0].access_state(W).unwrap(),
            rma_epoch::AccessState::Unset
        );
    }
}

#[test]
fn s02_fence_asserts_epochtest() {
    let mut s = sim(3, 4, 2);
    // NOPRECEDE opens without completing anything and does not block.
    for r in 0..3 {
        assert_eq!(
            s.procs[r].fence(W, assert::NOPRECEDE).unwrap(),
            CallStatus::Done
        );
    }
    // Ops posted while the barrier is in flight are queued, not sent.
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(5)));
    assert_eq!(
        s.procs[0].access_state(W).unwrap(),
        rma_epoch::AccessState::FenceIssued
    );
    // A fence both ends one epoch and starts the next (unpaired fences).
    fence(&mut s, 0);
    assert_eq!(s.read_u64(1, W, 0), 5);
    op(&mut s, 2, |e| e.put(W, 0, 8, &u64b(6)));
    fence(&mut s, 0);
    assert_eq!(s.read_u64(0, W, 1), 6);
    op(&mut s, 1, |e| {
        e.accumulate(W, 2, 16, &u64b(3), ElemType::U64, AccOp::Sum)
    });
    fence(&mut s, assert::NOSUCCEED);
    assert_eq!(s.read_u64(2, W, 2), 3);
    // NOPRECEDE|NOSUCCEED: nothing at all.
    let sent = s.sent;
    for r in 0..3 {
        assert_eq!(
            s.procs[r]
                .fence(W, assert::NOPRECEDE | assert::NOSUCCEED)
                .unwrap(),
            CallStatus::Done
        );
    }
    s.settle(1000);
    assert_eq!(s.sent, sent);
    // An op outside any epoch is refused.
    assert!(matches!(
        s.procs[0].put(W, 1, 0, &u64b(1)),
        Err(rma_epoch::Error::NoEpoch { .. })
    ));
}

#[test]
fn s03_manyget_fence_op_pool_pressure() {
    // 200 gets to one target with a window op pool of 4 and no global pool.
    let mut s = Sim::new(
        2,
        3,
        GlobalConfig {
            op_global_pool: 0,
            target_global_pool: 0,
        },
    );
    s.create_window(8 * 64, |c| c.op_win_pool = 4);
    for i in 0..64 {
        s.write_u64(1, W, i, 1000 + i as u64);
    }
    fence(&mut s, 0);
    let toks: Vec<_> = (0..200u64)
        .map(|i| op(&mut s, 0, |e| e.get(W, 1, (i % 64) * 8, 8)))
        .collect();
    fence(&mut s, assert::NOSUCCEED);
    for (i, t) in toks.iter().enumerate() {
        assert_eq!(s.result_u64(0, *t), 1000 + (i % 64) as u64);
    }
    let (ops, _) = s.procs[0].window_pools(W).unwrap();
    assert_eq!(ops.high_water, 4);
    assert!(s.procs[0].counters(W).unwrap().restore_op > 0);
}

#[test]
fn s05_accumulate_to_self() {
    let mut s = sim(2, 4, 5);
    s.write_u64(0, W, 0, 10);
    fence(&mut s, 0);
    for v in [1u64, 2, 3] {
        op(&mut s, 0, |e| {
            e.accumulate(W, 0, 0, &u64b(v), ElemType::U64, AccOp::Sum)
        });
    }
    op(&mut s, 0, |e| {
        e.accumulate(W, 0, 8, &7i64.to_ne_bytes(), ElemType::I64, AccOp::Max)
    });
    fence(&mut s, assert::NOSUCCEED);
    assert_eq!(s.read_u64(0, W, 0), 16);
    assert_eq!(s.read_u64(0, W, 1), 7);
}

#[test]
fn s06_pscw_put_get_wait_and_test() {
    for use_test in [false, true] {
        let mut s = sim(2, 4, 6);
        s.write_u64(1, W, 3, 33);
        one(&mut s, 1, Call::Wait, |e| e.post(W, &[0], 0));
        one(&mut s, 0, Call::Complete, |e| e.start(W, &[1], 0));
        op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(9)));
        let g = op(&mut s, 0, |e| e.get(W, 1, 24, 8));
        // An op to a rank outside the group is refused.
        assert!(matches!(
            s.procs[0].put(W, 0, 0, &u64b(1)),
            Err(rma_epoch::Error::NotInGroup { .. })
        ));
        if use_test {
            assert!(
                !s.procs[1].test(W).unwrap(),
                "test succeeds before complete"
            );
        }
        one(&mut s, 0, Call::Complete, |e| e.complete(W));
        if use_test {
            let mut tries = 0;
            while !s.procs[1].test(W).unwrap() {
                assert!(s.deliver_one(), "test never succeeds");
                tries += 1;
                assert!(tries < 10_000);
            }
        } else {
            one(&mut s, 1, Call::Wait, |e| e.wait(W));
        }
        assert_eq!(s.read_u64(1, W, 0), 9);
        assert_eq!(s.result_u64(0, g), 33);
    }
}

#[test]
fn s07_progress_while_target_blocked() {
    // The target posts, then makes no RMA call at all (it sits in MPI_Recv):
    // the origin's whole epoch still completes, driven by packet handling.
    let mut s = sim(2, 2, 7);
    one(&mut s, 1, Call::Wait, |e| e.post(W, &[0], 0));
    one(&mut s, 0, Call::Complete, |e| e.start(W, &[1], 0));
    op(&mut s, 0, |e| e.put(W, 1, 8, &u64b(42)));
    one(&mut s, 0, Call::Complete, |e| e.complete(W));
    // Complete guarantees local completion only; the network delivers the
    // rest while the target still makes no call.
    s.settle(1000);
    assert_eq!(s.read_u64(1, W, 1), 42);
    // Only now does the target wait: it returns at once.
    assert_eq!(s.procs[1].wait(W).unwrap(), CallStatus::Done);
}

#[test]
fn s08_pscw_start_before_post() {
    // Odd ranks access even ranks; START is called before the matching POST.
    let n = 4;
    let mut s = sim(n, n, 8);
    let evens = [0u32, 2];
    let odds = [1u32, 3];
    for &o in &odds {
        one(&mut s, o as usize, Call::Complete, |e| {
            e.start(W, &evens, 0)
        });
        op(&mut s, o as usize, |e| {
            e.put(W, 0, o as u64 * 8, &u64b(100 + o as u64))
        });
        op(&mut s, o as usize, |e| {
            e.put(W, 2, o as u64 * 8, &u64b(200 + o as u64))
        });
    }
    assert_eq!(
        s.procs[1].access_state(W).unwrap(),
        rma_epoch::AccessState::PscwIssued
    );
    let st: Vec<_> = odds
        .iter()
        .map(|&o| s.procs[o as usize].complete(W).unwrap())
        .collect();
    assert!(st.iter().all(|x| *x == CallStatus::Pending));
    for &e in &evens {
        one(&mut s, e as usize, Call::Wait, |en| en.post(W, &odds, 0));
    }
    for &o in &odds {
        s.wait_call(o as usize, W, Call::Complete);
    }
    for &e in &evens {
        one(&mut s, e as usize, Call::Wait, |en| en.wait(W));
        for &o in &odds {
            assert_eq!(
                s.read_u64(e as usize, W, o as usize),
                (e as u64 / 2 + 1) * 100 + o as u64
            );
        }
    }
}

#[test]
fn s09_null_pscw() {
    let mut s = sim(3, 1, 9);
    for r in 0..3 {
        one(&mut s, r, Call::Wait, |e| e.post(W, &[0, 1, 2], 0));
        one(&mut s, r, Call::Complete, |e| e.start(W, &[0, 1, 2], 0));
    }
    let st: Vec<_> = (0..3).map(|r| s.procs[r].complete(W).unwrap()).collect();
    for (r, x) in st.into_iter().enumerate() {
        s.finish(r, W, Call::Complete, x);
    }
    for r in 0..3 {
        one(&mut s, r, Call::Wait, |e| e.wait(W));
        assert_eq!(
            s.procs[r].exposure_state(W).unwrap(),
            rma_epoch::ExposureState::None
        );
        assert!(s.procs[r].is_quiescent(W));
    }
}

#[test]
fn s10_locknull_sends_nothing_with_delayed_issuing() {
    for delay in [true, false] {
        let mut s = sim_with(3, 1, 10, |c| c.delay_issuing = delay);
        for t in 0..3u32 {
            for excl in [false, true] {
                let before = s.sent;
                one(&mut s, 0, Call::Lock, |e| e.lock(W, excl, t, 0));
                one(&mut s, 0, Call::Unlock, |e| e.unlock(W, t));
                s.settle(100);
                // Delayed: zero messages. Eager (MPICH's default): LOCK,
                // LOCK_ACK, UNLOCK(NO_ACK).
                assert_eq!(s.sent - before, if delay { 0 } else { 3 });
                assert_eq!(
                    *s.procs[t as usize].lock_holder(W).unwrap(),
                    LockHolder::Free
                );
            }
        }
    }
}

#[test]
fn s11_lock_op_unlock_single_packet() {
    let mut s = sim(2, 4, 11);
    s.write_u64(1, W, 2, 5);
    // Put, get and accumulate, one per epoch: one packet out, one answer back.
    let before = s.sent;
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(8)));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.sent - before, 2);
    let before = s.sent;
    one(&mut s, 0, Call::Lock, |e| e.lock(W, false, 1, 0));
    let g = op(&mut s, 0, |e| e.get(W, 1, 16, 8));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.sent - before, 2);
    let before = s.sent;
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| {
        e.accumulate(W, 1, 8, &u64b(3), ElemType::U64, AccOp::Sum)
    });
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.sent - before, 2);
    assert_eq!(s.read_u64(1, W, 0), 8);
    assert_eq!(s.read_u64(1, W, 1), 3);
    assert_eq!(s.result_u64(0, g), 5);
    assert_eq!(s.procs[0].counters(W).unwrap().lock_op_unlock, 3);
    assert_eq!(*s.procs[1].lock_holder(W).unwrap(), LockHolder::Free);
}

#[test]
fn s12_lock_contention_exclusive() {
    for seed in 0..20 {
        let n = 4;
        let mut s = sim(n, 3 * n, seed);
        // Ranks 1..n lock target 0 exclusively and write disjoint, interleaved
        // cells, several epochs each, all concurrently.
        for round in 0..3u64 {
            for r in 1..n {
                one(&mut s, r, Call::Lock, |e| e.lock(W, true, 0, 0));
                for k in 0..3u64 {
                    let cell = k * n as u64 + r as u64;
                    op(&mut s, r, |e| {
                        e.put(W, 0, cell * 8, &u64b(round * 100 + r as u64 * 10 + k))
                    });
                }
            }
            let st: Vec<_> = (1..n).map(|r| s.procs[r].unlock(W, 0).unwrap()).collect();
            for (i, x) in st.into_iter().enumerate() {
                s.finish(i + 1, W, Call::Unlock, x);
            }
        }
        for r in 1..n {
            for k in 0..3 {
                assert_eq!(s.read_u64(0, W, k * n + r), 200 + r as u64 * 10 + k as u64);
            }
        }
        assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
    }
}

#[test]
fn s13_local_lock_blocks_partner() {
    let mut s = sim(2, 4, 13);
    // Rank 0 locks itself exclusively (a local lock)...
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 0, 0));
    op(&mut s, 0, |e| e.put(W, 0, 0, &u64b(1)));
    one(&mut s, 0, Call::Flush, |e| e.flush(W, 0));
    assert_eq!(
        *s.procs[0].lock_holder(W).unwrap(),
        LockHolder::Exclusive(0)
    );
    // ...while rank 1's lock request with piggybacked ops arrives and waits.
    one(&mut s, 1, Call::Lock, |e| e.lock(W, true, 0, 0));
    op(&mut s, 1, |e| e.put(W, 0, 8, &u64b(2)));
    op(&mut s, 1, |e| {
        e.accumulate(W, 0, 16, &u64b(3), ElemType::U64, AccOp::Sum)
    });
    let g = op(&mut s, 1, |e| e.get(W, 0, 0, 8));
    assert_eq!(s.procs[1].unlock(W, 0).unwrap(), CallStatus::Pending);
    s.settle(10_000);
    assert_eq!(
        s.procs[1].blocked(W),
        Some(Call::Unlock),
        "partner must wait"
    );
    assert_eq!(
        s.read_u64(0, W, 1),
        0,
        "nothing applied under the other's lock"
    );
    assert_eq!(
        s.procs[1].target_state(W, 0).unwrap(),
        Some(TargetState::LockIssued)
    );
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 0));
    s.wait_call(1, W, Call::Unlock);
    assert_eq!(s.read_u64(0, W, 1), 2);
    assert_eq!(s.read_u64(0, W, 2), 3);
    assert_eq!(s.result_u64(1, g), 1);
    assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
}

#[test]
fn s14_fetchandadd_exclusive_and_shared_concurrency() {
    let n = 5;
    for seed in 0..10 {
        let mut s = sim(n, 1, seed);
        // Every rank: lock(EXCLUSIVE, 0); get counter; acc +1; unlock.
        for r in 0..n {
            one(&mut s, r, Call::Lock, |e| e.lock(W, true, 0, 0));
        }
        let toks: Vec<_> = (0..n)
            .map(|r| {
                let g = op(&mut s, r, |e| e.get(W, 0, 0, 8));
                op(&mut s, r, |e| {
                    e.accumulate(W, 0, 0, &u64b(1), ElemType::U64, AccOp::Sum)
                });
                g
            })
            .collect();
        let st: Vec<_> = (0..n).map(|r| s.procs[r].unlock(W, 0).unwrap()).collect();
        for (r, x) in st.into_iter().enumerate() {
            s.finish(r, W, Call::Unlock, x);
        }
        let mut seen: Vec<u64> = toks
            .iter()
            .enumerate()
            .map(|(r, t)| s.result_u64(r, *t))
            .collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..n as u64).collect::<Vec<_>>(),
            "exclusive locks overlapped"
        );
        assert_eq!(s.read_u64(0, W, 0), n as u64);
    }
    // Shared locks are held concurrently.
    let mut s = sim(3, 1, 99);
    for r in 1..3 {
        one(&mut s, r, Call::Lock, |e| e.lock(W, false, 0, 0));
        op(&mut s, r, |e| e.get(W, 0, 0, 8));
        one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
    }
    match s.procs[0].lock_holder(W).unwrap() {
        LockHolder::Shared(v) => assert_eq!(v.len(), 2),
        other => panic!("expected two shared holders, got {other:?}"),
    }
    for r in 1..3 {
        one(&mut s, r, Call::Unlock, |e| e.unlock(W, 0));
    }
    // Both UNLOCKs went out without asking for an ACK.
    s.settle(1000);
    assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
}

#[test]
fn s15_lock_nested() {
    let n = 4;
    let mut s = sim(n, n, 15);
    for t in 1..n as u32 {
        one(&mut s, 0, Call::Lock, |e| e.lock(W, t % 2 == 0, t, 0));
    }
    assert_eq!(
        s.procs[0].access_state(W).unwrap(),
        rma_epoch::AccessState::PerTarget
    );
    // A second lock on a locked target is an error.
    assert!(matches!(
        s.procs[0].lock(W, true, 2, 0),
        Err(rma_epoch::Error::AlreadyLocked { .. })
    ));
    for t in 1..n as u32 {
        op(&mut s, 0, |e| e.put(W, t, 0, &u64b(t as u64 * 7)));
    }
    for t in (1..n as u32).rev() {
        one(&mut s, 0, Call::Unlock, |e| e.unlock(W, t));
        let expect = if t == 1 {
            rma_epoch::AccessState::Unset
        } else {
            rma_epoch::AccessState::PerTarget
        };
        assert_eq!(s.procs[0].access_state(W).unwrap(), expect);
    }
    for t in 1..n {
        assert_eq!(s.read_u64(t, W, 0), t as u64 * 7);
    }
    // Unlock without lock, and an op or unlock to a target that is not
    // locked while another lock epoch is open.
    assert!(matches!(
        s.procs[0].unlock(W, 1),
        Err(rma_epoch::Error::WrongEpoch { .. })
    ));
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    assert!(matches!(
        s.procs[0].unlock(W, 2),
        Err(rma_epoch::Error::NotLocked { target: 2, .. })
    ));
    assert!(matches!(
        s.procs[0].put(W, 3, 0, &u64b(1)),
        Err(rma_epoch::Error::NotLocked { target: 3, .. })
    ));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
}

#[test]
fn s16_self_rma_under_lock() {
    let mut s = sim(1, 4, 16);
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 0, 0));
    op(&mut s, 0, |e| e.put(W, 0, 0, &u64b(3)));
    op(&mut s, 0, |e| {
        e.accumulate(W, 0, 0, &u64b(4), ElemType::U64, AccOp::Sum)
    });
    let g = op(&mut s, 0, |e| e.get(W, 0, 0, 8));
    let c = op(&mut s, 0, |e| {
        e.compare_and_swap(W, 0, 0, &u64b(9), &u64b(7), ElemType::U64)
    });
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 0));
    assert_eq!(s.result_u64(0, g), 7);
    assert_eq!(s.result_u64(0, c), 7);
    assert_eq!(s.read_u64(0, W, 0), 9);
}

#[test]
fn s17_mixedsync_lock_then_fence() {
    let mut s = sim(2, 2, 17);
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(1)));
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    fence(&mut s, 0);
    op(&mut s, 1, |e| e.put(W, 0, 8, &u64b(2)));
    fence(&mut s, 0);
    // FENCE_GRANTED counts as "no epoch" for lock_all.
    one(&mut s, 0, Call::UnlockAll, |e| e.lock_all(W, 0));
    op(&mut s, 0, |e| {
        e.accumulate(W, 1, 8, &u64b(5), ElemType::U64, AccOp::Sum)
    });
    one(&mut s, 0, Call::UnlockAll, |e| e.unlock_all(W));
    assert_eq!(s.read_u64(1, W, 0), 1);
    assert_eq!(s.read_u64(0, W, 1), 2);
    assert_eq!(s.read_u64(1, W, 1), 5);
    // Wrong epoch type: complete in a fence epoch, unlock_all without lock_all.
    assert!(matches!(
        s.procs[0].complete(W),
        Err(rma_epoch::Error::WrongEpoch { .. })
    ));
    assert!(matches!(
        s.procs[0].unlock_all(W),
        Err(rma_epoch::Error::WrongEpoch { .. })
    ));
}

#[test]
fn s18_at_complete_get_sees_pre_epoch_value() {
    let mut s = sim(2, 2, 18);
    s.write_u64(1, W, 0, 11);
    fence(&mut s, assert::NOPRECEDE);
    let g = op(&mut s, 0, |e| e.get(W, 1, 0, 8));
    op(&mut s, 0, |e| e.put(W, 1, 8, &u64b(1)));
    fence(&mut s, assert::NOSUCCEED);
    // The target now changes its window under a self lock.
    one(&mut s, 1, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 1, |e| e.put(W, 1, 0, &u64b(12)));
    one(&mut s, 1, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.result_u64(0, g), 11);
    // Same under PSCW.
    one(&mut s, 1, Call::Wait, |e| e.post(W, &[0], 0));
    one(&mut s, 0, Call::Complete, |e| e.start(W, &[1], 0));
    let g = op(&mut s, 0, |e| e.get(W, 1, 0, 8));
    one(&mut s, 0, Call::Complete, |e| e.complete(W));
    one(&mut s, 1, Call::Wait, |e| e.wait(W));
    one(&mut s, 1, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 1, |e| e.put(W, 1, 0, &u64b(13)));
    one(&mut s, 1, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.result_u64(0, g), 12);
}

#[test]
fn s19_acc_ordering_large_then_small() {
    let mut s = sim(2, 64, 19);
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    let large: Vec<u8> = (0..64u64).flat_map(|i| i.to_ne_bytes()).collect();
    op(&mut s, 0, |e| {
        e.accumulate(W, 1, 0, &large, ElemType::U64, AccOp::Replace)
    });
    for v in 100..110u64 {
        op(&mut s, 0, |e| {
            e.accumulate(W, 1, 0, &u64b(v), ElemType::U64, AccOp::Replace)
        });
    }
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.read_u64(1, W, 0), 109);
    assert_eq!(s.read_u64(1, W, 63), 63);
}

#[test]
fn s20_manyrma_pool_exhaustion_all_modes() {
    let n = 3;
    let mut s = Sim::new(
        n,
        20,
        GlobalConfig {
            op_global_pool: 1,
            target_global_pool: 0,
        },
    );
    s.create_window((n * 8) as u64, |c| {
        c.op_win_pool = 2;
        c.target_win_pool = 1;
        c.piggyback_threshold = 4;
    });
    let k = 50u64;
    // Fence.
    fence(&mut s, 0);
    for r in 0..n {
        for i in 0..k {
            let t = (r + 1 + i as usize % (n - 1)) % n;
            op(&mut s, r, |e| {
                e.accumulate(
                    W,
                    t as u32,
                    r as u64 * 8,
                    &u64b(1),
                    ElemType::U64,
                    AccOp::Sum,
                )
            });
        }
    }
    fence(&mut s, 0);
    // PSCW: everyone accesses everyone.
    let group: Vec<u32> = (0..n as u32).collect();
    for r in 0..n {
        one(&mut s, r, Call::Wait, |e| e.post(W, &group, 0));
        one(&mut s, r, Call::Complete, |e| e.start(W, &group, 0));
    }
    for r in 0..n {
        for i in 0..k {
            let t = (r + i as usize) % n;
            op(&mut s, r, |e| {
                e.accumulate(
                    W,
                    t as u32,
                    r as u64 * 8,
                    &u64b(1),
                    ElemType::U64,
                    AccOp::Sum,
                )
            });
        }
    }
    let st: Vec<_> = (0..n).map(|r| s.procs[r].complete(W).unwrap()).collect();
    for (r, x) in st.into_iter().enumerate() {
        s.finish(r, W, Call::Complete, x);
    }
    for r in 0..n {
        one(&mut s, r, Call::Wait, |e| e.wait(W));
    }
    // Lock: many ops in one epoch.
    for r in 0..n {
        let t = (r + 1) % n;
        one(&mut s, r, Call::Lock, |e| e.lock(W, false, t as u32, 0));
        for _ in 0..k {
            op(&mut s, r, |e| {
                e.accumulate(
                    W,
                    t as u32,
                    r as u64 * 8,
                    &u64b(1),
                    ElemType::U64,
                    AccOp::Sum,
                )
            });
        }
        one(&mut s, r, Call::Unlock, |e| e.unlock(W, t as u32));
    }
    fence(&mut s, assert::NOSUCCEED);
    // Every rank's column sums to 3k over all targets.
    for r in 0..n {
        let total: u64 = (0..n).map(|t| s.read_u64(t, W, r)).sum();
        assert_eq!(total, 3 * k, "rank {r}");
    }
    let c = s.procs[0].counters(W).unwrap();
    assert!(c.restore_op > 0 && c.restore_target > 0, "{c}");
    s.pools_ok();
}

#[test]
fn s21_proc_null_and_zero_count_are_noops() {
    let mut s = sim(2, 1, 21);
    fence(&mut s, 0);
    let before = s.sent;
    op(&mut s, 0, |e| e.put(W, PROC_NULL, 0, &u64b(1)));
    op(&mut s, 0, |e| e.put(W, 1, 0, &[]));
    let g = op(&mut s, 0, |e| e.get(W, 1, 0, 0));
    assert_eq!(s.results[0][&g.token.0], Vec::<u8>::new());
    let g = op(&mut s, 0, |e| e.get(W, PROC_NULL, 0, 8));
    assert_eq!(s.results[0][&g.token.0], Vec::<u8>::new());
    assert_eq!(s.sent, before);
    fence(&mut s, assert::NOSUCCEED);
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| {
        e.accumulate(W, PROC_NULL, 0, &u64b(1), ElemType::U64, AccOp::Sum)
    });
    one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.read_u64(1, W, 0), 0);
    // Outside an epoch PROC_NULL is still a no-op (MPI allows it).
    assert!(s.procs[0].put(W, PROC_NULL, 0, &u64b(1)).is_ok());
}

#[test]
fn s22_flush_token_ring_through_rank0() {
    let n = 4;
    let mut s = sim(n, 1, 22);
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.lock_all(W, 0));
    }
    // Flush of an empty epoch returns at once.
    assert_eq!(s.procs[1].flush(W, 0).unwrap(), CallStatus::Done);
    // Token ring: each rank adds 1 to rank 0's counter with GACC + flush,
    // and sees everything the previous ranks added.
    for r in 0..n {
        let g = op(&mut s, r, |e| {
            e.get_accumulate(W, 0, 0, &u64b(1), ElemType::U64, AccOp::Sum)
        });
        one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
        assert_eq!(s.result_u64(r, g), r as u64);
    }
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.unlock_all(W));
    }
    assert_eq!(s.read_u64(0, W, 0), n as u64);
}

#[test]
fn s23_flush_then_third_party_get() {
    let kinds = ["put", "acc", "gacc", "fop", "cas"];
    for (i, kind) in kinds.iter().enumerate() {
        let mut s = sim(3, 1, 23 + i as u64);
        for r in 0..3 {
            one(&mut s, r, Call::UnlockAll, |e| e.lock_all(W, 0));
        }
        op(&mut s, 0, |e| match *kind {
            "put" => e.put(W, 1, 0, &u64b(5)),
            "acc" => e.accumulate(W, 1, 0, &u64b(5), ElemType::U64, AccOp::Sum),
            "gacc" => e.get_accumulate(W, 1, 0, &u64b(5), ElemType::U64, AccOp::Sum),
            "fop" => e.fetch_and_op(W, 1, 0, &u64b(5), ElemType::U64, AccOp::Sum),
            _ => e.compare_and_swap(W, 1, 0, &u64b(5), &u64b(0), ElemType::U64),
        });
        one(&mut s, 0, Call::Flush, |e| e.flush(W, 1));
        // Remote completion: a different origin reads the new value.
        let g = op(&mut s, 2, |e| e.get(W, 1, 0, 8));
        one(&mut s, 2, Call::Flush, |e| e.flush(W, 1));
        assert_eq!(s.result_u64(2, g), 5, "{kind}");
        for r in 0..3 {
            one(&mut s, r, Call::UnlockAll, |e| e.unlock_all(W));
        }
    }
}

#[test]
fn s24_atomic_rmw_contention() {
    let n = 5;
    // All-to-one fetch-and-op under lock_all + flush.
    let mut s = sim(n, 2, 24);
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.lock_all(W, 0));
    }
    let toks: Vec<_> = (0..n)
        .map(|r| {
            op(&mut s, r, |e| {
                e.fetch_and_op(W, 0, 0, &u64b(1), ElemType::U64, AccOp::Sum)
            })
        })
        .collect();
    for r in 0..n {
        one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
    }
    let mut got: Vec<u64> = toks
        .iter()
        .enumerate()
        .map(|(r, t)| s.result_u64(r, *t))
        .collect();
    got.sort_unstable();
    assert_eq!(got, (0..n as u64).collect::<Vec<_>>());
    // CAS contention: exactly one rank swaps 0 -> its id.
    let toks: Vec<_> = (0..n)
        .map(|r| {
            op(&mut s, r, |e| {
                e.compare_and_swap(W, 0, 8, &u64b(r as u64 + 1), &u64b(0), ElemType::U64)
            })
        })
        .collect();
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.unlock_all(W));
    }
    let winners: Vec<usize> = (0..n).filter(|r| s.result_u64(*r, toks[*r]) == 0).collect();
    assert_eq!(winners.len(), 1);
    assert_eq!(s.read_u64(0, W, 1), winners[0] as u64 + 1);
    // FOP from self and neighbour under fence, and under lock.
    fence(&mut s, 0);
    let a = op(&mut s, 1, |e| {
        e.fetch_and_op(W, 1, 0, &u64b(10), ElemType::U64, AccOp::Sum)
    });
    fence(&mut s, 0);
    let b = op(&mut s, 2, |e| {
        e.fetch_and_op(W, 1, 0, &u64b(0), ElemType::U64, AccOp::NoOp)
    });
    fence(&mut s, assert::NOSUCCEED);
    assert_eq!(s.result_u64(1, a), 0);
    assert_eq!(s.result_u64(2, b), 10);
    one(&mut s, 3, Call::Lock, |e| e.lock(W, true, 1, 0));
    let c = op(&mut s, 3, |e| {
        e.fetch_and_op(W, 1, 0, &u64b(3), ElemType::U64, AccOp::Prod)
    });
    one(&mut s, 3, Call::Unlock, |e| e.unlock(W, 1));
    assert_eq!(s.result_u64(3, c), 10);
    assert_eq!(s.read_u64(1, W, 0), 30);
}

#[test]
fn s25_rget_then_unlock_all_completes_request() {
    let mut s = sim(3, 1, 25);
    s.write_u64(2, W, 0, 8);
    one(&mut s, 0, Call::UnlockAll, |e| e.lock_all(W, 0));
    let g = op(&mut s, 0, |e| e.get(W, 2, 0, 8));
    assert!(!s.results[0].contains_key(&g.token.0));
    one(&mut s, 0, Call::UnlockAll, |e| e.unlock_all(W));
    assert_eq!(s.result_u64(0, g), 8);
    assert!(s.procs[0].is_quiescent(W));
}

#[test]
fn s29_cas_spinlock_mutual_exclusion() {
    // A mutex built from CAS under lock_all + flush protects a
    // read-modify-write of a plain counter with get/put.
    let n = 4;
    let iters = 3;
    let mut s = sim(n, 2, 29);
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.lock_all(W, 0));
    }
    // Round-robin the ranks so that acquisitions contend.
    let mut done = vec![0; n];
    let mut holding = vec![false; n];
    let mut rr = 0;
    while done.iter().any(|d| *d < iters) {
        let r = rr % n;
        rr += 1;
        if done[r] >= iters {
            continue;
        }
        if !holding[r] {
            let c = op(&mut s, r, |e| {
                e.compare_and_swap(W, 0, 0, &u64b(r as u64 + 1), &u64b(0), ElemType::U64)
            });
            one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
            holding[r] = s.result_u64(r, c) == 0;
        } else {
            let g = op(&mut s, r, |e| e.get(W, 0, 8, 8));
            one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
            let v = s.result_u64(r, g);
            op(&mut s, r, |e| e.put(W, 0, 8, &u64b(v + 1)));
            one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
            op(&mut s, r, |e| {
                e.compare_and_swap(W, 0, 0, &u64b(0), &u64b(r as u64 + 1), ElemType::U64)
            });
            one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
            holding[r] = false;
            done[r] += 1;
        }
    }
    for r in 0..n {
        one(&mut s, r, Call::UnlockAll, |e| e.unlock_all(W));
    }
    assert_eq!(s.read_u64(0, W, 1), (n * iters) as u64);
    assert_eq!(s.read_u64(0, W, 0), 0);
}

#[test]
fn s30_free_waits_for_unlock_no_ack() {
    let mut s = sim(2, 1, 30);
    one(&mut s, 0, Call::Lock, |e| e.lock(W, true, 1, 0));
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(1)));
    one(&mut s, 0, Call::Flush, |e| e.flush(W, 1));
    // Everything flushed: the UNLOCK goes out without asking for an ACK, so
    // the origin's unlock returns before the target released the lock.
    let st = s.procs[0].unlock(W, 1).unwrap();
    assert_eq!(st, CallStatus::Done);
    assert_eq!(s.procs[0].counters(W).unwrap().unlock_packets, 1);
    s.pump(0);
    // The target's free cannot finish while the lock is held.
    assert_eq!(
        *s.procs[1].lock_holder(W).unwrap(),
        LockHolder::Exclusive(0)
    );
    let st = s.procs[1].free_window(W).unwrap();
    assert_eq!(st, CallStatus::Pending);
    assert!(s.procs[1].has_window(W));
    s.wait_call(1, W, Call::Free);
    assert!(!s.procs[1].has_window(W));
    assert_eq!(s.procs[0].free_window(W).unwrap(), CallStatus::Done);
    assert!(matches!(
        s.procs[0].fence(W, 0),
        Err(rma_epoch::Error::NoSuchWindow(0))
    ));
}

// ---------------------------------------------------------------------------
// Windows with direct targets (the simulator plays the direct backend).

/// A window of `n` ranks on `split` simulated nodes (rank r on r % split).
fn sim_split(n: usize, cells: usize, seed: u64, split: usize) -> Sim {
    let mut s = Sim::new(n, seed, GlobalConfig::default());
    s.create_window_split((cells * 8) as u64, Some(split), |_| {});
    s
}

/// Runs `f` on every rank (a collective call), then drives each rank's
/// direct backend and pending call to completion.
fn all_direct(
    s: &mut Sim,
    call: Call,
    f: impl Fn(&mut rma_epoch::Engine, usize) -> Result<CallStatus, rma_epoch::Error>,
) {
    all(s, call, f);
    for r in 0..s.n {
        s.drive(r);
    }
}

#[test]
fn d01_fence_on_a_direct_window_is_a_shared_memory_barrier() {
    use common::DirectOp;
    for seed in 0..8 {
        let mut s = sim_split(3, 4, seed, 1);
        // Outside an epoch the gate refuses.
        let e = s.procs[0].direct_access(W, 1).unwrap_err();
        assert!(matches!(e, rma_epoch::Error::NoEpoch { .. }), "{e}");
        // A fence is a barrier of arrivals: no packet at all.
        let sent = s.sent;
        all_direct(&mut s, Call::Fence, |e, _| e.fence(W, 0));
        for r in 0..3 {
            s.direct_op(
                r,
                (r + 1) % 3,
                DirectOp::Put {
                    cell: r,
                    val: 10 + r as u64,
                },
            )
            .unwrap();
            s.direct_op(
                r,
                0,
                DirectOp::Sum {
                    cell: 3,
                    val: 1,
                    fetch: false,
                },
            )
            .unwrap();
        }
        all_direct(&mut s, Call::Fence, |e, _| e.fence(W, assert::NOSUCCEED));
        assert_eq!(s.sent, sent, "no message on a direct window");
        for r in 0..3 {
            assert_eq!(s.read_u64((r + 1) % 3, W, r), 10 + r as u64);
            assert_eq!(
                s.procs[r].access_state(W).unwrap(),
                rma_epoch::AccessState::Unset
            );
            assert_eq!(s.procs[r].counters(W).unwrap().direct_ops, 2);
        }
        assert_eq!(s.read_u64(0, W, 3), 3);
        // Nothing to send either way: direct ops through `put` are refused.
        let e = s.procs[0].put(W, 1, 0, &u64b(1)).unwrap_err();
        assert!(
            matches!(e, rma_epoch::Error::WrongBackend { direct: true, .. }),
            "{e}"
        );
    }
}

#[test]
fn d02_one_lock_for_direct_and_active_message_origins() {
    use common::DirectOp;
    for seed in 0..30 {
        // Ranks 0 and 2 share a node; rank 1 is on the other one. Both lock
        // rank 0 exclusively (one directly, one by messages) and do a
        // read-modify-write of the same cell, several epochs each, at the
        // same time; the simulator checks at every grant that holders never
        // overlap.
        let mut s = sim_split(3, 2, seed, 2);
        let rounds = 4;
        let (mut done1, mut done2) = (0, 0);
        // Rank 1: 0 idle, 1 unlocking. Rank 2: 0 idle, 1 locking.
        let (mut st1, mut st2) = (0, 0);
        while done1 < rounds || done2 < rounds {
            s.pump_all();
            if st2 == 1 && s.procs[2].direct_lock(W, 0) == Some(true) {
                let tok = s
                    .direct_op(
                        2,
                        0,
                        DirectOp::Sum {
                            cell: 0,
                            val: 1,
                            fetch: true,
                        },
                    )
                    .unwrap();
                assert!(s.results[2].contains_key(&tok));
                s.procs[2].unlock(W, 0).unwrap();
                s.pump(2);
                (st2, done2) = (0, done2 + 1);
                continue;
            }
            if st1 == 1 && s.completed[1].contains(&(W, Call::Unlock)) {
                s.completed[1].retain(|c| *c != (W, Call::Unlock));
                (st1, done1) = (0, done1 + 1);
                continue;
            }
            match s.rng.below(3) {
                0 if st2 == 0 && done2 < rounds => {
                    s.procs[2].lock(W, true, 0, 0).unwrap();
                    s.pump(2);
                    st2 = 1;
                }
                1 if st1 == 0 && done1 < rounds => {
                    s.procs[1].lock(W, true, 0, 0).unwrap();
                    s.pump(1);
                    op(&mut s, 1, |e| {
                        e.fetch_and_op(W, 0, 0, &u64b(1), ElemType::U64, AccOp::Sum)
                    });
                    if s.procs[1].unlock(W, 0).unwrap() == CallStatus::Done {
                        done1 += 1;
                    } else {
                        st1 = 1;
                    }
                }
                _ => {
                    s.deliver_one();
                }
            }
        }
        s.settle(100_000);
        assert_eq!(s.read_u64(0, W, 0), 2 * rounds as u64);
        assert_eq!(*s.procs[0].lock_holder(W).unwrap(), LockHolder::Free);
        assert_eq!(s.procs[0].target_lock(W).unwrap(), TargetLock::Free);
        assert!(s.shm[&W].locks[0].idle());
        assert!(s.procs[0].is_quiescent(W));
    }
}

#[test]
fn d03_pscw_waits_for_direct_and_active_message_origins() {
    use common::DirectOp;
    for seed in 0..10 {
        // Rank 0 exposes to rank 2 (direct) and rank 1 (messages).
        let mut s = sim_split(3, 4, seed, 2);
        one(&mut s, 0, Call::Wait, |e| e.post(W, &[1, 2], 0));
        s.drive(0);
        // The direct origin: start waits for the post, ops are loads/stores.
        one(&mut s, 2, Call::Complete, |e| e.start(W, &[0], 0));
        s.drive(2);
        assert_eq!(
            s.procs[2].access_state(W).unwrap(),
            rma_epoch::AccessState::PscwGranted
        );
        s.direct_op(2, 0, DirectOp::Put { cell: 2, val: 22 })
            .unwrap();
        one(&mut s, 2, Call::Complete, |e| e.complete(W));
        s.drive(2);
        // Rank 0's wait cannot end before rank 1 completes.
        let st = s.procs[0].wait(W).unwrap();
        assert_eq!(st, CallStatus::Pending);
        s.pump(0);
        s.drive(0);
        assert_eq!(s.procs[0].blocked(W), Some(Call::Wait));
        one(&mut s, 1, Call::Complete, |e| e.start(W, &[0], 0));
        op(&mut s, 1, |e| e.put(W, 0, 8, &u64b(11)));
        one(&mut s, 1, Call::Complete, |e| e.complete(W));
        s.wait_call(0, W, Call::Wait);
        assert_eq!(s.read_u64(0, W, 1), 11);
        assert_eq!(s.read_u64(0, W, 2), 22);
        assert_eq!(
            s.procs[0].exposure_state(W).unwrap(),
            rma_epoch::ExposureState::None
        );
        // An op outside the start group is refused by the gate too.
        one(&mut s, 2, Call::Complete, |e| {
            e.start(W, &[2], assert::NOCHECK)
        });
        let e = s.procs[2].direct_access(W, 0).unwrap_err();
        assert!(matches!(e, rma_epoch::Error::NotInGroup { .. }), "{e}");
        one(&mut s, 2, Call::Complete, |e| e.complete(W));
        s.drive(2);
    }
}

#[test]
fn d04_misuse_of_direct_targets_is_typed() {
    let mut s = sim_split(2, 2, 4, 1);
    let e0 = &mut s.procs[0];
    assert!(matches!(
        e0.unlock(W, 1).unwrap_err(),
        rma_epoch::Error::WrongEpoch { .. }
    ));
    e0.lock(W, false, 1, 0).unwrap();
    assert!(matches!(
        e0.lock(W, true, 1, 0).unwrap_err(),
        rma_epoch::Error::AlreadyLocked { .. }
    ));
    // The grant is not reported yet: unlock must wait for it.
    assert!(matches!(
        e0.unlock(W, 1).unwrap_err(),
        rma_epoch::Error::CallInProgress { .. }
    ));
    assert_eq!(e0.direct_access(W, 1).unwrap(), rma_epoch::Gate::Wait);
    s.pump(0);
    s.drive(0);
    let e0 = &mut s.procs[0];
    assert_eq!(e0.direct_access(W, 1).unwrap(), rma_epoch::Gate::Open);
    assert!(matches!(
        e0.direct_access(W, 0).unwrap_err(),
        rma_epoch::Error::NotLocked { .. }
    ));
    assert!(matches!(
        e0.fence(W, 0).unwrap_err(),
        rma_epoch::Error::WrongEpoch { .. }
    ));
    assert!(matches!(
        e0.direct_access(W, 7).unwrap_err(),
        rma_epoch::Error::RankOutOfRange { .. }
    ));
    e0.unlock(W, 1).unwrap();
    assert!(matches!(
        e0.flush(W, 1).unwrap_err(),
        rma_epoch::Error::WrongEpoch { .. }
    ));
    s.pump(0);
    assert!(s.shm[&W].locks[1].idle());
    // A window whose targets all take messages has no direct target.
    let mut m = Sim::new(2, 1, GlobalConfig::default());
    m.create_window(16, |_| {});
    let e = m.procs[0].direct_access(W, 1).unwrap_err();
    assert!(
        matches!(e, rma_epoch::Error::WrongBackend { direct: false, .. }),
        "{e}"
    );
}

/// Readers first, as MPICH grants: a shared lock is granted while another
/// rank waits for an exclusive one on the same target, on a window whose
/// targets are all direct (the shared-memory lock) and on one split over
/// two nodes (the target's engine holding that lock for its
/// active-message origins). Granting in FIFO order instead lets lock_all
/// epochs and exclusive locks close a cycle (the simulator found one with
/// four ranks on three nodes).
#[test]
fn d05b_shared_locks_pass_a_waiting_exclusive_one() {
    use common::DirectOp;
    for split in [1, 2] {
        // split 2: ranks 0 and 2 on one node, 1 and 3 on the other.
        let mut s = sim_split(4, 4, 5, split);
        // Rank 2 reaches 0 directly in both windows: it holds S(0).
        one(&mut s, 2, Call::UnlockAll, |e| e.lock_all(W, 0));
        s.direct_op(2, 0, DirectOp::Put { cell: 0, val: 5 })
            .unwrap();
        // Rank 1 asks for X(0): directly or by a message to rank 0.
        one(&mut s, 1, Call::Lock, |e| e.lock(W, true, 0, 0));
        let direct = s.is_direct(1, W, 0);
        if direct {
            let g = s.procs[1].direct_access(W, 0).unwrap();
            assert_eq!(g, rma_epoch::Gate::Wait);
            s.pump(1);
        } else {
            op(&mut s, 1, |e| e.put(W, 0, 8, &u64b(7)));
        }
        s.settle(10_000);
        assert_eq!(s.read_u64(0, W, 1), 0, "the exclusive lock waits");
        // Rank 3 (the other node when split) and rank 0 (direct) take S(0)
        // beside rank 2, ahead of the waiting writer.
        for r in [3, 0] {
            one(&mut s, r, Call::UnlockAll, |e| e.lock_all(W, 0));
            if s.is_direct(r, W, 0) {
                s.direct_op(
                    r,
                    0,
                    DirectOp::Put {
                        cell: 2 + r % 2,
                        val: 10 + r as u64,
                    },
                )
                .unwrap();
            } else {
                op(&mut s, r, |e| {
                    e.put(W, 0, 8 * (2 + r % 2) as u64, &u64b(10 + r as u64))
                });
                one(&mut s, r, Call::Flush, |e| e.flush(W, 0));
            }
            assert_eq!(s.read_u64(0, W, 1), 0, "split {split}: rank {r}");
        }
        for r in [3, 0, 2] {
            one(&mut s, r, Call::UnlockAll, |e| e.unlock_all(W));
            s.drive(r);
        }
        if direct {
            s.direct_op(1, 0, DirectOp::Put { cell: 1, val: 7 })
                .unwrap();
        }
        one(&mut s, 1, Call::Unlock, |e| e.unlock(W, 0));
        s.settle(10_000);
        assert_eq!(s.read_u64(0, W, 0), 5);
        assert_eq!(s.read_u64(0, W, 1), 7, "the writer got in at last");
        assert_eq!((s.read_u64(0, W, 2), s.read_u64(0, W, 3)), (10, 13));
        assert!(s.shm[&W].locks[0].idle(), "split {split}");
        for r in 0..4 {
            assert!(s.procs[r].is_quiescent(W), "rank {r}");
        }
    }
}

#[test]
fn d05_lock_all_takes_direct_locks_lazily_and_releases_them() {
    use common::DirectOp;
    let mut s = sim_split(4, 4, 5, 2);
    // Rank 0's node: 0 and 2 direct; 1 and 3 by messages.
    one(&mut s, 0, Call::UnlockAll, |e| e.lock_all(W, 0));
    assert!(s.polls[0].is_empty(), "lock_all takes nothing at once");
    s.direct_op(0, 2, DirectOp::Put { cell: 0, val: 5 })
        .unwrap();
    assert_eq!(s.procs[0].direct_lock(W, 2), Some(true));
    assert_eq!(
        s.procs[0].direct_lock(W, 0),
        None,
        "only the target touched"
    );
    op(&mut s, 0, |e| e.put(W, 1, 0, &u64b(6)));
    one(&mut s, 0, Call::Flush, |e| e.flush(W, 2));
    one(&mut s, 0, Call::UnlockAll, |e| e.unlock_all(W));
    s.drive(0);
    s.settle(10_000);
    assert_eq!(s.read_u64(2, W, 0), 5);
    assert_eq!(s.read_u64(1, W, 0), 6);
    assert_eq!(s.procs[0].direct_lock(W, 2), None);
    assert!(s.shm[&W].locks[2].idle(), "the lazy lock was released");
    assert!(s.procs[0].is_quiescent(W));
}

/// `issue_now` (request-based reads): an op the engine would hold (a lone
/// op waiting for the unlock to ride along, or ops under the batching
/// threshold) goes out at once, and its result arrives with no
/// synchronization call.
#[test]
fn s31_issue_now_sends_held_operations() {
    for delay in [true, false] {
        let mut s = sim_with(2, 4, 31, |c| {
            c.delay_issuing = delay;
            c.piggyback_threshold = 8;
        });
        s.write_u64(1, W, 2, 42);
        one(&mut s, 0, Call::Lock, |e| e.lock(W, false, 1, 0));
        let g = op(&mut s, 0, |e| e.get(W, 1, 16, 8));
        s.settle(100);
        if delay {
            assert!(!s.results[0].contains_key(&g.token.0), "held");
        }
        s.procs[0].issue_now(W, 1).unwrap();
        s.pump(0);
        s.settle(100);
        assert_eq!(s.result_u64(0, g), 42, "delay {delay}");
        // Behind the lock's grant: two reads below the threshold.
        let g2 = op(&mut s, 0, |e| e.get(W, 1, 16, 8));
        let g3 = op(&mut s, 0, |e| e.get(W, 1, 16, 8));
        s.settle(100);
        assert!(!s.results[0].contains_key(&g3.token.0), "batched");
        s.procs[0].issue_now(W, 1).unwrap();
        s.pump(0);
        s.settle(100);
        assert_eq!((s.result_u64(0, g2), s.result_u64(0, g3)), (42, 42));
        one(&mut s, 0, Call::Unlock, |e| e.unlock(W, 1));
        s.settle(100);
        assert_eq!(*s.procs[1].lock_holder(W).unwrap(), LockHolder::Free);
        assert!(s.procs[0].is_quiescent(W));
    }
}
