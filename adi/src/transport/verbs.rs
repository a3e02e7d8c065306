//! The transport between nodes: `verbs-tm`'s TM-SRQ driver
//! ([`verbs_tm::Endpoint`]) behind the seam.
//!
//! # Provider
//!
//! [`verbs_tm::AnyProvider`], chosen at init by `TMX_VERBS_PROVIDER`
//! (default `auto`): a tag-matching RDMA device through libibverbs when adi
//! is built with its `ibverbs` feature and a device with `IBV_TM_CAP_RC`
//! opens; otherwise, said in one log line, the software provider
//! `soft::Live`, whose queue pairs are TCP connections. Every rank must use
//! the same provider; a rank whose peer published another one fails at init
//! with a message that says so.
//!
//! # Addresses and connection setup
//!
//! At init each rank that has peers on other nodes opens the endpoint,
//! creates a queue pair toward each of them, and publishes through PMI the
//! provider's name (`verbs-<rank>` = `<provider>,<chunks>`) and the
//! endpoint's address blob, hex-encoded in chunks that fit the PMI server's
//! value limit (`verbs-<rank>-<i>`). After the PMI barrier it reads each
//! remote peer's blob, connects, and waits until every queue pair is ready
//! (bounded by `TMX_VERBS_CONNECT_TIMEOUT_MS`).
//!
//! The software provider's listener binds, unless `TMX_VERBS_LISTEN` says
//! otherwise, the local address this host uses to reach the launcher's PMI
//! server (`PMI_PORT`): the one interface every host of the job is known
//! to reach. Without `PMI_PORT` (Hydra's `PMI_FD`, Slurm) it is the host's
//! outbound address.
//!
//! # Mapping to the seam
//!
//! Peers are world ranks (the endpoint's ranks are world ranks). The
//! endpoint's request ids are below 2^62; they cross the seam with
//! [`REMOTE_ID`] set. Sends of an owned buffer hand it back; sends of
//! borrowed data are copied by the endpoint when they cannot go at once.
//! `ANY_SOURCE` receives over both transports use the endpoint's shared
//! posts (propose, commit, withdraw: see [`crate::transport`]); the endpoint
//! keeps them, and every later receive that overlaps one, in software.
//! Datatype receives are unpacked by the device after completion (the
//! in-place consumer is not used). A dead peer (connection lost, queue pair
//! in error) is [`Error::PeerDied`].

use super::{
    Alive, InPlace, RecvStart, RecvStatus, SendMode, SendStart, SharedStart, Sink, Transport,
    REMOTE_ID,
};
use crate::Error;
use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Instant;
use tm_proto::MatchSpec;
use verbs_tm::soft::LiveConfig;
use verbs_tm::{AnyProvider, Endpoint, EndpointConfig, Finished, MessageHandle, Status};

/// Id bit of a send that completed in the call but must be reported
/// through the completion feed ([`Transport::isend_borrowed`]): above every
/// endpoint request id.
const FEED_ID: u64 = 1 << 62;

/// The transport over a `verbs-tm` endpoint.
#[derive(Debug)]
pub(crate) struct VerbsTransport {
    ep: Endpoint<AnyProvider>,
    /// Pending sends of an owned buffer (endpoint ids): their completion
    /// hands it back.
    owned: HashSet<u64>,
    /// Sends done in the call, reported through the feed (seam ids).
    fed: Vec<u64>,
    next_fed: u64,
    done: Vec<Finished>,
    proposals: Vec<(u64, Status)>,
}

/// [`Error`] of a `verbs-tm` error; a dead peer goes through the
/// process's policy for dead peers ([`crate::OnPeerDeath`]).
fn map_err(e: verbs_tm::Error) -> Error {
    match e {
        verbs_tm::Error::PeerDied { peer, reason } => {
            crate::init::remote_peer_died(peer, &reason);
            Error::PeerDied {
                rank: peer,
                detail: reason,
            }
        }
        verbs_tm::Error::PeerClosed { peer } => {
            let detail = "it finalized while an operation still needed it".to_string();
            crate::init::remote_peer_died(peer, &detail);
            Error::PeerDied { rank: peer, detail }
        }
        verbs_tm::Error::TooLarge { .. } => Error::InterNode {
            class: crate::ErrorClass::Count,
            detail: e.to_string(),
        },
        e => Error::InterNode {
            class: crate::ErrorClass::Other,
            detail: e.to_string(),
        },
    }
}

fn status(s: Status) -> RecvStatus {
    RecvStatus {
        source: s.source,
        tag: s.tag,
        len: s.len,
        msg_len: s.msg_len,
        cancelled: s.cancelled,
    }
}

#[inline]
fn seam(id: u64) -> u64 {
    id | REMOTE_ID
}

#[inline]
fn local(id: u64) -> u64 {
    id & !REMOTE_ID
}

/// A stable 64-bit id of the job (FNV-1a of its PMI job id): the software
/// provider refuses connections of another job.
fn job_hash(job: &str) -> u64 {
    job.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The local address toward the launcher's PMI server (`PMI_PORT`), if
/// ranks reach it over TCP: a routing lookup, nothing is sent.
fn address_toward_pmi() -> Option<IpAddr> {
    let port = std::env::var("PMI_PORT").ok()?;
    let server = port.trim().to_socket_addrs().ok()?.next()?;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(server).ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// PMI key of a rank's provider name and chunk count.
pub(crate) fn card_key(rank: u32) -> String {
    format!("verbs-{rank}")
}

/// PMI key of chunk `i` of a rank's address blob.
pub(crate) fn chunk_key(rank: u32, i: usize) -> String {
    format!("verbs-{rank}-{i}")
}

impl VerbsTransport {
    /// Opens the endpoint of rank `rank` (of `size`) and creates its queue
    /// pairs toward `remote`; returns it and the address blob to publish.
    pub(crate) fn open(
        job: &str,
        rank: u32,
        size: u32,
        remote: &[u32],
    ) -> Result<(Self, Vec<u8>), verbs_tm::Error> {
        let cfg = EndpointConfig::from_env()?;
        let mut live = LiveConfig::from_env(job_hash(job), rank)?;
        if std::env::var_os("TMX_VERBS_LISTEN").is_none() {
            if let Some(ip) = address_toward_pmi() {
                live.listen = SocketAddr::new(ip, 0);
            }
        }
        let provider = AnyProvider::open(cfg.provider, live)?;
        let mut ep = Endpoint::new(provider, cfg, rank, size)?;
        let blob = ep.address(remote.iter().copied())?;
        tracing::info!(
            rank,
            provider = ep.provider_name(),
            peers = remote.len(),
            "verbs-tm endpoint open for the other nodes' ranks"
        );
        Ok((
            VerbsTransport {
                ep,
                owned: HashSet::new(),
                fed: Vec::new(),
                next_fed: 1,
                done: Vec::new(),
                proposals: Vec::new(),
            },
            blob,
        ))
    }

    /// The provider's name (published with the address).
    pub(crate) fn provider_name(&self) -> String {
        self.ep.provider_name().to_string()
    }

    /// Connects to `peer` with the blob it published.
    pub(crate) fn connect(&mut self, peer: u32, blob: &[u8]) -> Result<(), Error> {
        self.ep.connect(peer, blob).map_err(map_err)
    }

    /// Progress until every peer of `remote` is connected; an error if one
    /// fails (or stays unconnected past the provider's connect timeout,
    /// plus a margin).
    pub(crate) fn wait_connected(&mut self, remote: &[u32]) -> Result<(), Error> {
        let start = Instant::now();
        loop {
            self.ep.progress().map_err(map_err)?;
            self.ep.take_completions(&mut self.done);
            let missing = remote.iter().filter(|&&p| !self.ep.is_connected(p)).count();
            if missing == 0 {
                return Ok(());
            }
            for &p in remote {
                self.ep.check_alive(Some(p)).map_err(|e| Error::InterNode {
                    class: crate::ErrorClass::Other,
                    detail: format!("connecting to rank {p}: {e}"),
                })?;
            }
            if start.elapsed() > std::time::Duration::from_secs(3600) {
                return Err(Error::InterNode {
                    class: crate::ErrorClass::Other,
                    detail: format!("{missing} ranks never connected"),
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    fn feed_id(&mut self) -> u64 {
        let id = REMOTE_ID | FEED_ID | self.next_fed;
        self.next_fed += 1;
        id
    }

    fn recv_start(r: verbs_tm::RecvStart) -> RecvStart {
        match r {
            verbs_tm::RecvStart::Done(res, buf) => {
                RecvStart::Done(res.map(status).map_err(map_err), buf)
            }
            verbs_tm::RecvStart::Pending(id) => RecvStart::Pending(seam(id)),
        }
    }
}

fn mode(m: SendMode) -> verbs_tm::SendMode {
    match m {
        SendMode::Standard => verbs_tm::SendMode::Standard,
        SendMode::Synchronous => verbs_tm::SendMode::Synchronous,
    }
}

impl Transport for VerbsTransport {
    type Matched = MessageHandle;

    fn send_now(&mut self, peer: u32, tag: u32, context: u32, data: &[u8], _copy: bool) -> bool {
        // The endpoint copies into a registered send buffer.
        self.ep.send_now(peer, tag, context, data).unwrap_or(false)
    }

    fn send_fill_now(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> bool,
    ) -> bool {
        if len > self.ep.eager_limit(peer) || !self.ep.is_connected(peer) {
            return false;
        }
        let mut data = vec![0u8; len];
        fill(&mut data) && self.ep.send_now(peer, tag, context, &data).unwrap_or(false)
    }

    fn isend(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        m: SendMode,
    ) -> Result<SendStart, Error> {
        match self
            .ep
            .isend(peer, tag, context, data, mode(m))
            .map_err(map_err)?
        {
            verbs_tm::SendStart::Done(v) => Ok(SendStart::Done(v)),
            verbs_tm::SendStart::Pending(id) => {
                self.owned.insert(id);
                Ok(SendStart::Pending(seam(id)))
            }
        }
    }

    fn send_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        m: SendMode,
    ) -> Result<Option<u64>, Error> {
        Ok(self
            .ep
            .send_borrowed(peer, tag, context, data, mode(m))
            .map_err(map_err)?
            .map(seam))
    }

    fn isend_borrowed(
        &mut self,
        peer: u32,
        tag: u32,
        context: u32,
        data: &[u8],
        m: SendMode,
    ) -> Result<u64, Error> {
        match self.send_borrowed(peer, tag, context, data, m)? {
            Some(id) => Ok(id),
            None => {
                let id = self.feed_id();
                self.fed.push(id);
                Ok(id)
            }
        }
    }

    fn irecv(
        &mut self,
        spec: MatchSpec,
        buf: Vec<u8>,
        _consumer: Option<InPlace>,
    ) -> Result<RecvStart, Error> {
        Ok(Self::recv_start(self.ep.irecv(spec, buf).map_err(map_err)?))
    }

    fn recv_now(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.recv_now(spec, buf).map_err(map_err)?.map(status))
    }

    fn try_recv(&mut self, spec: MatchSpec, buf: &mut [u8]) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.try_recv(spec, buf).map_err(map_err)?.map(status))
    }

    fn cancel_recv(&mut self, id: u64) -> Result<bool, Error> {
        self.ep.cancel_recv_wait(local(id)).map_err(map_err)
    }

    fn iprobe(&mut self, spec: MatchSpec) -> Result<Option<RecvStatus>, Error> {
        Ok(self.ep.iprobe(spec).map_err(map_err)?.map(status))
    }

    fn improbe(&mut self, spec: MatchSpec) -> Result<Option<(MessageHandle, RecvStatus)>, Error> {
        Ok(self
            .ep
            .improbe(spec)
            .map_err(map_err)?
            .map(|(m, s)| (m, status(s))))
    }

    fn imrecv(&mut self, msg: MessageHandle, buf: Vec<u8>) -> Result<RecvStart, Error> {
        Ok(Self::recv_start(self.ep.imrecv(msg, buf).map_err(map_err)?))
    }

    fn post_shared(&mut self, spec: MatchSpec, cap: usize) -> Result<SharedStart, Error> {
        Ok(match self.ep.post_shared(spec, cap).map_err(map_err)? {
            verbs_tm::SharedStart::Proposed(s) => SharedStart::Proposed(status(s)),
            verbs_tm::SharedStart::Posted(id) => SharedStart::Posted(seam(id)),
        })
    }

    fn commit(&mut self, id: u64, buf: &mut [u8]) -> Result<RecvStatus, Error> {
        Ok(status(self.ep.commit(local(id), buf).map_err(map_err)?))
    }

    fn withdraw(&mut self, id: u64) -> Result<(), Error> {
        self.ep.withdraw(local(id)).map_err(map_err)
    }

    fn progress(&mut self) -> Result<usize, Error> {
        self.ep.progress().map_err(map_err)
    }

    fn collect(&mut self) -> bool {
        self.ep.take_completions(&mut self.done);
        self.ep.take_proposals(&mut self.proposals);
        !(self.done.is_empty() && self.proposals.is_empty() && self.fed.is_empty())
    }

    fn drain<S: Sink>(&mut self, sink: &mut S) {
        for id in self.fed.drain(..) {
            sink.send_done(id, Ok(&mut None));
        }
        for f in self.done.drain(..) {
            let id = seam(f.id);
            if f.send {
                let mut back = self.owned.remove(&f.id).then_some(f.buf);
                match f.result {
                    Ok(_) => sink.send_done(id, Ok(&mut back)),
                    Err(e) => sink.send_done(id, Err(map_err(e))),
                }
            } else {
                let mut buf = f.buf;
                sink.recv_done(id, f.result.map(status).map_err(map_err), &mut buf);
            }
        }
        for (id, s) in self.proposals.drain(..) {
            sink.proposed(seam(id), status(s));
        }
    }

    fn queued(&self) -> usize {
        let unsent = match self.ep.provider() {
            AnyProvider::Soft(live) => live.unsent(),
            #[allow(unreachable_patterns)]
            _ => 0,
        };
        self.ep.queued() + unsent
    }

    fn check_alive(&mut self, which: Alive) -> Result<(), Error> {
        let peer = match which {
            Alive::Peer(p) => Some(p),
            Alive::Waited | Alive::All => None,
        };
        self.ep.check_alive(peer).map_err(map_err)
    }

    fn finalize(self) -> Result<Vec<(&'static str, String)>, Error> {
        let name = self.ep.provider_name().to_string();
        let c = self.ep.finalize().map_err(map_err)?;
        Ok(vec![("verbs-tm counters", format!("provider {name}: {c}"))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cross_the_seam_with_the_remote_bit() {
        assert_eq!(local(seam(42)), 42);
        assert!(seam(1) & REMOTE_ID != 0);
        assert!(
            FEED_ID & REMOTE_ID == 0,
            "feed ids keep the remote bit apart"
        );
    }

    #[test]
    fn job_ids_hash_apart() {
        assert_ne!(job_hash("tmx-1"), job_hash("tmx-2"));
        assert_eq!(job_hash("a"), job_hash("a"));
    }

    #[test]
    fn a_dead_peer_is_peer_died() {
        crate::on_peer_death(crate::OnPeerDeath::Return);
        let e = map_err(verbs_tm::Error::PeerDied {
            peer: 3,
            reason: "connection reset".into(),
        });
        assert!(matches!(e, Error::PeerDied { rank: 3, .. }));
        let e = map_err(verbs_tm::Error::TooLarge { len: 1, max: 0 });
        assert_eq!(e.class(), crate::ErrorClass::Count);
    }
}
