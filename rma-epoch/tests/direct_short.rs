//! The short paths of the direct backend on one engine: the fence whose
//! barrier the driver carries out at once ([`Engine::fence_direct_now`]),
//! and PSCW on a window whose ranks are all direct, which must leave the
//! same states, steps and errors as the general algorithms.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use rma_epoch::{
    assert, AccessState, Action, Backends, Call, CallStatus, DirectAction, DirectFence, Engine,
    Error, Gate, WinId, WindowConfig,
};

/// Rank 1 of a window of `n` ranks, the first `direct` of them direct.
fn window(n: u32, direct: u32) -> (Engine, WinId) {
    let mut e = Engine::default();
    let id = e
        .create_window_with(WindowConfig::new(n, 1, 64), Backends::direct(0..direct))
        .unwrap();
    (e, id)
}

fn steps(e: &mut Engine, w: WinId) -> Vec<DirectAction> {
    std::iter::from_fn(|| e.poll_direct(w)).collect()
}

#[test]
fn fence_now_lets_the_driver_carry_out_the_barrier() {
    let (mut e, w) = window(2, 2);
    // A rank has not arrived yet: the barrier is pending, not queued.
    let mut started = 0;
    let st = e
        .fence_direct_now(w, assert::NOPRECEDE, || {
            started += 1;
            false
        })
        .unwrap();
    assert_eq!((st, started), (DirectFence::Barrier, 1));
    assert!(!e.has_direct(w), "the barrier is not queued");
    assert_eq!(e.access_state(w).unwrap(), AccessState::FenceIssued);
    // Until the barrier is reported the window is not ready.
    assert_eq!(e.direct_access(w, 0).unwrap(), Gate::Wait);
    assert!(e.is_idle(w));
    e.handle_barrier_complete(w).unwrap();
    assert_eq!(e.access_state(w).unwrap(), AccessState::FenceGranted);
    assert_eq!(e.direct_access(w, 0).unwrap(), Gate::Open);
    assert!(!e.has_actions(), "no Completed: the call was done");

    // Every rank arrived already: the fence is over at once.
    assert_eq!(
        e.fence_direct_now(w, 0, || true).unwrap(),
        DirectFence::Done
    );
    assert_eq!(e.access_state(w).unwrap(), AccessState::FenceGranted);
    assert_eq!(e.direct_access(w, 0).unwrap(), Gate::Open);

    // A closing fence ends the epoch once its barrier completes.
    assert_eq!(
        e.fence_direct_now(w, assert::NOSUCCEED, || false).unwrap(),
        DirectFence::Barrier
    );
    e.handle_barrier_complete(w).unwrap();
    assert_eq!(e.access_state(w).unwrap(), AccessState::Unset);
    assert!(matches!(e.direct_access(w, 0), Err(Error::NoEpoch { .. })));
    assert_eq!(
        e.fence_direct_now(w, assert::NOPRECEDE, || true).unwrap(),
        DirectFence::Done
    );
    assert_eq!(
        e.fence_direct_now(w, assert::NOSUCCEED, || true).unwrap(),
        DirectFence::Done
    );
    assert_eq!(e.access_state(w).unwrap(), AccessState::Unset);

    // Nothing to synchronize: no barrier started.
    let st = e
        .fence_direct_now(w, assert::NOPRECEDE | assert::NOSUCCEED, || {
            panic!("no barrier for NOPRECEDE | NOSUCCEED")
        })
        .unwrap();
    assert_eq!(st, DirectFence::Done);
    assert_eq!(e.access_state(w).unwrap(), AccessState::Unset);
}

fn no_barrier() -> bool {
    panic!("the short path does not apply: no barrier may start")
}

#[test]
fn fence_now_defers_to_the_general_path_or_refuses() {
    // A rank by active messages: the general fence (a barrier of messages).
    let (mut e, w) = window(3, 2);
    assert_eq!(
        e.fence_direct_now(w, assert::NOPRECEDE, no_barrier)
            .unwrap(),
        DirectFence::General
    );
    assert_eq!(e.access_state(w).unwrap(), AccessState::Unset, "unchanged");

    // A barrier in flight (queued by the general `fence`): general.
    let (mut e, w) = window(2, 2);
    assert_eq!(e.fence(w, assert::NOPRECEDE).unwrap(), CallStatus::Done);
    assert!(!e.is_idle(w), "the queued barrier");
    assert_eq!(
        e.fence_direct_now(w, 0, no_barrier).unwrap(),
        DirectFence::General
    );
    assert_eq!(steps(&mut e, w), vec![DirectAction::Barrier]);
    e.handle_barrier_complete(w).unwrap();
    assert!(e.is_idle(w));

    // A fence inside a PSCW exposure epoch is an error, as in `fence`.
    let (mut e, w) = window(2, 2);
    e.post(w, &[0], 0).unwrap();
    assert_eq!(
        e.fence_direct_now(w, 0, no_barrier).unwrap(),
        DirectFence::General,
        "the post signal is queued"
    );
    assert_eq!(steps(&mut e, w), vec![DirectAction::Post { origin: 0 }]);
    assert!(matches!(
        e.fence_direct_now(w, 0, no_barrier),
        Err(Error::WrongExposure { exposed: true, .. })
    ));
}

#[test]
fn pscw_on_an_all_direct_window_asks_for_every_signal() {
    let (mut e, w) = window(3, 3);
    // Exposure to origins 0 and 2 (unsorted, duplicated: as a set).
    assert_eq!(e.post(w, &[2, 0, 2], 0).unwrap(), CallStatus::Done);
    assert_eq!(
        steps(&mut e, w),
        vec![
            DirectAction::Post { origin: 0 },
            DirectAction::Post { origin: 2 }
        ]
    );
    // Access to target 0: its post is asked for.
    assert_eq!(e.start(w, &[0], 0).unwrap(), CallStatus::Done);
    assert_eq!(e.access_state(w).unwrap(), AccessState::PscwIssued);
    assert_eq!(
        steps(&mut e, w),
        vec![DirectAction::AwaitPost { target: 0 }]
    );
    assert_eq!(e.direct_access(w, 0).unwrap(), Gate::Wait);
    e.handle_post(w, 0).unwrap();
    assert_eq!(e.access_state(w).unwrap(), AccessState::PscwGranted);
    assert_eq!(e.direct_access(w, 0).unwrap(), Gate::Open);
    assert!(matches!(
        e.direct_access(w, 2),
        Err(Error::NotInGroup { target: 2, .. })
    ));
    // Complete: signalled at once.
    assert_eq!(e.complete(w).unwrap(), CallStatus::Done);
    assert_eq!(steps(&mut e, w), vec![DirectAction::Complete { target: 0 }]);
    assert_eq!(e.access_state(w).unwrap(), AccessState::Unset);
    // Wait: pending until both completes were seen; then one Completed.
    assert_eq!(e.wait(w).unwrap(), CallStatus::Pending);
    assert_eq!(
        steps(&mut e, w),
        vec![
            DirectAction::AwaitComplete { origin: 0 },
            DirectAction::AwaitComplete { origin: 2 }
        ]
    );
    assert!(matches!(
        e.start(w, &[0], 0),
        Err(Error::CallInProgress { call: "wait", .. })
    ));
    e.handle_complete(w, 2).unwrap();
    assert_eq!(e.blocked(w), Some(Call::Wait));
    e.handle_complete(w, 0).unwrap();
    assert_eq!(e.blocked(w), None);
    assert!(matches!(
        e.poll_action(),
        Some(Action::Completed {
            call: Call::Wait,
            ..
        })
    ));
    assert!(e.poll_action().is_none());
    // The exposure epoch is over.
    assert!(matches!(
        e.wait(w),
        Err(Error::WrongExposure { exposed: false, .. })
    ));
    // Completes that arrived before wait: done at once.
    e.post(w, &[0], assert::NOCHECK).unwrap();
    assert!(steps(&mut e, w).is_empty(), "NOCHECK: no post signal");
    assert!(e.test(w).is_ok_and(|done| !done));
    assert_eq!(
        steps(&mut e, w),
        vec![DirectAction::AwaitComplete { origin: 0 }]
    );
    e.handle_complete(w, 0).unwrap();
    assert_eq!(e.wait(w).unwrap(), CallStatus::Done);
    assert!(e.poll_action().is_none());
}

#[test]
fn pscw_errors_are_those_of_the_general_algorithm() {
    let (mut e, w) = window(2, 2);
    assert!(matches!(
        e.complete(w),
        Err(Error::WrongEpoch {
            call: "complete",
            ..
        })
    ));
    assert!(matches!(
        e.wait(w),
        Err(Error::WrongExposure {
            call: "wait",
            exposed: false,
            ..
        })
    ));
    assert!(matches!(
        e.start(w, &[5], 0),
        Err(Error::RankOutOfRange { rank: 5, .. })
    ));
    assert!(matches!(
        e.post(w, &[0, 7], 0),
        Err(Error::RankOutOfRange { rank: 7, .. })
    ));
    assert!(e.is_idle(w), "nothing changed");
    e.post(w, &[0], 0).unwrap();
    assert!(matches!(
        e.post(w, &[0], 0),
        Err(Error::WrongExposure {
            call: "post",
            exposed: true,
            ..
        })
    ));
    e.start(w, &[0], assert::NOCHECK).unwrap();
    assert_eq!(e.access_state(w).unwrap(), AccessState::PscwGranted);
    assert!(matches!(
        e.start(w, &[0], 0),
        Err(Error::WrongEpoch { call: "start", .. })
    ));
}
