//! Process topologies: Cartesian grids, graphs and distributed graphs
//! ([`Topology`]), the communicators that carry them
//! ([`Comm::cart_create`], [`Comm::cart_sub`], [`Comm::graph_create`],
//! [`Comm::dist_graph_create`], [`Comm::dist_graph_create_adjacent`]),
//! the queries (`MPI_Cart_coords`, `MPI_Cart_shift`, ...) and the
//! neighbourhood lists the neighbourhood collectives use
//! ([`Topology::neighbor_lists`]).
//!
//! A [`Topology`] is a value describing the communicator it was made for
//! (the caller keeps it with the communicator). Ranks are never reordered
//! (`reorder` is accepted and ignored, which MPI allows).
//!
//! ```
//! use adi::topo::{dims_create, Topology};
//! let dims = dims_create(12, &[0, 0])?;
//! assert_eq!(dims, vec![4, 3]);
//! let t = Topology::cart(&dims, &[true, false])?;
//! assert_eq!(t.cart_coords(7)?, vec![2, 1]);
//! assert_eq!(t.cart_shift(7, 0, 1)?, (4, 10));   // along the periodic dimension
//! assert_eq!(t.cart_shift(7, 1, 2)?, (adi::attr::PROC_NULL, adi::attr::PROC_NULL));
//! # Ok::<(), adi::Error>(())
//! ```

use crate::attr::{PROC_NULL, UNDEFINED};
use crate::{Comm, Error};

/// A process topology.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// `MPI_CART`: a grid of `dims`, periodic where `periods` says.
    Cart {
        /// Extent of each dimension.
        dims: Vec<i32>,
        /// Whether each dimension wraps around.
        periods: Vec<bool>,
    },
    /// `MPI_GRAPH`: node `i`'s neighbours are
    /// `edges[index[i-1]..index[i]]` (`index` is cumulative, as in C).
    Graph {
        /// Cumulative degrees.
        index: Vec<i32>,
        /// Concatenated neighbour lists.
        edges: Vec<i32>,
    },
    /// `MPI_DIST_GRAPH`: this process's incoming and outgoing edges.
    DistGraph {
        /// Ranks this process receives from, in order.
        sources: Vec<i32>,
        /// Their weights.
        source_weights: Vec<i32>,
        /// Ranks this process sends to, in order.
        destinations: Vec<i32>,
        /// Their weights.
        destination_weights: Vec<i32>,
        /// Whether weights were given.
        weighted: bool,
    },
}

/// `MPI_Dims_create`: a balanced grid of `nnodes` processes; the nonzero
/// entries of `dims` are kept, the zero ones filled in non-increasing
/// order.
pub fn dims_create(nnodes: i32, dims: &[i32]) -> Result<Vec<i32>, Error> {
    if nnodes <= 0 {
        return Err(Error::InvalidDims {
            what: "dims_create: the number of nodes must be positive",
        });
    }
    if dims.iter().any(|&d| d < 0) {
        return Err(Error::InvalidDims {
            what: "dims_create: negative dimension",
        });
    }
    let fixed: i64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if nnodes as i64 % fixed != 0 {
        return Err(Error::InvalidDims {
            what: "dims_create: nnodes is not a multiple of the fixed dimensions",
        });
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    let mut rest = (nnodes as i64 / fixed) as i32;
    let mut out = dims.to_vec();
    if free == 0 {
        return if rest == 1 {
            Ok(out)
        } else {
            Err(Error::InvalidDims {
                what: "dims_create: the dimensions do not multiply to nnodes",
            })
        };
    }
    // Prime factors, largest first, each to the currently smallest
    // dimension: as balanced as the factors allow.
    let mut factors = Vec::new();
    let mut p = 2;
    while p * p <= rest {
        while rest % p == 0 {
            factors.push(p);
            rest /= p;
        }
        p += 1;
    }
    if rest > 1 {
        factors.push(rest);
    }
    factors.sort_unstable_by(|a, b| b.cmp(a));
    let mut free_dims = vec![1i32; free];
    for f in factors {
        if let Some(m) = free_dims.iter_mut().min_by_key(|d| **d) {
            *m *= f;
        }
    }
    free_dims.sort_unstable_by(|a, b| b.cmp(a));
    let mut it = free_dims.into_iter();
    for d in out.iter_mut().filter(|d| **d == 0) {
        *d = it.next().unwrap_or(1);
    }
    Ok(out)
}

impl Topology {
    /// A Cartesian topology (dimensions positive, one period flag each).
    pub fn cart(dims: &[i32], periods: &[bool]) -> Result<Topology, Error> {
        if dims.len() != periods.len() {
            return Err(Error::InvalidArgument {
                what: "cart: dims and periods differ in length",
            });
        }
        if dims.iter().any(|&d| d <= 0) {
            return Err(Error::InvalidDims {
                what: "cart: dimensions must be positive",
            });
        }
        Ok(Topology::Cart {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        })
    }

    /// A graph topology of `index.len()` nodes below `size`.
    pub fn graph(index: &[i32], edges: &[i32], size: i32) -> Result<Topology, Error> {
        let n = index.len() as i32;
        if n > size {
            return Err(Error::InvalidArgument {
                what: "graph: more nodes than processes",
            });
        }
        let mut prev = 0;
        for &i in index {
            if i < prev {
                return Err(Error::InvalidArgument {
                    what: "graph: index must not decrease",
                });
            }
            prev = i;
        }
        if prev as usize != edges.len() {
            return Err(Error::InvalidArgument {
                what: "graph: index and edges disagree",
            });
        }
        if edges.iter().any(|&e| e < 0 || e >= n) {
            return Err(Error::InvalidRank { rank: -1, size: n });
        }
        Ok(Topology::Graph {
            index: index.to_vec(),
            edges: edges.to_vec(),
        })
    }

    /// The number of processes the topology has (Cartesian: the product
    /// of its dimensions).
    pub fn nodes(&self) -> i32 {
        match self {
            Topology::Cart { dims, .. } => dims.iter().product(),
            Topology::Graph { index, .. } => index.len() as i32,
            Topology::DistGraph { .. } => 0,
        }
    }

    fn cart_parts(&self) -> Result<(&[i32], &[bool]), Error> {
        match self {
            Topology::Cart { dims, periods } => Ok((dims, periods)),
            _ => Err(Error::InvalidTopology {
                what: "not a Cartesian topology",
            }),
        }
    }

    /// `MPI_Cart_rank`: the rank at `coords` (wrapped in periodic
    /// dimensions; out of range in another is [`Error::InvalidArgument`]).
    pub fn cart_rank(&self, coords: &[i32]) -> Result<i32, Error> {
        let (dims, periods) = self.cart_parts()?;
        if coords.len() != dims.len() {
            return Err(Error::InvalidArgument {
                what: "cart_rank: wrong number of coordinates",
            });
        }
        let mut r = 0i32;
        for i in 0..dims.len() {
            let mut c = coords[i];
            if periods[i] {
                c = c.rem_euclid(dims[i]);
            } else if !(0..dims[i]).contains(&c) {
                return Err(Error::InvalidArgument {
                    what: "cart_rank: coordinate out of range",
                });
            }
            r = r * dims[i] + c;
        }
        Ok(r)
    }

    /// `MPI_Cart_coords` (row-major: the last dimension varies fastest).
    pub fn cart_coords(&self, rank: i32) -> Result<Vec<i32>, Error> {
        let (dims, _) = self.cart_parts()?;
        if !(0..self.nodes()).contains(&rank) {
            return Err(Error::InvalidRank {
                rank,
                size: self.nodes(),
            });
        }
        let mut c = vec![0; dims.len()];
        let mut r = rank;
        for i in (0..dims.len()).rev() {
            c[i] = r % dims[i];
            r /= dims[i];
        }
        Ok(c)
    }

    /// `MPI_Cart_shift`: `(source, destination)` of a shift by `disp`
    /// along `direction` ([`PROC_NULL`] off a non-periodic edge).
    pub fn cart_shift(&self, rank: i32, direction: i32, disp: i32) -> Result<(i32, i32), Error> {
        let (dims, periods) = self.cart_parts()?;
        let d = usize::try_from(direction)
            .ok()
            .filter(|d| *d < dims.len())
            .ok_or_else(|| Error::InvalidArgument {
                what: "cart_shift: direction out of range",
            })?;
        let me = self.cart_coords(rank)?;
        let at = |delta: i32| {
            let mut c = me.clone();
            let v = c[d] as i64 + delta as i64;
            if periods[d] {
                c[d] = v.rem_euclid(dims[d] as i64) as i32;
            } else if (0..dims[d] as i64).contains(&v) {
                c[d] = v as i32;
            } else {
                return PROC_NULL;
            }
            self.cart_rank(&c).unwrap_or(PROC_NULL)
        };
        Ok((at(-disp), at(disp)))
    }

    /// `MPI_Graph_neighbors` of `rank`.
    pub fn graph_neighbors(&self, rank: i32) -> Result<Vec<i32>, Error> {
        match self {
            Topology::Graph { index, edges } => {
                let r = usize::try_from(rank)
                    .ok()
                    .filter(|r| *r < index.len())
                    .ok_or_else(|| Error::InvalidRank {
                        rank,
                        size: index.len() as i32,
                    })?;
                let lo = if r == 0 { 0 } else { index[r - 1] as usize };
                Ok(edges[lo..index[r] as usize].to_vec())
            }
            _ => Err(Error::InvalidTopology {
                what: "not a graph topology",
            }),
        }
    }

    /// The neighbourhood of `rank` for the neighbourhood collectives:
    /// `(sources, destinations)`, each a rank (or [`PROC_NULL`]) with the
    /// sub-tag that pairs a send with its receive. Cartesian: for each
    /// dimension the negative then the positive neighbour; a message sent
    /// to the `j`-th destination carries sub-tag `j` and is received as
    /// the peer's source `j ^ 1`, so two messages between the same two
    /// processes (a periodic dimension of size 2) never cross. Graphs:
    /// the neighbour list in order, in the order of the sends.
    #[allow(clippy::type_complexity)]
    pub fn neighbor_lists(&self, rank: i32) -> Result<(Vec<(i32, i32)>, Vec<(i32, i32)>), Error> {
        match self {
            Topology::Cart { dims, .. } => {
                let mut srcs = Vec::new();
                let mut dsts = Vec::new();
                for d in 0..dims.len() as i32 {
                    let (lo, hi) = self.cart_shift(rank, d, 1)?;
                    let j = 2 * d;
                    srcs.push((lo, (j + 1) % 256));
                    srcs.push((hi, j % 256));
                    dsts.push((lo, j % 256));
                    dsts.push((hi, (j + 1) % 256));
                }
                Ok((srcs, dsts))
            }
            Topology::Graph { .. } => {
                let n: Vec<(i32, i32)> = self
                    .graph_neighbors(rank)?
                    .into_iter()
                    .map(|r| (r, 0))
                    .collect();
                Ok((n.clone(), n))
            }
            Topology::DistGraph {
                sources,
                destinations,
                ..
            } => Ok((
                sources.iter().map(|&r| (r, 0)).collect(),
                destinations.iter().map(|&r| (r, 0)).collect(),
            )),
        }
    }
}

impl Comm {
    /// `MPI_Cart_create`: the first `prod(dims)` processes form a
    /// communicator with the topology; the others get `None`. Collective.
    pub fn cart_create(
        &self,
        dims: &[i32],
        periods: &[bool],
    ) -> Result<Option<(Comm, Topology)>, Error> {
        let t = Topology::cart(dims, periods)?;
        self.topology_comm(t)
    }

    /// `MPI_Graph_create`: the first `index.len()` processes form a
    /// communicator with the graph; the others get `None`. Collective.
    pub fn graph_create(
        &self,
        index: &[i32],
        edges: &[i32],
    ) -> Result<Option<(Comm, Topology)>, Error> {
        let t = Topology::graph(index, edges, self.size())?;
        self.topology_comm(t)
    }

    fn topology_comm(&self, t: Topology) -> Result<Option<(Comm, Topology)>, Error> {
        let n = t.nodes();
        if n > self.size() {
            return Err(Error::InvalidArgument {
                what: "the topology has more processes than the communicator",
            });
        }
        let color = if self.rank() < n { 0 } else { UNDEFINED };
        Ok(self.split(color, self.rank())?.map(|c| (c, t)))
    }

    /// `MPI_Cart_sub`: the sub-grids keeping the dimensions where
    /// `remain` is true; each process gets its sub-grid's communicator
    /// and topology. Collective over this communicator, whose topology is
    /// `t`.
    pub fn cart_sub(&self, t: &Topology, remain: &[bool]) -> Result<(Comm, Topology), Error> {
        let (dims, periods) = t.cart_parts()?;
        if remain.len() != dims.len() {
            return Err(Error::InvalidArgument {
                what: "cart_sub: wrong number of flags",
            });
        }
        let me = t.cart_coords(self.rank())?;
        // Same color: same coordinates in the dropped dimensions.
        let mut color = 0i64;
        let mut key = 0i64;
        for i in 0..dims.len() {
            if remain[i] {
                key = key * dims[i] as i64 + me[i] as i64;
            } else {
                color = color * dims[i] as i64 + me[i] as i64;
            }
        }
        let c = self
            .split(color as i32, key as i32)?
            .ok_or_else(|| Error::InvalidComm {
                what: "cart_sub: no sub-grid",
            })?;
        let (nd, np): (Vec<i32>, Vec<bool>) = (0..dims.len())
            .filter(|&i| remain[i])
            .map(|i| (dims[i], periods[i]))
            .unzip();
        // Keeping no dimension gives a 0-dimensional grid of one process.
        Ok((
            c,
            Topology::Cart {
                dims: nd,
                periods: np,
            },
        ))
    }

    /// `MPI_Dist_graph_create_adjacent`: this process's own edges; the
    /// communicator has this one's group. Collective.
    pub fn dist_graph_create_adjacent(
        &self,
        sources: &[i32],
        source_weights: Option<&[i32]>,
        destinations: &[i32],
        destination_weights: Option<&[i32]>,
    ) -> Result<(Comm, Topology), Error> {
        let n = self.size();
        if sources
            .iter()
            .chain(destinations)
            .any(|&r| !(0..n).contains(&r))
        {
            return Err(Error::InvalidRank { rank: -1, size: n });
        }
        let c = self.dup()?;
        Ok((
            c,
            Topology::DistGraph {
                sources: sources.to_vec(),
                source_weights: source_weights
                    .map_or_else(|| vec![1; sources.len()], <[i32]>::to_vec),
                destinations: destinations.to_vec(),
                destination_weights: destination_weights
                    .map_or_else(|| vec![1; destinations.len()], <[i32]>::to_vec),
                weighted: source_weights.is_some() || destination_weights.is_some(),
            },
        ))
    }

    /// `MPI_Dist_graph_create`: every process names some edges `(source,
    /// destination, weight)`; each learns its incoming and outgoing ones
    /// (ordered by the naming process's rank, then as named). Collective.
    pub fn dist_graph_create(
        &self,
        edges: &[(i32, i32, i32)],
        weighted: bool,
    ) -> Result<(Comm, Topology), Error> {
        let n = self.size();
        if edges
            .iter()
            .any(|&(s, d, _)| !(0..n).contains(&s) || !(0..n).contains(&d))
        {
            return Err(Error::InvalidRank { rank: -1, size: n });
        }
        // Everyone learns every edge: counts first, then the edges.
        let count = (edges.len() as u64).to_ne_bytes();
        let mut counts = vec![0u8; 8 * n as usize];
        self.allgather_into(&count, &mut counts)?;
        let counts: Vec<usize> = counts
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])) as usize)
            .collect();
        let mine: Vec<u8> = edges
            .iter()
            .flat_map(|&(s, d, w)| [s, d, w])
            .flat_map(i32::to_ne_bytes)
            .collect();
        let sizes: Vec<usize> = counts.iter().map(|c| c * 12).collect();
        let mut blocks = Vec::new();
        let mut off = 0;
        for s in &sizes {
            blocks.push((off, *s));
            off += s;
        }
        let mut all = vec![0u8; off];
        self.allgatherv(&mine, &mut all, &blocks)?;
        let me = self.rank();
        let (mut srcs, mut sw, mut dsts, mut dw) = (vec![], vec![], vec![], vec![]);
        for e in all.chunks_exact(12) {
            let v = |i: usize| i32::from_ne_bytes([e[i], e[i + 1], e[i + 2], e[i + 3]]);
            let (s, d, w) = (v(0), v(4), v(8));
            if d == me {
                srcs.push(s);
                sw.push(w);
            }
            if s == me {
                dsts.push(d);
                dw.push(w);
            }
        }
        let c = self.dup()?;
        Ok((
            c,
            Topology::DistGraph {
                sources: srcs,
                source_weights: sw,
                destinations: dsts,
                destination_weights: dw,
                weighted,
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_balanced_and_keep_fixed_entries() {
        assert_eq!(dims_create(6, &[0, 0]).unwrap(), vec![3, 2]);
        assert_eq!(dims_create(16, &[0, 0, 0]).unwrap(), vec![4, 2, 2]);
        assert_eq!(dims_create(12, &[0, 3, 0]).unwrap(), vec![2, 3, 2]);
        assert_eq!(dims_create(7, &[0]).unwrap(), vec![7]);
        assert_eq!(dims_create(1, &[0, 0]).unwrap(), vec![1, 1]);
        assert!(dims_create(10, &[3, 0]).is_err());
        assert!(dims_create(4, &[2, 3]).is_err());
    }

    #[test]
    fn cart_rank_coords_shift() {
        let t = Topology::cart(&[2, 3], &[false, true]).unwrap();
        for r in 0..6 {
            assert_eq!(t.cart_rank(&t.cart_coords(r).unwrap()).unwrap(), r);
        }
        assert_eq!(t.cart_rank(&[1, -1]).unwrap(), 5);
        assert!(t.cart_rank(&[2, 0]).is_err());
        assert_eq!(t.cart_shift(0, 0, 1).unwrap(), (PROC_NULL, 3));
        assert_eq!(t.cart_shift(0, 1, 1).unwrap(), (2, 1));
        let (s, d) = t.neighbor_lists(4).unwrap();
        assert_eq!(
            s.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![1, PROC_NULL, 3, 5]
        );
        assert_eq!(d.iter().map(|x| x.1).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(s.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1, 0, 3, 2]);
    }

    #[test]
    fn graph_neighbors_follow_index() {
        let g = Topology::graph(&[2, 3, 4], &[1, 2, 0, 0], 3).unwrap();
        assert_eq!(g.graph_neighbors(0).unwrap(), vec![1, 2]);
        assert_eq!(g.graph_neighbors(2).unwrap(), vec![0]);
        assert!(Topology::graph(&[2, 1], &[1, 0], 2).is_err());
    }
}
