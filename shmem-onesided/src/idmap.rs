//! Maps keyed by the endpoint's dense integer ids (request ids, store
//! keys, tm-match handles): hash maps with tm-match's one-multiply hasher
//! instead of SipHash, a slab for the unexpected-message store, and a
//! direct-mapped table for request ids ([`IdTable`]).
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

    /// Whether nothing is stored.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
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

    /// Drops the value of `key` where it is stored (what `remove` would
    /// hand back, unmoved).
    #[inline]
    pub(crate) fn discard(&mut self, key: u64) {
        if let Some(slot) = self.slots.get_mut(key as usize) {
            if slot.is_some() {
                *slot = None;
                self.free.push(key);
                self.len -= 1;
            }
        }
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().filter_map(Option::as_mut)
    }

    /// How many values are stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// Direct-mapped slots of an [`IdTable`] (a power of two). Operations
/// mostly complete within a few hundred ids of their start (a window of
/// 64 nonblocking operations uses ~65 ids per round), so nearly every one
/// finds its slot free.
pub(crate) const ID_SLOTS: usize = 256;

/// A map from the endpoint's request ids to values, for ids that are
/// unique per process and issued in increasing order (the endpoint's
/// request counter): the endpoint's own request table, and an upper
/// layer's table of operations pending on the endpoint (the ADI's).
///
/// Id `id` lives in slot `id % ID_SLOTS` if that slot was free when it was
/// inserted, otherwise in an overflow hash map (an older id still pending
/// holds the slot: a long-lived operation). A lookup checks the slot's key
/// first and the overflow map only if that is not the id (and the map is
/// not empty), so the common insert and remove are an index, a compare and
/// a move: no hashing, no probing. Each id is in exactly one of the two
/// places, so the table behaves as a map whatever the pattern of ids.
#[derive(Debug)]
pub struct IdTable<V> {
    slots: Vec<Option<(u64, V)>>,
    overflow: IdMap<u64, V>,
}

/// A free slot of an [`IdTable`] for one id ([`IdTable::vacant`]).
#[derive(Debug)]
pub struct Vacant<'a, V> {
    slot: &'a mut Option<(u64, V)>,
    id: u64,
}

impl<V> Vacant<'_, V> {
    /// Stores `v` under the id the slot was taken for.
    #[inline(always)]
    pub fn fill(self, v: V) {
        // The slot is empty ([`IdTable::vacant`] checked it, and this
        // holds the only reference since): the `None` replaced is
        // forgotten, not dropped (an assignment called the drop glue).
        core::mem::forget(self.slot.replace((self.id, v)));
    }
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable {
            slots: std::iter::repeat_with(|| None).take(ID_SLOTS).collect(),
            overflow: IdMap::default(),
        }
    }
}

impl<V> IdTable<V> {
    #[inline]
    fn slot(id: u64) -> usize {
        (id as usize) & (ID_SLOTS - 1)
    }

    /// Inserts `v` under `id`, replacing (and dropping) a value already
    /// there (as `HashMap::insert`; the endpoint never reuses an id).
    #[inline(always)]
    pub fn insert(&mut self, id: u64, v: V) {
        match self.slots.get_mut(Self::slot(id)) {
            Some(slot @ None) => {
                if self.overflow.is_empty() || self.overflow.remove(&id).is_none() {
                    *slot = Some((id, v));
                    return;
                }
                // `id` was in the overflow map (a reused id): keep it there.
                self.overflow.insert(id, v);
            }
            Some(Some((k, old))) if *k == id => *old = v,
            _ => {
                self.overflow.insert(id, v);
            }
        }
    }

    /// The free slot `id` goes in, when it is free and nothing overflowed
    /// (the common case of [`IdTable::insert`]); `None`: use
    /// [`IdTable::insert`]. [`Vacant::fill`] stores the value where the
    /// caller built it (an insert taking a closure that builds the value
    /// copied what the closure captured onto the stack, and read it back
    /// in wide loads the store buffer could not forward).
    #[inline(always)]
    pub fn vacant(&mut self, id: u64) -> Option<Vacant<'_, V>> {
        if !self.overflow.is_empty() {
            return None;
        }
        let slot = self.slots.get_mut(Self::slot(id)).filter(|s| s.is_none())?;
        Some(Vacant { slot, id })
    }

    /// Runs `f` on the value of `id`, if any, and removes the entry if `f`
    /// returns `Some` (what `f` took out of the value in place; the rest
    /// is dropped where it is): one lookup, and the value is never moved
    /// as a whole.
    #[inline(always)]
    pub fn take_where<R>(&mut self, id: u64, f: impl FnOnce(&mut V) -> Option<R>) -> Option<R> {
        if let Some(slot) = self.slots.get_mut(Self::slot(id)) {
            if let Some((k, v)) = slot {
                if *k == id {
                    let r = f(v)?;
                    *slot = None;
                    return Some(r);
                }
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        let r = f(self.overflow.get_mut(&id)?)?;
        self.overflow.remove(&id);
        Some(r)
    }

    /// Removes and returns the value of `id`, if any.
    #[inline]
    pub fn remove(&mut self, id: u64) -> Option<V> {
        if let Some(slot) = self.slots.get_mut(Self::slot(id)) {
            if matches!(slot, Some((k, _)) if *k == id) {
                return slot.take().map(|(_, v)| v);
            }
        }
        if self.overflow.is_empty() {
            return None;
        }
        self.overflow.remove(&id)
    }

    /// The value of `id`, if any.
    #[inline]
    pub fn get(&self, id: u64) -> Option<&V> {
        match self.slots.get(Self::slot(id)) {
            Some(Some((k, v))) if *k == id => Some(v),
            _ => self.overflow.get(&id),
        }
    }

    /// The value of `id`, if any, mutably.
    #[inline]
    pub fn get_mut(&mut self, id: u64) -> Option<&mut V> {
        match self.slots.get_mut(Self::slot(id)) {
            Some(Some((k, v))) if *k == id => Some(v),
            _ => self.overflow.get_mut(&id),
        }
    }

    /// Every entry (slots first, then the overflow map; no order).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.slots
            .iter()
            .filter_map(|s| s.as_ref().map(|(k, v)| (*k, v)))
            .chain(self.overflow.iter().map(|(k, v)| (*k, v)))
    }

    /// Every value (slots first, then the overflow map; no order).
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.slots
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, v)| v))
            .chain(self.overflow.values())
    }

    /// Number of entries (counts the slots: not for hot paths).
    pub fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count() + self.overflow.len()
    }

    /// Whether the table is empty (scans the slots: not for hot paths).
    pub fn is_empty(&self) -> bool {
        self.overflow.is_empty() && self.slots.iter().all(Option::is_none)
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

    #[test]
    fn id_table_is_a_map_with_slot_collisions_and_long_lived_ids() {
        // Checked against a HashMap over a pseudo-random mix of inserts and
        // removes: increasing ids (as the endpoint issues them), some kept
        // for thousands of ids (their slots get reused: overflow), some
        // removed out of order, a few removes of absent ids.
        let mut t: IdTable<u64> = IdTable::default();
        let mut model: std::collections::HashMap<u64, u64> = Default::default();
        let mut live: Vec<u64> = Vec::new();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut overflowed = 0;
        for id in 1..20_000u64 {
            // Every other id through `vacant` when it offers a slot.
            match t.vacant(id).filter(|_| id % 2 == 0) {
                Some(v) => v.fill(id * 3),
                None => t.insert(id, id * 3),
            }
            model.insert(id, id * 3);
            live.push(id);
            if !t.overflow.is_empty() {
                overflowed += 1;
            }
            // Remove 0..2 live ids: mostly the oldest (FIFO completion),
            // sometimes a random one; every 97th id stays for long.
            for _ in 0..(rnd() % 3) {
                if live.is_empty() {
                    break;
                }
                let i = if rnd() % 4 == 0 {
                    (rnd() as usize) % live.len()
                } else {
                    0
                };
                let k = live.remove(i);
                if k % 97 == 0 && id - k < 3 * ID_SLOTS as u64 {
                    live.push(k);
                    continue;
                }
                assert_eq!(t.remove(k), model.remove(&k), "remove {k}");
                assert_eq!(t.remove(k), None, "second remove of {k}");
            }
            let absent = id + 1 + rnd() % 1000;
            assert_eq!(t.remove(absent), None);
            if id % 1000 == 0 {
                assert_eq!(t.len(), model.len());
                for (k, v) in &model {
                    assert_eq!(t.get_mut(*k).copied(), Some(*v), "get {k}");
                }
                let mut a: Vec<u64> = t.values().copied().collect();
                let mut b: Vec<u64> = model.values().copied().collect();
                a.sort_unstable();
                b.sort_unstable();
                assert_eq!(a, b);
            }
        }
        assert!(overflowed > 0, "the test never exercised the overflow map");
        // `vacant` offers no slot for an id whose slot is taken, nor while
        // anything overflowed.
        let k = *live.first().unwrap();
        assert!(t.vacant(k).is_none());
        if !t.overflow.is_empty() {
            assert!(t.vacant(k + 100_000).is_none());
        }
        // Replacing a value keeps one entry (slot and overflow cases).
        t.insert(k, 7);
        model.insert(k, 7);
        assert_eq!(t.len(), model.len());
        assert_eq!(t.get_mut(k).copied(), Some(7));
        for k in live {
            assert_eq!(t.remove(k), model.remove(&k));
        }
        assert_eq!(t.len(), 0);
        assert!(model.is_empty());
    }
}
