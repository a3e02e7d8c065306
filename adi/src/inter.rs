//! Intercommunicators ([`InterComm`]): two disjoint groups, each process
//! talking point-to-point to the *other* group's ranks
//! (`MPI_Intercomm_create`, `MPI_Intercomm_merge`,
//! `MPI_Comm_remote_size`, `MPI_Comm_remote_group`).
//!
//! An intercommunicator is a [`Comm`] whose ranks name the remote group
//! ([`InterComm::comm`], for sends, receives and probes: a status's source
//! is a remote rank) and a private intracommunicator of the local group
//! ([`InterComm::local`]). Its context id is agreed across both groups:
//! each group ANDs its members' free context masks, the two leaders swap
//! and AND theirs, and each leader passes the pair on. The collectives
//! over the two groups (`InterComm::bcast`, `allreduce_packed`, ... with
//! [`InterRoot`](crate::InterRoot) roots) are in `coll/inter.rs`.

use crate::comm::Comm;
use crate::device::{Group as RankMap, Mode};
use crate::group::Group;
use crate::{BasicType, Datatype, Error, Op};
use std::sync::{Arc, PoisonError};

/// Tags on the intercommunicator's collective context (leader to leader).
const TAG_MASK: i32 = 11;
const TAG_HIGH: i32 = 12;

/// An intercommunicator.
#[derive(Debug, Clone)]
pub struct InterComm {
    comm: Comm,
    local: Comm,
}

/// How the two leaders reach each other during a creation.
enum Link<'a> {
    /// Over `peer` (its point-to-point context) with the caller's tag.
    Peer {
        peer: &'a Comm,
        leader: i32,
        tag: i32,
    },
    /// Over an intercommunicator's collective context, leader to leader
    /// (remote rank 0).
    Inter(&'a Comm),
}

impl Link<'_> {
    fn swap(&self, mine: &[u8], theirs: &mut [u8], tag: i32) -> Result<(), Error> {
        match self {
            Link::Peer {
                peer,
                leader,
                tag: t,
            } => peer
                .sendrecv(mine, *leader, *t, theirs, *leader, *t)
                .map(|_| ()),
            Link::Inter(c) => {
                let coll = c.inner.coll;
                let mut r = c.isend_on(coll, mine.to_vec(), 0, tag, Mode::Standard)?;
                c.recv_on(coll, theirs, 0, tag)?;
                c.wait(&mut r).map(|_| ())
            }
        }
    }

    /// Swaps variable-length data (length first).
    fn swap_vec(&self, mine: &[u8], tag: i32) -> Result<Vec<u8>, Error> {
        let mut n = [0u8; 8];
        self.swap(&(mine.len() as u64).to_le_bytes(), &mut n, tag)?;
        let mut theirs = vec![0u8; u64::from_le_bytes(n) as usize];
        self.swap(mine, &mut theirs, tag)?;
        Ok(theirs)
    }
}

fn words_to_bytes(v: &[u64]) -> Vec<u8> {
    v.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn bytes_to_words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect()
}

fn world_ranks_bytes(g: &Group) -> Vec<u8> {
    g.world_ranks()
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect()
}

fn bytes_world_ranks(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
        .collect()
}

/// Broadcasts variable-length data from local rank 0 over `local`.
fn bcast_vec(local: &Comm, data: Vec<u8>) -> Result<Vec<u8>, Error> {
    let mut n = (data.len() as u64).to_le_bytes();
    local.bcast(&mut n, 0)?;
    let mut out = data;
    out.resize(u64::from_le_bytes(n) as usize, 0);
    local.bcast(&mut out, 0)?;
    Ok(out)
}

/// Agrees on a context pair free on every member of both groups: the
/// local AND over `local`, the leaders' swap over `link`, the pair from
/// local rank 0 to the others. Takes it. Collective over both groups.
fn agree_across(local: &Comm, link: &Link<'_>) -> Result<usize, Error> {
    let dev = Arc::clone(&local.inner.dev);
    let _serial = dev
        .comm_create
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mask = dev
        .contexts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .free
        .clone();
    let u64t = Datatype::basic(BasicType::U64);
    let mut ours = vec![0u8; mask.len() * 8];
    local.allreduce_packed(&words_to_bytes(&mask), &mut ours, &u64t, &Op::Band)?;
    let mut k = [0u8; 8];
    if local.rank() == 0 {
        let theirs = link.swap_vec(&ours, TAG_MASK)?;
        let both: Vec<u64> = bytes_to_words(&ours)
            .iter()
            .zip(bytes_to_words(&theirs))
            .map(|(a, b)| a & b)
            .collect();
        let pick = both
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map_or(u64::MAX, |(i, w)| {
                (i * 64) as u64 + u64::from(w.trailing_zeros())
            });
        k = pick.to_le_bytes();
    }
    local.bcast(&mut k, 0)?;
    let mut pool = dev.contexts.lock().unwrap_or_else(PoisonError::into_inner);
    match u64::from_le_bytes(k) {
        u64::MAX => Err(Error::ContextExhausted { max: pool.pairs() }),
        k => {
            pool.take(k as usize);
            Ok(k as usize)
        }
    }
}

impl InterComm {
    /// `MPI_Intercomm_create`: collective over `local` (every member
    /// naming the same `local_leader`) and, through the two leaders, over
    /// the remote group. `peer` and `remote_leader` (a rank of `peer`)
    /// matter at the local leader only; `tag` is the leaders' tag on
    /// `peer`. The groups must be disjoint.
    pub fn create(
        local: &Comm,
        local_leader: i32,
        peer: &Comm,
        remote_leader: i32,
        tag: i32,
    ) -> Result<InterComm, Error> {
        if !(0..local.size()).contains(&local_leader) {
            return Err(Error::InvalidRank {
                rank: local_leader,
                size: local.size(),
            });
        }
        // A private intracommunicator of the local group, with local rank
        // 0 its leader (the order of `local` rotated).
        let key = (local.rank() - local_leader).rem_euclid(local.size());
        let mine = local.split(0, key)?.ok_or_else(|| Error::InvalidComm {
            what: "intercomm_create: no local communicator",
        })?;
        let is_leader = mine.rank() == 0;
        let link = Link::Peer {
            peer,
            leader: remote_leader,
            tag,
        };
        if is_leader && !(0..peer.size()).contains(&remote_leader) {
            return Err(Error::InvalidRank {
                rank: remote_leader,
                size: peer.size(),
            });
        }
        let theirs = if is_leader {
            link.swap_vec(&world_ranks_bytes(&mine.group()), tag)?
        } else {
            Vec::new()
        };
        let remote = bytes_world_ranks(&bcast_vec(&mine, theirs)?);
        let mine_ranks = mine.group();
        if remote
            .iter()
            .any(|w| mine_ranks.rank_of_world(*w).is_some())
        {
            return Err(Error::InvalidGroup {
                what: "intercomm_create: the groups overlap",
            });
        }
        let k = agree_across(&mine, &link)?;
        let world = local.inner.dev.world_size as usize;
        let comm = mine.new_comm(k, mine.rank(), RankMap::new(remote, world));
        Ok(InterComm { comm, local: mine })
    }

    /// The communicator for point-to-point traffic: ranks are the remote
    /// group's.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    /// The local group's private intracommunicator.
    pub fn local(&self) -> &Comm {
        &self.local
    }

    /// This process's rank in the local group.
    pub fn rank(&self) -> i32 {
        self.local.rank()
    }

    /// `MPI_Comm_size` of an intercommunicator: the local group's size.
    pub fn local_size(&self) -> i32 {
        self.local.size()
    }

    /// `MPI_Comm_remote_size`.
    pub fn remote_size(&self) -> i32 {
        self.comm.size()
    }

    /// `MPI_Comm_group` of an intercommunicator: the local group.
    pub fn local_group(&self) -> Group {
        self.local.group()
    }

    /// `MPI_Comm_remote_group`.
    pub fn remote_group(&self) -> Group {
        self.comm.group()
    }

    /// `MPI_Comm_dup` of an intercommunicator. Collective over both groups.
    pub fn dup(&self) -> Result<InterComm, Error> {
        let local = self.local.dup()?;
        let k = agree_across(&local, &Link::Inter(&self.comm))?;
        let world = local.inner.dev.world_size as usize;
        let remote = self.remote_group().world_ranks().to_vec();
        let comm = local.new_comm(k, local.rank(), RankMap::new(remote, world));
        Ok(InterComm { comm, local })
    }

    /// `MPI_Intercomm_merge`: an intracommunicator of both groups, the
    /// group whose members passed `high = false` first (if both passed
    /// the same, the group whose leader has the lower world rank).
    /// Collective over both groups.
    pub fn merge(&self, high: bool) -> Result<Comm, Error> {
        let mine = self.local_group();
        let mut flags = [u8::from(high), 0];
        if self.rank() == 0 {
            let mut theirs = [0u8; 1];
            Link::Inter(&self.comm).swap(&flags[..1], &mut theirs, TAG_HIGH)?;
            flags[1] = theirs[0];
        }
        self.local.bcast(&mut flags, 0)?;
        let (me_high, them_high) = (flags[0] != 0, flags[1] != 0);
        let remote = self.remote_group();
        let lead = |g: &Group| g.world_ranks().first().copied().unwrap_or(u32::MAX);
        let local_first = if me_high != them_high {
            !me_high
        } else {
            lead(&mine) < lead(&remote)
        };
        let (a, b) = if local_first {
            (&mine, &remote)
        } else {
            (&remote, &mine)
        };
        let union: Vec<u32> = a
            .world_ranks()
            .iter()
            .chain(b.world_ranks())
            .copied()
            .collect();
        let k = agree_across(&self.local, &Link::Inter(&self.comm))?;
        let me = self.local.world_rank();
        let rank = union.iter().position(|w| *w == me).unwrap_or(0) as i32;
        let world = self.local.inner.dev.world_size as usize;
        Ok(self.local.new_comm(k, rank, RankMap::new(union, world)))
    }
}
