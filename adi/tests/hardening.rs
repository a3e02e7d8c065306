//! Hardening: absurd sizes are MPI errors (never a panic or an abort),
//! members of a `bcast` that disagree about the root get `MPI_ERR_ROOT`,
//! the node segment's name cannot be taken ahead of a job, and after a
//! `kill -9` of one rank under heavy traffic the launcher names that rank
//! (50 runs in a row).
//!
//! The multi-rank cases launch this binary as the ranks (see
//! `common::launch`); the `rank_entry_point` test is what each rank runs.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::{BasicType, Comm, Datatype, Error, ErrorClass, ReduceOp, Source, Tag};
use launcher::run::{run_job, Cause, JobSpec};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn class<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorClass {
    match r {
        Ok(v) => panic!("expected an error, got Ok({v:?})"),
        Err(e) => e.class(),
    }
}

/// A datatype of one `i32` with extent 0: `count` of them touch 4 bytes
/// of the buffer but pack to `4 * count` bytes.
fn zero_extent_i32() -> Datatype {
    let t = Datatype::resized(&Datatype::basic(BasicType::I32), 0, 0).unwrap();
    t.commit().unwrap();
    t
}

/// Sizes that cannot be allocated (packing or staging `count` times a
/// type's size) come back as `MPI_ERR_NO_MEM`, and the device still works.
fn role_absurd_sizes(w: &Comm) {
    let t = zero_extent_i32();
    let me = w.rank();
    for count in [1i64 << 40, 1 << 45, (i64::MAX / 8) & !7] {
        let buf = [7u8; 4];
        let what = format!("count {count}");
        assert_eq!(
            class(w.isend_typed(&buf, count, &t, me, 1)),
            ErrorClass::NoMem,
            "isend_typed {what}"
        );
        assert_eq!(
            class(w.send_typed(&buf, count, &t, me, 1)),
            ErrorClass::NoMem,
            "send_typed {what}"
        );
        assert_eq!(
            class(w.irecv_typed(vec![0u8; 4], count, &t, me, 1)),
            ErrorClass::NoMem,
            "irecv_typed {what}"
        );
        let mut rbuf = [0u8; 4];
        assert_eq!(
            class(w.recv_typed(&mut rbuf, count, &t, me, 1)),
            ErrorClass::NoMem,
            "recv_typed {what}"
        );
    }
    // Nothing was sent or left posted: an ordinary exchange still works.
    let mut r = w.irecv(vec![0u8; 5], me, 2).unwrap();
    w.send(b"hello", me, 2).unwrap();
    let st = w.wait(&mut r).unwrap();
    assert_eq!((st.count, r.take_buffer().unwrap()), (5, b"hello".to_vec()));
    let mut out = [0u64];
    w.allreduce(&[3u64], &mut out, ReduceOp::Sum).unwrap();
    assert_eq!(out[0], 3 * w.size() as u64);
}

/// Rank 1 passes root 2 where every other rank passes root 0: rank 1's
/// tree parent (rank 0) sends it root 0's data, which it must refuse with
/// `MPI_ERR_ROOT` instead of taking it for root 2's.
fn role_bcast_root_mismatch(w: &Comm) {
    assert_eq!(w.size(), 4);
    let root = if w.rank() == 1 { 2 } else { 0 };
    let mut buf = if w.rank() == root {
        b"from root".to_vec()
    } else {
        vec![0u8; 9]
    };
    let r = w.bcast(&mut buf, root);
    if w.rank() == 1 {
        let e = r.unwrap_err();
        assert_eq!(e.class(), ErrorClass::Root, "{e}");
        assert!(e.to_string().contains("root"), "{e}");
    } else {
        r.unwrap();
        assert_eq!(buf, b"from root");
    }
    // Matching roots work as before, also for reduce.
    let mut buf = if w.rank() == 3 {
        b"again".to_vec()
    } else {
        vec![0u8; 5]
    };
    w.bcast(&mut buf, 3).unwrap();
    assert_eq!(buf, b"again");
    let mut sum = [0i32; 2];
    w.reduce(&[1, w.rank()], &mut sum, ReduceOp::Sum, 2)
        .unwrap();
    if w.rank() == 2 {
        assert_eq!(sum, [4, 6]);
    }
}

/// Ring traffic until a peer dies: 4 ranks pass 64 KiB messages around.
/// Each rank first writes its pid to `TMX_TEST_PID_DIR/<rank>.pid`.
fn role_traffic(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    if let Ok(dir) = std::env::var("TMX_TEST_PID_DIR") {
        let tmp = format!("{dir}/{me}.tmp");
        std::fs::write(&tmp, std::process::id().to_string()).unwrap();
        std::fs::rename(&tmp, format!("{dir}/{me}.pid")).unwrap();
    }
    let msg = vec![me as u8; 64 << 10];
    let mut rbuf = vec![0u8; 64 << 10];
    let until = Instant::now() + Duration::from_secs(30);
    let mut i = 0;
    while Instant::now() < until {
        let mut s = w.isend(msg.clone(), (me + 1) % n, i % 100).unwrap();
        w.recv(&mut rbuf, (me + n - 1) % n, i % 100).unwrap();
        w.wait(&mut s).unwrap();
        i += 1;
    }
    panic!("traffic ran 30 s without the victim being killed");
}

/// A plain exchange, for jobs that only need to start and finish.
fn role_exchange(w: &Comm) {
    let (me, n) = (w.rank(), w.size());
    let mut s = w.isend(vec![me as u8; 100], (me + 1) % n, 5).unwrap();
    let mut b = [0u8; 100];
    let st = w.recv(&mut b, Source::Any, Tag::Any).unwrap();
    assert_eq!(b[0] as i32, st.source);
    w.wait(&mut s).unwrap();
    w.barrier().unwrap();
}

#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    if role == "singleton_after_go" {
        // Started alone: wait until the parent planted the object under
        // this process's old singleton name, then initialize.
        let go = PathBuf::from(std::env::var("TMX_TEST_GO").unwrap());
        let t = Instant::now();
        while !go.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "no go");
            std::thread::sleep(Duration::from_millis(5));
        }
        let w = adi::init().unwrap();
        assert_eq!(w.size(), 1);
        role_exchange(&w);
        adi::finalize().unwrap();
        return;
    }
    let world = adi::init().unwrap();
    match role.as_str() {
        "absurd_sizes" => role_absurd_sizes(&world),
        "bcast_root_mismatch" => role_bcast_root_mismatch(&world),
        "traffic" => role_traffic(&world),
        "exchange" => role_exchange(&world),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

#[test]
fn absurd_sizes_are_mpi_errors_not_aborts() {
    let code = common::launch("absurd_sizes", 1, &[], Duration::from_secs(60));
    assert_eq!(code, 0);
}

#[test]
fn bcast_with_another_root_on_one_rank_is_mpi_err_root() {
    let code = common::launch("bcast_root_mismatch", 4, &[], Duration::from_secs(60));
    assert_eq!(code, 0);
}

fn spec(role: &str, n: usize) -> JobSpec {
    let exe = std::env::current_exe().unwrap();
    let args = [
        "--exact",
        "rank_entry_point",
        "--nocapture",
        "--test-threads=1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut spec = JobSpec::new(n, exe.to_string_lossy().to_string(), args);
    spec.env.push((common::ROLE.to_string(), role.to_string()));
    spec.tag_output = true;
    spec.kill_grace = Duration::from_millis(500);
    spec.timeout = Some(Duration::from_secs(60));
    spec
}

/// Someone (a stale job, another user who guessed the id) holds
/// `/dev/shm/tmx-<jobid>-shmem` before the job starts: the job runs anyway
/// under a fresh name, and the object is not touched while it runs.
#[test]
fn a_job_whose_segment_name_is_taken_still_runs() {
    let job = format!("hard{}", std::process::id());
    let path = format!("/dev/shm/tmx-{job}-shmem");
    std::fs::write(&path, b"planted").unwrap();
    let mut s = spec("exchange", 2);
    s.job_id = Some(job.clone());
    let report = {
        let _one_at_a_time = common::serial();
        run_job(&s).unwrap()
    };
    let _ = std::fs::remove_file(&path);
    assert_eq!(report.exit_code, 0, "{:?}", report.failure);
}

/// A singleton's job id is random: an object planted under the name its
/// pid would have given (`tmx-s<pid>-shmem`) does not stop it.
#[test]
fn a_singleton_cannot_be_stopped_by_a_planted_name() {
    let dir = std::env::temp_dir().join(format!("tmx-adi-hard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "rank_entry_point",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(common::ROLE, "singleton_after_go")
    .env("TMX_TEST_GO", &go);
    for v in ["PMI_FD", "PMI_PORT", "PMI_RANK", "PMI_SIZE", "TMX_JOB_ID"] {
        c.env_remove(v);
    }
    let mut child = c.spawn().unwrap();
    let planted = format!("/dev/shm/tmx-s{:x}-shmem", child.id());
    std::fs::write(&planted, b"planted").unwrap();
    std::fs::write(&go, b"").unwrap();
    let status = child.wait().unwrap();
    let _ = std::fs::remove_file(&planted);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "the singleton failed: {status}");
}

fn wait_for_pids(dir: &Path, n: usize, limit: Duration) -> Option<Vec<i32>> {
    let t = Instant::now();
    loop {
        let pids: Vec<i32> = (0..n)
            .filter_map(|r| std::fs::read_to_string(dir.join(format!("{r}.pid"))).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect();
        if pids.len() == n {
            return Some(pids);
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `kill -9` of one of 4 ranks in the middle of ring traffic, 50 times:
/// every time the job's status is 137 and the killed rank is the one
/// named, never a survivor that noticed the dead peer and exited first.
#[test]
fn kill_9_of_one_rank_blames_that_rank_50_times() {
    let runs: usize = std::env::var("TMX_TEST_KILL9_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let _one_at_a_time = common::serial();
    let mut wrong = Vec::new();
    let t0 = Instant::now();
    for run in 0..runs {
        let dir = std::env::temp_dir().join(format!("tmx-kill9-{}-{run}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = spec("traffic", 4);
        s.env
            .push(("TMX_TEST_PID_DIR".into(), dir.to_string_lossy().into()));
        s.tag_output = false;
        // Survivors look for dead peers every millisecond: they notice the
        // victim's death as fast as the launcher can reap it (the race
        // this test is about).
        s.env.push(("TMX_SHMEM_LIVENESS_MS".into(), "1".into()));
        let victim = run % 4;
        let killer = {
            let dir = dir.clone();
            std::thread::spawn(move || {
                let pids = wait_for_pids(&dir, 4, Duration::from_secs(30))?;
                // Some traffic first.
                std::thread::sleep(Duration::from_millis(20));
                let st = Command::new("kill")
                    .args(["-9", &pids[victim].to_string()])
                    .status()
                    .ok()?;
                st.success().then_some(pids[victim])
            })
        };
        let report = run_job(&s).unwrap();
        let killed = killer.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let f = report.failure.clone();
        let right = killed.is_some()
            && report.exit_code == 137
            && f.as_ref().is_some_and(|f| {
                f.rank == Some(victim) && f.cause == Cause::Signaled { signal: 9 }
            });
        if !right {
            eprintln!(
                "run {run}: killed rank {victim} (pid {killed:?}); tmrun said: {}; exit status {}",
                f.map(|f| f.to_string())
                    .unwrap_or_else(|| "no failure".into()),
                report.exit_code
            );
            wrong.push(run);
        }
        assert!(launcher::job::job_shm_objects(Path::new("/dev/shm"), &report.job_id).is_empty());
    }
    eprintln!(
        "{runs} kill -9 runs in {:.1} s, {} blamed the wrong rank",
        t0.elapsed().as_secs_f64(),
        wrong.len()
    );
    assert!(wrong.is_empty(), "wrong rank blamed in runs {wrong:?}");
}
