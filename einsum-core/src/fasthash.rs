//! A fast, non-cryptographic hasher for maps keyed by the compiler's own data.
//!
//! The standard `HashMap` hashes with SipHash-1-3, which resists collision attacks on keys an
//! adversary chooses and costs about a nanosecond per byte. The exchange search's closure keys
//! a map by bit sets of up to a few hundred words and looks them up for every action of every
//! candidate; profiled at 72 devices, SipHash was a sixth of the search's evaluation. The keys
//! here come from the compiler, not from users, so a hash with no collision resistance against
//! an adversary is enough: a map's contents and lookups do not depend on the hasher, only its
//! iteration order does, and no caller iterates a [`FastMap`] where order changes a plan or a
//! figure.
//!
//! Kept rather than replaced by `foldhash` or `rustc-hash` (issue 36): either would change the
//! iteration order of every map, and one iteration does reach a message (the ILP's cost check
//! names the first invalid priced pair it meets in a `RepartitionPairs`); `foldhash`'s
//! default state is seeded per process; and [`FastHasher`] is public (the hasher of
//! `einsum_logical::RepartitionPairs`).

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A word-at-a-time hasher: each 8-byte word is xored into the state, which is then mixed by
/// a folded multiply (the 128-bit product's halves xored, as `foldhash` and `ahash` do), so
/// every input bit reaches every state bit.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher {
    hash: u64,
}

/// An odd constant with well-spread bits (the fractional part of π).
const SEED: u64 = 0x24_3f_6a_88_85_a3_08_d3;

impl FastHasher {
    fn add(&mut self, word: u64) {
        let product = u128::from(self.hash ^ word) * u128::from(SEED ^ 0x13_19_8a_2e_03_70_73_44);
        self.hash = (product as u64) ^ ((product >> 64) as u64) ^ SEED;
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` hashed by [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` hashed by [`FastHasher`].
pub type FastSet<T> = HashSet<T, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(x: &T) -> u64 {
        BuildHasherDefault::<FastHasher>::default().hash_one(x)
    }

    /// Equal keys hash equal, and nearby keys (one bit, one word, a longer slice) apart: the
    /// 4 096 single-bit sets of 64 words all hash differently.
    #[test]
    fn equal_keys_hash_equal_and_neighbours_apart() {
        assert_eq!(hash(&vec![1u64, 2, 3]), hash(&vec![1u64, 2, 3]));
        assert_ne!(hash(&vec![1u64, 2, 3]), hash(&vec![1u64, 2, 3, 0]));
        assert_ne!(hash(&(1usize, 2usize)), hash(&(2usize, 1usize)));
        let hashes: FastSet<u64> = (0..64 * 64)
            .map(|bit| {
                let mut words = vec![0u64; 64];
                words[bit / 64] = 1 << (bit % 64);
                hash(&words)
            })
            .collect();
        assert_eq!(hashes.len(), 64 * 64);
        let mut map: FastMap<&str, usize> = FastMap::default();
        map.insert("a", 1);
        assert_eq!(map.get("a"), Some(&1));
        assert_eq!(hash(&"abcdefghij"), hash(&String::from("abcdefghij")));
    }
}
