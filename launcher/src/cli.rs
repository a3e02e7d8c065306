//! `tmrun`'s command line.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::run::{JobSpec, DEFAULT_KILL_GRACE};

/// Environment variable with the default job time limit in seconds (as Hydra and Open MPI).
pub const ENV_TIMEOUT: &str = "MPIEXEC_TIMEOUT";
/// Environment variable with the SIGTERM→SIGKILL grace period in milliseconds (default 1000).
pub const ENV_KILL_GRACE: &str = "TMX_LAUNCHER_KILL_GRACE_MS";

/// Most ranks `tmrun` starts on one host.
pub const MAX_LOCAL_RANKS: usize = 4096;

/// `tmrun --help`.
pub const USAGE: &str = "\
usage: tmrun -n N [-l|--tag-output] [--env K=V]... [--timeout SECS] [--bind-to core|none] PROGRAM [ARGS...]
       tmrun --hosts H1,H2,... -ppn K [-n N] [--launcher CMD] [--server-addr IP] ... PROGRAM [ARGS...]

Starts N ranks of PROGRAM on this host with a PMI-1/PMI-2 server (PMI_FD), or
K ranks per host with one proxy per host and PMI-1 over TCP (PMI_PORT).

options:
  -n, -np, --np N     number of ranks (required)
  -l, --tag-output    prefix every output line with [rank]
  --env K=V           set K=V in every rank's environment (repeatable)
  --timeout SECS      end the job after SECS seconds (default: $MPIEXEC_TIMEOUT, else none)
  --bind-to core|none pin local rank i to the i-th allowed CPU (default: none)
  --hosts LIST        hosts: NAME (started with --launcher), netns:NS (ip netns exec NS),
                      local:NAME (this machine)
  -ppn K              ranks per host (default: N spread evenly)
  --launcher CMD      remote-start command, {host} replaced (default: ssh -o BatchMode=yes {host})
  --server-addr IP    address proxies and ranks connect back to (default 127.0.0.1)
  -h, --help          this text
  -V, --version       the version

environment: MPIEXEC_TIMEOUT (seconds), TMX_LAUNCHER_KILL_GRACE_MS (default 1000),
TMX_LOG (log filter, default warn), TMX_MPI_LIB (tmx's libmpich.so, put first on
the ranks' LD_LIBRARY_PATH as libmpich.so.12; default: one beside tmrun, if built).
Ranks get PMI_FD, PMI_RANK, PMI_SIZE,
MPI_LOCALNRANKS, MPI_LOCALRANKID and TMX_JOB_ID.

exit status: 0 if every rank exited 0; otherwise the first failure decides:
its exit code, 128+N for signal N, the abort code, 124 on timeout,
1 for a rank that spoke PMI and exited without finalize, 127 if PROGRAM
cannot be started, 2 for a usage error, 255 for a PMI protocol breach.";

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Parsed {
    /// Run a job.
    Run(JobSpec),
    /// Print [`USAGE`].
    Help,
    /// Print the version.
    Version,
    /// Run as a host's proxy (started by `tmrun --hosts`, not by users).
    Proxy {
        /// `host:port` of the launcher.
        server: String,
        /// This host's index.
        host: usize,
        /// The job's token.
        token: String,
    },
}

fn parse_secs(what: &str, v: &str) -> Result<Option<Duration>> {
    let secs: f64 = v
        .trim()
        .parse()
        .map_err(|_| Error::Usage(format!("{what}: {v:?} is not a number of seconds")))?;
    if !secs.is_finite() || !(0.0..=1.0e9).contains(&secs) {
        return Err(Error::Usage(format!("{what}: {v:?} is out of range")));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(secs)))
}

/// Parses `tmrun`'s arguments (without the program name).
///
/// `env` looks up environment variables (`MPIEXEC_TIMEOUT`,
/// `TMX_LAUNCHER_KILL_GRACE_MS`); `--timeout` wins over `MPIEXEC_TIMEOUT`.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed> {
    let mut nprocs: Option<usize> = None;
    let mut tag = false;
    let mut extra_env = Vec::new();
    let mut timeout: Option<Option<Duration>> = None;
    let mut hosts = None;
    let mut ppn: Option<usize> = None;
    let mut launcher = None;
    let mut server_addr = None;
    let mut bind = crate::run::Bind::None;
    let mut proxy: (Option<String>, Option<usize>, Option<String>) = (None, None, None);
    let mut i = 0;
    let value = |i: &mut usize, opt: &str| -> Result<String> {
        *i += 1;
        args.get(*i)
            .cloned()
            .ok_or_else(|| Error::Usage(format!("{opt} needs a value")))
    };
    while i < args.len() {
        let a = args[i].as_str();
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (a, None),
        };
        let take = |i: &mut usize| -> Result<String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => value(i, name),
            }
        };
        match name {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "-n" | "-np" | "--np" => {
                let v = take(&mut i)?;
                let n: usize = v
                    .parse()
                    .map_err(|_| Error::Usage(format!("-n: {v:?} is not a rank count")))?;
                if n == 0 || n > MAX_LOCAL_RANKS {
                    return Err(Error::Usage(format!("-n must be in 1..={MAX_LOCAL_RANKS}")));
                }
                nprocs = Some(n);
            }
            "-l" | "--tag-output" => tag = true,
            "--env" | "-env" => {
                let v = take(&mut i)?;
                let (k, val) = v
                    .split_once('=')
                    .filter(|(k, _)| !k.is_empty() && !k.contains('\0'))
                    .ok_or_else(|| Error::Usage(format!("--env: {v:?} is not K=V")))?;
                extra_env.push((k.to_string(), val.to_string()));
            }
            "--timeout" => {
                let v = take(&mut i)?;
                timeout = Some(parse_secs("--timeout", &v)?);
            }
            "--hosts" | "-hosts" | "--host" | "-host" => {
                hosts = Some(crate::remote::parse_hosts(&take(&mut i)?)?);
            }
            "-ppn" | "--ppn" => {
                let v = take(&mut i)?;
                let n: usize = v
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_LOCAL_RANKS).contains(n))
                    .ok_or_else(|| Error::Usage(format!("-ppn: {v:?} is not a rank count")))?;
                ppn = Some(n);
            }
            "--bind-to" | "-bind-to" => {
                let v = take(&mut i)?;
                bind = crate::run::Bind::parse(&v).ok_or_else(|| {
                    Error::Usage(format!("--bind-to: {v:?} is not `core` or `none`"))
                })?;
            }
            "--launcher" => launcher = Some(take(&mut i)?),
            "--server-addr" => server_addr = Some(take(&mut i)?),
            "--proxy" => proxy.0 = Some(take(&mut i)?),
            "--proxy-host" => {
                let v = take(&mut i)?;
                proxy.1 = Some(
                    v.parse()
                        .map_err(|_| Error::Usage(format!("--proxy-host: {v:?}")))?,
                );
            }
            "--proxy-token" => proxy.2 = Some(take(&mut i)?),
            "--" => {
                i += 1;
                break;
            }
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(Error::Usage(format!("unknown option {s:?}")));
            }
            _ => break,
        }
        i += 1;
    }
    if let (Some(server), Some(host), Some(token)) = proxy {
        return Ok(Parsed::Proxy {
            server,
            host,
            token,
        });
    }
    let program = args
        .get(i)
        .cloned()
        .ok_or_else(|| Error::Usage("missing PROGRAM".into()))?;
    let rest = args[i + 1..].to_vec();
    let nprocs = match (nprocs, &hosts, ppn) {
        (Some(n), _, _) => n,
        (None, Some(h), Some(p)) => h.len() * p,
        _ => return Err(Error::Usage("missing -n N".into())),
    };
    if hosts.is_none() && ppn.is_some() {
        return Err(Error::Usage("-ppn needs --hosts".into()));
    }
    let timeout = match timeout {
        Some(t) => t,
        None => match env(ENV_TIMEOUT) {
            Some(v) if !v.trim().is_empty() => parse_secs(ENV_TIMEOUT, &v)?,
            _ => None,
        },
    };
    let kill_grace = match env(ENV_KILL_GRACE) {
        None => DEFAULT_KILL_GRACE,
        Some(v) => {
            let ms: u64 = v.trim().parse().map_err(|_| Error::BadEnv {
                var: ENV_KILL_GRACE.into(),
                value: v.clone(),
                reason: "not a number of milliseconds".into(),
            })?;
            Duration::from_millis(ms)
        }
    };
    let mut spec = JobSpec::new(nprocs, program, rest);
    spec.env = extra_env;
    spec.tag_output = tag;
    spec.timeout = timeout;
    spec.kill_grace = kill_grace;
    spec.bind = bind;
    if let Some(h) = hosts {
        spec.hosts = h;
        spec.ppn = ppn;
        crate::remote::place(&spec)?;
    }
    if let Some(l) = launcher {
        spec.launcher = l;
    }
    if let Some(a) = server_addr {
        a.parse::<std::net::IpAddr>()
            .map_err(|_| Error::Usage(format!("--server-addr: {a:?} is not an IP address")))?;
        spec.server_addr = a;
    }
    Ok(Parsed::Run(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    fn spec(s: &str, env: &dyn Fn(&str) -> Option<String>) -> JobSpec {
        match parse(&args(s), env).unwrap() {
            Parsed::Run(spec) => spec,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn full_command_line() {
        let s = spec(
            "-n 4 -l --env A=1 --env=B=x=y --timeout 2.5 prog -n 9 --env",
            &|_| None,
        );
        assert_eq!(s.nprocs, 4);
        assert!(s.tag_output);
        assert_eq!(
            s.env,
            vec![("A".into(), "1".into()), ("B".into(), "x=y".into())]
        );
        assert_eq!(s.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(s.program, "prog");
        assert_eq!(s.args, args("-n 9 --env"));
    }

    #[test]
    fn bind_to_core_none_and_bad_values() {
        use crate::run::Bind;
        assert_eq!(spec("-n 2 true", &|_| None).bind, Bind::None);
        assert_eq!(spec("-n 2 --bind-to core true", &|_| None).bind, Bind::Core);
        assert_eq!(spec("-n 2 --bind-to=none true", &|_| None).bind, Bind::None);
        assert!(matches!(
            parse(&args("-n 2 --bind-to socket true"), &|_| None),
            Err(Error::Usage(_))
        ));
    }

    #[test]
    fn timeout_from_env_and_flag_precedence() {
        let env = |k: &str| (k == ENV_TIMEOUT).then(|| "3".to_string());
        assert_eq!(
            spec("-n 1 true", &env).timeout,
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            spec("-n 1 --timeout 1 true", &env).timeout,
            Some(Duration::from_secs(1))
        );
        assert_eq!(spec("-n 1 --timeout 0 true", &env).timeout, None);
        let bad = |k: &str| (k == ENV_TIMEOUT).then(|| "soon".to_string());
        assert!(matches!(
            parse(&args("-n 1 true"), &bad),
            Err(Error::Usage(_))
        ));
        let grace = |k: &str| (k == ENV_KILL_GRACE).then(|| "x".to_string());
        assert!(matches!(
            parse(&args("-n 1 true"), &grace),
            Err(Error::BadEnv { .. })
        ));
    }

    #[test]
    fn usage_errors() {
        for bad in [
            "",
            "-n",
            "-n 0 true",
            "-n x true",
            "true",
            "-n 2",
            "-n 2 --bogus true",
            "-n 2 --env NOEQ true",
            "-n 2 --timeout -1 true",
        ] {
            assert!(parse(&args(bad), &|_| None).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse(&args("--help"), &|_| None).unwrap(),
            Parsed::Help
        ));
        assert_eq!(spec("-n 1 -- -weird", &|_| None).program, "-weird");
    }
}
