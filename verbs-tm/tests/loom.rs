#![cfg(tmx_verbs_loom)]
//! Loom models of `soft::Live`'s owner / helper-thread hand-off
//! (`verbs_tm::soft::handoff`): the real `Handoff` and `helper_loop`, with
//! the sockets modelled as a queue of frames (level-triggered: a frame not
//! taken keeps its socket ready) and the device as a mutex the owner only
//! `try_lock`s, as `Live::poll_cq` does.
//!
//! Run: `RUSTFLAGS="--cfg tmx_verbs_loom" LOOM_MAX_PREEMPTIONS=2 \
//!       cargo test -p verbs-tm --test loom --release`
//!
//! - `frames_are_served_once_after_the_owner_stops`: a peer sends two frames
//!   while the owner polls once and then computes (never calls in again);
//!   every frame is run through the device exactly once, in order, by the
//!   owner or the helper, and the helper stops when told.
//! - `owner_polling_throughout_also_serves_everything`: the same with an
//!   owner that keeps polling until it has seen both frames.
//! - `helper_sleeping_while_the_owner_polls_serves_everything`: the same,
//!   with the owner's timer never running out, so that a helper that found
//!   the owner polling sleeps again while it keeps calling in.
//! - Negative control `edge_triggered_helper_is_rejected`: a helper that,
//!   once it has seen the owner active, waits for a wake-up nobody sends
//!   (`helper_loop_edge`) leaves a frame that arrives after the owner's last
//!   poll unserved; loom must find that execution (the owner waits for a
//!   frame nobody will run while the helper loops idle: loom reports a
//!   run that never ends, "exceeded maximum number of branches", which
//!   the two models above, with the same threads and waits, never hit).
//! - `stop_between_drain_and_poll_ends_the_helper`: the wake-up descriptor
//!   (`WakePipe`) modelled as a count of unread bytes and poll(2) on it as
//!   a wait for a byte; the helper runs `helper_loop` with `Live`'s wait
//!   (`Handoff::drain_wake`, then poll) and no socket ready, while the
//!   owner signals one change of what to watch and then drops the device
//!   (`Handoff::stop_and_wake`); the helper ends in every interleaving.
//! - Negative control `stop_flag_read_before_drain_is_rejected`: the same
//!   with the stop flag read before the drain
//!   (`Handoff::drain_wake_checked_first`, the order before the fix): a
//!   stop between the read and the drain loses its byte to the drain, the
//!   helper polls for good and the owner would hang in join; loom must
//!   find that execution (the owner asserts that the helper is not in poll
//!   with no byte left).

#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use verbs_tm::soft::handoff::{helper_loop, helper_loop_edge, Handoff, HelperWorld, WakePipe};

struct Model {
    /// Frames the kernel holds for us; `ready` is poll(2)'s readiness.
    wire: Mutex<VecDeque<u32>>,
    ready: Condvar,
    /// The device: the frames it has run, in order; `ran` wakes the owner
    /// waiting for its results.
    device: Mutex<Vec<u32>>,
    ran: Condvar,
    handoff: Handoff,
}

impl Model {
    fn new() -> Arc<Self> {
        Arc::new(Model {
            wire: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            device: Mutex::new(Vec::new()),
            ran: Condvar::new(),
            handoff: Handoff::new(),
        })
    }

    /// One run of the device, with its lock held: takes what the sockets have.
    fn run(&self, device: &mut Vec<u32>) {
        let mut w = self.wire.lock().unwrap();
        device.extend(w.drain(..));
        self.ran.notify_all();
    }

    /// `Live::poll_cq`: note the poll, then run the device unless the helper
    /// has it.
    fn owner_poll(&self) {
        self.handoff.owner_enter();
        if let Ok(mut d) = self.device.try_lock() {
            self.run(&mut d);
        }
    }

    /// `Drop for Live`: stop, and the wake-up byte.
    fn stop(&self) {
        self.handoff.stop();
        let _w = self.wire.lock().unwrap();
        self.ready.notify_all();
    }
}

/// The model and whether the owner's timer runs out in each idle wait
/// (`false`: the owner keeps it pushed, and the helper sleeps again while
/// the owner calls in, rather than watch the sockets).
struct World(Arc<Model>, bool);

impl HelperWorld for World {
    /// The idle wait: its time passes.
    fn wait_idle(&mut self) -> bool {
        thread::yield_now();
        self.1
    }

    /// poll(2) on the sockets and the wake-up descriptor.
    fn wait_ready(&mut self) -> bool {
        let mut w = self.0.wire.lock().unwrap();
        while w.is_empty() && !self.0.handoff.stopped() {
            w = self.0.ready.wait(w).unwrap();
        }
        !w.is_empty()
    }

    fn step(&mut self) {
        let mut d = self.0.device.lock().unwrap();
        self.0.run(&mut d);
    }
}

fn scenario(edge: bool, owner_polls: usize, expires: bool) {
    let m = Model::new();
    let peer = {
        let m = Arc::clone(&m);
        thread::spawn(move || {
            for f in [1, 2] {
                m.wire.lock().unwrap().push_back(f);
                m.ready.notify_all();
            }
        })
    };
    let helper = {
        let m = Arc::clone(&m);
        thread::spawn(move || {
            let mut w = World(Arc::clone(&m), expires);
            if edge {
                helper_loop_edge(&m.handoff, &mut w);
            } else {
                helper_loop(&m.handoff, &mut w);
            }
        })
    };
    // The owner polls a few times, then computes: it only waits for the
    // device's results (as a user waits on a request it does not progress).
    for _ in 0..owner_polls {
        m.owner_poll();
    }
    {
        let mut d = m.device.lock().unwrap();
        while d.len() < 2 {
            d = m.ran.wait(d).unwrap();
        }
        assert_eq!(*d, vec![1, 2], "each frame once, in order");
    }
    peer.join().unwrap();
    m.stop();
    helper.join().unwrap();
}

#[test]
fn frames_are_served_once_after_the_owner_stops() {
    loom::model(|| scenario(false, 1, true));
}

#[test]
fn owner_polling_throughout_also_serves_everything() {
    loom::model(|| scenario(false, 3, true));
}

#[test]
fn helper_sleeping_while_the_owner_polls_serves_everything() {
    loom::model(|| scenario(false, 3, false));
}

#[test]
#[should_panic(expected = "maximum number of branches")]
fn edge_triggered_helper_is_rejected() {
    loom::model(|| scenario(true, 1, true));
}

/// The wake-up descriptor and what the owner sees of the helper.
#[derive(Default)]
struct PipeState {
    /// Bytes written and not read yet.
    bytes: usize,
    /// The helper is in poll(2) on the descriptor.
    polling: bool,
    /// The helper loop returned.
    exited: bool,
}

struct Pipe {
    state: Mutex<PipeState>,
    /// Wakes the helper's poll.
    readable: Condvar,
    /// Wakes the owner watching the helper.
    changed: Condvar,
}

impl WakePipe for Pipe {
    fn signal(&self) {
        self.state.lock().unwrap().bytes += 1;
        self.readable.notify_all();
    }

    fn drain(&self) {
        self.state.lock().unwrap().bytes = 0;
    }
}

struct WakeModel {
    pipe: Pipe,
    handoff: Handoff,
}

struct PipeWorld {
    m: Arc<WakeModel>,
    checked_first: bool,
}

impl HelperWorld for PipeWorld {
    fn wait_idle(&mut self) -> bool {
        thread::yield_now();
        true
    }

    /// `LiveWorld::wait_ready` with no socket ready: the drain and the stop
    /// flag, then poll(2) without timeout, which returns once a byte is
    /// there (and does not read it).
    fn wait_ready(&mut self) -> bool {
        let (h, pipe) = (&self.m.handoff, &self.m.pipe);
        let go_on = if self.checked_first {
            h.drain_wake_checked_first(pipe)
        } else {
            h.drain_wake(pipe)
        };
        if go_on {
            let mut st = pipe.state.lock().unwrap();
            st.polling = true;
            pipe.changed.notify_all();
            while st.bytes == 0 {
                st = pipe.readable.wait(st).unwrap();
            }
            st.polling = false;
        }
        false
    }

    fn step(&mut self) {}
}

fn stop_scenario(checked_first: bool) {
    let m = Arc::new(WakeModel {
        pipe: Pipe {
            state: Mutex::new(PipeState::default()),
            readable: Condvar::new(),
            changed: Condvar::new(),
        },
        handoff: Handoff::new(),
    });
    let helper = {
        let m = Arc::clone(&m);
        thread::spawn(move || {
            let mut w = PipeWorld {
                m: Arc::clone(&m),
                checked_first,
            };
            helper_loop(&m.handoff, &mut w);
            m.pipe.state.lock().unwrap().exited = true;
            m.pipe.changed.notify_all();
        })
    };
    // `Core::publish`: a change of what to watch, signalled.
    m.pipe.signal();
    // `Drop for Live`: stop, then join. Nobody writes a byte after the
    // stop's, so a helper in poll with no byte left never returns: the
    // join would hang (asserted here, on the owner's thread, rather than
    // left to loom's deadlock check, which may fire on the helper's
    // thread, where a panic aborts the test binary).
    m.handoff.stop_and_wake(&m.pipe);
    {
        let mut st = m.pipe.state.lock().unwrap();
        while !st.exited {
            assert!(
                !(st.polling && st.bytes == 0),
                "lost wake-up: the helper polls with no byte left after the stop"
            );
            st = m.pipe.changed.wait(st).unwrap();
        }
    }
    helper.join().unwrap();
}

#[test]
fn stop_between_drain_and_poll_ends_the_helper() {
    loom::model(|| stop_scenario(false));
}

#[test]
#[should_panic(expected = "lost wake-up")]
fn stop_flag_read_before_drain_is_rejected() {
    loom::model(|| stop_scenario(true));
}
