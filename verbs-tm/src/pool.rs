//! A small best-fit pool of byte buffers, shared by the endpoint's spare
//! buffers and the software device's payload buffers.
//!
//! It keeps at most `keep` buffers whose capacity is within `min..=max`;
//! a full pool keeps the larger ones. Taking is best fit: the smallest
//! kept buffer with room. Contents are neither cleared nor zeroed (the
//! users clear or overwrite what they use).

/// The pool. See the [module docs](self).
#[derive(Debug)]
pub(crate) struct BufPool {
    bufs: Vec<Vec<u8>>,
    keep: usize,
    min: usize,
    max: usize,
}

impl BufPool {
    /// An empty pool keeping at most `keep` buffers of capacity
    /// `min..=max`.
    pub(crate) const fn new(keep: usize, min: usize, max: usize) -> Self {
        BufPool {
            bufs: Vec::new(),
            keep,
            min,
            max,
        }
    }

    /// The smallest kept buffer with capacity for `len` bytes, if any.
    pub(crate) fn take_fit(&mut self, len: usize) -> Option<Vec<u8>> {
        let i = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)?;
        Some(self.bufs.swap_remove(i))
    }

    /// The largest kept buffer, if any.
    pub(crate) fn take_largest(&mut self) -> Option<Vec<u8>> {
        let i = self
            .bufs
            .iter()
            .enumerate()
            .max_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i)?;
        Some(self.bufs.swap_remove(i))
    }

    /// Whether a buffer of capacity `cap` would be kept at all.
    pub(crate) fn keeps(&self, cap: usize) -> bool {
        (self.min..=self.max).contains(&cap)
    }

    /// Keeps `v` if its capacity is in range and the pool has room, or, when
    /// full, in place of the smallest kept buffer if that is smaller;
    /// otherwise frees it.
    pub(crate) fn put(&mut self, v: Vec<u8>) {
        if !self.keeps(v.capacity()) {
            return;
        }
        if self.bufs.len() < self.keep {
            self.bufs.push(v);
            return;
        }
        let smallest = self
            .bufs
            .iter()
            .enumerate()
            .min_by_key(|(_, b)| b.capacity())
            .filter(|(_, b)| b.capacity() < v.capacity())
            .map(|(i, _)| i);
        if let Some(i) = smallest {
            self.bufs[i] = v;
        }
    }

    /// The number of kept buffers.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.bufs.len()
    }

    /// The capacities of the kept buffers, ascending.
    #[cfg(test)]
    pub(crate) fn capacities(&self) -> Vec<usize> {
        let mut c: Vec<usize> = self.bufs.iter().map(Vec::capacity).collect();
        c.sort_unstable();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_then_largest_and_nothing_out_of_range_is_kept() {
        let mut p = BufPool::new(4, 100, 1000);
        p.put(Vec::with_capacity(50));
        p.put(Vec::with_capacity(1001));
        assert_eq!(p.len(), 0, "outside min..=max: freed");
        for c in [400, 200, 800] {
            p.put(Vec::with_capacity(c));
        }
        let mut a = p.take_fit(150).unwrap();
        assert!((200..400).contains(&a.capacity()), "{}", a.capacity());
        a.push(9);
        p.put(a);
        // Contents are kept: the users clear what they need cleared.
        let a = p.take_fit(150).unwrap();
        assert_eq!(a, [9]);
        assert!(p.take_fit(2000).is_none());
        assert!(p.take_largest().unwrap().capacity() >= 800);
        assert_eq!(p.len(), 1);
        assert!(p.take_largest().unwrap().capacity() >= 400);
        assert!(p.take_largest().is_none());
        assert!(p.take_fit(0).is_none());
    }

    #[test]
    fn a_full_pool_keeps_the_larger_buffers() {
        let mut p = BufPool::new(3, 100, 10_000);
        for c in [100, 200, 300] {
            p.put(Vec::with_capacity(c));
        }
        p.put(Vec::with_capacity(150));
        let caps = p.capacities();
        assert!(caps[0] >= 150 && caps[0] < 200, "{caps:?}");
        p.put(Vec::with_capacity(5000));
        let caps = p.capacities();
        assert_eq!(caps.len(), 3);
        assert!(caps[0] >= 200 && caps[2] >= 5000, "{caps:?}");
        // Smaller than all kept: freed.
        p.put(Vec::with_capacity(120));
        assert_eq!(p.capacities(), caps);
    }
}
