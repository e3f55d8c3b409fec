//! A token-budget run: the history of a [`crate::TokenBudget`] sampler's passes, one
//! [`BudgetSegment`] per change (the start, an epoch, a resume on another world size, an
//! epoch iterated again from its start), 7 integers each. A segment's start (window, steps
//! of its plan) is written; the positions of its window taken before are not: they follow
//! from the segment before (where it stopped, re-planned onto this segment's world, as a
//! resume does), but for the first segment's, which the run keeps as bits.
//!
//! A window's steps depend on its samples' lengths, so the answers plan windows: an index
//! ([`BudgetRun::index`]) plans every window the history read once, then `where` and `show`
//! plan one window per segment; the audit plans every window read and counts each read
//! (one byte per sample).

use super::{audit::violation, Audit, Change, Read};
use crate::budget::{BudgetStart, Lengths, TokenBudget};
use crate::error::Error;
use crate::pass_plan::{BudgetPass, PassPlan};
use crate::state::{base64, BudgetEpoch, BudgetResume, Value, BUDGET};

const UNREAD: u8 = 0;
const READ: u8 = 1;
const DROPPED: u8 = 2;
const BEFORE: u8 = 3;

/// The integers of a token-budget history row, in order.
pub const BUDGET_ROW: [&str; 7] = [
    "change", "epoch", "window", "steps", "world", "step", "done",
];

/// One pass of a token-budget run (or its part up to a state): from window `window` after
/// `steps` steps of its plan, `done` steps of `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetSegment {
    /// What opened it.
    pub change: Change,
    /// The epoch.
    pub epoch: u64,
    /// The window the pass starts in.
    pub window: u64,
    /// Steps of that window's plan done before the pass.
    pub steps: u64,
    /// Data-parallel ranks.
    pub world: u64,
    /// Steps (batches each rank had taken since the run's start) before it.
    pub step: u64,
    /// Steps every rank took in it.
    pub done: u64,
}

impl BudgetSegment {
    /// The segment as a row of integers ([`BUDGET_ROW`]).
    pub fn row(&self) -> Vec<i128> {
        let change = Change::ALL
            .iter()
            .position(|&c| c == self.change)
            .unwrap_or(0);
        [
            change as u64,
            self.epoch,
            self.window,
            self.steps,
            self.world,
            self.step,
            self.done,
        ]
        .map(i128::from)
        .to_vec()
    }

    /// A row read back, each integer checked; `i` numbers it in errors.
    pub fn from_row(row: &[i128], i: usize) -> Result<BudgetSegment, Error> {
        let bad = |what: String| {
            Error::Invalid(format!(
                "state_dict['history'][{i}] {what}: a token-budget history row is [{}], as \
                 state_dict() writes it",
                BUDGET_ROW.join(", ")
            ))
        };
        if row.len() != BUDGET_ROW.len() {
            return Err(bad(format!(
                "has {} integers, not {}",
                row.len(),
                BUDGET_ROW.len()
            )));
        }
        let int = |k: usize| {
            u64::try_from(row[k]).map_err(|_| bad(format!("has {}={}", BUDGET_ROW[k], row[k])))
        };
        let change = Change::ALL
            .get(int(0)? as usize)
            .copied()
            .ok_or_else(|| bad(format!("has change={}, not in [0, 4)", row[0])))?;
        let world = int(4)?;
        if world == 0 {
            return Err(bad("has world=0".into()));
        }
        Ok(BudgetSegment {
            change,
            epoch: int(1)?,
            window: int(2)?,
            steps: int(3)?,
            world,
            step: int(5)?,
            done: int(6)?,
        })
    }
}

/// What a run's answers need over its lengths ([`BudgetRun::index`]): each segment's plan
/// and start, and its pass's steps before each window it read.
#[derive(Clone, Debug)]
pub struct BudgetIndex {
    n: u64,
    starts: Vec<(TokenBudget, BudgetStart)>,
    /// Per segment: the steps before each window it read, from its start window, and after
    /// the last (prefix sums: one more entry than windows).
    before: Vec<Vec<u64>>,
}

/// A token-budget run's history.
#[derive(Clone, Debug)]
pub struct BudgetRun {
    /// The fields every segment shares; its epoch and ranks are those of its last pass.
    base: BudgetEpoch,
    /// The positions of the first segment's window taken before it (packed bits, as a
    /// state's `taken`; empty: none).
    taken: Vec<u8>,
    segments: Vec<BudgetSegment>,
    /// Whether the last segment may still grow (a pass began it since the last load).
    open: bool,
}

impl BudgetRun {
    /// A run of `base`'s plan with no history yet.
    pub fn new(base: BudgetEpoch) -> BudgetRun {
        BudgetRun {
            base,
            taken: Vec::new(),
            segments: Vec::new(),
            open: false,
        }
    }

    /// A run from its parts as [`BudgetRun::parts`] gives them (a state dict's `history`
    /// and `history_taken`), each row checked.
    pub fn restore(
        base: BudgetEpoch,
        rows: &[Vec<i128>],
        taken: Vec<u8>,
        open: bool,
    ) -> Result<BudgetRun, Error> {
        let segments = rows
            .iter()
            .enumerate()
            .map(|(i, row)| BudgetSegment::from_row(row, i))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(s) = segments.iter().find(|s| s.world > base.window) {
            return Err(Error::Invalid(format!(
                "state_dict['history'] has a segment of world={} > window={}: the history was \
                 not saved with this configuration",
                s.world, base.window
            )));
        }
        super::evidence::check_budget_evidence(&base, &segments)?;
        Ok(BudgetRun {
            base,
            taken,
            open: open && !segments.is_empty(),
            segments,
        })
    }

    /// The run's parts: its fields, every segment as a row (the open one as last begun or
    /// closed), the first segment's taken bits and whether the last segment is open.
    pub fn parts(&self) -> (&BudgetEpoch, Vec<Vec<i128>>, &[u8], bool) {
        let rows = self.segments.iter().map(BudgetSegment::row).collect();
        (&self.base, rows, &self.taken, self.open)
    }

    /// The run's fields (the epoch and ranks of its last pass).
    pub fn base(&self) -> &BudgetEpoch {
        &self.base
    }

    /// The segments.
    pub fn segments(&self) -> &[BudgetSegment] {
        &self.segments
    }

    /// Whether a pass began the last segment (it grows until the next `begin` or a state).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// A pass of `epoch` (its epoch and ranks) from `start`: closes the open segment at
    /// `previous_done` steps (what the pass before consumed: required while one is open)
    /// and opens one.
    pub fn begin(
        &mut self,
        epoch: &BudgetEpoch,
        start: &BudgetStart,
        previous_done: Option<u64>,
    ) -> Result<(), Error> {
        let mut change = Change::Resume;
        if self.open {
            let done = previous_done.ok_or_else(|| {
                Error::Invalid(
                    "a run's open segment closes at what its pass consumed: pass it".into(),
                )
            })?;
            // A pass that read nothing leaves no segment: the next one continues the one
            // before it. One that read iterates its epoch again, from the epoch's start.
            if done > 0 {
                change = Change::Repeat;
            }
            self.close(done);
        }
        let step = self.segments.last().map_or(0, |s| s.step + s.done);
        change = match self.segments.last() {
            None => {
                self.taken = start.taken_bits();
                Change::Start
            }
            Some(last) if last.epoch != epoch.spec.epoch => Change::Epoch,
            Some(_) => change,
        };
        self.segments.push(BudgetSegment {
            change,
            epoch: epoch.spec.epoch,
            window: start.window(),
            steps: start.steps(),
            world: epoch.spec.num_replicas,
            step,
            done: 0,
        });
        self.base = epoch.clone();
        self.open = true;
        Ok(())
    }

    /// Ends the open segment after `done` steps (dropped when it read nothing); nothing
    /// without one.
    pub fn close(&mut self, done: u64) {
        if !self.open {
            return;
        }
        self.open = false;
        if done == 0 {
            self.segments.pop();
            if self.segments.is_empty() {
                self.taken.clear();
            }
        } else if let Some(last) = self.segments.last_mut() {
            last.done = done;
        }
    }

    /// A copy with the open segment (if any) closed after `done` steps (what its pass
    /// consumed: required while one is open): the run a state taken there holds.
    pub fn closed(&self, done: Option<u64>) -> Result<BudgetRun, Error> {
        let mut run = self.clone();
        if self.open {
            let done = done.ok_or_else(|| {
                Error::Invalid(
                    "a run's open segment is written at what its pass consumed: pass it".into(),
                )
            })?;
            run.close(done);
        }
        Ok(run)
    }

    /// The state dict of `now` at `resume`, with the history (the open segment at `done`
    /// steps): `history`, a row per segment, and `history_taken`, the first segment's
    /// taken bits (base64; empty when none).
    pub fn state(
        &self,
        now: &BudgetEpoch,
        resume: &BudgetResume,
        done: Option<u64>,
    ) -> Result<Vec<(&'static str, Value)>, Error> {
        let run = self.closed(done)?;
        let (_, rows, taken, _) = run.parts();
        // Both written even when empty: a loader that fills a fresh sampler's state as a
        // template (torch.distributed.checkpoint) keeps only the keys the template has.
        let history = vec![
            ("history", Value::Rows(rows)),
            ("history_taken", Value::Str(base64::encode(taken))),
            ("kind", Value::Str("budget".into())),
        ];
        Ok(now.state_with(resume, history))
    }

    /// The run a state dict holds, checked row by row (a state of 0.5 or before has no
    /// history: it starts at the load). Its fields are the state's.
    pub fn from_state(state: &[(String, Value)], strict: bool) -> Result<BudgetRun, Error> {
        let (epoch, _) = BudgetEpoch::from_state(state, strict)?;
        let saved = BUDGET.read(state, strict)?;
        saved.kind(&["budget"])?;
        let taken = base64::decode(saved.text("history_taken")).ok_or_else(|| {
            Error::Invalid(
                "state_dict['history_taken'] is not valid base64: the state was edited".into(),
            )
        })?;
        BudgetRun::restore(epoch, saved.rows("history"), taken, false)
    }

    /// The plan and start of every segment: the taken bits of each segment's window
    /// follow from where the segment before stopped, re-planned onto its world.
    fn starts<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
    ) -> Result<Vec<(TokenBudget, BudgetStart)>, Error> {
        let mut out: Vec<(TokenBudget, BudgetStart)> = Vec::with_capacity(self.segments.len());
        for (i, s) in self.segments.iter().enumerate() {
            let mut epoch = self.base.clone();
            epoch.spec.epoch = s.epoch;
            epoch.spec.num_replicas = s.world;
            let budget = TokenBudget::of(&epoch)?;
            let taken = match (i, out.last()) {
                (0, _) | (_, None) => self.taken.clone(),
                (_, Some(_)) if self.segments[i - 1].epoch != s.epoch => Vec::new(),
                (_, Some(_)) if s.change == Change::Repeat => Vec::new(), // the epoch's start
                (_, Some((plan, before))) => {
                    let a = &self.segments[i - 1];
                    let pass = BudgetPass::new(plan, lengths, before.clone(), a.world)?;
                    let stop = pass.after(a.done)?.start().clone();
                    let resumed = budget.resume(lengths, &stop, a.world, s.world)?;
                    match resumed.window() == s.window {
                        true => resumed.taken_bits(),
                        false => Vec::new(),
                    }
                }
            };
            let start = BudgetStart::new(&budget, s.window, &taken, s.steps)?;
            out.push((budget, start));
        }
        Ok(out)
    }

    /// What the answers need over `lengths`, computed once: each segment's start and the
    /// steps of each window its pass read, planned on `threads` threads (`0`: all cores).
    /// O(positions the history read) plans; then an answer plans one window per segment.
    pub fn index<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        threads: usize,
    ) -> Result<BudgetIndex, Error> {
        let starts = self.starts(lengths)?;
        let mut before = Vec::with_capacity(self.segments.len());
        for (s, (budget, start)) in self.segments.iter().zip(&starts) {
            let steps = budget.window_steps(lengths, start, s.world, s.done, threads)?;
            let mut prefix = Vec::with_capacity(steps.len() + 1);
            prefix.push(0);
            for count in steps {
                prefix.push(prefix[prefix.len() - 1] + count);
            }
            before.push(prefix);
        }
        Ok(BudgetIndex {
            n: lengths.count(),
            starts,
            before,
        })
    }

    fn check_index<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        index: &BudgetIndex,
    ) -> Result<(), Error> {
        if index.starts.len() != self.segments.len() || index.n != lengths.count() {
            return Err(Error::Invalid(
                "the index was made for another history or other lengths: make it again with \
                 index(lengths)"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Every read of `sample` in the history, in order: (epoch, step, rank, position in
    /// the batch), padding marked; `index` is [`BudgetRun::index`]'s over `lengths`.
    pub fn where_read<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        index: &BudgetIndex,
        sample: u64,
    ) -> Result<Vec<Read>, Error> {
        self.check_index(lengths, index)?;
        let mut reads = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            let (budget, start) = &index.starts[i];
            let Some(k) = budget.window_of(start, sample)? else {
                continue;
            };
            let prefix = &index.before[i];
            let w = (k - start.window()) as usize;
            if w + 1 >= prefix.len() {
                continue; // the segment stopped before that window
            }
            let hits = budget.reads_in_window(lengths, start, s.world, sample, k, prefix[w])?;
            for hit in hits.into_iter().filter(|h| h.step < s.done) {
                reads.push(Read {
                    epoch: s.epoch,
                    step: Some(s.step + hit.step),
                    rank: hit.rank,
                    position: hit.position,
                    sample,
                    padding: hit.padding,
                    segment: i,
                });
            }
        }
        reads.sort_by_key(|r| (r.segment, r.step, r.rank));
        Ok(reads)
    }

    /// What every rank read at `step` (batches each rank had taken since the run's
    /// start), rank by rank in batch order; `index` as for [`BudgetRun::where_read`].
    pub fn show<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        index: &BudgetIndex,
        step: u64,
    ) -> Result<Vec<Read>, Error> {
        self.check_index(lengths, index)?;
        let Some(i) = self
            .segments
            .iter()
            .rposition(|s| (s.step..s.step + s.done).contains(&step))
        else {
            let first = self.segments.first().map_or(0, |s| s.step);
            let last = self.segments.last().map_or(0, |s| s.step + s.done);
            return Err(Error::Invalid(format!(
                "step {step} is not in this run's history, which holds steps [{first}, {last})"
            )));
        };
        let (s, (budget, start), prefix) = (&self.segments[i], &index.starts[i], &index.before[i]);
        let t = step - s.step;
        // The window whose steps hold `t`: prefix[w] <= t < prefix[w + 1].
        let w = prefix.partition_point(|&p| p <= t);
        if w >= prefix.len() {
            return Err(Error::Violation(format!(
                "segment {i} of the history takes {} steps, past its pass's end",
                s.done
            )));
        }
        let k = start.window() + w as u64 - 1;
        let local = start.first_step_in(k) + t - prefix[w - 1];
        let plan = budget.plan(lengths, k, start.taken_in(k), s.world)?;
        let mut reads = Vec::new();
        for rank in 0..s.world {
            let b = (local * s.world + rank) as usize;
            let (lo, hi) = plan.bounds[b];
            for idx in lo..hi {
                let read = plan.read(b, idx, s.world).expect("the batch holds it");
                reads.push(Read {
                    epoch: s.epoch,
                    step: Some(step),
                    rank,
                    position: read.position,
                    sample: plan.samples[idx as usize],
                    padding: read.padding,
                    segment: i,
                });
            }
        }
        Ok(reads)
    }

    /// Proves from the history that every sample was read exactly once per epoch it
    /// covers (padding and `drop_last`'s drops aside; the epoch in progress up to its
    /// resume point): every read counted, batch by batch, as the passes hand them out. A
    /// history that breaks it is an [`Error::Violation`] naming the first sample read
    /// twice or never, and its reads.
    pub fn audit<L: Lengths + ?Sized>(&self, lengths: &L) -> Result<Audit, Error> {
        let Some(first) = self.segments.first() else {
            return Err(Error::Invalid(
                "this run has no history yet (no pass read anything since it started or loaded)"
                    .into(),
            ));
        };
        for i in 1..self.segments.len() {
            let (a, b) = (&self.segments[i - 1], &self.segments[i]);
            if b.step != a.step + a.done {
                return Err(Error::Violation(format!(
                    "segment {i} of the history starts at step {}, but the one before started \
                     at step {} and took {}: the steps do not add up",
                    b.step, a.step, a.done
                )));
            }
        }
        let starts = self.starts(lengths)?;
        let n = self.base.spec.n;
        let mut epochs: Vec<u64> = Vec::new();
        let mut reads: u128 = 0;
        let mut i = 0;
        while i < self.segments.len() {
            let epoch = self.segments[i].epoch;
            if epochs.contains(&epoch) {
                return Err(Error::Violation(format!(
                    "epoch {epoch} is read again after epoch {} (segment {i} of the history): \
                     its samples are read twice",
                    self.segments[i - 1].epoch
                )));
            }
            let end = (i..self.segments.len())
                .find(|&j| self.segments[j].epoch != epoch)
                .unwrap_or(self.segments.len());
            // Per sample: UNREAD, READ, DROPPED (by the latest plan of its window), or
            // BEFORE (read before the history began).
            let mut seen = vec![UNREAD; n as usize];
            if i == 0 {
                self.mark_before(&starts[0], &mut seen)?;
            }
            let mut complete = end < self.segments.len();
            for (j, (s, (budget, start))) in self
                .segments
                .iter()
                .zip(&starts)
                .enumerate()
                .take(end)
                .skip(i)
            {
                let pass = BudgetPass::new(budget, lengths, start.clone(), s.world)?;
                let mut left = s.done;
                for k in start.window()..budget.windows() {
                    let plan = pass.window_plan(k)?;
                    // The first batch holding each of the plan's samples (later ones are
                    // padding; none: dropped).
                    let mut first = vec![usize::MAX; plan.samples.len()];
                    for (b, &(lo, hi)) in plan.bounds.iter().enumerate().rev() {
                        first[lo as usize..hi as usize].fill(b);
                    }
                    for (idx, &sample) in plan.samples.iter().enumerate() {
                        let mark = &mut seen[sample as usize];
                        match (first[idx] != usize::MAX, *mark) {
                            (false, UNREAD) => *mark = DROPPED,
                            (true, DROPPED) => *mark = UNREAD,
                            _ => {}
                        }
                    }
                    let first_step = start.first_step_in(k);
                    if j == 0 && k == start.window() {
                        // Steps of the first plan taken before the history began.
                        for &(lo, hi) in &plan.bounds[..(first_step * s.world) as usize] {
                            for &sample in &plan.samples[lo as usize..hi as usize] {
                                seen[sample as usize] = BEFORE;
                            }
                        }
                    }
                    let steps = plan.steps(s.world).saturating_sub(first_step).min(left);
                    let batches =
                        (first_step * s.world) as usize..((first_step + steps) * s.world) as usize;
                    for b in batches {
                        for idx in plan.bounds[b].0..plan.bounds[b].1 {
                            if first[idx as usize] < b {
                                continue; // padding
                            }
                            let sample = plan.samples[idx as usize];
                            if matches!(seen[sample as usize], READ | BEFORE) {
                                return Err(self.violation(
                                    lengths,
                                    sample,
                                    "is read twice",
                                    epoch,
                                ));
                            }
                            seen[sample as usize] = READ;
                            reads += 1;
                        }
                    }
                    left -= steps;
                    if left == 0 {
                        break;
                    }
                }
                if left > 0 {
                    return Err(Error::Violation(format!(
                        "segment {j} of the history takes {} steps, {left} past its pass's end",
                        s.done
                    )));
                }
                if j + 1 == self.segments.len() {
                    complete = pass.after(s.done)?.steps()? == 0;
                }
            }
            if complete {
                if let Some(sample) = (0..n).find(|&x| seen[x as usize] == UNREAD) {
                    return Err(self.violation(lengths, sample, "is never read", epoch));
                }
            }
            epochs.push(epoch);
            i = end;
        }
        Ok(Audit {
            epochs,
            segments: self.segments.len(),
            begins: (first.epoch, first.window.saturating_mul(self.base.window)),
            reads,
            recounted: true,
        })
    }

    /// Marks what the first segment's epoch read before the history began: the windows
    /// before its own, and its window's positions taken.
    fn mark_before(
        &self,
        first: &(TokenBudget, BudgetStart),
        seen: &mut [u8],
    ) -> Result<(), Error> {
        let (budget, start) = first;
        for k in 0..start.window().min(budget.windows()) {
            for id in budget.samples(k)? {
                seen[id as usize] = BEFORE;
            }
        }
        if let Some(taken) = start.taken_in(start.window()) {
            for (p, id) in budget.samples(start.window())?.into_iter().enumerate() {
                if taken[p] {
                    seen[id as usize] = BEFORE;
                }
            }
        }
        Ok(())
    }

    fn violation<L: Lengths + ?Sized>(
        &self,
        lengths: &L,
        sample: u64,
        how: &str,
        epoch: u64,
    ) -> Error {
        let reads = self
            .index(lengths, 0)
            .and_then(|index| self.where_read(lengths, &index, sample));
        violation(sample, how, epoch, reads)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::epoch::EpochSpec;
    use crate::permutation::Version;

    fn epoch(epoch: u64, world: u64) -> BudgetEpoch {
        BudgetEpoch {
            spec: EpochSpec {
                n: 500,
                num_replicas: world,
                seed: 3,
                epoch,
                shuffle: true,
                drop_last: false,
                permutation: Version::V2,
            },
            max_tokens: 128,
            window: 64,
        }
    }

    #[test]
    fn rows_at_the_edges_of_the_evidence_load() {
        // 500 samples in windows of 64: 8 windows. A row may start at the epoch's end
        // (window 8), after a window's 64 steps, take every sample's step (500), at step
        // 2^62; one more of any of them is refused.
        let read = |row: Vec<i128>| BudgetRun::restore(epoch(0, 2), &[row], Vec::new(), false);
        let most = 1i128 << 62;
        assert!(read(vec![0, 0, 8, 64, 2, most, 500]).is_ok());
        for row in [
            vec![0, 0, 9, 0, 2, 0, 0],
            vec![0, 0, 0, 65, 2, 0, 0],
            vec![0, 0, 0, 0, 2, 0, 501],
            vec![0, 0, 0, 0, 2, most + 1, 0],
        ] {
            assert!(read(row.clone()).is_err(), "{row:?}");
        }
    }

    /// (epoch, step, rank, position, sample, padding) of every read.
    type Recorded = Vec<(u64, u64, u64, u64, u64, bool)>;

    /// Reads `steps` steps (all: `None`) of a pass as its ranks do, recorded.
    fn read(
        run: &mut BudgetRun,
        config: &BudgetEpoch,
        start: BudgetStart,
        lengths: &[u32],
        steps: Option<u64>,
        recorded: &mut Recorded,
    ) -> BudgetStart {
        let budget = TokenBudget::of(config).unwrap();
        let world = config.spec.num_replicas;
        let pass = BudgetPass::new(&budget, lengths, start.clone(), world).unwrap();
        let steps = steps.unwrap_or_else(|| pass.steps().unwrap());
        let first = run.segments().last().map_or(0, |s| s.step + s.done);
        let previous = run.segments().last().map(|s| s.done);
        run.begin(config, &start, previous.filter(|_| run.is_open()))
            .unwrap();
        for s in 0..steps {
            for r in 0..world {
                for (p, sample) in pass.batch(r, s).unwrap().into_iter().enumerate() {
                    let again = recorded
                        .iter()
                        .any(|x| x.0 == config.spec.epoch && x.4 == sample);
                    recorded.push((config.spec.epoch, first + s, r, p as u64, sample, again));
                }
            }
        }
        run.close(steps);
        run.open = true; // as a sampler's pass: closed by the next begin or a state
        pass.after(steps).unwrap().start().clone()
    }

    /// The run a state after `done` steps of the open pass holds, read back from its rows.
    fn read_back(run: &BudgetRun, done: u64) -> BudgetRun {
        let closed = run.closed(Some(done)).unwrap();
        let (base, rows, taken, _) = closed.parts();
        BudgetRun::restore(base.clone(), &rows, taken.to_vec(), false).unwrap()
    }

    fn as_recorded(reads: &[Read]) -> Recorded {
        reads
            .iter()
            .map(|r| {
                (
                    r.epoch,
                    r.step.unwrap(),
                    r.rank,
                    r.position,
                    r.sample,
                    r.padding,
                )
            })
            .collect()
    }

    /// A run read as a sampler reads it: epoch 0 on 2 ranks, a state after 5 steps read
    /// back, the rest of the epoch on 3 ranks, then 4 steps of epoch 1. Attribution both
    /// ways is what the ranks read, and the audit passes.
    #[test]
    fn attribution_is_what_the_ranks_read_across_a_resume_onto_another_world() {
        // Batches of several samples; and samples alone in a batch, which pad on 3 ranks.
        let mixed: Vec<u32> = (0..500u32).map(|i| 1 + (i * 37 % 61)).collect();
        let alone: Vec<u32> = (0..500u32).map(|i| 65 + (i * 37 % 29)).collect();
        for (lengths, pads) in [(mixed, false), (alone, true)] {
            check_attribution(&lengths, pads);
        }
    }

    fn check_attribution(lengths: &[u32], pads: bool) {
        let mut recorded = Recorded::new();
        let mut run = BudgetRun::new(epoch(0, 2));
        let fresh = BudgetStart::default();
        let saved = read(
            &mut run,
            &epoch(0, 2),
            fresh.clone(),
            lengths,
            Some(5),
            &mut recorded,
        );
        // The state at 5 steps, read back by a sampler of 3 ranks.
        let mut run = read_back(&run, 5);
        let budget = TokenBudget::of(&epoch(0, 3)).unwrap();
        let resumed = budget.resume(lengths, &saved, 2, 3).unwrap();
        assert!(resumed.taken_in(resumed.window()).is_some());
        let resumed_taken = resumed.taken_bits();
        read(
            &mut run,
            &epoch(0, 3),
            resumed,
            lengths,
            None,
            &mut recorded,
        );
        read(
            &mut run,
            &epoch(1, 3),
            fresh,
            lengths,
            Some(4),
            &mut recorded,
        );
        let run = read_back(&run, 4);
        let (_, rows, _, _) = run.parts();
        let changes: Vec<Change> = run.segments().iter().map(|s| s.change).collect();
        let index = run.index(lengths, 2).unwrap();
        assert_eq!(changes, [Change::Start, Change::Resume, Change::Epoch]);
        assert_eq!(recorded.iter().any(|r| r.5), pads, "the run pads");
        for sample in 0..500 {
            let want: Recorded = recorded.iter().filter(|r| r.4 == sample).copied().collect();
            let got = as_recorded(&run.where_read(lengths, &index, sample).unwrap());
            assert_eq!(got, want, "where({sample})");
        }
        let last = run.segments().last().map(|s| s.step + s.done).unwrap();
        for step in 0..last {
            let want: Recorded = recorded.iter().filter(|r| r.1 == step).copied().collect();
            assert_eq!(
                as_recorded(&run.show(lengths, &index, step).unwrap()),
                want,
                "show({step})"
            );
        }
        let e = run.show(lengths, &index, last).unwrap_err().to_string();
        assert!(e.contains(&format!("holds steps [0, {last})")), "{e}");
        let audit = run.audit(lengths).unwrap();
        assert_eq!(audit.epochs, [0, 1]);
        let kept = recorded.iter().filter(|r| !r.5).count() as u128;
        assert_eq!(audit.reads, kept);
        // A history that begins at the load onto 3 ranks (a state saved before histories
        // were kept): what was read before it counts as read, the rest exactly once.
        let tail = BudgetRun::restore(epoch(1, 3), &rows[1..], resumed_taken, false).unwrap();
        assert_eq!(tail.audit(lengths).unwrap().epochs, [0, 1]);
        let first_reads = recorded.iter().filter(|r| r.1 < 5 && !r.5).count() as u128;
        assert_eq!(tail.audit(lengths).unwrap().reads, kept - first_reads);
    }

    /// Whether `e` names a sample, then says `what`.
    fn names(e: &str, what: &str) -> bool {
        let rest = e.strip_prefix("sample ").and_then(|r| r.split_once(' '));
        rest.is_some_and(|(id, rest)| id.parse::<u64>().is_ok() && rest.starts_with(what))
    }

    /// A history that skips a window, or reads the same steps again, fails its audit
    /// naming the sample; steps that do not add up fail too.
    #[test]
    fn a_forged_history_fails_its_audit() {
        let lengths: Vec<u32> = (0..500u32).map(|i| 1 + (i * 37 % 61)).collect();
        let mut recorded = Recorded::new();
        let mut run = BudgetRun::new(epoch(0, 2));
        let saved = read(
            &mut run,
            &epoch(0, 2),
            BudgetStart::default(),
            &lengths,
            Some(5),
            &mut recorded,
        );
        // A state after 5 steps, read back: the pass resumes there.
        let mut run = read_back(&run, 5);
        read(&mut run, &epoch(0, 2), saved, &lengths, None, &mut recorded);
        let good = read_back(&run, run.segments()[1].done);
        let (_, rows, _, _) = good.parts();
        assert_eq!(good.audit(&lengths[..]).unwrap().epochs, [0]);

        let forge = |edit: &dyn Fn(&mut Vec<Vec<i128>>)| {
            let mut rows = rows.clone();
            edit(&mut rows);
            // Refused on reading (a row no run writes), or by the audit.
            match BudgetRun::restore(epoch(0, 2), &rows, Vec::new(), false) {
                Err(e) => e,
                Ok(run) => run.audit(&lengths[..]).unwrap_err(),
            }
        };
        // The second pass starts 2 steps later: their samples are never read.
        let skipped = forge(&|rows| {
            rows[1][3] += 2;
            rows[1][6] -= 2;
        });
        let e = skipped.to_string();
        assert!(
            skipped.is_violation() && names(&e, "is never read in epoch 0: never read"),
            "{e}"
        );
        // The second pass starts at the first's start: its steps are read twice.
        let twice = forge(&|rows| {
            rows[1][2] = 0;
            rows[1][3] = 0;
            rows[1][0] = 3; // a repeat
        });
        let e = twice.to_string();
        assert!(
            twice.is_violation() && names(&e, "is read twice in epoch 0: read at epoch 0 step"),
            "{e}"
        );
        let steps = forge(&|rows| rows[1][5] += 1);
        assert!(
            steps.to_string().contains("the steps do not add up"),
            "{steps}"
        );
        let long = forge(&|rows| rows[1][6] += 1);
        assert!(long.to_string().contains("past its pass's end"), "{long}");
        // Integers no run writes: refused on reading, naming the row.
        let far = forge(&|rows| rows[1][2] = 1 << 40);
        assert!(
            far.to_string()
                .contains("[1] starts in window 1099511627776, past the epoch's"),
            "{far}"
        );
        let many = forge(&|rows| rows[0][6] = 1 << 40);
        assert!(
            many.to_string()
                .contains("[0] has steps=0 and done=1099511627776"),
            "{many}"
        );
        let huge = forge(&|rows| rows[0][5] = 1 << 63);
        assert!(
            huge.to_string()
                .contains("[0] has step=9223372036854775808, past 2**62"),
            "{huge}"
        );
    }
}
