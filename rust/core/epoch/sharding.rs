//! What an epoch of sharding is, in one place: the fields every rank must agree on, the
//! order they imply, that order's algorithm id, the dealing, the partition at a resume
//! point and the resume limit.

use std::sync::Arc;

use crate::block::{BlockPermutation, BLOCK_ALGORITHMS};
use crate::dealing::Dealing;
use crate::epoch::EpochSpec;
use crate::error::Error;
use crate::exclusion::{Excluding, Exclusions};
use crate::order::{Identity, Order};
use crate::partition::Partition;
use crate::permutation::{Permutation, Version, ALGORITHM_V1};

/// The algorithm id of the unshuffled order (`shuffle = false`).
pub const IDENTITY_ALGORITHM: &str = "identity";

/// One epoch's sharding: `n` samples over `num_replicas` ranks.
///
/// The order is the identity without `shuffle`, else the keyed permutation of
/// [`EpochSpec::permutation`] (perm-v2 unless set by [`Sharding::with_permutation`]), or
/// with `block_size > 0` the block order built on it (block-v2, block-v1);
/// [`Sharding::algorithm`] names the one used, and is what state dicts, certificates,
/// plans and partitions record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sharding {
    /// The fields every epoch has: samples, ranks, seed, epoch, shuffle, `drop_last` (the
    /// tail that does not fill a round of ranks), the permutation.
    pub spec: EpochSpec,
    /// Samples per block of the block order (`0`: no blocks).
    pub block_size: u64,
    /// Blocks shuffled together in the block order (`0` without blocks).
    pub window_blocks: u64,
    /// How a pass's positions go to (rank, local index): round-robin unless set by
    /// [`Sharding::with_dealing`].
    pub dealing: Dealing,
    /// Samples never to read: the order is dealt without them ([`Exclusions::apply`]).
    pub exclusions: Exclusions,
}

impl Sharding {
    /// The epoch of `spec` in a block order of `block_size` samples per block,
    /// `window_blocks` blocks shuffled together (`0`, `0`: no blocks): checked together.
    pub fn of_spec(spec: EpochSpec, block_size: u64, window_blocks: u64) -> Result<Self, Error> {
        let (spec, shuffle) = (spec.checked()?, spec.shuffle);
        if block_size > 0 && !shuffle {
            return Err(Error::Invalid(
                "block_size=... orders blocks for a shuffle: it needs shuffle=True".into(),
            ));
        }
        if block_size > 0 && window_blocks == 0 {
            return Err(Error::Invalid(
                "block_size=... needs window_blocks=... (the blocks shuffled together), >= 1"
                    .into(),
            ));
        }
        if block_size == 0 && window_blocks > 0 {
            return Err(Error::Invalid(
                "window_blocks=... needs block_size=...".into(),
            ));
        }
        Ok(Sharding {
            spec,
            block_size,
            window_blocks,
            dealing: Dealing::ROUND_ROBIN,
            exclusions: Exclusions::default(),
        })
    }

    /// This epoch with its positions dealt by `dealing`.
    pub fn with_dealing(self, dealing: Dealing) -> Self {
        Sharding { dealing, ..self }
    }

    /// This epoch shuffled by `permutation`'s construction (its blocks too).
    pub fn with_permutation(mut self, permutation: Version) -> Self {
        self.spec.permutation = permutation;
        self
    }

    /// This epoch without the samples of `exclusions` (all below `n`).
    pub fn with_exclusions(self, exclusions: Exclusions) -> Result<Self, Error> {
        if let Some(&bad) = exclusions.ids().last().filter(|&&id| id >= self.spec.n) {
            return Err(Error::Invalid(format!(
                "excluded sample {bad} is out of range for n={}",
                self.spec.n
            )));
        }
        if exclusions.len() >= self.spec.n {
            return Err(Error::Invalid(format!(
                "every one of the {} samples is excluded: nothing is left to read",
                self.spec.n
            )));
        }
        Ok(Sharding { exclusions, ..self })
    }

    /// Positions per window of the block order (`0` without blocks): a window's
    /// samples are announced to a prefetching dataset before it is read.
    pub fn window_len(&self) -> u64 {
        self.block_size.saturating_mul(self.window_blocks)
    }

    /// Samples dealt in an epoch: `n` less the excluded.
    pub fn kept(&self) -> u64 {
        self.spec.n - self.exclusions.len()
    }

    /// The algorithm id of the order this epoch uses.
    pub fn algorithm(&self) -> &'static str {
        match (self.spec.shuffle, self.block_size) {
            (false, _) => IDENTITY_ALGORITHM,
            (true, 0) => self.spec.permutation.algorithm(),
            (true, _) => self.spec.permutation.id(&BLOCK_ALGORITHMS),
        }
    }

    /// Whether a state saved under `algorithm` (as recorded) resumes with this order.
    /// Before identity had its own id, an unshuffled epoch was recorded as perm-v1.
    pub fn accepts_algorithm(&self, algorithm: &str) -> bool {
        algorithm == self.algorithm() || (!self.spec.shuffle && algorithm == ALGORITHM_V1)
    }

    /// The order of this epoch, without the excluded samples.
    pub fn order(&self) -> Result<Order, Error> {
        self.exclusions.apply(self.full_order()?)
    }

    /// The order of this epoch over all `n` samples.
    fn full_order(&self) -> Result<Order, Error> {
        Ok(match (self.spec.shuffle, self.block_size) {
            (false, _) => Arc::new(Identity::new(self.spec.n)?),
            (true, 0) => Arc::new(Permutation::of_version(
                self.spec.permutation,
                self.spec.n,
                self.spec.seed,
                self.spec.epoch,
                0,
            )?),
            (true, _) => Arc::new(BlockPermutation::of_version(
                self.spec.permutation,
                self.spec.n,
                self.block_size,
                self.window_blocks,
                self.spec.seed,
                self.spec.epoch,
            )?),
        })
    }

    /// The split across ranks of positions `[start, ...)`: the epoch resumed after
    /// `start` consumed positions. A `start` past the end leaves nothing to deal (a state
    /// saved by more ranks, whose padding went further, resumed by fewer).
    pub fn partition(&self, start: u64) -> Result<Partition, Error> {
        self.partition_over(self.order()?, start)
    }

    /// As [`Sharding::partition`], over `order`: this epoch's [`Sharding::order`], built
    /// once by a caller that keeps it (a small `n` builds a lookup table).
    pub fn partition_over(&self, order: Order, start: u64) -> Result<Partition, Error> {
        Partition::dealt(
            self.kept(),
            self.spec.num_replicas,
            start,
            self.spec.drop_last,
            order,
            self.dealing,
        )
    }

    /// The most global positions an epoch can consume: `n`, plus less than one round of
    /// ranks of padding without `drop_last`.
    pub fn max_consumed(&self) -> u64 {
        if self.spec.drop_last {
            self.kept()
        } else {
            self.kept().saturating_add(self.spec.num_replicas - 1)
        }
    }

    /// This epoch's resume point for a state saved by `saved` (the same order, perhaps
    /// fewer exclusions) after `consumed` of its positions: the kept samples keep their
    /// order, so the resume starts at the first sample `saved` had not reached, and the
    /// samples excluded since are skipped. Padding consumed past the end stays consumed.
    /// Refuses a `saved` set that is not part of this one (a sample no longer excluded
    /// may have been passed over unread).
    pub fn resume_from(&self, saved: &Sharding, consumed: u64) -> Result<u64, Error> {
        if (
            saved.spec.n,
            saved.spec.seed,
            saved.spec.epoch,
            saved.algorithm(),
        ) != (
            self.spec.n,
            self.spec.seed,
            self.spec.epoch,
            self.algorithm(),
        ) {
            return Err(Error::Invalid(
                "the state was saved for another order (n, seed, epoch or algorithm differ)".into(),
            ));
        }
        if let Some(id) = self.exclusions.first_missing(&saved.exclusions) {
            return Err(Error::Invalid(format!(
                "the state was saved with sample {id} excluded, this sampler reads it: a \
                 resume may only exclude more (pass exclude= with every id the run excluded \
                 so far, and any new ones)"
            )));
        }
        if self.exclusions == saved.exclusions {
            return Ok(consumed);
        }
        let kept = saved.kept();
        if consumed >= kept {
            return Ok(self.kept() + (consumed - kept));
        }
        let full = saved.full_order()?;
        let raw = if saved.exclusions.is_empty() {
            consumed
        } else {
            Excluding::new(full.clone(), &saved.exclusions)?.raw_position(consumed)
        };
        Ok(Excluding::new(full, &self.exclusions)?.position_of_raw(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sharding(n: u64, w: u64, shuffle: bool, block: u64) -> Sharding {
        Sharding::of_spec(
            EpochSpec {
                seed: 3,
                epoch: 1,
                shuffle,
                ..EpochSpec::new(n, w)
            },
            block,
            if block > 0 { 2 } else { 0 },
        )
        .unwrap()
    }

    #[test]
    fn the_algorithm_names_the_order_used() {
        for (shuffle, block, version, id) in [
            (false, 0, Version::V2, IDENTITY_ALGORITHM),
            (false, 0, Version::V1, IDENTITY_ALGORITHM),
            (true, 0, Version::V2, "perm-v2"),
            (true, 0, Version::V1, "perm-v1"),
            (true, 4, Version::V2, "block-v2"),
            (true, 4, Version::V1, "block-v1"),
        ] {
            let s = sharding(100, 3, shuffle, block).with_permutation(version);
            assert_eq!(s.algorithm(), id);
            assert_eq!(s.order().unwrap().algorithm(), id);
            assert_eq!(s.partition(0).unwrap().order().algorithm(), id);
        }
        // New runs: perm-v2 and the block order built on it.
        assert_eq!(sharding(100, 3, true, 0).algorithm(), crate::ALGORITHM);
        assert_eq!(
            sharding(100, 3, true, 4).algorithm(),
            crate::BLOCK_ALGORITHM
        );
        // An unshuffled epoch saved as perm-v1 (0.1, 0.2) still resumes; nothing else does.
        assert!(sharding(100, 3, false, 0).accepts_algorithm("perm-v1"));
        assert!(!sharding(100, 3, true, 4).accepts_algorithm("perm-v1"));
        assert!(!sharding(100, 3, true, 4).accepts_algorithm("block-v1"));
        assert!(!sharding(100, 3, true, 0).accepts_algorithm("identity"));
    }

    #[test]
    fn the_order_is_the_permutation_chosen() {
        for version in [Version::V1, Version::V2] {
            let s = sharding(1000, 3, true, 0).with_permutation(version);
            let want = Permutation::of_version(version, 1000, 3, 1, 0).unwrap();
            let order = s.order().unwrap();
            assert!((0..1000).all(|p| order.at(p) == want.forward(p).unwrap()));
            let blocks = sharding(1000, 3, true, 4).with_permutation(version);
            let want = BlockPermutation::of_version(version, 1000, 4, 2, 3, 1).unwrap();
            let order = blocks.order().unwrap();
            assert!((0..1000).all(|p| order.at(p) == want.forward(p).unwrap()));
        }
    }

    #[test]
    fn bad_combinations_are_refused_with_the_fix() {
        let err = Sharding::of_spec(
            EpochSpec {
                shuffle: false,
                ..EpochSpec::new(10, 2)
            },
            4,
            2,
        )
        .unwrap_err();
        assert!(err.to_string().contains("needs shuffle=True"), "{err}");
        let err = Sharding::of_spec(EpochSpec::new(10, 2), 4, 0).unwrap_err();
        assert!(err.to_string().contains("needs window_blocks"), "{err}");
        let err = Sharding::of_spec(EpochSpec::new(10, 2), 0, 3).unwrap_err();
        assert!(err.to_string().contains("needs block_size"), "{err}");
        assert_eq!(
            Sharding::of_spec(EpochSpec::new(0, 2), 0, 0),
            Err(Error::EmptyDomain)
        );
    }

    #[test]
    fn the_resume_limit_is_the_end_of_the_padded_epoch() {
        let padded = sharding(10, 4, true, 0);
        assert_eq!(padded.max_consumed(), 13);
        assert_eq!(padded.partition(13).unwrap().num_samples(), 0);
        // Saved by 4 ranks at 13, resumed by 1: nothing left, not an error.
        assert_eq!(
            sharding(10, 1, true, 0)
                .partition(13)
                .unwrap()
                .num_samples(),
            0
        );
        let dropped = Sharding::of_spec(
            EpochSpec {
                drop_last: true,
                ..EpochSpec::new(10, 4)
            },
            0,
            0,
        )
        .unwrap();
        assert_eq!(dropped.max_consumed(), 10);
    }

    #[test]
    fn the_step_dealing_deals_whole_batches_and_covers_the_pass() {
        // Brute force: every position of the pass exactly once, in step order.
        let step = Dealing::new("step", 3, false).unwrap();
        let s = sharding(23, 3, true, 0).with_dealing(step);
        let part = s.partition(2).unwrap();
        assert_eq!(part.dealing(), &step);
        let (items, bs) = (part.num_samples(), 3);
        let mut seen = Vec::new();
        for step in 0..items.div_ceil(bs) {
            for rank in 0..3 {
                let count = bs.min(items - step * bs);
                let first = part.position(rank, step * bs);
                seen.extend(first..first + count);
            }
        }
        assert_eq!(seen, (2..2 + items * 3).collect::<Vec<_>>());
        // Dropping the last partial batch keeps whole batches: the pass ends earlier.
        let dropping = s.with_dealing(Dealing::new("step", 3, true).unwrap());
        let part = dropping.partition(2).unwrap();
        assert_eq!((part.num_samples(), part.end()), (6, 20));
        assert_eq!(part.dropped(), 3);
    }

    #[test]
    fn a_resume_with_more_exclusions_reads_the_rest_of_the_kept_samples() {
        let n = 200;
        let base = Sharding::of_spec(
            EpochSpec {
                seed: 7,
                epoch: 2,
                ..EpochSpec::new(n, 3)
            },
            0,
            0,
        )
        .unwrap();
        let full: Vec<u64> = {
            let order = base.order().unwrap();
            (0..n).map(|p| order.at(p)).collect()
        };
        let earlier = Exclusions::new((0..n).step_by(9).collect(), n).unwrap();
        let later =
            Exclusions::new((0..n).step_by(9).chain((1..n).step_by(13)).collect(), n).unwrap();
        let saved = base.clone().with_exclusions(earlier.clone()).unwrap();
        let now = base.clone().with_exclusions(later.clone()).unwrap();
        let read_before: Vec<u64> = full
            .iter()
            .copied()
            .filter(|s| !earlier.contains(*s))
            .collect();
        for consumed in [
            0,
            1,
            50,
            read_before.len() as u64 - 1,
            read_before.len() as u64,
            read_before.len() as u64 + 2,
        ] {
            let start = now.resume_from(&saved, consumed).unwrap();
            let order = now.order().unwrap();
            let rest: Vec<u64> = (start.min(order.len())..order.len())
                .map(|p| order.at(p))
                .collect();
            // Brute force: what the earlier run had not read, without the newly excluded.
            let unread = read_before.get(consumed as usize..).unwrap_or(&[]);
            let want: Vec<u64> = unread
                .iter()
                .copied()
                .filter(|s| !later.contains(*s))
                .collect();
            assert_eq!(rest, want, "consumed={consumed}");
        }
        // A set that lost an id is refused; the same set resumes as saved.
        let err = saved.resume_from(&now, 5).unwrap_err().to_string();
        assert!(err.contains("may only exclude more"), "{err}");
        assert_eq!(saved.resume_from(&saved, 17).unwrap(), 17);
        assert!(now
            .resume_from(
                &Sharding {
                    spec: EpochSpec {
                        seed: 8,
                        ..saved.spec
                    },
                    ..saved.clone()
                },
                0
            )
            .is_err());
    }
}
