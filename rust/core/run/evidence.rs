//! A history read back is evidence: before anything answers from it, it is checked as a
//! whole in O(#segments) for what no run can have written — an integer past the run's own
//! size, a segment stopping past the positions its epoch deals, steps that do not add up,
//! a last segment that is not the state's own. What a real run can write and still break
//! exactly-once (a break before an epoch's end, an epoch iterated again) loads, and is
//! the audit's to name.

use super::{BudgetSegment, Run, Segment};
use crate::error::Error;
use crate::state::BudgetEpoch;

/// Ranks or batch items a row may hold beyond the run's own size: a world (or a batch) of
/// more ranks than samples is a run's right, up to this many; past both, the row would make
/// a reader loop or allocate for nothing the run read.
const MOST_BEYOND_DATA: u64 = 1 << 20;

/// Steps a row may start at: adding a run's steps to it never overflows.
const MOST_STEP: u64 = 1 << 62;

impl Run {
    /// Checks every row of the history against the run's size and the row before it: a
    /// [`Error::Invalid`] naming the row and the field.
    pub(super) fn check_evidence(&self) -> Result<(), Error> {
        let n = self.base.spec.n;
        let most = n.max(MOST_BEYOND_DATA).max(self.base.spec.num_replicas);
        for (i, segment) in self.segments.iter().enumerate() {
            let bad = |what: String| row_error(i, what);
            if segment.world > most {
                return Err(bad(format!(
                    "has world={}, more ranks than the run's {n} samples and than {MOST_BEYOND_DATA}",
                    segment.world
                )));
            }
            let batch = segment.dealing.batch_size();
            if batch > n.max(MOST_BEYOND_DATA) {
                return Err(bad(format!(
                    "has batch_size={batch}, more than the run's {n} samples and than \
                     {MOST_BEYOND_DATA}"
                )));
            }
            if segment.step > MOST_STEP {
                return Err(bad(format!("has step={}, past 2**62 steps", segment.step)));
            }
            let end = self.partition(segment)?.end().max(segment.start);
            if segment.stop > end {
                return Err(bad(format!(
                    "stops at position {}, past the {end} positions its epoch deals to {} \
                     rank(s)",
                    segment.stop, segment.world
                )));
            }
            if i > 0 {
                self.check_steps_add_up(i)?;
            }
        }
        Ok(())
    }

    /// The last segment of a history read from a state dict is the state's own: read by
    /// the state's `world` ranks (its epoch and stop are checked where it is read).
    pub(super) fn check_last_is_the_state(&self, world: u64) -> Result<(), Error> {
        if let Some(last) = self.segments.last() {
            if last.world != world {
                return Err(row_error(
                    self.segments.len() - 1,
                    format!(
                        "is read by world={} ranks, but the state is of num_replicas={world}: \
                         the last segment is the state's own",
                        last.world
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Segment `i` starts at the step segment `i - 1` ended at (what [`Run::begin`] writes).
    fn check_steps_add_up(&self, i: usize) -> Result<(), Error> {
        let before: &Segment = &self.segments[i - 1];
        let expected = before.step + self.steps(before, 0)?;
        if self.segments[i].step != expected {
            return Err(row_error(
                i,
                format!(
                    "has step={}, but the segment before starts at step {} and takes {} \
                     step(s): the steps do not add up",
                    self.segments[i].step,
                    before.step,
                    expected - before.step
                ),
            ));
        }
        Ok(())
    }
}

/// A token-budget history read back is evidence too (as a [`Run`]'s is): each row
/// within the epoch (its window among the epoch's, its plan's steps within a window, steps
/// done within the epoch's samples, a step that cannot overflow) and starting at the step
/// the row before ended at. O(#segments); a [`Error::Invalid`] naming the row and field.
pub(super) fn check_budget_evidence(
    base: &BudgetEpoch,
    segments: &[BudgetSegment],
) -> Result<(), Error> {
    let n = base.spec.n;
    let windows = n.div_ceil(base.window.max(1));
    for (i, s) in segments.iter().enumerate() {
        let bad = |what: String| row_error(i, what);
        if s.window > windows {
            return Err(bad(format!(
                "starts in window {}, past the epoch's {windows} windows",
                s.window
            )));
        }
        if s.steps > base.window || s.done > n {
            return Err(bad(format!(
                "has steps={} and done={}: more steps than a window's {} or the epoch's {n} \
                 samples",
                s.steps, s.done, base.window
            )));
        }
        if s.step > MOST_STEP {
            return Err(bad(format!("has step={}, past 2**62 steps", s.step)));
        }
        if let Some(before) = i.checked_sub(1).map(|j| &segments[j]) {
            if s.step != before.step + before.done {
                return Err(bad(format!(
                    "has step={}, but the segment before starts at step {} and takes {} \
                     step(s): the steps do not add up",
                    s.step, before.step, before.done
                )));
            }
        }
    }
    Ok(())
}

fn row_error(i: usize, what: String) -> Error {
    Error::Invalid(format!(
        "state_dict['history'][{i}] {what}; the history is not the one state_dict() wrote: \
         pass the whole dict a sampler saved"
    ))
}
