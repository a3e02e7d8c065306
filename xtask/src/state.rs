//! Which state the machine is in while a benchmark round runs: the round
//! trip of one cache line between two threads.
//!
//! On 2-vCPU AMD EPYC VMs every benchmark run fell into one of two kinds,
//! for MPICH and tmx alike, and the kind changed between runs seconds
//! apart. What tells them apart: a
//! cache line written by one CPU and read by the other makes a round trip
//! in about 100–180 ns in one state and 410–540 ns in the other (a C
//! ping-pong of one line between two pinned processes, measured before
//! and after short benchmark runs; this probe's two threads, 313–415 ns
//! in the slow state). Small-message rates follow: MPICH's `bibw`
//! at 1 B is about 12.8 MB/s in the first state and 6.4 MB/s in the
//! second. `cargo xtask bench adi` measures this round trip before each
//! program it runs and splits the paired ratios by state, so that a row
//! below 1 can be read as "in the slow state" or "always".
//!
//! The probe is two threads of this process ping-ponging an atomic, with
//! no pinning (std has none): on an otherwise idle 2-CPU machine the
//! scheduler puts two spinning threads on the two CPUs. When it does not
//! (a busy machine), the hand-offs need context switches and the probe
//! gives up after [`GIVE_UP`], reporting no state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Round trips timed per probe (after [`WARM`] untimed ones): about 2–11 ms.
const TRIPS: u64 = 20_000;
/// Untimed round trips first (the second thread starting, caches warming).
const WARM: u64 = 2_000;
/// A probe that has not finished by then reports nothing.
const GIVE_UP: Duration = Duration::from_secs(2);
/// A round trip at or above this many ns is the slow state. Measured:
/// 104–176 ns and 415–540 ns between two processes (C), and
/// 313–415 ns in the slow state between this probe's two threads.
pub(crate) const SLOW_NS: f64 = 250.0;

/// An atomic alone on its own pair of cache lines (no false sharing with
/// the other one, nor through the adjacent-line prefetcher).
#[repr(align(128))]
struct Line(AtomicU64);

/// The machine's state as one probe saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum State {
    /// Round trip below [`SLOW_NS`], in ns.
    Fast(f64),
    /// Round trip at or above [`SLOW_NS`], in ns.
    Slow(f64),
    /// The probe gave up (the two threads did not run at once).
    Unknown,
}

impl State {
    /// The state of a measured round trip of `ns` nanoseconds.
    pub(crate) fn of(ns: Option<f64>) -> State {
        match ns {
            Some(ns) if ns < SLOW_NS => State::Fast(ns),
            Some(ns) => State::Slow(ns),
            None => State::Unknown,
        }
    }

    /// How the state is printed: `fast (118 ns)`, `slow (452 ns)`, `unknown`.
    pub(crate) fn describe(self) -> String {
        match self {
            State::Fast(ns) => format!("fast ({ns:.0} ns)"),
            State::Slow(ns) => format!("slow ({ns:.0} ns)"),
            State::Unknown => "unknown".into(),
        }
    }
}

/// Measures the machine's state now ([`line_round_trip`]).
pub(crate) fn probe() -> State {
    State::of(line_round_trip())
}

/// The mean round trip, in ns, of a value passed between this thread and a
/// second one through two atomics on lines of their own; `None` if the
/// probe did not finish within [`GIVE_UP`].
pub(crate) fn line_round_trip() -> Option<f64> {
    let ping = Arc::new(Line(AtomicU64::new(0)));
    let pong = Arc::new(Line(AtomicU64::new(0)));
    let (ping2, pong2) = (Arc::clone(&ping), Arc::clone(&pong));
    let start = Instant::now();
    let echo = std::thread::spawn(move || {
        for i in 1..=WARM + TRIPS {
            if !wait_for(&ping2.0, i, start) {
                return;
            }
            pong2.0.store(i, Ordering::Release);
        }
    });
    let mut timed_from = None;
    let mut done = true;
    for i in 1..=WARM + TRIPS {
        if i == WARM + 1 {
            timed_from = Some(Instant::now());
        }
        ping.0.store(i, Ordering::Release);
        if !wait_for(&pong.0, i, start) {
            done = false;
            // Unblocks the echo thread (it gives up on its own too).
            ping.0.store(u64::MAX, Ordering::Release);
            break;
        }
    }
    let elapsed = timed_from.map(|t| t.elapsed());
    // The echo thread only spins and stores; a panic there is a bug here.
    let joined = echo.join().is_ok();
    match (done && joined, elapsed) {
        (true, Some(e)) => Some(e.as_secs_f64() * 1e9 / TRIPS as f64),
        _ => None,
    }
}

/// Spins until `a` holds `want` (or, for the other side's give-up signal,
/// `u64::MAX`); `false` if it did not before [`GIVE_UP`] after `start`.
fn wait_for(a: &AtomicU64, want: u64, start: Instant) -> bool {
    let mut spins = 0u32;
    loop {
        match a.load(Ordering::Acquire) {
            v if v == want => return true,
            u64::MAX => return false,
            _ => {}
        }
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && start.elapsed() > GIVE_UP {
            return false;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_split_at_the_threshold() {
        assert_eq!(State::of(Some(120.0)), State::Fast(120.0));
        assert_eq!(State::of(Some(SLOW_NS)), State::Slow(SLOW_NS));
        assert_eq!(State::of(Some(480.0)), State::Slow(480.0));
        assert_eq!(State::of(None), State::Unknown);
        assert_eq!(State::Fast(118.4).describe(), "fast (118 ns)");
        assert_eq!(State::Slow(452.0).describe(), "slow (452 ns)");
        assert_eq!(State::Unknown.describe(), "unknown");
    }

    #[test]
    fn the_probe_measures_a_positive_round_trip_or_gives_up() {
        // On a machine with one CPU free the threads cannot hand off
        // without the scheduler, and the probe may give up: both are
        // answers, but a measured one must be a real duration.
        if let Some(ns) = line_round_trip() {
            assert!(ns > 0.0 && ns.is_finite(), "{ns}");
        }
    }
}
