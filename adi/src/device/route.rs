//! Routes: which transport reaches each peer, and communicator groups.

use crate::Error;
use launcher::NodeLayout;
use std::sync::{Arc, OnceLock};

/// How this rank reaches a peer: the one place that chooses a transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The peer is this rank: a local copy, made by the node-local
    /// transport through the same matcher as every other message (so
    /// `ANY_SOURCE` ordering and non-overtaking hold for self-messages
    /// too).
    SelfCopy {
        /// This rank's index on the node.
        local: u32,
    },
    /// Same node: `shmem-onesided`.
    Shmem {
        /// The peer's index on the node.
        local: u32,
    },
    /// Another node: the device's remote transport (`verbs-tm`). If none
    /// can start, init fails with [`Error::NoInterNodeTransport`].
    Remote {
        /// The peer's node.
        node: usize,
    },
}

/// The transport for world rank `peer`, given the node layout. Adding a
/// kind of transport changes this function (and `Device::dest_of`, which
/// dispatches on its result) and nothing else.
pub fn choose_route(layout: &NodeLayout, peer: usize) -> Route {
    let local_of = |r: usize| {
        let me = layout.node_of(r);
        (0..r).filter(|q| layout.node_of(*q) == me).count() as u32
    };
    if peer == layout.rank() {
        Route::SelfCopy {
            local: local_of(peer),
        }
    } else if layout.is_local(peer) {
        Route::Shmem {
            local: local_of(peer),
        }
    } else {
        Route::Remote {
            node: layout.node_of(peer).unwrap_or(usize::MAX),
        }
    }
}

/// Every peer's route, with no remote transport: fails with
/// [`Error::NoInterNodeTransport`] on the first peer on another node.
pub fn routes(layout: &NodeLayout, size: usize) -> Result<Vec<Route>, Error> {
    routes_with(layout, size, false)
}

/// Every peer's route; `remote`: a remote transport is configured (then
/// peers on other nodes are [`Route::Remote`], otherwise the first one is
/// [`Error::NoInterNodeTransport`]).
pub(crate) fn routes_with(
    layout: &NodeLayout,
    size: usize,
    remote: bool,
) -> Result<Vec<Route>, Error> {
    let mut v = Vec::with_capacity(size);
    for peer in 0..size {
        let r = choose_route(layout, peer);
        if let (Route::Remote { node }, false) = (r, remote) {
            return Err(Error::NoInterNodeTransport {
                rank: peer as u32,
                node,
                my_node: layout.my_node(),
                reason: "no remote transport configured".into(),
            });
        }
        v.push(r);
    }
    Ok(v)
}

/// The layout of `size` ranks split into `nodes` fake nodes of
/// consecutive ranks (`ceil(size / nodes)` each; the last may hold
/// fewer), as seen by `rank`: what `TMX_ADI_TEST_NODES` makes of a job
/// that runs on one host ([`crate::transport::double`]).
pub(crate) fn fake_nodes(rank: usize, size: usize, nodes: usize) -> Result<NodeLayout, Error> {
    let per = size.div_ceil(nodes.max(1)).max(1);
    let n = size.div_ceil(per);
    Ok(NodeLayout::from_mapping(
        &format!("(vector,(0,{n},{per}))"),
        rank,
        size,
    )?)
}

/// A communicator's group: communicator rank → world rank and back.
#[derive(Debug)]
pub(crate) struct Group {
    pub(crate) world: Vec<u32>,
    /// World rank → communicator rank (`-1`: not a member).
    pub(crate) of_world: Vec<i32>,
    /// Communicator rank = world rank for every world rank (the world's
    /// group and its duplicates): operations need not keep the group.
    pub(crate) identity: bool,
    /// Whether a member is reached through the remote transport (found on
    /// the first `ANY_SOURCE` receive that asks).
    spans_remote: OnceLock<bool>,
}

impl Group {
    pub(crate) fn new(world: Vec<u32>, world_size: usize) -> Group {
        let mut of_world = vec![-1; world_size];
        for (i, w) in world.iter().enumerate() {
            if let Some(slot) = of_world.get_mut(*w as usize) {
                *slot = i as i32;
            }
        }
        let identity =
            world.len() == world_size && world.iter().enumerate().all(|(i, w)| *w as usize == i);
        Group {
            world,
            of_world,
            identity,
            spans_remote: OnceLock::new(),
        }
    }

    /// The group an operation keeps for its completion: `None` for an
    /// identity group (no reference counting per operation).
    pub(crate) fn kept(group: &Arc<Group>) -> Option<Arc<Group>> {
        (!group.identity).then(|| Arc::clone(group))
    }

    /// The group of a status conversion: `None` for an identity group.
    #[inline]
    pub(crate) fn as_kept(group: &Group) -> Option<&Group> {
        (!group.identity).then_some(group)
    }

    pub(crate) fn comm_rank_of(&self, world: u32) -> i32 {
        self.of_world.get(world as usize).copied().unwrap_or(-1)
    }

    /// Whether a member is reached through the remote transport.
    pub(crate) fn spans_remote(&self, routes: &[Route]) -> bool {
        *self.spans_remote.get_or_init(|| {
            self.world
                .iter()
                .any(|w| matches!(routes.get(*w as usize), Some(Route::Remote { .. })))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_follow_the_layout() {
        let layout = NodeLayout::from_mapping("(vector,(0,2,2))", 2, 4).unwrap();
        // Ranks 0,1 on node 0; 2,3 on node 1; this is rank 2.
        assert_eq!(choose_route(&layout, 2), Route::SelfCopy { local: 0 });
        assert_eq!(choose_route(&layout, 3), Route::Shmem { local: 1 });
        assert_eq!(choose_route(&layout, 0), Route::Remote { node: 0 });
        let err = routes(&layout, 4).unwrap_err();
        assert_eq!(
            err,
            Error::NoInterNodeTransport {
                rank: 0,
                node: 0,
                my_node: 1,
                reason: "no remote transport configured".into(),
            }
        );
        assert_eq!(err.class(), crate::ErrorClass::Other);
        assert!(err.to_string().contains("verbs-tm"));
        // With a remote transport, the other node's ranks go to it.
        assert_eq!(
            routes_with(&layout, 4, true).unwrap(),
            vec![
                Route::Remote { node: 0 },
                Route::Remote { node: 0 },
                Route::SelfCopy { local: 0 },
                Route::Shmem { local: 1 }
            ]
        );
        let single = NodeLayout::single_node(1, 3);
        assert_eq!(
            routes(&single, 3).unwrap(),
            vec![
                Route::Shmem { local: 0 },
                Route::SelfCopy { local: 1 },
                Route::Shmem { local: 2 }
            ]
        );
    }

    #[test]
    fn fake_nodes_split_consecutive_ranks() {
        let nodes = |size, n| {
            let l = fake_nodes(0, size, n).unwrap();
            (0..size).map(|r| l.node_of(r).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(nodes(4, 2), vec![0, 0, 1, 1]);
        assert_eq!(nodes(3, 2), vec![0, 0, 1]);
        assert_eq!(nodes(2, 2), vec![0, 1]);
        assert_eq!(nodes(5, 3), vec![0, 0, 1, 1, 2]);
        assert_eq!(nodes(2, 5), vec![0, 1], "more nodes than ranks");
        assert_eq!(nodes(3, 1), vec![0, 0, 0]);
        let l = fake_nodes(3, 4, 2).unwrap();
        assert_eq!((l.my_node(), l.local_ranks()), (1, vec![2, 3]));
    }

    #[test]
    fn a_group_spans_the_remote_transport_if_a_member_is_remote() {
        let routes = [
            Route::SelfCopy { local: 0 },
            Route::Shmem { local: 1 },
            Route::Remote { node: 1 },
        ];
        assert!(!Group::new(vec![0, 1], 3).spans_remote(&routes));
        assert!(Group::new(vec![2, 0], 3).spans_remote(&routes));
        assert!(Group::new(vec![0, 1, 2], 3).spans_remote(&routes));
    }
}
