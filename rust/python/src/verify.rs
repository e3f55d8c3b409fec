//! The proofs of a partition (the whole pass by the bitmap or the inverse, a rank's share
//! by the inverse, the judgement of every rank's share, the coverage fingerprint's), their
//! shares, their `Verdict` and their progress counter: `_core.Partition`'s proof methods
//! call these.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use permshard_core::{CoverageShare, Failure, Share, Verdict, OUTSIDE};

use crate::errors::to_py;

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

/// The counter of `progress`, or one nobody reads.
pub fn counter(progress: Option<&Progress>) -> Arc<AtomicU64> {
    progress.map_or_else(|| Arc::new(AtomicU64::new(0)), |p| p.done.clone())
}

/// The exact proof of the whole of `part` on `threads` threads, GIL released: by the
/// inverse (`"inverse"`, O(1) memory) or the bitmap (`"bitmap"`, `n / 8` bytes); the
/// verdict, or ShardingError.
pub fn prove_whole(
    py: Python<'_>,
    part: &permshard_core::Partition,
    method: &str,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<PyVerdict> {
    let prove = match method {
        "inverse" => permshard_core::verify_inverse,
        "bitmap" => permshard_core::verify,
        _ => {
            return Err(PyValueError::new_err(format!(
                "method must be 'inverse' or 'bitmap', got '{method}'"
            )))
        }
    };
    let counter = counter(progress);
    Ok(py
        .detach(|| prove(part, threads, &counter))
        .map_err(to_py)?
        .into())
}

/// Rank `rank`'s stream of `part` proven, with its slice of the positions outside the
/// pass, inverted by `order` (the one the ranks agreed on; a stream on another order
/// fails); failures are counted, not raised.
pub fn prove_rank(
    py: Python<'_>,
    part: &permshard_core::Partition,
    order: &permshard_core::Order,
    rank: u64,
    threads: usize,
    progress: Option<&Progress>,
) -> PyResult<PyShare> {
    let counter = counter(progress);
    let share = py
        .detach(|| permshard_core::prove_against(part, order, rank..rank + 1, threads, &counter))
        .map_err(to_py)?;
    Ok(PyShare { inner: share })
}

/// Every rank's share of `part`'s exact proof, as the words ranks exchange, added up and
/// judged in the core: the verdict, or ShardingError with the earliest counter-example.
pub fn judge_rows(part: &permshard_core::Partition, rows: &[Vec<u64>]) -> PyResult<PyVerdict> {
    let mut total = Share::default();
    for words in rows {
        total = total.merge(&Share::from_words(words).map_err(to_py)?);
    }
    Ok(permshard_core::judge(part, &total).map_err(to_py)?.into())
}

/// Every rank's coverage share of `part`, as words, in rank order, judged in the core.
pub fn judge_coverage_rows(
    part: &permshard_core::Partition,
    rows: &[Vec<u64>],
) -> PyResult<PyVerdict> {
    let shares = (rows.iter().map(|w| CoverageShare::from_words(w)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(to_py)?;
    Ok(permshard_core::judge_coverage(part, &shares)
        .map_err(to_py)?
        .into())
}

/// Refuses (ShardingError) a group whose processes use the sampler ranks `ranks` (in
/// process order) unless each of `0..num_replicas` appears equally often.
#[pyfunction]
pub fn check_rank_layout(ranks: Vec<u64>, num_replicas: u64) -> PyResult<()> {
    permshard_core::check_rank_layout(&ranks, num_replicas).map_err(to_py)
}
