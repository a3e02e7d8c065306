//! `tmrun` end to end: KVS exchange, output forwarding, exit statuses, faults,
//! malformed PMI input. Needs no system package.

mod common;

use common::*;
use std::process::Command;

fn probe_lines(o: &Outcome, n: usize) {
    let ok: Vec<&str> = o
        .lines()
        .into_iter()
        .filter(|l| l.starts_with("tmx-pmi-check: rank "))
        .collect();
    assert_eq!(ok.len(), n, "{o:#?}");
    for r in 0..n {
        let want = format!("tmx-pmi-check: rank {r} of {n} ok");
        assert!(
            ok.iter().any(|l| l.starts_with(&want)),
            "missing {want}: {o:#?}"
        );
    }
}

#[test]
fn pmi1_kvs_exchange_four_ranks() {
    let o = tmrun(&["-n", "4", PROBE, "--keys", "3"]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    probe_lines(&o, 4);
    assert!(o.stdout.contains("pmi=V1 bootstrap=Fd"));
    assert!(o.stdout.contains("nodes=1 local=[0, 1, 2, 3]"), "{o:#?}");
    let job = o.job_id().unwrap();
    assert!(o.stdout.contains(&format!("kvs=kvs_tmx_{job}")));
    assert_no_shm(&job);
}

#[test]
fn pmi2_kvs_exchange_four_ranks() {
    let o = tmrun(&["-n", "4", PROBE, "--pmi", "2"]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    probe_lines(&o, 4);
    assert!(o.stdout.contains("pmi=V2"));
}

/// `--bind-to core`: each rank runs on exactly one CPU, local rank i on the
/// i-th CPU tmrun may use (wrapping around when ranks outnumber CPUs).
#[test]
fn bind_to_core_pins_each_rank_to_one_cpu() {
    let o = tmrun(&[
        "-n",
        "2",
        "--bind-to",
        "core",
        "sh",
        "-c",
        "echo \"$PMI_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2)\"",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let allowed: Vec<usize> = {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        list.split(',')
            .flat_map(|r| match r.split_once('-') {
                Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).collect::<Vec<_>>(),
                None => vec![r.parse().unwrap()],
            })
            .collect()
    };
    let mut lines = o.lines();
    lines.sort();
    assert_eq!(lines.len(), 2, "{o:#?}");
    for (r, l) in lines.iter().enumerate() {
        let want = allowed[r % allowed.len()];
        assert_eq!(*l, format!("{r} {want}"), "{o:#?}");
    }
}

#[test]
fn environment_reaches_every_rank() {
    let o = tmrun(&[
        "-n",
        "3",
        "--env",
        "FOO=bar=baz",
        "sh",
        "-c",
        "echo \"$PMI_RANK/$PMI_SIZE $MPI_LOCALRANKID/$MPI_LOCALNRANKS $FOO job=$TMX_JOB_ID\"",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let mut lines = o.lines();
    lines.sort();
    let job = o.job_id().unwrap();
    assert!(job.chars().all(|c| c.is_ascii_hexdigit()), "{job}");
    for (r, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("{r}/3 {r}/3 bar=baz job={job}"));
    }
}

#[test]
fn tag_output_prefixes_whole_lines_on_both_streams() {
    let script = format!(
        "i=0; while [ $i -lt 200 ]; do echo \"r$PMI_RANK-$i-{}\"; echo \"e$PMI_RANK-$i\" >&2; i=$((i+1)); done",
        "x".repeat(100)
    );
    let o = tmrun(&["-n", "3", "-l", "sh", "-c", &script]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let lines = o.lines();
    assert_eq!(lines.len(), 600);
    for l in &lines {
        let (tag, rest) = l.split_once("] ").unwrap();
        let r = tag.strip_prefix('[').unwrap();
        assert!(rest.starts_with(&format!("r{r}-")), "{l}");
        assert!(rest.ends_with(&"x".repeat(100)), "half line: {l}");
    }
    let errs: Vec<&str> = o.stderr.lines().collect();
    assert_eq!(errs.len(), 600, "{}", o.stderr);
    for l in errs {
        let (tag, rest) = l.split_once("] ").unwrap();
        assert!(rest.starts_with(&format!("e{}-", &tag[1..])), "{l}");
    }
}

#[test]
fn partial_line_is_flushed_and_continued() {
    // A prompt without newline is flushed; its continuation gets no second tag.
    let o = tmrun(&[
        "-n",
        "1",
        "-l",
        "sh",
        "-c",
        "printf 'N = '; sleep 0.3; echo 5; printf tail",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    assert_eq!(o.stdout, "[0] N = 5\n[0] tail");
}

#[test]
fn stdin_goes_to_rank_zero_only() {
    let mut c = Command::new(TMRUN);
    c.args([
        "-n",
        "2",
        "sh",
        "-c",
        "if read x; then echo \"rank $PMI_RANK got $x\"; else echo \"rank $PMI_RANK eof\"; fi",
    ]);
    let o = run_with_input(c, b"hello\n");
    assert_eq!(o.code, Some(0), "{o:#?}");
    let mut lines = o.lines();
    lines.sort();
    assert_eq!(lines, vec!["rank 0 got hello", "rank 1 eof"]);
}

#[test]
fn exit_status_convention() {
    // All zero -> 0.
    assert_eq!(tmrun(&["-n", "2", "true"]).code, Some(0));
    // First failure wins: rank 1 exits 5 at once, rank 0 would exit 6 later but is torn down.
    let o = tmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $PMI_RANK = 1 ]; then exit 5; fi; sleep 10; exit 6",
    ]);
    assert_eq!(o.code, Some(5), "{o:#?}");
    assert!(o.stderr.contains("rank 1 (pid"), "{o:#?}");
    assert!(o.stderr.contains("exited with status 5"), "{o:#?}");
    // Signal N -> 128 + N.
    let o = tmrun(&["-n", "1", "sh", "-c", "kill -SEGV $$"]);
    assert_eq!(o.code, Some(128 + 11), "{o:#?}");
    assert!(o.stderr.contains("signal 11 (SIGSEGV)"), "{o:#?}");
    // A rank that spoke PMI and exited 0 without finalize -> 1.
    let o = tmrun(&["-n", "2", PROBE, "--fail-rank", "0", "--fail", "nofinalize"]);
    assert_eq!(o.code, Some(1), "{o:#?}");
    assert!(o.stderr.contains("without calling PMI finalize"), "{o:#?}");
    // Cannot start -> 127; usage -> 2.
    let o = tmrun(&["-n", "2", "/nonexistent/tmx-program"]);
    assert_eq!(o.code, Some(127), "{o:#?}");
    assert!(o.stderr.contains("cannot start"), "{o:#?}");
    assert_eq!(tmrun(&["-n", "0", "true"]).code, Some(2));
    assert_eq!(tmrun(&["--bogus", "true"]).code, Some(2));
}

/// Runs a probe job in which rank 1 misbehaves, and checks the common
/// fault-handling promises: status, message, bounded teardown, no orphans, clean /dev/shm.
fn fault(extra: &[&str], mode: &str, want_code: i32, want_msg: &str) {
    let pids = TempDir::new("fault");
    let mut args = vec!["-n", "4"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
        PROBE,
        "--shm",
        "--pid-dir",
        pids.str(),
        "--fail-rank",
        "1",
        "--fail",
        mode,
    ]);
    let o = tmrun(&args);
    assert_eq!(o.code, Some(want_code), "{mode}: {o:#?}");
    assert!(
        o.stderr.contains(want_msg),
        "{mode}: want {want_msg:?}: {o:#?}"
    );
    let job = o.job_id().expect("job id in the message");
    // The probe made shared-memory objects; tmrun must have removed them.
    assert!(
        o.stdout
            .contains(&format!("created /dev/shm/tmx-{job}-check-")),
        "{o:#?}"
    );
    assert_no_shm(&job);
    assert_eq!(
        assert_no_orphans(pids.path()),
        4,
        "every rank wrote its pid"
    );
    let took = o.elapsed;
    assert!(
        took < TEARDOWN_BOUND
            + std::time::Duration::from_secs(if extra.is_empty() { 0 } else { 2 }),
        "{mode}: took {took:?}"
    );
}

#[test]
fn fault_rank_killed_by_sigkill() {
    fault(&[], "sigkill", 137, "rank 1 (pid");
    fault(
        &[],
        "sigkill",
        137,
        "was killed by signal 9 (SIGKILL) before finalize",
    );
}

#[test]
fn fault_rank_exits_3() {
    fault(&[], "exit:3", 3, "rank 1 (pid");
    fault(&[], "exit:3", 3, "exited with status 3 before finalize");
}

#[test]
fn fault_rank_calls_abort_7() {
    fault(&[], "abort:7", 7, "called abort with exit code 7");
}

#[test]
fn fault_rank_calls_abort_7_over_pmi2() {
    let o = tmrun(&[
        "-n",
        "3",
        PROBE,
        "--pmi",
        "2",
        "--fail-rank",
        "2",
        "--fail",
        "abort:7",
    ]);
    assert_eq!(o.code, Some(7), "{o:#?}");
    assert!(o.stderr.contains("rank 2 (pid"), "{o:#?}");
    assert!(
        o.stderr
            .contains("called abort with exit code 7: requested_by_--fail"),
        "{o:#?}"
    );
}

#[test]
fn fault_hung_rank_with_timeout() {
    fault(&["--timeout", "1"], "hang", 124, "job timed out after 1 s");
}

#[test]
fn mpiexec_timeout_env_and_process_groups() {
    // A hung shell with a background child: both must go (process-group kill).
    let pids = TempDir::new("timeout");
    let script = format!(
        "echo $$ > {d}/$PMI_RANK.pid; sleep 30 & echo $! > {d}/$PMI_RANK.child.pid; wait",
        d = pids.str()
    );
    let mut c = Command::new(TMRUN);
    c.args(["-n", "2", "sh", "-c", &script])
        .env("MPIEXEC_TIMEOUT", "1");
    let o = run(c);
    assert_eq!(o.code, Some(124), "{o:#?}");
    assert!(o.stderr.contains("timed out after 1 s"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
    assert_eq!(assert_no_orphans(pids.path()), 4);
}

#[test]
fn sigterm_to_tmrun_tears_the_job_down() {
    let pids = TempDir::new("sigterm");
    let script = format!("echo $$ > {}/$PMI_RANK.pid; exec sleep 30", pids.str());
    let mut child = Command::new(TMRUN)
        .args(["-n", "2", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_dir(pids.path()).unwrap().count() < 2 {
        assert!(std::time::Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{err}");
    assert!(err.contains("tmrun received signal 15 (SIGTERM)"), "{err}");
    assert_eq!(assert_no_orphans(pids.path()), 2);
}

fn raw(text: &str, replies: &str) -> Outcome {
    tmrun(&["-n", "1", PROBE, "--raw", text, "--raw-replies", replies])
}

#[test]
fn malformed_requests_get_error_replies_and_the_job_goes_on() {
    let cases = [
        (
            "cmd=frobnicate\\n",
            "cmd=error rc=-1 msg=unknown_command_frobnicate",
        ),
        ("garbage line\\n", "cmd=error rc=-1 msg=malformed_request"),
        ("cmd=put key\\n", "cmd=error rc=-1 msg=malformed_request"),
        (
            "cmd=init pmi_version=9 pmi_subversion=9\\n",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1",
        ),
        ("cmd=get\\n", "cmd=get_result rc=-1 msg=missing_key"),
    ];
    for (text, want) in cases {
        let o = raw(&format!("{text}cmd=finalize\\n"), "2");
        assert_eq!(o.code, Some(0), "{text}: {o:#?}");
        assert_eq!(
            o.lines(),
            vec![
                format!("raw reply: {want}").as_str(),
                "raw reply: cmd=finalize_ack"
            ],
            "{text}"
        );
    }
}

#[test]
fn oversized_values_and_lines_are_refused() {
    let value = format!("cmd=put key=k value={}\\ncmd=finalize\\n", "A".repeat(2000));
    let o = raw(&value, "2");
    assert_eq!(o.code, Some(0), "{o:#?}");
    assert_eq!(
        o.lines()[0],
        "raw reply: cmd=put_result rc=-1 msg=value_too_long"
    );
    let o = tmrun(&[
        "-n",
        "1",
        PROBE,
        "--raw",
        "cmd=put key=k value=@FILL@\\ncmd=finalize\\n",
        "--raw-fill",
        "200000",
        "--raw-replies",
        "2",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    assert_eq!(
        o.lines(),
        vec![
            "raw reply: cmd=error rc=-1 msg=message_too_long",
            "raw reply: cmd=finalize_ack"
        ]
    );
}

#[test]
fn unframeable_stream_aborts_the_job_cleanly() {
    let pids = TempDir::new("garbage");
    let script = format!("echo $$ > {}/0.pid; exec sleep 30", pids.str());
    // Rank 0 sends bytes that are neither a PMI-1 line nor a PMI-2 prefix;
    // rank 1 would sleep for 30 s.
    let both = format!(
        "if [ $PMI_RANK = 0 ]; then exec {PROBE} --raw 'garbage!' --raw-replies 1; else {script}; fi"
    );
    let o = tmrun(&["-n", "2", "sh", "-c", &both]);
    assert_eq!(o.code, Some(255), "{o:#?}");
    assert!(o.stderr.contains("rank 0 (pid"), "{o:#?}");
    assert!(o.stderr.contains("broke the PMI protocol"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
    assert_no_orphans(pids.path());
}

#[test]
fn sigkill_of_tmrun_itself_takes_the_ranks_along() {
    // PR_SET_PDEATHSIG: ranks get SIGKILL when tmrun dies without a teardown.
    let pids = TempDir::new("tmrun-kill9");
    let script = format!("echo $$ > {}/$PMI_RANK.pid; exec sleep 30", pids.str());
    let mut child = Command::new(TMRUN)
        .args(["-n", "3", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::read_dir(pids.path()).unwrap().count() < 3 {
        assert!(std::time::Instant::now() < deadline, "ranks did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(assert_no_orphans(pids.path()), 3);
}
