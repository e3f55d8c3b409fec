//! [`BudgetBatches`]: one rank's batches of a token-budget pass, a window planned at a
//! time as they are handed out, and the resume point after any number of them.

use super::{BudgetStart, Lengths, WindowPlan};
use crate::error::{check_below, Error};
use crate::pass_plan::{BudgetPass, PassPlan};

/// Rank `rank`'s walk through a pass of the token budget: its batches in order, each
/// window planned when the walk enters it. It records, per window entered, the batches
/// handed out before and where the window's plan started, so that any count of batches
/// handed out maps back to a resume point: O(windows entered) memory, O(log) a lookup.
#[derive(Clone, Debug)]
pub struct BudgetBatches {
    rank: u64,
    start: BudgetStart,
    /// The next window to enter.
    next_window: u64,
    /// The window being handed out: its plan and next step.
    current: Option<(WindowPlan, u64)>,
    /// Per window entered: batches handed out before it, and where its plan started.
    entered: Vec<(u64, BudgetStart)>,
    handed: u64,
}

impl BudgetBatches {
    /// Rank `rank`'s batches of `pass`, from its start.
    pub fn new<L: Lengths + ?Sized>(pass: &BudgetPass<'_, L>, rank: u64) -> Result<Self, Error> {
        check_below("rank", rank, pass.num_replicas())?;
        let start = pass.start().clone();
        Ok(BudgetBatches {
            rank,
            next_window: start.window(),
            start,
            current: None,
            entered: Vec::new(),
            handed: 0,
        })
    }

    /// The next batch of the walk over `pass` (the pass it was made for), or `None` at the
    /// pass's end.
    pub fn next<L: Lengths + ?Sized>(
        &mut self,
        pass: &BudgetPass<'_, L>,
    ) -> Result<Option<Vec<u64>>, Error> {
        loop {
            if let Some(batch) = self.take(pass.num_replicas()) {
                return Ok(Some(batch));
            }
            let Some((k, first)) = self.next_window(pass)? else {
                return Ok(None);
            };
            let plan = pass.window_plan(k)?;
            self.enter(k, first, plan);
        }
    }

    /// The next batch of the window being handed out (`world` ranks), or `None` when it
    /// has none left: [`BudgetBatches::next_window`] says which window to plan next.
    pub fn take(&mut self, world: u64) -> Option<Vec<u64>> {
        let (plan, step) = self.current.as_mut()?;
        if *step >= plan.steps(world) {
            return None;
        }
        let (lo, hi) = plan.bounds[(*step * world + self.rank) as usize];
        *step += 1;
        self.handed += 1;
        Some(plan.samples[lo as usize..hi as usize].to_vec())
    }

    /// The window to plan next, and where its plan starts; `None` at the pass's end. The
    /// plan (the costly part: a caller may make it without holding the walk) is handed
    /// back to [`BudgetBatches::enter`].
    pub fn next_window<L: Lengths + ?Sized>(
        &self,
        pass: &BudgetPass<'_, L>,
    ) -> Result<Option<(u64, BudgetStart)>, Error> {
        let k = self.next_window;
        if k >= pass.budget().windows() {
            return Ok(None);
        }
        let first = if k == self.start.window() {
            self.start.clone()
        } else {
            BudgetStart::new(pass.budget(), k, &[], 0)?
        };
        Ok(Some((k, first)))
    }

    /// Enters window `k` with its `plan`, from `first` (what
    /// [`BudgetBatches::next_window`] answered); a window already entered is left as is.
    pub fn enter(&mut self, k: u64, first: BudgetStart, plan: WindowPlan) {
        if k != self.next_window {
            return;
        }
        self.current = Some((plan, first.steps()));
        self.entered.push((self.handed, first));
        self.next_window += 1;
    }

    /// Batches handed out so far.
    pub fn handed(&self) -> u64 {
        self.handed
    }

    /// Where the pass resumes once every rank took its first `done <= handed()` batches:
    /// in the last window entered before batch `done`, after its steps up to it.
    pub fn resume_point(&self, done: u64) -> Result<BudgetStart, Error> {
        check_below("done", done, self.handed + 1)?;
        if done == 0 {
            return Ok(self.start.clone());
        }
        let w = self.entered.partition_point(|(before, _)| *before < done) - 1;
        let (before, first) = &self.entered[w];
        Ok(first.after(first.steps() + done - before))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permutation::Version;
    use crate::TokenBudget;

    fn budget(n: u64, window: u64) -> TokenBudget {
        crate::budget::test_budget(Version::V2, n, 64, window, 7, 0, true, false).unwrap()
    }

    /// The walk hands out each rank's batches of the pass, step by step, as
    /// `PassPlan::batch` answers them; and the resume point after every count of batches
    /// is the pass `after` that many steps.
    #[test]
    fn walks_the_pass_and_resumes_after_any_count() {
        let lengths: Vec<u64> = (0..300).map(|i| 1 + (i * 7919) % 31).collect();
        for (world, window) in [(1, 300), (2, 64), (3, 50), (4, 17)] {
            let budget = budget(300, window);
            let pass =
                BudgetPass::new(&budget, &lengths[..], BudgetStart::default(), world).unwrap();
            let steps = pass.steps().unwrap();
            for rank in 0..world {
                let mut walk = BudgetBatches::new(&pass, rank).unwrap();
                let mut step = 0;
                while let Some(batch) = walk.next(&pass).unwrap() {
                    assert_eq!(
                        batch,
                        pass.batch(rank, step).unwrap(),
                        "world {world} step {step}"
                    );
                    step += 1;
                }
                assert_eq!((step, walk.handed()), (steps, steps));
                for done in 0..=steps {
                    let resumed = BudgetPass::new(
                        &budget,
                        &lengths[..],
                        walk.resume_point(done).unwrap(),
                        world,
                    )
                    .unwrap();
                    let expected = pass.after(done).unwrap();
                    assert_eq!(resumed.steps().unwrap(), steps - done);
                    for s in 0..steps - done {
                        assert_eq!(
                            resumed.batch(rank, s).unwrap(),
                            expected.batch(rank, s).unwrap()
                        );
                    }
                }
                assert!(walk.resume_point(steps + 1).is_err());
            }
        }
    }

    /// From a resume point inside a window, the walk starts at its steps done.
    #[test]
    fn starts_at_the_resume_point() {
        let lengths: Vec<u64> = (0..200).map(|i| 1 + (i * 31) % 17).collect();
        let budget = budget(200, 64);
        let whole = BudgetPass::new(&budget, &lengths[..], BudgetStart::default(), 2).unwrap();
        let later = whole.after(5).unwrap();
        let mut walk = BudgetBatches::new(&later, 1).unwrap();
        let first = walk.next(&later).unwrap().unwrap();
        assert_eq!(first, whole.batch(1, 5).unwrap());
        assert_eq!(walk.resume_point(0).unwrap(), *later.start());
        assert!(BudgetBatches::new(&later, 2).is_err());
    }
}
