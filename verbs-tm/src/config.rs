//! Configuration from `TMX_VERBS_*` environment variables.
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `TMX_VERBS_PROVIDER` | `auto` | `auto`: the `ibverbs` provider when built with it and a device with `IBV_TM_CAP_RC` opens, else the software provider over TCP; `soft`: always the software provider; `ibverbs`: fail unless the hardware provider starts |
//! | `TMX_VERBS_EAGER_MAX` | `16K` (`32K` over the software provider over TCP, [`SOFT_LIVE_EAGER_MAX`]) | largest payload sent eagerly (one SEND of TMH + payload); larger messages, and synchronous sends of any size, use rendezvous (TMH RNDV + RVH, the receiver READs). It is also the size of each untagged receive buffer (plus the 16-byte TMH), and a sender uses the smaller of its own and the receiver's value |
//! | `TMX_VERBS_TM_THRESH` | `1K` | receive buffers of at least this many bytes (and never under the 64-byte rendezvous header) are offered to the device's tag list; smaller receives match in software |
//! | `TMX_VERBS_TAGS` | `255` | tagged buffers the TM-SRQ is created with (clamped to the device's `max_num_tags`) |
//! | `TMX_VERBS_SRQ_WQES` | `64` | untagged receive buffers (unexpected, no-tag and FIN messages); at least 33, the minimum mlx5 users keep posted |
//! | `TMX_VERBS_SEND_BUFS` | `64` | registered send buffers for eager messages, rendezvous requests and FINs; sends beyond wait in order |
//! | `TMX_VERBS_STRICT` | `off` | software provider: the stricter TM activation rule (no matching at all while out of phase) |
//! | `TMX_VERBS_HELPER_IDLE_US` | `1000` | software provider over TCP: once a socket is ready, how long the helper thread leaves it to the owner before it runs the device itself (serves READs, sends FINs) |
//! | `TMX_VERBS_CONNECT_TIMEOUT_MS` | `30000` | software provider over TCP: how long a QP may stay connecting before it goes to the error state |
//! | `TMX_VERBS_LISTEN` | `0.0.0.0:0` | software provider over TCP: the address its listener binds (port 0: any free port); the address published to peers is this one, or the host's outbound address when unspecified |
//!
//! Sizes take a `K`, `M` or `G` suffix (powers of 1024).

use crate::{Error, Result};

/// Which provider a job should use (`TMX_VERBS_PROVIDER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProviderChoice {
    /// Hardware when possible, software otherwise.
    #[default]
    Auto,
    /// The software provider over TCP.
    Soft,
    /// The `ibverbs` provider, or an error.
    Ibverbs,
}

/// The eager limit over the software provider over TCP
/// ([`crate::soft::Live`]) when `TMX_VERBS_EAGER_MAX` is not set
/// ([`EndpointConfig::over_soft_live`]): there a rendezvous costs a READ
/// request and response round trip over the socket on top of the data,
/// which up to this size takes longer than moving the payload in the SEND.
/// A trade-off, measured on a shared two-core machine: at 32 KiB a
/// ping-pong is 2.5-3 times as fast eager, and a window of 64 sends about
/// 15% slower (an eager payload is copied once more: a READ response of
/// 64 KiB and more is received straight into memory); at 64 KiB the
/// window is slower eager still, so the limit stays below it.
pub const SOFT_LIVE_EAGER_MAX: usize = 32 << 10;

/// Endpoint settings (see the [module docs](self) for the variables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndpointConfig {
    /// Largest eager payload.
    pub eager_max: usize,
    /// Smallest receive buffer offered to the device.
    pub tm_thresh: usize,
    /// Tagged buffers requested for the TM-SRQ.
    pub tags: u32,
    /// Untagged receive buffers.
    pub srq_wqes: u32,
    /// Registered send buffers.
    pub send_bufs: u32,
    /// Whether the device sees messages from every source that can reach
    /// this process, so `ANY_SOURCE` receives may be offloaded. `false` when
    /// other transports (shared memory) also deliver messages.
    pub any_source: bool,
    /// Sync at least every this many unexpected messages (at most 2^14).
    pub sync_interval: u16,
    /// Provider choice.
    pub provider: ProviderChoice,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            eager_max: 16 << 10,
            tm_thresh: 1 << 10,
            tags: 255,
            srq_wqes: 64,
            send_bufs: 64,
            any_source: false,
            sync_interval: 1 << 14,
            provider: ProviderChoice::Auto,
        }
    }
}

/// Parses `123`, `16K`, `8M`, `1G`.
pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// Parses an on/off flag.
pub(crate) fn parse_flag(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

pub(crate) fn var_size(
    look: &impl Fn(&str) -> Option<String>,
    var: &'static str,
    min: u64,
    max: u64,
) -> Result<Option<u64>> {
    let Some(v) = look(var) else { return Ok(None) };
    match parse_size(&v) {
        Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
        Some(_) => Err(Error::Config {
            var,
            value: v,
            reason: "out of range",
        }),
        None => Err(Error::Config {
            var,
            value: v,
            reason: "not a size (digits with an optional K, M or G)",
        }),
    }
}

pub(crate) fn var_flag(
    look: &impl Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<bool>> {
    let Some(v) = look(var) else { return Ok(None) };
    parse_flag(&v).map(Some).ok_or(Error::Config {
        var,
        value: v,
        reason: "expected on/off",
    })
}

impl EndpointConfig {
    /// Small settings for tests: 256-byte eager messages, every receive of
    /// 64 bytes or more offered to the device, 8 untagged and 8 send
    /// buffers, `ANY_SOURCE` kept in software.
    pub const fn for_tests() -> Self {
        EndpointConfig {
            eager_max: 256,
            tm_thresh: 0,
            tags: 15,
            srq_wqes: 8,
            send_bufs: 8,
            any_source: false,
            sync_interval: 1 << 14,
            provider: ProviderChoice::Soft,
        }
    }

    /// The defaults overridden by the `TMX_VERBS_*` environment variables.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`EndpointConfig::from_env`] with another source of variables.
    pub fn from_lookup(look: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut c = Self::default();
        if let Some(n) = var_size(&look, "TMX_VERBS_EAGER_MAX", 0, 1 << 30)? {
            c.eager_max = n as usize;
        }
        if let Some(n) = var_size(&look, "TMX_VERBS_TM_THRESH", 0, u64::from(u32::MAX))? {
            c.tm_thresh = n as usize;
        }
        if let Some(n) = var_size(&look, "TMX_VERBS_TAGS", 1, 1 << 20)? {
            c.tags = n as u32;
        }
        if let Some(n) = var_size(&look, "TMX_VERBS_SRQ_WQES", 1, 1 << 20)? {
            c.srq_wqes = n as u32;
        }
        if let Some(n) = var_size(&look, "TMX_VERBS_SEND_BUFS", 1, 1 << 20)? {
            c.send_bufs = n as u32;
        }
        if let Some(v) = look("TMX_VERBS_PROVIDER") {
            c.provider = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => ProviderChoice::Auto,
                "soft" => ProviderChoice::Soft,
                "ibverbs" => ProviderChoice::Ibverbs,
                _ => {
                    return Err(Error::Config {
                        var: "TMX_VERBS_PROVIDER",
                        value: v,
                        reason: "expected auto, soft or ibverbs",
                    })
                }
            };
        }
        Ok(c)
    }

    /// These settings for an endpoint over the software provider over TCP:
    /// the eager limit becomes [`SOFT_LIVE_EAGER_MAX`] unless
    /// `TMX_VERBS_EAGER_MAX` is set (`look` reads the variables, as in
    /// [`EndpointConfig::from_lookup`]).
    pub fn over_soft_live(mut self, look: impl Fn(&str) -> Option<String>) -> Self {
        if look("TMX_VERBS_EAGER_MAX").is_none() {
            self.eager_max = SOFT_LIVE_EAGER_MAX;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_flags_and_errors() {
        assert_eq!(parse_size("16K"), Some(16384));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("7"), Some(7));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_flag("On"), Some(true));
        let c = EndpointConfig::from_lookup(|k| match k {
            "TMX_VERBS_EAGER_MAX" => Some("4K".into()),
            "TMX_VERBS_PROVIDER" => Some("soft".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!((c.eager_max, c.provider), (4096, ProviderChoice::Soft));
        let e = EndpointConfig::from_lookup(|k| (k == "TMX_VERBS_TAGS").then(|| "0".into()));
        assert!(matches!(
            e,
            Err(Error::Config {
                var: "TMX_VERBS_TAGS",
                ..
            })
        ));
        let e = EndpointConfig::from_lookup(|k| (k == "TMX_VERBS_PROVIDER").then(|| "rxe".into()));
        assert!(matches!(e, Err(Error::Config { .. })));
    }

    #[test]
    fn soft_live_eager_limit_unless_the_variable_is_set() {
        let unset = |_: &str| None;
        let d = EndpointConfig::from_lookup(unset).unwrap();
        assert_eq!(d.eager_max, 16 << 10);
        assert_eq!(d.over_soft_live(unset).eager_max, SOFT_LIVE_EAGER_MAX);
        let set = |k: &str| (k == "TMX_VERBS_EAGER_MAX").then(|| "8K".to_string());
        let c = EndpointConfig::from_lookup(set).unwrap();
        assert_eq!(c.over_soft_live(set).eager_max, 8 << 10);
    }
}
