//! budget-v1: batches of variable-length samples under a padded token budget, the same
//! number on every rank, planned a window of the epoch's order at a time.
//!
//! A window's samples (positions `[k·window, (k+1)·window)` of the order, minus those a
//! resume took before) are sorted by length (ties: window order) and cut greedily into
//! batches with `len(batch) · max(lengths) <= max_tokens`. Until the batches fill whole
//! steps of `world` batches, the first largest one is halved, or (single samples left)
//! the last one dropped (`drop_last`) or one repeated as padding. Batches are sorted by
//! padded load (heaviest first, stable); rank `r` of step `s` takes batch
//! `s·world + (r + s) % world`; the steps are shuffled by perm-v1 keyed per window.
//!
//! A resume point ([`BudgetStart`]) is a window, its samples taken before and the steps of
//! its plan done; [`TokenBudget::resume`] re-plans it onto another world size. The proof
//! (`proof.rs`) checks every window's plan through the order's inverse, a window per
//! core at a time. O(window) memory per core at any `n`.

use std::ops::Range;
use std::sync::Arc;

use crate::error::{check_below, Error};
use crate::order::{Identity, Order};
use crate::permutation::Permutation;
use crate::state::BudgetEpoch;

mod batches;
mod proof;
mod start;
mod summary;

pub use batches::BudgetBatches;
pub use proof::{BudgetShare, WindowProof};
pub use start::BudgetStart;
pub use summary::{BudgetRead, BudgetSummary};

pub use crate::algorithm::BUDGET_ALGORITHMS;

/// The id of the token-budget plan of new runs: budget-v2.
pub const BUDGET_ALGORITHM: &str = BUDGET_ALGORITHMS[1];

/// One length per sample, in tokens.
pub trait Lengths: Sync {
    /// Number of samples.
    fn count(&self) -> u64;

    /// The length of `sample < count`; an error for a negative one.
    fn length(&self, sample: u64) -> Result<u64, Error>;
}

/// Lengths in an integer array of any width; a negative one is refused when read.
macro_rules! lengths_of {
    ($($t:ty),*) => {$(
        impl Lengths for [$t] {
            fn count(&self) -> u64 {
                self.len() as u64
            }
            fn length(&self, sample: u64) -> Result<u64, Error> {
                let value = self[sample as usize];
                u64::try_from(value).map_err(|_| {
                    Error::Invalid(format!(
                        "sample {sample} has a negative length ({value}): lengths count \
                         tokens; fix the lengths array"
                    ))
                })
            }
        }
    )*};
}

lengths_of!(u8, u16, u32, u64, i8, i16, i32, i64);

/// The key of window `k`'s step order.
pub fn window_seed(seed: u64, epoch: u64, k: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(epoch.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(k)
        .wrapping_add(1)
}

/// One window's plan: `samples` sorted by length, and the batches as ranges of it,
/// step-major (`bounds[s·world + r]` is rank `r`'s batch at step `s`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// The window's samples (without those taken), sorted by length.
    pub samples: Vec<u64>,
    /// `[start, stop)` into `samples` of each batch, step-major.
    pub bounds: Vec<(u64, u64)>,
    /// Samples repeated so the batches fill whole steps.
    pub padding: u64,
    /// Samples left out (`drop_last`).
    pub dropped: u64,
}

impl WindowPlan {
    /// Steps of `world` batches.
    pub fn steps(&self, world: u64) -> u64 {
        self.bounds.len() as u64 / world
    }
}

/// The token-budget plan of an epoch: its order and budget.
#[derive(Clone, Debug)]
pub struct TokenBudget {
    /// The epoch's fields (checked), the budget and the window among them.
    config: BudgetEpoch,
    /// The samples' order: `config`'s permutation, or the identity without a shuffle.
    order: Order,
}

impl TokenBudget {
    /// The plan of `config`'s epoch, its fields checked ([`BudgetEpoch::new`]): the order
    /// of its permutation (budget-v1: perm-v1, budget-v2: perm-v2, for the samples and
    /// each window's steps), or the identity without `shuffle`. Its ranks are a pass's,
    /// not the plan's: one plan serves a resume onto another world size.
    pub fn of(config: &BudgetEpoch) -> Result<Self, Error> {
        let config = BudgetEpoch::new(config.clone())?;
        let spec = &config.spec;
        let order: Order = if spec.shuffle {
            Arc::new(Permutation::of_version(
                spec.permutation,
                spec.n,
                spec.seed,
                spec.epoch,
                0,
            )?)
        } else {
            Arc::new(Identity::new(spec.n)?)
        };
        Ok(TokenBudget { config, order })
    }

    /// Its algorithm id: budget-v1 or budget-v2.
    pub fn algorithm(&self) -> &'static str {
        self.config.algorithm()
    }

    /// Number of samples.
    pub fn n(&self) -> u64 {
        self.order.len()
    }

    /// Positions planned together.
    pub fn window(&self) -> u64 {
        self.config.window
    }

    /// Number of windows, `ceil(n / window)`.
    pub fn windows(&self) -> u64 {
        self.n().div_ceil(self.config.window)
    }

    /// The positions of window `k < windows()`.
    pub fn window_positions(&self, k: u64) -> Range<u64> {
        let start = k.saturating_mul(self.config.window).min(self.n());
        start..start.saturating_add(self.config.window).min(self.n())
    }

    /// The samples of window `k`, in the order's order.
    pub fn samples(&self, k: u64) -> Result<Vec<u64>, Error> {
        self.check_window(k)?;
        let positions = self.window_positions(k);
        let mut out = vec![0u64; (positions.end - positions.start) as usize];
        self.order.fill(positions.start, &mut out)?;
        Ok(out)
    }

    pub(crate) fn check_window(&self, k: u64) -> Result<(), Error> {
        check_below("window", k, self.windows())?;
        Ok(())
    }

    pub(crate) fn check_lengths<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        world: u64,
    ) -> Result<(), Error> {
        if lengths.count() != self.n() {
            return Err(Error::Invalid(format!(
                "lengths holds {} samples, the plan {}: pass the same lengths",
                lengths.count(),
                self.n()
            )));
        }
        if world == 0 || world > self.config.window {
            return Err(Error::Invalid(format!(
                "world ({world}) must be in [1, window={}]",
                self.config.window
            )));
        }
        Ok(())
    }

    pub(crate) fn check_taken(&self, k: u64, taken: Option<&[bool]>) -> Result<(), Error> {
        let size = self.window_positions(k).end - self.window_positions(k).start;
        match taken {
            Some(t) if t.len() as u64 != size => Err(Error::Invalid(format!(
                "taken holds {} flags for a window of {size} positions",
                t.len()
            ))),
            _ => Ok(()),
        }
    }

    /// The plan of window `k` for `world` ranks, without the samples `taken` (one flag
    /// per position of the window) before a resume.
    pub fn plan<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        k: u64,
        taken: Option<&[bool]>,
        world: u64,
    ) -> Result<WindowPlan, Error> {
        self.check_lengths(lengths, world)?;
        self.check_taken(k, taken)?;
        let mut samples = self.samples(k)?;
        if let Some(taken) = taken {
            let mut flags = taken.iter();
            samples.retain(|_| !flags.next().copied().unwrap_or(false));
        }
        let mut keyed = Vec::with_capacity(samples.len());
        for (i, &s) in samples.iter().enumerate() {
            let length = lengths.length(s)?;
            if length > self.config.max_tokens {
                return Err(Error::Invalid(format!(
                    "sample {s} has length {length} > max_tokens={}: no batch can hold it. \
                     Raise max_tokens, or truncate or filter long samples",
                    self.config.max_tokens
                )));
            }
            keyed.push((length, i as u64));
        }
        keyed.sort_unstable(); // (length, window index): a stable sort by length
        let sorted: Vec<u64> = keyed.iter().map(|&(_, i)| samples[i as usize]).collect();
        let length = |i: u64| keyed[i as usize].0;
        let fits = |i: u64, j: u64| {
            u128::from(j - i + 1) * u128::from(length(j)) <= u128::from(self.config.max_tokens)
        };

        // Greedy cut: a batch grows while its padded size stays within the budget.
        let count = sorted.len() as u64;
        let mut batches: Vec<(u64, u64)> = Vec::new();
        let mut i = 0;
        while i < count {
            let mut j = i + 1;
            while j < count && fits(i, j) {
                j += 1;
            }
            batches.push((i, j));
            i = j;
        }
        let (mut padding, mut dropped) = (0u64, 0u64);
        while batches.len() as u64 % world != 0 {
            let mut largest = 0;
            for (b, &(i, j)) in batches.iter().enumerate() {
                if j - i > batches[largest].1 - batches[largest].0 {
                    largest = b;
                }
            }
            let (i, j) = batches[largest];
            if j - i > 1 {
                batches[largest] = (i, (i + j) / 2);
                batches.push(((i + j) / 2, j));
            } else if self.config.spec.drop_last {
                let (i, j) = batches.pop().unwrap_or((0, 0));
                dropped += j - i;
            } else {
                batches.push(batches[padding as usize % batches.len()]);
                padding += 1;
            }
        }
        // Heaviest first (stable), so a step's batches cost about the same.
        batches.sort_by_key(|&(i, j)| {
            std::cmp::Reverse(u128::from(j - i) * u128::from(length(j - 1)))
        });
        let steps = batches.len() as u64 / world;
        let shuffled = match (self.config.spec.shuffle, steps) {
            (true, 1..) => Some(Permutation::of_version(
                self.config.spec.permutation,
                steps,
                window_seed(self.config.spec.seed, self.config.spec.epoch, k),
                0,
                0,
            )?),
            _ => None,
        };
        let mut bounds = Vec::with_capacity(batches.len());
        for t in 0..steps {
            let s = shuffled.as_ref().map_or(t, |p| p.forward_unchecked(t));
            for r in 0..world {
                bounds.push(batches[(s * world + (r + s) % world) as usize]);
            }
        }
        Ok(WindowPlan {
            samples: sorted,
            bounds,
            padding,
            dropped,
        })
    }
}

/// Plans for the unit tests, from the fields one by one.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn test_budget(
    version: crate::permutation::Version,
    n: u64,
    max_tokens: u64,
    window: u64,
    seed: u64,
    epoch: u64,
    shuffle: bool,
    drop_last: bool,
) -> Result<TokenBudget, Error> {
    let spec = crate::epoch::EpochSpec {
        n,
        num_replicas: 1,
        seed,
        epoch,
        shuffle,
        drop_last,
        permutation: version,
    };
    TokenBudget::of(&BudgetEpoch {
        spec,
        max_tokens,
        window,
    })
}
