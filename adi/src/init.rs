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
//!    [`crate::ENV_TEST_NODES`]), otherwise an error
//!    ([`Error::NoInterNodeTransport`]), before any shared memory is
//!    touched. The remote transport starts listening.
//! 3. Address exchange: every rank publishes `adi-<rank>` =
//!    `<host>,<pid>,<segment>` in the PMI key-value space, and after a PMI
//!    barrier checks that every peer the layout puts on its node reports
//!    the same host name (a wrong `PMI_process_mapping` would otherwise
//!    attach ranks of different hosts to "the same" segment and hang).
//!    `<segment>` is set by each node's local rank 0, which creates the
//!    node segment's object before the barrier
//!    ([`shmem_onesided::Segment::reserve`]: `O_EXCL`, mode 0600, a fresh
//!    random name if the job's own is taken); the other local ranks open
//!    that name and check its owner and mode before mapping it.
//! 4. The node-local transport: `shmem_onesided::Node::init_at(place,
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
use shmem_onesided::{Config, Place, Segment};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

static DEVICE: Mutex<Option<Arc<Device>>> = Mutex::new(None);
static INITIALIZED: Mutex<bool> = Mutex::new(false);
/// [`OnPeerDeath`] as a number (0: exit, 1: return).
static ON_PEER_DEATH: AtomicU8 = AtomicU8::new(0);

/// What this process does when the device finds a peer process dead (it
/// was killed, or exited without finalizing) while an operation needed it.
///
/// `MPI_COMM_WORLD`'s default error handler in MPI is
/// `MPI_ERRORS_ARE_FATAL`; a job whose rank died cannot complete, and its
/// launcher tears it down anyway. So by default ([`OnPeerDeath::Exit`])
/// the rank prints one line on stderr naming the dead peer and exits with
/// [`launcher::run::EXIT_PEER_DIED`] (250): a status that says "not my
/// fault", which `tmrun` uses to name the rank that really failed, and
/// which tells the ranks apart under `srun` or Hydra too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnPeerDeath {
    /// Print the dead peer on stderr and exit with status 250 (the default).
    #[default]
    Exit,
    /// Return the error (class `MPI_ERR_OTHER`, detail "local rank N (pid P)
    /// is gone") from the call, as `MPI_ERRORS_RETURN` would.
    Return,
}

/// Chooses what happens when a peer process is found dead
/// ([`OnPeerDeath`]); may be called at any time, from any thread.
pub fn on_peer_death(policy: OnPeerDeath) {
    let v = match policy {
        OnPeerDeath::Exit => 0,
        OnPeerDeath::Return => 1,
    };
    ON_PEER_DEATH.store(v, Ordering::Relaxed);
}

/// Called where a transport error becomes an `adi` error: a dead peer ends
/// this process under [`OnPeerDeath::Exit`].
pub(crate) fn peer_died(local: u32, pid: u32) {
    if ON_PEER_DEATH.load(Ordering::Relaxed) != 0 {
        return;
    }
    // `try_lock`: this may run on any path, never wait here.
    let me = DEVICE
        .try_lock()
        .ok()
        .and_then(|g| g.as_ref().map(|d| format!("rank {}", d.world_rank)))
        .unwrap_or_else(|| "this rank".to_string());
    eprintln!(
        "tmx: {me}: local rank {local} (pid {pid}) died before finalize; exiting with status {} \
         (a peer died)",
        launcher::run::EXIT_PEER_DIED
    );
    std::process::exit(launcher::run::EXIT_PEER_DIED)
}

/// [`peer_died`] for a peer of the remote transport (world rank `rank`;
/// `detail`: what the transport saw).
pub(crate) fn remote_peer_died(rank: u32, detail: &str) {
    if ON_PEER_DEATH.load(Ordering::Relaxed) != 0 {
        return;
    }
    let me = DEVICE
        .try_lock()
        .ok()
        .and_then(|g| g.as_ref().map(|d| format!("rank {}", d.world_rank)))
        .unwrap_or_else(|| "this rank".to_string());
    eprintln!(
        "tmx: {me}: rank {rank} died before finalize ({detail}); exiting with status {} \
         (a peer died)",
        launcher::run::EXIT_PEER_DIED
    );
    std::process::exit(launcher::run::EXIT_PEER_DIED)
}

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
    let host = host_name();
    let local_ranks = layout.local_ranks();
    let local_rank = layout.local_rank() as u32;
    let local_size = local_ranks.len() as u32;
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
    // One segment per node; with several nodes on one host (fake nodes)
    // each has its own name, under the job's prefix (the launcher's
    // cleanup removes them).
    let segment_job = if layout.num_nodes() > 1 {
        format!("{job_id}-n{}", layout.my_node())
    } else {
        job_id.clone()
    };
    // Local rank 0 creates the node segment's object now, under a name
    // nobody else holds, and publishes that name with its card.
    let reserved = if local_rank == 0 {
        Some(Segment::reserve(&segment_job)?)
    } else {
        None
    };
    let seg_name = reserved.as_ref().map(|r| r.name()).unwrap_or("");
    pmi.put(
        &format!("adi-{rank}"),
        &format!("{host},{},{seg_name}", std::process::id()),
    )?;
    pmi.barrier()?;
    let mut place = reserved.map(Place::Create);
    for &peer in &local_ranks {
        if peer == rank {
            continue;
        }
        let card = pmi.get(&format!("adi-{peer}"))?;
        let mut fields = card.split(',');
        let peer_host = fields.next().unwrap_or("");
        if peer_host != host {
            return Err(Error::Launcher {
                detail: format!(
                    "the process mapping puts rank {peer} on this node, but it runs on host \
                     {peer_host:?} (this is {host:?})"
                ),
            });
        }
        if Some(&peer) == local_ranks.first() {
            match fields.nth(1) {
                Some(name) if !name.is_empty() => place = Some(Place::Open(name.to_string())),
                _ => {
                    return Err(Error::Launcher {
                        detail: format!(
                            "local rank 0 (rank {peer}) published no shared-memory segment name"
                        ),
                    })
                }
            }
        }
    }
    let place = place.ok_or(Error::Launcher {
        detail: "no shared-memory segment to attach (empty node layout)".into(),
    })?;
    tracing::info!(
        rank,
        size,
        local_rank,
        local_size,
        nodes = layout.num_nodes(),
        job_id = %job_id,
        "adi init: this node's peers through shmem-onesided, the others through the remote transport"
    );
    let local_to_world = local_ranks.iter().map(|r| *r as u32).collect();
    // Collective over the node: every local rank is here, before any
    // traffic (the inline reply calibration, `TMX_SHMEM_TUNE=inline_calibrate`).
    let local = ShmemTransport::init(
        place,
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
        pmi,
        local,
        remote,
        routes,
        local_size as usize,
        host,
        required,
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
