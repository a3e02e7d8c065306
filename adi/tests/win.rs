//! Multi-rank tests of RMA windows: real processes under the real launcher.
//!
//! Same approach as `tests/ranks.rs`: the test binary launches itself as the
//! ranks through `launcher::run::run_job`, with the scenario in
//! `TMX_ADI_TEST_ROLE`; a failed assertion makes a rank exit non-zero and
//! the test fail. Scenario numbers are those of rma-epoch's
//! `tests/scenarios.rs`.
//!
//! Every scenario runs on four configurations: the direct backend with
//! window memory in the heap (default), the direct backend with private
//! window memory reached by CMA (`_private`), every target by active
//! messages (`_engine`), and mixed windows whose ranks are split over two
//! simulated nodes, direct within a node and active messages across
//! (`_mixed`, `TMX_RMA_TEST_SPLIT=2`). Scenarios of two or more ranks also
//! run on two fake nodes joined by adi's test transport (`_nodes`,
//! `adi::ENV_TEST_NODES=2`): targets on the other node by active messages
//! through the transport seam; shared and dynamic windows fail there with
//! `MPI_ERR_RMA_SHARED` and `MPI_ERR_UNSUPPORTED_OPERATION`.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use adi::attr::PROC_NULL;
use adi::win::assert::{NOPRECEDE, NOSUCCEED};
use adi::win::WinPath;
use adi::{
    AccOp, BasicType, Comm, Datatype, ElemType, Error, ErrorClass, LockType, SharedWin, Win,
};
use launcher::run::{run_job, JobSpec};
use std::process::ExitCode;
use std::time::{Duration, Instant};

const ROLE: &str = "TMX_ADI_TEST_ROLE";

fn i64s(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn bytes_of(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// The data of a completed read (waits for it first).
fn data(win: &Win, r: &mut adi::Request) -> Vec<u8> {
    win.wait_request(r).unwrap();
    r.take_buffer().unwrap()
}

/// Whether this job's ranks are on more than one (fake) node
/// (`adi::ENV_TEST_NODES`) or host (`TMX_ADI_TEST_HOSTS`): windows reach
/// the other node's targets by active messages through the remote
/// transport.
fn across_nodes(n: i32) -> bool {
    // Real hosts: `cargo xtask cluster` sets `TMX_ADI_TEST_HOSTS`.
    n > 1
        && std::env::var(adi::ENV_TEST_NODES)
            .or_else(|_| std::env::var("TMX_ADI_TEST_HOSTS"))
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .is_some_and(|k| k > 1)
}

/// The path windows of `n` ranks should take in this job
/// (`TMX_RMA_DIRECT`, `TMX_RMA_TEST_SPLIT`, `adi::ENV_TEST_NODES`).
fn expected_path(n: i32) -> WinPath {
    let split = std::env::var("TMX_RMA_TEST_SPLIT").ok();
    match std::env::var("TMX_RMA_DIRECT").as_deref() {
        Ok("0") => WinPath::Engine,
        _ if across_nodes(n) => WinPath::Mixed,
        _ if n > 1 && split.is_some_and(|k| k.parse::<i32>().unwrap_or(1) > 1) => WinPath::Mixed,
        _ => WinPath::Direct,
    }
}

fn one(v: i64) -> [u8; 8] {
    v.to_ne_bytes()
}

/// (1, 2) Fence epochs: puts to every rank, gets from the neighbour,
/// accumulates from everyone; results checked after the closing fence.
fn role_fence(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let win = Win::allocate(w, 8 * n as usize).unwrap();
    assert_eq!(win.path(), expected_path(n));
    assert_eq!(win.target_size((me + 1) % n), Some(8 * n as u64));
    win.fence(NOPRECEDE).unwrap();
    for t in 0..n {
        win.put(t, 8 * me as u64, &one(100 + me as i64)).unwrap();
    }
    win.fence(0).unwrap();
    let expect: Vec<i64> = (0..n as i64).map(|r| 100 + r).collect();
    assert_eq!(i64s(&win.local_copy().unwrap()), expect);
    // Get: the neighbour's whole window.
    let nb = (me + 1) % n;
    let mut g = win.get(nb, 0, 8 * n as usize).unwrap();
    win.fence(0).unwrap();
    assert!(g.is_complete(), "get complete at the closing fence");
    assert_eq!(i64s(&data(&win, &mut g)), expect);
    // Get into the caller's memory: done at once where the neighbour is
    // reached directly, refused (buffer untouched) where by messages.
    let mut mine = vec![0xAAu8; 8 * n as usize];
    let direct = win.get_direct(nb, 0, &mut mine).unwrap();
    match expected_path(n) {
        WinPath::Direct => assert!(direct, "get_direct to {nb} on a direct window"),
        WinPath::Engine => assert!(!direct, "get_direct to {nb} on an engine window"),
        WinPath::Mixed => {}
    }
    if direct {
        assert_eq!(i64s(&mine), expect);
    } else {
        assert!(mine.iter().all(|&b| b == 0xAA));
    }
    assert!(win.get_direct(PROC_NULL, 0, &mut []).unwrap());
    let e = win.get_direct(nb, u64::MAX, &mut mine).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    win.fence(0).unwrap();
    // Accumulate SUM from everyone into slot 0 of every rank.
    for t in 0..n {
        win.accumulate(t, 0, &one(me as i64 + 1), ElemType::I64, AccOp::Sum)
            .unwrap();
    }
    win.fence(NOSUCCEED).unwrap();
    let got = i64s(&win.local_copy().unwrap());
    assert_eq!(got[0], 100 + (1..=n as i64).sum::<i64>());
    // The process-wide counters saw this window's path and work.
    let c = adi::win::rma_counters();
    let windows = (c.windows_direct, c.windows_engine, c.windows_mixed);
    match expected_path(n) {
        WinPath::Direct => {
            assert_eq!(windows, (1, 0, 0), "{c}");
            assert!(
                c.direct_ops > 2 * n as u64 && c.direct_rmw >= n as u64,
                "{c}"
            );
            assert!(c.fences >= 3, "{c}");
        }
        WinPath::Mixed => {
            assert_eq!(windows, (0, 0, 1), "{c}");
            // This rank's own node: itself and every other rank of its
            // parity are direct targets.
            assert!(c.direct_ops >= 2 && c.direct_rmw >= 1, "{c}");
            let k = win.counters().unwrap();
            assert!(k.direct_ops >= 2 && k.ops_issued >= 1, "{k:?}");
        }
        WinPath::Engine => assert_eq!(windows, (0, 1, 0), "{c}"),
    }
    let mem = win.free().unwrap();
    assert_eq!(mem.len(), 8 * n as usize);
    assert_eq!(i64s(&mem)[1..], expect[1..]);
}

/// Every reduction on several element types: ranks 1.. accumulate into
/// rank 0's window (one slot per op), checked against a local fold.
fn role_acc_ops(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let ops = [
        AccOp::Sum,
        AccOp::Prod,
        AccOp::Min,
        AccOp::Max,
        AccOp::Band,
        AccOp::Bor,
        AccOp::Bxor,
        AccOp::Land,
        AccOp::Lor,
        AccOp::Lxor,
        AccOp::Replace,
        AccOp::NoOp,
    ];
    let init: i64 = 6;
    let val = |r: i32| -> i64 { [5i64, 3, 12, 0, 9][r as usize % 5] };
    let fold = |op: AccOp, a: i64, b: i64| -> i64 {
        match op {
            AccOp::Sum => a + b,
            AccOp::Prod => a * b,
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            AccOp::Band => a & b,
            AccOp::Bor => a | b,
            AccOp::Bxor => a ^ b,
            AccOp::Land => ((a != 0) && (b != 0)) as i64,
            AccOp::Lor => ((a != 0) || (b != 0)) as i64,
            AccOp::Lxor => ((a != 0) != (b != 0)) as i64,
            AccOp::Replace => b,
            _ => a,
        }
    };
    let k = ops.len();
    // i64 slots, then i32 slots, then f64 slots.
    let win = Win::allocate(w, k * 8 + k * 4 + 3 * 8).unwrap();
    win.with_local(|m| {
        for i in 0..k {
            m[i * 8..i * 8 + 8].copy_from_slice(&init.to_ne_bytes());
            m[k * 8 + i * 4..k * 8 + i * 4 + 4].copy_from_slice(&(init as i32).to_ne_bytes());
        }
        for j in 0..3 {
            let o = k * 12 + j * 8;
            m[o..o + 8].copy_from_slice(&1.5f64.to_ne_bytes());
        }
    })
    .unwrap();
    win.fence(0).unwrap();
    if me != 0 {
        for (i, op) in ops.iter().enumerate() {
            // Replace from one rank only (otherwise the winner is undefined).
            if *op == AccOp::Replace && me != 1 {
                continue;
            }
            win.accumulate(0, (i * 8) as u64, &one(val(me)), ElemType::I64, *op)
                .unwrap();
            let v32 = (val(me) as i32).to_ne_bytes();
            win.accumulate(0, (k * 8 + i * 4) as u64, &v32, ElemType::I32, *op)
                .unwrap();
        }
        let f = (me as f64 + 0.25).to_ne_bytes();
        let base = (k * 12) as u64;
        win.accumulate(0, base, &f, ElemType::F64, AccOp::Sum)
            .unwrap();
        win.accumulate(0, base + 8, &f, ElemType::F64, AccOp::Max)
            .unwrap();
        win.accumulate(0, base + 16, &f, ElemType::F64, AccOp::Min)
            .unwrap();
        // Bitwise reductions are not defined on floats.
        let e = win
            .accumulate(0, base, &f, ElemType::F64, AccOp::Band)
            .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Op, "{e:?}");
    }
    win.fence(0).unwrap();
    if me == 0 {
        let m = win.local_copy().unwrap();
        for (i, op) in ops.iter().enumerate() {
            let want = if *op == AccOp::Replace {
                val(1)
            } else {
                (1..n).fold(init, |a, r| fold(*op, a, val(r)))
            };
            let got = i64::from_ne_bytes(m[i * 8..i * 8 + 8].try_into().unwrap());
            assert_eq!(got, want, "i64 {op:?}");
            let o = k * 8 + i * 4;
            let got32 = i32::from_ne_bytes(m[o..o + 4].try_into().unwrap());
            assert_eq!(got32 as i64, want, "i32 {op:?}");
        }
        let f = |j: usize| {
            f64::from_ne_bytes(m[k * 12 + j * 8..k * 12 + j * 8 + 8].try_into().unwrap())
        };
        let vals: Vec<f64> = (1..n).map(|r| r as f64 + 0.25).collect();
        assert_eq!(f(0), 1.5 + vals.iter().sum::<f64>());
        assert_eq!(f(1), vals.iter().cloned().fold(1.5, f64::max));
        assert_eq!(f(2), vals.iter().cloned().fold(1.5, f64::min));
    }
    // Get-accumulate returns the old value; NO_OP is an atomic read.
    win.fence(0).unwrap();
    let mut r = if me == 1 {
        Some(
            win.get_accumulate(0, 0, &one(1000), ElemType::I64, AccOp::Sum)
                .unwrap(),
        )
    } else {
        None
    };
    win.fence(0).unwrap();
    if let Some(r) = r.as_mut() {
        let old = i64s(&data(&win, r))[0];
        assert_eq!(old, (1..n).fold(init, |a, r| a + val(r)));
        let mut r2 = win
            .get_accumulate(0, 0, &one(0), ElemType::I64, AccOp::NoOp)
            .unwrap();
        win.fence(0).unwrap();
        assert_eq!(i64s(&data(&win, &mut r2))[0], old + 1000);
    } else {
        win.fence(0).unwrap();
    }
    win.fence(NOSUCCEED).unwrap();
    win.free().unwrap();
}

/// (6) PSCW: rank 0 exposes to everyone else, who write their slot; also
/// the test() path of the target.
fn role_pscw(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let win = Win::create(w, vec![0u8; 8 * n as usize]).unwrap();
    for round in 0..3i64 {
        if me == 0 {
            let others: Vec<i32> = (1..n).collect();
            win.post(&others, 0).unwrap();
            if round % 2 == 0 {
                win.wait().unwrap();
            } else {
                while !win.test().unwrap() {}
            }
            let got = i64s(&win.local_copy().unwrap());
            for r in 1..n {
                assert_eq!(got[r as usize], 10 * round + r as i64, "round {round}");
            }
        } else {
            win.start(&[0], 0).unwrap();
            win.put(0, 8 * me as u64, &one(10 * round + me as i64))
                .unwrap();
            // A target outside the access group is an error.
            if n > 2 {
                let other = if me == 1 { 2 } else { 1 };
                let e = win.put(other, 0, &one(1)).unwrap_err();
                assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
            }
            win.complete().unwrap();
        }
    }
    win.free().unwrap();
}

/// (12) Shared and exclusive locks under contention, exact final array:
/// every rank (the target itself included) does exclusive epochs (+1 on
/// slot 0, its rank into its slot) and shared epochs (atomic +1 on slot 1).
fn role_lock_contention(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let iters = 20;
    let win = Win::allocate(w, 8 * (n as usize + 2)).unwrap();
    for i in 0..iters {
        if i % 2 == 0 {
            win.lock(LockType::Exclusive, 0, 0).unwrap();
            win.accumulate(0, 0, &one(1), ElemType::I64, AccOp::Sum)
                .unwrap();
            win.put(0, 8 * (2 + me as u64), &one(me as i64 + 1))
                .unwrap();
            win.unlock(0).unwrap();
        } else {
            win.lock(LockType::Shared, 0, 0).unwrap();
            win.accumulate(0, 8, &one(1), ElemType::I64, AccOp::Sum)
                .unwrap();
            win.unlock(0).unwrap();
        }
    }
    // Locking twice is an error; unlock without lock too.
    win.lock(LockType::Shared, 0, 0).unwrap();
    let e = win.lock(LockType::Shared, 0, 0).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    win.unlock(0).unwrap();
    let e = win.unlock(0).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    w.barrier().unwrap();
    if me == 0 {
        let got = i64s(&win.local_copy().unwrap());
        let mut want = vec![(iters / 2) as i64 * n as i64, (iters / 2) as i64 * n as i64];
        want.extend((0..n as i64).map(|r| r + 1));
        assert_eq!(got, want);
    }
    win.free().unwrap();
}

/// (14) A fetch-and-add counter under exclusive locks: the values handed
/// out are exactly 0..iters*n, each once.
fn role_fetch_add_counter(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let iters = 25;
    let win = Win::allocate(w, 8).unwrap();
    let mut mine = Vec::new();
    for _ in 0..iters {
        win.lock(LockType::Exclusive, 0, 0).unwrap();
        let mut r = win
            .fetch_and_op(0, 0, &one(1), ElemType::I64, AccOp::Sum)
            .unwrap();
        win.unlock(0).unwrap();
        assert!(r.is_complete(), "fetch_and_op result at unlock");
        mine.push(i64s(&data(&win, &mut r))[0]);
    }
    let mut all = vec![0u8; 8 * iters * n as usize];
    w.gather(&bytes_of(&mine), &mut all, 0).unwrap();
    if me == 0 {
        let mut v = i64s(&all);
        v.sort_unstable();
        assert_eq!(v, (0..(iters as i64 * n as i64)).collect::<Vec<_>>());
        assert_eq!(i64s(&win.local_copy().unwrap())[0], iters as i64 * n as i64);
    }
    win.free().unwrap();
}

/// (22/23) Flush makes a put visible at the target before unlock: rank 0
/// puts to rank 1 under lock_all, flushes, tells rank 2, which reads it
/// with its own lock.
fn role_flush_visibility(w: &Comm) {
    let me = w.rank();
    let win = Win::allocate(w, 64).unwrap();
    match me {
        0 => {
            win.lock_all(0).unwrap();
            win.put(1, 8, &one(4242)).unwrap();
            win.flush(1).unwrap();
            w.send(b"go", 2, 5).unwrap();
            win.put(1, 16, &one(7)).unwrap();
            win.flush_all().unwrap();
            win.unlock_all().unwrap();
            w.send(b"go", 2, 6).unwrap();
        }
        2 => {
            let mut b = [0u8; 2];
            w.recv(&mut b, 0, 5).unwrap();
            win.lock(LockType::Shared, 1, 0).unwrap();
            let mut g = win.get(1, 8, 8).unwrap();
            win.unlock(1).unwrap();
            assert_eq!(i64s(&data(&win, &mut g))[0], 4242);
            w.recv(&mut b, 0, 6).unwrap();
            win.lock(LockType::Shared, 1, 0).unwrap();
            let mut g = win.get(1, 16, 8).unwrap();
            win.flush_local(1).unwrap();
            assert!(g.is_complete(), "get complete at flush_local");
            win.unlock(1).unwrap();
            assert_eq!(i64s(&data(&win, &mut g))[0], 7);
        }
        _ => {}
    }
    w.barrier().unwrap();
    win.free().unwrap();
}

/// (24) CAS and fetch-and-op contention: a CAS spin lock on rank 0 guards a
/// non-atomic get/put increment; the final count is exact.
fn role_cas_mutex(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let iters = 10;
    let win = Win::allocate(w, 16).unwrap();
    win.lock_all(0).unwrap();
    for _ in 0..iters {
        loop {
            let mut r = win
                .compare_and_swap(0, 0, &one(me as i64 + 1), &one(0), ElemType::I64)
                .unwrap();
            win.flush(0).unwrap();
            if i64s(&data(&win, &mut r))[0] == 0 {
                break;
            }
        }
        let mut g = win.get(0, 8, 8).unwrap();
        win.flush(0).unwrap();
        let c = i64s(&data(&win, &mut g))[0];
        win.put(0, 8, &one(c + 1)).unwrap();
        win.flush(0).unwrap();
        let mut rel = win
            .fetch_and_op(0, 0, &one(0), ElemType::I64, AccOp::Replace)
            .unwrap();
        win.flush(0).unwrap();
        assert_eq!(i64s(&data(&win, &mut rel))[0], me as i64 + 1);
    }
    win.unlock_all().unwrap();
    w.barrier().unwrap();
    if me == 0 {
        assert_eq!(i64s(&win.local_copy().unwrap()), vec![0, iters * n as i64]);
    }
    win.free().unwrap();
}

/// (25) lock_all with request-based rput/rget: requests complete, data
/// checked after unlock_all.
fn role_lock_all_requests(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let win = Win::allocate(w, 8 * n as usize).unwrap();
    win.with_local(|m| m.copy_from_slice(&bytes_of(&vec![-(me as i64); n as usize])))
        .unwrap();
    w.barrier().unwrap();
    win.lock_all(0).unwrap();
    let mut gets = Vec::new();
    for t in 0..n {
        // The read comes before our put to the same target: old contents.
        gets.push(win.rget(t, 8 * me as u64, 8).unwrap());
        let mut p = win.rput(t, 8 * me as u64, &one(1000 + me as i64)).unwrap();
        win.wait_request(&mut p).unwrap();
    }
    for (t, g) in gets.iter_mut().enumerate() {
        let st = win.wait_request(g).unwrap();
        assert_eq!((st.source, st.count), (t as i32, 8));
        let v = i64s(&g.take_buffer().unwrap())[0];
        assert!(
            v == -(t as i64) || v == 1000 + me as i64,
            "rget from {t}: {v}"
        );
    }
    win.flush_all().unwrap();
    win.unlock_all().unwrap();
    w.barrier().unwrap();
    let expect: Vec<i64> = (0..n as i64).map(|r| 1000 + r).collect();
    assert_eq!(i64s(&win.local_copy().unwrap()), expect);
    // A request-based read completes by its wait alone (no flush, no
    // unlock first): alone in its epoch (a lone op the engine could hold
    // for the unlock to ride along), and behind other queued reads.
    let t = (me + 1) % n;
    win.lock(LockType::Shared, t, 0).unwrap();
    let mut g = win.rget(t, 8 * me as u64, 8).unwrap();
    win.wait_request(&mut g).unwrap();
    assert_eq!(i64s(&g.take_buffer().unwrap())[0], 1000 + me as i64);
    win.unlock(t).unwrap();
    win.lock(LockType::Shared, t, 0).unwrap();
    let mut first = win.get(t, 8 * t as u64, 8).unwrap();
    let mut g = win
        .rget_accumulate(t, 8 * me as u64, &one(0), ElemType::I64, AccOp::NoOp)
        .unwrap();
    win.wait_request(&mut g).unwrap();
    assert_eq!(i64s(&g.take_buffer().unwrap())[0], 1000 + me as i64);
    win.wait_request(&mut first).unwrap();
    assert_eq!(i64s(&first.take_buffer().unwrap())[0], 1000 + t as i64);
    win.unlock(t).unwrap();
    w.barrier().unwrap();
    win.free().unwrap();
}

/// (21) PROC_NULL and zero-size operations are no-ops; misuse is typed.
fn role_noops_and_errors(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let win = Win::allocate(w, 32).unwrap();
    // Outside any epoch.
    let e = win.put((me + 1) % n, 0, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    assert!(matches!(e, Error::Rma(_)));
    let e = win
        .accumulate((me + 1) % n, 0, &one(1), ElemType::I64, AccOp::Sum)
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    let mut b = [0u8; 8];
    match win.get_direct((me + 1) % n, 0, &mut b) {
        Err(e) => assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}"),
        // Only a target reached by messages says "not direct" here.
        Ok(direct) => assert!(!direct && win.path() != WinPath::Direct),
    }
    let e = win.unlock((me + 1) % n).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    win.fence(0).unwrap();
    // PROC_NULL: nothing happens; a read completes empty.
    assert!(win.get_direct(PROC_NULL, 0, &mut b).unwrap());
    win.put(PROC_NULL, 0, &one(9)).unwrap();
    win.accumulate(PROC_NULL, 0, &one(9), ElemType::I64, AccOp::Sum)
        .unwrap();
    let mut g = win.get(PROC_NULL, 0, 8).unwrap();
    let st = win.wait_request(&mut g).unwrap();
    assert_eq!(st.count, 0);
    assert!(g.take_buffer().unwrap().is_empty());
    // Zero-size ops.
    win.put((me + 1) % n, 0, &[]).unwrap();
    let mut g = win.get((me + 1) % n, 0, 0).unwrap();
    assert_eq!(win.wait_request(&mut g).unwrap().count, 0);
    // Bad target, out of range, bad accumulate.
    let e = win.put(n, 0, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Rank, "{e:?}");
    let e = win.put((me + 1) % n, 28, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    let e = win.get((me + 1) % n, u64::MAX, 8).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    let e = win.get_direct((me + 1) % n, 28, &mut b).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    let e = win
        .accumulate((me + 1) % n, 25, &one(1), ElemType::I64, AccOp::Sum)
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    let e = win.put(n + 1, 0, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Rank, "{e:?}");
    let e = win
        .accumulate((me + 1) % n, 0, &[1, 2, 3], ElemType::I64, AccOp::Sum)
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Op, "{e:?}");
    let e = win
        .fetch_and_op((me + 1) % n, 0, &[0u8; 16], ElemType::I64, AccOp::Sum)
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::Op, "{e:?}");
    // PSCW call in a fence epoch.
    let e = win.complete().unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    win.fence(0).unwrap();
    assert_eq!(
        win.local_copy().unwrap(),
        vec![0u8; 32],
        "no-ops wrote nothing"
    );
    win.free().unwrap();
}

/// Two windows on different communicators (engine ids differ between
/// ranks) do not mix their packets.
fn role_two_windows(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    // Only even ranks create the first window.
    let sub = w.split(me % 2, me).unwrap().unwrap();
    let a = if me % 2 == 0 {
        Some(Win::allocate(&sub, 8).unwrap())
    } else {
        None
    };
    let b = Win::allocate(w, 8 * n as usize).unwrap();
    b.fence(0).unwrap();
    b.put((me + 1) % n, 8 * me as u64, &one(me as i64 + 50))
        .unwrap();
    b.fence(0).unwrap();
    let prev = (me + n - 1) % n;
    assert_eq!(
        i64s(&b.local_copy().unwrap())[prev as usize],
        prev as i64 + 50
    );
    if let Some(a) = a {
        a.fence(0).unwrap();
        a.accumulate(0, 0, &one(1), ElemType::I64, AccOp::Sum)
            .unwrap();
        a.fence(0).unwrap();
        if sub.rank() == 0 {
            assert_eq!(i64s(&a.local_copy().unwrap())[0], sub.size() as i64);
        }
        a.free().unwrap();
    }
    b.free().unwrap();
}

/// allocate_shared + shared_query: direct stores into a neighbour's
/// segment, loads of every segment, an atomic counter on rank 0, bounds.
fn role_shared(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let iters = 100u64;
    let size = 64 + 8 * me as usize;
    if across_nodes(n) {
        // Shared memory cannot span nodes: every rank fails alike.
        let e = Win::allocate_shared(w, size).unwrap_err();
        assert_eq!(e.class(), ErrorClass::RmaShared, "{e:?}");
        return;
    }
    let sw = Win::allocate_shared(w, size).unwrap();
    for r in 0..n {
        let q = sw.shared_query(r).unwrap();
        assert_eq!((q.rank, q.size), (r, 64 + 8 * r as u64));
        // Contiguous by default: each segment follows the previous one.
        if r > 0 {
            let p = sw.shared_query(r - 1).unwrap();
            assert_eq!((q.pe, q.offset), (p.pe, p.offset + p.size), "segment {r}");
        }
    }
    assert_eq!(sw.shared_query(n).unwrap_err().class(), ErrorClass::Rank);
    // Write our rank into slot `me` of every segment (slot 0 is the counter).
    for r in 0..n {
        sw.write(r, 8 * (1 + me as u64), &one(me as i64 + 1))
            .unwrap();
    }
    for _ in 0..iters {
        sw.fetch_add_u64(0, 0, 1).unwrap();
    }
    sw.barrier().unwrap();
    for r in 0..n {
        let mut b = vec![0u8; 8 * (1 + n as usize)];
        sw.read(r, 0, &mut b).unwrap();
        let v = i64s(&b);
        let want: Vec<i64> = (0..n as i64).map(|k| k + 1).collect();
        assert_eq!(v[1..], want[..], "segment of {r}");
    }
    assert_eq!(sw.load_u64(0, 0).unwrap(), iters * n as u64);
    // CAS: exactly one rank wins.
    sw.barrier().unwrap();
    let won = sw
        .compare_exchange_u64(0, 0, iters * n as u64, 7)
        .unwrap()
        .is_ok();
    let mut wins = vec![0u8; n as usize];
    w.gather(&[won as u8], &mut wins, 0).unwrap();
    if me == 0 {
        assert_eq!(wins.iter().map(|b| *b as u32).sum::<u32>(), 1);
    }
    // Bounds.
    let e = sw
        .write((me + 1) % n, 60 + 8 * ((me + 1) % n) as u64, &[0u8; 8])
        .unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    sw.free().unwrap();
}

/// (27, 28) A shared window as an RMA window: zero-size segments, direct
/// stores under lock_all + `Win_sync`, fence with asserts around puts
/// (loads see them after the fence), put + flush then a load by the target
/// after a barrier, and gets of stored bytes. Shared windows take the
/// direct path even with `TMX_RMA_DIRECT=0`.
fn role_shared_rma(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    // Rank 1's segment is empty (win_shared_zerobyte).
    // Four areas of one slot per rank, one per phase (so that a rank a
    // phase ahead never overwrites what a slower rank still checks).
    let area = 8 * n as u64;
    let size = if me == 1 { 0 } else { 4 * area as usize };
    // The non-contiguous layout (alloc_shared_noncontig): one segment in
    // each rank's heap.
    if across_nodes(n) {
        let e = SharedWin::allocate_with(w, size, false).unwrap_err();
        assert_eq!(e.class(), ErrorClass::RmaShared, "{e:?}");
        return;
    }
    let sw = SharedWin::allocate_with(w, size, false).unwrap();
    for r in 0..n {
        let q = sw.shared_query(r).unwrap();
        let own_pe = sw.shared_query(me).unwrap().pe;
        assert_eq!(
            q.pe == own_pe,
            r == me,
            "segment {r} in its own rank's heap"
        );
    }
    let win = sw.win();
    assert_eq!(win.path(), WinPath::Direct);
    assert_eq!(sw.shared_query(1).unwrap().size, 0);
    assert_eq!(win.target_size(1), Some(0));
    let e = win.put(1, 0, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    let e = win.put(0, 0, &one(1)).unwrap_err();
    assert_eq!(e.class(), ErrorClass::RmaSync, "{e:?}");
    // Targets with a segment, other than me.
    let peers: Vec<i32> = (0..n).filter(|r| *r != 1 && *r != me).collect();
    // (27) lock_all + direct stores + sync + barrier + sync: loads see them.
    win.lock_all(0).unwrap();
    for &r in &peers {
        sw.write(r, 8 * me as u64, &one(10 + me as i64)).unwrap();
    }
    win.sync().unwrap();
    w.barrier().unwrap();
    win.sync().unwrap();
    if me != 1 {
        let mut b = vec![0u8; 8 * n as usize];
        sw.read(me, 0, &mut b).unwrap();
        for (k, v) in i64s(&b).iter().enumerate() {
            let writer_stored = k as i32 != me && k != 1 && me != 1;
            if writer_stored {
                assert_eq!(*v, 10 + k as i64, "store of rank {k} in my segment");
            }
        }
    }
    win.unlock_all().unwrap();
    // (28) fence with asserts: puts between fences, loads after.
    win.fence(NOPRECEDE).unwrap();
    for &r in &peers {
        win.put(r, area + 8 * me as u64, &one(100 + me as i64))
            .unwrap();
    }
    win.fence(NOSUCCEED).unwrap();
    if me != 1 {
        let mut b = vec![0u8; 8 * n as usize];
        sw.read(me, area, &mut b).unwrap();
        for (k, v) in i64s(&b).iter().enumerate() {
            if k as i32 != me && k != 1 {
                assert_eq!(*v, 100 + k as i64, "fence put of rank {k}");
            }
        }
    }
    // (28) put + flush, barrier, target's sync + load (put_flush_load);
    // then a get of what the target stored itself.
    win.lock_all(0).unwrap();
    if let Some(&t) = peers.first() {
        win.put(t, 2 * area + 8 * me as u64, &one(1000 + me as i64))
            .unwrap();
        win.flush(t).unwrap();
    }
    w.barrier().unwrap();
    win.sync().unwrap();
    if me != 1 {
        let writers: Vec<i32> = (0..n)
            .filter(|r| *r != me && (0..n).find(|t| *t != 1 && t != r) == Some(me))
            .collect();
        for k in writers {
            let mut b = [0u8; 8];
            sw.read(me, 2 * area + 8 * k as u64, &mut b).unwrap();
            assert_eq!(i64::from_ne_bytes(b), 1000 + k as i64, "flushed put of {k}");
        }
        sw.write(me, 3 * area, &one(-5 - me as i64)).unwrap();
    }
    win.sync().unwrap();
    w.barrier().unwrap();
    win.sync().unwrap();
    for &r in &peers {
        let mut g = win.get(r, 3 * area, 8).unwrap();
        assert_eq!(
            i64s(&data(win, &mut g)),
            vec![-5 - r as i64],
            "get from {r}"
        );
    }
    win.unlock_all().unwrap();
    sw.free().unwrap();
}

/// (26) Dynamic windows: two distributed linked lists built by every rank
/// appending elements from its attached pool, swapping itself in as the
/// tail with fetch-and-op(REPLACE) on rank 0 and then linking the old tail
/// to it with a put; one list under lock_all + flush, one under exclusive
/// locks (MPICH's `linked_list_lockall` and `linked_list_fop`). Rank 0
/// then walks both lists with gets: every element exactly once, each
/// rank's in its order. Then: an access outside the attached regions is a
/// range error, and detach hands the memory back.
fn role_dynamic_list(w: &Comm) {
    const K: usize = 25;
    let (me, n) = (w.rank(), w.size());
    if across_nodes(n) {
        // Dynamic windows need single copy to every target.
        let e = Win::create_dynamic(w).unwrap_err();
        assert_eq!(e.class(), ErrorClass::UnsupportedOperation, "{e:?}");
        return;
    }
    // Dynamic windows take the direct path whatever TMX_RMA_DIRECT says.
    let win = Win::create_dynamic(w).unwrap();
    assert_eq!(win.path(), WinPath::Direct);
    // Pointers: (rank + 1) << 48 | address; 0 is nil.
    let enc = |r: i32, a: u64| ((r as u64 + 1) << 48) | a;
    let dec = |p: u64| ((p >> 48) as i32 - 1, p & ((1 << 48) - 1));
    // Rank 0's meta region: two tail pointers, then two sentinel heads.
    let meta = if me == 0 {
        let m = win.attach(vec![0u8; 48]).unwrap();
        win.with_attached(m, |b| {
            b[0..8].copy_from_slice(&enc(0, m + 16).to_ne_bytes());
            b[8..16].copy_from_slice(&enc(0, m + 32).to_ne_bytes());
        })
        .unwrap();
        m
    } else {
        0
    };
    let mut mb = meta.to_ne_bytes();
    w.bcast(&mut mb, 0).unwrap();
    let meta = u64::from_ne_bytes(mb);
    // My pool: 2 lists x K elements of [value, next].
    let pool = win.attach(vec![0u8; 16 * 2 * K]).unwrap();
    win.with_attached(pool, |b| {
        for l in 0..2 {
            for i in 0..K {
                let v = (me as i64) * 1000 + i as i64;
                let at = 16 * (l * K + i);
                b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
            }
        }
    })
    .unwrap();
    w.barrier().unwrap();
    let append = |l: usize, i: usize, exclusive: bool| {
        let elem = pool + 16 * (l * K + i) as u64;
        let tail = meta + 8 * l as u64;
        if exclusive {
            win.lock(LockType::Exclusive, 0, 0).unwrap();
        }
        let mut r = win
            .fetch_and_op(
                0,
                tail,
                &enc(me, elem).to_ne_bytes(),
                ElemType::U64,
                AccOp::Replace,
            )
            .unwrap();
        if exclusive {
            win.unlock(0).unwrap();
        }
        let old = u64::from_ne_bytes(data(&win, &mut r).try_into().unwrap());
        let (orank, oaddr) = dec(old);
        if exclusive {
            win.lock(LockType::Exclusive, orank, 0).unwrap();
            win.put(orank, oaddr + 8, &enc(me, elem).to_ne_bytes())
                .unwrap();
            win.unlock(orank).unwrap();
        } else {
            win.put(orank, oaddr + 8, &enc(me, elem).to_ne_bytes())
                .unwrap();
            win.flush(orank).unwrap();
        }
    };
    win.lock_all(0).unwrap();
    for i in 0..K {
        append(0, i, false);
    }
    win.unlock_all().unwrap();
    for i in 0..K {
        append(1, i, true);
    }
    w.barrier().unwrap();
    if me == 0 {
        win.lock_all(0).unwrap();
        for l in 0..2u64 {
            let mut at = (0, meta + 16 + 16 * l);
            let mut seen: Vec<Vec<i64>> = vec![Vec::new(); n as usize];
            let mut count = 0;
            loop {
                let mut g = win.get(at.0, at.1, 16).unwrap();
                let e = i64s(&data(&win, &mut g));
                if count > 0 {
                    let r = (e[0] / 1000) as usize;
                    seen[r].push(e[0] % 1000);
                }
                count += 1;
                if e[1] == 0 {
                    break;
                }
                at = dec(e[1] as u64);
                assert!(count <= n as usize * K + 1, "list {l} has a cycle");
            }
            for (r, s) in seen.iter().enumerate() {
                let want: Vec<i64> = (0..K as i64).collect();
                assert_eq!(s, &want, "list {l}: elements of rank {r}, in order");
            }
        }
        win.unlock_all().unwrap();
    }
    w.barrier().unwrap();
    // Outside the attached regions (an address inside no region, and one
    // crossing the end of the pool): range errors, on others and on self.
    win.lock_all(0).unwrap();
    for t in [(me + 1) % n, me] {
        let e = win.put(t, 8, &one(1)).unwrap_err();
        assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
        let e = win.get(t, pool + 16 * 2 * K as u64 - 4, 8).unwrap_err();
        assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    }
    win.unlock_all().unwrap();
    w.barrier().unwrap();
    let e = win.detach(pool + 1).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Arg, "{e:?}");
    let mem = win.detach(pool).unwrap();
    assert_eq!(mem.len(), 16 * 2 * K);
    assert_eq!(
        i64s(&mem[16 * (K + 3)..16 * (K + 3) + 8]),
        vec![me as i64 * 1000 + 3]
    );
    if me == 0 {
        win.detach(meta).unwrap();
    }
    win.free().unwrap();
}

/// Misuse and limits of the window kinds: attach/detach on the wrong
/// window, the region table's limit, shared windows larger than the heap
/// (both layouts), and an allocated window larger than the heap (it works,
/// in private memory reached by CMA on the direct path).
fn role_win_limits(w: &Comm) {
    let me = w.rank();
    let big = 64 << 20; // larger than the 16 MiB default heap
    let win = Win::allocate(w, 64).unwrap();
    assert_eq!(
        win.attach(vec![0u8; 8]).unwrap_err().class(),
        ErrorClass::Arg
    );
    assert_eq!(win.detach(8).unwrap_err().class(), ErrorClass::Arg);
    win.free().unwrap();
    let across = across_nodes(w.size());
    let shared_class = if across {
        ErrorClass::RmaShared
    } else {
        ErrorClass::NoMem
    };
    for contiguous in [true, false] {
        let e = SharedWin::allocate_with(w, big, contiguous).unwrap_err();
        assert_eq!(e.class(), shared_class, "{e:?}");
    }
    // The failed shared windows gave their heap blocks back: a full-size
    // one still fits.
    if !across {
        let sw = Win::allocate_shared(w, 1 << 20).unwrap();
        sw.free().unwrap();
    }
    let large = Win::allocate(w, big).unwrap();
    large.lock(LockType::Exclusive, me, 0).unwrap();
    large.put(me, big as u64 - 8, &one(42)).unwrap();
    let mut g = large.get(me, big as u64 - 8, 8).unwrap();
    large.unlock(me).unwrap();
    assert_eq!(i64s(&data(&large, &mut g)), vec![42]);
    large.free().unwrap();
    // Dynamic windows take the direct path whatever TMX_RMA_DIRECT says.
    if across {
        let e = Win::create_dynamic(w).unwrap_err();
        assert_eq!(e.class(), ErrorClass::UnsupportedOperation, "{e:?}");
        return;
    }
    let dw = Win::create_dynamic(w).unwrap();
    assert_eq!(dw.path(), WinPath::Direct);
    let mut bases = Vec::new();
    for i in 0..shmem_onesided::winsync::REGION_SLOTS {
        bases.push(dw.attach(vec![i as u8; 16]).unwrap());
    }
    let e = dw.attach(vec![0u8; 16]).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Arg, "{e:?}");
    assert_eq!(
        dw.with_attached(1, |_| ()).unwrap_err().class(),
        ErrorClass::Arg
    );
    for (i, b) in bases.into_iter().enumerate() {
        assert_eq!(dw.detach(b).unwrap(), vec![i as u8; 16]);
    }
    // A slot freed by detach is reused.
    let b = dw.attach(vec![7u8; 4]).unwrap();
    dw.lock_all(0).unwrap();
    let mut g = dw.get(me, b, 4).unwrap();
    dw.unlock_all().unwrap();
    assert_eq!(data(&dw, &mut g), vec![7u8; 4]);
    dw.detach(b).unwrap();
    dw.free().unwrap();
}

/// (4) A derived-datatype put under fence: a contiguous origin scattered
/// into a strided target layout (vector of 3 blocks of 2 i64, stride 4);
/// the gaps stay untouched.
fn role_typed_put(w: &Comm) {
    let me = w.rank();
    let win = Win::create(w, bytes_of(&[-1i64; 16])).unwrap();
    let i64t = Datatype::basic(BasicType::I64);
    i64t.commit().unwrap();
    let vec_t = Datatype::vector(3, 2, 4, &i64t).unwrap();
    vec_t.commit().unwrap();
    win.fence(0).unwrap();
    if me == 0 {
        let src = bytes_of(&[1, 2, 3, 4, 5, 6]);
        win.put_typed(1, 16, &src, &i64t, 6, &vec_t, 1).unwrap();
        // Sizes that differ are an error; a layout past the window too.
        let e = win.put_typed(1, 0, &src, &i64t, 5, &vec_t, 1).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Arg, "{e:?}");
        let e = win.put_typed(1, 96, &src, &i64t, 6, &vec_t, 1).unwrap_err();
        assert_eq!(e.class(), ErrorClass::RmaRange, "{e:?}");
    }
    win.fence(0).unwrap();
    if me == 1 {
        let v = i64s(&win.local_copy().unwrap());
        let mut want = vec![-1i64; 16];
        for (k, x) in [(2, 1), (3, 2), (6, 3), (7, 4), (10, 5), (11, 6)] {
            want[k] = x;
        }
        assert_eq!(v, want);
    }
    let mem = win.free().unwrap();
    assert_eq!(mem.len(), 128);
}

/// The thread interleavings the RMA design lists as valid ("RMA +
/// threads"), on one window from two threads per rank: (1) ACC + ACC,
/// (3) ACC + FLUSH and (4) FLUSH + FLUSH inside lock_all, then (2) PUT +
/// FENCE (one thread puts while the other fences). On the engine path the
/// calls of one window run one at a time (the second waits).
fn role_same_window_threads(w: &Comm) {
    const ITERS: i64 = 200;
    const FENCES: usize = 30;
    let (me, n) = (w.rank(), w.size());
    let win = Win::allocate(w, 8 * (1 + n as usize)).unwrap();
    win.lock_all(0).unwrap();
    std::thread::scope(|s| {
        for k in 0..2 {
            let win = &win;
            s.spawn(move || {
                for i in 0..ITERS {
                    for t in 0..n {
                        win.accumulate(t, 0, &one(1), ElemType::I64, AccOp::Sum)
                            .unwrap();
                    }
                    if i % 10 == 0 {
                        if k == 0 {
                            win.flush_all().unwrap();
                        } else {
                            win.flush((me + 1) % n).unwrap();
                            win.flush_local_all().unwrap();
                        }
                    }
                }
            });
        }
    });
    win.flush_all().unwrap();
    win.unlock_all().unwrap();
    w.barrier().unwrap();
    assert_eq!(
        i64s(&win.local_copy().unwrap())[0],
        2 * ITERS * n as i64,
        "accumulates from two threads of every rank"
    );
    // PUT + FENCE: each put lands in the epoch before or after a fence.
    let t = (me + 1) % n;
    win.fence(0).unwrap();
    std::thread::scope(|s| {
        let win = &win;
        s.spawn(move || {
            for v in 1..=ITERS {
                win.put(t, 8 * (1 + me as u64), &one(v)).unwrap();
            }
        });
        s.spawn(move || {
            for _ in 0..FENCES {
                win.fence(0).unwrap();
            }
        });
    });
    win.fence(NOSUCCEED).unwrap();
    let prev = (me + n - 1) % n;
    assert_eq!(
        i64s(&win.local_copy().unwrap())[1 + prev as usize],
        ITERS,
        "the last put of rank {prev} is the value left"
    );
    win.free().unwrap();
}

/// Two threads per rank, each driving its own window (fence epochs and
/// lock epochs) at the same time: progress from either thread serves both.
fn role_threads(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let wins = [
        Win::allocate(w, 8 * n as usize).unwrap(),
        Win::allocate(w, 8 * n as usize).unwrap(),
    ];
    std::thread::scope(|s| {
        for (k, win) in wins.iter().enumerate() {
            s.spawn(move || {
                for round in 0..20i64 {
                    let v = 1000 * k as i64 + 10 * round + me as i64;
                    if k == 0 {
                        win.fence(0).unwrap();
                        win.put((me + 1) % n, 8 * me as u64, &one(v)).unwrap();
                        win.fence(0).unwrap();
                    } else {
                        let t = (me + 1) % n;
                        win.lock(LockType::Exclusive, t, 0).unwrap();
                        win.put(t, 8 * me as u64, &one(v)).unwrap();
                        win.unlock(t).unwrap();
                    }
                }
            });
        }
    });
    w.barrier().unwrap();
    let prev = (me + n - 1) % n;
    for (k, win) in wins.into_iter().enumerate() {
        let got = i64s(&win.local_copy().unwrap())[prev as usize];
        assert_eq!(got, 1000 * k as i64 + 190 + prev as i64, "window {k}");
        win.free().unwrap();
    }
}

/// Large operations (MiB-sized packets: the endpoint's buffered and
/// fragmented paths): put, get and accumulate under fence and lock.
fn role_large(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let len = 3 << 20;
    let pat = |seed: usize| -> Vec<u8> {
        (0..len)
            .map(|i| ((i * 7 + seed * 13) % 251) as u8)
            .collect()
    };
    let win = Win::allocate(w, len + 8).unwrap();
    let peer = (me + 1) % n;
    win.fence(0).unwrap();
    win.put(peer, 3, &pat(me as usize)).unwrap();
    win.fence(0).unwrap();
    let prev = (me + n - 1) % n;
    assert!(win
        .with_local(|m| m[3..3 + len] == pat(prev as usize)[..])
        .unwrap());
    let mut g = win.get(peer, 3, len).unwrap();
    win.fence(0).unwrap();
    assert!(data(&win, &mut g) == pat(me as usize), "large get");
    // Accumulate of 2^18 i32 ones, under an exclusive lock.
    let ones: Vec<u8> = (0..(1 << 18)).flat_map(|_| 1i32.to_ne_bytes()).collect();
    win.fence(NOSUCCEED).unwrap();
    win.with_local(|m| m.fill(0)).unwrap();
    w.barrier().unwrap();
    win.lock(LockType::Exclusive, peer, 0).unwrap();
    win.accumulate(peer, 0, &ones, ElemType::I32, AccOp::Sum)
        .unwrap();
    win.unlock(peer).unwrap();
    w.barrier().unwrap();
    let ok = win
        .with_local(|m| {
            m[..1 << 20]
                .chunks_exact(4)
                .all(|c| i32::from_ne_bytes(c.try_into().unwrap()) == 1)
        })
        .unwrap();
    assert!(ok, "large accumulate");
    win.free().unwrap();
}

/// One counter word on rank 0 hit at once by every rank's direct and
/// active-message origins (run `_mixed`, each rank has both kinds of
/// target): fetch-and-op under `lock_all` with flushes, accumulate under
/// exclusive locks, compare-and-swap retry loops under shared locks, and
/// PSCW epochs of accumulates. Every count ends exact, and the values
/// fetch-and-op handed out are 0..n*iters, each once.
fn role_mixed_counter(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let iters = 60usize;
    let win = Win::allocate(w, 32).unwrap();
    // Fetch-and-op under lock_all, flushed now and then.
    let mut mine = Vec::new();
    win.lock_all(0).unwrap();
    for i in 0..iters {
        let mut r = win
            .fetch_and_op(0, 0, &one(1), ElemType::I64, AccOp::Sum)
            .unwrap();
        if i % 7 == 0 {
            win.flush(0).unwrap();
        }
        win.flush_local(0).unwrap();
        mine.push(i64s(&data(&win, &mut r))[0]);
    }
    win.unlock_all().unwrap();
    // Accumulate under exclusive locks.
    for _ in 0..iters / 4 {
        win.lock(LockType::Exclusive, 0, 0).unwrap();
        win.accumulate(0, 8, &one(1), ElemType::I64, AccOp::Sum)
            .unwrap();
        win.unlock(0).unwrap();
    }
    // Compare-and-swap increments under shared locks: each retries until
    // its swap wins.
    for _ in 0..iters / 4 {
        win.lock(LockType::Shared, 0, 0).unwrap();
        let mut cur = 0i64;
        loop {
            let mut r = win
                .compare_and_swap(0, 16, &one(cur + 1), &one(cur), ElemType::I64)
                .unwrap();
            win.flush(0).unwrap();
            let old = i64s(&data(&win, &mut r))[0];
            if old == cur {
                break;
            }
            cur = old;
        }
        win.unlock(0).unwrap();
    }
    // PSCW: rank 0 exposes, everybody accumulates.
    for _ in 0..4 {
        if me == 0 {
            win.post(&(0..n).collect::<Vec<_>>(), 0).unwrap();
        }
        win.start(&[0], 0).unwrap();
        win.accumulate(0, 24, &one(me as i64 + 1), ElemType::I64, AccOp::Sum)
            .unwrap();
        win.complete().unwrap();
        if me == 0 {
            win.wait().unwrap();
        }
    }
    w.barrier().unwrap();
    let mut all = vec![0u8; 8 * iters * n as usize];
    w.gather(&bytes_of(&mine), &mut all, 0).unwrap();
    if me == 0 {
        let mut got = i64s(&all);
        got.sort_unstable();
        assert_eq!(got, (0..(iters * n as usize) as i64).collect::<Vec<_>>());
        let m = i64s(&win.local_copy().unwrap());
        let q = (iters / 4 * n as usize) as i64;
        let pscw: i64 = 4 * (1..=n as i64).sum::<i64>();
        assert_eq!(m, vec![(iters * n as usize) as i64, q, q, pscw]);
    }
    win.free().unwrap();
}

/// Window constructors given sizes that cannot be allocated fail with an
/// MPI error (`MPI_ERR_NO_MEM`) on every rank, collectively: a rank whose
/// neighbours asked for too much fails too instead of waiting, and the next
/// window works.
fn role_huge_windows(w: &Comm) {
    let me = w.rank();
    // Shared memory cannot span nodes: that error comes first.
    let shared_class = if across_nodes(w.size()) {
        ErrorClass::RmaShared
    } else {
        ErrorClass::NoMem
    };
    for size in [usize::MAX, 1 << 40, 1 << 45] {
        let e = Win::allocate(w, size).unwrap_err();
        assert_eq!(e.class(), ErrorClass::NoMem, "allocate({size}): {e:?}");
        for contiguous in [true, false] {
            let e = SharedWin::allocate_with(w, size, contiguous).unwrap_err();
            assert_eq!(e.class(), shared_class, "allocate_shared({size}): {e:?}");
        }
    }
    // Only rank 0 asks too much: every rank fails.
    let size = if me == 0 { usize::MAX } else { 64 };
    let e = Win::allocate(w, size).unwrap_err();
    assert_eq!(e.class(), ErrorClass::NoMem, "{e:?}");
    let e = SharedWin::allocate(w, size).unwrap_err();
    assert_eq!(e.class(), shared_class, "{e:?}");
    // Nothing was left behind: a window works.
    let win = Win::allocate(w, 64).unwrap();
    win.fence(0).unwrap();
    win.put((me + 1) % w.size(), 0, &one(7)).unwrap();
    win.fence(NOSUCCEED).unwrap();
    assert_eq!(i64s(&win.local_copy().unwrap())[0], 7);
    win.free().unwrap();
}

/// A window dropped by one rank without `free`: the others' `free` fails
/// with an error (`MPI_ERR_WIN`) instead of waiting forever, and the ranks
/// go on (a new window works).
fn role_dropped_window(w: &Comm) {
    let me = w.rank();
    let win = Win::allocate(w, 64).unwrap();
    win.fence(0).unwrap();
    win.fence(NOSUCCEED).unwrap();
    if me == 1 {
        drop(win);
    } else {
        let e = win.free().unwrap_err();
        assert_eq!(e.class(), ErrorClass::Win, "{e:?}");
    }
    let win = Win::allocate(w, 64).unwrap();
    win.fence(0).unwrap();
    win.fence(NOSUCCEED).unwrap();
    win.free().unwrap();
}

/// Reads slot `i` of the i64 array at `p` (memory a window exposes).
fn rd(p: *const i64, i: usize) -> i64 {
    // SAFETY: the test's own array of at least i + 1 slots, alive for the
    // test; read between epochs, as MPI allows.
    unsafe { p.add(i).read_volatile() }
}

/// Writes slot `i` of the i64 array at `p`.
fn wr(p: *mut i64, i: usize, v: i64) {
    // SAFETY: as in `rd`, for a write.
    unsafe { p.add(i).write_volatile(v) }
}

/// Windows over the caller's memory (`Win::create_raw`, what C's
/// `MPI_Win_create` needs) and an allocated window's local base
/// (`Win::local_base`, C's `MPI_Win_allocate` base pointer): remote puts
/// and accumulates change the program's memory itself, and the program's
/// stores are what remote gets read.
fn role_raw(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let nu = n as usize;
    let mut mem: Box<[i64]> = vec![-1i64; nu + 2].into_boxed_slice();
    let p = mem.as_mut_ptr();
    // SAFETY: `mem` lives until after `free` below and is not moved
    // (a boxed slice); the test accesses it only between epochs.
    let win = unsafe { Win::create_raw(w, p.cast(), 8 * (nu + 2)) }.unwrap();
    assert_eq!(win.path(), expected_path(n));
    assert_eq!(win.local_base().unwrap(), Some(p.cast::<u8>()));
    win.fence(NOPRECEDE).unwrap();
    for t in 0..n {
        win.put(t, 8 * me as u64, &one(100 + me as i64)).unwrap();
    }
    win.fence(0).unwrap();
    for r in 0..nu {
        assert_eq!(
            rd(p, r),
            100 + r as i64,
            "put landed in the caller's memory"
        );
    }
    assert_eq!(rd(p, nu), -1, "untouched slot");
    // The program's own store is what a remote get reads.
    wr(p, nu, 1000 + me as i64);
    win.fence(0).unwrap();
    let nb = (me + 1) % n;
    let mut g = win.get(nb, 8 * nu as u64, 8).unwrap();
    win.fence(0).unwrap();
    assert_eq!(i64s(&data(&win, &mut g)), vec![1000 + nb as i64]);
    // Passive target: accumulate and fetch-and-op on rank 0's last slot.
    win.fence(NOSUCCEED).unwrap();
    if me == 0 {
        wr(p, nu + 1, 0);
    }
    w.barrier().unwrap();
    win.lock(LockType::Shared, 0, 0).unwrap();
    win.accumulate(
        0,
        8 * (nu + 1) as u64,
        &one(me as i64 + 1),
        ElemType::I64,
        AccOp::Sum,
    )
    .unwrap();
    let mut f = win
        .fetch_and_op(0, 8 * (nu + 1) as u64, &one(10), ElemType::I64, AccOp::Sum)
        .unwrap();
    win.unlock(0).unwrap();
    let old = i64s(&data(&win, &mut f))[0];
    assert!((0..=(n as i64 * 11)).contains(&old), "fetched {old}");
    w.barrier().unwrap();
    if me == 0 {
        win.sync().unwrap();
        let total: i64 = (1..=n as i64).sum::<i64>() + 10 * n as i64;
        assert_eq!(rd(p, nu + 1), total, "accumulates in the caller's memory");
    }
    assert_eq!(
        win.free().unwrap(),
        Vec::<u8>::new(),
        "the memory stays the caller's"
    );
    assert_eq!(mem[nu], 1000 + me as i64);
    drop(mem);

    // An allocated window's local base: the program loads and stores it.
    let win = Win::allocate(w, 8 * nu).unwrap();
    let b = win.local_base().unwrap().unwrap().cast::<i64>();
    assert_eq!(b as usize % 8, 0, "aligned base");
    wr(b, me as usize, 7 * me as i64);
    win.fence(NOPRECEDE).unwrap();
    let mut g = win.get(nb, 8 * nb as u64, 8).unwrap();
    for t in 0..n {
        if t != me {
            win.put(t, 8 * me as u64, &one(7 * me as i64)).unwrap();
        }
    }
    win.fence(NOSUCCEED).unwrap();
    assert_eq!(
        i64s(&data(&win, &mut g)),
        vec![7 * nb as i64],
        "get saw a local store"
    );
    for r in 0..nu {
        assert_eq!(rd(b, r), 7 * r as i64, "puts visible to local loads");
    }
    assert_eq!(
        i64s(&win.local_copy().unwrap()),
        (0..n as i64).map(|r| 7 * r).collect::<Vec<_>>()
    );
    win.free().unwrap();
    if across_nodes(n) {
        return; // shared and dynamic windows are one node's
    }

    // A shared window's segments by address: every rank stores its own,
    // loads everyone's.
    let sw = Win::allocate_shared(w, 8).unwrap();
    wr(sw.base_ptr(me).unwrap().cast(), 0, 50 + me as i64);
    sw.barrier().unwrap();
    for r in 0..n {
        let q = sw.base_ptr(r).unwrap().cast::<i64>();
        assert_eq!(rd(q, 0), 50 + r as i64, "segment {r} by address");
    }
    assert_eq!(sw.base_ptr(n).unwrap_err().class(), ErrorClass::Rank);
    sw.barrier().unwrap();
    sw.free().unwrap();

    // A dynamic window over the caller's memory: origins put at its
    // address, the owner sees the bytes in place.
    let dw = Win::create_dynamic(w).unwrap();
    let mut region: Box<[i64]> = vec![0i64; nu].into_boxed_slice();
    let rp = region.as_mut_ptr();
    // SAFETY: `region` stays alive and unmoved until after the detach
    // below; the test reads it only after the closing fence.
    let addr = unsafe { dw.attach_raw(rp.cast(), 8 * nu) }.unwrap();
    assert_eq!(addr, rp as u64);
    let mut raw = vec![0u8; 8 * nu];
    w.allgather_into(&addr.to_ne_bytes(), &mut raw).unwrap();
    let all: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    dw.fence(0).unwrap();
    dw.put(nb, all[nb as usize] + 8 * me as u64, &one(60 + me as i64))
        .unwrap();
    dw.fence(0).unwrap();
    let from = (me + n - 1) % n;
    assert_eq!(rd(rp, from as usize), 60 + from as i64, "put by address");
    w.barrier().unwrap();
    assert_eq!(dw.detach(addr).unwrap(), Vec::<u8>::new());
    dw.free().unwrap();
    drop(region);
}

type Role = (&'static str, fn(&Comm));

fn roles() -> Vec<Role> {
    vec![
        ("fence", role_fence),
        ("acc_ops", role_acc_ops),
        ("pscw", role_pscw),
        ("lock_contention", role_lock_contention),
        ("fetch_add_counter", role_fetch_add_counter),
        ("flush_visibility", role_flush_visibility),
        ("cas_mutex", role_cas_mutex),
        ("lock_all_requests", role_lock_all_requests),
        ("noops_and_errors", role_noops_and_errors),
        ("two_windows", role_two_windows),
        ("shared", role_shared),
        ("shared_rma", role_shared_rma),
        ("dynamic_list", role_dynamic_list),
        ("win_limits", role_win_limits),
        ("typed_put", role_typed_put),
        ("threads", role_threads),
        ("same_window_threads", role_same_window_threads),
        ("large", role_large),
        ("huge_windows", role_huge_windows),
        ("mixed_counter", role_mixed_counter),
        ("dropped_window", role_dropped_window),
        ("raw", role_raw),
    ]
}

fn run_rank(role: &str) -> ExitCode {
    let Some((_, f)) = roles().into_iter().find(|(n, _)| *n == role) else {
        eprintln!("unknown role {role}");
        return ExitCode::from(3);
    };
    let w = adi::init().unwrap();
    f(&w);
    adi::finalize().unwrap();
    ExitCode::SUCCESS
}

fn launch(role: &str, n: usize, env: &[(&str, &str)]) -> i32 {
    let exe = std::env::current_exe().unwrap();
    let mut spec = JobSpec::new(n, exe.to_string_lossy().to_string(), vec![]);
    spec.env.push((ROLE.to_string(), role.to_string()));
    for (k, v) in env {
        spec.env.push((k.to_string(), v.to_string()));
    }
    spec.timeout = Some(Duration::from_secs(
        if role == "dropped_window" || role == "huge_windows" {
            30
        } else {
            120
        },
    ));
    spec.kill_grace = Duration::from_millis(500);
    let report = run_job(&spec).unwrap();
    if let Some(f) = &report.failure {
        eprintln!("  job {role} (-n {n}): {f}");
    }
    report.exit_code
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        return run_rank(&role);
    }
    let base: Vec<(&str, &str, usize)> = vec![
        ("fence_2_ranks", "fence", 2),
        ("fence_4_ranks", "fence", 4),
        ("raw_memory_windows_3_ranks", "raw", 3),
        ("raw_memory_windows_1_rank", "raw", 1),
        ("acc_ops_4_ranks", "acc_ops", 4),
        ("pscw_3_ranks", "pscw", 3),
        ("lock_contention_3_ranks", "lock_contention", 3),
        ("fetch_add_counter_3_ranks", "fetch_add_counter", 3),
        ("flush_visibility_3_ranks", "flush_visibility", 3),
        ("cas_mutex_3_ranks", "cas_mutex", 3),
        ("lock_all_requests_3_ranks", "lock_all_requests", 3),
        ("noops_and_errors_2_ranks", "noops_and_errors", 2),
        ("noops_and_errors_1_rank", "noops_and_errors", 1),
        ("two_windows_4_ranks", "two_windows", 4),
        ("allocate_shared_3_ranks", "shared", 3),
        ("allocate_shared_1_rank", "shared", 1),
        ("shared_rma_4_ranks", "shared_rma", 4),
        ("shared_rma_2_ranks", "shared_rma", 2),
        ("dynamic_linked_list_4_ranks", "dynamic_list", 4),
        ("dynamic_linked_list_1_rank", "dynamic_list", 1),
        ("window_limits_2_ranks", "win_limits", 2),
        ("typed_put_2_ranks", "typed_put", 2),
        ("threads_two_windows_3_ranks", "threads", 3),
        (
            "threads_one_window_interleavings_3_ranks",
            "same_window_threads",
            3,
        ),
        ("large_ops_2_ranks", "large", 2),
        ("large_ops_small_eager_area_cma", "large", 2),
        ("large_ops_fragmented_without_cma", "large", 2),
        ("huge_windows_fail_collectively_2_ranks", "huge_windows", 2),
        ("shared_counter_all_sync_modes_4_ranks", "mixed_counter", 4),
        ("shared_counter_all_sync_modes_3_ranks", "mixed_counter", 3),
        (
            "dropped_window_fails_peers_free_3_ranks",
            "dropped_window",
            3,
        ),
    ];
    // Every scenario on four configurations: the direct backend with window
    // memory in the heap (default), the direct backend with private window
    // memory reached by CMA (`TMX_RMA_HEAP_WINDOWS=0`), every target by
    // active messages (`TMX_RMA_DIRECT=0`), and mixed windows (ranks on two
    // simulated nodes, `TMX_RMA_TEST_SPLIT=2`); those of two or more ranks
    // also on two fake nodes (`adi::ENV_TEST_NODES=2`).
    let tests: Vec<(String, &str, usize)> = base
        .iter()
        .flat_map(|(name, role, n)| {
            [
                (name.to_string(), *role, *n),
                (format!("{name}_private"), *role, *n),
                (format!("{name}_engine"), *role, *n),
                (format!("{name}_mixed"), *role, *n),
                (format!("{name}_nodes"), *role, *n),
            ]
        })
        .filter(|(name, _, n)| *n > 1 || !name.ends_with("_nodes"))
        .collect();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let only_ignored = args.iter().any(|a| a == "--ignored");
    if args.iter().any(|a| a == "--list") {
        for (name, ..) in &tests {
            println!("{name}: test");
        }
        return ExitCode::SUCCESS;
    }
    let filter: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    println!("\nrunning {} tests", tests.len());
    let (mut passed, mut failed, mut filtered) = (0, 0, 0);
    for (name, role, n) in &tests {
        if only_ignored || (!filter.is_empty() && !filter.iter().any(|p| name.contains(p.as_str())))
        {
            filtered += 1;
            continue;
        }
        let t = Instant::now();
        // Packets larger than the eager area: CMA rendezvous, or (CMA off)
        // fragments through the ring.
        let mut env: Vec<(&str, &str)> = if name.contains("small_eager") {
            vec![("TMX_SHMEM_EAGER_BYTES", "256K")]
        } else if name.contains("fragmented") {
            vec![("TMX_SHMEM_EAGER_BYTES", "256K"), ("TMX_SHMEM_CMA", "off")]
        } else {
            vec![]
        };
        env.push((
            "TMX_RMA_DIRECT",
            if name.ends_with("_engine") { "0" } else { "1" },
        ));
        env.push((
            "TMX_RMA_HEAP_WINDOWS",
            if name.ends_with("_private") { "0" } else { "1" },
        ));
        if name.ends_with("_mixed") {
            env.push(("TMX_RMA_TEST_SPLIT", "2"));
        }
        if name.ends_with("_nodes") {
            env.push((adi::ENV_TEST_NODES, "2"));
        }
        let got = launch(role, *n, &env);
        let ok = got == 0;
        println!(
            "test {name} ... {} ({:.1?})",
            if ok { "ok" } else { "FAILED" },
            t.elapsed()
        );
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; {filtered} filtered out\n",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
