//! An O(1)-memory summary of a multiset of sample ids, additive across ranks.

use crate::splitmix::splitmix64;

/// Key of the hash column, so the summary is not a function of plain sums alone.
const HASH_KEY: u64 = 0x6669_6e67_6572_7072; // "fingerpr"

/// Count, sum, sum of a keyed 64-bit hash, and XOR of a multiset of ids (all wrapping).
///
/// Adding the fingerprints of every rank's stream gives the fingerprint of their union; it
/// equals the fingerprint of `[0, n)` (plus declared padding) only if no sample is missing
/// or repeated — up to a 2^-64-scale chance for the keyed hash sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint {
    /// Number of ids (wrapping).
    pub count: u64,
    /// Sum of the ids (wrapping).
    pub sum: u64,
    /// Sum of a keyed 64-bit hash of each id (wrapping).
    pub hash_sum: u64,
    /// XOR of the ids.
    pub xor: u64,
}

impl Fingerprint {
    /// Adds one id.
    #[inline]
    pub fn add(&mut self, id: u64) {
        self.count = self.count.wrapping_add(1);
        self.sum = self.sum.wrapping_add(id);
        self.hash_sum = self.hash_sum.wrapping_add(splitmix64(id ^ HASH_KEY_MIXED));
        self.xor ^= id;
    }

    /// Removes one id (added before).
    #[inline]
    pub fn remove(&mut self, id: u64) {
        self.count = self.count.wrapping_sub(1);
        self.sum = self.sum.wrapping_sub(id);
        self.hash_sum = self.hash_sum.wrapping_sub(splitmix64(id ^ HASH_KEY_MIXED));
        self.xor ^= id;
    }

    /// Adds every id of `ids`.
    pub fn add_all(&mut self, ids: &[u64]) {
        for &id in ids {
            self.add(id);
        }
    }

    /// The union of two multisets.
    pub fn merge(&self, other: &Fingerprint) -> Fingerprint {
        Fingerprint {
            count: self.count.wrapping_add(other.count),
            sum: self.sum.wrapping_add(other.sum),
            hash_sum: self.hash_sum.wrapping_add(other.hash_sum),
            xor: self.xor ^ other.xor,
        }
    }

    /// Words of [`Fingerprint::to_words`].
    pub const WORDS: usize = 4;

    /// The four columns as words, for a fixed-size record.
    pub fn to_words(&self) -> [u64; Self::WORDS] {
        [self.count, self.sum, self.hash_sum, self.xor]
    }

    /// The fingerprint of the first [`Fingerprint::WORDS`] of `w` (at least that many).
    pub fn from_words(w: &[u64]) -> Fingerprint {
        Fingerprint {
            count: w[0],
            sum: w[1],
            hash_sum: w[2],
            xor: w[3],
        }
    }

    /// The fingerprint of the ids `[lo, hi)`.
    pub fn of_range(lo: u64, hi: u64) -> Fingerprint {
        let mut f = Fingerprint::default();
        for id in lo..hi {
            f.add(id);
        }
        f
    }
}

const HASH_KEY_MIXED: u64 = splitmix64(HASH_KEY);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_the_union_and_detects_swaps() {
        let all = Fingerprint::of_range(0, 100);
        let halves = Fingerprint::of_range(0, 50).merge(&Fingerprint::of_range(50, 100));
        assert_eq!(all, halves);
        // Same count, sum and xor ({1, 6} vs {2, 5}: 7 and 7, 7 and 7) but another multiset.
        let mut a = Fingerprint::default();
        a.add_all(&[1, 6]);
        let mut b = Fingerprint::default();
        b.add_all(&[2, 5]);
        assert_eq!((a.count, a.sum), (b.count, b.sum));
        assert_ne!(a, b);
    }
}
