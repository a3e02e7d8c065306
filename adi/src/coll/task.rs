//! The engine of the collectives: each collective is an `async` schedule
//! of nonblocking point-to-point operations on the communicator's
//! collective context, run either to completion by its caller
//! ([`block_on`], the blocking collectives) or in the background
//! ([`spawn`], the nonblocking ones), advanced by the device's progress
//! ([`progress`], called from every progress pass, as MPICH's progress
//! engine advances its collective schedules).
//!
//! A schedule never blocks: it starts operations and awaits their
//! requests ([`done`]), which are ready once the device completed them.
//! Futures are polled with a no-op waker: whoever drives progress polls
//! every pending schedule after each pass.
//!
//! # Tags
//!
//! Every collective call on a communicator takes the next number of the
//! communicator's collective sequence ([`Coll::new`]); its messages use
//! tags `TAG_BASE + (seq mod 4096) * 256 + sub` (`sub` < 256 tells the
//! messages of one schedule apart where needed). MPI requires every
//! member to make the same collective calls in the same order, so the
//! sequence numbers agree (the counter lives in the communicator: no
//! lock), and the messages of two collectives in flight
//! at once (nonblocking ones, or a blocking one after them) never match
//! each other's receives.

use crate::attr::TAG_UB;
use crate::comm::Comm;
use crate::device::{LentInto, Mode};
use crate::request::{request, Completer, Request, Status};
use crate::Error;
use std::cell::Cell;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

/// First tag of the collectives' sequence-numbered tags (above the fixed
/// tags of the blocking collectives in `coll.rs` and of
/// `Comm::create_group`).
const TAG_BASE: i32 = 1 << 21;
/// Sequence numbers in use at once per communicator.
const SEQ_WINDOW: u32 = 4096;
/// Sub-tags per collective.
pub(crate) const SUBS: i32 = 256;

const _: () = assert!(TAG_BASE + SEQ_WINDOW as i32 * SUBS <= TAG_UB);

/// A boxed schedule producing the bytes a request hands back.
pub(crate) type Sched = Pin<Box<dyn Future<Output = Result<Vec<u8>, Error>> + Send>>;

/// Takes the communicator's next collective sequence number (kept in the
/// communicator, shared by its clones; a new communicator starts at 0 on
/// every member).
fn next_seq(comm: &Comm) -> u32 {
    comm.inner.coll_seq.fetch_add(1, Ordering::Relaxed)
}

/// One collective call's view of its communicator: the collective
/// context and the tags of its sequence number.
#[derive(Debug, Clone)]
pub(crate) struct Coll {
    pub(crate) comm: Comm,
    base: i32,
    pub(crate) me: i32,
    pub(crate) n: i32,
}

impl Coll {
    /// Takes the communicator's next collective sequence number.
    pub(crate) fn new(comm: &Comm) -> Coll {
        let seq = next_seq(comm) % SEQ_WINDOW;
        Coll {
            comm: comm.clone(),
            base: TAG_BASE + seq as i32 * SUBS,
            me: comm.rank(),
            n: comm.size(),
        }
    }

    fn tag(&self, sub: i32) -> i32 {
        self.base + sub.rem_euclid(SUBS)
    }

    /// Starts sending `data` to rank `to` with sub-tag `sub`.
    pub(crate) fn send(&self, data: Vec<u8>, to: i32, sub: i32) -> Result<Request, Error> {
        let c = &self.comm;
        c.isend_on(c.inner.coll, data, to, self.tag(sub), Mode::Standard)
    }

    /// The match of a receive from rank `from` with sub-tag `sub`.
    fn spec(&self, from: i32, sub: i32) -> Result<tm_proto::MatchSpec, Error> {
        let c = &self.comm;
        c.spec_on(
            c.inner.coll,
            crate::Source::Rank(from),
            crate::Tag::Value(self.tag(sub)),
        )?
        .ok_or_else(|| Error::InvalidRank {
            rank: from,
            size: self.n,
        })
    }

    /// Starts receiving `len` bytes from rank `from` with sub-tag `sub`.
    pub(crate) fn recv(&self, len: usize, from: i32, sub: i32) -> Result<Request, Error> {
        let c = &self.comm;
        let spec = self.spec(from, sub)?;
        c.dev()
            .start_recv_owned(spec, vec![0u8; len], &c.inner.group)
    }

    /// Starts sending the `len` bytes at `ptr` to rank `to` with sub-tag
    /// `sub`, read in place ([`crate::lent`]).
    ///
    /// # Safety
    ///
    /// `ptr` is valid for reads of `len` bytes, which stay valid and
    /// unchanged until the request completes.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn send_lent(
        &self,
        ptr: *const u8,
        len: usize,
        to: i32,
        sub: i32,
    ) -> Result<Request, Error> {
        // SAFETY: the caller's contract.
        let started = unsafe { self.send_lent_or_done(ptr, len, to, sub) }?;
        Ok(started.unwrap_or_else(|| {
            Request::completed(Status::new(
                crate::attr::ANY_SOURCE,
                crate::attr::ANY_TAG,
                len,
            ))
        }))
    }

    /// [`Coll::send_lent`] without a request for a send that completed in
    /// the call (copied out): `None` then.
    ///
    /// # Safety
    ///
    /// As [`Coll::send_lent`].
    #[allow(unsafe_code)]
    pub(crate) unsafe fn send_lent_or_done(
        &self,
        ptr: *const u8,
        len: usize,
        to: i32,
        sub: i32,
    ) -> Result<Option<Request>, Error> {
        let c = &self.comm;
        let tag = Comm::send_tag(self.tag(sub))?;
        let world = c.dest(to)?.ok_or_else(|| Error::InvalidRank {
            rank: to,
            size: self.n,
        })?;
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: the caller's contract: readable, unchanged while the
            // send is pending.
            unsafe { core::slice::from_raw_parts(ptr, len) }
        };
        // SAFETY: as above, until the request completes.
        unsafe {
            c.dev()
                .start_send_lent_or_done(world, tag, c.inner.coll, data, Mode::Standard)
        }
    }

    /// Starts receiving up to `len` bytes from rank `from` with sub-tag
    /// `sub` into the memory at `ptr`, written in place
    /// ([`crate::lent`]).
    ///
    /// # Safety
    ///
    /// `ptr` is valid for writes of `len` bytes, which nothing else reads
    /// or writes until the request completes.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn recv_lent(
        &self,
        ptr: *mut u8,
        len: usize,
        from: i32,
        sub: i32,
    ) -> Result<Request, Error> {
        let c = &self.comm;
        let spec = self.spec(from, sub)?;
        let lent = LentInto {
            addr: ptr as usize,
            len,
        };
        // SAFETY: the caller's contract.
        unsafe { c.dev().start_recv_lent(spec, lent, &c.inner.group) }
    }
}

impl Coll {
    /// Receives up to `into.len()` bytes from rank `from` with sub-tag
    /// `sub`, blocking: a message already here is taken at once, else the
    /// call watches its source's ring ([`crate::Comm::recv`]'s path). No
    /// request, and no pass over the background schedules while it
    /// waits: for callers that checked [`idle`]. Returns the count.
    pub(crate) fn recv_blocking(
        &self,
        into: &mut [u8],
        from: i32,
        sub: i32,
    ) -> Result<usize, Error> {
        let c = &self.comm;
        let spec = self.spec(from, sub)?;
        Ok(c.dev().recv_into(spec, into, &c.inner.group)?.count)
    }
}

/// Whether no nonblocking collective runs in the background (whose
/// schedule a blocking receive's wait would not advance).
pub(crate) fn idle() -> bool {
    PENDING.load(Ordering::Relaxed) == 0
}

/// A progress hook that does nothing: schedules only look at requests;
/// the device is driven by whoever polls them.
fn no_progress(_: bool) -> Result<(), Error> {
    Ok(())
}

/// Awaits `req`: its status and the buffer it hands back.
pub(crate) async fn done(mut req: Request) -> Result<(Status, Vec<u8>), Error> {
    std::future::poll_fn(move |_| match req.test(&mut no_progress) {
        Ok(Some(st)) => Poll::Ready(Ok((st, req.take_buffer().unwrap_or_default()))),
        Ok(None) => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    })
    .await
}

/// Awaits every request, in order.
pub(crate) async fn all(reqs: Vec<Request>) -> Result<Vec<Vec<u8>>, Error> {
    let mut out = Vec::with_capacity(reqs.len());
    let mut first = None;
    for r in reqs {
        match done(r).await {
            Ok((_, b)) => out.push(b),
            Err(e) => {
                first.get_or_insert(e);
                out.push(Vec::new());
            }
        }
    }
    first.map_or(Ok(out), Err)
}

/// Runs `fut` to completion, driving `comm`'s device between polls.
pub(crate) fn block_on<T>(
    comm: &Comm,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(r) = fut.as_mut().poll(&mut cx) {
            return r;
        }
        comm.dev().check(true)?;
    }
}

/// A schedule running in the background and the request it completes.
struct Task {
    sched: Sched,
    done: Option<Completer>,
}

static TASKS: Mutex<Vec<Arc<Mutex<Task>>>> = Mutex::new(Vec::new());
/// How many schedules [`TASKS`] holds: [`progress`], called on every
/// progress pass, returns at once (one relaxed load) when there are none.
static PENDING: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set while this thread polls the background schedules (a schedule's
    /// call into the device may run a progress pass: not re-entered).
    static POLLING: Cell<bool> = const { Cell::new(false) };
}

/// Polls one task; `true` once it has completed its request.
fn poll_task(t: &mut Task) -> bool {
    let mut cx = Context::from_waker(Waker::noop());
    match t.sched.as_mut().poll(&mut cx) {
        Poll::Pending => false,
        Poll::Ready(r) => {
            if let Some(done) = t.done.take() {
                match r {
                    Ok(buf) => done.complete_with_buffer(
                        Status::new(crate::attr::ANY_SOURCE, crate::attr::ANY_TAG, buf.len()),
                        buf,
                    ),
                    Err(e) => done.fail(
                        Status::new(crate::attr::ANY_SOURCE, crate::attr::ANY_TAG, 0),
                        e,
                    ),
                }
            }
            true
        }
    }
}

/// Starts `sched` in the background: the returned request completes with
/// the bytes it produces ([`Request::take_buffer`]).
pub(crate) fn spawn(sched: Sched) -> Request {
    let (req, done) = request();
    let mut t = Task {
        sched,
        done: Some(done),
    };
    // The first poll starts its first operations now.
    let finished = POLLING.with(|p| {
        let was = p.replace(true);
        let f = poll_task(&mut t);
        p.set(was);
        f
    });
    if !finished {
        let mut tasks = TASKS.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.push(Arc::new(Mutex::new(t)));
        PENDING.store(tasks.len(), Ordering::Relaxed);
    }
    req
}

/// Advances every background schedule once; returns how many completed.
/// Called from the device's progress passes.
pub(crate) fn progress() -> usize {
    if PENDING.load(Ordering::Relaxed) == 0 {
        return 0;
    }
    if POLLING.with(|p| p.replace(true)) {
        return 0;
    }
    let tasks: Vec<Arc<Mutex<Task>>> = match TASKS.try_lock() {
        Ok(t) if !t.is_empty() => t.clone(),
        _ => {
            POLLING.with(|p| p.set(false));
            return 0;
        }
    };
    let mut finished = Vec::new();
    for t in &tasks {
        if let Ok(mut g) = t.try_lock() {
            if g.done.is_some() && poll_task(&mut g) {
                finished.push(Arc::as_ptr(t));
            }
        }
    }
    if !finished.is_empty() {
        let mut all = TASKS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|t| !finished.contains(&Arc::as_ptr(t)));
        PENDING.store(all.len(), Ordering::Relaxed);
    }
    POLLING.with(|p| p.set(false));
    finished.len()
}

/// Checks that `blocks` (one per rank) lie inside a buffer of `len`
/// bytes.
pub(crate) fn check_blocks(blocks: &[(usize, usize)], n: i32, len: usize) -> Result<(), Error> {
    if blocks.len() != n as usize {
        return Err(Error::InvalidArgument {
            what: "one block per rank is needed",
        });
    }
    for &(off, l) in blocks {
        match off.checked_add(l) {
            Some(end) if end <= len => {}
            _ => {
                return Err(Error::BufferOutOfBounds {
                    lo: off as i128,
                    hi: off as i128 + l as i128,
                    len,
                })
            }
        }
    }
    Ok(())
}
