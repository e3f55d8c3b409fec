//! The proofs (`verify`: the bitmap; `verify_inverse`, `prove_ranks`, `judge`: by the
//! inverse; `judge_coverage`: the fingerprint), their shares, their `Verdict` and their
//! progress counter.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

use permshard_core::{CoverageShare, Failure, Share, Verdict, OUTSIDE};

use crate::errors::to_py;
use crate::partition::Partition;

/// What an exact proof established: the counts a certificate reports (see the core's
/// `Verdict`).
#[pyclass(frozen, get_all, module = "permshard._core", name = "Verdict")]
pub struct PyVerdict {
    start: u64,
    lengths: Vec<u64>,
    batches: Option<u64>,
    covered: u64,
    padding: u64,
    dropped: u64,
    consumed: u64,
}

impl From<Verdict> for PyVerdict {
    fn from(v: Verdict) -> Self {
        PyVerdict {
            start: v.start,
            lengths: v.lengths,
            batches: v.batches,
            covered: v.covered,
            padding: v.padding,
            dropped: v.dropped,
            consumed: v.consumed,
        }
    }
}

/// One rank's part of the distributed coverage proof (five fingerprints).
#[pyclass(frozen, module = "permshard._core", name = "CoverageShare")]
pub struct PyCoverageShare {
    pub inner: CoverageShare,
}

#[pymethods]
impl PyCoverageShare {
    /// A share from the record of `words()` (another rank's, gathered).
    #[staticmethod]
    fn from_words(words: Vec<u64>) -> PyResult<Self> {
        let inner = CoverageShare::from_words(&words).map_err(to_py)?;
        Ok(PyCoverageShare { inner })
    }

    /// The fixed-size record of unsigned 64-bit words ranks exchange.
    fn words(&self) -> Vec<u64> {
        self.inner.to_words().to_vec()
    }
}

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

/// A proof's first counter-example.
#[pyclass(frozen, module = "permshard._core", name = "Failure")]
pub struct PyFailure {
    inner: Failure,
}

#[pymethods]
impl PyFailure {
    /// The global position checked.
    #[getter]
    fn position(&self) -> u64 {
        self.inner.position
    }

    /// The rank whose stream holds it (`None` outside the pass).
    #[getter]
    fn rank(&self) -> Option<u64> {
        (self.inner.rank != OUTSIDE).then_some(self.inner.rank)
    }

    /// Its local index in that stream (`None` outside the pass).
    #[getter]
    fn local(&self) -> Option<u64> {
        (self.inner.local != OUTSIDE).then_some(self.inner.local)
    }

    /// The sample found there.
    #[getter]
    fn sample(&self) -> u64 {
        self.inner.sample
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }
}

/// What a proof of some ranks' streams checked: counts and the first counter-example.
#[pyclass(frozen, module = "permshard._core", name = "Share")]
pub struct PyShare {
    pub inner: Share,
}

#[pymethods]
impl PyShare {
    /// A share from the record of `words()` (another rank's, gathered).
    #[staticmethod]
    fn from_words(words: Vec<u64>) -> PyResult<Self> {
        let inner = Share::from_words(&words).map_err(to_py)?;
        Ok(PyShare { inner })
    }

    /// The fixed-size record of unsigned 64-bit words ranks exchange.
    fn words(&self) -> Vec<u64> {
        self.inner.to_words().to_vec()
    }

    /// Items of the streams checked.
    #[getter]
    fn items(&self) -> u64 {
        self.inner.items
    }

    /// Items and positions that failed.
    #[getter]
    fn failures(&self) -> u64 {
        self.inner.failures
    }

    /// The failure at the smallest global position, or `None`.
    #[getter]
    fn first(&self) -> Option<PyFailure> {
        self.inner.first.map(|inner| PyFailure { inner })
    }
}

fn counter(progress: Option<&Progress>) -> Arc<AtomicU64> {
    progress.map_or_else(|| Arc::new(AtomicU64::new(0)), |p| p.done.clone())
}

/// A whole proof of `partition` on `threads` threads, GIL released: the verdict, or
/// ShardingError.
fn whole_proof(
    py: Python<'_>,
    partition: &Partition,
    progress: Option<&Progress>,
    prove: impl FnOnce(&permshard_core::Partition, &AtomicU64) -> Result<Verdict, permshard_core::Error>
        + Send,
) -> PyResult<PyVerdict> {
    let counter = counter(progress);
    let part = &partition.inner;
    Ok(py.detach(|| prove(part, &counter)).map_err(to_py)?.into())
}

/// Proves `partition` exact with the bitmap (`n / 8` bytes).
#[pyfunction]
#[pyo3(signature = (partition, threads = 0, progress = None))]
pub fn verify(
    py: Python<'_>,
    partition: &Partition,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<PyVerdict> {
    whole_proof(py, partition, progress, |p, c| {
        permshard_core::verify(p, threads, c)
    })
}

/// Proves `partition` exact by the inverse (O(1) memory).
#[pyfunction]
#[pyo3(signature = (partition, threads = 0, progress = None))]
pub fn verify_inverse(
    py: Python<'_>,
    partition: &Partition,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<PyVerdict> {
    whole_proof(py, partition, progress, |p, c| {
        permshard_core::verify_inverse(p, threads, c)
    })
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
) -> PyResult<PyShare> {
    let counter = counter(progress);
    let part = &partition.inner;
    let order = reference.map_or(part.order(), |r| r.inner.order());
    let share = py
        .detach(|| {
            permshard_core::prove_against(part, order, first_rank..stop_rank, threads, &counter)
        })
        .map_err(to_py)?;
    Ok(PyShare { inner: share })
}

/// Judges the shares of every rank, added up in the core: the verdict, or ShardingError
/// with the earliest counter-example.
#[pyfunction]
pub fn judge(partition: &Partition, shares: Vec<PyRef<'_, PyShare>>) -> PyResult<PyVerdict> {
    let total = shares
        .iter()
        .fold(Share::default(), |total, share| total.merge(&share.inner));
    Ok(permshard_core::judge(&partition.inner, &total)
        .map_err(to_py)?
        .into())
}

/// Judges one rank's share alone (its stream and its slice of the positions outside the
/// pass): the verdict, or ShardingError with its first counter-example.
#[pyfunction]
pub fn judge_alone(partition: &Partition, share: &PyShare) -> PyResult<PyVerdict> {
    Ok(permshard_core::judge_alone(&partition.inner, &share.inner)
        .map_err(to_py)?
        .into())
}

/// Judges every rank's coverage share, in rank order, in the core: the verdict, or
/// ShardingError.
#[pyfunction]
pub fn judge_coverage(
    partition: &Partition,
    shares: Vec<PyRef<'_, PyCoverageShare>>,
) -> PyResult<PyVerdict> {
    let shares: Vec<CoverageShare> = shares.iter().map(|s| s.inner).collect();
    Ok(permshard_core::judge_coverage(&partition.inner, &shares)
        .map_err(to_py)?
        .into())
}

/// Refuses (ShardingError) a group whose processes use the sampler ranks `ranks` (in
/// process order) unless each of `0..num_replicas` appears equally often.
#[pyfunction]
pub fn check_rank_layout(ranks: Vec<u64>, num_replicas: u64) -> PyResult<()> {
    permshard_core::check_rank_layout(&ranks, num_replicas).map_err(to_py)
}
