//! block-v1 and block-v2: a locality-aware permutation for datasets bigger than RAM.
//!
//! Samples `[0, n)` are cut into blocks of `block_size` consecutive samples (the last one
//! may be partial). The blocks are put in a keyed permutation's order and concatenated;
//! that sequence of `n` samples is cut into aligned windows of `window_blocks · block_size`
//! positions, and the samples inside each window are shuffled together (the permutation
//! keyed by the window). block-v1 is built on perm-v1, block-v2 on perm-v2 (the same
//! construction, the same keys).
//!
//! An aligned window of positions therefore holds samples of at most `window_blocks`
//! blocks, plus one when the partial block sits inside it: a reader touches a few large
//! contiguous regions per window instead of one small random region per sample.
//! O(1) memory, O(1) both ways.

use crate::error::{check_below, Error};
use crate::order::SampleOrder;
use crate::permutation::{Permutation, Version};
use crate::splitmix::chain;

pub use crate::algorithm::BLOCK_ALGORITHMS;

/// The id of the block order of new runs: block-v2.
pub const BLOCK_ALGORITHM: &str = BLOCK_ALGORITHMS[1];

/// Domain-separates the block order's keys from every other use of the seed.
const BLOCK_TAG: u64 = 0x626c_6f63_6b2d_7631; // "block-v1"

/// The block-wise permutation of `[0, n)`.
#[derive(Clone, Debug)]
pub struct BlockPermutation {
    n: u64,
    block_size: u64,
    window_blocks: u64,
    seed: u64,
    epoch: u64,
    /// The permutation the order is built on.
    version: Version,
    /// The order of the blocks.
    blocks: Permutation,
    /// Samples of the last block (`block_size` when `n` is a multiple of it).
    last_block_len: u64,
    /// Where the last block sits in the block order.
    last_block_slot: u64,
}

impl BlockPermutation {
    /// The block-v1 order of `[0, n)` for `(seed, epoch)`.
    pub fn new(
        n: u64,
        block_size: u64,
        window_blocks: u64,
        seed: u64,
        epoch: u64,
    ) -> Result<Self, Error> {
        Self::of_version(Version::V1, n, block_size, window_blocks, seed, epoch)
    }

    /// The block order of `[0, n)` for `(seed, epoch)` built on `version`.
    pub fn of_version(
        version: Version,
        n: u64,
        block_size: u64,
        window_blocks: u64,
        seed: u64,
        epoch: u64,
    ) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        if block_size == 0 || window_blocks == 0 {
            return Err(Error::Invalid(format!(
                "block_size and window_blocks must be at least 1, got {block_size} and \
                 {window_blocks}"
            )));
        }
        if block_size.checked_mul(window_blocks).is_none() {
            return Err(Error::Invalid(format!(
                "a window of {window_blocks} blocks of {block_size} samples exceeds 2**64 - 1"
            )));
        }
        let num_blocks = n.div_ceil(block_size);
        let key = chain(BLOCK_TAG, &[seed]);
        let blocks = Permutation::of_version(version, num_blocks, key, epoch, 0)?;
        let last_block_slot = blocks.inverse(num_blocks - 1)?;
        Ok(BlockPermutation {
            n,
            block_size,
            window_blocks,
            seed,
            epoch,
            version,
            last_block_len: n - (num_blocks - 1) * block_size,
            last_block_slot,
            blocks,
        })
    }

    /// Samples in a block.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Blocks in a window.
    pub fn window_blocks(&self) -> u64 {
        self.window_blocks
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The sample at `position`.
    pub fn forward(&self, position: u64) -> Result<u64, Error> {
        check_below("position", position, self.n)?;
        Ok(self.at(position))
    }

    /// Positions in a full window: `window_blocks · block_size`.
    pub fn window_len(&self) -> u64 {
        self.window_blocks * self.block_size
    }

    /// Positions `[start, end)` of window `w` (the last one may be shorter).
    pub fn window_range(&self, w: u64) -> (u64, u64) {
        let start = w.saturating_mul(self.window_len()).min(self.n);
        (start, start.saturating_add(self.window_len()).min(self.n))
    }

    /// The window's own shuffle: the permutation over its positions, keyed by the window.
    /// With `many` positions to map, small perm-v1 windows get its lookup table (its cycle
    /// walks are long below 2^16 positions); for a few, building it would cost more.
    /// perm-v2 has no walk to save: its small orders are their O(len) table.
    fn window_order(&self, w: u64, many: bool) -> Permutation {
        let (start, end) = self.window_range(w);
        let (len, key) = (end - start, chain(BLOCK_TAG, &[self.seed, 1]));
        let order = match (self.version, many) {
            (Version::V1, false) => Permutation::untabled(len, key, self.epoch, w),
            (version, _) => Permutation::of_version(version, len, key, self.epoch, w),
        };
        order.expect("windows are not empty")
    }

    /// The sample at position `q` of the concatenated block sequence.
    #[inline]
    fn sample_of_sequence(&self, q: u64) -> u64 {
        let (bs, last_start) = (self.block_size, self.last_block_slot * self.block_size);
        let (slot, offset) = if q < last_start {
            (q / bs, q % bs)
        } else if q < last_start + self.last_block_len {
            (self.last_block_slot, q - last_start)
        } else {
            let after = q - last_start - self.last_block_len;
            (self.last_block_slot + 1 + after / bs, after % bs)
        };
        self.blocks.forward_unchecked(slot) * bs + offset
    }

    /// The position in the concatenated block sequence of `sample`.
    #[inline]
    fn sequence_of_sample(&self, sample: u64) -> Result<u64, Error> {
        let (block, offset) = (sample / self.block_size, sample % self.block_size);
        let slot = self.blocks.inverse(block)?;
        let start = if slot <= self.last_block_slot {
            slot * self.block_size
        } else {
            (slot - 1) * self.block_size + self.last_block_len
        };
        Ok(start + offset)
    }

    /// Maps positions (all `< n`) to samples, building each window's order once per run
    /// of positions in the same window.
    fn map_positions(&self, positions: &mut [u64]) {
        let window_len = self.window_len();
        let mut rest = positions;
        while let Some(&first) = rest.first() {
            let w = first / window_len;
            let run = rest.iter().take_while(|&&p| p / window_len == w).count();
            let (here, later) = rest.split_at_mut(run);
            let (start, end) = self.window_range(w);
            // A table pays off once the walks it saves (2^16 / len steps a position) add up.
            let order = self.window_order(w, run >= 64 || run * 64 >= (end - start) as usize);
            for p in here.iter_mut() {
                let q = w * window_len + order.forward_unchecked(*p - w * window_len);
                *p = self.sample_of_sequence(q);
            }
            rest = later;
        }
    }
}

impl BlockPermutation {
    /// Maps samples (all `< n`) to positions: the blocks' inverse batched, then each
    /// window's order inverted once per run of samples in the same window.
    fn invert_samples(&self, samples: &mut [u64]) {
        let (bs, window_len) = (self.block_size, self.window_len());
        let mut blocks: Vec<u64> = samples.iter().map(|s| s / bs).collect();
        self.blocks.invert_in_place(&mut blocks);
        for (s, &slot) in samples.iter_mut().zip(&blocks) {
            let start = if slot <= self.last_block_slot {
                slot * bs
            } else {
                (slot - 1) * bs + self.last_block_len
            };
            *s = start + *s % bs; // its place in the concatenated block sequence
        }
        let mut rest = samples;
        while let Some(&first) = rest.first() {
            let w = first / window_len;
            let run = rest.iter().take_while(|&&q| q / window_len == w).count();
            let (here, later) = rest.split_at_mut(run);
            let (start, end) = self.window_range(w);
            let order = self.window_order(w, run >= 64 || run * 64 >= (end - start) as usize);
            for q in here.iter_mut() {
                *q -= w * window_len;
            }
            order.invert_in_place(here);
            for q in here.iter_mut() {
                *q += w * window_len;
            }
            rest = later;
        }
    }
}

impl SampleOrder for BlockPermutation {
    fn algorithm(&self) -> &'static str {
        self.version.id(&BLOCK_ALGORITHMS)
    }

    fn len(&self) -> u64 {
        self.n
    }

    fn at(&self, position: u64) -> u64 {
        let w = position / self.window_len();
        let order = self.window_order(w, false);
        let q = w * self.window_len() + order.forward_unchecked(position % self.window_len());
        self.sample_of_sequence(q)
    }

    fn position_of(&self, sample: u64) -> Result<u64, Error> {
        check_below("sample", sample, self.n)?;
        let q = self.sequence_of_sample(sample)?;
        let w = q / self.window_len();
        let local = self.window_order(w, false).inverse(q % self.window_len())?;
        Ok(w * self.window_len() + local)
    }

    fn map_in_place(&self, positions: &mut [u64]) {
        self.map_positions(positions)
    }

    fn invert_in_place(&self, samples: &mut [u64]) {
        self.invert_samples(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sample once, `position_of` inverts `at`, batched equals scalar.
    fn assert_bijection(p: &BlockPermutation) {
        let n = p.len();
        let mut all: Vec<u64> = (0..n).collect();
        p.map_in_place(&mut all);
        let mut seen = vec![false; n as usize];
        for (i, &x) in all.iter().enumerate() {
            assert!(!seen[x as usize], "{p:?}: sample {x} twice");
            seen[x as usize] = true;
            // The scalar paths walk tiny windows' cycles (slow): every few positions.
            if i % 7 == 0 || i + 1 == all.len() {
                assert_eq!(x, p.at(i as u64));
                assert_eq!(p.position_of(x).unwrap(), i as u64);
            }
        }
        let mut back = all.clone();
        p.invert_in_place(&mut back);
        assert!(back.iter().copied().eq(0..n), "{p:?}: the batched inverse");
    }

    /// Blocks touched by each aligned window of `window_blocks · block_size` positions.
    fn blocks_per_window(p: &BlockPermutation) -> Vec<usize> {
        let n = p.len();
        let mut all: Vec<u64> = (0..n).collect();
        p.map_in_place(&mut all);
        all.chunks(p.window_len() as usize)
            .map(|w| {
                let mut blocks: Vec<u64> = w.iter().map(|x| x / p.block_size()).collect();
                blocks.sort();
                blocks.dedup();
                blocks.len()
            })
            .collect()
    }

    #[test]
    fn bijective_with_the_locality_bound_at_boundary_sizes() {
        for (block_size, window_blocks) in [(1, 1), (1, 4), (4, 1), (8, 3), (16, 4), (5, 7)] {
            let full = block_size * window_blocks;
            for n in [
                1,
                2,
                block_size - 1,
                block_size,
                block_size + 1,
                full - 1,
                full,
                full + 1,
                3 * full + 2,
                1000,
                1001,
            ] {
                // Windows under 16 positions walk long cycles in perm-v1's 2^16 domain:
                // small n only there, to keep the test fast.
                if n == 0 || (full < 16 && n > 100) {
                    continue;
                }
                for (epoch, version) in [(0, Version::V1), (1, Version::V1), (0, Version::V2)] {
                    let p = BlockPermutation::of_version(
                        version,
                        n,
                        block_size,
                        window_blocks,
                        3,
                        epoch,
                    )
                    .unwrap();
                    assert_bijection(&p);
                    let touched = blocks_per_window(&p);
                    let partial = n % block_size != 0;
                    assert!(
                        touched
                            .iter()
                            .all(|&b| b as u64 <= window_blocks + partial as u64),
                        "n={n} bs={block_size} wb={window_blocks}: {touched:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn epochs_and_seeds_move_blocks_and_reshuffle_windows() {
        let a = BlockPermutation::new(4096, 64, 4, 0, 0).unwrap();
        let b = BlockPermutation::new(4096, 64, 4, 0, 1).unwrap();
        let c = BlockPermutation::new(4096, 64, 4, 1, 0).unwrap();
        let first = |p: &BlockPermutation| (0..256).map(|i| p.at(i)).collect::<Vec<_>>();
        assert_ne!(first(&a), first(&b));
        assert_ne!(first(&a), first(&c));
        // Inside a window the samples are shuffled, not read block by block.
        let w: Vec<u64> = first(&a);
        assert!(w.windows(2).filter(|x| x[1] == x[0] + 1).count() < 32);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert_eq!(
            BlockPermutation::new(0, 4, 4, 0, 0).unwrap_err(),
            Error::EmptyDomain
        );
        assert!(BlockPermutation::new(10, 0, 4, 0, 0).is_err());
        assert!(BlockPermutation::new(10, 4, 0, 0, 0).is_err());
        assert!(BlockPermutation::new(10, u64::MAX, 2, 0, 0).is_err());
        let p = BlockPermutation::new(10, 4, 2, 0, 0).unwrap();
        assert!(p.position_of(10).is_err());
        // The largest n works both ways.
        let big = BlockPermutation::new(u64::MAX, 1 << 20, 8, 1, 1).unwrap();
        for i in [0, 1, u64::MAX / 2, u64::MAX - 1] {
            assert_eq!(big.position_of(big.at(i)).unwrap(), i);
        }
    }
}
