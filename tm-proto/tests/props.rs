//! Property tests: round trips for every message kind, decode of arbitrary bytes
//! never panics (and is canonical), and tag/mask matching equals the MPI rule.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use proptest::prelude::*;
use tm_proto::{
    Envelope, Error, Limits, MatchSpec, Message, Opcode, Rvh, Source, Tag, TagLayout, Tmh,
};

fn arb_tmh(op: Opcode) -> impl Strategy<Value = Tmh> {
    (any::<[u8; 3]>(), any::<u32>(), any::<u64>()).prop_map(move |(reserved, app_ctx, tag)| Tmh {
        opcode: op,
        reserved,
        app_ctx,
        tag,
    })
}

fn arb_rvh() -> impl Strategy<Value = Rvh> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, len)| Rvh { va, rkey, len })
}

/// A message kind with its owned variable part.
#[derive(Debug, Clone)]
enum Owned {
    Eager(Tmh, Vec<u8>),
    Rndv(Tmh, Rvh, Vec<u8>),
    Fin(Tmh, Rvh),
    NoTag(Vec<u8>),
}

impl Owned {
    fn msg(&self) -> Message<'_> {
        match self {
            Owned::Eager(tmh, p) => Message::Eager {
                tmh: *tmh,
                payload: p,
            },
            Owned::Rndv(tmh, rvh, m) => Message::Rndv {
                tmh: *tmh,
                rvh: *rvh,
                metadata: m,
            },
            Owned::Fin(tmh, rvh) => Message::Fin {
                tmh: *tmh,
                rvh: *rvh,
            },
            Owned::NoTag(b) => Message::NoTag { body: b },
        }
    }
}

fn arb_message(max_rndv: usize) -> impl Strategy<Value = Owned> {
    let meta_max = max_rndv.saturating_sub(32);
    prop_oneof![
        (
            arb_tmh(Opcode::Eager),
            proptest::collection::vec(any::<u8>(), 0..200)
        )
            .prop_map(|(t, p)| Owned::Eager(t, p)),
        (
            arb_tmh(Opcode::Rndv),
            arb_rvh(),
            proptest::collection::vec(any::<u8>(), 0..=meta_max)
        )
            .prop_map(|(t, r, m)| Owned::Rndv(t, r, m)),
        (arb_tmh(Opcode::Fin), arb_rvh()).prop_map(|(t, r)| Owned::Fin(t, r)),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Owned::NoTag),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_kind_round_trips(max_rndv in 32usize..256, owned in arb_message(256)) {
        let limits = Limits { max_rndv_hdr_size: max_rndv };
        let msg = owned.msg();
        let mut buf = vec![0u8; msg.encoded_len() + 8];
        match msg.encode(&mut buf, limits) {
            Ok(n) => {
                prop_assert_eq!(n, msg.encoded_len());
                prop_assert_eq!(Message::decode(&buf[..n], limits), Ok(msg));
            }
            Err(e) => {
                // Only an over-long rendezvous request may be refused.
                let is_rndv = matches!(msg, Message::Rndv { .. });
                prop_assert!(is_rndv);
                prop_assert_eq!(e, Error::HeaderTooLong { len: msg.encoded_len(), max: max_rndv });
            }
        }
    }

    #[test]
    fn short_buffers_are_refused_not_overrun(owned in arb_message(64), cut in 1usize..64) {
        let msg = owned.msg();
        let len = msg.encoded_len();
        let short = len.saturating_sub(cut);
        let mut buf = vec![0u8; short];
        let is_too_small = matches!(msg.encode(&mut buf, Limits::MLX5), Err(Error::BufferTooSmall { need, got, .. }) if need == len && got == short);
        prop_assert!(is_too_small);
    }

    #[test]
    fn headers_round_trip(t in arb_tmh(Opcode::Eager), op in 0u8..4, r in arb_rvh()) {
        let t = Tmh { opcode: Opcode::try_from(op).unwrap(), ..t };
        prop_assert_eq!(Tmh::from_bytes(&t.to_bytes()), Ok(t));
        prop_assert_eq!(Rvh::from_bytes(&r.to_bytes()), r);
    }

    #[test]
    fn decode_of_arbitrary_bytes_never_panics_and_is_canonical(
        bytes in proptest::collection::vec(any::<u8>(), 0..160),
        first in 0u8..6,
        max_rndv in 0usize..128,
    ) {
        // Bias the opcode byte toward valid values so all decoders get exercised.
        let mut bytes = bytes;
        if let Some(b) = bytes.first_mut() { *b = first; }
        let limits = Limits { max_rndv_hdr_size: max_rndv };
        if let Ok(msg) = Message::decode(&bytes, limits) {
            // Whatever decodes re-encodes to exactly the same bytes.
            let mut out = vec![0u8; bytes.len()];
            prop_assert_eq!(msg.encode(&mut out, limits), Ok(bytes.len()));
            prop_assert_eq!(out, bytes);
        }
    }
}

// ---------------------------------------------------------------------------
// Tag/mask matching equals the MPI rule.

fn arb_layout() -> impl Strategy<Value = TagLayout> {
    (1u32..=32, 15u32..=32)
        .prop_filter("rank field must be 1..=32 bits", |(c, t)| {
            let r = 64 - c - t;
            (1..=32).contains(&r)
        })
        .prop_map(|(c, t)| TagLayout::new(c, 64 - c - t, t).unwrap())
}

/// Values from a tiny alphabet (so specs and envelopes collide often) plus the
/// field's extremes.
fn small(max: u32) -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..=max.min(3),
        Just(max),
        Just(max.saturating_sub(1)),
        0..=max
    ]
}

fn arb_case() -> impl Strategy<Value = (TagLayout, MatchSpec, Envelope)> {
    arb_layout().prop_flat_map(|l| {
        let spec = (
            small(l.max_context_id()),
            prop_oneof![
                Just(Source::Any),
                small(l.max_rank()).prop_map(Source::Rank)
            ],
            prop_oneof![Just(Tag::Any), small(l.max_tag()).prop_map(Tag::Value)],
        )
            .prop_map(|(context_id, source, tag)| MatchSpec {
                context_id,
                source,
                tag,
            });
        let env = (
            small(l.max_context_id()),
            small(l.max_rank()),
            small(l.max_tag()),
        )
            .prop_map(|(context_id, source, tag)| Envelope {
                context_id,
                source,
                tag,
            });
        (Just(l), spec, env)
    })
}

fn check_case(l: TagLayout, spec: MatchSpec, env: Envelope) -> Result<(), TestCaseError> {
    let tag = l.encode(env).unwrap();
    prop_assert_eq!(l.decode(tag), env);
    let entry = l.match_bits(spec).unwrap();
    prop_assert_eq!(
        entry.matches(tag),
        spec.matches(&env),
        "{:?} vs {:?}",
        spec,
        env
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn tag_mask_is_exactly_mpi_matching((l, spec, env) in arb_case()) {
        check_case(l, spec, env)?;
    }

    #[test]
    fn values_beyond_the_layout_are_errors(l in arb_layout(), over in 1u64..1000) {
        let too_big = |max: u32| u32::try_from(u64::from(max) + over).ok();
        if let Some(tag) = too_big(l.max_tag()) {
            let is_out_of_range = matches!(l.encode(Envelope { context_id: 0, source: 0, tag }), Err(Error::OutOfRange { .. }));
            prop_assert!(is_out_of_range);
        }
        if let Some(source) = too_big(l.max_rank()) {
            let is_out_of_range = matches!(l.match_bits(MatchSpec { context_id: 0, source: Source::Rank(source), tag: Tag::Any }), Err(Error::OutOfRange { .. }));
            prop_assert!(is_out_of_range);
        }
    }
}

proptest! {
    // Heavy: bounded by PROPTEST_CASES in `cargo xtask ci proptest`.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    #[ignore = "heavy: run by `cargo xtask ci proptest`"]
    fn heavy_tag_mask_is_exactly_mpi_matching((l, spec, env) in arb_case()) {
        check_case(l, spec, env)?;
    }

    #[test]
    #[ignore = "heavy: run by `cargo xtask ci proptest`"]
    fn heavy_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4096), max_rndv in 0usize..8192) {
        let _ = Message::decode(&bytes, Limits { max_rndv_hdr_size: max_rndv });
    }
}
