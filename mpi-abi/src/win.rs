//! One-sided communication: the `MPI_Win` table, window creation (over
//! the program's memory, allocated, shared, dynamic), the epochs, the
//! operations, and the window's name, info, attributes and error handler.
//!
//! A window is an [`adi::Win`] (or [`adi::SharedWin`]) whose memory the
//! program loads and stores in place: `MPI_Win_create` exposes the
//! program's buffer ([`adi::Win::create_raw`]), `MPI_Win_allocate` and
//! `MPI_Win_allocate_shared` hand back the window's own memory
//! ([`adi::Win::local_base`], [`adi::SharedWin::base_ptr`]), and
//! `MPI_Win_attach` exposes program memory in a dynamic window
//! ([`adi::Win::attach_raw`]). `adi` takes byte displacements; the
//! displacement unit is applied here, and a derived target datatype
//! becomes one operation per contiguous block of its layout.
//!
//! Reads (`MPI_Get`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`,
//! `MPI_Compare_and_swap`) from a target on the direct path complete
//! inside the call; others complete at the synchronization that ends them
//! (fence, complete, unlock, flush), which delivers their data into the
//! program's buffers. The request-based forms deliver at their wait or
//! test ([`crate::req::Req::Rma`]).
//!
//! Accumulates combine elements of `int`/`long` (32 and 64-bit signed),
//! `unsigned`/`unsigned long`, `float` and `double` with every
//! predefined operation; other types with `MPI_REPLACE` and `MPI_NO_OP`
//! (and bytes with the bitwise operations); anything else is
//! `MPI_ERR_TYPE` or `MPI_ERR_OP`.

use crate::abi::*;
use crate::attr::{self, Kind};
use crate::comm::comm;
use crate::err::{check, err, handler, run, Handler, HandlerKind, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use crate::req::{new_request, Req};
use crate::types::{dense_len, dense_size, dtype, dtype_ref, TypeObj};
use adi::{AccOp, BasicType, ElemType};
use core::ffi::{c_char, c_int, c_void};
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

/// The `adi` window behind a handle.
#[derive(Debug)]
enum Inner {
    Win(adi::Win),
    Shared(adi::SharedWin),
}

impl Inner {
    fn win(&self) -> &adi::Win {
        match self {
            Inner::Win(w) => w,
            Inner::Shared(s) => s.win(),
        }
    }
}

/// What a window carries besides its `adi` window.
#[derive(Debug)]
struct Meta {
    name: String,
    errh: (MPI_Errhandler, Handler),
    info: crate::info::Info,
}

/// A window object.
#[derive(Debug)]
pub(crate) struct WinObj {
    /// `None` once freed.
    inner: RwLock<Option<Inner>>,
    /// `MPI_WIN_BASE`, `MPI_WIN_SIZE`, `MPI_WIN_DISP_UNIT`,
    /// `MPI_WIN_CREATE_FLAVOR`, `MPI_WIN_MODEL`: the attribute values
    /// point at these fields (the object does not move: it is in an Arc).
    base: usize,
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: c_int,
    model: c_int,
    /// Every rank's displacement unit (shared windows, for
    /// `MPI_Win_shared_query`).
    disp_units: Vec<c_int>,
    meta: Mutex<Meta>,
    /// Reads waiting for their synchronization to deliver them.
    pending: Mutex<Vec<Read>>,
    /// Whether `pending` may hold reads (changed only under its lock): a
    /// synchronization call of a window whose reads all completed in
    /// their calls (direct targets) looks at this word, not the lock.
    has_pending: AtomicBool,
}

static WINS: Table<WinObj> = Table::new(prefix::WIN);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The window of handle `h` (`MPI_ERR_WIN` if invalid).
#[inline]
fn win(h: MPI_Win) -> R<Arc<WinObj>> {
    WINS.get(h)
        .ok_or_else(|| err(MPI_ERR_WIN, "invalid window"))
}

/// The error handler of window `h`, if it is a window.
pub(crate) fn errhandler_of(h: MPI_Win) -> Option<Handler> {
    WINS.get(h).map(|o| lock(&o.meta).errh.1)
}

impl WinObj {
    /// Runs `f` on the `adi` window (`MPI_ERR_WIN` once freed).
    #[inline]
    fn with<T>(&self, f: impl FnOnce(&Inner) -> R<T>) -> R<T> {
        let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        match g.as_ref() {
            Some(i) => f(i),
            None => Err(err(MPI_ERR_WIN, "window already freed")),
        }
    }

    /// The byte displacement of `disp` units (`MPI_ERR_DISP` if negative
    /// or overflowing).
    #[inline]
    fn byte_disp(&self, disp: MPI_Aint) -> R<u64> {
        check(disp >= 0, MPI_ERR_DISP, "negative target displacement")?;
        (disp as u64)
            .checked_mul(self.disp_unit as u64)
            .ok_or_else(|| err(MPI_ERR_DISP, "target displacement overflows"))
    }

    /// Delivers pending reads: those to `rank` (every one for `None`)
    /// waiting for them, the others if already complete.
    fn settle(&self, w: &adi::Win, rank: Option<c_int>) -> R<()> {
        if !self.has_pending.load(Ordering::Acquire) {
            // Every read completed in its call (direct targets).
            return Ok(());
        }
        let mut pending = std::mem::take(&mut *lock(&self.pending));
        let mut first_err = None;
        let mut keep = Vec::new();
        for mut r in pending.drain(..) {
            let must = rank.is_none_or(|t| t == r.target);
            match r.progress(w, must) {
                Ok(true) => {}
                Ok(false) => keep.push(r),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        let mut g = lock(&self.pending);
        g.extend(keep);
        self.has_pending.store(!g.is_empty(), Ordering::Release);
        drop(g);
        first_err.map_or(Ok(()), Err)
    }
}

/// A read in flight: its parts (one per contiguous target block) and
/// where their bytes go.
#[derive(Debug)]
pub(crate) struct Read {
    /// The window's handle.
    win: MPI_Win,
    target: c_int,
    parts: Vec<adi::Request>,
    /// Parts completed (waited or tested), in order.
    done: usize,
    /// `(address, count, datatype)` of the program's result buffer.
    to: Option<(usize, i64, Arc<TypeObj>)>,
}

impl Read {
    /// Advances the read; delivers its data once every part completed
    /// (`true`). With `block`, waits for that.
    pub(crate) fn progress(&mut self, w: &adi::Win, block: bool) -> R<bool> {
        self.progress_world(w.comm(), block)
    }

    /// Advances the read with `c`'s progress (the device's: any
    /// communicator's wait drives the RMA engine).
    pub(crate) fn progress_world(&mut self, c: &adi::Comm, block: bool) -> R<bool> {
        while self.done < self.parts.len() {
            let p = &mut self.parts[self.done];
            if block {
                c.wait(p)?;
            } else if c.test(p)?.is_none() {
                return Ok(false);
            }
            self.done += 1;
        }
        self.deliver()?;
        Ok(true)
    }

    /// Advances a request-based read (`MPI_Wait`/`MPI_Test` on it): an
    /// operation the epoch machine still holds back (to piggyback it on
    /// the epoch's closing message, as MPICH's RMA design does) is pushed
    /// out by a local flush to its target, which MPI's local completion of
    /// the request needs.
    pub(crate) fn progress_request(&mut self, c: &adi::Comm, block: bool) -> R<bool> {
        if self.progress_world(c, false)? {
            return Ok(true);
        }
        if let Some(o) = WINS.get(self.win) {
            o.with(|i| Ok(i.win().flush_local(self.target)?))?;
        }
        self.progress_world(c, block)
    }

    fn deliver(&mut self) -> R<()> {
        let Some((addr, count, ty)) = self.to.take() else {
            return Ok(());
        };
        let mut data = Vec::new();
        for p in &mut self.parts {
            if let Some(b) = p.take_buffer() {
                data.extend_from_slice(&b);
            }
        }
        // SAFETY: the result buffer the program gave the read, which MPI
        // says stays valid and untouched until the read completes: this is
        // that completion.
        unsafe { ty.unpack_to(addr as *mut c_void, count, &data) }
    }
}

// ---------------------------------------------------------- creation

/// `size` and `disp_unit` checked (`MPI_ERR_SIZE`, `MPI_ERR_DISP`).
fn check_size(size: MPI_Aint, disp_unit: c_int) -> R<usize> {
    check(
        disp_unit > 0,
        MPI_ERR_DISP,
        "displacement unit must be positive",
    )?;
    usize::try_from(size).map_err(|_| err(MPI_ERR_SIZE, "negative window size"))
}

/// A new window handle.
#[allow(clippy::too_many_arguments)]
fn insert(
    inner: Inner,
    base: usize,
    size: MPI_Aint,
    disp_unit: c_int,
    flavor: c_int,
    disp_units: Vec<c_int>,
    info: crate::info::Info,
    out: *mut MPI_Win,
) -> R<()> {
    let h = WINS
        .insert(WinObj {
            inner: RwLock::new(Some(inner)),
            base,
            size,
            disp_unit,
            flavor,
            model: MPI_WIN_UNIFIED,
            disp_units,
            meta: Mutex::new(Meta {
                name: String::new(),
                errh: (MPI_ERRORS_ARE_FATAL, Handler::Fatal),
                info,
            }),
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
        })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many windows"))?;
    // SAFETY: MPI: `out` points to an MPI_Win.
    unsafe { ffi::put(out, h) }
}

mpi_fn! {
    /// `MPI_Win_create`: exposes the program's `size` bytes at `base`.
    fn MPI_Win_create / PMPI_Win_create(base: *mut c_void, size: MPI_Aint, disp_unit: c_int, info: MPI_Info, c: MPI_Comm, out: *mut MPI_Win) -> c_int {
        run("MPI_Win_create", On::Comm(c), || {
            let o = comm(c)?;
            let len = check_size(size, disp_unit)?;
            let i = crate::info::entries(info)?;
            check(len == 0 || !base.is_null(), MPI_ERR_BASE, "null base of a nonempty window")?;
            // SAFETY: MPI: `base` is `size` bytes of the program's memory,
            // which stays valid until MPI_Win_free and whose accesses
            // follow MPI's rules.
            let w = unsafe { adi::Win::create_raw(o.intra()?, base.cast(), len) }?;
            insert(Inner::Win(w), base as usize, size, disp_unit, MPI_WIN_FLAVOR_CREATE, Vec::new(), i, out)
        })
    }
}

mpi_fn! {
    /// `MPI_Win_allocate`: the window's memory, whose address goes to
    /// `*baseptr`.
    fn MPI_Win_allocate / PMPI_Win_allocate(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, c: MPI_Comm, baseptr: *mut c_void, out: *mut MPI_Win) -> c_int {
        run("MPI_Win_allocate", On::Comm(c), || {
            let o = comm(c)?;
            let len = check_size(size, disp_unit)?;
            let i = crate::info::entries(info)?;
            let w = adi::Win::allocate(o.intra()?, len)?;
            let base = w.local_base()?.map_or(0, |p| p as usize);
            // SAFETY: MPI: `baseptr` points to a `void *`.
            unsafe { ffi::put(baseptr.cast::<usize>(), base) }?;
            insert(Inner::Win(w), base, size, disp_unit, MPI_WIN_FLAVOR_ALLOCATE, Vec::new(), i, out)
        })
    }
}

mpi_fn! {
    /// `MPI_Win_allocate_shared`: segments every rank of the node loads
    /// and stores (contiguous unless `alloc_shared_noncontig` is `true`).
    fn MPI_Win_allocate_shared / PMPI_Win_allocate_shared(size: MPI_Aint, disp_unit: c_int, info: MPI_Info, c: MPI_Comm, baseptr: *mut c_void, out: *mut MPI_Win) -> c_int {
        run("MPI_Win_allocate_shared", On::Comm(c), || {
            let o = comm(c)?;
            let len = check_size(size, disp_unit)?;
            let i = crate::info::entries(info)?;
            let noncontig = i.0.iter().any(|(k, v)| k == "alloc_shared_noncontig" && v == "true");
            let cm = o.intra()?;
            let s = adi::SharedWin::allocate_with(cm, len, !noncontig)?;
            let mut units = vec![0u8; 4 * cm.size() as usize];
            cm.allgather_into(&disp_unit.to_ne_bytes(), &mut units)?;
            let units = units
                .chunks_exact(4)
                .map(|b| c_int::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let base = s.base_ptr(cm.rank())? as usize;
            // SAFETY: MPI: `baseptr` points to a `void *`.
            unsafe { ffi::put(baseptr.cast::<usize>(), base) }?;
            insert(Inner::Shared(s), base, size, disp_unit, MPI_WIN_FLAVOR_SHARED, units, i, out)
        })
    }
}

mpi_fn! {
    /// `MPI_Win_shared_query`: size, displacement unit and address of a
    /// rank's segment (`MPI_PROC_NULL`: the first nonempty one).
    fn MPI_Win_shared_query / PMPI_Win_shared_query(h: MPI_Win, rank: c_int, size: *mut MPI_Aint, disp_unit: *mut c_int, baseptr: *mut c_void) -> c_int {
        run("MPI_Win_shared_query", On::Win(h), || {
            let o = win(h)?;
            let (r, len, base) = o.with(|i| {
                let Inner::Shared(s) = i else {
                    return Err(err(MPI_ERR_RMA_FLAVOR, "not a shared-memory window"));
                };
                let r = if rank == MPI_PROC_NULL {
                    (0..s.size())
                        .find(|r| s.shared_query(*r).is_ok_and(|q| q.size > 0))
                        .unwrap_or(0)
                } else {
                    rank
                };
                let q = s.shared_query(r)?;
                Ok((r, q.size, s.base_ptr(r)? as usize))
            })?;
            let unit = o.disp_units.get(r as usize).copied().unwrap_or(o.disp_unit);
            // SAFETY: MPI: `size` points to an MPI_Aint, `disp_unit` to an
            // int, `baseptr` to a `void *`.
            unsafe {
                ffi::put(size, len as MPI_Aint)?;
                ffi::put(disp_unit, unit)?;
                ffi::put(baseptr.cast::<usize>(), base)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_create_dynamic`: no memory until `MPI_Win_attach`;
    /// displacements are addresses (`MPI_Get_address`).
    fn MPI_Win_create_dynamic / PMPI_Win_create_dynamic(info: MPI_Info, c: MPI_Comm, out: *mut MPI_Win) -> c_int {
        run("MPI_Win_create_dynamic", On::Comm(c), || {
            let o = comm(c)?;
            let i = crate::info::entries(info)?;
            let w = adi::Win::create_dynamic(o.intra()?)?;
            insert(Inner::Win(w), 0, 0, 1, MPI_WIN_FLAVOR_DYNAMIC, Vec::new(), i, out)
        })
    }
}

mpi_fn! {
    /// `MPI_Win_attach`.
    fn MPI_Win_attach / PMPI_Win_attach(h: MPI_Win, base: *mut c_void, size: MPI_Aint) -> c_int {
        run("MPI_Win_attach", On::Win(h), || {
            let o = win(h)?;
            check(o.flavor == MPI_WIN_FLAVOR_DYNAMIC, MPI_ERR_RMA_FLAVOR, "not a dynamic window")?;
            let len = usize::try_from(size).map_err(|_| err(MPI_ERR_SIZE, "negative size"))?;
            if len == 0 {
                return Ok(());
            }
            o.with(|i| {
                // SAFETY: MPI: `base` is `size` bytes of the program's
                // memory, valid until detached, accessed by MPI's rules.
                unsafe { i.win().attach_raw(base.cast(), len) }?;
                Ok(())
            })
        })
    }
}

mpi_fn! {
    /// `MPI_Win_detach`.
    fn MPI_Win_detach / PMPI_Win_detach(h: MPI_Win, base: *const c_void) -> c_int {
        run("MPI_Win_detach", On::Win(h), || {
            let o = win(h)?;
            check(o.flavor == MPI_WIN_FLAVOR_DYNAMIC, MPI_ERR_RMA_FLAVOR, "not a dynamic window")?;
            o.with(|i| {
                i.win().detach(base as u64)?;
                Ok(())
            })
        })
    }
}

mpi_fn! {
    /// `MPI_Win_free`: collective; the handle becomes `MPI_WIN_NULL`.
    fn MPI_Win_free / PMPI_Win_free(h: *mut MPI_Win) -> c_int {
        // SAFETY: MPI: `h` points to an MPI_Win.
        let hv = unsafe { ffi::get(h) }.unwrap_or(MPI_WIN_NULL);
        run("MPI_Win_free", On::Win(hv), || {
            let o = win(hv)?;
            o.with(|i| o.settle(i.win(), None))?;
            let inner = o
                .inner
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .ok_or_else(|| err(MPI_ERR_WIN, "window already freed"))?;
            let r = match inner {
                Inner::Win(w) => w.free().map(|_| ()),
                Inner::Shared(s) => s.free(),
            };
            attr::delete_all(Kind::Win, hv)?;
            WINS.remove(hv);
            r?;
            // SAFETY: as above.
            unsafe { ffi::put(h, MPI_WIN_NULL) }
        })
    }
}

// ---------------------------------------------------------- synchronization

/// Runs a synchronization call on window `h` and delivers the reads it
/// completed (`settle`: `None` none, `Some(None)` all, `Some(Some(r))`
/// those to rank `r`).
fn sync(
    func: &'static str,
    h: MPI_Win,
    settle: Option<Option<c_int>>,
    f: impl FnOnce(&adi::Win) -> Result<(), adi::Error>,
) -> c_int {
    run(func, On::Win(h), || {
        let o = win(h)?;
        o.with(|i| {
            f(i.win())?;
            match settle {
                Some(r) => o.settle(i.win(), r),
                None => Ok(()),
            }
        })
    })
}

/// The window ranks of group `g`'s members (`MPI_ERR_GROUP` for one not
/// in the window).
fn ranks_in(w: &adi::Win, g: MPI_Group) -> R<Vec<i32>> {
    let g = crate::group::group(g)?;
    let all: Vec<i32> = (0..g.size()).collect();
    let r = g.translate_ranks(&all, &w.comm().group());
    check(
        r.iter().all(|&x| x >= 0),
        MPI_ERR_GROUP,
        "group member not in the window",
    )?;
    Ok(r)
}

fn assert_bits(a: c_int) -> R<u32> {
    let all = MPI_MODE_NOCHECK
        | MPI_MODE_NOSTORE
        | MPI_MODE_NOPUT
        | MPI_MODE_NOPRECEDE
        | MPI_MODE_NOSUCCEED;
    check(a & !all == 0, MPI_ERR_ASSERT, "invalid assert")?;
    Ok(a as u32)
}

mpi_fn! {
    /// `MPI_Win_fence`.
    fn MPI_Win_fence / PMPI_Win_fence(assert: c_int, h: MPI_Win) -> c_int {
        match assert_bits(assert) {
            Ok(a) => sync("MPI_Win_fence", h, Some(None), |w| w.fence(a)),
            Err(e) => run("MPI_Win_fence", On::Win(h), || Err(e)),
        }
    }
}

mpi_fn! {
    /// `MPI_Win_start`.
    fn MPI_Win_start / PMPI_Win_start(g: MPI_Group, assert: c_int, h: MPI_Win) -> c_int {
        run("MPI_Win_start", On::Win(h), || {
            let o = win(h)?;
            let a = assert_bits(assert)?;
            o.with(|i| Ok(i.win().start(&ranks_in(i.win(), g)?, a)?))
        })
    }
}

mpi_fn! {
    /// `MPI_Win_complete`.
    fn MPI_Win_complete / PMPI_Win_complete(h: MPI_Win) -> c_int {
        sync("MPI_Win_complete", h, Some(None), |w| w.complete())
    }
}

mpi_fn! {
    /// `MPI_Win_post`.
    fn MPI_Win_post / PMPI_Win_post(g: MPI_Group, assert: c_int, h: MPI_Win) -> c_int {
        run("MPI_Win_post", On::Win(h), || {
            let o = win(h)?;
            let a = assert_bits(assert)?;
            o.with(|i| Ok(i.win().post(&ranks_in(i.win(), g)?, a)?))
        })
    }
}

mpi_fn! {
    /// `MPI_Win_wait`.
    fn MPI_Win_wait / PMPI_Win_wait(h: MPI_Win) -> c_int {
        sync("MPI_Win_wait", h, None, |w| w.wait())
    }
}

mpi_fn! {
    /// `MPI_Win_test`.
    fn MPI_Win_test / PMPI_Win_test(h: MPI_Win, flag: *mut c_int) -> c_int {
        run("MPI_Win_test", On::Win(h), || {
            let o = win(h)?;
            let done = o.with(|i| Ok(i.win().test()?))?;
            // SAFETY: MPI: `flag` points to an int.
            unsafe { ffi::put(flag, ffi::flag(done)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_lock`.
    fn MPI_Win_lock / PMPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, h: MPI_Win) -> c_int {
        run("MPI_Win_lock", On::Win(h), || {
            let o = win(h)?;
            let t = match lock_type {
                MPI_LOCK_SHARED => adi::LockType::Shared,
                MPI_LOCK_EXCLUSIVE => adi::LockType::Exclusive,
                // MPICH's class for an invalid lock type (not LOCKTYPE).
                _ => return Err(err(MPI_ERR_ARG, "invalid lock type")),
            };
            let a = assert_bits(assert)?;
            o.with(|i| Ok(i.win().lock(t, rank, a)?))
        })
    }
}

mpi_fn! {
    /// `MPI_Win_unlock`.
    fn MPI_Win_unlock / PMPI_Win_unlock(rank: c_int, h: MPI_Win) -> c_int {
        sync("MPI_Win_unlock", h, Some(Some(rank)), |w| w.unlock(rank))
    }
}

mpi_fn! {
    /// `MPI_Win_lock_all`.
    fn MPI_Win_lock_all / PMPI_Win_lock_all(assert: c_int, h: MPI_Win) -> c_int {
        run("MPI_Win_lock_all", On::Win(h), || {
            let o = win(h)?;
            let a = assert_bits(assert)?;
            o.with(|i| Ok(i.win().lock_all(a)?))
        })
    }
}

mpi_fn! {
    /// `MPI_Win_unlock_all`.
    fn MPI_Win_unlock_all / PMPI_Win_unlock_all(h: MPI_Win) -> c_int {
        sync("MPI_Win_unlock_all", h, Some(None), |w| w.unlock_all())
    }
}

mpi_fn! {
    /// `MPI_Win_flush`.
    fn MPI_Win_flush / PMPI_Win_flush(rank: c_int, h: MPI_Win) -> c_int {
        sync("MPI_Win_flush", h, Some(Some(rank)), |w| w.flush(rank))
    }
}

mpi_fn! {
    /// `MPI_Win_flush_local`.
    fn MPI_Win_flush_local / PMPI_Win_flush_local(rank: c_int, h: MPI_Win) -> c_int {
        sync("MPI_Win_flush_local", h, Some(Some(rank)), |w| w.flush_local(rank))
    }
}

mpi_fn! {
    /// `MPI_Win_flush_all`.
    fn MPI_Win_flush_all / PMPI_Win_flush_all(h: MPI_Win) -> c_int {
        sync("MPI_Win_flush_all", h, Some(None), |w| w.flush_all())
    }
}

mpi_fn! {
    /// `MPI_Win_flush_local_all`.
    fn MPI_Win_flush_local_all / PMPI_Win_flush_local_all(h: MPI_Win) -> c_int {
        sync("MPI_Win_flush_local_all", h, Some(None), |w| w.flush_local_all())
    }
}

mpi_fn! {
    /// `MPI_Win_sync`.
    fn MPI_Win_sync / PMPI_Win_sync(h: MPI_Win) -> c_int {
        sync("MPI_Win_sync", h, None, |w| w.sync())
    }
}

// ---------------------------------------------------------- operations

/// A target `(rank, disp, count, datatype)` whose layout is one
/// contiguous run: its byte range `(displacement, length)` in the target's
/// window (the length may be 0); `None` for a layout of several blocks
/// ([`target_blocks`]). No allocation: the common case of the operations.
#[inline]
fn target_contig(o: &WinObj, disp: MPI_Aint, count: i64, t: &TypeObj) -> R<Option<(u64, usize)>> {
    let Some((start, len)) = t.contig(count)? else {
        return Ok(None);
    };
    let base = o.byte_disp(disp)?;
    u64::try_from(base as i128 + start as i128)
        .map(|a| Some((a, len)))
        .map_err(|_| err(MPI_ERR_DISP, "target datatype reaches below the window"))
}

/// A target `(rank, disp, count, datatype)` as byte ranges of the
/// target's window, in the type's packed order.
fn target_blocks(o: &WinObj, disp: MPI_Aint, count: i64, t: &TypeObj) -> R<Vec<(u64, usize)>> {
    if let Some(block) = target_contig(o, disp, count, t)? {
        return Ok(if block.1 == 0 {
            Vec::new()
        } else {
            vec![block]
        });
    }
    let base = o.byte_disp(disp)?;
    let at = |start: i128, len: usize| -> R<(u64, usize)> {
        u64::try_from(base as i128 + start)
            .map(|a| (a, len))
            .map_err(|_| err(MPI_ERR_DISP, "target datatype reaches below the window"))
    };
    check(
        t.dt.is_committed(),
        MPI_ERR_TYPE,
        "datatype used before MPI_Type_commit",
    )?;
    let (lo, hi) = t.dt.span(count)?;
    check(
        lo >= 0,
        MPI_ERR_TYPE,
        "target datatype with a negative lower bound",
    )?;
    let total = t.packed(count)?;
    let span = usize::try_from(hi).map_err(|_| err(MPI_ERR_TYPE, "target datatype too large"))?;
    t.dt.segments(span, count, 0, total)?
        .map(|(s, l)| at(s as i128, l))
        .collect()
}

/// The origin's bytes: the program's memory itself when contiguous (no
/// copy: `adi` copies the data before the call returns), else packed.
///
/// # Safety
/// `addr` holds `count` elements of `t`, unchanged while the result is
/// used.
unsafe fn origin<'a>(addr: *const c_void, count: c_int, t: &TypeObj) -> R<Cow<'a, [u8]>> {
    let n = ffi::count(count)? as i64;
    if let Some((start, len)) = t.contig(n)? {
        // SAFETY: the caller's contract; a contiguous range of it.
        return Ok(Cow::Borrowed(unsafe { ffi::bytes(addr, start, len) }));
    }
    // SAFETY: the caller's contract.
    Ok(Cow::Owned(unsafe { t.pack_from(addr, n) }?))
}

/// The accumulate operation of `op`.
fn acc_op(op: MPI_Op) -> R<AccOp> {
    Ok(match op {
        MPI_SUM => AccOp::Sum,
        MPI_PROD => AccOp::Prod,
        MPI_MIN => AccOp::Min,
        MPI_MAX => AccOp::Max,
        MPI_BAND => AccOp::Band,
        MPI_BOR => AccOp::Bor,
        MPI_BXOR => AccOp::Bxor,
        MPI_LAND => AccOp::Land,
        MPI_LOR => AccOp::Lor,
        MPI_LXOR => AccOp::Lxor,
        MPI_REPLACE => AccOp::Replace,
        MPI_NO_OP => AccOp::NoOp,
        _ => {
            return Err(err(
                MPI_ERR_OP,
                "accumulate needs a predefined operation (not MINLOC/MAXLOC or a user one)",
            ))
        }
    })
}

/// The element type an accumulate of `op` on `t` combines.
fn elem_of(t: &TypeObj, op: AccOp) -> R<ElemType> {
    let b = t.dt.reduce_basic();
    let e = match b {
        Some(BasicType::I32) => Some(ElemType::I32),
        Some(BasicType::I64) => Some(ElemType::I64),
        Some(BasicType::U32) => Some(ElemType::U32),
        Some(BasicType::U64) => Some(ElemType::U64),
        Some(BasicType::F32) => Some(ElemType::F32),
        Some(BasicType::F64) => Some(ElemType::F64),
        Some(BasicType::Byte | BasicType::U8 | BasicType::Char) => Some(ElemType::Byte),
        _ => None,
    };
    match (e, op) {
        (Some(e), _) => Ok(e),
        (None, AccOp::Replace | AccOp::NoOp) => Ok(ElemType::Byte),
        (None, _) => Err(err(
            MPI_ERR_TYPE,
            "accumulate on this datatype supports only MPI_REPLACE and MPI_NO_OP",
        )),
    }
}

/// The error of an origin and a target that do not match.
const SIZES_DIFFER: &str = "origin and target datatypes describe different amounts of data";

/// Splits `data` along `blocks` and calls `f` on each piece.
fn for_blocks<T>(
    blocks: &[(u64, usize)],
    data: &[u8],
    mut f: impl FnMut(u64, &[u8]) -> Result<T, adi::Error>,
) -> R<Vec<T>> {
    let total: usize = blocks.iter().map(|b| b.1).sum();
    check(total == data.len(), MPI_ERR_TYPE, SIZES_DIFFER)?;
    let mut pos = 0;
    let mut out = Vec::with_capacity(blocks.len());
    for &(disp, len) in blocks {
        out.push(f(disp, &data[pos..pos + len])?);
        pos += len;
    }
    Ok(out)
}

/// The bytes a read of `blocks` asks for (the data of a `NO_OP`).
fn zeros(blocks: &[(u64, usize)]) -> Vec<u8> {
    vec![0u8; blocks.iter().map(|b| b.1).sum()]
}

/// Finishes a read: delivered now if complete, else kept for the
/// synchronization (blocking forms) or handed out as a request.
fn finish_read(o: &WinObj, w: &adi::Win, mut r: Read, request: Option<*mut MPI_Request>) -> R<()> {
    match request {
        None => {
            if !r.progress(w, false)? {
                let mut g = lock(&o.pending);
                g.push(r);
                o.has_pending.store(true, Ordering::Release);
            }
            Ok(())
        }
        Some(out) => {
            let req = if r.progress(w, false)? {
                Req::Done((crate::req::empty_status(), None))
            } else {
                Req::Rma(Box::new(r))
            };
            let handle = new_request(MPI_COMM_WORLD, req)?;
            // SAFETY: MPI: `out` points to an MPI_Request.
            unsafe { ffi::put(out, handle) }
        }
    }
}

/// A completed request (the request-based writes: the data were copied).
fn done_request(out: *mut MPI_Request) -> R<()> {
    let handle = new_request(
        MPI_COMM_WORLD,
        Req::Done((crate::req::empty_status(), None)),
    )?;
    // SAFETY: MPI: `out` points to an MPI_Request.
    unsafe { ffi::put(out, handle) }
}

/// The path of `MPI_Put` and `MPI_Accumulate` with predefined types on both
/// sides: `ocount` elements of `osize` bytes at `oaddr` as one byte range,
/// checked against `tcount` elements of `tsize` bytes at `disp`, handed to
/// `op` with the byte displacement unless empty or to `MPI_PROC_NULL`.
///
/// # Safety
/// MPI's contract: `ocount` dense elements of `osize` bytes at `oaddr`.
#[inline]
unsafe fn dense_op(
    o: &WinObj,
    (oaddr, ocount, osize): (*const c_void, c_int, usize),
    rank: c_int,
    disp: MPI_Aint,
    (tcount, tsize): (c_int, usize),
    op: impl FnOnce(&adi::Win, u64, &[u8]) -> R<()>,
) -> R<()> {
    let olen = dense_len(ocount, osize)?;
    // SAFETY: the caller's contract: `ocount` dense elements at `oaddr`.
    let data = unsafe { ffi::bytes(oaddr, 0, olen) };
    o.with(|i| {
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        let tlen = dense_len(tcount, tsize)?;
        let d = o.byte_disp(disp)?;
        check(tlen == olen, MPI_ERR_TYPE, SIZES_DIFFER)?;
        if olen > 0 {
            op(i.win(), d, data)?;
        }
        Ok(())
    })
}

/// `MPI_Put`.
///
/// # Safety
/// MPI's contract on the arguments.
#[allow(clippy::too_many_arguments)]
unsafe fn put(
    oaddr: *const c_void,
    ocount: c_int,
    otype: MPI_Datatype,
    rank: c_int,
    disp: MPI_Aint,
    tcount: c_int,
    ttype: MPI_Datatype,
    h: MPI_Win,
) -> R<()> {
    let o = win(h)?;
    // Predefined types on both sides (the common case): the origin's bytes
    // to one byte range, no datatype object looked at.
    if let (Some(osize), Some(tsize)) = (dense_size(otype), dense_size(ttype)) {
        // SAFETY: the caller's contract: `ocount` dense elements at `oaddr`.
        return unsafe {
            dense_op(
                &o,
                (oaddr, ocount, osize),
                rank,
                disp,
                (tcount, tsize),
                |w, d, data| Ok(w.put(rank, d, data)?),
            )
        };
    }
    let (ot, tt) = (dtype_ref(otype)?, dtype_ref(ttype)?);
    // SAFETY: the caller's contract.
    let data = unsafe { origin(oaddr, ocount, &ot) }?;
    o.with(|i| {
        let w = i.win();
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        let tn = ffi::count(tcount)? as i64;
        // A contiguous target: one put of the origin's bytes, no list of
        // blocks.
        if let Some((d, len)) = target_contig(&o, disp, tn, &tt)? {
            check(len == data.len(), MPI_ERR_TYPE, SIZES_DIFFER)?;
            if len > 0 {
                w.put(rank, d, &data)?;
            }
            return Ok(());
        }
        let blocks = target_blocks(&o, disp, tn, &tt)?;
        for_blocks(&blocks, &data, |d, piece| w.put(rank, d, piece))?;
        Ok(())
    })
}

/// `MPI_Get`.
///
/// # Safety
/// MPI's contract on the arguments.
#[allow(clippy::too_many_arguments)]
unsafe fn get(
    oaddr: *mut c_void,
    ocount: c_int,
    otype: MPI_Datatype,
    rank: c_int,
    disp: MPI_Aint,
    tcount: c_int,
    ttype: MPI_Datatype,
    h: MPI_Win,
    request: Option<*mut MPI_Request>,
) -> R<()> {
    let o = win(h)?;
    // Predefined types on both sides, to a target this rank reaches
    // directly: loaded straight into the program's buffer, no datatype
    // object looked at (anything else takes the general path below).
    if let (Some(osize), Some(tsize)) = (dense_size(otype), dense_size(ttype)) {
        if rank != MPI_PROC_NULL {
            let done = o.with(|i| {
                let olen = dense_len(ocount, osize)?;
                let tlen = dense_len(tcount, tsize)?;
                let d = o.byte_disp(disp)?;
                check(olen == tlen, MPI_ERR_TYPE, SIZES_DIFFER)?;
                if olen == 0 {
                    return Ok(false);
                }
                // SAFETY: MPI: `oaddr` has room for `ocount` dense
                // elements of `otype`.
                let dst = unsafe { ffi::bytes_mut(oaddr, 0, olen) };
                Ok(i.win().get_direct(rank, d, dst)?)
            })?;
            if done {
                return match request {
                    None => Ok(()),
                    Some(out) => done_request(out),
                };
            }
        }
    }
    let (ot, tt) = (dtype_ref(otype)?, dtype_ref(ttype)?);
    let n = ffi::count(ocount)? as i64;
    o.with(|i| {
        let w = i.win();
        // One contiguous block into a contiguous origin, to a target this
        // rank reaches directly: loaded straight into the program's buffer
        // (no list of blocks).
        if rank != MPI_PROC_NULL {
            let tn = ffi::count(tcount)? as i64;
            if let Some((d, len)) = target_contig(&o, disp, tn, &tt)? {
                if let Some((start, olen)) = ot.contig(n)? {
                    check(olen == len, MPI_ERR_TYPE, SIZES_DIFFER)?;
                    if len > 0 {
                        // SAFETY: MPI: `oaddr` has room for `ocount`
                        // elements of `otype`, contiguous from `start` for
                        // `olen` bytes.
                        let dst = unsafe { ffi::bytes_mut(oaddr, start, olen) };
                        if w.get_direct(rank, d, dst)? {
                            return match request {
                                None => Ok(()),
                                Some(out) => done_request(out),
                            };
                        }
                    }
                }
            }
        }
        let blocks = if rank == MPI_PROC_NULL {
            Vec::new()
        } else {
            target_blocks(&o, disp, ffi::count(tcount)? as i64, &tt)?
        };
        let total: usize = blocks.iter().map(|b| b.1).sum();
        check(
            rank == MPI_PROC_NULL || total == ot.packed(n)?,
            MPI_ERR_TYPE,
            SIZES_DIFFER,
        )?;
        let parts = blocks
            .iter()
            .map(|&(d, len)| w.get(rank, d, len))
            .collect::<Result<Vec<_>, _>>()?;
        let r = Read {
            win: h,
            target: rank,
            parts,
            done: 0,
            to: Some((oaddr as usize, n, ot.to_arc())),
        };
        finish_read(&o, w, r, request)
    })
}

/// `MPI_Accumulate`.
///
/// # Safety
/// MPI's contract on the arguments.
#[allow(clippy::too_many_arguments)]
unsafe fn accumulate(
    oaddr: *const c_void,
    ocount: c_int,
    otype: MPI_Datatype,
    rank: c_int,
    disp: MPI_Aint,
    tcount: c_int,
    ttype: MPI_Datatype,
    op: MPI_Op,
    h: MPI_Win,
) -> R<()> {
    let o = win(h)?;
    let (ot, tt) = (dtype_ref(otype)?, dtype_ref(ttype)?);
    let a = acc_op(op)?;
    let e = elem_of(&tt, a)?;
    // Predefined types on both sides and an operation with data: the
    // origin's bytes to one byte range.
    if let (Some(osize), Some(tsize), false) =
        (dense_size(otype), dense_size(ttype), a == AccOp::NoOp)
    {
        // SAFETY: the caller's contract: `ocount` dense elements at `oaddr`.
        return unsafe {
            dense_op(
                &o,
                (oaddr, ocount, osize),
                rank,
                disp,
                (tcount, tsize),
                |w, d, data| Ok(w.accumulate(rank, d, data, e, a)?),
            )
        };
    }
    // SAFETY: the caller's contract.
    let data = unsafe { origin(oaddr, ocount, &ot) }?;
    o.with(|i| {
        let w = i.win();
        if rank == MPI_PROC_NULL {
            return Ok(());
        }
        let tn = ffi::count(tcount)? as i64;
        // A contiguous target and an operation with data: one accumulate,
        // no list of blocks.
        if a != AccOp::NoOp {
            if let Some((d, len)) = target_contig(&o, disp, tn, &tt)? {
                check(len == data.len(), MPI_ERR_TYPE, SIZES_DIFFER)?;
                if len > 0 {
                    w.accumulate(rank, d, &data, e, a)?;
                }
                return Ok(());
            }
        }
        let blocks = target_blocks(&o, disp, tn, &tt)?;
        let data = if a == AccOp::NoOp {
            Cow::Owned(zeros(&blocks))
        } else {
            data
        };
        for_blocks(&blocks, &data, |d, piece| {
            w.accumulate(rank, d, piece, e, a)
        })?;
        Ok(())
    })
}

/// `MPI_Get_accumulate` (and `MPI_Rget_accumulate` with `request`).
///
/// # Safety
/// MPI's contract on the arguments.
#[allow(clippy::too_many_arguments)]
unsafe fn get_accumulate(
    oaddr: *const c_void,
    ocount: c_int,
    otype: MPI_Datatype,
    raddr: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    rank: c_int,
    disp: MPI_Aint,
    tcount: c_int,
    ttype: MPI_Datatype,
    op: MPI_Op,
    h: MPI_Win,
    request: Option<*mut MPI_Request>,
) -> R<()> {
    let o = win(h)?;
    let (rt, tt) = (dtype(rtype)?, dtype(ttype)?);
    let a = acc_op(op)?;
    let e = elem_of(&tt, a)?;
    let data = if a == AccOp::NoOp {
        None
    } else {
        let ot = dtype(otype)?;
        // SAFETY: the caller's contract.
        Some(unsafe { origin(oaddr, ocount, &ot) }?)
    };
    let rn = ffi::count(rcount)? as i64;
    o.with(|i| {
        let w = i.win();
        let blocks = if rank == MPI_PROC_NULL {
            Vec::new()
        } else {
            target_blocks(&o, disp, ffi::count(tcount)? as i64, &tt)?
        };
        let data = data.unwrap_or_else(|| Cow::Owned(zeros(&blocks)));
        let parts = if rank == MPI_PROC_NULL {
            Vec::new()
        } else {
            for_blocks(&blocks, &data, |d, piece| {
                w.get_accumulate(rank, d, piece, e, a)
            })?
        };
        let r = Read {
            win: h,
            target: rank,
            parts,
            done: 0,
            to: Some((raddr as usize, rn, rt)),
        };
        finish_read(&o, w, r, request)
    })
}

/// One predefined element of `t` (`MPI_ERR_TYPE` otherwise).
fn one_elem(t: &TypeObj) -> R<usize> {
    check(
        t.dt.as_basic().is_some() && t.contig(1)? == Some((0, t.dt.size())),
        MPI_ERR_TYPE,
        "a predefined datatype is required",
    )?;
    Ok(t.dt.size())
}

mpi_fn! {
    /// `MPI_Put`.
    fn MPI_Put / PMPI_Put(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, h: MPI_Win) -> c_int {
        // SAFETY: MPI's contract on the arguments.
        run("MPI_Put", On::Win(h), || unsafe { put(oaddr, ocount, otype, rank, disp, tcount, ttype, h) })
    }
}

mpi_fn! {
    /// `MPI_Rput`: the data are copied at once, so the request is
    /// complete (remote completion is by flush or unlock).
    fn MPI_Rput / PMPI_Rput(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, h: MPI_Win, req: *mut MPI_Request) -> c_int {
        run("MPI_Rput", On::Win(h), || {
            // SAFETY: MPI's contract on the arguments.
            unsafe { put(oaddr, ocount, otype, rank, disp, tcount, ttype, h) }?;
            done_request(req)
        })
    }
}

mpi_fn! {
    /// `MPI_Get`.
    fn MPI_Get / PMPI_Get(oaddr: *mut c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, h: MPI_Win) -> c_int {
        // SAFETY: MPI's contract on the arguments.
        run("MPI_Get", On::Win(h), || unsafe { get(oaddr, ocount, otype, rank, disp, tcount, ttype, h, None) })
    }
}

mpi_fn! {
    /// `MPI_Rget`.
    fn MPI_Rget / PMPI_Rget(oaddr: *mut c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, h: MPI_Win, req: *mut MPI_Request) -> c_int {
        // SAFETY: MPI's contract on the arguments.
        run("MPI_Rget", On::Win(h), || unsafe { get(oaddr, ocount, otype, rank, disp, tcount, ttype, h, Some(req)) })
    }
}

mpi_fn! {
    /// `MPI_Accumulate`.
    fn MPI_Accumulate / PMPI_Accumulate(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, op: MPI_Op, h: MPI_Win) -> c_int {
        // SAFETY: MPI's contract on the arguments.
        run("MPI_Accumulate", On::Win(h), || unsafe { accumulate(oaddr, ocount, otype, rank, disp, tcount, ttype, op, h) })
    }
}

mpi_fn! {
    /// `MPI_Raccumulate`: complete at once, as `MPI_Rput`.
    fn MPI_Raccumulate / PMPI_Raccumulate(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, op: MPI_Op, h: MPI_Win, req: *mut MPI_Request) -> c_int {
        run("MPI_Raccumulate", On::Win(h), || {
            // SAFETY: MPI's contract on the arguments.
            unsafe { accumulate(oaddr, ocount, otype, rank, disp, tcount, ttype, op, h) }?;
            done_request(req)
        })
    }
}

mpi_fn! {
    /// `MPI_Get_accumulate`.
    fn MPI_Get_accumulate / PMPI_Get_accumulate(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, raddr: *mut c_void, rcount: c_int, rtype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, op: MPI_Op, h: MPI_Win) -> c_int {
        run("MPI_Get_accumulate", On::Win(h), || {
            // SAFETY: MPI's contract on the arguments.
            unsafe { get_accumulate(oaddr, ocount, otype, raddr, rcount, rtype, rank, disp, tcount, ttype, op, h, None) }
        })
    }
}

mpi_fn! {
    /// `MPI_Rget_accumulate`.
    fn MPI_Rget_accumulate / PMPI_Rget_accumulate(oaddr: *const c_void, ocount: c_int, otype: MPI_Datatype, raddr: *mut c_void, rcount: c_int, rtype: MPI_Datatype, rank: c_int, disp: MPI_Aint, tcount: c_int, ttype: MPI_Datatype, op: MPI_Op, h: MPI_Win, req: *mut MPI_Request) -> c_int {
        run("MPI_Rget_accumulate", On::Win(h), || {
            // SAFETY: MPI's contract on the arguments.
            unsafe { get_accumulate(oaddr, ocount, otype, raddr, rcount, rtype, rank, disp, tcount, ttype, op, h, Some(req)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Fetch_and_op`: one predefined element.
    fn MPI_Fetch_and_op / PMPI_Fetch_and_op(oaddr: *const c_void, raddr: *mut c_void, t: MPI_Datatype, rank: c_int, disp: MPI_Aint, op: MPI_Op, h: MPI_Win) -> c_int {
        run("MPI_Fetch_and_op", On::Win(h), || {
            let o = win(h)?;
            let ty = dtype(t)?;
            let size = one_elem(&ty)?;
            let a = acc_op(op)?;
            let e = elem_of(&ty, a)?;
            let data = if a == AccOp::NoOp {
                vec![0u8; size]
            } else {
                // SAFETY: MPI: `oaddr` holds one element of `t`.
                unsafe { ffi::bytes(oaddr, 0, size) }.to_vec()
            };
            o.with(|i| {
                let w = i.win();
                let parts = if rank == MPI_PROC_NULL {
                    Vec::new()
                } else {
                    vec![w.fetch_and_op(rank, o.byte_disp(disp)?, &data, e, a)?]
                };
                let r = Read { win: h, target: rank, parts, done: 0, to: Some((raddr as usize, 1, Arc::clone(&ty))) };
                finish_read(&o, w, r, None)
            })
        })
    }
}

mpi_fn! {
    /// `MPI_Compare_and_swap`: one predefined element of 1, 4 or 8
    /// bytes.
    fn MPI_Compare_and_swap / PMPI_Compare_and_swap(oaddr: *const c_void, caddr: *const c_void, raddr: *mut c_void, t: MPI_Datatype, rank: c_int, disp: MPI_Aint, h: MPI_Win) -> c_int {
        run("MPI_Compare_and_swap", On::Win(h), || {
            let o = win(h)?;
            let ty = dtype(t)?;
            let size = one_elem(&ty)?;
            let e = match size {
                1 => ElemType::Byte,
                4 => ElemType::U32,
                8 => ElemType::U64,
                _ => return Err(err(MPI_ERR_TYPE, "compare-and-swap needs an element of 1, 4 or 8 bytes")),
            };
            // SAFETY: MPI: `oaddr` and `caddr` hold one element of `t`.
            let (new, cmp) = unsafe { (ffi::bytes(oaddr, 0, size), ffi::bytes(caddr, 0, size)) };
            o.with(|i| {
                let w = i.win();
                let parts = if rank == MPI_PROC_NULL {
                    Vec::new()
                } else {
                    vec![w.compare_and_swap(rank, o.byte_disp(disp)?, new, cmp, e)?]
                };
                let r = Read { win: h, target: rank, parts, done: 0, to: Some((raddr as usize, 1, Arc::clone(&ty))) };
                finish_read(&o, w, r, None)
            })
        })
    }
}

// ---------------------------------------------------------- the object

mpi_fn! {
    /// `MPI_Win_get_group`.
    fn MPI_Win_get_group / PMPI_Win_get_group(h: MPI_Win, g: *mut MPI_Group) -> c_int {
        run("MPI_Win_get_group", On::Win(h), || {
            let o = win(h)?;
            let grp = o.with(|i| Ok(i.win().comm().group()))?;
            let gh = crate::group::new_group(grp)?;
            // SAFETY: MPI: `g` points to a handle.
            unsafe { ffi::put(g, gh) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_set_name`.
    fn MPI_Win_set_name / PMPI_Win_set_name(h: MPI_Win, name: *const c_char) -> c_int {
        run("MPI_Win_set_name", On::Win(h), || {
            let o = win(h)?;
            // SAFETY: MPI: `name` is a C string.
            let s = unsafe { ffi::c_str(name) }?;
            check(s.len() < MPI_MAX_OBJECT_NAME, MPI_ERR_ARG, "name too long")?;
            lock(&o.meta).name = s;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Win_get_name`.
    fn MPI_Win_get_name / PMPI_Win_get_name(h: MPI_Win, name: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Win_get_name", On::Win(h), || {
            let o = win(h)?;
            let s = lock(&o.meta).name.clone();
            // SAFETY: MPI: `name` holds MPI_MAX_OBJECT_NAME chars.
            unsafe { crate::err::put_string(name, len, MPI_MAX_OBJECT_NAME, &s) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_set_info`.
    fn MPI_Win_set_info / PMPI_Win_set_info(h: MPI_Win, info: MPI_Info) -> c_int {
        run("MPI_Win_set_info", On::Win(h), || {
            let o = win(h)?;
            check(info != MPI_INFO_NULL, MPI_ERR_ARG, "MPI_INFO_NULL given")?;
            let i = crate::info::entries(info)?;
            lock(&o.meta).info = i;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Win_get_info`: a new info object with the hints given.
    fn MPI_Win_get_info / PMPI_Win_get_info(h: MPI_Win, info: *mut MPI_Info) -> c_int {
        run("MPI_Win_get_info", On::Win(h), || {
            let o = win(h)?;
            let i = lock(&o.meta).info.clone();
            let ih = crate::info::new_info(i)?;
            // SAFETY: MPI: `info` points to a handle.
            unsafe { ffi::put(info, ih) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_set_errhandler`.
    fn MPI_Win_set_errhandler / PMPI_Win_set_errhandler(h: MPI_Win, eh: MPI_Errhandler) -> c_int {
        run("MPI_Win_set_errhandler", On::Win(h), || {
            let o = win(h)?;
            let hd = handler(eh)?;
            if let Handler::User { kind, .. } = hd {
                check(kind == HandlerKind::Win, MPI_ERR_ARG, "not a window error handler")?;
            }
            lock(&o.meta).errh = (eh, hd);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Win_get_errhandler`.
    fn MPI_Win_get_errhandler / PMPI_Win_get_errhandler(h: MPI_Win, eh: *mut MPI_Errhandler) -> c_int {
        run("MPI_Win_get_errhandler", On::Win(h), || {
            let o = win(h)?;
            let e = lock(&o.meta).errh.0;
            crate::err::handler_ref(e);
            // SAFETY: MPI: `eh` points to a handle.
            unsafe { ffi::put(eh, e) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_call_errhandler`: raises `code` on the window.
    fn MPI_Win_call_errhandler / PMPI_Win_call_errhandler(h: MPI_Win, code: c_int) -> c_int {
        win(h).map_or(MPI_ERR_WIN, |_| {
            let r = run("MPI_Win_call_errhandler", On::Win(h), || {
                Err(err(code, "raised by MPI_Win_call_errhandler"))
            });
            // The call itself succeeds once the handler returned.
            if r == code { MPI_SUCCESS } else { r }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_set_attr`.
    fn MPI_Win_set_attr / PMPI_Win_set_attr(h: MPI_Win, keyval: c_int, value: *mut c_void) -> c_int {
        run("MPI_Win_set_attr", On::Win(h), || {
            win(h)?;
            attr::set(Kind::Win, h, keyval, value as usize)
        })
    }
}

mpi_fn! {
    /// `MPI_Win_get_attr`, with the predefined `MPI_WIN_BASE`,
    /// `MPI_WIN_SIZE`, `MPI_WIN_DISP_UNIT`, `MPI_WIN_CREATE_FLAVOR` and
    /// `MPI_WIN_MODEL` (the last four point to the values).
    fn MPI_Win_get_attr / PMPI_Win_get_attr(h: MPI_Win, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
        run("MPI_Win_get_attr", On::Win(h), || {
            let o = win(h)?;
            let v = match keyval {
                MPI_WIN_BASE => Some(o.base),
                MPI_WIN_SIZE => Some(&o.size as *const MPI_Aint as usize),
                MPI_WIN_DISP_UNIT => Some(&o.disp_unit as *const c_int as usize),
                MPI_WIN_CREATE_FLAVOR => Some(&o.flavor as *const c_int as usize),
                MPI_WIN_MODEL => Some(&o.model as *const c_int as usize),
                _ => attr::get(Kind::Win, h, keyval)?,
            };
            // SAFETY: MPI: `value` points to a `void *`, `flag` to an int.
            unsafe { attr::put_value(value, flag, v) }
        })
    }
}

mpi_fn! {
    /// `MPI_Win_delete_attr`.
    fn MPI_Win_delete_attr / PMPI_Win_delete_attr(h: MPI_Win, keyval: c_int) -> c_int {
        run("MPI_Win_delete_attr", On::Win(h), || {
            win(h)?;
            attr::delete(Kind::Win, h, keyval)
        })
    }
}

/// Forgets every window (finalize): the program should have freed them.
pub(crate) fn finalize() {
    WINS.clear();
}
