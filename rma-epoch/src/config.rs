//! Pool sizes and thresholds, with their `TMX_RMA_*` environment variables.

use crate::Error;

/// Sizes of the process-wide (global) element pools, shared by every window of
/// an [`crate::Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalConfig {
    /// Global operation elements (`TMX_RMA_OP_GLOBAL_POOL_SIZE`, default 16384).
    pub op_global_pool: usize,
    /// Global target elements (`TMX_RMA_TARGET_GLOBAL_POOL_SIZE`, default 16384).
    pub target_global_pool: usize,
}

impl Default for GlobalConfig {
    fn default() -> Self {
        GlobalConfig {
            op_global_pool: 16384,
            target_global_pool: 16384,
        }
    }
}

impl GlobalConfig {
    /// Defaults overridden by `TMX_RMA_OP_GLOBAL_POOL_SIZE` and
    /// `TMX_RMA_TARGET_GLOBAL_POOL_SIZE` when set (reading the environment is
    /// the caller's business: pass a lookup such as `|k| std::env::var(k).ok()`).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let d = GlobalConfig::default();
        Ok(GlobalConfig {
            op_global_pool: parse(&get, "TMX_RMA_OP_GLOBAL_POOL_SIZE", d.op_global_pool, 0)?,
            target_global_pool: parse(
                &get,
                "TMX_RMA_TARGET_GLOBAL_POOL_SIZE",
                d.target_global_pool,
                0,
            )?,
        })
    }
}

/// Per-window settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowConfig {
    /// Ranks in the window's communicator.
    pub comm_size: u32,
    /// This process's rank in it.
    pub my_rank: u32,
    /// Bytes of this process's window memory: target-side ops see at most
    /// this much of the slice [`crate::WindowMemory`] returns; ops beyond it
    /// are dropped and counted (reads get an empty answer).
    pub size: u64,
    /// Slots of the operation table (`TMX_RMA_SLOTS`, default 1024; the array
    /// has `min(slots, comm_size)` entries, rank `r` lives in slot
    /// `r % slots`).
    pub slots: usize,
    /// Window-local operation elements (`TMX_RMA_OP_WIN_POOL_SIZE`, default 256,
    /// at least 1).
    pub op_win_pool: usize,
    /// Window-local target elements (`TMX_RMA_TARGET_WIN_POOL_SIZE`, default 256,
    /// capped at `comm_size`, at least 1).
    pub target_win_pool: usize,
    /// Target-side lock-queue entries (`TMX_RMA_LOCK_ENTRIES`, default 256; no
    /// global pool, as in MPICH; a window with direct ranks keeps at least
    /// one, since it queues every request of an active-message origin).
    pub lock_entries: usize,
    /// Bytes of piggybacked op data the lock queue may buffer
    /// (`TMX_RMA_LOCK_DATA_BYTES`, default 655360).
    pub lock_data_bytes: usize,
    /// Queued ops per target before they are issued without waiting for the
    /// closing call (`TMX_RMA_PIGGYBACK_THRESHOLD`, default 8).
    pub piggyback_threshold: usize,
    /// Largest op that may carry a piggybacked LOCK, and the single-short-op
    /// LOCK-OP-UNLOCK limit (`TMX_RMA_PIGGYBACK_LOCK_DATA_SIZE`, default 65536).
    /// Reads always qualify.
    pub piggyback_lock_data_size: usize,
    /// Delay the LOCK until the first op (or the unlock), so that LOCK, op and
    /// UNLOCK travel in one packet (`TMX_RMA_DELAY_ISSUING`, default true: the
    /// design page's behaviour; MPICH's CVAR defaults to 0).
    pub delay_issuing: bool,
}

impl WindowConfig {
    /// Defaults for a window of `comm_size` ranks, this process being
    /// `my_rank`, exposing `size` bytes.
    pub fn new(comm_size: u32, my_rank: u32, size: u64) -> Self {
        WindowConfig {
            comm_size,
            my_rank,
            size,
            slots: 1024,
            op_win_pool: 256,
            target_win_pool: 256,
            lock_entries: 256,
            lock_data_bytes: 655_360,
            piggyback_threshold: 8,
            piggyback_lock_data_size: 65_536,
            delay_issuing: true,
        }
    }

    /// [`WindowConfig::new`] overridden by the `TMX_RMA_*` variables that
    /// `get` returns.
    pub fn from_lookup(
        comm_size: u32,
        my_rank: u32,
        size: u64,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        let d = WindowConfig::new(comm_size, my_rank, size);
        let delay = match get("TMX_RMA_DELAY_ISSUING") {
            None => d.delay_issuing,
            Some(v) => match v.trim() {
                "1" | "true" | "yes" => true,
                "0" | "false" | "no" => false,
                _ => {
                    return Err(Error::Config {
                        name: "TMX_RMA_DELAY_ISSUING",
                        value: v,
                        reason: "expected 0/1/true/false",
                    })
                }
            },
        };
        Ok(WindowConfig {
            slots: parse(&get, "TMX_RMA_SLOTS", d.slots, 1)?,
            op_win_pool: parse(&get, "TMX_RMA_OP_WIN_POOL_SIZE", d.op_win_pool, 1)?,
            target_win_pool: parse(&get, "TMX_RMA_TARGET_WIN_POOL_SIZE", d.target_win_pool, 1)?,
            lock_entries: parse(&get, "TMX_RMA_LOCK_ENTRIES", d.lock_entries, 0)?,
            lock_data_bytes: parse(&get, "TMX_RMA_LOCK_DATA_BYTES", d.lock_data_bytes, 0)?,
            piggyback_threshold: parse(
                &get,
                "TMX_RMA_PIGGYBACK_THRESHOLD",
                d.piggyback_threshold,
                0,
            )?,
            piggyback_lock_data_size: parse(
                &get,
                "TMX_RMA_PIGGYBACK_LOCK_DATA_SIZE",
                d.piggyback_lock_data_size,
                0,
            )?,
            delay_issuing: delay,
            ..d
        })
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |name: &'static str, value: String, reason: &'static str| {
            Err(Error::Config {
                name,
                value,
                reason,
            })
        };
        if self.comm_size == 0 {
            return bad("comm_size", "0".into(), "a window needs at least one rank");
        }
        if self.my_rank >= self.comm_size {
            return bad(
                "my_rank",
                self.my_rank.to_string(),
                "must be below comm_size",
            );
        }
        if self.slots == 0 {
            return bad("TMX_RMA_SLOTS", "0".into(), "needs at least one slot");
        }
        if self.op_win_pool == 0 {
            return bad(
                "TMX_RMA_OP_WIN_POOL_SIZE",
                "0".into(),
                "a window needs one local op element to be starvation-free",
            );
        }
        if self.target_win_pool == 0 {
            return bad(
                "TMX_RMA_TARGET_WIN_POOL_SIZE",
                "0".into(),
                "a window needs one local target element to be starvation-free",
            );
        }
        Ok(())
    }
}

fn parse(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: usize,
    min: usize,
) -> Result<usize, Error> {
    match get(name) {
        None => Ok(default),
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= min => Ok(n),
            Ok(_) => Err(Error::Config {
                name,
                value: v,
                reason: "below the minimum",
            }),
            Err(_) => Err(Error::Config {
                name,
                value: v,
                reason: "not a non-negative integer",
            }),
        },
    }
}
