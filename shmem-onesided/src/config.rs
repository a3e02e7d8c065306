//! Configuration from `TMX_SHMEM_*` environment variables.
//!
//! A user sets resources, the CMA policy and timeouts with variables of
//! their own; the protocol's cut-over points and feature switches are keys
//! of one variable, `TMX_SHMEM_TUNE`, because their defaults are measured
//! (or calibrated at init) and changing them is an experiment.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TMX_SHMEM_HEAP_BYTES` | `16M` | symmetric heap per rank (bytes; suffix `K`, `M`, `G`; 4K to 1024G) |
//! | `TMX_SHMEM_EAGER_BYTES` | `8M` | eager send area per rank; the largest two-copy message is this minus 64 bytes (4K to 1024G) |
//! | `TMX_SHMEM_RING_SLOTS` | `auto` | header ring slots per ordered pair of ranks: a power of two from 1 to 65536, or `auto` (128 up to 64 local ranks, 64 beyond); 64 bytes each |
//! | `TMX_SHMEM_CMA` | `auto` | single copy by `process_vm_readv`/`writev`: `auto` (probe at init, fall back if not permitted), `on` (fail if not permitted), `off` |
//! | `TMX_SHMEM_ATTACH_TIMEOUT_MS` | `30000` | how long init waits for every local rank to attach |
//! | `TMX_SHMEM_LIVENESS_MS` | `20` | how often a blocked rank checks that the peers it waits for are alive |
//! | `TMX_SHMEM_CALIBRATE_MS` | `2000` | bound on the init-time calibrations ([`Config::calibrate_deadline`]); past it the static thresholds are kept |
//! | `TMX_SHMEM_TUNE` | empty | protocol tuning, `key=value` pairs separated by commas (keys below) |
//!
//! `TMX_SHMEM_TUNE` keys are the names of [`Config`]'s fields. Sizes are
//! bytes (suffix `K`, `M`, `G` allowed); `off` on a size means "never";
//! switches are `on` or `off`. Example:
//! `TMX_SHMEM_TUNE=cma_threshold=64K,defer_recv=off`.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `cma_threshold` | `8K`, calibrated | messages above this size go by CMA when it is available |
//! | `cma_split` | `32K` | CMA messages of at least this size are copied by both ranks (the receiver offers the second half to an idle sender); `off`: the receiver reads everything |
//! | `cma_reply` | `6K`, calibrated | a reply (the sender alternates with its destination) above this goes by CMA even below `cma_threshold`; `off`: never |
//! | `cma_duplex` | `6K`, calibrated | a message above this goes by CMA even below `cma_threshold` while messages flow both ways; `off`: never |
//! | `cma_batch` | `on` | a progress pass reads the CMA messages of one sender it matched in one `process_vm_readv` call |
//! | `cma_calibrate` | `on` | at init, local ranks 0 and 1 time eager blocks against CMA at 8–64 KiB (about 10 ms) and raise the three CMA cut-overs where eager blocks won; off if any of them is given |
//! | `inline_ext` | `512` | largest message sent inline in the header ring (40 bytes in the slot, the rest in continuation slots; at most a quarter of the ring; `40`: no continuation; at most 1M) |
//! | `inline_reply` | `1K`, calibrated | largest reply sent inline (at most half the ring; at most 1M) |
//! | `inline_calibrate` | `on` | when the endpoint is built, local ranks 0 and 1 time inline replies against eager blocks at 256 B – 1 KiB (about 3 ms) and lower `inline_reply` where eager blocks won; off if `inline_reply` is given |
//! | `pipeline_min` | `128K` | messages above this that do not go by CMA are sent in chunks through the eager area; `off`: never |
//! | `pipeline_chunk` | `128K` | chunk size of pipelined and fragmented messages (4K to 1G; at most a quarter of the eager area) |
//! | `movsb_min` | `1K` | smallest eager payload copied with `rep movsb` (x86_64 with ERMS); `off`: always `memcpy` |
//! | `prepost` | `on` | the MP_Lite prepost protocol: an exact-source receive is advertised to its sender, which CMA-writes into it |
//! | `prepost_min` | `8M` | smallest message (and receive buffer) that uses the prepost path |
//! | `prepost_slots` | `16` | prepost ring slots per ordered pair (a power of two from 1 to 65536) |
//! | `defer_recv` | `on` | a nonblocking exact-source receive that finds nothing waits outside the matcher until its message comes or another receive could match first |
//! | `publish_batch` | half the ring | the consumer publishes its ring index every this many messages (1 to the ring's slots) |
//!
//! Malformed values are [`Error::Config`] naming the variable (for
//! `TMX_SHMEM_TUNE`, the offending `key=value` item). Variables that older
//! versions read (`TMX_SHMEM_CMA_THRESHOLD` and the other cut-overs, now
//! `TMX_SHMEM_TUNE` keys) are refused with an error that names the key to
//! use instead ([`MOVED`]): a setting is never ignored silently.
//!
//! Every local rank must use the same ring, prepost, heap and eager sizes:
//! the creator records them in the segment header and attachers check them
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
/// continuation slot each, see `TMX_SHMEM_TUNE=inline_ext`), as OSU's
/// benchmarks and halo exchanges post them. With 64 slots such a window
/// overflows: in a 64-byte bi-directional window 1 send in 9 went through
/// an eager block and 1 in 4 re-read the consumer index. Measured: 64-byte
/// bandwidth and bi-bandwidth 4–6% higher than with 64 slots, other sizes
/// unchanged.
pub const RING_SLOTS_SMALL_NODE: u32 = 128;
/// [`AUTO`] ring slots on a larger node, where rings are one per ordered
/// pair of ranks (`n × (n − 1)` of them) and the memory matters more.
pub const RING_SLOTS_LARGE_NODE: u32 = 64;
/// Default of [`Config::calibrate_deadline`]: the bound on the init
/// calibrations, after which every rank keeps the static thresholds.
pub const CALIBRATE_DEADLINE: Duration = Duration::from_secs(2);

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
    /// (`TMX_SHMEM_TUNE=cma_split`; `u64::MAX`: never): the receiver offers the
    /// second half of its buffer to the sender, which writes it while the
    /// receiver reads the first half ([`crate::Endpoint`], "split copies").
    pub cma_split: u64,
    /// Messages above this size that are not sent by CMA are pipelined:
    /// sent as consecutive chunks through the eager area, each published as
    /// soon as it is copied (`TMX_SHMEM_TUNE=pipeline_min`; `u64::MAX`: never).
    pub pipeline_min: u64,
    /// Chunk size of pipelined and fragmented messages
    /// (`TMX_SHMEM_TUNE=pipeline_chunk`; at most a quarter of the eager area is
    /// used).
    pub pipeline_chunk: u64,
    /// The MP_Lite prepost protocol (`TMX_SHMEM_TUNE=prepost`): receives may be
    /// advertised to their sender, which then writes straight into them.
    pub prepost: bool,
    /// Deferred receives (`TMX_SHMEM_TUNE=defer_recv`): see
    /// [`crate::Endpoint::irecv_or_done`].
    pub defer_recv: bool,
    /// Smallest message (and receive buffer) for the prepost-direct path
    /// (`TMX_SHMEM_TUNE=prepost_min`): one CMA write costs more than an eager
    /// copy below a few MiB on the project's VM.
    pub prepost_min: u64,
    /// Largest message sent inline in the header ring
    /// (`TMX_SHMEM_TUNE=inline_ext`): beyond the 40 bytes of the header slot the
    /// payload continues in the following slots. Capped at run time to a
    /// quarter of the ring; 40 or less turns the continuation off.
    pub inline_ext: u64,
    /// Largest message sent inline in the header ring as a *reply*
    /// (`TMX_SHMEM_TUNE=inline_reply`): a message larger than `inline_ext` goes
    /// inline (not through an eager block) when it is a reply: the sender
    /// took a message from the destination since its previous such send,
    /// strictly alternating, with at most one eager block in flight (the
    /// request-reply pattern of a ping-pong). Capped at run time to half
    /// the ring; `inline_ext` or less turns it off.
    pub inline_reply: u64,
    /// Smallest eager payload the sender copies into its block with `rep
    /// movsb` (`TMX_SHMEM_TUNE=movsb_min`; `u64::MAX`: never), on x86_64 CPUs
    /// with ERMS; `memcpy` below it and elsewhere.
    pub movsb_min: u64,
    /// Replies larger than this go by CMA even at or below
    /// `cma_threshold` (`TMX_SHMEM_TUNE=cma_reply`; `u64::MAX`: off): in a
    /// ping-pong the single copy beats two from about 6.5 KiB.
    pub cma_reply: u64,
    /// Whether a progress pass reads the CMA messages of one sender that
    /// it matched to posted receives in one `process_vm_readv` call
    /// (`TMX_SHMEM_TUNE=cma_batch`, default on).
    pub cma_batch: bool,
    /// Messages larger than this go by CMA even at or below
    /// `cma_threshold` when their sender has a receive outstanding
    /// (`TMX_SHMEM_TUNE=cma_duplex`; `u64::MAX`: off): its core is copying
    /// messages in as well, and the single copy, left to the receiver,
    /// halves what both cores copy.
    pub cma_duplex: u64,
    /// Whether [`crate::Node::init`] measures eager against CMA between
    /// local ranks 0 and 1 and raises `cma_threshold`, `cma_reply` and
    /// `cma_duplex` to the largest measured size at which the two-copy
    /// path still won (`TMX_SHMEM_TUNE=cma_calibrate`). Off in
    /// `Config::default()`; [`Config::from_env`] turns it on unless the
    /// key says `off` or any of `cma_threshold`, `cma_reply`, `cma_duplex`
    /// is given (an explicit setting is used as given). See [`crate::Calibration`].
    pub cma_calibrate: bool,
    /// Whether [`crate::Endpoint::calibrate_inline_reply`] measures, between
    /// local ranks 0 and 1, a ping-pong of 256 B – 1 KiB messages sent
    /// inline against the same messages through eager blocks, and lowers
    /// `inline_reply` below the first measured size at which the eager
    /// blocks won (`TMX_SHMEM_TUNE=inline_calibrate`). Off in
    /// `Config::default()`; [`Config::from_env`] turns it on unless the
    /// variable says `off` or `TMX_SHMEM_TUNE=inline_reply` is set. See
    /// [`crate::ReplyCalibration`].
    pub inline_calibrate: bool,
    /// Bound on the CMA calibration at init (default 2 s; about 10 ms is
    /// typical; `TMX_SHMEM_CALIBRATE_MS`); the inline reply calibration is
    /// bounded by half of it.
    /// Past the bound every rank keeps the configured thresholds. Raise it
    /// where ranks are descheduled for long stretches (an oversubscribed
    /// or heavily loaded node) and the calibration should still run.
    pub calibrate_deadline: Duration,
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
            calibrate_deadline: CALIBRATE_DEADLINE,
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

fn parse_switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "yes" | "true" => Some(true),
        "off" | "0" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// The tuning variable: `key=value` pairs separated by commas.
pub const TUNE: &str = "TMX_SHMEM_TUNE";

/// The keys of [`TUNE`], each a field of [`Config`].
pub const TUNE_KEYS: &[&str] = &[
    "cma_threshold",
    "cma_split",
    "cma_reply",
    "cma_duplex",
    "cma_batch",
    "cma_calibrate",
    "inline_ext",
    "inline_reply",
    "inline_calibrate",
    "pipeline_min",
    "pipeline_chunk",
    "movsb_min",
    "prepost",
    "prepost_min",
    "prepost_slots",
    "defer_recv",
    "publish_batch",
];

/// Variables that earlier versions read and this one refuses, each with
/// the error's reason, which names the [`TUNE`] key that replaced it.
pub const MOVED: &[(&str, &str)] = &[
    (
        "TMX_SHMEM_CMA_THRESHOLD",
        "no longer read: set TMX_SHMEM_TUNE=cma_threshold=<value>",
    ),
    (
        "TMX_SHMEM_CMA_SPLIT",
        "no longer read: set TMX_SHMEM_TUNE=cma_split=<value>",
    ),
    (
        "TMX_SHMEM_CMA_REPLY",
        "no longer read: set TMX_SHMEM_TUNE=cma_reply=<value>",
    ),
    (
        "TMX_SHMEM_CMA_DUPLEX",
        "no longer read: set TMX_SHMEM_TUNE=cma_duplex=<value>",
    ),
    (
        "TMX_SHMEM_CMA_BATCH",
        "no longer read: set TMX_SHMEM_TUNE=cma_batch=<on|off>",
    ),
    (
        "TMX_SHMEM_CMA_CALIBRATE",
        "no longer read: set TMX_SHMEM_TUNE=cma_calibrate=<on|off>",
    ),
    (
        "TMX_SHMEM_INLINE_EXT",
        "no longer read: set TMX_SHMEM_TUNE=inline_ext=<value>",
    ),
    (
        "TMX_SHMEM_INLINE_REPLY",
        "no longer read: set TMX_SHMEM_TUNE=inline_reply=<value>",
    ),
    (
        "TMX_SHMEM_INLINE_CALIBRATE",
        "no longer read: set TMX_SHMEM_TUNE=inline_calibrate=<on|off>",
    ),
    (
        "TMX_SHMEM_PIPELINE_MIN",
        "no longer read: set TMX_SHMEM_TUNE=pipeline_min=<value>",
    ),
    (
        "TMX_SHMEM_PIPELINE_CHUNK",
        "no longer read: set TMX_SHMEM_TUNE=pipeline_chunk=<value>",
    ),
    (
        "TMX_SHMEM_MOVSB_MIN",
        "no longer read: set TMX_SHMEM_TUNE=movsb_min=<value>",
    ),
    (
        "TMX_SHMEM_PREPOST",
        "no longer read: set TMX_SHMEM_TUNE=prepost=<on|off>",
    ),
    (
        "TMX_SHMEM_PREPOST_MIN",
        "no longer read: set TMX_SHMEM_TUNE=prepost_min=<value>",
    ),
    (
        "TMX_SHMEM_PREPOST_SLOTS",
        "no longer read: set TMX_SHMEM_TUNE=prepost_slots=<value>",
    ),
    (
        "TMX_SHMEM_DEFER_RECV",
        "no longer read: set TMX_SHMEM_TUNE=defer_recv=<on|off>",
    ),
    (
        "TMX_SHMEM_PUBLISH_BATCH",
        "no longer read: set TMX_SHMEM_TUNE=publish_batch=<value>",
    ),
];

const SIZE: &str = "a size (bytes, or with suffix K, M or G)";
const SIZE_OR_OFF: &str = "a size (bytes, or with suffix K, M or G), or off";
const SWITCH: &str = "on or off";

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

    /// Reads the `TMX_SHMEM_*` variables of this process (see the module
    /// documentation). Unlike [`Config::default`], the two init-time
    /// calibrations are on unless a setting they would change is given.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`Config::from_env`] with a custom lookup (for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let bad = |var: &'static str, value: &str, reason: &'static str| Error::Config {
            var,
            value: value.to_owned(),
            reason,
        };
        for (var, reason) in MOVED {
            if let Some(v) = get(var) {
                return Err(bad(var, &v, reason));
            }
        }
        let mut c = Config {
            cma_calibrate: true,
            inline_calibrate: true,
            ..Config::default()
        };
        if let Some(v) = get("TMX_SHMEM_RING_SLOTS") {
            c.ring_slots = if v.trim().eq_ignore_ascii_case("auto") {
                AUTO
            } else {
                pow2(&v).ok_or_else(|| {
                    bad(
                        "TMX_SHMEM_RING_SLOTS",
                        &v,
                        "a power of two from 1 to 65536, or auto",
                    )
                })?
            };
        }
        for (var, field) in [
            ("TMX_SHMEM_HEAP_BYTES", &mut c.heap_bytes),
            ("TMX_SHMEM_EAGER_BYTES", &mut c.eager_bytes),
        ] {
            if let Some(v) = get(var) {
                *field = parse_size(&v)
                    .filter(|n| (4096..=(1u64 << 40)).contains(n))
                    .ok_or_else(|| {
                        bad(
                            var,
                            &v,
                            "a size from 4K to 1024G (bytes, or with suffix K, M or G)",
                        )
                    })?;
            }
        }
        if let Some(v) = get("TMX_SHMEM_CMA") {
            c.cma = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => CmaMode::Auto,
                "on" | "1" | "yes" | "true" => CmaMode::On,
                "off" | "0" | "no" | "false" => CmaMode::Off,
                _ => return Err(bad("TMX_SHMEM_CMA", &v, "one of auto, on, off")),
            };
        }
        for (var, field) in [
            ("TMX_SHMEM_ATTACH_TIMEOUT_MS", &mut c.attach_timeout),
            ("TMX_SHMEM_LIVENESS_MS", &mut c.liveness_interval),
            ("TMX_SHMEM_CALIBRATE_MS", &mut c.calibrate_deadline),
        ] {
            if let Some(v) = get(var) {
                *field = v
                    .trim()
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(Duration::from_millis)
                    .ok_or_else(|| bad(var, &v, "a whole number of milliseconds (at least 1)"))?;
            }
        }
        let set = match get(TUNE) {
            Some(v) => c.tune(&v)?,
            None => Vec::new(),
        };
        let given = |key: &str| set.contains(&key);
        c.cma_calibrate = c.cma_calibrate
            && !["cma_threshold", "cma_reply", "cma_duplex"]
                .iter()
                .any(|k| given(k));
        c.inline_calibrate = c.inline_calibrate && !given("inline_reply");
        Ok(c)
    }

    /// Applies a [`TUNE`] value to this configuration and returns the keys
    /// it set. An unknown key, a key given twice, an item without `=` or a
    /// malformed value is an [`Error::Config`] whose value is that item.
    fn tune(&mut self, spec: &str) -> Result<Vec<&'static str>> {
        let mut set: Vec<&'static str> = Vec::new();
        for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let bad = |reason: &'static str| Error::Config {
                var: TUNE,
                value: item.to_owned(),
                reason,
            };
            let Some((key, value)) = item.split_once('=') else {
                return Err(bad("expected key=value items separated by commas"));
            };
            let Some(&key) = TUNE_KEYS.iter().find(|k| **k == key.trim()) else {
                return Err(bad(
                    "unknown key; the keys are cma_threshold, cma_split, cma_reply, \
                     cma_duplex, cma_batch, cma_calibrate, inline_ext, inline_reply, \
                     inline_calibrate, pipeline_min, pipeline_chunk, movsb_min, prepost, \
                     prepost_min, prepost_slots, defer_recv, publish_batch",
                ));
            };
            if set.contains(&key) {
                return Err(bad("key given twice"));
            }
            set.push(key);
            let size = || parse_size(value).ok_or_else(|| bad(SIZE));
            let size_or_off = || {
                if value.trim().eq_ignore_ascii_case("off") {
                    Ok(u64::MAX)
                } else {
                    parse_size(value).ok_or_else(|| bad(SIZE_OR_OFF))
                }
            };
            let switch = || parse_switch(value).ok_or_else(|| bad(SWITCH));
            match key {
                "cma_threshold" => self.cma_threshold = size()?,
                "cma_split" => self.cma_split = size_or_off()?,
                "cma_reply" => self.cma_reply = size_or_off()?,
                "cma_duplex" => self.cma_duplex = size_or_off()?,
                "cma_batch" => self.cma_batch = switch()?,
                "cma_calibrate" => self.cma_calibrate = switch()?,
                "inline_ext" | "inline_reply" => {
                    let n = parse_size(value)
                        .filter(|n| *n <= 1 << 20)
                        .ok_or_else(|| bad("a size in bytes, at most 1M"))?;
                    if key == "inline_ext" {
                        self.inline_ext = n;
                    } else {
                        self.inline_reply = n;
                    }
                }
                "inline_calibrate" => self.inline_calibrate = switch()?,
                "pipeline_min" => self.pipeline_min = size_or_off()?,
                "pipeline_chunk" => {
                    self.pipeline_chunk = parse_size(value)
                        .filter(|n| (4096..=(1u64 << 30)).contains(n))
                        .ok_or_else(|| {
                            bad("a size from 4K to 1G (bytes, or with suffix K, M or G)")
                        })?;
                }
                "movsb_min" => self.movsb_min = size_or_off()?,
                "prepost" => self.prepost = switch()?,
                "prepost_min" => self.prepost_min = size()?,
                "prepost_slots" => {
                    self.prepost_slots =
                        pow2(value).ok_or_else(|| bad("a power of two from 1 to 65536"))?;
                }
                "defer_recv" => self.defer_recv = switch()?,
                "publish_batch" => {
                    // With `auto` slots the ring has at least 64; a larger
                    // batch is lowered to the ring by `resolved`.
                    let most = if self.ring_slots == AUTO {
                        65536
                    } else {
                        self.ring_slots
                    };
                    self.publish_batch = value
                        .trim()
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=most).contains(n))
                        .ok_or_else(|| bad("an integer from 1 to TMX_SHMEM_RING_SLOTS"))?;
                }
                _ => return Err(bad("unknown key")),
            }
        }
        Ok(set)
    }
}

fn pow2(v: &str) -> Option<u32> {
    v.trim()
        .parse::<u32>()
        .ok()
        .filter(|n| n.is_power_of_two() && *n <= 65536)
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

    fn tune(spec: &str) -> Result<Config> {
        with(&[(TUNE, spec)])
    }

    /// The variable and value of a configuration error.
    fn refused(r: Result<Config>) -> (&'static str, String, &'static str) {
        match r {
            Err(Error::Config { var, value, reason }) => (var, value, reason),
            other => panic!("expected a configuration error, got {other:?}"),
        }
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
        assert_eq!(
            tune("").unwrap(),
            c,
            "an empty tuning string changes nothing"
        );
        assert_eq!(tune(" , ").unwrap(), c);
        let r = c.resolved(2);
        assert_eq!(r.publish_batch, r.ring_slots / 2);
        let d = Config::default();
        assert_eq!(
            (d.inline_ext, d.inline_reply, d.movsb_min, d.cma_reply),
            (512, 1024, 1024, 6144)
        );
        assert_eq!(
            (d.cma_duplex, d.cma_batch, d.defer_recv),
            (6144, true, true)
        );
    }

    #[test]
    fn parses_variables() {
        let c = with(&[
            ("TMX_SHMEM_RING_SLOTS", "8"),
            ("TMX_SHMEM_HEAP_BYTES", "2M"),
            ("TMX_SHMEM_EAGER_BYTES", "8192"),
            ("TMX_SHMEM_CMA", "off"),
            ("TMX_SHMEM_ATTACH_TIMEOUT_MS", "500"),
            ("TMX_SHMEM_LIVENESS_MS", " 7 "),
            ("TMX_SHMEM_CALIBRATE_MS", "60000"),
        ])
        .unwrap();
        assert_eq!(
            (c.ring_slots, c.heap_bytes, c.eager_bytes),
            (8, 2 << 20, 8192)
        );
        assert_eq!(c.cma, CmaMode::Off);
        assert_eq!(c.attach_timeout, Duration::from_millis(500));
        assert_eq!(c.liveness_interval, Duration::from_millis(7));
        assert_eq!(c.calibrate_deadline, Duration::from_secs(60));
        assert_eq!(with(&[("TMX_SHMEM_CMA", "On")]).unwrap().cma, CmaMode::On);
        assert_eq!(
            with(&[("TMX_SHMEM_CMA", "auto")]).unwrap().cma,
            CmaMode::Auto
        );
    }

    #[test]
    fn parses_tuning_keys() {
        let c = tune(
            "publish_batch=3, prepost_slots=4, cma_threshold=64k, prepost=off, \
             defer_recv=off, prepost_min=1K, pipeline_min=256K, pipeline_chunk=64K, \
             inline_ext=1K, inline_reply=512, cma_split=OFF, cma_reply=off, \
             cma_duplex=4K, cma_batch=off, movsb_min=2K",
        )
        .unwrap();
        assert_eq!((c.publish_batch, c.prepost_slots), (3, 4));
        assert_eq!(c.cma_threshold, 64 << 10);
        assert_eq!(
            (c.prepost, c.prepost_min, c.defer_recv),
            (false, 1024, false)
        );
        assert_eq!((c.pipeline_min, c.pipeline_chunk), (256 << 10, 64 << 10));
        assert_eq!((c.inline_ext, c.inline_reply), (1024, 512));
        assert_eq!(
            (c.cma_split, c.cma_reply, c.cma_duplex),
            (u64::MAX, u64::MAX, 4096)
        );
        assert_eq!((c.cma_batch, c.movsb_min), (false, 2048));
        assert_eq!(tune("pipeline_min=off").unwrap().pipeline_min, u64::MAX);
        assert_eq!(tune("movsb_min=off").unwrap().movsb_min, u64::MAX);
        assert!(tune("cma_batch=On").unwrap().cma_batch);
        // The batch is checked against an explicit ring, whichever order.
        let r = with(&[("TMX_SHMEM_RING_SLOTS", "64"), (TUNE, "publish_batch=65")]);
        assert_eq!(refused(r).1, "publish_batch=65");
        assert_eq!(
            with(&[("TMX_SHMEM_RING_SLOTS", "1")])
                .unwrap()
                .resolved(2)
                .publish_batch,
            1
        );
    }

    #[test]
    fn cma_calibrate_on_unless_a_cut_over_is_given() {
        assert!(!Config::default().cma_calibrate);
        assert!(with(&[]).unwrap().cma_calibrate);
        assert!(tune("cma_calibrate=on").unwrap().cma_calibrate);
        assert!(!tune("cma_calibrate=off").unwrap().cma_calibrate);
        for key in ["cma_threshold", "cma_reply", "cma_duplex"] {
            let c = tune(&format!("{key}=16K")).unwrap();
            assert!(!c.cma_calibrate, "{key} given keeps the static cut-overs");
            let c = tune(&format!("cma_calibrate=on,{key}=16K")).unwrap();
            assert!(!c.cma_calibrate, "{key} given wins over cma_calibrate=on");
        }
        assert!(
            tune("cma_split=16K").unwrap().cma_calibrate,
            "cma_split is not a calibrated cut-over"
        );
    }

    #[test]
    fn inline_calibrate_on_unless_the_cap_is_given() {
        assert!(!Config::default().inline_calibrate);
        assert!(with(&[]).unwrap().inline_calibrate);
        assert!(tune("inline_calibrate=yes").unwrap().inline_calibrate);
        assert!(!tune("inline_calibrate=Off").unwrap().inline_calibrate);
        let c = tune("inline_reply=512").unwrap();
        assert!(!c.inline_calibrate, "an explicit cap is used as given");
        assert_eq!(c.inline_reply, 512);
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
        let e = with(&[("TMX_SHMEM_RING_SLOTS", "16"), (TUNE, "publish_batch=3")]).unwrap();
        assert_eq!(e.resolved(1000), e);
        // with auto slots a batch beyond the chosen ring is lowered to it
        let b = tune("publish_batch=1000").unwrap();
        assert_eq!(b.resolved(2).publish_batch, RING_SLOTS_SMALL_NODE);
        assert_eq!(b.resolved(100).publish_batch, RING_SLOTS_LARGE_NODE);
        assert_eq!(
            tune("publish_batch=5").unwrap().resolved(2).publish_batch,
            5
        );
        // resolving twice changes nothing
        assert_eq!(small.resolved(1000), small);
    }

    #[test]
    fn malformed_variables_are_typed_errors() {
        for (k, v) in [
            ("TMX_SHMEM_RING_SLOTS", "6"),
            ("TMX_SHMEM_RING_SLOTS", "lots"),
            ("TMX_SHMEM_RING_SLOTS", "131072"),
            ("TMX_SHMEM_HEAP_BYTES", "12"),
            ("TMX_SHMEM_HEAP_BYTES", "99999999999G"),
            ("TMX_SHMEM_EAGER_BYTES", "1K"),
            ("TMX_SHMEM_EAGER_BYTES", "-8M"),
            ("TMX_SHMEM_CMA", "maybe"),
            ("TMX_SHMEM_ATTACH_TIMEOUT_MS", "soon"),
            ("TMX_SHMEM_LIVENESS_MS", "0"),
            ("TMX_SHMEM_CALIBRATE_MS", "2s"),
            (TUNE, "cma_threshold"),
        ] {
            let (var, value, _) = refused(with(&[(k, v)]));
            assert_eq!((var, value.as_str()), (k, v), "{k}={v}");
        }
    }

    #[test]
    fn malformed_tuning_items_are_typed_errors_naming_the_item() {
        for (spec, item) in [
            ("cma_threshold=big", "cma_threshold=big"),
            ("cma_threshold=off", "cma_threshold=off"),
            ("cma_split=half", "cma_split=half"),
            ("cma_reply=-1", "cma_reply=-1"),
            ("cma_duplex=lots", "cma_duplex=lots"),
            ("cma_batch=sometimes", "cma_batch=sometimes"),
            ("cma_calibrate=maybe", "cma_calibrate=maybe"),
            ("inline_ext=2M", "inline_ext=2M"),
            ("inline_reply=big", "inline_reply=big"),
            ("inline_calibrate=sometimes", "inline_calibrate=sometimes"),
            ("pipeline_min=soon", "pipeline_min=soon"),
            ("pipeline_chunk=1K", "pipeline_chunk=1K"),
            ("pipeline_chunk=2G", "pipeline_chunk=2G"),
            ("movsb_min=fast", "movsb_min=fast"),
            ("prepost=sometimes", "prepost=sometimes"),
            ("prepost_min=big", "prepost_min=big"),
            ("prepost_slots=6", "prepost_slots=6"),
            ("defer_recv=later", "defer_recv=later"),
            ("publish_batch=0", "publish_batch=0"),
            ("publish_batch=65537", "publish_batch=65537"),
            ("cma_split=64K,nonsense=1", "nonsense=1"),
            ("cma_split=64K,cma_split=32K", "cma_split=32K"),
            ("cma_split 64K", "cma_split 64K"),
            ("CMA_SPLIT=64K", "CMA_SPLIT=64K"),
        ] {
            let (var, value, _) = refused(tune(spec));
            assert_eq!((var, value.as_str()), (TUNE, item), "{spec}");
        }
        // Every documented key is accepted.
        for key in TUNE_KEYS {
            let v = match *key {
                "cma_batch" | "cma_calibrate" | "inline_calibrate" | "prepost" | "defer_recv" => {
                    "on"
                }
                "pipeline_chunk" => "8K",
                _ => "16",
            };
            assert!(tune(&format!("{key}={v}")).is_ok(), "{key}={v}");
        }
    }

    #[test]
    fn moved_variables_are_refused_naming_their_key() {
        assert_eq!(MOVED.len(), TUNE_KEYS.len());
        for (old, reason) in MOVED {
            let (var, value, why) = refused(with(&[(old, "16")]));
            assert_eq!((var, value.as_str(), why), (*old, "16", *reason));
            let key = old.strip_prefix("TMX_SHMEM_").unwrap().to_ascii_lowercase();
            assert!(TUNE_KEYS.contains(&key.as_str()), "{old}: no key {key}");
            assert!(
                reason.contains(&format!("TMX_SHMEM_TUNE={key}=")),
                "{old}: the error must name its key: {reason}"
            );
        }
    }
}
