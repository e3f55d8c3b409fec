//! A run's state dict: the epoch's state ([`Sharding::state`]) with the run's history and
//! its exclusion log in the order ids were excluded. A change costs one row of 10 integers.

use super::{Change, Run, Segment};
use crate::error::Error;
use crate::sharding::Sharding;
use crate::state::{Value, SHARD};

impl Run {
    /// The state dict of epoch `now` after `consumed` of its global positions, with the
    /// history (the open segment at `consumed` when it reads `now`'s epoch, else at
    /// `open_stop`) and the weight changes a dataset committed.
    pub fn state(
        &self,
        now: &Sharding,
        consumed: u64,
        open_stop: Option<u64>,
        weight_changes: u64,
    ) -> Result<Vec<(&'static str, Value)>, Error> {
        let open_epoch = self.segments.last().map(|s| s.epoch);
        let stop = if open_epoch == Some(now.spec.epoch) {
            Some(consumed)
        } else {
            open_stop
        };
        let mut rows = self.rows(stop)?;
        if self.open && open_epoch != Some(now.spec.epoch) && consumed > 0 {
            return Err(Error::Invalid(format!(
                "a state at position {consumed} of epoch {} while the run's last pass read \
                 epoch {:?}: iterate the epoch before saving a position in it",
                now.spec.epoch, open_epoch
            )));
        }
        // A history ends at the state's resume point, read by the state's ranks: a state
        // taken after `set_epoch`, or after a resume onto another world size, and before
        // the next pass ends with an empty segment of that pass.
        if let Some(row) = rows.last() {
            let last = Segment::from_row(row, rows.len() - 1)?;
            let here = (now.spec.epoch, consumed, now.spec.num_replicas);
            if (last.epoch, last.stop, last.world) != here {
                let change = if last.epoch == now.spec.epoch {
                    Change::Resume
                } else {
                    Change::Epoch
                };
                let empty = Segment {
                    change,
                    epoch: now.spec.epoch,
                    start: consumed,
                    stop: consumed,
                    step: last.step + self.steps(&last, 0)?,
                    world: now.spec.num_replicas,
                    ..last
                };
                rows.push(empty.row());
            }
        }
        let mut fields: Vec<(&'static str, Value)> = now
            .state(consumed)
            .into_iter()
            .filter(|(k, _)| *k != "exclude")
            .collect();
        let log = self.log_with(now);
        if !log.is_empty() {
            fields.push((
                "exclude",
                Value::Ids(log.iter().map(|&id| id.into()).collect()),
            ));
        }
        // Written even when 0 or empty: a loader that fills a fresh sampler's state as a
        // template (torch.distributed.checkpoint) keeps only the keys the template has.
        fields.push(("weight_changes", Value::Int(weight_changes.into())));
        fields.push(("history", Value::Rows(rows)));
        fields.push(("kind", Value::Str("sharded".into())));
        Ok(SHARD.write(fields))
    }

    /// The run a state dict holds (its history, if it has one: a state of 0.5 or before
    /// starts a history at its load), its epoch and its resume point; checked.
    pub fn from_state(state: &[(String, Value)], strict: bool) -> Result<(Run, u64), Error> {
        let (sharding, consumed) = Sharding::from_state(state, strict)?;
        let saved = SHARD.read(state, strict)?;
        let log = saved.ids("exclude")?;
        // A state that names its kind (0.7 on) ends its history with its own segment.
        let named = saved.kind(&["sharded", "weighted"])?.is_some();
        let mut run = Run::from_rows(sharding, log, saved.rows("history"), consumed, named)?;
        run.weight_changes = saved.int("weight_changes")?;
        run.resume = consumed;
        Ok((run, consumed))
    }

    /// Weight changes a dataset committed by the state this run was read from.
    pub fn weight_changes(&self) -> u64 {
        self.weight_changes
    }

    /// The exclusion log followed by `now`'s ids not in it yet (sorted).
    pub(super) fn log_with(&self, now: &Sharding) -> Vec<u64> {
        let mut log = self.log.clone();
        let mut added: Vec<u64> = now
            .exclusions
            .ids()
            .iter()
            .copied()
            .filter(|id| !self.log.contains(id))
            .collect();
        added.sort_unstable();
        log.extend(added);
        log
    }
}
