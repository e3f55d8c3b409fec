//! `_core.Exclusions`: sample ids never to read, sorted and distinct.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use crate::convert::{compute, int64_array, non_negative};
use crate::errors::to_py;

#[pyclass(frozen, module = "permshard._core", name = "Exclusions")]
pub struct Exclusions {
    pub inner: permshard_core::Exclusions,
}

#[pymethods]
impl Exclusions {
    /// The set of `ids` (int64, any order, repeats allowed), each below `n`.
    #[new]
    fn new(py: Python<'_>, ids: PyReadonlyArray1<'_, i64>, n: u64) -> PyResult<Self> {
        let ids = non_negative(ids.as_slice()?, "an excluded sample id")?;
        let inner = compute(py, ids.len() as u64, || {
            permshard_core::Exclusions::new(ids, n)
        })
        .map_err(to_py)?;
        Ok(Exclusions { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// A 64-bit digest of the set.
    #[getter]
    fn digest(&self) -> u64 {
        self.inner.digest()
    }

    /// The ids, sorted, as a new int64 array.
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        int64_array(py, 1 << 63, self.inner.ids().to_vec())
    }

    /// Whether `sample` is excluded.
    fn __contains__(&self, sample: u64) -> bool {
        self.inner.contains(sample)
    }

    /// The first id of `earlier` this set lacks (`None`: a superset of it).
    fn first_missing(&self, earlier: &Exclusions) -> Option<u64> {
        self.inner.first_missing(&earlier.inner)
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Exclusions>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        self.inner.digest() >> 1 // Python hashes are signed
    }

    fn __repr__(&self) -> String {
        format!(
            "Exclusions({} ids, digest {:016x})",
            self.inner.len(),
            self.inner.digest()
        )
    }
}
