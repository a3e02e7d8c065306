//! Requests: the `MPI_Request` table, completion (wait/test and their
//! set forms), cancel, free, and persistent requests.
//!
//! A request is a [`Req`] behind a handle. Nonblocking point-to-point
//! operations hold an [`adi::Request`]. A receive of contiguous data has
//! lent `adi` the program's buffer, which `adi` fills itself; a receive
//! of a derived datatype also holds where its data go in the program's
//! memory ([`Target`]): `adi` receives into a buffer of its own, which is
//! unpacked into the program's buffer when the request completes, inside
//! the completing MPI call, as MPI allows. A completed request keeps its
//! outcome ([`Req::Done`]) until a wait or test hands it over, so that
//! `MPI_Testall` can leave every request untouched when not all are done.
//!
//! A send that completed inside its call, successfully (a small message
//! copied out at once), takes no slot: its handle is of a kind of its own
//! ([`SENT`]) and holds the byte count its status reports, so that its
//! start and its wait cost no table work. Such a handle stays valid until
//! a wait or test hands it over; a copy of it waited for twice is not
//! refused (as for any freed handle, MPI calls that erroneous).

use crate::abi::*;
use crate::comm::{world_ref, CommObj};
use crate::err::{check, err, raise_on, run, MpiErr, On, R};
use crate::ffi;
use crate::handles::prefix;
use crate::slab::{self, Frees, Slab};
use crate::types::TypeObj;
use core::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// Where a receive's data go: `count` elements of `ty` at `addr`.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) addr: usize,
    pub(crate) count: i64,
    pub(crate) ty: Arc<TypeObj>,
}

impl Target {
    /// Copies or unpacks `data` (a packed prefix of the message) into the
    /// program's buffer.
    fn deliver(&self, data: &[u8]) -> R<()> {
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the receive buffer the program gave the nonblocking
        // receive, which MPI says stays valid and untouched until the
        // request completes: this is that completion.
        unsafe { self.ty.unpack_to(self.addr as *mut _, self.count, data) }
    }
}

/// A completed operation's outcome: its status and error.
pub(crate) type Outcome = (MPI_Status, Option<MpiErr>);

/// One request.
#[derive(Debug)]
pub(crate) enum Req {
    /// An `adi` operation with nothing to do at completion (sends).
    Op { r: adi::Request },
    /// An `adi` receive whose data go to `to` at completion.
    Recv { r: adi::Request, to: Target },
    /// A collective in flight: `finish` delivers the bytes its request
    /// hands back into the program's buffers.
    Coll {
        r: adi::Request,
        finish: Option<Finish>,
    },
    /// Complete; the outcome waits for a wait or test.
    Done(Outcome),
    /// A persistent request.
    Persistent(Box<Persistent>),
    /// A generalized request (`MPI_Grequest_start`).
    Grequest(Box<Greq>),
    /// A request-based RMA read (`MPI_Rget`, `MPI_Rget_accumulate`):
    /// its data go to the program's result buffer at completion.
    Rma(Box<crate::win::Read>),
}

/// A generalized request: the program's callbacks, its extra state, and
/// whether `MPI_Grequest_complete` was called.
#[derive(Debug)]
pub(crate) struct Greq {
    query: usize,
    free: usize,
    cancel: usize,
    extra: usize,
    complete: bool,
}

/// `MPI_Grequest_query_function`.
type QueryFn = unsafe extern "C" fn(*mut core::ffi::c_void, *mut MPI_Status) -> c_int;
/// `MPI_Grequest_free_function`.
type FreeFn = unsafe extern "C" fn(*mut core::ffi::c_void) -> c_int;
/// `MPI_Grequest_cancel_function`.
type CancelFn = unsafe extern "C" fn(*mut core::ffi::c_void, c_int) -> c_int;

impl Greq {
    /// The outcome once complete: `query_fn` fills the status, then
    /// `free_fn` releases the extra state.
    fn finish(&self) -> Outcome {
        let mut st = empty_status();
        // SAFETY: the program's callbacks given to `MPI_Grequest_start`,
        // called as MPI calls them, with a live status.
        let (q, f) = unsafe {
            let q =
                core::mem::transmute::<usize, QueryFn>(self.query)(self.extra as *mut _, &mut st);
            let f = core::mem::transmute::<usize, FreeFn>(self.free)(self.extra as *mut _);
            (q, f)
        };
        let rc = if q != MPI_SUCCESS { q } else { f };
        if rc != MPI_SUCCESS {
            st.error = rc;
            return (st, Some(err(rc, "generalized request callback failed")));
        }
        (st, None)
    }
}

/// The closure of a [`Finish`].
type FinishFn = dyn FnOnce(&[u8]) -> R<()> + Send;

/// Delivers a collective's result into the program's buffers.
pub(crate) struct Finish(Box<FinishFn>);

impl Finish {
    pub(crate) fn new(f: impl FnOnce(&[u8]) -> R<()> + Send + 'static) -> Finish {
        Finish(Box::new(f))
    }

    pub(crate) fn call(self, out: &[u8]) -> R<()> {
        (self.0)(out)
    }
}

impl core::fmt::Debug for Finish {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Finish")
    }
}

/// A persistent request: what to start, and the current start.
#[derive(Debug)]
pub(crate) struct Persistent {
    pub(crate) kind: PKind,
    pub(crate) addr: usize,
    pub(crate) count: i64,
    pub(crate) ty: Arc<TypeObj>,
    pub(crate) peer: c_int,
    pub(crate) tag: c_int,
    pub(crate) comm: Arc<CommObj>,
    /// The current start (`None`: inactive).
    pub(crate) active: Option<Box<Req>>,
}

/// What a persistent request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PKind {
    Send(crate::p2p::Mode),
    Recv,
}

/// A request object: the request and the communicator its errors are
/// raised on.
#[derive(Debug)]
pub(crate) struct ReqObj {
    pub(crate) comm: MPI_Comm,
    pub(crate) req: Req,
}

/// The requests, by handle: a slab of slots, each locked on its own,
/// whose handles change on every reuse (a freed handle is
/// `MPI_ERR_REQUEST`).
static REQS: Slab<ReqObj> = Slab::new(prefix::REQUEST);

/// A request locked for the call working on it.
type Held = slab::Entry<'static, ReqObj>;

/// Requests freed by the program while receives were still in flight:
/// their data still have to be delivered, so they are completed by later
/// progress (any wait or test, and finalize).
static ORPHANS: Mutex<Vec<Req>> = Mutex::new(Vec::new());
/// How many requests [`ORPHANS`] holds (read without its lock).
static ORPHANS_N: AtomicUsize = AtomicUsize::new(0);

/// Handles of sends complete and successful when started ([`new_send`]):
/// MPICH's *direct* prefix of the request kind (bits 30–31 `10`, bits
/// 26–29 the request kind; the slab's handles are indirect, and
/// `MPI_REQUEST_NULL` has the invalid prefix), the byte count in the low
/// [`SENT_BITS`] bits.
const SENT: i32 = 0xac00_0000_u32 as i32;
/// Bits of a [`SENT`] handle that hold the byte count.
const SENT_BITS: u32 = 26;
const SENT_MASK: i32 = (1 << SENT_BITS) - 1;

/// The byte count of `h` if it is a [`SENT`] handle.
#[inline]
fn sent_len(h: MPI_Request) -> Option<usize> {
    (h & !SENT_MASK == SENT).then_some((h & SENT_MASK) as usize)
}

/// The status a [`SENT`] handle of `len` bytes completes with: what the
/// send's own request would have reported.
#[inline]
fn sent_status(len: usize) -> MPI_Status {
    status_of(&adi::Status::new(
        adi::attr::ANY_SOURCE,
        adi::attr::ANY_TAG,
        len,
    ))
}

/// A new request handle for send `r` on `comm`: a [`SENT`] handle if it
/// completed in its call and succeeded, else a slot holding it.
#[inline]
pub(crate) fn new_send(comm: MPI_Comm, mut r: adi::Request) -> R<MPI_Request> {
    if let Some(st) = r.take_if_done() {
        if st.source == adi::attr::ANY_SOURCE
            && st.tag == adi::attr::ANY_TAG
            && !st.cancelled
            && st.count <= SENT_MASK as usize
        {
            return Ok(SENT | st.count as i32);
        }
        return new_request(comm, Req::Done((status_of(&st), None)));
    }
    new_request(comm, Req::Op { r })
}

/// A new request handle for a send of `len` bytes on `comm` that is
/// pending (`Some`) or completed in its call, successfully (`None`: a
/// [`SENT`] handle).
#[inline]
pub(crate) fn sent_or_pending(
    comm: MPI_Comm,
    len: usize,
    r: Option<adi::Request>,
) -> R<MPI_Request> {
    match r {
        None if len <= SENT_MASK as usize => Ok(SENT | len as i32),
        None => new_request(comm, Req::Done((sent_status(len), None))),
        Some(r) => new_request(comm, Req::Op { r }),
    }
}

/// A new request handle for `req`, raising errors on `comm`.
#[inline]
pub(crate) fn new_request(comm: MPI_Comm, req: Req) -> R<MPI_Request> {
    REQS.insert(ReqObj { comm, req })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many requests"))
}

/// The status of `st` in C form.
pub(crate) fn status_of(st: &adi::Status) -> MPI_Status {
    let mut s = MPI_Status {
        source: st.source,
        tag: st.tag,
        error: MPI_SUCCESS,
        ..MPI_Status::default()
    };
    s.set_count(st.count as i64);
    s.set_cancelled(st.cancelled);
    s
}

/// The empty status (of a null or inactive request).
pub(crate) fn empty_status() -> MPI_Status {
    MPI_Status {
        source: MPI_ANY_SOURCE,
        tag: MPI_ANY_TAG,
        error: MPI_SUCCESS,
        ..MPI_Status::default()
    }
}

/// The outcome of a finished `adi` operation.
pub(crate) fn outcome_of(r: Result<adi::Status, adi::Error>) -> Outcome {
    match r {
        Ok(st) => (status_of(&st), None),
        Err(e) => {
            let st = match &e {
                adi::Error::RecvTruncated { status, .. } => status_of(status),
                _ => empty_status(),
            };
            let mut st = st;
            let e = MpiErr::from(e);
            st.error = e.code;
            (st, Some(e))
        }
    }
}

/// Finishes a receive: delivers the data the request hands back.
fn finish_recv(r: &mut adi::Request, to: &Target, res: Result<adi::Status, adi::Error>) -> Outcome {
    let (st, mut e) = outcome_of(res);
    if let Some(buf) = r.take_buffer() {
        let n = (st.count() as usize).min(buf.len());
        if !st.cancelled() {
            if let Err(d) = to.deliver(&buf[..n]) {
                e.get_or_insert(d);
            }
        }
    }
    (st, e)
}

impl Req {
    /// Advances a non-persistent request without blocking and, once it
    /// is complete, returns its outcome (the request is then spent: the
    /// caller frees it). The fast path of the completing calls: a send's
    /// outcome goes straight to the caller, not through [`Req::Done`].
    #[inline]
    fn complete_now(&mut self) -> R<Option<Outcome>> {
        if let Req::Op { r } = self {
            if let Some(st) = r.take_if_done() {
                return Ok(Some((status_of(&st), None)));
            }
            let res = world_ref()?.comm.test(r);
            return Ok(match res {
                Ok(None) => None,
                Ok(Some(st)) => Some((status_of(&st), None)),
                Err(e) => Some(outcome_of(Err(e))),
            });
        }
        if !self.progress(false)? {
            return Ok(None);
        }
        Ok(self.take())
    }

    /// The outcome of a non-persistent request already complete, without
    /// a progress pass (the request is then spent: the caller frees it);
    /// `None` if an `adi` operation is still pending. Requests of other
    /// kinds are advanced as [`Req::complete_now`] does.
    #[inline]
    fn complete_ready(&mut self) -> R<Option<Outcome>> {
        if let Req::Op { r } = self {
            if let Some(st) = r.take_if_done() {
                return Ok(Some((status_of(&st), None)));
            }
            if !r.is_complete() {
                return Ok(None);
            }
            // Complete: the test takes its outcome without progress.
            let res = world_ref()?.comm.test(r);
            return Ok(match res {
                Ok(None) => None,
                Ok(Some(st)) => Some((status_of(&st), None)),
                Err(e) => Some(outcome_of(Err(e))),
            });
        }
        self.complete_now()
    }

    /// Advances the request; once it is complete, keeps the outcome in
    /// place ([`Req::Done`]) and returns `true`. With `block`, returns
    /// only once complete. An inactive persistent request is complete.
    pub(crate) fn progress(&mut self, block: bool) -> R<bool> {
        let w = world_ref()?;
        let c = &w.comm;
        let done = match self {
            Req::Done(_) => return Ok(true),
            Req::Op { r } => {
                let res = if block {
                    c.wait(r).map(Some)
                } else {
                    c.test(r)
                };
                match res {
                    Ok(None) => None,
                    Ok(Some(st)) => Some(outcome_of(Ok(st))),
                    Err(e) => Some(outcome_of(Err(e))),
                }
            }
            Req::Recv { r, to } => {
                let res = if block {
                    c.wait(r).map(Some)
                } else {
                    c.test(r)
                };
                match res {
                    Ok(None) => None,
                    Ok(Some(st)) => Some(finish_recv(r, to, Ok(st))),
                    Err(e) => Some(finish_recv(r, to, Err(e))),
                }
            }
            Req::Coll { r, finish } => {
                let res = if block {
                    c.wait(r).map(Some)
                } else {
                    c.test(r)
                };
                match res {
                    Ok(None) => None,
                    Ok(Some(_)) => {
                        let buf = r.take_buffer().unwrap_or_default();
                        let e = finish.take().and_then(|f| f.call(&buf).err());
                        let mut st = empty_status();
                        if let Some(e) = &e {
                            st.error = e.code;
                        }
                        Some((st, e))
                    }
                    Err(e) => Some(outcome_of(Err(e))),
                }
            }
            Req::Persistent(p) => {
                return match &mut p.active {
                    None => Ok(true),
                    Some(a) => a.progress(block),
                }
            }
            Req::Rma(r) => match r.progress_request(c, block) {
                Ok(false) => None,
                Ok(true) => Some((empty_status(), None)),
                Err(e) => {
                    let mut st = empty_status();
                    st.error = e.code;
                    Some((st, Some(e)))
                }
            },
            Req::Grequest(g) => {
                // Completed by the program (`MPI_Grequest_complete`),
                // possibly from another thread: a blocking wait polls.
                if !g.complete {
                    return Ok(false);
                }
                Some(g.finish())
            }
        };
        match done {
            Some(o) => {
                *self = Req::Done(o);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The outcome of a complete request, which becomes null (a
    /// persistent one inactive). `None`: not complete.
    pub(crate) fn take(&mut self) -> Option<Outcome> {
        match self {
            Req::Done(o) => Some(o.clone()),
            Req::Persistent(p) => match &mut p.active {
                None => Some((empty_status(), None)),
                Some(a) => {
                    let o = a.take()?;
                    p.active = None;
                    Some(o)
                }
            },
            _ => None,
        }
    }

    /// The outcome of a complete request, left in place.
    fn peek(&self) -> Option<Outcome> {
        match self {
            Req::Done(o) => Some(o.clone()),
            Req::Persistent(p) => match &p.active {
                None => Some((empty_status(), None)),
                Some(a) => a.peek(),
            },
            _ => None,
        }
    }

    /// Whether this is an inactive persistent request (treated as null by
    /// the set operations).
    fn inactive(&self) -> bool {
        matches!(self, Req::Persistent(p) if p.active.is_none())
    }

    fn persistent(&self) -> bool {
        matches!(self, Req::Persistent(_))
    }
}

/// Completes orphaned receives that are done (or all, at finalize).
pub(crate) fn drain_orphans(block: bool) {
    if ORPHANS_N.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut o = ORPHANS.lock().unwrap_or_else(PoisonError::into_inner);
    o.retain_mut(|r| !matches!(r.progress(block), Ok(true) | Err(_)));
    ORPHANS_N.store(o.len(), Ordering::Relaxed);
}

/// The request of handle `h`, locked (`MPI_ERR_REQUEST` for an unknown
/// or freed one); `None` for `MPI_REQUEST_NULL`.
fn lookup(h: MPI_Request) -> R<Option<Held>> {
    if h == MPI_REQUEST_NULL {
        return Ok(None);
    }
    REQS.get(h)
        .map(Some)
        .ok_or_else(|| err(MPI_ERR_REQUEST, "invalid request"))
}

/// Hands over the outcome of a complete request: a non-persistent one is
/// freed (its slot returned with `frees`, or at once) and its handle
/// becomes `MPI_REQUEST_NULL`.
fn hand_over(
    h: &mut MPI_Request,
    mut e: Held,
    frees: Option<&mut Frees<ReqObj>>,
) -> Option<Outcome> {
    let o = e.req.take()?;
    if !e.req.persistent() {
        *h = MPI_REQUEST_NULL;
        // Dropped here, after the slot is unlocked.
        let _freed = match frees {
            Some(f) => e.remove_into(f),
            None => e.remove(),
        };
    }
    Some(o)
}

/// `MPI_Wait` on one handle.
fn wait_one(h: &mut MPI_Request) -> R<MPI_Status> {
    if let Some(len) = sent_len(*h) {
        *h = MPI_REQUEST_NULL;
        drain_orphans(false);
        return Ok(sent_status(len));
    }
    let Some(mut e) = lookup(*h)? else {
        return Ok(empty_status());
    };
    let comm = e.comm;
    if !e.req.persistent() {
        // A request already complete (a small send) is handed over by
        // one test, without the blocking wait's setup.
        if let Some((st, x)) = e.req.complete_now().map_err(|x| with_comm(x, comm))? {
            *h = MPI_REQUEST_NULL;
            e.discard();
            drain_orphans(false);
            return match x {
                None => Ok(st),
                Some(x) => Err(with_comm(x, comm)),
            };
        }
    }
    // Only a generalized request can stay incomplete here: it completes
    // when the program says so, maybe in another thread, which needs the
    // lock in between.
    while !e.req.progress(true).map_err(|x| with_comm(x, comm))? {
        drop(e);
        relax()?;
        e = lookup(*h)?.ok_or_else(|| err(MPI_ERR_REQUEST, "invalid request"))?;
    }
    let (st, x) = hand_over(h, e, None).unwrap_or((empty_status(), None));
    drain_orphans(false);
    match x {
        None => Ok(st),
        Some(x) => Err(with_comm(x, comm)),
    }
}

/// `MPI_Test` on one handle: `Some(status)` once complete.
fn test_one(h: &mut MPI_Request) -> R<Option<MPI_Status>> {
    if let Some(len) = sent_len(*h) {
        *h = MPI_REQUEST_NULL;
        return Ok(Some(sent_status(len)));
    }
    let Some(mut e) = lookup(*h)? else {
        return Ok(Some(empty_status()));
    };
    let comm = e.comm;
    let out = if e.req.persistent() {
        match e.req.progress(false).map_err(|x| with_comm(x, comm))? {
            true => hand_over(h, e, None),
            false => None,
        }
    } else {
        let o = e.req.complete_now().map_err(|x| with_comm(x, comm))?;
        if o.is_some() {
            *h = MPI_REQUEST_NULL;
            e.discard();
        }
        o
    };
    let Some((st, x)) = out else {
        drain_orphans(false);
        return Ok(None);
    };
    match x {
        None => Ok(Some(st)),
        Some(x) => Err(with_comm(x, comm)),
    }
}

/// Errors of a request are raised on its communicator.
fn with_comm(e: MpiErr, comm: MPI_Comm) -> MpiErr {
    raise_on(On::Comm(comm));
    e
}

/// Runs a request call (errors raised on the failed request's
/// communicator, else on `MPI_COMM_WORLD`).
fn run_req(func: &'static str, f: impl FnOnce() -> R<()>) -> c_int {
    run(func, On::World, f)
}

mpi_fn! {
    /// `MPI_Wait`.
    fn MPI_Wait / PMPI_Wait(request: *mut MPI_Request, status: *mut MPI_Status) -> c_int {
        run_req("MPI_Wait", || {
            // SAFETY: MPI: `request` points to a request handle.
            let mut h = unsafe { ffi::get(request) }?;
            let r = wait_one(&mut h);
            // SAFETY: as above.
            unsafe { ffi::put(request, h) }?;
            let st = match &r {
                Ok(st) => *st,
                Err(_) => return r.map(|_| ()),
            };
            // SAFETY: MPI: `status` is MPI_STATUS_IGNORE or a status.
            unsafe { ffi::put_status(status, st) };
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Test`.
    fn MPI_Test / PMPI_Test(request: *mut MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
        run_req("MPI_Test", || {
            // SAFETY: MPI: `request` points to a request handle.
            let mut h = unsafe { ffi::get(request) }?;
            let r = test_one(&mut h)?;
            // SAFETY: MPI: `request`, `flag`, `status` as documented.
            unsafe {
                ffi::put(request, h)?;
                ffi::put(flag, ffi::flag(r.is_some()))?;
                if let Some(st) = r {
                    ffi::put_status(status, st);
                }
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Request_get_status`: like `MPI_Test` without freeing.
    fn MPI_Request_get_status / PMPI_Request_get_status(request: MPI_Request, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
        run_req("MPI_Request_get_status", || {
            let st = match sent_len(request) {
                Some(len) => Some(sent_status(len)),
                None => match lookup(request)? {
                    None => Some(empty_status()),
                    Some(mut e) => {
                        let comm = e.comm;
                        e.req.progress(false).map_err(|x| with_comm(x, comm))?;
                        e.req.peek().map(|(st, _)| st)
                    }
                },
            };
            // SAFETY: MPI: `flag` and `status` as documented.
            unsafe {
                ffi::put(flag, ffi::flag(st.is_some()))?;
                if let Some(st) = st {
                    ffi::put_status(status, st);
                }
            }
            Ok(())
        })
    }
}

/// The handles of a request array.
///
/// # Safety
/// `p` holds `n` handles.
unsafe fn handles<'a>(p: *mut MPI_Request, n: c_int) -> R<&'a mut [MPI_Request]> {
    let n = ffi::count(n)?;
    // SAFETY: the caller's contract.
    unsafe { ffi::array_mut(p, n) }
}

/// The statuses of an array (`None`: `MPI_STATUSES_IGNORE`).
///
/// # Safety
/// `p` is `MPI_STATUSES_IGNORE` or holds `n` statuses.
unsafe fn statuses<'a>(p: *mut MPI_Status, n: usize) -> R<Option<&'a mut [MPI_Status]>> {
    if ffi::ignore_status(p) {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    unsafe { ffi::array_mut(p, n) }.map(Some)
}

/// Checks every handle of a set before any is touched: each is null or
/// live (`MPI_ERR_REQUEST` otherwise).
fn validate(hs: &[MPI_Request]) -> R<()> {
    match hs
        .iter()
        .all(|&h| h == MPI_REQUEST_NULL || REQS.is_live(h) || sent_len(h).is_some())
    {
        true => Ok(()),
        false => Err(err(MPI_ERR_REQUEST, "invalid request")),
    }
}

/// Lets the device make progress (blocking briefly) between passes.
fn relax() -> R<()> {
    advance(true)
}

/// One device check for a whole set of requests (blocking: until some
/// request completes, or a bounded number of idle passes).
fn advance(block: bool) -> R<()> {
    world_ref()?.comm.device_check(block).map_err(MpiErr::from)
}

/// One request of a set, advanced without blocking.
enum Step {
    /// Null, or an inactive persistent request.
    Null,
    /// Not complete yet.
    Pending,
    /// Complete and handed over (with `take`), or just complete.
    Done(Option<Outcome>),
}

/// Looks at request `hs[i]` of a set; once complete and with `take`,
/// hands it over (its error raised on its communicator). A pending
/// point-to-point operation is only looked at, not advanced (the caller
/// makes one device check for the whole set); other kinds are advanced
/// without blocking.
fn step(hs: &mut [MPI_Request], i: usize, take: bool, frees: &mut Frees<ReqObj>) -> R<Step> {
    if let Some(len) = sent_len(hs[i]) {
        if !take {
            return Ok(Step::Done(None));
        }
        hs[i] = MPI_REQUEST_NULL;
        return Ok(Step::Done(Some((sent_status(len), None))));
    }
    let Some(e) = lookup(hs[i])? else {
        return Ok(Step::Null);
    };
    step_held(hs, i, e, take, frees)
}

/// [`step`] of request `hs[i]`, held (`e`).
fn step_held(
    hs: &mut [MPI_Request],
    i: usize,
    mut e: Held,
    take: bool,
    frees: &mut Frees<ReqObj>,
) -> R<Step> {
    if e.req.inactive() {
        return Ok(Step::Null);
    }
    let comm = e.comm;
    if !take {
        if let Req::Op { r } = &e.req {
            // Only looked at: the caller advances the set.
            return Ok(match r.is_complete() {
                true => Step::Done(None),
                false => Step::Pending,
            });
        }
        return match e.req.progress(false).map_err(|x| with_comm(x, comm))? {
            true => Ok(Step::Done(None)),
            false => Ok(Step::Pending),
        };
    }
    let out = if e.req.persistent() {
        if !e.req.progress(false).map_err(|x| with_comm(x, comm))? {
            return Ok(Step::Pending);
        }
        hand_over(&mut hs[i], e, Some(frees))
    } else {
        let Some(o) = e.req.complete_ready().map_err(|x| with_comm(x, comm))? else {
            return Ok(Step::Pending);
        };
        hs[i] = MPI_REQUEST_NULL;
        e.discard_into(frees);
        Some(o)
    };
    if matches!(&out, Some((_, Some(_)))) {
        raise_on(On::Comm(comm));
    }
    Ok(Step::Done(out))
}

/// The statuses of a completing call: filled as requests are handed
/// over, with `MPI_ERROR` left alone unless a request failed (the call
/// then returns `MPI_ERR_IN_STATUS` and every `MPI_ERROR` is set).
struct Statuses<'a> {
    sts: Option<&'a mut [MPI_Status]>,
    /// Some request failed.
    failed: bool,
    /// The `MPI_ERROR` of statuses written whose value is not
    /// `MPI_SUCCESS`, by position (empty, no allocation, when none).
    errors: Vec<(usize, c_int)>,
    /// Positions written so far (below this).
    written: usize,
}

impl<'a> Statuses<'a> {
    fn new(sts: Option<&'a mut [MPI_Status]>) -> Statuses<'a> {
        Statuses {
            sts,
            failed: false,
            errors: Vec::new(),
            written: 0,
        }
    }

    /// Records outcome `(st, e)` at position `k`.
    fn put(&mut self, k: usize, (st, e): Outcome) {
        self.failed |= e.is_some();
        if st.error != MPI_SUCCESS {
            self.errors.push((k, st.error));
        }
        self.written = self.written.max(k + 1);
        if let Some(s) = self.sts.as_deref_mut().and_then(|s| s.get_mut(k)) {
            let keep = s.error;
            *s = st;
            s.error = keep;
        }
    }

    /// Records the successful completion `st` at position `k` (the
    /// common case of [`put`](Self::put), without an [`Outcome`] built
    /// and moved).
    #[inline]
    fn put_ok(&mut self, k: usize, st: &adi::Status) {
        self.written = self.written.max(k + 1);
        if let Some(s) = self.sts.as_deref_mut().and_then(|s| s.get_mut(k)) {
            let keep = s.error;
            *s = status_of(st);
            s.error = keep;
        }
    }

    /// Records the completion of a [`SENT`] handle of `len` bytes at
    /// position `k`.
    #[inline]
    fn put_sent(&mut self, k: usize, len: usize) {
        self.written = self.written.max(k + 1);
        if let Some(s) = self.sts.as_deref_mut().and_then(|s| s.get_mut(k)) {
            let keep = s.error;
            *s = sent_status(len);
            s.error = keep;
        }
    }

    /// `MPI_ERR_IN_STATUS` (with every status's `MPI_ERROR` set) if a
    /// request failed.
    fn finish(self) -> R<()> {
        if !self.failed {
            return Ok(());
        }
        if let Some(sts) = self.sts {
            for s in sts.iter_mut().take(self.written) {
                s.error = MPI_SUCCESS;
            }
            for (k, code) in self.errors {
                if let Some(s) = sts.get_mut(k) {
                    s.error = code;
                }
            }
        }
        Err(err(MPI_ERR_IN_STATUS, "a request failed"))
    }
}

/// `MPI_Waitall` (and `MPI_Testall` once all are complete): hands over
/// the requests already complete in one pass without progress; then, when
/// every one left is a point-to-point operation, waits for them together
/// ([`wait_ops`]); otherwise advances the others request by request.
fn wait_all(hs: &mut [MPI_Request], sts: Option<&mut [MPI_Status]>) -> R<()> {
    drain_orphans(false);
    let mut out = Statuses::new(sts);
    let mut frees = Frees::new(&REQS);
    // Positions still pending after the first pass (no allocation when
    // there are none).
    let mut left = Vec::new();
    for i in 0..hs.len() {
        if let Some(len) = sent_len(hs[i]) {
            hs[i] = MPI_REQUEST_NULL;
            out.put_sent(i, len);
            continue;
        }
        let Some(mut e) = lookup(hs[i])? else {
            out.put(i, (empty_status(), None));
            continue;
        };
        // The common case on its own path: a send or receive of
        // contiguous data already complete (its status moved once).
        if let Req::Op { r } = &mut e.req {
            if let Some(st) = r.take_if_done() {
                hs[i] = MPI_REQUEST_NULL;
                e.discard_into(&mut frees);
                out.put_ok(i, &st);
                continue;
            }
            if !r.is_complete() {
                // Pending, as `step_held` would find it (an operation is
                // neither persistent nor inactive), without its second
                // look at the request.
                drop(e);
                push_left(&mut left, i, hs.len());
                continue;
            }
        }
        match step_held(hs, i, e, true, &mut frees)? {
            Step::Null => out.put(i, (empty_status(), None)),
            Step::Pending => push_left(&mut left, i, hs.len()),
            Step::Done(o) => out.put(i, o.unwrap_or((empty_status(), None))),
        }
    }
    if left.is_empty() {
        return out.finish();
    }
    // Under MPI_THREAD_MULTIPLE another thread may cancel one of the
    // requests while this one waits (to end the wait): their slots are not
    // held through the wait there.
    if !crate::init::multithreaded() && wait_ops(hs, &left, &mut out, &mut frees)? {
        drain_orphans(false);
        return out.finish();
    }
    // Rounds of one blocking device check, then one look at each request
    // left (complete ones handed over; no progress pass per request).
    while !left.is_empty() {
        relax()?;
        drain_orphans(false);
        let mut k = 0;
        while k < left.len() {
            let i = left[k];
            match step(hs, i, true, &mut frees)? {
                Step::Pending => k += 1,
                Step::Null => {
                    out.put(i, (empty_status(), None));
                    left.swap_remove(k);
                }
                Step::Done(o) => {
                    out.put(i, o.unwrap_or((empty_status(), None)));
                    left.swap_remove(k);
                }
            }
        }
    }
    out.finish()
}

/// Records position `i` of `n` as pending, with room for every position
/// from `i` on at the first: no regrowth while a window of receives is
/// still pending (five reallocations for 64).
#[inline(always)]
fn push_left(left: &mut Vec<usize>, i: usize, n: usize) {
    if left.capacity() == 0 {
        left.reserve_exact(n - i);
    }
    left.push(i);
}

/// Waits for the pending requests at positions `left` of `hs` together,
/// if every one is a point-to-point operation (`Req::Op`): their `adi`
/// requests go to one `adi` waitall, whose progress passes complete
/// them in place, as they are harvested (not one pass per request, nor
/// the publication of each completion through its shared slot). Their
/// slots stay locked meanwhile. `Ok(false)`, with nothing changed, if
/// some request is of another kind (or is held elsewhere): the caller
/// advances them one by one.
fn wait_ops(
    hs: &mut [MPI_Request],
    left: &[usize],
    out: &mut Statuses<'_>,
    frees: &mut Frees<ReqObj>,
) -> R<bool> {
    let w = world_ref()?;
    let mut held: Vec<Held> = Vec::with_capacity(left.len());
    let mut reqs: Vec<adi::Request> = Vec::with_capacity(left.len());
    for &i in left {
        // A handle met twice, or locked by another thread, is left to
        // the general loop (`try_get`: no waiting for ourselves).
        let Some(mut e) = REQS.try_get(hs[i]) else {
            put_back(held, reqs);
            return Ok(false);
        };
        let Req::Op { r } = &mut e.req else {
            drop(e);
            put_back(held, reqs);
            return Ok(false);
        };
        reqs.push(core::mem::replace(r, adi::Request::null()));
        held.push(e);
    }
    let statuses = match w.comm.waitall(&mut reqs) {
        Ok(sts) => sts,
        Err(adi::Error::InStatus { statuses, .. }) if statuses.len() == reqs.len() => {
            statuses.into_iter().map(|(_, st)| st).collect()
        }
        Err(e) => {
            // Progress failed: the requests already taken are spent (their
            // outcome is this error); the others stay pending.
            let e = MpiErr::from(e);
            for ((e_held, r), &i) in held.into_iter().zip(reqs).zip(left) {
                if r.is_null() {
                    let mut st = empty_status();
                    st.error = e.code;
                    out.put(i, (st, Some(err(e.code, e.msg.clone()))));
                    hs[i] = MPI_REQUEST_NULL;
                    e_held.discard_into(frees);
                } else {
                    let mut e_held = e_held;
                    e_held.req = Req::Op { r };
                }
            }
            return Err(e);
        }
    };
    for ((e, st), &i) in held.into_iter().zip(statuses).zip(left) {
        let mut s = status_of(&st);
        let outcome = if st.error.is_success() {
            (s, None)
        } else {
            let code = st.error.code();
            s.error = code;
            raise_on(On::Comm(e.comm));
            (s, Some(err(code, "a request of the set failed")))
        };
        out.put(i, outcome);
        hs[i] = MPI_REQUEST_NULL;
        e.discard_into(frees);
    }
    Ok(true)
}

/// Gives the `adi` requests taken out of `held` back to their slots.
fn put_back(held: Vec<Held>, reqs: Vec<adi::Request>) {
    for (mut e, r) in held.into_iter().zip(reqs) {
        e.req = Req::Op { r };
    }
}

mpi_fn! {
    /// `MPI_Waitall`.
    fn MPI_Waitall / PMPI_Waitall(n: c_int, reqs: *mut MPI_Request, sts: *mut MPI_Status) -> c_int {
        run_req("MPI_Waitall", || {
            // SAFETY: MPI: `reqs` holds `n` handles, `sts` `n` statuses.
            let hs = unsafe { handles(reqs, n) }?;
            // SAFETY: as above.
            let sts = unsafe { statuses(sts, hs.len()) }?;
            validate(hs)?;
            wait_all(hs, sts)
        })
    }
}

mpi_fn! {
    /// `MPI_Testall`: completes all or none.
    fn MPI_Testall / PMPI_Testall(n: c_int, reqs: *mut MPI_Request, flag: *mut c_int, sts: *mut MPI_Status) -> c_int {
        run_req("MPI_Testall", || {
            // SAFETY: MPI: `reqs` holds `n` handles, `sts` `n` statuses.
            let hs = unsafe { handles(reqs, n) }?;
            // SAFETY: as above.
            let sts = unsafe { statuses(sts, hs.len()) }?;
            validate(hs)?;
            drain_orphans(false);
            let mut frees = Frees::new(&REQS);
            // One progress pass for the set, then a look at each request
            // (not a pass per request).
            advance(false)?;
            let mut all = true;
            for i in 0..hs.len() {
                all &= !matches!(step(hs, i, false, &mut frees)?, Step::Pending);
            }
            drop(frees);
            // SAFETY: MPI: `flag` points to an int.
            unsafe { ffi::put(flag, ffi::flag(all)) }?;
            if all {
                wait_all(hs, sts)?;
            }
            Ok(())
        })
    }
}

/// Whether every request of `hs` is null or inactive.
fn all_null(hs: &[MPI_Request]) -> R<bool> {
    for &h in hs {
        if sent_len(h).is_some() {
            return Ok(false);
        }
        if let Some(e) = lookup(h)? {
            if !e.req.inactive() {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// Waitany/Testany: the first complete live request, handed over.
fn any(hs: &mut [MPI_Request], block: bool) -> R<Option<(c_int, MPI_Status)>> {
    validate(hs)?;
    if all_null(hs)? {
        return Ok(Some((MPI_UNDEFINED, empty_status())));
    }
    let mut frees = Frees::new(&REQS);
    // A test makes one progress pass for the set, then looks at each
    // request once; a wait looks first, then alternates a blocking device
    // check and a look (never a pass per request).
    if !block {
        advance(false)?;
    }
    loop {
        drain_orphans(false);
        for i in 0..hs.len() {
            if let Step::Done(o) = step(hs, i, true, &mut frees)? {
                let (st, e) = o.unwrap_or((empty_status(), None));
                return match e {
                    None => Ok(Some((i as c_int, st))),
                    Some(e) => Err(e),
                };
            }
        }
        if !block {
            return Ok(None);
        }
        relax()?;
    }
}

mpi_fn! {
    /// `MPI_Waitany`.
    fn MPI_Waitany / PMPI_Waitany(n: c_int, reqs: *mut MPI_Request, index: *mut c_int, status: *mut MPI_Status) -> c_int {
        run_req("MPI_Waitany", || {
            // SAFETY: MPI: `reqs` holds `n` handles.
            let hs = unsafe { handles(reqs, n) }?;
            let r = any(hs, true)?;
            let (i, st) = r.unwrap_or((MPI_UNDEFINED, empty_status()));
            // SAFETY: MPI: `index` points to an int, `status` as documented.
            unsafe {
                ffi::put(index, i)?;
                ffi::put_status(status, st);
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Testany`.
    fn MPI_Testany / PMPI_Testany(n: c_int, reqs: *mut MPI_Request, index: *mut c_int, flag: *mut c_int, status: *mut MPI_Status) -> c_int {
        run_req("MPI_Testany", || {
            // SAFETY: MPI: `reqs` holds `n` handles.
            let hs = unsafe { handles(reqs, n) }?;
            let r = any(hs, false)?;
            // SAFETY: MPI: `index`, `flag` point to ints, `status` as documented.
            unsafe {
                match r {
                    Some((i, st)) => {
                        ffi::put(index, i)?;
                        ffi::put(flag, 1)?;
                        ffi::put_status(status, st);
                    }
                    None => {
                        ffi::put(index, MPI_UNDEFINED)?;
                        ffi::put(flag, 0)?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// Waitsome/Testsome: every complete live request, handed over
/// (`MPI_UNDEFINED` when there is no live request).
fn some(
    hs: &mut [MPI_Request],
    block: bool,
    indices: &mut [c_int],
    sts: Option<&mut [MPI_Status]>,
) -> R<c_int> {
    validate(hs)?;
    if all_null(hs)? {
        return Ok(MPI_UNDEFINED);
    }
    let mut out = Statuses::new(sts);
    let mut frees = Frees::new(&REQS);
    let mut k = 0usize;
    // As in `any`: a test's one pass first, a wait's look first.
    if !block {
        advance(false)?;
    }
    loop {
        drain_orphans(false);
        for i in 0..hs.len() {
            if let Step::Done(o) = step(hs, i, true, &mut frees)? {
                if let Some(slot) = indices.get_mut(k) {
                    *slot = i as c_int;
                }
                out.put(k, o.unwrap_or((empty_status(), None)));
                k += 1;
            }
        }
        if k > 0 || !block {
            break;
        }
        relax()?;
    }
    out.finish()?;
    Ok(k as c_int)
}

mpi_fn! {
    /// `MPI_Waitsome`.
    fn MPI_Waitsome / PMPI_Waitsome(n: c_int, reqs: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, sts: *mut MPI_Status) -> c_int {
        run_req("MPI_Waitsome", || {
            // SAFETY: MPI: `reqs` holds `n` handles, `indices` and `sts` room for `n`.
            let hs = unsafe { handles(reqs, n) }?;
            let len = hs.len();
            // SAFETY: as above.
            let idx = unsafe { ffi::array_mut(indices, len) }?;
            // SAFETY: as above.
            let sts = unsafe { statuses(sts, len) }?;
            let k = some(hs, true, idx, sts);
            let k = match k {
                Ok(k) => k,
                Err(e) => return Err(e),
            };
            // SAFETY: MPI: `outcount` points to an int.
            unsafe { ffi::put(outcount, k) }
        })
    }
}

mpi_fn! {
    /// `MPI_Testsome`.
    fn MPI_Testsome / PMPI_Testsome(n: c_int, reqs: *mut MPI_Request, outcount: *mut c_int, indices: *mut c_int, sts: *mut MPI_Status) -> c_int {
        run_req("MPI_Testsome", || {
            // SAFETY: MPI: `reqs` holds `n` handles, `indices` and `sts` room for `n`.
            let hs = unsafe { handles(reqs, n) }?;
            let len = hs.len();
            // SAFETY: as above.
            let idx = unsafe { ffi::array_mut(indices, len) }?;
            // SAFETY: as above.
            let sts = unsafe { statuses(sts, len) }?;
            let k = some(hs, false, idx, sts)?;
            // SAFETY: MPI: `outcount` points to an int.
            unsafe { ffi::put(outcount, k) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cancel`: a receive not yet matched is cancelled (its wait
    /// returns with the cancelled flag); see `adi`'s `Comm::cancel` for
    /// sends.
    fn MPI_Cancel / PMPI_Cancel(request: *mut MPI_Request) -> c_int {
        run_req("MPI_Cancel", || {
            // SAFETY: MPI: `request` points to a request handle.
            let h = unsafe { ffi::get(request) }?;
            if sent_len(h).is_some() {
                // Complete: nothing to cancel.
                return Ok(());
            }
            let mut obj = lookup(h)?.ok_or_else(|| err(MPI_ERR_REQUEST, "cancel of MPI_REQUEST_NULL"))?;
            let w = world_ref()?;
            let comm = obj.comm;
            let r = match &mut obj.req {
                Req::Op { r } | Req::Recv { r, .. } => Some(w.comm.cancel(r)),
                Req::Persistent(p) => match p.active.as_deref_mut() {
                    Some(Req::Op { r } | Req::Recv { r, .. }) => Some(w.comm.cancel(r)),
                    _ => None,
                },
                Req::Grequest(g) => {
                    // SAFETY: the program's cancel callback, called as MPI
                    // calls it.
                    let rc = unsafe {
                        core::mem::transmute::<usize, CancelFn>(g.cancel)(g.extra as *mut _, c_int::from(g.complete))
                    };
                    check(rc == MPI_SUCCESS, rc, "generalized request cancel callback failed")?;
                    None
                }
                // A collective cannot be cancelled (MPI: erroneous).
                Req::Coll { .. } | Req::Rma(_) | Req::Done(_) => None,
            };
            if let Some(Err(e)) = r {
                return Err(with_comm(e.into(), comm));
            }
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Request_free`: the operation still completes (a receive's data
    /// are still delivered).
    fn MPI_Request_free / PMPI_Request_free(request: *mut MPI_Request) -> c_int {
        run_req("MPI_Request_free", || {
            // SAFETY: MPI: `request` points to a request handle.
            let h = unsafe { ffi::get(request) }?;
            check(h != MPI_REQUEST_NULL, MPI_ERR_REQUEST, "free of MPI_REQUEST_NULL")?;
            if sent_len(h).is_some() {
                // SAFETY: as above.
                return unsafe { ffi::put(request, MPI_REQUEST_NULL) };
            }
            let obj = lookup(h)?.ok_or_else(|| err(MPI_ERR_REQUEST, "invalid request"))?.remove();
            let pending = match obj.req {
                r @ (Req::Recv { .. } | Req::Rma(_)) => Some(r),
                Req::Persistent(p) => p.active.map(|a| *a).filter(|a| matches!(a, Req::Recv { .. })),
                _ => None,
            };
            if let Some(r) = pending {
                let mut o = ORPHANS.lock().unwrap_or_else(PoisonError::into_inner);
                o.push(r);
                ORPHANS_N.store(o.len(), Ordering::Relaxed);
            }
            // SAFETY: as above.
            unsafe { ffi::put(request, MPI_REQUEST_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Test_cancelled`.
    fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const MPI_Status, flag: *mut c_int) -> c_int {
        run("MPI_Test_cancelled", On::World, || {
            // SAFETY: MPI: `status` points to a status, `flag` to an int.
            unsafe {
                let st = ffi::get(status)?;
                ffi::put(flag, ffi::flag(st.cancelled()))
            }
        })
    }
}

/// Starts persistent request `h`.
fn start(h: MPI_Request) -> R<()> {
    check(
        sent_len(h).is_none(),
        MPI_ERR_REQUEST,
        "start of a request that is not persistent",
    )?;
    let mut obj = lookup(h)?.ok_or_else(|| err(MPI_ERR_REQUEST, "start of MPI_REQUEST_NULL"))?;
    let comm = obj.comm;
    let Req::Persistent(p) = &mut obj.req else {
        return Err(err(
            MPI_ERR_REQUEST,
            "start of a request that is not persistent",
        ));
    };
    check(
        p.active.is_none(),
        MPI_ERR_REQUEST,
        "start of an active persistent request",
    )?;
    let inner = crate::p2p::start_persistent(p).map_err(|e| with_comm(e, comm))?;
    p.active = Some(Box::new(inner));
    Ok(())
}

mpi_fn! {
    /// `MPI_Start`.
    fn MPI_Start / PMPI_Start(request: *mut MPI_Request) -> c_int {
        run_req("MPI_Start", || {
            // SAFETY: MPI: `request` points to a request handle.
            let h = unsafe { ffi::get(request) }?;
            start(h)
        })
    }
}

mpi_fn! {
    /// `MPI_Startall`.
    fn MPI_Startall / PMPI_Startall(n: c_int, reqs: *mut MPI_Request) -> c_int {
        run_req("MPI_Startall", || {
            // SAFETY: MPI: `reqs` holds `n` handles.
            let hs = unsafe { handles(reqs, n) }?;
            hs.iter().try_for_each(|&h| start(h))
        })
    }
}

mpi_fn! {
    /// `MPI_Grequest_start`.
    fn MPI_Grequest_start / PMPI_Grequest_start(query: *const core::ffi::c_void, free: *const core::ffi::c_void, cancel: *const core::ffi::c_void, extra: *mut core::ffi::c_void, request: *mut MPI_Request) -> c_int {
        run("MPI_Grequest_start", On::World, || {
            check(!query.is_null() && !free.is_null() && !cancel.is_null(), MPI_ERR_ARG, "null callback")?;
            let g = Greq { query: query as usize, free: free as usize, cancel: cancel as usize, extra: extra as usize, complete: false };
            let h = new_request(MPI_COMM_WORLD, Req::Grequest(Box::new(g)))?;
            // SAFETY: MPI: `request` points to a handle.
            unsafe { ffi::put(request, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Grequest_complete`: the request's waits may now return.
    fn MPI_Grequest_complete / PMPI_Grequest_complete(request: MPI_Request) -> c_int {
        run("MPI_Grequest_complete", On::World, || {
            check(sent_len(request).is_none(), MPI_ERR_REQUEST, "not a generalized request")?;
            let mut obj = lookup(request)?.ok_or_else(|| err(MPI_ERR_REQUEST, "MPI_REQUEST_NULL"))?;
            match &mut obj.req {
                Req::Grequest(g) => {
                    g.complete = true;
                    Ok(())
                }
                _ => Err(err(MPI_ERR_REQUEST, "not a generalized request")),
            }
        })
    }
}

/// Frees every request (finalize), completing orphaned receives first.
pub(crate) fn finalize() {
    drain_orphans(true);
    drop(REQS.clear());
}

#[cfg(test)]
mod sent_tests {
    use super::*;

    #[test]
    fn a_send_done_at_once_takes_no_slot_and_completes_once() {
        let h = sent_or_pending(MPI_COMM_WORLD, 5, None).unwrap();
        assert_ne!(h, MPI_REQUEST_NULL);
        assert!(!REQS.is_live(h), "no slot");
        assert_eq!(h as u32 & 0xfc00_0000, 0xac00_0000, "direct request kind");
        validate(&[h, MPI_REQUEST_NULL]).unwrap();
        let mut w = h;
        let st = wait_one(&mut w).unwrap();
        assert_eq!(w, MPI_REQUEST_NULL);
        assert_eq!(
            (st.source, st.tag, st.count()),
            (MPI_ANY_SOURCE, MPI_ANY_TAG, 5)
        );
        assert!(!st.cancelled());
        let mut t = h;
        assert_eq!(test_one(&mut t).unwrap().map(|s| s.count()), Some(5));
        assert_eq!(t, MPI_REQUEST_NULL);
        let mut hs = [MPI_REQUEST_NULL, h];
        let mut frees = Frees::new(&REQS);
        assert!(matches!(
            step(&mut hs, 1, false, &mut frees),
            Ok(Step::Done(None))
        ));
        assert_eq!(hs[1], h, "only looked at");
        assert!(matches!(
            step(&mut hs, 1, true, &mut frees),
            Ok(Step::Done(Some(_)))
        ));
        assert_eq!(hs[1], MPI_REQUEST_NULL);
        assert!(!all_null(&[h]).unwrap());
        assert!(start(h).is_err(), "not persistent");
    }

    #[test]
    fn a_send_too_long_for_the_handle_takes_a_slot() {
        let h = sent_or_pending(MPI_COMM_WORLD, 1 << SENT_BITS, None).unwrap();
        assert!(sent_len(h).is_none());
        let e = REQS.get(h).expect("a slot");
        assert!(matches!(&e.req, Req::Done((st, None)) if st.count() == 1 << SENT_BITS));
        e.discard();
    }
}
