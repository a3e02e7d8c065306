//! Collectives over an intercommunicator's two groups (MPI-3.1 §5.2.2):
//! barrier, bcast, reduce, allreduce, gather(v), scatter(v), allgather(v),
//! alltoall(v/w) and reduce_scatter(_block), blocking and nonblocking,
//! on packed data as [`super::api`]'s.
//!
//! Data flow from one group to the other: a rooted call's root (in one
//! group, passing [`InterRoot::Root`]; its group's other members pass
//! [`InterRoot::Null`]) sends to or receives from every member of the
//! other group (passing [`InterRoot::Remote`] with the root's rank);
//! the all- forms give each group the other group's data. As in MPICH,
//! each call is a few local collectives (on the intercommunicator's
//! private local intracommunicator) around messages between the groups
//! (on the intercommunicator's collective context):
//!
//! | call | schedule |
//! |---|---|
//! | barrier | local barrier, the leaders swap an empty message, local bcast |
//! | bcast | root → remote leader, local bcast |
//! | reduce | local reduce to the leader, leader → root |
//! | allreduce | local reduce to each leader, the leaders swap, local bcast |
//! | gather(v), scatter(v) | the root ↔ every remote member directly |
//! | allgather(v) | every member → the remote leader, local bcast |
//! | alltoall(v/w) | every member ↔ every remote member |
//! | reduce_scatter | local reduce to each leader, the leaders swap, local scatterv |
//!
//! Every call takes its collective sequence numbers (the inter one and
//! the local ones) when it is made, on every member whatever its role, so
//! the tags agree across both groups.

use super::algo;
use super::op::Op;
use super::task::{all, block_on, check_blocks, done, spawn, Coll, Sched};
use crate::inter::InterComm;
use crate::request::Request;
use crate::{Datatype, Error};

/// The root argument of a rooted intercommunicator collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InterRoot {
    /// This process is the root (`MPI_ROOT`).
    Root,
    /// This process is in the root's group but not the root
    /// (`MPI_PROC_NULL`): it takes no part.
    Null,
    /// The root is this rank of the other group.
    Remote(i32),
}

/// The sequence numbers of one call: the inter context's and two local
/// ones.
struct Calls {
    x: Coll,
    l1: Coll,
    l2: Coll,
}

/// Awaits a received message: its bytes (at most `len`).
async fn got(x: &Coll, len: usize, from: i32) -> Result<Vec<u8>, Error> {
    let (st, mut b) = done(x.recv(len, from, 0)?).await?;
    b.truncate(st.count);
    Ok(b)
}

/// Copies `from` (no longer than `len`) into `to[off..]`.
fn put(to: &mut [u8], off: usize, len: usize, from: &[u8]) -> Result<(), Error> {
    if from.len() > len {
        return Err(Error::Truncated {
            need: from.len(),
            have: len,
        });
    }
    to[off..off + from.len()].copy_from_slice(from);
    Ok(())
}

/// The local leader's swap with the remote leader: sends `mine`,
/// returns up to `len` bytes of theirs.
async fn swap(x: &Coll, mine: Vec<u8>, len: usize) -> Result<Vec<u8>, Error> {
    let r = x.recv(len, 0, 0)?;
    let s = x.send(mine, 0, 0)?;
    let (st, mut b) = done(r).await?;
    done(s).await?;
    b.truncate(st.count);
    Ok(b)
}

impl InterComm {
    fn calls(&self) -> Calls {
        Calls {
            x: Coll::new(self.comm()),
            l1: Coll::new(self.local()),
            l2: Coll::new(self.local()),
        }
    }

    fn root_ok(&self, root: InterRoot) -> Result<(), Error> {
        match root {
            InterRoot::Remote(r) if !(0..self.remote_size()).contains(&r) => {
                Err(Error::InvalidRoot {
                    root: r,
                    size: self.remote_size(),
                })
            }
            _ => Ok(()),
        }
    }

    fn run(&self, sched: Sched) -> Result<Vec<u8>, Error> {
        block_on(self.local(), sched)
    }

    // ---------------------------------------------------------- barrier

    fn barrier_sched(&self) -> Sched {
        let k = self.calls();
        Box::pin(async move {
            algo::barrier(&k.l1).await?;
            if k.l1.me == 0 {
                swap(&k.x, Vec::new(), 0).await?;
            }
            algo::bcast(&k.l2, Vec::new(), 0, 0).await
        })
    }

    /// `MPI_Barrier` on the intercommunicator: returns once every member
    /// of the other group has entered it.
    pub fn barrier(&self) -> Result<(), Error> {
        self.run(self.barrier_sched()).map(|_| ())
    }

    /// `MPI_Ibarrier` on the intercommunicator.
    pub fn ibarrier(&self) -> Result<Request, Error> {
        Ok(spawn(self.barrier_sched()))
    }

    // ------------------------------------------------------------ bcast

    fn bcast_sched(&self, buf: Vec<u8>, root: InterRoot) -> Result<Sched, Error> {
        self.root_ok(root)?;
        let k = self.calls();
        Ok(Box::pin(async move {
            match root {
                InterRoot::Root => {
                    done(k.x.send(buf, 0, 0)?).await?;
                    Ok(Vec::new())
                }
                InterRoot::Null => Ok(Vec::new()),
                InterRoot::Remote(r) => {
                    let mut buf = buf;
                    if k.l1.me == 0 {
                        let len = buf.len();
                        let b = got(&k.x, len, r).await?;
                        put(&mut buf, 0, len, &b)?;
                    }
                    algo::bcast(&k.l1, buf, 0, 0).await
                }
            }
        }))
    }

    /// `MPI_Bcast` from the root (`buf`: its data) to every member of the
    /// other group (`buf`: room for it, filled).
    pub fn bcast(&self, buf: &mut [u8], root: InterRoot) -> Result<(), Error> {
        let r = self.run(self.bcast_sched(buf.to_vec(), root)?)?;
        if let InterRoot::Remote(_) = root {
            buf.copy_from_slice(&r[..buf.len()]);
        }
        Ok(())
    }

    /// `MPI_Ibcast`: the receivers' requests hand back the data.
    pub fn ibcast(&self, buf: Vec<u8>, root: InterRoot) -> Result<Request, Error> {
        Ok(spawn(self.bcast_sched(buf, root)?))
    }

    // ----------------------------------------------------------- reduce

    fn reduce_sched(
        &self,
        send: Vec<u8>,
        ty: &Datatype,
        op: &Op,
        root: InterRoot,
    ) -> Result<Sched, Error> {
        self.root_ok(root)?;
        if root != InterRoot::Null {
            crate::Comm::reduction_ok(op, ty, send.len())?;
        }
        let (k, ty, op) = (self.calls(), ty.clone(), op.clone());
        Ok(Box::pin(async move {
            match root {
                InterRoot::Root => got(&k.x, send.len(), 0).await,
                InterRoot::Null => Ok(Vec::new()),
                InterRoot::Remote(r) => {
                    let acc = algo::reduce(&k.l1, send, &ty, &op, 0, 0).await?;
                    if k.l1.me == 0 {
                        done(k.x.send(acc, r, 0)?).await?;
                    }
                    Ok(Vec::new())
                }
            }
        }))
    }

    /// `MPI_Reduce` of the other group's data to the root: at the root,
    /// `send` gives the length and `recv` gets the result.
    pub fn reduce_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
        root: InterRoot,
    ) -> Result<(), Error> {
        let r = self.run(self.reduce_sched(send.to_vec(), ty, op, root)?)?;
        if root == InterRoot::Root {
            put(recv, 0, recv.len(), &r)?;
        }
        Ok(())
    }

    /// `MPI_Ireduce`: the root's request hands back the result (`send`
    /// at the root: as long as the result).
    pub fn ireduce_packed(
        &self,
        send: Vec<u8>,
        ty: &Datatype,
        op: &Op,
        root: InterRoot,
    ) -> Result<Request, Error> {
        Ok(spawn(self.reduce_sched(send, ty, op, root)?))
    }

    fn allreduce_sched(&self, send: Vec<u8>, ty: &Datatype, op: &Op) -> Result<Sched, Error> {
        crate::Comm::reduction_ok(op, ty, send.len())?;
        let (k, ty, op) = (self.calls(), ty.clone(), op.clone());
        Ok(Box::pin(async move {
            let len = send.len();
            let acc = algo::reduce(&k.l1, send, &ty, &op, 0, 0).await?;
            let mut theirs = if k.l1.me == 0 {
                swap(&k.x, acc, len).await?
            } else {
                Vec::new()
            };
            theirs.resize(len, 0);
            algo::bcast(&k.l2, theirs, 0, 0).await
        }))
    }

    /// `MPI_Allreduce`: each group gets the reduction of the other
    /// group's data.
    pub fn allreduce_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        let r = self.run(self.allreduce_sched(send.to_vec(), ty, op)?)?;
        put(recv, 0, recv.len(), &r)
    }

    /// `MPI_Iallreduce`: the request hands back the result.
    pub fn iallreduce_packed(
        &self,
        send: Vec<u8>,
        ty: &Datatype,
        op: &Op,
    ) -> Result<Request, Error> {
        Ok(spawn(self.allreduce_sched(send, ty, op)?))
    }

    fn reduce_scatter_sched(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        ty: &Datatype,
        op: &Op,
    ) -> Result<Sched, Error> {
        check_blocks(&blocks, self.local_size(), send.len())?;
        crate::Comm::reduction_ok(op, ty, send.len())?;
        let (k, ty, op) = (self.calls(), ty.clone(), op.clone());
        Ok(Box::pin(async move {
            let len = send.len();
            let acc = algo::reduce(&k.l1, send, &ty, &op, 0, 0).await?;
            let mut theirs = if k.l1.me == 0 {
                swap(&k.x, acc, len).await?
            } else {
                Vec::new()
            };
            theirs.resize(len, 0);
            let mine = blocks[k.l2.me as usize].1;
            algo::scatterv(&k.l2, theirs, &blocks, mine, 0).await
        }))
    }

    /// `MPI_Reduce_scatter`: the reduction of the other group's data
    /// (each member's `send`: every local block, laid out as `blocks`,
    /// one per local rank), block `blocks[rank]` of it to this member.
    pub fn reduce_scatter_packed(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        let r = self.run(self.reduce_scatter_sched(send.to_vec(), blocks.to_vec(), ty, op)?)?;
        put(recv, 0, recv.len(), &r)
    }

    /// `MPI_Ireduce_scatter`: the request hands back this member's block.
    pub fn ireduce_scatter_packed(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        ty: &Datatype,
        op: &Op,
    ) -> Result<Request, Error> {
        Ok(spawn(self.reduce_scatter_sched(send, blocks, ty, op)?))
    }

    // -------------------------------------------------- gather, scatter

    fn gatherv_sched(
        &self,
        send: Vec<u8>,
        recv: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        root: InterRoot,
    ) -> Result<Sched, Error> {
        self.root_ok(root)?;
        if root == InterRoot::Root {
            check_blocks(&blocks, self.remote_size(), recv.len())?;
        }
        let k = self.calls();
        Ok(Box::pin(async move {
            match root {
                InterRoot::Root => {
                    let mut recv = recv;
                    let mut reqs = Vec::new();
                    for (r, &(_, len)) in blocks.iter().enumerate() {
                        reqs.push(k.x.recv(len, r as i32, 0)?);
                    }
                    for (q, &(off, len)) in reqs.into_iter().zip(&blocks) {
                        let (st, b) = done(q).await?;
                        put(&mut recv, off, len, &b[..st.count])?;
                    }
                    Ok(recv)
                }
                InterRoot::Null => Ok(Vec::new()),
                InterRoot::Remote(r) => {
                    done(k.x.send(send, r, 0)?).await?;
                    Ok(Vec::new())
                }
            }
        }))
    }

    /// `MPI_Gatherv` to the root: remote rank `i`'s `send` at
    /// `blocks[i]` of the root's `recv`.
    pub fn gatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
        root: InterRoot,
    ) -> Result<(), Error> {
        let r =
            self.run(self.gatherv_sched(send.to_vec(), recv.to_vec(), blocks.to_vec(), root)?)?;
        if root == InterRoot::Root {
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
        root: InterRoot,
    ) -> Result<Request, Error> {
        Ok(spawn(self.gatherv_sched(send, recv, blocks, root)?))
    }

    fn scatterv_sched(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        recv_len: usize,
        root: InterRoot,
    ) -> Result<Sched, Error> {
        self.root_ok(root)?;
        if root == InterRoot::Root {
            check_blocks(&blocks, self.remote_size(), send.len())?;
        }
        let k = self.calls();
        Ok(Box::pin(async move {
            match root {
                InterRoot::Root => {
                    let mut sends = Vec::new();
                    for (r, &(off, len)) in blocks.iter().enumerate() {
                        sends.push(k.x.send(send[off..off + len].to_vec(), r as i32, 0)?);
                    }
                    all(sends).await?;
                    Ok(Vec::new())
                }
                InterRoot::Null => Ok(Vec::new()),
                InterRoot::Remote(r) => got(&k.x, recv_len, r).await,
            }
        }))
    }

    /// `MPI_Scatterv` from the root: block `blocks[i]` of its `send` to
    /// remote rank `i`; returns the length received (at most
    /// `recv.len()`; 0 in the root's group).
    pub fn scatterv(
        &self,
        send: &[u8],
        blocks: &[(usize, usize)],
        recv: &mut [u8],
        root: InterRoot,
    ) -> Result<usize, Error> {
        let r =
            self.run(self.scatterv_sched(send.to_vec(), blocks.to_vec(), recv.len(), root)?)?;
        put(recv, 0, recv.len(), &r)?;
        Ok(r.len())
    }

    /// `MPI_Iscatterv`: the receivers' requests hand back their block.
    pub fn iscatterv(
        &self,
        send: Vec<u8>,
        blocks: Vec<(usize, usize)>,
        recv_len: usize,
        root: InterRoot,
    ) -> Result<Request, Error> {
        Ok(spawn(self.scatterv_sched(send, blocks, recv_len, root)?))
    }

    // ----------------------------------------------- allgather, alltoall

    fn allgatherv_sched(
        &self,
        send: Vec<u8>,
        recv: Vec<u8>,
        blocks: Vec<(usize, usize)>,
    ) -> Result<Sched, Error> {
        check_blocks(&blocks, self.remote_size(), recv.len())?;
        let k = self.calls();
        Ok(Box::pin(async move {
            let s = k.x.send(send, 0, 0)?;
            let mut recv = recv;
            if k.l1.me == 0 {
                let mut reqs = Vec::new();
                for (r, &(_, len)) in blocks.iter().enumerate() {
                    reqs.push(k.x.recv(len, r as i32, 0)?);
                }
                for (q, &(off, len)) in reqs.into_iter().zip(&blocks) {
                    let (st, b) = done(q).await?;
                    put(&mut recv, off, len, &b[..st.count])?;
                }
            }
            done(s).await?;
            algo::bcast(&k.l1, recv, 0, 0).await
        }))
    }

    /// `MPI_Allgatherv`: each member gets every remote member's `send`,
    /// remote rank `i`'s at `blocks[i]` of `recv`.
    pub fn allgatherv(
        &self,
        send: &[u8],
        recv: &mut [u8],
        blocks: &[(usize, usize)],
    ) -> Result<(), Error> {
        let r =
            self.run(self.allgatherv_sched(send.to_vec(), recv.to_vec(), blocks.to_vec())?)?;
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
        Ok(spawn(self.allgatherv_sched(send, recv, blocks)?))
    }

    fn alltoallv_sched(
        &self,
        send: Vec<u8>,
        sblocks: Vec<(usize, usize)>,
        recv: Vec<u8>,
        rblocks: Vec<(usize, usize)>,
    ) -> Result<Sched, Error> {
        check_blocks(&sblocks, self.remote_size(), send.len())?;
        check_blocks(&rblocks, self.remote_size(), recv.len())?;
        let k = self.calls();
        Ok(Box::pin(async move {
            let mut recv = recv;
            let mut reqs = Vec::new();
            for (r, &(_, len)) in rblocks.iter().enumerate() {
                reqs.push(k.x.recv(len, r as i32, 0)?);
            }
            let mut sends = Vec::new();
            for (r, &(off, len)) in sblocks.iter().enumerate() {
                sends.push(k.x.send(send[off..off + len].to_vec(), r as i32, 0)?);
            }
            for (q, &(off, len)) in reqs.into_iter().zip(&rblocks) {
                let (st, b) = done(q).await?;
                put(&mut recv, off, len, &b[..st.count])?;
            }
            all(sends).await?;
            Ok(recv)
        }))
    }

    /// `MPI_Alltoallv` (and `alltoall`, `alltoallw` on packed blocks):
    /// block `sblocks[i]` of `send` to remote rank `i`, remote rank `i`'s
    /// block at `rblocks[i]` of `recv`.
    pub fn alltoallv(
        &self,
        send: &[u8],
        sblocks: &[(usize, usize)],
        recv: &mut [u8],
        rblocks: &[(usize, usize)],
    ) -> Result<(), Error> {
        let s = self.alltoallv_sched(
            send.to_vec(),
            sblocks.to_vec(),
            recv.to_vec(),
            rblocks.to_vec(),
        )?;
        let r = self.run(s)?;
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
        Ok(spawn(self.alltoallv_sched(send, sblocks, recv, rblocks)?))
    }
}
