//! The algorithms [`super`] picks by message size, process count and
//! operation, as MPICH's default selection does (thresholds below; the
//! figures are MPICH 4.0's defaults, not measured on tmx yet: `cargo
//! xtask bench abi` compares the result with MPICH).
//!
//! Non-power-of-two process counts use MPICH's folding: with `pof2` the
//! largest power of two not above `n` and `rem = n - pof2`, each even rank
//! below `2 rem` hands its data to the next (odd) rank and sits out; the
//! `pof2` ranks left renumber themselves (`newrank`) and run the
//! power-of-two algorithm; the odd ranks hand the result back. Every
//! reduction keeps rank order (a lower rank's data is the left operand),
//! so the result is also right for operations that are not commutative
//! where the algorithm allows those, and every rank computes the same
//! expression (identical floating-point results on every rank).
//!
//! [`ENV_COLL_ALGORITHMS`] forces the short-message or the long-message
//! algorithms regardless of size (where the operation allows the latter):
//! the tests run both on small data.

use super::{got, place, ring_allgatherv};
use crate::coll::op::{reduce_local, Op};
use crate::coll::task::{all, done, Coll};
use crate::{Datatype, Error};
use std::sync::OnceLock;

/// Environment variable: `short` or `long` makes every collective use its
/// short- or long-message algorithm whatever the size (for testing and
/// comparisons); `auto` (the default) picks by size.
pub const ENV_COLL_ALGORITHMS: &str = "TMX_COLL_ALGORITHMS";

/// Allreduce and reduce: below this many bytes, recursive doubling
/// (allreduce) or a binomial tree (reduce); from it, for commutative
/// operations, Rabenseifner's reduce-scatter (recursive halving) followed
/// by an allgather (recursive doubling) or a gather to the root.
pub(crate) const REDUCE_SHORT: usize = 2048;
/// Bcast: from this many bytes and [`BCAST_MIN_RANKS`] ranks, a scatter
/// from the root followed by a ring allgather (van de Geijn); below, a
/// binomial tree.
pub(crate) const BCAST_LONG: usize = 12 << 10;
/// See [`BCAST_LONG`].
pub(crate) const BCAST_MIN_RANKS: i32 = 8;
/// Allgather(v): below this many bytes in all, Bruck's algorithm
/// (⌈log₂ n⌉ rounds, any `n`); from it, a ring.
pub(crate) const ALLGATHER_SHORT: usize = 80 << 10;
/// Alltoall(v/w): a rank whose largest block to send is at least this
/// many bytes exchanges pairwise (n − 1 steps, one peer at a time);
/// below, it posts every send and receive at once. (Both send one message
/// per pair with the same tag, so ranks may choose differently.)
pub(crate) const ALLTOALL_LONG: usize = 32 << 10;
/// Reduce-scatter: from this many bytes in all, for commutative
/// operations, a pairwise exchange (each rank reduces its own block);
/// below, or for operations that are not commutative, reduce then scatter.
pub(crate) const REDUCE_SCATTER_LONG: usize = 512 << 10;

/// What [`ENV_COLL_ALGORITHMS`] asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Force {
    Auto,
    Short,
    Long,
}

fn force() -> Result<Force, Error> {
    static FORCE: OnceLock<Result<Force, String>> = OnceLock::new();
    let f = FORCE.get_or_init(|| {
        match std::env::var(ENV_COLL_ALGORITHMS)
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase()
            .as_str()
        {
            "" | "auto" => Ok(Force::Auto),
            "short" => Ok(Force::Short),
            "long" => Ok(Force::Long),
            other => Err(other.to_string()),
        }
    });
    f.clone().map_err(|value| Error::Config {
        var: ENV_COLL_ALGORITHMS,
        value,
        reason: "expected auto, short or long",
    })
}

/// Whether to use the long-message algorithm: `by_size` unless forced;
/// never where it does not apply (`allowed` false).
pub(crate) fn long(by_size: bool, allowed: bool) -> Result<bool, Error> {
    Ok(allowed
        && match force()? {
            Force::Auto => by_size,
            Force::Short => false,
            Force::Long => true,
        })
}

/// Sends `data` to `to` and receives up to `len` bytes from `from` (sub-tag
/// `sub`), both at once.
async fn exchange(
    c: &Coll,
    data: Vec<u8>,
    to: i32,
    len: usize,
    from: i32,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let r = c.recv(len, from, sub)?;
    let s = c.send(data, to, sub)?;
    let (st, mut b) = done(r).await?;
    done(s).await?;
    b.truncate(st.count);
    Ok(b)
}

/// `acc = theirs op acc` when `theirs` comes from a lower rank, else
/// `acc = acc op theirs` (`theirs` is padded or cut to `acc`'s length).
fn combine(
    op: &Op,
    ty: &Datatype,
    acc: &mut Vec<u8>,
    mut theirs: Vec<u8>,
    theirs_lower: bool,
) -> Result<(), Error> {
    theirs.resize(acc.len(), 0);
    if theirs_lower {
        reduce_local(op, ty, &theirs, acc)
    } else {
        reduce_local(op, ty, acc, &mut theirs)?;
        *acc = theirs;
        Ok(())
    }
}

/// The largest power of two not above `n` (`n` ≥ 1).
pub(crate) fn pof2(n: i32) -> i32 {
    1 << (31 - (n.max(1) as u32).leading_zeros())
}

/// One step of a halving or doubling exchange: the partner's real rank and
/// two byte ranges (see [`Fold::halving_steps`], [`Fold::doubling_steps`]).
pub(super) type Step = (i32, (usize, usize), (usize, usize));

/// The folding of `n` ranks onto a power of two (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(super) struct Fold {
    pub(super) pof2: i32,
    pub(super) rem: i32,
    /// This rank's number among the `pof2` (`None`: it sits out).
    pub(super) newrank: Option<i32>,
}

impl Fold {
    pub(super) fn new(me: i32, n: i32) -> Fold {
        let pof2 = pof2(n);
        let rem = n - pof2;
        let newrank = if me < 2 * rem {
            (me % 2 == 1).then_some(me / 2)
        } else {
            Some(me - rem)
        };
        Fold { pof2, rem, newrank }
    }

    /// The real rank of `newrank`.
    pub(super) fn real(&self, newrank: i32) -> i32 {
        if newrank < self.rem {
            newrank * 2 + 1
        } else {
            newrank + self.rem
        }
    }

    /// The byte range of blocks `base .. base + m` of [`block`]'s split of
    /// `count` elements of `es` bytes.
    fn range(&self, base: i32, m: i32, count: usize, es: usize) -> (usize, usize) {
        (
            block(base, self.pof2, count, es).0,
            block(base + m - 1, self.pof2, count, es).1,
        )
    }

    /// Rabenseifner's recursive halving for folded rank `nr`, in order:
    /// per step the partner's real rank, the byte range this rank keeps
    /// (and reduces) and the range it gives away.
    pub(super) fn halving_steps(&self, nr: i32, count: usize, es: usize) -> Vec<Step> {
        let mut steps = Vec::new();
        let (mut lo, mut hi) = (0, self.pof2);
        let mut mask = self.pof2 / 2;
        while mask > 0 {
            let mid = lo + mask;
            let (keep, give) = if nr & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            steps.push((
                self.real(nr ^ mask),
                self.range(keep.0, keep.1 - keep.0, count, es),
                self.range(give.0, give.1 - give.0, count, es),
            ));
            (lo, hi) = keep;
            mask >>= 1;
        }
        steps
    }

    /// The recursive doubling allgather that follows [`Self::halving_steps`],
    /// in order: per step the partner's real rank, the byte range this rank
    /// sends and the range it receives.
    pub(super) fn doubling_steps(&self, nr: i32, count: usize, es: usize) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut mask = 1;
        while mask < self.pof2 {
            let peer = nr ^ mask;
            steps.push((
                self.real(peer),
                self.range(nr & !(mask - 1), mask, count, es),
                self.range(peer & !(mask - 1), mask, count, es),
            ));
            mask <<= 1;
        }
        steps
    }
}

/// The folding's first step: an even rank below `2 rem` sends `acc` to the
/// next rank, which combines it (as the left operand).
async fn fold_in(
    c: &Coll,
    f: &Fold,
    acc: &mut Vec<u8>,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Result<(), Error> {
    let me = c.me;
    if me >= 2 * f.rem {
        return Ok(());
    }
    if f.newrank.is_none() {
        done(c.send(acc.clone(), me + 1, sub)?).await?;
    } else {
        let theirs = got(c, acc.len(), me - 1, sub).await?;
        combine(op, ty, acc, theirs, true)?;
    }
    Ok(())
}

/// The folding's last step: the odd ranks below `2 rem` hand the result
/// back to the even ones.
async fn fold_out(c: &Coll, f: &Fold, acc: &mut [u8], sub: i32) -> Result<(), Error> {
    let me = c.me;
    if me >= 2 * f.rem {
        return Ok(());
    }
    if f.newrank.is_some() {
        done(c.send(acc.to_vec(), me - 1, sub)?).await?;
    } else {
        let b = got(c, acc.len(), me + 1, sub).await?;
        let len = acc.len();
        place(acc, 0, len, &b)?;
    }
    Ok(())
}

/// `MPI_Allreduce` by recursive doubling (any operation): ⌈log₂ n⌉
/// exchanges of the whole data.
pub(crate) async fn allreduce_doubling(
    c: &Coll,
    mut acc: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let f = Fold::new(c.me, c.n);
    fold_in(c, &f, &mut acc, ty, op, sub).await?;
    if let Some(nr) = f.newrank {
        let mut mask = 1;
        while mask < f.pof2 {
            let dst = f.real(nr ^ mask);
            let theirs = exchange(c, acc.clone(), dst, acc.len(), dst, sub + 1).await?;
            combine(op, ty, &mut acc, theirs, dst < c.me)?;
            mask <<= 1;
        }
    }
    fold_out(c, &f, &mut acc, sub + 2).await?;
    Ok(acc)
}

/// The byte range of block `i` of `pof2` over `count` elements of `es`
/// bytes (balanced: sizes differ by at most one element).
pub(super) fn block(i: i32, pof2: i32, count: usize, es: usize) -> (usize, usize) {
    let at = |k: i32| k as usize * count / pof2 as usize * es;
    (at(i), at(i + 1))
}

/// Rabenseifner's reduce-scatter by recursive halving among the folded
/// ranks (commutative operations): afterwards rank `newrank` holds the
/// reduction of block `newrank` of [`block`]'s split. Returns the fold.
async fn halving(
    c: &Coll,
    acc: &mut Vec<u8>,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Result<Fold, Error> {
    let f = Fold::new(c.me, c.n);
    fold_in(c, &f, acc, ty, op, sub).await?;
    let Some(nr) = f.newrank else {
        return Ok(f);
    };
    let es = ty.size().max(1);
    let count = acc.len() / es;
    for (dst, (k0, k1), (g0, g1)) in f.halving_steps(nr, count, es) {
        let theirs = exchange(c, acc[g0..g1].to_vec(), dst, k1 - k0, dst, sub + 1).await?;
        let mut mine = acc[k0..k1].to_vec();
        combine(op, ty, &mut mine, theirs, dst < c.me)?;
        acc[k0..k1].copy_from_slice(&mine);
    }
    Ok(f)
}

/// `MPI_Allreduce` by Rabenseifner's algorithm (commutative operations,
/// at least `pof2` elements): reduce-scatter by recursive halving, then
/// allgather by recursive doubling; each rank sends and receives about
/// twice the data once.
pub(crate) async fn allreduce_rabenseifner(
    c: &Coll,
    mut acc: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let f = halving(c, &mut acc, ty, op, sub).await?;
    if let Some(nr) = f.newrank {
        let es = ty.size().max(1);
        let count = acc.len() / es;
        for (dst, (m0, m1), (p0, p1)) in f.doubling_steps(nr, count, es) {
            let b = exchange(c, acc[m0..m1].to_vec(), dst, p1 - p0, dst, sub + 3).await?;
            place(&mut acc, p0, p1 - p0, &b)?;
        }
    }
    fold_out(c, &f, &mut acc, sub + 2).await?;
    Ok(acc)
}

/// `MPI_Reduce` by Rabenseifner's algorithm (commutative operations, at
/// least `pof2` elements): reduce-scatter by recursive halving, then every
/// block straight to the root.
pub(crate) async fn reduce_rabenseifner(
    c: &Coll,
    mut acc: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    root: i32,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let f = halving(c, &mut acc, ty, op, sub).await?;
    let es = ty.size().max(1);
    let count = acc.len() / es;
    if let Some(nr) = f.newrank {
        if c.me != root {
            let (b0, b1) = block(nr, f.pof2, count, es);
            done(c.send(acc[b0..b1].to_vec(), root, sub + 3)?).await?;
        }
    }
    if c.me != root {
        return Ok(Vec::new());
    }
    let mut recvs = Vec::new();
    for i in 0..f.pof2 {
        let from = f.real(i);
        if from != root {
            let (b0, b1) = block(i, f.pof2, count, es);
            recvs.push((b0, b1, c.recv(b1 - b0, from, sub + 3)?));
        }
    }
    for (b0, b1, q) in recvs {
        let (st, b) = done(q).await?;
        place(&mut acc, b0, b1 - b0, &b[..st.count])?;
    }
    Ok(acc)
}

/// `MPI_Bcast` as a scatter from the root and a ring allgather (van de
/// Geijn): each rank receives about twice its share instead of the whole
/// buffer ⌈log₂ n⌉ times along a tree.
pub(crate) async fn bcast_scatter_ring(
    c: &Coll,
    mut buf: Vec<u8>,
    root: i32,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let len = buf.len();
    let chunk = len.div_ceil(n as usize);
    let blocks: Vec<(usize, usize)> = (0..n)
        .map(|r| {
            let vr = (r - root).rem_euclid(n) as usize;
            let off = (vr * chunk).min(len);
            (off, chunk.min(len - off))
        })
        .collect();
    let (off, l) = blocks[me as usize];
    if me == root {
        let mut sends = Vec::new();
        for r in (0..n).filter(|&r| r != root) {
            let (o, l) = blocks[r as usize];
            sends.push(c.send(buf[o..o + l].to_vec(), r, sub)?);
        }
        all(sends).await?;
    } else {
        let b = got(c, l, root, sub).await?;
        place(&mut buf, off, l, &b)?;
    }
    let mine = buf[off..off + l].to_vec();
    ring_allgatherv(c, mine, buf, &blocks, sub + 1).await
}

/// `MPI_Allgatherv` by Bruck's algorithm: in round `k` each rank passes
/// the blocks it holds (its own and the next ones, in rank order) to the
/// rank `2^k` below it; ⌈log₂ n⌉ rounds for any `n`.
pub(crate) async fn allgatherv_bruck(
    c: &Coll,
    send: Vec<u8>,
    mut recv: Vec<u8>,
    blocks: &[(usize, usize)],
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let (off, len) = blocks[me as usize];
    place(&mut recv, off, len, &send)?;
    let at = |k: i32| blocks[(me + k).rem_euclid(n) as usize];
    // The blocks of ranks me, me + 1, ... held so far, one after the other.
    let mut have = recv[off..off + len].to_vec();
    let mut held = 1;
    while held < n {
        let cnt = held.min(n - held);
        let dst = (me - held).rem_euclid(n);
        let src = (me + held).rem_euclid(n);
        let out: usize = (0..cnt).map(|k| at(k).1).sum();
        let want: usize = (held..held + cnt).map(|k| at(k).1).sum();
        let b = exchange(c, have[..out].to_vec(), dst, want, src, sub).await?;
        if b.len() != want {
            return Err(Error::Truncated {
                need: want,
                have: b.len(),
            });
        }
        have.extend_from_slice(&b);
        held += cnt;
    }
    let mut pos = 0;
    for k in 0..n {
        let (o, l) = at(k);
        recv[o..o + l].copy_from_slice(&have[pos..pos + l]);
        pos += l;
    }
    Ok(recv)
}

/// `MPI_Alltoallv` by pairwise exchange: in step `i` send to `me + i`
/// and receive from `me - i`, one peer at a time.
pub(crate) async fn alltoallv_pairwise(
    c: &Coll,
    send: Vec<u8>,
    sblocks: &[(usize, usize)],
    mut recv: Vec<u8>,
    rblocks: &[(usize, usize)],
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let (so, sl) = sblocks[me as usize];
    let (ro, rl) = rblocks[me as usize];
    place(&mut recv, ro, rl, &send[so..so + sl])?;
    for i in 1..n {
        let to = (me + i) % n;
        let from = (me - i).rem_euclid(n);
        let (o, l) = sblocks[to as usize];
        let (ro, rl) = rblocks[from as usize];
        let b = exchange(c, send[o..o + l].to_vec(), to, rl, from, 0).await?;
        place(&mut recv, ro, rl, &b)?;
    }
    Ok(recv)
}

/// `MPI_Reduce_scatter` by pairwise exchange (commutative operations):
/// in step `i` send block `me + i` of the data to its owner and combine
/// block `me` of rank `me - i`'s into this rank's.
pub(crate) async fn reduce_scatter_pairwise(
    c: &Coll,
    data: Vec<u8>,
    blocks: &[(usize, usize)],
    ty: &Datatype,
    op: &Op,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let (o, l) = blocks[me as usize];
    let mut mine = data[o..o + l].to_vec();
    for i in 1..n {
        let to = (me + i) % n;
        let from = (me - i).rem_euclid(n);
        let (to_o, to_l) = blocks[to as usize];
        let theirs = exchange(c, data[to_o..to_o + to_l].to_vec(), to, l, from, sub).await?;
        combine(op, ty, &mut mine, theirs, from < me)?;
    }
    Ok(mine)
}

/// `MPI_Scan` (`exclusive`: `MPI_Exscan`) by recursive doubling (any
/// operation): ⌈log₂ n⌉ exchanges of a partial reduction.
pub(crate) async fn scan_doubling(
    c: &Coll,
    data: Vec<u8>,
    ty: &Datatype,
    op: &Op,
    exclusive: bool,
    sub: i32,
) -> Result<Vec<u8>, Error> {
    let (me, n) = (c.me, c.n);
    let len = data.len();
    // The reduction over this rank's aligned group so far, and over the
    // ranks below this one (and this one, unless exclusive) in it.
    let mut partial = data.clone();
    let mut result = (!exclusive).then_some(data);
    let mut mask = 1;
    while mask < n {
        let dst = me ^ mask;
        if dst < n {
            let theirs = exchange(c, partial.clone(), dst, len, dst, sub).await?;
            let lower = dst < me;
            if lower {
                result = Some(match result.take() {
                    Some(mut r) => {
                        combine(op, ty, &mut r, theirs.clone(), true)?;
                        r
                    }
                    None => {
                        let mut t = theirs.clone();
                        t.resize(len, 0);
                        t
                    }
                });
            }
            combine(op, ty, &mut partial, theirs, lower)?;
        }
        mask <<= 1;
    }
    Ok(result.unwrap_or_default())
}
