//! Info objects (`MPI_Info`): ordered key/value strings with MPI's
//! limits (`MPI_MAX_INFO_KEY`, `MPI_MAX_INFO_VAL`). Hints given to
//! communicators (`MPI_Comm_set_info`) are kept and handed back by
//! `MPI_Comm_get_info`; none changes tmx's behaviour.

use crate::abi::*;
use crate::err::{check, err, put_string, run, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use core::ffi::{c_char, c_int};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The entries of an info object, in the order they were first set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Info(pub(crate) Vec<(String, String)>);

impl Info {
    fn set(&mut self, k: String, v: String) -> R<()> {
        check(
            !k.is_empty() && k.len() < MPI_MAX_INFO_KEY,
            MPI_ERR_INFO_KEY,
            "invalid info key",
        )?;
        check(
            !v.is_empty() && v.len() < MPI_MAX_INFO_VAL,
            MPI_ERR_INFO_VALUE,
            "invalid info value",
        )?;
        match self.0.iter_mut().find(|(kk, _)| *kk == k) {
            Some(e) => e.1 = v,
            None => self.0.push((k, v)),
        }
        Ok(())
    }

    fn get(&self, k: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(kk, _)| kk == k)
            .map(|(_, v)| v.as_str())
    }
}

static INFOS: Table<Mutex<Info>> = Table::new(prefix::INFO);

/// The info object of handle `h` (`MPI_ERR_INFO` if invalid).
pub(crate) fn info(h: MPI_Info) -> R<Arc<Mutex<Info>>> {
    INFOS
        .get(h)
        .ok_or_else(|| err(MPI_ERR_INFO, "invalid info object"))
}

fn lock(i: &Mutex<Info>) -> MutexGuard<'_, Info> {
    i.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The entries of `h` (none for `MPI_INFO_NULL`).
pub(crate) fn entries(h: MPI_Info) -> R<Info> {
    if h == MPI_INFO_NULL {
        return Ok(Info::default());
    }
    if h == MPI_INFO_ENV {
        return Ok(env());
    }
    Ok(lock(&*info(h)?).clone())
}

/// A new info handle holding `i`.
pub(crate) fn new_info(i: Info) -> R<MPI_Info> {
    INFOS
        .insert(Mutex::new(i))
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many info objects"))
}

/// `MPI_INFO_ENV`: how the process was started.
fn env() -> Info {
    let mut i = Info::default();
    let args: Vec<String> = std::env::args().collect();
    if let Some(cmd) = args.first() {
        i.0.push(("command".into(), cmd.clone()));
    }
    if args.len() > 1 {
        i.0.push(("argv".into(), args[1..].join(" ")));
    }
    if let Ok(d) = std::env::current_dir() {
        i.0.push(("wdir".into(), d.display().to_string()));
    }
    i
}

/// A key argument.
///
/// # Safety
/// `k` is a C string.
unsafe fn key(k: *const c_char) -> R<String> {
    // SAFETY: the caller's contract.
    let s = unsafe { ffi::c_str(k) }?;
    check(
        !s.is_empty() && s.len() < MPI_MAX_INFO_KEY,
        MPI_ERR_INFO_KEY,
        "invalid info key",
    )?;
    Ok(s)
}

mpi_fn! {
    /// `MPI_Info_create`.
    fn MPI_Info_create / PMPI_Info_create(out: *mut MPI_Info) -> c_int {
        run("MPI_Info_create", On::World, || {
            let h = new_info(Info::default())?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { ffi::put(out, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_set`.
    fn MPI_Info_set / PMPI_Info_set(h: MPI_Info, k: *const c_char, v: *const c_char) -> c_int {
        run("MPI_Info_set", On::World, || {
            let i = info(h)?;
            // SAFETY: MPI: `k` and `v` are C strings.
            let (k, v) = unsafe { (key(k)?, ffi::c_str(v)?) };
            let r = lock(&i).set(k, v);
            r
        })
    }
}

mpi_fn! {
    /// `MPI_Info_get`: up to `valuelen` characters and a NUL.
    fn MPI_Info_get / PMPI_Info_get(h: MPI_Info, k: *const c_char, valuelen: c_int, value: *mut c_char, flag: *mut c_int) -> c_int {
        run("MPI_Info_get", On::World, || {
            let i = entries(h)?;
            // SAFETY: MPI: `k` is a C string.
            let k = unsafe { key(k) }?;
            let n = ffi::count(valuelen)?;
            match i.get(&k) {
                Some(v) => {
                    // As MPICH: a value longer than `valuelen` is an error.
                    check(v.len() <= n, MPI_ERR_INFO_VALUE, "value longer than valuelen")?;
                    // SAFETY: MPI: `value` holds `valuelen + 1` chars, `flag` an int.
                    unsafe {
                        put_string(value, core::ptr::null_mut(), n + 1, v)?;
                        ffi::put(flag, 1)
                    }
                }
                // SAFETY: MPI: `flag` points to an int.
                None => unsafe { ffi::put(flag, 0) },
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_get_valuelen`.
    fn MPI_Info_get_valuelen / PMPI_Info_get_valuelen(h: MPI_Info, k: *const c_char, len: *mut c_int, flag: *mut c_int) -> c_int {
        run("MPI_Info_get_valuelen", On::World, || {
            let i = entries(h)?;
            // SAFETY: MPI: `k` is a C string.
            let k = unsafe { key(k) }?;
            // SAFETY: MPI: `len` and `flag` point to ints.
            unsafe {
                match i.get(&k) {
                    Some(v) => {
                        ffi::put(len, v.len() as c_int)?;
                        ffi::put(flag, 1)
                    }
                    None => ffi::put(flag, 0),
                }
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_get_nkeys`.
    fn MPI_Info_get_nkeys / PMPI_Info_get_nkeys(h: MPI_Info, n: *mut c_int) -> c_int {
        run("MPI_Info_get_nkeys", On::World, || {
            let i = entries(h)?;
            // SAFETY: MPI: `n` points to an int.
            unsafe { ffi::put(n, i.0.len() as c_int) }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_get_nthkey`.
    fn MPI_Info_get_nthkey / PMPI_Info_get_nthkey(h: MPI_Info, n: c_int, k: *mut c_char) -> c_int {
        run("MPI_Info_get_nthkey", On::World, || {
            let i = entries(h)?;
            let e = usize::try_from(n)
                .ok()
                .and_then(|n| i.0.get(n))
                .ok_or_else(|| err(MPI_ERR_ARG, "no such key number"))?;
            // SAFETY: MPI: `k` holds MPI_MAX_INFO_KEY + 1 chars.
            unsafe { put_string(k, core::ptr::null_mut(), MPI_MAX_INFO_KEY + 1, &e.0) }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_delete`.
    fn MPI_Info_delete / PMPI_Info_delete(h: MPI_Info, k: *const c_char) -> c_int {
        run("MPI_Info_delete", On::World, || {
            let i = info(h)?;
            // SAFETY: MPI: `k` is a C string.
            let k = unsafe { key(k) }?;
            let mut g = lock(&i);
            let at = g.0.iter().position(|(kk, _)| *kk == k);
            let at = at.ok_or_else(|| err(MPI_ERR_INFO_NOKEY, "no such key"))?;
            g.0.remove(at);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Info_dup`.
    fn MPI_Info_dup / PMPI_Info_dup(h: MPI_Info, out: *mut MPI_Info) -> c_int {
        run("MPI_Info_dup", On::World, || {
            let e = if h == MPI_INFO_ENV { env() } else { lock(&*info(h)?).clone() };
            let n = new_info(e)?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { ffi::put(out, n) }
        })
    }
}

mpi_fn! {
    /// `MPI_Info_free`.
    fn MPI_Info_free / PMPI_Info_free(h: *mut MPI_Info) -> c_int {
        run("MPI_Info_free", On::World, || {
            // SAFETY: MPI: `h` points to a handle.
            let v = unsafe { ffi::get(h) }?;
            info(v)?;
            INFOS.remove(v);
            // SAFETY: as above.
            unsafe { ffi::put(h, MPI_INFO_NULL) }
        })
    }
}

/// Drops every info object (finalize).
pub(crate) fn finalize() {
    INFOS.clear();
}
