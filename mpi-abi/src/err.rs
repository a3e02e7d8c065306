//! Errors: the internal error type, the error handlers, and the wrapper
//! every exported function runs its body in ([`run`]).
//!
//! A failed call raises its error on the error handler of the object it
//! concerns (a communicator, a window; others on `MPI_COMM_WORLD`, as
//! MPI-3.1 says). `MPI_ERRORS_ARE_FATAL` (every communicator's default)
//! prints the error and aborts the job; `MPI_ERRORS_RETURN` returns the
//! code; a user handler is called with the object and the code, and the
//! code is returned. Error codes are the classes themselves (a class is a
//! valid code), plus the codes a program adds with `MPI_Add_error_code`.

use crate::abi::*;
use crate::handles::{prefix, Table};
use core::ffi::{c_char, c_int, c_void};
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// An MPI error: a class (or user code) and a message for fatal handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MpiErr {
    pub(crate) code: c_int,
    pub(crate) msg: String,
}

/// The result of an internal call.
pub(crate) type R<T> = Result<T, MpiErr>;

impl From<adi::Error> for MpiErr {
    fn from(e: adi::Error) -> MpiErr {
        MpiErr {
            code: e.class().code(),
            msg: e.to_string(),
        }
    }
}

/// An error of class `code` with a message.
pub(crate) fn err(code: c_int, msg: impl Into<String>) -> MpiErr {
    MpiErr {
        code,
        msg: msg.into(),
    }
}

/// Error `code` with `msg` unless `ok` (inlined: the test is on every
/// call's path, the error is built out of line).
#[inline]
pub(crate) fn check(ok: bool, code: c_int, msg: &str) -> R<()> {
    if ok {
        Ok(())
    } else {
        Err(check_failed(code, msg))
    }
}

#[cold]
#[inline(never)]
fn check_failed(code: c_int, msg: &str) -> MpiErr {
    err(code, msg)
}

/// The object whose error handler an error is raised on.
#[derive(Debug, Clone, Copy)]
pub(crate) enum On {
    /// A communicator (an invalid one raises on `MPI_COMM_WORLD`).
    Comm(MPI_Comm),
    /// A window (an invalid one raises on `MPI_COMM_WORLD`).
    Win(MPI_Win),
    /// No object: `MPI_COMM_WORLD`.
    World,
}

/// An error handler object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handler {
    /// `MPI_ERRORS_ARE_FATAL`.
    Fatal,
    /// `MPI_ERRORS_RETURN`.
    Return,
    /// `MPI_ERRORS_ABORT` (MPI-4; MPICH defines it): aborts the job.
    Abort,
    /// A user function (`MPI_Comm_errhandler_function` and its window and
    /// file forms, which take a handle pointer and a code pointer).
    User {
        f: usize,
        /// What it was created for.
        kind: HandlerKind,
    },
}

/// The object kind a user error handler was created for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandlerKind {
    Comm,
    Win,
    File,
}

/// The user error handlers, by handle.
pub(crate) static HANDLERS: Table<Handler> = Table::new(prefix::ERRHANDLER);

/// References to each user error handler handle: one from its creation,
/// one per `MPI_*_get_errhandler` that returned it; freed at zero.
static REFS: Mutex<Vec<(MPI_Errhandler, usize)>> = Mutex::new(Vec::new());

/// Counts a new reference to handle `h` (a user handler) returned by a
/// `get_errhandler` call.
pub(crate) fn handler_ref(h: MPI_Errhandler) {
    let mut r = REFS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(e) = r.iter_mut().find(|e| e.0 == h) {
        e.1 += 1;
    }
}

/// The handler of an error handler handle.
pub(crate) fn handler(h: MPI_Errhandler) -> R<Handler> {
    match h {
        MPI_ERRORS_ARE_FATAL => Ok(Handler::Fatal),
        MPI_ERRORS_RETURN | MPIR_ERRORS_THROW_EXCEPTIONS => Ok(Handler::Return),
        MPI_ERRORS_ABORT => Ok(Handler::Abort),
        _ => HANDLERS
            .get(h)
            .map(|h| *h)
            .ok_or_else(|| err(MPI_ERR_ARG, "invalid error handler")),
    }
}

/// The signature user error handlers are called with.
type HandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int);

/// Raises `e` from `func` on the handler of `on`; returns the code.
fn raise(func: &str, on: On, e: MpiErr) -> c_int {
    let (handle, h) = match on {
        On::Comm(c) => match crate::comm::errhandler_of(c) {
            Some(h) => (c, h),
            None => (MPI_COMM_WORLD, world_handler()),
        },
        On::Win(w) => match crate::win::errhandler_of(w) {
            Some(h) => (w, h),
            None => (MPI_COMM_WORLD, world_handler()),
        },
        On::World => (MPI_COMM_WORLD, world_handler()),
    };
    match h {
        Handler::Return => e.code,
        Handler::Fatal | Handler::Abort => fatal(func, &e),
        Handler::User { f, .. } => {
            let mut obj = handle;
            let mut code = e.code;
            // SAFETY: `f` is the function pointer the program gave
            // `MPI_*_create_errhandler`, with the C signature
            // `void (MPI_Comm *, int *, ...)`; it is called with pointers
            // to two live locals, as MPI calls error handlers.
            unsafe {
                let f: HandlerFn = core::mem::transmute::<usize, HandlerFn>(f);
                f(&mut obj, &mut code);
            }
            e.code
        }
    }
}

fn world_handler() -> Handler {
    crate::comm::errhandler_of(MPI_COMM_WORLD).unwrap_or(Handler::Fatal)
}

/// `MPI_ERRORS_ARE_FATAL`: prints the error and aborts the job with the
/// error's class as the exit status (as MPICH's `MPI_Abort` of the error
/// code does: the launcher's status is the code's low byte, the class).
fn fatal(func: &str, e: &MpiErr) -> ! {
    let what = format!(
        "Fatal error in {func}: {} ({}), error stack: {}",
        class_name(class_of(e.code)),
        e.code,
        e.msg
    );
    eprintln!("tmx: {what}");
    adi::abort(class_of(e.code).unwrap_or(MPI_ERR_UNKNOWN), &what)
}

thread_local! {
    /// The object the current call's error is raised on, when the call
    /// learns it while running (a request's communicator).
    static TARGET: Cell<Option<On>> = const { Cell::new(None) };
}

/// Whether some thread has set its [`TARGET`]: until one has, a call that
/// succeeds has no target to take, and skips the thread-local access (a
/// call into the dynamic loader in a shared library). Set once, never
/// cleared; a thread reads its own store, so `Relaxed` suffices.
static TARGET_USED: AtomicBool = AtomicBool::new(false);

/// Raises the current call's error, if any, on `on` instead of the
/// object the call was started with.
pub(crate) fn raise_on(on: On) {
    TARGET_USED.store(true, Ordering::Relaxed);
    TARGET.with(|t| t.set(Some(on)));
}

/// Runs the body of MPI function `func`: its error (or a panic, as
/// `MPI_ERR_INTERN`) is raised on the handler of `on` (or of the object
/// given to [`raise_on`] while it ran).
///
/// Inlined into each function (its closure then needs no frame of its
/// own); everything but a plain success is [`ended`], out of line.
#[inline(always)]
pub(crate) fn run(func: &'static str, on: On, f: impl FnOnce() -> R<()>) -> c_int {
    // TARGET is `None` between calls: every call takes it when it ends.
    let r = catch_unwind(AssertUnwindSafe(f));
    if matches!(r, Ok(Ok(()))) && !TARGET_USED.load(Ordering::Relaxed) {
        return MPI_SUCCESS;
    }
    ended(func, on, r)
}

/// What [`run`] returns for a call that failed, panicked, or succeeded
/// after some thread set its [`TARGET`].
#[inline(never)]
fn ended(func: &'static str, on: On, r: std::thread::Result<R<()>>) -> c_int {
    let on = TARGET.with(|t| t.take()).unwrap_or(on);
    match r {
        Ok(Ok(())) => MPI_SUCCESS,
        Ok(Err(e)) => raise(func, on, e),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "panic".into());
            raise(
                func,
                on,
                err(MPI_ERR_INTERN, format!("internal error: {msg}")),
            )
        }
    }
}

// ------------------------------------------------ user classes and codes

/// Classes and codes added by the program, and their strings.
#[derive(Debug, Default)]
struct UserCodes {
    /// `classes[i]`: class `FIRST_USER_CLASS + i` exists.
    classes: usize,
    /// Code `FIRST_USER_CODE + i` belongs to class `codes[i]`.
    codes: Vec<c_int>,
    strings: Vec<(c_int, String)>,
}

/// The first class `MPI_Add_error_class` returns (above MPICH's MPIX
/// classes).
const FIRST_USER_CLASS: c_int = 128;
/// The first code `MPI_Add_error_code` returns.
const FIRST_USER_CODE: c_int = 1 << 20;

static USER_CODES: Mutex<UserCodes> = Mutex::new(UserCodes {
    classes: 0,
    codes: Vec::new(),
    strings: Vec::new(),
});

fn user_codes() -> std::sync::MutexGuard<'static, UserCodes> {
    USER_CODES.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The class of error code `code` (`None`: not a valid code).
pub(crate) fn class_of(code: c_int) -> Option<c_int> {
    if (0..=MPICH_ERR_LAST_CLASS).contains(&code) {
        return Some(code);
    }
    let u = user_codes();
    if code >= FIRST_USER_CLASS && code < FIRST_USER_CLASS + u.classes as c_int {
        return Some(code);
    }
    let i = usize::try_from(code - FIRST_USER_CODE).ok()?;
    u.codes.get(i).copied()
}

/// The largest code in use (`MPI_LASTUSEDCODE`).
pub(crate) fn last_used_code() -> c_int {
    let u = user_codes();
    if !u.codes.is_empty() {
        FIRST_USER_CODE + u.codes.len() as c_int - 1
    } else if u.classes > 0 {
        FIRST_USER_CLASS + u.classes as c_int - 1
    } else {
        MPICH_ERR_LAST_CLASS
    }
}

/// `MPI_Add_error_class`.
pub(crate) fn add_class() -> c_int {
    let mut u = user_codes();
    u.classes += 1;
    FIRST_USER_CLASS + u.classes as c_int - 1
}

/// `MPI_Add_error_code`.
pub(crate) fn add_code(class: c_int) -> R<c_int> {
    let ok = class_of(class) == Some(class);
    check(ok, MPI_ERR_ARG, "not an error class")?;
    let mut u = user_codes();
    u.codes.push(class);
    Ok(FIRST_USER_CODE + u.codes.len() as c_int - 1)
}

/// `MPI_Add_error_string`.
pub(crate) fn add_string(code: c_int, s: String) -> R<()> {
    check(
        class_of(code).is_some() && code > MPICH_ERR_LAST_CLASS,
        MPI_ERR_ARG,
        "only added classes and codes take strings",
    )?;
    check(
        s.len() < MPI_MAX_ERROR_STRING,
        MPI_ERR_ARG,
        "error string too long",
    )?;
    let mut u = user_codes();
    u.strings.retain(|(c, _)| *c != code);
    u.strings.push((code, s));
    Ok(())
}

/// The C name of a predefined class.
pub(crate) fn class_name(class: Option<c_int>) -> &'static str {
    match class.and_then(adi::ErrorClass::from_code) {
        Some(c) => c.name(),
        None => "MPI_ERR_UNKNOWN",
    }
}

/// `MPI_Error_string` of `code`.
pub(crate) fn string_of(code: c_int) -> R<String> {
    let class = class_of(code).ok_or_else(|| err(MPI_ERR_ARG, "invalid error code"))?;
    if code > MPICH_ERR_LAST_CLASS {
        let u = user_codes();
        let s = u.strings.iter().find(|(c, _)| *c == code);
        return Ok(s.map(|(_, s)| s.clone()).unwrap_or_default());
    }
    Ok(format!("{}: {}", class_name(Some(class)), describe(class)))
}

fn describe(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "no MPI error",
        1 => "invalid buffer pointer",
        2 => "invalid count argument",
        3 => "invalid datatype",
        4 => "invalid tag",
        5 => "invalid communicator",
        6 => "invalid rank",
        7 => "invalid root",
        8 => "invalid group",
        9 => "invalid reduction operation",
        10 => "invalid topology",
        11 => "invalid dimension argument",
        12 => "invalid argument",
        14 => "message truncated",
        15 => "other error",
        16 => "internal error",
        17 => "error code is in the status",
        18 => "pending request",
        19 => "invalid request",
        28..=31 => "invalid info argument",
        34 => "out of memory",
        44 => "unsupported operation",
        45 => "invalid window",
        47 => "invalid lock type",
        48 => "invalid attribute keyval",
        50 => "wrong RMA synchronization",
        _ => "error",
    }
}

// --------------------------------------------------------- the C functions

/// Writes `s` as a NUL-terminated string of at most `max - 1` bytes into
/// `out`, and its length into `len`.
///
/// # Safety
/// `out` must be writable for `max` bytes and `len` for an `int`, as MPI
/// requires of string results.
pub(crate) unsafe fn put_string(out: *mut c_char, len: *mut c_int, max: usize, s: &str) -> R<()> {
    check(!out.is_null(), MPI_ERR_ARG, "null string argument")?;
    let n = s.len().min(max - 1);
    // SAFETY: the caller's contract: `out` holds `max` bytes, `n + 1 <= max`.
    unsafe {
        core::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        *out.add(n) = 0;
        if !len.is_null() {
            *len = n as c_int;
        }
    }
    Ok(())
}

mpi_fn! {
    /// `MPI_Error_class`.
    fn MPI_Error_class / PMPI_Error_class(code: c_int, class: *mut c_int) -> c_int {
        run("MPI_Error_class", On::World, || {
            let c = class_of(code).ok_or_else(|| err(MPI_ERR_ARG, "invalid error code"))?;
            // SAFETY: MPI: `class` points to an int.
            unsafe { crate::ffi::put(class, c) }
        })
    }
}

mpi_fn! {
    /// `MPI_Error_string`.
    fn MPI_Error_string / PMPI_Error_string(code: c_int, string: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Error_string", On::World, || {
            let s = string_of(code)?;
            // SAFETY: MPI: `string` holds MPI_MAX_ERROR_STRING chars.
            unsafe { put_string(string, len, MPI_MAX_ERROR_STRING, &s) }
        })
    }
}

mpi_fn! {
    /// `MPI_Add_error_class`.
    fn MPI_Add_error_class / PMPI_Add_error_class(class: *mut c_int) -> c_int {
        run("MPI_Add_error_class", On::World, || {
            // SAFETY: MPI: `class` points to an int.
            unsafe { crate::ffi::put(class, add_class()) }
        })
    }
}

mpi_fn! {
    /// `MPI_Add_error_code`.
    fn MPI_Add_error_code / PMPI_Add_error_code(class: c_int, code: *mut c_int) -> c_int {
        run("MPI_Add_error_code", On::World, || {
            let c = add_code(class)?;
            // SAFETY: MPI: `code` points to an int.
            unsafe { crate::ffi::put(code, c) }
        })
    }
}

mpi_fn! {
    /// `MPI_Add_error_string`.
    fn MPI_Add_error_string / PMPI_Add_error_string(code: c_int, string: *const c_char) -> c_int {
        run("MPI_Add_error_string", On::World, || {
            // SAFETY: MPI: `string` is a NUL-terminated C string.
            let s = unsafe { crate::ffi::c_str(string) }?;
            add_string(code, s)
        })
    }
}

/// Creates a user error handler of `kind` from the function `f`.
fn create_handler(f: *const c_void, kind: HandlerKind) -> R<MPI_Errhandler> {
    check(!f.is_null(), MPI_ERR_ARG, "null error handler function")?;
    let h = HANDLERS
        .insert(Handler::User {
            f: f as usize,
            kind,
        })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many error handlers"))?;
    REFS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((h, 1));
    Ok(h)
}

mpi_fn! {
    /// `MPI_Comm_create_errhandler`.
    fn MPI_Comm_create_errhandler / PMPI_Comm_create_errhandler(f: *const c_void, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Comm_create_errhandler", On::World, || {
            let h = create_handler(f, HandlerKind::Comm)?;
            // SAFETY: MPI: `eh` points to an MPI_Errhandler.
            unsafe { crate::ffi::put(eh, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_create_errhandler`.
    fn MPI_Win_create_errhandler / PMPI_Win_create_errhandler(f: *const c_void, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Win_create_errhandler", On::World, || {
            let h = create_handler(f, HandlerKind::Win)?;
            // SAFETY: MPI: `eh` points to an MPI_Errhandler.
            unsafe { crate::ffi::put(eh, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_File_create_errhandler`: handlers can be made, but no file can
    /// be opened (MPI-IO is not supported).
    fn MPI_File_create_errhandler / PMPI_File_create_errhandler(f: *const c_void, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_File_create_errhandler", On::World, || {
            let h = create_handler(f, HandlerKind::File)?;
            // SAFETY: MPI: `eh` points to an MPI_Errhandler.
            unsafe { crate::ffi::put(eh, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Errhandler_free`: the handle becomes `MPI_ERRHANDLER_NULL`;
    /// objects using the handler keep it.
    fn MPI_Errhandler_free / PMPI_Errhandler_free(eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Errhandler_free", On::World, || {
            // SAFETY: MPI: `eh` points to an MPI_Errhandler.
            let h = unsafe { crate::ffi::get(eh) }?;
            handler(h)?;
            let mut r = REFS.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(i) = r.iter().position(|e| e.0 == h) {
                r[i].1 -= 1;
                if r[i].1 == 0 {
                    r.remove(i);
                    HANDLERS.remove(h);
                }
            }
            drop(r);
            // SAFETY: as above.
            unsafe { crate::ffi::put(eh, MPI_ERRHANDLER_NULL) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_set_by_a_successful_call_does_not_leak_into_the_next() {
        assert_eq!(run("t", On::World, || Ok(())), MPI_SUCCESS);
        // A call that names a target and then succeeds anyway.
        let rc = run("t", On::World, || {
            raise_on(On::Comm(MPI_COMM_SELF));
            Ok(())
        });
        assert_eq!(rc, MPI_SUCCESS);
        assert!(TARGET_USED.load(Ordering::Relaxed));
        // Taken by that call: the thread's target is empty again.
        assert!(TARGET.with(|t| t.get()).is_none());
        assert_eq!(run("t", On::World, || Ok(())), MPI_SUCCESS);
        assert!(TARGET.with(|t| t.get()).is_none());
    }
}
