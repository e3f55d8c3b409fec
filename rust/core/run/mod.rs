//! A run: one object over a whole training run's stream — its fields, its exclusion log and
//! its history, one [`Segment`] per change (a resume on another world size, batch size or
//! dealing, more exclusions, an epoch, an epoch read again). Because the stream is a pure
//! function of the history, a run read back from a checkpoint answers both ways
//! ([`Run::where_read`], [`Run::show`]) and proves exactly-once ([`Run::audit`]).
//!
//! A sampler holds one: [`Run::begin`] as each pass starts (it closes the segment before at
//! what that pass consumed), [`Run::rows`] for a state dict, [`Run::from_state`] to resume.

mod attribution;
mod audit;
mod budget;
mod evidence;
mod segment;
mod state;
#[cfg(test)]
mod tests;

pub use attribution::Read;
pub use audit::Audit;
pub use budget::{BudgetIndex, BudgetRun, BudgetSegment, BUDGET_ROW};
pub use segment::{Change, Segment, ROW};

use crate::error::Error;
use crate::exclusion::Exclusions;
use crate::partition::Partition;
use crate::sharding::Sharding;

/// A run's stream and history.
#[derive(Clone, Debug)]
pub struct Run {
    /// The fields every segment shares (samples, seed, shuffle, `drop_last`, blocks, the
    /// permutation); its epoch, ranks, dealing and exclusions are those of its last state.
    base: Sharding,
    /// Excluded ids in the order they were excluded (each group sorted).
    log: Vec<u64>,
    /// The segments in the order they were read; the last is open while a pass may read.
    segments: Vec<Segment>,
    /// Whether the last segment may still grow (a pass began it since the last load).
    open: bool,
    /// Weight changes a dataset committed, as the state read back recorded them.
    weight_changes: u64,
    /// Where the next pass starts: global positions of the epoch consumed before it (a
    /// loaded resume point; `0` for an epoch read from its start).
    resume: u64,
}

impl Run {
    /// A run of `base`'s order with no history yet.
    pub fn new(base: Sharding) -> Run {
        let log = base.exclusions.ids().to_vec();
        Run {
            base,
            log,
            segments: Vec::new(),
            open: false,
            weight_changes: 0,
            resume: 0,
        }
    }

    /// A run whose history is `rows` (a state dict's `history`) over the exclusion log
    /// `log` (the state's `exclude`, in the order written), ending at the state's epoch
    /// `base` and resume point `consumed`: checked row by row and against the state. A
    /// state that names its kind (`named`: written by 0.7 on) ends with its own segment, of
    /// its world; 0.6 saved a state resumed onto another world and not read yet without it.
    pub fn from_rows(
        base: Sharding,
        log: Vec<u64>,
        rows: &[Vec<i128>],
        consumed: u64,
        named: bool,
    ) -> Result<Run, Error> {
        let run = Run::restore(base, log, rows, false)?;
        if let Some(last) = run.segments.last() {
            if (last.epoch, last.stop) != (run.base.spec.epoch, consumed) {
                return Err(Error::Invalid(format!(
                    "state_dict['history'] ends in epoch {} at position {}, but the state is at \
                     epoch {} position {consumed}: the history was not saved with this state",
                    last.epoch, last.stop, run.base.spec.epoch
                )));
            }
        }
        if named {
            run.check_last_is_the_state(run.base.spec.num_replicas)?;
        }
        Ok(run)
    }

    /// A run from its parts as [`Run::parts`] gives them (a copy of a run, for pickling).
    pub fn restore(
        base: Sharding,
        log: Vec<u64>,
        rows: &[Vec<i128>],
        open: bool,
    ) -> Result<Run, Error> {
        let segments = rows
            .iter()
            .enumerate()
            .map(|(i, row)| Segment::from_row(row, i))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(bad) = segments.iter().find(|s| s.excluded > log.len() as u64) {
            return Err(Error::Invalid(format!(
                "state_dict['history'] has a segment excluding {} ids, but the state \
                 excludes {}",
                bad.excluded,
                log.len()
            )));
        }
        let mut run = Run::new(base);
        run.log = log;
        run.open = open && !segments.is_empty();
        run.segments = segments;
        run.check_evidence()?;
        Ok(run)
    }

    /// The run's parts: its fields, the exclusion log, every segment as a row (the open one
    /// at its start) and whether the last is open.
    pub fn parts(&self) -> (&Sharding, &[u64], Vec<Vec<i128>>, bool) {
        (
            &self.base,
            &self.log,
            self.segments.iter().map(Segment::row).collect(),
            self.open,
        )
    }

    /// The run's fields (the epoch and world of its last state).
    pub fn base(&self) -> &Sharding {
        &self.base
    }

    /// Where the next pass starts: global positions of its epoch consumed before it.
    pub fn resume_point(&self) -> u64 {
        self.resume
    }

    /// The next pass starts at `start` (a loaded resume point, as this run's epoch reads
    /// it; `0`: from the epoch's start).
    pub fn resume_at(&mut self, start: u64) {
        self.resume = start;
    }

    /// The exclusion log: excluded ids in the order they were excluded.
    pub fn log(&self) -> &[u64] {
        &self.log
    }

    /// The segments, the open one at the stop it had when last closed or begun.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether a pass began the last segment (it grows until [`Run::begin`] or a state).
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The epoch `segment` reads, as a sharding of its own (its world, dealing and
    /// exclusions).
    pub fn sharding(&self, segment: &Segment) -> Result<Sharding, Error> {
        let mut sharding = self.base.clone().with_dealing(segment.dealing);
        sharding.spec.epoch = segment.epoch;
        sharding.spec.num_replicas = segment.world;
        let excluded = self.log[..segment.excluded as usize].to_vec();
        sharding.with_exclusions(Exclusions::new(excluded, self.base.spec.n)?)
    }

    /// The positions `segment` deals, from its start.
    pub fn partition(&self, segment: &Segment) -> Result<Partition, Error> {
        self.sharding(segment)?.partition(segment.start)
    }

    /// A new pass of `sharding` (its epoch, world, dealing and exclusions) from global
    /// position `start`: closes the open segment at `previous_stop` (what the pass before
    /// consumed: required while one is open) and opens one. Nothing is recorded for a
    /// segment that read nothing. The exclusions may only grow: the new ids join the log.
    pub fn begin(
        &mut self,
        sharding: &Sharding,
        start: u64,
        previous_stop: Option<u64>,
    ) -> Result<(), Error> {
        let mut change = Change::Resume;
        if self.open {
            let stop = previous_stop.ok_or_else(|| {
                Error::Invalid(
                    "a run's open segment closes at what its pass consumed: pass it".into(),
                )
            })?;
            self.close(stop)?;
            change = Change::Repeat;
        }
        if let Some(id) = self
            .log
            .iter()
            .find(|&&id| !sharding.exclusions.contains(id))
        {
            return Err(Error::Invalid(format!(
                "sample {id} was excluded earlier in this run, and this pass reads it: a run may \
                 only exclude more"
            )));
        }
        self.log = self.log_with(sharding);
        let step = match self.segments.last() {
            Some(last) => last.step + self.steps(last, 0)?,
            None => 0,
        };
        change = match self.segments.last() {
            None => Change::Start,
            Some(last) if last.epoch != sharding.spec.epoch => Change::Epoch,
            Some(_) => change,
        };
        self.segments.push(Segment {
            change,
            epoch: sharding.spec.epoch,
            start,
            stop: start,
            step,
            world: sharding.spec.num_replicas,
            dealing: sharding.dealing,
            excluded: self.log.len() as u64,
        });
        self.base = sharding.clone();
        self.open = true;
        Ok(())
    }

    /// Ends the open segment at `stop` global positions of its epoch (dropped when it read
    /// nothing).
    pub fn close(&mut self, stop: u64) -> Result<(), Error> {
        let last = *self.segments.last().expect("an open segment");
        let end = self.partition(&last)?.end().max(last.start);
        if !(last.start..=end).contains(&stop) {
            return Err(Error::Invalid(format!(
                "a pass from position {} consumed up to {stop}, outside [{}, {end}]",
                last.start, last.start
            )));
        }
        self.open = false;
        if stop == last.start {
            self.segments.pop();
        } else if let Some(seg) = self.segments.last_mut() {
            seg.stop = stop;
        }
        Ok(())
    }

    /// The history as rows, the open segment (if any) at `stop` positions consumed.
    pub fn rows(&self, stop: Option<u64>) -> Result<Vec<Vec<i128>>, Error> {
        let mut segments = self.segments.clone();
        if self.open {
            let stop = stop.ok_or_else(|| {
                Error::Invalid(
                    "a run's open segment is written at what its pass consumed: pass it".into(),
                )
            })?;
            let last = segments.last_mut().expect("an open segment");
            last.stop = stop.max(last.start);
            if last.stop == last.start {
                segments.pop();
            }
        }
        Ok(segments.iter().map(Segment::row).collect())
    }

    /// Items `rank` took in `segment`: its local items at positions below `stop`.
    fn items(&self, part: &Partition, rank: u64, stop: u64) -> u64 {
        // Positions grow with the local index for a fixed rank: the first local at or past
        // `stop`, by bisection.
        let (mut lo, mut hi) = (0, part.num_samples());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if part.position(rank, mid) < stop {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Steps each rank took in `segment`: its batches (of `items_batch` items for an item
    /// sampler; `0` steps without a batch size).
    pub fn steps(&self, segment: &Segment, items_batch: u64) -> Result<u64, Error> {
        let batch = segment.batch(items_batch);
        if batch == 0 || segment.stop == segment.start {
            return Ok(0);
        }
        let part = self.partition(segment)?;
        // Rank 0 takes the first position of every round and of every step: the most items.
        Ok(self.items(&part, 0, segment.stop).div_ceil(batch))
    }

    /// The step each segment starts at, counted with `items_batch` for item samplers.
    fn step_starts(&self, items_batch: u64) -> Result<Vec<u64>, Error> {
        let mut starts = Vec::with_capacity(self.segments.len());
        let mut step = 0;
        for (i, segment) in self.segments.iter().enumerate() {
            // A history that starts at a load continues its saved step count.
            if i == 0 {
                step = if segment.dealing.batch_size() == 0 {
                    0
                } else {
                    segment.step
                };
            }
            starts.push(step);
            step += self.steps(segment, items_batch)?;
        }
        Ok(starts)
    }
}
