//! The idle progress pass's early exit ([`Endpoint::quiet`]): taken only
//! when a whole pass would find nothing to do.

use super::*;
use std::sync::{Arc, Barrier};

/// `quiet` holds on an idle endpoint and with one eager block in flight
/// that the receiver still holds; it fails while a header waits in a ring
/// or the block in flight was released (a pass would take it back), and
/// holds again once a pass has done that work.
#[test]
fn quiet_only_when_a_pass_has_nothing_to_do() {
    let gate = Arc::new(Barrier::new(2));
    pair("quiet", move |me, mut ep| {
        let peer = 1 - me;
        let msg = data(7, 3000);
        assert!(ep.quiet(), "{me}: a fresh endpoint is idle");
        gate.wait();
        if me == 0 {
            ep.send(peer, 5, 4, &msg).unwrap();
            assert_eq!(ep.eager.in_flight(), 1, "an eager block in flight");
            assert!(ep.quiet(), "the receiver still holds the block");
            assert_eq!(ep.progress().unwrap(), 0, "the quiet pass does nothing");
        }
        gate.wait();
        if me == 1 {
            assert!(!ep.quiet(), "a header waits in the ring");
            let mut buf = vec![0u8; 3000];
            let st = ep.recv(spec(peer, 5), &mut buf).unwrap();
            assert_eq!((st.len, &buf), (3000, &msg));
            assert!(ep.quiet(), "{me}: all taken");
        }
        gate.wait();
        if me == 0 {
            assert!(!ep.quiet(), "the released block is for a pass to take back");
            assert_eq!(ep.progress().unwrap(), 1, "the pass took the block back");
            assert_eq!(ep.eager.in_flight(), 0);
            assert!(ep.quiet());
        }
        gate.wait();
        ep.finalize().unwrap();
    });
}

/// `n` progress passes (out of line: the unit `callgrind
/// --toggle-collect` counts).
#[inline(never)]
fn idle_passes(ep: &mut Endpoint, n: u32) -> usize {
    (0..n).map(|_| ep.progress().unwrap()).sum()
}

/// For instruction counts, not run by default: rank 1 makes 10,000 idle
/// progress passes while rank 0 waits. Per pass, in a release build:
///
/// ```text
/// valgrind --tool=callgrind --toggle-collect='*idle_passes*' \
///     <test binary> --ignored --exact endpoint::tests::quiet::idle_pass_cost
/// ```
/// (the collected total divided by 10,000).
#[test]
#[ignore = "an instruction-count probe (callgrind), not a check"]
fn idle_pass_cost() {
    let gate = Arc::new(Barrier::new(2));
    pair("idlecost", move |me, mut ep| {
        if me == 1 {
            assert_eq!(idle_passes(&mut ep, 10_000), 0);
        }
        gate.wait();
        ep.finalize().unwrap();
    });
}
