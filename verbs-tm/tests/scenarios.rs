//! The 25 TM-SRQ scenarios (rdma-core's tag-matching documentation, the mlx5
//! provider and pyverbs' `test_tag_matching.py` as the source of each
//! expectation) against `soft::Sim`, one test each, named `sNN_...`.
//!
//! Scenario 18 (the software-first rules) is a rule of the driver, so its
//! test drives a `verbs_tm::Endpoint` over the simulated device; scenario 25
//! checks the no-hardware path of the `ibverbs` probe.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use tm_proto::{MatchSpec, Opcode, Rvh, Source, Tag, TagLayout, Tmh};
use verbs_tm::soft::{Sim, SoftConfig};
use verbs_tm::verbs::*;
use verbs_tm::{Error, Provider};

const FULL: u64 = u64::MAX;

fn ops(wcs: &[Wc]) -> Vec<WcOpcode> {
    wcs.iter().map(|w| w.opcode).collect()
}

#[test]
fn s01_create_validate() {
    let mut d = Sim::new(SoftConfig::small());
    let ext = d.create_cq(&tm_cq_attr(64)).unwrap();
    let plain = d
        .create_cq(&CqInitAttr {
            cqe: 64,
            wc_flags: 0,
            extended: false,
        })
        .unwrap();
    let caps = d.query_device().unwrap().tm;
    assert!(caps.supported());
    // Good: TYPE|PD|CQ|TM, extended CQ, max_num_tags = caps.
    let mut good = SrqInitAttr::tm(ext, 64, caps.max_num_tags, caps.max_ops);
    let srq = d.create_srq(&mut good).unwrap();
    assert!(
        good.max_wr >= 64 && good.max_sge >= 1,
        "granted values written back"
    );
    let einval = |d: &mut Sim, mut a: SrqInitAttr| {
        assert_eq!(
            d.create_srq(&mut a).unwrap_err().errno(),
            Some(errno::EINVAL),
            "{a:?}"
        );
    };
    let base = SrqInitAttr::tm(ext, 64, caps.max_num_tags, caps.max_ops);
    einval(
        &mut d,
        SrqInitAttr {
            comp_mask: base.comp_mask & !IBV_SRQ_INIT_ATTR_CQ,
            ..base
        },
    );
    einval(
        &mut d,
        SrqInitAttr {
            comp_mask: base.comp_mask & !IBV_SRQ_INIT_ATTR_TM,
            ..base
        },
    );
    einval(&mut d, SrqInitAttr::tm(ext, 64, 0, caps.max_ops));
    einval(
        &mut d,
        SrqInitAttr::tm(ext, 64, caps.max_num_tags + 1, caps.max_ops),
    );
    einval(
        &mut d,
        SrqInitAttr::tm(plain, 64, caps.max_num_tags, caps.max_ops),
    );
    // No TYPE bit: a basic SRQ, silently; list ops on it are EINVAL.
    let mut basic = SrqInitAttr {
        comp_mask: base.comp_mask & !IBV_SRQ_INIT_ATTR_TYPE,
        ..base
    };
    let b = d.create_srq(&mut basic).unwrap();
    let mut wrs = [OpsWr::sync(1, 0)];
    assert_eq!(
        d.post_srq_ops(b, &mut wrs).unwrap_err(),
        Error::PostOps {
            bad_wr: 0,
            errno: errno::EINVAL
        }
    );
    assert!(d.tm_state(b).is_none() && d.tm_state(srq).is_some());
    // Destroying an SRQ with a QP attached: EBUSY.
    let qp = d
        .create_qp(&QpInitAttr {
            send_cq: ext,
            recv_cq: ext,
            srq: Some(srq),
            max_send_wr: 4,
            max_send_sge: 1,
        })
        .unwrap();
    assert_eq!(d.destroy_srq(srq).unwrap_err().errno(), Some(errno::EBUSY));
    d.destroy_qp(qp).unwrap();
    d.destroy_srq(srq).unwrap();
}

#[test]
fn s02_eager_expected() {
    let mut r = Rig::new(SoftConfig::small());
    let bufs: Vec<_> = (1..=9).map(|_| r.buffer(64)).collect();
    let mut add_wr = Vec::new();
    for (i, b) in bufs.iter().enumerate() {
        let tag = i as u64 + 1;
        add_wr.push(r.add(b, tag, tag, 0xffff, Some(0)).0);
    }
    assert_eq!(r.exec(usize::MAX), 9);
    let adds = r.poll();
    assert_eq!(adds.len(), 9);
    for (w, id) in adds.iter().zip(&add_wr) {
        assert_eq!(
            (w.opcode, w.status, w.wr_id, w.wc_flags),
            (WcOpcode::TM_ADD, WcStatus::SUCCESS, *id, 0)
        );
    }
    for tag in (1..=9u64).rev() {
        r.send_eager(0, tag, &[tag as u8; 20]);
    }
    assert_eq!(r.deliver(usize::MAX), 9);
    let got = r.poll();
    assert_eq!(got.len(), 9);
    for (w, tag) in got.iter().zip((1..=9u64).rev()) {
        assert_eq!(w.opcode, WcOpcode::TM_RECV);
        assert_eq!(w.wc_flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
        assert_eq!((w.wr_id, w.tm_info.tag, w.byte_len), (tag, tag, 20));
        assert_eq!(
            r.read_buf(&bufs[tag as usize - 1], 20),
            vec![tag as u8; 20],
            "no TMH in the buffer"
        );
    }
    assert!(r.rx.misuse().is_empty());
}

#[test]
fn s03_eager_unexpected() {
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 0x1234, b"unexpected payload");
    r.deliver(1);
    let w = r.poll();
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].opcode, w[0].wc_flags, w[0].wr_id),
        (WcOpcode::TM_RECV, 0, 0)
    );
    assert_eq!(w[0].tm_info, TmInfo::default());
    assert_eq!(w[0].byte_len as usize, 16 + 18);
    let whole = r.srq_bytes(0, 34);
    assert_eq!(
        &whole[..16],
        &tmh_bytes(Opcode::Eager, 0x55, 0x1234)[..],
        "TMH included"
    );
    assert_eq!(&whole[16..], b"unexpected payload");
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, 1);
    for cnt in 1..=3u16 {
        let id = r.sync(cnt, true);
        r.exec(1);
        let w = r.poll();
        assert_eq!(
            (w[0].opcode, w[0].wr_id, w[0].wc_flags),
            (WcOpcode::TM_SYNC, id, 0)
        );
        assert_eq!(r.rx.tm_state(r.srq).unwrap().s, cnt);
    }
}

#[test]
fn s04_no_tag() {
    let mut r = Rig::new(SoftConfig::small());
    r.send_raw(0, &[0, 7, 7, 7, 9], None);
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].opcode, w[0].wc_flags, w[0].byte_len),
        (WcOpcode::TM_NO_TAG, 0, 5)
    );
    assert_eq!(r.srq_bytes(0, 5), vec![0, 7, 7, 7, 9], "whole message");
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, 0, "H unchanged");
    let b = r.buffer(32);
    r.add(&b, 1, 5, FULL, Some(0));
    r.exec(1);
    let w = r.poll();
    assert_eq!(w[0].wc_flags & IBV_WC_TM_SYNC_REQ, 0);
    assert_eq!(r.rx.tm_state(r.srq).unwrap().list, vec![(0, true)]);
}

#[test]
fn s05_hw_rendezvous() {
    let mut r = Rig::new(SoftConfig::small());
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let b = r.buffer(1000);
    r.add(&b, 77, 0xabc, FULL, Some(0));
    r.exec(1);
    r.poll();
    let (_mr, req) = r.send_rndv(0, 0xabc, 42, &data);
    // Pad the request to 64 bytes of metadata-free request: 32 is what we sent.
    assert_eq!(req.len(), 32);
    let wqes_before = r.rx.srq_wqes(r.srq);
    r.deliver(1);
    let m = r.poll();
    assert_eq!(m.len(), 1);
    assert_eq!(
        (m[0].opcode, m[0].wc_flags, m[0].wr_id),
        (WcOpcode::TM_RECV, IBV_WC_TM_MATCH, 77)
    );
    assert_eq!((m[0].tm_info.tag, m[0].tm_info.priv_), (0xabc, 42));
    // The device READs from the sender and then sends the FIN.
    assert_eq!(
        r.tx.deliver(r.sqps[0], 1),
        1,
        "READ request served by the sender's device"
    );
    assert_eq!(r.deliver(1), 1, "READ response");
    let d = r.poll();
    assert_eq!(d.len(), 1);
    assert_eq!(
        (d[0].wc_flags, d[0].wr_id, d[0].byte_len),
        (IBV_WC_TM_DATA_VALID, 77, 1000)
    );
    assert_eq!(d[0].tm_info, TmInfo::default());
    assert_eq!(r.read_buf(&b, 1000), data);
    assert_eq!(r.rx.srq_wqes(r.srq), wqes_before, "no SRQ WQE used");
    r.tx.deliver(r.sqps[0], 1);
    let fin = r.poll_tx();
    assert_eq!(fin.len(), 1);
    assert_eq!(fin[0].byte_len, 32);
    let mut f = vec![0; 32];
    r.tx.mr_read(&r.tx_srq_mr, 0, &mut f).unwrap();
    let t = Tmh::decode(&f).unwrap();
    assert_eq!((t.opcode, t.app_ctx, t.tag), (Opcode::Fin, 42, 0xabc));
    assert_eq!(&f[16..], &req[16..32], "RVH copy");
}

#[test]
fn s06_m1_m2_b1_race() {
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 5, b"m1");
    r.deliver(1); // m1 unexpected: H = 1
    let b1 = r.buffer(16);
    let (_, h) = r.add(&b1, 1, 5, FULL, Some(0)); // posted with the stale count 0
    r.exec(1);
    r.send_eager(0, 5, b"m2");
    r.deliver(1);
    let w = r.poll();
    assert_eq!(w.len(), 3);
    assert_eq!(
        (w[0].opcode, w[0].wc_flags),
        (WcOpcode::TM_RECV, 0),
        "m1 unexpected"
    );
    assert_eq!(w[1].opcode, WcOpcode::TM_ADD);
    assert!(w[1].has(IBV_WC_TM_SYNC_REQ), "b1 pending: SYNC_REQ");
    assert_eq!(
        (w[2].opcode, w[2].wc_flags),
        (WcOpcode::TM_RECV, 0),
        "m2 must not match pending b1"
    );
    // Software matches m1 to b1 and withdraws b1, then syncs.
    r.del(h, Some(1), true);
    r.sync(2, true);
    r.exec(2);
    let w = r.poll();
    assert_eq!(
        (w[0].opcode, w[0].status),
        (WcOpcode::TM_DEL, WcStatus::SUCCESS)
    );
    let st = r.rx.tm_state(r.srq).unwrap();
    assert_eq!((st.h, st.s), (2, 2));
    assert!(st.list.is_empty());
    assert_eq!(
        &r.srq_bytes(1, 18)[16..],
        b"m2",
        "m2 in the second SRQ buffer for the SW queue"
    );
}

#[test]
fn s07_pending_to_active() {
    for strict in [false, true] {
        let mut r = Rig::new(SoftConfig::small().strict(strict));
        // An entry added in phase before m1: active.
        let early = r.buffer(16);
        r.add(&early, 100, 9, FULL, Some(0));
        r.exec(1);
        r.send_eager(0, 7, b"m1"); // another tag: unexpected, H = 1
        r.deliver(1);
        let b1 = r.buffer(16);
        r.add(&b1, 1, 5, FULL, Some(0)); // stale count
        r.exec(1);
        assert_eq!(
            r.rx.tm_state(r.srq).unwrap().list,
            vec![(0, true), (1, false)]
        );
        // The early entry matches while out of sync (default) or not (strict).
        r.send_eager(0, 9, b"e");
        r.deliver(1);
        let w = r.poll();
        let last = w.last().unwrap();
        if strict {
            assert_eq!(last.wc_flags, 0, "strict: no matching at all while S != H");
        } else {
            assert_eq!(last.wc_flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
        }
        let h = r.rx.tm_state(r.srq).unwrap().h;
        r.sync(h, true);
        r.exec(1);
        assert!(r.rx.tm_state(r.srq).unwrap().list.iter().all(|(_, a)| *a));
        r.send_eager(0, 5, b"m2");
        r.deliver(1);
        let w = r.poll();
        let m = w.iter().find(|w| w.opcode == WcOpcode::TM_RECV).unwrap();
        assert_eq!(
            (m.wr_id, m.wc_flags),
            (1, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)
        );
    }
}

#[test]
fn s08_in_phase_add() {
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 3, b"x");
    r.deliver(1);
    r.poll();
    let b = r.buffer(16);
    r.add(&b, 8, 4, FULL, Some(1));
    r.exec(1);
    let w = r.poll();
    assert_eq!(
        (w[0].opcode, w[0].wc_flags),
        (WcOpcode::TM_ADD, 0),
        "no SYNC_REQ"
    );
    r.send_eager(0, 4, b"y");
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].wr_id, w[0].wc_flags),
        (8, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)
    );
}

#[test]
fn s09_order_and_masks() {
    let mut r = Rig::new(SoftConfig::small());
    let (b1, b2) = (r.buffer(16), r.buffer(16));
    r.add(&b1, 1, 5, FULL, Some(0));
    r.add(&b2, 2, 0, 0, Some(0));
    r.exec(2);
    r.poll();
    r.send_eager(0, 7, b"seven");
    r.send_eager(0, 5, b"five");
    r.deliver(2);
    let w = r.poll();
    assert_eq!((w[0].wr_id, w[0].tm_info.tag), (2, 7));
    assert_eq!((w[1].wr_id, w[1].tm_info.tag), (1, 5));
    // Reverse posting order: the mask-0 entry is first and takes 5.
    let (b3, b4) = (r.buffer(16), r.buffer(16));
    r.add(&b4, 4, 0, 0, Some(0));
    r.add(&b3, 3, 5, FULL, Some(0));
    r.exec(2);
    r.poll();
    r.send_eager(0, 5, b"five");
    r.deliver(1);
    assert_eq!(r.poll()[0].wr_id, 4);
    // Bits outside the mask are ignored on both sides.
    let b5 = r.buffer(16);
    r.add(&b5, 5, 0xff00_0000_0000_0005, 0xff, Some(0));
    r.exec(1);
    r.poll();
    r.send_eager(0, 0x1234_0005, b"m");
    r.deliver(1);
    assert_eq!(r.poll()[0].wr_id, 5);
}

#[test]
fn s10_del_success() {
    let mut r = Rig::new(SoftConfig::small().with_tags(1, 16));
    let b = r.buffer(16);
    let (_, h) = r.add(&b, 1, 5, FULL, Some(0));
    let del = r.del(h, Some(0), true);
    r.exec(2);
    // Before the DEL completion is polled, the single slot is still held.
    let b2 = r.buffer(16);
    let sge = [b2.sge(0, 16).unwrap()];
    let add = OpsWr::add(
        1,
        0,
        TmAdd {
            recv_wr_id: 2,
            sg_list: &sge,
            tag: 6,
            mask: FULL,
        },
    );
    assert_eq!(
        r.post_op(add).unwrap_err(),
        Error::PostOps {
            bad_wr: 0,
            errno: errno::ENOMEM
        }
    );
    let w = r.poll();
    assert_eq!(ops(&w), vec![WcOpcode::TM_ADD, WcOpcode::TM_DEL]);
    assert_eq!((w[1].wr_id, w[1].status), (del, WcStatus::SUCCESS));
    r.send_eager(0, 5, b"late");
    r.deliver(1);
    assert_eq!(
        r.poll()[0].wc_flags,
        0,
        "deleted: the message goes unexpected"
    );
    // The handle comes back only after the DEL completion was polled; the
    // free list is FIFO, so the next ADD gets the other slot first.
    let (_, h2) = r.add(&b2, 2, 6, FULL, Some(1));
    assert_ne!(h2, h);
    assert_eq!(r.rx.tm_state(r.srq).unwrap().live_slots, 1);
}

#[test]
fn s11_del_race() {
    let mut r = Rig::new(SoftConfig::small().with_tags(1, 16));
    let b = r.buffer(16);
    let (_, h) = r.add(&b, 1, 5, FULL, Some(0));
    r.exec(1);
    r.del(h, Some(0), true);
    r.send_eager(0, 5, b"won");
    r.deliver(1); // consumed before the DEL executes
    r.exec(1);
    let w = r.poll();
    assert_eq!(
        ops(&w),
        vec![WcOpcode::TM_ADD, WcOpcode::TM_RECV, WcOpcode::TM_DEL]
    );
    assert_eq!(w[1].wc_flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
    assert_eq!(w[2].status, WcStatus::TM_ERR);
    assert_eq!(
        r.rx.tm_state(r.srq).unwrap().live_slots,
        0,
        "freed after both were polled"
    );
    assert!(r.rx.misuse().is_empty());
}

#[test]
fn s12_list_full() {
    let mut r = Rig::new(SoftConfig::small().with_tags(2, 16));
    let bufs: Vec<_> = (0..3).map(|_| r.buffer(16)).collect();
    r.add(&bufs[0], 0, 1, FULL, Some(0));
    let s0 = [bufs[1].sge(0, 16).unwrap()];
    let s1 = [bufs[2].sge(0, 16).unwrap()];
    let mut chain = [
        OpsWr::add(
            10,
            0,
            TmAdd {
                recv_wr_id: 1,
                sg_list: &s0,
                tag: 2,
                mask: FULL,
            },
        ),
        OpsWr::add(
            11,
            0,
            TmAdd {
                recv_wr_id: 2,
                sg_list: &s1,
                tag: 3,
                mask: FULL,
            },
        ),
        OpsWr::sync(12, 0),
    ];
    chain[0].handle = 999;
    assert_eq!(
        r.rx.post_srq_ops(r.srq, &mut chain).unwrap_err(),
        Error::PostOps {
            bad_wr: 1,
            errno: errno::ENOMEM
        }
    );
    assert_ne!(
        chain[0].handle, 999,
        "the first is posted, its handle written"
    );
    let st = r.rx.tm_state(r.srq).unwrap();
    assert_eq!(
        (st.queued_ops, st.live_slots),
        (2, 2),
        "the SYNC after the failure is not posted"
    );
    r.exec(2);
    r.poll();
    r.send_eager(0, 1, b"a");
    r.deliver(1);
    r.poll();
    let mut again = [OpsWr::add(
        13,
        0,
        TmAdd {
            recv_wr_id: 2,
            sg_list: &s1,
            tag: 3,
            mask: FULL,
        },
    )];
    r.rx.post_srq_ops(r.srq, &mut again).unwrap();
}

#[test]
fn s13_max_ops() {
    let mut r = Rig::new(SoftConfig::small().with_tags(15, 4));
    for _ in 0..3 {
        r.sync(0, false);
    }
    let signaled = r.sync(0, true);
    let mut one = [OpsWr::sync(1, 0)];
    assert_eq!(
        r.rx.post_srq_ops(r.srq, &mut one).unwrap_err(),
        Error::PostOps {
            bad_wr: 0,
            errno: errno::ENOMEM
        }
    );
    r.exec(4);
    // Executed but not yet polled: still full.
    assert!(r.rx.post_srq_ops(r.srq, &mut one).is_err());
    let w = r.poll();
    assert_eq!((w.len(), w[0].wr_id), (1, signaled));
    r.rx.post_srq_ops(r.srq, &mut one).unwrap();
    // A queue of unsignaled ops only never drains.
    let mut r = Rig::new(SoftConfig::small().with_tags(15, 2));
    r.sync(0, false);
    r.sync(0, false);
    r.exec(2);
    assert!(r.poll().is_empty());
    assert_eq!(r.rx.tm_state(r.srq).unwrap().outstanding_ops, 2);
    assert!(r.rx.post_srq_ops(r.srq, &mut one).is_err());
}

#[test]
fn s14_multi_packet_eager() {
    let mut r = Rig::new(SoftConfig::small().with_mtu(256));
    let b = r.buffer(1024);
    r.add(&b, 3, 9, FULL, Some(0));
    r.exec(1);
    r.poll();
    let payload: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    r.send_eager_imm(0, 9, &payload, Some(0xfeed));
    r.deliver(1);
    let w = r.poll();
    assert_eq!(w.len(), 1);
    assert_eq!(
        (w[0].wc_flags, w[0].wr_id, w[0].tm_info.tag),
        (IBV_WC_TM_MATCH, 3, 9)
    );
    assert_eq!(r.rx.late_data(), 1);
    r.rx.complete_data(1);
    let w = r.poll();
    assert_eq!(w[0].wc_flags, IBV_WC_TM_DATA_VALID | IBV_WC_WITH_IMM);
    assert_eq!(
        (w[0].wr_id, w[0].byte_len, w[0].imm_data),
        (3, 1000, 0xfeed)
    );
    assert_eq!(w[0].tm_info, TmInfo::default());
    assert_eq!(r.read_buf(&b, 1000), payload);
}

#[test]
fn s15_data_valid_may_lag() {
    let mut r = Rig::new(SoftConfig::small());
    let (b1, b2) = (r.buffer(512), r.buffer(64));
    r.add(&b1, 1, 1, FULL, Some(0));
    r.add(&b2, 2, 2, FULL, Some(0));
    r.exec(2);
    r.poll();
    let (_mr, _) = r.send_rndv(0, 1, 1, &[1; 512]);
    r.send_eager(0, 2, b"eager");
    r.deliver(2);
    let w = r.poll();
    assert_eq!(w.len(), 2);
    assert_eq!((w[0].wr_id, w[0].wc_flags), (1, IBV_WC_TM_MATCH));
    assert_eq!(
        (w[1].wr_id, w[1].wc_flags),
        (2, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)
    );
    r.tx.deliver(r.sqps[0], 1);
    r.deliver(1);
    let w = r.poll();
    assert_eq!((w[0].wr_id, w[0].wc_flags), (1, IBV_WC_TM_DATA_VALID));
}

#[test]
fn s16_rndv_buffer_too_small() {
    let mut r = Rig::new(SoftConfig::small());
    let b = r.buffer(40);
    r.add(&b, 6, 0x77, FULL, Some(0));
    r.exec(1);
    r.poll();
    let data = vec![3u8; 300];
    let (mr, req) = r.send_rndv(0, 0x77, 5, &data);
    r.deliver(1);
    let w = r.poll();
    assert_eq!(w.len(), 1, "one completion");
    assert_eq!(w[0].status, WcStatus::TM_RNDV_INCOMPLETE);
    assert_eq!(w[0].wc_flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
    assert_eq!(w[0].byte_len, 32);
    assert_eq!(r.read_buf(&b, 32), req, "TMH|RVH in the tagged buffer");
    assert_eq!(r.tx.in_flight(r.sqps[0]), 0, "no device READ or FIN");
    // Software finishes: a READ into a bigger buffer, then a FIN.
    let rvh = Rvh::decode(&req[16..]).unwrap();
    assert_eq!((rvh.rkey, rvh.len), (mr.rkey(), 300));
    let dst = r.rx.reg_mr(vec![0; 300], IBV_ACCESS_LOCAL_WRITE).unwrap();
    let sge = [dst.sge(0, 300).unwrap()];
    r.rx.post_send(
        r.rqps[0],
        &SendWr {
            wr_id: 31,
            opcode: WrOpcode::RDMA_READ,
            send_flags: IBV_SEND_SIGNALED,
            sg_list: &sge,
            imm_data: 0,
            remote_addr: rvh.va,
            rkey: rvh.rkey,
        },
    )
    .unwrap();
    r.tx.deliver(r.sqps[0], 1);
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].opcode, w[0].wr_id, w[0].status, w[0].byte_len),
        (WcOpcode::RDMA_READ, 31, WcStatus::SUCCESS, 300)
    );
    assert_eq!(r.read_buf(&dst, 300), data);
}

#[test]
fn s17_unexpected_rndv() {
    let mut r = Rig::new(SoftConfig::small());
    let data: Vec<u8> = (0..200u8).collect();
    let (_mr, req) = r.send_rndv(0, 0x99, 11, &data);
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].opcode, w[0].wc_flags, w[0].byte_len),
        (WcOpcode::TM_RECV, 0, 32)
    );
    assert_eq!(r.srq_bytes(0, 32), req, "TMH|RVH in the SRQ buffer");
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, 1);
    // A receive posted later is matched in software: READ, then FIN.
    let rvh = Rvh::decode(&req[16..]).unwrap();
    let dst = r.rx.reg_mr(vec![0; 200], IBV_ACCESS_LOCAL_WRITE).unwrap();
    let sge = [dst.sge(0, 200).unwrap()];
    r.rx.post_send(
        r.rqps[0],
        &SendWr {
            wr_id: 1,
            opcode: WrOpcode::RDMA_READ,
            send_flags: IBV_SEND_SIGNALED,
            sg_list: &sge,
            imm_data: 0,
            remote_addr: rvh.va,
            rkey: rvh.rkey,
        },
    )
    .unwrap();
    r.tx.deliver(r.sqps[0], 1);
    r.deliver(1);
    assert_eq!(r.poll()[0].opcode, WcOpcode::RDMA_READ);
    assert_eq!(r.read_buf(&dst, 200), data);
    assert!(
        r.poll_tx().is_empty(),
        "the sender's op is not complete before the FIN"
    );
    let tmh = Tmh::decode(&req).unwrap();
    let mut fin = tmh.fin_reply().to_bytes().to_vec();
    fin.extend_from_slice(&rvh.to_bytes());
    let fmr = r.rx.reg_mr(fin, IBV_ACCESS_LOCAL_WRITE).unwrap();
    let fs = [fmr.sge(0, 32).unwrap()];
    r.rx.post_send(
        r.rqps[0],
        &SendWr {
            wr_id: 2,
            opcode: WrOpcode::SEND,
            send_flags: 0,
            sg_list: &fs,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
        },
    )
    .unwrap();
    r.tx.deliver(r.sqps[0], 1);
    let w = r.poll_tx();
    assert_eq!((w.len(), w[0].byte_len), (1, 32), "FIN at the sender");
    // The count includes the unexpected RNDV: a SYNC(1) brings S to H.
    r.sync(1, true);
    r.exec(1);
    let st = r.rx.tm_state(r.srq).unwrap();
    assert_eq!((st.h, st.s), (1, 1));
}

#[test]

fn s18_sw_first_rules() {
    use verbs_tm::{EndpointConfig, SendMode};
    let layout = TagLayout::DEFAULT;
    let (mut a, mut b) =
        verbs_tm::testing::sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    // A message queued in software: a receive posted for it takes it there,
    // without an ADD.
    let _s = a
        .isend(1, 4, 0, b"first".to_vec(), SendMode::Standard)
        .unwrap();
    verbs_tm::testing::settle(&mut [&mut a, &mut b]);
    assert_eq!(b.unexpected_len(), 1);
    let adds = b.stats().offload.adds;
    let spec = MatchSpec {
        context_id: 0,
        source: Source::Rank(0),
        tag: Tag::Value(4),
    };
    let verbs_tm::RecvStart::Done(st, buf) = b.irecv(spec, vec![0; 64]).unwrap() else {
        panic!("the queued message must be taken at once");
    };
    assert_eq!((st.unwrap().len, &buf[..5]), (5, &b"first"[..]));
    verbs_tm::testing::settle(&mut [&mut a, &mut b]);
    assert_eq!(b.stats().offload.adds, adds, "no ADD posted");
    // A receive behind an older ANY_SOURCE one (not offloadable on this
    // per-peer engine) stays in software too.
    let any = MatchSpec {
        context_id: 0,
        source: Source::Any,
        tag: Tag::Value(8),
    };
    let pending = |s: verbs_tm::RecvStart| match s {
        verbs_tm::RecvStart::Pending(id) => id,
        other => panic!("{other:?}"),
    };
    let _w = pending(b.irecv(any, vec![0; 64]).unwrap());
    let exact = MatchSpec {
        context_id: 0,
        source: Source::Rank(0),
        tag: Tag::Value(8),
    };
    let e = pending(b.irecv(exact, vec![0; 64]).unwrap());
    assert!(!b.is_offloaded(e), "kept behind the wildcard");
    let other = MatchSpec {
        context_id: 0,
        source: Source::Rank(0),
        tag: Tag::Value(9),
    };
    let o = pending(b.irecv(other, vec![0; 64]).unwrap());
    assert!(b.is_offloaded(o), "a non-overlapping receive is offloaded");
    let _ = layout;
}

#[test]
fn s19_sixteen_bit_window() {
    let mut r = Rig::with_qps(SoftConfig::small(), 1, 8);
    let mut flagged_at = None;
    let mut count: u32 = 0;
    // 16384 unexpected messages and no ADD with TM_SYNC.
    for i in 1..=16_384u32 {
        r.send_eager(0, 1, b"");
        r.deliver(1);
        let w = r.poll();
        assert_eq!(w.len(), 1);
        if w[0].has(IBV_WC_TM_SYNC_REQ) && flagged_at.is_none() {
            flagged_at = Some(i);
        }
        r.post_srq_buf(w[0].wr_id as usize);
        count += 1;
    }
    assert_eq!(
        flagged_at,
        Some(16_384),
        "first when unexp_in - unexp_out > 0x3fff"
    );
    // Past 0xFFFF: counts wrap and activation still works.
    for _ in 0..(65_536 - 16_384 + 5) {
        r.send_eager(0, 1, b"");
        r.deliver(1);
        let w = r.poll();
        r.post_srq_buf(w[0].wr_id as usize);
        count += 1;
        if count % 8192 == 0 {
            r.sync(count as u16, false);
            r.sync(count as u16, true);
            r.exec(2);
            r.poll();
        }
    }
    let h = r.rx.tm_state(r.srq).unwrap().h;
    assert_eq!(h, (count % 65_536) as u16);
    assert!(h < 10, "wrapped: {h}");
    let b = r.buffer(16);
    r.add(&b, 5, 2, FULL, Some(count as u16));
    r.exec(1);
    assert_eq!(r.poll()[0].wc_flags, 0);
    r.send_eager(0, 2, b"hit");
    r.deliver(1);
    assert_eq!(r.poll()[0].wc_flags, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
}

#[test]
fn s20_sync_req_quirk() {
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 1, b"u");
    r.deliver(1);
    r.poll();
    r.sync(1, true);
    r.exec(1);
    r.poll();
    let b = r.buffer(16);
    r.add(&b, 1, 2, FULL, None); // no TM_SYNC: phase is the stale unexp_out
    r.exec(1);
    let w = r.poll();
    assert!(
        w[0].has(IBV_WC_TM_SYNC_REQ),
        "reported although the device is in phase"
    );
    assert_eq!(
        r.rx.tm_state(r.srq).unwrap().list,
        vec![(0, true)],
        "and the entry is active"
    );
    let b2 = r.buffer(16);
    r.add(&b2, 2, 3, FULL, Some(1));
    r.exec(1);
    assert_eq!(r.poll()[0].wc_flags, 0, "with TM_SYNC on the ADD it is not");
}

#[test]
fn s21_no_tag_and_fin_do_not_count() {
    let mut r = Rig::new(SoftConfig::small());
    let mut unexpected = 0u16;
    let fin = {
        let mut f = tmh_bytes(Opcode::Fin, 1, 1);
        f.extend_from_slice(&Rvh::default().to_bytes());
        f
    };
    for i in 0..12 {
        match i % 3 {
            0 => r.send_raw(0, &[0, 1, 2], None),
            1 => r.send_raw(0, &fin, None),
            _ => r.send_eager(0, 50 + i, b"e"),
        }
        r.deliver(1);
        for w in r.poll() {
            if w.opcode == WcOpcode::TM_RECV && w.wc_flags & IBV_WC_TM_MATCH == 0 {
                unexpected += 1;
            }
            r.post_srq_buf(w.wr_id as usize);
        }
    }
    assert_eq!(unexpected, 4);
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, unexpected);
    let b = r.buffer(16);
    r.add(&b, 1, 9, FULL, Some(unexpected));
    r.exec(1);
    assert_eq!(r.poll()[0].wc_flags, 0);
    assert_eq!(r.rx.tm_state(r.srq).unwrap().list, vec![(0, true)]);
}

#[test]
fn s22_unsignaled_del_misuse() {
    let mut r = Rig::new(SoftConfig::small());
    let b = r.buffer(16);
    let (_, h) = r.add(&b, 1, 5, FULL, Some(0));
    r.exec(1);
    r.poll();
    r.del(h, Some(0), false); // unsignaled DEL of an active entry
    r.send_eager(0, 5, b"race");
    r.deliver(1); // matched before the DEL executes
    r.exec(1);
    let w = r.poll();
    assert_eq!(w[0].status, WcStatus::GENERAL_ERR);
    let m = r.rx.misuse();
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(m[0].contains("unsignaled DEL"), "{m:?}");
    // An unsignaled DEL of a pending entry is fine.
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 7, b"u");
    r.deliver(1);
    let b = r.buffer(16);
    let (_, h) = r.add(&b, 1, 5, FULL, Some(0));
    r.exec(1);
    r.del(h, Some(1), false);
    r.send_eager(0, 5, b"m");
    r.deliver(1);
    r.exec(1);
    r.poll();
    assert!(r.rx.misuse().is_empty());
}

#[test]
fn s23_multi_qp_serialization() {
    let mut r = Rig::with_qps(SoftConfig::small(), 2, SRQ_WQES);
    let (b1, b2) = (r.buffer(16), r.buffer(16));
    r.add(&b1, 1, 0, 0, Some(0));
    r.add(&b2, 2, 0, 0, Some(0));
    r.exec(2);
    r.poll();
    r.send_eager(0, 10, b"qp0");
    r.send_eager(1, 11, b"qp1");
    // QP 1's message arrives first.
    r.deliver_on(1, 1);
    r.deliver_on(0, 1);
    let w = r.poll();
    assert_eq!(
        (w[0].wr_id, w[0].tm_info.tag),
        (1, 11),
        "earliest posted gets earliest arrival"
    );
    assert_eq!((w[1].wr_id, w[1].tm_info.tag), (2, 10));
    assert_eq!(w[0].qp_num, r.rx.qp_num(r.rqps[1]).unwrap());
}

#[test]
fn s24_limits_and_pass_through() {
    // No SRQ WQE: RNR, H unchanged until delivered.
    let mut r = Rig::with_qps(SoftConfig::small(), 1, 0);
    r.send_eager_imm(0, 1, b"rnr", Some(7));
    assert_eq!(r.deliver(1), 0);
    assert_eq!(r.rx.in_flight(r.rqps[0]), 1);
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, 0);
    r.post_srq_buf(0);
    assert_eq!(r.deliver(1), 1);
    let w = r.poll();
    assert_eq!(
        (w[0].wc_flags, w[0].imm_data),
        (IBV_WC_WITH_IMM, 7),
        "imm on unexpected"
    );
    assert_eq!(r.rx.tm_state(r.srq).unwrap().h, 1);
    assert!(r.rx.stats().rnr >= 1);
    // Eager payload larger than the tagged buffer: LOC_LEN_ERR, no overflow.
    let mut r = Rig::new(SoftConfig::small());
    let b = r.buffer(8);
    let guard = r.buffer(8);
    r.add(&b, 1, 3, FULL, Some(0));
    r.exec(1);
    r.poll();
    r.send_eager(0, 3, &[9; 20]);
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].status, w[0].wc_flags),
        (
            WcStatus::LOC_LEN_ERR,
            IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID
        )
    );
    assert_eq!(r.read_buf(&b, 8), vec![9; 8]);
    assert_eq!(r.read_buf(&guard, 8), vec![0; 8]);
    // Immediate data on an expected completion.
    let b = r.buffer(8);
    r.add(&b, 2, 4, FULL, Some(0));
    r.exec(1);
    r.poll();
    r.send_eager_imm(0, 4, b"ok", Some(0xabcd));
    r.deliver(1);
    let w = r.poll();
    assert_eq!(
        (w[0].wc_flags, w[0].imm_data),
        (
            IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID | IBV_WC_WITH_IMM,
            0xabcd
        )
    );
}

#[test]

fn s25_no_hardware_host() {
    // Without a TM-capable device (this machine has none, and a build
    // without the `ibverbs` feature has no hardware provider at all), the
    // probe reports why in one line and the software provider is chosen.
    let probe = verbs_tm::probe_hardware();
    let Err(Error::NoDevice { reason }) = &probe else {
        // A host with a ConnectX-5 or later: nothing to check here.
        println!("TM hardware present: {probe:?}");
        return;
    };
    assert!(!reason.is_empty() && !reason.contains('\n'), "{reason}");
    // And every emulator path still runs.
    let mut r = Rig::new(SoftConfig::small());
    r.send_eager(0, 1, b"x");
    assert_eq!(r.deliver(1), 1);
}
