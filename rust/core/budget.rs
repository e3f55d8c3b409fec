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
//! The proof ([`TokenBudget::prove`]) takes a plan as the sampler hands it out and checks
//! it through the order's inverse: every sample of the window's plan must come from a
//! position of the window not taken before, each once, but for the declared padding and
//! drops; every batch under the budget. O(window) memory at any `n`.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Error;
use crate::order::{Identity, Order};
use crate::permutation::Permutation;
use crate::proof::worker_threads;

/// The algorithm id of budget-v1 plans, recorded in state dicts.
pub const BUDGET_ALGORITHM: &str = "budget-v1";

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

/// What the proof of one window found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowProof {
    /// Samples each rank yields in the steps from `first_step` on (padding included).
    pub per_rank: Vec<u64>,
    /// Steps from `first_step` on.
    pub steps: u64,
    /// Positions of the window consumed before: taken, or in the steps before `first_step`.
    pub consumed: u64,
    /// Positions yielded in the steps from `first_step` on, and not consumed before.
    pub covered: u64,
    /// Repeated samples (declared padding; checked equal).
    pub padding: u64,
    /// Positions no step holds (declared drops; checked equal).
    pub dropped: u64,
}

/// The token-budget plan of an epoch: its order and budget.
#[derive(Clone, Debug)]
pub struct TokenBudget {
    order: Order,
    max_tokens: u64,
    window: u64,
    seed: u64,
    epoch: u64,
    shuffle: bool,
    drop_last: bool,
}

impl TokenBudget {
    /// The plan of `n` samples for `(seed, epoch)`: perm-v1's order, or the identity
    /// without `shuffle`.
    pub fn new(
        n: u64,
        max_tokens: u64,
        window: u64,
        seed: u64,
        epoch: u64,
        shuffle: bool,
        drop_last: bool,
    ) -> Result<Self, Error> {
        if max_tokens == 0 || window == 0 {
            return Err(Error::Invalid(format!(
                "max_tokens ({max_tokens}) and window ({window}) must be at least 1"
            )));
        }
        let order: Order = if shuffle {
            Arc::new(Permutation::new(n, seed, epoch)?)
        } else {
            Arc::new(Identity::new(n)?)
        };
        Ok(TokenBudget {
            order,
            max_tokens,
            window,
            seed,
            epoch,
            shuffle,
            drop_last,
        })
    }

    /// Number of samples.
    pub fn n(&self) -> u64 {
        self.order.len()
    }

    /// Positions planned together.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// Number of windows, `ceil(n / window)`.
    pub fn windows(&self) -> u64 {
        self.n().div_ceil(self.window)
    }

    /// The positions of window `k < windows()`.
    pub fn window_positions(&self, k: u64) -> Range<u64> {
        let start = k.saturating_mul(self.window).min(self.n());
        start..start.saturating_add(self.window).min(self.n())
    }

    /// The samples of window `k`, in the order's order.
    pub fn samples(&self, k: u64) -> Result<Vec<u64>, Error> {
        self.check_window(k)?;
        let positions = self.window_positions(k);
        let mut out = vec![0u64; (positions.end - positions.start) as usize];
        self.order.fill(positions.start, &mut out)?;
        Ok(out)
    }

    fn check_window(&self, k: u64) -> Result<(), Error> {
        if k >= self.windows() {
            return Err(Error::OutOfRange {
                what: "window",
                value: k,
                n: self.windows(),
            });
        }
        Ok(())
    }

    fn check_lengths<L: Lengths + ?Sized>(&self, lengths: &L, world: u64) -> Result<(), Error> {
        if lengths.count() != self.n() {
            return Err(Error::Invalid(format!(
                "lengths holds {} samples, the plan {}: pass the same lengths",
                lengths.count(),
                self.n()
            )));
        }
        if world == 0 || world > self.window {
            return Err(Error::Invalid(format!(
                "world ({world}) must be in [1, window={}]",
                self.window
            )));
        }
        Ok(())
    }

    fn check_taken(&self, k: u64, taken: Option<&[bool]>) -> Result<(), Error> {
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
            if length > self.max_tokens {
                return Err(Error::Invalid(format!(
                    "sample {s} has length {length} > max_tokens={}: no batch can hold it. \
                     Raise max_tokens, or truncate or filter long samples",
                    self.max_tokens
                )));
            }
            keyed.push((length, i as u64));
        }
        keyed.sort_unstable(); // (length, window index): a stable sort by length
        let sorted: Vec<u64> = keyed.iter().map(|&(_, i)| samples[i as usize]).collect();
        let length = |i: u64| keyed[i as usize].0;
        let fits = |i: u64, j: u64| {
            u128::from(j - i + 1) * u128::from(length(j)) <= u128::from(self.max_tokens)
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
            } else if self.drop_last {
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
        let shuffled = match (self.shuffle, steps) {
            (true, 1..) => Some(Permutation::new(
                steps,
                window_seed(self.seed, self.epoch, k),
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

    /// Steps per rank from window `k` (its steps from `first_step` on) to the epoch's
    /// end, planning the windows on `threads` threads (`0`: all cores).
    pub fn count_steps<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        k: u64,
        taken: Option<&[bool]>,
        first_step: u64,
        world: u64,
        threads: usize,
    ) -> Result<u64, Error> {
        self.check_lengths(lengths, world)?;
        if k >= self.windows() {
            return Ok(0);
        }
        self.check_taken(k, taken)?;
        let tasks = self.windows() - k;
        let next = AtomicU64::new(k);
        let total = AtomicU64::new(0);
        // The error of the first window that fails, whichever thread finds it.
        let failed: Mutex<Option<(u64, Error)>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..worker_threads(threads, tasks) {
                scope.spawn(|| loop {
                    let w = next.fetch_add(1, Ordering::Relaxed);
                    if w >= self.windows() {
                        break;
                    }
                    let plan = self.plan(lengths, w, if w == k { taken } else { None }, world);
                    match plan {
                        Ok(plan) => {
                            let skip = if w == k { first_step } else { 0 };
                            total.fetch_add(
                                plan.steps(world).saturating_sub(skip),
                                Ordering::Relaxed,
                            );
                        }
                        Err(e) => {
                            let mut slot = failed.lock().unwrap_or_else(|e| e.into_inner());
                            if slot.as_ref().is_none_or(|(v, _)| w < *v) {
                                *slot = Some((w, e));
                            }
                        }
                    }
                });
            }
        });
        match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some((_, e)) => Err(e),
            None => Ok(total.into_inner()),
        }
    }

    /// Proves `plan` (as handed out, maybe not by [`TokenBudget::plan`]) a plan of window
    /// `k` for `world` ranks after a resume that took `taken` and consumed the steps
    /// before `first_step`: whole steps, every batch non-empty and within the budget,
    /// and every sample, inverted by the order, a position of the window held once: but
    /// for the declared padding (repeats) and drops (positions no step holds), and the
    /// taken positions (held by no step).
    pub fn prove<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        k: u64,
        taken: Option<&[bool]>,
        first_step: u64,
        world: u64,
        plan: &WindowPlan,
    ) -> Result<WindowProof, Error> {
        self.check_lengths(lengths, world)?;
        self.check_window(k)?;
        self.check_taken(k, taken)?;
        let violation = |what: String| Err(Error::Violation(format!("window {k}: {what}")));
        if plan.bounds.len() as u64 % world != 0 {
            return violation(format!(
                "{} batches do not fill steps of {world} (one batch per rank)",
                plan.bounds.len()
            ));
        }
        let steps = plan.steps(world);
        if first_step > steps {
            return Err(Error::Invalid(format!(
                "steps ({first_step}) is past the {steps} steps of window {k}: the state was \
                 saved with another configuration or edited"
            )));
        }
        let positions = self.window_positions(k);
        let size = positions.end - positions.start;
        let mut times = vec![0u32; size as usize]; // each position's appearances
        let mut consumed_at = vec![false; size as usize];
        if let Some(taken) = taken {
            for (p, &t) in taken.iter().enumerate() {
                if t {
                    times[p] = 1;
                    consumed_at[p] = true;
                }
            }
        }
        let mut proof = WindowProof {
            per_rank: vec![0; world as usize],
            steps: steps - first_step,
            ..WindowProof::default()
        };
        let n = self.n();
        // Every batch's samples, in the order of the batches, inverted at once (batched).
        let mut found = Vec::with_capacity(plan.samples.len());
        for (b, &(i, j)) in plan.bounds.iter().enumerate() {
            let (step, rank) = (b as u64 / world, b as u64 % world);
            if i >= j || j > plan.samples.len() as u64 {
                return violation(format!(
                    "the batch of rank {rank} at step {step} is [{i}, {j}), not a non-empty \
                     range of the {} samples",
                    plan.samples.len()
                ));
            }
            let batch = &plan.samples[i as usize..j as usize];
            if let Some(s) = batch.iter().find(|&&s| s >= n) {
                return violation(format!("sample {s} at step {step} is out of [0, {n})"));
            }
            found.extend_from_slice(batch);
        }
        self.order.invert_in_place(&mut found);
        let mut found = found.iter();
        for (b, &(i, j)) in plan.bounds.iter().enumerate() {
            let (step, rank) = (b as u64 / world, b as u64 % world);
            let batch = &plan.samples[i as usize..j as usize];
            for (&s, &p) in batch.iter().zip(found.by_ref()) {
                if !positions.contains(&p) {
                    return violation(format!(
                        "sample {s} (rank {rank}, step {step}) sits at position {p}, outside \
                         the window's positions [{}, {})",
                        positions.start, positions.end
                    ));
                }
                let at = (p - positions.start) as usize;
                times[at] = times[at].saturating_add(1);
                if step < first_step {
                    consumed_at[at] = true;
                }
            }
            let mut longest = 0;
            for &s in batch {
                longest = longest.max(lengths.length(s)?);
            }
            if u128::from(j - i) * u128::from(longest) > u128::from(self.max_tokens) {
                return violation(format!(
                    "a batch exceeds max_tokens={} (rank {rank}, step {step}: {} samples, the \
                     longest {longest} tokens)",
                    self.max_tokens,
                    j - i
                ));
            }
            if step >= first_step {
                proof.per_rank[rank as usize] += j - i;
            }
        }
        let (mut missing, mut repeated) = (0u64, 0u64);
        for (&t, &c) in times.iter().zip(consumed_at.iter()) {
            match t {
                0 => missing += 1,
                t => repeated += u64::from(t) - 1,
            }
            proof.consumed += u64::from(c);
        }
        if missing != plan.dropped || repeated != plan.padding {
            return violation(format!(
                "the plan misses {missing} samples (declared dropped: {}) and repeats \
                 {repeated} (declared padding: {})",
                plan.dropped, plan.padding
            ));
        }
        proof.covered = size - proof.consumed - missing;
        proof.padding = repeated;
        proof.dropped = missing;
        Ok(proof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(n: u64, seed: u64) -> Vec<u32> {
        (0..n)
            .map(|i| 1 + (crate::mix::splitmix64(seed ^ i) % 4000) as u32)
            .collect()
    }

    fn budget(n: u64, window: u64, drop_last: bool) -> TokenBudget {
        TokenBudget::new(n, 16384, window, 3, 1, true, drop_last).unwrap()
    }

    #[test]
    fn every_window_plan_is_proven_and_counted() {
        for (n, window, world, drop_last) in [
            (3000, 512, 1, false),
            (3000, 700, 3, false),
            (2049, 256, 4, true),
            (37, 16, 8, false),
            (5, 4, 4, false),
            (5, 4, 4, true),
        ] {
            let l = lengths(n, n);
            let b = budget(n, window, drop_last);
            let mut steps = 0;
            for k in 0..b.windows() {
                let plan = b.plan(l.as_slice(), k, None, world).unwrap();
                let proof = b.prove(l.as_slice(), k, None, 0, world, &plan).unwrap();
                assert_eq!(proof.steps, plan.steps(world));
                assert_eq!(
                    proof.per_rank.iter().sum::<u64>(),
                    plan.bounds.iter().map(|(i, j)| j - i).sum::<u64>()
                );
                assert_eq!(
                    proof.covered + proof.dropped,
                    b.window_positions(k).end - b.window_positions(k).start
                );
                steps += plan.steps(world);
            }
            for threads in [1, 3] {
                assert_eq!(
                    b.count_steps(l.as_slice(), 0, None, 0, world, threads)
                        .unwrap(),
                    steps
                );
            }
        }
    }

    #[test]
    fn broken_plans_fail_the_proof() {
        let l = lengths(3000, 5);
        let b = budget(3000, 1000, false);
        let plan = b.plan(l.as_slice(), 1, None, 2).unwrap();
        let message = |p: &WindowPlan| {
            b.prove(l.as_slice(), 1, None, 0, 2, p)
                .unwrap_err()
                .to_string()
        };

        let mut repeat = plan.clone(); // a sample twice, another missing
        repeat.samples[0] = repeat.samples[1];
        assert!(message(&repeat).contains("misses 1 samples (declared dropped: 0) and repeats 1"));
        let mut over = plan.clone(); // the longest batch one longer
        let (i, j) = over.bounds[0];
        over.bounds[0] = (i, j + 1);
        assert!(
            message(&over).contains("exceeds max_tokens=16384"),
            "{}",
            message(&over)
        );
        let mut foreign = plan.clone(); // a sample of window 0
        foreign.samples[0] = b.samples(0).unwrap()[0];
        assert!(message(&foreign).contains("outside the window's positions [1000, 2000)"));
        let mut short = plan.clone();
        short.bounds.pop();
        assert!(message(&short).contains("do not fill steps of 2"));
        assert!(b.prove(l.as_slice(), 1, None, 0, 2, &plan).is_ok());
    }

    #[test]
    fn a_resume_takes_samples_out_and_counts_them_consumed() {
        let l = lengths(2000, 9);
        let b = budget(2000, 1000, false);
        let taken: Vec<bool> = (0..1000).map(|p| p % 3 == 0).collect();
        let plan = b.plan(l.as_slice(), 0, Some(&taken), 2).unwrap();
        assert_eq!(plan.samples.len(), 1000 - 334);
        let proof = b.prove(l.as_slice(), 0, Some(&taken), 2, 2, &plan).unwrap();
        let in_two_steps: u64 = plan.bounds[..4].iter().map(|(i, j)| j - i).sum();
        assert_eq!(proof.consumed, 334 + in_two_steps);
        assert_eq!(proof.covered, 1000 - proof.consumed);
        let total = b
            .count_steps(l.as_slice(), 0, Some(&taken), 2, 2, 0)
            .unwrap();
        assert_eq!(
            total,
            plan.steps(2) - 2 + b.plan(l.as_slice(), 1, None, 2).unwrap().steps(2)
        );
    }

    #[test]
    fn bad_input_is_refused_with_the_fix() {
        let b = budget(100, 10, false);
        let long = vec![20000u32; 100];
        let e = b.plan(long.as_slice(), 0, None, 2).unwrap_err().to_string();
        assert!(
            e.contains("> max_tokens=16384") && e.contains("Raise max_tokens"),
            "{e}"
        );
        let negative = vec![-1i64; 100];
        assert!(b
            .plan(negative.as_slice(), 0, None, 2)
            .unwrap_err()
            .to_string()
            .contains("negative length"));
        let short = vec![1u8; 99];
        assert!(b
            .plan(short.as_slice(), 0, None, 2)
            .unwrap_err()
            .to_string()
            .contains("holds 99 samples"));
        let ok = vec![1u8; 100];
        assert!(b.plan(ok.as_slice(), 10, None, 2).is_err());
        assert!(b.plan(ok.as_slice(), 0, None, 11).is_err());
        assert!(b.plan(ok.as_slice(), 0, Some(&[true; 3]), 2).is_err());
        assert!(TokenBudget::new(10, 0, 1, 0, 0, true, false).is_err());
        // The error of the first failing window, whatever the threads.
        let b = TokenBudget::new(100, 16384, 10, 0, 0, false, false).unwrap();
        let mut some_long = vec![1u16; 100];
        some_long[95] = 20000;
        some_long[42] = 20001;
        let e = b
            .count_steps(some_long.as_slice(), 0, None, 0, 2, 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("sample 42 has length 20001"), "{e}");
    }
}
