//! [`PassPlan`]: what every dealing's pass answers, one interface for round-robin, step
//! and the token budget — its steps, the batch of each rank at each step, where a sample
//! is, the pass left after some steps (the resume point), each rank's share of the exact
//! proof and the judgement of the shares added up.
//!
//! A [`Partition`] is the plan of round-robin and step (an item sampler's step is one
//! item); a [`BudgetPass`] is the token budget's: the plan, its lengths, its resume point
//! and world size together. What one dealing answers, the others answer the same way: the
//! tests hold all three to one brute-force judgement.

use std::sync::atomic::AtomicU64;

use crate::budget::{
    BudgetShare, BudgetStart, BudgetSummary, Lengths, TokenBudget, WindowPlan, WindowProof,
};
use crate::error::{check_below, Error};
use crate::inverse_proof::{self, Share};
use crate::partition::Partition;
use crate::verdict::Verdict;

/// A pass of an epoch as every dealing plans it: `num_replicas` ranks, each taking the same
/// number of steps, one batch of samples a step.
pub trait PassPlan: Sized {
    /// What a rank's share of the exact proof checked; shares of all ranks add up.
    type Share;

    /// Ranks.
    fn num_replicas(&self) -> u64;

    /// Steps every rank takes.
    fn steps(&self) -> Result<u64, Error>;

    /// The samples of `rank`'s batch at `step < steps()`, in the order it yields them.
    fn batch(&self, rank: u64, step: u64) -> Result<Vec<u64>, Error>;

    /// Every `(rank, step)` whose batch holds `sample`: none when it was consumed before
    /// the pass or dropped, several when padding repeats it.
    fn locate_step(&self, sample: u64) -> Result<Vec<(u64, u64)>, Error>;

    /// The pass left once every rank took its first `steps` steps: what a resume at that
    /// point iterates (the same world size).
    fn after(&self, steps: u64) -> Result<Self, Error>;

    /// Rank `rank`'s share of the exact proof, on `threads` threads (`0`: all cores).
    fn prove_share(&self, rank: u64, threads: usize) -> Result<Self::Share, Error>;

    /// Two shares of disjoint ranks added up.
    fn merge(a: &Self::Share, b: &Self::Share) -> Self::Share;

    /// The judgement of every rank's share added up: the verdict, or the violation.
    fn judge(&self, total: &Self::Share) -> Result<Verdict, Error>;
}

impl PassPlan for Partition {
    type Share = Share;

    fn num_replicas(&self) -> u64 {
        Partition::num_replicas(self)
    }

    fn steps(&self) -> Result<u64, Error> {
        Ok(self.num_batches())
    }

    fn batch(&self, rank: u64, step: u64) -> Result<Vec<u64>, Error> {
        let (lo, hi) = self.batch_bounds(step)?;
        let mut out = vec![0; (hi - lo) as usize];
        self.fill_rank(rank, lo, &mut out)?;
        Ok(out)
    }

    fn locate_step(&self, sample: u64) -> Result<Vec<(u64, u64)>, Error> {
        let hits = self.locate(sample)?;
        hits.into_iter()
            .map(|(rank, local)| Ok((rank, self.batch_of(local)?.0)))
            .collect()
    }

    fn after(&self, steps: u64) -> Result<Self, Error> {
        check_below("steps", steps, self.num_batches() + 1)?;
        Partition::dealt(
            self.n(),
            Partition::num_replicas(self),
            self.consumed_after_batches(steps),
            self.drop_last(),
            self.order().clone(),
            *self.dealing(),
        )
    }

    fn prove_share(&self, rank: u64, threads: usize) -> Result<Share, Error> {
        check_below("rank", rank, Partition::num_replicas(self))?;
        inverse_proof::prove_ranks(self, rank..rank + 1, threads, &AtomicU64::new(0))
    }

    fn merge(a: &Share, b: &Share) -> Share {
        a.merge(b)
    }

    fn judge(&self, total: &Share) -> Result<Verdict, Error> {
        inverse_proof::judge(self, total)
    }
}

/// A pass of the token-budget plan: the plan, the samples' lengths, where the pass starts
/// and the ranks it is dealt to. Rank `r` proves the windows `r, r + world, ...` of the
/// pass. Its steps are counted by planning every window of the pass (O(window) memory a
/// core); a step's batch plans the windows up to it.
pub struct BudgetPass<'a, L: Lengths + ?Sized> {
    budget: &'a TokenBudget,
    lengths: &'a L,
    start: BudgetStart,
    world: u64,
}

impl<'a, L: Lengths + ?Sized> BudgetPass<'a, L> {
    /// The pass of `budget` over `lengths` from `start`, dealt to `world` ranks.
    pub fn new(
        budget: &'a TokenBudget,
        lengths: &'a L,
        start: BudgetStart,
        world: u64,
    ) -> Result<Self, Error> {
        budget.check_lengths(lengths, world)?;
        Ok(BudgetPass {
            budget,
            lengths,
            start,
            world,
        })
    }

    /// Where the pass starts.
    pub fn start(&self) -> &BudgetStart {
        &self.start
    }

    /// The plan of window `k` in this pass (its positions taken before the resume point
    /// left out).
    pub fn window_plan(&self, k: u64) -> Result<WindowPlan, Error> {
        self.budget
            .plan(self.lengths, k, self.start.taken_in(k), self.world)
    }

    /// Steps per rank, padding and drops of the whole pass, every window planned on
    /// `threads` threads (`0`: all cores).
    pub fn summary(&self, threads: usize) -> Result<BudgetSummary, Error> {
        self.budget
            .summary(self.lengths, &self.start, self.world, threads)
    }

    /// Proves `plan`, as handed out, a plan of window `k` in this pass.
    pub fn prove_window(&self, k: u64, plan: &WindowPlan) -> Result<WindowProof, Error> {
        self.budget
            .prove(self.lengths, &self.start, k, self.world, plan)
    }

    /// The plan it is a pass of.
    pub fn budget(&self) -> &TokenBudget {
        self.budget
    }

    /// Proves the windows `first, first + stride, ...` of this pass as it hands them out,
    /// checked by `by` (the plan every rank agreed on; see [`TokenBudget::prove_windows`]),
    /// on `threads` threads, each window's samples counted into `done`; failures are
    /// recorded in the share, not returned.
    pub fn prove_windows(
        &self,
        windows: (u64, u64),
        by: &TokenBudget,
        threads: usize,
        done: &AtomicU64,
    ) -> Result<BudgetShare, Error> {
        let (budget, start) = (self.budget, &self.start);
        budget.prove_windows(by, self.lengths, start, self.world, windows, threads, done)
    }

    /// Rank `rank`'s share of the exact proof (the windows `start + rank, start + rank +
    /// world, ...`), checked by `by` as [`BudgetPass::prove_windows`] does.
    pub fn prove_share_by(
        &self,
        rank: u64,
        by: &TokenBudget,
        threads: usize,
        done: &AtomicU64,
    ) -> Result<BudgetShare, Error> {
        check_below("rank", rank, self.world)?;
        let first = self.start.window() + rank;
        self.prove_windows((first, self.world), by, threads, done)
    }

    /// `(window, step of its plan)` of the pass's step `step`; `None` when `step` is the
    /// pass's end, an error past it.
    pub fn find(&self, step: u64) -> Result<Option<(u64, u64)>, Error> {
        let mut left = step;
        for k in self.start.window()..self.budget.windows() {
            let plan = self.window_plan(k)?;
            let done = self.start.first_step_in(k);
            let steps = plan.steps(self.world).saturating_sub(done);
            if left < steps {
                return Ok(Some((k, done + left)));
            }
            left -= steps;
        }
        match left {
            0 => Ok(None),
            _ => Err(Error::Invalid(format!(
                "step {step} is past the pass's end ({} steps)",
                step - left
            ))),
        }
    }
}

impl<L: Lengths + ?Sized> PassPlan for BudgetPass<'_, L> {
    type Share = BudgetShare;

    fn num_replicas(&self) -> u64 {
        self.world
    }

    fn steps(&self) -> Result<u64, Error> {
        self.budget
            .count_steps(self.lengths, &self.start, self.world, 0)
    }

    fn batch(&self, rank: u64, step: u64) -> Result<Vec<u64>, Error> {
        check_below("rank", rank, self.world)?;
        let Some((k, s)) = self.find(step)? else {
            return Err(Error::Invalid(format!(
                "step {step} is past the pass's end"
            )));
        };
        let plan = self.window_plan(k)?;
        let (lo, hi) = plan.bounds[(s * self.world + rank) as usize];
        Ok(plan.samples[lo as usize..hi as usize].to_vec())
    }

    fn locate_step(&self, sample: u64) -> Result<Vec<(u64, u64)>, Error> {
        self.budget
            .locate(self.lengths, &self.start, self.world, sample, 0)
    }

    fn after(&self, steps: u64) -> Result<Self, Error> {
        let start = match self.find(steps)? {
            Some((k, s)) if k == self.start.window() => self.start.after(s),
            Some((k, s)) => BudgetStart::new(self.budget, k, &[], s)?,
            None => BudgetStart::new(self.budget, self.budget.windows(), &[], 0)?,
        };
        BudgetPass::new(self.budget, self.lengths, start, self.world)
    }

    fn prove_share(&self, rank: u64, threads: usize) -> Result<BudgetShare, Error> {
        self.prove_share_by(rank, self.budget, threads, &AtomicU64::new(0))
    }

    fn merge(a: &BudgetShare, b: &BudgetShare) -> BudgetShare {
        a.merge(b)
    }

    fn judge(&self, total: &BudgetShare) -> Result<Verdict, Error> {
        self.budget
            .judge(self.lengths, &self.start, self.world, total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dealing::Dealing;
    use crate::order::Order;
    use crate::permutation::{Permutation, Version};
    use std::sync::Arc;

    /// Every rank's batches, step by step: `[step][rank]`.
    fn batches<P: PassPlan>(plan: &P) -> Vec<Vec<Vec<u64>>> {
        let steps = plan.steps().unwrap();
        (0..steps)
            .map(|s| {
                (0..plan.num_replicas())
                    .map(|r| plan.batch(r, s).unwrap())
                    .collect()
            })
            .collect()
    }

    /// The verdict of every rank's share added up.
    fn proven<P: PassPlan>(plan: &P) -> Result<Verdict, Error> {
        let mut shares = (0..plan.num_replicas()).map(|r| plan.prove_share(r, 1).unwrap());
        let first = shares.next().unwrap();
        let total = shares.fold(first, |a, b| P::merge(&a, &b));
        plan.judge(&total)
    }

    /// The one judgement every dealing's pass is held to, by brute force over `[0, n)`
    /// (`consumed`: the samples taken before the pass): what it iterates is what it
    /// locates, what it proves counts what it iterates, and the pass after `s` steps
    /// iterates the rest of its batches.
    fn judge_by_brute_force<P: PassPlan>(plan: &P, n: u64, consumed: &[u64], label: &str) {
        let all = batches(plan);
        let w = plan.num_replicas();
        // Where each sample is, read from the iteration.
        let mut seen: Vec<Vec<(u64, u64)>> = vec![Vec::new(); n as usize];
        for (s, step) in all.iter().enumerate() {
            let sizes: Vec<usize> = step.iter().map(Vec::len).collect();
            assert!(sizes.iter().all(|&k| k > 0), "{label}: an empty batch");
            for (r, batch) in step.iter().enumerate() {
                for &sample in batch {
                    seen[sample as usize].push((r as u64, s as u64));
                }
            }
        }
        for sample in 0..n {
            let mut want = seen[sample as usize].clone();
            want.dedup();
            let mut got = plan.locate_step(sample).unwrap();
            got.sort_unstable_by_key(|&(r, s)| (s, r));
            assert_eq!(got, want, "{label}: locate({sample})");
        }
        let items: u64 = all.iter().flatten().map(|b| b.len() as u64).sum();
        // A padding item may repeat a sample consumed before the pass: not covered again.
        let covered = (0..n)
            .filter(|s| !seen[*s as usize].is_empty() && !consumed.contains(s))
            .count() as u64;
        let verdict = proven(plan).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(verdict.covered, covered, "{label}: covered");
        assert_eq!(verdict.padding, items - covered, "{label}: padding");
        let lengths: Vec<u64> = (0..w as usize)
            .map(|r| all.iter().map(|step| step[r].len() as u64).sum())
            .collect();
        assert_eq!(verdict.lengths, lengths, "{label}: lengths");
        assert_eq!(verdict.consumed, consumed.len() as u64, "{label}: consumed");
        assert_eq!(
            covered + verdict.dropped + verdict.consumed,
            n,
            "{label}: every sample yielded, dropped or consumed"
        );
        for s in [0, all.len() as u64 / 2, all.len() as u64] {
            let rest = plan.after(s).unwrap();
            assert_eq!(
                batches(&rest),
                all[s as usize..],
                "{label}: after {s} steps"
            );
        }
    }

    fn shuffled(n: u64) -> Order {
        Arc::new(Permutation::new(Version::V2, n, 7, 0).unwrap())
    }

    #[test]
    fn round_robin_and_step_passes_are_what_they_iterate_locate_and_prove() {
        let mut dealings = vec![Dealing::ROUND_ROBIN];
        for (name, b) in [("round-robin", 3), ("step", 3), ("step", 4)] {
            for drop_batch in [false, true] {
                dealings.push(Dealing::new(name, b, drop_batch).unwrap());
            }
        }
        for dealing in dealings {
            for drop_last in [false, true] {
                for (n, w, start) in [(10, 3, 0), (17, 4, 5), (40, 3, 11)] {
                    let part =
                        Partition::dealt(n, w, start, drop_last, shuffled(n), dealing).unwrap();
                    let label = format!("{dealing:?} drop_last={drop_last} n={n} w={w}");
                    let mut consumed = vec![0; start as usize];
                    part.order().fill(0, &mut consumed).unwrap();
                    judge_by_brute_force(&part, n, &consumed, &label);
                }
            }
        }
    }

    #[test]
    fn token_budget_passes_are_what_they_iterate_locate_and_prove() {
        let n = 300u64;
        let lengths: Vec<u32> = (0..n).map(|i| 1 + (i * 37 % 61) as u32).collect();
        for drop_last in [false, true] {
            for world in [1, 3] {
                let budget =
                    crate::budget::test_budget(Version::V2, n, 128, 64, 5, 2, true, drop_last)
                        .unwrap();
                let fresh =
                    BudgetPass::new(&budget, &lengths[..], BudgetStart::default(), world).unwrap();
                let label = format!("budget drop_last={drop_last} world={world}");
                judge_by_brute_force(&fresh, n, &[], &label);
                // From a resume point inside a later window: what the steps before took
                // is consumed, the rest of that window's samples are not.
                let done = fresh.steps().unwrap() / 2 + 1;
                let resumed = fresh.after(done).unwrap();
                assert!(resumed.start().window() > 0 && resumed.start().steps() > 0);
                let mut consumed: Vec<u64> = batches(&fresh)[..done as usize]
                    .iter()
                    .flatten()
                    .flatten()
                    .copied()
                    .collect();
                consumed.sort_unstable();
                consumed.dedup();
                judge_by_brute_force(&resumed, n, &consumed, &format!("{label}, resumed"));
            }
        }
    }

    #[test]
    fn a_misdealt_pass_iterates_and_proves_the_change() {
        let dealing = Dealing::new("step", 4, false).unwrap();
        let part = Partition::dealt(40, 3, 0, false, shuffled(40), dealing).unwrap();
        let twice = part.position(0, 0);
        let broken = part.clone().misdeal(2, 1, twice);
        assert_ne!(broken.batch(2, 0).unwrap(), part.batch(2, 0).unwrap());
        assert_eq!(broken.batch(2, 0).unwrap()[1], part.batch(0, 0).unwrap()[0]);
        assert!(proven(&part).is_ok());
        let err = proven(&broken).unwrap_err();
        assert!(err.is_violation(), "{err}");
    }

    #[test]
    fn out_of_range_steps_and_ranks_are_errors() {
        let part = Partition::new(10, 3, 0, false, shuffled(10)).unwrap();
        assert!(part.batch(0, 4).is_err());
        assert!(part.after(5).is_err());
        assert!(part.prove_share(3, 1).is_err());
        let lengths = [4u8; 10];
        let budget = crate::budget::test_budget(Version::V2, 10, 8, 10, 0, 0, true, false).unwrap();
        let pass = BudgetPass::new(&budget, &lengths[..], BudgetStart::default(), 2).unwrap();
        let steps = pass.steps().unwrap();
        assert!(pass.batch(0, steps).is_err());
        assert!(pass.batch(2, 0).is_err());
        assert!(pass.after(steps + 1).is_err());
        assert!(BudgetPass::new(&budget, &lengths[..4], BudgetStart::default(), 2).is_err());
    }
}
