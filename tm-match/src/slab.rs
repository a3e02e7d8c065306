//! A generational slab: stable `u32` indices for intrusive lists, and
//! `(index, generation)` handles that a stale holder cannot misuse after the
//! slot is reused.

/// One slot.
#[derive(Debug, Clone)]
struct Slot<T> {
    gen: u32,
    val: Option<T>,
}

/// Slots with a free list.
#[derive(Debug, Clone)]
pub(crate) struct Slab<T> {
    slots: Vec<Slot<T>>,
    free: Vec<u32>,
    len: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
}

/// Largest number of slots (index `u32::MAX` is the list terminator).
pub(crate) const MAX_SLOTS: usize = (u32::MAX - 1) as usize;

impl<T> Slab<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `val`; `None` when the slab is at [`MAX_SLOTS`].
    #[inline]
    pub(crate) fn insert(&mut self, val: T) -> Option<(u32, u32)> {
        if let Some(i) = self.free.pop() {
            let slot = &mut self.slots[i as usize];
            slot.val = Some(val);
            self.len += 1;
            Some((i, slot.gen))
        } else if self.slots.len() < MAX_SLOTS {
            let i = self.slots.len() as u32;
            self.slots.push(Slot {
                gen: 0,
                val: Some(val),
            });
            self.len += 1;
            Some((i, 0))
        } else {
            None
        }
    }

    /// Removes the value at an index known to be live.
    #[inline]
    pub(crate) fn remove(&mut self, i: u32) -> Option<T> {
        let slot = self.slots.get_mut(i as usize)?;
        let v = slot.val.take()?;
        slot.gen = slot.gen.wrapping_add(1);
        self.free.push(i);
        self.len -= 1;
        Some(v)
    }

    #[inline]
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        self.slots.get(i as usize)?.val.as_ref()
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        self.slots.get_mut(i as usize)?.val.as_mut()
    }

    /// The value at an index the caller's own links say is live.
    #[inline]
    pub(crate) fn at(&self, i: u32) -> &T {
        match self.get(i) {
            Some(v) => v,
            None => unreachable!("tm-match: dangling internal link {i}"),
        }
    }

    #[inline]
    pub(crate) fn at_mut(&mut self, i: u32) -> &mut T {
        match self.get_mut(i) {
            Some(v) => v,
            None => unreachable!("tm-match: dangling internal link {i}"),
        }
    }

    pub(crate) fn generation(&self, i: u32) -> u32 {
        self.slots.get(i as usize).map_or(0, |s| s.gen)
    }

    /// Live entries with their indices.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.val.as_ref().map(|v| (i as u32, v)))
    }
}
