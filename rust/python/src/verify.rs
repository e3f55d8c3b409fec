//! `_core.verify` (the exact proof) and its progress counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

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

/// Proves `partition` exact; returns `(covered, padding, dropped)` or raises ShardingError.
#[pyfunction]
#[pyo3(signature = (partition, threads = 0, progress = None))]
pub fn verify(
    py: Python<'_>,
    partition: &Partition,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<(u64, u64, u64)> {
    let counter = progress.map_or_else(|| Arc::new(AtomicU64::new(0)), |p| p.done.clone());
    let part = &partition.inner;
    let cert = py
        .detach(|| permshard_core::verify(part, threads, &counter))
        .map_err(to_py)?;
    Ok((cert.covered, cert.padding, cert.dropped))
}
