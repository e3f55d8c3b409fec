//! The proof of token-budget plans: each window's plan, for every rank, checked through
//! the order's inverse, a window per core at a time (the one work pool); the windows
//! split across ranks for the distributed proof, and the shares judged together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::{BudgetStart, Lengths, TokenBudget, WindowPlan};
use crate::error::Error;
use crate::pool;
use crate::verdict::Verdict;

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

impl WindowProof {
    fn add(&mut self, other: &WindowProof) {
        if self.per_rank.len() < other.per_rank.len() {
            self.per_rank.resize(other.per_rank.len(), 0);
        }
        for (t, c) in self.per_rank.iter_mut().zip(&other.per_rank) {
            *t += c;
        }
        self.steps += other.steps;
        self.consumed += other.consumed;
        self.covered += other.covered;
        self.padding += other.padding;
        self.dropped += other.dropped;
    }
}

/// What a proof of some windows of a pass found: their counts added up, how many windows
/// were proven and the first that failed (its counter-example is found again by
/// [`TokenBudget::judge`], on every rank).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetShare {
    /// The windows' counts, added up.
    pub total: WindowProof,
    /// Windows proven.
    pub windows: u64,
    /// The smallest window whose proof failed.
    pub failed: Option<u64>,
}

/// Words of a [`BudgetShare`] before its per-rank counts.
const HEAD_WORDS: usize = 8;

impl BudgetShare {
    /// The shares of disjoint windows added up; the first failure is the smallest window.
    pub fn merge(&self, other: &BudgetShare) -> BudgetShare {
        let mut total = self.total.clone();
        total.add(&other.total);
        BudgetShare {
            total,
            windows: self.windows + other.windows,
            failed: match (self.failed, other.failed) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// This share as a record of `8 + world` words (the same size on every rank).
    pub fn to_words(&self, world: u64) -> Vec<u64> {
        let t = &self.total;
        let mut w = vec![
            self.windows,
            self.failed.is_some() as u64,
            self.failed.unwrap_or(0),
            t.steps,
            t.consumed,
            t.covered,
            t.padding,
            t.dropped,
        ];
        w.extend((0..world as usize).map(|r| t.per_rank.get(r).copied().unwrap_or(0)));
        w
    }

    /// The share a record of [`BudgetShare::to_words`] holds, for `world` ranks.
    pub fn from_words(w: &[u64], world: u64) -> Result<BudgetShare, Error> {
        if w.len() as u64 != HEAD_WORDS as u64 + world {
            return Err(Error::Invalid(format!(
                "a token-budget proof share over {world} ranks is {} words, got {}",
                HEAD_WORDS as u64 + world,
                w.len()
            )));
        }
        Ok(BudgetShare {
            total: WindowProof {
                per_rank: w[HEAD_WORDS..].to_vec(),
                steps: w[3],
                consumed: w[4],
                covered: w[5],
                padding: w[6],
                dropped: w[7],
            },
            windows: w[0],
            failed: (w[1] != 0).then_some(w[2]),
        })
    }
}

impl TokenBudget {
    /// Proves `plan` (as handed out, maybe not by [`TokenBudget::plan`]) a plan of window
    /// `k` for `world` ranks in the pass from `start` (which may have taken positions of
    /// the window and consumed steps of its plan): whole steps, every batch non-empty and
    /// within the budget,
    /// and every sample, inverted by the order, a position of the window held once: but
    /// for the declared padding (repeats) and drops (positions no step holds), and the
    /// taken positions (held by no step).
    pub fn prove<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        k: u64,
        world: u64,
        plan: &WindowPlan,
    ) -> Result<WindowProof, Error> {
        let (taken, first_step) = (start.taken_in(k), start.first_step_in(k));
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
            if u128::from(j - i) * u128::from(longest) > u128::from(self.config.max_tokens) {
                return violation(format!(
                    "a batch exceeds max_tokens={} (rank {rank}, step {step}: {} samples, the \
                     longest {longest} tokens)",
                    self.config.max_tokens,
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

    /// Proves the windows `first, first + stride, ...` of the pass from `start` (`first`
    /// at least its window), each planned for `world` ranks as this budget hands it out
    /// and checked by `by` (the plan every rank agreed on: a process that plans with
    /// another seed or build fails here, though its plans agree with themselves; `self`
    /// for a proof of its own plans), on `threads` threads (`0`: all cores), each window's
    /// samples counted into `done` once proven. A window that fails its proof is
    /// recorded, not raised: a distributed proof adds up every rank's share before it
    /// judges.
    #[allow(clippy::too_many_arguments)]
    pub fn prove_windows<L: Lengths + ?Sized>(
        &self,
        by: &TokenBudget,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        (first, stride): (u64, u64),
        threads: usize,
        done: &AtomicU64,
    ) -> Result<BudgetShare, Error> {
        self.check_lengths(lengths, world)?;
        if (by.n(), by.window()) != (self.n(), self.window()) {
            return Err(Error::Invalid(format!(
                "the plans to check cut {} samples in windows of {}, the plan they are checked \
                 by {} in windows of {}",
                self.n(),
                self.window(),
                by.n(),
                by.window()
            )));
        }
        if first < start.window() || stride == 0 {
            return Err(Error::Invalid(format!(
                "windows from {first} by {stride} are not windows of the pass from window {}",
                start.window()
            )));
        }
        let tasks = self.windows().saturating_sub(first).div_ceil(stride);
        let share = Mutex::new(BudgetShare::default());
        pool::run(
            threads,
            tasks,
            || (),
            |_, t| {
                let k = first + t * stride;
                let plan = self.plan(lengths, k, start.taken_in(k), world)?;
                let proof = match by.prove(lengths, start, k, world, &plan) {
                    Err(e) if e.is_violation() => None,
                    other => Some(other?),
                };
                done.fetch_add(plan.samples.len() as u64, Ordering::Relaxed);
                let mut share = share.lock().unwrap_or_else(|e| e.into_inner());
                share.windows += 1;
                match proof {
                    Some(proof) => share.total.add(&proof),
                    None => share.failed = Some(share.failed.map_or(k, |f| f.min(k))),
                }
                Ok(())
            },
        )?;
        Ok(share.into_inner().unwrap_or_else(|e| e.into_inner()))
    }

    /// Judges the shares of the pass from `start`, added up: every window proven once and
    /// none failed. Returns the verdict (per-rank lengths, steps, coverage), or the first
    /// failing window's counter-example.
    pub fn judge<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        start: &BudgetStart,
        world: u64,
        total: &BudgetShare,
    ) -> Result<Verdict, Error> {
        if let Some(k) = total.failed {
            let plan = self.plan(lengths, k, start.taken_in(k), world)?;
            self.prove(lengths, start, k, world, &plan)?;
            return Err(Error::Violation(format!(
                "the proof of window {k} failed on another rank"
            )));
        }
        let expected = self.windows().saturating_sub(start.window());
        if total.windows != expected {
            return Err(Error::Violation(format!(
                "the ranks proved {} windows, the pass has {expected}: every rank must take part",
                total.windows
            )));
        }
        let t = &total.total;
        let first = start.window().saturating_mul(self.window()).min(self.n());
        let mut lengths = t.per_rank.clone();
        lengths.resize(world as usize, 0);
        Ok(Verdict {
            start: first,
            lengths,
            batches: Some(t.steps),
            covered: t.covered,
            padding: t.padding,
            dropped: t.dropped,
            consumed: first + t.consumed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Version;

    fn lengths(n: u64, seed: u64) -> Vec<u32> {
        (0..n)
            .map(|i| 1 + (crate::splitmix::splitmix64(seed ^ i) % 4000) as u32)
            .collect()
    }

    fn budget(n: u64, window: u64, drop_last: bool) -> TokenBudget {
        crate::budget::test_budget(Version::V2, n, 16384, window, 3, 1, true, drop_last).unwrap()
    }

    fn whole() -> BudgetStart {
        BudgetStart::default()
    }

    fn done() -> AtomicU64 {
        AtomicU64::new(0)
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
                let proof = b.prove(l.as_slice(), &whole(), k, world, &plan).unwrap();
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
                    b.count_steps(l.as_slice(), &whole(), world, threads)
                        .unwrap(),
                    steps
                );
                let share = b
                    .prove_windows(&b, l.as_slice(), &whole(), world, (0, 1), threads, &done())
                    .unwrap();
                let verdict = b.judge(l.as_slice(), &whole(), world, &share).unwrap();
                assert_eq!(verdict.batches, Some(steps));
                assert_eq!(verdict.covered + verdict.dropped, n);
            }
        }
    }

    #[test]
    fn window_shares_of_the_ranks_add_up_to_the_whole_proof() {
        let l = lengths(5000, 2);
        let b = budget(5000, 600, false);
        let start = BudgetStart::new(&b, 2, &[], 3).unwrap();
        let whole = b
            .prove_windows(&b, l.as_slice(), &start, 3, (2, 1), 2, &done())
            .unwrap();
        let mut merged = BudgetShare::default();
        for r in 0..3 {
            let share = b
                .prove_windows(&b, l.as_slice(), &start, 3, (2 + r, 3), 1, &done())
                .unwrap();
            let back = BudgetShare::from_words(&share.to_words(3), 3).unwrap();
            assert_eq!(back, share);
            merged = merged.merge(&back);
        }
        assert_eq!(merged, whole);
        let verdict = b.judge(l.as_slice(), &start, 3, &merged).unwrap();
        assert_eq!(verdict.start, 1200);
        assert_eq!(verdict.covered + verdict.consumed, 5000);
        // A rank's share missing: refused.
        let part = b
            .prove_windows(&b, l.as_slice(), &start, 3, (3, 3), 1, &done())
            .unwrap();
        let e = b
            .judge(l.as_slice(), &start, 3, &part)
            .unwrap_err()
            .to_string();
        assert!(e.contains("windows, the pass has 7"), "{e}");
        assert!(BudgetShare::from_words(&[0; 4], 3).is_err());
        assert!(b
            .prove_windows(&b, l.as_slice(), &start, 3, (1, 1), 1, &done())
            .is_err());
    }

    #[test]
    fn plans_of_another_seed_fail_against_the_agreed_plan() {
        let l = lengths(3000, 5);
        let agreed = budget(3000, 512, false);
        let other =
            crate::budget::test_budget(Version::V2, 3000, 16384, 512, 4, 1, true, false).unwrap();
        let done = done();
        // Consistent with itself: its own plans prove, every sample counted.
        let alone = other
            .prove_windows(&other, l.as_slice(), &whole(), 2, (0, 1), 1, &done)
            .unwrap();
        assert!(alone.failed.is_none());
        assert_eq!(done.load(Ordering::Relaxed), 3000);
        // Checked by the agreed plan: every window fails, the first one is named.
        let by_agreed = other
            .prove_windows(&agreed, l.as_slice(), &whole(), 2, (0, 1), 1, &done)
            .unwrap();
        assert_eq!(by_agreed.failed, Some(0));
        assert!(agreed.judge(l.as_slice(), &whole(), 2, &by_agreed).is_err());
        // A plan of another window size is refused by name.
        let wider = budget(3000, 600, false);
        let e = other
            .prove_windows(&wider, l.as_slice(), &whole(), 2, (0, 1), 1, &done)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("windows of 512") && e.contains("windows of 600"),
            "{e}"
        );
    }

    #[test]
    fn broken_plans_fail_the_proof() {
        let l = lengths(3000, 5);
        let b = budget(3000, 1000, false);
        let plan = b.plan(l.as_slice(), 1, None, 2).unwrap();
        let message = |p: &WindowPlan| {
            b.prove(l.as_slice(), &whole(), 1, 2, p)
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
        assert!(b.prove(l.as_slice(), &whole(), 1, 2, &plan).is_ok());
        // A failed window in a share: the judge finds its counter-example again.
        let share = BudgetShare {
            failed: Some(1),
            ..BudgetShare::default()
        };
        let e = b
            .judge(l.as_slice(), &whole(), 2, &share)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the proof of window 1 failed on another rank"),
            "{e}"
        );
    }

    #[test]
    fn a_resume_takes_samples_out_and_counts_them_consumed() {
        let l = lengths(2000, 9);
        let b = budget(2000, 1000, false);
        let taken: Vec<bool> = (0..1000).map(|p| p % 3 == 0).collect();
        let mut bits = vec![0u8; 125];
        for p in (0..1000).filter(|p| p % 3 == 0) {
            bits[p / 8] |= 0x80 >> (p % 8);
        }
        let start = BudgetStart::new(&b, 0, &bits, 2).unwrap();
        assert_eq!(start.taken_in(0), Some(&taken[..]));
        let plan = b.plan(l.as_slice(), 0, Some(&taken), 2).unwrap();
        assert_eq!(plan.samples.len(), 1000 - 334);
        let proof = b.prove(l.as_slice(), &start, 0, 2, &plan).unwrap();
        let in_two_steps: u64 = plan.bounds[..4].iter().map(|(i, j)| j - i).sum();
        assert_eq!(proof.consumed, 334 + in_two_steps);
        assert_eq!(proof.covered, 1000 - proof.consumed);
        let total = b.count_steps(l.as_slice(), &start, 2, 0).unwrap();
        assert_eq!(
            total,
            plan.steps(2) - 2 + b.plan(l.as_slice(), 1, None, 2).unwrap().steps(2)
        );
    }

    #[test]
    fn a_resume_onto_another_world_size_reads_every_sample_once() {
        let l = lengths(3000, 4);
        let b = budget(3000, 1000, false);
        let saved = BudgetStart::new(&b, 1, &[], 5).unwrap();
        let plan = b.plan(l.as_slice(), 1, None, 4).unwrap();
        let before: Vec<u64> = plan.bounds[..20]
            .iter()
            .flat_map(|&(i, j)| plan.samples[i as usize..j as usize].to_vec())
            .collect();
        for world in [1, 3, 4] {
            let start = b.resume(l.as_slice(), &saved, 4, world).unwrap();
            assert_eq!(start.window(), 1);
            let mut after = Vec::new();
            for k in 1..b.windows() {
                let plan = b.plan(l.as_slice(), k, start.taken_in(k), world).unwrap();
                for &(i, j) in &plan.bounds[(start.first_step_in(k) * world) as usize..] {
                    after.extend_from_slice(&plan.samples[i as usize..j as usize]);
                }
            }
            let mut all = [before.clone(), after].concat();
            all.sort_unstable();
            let mut want = [b.samples(1).unwrap(), b.samples(2).unwrap()].concat();
            want.sort_unstable();
            assert!(
                all == want,
                "world {world}: not every sample of windows 1-2 once"
            );
            let share = b
                .prove_windows(&b, l.as_slice(), &start, world, (1, 1), 0, &done())
                .unwrap();
            let verdict = b.judge(l.as_slice(), &start, world, &share).unwrap();
            assert_eq!(verdict.consumed, 1000 + before.len() as u64);
        }
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
        // A budget or a window of 0 is refused, not divided by.
        assert!(crate::budget::test_budget(Version::V1, 10, 0, 1, 0, 0, true, false).is_err());
        assert!(crate::budget::test_budget(Version::V1, 10, 8, 0, 0, 0, true, false).is_err());
        // The error of the first failing window, whatever the threads.
        let b =
            crate::budget::test_budget(Version::V1, 100, 16384, 10, 0, 0, false, false).unwrap();
        let mut some_long = vec![1u16; 100];
        some_long[95] = 20000;
        some_long[42] = 20001;
        for threads in [1, 4] {
            let e = b
                .count_steps(some_long.as_slice(), &whole(), 2, threads)
                .unwrap_err()
                .to_string();
            assert!(e.contains("sample 42 has length 20001"), "{e}");
        }
    }
}
