//! `MPID_Init` / `MPID_End`: bootstrap through the launcher's PMI client.
//!
//! [`init`]:
//!
//! 1. `launcher::Pmi::init()`: rank, size and node layout from `tmrun`,
//!    Hydra (`PMI_FD`, `PMI_PORT`) or Slurm; a singleton (rank 0 of 1)
//!    without any PMI environment.
//! 2. Transport choice per peer ([`crate::device::routes`]): this rank →
//!    local copy, same node → `shmem-onesided`, another node → the remote
//!    transport: `verbs-tm`'s endpoint ([`crate::transport::verbs`]; the
//!    socket test double instead with `TMX_ADI_TEST_NODES`, which also
//!    splits the job into fake nodes; see [`crate::ENV_TEST_NODES`]). If no
//!    `verbs-tm` provider can start, init fails with
//!    [`Error::NoInterNodeTransport`] (the reason logged), before any
//!    shared memory is touched. The remote transport opens (listens).
//! 3. Address exchange: every rank publishes `adi-<rank>` =
//!    `<host>,<pid>,<segment>,<machine>` in the PMI key-value space (and,
//!    with peers on other nodes, its `verbs-tm` provider and address), and
//!    after a PMI barrier checks that every peer the layout puts on its
//!    node reports the same host name (a wrong `PMI_process_mapping` would
//!    otherwise attach ranks of different hosts to "the same" segment and
//!    hang). `<machine>` (the kernel's boot id) tells which ranks share
//!    this machine's CPUs, whatever the node layout says: the wait policy
//!    counts them ([`crate::ENV_SPIN`]). Each node's segment has a name of
//!    its own (`<job>-n<node>` with several nodes), so hosts that share one
//!    `/dev/shm` (`tmrun --hosts local:a,local:b`, network namespaces)
//!    never collide.
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
use crate::transport::{double, verbs, DoubleTransport, Remote, ShmemTransport, VerbsTransport};
use crate::{Error, ThreadLevel};
use launcher::Pmi;
use shmem_onesided::{Config, Place, Segment};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
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

/// How the remote transport stands between opening and connecting.
enum Opening {
    /// No peer on another node.
    None,
    /// The socket test double, listening.
    Double(double::Listening),
    /// The `verbs-tm` endpoint, open, and the address it publishes.
    Verbs(Box<VerbsTransport>, Vec<u8>),
    /// No `verbs-tm` provider could start: why.
    Failed(String),
}

/// Connects the `verbs-tm` endpoint to every rank of `remote` with the
/// provider name and address each published (after the PMI barrier).
fn connect_verbs(
    pmi: &mut Pmi,
    mut t: Box<VerbsTransport>,
    remote: &[u32],
) -> Result<Box<VerbsTransport>, Error> {
    let mine = t.provider_name();
    for &peer in remote {
        let card = pmi.get(&verbs::card_key(peer))?;
        let bad = || Error::Launcher {
            detail: format!("rank {peer} published a malformed verbs-tm card {card:?}"),
        };
        let (provider, chunks) = card.rsplit_once(',').ok_or_else(bad)?;
        if provider != mine {
            return Err(Error::InterNode {
                class: crate::ErrorClass::Other,
                detail: format!(
                    "rank {peer} uses the provider {provider:?}, this rank {mine:?}: every rank \
                     must use the same (set TMX_VERBS_PROVIDER alike on every host)"
                ),
            });
        }
        let chunks: usize = chunks.parse().map_err(|_| bad())?;
        let mut blob = Vec::new();
        for i in 0..chunks {
            blob.extend(pmi.get_bytes(&verbs::chunk_key(peer, i))?);
        }
        t.connect(peer, &blob)?;
    }
    t.wait_connected(remote)?;
    tracing::info!(
        peers = remote.len(),
        provider = %mine,
        "verbs-tm: connected to the other nodes' ranks"
    );
    Ok(t)
}

/// This machine's identity: the running kernel's boot id (ranks with the
/// same one share CPUs, whatever their host names or network namespaces),
/// else the host name.
fn machine_id(host: &str) -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty() && !s.contains(','))
        .unwrap_or_else(|| host.to_string())
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
    let host = host_name();
    let local_ranks = layout.local_ranks();
    let local_rank = layout.local_rank() as u32;
    let local_size = local_ranks.len() as u32;
    let job_id = pmi.job_id().to_string();
    let remote_ranks: Vec<u32> = (0..size)
        .filter(|&r| !layout.is_local(r) && r != rank)
        .map(|r| r as u32)
        .collect();
    // The remote transport opens (listens) before the barrier below, which
    // tells every rank that the others do.
    let opening = if remote_ranks.is_empty() {
        Opening::None
    } else if test_nodes.is_some() {
        Opening::Double(DoubleTransport::listen(&job_id, rank as u32)?)
    } else {
        match VerbsTransport::open(&job_id, rank as u32, size as u32, &remote_ranks) {
            Ok((t, blob)) => Opening::Verbs(Box::new(t), blob),
            Err(e) => Opening::Failed(e.to_string()),
        }
    };
    let routes = match &opening {
        Opening::Failed(reason) => match routes_with(&layout, size, false) {
            Err(Error::NoInterNodeTransport {
                rank,
                node,
                my_node,
                ..
            }) => Err(Error::NoInterNodeTransport {
                rank,
                node,
                my_node,
                reason: reason.clone(),
            }),
            other => other,
        },
        _ => routes_with(&layout, size, true),
    };
    let routes = match routes {
        Ok(r) => r,
        Err(e) => {
            tracing::info!(error = %e, "no transport for some peer");
            let _ = pmi.finalize();
            return Err(e);
        }
    };
    // One segment per node; with several nodes each has its own name,
    // under the job's prefix (the launcher's cleanup removes them): nodes
    // may share one `/dev/shm` (fake nodes, `local:` and `netns:` hosts).
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
    let machine = machine_id(&host);
    pmi.put(
        &format!("adi-{rank}"),
        &format!("{host},{},{seg_name},{machine}", std::process::id()),
    )?;
    if let Opening::Verbs(t, blob) = &opening {
        // The address in chunks that fit the server's value limit (hex:
        // two characters a byte).
        let chunk = (pmi.maxes().vallen_max / 2).saturating_sub(8).max(16);
        let chunks: Vec<&[u8]> = blob.chunks(chunk).collect();
        pmi.put(
            &verbs::card_key(rank as u32),
            &format!("{},{}", t.provider_name(), chunks.len()),
        )?;
        for (i, c) in chunks.iter().enumerate() {
            pmi.put_bytes(&verbs::chunk_key(rank as u32, i), c)?;
        }
    }
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
    // The ranks that share this machine's CPUs (the wait policy): every
    // fake node is on this machine; otherwise the ranks whose card names
    // this machine, whichever node the layout puts them on.
    let machine_ranks = if test_nodes.is_some() {
        size
    } else if layout.num_nodes() > 1 {
        let mut n = 1;
        for peer in (0..size).filter(|&r| r != rank) {
            let card = pmi.get(&format!("adi-{peer}"))?;
            if card.split(',').nth(3) == Some(machine.as_str()) {
                n += 1;
            }
        }
        n
    } else {
        local_size as usize
    };
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
    let remote = match opening {
        Opening::Double(l) => Some(Remote::Double(Box::new(DoubleTransport::connect(
            l,
            &remote_ranks,
            size,
        )?))),
        Opening::Verbs(t, _) => Some(Remote::Verbs(connect_verbs(&mut pmi, t, &remote_ranks)?)),
        Opening::None | Opening::Failed(_) => None,
    };
    let dev = Arc::new(Device::new(
        pmi,
        local,
        remote,
        routes,
        machine_ranks,
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
            coll_seq: AtomicU32::new(0),
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
