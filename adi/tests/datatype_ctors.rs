//! Property tests of the later datatype constructors (dup, indexed_block,
//! hindexed_block, subarray), of the pair types, of
//! `MPI_Get_elements` ([`Datatype::elements_in`]) and of
//! `MPI_Type_get_contents` ([`Datatype::contents`]) against an
//! independent model: each type's map (one byte offset per data byte, in
//! type-map order) and its sequence of basic elements, built by a direct
//! recursive walk that shares nothing with the crate's flattening.
#![allow(clippy::unwrap_used)]

use adi::datatype::Order;
use adi::{BasicType, Combiner, Datatype};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Spec {
    Basic(BasicType),
    Contiguous(i64, Box<Spec>),
    Vector(i64, i64, i64, Box<Spec>),
    IndexedBlock(i64, Vec<i64>, Box<Spec>),
    HindexedBlock(i64, Vec<isize>, Box<Spec>),
    Dup(Box<Spec>),
    /// 2-D subarray: sizes, subsizes, starts, C order?
    Subarray([i64; 2], [i64; 2], [i64; 2], bool, Box<Spec>),
    Struct(Vec<(i64, isize, Spec)>),
}

/// The data bytes of a basic type, as C lays it out (the model's own
/// table, not the crate's).
fn basic_map(t: BasicType) -> (Vec<isize>, Vec<usize>) {
    use BasicType as B;
    let (parts, elems): (Vec<(isize, isize)>, Vec<usize>) = match t {
        B::ShortInt => (vec![(0, 2), (4, 4)], vec![2, 4]),
        B::DoubleInt | B::LongInt => (vec![(0, 8), (8, 4)], vec![8, 4]),
        B::TwoInt | B::FloatInt => (vec![(0, 8)], vec![4, 4]),
        t => (vec![(0, t.size() as isize)], vec![t.size()]),
    };
    let map = parts.iter().flat_map(|&(d, n)| d..d + n).collect();
    (map, elems)
}

fn basic() -> impl Strategy<Value = BasicType> {
    prop_oneof![
        Just(BasicType::I8),
        Just(BasicType::I32),
        Just(BasicType::F64),
        Just(BasicType::ShortInt),
        Just(BasicType::DoubleInt),
        Just(BasicType::TwoInt),
    ]
}

fn small() -> impl Strategy<Value = i64> {
    prop_oneof![1 => Just(0i64), 8 => 1i64..4]
}

fn spec() -> impl Strategy<Value = Spec> {
    basic()
        .prop_map(Spec::Basic)
        .prop_recursive(3, 48, 3, |inner| {
            let b = || inner.clone().prop_map(Box::new);
            prop_oneof![
                (small(), b()).prop_map(|(n, c)| Spec::Contiguous(n, c)),
                (small(), small(), -3i64..4, b())
                    .prop_map(|(n, bl, s, c)| Spec::Vector(n, bl, s, c)),
                (small(), prop::collection::vec(-4i64..6, 0..4), b())
                    .prop_map(|(bl, d, c)| Spec::IndexedBlock(bl, d, c)),
                (small(), prop::collection::vec(-16isize..40, 0..4), b())
                    .prop_map(|(bl, d, c)| Spec::HindexedBlock(bl, d, c)),
                b().prop_map(Spec::Dup),
                (1i64..4, 1i64..4, 0i64..3, 0i64..3, any::<bool>(), b()).prop_map(
                    |(a, bb, s0, s1, c, child)| {
                        let sizes = [a + s0, bb + s1];
                        Spec::Subarray(sizes, [a, bb], [s0, s1], c, child)
                    }
                ),
                prop::collection::vec((small(), -16isize..40, inner.clone()), 1..3)
                    .prop_map(Spec::Struct),
            ]
        })
}

/// The datatype, its type map, and its basic elements' sizes in order.
fn build(spec: &Spec) -> (Datatype, Vec<isize>, Vec<usize>) {
    fn rep(
        m: &mut Vec<isize>,
        e: &mut Vec<usize>,
        child: &(Vec<isize>, Vec<usize>),
        base: isize,
        n: i64,
        ext: isize,
    ) {
        for j in 0..n as isize {
            m.extend(child.0.iter().map(|o| o + base + j * ext));
            e.extend_from_slice(&child.1);
        }
    }
    let (mut m, mut e) = (Vec::new(), Vec::new());
    let dt = match spec {
        Spec::Basic(t) => {
            let (bm, be) = basic_map(*t);
            m = bm;
            e = be;
            Datatype::basic(*t)
        }
        Spec::Contiguous(n, c) => {
            let (cd, cm, ce) = build(c);
            rep(&mut m, &mut e, &(cm, ce), 0, *n, cd.extent());
            Datatype::contiguous(*n, &cd).unwrap()
        }
        Spec::Vector(n, bl, s, c) => {
            let (cd, cm, ce) = build(c);
            let child = (cm, ce);
            for i in 0..*n as isize {
                rep(
                    &mut m,
                    &mut e,
                    &child,
                    i * *s as isize * cd.extent(),
                    *bl,
                    cd.extent(),
                );
            }
            Datatype::vector(*n, *bl, *s, &cd).unwrap()
        }
        Spec::IndexedBlock(bl, ds, c) => {
            let (cd, cm, ce) = build(c);
            let child = (cm, ce);
            for &d in ds {
                rep(
                    &mut m,
                    &mut e,
                    &child,
                    d as isize * cd.extent(),
                    *bl,
                    cd.extent(),
                );
            }
            let t = Datatype::indexed_block(*bl, ds, &cd).unwrap();
            assert_eq!(t.combiner(), Combiner::IndexedBlock);
            let mut ints = vec![ds.len() as i64, *bl];
            ints.extend_from_slice(ds);
            assert_eq!(t.contents().unwrap().integers, ints);
            t
        }
        Spec::HindexedBlock(bl, ds, c) => {
            let (cd, cm, ce) = build(c);
            let child = (cm, ce);
            for &d in ds {
                rep(&mut m, &mut e, &child, d, *bl, cd.extent());
            }
            let t = Datatype::hindexed_block(*bl, ds, &cd).unwrap();
            assert_eq!(t.contents().unwrap().addresses, *ds);
            t
        }
        Spec::Dup(c) => {
            let (cd, cm, ce) = build(c);
            m = cm;
            e = ce;
            let t = cd.dup().unwrap();
            assert_eq!(t.combiner(), Combiner::Dup);
            assert!(t.contents().unwrap().types[0].same(&cd));
            assert_eq!((t.lb(), t.extent()), (cd.lb(), cd.extent()));
            t
        }
        Spec::Subarray(sizes, subs, starts, c_order, c) => {
            let (cd, cm, ce) = build(c);
            let child = (cm, ce);
            let ext = cd.extent();
            let (outer, inner) = if *c_order { (0, 1) } else { (1, 0) };
            for i in starts[outer]..starts[outer] + subs[outer] {
                for j in starts[inner]..starts[inner] + subs[inner] {
                    let (r, col) = if *c_order { (i, j) } else { (j, i) };
                    let idx = if *c_order {
                        r * sizes[1] + col
                    } else {
                        col * sizes[0] + r
                    };
                    rep(&mut m, &mut e, &child, idx as isize * ext, 1, ext);
                }
            }
            let order = if *c_order { Order::C } else { Order::Fortran };
            let t = Datatype::subarray(sizes, subs, starts, order, &cd).unwrap();
            assert_eq!(
                (t.lb(), t.extent()),
                (0, (sizes[0] * sizes[1]) as isize * ext)
            );
            assert_eq!(t.combiner(), Combiner::Subarray);
            t
        }
        Spec::Struct(v) => {
            let (mut bls, mut ds, mut ts) = (Vec::new(), Vec::new(), Vec::new());
            for (bl, d, s) in v {
                let (cd, cm, ce) = build(s);
                rep(&mut m, &mut e, &(cm, ce), *d, *bl, cd.extent());
                bls.push(*bl);
                ds.push(*d);
                ts.push(cd);
            }
            let t = Datatype::struct_type(&bls, &ds, &ts).unwrap();
            let c = t.contents().unwrap();
            assert_eq!(c.addresses, ds);
            assert_eq!(c.types.len(), ts.len());
            t
        }
    };
    (dt, m, e)
}

/// The model's `MPI_Get_elements`: walk the element sizes cyclically.
fn model_elements(elems: &[usize], bytes: usize) -> Option<usize> {
    let size: usize = elems.iter().sum();
    if size == 0 {
        return Some(0);
    }
    let (mut n, mut at) = ((bytes / size) * elems.len(), (bytes / size) * size);
    for &s in elems.iter().cycle() {
        if at == bytes {
            return Some(n);
        }
        if at + s > bytes {
            return None;
        }
        at += s;
        n += 1;
    }
    None
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn layouts_match_the_model(s in spec()) {
        let (dt, map, elems) = build(&s);
        prop_assume!(map.len() <= 1 << 12);
        prop_assert_eq!(dt.size(), map.len());
        prop_assert_eq!(elems.iter().sum::<usize>(), map.len());
        dt.commit().unwrap();
        let flat: Vec<isize> = dt
            .flat()
            .unwrap()
            .blocks()
            .iter()
            .flat_map(|b| (0..b.len as isize).map(move |i| b.disp + i))
            .collect();
        prop_assert_eq!(flat, map);
    }

    #[test]
    fn get_elements_matches_the_model(s in spec(), k in 0usize..200) {
        let (dt, map, elems) = build(&s);
        prop_assume!(map.len() <= 1 << 12);
        let bytes = if dt.size() == 0 { 0 } else { k % (3 * dt.size() + 1) };
        prop_assert_eq!(dt.elements_in(bytes), model_elements(&elems, bytes), "{} bytes", bytes);
    }
}
