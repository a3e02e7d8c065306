//! Communicators: the objects behind `MPI_Comm` handles, the predefined
//! `MPI_COMM_WORLD` and `MPI_COMM_SELF`, and the communicator calls.

use crate::abi::*;
use crate::err::{check, err, handler, run, Handler, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use core::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

/// What a communicator carries besides its `adi::Comm`.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    /// The error handler's handle and value.
    pub(crate) errh: (MPI_Errhandler, Handler),
    pub(crate) name: String,
    /// Hints given with `MPI_Comm_set_info` (or at creation).
    pub(crate) info: crate::info::Info,
    /// The process topology (`MPI_Cart_create`, ...), kept by duplicates.
    pub(crate) topo: Option<Arc<adi::topo::Topology>>,
}

/// A communicator object.
#[derive(Debug)]
pub(crate) struct CommObj {
    /// The communicator (of an intercommunicator: its point-to-point side,
    /// whose ranks are the remote group's).
    pub(crate) comm: adi::Comm,
    /// An intercommunicator's two sides.
    pub(crate) inter: Option<adi::InterComm>,
    meta: Mutex<Meta>,
}

impl CommObj {
    pub(crate) fn new(comm: adi::Comm, meta: Meta) -> CommObj {
        CommObj {
            comm,
            inter: None,
            meta: Mutex::new(meta),
        }
    }

    fn new_inter(ic: adi::InterComm, meta: Meta) -> CommObj {
        CommObj {
            comm: ic.comm().clone(),
            inter: Some(ic),
            meta: Mutex::new(meta),
        }
    }

    /// The communicator, which must be an intracommunicator
    /// (`MPI_ERR_COMM` for an intercommunicator: collectives and
    /// communicator constructors over both groups are not provided).
    pub(crate) fn intra(&self) -> R<&adi::Comm> {
        match self.inter {
            None => Ok(&self.comm),
            Some(_) => Err(err(
                MPI_ERR_COMM,
                "not supported on an intercommunicator (merge it with MPI_Intercomm_merge)",
            )),
        }
    }

    /// `MPI_Comm_size`: the local group's size.
    pub(crate) fn size(&self) -> c_int {
        self.inter
            .as_ref()
            .map_or(self.comm.size(), adi::InterComm::local_size)
    }

    /// `MPI_Comm_group`: the local group.
    pub(crate) fn group(&self) -> adi::Group {
        self.inter
            .as_ref()
            .map_or_else(|| self.comm.group(), adi::InterComm::local_group)
    }

    pub(crate) fn meta(&self) -> MutexGuard<'_, Meta> {
        self.meta.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The metadata a communicator made from this one starts with: the
    /// error handler (MPI: inherited), no name.
    pub(crate) fn child_meta(&self) -> Meta {
        Meta {
            errh: self.meta().errh,
            name: String::new(),
            info: crate::info::Info::default(),
            topo: None,
        }
    }
}

static WORLD: RwLock<Option<Arc<CommObj>>> = RwLock::new(None);
/// `MPI_COMM_WORLD`'s object for the calls' fast path ([`comm_ref`]):
/// set once at init (MPI initializes once) and kept to the end of the
/// process, valid for calls while [`WORLD_LIVE`] says so.
static WORLD_FAST: OnceLock<Arc<CommObj>> = OnceLock::new();
/// Between init and finalize.
static WORLD_LIVE: AtomicBool = AtomicBool::new(false);
static SELF: RwLock<Option<Arc<CommObj>>> = RwLock::new(None);
pub(crate) static COMMS: Table<CommObj> = Table::new(prefix::COMM);

fn not_init() -> crate::err::MpiErr {
    err(
        MPI_ERR_OTHER,
        "MPI is not initialized (or already finalized)",
    )
}

/// `MPI_COMM_WORLD`'s object.
pub(crate) fn world() -> R<Arc<CommObj>> {
    WORLD
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .ok_or_else(not_init)
}

/// A communicator object borrowed for a call: `MPI_COMM_WORLD`'s without
/// a lock or a reference count, another one shared.
#[derive(Debug)]
pub(crate) enum CommRef {
    /// `MPI_COMM_WORLD`.
    World(&'static CommObj),
    /// Any other.
    Shared(Arc<CommObj>),
}

impl core::ops::Deref for CommRef {
    type Target = CommObj;
    #[inline(always)]
    fn deref(&self) -> &CommObj {
        match self {
            CommRef::World(o) => o,
            CommRef::Shared(o) => o,
        }
    }
}

/// `MPI_COMM_WORLD`'s object for one call (no lock, no reference count).
#[inline]
pub(crate) fn world_ref() -> R<CommRef> {
    match WORLD_FAST.get() {
        Some(w) if WORLD_LIVE.load(Ordering::Acquire) => Ok(CommRef::World(w)),
        _ => Err(not_init()),
    }
}

/// [`comm`] for the length of one call: `MPI_COMM_WORLD` without a lock
/// or a reference count (the point-to-point calls' fast path).
#[inline]
pub(crate) fn comm_ref(h: MPI_Comm) -> R<CommRef> {
    if h == MPI_COMM_WORLD {
        return world_ref();
    }
    comm(h).map(CommRef::Shared)
}

/// The communicator of handle `h` (`MPI_ERR_COMM` if invalid).
pub(crate) fn comm(h: MPI_Comm) -> R<Arc<CommObj>> {
    match h {
        MPI_COMM_WORLD => world(),
        MPI_COMM_SELF => SELF
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(not_init),
        MPI_COMM_NULL => Err(err(MPI_ERR_COMM, "MPI_COMM_NULL")),
        _ => COMMS
            .get(h)
            .ok_or_else(|| err(MPI_ERR_COMM, "invalid communicator")),
    }
}

/// The error handler of communicator `h`, if it is a live communicator.
pub(crate) fn errhandler_of(h: MPI_Comm) -> Option<Handler> {
    comm(h).ok().map(|c| c.meta().errh.1)
}

/// Installs the predefined communicators (init).
pub(crate) fn install(world: adi::Comm, me: adi::Comm) {
    let meta = |name: &str| Meta {
        errh: (MPI_ERRORS_ARE_FATAL, Handler::Fatal),
        name: name.to_string(),
        info: crate::info::Info::default(),
        topo: None,
    };
    let w = Arc::new(CommObj::new(world, meta("MPI_COMM_WORLD")));
    // Init runs once per process (`MPI_Init` refuses a second time).
    let fast = WORLD_FAST.get_or_init(|| Arc::clone(&w));
    WORLD_LIVE.store(Arc::ptr_eq(fast, &w), Ordering::Release);
    *WORLD.write().unwrap_or_else(PoisonError::into_inner) = Some(w);
    *SELF.write().unwrap_or_else(PoisonError::into_inner) =
        Some(Arc::new(CommObj::new(me, meta("MPI_COMM_SELF"))));
}

/// Drops every communicator (finalize); the predefined ones last.
pub(crate) fn finalize() {
    WORLD_LIVE.store(false, Ordering::Release);
    COMMS.clear();
    *SELF.write().unwrap_or_else(PoisonError::into_inner) = None;
    *WORLD.write().unwrap_or_else(PoisonError::into_inner) = None;
}

/// A handle for a new communicator made from `parent`.
pub(crate) fn new_handle(c: adi::Comm, parent: &CommObj) -> R<MPI_Comm> {
    COMMS
        .insert(CommObj::new(c, parent.child_meta()))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))
}

/// A handle for a new communicator with a topology, made from `parent`.
pub(crate) fn new_with_topo(c: adi::Comm, parent: &CommObj, t: adi::topo::Topology) -> R<MPI_Comm> {
    let mut meta = parent.child_meta();
    meta.topo = Some(Arc::new(t));
    COMMS
        .insert(CommObj::new(c, meta))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))
}

/// Writes the handle of `c` (or `MPI_COMM_NULL`).
///
/// # Safety
/// `out` points to an `MPI_Comm`.
pub(crate) unsafe fn put_new(out: *mut MPI_Comm, c: Option<adi::Comm>, parent: &CommObj) -> R<()> {
    let h = match c {
        Some(c) => new_handle(c, parent)?,
        None => MPI_COMM_NULL,
    };
    // SAFETY: the caller's contract.
    unsafe { ffi::put(out, h) }
}

mpi_fn! {
    /// `MPI_Comm_size`.
    fn MPI_Comm_size / PMPI_Comm_size(c: MPI_Comm, size: *mut c_int) -> c_int {
        run("MPI_Comm_size", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `size` points to an int.
            unsafe { ffi::put(size, o.size()) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_rank`.
    fn MPI_Comm_rank / PMPI_Comm_rank(c: MPI_Comm, rank: *mut c_int) -> c_int {
        run("MPI_Comm_rank", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `rank` points to an int.
            unsafe { ffi::put(rank, o.comm.rank()) }
        })
    }
}

/// `MPI_Comm_dup`: the copy keeps the error handler, the info hints
/// (unless `info` is given) and the attributes whose copy callbacks say
/// so.
///
/// # Safety
/// `newcomm` points to a handle.
unsafe fn dup(c: MPI_Comm, info: Option<crate::info::Info>, newcomm: *mut MPI_Comm) -> R<()> {
    let o = comm(c)?;
    let mut meta = o.child_meta();
    meta.info = info.unwrap_or_else(|| o.meta().info.clone());
    meta.topo = o.meta().topo.clone();
    let obj = match &o.inter {
        Some(ic) => CommObj::new_inter(ic.dup()?, meta),
        None => CommObj::new(o.comm.dup()?, meta),
    };
    let h = COMMS
        .insert(obj)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))?;
    if let Err(e) = crate::attr::copy_all(crate::attr::Kind::Comm, c, h) {
        let _ = crate::attr::delete_all(crate::attr::Kind::Comm, h);
        COMMS.remove(h);
        return Err(e);
    }
    // SAFETY: the caller's contract.
    unsafe { ffi::put(newcomm, h) }
}

mpi_fn! {
    /// `MPI_Comm_dup`.
    fn MPI_Comm_dup / PMPI_Comm_dup(c: MPI_Comm, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_dup", On::Comm(c), || {
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { dup(c, None, newcomm) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_dup_with_info`.
    fn MPI_Comm_dup_with_info / PMPI_Comm_dup_with_info(c: MPI_Comm, info: MPI_Info, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_dup_with_info", On::Comm(c), || {
            let i = crate::info::entries(info)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { dup(c, Some(i), newcomm) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_idup`: the duplicate is made at once (the context-id
    /// agreement blocks until every member has called it), and the
    /// request is complete.
    fn MPI_Comm_idup / PMPI_Comm_idup(c: MPI_Comm, newcomm: *mut MPI_Comm, request: *mut MPI_Request) -> c_int {
        run("MPI_Comm_idup", On::Comm(c), || {
            // SAFETY: MPI: `newcomm` and `request` point to handles.
            unsafe {
                dup(c, None, newcomm)?;
                let h = crate::req::new_request(c, crate::req::Req::Done((crate::req::empty_status(), None)))?;
                ffi::put(request, h)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_split_type`: `MPI_COMM_TYPE_SHARED` splits by node;
    /// `MPI_UNDEFINED` gives `MPI_COMM_NULL`; other types are
    /// `MPI_ERR_ARG`.
    fn MPI_Comm_split_type / PMPI_Comm_split_type(c: MPI_Comm, split_type: c_int, key: c_int, _info: MPI_Info, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_split_type", On::Comm(c), || {
            let o = comm(c)?;
            let w = o.intra()?;
            let nc = match split_type {
                MPI_COMM_TYPE_SHARED => Some(w.split_shared(key)?),
                MPI_UNDEFINED => w.split(MPI_UNDEFINED, key)?,
                _ => return Err(err(MPI_ERR_ARG, "unsupported split type")),
            };
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { put_new(newcomm, nc, &o) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_set_info`.
    fn MPI_Comm_set_info / PMPI_Comm_set_info(c: MPI_Comm, info: MPI_Info) -> c_int {
        run("MPI_Comm_set_info", On::Comm(c), || {
            let o = comm(c)?;
            let i = crate::info::entries(info)?;
            o.meta().info = i;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_get_info`: a new info object with the hints in use.
    fn MPI_Comm_get_info / PMPI_Comm_get_info(c: MPI_Comm, info: *mut MPI_Info) -> c_int {
        run("MPI_Comm_get_info", On::Comm(c), || {
            let o = comm(c)?;
            let i = o.meta().info.clone();
            let h = crate::info::new_info(i)?;
            // SAFETY: MPI: `info` points to a handle.
            unsafe { ffi::put(info, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_split`.
    fn MPI_Comm_split / PMPI_Comm_split(c: MPI_Comm, color: c_int, key: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_split", On::Comm(c), || {
            let o = comm(c)?;
            let s = o.intra()?.split(color, key)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { put_new(newcomm, s, &o) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_free`.
    fn MPI_Comm_free / PMPI_Comm_free(c: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_free", On::World, || {
            // SAFETY: MPI: `c` points to a handle.
            let h = unsafe { ffi::get(c) }?;
            check(
                h != MPI_COMM_WORLD && h != MPI_COMM_SELF,
                MPI_ERR_COMM,
                "cannot free a predefined communicator",
            )?;
            comm(h)?;
            crate::attr::delete_all(crate::attr::Kind::Comm, h)?;
            COMMS.remove(h);
            // SAFETY: as above.
            unsafe { ffi::put(c, MPI_COMM_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_compare`.
    fn MPI_Comm_compare / PMPI_Comm_compare(c1: MPI_Comm, c2: MPI_Comm, result: *mut c_int) -> c_int {
        run("MPI_Comm_compare", On::Comm(c1), || {
            let (a, b) = (comm(c1)?, comm(c2)?);
            let r = if c1 == c2 {
                MPI_IDENT
            } else {
                a.comm.compare(&b.comm).code()
            };
            // SAFETY: MPI: `result` points to an int.
            unsafe { ffi::put(result, r) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_test_inter`.
    fn MPI_Comm_test_inter / PMPI_Comm_test_inter(c: MPI_Comm, flag: *mut c_int) -> c_int {
        run("MPI_Comm_test_inter", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `flag` points to an int.
            unsafe { ffi::put(flag, ffi::flag(o.inter.is_some())) }
        })
    }
}

fn inter_of(o: &CommObj) -> R<&adi::InterComm> {
    o.inter
        .as_ref()
        .ok_or_else(|| err(MPI_ERR_COMM, "not an intercommunicator"))
}

mpi_fn! {
    /// `MPI_Comm_remote_size`.
    fn MPI_Comm_remote_size / PMPI_Comm_remote_size(c: MPI_Comm, size: *mut c_int) -> c_int {
        run("MPI_Comm_remote_size", On::Comm(c), || {
            let o = comm(c)?;
            let n = inter_of(&o)?.remote_size();
            // SAFETY: MPI: `size` points to an int.
            unsafe { ffi::put(size, n) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_remote_group`.
    fn MPI_Comm_remote_group / PMPI_Comm_remote_group(c: MPI_Comm, g: *mut MPI_Group) -> c_int {
        run("MPI_Comm_remote_group", On::Comm(c), || {
            let o = comm(c)?;
            let h = crate::group::new_group(inter_of(&o)?.remote_group())?;
            // SAFETY: MPI: `g` points to a handle.
            unsafe { ffi::put(g, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Intercomm_create`.
    fn MPI_Intercomm_create / PMPI_Intercomm_create(local: MPI_Comm, local_leader: c_int, peer: MPI_Comm, remote_leader: c_int, tag: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Intercomm_create", On::Comm(local), || {
            let o = comm(local)?;
            let lw = o.intra()?;
            // The peer communicator matters at the local leader only.
            let p = if lw.rank() == local_leader { Some(comm(peer)?) } else { None };
            let pc = p.as_ref().map_or(lw, |p| &p.comm);
            let ic = adi::InterComm::create(lw, local_leader, pc, remote_leader, tag)?;
            let h = COMMS
                .insert(CommObj::new_inter(ic, o.child_meta()))
                .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many communicators"))?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Intercomm_merge`.
    fn MPI_Intercomm_merge / PMPI_Intercomm_merge(c: MPI_Comm, high: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Intercomm_merge", On::Comm(c), || {
            let o = comm(c)?;
            let m = inter_of(&o)?.merge(high != 0)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { put_new(newcomm, Some(m), &o) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_set_name`.
    fn MPI_Comm_set_name / PMPI_Comm_set_name(c: MPI_Comm, name: *const c_char) -> c_int {
        run("MPI_Comm_set_name", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `name` is a C string.
            let s = unsafe { ffi::c_str(name) }?;
            check(s.len() < MPI_MAX_OBJECT_NAME, MPI_ERR_ARG, "name too long")?;
            o.meta().name = s;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_get_name`.
    fn MPI_Comm_get_name / PMPI_Comm_get_name(c: MPI_Comm, name: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Comm_get_name", On::Comm(c), || {
            let o = comm(c)?;
            let s = o.meta().name.clone();
            // SAFETY: MPI: `name` holds MPI_MAX_OBJECT_NAME chars.
            unsafe { crate::err::put_string(name, len, MPI_MAX_OBJECT_NAME, &s) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_set_errhandler`.
    fn MPI_Comm_set_errhandler / PMPI_Comm_set_errhandler(c: MPI_Comm, eh: MPI_Errhandler) -> c_int {
        run("MPI_Comm_set_errhandler", On::Comm(c), || {
            let o = comm(c)?;
            let h = handler(eh)?;
            if let Handler::User { kind, .. } = h {
                check(kind == crate::err::HandlerKind::Comm, MPI_ERR_ARG, "not a communicator error handler")?;
            }
            o.meta().errh = (eh, h);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Errhandler_set` (removed in MPI-3.0).
    fn MPI_Errhandler_set / PMPI_Errhandler_set(c: MPI_Comm, eh: MPI_Errhandler) -> c_int {
        run("MPI_Errhandler_set", On::Comm(c), || {
            let o = comm(c)?;
            o.meta().errh = (eh, handler(eh)?);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_get_errhandler`.
    fn MPI_Comm_get_errhandler / PMPI_Comm_get_errhandler(c: MPI_Comm, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Comm_get_errhandler", On::Comm(c), || {
            let o = comm(c)?;
            let h = o.meta().errh.0;
            crate::err::handler_ref(h);
            // SAFETY: MPI: `eh` points to a handle.
            unsafe { ffi::put(eh, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Errhandler_get` (removed in MPI-3.0).
    fn MPI_Errhandler_get / PMPI_Errhandler_get(c: MPI_Comm, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Errhandler_get", On::Comm(c), || {
            let o = comm(c)?;
            let h = o.meta().errh.0;
            crate::err::handler_ref(h);
            // SAFETY: MPI: `eh` points to a handle.
            unsafe { ffi::put(eh, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_call_errhandler`: raises `code` on the communicator.
    fn MPI_Comm_call_errhandler / PMPI_Comm_call_errhandler(c: MPI_Comm, code: c_int) -> c_int {
        comm(c).map_or(MPI_ERR_COMM, |_| {
            let r = run("MPI_Comm_call_errhandler", On::Comm(c), || {
                Err(err(code, "raised by MPI_Comm_call_errhandler"))
            });
            // The call itself succeeds once the handler returned.
            if r == code { MPI_SUCCESS } else { r }
        })
    }
}

/// The value of a predefined communicator attribute (`MPI_TAG_UB`, ...),
/// kept in a static cell whose address `MPI_Comm_get_attr` returns.
fn predefined_attr(o: &CommObj, keyval: c_int) -> Option<*const c_int> {
    use std::sync::atomic::{AtomicI32, Ordering};
    static VALUES: [AtomicI32; 7] = [const { AtomicI32::new(0) }; 7];
    let a = o.comm.attributes();
    let (i, v) = match keyval {
        MPI_TAG_UB => (0, a.tag_ub),
        MPI_HOST => (1, a.host),
        MPI_IO => (2, a.io),
        MPI_WTIME_IS_GLOBAL => (3, c_int::from(a.wtime_is_global)),
        MPI_UNIVERSE_SIZE => (4, a.universe_size),
        MPI_LASTUSEDCODE => (5, crate::err::last_used_code()),
        MPI_APPNUM => (6, a.appnum as c_int),
        _ => return None,
    };
    VALUES[i].store(v, Ordering::Relaxed);
    Some(VALUES[i].as_ptr().cast_const())
}

/// `MPI_Comm_get_attr`: a predefined attribute, or a user keyval's.
///
/// # Safety
/// `value` points to a `void *`, `flag` to an int.
unsafe fn get_attr(c: MPI_Comm, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> R<()> {
    let o = comm(c)?;
    let v = match predefined_attr(&o, keyval) {
        Some(p) => Some(p as usize),
        None => crate::attr::get(crate::attr::Kind::Comm, c, keyval)?,
    };
    // SAFETY: the caller's contract.
    unsafe { crate::attr::put_value(value, flag, v) }
}

mpi_fn! {
    /// `MPI_Comm_get_attr`.
    fn MPI_Comm_get_attr / PMPI_Comm_get_attr(c: MPI_Comm, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
        // SAFETY: MPI: `value` points to a `void *`, `flag` to an int.
        run("MPI_Comm_get_attr", On::Comm(c), || unsafe { get_attr(c, keyval, value, flag) })
    }
}

mpi_fn! {
    /// `MPI_Attr_get` (deprecated form of `MPI_Comm_get_attr`).
    fn MPI_Attr_get / PMPI_Attr_get(c: MPI_Comm, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
        // SAFETY: MPI: `value` points to a `void *`, `flag` to an int.
        run("MPI_Attr_get", On::Comm(c), || unsafe { get_attr(c, keyval, value, flag) })
    }
}

/// `MPI_Comm_set_attr` (predefined keyvals are read-only).
fn set_attr(c: MPI_Comm, keyval: c_int, value: *mut c_void) -> R<()> {
    comm(c)?;
    check(
        !(MPI_TAG_UB..=MPI_APPNUM).contains(&keyval),
        MPI_ERR_KEYVAL,
        "predefined attributes are read-only",
    )?;
    crate::attr::set(crate::attr::Kind::Comm, c, keyval, value as usize)
}

mpi_fn! {
    /// `MPI_Comm_set_attr`.
    fn MPI_Comm_set_attr / PMPI_Comm_set_attr(c: MPI_Comm, keyval: c_int, value: *mut c_void) -> c_int {
        run("MPI_Comm_set_attr", On::Comm(c), || set_attr(c, keyval, value))
    }
}

mpi_fn! {
    /// `MPI_Attr_put` (deprecated form of `MPI_Comm_set_attr`).
    fn MPI_Attr_put / PMPI_Attr_put(c: MPI_Comm, keyval: c_int, value: *mut c_void) -> c_int {
        run("MPI_Attr_put", On::Comm(c), || set_attr(c, keyval, value))
    }
}

mpi_fn! {
    /// `MPI_Comm_delete_attr`.
    fn MPI_Comm_delete_attr / PMPI_Comm_delete_attr(c: MPI_Comm, keyval: c_int) -> c_int {
        run("MPI_Comm_delete_attr", On::Comm(c), || {
            comm(c)?;
            crate::attr::delete(crate::attr::Kind::Comm, c, keyval)
        })
    }
}

mpi_fn! {
    /// `MPI_Attr_delete` (deprecated form of `MPI_Comm_delete_attr`).
    fn MPI_Attr_delete / PMPI_Attr_delete(c: MPI_Comm, keyval: c_int) -> c_int {
        run("MPI_Attr_delete", On::Comm(c), || {
            comm(c)?;
            crate::attr::delete(crate::attr::Kind::Comm, c, keyval)
        })
    }
}
