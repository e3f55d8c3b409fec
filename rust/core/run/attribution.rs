//! Attribution both ways: where a run read a sample ([`Run::where_read`]), and what every
//! rank read at a step ([`Run::show`]). Each answer is O(#segments + answer): one
//! partition per segment, positions by the inverse of the order.

use super::Run;
use crate::error::Error;
use crate::partition::Partition;

/// One read of a sample: at `step` (or, for an item sampler without a batch size, the
/// item's index in its rank's stream of the epoch), by `rank`, at `position` in that
/// rank's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    /// The epoch.
    pub epoch: u64,
    /// Batches each rank had taken since the run's start (`None`: an item sampler's read,
    /// counted by `position` only).
    pub step: Option<u64>,
    /// The data-parallel rank that read it.
    pub rank: u64,
    /// Its place in that rank's batch (without steps: in the rank's stream of the epoch).
    pub position: u64,
    /// The sample read.
    pub sample: u64,
    /// Whether the read is declared padding (it repeats a sample to even out the ranks).
    pub padding: bool,
    /// The segment of the history it belongs to.
    pub segment: usize,
}

impl Run {
    /// Every read of `sample` in the run's history, in order: (epoch, step, rank, position
    /// in the batch). `items_batch` is the batch size of an item sampler's loader (`0`:
    /// unknown, steps are `None`).
    pub fn where_read(&self, sample: u64, items_batch: u64) -> Result<Vec<Read>, Error> {
        let n = self.base.spec.n;
        if sample >= n {
            return Err(Error::OutOfRange {
                what: "sample",
                value: sample,
                n,
            });
        }
        let starts = self.step_starts(items_batch)?;
        let parts = self
            .segments
            .iter()
            .map(|s| self.partition(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut reads = Vec::new();
        for (i, segment) in self.segments.iter().enumerate() {
            let part = &parts[i];
            for (rank, local) in part.locate(sample)? {
                let p = part.position(rank, local);
                if p >= segment.stop {
                    continue;
                }
                let batch = segment.batch(items_batch);
                let (step, position) = match batch {
                    0 => (None, self.epoch_offset(&parts, i, rank) + local),
                    b => (Some(starts[i] + local / b), local % b),
                };
                reads.push(Read {
                    epoch: segment.epoch,
                    step,
                    rank,
                    position,
                    sample,
                    padding: p >= part.n(),
                    segment: i,
                });
            }
        }
        reads.sort_by_key(|r| (r.segment, r.step, r.rank, r.position));
        Ok(reads)
    }

    /// What every rank read at `step` (batches each rank had taken since the run's start),
    /// rank by rank in batch order. `items_batch` is an item sampler's loader batch size.
    pub fn show(&self, step: u64, items_batch: u64) -> Result<Vec<Read>, Error> {
        let starts = self.step_starts(items_batch)?;
        let mut last_step = None;
        for (i, segment) in self.segments.iter().enumerate().rev() {
            let batch = segment.batch(items_batch);
            if batch == 0 {
                return Err(Error::Invalid(
                    "this run's history was read by an item sampler, which knows no batches: \
                     pass the DataLoader's batch_size to count its steps"
                        .into(),
                ));
            }
            let steps = self.steps(segment, items_batch)?;
            last_step = last_step.or(Some(starts[i] + steps));
            if !(starts[i]..starts[i] + steps).contains(&step) {
                continue;
            }
            let part = self.partition(segment)?;
            let k = step - starts[i];
            let mut reads = Vec::new();
            for rank in 0..segment.world {
                let first = k * batch;
                let last = (first + batch).min(part.num_samples());
                for local in first..last {
                    let p = part.position(rank, local);
                    if p >= segment.stop {
                        break;
                    }
                    reads.push(Read {
                        epoch: segment.epoch,
                        step: Some(step),
                        rank,
                        position: local - first,
                        sample: part.sample_at(p),
                        padding: p >= part.n(),
                        segment: i,
                    });
                }
            }
            return Ok(reads);
        }
        let first = starts.first().copied().unwrap_or(0);
        Err(Error::Invalid(format!(
            "step {step} is not in this run's history, which holds steps [{first}, {})",
            last_step.unwrap_or(first)
        )))
    }

    /// The items a rank numbered `rank` took in segment `i`'s epoch before it (an item
    /// sampler's position in its rank's stream of the epoch), over the segments' `parts`:
    /// O(#segments), nothing allocated per rank.
    fn epoch_offset(&self, parts: &[Partition], i: usize, rank: u64) -> u64 {
        let epoch = self.segments[i].epoch;
        let mut taken = 0;
        for j in (0..i).rev() {
            let segment = &self.segments[j];
            if segment.epoch != epoch {
                break;
            }
            if rank < segment.world {
                taken += self.items(&parts[j], rank, segment.stop);
            }
        }
        taken
    }

    /// The segments of one epoch's stretch of the history: index ranges of consecutive
    /// segments of the same epoch.
    pub(super) fn epochs(&self) -> Vec<std::ops::Range<usize>> {
        let mut out: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, s) in self.segments.iter().enumerate() {
            match out.last_mut() {
                Some(r) if self.segments[r.start].epoch == s.epoch => r.end = i + 1,
                _ => out.push(i..i + 1),
            }
        }
        out
    }
}
