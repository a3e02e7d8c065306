//! Multi-host jobs: one proxy per host, ranks on PMI_PORT. `local:` hosts run
//! everywhere; `netns:` hosts need root and iproute2 and build (and always tear
//! down) their own network namespaces, using only addresses inside them.

mod common;

use common::*;
use std::process::Command;

#[test]
fn two_local_hosts_exchange_kvs_and_see_two_nodes() {
    let o = tmrun(&["--hosts", "local:a,local:b", "-ppn", "2", PROBE]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    for r in 0..4 {
        let local = if r < 2 { "[0, 1]" } else { "[2, 3]" };
        let want = format!("tmx-pmi-check: rank {r} of 4 ok (pmi=V1 bootstrap=Port");
        let line = o
            .lines()
            .into_iter()
            .find(|l| l.starts_with(&want))
            .unwrap_or_else(|| panic!("missing {want}: {o:#?}"));
        assert!(line.ends_with(&format!("nodes=2 local={local})")), "{line}");
    }
}

#[test]
fn uneven_placement_and_tagged_output() {
    let o = tmrun(&[
        "--hosts",
        "local:a,local:b",
        "-ppn",
        "2",
        "-n",
        "3",
        "-l",
        "sh",
        "-c",
        "echo \"id=$PMI_ID local=$MPI_LOCALRANKID/$MPI_LOCALNRANKS job=$TMX_JOB_ID\"",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let job = o.job_id().unwrap();
    let mut lines = o.lines();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            format!("[0] id=0 local=0/2 job={job}"),
            format!("[1] id=1 local=1/2 job={job}"),
            format!("[2] id=2 local=0/1 job={job}"),
        ]
    );
}

#[test]
fn pluggable_remote_start_command() {
    // The template gets {host} replaced and the proxy command line appended.
    let o = tmrun(&[
        "--hosts",
        "alpha,beta",
        "-ppn",
        "1",
        "--launcher",
        "env TMX_TEST_HOST={host}",
        "sh",
        "-c",
        "echo \"$TMX_TEST_HOST $PMI_ID\"",
    ]);
    assert_eq!(o.code, Some(0), "{o:#?}");
    let mut lines = o.lines();
    lines.sort();
    assert_eq!(lines, vec!["alpha 0", "beta 1"]);
}

#[test]
fn failing_remote_start_command_is_a_lost_host() {
    let o = tmrun(&[
        "--hosts",
        "nowhere",
        "-ppn",
        "1",
        "--launcher",
        "false",
        "true",
    ]);
    assert_eq!(o.code, Some(255), "{o:#?}");
    assert!(o.stderr.contains("host nowhere lost"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
}

#[test]
fn remote_rank_killed_tears_down_every_host() {
    let pids = TempDir::new("mh-kill");
    let o = tmrun(&[
        "--hosts",
        "local:a,local:b",
        "-ppn",
        "2",
        PROBE,
        "--shm",
        "--pid-dir",
        pids.str(),
        "--fail-rank",
        "3",
        "--fail",
        "sigkill",
    ]);
    assert_eq!(o.code, Some(137), "{o:#?}");
    assert!(o.stderr.contains("rank 3 (pid"), "{o:#?}");
    assert!(o.stderr.contains("killed by signal 9 (SIGKILL)"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
    assert_eq!(assert_no_orphans(pids.path()), 4);
    assert_no_shm(&o.job_id().unwrap());
}

/// Network namespaces of one test: a hub with a bridge at 10.231.0.1/24 and
/// one namespace per host (10.231.0.2, .3, ...). Removed on drop, with any
/// process still inside.
struct Netns {
    names: Vec<String>,
}

impl Netns {
    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip")
            .args(args)
            .output()
            .map_err(|e| format!("ip: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn create(hosts: usize) -> Result<Netns, String> {
        let base = format!("tmxt{}", std::process::id());
        let hub = format!("{base}h");
        let mut ns = Netns {
            names: vec![hub.clone()],
        };
        Self::ip(&["netns", "add", &hub])?;
        Self::ip(&["-n", &hub, "link", "set", "lo", "up"])?;
        Self::ip(&["-n", &hub, "link", "add", "br0", "type", "bridge"])?;
        Self::ip(&["-n", &hub, "link", "set", "br0", "up"])?;
        Self::ip(&["-n", &hub, "addr", "add", "10.231.0.1/24", "dev", "br0"])?;
        for i in 0..hosts {
            let name = format!("{base}n{i}");
            Self::ip(&["netns", "add", &name])?;
            ns.names.push(name.clone());
            let veth = format!("vh{i}");
            Self::ip(&[
                "-n", &hub, "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns",
                &name,
            ])?;
            Self::ip(&["-n", &hub, "link", "set", &veth, "master", "br0", "up"])?;
            Self::ip(&["-n", &name, "link", "set", "lo", "up"])?;
            Self::ip(&["-n", &name, "link", "set", "eth0", "up"])?;
            let addr = format!("10.231.0.{}/24", i + 2);
            Self::ip(&["-n", &name, "addr", "add", &addr, "dev", "eth0"])?;
        }
        Ok(ns)
    }

    fn hub(&self) -> &str {
        &self.names[0]
    }

    fn hosts_arg(&self) -> String {
        self.names[1..]
            .iter()
            .map(|n| format!("netns:{n}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", n]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(p) = pid.parse::<i32>() {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(p),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

fn netns_or_skip(hosts: usize) -> Option<Netns> {
    if !require(&[("ip", "iproute2")]) {
        return None;
    }
    match Netns::create(hosts) {
        Ok(ns) => Some(ns),
        Err(e) => {
            // Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN): a privilege, not a package.
            eprintln!("SKIPPED: cannot create network namespaces: {e}");
            None
        }
    }
}

#[test]
fn network_namespace_hosts() {
    let Some(ns) = netns_or_skip(2) else {
        return;
    };
    let hosts = ns.hosts_arg();
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.hub(), TMRUN])
        .args([
            "--hosts",
            &hosts,
            "-ppn",
            "2",
            "--server-addr",
            "10.231.0.1",
        ])
        .arg(PROBE);
    let o = run(c);
    assert_eq!(o.code, Some(0), "{o:#?}");
    assert_eq!(
        o.lines()
            .iter()
            .filter(|l| l.contains(" of 4 ok (pmi=V1 bootstrap=Port") && l.contains("nodes=2"))
            .count(),
        4,
        "{o:#?}"
    );

    // A rank killed inside one namespace brings down the ranks in the other.
    let pids = TempDir::new("netns-kill");
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns.hub(), TMRUN])
        .args([
            "--hosts",
            &hosts,
            "-ppn",
            "2",
            "--server-addr",
            "10.231.0.1",
        ])
        .args([
            PROBE,
            "--pid-dir",
            pids.str(),
            "--fail-rank",
            "1",
            "--fail",
            "sigkill",
        ]);
    let o = run(c);
    assert_eq!(o.code, Some(137), "{o:#?}");
    assert!(o.stderr.contains("rank 1 (pid"), "{o:#?}");
    assert!(o.elapsed < TEARDOWN_BOUND, "{o:#?}");
    assert_eq!(assert_no_orphans(pids.path()), 4);
    drop(ns);
}
