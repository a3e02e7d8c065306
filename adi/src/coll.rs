//! Communicator creation (`dup`, `split`) and minimal collectives built on
//! point-to-point messages.
//!
//! Every collective runs on the communicator's *collective* context
//! (`context_id() + 1`), never on its point-to-point context, so user
//! messages (even with `ANY_SOURCE`/`ANY_TAG`) can never match collective
//! traffic and vice versa. Within one communicator, collectives are ordered
//! by MPI's rule that every member calls them in the same order, and the
//! point-to-point non-overtaking rule keeps their messages apart.
//!
//! # Context ids
//!
//! Context id pairs `(2k, 2k + 1)` (p2p, collective), `k < 32767` with the
//! 16-bit context field of [`tm_proto::TagLayout::DEFAULT`] (pair 32767 is the
//! device's own, for its traffic at init). Each process
//! keeps a bitmask of the pairs it has free; creating a communicator
//! all-reduces the members' masks with bitwise AND on the parent's
//! collective context and takes the lowest pair free everywhere (MPICH's
//! algorithm). `split` allocates one pair for all of its (disjoint) new
//! communicators. Creating communicators concurrently from several threads
//! of one process is serialized by a per-process lock; it must happen in
//! the same order on every rank (as MPI requires for collectives on one
//! communicator), otherwise two creations can deadlock across ranks.
//!
//! # Algorithms
//!
//! Barrier: dissemination (⌈log₂ p⌉ rounds of zero-byte messages). Bcast:
//! binomial tree. Reduce: binomial tree toward the root (the operations
//! offered are commutative). Allreduce: reduce to rank 0, then bcast.
//! Gather: linear at the root.
//!
//! # Erroneous programs
//!
//! - A root outside the communicator is [`Error::InvalidRoot`] at once.
//! - Members that pass **different roots** to `bcast` or `reduce`: the root
//!   travels in the messages' tag (free: the tag is sent anyway), and a
//!   member receives from its tree parent with any tag and compares. A
//!   message of another root (or of another collective call) is never taken
//!   as data: that member fails with [`Error::RootMismatch`]
//!   (`MPI_ERR_ROOT`). Where no member receives such a message (two members
//!   that both believe they are the root only send), the disagreement cannot
//!   be seen without extra messages on every call: those members wait for
//!   data that never comes, and the job ends at the launcher's time limit
//!   (`tmrun --timeout`, `MPIEXEC_TIMEOUT`). `gather` with different roots
//!   behaves the same way (a hang, left to the time limit).
//! - Buffers sized by the arguments (a `gather`'s `size * len` bytes, a
//!   reduction's temporaries) that cannot be had are [`Error::NoMem`].

use crate::attr::UNDEFINED;
use crate::comm::{Comm, CommInner, Source, Tag};
use crate::device::{Group, Mode};
use crate::Error;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, PoisonError};

mod algo;
mod api;
mod inter;
pub mod op;
pub(crate) mod task;

pub use algo::ENV_COLL_ALGORITHMS;
pub use api::equal_blocks;
pub use inter::InterRoot;

const TAG_BARRIER: i32 = 1;
const TAG_GATHER: i32 = 4;
/// Rooted collectives carry their root in the tag: `base + root mod 2^21`.
const ROOT_BITS: i32 = 21;
const TAG_BCAST_BASE: i32 = 1 << 22;
const TAG_REDUCE_BASE: i32 = (1 << 22) | (1 << 21);
const _: () = assert!(TAG_REDUCE_BASE + (1 << ROOT_BITS) - 1 <= crate::attr::TAG_UB);

/// The tag of a rooted collective's messages (`base` of the collective).
fn rooted_tag(base: i32, root: i32) -> i32 {
    base | (root & ((1 << ROOT_BITS) - 1))
}

/// A reduction operation (`MPI_Op`, the predefined commutative ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `MPI_SUM`.
    Sum,
    /// `MPI_PROD`.
    Prod,
    /// `MPI_MIN`.
    Min,
    /// `MPI_MAX`.
    Max,
    /// `MPI_BAND` (integers only).
    BitAnd,
    /// `MPI_BOR` (integers only).
    BitOr,
    /// `MPI_BXOR` (integers only).
    BitXor,
}

impl ReduceOp {
    fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "MPI_SUM",
            ReduceOp::Prod => "MPI_PROD",
            ReduceOp::Min => "MPI_MIN",
            ReduceOp::Max => "MPI_MAX",
            ReduceOp::BitAnd => "MPI_BAND",
            ReduceOp::BitOr => "MPI_BOR",
            ReduceOp::BitXor => "MPI_BXOR",
        }
    }
}

/// An element type the collectives can reduce. Implemented for the integer
/// and floating-point primitives; data travels in native byte order (tmx
/// is homogeneous).
pub trait Reducible: Copy + Send + Sync + 'static {
    /// Size in bytes.
    const SIZE: usize;
    /// Name for error messages.
    const NAME: &'static str;
    /// Appends the native bytes of `self`.
    fn put(self, out: &mut Vec<u8>);
    /// Reads one element from exactly [`Self::SIZE`] bytes.
    fn get(b: &[u8]) -> Self;
    /// `a op b`, or `None` if `op` is not defined for this type.
    fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self>;
}

macro_rules! int_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; core::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                Some(match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                    ReduceOp::BitAnd => a & b,
                    ReduceOp::BitOr => a | b,
                    ReduceOp::BitXor => a ^ b,
                })
            }
        }
    )*};
}
int_reducible!(u8, i8, u16, i16, u32, i32, u64, i64);

macro_rules! float_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const NAME: &'static str = stringify!($t);
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_ne_bytes());
            }
            fn get(b: &[u8]) -> Self {
                let mut a = [0u8; core::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            fn combine(op: ReduceOp, a: Self, b: Self) -> Option<Self> {
                match op {
                    ReduceOp::Sum => Some(a + b),
                    ReduceOp::Prod => Some(a * b),
                    ReduceOp::Min => Some(a.min(b)),
                    ReduceOp::Max => Some(a.max(b)),
                    ReduceOp::BitAnd | ReduceOp::BitOr | ReduceOp::BitXor => None,
                }
            }
        }
    )*};
}
float_reducible!(f32, f64);

fn to_bytes<T: Reducible>(v: &[T]) -> Result<Vec<u8>, Error> {
    let len = crate::mem::bytes(v.len(), T::SIZE, "a reduction's send buffer")?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| Error::NoMem {
        bytes: len,
        what: "a reduction's send buffer",
    })?;
    for x in v {
        x.put(&mut out);
    }
    Ok(out)
}

fn combine_into<T: Reducible>(acc: &mut [T], other: &[u8], op: ReduceOp) -> Result<(), Error> {
    for (i, a) in acc.iter_mut().enumerate() {
        let b = other
            .get(i * T::SIZE..(i + 1) * T::SIZE)
            .map(T::get)
            .ok_or_else(|| Error::Truncated {
                need: (i + 1) * T::SIZE,
                have: other.len(),
            })?;
        *a = T::combine(op, *a, b).ok_or_else(|| Error::InvalidOp {
            op: op.name(),
            ty: T::NAME,
        })?;
    }
    Ok(())
}

impl Comm {
    fn coll(&self) -> u32 {
        self.inner.coll
    }

    fn check_root(&self, root: i32) -> Result<(), Error> {
        if (0..self.size()).contains(&root) {
            Ok(())
        } else {
            Err(Error::InvalidRoot {
                root,
                size: self.size(),
            })
        }
    }

    /// `MPI_Barrier`: returns once every member has entered it.
    pub fn barrier(&self) -> Result<(), Error> {
        let (me, n) = (self.rank(), self.size());
        let mut k = 1;
        while k < n {
            let to = (me + k) % n;
            let from = (me - k).rem_euclid(n);
            let mut s = self.isend_on(self.coll(), Vec::new(), to, TAG_BARRIER, Mode::Standard)?;
            self.recv_on(self.coll(), &mut [], from, TAG_BARRIER)?;
            self.wait(&mut s)?;
            k *= 2;
        }
        Ok(())
    }

    /// Receives a rooted collective's message from `from` with any tag and
    /// checks that it is of this collective (`base`) and `root`; a message
    /// of another root or collective is [`Error::RootMismatch`].
    fn recv_rooted(
        &self,
        op: &'static str,
        buf: &mut [u8],
        from: i32,
        base: i32,
        root: i32,
    ) -> Result<crate::Status, Error> {
        let Some(spec) = self.spec_on(self.coll(), Source::Rank(from), Tag::Any)? else {
            return Err(Error::InvalidRank {
                rank: from,
                size: self.size(),
            });
        };
        let r = self.dev().recv_into(spec, buf, &self.inner.group);
        let tag = match &r {
            Ok(st) => st.tag,
            Err(Error::RecvTruncated { status, .. }) => status.tag,
            Err(_) => return r,
        };
        if tag != rooted_tag(base, root) {
            let theirs =
                (tag & !((1 << ROOT_BITS) - 1) == base).then_some(tag & ((1 << ROOT_BITS) - 1));
            return Err(Error::RootMismatch {
                op,
                ours: root,
                peer: from,
                theirs,
            });
        }
        r
    }

    /// `MPI_Bcast` of `buf` from `root` (every member passes a buffer of
    /// the same length). Members passing different roots: see the module
    /// docs ("Erroneous programs").
    pub fn bcast(&self, buf: &mut [u8], root: i32) -> Result<(), Error> {
        self.check_root(root)?;
        let (me, n) = (self.rank(), self.size());
        let tag = rooted_tag(TAG_BCAST_BASE, root);
        let vr = (me - root).rem_euclid(n);
        let mut mask = 1;
        while mask < n {
            if vr & mask != 0 {
                let from = (vr - mask + root).rem_euclid(n);
                let st = self.recv_rooted("bcast", buf, from, TAG_BCAST_BASE, root)?;
                if st.count != buf.len() {
                    return Err(Error::Truncated {
                        need: buf.len(),
                        have: st.count,
                    });
                }
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if vr + mask < n {
                let to = (vr + mask + root).rem_euclid(n);
                self.send_on(self.coll(), buf, to, tag, Mode::Standard)?;
            }
            mask >>= 1;
        }
        Ok(())
    }

    /// `MPI_Reduce`: combines every member's `send` element-wise with `op`;
    /// the result lands in `recv` at `root` (`recv` is ignored elsewhere,
    /// and must be as long as `send` at the root).
    pub fn reduce<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
        root: i32,
    ) -> Result<(), Error> {
        self.check_root(root)?;
        if self.rank() == root && recv.len() != send.len() {
            return Err(Error::InvalidArgument {
                what: "reduce: recv and send lengths differ at the root",
            });
        }
        // Check the operation once, locally, before any message moves.
        if let Some(&x) = send.first() {
            T::combine(op, x, x).ok_or_else(|| Error::InvalidOp {
                op: op.name(),
                ty: T::NAME,
            })?;
        }
        let (me, n) = (self.rank(), self.size());
        let tag = rooted_tag(TAG_REDUCE_BASE, root);
        let vr = (me - root).rem_euclid(n);
        let mut acc = Vec::new();
        acc.try_reserve_exact(send.len())
            .map_err(|_| Error::NoMem {
                bytes: send.len().saturating_mul(T::SIZE),
                what: "a reduction's accumulator",
            })?;
        acc.extend_from_slice(send);
        let mut tmp = crate::mem::zeroed(
            crate::mem::bytes(send.len(), T::SIZE, "a reduction's receive buffer")?,
            "a reduction's receive buffer",
        )?;
        let mut mask = 1;
        while mask < n {
            if vr & mask == 0 {
                let src = vr | mask;
                if src < n {
                    let from = (src + root).rem_euclid(n);
                    self.recv_rooted("reduce", &mut tmp, from, TAG_REDUCE_BASE, root)?;
                    combine_into(&mut acc, &tmp, op)?;
                }
            } else {
                let to = ((vr & !mask) + root).rem_euclid(n);
                self.send_on(self.coll(), &to_bytes(&acc)?, to, tag, Mode::Standard)?;
                break;
            }
            mask <<= 1;
        }
        if me == root {
            recv.copy_from_slice(&acc);
        }
        Ok(())
    }

    /// `MPI_Allreduce`: every member gets the reduction in `recv`.
    pub fn allreduce<T: Reducible>(
        &self,
        send: &[T],
        recv: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        if recv.len() != send.len() {
            return Err(Error::InvalidArgument {
                what: "allreduce: recv and send lengths differ",
            });
        }
        self.reduce(send, recv, op, 0)?;
        let mut bytes = to_bytes(recv)?;
        self.bcast(&mut bytes, 0)?;
        for (i, r) in recv.iter_mut().enumerate() {
            *r = T::get(&bytes[i * T::SIZE..]);
        }
        Ok(())
    }

    /// `MPI_Gather`: the root receives every member's `send` (all of the
    /// same length) in rank order in `recv` (`size * send.len()` bytes at
    /// the root; ignored elsewhere).
    pub fn gather(&self, send: &[u8], recv: &mut [u8], root: i32) -> Result<(), Error> {
        self.check_root(root)?;
        let (me, n) = (self.rank(), self.size());
        if me != root {
            return self.send_on(self.coll(), send, root, TAG_GATHER, Mode::Standard);
        }
        let len = send.len();
        if Some(recv.len()) != len.checked_mul(n as usize) {
            return Err(Error::InvalidArgument {
                what: "gather: recv must hold size * send.len() bytes at the root",
            });
        }
        for r in 0..n {
            let slot = &mut recv[r as usize * len..(r as usize + 1) * len];
            if r == me {
                slot.copy_from_slice(send);
            } else {
                let st = self.recv_on(self.coll(), slot, r, TAG_GATHER)?;
                if st.count != len {
                    return Err(Error::Truncated {
                        need: len,
                        have: st.count,
                    });
                }
            }
        }
        Ok(())
    }

    pub(crate) fn allgather(&self, send: &[u8]) -> Result<Vec<u8>, Error> {
        let mut all = crate::mem::zeroed(
            crate::mem::bytes(send.len(), self.size() as usize, "an allgather's result")?,
            "an allgather's result",
        )?;
        self.gather(send, &mut all, 0)?;
        self.bcast(&mut all, 0)?;
        Ok(all)
    }

    /// Agrees on a context pair free on every member (MPICH's free-mask
    /// allreduce); takes it locally if `take`.
    pub(crate) fn agree_context(&self, take: bool) -> Result<usize, Error> {
        let dev = &self.inner.dev;
        let mask: Vec<u64> = dev
            .contexts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .free
            .clone();
        let mut agreed = vec![0u64; mask.len()];
        self.allreduce(&mask, &mut agreed, ReduceOp::BitAnd)?;
        let mut pool = dev.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        let k = agreed
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
            .ok_or_else(|| Error::ContextExhausted { max: pool.pairs() })?;
        if take {
            pool.take(k);
        }
        tracing::debug!(pair = k, "context id agreed");
        Ok(k)
    }

    fn with_context(&self, k: usize, rank: i32, group: Arc<Group>) -> Comm {
        Comm {
            inner: Arc::new(CommInner {
                dev: Arc::clone(&self.inner.dev),
                ctx: 2 * k as u32,
                coll: 2 * k as u32 + 1,
                pair: Some(k),
                rank,
                group,
                coll_seq: AtomicU32::new(0),
            }),
        }
    }

    /// `MPI_Comm_dup`: the same group with a new context (collective over
    /// this communicator).
    pub fn dup(&self) -> Result<Comm, Error> {
        let dev = Arc::clone(&self.inner.dev);
        let _serial = dev
            .comm_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let k = self.agree_context(true)?;
        Ok(self.with_context(k, self.rank(), Arc::clone(&self.inner.group)))
    }

    /// `MPI_Comm_split`: members with the same `color` form a new
    /// communicator, ranked by `(key, old rank)`. A member passing
    /// [`UNDEFINED`] as its color gets `None`. Collective over this
    /// communicator.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Comm>, Error> {
        if color < 0 && color != UNDEFINED {
            return Err(Error::InvalidArgument {
                what: "split: color must be non-negative or UNDEFINED",
            });
        }
        let dev = Arc::clone(&self.inner.dev);
        let _serial = dev
            .comm_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut mine = Vec::with_capacity(8);
        mine.extend_from_slice(&color.to_ne_bytes());
        mine.extend_from_slice(&key.to_ne_bytes());
        let all = self.allgather(&mine)?;
        let k = self.agree_context(color != UNDEFINED)?;
        if color == UNDEFINED {
            return Ok(None);
        }
        let mut members: Vec<(i32, i32)> = Vec::new(); // (key, old rank)
        for (r, ck) in all.chunks_exact(8).enumerate() {
            let c = i32::from_ne_bytes([ck[0], ck[1], ck[2], ck[3]]);
            let kk = i32::from_ne_bytes([ck[4], ck[5], ck[6], ck[7]]);
            if c == color {
                members.push((kk, r as i32));
            }
        }
        members.sort_unstable();
        let world: Vec<u32> = members
            .iter()
            .filter_map(|(_, r)| self.world_rank_of(*r))
            .collect();
        let rank = members
            .iter()
            .position(|(_, r)| *r == self.rank())
            .ok_or_else(|| Error::InvalidArgument {
                what: "split: this rank missing from its own color",
            })? as i32;
        let group = Arc::new(Group::new(world, dev.world_size as usize));
        Ok(Some(self.with_context(k, rank, group)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_combine_and_refuse_bitwise_floats() {
        let mut acc = vec![1i32, 5, -3];
        combine_into(&mut acc, &to_bytes(&[2i32, 4, 7]).unwrap(), ReduceOp::Sum).unwrap();
        assert_eq!(acc, vec![3, 9, 4]);
        combine_into(&mut acc, &to_bytes(&[1i32, 10, 0]).unwrap(), ReduceOp::Max).unwrap();
        assert_eq!(acc, vec![3, 10, 4]);
        let mut w = vec![0b1100u64];
        combine_into(&mut w, &to_bytes(&[0b1010u64]).unwrap(), ReduceOp::BitAnd).unwrap();
        assert_eq!(w, vec![0b1000]);
        let mut f = vec![1.5f64];
        let e = combine_into(&mut f, &to_bytes(&[2.0f64]).unwrap(), ReduceOp::BitOr).unwrap_err();
        assert_eq!(e.class(), crate::ErrorClass::Op);
        combine_into(&mut f, &to_bytes(&[2.0f64]).unwrap(), ReduceOp::Prod).unwrap();
        assert_eq!(f, vec![3.0]);
        let short = combine_into(&mut acc, &[0u8; 5], ReduceOp::Sum).unwrap_err();
        assert_eq!(short.class(), crate::ErrorClass::Truncate);
    }

    #[test]
    fn rooted_tags_carry_the_root_and_stay_below_tag_ub() {
        for root in [0, 1, 7, (1 << ROOT_BITS) - 1] {
            let b = rooted_tag(TAG_BCAST_BASE, root);
            let r = rooted_tag(TAG_REDUCE_BASE, root);
            assert_ne!(b, r);
            assert_eq!(b & ((1 << ROOT_BITS) - 1), root);
            assert!(b <= crate::attr::TAG_UB && r <= crate::attr::TAG_UB);
            assert!(b > TAG_GATHER && r > TAG_GATHER);
        }
    }
}
