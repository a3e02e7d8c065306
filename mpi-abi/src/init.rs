//! Initialization, finalization and the environment calls: `MPI_Init`,
//! `MPI_Init_thread`, `MPI_Finalize`, `MPI_Abort`, `MPI_Wtime`, versions,
//! the processor name.

use crate::abi::*;
use crate::err::{check, run, On, R};
use crate::ffi;
use core::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::ThreadId;

/// Before `MPI_Init`, running, finalized.
const BEFORE: u8 = 0;
const RUNNING: u8 = 1;
const FINALIZED: u8 = 2;

static PHASE: AtomicU8 = AtomicU8::new(BEFORE);
/// The thread level provided (`MPI_Query_thread`).
static LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);
/// Whether the program may call MPI from several threads at once
/// (`MPI_THREAD_MULTIPLE` provided).
#[inline]
pub(crate) fn multithreaded() -> bool {
    LEVEL.load(Ordering::Relaxed) == MPI_THREAD_MULTIPLE
}

/// The thread that called `MPI_Init` (`MPI_Is_thread_main`).
static MAIN: OnceLock<ThreadId> = OnceLock::new();

/// `MPI_Init_thread` with `required`: the level provided.
fn init(required: c_int) -> R<c_int> {
    check(
        PHASE.load(Ordering::Acquire) == BEFORE,
        MPI_ERR_OTHER,
        "MPI_Init called twice (or after MPI_Finalize)",
    )?;
    let provided = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE);
    let level = match provided {
        MPI_THREAD_SINGLE | MPI_THREAD_FUNNELED => adi::ThreadLevel::Funneled,
        _ => adi::ThreadLevel::Multiple,
    };
    pin_mmap_threshold(std::env::var("TMX_MPI_MMAP_THRESHOLD").ok().as_deref())?;
    let (world, _) = adi::init_thread(level)?;
    let me = world.self_comm()?;
    crate::comm::install(world, me);
    let _ = MAIN.set(std::thread::current().id());
    LEVEL.store(provided, Ordering::Relaxed);
    PHASE.store(RUNNING, Ordering::Release);
    Ok(provided)
}

/// The mmap threshold `MPI_Init` pins when `TMX_MPI_MMAP_THRESHOLD` is
/// unset: 32 MiB, the largest glibc accepts on 64-bit targets.
pub(crate) const DEFAULT_MMAP_THRESHOLD: usize = 32 << 20;

/// The largest threshold glibc accepts (`HEAP_MAX_SIZE / 2` on 64-bit).
const MAX_MMAP_THRESHOLD: usize = 32 << 20;

/// The mmap threshold `TMX_MPI_MMAP_THRESHOLD`'s value asks for: `None`
/// (`0`, `off`) leaves glibc's allocator alone. Bytes, or with a `K`/`KiB`
/// or `M`/`MiB` suffix; unset: [`DEFAULT_MMAP_THRESHOLD`].
pub(crate) fn mmap_threshold(v: Option<&str>) -> Result<Option<usize>, String> {
    let Some(v) = v.map(str::trim) else {
        return Ok(Some(DEFAULT_MMAP_THRESHOLD));
    };
    if v.eq_ignore_ascii_case("off") || v == "0" {
        return Ok(None);
    }
    let bad = || {
        format!(
            "TMX_MPI_MMAP_THRESHOLD={v:?}: expected a size in bytes (suffix K/KiB or M/MiB \
             allowed) up to 32 MiB, or 0/off to leave glibc's allocator alone"
        )
    };
    let lower = v.to_ascii_lowercase();
    let (digits, unit) = match lower.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => lower.split_at(i),
        None => (lower.as_str(), ""),
    };
    let scale: usize = match unit.trim() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        _ => return Err(bad()),
    };
    let n: usize = digits.parse().map_err(|_| bad())?;
    let bytes = n.checked_mul(scale).ok_or_else(bad)?;
    if bytes > MAX_MMAP_THRESHOLD {
        return Err(bad());
    }
    Ok((bytes > 0).then_some(bytes))
}

/// Pins glibc's mmap threshold (and its trim threshold at twice that, as
/// glibc's own adjustment would set it) so that the message buffers of a
/// run are served from the heap: with glibc's dynamic threshold, a large
/// buffer is mapped and unmapped per message, and every fresh mapping
/// page-faults on first touch. `env`: the value of
/// `TMX_MPI_MMAP_THRESHOLD` (see the README). No-op outside glibc.
fn pin_mmap_threshold(env: Option<&str>) -> R<()> {
    let v = mmap_threshold(env).map_err(|m| crate::err::err(MPI_ERR_ARG, m))?;
    let Some(v) = v else {
        return Ok(());
    };
    tracing::debug!(threshold = v, "pinning glibc's mmap threshold");
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let t = c_int::try_from(v).unwrap_or(c_int::MAX);
        // SAFETY: `mallopt` only sets allocator parameters (glibc takes its
        // arena lock); no memory is handed out or freed by the call.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, t) != 0
                && libc::mallopt(libc::M_TRIM_THRESHOLD, t.saturating_mul(2)) != 0
        };
        if !ok {
            tracing::warn!(threshold = v, "mallopt refused the mmap threshold");
        }
    }
    Ok(())
}

mpi_fn! {
    /// `MPI_Init` (`argc`/`argv` are not needed: the launcher passes
    /// everything through the environment).
    fn MPI_Init / PMPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
        run("MPI_Init", On::World, || init(MPI_THREAD_SINGLE).map(|_| ()))
    }
}

mpi_fn! {
    /// `MPI_Init_thread`: provides the level required (any of the four).
    fn MPI_Init_thread / PMPI_Init_thread(_argc: *mut c_int, _argv: *mut *mut *mut c_char, required: c_int, provided: *mut c_int) -> c_int {
        run("MPI_Init_thread", On::World, || {
            let p = init(required)?;
            // SAFETY: MPI: `provided` points to an int.
            unsafe { ffi::put(provided, p) }
        })
    }
}

mpi_fn! {
    /// `MPI_Finalize`: completes what is still in flight, then leaves the
    /// job.
    fn MPI_Finalize / PMPI_Finalize() -> c_int {
        run("MPI_Finalize", On::World, || {
            check(PHASE.load(Ordering::Acquire) == RUNNING, MPI_ERR_OTHER, "MPI is not running")?;
            // MPI: MPI_COMM_SELF's attributes are deleted first (their
            // callbacks are the programs' finalize hooks).
            crate::attr::delete_all(crate::attr::Kind::Comm, MPI_COMM_SELF)?;
            crate::req::finalize();
            crate::win::finalize();
            crate::types::finalize();
            crate::op::finalize();
            crate::group::finalize();
            crate::info::finalize();
            crate::attr::finalize();
            crate::comm::finalize();
            PHASE.store(FINALIZED, Ordering::Release);
            adi::finalize()?;
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Initialized`.
    fn MPI_Initialized / PMPI_Initialized(flag: *mut c_int) -> c_int {
        // SAFETY: MPI: `flag` points to an int.
        let r = unsafe { ffi::put(flag, ffi::flag(PHASE.load(Ordering::Acquire) != BEFORE)) };
        r.map_or_else(|e| e.code, |_| MPI_SUCCESS)
    }
}

mpi_fn! {
    /// `MPI_Finalized`.
    fn MPI_Finalized / PMPI_Finalized(flag: *mut c_int) -> c_int {
        // SAFETY: MPI: `flag` points to an int.
        let r = unsafe { ffi::put(flag, ffi::flag(PHASE.load(Ordering::Acquire) == FINALIZED)) };
        r.map_or_else(|e| e.code, |_| MPI_SUCCESS)
    }
}

mpi_fn! {
    /// `MPI_Query_thread`.
    fn MPI_Query_thread / PMPI_Query_thread(provided: *mut c_int) -> c_int {
        run("MPI_Query_thread", On::World, || {
            // SAFETY: MPI: `provided` points to an int.
            unsafe { ffi::put(provided, LEVEL.load(Ordering::Relaxed)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Is_thread_main`.
    fn MPI_Is_thread_main / PMPI_Is_thread_main(flag: *mut c_int) -> c_int {
        run("MPI_Is_thread_main", On::World, || {
            let main = MAIN.get() == Some(&std::thread::current().id());
            // SAFETY: MPI: `flag` points to an int.
            unsafe { ffi::put(flag, ffi::flag(main)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Abort`: ends every process of the job; `errorcode` becomes the
    /// launcher's exit status.
    fn MPI_Abort / PMPI_Abort(c: MPI_Comm, errorcode: c_int) -> c_int {
        let rank = crate::comm::world().map_or(0, |w| w.comm.rank());
        let what = format!("application called MPI_Abort({c:#x}, {errorcode}) - process {rank}");
        eprintln!("{what}");
        adi::abort(errorcode, &what)
    }
}

/// `MPI_Wtime`: seconds on the process's monotonic clock (read through
/// the vDSO: no system call).
#[no_mangle]
pub extern "C" fn MPI_Wtime() -> f64 {
    adi::wtime()
}

/// `MPI_Wtime` (profiling name).
#[no_mangle]
pub extern "C" fn PMPI_Wtime() -> f64 {
    adi::wtime()
}

/// `MPI_Wtick`.
#[no_mangle]
pub extern "C" fn MPI_Wtick() -> f64 {
    adi::wtick()
}

/// `MPI_Wtick` (profiling name).
#[no_mangle]
pub extern "C" fn PMPI_Wtick() -> f64 {
    adi::wtick()
}

mpi_fn! {
    /// `MPI_Get_processor_name`.
    fn MPI_Get_processor_name / PMPI_Get_processor_name(name: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Get_processor_name", On::World, || {
            let w = crate::comm::world()?;
            // SAFETY: MPI: `name` holds MPI_MAX_PROCESSOR_NAME chars.
            unsafe { crate::err::put_string(name, len, MPI_MAX_PROCESSOR_NAME, w.comm.processor_name()) }
        })
    }
}

mpi_fn! {
    /// `MPI_Get_version`: 3.1, the standard this library implements.
    fn MPI_Get_version / PMPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
        run("MPI_Get_version", On::World, || {
            // SAFETY: MPI: both point to ints.
            unsafe {
                ffi::put(version, 3)?;
                ffi::put(subversion, 1)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Get_library_version`.
    fn MPI_Get_library_version / PMPI_Get_library_version(version: *mut c_char, len: *mut c_int) -> c_int {
        run("MPI_Get_library_version", On::World, || {
            let s = concat!("tmx mpi-abi ", env!("CARGO_PKG_VERSION"), " (MPICH ABI, MPI 3.1)");
            // SAFETY: MPI: `version` holds MPI_MAX_LIBRARY_VERSION_STRING chars.
            unsafe { crate::err::put_string(version, len, MPI_MAX_LIBRARY_VERSION_STRING, s) }
        })
    }
}

mpi_fn! {
    /// `MPI_Pcontrol`: profiling control; nothing to do (the C function is
    /// variadic; the extra arguments are ignored).
    fn MPI_Pcontrol / PMPI_Pcontrol(_level: c_int) -> c_int {
        MPI_SUCCESS
    }
}

/// `MPIR_Dup_fn`: the copy callback `MPI_COMM_DUP_FN`, `MPI_TYPE_DUP_FN`
/// and `MPI_WIN_DUP_FN` name in `mpi.h`: the copy gets the same value.
///
/// # Safety
/// `attribute_val_out` points to a `void *`, `flag` to an int.
#[no_mangle]
pub unsafe extern "C" fn MPIR_Dup_fn(
    _oldobj: c_int,
    _keyval: c_int,
    _extra: *mut c_void,
    attribute_val_in: *mut c_void,
    attribute_val_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI's copy-callback contract, as documented above.
    let r = unsafe {
        ffi::put(attribute_val_out.cast::<*mut c_void>(), attribute_val_in)
            .and_then(|_| ffi::put(flag, 1))
    };
    r.map_or_else(|e| e.code, |_| MPI_SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap_threshold_values() {
        assert_eq!(mmap_threshold(None), Ok(Some(DEFAULT_MMAP_THRESHOLD)));
        assert_eq!(mmap_threshold(Some("0")), Ok(None));
        assert_eq!(mmap_threshold(Some("off")), Ok(None));
        assert_eq!(mmap_threshold(Some("OFF")), Ok(None));
        assert_eq!(mmap_threshold(Some("131072")), Ok(Some(128 << 10)));
        assert_eq!(mmap_threshold(Some("256K")), Ok(Some(256 << 10)));
        assert_eq!(mmap_threshold(Some("4 MiB")), Ok(Some(4 << 20)));
        assert_eq!(mmap_threshold(Some("32m")), Ok(Some(32 << 20)));
        for bad in ["", "x", "12Q", "-1", "33M", "99999999999999999999"] {
            let e = mmap_threshold(Some(bad)).expect_err(bad);
            assert!(e.contains("TMX_MPI_MMAP_THRESHOLD"), "{e}");
        }
    }
}
