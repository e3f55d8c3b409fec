//! weighted-v1: one global stream of weighted draws per `(seed, epoch)`, with random access
//! by position, so any number of ranks deals the same stream (rank `r` takes positions
//! `r, r + W, …`) and a resume on another world size continues it exactly.
//!
//! * With replacement, position `p` is one draw from an alias table ([`AliasTable`], Vose's
//!   method, O(N) to build, 16 bytes per weight) fed by two 64-bit hashes of
//!   `(seed, epoch, p)`: no state between positions, O(1) per position.
//! * Without replacement, the stream is the order of exponential keys `E_i / w_i`
//!   (Efraimidis–Spirakis: the law of drawing one at a time, each with probability
//!   proportional to its weight among those left), `E_i = -ln U_i` from a hash of
//!   `(seed, epoch, i)`: the `num_samples` smallest keys, ascending, found in one pass
//!   over the weights with O(num_samples) memory. `ln` is computed with IEEE `+ - * /`
//!   only, so the stream is the same on every machine.
//!
//! Weights are `f64`, finite, `>= 0`, at least one positive; a zero weight is never drawn.

mod alias;
mod exponential;

use std::sync::Arc;

use crate::error::Error;
use crate::splitmix::{chain, splitmix64};
pub use alias::AliasTable;
use exponential::smallest_keys;

/// The id of the weighted draws, recorded in state dicts.
pub const WEIGHTED_ALGORITHM: &str = "weighted-v1";

/// Keeps the draws' keys apart from every other order's keyed by the same seed.
const DOMAIN: u64 = 0x7765_6967_6874_6564; // "weighted"

/// Validated weights: what one `WeightedShardedSampler` draws from, every epoch.
#[derive(Clone, Debug)]
pub struct Weights {
    source: Source,
    len: u64,
    positive: u64,
    digest: u64,
}

#[derive(Clone, Debug)]
enum Source {
    /// With replacement: the alias table.
    Alias(Arc<AliasTable>),
    /// Without replacement: the weights themselves (the keys are drawn per epoch).
    Plain(Arc<[f64]>),
}

impl Weights {
    /// Checks `weights` (finite, `>= 0`, at least one positive, a finite sum) and builds
    /// what the draws need: the alias table with `replacement`, else a copy of the weights.
    pub fn new(weights: &[f64], replacement: bool) -> Result<Weights, Error> {
        let (positive, digest) = check(weights)?;
        let source = if replacement {
            Source::Alias(Arc::new(AliasTable::new(weights)?))
        } else {
            Source::Plain(weights.into())
        };
        Ok(Weights {
            source,
            len: weights.len() as u64,
            positive,
            digest,
        })
    }

    /// Number of weights (the sample ids drawn are below it).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always `false`: weights are never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Weights that are positive: the most draws an epoch without replacement can take.
    pub fn positive(&self) -> u64 {
        self.positive
    }

    /// Whether the draws are with replacement.
    pub fn replacement(&self) -> bool {
        matches!(self.source, Source::Alias(_))
    }

    /// A 64-bit digest of the weights' bits and their number (ranks and resumes compare it).
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// `Ok` when an epoch of `num_draws` draws can be had: at least one, and without
    /// replacement at most [`Weights::positive`].
    pub fn check_draws(&self, num_draws: u64) -> Result<(), Error> {
        if num_draws == 0 {
            return Err(Error::Invalid(
                "num_draws should be a positive integer value, but got num_draws=0".into(),
            ));
        }
        if !self.replacement() && num_draws > self.positive {
            return Err(Error::Invalid(format!(
                "num_draws={num_draws} draws without replacement, but only {} of the \
                 {} weights are positive; pass num_draws <= {} or replacement=True",
                self.positive, self.len, self.positive
            )));
        }
        Ok(())
    }

    /// The draws of epoch `epoch`: `num_samples` positions of the stream keyed by `seed`
    /// (checked by [`Weights::check_draws`]). Without replacement this draws the epoch's
    /// keys (O(N) time, O(num_samples) memory).
    pub fn epoch(&self, seed: u64, epoch: u64, num_samples: u64) -> Result<EpochDraws, Error> {
        self.check_draws(num_samples)?;
        let key = chain(DOMAIN, &[seed, epoch]);
        let kind = match &self.source {
            Source::Alias(table) => Kind::Alias(Arc::clone(table), key),
            Source::Plain(weights) => Kind::Chosen(smallest_keys(weights, key, num_samples).into()),
        };
        Ok(EpochDraws { kind, num_samples })
    }
}

/// The checks of [`Weights::new`]: the count of positive weights and the digest.
fn check(weights: &[f64]) -> Result<(u64, u64), Error> {
    if weights.is_empty() {
        return Err(Error::Invalid(
            "weights is empty; pass at least one weight".into(),
        ));
    }
    let (mut positive, mut sum, mut digest) = (0u64, 0f64, 0u64);
    for (i, &w) in weights.iter().enumerate() {
        if !w.is_finite() || w < 0.0 {
            return Err(Error::Invalid(format!(
                "weights[{i}] is {w}: every weight must be finite and >= 0"
            )));
        }
        positive += u64::from(w > 0.0);
        sum += w;
        // Each weight hashed with its index, independently (no chain to wait on); +0.0
        // for -0.0: equal weights, equal digests.
        let place = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        digest = digest.wrapping_add(splitmix64((w + 0.0).to_bits() ^ place));
    }
    let digest = splitmix64(digest ^ splitmix64(weights.len() as u64));
    if positive == 0 {
        return Err(Error::Invalid(format!(
            "all {} weights are 0: at least one must be positive",
            weights.len()
        )));
    }
    if !sum.is_finite() {
        return Err(Error::Invalid(
            "the weights' sum overflows a float64: scale them down (only their ratios matter)"
                .into(),
        ));
    }
    Ok((positive, digest))
}

/// One epoch's stream of draws: position → sample id, O(1) each.
#[derive(Clone, Debug)]
pub struct EpochDraws {
    kind: Kind,
    num_samples: u64,
}

#[derive(Clone, Debug)]
enum Kind {
    /// With replacement: the table and the epoch's key.
    Alias(Arc<AliasTable>, u64),
    /// Without replacement: the samples in the order drawn.
    Chosen(Arc<[u64]>),
}

impl EpochDraws {
    /// Positions of the stream (the epoch's draws).
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// The sample drawn at position `p`.
    pub fn at(&self, p: u64) -> Result<u64, Error> {
        crate::error::check_below("position", p, self.num_samples)?;
        Ok(self.draw(p))
    }

    #[inline]
    fn draw(&self, p: u64) -> u64 {
        match &self.kind {
            Kind::Alias(table, key) => {
                let column = splitmix64(key ^ splitmix64(p));
                table.draw(column, splitmix64(column ^ key))
            }
            Kind::Chosen(samples) => samples[p as usize],
        }
    }

    /// Replaces each position of `positions` by the sample drawn there.
    pub fn map_in_place(&self, positions: &mut [u64]) -> Result<(), Error> {
        if let Some(&p) = positions.iter().find(|&&p| p >= self.num_samples) {
            return Err(Error::OutOfRange {
                what: "position",
                value: p,
                n: self.num_samples,
            });
        }
        for p in positions.iter_mut() {
            *p = self.draw(*p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_weights_are_refused_by_name() {
        let msg = |w: &[f64]| Weights::new(w, true).unwrap_err().to_string();
        assert!(msg(&[]).contains("empty"));
        assert!(msg(&[1.0, -1.0]).contains("weights[1] is -1"));
        assert!(msg(&[1.0, f64::NAN]).contains("weights[1] is NaN"));
        assert!(msg(&[f64::INFINITY]).contains("finite"));
        assert!(msg(&[0.0, 0.0]).contains("all 2 weights are 0"));
        assert!(msg(&[f64::MAX, f64::MAX]).contains("overflows"));
    }

    #[test]
    fn zero_weights_are_never_drawn() {
        let weights = [0.0, 3.0, 0.0, 1.0, 0.0];
        for replacement in [true, false] {
            let w = Weights::new(&weights, replacement).unwrap();
            let draws = w.epoch(7, 0, 2).unwrap();
            for p in 0..2 {
                assert!([1, 3].contains(&draws.at(p).unwrap()));
            }
        }
        let draws = Weights::new(&weights, true)
            .unwrap()
            .epoch(7, 0, 10_000)
            .unwrap();
        let mut positions: Vec<u64> = (0..10_000).collect();
        draws.map_in_place(&mut positions).unwrap();
        let ones = positions.iter().filter(|&&s| s == 1).count();
        assert!(positions.iter().all(|s| [1, 3].contains(s)));
        assert!(
            (7_000..8_000).contains(&ones),
            "{ones} of 10000 should be about 7500"
        );
    }

    #[test]
    fn without_replacement_draws_each_positive_weight_once() {
        let weights: Vec<f64> = (0..100).map(|i| (i % 7) as f64).collect();
        let w = Weights::new(&weights, false).unwrap();
        let all = w.epoch(1, 2, w.positive()).unwrap();
        let mut seen: Vec<u64> = (0..w.positive()).map(|p| all.at(p).unwrap()).collect();
        seen.sort_unstable();
        let expected: Vec<u64> = (0..100).filter(|i| i % 7 != 0).collect();
        assert_eq!(seen, expected);
        let err = w.epoch(1, 2, w.positive() + 1).unwrap_err().to_string();
        assert!(err.contains("replacement=True"), "{err}");
        // A prefix is the same whatever num_samples: the k smallest keys.
        let few = w.epoch(1, 2, 5).unwrap();
        for p in 0..5 {
            assert_eq!(few.at(p).unwrap(), all.at(p).unwrap());
        }
    }

    #[test]
    fn epochs_and_seeds_give_other_streams_and_the_digest_follows_the_weights() {
        let w = Weights::new(&[1.0; 1000], true).unwrap();
        let take = |seed, epoch| -> Vec<u64> {
            let d = w.epoch(seed, epoch, 64).unwrap();
            (0..64).map(|p| d.at(p).unwrap()).collect()
        };
        assert_eq!(take(0, 0), take(0, 0));
        assert_ne!(take(0, 0), take(0, 1));
        assert_ne!(take(0, 0), take(1, 0));
        let other = Weights::new(&[1.0; 999], true).unwrap();
        assert_ne!(w.digest(), other.digest());
        assert_eq!(
            Weights::new(&[-0.0, 1.0], true).unwrap().digest(),
            Weights::new(&[0.0, 1.0], false).unwrap().digest()
        );
        assert!(w.epoch(0, 0, 3).unwrap().at(3).is_err());
    }
}
