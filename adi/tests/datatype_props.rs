//! Property tests of datatypes against an independent model: random nested
//! datatypes are expanded into their type map (one byte offset per data byte,
//! in type-map order) by a direct recursive walk that shares nothing with the
//! crate's flattening, merging or segment iteration, and pack/unpack are
//! checked against it.
//!
//! The quick variants run in `cargo test`; the heavy ones are ignored and run
//! by `cargo xtask ci proptest` with `PROPTEST_CASES`.
#![allow(clippy::unwrap_used)]

use adi::datatype::{Block, MAX_FLAT_BLOCKS};
use adi::{plan_send, BasicType, Datatype, Error, PlanLimits, SendPlan};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Spec {
    Basic(BasicType),
    Contiguous(i64, Box<Spec>),
    Vector(i64, i64, i64, Box<Spec>),
    Hvector(i64, i64, isize, Box<Spec>),
    Indexed(Vec<(i64, i64)>, Box<Spec>),
    Hindexed(Vec<(i64, isize)>, Box<Spec>),
    Struct(Vec<(i64, isize, Spec)>),
    Resized(isize, isize, Box<Spec>),
}

fn basic() -> impl Strategy<Value = BasicType> {
    prop_oneof![
        Just(BasicType::I8),
        Just(BasicType::I16),
        Just(BasicType::I32),
        Just(BasicType::I64),
        Just(BasicType::U8),
        Just(BasicType::U16),
        Just(BasicType::U32),
        Just(BasicType::U64),
        Just(BasicType::F32),
        Just(BasicType::F64),
        Just(BasicType::Byte),
        Just(BasicType::Char),
    ]
}

/// A count or block length: mostly 1..=3, sometimes 0 (one in 13).
fn small() -> impl Strategy<Value = i64> {
    prop_oneof![1 => Just(0i64), 12 => 1i64..4]
}

fn spec() -> impl Strategy<Value = Spec> {
    spec_sized(4, 64)
}

/// Deeper and larger types for the heavy runs.
fn big_spec() -> impl Strategy<Value = Spec> {
    spec_sized(6, 160)
}

fn spec_sized(depth: u32, size: u32) -> impl Strategy<Value = Spec> {
    basic()
        .prop_map(Spec::Basic)
        .prop_recursive(depth, size, 3, |inner| {
            let b = || inner.clone().prop_map(Box::new);
            prop_oneof![
                (small(), b()).prop_map(|(n, c)| Spec::Contiguous(n, c)),
                (small(), small(), -4i64..5, b())
                    .prop_map(|(n, bl, s, c)| Spec::Vector(n, bl, s, c)),
                (small(), small(), -16isize..33, b())
                    .prop_map(|(n, bl, s, c)| Spec::Hvector(n, bl, s, c)),
                (prop::collection::vec((small(), -6i64..7), 1..4), b())
                    .prop_map(|(v, c)| Spec::Indexed(v, c)),
                (prop::collection::vec((small(), -24isize..48), 1..4), b())
                    .prop_map(|(v, c)| Spec::Hindexed(v, c)),
                prop::collection::vec((small(), -24isize..48, inner.clone()), 1..4)
                    .prop_map(Spec::Struct),
                (-8isize..9, 0isize..24, b()).prop_map(|(lb, e, c)| Spec::Resized(lb, e, c)),
            ]
        })
}

/// Builds the datatype and, independently, its type map: the byte offset of
/// every data byte of one element, in type-map order.
fn build(spec: &Spec) -> (Datatype, Vec<isize>) {
    fn rep(map: &mut Vec<isize>, child: &[isize], base: isize, n: i64, ext: isize) {
        for j in 0..n as isize {
            map.extend(child.iter().map(|o| o + base + j * ext));
        }
    }
    match spec {
        Spec::Basic(t) => (Datatype::basic(*t), (0..t.size() as isize).collect()),
        Spec::Contiguous(n, c) => {
            let (cd, cm) = build(c);
            let mut m = Vec::new();
            rep(&mut m, &cm, 0, *n, cd.extent());
            (Datatype::contiguous(*n, &cd).unwrap(), m)
        }
        Spec::Vector(n, bl, s, c) => {
            let (cd, cm) = build(c);
            let mut m = Vec::new();
            for i in 0..*n as isize {
                rep(&mut m, &cm, i * *s as isize * cd.extent(), *bl, cd.extent());
            }
            (Datatype::vector(*n, *bl, *s, &cd).unwrap(), m)
        }
        Spec::Hvector(n, bl, s, c) => {
            let (cd, cm) = build(c);
            let mut m = Vec::new();
            for i in 0..*n as isize {
                rep(&mut m, &cm, i * s, *bl, cd.extent());
            }
            (Datatype::hvector(*n, *bl, *s, &cd).unwrap(), m)
        }
        Spec::Indexed(v, c) => {
            let (cd, cm) = build(c);
            let mut m = Vec::new();
            for &(bl, d) in v {
                rep(&mut m, &cm, d as isize * cd.extent(), bl, cd.extent());
            }
            let bls: Vec<i64> = v.iter().map(|x| x.0).collect();
            let ds: Vec<i64> = v.iter().map(|x| x.1).collect();
            (Datatype::indexed(&bls, &ds, &cd).unwrap(), m)
        }
        Spec::Hindexed(v, c) => {
            let (cd, cm) = build(c);
            let mut m = Vec::new();
            for &(bl, d) in v {
                rep(&mut m, &cm, d, bl, cd.extent());
            }
            let bls: Vec<i64> = v.iter().map(|x| x.0).collect();
            let ds: Vec<isize> = v.iter().map(|x| x.1).collect();
            (Datatype::hindexed(&bls, &ds, &cd).unwrap(), m)
        }
        Spec::Struct(v) => {
            let mut m = Vec::new();
            let (mut bls, mut ds, mut ts) = (Vec::new(), Vec::new(), Vec::new());
            for (bl, d, s) in v {
                let (cd, cm) = build(s);
                rep(&mut m, &cm, *d, *bl, cd.extent());
                bls.push(*bl);
                ds.push(*d);
                ts.push(cd);
            }
            (Datatype::struct_type(&bls, &ds, &ts).unwrap(), m)
        }
        Spec::Resized(lb, e, c) => {
            let (cd, cm) = build(c);
            (Datatype::resized(&cd, *lb, *e).unwrap(), cm)
        }
    }
}

/// Deterministic bytes from a seed (xorshift64*).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// A spec, shifted if needed so that no byte lies below offset 0, with its
/// type map and the full map of `count` elements.
struct Case {
    dt: Datatype,
    full: Vec<usize>,
    buf_len: usize,
}

fn case(spec: &Spec, count: i64, slack: usize) -> Option<Case> {
    let (dt, map) = build(spec);
    if map.len() > 1 << 13 {
        return None;
    }
    let shift = -dt.true_lb().min(0);
    let dt = if shift > 0 {
        let w = Datatype::hindexed(&[1], &[shift], &dt).unwrap();
        assert_eq!(
            w.extent(),
            dt.extent(),
            "a one-block shift keeps the extent"
        );
        w
    } else {
        dt
    };
    dt.commit().unwrap();
    let ext = dt.extent();
    let mut full = Vec::with_capacity(map.len() * count as usize);
    for e in 0..count as isize {
        full.extend(map.iter().map(|&o| (o + shift + e * ext) as usize));
    }
    let buf_len = full.iter().max().map_or(0, |&m| m + 1) + slack;
    Some(Case { dt, full, buf_len })
}

fn check_layout(spec: &Spec) -> Result<(), TestCaseError> {
    let (dt, map) = build(spec);
    prop_assume!(map.len() <= 1 << 13);
    prop_assert_eq!(dt.size(), map.len());
    if let (Some(lo), Some(hi)) = (map.iter().min(), map.iter().max()) {
        prop_assert_eq!(dt.true_lb(), *lo);
        prop_assert_eq!(dt.true_ub(), hi + 1);
        if !dt.has_explicit_bounds() {
            // Without explicit bounds, lb is the first data byte and ub at
            // least one past the last (padding may add).
            prop_assert_eq!(dt.lb(), *lo);
            prop_assert!(dt.ub() > *hi);
        }
    }
    prop_assert!(dt.extent() >= 0);
    dt.commit().unwrap();
    let flat = dt.flat().unwrap();
    let runs = flat.runs();
    prop_assert!(runs.len() <= MAX_FLAT_BLOCKS);
    prop_assert!(runs
        .iter()
        .all(|r| r.len > 0 && r.count > 0 && (r.count == 1 || r.stride != r.len as isize)));
    prop_assert_eq!(
        runs.iter().map(|r| r.len * r.count).sum::<usize>(),
        dt.size()
    );
    // The runs expand to exactly the type map.
    let from_runs: Vec<isize> = runs
        .iter()
        .flat_map(|r| {
            (0..r.count).flat_map(move |j| {
                let d = r.disp + j as isize * r.stride;
                (0..r.len as isize).map(move |i| d + i)
            })
        })
        .collect();
    prop_assert_eq!(&from_runs, &map);
    let blocks: Vec<Block> = flat.blocks();
    prop_assert_eq!(blocks.iter().map(|b| b.len).sum::<usize>(), dt.size());
    prop_assert_eq!(dt.pack_size(3).unwrap(), 3 * dt.size());
    prop_assert!(blocks.iter().all(|b| b.len > 0));
    for w in blocks.windows(2) {
        prop_assert!(
            w[0].disp + w[0].len as isize != w[1].disp,
            "adjacent blocks not merged"
        );
    }
    // The flattened blocks expand to exactly the type map.
    let expanded: Vec<isize> = blocks
        .iter()
        .flat_map(|b| (0..b.len as isize).map(move |i| b.disp + i))
        .collect();
    prop_assert_eq!(expanded, map);
    Ok(())
}

fn check_pack_unpack(
    spec: &Spec,
    count: i64,
    slack: usize,
    seed: u64,
    chunks: &[usize],
) -> Result<(), TestCaseError> {
    let Some(c) = case(spec, count, slack) else {
        return Ok(());
    };
    let dt = &c.dt;
    let total = dt.pack_size(count).unwrap();
    prop_assert_eq!(total, c.full.len());
    let src = bytes(seed, c.buf_len);

    // One-shot pack equals the model's gather.
    let mut packed = vec![0u8; total];
    let mut pos = 0;
    dt.pack(&src, count, &mut packed, &mut pos).unwrap();
    prop_assert_eq!(pos, total);
    let expect: Vec<u8> = c.full.iter().map(|&o| src[o]).collect();
    prop_assert_eq!(&packed, &expect);

    // Resumable pack in random chunk sizes equals the one-shot pack.
    let mut parts = Vec::new();
    let mut off = 0;
    let mut k = 0;
    while off < total {
        let mut chunk = vec![0u8; chunks[k % chunks.len()]];
        k += 1;
        let n = dt.pack_part(&src, count, off, &mut chunk).unwrap();
        prop_assert_eq!(n, chunk.len().min(total - off));
        parts.extend_from_slice(&chunk[..n]);
        off += n;
    }
    prop_assert_eq!(&parts, &packed);

    // Segments are the model's offsets, in order, inside the buffer; touching
    // regions are merged; any sub-range gives the same bytes.
    let segs: Vec<(usize, usize)> = dt
        .segments(c.buf_len, count, 0, usize::MAX)
        .unwrap()
        .collect();
    let from_segs: Vec<usize> = segs.iter().flat_map(|&(s, l)| s..s + l).collect();
    prop_assert!(from_segs.iter().all(|&o| o < c.buf_len));
    prop_assert_eq!(&from_segs, &c.full);
    for w in segs.windows(2) {
        prop_assert!(w[0].0 + w[0].1 != w[1].0, "touching regions not merged");
    }
    if total > 0 {
        let off = chunks[0] % total;
        let len = chunks[chunks.len() - 1];
        let part: Vec<usize> = dt
            .segments(c.buf_len, count, off, len)
            .unwrap()
            .flat_map(|(s, l)| s..s + l)
            .collect();
        prop_assert_eq!(&part[..], &c.full[off..(off + len).min(total)]);
    }

    // Unpack (in chunks) restores the covered bytes and leaves the others
    // untouched. Overlapping type maps are erroneous for receives in MPI.
    let mut sorted = c.full.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() == c.full.len() {
        let init = bytes(seed ^ 0x9E37_79B9_7F4A_7C15, c.buf_len);
        let mut dst = init.clone();
        let mut off = 0;
        let mut k = 1;
        while off < total {
            let end = (off + chunks[k % chunks.len()]).min(total);
            k += 1;
            let n = dt
                .unpack_part(&packed[off..end], &mut dst, count, off)
                .unwrap();
            prop_assert_eq!(n, end - off);
            off = end;
        }
        let mut covered = vec![false; c.buf_len];
        for &o in &c.full {
            covered[o] = true;
        }
        for i in 0..c.buf_len {
            let want = if covered[i] { src[i] } else { init[i] };
            prop_assert_eq!(dst[i], want, "byte {}", i);
        }
        // MPI_Unpack gives the same result in one call.
        let mut dst2 = init.clone();
        let mut pos = 0;
        dt.unpack(&packed, &mut pos, &mut dst2, count).unwrap();
        prop_assert_eq!(dst2, dst);
    }

    // A buffer one byte short is rejected without touching anything.
    if total > 0 {
        let short = c.buf_len - slack - 1;
        let mut out = vec![0xA5u8; total];
        let r = dt.pack_part(&src[..short], count, 0, &mut out);
        prop_assert!(matches!(r, Err(Error::BufferOutOfBounds { .. })), "{:?}", r);
        prop_assert!(out.iter().all(|&b| b == 0xA5));
    }
    Ok(())
}

fn check_plan(spec: &Spec, count: i64, limits: PlanLimits) -> Result<(), TestCaseError> {
    let Some(c) = case(spec, count, 0) else {
        return Ok(());
    };
    let total = c.dt.pack_size(count).unwrap();
    let plan = plan_send(&c.dt, count, &limits).unwrap();
    prop_assert_eq!(plan.len(), total);
    let contiguous = c.dt.contiguous_range(count).unwrap();
    match plan {
        SendPlan::Contiguous { start, len } => {
            prop_assert_eq!(contiguous, Some((start, len)));
            // The model agrees: the bytes are one increasing run.
            prop_assert!(c.full.windows(2).all(|w| w[1] == w[0] + 1));
        }
        SendPlan::Envelope { len } => {
            prop_assert!(contiguous.is_none() && len <= limits.envelope_max)
        }
        SendPlan::Packed { len } => {
            prop_assert!(
                contiguous.is_none() && len > limits.envelope_max && len <= limits.packed_max
            )
        }
        SendPlan::Pipelined { len, part_size } => {
            prop_assert!(contiguous.is_none() && len > limits.packed_max);
            prop_assert_eq!(part_size, limits.part_size);
        }
    }
    let mut next = 0;
    for p in plan.parts() {
        prop_assert_eq!(p.offset, next);
        prop_assert!(p.len > 0);
        if let SendPlan::Pipelined { part_size, .. } = plan {
            prop_assert!(p.len <= part_size);
        }
        next += p.len;
    }
    prop_assert_eq!(next, total);
    Ok(())
}

fn limits() -> impl Strategy<Value = PlanLimits> {
    (0usize..64, 0usize..256, 1usize..48).prop_map(|(e, p, s)| PlanLimits {
        envelope_max: e,
        packed_max: e + p,
        part_size: s,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn layout_matches_model(s in spec()) {
        check_layout(&s)?;
    }

    #[test]
    fn pack_unpack_match_model(
        s in spec(),
        count in 0i64..4,
        slack in 0usize..4,
        seed in any::<u64>(),
        chunks in prop::collection::vec(1usize..17, 1..6),
    ) {
        check_pack_unpack(&s, count, slack, seed, &chunks)?;
    }

    #[test]
    fn plan_covers_the_stream(s in spec(), count in 0i64..4, l in limits()) {
        check_plan(&s, count, l)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_layout_matches_model(s in big_spec()) {
        check_layout(&s)?;
    }

    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_pack_unpack_match_model(
        s in big_spec(),
        count in 0i64..6,
        slack in 0usize..4,
        seed in any::<u64>(),
        chunks in prop::collection::vec(1usize..64, 1..8),
    ) {
        check_pack_unpack(&s, count, slack, seed, &chunks)?;
    }

    #[test]
    #[ignore = "heavy: run by cargo xtask ci proptest"]
    fn heavy_plan_covers_the_stream(s in big_spec(), count in 0i64..6, l in limits()) {
        check_plan(&s, count, l)?;
    }
}
