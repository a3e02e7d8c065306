//! Hash maps keyed by the endpoint's dense integer ids (request ids, store
//! keys, tm-match handles), with a one-multiply hasher instead of SipHash.
//!
//! The keys are process-private counters, never chosen by a peer, so the
//! DoS resistance of SipHash buys nothing here; its cost showed up as about
//! a quarter of an 8-byte ping-pong. The hasher folds a 64×64→128 multiply
//! so that every key bit reaches the top bits hashbrown takes its control
//! bytes from.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::{HashMap, HashSet};

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

/// The hasher state.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher {
    h: u64,
}

impl Hasher for IdHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.h
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u64(&mut self, v: u64) {
        let p = u128::from(self.h ^ v ^ K0).wrapping_mul(u128::from(K1));
        self.h = (p as u64) ^ ((p >> 64) as u64);
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
}

/// A `HashMap` with [`IdHasher`].
pub(crate) type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
/// A `HashSet` with [`IdHasher`].
pub(crate) type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;

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
