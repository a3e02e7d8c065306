//! The collectives on an intercommunicator: the same packing as
//! [`super`]'s intracommunicator forms, over `adi::InterComm`'s
//! collectives. Roots are `MPI_ROOT` (this process), `MPI_PROC_NULL`
//! (another member of the root's group) or a rank of the remote group;
//! the per-rank arrays of the rooted and all- forms describe the remote
//! group, those of reduce-scatter the local group. `MPI_IN_PLACE` is not
//! defined on intercommunicators: `MPI_ERR_BUFFER`.

use super::{go, nothing, unpack_into, Buf};
use crate::abi::*;
use crate::err::{check, err, R};
use crate::ffi;
use crate::op::op_for;
use crate::req::Finish;
use crate::types::dtype;
use adi::{InterComm, InterRoot};
use core::ffi::{c_int, c_void};

/// The root argument of a rooted call.
fn root_of(ic: &InterComm, root: c_int) -> R<InterRoot> {
    match root {
        MPI_ROOT => Ok(InterRoot::Root),
        MPI_PROC_NULL => Ok(InterRoot::Null),
        r if (0..ic.remote_size()).contains(&r) => Ok(InterRoot::Remote(r)),
        _ => Err(err(MPI_ERR_ROOT, "invalid root")),
    }
}

fn not_in_place(buf: *const c_void) -> R<()> {
    check(
        !ffi::in_place(buf),
        MPI_ERR_BUFFER,
        "MPI_IN_PLACE is not defined on an intercommunicator",
    )
}

/// The data of `count` elements at `addr`.
///
/// # Safety
/// The program's buffer holds them.
unsafe fn packed(addr: *const c_void, count: c_int, datatype: MPI_Datatype) -> R<Vec<u8>> {
    let b = Buf::new(addr, count, datatype)?;
    // SAFETY: the caller's contract.
    unsafe { b.pack(b.addr) }
}

/// A finish that unpacks blocks `blocks[i]` of the result into `counts[i]`
/// elements at displacement `displs[i]` (extents) of `rb`.
fn unpack_blocks(rb: Buf, counts: &[c_int], displs: &[c_int], blocks: &[(usize, usize)]) -> Finish {
    let (counts, displs, blocks) = (counts.to_vec(), displs.to_vec(), blocks.to_vec());
    Finish::new(move |out: &[u8]| {
        for (i, &(off, len)) in blocks.iter().enumerate() {
            let b = Buf {
                count: counts[i] as i64,
                ..rb.clone()
            };
            // SAFETY: MPI: the receive buffer has room for `counts[i]`
            // elements at `displs[i]`, valid until the call (or its
            // request) completes: now.
            unsafe { b.unpack(rb.at(displs[i] as i64), &out[off..off + len]) }?;
        }
        Ok(())
    })
}

/// Blocks of `counts[i]` elements of `size` bytes, one after the other.
fn blocks_of(counts: &[c_int], size: usize) -> R<Vec<(usize, usize)>> {
    let sizes: Vec<usize> = counts
        .iter()
        .map(|&n| ffi::count(n).map(|n| n * size))
        .collect::<R<_>>()?;
    Ok(super::consecutive(&sizes))
}

/// # Safety
/// `nb` as in [`go`].
pub(super) unsafe fn barrier(ic: &InterComm, c: MPI_Comm, nb: Option<*mut MPI_Request>) -> R<()> {
    // SAFETY: the caller's contract.
    unsafe {
        go(
            c,
            nb,
            || {
                ic.barrier()?;
                Ok(Vec::new())
            },
            || Ok(ic.ibarrier()?),
            nothing(),
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Bcast`'s buffer; `nb` as in [`go`].
pub(super) unsafe fn bcast(
    ic: &InterComm,
    buf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let root = root_of(ic, root)?;
    let b = Buf::new(buf, count, datatype)?;
    let (data, finish) = match root {
        // SAFETY: MPI: the root's buffer holds the data.
        InterRoot::Root => (unsafe { b.pack(b.addr) }?, nothing()),
        InterRoot::Null => (Vec::new(), nothing()),
        InterRoot::Remote(_) => (
            vec![0u8; b.packed_len()?],
            unpack_into(buf, count, datatype, true)?,
        ),
    };
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut d = data.clone();
                ic.bcast(&mut d, root)?;
                Ok(d)
            },
            || Ok(ic.ibcast(data.clone(), root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Reduce`'s buffers; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce(
    ic: &InterComm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let root = root_of(ic, root)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    let (send, finish) = match root {
        InterRoot::Root => {
            not_in_place(recvbuf)?;
            let b = Buf::new(recvbuf, count, datatype)?;
            (
                vec![0u8; b.packed_len()?],
                unpack_into(recvbuf, count, datatype, true)?,
            )
        }
        InterRoot::Null => (Vec::new(), nothing()),
        InterRoot::Remote(_) => {
            not_in_place(sendbuf)?;
            // SAFETY: MPI: the send buffer holds `count` elements.
            (unsafe { packed(sendbuf, count, datatype) }?, nothing())
        }
    };
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; send.len()];
                ic.reduce_packed(&send, &mut out, &dt, &aop, root)?;
                Ok(out)
            },
            || Ok(ic.ireduce_packed(send.clone(), &dt, &aop, root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Allreduce`'s buffers; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn allreduce(
    ic: &InterComm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: MPI_Datatype,
    op: MPI_Op,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    not_in_place(sendbuf)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    // SAFETY: MPI: the send buffer holds `count` elements.
    let send = unsafe { packed(sendbuf, count, datatype) }?;
    let finish = unpack_into(recvbuf, count, datatype, true)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; send.len()];
                ic.allreduce_packed(&send, &mut out, &dt, &aop)?;
                Ok(out)
            },
            || Ok(ic.iallreduce_packed(send.clone(), &dt, &aop)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for the buffers (`rcounts`: one count per local
/// rank); `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce_scatter(
    ic: &InterComm,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    datatype: MPI_Datatype,
    op: MPI_Op,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    not_in_place(sendbuf)?;
    let t = dtype(datatype)?;
    let aop = op_for(op, &t, datatype)?;
    let blocks = blocks_of(rcounts, t.dt.size())?;
    let total: usize = rcounts.iter().map(|&n| n as usize).sum();
    let total = c_int::try_from(total).map_err(|_| err(MPI_ERR_COUNT, "total count overflows"))?;
    // SAFETY: MPI: the send buffer holds every local block.
    let send = unsafe { packed(sendbuf, total, datatype) }?;
    let mine = rcounts[ic.rank() as usize];
    let finish = unpack_into(recvbuf, mine, datatype, true)?;
    let dt = t.dt.clone();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; blocks[ic.rank() as usize].1];
                ic.reduce_scatter_packed(&send, &mut out, &blocks, &dt, &aop)?;
                Ok(out)
            },
            || Ok(ic.ireduce_scatter_packed(send.clone(), blocks.clone(), &dt, &aop)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Gatherv`'s arguments (at the root, `rcounts`
/// and `displs` hold one value per remote rank); `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn gatherv(
    ic: &InterComm,
    sendbuf: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    displs: &[c_int],
    rtype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let root = root_of(ic, root)?;
    let (send, blocks, finish) = match root {
        InterRoot::Root => {
            not_in_place(recvbuf)?;
            let rb = Buf::new(recvbuf, 0, rtype)?;
            let blocks = blocks_of(rcounts, rb.t.dt.size())?;
            let f = unpack_blocks(rb, rcounts, displs, &blocks);
            (Vec::new(), blocks, f)
        }
        InterRoot::Null => (Vec::new(), Vec::new(), nothing()),
        InterRoot::Remote(_) => {
            not_in_place(sendbuf)?;
            // SAFETY: MPI: the send buffer holds `scount` elements.
            let s = unsafe { packed(sendbuf, scount, stype) }?;
            (s, Vec::new(), nothing())
        }
    };
    let total: usize = blocks.iter().map(|b| b.1).sum();
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                ic.gatherv(&send, &mut out, &blocks, root)?;
                Ok(out)
            },
            || Ok(ic.igatherv(send.clone(), vec![0u8; total], blocks.clone(), root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Scatterv`'s arguments; `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scatterv(
    ic: &InterComm,
    sendbuf: *const c_void,
    scounts: &[c_int],
    displs: &[c_int],
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcount: c_int,
    rtype: MPI_Datatype,
    root: c_int,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let root = root_of(ic, root)?;
    let (send, blocks, rlen, finish) = match root {
        InterRoot::Root => {
            not_in_place(sendbuf)?;
            let sb = Buf::new(sendbuf, 0, stype)?;
            let mut data = Vec::new();
            let mut sizes = Vec::new();
            for (&n, &d) in scounts.iter().zip(displs) {
                let b = Buf {
                    count: ffi::count(n)? as i64,
                    ..sb.clone()
                };
                // SAFETY: MPI: the root's send buffer holds `scounts[i]`
                // elements at `displs[i]`.
                let p = unsafe { b.pack(sb.at(d as i64)) }?;
                sizes.push(p.len());
                data.extend_from_slice(&p);
            }
            (data, super::consecutive(&sizes), 0, nothing())
        }
        InterRoot::Null => (Vec::new(), Vec::new(), 0, nothing()),
        InterRoot::Remote(_) => {
            not_in_place(recvbuf)?;
            let rb = Buf::new(recvbuf, rcount, rtype)?;
            (
                Vec::new(),
                Vec::new(),
                rb.packed_len()?,
                unpack_into(recvbuf, rcount, rtype, true)?,
            )
        }
    };
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; rlen];
                let n = ic.scatterv(&send, &blocks, &mut out, root)?;
                out.truncate(n);
                Ok(out)
            },
            || Ok(ic.iscatterv(send.clone(), blocks.clone(), rlen, root)?),
            finish,
        )
    }
}

/// # Safety
/// MPI's contract for `MPI_Allgatherv`'s arguments (`rcounts`, `displs`:
/// one value per remote rank); `nb` as in [`go`].
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn allgatherv(
    ic: &InterComm,
    sendbuf: *const c_void,
    scount: c_int,
    stype: MPI_Datatype,
    recvbuf: *mut c_void,
    rcounts: &[c_int],
    displs: &[c_int],
    rtype: MPI_Datatype,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    not_in_place(sendbuf)?;
    let rb = Buf::new(recvbuf, 0, rtype)?;
    let blocks = blocks_of(rcounts, rb.t.dt.size())?;
    // SAFETY: MPI: the send buffer holds `scount` elements.
    let send = unsafe { packed(sendbuf, scount, stype) }?;
    let total: usize = blocks.iter().map(|b| b.1).sum();
    let finish = unpack_blocks(rb, rcounts, displs, &blocks);
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                ic.allgatherv(&send, &mut out, &blocks)?;
                Ok(out)
            },
            || Ok(ic.iallgatherv(send.clone(), vec![0u8; total], blocks.clone())?),
            finish,
        )
    }
}

/// An all-to-all between the groups (both sides: one block per remote
/// rank).
///
/// # Safety
/// MPI's contract for both buffers; `nb` as in [`go`].
pub(super) unsafe fn alltoall_sides(
    ic: &InterComm,
    send: super::Side,
    recv: super::Side,
    c: MPI_Comm,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let sblocks = send.blocks()?;
    let rblocks = recv.blocks()?;
    // SAFETY: the caller's contract.
    let data = unsafe { send.pack() }?;
    let total: usize = rblocks.iter().map(|b| b.1).sum();
    let finish = Finish::new(move |out: &[u8]| {
        // SAFETY: MPI: the receive buffer stays valid until the call (or
        // its request) completes: now.
        unsafe { recv.unpack(out) }
    });
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                ic.alltoallv(&data, &sblocks, &mut out, &rblocks)?;
                Ok(out)
            },
            || {
                Ok(ic.ialltoallv(
                    data.clone(),
                    sblocks.clone(),
                    vec![0u8; total],
                    rblocks.clone(),
                )?)
            },
            finish,
        )
    }
}
