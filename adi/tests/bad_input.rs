//! Bad input gives typed errors with the exact MPI error class, never a
//! panic, a hang or memory written past a buffer.
//!
//! `singleton_bad_input` runs in the test process itself as a singleton
//! (`adi::init()` without a launcher: rank 0 of 1), so it is the only test
//! of this binary that calls `init` in the parent process. The multi-rank
//! cases launch this binary as 2 ranks (see `common::launch`).
//!
//! Guard bytes: a blocking receive gets a slice of a larger buffer, and
//! the bytes after the slice must stay untouched. A nonblocking receive
//! owns a `Vec`; its guard bytes sit in the `Vec`'s spare capacity (written
//! before the `Vec` was truncated to the receive size) and are read back
//! through `/proc/self/mem`, so that a transport writing past the length
//! (for example a CMA write straight into a preposted buffer) is caught
//! without `unsafe` code.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::{
    attr::{ANY_SOURCE, ANY_TAG, PROC_NULL, TAG_UB, UNDEFINED},
    BasicType, Comm, Datatype, Error, ErrorClass, ReduceOp, Request, Source, Status, Tag,
};
use std::os::unix::fs::FileExt;
use std::time::Duration;

const GUARD: usize = 256;
const G: u8 = 0xEE;

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((seed.wrapping_mul(31) + i * 7) % 251) as u8)
        .collect()
}

fn class<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorClass {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.class(),
    }
}

/// A receive `Vec` of `len` bytes whose spare capacity holds `GUARD` guard
/// bytes.
fn guarded_vec(len: usize) -> Vec<u8> {
    let mut v = vec![G; len + GUARD];
    v.truncate(len);
    v
}

/// Reads `len` bytes of this process's memory at `addr` (no `unsafe`: the
/// kernel does the access, and fails cleanly on an unmapped address).
fn peek(addr: usize, len: usize) -> Vec<u8> {
    let f = std::fs::File::open("/proc/self/mem").unwrap();
    let mut out = vec![0u8; len];
    f.read_exact_at(&mut out, addr as u64).unwrap();
    out
}

/// The guard bytes after `v`'s length, if `v` still has them in its spare
/// capacity (the same allocation the test made).
fn guard_of(v: &[u8], cap: usize) -> Option<Vec<u8>> {
    let g = (cap >= v.len() + GUARD).then(|| peek(v.as_ptr() as usize + v.len(), GUARD));
    if g.is_some() {
        GUARDS_READ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    g
}

/// How many spare-capacity guards were actually read (the receive handed
/// back the test's own allocation): asserted non-zero, so that the guard
/// checks cannot silently vanish.
static GUARDS_READ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn guards_read() -> usize {
    GUARDS_READ.load(std::sync::atomic::Ordering::Relaxed)
}

/// Checks a truncated nonblocking receive: `MPI_ERR_TRUNCATE` from wait,
/// the first `cap` bytes delivered, nothing written past them.
fn check_truncated_irecv(w: &Comm, r: &mut Request, want: &[u8], cap: usize, what: &str) {
    let e = w.wait(r).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Truncate, "{what}: {e:?}");
    match &e {
        Error::RecvTruncated { status, msg_len } => {
            assert_eq!(*msg_len, want.len(), "{what}");
            assert_eq!(status.count, cap, "{what}");
        }
        other => panic!("{what}: expected RecvTruncated, got {other:?}"),
    }
    let got = r.take_buffer().unwrap();
    assert_eq!(got.len(), cap, "{what}: length of the handed-back buffer");
    assert!(got[..] == want[..cap], "{what}: delivered prefix");
    if let Some(g) = guard_of(&got, got.capacity()) {
        assert!(
            g.iter().all(|b| *b == G),
            "{what}: bytes written past the receive buffer"
        );
    }
}

/// Checks a truncated blocking receive into `buf[..cap]` (the rest of
/// `buf` is the guard).
fn check_truncated_recv(r: Result<Status, Error>, buf: &[u8], want: &[u8], cap: usize, what: &str) {
    match r {
        Err(Error::RecvTruncated { status, msg_len }) => {
            assert_eq!(msg_len, want.len(), "{what}");
            assert_eq!(status.count, cap, "{what}");
        }
        other => panic!("{what}: expected RecvTruncated, got {other:?}"),
    }
    assert!(buf[..cap] == want[..cap], "{what}: delivered prefix");
    assert!(
        buf[cap..].iter().all(|b| *b == G),
        "{what}: bytes written past the receive buffer"
    );
}

// ------------------------------------------------------- singleton checks

fn invalid_ranks(w: &Comm) {
    let n = w.size();
    for bad in [n, n + 1, -3, -100, i32::MAX, i32::MIN, ANY_SOURCE] {
        // ANY_SOURCE is a valid source but never a destination.
        assert_eq!(
            class(w.send(b"x", bad, 0)),
            ErrorClass::Rank,
            "send to {bad}"
        );
        assert_eq!(
            class(w.ssend(b"x", bad, 0)),
            ErrorClass::Rank,
            "ssend to {bad}"
        );
        assert_eq!(
            class(w.rsend(b"x", bad, 0)),
            ErrorClass::Rank,
            "rsend to {bad}"
        );
        assert_eq!(
            class(w.bsend(b"x", bad, 0)),
            ErrorClass::Rank,
            "bsend to {bad}"
        );
        assert_eq!(
            class(w.isend(vec![1], bad, 0)),
            ErrorClass::Rank,
            "isend to {bad}"
        );
        assert_eq!(class(w.issend(vec![1], bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.irsend(vec![1], bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.send_init(vec![1], bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.ssend_init(vec![1], bad, 0)), ErrorClass::Rank);
        let i32t = Datatype::basic(BasicType::I32);
        assert_eq!(
            class(w.send_typed(&[0u8; 4], 1, &i32t, bad, 0)),
            ErrorClass::Rank
        );
        assert_eq!(
            class(w.isend_typed(&[0u8; 4], 1, &i32t, bad, 0)),
            ErrorClass::Rank
        );
        if bad == ANY_SOURCE {
            continue;
        }
        assert_eq!(
            class(w.recv(&mut [0u8; 4], bad, 0)),
            ErrorClass::Rank,
            "recv from {bad}"
        );
        assert_eq!(class(w.irecv(vec![0u8; 4], bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.iprobe(bad, ANY_TAG)), ErrorClass::Rank);
        assert_eq!(class(w.probe(bad, ANY_TAG)), ErrorClass::Rank);
        assert_eq!(class(w.improbe(bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.mprobe(bad, 0)), ErrorClass::Rank);
        assert_eq!(class(w.recv_init(vec![0u8; 4], bad, 0)), ErrorClass::Rank);
        assert_eq!(
            class(w.recv_typed(&mut [0u8; 4], 1, &i32t, bad, 0)),
            ErrorClass::Rank
        );
        assert_eq!(
            class(w.irecv_typed(vec![0u8; 4], 1, &i32t, bad, 0)),
            ErrorClass::Rank
        );
        assert_eq!(class(w.bcast(&mut [0u8; 1], bad)), ErrorClass::Root);
        assert_eq!(
            class(w.reduce(&[1i32], &mut [0i32], ReduceOp::Sum, bad)),
            ErrorClass::Root
        );
        assert_eq!(
            class(w.gather(&[1u8], &mut [0u8; 1], bad)),
            ErrorClass::Root
        );
    }
    // The special values themselves are fine.
    w.send(b"x", PROC_NULL, 0).unwrap();
    assert_eq!(
        w.recv(&mut [0u8; 1], PROC_NULL, 0).unwrap().source,
        PROC_NULL
    );
}

fn invalid_tags(w: &Comm) {
    let me = w.rank();
    for bad in [TAG_UB + 1, i32::MAX, -2, -100, i32::MIN] {
        assert_eq!(
            class(w.send(b"x", me, bad)),
            ErrorClass::Tag,
            "send tag {bad}"
        );
        assert_eq!(class(w.isend(vec![1], me, bad)), ErrorClass::Tag);
        assert_eq!(class(w.issend(vec![1], me, bad)), ErrorClass::Tag);
        assert_eq!(class(w.bsend(b"x", me, bad)), ErrorClass::Tag);
        assert_eq!(class(w.send_init(vec![1], me, bad)), ErrorClass::Tag);
        assert_eq!(
            class(w.recv(&mut [0u8; 1], me, bad)),
            ErrorClass::Tag,
            "recv tag {bad}"
        );
        assert_eq!(
            class(w.irecv(vec![0u8; 1], ANY_SOURCE, bad)),
            ErrorClass::Tag
        );
        assert_eq!(class(w.iprobe(ANY_SOURCE, bad)), ErrorClass::Tag);
        assert_eq!(class(w.improbe(me, bad)), ErrorClass::Tag);
        assert_eq!(class(w.recv_init(vec![0u8; 1], me, bad)), ErrorClass::Tag);
    }
    // The wildcards spelled as explicit values are not wildcards.
    assert_eq!(
        class(w.recv(&mut [0u8; 1], Source::Any, Tag::Value(ANY_TAG))),
        ErrorClass::Tag
    );
    assert_eq!(
        class(w.irecv(vec![0u8; 1], Source::Rank(ANY_SOURCE), Tag::Any)),
        ErrorClass::Rank
    );
    // ANY_TAG (-1) is a receive wildcard, never a send tag.
    assert_eq!(class(w.send(b"x", me, ANY_TAG)), ErrorClass::Tag);
    assert_eq!(class(w.isend(vec![1], me, ANY_TAG)), ErrorClass::Tag);
    // TAG_UB itself is valid.
    w.send(b"ub", me, TAG_UB).unwrap();
    let mut b = [0u8; 2];
    let st = w.recv(&mut b, me, TAG_UB).unwrap();
    assert_eq!((st.tag, &b), (TAG_UB, b"ub"));
}

fn datatype_errors(w: &Comm) {
    let me = w.rank();
    let i32t = Datatype::basic(BasicType::I32);
    // Negative counts.
    assert_eq!(
        class(w.send_typed(&[0u8; 8], -1, &i32t, me, 0)),
        ErrorClass::Count
    );
    assert_eq!(
        class(w.isend_typed(&[0u8; 8], -5, &i32t, me, 0)),
        ErrorClass::Count
    );
    assert_eq!(
        class(w.recv_typed(&mut [0u8; 8], -1, &i32t, me, 0)),
        ErrorClass::Count
    );
    assert_eq!(
        class(w.irecv_typed(vec![0u8; 8], i64::MIN, &i32t, me, 0)),
        ErrorClass::Count
    );
    assert_eq!(class(Datatype::contiguous(-1, &i32t)), ErrorClass::Count);
    // Uncommitted types.
    let v = Datatype::vector(2, 1, 2, &i32t).unwrap();
    assert_eq!(
        class(w.send_typed(&[0u8; 16], 1, &v, me, 0)),
        ErrorClass::Type
    );
    assert_eq!(
        class(w.isend_typed(&[0u8; 16], 1, &v, me, 0)),
        ErrorClass::Type
    );
    assert_eq!(
        class(w.recv_typed(&mut [0u8; 16], 1, &v, me, 0)),
        ErrorClass::Type
    );
    assert_eq!(
        class(w.irecv_typed(vec![0u8; 16], 1, &v, me, 0)),
        ErrorClass::Type
    );
    // count * size overflows: a committed type of 2^40 i32s, 2^30 of them.
    let huge = Datatype::contiguous(1 << 40, &i32t).unwrap();
    huge.commit().unwrap();
    for count in [1i64 << 30, i64::MAX] {
        assert_eq!(
            class(w.send_typed(&[0u8; 16], count, &huge, me, 0)),
            ErrorClass::Count,
            "send_typed count {count} of 2^42-byte elements"
        );
        assert_eq!(
            class(w.recv_typed(&mut [0u8; 16], count, &huge, me, 0)),
            ErrorClass::Count,
            "recv_typed count {count}"
        );
    }
    let i64t = Datatype::basic(BasicType::I64);
    for count in [1i64 << 61, i64::MAX] {
        // 2^64 bytes and more: count * size overflows.
        assert_eq!(
            class(w.send_typed(&[0u8; 16], count, &i64t, me, 0)),
            ErrorClass::Count,
            "{count} i64s"
        );
        assert_eq!(
            class(w.irecv_typed(vec![0u8; 16], count, &i64t, me, 0)),
            ErrorClass::Count,
            "{count} i64s"
        );
    }
    // 2^64 - 8 bytes fit a usize: not an overflow, but no buffer covers it.
    assert_eq!(
        class(w.send_typed(&[0u8; 16], (1i64 << 61) - 1, &i64t, me, 0)),
        ErrorClass::Buffer
    );
    // A buffer that does not cover the data.
    assert_eq!(
        class(w.send_typed(&[0u8; 8], 3, &i32t, me, 0)),
        ErrorClass::Buffer
    );
    assert_eq!(
        class(w.recv_typed(&mut [0u8; 8], 3, &i32t, me, 0)),
        ErrorClass::Buffer
    );
    assert_eq!(
        class(w.irecv_typed(vec![0u8; 8], 3, &i32t, me, 0)),
        ErrorClass::Buffer
    );
    v.commit().unwrap();
    // The vector's extent is 12 bytes (last block ends at 3 * 4).
    assert_eq!(
        class(w.send_typed(&[0u8; 11], 1, &v, me, 0)),
        ErrorClass::Buffer
    );
    // A typed receive of a message longer than the type's data: the
    // prefix is unpacked, the holes and the rest stay untouched.
    let want = pattern(3, 32);
    w.send(&want, me, 8).unwrap();
    let mut dst = vec![G; 12 + GUARD];
    let e = w.recv_typed(&mut dst[..12], 1, &v, me, 8).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Truncate, "{e:?}");
    assert_eq!((&dst[0..4], &dst[8..12]), (&want[0..4], &want[4..8]));
    assert!(dst[4..8].iter().chain(&dst[12..]).all(|b| *b == G));
    w.send(&want, me, 9).unwrap();
    let mut r = w.irecv_typed(vec![G; 12], 1, &v, me, 9).unwrap();
    assert_eq!(class(w.wait(&mut r)), ErrorClass::Truncate);
    let got = r.take_buffer().unwrap();
    assert_eq!((&got[0..4], &got[8..12]), (&want[0..4], &want[4..8]));
    assert!(got[4..8].iter().all(|b| *b == G));
    // Nothing was sent by any of the failed calls.
    assert!(w.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());
}

fn truncation_self(w: &Comm) {
    let me = w.rank();
    for (k, len) in [1usize, 40, 41, 5000, 100_000, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let want = pattern(k, len);
        let cap = len / 2;
        // Blocking receive into a slice of a larger buffer.
        w.send(&want, me, 1).unwrap();
        let mut buf = vec![G; cap + GUARD];
        let r = w.recv(&mut buf[..cap], me, 1);
        check_truncated_recv(r, &buf, &want, cap, &format!("self recv {len}"));
        // Nonblocking, posted first.
        let mut r = w.irecv(guarded_vec(cap), me, 2).unwrap();
        w.send(&want, me, 2).unwrap();
        check_truncated_irecv(w, &mut r, &want, cap, &format!("self irecv {len}"));
        // Nonblocking, posted after the message arrived.
        let mut s = w.isend(want.clone(), me, 3).unwrap();
        let mut r = w.irecv(guarded_vec(cap), ANY_SOURCE, ANY_TAG).unwrap();
        check_truncated_irecv(w, &mut r, &want, cap, &format!("self late irecv {len}"));
        w.wait(&mut s).unwrap();
        // mprobe + mrecv into a short slice.
        w.send(&want, me, 4).unwrap();
        let m = w.mprobe(me, 4).unwrap();
        assert_eq!(m.status().count, len);
        let mut buf = vec![G; cap + GUARD];
        let r = w.mrecv(m, &mut buf[..cap]);
        check_truncated_recv(r, &buf, &want, cap, &format!("self mrecv {len}"));
    }
    // The truncated messages were consumed.
    assert!(w.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());
    assert!(guards_read() >= 6, "guards read: {}", guards_read());
    // A zero-byte buffer receiving one byte.
    w.send(&[9], me, 5).unwrap();
    let e = w.recv(&mut [], me, 5).unwrap_err();
    assert_eq!(e.class(), ErrorClass::Truncate);
    // waitall with one truncated receive: MPI_ERR_IN_STATUS, and that
    // request's status carries MPI_ERR_TRUNCATE.
    let mut reqs = vec![
        w.irecv(vec![0u8; 8], me, 6).unwrap(),
        w.irecv(vec![0u8; 2], me, 7).unwrap(),
    ];
    w.send(b"12345678", me, 6).unwrap();
    w.send(b"12345678", me, 7).unwrap();
    let e = w.waitall(&mut reqs).unwrap_err();
    assert_eq!(e.class(), ErrorClass::InStatus, "{e:?}");
    match e {
        Error::InStatus { statuses, .. } => {
            assert_eq!(statuses[0].1.error, ErrorClass::Success);
            assert_eq!(statuses[1].1.error, ErrorClass::Truncate);
            assert_eq!(statuses[1].1.count, 2);
        }
        other => panic!("expected InStatus, got {other:?}"),
    }
}

fn requests(w: &Comm) {
    let me = w.rank();
    // A completed request is null: wait and test give the empty status,
    // cancel is MPI_ERR_REQUEST, its buffer is handed back once.
    let mut r = w.irecv(vec![0u8; 4], me, 1).unwrap();
    w.send(b"abcd", me, 1).unwrap();
    assert_eq!(w.wait(&mut r).unwrap().count, 4);
    assert!(r.is_null());
    assert_eq!(w.wait(&mut r).unwrap(), Status::EMPTY);
    assert_eq!(w.test(&mut r).unwrap(), Some(Status::EMPTY));
    assert_eq!(class(w.cancel(&r)), ErrorClass::Request);
    assert_eq!(r.take_buffer().unwrap(), b"abcd");
    assert!(r.take_buffer().is_none());
    // The null request.
    let mut null = Request::null();
    assert_eq!(class(w.cancel(&null)), ErrorClass::Request);
    assert_eq!(w.wait(&mut null).unwrap(), Status::EMPTY);
    // A cancelled receive: completes cancelled, then it is null too.
    let mut r = w.irecv(vec![3u8; 4], me, 2).unwrap();
    assert!(w.cancel(&r).unwrap());
    let st = w.wait(&mut r).unwrap();
    assert!(st.cancelled);
    assert_eq!(class(w.cancel(&r)), ErrorClass::Request);
    assert_eq!(r.take_buffer().unwrap(), vec![3u8; 4]);
    // ... and it did not consume the message sent afterwards.
    w.send(b"late", me, 2).unwrap();
    let mut b = [0u8; 4];
    assert_eq!(w.recv(&mut b, me, 2).unwrap().count, 4);
    // A waitall over completed (null) requests: empty statuses.
    let mut two = vec![Request::null(), Request::null()];
    assert_eq!(w.waitall(&mut two).unwrap(), vec![Status::EMPTY; 2]);
    // Persistent: start while active is MPI_ERR_REQUEST; wait when
    // inactive is the empty status.
    let mut p = w.recv_init(vec![0u8; 4], me, 3).unwrap();
    assert_eq!(p.wait().unwrap(), Status::EMPTY);
    p.start().unwrap();
    assert_eq!(class(p.start()), ErrorClass::Request);
    w.send(b"pers", me, 3).unwrap();
    assert_eq!(p.wait().unwrap().count, 4);
    assert_eq!(p.buffer().unwrap(), b"pers");
    // Restartable after completion.
    p.start().unwrap();
    assert!(p.cancel().unwrap());
    assert!(p.wait().unwrap().cancelled);
}

fn buffered_sends(w: &Comm) {
    let me = w.rank();
    // No buffer attached: an error, not a block.
    let e = w.bsend(b"x", me, 1).unwrap_err();
    assert!(matches!(e, Error::BsendBufferFull { .. }), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Buffer);
    // Detach without a buffer.
    assert_eq!(class(w.detach_buffer()), ErrorClass::Arg);
    // A buffer too small for the message (plus the overhead).
    w.attach_buffer(vec![0u8; 100 + adi::BSEND_OVERHEAD])
        .unwrap();
    assert_eq!(class(w.attach_buffer(vec![0u8; 10])), ErrorClass::Arg);
    assert_eq!(class(w.bsend(&[1u8; 101], me, 1)), ErrorClass::Buffer);
    // Exactly fits; then full.
    w.bsend(&[2u8; 100], me, 1).unwrap();
    let e = w.bsend(&[3u8; 1], me, 1).unwrap_err();
    assert!(matches!(e, Error::BsendBufferFull { .. }), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Buffer);
    // The buffered message arrives; the refused ones never do.
    let mut b = [0u8; 200];
    let st = w.recv(&mut b, me, 1).unwrap();
    assert_eq!(st.count, 100);
    assert!(b[..100].iter().all(|x| *x == 2));
    assert!(w.iprobe(me, 1).unwrap().is_none());
    assert_eq!(w.detach_buffer().unwrap().len(), 100 + adi::BSEND_OVERHEAD);
}

/// Whether a 4 GiB zeroed allocation (never touched) can be reserved:
/// Linux's default overcommit heuristic refuses one larger than RAM + swap,
/// and a refused allocation aborts the process rather than panicking.
fn can_reserve_4_gib() -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/meminfo") else {
        return false;
    };
    let kib = |key: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let overcommit = std::fs::read_to_string("/proc/sys/vm/overcommit_memory")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    overcommit != "2" && kib("MemTotal:") + kib("SwapTotal:") > 6 << 20
}

fn too_large(w: &Comm) {
    if !can_reserve_4_gib() {
        eprintln!("skipped the 4 GiB message checks: not enough memory to reserve 4 GiB");
        return;
    }
    let me = w.rank();
    // One byte more than a header can describe. calloc'd and never
    // touched unless the implementation copies it before checking.
    let len = u32::MAX as usize + 1;
    let big = vec![0u8; len];
    assert_eq!(
        class(w.send(&big, me, 1)),
        ErrorClass::Count,
        "send of 4 GiB to self"
    );
    assert_eq!(
        class(w.isend(big, me, 1)),
        ErrorClass::Count,
        "isend of 4 GiB to self"
    );
    assert!(w.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());
}

fn communicators(w: &Comm) {
    // Negative colors other than UNDEFINED.
    assert_eq!(class(w.split(-1, 0)), ErrorClass::Arg);
    assert_eq!(class(w.split(i32::MIN, 0)), ErrorClass::Arg);
    assert!(w.split(UNDEFINED, 0).unwrap().is_none());
    // Collective buffer mismatches.
    let mut out = [0i32; 2];
    assert_eq!(
        class(w.allreduce(&[1i32], &mut out, ReduceOp::Sum)),
        ErrorClass::Arg
    );
    assert_eq!(
        class(w.gather(&[1u8; 4], &mut [0u8; 3], 0)),
        ErrorClass::Arg
    );
    let mut f = [0f32];
    assert_eq!(
        class(w.allreduce(&[1f32], &mut f, ReduceOp::BitAnd)),
        ErrorClass::Op
    );
    // A dup is size 1 too: its ranks are checked against it.
    let d = w.dup().unwrap();
    assert_eq!(class(d.send(b"x", 1, 0)), ErrorClass::Rank);
    // Messages do not cross communicators.
    w.send(b"w", 0, 1).unwrap();
    assert!(d.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());
    assert_eq!(w.recv(&mut [0u8; 1], 0, 1).unwrap().count, 1);
}

/// Every singleton case in one test: `init` may run once per process.
#[test]
fn singleton_bad_input() {
    if common::role().is_some() {
        return; // a rank of a multi-rank test: not this test
    }
    let w = adi::init().unwrap();
    assert_eq!((w.rank(), w.size()), (0, 1));
    invalid_ranks(&w);
    invalid_tags(&w);
    datatype_errors(&w);
    truncation_self(&w);
    requests(&w);
    buffered_sends(&w);
    too_large(&w);
    communicators(&w);
    // Still works after all that.
    w.send(b"ok", 0, 9).unwrap();
    let mut b = [0u8; 2];
    w.recv(&mut b, 0, 9).unwrap();
    assert_eq!(&b, b"ok");
    adi::finalize().unwrap();
    // After finalize.
    let e = w.send(b"x", 0, 0).unwrap_err();
    assert!(matches!(e, Error::NotInitialized { .. }), "{e:?}");
    assert_eq!(e.class(), ErrorClass::Other);
    assert_eq!(class(w.irecv(vec![0u8; 1], 0, 0)), ErrorClass::Other);
    assert_eq!(class(adi::finalize()), ErrorClass::Other);
}

// ------------------------------------------------------------ two ranks

/// Truncation between two processes over every protocol (inline, eager,
/// CMA or fragments, prepost-direct into a posted receive), blocking and
/// nonblocking, guard bytes after the receive buffer checked.
fn role_truncation(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    let sizes = [2usize, 40, 41, 3000, 70_000, 300_000, 2 << 20];
    if me == 0 {
        for (k, &len) in sizes.iter().enumerate() {
            let mut go = [0u8; 1];
            // Blocking receive on the other side.
            w.send(&pattern(k, len), peer, 1).unwrap();
            // Nonblocking receive posted before the send (prepost path).
            w.recv(&mut go, peer, 100).unwrap();
            w.send(&pattern(k + 50, len), peer, 2).unwrap();
            w.send(b"n", peer, 3).unwrap();
        }
        // Messages that fit: exactly, and with room to spare.
        for (k, &len) in sizes.iter().enumerate() {
            for round in 0..3 {
                let mut go = [0u8; 1];
                w.recv(&mut go, peer, 101).unwrap();
                w.send(&pattern(k + round, len), peer, 4).unwrap();
                w.send(&pattern(k + round + 7, len), peer, 5).unwrap();
            }
        }
    } else {
        for (k, &len) in sizes.iter().enumerate() {
            let cap = len / 2;
            let want = pattern(k, len);
            let mut buf = vec![G; cap + GUARD];
            let r = w.recv(&mut buf[..cap], peer, 1);
            check_truncated_recv(r, &buf, &want, cap, &format!("recv {len}"));
            let mut r = w.irecv(guarded_vec(cap), peer, 2).unwrap();
            // Let the receive be seen (and advertised) before the send.
            for _ in 0..50 {
                assert!(w.test(&mut r).unwrap().is_none());
            }
            w.send(&[1], peer, 100).unwrap();
            let want = pattern(k + 50, len);
            check_truncated_irecv(w, &mut r, &want, cap, &format!("irecv {len}"));
            // The message after it arrives intact: nothing was left behind.
            let mut b = [0u8; 4];
            let st = w.recv(&mut b, peer, ANY_TAG).unwrap();
            assert_eq!((st.tag, st.count, b[0]), (3, 1, b'n'));
        }
        // A message shorter than the buffer modifies only its own bytes
        // (MPI 3.1 §3.2.4); one of exactly the buffer's size nothing past it.
        for (k, &len) in sizes.iter().enumerate() {
            for round in 0..3 {
                let spare = 100;
                let mut exact = w.irecv(guarded_vec(len), peer, 4).unwrap();
                let mut roomy = w.irecv(guarded_vec(len + spare), peer, 5).unwrap();
                for _ in 0..20 {
                    assert!(w.test(&mut exact).unwrap().is_none());
                }
                w.send(&[1], peer, 101).unwrap();
                let st = w.wait(&mut exact).unwrap();
                assert_eq!((st.source, st.tag, st.count), (peer, 4, len));
                let got = exact.take_buffer().unwrap();
                assert!(got == pattern(k + round, len), "exact fit of {len}");
                if let Some(g) = guard_of(&got, got.capacity()) {
                    assert!(g.iter().all(|b| *b == G), "past an exact fit of {len}");
                }
                let st = w.wait(&mut roomy).unwrap();
                assert_eq!(st.count, len);
                let got = roomy.take_buffer().unwrap();
                assert_eq!(got.len(), len + spare);
                assert!(
                    got[..len] == pattern(k + round + 7, len)[..],
                    "short message of {len}"
                );
                assert!(
                    got[len..].iter().all(|b| *b == G),
                    "a {len}-byte message modified the buffer beyond its length"
                );
                if let Some(g) = guard_of(&got, got.capacity()) {
                    assert!(g.iter().all(|b| *b == G), "past a roomy buffer of {len}");
                }
            }
        }
        // 7 truncated + 2 × 21 fitting receives; every one hands back the
        // test's own allocation today.
        assert!(guards_read() >= 40, "guards read: {}", guards_read());
    }
}

/// Invalid ranks on a communicator smaller than the world, a message too
/// large for the transport to a real peer, bsend to a peer with a full
/// buffer; the device keeps working.
fn role_peer_errors(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    // Split into singletons: rank 1 is valid in the world, not in `solo`.
    let solo = w.split(me, 0).unwrap().unwrap();
    assert_eq!(solo.size(), 1);
    assert_eq!(class(solo.send(b"x", 1, 0)), ErrorClass::Rank);
    assert_eq!(class(solo.recv(&mut [0u8; 1], 1, 0)), ErrorClass::Rank);
    assert_eq!(class(solo.bcast(&mut [0u8; 1], 1)), ErrorClass::Root);
    assert_eq!(class(w.send(b"x", 2, 0)), ErrorClass::Rank);
    if me == 0 {
        if can_reserve_4_gib() {
            let big = vec![0u8; u32::MAX as usize + 1];
            assert_eq!(
                class(w.send(&big, peer, 1)),
                ErrorClass::Count,
                "send of 4 GiB"
            );
            assert_eq!(
                class(w.isend(big, peer, 1)),
                ErrorClass::Count,
                "isend of 4 GiB"
            );
        } else {
            eprintln!("skipped the 4 GiB message checks: not enough memory to reserve 4 GiB");
        }
        assert_eq!(class(w.bsend(b"x", peer, 1)), ErrorClass::Buffer);
        w.attach_buffer(vec![0u8; 64 + adi::BSEND_OVERHEAD])
            .unwrap();
        w.bsend(&[5u8; 64], peer, 2).unwrap();
        assert_eq!(class(w.bsend(&[6u8; 64], peer, 2)), ErrorClass::Buffer);
        w.detach_buffer().unwrap();
        w.send(b"end", peer, 3).unwrap();
    } else {
        let mut b = [0u8; 64];
        let st = w.recv(&mut b, peer, ANY_TAG).unwrap();
        // The failed sends sent nothing: the first message is the bsend's.
        assert_eq!((st.tag, st.count), (2, 64));
        assert_eq!(b, [5u8; 64]);
        let st = w.recv(&mut b, peer, ANY_TAG).unwrap();
        assert_eq!((st.tag, &b[..st.count]), (3, &b"end"[..]));
    }
    w.barrier().unwrap();
    // A bcast whose lengths differ between ranks: the longer root message
    // truncates at the other rank (MPI_ERR_TRUNCATE there), no hang.
    let mut b = vec![G; 8 + GUARD];
    if me == 0 {
        b[..8].copy_from_slice(b"12345678");
        w.bcast(&mut b[..8], 0).unwrap();
    } else {
        let e = w.bcast(&mut b[..4], 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Truncate, "{e:?}");
        assert_eq!(&b[..4], b"1234");
        assert!(b[4..].iter().all(|x| *x == G));
    }
    w.barrier().unwrap();
    w.barrier().unwrap();
    assert!(w.iprobe(Source::Any, Tag::Any).unwrap().is_none());
}

/// A matched message received through another communicator than the one
/// it was probed on (the API lets one express it: `Message` does not say
/// which communicator it came from). `MPI_Mrecv` takes no communicator: the
/// status must give the sender's rank in the communicator the message was
/// sent and probed on, or the call must be refused (`MPI_ERR_ARG`); never
/// a wrong rank such as `PROC_NULL` for a real message.
fn role_mrecv_other_comm(w: &Comm) {
    let (me, peer) = (w.rank(), 1 - w.rank());
    let solo = w.split(me, 0).unwrap().unwrap();
    if me == 1 {
        w.send(b"probed on world", peer, 7).unwrap();
    } else {
        let m = w.mprobe(peer, 7).unwrap();
        assert_eq!(m.status().source, peer);
        let mut b = [0u8; 32];
        match solo.mrecv(m, &mut b) {
            Ok(st) => {
                assert_eq!(&b[..st.count], b"probed on world");
                assert_eq!(
                    st.source, peer,
                    "status source of a message probed on world, received through `solo`: {st:?}"
                );
            }
            Err(e) => assert_eq!(e.class(), ErrorClass::Arg, "{e:?}"),
        }
    }
    w.barrier().unwrap();
}

#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    let w = adi::init().unwrap();
    match role.as_str() {
        "truncation" => role_truncation(&w),
        "peer_errors" => role_peer_errors(&w),
        "mrecv_other_comm" => role_mrecv_other_comm(&w),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

fn run(role: &str, env: &[(&str, &str)]) {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let code = common::launch(role, 2, &env, Duration::from_secs(60));
    assert_eq!(code, 0, "job {role} {env:?}: launcher exit status {code}");
}

/// CMA on (as the machine allows), prepost-direct for receives of 1 KiB
/// or more, CMA above 64 KiB.
#[test]
fn two_ranks_truncation_guard_bytes() {
    run(
        "truncation",
        &[("TMX_SHMEM_TUNE", "prepost_min=1K,cma_threshold=64K")],
    );
}

/// Without CMA, with a small eager area: the large messages travel as
/// fragments.
#[test]
fn two_ranks_truncation_guard_bytes_without_cma() {
    run(
        "truncation",
        &[("TMX_SHMEM_CMA", "off"), ("TMX_SHMEM_EAGER_BYTES", "64K")],
    );
}

#[test]
fn two_ranks_peer_errors() {
    run("peer_errors", &[]);
}

#[test]
fn two_ranks_mrecv_through_other_communicator() {
    run("mrecv_other_comm", &[]);
}
