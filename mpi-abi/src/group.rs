//! Groups (`MPI_Group`) and the communicators made from them
//! (`MPI_Comm_create`, `MPI_Comm_create_group`), over [`adi::Group`].

use crate::abi::*;
use crate::comm::{comm, put_new, world};
use crate::err::{err, run, On, R};
use crate::ffi;
use crate::handles::{prefix, Table};
use adi::Group;
use core::ffi::c_int;
use std::sync::Arc;

static GROUPS: Table<Group> = Table::new(prefix::GROUP);

/// The group of handle `h` (`MPI_ERR_GROUP` if invalid).
pub(crate) fn group(h: MPI_Group) -> R<Arc<Group>> {
    match h {
        MPI_GROUP_EMPTY => Ok(Arc::new(Group::empty())),
        _ => GROUPS
            .get(h)
            .ok_or_else(|| err(MPI_ERR_GROUP, "invalid group")),
    }
}

/// A handle for `g` (`MPI_GROUP_EMPTY` for an empty group, as MPICH).
pub(crate) fn new_group(g: Group) -> R<MPI_Group> {
    if g.size() == 0 {
        return Ok(MPI_GROUP_EMPTY);
    }
    GROUPS
        .insert(g)
        .ok_or_else(|| err(MPI_ERR_NO_MEM, "too many groups"))
}

/// Writes a new group handle.
///
/// # Safety
/// `out` points to an `MPI_Group`.
unsafe fn put_group(out: *mut MPI_Group, g: Group) -> R<()> {
    let h = new_group(g)?;
    // SAFETY: the caller's contract.
    unsafe { ffi::put(out, h) }
}

/// The ranks of an int array as group ranks.
///
/// # Safety
/// `p` holds `n` ints.
unsafe fn ranks<'a>(p: *const c_int, n: c_int) -> R<&'a [c_int]> {
    let n = ffi::count(n)?;
    // SAFETY: the caller's contract.
    unsafe { ffi::array(p, n) }
}

/// `(first, last, stride)` triples.
///
/// # Safety
/// `p` holds `n` triples.
unsafe fn ranges(p: *const [c_int; 3], n: c_int) -> R<Vec<adi::group::Range>> {
    let n = ffi::count(n)?;
    // SAFETY: the caller's contract.
    let a = unsafe { ffi::array(p, n) }?;
    Ok(a.iter().map(|t| (t[0], t[1], t[2])).collect())
}

mpi_fn! {
    /// `MPI_Comm_group`.
    fn MPI_Comm_group / PMPI_Comm_group(c: MPI_Comm, g: *mut MPI_Group) -> c_int {
        run("MPI_Comm_group", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `g` points to a handle.
            unsafe { put_group(g, o.group()) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_size`.
    fn MPI_Group_size / PMPI_Group_size(g: MPI_Group, size: *mut c_int) -> c_int {
        run("MPI_Group_size", On::World, || {
            let g = group(g)?;
            // SAFETY: MPI: `size` points to an int.
            unsafe { ffi::put(size, g.size()) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_rank` (`MPI_UNDEFINED` if not a member).
    fn MPI_Group_rank / PMPI_Group_rank(g: MPI_Group, rank: *mut c_int) -> c_int {
        run("MPI_Group_rank", On::World, || {
            let g = group(g)?;
            let me = world()?.comm.world_rank();
            // SAFETY: MPI: `rank` points to an int.
            unsafe { ffi::put(rank, g.rank_of_world(me).unwrap_or(MPI_UNDEFINED)) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_free`.
    fn MPI_Group_free / PMPI_Group_free(g: *mut MPI_Group) -> c_int {
        run("MPI_Group_free", On::World, || {
            // SAFETY: MPI: `g` points to a handle.
            let h = unsafe { ffi::get(g) }?;
            group(h)?;
            GROUPS.remove(h);
            // SAFETY: as above.
            unsafe { ffi::put(g, MPI_GROUP_NULL) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_translate_ranks`.
    fn MPI_Group_translate_ranks / PMPI_Group_translate_ranks(g1: MPI_Group, n: c_int, r1: *const c_int, g2: MPI_Group, r2: *mut c_int) -> c_int {
        run("MPI_Group_translate_ranks", On::World, || {
            let (a, b) = (group(g1)?, group(g2)?);
            // SAFETY: MPI: `r1` holds `n` ranks, `r2` room for `n`.
            let from = unsafe { ranks(r1, n) }?;
            let to = a.try_translate_ranks(from, &b)?;
            // SAFETY: as above.
            let out = unsafe { ffi::array_mut(r2, to.len()) }?;
            out.copy_from_slice(&to);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Group_compare`.
    fn MPI_Group_compare / PMPI_Group_compare(g1: MPI_Group, g2: MPI_Group, result: *mut c_int) -> c_int {
        run("MPI_Group_compare", On::World, || {
            let r = group(g1)?.compare(&*group(g2)?).code();
            // SAFETY: MPI: `result` points to an int.
            unsafe { ffi::put(result, r) }
        })
    }
}

macro_rules! set_op {
    ($(#[$m:meta])* $mpi:ident / $pmpi:ident, $f:ident) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi(g1: MPI_Group, g2: MPI_Group, out: *mut MPI_Group) -> c_int {
                run(stringify!($mpi), On::World, || {
                    let g = group(g1)?.$f(&*group(g2)?);
                    // SAFETY: MPI: `out` points to a handle.
                    unsafe { put_group(out, g) }
                })
            }
        }
    };
}

set_op!(
    /// `MPI_Group_union`.
    MPI_Group_union / PMPI_Group_union, union);
set_op!(
    /// `MPI_Group_intersection`.
    MPI_Group_intersection / PMPI_Group_intersection, intersection);
set_op!(
    /// `MPI_Group_difference`.
    MPI_Group_difference / PMPI_Group_difference, difference);

mpi_fn! {
    /// `MPI_Group_incl`.
    fn MPI_Group_incl / PMPI_Group_incl(g: MPI_Group, n: c_int, r: *const c_int, out: *mut MPI_Group) -> c_int {
        run("MPI_Group_incl", On::World, || {
            // SAFETY: MPI: `r` holds `n` ranks.
            let rs = unsafe { ranks(r, n) }?;
            let ng = group(g)?.incl(rs)?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { put_group(out, ng) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_excl`.
    fn MPI_Group_excl / PMPI_Group_excl(g: MPI_Group, n: c_int, r: *const c_int, out: *mut MPI_Group) -> c_int {
        run("MPI_Group_excl", On::World, || {
            // SAFETY: MPI: `r` holds `n` ranks.
            let rs = unsafe { ranks(r, n) }?;
            let ng = group(g)?.excl(rs)?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { put_group(out, ng) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_range_incl`.
    fn MPI_Group_range_incl / PMPI_Group_range_incl(g: MPI_Group, n: c_int, r: *const [c_int; 3], out: *mut MPI_Group) -> c_int {
        run("MPI_Group_range_incl", On::World, || {
            // SAFETY: MPI: `r` holds `n` triples.
            let rs = unsafe { ranges(r, n) }?;
            let ng = group(g)?.range_incl(&rs)?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { put_group(out, ng) }
        })
    }
}

mpi_fn! {
    /// `MPI_Group_range_excl`.
    fn MPI_Group_range_excl / PMPI_Group_range_excl(g: MPI_Group, n: c_int, r: *const [c_int; 3], out: *mut MPI_Group) -> c_int {
        run("MPI_Group_range_excl", On::World, || {
            // SAFETY: MPI: `r` holds `n` triples.
            let rs = unsafe { ranges(r, n) }?;
            let ng = group(g)?.range_excl(&rs)?;
            // SAFETY: MPI: `out` points to a handle.
            unsafe { put_group(out, ng) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_create`: collective over `c`.
    fn MPI_Comm_create / PMPI_Comm_create(c: MPI_Comm, g: MPI_Group, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_create", On::Comm(c), || {
            let o = comm(c)?;
            let g = group(g)?;
            let nc = o.intra()?.create(&g)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { put_new(newcomm, nc, &o) }
        })
    }
}

mpi_fn! {
    /// `MPI_Comm_create_group`: collective over the group's members.
    fn MPI_Comm_create_group / PMPI_Comm_create_group(c: MPI_Comm, g: MPI_Group, tag: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Comm_create_group", On::Comm(c), || {
            let o = comm(c)?;
            let g = group(g)?;
            o.intra()?;
            let me = o.comm.world_rank();
            if g.rank_of_world(me).is_none() {
                // MPI: a process outside the group gets MPI_COMM_NULL.
                // SAFETY: MPI: `newcomm` points to a handle.
                return unsafe { ffi::put(newcomm, MPI_COMM_NULL) };
            }
            let nc = o.comm.create_group(&g, tag)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { put_new(newcomm, Some(nc), &o) }
        })
    }
}

/// Drops every group (finalize).
pub(crate) fn finalize() {
    GROUPS.clear();
}
