//! Point-to-point across two transports: the ranks split into fake nodes
//! (`adi::ENV_TEST_NODES`), each fake node on its own shared memory, the
//! other node's ranks reached through the socket test double. The focus is
//! what only exists with two transports: `ANY_SOURCE` receives on a
//! communicator whose members span them (posted to both, the first match
//! wins, the other post withdrawn), with messages of both transports
//! racing for the same receives, cancels of such receives, and
//! communicators that span the transports or stay on one.
//!
//! The multi-rank cases launch this binary as the ranks (see
//! `common::launch`); the `rank_entry_point` test is what each rank runs.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::{Comm, Request, Source, Tag};
use std::collections::HashMap;
use std::time::Duration;

/// Messages each sender sends per phase.
const PER: usize = 400;
/// The receiver's window of posted receives.
const WINDOW: usize = 48;

/// The largest message.
const MAX: usize = 160_000;

/// A message's payload: its sender (communicator rank), its sequence
/// number from that sender, and padding to a length that varies: mostly
/// small (inline and eager), one in 40 large (CMA, or fragments that a
/// receive is bound to while they arrive).
fn payload(src: i32, seq: usize) -> Vec<u8> {
    let len = if seq % 40 == 9 {
        MAX - seq
    } else {
        8 + (seq * 37 + src as usize * 11) % 3000
    };
    let mut v = vec![(seq % 251) as u8; len];
    v[..4].copy_from_slice(&(src as u32).to_le_bytes());
    v[4..8].copy_from_slice(&(seq as u32).to_le_bytes());
    v
}

/// The sender and sequence number a payload carries, checked against its
/// status and its padding.
fn parse(st: &adi::Status, data: &[u8]) -> (i32, usize) {
    let src = u32::from_le_bytes(data[..4].try_into().unwrap()) as i32;
    let seq = u32::from_le_bytes(data[4..8].try_into().unwrap()) as usize;
    assert_eq!(src, st.source, "the status names the sender");
    assert_eq!(data, &payload(src, seq)[..], "payload of {src}#{seq}");
    (src, seq)
}

/// What the receiver saw, in the order its receives were posted: every
/// message exactly once, and per sender in sending order (non-overtaking:
/// of two receives that can take messages from one sender, the one posted
/// first gets the earlier message).
#[derive(Default)]
struct Seen {
    next: HashMap<i32, usize>,
}

impl Seen {
    fn take(&mut self, src: i32, seq: usize) {
        let next = self.next.entry(src).or_default();
        assert_eq!(
            seq, *next,
            "message {seq} from {src} taken out of order (expected {next})"
        );
        *next += 1;
    }

    fn all(&self, senders: &[i32], per: usize) {
        for s in senders {
            assert_eq!(self.next.get(s).copied().unwrap_or(0), per, "from {s}");
        }
    }
}

/// Every sender sends `PER` messages with `tag` to rank 0 of `c`, a few in
/// synchronous mode; rank 0 receives them with `recv`.
fn send_phase(c: &Comm, tag: i32) {
    let mut reqs = Vec::new();
    for seq in 0..PER {
        let data = payload(c.rank(), seq);
        if seq % 50 == 7 {
            c.ssend(&data, 0, tag).unwrap();
        } else if seq % 3 == 0 {
            reqs.push(c.isend(data, 0, tag).unwrap());
        } else {
            c.send(&data, 0, tag).unwrap();
        }
    }
    c.waitall(&mut reqs).unwrap();
}

/// Windows of nonblocking `ANY_SOURCE` receives, posted while the senders
/// of both transports send: each receive is posted to both transports and
/// taken by whichever message comes first.
fn recv_windows(c: &Comm, tag: i32, senders: &[i32]) {
    let total = PER * senders.len();
    let mut seen = Seen::default();
    let mut got = 0;
    while got < total {
        let n = WINDOW.min(total - got);
        let mut reqs: Vec<Request> = (0..n)
            .map(|_| c.irecv(vec![0u8; MAX], Source::Any, tag).unwrap())
            .collect();
        let sts = c.waitall(&mut reqs).unwrap();
        for (r, st) in reqs.iter_mut().zip(&sts) {
            let b = r.take_buffer().unwrap();
            let (src, seq) = parse(st, &b[..st.count]);
            seen.take(src, seq);
        }
        got += n;
    }
    seen.all(senders, PER);
}

/// Receives posted in an order that mixes `ANY_SOURCE` with exact
/// sources, taken as they complete (`waitany`): non-overtaking holds
/// between them.
fn recv_mixed(c: &Comm, tag: i32, senders: &[i32]) {
    let total = PER * senders.len();
    let mut seen = Seen::default();
    let mut left: HashMap<i32, usize> = senders.iter().map(|s| (*s, PER)).collect();
    let mut got = 0;
    let mut k = 0usize;
    while got < total {
        // Post a window: an exact-source receive only where its source
        // still has a message for it even if every ANY_SOURCE receive of
        // the window takes one of that source's, ANY_SOURCE ones for the
        // rest.
        let mut posted: Vec<(Request, Option<i32>)> = Vec::new();
        let budget = WINDOW.min(total - got);
        let mut exact_of: HashMap<i32, usize> = HashMap::new();
        let mut any = 0usize;
        for _ in 0..budget {
            k += 1;
            let exact = senders[k % senders.len()];
            let taken = exact_of.get(&exact).copied().unwrap_or(0) + any;
            if k % 3 != 0 && left[&exact] > taken {
                *exact_of.entry(exact).or_default() += 1;
                posted.push((c.irecv(vec![0u8; MAX], exact, tag).unwrap(), Some(exact)));
            } else {
                any += 1;
                posted.push((c.irecv(vec![0u8; MAX], Source::Any, tag).unwrap(), None));
            }
        }
        // Completion order is not posting order; check non-overtaking in
        // posting order once all are in.
        let mut reqs: Vec<Request> = posted
            .iter_mut()
            .map(|(r, _)| std::mem::replace(r, Request::null()))
            .collect();
        let mut done = vec![None; reqs.len()];
        for _ in 0..reqs.len() {
            let (i, st) = c.waitany(&mut reqs).unwrap().unwrap();
            let b = reqs[i].take_buffer().unwrap();
            done[i] = Some(parse(&st, &b[..st.count]));
        }
        for (d, (_, exact)) in done.iter().zip(&posted) {
            let (src, seq) = d.unwrap();
            if let Some(e) = exact {
                assert_eq!(
                    src, *e,
                    "an exact-source receive took another source's message"
                );
            }
            seen.take(src, seq);
            *left.get_mut(&src).unwrap() -= 1;
        }
        got += budget;
    }
    seen.all(senders, PER);
}

/// `ANY_SOURCE` receives cancelled while messages of both transports
/// arrive: a cancelled receive takes nothing, one that cannot be cancelled
/// has its message, and what the cancelled ones did not take is received
/// afterwards, each message exactly once.
fn recv_cancels(c: &Comm, tag: i32, senders: &[i32]) {
    let total = PER * senders.len();
    let mut seen = Seen::default();
    let mut got = 0;
    let mut cancelled = 0usize;
    let mut round = 0usize;
    while got < total {
        round += 1;
        let n = WINDOW.min(total - got);
        let mut reqs: Vec<Request> = (0..n)
            .map(|_| c.irecv(vec![0u8; MAX], Source::Any, tag).unwrap())
            .collect();
        // Let some messages in, then cancel every other receive from the
        // back (the front ones are the likeliest to have matched).
        for _ in 0..round % 4 {
            c.device_check(false).unwrap();
        }
        let mut tried = vec![false; n];
        for i in (0..n).rev().step_by(2) {
            c.cancel(&reqs[i]).unwrap();
            tried[i] = true;
        }
        let sts = c.waitall(&mut reqs).unwrap();
        // In posting order: the receives that took a message.
        for (i, (r, st)) in reqs.iter_mut().zip(&sts).enumerate() {
            let b = r.take_buffer().unwrap();
            if st.cancelled {
                assert!(tried[i], "a receive cancelled without a cancel");
                assert_eq!(st.count, 0, "a cancelled receive took data");
                assert!(
                    b.iter().all(|x| *x == 0),
                    "a cancelled receive's buffer was written"
                );
                cancelled += 1;
                continue;
            }
            let (src, seq) = parse(st, &b[..st.count]);
            seen.take(src, seq);
            got += 1;
        }
    }
    seen.all(senders, PER);
    assert_eq!(
        c.iprobe(Source::Any, tag).unwrap(),
        None,
        "a message left over"
    );
    eprintln!("  cancels: {cancelled} receives cancelled in {round} windows");
}

/// Blocking `ANY_SOURCE` receives and matched probes over both
/// transports.
fn recv_blocking_and_probes(c: &Comm, tag: i32, senders: &[i32]) {
    let total = PER * senders.len();
    let mut seen = Seen::default();
    let mut buf = vec![0u8; MAX];
    for k in 0..total {
        let (st, data) = match k % 3 {
            0 => {
                let st = c.recv(&mut buf, Source::Any, tag).unwrap();
                (st, buf[..st.count].to_vec())
            }
            1 => {
                let m = c.mprobe(Source::Any, Tag::Value(tag)).unwrap();
                let p = m.status();
                let st = c.mrecv(m, &mut buf).unwrap();
                assert_eq!((st.source, st.tag, st.count), (p.source, p.tag, p.count));
                (st, buf[..st.count].to_vec())
            }
            _ => {
                let p = c.probe(Source::Any, tag).unwrap();
                // The probed message goes to a receive with its source.
                let st = c.recv(&mut buf, p.source, tag).unwrap();
                assert_eq!((st.source, st.count), (p.source, p.count), "probed message");
                (st, buf[..st.count].to_vec())
            }
        };
        let (src, seq) = parse(&st, &data);
        seen.take(src, seq);
    }
    seen.all(senders, PER);
}

/// A receiving phase: the communicator, the tag, the senders.
type Phase = fn(&Comm, i32, &[i32]);

/// 4 ranks on 2 fake nodes (0–1 and 2–3). Rank 0 receives from rank 1
/// (its node's shared memory), ranks 2 and 3 (the double) and itself
/// (self-sends through shared memory) in every phase; then the same on
/// sub-communicators that span the transports or stay on one.
fn role_any_source_races(w: &Comm) {
    let me = w.rank();
    assert_eq!(w.size(), 4);
    let senders = [0, 1, 2, 3];
    let phases: [(i32, Phase); 4] = [
        (11, recv_windows),
        (12, recv_mixed),
        (13, recv_cancels),
        (14, recv_blocking_and_probes),
    ];
    for (tag, receive) in phases {
        if me == 0 {
            // Rank 0's own messages: sent ahead, eager (no peer waits).
            let mut own = Vec::new();
            for seq in 0..PER {
                own.push(w.isend(payload(0, seq), 0, tag).unwrap());
            }
            receive(w, tag, &senders);
            w.waitall(&mut own).unwrap();
        } else {
            send_phase(w, tag);
        }
        w.barrier().unwrap();
    }
    // A communicator spanning the transports in another order (ranks 3,
    // 0, 2: rank 0 of it is world rank 3), and one on one node only.
    let span = w.split(
        if me == 1 { 1 } else { 0 },
        match me {
            3 => 0,
            0 => 1,
            _ => 2,
        },
    );
    let span = span.unwrap().unwrap();
    if me != 1 {
        assert_eq!(span.size(), 3);
        if span.rank() == 0 {
            recv_windows(&span, 21, &[1, 2]);
        } else {
            send_phase(&span, 21);
        }
    }
    let node = w.split(me / 2, me).unwrap().unwrap();
    if node.rank() == 0 {
        recv_windows(&node, 22, &[1]);
    } else {
        send_phase(&node, 22);
    }
    w.barrier().unwrap();
    let c = w.counters();
    if me == 0 {
        eprintln!("  rank 0 counters: {c}");
        assert!(
            c.shared_recvs > 0,
            "ANY_SOURCE receives posted to both transports"
        );
        assert!(c.shared_remote_wins > 0, "the double's messages won some");
        assert!(
            c.shared_remote_wins < c.shared_recvs,
            "shared memory's messages won some"
        );
    }
    if me == 2 {
        assert!(c.remote_sends > 0, "{c}");
    }
}

#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    let world = match std::env::var("TMX_ADI_TEST_THREADS").as_deref() {
        Ok("funneled") => adi::init_thread(adi::ThreadLevel::Funneled).unwrap().0,
        _ => adi::init().unwrap(),
    };
    match role.as_str() {
        "any_source_races" => role_any_source_races(&world),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

fn across(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![(adi::ENV_TEST_NODES.to_string(), "2".to_string())];
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// `ANY_SOURCE` receives over two transports: windows, mixed with exact
/// sources, cancelled, blocking and probed, on world and on
/// sub-communicators.
#[test]
fn any_source_across_transports_4_ranks() {
    let code = common::launch(
        "any_source_races",
        4,
        &across(&[]),
        Duration::from_secs(240),
    );
    assert_eq!(code, 0);
}

/// Without CMA: the large messages of shared memory travel as eager
/// fragments, and a receive matched by the first is bound to the message
/// until the last arrives (a match the device sees only later: a remote
/// proposal meanwhile is withdrawn, not committed).
#[test]
fn any_source_across_transports_without_cma() {
    let code = common::launch(
        "any_source_races",
        4,
        &across(&[("TMX_SHMEM_CMA", "off")]),
        Duration::from_secs(240),
    );
    assert_eq!(code, 0);
}

/// The same under `init_thread(Funneled)` (the core without its lock),
/// with small header rings (backpressure on the shared-memory side).
#[test]
fn any_source_across_transports_funneled_small_rings() {
    let code = common::launch(
        "any_source_races",
        4,
        &across(&[
            ("TMX_ADI_TEST_THREADS", "funneled"),
            ("TMX_SHMEM_RING_SLOTS", "4"),
        ]),
        Duration::from_secs(240),
    );
    assert_eq!(code, 0);
}
