//! # mpi-abi: `libmpich.so.12` over adi
//!
//! A C library with MPICH's ABI: a program compiled and linked by
//! Debian's `mpicc.mpich` (MPICH 4.0's `mpi.h`) loads this library instead
//! of MPICH's, unchanged, and runs on tmx. The library is a translation
//! layer: handles become `adi` objects ([`adi::Comm`], [`adi::Datatype`],
//! [`adi::Request`], ...), C buffers become slices, and every call goes to
//! `adi`'s Rust API, which does the communication. No transport logic and
//! no matching live here.
//!
//! - **ABI.** Handles and constants have the values of MPICH's `mpi.h`
//!   ([`abi`]): integer handles, predefined datatypes with their encoded
//!   sizes, `MPI_Status` as five `int`s, `MPI_BOTTOM` = 0,
//!   `MPI_IN_PLACE` = -1, MPICH's error classes. The file is
//!   `libmpich.so` with the SONAME `libmpich.so.12`; the loader finds it
//!   under that name or `libmpi.so.12` (`tmrun` makes both and puts them
//!   first on the ranks' `LD_LIBRARY_PATH`).
//! - **Profiling interface.** Every function is exported as `MPI_x` and
//!   `PMPI_x`.
//! - **Errors.** Arguments are checked; an error is raised on the error
//!   handler of the communicator (or window) of the call:
//!   `MPI_ERRORS_ARE_FATAL` by default, `MPI_ERRORS_RETURN` and user
//!   handlers honoured (`err.rs`).
//! - **Threads.** `MPI_Init_thread` provides the level required;
//!   `MPI_THREAD_SINGLE`/`FUNNELED` run `adi` without locks on its fast
//!   paths, `SERIALIZED`/`MULTIPLE` with them.
//! - **Time.** `MPI_Wtime` reads the vDSO clock (no system call).
//!
//! Not supported, with `MPI_ERR_UNSUPPORTED_OPERATION`: MPI-IO, dynamic
//! processes, the tools interface (`MPI_T_*`), Fortran bindings.
//!
//! `unsafe` code is the FFI boundary only: turning the C caller's pointers
//! into slices and values (`ffi.rs`) and calling the program's callbacks;
//! each block says why it is sound.

#![warn(missing_debug_implementations)]

#[macro_use]
mod ffi;

pub mod abi;
mod err;
mod handles;

mod attr;
mod coll;
mod comm;
mod group;
mod info;
mod init;
mod misc;
mod op;
mod p2p;
mod req;
mod slab;
mod topo;
mod types;
mod win;
