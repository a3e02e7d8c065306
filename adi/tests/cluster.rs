//! Roles of the cluster tests: jobs whose ranks run on several hosts
//! (`tmrun --hosts local:a,local:b -ppn 2`, or network-namespace hosts),
//! so that ranks of different hosts talk through `verbs-tm` and ranks of
//! one host through shared memory.
//!
//! `cargo xtask cluster` (and the `cluster` step of `cargo xtask ci`)
//! starts this binary as the ranks, with the scenario in
//! `TMX_ADI_TEST_ROLE`; it also runs roles of the `ranks`, `stress` and
//! `win` test binaries across hosts. Run on its own (no role), it lists
//! its roles and runs nothing: it needs `tmrun` and hosts, which the
//! xtask provides.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use adi::{Comm, ReduceOp, Source, Tag};
use std::process::ExitCode;

const ROLE: &str = "TMX_ADI_TEST_ROLE";

/// Every size where a protocol changes, around each limit: verbs-tm's
/// eager limit (16 KiB, `TMX_VERBS_EAGER_MAX`) and device threshold (1 KiB,
/// `TMX_VERBS_TM_THRESH`), shared memory's inline, eager and CMA sizes,
/// and the 8 MiB of a large rendezvous.
const SIZES: &[usize] = &[
    0,
    1,
    8,
    40,
    41,
    64,
    1023,
    1024,
    1025,
    4096,
    8192,
    16_383,
    16_384,
    16_385,
    65_536,
    262_144,
    1 << 20,
    (4 << 20) + 3,
    8 << 20,
];

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed.wrapping_mul(131) + i * 7 + (i >> 12)) % 251) as u8)
        .collect()
}

/// The rank on the other host at the same position (`-ppn` = size / 2).
fn across(w: &Comm) -> i32 {
    let (me, n) = (w.rank(), w.size());
    (me + n / 2) % n
}

/// Ping-pong at every protocol size between the ranks of different hosts
/// (each rank with its counterpart), blocking, nonblocking and
/// synchronous, payloads and statuses checked; meanwhile the ranks of one
/// host exchange too, so both transports carry traffic at once.
fn role_pingpong_sizes(w: &Comm) {
    let me = w.rank();
    let peer = across(w);
    let first = me < peer;
    let mut buf = vec![0u8; 8 << 20];
    for (k, &len) in SIZES.iter().enumerate() {
        let tag = k as i32;
        let out = pattern(k * 4 + me as usize, len);
        let want = pattern(k * 4 + peer as usize, len);
        // Blocking, ordered.
        if first {
            w.send(&out, peer, tag).unwrap();
            let st = w.recv(&mut buf[..len], peer, tag).unwrap();
            assert_eq!((st.source, st.tag, st.count), (peer, tag, len));
        } else {
            let st = w.recv(&mut buf[..len], Source::Any, Tag::Any).unwrap();
            assert_eq!((st.source, st.tag, st.count), (peer, tag, len));
            assert!(buf[..len] == want[..], "{len} bytes from {peer}");
            w.send(&out, peer, tag).unwrap();
        }
        if first {
            assert!(buf[..len] == want[..], "reply of {len} bytes from {peer}");
        }
        // Nonblocking both ways at once.
        let mut r = w.irecv(vec![0u8; len], peer, tag + 1000).unwrap();
        let mut s = w.isend(out.clone(), peer, tag + 1000).unwrap();
        let st = w.wait(&mut r).unwrap();
        w.wait(&mut s).unwrap();
        assert_eq!((st.source, st.count), (peer, len));
        assert!(r.take_buffer().unwrap()[..len] == want[..], "irecv {len}");
        // Synchronous (rendezvous at every size).
        if first {
            w.ssend(&out, peer, tag + 2000).unwrap();
        } else {
            let st = w.recv(&mut buf[..len], peer, tag + 2000).unwrap();
            assert_eq!(st.count, len);
            assert!(buf[..len] == want[..], "ssend {len}");
        }
    }
    // Both transports at once: every rank sends to every other, receives
    // from anyone, checks it got one of each. The barrier first: a rank
    // still in the loop above receives with ANY_SOURCE and ANY_TAG, which
    // an early tag-77 message from a faster rank would match.
    w.barrier().unwrap();
    let n = w.size();
    let mut reqs = Vec::new();
    for d in (0..n).filter(|&d| d != me) {
        reqs.push(w.isend(pattern(d as usize, 70_000), d, 77).unwrap());
    }
    let mut from = vec![0; n as usize];
    for _ in 1..n {
        let st = w.recv(&mut buf[..70_000], Source::Any, 77).unwrap();
        assert!(buf[..70_000] == pattern(me as usize, 70_000)[..]);
        from[st.source as usize] += 1;
    }
    for mut r in reqs {
        w.wait(&mut r).unwrap();
    }
    for (s, c) in from.iter().enumerate() {
        assert_eq!(*c, i32::from(s as i32 != me), "messages from {s}");
    }
    w.barrier().unwrap();
}

/// Collectives on the world and on communicators split across and along
/// hosts, `ANY_SOURCE` on each; `allocate_shared` is refused on a
/// communicator that spans hosts.
fn role_collectives(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    w.barrier().unwrap();
    for root in 0..n {
        let mut b = if me == root {
            pattern(root as usize, 100_000)
        } else {
            vec![0u8; 100_000]
        };
        w.bcast(&mut b, root).unwrap();
        assert!(b == pattern(root as usize, 100_000), "bcast from {root}");
        let mut sum = [0i64; 3];
        w.allreduce(
            &[i64::from(me), 1, i64::from(me) * 1000],
            &mut sum,
            ReduceOp::Sum,
        )
        .unwrap();
        let t = i64::from(n * (n - 1) / 2);
        assert_eq!(sum, [t, i64::from(n), t * 1000]);
        let mine = pattern(me as usize + 10, 3000);
        let mut all = vec![0u8; if me == root { 3000 * n as usize } else { 0 }];
        w.gather(&mine, &mut all, root).unwrap();
        if me == root {
            for r in 0..n as usize {
                assert!(all[r * 3000..(r + 1) * 3000] == pattern(r + 10, 3000)[..]);
            }
        }
    }
    // Split across hosts (even / odd ranks: one rank of each host with
    // -ppn 2) and along them (by host).
    let per_host = n / 2;
    for (color, what) in [(me % 2, "across hosts"), (me / per_host.max(1), "by host")] {
        let c = w.split(color, me).unwrap().unwrap();
        let (cm, cn) = (c.rank(), c.size());
        let mut s = [0i32];
        c.allreduce(&[me], &mut s, ReduceOp::Max).unwrap();
        let members: Vec<i32> = (0..n)
            .filter(|&r| {
                if what == "by host" {
                    r / per_host.max(1) == color
                } else {
                    r % 2 == color
                }
            })
            .collect();
        assert_eq!(cn as usize, members.len(), "{what}");
        assert_eq!(s[0], *members.last().unwrap(), "{what}");
        // ANY_SOURCE from every other member, then a barrier.
        for d in (0..cn).filter(|&d| d != cm) {
            c.send(&[cm as u8; 5000], d, 9).unwrap();
        }
        let mut got = vec![false; cn as usize];
        let mut b = [0u8; 5000];
        for _ in 1..cn {
            let st = c.recv(&mut b, Source::Any, 9).unwrap();
            assert_eq!(b, [st.source as u8; 5000]);
            assert!(!got[st.source as usize]);
            got[st.source as usize] = true;
        }
        c.barrier().unwrap();
        let shared = adi::Win::allocate_shared(&c, 64);
        if what == "by host" {
            assert!(
                shared.is_ok(),
                "allocate_shared on one host: {:?}",
                shared.err()
            );
        } else {
            let e = shared.expect_err("allocate_shared across hosts must fail");
            assert_eq!(e.class(), adi::ErrorClass::RmaShared, "{e}");
        }
        drop(c);
    }
    let shared = adi::Win::allocate_shared(w, 64);
    assert!(shared.is_err(), "the world spans hosts");
    w.barrier().unwrap();
}

/// The last rank (on the other host than rank 0) exchanges a few
/// messages, then is killed with SIGKILL while the others wait for it:
/// the job must end with a non-zero status (the launcher's teardown), no
/// rank left behind.
fn role_kill(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let victim = n - 1;
    let mut b = vec![0u8; 100_000];
    for round in 0..3 {
        if me == victim {
            w.send(&pattern(round, 100_000), 0, 5).unwrap();
        } else if me == 0 {
            w.recv(&mut b, victim, 5).unwrap();
        }
    }
    w.barrier().unwrap();
    if me == victim {
        let pid = std::process::id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid])
            .status();
        std::thread::sleep(std::time::Duration::from_secs(60));
        unreachable!("SIGKILL did not end the process");
    }
    // Everyone else waits for a message that never comes.
    let _ = w.recv(&mut b, victim, 6);
    panic!("a receive from a killed rank returned");
}

/// `MPI_Cancel` of sends across hosts (each rank of the first half sends
/// to its counterpart): a rendezvous send the receiver holds unmatched is
/// withdrawn (its status says cancelled, and it never arrives: the
/// receiver gets the next message of that tag); an eager send is out
/// already (cancel says no, and it arrives).
fn role_send_cancel(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let peer = across(w);
    let big = 1 << 20;
    if me < n / 2 {
        let rndv = w.isend(pattern(1, big), peer, 1).unwrap();
        let eager = w.isend(pattern(2, 100), peer, 2).unwrap();
        assert!(
            w.cancel(&rndv).unwrap(),
            "an unmatched rendezvous send is withdrawn"
        );
        assert!(!w.cancel(&eager).unwrap(), "an eager send is out already");
        let mut reqs = vec![rndv, eager];
        let sts = w.waitall(&mut reqs).unwrap();
        assert!(sts[0].cancelled && !sts[1].cancelled, "{sts:?}");
        w.barrier().unwrap();
        w.send(&pattern(3, big), peer, 1).unwrap();
    } else {
        // In the barrier, the receiver's progress answers the cancel.
        w.barrier().unwrap();
        let mut b = vec![0u8; big];
        let st = w.recv(&mut b, peer, 2).unwrap();
        assert_eq!(b[..st.count], pattern(2, 100)[..]);
        let st = w.recv(&mut b, peer, 1).unwrap();
        assert_eq!(st.count, big);
        assert!(b == pattern(3, big), "the cancelled send arrived");
        assert!(w.iprobe(Source::Rank(peer), Tag::Any).unwrap().is_none());
    }
    w.barrier().unwrap();
}

/// A role: its name and what a rank runs.
type Role = (&'static str, fn(&Comm));

/// With a provider that cannot start (`TMX_VERBS_PROVIDER=ibverbs` on a
/// machine without a tag-matching NIC, or a build without the feature),
/// init fails on every rank with `NoInterNodeTransport` and its reason.
fn role_no_provider() -> ExitCode {
    match adi::init() {
        Err(e @ adi::Error::NoInterNodeTransport { .. }) => {
            let text = e.to_string();
            assert!(text.contains("could start"), "{text}");
            assert_eq!(e.class(), adi::ErrorClass::Other);
            ExitCode::SUCCESS
        }
        Err(e) => panic!("init failed otherwise: {e}"),
        Ok(_) => panic!("init succeeded without a provider"),
    }
}

fn roles() -> Vec<Role> {
    vec![
        ("pingpong_sizes", role_pingpong_sizes),
        ("collectives", role_collectives),
        ("kill", role_kill),
        ("send_cancel", role_send_cancel),
    ]
}

fn main() -> ExitCode {
    let Ok(role) = std::env::var(ROLE) else {
        // Run by `cargo test`: the roles need hosts (`cargo xtask cluster`).
        println!("\nrunning 0 tests (cluster roles run under `cargo xtask cluster`)");
        for (name, _) in roles() {
            println!("  role {name}");
        }
        println!("\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n");
        return ExitCode::SUCCESS;
    };
    if role == "no_provider" {
        return role_no_provider();
    }
    let Some((_, f)) = roles().into_iter().find(|(n, _)| *n == role) else {
        eprintln!("unknown role {role}");
        return ExitCode::from(3);
    };
    let w = adi::init().unwrap();
    f(&w);
    adi::finalize().unwrap();
    ExitCode::SUCCESS
}
