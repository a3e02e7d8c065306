#![cfg(tmx_adi_loom)]
//! Loom models of the request completion hand-off (`src/request.rs`).
//!
//! Run: `RUSTFLAGS="--cfg tmx_adi_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p adi --test loom --release`.
//!
//! - A completer in another thread publishes a status; the waiter, which
//!   checks completion before every progress call, reads exactly that status.
//! - The detailed error travels with the status; a buffer handed back
//!   with the completion (`complete_with_buffer`) is there once the wait
//!   returns.
//! - Free before complete: the user's drop and the device's completion race;
//!   the operation's resources are released exactly once, nothing leaks
//!   (loom's `Arc` reports leaks), and the completer sees the free.
//! - waitany over two requests completed by two threads; testall never
//!   consumes part of a set.
//! - Negative control: publishing with `Relaxed` lets the waiter read a stale
//!   status, and loom finds it.
#![allow(clippy::unwrap_used)]

use adi::{request, testall, waitany, Error, Status};
use loom::sync::Arc;
use loom::thread;

fn yield_progress() -> impl FnMut(bool) -> Result<(), Error> {
    |_blocking| {
        thread::yield_now();
        Ok(())
    }
}

const ST: Status = Status::new(3, 7, 42);

#[test]
fn completion_publishes_the_status() {
    loom::model(|| {
        let (mut req, completer) = request();
        let t = thread::spawn(move || completer.complete(ST));
        let got = req.wait(&mut yield_progress()).unwrap();
        assert_eq!(got, ST);
        assert!(req.is_null());
        t.join().unwrap();
    });
}

#[test]
fn completion_hands_the_buffer_back() {
    loom::model(|| {
        let (mut req, completer) = request();
        let t = thread::spawn(move || completer.complete_with_buffer(ST, vec![1, 2, 3]));
        assert_eq!(req.take_buffer(), None);
        let got = req.wait(&mut yield_progress()).unwrap();
        assert_eq!(got, ST);
        assert_eq!(req.take_buffer(), Some(vec![1, 2, 3]));
        t.join().unwrap();
    });
}

#[test]
fn failure_publishes_the_detail() {
    loom::model(|| {
        let (mut req, completer) = request();
        let t = thread::spawn(move || completer.fail(ST, Error::Truncated { need: 9, have: 4 }));
        // test() until done: each test looks before it progresses.
        let got = loop {
            match req.test(&mut yield_progress()) {
                Ok(None) => continue,
                other => break other,
            }
        };
        assert_eq!(got, Err(Error::Truncated { need: 9, have: 4 }));
        t.join().unwrap();
    });
}

#[test]
fn free_before_complete_releases_resources_once() {
    loom::model(|| {
        let resource = Arc::new(());
        let (req, completer) = request();
        let held = Arc::clone(&resource);
        let device = thread::spawn(move || {
            let freed_before = completer.is_freed();
            completer.complete(ST);
            drop(held); // the operation's resources go with it
            freed_before
        });
        drop(req); // MPI_Request_free, racing with completion
        let _ = device.join().unwrap();
        assert_eq!(Arc::strong_count(&resource), 1);
    });
}

#[test]
fn completer_sees_the_free() {
    loom::model(|| {
        let (req, completer) = request();
        drop(req);
        let device = thread::spawn(move || {
            let freed = completer.is_freed();
            completer.complete(ST);
            freed
        });
        assert!(device.join().unwrap());
    });
}

#[test]
fn waitany_over_two_completers() {
    loom::model(|| {
        let (r0, c0) = request();
        let (r1, c1) = request();
        let t0 = thread::spawn(move || c0.complete(Status::new(0, 0, 10)));
        let t1 = thread::spawn(move || c1.complete(Status::new(1, 1, 11)));
        let mut reqs = [r0, r1];
        let mut progress = yield_progress();
        let (i, st) = waitany(&mut reqs, &mut progress).unwrap().unwrap();
        assert_eq!(st, Status::new(i as i32, i as i32, 10 + i));
        let (j, st2) = waitany(&mut reqs, &mut progress).unwrap().unwrap();
        assert_eq!(j, 1 - i);
        assert_eq!(st2, Status::new(j as i32, j as i32, 10 + j));
        assert_eq!(waitany(&mut reqs, &mut progress).unwrap(), None);
        t0.join().unwrap();
        t1.join().unwrap();
    });
}

#[test]
fn testall_is_all_or_nothing_under_concurrent_completion() {
    loom::model(|| {
        let (r0, c0) = request();
        let (r1, c1) = request();
        let t0 = thread::spawn(move || c0.complete(Status::new(0, 0, 10)));
        let t1 = thread::spawn(move || c1.complete(Status::new(1, 1, 11)));
        let mut reqs = [r0, r1];
        let mut progress = yield_progress();
        let all = loop {
            if let Some(all) = testall(&mut reqs, &mut progress).unwrap() {
                break all;
            }
            // Not all complete: nothing was consumed.
            assert!(reqs.iter().all(|r| !r.is_null()));
        };
        assert_eq!(all, vec![Status::new(0, 0, 10), Status::new(1, 1, 11)]);
        assert!(reqs.iter().all(|r| r.is_null()));
        t0.join().unwrap();
        t1.join().unwrap();
    });
}

/// The hand-off with a `Relaxed` publish: the waiter may observe completion
/// and still read the initial status.
fn relaxed_model() {
    loom::model(|| {
        let (mut req, completer) = request();
        let t = thread::spawn(move || completer.complete_relaxed_for_loom(ST));
        let got = req.wait(&mut yield_progress()).unwrap();
        assert_eq!(got, ST, "stale status read after a Relaxed publish");
        t.join().unwrap();
    });
}

#[test]
fn negative_control_relaxed_publish_is_rejected() {
    let outcome = std::panic::catch_unwind(relaxed_model);
    let payload = match outcome {
        Ok(()) => panic!(
            "loom accepted a Relaxed publish: the model cannot tell a correct hand-off from a broken one"
        ),
        Err(payload) => payload,
    };
    // Rejected for the right reason: a stale status, not some other failure.
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("stale status"), "unexpected panic: {msg}");
}
