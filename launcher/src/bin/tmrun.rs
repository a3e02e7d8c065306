//! `tmrun -n N [-l|--tag-output] [--env K=V]... [--timeout SECS] PROGRAM [ARGS...]`
//!
//! See the crate README for flags, environment variables and exit statuses.

use std::process::ExitCode;

use launcher::cli::{self, Parsed, USAGE};
use launcher::run::{self, EXIT_CANNOT_START, EXIT_LAUNCHER_ERROR, EXIT_USAGE};
use launcher::Error;

fn code(c: i32) -> ExitCode {
    ExitCode::from(u8::try_from(c & 0xff).unwrap_or(u8::MAX))
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TMX_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();

    let mut args = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => args.push(s),
            Err(bad) => {
                eprintln!("tmrun: argument {bad:?} is not valid UTF-8");
                return code(EXIT_USAGE);
            }
        }
    }
    let env = |k: &str| std::env::var(k).ok();
    let mut spec = match cli::parse(&args, &env) {
        Ok(Parsed::Run(spec)) => spec,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Proxy {
            server,
            host,
            token,
        }) => {
            return match launcher::remote::run_proxy(&server, host, &token) {
                Ok(c) => code(c),
                Err(e) => {
                    eprintln!("tmrun proxy {host}: {e}");
                    code(EXIT_LAUNCHER_ERROR)
                }
            };
        }
        Ok(Parsed::Version) => {
            println!("tmrun {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tmrun: {e}\n\n{USAGE}");
            return code(EXIT_USAGE);
        }
    };
    spec.handle_signals = true;
    // tmx's MPI library first on the ranks' loader path (C programs).
    let _mpilib = match launcher::mpilib::MpiLibDir::prepare(&mut spec, &env) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("tmrun: {e}");
            return code(EXIT_LAUNCHER_ERROR);
        }
    };
    match run::run_job(&spec) {
        Ok(report) => code(report.exit_code),
        Err(e @ Error::Spawn { .. }) => {
            eprintln!("tmrun: {e}");
            code(EXIT_CANNOT_START)
        }
        Err(e) => {
            eprintln!("tmrun: {e}");
            code(EXIT_LAUNCHER_ERROR)
        }
    }
}
