//! Init-time choice of the inline reply cap from a measurement between two
//! local ranks (`TMX_SHMEM_TUNE=inline_calibrate`,
//! [`Endpoint::calibrate_inline_reply`]).
//!
//! A reply of 129 B – 1 KiB goes inline in the header ring (its payload in
//! the slots after its header) instead of through an eager block. Which of the two is faster depends on
//! the machine: on the Xeon VM the default was measured on, inline won a
//! ping-pong up to about 1.1 KiB (1 KiB 1.21× faster); on an AMD EPYC VM
//! the eager block won from 512 B (1 KiB 0.34 µs against 0.47
//! inline, ten alternating runs of each). So local ranks 0 and 1 ping-pong
//! messages of 256, 512, 768 and 1024 B through their real endpoints, the
//! same sends and receives the ADI makes, with inline replies on and off
//! in turn, in three rounds; rank 0 compares the lower of each size's
//! round medians and lowers the cap below the first size at which the
//! eager blocks won by more than 5%. The cap is only ever lowered. Rank 0
//! sends the outcome to every other local rank, which applies it too.
//!
//! The messages use a context id the caller reserves for it, so that
//! nothing of them can match a user's receive. Nothing of them stays
//! queued either, even when a deadline cut the exchange short: a message
//! left unreceived would hold its sender's eager block and keep the
//! unexpected queue from ever being empty again. Each rank's last message
//! on the context closes its stream: rank 0's is the outcome (to every
//! other rank), rank 1's an end marker (to rank 0, once it answers no
//! more). Every rank receives from each rank that sends to it, with any
//! tag, until that last message, discarding what comes before it (a ping
//! or an answer its wait gave up on), so the per-sender order of the rings
//! leaves nothing behind it. Rank 1 stops answering at the outcome, rank 0
//! stops pinging at the end marker. Every wait is bounded by half of
//! [`crate::Config::calibrate_deadline`] (the outcome's by the whole);
//! after it the configured cap stands. With the ranks' starts less than
//! half the deadline apart, every closing message arrives within those
//! bounds. The endpoint's counters are restored afterwards: they count
//! the application's traffic only.

use crate::calibrate::cpus_online;
use crate::endpoint::Endpoint;
use crate::error::Result;
use std::time::{Duration, Instant};
use tm_proto::{MatchSpec, Source, Tag};

/// Message sizes of the ping-pong, ascending.
pub const REPLY_SIZES: [u64; 4] = [256, 512, 768, 1024];
/// Rounds over all sizes and both ways.
const ROUNDS: usize = 3;
/// Untimed round trips before each timed series.
const WARMUP: usize = 8;
/// Timed round trips per size, way and round.
const TIMED: usize = 40;
/// The eager blocks must be this much faster (eager × 21 < inline × 20) to
/// lower the cap below a size.
const MARGIN: (u64, u64) = (21, 20);
/// Tags of the ping-pong, of the outcome message and of rank 1's end
/// marker.
const TAG_PING: u32 = 1;
const TAG_OUTCOME: u32 = 2;
const TAG_END: u32 = 3;
/// Outcome values: the cap stands (measured, inline never lost), or the
/// measurement did not finish (every rank reports `None`).
const KEEP: u64 = u64::MAX;
const SKIPPED: u64 = u64::MAX - 1;

/// One size's measurement: the lower of the rounds' median round trips
/// (two messages), in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyPoint {
    /// Message size in bytes.
    pub bytes: u64,
    /// Round trip with both messages inline in the header ring.
    pub inline_ns: u64,
    /// Round trip with both messages through eager blocks.
    pub eager_ns: u64,
}

/// What [`Endpoint::calibrate_inline_reply`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyCalibration {
    /// The measurements (on local rank 0; empty on the other ranks).
    pub points: Vec<ReplyPoint>,
    /// The size the inline reply cap was lowered to (a message larger
    /// than this goes through an eager block; at most the inline-ext cap
    /// means inline replies are off), or `None` when inline won or tied
    /// at every measured size and the cap stands.
    pub lowered_to: Option<u64>,
}

/// The cap for `points` (ascending sizes) and the inline-ext cap `ext`:
/// the largest measured size below the first one at which eager blocks
/// won by the margin (`ext` when that is the first), or `None`.
pub fn decide_reply(points: &[ReplyPoint], ext: u64) -> Option<u64> {
    let mut below = ext;
    for p in points {
        if p.eager_ns.saturating_mul(MARGIN.0) < p.inline_ns.saturating_mul(MARGIN.1) {
            return Some(below);
        }
        below = p.bytes;
    }
    None
}

/// Polls `f` until it gives an answer, then `Some`; `None` past
/// `deadline`. With `sleepy` it sleeps 50 µs after every 64 polls (ranks
/// that only wait must not take a CPU from the two that measure).
fn poll<T>(
    deadline: Instant,
    sleepy: bool,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<Option<T>> {
    let mut n = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(Some(v));
        }
        n = n.wrapping_add(1);
        if n % 64 == 0 {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            if sleepy {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        core::hint::spin_loop();
    }
}

impl Endpoint {
    /// Measures inline replies against eager blocks between local ranks 0
    /// and 1 and lowers this endpoint's inline reply cap where the eager
    /// blocks won (see the module docs). Collective over the node: every local rank
    /// calls it once, before any other traffic, with the same `context`, a
    /// context id used for nothing else. Returns `Ok(None)` when it did not
    /// run (`Config::inline_calibrate` off, one local rank, more local ranks
    /// than CPUs online, a cap that leaves nothing to measure) or a
    /// deadline passed (the configured cap stands).
    ///
    /// # Errors
    /// A send or receive error of the endpoint (a peer that died).
    pub fn calibrate_inline_reply(&mut self, context: u32) -> Result<Option<ReplyCalibration>> {
        self.calibrate_inline_reply_within(context, cpus_online())
    }

    /// [`Endpoint::calibrate_inline_reply`] as if `cpus` CPUs were online
    /// (for tests of nodes with more ranks than this machine has CPUs).
    #[doc(hidden)]
    pub fn calibrate_inline_reply_within(
        &mut self,
        context: u32,
        cpus: usize,
    ) -> Result<Option<ReplyCalibration>> {
        let enabled = self.node().config().inline_calibrate;
        let me = self.rank();
        let n = self.size();
        let ext = self.ext_max() as u64;
        let cap = self.reply_cap() as u64;
        let sizes: Vec<u64> = REPLY_SIZES
            .iter()
            .copied()
            .filter(|&s| s > ext && s <= cap)
            .collect();
        if !enabled || n < 2 || n as usize > cpus || sizes.is_empty() {
            return Ok(None);
        }
        let saved = self.counters();
        let start = Instant::now();
        let bound = self.node().config().calibrate_deadline / 2;
        let deadline = start + bound;
        let word = match me {
            0 => {
                let (points, ended) = self.reply_leader(context, &sizes, cap, deadline)?;
                let word = match &points {
                    Some(p) => decide_reply(p, ext).unwrap_or(KEEP),
                    None => SKIPPED,
                };
                // Rank 0's last message to each rank on the context.
                for r in 1..n {
                    self.send(r, TAG_OUTCOME, context, &word.to_le_bytes())?;
                }
                if !ended {
                    let until = Instant::now().max(deadline) + bound;
                    if self
                        .reply_drain(context, 1, TAG_END, until, false)?
                        .is_none()
                    {
                        tracing::warn!("inline reply calibration: no end marker in time");
                    }
                }
                if let Some(p) = &points {
                    tracing::info!(
                        points = ?p,
                        lowered_to = ?(word != KEEP).then_some(word),
                        micros = start.elapsed().as_micros() as u64,
                        "inline reply calibration"
                    );
                }
                points.map(|points| (word, points))
            }
            _ => {
                let mut got = None;
                if me == 1 {
                    match self.reply_partner(context, &sizes, cap, deadline)? {
                        Partner::Finished => {}
                        Partner::Outcome(w) => got = Some(w),
                        Partner::Late => {
                            tracing::warn!("inline reply calibration: no ping in time; cap kept");
                        }
                    }
                    // Rank 1's last message on the context.
                    self.send(0, TAG_END, context, &[])?;
                }
                if got.is_none() {
                    // Rank 0 sends the outcome after its own deadline at
                    // the latest; pings before it are discarded.
                    got = self.reply_drain(context, 0, TAG_OUTCOME, deadline + bound, me != 1)?;
                }
                match got {
                    Some(w) if w != SKIPPED => Some((w, Vec::new())),
                    Some(_) => None,
                    None => {
                        tracing::warn!("inline reply calibration: no outcome in time; cap kept");
                        None
                    }
                }
            }
        };
        self.restore_counters(saved);
        let Some((word, points)) = word else {
            self.set_reply_cap(cap as usize);
            return Ok(None);
        };
        let lowered_to = (word != KEEP).then_some(word.min(cap));
        self.set_reply_cap(lowered_to.unwrap_or(cap) as usize);
        let c = ReplyCalibration { points, lowered_to };
        self.set_reply_calibration(c.clone());
        Ok(Some(c))
    }

    /// The schedule both ranks follow: (size, inline) per series.
    fn reply_schedule(sizes: &[u64]) -> Vec<(u64, bool)> {
        let mut v = Vec::new();
        for round in 0..ROUNDS {
            for &s in sizes {
                // Alternate which way goes first, against drift in a round.
                let first = round % 2 == 0;
                v.push((s, first));
                v.push((s, !first));
            }
        }
        v
    }

    /// Local rank 0: sends each ping, times the round trip. `None` past
    /// the deadline, on a wrong byte, or at rank 1's end marker (then
    /// `true`: nothing more comes from rank 1 on the context).
    fn reply_leader(
        &mut self,
        context: u32,
        sizes: &[u64],
        cap: u64,
        deadline: Instant,
    ) -> Result<(Option<Vec<ReplyPoint>>, bool)> {
        let (src, mut dst, spec) = ping_setup(0, context, sizes);
        let mut rtt = Vec::with_capacity(TIMED);
        let mut medians: Vec<(u64, bool, u64)> = Vec::new();
        for (size, inline) in Self::reply_schedule(sizes) {
            let len = size as usize;
            self.set_reply_cap(if inline { cap as usize } else { 0 });
            rtt.clear();
            for i in 0..WARMUP + TIMED {
                let t0 = Instant::now();
                self.send(1, TAG_PING, context, &src[..len])?;
                let Some(st) = poll(deadline, false, || self.recv_now(spec, &mut dst))? else {
                    return Ok((None, false));
                };
                if i >= WARMUP {
                    rtt.push(t0.elapsed().as_nanos() as u64);
                }
                if st.tag == TAG_END {
                    return Ok((None, true));
                }
                if st.tag != TAG_PING || st.msg_len != len {
                    return Ok((None, false));
                }
            }
            if dst[..len]
                .iter()
                .enumerate()
                .any(|(i, &b)| b != pattern(1, i))
            {
                tracing::warn!(size, inline, "inline reply calibration read wrong bytes");
                return Ok((None, false));
            }
            rtt.sort_unstable();
            medians.push((size, inline, rtt[rtt.len() / 2]));
        }
        let best = |s: u64, inline: bool| {
            medians
                .iter()
                .filter(|m| m.0 == s && m.1 == inline)
                .map(|m| m.2)
                .min()
                .unwrap_or(u64::MAX)
        };
        let points = sizes
            .iter()
            .map(|&s| ReplyPoint {
                bytes: s,
                inline_ns: best(s, true),
                eager_ns: best(s, false),
            })
            .collect();
        Ok((Some(points), false))
    }

    /// Local rank 1: answers each ping with a message of its size, until
    /// the schedule's end, rank 0's outcome (it gave up) or the deadline.
    fn reply_partner(
        &mut self,
        context: u32,
        sizes: &[u64],
        cap: u64,
        deadline: Instant,
    ) -> Result<Partner> {
        let (src, mut dst, spec) = ping_setup(1, context, sizes);
        for (size, inline) in Self::reply_schedule(sizes) {
            let len = size as usize;
            self.set_reply_cap(if inline { cap as usize } else { 0 });
            for _ in 0..WARMUP + TIMED {
                let Some(st) = poll(deadline, false, || self.recv_now(spec, &mut dst))? else {
                    return Ok(Partner::Late);
                };
                if st.tag == TAG_OUTCOME {
                    return Ok(Partner::Outcome(outcome_word(&st, &dst)));
                }
                self.send(0, TAG_PING, context, &src[..len])?;
            }
        }
        Ok(Partner::Finished)
    }

    /// Receives `from`'s messages on `context` (any tag) until its closing
    /// one, tagged `last`, discarding the others; `Some` with its word
    /// ([`outcome_word`]) when it came, `None` past `until`.
    fn reply_drain(
        &mut self,
        context: u32,
        from: u32,
        last: u32,
        until: Instant,
        sleepy: bool,
    ) -> Result<Option<u64>> {
        let spec = MatchSpec {
            context_id: context,
            source: Source::Rank(from),
            tag: Tag::Any,
        };
        let mut buf = vec![0u8; REPLY_SIZES[REPLY_SIZES.len() - 1] as usize];
        poll(until, sleepy, || {
            Ok(match self.recv_now(spec, &mut buf)? {
                Some(st) if st.tag == last => Some(outcome_word(&st, &buf)),
                _ => None,
            })
        })
    }
}

/// How [`Endpoint::reply_partner`] ended.
enum Partner {
    /// It answered every ping of the schedule.
    Finished,
    /// Rank 0's outcome came instead of a ping: it gave up.
    Outcome(u64),
    /// No ping before the deadline.
    Late,
}

/// The outcome word of message `st` received into `buf` ([`SKIPPED`]
/// unless it holds exactly one).
fn outcome_word(st: &crate::endpoint::Status, buf: &[u8]) -> u64 {
    match buf.get(..8).and_then(|b| <[u8; 8]>::try_from(b).ok()) {
        Some(w) if st.len == 8 => u64::from_le_bytes(w),
        _ => SKIPPED,
    }
}

/// Rank `me`'s (0 or 1) source and destination buffers of the largest
/// size, and the match of the other rank's messages.
fn ping_setup(me: u32, context: u32, sizes: &[u64]) -> (Vec<u8>, Vec<u8>, MatchSpec) {
    let largest = sizes.iter().copied().max().unwrap_or(0) as usize;
    let src = (0..largest).map(|i| pattern(me, i)).collect();
    // Any tag: the other rank's closing message ends the ping-pong too.
    let spec = MatchSpec {
        context_id: context,
        source: Source::Rank(1 - me),
        tag: Tag::Any,
    };
    (src, vec![0u8; largest], spec)
}

/// Byte `i` of rank `me`'s ping.
fn pattern(me: u32, i: usize) -> u8 {
    (i as u8).wrapping_mul(7) ^ (me as u8) ^ 0x3c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(bytes: u64, inline_ns: u64, eager_ns: u64) -> ReplyPoint {
        ReplyPoint {
            bytes,
            inline_ns,
            eager_ns,
        }
    }

    #[test]
    fn decide_lowers_below_the_first_eager_win() {
        // Inline wins everywhere: the cap stands.
        assert_eq!(
            decide_reply(
                &[p(256, 300, 330), p(512, 400, 420), p(1024, 500, 600)],
                128
            ),
            None
        );
        // Eager wins from 768 B: the cap becomes 512.
        assert_eq!(
            decide_reply(
                &[
                    p(256, 300, 330),
                    p(512, 400, 400),
                    p(768, 600, 500),
                    p(1024, 700, 500)
                ],
                128
            ),
            Some(512)
        );
        // Eager wins at the first size: inline replies off (the ext cap).
        assert_eq!(
            decide_reply(&[p(256, 400, 300), p(512, 500, 300)], 128),
            Some(128)
        );
        // A win inside the margin (4%) does not count; a later one does,
        // even if an earlier size tied.
        assert_eq!(
            decide_reply(&[p(256, 1000, 960), p(512, 1000, 800)], 128),
            Some(256)
        );
        assert_eq!(decide_reply(&[], 128), None);
    }

    #[test]
    fn schedule_alternates_the_first_way() {
        let s = Endpoint::reply_schedule(&[256, 512]);
        assert_eq!(s.len(), ROUNDS * 4);
        assert_eq!(
            &s[..4],
            &[(256, true), (256, false), (512, true), (512, false)]
        );
        assert_eq!(
            &s[4..8],
            &[(256, false), (256, true), (512, false), (512, true)]
        );
    }
}
