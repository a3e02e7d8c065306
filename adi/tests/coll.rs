//! The collectives on packed data against a sequential reference: random
//! sizes, roots, operations (predefined, and a user-defined one that is
//! not commutative), communicators (the world and random splits), and a
//! random mix of blocking and nonblocking calls with several nonblocking
//! ones in flight at once. Every rank draws the same cases from the same
//! seed, computes what every rank contributes, and checks its own result
//! against a reduction done in rank order.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

mod common;

use adi::{BasicType, Comm, Datatype, Op, Request};
use common::Rng;
use std::time::Duration;

/// Cases per job.
const CASES: u64 = 48;

/// The contribution of world rank `w` to case `case` (`len` elements).
fn data_i64(case: u64, w: u32, len: usize) -> Vec<i64> {
    let mut r = Rng::new(case * 1000 + w as u64);
    (0..len).map(|_| r.below(2000) as i64 - 1000).collect()
}

fn bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

fn ints(b: &[u8]) -> Vec<i64> {
    b.chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// An affine map `x -> a x + b` (wrapping) as two i64: composing in rank
/// order is associative but not commutative.
fn affine() -> Op {
    Op::user(
        |input, inout| {
            for (l, r) in input.chunks_exact(16).zip(inout.chunks_exact_mut(16)) {
                let (a1, b1) = (
                    i64::from_ne_bytes(l[..8].try_into().unwrap()),
                    i64::from_ne_bytes(l[8..].try_into().unwrap()),
                );
                let (a2, b2) = (
                    i64::from_ne_bytes(r[..8].try_into().unwrap()),
                    i64::from_ne_bytes(r[8..].try_into().unwrap()),
                );
                // Apply the left map, then the right one.
                let a = a2.wrapping_mul(a1);
                let b = a2.wrapping_mul(b1).wrapping_add(b2);
                r[..8].copy_from_slice(&a.to_ne_bytes());
                r[8..].copy_from_slice(&b.to_ne_bytes());
            }
            Ok(())
        },
        false,
    )
}

/// Sequential reference: `vals[0] op vals[1] op ...` element-wise.
fn fold(op_id: u64, vals: &[Vec<i64>]) -> Vec<i64> {
    let mut acc = vals[0].clone();
    for v in &vals[1..] {
        if op_id < 4 {
            for (i, x) in acc.iter_mut().enumerate() {
                let y = v[i];
                *x = match op_id {
                    0 => x.wrapping_add(y),
                    1 => (*x).max(y),
                    2 => (*x).min(y),
                    3 => *x ^ y,
                    _ => unreachable!(),
                };
            }
        } else {
            // Affine pairs.
            for k in (0..acc.len()).step_by(2) {
                let (a1, b1, a2, b2) = (acc[k], acc[k + 1], v[k], v[k + 1]);
                acc[k] = a2.wrapping_mul(a1);
                acc[k + 1] = a2.wrapping_mul(b1).wrapping_add(b2);
            }
        }
    }
    acc
}

fn op_of(op_id: u64) -> Op {
    match op_id {
        0 => Op::Sum,
        1 => Op::Max,
        2 => Op::Min,
        3 => Op::Bxor,
        _ => affine(),
    }
}

/// A communicator for the case: the world, or a random split of it.
fn pick_comm(w: &Comm, rng: &mut Rng) -> Option<Comm> {
    if rng.chance(600) {
        return Some(w.dup().unwrap());
    }
    let colors = 1 + rng.below(2) as i32;
    let keys: Vec<i32> = (0..w.size()).map(|_| rng.below(100) as i32).collect();
    let color = w.rank() % colors;
    w.split(color, keys[w.rank() as usize]).unwrap()
}

/// A deferred check of a nonblocking call.
type Check = Box<dyn FnOnce(Vec<u8>)>;

fn role_random(w: &Comm) {
    let mut outer = Rng::new(0xc011);
    let int = Datatype::basic(BasicType::I64);
    let pair = Datatype::contiguous(2, &int).unwrap();
    pair.commit().unwrap();
    let mut pending: Vec<(Request, Check)> = Vec::new();
    for case in 0..CASES {
        // The world-wide draws (the communicator, when to wait) come from
        // `rng`, the same on every rank; the case's own draws from `cr`,
        // which ranks of different sub-communicators use differently.
        let c = pick_comm(w, &mut outer).unwrap();
        let mut cr = Rng::new(0x5eed ^ (case << 8));
        let rng = &mut cr;
        let (me, n) = (c.rank(), c.size());
        let members: Vec<u32> = (0..n).map(|r| c.world_rank_of(r).unwrap()).collect();
        let kind = rng.below(9);
        let op_id = rng.below(5);
        let mut len = rng.below(40) as usize * 2;
        if rng.chance(100) {
            len = 2000 + rng.below(20_000) as usize * 2;
        }
        let root = rng.below(n as u64) as i32;
        let nonblocking = rng.chance(500);
        let all: Vec<Vec<i64>> = members.iter().map(|&m| data_i64(case, m, len)).collect();
        let mine = all[me as usize].clone();
        let (op, ty) = (op_of(op_id), if op_id == 4 { &pair } else { &int });
        let name = format!("case {case} kind {kind} op {op_id} len {len} root {root} n {n}");
        match kind {
            0 => {
                let want = fold(op_id, &all);
                if nonblocking {
                    let r = c.iallreduce_packed(bytes(&mine), ty, &op).unwrap();
                    pending.push((
                        r,
                        Box::new(move |got| assert_eq!(ints(&got), want, "{name}")),
                    ));
                } else {
                    let mut out = vec![0u8; len * 8];
                    c.allreduce_packed(&bytes(&mine), &mut out, ty, &op)
                        .unwrap();
                    assert_eq!(ints(&out), want, "{name}");
                }
            }
            1 => {
                let want = fold(op_id, &all);
                let is_root = me == root;
                if nonblocking {
                    let r = c.ireduce_packed(bytes(&mine), ty, &op, root).unwrap();
                    pending.push((
                        r,
                        Box::new(move |got| {
                            if is_root {
                                assert_eq!(ints(&got), want, "{name}");
                            }
                        }),
                    ));
                } else {
                    let mut out = vec![0u8; len * 8];
                    c.reduce_packed(&bytes(&mine), &mut out, ty, &op, root)
                        .unwrap();
                    if is_root {
                        assert_eq!(ints(&out), want, "{name}");
                    }
                }
            }
            2 => {
                let exclusive = rng.chance(500);
                let upto = if exclusive { me } else { me + 1 } as usize;
                let want = (upto > 0).then(|| fold(op_id, &all[..upto]));
                if nonblocking {
                    let r = if exclusive {
                        c.iexscan_packed(bytes(&mine), ty, &op).unwrap()
                    } else {
                        c.iscan_packed(bytes(&mine), ty, &op).unwrap()
                    };
                    pending.push((
                        r,
                        Box::new(move |got| {
                            if let Some(want) = want {
                                assert_eq!(ints(&got), want, "{name}");
                            }
                        }),
                    ));
                } else {
                    let mut out = vec![0u8; len * 8];
                    if exclusive {
                        c.exscan_packed(&bytes(&mine), &mut out, ty, &op).unwrap();
                    } else {
                        c.scan_packed(&bytes(&mine), &mut out, ty, &op).unwrap();
                    }
                    if let Some(want) = want {
                        assert_eq!(ints(&out), want, "{name}");
                    }
                }
            }
            3 => {
                // Reduce-scatter with random (even) block sizes.
                let mut sizes: Vec<usize> = (0..n).map(|_| rng.below(6) as usize * 2).collect();
                let total: usize = sizes.iter().sum();
                let all: Vec<Vec<i64>> =
                    members.iter().map(|&m| data_i64(case, m, total)).collect();
                let want = fold(op_id, &all);
                let mut blocks = Vec::new();
                let mut off = 0;
                for s in sizes.iter_mut() {
                    blocks.push((off * 8, *s * 8));
                    off += *s;
                }
                let (o, l) = blocks[me as usize];
                let want_mine = want[o / 8..(o + l) / 8].to_vec();
                let send = bytes(&all[me as usize]);
                if nonblocking {
                    let r = c.ireduce_scatter_packed(send, blocks, ty, &op).unwrap();
                    pending.push((
                        r,
                        Box::new(move |got| assert_eq!(ints(&got), want_mine, "{name}")),
                    ));
                } else {
                    let mut out = vec![0u8; l];
                    c.reduce_scatter_packed(&send, &mut out, &blocks, ty, &op)
                        .unwrap();
                    assert_eq!(ints(&out), want_mine, "{name}");
                }
            }
            4 => {
                let want = bytes(&all[root as usize]);
                let buf = if me == root {
                    want.clone()
                } else {
                    vec![0u8; want.len()]
                };
                if nonblocking {
                    let r = c.ibcast(buf, root).unwrap();
                    pending.push((r, Box::new(move |got| assert_eq!(got, want, "{name}"))));
                } else {
                    let mut buf = buf;
                    c.bcast(&mut buf, root).unwrap();
                    assert_eq!(buf, want, "{name}");
                }
            }
            5 | 6 => {
                // gatherv / allgatherv with random block sizes and a
                // reversed layout (blocks in the buffer in reverse order).
                let sizes: Vec<usize> = (0..n).map(|_| rng.below(7) as usize).collect();
                let total: usize = sizes.iter().sum::<usize>() * 8;
                let mut blocks = vec![(0, 0); n as usize];
                let mut off = total;
                for r in 0..n as usize {
                    off -= sizes[r] * 8;
                    blocks[r] = (off, sizes[r] * 8);
                }
                let parts: Vec<Vec<u8>> = members
                    .iter()
                    .enumerate()
                    .map(|(r, &m)| bytes(&data_i64(case, m, sizes[r])))
                    .collect();
                let mut want = vec![0u8; total];
                for r in 0..n as usize {
                    want[blocks[r].0..blocks[r].0 + blocks[r].1].copy_from_slice(&parts[r]);
                }
                let send = parts[me as usize].clone();
                let gather = kind == 5;
                let check_here = !gather || me == root;
                if nonblocking {
                    let r = if gather {
                        c.igatherv(send, vec![0u8; total], blocks, root).unwrap()
                    } else {
                        c.iallgatherv(send, vec![0u8; total], blocks).unwrap()
                    };
                    pending.push((
                        r,
                        Box::new(move |got| {
                            if check_here {
                                assert_eq!(got, want, "{name}");
                            }
                        }),
                    ));
                } else {
                    let mut out = vec![0u8; total];
                    if gather {
                        c.gatherv(&send, &mut out, &blocks, root).unwrap();
                    } else {
                        c.allgatherv(&send, &mut out, &blocks).unwrap();
                    }
                    if check_here {
                        assert_eq!(out, want, "{name}");
                    }
                }
            }
            7 => {
                // scatterv from the root's data.
                let sizes: Vec<usize> = (0..n).map(|_| rng.below(7) as usize * 8).collect();
                let total: usize = sizes.iter().sum();
                let src = data_i64(case, members[root as usize], total / 8);
                let mut blocks = Vec::new();
                let mut off = 0;
                for s in &sizes {
                    blocks.push((off, *s));
                    off += s;
                }
                let (o, l) = blocks[me as usize];
                let want = bytes(&src)[o..o + l].to_vec();
                let send = if me == root { bytes(&src) } else { Vec::new() };
                if nonblocking {
                    let r = c.iscatterv(send, blocks, l, root).unwrap();
                    pending.push((r, Box::new(move |got| assert_eq!(got, want, "{name}"))));
                } else {
                    let mut out = vec![0u8; l];
                    c.scatterv(&send, &blocks, &mut out, root).unwrap();
                    assert_eq!(out, want, "{name}");
                }
            }
            _ => {
                // alltoallv: rank s sends rank d a block of (s + d) % 4
                // elements.
                let size = |s: usize, d: usize| ((s + d + case as usize) % 4) * 8;
                let me_u = me as usize;
                let mut sblocks = Vec::new();
                let mut rblocks = Vec::new();
                let (mut so, mut ro) = (0, 0);
                for p in 0..n as usize {
                    sblocks.push((so, size(me_u, p)));
                    so += size(me_u, p);
                    rblocks.push((ro, size(p, me_u)));
                    ro += size(p, me_u);
                }
                let block = |s: usize, d: usize| {
                    bytes(&data_i64(case * 7 + d as u64, members[s], size(s, d) / 8))
                };
                let send: Vec<u8> = (0..n as usize).flat_map(|d| block(me_u, d)).collect();
                let want: Vec<u8> = (0..n as usize).flat_map(|s| block(s, me_u)).collect();
                if nonblocking {
                    let r = c.ialltoallv(send, sblocks, vec![0u8; ro], rblocks).unwrap();
                    pending.push((r, Box::new(move |got| assert_eq!(got, want, "{name}"))));
                } else {
                    let mut out = vec![0u8; ro];
                    c.alltoallv(&send, &sblocks, &mut out, &rblocks).unwrap();
                    assert_eq!(out, want, "{name}");
                }
            }
        }
        let rng = &mut outer;
        // Complete the nonblocking calls now and then, in a random order
        // of waits, so that several are in flight at once.
        if pending.len() > 3 || rng.chance(300) || case + 1 == CASES {
            let mut reqs: Vec<(Request, Check)> = std::mem::take(&mut pending);
            if rng.chance(500) {
                reqs.reverse();
            }
            for (mut r, check) in reqs {
                w.wait(&mut r).unwrap();
                check(r.take_buffer().unwrap_or_default());
            }
        }
        // A barrier now and then, blocking or not.
        if rng.chance(200) {
            let mut b = w.ibarrier().unwrap();
            w.wait(&mut b).unwrap();
        }
    }
}

/// Argument errors are typed and leave the communicator usable.
fn role_errors(w: &Comm) {
    let int = Datatype::basic(BasicType::I32);
    let f = Datatype::basic(BasicType::F64);
    let mut out = [0u8; 8];
    let e = w
        .allreduce_packed(&[0u8; 8], &mut out, &f, &Op::Band)
        .unwrap_err();
    assert_eq!(e.class(), adi::ErrorClass::Op);
    let e = w
        .reduce_packed(&[0u8; 4], &mut [0u8; 4], &int, &Op::Sum, w.size())
        .unwrap_err();
    assert_eq!(e.class(), adi::ErrorClass::Root);
    let e = w
        .allreduce_packed(&[0u8; 4], &mut [0u8; 4], &int, &Op::Replace)
        .unwrap_err();
    assert_eq!(e.class(), adi::ErrorClass::Op);
    let mut sum = [0u8; 4];
    w.allreduce_packed(&1i32.to_ne_bytes(), &mut sum, &int, &Op::Sum)
        .unwrap();
    assert_eq!(i32::from_ne_bytes(sum), w.size());
}

/// Intercommunicators: two halves, point-to-point across, dup, merge.
fn role_intercomm(w: &Comm) {
    let color = w.rank() % 2;
    let half = w.split(color, w.rank()).unwrap().unwrap();
    let ic = adi::InterComm::create(&half, 0, w, 1 - color, 5).unwrap();
    assert_eq!(ic.local_size(), half.size());
    assert_eq!(ic.local_size() + ic.remote_size(), w.size());
    let remote: Vec<u32> = (0..w.size() as u32)
        .filter(|r| *r % 2 != color as u32)
        .collect();
    assert_eq!(ic.remote_group().world_ranks(), &remote[..]);
    // Local rank i of each half sends its world rank to remote rank i
    // (when there is one) and receives from it.
    let me = ic.rank();
    if me < ic.remote_size() {
        let mut got = [0u8; 4];
        let st = ic
            .comm()
            .sendrecv(&w.rank().to_ne_bytes(), me, 1, &mut got, me, 1)
            .unwrap();
        assert_eq!(st.source, me, "sources are remote ranks");
        assert_eq!(i32::from_ne_bytes(got) as u32, remote[me as usize]);
    }
    let d = ic.dup().unwrap();
    let merged = d.merge(color == 1).unwrap();
    assert_eq!(merged.size(), w.size());
    // Evens (high = false) first, in order, then odds.
    let order: Vec<u32> = (0..w.size() as u32)
        .filter(|r| r % 2 == 0)
        .chain((0..w.size() as u32).filter(|r| r % 2 == 1))
        .collect();
    assert_eq!(merged.group().world_ranks(), &order[..]);
    let mut sum = [0i64];
    merged
        .allreduce(&[w.rank() as i64], &mut sum, adi::ReduceOp::Sum)
        .unwrap();
    assert_eq!(sum[0], (0..w.size() as i64).sum::<i64>());
    inter_collectives(w, &ic, color as u32);
}

/// Waits for `r` on `w` and hands back its buffer.
fn wait_buf(w: &Comm, mut r: Request) -> Vec<u8> {
    w.wait(&mut r).unwrap();
    r.take_buffer().unwrap_or_default()
}

/// Every intercommunicator collective, blocking and nonblocking, against
/// the reference: evens are one group, odds the other (local rank `i` is
/// world rank `2 i + color`).
fn inter_collectives(w: &Comm, ic: &adi::InterComm, color: u32) {
    use adi::InterRoot;
    let int = Datatype::basic(BasicType::I64);
    let pair = Datatype::contiguous(2, &int).unwrap();
    pair.commit().unwrap();
    let (me, n_local, n_remote) = (ic.rank(), ic.local_size(), ic.remote_size());
    let world_of = |local: i32, group: u32| (2 * local) as u32 + group;
    let other = 1 - color;
    let remote_data = |case: u64, len: usize| -> Vec<Vec<i64>> {
        (0..n_remote)
            .map(|j| data_i64(case, world_of(j, other), len))
            .collect()
    };
    let mine = |case: u64, len: usize| data_i64(case, w.rank() as u32, len);

    ic.barrier().unwrap();
    wait_buf(w, ic.ibarrier().unwrap());

    // Bcast from group 0's rank 0, then (nonblocking) from group 1's last.
    for (case, root_group, root_local, nb) in
        [(1, 0, 0, false), (2, 1, n_local.min(n_remote) - 1, true)]
    {
        let root_local = if color == root_group {
            root_local.min(n_local - 1)
        } else {
            root_local.min(n_remote - 1)
        };
        let root = if color == root_group {
            if me == root_local {
                InterRoot::Root
            } else {
                InterRoot::Null
            }
        } else {
            InterRoot::Remote(root_local)
        };
        let want = bytes(&data_i64(case, world_of(root_local, root_group), 5));
        let buf = if root == InterRoot::Root {
            want.clone()
        } else {
            vec![0u8; want.len()]
        };
        let got = if nb {
            wait_buf(w, ic.ibcast(buf, root).unwrap())
        } else {
            let mut b = buf;
            ic.bcast(&mut b, root).unwrap();
            b
        };
        if let InterRoot::Remote(_) = root {
            assert_eq!(got, want, "inter bcast case {case}");
        }
    }

    // Reduce (not commutative: rank order) to group 1's rank 0, then
    // (nonblocking, sum) to group 0's last rank.
    for (case, op_id, root_group, nb) in [(3u64, 4u64, 1u32, false), (4, 0, 0, true)] {
        let root_local = if root_group == 0 {
            (n_local.max(n_remote) - 1).min(if color == 0 { n_local } else { n_remote } - 1)
        } else {
            0
        };
        let root = if color == root_group {
            if me == root_local {
                InterRoot::Root
            } else {
                InterRoot::Null
            }
        } else {
            InterRoot::Remote(root_local)
        };
        let (op, ty) = (op_of(op_id), if op_id == 4 { &pair } else { &int });
        let send = bytes(&mine(case, 6));
        let got = if nb {
            wait_buf(w, ic.ireduce_packed(send, ty, &op, root).unwrap())
        } else {
            let mut out = vec![0u8; send.len()];
            ic.reduce_packed(&send, &mut out, ty, &op, root).unwrap();
            out
        };
        if root == InterRoot::Root {
            assert_eq!(
                ints(&got),
                fold(op_id, &remote_data(case, 6)),
                "inter reduce case {case}"
            );
        }
    }

    // Allreduce: each group gets the other's reduction.
    for (case, op_id, nb) in [(5u64, 4u64, false), (6, 0, true)] {
        let (op, ty) = (op_of(op_id), if op_id == 4 { &pair } else { &int });
        let send = bytes(&mine(case, 8));
        let got = if nb {
            wait_buf(w, ic.iallreduce_packed(send, ty, &op).unwrap())
        } else {
            let mut out = vec![0u8; send.len()];
            ic.allreduce_packed(&send, &mut out, ty, &op).unwrap();
            out
        };
        assert_eq!(
            ints(&got),
            fold(op_id, &remote_data(case, 8)),
            "inter allreduce case {case}"
        );
    }

    // Gatherv to group 0's rank 0, scatterv from group 1's rank 0:
    // remote rank j's block holds j + 1 elements.
    let vblocks = |n: i32| {
        let mut off = 0;
        (0..n)
            .map(|j| {
                let b = (off, (j as usize + 1) * 8);
                off += b.1;
                b
            })
            .collect::<Vec<_>>()
    };
    for nb in [false, true] {
        let case = 7 + nb as u64;
        let root = if color == 0 {
            if me == 0 {
                InterRoot::Root
            } else {
                InterRoot::Null
            }
        } else {
            InterRoot::Remote(0)
        };
        let blocks = vblocks(n_remote);
        let total = blocks.iter().map(|b| b.1).sum::<usize>();
        let send = bytes(&mine(case, me as usize + 1));
        let got = if nb {
            wait_buf(
                w,
                ic.igatherv(send, vec![0u8; total], blocks.clone(), root)
                    .unwrap(),
            )
        } else {
            let mut out = vec![0u8; total];
            ic.gatherv(&send, &mut out, &blocks, root).unwrap();
            out
        };
        if root == InterRoot::Root {
            let want: Vec<i64> = (0..n_remote)
                .flat_map(|j| data_i64(case, world_of(j, other), j as usize + 1))
                .collect();
            assert_eq!(ints(&got), want, "inter gatherv");
        }
        // Scatterv from group 1's rank 0: remote rank j gets j + 1 elements.
        let root = if color == 1 {
            if me == 0 {
                InterRoot::Root
            } else {
                InterRoot::Null
            }
        } else {
            InterRoot::Remote(0)
        };
        let src = data_i64(case + 10, world_of(0, 1), 64);
        let (send, blocks) = if root == InterRoot::Root {
            let blocks = vblocks(n_remote);
            let total = blocks.iter().map(|b| b.1).sum::<usize>();
            (bytes(&src[..total / 8]), blocks)
        } else {
            (Vec::new(), Vec::new())
        };
        let rlen = (me as usize + 1) * 8;
        let got = if nb {
            wait_buf(w, ic.iscatterv(send, blocks, rlen, root).unwrap())
        } else {
            let mut out = vec![0u8; rlen];
            let k = ic.scatterv(&send, &blocks, &mut out, root).unwrap();
            out.truncate(k);
            out
        };
        if let InterRoot::Remote(_) = root {
            let off = (0..me as usize).map(|j| j + 1).sum::<usize>();
            assert_eq!(
                ints(&got),
                src[off..off + me as usize + 1].to_vec(),
                "inter scatterv"
            );
        }
    }

    // Allgatherv: every remote member's j + 1 elements.
    for nb in [false, true] {
        let case = 20 + nb as u64;
        let blocks = vblocks(n_remote);
        let total = blocks.iter().map(|b| b.1).sum::<usize>();
        let send = bytes(&mine(case, me as usize + 1));
        let got = if nb {
            wait_buf(w, ic.iallgatherv(send, vec![0u8; total], blocks).unwrap())
        } else {
            let mut out = vec![0u8; total];
            ic.allgatherv(&send, &mut out, &blocks).unwrap();
            out
        };
        let want: Vec<i64> = (0..n_remote)
            .flat_map(|j| data_i64(case, world_of(j, other), j as usize + 1))
            .collect();
        assert_eq!(ints(&got), want, "inter allgatherv");
    }

    // Alltoallv: (sender, receiver) local ranks give the block's size.
    let size = |s: i32, r: i32| ((s + 2 * r) % 3) as usize;
    for nb in [false, true] {
        let case = 30 + nb as u64;
        let block = |from_world: u32, s: i32, r: i32| {
            data_i64(case * 100 + r as u64, from_world, size(s, r))
        };
        let mut send = Vec::new();
        let mut sblocks = Vec::new();
        for j in 0..n_remote {
            let b = bytes(&block(w.rank() as u32, me, j));
            sblocks.push((send.len(), b.len()));
            send.extend_from_slice(&b);
        }
        let mut want = Vec::new();
        let mut rblocks = Vec::new();
        for j in 0..n_remote {
            let b = block(world_of(j, other), j, me);
            rblocks.push((want.len() * 8, b.len() * 8));
            want.extend(b);
        }
        let total = want.len() * 8;
        let got = if nb {
            wait_buf(
                w,
                ic.ialltoallv(send, sblocks, vec![0u8; total], rblocks)
                    .unwrap(),
            )
        } else {
            let mut out = vec![0u8; total];
            ic.alltoallv(&send, &sblocks, &mut out, &rblocks).unwrap();
            out
        };
        assert_eq!(ints(&got), want, "inter alltoallv");
    }

    // Reduce-scatter: 12 elements in all, local rank i's block i + 1
    // elements (the last takes the rest).
    for nb in [false, true] {
        let case = 40 + nb as u64;
        let mut blocks = Vec::new();
        let mut off = 0;
        for i in 0..n_local {
            let l = if i == n_local - 1 {
                12 - off
            } else {
                (i as usize + 1).min(12 - off)
            };
            blocks.push((off * 8, l * 8));
            off += l;
        }
        let send = bytes(&mine(case, 12));
        let got = if nb {
            wait_buf(
                w,
                ic.ireduce_scatter_packed(send, blocks.clone(), &int, &Op::Sum)
                    .unwrap(),
            )
        } else {
            let mut out = vec![0u8; blocks[me as usize].1];
            ic.reduce_scatter_packed(&send, &mut out, &blocks, &int, &Op::Sum)
                .unwrap();
            out
        };
        let all = fold(0, &remote_data(case, 12));
        let (o, l) = blocks[me as usize];
        assert_eq!(
            ints(&got),
            all[o / 8..(o + l) / 8].to_vec(),
            "inter reduce_scatter"
        );
    }
    ic.barrier().unwrap();
}

/// Members of one call using different forms: the blocking allreduce and
/// all-to-all on the caller's memory (`allreduce_in_place`,
/// `allreduce_packed`, `alltoallv_direct`: no schedule) on some ranks, the nonblocking
/// schedules on the others, on sizes for both algorithm kinds and every
/// operation (the non-commutative one too): the two forms send the same
/// messages with the same tags, and results agree with the reference.
fn role_mixed(w: &Comm) {
    let int = Datatype::basic(BasicType::I64);
    let pair = Datatype::contiguous(2, &int).unwrap();
    pair.commit().unwrap();
    let (me, n) = (w.rank(), w.size());
    let mut case = 0u64;
    for len in [2usize, 6, 256, 258, 4000] {
        for op_id in 0..5 {
            for direct_parity in 0..2 {
                case += 1;
                let all: Vec<Vec<i64>> = (0..n as u32).map(|r| data_i64(case, r, len)).collect();
                let want = fold(op_id, &all);
                let (op, ty) = (op_of(op_id), if op_id == 4 { &pair } else { &int });
                let mut buf = bytes(&all[me as usize]);
                let name = format!("case {case} op {op_id} len {len} n {n}");
                if me % 2 == direct_parity && case % 2 == 0 {
                    w.allreduce_in_place(&mut buf, ty, &op).unwrap();
                } else if me % 2 == direct_parity {
                    // The send data read in place, not copied first.
                    let mut out = vec![0u8; buf.len()];
                    w.allreduce_packed(&buf, &mut out, ty, &op).unwrap();
                    buf = out;
                } else {
                    let mut r = w.iallreduce_packed(buf, ty, &op).unwrap();
                    w.wait(&mut r).unwrap();
                    buf = r.take_buffer().unwrap();
                }
                assert_eq!(ints(&buf), want, "allreduce {name}");
            }
        }
        // All-to-all: block sizes differ per pair (some empty), receive
        // blocks in reverse rank order.
        for direct_parity in 0..2 {
            case += 1;
            let size = |s: i32, d: i32| 8 * ((len + (s * 3 + d) as usize) % (len + 1));
            let block =
                |s: i32, d: i32| bytes(&data_i64(case * 7 + d as u64, s as u32, size(s, d) / 8));
            let mut sblocks = Vec::new();
            let mut so = 0;
            for d in 0..n {
                sblocks.push((so, size(me, d)));
                so += size(me, d);
            }
            let mut rblocks = vec![(0, 0); n as usize];
            let mut ro = 0;
            for s in (0..n).rev() {
                rblocks[s as usize] = (ro, size(s, me));
                ro += size(s, me);
            }
            let send: Vec<u8> = (0..n).flat_map(|d| block(me, d)).collect();
            let mut want = vec![0u8; ro];
            for s in 0..n {
                let (o, l) = rblocks[s as usize];
                want[o..o + l].copy_from_slice(&block(s, me));
            }
            let got = if me % 2 == direct_parity {
                let mut out = vec![0u8; ro];
                w.alltoallv_direct(&send, &sblocks, &mut out, &rblocks)
                    .unwrap();
                out
            } else {
                let mut r = w.ialltoallv(send, sblocks, vec![0u8; ro], rblocks).unwrap();
                w.wait(&mut r).unwrap();
                r.take_buffer().unwrap()
            };
            assert_eq!(got, want, "alltoallv case {case} len {len}");
        }
    }
    // Overlapping receive blocks are refused by the direct form.
    let mut out = vec![0u8; 16];
    let blocks: Vec<(usize, usize)> = (0..n as usize).map(|_| (0, 8)).collect();
    let sblocks: Vec<(usize, usize)> = (0..n as usize).map(|i| (8 * i, 8)).collect();
    let e = w
        .alltoallv_direct(&vec![0u8; 8 * n as usize], &sblocks, &mut out, &blocks)
        .unwrap_err();
    assert!(
        n == 1 || matches!(e, adi::Error::InvalidArgument { .. }),
        "{e}"
    );
}

/// A blocking collective entered while a nonblocking one is pending must
/// advance it: rank 0 calls `ibarrier`, then the blocking allreduce and
/// all-to-all, then waits; the others wait for the barrier first. Rank 2
/// needs rank 0's second barrier message, which rank 0's schedule sends
/// only from inside its blocking calls. Four ranks.
fn role_progress(w: &Comm) {
    let int = Datatype::basic(BasicType::I64);
    let (me, n) = (w.rank(), w.size());
    let mut sum = [0u8; 8];
    let send: Vec<u8> = (0..n).flat_map(|d| (me * 100 + d).to_ne_bytes()).collect();
    let blocks: Vec<(usize, usize)> = (0..n as usize).map(|i| (4 * i, 4)).collect();
    let mut got = vec![0u8; 4 * n as usize];
    // Rank 3 starts its barrier only after rank 0's first poll of its
    // own (rank 0's first round waits for rank 3's message).
    if me == 3 {
        w.recv(&mut [0u8; 1], 0, 5).unwrap();
    }
    let mut b = w.ibarrier().unwrap();
    if me == 0 {
        w.send(&[1], 3, 5).unwrap();
    } else {
        w.wait(&mut b).unwrap();
    }
    w.allreduce_packed(&(me as i64).to_ne_bytes(), &mut sum, &int, &Op::Sum)
        .unwrap();
    w.alltoallv_direct(&send, &blocks, &mut got, &blocks)
        .unwrap();
    if me == 0 {
        w.wait(&mut b).unwrap();
    }
    assert_eq!(i64::from_ne_bytes(sum), (n * (n - 1) / 2) as i64);
    for (s, c) in got.chunks_exact(4).enumerate() {
        assert_eq!(
            i32::from_ne_bytes(c.try_into().unwrap()),
            s as i32 * 100 + me
        );
    }
}

/// A blocking receive advances a pending nonblocking collective: rank 0
/// starts a barrier, then blocks in a receive whose message rank 2 sends
/// only once its own barrier completed, which needs rank 0's schedule to
/// go on past its first round while rank 0 waits in the receive.
fn role_recv_progress(w: &Comm) {
    let me = w.rank();
    if me != 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut b = w.ibarrier().unwrap();
    if me == 0 {
        let mut got = [0u8; 1];
        w.recv(&mut got, 2, 7).unwrap();
        assert_eq!(got, [42]);
    }
    w.wait(&mut b).unwrap();
    if me == 2 {
        w.send(&[42], 0, 7).unwrap();
    }
}

#[test]
fn rank_entry_point() {
    let Some(role) = common::role() else { return };
    let w = adi::init().unwrap();
    match role.as_str() {
        "random" => role_random(&w),
        "errors" => role_errors(&w),
        "intercomm" => role_intercomm(&w),
        "mixed" => role_mixed(&w),
        "progress" => role_progress(&w),
        "recv_progress" => role_recv_progress(&w),
        other => panic!("unknown role {other}"),
    }
    adi::finalize().unwrap();
}

fn run(role: &str, n: usize) {
    let code = common::launch(role, n, &[], Duration::from_secs(120));
    assert_eq!(code, 0, "job {role} -n {n}: launcher exit status {code}");
}

#[test]
fn random_collectives_1_rank() {
    run("random", 1);
}

#[test]
fn random_collectives_2_ranks() {
    run("random", 2);
}

#[test]
fn random_collectives_3_ranks() {
    run("random", 3);
}

#[test]
fn random_collectives_4_ranks() {
    run("random", 4);
}

#[test]
fn random_collectives_6_ranks() {
    run("random", 6);
}

/// The long-message algorithms (Rabenseifner, scatter + ring, ring,
/// pairwise), forced on the same small cases: power-of-two and folded
/// process counts.
fn run_long(n: usize) {
    let env = [(adi::ENV_COLL_ALGORITHMS.to_string(), "long".to_string())];
    let code = common::launch("random", n, &env, Duration::from_secs(120));
    assert_eq!(
        code, 0,
        "job random -n {n} (long algorithms): exit status {code}"
    );
}

#[test]
fn long_algorithms_2_ranks() {
    run_long(2);
}

#[test]
fn long_algorithms_3_ranks() {
    run_long(3);
}

#[test]
fn long_algorithms_4_ranks() {
    run_long(4);
}

#[test]
fn long_algorithms_6_ranks() {
    run_long(6);
}

#[test]
fn mixed_forms_2_ranks() {
    run("mixed", 2);
}

#[test]
fn mixed_forms_3_ranks() {
    run("mixed", 3);
}

#[test]
fn mixed_forms_5_ranks_long_algorithms() {
    let env = [(adi::ENV_COLL_ALGORITHMS.to_string(), "long".to_string())];
    let code = common::launch("mixed", 5, &env, Duration::from_secs(120));
    assert_eq!(
        code, 0,
        "job mixed -n 5 (long algorithms): exit status {code}"
    );
}

#[test]
fn blocking_collectives_advance_a_pending_one_4_ranks() {
    let code = common::launch("progress", 4, &[], Duration::from_secs(30));
    assert_eq!(code, 0, "job progress -n 4: exit status {code}");
}

#[test]
fn a_blocking_receive_advances_a_pending_collective_4_ranks() {
    let code = common::launch("recv_progress", 4, &[], Duration::from_secs(30));
    assert_eq!(code, 0, "job recv_progress -n 4: exit status {code}");
}

#[test]
fn intercommunicators_3_ranks() {
    run("intercomm", 3);
}

#[test]
fn intercommunicators_4_ranks() {
    run("intercomm", 4);
}

#[test]
fn collective_argument_errors() {
    run("errors", 3);
}
