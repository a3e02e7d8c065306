//! `soft::Live` over loopback: endpoints in one process, and between two
//! processes (the binary is its own child, `TMX_VERBS_TEST_ROLE`): eager
//! traffic (one frame per message), a window of rendezvous and eager
//! messages whose READ requests wait for the unsent bytes, an 8 MiB
//! rendezvous that completes while the sender computes
//! without calling in (the helper thread serves the READ), and a peer
//! killed with SIGKILL, reported as a typed error within a second.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use tm_proto::{MatchSpec, Source, Tag};
use verbs_tm::soft::{Live, LiveConfig};
use verbs_tm::{Endpoint, EndpointConfig, Error, Finished, RecvStart, SendMode, SendStart};

const ROLE: &str = "TMX_VERBS_TEST_ROLE";
const EIGHT_MIB: usize = 8 << 20;

fn cfg() -> EndpointConfig {
    EndpointConfig {
        eager_max: 4096,
        ..EndpointConfig::default()
    }
}

fn live(job: u64, rank: u32) -> Endpoint<Live> {
    live_with(job, rank, |_| {})
}

fn live_with(job: u64, rank: u32, f: impl FnOnce(&mut LiveConfig)) -> Endpoint<Live> {
    let mut lc = LiveConfig::new(job, rank);
    lc.listen = "127.0.0.1:0".parse().unwrap();
    f(&mut lc);
    Endpoint::new(Live::new(lc).unwrap(), cfg(), rank, 2).unwrap()
}

fn spec(source: u32, tag: u32) -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: Source::Rank(source),
        tag: Tag::Value(tag),
    }
}

fn data(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as u8)
        .collect()
}

fn checksum(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Progresses until request `id` finishes (at most `limit`).
fn wait(ep: &mut Endpoint<Live>, id: u64, limit: Duration) -> Finished {
    let until = Instant::now() + limit;
    let mut done = Vec::new();
    loop {
        ep.progress().unwrap();
        ep.take_completions(&mut done);
        if let Some(i) = done.iter().position(|f| f.id == id) {
            return done.swap_remove(i);
        }
        assert!(Instant::now() < until, "request {id} did not finish");
        std::thread::yield_now();
    }
}

/// Progresses until every request of `ids` finishes; their completions in
/// the order of `ids`.
fn wait_all(ep: &mut Endpoint<Live>, ids: &[u64], limit: Duration) -> Vec<Finished> {
    let until = Instant::now() + limit;
    let mut done = Vec::new();
    while !ids
        .iter()
        .all(|id| done.iter().any(|f: &Finished| f.id == *id))
    {
        ep.progress().unwrap();
        ep.take_completions(&mut done);
        assert!(Instant::now() < until, "requests {ids:?} did not finish");
        std::thread::yield_now();
    }
    ids.iter()
        .map(|id| {
            let i = done.iter().position(|f| f.id == *id).unwrap();
            done.swap_remove(i)
        })
        .collect()
}

fn recv(ep: &mut Endpoint<Live>, s: MatchSpec, cap: usize) -> Finished {
    match ep.irecv(s, vec![0; cap]).unwrap() {
        RecvStart::Done(result, buf) => Finished {
            id: 0,
            send: false,
            result,
            buf,
        },
        RecvStart::Pending(id) => wait(ep, id, Duration::from_secs(60)),
    }
}

fn send(ep: &mut Endpoint<Live>, dest: u32, tag: u32, d: Vec<u8>, mode: SendMode) {
    if let SendStart::Pending(id) = ep.isend(dest, tag, 0, d, mode).unwrap() {
        let f = wait(ep, id, Duration::from_secs(60));
        f.result.unwrap();
    }
}

fn connect_pair(a: &mut Endpoint<Live>, b: &mut Endpoint<Live>) {
    let ba = a.address([1]).unwrap();
    let bb = b.address([0]).unwrap();
    a.connect(1, &bb).unwrap();
    b.connect(0, &ba).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while !(a.is_connected(1) && b.is_connected(0)) {
        a.progress().unwrap();
        b.progress().unwrap();
        assert!(Instant::now() < until, "handshake did not finish");
    }
}

// ------------------------------------------------------------ in process

fn in_process_pair() {
    let job = u64::from(std::process::id()) << 8;
    let mut a = live(job, 0);
    let mut b = live(job, 1);
    connect_pair(&mut a, &mut b);
    let thread = std::thread::spawn(move || {
        for (i, len) in [0usize, 5, 4096, 4097, 300_000].into_iter().enumerate() {
            let f = recv(&mut b, spec(0, i as u32), len);
            let st = f.result.unwrap();
            assert_eq!(st.len, len);
            assert_eq!(f.buf, data(i as u32, len));
        }
        let f = recv(&mut b, spec(0, 99), 16);
        assert_eq!(f.result.unwrap().len, 0);
        // The 300 KB READ response went straight into the receive buffer.
        let w = b.provider().wire_stats();
        assert!(w.direct >= 1, "{w}");
        b.finalize().unwrap()
    });
    for (i, len) in [0usize, 5, 4096, 4097, 300_000].into_iter().enumerate() {
        send(&mut a, 1, i as u32, data(i as u32, len), SendMode::Standard);
    }
    send(&mut a, 1, 99, Vec::new(), SendMode::Synchronous);
    let cb = thread.join().unwrap();
    assert!(cb.device_receives + cb.sw_reads + cb.offload.sw_matches >= 6);
    let ca = a.finalize().unwrap();
    assert_eq!(ca.rndv_sends, 3, "4097 B, 300 KB and the synchronous send");
}

/// Large blocking messages (a borrowed send, a receive that waits in
/// `recv_now`) reuse the endpoint's spare buffers: after the first, no
/// temporary is allocated on either side.
fn blocking_rendezvous_reuses_spares() {
    let job = (u64::from(std::process::id()) << 8) | 1;
    let mut a = live(job, 0);
    let mut b = live(job, 1);
    connect_pair(&mut a, &mut b);
    const N: u32 = 3;
    const LEN: usize = 200_000;
    let thread = std::thread::spawn(move || {
        for i in 0..N {
            let mut buf = vec![0u8; LEN];
            let until = Instant::now() + Duration::from_secs(60);
            let st = loop {
                b.progress().unwrap();
                if let Some(st) = b.recv_now(spec(0, i), &mut buf).unwrap() {
                    break st;
                }
                assert!(Instant::now() < until, "message {i} never came");
                std::thread::yield_now();
            };
            assert_eq!(st.len, LEN);
            assert!(buf == data(i, LEN), "message {i} corrupted");
        }
        let s = b.stats();
        b.finalize().unwrap();
        s
    });
    for i in 0..N {
        let d = data(i, LEN);
        if let Some(id) = a.send_borrowed(1, i, 0, &d, SendMode::Standard).unwrap() {
            let f = wait(&mut a, id, Duration::from_secs(60));
            f.result.unwrap();
            a.recycle(f.buf);
        }
    }
    let sb = thread.join().unwrap();
    let sa = a.stats();
    a.finalize().unwrap();
    assert_eq!(sa.rndv_sends, u64::from(N));
    assert_eq!(
        (sa.temps_allocated, sa.temps_reused),
        (1, u64::from(N) - 1),
        "sender: {sa}"
    );
    assert_eq!(
        (sb.temps_allocated, sb.temps_reused),
        (1, u64::from(N) - 1),
        "receiver: {sb}"
    );
}

/// A receive posted before its message arrives meets it in the device's
/// tag list: the run that reads the message executes the receive's ADD
/// first (in the other order the message is found unexpected: a software
/// match, a SYNC and a DEL of the posted buffer).
fn posted_receives_meet_their_messages() {
    let job = (u64::from(std::process::id()) << 8) | 3;
    // The helpers never run the device: every run is the owners'.
    let idle = |c: &mut LiveConfig| c.helper_idle = Duration::from_secs(30);
    let mut a = live_with(job, 0, idle);
    let mut b = live_with(job, 1, idle);
    connect_pair(&mut a, &mut b);
    const N: u32 = 8;
    for round in 0..N {
        // 2 KiB: offered to the tag list, sent eagerly.
        let RecvStart::Pending(r) = b.irecv(spec(0, round), vec![0; 2048]).unwrap() else {
            panic!("a receive before its message finished at once");
        };
        send(&mut a, 1, round, data(round, 2048), SendMode::Standard);
        // The frame is in b's socket before b runs its device again.
        std::thread::sleep(Duration::from_millis(5));
        let f = wait(&mut b, r, Duration::from_secs(10));
        assert_eq!(f.result.unwrap().len, 2048);
        assert_eq!(f.buf, data(round, 2048));
    }
    let c = b.stats();
    assert_eq!(c.device_receives, u64::from(N), "{c:?}");
    assert_eq!(c.offload.sw_matches, 0, "{c:?}");
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// Two connected endpoints of job `tag` with a 16 KiB eager limit and 8
/// send buffers whose helper threads stay idle for 30 s: only the owners
/// run the devices, so nothing reads a receiver's socket while it waits.
fn late_pair(tag: u64) -> (Endpoint<Live>, Endpoint<Live>) {
    let job = (u64::from(std::process::id()) << 8) | tag;
    let c = EndpointConfig {
        eager_max: 16 << 10,
        send_bufs: 8,
        ..EndpointConfig::default()
    };
    let ep = |rank: u32| {
        let mut lc = LiveConfig::new(job, rank);
        lc.listen = "127.0.0.1:0".parse().unwrap();
        lc.helper_idle = Duration::from_secs(30);
        Endpoint::new(Live::new(lc).unwrap(), c, rank, 2).unwrap()
    };
    let (mut a, mut b) = (ep(0), ep(1));
    connect_pair(&mut a, &mut b);
    (a, b)
}

/// Eager SENDs of 4 KiB and more leave from the send buffers: no copy
/// into the outbox (`in_place_bytes` counts every payload byte), and a
/// send buffer is reused only once its bytes were written: a burst of
/// distinct 16 KiB messages, far more than the send buffers and the socket
/// hold, arrives intact while the receiver starts late.
fn sends_leave_from_the_send_buffers() {
    let (mut a, mut b) = late_pair(4);
    const N: u32 = 1000;
    const LEN: usize = 16 << 10;
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| data(i, LEN)).collect();
    let (posted, start) = std::sync::mpsc::channel::<()>();
    let expect = msgs.clone();
    let thread = std::thread::spawn(move || {
        // Idle until every send was posted: the socket fills up.
        start.recv().unwrap();
        for (i, m) in expect.iter().enumerate() {
            let f = recv(&mut b, spec(0, i as u32), LEN);
            assert_eq!(f.result.unwrap().len, LEN);
            assert!(f.buf == *m, "message {i} changed on the way");
        }
        b.finalize().unwrap()
    });
    let w0 = a.provider().wire_stats();
    let mut ids = Vec::new();
    for (i, m) in msgs.into_iter().enumerate() {
        if let SendStart::Pending(id) = a.isend(1, i as u32, 0, m, SendMode::Standard).unwrap() {
            ids.push(id);
        }
        a.progress().unwrap();
    }
    posted.send(()).unwrap();
    for f in wait_all(&mut a, &ids, Duration::from_secs(60)) {
        f.result.unwrap();
    }
    thread.join().unwrap();
    let w = a.provider().wire_stats();
    let payload = u64::from(N) * (LEN as u64 + 16);
    assert!(w.in_place_bytes - w0.in_place_bytes >= payload, "{w}");
    a.finalize().unwrap();
}

/// Small sends go inline (no send buffer, one device call) and never
/// overtake what was posted or held before them: 16 KiB sends whose
/// payloads wait in the outbox and in the endpoint's queue (the receiver
/// starts late, the socket fills up) alternate with 8 B sends of the same
/// tag, and every message arrives in order, intact.
fn inline_sends_keep_their_order() {
    let (mut a, mut b) = late_pair(5);
    const N: u32 = 2000;
    let len = |i: u32| if i % 2 == 0 { 16 << 10 } else { 8 };
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| data(i, len(i))).collect();
    let (posted, start) = std::sync::mpsc::channel::<()>();
    let expect = msgs.clone();
    let thread = std::thread::spawn(move || {
        start.recv().unwrap();
        for (i, m) in expect.iter().enumerate() {
            let f = recv(&mut b, spec(0, 7), 16 << 10);
            assert_eq!(f.result.unwrap().len, m.len(), "message {i} out of order");
            assert!(f.buf[..m.len()] == *m, "message {i} changed on the way");
        }
        b.finalize().unwrap()
    });
    let c0 = a.stats().inline_sends;
    let mut ids = Vec::new();
    for m in msgs {
        if m.len() == 8 {
            ids.extend(a.send_borrowed(1, 7, 0, &m, SendMode::Standard).unwrap());
        } else if let SendStart::Pending(id) = a.isend(1, 7, 0, m, SendMode::Standard).unwrap() {
            ids.push(id);
        }
        a.progress().unwrap();
    }
    posted.send(()).unwrap();
    for f in wait_all(&mut a, &ids, Duration::from_secs(60)) {
        f.result.unwrap();
    }
    thread.join().unwrap();
    let s = a.stats();
    assert!(s.inline_sends - c0 > 0, "no send went inline: {s}");
    // Sends were held (the socket was full): later small ones waited.
    assert!(s.sends_held > 0, "no send waited: {s}");
    a.finalize().unwrap();
}

/// Borrowed eager sends of 4 KiB and more are written through from the
/// caller's memory (an inline SEND: no send buffer, no copy) while nothing
/// waits before them, and take the send buffers once the socket is full: a
/// burst of distinct 16 KiB messages to a receiver that starts late arrives
/// intact and in order; the first went inline with its payload counted in
/// `in_place_bytes`, later ones waited in send buffers.
fn borrowed_sends_write_through() {
    let (mut a, mut b) = late_pair(6);
    const N: u32 = 1000;
    const LEN: usize = 16 << 10;
    let msgs: Vec<Vec<u8>> = (0..N).map(|i| data(i + 7, LEN)).collect();
    let (posted, start) = std::sync::mpsc::channel::<()>();
    let expect = msgs.clone();
    let thread = std::thread::spawn(move || {
        start.recv().unwrap();
        for (i, m) in expect.iter().enumerate() {
            let f = recv(&mut b, spec(0, 9), LEN);
            assert_eq!(f.result.unwrap().len, LEN);
            assert!(f.buf == *m, "message {i} changed or out of order");
        }
        b.finalize().unwrap()
    });
    let (c0, w0) = (a.stats(), a.provider().wire_stats());
    let mut ids = Vec::new();
    for m in &msgs {
        ids.extend(a.send_borrowed(1, 9, 0, m, SendMode::Standard).unwrap());
        a.progress().unwrap();
    }
    posted.send(()).unwrap();
    for f in wait_all(&mut a, &ids, Duration::from_secs(60)) {
        f.result.unwrap();
    }
    thread.join().unwrap();
    let (s, w) = (a.stats(), a.provider().wire_stats());
    assert!(
        s.inline_sends - c0.inline_sends > 0,
        "none written through: {s}"
    );
    assert!(w.in_place_bytes - w0.in_place_bytes >= LEN as u64, "{w}");
    assert!(
        s.inline_sends - c0.inline_sends < u64::from(N),
        "every send went inline although the socket filled up: {s}"
    );
    a.finalize().unwrap();
}

/// The helper thread of an idle pair stays blocked in poll(2): over 200 ms
/// with both owners polling, then 200 ms with both computing, it wakes a
/// handful of times at most (a helper that checked on the owner every
/// idle time, 1 ms, would wake 200 times in each).
fn idle_helper_sleeps() {
    let job = (u64::from(std::process::id()) << 8) | 1;
    let mut a = live(job, 0);
    let mut b = live(job, 1);
    connect_pair(&mut a, &mut b);
    // One message each way, then let the connection settle.
    send(&mut a, 1, 1, data(1, 64), SendMode::Standard);
    let f = recv(&mut b, spec(0, 1), 64);
    assert_eq!(f.buf, data(1, 64));
    let settle = Instant::now() + Duration::from_millis(20);
    while Instant::now() < settle {
        a.progress().unwrap();
        b.progress().unwrap();
    }
    let wakes = |a: &Endpoint<Live>, b: &Endpoint<Live>| {
        a.provider().wire_stats().helper_wakes + b.provider().wire_stats().helper_wakes
    };
    let before = wakes(&a, &b);
    let until = Instant::now() + Duration::from_millis(200);
    let mut polls = 0u64;
    while Instant::now() < until {
        a.progress().unwrap();
        b.progress().unwrap();
        polls += 1;
        std::thread::sleep(Duration::from_micros(50));
    }
    let polling = wakes(&a, &b) - before;
    let before = wakes(&a, &b);
    std::thread::sleep(Duration::from_millis(200));
    let computing = wakes(&a, &b) - before;
    assert!(polls > 100, "the owners polled {polls} times");
    assert!(
        polling <= 10 && computing <= 10,
        "helper wake-ups over 200 ms: {polling} while the owners polled, {computing} while they computed"
    );
    // Still working: a rendezvous after the idle time, its READ served by
    // the sender's helper thread (the sender does not call in meanwhile).
    let SendStart::Pending(id) = a
        .isend(1, 2, 0, data(2, 100_000), SendMode::Standard)
        .unwrap()
    else {
        panic!("100 KB goes by rendezvous");
    };
    let f = recv(&mut b, spec(0, 2), 100_000);
    assert_eq!(f.buf, data(2, 100_000));
    wait(&mut a, id, Duration::from_secs(10)).result.unwrap();
    assert!(a.provider().wire_stats().helper_steps >= 1);
    a.finalize().unwrap();
    b.finalize().unwrap();
}

/// During traffic with both owners polling, the helper threads stay
/// asleep: each owner pushes its helper's timer back, so with a 50 ms idle
/// time a helper wakes a few times in a second of ping-pong (one that
/// woke once per idle time to find its owner still polling, and again at
/// the next frame, would wake about 35 times). One thread drives both
/// endpoints, so that neither owner waits for a processor while the other
/// runs.
fn busy_owners_keep_helpers_asleep() {
    let job = (u64::from(std::process::id()) << 8) | 3;
    let idle = |c: &mut LiveConfig| c.helper_idle = Duration::from_millis(50);
    let mut a = live_with(job, 0, idle);
    let mut b = live_with(job, 1, idle);
    connect_pair(&mut a, &mut b);
    const RUN: Duration = Duration::from_secs(1);
    let wakes = |e: &Endpoint<Live>| e.provider().wire_stats().helper_wakes;
    let (a0, b0) = (wakes(&a), wakes(&b));
    let until = Instant::now() + RUN;
    let mut n = 0u32;
    while Instant::now() < until {
        send(&mut a, 1, 1, data(n, 8), SendMode::Standard);
        let f = recv(&mut b, spec(0, 1), 64);
        assert_eq!(f.buf[..8], data(n, 8)[..]);
        send(&mut b, 0, 2, data(n + 1, 8), SendMode::Standard);
        let f = recv(&mut a, spec(1, 2), 64);
        assert_eq!(f.buf[..8], data(n + 1, 8)[..]);
        n += 1;
    }
    let (wa, wb) = (wakes(&a) - a0, wakes(&b) - b0);
    a.finalize().unwrap();
    b.finalize().unwrap();
    assert!(n > 100, "{n} round trips");
    assert!(
        wa <= 12 && wb <= 12,
        "helper wake-ups in {RUN:?} of {n} round trips: {wa} and {wb}"
    );
}

/// With three connections open, an idle run of the device asks the
/// readiness set once (`epoll_wait`) and reads no socket (a `read` per
/// socket per run would show as empty reads), traffic on each connection
/// is found, and a rank with one connection reads it directly.
fn idle_runs_poll_once() {
    let job = (u64::from(std::process::id()) << 8) | 2;
    let ep = |rank: u32| {
        let mut lc = LiveConfig::new(job, rank);
        lc.listen = "127.0.0.1:0".parse().unwrap();
        Endpoint::new(Live::new(lc).unwrap(), cfg(), rank, 4).unwrap()
    };
    let mut eps: Vec<Endpoint<Live>> = (0..4).map(ep).collect();
    let blobs: Vec<Vec<u8>> = eps.iter_mut().map(|e| e.address(0..4).unwrap()).collect();
    // Rank 0 talks to 1, 2 and 3.
    for peer in 1..4u32 {
        eps[0].connect(peer, &blobs[peer as usize]).unwrap();
        eps[peer as usize].connect(0, &blobs[0]).unwrap();
    }
    let until = Instant::now() + Duration::from_secs(10);
    while !(1..4).all(|p| eps[0].is_connected(p) && eps[p as usize].is_connected(0)) {
        for e in &mut eps {
            e.progress().unwrap();
        }
        assert!(Instant::now() < until, "handshakes did not finish");
    }
    let settle = Instant::now() + Duration::from_millis(20);
    while Instant::now() < settle {
        for e in &mut eps {
            e.progress().unwrap();
        }
    }
    let w0 = eps[0].provider().wire_stats();
    const RUNS: u64 = 1000;
    for _ in 0..RUNS {
        eps[0].provider().step();
    }
    let w1 = eps[0].provider().wire_stats();
    assert_eq!(w1.polls - w0.polls, RUNS, "one epoll_wait per run: {w1}");
    assert_eq!(w1.empty_reads, w0.empty_reads, "no read while idle: {w1}");
    assert_eq!(w1.reads, w0.reads, "{w1}");
    // Each connection's traffic is found (one read per message at most).
    let mut rest = eps.split_off(1);
    for (i, e) in rest.iter_mut().enumerate() {
        send(e, 0, 10 + i as u32, data(i as u32, 64), SendMode::Standard);
    }
    for i in 0..3u32 {
        let f = recv(&mut eps[0], spec(i + 1, 10 + i), 64);
        assert_eq!(f.buf, data(i, 64));
    }
    let w2 = eps[0].provider().wire_stats();
    assert!(w2.reads - w1.reads >= 3, "{w2}");
    // A rank with one connection reads it directly: no epoll_wait.
    let w = rest[0].provider().wire_stats();
    for _ in 0..100 {
        rest[0].provider().step();
    }
    assert_eq!(rest[0].provider().wire_stats().polls, w.polls);
    let a = eps.pop().unwrap();
    a.finalize().unwrap();
    for e in rest {
        e.finalize().unwrap();
    }
}

/// A wire frame as the crate documents it: the 24-byte header, then the
/// payload (`len` announced, `payload` sent).
fn raw_frame(kind: u8, a: u32, b: u64, c: u32, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![kind, 0, 0, 0];
    f.extend_from_slice(&a.to_le_bytes());
    f.extend_from_slice(&b.to_le_bytes());
    f.extend_from_slice(&c.to_le_bytes());
    f.extend_from_slice(&len.to_le_bytes());
    f.extend_from_slice(payload);
    f
}

/// A peer that sends an oversized frame (a SEND announcing 2 GiB, a READ
/// response to no READ) fails its connection with a typed
/// `soft::FrameError`, from the header alone.
fn oversized_frames_are_refused() {
    use std::io::Read;
    use std::net::TcpListener;
    use verbs_tm::soft::FrameError;
    use verbs_tm::verbs::{CqInitAttr, QpInitAttr, QpState, SrqInitAttr};
    use verbs_tm::Provider;

    const SEND: u8 = 1;
    const READ_RESP: u8 = 4;
    const HELLO_ACK: u8 = 6;
    let bad: [(Vec<u8>, &str, usize); 2] = [
        (raw_frame(SEND, 0, 0, 0, 2 << 30, &[]), "SEND", 2 << 30),
        (
            raw_frame(READ_RESP, 0, 77, 0, 100, &[0; 100]),
            "READ_RESP",
            100,
        ),
    ];
    for (i, (frame, kind, len)) in bad.into_iter().enumerate() {
        let job = (u64::from(std::process::id()) << 8) | (2 + i as u64);
        let mut lc = LiveConfig::new(job, 0);
        lc.listen = "127.0.0.1:0".parse().unwrap();
        let mut dev = Live::new(lc).unwrap();
        let cq = dev
            .create_cq(&CqInitAttr {
                cqe: 64,
                wc_flags: 0,
                extended: true,
            })
            .unwrap();
        let srq = dev.create_srq(&mut SrqInitAttr::tm(cq, 16, 4, 16)).unwrap();
        let qp = dev
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                srq: Some(srq),
                max_send_wr: 4,
                max_send_sge: 1,
            })
            .unwrap();
        // The fake peer (rank 1, QPN 7) listens on 127.0.0.2: its address
        // sorts after the device's, so the device connects.
        let l = TcpListener::bind("127.0.0.2:0").unwrap();
        let mut blob = b"TMXL".to_vec();
        blob.extend_from_slice(&job.to_le_bytes());
        blob.extend_from_slice(&1u32.to_le_bytes());
        blob.extend_from_slice(&7u32.to_le_bytes());
        blob.extend_from_slice(l.local_addr().unwrap().to_string().as_bytes());
        dev.connect(qp, &blob).unwrap();
        let (mut s, _) = l.accept().unwrap();
        let mut hello = [0u8; 36];
        s.read_exact(&mut hello).unwrap();
        assert_eq!(hello[0], 5, "a HELLO first");
        s.write_all(&raw_frame(HELLO_ACK, 0, job, 1, 4, &[0; 4]))
            .unwrap();
        s.write_all(&frame).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        let why = loop {
            dev.step();
            if let QpState::Error(why) = dev.qp_state(qp) {
                break why;
            }
            assert!(Instant::now() < until, "the {kind} frame was accepted");
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(why.contains("protocol error"), "{why}");
        let errs = dev.frame_errors();
        assert!(
            matches!(
                errs.as_slice(),
                [(Some(1), FrameError::TooLarge { kind: k, len: n, .. })] if *k == kind && *n == len
            ),
            "{errs:?}"
        );
        // Nothing of the 2 GiB was buffered: the device read little.
        assert!(dev.wire_stats().bytes_in < 1 << 20);
    }
}

/// READ responses are written to the socket from the responder's memory
/// region: a 1 MiB response copies nothing (no staged byte). A region
/// deregistered while a 32 MiB response from it waits in the outbox (the
/// peer does not read) is copied out first: the peer still receives the
/// region's bytes as they were, not what the program writes to the buffer
/// it got back.
fn read_responses_from_regions() {
    use std::io::Read;
    use std::net::TcpListener;
    use verbs_tm::verbs::{CqInitAttr, QpInitAttr, SrqInitAttr, IBV_ACCESS_REMOTE_READ};
    use verbs_tm::Provider;

    const READ_REQ: u8 = 3;
    const READ_RESP: u8 = 4;
    const HELLO_ACK: u8 = 6;
    let job = (u64::from(std::process::id()) << 8) | 0x40;
    let mut lc = LiveConfig::new(job, 0);
    lc.listen = "127.0.0.1:0".parse().unwrap();
    lc.helper = false;
    let mut dev = Live::new(lc).unwrap();
    let cq = dev
        .create_cq(&CqInitAttr {
            cqe: 64,
            wc_flags: 0,
            extended: true,
        })
        .unwrap();
    let srq = dev.create_srq(&mut SrqInitAttr::tm(cq, 16, 4, 16)).unwrap();
    let qp = dev
        .create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            max_send_wr: 4,
            max_send_sge: 1,
        })
        .unwrap();
    // A fake peer on 127.0.0.2 (the device connects to it).
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    let mut blob = b"TMXL".to_vec();
    blob.extend_from_slice(&job.to_le_bytes());
    blob.extend_from_slice(&1u32.to_le_bytes());
    blob.extend_from_slice(&7u32.to_le_bytes());
    blob.extend_from_slice(l.local_addr().unwrap().to_string().as_bytes());
    dev.connect(qp, &blob).unwrap();
    let (mut s, _) = l.accept().unwrap();
    let mut hello = [0u8; 36];
    s.read_exact(&mut hello).unwrap();
    s.write_all(&raw_frame(HELLO_ACK, 0, job, 1, 4, &[0; 4]))
        .unwrap();
    // The peer asks for `len` bytes of `mr` and reads the response in a
    // thread while the device runs.
    let read = |dev: &mut Live, s: &mut std::net::TcpStream, id: u64, mr: &verbs_tm::Mr| {
        let len = mr.len() as u32;
        let req = raw_frame(READ_REQ, mr.rkey(), id, len, 8, &mr.addr().to_le_bytes());
        s.write_all(&req).unwrap();
        let mut r = s.try_clone().unwrap();
        let t = std::thread::spawn(move || {
            let mut b = vec![0u8; 24 + len as usize];
            r.read_exact(&mut b).unwrap();
            b
        });
        let until = Instant::now() + Duration::from_secs(30);
        while !t.is_finished() {
            dev.step();
            assert!(Instant::now() < until, "READ {id} not answered");
        }
        let b = t.join().unwrap();
        assert_eq!(b[..24], raw_frame(READ_RESP, 0, id, 0, len, &[]), "header");
        b[24..].to_vec()
    };
    let access = IBV_ACCESS_REMOTE_READ;
    let small = dev.reg_mr(data(1, 1 << 20), access).unwrap();
    assert!(read(&mut dev, &mut s, 1, &small) == data(1, 1 << 20));
    let (st, w) = (dev.stats(), dev.wire_stats());
    assert_eq!((st.reads_served, st.read_bytes_staged), (1, 0), "{st:?}");
    assert_eq!(w.in_place_bytes, 1 << 20, "{w}");
    // 32 MiB: more than the sockets take while the peer does not read.
    const BIG: usize = 32 << 20;
    let big = dev.reg_mr(data(2, BIG), access).unwrap();
    let req = raw_frame(
        READ_REQ,
        big.rkey(),
        2,
        BIG as u32,
        8,
        &big.addr().to_le_bytes(),
    );
    s.write_all(&req).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while dev.stats().reads_served < 2 {
        dev.step();
        assert!(Instant::now() < until, "READ request not served");
    }
    assert!(dev.unsent() > 0);
    let mut back = dev.dereg_mr(big).unwrap();
    back.fill(0xee);
    assert_eq!(dev.stats().read_bytes_staged, BIG as u64);
    let mut r = s.try_clone().unwrap();
    let t = std::thread::spawn(move || {
        let mut b = vec![0u8; 24 + BIG];
        r.read_exact(&mut b).unwrap();
        b
    });
    while !t.is_finished() {
        dev.step();
        assert!(Instant::now() < until, "READ response not sent");
    }
    let b = t.join().unwrap();
    assert_eq!(b[..24], raw_frame(READ_RESP, 0, 2, 0, BIG as u32, &[]));
    assert!(b[24..] == data(2, BIG), "the region's bytes as they were");
    assert_eq!(dev.wire_stats().in_place_bytes, 1 << 20);
    dev.dereg_mr(small).unwrap();
}

// ------------------------------------------------------------ two processes

struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<ChildStdout>>,
}

impl Peer {
    fn start(role: &str, job: u64) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(ROLE, role)
            .env("TMX_TEST_JOB", job.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Peer {
            child,
            stdin: Some(stdin),
            lines,
        }
    }

    fn line(&mut self) -> String {
        self.lines.next().expect("the child ended").unwrap()
    }

    fn say(&mut self, s: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{s}").unwrap();
        stdin.flush().unwrap();
    }

    /// Exchanges endpoint addresses with the child and connects.
    fn connect(&mut self, ep: &mut Endpoint<Live>) {
        let mine = ep.address([1]).unwrap();
        let theirs = self.line();
        let theirs = hex_decode(theirs.strip_prefix("ADDR ").unwrap());
        self.say(&format!("ADDR {}", hex(&mine)));
        ep.connect(1, &theirs).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        while !ep.is_connected(1) {
            ep.progress().unwrap();
            assert!(Instant::now() < until, "no handshake with the child");
        }
    }

    fn finish(mut self) {
        self.stdin = None;
        let status = self.child.wait().unwrap();
        assert!(status.success(), "child: {status}");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex_decode(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

fn job_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(1);
    (u64::from(std::process::id()) << 16) | N.fetch_add(1, Ordering::Relaxed)
}

fn eager_between_processes() {
    let job = job_id();
    let mut peer = Peer::start("echo", job);
    let mut ep = live(job, 0);
    peer.connect(&mut ep);
    for i in 0..200u32 {
        let len = (i as usize * 37) % 4000;
        send(&mut ep, 1, i, data(i, len), SendMode::Standard);
        let f = recv(&mut ep, spec(1, i), 4096);
        assert_eq!(f.buf[..f.result.unwrap().len], data(i, len)[..], "echo {i}");
    }
    assert_eq!(peer.line(), "DONE");
    // One frame per eager message (no acknowledgement frames), and no more
    // writes than frames: HELLO or HELLO_ACK, then the 200 messages.
    let w = ep.provider().wire_stats();
    assert_eq!(w.frames_out, 201, "{w}");
    assert!(w.writes <= w.frames_out, "{w}");
    assert_eq!(w.frames_in, 201, "{w}");
    // The SEND payload buffers come back to the device's pool: a few
    // allocations for 200 messages.
    let st = ep.provider().stats();
    assert!(st.staging_allocs <= 4 && st.staging_reused >= 190, "{st:?}");
    ep.finalize().unwrap();
    peer.finish();
}

/// Sizes of the window of `stream_between_processes`: rendezvous of 3 MiB
/// (several READ responses more than the 4 MiB a connection may have
/// unsent, so READ requests wait) between eager and empty messages.
const STREAM: [usize; 12] = [
    3 << 20,
    10,
    3 << 20,
    4000,
    (3 << 20) + 7,
    0,
    3 << 20,
    1,
    70_000,
    3 << 20,
    2,
    3,
];

fn stream_between_processes() {
    let job = job_id();
    let mut peer = Peer::start("stream_recv", job);
    // A READ request waits while a single byte is unsent: the requests that
    // come together are answered one after another. No helper thread: the
    // READ requests pile up in the socket while this process sleeps.
    let mut ep = live_with(job, 0, |c| {
        c.read_backlog = 1;
        c.helper = false;
    });
    peer.connect(&mut ep);
    let mut ids = Vec::new();
    let mut sums = Vec::new();
    for (i, len) in STREAM.into_iter().enumerate() {
        let d = data(100 + i as u32, len);
        sums.push(format!("{:016x}", checksum(&d)));
        if let SendStart::Pending(id) = ep.isend(1, i as u32, 0, d, SendMode::Standard).unwrap() {
            ids.push(id);
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    for f in wait_all(&mut ep, &ids, Duration::from_secs(60)) {
        f.result.unwrap();
    }
    assert_eq!(peer.line(), format!("SUMS {}", sums.join(",")));
    let w = ep.provider().wire_stats();
    let big: u64 = STREAM.iter().map(|&l| l as u64).sum();
    assert!(w.bytes_out >= big, "{w}");
    assert!(w.read_waits > 0, "{w}");
    // The staging buffers of the 12 SENDs (6 eager messages, 6 rendezvous
    // requests) are reused. The 6 READ responses take none: they are
    // written to the socket from the sender's memory regions.
    let st = ep.provider().stats();
    assert_eq!(st.staging_allocs + st.staging_reused, 12, "{st:?}");
    assert!(st.staging_allocs <= 6, "{st:?}");
    assert_eq!(st.read_bytes_staged, 0, "{st:?}");
    let rndv: u64 = STREAM
        .iter()
        .filter(|&&l| l > 4096)
        .map(|&l| l as u64)
        .sum();
    assert_eq!(w.in_place_bytes, rndv, "{w}");
    ep.finalize().unwrap();
    peer.finish();
}

fn rendezvous_while_the_sender_computes() {
    let job = job_id();
    let mut peer = Peer::start("rndv_recv", job);
    let mut ep = live(job, 0);
    peer.connect(&mut ep);
    let payload = data(8, EIGHT_MIB);
    let sum = checksum(&payload);
    let SendStart::Pending(id) = ep.isend(1, 8, 0, payload, SendMode::Standard).unwrap() else {
        panic!("8 MiB goes by rendezvous");
    };
    // The sender computes: it never calls into the endpoint until the
    // receiver says it has every byte. The helper thread serves the READ.
    peer.say("GO");
    let got = peer.line();
    assert_eq!(got, format!("GOT {sum:016x}"), "the receiver's checksum");
    // Now the FIN completes the send.
    let f = wait(&mut ep, id, Duration::from_secs(10));
    assert_eq!(f.buf.len(), EIGHT_MIB);
    f.result.unwrap();
    ep.finalize().unwrap();
    peer.finish();
}

fn killed_peer_is_reported() {
    let job = job_id();
    let mut peer = Peer::start("sleep", job);
    let mut ep = live(job, 0);
    peer.connect(&mut ep);
    // A rendezvous the child will never read, then the child dies.
    let SendStart::Pending(id) = ep
        .isend(1, 1, 0, data(1, 100_000), SendMode::Standard)
        .unwrap()
    else {
        panic!("rendezvous");
    };
    assert_eq!(peer.line(), "READY");
    ep.progress().unwrap();
    assert!(ep.check_alive(Some(1)).is_ok());
    peer.child.kill().unwrap();
    peer.child.wait().unwrap();
    let t = Instant::now();
    let err = loop {
        ep.progress().unwrap();
        if let Err(e) = ep.check_alive(Some(1)) {
            break e;
        }
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "death not seen within a second"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(matches!(err, Error::PeerDied { peer: 1, .. }), "{err:?}");
    let mut done = Vec::new();
    ep.take_completions(&mut done);
    let f = done
        .iter()
        .find(|f| f.id == id)
        .expect("the pending send is failed");
    assert!(matches!(f.result, Err(Error::PeerDied { .. })));
    assert_eq!(f.buf.len(), 100_000, "the data comes back");
    assert!(matches!(
        ep.isend(1, 2, 0, vec![1], SendMode::Standard),
        Err(Error::PeerDied { .. })
    ));
}

// ------------------------------------------------------------ child roles

fn child(role: &str) {
    let job: u64 = std::env::var("TMX_TEST_JOB").unwrap().parse().unwrap();
    let mut ep = live(job, 1);
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mine = ep.address([0]).unwrap();
    println!("ADDR {}", hex(&mine));
    let theirs = lines.next().unwrap().unwrap();
    ep.connect(0, &hex_decode(theirs.strip_prefix("ADDR ").unwrap()))
        .unwrap();
    while !ep.is_connected(0) {
        ep.progress().unwrap();
    }
    match role {
        "echo" => {
            for i in 0..200u32 {
                let f = recv(&mut ep, spec(0, i), 4096);
                let n = f.result.unwrap().len;
                send(&mut ep, 0, i, f.buf[..n].to_vec(), SendMode::Standard);
            }
            println!("DONE");
        }
        "rndv_recv" => {
            let r = match ep.irecv(spec(0, 8), vec![0; EIGHT_MIB]).unwrap() {
                RecvStart::Pending(id) => id,
                RecvStart::Done(..) => panic!("not here yet"),
            };
            assert_eq!(lines.next().unwrap().unwrap(), "GO");
            let f = wait(&mut ep, r, Duration::from_secs(60));
            assert_eq!(f.result.unwrap().len, EIGHT_MIB);
            println!("GOT {:016x}", checksum(&f.buf));
        }
        "stream_recv" => {
            // Half the receives posted before the messages come (matched
            // by the device or in software), half after (unexpected).
            let mut got = vec![None; STREAM.len()];
            let mut pending = Vec::new();
            for (i, len) in STREAM.into_iter().enumerate().filter(|(i, _)| i % 2 == 0) {
                match ep.irecv(spec(0, i as u32), vec![0; len]).unwrap() {
                    RecvStart::Pending(id) => pending.push((i, id)),
                    RecvStart::Done(r, buf) => got[i] = Some((r.unwrap().len, buf)),
                }
            }
            let ids: Vec<u64> = pending.iter().map(|p| p.1).collect();
            let fs = wait_all(&mut ep, &ids, Duration::from_secs(60));
            for ((i, _), f) in pending.into_iter().zip(fs) {
                got[i] = Some((f.result.unwrap().len, f.buf));
            }
            for (i, len) in STREAM.into_iter().enumerate().filter(|(i, _)| i % 2 == 1) {
                let f = recv(&mut ep, spec(0, i as u32), len);
                got[i] = Some((f.result.unwrap().len, f.buf));
            }
            let sums: Vec<String> = got
                .into_iter()
                .map(|g| {
                    let (n, buf) = g.unwrap();
                    format!("{:016x}", checksum(&buf[..n]))
                })
                .collect();
            println!("SUMS {}", sums.join(","));
        }
        "sleep" => {
            ep.progress().unwrap();
            println!("READY");
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown role {other}"),
    }
    let _ = std::io::stdout().flush();
    // Stay until the parent is done with us (it closes stdin).
    for _ in lines {}
    ep.finalize().unwrap();
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
        return ExitCode::SUCCESS;
    }
    let tests: &[(&str, fn())] = &[
        ("in_process_pair", in_process_pair),
        (
            "blocking_rendezvous_reuses_spares",
            blocking_rendezvous_reuses_spares,
        ),
        (
            "posted_receives_meet_their_messages",
            posted_receives_meet_their_messages,
        ),
        (
            "sends_leave_from_the_send_buffers",
            sends_leave_from_the_send_buffers,
        ),
        (
            "inline_sends_keep_their_order",
            inline_sends_keep_their_order,
        ),
        ("borrowed_sends_write_through", borrowed_sends_write_through),
        ("idle_helper_sleeps", idle_helper_sleeps),
        ("idle_runs_poll_once", idle_runs_poll_once),
        (
            "busy_owners_keep_helpers_asleep",
            busy_owners_keep_helpers_asleep,
        ),
        ("oversized_frames_are_refused", oversized_frames_are_refused),
        ("read_responses_from_regions", read_responses_from_regions),
        ("eager_between_processes", eager_between_processes),
        ("stream_between_processes", stream_between_processes),
        (
            "rendezvous_while_the_sender_computes",
            rendezvous_while_the_sender_computes,
        ),
        ("killed_peer_is_reported", killed_peer_is_reported),
    ];
    let args: Vec<String> = std::env::args().skip(1).collect();
    // libtest semantics: `--ignored` runs only ignored tests (none here).
    let only_ignored = args.iter().any(|a| a == "--ignored");
    let filter: Vec<String> = args.into_iter().filter(|a| !a.starts_with('-')).collect();
    println!("\nrunning {} tests", tests.len());
    let (mut passed, mut failed, mut filtered) = (0, 0, 0);
    for (name, f) in tests {
        if only_ignored || (!filter.is_empty() && !filter.iter().any(|p| name.contains(p.as_str())))
        {
            filtered += 1;
            continue;
        }
        let t = Instant::now();
        let ok = std::panic::catch_unwind(f).is_ok();
        println!(
            "test {name} ... {} ({:.1?})",
            if ok { "ok" } else { "FAILED" },
            t.elapsed()
        );
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    println!(
        "\ntest result: {}. {passed} passed; {failed} failed; 0 ignored; 0 measured; {filtered} filtered out\n",
        if failed == 0 { "ok" } else { "FAILED" }
    );
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
