//! `MPID_Init` / `MPID_End`: bootstrap through the launcher's PMI client.
//!
//! [`init`]:
//!
//! 1. `launcher::Pmi::init()`: rank, size and node layout from `tmrun`,
//!    Hydra (`PMI_FD`, `PMI_PORT`) or Slurm; a singleton (rank 0 of 1)
//!    without any PMI environment.
//! 2. Transport choice per peer ([`crate::device::routes`]): this rank →
//!    local copy, same node → `shmem-onesided`, another node → the remote
//!    transport if one is configured (the socket test double with
//!    `TMX_ADI_TEST_NODES`, which also splits the job into fake nodes; see
//!    [`crate::transport::double`]), otherwise an error
//!    ([`Error::NoInterNodeTransport`]), before any shared memory is
//!    touched. The remote transport starts listening.
//! 3. Address exchange: every rank publishes `adi-<rank>` = `<host>,<pid>`
//!    in the PMI key-value space, and after a PMI barrier checks that every
//!    peer the layout puts on its node reports the same host name (a wrong
//!    `PMI_process_mapping` would otherwise attach ranks of different hosts
//!    to "the same" segment and hang).
//! 4. The node-local transport: `shmem_onesided::Node::init(job_id,
//!    local_rank, local_size, Config::from_env()?)` and an `Endpoint` over
//!    it (the node segment's attach is the intra-node address exchange:
//!    ring and heap offsets are symmetric); then the remote transport
//!    connects to the other nodes' ranks.
//!
//! [`finalize`] completes every outstanding send (including freed requests
//! and buffered sends), cancels receives still posted (an erroneous program,
//! logged as a warning, so finalize cannot hang on one), meets the other
//! ranks in a PMI barrier, closes the endpoint (printing counters with
//! `TMX_ADI_COUNTERS=1`) and
//! says goodbye to the PMI server.

use crate::comm::{Comm, CommInner};
use crate::device::{fake_nodes, internal_context, route::routes_with, Device, Group};
use crate::transport::{double, DoubleTransport, Remote, ShmemTransport};
use crate::{Error, ThreadLevel};
use launcher::Pmi;
use shmem_onesided::Config;
use std::sync::{Arc, Mutex};

static DEVICE: Mutex<Option<Arc<Device>>> = Mutex::new(None);
static INITIALIZED: Mutex<bool> = Mutex::new(false);

fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// `MPI_Init`: bootstraps this process and returns `MPI_COMM_WORLD`, with
/// [`ThreadLevel::Multiple`] (any thread may call the device at any time).
///
/// May be called once per process; a second call (also after
/// [`finalize`]) is [`Error::InvalidArgument`], as in MPI.
pub fn init() -> Result<Comm, Error> {
    init_thread(ThreadLevel::Multiple).map(|(comm, _)| comm)
}

/// `MPI_Init_thread`: [`init`] with the thread support `required`; returns
/// `MPI_COMM_WORLD` and the level provided ([`ThreadLevel::provided`]).
///
/// [`ThreadLevel::Single`] or [`ThreadLevel::Funneled`] give `Funneled`:
/// the calling thread owns the device, which then takes no lock on its
/// fast paths (MPICH likewise skips its locks below
/// `MPI_THREAD_MULTIPLE`). Communicators and requests may still move
/// between threads, but a device call from any other thread fails with
/// [`Error::ThreadLevel`] (completing or dropping a [`crate::Request`] is
/// not a device call and works anywhere). `Serialized` or `Multiple` give
/// `Multiple`, the same as [`init`].
///
/// ```no_run
/// use adi::ThreadLevel;
/// let (world, provided) = adi::init_thread(ThreadLevel::Funneled)?;
/// assert_eq!(provided, ThreadLevel::Funneled);
/// # let _ = world;
/// adi::finalize()?;
/// # Ok::<(), adi::Error>(())
/// ```
pub fn init_thread(required: ThreadLevel) -> Result<(Comm, ThreadLevel), Error> {
    {
        let mut done = match INITIALIZED.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if *done {
            return Err(Error::InvalidArgument {
                what: "adi::init called twice",
            });
        }
        *done = true;
    }
    let mut pmi = Pmi::init()?;
    let rank = pmi.rank();
    let size = pmi.size();
    // The test double's fake nodes (`TMX_ADI_TEST_NODES`) replace the
    // launcher's layout.
    let test_nodes = double::test_nodes_from_env()?;
    let layout = match test_nodes {
        Some(n) => fake_nodes(rank, size, n)?,
        None => pmi.layout().clone(),
    };
    let routes = match routes_with(&layout, size, test_nodes.is_some()) {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(error = %e, "no transport for some peer");
            let _ = pmi.finalize();
            return Err(e);
        }
    };
    let job_id = pmi.job_id().to_string();
    let remote_ranks: Vec<u32> = (0..size)
        .filter(|&r| !layout.is_local(r) && r != rank)
        .map(|r| r as u32)
        .collect();
    // The remote transport listens before the barrier below, which tells
    // every rank that the others do.
    let listening = match (test_nodes, remote_ranks.is_empty()) {
        (Some(_), false) => Some(DoubleTransport::listen(&job_id, rank as u32)?),
        _ => None,
    };
    let host = host_name();
    pmi.put(
        &format!("adi-{rank}"),
        &format!("{host},{}", std::process::id()),
    )?;
    pmi.barrier()?;
    let local_ranks = layout.local_ranks();
    for &peer in &local_ranks {
        if peer == rank {
            continue;
        }
        let card = pmi.get(&format!("adi-{peer}"))?;
        let peer_host = card.split(',').next().unwrap_or("");
        if peer_host != host {
            return Err(Error::Launcher {
                detail: format!(
                    "the process mapping puts rank {peer} on this node, but it runs on host \
                     {peer_host:?} (this is {host:?})"
                ),
            });
        }
    }
    let local_rank = layout.local_rank() as u32;
    let local_size = local_ranks.len();
    tracing::info!(
        rank,
        size,
        local_rank,
        local_size,
        nodes = layout.num_nodes(),
        job_id = %job_id,
        "adi init: this node's peers through shmem-onesided, the others through the remote transport"
    );
    // One segment per node; with several nodes on one host (fake nodes)
    // each has its own name, under the job's prefix (the launcher's
    // cleanup removes them).
    let segment_job = if layout.num_nodes() > 1 {
        format!("{job_id}-n{}", layout.my_node())
    } else {
        job_id.clone()
    };
    let local_to_world = local_ranks.iter().map(|r| *r as u32).collect();
    // Collective over the node: every local rank is here, before any
    // traffic (the inline reply calibration, `TMX_SHMEM_INLINE_CALIBRATE`).
    let local = ShmemTransport::init(
        &segment_job,
        local_rank,
        local_to_world,
        Config::from_env()?,
        internal_context(),
    )?;
    let remote = match listening {
        Some(l) => Some(Remote::Double(DoubleTransport::connect(
            l,
            &remote_ranks,
            size,
        )?)),
        None => None,
    };
    let dev = Arc::new(Device::new(
        pmi, local, remote, routes, local_size, host, required,
    )?);
    {
        let mut g = match DEVICE.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *g = Some(Arc::clone(&dev));
    }
    let provided = dev.thread_level();
    let group = Arc::new(Group::new((0..size as u32).collect(), size));
    let world = Comm {
        inner: Arc::new(CommInner {
            dev,
            ctx: 0,
            coll: 1,
            pair: None,
            rank: rank as i32,
            group,
        }),
    };
    Ok((world, provided))
}

/// `MPI_Query_thread`: the thread level the device provides.
pub fn query_thread() -> Result<ThreadLevel, Error> {
    Ok(device()?.thread_level())
}

fn device() -> Result<Arc<Device>, Error> {
    let g = match DEVICE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    g.clone().ok_or_else(|| Error::NotInitialized {
        what: "not initialized",
    })
}

/// `MPI_Finalize`. Communicator handles still alive afterwards fail with
/// [`Error::NotInitialized`].
pub fn finalize() -> Result<(), Error> {
    let dev = {
        let mut g = match DEVICE.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let dev = g.as_ref().ok_or_else(|| Error::NotInitialized {
            what: "not initialized",
        })?;
        // Under `ThreadLevel::Funneled` only the owning thread may
        // finalize: refused before the device is taken, so that the owner
        // can still finalize it.
        dev.check_thread()?;
        g.take().ok_or_else(|| Error::NotInitialized {
            what: "not initialized",
        })?
    };
    dev.finalize()
}

/// `MPI_Initialized`-style query: whether the device is up.
pub fn is_initialized() -> bool {
    device().is_ok()
}

/// `MPI_Abort` without a communicator: tears the job down with `code` (the
/// launcher exits with it); exits this process directly if the device is
/// not up.
pub fn abort(code: i32, message: &str) -> ! {
    match device() {
        Ok(dev) => dev.abort(code, message),
        Err(_) => {
            eprintln!("tmx: aborting with code {code}: {message}");
            std::process::exit(code)
        }
    }
}
