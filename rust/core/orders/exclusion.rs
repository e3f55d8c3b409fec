//! Exclusions: sample ids never to read (a takedown, a corrupt shard), removed from an
//! order without re-keying it.
//!
//! [`Excluding`] is the epoch's order with the positions of the excluded samples taken
//! out: its position `p` is the `p`-th position of the full order whose sample is kept, so
//! the kept samples keep their relative order, and a set that grows between a save and a
//! resume skips only the newly excluded (see [`Excluding::raw_position`]). It stores the
//! excluded samples' positions in the full order, sorted: O(|excluded|) memory; a position
//! costs a binary search, or a merge step when positions come in increasing order.

use std::sync::Arc;

use crate::error::{check_below, Error};
use crate::order::{Order, SampleOrder};
use crate::splitmix::splitmix64;

/// A set of sample ids below `n`: sorted and distinct (duplicates given are one).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Exclusions {
    ids: Arc<[u64]>,
    digest: u64,
}

impl Exclusions {
    /// The set of `ids` (any order, repeats allowed), each checked below `n`.
    pub fn new(mut ids: Vec<u64>, n: u64) -> Result<Exclusions, Error> {
        if let Some(&bad) = ids.iter().find(|&&id| id >= n) {
            return Err(Error::Invalid(format!(
                "excluded sample {bad} is out of range: the dataset has {n} samples (ids 0 to {})",
                n.saturating_sub(1)
            )));
        }
        ids.sort_unstable();
        ids.dedup();
        if ids.len() as u64 >= n {
            return Err(Error::Invalid(format!(
                "every one of the {n} samples is excluded: nothing is left to read"
            )));
        }
        // Order-independent by construction (the ids are sorted); the count is mixed in.
        let digest = ids
            .iter()
            .fold(splitmix64(ids.len() as u64), |h, &id| splitmix64(h ^ id));
        Ok(Exclusions {
            ids: ids.into(),
            digest,
        })
    }

    /// The excluded ids, sorted.
    pub fn ids(&self) -> &[u64] {
        &self.ids
    }

    /// How many ids are excluded.
    pub fn len(&self) -> u64 {
        self.ids.len() as u64
    }

    /// Whether nothing is excluded.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// A 64-bit digest of the set (ranks compare it).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Whether `sample` is excluded.
    pub fn contains(&self, sample: u64) -> bool {
        self.ids.binary_search(&sample).is_ok()
    }

    /// The first id of `earlier` that this set lacks, if any (`None`: a superset).
    pub fn first_missing(&self, earlier: &Exclusions) -> Option<u64> {
        earlier.ids.iter().copied().find(|&id| !self.contains(id))
    }

    /// `base` without the excluded samples, or `base` itself when nothing is excluded.
    pub fn apply(&self, base: Order) -> Result<Order, Error> {
        if self.is_empty() {
            return Ok(base);
        }
        Ok(Arc::new(Excluding::new(base, self)?))
    }
}

/// An order without some of its samples: positions `[0, len - |excluded|)`.
#[derive(Debug)]
pub struct Excluding {
    base: Order,
    excluded: Exclusions,
    /// The excluded samples' positions in `base`, sorted.
    removed: Vec<u64>,
}

impl Excluding {
    /// `base` without the samples of `excluded` (all below `base.domain()`).
    pub fn new(base: Order, excluded: &Exclusions) -> Result<Excluding, Error> {
        let mut removed = excluded.ids.to_vec();
        if let Some(&bad) = removed.iter().find(|&&id| id >= base.domain()) {
            return Err(Error::OutOfRange {
                what: "sample",
                value: bad,
                n: base.domain(),
            });
        }
        base.invert_in_place(&mut removed);
        removed.sort_unstable();
        Ok(Excluding {
            base,
            excluded: excluded.clone(),
            removed,
        })
    }

    /// Removed positions before `raw` (a position of the full order).
    fn removed_before(&self, raw: u64) -> u64 {
        self.removed.partition_point(|&e| e < raw) as u64
    }

    /// The position in the full order of position `p` of this one: `p` plus the removed
    /// positions before it. Removed position `e_k` (the `k`-th) has `e_k - k` kept ones
    /// before it, a non-decreasing count, so those before `p`'s are the `k` with
    /// `e_k - k <= p`.
    pub fn raw_position(&self, p: u64) -> u64 {
        let mut lo = 0;
        let mut hi = self.removed.len();
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.removed[mid] - mid as u64 <= p {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        p + lo as u64
    }

    /// This order's position of full-order position `raw`: the kept positions before it
    /// (`len()` past the end, so a resume point maps to a resume point).
    pub fn position_of_raw(&self, raw: u64) -> u64 {
        raw - self.removed_before(raw)
    }

    /// Positions of this order to positions of the full order, in place: a merge step per
    /// position while they increase, a binary search where they do not.
    fn raw_in_place(&self, positions: &mut [u64]) {
        let mut k = 0usize; // removed positions before the last one mapped
        let mut last = 0u64;
        for p in positions.iter_mut() {
            if *p < last {
                k = (self.raw_position(*p) - *p) as usize;
            } else {
                while k < self.removed.len() && self.removed[k] - k as u64 <= *p {
                    k += 1;
                }
            }
            last = *p;
            *p += k as u64;
        }
    }
}

impl SampleOrder for Excluding {
    fn algorithm(&self) -> &'static str {
        self.base.algorithm()
    }

    fn len(&self) -> u64 {
        self.base.len() - self.removed.len() as u64
    }

    fn domain(&self) -> u64 {
        self.base.domain()
    }

    fn excluded(&self) -> &[u64] {
        self.excluded.ids()
    }

    fn at(&self, position: u64) -> u64 {
        self.base.at(self.raw_position(position))
    }

    fn position_of(&self, sample: u64) -> Result<u64, Error> {
        check_below("sample", sample, self.domain())?;
        if self.excluded.contains(sample) {
            return Err(Error::Excluded { sample });
        }
        let raw = self.base.position_of(sample)?;
        Ok(self.position_of_raw(raw))
    }

    fn map_in_place(&self, positions: &mut [u64]) {
        self.raw_in_place(positions);
        self.base.map_in_place(positions);
    }

    fn invert_in_place(&self, samples: &mut [u64]) {
        let excluded: Vec<bool> = samples.iter().map(|&s| self.excluded.contains(s)).collect();
        self.base.invert_in_place(samples);
        for (s, gone) in samples.iter_mut().zip(excluded) {
            *s = if gone || *s == u64::MAX {
                u64::MAX
            } else {
                self.position_of_raw(*s)
            };
        }
    }

    fn fill(&self, start: u64, out: &mut [u64]) -> Result<(), Error> {
        let (len, n) = (out.len() as u64, self.len());
        if start > n || len > n - start {
            return Err(Error::SliceOutOfRange { start, len, n });
        }
        // Runs of consecutive kept positions, each filled by the full order at once.
        let mut raw = self.raw_position(start);
        let mut k = self.removed_before(raw) as usize;
        let mut done = 0usize;
        while done < out.len() {
            let run_end = self.removed.get(k).copied().unwrap_or(u64::MAX);
            let run = ((run_end - raw) as usize).min(out.len() - done);
            self.base.fill(raw, &mut out[done..done + run])?;
            done += run;
            raw += run as u64 + 1; // past the removed position that ended the run
            k += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;
    use crate::permutation::Permutation;

    fn shuffled(n: u64) -> Order {
        Arc::new(Permutation::of_version(Version::V2, n, 5, 1, 0).unwrap())
    }

    /// The full order's samples in order, the excluded ones skipped: the reference.
    fn reference(base: &Order, excluded: &[u64]) -> Vec<u64> {
        (0..base.len())
            .map(|p| base.at(p))
            .filter(|s| !excluded.contains(s))
            .collect()
    }

    #[test]
    fn the_kept_samples_keep_their_order_every_way_round() {
        for (n, ids) in [
            (10u64, vec![3u64, 7, 3]),
            (1000, (0..1000).step_by(7).collect::<Vec<_>>()),
            (
                70_000,
                (0..70_000).step_by(97).chain([0, 1, 2, 69_999]).collect(),
            ),
            (5, vec![0, 1, 2, 3]),
        ] {
            let base = shuffled(n);
            let set = Exclusions::new(ids.clone(), n).unwrap();
            let order = Excluding::new(base.clone(), &set).unwrap();
            let want = reference(&base, set.ids());
            assert_eq!(order.len(), want.len() as u64);
            let got: Vec<u64> = (0..order.len()).map(|p| order.at(p)).collect();
            assert_eq!(got, want, "n={n}");
            let mut filled = vec![0; want.len()];
            order.fill(0, &mut filled).unwrap();
            assert_eq!(filled, want);
            for start in [0, 1, want.len() as u64 / 2] {
                let mut part = vec![0; want.len() - start as usize];
                order.fill(start, &mut part).unwrap();
                assert_eq!(part, want[start as usize..]);
            }
            // Strided (a rank's positions) and shuffled positions map alike.
            let mut strided: Vec<u64> = (0..order.len())
                .step_by(3)
                .chain([0, 5 % order.len()])
                .collect();
            let expected: Vec<u64> = strided.iter().map(|&p| want[p as usize]).collect();
            order.map_in_place(&mut strided);
            assert_eq!(strided, expected);
            let mut back = want.clone();
            order.invert_in_place(&mut back);
            assert!(back.iter().copied().eq(0..order.len()));
            for &id in set.ids() {
                assert_eq!(order.position_of(id), Err(Error::Excluded { sample: id }));
                let mut one = [id];
                order.invert_in_place(&mut one);
                assert_eq!(one[0], u64::MAX);
            }
        }
    }

    #[test]
    fn sets_are_checked_and_compared() {
        assert!(Exclusions::new(vec![10], 10)
            .unwrap_err()
            .to_string()
            .contains("out of range"));
        assert!(Exclusions::new(vec![0, 1], 2)
            .unwrap_err()
            .to_string()
            .contains("nothing is left"));
        let small = Exclusions::new(vec![5, 1], 10).unwrap();
        let large = Exclusions::new(vec![1, 9, 5, 5], 10).unwrap();
        assert_eq!(small, Exclusions::new(vec![1, 5], 10).unwrap());
        assert_eq!(large.ids(), &[1, 5, 9]);
        assert_eq!(large.first_missing(&small), None);
        assert_eq!(small.first_missing(&large), Some(9));
        assert_ne!(small.digest(), large.digest());
    }

    #[test]
    fn every_proof_covers_the_kept_samples_and_refuses_an_excluded_one() {
        use crate::{
            judge_coverage, prove_against, verify, verify_inverse, CoverageShare, Partition,
        };
        use std::sync::atomic::AtomicU64;
        let n = 5000;
        let set = Exclusions::new((0..n).step_by(11).collect(), n).unwrap();
        let order: Order = Arc::new(Excluding::new(shuffled(n), &set).unwrap());
        for (w, start, drop_last) in [(4, 0, false), (3, 100, false), (7, 0, true)] {
            let part = Partition::new(order.len(), w, start, drop_last, order.clone()).unwrap();
            let tick = AtomicU64::new(0);
            let exact = verify_inverse(&part, 2, &tick).unwrap();
            let bitmap = verify(&part, 2, &tick).unwrap();
            assert_eq!(exact.covered, bitmap.covered);
            assert_eq!(
                exact.covered + exact.dropped + exact.consumed,
                n - set.len()
            );
            let shares: Vec<_> = (0..w)
                .map(|r| CoverageShare::of_rank(&part, r).unwrap())
                .collect();
            assert_eq!(
                judge_coverage(&part, &shares).unwrap().covered,
                exact.covered
            );
            for &id in set.ids().iter().take(20) {
                assert!(part.locate(id).unwrap().is_empty());
            }
        }
        // Streams of another set of the same size read excluded samples: refused.
        let other = Exclusions::new((1..n).step_by(11).collect(), n).unwrap();
        assert_eq!(other.len(), set.len());
        let streams: Order = Arc::new(Excluding::new(shuffled(n), &other).unwrap());
        let part = Partition::new(streams.len(), 2, 0, false, streams).unwrap();
        let share = prove_against(&part, &order, 0..2, 1, &AtomicU64::new(0)).unwrap();
        assert!(share.failures > 0);
        let bitmap = verify(
            &Partition::new(order.len(), 2, 0, false, broken(&order, set.ids()[0])).unwrap(),
            1,
            &AtomicU64::new(0),
        );
        assert!(bitmap.unwrap_err().to_string().contains("excluded"));
    }

    /// `order` with its first position reading `id` instead (an excluded sample).
    fn broken(order: &Order, id: u64) -> Order {
        #[derive(Debug)]
        struct Broken(Order, u64);
        impl SampleOrder for Broken {
            fn algorithm(&self) -> &'static str {
                "broken"
            }
            fn len(&self) -> u64 {
                self.0.len()
            }
            fn domain(&self) -> u64 {
                self.0.domain()
            }
            fn excluded(&self) -> &[u64] {
                self.0.excluded()
            }
            fn at(&self, p: u64) -> u64 {
                if p == 0 {
                    self.1
                } else {
                    self.0.at(p)
                }
            }
            fn position_of(&self, s: u64) -> Result<u64, Error> {
                self.0.position_of(s)
            }
        }
        Arc::new(Broken(order.clone(), id))
    }
}
