//! The node segment's name cannot be taken over: an object planted under
//! it by someone else is refused before it is mapped, local rank 0 creates
//! under a fresh name when the job's own is taken, and peers may trace a
//! rank (for CMA) only through its launcher.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use shmem_onesided::{CmaMode, Config, Error, Node, Place, Ptracer, Segment};
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

fn job(name: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "sn{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn cfg() -> Config {
    Config {
        ring_slots: 8,
        heap_bytes: 1 << 20,
        eager_bytes: 1 << 20,
        attach_timeout: Duration::from_secs(3),
        ..Config::default()
    }
}

fn leftovers(job: &str) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("tmx-{job}-")))
        .collect()
}

/// Plants `/dev/shm/tmx-<job>-shmem` (a page of zeros) with `mode`, owned
/// by `uid` if given.
fn plant(job: &str, mode: u32, uid: Option<u32>) -> String {
    let path = format!("/dev/shm/tmx-{job}-shmem");
    std::fs::write(&path, vec![0u8; 64 << 10]).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    if let Some(uid) = uid {
        std::os::unix::fs::chown(&path, Some(uid), None).unwrap();
    }
    path
}

/// A rank other than 0 opens the name and finds an object it must not
/// trust (world-readable, or another user's): refused at once, before it
/// is mapped, and left in place (not ours to remove).
#[test]
fn a_planted_object_is_refused_before_it_is_mapped() {
    let mut cases = vec![("mode 0644", 0o644, None), ("mode 0666", 0o666, None)];
    if nix::unistd::geteuid().is_root() {
        // As root, an object of another user can be made here.
        cases.push(("owner nobody", 0o600, Some(65534)));
    }
    for (what, mode, uid) in cases {
        let j = job("planted");
        let path = plant(&j, mode, uid);
        let t = Instant::now();
        let r = Node::init(&j, 1, 2, cfg());
        let took = t.elapsed();
        let still_there = std::path::Path::new(&path).exists();
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(r, Err(Error::SegmentNotOurs { .. })),
            "{what}: {r:?} after {took:?}"
        );
        assert!(took < Duration::from_secs(1), "{what}: took {took:?}");
        assert!(still_there, "{what}: a planted object was removed");
    }
}

/// Local rank 0 finds the job's name taken (a stale job, or another user
/// who guessed it): it creates under a fresh name, which the others are
/// given, and the job runs; the planted object is left alone.
#[test]
fn rank_0_creates_under_a_fresh_name_when_the_job_name_is_taken() {
    let j = job("taken");
    let path = plant(&j, 0o600, None);
    let res = Segment::reserve(&j).unwrap();
    let name = res.name().to_owned();
    assert!(name.starts_with(&format!("/tmx-{j}-shmem-")), "{name}");
    let meta = std::fs::metadata(format!("/dev/shm{name}")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let other = {
        let name = name.clone();
        std::thread::spawn(move || Node::init_at(Place::Open(name), 1, 2, cfg()))
    };
    let n0 = Node::init_at(Place::Create(res), 0, 2, cfg()).unwrap();
    let n1 = other.join().unwrap().unwrap();
    assert_eq!((n0.size(), n1.rank()), (2, 1));
    // Attached: the fresh name is unlinked; the planted object stays.
    assert_eq!(leftovers(&j), vec![format!("tmx-{j}-shmem")]);
    std::fs::remove_file(&path).unwrap();
    n0.finalize();
    n1.finalize();

    // A reservation that is never attached is removed when dropped.
    let j = job("dropped");
    let res = Segment::reserve(&j).unwrap();
    assert_eq!(res.name(), format!("/tmx-{j}-shmem"));
    assert_eq!(leftovers(&j).len(), 1);
    drop(res);
    assert!(leftovers(&j).is_empty());
}

/// With CMA on and a peer on the node, a rank names its launcher (its
/// parent process) the tracer, never "any process"; alone or with CMA off
/// it names nobody.
#[test]
fn only_the_launcher_may_trace_a_rank() {
    let j = job("ptracer");
    let parent = nix::unistd::getppid().as_raw() as u32;
    let c = Config {
        cma: CmaMode::Auto,
        ..cfg()
    };
    let other = {
        let (j, c) = (j.clone(), c.clone());
        std::thread::spawn(move || Node::init(&j, 1, 2, c).unwrap())
    };
    let n0 = Node::init(&j, 0, 2, c).unwrap();
    let n1 = other.join().unwrap();
    for n in [&n0, &n1] {
        match n.ptracer() {
            Ptracer::Launcher { pid } => assert_eq!(*pid, parent),
            // No Yama in this kernel: nothing to declare, and nothing was.
            Ptracer::Failed { reason } => assert!(!reason.is_empty()),
            Ptracer::None => panic!("CMA is on and a peer is local: a tracer is needed"),
        }
    }
    n0.finalize();
    n1.finalize();
    let alone = Node::init(&job("alone"), 0, 1, cfg()).unwrap();
    assert_eq!(alone.ptracer(), &Ptracer::None);
    alone.finalize();
    let off = Node::init(
        &job("off"),
        0,
        1,
        Config {
            cma: CmaMode::Off,
            ..cfg()
        },
    )
    .unwrap();
    assert_eq!(off.ptracer(), &Ptracer::None);
    off.finalize();
}
