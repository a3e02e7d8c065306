//! Attribute caching: keyvals and the attributes of communicators,
//! datatypes and windows, with the program's copy and delete callbacks
//! (called when a communicator or datatype is duplicated or freed, and
//! when an attribute is replaced or deleted).
//!
//! Attributes are a feature of the C binding (opaque `void *` values and
//! C callbacks), so they live here; a Rust program attaches data to its
//! own values instead.

use crate::abi::*;
use crate::err::{check, err, run, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The object kind a keyval is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Comm,
    Type,
    Win,
}

/// A keyval: its callbacks (null pointers: `MPI_*_NULL_COPY_FN` /
/// `MPI_*_NULL_DELETE_FN`) and extra state.
#[derive(Debug)]
pub(crate) struct Keyval {
    kind: Kind,
    copy: usize,
    delete: usize,
    extra: usize,
}

/// `MPI_Comm_copy_attr_function` (and its type and window forms).
type CopyFn =
    unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void, *mut c_void, *mut c_int) -> c_int;
/// `MPI_Comm_delete_attr_function` (and its type and window forms).
type DeleteFn = unsafe extern "C" fn(c_int, c_int, *mut c_void, *mut c_void) -> c_int;

static KEYVALS: Table<Keyval> = Table::new(prefix::KEYVAL);

/// One attribute: keyval handle, keyval, value.
type Attr = (c_int, Arc<Keyval>, usize);

/// The attributes of every object, by kind and handle, in the order set.
type AttrMap = HashMap<(Kind, c_int), Vec<Attr>>;

static ATTRS: Mutex<Option<AttrMap>> = Mutex::new(None);

fn with_attrs<T>(f: impl FnOnce(&mut AttrMap) -> T) -> T {
    let mut g = ATTRS.lock().unwrap_or_else(PoisonError::into_inner);
    f(g.get_or_insert_with(HashMap::new))
}

fn keyval(h: c_int, kind: Kind) -> R<Arc<Keyval>> {
    let k = KEYVALS
        .get(h)
        .ok_or_else(|| err(MPI_ERR_KEYVAL, "invalid keyval"))?;
    check(
        k.kind == kind,
        MPI_ERR_KEYVAL,
        "keyval of another object kind",
    )?;
    Ok(k)
}

/// Calls the delete callback of `k` for `value` on object `obj`.
fn call_delete(obj: c_int, kh: c_int, k: &Keyval, value: usize) -> R<()> {
    if k.delete == 0 {
        return Ok(());
    }
    // SAFETY: `delete` is the program's delete callback, given when the
    // keyval was created, called with MPI's arguments.
    let rc = unsafe {
        let f = core::mem::transmute::<usize, DeleteFn>(k.delete);
        f(obj, kh, value as *mut c_void, k.extra as *mut c_void)
    };
    check(rc == MPI_SUCCESS, rc, "attribute delete callback failed")
}

/// `MPI_*_set_attr`: replaces (deleting the old value) or adds.
pub(crate) fn set(kind: Kind, obj: c_int, kh: c_int, value: usize) -> R<()> {
    let k = keyval(kh, kind)?;
    let old = with_attrs(|m| {
        let list = m.entry((kind, obj)).or_default();
        let old = list.iter().position(|a| a.0 == kh).map(|i| list.remove(i));
        list.push((kh, Arc::clone(&k), value));
        old
    });
    if let Some((_, ok, ov)) = old {
        call_delete(obj, kh, &ok, ov)?;
    }
    Ok(())
}

/// `MPI_*_get_attr` of a user keyval.
pub(crate) fn get(kind: Kind, obj: c_int, kh: c_int) -> R<Option<usize>> {
    keyval(kh, kind)?;
    Ok(with_attrs(|m| {
        m.get(&(kind, obj))
            .and_then(|l| l.iter().find(|a| a.0 == kh))
            .map(|a| a.2)
    }))
}

/// `MPI_*_delete_attr` (an attribute not set: nothing to do, as MPICH).
pub(crate) fn delete(kind: Kind, obj: c_int, kh: c_int) -> R<()> {
    keyval(kh, kind)?;
    let a = with_attrs(|m| {
        let list = m.get_mut(&(kind, obj))?;
        let i = list.iter().position(|a| a.0 == kh)?;
        Some(list.remove(i))
    });
    match a {
        Some((_, k, v)) => call_delete(obj, kh, &k, v),
        None => Ok(()),
    }
}

/// Copies the attributes of `from` to `to` (duplication): each keyval's
/// copy callback decides.
pub(crate) fn copy_all(kind: Kind, from: c_int, to: c_int) -> R<()> {
    let list = with_attrs(|m| m.get(&(kind, from)).cloned().unwrap_or_default());
    for (kh, k, v) in list {
        if k.copy == 0 {
            continue;
        }
        let mut out: *mut c_void = core::ptr::null_mut();
        let mut flag: c_int = 0;
        // SAFETY: `copy` is the program's copy callback, given when the
        // keyval was created, called with MPI's arguments (pointers to
        // live locals for the results).
        let rc = unsafe {
            let f = core::mem::transmute::<usize, CopyFn>(k.copy);
            f(
                from,
                kh,
                k.extra as *mut c_void,
                v as *mut c_void,
                (&mut out as *mut *mut c_void).cast(),
                &mut flag,
            )
        };
        check(rc == MPI_SUCCESS, rc, "attribute copy callback failed")?;
        if flag != 0 {
            with_attrs(|m| m.entry((kind, to)).or_default().push((kh, k, out as usize)));
        }
    }
    Ok(())
}

/// Deletes every attribute of `obj` (the object is freed), calling the
/// delete callbacks; the first failure is returned.
pub(crate) fn delete_all(kind: Kind, obj: c_int) -> R<()> {
    let list = with_attrs(|m| m.remove(&(kind, obj)).unwrap_or_default());
    let mut first = Ok(());
    for (kh, k, v) in list {
        let r = call_delete(obj, kh, &k, v);
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// Creates a keyval.
///
/// # Safety
/// `out` points to an int.
unsafe fn create(
    kind: Kind,
    copy: *const c_void,
    delete: *const c_void,
    out: *mut c_int,
    extra: *mut c_void,
) -> R<()> {
    let h = KEYVALS
        .insert(Keyval {
            kind,
            copy: copy as usize,
            delete: delete as usize,
            extra: extra as usize,
        })
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many keyvals"))?;
    // SAFETY: the caller's contract.
    unsafe { ffi::put(out, h) }
}

/// Frees a keyval (attributes using it keep it until deleted).
///
/// # Safety
/// `kv` points to an int.
unsafe fn free(kind: Kind, kv: *mut c_int) -> R<()> {
    // SAFETY: the caller's contract.
    let h = unsafe { ffi::get(kv) }?;
    keyval(h, kind)?;
    KEYVALS.remove(h);
    // SAFETY: the caller's contract.
    unsafe { ffi::put(kv, MPI_KEYVAL_INVALID) }
}

/// Writes an attribute lookup's result.
///
/// # Safety
/// `value` points to a `void *`, `flag` to an int.
pub(crate) unsafe fn put_value(value: *mut c_void, flag: *mut c_int, v: Option<usize>) -> R<()> {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(v) = v {
            ffi::put(value.cast::<usize>(), v)?;
        }
        ffi::put(flag, ffi::flag(v.is_some()))
    }
}

macro_rules! keyval_fns {
    ($kind:expr, $create:ident / $pcreate:ident, $free:ident / $pfree:ident) => {
        mpi_fn! {
            /// Creates a keyval (`MPI_*_create_keyval`).
            fn $create / $pcreate(copy: *const c_void, delete: *const c_void, keyval: *mut c_int, extra: *mut c_void) -> c_int {
                run(stringify!($create), On::World, || {
                    // SAFETY: MPI: `keyval` points to an int.
                    unsafe { create($kind, copy, delete, keyval, extra) }
                })
            }
        }
        mpi_fn! {
            /// Frees a keyval (`MPI_*_free_keyval`).
            fn $free / $pfree(keyval: *mut c_int) -> c_int {
                run(stringify!($free), On::World, || {
                    // SAFETY: MPI: `keyval` points to an int.
                    unsafe { free($kind, keyval) }
                })
            }
        }
    };
}

keyval_fns!(
    Kind::Comm,
    MPI_Comm_create_keyval / PMPI_Comm_create_keyval,
    MPI_Comm_free_keyval / PMPI_Comm_free_keyval
);
keyval_fns!(
    Kind::Comm,
    MPI_Keyval_create / PMPI_Keyval_create,
    MPI_Keyval_free / PMPI_Keyval_free
);
keyval_fns!(
    Kind::Type,
    MPI_Type_create_keyval / PMPI_Type_create_keyval,
    MPI_Type_free_keyval / PMPI_Type_free_keyval
);
keyval_fns!(
    Kind::Win,
    MPI_Win_create_keyval / PMPI_Win_create_keyval,
    MPI_Win_free_keyval / PMPI_Win_free_keyval
);

/// The type and window attribute calls.
macro_rules! attr_fns {
    ($kind:expr, $check:path, $on:expr,
     $set:ident / $pset:ident, $get:ident / $pget:ident, $del:ident / $pdel:ident) => {
        mpi_fn! {
            /// Sets an attribute (`MPI_*_set_attr`).
            fn $set / $pset(obj: c_int, keyval: c_int, value: *mut c_void) -> c_int {
                run(stringify!($set), $on(obj), || {
                    $check(obj)?;
                    set($kind, obj, keyval, value as usize)
                })
            }
        }
        mpi_fn! {
            /// Gets an attribute (`MPI_*_get_attr`).
            fn $get / $pget(obj: c_int, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
                run(stringify!($get), $on(obj), || {
                    $check(obj)?;
                    let v = get($kind, obj, keyval)?;
                    // SAFETY: MPI: `value` points to a `void *`, `flag` to an int.
                    unsafe { put_value(value, flag, v) }
                })
            }
        }
        mpi_fn! {
            /// Deletes an attribute (`MPI_*_delete_attr`).
            fn $del / $pdel(obj: c_int, keyval: c_int) -> c_int {
                run(stringify!($del), $on(obj), || {
                    $check(obj)?;
                    delete($kind, obj, keyval)
                })
            }
        }
    };
}

fn check_type(h: c_int) -> R<()> {
    crate::types::dtype(h).map(|_| ())
}

attr_fns!(
    Kind::Type,
    check_type,
    |_| On::World,
    MPI_Type_set_attr / PMPI_Type_set_attr,
    MPI_Type_get_attr / PMPI_Type_get_attr,
    MPI_Type_delete_attr / PMPI_Type_delete_attr
);
/// Forgets every keyval and attribute (finalize).
pub(crate) fn finalize() {
    KEYVALS.clear();
    with_attrs(|m| m.clear());
}
