//! `_core.Permutation`: perm-v1 or perm-v2 over `[0, n)`; `simd_level()`.

use numpy::PyArray1;
use pyo3::prelude::*;

use permshard_core::Version;

use crate::convert::{int64_array, take_order};
use crate::errors::to_py;

#[pyclass(frozen, module = "permshard._core", name = "Permutation")]
pub struct Permutation {
    inner: permshard_core::Permutation,
}

#[pymethods]
impl Permutation {
    #[new]
    #[pyo3(signature = (n, seed = 0, epoch = 0, algorithm = "perm-v2"))]
    fn new(n: u64, seed: u64, epoch: u64, algorithm: &str) -> PyResult<Self> {
        let version = Version::named(algorithm).map_err(to_py)?;
        let inner =
            permshard_core::Permutation::of_version(version, n, seed, epoch, 0).map_err(to_py)?;
        Ok(Permutation { inner })
    }

    /// The construction's id: `perm-v1` or `perm-v2`.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.version().algorithm()
    }

    #[getter]
    fn n(&self) -> u64 {
        self.inner.len()
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
        self.inner.inverse(sample).map_err(to_py)
    }

    /// π(start), ..., π(stop - 1) as a new int64 array (n <= 2**63).
    fn take<'py>(
        &self,
        py: Python<'py>,
        start: u64,
        stop: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let values = take_order(py, &self.inner, start, stop)?;
        int64_array(py, self.inner.len(), values)
    }

    /// π(start), ..., π(stop - 1) as a list of Python ints (any n).
    fn take_list(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        take_order(py, &self.inner, start, stop)
    }
}

/// The SIMD level the batched paths use (`PERMSHARD_SIMD`'s, or the best of this CPU);
/// ValueError naming this CPU's levels when `PERMSHARD_SIMD` names another.
#[pyfunction]
pub fn simd_level() -> PyResult<&'static str> {
    permshard_core::simd_level().map_err(to_py)
}
