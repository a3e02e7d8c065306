//! The collective algorithms, as schedules ([`super::task`]) on packed
//! bytes. Each takes its call's [`Coll`] and owned buffers and returns
//! the bytes its caller gets back. The functions here pick an algorithm
//! by size, process count and operation ([`tuned`] has the thresholds and
//! the long-message algorithms, and `TMX_COLL_ALGORITHMS` to force
//! either kind):
//!
//! | collective | short messages | long messages |
//! |---|---|---|
//! | barrier | dissemination: ⌈log₂ p⌉ rounds of empty messages | – |
//! | bcast | binomial tree from the root | scatter + ring allgather (≥ 12 KiB and ≥ 8 ranks) |
//! | reduce | binomial tree toward rank 0 in rank order (right for non-commutative operations: a lower rank's data is always the left operand), then to the root | commutative, ≥ 2 KiB: Rabenseifner (reduce-scatter by recursive halving, blocks to the root) |
//! | allreduce | recursive doubling, in rank order (any operation) | commutative, ≥ 2 KiB: Rabenseifner (recursive halving, then recursive doubling allgather) |
//! | gather(v), scatter(v) | linear at the root (all receives or sends posted at once) | – |
//! | allgather(v) | Bruck: ⌈log₂ p⌉ rounds, any p | ring (≥ 80 KiB in all) |
//! | alltoall(v/w) | every receive and send posted at once | pairwise exchange (a block ≥ 32 KiB) |
//! | reduce_scatter(_block) | reduce, then scatterv | commutative, ≥ 512 KiB: pairwise exchange |
//! | scan, exscan | recursive doubling, in rank order | – |
//! | neighbour collectives | every receive and send posted at once | – |
//!
//! Non-power-of-two process counts fold onto a power of two as MPICH
//! does (see [`tuned`]).

// Lent-buffer operations on the caller's slices (each waited for before
// the borrow ends).
#[allow(unsafe_code)]
mod direct;
mod tuned;

pub(crate) use direct::overlapping;
pub use tuned::ENV_COLL_ALGORITHMS;

use super::op::{reduce_local, Op};
use super::task::{all, done, Coll};
use crate::{Datatype, Error};

/// Awaits a received block: its bytes (the sender's count; shorter
/// blocks are allowed, longer ones are a truncation error).
async fn got(c: &Coll, len: usize, from: i32, sub: i32) -> Result<Vec<u8>, Error> {
    let (st, mut buf) = done(c.recv(len, from, sub)?).await?;
    buf.truncate(st.count);
    Ok(buf)
}

/// Copies `from` into `to[off..]` (`from` no longer than the room).
fn place(to: &mut [u8], off: usize, len: usize, from: &[u8]) -> Result<(), Error> {
    if from.len() > len {
        return Err(Error::Truncated {
            need: from.len(),
            have: len,
        });
    }
    to[off..off + from.len()].copy_from_slice(from);
    Ok(())
}

/// `MPI_Barrier`.
pub(crate) async fn barrier(c: &Coll) -> Result<Vec<u8>, Error> {
    let mut k = 1;
    while k < c.n {
        let to = (c.me + k) % c.n;
        let from = (c.me - k).rem_euclid(c.n);
        let r = c.recv(0, from, 0)?;
        let s = c.send(Vec::new(), to, 0)?;
        done(r).await?;
        done(s).await?;
        k *= 2;
    }
    Ok(Vec::new())
}

/// `MPI_Bcast` of `buf` (the root's data; every rank's length).
pub(crate) async fn bcast(c: &Coll, buf: Vec<u8>, root: i32, sub: i32) -> Result<Vec<u8>, Error> {
    let by_size = buf.len() >= tuned::BCAST_LONG && c.n >= tuned::BCAST_MIN_RANKS;
    if tuned::long(by_size, c.n > 1)? {
        tuned::bcast_scatter_ring(c, buf, root, sub).await
    } else {
        bcast_binomial(c, buf, root, sub).await
    }
}

/// `MPI_Bcast` along a binomial tree from the root.
async fn bcast_binomial(c: &Coll, mut buf: Vec<u8>, root: i32, sub: i32) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let vr = (me - root).rem_euclid(n);
    let len = buf.len();
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            let from = (vr - mask + root).rem_euclid(n);
            let b = got(c, len, from, sub).await?;
            place(&mut buf, 0, len, &b)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let mut sends = Vec::new();
    while mask > 0 {
        if vr + mask < n {
            sends.push(c.send(buf.clone(), (vr + mask + root).rem_euclid(n), sub)?);
        }
        mask >>= 1;
    }
    all(sends).await?;
    Ok(buf)
}

/// Whether the long-message reduction (Rabenseifner) applies to `len`
/// bytes of `ty` under `op` on `n` ranks, and whether the size asks for it.
fn rabenseifner(len: usize, ty: &Datatype, op: &Op, n: i32) -> Result<bool, Error> {
    let count = len / ty.size().max(1);
    let allowed = n > 1 && op.is_commutative() && count >= tuned::pof2(n) as usize;
    tuned::long(len >= tuned::REDUCE_SHORT, allowed)
}

/// `MPI_Reduce`: the reduction at `root` (empty elsewhere).
pub(crate) async fn reduce(
    c: &Coll,
    data: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    root: i32,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    if rabenseifner(data.len(), ty, op, c.n)? {
        tuned::reduce_rabenseifner(c, data, ty, op, root, sub).await
    } else {
        reduce_binomial(c, data, ty, op, root, sub).await
    }
}

/// `MPI_Reduce` along a binomial tree toward rank 0, then to the root.
async fn reduce_binomial(
    c: &Coll,
    data: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    root: i32,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let len = data.len();
    let mut acc = data;
    let mut mask = 1;
    while mask < n {
        if me & mask != 0 {
            done(c.send(std::mem::take(&mut acc), me - mask, sub)?).await?;
            break;
        }
        if me + mask < n {
            let mut theirs = got(c, len, me + mask, sub).await?;
            theirs.resize(len, 0);
            // Lower ranks on the left: acc op theirs.
            reduce_local(op, ty, &acc, &mut theirs)?;
            acc = theirs;
        }
        mask <<= 1;
    }
    if root != 0 {
        if me == 0 {
            done(c.send(acc, root, sub + 1)?).await?;
            return Ok(Vec::new());
        }
        if me == root {
            acc = got(c, len, 0, sub + 1).await?;
        }
    }
    Ok(if me == root { acc } else { Vec::new() })
}

/// `MPI_Allreduce`.
pub(crate) async fn allreduce(
    c: &Coll,
    data: Vec<u8>,
    ty: &Datatype,
    op: &Op,
) -> Result<Vec<u8>, Error> {
    if rabenseifner(data.len(), ty, op, c.n)? {
        tuned::allreduce_rabenseifner(c, data, ty, op, 0).await
    } else {
        tuned::allreduce_doubling(c, data, ty, op, 0).await
    }
}

/// `MPI_Gatherv`: at the root, `recv` with each rank's block at
/// `blocks[rank]`; elsewhere `recv` unchanged.
pub(crate) async fn gatherv(
    c: &Coll,
    send: Vec<u8>,
    mut recv: Vec<u8>,
    blocks: &[(usize, usize)],
    root: i32,
) -> Result<Vec<u8>, Error> {
    if c.me != root {
        done(c.send(send, root, 0)?).await?;
        return Ok(recv);
    }
    let mut reqs = Vec::new();
    for r in 0..c.n {
        let (off, len) = blocks[r as usize];
        if r == root {
            place(&mut recv, off, len, &send)?;
        } else {
            reqs.push((r, c.recv(len, r, 0)?));
        }
    }
    for (r, q) in reqs {
        let (st, b) = done(q).await?;
        let (off, len) = blocks[r as usize];
        place(&mut recv, off, len, &b[..st.count])?;
    }
    Ok(recv)
}

/// `MPI_Scatterv`: each rank's block of the root's `send`.
pub(crate) async fn scatterv(
    c: &Coll,
    send: Vec<u8>,
    blocks: &[(usize, usize)],
    recv_len: usize,
    root: i32,
) -> Result<Vec<u8>, Error> {
    if c.me != root {
        return got(c, recv_len, root, 0).await;
    }
    let mut sends = Vec::new();
    let mut mine = Vec::new();
    for r in 0..c.n {
        let (off, len) = blocks[r as usize];
        let block = send[off..off + len].to_vec();
        if r == root {
            if block.len() > recv_len {
                return Err(Error::Truncated {
                    need: block.len(),
                    have: recv_len,
                });
            }
            mine = block;
        } else {
            sends.push(c.send(block, r, 0)?);
        }
    }
    all(sends).await?;
    Ok(mine)
}

/// `MPI_Allgatherv`: `recv` holds `send` at `blocks[me]` and every other
/// rank's block at its place.
pub(crate) async fn allgatherv(
    c: &Coll,
    send: Vec<u8>,
    recv: Vec<u8>,
    blocks: &[(usize, usize)],
) -> Result<Vec<u8>, Error> {
    let total: usize = blocks.iter().map(|b| b.1).sum();
    if tuned::long(total >= tuned::ALLGATHER_SHORT, true)? {
        ring_allgatherv(c, send, recv, blocks, 0).await
    } else {
        tuned::allgatherv_bruck(c, send, recv, blocks, 0).await
    }
}

/// `MPI_Allgatherv` along a ring: p − 1 steps, each passing one block to
/// the right (sub-tag `sub`).
async fn ring_allgatherv(
    c: &Coll,
    send: Vec<u8>,
    mut recv: Vec<u8>,
    blocks: &[(usize, usize)],
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let (off, len) = blocks[me as usize];
    place(&mut recv, off, len, &send)?;
    let right = (me + 1) % n;
    let left = (me - 1).rem_euclid(n);
    for s in 0..n - 1 {
        let out = (me - s).rem_euclid(n) as usize;
        let inb = (me - s - 1).rem_euclid(n) as usize;
        let r = c.recv(blocks[inb].1, left, sub)?;
        let (o, l) = blocks[out];
        let q = c.send(recv[o..o + l].to_vec(), right, sub)?;
        let (st, b) = done(r).await?;
        done(q).await?;
        let (o, l) = blocks[inb];
        place(&mut recv, o, l, &b[..st.count])?;
    }
    Ok(recv)
}

/// `MPI_Alltoallv` (and `alltoall`, `alltoallw` on packed blocks).
pub(crate) async fn alltoallv(
    c: &Coll,
    send: Vec<u8>,
    sblocks: &[(usize, usize)],
    recv: Vec<u8>,
    rblocks: &[(usize, usize)],
) -> Result<Vec<u8>, Error> {
    let largest = sblocks.iter().map(|b| b.1).max().unwrap_or(0);
    if tuned::long(largest >= tuned::ALLTOALL_LONG, c.n > 1)? {
        tuned::alltoallv_pairwise(c, send, sblocks, recv, rblocks).await
    } else {
        alltoallv_all_at_once(c, send, sblocks, recv, rblocks).await
    }
}

/// `MPI_Alltoallv` with every receive and send posted at once.
async fn alltoallv_all_at_once(
    c: &Coll,
    send: Vec<u8>,
    sblocks: &[(usize, usize)],
    mut recv: Vec<u8>,
    rblocks: &[(usize, usize)],
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let mut recvs = Vec::new();
    for i in 1..n {
        let from = (me - i).rem_euclid(n);
        recvs.push((from, c.recv(rblocks[from as usize].1, from, 0)?));
    }
    let mut sends = Vec::new();
    for i in 1..n {
        let to = (me + i) % n;
        let (o, l) = sblocks[to as usize];
        sends.push(c.send(send[o..o + l].to_vec(), to, 0)?);
    }
    let (so, sl) = sblocks[me as usize];
    let (ro, rl) = rblocks[me as usize];
    place(&mut recv, ro, rl, &send[so..so + sl])?;
    for (from, q) in recvs {
        let (st, b) = done(q).await?;
        let (o, l) = rblocks[from as usize];
        place(&mut recv, o, l, &b[..st.count])?;
    }
    all(sends).await?;
    Ok(recv)
}

/// `MPI_Reduce_scatter`: the reduction of every rank's `data`, block
/// `blocks[me]` of it to this rank.
pub(crate) async fn reduce_scatter(
    c: &Coll,
    data: Vec<u8>,
    blocks: &[(usize, usize)],
    ty: &Datatype,
    op: &Op,
) -> Result<Vec<u8>, Error> {
    let len = data.len();
    if tuned::long(
        len >= tuned::REDUCE_SCATTER_LONG,
        c.n > 1 && op.is_commutative(),
    )? {
        return tuned::reduce_scatter_pairwise(c, data, blocks, ty, op, 0).await;
    }
    let mut r = reduce(c, data, ty, op, 0, 0).await?;
    r.resize(len, 0);
    let mine = blocks[c.me as usize].1;
    scatterv(c, r, blocks, mine, 0).await
}

/// `MPI_Scan` (`exclusive`: `MPI_Exscan`, whose rank 0 gets nothing).
pub(crate) async fn scan(
    c: &Coll,
    data: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    exclusive: bool,
) -> Result<Vec<u8>, Error> {
    tuned::scan_doubling(c, data, ty, op, exclusive, 0).await
}

/// One neighbour of a neighbourhood collective: its rank (or
/// `PROC_NULL`) and the sub-tag of the message.
pub(crate) type Neighbor = (i32, i32);

/// The neighbourhood `alltoallv`: block `i` of `send` to `dests[i]`,
/// block `i` of `recv` from `sources[i]` (`PROC_NULL` neighbours are
/// skipped: their blocks are left as they are).
pub(crate) async fn neighbor_alltoallv(
    c: &Coll,
    send: Vec<u8>,
    sblocks: &[(usize, usize)],
    dests: &[Neighbor],
    mut recv: Vec<u8>,
    rblocks: &[(usize, usize)],
    sources: &[Neighbor],
) -> Result<Vec<u8>, Error> {
    let null = crate::attr::PROC_NULL;
    let mut recvs = Vec::new();
    for (i, &(from, sub)) in sources.iter().enumerate() {
        if from != null {
            recvs.push((i, c.recv(rblocks[i].1, from, sub)?));
        }
    }
    let mut sends = Vec::new();
    for (i, &(to, sub)) in dests.iter().enumerate() {
        if to != null {
            let (o, l) = sblocks[i];
            sends.push(c.send(send[o..o + l].to_vec(), to, sub)?);
        }
    }
    for (i, q) in recvs {
        let (st, b) = done(q).await?;
        let (o, l) = rblocks[i];
        place(&mut recv, o, l, &b[..st.count])?;
    }
    all(sends).await?;
    Ok(recv)
}
