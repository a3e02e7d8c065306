//! The rest of the environment: `MPI_Alloc_mem`/`MPI_Free_mem`,
//! generalized requests, the status conversions of the language
//! interoperability chapter, and the calls of the chapters tmx does not
//! support, which fail with `MPI_ERR_UNSUPPORTED_OPERATION`:
//!
//! - **dynamic processes** (`MPI_Comm_spawn`, ports, name publishing,
//!   `MPI_Comm_join`): raised on `MPI_COMM_WORLD` (fatal by default, with
//!   a message naming the call). `MPI_Comm_get_parent` gives
//!   `MPI_COMM_NULL` (no process is spawned) and `MPI_Comm_disconnect`
//!   frees the communicator;
//! - **MPI-IO** (`MPI_File_*`, `MPI_Register_datarep`): returned (a file's
//!   default error handler is `MPI_ERRORS_RETURN`);
//! - **the tools interface** (`MPI_T_*`): `MPI_T_init_thread` returns
//!   `MPI_T_ERR_CANNOT_INIT`, the others `MPI_T_ERR_NOT_INITIALIZED`;
//! - **Fortran** (`MPI_Type_create_f90_*`, `MPI_File_c2f`/`f2c`).

use crate::abi::*;
use crate::err::{check, err, run, On};
use crate::ffi;
use core::ffi::{c_int, c_void};
use std::alloc::Layout;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Blocks handed out by `MPI_Alloc_mem`, by address.
static ALLOCS: Mutex<Option<HashMap<usize, Layout>>> = Mutex::new(None);

mpi_fn! {
    /// `MPI_Alloc_mem`: memory aligned to 64 bytes.
    fn MPI_Alloc_mem / PMPI_Alloc_mem(size: MPI_Aint, _info: MPI_Info, baseptr: *mut c_void) -> c_int {
        run("MPI_Alloc_mem", On::World, || {
            let n = usize::try_from(size).map_err(|_| err(MPI_ERR_ARG, "negative size"))?;
            let layout = Layout::from_size_align(n.max(1), 64).map_err(|_| err(MPI_ERR_NO_MEM, "size too large"))?;
            // SAFETY: `layout` has a nonzero size.
            let p = unsafe { std::alloc::alloc(layout) };
            check(!p.is_null(), MPI_ERR_NO_MEM, "out of memory")?;
            ALLOCS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(HashMap::new)
                .insert(p as usize, layout);
            // SAFETY: MPI: `baseptr` points to a `void *`.
            unsafe { ffi::put(baseptr.cast::<*mut u8>(), p) }
        })
    }
}

mpi_fn! {
    /// `MPI_Free_mem`.
    fn MPI_Free_mem / PMPI_Free_mem(base: *mut c_void) -> c_int {
        run("MPI_Free_mem", On::World, || {
            let layout = ALLOCS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(HashMap::new)
                .remove(&(base as usize))
                .ok_or_else(|| err(MPI_ERR_BASE, "not memory from MPI_Alloc_mem"))?;
            // SAFETY: `base` was allocated by `MPI_Alloc_mem` with `layout`
            // and is freed once (its entry is gone).
            unsafe { std::alloc::dealloc(base.cast(), layout) };
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Status_c2f`: `MPI_Fint` is `int`, so the five ints are copied.
    fn MPI_Status_c2f / PMPI_Status_c2f(c: *const MPI_Status, f: *mut MPI_Fint) -> c_int {
        run("MPI_Status_c2f", On::World, || {
            // SAFETY: MPI: `c` points to a status, `f` to five MPI_Fints.
            unsafe {
                let s = ffi::get(c)?;
                ffi::put(f.cast::<MPI_Status>(), s)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Status_f2c`.
    fn MPI_Status_f2c / PMPI_Status_f2c(f: *const MPI_Fint, c: *mut MPI_Status) -> c_int {
        run("MPI_Status_f2c", On::World, || {
            // SAFETY: MPI: `f` points to five MPI_Fints, `c` to a status.
            unsafe {
                let s = ffi::get(f.cast::<MPI_Status>())?;
                ffi::put(c, s)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_get_parent`: no process of a tmx job was spawned.
    fn MPI_Comm_get_parent / PMPI_Comm_get_parent(parent: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_get_parent", On::World, || {
            // SAFETY: MPI: `parent` points to a handle.
            unsafe { ffi::put(parent, MPI_COMM_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_disconnect`: frees the communicator (what it means for a
    /// communicator that connects no separate jobs).
    fn MPI_Comm_disconnect / PMPI_Comm_disconnect(c: *mut MPI_Comm) -> c_int {
        // SAFETY: MPI: `c` points to a handle, as for MPI_Comm_free.
        unsafe { crate::comm::PMPI_Comm_free(c) }
    }
}

/// Defines calls of a chapter tmx does not support: raised on
/// `MPI_COMM_WORLD` with `MPI_ERR_UNSUPPORTED_OPERATION`.
macro_rules! unsupported {
    ($($mpi:ident / $pmpi:ident),* $(,)?) => {$(
        /// Not supported by tmx: `MPI_ERR_UNSUPPORTED_OPERATION`.
        #[no_mangle]
        pub extern "C" fn $mpi() -> c_int {
            $pmpi()
        }

        /// Not supported by tmx (profiling name).
        #[no_mangle]
        pub extern "C" fn $pmpi() -> c_int {
            run(stringify!($mpi), On::World, || {
                Err(err(
                    MPI_ERR_UNSUPPORTED_OPERATION,
                    concat!(stringify!($mpi), " is not supported by tmx (dynamic processes and Fortran bindings are out of scope)"),
                ))
            })
        }
    )*};
}

unsupported!(
    MPI_Comm_spawn / PMPI_Comm_spawn,
    MPI_Comm_spawn_multiple / PMPI_Comm_spawn_multiple,
    MPI_Comm_accept / PMPI_Comm_accept,
    MPI_Comm_connect / PMPI_Comm_connect,
    MPI_Comm_join / PMPI_Comm_join,
    MPI_Open_port / PMPI_Open_port,
    MPI_Close_port / PMPI_Close_port,
    MPI_Publish_name / PMPI_Publish_name,
    MPI_Unpublish_name / PMPI_Unpublish_name,
    MPI_Lookup_name / PMPI_Lookup_name,
    MPI_Type_create_f90_integer / PMPI_Type_create_f90_integer,
    MPI_Type_create_f90_real / PMPI_Type_create_f90_real,
    MPI_Type_create_f90_complex / PMPI_Type_create_f90_complex,
);

/// Defines MPI-IO calls: `MPI_ERR_UNSUPPORTED_OPERATION`, returned (a
/// file's default handler is `MPI_ERRORS_RETURN`).
macro_rules! no_io {
    ($($mpi:ident / $pmpi:ident),* $(,)?) => {$(
        /// MPI-IO is not supported by tmx: `MPI_ERR_UNSUPPORTED_OPERATION`.
        #[no_mangle]
        pub extern "C" fn $mpi() -> c_int {
            MPI_ERR_UNSUPPORTED_OPERATION
        }

        /// MPI-IO is not supported by tmx (profiling name).
        #[no_mangle]
        pub extern "C" fn $pmpi() -> c_int {
            MPI_ERR_UNSUPPORTED_OPERATION
        }
    )*};
}

no_io!(
    MPI_File_open / PMPI_File_open,
    MPI_File_close / PMPI_File_close,
    MPI_File_delete / PMPI_File_delete,
    MPI_File_set_size / PMPI_File_set_size,
    MPI_File_preallocate / PMPI_File_preallocate,
    MPI_File_get_size / PMPI_File_get_size,
    MPI_File_get_group / PMPI_File_get_group,
    MPI_File_get_amode / PMPI_File_get_amode,
    MPI_File_set_info / PMPI_File_set_info,
    MPI_File_get_info / PMPI_File_get_info,
    MPI_File_set_view / PMPI_File_set_view,
    MPI_File_get_view / PMPI_File_get_view,
    MPI_File_read_at / PMPI_File_read_at,
    MPI_File_read_at_all / PMPI_File_read_at_all,
    MPI_File_write_at / PMPI_File_write_at,
    MPI_File_write_at_all / PMPI_File_write_at_all,
    MPI_File_iread_at / PMPI_File_iread_at,
    MPI_File_iwrite_at / PMPI_File_iwrite_at,
    MPI_File_iread_at_all / PMPI_File_iread_at_all,
    MPI_File_iwrite_at_all / PMPI_File_iwrite_at_all,
    MPI_File_read / PMPI_File_read,
    MPI_File_read_all / PMPI_File_read_all,
    MPI_File_write / PMPI_File_write,
    MPI_File_write_all / PMPI_File_write_all,
    MPI_File_iread / PMPI_File_iread,
    MPI_File_iwrite / PMPI_File_iwrite,
    MPI_File_iread_all / PMPI_File_iread_all,
    MPI_File_iwrite_all / PMPI_File_iwrite_all,
    MPI_File_seek / PMPI_File_seek,
    MPI_File_get_position / PMPI_File_get_position,
    MPI_File_get_byte_offset / PMPI_File_get_byte_offset,
    MPI_File_read_shared / PMPI_File_read_shared,
    MPI_File_write_shared / PMPI_File_write_shared,
    MPI_File_iread_shared / PMPI_File_iread_shared,
    MPI_File_iwrite_shared / PMPI_File_iwrite_shared,
    MPI_File_read_ordered / PMPI_File_read_ordered,
    MPI_File_write_ordered / PMPI_File_write_ordered,
    MPI_File_seek_shared / PMPI_File_seek_shared,
    MPI_File_get_position_shared / PMPI_File_get_position_shared,
    MPI_File_read_at_all_begin / PMPI_File_read_at_all_begin,
    MPI_File_read_at_all_end / PMPI_File_read_at_all_end,
    MPI_File_write_at_all_begin / PMPI_File_write_at_all_begin,
    MPI_File_write_at_all_end / PMPI_File_write_at_all_end,
    MPI_File_read_all_begin / PMPI_File_read_all_begin,
    MPI_File_read_all_end / PMPI_File_read_all_end,
    MPI_File_write_all_begin / PMPI_File_write_all_begin,
    MPI_File_write_all_end / PMPI_File_write_all_end,
    MPI_File_read_ordered_begin / PMPI_File_read_ordered_begin,
    MPI_File_read_ordered_end / PMPI_File_read_ordered_end,
    MPI_File_write_ordered_begin / PMPI_File_write_ordered_begin,
    MPI_File_write_ordered_end / PMPI_File_write_ordered_end,
    MPI_File_get_type_extent / PMPI_File_get_type_extent,
    MPI_File_set_atomicity / PMPI_File_set_atomicity,
    MPI_File_get_atomicity / PMPI_File_get_atomicity,
    MPI_File_sync / PMPI_File_sync,
    MPI_File_set_errhandler / PMPI_File_set_errhandler,
    MPI_File_get_errhandler / PMPI_File_get_errhandler,
    MPI_File_call_errhandler / PMPI_File_call_errhandler,
    MPI_Register_datarep / PMPI_Register_datarep,
);

/// `MPI_File_c2f`: no file exists; 0.
#[no_mangle]
pub extern "C" fn MPI_File_c2f(_f: *mut c_void) -> MPI_Fint {
    0
}

/// `MPI_File_f2c`: `MPI_FILE_NULL`.
#[no_mangle]
pub extern "C" fn MPI_File_f2c(_f: MPI_Fint) -> *mut c_void {
    core::ptr::null_mut()
}

/// `MPI_T_ERR_NOT_INITIALIZED`.
const MPI_T_ERR_NOT_INITIALIZED: c_int = 60;
/// `MPI_T_ERR_CANNOT_INIT`.
const MPI_T_ERR_CANNOT_INIT: c_int = 61;

/// `MPI_T_init_thread`: the tools interface is not provided.
#[no_mangle]
pub extern "C" fn MPI_T_init_thread(_required: c_int, _provided: *mut c_int) -> c_int {
    MPI_T_ERR_CANNOT_INIT
}

/// `MPI_T_init_thread` (profiling name).
#[no_mangle]
pub extern "C" fn PMPI_T_init_thread(_required: c_int, _provided: *mut c_int) -> c_int {
    MPI_T_ERR_CANNOT_INIT
}

/// Defines the tools-interface calls: `MPI_T_ERR_NOT_INITIALIZED`.
macro_rules! no_tools {
    ($($mpi:ident / $pmpi:ident),* $(,)?) => {$(
        /// The tools interface is not provided: `MPI_T_ERR_NOT_INITIALIZED`.
        #[no_mangle]
        pub extern "C" fn $mpi() -> c_int {
            MPI_T_ERR_NOT_INITIALIZED
        }

        /// The tools interface is not provided (profiling name).
        #[no_mangle]
        pub extern "C" fn $pmpi() -> c_int {
            MPI_T_ERR_NOT_INITIALIZED
        }
    )*};
}

no_tools!(
    MPI_T_finalize / PMPI_T_finalize,
    MPI_T_enum_get_info / PMPI_T_enum_get_info,
    MPI_T_enum_get_item / PMPI_T_enum_get_item,
    MPI_T_cvar_get_num / PMPI_T_cvar_get_num,
    MPI_T_cvar_get_info / PMPI_T_cvar_get_info,
    MPI_T_cvar_get_index / PMPI_T_cvar_get_index,
    MPI_T_cvar_handle_alloc / PMPI_T_cvar_handle_alloc,
    MPI_T_cvar_handle_free / PMPI_T_cvar_handle_free,
    MPI_T_cvar_read / PMPI_T_cvar_read,
    MPI_T_cvar_write / PMPI_T_cvar_write,
    MPI_T_pvar_get_num / PMPI_T_pvar_get_num,
    MPI_T_pvar_get_info / PMPI_T_pvar_get_info,
    MPI_T_pvar_get_index / PMPI_T_pvar_get_index,
    MPI_T_pvar_session_create / PMPI_T_pvar_session_create,
    MPI_T_pvar_session_free / PMPI_T_pvar_session_free,
    MPI_T_pvar_handle_alloc / PMPI_T_pvar_handle_alloc,
    MPI_T_pvar_handle_free / PMPI_T_pvar_handle_free,
    MPI_T_pvar_start / PMPI_T_pvar_start,
    MPI_T_pvar_stop / PMPI_T_pvar_stop,
    MPI_T_pvar_read / PMPI_T_pvar_read,
    MPI_T_pvar_write / PMPI_T_pvar_write,
    MPI_T_pvar_reset / PMPI_T_pvar_reset,
    MPI_T_pvar_readreset / PMPI_T_pvar_readreset,
    MPI_T_category_get_num / PMPI_T_category_get_num,
    MPI_T_category_get_info / PMPI_T_category_get_info,
    MPI_T_category_get_index / PMPI_T_category_get_index,
    MPI_T_category_get_cvars / PMPI_T_category_get_cvars,
    MPI_T_category_get_pvars / PMPI_T_category_get_pvars,
    MPI_T_category_get_categories / PMPI_T_category_get_categories,
    MPI_T_category_changed / PMPI_T_category_changed,
);
