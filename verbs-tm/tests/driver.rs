//! The driver (`verbs_tm::Endpoint`) over `soft::Sim`, with the device
//! stepped by hand where the races of the TM-SRQ model are: a tag matched
//! while being deleted, a DEL failing with `IBV_WC_TM_ERR`, a cancel
//! against a consumption, a late `DATA_VALID`, `RNDV_INCOMPLETE`, an
//! unexpected rendezvous, a full tag list and a full command queue, and the
//! 16-bit phase counter wrapping past 0xFFFF.

#![allow(clippy::unwrap_used)]

use tm_proto::{MatchSpec, Source, Tag};
use verbs_tm::soft::{Sim, SoftConfig};
use verbs_tm::testing::{settle, sim_pair, take};
use verbs_tm::{
    CancelOutcome, Endpoint, EndpointConfig, Error, Finished, RecvStart, SendMode, SendStart,
    Status,
};

fn spec(source: Option<u32>, tag: Option<u32>) -> MatchSpec {
    MatchSpec {
        context_id: 0,
        source: source.map_or(Source::Any, Source::Rank),
        tag: tag.map_or(Tag::Any, Tag::Value),
    }
}

fn pending(s: RecvStart) -> u64 {
    match s {
        RecvStart::Pending(id) => id,
        RecvStart::Done(r, _) => panic!("finished at once: {r:?}"),
    }
}

fn payload(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn find(done: &[Finished], id: u64) -> &Finished {
    done.iter()
        .find(|f| f.id == id)
        .unwrap_or_else(|| panic!("request {id} not finished: {done:?}"))
}

fn ok_status(f: &Finished) -> Status {
    match &f.result {
        Ok(s) => *s,
        Err(e) => panic!("request {} failed: {e}", f.id),
    }
}

/// Steps of b's device.
fn exec(ep: &Endpoint<Sim>) -> usize {
    ep.provider().exec_ops(ep.srq(), usize::MAX)
}

fn deliver_to(ep: &Endpoint<Sim>, from: u32, n: usize) -> usize {
    let qp = ep.qp_of(from).unwrap();
    ep.provider().deliver(qp, n)
}

#[test]
fn eager_and_rendezvous_sizes_round_trip() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    for (i, &len) in [0usize, 1, 200, 256, 257, 1000, 70_000].iter().enumerate() {
        for mode in [SendMode::Standard, SendMode::Synchronous] {
            let tag = (i * 2 + usize::from(mode == SendMode::Synchronous)) as u32;
            let data = payload(tag as u8, len);
            let r = pending(b.irecv(spec(Some(0), Some(tag)), vec![0; len + 8]).unwrap());
            let s = a.isend(1, tag, 0, data.clone(), mode).unwrap();
            let eager = mode == SendMode::Standard && len <= a.eager_limit(1);
            let sid = match s {
                SendStart::Done(back) => {
                    assert!(eager, "only eager sends finish at once");
                    assert_eq!(back, data, "the data comes back");
                    None
                }
                SendStart::Pending(id) => {
                    assert!(!eager);
                    Some(id)
                }
            };
            settle(&mut [&mut a, &mut b]);
            let got = take(&mut b);
            let f = find(&got, r);
            let st = ok_status(f);
            assert_eq!((st.source, st.tag, st.len, st.msg_len), (0, tag, len, len));
            assert_eq!(&f.buf[..len], &data[..], "len {len} {mode:?}");
            if let Some(sid) = sid {
                let sent = take(&mut a);
                assert_eq!(
                    find(&sent, sid).buf,
                    data,
                    "rendezvous data back on the FIN"
                );
            }
        }
    }
    assert!(b.stats().device_receives > 0);
    assert!(b.provider().misuse().is_empty() && a.provider().misuse().is_empty());
}

#[test]
fn cancel_against_consumption_completes_normally() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let r = pending(b.irecv(spec(Some(0), Some(3)), vec![0; 128]).unwrap());
    assert!(b.is_offloaded(r));
    assert_eq!(exec(&b), 1, "ADD");
    b.progress().unwrap();
    assert_eq!(
        b.cancel_recv(r).unwrap(),
        CancelOutcome::Pending,
        "a DEL is posted"
    );
    let _ = a
        .isend(1, 3, 0, b"won".to_vec(), SendMode::Standard)
        .unwrap();
    // The message reaches the device before the DEL executes.
    assert_eq!(deliver_to(&b, 0, 1), 1);
    assert_eq!(exec(&b), 1, "DEL: TM_ERR");
    b.progress().unwrap();
    let got = take(&mut b);
    let st = ok_status(find(&got, r));
    assert!(!st.cancelled, "the cancel lost the race");
    assert_eq!(&find(&got, r).buf[..3], b"won");
    assert_eq!(b.stats().offload.delete_races, 1);
    // A cancel that wins hands the buffer back.
    let r2 = pending(b.irecv(spec(Some(0), Some(4)), vec![7; 100]).unwrap());
    exec(&b);
    b.progress().unwrap();
    assert_eq!(b.cancel_recv(r2).unwrap(), CancelOutcome::Pending);
    exec(&b);
    b.progress().unwrap();
    let got = take(&mut b);
    let f = find(&got, r2);
    assert!(ok_status(f).cancelled);
    assert_eq!(f.buf, vec![7; 100]);
    assert_eq!(b.cancel_recv(r2).unwrap(), CancelOutcome::Failed, "stale");
}

#[test]
fn matched_while_being_deleted_and_del_fails_with_tm_err() {
    // A self-send (a path around the device) wins an offloaded ANY_SOURCE
    // receive in software; the device consumes the same entry for a wire
    // message before the withdrawal's DEL executes.
    let cfg = EndpointConfig {
        any_source: true,
        ..EndpointConfig::for_tests()
    };
    let (mut a, mut b) = sim_pair(SoftConfig::small(), cfg);
    let r1 = pending(b.irecv(spec(None, Some(3)), vec![0; 128]).unwrap());
    assert!(b.is_offloaded(r1));
    exec(&b);
    b.progress().unwrap();
    let _ = a
        .isend(1, 3, 0, b"wire".to_vec(), SendMode::Standard)
        .unwrap();
    // The self message matches r1 in software: a DEL, the message parked.
    let s = b
        .isend(1, 3, 0, b"self".to_vec(), SendMode::Standard)
        .unwrap();
    assert!(matches!(s, SendStart::Done(_)));
    assert_eq!(
        deliver_to(&b, 1 - 1, 1),
        1,
        "the wire message hits the entry"
    );
    assert_eq!(exec(&b), 1, "the DEL fails: TM_ERR");
    b.progress().unwrap();
    let got = take(&mut b);
    let st = ok_status(find(&got, r1));
    assert_eq!((st.source, &find(&got, r1).buf[..4]), (0, &b"wire"[..]));
    // The parked self message was matched again: nothing left, so queued.
    assert_eq!(b.unexpected_len(), 1);
    let mut buf = [0u8; 8];
    let st = b
        .recv_now(spec(Some(1), Some(3)), &mut buf)
        .unwrap()
        .unwrap();
    assert_eq!((st.source, &buf[..4]), (1, &b"self"[..]));
    assert_eq!(b.stats().offload.delete_races, 1);
    assert!(b.provider().misuse().is_empty());
}

#[test]
fn late_data_valid_holds_the_completion() {
    let soft = SoftConfig::small().with_mtu(128);
    let (mut a, mut b) = sim_pair(soft, EndpointConfig::for_tests());
    let big = pending(b.irecv(spec(Some(0), Some(1)), vec![0; 250]).unwrap());
    let small = pending(b.irecv(spec(Some(0), Some(2)), vec![0; 100]).unwrap());
    exec(&b);
    b.progress().unwrap();
    let _ = a
        .isend(1, 1, 0, payload(1, 240), SendMode::Standard)
        .unwrap();
    let _ = a
        .isend(1, 2, 0, payload(2, 20), SendMode::Standard)
        .unwrap();
    deliver_to(&b, 0, 2);
    b.progress().unwrap();
    let got = take(&mut b);
    assert!(got.iter().all(|f| f.id != big), "held until DATA_VALID");
    assert_eq!(ok_status(find(&got, small)).len, 20);
    assert_eq!(b.provider().complete_data(1), 1);
    b.progress().unwrap();
    let got = take(&mut b);
    assert_eq!(ok_status(find(&got, big)).len, 240);
    assert_eq!(find(&got, big).buf[..240], payload(1, 240)[..]);
}

#[test]
fn rndv_incomplete_is_read_in_software_and_truncated() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let r = pending(b.irecv(spec(Some(0), Some(9)), vec![0; 100]).unwrap());
    assert!(b.is_offloaded(r));
    let data = payload(9, 1000);
    let SendStart::Pending(s) = a.isend(1, 9, 0, data.clone(), SendMode::Standard).unwrap() else {
        panic!("rendezvous");
    };
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    let st = ok_status(find(&got, r));
    assert_eq!((st.len, st.msg_len), (100, 1000));
    assert!(st.truncated());
    assert_eq!(find(&got, r).buf, data[..100]);
    assert_eq!(b.stats().rndv_incomplete, 1);
    assert_eq!(
        find(&take(&mut a), s).buf,
        data,
        "the sender completes on the FIN"
    );
}

#[test]
fn unexpected_rendezvous_is_read_after_the_receive_is_posted() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let data = payload(5, 5000);
    let SendStart::Pending(s) = a.isend(1, 5, 0, data.clone(), SendMode::Standard).unwrap() else {
        panic!("rendezvous");
    };
    settle(&mut [&mut a, &mut b]);
    assert!(take(&mut a).is_empty(), "no FIN yet");
    assert_eq!(
        b.iprobe(spec(None, None)).unwrap().map(|s| s.msg_len),
        Some(5000)
    );
    let r = pending(b.irecv(spec(Some(0), Some(5)), vec![0; 8000]).unwrap());
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    assert_eq!(ok_status(find(&got, r)).len, 5000);
    assert_eq!(find(&got, r).buf[..5000], data[..]);
    assert_eq!(find(&take(&mut a), s).buf, data);
    assert_eq!(b.stats().sw_reads, 1);
}

#[test]
fn full_command_queue_holds_actions_in_order() {
    // Two list operations at a time: the ADDs of six receives wait.
    let soft = SoftConfig::small().with_tags(15, 2);
    let (mut a, mut b) = sim_pair(soft, EndpointConfig::for_tests());
    let ids: Vec<u64> = (0..6)
        .map(|t| pending(b.irecv(spec(Some(0), Some(t)), vec![0; 64]).unwrap()))
        .collect();
    assert!(b.queued() > 0, "actions held");
    assert!(b.stats().ops_held > 0);
    for t in (0..6).rev() {
        let _ = a
            .isend(1, t, 0, vec![t as u8; 10], SendMode::Standard)
            .unwrap();
    }
    settle(&mut [&mut a, &mut b]);
    assert_eq!(b.queued(), 0);
    let got = take(&mut b);
    for (t, id) in ids.iter().enumerate() {
        let f = find(&got, *id);
        assert_eq!((ok_status(f).tag, f.buf[0]), (t as u32, t as u8));
    }
}

#[test]
fn full_tag_list_holds_the_add_until_the_slot_is_free() {
    // One tag; a multi-packet message keeps its slot until DATA_VALID is
    // polled, while the model already counts it free.
    let soft = SoftConfig::small().with_tags(1, 16).with_mtu(64);
    let cfg = EndpointConfig {
        tags: 1,
        ..EndpointConfig::for_tests()
    };
    let (mut a, mut b) = sim_pair(soft, cfg);
    let r1 = pending(b.irecv(spec(Some(0), Some(1)), vec![0; 200]).unwrap());
    exec(&b);
    b.progress().unwrap();
    let _ = a
        .isend(1, 1, 0, payload(1, 150), SendMode::Standard)
        .unwrap();
    deliver_to(&b, 0, 1);
    b.progress().unwrap(); // MATCH only
    let held = b.stats().ops_held;
    let r2 = pending(b.irecv(spec(Some(0), Some(2)), vec![0; 200]).unwrap());
    assert!(b.is_offloaded(r2));
    assert!(
        b.stats().ops_held > held,
        "ADD refused: the list is full (ENOMEM)"
    );
    assert_eq!(b.queued(), 1);
    b.provider().complete_data(1);
    b.progress().unwrap();
    assert_eq!(b.queued(), 0, "posted once the slot came back");
    let _ = a
        .isend(1, 2, 0, payload(2, 30), SendMode::Standard)
        .unwrap();
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    assert_eq!(ok_status(find(&got, r1)).len, 150);
    assert_eq!(ok_status(find(&got, r2)).len, 30);
    assert_eq!(b.stats().device_receives, 2, "both matched by the device");
}

#[test]
fn phase_counter_wraps_past_0xffff() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let n: u32 = 70_000;
    let mut buf = [0u8; 4];
    for i in 0..n {
        let _ = a
            .isend(1, 1, 0, i.to_le_bytes().to_vec(), SendMode::Standard)
            .unwrap();
        b.provider().run();
        b.progress().unwrap();
        a.progress().unwrap();
        // Take it back out of the unexpected queue, in order.
        let st = b.recv_now(spec(Some(0), Some(1)), &mut buf).unwrap();
        assert_eq!(st.map(|s| s.len), Some(4), "message {i}");
        assert_eq!(u32::from_le_bytes(buf), i);
        if i % 9_999 == 0 || (65_533..65_540).contains(&i) {
            // An offloaded receive added at this count is active at once.
            let r = pending(b.irecv(spec(Some(0), Some(2)), vec![0; 64]).unwrap());
            exec(&b);
            b.progress().unwrap();
            let _ = a.isend(1, 2, 0, vec![1], SendMode::Standard).unwrap();
            deliver_to(&b, 0, 1);
            b.progress().unwrap();
            let got = take(&mut b);
            assert_eq!(ok_status(find(&got, r)).len, 1, "at message {i}");
        }
    }
    let st = b.provider().tm_state(b.srq()).unwrap();
    assert_eq!(st.h, (n % 65_536) as u16);
    assert!(b.stats().offload.syncs >= u64::from(n) / (1 << 14));
    assert!(b.stats().device_receives >= 10);
}

#[test]
fn strict_activation_gives_the_same_results() {
    for strict in [false, true] {
        let (mut a, mut b) = sim_pair(
            SoftConfig::small().strict(strict),
            EndpointConfig::for_tests(),
        );
        // Unexpected traffic before and after receives, some offloaded.
        let _ = a.isend(1, 1, 0, vec![1; 10], SendMode::Standard).unwrap();
        deliver_to(&b, 0, 1);
        let r1 = pending(b.irecv(spec(Some(0), Some(1)), vec![0; 64]).unwrap());
        let r2 = pending(b.irecv(spec(Some(0), Some(1)), vec![0; 64]).unwrap());
        exec(&b);
        let _ = a.isend(1, 1, 0, vec![2; 10], SendMode::Standard).unwrap();
        settle(&mut [&mut a, &mut b]);
        let got = take(&mut b);
        assert_eq!(
            find(&got, r1).buf[0],
            1,
            "strict={strict}: the first message to the first receive"
        );
        assert_eq!(find(&got, r2).buf[0], 2);
    }
}

#[test]
fn self_sends_probe_and_mprobe() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let SendStart::Pending(ss) = b
        .isend(1, 7, 3, b"to me".to_vec(), SendMode::Synchronous)
        .unwrap()
    else {
        panic!("a synchronous self send waits for its match");
    };
    let p = b
        .iprobe(MatchSpec {
            context_id: 3,
            source: Source::Any,
            tag: Tag::Any,
        })
        .unwrap()
        .unwrap();
    assert_eq!((p.source, p.tag, p.msg_len), (1, 7, 5));
    let (m, st) = b
        .improbe(MatchSpec {
            context_id: 3,
            source: Source::Rank(1),
            tag: Tag::Value(7),
        })
        .unwrap()
        .unwrap();
    assert_eq!(st.len, 5);
    assert!(b
        .iprobe(MatchSpec {
            context_id: 3,
            source: Source::Any,
            tag: Tag::Any
        })
        .unwrap()
        .is_none());
    let RecvStart::Done(st, buf) = b.imrecv(m, vec![0; 16]).unwrap() else {
        panic!()
    };
    assert_eq!((st.unwrap().len, &buf[..5]), (5, &b"to me"[..]));
    assert!(take(&mut b)
        .iter()
        .any(|f| f.id == ss && f.send && f.result.is_ok()));
    // mprobe of a rendezvous from a peer, then imrecv.
    let _ = a
        .isend(1, 8, 0, payload(8, 3000), SendMode::Standard)
        .unwrap();
    settle(&mut [&mut a, &mut b]);
    let (m, st) = b.improbe(spec(Some(0), None)).unwrap().unwrap();
    assert_eq!(st.msg_len, 3000);
    let r = pending(b.imrecv(m, vec![0; 3000]).unwrap());
    settle(&mut [&mut a, &mut b]);
    assert_eq!(find(&take(&mut b), r).buf, payload(8, 3000));
}

#[test]
fn a_dead_peer_is_a_typed_error() {
    let (mut a, b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let SendStart::Pending(s) = a
        .isend(1, 1, 0, payload(1, 4000), SendMode::Standard)
        .unwrap()
    else {
        panic!()
    };
    let qp = a.qp_of(1).unwrap();
    a.provider().fail_qp(qp, "link down");
    assert!(matches!(
        a.check_alive(Some(1)),
        Err(Error::PeerDied { peer: 1, .. })
    ));
    let got = take(&mut a);
    assert!(matches!(
        find(&got, s).result,
        Err(Error::PeerDied { peer: 1, .. })
    ));
    assert_eq!(
        find(&got, s).buf,
        payload(1, 4000),
        "the data comes back on failure"
    );
    assert!(matches!(
        a.isend(1, 1, 0, vec![1], SendMode::Standard),
        Err(Error::PeerDied { .. })
    ));
    drop(b);
}

#[test]
fn finalize_tears_down_and_reports_counters() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let r = pending(b.irecv(spec(None, None), vec![0; 8]).unwrap());
    let _ = a.isend(1, 1, 0, vec![1, 2, 3], SendMode::Standard).unwrap();
    settle(&mut [&mut a, &mut b]);
    assert_eq!(ok_status(find(&take(&mut b), r)).len, 3);
    let c = b.finalize().unwrap();
    assert_eq!(c.offload.sw_matches + c.offload.engine_matches, 1);
    assert!(c.to_string().contains("eager"));
    let c = a.finalize().unwrap();
    assert_eq!(c.eager_sends, 1);
}

#[test]
fn shared_post_proposes_holds_and_commits() {
    use verbs_tm::SharedStart;
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let SharedStart::Posted(s) = b.post_shared(spec(None, Some(5)), 64).unwrap() else {
        panic!("nothing queued yet");
    };
    let _ = a
        .isend(1, 5, 0, b"first".to_vec(), SendMode::Standard)
        .unwrap();
    let _ = a
        .isend(1, 5, 0, b"second".to_vec(), SendMode::Standard)
        .unwrap();
    let big = payload(3, 2000);
    let _ = a.isend(1, 5, 0, big.clone(), SendMode::Standard).unwrap();
    settle(&mut [&mut a, &mut b]);
    let mut props = Vec::new();
    b.take_proposals(&mut props);
    assert_eq!(props.len(), 1);
    assert_eq!(
        (props[0].0, props[0].1.source, props[0].1.msg_len),
        (s, 0, 5)
    );
    assert_eq!(
        b.unexpected_len(),
        0,
        "everything behind the proposal waits"
    );
    let mut buf = [0u8; 64];
    let st = b.commit(s, &mut buf).unwrap();
    assert_eq!((st.len, &buf[..5]), (5, &b"first"[..]));
    settle(&mut [&mut a, &mut b]);
    assert_eq!(
        b.unexpected_len(),
        2,
        "the rest is processed after the commit"
    );
    // A rendezvous proposal, committed: READ and FIN.
    let SharedStart::Proposed(st) = b.post_shared(spec(None, Some(5)), 64).unwrap() else {
        panic!("second is queued: proposed at once");
    };
    assert_eq!(st.msg_len, 6);
    let mut small = [0u8; 6];
    assert_eq!(
        b.recv_now(spec(Some(0), Some(5)), &mut small)
            .unwrap()
            .map(|s| s.len),
        Some(6)
    );
    let SharedStart::Posted(s2) = b.post_shared(spec(None, Some(6)), 4000).unwrap() else {
        panic!()
    };
    let _ = a
        .isend(1, 6, 0, big.clone(), SendMode::Synchronous)
        .unwrap();
    settle(&mut [&mut a, &mut b]);
    b.take_proposals(&mut props);
    assert_eq!(props.last().map(|p| (p.0, p.1.msg_len)), Some((s2, 2000)));
    b.provider_mut().set_auto(true);
    a.provider_mut().set_auto(true);
    let mut out = vec![0u8; 4000];
    let st = b.commit(s2, &mut out).unwrap();
    assert_eq!(&out[..st.len], &big[..]);
    settle(&mut [&mut a, &mut b]);
    assert!(take(&mut a).iter().all(|f| f.result.is_ok()));
}

#[test]
fn withdrawn_proposal_is_matched_as_if_never_posted() {
    use verbs_tm::SharedStart;
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let SharedStart::Posted(s) = b.post_shared(spec(None, Some(5)), 64).unwrap() else {
        panic!()
    };
    // Posted after the shared one, and overlapping it: stays in software.
    let r = pending(b.irecv(spec(Some(0), Some(5)), vec![0; 64]).unwrap());
    assert!(!b.is_offloaded(r));
    let _ = a
        .isend(1, 5, 0, b"m1".to_vec(), SendMode::Standard)
        .unwrap();
    let _ = a
        .isend(1, 5, 0, b"m2".to_vec(), SendMode::Standard)
        .unwrap();
    settle(&mut [&mut a, &mut b]);
    let mut props = Vec::new();
    b.take_proposals(&mut props);
    assert_eq!(props.len(), 1);
    assert!(take(&mut b).is_empty(), "the held message went nowhere");
    b.withdraw(s).unwrap();
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    assert_eq!(
        &find(&got, r).buf[..2],
        b"m1",
        "m1 to the receive behind the withdrawn post"
    );
    assert_eq!(b.unexpected_len(), 1, "m2 queued");
    // Withdrawing a post that proposed nothing cancels it.
    let SharedStart::Posted(s3) = b.post_shared(spec(None, Some(9)), 8).unwrap() else {
        panic!()
    };
    b.withdraw(s3).unwrap();
    let _ = a.isend(1, 9, 0, b"x".to_vec(), SendMode::Standard).unwrap();
    settle(&mut [&mut a, &mut b]);
    b.take_proposals(&mut props);
    assert_eq!(props.len(), 1, "no proposal from a withdrawn post");
    assert_eq!(b.unexpected_len(), 2);
}

#[test]
fn reads_beyond_the_budget_wait_in_order() {
    // Two send buffers: two READs in flight at most; six rendezvous.
    let cfg = EndpointConfig {
        send_bufs: 2,
        ..EndpointConfig::for_tests()
    };
    let (mut a, mut b) = sim_pair(SoftConfig::small(), cfg);
    for t in 0..6u32 {
        let _ = a
            .isend(
                1,
                t,
                0,
                payload(t as u8, 1000 + t as usize),
                SendMode::Standard,
            )
            .unwrap();
    }
    settle(&mut [&mut a, &mut b]);
    let ids: Vec<u64> = (0..6u32)
        .map(|t| pending(b.irecv(spec(Some(0), Some(t)), vec![0; 2000]).unwrap()))
        .collect();
    assert!(b.queued() >= 4, "READs wait for the budget");
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    for (t, id) in ids.iter().enumerate() {
        let f = find(&got, *id);
        assert_eq!(ok_status(f).len, 1000 + t);
        assert_eq!(f.buf[..1000 + t], payload(t as u8, 1000 + t)[..]);
    }
    assert_eq!(take(&mut a).iter().filter(|f| f.result.is_ok()).count(), 6);
}

/// A zero-length synchronous send (a rendezvous with no buffer: key 0,
/// address 0) matched by the device into a large receive: the device's
/// READ of nothing checks no key, as on InfiniBand, and both sides
/// complete.
#[test]
fn zero_length_rendezvous_matched_by_the_device() {
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    let r = pending(b.irecv(spec(Some(0), Some(3)), vec![7; 4096]).unwrap());
    settle(&mut [&mut a, &mut b]);
    assert!(b.is_offloaded(r), "a large receive is the device's");
    let SendStart::Pending(s) = a.isend(1, 3, 0, Vec::new(), SendMode::Synchronous).unwrap() else {
        panic!("a synchronous send waits for the match");
    };
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    let st = ok_status(find(&got, r));
    assert_eq!((st.source, st.tag, st.len, st.msg_len), (0, 3, 0, 0));
    assert_eq!(b.stats().device_receives, 1);
    let sent = take(&mut a);
    assert!(find(&sent, s).result.is_ok(), "the FIN completes the send");
    assert!(b.provider().misuse().is_empty() && a.provider().misuse().is_empty());
}

/// `MPI_Cancel` of sends: a rendezvous request the receiver holds
/// unexpected is withdrawn (no receive ever gets it, no READ, no FIN; the
/// sender gets its buffer back), one the receiver matched is not (it
/// completes normally), and a synchronous send to self is withdrawn from
/// the unexpected queue.
#[test]
fn send_cancel_withdraws_unmatched_rendezvous_requests_only() {
    use verbs_tm::CancelSend;
    let (mut a, mut b) = sim_pair(SoftConfig::small(), EndpointConfig::for_tests());
    // Unexpected at b: withdrawn.
    let data = payload(7, 5000);
    let SendStart::Pending(s) = a.isend(1, 5, 0, data.clone(), SendMode::Standard).unwrap() else {
        panic!("rendezvous");
    };
    settle(&mut [&mut a, &mut b]);
    assert_eq!(b.unexpected_len(), 1);
    assert_eq!(a.start_cancel_send(s).unwrap(), CancelSend::Asked);
    assert_eq!(a.cancel_send_answer(s), None, "the peer has not answered");
    settle(&mut [&mut a, &mut b]);
    assert_eq!(a.cancel_send_answer(s), Some(true));
    assert_eq!(b.unexpected_len(), 0, "withdrawn from b's queue");
    let got = take(&mut a);
    assert_eq!(ok_status(find(&got, s)).len, 0);
    assert_eq!(find(&got, s).buf, data, "the buffer comes back");
    assert_eq!(a.stats().cancelled_sends, 1);
    // Nothing reaches a receive posted afterwards; a later send does.
    let r = pending(b.irecv(spec(Some(0), Some(5)), vec![0; 8000]).unwrap());
    let SendStart::Pending(s2) = a
        .isend(1, 5, 0, payload(8, 6000), SendMode::Standard)
        .unwrap()
    else {
        panic!("rendezvous");
    };
    settle(&mut [&mut a, &mut b]);
    let got = take(&mut b);
    assert_eq!(
        ok_status(find(&got, r)).len,
        6000,
        "the second send, not the cancelled one"
    );
    assert!(take(&mut a).iter().any(|f| f.id == s2));
    assert_eq!(b.stats().sw_reads + b.stats().device_receives, 1);
    // Matched already: not withdrawn, completes normally.
    let r = pending(b.irecv(spec(Some(0), Some(6)), vec![0; 8000]).unwrap());
    let SendStart::Pending(s3) = a
        .isend(1, 6, 0, payload(9, 7000), SendMode::Synchronous)
        .unwrap()
    else {
        panic!("pending");
    };
    settle(&mut [&mut a, &mut b]);
    assert!(take(&mut b).iter().any(|f| f.id == r));
    assert_eq!(a.start_cancel_send(s3).unwrap(), CancelSend::Done(false));
    assert!(take(&mut a).iter().any(|f| f.id == s3));
    // Matched while the question travels: the answer is no, and the send
    // completes by its FIN.
    let SendStart::Pending(s4) = a
        .isend(1, 7, 0, payload(1, 9000), SendMode::Standard)
        .unwrap()
    else {
        panic!("rendezvous");
    };
    settle(&mut [&mut a, &mut b]);
    assert_eq!(a.start_cancel_send(s4).unwrap(), CancelSend::Asked);
    let r = pending(b.irecv(spec(Some(0), Some(7)), vec![0; 9000]).unwrap());
    settle(&mut [&mut a, &mut b]);
    assert_eq!(a.cancel_send_answer(s4), Some(false));
    assert_eq!(ok_status(find(&take(&mut b), r)).len, 9000);
    assert!(take(&mut a).iter().any(|f| f.id == s4));
    // A synchronous send to self, unexpected: withdrawn at once.
    let SendStart::Pending(s5) = a
        .isend(0, 8, 0, payload(2, 10), SendMode::Synchronous)
        .unwrap()
    else {
        panic!("pending until matched");
    };
    assert!(a.cancel_send(s5).unwrap());
    assert_eq!(find(&take(&mut a), s5).buf, payload(2, 10));
    assert!(a.iprobe(spec(Some(0), Some(8))).unwrap().is_none());
    // Unknown or finished requests: no.
    assert!(!a.cancel_send(s5).unwrap());
    assert_eq!(a.stats().cancelled_sends, 2);
}
