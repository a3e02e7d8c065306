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
//! in error) is [`Error::PeerDied`]. `MPI_Cancel` of a send withdraws a
//! rendezvous request the receiver holds unmatched (the endpoint asks the
//! peer and waits for its answer); eager sends are complete once out.

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
        // Over TCP a rendezvous costs a READ round trip more: a larger
        // eager limit (unless the variable sets one).
        let cfg = match provider {
            AnyProvider::Soft(_) => cfg.over_soft_live(|k| std::env::var(k).ok()),
            #[allow(unreachable_patterns)]
            _ => cfg,
        };
        tracing::info!(eager_max = cfg.eager_max, "verbs-tm eager limit");
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
        // No device call here: `send_now` finds out whether the QP is ready.
        if len > self.ep.eager_limit(peer) || !self.ep.connect_started(peer) {
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

    /// Withdrawn by the peer if it holds the request unmatched
    /// ([`verbs_tm::Endpoint::cancel_send`]); the withdrawn send's
    /// completion (with its buffer) comes through the feed.
    fn cancel_send(&mut self, id: u64) -> Result<bool, Error> {
        if id & FEED_ID != 0 {
            // Sent within its call: nothing left to withdraw.
            return Ok(false);
        }
        let ok = self.ep.cancel_send(local(id)).map_err(map_err)?;
        tracing::debug!(id = local(id), ok, "verbs: send cancel");
        Ok(ok)
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
                // A borrowed send's buffer is the endpoint's copy: back
                // to its spares for the next large borrowed send or
                // blocking receive.
                let mut back = if self.owned.remove(&f.id) {
                    Some(f.buf)
                } else {
                    self.ep.recycle(f.buf);
                    None
                };
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
        let wire = match self.ep.provider() {
            AnyProvider::Soft(live) => Some(live.wire_stats()),
            #[allow(unreachable_patterns)]
            _ => None,
        };
        let c = self.ep.finalize().map_err(map_err)?;
        let mut lines = vec![("verbs-tm counters", format!("provider {name}: {c}"))];
        if let Some(w) = wire {
            lines.push(("verbs-tm soft-live wire", w.to_string()));
        }
        Ok(lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tm_proto::{Source, Tag};

    /// Ranks 0 and 1 of a job of 2, connected over loopback TCP (the
    /// software provider) in this process.
    fn pair() -> (VerbsTransport, VerbsTransport) {
        let job = format!(
            "adi-unit-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let (mut a, blob_a) = VerbsTransport::open(&job, 0, 2, &[1]).unwrap();
        let (mut b, blob_b) = VerbsTransport::open(&job, 1, 2, &[0]).unwrap();
        assert_eq!(a.provider_name(), b.provider_name());
        a.connect(1, &blob_b).unwrap();
        b.connect(0, &blob_a).unwrap();
        a.wait_connected(&[1]).unwrap();
        b.wait_connected(&[0]).unwrap();
        (a, b)
    }

    fn spec(source: Source, tag: Tag) -> MatchSpec {
        MatchSpec {
            context_id: 0,
            source,
            tag,
        }
    }

    /// What a drain hands over: sends (id, ok, buffer back), receives
    /// (id, status, buffer), proposals.
    #[derive(Default)]
    struct Got {
        sends: Vec<(u64, bool, Option<Vec<u8>>)>,
        recvs: Vec<(u64, RecvStatus, Vec<u8>)>,
        proposals: Vec<(u64, RecvStatus)>,
    }

    impl Sink for Got {
        fn send_done(&mut self, id: u64, result: Result<&mut Option<Vec<u8>>, Error>) {
            match result {
                Ok(b) => self.sends.push((id, true, b.take())),
                Err(_) => self.sends.push((id, false, None)),
            }
        }
        fn recv_done(&mut self, id: u64, result: Result<RecvStatus, Error>, buf: &mut Vec<u8>) {
            self.recvs.push((id, result.unwrap(), std::mem::take(buf)));
        }
        fn proposed(&mut self, id: u64, status: RecvStatus) {
            self.proposals.push((id, status));
        }
    }

    /// Progress both until `done` says so (bounded).
    fn settle(
        a: &mut VerbsTransport,
        b: &mut VerbsTransport,
        got: &mut [Got; 2],
        done: impl Fn(&[Got; 2]) -> bool,
    ) {
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while !done(got) {
            assert!(Instant::now() < deadline, "no progress");
            for (t, g) in [(&mut *a, 0), (&mut *b, 1)] {
                t.progress().unwrap();
                if t.collect() {
                    t.drain(&mut got[g]);
                }
            }
        }
    }

    fn data(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
    }

    /// Eager and rendezvous sends of owned and borrowed data: receives get
    /// the bytes and world-rank statuses, owned buffers come back, borrowed
    /// ones do not, and ids carry the remote bit.
    #[test]
    fn sends_and_receives_cross_the_seam() {
        let (mut a, mut b) = pair();
        let mut got: [Got; 2] = Default::default();
        let big = data(1, 200_000);
        let RecvStart::Pending(r1) = b
            .irecv(spec(Source::Rank(0), Tag::Value(1)), vec![0; 200_000], None)
            .unwrap()
        else {
            panic!("nothing sent yet")
        };
        assert!(r1 & REMOTE_ID != 0);
        let SendStart::Pending(s1) = a.isend(1, 1, 0, big.clone(), SendMode::Standard).unwrap()
        else {
            panic!("a rendezvous waits for the FIN")
        };
        let s2 = a
            .send_borrowed(1, 2, 0, &big[..100_000], SendMode::Standard)
            .unwrap()
            .expect("a borrowed rendezvous is pending");
        let s3 = a
            .isend_borrowed(1, 3, 0, b"tiny", SendMode::Standard)
            .unwrap();
        settle(&mut a, &mut b, &mut got, |g| g[1].recvs.len() == 1);
        let (id, st, buf) = &got[1].recvs[0];
        assert_eq!((*id, st.source, st.tag, st.len), (r1, 0, 1, 200_000));
        assert!(buf == &big);
        let mut small = vec![0u8; 100_000];
        let mut st = None;
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        while st.is_none() {
            assert!(Instant::now() < deadline);
            st = b
                .try_recv(spec(Source::Any, Tag::Value(2)), &mut small)
                .unwrap();
        }
        assert_eq!(st.map(|s| (s.source, s.len)), Some((0, 100_000)));
        assert!(small[..] == big[..100_000]);
        let mut four = [0u8; 4];
        let st = loop {
            if let Some(st) = b
                .try_recv(spec(Source::Rank(0), Tag::Any), &mut four)
                .unwrap()
            {
                break st;
            }
        };
        assert_eq!((st.tag, &four), (3, b"tiny"));
        settle(&mut a, &mut b, &mut got, |g| g[0].sends.len() == 3);
        let find = |id| got[0].sends.iter().find(|s| s.0 == id).unwrap();
        assert_eq!(find(s1).2.as_deref(), Some(&big[..]), "owned: handed back");
        assert!(find(s2).1 && find(s2).2.is_none(), "borrowed: nothing back");
        assert!(find(s3).1 && s3 & REMOTE_ID != 0, "fed through the feed");
        a.finalize().unwrap();
        b.finalize().unwrap();
    }

    /// A shared post proposes instead of matching; committed, the message
    /// lands in the caller's buffer; withdrawn, the next receive gets it.
    #[test]
    fn shared_posts_propose_commit_and_withdraw() {
        let (mut a, mut b) = pair();
        let mut got: [Got; 2] = Default::default();
        let SharedStart::Posted(p) = b
            .post_shared(spec(Source::Any, Tag::Value(5)), 50_000)
            .unwrap()
        else {
            panic!("nothing queued")
        };
        assert!(a
            .isend(1, 5, 0, data(2, 40_000), SendMode::Standard)
            .is_ok());
        settle(&mut a, &mut b, &mut got, |g| !g[1].proposals.is_empty());
        assert_eq!(got[1].proposals[0].0, p);
        assert_eq!(got[1].proposals[0].1.msg_len, 40_000);
        let mut buf = vec![0u8; 50_000];
        let st = b.commit(p, &mut buf).unwrap();
        assert_eq!((st.source, st.len), (0, 40_000));
        assert!(buf[..40_000] == data(2, 40_000)[..]);
        // Withdrawn: a later receive takes the message.
        let SharedStart::Posted(p2) = b.post_shared(spec(Source::Any, Tag::Any), 10).unwrap()
        else {
            panic!("nothing queued")
        };
        let RecvStart::Pending(r) = b
            .irecv(spec(Source::Rank(0), Tag::Any), vec![0; 10], None)
            .unwrap()
        else {
            panic!()
        };
        assert!(a
            .isend(1, 6, 0, b"withdrawn".to_vec(), SendMode::Standard)
            .is_ok());
        settle(&mut a, &mut b, &mut got, |g| g[1].proposals.len() == 2);
        assert_eq!(got[1].proposals[1].0, p2);
        b.withdraw(p2).unwrap();
        settle(&mut a, &mut b, &mut got, |g| g[1].recvs.len() == 1);
        assert_eq!(got[1].recvs[0].0, r);
        assert_eq!(&got[1].recvs[0].2[..9], b"withdrawn");
        // A cancelled receive hands its buffer back, cancelled.
        let RecvStart::Pending(c) = b
            .irecv(spec(Source::Rank(0), Tag::Value(9)), vec![3; 8], None)
            .unwrap()
        else {
            panic!()
        };
        assert!(b.cancel_recv(c).unwrap());
        settle(&mut a, &mut b, &mut got, |g| g[1].recvs.len() == 2);
        assert!(got[1].recvs[1].1.cancelled && got[1].recvs[1].2 == vec![3; 8]);
        a.finalize().unwrap();
        b.finalize().unwrap();
    }

    #[test]
    fn ids_cross_the_seam_with_the_remote_bit() {
        assert_eq!(local(seam(42)), 42);
        assert!(seam(1) & REMOTE_ID != 0);
        const {
            assert!(
                FEED_ID & REMOTE_ID == 0,
                "feed ids keep the remote bit apart"
            )
        };
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
