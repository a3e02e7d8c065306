//! The blocking allreduce and all-to-all on the caller's memory, without
//! a schedule: the same algorithms, message sizes, pairings and tags as
//! the schedules of [`super`] (so the members of one call may mix the two
//! forms: one rank's datatype is contiguous, another's is not), run
//! directly with lent-buffer point-to-point operations
//! ([`crate::lent`]). Data are sent from and received into the caller's
//! buffer and reduced in place: no boxed future, no owned buffer per
//! message, no copy but the reduction's own reads. A reduction step whose
//! own data is still apart (the send buffer, before its first step)
//! receives the peer's block straight into the result and reduces there
//! (the same operands in the same order); later steps and the in-place
//! form receive into one scratch buffer, kept per thread between calls
//! and taken only when a step needs it (an allreduce of a predefined
//! operation on basic types on 2 ranks, from a separate send buffer,
//! takes none). Small messages (up to [`SEND_FIRST`] bytes)
//! go send first: a send that finishes in the call (copied out) is
//! followed by a blocking receive ([`Coll::recv_blocking`]), which takes
//! a message already here at once and otherwise watches the peer's ring,
//! without a request or whole progress passes. That wait does not advance
//! the schedules of nonblocking collectives, so it is taken only while
//! none is pending ([`task::idle`]).
//!
//! Every operation started is waited for before its function returns,
//! also after an error (its memory is lent to it); a wait that fails
//! before its operation completed leaves the scratch buffer leaked rather
//! than freed under a transfer.

use super::rabenseifner;
use super::tuned::{self, Fold};
use crate::coll::op::{self, reduce_into_left, reduce_local, reduce_to, Op};
use crate::coll::task::{self, check_blocks, Coll};
use crate::request::Request;
use crate::{Comm, Datatype, Error};
use std::cell::Cell;

/// A failure, and whether an operation may still be using lent memory.
struct Failed {
    err: Error,
    pending: bool,
}

impl From<Error> for Failed {
    fn from(err: Error) -> Failed {
        Failed {
            err,
            pending: false,
        }
    }
}

type Res<T> = Result<T, Failed>;

/// Scratch buffers larger than this are freed after the call instead of
/// kept for the next.
const SCRATCH_KEEP: usize = 8 << 20;

thread_local! {
    /// This thread's reduction scratch buffer between calls.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A scratch buffer of at least `len` bytes (this thread's, if large
/// enough; taken out while in use, so a nested call gets its own).
fn scratch(len: usize) -> Result<Vec<u8>, Error> {
    let v = SCRATCH.with(Cell::take);
    if v.len() >= len {
        return Ok(v);
    }
    drop(v);
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::NoMem {
        bytes: len,
        what: "a reduction's scratch buffer",
    })?;
    v.resize(len, 0);
    Ok(v)
}

/// Hands the scratch buffer back after a call (`pending`: leaked).
fn give_back(v: Vec<u8>, pending: bool) {
    if pending {
        std::mem::forget(v);
    } else if v.len() <= SCRATCH_KEEP {
        SCRATCH.with(|s| s.set(v));
    }
}

/// The call's scratch buffer, taken from [`scratch`] on first use only
/// (a step that receives straight into the result needs none).
struct Tmp {
    v: Option<Vec<u8>>,
    /// The call's length: the largest use.
    len: usize,
}

impl Tmp {
    /// The first `len` bytes of the scratch buffer (taken at the call's
    /// length on first use).
    fn get(&mut self, len: usize) -> Result<&mut [u8], Error> {
        if self.v.is_none() {
            self.v = Some(scratch(self.len.max(len))?);
        }
        match self.v.as_mut() {
            Some(v) if v.len() >= len => Ok(&mut v[..len]),
            _ => Err(Error::InvalidArgument {
                what: "internal: scratch buffer too short",
            }),
        }
    }

    /// Hands the buffer back, if one was taken ([`give_back`]).
    fn give_back(self, pending: bool) {
        if let Some(v) = self.v {
            give_back(v, pending);
        }
    }
}

/// Whether the peer's block can be received straight into `acc` while
/// this rank's data is still apart (`mine`), and reduced there without a
/// scratch buffer: always when the peer is the higher rank
/// (`acc = mine op acc`); from a lower rank only when the operation
/// reduces into its left operand ([`reduce_into_left`]).
fn into_acc(op: &Op, ty: &Datatype, theirs_lower: bool) -> bool {
    !theirs_lower || op::into_left_ok(op, ty)
}

/// `acc = theirs op mine` (theirs lower) or `acc = mine op theirs`, with
/// the peer's block received in `acc` (as [`combine_mine`] computes it
/// from a scratch copy: the same operands in the same order).
fn combine_in_acc(
    op: &Op,
    ty: &Datatype,
    mine: &[u8],
    acc: &mut [u8],
    theirs_lower: bool,
) -> Result<(), Error> {
    if !theirs_lower {
        return reduce_local(op, ty, mine, acc);
    }
    if reduce_into_left(op, ty, acc, mine)? {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        what: "internal: reduction into the left operand refused",
    })
}

/// Waits for `q`; a failure says whether it is still pending.
fn wait(c: &Coll, q: &mut Request) -> Res<usize> {
    match c.comm.wait(q) {
        Ok(st) => Ok(st.count),
        Err(err) => Err(Failed {
            pending: !q.is_complete(),
            err,
        }),
    }
}

/// Waits for every request (all of them, also after a failure); the first
/// failure, pending if any is.
fn settle(c: &Coll, reqs: &mut [Request]) -> Res<()> {
    let mut first: Option<Failed> = None;
    let mut pending = false;
    for q in reqs.iter_mut() {
        if let Err(f) = wait(c, q) {
            pending |= f.pending;
            first.get_or_insert(f);
        }
    }
    match first {
        None => Ok(()),
        Some(f) => Err(Failed {
            err: f.err,
            pending,
        }),
    }
}

/// Sends `data` to `to` and waits.
fn send(c: &Coll, data: &[u8], to: i32, sub: i32) -> Res<()> {
    // SAFETY: `data` is borrowed for this call, which waits for the send.
    match unsafe { c.send_lent_or_done(data.as_ptr(), data.len(), to, sub) }? {
        None => Ok(()),
        Some(mut q) => wait(c, &mut q).map(|_| ()),
    }
}

/// Receives up to `into.len()` bytes from `from` and waits; the count.
fn recv(c: &Coll, into: &mut [u8], from: i32, sub: i32) -> Res<usize> {
    if into.len() <= SEND_FIRST && task::idle() {
        // Small: blocking, as the receives of `exchange_small`.
        return Ok(c.recv_blocking(into, from, sub)?);
    }
    // SAFETY: `into` is borrowed mutably for this call, which waits for
    // the receive.
    let mut q = unsafe { c.recv_lent(into.as_mut_ptr(), into.len(), from, sub) }?;
    wait(c, &mut q)
}

/// Messages up to this size are exchanged send first
/// ([`exchange_small`]).
const SEND_FIRST: usize = 4096;

/// Sends `data` to `to` and receives up to `into.len()` bytes from
/// `from`, both at once; waits for both and returns the count received.
fn exchange(c: &Coll, data: &[u8], to: i32, into: &mut [u8], from: i32, sub: i32) -> Res<usize> {
    if data.len() <= SEND_FIRST && task::idle() {
        return exchange_small(c, data, to, into, from, sub);
    }
    // SAFETY: `into` is borrowed mutably for this call, which waits for
    // the receive (also when the send cannot start).
    let mut r = unsafe { c.recv_lent(into.as_mut_ptr(), into.len(), from, sub) }?;
    // SAFETY: `data` is borrowed for this call, which waits for the send.
    let s = unsafe { c.send_lent(data.as_ptr(), data.len(), to, sub) };
    let mut s = match s {
        Ok(s) => s,
        Err(err) => {
            // Best effort: the peer's message may still come.
            let _ = c.comm.cancel(&r);
            let pending = wait(c, &mut r).err().is_some_and(|f| f.pending);
            return Err(Failed { err, pending });
        }
    };
    let got = wait(c, &mut r);
    let sent = wait(c, &mut s);
    both(got, sent)
}

/// [`exchange`] of a small message: the send starts first and usually
/// finishes in the call (copied out); the receive then takes the peer's
/// message blocking ([`Coll::recv_blocking`]: no request, and a wait that
/// watches the peer's ring instead of running whole progress passes).
/// A send still pending receives the general way.
fn exchange_small(
    c: &Coll,
    data: &[u8],
    to: i32,
    into: &mut [u8],
    from: i32,
    sub: i32,
) -> Res<usize> {
    // SAFETY: `data` is borrowed for this call, which waits for the send.
    let started = unsafe { c.send_lent_or_done(data.as_ptr(), data.len(), to, sub) }?;
    let Some(mut s) = started else {
        tracing::trace!(
            to,
            from,
            len = data.len(),
            "small exchange: blocking receive"
        );
        return Ok(c.recv_blocking(into, from, sub)?);
    };
    // SAFETY: `into` is borrowed mutably for this call, which waits for
    // the receive.
    let r = unsafe { c.recv_lent(into.as_mut_ptr(), into.len(), from, sub) };
    let mut r = match r {
        Ok(r) => r,
        Err(err) => {
            let pending = wait(c, &mut s).err().is_some_and(|f| f.pending);
            return Err(Failed { err, pending });
        }
    };
    let got = wait(c, &mut r);
    let sent = wait(c, &mut s);
    both(got, sent)
}

/// The count received, or the first failure (pending if either is).
fn both(got: Res<usize>, sent: Res<usize>) -> Res<usize> {
    match (got, sent) {
        (Ok(n), Ok(_)) => Ok(n),
        (Err(a), Err(b)) => Err(Failed {
            pending: a.pending || b.pending,
            err: a.err,
        }),
        (Err(a), Ok(_)) | (Ok(_), Err(a)) => Err(a),
    }
}

/// Requires a whole block: `got` bytes of `want`.
fn whole(got: usize, want: usize) -> Res<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::Truncated {
            need: want,
            have: got,
        }
        .into())
    }
}

/// `acc = theirs op acc` when `theirs` comes from a lower rank, else
/// `acc = acc op theirs` (in place when the kernel allows; otherwise
/// into `theirs` and copied back).
fn combine(
    op: &Op,
    ty: &Datatype,
    acc: &mut [u8],
    theirs: &mut [u8],
    theirs_lower: bool,
) -> Result<(), Error> {
    if theirs_lower {
        return reduce_local(op, ty, theirs, acc);
    }
    if reduce_into_left(op, ty, acc, theirs)? {
        return Ok(());
    }
    reduce_local(op, ty, acc, theirs)?;
    acc.copy_from_slice(theirs);
    Ok(())
}

/// `out = left op right` (`out` apart from both).
fn combine_to(
    op: &Op,
    ty: &Datatype,
    left: &[u8],
    right: &[u8],
    out: &mut [u8],
) -> Result<(), Error> {
    if reduce_to(op, ty, left, right, out)? {
        return Ok(());
    }
    out.copy_from_slice(right);
    reduce_local(op, ty, left, out)
}

/// Combines the peer's `theirs` with this rank's data into `acc`: the
/// data is `mine` (taken: from now on it is in `acc`) or, when `mine` is
/// `None`, already in `acc`.
fn combine_mine(
    op: &Op,
    ty: &Datatype,
    mine: &mut Option<&[u8]>,
    acc: &mut [u8],
    theirs: &mut [u8],
    theirs_lower: bool,
) -> Result<(), Error> {
    match mine.take() {
        None => combine(op, ty, acc, theirs, theirs_lower),
        Some(m) if theirs_lower => combine_to(op, ty, theirs, m, acc),
        Some(m) => combine_to(op, ty, m, theirs, acc),
    }
}

/// The two disjoint ranges `a` (read) and `b` (written) of `buf`.
fn split(
    buf: &mut [u8],
    a: (usize, usize),
    b: (usize, usize),
) -> Result<(&[u8], &mut [u8]), Error> {
    let overlap = Error::InvalidArgument {
        what: "internal: overlapping blocks",
    };
    if a.1 <= b.0 {
        let (l, r) = buf.split_at_mut(b.0);
        Ok((&l[a.0..a.1], &mut r[..b.1 - b.0]))
    } else if b.1 <= a.0 {
        let (l, r) = buf.split_at_mut(a.0);
        Ok((&r[..a.1 - a.0], &mut l[b.0..b.1]))
    } else {
        Err(overlap)
    }
}

/// The folding's first step (as `tuned::fold_in`); `mine` as in
/// [`combine_mine`].
#[allow(clippy::too_many_arguments)]
fn fold_in(
    c: &Coll,
    f: &Fold,
    mine: &mut Option<&[u8]>,
    acc: &mut [u8],
    tmp: &mut Tmp,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Res<()> {
    let me = c.me;
    if me >= 2 * f.rem {
        return Ok(());
    }
    if f.newrank.is_none() {
        send(c, mine.unwrap_or(acc), me + 1, sub)
    } else if let Some(m) = mine.filter(|_| into_acc(op, ty, true)) {
        whole(recv(c, acc, me - 1, sub)?, acc.len())?;
        *mine = None;
        Ok(combine_in_acc(op, ty, m, acc, true)?)
    } else {
        let t = tmp.get(acc.len())?;
        whole(recv(c, t, me - 1, sub)?, acc.len())?;
        Ok(combine_mine(op, ty, mine, acc, t, true)?)
    }
}

/// The folding's last step (as `tuned::fold_out`).
fn fold_out(c: &Coll, f: &Fold, acc: &mut [u8], sub: i32) -> Res<()> {
    let me = c.me;
    if me >= 2 * f.rem {
        return Ok(());
    }
    if f.newrank.is_some() {
        send(c, acc, me - 1, sub)
    } else {
        recv(c, acc, me + 1, sub).map(|_| ())
    }
}

/// Recursive doubling (as `tuned::allreduce_doubling`). This rank's
/// data is `mine` or, when `None`, already in `acc`; the result is in
/// `acc`.
#[allow(clippy::too_many_arguments)]
fn doubling(
    c: &Coll,
    mut mine: Option<&[u8]>,
    acc: &mut [u8],
    tmp: &mut Tmp,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Res<()> {
    let f = Fold::new(c.me, c.n);
    fold_in(c, &f, &mut mine, acc, tmp, ty, op, sub)?;
    if let Some(nr) = f.newrank {
        let mut mask = 1;
        while mask < f.pof2 {
            let dst = f.real(nr ^ mask);
            let lower = dst < c.me;
            if let Some(m) = mine.filter(|_| into_acc(op, ty, lower)) {
                // This rank's data is still apart: the peer's block
                // goes straight into `acc`.
                whole(exchange(c, m, dst, acc, dst, sub + 1)?, acc.len())?;
                mine = None;
                combine_in_acc(op, ty, m, acc, lower)?;
            } else {
                let t = tmp.get(acc.len())?;
                let out = mine.unwrap_or(acc);
                whole(exchange(c, out, dst, t, dst, sub + 1)?, acc.len())?;
                combine_mine(op, ty, &mut mine, acc, t, lower)?;
            }
            mask <<= 1;
        }
    }
    fold_out(c, &f, acc, sub + 2)
}

/// Rabenseifner's algorithm (as `tuned::allreduce_rabenseifner`): the
/// halving exchanges receive into `tmp` and reduce into `acc`; the
/// doubling exchanges receive straight into `acc`. `mine` as in
/// [`doubling`].
#[allow(clippy::too_many_arguments)]
fn rabenseifner_in_place(
    c: &Coll,
    mut mine: Option<&[u8]>,
    acc: &mut [u8],
    tmp: &mut Tmp,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Res<()> {
    let f = Fold::new(c.me, c.n);
    fold_in(c, &f, &mut mine, acc, tmp, ty, op, sub)?;
    if let Some(nr) = f.newrank {
        let es = ty.size().max(1);
        let count = acc.len() / es;
        for (dst, (k0, k1), (g0, g1)) in f.halving_steps(nr, count, es) {
            let t = tmp.get(k1 - k0)?;
            let src = mine.unwrap_or(acc);
            whole(exchange(c, &src[g0..g1], dst, t, dst, sub + 1)?, k1 - k0)?;
            // Later steps work inside the kept part only: `mine`'s
            // other bytes are not needed again.
            let mut part = mine.map(|m| &m[k0..k1]);
            mine = None;
            combine_mine(op, ty, &mut part, &mut acc[k0..k1], t, dst < c.me)?;
        }
        for (dst, my, theirs) in f.doubling_steps(nr, count, es) {
            let (out, into) = split(acc, my, theirs)?;
            exchange(c, out, dst, into, dst, sub + 3)?;
        }
    }
    fold_out(c, &f, acc, sub + 2)
}

/// Whether the blocks (offset, length) overlap one another (empty ones
/// never do).
pub(crate) fn overlapping(blocks: &[(usize, usize)]) -> bool {
    // The usual layout first: ascending blocks, each after the one
    // before (one pass, no allocation).
    let mut end = 0usize;
    let ascending = blocks.iter().filter(|b| b.1 > 0).all(|&(o, l)| {
        let after = o >= end;
        end = o.saturating_add(l);
        after
    });
    if ascending {
        return false;
    }
    let mut b: Vec<(usize, usize)> = blocks.iter().copied().filter(|b| b.1 > 0).collect();
    b.sort_unstable();
    b.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0)
}

impl Comm {
    /// `MPI_Allreduce` in place, on packed elements of `ty`: `buf` holds
    /// this rank's data and receives the reduction. The same algorithms
    /// and messages as [`Comm::allreduce_packed`] (members may mix the
    /// two), run without a schedule on `buf` itself: sends read from it,
    /// the doubling steps receive into it, the peers' contributions are
    /// reduced into it (one scratch buffer of `buf.len()` bytes, kept per
    /// thread between calls up to 8 MiB).
    pub fn allreduce_in_place(&self, buf: &mut [u8], ty: &Datatype, op: &Op) -> Result<(), Error> {
        self.allreduce_direct(None, buf, ty, op)
    }

    /// `MPI_Allreduce` of `send` (or, `None`, of `recv`'s bytes) into
    /// `recv`, without a schedule: `send` is sent from and reduced from in
    /// place, never copied into `recv` first.
    pub(crate) fn allreduce_direct(
        &self,
        send: Option<&[u8]>,
        recv: &mut [u8],
        ty: &Datatype,
        op: &Op,
    ) -> Result<(), Error> {
        Self::reduction_ok(op, ty, send.map_or(recv.len(), <[u8]>::len))?;
        if let Some(s) = send {
            Self::same_len(s.len(), recv.len())?;
        }
        let c = Coll::new(self);
        if c.n == 1 {
            if let Some(s) = send {
                recv.copy_from_slice(s);
            }
            return Ok(());
        }
        let long = rabenseifner(recv.len(), ty, op, c.n)?;
        let mut tmp = Tmp {
            v: None,
            len: recv.len(),
        };
        let r = if long {
            rabenseifner_in_place(&c, send, recv, &mut tmp, ty, op, 0)
        } else {
            doubling(&c, send, recv, &mut tmp, ty, op, 0)
        };
        match r {
            Ok(()) => {
                tmp.give_back(false);
                Ok(())
            }
            Err(f) => {
                tmp.give_back(f.pending);
                Err(f.err)
            }
        }
    }

    /// `MPI_Alltoallv` straight between the callers' buffers: as
    /// [`Comm::alltoallv`] (the same messages: members may mix the two),
    /// each block sent from `send` and received into `recv` in place,
    /// this rank's own block copied once. The receive blocks must not
    /// overlap ([`Error::InvalidArgument`]).
    pub fn alltoallv_direct(
        &self,
        send: &[u8],
        sblocks: &[(usize, usize)],
        recv: &mut [u8],
        rblocks: &[(usize, usize)],
    ) -> Result<(), Error> {
        let n = self.size();
        check_blocks(sblocks, n, send.len())?;
        check_blocks(rblocks, n, recv.len())?;
        if overlapping(rblocks) {
            return Err(Error::InvalidArgument {
                what: "all-to-all receive blocks overlap",
            });
        }
        let c = Coll::new(self);
        let me = c.me as usize;
        let (so, sl) = sblocks[me];
        let (ro, rl) = rblocks[me];
        super::place(recv, ro, rl, &send[so..so + sl])?;
        let largest = sblocks.iter().map(|b| b.1).max().unwrap_or(0);
        let r = if tuned::long(largest >= tuned::ALLTOALL_LONG, c.n > 1)? {
            pairwise(&c, send, sblocks, recv, rblocks)
        } else {
            all_at_once(&c, send, sblocks, recv, rblocks)
        };
        r.map_err(|f| f.err)
    }
}

/// Pairwise exchange (as `tuned::alltoallv_pairwise`).
fn pairwise(
    c: &Coll,
    send: &[u8],
    sblocks: &[(usize, usize)],
    recv: &mut [u8],
    rblocks: &[(usize, usize)],
) -> Res<()> {
    let (me, n) = (c.me, c.n);
    for i in 1..n {
        let to = (me + i) % n;
        let from = (me - i).rem_euclid(n);
        let (o, l) = sblocks[to as usize];
        let (ro, rl) = rblocks[from as usize];
        exchange(c, &send[o..o + l], to, &mut recv[ro..ro + rl], from, 0)?;
    }
    Ok(())
}

/// Every receive and send posted at once (as the schedule's
/// `alltoallv_all_at_once`).
fn all_at_once(
    c: &Coll,
    send: &[u8],
    sblocks: &[(usize, usize)],
    recv: &mut [u8],
    rblocks: &[(usize, usize)],
) -> Res<()> {
    let (me, n) = (c.me, c.n);
    if n == 2 {
        // One peer: its receive and its send, posted in the same order.
        let peer = 1 - me;
        let (so, sl) = sblocks[peer as usize];
        let (ro, rl) = rblocks[peer as usize];
        let into = &mut recv[ro..ro + rl];
        return exchange(c, &send[so..so + sl], peer, into, peer, 0).map(|_| ());
    }
    if task::idle() && sblocks.iter().all(|b| b.1 <= SEND_FIRST) {
        return sends_first(c, send, sblocks, recv, rblocks);
    }
    let mut reqs = Vec::with_capacity(2 * (n as usize).saturating_sub(1));
    let base = recv.as_mut_ptr();
    let mut started = Ok(());
    for i in 1..n {
        let from = (me - i).rem_euclid(n);
        let (o, l) = rblocks[from as usize];
        // SAFETY: block `from` lies inside `recv` (checked) and overlaps no
        // other receive block (checked); `recv` is borrowed mutably for
        // this call, which waits for every request it started.
        match unsafe { c.recv_lent(base.add(o), l, from, 0) } {
            Ok(q) => reqs.push(q),
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    if started.is_ok() {
        for i in 1..n {
            let to = (me + i) % n;
            let (o, l) = sblocks[to as usize];
            let b = &send[o..o + l];
            // SAFETY: `send` is borrowed for this call, which waits for
            // every request it started.
            match unsafe { c.send_lent(b.as_ptr(), b.len(), to, 0) } {
                Ok(q) => reqs.push(q),
                Err(e) => {
                    started = Err(e);
                    break;
                }
            }
        }
    }
    if let Err(err) = started {
        for q in &reqs {
            let _ = c.comm.cancel(q);
        }
        let pending = settle(c, &mut reqs).err().is_some_and(|f| f.pending);
        return Err(Failed { err, pending });
    }
    settle(c, &mut reqs)
}

/// [`all_at_once`] of small blocks, as [`exchange_small`]: every send
/// first (each usually finishing in the call), then each receive blocking
/// in turn; if a send is still pending, the receives are posted and all
/// waited for.
fn sends_first(
    c: &Coll,
    send: &[u8],
    sblocks: &[(usize, usize)],
    recv: &mut [u8],
    rblocks: &[(usize, usize)],
) -> Res<()> {
    let (me, n) = (c.me, c.n);
    let mut reqs = Vec::new();
    for i in 1..n {
        let to = (me + i) % n;
        let (o, l) = sblocks[to as usize];
        let b = &send[o..o + l];
        // SAFETY: `send` is borrowed for this call, which waits for every
        // request it started.
        match unsafe { c.send_lent_or_done(b.as_ptr(), b.len(), to, 0) } {
            Ok(None) => {}
            Ok(Some(q)) => reqs.push(q),
            Err(err) => {
                let pending = settle(c, &mut reqs).err().is_some_and(|f| f.pending);
                return Err(Failed { err, pending });
            }
        }
    }
    if reqs.is_empty() {
        for i in 1..n {
            let from = (me - i).rem_euclid(n);
            let (o, l) = rblocks[from as usize];
            c.recv_blocking(&mut recv[o..o + l], from, 0)?;
        }
        return Ok(());
    }
    let base = recv.as_mut_ptr();
    for i in 1..n {
        let from = (me - i).rem_euclid(n);
        let (o, l) = rblocks[from as usize];
        // SAFETY: block `from` lies inside `recv` (checked) and overlaps no
        // other receive block (checked); `recv` is borrowed mutably for
        // this call, which waits for every request it started.
        match unsafe { c.recv_lent(base.add(o), l, from, 0) } {
            Ok(q) => reqs.push(q),
            Err(err) => {
                for q in &reqs {
                    let _ = c.comm.cancel(q);
                }
                let pending = settle(c, &mut reqs).err().is_some_and(|f| f.pending);
                return Err(Failed { err, pending });
            }
        }
    }
    settle(c, &mut reqs)
}

#[cfg(test)]
mod tests {
    use super::overlapping;

    #[test]
    fn overlapping_blocks_in_any_order() {
        // Ascending and apart (the one-pass case), with empty blocks anywhere.
        assert!(!overlapping(&[(0, 4), (4, 4), (8, 0), (0, 0), (8, 4)]));
        assert!(!overlapping(&[]));
        // Apart but out of order (sorted first).
        assert!(!overlapping(&[(8, 4), (0, 4), (4, 4)]));
        // Overlapping, in order and out of order.
        assert!(overlapping(&[(0, 5), (4, 4)]));
        assert!(overlapping(&[(8, 4), (0, 4), (2, 4)]));
        assert!(overlapping(&[(4, 4), (0, 8)]));
    }
}
