//! `PMI_process_mapping`: which ranks share a node.
//!
//! Grammar (MPICH `mpir_nodemap.h`):
//! `'(' "vector" { ',' '(' start_node ',' n_nodes ',' ranks_per_node ')' } ')'`.
//! Each block puts `ranks_per_node` consecutive ranks on each of the `n_nodes`
//! nodes starting at `start_node`; the block list repeats until every rank has a
//! node (which is how a round-robin mapping is written compactly).

use crate::error::{Error, Result};

/// Largest job a layout is built for (a guard against absurd `PMI_SIZE` values).
pub const MAX_RANKS: usize = 1 << 24;

/// One `(start_node, n_nodes, ranks_per_node)` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First node of the block.
    pub start_node: usize,
    /// Number of nodes in the block.
    pub n_nodes: usize,
    /// Consecutive ranks placed on each node.
    pub ranks_per_node: usize,
}

/// Parses a mapping string into blocks.
pub fn parse_blocks(mapping: &str) -> Result<Vec<Block>> {
    let bad = |reason: &str| Error::BadMapping {
        mapping: mapping.to_string(),
        reason: reason.to_string(),
    };
    let compact: String = mapping.chars().filter(|c| !c.is_whitespace()).collect();
    let inner = compact
        .strip_prefix("(vector")
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| bad("expected (vector,...)"))?;
    let mut blocks = Vec::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let r = rest
            .strip_prefix(",(")
            .ok_or_else(|| bad("expected ,( before a block"))?;
        let close = r.find(')').ok_or_else(|| bad("unclosed block"))?;
        let nums: Vec<&str> = r[..close].split(',').collect();
        let [a, b, c] = nums.as_slice() else {
            return Err(bad("a block has three numbers"));
        };
        let parse = |s: &str| s.parse::<usize>().map_err(|_| bad("not a number"));
        let block = Block {
            start_node: parse(a)?,
            n_nodes: parse(b)?,
            ranks_per_node: parse(c)?,
        };
        if block.n_nodes == 0 || block.ranks_per_node == 0 {
            return Err(bad("a block with zero nodes or zero ranks per node"));
        }
        blocks.push(block);
        rest = &r[close + 1..];
    }
    if blocks.is_empty() {
        return Err(bad("no blocks"));
    }
    Ok(blocks)
}

/// Formats blocks as a mapping string, e.g. `(vector,(0,2,4))`.
pub fn format_blocks(blocks: &[Block]) -> String {
    let mut s = String::from("(vector");
    for b in blocks {
        s.push_str(&format!(
            ",({},{},{})",
            b.start_node, b.n_nodes, b.ranks_per_node
        ));
    }
    s.push(')');
    s
}

/// The node of every rank, and this process's place in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    rank: usize,
    node_of: Vec<usize>,
}

impl NodeLayout {
    /// Every rank on a node of its own (used when no mapping is known).
    pub fn one_per_node(rank: usize, size: usize) -> Self {
        NodeLayout {
            rank,
            node_of: (0..size).collect(),
        }
    }

    /// Every rank on the same node.
    pub fn single_node(rank: usize, size: usize) -> Self {
        NodeLayout {
            rank,
            node_of: vec![0; size],
        }
    }

    /// The layout a mapping string describes for a job of `size` ranks.
    pub fn from_mapping(mapping: &str, rank: usize, size: usize) -> Result<Self> {
        let blocks = parse_blocks(mapping)?;
        if size > MAX_RANKS {
            return Err(Error::BadMapping {
                mapping: mapping.to_string(),
                reason: format!("job size {size} exceeds {MAX_RANKS}"),
            });
        }
        let mut node_of = Vec::with_capacity(size);
        'fill: loop {
            for b in &blocks {
                for node in b.start_node..b.start_node.saturating_add(b.n_nodes) {
                    for _ in 0..b.ranks_per_node {
                        if node_of.len() == size {
                            break 'fill;
                        }
                        node_of.push(node);
                    }
                }
            }
            if node_of.len() == size {
                break;
            }
        }
        Ok(NodeLayout { rank, node_of })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The node of `rank`, if it is in the job.
    pub fn node_of(&self, rank: usize) -> Option<usize> {
        self.node_of.get(rank).copied()
    }

    /// This process's node.
    pub fn my_node(&self) -> usize {
        self.node_of(self.rank).unwrap_or(0)
    }

    /// Number of distinct nodes.
    pub fn num_nodes(&self) -> usize {
        let mut nodes = self.node_of.clone();
        nodes.sort_unstable();
        nodes.dedup();
        nodes.len()
    }

    /// The ranks on this process's node (itself included), ascending.
    pub fn local_ranks(&self) -> Vec<usize> {
        let me = self.my_node();
        (0..self.node_of.len())
            .filter(|r| self.node_of[*r] == me)
            .collect()
    }

    /// This process's index among [`local_ranks`](Self::local_ranks).
    pub fn local_rank(&self) -> usize {
        let me = self.my_node();
        self.node_of[..self.rank.min(self.node_of.len())]
            .iter()
            .filter(|n| **n == me)
            .count()
    }

    /// Whether `other` shares this process's node.
    pub fn is_local(&self, other: usize) -> bool {
        self.node_of(other) == Some(self.my_node())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hydra_single_node() {
        let l = NodeLayout::from_mapping("(vector,(0,1,3))", 1, 3).unwrap();
        assert_eq!(l.local_ranks(), vec![0, 1, 2]);
        assert_eq!(l.num_nodes(), 1);
        assert_eq!(l.local_rank(), 1);
    }

    #[test]
    fn blocked_and_round_robin() {
        let l = NodeLayout::from_mapping("(vector,(0,2,2))", 3, 4).unwrap();
        assert_eq!(l.local_ranks(), vec![2, 3]);
        assert_eq!(l.local_rank(), 1);
        // round robin over 2 nodes: the block repeats
        let r = NodeLayout::from_mapping("(vector,(0,2,1))", 0, 5).unwrap();
        assert_eq!(r.local_ranks(), vec![0, 2, 4]);
        assert!(!r.is_local(1));
        assert_eq!(r.num_nodes(), 2);
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            "(vector)",
            "(vector,(0,1))",
            "(vector,(0,0,1))",
            "vector,(0,1,1)",
            "(vector,(a,1,1))",
        ] {
            assert!(NodeLayout::from_mapping(bad, 0, 2).is_err(), "{bad}");
        }
        let b = parse_blocks("(vector, (0,2,4), (2,1,3))").unwrap();
        assert_eq!(format_blocks(&b), "(vector,(0,2,4),(2,1,3))");
    }
}
