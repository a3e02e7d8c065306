//! A small, fast, well-mixing hasher for the matcher's integer keys.
//!
//! Keys are packed envelopes (at most 128 bits). The std SipHash costs more
//! than the rest of a match; rustc's FxHash mixes too little for hashbrown,
//! which takes its control bits from the top of the hash and would therefore
//! put tags that differ only in low bits (e.g. multiples of a bucket count)
//! into the same group. A folded 64×64→128 multiply mixes every input bit into
//! both halves at the cost of one `mul`.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::HashMap;

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = u128::from(a).wrapping_mul(u128::from(b));
    (p as u64) ^ ((p >> 64) as u64)
}

/// The hasher state: a folded 64×64→128 multiply per word. Meant for
/// process-private integer keys (ids, packed envelopes), not for keys an
/// adversary chooses (no DoS resistance). Also used by shmem-onesided's
/// request maps.
#[derive(Debug, Default, Clone, Copy)]
pub struct FoldHasher {
    h: u64,
}

impl Hasher for FoldHasher {
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
        self.h = fold_mul(self.h ^ v ^ K0, K1);
    }

    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }

    #[inline]
    fn write_u128(&mut self, v: u128) {
        self.h = fold_mul((v as u64) ^ K0 ^ self.h, ((v >> 64) as u64) ^ K1);
    }
}

/// A `HashMap` with [`FoldHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FoldHasher>>;
