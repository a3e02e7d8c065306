//! Handle tables: the objects behind the `int` handles this library gives
//! out.
//!
//! A [`Table`] maps `prefix | index` to an `Arc` of the object. The
//! prefix is MPICH's *indirect* kind prefix of the object type (bits
//! 30–31 `11`, bits 26–29 the kind), so a created handle never equals a
//! predefined or null handle, and a handle of one kind is never found in
//! another kind's table. Indices of freed handles are reused (most
//! recently freed first), as MPICH reuses its handle slots.

use std::sync::{Arc, PoisonError, RwLock};

/// Bits of a handle that hold the table index.
const INDEX_BITS: u32 = 26;
const INDEX_MASK: i32 = (1 << INDEX_BITS) - 1;

/// A table of objects of one kind, by handle.
#[derive(Debug)]
pub(crate) struct Table<T> {
    prefix: i32,
    slots: RwLock<Slots<T>>,
}

#[derive(Debug)]
struct Slots<T> {
    items: Vec<Option<Arc<T>>>,
    free: Vec<usize>,
}

impl<T> Table<T> {
    /// An empty table giving out handles `prefix | index`.
    pub(crate) const fn new(prefix: u32) -> Table<T> {
        Table {
            prefix: prefix as i32,
            slots: RwLock::new(Slots {
                items: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn index(&self, h: i32) -> Option<usize> {
        (h & !INDEX_MASK == self.prefix).then_some((h & INDEX_MASK) as usize)
    }

    /// Stores `v` and returns its new handle (`None` when the table is
    /// full: 2²⁶ live objects).
    pub(crate) fn insert(&self, v: T) -> Option<i32> {
        self.insert_arc(Arc::new(v))
    }

    /// [`insert`](Self::insert) of an object already shared.
    pub(crate) fn insert_arc(&self, v: Arc<T>) -> Option<i32> {
        let mut s = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        let i = match s.free.pop() {
            Some(i) => {
                s.items[i] = Some(v);
                i
            }
            None => {
                if s.items.len() > INDEX_MASK as usize {
                    return None;
                }
                s.items.push(Some(v));
                s.items.len() - 1
            }
        };
        Some(self.prefix | i as i32)
    }

    /// The object of handle `h`, if it is live in this table.
    pub(crate) fn get(&self, h: i32) -> Option<Arc<T>> {
        let i = self.index(h)?;
        let s = self.slots.read().unwrap_or_else(PoisonError::into_inner);
        s.items.get(i).and_then(Clone::clone)
    }

    /// Removes handle `h` and returns its object.
    pub(crate) fn remove(&self, h: i32) -> Option<Arc<T>> {
        let i = self.index(h)?;
        let mut s = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        let v = s.items.get_mut(i)?.take()?;
        s.free.push(i);
        Some(v)
    }

    /// Drops every object (at finalize).
    pub(crate) fn clear(&self) {
        let mut s = self.slots.write().unwrap_or_else(PoisonError::into_inner);
        s.items.clear();
        s.free.clear();
    }
}

/// The indirect prefixes by object kind (MPICH's kind numbers in bits
/// 26–29).
pub(crate) mod prefix {
    pub(crate) const COMM: u32 = 0xc400_0000;
    pub(crate) const GROUP: u32 = 0xc800_0000;
    pub(crate) const DATATYPE: u32 = 0xcc00_0000;
    pub(crate) const ERRHANDLER: u32 = 0xd400_0000;
    pub(crate) const OP: u32 = 0xd800_0000;
    pub(crate) const INFO: u32 = 0xdc00_0000;
    pub(crate) const WIN: u32 = 0xe000_0000;
    pub(crate) const KEYVAL: u32 = 0xe400_0000;
    pub(crate) const REQUEST: u32 = 0xec00_0000;
    /// Messages (MPICH's kind 12, unused by MPICH's own handles).
    pub(crate) const MESSAGE: u32 = 0xf000_0000;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_reuse_slots() {
        let t: Table<u32> = Table::new(prefix::COMM);
        let a = t.insert(1).unwrap();
        let b = t.insert(2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a as u32 & 0xfc00_0000, prefix::COMM);
        assert_eq!(*t.get(b).unwrap(), 2);
        assert_eq!(*t.remove(a).unwrap(), 1);
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none());
        let c = t.insert(3).unwrap();
        assert_eq!(c, a, "freed slot reused");
        // Handles of another kind, and predefined ones, are not found.
        assert!(t.get(crate::abi::MPI_COMM_WORLD).is_none());
        assert!(t.get(prefix::GROUP as i32).is_none());
    }
}
