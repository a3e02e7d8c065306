//! The symmetric-heap allocator (`shmem_malloc`-like).
//!
//! Every rank owns a heap region of the same size in the node segment. The
//! allocator state is private to the owning process and deterministic
//! (address-ordered first fit with coalescing), so ranks that perform the same
//! sequence of [`SymHeap::alloc`]/[`SymHeap::free`] calls get the same offsets:
//! an offset is then a *symmetric address*, valid on every PE, as with
//! OpenSHMEM's `shmem_malloc`.

use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// Smallest alignment of every block (one cache line).
pub const MIN_ALIGN: u64 = 64;

/// A first-fit allocator over `[0, size)`.
#[derive(Debug, Clone)]
pub struct SymHeap {
    size: u64,
    /// Free blocks: offset → length, never adjacent (always coalesced).
    free: BTreeMap<u64, u64>,
    /// Live blocks: offset → length.
    live: BTreeMap<u64, u64>,
}

impl SymHeap {
    /// An empty heap of `size` bytes (rounded down to [`MIN_ALIGN`]).
    pub fn new(size: u64) -> Self {
        let size = size - size % MIN_ALIGN;
        let mut free = BTreeMap::new();
        if size > 0 {
            free.insert(0, size);
        }
        SymHeap {
            size,
            free,
            live: BTreeMap::new(),
        }
    }

    /// Heap size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes in live blocks.
    pub fn used(&self) -> u64 {
        self.live.values().sum()
    }

    /// Largest free block.
    pub fn largest_free(&self) -> u64 {
        self.free.values().copied().max().unwrap_or(0)
    }

    /// Allocates `len` bytes aligned to `align` (a power of two; at least
    /// [`MIN_ALIGN`] is used). Returns the block's offset.
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        if !align.is_power_of_two() {
            return Err(Error::InvalidArgument("alignment must be a power of two"));
        }
        let align = align.max(MIN_ALIGN);
        let Some(len) = len.max(1).checked_next_multiple_of(MIN_ALIGN) else {
            return Err(Error::HeapExhausted {
                requested: len,
                largest_free: self.largest_free(),
            });
        };
        let found = self.free.iter().find_map(|(&off, &flen)| {
            let start = off.checked_next_multiple_of(align)?;
            let end = start.checked_add(len)?;
            (end <= off + flen).then_some((off, flen, start, end))
        });
        let Some((off, flen, start, end)) = found else {
            return Err(Error::HeapExhausted {
                requested: len,
                largest_free: self.largest_free(),
            });
        };
        self.free.remove(&off);
        if start > off {
            self.free.insert(off, start - off);
        }
        if off + flen > end {
            self.free.insert(end, off + flen - end);
        }
        self.live.insert(start, len);
        Ok(start)
    }

    /// Frees the block at `offset`. Freeing an offset that is not a live block
    /// is an error (and changes nothing).
    pub fn free(&mut self, offset: u64) -> Result<()> {
        let Some(len) = self.live.remove(&offset) else {
            return Err(Error::InvalidArgument(
                "free of an offset that is not a live block",
            ));
        };
        let mut start = offset;
        let mut end = offset + len;
        if let Some((&poff, &plen)) = self.free.range(..offset).next_back() {
            if poff + plen == start {
                self.free.remove(&poff);
                start = poff;
            }
        }
        if let Some(&nlen) = self.free.get(&end) {
            self.free.remove(&end);
            end += nlen;
        }
        self.free.insert(start, end - start);
        Ok(())
    }

    /// Length of the live block at `offset`, if any.
    pub fn block_len(&self, offset: u64) -> Option<u64> {
        self.live.get(&offset).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_fit_and_coalesce() {
        let mut h = SymHeap::new(1024);
        let a = h.alloc(100, 1).unwrap();
        let b = h.alloc(64, 1).unwrap();
        let c = h.alloc(1, 256).unwrap();
        assert_eq!((a, b, c), (0, 128, 256));
        h.free(b).unwrap();
        h.free(a).unwrap();
        assert_eq!(h.alloc(192, 1).unwrap(), 0, "a and b coalesced");
        assert!(h.free(7).is_err());
        assert!(matches!(
            h.alloc(2048, 1),
            Err(Error::HeapExhausted {
                requested: 2048,
                ..
            })
        ));
    }

    #[test]
    fn same_calls_same_offsets() {
        let run = || {
            let mut h = SymHeap::new(1 << 20);
            let v: Vec<u64> = (1..50).map(|i| h.alloc(i * 37, 64).unwrap()).collect();
            for o in v.iter().step_by(3) {
                h.free(*o).unwrap();
            }
            (v, h.alloc(500, 128).unwrap())
        };
        assert_eq!(run(), run());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// Live blocks never overlap, stay in bounds, and freeing everything
        /// restores one free block.
        #[test]
        fn blocks_disjoint(ops in proptest::collection::vec((0u64..3000, 0u32..4, any::<bool>()), 1..60)) {
            let mut h = SymHeap::new(16 * 1024);
            let mut live: Vec<(u64, u64)> = Vec::new();
            for (len, al, free_one) in ops {
                if free_one && !live.is_empty() {
                    let (o, _) = live.remove(len as usize % live.len());
                    h.free(o).unwrap();
                } else if let Ok(o) = h.alloc(len, 1 << (al * 3)) {
                    prop_assert_eq!(o % (1u64 << (al * 3)).max(MIN_ALIGN), 0);
                    let l = h.block_len(o).unwrap();
                    prop_assert!(l >= len && o + l <= h.size());
                    for &(p, pl) in &live {
                        prop_assert!(o + l <= p || p + pl <= o, "overlap");
                    }
                    live.push((o, l));
                }
            }
            for (o, _) in live {
                h.free(o).unwrap();
            }
            prop_assert_eq!(h.largest_free(), h.size());
            prop_assert_eq!(h.used(), 0);
        }
    }
}
