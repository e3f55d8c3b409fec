//! `_core.BlockPermutation`: block-v1 or block-v2 over `[0, n)`.

use numpy::PyArray1;
use pyo3::prelude::*;

use permshard_core::{SampleOrder, Version, BLOCK_ALGORITHMS};

use crate::convert::{int64_array, take_order};
use crate::errors::to_py;

#[pyclass(frozen, module = "permshard._core", name = "BlockPermutation")]
pub struct BlockPermutation {
    inner: permshard_core::BlockPermutation,
}

#[pymethods]
impl BlockPermutation {
    #[new]
    #[pyo3(signature = (n, block_size, window_blocks, seed = 0, epoch = 0, algorithm = "block-v2"))]
    fn new(
        n: u64,
        block_size: u64,
        window_blocks: u64,
        seed: u64,
        epoch: u64,
        algorithm: &str,
    ) -> PyResult<Self> {
        let version = Version::for_family(&BLOCK_ALGORITHMS, "block", algorithm).map_err(to_py)?;
        let inner = permshard_core::BlockPermutation::of_version(
            version,
            n,
            block_size,
            window_blocks,
            seed,
            epoch,
        )
        .map_err(to_py)?;
        Ok(BlockPermutation { inner })
    }

    /// The construction's id: `block-v1` or `block-v2`.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    #[getter]
    fn n(&self) -> u64 {
        self.inner.len()
    }

    #[getter]
    fn block_size(&self) -> u64 {
        self.inner.block_size()
    }

    #[getter]
    fn window_blocks(&self) -> u64 {
        self.inner.window_blocks()
    }

    #[getter]
    fn seed(&self) -> u64 {
        self.inner.seed()
    }

    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.epoch()
    }

    fn forward(&self, position: u64) -> PyResult<u64> {
        self.inner.forward(position).map_err(to_py)
    }

    fn inverse(&self, sample: u64) -> PyResult<u64> {
        self.inner.position_of(sample).map_err(to_py)
    }

    /// Positions `[start, end)` of window `w`.
    fn window_range(&self, w: u64) -> (u64, u64) {
        self.inner.window_range(w)
    }

    /// The samples at positions `[start, stop)` as a new int64 array (n <= 2**63).
    fn take<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let values = take_order(py, &self.inner, start, stop)?;
        int64_array(py, self.inner.len(), values)
    }

    /// The samples at positions `[start, stop)` as a list of Python ints (any n).
    fn take_list(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        take_order(py, &self.inner, start, stop)
    }
}
