//! One segment of a run's history: a stretch of one epoch read by one world of ranks in one
//! dealing, between two changes. A segment is a few integers; a state dict writes it as a
//! row of them.

use crate::dealing::{Dealing, Layout};
use crate::error::Error;

/// What opened a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The run's first pass, or the first pass after loading a state that had no history
    /// (a state of 0.5 or before): the history starts there.
    Start,
    /// A new epoch.
    Epoch,
    /// A resume from a state dict: perhaps another world size, batch size, dealing or
    /// more exclusions.
    Resume,
    /// The same epoch iterated again from its resume point (its samples are read again).
    Repeat,
}

impl Change {
    pub(super) const ALL: [Change; 4] =
        [Change::Start, Change::Epoch, Change::Resume, Change::Repeat];

    /// Its name, as answers and errors say it.
    pub fn name(self) -> &'static str {
        match self {
            Change::Start => "start",
            Change::Epoch => "epoch",
            Change::Resume => "resume",
            Change::Repeat => "repeat",
        }
    }

    fn code(self) -> i128 {
        Change::ALL.iter().position(|&c| c == self).unwrap_or(0) as i128
    }
}

/// A stretch of one epoch: global positions `[start, stop)` of its order (the order
/// without the first `excluded` ids of the run's exclusion log), dealt to `world` ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// What opened it.
    pub change: Change,
    /// The epoch.
    pub epoch: u64,
    /// First global position of the epoch read in it (every rank in lockstep).
    pub start: u64,
    /// Global positions of the epoch consumed when it ended (`start` if none).
    pub stop: u64,
    /// Steps (batches each rank had taken since the run's start) before it.
    pub step: u64,
    /// Data-parallel ranks.
    pub world: u64,
    /// How positions went to ranks, and the batch size (`0`: an item sampler).
    pub dealing: Dealing,
    /// How many ids of the run's exclusion log were excluded in it.
    pub excluded: u64,
}

/// The integers of a row, in order.
pub const ROW: [&str; 10] = [
    "change",
    "epoch",
    "start",
    "stop",
    "step",
    "world",
    "batch_size",
    "dealing",
    "drop_last_batch",
    "excluded",
];

impl Segment {
    /// The segment as a row of integers ([`ROW`]): 10 of them.
    pub fn row(&self) -> Vec<i128> {
        let layout = match self.dealing.layout() {
            Layout::RoundRobin => 0,
            Layout::Step => 1,
        };
        vec![
            self.change.code(),
            self.epoch.into(),
            self.start.into(),
            self.stop.into(),
            self.step.into(),
            self.world.into(),
            self.dealing.batch_size().into(),
            layout,
            i128::from(self.dealing.drop_last()),
            self.excluded.into(),
        ]
    }

    /// A row read back, each integer checked; `i` numbers it in errors.
    pub fn from_row(row: &[i128], i: usize) -> Result<Segment, Error> {
        let bad = |what: String| {
            Error::Invalid(format!(
                "state_dict['history'][{i}] {what}: a history row is [{}], as state_dict() \
                 writes it",
                ROW.join(", ")
            ))
        };
        if row.len() != ROW.len() {
            return Err(bad(format!(
                "has {} integers, not {}",
                row.len(),
                ROW.len()
            )));
        }
        let int = |k: usize| {
            u64::try_from(row[k]).map_err(|_| bad(format!("has {}={} < 0", ROW[k], row[k])))
        };
        let choice = |k: usize, count: usize| {
            usize::try_from(row[k])
                .ok()
                .filter(|&c| c < count)
                .ok_or_else(|| bad(format!("has {}={}, not in [0, {count})", ROW[k], row[k])))
        };
        let change = Change::ALL[choice(0, Change::ALL.len())?];
        let name = ["round-robin", "step"][choice(7, 2)?];
        let drop_last = choice(8, 2)? == 1;
        let dealing = Dealing::new(name, int(6)?, drop_last).map_err(|e| bad(e.to_string()))?;
        let (start, stop, world) = (int(2)?, int(3)?, int(5)?);
        if stop < start {
            return Err(bad(format!("stops at {stop}, before its start {start}")));
        }
        if world == 0 {
            return Err(bad("has world=0".into()));
        }
        Ok(Segment {
            change,
            epoch: int(1)?,
            start,
            stop,
            step: int(4)?,
            world,
            dealing,
            excluded: int(9)?,
        })
    }

    /// Whether it counts steps (a batch sampler's, or an item sampler's given a batch size).
    pub fn batch(&self, items_batch: u64) -> u64 {
        match self.dealing.batch_size() {
            0 => items_batch,
            b => b,
        }
    }
}
