//! Who runs the software device of [`super::Live`]: its owner or the
//! helper thread.
//!
//! The owner runs the device in every `poll_cq` (that is where latency is
//! made). When the owner stops polling (the application computes), frames
//! still arrive: a peer's READ must be served and its FIN sent, or a
//! rendezvous would wait for the computation to end. The helper thread
//! does that, and only then:
//!
//! 1. it blocks in poll(2) ([`HelperWorld::wait_ready`]) until a socket it
//!    watches is ready (readable; writable while bytes wait to be sent), the
//!    owner signals a change of what to watch, or a connect deadline falls
//!    due. No timeout otherwise: an idle device never wakes it;
//! 2. woken by a signal only, it goes back to 1 (watching the new set), or,
//!    if the owner called in during the wait (an owner taking completions
//!    signals a helper blocked in 1), sleeps as in 4;
//! 3. something is ready: it notes the owner's poll count
//!    ([`Handoff::epoch`]) and gives the owner the idle time
//!    (`TMX_VERBS_HELPER_IDLE_US`, [`HelperWorld::wait_idle`]) to take it;
//!    `Live` extends that sleep while the owner keeps calling in (the owner
//!    pushes a timer back), so that a helper whose owner polls through a
//!    stream of traffic does not wake once per idle time;
//! 4. if the owner polled meanwhile ([`Handoff::owner_active_since`]), the
//!    owner runs the device (no contention for the device lock): the
//!    helper sleeps again as in 3, and on while the owner keeps calling in
//!    without leaving its timer to run out, then goes back to 1 (so that
//!    arrivals the polling owner takes do not wake it each time);
//!    otherwise it runs the device once under the device lock, and goes
//!    back to 1.
//!
//! Step 3 is skipped while the owner has not called in since the helper
//! last ran the device: the owner still computes, and the helper runs the
//! device at once (a READ response streamed while the owner computes does
//! not wait one idle time each time the socket takes more).
//!
//! Every call of the owner into the device counts as a poll
//! ([`Handoff::owner_enter`]), not only `poll_cq`: an owner posting sends
//! or registering memory is not computing.
//!
//! It never spins: step 1 blocks, and step 3 sleeps, so it wakes at most
//! about once per idle time while traffic arrives and the owner computes,
//! rarely while the owner polls through it, and not at all while nothing
//! arrives, whether the owner polls or computes. Frames are never lost:
//! readiness is level-triggered, so a frame that arrived after the owner's
//! last poll keeps its socket ready until someone runs the device, and the
//! helper does once the owner has been idle for one idle time.
//! [`Handoff::stop_and_wake`] ends the helper (finalize, drop).
//!
//! The wake-up descriptor ([`WakePipe`]) is drained before each blocking
//! wait, so that bytes already seen do not wake it again. A stop whose byte
//! that drain takes must still end the helper: the helper reads the stop
//! flag after the drain ([`Handoff::drain_wake`]), and a stop sets the flag
//! before it writes the byte, so either the helper sees the flag or the
//! byte is still there when it blocks.
//!
//! `tests/loom.rs` checks this protocol ([`helper_loop`] with a model of the
//! sockets; [`Handoff::drain_wake`] and [`Handoff::stop_and_wake`] with a
//! model of the wake-up descriptor) and two variants that lose a wake-up
//! (`helper_loop_edge`, `Handoff::drain_wake_checked_first`).

use crate::sync::{AtomicBool, AtomicU64, Ordering};

/// The owner/helper hand-off state. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Handoff {
    epoch: AtomicU64,
    stop: AtomicBool,
}

/// What the helper loop needs from its surroundings: the real sockets
/// (`Live`) or a model (loom).
pub trait HelperWorld {
    /// Sleeps at least the idle time (a stop may cut it short); it may
    /// sleep on while the owner keeps calling in. `true` when the sleep
    /// ended because the owner stopped calling in for most of an idle
    /// time; `false` when it was a sleep of fixed length or a signal cut
    /// it short.
    fn wait_idle(&mut self) -> bool;
    /// Blocks until a socket is ready, a deadline falls due or a wake-up
    /// comes; `true` for a ready socket or a deadline (the device should
    /// run), `false` for a wake-up only.
    fn wait_ready(&mut self) -> bool;
    /// Runs the device once, under its lock.
    fn step(&mut self);
}

/// The helper's wake-up descriptor: a byte written to it makes the
/// helper's blocking wait return; the helper reads what is there before it
/// blocks again. A socket pair for `Live`, a counter for loom.
pub trait WakePipe {
    /// Writes a byte (never blocks: a full pipe wakes the helper already).
    fn signal(&self);
    /// Reads every byte written so far (never blocks).
    fn drain(&self);
}

impl Handoff {
    /// A fresh hand-off: no poll yet, not stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner is about to run the device.
    pub fn owner_enter(&self) {
        self.epoch.fetch_add(1, Ordering::Release);
    }

    /// The owner's poll count, for [`Handoff::owner_active_since`].
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether the owner polled since the helper read `seen`.
    pub fn owner_active_since(&self, seen: u64) -> bool {
        self.epoch() != seen
    }

    /// Tells the helper to end.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Whether [`Handoff::stop`] was called.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Tells the helper to end and wakes it: the flag first, then the
    /// byte (see [`Handoff::drain_wake`]).
    pub fn stop_and_wake<P: WakePipe + ?Sized>(&self, pipe: &P) {
        self.stop();
        pipe.signal();
    }

    /// The helper, before it blocks on `pipe`: drains it, then reads the
    /// stop flag; `false`: stopped, do not block. A stop whose byte the
    /// drain took set its flag before, so it is seen here; a stop after the
    /// read leaves its byte for the blocking wait.
    pub fn drain_wake<P: WakePipe + ?Sized>(&self, pipe: &P) -> bool {
        pipe.drain();
        !self.stopped()
    }

    /// A broken variant, for the loom negative control only: the stop flag
    /// read before the drain, so a stop between the two loses its byte to
    /// the drain and the helper blocks for good.
    #[doc(hidden)]
    pub fn drain_wake_checked_first<P: WakePipe + ?Sized>(&self, pipe: &P) -> bool {
        let go_on = !self.stopped();
        pipe.drain();
        go_on
    }
}

/// The helper thread's loop (see the [module docs](self)); returns when
/// stopped.
pub fn helper_loop<W: HelperWorld>(h: &Handoff, w: &mut W) {
    // The owner's poll count when the helper last ran the device: while it
    // stays the same, the owner is still computing and what is ready is run
    // at once (a READ response streamed while the owner computes does not
    // wait one idle time per socket buffer).
    let mut computing: Option<u64> = None;
    // The owner polls: it took what woke the helper, and it called in
    // throughout the helper's last sleep. The helper sleeps again rather
    // than watch the sockets, whose every arrival would wake it only for
    // the owner to take the frame first (a wake-up and a context switch
    // per message, which on a busy machine take a processor from a rank).
    let mut polling = false;
    while !h.stopped() {
        if polling {
            let seen = h.epoch();
            let expired = w.wait_idle();
            polling = !expired && h.owner_active_since(seen);
            continue;
        }
        let before = h.epoch();
        if !w.wait_ready() || h.stopped() {
            // A signal only: one sent by an owner taking arrivals (or a
            // change of what to watch while the owner calls in) sends the
            // helper to sleep as above.
            polling = h.owner_active_since(before);
            continue;
        }
        let seen = h.epoch();
        if computing != Some(seen) {
            let expired = w.wait_idle();
            if h.stopped() {
                break;
            }
            if h.owner_active_since(seen) {
                computing = None;
                polling = !expired;
                continue;
            }
        }
        w.step();
        computing = Some(seen);
    }
}

/// A broken variant, for the loom negative control only: once it has seen
/// the owner active it waits for a wake-up (that nobody sends) instead of
/// looking at the sockets again, so a frame that arrives after the owner's
/// last poll is never served.
#[doc(hidden)]
pub fn helper_loop_edge<W: HelperWorld>(h: &Handoff, w: &mut W) {
    let mut deferred = false;
    while !h.stopped() {
        if deferred {
            let _ = w.wait_idle();
            continue;
        }
        if !w.wait_ready() || h.stopped() {
            continue;
        }
        let seen = h.epoch();
        let _ = w.wait_idle();
        if h.stopped() {
            break;
        }
        if h.owner_active_since(seen) {
            deferred = true;
        } else {
            w.step();
        }
    }
}
