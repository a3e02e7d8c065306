//! Windows (`MPI_Win`): their error handlers and predefined attributes.
//! Window objects and the RMA calls come with `adi`'s window surface.

use crate::abi::*;
use crate::err::{err, Handler, R};
use core::ffi::c_int;

/// The error handler of window `w`, if it is a live window (none yet:
/// no window can be created through this library so far).
pub(crate) fn errhandler_of(_w: MPI_Win) -> Option<Handler> {
    None
}

/// `MPI_ERR_WIN` unless `w` is a live window.
pub(crate) fn check_win(_w: MPI_Win) -> R<()> {
    Err(err(MPI_ERR_WIN, "invalid window"))
}

/// The value (a pointer) of a predefined window attribute.
pub(crate) fn predefined_attr(_w: MPI_Win, _keyval: c_int) -> Option<usize> {
    None
}
