//! Configuration from `TMX_SHMEM_*` environment variables.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TMX_SHMEM_RING_SLOTS` | `auto`: 128 up to 64 local ranks, 64 beyond | header ring slots per ordered pair (power of two, 1..=65536, or `auto`); 64 bytes each, so 8 KiB per ordered pair at 128 |
//! | `TMX_SHMEM_PUBLISH_BATCH` | ring slots / 2 | consumer publishes its index every this many messages (1..=ring slots; with `auto` slots, a larger value is lowered to the ring's size) |
//! | `TMX_SHMEM_PREPOST_SLOTS` | 16 | prepost ring slots per ordered pair (power of two, 1..=65536) |
//! | `TMX_SHMEM_HEAP_BYTES` | 16M | symmetric heap per rank (bytes; suffix `K`, `M`, `G` allowed) |
//! | `TMX_SHMEM_EAGER_BYTES` | 8M | eager send area per rank; the largest two-copy message is this minus 64 bytes |
//! | `TMX_SHMEM_CMA` | `auto` | single copy via `process_vm_readv/writev`: `auto` (probe), `on` (fail if not permitted), `off` |
//! | `TMX_SHMEM_PIPELINE_MIN` | 128K | messages larger than this that are not sent by CMA go as consecutive chunks through the eager area, each published as soon as it is copied, so that the receiver copies one chunk while the sender copies the next (`off`: never) |
//! | `TMX_SHMEM_PIPELINE_CHUNK` | 128K | chunk size of pipelined messages (and of fragments of messages larger than the eager area; at most a quarter of the eager area) |
//! | `TMX_SHMEM_CMA_THRESHOLD` | 8K | messages larger than this use CMA single copy when it is available (with split copies from `TMX_SHMEM_CMA_SPLIT`) |
//! | `TMX_SHMEM_CMA_SPLIT` | 32K | CMA messages of at least this size are copied by both ranks at once: the receiver offers the second half of its buffer to the sender, which `process_vm_writev`s it while the receiver reads the first half; if the sender has not claimed the offer when the receiver is done, the receiver withdraws it and reads the rest itself (`off`: the receiver reads everything) |
//! | `TMX_SHMEM_PREPOST` | `on` | the MP_Lite prepost protocol: a blocked exact-source receive is advertised to its sender, which CMA-writes a matching message straight into it (needs CMA; `off` disables it) |
//! | `TMX_SHMEM_DEFER_RECV` | `on` | a nonblocking exact-source receive that finds nothing (its source's ring empty, nothing posted or queued, never advertised) waits outside the matcher; progress later takes its message straight from the ring, or posts it (and every later deferred one, in order) the moment anything else could match first (`off`: post at once) |
//! | `TMX_SHMEM_PREPOST_MIN` | 8M | smallest message (and receive buffer) that uses the prepost-direct path; smaller ones are buffered as usual |
//! | `TMX_SHMEM_INLINE_EXT` | 512 | largest message sent inline in the header ring: up to 40 bytes ride in the header slot, larger ones up to this size continue in the following slots (60 bytes each, at most a quarter of the ring); `40` turns the continuation off. 512 since session 31 (128 before): `bw` 200–512 B 1.16–1.67× with `bibw` and latency unchanged (crate README, "Inline up to 512 B") |
//! | `TMX_SHMEM_INLINE_REPLY` | 1K | largest message sent inline in the header ring as a reply: a message above `TMX_SHMEM_INLINE_EXT` goes inline instead of through an eager block when the sender alternates with its destination (it took a message from it since its previous such send, and only one send went between the two takes) and has at most one eager block in flight, the request-reply pattern of a ping-pong; capped to half the ring; `40` (or at most `TMX_SHMEM_INLINE_EXT`) turns it off |
//! | `TMX_SHMEM_CMA_REPLY` | 6K | a reply (as for `TMX_SHMEM_INLINE_REPLY`) larger than this goes by CMA even at or below `TMX_SHMEM_CMA_THRESHOLD`, when CMA is available: in a ping-pong one copy beats two from about 6.5 KiB, while a window of sends is faster through eager blocks; `off`: never |
//! | `TMX_SHMEM_CMA_DUPLEX` | 6K | a message larger than this goes by CMA even at or below `TMX_SHMEM_CMA_THRESHOLD`, when CMA is available and messages flow both ways between the two ranks (over the sender's recent traffic with that peer, it took at least half as many messages from it as it sent): the receiver reads it in one copy, with the others it matches in the same progress pass, instead of both cores copying it while they also copy the other way's messages; a one-way stream keeps the eager blocks; `off`: never |
//! | `TMX_SHMEM_CMA_CALIBRATE` | `on` | at init, local ranks 0 and 1 time a short ping-pong of 8, 16, 32 and 64 KiB messages through the eager area and by CMA (about 10 ms) and, where the two-copy path wins by more than 10%, raise `TMX_SHMEM_CMA_THRESHOLD`, `TMX_SHMEM_CMA_REPLY` and `TMX_SHMEM_CMA_DUPLEX` to the largest such size on every local rank (never lowered): on one VM CMA won a ping-pong from 6.5 KiB, on another the eager path won up to 64 KiB in some runs and lost from 16 KiB in others. Skipped when CMA is unavailable, on one local rank, or with more local ranks than CPUs; `off`, or setting any of those three variables, keeps the static defaults (`Config::default()` has it off) |
//! | `TMX_SHMEM_INLINE_CALIBRATE` | `on` | when [`crate::Endpoint::calibrate_inline_reply`] runs (the ADI calls it at init), local ranks 0 and 1 time a ping-pong of 256 B – 1 KiB replies inline against eager blocks (about 3 ms) and lower `TMX_SHMEM_INLINE_REPLY` below the first size at which the eager blocks won by more than 5%, on every local rank (never raised): inline won to 1.1 KiB on one VM, eager blocks from 512 B on another. Skipped on one local rank or with more local ranks than CPUs; `off`, or setting `TMX_SHMEM_INLINE_REPLY`, keeps the static cap (`Config::default()` has it off) |
//! | `TMX_SHMEM_CMA_BATCH` | `on` | a progress pass reads the CMA messages of one sender that matched posted receives with buffers of their own in one `process_vm_readv` call (up to 64); `off`: one call per message |
//! | `TMX_SHMEM_MOVSB_MIN` | 1K | smallest eager payload the sender copies into its block with `rep movsb` (x86_64 CPUs with ERMS; `memcpy` below it and elsewhere), which writes the lines the receiver last read without reading them first; `off`: always `memcpy` |
//! | `TMX_SHMEM_ATTACH_TIMEOUT_MS` | 30000 | how long init waits for every local rank to attach |
//! | `TMX_SHMEM_LIVENESS_MS` | 20 | how often a blocked rank checks that the peers it waits for are alive |
//!
//! Every local rank must use the same ring, prepost and heap sizes: the
//! creator records them in the segment header and attachers check them
//! ([`crate::Error::LayoutMismatch`]).

use crate::error::{Error, Result};
use std::time::Duration;

/// CMA policy (`TMX_SHMEM_CMA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaMode {
    /// Probe at init; use it if permitted, otherwise fall back silently (logged).
    Auto,
    /// Require it: init fails with [`Error::CmaUnavailable`] if not permitted.
    On,
    /// Never use it.
    Off,
}

/// [`Config::ring_slots`] (and [`Config::publish_batch`]) value that
/// means "chosen by the node's size" ([`Config::resolved`]).
pub const AUTO: u32 = 0;

/// Local ranks up to which [`AUTO`] ring slots are
/// [`RING_SLOTS_SMALL_NODE`]; beyond, [`RING_SLOTS_LARGE_NODE`].
pub const SMALL_NODE_RANKS: u32 = 64;
/// [`AUTO`] ring slots on a node of at most [`SMALL_NODE_RANKS`] ranks:
/// room for a window of 64 messages of up to 100 bytes (a header slot and a
/// continuation slot each, see `TMX_SHMEM_INLINE_EXT`), as OSU's
/// benchmarks and halo exchanges post them. With 64 slots such a window
/// overflows: in a 64-byte bi-directional window 1 send in 9 went through
/// an eager block and 1 in 4 re-read the consumer index. Measured: 64-byte
/// bandwidth and bi-bandwidth 4–6% higher than with 64 slots, other sizes
/// unchanged (shmem-onesided README, "Ring size").
pub const RING_SLOTS_SMALL_NODE: u32 = 128;
/// [`AUTO`] ring slots on a larger node, where rings are one per ordered
/// pair of ranks (`n × (n − 1)` of them) and the memory matters more.
pub const RING_SLOTS_LARGE_NODE: u32 = 64;

/// Transport parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Header ring slots per ordered pair (a power of two), or [`AUTO`]
    /// (the default): [`RING_SLOTS_SMALL_NODE`] on a node of at most
    /// [`SMALL_NODE_RANKS`] local ranks, [`RING_SLOTS_LARGE_NODE`] beyond.
    /// [`crate::Node::init`] resolves it ([`Config::resolved`]).
    pub ring_slots: u32,
    /// Consumer index publication batch, or [`AUTO`] (the default): half
    /// the ring.
    pub publish_batch: u32,
    /// Prepost ring slots per ordered pair.
    pub prepost_slots: u32,
    /// Symmetric heap bytes per rank.
    pub heap_bytes: u64,
    /// Eager send area bytes per rank.
    pub eager_bytes: u64,
    /// CMA policy.
    pub cma: CmaMode,
    /// Messages above this size use CMA when available.
    pub cma_threshold: u64,
    /// Smallest CMA message whose copy the two ranks share
    /// (`TMX_SHMEM_CMA_SPLIT`; `u64::MAX`: never): the receiver offers the
    /// second half of its buffer to the sender, which writes it while the
    /// receiver reads the first half ([`crate::Endpoint`], "split copies").
    pub cma_split: u64,
    /// Messages above this size that are not sent by CMA are pipelined:
    /// sent as consecutive chunks through the eager area, each published as
    /// soon as it is copied (`TMX_SHMEM_PIPELINE_MIN`; `u64::MAX`: never).
    pub pipeline_min: u64,
    /// Chunk size of pipelined and fragmented messages
    /// (`TMX_SHMEM_PIPELINE_CHUNK`; at most a quarter of the eager area is
    /// used).
    pub pipeline_chunk: u64,
    /// The MP_Lite prepost protocol (`TMX_SHMEM_PREPOST`): receives may be
    /// advertised to their sender, which then writes straight into them.
    pub prepost: bool,
    /// Deferred receives (`TMX_SHMEM_DEFER_RECV`): see
    /// [`crate::Endpoint::irecv_or_done`].
    pub defer_recv: bool,
    /// Smallest message (and receive buffer) for the prepost-direct path
    /// (`TMX_SHMEM_PREPOST_MIN`): one CMA write costs more than an eager
    /// copy below a few MiB on the project's VM.
    pub prepost_min: u64,
    /// Largest message sent inline in the header ring
    /// (`TMX_SHMEM_INLINE_EXT`): beyond the 40 bytes of the header slot the
    /// payload continues in the following slots. Capped at run time to a
    /// quarter of the ring; 40 or less turns the continuation off.
    pub inline_ext: u64,
    /// Largest message sent inline in the header ring as a *reply*
    /// (`TMX_SHMEM_INLINE_REPLY`): a message larger than `inline_ext` goes
    /// inline (not through an eager block) when it is a reply: the sender
    /// took a message from the destination since its previous such send,
    /// strictly alternating, with at most one eager block in flight (the
    /// request-reply pattern of a ping-pong). Capped at run time to half
    /// the ring; `inline_ext` or less turns it off.
    pub inline_reply: u64,
    /// Smallest eager payload the sender copies into its block with `rep
    /// movsb` (`TMX_SHMEM_MOVSB_MIN`; `u64::MAX`: never), on x86_64 CPUs
    /// with ERMS; `memcpy` below it and elsewhere.
    pub movsb_min: u64,
    /// Replies larger than this go by CMA even at or below
    /// `cma_threshold` (`TMX_SHMEM_CMA_REPLY`; `u64::MAX`: off): in a
    /// ping-pong the single copy beats two from about 6.5 KiB.
    pub cma_reply: u64,
    /// Whether a progress pass reads the CMA messages of one sender that
    /// it matched to posted receives in one `process_vm_readv` call
    /// (`TMX_SHMEM_CMA_BATCH`, default on).
    pub cma_batch: bool,
    /// Messages larger than this go by CMA even at or below
    /// `cma_threshold` when their sender has a receive outstanding
    /// (`TMX_SHMEM_CMA_DUPLEX`; `u64::MAX`: off): its core is copying
    /// messages in as well, and the single copy, left to the receiver,
    /// halves what both cores copy.
    pub cma_duplex: u64,
    /// Whether [`crate::Node::init`] measures eager against CMA between
    /// local ranks 0 and 1 and raises `cma_threshold`, `cma_reply` and
    /// `cma_duplex` to the largest measured size at which the two-copy
    /// path still won (`TMX_SHMEM_CMA_CALIBRATE`). Off in
    /// `Config::default()`; [`Config::from_env`] turns it on unless the
    /// variable says `off` or any of `TMX_SHMEM_CMA_THRESHOLD`,
    /// `TMX_SHMEM_CMA_REPLY`, `TMX_SHMEM_CMA_DUPLEX` is set (an explicit
    /// setting is used as given). See [`crate::Calibration`].
    pub cma_calibrate: bool,
    /// Whether [`crate::Endpoint::calibrate_inline_reply`] measures, between
    /// local ranks 0 and 1, a ping-pong of 256 B – 1 KiB messages sent
    /// inline against the same messages through eager blocks, and lowers
    /// `inline_reply` below the first measured size at which the eager
    /// blocks won (`TMX_SHMEM_INLINE_CALIBRATE`). Off in
    /// `Config::default()`; [`Config::from_env`] turns it on unless the
    /// variable says `off` or `TMX_SHMEM_INLINE_REPLY` is set. See
    /// [`crate::ReplyCalibration`].
    pub inline_calibrate: bool,
    /// Attach timeout.
    pub attach_timeout: Duration,
    /// Peer liveness check interval while blocked.
    pub liveness_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            ring_slots: AUTO,
            publish_batch: AUTO,
            prepost_slots: 16,
            heap_bytes: 16 << 20,
            eager_bytes: 8 << 20,
            cma: CmaMode::Auto,
            cma_threshold: 8 << 10,
            cma_split: 32 << 10,
            pipeline_min: 128 << 10,
            pipeline_chunk: 128 << 10,
            prepost: true,
            defer_recv: true,
            prepost_min: 8 << 20,
            inline_ext: 512,
            inline_reply: 1 << 10,
            movsb_min: 1 << 10,
            cma_reply: 6 << 10,
            cma_batch: true,
            cma_duplex: 6 << 10,
            cma_calibrate: false,
            inline_calibrate: false,
            attach_timeout: Duration::from_secs(30),
            liveness_interval: Duration::from_millis(20),
        }
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

impl Config {
    /// This configuration with its [`AUTO`] sizes chosen for a node of
    /// `local_size` ranks: the ring slots by the node's size (see
    /// [`Config::ring_slots`]), the publication batch half the ring (a
    /// batch larger than the ring lowered to it). Explicit sizes are kept.
    pub fn resolved(&self, local_size: u32) -> Config {
        let mut c = self.clone();
        if c.ring_slots == AUTO {
            c.ring_slots = if local_size <= SMALL_NODE_RANKS {
                RING_SLOTS_SMALL_NODE
            } else {
                RING_SLOTS_LARGE_NODE
            };
        }
        c.publish_batch = match c.publish_batch {
            AUTO => (c.ring_slots / 2).max(1),
            b => b.min(c.ring_slots),
        };
        c
    }

    /// Reads the `TMX_SHMEM_*` variables of this process.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`Config::from_env`] with a custom lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut c = Config::default();
        let bad = |var: &'static str, value: &str, reason: &'static str| Error::Config {
            var,
            value: value.to_owned(),
            reason,
        };
        let pow2 = |var: &'static str| -> Result<Option<u32>> {
            let Some(v) = get(var) else { return Ok(None) };
            match v.trim().parse::<u32>() {
                Ok(n) if n.is_power_of_two() && n <= 65536 => Ok(Some(n)),
                _ => Err(bad(var, &v, "a power of two from 1 to 65536")),
            }
        };
        if get("TMX_SHMEM_RING_SLOTS").is_some_and(|v| v.trim().eq_ignore_ascii_case("auto")) {
            c.ring_slots = AUTO;
        } else if let Some(n) = pow2("TMX_SHMEM_RING_SLOTS")? {
            c.ring_slots = n;
        }
        if let Some(v) = get("TMX_SHMEM_PUBLISH_BATCH") {
            // With `auto` slots the ring has at least 64.
            let most = if c.ring_slots == AUTO {
                65536
            } else {
                c.ring_slots
            };
            match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 && n <= most => c.publish_batch = n,
                _ => {
                    return Err(bad(
                        "TMX_SHMEM_PUBLISH_BATCH",
                        &v,
                        "an integer from 1 to TMX_SHMEM_RING_SLOTS",
                    ))
                }
            }
        }
        if let Some(n) = pow2("TMX_SHMEM_PREPOST_SLOTS")? {
            c.prepost_slots = n;
        }
        for (var, field) in [
            ("TMX_SHMEM_HEAP_BYTES", &mut c.heap_bytes),
            ("TMX_SHMEM_EAGER_BYTES", &mut c.eager_bytes),
        ] {
            if let Some(v) = get(var) {
                match parse_size(&v) {
                    Some(n) if (4096..=(1u64 << 40)).contains(&n) => *field = n,
                    _ => {
                        return Err(bad(
                            var,
                            &v,
                            "a size from 4K to 1024G (bytes, or with suffix K, M or G)",
                        ))
                    }
                }
            }
        }
        if let Some(v) = get("TMX_SHMEM_CMA") {
            c.cma = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => CmaMode::Auto,
                "on" | "1" | "yes" => CmaMode::On,
                "off" | "0" | "no" => CmaMode::Off,
                _ => return Err(bad("TMX_SHMEM_CMA", &v, "one of auto, on, off")),
            };
        }
        if let Some(v) = get("TMX_SHMEM_CMA_THRESHOLD") {
            c.cma_threshold = parse_size(&v).ok_or_else(|| {
                bad(
                    "TMX_SHMEM_CMA_THRESHOLD",
                    &v,
                    "a size (bytes, or with suffix K, M or G)",
                )
            })?;
        }
        // A size, or `off` (never: u64::MAX).
        let size_or_off = |var: &'static str, v: &str| {
            if v.trim().eq_ignore_ascii_case("off") {
                Ok(u64::MAX)
            } else {
                parse_size(v)
                    .ok_or_else(|| bad(var, v, "a size (bytes, or with suffix K, M or G), or off"))
            }
        };
        if let Some(v) = get("TMX_SHMEM_CMA_SPLIT") {
            c.cma_split = size_or_off("TMX_SHMEM_CMA_SPLIT", &v)?;
        }
        if let Some(v) = get("TMX_SHMEM_CMA_REPLY") {
            c.cma_reply = size_or_off("TMX_SHMEM_CMA_REPLY", &v)?;
        }
        if let Some(v) = get("TMX_SHMEM_CMA_DUPLEX") {
            c.cma_duplex = size_or_off("TMX_SHMEM_CMA_DUPLEX", &v)?;
        }
        let explicit = [
            "TMX_SHMEM_CMA_THRESHOLD",
            "TMX_SHMEM_CMA_REPLY",
            "TMX_SHMEM_CMA_DUPLEX",
        ]
        .iter()
        .any(|var| get(var).is_some());
        c.cma_calibrate = match get("TMX_SHMEM_CMA_CALIBRATE") {
            None => !explicit,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "yes" | "auto" => !explicit,
                "off" | "0" | "no" => false,
                _ => return Err(bad("TMX_SHMEM_CMA_CALIBRATE", &v, "one of on, off")),
            },
        };
        c.inline_calibrate = match get("TMX_SHMEM_INLINE_CALIBRATE") {
            None => get("TMX_SHMEM_INLINE_REPLY").is_none(),
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "yes" | "auto" => get("TMX_SHMEM_INLINE_REPLY").is_none(),
                "off" | "0" | "no" => false,
                _ => return Err(bad("TMX_SHMEM_INLINE_CALIBRATE", &v, "one of on, off")),
            },
        };
        if let Some(v) = get("TMX_SHMEM_MOVSB_MIN") {
            c.movsb_min = size_or_off("TMX_SHMEM_MOVSB_MIN", &v)?;
        }
        if let Some(v) = get("TMX_SHMEM_PIPELINE_MIN") {
            c.pipeline_min = size_or_off("TMX_SHMEM_PIPELINE_MIN", &v)?;
        }
        if let Some(v) = get("TMX_SHMEM_PIPELINE_CHUNK") {
            match parse_size(&v) {
                Some(n) if (4096..=(1u64 << 30)).contains(&n) => c.pipeline_chunk = n,
                _ => {
                    return Err(bad(
                        "TMX_SHMEM_PIPELINE_CHUNK",
                        &v,
                        "a size from 4K to 1G (bytes, or with suffix K, M or G)",
                    ))
                }
            }
        }
        if let Some(v) = get("TMX_SHMEM_PREPOST") {
            c.prepost = match v.trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "yes" => true,
                "off" | "0" | "no" => false,
                _ => return Err(bad("TMX_SHMEM_PREPOST", &v, "on or off")),
            };
        }
        if let Some(v) = get("TMX_SHMEM_DEFER_RECV") {
            c.defer_recv = match v.trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "yes" => true,
                "off" | "0" | "no" => false,
                _ => return Err(bad("TMX_SHMEM_DEFER_RECV", &v, "on or off")),
            };
        }
        if let Some(v) = get("TMX_SHMEM_CMA_BATCH") {
            c.cma_batch = match v.trim().to_ascii_lowercase().as_str() {
                "on" | "1" | "yes" => true,
                "off" | "0" | "no" => false,
                _ => return Err(bad("TMX_SHMEM_CMA_BATCH", &v, "on or off")),
            };
        }
        if let Some(v) = get("TMX_SHMEM_PREPOST_MIN") {
            c.prepost_min = parse_size(&v).ok_or_else(|| {
                bad(
                    "TMX_SHMEM_PREPOST_MIN",
                    &v,
                    "a size (bytes, or with suffix K, M or G)",
                )
            })?;
        }
        if let Some(v) = get("TMX_SHMEM_INLINE_EXT") {
            c.inline_ext = parse_size(&v)
                .filter(|n| *n <= 1 << 20)
                .ok_or_else(|| bad("TMX_SHMEM_INLINE_EXT", &v, "a size in bytes, at most 1M"))?;
        }
        if let Some(v) = get("TMX_SHMEM_INLINE_REPLY") {
            c.inline_reply = parse_size(&v)
                .filter(|n| *n <= 1 << 20)
                .ok_or_else(|| bad("TMX_SHMEM_INLINE_REPLY", &v, "a size in bytes, at most 1M"))?;
        }
        let millis = |var: &'static str, lo: u64| -> Result<Option<Duration>> {
            let Some(v) = get(var) else { return Ok(None) };
            match v.trim().parse::<u64>() {
                Ok(n) if n >= lo => Ok(Some(Duration::from_millis(n))),
                _ => Err(bad(var, &v, "a whole number of milliseconds (at least 1)")),
            }
        };
        if let Some(d) = millis("TMX_SHMEM_ATTACH_TIMEOUT_MS", 1)? {
            c.attach_timeout = d;
        }
        if let Some(d) = millis("TMX_SHMEM_LIVENESS_MS", 1)? {
            c.liveness_interval = d;
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Config> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Config::from_lookup(move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone()))
    }

    #[test]
    fn defaults() {
        let c = with(&[]).unwrap();
        assert_eq!(
            c,
            Config {
                cma_calibrate: true,
                inline_calibrate: true,
                ..Config::default()
            }
        );
        let r = c.resolved(2);
        assert_eq!(r.publish_batch, r.ring_slots / 2);
    }

    #[test]
    fn parses_values() {
        let c = with(&[
            ("TMX_SHMEM_RING_SLOTS", "8"),
            ("TMX_SHMEM_PUBLISH_BATCH", "3"),
            ("TMX_SHMEM_PREPOST_SLOTS", "4"),
            ("TMX_SHMEM_HEAP_BYTES", "2M"),
            ("TMX_SHMEM_EAGER_BYTES", "8192"),
            ("TMX_SHMEM_CMA", "off"),
            ("TMX_SHMEM_CMA_THRESHOLD", "64k"),
            ("TMX_SHMEM_PREPOST", "off"),
            ("TMX_SHMEM_DEFER_RECV", "off"),
            ("TMX_SHMEM_PREPOST_MIN", "1K"),
            ("TMX_SHMEM_PIPELINE_MIN", "256K"),
            ("TMX_SHMEM_PIPELINE_CHUNK", "64K"),
            ("TMX_SHMEM_ATTACH_TIMEOUT_MS", "500"),
            ("TMX_SHMEM_INLINE_EXT", "1K"),
        ])
        .unwrap();
        assert_eq!((c.pipeline_min, c.pipeline_chunk), (256 << 10, 64 << 10));
        assert_eq!(
            with(&[("TMX_SHMEM_PIPELINE_MIN", "off")])
                .unwrap()
                .pipeline_min,
            u64::MAX
        );
        assert_eq!((c.prepost, c.prepost_min), (false, 1024));
        assert!(!c.defer_recv);
        assert_eq!(
            with(&[("TMX_SHMEM_CMA_SPLIT", "64K")]).unwrap().cma_split,
            64 << 10
        );
        assert_eq!(
            with(&[("TMX_SHMEM_CMA_SPLIT", "OFF")]).unwrap().cma_split,
            u64::MAX
        );
        assert!(with(&[("TMX_SHMEM_CMA_SPLIT", "half")]).is_err());
        assert!(Config::default().defer_recv);
        assert_eq!(c.inline_ext, 1024);
        assert_eq!(Config::default().inline_reply, 1024);
        assert_eq!(Config::default().inline_ext, 512);
        assert_eq!(Config::default().movsb_min, 1024);
        assert_eq!(Config::default().cma_reply, 6144);
        assert_eq!(
            with(&[("TMX_SHMEM_CMA_REPLY", "off")]).unwrap().cma_reply,
            u64::MAX
        );
        assert!(with(&[("TMX_SHMEM_CMA_REPLY", "-1")]).is_err());
        assert_eq!(
            with(&[("TMX_SHMEM_MOVSB_MIN", "2K")]).unwrap().movsb_min,
            2048
        );
        assert_eq!(
            with(&[("TMX_SHMEM_MOVSB_MIN", "off")]).unwrap().movsb_min,
            u64::MAX
        );
        assert!(with(&[("TMX_SHMEM_MOVSB_MIN", "fast")]).is_err());
        assert_eq!(
            with(&[("TMX_SHMEM_INLINE_REPLY", "512")])
                .unwrap()
                .inline_reply,
            512
        );
        assert!(with(&[("TMX_SHMEM_INLINE_REPLY", "2G")]).is_err());
        assert!(with(&[("TMX_SHMEM_INLINE_REPLY", "big")]).is_err());
        assert_eq!(
            (c.ring_slots, c.publish_batch, c.prepost_slots, c.heap_bytes),
            (8, 3, 4, 2 << 20)
        );
        assert_eq!((c.cma, c.cma_threshold), (CmaMode::Off, 64 << 10));
        assert_eq!(c.eager_bytes, 8192);
        assert_eq!(c.attach_timeout, Duration::from_millis(500));
        // batch defaults to half the ring
        assert_eq!(
            with(&[("TMX_SHMEM_RING_SLOTS", "1")])
                .unwrap()
                .resolved(2)
                .publish_batch,
            1
        );
        // a batch larger than an explicit ring is refused
        assert!(matches!(
            with(&[
                ("TMX_SHMEM_RING_SLOTS", "64"),
                ("TMX_SHMEM_PUBLISH_BATCH", "65")
            ]),
            Err(Error::Config {
                var: "TMX_SHMEM_PUBLISH_BATCH",
                ..
            })
        ));
    }

    #[test]
    fn cma_calibrate_on_unless_set() {
        assert!(!Config::default().cma_calibrate);
        assert!(with(&[]).unwrap().cma_calibrate);
        assert!(
            with(&[("TMX_SHMEM_CMA_CALIBRATE", "On")])
                .unwrap()
                .cma_calibrate
        );
        assert!(
            !with(&[("TMX_SHMEM_CMA_CALIBRATE", "off")])
                .unwrap()
                .cma_calibrate
        );
        for var in [
            "TMX_SHMEM_CMA_THRESHOLD",
            "TMX_SHMEM_CMA_REPLY",
            "TMX_SHMEM_CMA_DUPLEX",
        ] {
            let c = with(&[(var, "16K")]).unwrap();
            assert!(
                !c.cma_calibrate,
                "{var} set explicitly must keep the static thresholds"
            );
        }
        assert!(matches!(
            with(&[("TMX_SHMEM_CMA_CALIBRATE", "maybe")]),
            Err(Error::Config {
                var: "TMX_SHMEM_CMA_CALIBRATE",
                ..
            })
        ));
    }

    #[test]
    fn inline_calibrate_on_unless_set() {
        assert!(!Config::default().inline_calibrate);
        assert!(with(&[]).unwrap().inline_calibrate);
        assert!(
            with(&[("TMX_SHMEM_INLINE_CALIBRATE", "yes")])
                .unwrap()
                .inline_calibrate
        );
        assert!(
            !with(&[("TMX_SHMEM_INLINE_CALIBRATE", "Off")])
                .unwrap()
                .inline_calibrate
        );
        let c = with(&[("TMX_SHMEM_INLINE_REPLY", "512")]).unwrap();
        assert!(!c.inline_calibrate, "an explicit cap is used as given");
        assert_eq!(c.inline_reply, 512);
        assert!(matches!(
            with(&[("TMX_SHMEM_INLINE_CALIBRATE", "sometimes")]),
            Err(Error::Config {
                var: "TMX_SHMEM_INLINE_CALIBRATE",
                ..
            })
        ));
    }

    #[test]
    fn cma_duplex_and_batch() {
        let d = Config::default();
        assert_eq!((d.cma_duplex, d.cma_batch), (6144, true));
        assert_eq!(
            with(&[("TMX_SHMEM_CMA_DUPLEX", "off")]).unwrap().cma_duplex,
            u64::MAX
        );
        assert_eq!(
            with(&[("TMX_SHMEM_CMA_DUPLEX", "4K")]).unwrap().cma_duplex,
            4096
        );
        assert!(with(&[("TMX_SHMEM_CMA_DUPLEX", "lots")]).is_err());
        assert!(!with(&[("TMX_SHMEM_CMA_BATCH", "off")]).unwrap().cma_batch);
        assert!(with(&[("TMX_SHMEM_CMA_BATCH", "On")]).unwrap().cma_batch);
        assert!(matches!(
            with(&[("TMX_SHMEM_CMA_BATCH", "sometimes")]),
            Err(Error::Config {
                var: "TMX_SHMEM_CMA_BATCH",
                ..
            })
        ));
    }

    #[test]
    fn auto_ring_slots_follow_the_node_size() {
        let c = with(&[]).unwrap();
        assert_eq!((c.ring_slots, c.publish_batch), (AUTO, AUTO));
        assert_eq!(with(&[("TMX_SHMEM_RING_SLOTS", "Auto")]).unwrap(), c);
        let small = c.resolved(SMALL_NODE_RANKS);
        assert_eq!(
            (small.ring_slots, small.publish_batch),
            (RING_SLOTS_SMALL_NODE, RING_SLOTS_SMALL_NODE / 2)
        );
        assert_eq!(c.resolved(1).ring_slots, RING_SLOTS_SMALL_NODE);
        let large = c.resolved(SMALL_NODE_RANKS + 1);
        assert_eq!(
            (large.ring_slots, large.publish_batch),
            (RING_SLOTS_LARGE_NODE, RING_SLOTS_LARGE_NODE / 2)
        );
        // explicit sizes are kept whatever the node's size
        let e = with(&[
            ("TMX_SHMEM_RING_SLOTS", "16"),
            ("TMX_SHMEM_PUBLISH_BATCH", "3"),
        ])
        .unwrap();
        assert_eq!(e.resolved(1000), e);
        // with auto slots a batch beyond the chosen ring is lowered to it
        let b = with(&[("TMX_SHMEM_PUBLISH_BATCH", "1000")]).unwrap();
        assert_eq!(b.resolved(2).publish_batch, RING_SLOTS_SMALL_NODE);
        assert_eq!(b.resolved(100).publish_batch, RING_SLOTS_LARGE_NODE);
        assert_eq!(
            with(&[("TMX_SHMEM_PUBLISH_BATCH", "5")])
                .unwrap()
                .resolved(2)
                .publish_batch,
            5
        );
        // resolving twice changes nothing
        assert_eq!(small.resolved(1000), small);
    }

    #[test]
    fn typed_errors() {
        for (k, v) in [
            ("TMX_SHMEM_RING_SLOTS", "6"),
            ("TMX_SHMEM_RING_SLOTS", "lots"),
            ("TMX_SHMEM_PUBLISH_BATCH", "0"),
            ("TMX_SHMEM_PUBLISH_BATCH", "65537"),
            ("TMX_SHMEM_HEAP_BYTES", "12"),
            ("TMX_SHMEM_HEAP_BYTES", "99999999999G"),
            ("TMX_SHMEM_EAGER_BYTES", "1K"),
            ("TMX_SHMEM_CMA", "maybe"),
            ("TMX_SHMEM_PREPOST", "sometimes"),
            ("TMX_SHMEM_DEFER_RECV", "later"),
            ("TMX_SHMEM_PREPOST_MIN", "big"),
            ("TMX_SHMEM_INLINE_EXT", "2M"),
            ("TMX_SHMEM_INLINE_EXT", "some"),
            ("TMX_SHMEM_PIPELINE_MIN", "soon"),
            ("TMX_SHMEM_PIPELINE_CHUNK", "1K"),
            ("TMX_SHMEM_PIPELINE_CHUNK", "2G"),
            ("TMX_SHMEM_LIVENESS_MS", "0"),
        ] {
            match with(&[(k, v)]) {
                Err(Error::Config { var, value, .. }) => assert_eq!((var, value.as_str()), (k, v)),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }
}
