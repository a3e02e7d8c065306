//! "Nothing lost": a seeded random stress test of point-to-point on 4 real
//! ranks.
//!
//! Every rank sends its share of the messages (10⁵ in total by default) to
//! random destinations (itself included), on two communicators (world and a
//! dup), with random tags and random sizes spanning every protocol of the
//! transport: 0 B, inline (≤ 40 B), eager, the sizes right around each
//! threshold (header boundary, fragment size, CMA threshold, the end of the
//! eager area, the prepost minimum) and, rarely, up to 1 MiB. The transport
//! runs with tiny header rings and a tiny eager area so that backpressure
//! is constant. Send modes: `isend`, `issend`, blocking `send` (≤ 1 KiB,
//! which this transport always buffers: inline or eager; the test relies on
//! that), and `bsend` through a small attached buffer whose
//! `BsendBufferFull` (an error, never a block) falls back to `isend`.
//!
//! Receives mix everything: `irecv(ANY_SOURCE, ANY_TAG)`, `irecv(src,
//! ANY_TAG)` (exact source: the prepost path for large messages), and
//! probe-driven receives (`iprobe` with wildcards, then `recv` with an
//! exact-size buffer, `probe` + `recv(ANY, ANY)`, `mprobe` + `mrecv`,
//! `improbe` + `imrecv`); receives that can never match (a tag nobody
//! sends) are posted and later cancelled (they must report cancelled with
//! the buffer untouched), and outstanding live receives are cancelled at
//! random (either cancelled with the buffer untouched, or completed with
//! a message if the cancel came too late — and then the message counts).
//! Nonblocking receives are only posted while every one of them is sure
//! to be matched by a message still to come, so the test never depends on
//! a cancel to finish.
//!
//! Checks: every message carries `(magic, src, seq, len, hash)` in its
//! first 24 bytes (shorter ones are a prefix of the payload) and a payload
//! derived from `(src, seq)`; the receiver checks the header against the
//! schedule (every rank computes every rank's schedule from the seed), the
//! hash and the payload as each message arrives; at the end it checks that
//! each `(source, tag, communicator)` stream was received exactly once and
//! in send order, in the order the receives were posted (MPI's
//! non-overtaking rule), and the ranks exchange per-pair sent/received
//! counts and compare them.
//!
//! Configurations: `stress_4_ranks_cma` (10⁵ messages, CMA as available),
//! `stress_4_ranks_without_cma` (10⁵, eager fragments),
//! `stress_4_ranks_one_slot_rings_prepost` (2·10⁴, one-slot rings, 4 KiB
//! eager area, prepost-direct from 1 KiB), `stress_4_ranks_2_threads`
//! (4·10⁴, two threads per rank on their own communicators).
//!
//! Smaller targeted jobs in the same file: thousands of receives posted at
//! once (matched in posting order, with and without cancels), receives
//! cancelled before more messages than the ring holds, send cancel
//! against delivery, and (ignored until fixed) finalize with staged sends.
//!
//! Seed: `TMX_STRESS_SEED` (decimal; random and printed otherwise).
//! `TMX_SHMEM_*` variables set by the caller (`TMX_SHMEM_TUNE` as a whole)
//! override the test's transport settings (the size edges stay those of
//! the defaults here).
//! Total messages: `TMX_STRESS_MESSAGES` (default 100 000).
//! Run: `cargo test -p adi --test stress` (add `-- --nocapture` for the
//! per-run numbers).
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::{attr::TAG_UB, Comm, Error, ErrorClass, ReduceOp, Request, Source, Status, Tag};
use common::{splitmix, Rng};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const ENV_SEED: &str = "TMX_STRESS_SEED";
const ENV_MESSAGES: &str = "TMX_STRESS_MESSAGES";
const RANKS: usize = 4;
const DEFAULT_MESSAGES: usize = 100_000;

/// Header: magic, src, seq, len (u32 each), hash of the rest (u64).
const HDR: usize = 24;
const MAGIC: u32 = 0x5754_4d58; // "XMTW"
const MAX_LEN: usize = 1 << 20;
/// Tags 0..TAGS are used, plus TAG_UB now and then.
const TAGS: u64 = 6;
/// A tag no message carries: receives on it never match.
const NEVER_TAG: i32 = TAG_UB - 1;
/// Transport sizes the test sets (see `transport_env`).
const EAGER_BYTES: usize = 16 << 10;
const CMA_THRESHOLD: usize = 8 << 10;
const PREPOST_MIN: usize = 64 << 10;
/// CMA messages from this size on may be copied by both ranks at once.
const CMA_SPLIT: usize = 12 << 10;
/// Sizes right around every threshold of the transport so configured:
/// header boundary, inline limit, fragment size (eager/4 - 64), CMA
/// threshold, end of the eager area (eager - 64), prepost minimum.
const EDGES: [usize; 19] = [
    23,
    24,
    25,
    40,
    41,
    64,
    EAGER_BYTES / 4 - 65,
    EAGER_BYTES / 4 - 64,
    EAGER_BYTES / 4 - 63,
    CMA_THRESHOLD - 1,
    CMA_THRESHOLD,
    CMA_THRESHOLD + 1,
    EAGER_BYTES - 65,
    EAGER_BYTES - 64,
    EAGER_BYTES - 63,
    EAGER_BYTES,
    PREPOST_MIN - 1,
    PREPOST_MIN,
    PREPOST_MIN + 1,
];

const SEND_WINDOW: usize = 24;
const RECV_WINDOW: usize = 12;
const BSEND_BUFFER: usize = 6 << 10;
/// No completion at all for this long is a failure (lost message or hang).
const STALL: Duration = Duration::from_secs(40);

// ------------------------------------------------------------- messages

/// A planned message of the schedule.
#[derive(Debug, Clone, Copy)]
struct Planned {
    dest: usize,
    ctx: usize,
    tag: i32,
    len: usize,
}

fn pick_len(rng: &mut Rng) -> usize {
    let r = rng.below(1000);
    let span = |rng: &mut Rng, lo: usize, hi: usize| lo + rng.below((hi - lo + 1) as u64) as usize;
    match r {
        0..=79 => 0,
        80..=399 => span(rng, 1, 40),
        400..=649 => span(rng, 41, 512),
        650..=849 => span(rng, 513, CMA_THRESHOLD),
        850..=949 => EDGES[rng.below(EDGES.len() as u64) as usize],
        950..=994 => span(rng, CMA_THRESHOLD + 2, PREPOST_MIN + 2),
        _ => span(rng, PREPOST_MIN + 2, MAX_LEN),
    }
}

/// Rank `src`'s whole schedule, the same on every rank.
fn plan(seed: u64, src: usize, per_rank: usize, n: usize) -> Vec<Planned> {
    let mut rng = Rng::new(seed ^ splitmix(0x5EED_0000 + src as u64));
    (0..per_rank)
        .map(|_| {
            let dest = rng.below(n as u64) as usize;
            let ctx = usize::from(rng.chance(250));
            let tag = if rng.chance(5) {
                TAG_UB
            } else {
                rng.below(TAGS) as i32
            };
            let len = pick_len(&mut rng);
            Planned {
                dest,
                ctx,
                tag,
                len,
            }
        })
        .collect()
}

/// The deterministic payload of message `(src, seq)`, eight bytes at a time.
fn fill(src: usize, seq: usize, out: &mut [u8]) {
    let base = splitmix(((src as u64) << 32) | seq as u64);
    for (k, chunk) in out.chunks_mut(8).enumerate() {
        let w = (base ^ (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes();
        chunk.copy_from_slice(&w[..chunk.len()]);
    }
}

fn hash(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for chunk in data.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ data.len() as u64
}

fn build(src: usize, seq: usize, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len];
    if len < HDR {
        fill(src, seq, &mut m);
        return m;
    }
    let (hdr, body) = m.split_at_mut(HDR);
    fill(src, seq, body);
    hdr[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    hdr[4..8].copy_from_slice(&(src as u32).to_le_bytes());
    hdr[8..12].copy_from_slice(&(seq as u32).to_le_bytes());
    hdr[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    hdr[16..24].copy_from_slice(&hash(body).to_le_bytes());
    m
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

// ------------------------------------------------------------ the rank

/// What an outstanding nonblocking receive is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Any,
    Src(usize),
    Never,
}

#[derive(Debug)]
struct RecvMeta {
    post: u64,
    ctx: usize,
    kind: Kind,
    /// `Some(answer)` once cancel was called on it.
    cancel: Option<bool>,
}

/// A received message, for the end-of-run order check.
#[derive(Debug)]
struct Record {
    post: u64,
    ctx: usize,
    src: usize,
    tag: i32,
    len: usize,
    /// From the header (messages of ≥ 24 bytes).
    seq: Option<usize>,
    /// The whole message when shorter than a header.
    tiny: Vec<u8>,
}

const MARK: u8 = 0xA7;

#[derive(Default, Debug)]
struct Stats {
    bytes: usize,
    blocking_sends: usize,
    bsends: usize,
    bsend_full: usize,
    issends: usize,
    probe_recvs: usize,
    irecvs: usize,
    never_cancelled: usize,
    live_cancel_true: usize,
    live_cancel_false: usize,
}

struct Rank {
    seed: u64,
    me: usize,
    n: usize,
    comms: [Comm; 2],
    plans: Vec<Vec<Planned>>,
    rng: Rng,
    next_seq: usize,
    sends: Vec<Request>,
    sent: Vec<i64>,
    /// Messages still to complete per (ctx, src).
    remaining: [Vec<usize>; 2],
    /// Outstanding receives per ctx: ANY_SOURCE ones, and per source.
    any_out: [usize; 2],
    src_out: [Vec<usize>; 2],
    recvs: Vec<Request>,
    metas: Vec<RecvMeta>,
    post_no: u64,
    received: Vec<i64>,
    done: usize,
    expected: usize,
    records: Vec<Record>,
    pool: Vec<Vec<u8>>,
    rbuf: Vec<u8>,
    last_activity: Instant,
    stats: Stats,
    /// The ranks span two transports: fake nodes (`adi::ENV_TEST_NODES`)
    /// or hosts.
    across_nodes: bool,
}

impl Rank {
    /// A rank's state for messages on `comms` (two communicators of the
    /// same group, e.g. world and a dup).
    fn new(comms: [Comm; 2], seed: u64, total: usize) -> Rank {
        let (me, n) = (comms[0].rank() as usize, comms[0].size() as usize);
        let per_rank = total / n;
        let plans: Vec<Vec<Planned>> = (0..n).map(|s| plan(seed, s, per_rank, n)).collect();
        let mut remaining = [vec![0usize; n], vec![0usize; n]];
        for (s, p) in plans.iter().enumerate() {
            for m in p.iter().filter(|m| m.dest == me) {
                remaining[m.ctx][s] += 1;
            }
        }
        let expected = remaining.iter().flatten().sum();
        Rank {
            seed,
            me,
            n,
            comms,
            plans,
            rng: Rng::new(seed ^ splitmix(0xABCD_0000 + me as u64)),
            next_seq: 0,
            sends: Vec::new(),
            sent: vec![0; n],
            remaining,
            any_out: [0; 2],
            src_out: [vec![0; n], vec![0; n]],
            recvs: Vec::new(),
            metas: Vec::new(),
            post_no: 0,
            received: vec![0; n],
            done: 0,
            expected,
            records: Vec::new(),
            pool: Vec::new(),
            rbuf: vec![0u8; MAX_LEN],
            last_activity: Instant::now(),
            stats: Stats::default(),
            // Fake nodes, or real hosts (`cargo xtask cluster` sets
            // `TMX_ADI_TEST_HOSTS`): two transports either way.
            across_nodes: std::env::var_os(adi::ENV_TEST_NODES).is_some()
                || std::env::var_os("TMX_ADI_TEST_HOSTS").is_some(),
        }
    }

    fn ctx_msg(&self) -> String {
        format!(
            "seed {} (rerun with {ENV_SEED}={}), rank {}",
            self.seed, self.seed, self.me
        )
    }

    fn live_out(&self, c: usize) -> usize {
        self.any_out[c] + self.src_out[c].iter().sum::<usize>()
    }

    /// Whether one more ANY_SOURCE receive on `c` is sure to be matched:
    /// the outstanding ones (plus it) cannot outnumber the messages still
    /// to come, and no exact-source receive can be starved by ANY_SOURCE
    /// receives taking its source's messages.
    fn can_post_any(&self, c: usize) -> bool {
        let total: usize = self.remaining[c].iter().sum();
        self.live_out(c) < total
            && (0..self.n).all(|s| {
                self.src_out[c][s] == 0
                    || self.src_out[c][s] + self.any_out[c] < self.remaining[c][s]
            })
    }

    fn can_post_src(&self, c: usize, s: usize) -> bool {
        let total: usize = self.remaining[c].iter().sum();
        self.live_out(c) < total && self.src_out[c][s] + self.any_out[c] < self.remaining[c][s]
    }

    fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.pool.pop().unwrap_or_else(|| vec![0u8; MAX_LEN]);
        b[..64].fill(MARK);
        b
    }

    // ------------------------------------------------------------ sends

    fn start_send(&mut self) {
        let seq = self.next_seq;
        let p = self.plans[self.me][seq];
        let msg = build(self.me, seq, p.len);
        let comm = &self.comms[p.ctx];
        let dest = p.dest as i32;
        if p.len <= 1024 && self.rng.chance(200) {
            comm.send(&msg, dest, p.tag).unwrap();
            self.stats.blocking_sends += 1;
        } else if p.len <= 4096 && self.rng.chance(200) {
            match comm.bsend(&msg, dest, p.tag) {
                Ok(()) => self.stats.bsends += 1,
                Err(e) => {
                    assert!(
                        matches!(e, Error::BsendBufferFull { .. }),
                        "{}: bsend: {e:?}",
                        self.ctx_msg()
                    );
                    assert_eq!(e.class(), ErrorClass::Buffer);
                    self.stats.bsend_full += 1;
                    let r = comm.isend(msg, dest, p.tag).unwrap();
                    self.sends.push(r);
                }
            }
        } else if self.rng.chance(100) {
            self.stats.issends += 1;
            let r = comm.issend(msg, dest, p.tag).unwrap();
            self.sends.push(r);
        } else {
            let r = comm.isend(msg, dest, p.tag).unwrap();
            self.sends.push(r);
        }
        self.sent[p.dest] += 1;
        self.stats.bytes += p.len;
        self.next_seq += 1;
        self.last_activity = Instant::now();
    }

    fn reap_sends(&mut self) -> bool {
        if self.sends.is_empty() {
            return false;
        }
        let done = self.comms[0].testsome(&mut self.sends).unwrap();
        let Some(mut done) = done else { return false };
        if done.is_empty() {
            return false;
        }
        done.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, st) in done {
            assert!(
                !st.cancelled,
                "{}: a send reported cancelled",
                self.ctx_msg()
            );
            let r = self.sends.swap_remove(i);
            drop(r);
        }
        self.last_activity = Instant::now();
        true
    }

    // --------------------------------------------------------- receives

    fn post(&mut self, c: usize, kind: Kind) {
        let (buf, src, tag) = match kind {
            Kind::Any => (self.buffer(), Source::Any, Tag::Any),
            Kind::Src(s) => (self.buffer(), Source::Rank(s as i32), Tag::Any),
            Kind::Never => {
                let src = if self.rng.chance(500) {
                    Source::Any
                } else {
                    Source::Rank(self.rng.below(self.n as u64) as i32)
                };
                (vec![MARK; 64], src, Tag::Value(NEVER_TAG))
            }
        };
        let r = self.comms[c].irecv(buf, src, tag).unwrap();
        match kind {
            Kind::Any => self.any_out[c] += 1,
            Kind::Src(s) => self.src_out[c][s] += 1,
            Kind::Never => {}
        }
        self.post_no += 1;
        self.recvs.push(r);
        self.metas.push(RecvMeta {
            post: self.post_no,
            ctx: c,
            kind,
            cancel: None,
        });
        self.stats.irecvs += 1;
    }

    fn reap_recvs(&mut self) -> bool {
        if self.recvs.is_empty() {
            return false;
        }
        let done = match self.comms[0].testsome(&mut self.recvs) {
            Ok(d) => d,
            Err(e) => panic!("{}: testsome on receives: {e:?}", self.ctx_msg()),
        };
        let Some(mut done) = done else { return false };
        if done.is_empty() {
            return false;
        }
        done.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        for (i, st) in done {
            let mut r = self.recvs.swap_remove(i);
            let meta = self.metas.swap_remove(i);
            let buf = r.take_buffer().unwrap();
            self.recv_done(meta, st, buf);
        }
        self.last_activity = Instant::now();
        true
    }

    fn recv_done(&mut self, meta: RecvMeta, st: Status, buf: Vec<u8>) {
        let c = meta.ctx;
        match meta.kind {
            Kind::Any => self.any_out[c] -= 1,
            Kind::Src(s) => self.src_out[c][s] -= 1,
            Kind::Never => {
                assert!(
                    st.cancelled && meta.cancel == Some(true),
                    "{}: a receive on a tag nobody sends completed: {st:?}",
                    self.ctx_msg()
                );
            }
        }
        if st.cancelled {
            assert_eq!(
                meta.cancel,
                Some(true),
                "{}: cancelled status without a successful cancel",
                self.ctx_msg()
            );
            assert!(
                buf[..64].iter().all(|b| *b == MARK),
                "{}: a cancelled receive wrote into its buffer",
                self.ctx_msg()
            );
            if meta.kind != Kind::Never {
                self.pool.push(buf);
            }
            return;
        }
        assert_ne!(
            meta.cancel,
            Some(true),
            "{}: cancel said true but the receive got a message: {st:?}",
            self.ctx_msg()
        );
        if let Kind::Src(s) = meta.kind {
            assert_eq!(
                st.source,
                s as i32,
                "{}: exact-source receive",
                self.ctx_msg()
            );
        }
        self.accept(c, meta.post, st, &buf[..st.count]);
        self.pool.push(buf);
    }

    /// Checks one received message against the schedule and records it.
    fn accept(&mut self, c: usize, post: u64, st: Status, data: &[u8]) {
        let ctx = self.ctx_msg();
        assert_eq!(st.error, ErrorClass::Success, "{ctx}: {st:?}");
        assert!(!st.cancelled, "{ctx}: {st:?}");
        let src = usize::try_from(st.source).expect("source");
        assert!(src < self.n, "{ctx}: source {src}");
        assert_eq!(data.len(), st.count);
        assert!(
            self.remaining[c][src] > 0,
            "{ctx}: one message too many from {src} on communicator {c} ({st:?})"
        );
        self.remaining[c][src] -= 1;
        self.received[src] += 1;
        self.done += 1;
        let seq = if data.len() >= HDR {
            let magic = u32::from_le_bytes(data[0..4].try_into().unwrap());
            assert_eq!(magic, MAGIC, "{ctx}: magic of a message from {src}");
            let (hsrc, seq, len) = (u32_at(data, 4), u32_at(data, 8), u32_at(data, 12));
            assert_eq!(hsrc, src, "{ctx}: header source vs status source");
            assert_eq!(len, data.len(), "{ctx}: header length vs status count");
            let p = *self.plans[src]
                .get(seq)
                .unwrap_or_else(|| panic!("{ctx}: seq {seq} from {src} out of range"));
            assert_eq!(
                (p.dest, p.ctx, p.tag, p.len),
                (self.me, c, st.tag, data.len()),
                "{ctx}: message {seq} from {src} does not match the schedule"
            );
            let body = &data[HDR..];
            let h = u64::from_le_bytes(data[16..24].try_into().unwrap());
            assert_eq!(h, hash(body), "{ctx}: hash of message {seq} from {src}");
            let mut want = vec![0u8; body.len()];
            fill(src, seq, &mut want);
            assert!(want == body, "{ctx}: payload of message {seq} from {src}");
            Some(seq)
        } else {
            None
        };
        self.records.push(Record {
            post,
            ctx: c,
            src,
            tag: st.tag,
            len: data.len(),
            seq,
            tiny: if seq.is_none() {
                data.to_vec()
            } else {
                Vec::new()
            },
        });
    }

    /// iprobe with some wildcard combination on a random communicator;
    /// if a message is there, receive it one of four ways.
    fn probe_and_receive(&mut self) -> bool {
        let c = usize::from(self.rng.chance(300));
        let (src, tag) = match self.rng.below(3) {
            0 => (Source::Any, Tag::Any),
            1 => (Source::Rank(self.rng.below(self.n as u64) as i32), Tag::Any),
            _ => (Source::Any, Tag::Value(self.rng.below(TAGS) as i32)),
        };
        let comm = self.comms[c].clone();
        let Some(st) = comm.iprobe(src, tag).unwrap() else {
            return false;
        };
        let ctx = self.ctx_msg();
        assert!(st.count <= MAX_LEN, "{ctx}: probe {st:?}");
        if let Tag::Value(t) = tag {
            assert_eq!(st.tag, t, "{ctx}: iprobe tag");
        }
        if let Source::Rank(s) = src {
            assert_eq!(st.source, s, "{ctx}: iprobe source");
        }
        self.post_no += 1;
        let post = self.post_no;
        self.stats.probe_recvs += 1;
        let same = |got: &Status| {
            assert_eq!(
                (got.source, got.tag, got.count),
                (st.source, st.tag, st.count),
                "{ctx}: the receive of a probed message got another one"
            )
        };
        let mut rbuf = std::mem::take(&mut self.rbuf);
        match self.rng.below(4) {
            0 => {
                // Exact-size buffer.
                let got = comm.recv(&mut rbuf[..st.count], st.source, st.tag).unwrap();
                same(&got);
                self.accept(c, post, got, &rbuf[..got.count]);
            }
            1 => {
                let p = comm.probe(st.source, st.tag).unwrap();
                same(&p);
                let got = comm.recv(&mut rbuf, Source::Any, Tag::Any).unwrap();
                // One matcher gives a wildcard receive the oldest message
                // that has arrived, which is the probed one. Across
                // transports (fake nodes) "oldest" has no meaning: MPI
                // promises the probed message only to a receive with the
                // probe's source and tag.
                if (src, tag) == (Source::Any, Tag::Any) && !self.across_nodes {
                    same(&got);
                }
                self.accept(c, post, got, &rbuf[..got.count]);
            }
            2 => {
                let m = comm.mprobe(st.source, st.tag).unwrap();
                same(&m.status());
                let got = comm.mrecv(m, &mut rbuf).unwrap();
                same(&got);
                self.accept(c, post, got, &rbuf[..got.count]);
            }
            _ => {
                let m = comm
                    .improbe(st.source, Tag::Any)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{ctx}: improbe lost a probed message"));
                let buf = self.buffer();
                let mut r = comm.imrecv(m, buf).unwrap();
                let got = comm.wait(&mut r).unwrap();
                let buf = r.take_buffer().unwrap();
                self.accept(c, post, got, &buf[..got.count]);
                self.pool.push(buf);
            }
        }
        self.rbuf = rbuf;
        self.last_activity = Instant::now();
        true
    }

    /// Cancels one random outstanding receive (live or never-matching).
    fn cancel_one(&mut self, never_only: bool) {
        let cands: Vec<usize> = (0..self.metas.len())
            .filter(|&i| self.metas[i].cancel.is_none())
            .filter(|&i| !never_only || self.metas[i].kind == Kind::Never)
            .collect();
        if cands.is_empty() {
            return;
        }
        let i = cands[self.rng.below(cands.len() as u64) as usize];
        let ok = self.comms[0].cancel(&self.recvs[i]).unwrap();
        let kind = self.metas[i].kind;
        self.metas[i].cancel = Some(ok);
        match (kind, ok) {
            (Kind::Never, true) => self.stats.never_cancelled += 1,
            (Kind::Never, false) => panic!(
                "{}: cancel of a receive that cannot match said false",
                self.ctx_msg()
            ),
            (_, true) => self.stats.live_cancel_true += 1,
            (_, false) => self.stats.live_cancel_false += 1,
        }
    }

    fn step(&mut self) -> bool {
        let mut active = false;
        for _ in 0..2 {
            if self.next_seq < self.plans[self.me].len() && self.sends.len() < SEND_WINDOW {
                self.start_send();
                active = true;
            }
        }
        active |= self.reap_sends();
        let live = self.metas.iter().filter(|m| m.kind != Kind::Never).count();
        let c = usize::from(self.rng.chance(300));
        match self.rng.below(100) {
            0..=34 if live < RECV_WINDOW && self.can_post_any(c) => self.post(c, Kind::Any),
            35..=54 if live < RECV_WINDOW => {
                let s = self.rng.below(self.n as u64) as usize;
                if self.can_post_src(c, s) {
                    self.post(c, Kind::Src(s));
                }
            }
            55..=84 => active |= self.probe_and_receive(),
            85 | 86 => self.cancel_one(false),
            87 => {
                if self.metas.iter().filter(|m| m.kind == Kind::Never).count() < 2 {
                    self.post(c, Kind::Never);
                } else {
                    self.cancel_one(true);
                }
            }
            _ => {}
        }
        active |= self.reap_recvs();
        active
    }

    fn finished(&self) -> bool {
        self.done == self.expected
            && self.next_seq == self.plans[self.me].len()
            && self.sends.is_empty()
    }

    fn run(&mut self) {
        let t0 = Instant::now();
        while !self.finished() {
            if !self.step() {
                std::thread::yield_now();
            }
            if self.last_activity.elapsed() > STALL {
                panic!(
                    "{}: no progress for {STALL:?}: received {}/{} (remaining per ctx/src {:?}), \
                     sent {}/{}, {} sends outstanding, receives outstanding {:?}",
                    self.ctx_msg(),
                    self.done,
                    self.expected,
                    self.remaining,
                    self.next_seq,
                    self.plans[self.me].len(),
                    self.sends.len(),
                    self.metas
                );
            }
        }
        // Every live receive was matched (they were only posted when sure
        // to be); only never-matching ones (and cancelled live ones) are left.
        while self.reap_recvs() {}
        while let Some(i) = self.metas.iter().position(|m| m.cancel.is_none()) {
            let ok = self.comms[0].cancel(&self.recvs[i]).unwrap();
            self.metas[i].cancel = Some(ok);
            assert!(
                ok && self.metas[i].kind == Kind::Never,
                "{}: receive left at the end: {:?} (cancel said {ok})",
                self.ctx_msg(),
                self.metas[i]
            );
            self.stats.never_cancelled += 1;
        }
        let mut left = std::mem::take(&mut self.recvs);
        let metas = std::mem::take(&mut self.metas);
        let sts = self.comms[0].waitall(&mut left).unwrap();
        for ((mut r, meta), st) in left.into_iter().zip(metas).zip(sts) {
            let buf = r.take_buffer().unwrap();
            self.recv_done(meta, st, buf);
        }
        let elapsed = t0.elapsed();
        self.check_order();
        self.exchange_counts();
        let world = &self.comms[0];
        world.barrier().unwrap();
        for (c, comm) in self.comms.iter().enumerate() {
            assert!(
                comm.iprobe(Source::Any, Tag::Any).unwrap().is_none(),
                "{}: a message left over on communicator {c}",
                self.ctx_msg()
            );
        }
        eprintln!(
            "stress rank {}: {} sent ({} bytes), {} received in {elapsed:.2?}; {:?}",
            self.me, self.next_seq, self.stats.bytes, self.done, self.stats
        );
    }

    /// Per (ctx, source, tag), in the order the receives were posted: the
    /// messages are the schedule's, each once, in send order.
    fn check_order(&mut self) {
        let ctx = self.ctx_msg();
        let mut streams: HashMap<(usize, usize, i32), (Vec<usize>, usize)> = HashMap::new();
        for (s, p) in self.plans.iter().enumerate() {
            for (seq, m) in p.iter().enumerate().filter(|(_, m)| m.dest == self.me) {
                streams.entry((m.ctx, s, m.tag)).or_default().0.push(seq);
            }
        }
        self.records.sort_by_key(|r| r.post);
        for r in &self.records {
            let (seqs, next) = streams
                .get_mut(&(r.ctx, r.src, r.tag))
                .unwrap_or_else(|| panic!("{ctx}: unexpected stream in {r:?}"));
            let want = *seqs
                .get(*next)
                .unwrap_or_else(|| panic!("{ctx}: one message too many: {r:?}"));
            *next += 1;
            let p = self.plans[r.src][want];
            match r.seq {
                Some(seq) => assert_eq!(
                    seq, want,
                    "{ctx}: non-overtaking violated on (ctx {}, source {}, tag {}): got message {seq}, \
                     expected {want}",
                    r.ctx, r.src, r.tag
                ),
                None => {
                    assert_eq!(
                        r.len, p.len,
                        "{ctx}: short message on (ctx {}, source {}, tag {}) has the length of \
                         another one (expected message {want})",
                        r.ctx, r.src, r.tag
                    );
                    let mut w = vec![0u8; r.len];
                    fill(r.src, want, &mut w);
                    assert!(
                        w == r.tiny,
                        "{ctx}: short message on (ctx {}, source {}, tag {}) is not message {want}",
                        r.ctx,
                        r.src,
                        r.tag
                    );
                }
            }
        }
        for ((c, s, t), (seqs, next)) in &streams {
            assert_eq!(
                *next,
                seqs.len(),
                "{ctx}: stream (ctx {c}, source {s}, tag {t}) incomplete"
            );
        }
    }

    /// Every rank's sent[dest] against every rank's received[src].
    fn exchange_counts(&self) {
        let n = self.n;
        let mut sent = vec![0i64; n * n];
        let mut recvd = vec![0i64; n * n];
        sent[self.me * n..(self.me + 1) * n].copy_from_slice(&self.sent);
        for s in 0..n {
            recvd[s * n + self.me] = self.received[s];
        }
        let (mut all_sent, mut all_recvd) = (vec![0i64; n * n], vec![0i64; n * n]);
        let world = &self.comms[0];
        world
            .allreduce(&sent, &mut all_sent, ReduceOp::Sum)
            .unwrap();
        world
            .allreduce(&recvd, &mut all_recvd, ReduceOp::Sum)
            .unwrap();
        for s in 0..n {
            for d in 0..n {
                assert_eq!(
                    all_sent[s * n + d],
                    all_recvd[s * n + d],
                    "{}: {s} -> {d}: sent vs received",
                    self.ctx_msg()
                );
                let planned = self.plans[s].iter().filter(|m| m.dest == d).count();
                assert_eq!(all_sent[s * n + d], planned as i64);
            }
        }
    }
}

fn role_stress(world: &Comm) {
    let seed: u64 = std::env::var(ENV_SEED).unwrap().parse().unwrap();
    let total: usize = std::env::var(ENV_MESSAGES)
        .ok()
        .map(|v| v.parse().unwrap())
        .unwrap_or(DEFAULT_MESSAGES);
    // A small attached buffer: bsend fills it and gets BsendBufferFull.
    world.attach_buffer(vec![0u8; BSEND_BUFFER]).unwrap();
    let threads: usize = std::env::var("TMX_STRESS_THREADS").map_or(1, |v| v.parse().unwrap());
    if threads <= 1 {
        let mut rank = Rank::new([world.clone(), world.dup().unwrap()], seed, total);
        rank.run();
    } else {
        // Each thread runs its own schedule on its own two communicators
        // (created here, in the same order on every rank), all through the
        // one device at once; the attached bsend buffer is shared.
        let comms: Vec<[Comm; 2]> = (0..threads)
            .map(|_| [world.dup().unwrap(), world.dup().unwrap()])
            .collect();
        let handles: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(t, c)| {
                let seed = seed ^ splitmix(0x7EAD_0000 + t as u64);
                std::thread::spawn(move || Rank::new(c, seed, total / threads).run())
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
    let back = world.detach_buffer().unwrap();
    assert_eq!(back.len(), BSEND_BUFFER);
}

/// Many receives posted at once, every one able to match every message
/// of rank 0 (`TMX_STRESS_POSTED` of them):
///
/// - without `TMX_STRESS_POSTED_CANCEL`: ANY_SOURCE and exact-source
///   receives alternate; the k-th posted receive must get the k-th message;
/// - with `TMX_STRESS_POSTED_CANCEL=1`: every third receive is cancelled
///   before anything is sent (each must report cancelled, its buffer
///   untouched), then rank 0 sends one message per remaining receive,
///   which must get them in order, nothing lost or doubled.
fn role_many_posted(w: &Comm) {
    let n_posted: usize = std::env::var("TMX_STRESS_POSTED").unwrap().parse().unwrap();
    let cancel = std::env::var_os("TMX_STRESS_POSTED_CANCEL").is_some();
    let t0 = Instant::now();
    let (me, peer) = (w.rank(), 1 - w.rank());
    if me == 0 {
        let mut go = [0u8; 4];
        let st = w.recv(&mut go, peer, 99).unwrap();
        assert_eq!(st.count, 4);
        for k in 0..u32::from_le_bytes(go) as usize {
            let mut m = (k as u32).to_le_bytes().to_vec();
            m.push(0x77);
            w.send(&m, peer, (k % 5) as i32).unwrap();
        }
        // Stay in point-to-point until rank 1 has everything: a blocking
        // send may complete with its header still staged (ring full), and
        // only progress publishes it (see `finalize_publishes_staged_sends`).
        w.recv(&mut go, peer, 100).unwrap();
        return;
    }
    let mut reqs: Vec<Request> = (0..n_posted)
        .map(|k| {
            if !cancel && k % 3 == 1 {
                w.irecv(vec![0xA5u8; 8], peer, Tag::Any).unwrap()
            } else {
                w.irecv(vec![0xA5u8; 8], Source::Any, Tag::Any).unwrap()
            }
        })
        .collect();
    let cancelled = |k: usize| cancel && k % 3 == 0;
    let mut live = 0u32;
    for (k, r) in reqs.iter().enumerate() {
        if cancelled(k) {
            assert!(w.cancel(r).unwrap(), "cancel of unmatched receive {k}");
        } else {
            live += 1;
        }
    }
    w.send(&live.to_le_bytes(), peer, 99).unwrap();
    let sts = wait_all_within(
        w,
        &mut reqs,
        Duration::from_secs(20),
        "many posted receives",
    );
    let mut next = 0usize;
    for (k, (r, st)) in reqs.iter_mut().zip(sts).enumerate() {
        let b = r.take_buffer().unwrap();
        if cancelled(k) {
            assert!(st.cancelled, "receive {k} was cancelled");
            assert_eq!(b, vec![0xA5u8; 8]);
            continue;
        }
        assert!(!st.cancelled);
        assert_eq!((st.source, st.tag, st.count), (peer, (next % 5) as i32, 5));
        assert_eq!(
            u32::from_le_bytes(b[..4].try_into().unwrap()) as usize,
            next
        );
        assert_eq!(b[4..], [0x77, 0xA5, 0xA5, 0xA5]);
        next += 1;
    }
    assert_eq!(next, live as usize);
    assert!(w.iprobe(Source::Any, Tag::Any).unwrap().is_none());
    w.send(b"done", peer, 100).unwrap();
    eprintln!("many_posted: {n_posted} receives in {:.2?}", t0.elapsed());
}

/// Cancel of sends nobody has received yet (inline, eager, CMA-sized):
/// whatever `cancel` answers must be true of the delivery. A send
/// reported cancelled never arrives; one reported not cancelled arrives
/// exactly once, intact. A marker sent afterwards on the same pair tells
/// the receiver that everything before it has been seen (non-overtaking).
fn role_send_cancel(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    let sizes = [8usize, 5000, 3 << 20];
    for round in 0..3usize {
        if me == 0 {
            let reqs: Vec<Request> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| {
                    let mut m = vec![0u8; len];
                    fill(round, i, &mut m);
                    w.isend(m, peer, i as i32).unwrap()
                })
                .collect();
            let answers: Vec<u8> = reqs
                .iter()
                .map(|r| u8::from(w.cancel(r).unwrap()))
                .collect();
            let mut reqs = reqs;
            let sts = w.waitall(&mut reqs).unwrap();
            for (st, a) in sts.iter().zip(&answers) {
                assert_eq!(st.cancelled, *a == 1, "status.cancelled vs cancel's answer");
            }
            w.send(&answers, peer, 50).unwrap();
        } else {
            let mut answers = [0u8; 3];
            let mut buf = vec![0u8; 3 << 20];
            let mut seen = [0usize; 3];
            loop {
                let st = w.recv(&mut buf, peer, Tag::Any).unwrap();
                if st.tag == 50 {
                    answers.copy_from_slice(&buf[..3]);
                    break;
                }
                let i = st.tag as usize;
                seen[i] += 1;
                let mut want = vec![0u8; sizes[i]];
                fill(round, i, &mut want);
                assert!(buf[..st.count] == want[..], "payload of send {i}");
            }
            for i in 0..3 {
                assert_eq!(
                    seen[i],
                    1 - answers[i] as usize,
                    "round {round}, send {i} of {} bytes: cancel said {}, delivered {} times",
                    sizes[i],
                    answers[i] == 1,
                    seen[i]
                );
            }
        }
        w.barrier().unwrap();
    }
}

/// Waits for every request with a deadline, so that a lost message fails
/// with a diagnostic instead of running into the job timeout.
fn wait_all_within(w: &Comm, reqs: &mut [Request], limit: Duration, what: &str) -> Vec<Status> {
    let deadline = Instant::now() + limit;
    while !reqs.iter().all(|r| r.is_complete()) {
        w.device_check(false).unwrap();
        if Instant::now() > deadline {
            let pending: Vec<usize> = (0..reqs.len())
                .filter(|&k| !reqs[k].is_complete())
                .collect();
            panic!(
                "{what}: {} of {} receives still pending after {limit:?} (first: {:?}); \
                 iprobe(ANY, ANY) = {:?}",
                pending.len(),
                reqs.len(),
                &pending[..pending.len().min(8)],
                w.iprobe(Source::Any, Tag::Any).unwrap()
            );
        }
        std::thread::yield_now();
    }
    w.waitall(reqs).unwrap()
}

/// A receive is cancelled, then more messages than the header ring has
/// slots (`TMX_SHMEM_RING_SLOTS=4`) come from the peer: every one must be
/// received. `TMX_STRESS_CANCEL_MODE`: `lone` (an unmatched ANY_SOURCE
/// receive is cancelled and completed first, then the receives are
/// posted), `first_of_many` (all receives posted, then the first one
/// cancelled), `exact_source` (like `lone` with an exact-source receive),
/// `blocking` (like `lone`, then blocking receives).
fn role_cancel_then_ring(w: &Comm) {
    const M: usize = 9;
    let mode = std::env::var("TMX_STRESS_CANCEL_MODE").unwrap();
    let (me, peer) = (w.rank(), 1 - w.rank());
    if me == 0 {
        let mut go = [0u8; 1];
        w.recv(&mut go, peer, 99).unwrap();
        for k in 0..M {
            w.send(&(k as u32).to_le_bytes(), peer, 1).unwrap();
        }
        // Progress until rank 1 has everything (staged headers, see
        // `finalize_publishes_staged_sends`).
        w.barrier().unwrap();
        return;
    }
    let check = |k: usize, st: &Status, b: &[u8]| {
        assert_eq!(
            (st.source, st.tag, st.count),
            (peer, 1, 4),
            "{mode}: message {k}"
        );
        assert_eq!(
            u32::from_le_bytes(b[..4].try_into().unwrap()) as usize,
            k,
            "{mode}: order"
        );
    };
    let cancel_lone = |source: Source| {
        let mut r = w.irecv(vec![0u8; 4], source, Tag::Any).unwrap();
        assert!(
            w.cancel(&r).unwrap(),
            "{mode}: cancel of an unmatched receive"
        );
        assert!(w.wait(&mut r).unwrap().cancelled);
    };
    match mode.as_str() {
        "lone" | "exact_source" => {
            cancel_lone(if mode == "lone" {
                Source::Any
            } else {
                Source::Rank(peer)
            });
            let mut reqs: Vec<Request> = (0..M)
                .map(|_| w.irecv(vec![0u8; 4], Source::Any, Tag::Any).unwrap())
                .collect();
            w.send(&[1], peer, 99).unwrap();
            let sts = wait_all_within(w, &mut reqs, Duration::from_secs(10), &mode);
            for (k, (r, st)) in reqs.iter_mut().zip(sts).enumerate() {
                check(k, &st, &r.take_buffer().unwrap());
            }
        }
        "first_of_many" => {
            let mut reqs: Vec<Request> = (0..=M)
                .map(|_| w.irecv(vec![0u8; 4], Source::Any, Tag::Any).unwrap())
                .collect();
            assert!(w.cancel(&reqs[0]).unwrap());
            w.send(&[1], peer, 99).unwrap();
            let sts = wait_all_within(w, &mut reqs, Duration::from_secs(10), &mode);
            assert!(sts[0].cancelled);
            for (k, (r, st)) in reqs.iter_mut().zip(sts).enumerate().skip(1) {
                check(k - 1, &st, &r.take_buffer().unwrap());
            }
        }
        "blocking" => {
            cancel_lone(Source::Any);
            w.send(&[1], peer, 99).unwrap();
            for k in 0..M {
                let deadline = Instant::now() + Duration::from_secs(10);
                while w.iprobe(Source::Any, Tag::Any).unwrap().is_none() {
                    assert!(
                        Instant::now() < deadline,
                        "{mode}: message {k} never arrived"
                    );
                    std::thread::yield_now();
                }
                let mut b = [0u8; 4];
                let st = w.recv(&mut b, Source::Any, Tag::Any).unwrap();
                check(k, &st, &b);
            }
        }
        other => panic!("unknown mode {other}"),
    }
    w.barrier().unwrap();
}

/// Rank 0 sends more small messages than the header ring holds with
/// blocking sends (they complete once copied; the headers that do not fit
/// wait in rank 0's outbox) and finalizes at once; rank 1 starts receiving
/// only later. Every completed send must still be delivered: finalize must
/// publish staged headers before it blocks in the PMI barrier.
fn role_finalize_staged(w: &Comm) {
    const M: usize = 9; // > TMX_SHMEM_RING_SLOTS = 4
    let (me, peer) = (w.rank(), 1 - w.rank());
    if me == 0 {
        for k in 0..M {
            w.send(&(k as u32).to_le_bytes(), peer, 1).unwrap();
        }
        return; // straight into finalize
    }
    std::thread::sleep(Duration::from_millis(300));
    for k in 0..M {
        let deadline = Instant::now() + Duration::from_secs(10);
        while w.iprobe(peer, 1).unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "message {k} of {M} never arrived: the sender is in finalize with its header unpublished"
            );
            std::thread::yield_now();
        }
        let mut b = [0u8; 4];
        let st = w.recv(&mut b, peer, 1).unwrap();
        assert_eq!((st.count, u32::from_le_bytes(b) as usize), (4, k));
    }
}

// ------------------------------------------------------------- parent

/// libtest's entry into a rank: does nothing in the parent test process
/// (no role set); in a rank started by `stress_*`, runs the role.
#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    // `TMX_ADI_TEST_THREADS=funneled`: the device owned by this thread
    // (`init_thread(Funneled)`, no core lock).
    let world = match std::env::var("TMX_ADI_TEST_THREADS").as_deref() {
        Ok("funneled") => adi::init_thread(adi::ThreadLevel::Funneled).unwrap().0,
        _ => adi::init().unwrap(),
    };
    match role.as_str() {
        "stress" => role_stress(&world),
        "many_posted" => role_many_posted(&world),
        "send_cancel" => role_send_cancel(&world),
        "cancel_then_ring" => role_cancel_then_ring(&world),
        "finalize_staged" => role_finalize_staged(&world),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

fn seed() -> u64 {
    match std::env::var(ENV_SEED) {
        Ok(v) => v.parse().expect("TMX_STRESS_SEED must be a decimal u64"),
        Err(_) => splitmix(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                ^ u64::from(std::process::id()),
        ),
    }
}

/// The test's transport settings, with `overrides` (variables, or
/// lower-case `TMX_SHMEM_TUNE` keys) replacing or adding some; variables
/// set in the caller's environment win over both (to explore other sizes
/// by hand; a caller's `TMX_SHMEM_TUNE` replaces the test's whole string).
fn transport_env(overrides: &[(&str, &str)]) -> Vec<(String, String)> {
    let eager = EAGER_BYTES.to_string();
    let cma = CMA_THRESHOLD.to_string();
    let prepost = PREPOST_MIN.to_string();
    let split = CMA_SPLIT.to_string();
    let mut tune: Vec<(&str, &str)> = vec![
        ("cma_threshold", &cma),
        ("cma_split", &split),
        ("prepost_min", &prepost),
    ];
    let mut env: Vec<(&str, &str)> = vec![
        ("TMX_SHMEM_RING_SLOTS", "4"),
        ("TMX_SHMEM_EAGER_BYTES", &eager),
    ];
    for (k, v) in overrides {
        // Lower-case names are keys of `TMX_SHMEM_TUNE`.
        let list = if k.starts_with("TMX_") {
            &mut env
        } else {
            &mut tune
        };
        list.retain(|(e, _)| e != k);
        list.push((k, v));
    }
    let tune = tune
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    env.push(("TMX_SHMEM_TUNE", &tune));
    env.into_iter()
        .filter(|(k, _)| std::env::var_os(k).is_none())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run_stress(name: &str, overrides: &[(&str, &str)], messages: usize) {
    let seed = seed();
    let mut env = transport_env(overrides);
    env.push((ENV_SEED.to_string(), seed.to_string()));
    let messages = std::env::var(ENV_MESSAGES).unwrap_or_else(|_| messages.to_string());
    env.push((ENV_MESSAGES.to_string(), messages.clone()));
    eprintln!("{name}: {messages} messages, seed {seed} (rerun with {ENV_SEED}={seed}), transport {env:?}");
    let code = common::launch("stress", RANKS, &env, Duration::from_secs(110));
    assert_eq!(
        code, 0,
        "{name} failed with seed {seed}: rerun with {ENV_SEED}={seed} cargo test -p adi --test stress {name} -- --nocapture"
    );
}

/// 4 ranks, 10⁵ messages, CMA as the machine allows (single copy above
/// 8 KiB), rings of 4 slots, a 16 KiB eager area.
#[test]
fn stress_4_ranks_cma() {
    run_stress("stress_4_ranks_cma", &[], DEFAULT_MESSAGES);
}

/// The same with replies and both-ways traffic by CMA from 129 bytes
/// (`TMX_SHMEM_TUNE` keys `cma_reply`, `cma_duplex`, 6 KiB by default): many
/// messages of eager sizes go by CMA, blocking sends of up to 1 KiB among
/// them, which must complete before they are matched (unexpected ones are
/// read aside once the receiver idles). Without that the job hangs.
#[test]
fn stress_4_ranks_cma_replies() {
    run_stress(
        "stress_4_ranks_cma_replies",
        &[("cma_reply", "128"), ("cma_duplex", "128")],
        DEFAULT_MESSAGES,
    );
}

/// The same without CMA: messages beyond the 16 KiB eager area travel as
/// eager fragments of 4 KiB.
#[test]
fn stress_4_ranks_without_cma() {
    run_stress(
        "stress_4_ranks_without_cma",
        &[("TMX_SHMEM_CMA", "off")],
        DEFAULT_MESSAGES,
    );
}

/// The single-threaded schedule under `init_thread(Funneled)`: the core
/// is reached without its lock.
#[test]
fn stress_4_ranks_funneled() {
    run_stress(
        "stress_4_ranks_funneled",
        &[("TMX_ADI_TEST_THREADS", "funneled")],
        DEFAULT_MESSAGES,
    );
}

/// Across two transports: the 4 ranks split into 2 fake nodes
/// (`adi::ENV_TEST_NODES`), ranks 0–1 and 2–3 each on their own shared
/// memory, the other node's through the socket test double. Every
/// `ANY_SOURCE` receive is posted to both transports, and the messages of
/// both race for it (`TMX_ADI_COUNTERS=1` shows both kinds of win). Fewer
/// messages: the double is a slow transport.
#[test]
fn stress_4_ranks_across_nodes() {
    run_stress(
        "stress_4_ranks_across_nodes",
        &[(adi::ENV_TEST_NODES, "2")],
        40_000,
    );
}

/// Two threads per rank, each with its own schedule on its own pair of
/// communicators, through the one device at once.
#[test]
fn stress_4_ranks_2_threads() {
    run_stress(
        "stress_4_ranks_2_threads",
        &[("TMX_STRESS_THREADS", "2")],
        40_000,
    );
}

/// Extreme backpressure and the prepost path: one-slot header rings, a
/// 4 KiB eager area (so most messages above 4 KiB are CMA or staged), and
/// exact-source receives of 1 KiB or more advertised to their senders
/// (prepost-direct). Fewer messages: every one of them waits for a slot.
#[test]
fn stress_4_ranks_one_slot_rings_prepost() {
    run_stress(
        "stress_4_ranks_one_slot_rings_prepost",
        &[
            ("TMX_SHMEM_RING_SLOTS", "1"),
            ("TMX_SHMEM_EAGER_BYTES", "4096"),
            ("prepost_min", "1024"),
        ],
        20_000,
    );
}

fn many_posted(posted: usize, cancel: bool, ring_slots: &str) {
    // The caller's environment wins (to explore other sizes by hand).
    let var = |k: &str, v: String| (k.to_string(), std::env::var(k).unwrap_or(v));
    let mut env = vec![
        var("TMX_STRESS_POSTED", posted.to_string()),
        var("TMX_SHMEM_RING_SLOTS", ring_slots.to_string()),
    ];
    if cancel {
        env.push(("TMX_STRESS_POSTED_CANCEL".to_string(), "1".to_string()));
    }
    let code = common::launch("many_posted", 2, &env, Duration::from_secs(60));
    assert_eq!(
        code, 0,
        "many_posted {posted} cancel={cancel} ring={ring_slots}"
    );
}

/// 20 000 receives posted before their messages (ANY_SOURCE and exact
/// source alternating): matched in posting order.
#[test]
fn many_posted_receives_2_ranks() {
    many_posted(20_000, false, "64");
}

/// 8 receives posted, 3 cancelled, 5 messages through a 4-slot ring.
#[test]
fn posted_receives_some_cancelled_2_ranks() {
    many_posted(8, true, "4");
}

/// The same with 6 000 receives and the default ring.
#[test]
fn many_posted_receives_some_cancelled_2_ranks() {
    many_posted(6_000, true, "64");
}

#[test]
fn send_cancel_matches_delivery_2_ranks() {
    let code = common::launch("send_cancel", 2, &[], Duration::from_secs(60));
    assert_eq!(code, 0);
}

fn cancel_then_ring(mode: &str) {
    let env = [
        ("TMX_SHMEM_RING_SLOTS".to_string(), "4".to_string()),
        ("TMX_STRESS_CANCEL_MODE".to_string(), mode.to_string()),
    ];
    let code = common::launch("cancel_then_ring", 2, &env, Duration::from_secs(60));
    assert_eq!(code, 0, "cancel_then_ring {mode}");
}

#[test]
fn cancelled_any_source_receive_then_more_messages_than_ring_slots() {
    cancel_then_ring("lone");
}

#[test]
fn cancelled_first_of_many_receives_then_more_messages_than_ring_slots() {
    cancel_then_ring("first_of_many");
}

#[test]
fn cancelled_exact_source_receive_then_more_messages_than_ring_slots() {
    cancel_then_ring("exact_source");
}

#[test]
fn cancelled_receive_then_blocking_receives_beyond_ring_slots() {
    cancel_then_ring("blocking");
}

#[test]
fn finalize_publishes_staged_sends() {
    let env = [("TMX_SHMEM_RING_SLOTS".to_string(), "4".to_string())];
    let code = common::launch("finalize_staged", 2, &env, Duration::from_secs(60));
    assert_eq!(code, 0);
}
