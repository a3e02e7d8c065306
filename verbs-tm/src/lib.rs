//! # verbs-tm: a TM-SRQ driver over a provider trait
//!
//! MPI tag matching offloaded to the NIC: the tag-matching SRQ (TM-SRQ)
//! that rdma-core exposes for mlx5 devices (ConnectX-5 and later), driven
//! through a [`Provider`] trait so that every path also runs without a NIC.
//!
//! - [`Provider`]: the TM-SRQ verbs surface, one method per verb, with
//!   rdma-core's values ([`verbs`]): device caps (`ibv_tm_caps`), TM-SRQ
//!   creation, `ibv_post_srq_ops` (ADD / DEL / SYNC chains, `SIGNALED`,
//!   `IBV_OPS_TM_SYNC` with the 16-bit count, the handle written at post, the
//!   bad work request's index and errno), `ibv_post_srq_recv`, RC
//!   connection setup, `ibv_post_send` (SEND, SEND_WITH_IMM, RDMA READ),
//!   memory registration that owns its buffer until deregistration, and CQ
//!   polling with `wr_id`, status, opcode (`IBV_WC_TM_ADD`, `_DEL`, `_SYNC`,
//!   `_RECV`, `_NO_TAG`, ...), flags (`IBV_WC_TM_MATCH`,
//!   `IBV_WC_TM_DATA_VALID`, `IBV_WC_TM_SYNC_REQ`), `byte_len`, immediate
//!   data and `tm_info`.
//! - Providers:
//!   - [`soft::Sim`]: a software TM-SRQ, deterministic: tests step the
//!     "hardware" (execute queued list operations, deliver frames, complete
//!     late data) so every interleaving of the model is reachable.
//!   - [`soft::Live`]: the same device with each RC QP a TCP connection; a
//!     helper thread serves rendezvous READs and FINs while the application
//!     computes. The provider a job uses without RDMA hardware.
//!   - `ibverbs::Device` (cargo feature `ibverbs`): mlx5 through the system
//!     libibverbs, via a small C shim over rdma-core's static inline TM
//!     verbs. The `ibverbs` crate is not a dependency: its released version
//!     reaches neither SRQs nor extended CQs, and `ibverbs-sys` builds all
//!     of rdma-core with cmake and libclang.
//!   - [`AnyProvider`]: the choice at run time (`TMX_VERBS_PROVIDER`):
//!     hardware when a device with `IBV_TM_CAP_RC` opens, else, said in one
//!     log line, the software provider.
//! - [`Endpoint`]: the driver. Receives are matched by tm-match's
//!   `Offload` model, which keeps every posted receive in a software shadow
//!   and decides which ones the device's tag list holds; its actions become
//!   signaled list operations carrying the count, device completions become
//!   its events, unexpected and `RNDV_INCOMPLETE` rendezvous are finished by
//!   a software READ and a FIN, and a full tag list or command queue holds
//!   the actions in order. Senders use eager messages up to
//!   `TMX_VERBS_EAGER_MAX` and rendezvous above it and for synchronous
//!   sends. Its API is shaped for an MPI device layer's transport seam:
//!   sends that finish in the call ([`SendStart::Done`]), receives that
//!   finish in the call ([`RecvStart::Done`]), probes, matched probes,
//!   cancel, progress, owned completions ([`Finished`]), liveness
//!   ([`Endpoint::check_alive`]) and finalize.
//!
//! ```
//! use tm_proto::{MatchSpec, Source, Tag};
//! use verbs_tm::soft::SoftConfig;
//! use verbs_tm::testing::{settle, sim_pair, take};
//! use verbs_tm::{EndpointConfig, RecvStart, SendMode, SendStart};
//!
//! // Two ranks on a simulated fabric.
//! let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
//! let spec = MatchSpec { context_id: 0, source: Source::Rank(0), tag: Tag::Value(7) };
//! let RecvStart::Pending(r) = b.irecv(spec, vec![0; 1000])? else { unreachable!() };
//! // 1000 bytes is above the test config's eager limit: a rendezvous.
//! let SendStart::Pending(s) = a.isend(1, 7, 0, vec![42; 1000], SendMode::Standard)? else {
//!     unreachable!()
//! };
//! settle(&mut [&mut a, &mut b]);
//! let got = take(&mut b).into_iter().find(|f| f.id == r).unwrap();
//! assert_eq!((got.result?.len, got.buf[999]), (1000, 42));
//! assert!(take(&mut a).iter().any(|f| f.id == s && f.result.is_ok()));
//! # Ok::<(), verbs_tm::Error>(())
//! ```
//!
//! # Configuration
//!
//! Environment variables, all `TMX_VERBS_*` (details in [`config`]):
//!
//! | variable | default |
//! |---|---|
//! | `TMX_VERBS_PROVIDER` | `auto` (`soft`, `ibverbs`) |
//! | `TMX_VERBS_EAGER_MAX` | `16K` (`32K` over the software provider over TCP) |
//! | `TMX_VERBS_TM_THRESH` | `1K` |
//! | `TMX_VERBS_TAGS` | `255` |
//! | `TMX_VERBS_SRQ_WQES` | `64` |
//! | `TMX_VERBS_SEND_BUFS` | `64` |
//! | `TMX_VERBS_STRICT` | `off` |
//! | `TMX_VERBS_HELPER_IDLE_US` | `1000` |
//! | `TMX_VERBS_CONNECT_TIMEOUT_MS` | `30000` |
//! | `TMX_VERBS_LISTEN` | `0.0.0.0:0` |
//!
//! # Behaviour of the TM-SRQ
//!
//! Following rdma-core's tag-matching documentation and its mlx5 provider.
//! A tagged message (`TMH | payload`, or `TMH | RVH` for a rendezvous
//! request) is matched against the list in order, `((tag ^ entry.tag) &
//! mask) == 0`; a match is written to the tagged buffer without headers,
//! a rendezvous is READ by the device and answered with a FIN; anything
//! else goes whole to the next untagged buffer and counts one unexpected
//! message (`H`). Each list operation may carry the count software has
//! handled (`S`); entries appended while `S != H` do not match until the
//! counts agree. mlx5 specifics the software provider reproduces: at most
//! `max_num_tags` slots live, freed in FIFO order only when all their
//! completions are polled; command-queue slots reclaimed only when a
//! *signaled* op's completion is polled; an unsignaled DEL releases its
//! slot at post; `IBV_WC_TM_SYNC_REQ` on an ADD or DEL when `H` differs
//! from the count of the provider's last ADD with `TM_SYNC` (so a consumer
//! that syncs only with SYNC sees it on every later ADD without
//! `TM_SYNC`), on an unexpected message once software is more than 0x3fff
//! behind, and never on a SYNC.
//!
//! Inferred rather than documented (the software provider does this; real
//! hardware may differ, and the driver does not depend on it):
//!
//! - entries appended while in phase stay active when later messages go
//!   unexpected (the documentation says matching is disabled "for new
//!   tags"); the stricter reading, no matching at all while out of phase,
//!   is `TMX_VERBS_STRICT` / [`soft::SoftConfig::strict_activation`], and
//!   the driver's tests pass under both;
//! - the masked compare applies to both sides (the driver passes
//!   `tag & mask`, which makes both readings agree);
//! - a DEL that fails with `IBV_WC_TM_ERR` completes after the consuming
//!   `MATCH`; an ADD completes before its entry's consumption;
//! - `RNDV_INCOMPLETE` writes the whole request, truncated to the buffer,
//!   and reports its length in `byte_len`;
//! - an eager payload larger than its tagged buffer completes with
//!   `IBV_WC_LOC_LEN_ERR`, `MATCH | DATA_VALID`, the buffer filled and
//!   `byte_len` the payload's length;
//! - a failed device READ completes the receive with the READ's error and
//!   sends no FIN; a multi-packet match's first completion has
//!   `byte_len` 0.
//!
//! Misuse real hardware answers with undefined behaviour (a DEL of a free
//! handle, an unsignaled DEL racing a consumption, a CQ overrun, a
//! malformed message) is an errno or a recorded misuse in the software
//! provider (`Sim::misuse`, `Live::misuse`).
#![warn(missing_docs)]
#![deny(unsafe_code)]

mod auto;
pub mod config;
mod endpoint;
mod error;
#[cfg(feature = "ibverbs")]
#[allow(unsafe_code)]
pub mod ibverbs;
mod pool;
mod provider;
pub mod soft;
mod sync;
pub mod testing;
pub mod verbs;

pub use auto::{probe_hardware, AnyProvider};
pub use config::{EndpointConfig, ProviderChoice, SOFT_LIVE_EAGER_MAX};
pub use endpoint::{
    CancelOutcome, CancelSend, Counters, Endpoint, Finished, MessageHandle, RecvStart, SendMode,
    SendStart, SharedStart, Status,
};
pub use error::{errno_name, Error, Result};
pub use provider::{Mr, Provider};
