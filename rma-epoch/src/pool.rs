//! Two-level element pools: a bounded slab per window and one per process.
//!
//! An element is named by an [`ElemRef`] that records which pool it came from;
//! it always returns there (MPICH's `pool_type` rule).
//! Slabs grow lazily up to their capacity and then reuse freed slots (LIFO), so
//! a window that talks to three targets holds three target elements whatever
//! the size of its communicator.

/// Which pool an element belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// The window's own pool.
    Window,
    /// The process-wide pool shared by every window.
    Global,
}

/// A handle to a pooled element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct ElemRef {
    pub(crate) pool: PoolKind,
    pub(crate) idx: u32,
}

impl ElemRef {
    /// A 31-bit index plus the pool in the top bit.
    pub(crate) fn to_u32(self) -> u32 {
        match self.pool {
            PoolKind::Window => self.idx,
            PoolKind::Global => self.idx | 0x8000_0000,
        }
    }

    pub(crate) fn from_u32(v: u32) -> ElemRef {
        if v & 0x8000_0000 != 0 {
            ElemRef {
                pool: PoolKind::Global,
                idx: v & 0x7fff_ffff,
            }
        } else {
            ElemRef {
                pool: PoolKind::Window,
                idx: v,
            }
        }
    }
}

/// Occupancy of one pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Fixed bound.
    pub capacity: usize,
    /// Elements handed out now.
    pub in_use: usize,
    /// Most elements ever handed out at once.
    pub high_water: usize,
    /// Element structures ever constructed (the slab's length).
    pub constructed: usize,
}

/// A bounded slab.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<T>,
    used: Vec<bool>,
    free: Vec<u32>,
    cap: usize,
    in_use: usize,
    high_water: usize,
}

impl<T: Default> Slab<T> {
    pub(crate) fn new(cap: usize) -> Self {
        // Indices must fit in 31 bits.
        let cap = cap.min(0x7fff_ffff);
        Slab {
            items: Vec::new(),
            used: Vec::new(),
            free: Vec::new(),
            cap,
            in_use: 0,
            high_water: 0,
        }
    }

    pub(crate) fn alloc(&mut self) -> Option<u32> {
        let idx = if let Some(i) = self.free.pop() {
            i
        } else if self.items.len() < self.cap {
            self.items.push(T::default());
            self.used.push(false);
            u32::try_from(self.items.len() - 1).ok()?
        } else {
            return None;
        };
        if let Some(u) = self.used.get_mut(idx as usize) {
            *u = true;
        }
        self.in_use += 1;
        self.high_water = self.high_water.max(self.in_use);
        Some(idx)
    }

    /// Returns the element; freeing a free or unknown index does nothing.
    pub(crate) fn free(&mut self, idx: u32) -> bool {
        match self.used.get_mut(idx as usize) {
            Some(u) if *u => {
                *u = false;
                self.free.push(idx);
                self.in_use -= 1;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn get(&self, idx: u32) -> Option<&T> {
        if *self.used.get(idx as usize)? {
            self.items.get(idx as usize)
        } else {
            None
        }
    }

    pub(crate) fn get_mut(&mut self, idx: u32) -> Option<&mut T> {
        if *self.used.get(idx as usize)? {
            self.items.get_mut(idx as usize)
        } else {
            None
        }
    }

    /// Heap bytes of the slab itself plus what `extra` says each element
    /// owns.
    pub(crate) fn heap_bytes(&self, extra: impl Fn(&T) -> usize) -> usize {
        self.items.capacity() * core::mem::size_of::<T>()
            + self.used.capacity()
            + self.free.capacity() * 4
            + self.items.iter().map(extra).sum::<usize>()
    }

    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            capacity: self.cap,
            in_use: self.in_use,
            high_water: self.high_water,
            constructed: self.items.len(),
        }
    }
}

/// A window pool and the global pool seen together: allocation tries the
/// window first, then the global pool.
#[derive(Debug)]
pub(crate) struct Pools<'a, T> {
    pub(crate) local: &'a mut Slab<T>,
    pub(crate) global: &'a mut Slab<T>,
}

impl<T: Default> Pools<'_, T> {
    pub(crate) fn alloc(&mut self) -> Option<ElemRef> {
        if let Some(idx) = self.local.alloc() {
            return Some(ElemRef {
                pool: PoolKind::Window,
                idx,
            });
        }
        self.global.alloc().map(|idx| ElemRef {
            pool: PoolKind::Global,
            idx,
        })
    }

    pub(crate) fn free(&mut self, r: ElemRef) -> bool {
        match r.pool {
            PoolKind::Window => self.local.free(r.idx),
            PoolKind::Global => self.global.free(r.idx),
        }
    }

    pub(crate) fn get(&self, r: ElemRef) -> Option<&T> {
        match r.pool {
            PoolKind::Window => self.local.get(r.idx),
            PoolKind::Global => self.global.get(r.idx),
        }
    }

    pub(crate) fn get_mut(&mut self, r: ElemRef) -> Option<&mut T> {
        match r.pool {
            PoolKind::Window => self.local.get_mut(r.idx),
            PoolKind::Global => self.global.get_mut(r.idx),
        }
    }
}
