//! Interop with Debian's MPICH 4.0.2: our PMI client under `mpiexec.hydra`, and
//! a real libmpich program under our `tmrun`. Skips (printing why) when mpich is
//! missing, unless `TMX_REQUIRE_SYSTEM_PACKAGES` is set.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

const HYDRA: &[(&str, &str)] = &[("mpiexec.hydra", "mpich")];
/// `mpicc.mpich` (package mpich) and `mpi.h` (package libmpich-dev, in
/// `/usr/include/<multiarch>/mpich/`).
fn mpicc_ready() -> bool {
    let header = std::fs::read_dir("/usr/include")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("mpich/mpi.h"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/usr/include/x86_64-linux-gnu/mpich/mpi.h"));
    let header = header.to_string_lossy().into_owned();
    require(&[("mpicc.mpich", "mpich"), (header.as_str(), "libmpich-dev")])
}

fn hydra(args: &[&str]) -> Outcome {
    let mut c = Command::new("mpiexec.hydra");
    c.args(args)
        .env_remove("MPIEXEC_TIMEOUT")
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT");
    run(c)
}

fn ok_ranks(o: &Outcome, n: usize, prefix: &str) {
    for r in 0..n {
        let want = format!("{prefix}: rank {r} of {n} ok");
        assert!(
            o.lines().iter().any(|l| l.starts_with(&want)),
            "missing {want:?}: {o:#?}"
        );
    }
}

#[test]
fn our_pmi1_client_under_hydra() {
    if !require(HYDRA) {
        return;
    }
    let o = hydra(&["-n", "4", PROBE, "--keys", "3"]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    ok_ranks(&o, 4, "tmx-pmi-check");
    assert!(o.stdout.contains("bootstrap=Fd"), "{o:#?}");
    assert!(o.stdout.contains("nodes=1 local=[0, 1, 2, 3]"), "{o:#?}");
    assert!(o.stdout.contains("kvs=kvs_"), "{o:#?}");
}

#[test]
fn our_pmi2_client_under_hydra() {
    if !require(HYDRA) {
        return;
    }
    let o = hydra(&["-n", "4", PROBE, "--pmi", "2"]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    ok_ranks(&o, 4, "tmx-pmi-check");
    assert!(o.stdout.contains("pmi=V2"), "{o:#?}");
}

#[test]
fn our_client_over_pmi_port_under_hydra() {
    if !require(HYDRA) {
        return;
    }
    let o = hydra(&["-n", "3", "-pmi-port", PROBE]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    ok_ranks(&o, 3, "tmx-pmi-check");
    assert!(o.stdout.contains("bootstrap=Port"), "{o:#?}");
}

#[test]
fn our_abort_is_understood_by_hydra() {
    if !require(HYDRA) {
        return;
    }
    let pids = TempDir::new("hydra-abort");
    let o = hydra(&[
        "-n",
        "3",
        PROBE,
        "--pid-dir",
        pids.str(),
        "--fail-rank",
        "1",
        "--fail",
        "abort:7",
    ]);
    assert_eq!(o.code, Some(7), "{o:#?}");
    assert_eq!(assert_no_orphans(pids.path()), 3);
}

/// Compiles tests/c/allreduce.c once per test binary, into a temp dir.
fn allreduce() -> &'static PathBuf {
    static BIN: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    &BIN.get_or_init(|| {
        let dir = TempDir::new("mpicc");
        let out = dir.path().join("allreduce");
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c/allreduce.c");
        let st = Command::new("mpicc.mpich")
            .arg("-O1")
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .status()
            .expect("running mpicc.mpich");
        assert!(st.success(), "mpicc.mpich failed on {}", src.display());
        (dir, out)
    })
    .1
}

#[test]
fn mpich_program_under_tmrun() {
    if !mpicc_ready() {
        return;
    }
    let prog = allreduce().to_str().unwrap().to_string();
    let o = tmrun(&["-n", "4", &prog]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    ok_ranks(&o, 4, "allreduce");
    assert!(o.stdout.contains("sum 6"), "{o:#?}");
    let o = tmrun(&["-n", "2", "-l", &prog]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    assert!(
        o.stdout.contains("[1] allreduce: rank 1 of 2 ok sum 1"),
        "{o:#?}"
    );
}

#[test]
fn mpich_abort_under_tmrun() {
    if !mpicc_ready() {
        return;
    }
    let prog = allreduce().to_str().unwrap().to_string();
    let o = tmrun(&["-n", "4", &prog, "abort", "7"]);
    assert_eq!(o.code, Some(7), "{o:#?}");
    assert!(o.stderr.contains("rank 1 (pid"), "{o:#?}");
    assert!(o.stderr.contains("called abort with exit code 7"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
    let job = o.job_id().unwrap();
    assert_no_shm(&job);
}

/// Open MPI's `mpiexec` starts ranks with PMIx, which tmx does not speak:
/// every rank must fail at init and say what to use instead, never run as
/// a "rank 0 of 1" singleton.
#[test]
fn our_client_refuses_to_be_a_singleton_under_open_mpi() {
    if !require(&[("mpiexec.openmpi", "openmpi-bin")]) {
        return;
    }
    let mut c = Command::new("mpiexec.openmpi");
    c.args(["--allow-run-as-root", "--oversubscribe", "-n", "2", PROBE])
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .env_remove("PMI_FD")
        .env_remove("PMI_PORT")
        .env_remove("PMI_RANK")
        .env_remove("PMI_SIZE");
    let o = run(c);
    assert_ne!(o.code, Some(0), "{o:#?}");
    assert!(!o.stdout.contains("rank 0 of 1 ok"), "{o:#?}");
    assert!(o.stderr.contains("Open MPI"), "{o:#?}");
    assert!(o.stderr.contains("mpiexec.hydra"), "{o:#?}");
}
