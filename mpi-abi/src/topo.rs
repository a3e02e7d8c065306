//! Process topologies and the neighbourhood collectives, over
//! [`adi::topo`]: the topology is kept with the communicator; the
//! neighbourhood collectives pack their blocks and run `adi`'s
//! neighbourhood `alltoallv`.

use crate::abi::*;
use crate::coll::{equal, go, side_v, side_w, Side};
use crate::comm::{comm, new_with_topo, CommObj};
use crate::err::{check, err, run, On, R};
use crate::ffi;
use crate::req::Finish;
use adi::topo::{dims_create, Topology};
use core::ffi::{c_int, c_void};
use std::sync::Arc;

/// Storage that `MPI_UNWEIGHTED` points to.
static UNWEIGHTED_OBJ: c_int = 0x46618;
/// Storage that `MPI_WEIGHTS_EMPTY` points to.
static WEIGHTS_EMPTY_OBJ: c_int = 0x22284;

/// A pointer constant exported to C.
#[repr(transparent)]
#[derive(Debug)]
pub struct ConstPtr(*const c_int);

// SAFETY: the pointer is a constant address of immutable statics; it is
// never written through and only compared by programs.
unsafe impl Sync for ConstPtr {}

/// `MPI_UNWEIGHTED`.
#[no_mangle]
pub static MPI_UNWEIGHTED: ConstPtr = ConstPtr(&UNWEIGHTED_OBJ);
/// `MPI_WEIGHTS_EMPTY`.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: ConstPtr = ConstPtr(&WEIGHTS_EMPTY_OBJ);

fn unweighted(p: *const c_int) -> bool {
    p.is_null() || p == MPI_UNWEIGHTED.0
}

/// The topology of communicator `c` (`MPI_ERR_TOPOLOGY` without one).
fn topo(c: MPI_Comm) -> R<(Arc<CommObj>, Arc<Topology>)> {
    let o = comm(c)?;
    let t = o.meta().topo.clone();
    let t = t.ok_or_else(|| err(MPI_ERR_TOPOLOGY, "the communicator has no topology"))?;
    Ok((o, t))
}

fn cart(c: MPI_Comm) -> R<(Arc<CommObj>, Arc<Topology>)> {
    let (o, t) = topo(c)?;
    check(
        matches!(*t, Topology::Cart { .. }),
        MPI_ERR_TOPOLOGY,
        "not a Cartesian topology",
    )?;
    Ok((o, t))
}

/// `n` ints.
///
/// # Safety
/// `p` holds `n` ints.
unsafe fn ints<'a>(p: *const c_int, n: c_int) -> R<&'a [c_int]> {
    let n = ffi::count(n)?;
    // SAFETY: the caller's contract.
    unsafe { ffi::array(p, n) }
}

/// Writes `v` into the first entries of an output array of `max`.
///
/// # Safety
/// `p` has room for `max` ints.
unsafe fn put_ints(p: *mut c_int, max: c_int, v: &[i32]) -> R<()> {
    let n = v.len().min(ffi::count(max)?);
    // SAFETY: the caller's contract.
    let out = unsafe { ffi::array_mut(p, n) }?;
    out.copy_from_slice(&v[..n]);
    Ok(())
}

mpi_fn! {
    /// `MPI_Dims_create`.
    fn MPI_Dims_create / PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
        run("MPI_Dims_create", On::World, || {
            check(ndims >= 0, MPI_ERR_DIMS, "negative ndims")?;
            // SAFETY: MPI: `dims` holds `ndims` ints.
            let d = unsafe { ffi::array_mut(dims, ndims as usize) }?;
            let out = dims_create(nnodes, d)?;
            d.copy_from_slice(&out);
            Ok(())
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_create` (ranks are not reordered).
    fn MPI_Cart_create / PMPI_Cart_create(c: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, _reorder: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Cart_create", On::Comm(c), || {
            let o = comm(c)?;
            check(ndims >= 0, MPI_ERR_DIMS, "negative ndims")?;
            // SAFETY: MPI: both arrays hold `ndims` ints.
            let (d, p) = unsafe { (ints(dims, ndims)?, ints(periods, ndims)?) };
            let p: Vec<bool> = p.iter().map(|&v| v != 0).collect();
            let h = match o.intra()?.cart_create(d, &p)? {
                Some((nc, t)) => new_with_topo(nc, &o, t)?,
                None => MPI_COMM_NULL,
            };
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cartdim_get`.
    fn MPI_Cartdim_get / PMPI_Cartdim_get(c: MPI_Comm, ndims: *mut c_int) -> c_int {
        run("MPI_Cartdim_get", On::Comm(c), || {
            let (_, t) = cart(c)?;
            let Topology::Cart { dims, .. } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not Cartesian")) };
            // SAFETY: MPI: `ndims` points to an int.
            unsafe { ffi::put(ndims, dims.len() as c_int) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_get`.
    fn MPI_Cart_get / PMPI_Cart_get(c: MPI_Comm, maxdims: c_int, dims: *mut c_int, periods: *mut c_int, coords: *mut c_int) -> c_int {
        run("MPI_Cart_get", On::Comm(c), || {
            let (o, t) = cart(c)?;
            let Topology::Cart { dims: d, periods: p } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not Cartesian")) };
            let me = t.cart_coords(o.comm.rank())?;
            let p: Vec<i32> = p.iter().map(|&b| i32::from(b)).collect();
            // SAFETY: MPI: the arrays have room for `maxdims` ints.
            unsafe {
                put_ints(dims, maxdims, d)?;
                put_ints(periods, maxdims, &p)?;
                put_ints(coords, maxdims, &me)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_rank`.
    fn MPI_Cart_rank / PMPI_Cart_rank(c: MPI_Comm, coords: *const c_int, rank: *mut c_int) -> c_int {
        run("MPI_Cart_rank", On::Comm(c), || {
            let (_, t) = cart(c)?;
            let Topology::Cart { dims, .. } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not Cartesian")) };
            // SAFETY: MPI: `coords` holds one int per dimension.
            let co = unsafe { ffi::array(coords, dims.len()) }?;
            let r = t.cart_rank(co)?;
            // SAFETY: MPI: `rank` points to an int.
            unsafe { ffi::put(rank, r) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_coords`.
    fn MPI_Cart_coords / PMPI_Cart_coords(c: MPI_Comm, rank: c_int, maxdims: c_int, coords: *mut c_int) -> c_int {
        run("MPI_Cart_coords", On::Comm(c), || {
            let (_, t) = cart(c)?;
            let co = t.cart_coords(rank)?;
            // SAFETY: MPI: `coords` has room for `maxdims` ints.
            unsafe { put_ints(coords, maxdims, &co) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_shift`.
    fn MPI_Cart_shift / PMPI_Cart_shift(c: MPI_Comm, direction: c_int, disp: c_int, source: *mut c_int, dest: *mut c_int) -> c_int {
        run("MPI_Cart_shift", On::Comm(c), || {
            let (o, t) = cart(c)?;
            let (s, d) = t.cart_shift(o.comm.rank(), direction, disp)?;
            // SAFETY: MPI: both point to ints.
            unsafe {
                ffi::put(source, s)?;
                ffi::put(dest, d)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_sub`.
    fn MPI_Cart_sub / PMPI_Cart_sub(c: MPI_Comm, remain: *const c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Cart_sub", On::Comm(c), || {
            let (o, t) = cart(c)?;
            let Topology::Cart { dims, .. } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not Cartesian")) };
            // SAFETY: MPI: `remain` holds one int per dimension.
            let r = unsafe { ffi::array(remain, dims.len()) }?;
            let r: Vec<bool> = r.iter().map(|&v| v != 0).collect();
            let (nc, nt) = o.comm.cart_sub(&t, &r)?;
            let h = new_with_topo(nc, &o, nt)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Cart_map`: without reordering, the rank itself if inside the
    /// grid.
    fn MPI_Cart_map / PMPI_Cart_map(c: MPI_Comm, ndims: c_int, dims: *const c_int, periods: *const c_int, newrank: *mut c_int) -> c_int {
        run("MPI_Cart_map", On::Comm(c), || {
            let o = comm(c)?;
            check(ndims >= 0, MPI_ERR_DIMS, "negative ndims")?;
            // SAFETY: MPI: both arrays hold `ndims` ints.
            let (d, p) = unsafe { (ints(dims, ndims)?, ints(periods, ndims)?) };
            let t = Topology::cart(d, &p.iter().map(|&v| v != 0).collect::<Vec<_>>())?;
            check(t.nodes() <= o.comm.size(), MPI_ERR_ARG, "grid larger than the communicator")?;
            let r = if o.comm.rank() < t.nodes() { o.comm.rank() } else { MPI_UNDEFINED };
            // SAFETY: MPI: `newrank` points to an int.
            unsafe { ffi::put(newrank, r) }
        })
    }
}

mpi_fn! {
    /// `MPI_Graph_create` (ranks are not reordered).
    fn MPI_Graph_create / PMPI_Graph_create(c: MPI_Comm, nnodes: c_int, index: *const c_int, edges: *const c_int, _reorder: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Graph_create", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `index` holds `nnodes` ints.
            let idx = unsafe { ints(index, nnodes) }?;
            let ne = idx.last().copied().unwrap_or(0);
            // SAFETY: MPI: `edges` holds `index[nnodes-1]` ints.
            let e = unsafe { ints(edges, ne) }?;
            let h = match o.intra()?.graph_create(idx, e)? {
                Some((nc, t)) => new_with_topo(nc, &o, t)?,
                None => MPI_COMM_NULL,
            };
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

fn graph(c: MPI_Comm) -> R<(Arc<CommObj>, Arc<Topology>)> {
    let (o, t) = topo(c)?;
    check(
        matches!(*t, Topology::Graph { .. }),
        MPI_ERR_TOPOLOGY,
        "not a graph topology",
    )?;
    Ok((o, t))
}

mpi_fn! {
    /// `MPI_Graphdims_get`.
    fn MPI_Graphdims_get / PMPI_Graphdims_get(c: MPI_Comm, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
        run("MPI_Graphdims_get", On::Comm(c), || {
            let (_, t) = graph(c)?;
            let Topology::Graph { index, edges } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not a graph")) };
            // SAFETY: MPI: both point to ints.
            unsafe {
                ffi::put(nnodes, index.len() as c_int)?;
                ffi::put(nedges, edges.len() as c_int)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Graph_get`.
    fn MPI_Graph_get / PMPI_Graph_get(c: MPI_Comm, maxindex: c_int, maxedges: c_int, index: *mut c_int, edges: *mut c_int) -> c_int {
        run("MPI_Graph_get", On::Comm(c), || {
            let (_, t) = graph(c)?;
            let Topology::Graph { index: i, edges: e } = &*t else { return Err(err(MPI_ERR_TOPOLOGY, "not a graph")) };
            // SAFETY: MPI: the arrays have room for `maxindex`/`maxedges` ints.
            unsafe {
                put_ints(index, maxindex, i)?;
                put_ints(edges, maxedges, e)
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Graph_neighbors_count`.
    fn MPI_Graph_neighbors_count / PMPI_Graph_neighbors_count(c: MPI_Comm, rank: c_int, n: *mut c_int) -> c_int {
        run("MPI_Graph_neighbors_count", On::Comm(c), || {
            let (_, t) = graph(c)?;
            let v = t.graph_neighbors(rank)?;
            // SAFETY: MPI: `n` points to an int.
            unsafe { ffi::put(n, v.len() as c_int) }
        })
    }
}

mpi_fn! {
    /// `MPI_Graph_neighbors`.
    fn MPI_Graph_neighbors / PMPI_Graph_neighbors(c: MPI_Comm, rank: c_int, max: c_int, neighbors: *mut c_int) -> c_int {
        run("MPI_Graph_neighbors", On::Comm(c), || {
            let (_, t) = graph(c)?;
            let v = t.graph_neighbors(rank)?;
            // SAFETY: MPI: `neighbors` has room for `max` ints.
            unsafe { put_ints(neighbors, max, &v) }
        })
    }
}

mpi_fn! {
    /// `MPI_Graph_map`: without reordering, the rank itself if a node.
    fn MPI_Graph_map / PMPI_Graph_map(c: MPI_Comm, nnodes: c_int, _index: *const c_int, _edges: *const c_int, newrank: *mut c_int) -> c_int {
        run("MPI_Graph_map", On::Comm(c), || {
            let o = comm(c)?;
            check(nnodes <= o.comm.size(), MPI_ERR_ARG, "graph larger than the communicator")?;
            let r = if o.comm.rank() < nnodes { o.comm.rank() } else { MPI_UNDEFINED };
            // SAFETY: MPI: `newrank` points to an int.
            unsafe { ffi::put(newrank, r) }
        })
    }
}

mpi_fn! {
    /// `MPI_Topo_test`.
    fn MPI_Topo_test / PMPI_Topo_test(c: MPI_Comm, status: *mut c_int) -> c_int {
        run("MPI_Topo_test", On::Comm(c), || {
            let o = comm(c)?;
            let t = o.meta().topo.clone();
            let v = match t.as_deref() {
                None => MPI_UNDEFINED,
                Some(Topology::Cart { .. }) => MPI_CART,
                Some(Topology::Graph { .. }) => MPI_GRAPH,
                Some(_) => MPI_DIST_GRAPH,
            };
            // SAFETY: MPI: `status` points to an int.
            unsafe { ffi::put(status, v) }
        })
    }
}

/// Weights of a distributed-graph argument (`None`: `MPI_UNWEIGHTED`).
///
/// # Safety
/// `p` is `MPI_UNWEIGHTED`, `MPI_WEIGHTS_EMPTY`, or holds `n` ints.
unsafe fn weights(p: *const c_int, n: c_int) -> R<Option<Vec<i32>>> {
    if unweighted(p) {
        return Ok(None);
    }
    if p == MPI_WEIGHTS_EMPTY.0 {
        return Ok(Some(Vec::new()));
    }
    // SAFETY: the caller's contract.
    Ok(Some(unsafe { ints(p, n) }?.to_vec()))
}

mpi_fn! {
    /// `MPI_Dist_graph_create_adjacent`.
    fn MPI_Dist_graph_create_adjacent / PMPI_Dist_graph_create_adjacent(c: MPI_Comm, indegree: c_int, sources: *const c_int, sourceweights: *const c_int, outdegree: c_int, destinations: *const c_int, destweights: *const c_int, _info: MPI_Info, _reorder: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Dist_graph_create_adjacent", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: the arrays hold `indegree`/`outdegree` ints.
            let (s, sw, d, dw) = unsafe {
                (ints(sources, indegree)?, weights(sourceweights, indegree)?, ints(destinations, outdegree)?, weights(destweights, outdegree)?)
            };
            let (nc, t) = o.intra()?.dist_graph_create_adjacent(s, sw.as_deref(), d, dw.as_deref())?;
            let h = new_with_topo(nc, &o, t)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

mpi_fn! {
    /// `MPI_Dist_graph_create`.
    fn MPI_Dist_graph_create / PMPI_Dist_graph_create(c: MPI_Comm, n: c_int, sources: *const c_int, degrees: *const c_int, destinations: *const c_int, w: *const c_int, _info: MPI_Info, _reorder: c_int, newcomm: *mut MPI_Comm) -> c_int {
        run("MPI_Dist_graph_create", On::Comm(c), || {
            let o = comm(c)?;
            // SAFETY: MPI: `sources` and `degrees` hold `n` ints.
            let (s, deg) = unsafe { (ints(sources, n)?, ints(degrees, n)?) };
            let total: c_int = deg.iter().sum();
            // SAFETY: MPI: `destinations` (and the weights) hold one int per edge.
            let (d, wt) = unsafe { (ints(destinations, total)?, weights(w, total)?) };
            let mut edges = Vec::new();
            let mut k = 0usize;
            for (i, &src) in s.iter().enumerate() {
                for _ in 0..deg[i] {
                    let wv = wt.as_ref().and_then(|v| v.get(k).copied()).unwrap_or(1);
                    edges.push((src, d[k], wv));
                    k += 1;
                }
            }
            let (nc, t) = o.intra()?.dist_graph_create(&edges, wt.is_some())?;
            let h = new_with_topo(nc, &o, t)?;
            // SAFETY: MPI: `newcomm` points to a handle.
            unsafe { ffi::put(newcomm, h) }
        })
    }
}

fn dist(c: MPI_Comm) -> R<(Arc<CommObj>, Arc<Topology>)> {
    let (o, t) = topo(c)?;
    check(
        matches!(*t, Topology::DistGraph { .. }),
        MPI_ERR_TOPOLOGY,
        "not a distributed graph",
    )?;
    Ok((o, t))
}

mpi_fn! {
    /// `MPI_Dist_graph_neighbors_count`.
    fn MPI_Dist_graph_neighbors_count / PMPI_Dist_graph_neighbors_count(c: MPI_Comm, indegree: *mut c_int, outdegree: *mut c_int, weighted: *mut c_int) -> c_int {
        run("MPI_Dist_graph_neighbors_count", On::Comm(c), || {
            let (_, t) = dist(c)?;
            let Topology::DistGraph { sources, destinations, weighted: w, .. } = &*t else {
                return Err(err(MPI_ERR_TOPOLOGY, "not a distributed graph"));
            };
            // SAFETY: MPI: the three point to ints.
            unsafe {
                ffi::put(indegree, sources.len() as c_int)?;
                ffi::put(outdegree, destinations.len() as c_int)?;
                ffi::put(weighted, ffi::flag(*w))
            }
        })
    }
}

mpi_fn! {
    /// `MPI_Dist_graph_neighbors`.
    fn MPI_Dist_graph_neighbors / PMPI_Dist_graph_neighbors(c: MPI_Comm, maxin: c_int, sources: *mut c_int, sw: *mut c_int, maxout: c_int, destinations: *mut c_int, dw: *mut c_int) -> c_int {
        run("MPI_Dist_graph_neighbors", On::Comm(c), || {
            let (_, t) = dist(c)?;
            let Topology::DistGraph { sources: s, source_weights: sws, destinations: d, destination_weights: dws, weighted } = &*t else {
                return Err(err(MPI_ERR_TOPOLOGY, "not a distributed graph"));
            };
            // SAFETY: MPI: the arrays have room for `maxin`/`maxout` ints
            // (weights only when the graph is weighted).
            unsafe {
                put_ints(sources, maxin, s)?;
                put_ints(destinations, maxout, d)?;
                if *weighted {
                    if !unweighted(sw) {
                        put_ints(sw, maxin, sws)?;
                    }
                    if !unweighted(dw) {
                        put_ints(dw, maxout, dws)?;
                    }
                }
            }
            Ok(())
        })
    }
}

// ------------------------------------------- neighbourhood collectives

/// A neighbourhood collective: `send` blocks to the destinations, `recv`
/// blocks from the sources (blocks of `PROC_NULL` neighbours untouched).
/// With `fifo`, two messages between the same two processes pair in the
/// order they are posted rather than by direction, as MPICH 4.0's `v` and
/// `w` forms pair them (the plain forms pair by direction).
///
/// # Safety
/// MPI's contract for the buffers; `nb` as in [`go`].
unsafe fn neighbors(
    c: MPI_Comm,
    send: Side,
    recv: Side,
    fifo: bool,
    nb: Option<*mut MPI_Request>,
) -> R<()> {
    let (o, t) = topo(c)?;
    let w = &o.comm;
    let (mut sources, mut dests) = t.neighbor_lists(w.rank())?;
    if fifo {
        sources
            .iter_mut()
            .chain(dests.iter_mut())
            .for_each(|n| n.1 = 0);
    }
    check(
        send.counts.len() == dests.len() && recv.counts.len() == sources.len(),
        MPI_ERR_ARG,
        "block counts do not match the neighbourhood",
    )?;
    let sblocks = send.blocks()?;
    let rblocks = recv.blocks()?;
    // SAFETY: the caller's contract.
    let data = unsafe { send.pack() }?;
    let total: usize = rblocks.iter().map(|b| b.1).sum();
    let skip: Vec<bool> = sources.iter().map(|s| s.0 == MPI_PROC_NULL).collect();
    let finish = Finish::new(move |out: &[u8]| {
        // SAFETY: MPI: the receive buffer stays valid until the call (or
        // its request) completes: now.
        unsafe { recv.unpack_but(out, &skip) }
    });
    // SAFETY: `nb` as documented.
    unsafe {
        go(
            c,
            nb,
            || {
                let mut out = vec![0u8; total];
                w.neighbor_alltoallv(&data, &sblocks, &dests, &mut out, &rblocks, &sources)?;
                Ok(out)
            },
            || {
                Ok(w.ineighbor_alltoallv(
                    data.clone(),
                    sblocks.clone(),
                    dests.clone(),
                    vec![0u8; total],
                    rblocks.clone(),
                    sources.clone(),
                )?)
            },
            finish,
        )
    }
}

/// `(sources, destinations)` counts of `c`'s neighbourhood.
fn degrees(c: MPI_Comm) -> R<(i32, i32)> {
    let (o, t) = topo(c)?;
    let (s, d) = t.neighbor_lists(o.comm.rank())?;
    Ok((s.len() as i32, d.len() as i32))
}

/// The same block sent to every destination.
fn repeated(addr: *const c_void, count: c_int, datatype: MPI_Datatype, n: i32) -> R<Side> {
    let (c, _) = equal(n, count);
    side_v(addr, &c, &vec![0; n as usize], datatype)
}

macro_rules! neighbor_both {
    (
        $(#[$m:meta])* $mpi:ident / $pmpi:ident, $(#[$mi:meta])* $impi:ident / $ipmpi:ident,
        $c:ident, ( $($a:ident : $t:ty),* ), |$nb:ident| $body:expr
    ) => {
        mpi_fn! {
            $(#[$m])*
            fn $mpi / $pmpi($($a: $t),*) -> c_int {
                run(stringify!($mpi), On::Comm($c), || {
                    let $nb: Option<*mut MPI_Request> = None;
                    // SAFETY: MPI's contract for this call's arguments.
                    unsafe { $body }
                })
            }
        }
        mpi_fn! {
            $(#[$mi])*
            fn $impi / $ipmpi($($a: $t,)* request: *mut MPI_Request) -> c_int {
                run(stringify!($impi), On::Comm($c), || {
                    let $nb = Some(request);
                    // SAFETY: MPI's contract; the buffers stay valid until
                    // the request completes.
                    unsafe { $body }
                })
            }
        }
    };
}

neighbor_both!(
    /// `MPI_Neighbor_allgather`.
    MPI_Neighbor_allgather / PMPI_Neighbor_allgather,
    /// `MPI_Ineighbor_allgather`.
    MPI_Ineighbor_allgather / PMPI_Ineighbor_allgather,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let (ns, nd) = degrees(c)?;
        let send = repeated(sendbuf, scount, stype, nd)?;
        let (rc, rd) = equal(ns, rcount);
        let recv = side_v(recvbuf, &rc, &rd, rtype)?;
        neighbors(c, send, recv, false, nb)
    }
);

neighbor_both!(
    /// `MPI_Neighbor_allgatherv`.
    MPI_Neighbor_allgatherv / PMPI_Neighbor_allgatherv,
    /// `MPI_Ineighbor_allgatherv`.
    MPI_Ineighbor_allgatherv / PMPI_Ineighbor_allgatherv,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, displs: *const c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let (ns, nd) = degrees(c)?;
        let send = repeated(sendbuf, scount, stype, nd)?;
        let recv = side_v(recvbuf, ints(rcounts, ns)?, ints(displs, ns)?, rtype)?;
        neighbors(c, send, recv, false, nb)
    }
);

neighbor_both!(
    /// `MPI_Neighbor_alltoall`.
    MPI_Neighbor_alltoall / PMPI_Neighbor_alltoall,
    /// `MPI_Ineighbor_alltoall`.
    MPI_Ineighbor_alltoall / PMPI_Ineighbor_alltoall,
    c, (sendbuf: *const c_void, scount: c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcount: c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let (ns, nd) = degrees(c)?;
        let (sc, sd) = equal(nd, scount);
        let send = side_v(sendbuf, &sc, &sd, stype)?;
        let (rc, rd) = equal(ns, rcount);
        let recv = side_v(recvbuf, &rc, &rd, rtype)?;
        neighbors(c, send, recv, false, nb)
    }
);

neighbor_both!(
    /// `MPI_Neighbor_alltoallv`.
    MPI_Neighbor_alltoallv / PMPI_Neighbor_alltoallv,
    /// `MPI_Ineighbor_alltoallv`.
    MPI_Ineighbor_alltoallv / PMPI_Ineighbor_alltoallv,
    c, (sendbuf: *const c_void, scounts: *const c_int, sdispls: *const c_int, stype: MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, rdispls: *const c_int, rtype: MPI_Datatype, c: MPI_Comm),
    |nb| {
        let (ns, nd) = degrees(c)?;
        let send = side_v(sendbuf, ints(scounts, nd)?, ints(sdispls, nd)?, stype)?;
        let recv = side_v(recvbuf, ints(rcounts, ns)?, ints(rdispls, ns)?, rtype)?;
        neighbors(c, send, recv, true, nb)
    }
);

/// Byte displacements of an `MPI_Aint` array.
///
/// # Safety
/// `p` holds `n` values.
unsafe fn aints(p: *const MPI_Aint, n: i32) -> R<Vec<isize>> {
    // SAFETY: the caller's contract.
    Ok(unsafe { ffi::array(p, n as usize) }?
        .iter()
        .map(|&v| v as isize)
        .collect())
}

neighbor_both!(
    /// `MPI_Neighbor_alltoallw`.
    MPI_Neighbor_alltoallw / PMPI_Neighbor_alltoallw,
    /// `MPI_Ineighbor_alltoallw`.
    MPI_Ineighbor_alltoallw / PMPI_Ineighbor_alltoallw,
    c, (sendbuf: *const c_void, scounts: *const c_int, sdispls: *const MPI_Aint, stypes: *const MPI_Datatype, recvbuf: *mut c_void, rcounts: *const c_int, rdispls: *const MPI_Aint, rtypes: *const MPI_Datatype, c: MPI_Comm),
    |nb| {
        let (ns, nd) = degrees(c)?;
        let send = side_w(sendbuf, ints(scounts, nd)?, aints(sdispls, nd)?, ffi::array(stypes, nd as usize)?)?;
        let recv = side_w(recvbuf, ints(rcounts, ns)?, aints(rdispls, ns)?, ffi::array(rtypes, ns as usize)?)?;
        neighbors(c, send, recv, true, nb)
    }
);
