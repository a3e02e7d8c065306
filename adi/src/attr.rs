//! Predefined constants and the attributes that do not depend on a transport.
//!
//! Values follow MPICH's `mpi.h` where MPI leaves them to the implementation.
//! The attributes that depend on the launcher or the transports (`MPI_IO`,
//! the host name, `MPI_UNIVERSE_SIZE`, ...) come with the composition.

use tm_proto::TagLayout;

/// `MPI_ANY_SOURCE` (MPICH: -2).
pub const ANY_SOURCE: i32 = -2;

/// `MPI_PROC_NULL` (MPICH: -1): sends to it and receives from it complete at
/// once with no data.
pub const PROC_NULL: i32 = -1;

/// `MPI_ANY_TAG` (MPICH: -1).
pub const ANY_TAG: i32 = -1;

/// `MPI_UNDEFINED` (MPICH: -32766).
pub const UNDEFINED: i32 = -32766;

/// `MPI_TAG_UB`: the largest tag, fixed by the wire's tag layout
/// ([`TagLayout::DEFAULT`], 24 tag bits: 16 777 215).
pub const TAG_UB: i32 = TagLayout::DEFAULT.max_tag() as i32;

/// `MPI_WTIME_IS_GLOBAL`: `false`. [`wtime`](crate::wtime) reads each
/// process's own monotonic clock; clocks of different processes (and hosts)
/// are not synchronized.
pub const WTIME_IS_GLOBAL: bool = false;

/// `MPI_HOST`: `MPI_PROC_NULL`, as MPI requires when there is no host
/// process (tmx has none).
pub const HOST: i32 = PROC_NULL;

/// The message representation carried in the envelope (the paper's
/// `msgrep`). tmx is homogeneous: every process has the same data
/// representation, so data travels in the sender's native form, unconverted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum MsgRep {
    /// The sender's native representation, which is every receiver's
    /// (`MPID_MSGREP_RECEIVER`/`SENDER` collapse into this for a homogeneous
    /// device).
    #[default]
    Native,
}

/// Whether this device converts data between representations
/// (`MPID_HAS_HETEROGENEOUS`): no.
pub const HAS_HETEROGENEOUS: bool = false;

// MPI requires MPI_TAG_UB >= 32767; wildcards must not collide with ranks or
// tags, which are never negative. Checked at compile time.
const _: () = assert!(TAG_UB >= 32_767);
const _: () = assert!(ANY_SOURCE < 0 && PROC_NULL < 0 && ANY_SOURCE != PROC_NULL);
const _: () = assert!(ANY_TAG < 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_ub_is_the_layout_limit_and_at_least_mpi_minimum() {
        assert_eq!(TAG_UB, 16_777_215);
        assert_eq!(TAG_UB as u32, TagLayout::DEFAULT.max_tag());
    }

    #[test]
    fn mpich_values() {
        assert_eq!(
            (ANY_SOURCE, PROC_NULL, ANY_TAG, UNDEFINED),
            (-2, -1, -1, -32766)
        );
        assert_eq!(HOST, PROC_NULL);
    }
}
