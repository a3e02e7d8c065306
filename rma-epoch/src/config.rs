//! Pool sizes and thresholds, with their `TMX_RMA_*` environment variables.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TMX_RMA_OP_GLOBAL_POOL` | 16384 | operation elements in the process-wide pool |
//! | `TMX_RMA_TARGET_GLOBAL_POOL` | 16384 | target elements in the process-wide pool |
//! | `TMX_RMA_OP_WIN_POOL` | 256 | operation elements per window (at least 1) |
//! | `TMX_RMA_TARGET_WIN_POOL` | 256 | target elements per window (at least 1, capped at the window's size) |
//! | `TMX_RMA_SLOTS` | 1024 | slots of a window's operation table (`min(slots, comm_size)` are allocated) |
//! | `TMX_RMA_LOCK_ENTRIES` | 256 | target-side lock-queue entries per window |
//! | `TMX_RMA_LOCK_DATA_BYTES` | `640K` | bytes of piggybacked op data the lock queue may buffer |
//! | `TMX_RMA_PIGGYBACK_THRESHOLD` | 8 | queued ops per target before they are issued without waiting for the closing call |
//! | `TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES` | `64K` | largest op that may carry a piggybacked LOCK (reads always may) |
//! | `TMX_RMA_DELAY_ISSUING` | `on` | hold a LOCK back until the first op or the unlock, so that LOCK, op and UNLOCK travel in one packet |
//!
//! Counts are plain integers; `_BYTES` values are bytes with an optional
//! `K`, `M` or `G` suffix; switches are `on`/`off` (also `1`/`0`,
//! `true`/`false`, `yes`/`no`). Names older versions read (the `_SIZE`
//! forms) are refused with an error naming the new one ([`MOVED`]).

use crate::Error;

/// Sizes of the process-wide (global) element pools, shared by every window of
/// an [`crate::Engine`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalConfig {
    /// Global operation elements (`TMX_RMA_OP_GLOBAL_POOL`, default 16384).
    pub op_global_pool: usize,
    /// Global target elements (`TMX_RMA_TARGET_GLOBAL_POOL`, default 16384).
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
    /// Defaults overridden by `TMX_RMA_OP_GLOBAL_POOL` and
    /// `TMX_RMA_TARGET_GLOBAL_POOL` when set (reading the environment is
    /// the caller's business: pass a lookup such as `|k| std::env::var(k).ok()`).
    /// A name earlier versions read (a `_SIZE` form) is refused.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        refuse_moved(&get)?;
        let d = GlobalConfig::default();
        Ok(GlobalConfig {
            op_global_pool: parse(&get, "TMX_RMA_OP_GLOBAL_POOL", d.op_global_pool, 0)?,
            target_global_pool: parse(&get, "TMX_RMA_TARGET_GLOBAL_POOL", d.target_global_pool, 0)?,
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
    /// Window-local operation elements (`TMX_RMA_OP_WIN_POOL`, default 256,
    /// at least 1).
    pub op_win_pool: usize,
    /// Window-local target elements (`TMX_RMA_TARGET_WIN_POOL`, default 256,
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
    /// LOCK-OP-UNLOCK limit (`TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES`, default 64K).
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
    /// `get` returns (a name earlier versions read is refused).
    pub fn from_lookup(
        comm_size: u32,
        my_rank: u32,
        size: u64,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, Error> {
        refuse_moved(&get)?;
        let d = WindowConfig::new(comm_size, my_rank, size);
        let delay = match get("TMX_RMA_DELAY_ISSUING") {
            None => d.delay_issuing,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => true,
                "0" | "false" | "no" | "off" => false,
                _ => {
                    return Err(Error::Config {
                        name: "TMX_RMA_DELAY_ISSUING",
                        value: v,
                        reason: "expected on or off (1/0, true/false, yes/no)",
                    })
                }
            },
        };
        Ok(WindowConfig {
            slots: parse(&get, "TMX_RMA_SLOTS", d.slots, 1)?,
            op_win_pool: parse(&get, "TMX_RMA_OP_WIN_POOL", d.op_win_pool, 1)?,
            target_win_pool: parse(&get, "TMX_RMA_TARGET_WIN_POOL", d.target_win_pool, 1)?,
            lock_entries: parse(&get, "TMX_RMA_LOCK_ENTRIES", d.lock_entries, 0)?,
            lock_data_bytes: parse_bytes(&get, "TMX_RMA_LOCK_DATA_BYTES", d.lock_data_bytes)?,
            piggyback_threshold: parse(
                &get,
                "TMX_RMA_PIGGYBACK_THRESHOLD",
                d.piggyback_threshold,
                0,
            )?,
            piggyback_lock_data_size: parse_bytes(
                &get,
                "TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES",
                d.piggyback_lock_data_size,
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
                "TMX_RMA_OP_WIN_POOL",
                "0".into(),
                "a window needs one local op element to be starvation-free",
            );
        }
        if self.target_win_pool == 0 {
            return bad(
                "TMX_RMA_TARGET_WIN_POOL",
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

/// Names that earlier versions read and this one refuses, each with the
/// error's reason, which names the variable that replaced it.
pub const MOVED: &[(&str, &str)] = &[
    (
        "TMX_RMA_OP_GLOBAL_POOL_SIZE",
        "no longer read: renamed TMX_RMA_OP_GLOBAL_POOL",
    ),
    (
        "TMX_RMA_TARGET_GLOBAL_POOL_SIZE",
        "no longer read: renamed TMX_RMA_TARGET_GLOBAL_POOL",
    ),
    (
        "TMX_RMA_OP_WIN_POOL_SIZE",
        "no longer read: renamed TMX_RMA_OP_WIN_POOL",
    ),
    (
        "TMX_RMA_TARGET_WIN_POOL_SIZE",
        "no longer read: renamed TMX_RMA_TARGET_WIN_POOL",
    ),
    (
        "TMX_RMA_PIGGYBACK_LOCK_DATA_SIZE",
        "no longer read: renamed TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES",
    ),
];

fn refuse_moved(get: &impl Fn(&str) -> Option<String>) -> Result<(), Error> {
    for (name, reason) in MOVED {
        if let Some(value) = get(name) {
            return Err(Error::Config {
                name,
                value,
                reason,
            });
        }
    }
    Ok(())
}

/// A `_BYTES` variable: bytes, with an optional `K`, `M` or `G` suffix.
fn parse_bytes(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: usize,
) -> Result<usize, Error> {
    let Some(v) = get(name) else {
        return Ok(default);
    };
    let t = v.trim();
    let (num, shift) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 10),
        Some((i, 'm' | 'M')) => (&t[..i], 20),
        Some((i, 'g' | 'G')) => (&t[..i], 30),
        _ => (t, 0),
    };
    num.parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or(Error::Config {
            name,
            value: v,
            reason: "not a size in bytes (an integer, optionally with suffix K, M or G)",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn window(pairs: &[(&str, &str)]) -> Result<WindowConfig, Error> {
        WindowConfig::from_lookup(4, 0, 64, lookup(pairs))
    }

    #[test]
    fn variables_are_parsed() {
        let w = window(&[
            ("TMX_RMA_SLOTS", "16"),
            ("TMX_RMA_OP_WIN_POOL", "7"),
            ("TMX_RMA_TARGET_WIN_POOL", "3"),
            ("TMX_RMA_LOCK_ENTRIES", "0"),
            ("TMX_RMA_LOCK_DATA_BYTES", "1K"),
            ("TMX_RMA_PIGGYBACK_THRESHOLD", "2"),
            ("TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES", "4096"),
            ("TMX_RMA_DELAY_ISSUING", "Off"),
        ])
        .unwrap();
        assert_eq!((w.slots, w.op_win_pool, w.target_win_pool), (16, 7, 3));
        assert_eq!((w.lock_entries, w.lock_data_bytes), (0, 1024));
        assert_eq!(
            (w.piggyback_threshold, w.piggyback_lock_data_size),
            (2, 4096)
        );
        assert!(!w.delay_issuing);
        assert_eq!(window(&[]).unwrap(), WindowConfig::new(4, 0, 64));
        assert_eq!(window(&[]).unwrap().lock_data_bytes, 640 << 10);
        let g = GlobalConfig::from_lookup(lookup(&[
            ("TMX_RMA_OP_GLOBAL_POOL", "0"),
            ("TMX_RMA_TARGET_GLOBAL_POOL", "5"),
        ]))
        .unwrap();
        assert_eq!((g.op_global_pool, g.target_global_pool), (0, 5));
    }

    #[test]
    fn malformed_values_are_typed_errors() {
        for (k, v) in [
            ("TMX_RMA_SLOTS", "0"),
            ("TMX_RMA_SLOTS", "many"),
            ("TMX_RMA_OP_WIN_POOL", "0"),
            ("TMX_RMA_LOCK_DATA_BYTES", "lots"),
            ("TMX_RMA_LOCK_DATA_BYTES", "99999999999999G"),
            ("TMX_RMA_PIGGYBACK_LOCK_DATA_BYTES", "-1"),
            ("TMX_RMA_DELAY_ISSUING", "maybe"),
        ] {
            match window(&[(k, v)]) {
                Err(Error::Config { name, value, .. }) => {
                    assert_eq!((name, value.as_str()), (k, v))
                }
                other => panic!("{k}={v}: {other:?}"),
            }
        }
        assert!(matches!(
            GlobalConfig::from_lookup(lookup(&[("TMX_RMA_TARGET_GLOBAL_POOL", "x")])),
            Err(Error::Config {
                name: "TMX_RMA_TARGET_GLOBAL_POOL",
                ..
            })
        ));
    }

    #[test]
    fn moved_names_are_refused_naming_the_new_one() {
        for (old, reason) in MOVED {
            let new = reason.rsplit(' ').next().unwrap();
            assert!(
                new.starts_with("TMX_RMA_") && !new.ends_with("_SIZE"),
                "{reason}"
            );
            for r in [
                window(&[(old, "8")]).map(|_| ()),
                GlobalConfig::from_lookup(lookup(&[(old, "8")])).map(|_| ()),
            ] {
                match r {
                    Err(Error::Config {
                        name, reason: why, ..
                    }) => {
                        assert_eq!((name, why), (*old, *reason))
                    }
                    other => panic!("{old}: {other:?}"),
                }
            }
        }
    }
}
