//! An iterable's elements dealt to its consumers (rank × DataLoader worker), and what the
//! runs before a resume took of them, as *layers*.
//!
//! A run deals its input sequence to `C = ranks × workers` consumers (rank `r`, worker
//! `w`: consumer `r × workers + w`): element `i` to consumer `i mod C` ([`Spread::Stride`]),
//! or, on a fresh run whose shards divide the ranks, shard `s` to rank `s mod ranks`,
//! whose workers stride over its shards' elements ([`Spread::Shards`]). A DataLoader hands
//! the loop its workers' batches in turn (worker 0's first, worker 1's first, ..., then
//! each one's second), so after `b` batches of `B` on every rank (ranks in lockstep, as
//! under DDP) worker `w` of every rank delivered `ceil((b - w) / workers)` batches: its
//! consumer took the first `B` times as many elements of its part. (Consumers that run
//! out do so at the end of the last round, so the count stays exact; a count past a
//! consumer's end names elements that do not exist, which is harmless.)
//!
//! A [`Layer`] records that run in five numbers; the elements it took are a pure function
//! of them, with no need to know any length. A resumed run filters the source through
//! every layer in order (each numbers the elements the previous ones left) and deals what
//! is left, by stride, to its own consumers.

use crate::error::Error;
use crate::state::{Value, LAYER};

/// One consumer of an iterable: DataLoader worker `worker` of data-parallel rank `rank`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Consumer {
    /// Data-parallel rank, `< ranks`.
    pub rank: u64,
    /// Data-parallel ranks, `>= 1`.
    pub ranks: u64,
    /// DataLoader worker, `< workers`.
    pub worker: u64,
    /// DataLoader workers of every rank, `>= 1`.
    pub workers: u64,
}

impl Consumer {
    /// Checks the fields together.
    pub fn new(rank: u64, ranks: u64, worker: u64, workers: u64) -> Result<Consumer, Error> {
        if ranks == 0 || rank >= ranks {
            return Err(Error::Invalid(format!(
                "Invalid rank {rank}, rank should be in the interval [0, {}] (world_size {ranks})",
                ranks.saturating_sub(1)
            )));
        }
        if workers == 0 || worker >= workers {
            return Err(Error::Invalid(format!(
                "worker {worker} is not in range({workers}) of the DataLoader's workers"
            )));
        }
        ranks.checked_mul(workers).ok_or_else(|| {
            Error::Invalid(format!("{ranks} ranks x {workers} workers overflow 2**64"))
        })?;
        Ok(Consumer {
            rank,
            ranks,
            worker,
            workers,
        })
    }

    /// This consumer's index among all: `rank × workers + worker`.
    pub fn index(&self) -> u64 {
        self.rank * self.workers + self.worker
    }

    /// Consumers in all: `ranks × workers`.
    pub fn count(&self) -> u64 {
        self.ranks * self.workers
    }
}

/// How a run dealt its elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Element `i` to consumer `i mod C`.
    Stride,
    /// Shard `s` to rank `s mod ranks`; its workers stride over that rank's elements.
    Shards,
}

impl Spread {
    /// How a fresh run over `shards` shards (`None`: one stream of elements) deals to
    /// `ranks`: whole shards when they divide the ranks and the consumers' counts need not
    /// be `even` (each rank then opens only its own shards).
    pub fn of_fresh_run(shards: Option<u64>, ranks: u64, even: bool) -> Spread {
        match shards {
            Some(s) if ranks > 0 && s % ranks == 0 && !even => Spread::Shards,
            _ => Spread::Stride,
        }
    }

    /// The spread named `name` in a state dict: `"stride"` or `"shards"`.
    pub fn of_name(name: &str) -> Result<Spread, Error> {
        match name {
            "stride" => Ok(Spread::Stride),
            "shards" => Ok(Spread::Shards),
            other => Err(Error::Invalid(format!(
                "a layer's dealt must be 'stride' or 'shards', got {other:?}"
            ))),
        }
    }

    /// Its name in a state dict.
    pub fn name(self) -> &'static str {
        match self {
            Spread::Stride => "stride",
            Spread::Shards => "shards",
        }
    }
}

/// One run of an iterable: how it dealt, to how many consumers, and the batches of
/// `batch_size` every rank's loop took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layer {
    /// How the run dealt.
    pub spread: Spread,
    /// Its data-parallel ranks, `>= 1`.
    pub ranks: u64,
    /// Its DataLoader workers per rank, `>= 1`.
    pub workers: u64,
    /// Elements a batch, `>= 1`.
    pub batch_size: u64,
    /// Batches every rank's loop took.
    pub batches: u64,
}

/// Which elements of one stream a [`Layer`] left, numbered from 0: none before
/// `taken_below`, those at `kept` in `[taken_below, kept_from)`, and every one from
/// `kept_from` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Left {
    /// Every element before it was taken.
    pub taken_below: u64,
    /// Every element from it on was left.
    pub kept_from: u64,
    /// The elements left in between, increasing.
    pub kept: Vec<u64>,
}

impl Left {
    /// Whether element `i` of the stream was left.
    pub fn keeps(&self, i: u64) -> bool {
        i >= self.kept_from || (i >= self.taken_below && self.kept.binary_search(&i).is_ok())
    }
}

impl Layer {
    /// Checks the fields: every count at least 1 (`batches` at least 0), and the elements
    /// taken countable in 64 bits.
    pub fn new(
        spread: Spread,
        ranks: u64,
        workers: u64,
        batch_size: u64,
        batches: u64,
    ) -> Result<Layer, Error> {
        for (name, value) in [
            ("ranks", ranks),
            ("workers", workers),
            ("batch_size", batch_size),
        ] {
            if value == 0 {
                return Err(Error::Invalid(format!(
                    "layer['{name}'] must be >= 1, got 0"
                )));
            }
        }
        let layer = Layer {
            spread,
            ranks,
            workers,
            batch_size,
            batches,
        };
        // Worker 0 took the most; every count below fits when its count times the consumers does.
        (batch_size.checked_mul(batches.div_ceil(workers)))
            .and_then(|most| most.checked_mul(ranks.checked_mul(workers)?))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "a layer of {batches} batches of {batch_size} over {ranks} x {workers} \
                     consumers counts past 2**64 elements: the state was edited"
                ))
            })?;
        Ok(layer)
    }

    /// The elements each consumer of worker index `worker` took (the same on every rank):
    /// its worker delivered `ceil((batches - worker) / workers)` batches.
    pub fn taken(&self, worker: u64) -> u64 {
        let batches = self.batches.saturating_sub(worker).div_ceil(self.workers);
        self.batch_size.saturating_mul(batches)
    }

    /// The rank whose stream held shard `shard` ([`Spread::Shards`]).
    pub fn rank_of_shard(&self, shard: u64) -> u64 {
        shard % self.ranks
    }

    /// Which elements of one stream this layer left: of its input (a stride layer), or
    /// of one rank's shards in order (a shards layer). The stream was dealt by stride to
    /// its consumers (all of them, or the rank's workers); element `i` went to worker
    /// `i mod workers`, as the `(i div consumers)`-th element of its consumer's part.
    pub fn left(&self) -> Left {
        let consumers = match self.spread {
            Spread::Stride => self.ranks * self.workers,
            Spread::Shards => self.workers,
        };
        let taken: Vec<u64> = (0..self.workers).map(|w| self.taken(w)).collect();
        let low = *taken.iter().min().expect("workers >= 1");
        let high = *taken.iter().max().expect("workers >= 1");
        // Worker taken counts differ by one batch at most: the window is small.
        let (taken_below, kept_from) = (low * consumers, high * consumers);
        let kept = (taken_below..kept_from)
            .filter(|&i| i / consumers >= taken[(i % self.workers) as usize])
            .collect();
        Left {
            taken_below,
            kept_from,
            kept,
        }
    }

    /// The layer a state dict records, checked ([`LAYER`]).
    pub fn from_state(state: &[(String, Value)]) -> Result<Layer, Error> {
        let saved = LAYER.read(state, true)?;
        let spread = Spread::of_name(saved.text("dealt"))?;
        Layer::new(
            spread,
            saved.int("ranks")?,
            saved.int("workers")?,
            saved.int("batch_size")?,
            saved.int("batches")?,
        )
    }

    /// This layer as a state dict records it.
    pub fn state(&self) -> Vec<(&'static str, Value)> {
        LAYER.write(vec![
            ("dealt", Value::Str(self.spread.name().into())),
            ("ranks", Value::Int(self.ranks.into())),
            ("workers", Value::Int(self.workers.into())),
            ("batch_size", Value::Int(self.batch_size.into())),
            ("batches", Value::Int(self.batches.into())),
        ])
    }
}

/// Checks that only the first of `layers` dealt whole shards (a later run deals what is
/// left by stride).
pub fn check_layers(layers: &[Layer]) -> Result<(), Error> {
    if layers
        .iter()
        .skip(1)
        .any(|layer| layer.spread == Spread::Shards)
    {
        return Err(Error::Invalid(
            "only the first run of an iterable deals whole shards; the state was edited".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which of `len` elements a layer left, by dealing them as the run did.
    fn brute_left(layer: &Layer, len: u64) -> Vec<bool> {
        let consumers = match layer.spread {
            Spread::Stride => layer.ranks * layer.workers,
            Spread::Shards => layer.workers,
        };
        let mut part = vec![0u64; consumers as usize];
        (0..len)
            .map(|i| {
                let c = (i % consumers) as usize;
                let worker = c as u64 % layer.workers;
                let batches = (0..layer.batches)
                    .filter(|b| b % layer.workers == worker)
                    .count() as u64;
                let kept = part[c] >= batches * layer.batch_size;
                part[c] += 1;
                kept
            })
            .collect()
    }

    #[test]
    fn what_a_layer_left_is_what_its_consumers_did_not_take() {
        for spread in [Spread::Stride, Spread::Shards] {
            for (ranks, workers, batch_size, batches) in [
                (1, 1, 1, 0),
                (2, 3, 4, 7),
                (3, 2, 5, 1),
                (4, 4, 2, 9),
                (1, 5, 3, 13),
            ] {
                let layer = Layer::new(spread, ranks, workers, batch_size, batches).unwrap();
                let left = layer.left();
                let brute = brute_left(&layer, 400);
                for (i, &kept) in brute.iter().enumerate() {
                    assert_eq!(left.keeps(i as u64), kept, "{layer:?} at {i}");
                }
            }
        }
    }

    #[test]
    fn a_layer_reads_back_as_written_and_refuses_bad_values() {
        let layer = Layer::new(Spread::Shards, 2, 3, 4, 5).unwrap();
        let owned: Vec<(String, Value)> = layer
            .state()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(Layer::from_state(&owned).unwrap(), layer);
        let mut bad = owned.clone();
        bad[2].1 = Value::Int(0);
        let err = Layer::from_state(&bad).unwrap_err().to_string();
        assert!(err.contains("workers"), "{err}");
        let mut bad = owned.clone();
        bad[0].1 = Value::Str("rows".into());
        assert!(Layer::from_state(&bad).is_err());
        assert!(Layer::new(Spread::Stride, 4, 4, u64::MAX / 2, 100).is_err());
        assert!(Layer::new(Spread::Stride, 1, 1, u64::MAX / 2, 3).is_err()); // one consumer too
        assert!(Layer::new(Spread::Stride, 1, 1, u64::MAX / 2, 2).is_ok());
        assert!(check_layers(&[layer, layer]).is_err());
        assert!(check_layers(&[
            layer,
            Layer {
                spread: Spread::Stride,
                ..layer
            }
        ])
        .is_ok());
    }

    #[test]
    fn consumers_and_fresh_runs() {
        let c = Consumer::new(2, 3, 1, 4).unwrap();
        assert_eq!((c.index(), c.count()), (9, 12));
        assert!(Consumer::new(3, 3, 0, 1).is_err());
        assert!(Consumer::new(0, 1, 2, 2).is_err());
        assert_eq!(Spread::of_fresh_run(Some(8), 4, false), Spread::Shards);
        assert_eq!(Spread::of_fresh_run(Some(8), 4, true), Spread::Stride);
        assert_eq!(Spread::of_fresh_run(Some(6), 4, false), Spread::Stride);
        assert_eq!(Spread::of_fresh_run(None, 1, false), Spread::Stride);
    }
}
