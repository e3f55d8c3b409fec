//! What a pass of a token-budget plan holds in sum (its steps, padding and drops), and
//! where a sample is in it: every window from the resume point planned, a window per core
//! at a time (O(window) memory per core at any `n`).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BudgetStart, Lengths, TokenBudget, WindowPlan};
use crate::error::{check_below, Error};
use crate::pool;

/// A pass's plan in sum.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BudgetSummary {
    /// Steps every rank takes (one batch each).
    pub steps: u64,
    /// Items the pass yields that repeat a sample it yields (padding: batches filled to
    /// whole steps).
    pub padding: u64,
    /// Samples left out (`drop_last`).
    pub dropped: u64,
}

/// The items of `plan`'s steps from `done` on that repeat a sample yielded in them or in
/// the steps before (the window's padding, from a resume point in it).
fn padding_after(plan: &WindowPlan, world: u64, done: u64) -> u64 {
    if done == 0 {
        return plan.padding;
    }
    let split = (done * world) as usize;
    let mut seen = vec![false; plan.samples.len()];
    for &(lo, hi) in &plan.bounds[..split] {
        seen[lo as usize..hi as usize].fill(true);
    }
    let mut repeats = 0;
    for &(lo, hi) in &plan.bounds[split..] {
        for s in &mut seen[lo as usize..hi as usize] {
            repeats += u64::from(*s);
            *s = true;
        }
    }
    repeats
}

impl TokenBudget {
    /// The steps, padding and drops of the windows `windows` of the pass from `start`, on
    /// `threads` threads (`0`: all cores): the error of the first window that fails.
    fn sum_windows<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        windows: Range<u64>,
        threads: usize,
    ) -> Result<BudgetSummary, Error> {
        self.check_lengths(lengths, world)?;
        let [steps, padding, dropped] = [(); 3].map(|_| AtomicU64::new(0));
        pool::run(
            threads,
            windows.end.saturating_sub(windows.start),
            || (),
            |_, t| {
                let k = windows.start + t;
                let plan = self.plan(lengths, k, start.taken_in(k), world)?;
                let done = start.first_step_in(k);
                steps.fetch_add(plan.steps(world).saturating_sub(done), Ordering::Relaxed);
                padding.fetch_add(padding_after(&plan, world, done), Ordering::Relaxed);
                dropped.fetch_add(plan.dropped, Ordering::Relaxed);
                Ok(())
            },
        )?;
        Ok(BudgetSummary {
            steps: steps.into_inner(),
            padding: padding.into_inner(),
            dropped: dropped.into_inner(),
        })
    }

    /// The pass from `start` to the epoch's end, in sum.
    pub fn summary<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        threads: usize,
    ) -> Result<BudgetSummary, Error> {
        self.sum_windows(
            lengths,
            start,
            world,
            start.window()..self.windows(),
            threads,
        )
    }

    /// Steps per rank from `start` to the epoch's end.
    pub fn count_steps<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        threads: usize,
    ) -> Result<u64, Error> {
        Ok(self.summary(lengths, start, world, threads)?.steps)
    }

    /// Every `(rank, step)` of the pass from `start` whose batch holds `sample` (steps
    /// counted from the pass's first): none when it was taken before the resume or
    /// dropped, several when padding repeats it. Plans the windows before the sample's
    /// (for their steps) on `threads` threads.
    pub fn locate<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        sample: u64,
        threads: usize,
    ) -> Result<Vec<(u64, u64)>, Error> {
        let reads = self.locate_reads(lengths, start, world, sample, threads)?;
        Ok(reads.iter().map(|r| (r.rank, r.step)).collect())
    }

    /// Every read of `sample` in the pass from `start`, as [`TokenBudget::locate`] finds
    /// them, with its place in the batch and whether it is padding.
    pub fn locate_reads<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        sample: u64,
        threads: usize,
    ) -> Result<Vec<BudgetRead>, Error> {
        self.check_lengths(lengths, world)?;
        let Some(k) = self.window_of(start, sample)? else {
            return Ok(Vec::new());
        };
        let before = self
            .sum_windows(lengths, start, world, start.window()..k, threads)?
            .steps;
        self.reads_in_window(lengths, start, world, sample, k, before)
    }

    /// The window of the pass from `start` that holds `sample`; `None` when the pass does
    /// not (its window comes before the start, or the sample was taken before it).
    pub fn window_of(&self, start: &BudgetStart, sample: u64) -> Result<Option<u64>, Error> {
        check_below("sample", sample, self.n())?;
        let position = self.order.position_of(sample)?;
        let k = position / self.window();
        let offset = position - self.window_positions(k).start;
        let taken = start.taken_in(k).is_some_and(|t| t[offset as usize]);
        Ok((k >= start.window() && !taken).then_some(k))
    }

    /// The reads of `sample` in window `k` of the pass from `start`, `before` being the
    /// pass's steps before that window (steps counted from the pass's first).
    pub fn reads_in_window<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        sample: u64,
        k: u64,
        before: u64,
    ) -> Result<Vec<BudgetRead>, Error> {
        let plan = self.plan(lengths, k, start.taken_in(k), world)?;
        let Some(i) = plan.samples.iter().position(|&s| s == sample) else {
            return Ok(Vec::new());
        };
        let done = start.first_step_in(k);
        let mut reads: Vec<BudgetRead> = (0..plan.bounds.len())
            .filter_map(|b| plan.read(b, i as u64, world))
            .filter(|r| r.step >= done)
            .map(|r| BudgetRead {
                step: before + r.step - done,
                ..r
            })
            .collect();
        reads.sort_unstable_by_key(|r| (r.rank, r.step));
        Ok(reads)
    }

    /// The steps of each window of the pass from `start`, from its first, until they add
    /// up to `steps` or the epoch ends: planned on `threads` threads, a round of windows at
    /// a time (O(windows read) plans, not the epoch's).
    pub fn window_steps<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        steps: u64,
        threads: usize,
    ) -> Result<Vec<u64>, Error> {
        self.check_lengths(lengths, world)?;
        let round = 4 * pool::worker_threads(threads, u64::MAX) as u64;
        let mut out: Vec<u64> = Vec::new();
        let mut total = 0;
        let mut k = start.window();
        while total < steps && k < self.windows() {
            let windows = k..(k + round).min(self.windows());
            let counts: Vec<AtomicU64> = windows.clone().map(|_| AtomicU64::new(0)).collect();
            pool::run(
                threads,
                windows.end - windows.start,
                || (),
                |_, t| {
                    let w = windows.start + t;
                    let plan = self.plan(lengths, w, start.taken_in(w), world)?;
                    let count = plan.steps(world).saturating_sub(start.first_step_in(w));
                    counts[t as usize].store(count, Ordering::Relaxed);
                    Ok(())
                },
            )?;
            for count in counts {
                if total >= steps {
                    break;
                }
                let count = count.into_inner();
                total += count;
                out.push(count);
            }
            k = windows.end;
        }
        Ok(out)
    }
}

/// A read of one sample in a token-budget pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetRead {
    /// The rank whose batch holds it.
    pub rank: u64,
    /// The step (of the pass, or of the window's plan).
    pub step: u64,
    /// Its place in the batch.
    pub position: u64,
    /// Whether an earlier batch of the window's plan holds it too (this read repeats it).
    pub padding: bool,
}

impl WindowPlan {
    /// The read of the plan's `i`-th sample in its `b`-th batch (step-major), if that
    /// batch holds it: step and rank counted in the plan.
    pub fn read(&self, b: usize, i: u64, world: u64) -> Option<BudgetRead> {
        let (lo, hi) = self.bounds[b];
        if !(lo..hi).contains(&i) {
            return None;
        }
        Some(BudgetRead {
            rank: b as u64 % world,
            step: b as u64 / world,
            position: i - lo,
            padding: self.bounds[..b].iter().any(|&(l, h)| (l..h).contains(&i)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permutation::Version;

    /// Every `(rank, step)` of every sample, by running the pass as a sampler does.
    fn brute(
        budget: &TokenBudget,
        lengths: &[u32],
        start: &BudgetStart,
        world: u64,
    ) -> (Vec<Vec<(u64, u64)>>, BudgetSummary) {
        let mut hits = vec![Vec::new(); lengths.len()];
        let mut sum = BudgetSummary::default();
        let mut step = 0;
        for k in start.window()..budget.windows() {
            let plan = budget.plan(lengths, k, start.taken_in(k), world).unwrap();
            sum.dropped += plan.dropped;
            for s in start.first_step_in(k)..plan.steps(world) {
                for r in 0..world {
                    let (lo, hi) = plan.bounds[(s * world + r) as usize];
                    for &sample in &plan.samples[lo as usize..hi as usize] {
                        hits[sample as usize].push((r, step));
                    }
                }
                step += 1;
            }
        }
        sum.steps = step;
        // A pass repeats a sample as padding, or a sample its window yielded before.
        let done: std::collections::HashSet<u64> = (0..start.first_step_in(start.window()))
            .flat_map(|s| {
                let plan = budget
                    .plan(
                        lengths,
                        start.window(),
                        start.taken_in(start.window()),
                        world,
                    )
                    .unwrap();
                (0..world)
                    .flat_map(|r| {
                        let (lo, hi) = plan.bounds[(s * world + r) as usize];
                        plan.samples[lo as usize..hi as usize].to_vec()
                    })
                    .collect::<Vec<u64>>()
            })
            .collect();
        sum.padding = hits
            .iter()
            .enumerate()
            .map(|(sample, h)| {
                h.len() as u64 - u64::from(!h.is_empty() && !done.contains(&(sample as u64)))
            })
            .sum();
        for h in &mut hits {
            h.sort_unstable();
        }
        (hits, sum)
    }

    #[test]
    fn the_summary_and_locate_agree_with_the_pass() {
        // Mixed lengths (batches of several samples, halved to fill steps), and lengths
        // that fill a batch alone (steps filled by padding or drops).
        let mixed: Vec<u32> = (0..503u32).map(|i| 1 + (i * 37 % 61)).collect();
        let alone: Vec<u32> = (0..503u32).map(|i| 81 + (i * 37 % 29)).collect();
        for (lengths, cut_by_repeats) in [(mixed, false), (alone, true)] {
            for (drop_last, world) in [(false, 3), (true, 3), (false, 1)] {
                let budget =
                    crate::budget::test_budget(Version::V2, 503, 160, 64, 7, 1, true, drop_last)
                        .unwrap();
                let fresh = BudgetStart::new(&budget, 0, &[], 0).unwrap();
                let resumed = fresh.after(2);
                let later = BudgetStart::new(&budget, 3, &[], 0).unwrap();
                for start in [fresh, resumed, later] {
                    let (hits, sum) = brute(&budget, &lengths, &start, world);
                    assert_eq!(budget.summary(&lengths[..], &start, world, 2).unwrap(), sum);
                    if cut_by_repeats && world > 1 {
                        assert!(sum.padding + sum.dropped > 0 && hits.iter().any(|h| h.len() != 1));
                    }
                    for (sample, expected) in hits.iter().enumerate() {
                        let got =
                            (budget.locate(&lengths[..], &start, world, sample as u64, 2)).unwrap();
                        assert_eq!(&got, expected, "sample {sample}, world {world}");
                    }
                }
            }
        }
        let lengths = vec![1u32; 503];
        let budget =
            crate::budget::test_budget(Version::V2, 503, 160, 64, 7, 1, true, false).unwrap();
        let start = BudgetStart::new(&budget, 0, &[], 0).unwrap();
        assert!(budget.locate(&lengths[..], &start, 3, 503, 1).is_err());
    }
}
