//! Init-time choice of the CMA thresholds from a measurement between two
//! local ranks (`TMX_SHMEM_TUNE=cma_calibrate`).
//!
//! Whether one `process_vm_readv` beats two `memcpy`s through the eager
//! area depends on the machine far more than on the message. On the Xeon
//! VM the static defaults were measured on, a ping-pong was faster by CMA
//! from ≈ 6.5 KiB; on an AMD EPYC VM, whose cores move cache
//! lines between them faster, the eager path won up to 64 KiB in its fast
//! runs (latency 8 KiB 3.9 µs by CMA against 0.8 µs by eager blocks) and
//! lost from 16 KiB in its slow ones. A system call costs ≈ 2 µs on both. A self
//! `process_vm_readv` against an in-cache `memcpy` misjudges the eager
//! path, whose receiver reads lines another core just wrote, so the
//! measurement is the real thing in miniature: local ranks 0 and 1
//! ping-pong messages of 8, 16, 32 and 64 KiB, first through their eager
//! areas (the sender copies into its area as a buffered send does, the
//! receiver copies out), then by CMA (the receiver reads the sender's
//! buffer), in two rounds, and rank 0 compares the medians of the round
//! trips. The largest size at which the eager path won by more than 10%
//! becomes the floor of `cma_threshold`, `cma_reply` and `cma_duplex` on
//! every local rank: the thresholds are only ever raised, so a machine
//! where CMA wins keeps the static defaults.
//!
//! The exchange runs after the attach barrier and before any endpoint
//! exists, so the eager areas are unused (a buffered send rewrites its
//! block's release flag when it takes the block). Two sequence words in
//! the ranks' [`RankInfo`](crate::segment) records carry the
//! ping-pong (Release after the data, Acquire before reading it) and one
//! word in the segment header carries the outcome; every wait is bounded
//! by [`Config::calibrate_deadline`] (default
//! [`CALIBRATE_DEADLINE`](crate::config::CALIBRATE_DEADLINE), 2 s), after
//! which the static thresholds are kept.

use crate::config::Config;
use crate::copy;
use crate::segment::Segment;
use core::sync::atomic::Ordering;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use std::io::IoSliceMut;
use std::time::{Duration, Instant};

/// Message sizes of the ping-pong.
pub const SIZES: [u64; 4] = [8 << 10, 16 << 10, 32 << 10, 64 << 10];
/// Rounds over all sizes and both paths (each size's figure is the lower
/// of its rounds' medians).
const ROUNDS: usize = 2;
/// Untimed round trips before each timed series.
const WARMUP: usize = 8;
/// Timed round trips per size, path and round.
const TIMED: usize = 48;
/// The eager path must be this much faster (eager × 11 < CMA × 10) to
/// raise the thresholds past a size.
const MARGIN: (u64, u64) = (11, 10);

/// Outcome word values (`SegHeader::calib_result`); larger values are the
/// size the thresholds were raised to.
const PENDING: u64 = 0;
const KEPT: u64 = 1;
const SKIPPED: u64 = 2;
/// `calib_addr` of a rank 1 that does not take part.
const DECLINED: u64 = u64::MAX;

/// One size's measurement: median round trip (two messages) of the lower
/// round, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalibrationPoint {
    /// Message size in bytes.
    pub bytes: u64,
    /// Round trip through the eager areas (two copies per message).
    pub eager_ns: u64,
    /// Round trip by CMA (one `process_vm_readv` per message).
    pub cma_ns: u64,
}

/// What the CMA calibration decided ([`crate::Node::calibration`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Calibration {
    /// The measurements (on local rank 0, which measured; empty on the
    /// other ranks, which only learn the outcome).
    pub points: Vec<CalibrationPoint>,
    /// The size `cma_threshold`, `cma_reply` and `cma_duplex` were raised
    /// to (at least), or `None` when CMA won at every size and the
    /// configured thresholds stand.
    pub raised_to: Option<u64>,
}

impl Calibration {
    /// Raises the three thresholds of `cfg` to [`Calibration::raised_to`].
    pub fn apply(&self, cfg: &mut Config) {
        if let Some(s) = self.raised_to {
            cfg.cma_threshold = cfg.cma_threshold.max(s);
            cfg.cma_reply = cfg.cma_reply.max(s);
            cfg.cma_duplex = cfg.cma_duplex.max(s);
        }
    }
}

/// The size to raise the thresholds to: the largest measured size at which
/// the eager path won by the margin.
pub fn decide(points: &[CalibrationPoint]) -> Option<u64> {
    points
        .iter()
        .filter(|p| p.eager_ns.saturating_mul(MARGIN.0) < p.cma_ns.saturating_mul(MARGIN.1))
        .map(|p| p.bytes)
        .max()
}

/// Number of CPUs online (not this process's affinity mask: ranks bound
/// to one core each still run side by side).
pub(crate) fn cpus_online() -> usize {
    let parse = |s: &str| -> Option<usize> {
        let mut n = 0;
        for part in s.trim().split(',') {
            match part.split_once('-') {
                Some((a, b)) => n += b.parse::<usize>().ok()? + 1 - a.parse::<usize>().ok()?,
                None => {
                    part.parse::<usize>().ok()?;
                    n += 1;
                }
            }
        }
        Some(n)
    };
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| parse(&s))
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
}

/// Whether the calibration can run on this node at all (every rank
/// computes the same answer).
fn runnable(seg: &Segment, cfg: &Config, cma_available: bool) -> bool {
    let largest = cfg.eager_bytes / 2;
    cfg.cma_calibrate
        && cma_available
        && seg.size() >= 2
        && (seg.size() as usize) <= cpus_online()
        && SIZES[0] <= largest
}

/// Spins (then yields) until `done` or the deadline; false on timeout.
fn wait(deadline: Instant, mut done: impl FnMut() -> bool) -> bool {
    let mut spins = 0u32;
    loop {
        if done() {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins % 256 == 0 {
            if Instant::now() >= deadline {
                return false;
            }
            if spins >= 1 << 16 {
                std::thread::yield_now();
            }
        }
        core::hint::spin_loop();
    }
}

/// Runs the calibration's part of local rank `seg.rank()` and returns the
/// outcome, or `None` when it did not run (disabled, CMA unavailable, one
/// local rank, more local ranks than CPUs, a failure or the deadline):
/// then the configured thresholds stand.
pub(crate) fn run(seg: &Segment, cfg: &Config, cma_available: bool) -> Option<Calibration> {
    let me = seg.rank();
    let result = seg.calib_result();
    if !runnable(seg, cfg, cma_available) {
        // Ranks whose view differs (a configuration mismatch) must not
        // wait for the deadline: rank 0 publishes the outcome, rank 1
        // declines the ping-pong.
        match me {
            0 => result.store(SKIPPED, Ordering::Release),
            1 => seg
                .rank_info(1)
                .calib_addr
                .store(DECLINED, Ordering::Release),
            _ => {}
        }
        return None;
    }
    let start = Instant::now();
    let deadline = start + cfg.calibrate_deadline;
    // The leader's source buffer lives in `leader`, which returns only
    // after the partner's last answer, so after its last read of it.
    let points = match me {
        0 => {
            let points = leader(seg, cfg, deadline);
            let word = match &points {
                Some(p) => decide(p).unwrap_or(KEPT),
                None => SKIPPED,
            };
            result.store(word, Ordering::Release);
            points.unwrap_or_default()
        }
        1 => {
            // The leader reads this rank's source buffer by CMA after its
            // last answer: it must stay allocated until the outcome is in.
            let (src, dst) = buffers(cfg, 1);
            partner(seg, cfg, deadline, src.get(), dst);
            let word = wait_outcome(seg, deadline);
            drop(src);
            return word.and_then(|w| outcome(w, Vec::new()));
        }
        _ => Vec::new(),
    };
    let out = wait_outcome(seg, deadline).and_then(|w| outcome(w, points));
    if me == 0 {
        if let Some(c) = &out {
            tracing::info!(
                points = ?c.points,
                raised_to = ?c.raised_to,
                micros = start.elapsed().as_micros() as u64,
                "CMA calibration"
            );
        }
    }
    out
}

/// Waits for local rank 0's outcome word; `None` on timeout. Sleeps
/// rather than spins: a waiting rank must not take a CPU from the two
/// that measure.
fn wait_outcome(seg: &Segment, deadline: Instant) -> Option<u64> {
    let result = seg.calib_result();
    let mut word = result.load(Ordering::Acquire);
    while word == PENDING {
        if Instant::now() >= deadline {
            tracing::warn!(
                "CMA calibration: no outcome from local rank 0 in time; static thresholds kept"
            );
            return None;
        }
        std::thread::sleep(Duration::from_micros(50));
        word = result.load(Ordering::Acquire);
    }
    Some(word)
}

/// The calibration an outcome word stands for (`None`: skipped).
fn outcome(word: u64, points: Vec<CalibrationPoint>) -> Option<Calibration> {
    match word {
        PENDING | SKIPPED => None,
        KEPT => Some(Calibration {
            points,
            raised_to: None,
        }),
        s => Some(Calibration {
            points,
            raised_to: Some(s),
        }),
    }
}

/// The sizes this configuration's eager area can hold twice over.
fn sizes(cfg: &Config) -> impl Iterator<Item = u64> {
    let largest = cfg.eager_bytes / 2;
    SIZES.into_iter().filter(move |&s| s <= largest)
}

/// The schedule both ranks follow: (round, size, by CMA) per series.
fn schedule(cfg: &Config) -> Vec<(usize, u64, bool)> {
    let mut v = Vec::new();
    for round in 0..ROUNDS {
        for s in sizes(cfg) {
            v.push((round, s, false));
            v.push((round, s, true));
        }
    }
    v
}

/// A buffer of `n` bytes starting on a page boundary, as OSU's benchmarks
/// and most large application buffers do: a CMA copy between buffers at
/// 16 bytes past a page boundary (where `malloc` puts them) cost 2.3× as
/// much at 8 KiB and 5× at 64 KiB on the AMD EPYC VM (5.1 against 2.2 µs,
/// 35 against 7.0 µs per `process_vm_readv`, two processes on two cores).
struct PageBuf {
    v: Vec<u8>,
    off: usize,
    n: usize,
}

const PAGE: usize = 4096;

impl PageBuf {
    fn new(n: usize, me: u32) -> PageBuf {
        let mut v = vec![0u8; n + PAGE];
        let off = (PAGE - (v.as_ptr() as usize) % PAGE) % PAGE;
        for (i, b) in v[off..off + n].iter_mut().enumerate() {
            *b = pattern(me, i);
        }
        PageBuf { v, off, n }
    }

    fn get(&self) -> &[u8] {
        &self.v[self.off..self.off + self.n]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.v[self.off..self.off + self.n]
    }
}

/// Byte `i` of rank `me`'s source buffer.
fn pattern(me: u32, i: usize) -> u8 {
    (i as u8) ^ (me as u8) ^ 0xa5
}

/// A source and a destination buffer of the largest size.
fn buffers(cfg: &Config, me: u32) -> (PageBuf, PageBuf) {
    let n = sizes(cfg).max().unwrap_or(0) as usize;
    let mut dst = PageBuf::new(n, me);
    dst.get_mut().fill(0);
    (PageBuf::new(n, me), dst)
}

fn cma_read(pid: Pid, addr: u64, dst: &mut [u8]) -> bool {
    let len = dst.len();
    let remote = [RemoteIoVec {
        base: addr as usize,
        len,
    }];
    matches!(process_vm_readv(pid, &mut [IoSliceMut::new(dst)], &remote), Ok(n) if n == len)
}

fn pid_of(seg: &Segment, pe: u32) -> Option<Pid> {
    i32::try_from(seg.pid_of(pe)).ok().map(Pid::from_raw)
}

/// Local rank 0: sends each message, times the round trip.
fn leader(seg: &Segment, cfg: &Config, deadline: Instant) -> Option<Vec<CalibrationPoint>> {
    let (src, mut dst) = buffers(cfg, 0);
    let mine = seg.rank_info(0);
    let peer = seg.rank_info(1);
    mine.calib_addr
        .store(src.get().as_ptr() as u64, Ordering::Release);
    if !wait(deadline, || peer.calib_addr.load(Ordering::Acquire) != 0) {
        return None;
    }
    let peer_addr = peer.calib_addr.load(Ordering::Acquire);
    if peer_addr == DECLINED {
        return None;
    }
    let pid = pid_of(seg, 1)?;
    let movsb = copy::movsb_min(cfg.movsb_min);
    let area = seg.eager_ptr(0);
    let peer_area = seg.eager_ptr(1);
    let mut k = 0u32;
    let mut medians: Vec<(u64, bool, u64)> = Vec::new();
    let mut rtt = Vec::with_capacity(TIMED);
    for (_, size, by_cma) in schedule(cfg) {
        let n = size as usize;
        rtt.clear();
        for i in 0..WARMUP + TIMED {
            k = k.wrapping_add(1);
            let t0 = Instant::now();
            if !by_cma {
                // SAFETY: `area` is this rank's eager area, at least `2n`
                // bytes (`sizes`), unused by the transport before init
                // returns; the partner reads it only between this store of
                // `k` and its own store of `k`, and this rank writes it
                // again only after seeing that store. `src` holds `n`
                // bytes and does not overlap the mapping.
                unsafe { copy::to_block(src.get().as_ptr(), area, n, movsb) };
            }
            mine.calib_seq.store(k, Ordering::Release);
            if !wait(deadline, || peer.calib_seq.load(Ordering::Acquire) == k) {
                return None;
            }
            if by_cma {
                if !cma_read(pid, peer_addr, &mut dst.get_mut()[..n]) {
                    return None;
                }
            } else {
                // SAFETY: the partner wrote `n` bytes at the start of its
                // eager area before its Release store of `k`, which the
                // Acquire load above saw; it does not write them again
                // before this rank's next store. `dst` holds `n` bytes.
                unsafe { core::ptr::copy_nonoverlapping(peer_area, dst.get_mut().as_mut_ptr(), n) };
            }
            if i >= WARMUP {
                rtt.push(t0.elapsed().as_nanos() as u64);
            }
        }
        if dst.get()[..n]
            .iter()
            .enumerate()
            .any(|(i, &b)| b != pattern(1, i))
        {
            tracing::warn!(
                size,
                by_cma,
                "CMA calibration read wrong bytes; static thresholds kept"
            );
            return None;
        }
        rtt.sort_unstable();
        medians.push((size, by_cma, rtt[rtt.len() / 2]));
    }
    let best = |s: u64, c: bool| {
        medians
            .iter()
            .filter(|m| m.0 == s && m.1 == c)
            .map(|m| m.2)
            .min()
            .unwrap_or(u64::MAX)
    };
    Some(
        sizes(cfg)
            .map(|s| CalibrationPoint {
                bytes: s,
                eager_ns: best(s, false),
                cma_ns: best(s, true),
            })
            .collect(),
    )
}

/// Local rank 1: answers each message with one of the same size.
fn partner(seg: &Segment, cfg: &Config, deadline: Instant, src: &[u8], mut dst: PageBuf) {
    let mine = seg.rank_info(1);
    let peer = seg.rank_info(0);
    let result = seg.calib_result();
    mine.calib_addr
        .store(src.as_ptr() as u64, Ordering::Release);
    let Some(pid) = pid_of(seg, 0) else { return };
    let movsb = copy::movsb_min(cfg.movsb_min);
    let area = seg.eager_ptr(1);
    let peer_area = seg.eager_ptr(0);
    let mut k = 0u32;
    let mut peer_addr = 0;
    for (_, size, by_cma) in schedule(cfg) {
        let n = size as usize;
        for _ in 0..WARMUP + TIMED {
            k = k.wrapping_add(1);
            // The leader gives up by publishing an outcome.
            if !wait(deadline, || {
                peer.calib_seq.load(Ordering::Acquire) == k
                    || result.load(Ordering::Acquire) != PENDING
            }) || result.load(Ordering::Acquire) != PENDING
            {
                return;
            }
            if by_cma {
                if peer_addr == 0 {
                    peer_addr = peer.calib_addr.load(Ordering::Acquire);
                }
                if !cma_read(pid, peer_addr, &mut dst.get_mut()[..n]) {
                    // The leader times out and keeps the static thresholds.
                    return;
                }
            } else {
                // SAFETY: the leader wrote `n` bytes at the start of its
                // eager area before its Release store of `k` (seen above)
                // and writes them again only after this rank's store of
                // `k`. `dst` holds `n` bytes.
                unsafe { core::ptr::copy_nonoverlapping(peer_area, dst.get_mut().as_mut_ptr(), n) };
                // SAFETY: this rank's eager area holds at least `2n` bytes
                // and is unused before init returns; the leader reads it
                // only between this rank's store of `k` and its own next
                // store, which comes before this rank writes it again.
                unsafe { copy::to_block(src.as_ptr(), area, n, movsb) };
            }
            mine.calib_seq.store(k, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bytes: u64, eager_ns: u64, cma_ns: u64) -> CalibrationPoint {
        CalibrationPoint {
            bytes,
            eager_ns,
            cma_ns,
        }
    }

    #[test]
    fn raises_to_the_largest_size_eager_won_by_the_margin() {
        // CMA wins everywhere (the Xeon): nothing raised.
        assert_eq!(decide(&[p(8192, 2000, 1500), p(65536, 9000, 5000)]), None);
        // Eager wins up to 32 KiB (the EPYC shape).
        let pts = [
            p(8192, 800, 4000),
            p(16384, 1100, 5000),
            p(32768, 1900, 5500),
            p(65536, 4000, 4100),
        ];
        assert_eq!(decide(&pts), Some(32768));
        // Within 10% is not a win.
        assert_eq!(decide(&[p(8192, 1000, 1050)]), None);
        assert_eq!(decide(&[p(8192, 1000, 1200)]), Some(8192));
    }

    #[test]
    fn apply_only_raises() {
        let mut c = Config::default();
        Calibration {
            points: vec![],
            raised_to: Some(32 << 10),
        }
        .apply(&mut c);
        assert_eq!(
            (c.cma_threshold, c.cma_reply, c.cma_duplex),
            (32 << 10, 32 << 10, 32 << 10)
        );
        let mut c = Config {
            cma_threshold: 1 << 20,
            cma_reply: u64::MAX,
            ..Config::default()
        };
        Calibration {
            points: vec![],
            raised_to: Some(16 << 10),
        }
        .apply(&mut c);
        assert_eq!(
            (c.cma_threshold, c.cma_reply, c.cma_duplex),
            (1 << 20, u64::MAX, 16 << 10)
        );
        let before = Config::default();
        let mut c = before.clone();
        Calibration {
            points: vec![],
            raised_to: None,
        }
        .apply(&mut c);
        assert_eq!(c, before);
    }
}
