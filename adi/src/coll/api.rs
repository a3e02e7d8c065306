//! The collectives on packed data, blocking and nonblocking: the full
//! MPI-3.1 set, for any [`Op`] (predefined or user, commutative or not)
//! and any datatype (its data packed, [`Datatype::pack`]).
//!
//! Conventions:
//!
//! - Data are bytes. A reduction's bytes are packed elements of its
//!   datatype (`ty`), which says how [`Op`] combines them.
//! - The `v` forms place rank `i`'s block at `blocks[i] = (offset, len)`
//!   (bytes) of the buffer; the plain forms are the `v` forms with equal
//!   blocks one after the other.
//! - A nonblocking form (`i...`) takes owned buffers and returns a
//!   [`Request`]; once complete, [`Request::take_buffer`] hands back the
//!   result (the whole receive buffer, or this rank's block).
//! - Arguments that only matter at the root are ignored elsewhere.
//! - The `REPLACE` and `NO_OP` operations are for one-sided accumulates:
//!   [`Error::InvalidOp`] here.
//!
//! ```
//! use adi::{BasicType, Datatype, Op};
//! let world = adi::init()?;
//! let int = Datatype::basic(BasicType::I32);
//! let mine = 7i32.to_ne_bytes();
//! let mut sum = [0u8; 4];
//! world.allreduce_packed(&mine, &mut sum, &int, &Op::Sum)?;
//! assert_eq!(i32::from_ne_bytes(sum), 7 * world.size());
//! let mut r = world.iallreduce_packed(mine.to_vec(), &int, &Op::Max)?;
//! world.wait(&mut r)?;
//! assert_eq!(r.take_buffer().unwrap(), 7i32.to_ne_bytes());
//! adi::finalize()?;
//! # Ok::<(), adi::Error>(())
//! ```

use super::algo::{self, Neighbor};
use super::op::Op;
use super::task::{block_on, check_blocks, spawn, Coll};
use crate::request::Request;
use crate::{Comm, Datatype, Error};

/// Equal blocks of `len` bytes, one per rank, one after the other.
pub fn equal_blocks(n: i32, len: usize) -> Vec<(usize, usize)> {
    (0..n.max(0) as usize).map(|i| (i * len, len)).collect()
}

impl Comm {
    fn root_ok(&self, root: i32) -> Result<(), Error> {
        if (0..self.size()).contains(&root) {
            Ok(())
        } else {
            Err(Error::InvalidRoot {
                root,
                size: self.size(),
            })
        }
    }

    pub(crate) fn reduction_ok(op: &Op, ty: &Datatype, len: usize) -> Result<(), Error> {
        op.for_collectives()?;
        op.check(ty)?;
        let unit = ty.size().max(1);
        if len % unit != 0 {
            return Err(Error::InvalidArgument {
                what: "reduction data is not a whole number of elements",
            });
        }
        Ok(())
    }

    pub(crate) fn same_len(a: usize, b: usize) -> Result<(), Error> {
        if a == b {
            Ok(())
        } else {
            Err(Error::Truncated { need: a, have: b })
        }
    }

    // ---------------------------------------------------------- barrier

    /// `MPI_Ibarrier`.
    pub fn ibarrier(&self) -> Result<Request, Error> {
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move { algo::barrier(&c).await })))
    }

    // ------------------------------------------------------------ bcast

    /// `MPI_Ibcast`: `buf` holds the data at the root; every rank's
    /// request hands back the broadcast bytes.
    pub fn ibcast(&self, buf: Vec<u8>, root: i32) -> Result<Request, Error> {
        self.root_ok(root)?;
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::bcast(&c, buf, root, 0).await
        })))
    }

    // ----------------------------------------------------------- reduce

    /// `MPI_Reduce` of packed elements of `ty`: the result in `recv` at
    /// the root (`recv` as long as `send` there; ignored elsewhere).
    pub fn reduce_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
        root: i32,
    ) -> Result<(), Error> {
        self.root_ok(root)?;
        Self::reduction_ok(op, ty, send.len())?;
        if self.rank() == root {
            Self::same_len(send.len(), recv.len())?;
        }
        let c = Coll::new(self);
        let r = block_on(self, algo::reduce(&c, send.to_vec(), ty, op, root, 0))?;
        if self.rank() == root {
            recv.copy_from_slice(&r[..recv.len()]);
        }
        Ok(())
    }

    /// `MPI_Ireduce`: the root's request hands back the result.
    pub fn ireduce_packed(
        &self,
        send: Vec<u8>,
        ty: &Datatype,
        op: &Op,
        root: i32,
    ) -> Result<Request, Error> {
        self.root_ok(root)?;
        Self::reduction_ok(op, ty, send.len())?;
        let (c, ty, op) = (Coll::new(self), ty.clone(), op.clone());
        Ok(spawn(Box::pin(async move {
            algo::reduce(&c, send, &ty, &op, root, 0).await
        })))
    }

    /// `MPI_Allreduce` of packed elements of `ty` (as
    /// [`Comm::allreduce_in_place`], `send` read in place).
    pub fn allreduce_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        self.allreduce_direct(Some(send), recv, ty, op)
    }

    /// `MPI_Iallreduce`: the request hands back the result.
    pub fn iallreduce_packed(
        &self,
        send: Vec<u8>,
        ty: &Datatype,
        op: &Op,
    ) -> Result<Request, Error> {
        Self::reduction_ok(op, ty, send.len())?;
        let (c, ty, op) = (Coll::new(self), ty.clone(), op.clone());
        Ok(spawn(Box::pin(async move {
            algo::allreduce(&c, send, &ty, &op).await
        })))
    }

    /// `MPI_Reduce_scatter` (and `_block`, with equal blocks): the
    /// reduction of every rank's `send`, of which this rank gets bytes
    /// `blocks[rank]` in `recv`.
    pub fn reduce_scatter_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        Self::reduction_ok(op, ty, send.len())?;
        check_blocks(blocks, self.size(), send.len())?;
        Self::same_len(blocks[self.rank() as usize].1, recv.len())?;
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::reduce_scatter(&c, send.to_vec(), blocks, ty, op),
        )?;
        recv[..r.len()].copy_from_slice(&r);
        Ok(())
    }

    /// `MPI_Ireduce_scatter`: the request hands back this rank's block.
    pub fn ireduce_scatter_packed(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        ty: &Datatype,
        op: &Op,
    ) -> Result<Request, Error> {
        Self::reduction_ok(op, ty, send.len())?;
        check_blocks(&blocks, self.size(), send.len())?;
        let (c, ty, op) = (Coll::new(self), ty.clone(), op.clone());
        Ok(spawn(Box::pin(async move {
            algo::reduce_scatter(&c, send, &blocks, &ty, &op).await
        })))
    }

    /// `MPI_Scan` (inclusive prefix reduction in rank order).
    pub fn scan_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        Self::reduction_ok(op, ty, send.len())?;
        Self::same_len(send.len(), recv.len())?;
        let c = Coll::new(self);
        let r = block_on(self, algo::scan(&c, send.to_vec(), ty, op, false))?;
        recv.copy_from_slice(&r);
        Ok(())
    }

    /// `MPI_Iscan`.
    pub fn iscan_packed(&self, send: Vec<u8>, ty: &Datatype, op: &Op) -> Result<Request, Error> {
        Self::reduction_ok(op, ty, send.len())?;
        let (c, ty, op) = (Coll::new(self), ty.clone(), op.clone());
        Ok(spawn(Box::pin(async move {
            algo::scan(&c, send, &ty, &op, false).await
        })))
    }

    /// `MPI_Exscan` (exclusive prefix): rank 0's `recv` is left as it is.
    pub fn exscan_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        Self::reduction_ok(op, ty, send.len())?;
        Self::same_len(send.len(), recv.len())?;
        let c = Coll::new(self);
        let r = block_on(self, algo::scan(&c, send.to_vec(), ty, op, true))?;
        if self.rank() > 0 {
            recv.copy_from_slice(&r);
        }
        Ok(())
    }

    /// `MPI_Iexscan`: rank 0's request hands back nothing (empty).
    pub fn iexscan_packed(&self, send: Vec<u8>, ty: &Datatype, op: &Op) -> Result<Request, Error> {
        Self::reduction_ok(op, ty, send.len())?;
        let (c, ty, op) = (Coll::new(self), ty.clone(), op.clone());
        Ok(spawn(Box::pin(async move {
            algo::scan(&c, send, &ty, &op, true).await
        })))
    }

    // -------------------------------------------------- gather, scatter

    /// `MPI_Gatherv`: the root gets each rank's `send` at its block of
    /// `recv`.
    pub fn gatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
        root: i32,
    ) -> Result<(), Error> {
        self.root_ok(root)?;
        if self.rank() == root {
            check_blocks(blocks, self.size(), recv.len())?;
        }
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::gatherv(&c, send.to_vec(), recv.to_vec(), blocks, root),
        )?;
        if self.rank() == root {
            recv.copy_from_slice(&r);
        }
        Ok(())
    }

    /// `MPI_Igatherv`: the root's request hands back `recv` filled.
    pub fn igatherv(
        &self,
        send: Vec<u8>,
        recv: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        root: i32,
    ) -> Result<Request, Error> {
        self.root_ok(root)?;
        if self.rank() == root {
            check_blocks(&blocks, self.size(), recv.len())?;
        }
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::gatherv(&c, send, recv, &blocks, root).await
        })))
    }

    /// `MPI_Scatterv`: each rank gets its block of the root's `send` in
    /// `recv`; returns its length (at most `recv.len()`).
    pub fn scatterv(
        &self,
        send: &[u8],
        blocks: &[(usize, usize)],
        recv: &mut [u8],
        root: i32,
    ) -> Result<usize, Error> {
        self.root_ok(root)?;
        if self.rank() == root {
            check_blocks(blocks, self.size(), send.len())?;
        }
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::scatterv(&c, send.to_vec(), blocks, recv.len(), root),
        )?;
        if r.len() > recv.len() {
            return Err(Error::Truncated {
                need: r.len(),
                have: recv.len(),
            });
        }
        recv[..r.len()].copy_from_slice(&r);
        Ok(r.len())
    }

    /// `MPI_Iscatterv`: the request hands back this rank's block (at most
    /// `recv_len` bytes).
    pub fn iscatterv(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        recv_len: usize,
        root: i32,
    ) -> Result<Request, Error> {
        self.root_ok(root)?;
        if self.rank() == root {
            check_blocks(&blocks, self.size(), send.len())?;
        }
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::scatterv(&c, send, &blocks, recv_len, root).await
        })))
    }

    /// `MPI_Scatter` of equal blocks of `recv.len()` bytes.
    pub fn scatter(&self, send: &[u8], recv: &mut [u8], root: i32) -> Result<(), Error> {
        let blocks = equal_blocks(self.size(), recv.len());
        self.scatterv(send, &blocks, recv, root).map(|_| ())
    }

    /// `MPI_Allgatherv`: every rank gets every rank's `send` at its block
    /// of `recv`.
    pub fn allgatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
    ) -> Result<(), Error> {
        check_blocks(blocks, self.size(), recv.len())?;
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::allgatherv(&c, send.to_vec(), recv.to_vec(), blocks),
        )?;
        recv.copy_from_slice(&r);
        Ok(())
    }

    /// `MPI_Iallgatherv`: the request hands back `recv` filled.
    pub fn iallgatherv(
        &self,
        send: Vec<u8>,
        recv: Vec<u8>,
        blocks: Vec<(usize, usize)>,
    ) -> Result<Request, Error> {
        check_blocks(&blocks, self.size(), recv.len())?;
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::allgatherv(&c, send, recv, &blocks).await
        })))
    }

    /// `MPI_Allgather` of equal blocks of `send.len()` bytes.
    pub fn allgather_into(&self, send: &[u8], recv: &mut [u8]) -> Result<(), Error> {
        let blocks = equal_blocks(self.size(), send.len());
        self.allgatherv(send, recv, &blocks)
    }

    /// `MPI_Alltoallv` (also `alltoallw` once each block is packed):
    /// block `sblocks[i]` of `send` goes to rank `i`, rank `i`'s block
    /// lands at `rblocks[i]` of `recv` (straight from and into the
    /// buffers, [`Comm::alltoallv_direct`], unless receive blocks overlap).
    pub fn alltoallv(
        &self,
        send: &[u8],
        sblocks: &[(usize, usize)],
        recv: &mut [u8],
        rblocks: &[(usize, usize)],
    ) -> Result<(), Error> {
        check_blocks(sblocks, self.size(), send.len())?;
        check_blocks(rblocks, self.size(), recv.len())?;
        if !algo::overlapping(rblocks) {
            return self.alltoallv_direct(send, sblocks, recv, rblocks);
        }
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::alltoallv(&c, send.to_vec(), sblocks, recv.to_vec(), rblocks),
        )?;
        recv.copy_from_slice(&r);
        Ok(())
    }

    /// `MPI_Ialltoallv`: the request hands back `recv` filled.
    pub fn ialltoallv(
        &self,
        send: Vec<u8>,
        sblocks: Vec<(usize, usize)>,
        recv: Vec<u8>,
        rblocks: Vec<(usize, usize)>,
    ) -> Result<Request, Error> {
        check_blocks(&sblocks, self.size(), send.len())?;
        check_blocks(&rblocks, self.size(), recv.len())?;
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::alltoallv(&c, send, &sblocks, recv, &rblocks).await
        })))
    }

    /// `MPI_Alltoall` of equal blocks (`send.len() / size` bytes each).
    pub fn alltoall(&self, send: &[u8], recv: &mut [u8]) -> Result<(), Error> {
        let n = self.size();
        let blocks = equal_blocks(n, send.len() / n.max(1) as usize);
        self.alltoallv(send, &blocks, recv, &blocks)
    }

    // ------------------------------------------------------- neighbours

    /// The neighbourhood `alltoallv` of a topology: block `i` of `send`
    /// goes to `dests[i]`, block `i` of `recv` comes from `sources[i]`
    /// (each a rank or `PROC_NULL`, and the sub-tag, below 256, that tells
    /// apart several messages between the same two ranks).
    #[allow(clippy::too_many_arguments)]
    pub fn neighbor_alltoallv(
        &self,
        send: &[u8],
        sblocks: &[(usize, usize)],
        dests: &[(i32, i32)],
        recv: &mut [u8],
        rblocks: &[(usize, usize)],
        sources: &[(i32, i32)],
    ) -> Result<(), Error> {
        self.neighbors_ok(send.len(), sblocks, dests, recv.len(), rblocks, sources)?;
        let c = Coll::new(self);
        let r = block_on(
            self,
            algo::neighbor_alltoallv(
                &c,
                send.to_vec(),
                sblocks,
                dests,
                recv.to_vec(),
                rblocks,
                sources,
            ),
        )?;
        recv.copy_from_slice(&r);
        Ok(())
    }

    /// The nonblocking neighbourhood `alltoallv`: the request hands back
    /// `recv` filled.
    #[allow(clippy::too_many_arguments)]
    pub fn ineighbor_alltoallv(
        &self,
        send: Vec<u8>,
        sblocks: Vec<(usize, usize)>,
        dests: Vec<(i32, i32)>,
        recv: Vec<u8>,
        rblocks: Vec<(usize, usize)>,
        sources: Vec<(i32, i32)>,
    ) -> Result<Request, Error> {
        self.neighbors_ok(send.len(), &sblocks, &dests, recv.len(), &rblocks, &sources)?;
        let c = Coll::new(self);
        Ok(spawn(Box::pin(async move {
            algo::neighbor_alltoallv(&c, send, &sblocks, &dests, recv, &rblocks, &sources).await
        })))
    }

    #[allow(clippy::too_many_arguments)]
    fn neighbors_ok(
        &self,
        slen: usize,
        sblocks: &[(usize, usize)],
        dests: &[Neighbor],
        rlen: usize,
        rblocks: &[(usize, usize)],
        sources: &[Neighbor],
    ) -> Result<(), Error> {
        check_blocks(sblocks, dests.len() as i32, slen)?;
        check_blocks(rblocks, sources.len() as i32, rlen)?;
        let n = self.size();
        for &(r, sub) in dests.iter().chain(sources) {
            if r != crate::attr::PROC_NULL && !(0..n).contains(&r) {
                return Err(Error::InvalidRank { rank: r, size: n });
            }
            if !(0..super::task::SUBS).contains(&sub) {
                return Err(Error::InvalidArgument {
                    what: "neighbour sub-tag outside 0..256",
                });
            }
        }
        Ok(())
    }
}
