//! The order of an epoch: which sample sits at each position of `[0, n)`.
//!
//! [`Partition`](crate::Partition) deals positions to ranks; an order maps positions to
//! samples. Everything built on a partition (iteration, padding, `locate`, the exact and
//! distributed proofs) goes through this trait, so a new order (block-wise, a mixture)
//! plugs in without special cases.

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::{check_below, Error};
use crate::permutation::Permutation;

/// A bijection between positions `[0, len)` and samples (`[0, len)`, or the kept samples of
/// `[0, domain)`), computable both ways.
pub trait SampleOrder: Debug + Send + Sync {
    /// The algorithm's id, recorded in state dicts and certificates.
    fn algorithm(&self) -> &'static str;

    /// Number of positions (and samples).
    fn len(&self) -> u64;

    /// Sample ids are below this: `len()`, but for an order without some samples
    /// (exclusions), whose ids keep their dataset's range.
    fn domain(&self) -> u64 {
        self.len()
    }

    /// The samples of `[0, domain())` that have no position, sorted (none but for
    /// exclusions).
    fn excluded(&self) -> &[u64] {
        &[]
    }

    /// Whether the order is empty (never true for a valid order).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample at `position < len`. Unchecked: callers pass positions in range.
    fn at(&self, position: u64) -> u64;

    /// The position of `sample`, or an error when `sample >= len`.
    fn position_of(&self, sample: u64) -> Result<u64, Error>;

    /// Replaces each position (all `< len`) by its sample. Batched orders override this.
    fn map_in_place(&self, positions: &mut [u64]) {
        for p in positions.iter_mut() {
            *p = self.at(*p);
        }
    }

    /// Replaces each sample (all `< len`) by its position; `u64::MAX` for a sample that
    /// has none (only a broken explicit order has such samples). Batched orders override
    /// this.
    fn invert_in_place(&self, samples: &mut [u64]) {
        for s in samples.iter_mut() {
            *s = self.position_of(*s).unwrap_or(u64::MAX);
        }
    }

    /// `out[i]` = the sample at position `start + i`, batched; an error when the slice
    /// does not fit in `[0, len)`.
    fn fill(&self, start: u64, out: &mut [u64]) -> Result<(), Error> {
        let (len, n) = (out.len() as u64, self.len());
        if start > n || len > n - start {
            return Err(Error::SliceOutOfRange { start, len, n });
        }
        for (i, slot) in out.iter_mut().enumerate() {
            *slot = start + i as u64;
        }
        self.map_in_place(out);
        Ok(())
    }
}

/// A shared, thread-safe order: what a [`Partition`](crate::Partition) holds.
pub type Order = Arc<dyn SampleOrder>;

/// Position `p` holds sample `p` (`shuffle=False`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    n: u64,
}

impl Identity {
    /// The identity order of `n` samples.
    pub fn new(n: u64) -> Result<Self, Error> {
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        Ok(Identity { n })
    }
}

impl SampleOrder for Identity {
    fn algorithm(&self) -> &'static str {
        "identity"
    }

    fn len(&self) -> u64 {
        self.n
    }

    fn at(&self, position: u64) -> u64 {
        position
    }

    fn position_of(&self, sample: u64) -> Result<u64, Error> {
        check_below("sample", sample, self.n)?;
        Ok(sample)
    }

    fn map_in_place(&self, _positions: &mut [u64]) {}

    fn invert_in_place(&self, _samples: &mut [u64]) {}
}

impl SampleOrder for Permutation {
    fn algorithm(&self) -> &'static str {
        self.version().algorithm()
    }

    fn len(&self) -> u64 {
        Permutation::len(self)
    }

    fn at(&self, position: u64) -> u64 {
        self.forward_unchecked(position)
    }

    fn position_of(&self, sample: u64) -> Result<u64, Error> {
        self.inverse(sample)
    }

    fn map_in_place(&self, positions: &mut [u64]) {
        Permutation::map_in_place(self, positions)
    }

    fn invert_in_place(&self, samples: &mut [u64]) {
        Permutation::invert_in_place(self, samples)
    }

    fn fill(&self, start: u64, out: &mut [u64]) -> Result<(), Error> {
        Permutation::fill(self, start, out) // a small order copies its table
    }
}

/// An order given as a list (O(n) memory): for proving an order produced elsewhere.
#[derive(Clone, Debug)]
pub struct Explicit {
    samples: Arc<[u64]>,
}

impl Explicit {
    /// `samples[p]` is the sample at position `p`; it must be a permutation of `[0, len)`.
    pub fn new(samples: impl Into<Arc<[u64]>>) -> Result<Self, Error> {
        let samples = samples.into();
        let n = samples.len() as u64;
        if n == 0 {
            return Err(Error::EmptyDomain);
        }
        if let Some(&bad) = samples.iter().find(|&&x| x >= n) {
            return Err(Error::OutOfRange {
                what: "sample",
                value: bad,
                n,
            });
        }
        Ok(Explicit { samples })
    }
}

impl SampleOrder for Explicit {
    fn algorithm(&self) -> &'static str {
        "explicit"
    }

    fn len(&self) -> u64 {
        self.samples.len() as u64
    }

    fn at(&self, position: u64) -> u64 {
        self.samples[position as usize]
    }

    fn position_of(&self, sample: u64) -> Result<u64, Error> {
        self.samples
            .iter()
            .position(|&x| x == sample)
            .map(|p| p as u64)
            .ok_or_else(|| Error::Invalid(format!("sample {sample} does not occur in the order")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Version;

    /// Every order, through the trait: `position_of` inverts `at`, batched equals scalar.
    fn check(order: &dyn SampleOrder) {
        let n = order.len();
        let mut batched: Vec<u64> = (0..n).collect();
        order.map_in_place(&mut batched);
        let mut back = batched.clone();
        order.invert_in_place(&mut back);
        assert!(
            back.iter().copied().eq(0..n),
            "{order:?}: the batched inverse"
        );
        let mut seen = vec![false; n as usize];
        for (p, &s) in batched.iter().enumerate() {
            assert_eq!(s, order.at(p as u64));
            assert!(!seen[s as usize], "{order:?}: sample {s} twice");
            seen[s as usize] = true;
            assert_eq!(order.position_of(s).unwrap(), p as u64);
        }
        assert!(order.position_of(n).is_err());
    }

    #[test]
    fn every_order_is_a_bijection_both_ways() {
        check(&Identity::new(37).unwrap());
        check(&Permutation::new(Version::V1, 1000, 4, 2).unwrap());
        check(&Explicit::new(vec![3, 0, 2, 1]).unwrap());
    }

    #[test]
    fn orders_name_their_algorithm() {
        assert_eq!(
            Permutation::new(Version::V1, 5, 0, 0).unwrap().algorithm(),
            "perm-v1"
        );
        assert_eq!(Identity::new(5).unwrap().algorithm(), "identity");
        assert_eq!(Explicit::new(vec![0]).unwrap().algorithm(), "explicit");
    }

    #[test]
    fn empty_or_out_of_range_orders_are_refused() {
        assert_eq!(Identity::new(0).unwrap_err(), Error::EmptyDomain);
        assert_eq!(Explicit::new(Vec::new()).unwrap_err(), Error::EmptyDomain);
        assert!(Explicit::new(vec![0, 2]).is_err());
    }
}
