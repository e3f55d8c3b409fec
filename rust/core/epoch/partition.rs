//! One pass of an epoch split across ranks (DistributedSampler's lengths, exactly).
//!
//! Global positions `[start, end)` are dealt by the pass's [`Dealing`]: round-robin by
//! default (rank `r` takes `start + r, start + r + W, ...`), or accelerate's step layout.
//! Either way, after `k` whole rounds on every rank the consumed positions are a prefix
//! of the pass — what makes resuming with another `W` exact.
//! Position `p` holds sample `order(p mod n)`: positions `>= n` are padding that repeats the
//! first samples of the order, as DistributedSampler pads.

use crate::dealing::{Dealing, Pass};
use crate::error::{check_below, Error};
use crate::order::Order;

/// The split of one epoch (or of its remainder after `start` consumed positions) across
/// `num_replicas` ranks.
#[derive(Clone, Debug)]
pub struct Partition {
    n: u64,
    num_replicas: u64,
    start: u64,
    drop_last: bool,
    num_samples: u64,
    order: Order,
    dealing: Dealing,
    /// A broken dealing, `(rank, local, position)`: what the proofs' tests must catch.
    #[cfg(test)]
    misdealt: Option<(u64, u64, u64)>,
}

/// The positions of `[0, n)` outside a pass, `[0, min(start, n))` (consumed before a
/// resume) then `[max(end, start), n)` (dropped), numbered `0..count` so that the ranks
/// of every proof take contiguous 1/W slices of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outside {
    consumed: u64,
    tail_start: u64,
    count: u64,
}

impl Outside {
    /// Positions outside the pass.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Of them, those consumed before the pass (numbered first).
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// The `i`-th position outside the pass.
    pub fn position(&self, i: u64) -> u64 {
        if i < self.consumed {
            i
        } else {
            self.tail_start + (i - self.consumed)
        }
    }

    /// The slice `[lo, hi)` of the outside positions (their numbers) that ranks `ranks`
    /// of `num_replicas` check.
    pub fn slice(&self, ranks: &std::ops::Range<u64>, num_replicas: u64) -> (u64, u64) {
        let cut = |r: u64| ((self.count as u128 * r as u128) / num_replicas as u128) as u64;
        (cut(ranks.start), cut(ranks.end))
    }
}

impl Partition {
    /// Splits positions `[start, ...)` of an epoch of `n` samples across `num_replicas`.
    ///
    /// With `start = 0` the lengths are DistributedSampler's: `ceil(n / W)` per rank, or
    /// `floor(n / W)` with `drop_last`. With `start > 0` (a resume) the same rule applies to
    /// the `n - start` positions left.
    pub fn new(
        n: u64,
        num_replicas: u64,
        start: u64,
        drop_last: bool,
        order: Order,
    ) -> Result<Self, Error> {
        Self::dealt(
            n,
            num_replicas,
            start,
            drop_last,
            order,
            Dealing::ROUND_ROBIN,
        )
    }

    /// As [`Partition::new`], the positions dealt by `dealing` (a batch sampler that drops
    /// its last partial batch keeps whole batches only).
    pub fn dealt(
        n: u64,
        num_replicas: u64,
        start: u64,
        drop_last: bool,
        order: Order,
        dealing: Dealing,
    ) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        if num_replicas == 0 {
            return Err(Error::InvalidReplicas { num_replicas });
        }
        if order.len() != n {
            return Err(Error::Invalid(format!(
                "the order has {} positions but the partition is over {n} samples",
                order.len()
            )));
        }
        let remaining = n.saturating_sub(start);
        let num_samples = if drop_last {
            remaining / num_replicas
        } else {
            remaining.div_ceil(num_replicas)
        };
        let num_samples = dealing.kept(num_samples);
        // The end of the epoch, start + num_samples·W, must be representable.
        if (num_samples as u128) * (num_replicas as u128) + start as u128 > u64::MAX as u128 {
            return Err(Error::Invalid(format!(
                "n={n} with num_replicas={num_replicas} needs positions past 2**64 - 1; \
                 use a smaller n"
            )));
        }
        Ok(Partition {
            n,
            num_replicas,
            start,
            drop_last,
            num_samples,
            order,
            dealing,
            #[cfg(test)]
            misdealt: None,
        })
    }

    /// This partition with item `local` of `rank` dealt from `position` instead (tests of
    /// the proofs only).
    #[cfg(test)]
    pub(crate) fn misdeal(mut self, rank: u64, local: u64, position: u64) -> Self {
        self.misdealt = Some((rank, local, position));
        self
    }

    /// Samples in the epoch.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// Ranks the positions are dealt to.
    pub fn num_replicas(&self) -> u64 {
        self.num_replicas
    }

    /// Global positions consumed before this pass (a resume point; `0` for a whole epoch).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Whether the tail that does not fill a round of ranks is dropped instead of padded.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// The order positions are mapped through.
    pub fn order(&self) -> &Order {
        &self.order
    }

    /// How positions go to (rank, local index).
    pub fn dealing(&self) -> &Dealing {
        &self.dealing
    }

    /// The pass's shape, as the dealing reads it.
    pub fn pass(&self) -> Pass {
        Pass {
            start: self.start,
            num_replicas: self.num_replicas,
            num_samples: self.num_samples,
        }
    }

    /// The `(rank, local)` that global position `p` is dealt to (`None` outside the pass).
    pub fn owner(&self, p: u64) -> Option<(u64, u64)> {
        self.dealing.owner(&self.pass(), p)
    }

    /// Samples every rank yields (the same on all ranks).
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// `num_samples · num_replicas`: positions dealt out, padding included.
    pub fn total_size(&self) -> u64 {
        self.num_samples * self.num_replicas
    }

    /// One past the last dealt position.
    pub fn end(&self) -> u64 {
        self.start + self.total_size()
    }

    /// Positions `>= n` dealt out: padding that repeats samples.
    pub fn padding(&self) -> u64 {
        self.end().saturating_sub(self.n.max(self.start))
    }

    /// Positions in `[max(start, end), n)`: never dealt (`drop_last`).
    pub fn dropped(&self) -> u64 {
        self.n.saturating_sub(self.end().max(self.start))
    }

    /// The local index of `rank`'s first padding item: its items from there on sit at
    /// positions `>= n` and repeat samples. `num_samples` when the rank has no padding.
    pub fn first_padding(&self, rank: u64) -> Result<u64, Error> {
        self.check_slice(rank, 0, 0)?;
        Ok(self.first_local_at(rank, 0, self.n))
    }

    /// The first local item of `rank` from `from` on whose position is at least `bound`
    /// (`num_samples` when none): a rank's positions grow with its local index, so a
    /// binary search. `rank` must exist.
    pub(crate) fn first_local_at(&self, rank: u64, from: u64, bound: u64) -> u64 {
        let (mut lo, mut hi) = (from, self.num_samples);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.position(rank, mid) < bound {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// How many of `rank`'s items are padding.
    pub fn padding_of(&self, rank: u64) -> Result<u64, Error> {
        Ok(self.num_samples - self.first_padding(rank)?)
    }

    /// Checks that `rank` exists and has items `[local_start, local_start + len)`.
    pub fn check_slice(&self, rank: u64, local_start: u64, len: u64) -> Result<(), Error> {
        if rank >= self.num_replicas {
            return Err(Error::InvalidRank {
                rank,
                num_replicas: self.num_replicas,
            });
        }
        if local_start > self.num_samples || len > self.num_samples - local_start {
            return Err(Error::LocalOutOfRange {
                rank,
                start: local_start,
                len,
                num_samples: self.num_samples,
            });
        }
        Ok(())
    }

    /// The global position of the `local`-th item of `rank` (no range check on `local`).
    #[inline]
    pub fn position(&self, rank: u64, local: u64) -> u64 {
        #[cfg(test)]
        if let Some((r, l, p)) = self.misdealt {
            if (r, l) == (rank, local) {
                return p;
            }
        }
        self.dealing.position(&self.pass(), rank, local)
    }

    /// Position `p` reduced into `[0, n)`: padding positions repeat the order's start.
    #[inline]
    fn wrap(&self, p: u64) -> u64 {
        if p < self.n {
            p
        } else {
            p % self.n
        }
    }

    /// The sample at global position `p` (padding wraps around).
    #[inline]
    pub fn sample_at(&self, p: u64) -> u64 {
        self.order.at(self.wrap(p))
    }

    /// `out[i]` = the global position `rank`'s item `local_start + i` is dealt from.
    pub fn fill_dealt(&self, rank: u64, local_start: u64, out: &mut [u64]) -> Result<(), Error> {
        self.check_slice(rank, local_start, out.len() as u64)?;
        self.dealing
            .fill_positions(&self.pass(), rank, local_start, out);
        #[cfg(test)]
        if let Some((r, l, p)) = self.misdealt {
            if r == rank && (local_start..local_start + out.len() as u64).contains(&l) {
                out[(l - local_start) as usize] = p;
            }
        }
        Ok(())
    }

    /// `out[i]` = the sample of `rank`'s item `local_start + i`. Batched.
    pub fn fill_rank(&self, rank: u64, local_start: u64, out: &mut [u64]) -> Result<(), Error> {
        self.fill_dealt(rank, local_start, out)?;
        self.samples_of(out);
        Ok(())
    }

    /// Replaces global positions of the pass by their samples (padding wraps around):
    /// what [`Partition::fill_rank`] does after dealing. Batched.
    pub fn samples_of(&self, positions: &mut [u64]) {
        for slot in positions.iter_mut() {
            *slot = self.wrap(*slot);
        }
        self.map_positions(positions);
    }

    /// Replaces positions (already reduced below n) by their samples.
    fn map_positions(&self, values: &mut [u64]) {
        self.order.map_in_place(values)
    }

    /// Checks that global positions `[first, first + len)` lie in this pass.
    pub fn check_positions(&self, first: u64, len: u64) -> Result<(), Error> {
        if first < self.start || first > self.end() || len > self.end() - first {
            return Err(Error::Invalid(format!(
                "positions [{first}, {first} + {len}) are outside this pass [{}, {})",
                self.start,
                self.end()
            )));
        }
        Ok(())
    }

    /// The sample at global position `p`, which must be below `max(n, end)`.
    pub fn checked_sample_at(&self, p: u64) -> Result<u64, Error> {
        let limit = self.end().max(self.n);
        if p >= limit {
            return Err(Error::Invalid(format!(
                "position {p} is past the end of the epoch ({limit})"
            )));
        }
        Ok(self.sample_at(p))
    }

    /// `out[i]` = the sample at global position `first + i`: a contiguous block of the
    /// epoch, for layouts that deal whole batches (padding wraps around). Batched.
    pub fn fill_positions(&self, first: u64, out: &mut [u64]) -> Result<(), Error> {
        self.check_positions(first, out.len() as u64)?;
        for (i, slot) in out.iter_mut().enumerate() {
            let p = first + i as u64;
            *slot = self.wrap(p);
        }
        self.map_positions(out);
        Ok(())
    }

    /// The positions of `[0, n)` outside this pass: consumed before it, then dropped.
    pub fn outside(&self) -> Outside {
        let consumed = self.start.min(self.n);
        let tail_start = self.end().max(self.start).min(self.n);
        Outside {
            consumed,
            tail_start,
            count: consumed + (self.n - tail_start),
        }
    }

    /// Every `(rank, local position)` that yields `sample` in this partition: none when it
    /// was dropped or already consumed, several when padding repeats it.
    pub fn locate(&self, sample: u64) -> Result<Vec<(u64, u64)>, Error> {
        check_below("sample", sample, self.order.domain())?;
        let first = match self.order.position_of(sample) {
            Err(Error::Excluded { .. }) => return Ok(Vec::new()), // never read
            other => other?,
        };
        let end = self.end();
        let mut hits = Vec::new();
        // Positions holding `sample`: first, first + n, first + 2n, ... (padding wraps).
        let mut p = first;
        while p < end {
            if let Some(owner) = self.owner(p) {
                hits.push(owner);
            }
            match p.checked_add(self.n) {
                Some(next) => p = next,
                None => break,
            }
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;
    use crate::order::Identity;
    use crate::permutation::Permutation;
    use std::sync::Arc;

    fn shuffled(version: Version, n: u64) -> Order {
        Arc::new(Permutation::new(version, n, 1, 0).unwrap())
    }

    fn identity(n: u64) -> Order {
        Arc::new(Identity::new(n).unwrap())
    }

    /// DistributedSampler's rule written out directly, as the reference.
    fn reference(n: u64, w: u64, drop_last: bool, order: &[u64]) -> Vec<Vec<u64>> {
        let num_samples = if drop_last && n % w != 0 {
            n / w
        } else {
            n.div_ceil(w)
        };
        let total = (num_samples * w) as usize;
        let mut indices = order.to_vec();
        if drop_last {
            indices.truncate(total);
        } else {
            while indices.len() < total {
                let need = total - indices.len();
                let take = need.min(order.len());
                indices.extend_from_slice(&order[..take]);
            }
        }
        (0..w as usize)
            .map(|r| {
                indices
                    .iter()
                    .skip(r)
                    .step_by(w as usize)
                    .copied()
                    .collect()
            })
            .collect()
    }

    #[test]
    fn matches_distributed_sampler_rule() {
        for version in Version::ALL {
            for n in 1..40u64 {
                for w in 1..10u64 {
                    for drop_last in [false, true] {
                        let part =
                            Partition::new(n, w, 0, drop_last, shuffled(version, n)).unwrap();
                        let order: Vec<u64> = (0..n).map(|p| part.sample_at(p)).collect();
                        let want = reference(n, w, drop_last, &order);
                        for r in 0..w {
                            let mut got = vec![0u64; part.num_samples() as usize];
                            part.fill_rank(r, 0, &mut got).unwrap();
                            assert_eq!(got, want[r as usize], "n={n} w={w} drop_last={drop_last}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn locate_finds_every_occurrence() {
        for version in Version::ALL {
            for (n, w, drop_last) in [(10, 4, false), (3, 8, false), (10, 4, true), (17, 5, false)]
            {
                let part = Partition::new(n, w, 0, drop_last, shuffled(version, n)).unwrap();
                for s in 0..n {
                    let mut want = Vec::new();
                    for r in 0..w {
                        let mut items = vec![0u64; part.num_samples() as usize];
                        part.fill_rank(r, 0, &mut items).unwrap();
                        for (k, &x) in items.iter().enumerate() {
                            if x == s {
                                want.push((r, k as u64));
                            }
                        }
                    }
                    let mut got = part.locate(s).unwrap();
                    got.sort();
                    want.sort();
                    assert_eq!(got, want, "n={n} w={w} sample={s}");
                }
            }
        }
    }

    #[test]
    fn resumed_partition_covers_the_rest_exactly_once() {
        for version in Version::ALL {
            let n = 23;
            for consumed in 0..=n {
                let part = Partition::new(n, 5, consumed, false, shuffled(version, n)).unwrap();
                let mut seen = vec![0u32; n as usize];
                for p in 0..consumed.min(n) {
                    seen[part.sample_at(p) as usize] += 1;
                }
                for r in 0..5 {
                    let mut items = vec![0u64; part.num_samples() as usize];
                    part.fill_rank(r, 0, &mut items).unwrap();
                    for k in 0..items.len() as u64 {
                        if part.position(r, k) < n {
                            seen[items[k as usize] as usize] += 1;
                        }
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "consumed={consumed}");
            }
        }
    }

    #[test]
    fn blocks_of_positions_match_sample_at() {
        for version in Version::ALL {
            // Resumed at position 3: 8 positions left over 3 ranks -> 3 each, end 12 (2 padding).
            let part = Partition::new(10, 3, 3, false, shuffled(version, 10)).unwrap();
            assert_eq!(part.end(), 12);
            let mut block = vec![0u64; 9];
            part.fill_positions(3, &mut block).unwrap();
            let want: Vec<u64> = (3..12).map(|p| part.sample_at(p)).collect();
            assert_eq!(block, want);
            assert_eq!(block[7..], [part.sample_at(0), part.sample_at(1)]); // padding wraps
            assert!(part.fill_positions(2, &mut [0; 1]).is_err()); // before the pass
            assert!(part.fill_positions(10, &mut [0; 3]).is_err()); // past its end
        }
    }

    #[test]
    fn first_padding_matches_the_positions_of_every_rank() {
        for (n, w) in [(10u64, 4u64), (3, 8), (17, 5), (12, 4), (1, 1)] {
            for start in 0..=n + 2 {
                let part = Partition::new(n, w, start, false, identity(n)).unwrap();
                let mut total = 0;
                for r in 0..w {
                    // Brute force: the first local item whose position is >= n.
                    let want = (0..part.num_samples())
                        .find(|&k| part.position(r, k) >= n)
                        .unwrap_or(part.num_samples());
                    assert_eq!(
                        part.first_padding(r).unwrap(),
                        want,
                        "n={n} w={w} start={start} r={r}"
                    );
                    total += part.padding_of(r).unwrap();
                }
                assert_eq!(total, part.padding(), "n={n} w={w} start={start}");
            }
        }
        let part = Partition::new(10, 4, 0, false, identity(10)).unwrap();
        assert!(part.first_padding(4).is_err());
    }

    #[test]
    fn argument_errors_are_not_violations() {
        let err = Partition::new(u64::MAX, 2, 0, false, identity(u64::MAX)).unwrap_err();
        assert!(!err.is_violation(), "{err}");
        let part = Partition::new(10, 3, 3, false, identity(10)).unwrap();
        assert!(!part
            .fill_positions(2, &mut [0; 1])
            .unwrap_err()
            .is_violation());
        assert!(!part.checked_sample_at(12).unwrap_err().is_violation());
        assert_eq!(part.checked_sample_at(11).unwrap(), 1);
    }

    #[test]
    fn rejects_bad_arguments() {
        for version in Version::ALL {
            assert!(Identity::new(0).is_err());
            assert!(Partition::new(5, 0, 0, false, identity(5)).is_err());
            assert!(Partition::new(5, 2, 0, false, shuffled(version, 6)).is_err());
            let part = Partition::new(5, 2, 0, false, identity(5)).unwrap();
            assert!(part.fill_rank(2, 0, &mut [0; 1]).is_err());
            assert!(part.fill_rank(0, 2, &mut [0; 2]).is_err());
            assert!(part.locate(5).is_err());
            assert!(Partition::new(u64::MAX, 2, 0, false, identity(u64::MAX)).is_err());
        }
    }
}
