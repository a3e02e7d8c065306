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

/// A slab keyed by the index it hands out: `insert` reuses the slot of the
/// latest `remove`. For the endpoint's unexpected-message store, whose
/// entries live from a message's arrival to its match (no hashing on the
/// per-message path). A key is valid from its `insert` to its `remove`.
#[derive(Debug)]
pub(crate) struct KeySlab<T> {
    slots: Vec<Option<T>>,
    free: Vec<u64>,
    len: usize,
}

impl<T> Default for KeySlab<T> {
    fn default() -> Self {
        KeySlab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

impl<T> KeySlab<T> {
    /// Stores `v` and returns its key.
    pub(crate) fn insert(&mut self, v: T) -> u64 {
        self.len += 1;
        match self.free.pop() {
            Some(k) => {
                self.slots[k as usize] = Some(v);
                k
            }
            None => {
                self.slots.push(Some(v));
                self.slots.len() as u64 - 1
            }
        }
    }

    pub(crate) fn get(&self, key: &u64) -> Option<&T> {
        self.slots.get(*key as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, key: &u64) -> Option<&mut T> {
        self.slots.get_mut(*key as usize)?.as_mut()
    }

    pub(crate) fn remove(&mut self, key: &u64) -> Option<T> {
        let v = self.slots.get_mut(*key as usize)?.take()?;
        self.free.push(*key);
        self.len -= 1;
        Some(v)
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

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
    fn slab_against_a_map() {
        let mut slab: KeySlab<u64> = KeySlab::default();
        let mut model: std::collections::HashMap<u64, u64> = Default::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if x % 3 != 0 || model.is_empty() {
                let k = slab.insert(step);
                assert!(model.insert(k, step).is_none(), "key {k} handed out twice");
            } else {
                let k = *model.keys().nth((x as usize / 3) % model.len()).unwrap();
                assert_eq!(slab.remove(&k), model.remove(&k));
                assert_eq!(slab.remove(&k), None, "removed twice");
                assert_eq!(slab.get(&k), None);
            }
            assert_eq!(slab.len(), model.len());
        }
        for (k, v) in &model {
            assert_eq!(slab.get(k), Some(v));
        }
        let mut all: Vec<u64> = slab.values_mut().map(|v| *v).collect();
        all.sort_unstable();
        let mut want: Vec<u64> = model.values().copied().collect();
        want.sort_unstable();
        assert_eq!(all, want);
        assert_eq!(slab.get(&u64::MAX), None);
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
