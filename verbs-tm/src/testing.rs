//! Helpers for tests of code built on this crate: endpoints on one
//! [`soft::Sim`](crate::soft::Sim) fabric, run to quiescence.

use crate::soft::{Sim, SoftConfig};
use crate::{Endpoint, EndpointConfig, Finished, Result};

/// Two connected endpoints (ranks 0 and 1 of a job of 2) on one simulated
/// fabric. Nothing moves on the fabric until [`settle`] (or the test's own
/// steps through [`Endpoint::provider`]).
pub fn sim_pair(soft: SoftConfig, cfg: EndpointConfig) -> (Endpoint<Sim>, Endpoint<Sim>) {
    match sim_job(soft, cfg, 2) {
        Ok(mut v) => {
            let b = v.pop();
            let a = v.pop();
            match (a, b) {
                (Some(a), Some(b)) => (a, b),
                _ => unreachable!("sim_job(2) made two endpoints"),
            }
        }
        Err(e) => panic!("verbs-tm testing: cannot build a simulated pair: {e}"),
    }
}

/// `n` endpoints, all connected to each other, on one simulated fabric.
pub fn sim_job(soft: SoftConfig, cfg: EndpointConfig, n: u32) -> Result<Vec<Endpoint<Sim>>> {
    let first = Sim::new(soft);
    let mut eps = Vec::new();
    for r in 0..n {
        let dev = if r == 0 {
            first.clone()
        } else {
            first.add_device(soft)
        };
        eps.push(Endpoint::new(dev, cfg, r, n)?);
    }
    let mut blobs = Vec::new();
    for ep in &mut eps {
        blobs.push(ep.address(0..n)?);
    }
    for (r, ep) in eps.iter_mut().enumerate() {
        for (p, blob) in blobs.iter().enumerate() {
            if p != r {
                ep.connect(p as u32, blob)?;
            }
        }
    }
    Ok(eps)
}

/// Runs the fabric and every endpoint's progress until nothing moves.
pub fn settle(eps: &mut [&mut Endpoint<Sim>]) {
    for _ in 0..10_000 {
        let mut moved = 0;
        for ep in eps.iter_mut() {
            moved += ep.provider().run();
            moved += match ep.progress() {
                Ok(n) => n,
                Err(e) => panic!("verbs-tm testing: progress failed: {e}"),
            };
        }
        if moved == 0 {
            return;
        }
    }
    panic!("verbs-tm testing: the fabric does not settle");
}

/// Every finished request of `ep`.
pub fn take(ep: &mut Endpoint<Sim>) -> Vec<Finished> {
    let mut v = Vec::new();
    ep.take_completions(&mut v);
    v
}
