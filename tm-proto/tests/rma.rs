//! RMA packet codec: golden bytes, round trips, and no panic on random input.
#![allow(clippy::unwrap_used)] // tests may unwrap (CONTRIBUTING.md)

use proptest::prelude::*;
use tm_proto::rma::{AccOp, ElemType, RmaFlags, RmaHeader, RmaKind, RmaPacket};
use tm_proto::Error;

#[test]
fn golden_put_header() {
    let h = RmaHeader::new(RmaKind::Put, 0x0102_0304)
        .with_flags(RmaFlags::LOCK_EXCLUSIVE | RmaFlags::UNLOCK)
        .with_ids(0x1112_1314, 0x2122_2324)
        .with_target(0x3132_3334_3536_3738, 0x4142_4344)
        .with_acc(AccOp::Sum, ElemType::U64);
    let golden: [u8; 32] = [
        1, 1, 0x00, 0x06, // kind, acc_op, flags (LOCK_EXCLUSIVE | UNLOCK)
        0x01, 0x02, 0x03, 0x04, // win
        0x11, 0x12, 0x13, 0x14, // op_id
        0x21, 0x22, 0x23, 0x24, // sync_id
        0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, // disp
        0x41, 0x42, 0x43, 0x44, // len
        4, 0, 0, 0, // elem U64, reserved
    ];
    assert_eq!(h.to_bytes(), golden);
    assert_eq!(RmaHeader::decode(&golden).unwrap(), h);
}

#[test]
fn golden_flag_values_match_mpich() {
    assert_eq!(RmaFlags::LOCK_SHARED.0, 1);
    assert_eq!(RmaFlags::LOCK_EXCLUSIVE.0, 2);
    assert_eq!(RmaFlags::UNLOCK.0, 4);
    assert_eq!(RmaFlags::FLUSH.0, 8);
    assert_eq!(RmaFlags::DECR_AT_COUNTER.0, 32);
    assert_eq!(RmaFlags::ACK.0, 128);
    assert_eq!(RmaFlags::LOCK_GRANTED.0, 256);
    assert_eq!(RmaFlags::LOCK_QUEUED_DATA_QUEUED.0, 512);
    assert_eq!(RmaFlags::LOCK_QUEUED_DATA_DISCARDED.0, 1024);
    assert_eq!(RmaFlags::LOCK_DISCARDED.0, 2048);
    assert_eq!(RmaFlags::UNLOCK_NO_ACK.0, 4096);
    assert_eq!(RmaFlags::STREAM.0, 16384);
}

#[test]
fn golden_cas_packet() {
    let h = RmaHeader::new(RmaKind::CompareAndSwap, 2)
        .with_ids(9, 0)
        .with_target(16, 4)
        .with_acc(AccOp::Replace, ElemType::I32);
    let payload = [1, 0, 0, 0, 2, 0, 0, 0];
    let pkt = RmaPacket {
        header: h,
        payload: &payload,
    };
    let mut buf = [0u8; 40];
    assert_eq!(pkt.encode(&mut buf).unwrap(), 40);
    assert_eq!(&buf[..4], &[6, 0, 0, 0]);
    assert_eq!(&buf[24..29], &[0, 0, 0, 4, 1]);
    assert_eq!(&buf[32..], &payload);
    assert_eq!(RmaPacket::decode(&buf).unwrap(), pkt);
}

#[test]
fn errors_are_typed() {
    assert!(matches!(
        RmaHeader::decode(&[1; 10]),
        Err(Error::Truncated {
            need: 32,
            got: 10,
            ..
        })
    ));
    let mut b = RmaHeader::new(RmaKind::Ack, 0).to_bytes();
    b[0] = 0;
    assert_eq!(
        RmaHeader::decode(&b),
        Err(Error::UnknownCode {
            what: "packet kind",
            code: 0
        })
    );
    b[0] = 99;
    assert_eq!(
        RmaHeader::decode(&b),
        Err(Error::UnknownCode {
            what: "packet kind",
            code: 99
        })
    );
    let mut b = RmaHeader::new(RmaKind::Accumulate, 0).to_bytes();
    b[1] = 12;
    assert_eq!(
        RmaHeader::decode(&b),
        Err(Error::UnknownCode {
            what: "accumulate operation",
            code: 12
        })
    );
    let mut b = RmaHeader::new(RmaKind::Accumulate, 0).to_bytes();
    b[28] = 7;
    assert_eq!(
        RmaHeader::decode(&b),
        Err(Error::UnknownCode {
            what: "element type",
            code: 7
        })
    );
    // A put announcing 4 bytes with 3 present, and with 5 present.
    let h = RmaHeader::new(RmaKind::Put, 0).with_target(0, 4).to_bytes();
    let mut v = h.to_vec();
    v.extend_from_slice(&[1, 2, 3]);
    assert!(matches!(
        RmaPacket::decode(&v),
        Err(Error::Truncated {
            need: 4,
            got: 3,
            ..
        })
    ));
    v.extend_from_slice(&[4, 5]);
    assert!(matches!(
        RmaPacket::decode(&v),
        Err(Error::BadLength {
            expected: 36,
            got: 37,
            ..
        })
    ));
    // Encoding checks the payload length and the buffer size.
    let pkt = RmaPacket {
        header: RmaHeader::new(RmaKind::Put, 0).with_target(0, 2),
        payload: &[1],
    };
    assert!(matches!(
        pkt.encode(&mut [0; 64]),
        Err(Error::BadLength {
            expected: 2,
            got: 1,
            ..
        })
    ));
    let pkt = RmaPacket {
        header: RmaHeader::new(RmaKind::Flush, 0),
        payload: &[],
    };
    assert!(matches!(
        pkt.encode(&mut [0; 31]),
        Err(Error::BufferTooSmall {
            need: 32,
            got: 31,
            ..
        })
    ));
}

fn any_header() -> impl Strategy<Value = RmaHeader> {
    (
        prop::sample::select(RmaKind::ALL.to_vec()),
        prop::sample::select(AccOp::ALL.to_vec()),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        0u32..64,
        prop::sample::select(ElemType::ALL.to_vec()),
        any::<[u8; 3]>(),
    )
        .prop_map(
            |(kind, acc, flags, win, op, sync, disp, len, elem, reserved)| RmaHeader {
                kind,
                acc_op: acc,
                flags: RmaFlags(flags),
                win,
                op_id: op,
                sync_id: sync,
                disp,
                len,
                elem,
                reserved,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn header_round_trips(h in any_header()) {
        let mut buf = [0u8; 32];
        prop_assert_eq!(h.encode(&mut buf), Ok(32));
        prop_assert_eq!(RmaHeader::decode(&buf), Ok(h));
    }

    #[test]
    fn packet_round_trips(h in any_header(), fill in any::<u8>()) {
        let n = h.payload_len().unwrap();
        let payload = vec![fill; n];
        let pkt = RmaPacket { header: h, payload: &payload };
        let mut buf = vec![0u8; pkt.len()];
        prop_assert_eq!(pkt.encode(&mut buf), Ok(pkt.len()));
        prop_assert_eq!(RmaPacket::decode(&buf), Ok(pkt));
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
        // Ok or a typed error; and an Ok re-encodes to the same bytes.
        if let Ok(pkt) = RmaPacket::decode(&bytes) {
            let mut buf = vec![0u8; bytes.len()];
            prop_assert_eq!(pkt.encode(&mut buf), Ok(bytes.len()));
            prop_assert_eq!(buf, bytes.clone());
        }
        let _ = RmaHeader::decode(&bytes);
    }
}
