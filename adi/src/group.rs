//! Process groups ([`Group`], `MPI_Group`) and the communicators made from
//! them: [`Comm::group`], [`Comm::self_comm`] (`MPI_COMM_SELF`),
//! [`Comm::create`] (`MPI_Comm_create`), [`Comm::create_group`]
//! (`MPI_Comm_create_group`), [`Comm::split_shared`]
//! (`MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`) and [`Comm::compare`].
//!
//! A group is an ordered list of distinct processes, named by their rank
//! in `MPI_COMM_WORLD`; a group's ranks are positions in that list. The
//! set operations follow MPI's ordering rules: a union lists the first
//! group's processes, then the second's not in the first; an
//! intersection and a difference keep the first group's order.
//!
//! ```
//! use adi::{Comparison, Group};
//! let a = Group::from_world_ranks(vec![3, 1, 2])?;
//! let b = Group::from_world_ranks(vec![2, 5])?;
//! assert_eq!(a.union(&b).world_ranks(), &[3, 1, 2, 5]);
//! assert_eq!(a.intersection(&b).world_ranks(), &[2]);
//! assert_eq!(a.difference(&b).world_ranks(), &[3, 1]);
//! assert_eq!(a.translate_ranks(&[0, 2], &b), vec![adi::UNDEFINED, 0]);
//! assert_eq!(a.compare(&Group::from_world_ranks(vec![1, 2, 3])?), Comparison::Similar);
//! # Ok::<(), adi::Error>(())
//! ```

use crate::attr::{PROC_NULL, UNDEFINED};
use crate::comm::{Comm, CommInner};
use crate::device::{Group as RankMap, Mode};
use crate::Error;
use std::collections::HashSet;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, PoisonError};

/// The result of comparing two groups or communicators
/// (`MPI_Group_compare`, `MPI_Comm_compare`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// `MPI_IDENT`: the same members in the same order (for communicators:
    /// the same communicator).
    Ident,
    /// `MPI_CONGRUENT`: communicators with identical groups but different
    /// contexts.
    Congruent,
    /// `MPI_SIMILAR`: the same members in another order.
    Similar,
    /// `MPI_UNEQUAL`: otherwise.
    Unequal,
}

impl Comparison {
    /// The value of the C constant (`MPI_IDENT` = 0 ... `MPI_UNEQUAL` = 3).
    pub const fn code(self) -> i32 {
        match self {
            Comparison::Ident => 0,
            Comparison::Congruent => 1,
            Comparison::Similar => 2,
            Comparison::Unequal => 3,
        }
    }
}

/// An MPI group: an ordered list of distinct processes by world rank.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Group {
    world: Arc<[u32]>,
}

/// One `(first, last, stride)` triple of `MPI_Group_range_incl`/`excl`.
pub type Range = (i32, i32, i32);

impl Group {
    /// `MPI_GROUP_EMPTY`.
    pub fn empty() -> Group {
        Group::default()
    }

    /// The group of these world ranks, in this order; a rank listed twice
    /// is [`Error::InvalidGroup`].
    pub fn from_world_ranks(world: Vec<u32>) -> Result<Group, Error> {
        let mut seen = HashSet::with_capacity(world.len());
        if !world.iter().all(|w| seen.insert(*w)) {
            return Err(Error::InvalidGroup {
                what: "a process is listed twice",
            });
        }
        Ok(Group {
            world: world.into(),
        })
    }

    /// `MPI_Group_size`.
    pub fn size(&self) -> i32 {
        self.world.len() as i32
    }

    /// The world ranks of the members, in group order.
    pub fn world_ranks(&self) -> &[u32] {
        &self.world
    }

    /// The group rank of world rank `w` (`None`: not a member).
    pub fn rank_of_world(&self, w: u32) -> Option<i32> {
        self.world.iter().position(|x| *x == w).map(|i| i as i32)
    }

    /// The world rank of group rank `r`.
    pub fn world_rank(&self, r: i32) -> Option<u32> {
        usize::try_from(r)
            .ok()
            .and_then(|r| self.world.get(r).copied())
    }

    fn check_rank(&self, r: i32) -> Result<usize, Error> {
        usize::try_from(r)
            .ok()
            .filter(|r| *r < self.world.len())
            .ok_or_else(|| Error::InvalidRank {
                rank: r,
                size: self.size(),
            })
    }

    /// `MPI_Group_translate_ranks`: the ranks in `other` of this group's
    /// `ranks` ([`UNDEFINED`] for a process not in `other`;
    /// [`PROC_NULL`] stays `PROC_NULL`). Out-of-range ranks give
    /// [`UNDEFINED`]; [`Group::try_translate_ranks`] rejects them.
    pub fn translate_ranks(&self, ranks: &[i32], other: &Group) -> Vec<i32> {
        ranks
            .iter()
            .map(|&r| {
                if r == PROC_NULL {
                    return PROC_NULL;
                }
                self.world_rank(r)
                    .and_then(|w| other.rank_of_world(w))
                    .unwrap_or(UNDEFINED)
            })
            .collect()
    }

    /// [`translate_ranks`](Self::translate_ranks) that rejects a rank
    /// outside this group ([`Error::InvalidRank`]).
    pub fn try_translate_ranks(&self, ranks: &[i32], other: &Group) -> Result<Vec<i32>, Error> {
        for &r in ranks {
            if r != PROC_NULL {
                self.check_rank(r)?;
            }
        }
        Ok(self.translate_ranks(ranks, other))
    }

    /// `MPI_Group_compare`.
    pub fn compare(&self, other: &Group) -> Comparison {
        if self.world == other.world {
            return Comparison::Ident;
        }
        if self.world.len() == other.world.len() {
            let mut a = self.world.to_vec();
            let mut b = other.world.to_vec();
            a.sort_unstable();
            b.sort_unstable();
            if a == b {
                return Comparison::Similar;
            }
        }
        Comparison::Unequal
    }

    /// `MPI_Group_union`.
    pub fn union(&self, other: &Group) -> Group {
        let mine: HashSet<u32> = self.world.iter().copied().collect();
        let mut v = self.world.to_vec();
        v.extend(other.world.iter().filter(|w| !mine.contains(w)));
        Group { world: v.into() }
    }

    /// `MPI_Group_intersection`.
    pub fn intersection(&self, other: &Group) -> Group {
        let theirs: HashSet<u32> = other.world.iter().copied().collect();
        let v: Vec<u32> = self
            .world
            .iter()
            .copied()
            .filter(|w| theirs.contains(w))
            .collect();
        Group { world: v.into() }
    }

    /// `MPI_Group_difference`.
    pub fn difference(&self, other: &Group) -> Group {
        let theirs: HashSet<u32> = other.world.iter().copied().collect();
        let v: Vec<u32> = self
            .world
            .iter()
            .copied()
            .filter(|w| !theirs.contains(w))
            .collect();
        Group { world: v.into() }
    }

    /// `MPI_Group_incl`: the members at `ranks`, in that order (each rank
    /// valid and listed once).
    pub fn incl(&self, ranks: &[i32]) -> Result<Group, Error> {
        let mut seen = HashSet::with_capacity(ranks.len());
        let mut v = Vec::with_capacity(ranks.len());
        for &r in ranks {
            let i = self.check_rank(r)?;
            if !seen.insert(i) {
                return Err(Error::InvalidRank {
                    rank: r,
                    size: self.size(),
                });
            }
            v.push(self.world[i]);
        }
        Ok(Group { world: v.into() })
    }

    /// `MPI_Group_excl`: the members not at `ranks`, in group order (each
    /// rank valid and listed once).
    pub fn excl(&self, ranks: &[i32]) -> Result<Group, Error> {
        let mut drop = vec![false; self.world.len()];
        for &r in ranks {
            let i = self.check_rank(r)?;
            if std::mem::replace(&mut drop[i], true) {
                return Err(Error::InvalidRank {
                    rank: r,
                    size: self.size(),
                });
            }
        }
        let v: Vec<u32> = self
            .world
            .iter()
            .zip(&drop)
            .filter(|(_, d)| !**d)
            .map(|(w, _)| *w)
            .collect();
        Ok(Group { world: v.into() })
    }

    /// The ranks `(first, last, stride)` triples name, in order.
    fn expand(&self, ranges: &[Range]) -> Result<Vec<i32>, Error> {
        let mut out = Vec::new();
        for &(first, last, stride) in ranges {
            if stride == 0 {
                return Err(Error::InvalidArgument {
                    what: "range stride of 0",
                });
            }
            self.check_rank(first)?;
            self.check_rank(last)?;
            if (stride > 0 && first > last) || (stride < 0 && first < last) {
                // An empty range (MPI: "a triple that specifies no ranks"
                // is erroneous only if first/last are out of range).
                continue;
            }
            let mut r = first as i64;
            while (stride > 0 && r <= last as i64) || (stride < 0 && r >= last as i64) {
                out.push(r as i32);
                r += stride as i64;
            }
        }
        Ok(out)
    }

    /// `MPI_Group_range_incl`.
    pub fn range_incl(&self, ranges: &[Range]) -> Result<Group, Error> {
        self.incl(&self.expand(ranges)?)
    }

    /// `MPI_Group_range_excl`.
    pub fn range_excl(&self, ranges: &[Range]) -> Result<Group, Error> {
        self.excl(&self.expand(ranges)?)
    }
}

/// Tag base of the context agreement of [`Comm::create_group`] on the
/// parent's collective context (above the collective tags).
const TAG_CREATE_GROUP: i32 = 1 << 20;

impl Comm {
    /// `MPI_Comm_group`: the members of this communicator (for an
    /// intercommunicator, of the local group).
    pub fn group(&self) -> Group {
        Group {
            world: self.local_map().world.clone().into(),
        }
    }

    /// This process's rank in `MPI_COMM_WORLD`.
    pub fn world_rank(&self) -> u32 {
        self.inner.dev.world_rank
    }

    pub(crate) fn new_comm(&self, k: usize, rank: i32, map: RankMap) -> Comm {
        Comm {
            inner: Arc::new(CommInner {
                dev: Arc::clone(&self.inner.dev),
                ctx: 2 * k as u32,
                coll: 2 * k as u32 + 1,
                pair: Some(k),
                rank,
                group: Arc::new(map),
                coll_seq: AtomicU32::new(0),
            }),
        }
    }

    /// `MPI_COMM_SELF`: a communicator of this process alone, with a
    /// context pair taken locally (no other process needs to agree: the
    /// pair is simply never free here again until the communicator is
    /// dropped, so no agreement elsewhere picks it). Not collective.
    pub fn self_comm(&self) -> Result<Comm, Error> {
        let dev = Arc::clone(&self.inner.dev);
        let _serial = dev
            .comm_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let k = {
            let mut pool = dev.contexts.lock().unwrap_or_else(PoisonError::into_inner);
            let k = pool
                .free
                .iter()
                .enumerate()
                .find(|(_, w)| **w != 0)
                .map(|(i, w)| i * 64 + w.trailing_zeros() as usize)
                .ok_or_else(|| Error::ContextExhausted { max: pool.pairs() })?;
            pool.take(k);
            k
        };
        let me = self.world_rank();
        Ok(self.new_comm(k, 0, RankMap::new(vec![me], dev.world_size as usize)))
    }

    /// `MPI_Comm_create`: collective over this communicator, every member
    /// passing the same `group` (a subset of this communicator's); members
    /// of `group` get the new communicator, the others `None`
    /// (`MPI_COMM_NULL`).
    pub fn create(&self, group: &Group) -> Result<Option<Comm>, Error> {
        let mine = self.group();
        if group.world.iter().any(|w| mine.rank_of_world(*w).is_none()) {
            return Err(Error::InvalidGroup {
                what: "the group is not a subset of the communicator's",
            });
        }
        let dev = Arc::clone(&self.inner.dev);
        let _serial = dev
            .comm_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let member = group.rank_of_world(self.world_rank());
        let k = self.agree_context(member.is_some())?;
        Ok(member.map(|rank| {
            self.new_comm(
                k,
                rank,
                RankMap::new(group.world.to_vec(), dev.world_size as usize),
            )
        }))
    }

    /// `MPI_Comm_create_group`: collective over the members of `group` only
    /// (a subset of this communicator's, including this process); `tag`
    /// tells concurrent creations apart. Returns the new communicator.
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Comm, Error> {
        if !(0..=crate::attr::TAG_UB).contains(&tag) {
            return Err(Error::InvalidTag {
                tag,
                ub: crate::attr::TAG_UB,
            });
        }
        let mine = self.group();
        let parent: Vec<i32> = group
            .world
            .iter()
            .map(|w| mine.rank_of_world(*w))
            .collect::<Option<_>>()
            .ok_or_else(|| Error::InvalidGroup {
                what: "the group is not a subset of the communicator's",
            })?;
        let me = group
            .rank_of_world(self.world_rank())
            .ok_or_else(|| Error::InvalidGroup {
                what: "the calling process is not in the group",
            })?;
        let dev = Arc::clone(&self.inner.dev);
        let _serial = dev
            .comm_create
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let k = self.agree_context_among(&parent, me, TAG_CREATE_GROUP + (tag & 0xf_ffff))?;
        Ok(self.new_comm(
            k,
            me,
            RankMap::new(group.world.to_vec(), dev.world_size as usize),
        ))
    }

    /// The context agreement of [`Comm::create_group`]: the members
    /// (`parent[i]`: parent rank of member `i`; this is member `me`) AND
    /// their free masks at member 0, which takes the lowest pair free
    /// everywhere and sends it back.
    fn agree_context_among(&self, parent: &[i32], me: i32, tag: i32) -> Result<usize, Error> {
        let dev = &self.inner.dev;
        let coll = self.inner.coll;
        let mut mask: Vec<u8> = dev
            .contexts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .free
            .iter()
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let k = if me == 0 {
            let mut theirs = vec![0u8; mask.len()];
            for &p in &parent[1..] {
                self.recv_on(coll, &mut theirs, p, tag)?;
                for (m, t) in mask.iter_mut().zip(&theirs) {
                    *m &= *t;
                }
            }
            let k = mask
                .chunks_exact(8)
                .enumerate()
                .map(|(i, c)| (i, u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))))
                .find(|(_, w)| *w != 0)
                .map(|(i, w)| i * 64 + w.trailing_zeros() as usize);
            let word = k.map_or(u64::MAX, |k| k as u64).to_ne_bytes();
            for &p in &parent[1..] {
                self.send_on(coll, &word, p, tag, Mode::Standard)?;
            }
            k
        } else {
            self.send_on(coll, &mask, parent[0], tag, Mode::Standard)?;
            let mut word = [0u8; 8];
            self.recv_on(coll, &mut word, parent[0], tag)?;
            match u64::from_ne_bytes(word) {
                u64::MAX => None,
                k => Some(k as usize),
            }
        };
        let mut pool = dev.contexts.lock().unwrap_or_else(PoisonError::into_inner);
        let k = k.ok_or_else(|| Error::ContextExhausted { max: pool.pairs() })?;
        pool.take(k);
        Ok(k)
    }

    /// `MPI_Comm_split_type` with `MPI_COMM_TYPE_SHARED`: the members that
    /// share memory with this process (its node), ranked by `(key, old
    /// rank)`. Collective over this communicator.
    pub fn split_shared(&self, key: i32) -> Result<Comm, Error> {
        let dev = &self.inner.dev;
        // The node's lowest world rank among the members names it.
        let color = (0..self.size())
            .filter_map(|r| self.world_rank_of(r))
            .filter(|w| dev.node_index_of(*w).is_ok())
            .min()
            .unwrap_or(self.world_rank());
        self.split(color as i32, key)?
            .ok_or_else(|| Error::InvalidComm {
                what: "split_shared: no communicator for this process",
            })
    }

    /// `MPI_Comm_compare`: [`Comparison::Ident`] for handles of the same
    /// communicator, [`Comparison::Congruent`] for the same group in the
    /// same order with another context, [`Comparison::Similar`] for the
    /// same members in another order, [`Comparison::Unequal`] otherwise.
    pub fn compare(&self, other: &Comm) -> Comparison {
        if Arc::ptr_eq(&self.inner, &other.inner) {
            return Comparison::Ident;
        }
        match self.group().compare(&other.group()) {
            Comparison::Ident => Comparison::Congruent,
            c => c,
        }
    }

    /// The rank map of the local group.
    pub(crate) fn local_map(&self) -> &RankMap {
        &self.inner.group
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[u32]) -> Group {
        Group::from_world_ranks(v.to_vec()).unwrap()
    }

    #[test]
    fn set_operations_keep_mpi_order() {
        let a = g(&[4, 0, 2]);
        let b = g(&[2, 3, 4]);
        assert_eq!(a.union(&b).world_ranks(), &[4, 0, 2, 3]);
        assert_eq!(b.union(&a).world_ranks(), &[2, 3, 4, 0]);
        assert_eq!(a.intersection(&b).world_ranks(), &[4, 2]);
        assert_eq!(a.difference(&b).world_ranks(), &[0]);
        assert_eq!(a.difference(&a).size(), 0);
        assert_eq!(Group::empty().union(&a), a);
    }

    #[test]
    fn incl_excl_and_ranges() {
        let a = g(&[10, 11, 12, 13, 14, 15]);
        assert_eq!(a.incl(&[5, 0]).unwrap().world_ranks(), &[15, 10]);
        assert_eq!(a.excl(&[5, 0]).unwrap().world_ranks(), &[11, 12, 13, 14]);
        assert!(a.incl(&[1, 1]).is_err());
        assert_eq!(a.incl(&[6]).unwrap_err().class(), crate::ErrorClass::Rank);
        assert_eq!(
            a.range_incl(&[(0, 4, 2), (5, 3, -2)])
                .unwrap()
                .world_ranks(),
            &[10, 12, 14, 15, 13]
        );
        assert_eq!(
            a.range_excl(&[(0, 5, 3)]).unwrap().world_ranks(),
            &[11, 12, 14, 15]
        );
        assert!(a.range_incl(&[(0, 1, 0)]).is_err());
    }

    #[test]
    fn translate_and_compare() {
        let a = g(&[0, 1, 2, 3]);
        let b = g(&[3, 1]);
        assert_eq!(
            a.translate_ranks(&[0, 1, 3, PROC_NULL], &b),
            vec![UNDEFINED, 1, 0, PROC_NULL]
        );
        assert!(a.try_translate_ranks(&[4], &b).is_err());
        assert_eq!(a.compare(&a.clone()), Comparison::Ident);
        assert_eq!(b.compare(&g(&[1, 3])), Comparison::Similar);
        assert_eq!(b.compare(&g(&[1, 2])), Comparison::Unequal);
        assert!(Group::from_world_ranks(vec![1, 1]).is_err());
    }
}
