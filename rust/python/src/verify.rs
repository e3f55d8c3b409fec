//! The exact proofs (`verify`: the bitmap; `verify_inverse`, `prove_ranks`, `judge`: by
//! the inverse) and their progress counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use permshard_core::{Failure, Share};

use crate::errors::to_py;
use crate::partition::Partition;

/// A counter the proof advances while it runs, readable from another Python thread.
#[pyclass(frozen, module = "permshard._core", name = "Progress")]
#[derive(Default)]
pub struct Progress {
    done: Arc<AtomicU64>,
}

#[pymethods]
impl Progress {
    #[new]
    fn new() -> Self {
        Progress::default()
    }

    /// Items checked so far.
    #[getter]
    fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

/// A counter-example as Python receives it: `(position, rank, local, sample, found)`.
pub type FailureTuple = (u64, u64, u64, u64, u64);

/// A share of the inverse proof as Python receives it:
/// `(items, real, padding, outside, failures, first failure or None)`.
pub type ShareTuple = (u64, u64, u64, u64, u64, Option<FailureTuple>);

fn counter(progress: Option<&Progress>) -> Arc<AtomicU64> {
    progress.map_or_else(|| Arc::new(AtomicU64::new(0)), |p| p.done.clone())
}

/// Proves `partition` exact with the bitmap; returns `(covered, padding, dropped)` or
/// raises ShardingError.
#[pyfunction]
#[pyo3(signature = (partition, threads = 0, progress = None))]
pub fn verify(
    py: Python<'_>,
    partition: &Partition,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<(u64, u64, u64)> {
    let counter = counter(progress);
    let part = &partition.inner;
    let cert = py
        .detach(|| permshard_core::verify(part, threads, &counter))
        .map_err(to_py)?;
    Ok((cert.covered, cert.padding, cert.dropped))
}

/// Proves `partition` exact by the inverse (O(1) memory); returns
/// `(covered, padding, dropped)` or raises ShardingError.
#[pyfunction]
#[pyo3(signature = (partition, threads = 0, progress = None))]
pub fn verify_inverse(
    py: Python<'_>,
    partition: &Partition,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<(u64, u64, u64)> {
    let counter = counter(progress);
    let part = &partition.inner;
    py.detach(|| permshard_core::verify_inverse(part, threads, &counter))
        .map_err(to_py)
}

/// Proves the streams of ranks `[first_rank, stop_rank)` and their slice of the positions
/// outside the pass; failures are counted, not raised. With `reference`, samples are
/// inverted by its order (the one the ranks agreed on) instead of the stream's own.
#[pyfunction]
#[pyo3(signature = (partition, first_rank, stop_rank, threads = 0, progress = None, reference = None))]
pub fn prove_ranks(
    py: Python<'_>,
    partition: &Partition,
    first_rank: u64,
    stop_rank: u64,
    threads: usize,
    progress: Option<&Progress>,
    reference: Option<&Partition>,
) -> PyResult<ShareTuple> {
    let counter = counter(progress);
    let part = &partition.inner;
    let order = reference.map_or(part.order(), |r| r.inner.order());
    let share = py
        .detach(|| {
            permshard_core::prove_against(part, order, first_rank..stop_rank, threads, &counter)
        })
        .map_err(to_py)?;
    let first = share
        .first
        .map(|f| (f.position, f.rank, f.local, f.sample, f.found));
    Ok((
        share.items,
        share.real,
        share.padding,
        share.outside,
        share.failures,
        first,
    ))
}

fn failure(first: FailureTuple) -> Failure {
    let (position, rank, local, sample, found) = first;
    Failure {
        position,
        rank,
        local,
        sample,
        found,
    }
}

/// The message of a share's first counter-example, of `failures` in all.
#[pyfunction]
pub fn describe_failure(first: FailureTuple, failures: u64) -> String {
    failure(first).report(failures)
}

/// Judges shares added up over every rank; returns `(covered, padding, dropped)` or raises
/// ShardingError with the first counter-example.
#[pyfunction]
pub fn judge(partition: &Partition, total: ShareTuple) -> PyResult<(u64, u64, u64)> {
    let (items, real, padding, outside, failures, first) = total;
    let first = first.map(failure);
    let share = Share {
        items,
        real,
        padding,
        outside,
        failures,
        first,
    };
    permshard_core::judge(&partition.inner, &share).map_err(to_py)
}
