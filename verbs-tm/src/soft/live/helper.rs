//! The helper thread of [`super::Live`]: what it watches, published by
//! the device without the device lock ([`Watch`], [`Signals`]), and its
//! view of the device ([`LiveWorld`], the [`HelperWorld`] of
//! [`super::super::handoff::helper_loop`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tracing::debug;

use super::super::handoff::{HelperWorld, WakePipe};
use super::{Core, Phase, Shared};

/// What the helper thread must watch: published by the device (the owner
/// or the helper) after each run, read by the helper without the device
/// lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Watch {
    pub(super) gen: u64,
    /// Bit `i` (`i < 63`): connection `i` has bytes waiting for its socket;
    /// bit 63: some connection numbered 63 or above has.
    pub(super) out: u64,
    pub(super) accepting: bool,
    /// The earliest connect deadline, in ms after [`Signals::base`]
    /// (rounded up); `u64::MAX`: none.
    pub(super) deadline: u64,
}

/// The published [`Watch`], the wake-up descriptor and the helper's
/// counters.
#[derive(Debug)]
pub(super) struct Signals {
    pub(super) gen: AtomicU64,
    pub(super) out: AtomicU64,
    pub(super) accepting: AtomicBool,
    pub(super) deadline: AtomicU64,
    pub(super) base: Instant,
    /// The output bits the helper is blocked on (`u64::MAX` while it is not
    /// blocked: it reads [`Signals::out`] again before it blocks).
    pub(super) watching: AtomicU64,
    pub(super) wake: Pipe,
    pub(super) helper_wakes: AtomicU64,
    pub(super) helper_steps: AtomicU64,
    pub(super) timer: Timer,
    /// The owner wrote the wake-up descriptor to take the helper off the
    /// sockets ([`Signals::owner_took`]); cleared by the helper before each
    /// wait on them.
    pub(super) kicked: AtomicBool,
}

/// The owner's timer: while the helper waits out the idle time of a ready
/// socket ([`HelperWorld::wait_idle`]), every call of the owner pushes it
/// back (a `timerfd_settime` at most every quarter of the idle time), so
/// the helper sleeps as long as the owner keeps calling in, and wakes an
/// idle time after its last call. Without it the helper would wake
/// once per idle time during traffic only to find the owner still there
/// (each wake-up takes a processor from a rank on a busy machine).
#[derive(Debug)]
pub(super) struct Timer {
    fd: TimerFd,
    /// The idle time: how long the helper waits after the owner's last
    /// push.
    delay: Duration,
    /// Pushes at most this often (ns).
    every_ns: u64,
    /// The helper waits on the timer: the owner pushes it.
    wanted: AtomicBool,
    /// When the owner last pushed it, ns after [`Signals::base`] (the
    /// owner is the only writer).
    pushed: AtomicU64,
    /// The owner's calls while the helper waits on the timer (the owner is
    /// the only writer): the clock is read at one in [`CLOCK_EVERY`].
    calls: AtomicU32,
}

/// While the helper waits on the timer, the owner reads the clock (is a
/// push due?) at one call in this many: a clock read is ~90 instructions, a
/// tenth of an idle `poll_cq`. An owner calling in this many times within
/// three quarters of the idle time keeps the timer pushed; a slower one may
/// let it expire, and the helper goes back to the sockets (where an idle
/// connection does not wake it, and the owner's next completion sends it
/// back to the timer).
const CLOCK_EVERY: u32 = 8;

impl Timer {
    pub(super) fn new(idle: Duration) -> std::io::Result<Self> {
        let fd = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        let delay = idle.max(Duration::from_micros(1));
        let every_ns = u64::try_from((idle / 4).as_nanos()).unwrap_or(u64::MAX);
        Ok(Timer {
            fd,
            delay,
            every_ns,
            wanted: AtomicBool::new(false),
            pushed: AtomicU64::new(0),
            calls: AtomicU32::new(0),
        })
    }

    /// The owner called into the device: pushes the timer back if the
    /// helper waits on it and the last push is a quarter idle time old
    /// (looked at once in [`CLOCK_EVERY`] calls).
    #[inline]
    pub(super) fn owner_called(&self, base: Instant) {
        if !self.wanted.load(Ordering::Relaxed) {
            return;
        }
        let n = self.calls.load(Ordering::Relaxed).wrapping_add(1);
        self.calls.store(n, Ordering::Relaxed);
        if n % CLOCK_EVERY != 0 {
            return;
        }
        let now = u64::try_from(base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let last = self.pushed.load(Ordering::Relaxed);
        if last != 0 && now.saturating_sub(last) < self.every_ns {
            return;
        }
        self.pushed.store(now.max(1), Ordering::Relaxed);
        let at = Expiration::OneShot(TimeSpec::from_duration(self.delay));
        // A timer that cannot be set leaves the helper to its plain idle
        // sleep.
        let _ = self.fd.set(at, TimerSetTimeFlags::empty());
    }

    /// Reads the expirations, if any (nonblocking).
    fn drain(&self) {
        let mut b = [0u8; 8];
        let _ = nix::unistd::read(&self.fd, &mut b);
    }
}

/// The wake-up descriptor: a nonblocking socket pair, the owner's end and
/// the helper's.
#[derive(Debug)]
pub(super) struct Pipe {
    pub(super) tx: UnixStream,
    pub(super) rx: UnixStream,
}

impl Pipe {
    pub(super) fn new() -> std::io::Result<Self> {
        let (tx, rx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        rx.set_nonblocking(true)?;
        Ok(Pipe { tx, rx })
    }
}

impl WakePipe for Pipe {
    fn signal(&self) {
        // A full socket (`WouldBlock`) holds bytes the helper has not read:
        // it wakes anyway.
        let _ = (&self.tx).write(&[1]);
    }

    fn drain(&self) {
        let mut b = [0u8; 64];
        while matches!((&self.rx).read(&mut b), Ok(n) if n > 0) {}
    }
}

impl Signals {
    pub(super) fn wake(&self) {
        self.wake.signal();
    }

    /// The owner took completions (arrivals, mostly) while the helper may
    /// be blocked on the sockets: wakes it, once per wait, so that it
    /// sleeps on the owner's timer instead ([`super::super::handoff`]'s
    /// step 4). Left on the sockets, it is woken by each arrival that the
    /// polling owner takes before it looks.
    #[inline]
    pub(super) fn owner_took(&self) {
        if self.watching.load(Ordering::SeqCst) != u64::MAX
            && !self.kicked.swap(true, Ordering::SeqCst)
        {
            self.wake.signal();
        }
    }

    pub(super) fn ms(&self, t: Instant) -> u64 {
        let d = t.saturating_duration_since(self.base);
        let ms = d.as_millis() + u128::from(d.subsec_nanos() % 1_000_000 != 0);
        u64::try_from(ms).unwrap_or(u64::MAX - 1)
    }
}

impl Core {
    /// Publishes what the helper must watch, and wakes it when it should
    /// watch more than it does: other sockets, the listener, output on a
    /// socket it is blocked on without, or an earlier deadline.
    pub(super) fn publish(&mut self) {
        // One look at each connection (this runs after every run of the
        // device, so mostly with nothing changed).
        let mut out = 0u64;
        let mut deadline: Option<Instant> = None;
        for (i, c) in self.conns.iter().enumerate() {
            if c.dead {
                continue;
            }
            if !c.out.is_empty() {
                out |= 1 << i.min(63);
            }
            if let (Phase::Handshake { deadline: d }, Some(_)) = (&c.phase, c.qp) {
                deadline = Some(deadline.map_or(*d, |m| m.min(*d)));
            }
        }
        for d in self.expect.values().map(|e| e.deadline) {
            deadline = Some(deadline.map_or(d, |m| m.min(d)));
        }
        let w = Watch {
            gen: self.gen,
            out,
            accepting: self.accepting(),
            deadline: deadline.map_or(u64::MAX, |d| self.sig.ms(d)),
        };
        let old = self.published;
        if w == old {
            return;
        }
        self.published = w;
        let sig = &self.sig;
        sig.gen.store(w.gen, Ordering::SeqCst);
        sig.accepting.store(w.accepting, Ordering::SeqCst);
        sig.deadline.store(w.deadline, Ordering::SeqCst);
        sig.out.store(w.out, Ordering::SeqCst);
        let new_out = w.out & !sig.watching.load(Ordering::SeqCst);
        let wake = w.gen != old.gen
            || (w.accepting && !old.accepting)
            || w.deadline < old.deadline
            || new_out != 0;
        if wake {
            debug!(
                gen = w.gen,
                out = w.out,
                "verbs-tm soft-live: waking the helper thread"
            );
            sig.wake();
        }
    }
}

/// The helper thread's view of the device.
pub(super) struct LiveWorld {
    pub(super) shared: Arc<Shared>,
    pub(super) idle: Duration,
    pub(super) gen: Option<u64>,
    pub(super) socks: Vec<(TcpStream, usize)>,
    pub(super) listener: Option<TcpListener>,
}

fn timeout(d: Option<Duration>) -> PollTimeout {
    match d {
        None => PollTimeout::NONE,
        Some(d) => {
            PollTimeout::try_from(d.max(Duration::from_millis(1))).unwrap_or(PollTimeout::MAX)
        }
    }
}

impl LiveWorld {
    fn woke(&self) {
        self.shared.sig.helper_wakes.fetch_add(1, Ordering::Relaxed);
    }

    /// The sockets, cloned again (under the device lock) when the set
    /// changed.
    fn refresh(&mut self) {
        let gen = self.shared.sig.gen.load(Ordering::SeqCst);
        if self.gen == Some(gen) {
            return;
        }
        let core = self.shared.lock();
        self.gen = Some(core.gen);
        self.listener = core.listener.try_clone().ok();
        self.socks = core
            .conns
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.dead)
            .filter_map(|(i, c)| c.stream.try_clone().ok().map(|s| (s, i)))
            .collect();
    }

    /// Which sockets to ask for writability: from the published bits, or,
    /// for connections numbered 63 and above, from the device.
    fn want_out(&self, out: u64) -> Vec<bool> {
        if out & (1 << 63) == 0 {
            // No connection numbered 63 or above has output.
            return self
                .socks
                .iter()
                .map(|&(_, i)| i < 63 && out & (1 << i) != 0)
                .collect();
        }
        let core = self.shared.lock();
        self.socks
            .iter()
            .map(|(_, i)| core.conns.get(*i).is_some_and(|c| !c.out.is_empty()))
            .collect()
    }
}

impl HelperWorld for LiveWorld {
    /// Sleeps the idle time, or, once the owner has armed the timer (it
    /// does at its first call while the helper waits), until the owner has
    /// not called in for an idle time.
    fn wait_idle(&mut self) -> bool {
        let sig = &self.shared.sig;
        let timer = &sig.timer;
        timer.wanted.store(true, Ordering::SeqCst);
        let wake = PollFd::new(sig.wake.rx.as_fd(), PollFlags::POLLIN);
        let (signalled, expired) = if matches!(timer.fd.get(), Ok(Some(_))) {
            // Armed: the owner pushes it back while it calls in.
            let mut fds = [wake, PollFd::new(timer.fd.as_fd(), PollFlags::POLLIN)];
            let r = poll(&mut fds, PollTimeout::NONE);
            let ready = |f: &PollFd<'_>| r.is_ok() && f.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), ready(&fds[1]))
        } else {
            // Not armed (the owner has not called in since the helper last
            // waited, or it expired): the plain idle sleep, during which
            // an owner that calls in arms it for the next wait.
            timer.drain();
            let mut fds = [wake];
            let signalled = matches!(poll(&mut fds, timeout(Some(self.idle))), Ok(n) if n > 0);
            (signalled, false)
        };
        timer.wanted.store(false, Ordering::SeqCst);
        timer.drain();
        self.woke();
        if signalled {
            // A signal: what it announces is published, and read again
            // before the next wait.
            self.shared.sig.wake.drain();
        }
        expired && !signalled
    }

    fn wait_ready(&mut self) -> bool {
        let sig = Arc::clone(&self.shared.sig);
        // The drain, then the stop flag (a stop after it leaves its byte
        // for the poll below; loom-checked).
        if !self.shared.handoff.drain_wake(&sig.wake) {
            return false;
        }
        self.refresh();
        // The output bits this wait covers, announced before they are read
        // again: an owner that queues output on another socket afterwards
        // sees them and signals.
        let mut out = sig.out.load(Ordering::SeqCst);
        sig.kicked.store(false, Ordering::SeqCst);
        loop {
            sig.watching.store(out, Ordering::SeqCst);
            let now = sig.out.load(Ordering::SeqCst);
            if now & !out == 0 {
                break;
            }
            out |= now;
        }
        let want_out = self.want_out(out);
        let accepting = sig.accepting.load(Ordering::SeqCst);
        let deadline = sig.deadline.load(Ordering::SeqCst);
        let wait = (deadline != u64::MAX).then(|| {
            let at = sig.base + Duration::from_millis(deadline);
            at.saturating_duration_since(Instant::now())
        });
        let mut fds = vec![PollFd::new(sig.wake.rx.as_fd(), PollFlags::POLLIN)];
        if let Some(l) = self.listener.as_ref().filter(|_| accepting) {
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
        }
        for ((s, _), out) in self.socks.iter().zip(&want_out) {
            let mut ev = PollFlags::POLLIN;
            if *out {
                ev |= PollFlags::POLLOUT;
            }
            fds.push(PollFd::new(s.as_fd(), ev));
        }
        let r = match wait {
            Some(d) if d.is_zero() => Ok(0),
            _ => poll(&mut fds, timeout(wait)),
        };
        sig.watching.store(u64::MAX, Ordering::SeqCst);
        self.woke();
        match r {
            // A deadline: the device runs its timeouts.
            Ok(0) => true,
            Ok(_) => {
                if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                    // A signal (a change of what to watch, read again before
                    // the next wait on the sockets, or the owner taking
                    // arrivals): taken now, so that it does not cut the
                    // sleep that follows short. A stop sets its flag before
                    // its byte: the loop sees it.
                    sig.wake.drain();
                }
                fds[1..]
                    .iter()
                    .any(|f| f.revents().is_some_and(|r| !r.is_empty()))
            }
            Err(_) => false,
        }
    }

    fn step(&mut self) {
        self.shared.sig.helper_steps.fetch_add(1, Ordering::Relaxed);
        let mut core = self.shared.lock();
        core.step();
    }
}
