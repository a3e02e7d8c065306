//! `tmrun` against clients and ranks that misbehave: a PMI client that never
//! reads its replies, a rank that exits before PMI init, the rank to blame
//! when several fail at once, ranks in their own sessions, and a rank
//! started by a launcher whose protocol the client does not speak.
//! Needs no system package.

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

/// A client that pipelines 30 000 requests and never reads a reply cannot
/// be served: the job ends with the protocol-breach status and a message
/// naming the rank, long before `--timeout`.
#[test]
fn pmi_client_that_never_reads_its_replies_ends_the_job() {
    let o = tmrun(&[
        "-n",
        "2",
        "--timeout",
        "20",
        "sh",
        "-c",
        &format!(
            "if [ $PMI_RANK = 0 ]; then exec {PROBE} --raw 'cmd=get_maxes\\n' \
             --raw-repeat 30000 --raw-hold 3600 --raw-replies 0; else exec {PROBE}; fi"
        ),
    ]);
    assert_eq!(o.code, Some(255), "{o:#?}");
    assert!(o.stderr.contains("rank 0 (pid"), "{o:#?}");
    assert!(o.stderr.contains("does not read its PMI replies"), "{o:#?}");
    assert!(o.elapsed < Duration::from_secs(15), "{o:#?}");
}

/// A rank that exits (status 0) without ever speaking PMI while another
/// waits in the init barrier: the barrier can never complete, so the job
/// ends at once with status 1 and says why, in both orders.
#[test]
fn rank_exiting_before_pmi_init_ends_the_job() {
    for (what, script) in [
        (
            "exits first",
            format!("if [ $PMI_RANK = 1 ]; then exit 0; fi; sleep 0.3; exec {PROBE}"),
        ),
        (
            "exits while rank 0 waits",
            format!("if [ $PMI_RANK = 1 ]; then sleep 0.5; exit 0; fi; exec {PROBE}"),
        ),
    ] {
        let o = tmrun(&["-n", "2", "--timeout", "20", "sh", "-c", &script]);
        assert_eq!(o.code, Some(1), "{what}: {o:#?}");
        assert!(o.stderr.contains("rank 1 (pid"), "{what}: {o:#?}");
        assert!(
            o.stderr
                .contains("exited with status 0 without initializing PMI"),
            "{what}: {o:#?}"
        );
        assert!(o.elapsed < Duration::from_secs(10), "{what}: {o:#?}");
    }
    // Non-PMI programs on every rank are still fine.
    let o = tmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $PMI_RANK = 1 ]; then exit 0; fi; sleep 0.3",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
}

/// Rank 0 exits 1 first (as a survivor that noticed a dead peer would),
/// rank 1 dies of SIGKILL a moment later: the signal death is the cause,
/// and the job's status is 137, not 1.
#[test]
fn a_signal_death_reaped_soon_after_an_exit_is_blamed() {
    let o = tmrun(&[
        "-n",
        "3",
        "sh",
        "-c",
        "case $PMI_RANK in 0) exit 1;; 1) sleep 0.1; kill -9 $$;; *) sleep 30;; esac",
    ]);
    assert_eq!(o.code, Some(137), "{o:#?}");
    assert!(o.stderr.contains("rank 1 (pid"), "{o:#?}");
    assert!(o.stderr.contains("killed by signal 9 (SIGKILL)"), "{o:#?}");
    // Alone, the exit is still the cause.
    let o = tmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $PMI_RANK = 0 ]; then exit 3; fi; sleep 30",
    ]);
    assert_eq!(o.code, Some(3), "{o:#?}");
    assert!(o.stderr.contains("rank 0 (pid"), "{o:#?}");
}

/// A rank that exits with the "a peer died" status is named as such.
#[test]
fn the_peer_died_status_is_explained() {
    let o = tmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        &format!(
            "if [ $PMI_RANK = 0 ]; then exit {}; fi; sleep 30",
            launcher::run::EXIT_PEER_DIED
        ),
    ]);
    assert_eq!(o.code, Some(launcher::run::EXIT_PEER_DIED), "{o:#?}");
    assert!(o.stderr.contains("because a peer died"), "{o:#?}");
}

fn session_of(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("").to_string();
    // Fields after the command: state ppid pgrp session ...
    after.split_whitespace().nth(3).unwrap_or("").to_string()
}

/// Every rank leads its own session (as Hydra starts them), so the
/// scheduler's autogroups treat ranks as separate tasks, not one.
#[test]
fn each_rank_runs_in_its_own_session() {
    let o = tmrun(&[
        "-n",
        "3",
        "sh",
        "-c",
        "echo \"$$ $(cut -d' ' -f6 /proc/$$/stat)\"",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let mine = session_of("self");
    let lines = o.lines();
    assert_eq!(lines.len(), 3, "{o:#?}");
    for l in lines {
        let (pid, sid) = l.split_once(' ').unwrap();
        assert_eq!(pid, sid, "a rank must lead its session: {l}; {o:#?}");
        assert_ne!(sid, mine, "{o:#?}");
    }
}

fn probe_alone(env: &[(&str, &str)]) -> Outcome {
    let mut c = Command::new(PROBE);
    for v in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_ID",
        "PMI_RANK",
        "PMI_SIZE",
        "TMX_JOB_ID",
    ] {
        c.env_remove(v);
    }
    for (k, _) in std::env::vars() {
        if k.starts_with("PMIX_")
            || k.starts_with("OMPI_")
            || k.starts_with("SLURM_")
            || k.starts_with("HYDI_")
            || k.starts_with("MPI_LOCAL")
        {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    run(c)
}

/// A process that a launcher started as one of several ranks, but without
/// PMI-1/PMI-2, must not run as a singleton: it fails at init and says
/// which launcher and what to use instead.
#[test]
fn no_singleton_when_the_environment_says_the_job_is_larger() {
    let o = probe_alone(&[
        ("PMIX_RANK", "1"),
        ("PMIX_NAMESPACE", "prterun-vm-1@1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "1"),
    ]);
    assert_eq!(o.code, Some(1), "{o:#?}");
    assert!(o.stderr.contains("Open MPI"), "{o:#?}");
    assert!(o.stderr.contains("mpiexec.hydra"), "{o:#?}");
    assert!(!o.stdout.contains("rank 0 of 1 ok"), "{o:#?}");

    let o = probe_alone(&[
        ("PMIX_RANK", "3"),
        ("PMIX_NAMESPACE", "slurm.pmix.7.0"),
        ("SLURM_PROCID", "3"),
        ("SLURM_STEP_NUM_TASKS", "4"),
        ("SLURM_STEP_ID", "0"),
    ]);
    assert_eq!(o.code, Some(1), "{o:#?}");
    assert!(o.stderr.contains("srun --mpi=pmi2"), "{o:#?}");

    let o = probe_alone(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_STEP_NUM_TASKS", "2"),
        ("SLURM_STEP_ID", "0"),
    ]);
    assert_eq!(o.code, Some(1), "{o:#?}");
    assert!(o.stderr.contains("srun --mpi=pmi2"), "{o:#?}");

    let o = probe_alone(&[("MPI_LOCALNRANKS", "2"), ("PMI_SIZE", "2")]);
    assert_eq!(o.code, Some(1), "{o:#?}");

    // A one-rank step, or an allocation's shell (no task of a step): a
    // singleton is right.
    for env in [
        &[
            ("SLURM_PROCID", "0"),
            ("SLURM_STEP_NUM_TASKS", "1"),
            ("SLURM_STEP_ID", "0"),
        ][..],
        &[("SLURM_JOB_ID", "7"), ("SLURM_NTASKS", "4")][..],
        &[("PMIX_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")][..],
    ] {
        let o = probe_alone(env);
        assert_eq!(o.code, Some(0), "{env:?}: {o:#?}");
        assert!(o.stdout.contains("rank 0 of 1 ok"), "{env:?}: {o:#?}");
    }
}
