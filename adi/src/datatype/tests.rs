//! Constructors against hand-computed layouts, and the error paths.

use super::*;

fn i8t() -> Datatype {
    Datatype::basic(BasicType::I8)
}
fn i16t() -> Datatype {
    Datatype::basic(BasicType::I16)
}
fn i32t() -> Datatype {
    Datatype::basic(BasicType::I32)
}
fn f64t() -> Datatype {
    Datatype::basic(BasicType::F64)
}

fn blocks(t: &Datatype) -> Vec<(isize, usize)> {
    t.commit().unwrap();
    t.flat()
        .unwrap()
        .blocks()
        .iter()
        .map(|b| (b.disp, b.len))
        .collect()
}

/// (size, lb, ub, true_lb, true_ub)
fn bounds(t: &Datatype) -> (usize, isize, isize, isize, isize) {
    (t.size(), t.lb(), t.ub(), t.true_lb(), t.true_ub())
}

#[test]
fn basic_types() {
    let sizes = [
        (BasicType::I8, 1),
        (BasicType::I16, 2),
        (BasicType::I32, 4),
        (BasicType::I64, 8),
        (BasicType::U8, 1),
        (BasicType::U16, 2),
        (BasicType::U32, 4),
        (BasicType::U64, 8),
        (BasicType::F32, 4),
        (BasicType::F64, 8),
        (BasicType::Byte, 1),
        (BasicType::Char, 1),
    ];
    for (b, size) in sizes {
        let t = Datatype::basic(b);
        assert!(t.is_committed());
        assert_eq!(bounds(&t), (size, 0, size as isize, 0, size as isize));
        assert_eq!(blocks(&t), vec![(0, size)]);
        assert_eq!(t.as_basic(), Some(b));
        assert_eq!(t.combiner(), Combiner::Named);
    }
    assert_eq!(BasicType::F64.name(), "MPI_DOUBLE");
}

#[test]
fn contiguous_layout() {
    let t = Datatype::contiguous(3, &i32t()).unwrap();
    assert!(!t.is_committed());
    assert_eq!(bounds(&t), (12, 0, 12, 0, 12));
    assert_eq!(blocks(&t), vec![(0, 12)]);
    assert_eq!(t.contiguous_range(2).unwrap(), Some((0, 24)));
    assert_eq!(t.combiner(), Combiner::Contiguous);
    let empty = Datatype::contiguous(0, &i32t()).unwrap();
    assert_eq!(bounds(&empty), (0, 0, 0, 0, 0));
    assert_eq!(blocks(&empty), vec![]);
}

#[test]
fn vector_layout() {
    // 3 blocks of 2 ints, stride 4 ints: blocks at bytes 0, 16, 32.
    let t = Datatype::vector(3, 2, 4, &i32t()).unwrap();
    assert_eq!(bounds(&t), (24, 0, 40, 0, 40));
    assert_eq!(blocks(&t), vec![(0, 8), (16, 8), (32, 8)]);
    assert_eq!(t.contiguous_range(1).unwrap(), None);
    // Stride equal to the block length: dense, one block.
    let dense = Datatype::vector(4, 2, 2, &i32t()).unwrap();
    assert_eq!(blocks(&dense), vec![(0, 32)]);
    assert_eq!(dense.contiguous_range(3).unwrap(), Some((0, 96)));
}

#[test]
fn vector_negative_stride() {
    // Blocks at 0, -8, -16 in that (type map) order.
    let t = Datatype::vector(3, 1, -2, &i32t()).unwrap();
    assert_eq!(bounds(&t), (12, -16, 4, -16, 4));
    assert_eq!(t.extent(), 20);
    assert_eq!(blocks(&t), vec![(0, 4), (-8, 4), (-16, 4)]);
}

#[test]
fn hvector_layout() {
    let t = Datatype::hvector(2, 1, 6, &i16t()).unwrap();
    assert_eq!(bounds(&t), (4, 0, 8, 0, 8));
    assert_eq!(blocks(&t), vec![(0, 2), (6, 2)]);
    assert_eq!(t.combiner(), Combiner::Hvector);
    let dense = Datatype::hvector(4, 2, 8, &i32t()).unwrap();
    assert_eq!(blocks(&dense), vec![(0, 32)]);
}

#[test]
fn indexed_layout_keeps_type_map_order() {
    // Block of 2 ints at element 3 (byte 12), then 1 int at element 0.
    let t = Datatype::indexed(&[2, 1], &[3, 0], &i32t()).unwrap();
    assert_eq!(bounds(&t), (12, 0, 20, 0, 20));
    assert_eq!(blocks(&t), vec![(12, 8), (0, 4)]);
    let merged = Datatype::indexed(&[1, 1], &[0, 1], &i32t()).unwrap();
    assert_eq!(blocks(&merged), vec![(0, 8)]);
    // A zero-length block contributes nothing, not even to the bounds.
    let z = Datatype::indexed(&[0, 1], &[100, 2], &i32t()).unwrap();
    assert_eq!(bounds(&z), (4, 8, 12, 8, 12));
}

#[test]
fn hindexed_layout() {
    let t = Datatype::hindexed(&[1, 2], &[5, -3], &i16t()).unwrap();
    assert_eq!(bounds(&t), (6, -3, 7, -3, 7));
    assert_eq!(blocks(&t), vec![(5, 2), (-3, 4)]);
}

#[test]
fn struct_layout_and_padding() {
    let s = Datatype::struct_type(&[1, 1], &[0, 8], &[i32t(), f64t()]).unwrap();
    assert_eq!(bounds(&s), (12, 0, 16, 0, 16));
    assert_eq!(blocks(&s), vec![(0, 4), (8, 8)]);
    // { f64; i8 }: 9 bytes of data, extent padded to 16.
    let p = Datatype::struct_type(&[1, 1], &[0, 8], &[f64t(), i8t()]).unwrap();
    assert_eq!(bounds(&p), (9, 0, 16, 0, 9));
    assert_eq!(blocks(&p), vec![(0, 9)]);
    // { i8; i16 at 1 }: alignment 2, extent 3 padded to 4.
    let q = Datatype::struct_type(&[1, 1], &[0, 1], &[i8t(), i16t()]).unwrap();
    assert_eq!(q.extent(), 4);
    // Zero-length members are ignored, also for alignment.
    let z = Datatype::struct_type(&[0, 1], &[100, 0], &[f64t(), i8t()]).unwrap();
    assert_eq!(bounds(&z), (1, 0, 1, 0, 1));
    assert_eq!(s.combiner(), Combiner::Struct);
}

#[test]
fn resized_bounds_are_sticky() {
    let r = Datatype::resized(&i32t(), -2, 10).unwrap();
    assert_eq!(bounds(&r), (4, -2, 8, 0, 4));
    assert!(r.has_explicit_bounds());
    // Elements 10 bytes apart.
    let c = Datatype::contiguous(2, &r).unwrap();
    assert_eq!(bounds(&c), (8, -2, 18, 0, 14));
    assert_eq!(blocks(&c), vec![(0, 4), (10, 4)]);
    // In a struct, explicit bounds win over the other members' data and
    // there is no alignment padding.
    let s = Datatype::struct_type(
        &[1, 1],
        &[0, 8],
        &[Datatype::resized(&i32t(), 0, 6).unwrap(), f64t()],
    )
    .unwrap();
    assert_eq!(bounds(&s), (12, 0, 6, 0, 16));
    assert!(s.has_explicit_bounds());
    assert!(matches!(
        Datatype::resized(&i32t(), 0, -1),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn nested_layout() {
    // S = { i32 @0; i8 @4 }: 5 bytes, extent 8.
    let s = Datatype::struct_type(&[1, 1], &[0, 4], &[i32t(), i8t()]).unwrap();
    assert_eq!(bounds(&s), (5, 0, 8, 0, 5));
    let c = Datatype::contiguous(2, &s).unwrap();
    assert_eq!(bounds(&c), (10, 0, 16, 0, 13));
    assert_eq!(blocks(&c), vec![(0, 5), (8, 5)]);
    // Every other C, stride 2 extents = 32 bytes.
    let v = Datatype::vector(2, 1, 2, &c).unwrap();
    assert_eq!(bounds(&v), (20, 0, 48, 0, 45));
    assert_eq!(blocks(&v), vec![(0, 5), (8, 5), (32, 5), (40, 5)]);
}

#[test]
fn pack_unpack_column() {
    // Column 1 of a 3x4 matrix of u8 pairs (i16).
    let col = Datatype::vector(3, 1, 4, &i16t()).unwrap();
    col.commit().unwrap();
    let m: Vec<u8> = (0..24).collect();
    let mut packed = vec![0u8; col.pack_size(1).unwrap()];
    let mut pos = 0;
    col.pack(&m[2..], 1, &mut packed, &mut pos).unwrap();
    assert_eq!(pos, 6);
    assert_eq!(packed, [2, 3, 10, 11, 18, 19]);

    let mut back = vec![0xEEu8; 22];
    let mut pos = 0;
    col.unpack(&packed, &mut pos, &mut back, 1).unwrap();
    assert_eq!(pos, 6);
    let mut expect = vec![0xEEu8; 22];
    for (i, v) in [(0usize, 2u8), (1, 3), (8, 10), (9, 11), (16, 18), (17, 19)] {
        expect[i] = v;
    }
    assert_eq!(back, expect);
}

/// `pack_append` appends exactly what `pack` writes, after what `out`
/// held, on the small path (zero-filled, then packed) and the large one
/// (blocks appended, or gathered a stack chunk at a time): small and
/// large blocks, blocks out of order, several elements, a prefix in
/// `out`.
#[test]
fn pack_append_is_pack() {
    let i24 = Datatype::contiguous(3, &i8t()).unwrap();
    let big = Datatype::contiguous(700, &i8t()).unwrap();
    let cases = [
        (
            Datatype::vector(131_072, 1, 2, &f64t()).unwrap(),
            1i64,
            0usize,
        ),
        (Datatype::vector(4, 1, 2, &f64t()).unwrap(), 3, 0),
        (Datatype::vector(1000, 1, 3, &i24).unwrap(), 2, 0),
        (Datatype::vector(600, 2, 5, &i32t()).unwrap(), 1, 0),
        (Datatype::vector(20, 1, 2, &big).unwrap(), 1, 0),
        (
            Datatype::indexed(&[700, 1, 900], &[1500, 0, 2], &i32t()).unwrap(),
            2,
            0,
        ),
    ];
    for (k, (t, count, at)) in cases.into_iter().enumerate() {
        t.commit().unwrap();
        let (_, hi) = t.span(count).unwrap();
        let src: Vec<u8> = (0..at + hi as usize).map(|i| (i * 7 % 251) as u8).collect();
        let need = t.pack_size(count).unwrap();
        let mut want = vec![0u8; need];
        t.pack(&src[at..], count, &mut want, &mut 0).unwrap();
        let mut out = vec![9u8, 8, 7];
        assert_eq!(
            t.pack_append(&src[at..], count, &mut out).unwrap(),
            need,
            "case {k}"
        );
        assert_eq!(out[..3], [9, 8, 7], "case {k}");
        assert!(out[3..] == want[..], "case {k}: bytes");
        // A buffer too short: an error, `out` as it was.
        let mut out = vec![1u8];
        assert!(t
            .pack_append(&src[at..src.len() - 1], count, &mut out)
            .is_err());
        assert_eq!(out, [1], "case {k}");
    }
}

#[test]
fn pack_appends_at_position() {
    let t = Datatype::vector(2, 1, 2, &i8t()).unwrap();
    t.commit().unwrap();
    let mut out = [0u8; 5];
    let mut pos = 1;
    t.pack(&[1, 2, 3], 1, &mut out, &mut pos).unwrap();
    t.pack(&[4, 5, 6], 1, &mut out, &mut pos).unwrap();
    assert_eq!(out, [0, 1, 3, 4, 6]);
    assert_eq!(pos, 5);
    // A third does not fit: error, nothing written, position unchanged.
    assert_eq!(
        t.pack(&[7, 8, 9], 1, &mut out, &mut pos),
        Err(Error::Truncated { need: 2, have: 0 })
    );
    assert_eq!(out, [0, 1, 3, 4, 6]);
    assert_eq!(pos, 5);
}

#[test]
fn partial_pack_by_offset() {
    let t = Datatype::vector(3, 2, 3, &i8t()).unwrap(); // bytes 0,1,3,4,6,7
    t.commit().unwrap();
    let src: Vec<u8> = (10..30).collect();
    let mut whole = [0u8; 12];
    assert_eq!(t.pack_part(&src, 2, 0, &mut whole).unwrap(), 12);
    // Second element starts at extent 8.
    assert_eq!(whole, [10, 11, 13, 14, 16, 17, 18, 19, 21, 22, 24, 25]);
    let mut mid = [0u8; 5];
    assert_eq!(t.pack_part(&src, 2, 3, &mut mid).unwrap(), 5);
    assert_eq!(mid, whole[3..8]);
    let mut tail = [0u8; 100];
    assert_eq!(t.pack_part(&src, 2, 10, &mut tail).unwrap(), 2);
    assert_eq!(t.pack_part(&src, 2, 12, &mut tail).unwrap(), 0);
    assert_eq!(
        t.pack_part(&src, 2, 13, &mut tail),
        Err(Error::OffsetOutOfRange {
            offset: 13,
            len: 12
        })
    );
    // Unpack a middle part: only its bytes are written.
    let mut dst = vec![0u8; 16];
    assert_eq!(t.unpack_part(&whole[3..8], &mut dst, 2, 3).unwrap(), 5);
    assert_eq!(dst, [0, 0, 0, 0, 14, 0, 16, 17, 18, 19, 0, 0, 0, 0, 0, 0]);
}

#[test]
fn segments_are_user_regions_in_packed_order() {
    let t = Datatype::indexed(&[2, 1], &[3, 0], &i32t()).unwrap();
    t.commit().unwrap();
    let segs: Vec<_> = t.segments(40, 2, 0, usize::MAX).unwrap().collect();
    assert_eq!(segs, vec![(12, 8), (0, 4), (32, 8), (20, 4)]);
    let part: Vec<_> = t.segments(40, 2, 6, 8).unwrap().collect();
    assert_eq!(part, vec![(18, 2), (0, 4), (32, 2)]);
    // Dense: one region for many elements.
    let d = Datatype::contiguous(2, &i32t()).unwrap();
    d.commit().unwrap();
    assert_eq!(
        d.segments(80, 10, 4, 70).unwrap().collect::<Vec<_>>(),
        vec![(4, 70)]
    );
}

#[test]
fn uncommitted_types_cannot_pack() {
    let t = Datatype::contiguous(2, &i32t()).unwrap();
    let mut out = [0u8; 8];
    assert_eq!(
        t.pack_part(&[0; 8], 1, 0, &mut out),
        Err(Error::NotCommitted)
    );
    assert_eq!(t.contiguous_range(1), Err(Error::NotCommitted));
    // It can be used to build other types, which commit on their own.
    let u = Datatype::contiguous(2, &t).unwrap();
    u.commit().unwrap();
    assert!(!t.is_committed());
    assert_eq!(blocks(&u), vec![(0, 16)]);
}

#[test]
fn negative_counts_are_typed_errors() {
    let neg = |r: Result<Datatype, Error>| matches!(r, Err(Error::NegativeCount { .. }));
    assert!(neg(Datatype::contiguous(-1, &i32t())));
    assert!(neg(Datatype::vector(-1, 1, 1, &i32t())));
    assert!(neg(Datatype::vector(1, -1, 1, &i32t())));
    assert!(neg(Datatype::hvector(1, -3, 1, &i32t())));
    assert!(neg(Datatype::indexed(&[1, -1], &[0, 1], &i32t())));
    assert!(neg(Datatype::hindexed(&[-1], &[0], &i32t())));
    assert!(neg(Datatype::struct_type(&[-1], &[0], &[i32t()])));
    assert_eq!(
        i32t().pack_size(-5),
        Err(Error::NegativeCount {
            what: "count",
            value: -5
        })
    );
    assert_eq!(
        Error::NegativeCount {
            what: "count",
            value: -5
        }
        .class(),
        crate::ErrorClass::Count
    );
}

#[test]
fn mismatched_arrays_are_invalid_arguments() {
    assert!(matches!(
        Datatype::indexed(&[1, 1], &[0], &i32t()),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Datatype::struct_type(&[1], &[0, 4], &[i32t()]),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn overflowing_sizes_are_typed_errors() {
    let big = Datatype::contiguous(i64::MAX, &Datatype::basic(BasicType::I64));
    assert!(matches!(big, Err(Error::Overflow { .. })));
    assert!(matches!(
        Datatype::vector(2, 1, i64::MAX, &Datatype::basic(BasicType::I64)),
        Err(Error::Overflow { .. })
    ));
    let t = Datatype::contiguous(1 << 40, &i8t()).unwrap();
    t.commit().unwrap(); // one block, however long
    assert_eq!(blocks(&t), vec![(0, 1 << 40)]);
    assert!(matches!(t.pack_size(1 << 40), Err(Error::Overflow { .. })));
}

#[test]
fn buffers_too_small_are_rejected_before_any_access() {
    let t = Datatype::vector(2, 1, 4, &i32t()).unwrap(); // touches 0..20
    t.commit().unwrap();
    let mut out = [0xAAu8; 8];
    assert_eq!(
        t.pack_part(&[0; 19], 1, 0, &mut out),
        Err(Error::BufferOutOfBounds {
            lo: 0,
            hi: 20,
            len: 19
        })
    );
    assert_eq!(out, [0xAA; 8]);
    let mut dst = [0x55u8; 19];
    assert!(matches!(
        t.unpack_part(&[1; 8], &mut dst, 1, 0),
        Err(Error::BufferOutOfBounds { .. })
    ));
    assert_eq!(dst, [0x55; 19]);
    // count x extent beyond the buffer.
    assert!(matches!(
        t.pack_part(&[0; 20], 2, 0, &mut out),
        Err(Error::BufferOutOfBounds { hi: 40, .. })
    ));
    // Negative displacements reach below the slice.
    let n = Datatype::hindexed(&[1], &[-4], &i32t()).unwrap();
    n.commit().unwrap();
    assert_eq!(
        n.pack_part(&[0; 64], 1, 0, &mut out),
        Err(Error::BufferOutOfBounds {
            lo: -4,
            hi: 0,
            len: 64
        })
    );
    assert_eq!(
        Error::BufferOutOfBounds {
            lo: -4,
            hi: 0,
            len: 64
        }
        .class(),
        crate::ErrorClass::Buffer
    );
    // Zero elements touch nothing.
    assert_eq!(t.pack_part(&[], 0, 0, &mut out), Ok(0));
}

#[test]
fn unpack_of_short_input_is_truncation() {
    let t = Datatype::contiguous(4, &i8t()).unwrap();
    t.commit().unwrap();
    let mut dst = [0u8; 8];
    let mut pos = 0;
    assert_eq!(
        t.unpack(&[1, 2, 3], &mut pos, &mut dst, 1),
        Err(Error::Truncated { need: 4, have: 3 })
    );
    assert_eq!(dst, [0; 8]);
    assert_eq!(
        Error::Truncated { need: 4, have: 3 }.class(),
        crate::ErrorClass::Truncate
    );
}

#[test]
fn too_many_blocks_cannot_commit() {
    // Blocks of 1 and 2 bytes, 3 bytes apart: no two merge into a run.
    let n = MAX_FLAT_BLOCKS + 1;
    let lens: Vec<i64> = (0..n).map(|i| 1 + (i % 2) as i64).collect();
    let displs: Vec<i64> = (0..n).map(|i| 3 * i as i64).collect();
    let t = Datatype::indexed(&lens, &displs, &i8t()).unwrap();
    assert_eq!(
        t.commit(),
        Err(Error::TooManyBlocks {
            max: MAX_FLAT_BLOCKS
        })
    );
    assert!(!t.is_committed());
    assert_eq!(
        Error::TooManyBlocks { max: 1 }.class(),
        crate::ErrorClass::Type
    );
    let ok = Datatype::indexed(&lens[..n - 1], &displs[..n - 1], &i8t()).unwrap();
    ok.commit().unwrap();
    assert_eq!(ok.flat().unwrap().runs().len(), MAX_FLAT_BLOCKS);
}

#[test]
fn strided_data_is_one_run_whatever_its_count() {
    // Every other byte, 2^22 times (more blocks than MAX_FLAT_BLOCKS).
    let t = Datatype::vector(1 << 22, 1, 2, &i8t()).unwrap();
    t.commit().unwrap();
    assert_eq!(
        t.flat().unwrap().runs(),
        &[Run {
            disp: 0,
            len: 1,
            count: 1 << 22,
            stride: 2
        }]
    );
    let src: Vec<u8> = (0..(1u32 << 23)).map(|i| i as u8).collect();
    let mut packed = vec![0u8; t.pack_size(1).unwrap()];
    assert_eq!(t.pack_part(&src, 1, 0, &mut packed).unwrap(), 1 << 22);
    assert!(packed.iter().enumerate().all(|(i, &b)| b == (2 * i) as u8));
    // A vector of vectors whose outer stride continues the inner one is
    // one run too; one that does not is one run per outer block.
    let f = Datatype::basic(BasicType::F64);
    let inner = Datatype::vector(4, 1, 3, &f).unwrap();
    let cont = Datatype::hvector(5, 1, 4 * 24, &inner).unwrap();
    cont.commit().unwrap();
    assert_eq!(cont.flat().unwrap().runs().len(), 1);
    let rows = Datatype::hvector(5, 1, 1000, &inner).unwrap();
    rows.commit().unwrap();
    assert_eq!(
        rows.flat().unwrap().runs()[1],
        Run {
            disp: 1000,
            len: 8,
            count: 4,
            stride: 24
        }
    );
    assert_eq!(rows.flat().unwrap().runs().len(), 5);
}

#[test]
fn freed_datatype_still_works_through_a_clone() {
    // MPI_Type_free while an operation (here: a clone held by it) uses it.
    let op_handle = {
        let user = Datatype::vector(2, 1, 2, &Datatype::contiguous(2, &i8t()).unwrap()).unwrap();
        user.commit().unwrap();
        let op = user.clone();
        drop(user); // the user's MPI_Type_free
        op
    };
    let mut out = [0u8; 4];
    assert_eq!(
        op_handle.pack_part(&[1, 2, 3, 4, 5, 6], 1, 0, &mut out),
        Ok(4)
    );
    assert_eq!(out, [1, 2, 5, 6]);
}

#[test]
fn count_of_and_span() {
    let t = Datatype::contiguous(3, &i16t()).unwrap();
    assert_eq!(t.count_of(12), Some(2));
    assert_eq!(t.count_of(7), None);
    assert_eq!(
        Datatype::contiguous(0, &i8t()).unwrap().count_of(5),
        Some(0)
    );
    assert_eq!(t.span(2).unwrap(), (0, 12));
    assert_eq!(t.span(0).unwrap(), (0, 0));
}

#[test]
fn send_plan_three_cases() {
    let limits = PlanLimits {
        envelope_max: 16,
        packed_max: 64,
        part_size: 24,
    };
    let c = Datatype::contiguous(100, &i8t()).unwrap();
    c.commit().unwrap();
    assert_eq!(
        plan_send(&c, 2, &limits).unwrap(),
        SendPlan::Contiguous { start: 0, len: 200 }
    );
    let v = Datatype::vector(2, 1, 2, &i32t()).unwrap(); // 8 bytes, holes
    v.commit().unwrap();
    assert_eq!(
        plan_send(&v, 2, &limits).unwrap(),
        SendPlan::Envelope { len: 16 }
    );
    assert_eq!(
        plan_send(&v, 3, &limits).unwrap(),
        SendPlan::Packed { len: 24 }
    );
    assert_eq!(
        plan_send(&v, 8, &limits).unwrap(),
        SendPlan::Packed { len: 64 }
    );
    let p = plan_send(&v, 9, &limits).unwrap();
    assert_eq!(
        p,
        SendPlan::Pipelined {
            len: 72,
            part_size: 24
        }
    );
    let parts: Vec<_> = p.parts().map(|x| (x.offset, x.len)).collect();
    assert_eq!(parts, vec![(0, 24), (24, 24), (48, 24)]);
    let q = plan_send(&v, 10, &limits).unwrap();
    assert_eq!(
        q.parts().map(|x| x.len).collect::<Vec<_>>(),
        vec![24, 24, 24, 8]
    );
    assert_eq!(
        plan_send(&v, 0, &limits).unwrap(),
        SendPlan::Contiguous { start: 0, len: 0 }
    );
    assert_eq!(plan_send(&v, 0, &limits).unwrap().parts().count(), 0);
    let bad = PlanLimits {
        part_size: 0,
        ..limits
    };
    assert!(matches!(
        plan_send(&v, 1, &bad),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(
        plan_send(&Datatype::vector(2, 1, 2, &i8t()).unwrap(), 1, &limits),
        Err(Error::NotCommitted)
    );
}

#[test]
fn nesting_depth_is_bounded() {
    // Built and committed in a thread with the default 2 MiB stack: the
    // recursion of commit and drop fits.
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let mut t = i32t();
            for _ in 0..MAX_DEPTH - 1 {
                t = Datatype::contiguous(1, &t).unwrap();
            }
            t = Datatype::resized(&t, 0, 4).unwrap();
            t.commit().unwrap();
            assert_eq!(blocks(&t), vec![(0, 4)]);
            assert_eq!(
                Datatype::contiguous(1, &t).unwrap_err(),
                Error::TooDeep { max: MAX_DEPTH }
            );
            assert_eq!(
                Datatype::resized(&t, 0, 4).unwrap_err(),
                Error::TooDeep { max: MAX_DEPTH }
            );
            assert_eq!(
                Datatype::struct_type(&[1], &[0], &[t]).unwrap_err().class(),
                crate::ErrorClass::Type
            );
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Vectors of 4- and 8-byte elements with a stride of 1–5 elements (2–4
/// have copy loops of their own, `gather_fixed_stride`) pack, pack from an
/// offset inside a block, and unpack exactly as an element-by-element
/// loop does, writing no byte between the blocks.
#[test]
fn fixed_stride_vectors_pack_and_unpack_like_a_loop() {
    for (elem, basic) in [(4usize, BasicType::I32), (8, BasicType::F64)] {
        for k in 1..=5usize {
            for n in [1usize, 2, 3, 17, 1025] {
                let t = Datatype::vector(n as i64, 1, k as i64, &Datatype::basic(basic)).unwrap();
                t.commit().unwrap();
                let span = (n - 1) * k * elem + elem;
                let src: Vec<u8> = (0..span).map(|i| (i * 7 + 3) as u8).collect();
                let want: Vec<u8> = (0..n)
                    .flat_map(|i| src[i * k * elem..i * k * elem + elem].iter().copied())
                    .collect();
                let mut packed = vec![0u8; n * elem];
                let mut pos = 0;
                t.pack(&src, 1, &mut packed, &mut pos).unwrap();
                assert_eq!((pos, &packed), (n * elem, &want), "pack {elem} x {n} / {k}");
                let mut part = vec![0u8; n * elem - 3];
                assert_eq!(t.pack_part(&src, 1, 3, &mut part).unwrap(), n * elem - 3);
                assert_eq!(part[..], want[3..], "pack from 3, {elem} x {n} / {k}");
                let mut back = vec![0xeeu8; span];
                let mut pos = 0;
                t.unpack(&packed, &mut pos, &mut back, 1).unwrap();
                for (i, b) in back.iter().enumerate() {
                    let want = if i % (k * elem) < elem { src[i] } else { 0xee };
                    assert_eq!(*b, want, "unpack byte {i}, {elem} x {n} / {k}");
                }
            }
        }
    }
}
