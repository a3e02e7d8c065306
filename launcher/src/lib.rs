//! # launcher
//!
//! `tmrun` and the PMI-1/PMI-2 client and server, interoperable with MPICH's
//! Hydra (`mpiexec.hydra` 4.0.2) and Slurm's PMI-2.
//!
//! - [`Pmi`] is the client a rank uses: bootstrap from `PMI_FD`, `PMI_PORT` +
//!   `PMI_ID`, or as a singleton; rank, size, appnum, KVS name, job id,
//!   [`NodeLayout`]; put/barrier/get with Hydra's fence semantics; abort; finalize.
//! - [`server::Server`] is the PMI server as a state machine (no I/O).
//! - [`run::run_job`] is the `tmrun` runtime; [`cli`] its command line;
//!   [`remote`] the multi-host mode (hosts, remote-start command, proxy).
//! - [`job`] holds the job id and the `/dev/shm` naming convention
//!   (`tmx-<jobid>-*`) that transports must follow so `tmrun` can clean up.
//! - [`wire`] is the PMI-1/PMI-2 codec and the server-side framer.
//! - [`mpilib`] puts tmx's MPI library (for C programs) on the ranks'
//!   loader path.
//!
//! ```no_run
//! use launcher::Pmi;
//! let mut pmi = Pmi::init()?;
//! let me = pmi.rank();
//! pmi.put_bytes(&format!("card-{me}"), b"my address \x00\x01")?;
//! pmi.barrier()?; // puts become visible only after the barrier
//! let peer = (me + 1) % pmi.size();
//! let card = pmi.get_bytes(&format!("card-{peer}"))?;
//! let shm_name = launcher::job::shm_name(pmi.job_id(), "node"); // "/tmx-<jobid>-node"
//! # let _ = (card, shm_name);
//! pmi.finalize()?;
//! # Ok::<(), launcher::Error>(())
//! ```

#![warn(missing_docs)]

pub mod cli;
pub mod client;
mod error;
pub mod job;
pub mod mapping;
pub mod mpilib;
pub mod remote;
pub mod run;
pub mod server;
pub mod wire;

pub use client::{Bootstrap, InitOptions, Maxes, Pmi, PmiVersion};
pub use error::{Error, Result};
pub use mapping::NodeLayout;

// The README's examples are compiled (and run, unless marked `no_run`) as
// doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
