//! `_core.Partition`: one epoch's split across ranks.

use numpy::PyArray1;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use permshard_core::{range_len, CoverageShare};

use crate::convert::{alloc, compute, int64_array};
use crate::errors::to_py;
use crate::verify::{self, Progress, PyCoverageShare, PyShare, PyVerdict};

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

    /// Items per rank in this pass, rank by rank.
    #[getter]
    fn lengths(&self) -> Vec<u64> {
        self.inner.lengths()
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

    /// The dealing's name (`round-robin`, `step`).
    #[getter]
    fn dealing(&self) -> &'static str {
        self.inner.dealing().name()
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

    /// `rank`'s items `[start, stop)` (local positions) as a new int64 array.
    fn take<'py>(
        &self,
        py: Python<'py>,
        rank: u64,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let values = self.fill(py, rank, start, stop)?;
        int64_array(py, self.inner.n(), values)
    }

    /// As `take`, as a list of Python ints.
    fn take_list(&self, py: Python<'_>, rank: u64, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        self.fill(py, rank, start, stop)
    }

    /// The samples at global positions `[start, stop)` of the pass (a contiguous block,
    /// padding wrapped around), as a new int64 array.
    fn take_positions<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let values = self.fill_positions(py, start, stop)?;
        int64_array(py, self.inner.n(), values)
    }

    /// As `take_positions`, as a list of Python ints.
    fn take_positions_list(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        self.fill_positions(py, start, stop)
    }

    /// Items per batch of the pass's dealing (`1` for an item sampler).
    #[getter]
    fn batch_len(&self) -> u64 {
        self.inner.batch_len()
    }

    /// Whole batches a batch sampler reads in one call.
    #[getter]
    fn batches_per_call(&self) -> u64 {
        self.inner.batches_per_call()
    }

    /// Batches every rank yields.
    #[getter]
    fn num_batches(&self) -> u64 {
        self.inner.num_batches()
    }

    /// The local items `(lo, hi)` of every rank's batch `step`.
    fn batch_bounds(&self, step: u64) -> PyResult<(u64, u64)> {
        self.inner.batch_bounds(step).map_err(to_py)
    }

    /// `(step, item)`: the batch of local item `local` and its place in it.
    fn batch_of(&self, local: u64) -> PyResult<(u64, u64)> {
        self.inner.batch_of(local).map_err(to_py)
    }

    /// Global positions consumed once every rank took its first `steps` batches.
    fn consumed_after_batches(&self, steps: u64) -> u64 {
        self.inner.consumed_after_batches(steps)
    }

    /// Items rank `rank`'s share of the exact proof checks.
    fn share_len(&self, rank: u64) -> PyResult<u64> {
        self.inner.share_len(rank).map_err(to_py)
    }

    /// Global positions of the epoch consumed once every rank took its first `items` items.
    fn consumed_after(&self, items: u64) -> PyResult<u64> {
        self.inner.consumed_after(items).map_err(to_py)
    }

    /// One past the last local item of `rank` in the window (of `window_len` positions)
    /// of its item `local`.
    fn window_end(&self, rank: u64, local: u64, window_len: u64) -> PyResult<u64> {
        self.inner
            .window_end(rank, local, window_len)
            .map_err(to_py)
    }

    /// `rank`'s batches `[first, last)`, one new int64 array each (one fill for all).
    fn take_batches<'py>(
        &self,
        py: Python<'py>,
        rank: u64,
        first: u64,
        last: u64,
    ) -> PyResult<Vec<Bound<'py, PyArray1<i64>>>> {
        let (offsets, items) = self.fill_batches(py, rank, first, last)?;
        let lo = offsets[0];
        offsets
            .windows(2)
            .map(|w| {
                let batch = items[(w[0] - lo) as usize..(w[1] - lo) as usize].to_vec();
                int64_array(py, self.inner.n(), batch)
            })
            .collect()
    }

    /// As `take_batches`, each batch a list of Python ints.
    fn take_batches_list(
        &self,
        py: Python<'_>,
        rank: u64,
        first: u64,
        last: u64,
    ) -> PyResult<Vec<Vec<u64>>> {
        let (offsets, items) = self.fill_batches(py, rank, first, last)?;
        let lo = offsets[0];
        Ok(offsets
            .windows(2)
            .map(|w| items[(w[0] - lo) as usize..(w[1] - lo) as usize].to_vec())
            .collect())
    }

    /// Every `(rank, local_position)` that yields `sample`.
    fn locate(&self, sample: u64) -> PyResult<Vec<(u64, u64)>> {
        self.inner.locate(sample).map_err(to_py)
    }

    /// Refuses (ValueError) a method that is not a proof of partitions: `"inverse"`,
    /// `"bitmap"` (exact) or `"fingerprint"` (the distributed coverage proof).
    fn check_method(&self, method: &str) -> PyResult<()> {
        match method {
            "inverse" | "bitmap" | "fingerprint" => Ok(()),
            _ => Err(PyValueError::new_err(format!(
                "method must be 'inverse' or 'bitmap' ('fingerprint' distributed), got '{method}'"
            ))),
        }
    }

    /// The exact proof of the whole pass (`"inverse"`: O(1) memory; `"bitmap"`: `n / 8`
    /// bytes) on `threads` threads (`0`: all cores), GIL released, advancing `progress`:
    /// the verdict, or ShardingError.
    #[pyo3(signature = (method = "inverse", threads = 0, progress = None))]
    fn verify(
        &self,
        py: Python<'_>,
        method: &str,
        threads: usize,
        progress: Option<&Progress>,
    ) -> PyResult<PyVerdict> {
        verify::prove_whole(py, &self.inner, method, threads, progress)
    }

    /// Rank `rank`'s share of the exact proof (its stream and its slice of the positions
    /// outside the pass), inverted by `reference`'s order (the pass as the configuration
    /// every rank agreed on deals it) or this pass's own; failures are counted.
    #[pyo3(signature = (rank, threads = 0, progress = None, reference = None))]
    fn prove_share(
        &self,
        py: Python<'_>,
        rank: u64,
        threads: usize,
        progress: Option<&Progress>,
        reference: Option<&Partition>,
    ) -> PyResult<PyShare> {
        let order = reference.map_or(self.inner.order(), |r| r.inner.order());
        verify::prove_rank(py, &self.inner, order, rank, threads, progress)
    }

    /// Judges every rank's share (the words of `prove_share(...).words()`, in rank order),
    /// added up in the core: the verdict, or ShardingError with the earliest
    /// counter-example.
    fn judge(&self, rows: Vec<Vec<u64>>) -> PyResult<PyVerdict> {
        verify::judge_rows(&self.inner, &rows)
    }

    /// Judges one rank's share alone: the verdict, or ShardingError with its first
    /// counter-example (the pass is proven once every rank's share is).
    fn judge_alone(&self, share: &PyShare) -> PyResult<PyVerdict> {
        Ok(permshard_core::judge_alone(&self.inner, &share.inner)
            .map_err(to_py)?
            .into())
    }

    /// Rank `rank`'s share of the distributed coverage proof (GIL released).
    fn coverage_share(&self, py: Python<'_>, rank: u64) -> PyResult<PyCoverageShare> {
        let inner = py
            .detach(|| CoverageShare::of_rank(&self.inner, rank))
            .map_err(to_py)?;
        Ok(PyCoverageShare { inner })
    }

    /// Judges every rank's coverage share (the words of `coverage_share(...).words()`, in
    /// rank order) in the core: the verdict, or ShardingError.
    fn judge_coverage(&self, rows: Vec<Vec<u64>>) -> PyResult<PyVerdict> {
        verify::judge_coverage_rows(&self.inner, &rows)
    }
}

impl Partition {
    fn fill_positions(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        let count = range_len(start, stop, self.inner.end()).map_err(to_py)?;
        let mut out = alloc(count)?;
        compute(py, count, || {
            self.inner.fill_positions(start, &mut out).map(|_| out)
        })
        .map_err(to_py)
    }

    /// The batch offsets of batches `[first, last)` and the items they span.
    fn fill_batches(
        &self,
        py: Python<'_>,
        rank: u64,
        first: u64,
        last: u64,
    ) -> PyResult<(Vec<u64>, Vec<u64>)> {
        let offsets = self.inner.batch_offsets(first, last).map_err(to_py)?;
        let items = self.fill(py, rank, offsets[0], offsets[offsets.len() - 1])?;
        Ok((offsets, items))
    }

    pub fn fill(&self, py: Python<'_>, rank: u64, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        let count = range_len(start, stop, self.inner.num_samples()).map_err(to_py)?;
        let mut out = alloc(count)?;
        compute(py, count, || {
            self.inner.fill_rank(rank, start, &mut out).map(|_| out)
        })
        .map_err(to_py)
    }
}
