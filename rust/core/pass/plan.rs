//! A pass's plan in time: the batches a rank yields, where each batch starts and ends,
//! the global positions consumed after a count of items, and where a block-order window
//! ends in a rank's stream. Samplers iterate exactly these bounds and save exactly these
//! counts, so what they yield, what they save and what the proofs check is one object.
//!
//! Every dealing cuts a rank's items `[0, num_samples)` into batches of its batch size
//! (an item sampler's "batch" is one item); the last may be partial (a dealing that drops
//! it has already kept whole batches only). After every rank took its first `k` items of
//! a batch boundary the consumed positions are the prefix `[0, start + k·W)` of the epoch,
//! in both layouts: what makes a resume on another world size exact.

use crate::dealing::Layout;
use crate::error::Error;
use crate::partition::Partition;

/// Items of a rank's first read of a pass: small, so the first index comes at once.
pub const FIRST_CHUNK: u64 = 1 << 6;

/// The most items a sampler reads from the core in one call while iterating (each chunk
/// doubles the one before, up to this).
pub const MAX_CHUNK: u64 = 1 << 13;

impl Partition {
    /// Items per batch of this pass's dealing (`1` for an item sampler).
    pub fn batch_len(&self) -> u64 {
        self.dealing().batch_size().max(1)
    }

    /// Whole batches a batch sampler reads in one call: about [`MAX_CHUNK`] items, at
    /// least one batch.
    pub fn batches_per_call(&self) -> u64 {
        (MAX_CHUNK / self.batch_len()).max(1)
    }

    /// Batches every rank yields: `ceil(num_samples / batch_len)`.
    pub fn num_batches(&self) -> u64 {
        self.num_samples().div_ceil(self.batch_len())
    }

    /// The local items `[lo, hi)` of every rank's batch `step`.
    pub fn batch_bounds(&self, step: u64) -> Result<(u64, u64), Error> {
        if step >= self.num_batches() {
            return Err(Error::Invalid(format!(
                "batch {step} is out of range: the pass has {} batches per rank",
                self.num_batches()
            )));
        }
        Ok((self.batch_start(step), self.batch_start(step + 1)))
    }

    /// The first local item of batch `step` (`num_samples` past the last batch).
    fn batch_start(&self, step: u64) -> u64 {
        step.saturating_mul(self.batch_len())
            .min(self.num_samples())
    }

    /// `start + items·W`: the prefix of the epoch dealt once every rank took `items` items.
    fn prefix_after(&self, items: u64) -> u64 {
        self.start() + items * self.num_replicas()
    }

    /// The local item bounds of batches `[first, last)`: `last - first + 1` offsets from the
    /// first batch's start to the last batch's end, for slicing one fetch into batches.
    pub fn batch_offsets(&self, first: u64, last: u64) -> Result<Vec<u64>, Error> {
        if first > last || last > self.num_batches() {
            return Err(Error::Invalid(format!(
                "batches [{first}, {last}) are not a range of the pass's {} batches per rank",
                self.num_batches()
            )));
        }
        Ok((first..=last).map(|s| self.batch_start(s)).collect())
    }

    /// Items per rank in this pass, rank by rank: every rank deals as many (the padding
    /// evens them out; drops cut the epoch before it is dealt).
    pub fn lengths(&self) -> Vec<u64> {
        vec![self.num_samples(); self.num_replicas() as usize]
    }

    /// `(step, item)`: the batch every rank's local item `local` is in, and its place there.
    pub fn batch_of(&self, local: u64) -> Result<(u64, u64), Error> {
        if local >= self.num_samples() {
            return Err(Error::Invalid(format!(
                "local item {local} is out of range: the pass has {} items per rank",
                self.num_samples()
            )));
        }
        Ok((local / self.batch_len(), local % self.batch_len()))
    }

    /// Global positions of the epoch consumed once every rank has taken its first `steps`
    /// batches (all of them, when `steps` is past the last).
    pub fn consumed_after_batches(&self, steps: u64) -> u64 {
        self.prefix_after(self.batch_start(steps))
    }

    /// Items rank `rank`'s share of the exact proof checks: its own items, and its slice of
    /// the positions outside the pass (consumed before it, or dropped).
    pub fn share_len(&self, rank: u64) -> Result<u64, Error> {
        self.check_slice(rank, 0, 0)?;
        let (lo, hi) = self.outside().slice(&(rank..rank + 1), self.num_replicas());
        Ok(self.num_samples() + (hi - lo))
    }

    /// Global positions of the epoch consumed once every rank has taken its first `items`
    /// items of this pass: `start + items·W`. In the step layout only batch boundaries
    /// (and the pass's end) are prefixes of the epoch.
    pub fn consumed_after(&self, items: u64) -> Result<u64, Error> {
        if items > self.num_samples() {
            return Err(Error::Invalid(format!(
                "items must be in [0, {}] (this pass's length), got {items}",
                self.num_samples()
            )));
        }
        let b = self.batch_len();
        if self.dealing().layout() == Layout::Step && items % b != 0 && items != self.num_samples()
        {
            return Err(Error::Invalid(format!(
                "items={items} ends inside a batch of {b}: the step layout consumes whole \
                 batches; count the batches the loop received times {b}"
            )));
        }
        Ok(self.prefix_after(items))
    }

    /// One past the last local item of `rank` whose position lies in the same window of
    /// `window_len` positions as its item `local` (padding, past `n`, counts as one
    /// window to the pass's end): a block order's reads stop there, one window at a time.
    pub fn window_end(&self, rank: u64, local: u64, window_len: u64) -> Result<u64, Error> {
        self.check_slice(rank, local, 1)?;
        if window_len == 0 {
            return Err(Error::Invalid("window_len must be >= 1".into()));
        }
        let position = self.position(rank, local);
        let end = if position >= self.n() {
            u64::MAX
        } else {
            (position / window_len + 1)
                .saturating_mul(window_len)
                .min(self.n())
        };
        Ok(self.first_local_at(rank, local + 1, end))
    }

    /// One past the last local item of `rank`'s read from item `local`, at most `size`
    /// items long: it stops at the pass's end and, with a block order's `window_len > 0`,
    /// at the window's end, so that each window is announced before it is read.
    pub fn chunk_end(
        &self,
        rank: u64,
        local: u64,
        size: u64,
        window_len: u64,
    ) -> Result<u64, Error> {
        let end = local.saturating_add(size.max(1)).min(self.num_samples());
        if window_len == 0 || local >= end {
            return Ok(end);
        }
        Ok(end.min(self.window_end(rank, local, window_len)?))
    }
}

/// The size of the read after one of `size` items: twice as many, up to [`MAX_CHUNK`].
pub fn next_chunk(size: u64) -> u64 {
    size.saturating_mul(2).clamp(1, MAX_CHUNK)
}

#[cfg(test)]
mod tests {
    use super::{next_chunk, FIRST_CHUNK, MAX_CHUNK};
    use crate::dealing::Dealing;
    use crate::order::{Identity, Order};
    use crate::partition::Partition;
    use std::sync::Arc;

    fn identity(n: u64) -> Order {
        Arc::new(Identity::new(n).unwrap())
    }

    fn every_dealing() -> Vec<Dealing> {
        let mut all = vec![Dealing::ROUND_ROBIN];
        for b in [1, 3, 4] {
            for drop_last in [false, true] {
                all.push(Dealing::new("round-robin", b, drop_last).unwrap());
                all.push(Dealing::new("step", b, drop_last).unwrap());
            }
        }
        all
    }

    #[test]
    fn batches_tile_the_ranks_items_and_each_boundary_is_a_prefix_of_the_epoch() {
        for dealing in every_dealing() {
            for (n, w, start) in [(10, 3, 0), (17, 4, 5), (7, 2, 0), (40, 3, 11)] {
                let part = Partition::dealt(n, w, start, false, identity(n), dealing).unwrap();
                let b = dealing.batch_size().max(1) as usize;
                // Brute force: whole batches of b, the last one partial.
                let items: Vec<u64> = (0..part.num_samples()).collect();
                let want: Vec<(u64, u64)> = items
                    .chunks(b)
                    .map(|c| (c[0], c[c.len() - 1] + 1))
                    .collect();
                let got: Vec<(u64, u64)> = (0..part.num_batches())
                    .map(|s| part.batch_bounds(s).unwrap())
                    .collect();
                assert_eq!(got, want, "{dealing:?} n={n} w={w}");
                let offsets = part.batch_offsets(0, part.num_batches()).unwrap();
                assert_eq!(offsets.len() as u64, part.num_batches() + 1);
                assert!(part.batch_bounds(part.num_batches()).is_err());
                for (s, &(lo, hi)) in got.iter().enumerate() {
                    for local in lo..hi {
                        assert_eq!(part.batch_of(local).unwrap(), (s as u64, local - lo));
                    }
                    assert_eq!(
                        part.consumed_after_batches(s as u64 + 1),
                        part.consumed_after(hi).unwrap()
                    );
                }
                assert_eq!(part.consumed_after_batches(u64::MAX), part.end());
                // Each rank's length is what it deals: together, the pass's positions once.
                let lengths = part.lengths();
                assert_eq!(lengths.len() as u64, w);
                let mut dealt: Vec<u64> = (0..w)
                    .flat_map(|r| (0..lengths[r as usize]).map(move |k| (r, k)))
                    .map(|(r, k)| part.position(r, k))
                    .collect();
                dealt.sort_unstable();
                assert_eq!(
                    dealt,
                    (start..part.end()).collect::<Vec<u64>>(),
                    "{dealing:?}"
                );
                // The proof's shares cover the pass and the positions outside it once.
                let shares: u64 = (0..w).map(|r| part.share_len(r).unwrap()).sum();
                assert_eq!(shares, part.total_size() + part.outside().count());
                // After every rank took its batches [0, s): exactly the positions dealt so far.
                for &(_, hi) in &got {
                    let mut dealt: Vec<u64> = (0..w)
                        .flat_map(|r| (0..hi).map(move |k| (r, k)))
                        .map(|(r, k)| part.position(r, k))
                        .collect();
                    dealt.sort_unstable();
                    let consumed = part.consumed_after(hi).unwrap();
                    let prefix: Vec<u64> = (start..consumed).collect();
                    assert_eq!(dealt, prefix, "{dealing:?} after {hi} items");
                }
            }
        }
    }

    #[test]
    fn the_step_layout_refuses_a_count_inside_a_batch() {
        let step = Dealing::new("step", 4, false).unwrap();
        let part = Partition::dealt(40, 3, 0, false, identity(40), step).unwrap();
        let err = part.consumed_after(5).unwrap_err().to_string();
        assert!(err.contains("inside a batch of 4"), "{err}");
        assert_eq!(part.consumed_after(8).unwrap(), 24);
        assert!(part.consumed_after(part.num_samples() + 1).is_err());
    }

    #[test]
    fn window_ends_match_a_scan_of_the_ranks_positions() {
        for (n, w, start, window) in [(50, 3, 0, 8), (50, 4, 7, 5), (9, 4, 0, 4), (30, 1, 0, 7)] {
            let part = Partition::new(n, w, start, false, identity(n)).unwrap();
            for rank in 0..w {
                for local in 0..part.num_samples() {
                    let p = part.position(rank, local);
                    let same = |k: u64| {
                        let q = part.position(rank, k);
                        if p >= n {
                            true
                        } else {
                            q < n && q / window == p / window
                        }
                    };
                    let mut want = local + 1;
                    while want < part.num_samples() && same(want) {
                        want += 1;
                    }
                    assert_eq!(part.window_end(rank, local, window).unwrap(), want);
                }
            }
        }
    }

    #[test]
    fn chunks_double_tile_the_ranks_items_and_stop_at_window_ends() {
        for (n, w, start, window) in [(5000, 3, 0, 0), (50, 4, 7, 5), (30, 1, 0, 7), (9, 4, 0, 0)] {
            let part = Partition::new(n, w, start, false, identity(n)).unwrap();
            for rank in 0..w {
                let (mut local, mut size, mut sizes) = (0, FIRST_CHUNK, Vec::new());
                while local < part.num_samples() {
                    let end = part.chunk_end(rank, local, size, window).unwrap();
                    assert!(end > local && end - local <= size);
                    if window > 0 {
                        assert!(end <= part.window_end(rank, local, window).unwrap());
                    }
                    sizes.push(end - local);
                    (local, size) = (end, next_chunk(size));
                }
                assert_eq!(sizes.iter().sum::<u64>(), part.num_samples());
                if window == 0 && part.num_samples() > FIRST_CHUNK {
                    assert_eq!(sizes[..2], [FIRST_CHUNK, 2 * FIRST_CHUNK]);
                }
                assert_eq!(part.chunk_end(rank, local, size, window).unwrap(), local);
            }
        }
        assert_eq!(next_chunk(MAX_CHUNK), MAX_CHUNK);
    }
}
