//! Request semantics with a scripted progress engine.

use super::*;
use std::cell::Cell;
use std::collections::VecDeque;

/// A progress hook that counts calls and, on each call, completes the next
/// scripted operation.
struct Script {
    calls: Vec<bool>,
    pending: VecDeque<(Completer, Result<Status, Error>)>,
}

impl Script {
    fn new(ops: Vec<(Completer, Result<Status, Error>)>) -> Script {
        Script {
            calls: Vec::new(),
            pending: ops.into(),
        }
    }
}

impl Progress for Script {
    fn progress(&mut self, blocking: bool) -> Result<(), Error> {
        self.calls.push(blocking);
        if let Some((c, r)) = self.pending.pop_front() {
            match r {
                Ok(s) => c.complete(s),
                Err(e) => c.fail(Status::EMPTY, e),
            }
        }
        Ok(())
    }
}

fn never() -> impl FnMut(bool) -> Result<(), Error> {
    |_| panic!("progress must not be called")
}

#[test]
fn wait_on_completed_request_does_not_progress() {
    let (mut r, c) = request();
    assert!(!r.is_complete());
    assert_eq!(r.get_status(), None);
    c.complete(Status::new(2, 9, 16));
    assert!(r.is_complete());
    assert_eq!(r.get_status(), Some(Status::new(2, 9, 16)));
    assert_eq!(r.wait(&mut never()).unwrap(), Status::new(2, 9, 16));
    assert!(r.is_null());
    // A null request: empty status at once.
    assert_eq!(r.wait(&mut never()).unwrap(), Status::EMPTY);
    assert_eq!(r.test(&mut never()).unwrap(), Some(Status::EMPTY));
    assert_eq!(r.get_status(), Some(Status::EMPTY));
}

#[test]
fn test_progresses_once_without_blocking() {
    let (mut r, c) = request();
    let mut idle = Script::new(vec![]);
    assert_eq!(r.test(&mut idle).unwrap(), None);
    assert_eq!(idle.calls, vec![false]);
    assert!(!r.is_null());
    let mut s = Script::new(vec![(c, Ok(Status::new(0, 1, 2)))]);
    assert_eq!(r.test(&mut s).unwrap(), Some(Status::new(0, 1, 2)));
    assert_eq!(s.calls, vec![false]);
    assert!(r.is_null());
}

#[test]
fn wait_blocks_in_progress_until_complete() {
    let (mut r, c) = request();
    let (_r2, c2) = request();
    // Another operation completes first; ours on the second call.
    let mut s = Script::new(vec![(c2, Ok(Status::EMPTY)), (c, Ok(Status::new(1, 1, 1)))]);
    assert_eq!(r.wait(&mut s).unwrap(), Status::new(1, 1, 1));
    assert_eq!(s.calls, vec![true, true]);
}

#[test]
fn failed_operation_returns_its_error() {
    let (mut r, c) = request();
    c.fail(Status::new(3, 4, 8), Error::Truncated { need: 16, have: 8 });
    assert_eq!(r.get_status().unwrap().error, ErrorClass::Truncate);
    assert_eq!(r.get_status().unwrap().count, 8);
    assert_eq!(
        r.wait(&mut never()),
        Err(Error::Truncated { need: 16, have: 8 })
    );
    assert!(r.is_null());

    // An error known only by its class.
    let (mut r, c) = request();
    c.complete(Status {
        error: ErrorClass::Other,
        ..Status::EMPTY
    });
    assert_eq!(r.test(&mut never()), Err(Error::Failed(ErrorClass::Other)));
}

#[test]
fn dropped_completer_abandons_the_request() {
    let (mut r, c) = request();
    drop(c);
    let e = r.wait(&mut never()).unwrap_err();
    assert_eq!(e, Error::Abandoned);
    assert_eq!(e.class(), ErrorClass::Intern);
}

#[test]
fn free_before_complete_still_completes_and_releases() {
    // The operation owns its resources (here an Arc standing for a packed
    // buffer or a datatype clone) together with its completer.
    struct Op {
        completer: Completer,
        resource: std::sync::Arc<Vec<u8>>,
    }
    let resource = std::sync::Arc::new(vec![0u8; 64]);
    let (r, completer) = request();
    let op = Op {
        completer,
        resource: std::sync::Arc::clone(&resource),
    };
    assert!(!op.completer.is_freed());
    r.free(); // MPI_Request_free before completion
    assert!(op.completer.is_freed());
    assert_eq!(std::sync::Arc::strong_count(&resource), 2);
    // The device completes the operation and drops it.
    let Op {
        completer,
        resource: held,
    } = op;
    completer.complete(Status::new(0, 0, 64));
    drop(held);
    assert_eq!(std::sync::Arc::strong_count(&resource), 1);
}

#[test]
fn freed_datatype_in_a_pending_operation() {
    // MPI_Irecv(.., dtype, ..); MPI_Type_free(dtype); MPI_Wait: the operation
    // holds a clone of the datatype.
    let user = Datatype::vector(2, 1, 2, &Datatype::basic(crate::BasicType::I8)).unwrap();
    user.commit().unwrap();
    let (mut r, completer) = request();
    let op = (completer, user.clone());
    drop(user);
    let (completer, dt) = op;
    let mut dst = [0u8; 3];
    let n = dt.unpack_part(&[7, 9], &mut dst, 1, 0).unwrap();
    completer.complete(Status::new(0, 0, n));
    drop(dt);
    let st = r.wait(&mut never()).unwrap();
    assert_eq!(st.count, 2);
    assert_eq!(dst, [7, 0, 9]);
}

#[test]
fn waitall_in_any_completion_order() {
    let mut reqs = Vec::new();
    let mut comps = Vec::new();
    for _ in 0..3 {
        let (r, c) = request();
        reqs.push(r);
        comps.push(Some(c));
    }
    reqs.push(Request::null());
    // Complete 2 now, then 0, then 1 from "progress".
    comps[2].take().unwrap().complete(Status::new(2, 2, 2));
    let c0 = comps[0].take().unwrap();
    let c1 = comps[1].take().unwrap();
    let mut s = Script::new(vec![
        (c0, Ok(Status::new(0, 0, 0))),
        (c1, Ok(Status::new(1, 1, 1))),
    ]);
    let st = waitall(&mut reqs, &mut s).unwrap();
    assert_eq!(
        st,
        vec![
            Status::new(0, 0, 0),
            Status::new(1, 1, 1),
            Status::new(2, 2, 2),
            Status::EMPTY
        ]
    );
    assert!(reqs.iter().all(Request::is_null));
    assert_eq!(s.calls, vec![true, true]);
}

#[test]
fn waitall_progress_error_keeps_requests_not_yet_taken() {
    // Request 0 completed, 1 pending, 2 completed: the wait takes 0, stops
    // at 1 and progresses; the progress error ends it. 0 is null (its
    // status taken), 1 and 2 stay active and can still be waited for.
    let (r0, c0) = request();
    let (r1, c1) = request();
    let (r2, c2) = request();
    c0.complete(Status::new(0, 0, 0));
    c2.complete(Status::new(2, 2, 2));
    let mut reqs = vec![r0, r1, r2];
    let mut failing =
        |_: bool| -> Result<(), Error> { Err(Error::InvalidArgument { what: "boom" }) };
    assert!(matches!(
        waitall(&mut reqs, &mut failing),
        Err(Error::InvalidArgument { what: "boom" })
    ));
    assert!(reqs[0].is_null());
    assert!(!reqs[1].is_null() && !reqs[1].is_complete());
    assert!(!reqs[2].is_null() && reqs[2].is_complete());
    c1.complete(Status::new(1, 1, 1));
    let st = waitall(&mut reqs, &mut never()).unwrap();
    assert_eq!(
        st,
        vec![Status::EMPTY, Status::new(1, 1, 1), Status::new(2, 2, 2)]
    );
}

#[test]
fn waitall_reports_errors_in_status() {
    let (r0, c0) = request();
    let (r1, c1) = request();
    c0.complete(Status::new(0, 0, 4));
    c1.fail(Status::new(1, 0, 0), Error::Truncated { need: 9, have: 4 });
    let mut reqs = vec![r0, r1];
    match waitall(&mut reqs, &mut never()) {
        Err(Error::InStatus { failed, statuses }) => {
            assert_eq!(failed, 1);
            assert_eq!(statuses[0], (0, Status::new(0, 0, 4)));
            assert_eq!(statuses[1].1.error, ErrorClass::Truncate);
        }
        other => panic!("expected InStatus, got {other:?}"),
    }
    assert!(reqs.iter().all(Request::is_null));
}

#[test]
fn waitany_and_testany() {
    let mut none: Vec<Request> = vec![Request::null(), Request::null()];
    assert_eq!(waitany(&mut none, &mut never()).unwrap(), None);
    assert_eq!(
        testany(&mut none, &mut never()).unwrap(),
        AnyOutcome::Inactive
    );
    assert_eq!(waitany(&mut [], &mut never()).unwrap(), None);

    let (r0, c0) = request();
    let (r1, c1) = request();
    let mut reqs = vec![Request::null(), r0, r1];
    let mut idle = Script::new(vec![]);
    assert_eq!(testany(&mut reqs, &mut idle).unwrap(), AnyOutcome::Pending);
    assert_eq!(idle.calls, vec![false]);

    let mut s = Script::new(vec![(c1, Ok(Status::new(5, 5, 5)))]);
    assert_eq!(
        waitany(&mut reqs, &mut s).unwrap(),
        Some((2, Status::new(5, 5, 5)))
    );
    assert!(reqs[2].is_null() && !reqs[1].is_null());
    c0.fail(Status::EMPTY, Error::Abandoned);
    match testany(&mut reqs, &mut never()) {
        Err(Error::AtIndex { index: 1, source }) => assert_eq!(*source, Error::Abandoned),
        other => panic!("expected AtIndex, got {other:?}"),
    }
    assert_eq!(waitany(&mut reqs, &mut never()).unwrap(), None);
}

#[test]
fn testall_is_all_or_nothing() {
    let (r0, c0) = request();
    let (r1, c1) = request();
    c0.complete(Status::new(0, 0, 0));
    let mut reqs = vec![r0, r1];
    let mut idle = Script::new(vec![]);
    assert_eq!(testall(&mut reqs, &mut idle).unwrap(), None);
    // Nothing consumed: request 0 is still complete and active.
    assert!(!reqs[0].is_null() && reqs[0].is_complete());
    let mut s = Script::new(vec![(c1, Ok(Status::new(1, 1, 1)))]);
    assert_eq!(
        testall(&mut reqs, &mut s).unwrap(),
        Some(vec![Status::new(0, 0, 0), Status::new(1, 1, 1)])
    );
    assert!(reqs.iter().all(Request::is_null));
}

#[test]
fn waitsome_and_testsome() {
    let mut none = vec![Request::null()];
    assert_eq!(waitsome(&mut none, &mut never()).unwrap(), None);
    assert_eq!(testsome(&mut none, &mut never()).unwrap(), None);

    let (r0, c0) = request();
    let (r1, c1) = request();
    let (r2, c2) = request();
    let mut reqs = vec![r0, r1, r2];
    let mut idle = Script::new(vec![]);
    assert_eq!(testsome(&mut reqs, &mut idle).unwrap(), Some(vec![]));
    c0.complete(Status::new(0, 0, 0));
    c2.complete(Status::new(2, 2, 2));
    assert_eq!(
        waitsome(&mut reqs, &mut never()).unwrap(),
        Some(vec![(0, Status::new(0, 0, 0)), (2, Status::new(2, 2, 2))])
    );
    c1.fail(Status::EMPTY, Error::Abandoned);
    match testsome(&mut reqs, &mut never()) {
        Err(Error::InStatus {
            failed: 1,
            statuses,
        }) => {
            assert_eq!(statuses.len(), 1);
            assert_eq!(statuses[0].0, 1);
            assert_eq!(statuses[0].1.error, ErrorClass::Intern);
        }
        other => panic!("expected InStatus, got {other:?}"),
    }
    assert_eq!(testsome(&mut reqs, &mut never()).unwrap(), None);
}

#[test]
fn progress_errors_propagate() {
    let (mut r, _c) = request();
    let failing = Cell::new(0);
    let mut p = |_b: bool| {
        failing.set(failing.get() + 1);
        Err(Error::Failed(ErrorClass::Other))
    };
    assert_eq!(r.wait(&mut p), Err(Error::Failed(ErrorClass::Other)));
    assert_eq!(failing.get(), 1);
    assert!(
        !r.is_null(),
        "a failed progress call does not consume the request"
    );
}

#[test]
fn completed_constructor_and_cancelled_status() {
    let mut r = Request::completed(Status::cancelled());
    let st = r.wait(&mut never()).unwrap();
    assert!(st.cancelled);
    assert_eq!(st.count, 0);
}

#[test]
fn completion_from_other_threads() {
    let mut reqs = Vec::new();
    let mut threads = Vec::new();
    for i in 0..4 {
        let (r, c) = request();
        reqs.push(r);
        threads.push(std::thread::spawn(move || {
            c.complete(Status::new(i, 10 + i, i as usize))
        }));
    }
    let st = waitall(&mut reqs, &mut YieldProgress).unwrap();
    for (i, s) in st.iter().enumerate() {
        assert_eq!(*s, Status::new(i as i32, 10 + i as i32, i));
    }
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn handles_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Request>();
    send::<Completer>();
    send_sync::<Completer>();
    send_sync::<Datatype>();
    send_sync::<Status>();
}

#[test]
fn buffers_come_back_with_the_completion() {
    let (mut req, done) = request();
    assert_eq!(req.take_buffer(), None, "nothing before completion");
    done.complete_with_buffer(Status::new(1, 2, 3), vec![9, 8, 7]);
    assert_eq!(req.buffer(), None, "not yet taken by a wait/test");
    let st = req.wait(&mut YieldProgress).unwrap();
    assert_eq!(st.count, 3);
    assert_eq!(req.buffer(), Some(&[9u8, 8, 7][..]));
    assert_eq!(req.take_buffer(), Some(vec![9, 8, 7]));
    assert_eq!(req.take_buffer(), None, "taken once");

    // A failure hands the buffer back too (a truncated receive's prefix).
    let (mut req, done) = request();
    done.fail_with_buffer(
        Status::new(0, 1, 2),
        Error::Truncated { need: 4, have: 2 },
        vec![1, 2],
    );
    assert_eq!(
        req.wait(&mut YieldProgress).unwrap_err().class(),
        ErrorClass::Truncate
    );
    assert_eq!(req.take_buffer(), Some(vec![1, 2]));

    // Set operations hand buffers back as well.
    let (a, da) = request();
    let (b, db) = request();
    da.complete_with_buffer(Status::new(0, 0, 1), vec![1]);
    db.complete(Status::new(0, 0, 0));
    let mut reqs = [a, b];
    waitall(&mut reqs, &mut YieldProgress).unwrap();
    assert_eq!(reqs[0].take_buffer(), Some(vec![1]));
    assert_eq!(reqs[1].take_buffer(), None);
}

#[test]
fn completion_in_place_skips_the_slot_and_recycles_it_as_a_pair() {
    let (mut req, done) = request();
    assert!(done.completes(&req));
    let slot_ptr = Arc::as_ptr(req.slot().unwrap());
    req.finish_here(
        done,
        Outcome {
            status: Status::new(3, 4, 5),
            error: None,
            buffer: Some(vec![1, 2, 3, 4, 5]),
        },
    );
    assert!(req.is_complete() && !req.is_null());
    assert_eq!(req.op(), None, "complete: nothing to cancel");
    assert_eq!(req.buffer(), None, "hidden until a wait or test takes it");
    assert_eq!(req.take_buffer(), None);
    assert_eq!(req.get_status(), Some(Status::new(3, 4, 5)));
    assert_eq!(req.wait(&mut never()).unwrap(), Status::new(3, 4, 5));
    assert_eq!(req.take_buffer(), Some(vec![1, 2, 3, 4, 5]));
    assert!(req.is_null());
    // The pair of references went to this thread's spare list: the next
    // request and its completer share that very slot, pristine.
    let (mut again, done) = request();
    assert_eq!(Arc::as_ptr(again.slot().unwrap()), slot_ptr);
    assert!(done.completes(&again));
    assert!(!again.is_complete());
    assert!(!done.is_freed());
    done.complete(Status::new(0, 0, 1));
    assert_eq!(again.wait(&mut never()).unwrap(), Status::new(0, 0, 1));
}

#[test]
fn completion_in_place_keeps_the_detailed_error() {
    let (mut req, done) = request();
    let e = Error::RecvTruncated {
        status: Status::new(1, 2, 4),
        msg_len: 10,
    };
    req.finish_here(
        done,
        Outcome {
            status: Status::new(1, 2, 4),
            error: Some(e.clone()),
            buffer: Some(vec![7; 4]),
        },
    );
    let st = req.get_status().unwrap();
    assert_eq!((st.count, st.error), (4, ErrorClass::Truncate));
    assert_eq!(req.wait(&mut never()), Err(e));
    assert_eq!(req.take_buffer(), Some(vec![7; 4]));

    // In a set, the class goes into the status and the set reports it.
    let (mut a, da) = request();
    let (b, db) = request();
    a.finish_here(
        da,
        Outcome {
            status: Status::EMPTY,
            error: Some(Error::Abandoned),
            buffer: None,
        },
    );
    db.complete(Status::new(0, 0, 2));
    let mut reqs = [a, b];
    match waitall(&mut reqs, &mut never()) {
        Err(Error::InStatus { failed, statuses }) => {
            assert_eq!(failed, 1);
            assert_eq!(statuses[0].1.error, ErrorClass::Intern);
            assert_eq!(statuses[1].1, Status::new(0, 0, 2));
        }
        other => panic!("expected InStatus, got {other:?}"),
    }

    // Born complete from an outcome: the same.
    let mut r = Request::from_outcome(Outcome {
        status: Status::EMPTY,
        error: Some(Error::Abandoned),
        buffer: Some(vec![1]),
    });
    assert_eq!(r.get_status().unwrap().error, ErrorClass::Intern);
    assert_eq!(r.test(&mut never()), Err(Error::Abandoned));
    assert_eq!(r.take_buffer(), Some(vec![1]));
}

#[test]
fn completion_in_place_with_another_requests_completer_goes_through_its_slot() {
    let (mut mine, my_done) = request();
    let (mut other, other_done) = request();
    assert!(!other_done.completes(&mine));
    mine.finish_here(
        other_done,
        Outcome {
            status: Status::new(9, 9, 9),
            error: None,
            buffer: Some(vec![9]),
        },
    );
    assert!(!mine.is_complete(), "not this request's completion");
    assert_eq!(other.wait(&mut never()).unwrap(), Status::new(9, 9, 9));
    assert_eq!(other.take_buffer(), Some(vec![9]));
    // A freed request's completer completes through its slot as well.
    let (freed, freed_done) = request();
    drop(freed);
    assert!(freed_done.is_freed());
    mine.finish_here(
        freed_done,
        Outcome {
            status: Status::EMPTY,
            error: None,
            buffer: None,
        },
    );
    assert!(!mine.is_complete());
    my_done.finish(Outcome {
        status: Status::new(1, 1, 1),
        error: None,
        buffer: None,
    });
    assert_eq!(mine.wait(&mut never()).unwrap(), Status::new(1, 1, 1));
    // Born complete with a buffer: hidden until taken, then handed back.
    let mut r = Request::ready_with_buffer(Status::new(4, 4, 2), vec![4, 4]);
    assert_eq!(r.buffer(), None);
    assert_eq!(r.take_buffer(), None);
    assert_eq!(r.get_status(), Some(Status::new(4, 4, 2)));
    assert_eq!(r.wait(&mut never()).unwrap(), Status::new(4, 4, 2));
    assert_eq!(r.buffer(), Some(&[4u8, 4][..]));
    assert_eq!(r.take_buffer(), Some(vec![4, 4]));
    // `completed` is born complete: no slot, nothing to cancel.
    let mut c = Request::completed(Status::new(2, 2, 0));
    assert!(c.slot().is_none() && c.op().is_none() && c.is_complete());
    assert_eq!(c.test(&mut never()).unwrap(), Some(Status::new(2, 2, 0)));
}

#[test]
fn take_if_done_takes_only_a_plain_success_held_in_place() {
    let st = Status::new(3, 7, 11);
    let mut r = Request::completed(st);
    assert_eq!(r.take_if_done(), Some(st));
    assert!(r.is_null(), "taken: the request is null");
    assert_eq!(r.take_if_done(), None, "a null request has nothing to take");

    let failed = Status {
        error: ErrorClass::Truncate,
        ..st
    };
    let mut f = Request::completed(failed);
    assert_eq!(f.take_if_done(), None, "a failure is left for test/wait");
    assert!(!f.is_null());
    assert!(f.test(&mut Script::new(Vec::new())).is_err());

    // Completed through its shared slot: left for test/wait too.
    let (mut r, c) = request();
    assert_eq!(r.take_if_done(), None, "a pending request is left alone");
    c.complete(Status::new(0, 1, 2));
    assert_eq!(r.take_if_done(), None);
    assert_eq!(
        r.test(&mut Script::new(Vec::new())).unwrap(),
        Some(Status::new(0, 1, 2))
    );
}
