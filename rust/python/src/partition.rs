//! `_core.Partition`: one epoch's split across ranks.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use permshard_core::Fingerprint;

use crate::errors::to_py;
use crate::permutation::{alloc, compute};

/// The four columns of a fingerprint, as Python receives them.
pub type FingerprintTuple = (u64, u64, u64, u64);

/// A coverage share, as Python receives it.
pub type CoverageTuple = (
    FingerprintTuple,
    FingerprintTuple,
    FingerprintTuple,
    FingerprintTuple,
    FingerprintTuple,
);

pub fn fingerprint_tuple(f: &Fingerprint) -> FingerprintTuple {
    (f.count, f.sum, f.hash_sum, f.xor)
}

#[pyclass(frozen, module = "permshard._core", name = "Partition")]
pub struct Partition {
    pub inner: permshard_core::Partition,
}

#[pymethods]
impl Partition {
    #[getter]
    fn n(&self) -> u64 {
        self.inner.n()
    }

    #[getter]
    fn num_replicas(&self) -> u64 {
        self.inner.num_replicas()
    }

    #[getter]
    fn start(&self) -> u64 {
        self.inner.start()
    }

    #[getter]
    fn num_samples(&self) -> u64 {
        self.inner.num_samples()
    }

    #[getter]
    fn total_size(&self) -> u64 {
        self.inner.total_size()
    }

    #[getter]
    fn end(&self) -> u64 {
        self.inner.end()
    }

    #[getter]
    fn padding(&self) -> u64 {
        self.inner.padding()
    }

    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped()
    }

    /// The order's algorithm id (`perm-v1`, `identity`).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.order().algorithm()
    }

    /// The local index of `rank`'s first padding item (`num_samples` when none).
    fn first_padding(&self, rank: u64) -> PyResult<u64> {
        self.inner.first_padding(rank).map_err(to_py)
    }

    /// How many of `rank`'s items are padding.
    fn padding_of(&self, rank: u64) -> PyResult<u64> {
        self.inner.padding_of(rank).map_err(to_py)
    }

    /// The sample at global position `position` (padding wraps around).
    fn sample_at(&self, position: u64) -> PyResult<u64> {
        self.inner.checked_sample_at(position).map_err(to_py)
    }

    /// Items `[local_start, local_start + count)` of `rank` as a list of Python ints.
    fn take(&self, py: Python<'_>, rank: u64, local_start: u64, count: u64) -> PyResult<Vec<u64>> {
        self.fill(py, rank, local_start, count)
    }

    /// As `take`, as a new int64 array.
    fn take_array<'py>(
        &self,
        py: Python<'py>,
        rank: u64,
        local_start: u64,
        count: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        if self.inner.n() > 1 << 63 {
            return Err(PyValueError::new_err(
                "int64 cannot hold samples of n > 2**63",
            ));
        }
        let values = self.fill(py, rank, local_start, count)?;
        let values: Vec<i64> = values.into_iter().map(|v| v as i64).collect();
        Ok(values.into_pyarray(py))
    }

    /// Samples at global positions `[first, first + count)` (a contiguous block).
    fn take_positions(&self, py: Python<'_>, first: u64, count: u64) -> PyResult<Vec<u64>> {
        self.inner.check_positions(first, count).map_err(to_py)?;
        let mut out = alloc(count)?;
        compute(py, count, || {
            self.inner.fill_positions(first, &mut out).map(|_| out)
        })
        .map_err(to_py)
    }

    /// Items `[local_start, local_start + count)` of `rank`, cut into lists of
    /// `batch_size` (the last one may be shorter).
    fn take_batches(
        &self,
        py: Python<'_>,
        rank: u64,
        local_start: u64,
        count: u64,
        batch_size: u64,
    ) -> PyResult<Vec<Vec<u64>>> {
        if batch_size == 0 {
            return Err(PyValueError::new_err(
                "batch_size should be a positive integer, got 0",
            ));
        }
        let values = self.fill(py, rank, local_start, count)?;
        Ok(values
            .chunks(batch_size as usize)
            .map(<[u64]>::to_vec)
            .collect())
    }

    /// Every `(rank, local_position)` that yields `sample`.
    fn locate(&self, sample: u64) -> PyResult<Vec<(u64, u64)>> {
        self.inner.locate(sample).map_err(to_py)
    }

    /// This rank's share of the distributed coverage proof:
    /// `(yielded, padding, consumed, dropped, reference)` fingerprints.
    fn coverage_share(&self, py: Python<'_>, rank: u64) -> PyResult<CoverageTuple> {
        let share = py
            .detach(|| self.inner.coverage_share(rank))
            .map_err(to_py)?;
        Ok((
            fingerprint_tuple(&share.yielded),
            fingerprint_tuple(&share.padding),
            fingerprint_tuple(&share.consumed),
            fingerprint_tuple(&share.dropped),
            fingerprint_tuple(&share.reference),
        ))
    }
}

impl Partition {
    fn fill(&self, py: Python<'_>, rank: u64, local_start: u64, count: u64) -> PyResult<Vec<u64>> {
        self.inner
            .check_slice(rank, local_start, count)
            .map_err(to_py)?;
        let mut out = alloc(count)?;
        compute(py, count, || {
            self.inner
                .fill_rank(rank, local_start, &mut out)
                .map(|_| out)
        })
        .map_err(to_py)
    }
}
