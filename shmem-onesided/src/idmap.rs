//! Hash maps keyed by the endpoint's dense integer ids (request ids, store
//! keys, tm-match handles), with tm-match's one-multiply hasher instead of
//! SipHash.
//!
//! The keys are process-private counters, never chosen by a peer, so the
//! DoS resistance of SipHash buys nothing here; its cost showed up as about
//! a quarter of an 8-byte ping-pong. The hasher folds a 64×64→128 multiply
//! so that every key bit reaches the top bits hashbrown takes its control
//! bytes from.

use core::hash::BuildHasherDefault;
use std::collections::HashMap;

/// tm-match's folded-multiply hasher (the same mixing its matcher uses).
pub(crate) use tm_match::hash::FoldHasher as IdHasher;

/// A `HashMap` with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;
    use std::collections::HashSet;

    #[test]
    fn dense_keys_spread_over_the_top_bits() {
        let b = BuildHasherDefault::<IdHasher>::default();
        let tops: HashSet<u64> = (0..256u64).map(|k| b.hash_one(k) >> 57).collect();
        // 256 consecutive keys into the 128 top-7-bit groups: random
        // hashing fills about 110; an identity hash would fill one.
        assert!(tops.len() > 64, "only {} groups", tops.len());
    }

    #[test]
    fn map_round_trip() {
        let mut m: IdMap<u64, u64> = IdMap::default();
        for k in 0..10_000u64 {
            m.insert(k, k * 3);
        }
        assert!((0..10_000u64).all(|k| m.get(&k) == Some(&(k * 3))));
    }
}
