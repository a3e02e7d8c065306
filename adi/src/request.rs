//! Requests, statuses and the completion hand-off.
//!
//! A nonblocking operation is split in two halves made by [`request`]:
//!
//! - the [`Request`], owned by the upper layer (the user): `test`, `wait`,
//!   the set operations ([`waitall`], [`waitany`], [`waitsome`], [`testall`],
//!   [`testany`], [`testsome`]) and `free`;
//! - the [`Completer`], owned by the operation inside the device: whichever
//!   thread runs the progress engine calls [`Completer::complete`] (or
//!   [`Completer::fail`]) exactly once.
//!
//! # The hand-off
//!
//! The completer writes the status fields, then *publishes* completion with a
//! `Release` read-modify-write of the request's state word; a waiter that
//! observes completion with an `Acquire` load reads the status after it. The
//! status fields are atomics written and read `Relaxed`, so the code has no
//! `unsafe` and no lock on the fast path; only the optional detailed error
//! (an [`Error`] value) sits behind the request's own mutex. There is no
//! global lock: every request synchronizes through its own state.
//! `tests/loom.rs` checks this hand-off, including a negative control in
//! which a `Relaxed` publish lets the waiter read a stale status.
//!
//! A wait or test that takes the completion when the completer has already
//! let go of the slot (the usual case) owns it alone (`Arc::get_mut`): it
//! takes the buffer and the detailed error without locking, and keeps the
//! reset slot in a per-thread spare list, so a steady stream of requests
//! allocates nothing.
//!
//! # Completion in place
//!
//! The device's own waits and tests (`Comm::wait`, `test`, `waitall`,
//! `waitany`, `waitsome`, `testall`, `testany`, `testsome`) know which
//! requests the calling thread owns: they hand them to the progress hook
//! (the crate-internal `ProgressOn`). When such a wait's progress pass
//! harvests the operation of one of them, it completes that request in
//! place (`Request::finish_here`, crate-internal): the status, detailed
//! error and buffer go straight into the request, nothing is published
//! through the shared slot (no lock, no read-modify-write), and both
//! references to the untouched slot go to a spare list as a pair, so the
//! next [`request`] costs no reference-count update either. A plain
//! completion harvested under the device's core lock gives the pair to a
//! list kept under that lock (`SparePairs`, crate-internal), from which the
//! next operation started under the same lock takes it; other completions
//! in place use the thread's spare list.
//! This is not a hand-off between threads (the owner holds both halves),
//! so the loom models of the hand-off above still cover every cross-thread
//! path; a completion harvested by any other thread goes through the slot.
//!
//! # Freeing and abandoning
//!
//! Dropping a [`Request`] (or [`Request::free`]) before completion is
//! `MPI_Request_free`: the operation still completes, because the completer
//! half is independent; the shared state is released by whichever half goes
//! last, and the operation's resources (its packed buffer, its clone of the
//! [`Datatype`]) are released when the device drops the
//! operation after completing it. A [`Completer`] dropped without completing
//! completes the request with [`Error::Abandoned`] (`MPI_ERR_INTERN`), so no
//! wait can hang on a lost operation.
//!
//! # Waits do not assume the request is pending (paper §6.3)
//!
//! Another thread may complete a request between the moment a caller decides
//! to wait and the moment the wait starts. Every wait and test therefore looks
//! at the request's state *before* calling the progress hook, and calls the
//! blocking hook only while the request is observed incomplete. The
//! [`Progress`] contract requires a blocking call to return once any request
//! completes, including completions published by other threads.
//!
//! ```
//! use adi::{request, Status};
//!
//! let (mut req, completer) = request();
//! let engine = std::thread::spawn(move || completer.complete(Status::new(1, 7, 64)));
//! // A progress hook: the real engine runs in the other thread here.
//! let status = req.wait(&mut |_blocking: bool| {
//!     std::thread::yield_now();
//!     Ok(())
//! })?;
//! assert_eq!((status.source, status.tag, status.count), (1, 7, 64));
//! assert!(req.is_null());
//! engine.join().unwrap();
//! # Ok::<(), adi::Error>(())
//! ```

use crate::attr::{ANY_SOURCE, ANY_TAG};
use crate::sync::{Arc, AtomicBool, AtomicI32, AtomicUsize, Mutex, Ordering};
use crate::{Datatype, Error, ErrorClass};
use core::mem;

/// `MPI_Status`: what a completed operation reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Rank of the sender (receives), or [`ANY_SOURCE`] when undefined.
    pub source: i32,
    /// Tag of the message (receives), or [`ANY_TAG`] when undefined.
    pub tag: i32,
    /// Bytes of data received (or sent).
    pub count: usize,
    /// The operation's error class ([`ErrorClass::Success`] when it
    /// succeeded).
    pub error: ErrorClass,
    /// Whether the operation was cancelled.
    pub cancelled: bool,
}

impl Status {
    /// The empty status MPI returns for inactive requests: any source, any
    /// tag, no data, success, not cancelled.
    pub const EMPTY: Status = Status {
        source: ANY_SOURCE,
        tag: ANY_TAG,
        count: 0,
        error: ErrorClass::Success,
        cancelled: false,
    };

    /// A successful status.
    pub const fn new(source: i32, tag: i32, count: usize) -> Status {
        Status {
            source,
            tag,
            count,
            error: ErrorClass::Success,
            cancelled: false,
        }
    }

    /// The status of a successfully cancelled operation.
    pub const fn cancelled() -> Status {
        Status {
            cancelled: true,
            ..Status::EMPTY
        }
    }

    /// `MPI_Get_count`: whole elements of `datatype` received, or `None`
    /// (`MPI_UNDEFINED`) if the byte count is not a whole number of elements.
    pub fn count_of(&self, datatype: &Datatype) -> Option<usize> {
        datatype.count_of(self.count)
    }
}

/// The progress hook that waits and tests drive (the paper's
/// `MPID_DeviceCheck`).
///
/// # Contract
///
/// - `progress(false)` makes whatever progress is possible without blocking
///   and returns.
/// - `progress(true)` may block until *something happens*, but must return
///   once any request's completion state changes during the call, including
///   completions published by other threads. An engine that cannot be woken
///   by other threads must not block (§6.3: in multithreaded use, the device
///   check is non-blocking). Spurious returns are allowed; waits loop.
/// - An error is returned to the caller of the wait/test as is.
///
/// Closures `FnMut(bool) -> Result<(), Error>` implement it.
pub trait Progress {
    /// Drives communication; see the trait documentation.
    fn progress(&mut self, blocking: bool) -> Result<(), Error>;
}

impl<F: FnMut(bool) -> Result<(), Error>> Progress for F {
    fn progress(&mut self, blocking: bool) -> Result<(), Error> {
        self(blocking)
    }
}

/// A progress hook for requests completed entirely by other threads: it only
/// yields the processor.
#[derive(Debug, Clone, Copy, Default)]
pub struct YieldProgress;

impl Progress for YieldProgress {
    fn progress(&mut self, _blocking: bool) -> Result<(), Error> {
        crate::sync::yield_now();
        Ok(())
    }
}

/// The progress hook as the waits and tests below drive it: with the
/// requests they wait on, which the device's hook completes in place when
/// its pass harvests them (`Request::finish_here`). Crate-internal; a plain
/// [`Progress`] hook ignores the requests ([`Plain`]).
pub(crate) trait ProgressOn {
    /// [`Progress::progress`], told which requests the caller waits on.
    fn progress_on(&mut self, reqs: &mut [Request], blocking: bool) -> Result<(), Error>;
}

/// A [`Progress`] hook as a [`ProgressOn`] one.
struct Plain<'a, P>(&'a mut P);

impl<P: Progress> ProgressOn for Plain<'_, P> {
    fn progress_on(&mut self, _reqs: &mut [Request], blocking: bool) -> Result<(), Error> {
        self.0.progress(blocking)
    }
}

const COMPLETE: usize = 1;
const FREED: usize = 2;
/// Published with `COMPLETE` when a detailed error waits in `Slot::detail`.
const DETAIL: usize = 4;
/// Published with `COMPLETE` when a buffer waits in `Slot::data`.
const DATA: usize = 8;

/// The state shared by a request's two halves.
#[derive(Debug)]
struct Slot {
    state: AtomicUsize,
    source: AtomicI32,
    tag: AtomicI32,
    count: AtomicUsize,
    error: AtomicI32,
    cancelled: AtomicBool,
    /// The detailed error of a failed operation, if the completer gave one.
    detail: Mutex<Option<Error>>,
    /// The buffer the operation owned (an `isend`/`irecv` of a `Vec`),
    /// handed back with the completion.
    data: Mutex<Option<Vec<u8>>>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: AtomicUsize::new(0),
            source: AtomicI32::new(ANY_SOURCE),
            tag: AtomicI32::new(ANY_TAG),
            count: AtomicUsize::new(0),
            error: AtomicI32::new(ErrorClass::Success.code()),
            cancelled: AtomicBool::new(false),
            detail: Mutex::new(None),
            data: Mutex::new(None),
        }
    }

    fn set_data(&self, data: Vec<u8>) {
        let mut guard = match self.data.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *guard = Some(data);
    }

    fn take_data(&self) -> Option<Vec<u8>> {
        let mut guard = match self.data.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.take()
    }

    fn set_detail(&self, detail: Option<Error>) {
        let mut guard = match self.detail.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        *guard = detail;
    }

    fn take_detail(&self) -> Option<Error> {
        let mut guard = match self.detail.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        guard.take()
    }

    /// Writes the status, then publishes completion with `publish`
    /// (`Release` except in the loom negative control).
    fn publish(&self, status: Status, detail: Option<Error>, has_data: bool, publish: Ordering) {
        let mut flags = COMPLETE;
        if detail.is_some() {
            self.set_detail(detail);
            flags |= DETAIL;
        }
        if has_data {
            flags |= DATA;
        }
        self.source.store(status.source, Ordering::Relaxed);
        self.tag.store(status.tag, Ordering::Relaxed);
        self.count.store(status.count, Ordering::Relaxed);
        self.error.store(status.error.code(), Ordering::Relaxed);
        self.cancelled.store(status.cancelled, Ordering::Relaxed);
        // The flags say which of the mutex-guarded fields a reader must
        // take, so that completions without them cost no lock.
        let before = self.state.fetch_or(flags, publish);
        if before & FREED != 0 && !status.error.is_success() {
            // MPI: the error of a freed request has nowhere to go.
            tracing::debug!(error = %status.error, "freed request completed with an error");
        }
    }

    fn is_complete(&self) -> bool {
        self.state.load(Ordering::Acquire) & COMPLETE != 0
    }

    /// Reads the status; only after [`Slot::is_complete`] returned `true`.
    fn read_status(&self) -> Status {
        let code = self.error.load(Ordering::Relaxed);
        Status {
            source: self.source.load(Ordering::Relaxed),
            tag: self.tag.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
            error: ErrorClass::from_code(code).unwrap_or(ErrorClass::Intern),
            cancelled: self.cancelled.load(Ordering::Relaxed),
        }
    }
}

/// Spare slots of this thread: a request's slot goes back here when the
/// request hands over its completion and the completer is gone (the
/// request holds the only reference), so that a steady stream of requests
/// allocates nothing. A completion delivered in place
/// ([`Request::finish_here`]) gives back both halves' references at once:
/// such a *pair* makes the next [`request`] without touching the reference
/// count. Not under loom (whose objects live in one execution).
#[cfg(not(tmx_adi_loom))]
mod spare {
    use super::Slot;
    use std::cell::RefCell;
    use std::sync::Arc;

    /// Slots kept per thread in each list (a window of this many requests
    /// in flight allocates once).
    const KEEP: usize = 256;

    struct Spare {
        /// Two references to one pristine slot, and nobody else's.
        pairs: Vec<(Arc<Slot>, Arc<Slot>)>,
        /// The only reference to a pristine slot.
        singles: Vec<Arc<Slot>>,
    }

    thread_local! {
        static FREE: RefCell<Spare> = const {
            RefCell::new(Spare {
                pairs: Vec::new(),
                singles: Vec::new(),
            })
        };
    }

    /// A fresh slot as the two references of a request and its completer:
    /// a spare pair (no reference-count traffic), else a spare single,
    /// else a new slot.
    #[inline(always)]
    pub(super) fn take_pair() -> (Arc<Slot>, Arc<Slot>) {
        let spare = FREE
            .try_with(|f| {
                let mut f = f.try_borrow_mut().ok()?;
                if let Some(p) = f.pairs.pop() {
                    return Some(p);
                }
                f.singles.pop().map(|s| (Arc::clone(&s), s))
            })
            .ok()
            .flatten();
        spare.unwrap_or_else(|| {
            let s = Arc::new(Slot::new());
            (Arc::clone(&s), s)
        })
    }

    /// Keeps `slot`, already reset and unshared, for a later request.
    pub(super) fn give(slot: Arc<Slot>) {
        let _ = FREE.try_with(|f| {
            if let Ok(mut f) = f.try_borrow_mut() {
                if f.singles.len() < KEEP {
                    f.singles.push(slot);
                }
            }
        });
    }

    /// Keeps the two references of a pristine slot that nobody else
    /// references (a request and its completer, both given up here).
    #[inline]
    pub(super) fn give_pair(a: Arc<Slot>, b: Arc<Slot>) {
        let _ = FREE.try_with(|f| {
            if let Ok(mut f) = f.try_borrow_mut() {
                if f.pairs.len() < KEEP {
                    f.pairs.push((a, b));
                }
            }
        });
    }
}

#[cfg(tmx_adi_loom)]
mod spare {
    use super::Slot;
    use crate::sync::Arc;

    #[inline(always)]
    pub(super) fn take_pair() -> (Arc<Slot>, Arc<Slot>) {
        let s = Arc::new(Slot::new());
        (Arc::clone(&s), s)
    }

    pub(super) fn give(_slot: Arc<Slot>) {}

    pub(super) fn give_pair(_a: Arc<Slot>, _b: Arc<Slot>) {}
}

/// Takes the detailed error and the buffer a completed slot holds (as its
/// published `state` says) and releases the request's reference. When the
/// completer has already dropped its reference, the fields are taken
/// without locking and the slot is reset and kept for reuse.
fn release(mut slot: Arc<Slot>, state: usize) -> (Option<Error>, Option<Vec<u8>>) {
    if let Some(s) = Arc::get_mut(&mut slot) {
        let detail = if state & DETAIL != 0 {
            s.detail.get_mut().unwrap_or_else(|p| p.into_inner()).take()
        } else {
            None
        };
        let data = if state & DATA != 0 {
            s.data.get_mut().unwrap_or_else(|p| p.into_inner()).take()
        } else {
            None
        };
        *s = Slot::new();
        spare::give(slot);
        return (detail, data);
    }
    let detail = if state & DETAIL != 0 {
        slot.take_detail()
    } else {
        None
    };
    let data = if state & DATA != 0 {
        slot.take_data()
    } else {
        None
    };
    (detail, data)
}

/// Completes, through its slot, the request of a completer handed to
/// another request's `finish_here` (not the usual case).
#[cold]
#[inline(never)]
fn finish_elsewhere(completer: Completer, ready: Ready, buffer: Option<Vec<u8>>) {
    completer.finish(Outcome {
        status: ready.status,
        error: ready.detail.map(|d| *d),
        buffer,
    });
}

/// Creates a pending request: the [`Request`] for the upper layer and the
/// [`Completer`] for the operation.
#[inline]
pub fn request() -> (Request, Completer) {
    request_for(None)
}

/// [`request`] for device operation `op` (which `MPI_Cancel` of the
/// request cancels).
#[inline]
pub(crate) fn request_for(op: Option<u64>) -> (Request, Completer) {
    request_of(spare::take_pair(), op)
}

/// A slot pair from the thread's spare list or a new one (out of line: the
/// device's own spares usually have one).
#[inline(never)]
fn fresh_pair() -> (Arc<Slot>, Arc<Slot>) {
    spare::take_pair()
}

/// Makes `out` a pending request for device operation `op` in place (what
/// it held before is dropped, as by an assignment), with the slot from
/// `spares` (a list the caller holds under its own lock) if it has one,
/// and returns its completer.
///
/// In place and inlined: a request and completer built and returned
/// through memory were written field by field and read back in wide
/// loads, which the store buffer cannot forward (the load then waits for
/// every older instruction to retire, cache misses included).
#[inline(always)]
pub(crate) fn request_into(
    spares: &mut SparePairs,
    op: Option<u64>,
    out: &mut Request,
) -> Completer {
    let (mine, theirs) = match spares.0.pop() {
        Some(pair) => pair,
        None => fresh_pair(),
    };
    out.free_if_active();
    out.state = State::Shared { slot: mine, op };
    out.buffer = None;
    Completer { slot: Some(theirs) }
}

#[inline(always)]
fn request_of((mine, theirs): (Arc<Slot>, Arc<Slot>), op: Option<u64>) -> (Request, Completer) {
    (
        Request {
            state: State::Shared { slot: mine, op },
            buffer: None,
        },
        Completer { slot: Some(theirs) },
    )
}

/// Spare slots as pairs of references (see the thread's spare list) kept
/// by the device inside the structure its core lock guards: the progress
/// pass that completes a request in place under that lock gives the pair
/// here, and the next operation started under the same lock that stays
/// pending takes it back (a `Vec` pop and push instead of a thread-local
/// access each).
#[derive(Debug, Default)]
pub(crate) struct SparePairs(Vec<(Arc<Slot>, Arc<Slot>)>);

/// Pairs kept in a [`SparePairs`].
const KEEP_PAIRS: usize = 256;

/// A completion the device computed: the status, the detailed error of a
/// failure (its class goes into the status), and the buffer handed back.
/// Delivered through the [`Completer`] ([`Completer::finish`]) or, by the
/// thread that owns the request, in place ([`Request::finish_here`]).
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) status: Status,
    pub(crate) error: Option<Error>,
    pub(crate) buffer: Option<Vec<u8>>,
}

/// The completion a request holds itself (born complete, or delivered in
/// place): no shared slot. Its buffer waits in `Request::buffer`, hidden
/// until a wait or test takes the completion.
#[derive(Debug)]
struct Ready {
    status: Status,
    /// The detailed error of a failed operation (its class is in
    /// `status.error`).
    detail: Option<Box<Error>>,
}

impl Ready {
    /// The ready completion of `status` and `error` (whose class goes into
    /// the status).
    fn of(mut status: Status, error: Option<Error>) -> Ready {
        if let Some(e) = &error {
            status.error = e.class();
        }
        Ready {
            status,
            detail: error.map(Box::new),
        }
    }
}

/// The result a single-request wait or test returns for a completion.
fn result_of(status: Status, detail: Option<Error>) -> Result<Status, Error> {
    if status.error.is_success() {
        Ok(status)
    } else {
        Err(detail.unwrap_or(Error::Failed(status.error)))
    }
}

/// The upper layer's handle of a nonblocking operation (`MPI_Request`).
///
/// A request is *active* until a wait or a successful test returns its
/// status; it is then *null* (`MPI_REQUEST_NULL`), and waits and tests on it
/// return [`Status::EMPTY`] at once. Dropping an active request is
/// `MPI_Request_free`.
#[derive(Debug, Default)]
pub struct Request {
    state: State,
    /// The buffer handed back by a completed operation that owned one
    /// (while `state` holds a [`State::Ready`] completion not yet taken,
    /// its buffer, not yet visible).
    buffer: Option<Vec<u8>>,
}

/// Where a request's completion is: one of three exclusive states, so that
/// the request stays small (it is moved by value through `Vec`s of
/// requests and results) and a null or born-complete one carries no
/// `Option` of each of the others.
#[derive(Debug, Default)]
enum State {
    /// `MPI_REQUEST_NULL`: never started, or its completion taken.
    #[default]
    Null,
    /// Pending (or completed by another thread) on a shared slot; `op` is
    /// the device operation behind it (for cancel), if any.
    Shared { slot: Arc<Slot>, op: Option<u64> },
    /// Born complete (no slot, no allocation) or completed in place: its
    /// status and detailed error, handed over by the first wait or test.
    Ready(Ready),
}

impl Request {
    /// `MPI_REQUEST_NULL`.
    pub const fn null() -> Request {
        Request {
            state: State::Null,
            buffer: None,
        }
    }

    /// A request born complete with `status` and the buffer a wait or
    /// test hands back ([`Request::take_buffer`]): no shared slot is
    /// allocated (operations that finish inside their call, such as reads
    /// on the same-node RMA path).
    #[inline]
    pub fn ready_with_buffer(status: Status, buffer: Vec<u8>) -> Request {
        Request {
            state: State::Ready(Ready {
                status,
                detail: None,
            }),
            buffer: Some(buffer),
        }
    }

    /// A request born complete with `status` and no buffer to hand back.
    #[inline]
    pub(crate) fn ready(status: Status) -> Request {
        Request {
            state: State::Ready(Ready {
                status,
                detail: None,
            }),
            buffer: None,
        }
    }

    /// Makes this request [`ready_with_buffer`](Self::ready_with_buffer)
    /// in place (what it held before is dropped, as by an assignment):
    /// each field is stored where it goes, where building the request
    /// aside and assigning it copied it through the stack.
    #[inline(always)]
    pub(crate) fn set_ready_with_buffer(&mut self, status: Status, buffer: Vec<u8>) {
        self.free_if_active();
        let ready = Ready {
            status,
            detail: None,
        };
        // The usual previous state, a null request (a window's slot
        // after its wait), has nothing to drop: replaced and forgotten,
        // without the call to the state's drop glue that an assignment
        // makes (its return address and saved registers were stores on
        // the send path).
        if matches!(self.state, State::Null) {
            mem::forget(mem::replace(&mut self.state, State::Ready(ready)));
        } else {
            self.state = State::Ready(ready);
        }
        self.buffer = Some(buffer);
    }

    /// Before a field-by-field overwrite: an active request is dropped as a
    /// whole first (`MPI_Request_free`: its slot marked freed), which
    /// assigning its fields alone would skip.
    #[inline(always)]
    fn free_if_active(&mut self) {
        if matches!(self.state, State::Shared { .. }) {
            *self = Request::null();
        }
    }

    /// A request that is already complete with `status` (for operations that
    /// finish at once, such as those on `MPI_PROC_NULL`): no shared slot.
    pub fn completed(status: Status) -> Request {
        Request {
            state: State::Ready(Ready {
                status,
                detail: None,
            }),
            buffer: None,
        }
    }

    /// The status of an operation that succeeded and whose request holds
    /// its completion itself (one complete when started, such as a small
    /// send); the request becomes null, as after a successful test, and
    /// its buffer, if any, can be taken. `None` otherwise (null, pending,
    /// failed, or completed through the device: [`Comm::test`] takes
    /// those). Makes no progress: the completing calls' fast path.
    ///
    /// [`Comm::test`]: crate::Comm::test
    #[inline]
    pub fn take_if_done(&mut self) -> Option<Status> {
        if let State::Ready(Ready {
            status,
            detail: None,
        }) = self.state
        {
            if status.error.is_success() {
                self.state = State::Null;
                return Some(status);
            }
        }
        None
    }

    /// Whether this is `MPI_REQUEST_NULL` (never started, or already
    /// completed by a wait or test).
    pub fn is_null(&self) -> bool {
        matches!(self.state, State::Null)
    }

    /// The paper's `is_complete` field: `true` once the operation has
    /// completed (without consuming the request). `false` for a null request.
    pub fn is_complete(&self) -> bool {
        match &self.state {
            State::Null => false,
            State::Shared { slot, .. } => slot.is_complete(),
            State::Ready(_) => true,
        }
    }

    /// `MPI_Request_get_status`: the status if complete, without consuming
    /// the request. A null request gives [`Status::EMPTY`].
    pub fn get_status(&self) -> Option<Status> {
        match &self.state {
            State::Null => Some(Status::EMPTY),
            State::Ready(r) => Some(r.status),
            State::Shared { slot, .. } if slot.is_complete() => Some(slot.read_status()),
            State::Shared { .. } => None,
        }
    }

    /// The shared slot of a pending request.
    #[cfg(test)]
    fn slot(&self) -> Option<&Arc<Slot>> {
        match &self.state {
            State::Shared { slot, .. } => Some(slot),
            _ => None,
        }
    }

    /// If the shared slot is complete, takes the completion out of it (the
    /// request becomes null): its status (read after the `Acquire` load
    /// that saw it complete), detailed error and buffer. `None` (request
    /// untouched) if not a completed shared request.
    #[inline]
    fn take_shared(&mut self) -> Option<(Status, Option<Error>)> {
        let State::Shared { slot, .. } = &self.state else {
            return None;
        };
        let state = slot.state.load(Ordering::Acquire);
        if state & COMPLETE == 0 {
            return None;
        }
        let status = slot.read_status();
        let State::Shared { slot, .. } = mem::take(&mut self.state) else {
            return None;
        };
        let (detail, data) = release(slot, state);
        if data.is_some() {
            self.buffer = data;
        }
        Some((status, detail))
    }

    /// If complete, consumes the completion (the request becomes null).
    fn try_take(&mut self) -> Option<Result<Status, Error>> {
        if let State::Ready(_) = self.state {
            if let State::Ready(r) = mem::take(&mut self.state) {
                return Some(result_of(r.status, r.detail.map(|d| *d)));
            }
        }
        let (status, detail) = self.take_shared()?;
        Some(result_of(status, detail))
    }

    /// Takes the completion as a status (class in [`Status::error`]), for the
    /// set operations. `None` if not complete; `Some(EMPTY)` if null.
    #[inline]
    pub(crate) fn take_status(&mut self) -> Option<Status> {
        if let Some(status) = self.take_plain_ready() {
            return Some(status);
        }
        self.take_status_other()
    }

    /// The common case of [`take_status`](Self::take_status) in a waitall:
    /// a plain (successful, or failed without a detailed error) completion
    /// the request holds itself (born complete, or completed in place).
    #[inline(always)]
    fn take_plain_ready(&mut self) -> Option<Status> {
        if let State::Ready(Ready {
            status,
            detail: None,
        }) = self.state
        {
            self.state = State::Null;
            return Some(status);
        }
        None
    }

    /// [`take_status`](Self::take_status) of a request that is null,
    /// shared, or holds a failure.
    #[inline(never)]
    fn take_status_other(&mut self) -> Option<Status> {
        match &mut self.state {
            State::Null => return Some(Status::EMPTY),
            State::Ready(r) => {
                let status = r.status;
                if let Some(detail) = r.detail.take() {
                    tracing::debug!(%detail, "request of a set failed");
                }
                // Nothing left to drop: a plain store of the tag.
                self.state = State::Null;
                return Some(status);
            }
            State::Shared { .. } => {}
        }
        let (status, detail) = self.take_shared()?;
        if let Some(detail) = detail {
            tracing::debug!(%detail, "request of a set failed");
        }
        Some(status)
    }

    /// `MPI_Test`: if the operation is complete (checked first, then again
    /// after one non-blocking progress call), returns its status and makes
    /// the request null; otherwise `Ok(None)`. A failed operation returns its
    /// error (the request becomes null all the same).
    pub fn test(&mut self, progress: &mut impl Progress) -> Result<Option<Status>, Error> {
        self.test_on(&mut Plain(progress))
    }

    /// [`test`](Self::test) with a [`ProgressOn`] hook.
    pub(crate) fn test_on(
        &mut self,
        progress: &mut impl ProgressOn,
    ) -> Result<Option<Status>, Error> {
        if self.is_null() {
            return Ok(Some(Status::EMPTY));
        }
        if let Some(r) = self.try_take() {
            return r.map(Some);
        }
        progress.progress_on(core::slice::from_mut(self), false)?;
        self.try_take().transpose()
    }

    /// `MPI_Wait`: drives `progress` until the operation completes, returns
    /// its status and makes the request null. Never calls the hook once the
    /// request is seen complete.
    pub fn wait(&mut self, progress: &mut impl Progress) -> Result<Status, Error> {
        self.wait_on(&mut Plain(progress))
    }

    /// [`wait`](Self::wait) with a [`ProgressOn`] hook.
    pub(crate) fn wait_on(&mut self, progress: &mut impl ProgressOn) -> Result<Status, Error> {
        if self.is_null() {
            return Ok(Status::EMPTY);
        }
        loop {
            if let Some(r) = self.try_take() {
                return r;
            }
            progress.progress_on(core::slice::from_mut(self), true)?;
        }
    }

    /// `MPI_Request_free`: gives up the handle; the operation still completes
    /// and its resources are released when it does. Same as dropping.
    pub fn free(self) {}

    /// The buffer an operation that owned one hands back once the request
    /// has completed (after a wait or successful test): the `Vec` given to a
    /// nonblocking send, or the filled `Vec` of a nonblocking receive (also
    /// after a truncation error: it then holds the bytes that fit). `None`
    /// before completion, for operations on borrowed buffers, and once taken.
    #[inline]
    pub fn take_buffer(&mut self) -> Option<Vec<u8>> {
        if let State::Ready(_) = self.state {
            return None;
        }
        self.buffer.take()
    }

    /// The buffer of a request born complete, taken without handing over
    /// its completion (a later wait or test still sees the status): for the
    /// device to recycle a buffer the user will not get back.
    pub(crate) fn take_ready_buffer(&mut self) -> Option<Vec<u8>> {
        match self.state {
            State::Ready(_) => self.buffer.take(),
            _ => None,
        }
    }

    /// The buffer handed back by the completed operation, without taking it.
    pub fn buffer(&self) -> Option<&[u8]> {
        if let State::Ready(_) = self.state {
            return None;
        }
        self.buffer.as_deref()
    }

    /// Completes this request in place with `outcome`, given `completer`,
    /// the device's half of *this* request (which the caller, the thread
    /// that owns the request, took from the device): nothing is published
    /// through the shared slot, and both references to it go back to this
    /// thread's spare list as a pair. A `completer` of another request is
    /// completed through its slot as usual instead.
    pub(crate) fn finish_here(&mut self, completer: Completer, outcome: Outcome) {
        let ready = Ready::of(outcome.status, outcome.error);
        self.finish_ready_here(completer, ready, outcome.buffer, None);
    }

    /// [`finish_here`](Self::finish_here) for a successful operation:
    /// the status and the buffer go straight into the request (no
    /// [`Outcome`] to build and move, no error to look at).
    /// The slot's two references go to `spares` (held by the caller under
    /// its lock), or this thread's spare list if `spares` is full.
    #[inline]
    pub(crate) fn finish_ok_here(
        &mut self,
        completer: Completer,
        status: Status,
        buffer: Option<Vec<u8>>,
        spares: &mut SparePairs,
    ) {
        let ready = Ready {
            status,
            detail: None,
        };
        self.finish_ready_here(completer, ready, buffer, Some(spares));
    }

    /// [`finish_here`](Self::finish_here) of a completion as the request
    /// keeps it.
    #[inline(always)]
    fn finish_ready_here(
        &mut self,
        mut completer: Completer,
        ready: Ready,
        buffer: Option<Vec<u8>>,
        spares: Option<&mut SparePairs>,
    ) {
        let theirs = match completer.slot.take() {
            Some(theirs) if matches!(&self.state, State::Shared { slot, .. } if Arc::ptr_eq(slot, &theirs)) => {
                theirs
            }
            other => {
                completer.slot = other;
                return finish_elsewhere(completer, ready, buffer);
            }
        };
        if let State::Shared { slot: mine, .. } = mem::replace(&mut self.state, State::Ready(ready))
        {
            // Both references of the slot are in hand and it was never
            // published: it is pristine and nobody else can reach it.
            match spares {
                Some(spares) if spares.0.len() < KEEP_PAIRS => spares.0.push((mine, theirs)),
                _ => spare::give_pair(mine, theirs),
            }
        }
        self.buffer = buffer;
    }

    /// A request born complete with `outcome` (no shared slot).
    pub(crate) fn from_outcome(outcome: Outcome) -> Request {
        Request {
            state: State::Ready(Ready::of(outcome.status, outcome.error)),
            buffer: outcome.buffer,
        }
    }

    /// The device operation behind an active request.
    pub(crate) fn op(&self) -> Option<u64> {
        match &self.state {
            State::Shared { op, .. } => *op,
            _ => None,
        }
    }
}

impl Drop for Request {
    #[inline]
    fn drop(&mut self) {
        if let State::Shared { slot, .. } = &self.state {
            slot.state.fetch_or(FREED, Ordering::AcqRel);
        }
    }
}

/// The device's half of a request: completes it exactly once.
///
/// Sendable to any thread. Dropping it without completing completes the
/// request with [`Error::Abandoned`].
#[derive(Debug)]
pub struct Completer {
    slot: Option<Arc<Slot>>,
}

impl Completer {
    /// Whether this completer completes `req` (they share its slot).
    pub(crate) fn completes(&self, req: &Request) -> bool {
        match (&self.slot, &req.state) {
            (Some(a), State::Shared { slot: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Completes the request with a device-computed [`Outcome`]
    /// ([`complete`](Self::complete), [`fail`](Self::fail), or their
    /// `_with_buffer` forms).
    pub(crate) fn finish(self, outcome: Outcome) {
        match (outcome.error, outcome.buffer) {
            (None, None) => self.complete(outcome.status),
            (None, Some(b)) => self.complete_with_buffer(outcome.status, b),
            (Some(e), None) => self.fail(outcome.status, e),
            (Some(e), Some(b)) => self.fail_with_buffer(outcome.status, e, b),
        }
    }

    /// Completes the request with `status` (whose `error` should be
    /// [`ErrorClass::Success`]; use [`fail`](Self::fail) for errors).
    pub fn complete(mut self, status: Status) {
        if let Some(slot) = self.slot.take() {
            slot.publish(status, None, false, Ordering::Release);
        }
    }

    /// Completes the request with an error: `status.error` is set to
    /// `error.class()`, and a single-request wait or test returns `error`
    /// itself. `status` keeps what is known (for a truncated receive: source,
    /// tag and the bytes delivered).
    pub fn fail(mut self, status: Status, error: Error) {
        if let Some(slot) = self.slot.take() {
            let status = Status {
                error: error.class(),
                ..status
            };
            slot.publish(status, Some(error), false, Ordering::Release);
        }
    }

    /// Completes the request with `status` and hands `buffer` back to it
    /// ([`Request::take_buffer`]).
    pub fn complete_with_buffer(mut self, status: Status, buffer: Vec<u8>) {
        if let Some(slot) = self.slot.take() {
            slot.set_data(buffer);
            slot.publish(status, None, true, Ordering::Release);
        }
    }

    /// Like [`fail`](Self::fail), and hands `buffer` back to the request.
    pub fn fail_with_buffer(mut self, status: Status, error: Error, buffer: Vec<u8>) {
        if let Some(slot) = self.slot.take() {
            slot.set_data(buffer);
            let status = Status {
                error: error.class(),
                ..status
            };
            slot.publish(status, Some(error), true, Ordering::Release);
        }
    }

    /// Whether the upper layer has freed (dropped) its request. The
    /// operation must complete all the same; this only lets the device skip
    /// work whose only consumer was the status.
    pub fn is_freed(&self) -> bool {
        self.slot
            .as_ref()
            .is_some_and(|s| s.state.load(Ordering::Acquire) & FREED != 0)
    }

    /// The loom negative control: publishes with `Relaxed`, which is too
    /// weak. Exists only under `--cfg tmx_adi_loom`.
    #[cfg(tmx_adi_loom)]
    #[doc(hidden)]
    pub fn complete_relaxed_for_loom(mut self, status: Status) {
        if let Some(slot) = self.slot.take() {
            slot.publish(status, None, false, Ordering::Relaxed);
        }
    }
}

impl Drop for Completer {
    /// Inline: a completer that did its job (the usual drop) has no slot
    /// left, and costs a test.
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            abandon(slot);
        }
    }
}

/// Completes the request of a completer dropped without completing.
#[cold]
#[inline(never)]
fn abandon(slot: Arc<Slot>) {
    tracing::debug!("operation dropped before completion; request completed as abandoned");
    let status = Status {
        error: ErrorClass::Intern,
        ..Status::EMPTY
    };
    slot.publish(status, Some(Error::Abandoned), false, Ordering::Release);
}

/// What [`testany`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnyOutcome {
    /// Request `index` completed with `status` (and is now null).
    Completed {
        /// Its position in the slice.
        index: usize,
        /// Its status.
        status: Status,
    },
    /// No request is active (`MPI_UNDEFINED` index, flag true).
    Inactive,
    /// Some requests are active, none has completed.
    Pending,
}

fn first_completed(reqs: &mut [Request]) -> Option<Result<(usize, Status), Error>> {
    for (index, r) in reqs.iter_mut().enumerate() {
        if let Some(res) = r.try_take() {
            return Some(match res {
                Ok(status) => Ok((index, status)),
                Err(e) => Err(Error::AtIndex {
                    index,
                    source: Box::new(e),
                }),
            });
        }
    }
    None
}

fn all_null(reqs: &[Request]) -> bool {
    reqs.iter().all(Request::is_null)
}

/// `MPI_Waitany`: waits until one active request completes and returns its
/// index and status (the request becomes null), or `Ok(None)` if none is
/// active. A failed request gives [`Error::AtIndex`].
pub fn waitany(
    reqs: &mut [Request],
    progress: &mut impl Progress,
) -> Result<Option<(usize, Status)>, Error> {
    waitany_on(reqs, &mut Plain(progress))
}

/// [`waitany`] with a [`ProgressOn`] hook.
pub(crate) fn waitany_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<Option<(usize, Status)>, Error> {
    loop {
        if all_null(reqs) {
            return Ok(None);
        }
        if let Some(r) = first_completed(reqs) {
            return r.map(Some);
        }
        progress.progress_on(reqs, true)?;
    }
}

/// `MPI_Testany`: like [`waitany`] with one non-blocking progress call.
pub fn testany(reqs: &mut [Request], progress: &mut impl Progress) -> Result<AnyOutcome, Error> {
    testany_on(reqs, &mut Plain(progress))
}

/// [`testany`] with a [`ProgressOn`] hook.
pub(crate) fn testany_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<AnyOutcome, Error> {
    if all_null(reqs) {
        return Ok(AnyOutcome::Inactive);
    }
    for round in 0..2 {
        if let Some(r) = first_completed(reqs) {
            return r.map(|(index, status)| AnyOutcome::Completed { index, status });
        }
        if round == 0 {
            progress.progress_on(reqs, false)?;
        }
    }
    Ok(AnyOutcome::Pending)
}

/// The result of a waitall whose statuses are `out`, in order:
/// [`Error::InStatus`] if any failed.
pub(crate) fn all_statuses(out: Vec<Status>) -> Result<Vec<Status>, Error> {
    if out.iter().all(|s| s.error.is_success()) {
        return Ok(out);
    }
    in_status(out.into_iter().enumerate().collect()).map(strip_index)
}

fn in_status(statuses: Vec<(usize, Status)>) -> Result<Vec<(usize, Status)>, Error> {
    let failed = statuses
        .iter()
        .filter(|(_, s)| !s.error.is_success())
        .count();
    if failed == 0 {
        Ok(statuses)
    } else {
        Err(Error::InStatus { failed, statuses })
    }
}

fn strip_index(v: Vec<(usize, Status)>) -> Vec<Status> {
    v.into_iter().map(|(_, s)| s).collect()
}

/// `MPI_Waitall`: waits until every request completes and returns their
/// statuses in order (null requests give [`Status::EMPTY`]); all requests
/// become null. If any failed, [`Error::InStatus`] carries every status,
/// each with its own class.
///
/// A progress error ends the wait early and is returned; the requests whose
/// statuses were already taken (those before the first one still
/// incomplete, in order) are null and their statuses are lost (MPI reports
/// them as `MPI_ERR_PENDING`/done in that case); later ones stay active.
pub fn waitall(reqs: &mut [Request], progress: &mut impl Progress) -> Result<Vec<Status>, Error> {
    waitall_on(reqs, &mut Plain(progress))
}

/// [`waitall`] with a [`ProgressOn`] hook.
pub(crate) fn waitall_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<Vec<Status>, Error> {
    let mut out: Vec<Status> = Vec::with_capacity(reqs.len());
    // Whether every status so far is a success (checked as they are taken,
    // not by another pass over them).
    let mut ok = true;
    // Every request must complete, so each pass takes the statuses from the
    // first request not yet taken up to the first one still incomplete and
    // stops there: requests mostly complete in order, and rescanning the
    // whole list after every progress pass made a window of n requests
    // cost O(n^2). Requests past the stop are taken on a later pass.
    while let Some(r) = reqs.get_mut(out.len()) {
        // The common case first, on its own path (not merged with the
        // others through an `Option<Status>`).
        if let Some(status) = r.take_plain_ready() {
            ok &= status.error.is_success();
            out.push(status);
            continue;
        }
        match r.take_status_other() {
            Some(status) => {
                ok &= status.error.is_success();
                out.push(status);
            }
            None => progress.progress_on(reqs, true)?,
        }
    }
    if ok {
        return Ok(out);
    }
    all_statuses(out)
}

/// `MPI_Testall`: if every request is complete (checked, then again after one
/// non-blocking progress call), completes them all as [`waitall`] does;
/// otherwise returns `Ok(None)` and leaves every request untouched.
pub fn testall(
    reqs: &mut [Request],
    progress: &mut impl Progress,
) -> Result<Option<Vec<Status>>, Error> {
    testall_on(reqs, &mut Plain(progress))
}

/// [`testall`] with a [`ProgressOn`] hook.
pub(crate) fn testall_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<Option<Vec<Status>>, Error> {
    let done = |reqs: &[Request]| reqs.iter().all(|r| r.is_null() || r.is_complete());
    if !done(reqs) {
        progress.progress_on(reqs, false)?;
        if !done(reqs) {
            return Ok(None);
        }
    }
    let statuses = reqs
        .iter_mut()
        .enumerate()
        .map(|(i, r)| (i, r.take_status().unwrap_or(Status::EMPTY)))
        .collect();
    in_status(statuses).map(|v| Some(strip_index(v)))
}

fn take_some(reqs: &mut [Request]) -> Vec<(usize, Status)> {
    let mut v = Vec::new();
    for (i, r) in reqs.iter_mut().enumerate() {
        if r.is_complete() {
            if let Some(s) = r.take_status() {
                v.push((i, s));
            }
        }
    }
    v
}

/// `MPI_Waitsome`: waits until at least one active request completes and
/// returns `(index, status)` of every request found complete (they become
/// null), or `Ok(None)` if none is active. Failures give
/// [`Error::InStatus`].
pub fn waitsome(
    reqs: &mut [Request],
    progress: &mut impl Progress,
) -> Result<Option<Vec<(usize, Status)>>, Error> {
    waitsome_on(reqs, &mut Plain(progress))
}

/// [`waitsome`] with a [`ProgressOn`] hook.
pub(crate) fn waitsome_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<Option<Vec<(usize, Status)>>, Error> {
    loop {
        if all_null(reqs) {
            return Ok(None);
        }
        let done = take_some(reqs);
        if !done.is_empty() {
            return in_status(done).map(Some);
        }
        progress.progress_on(reqs, true)?;
    }
}

/// `MPI_Testsome`: like [`waitsome`] with one non-blocking progress call;
/// `Ok(Some(vec![]))` when active requests remain but none completed.
pub fn testsome(
    reqs: &mut [Request],
    progress: &mut impl Progress,
) -> Result<Option<Vec<(usize, Status)>>, Error> {
    testsome_on(reqs, &mut Plain(progress))
}

/// [`testsome`] with a [`ProgressOn`] hook.
pub(crate) fn testsome_on(
    reqs: &mut [Request],
    progress: &mut impl ProgressOn,
) -> Result<Option<Vec<(usize, Status)>>, Error> {
    if all_null(reqs) {
        return Ok(None);
    }
    let mut done = take_some(reqs);
    if done.is_empty() {
        progress.progress_on(reqs, false)?;
        done = take_some(reqs);
    }
    in_status(done).map(Some)
}

#[cfg(all(test, not(tmx_adi_loom)))]
mod tests;
