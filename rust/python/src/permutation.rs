//! `_core.Permutation`: perm-v1 over `[0, n)`.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;

use crate::errors::to_py;

/// Below this many items, computing is cheaper than releasing and retaking the GIL.
const DETACH_MIN: u64 = 4096;

/// Runs `work` on `items` items, with the GIL released when there are enough of them.
pub fn compute<T: Send>(py: Python<'_>, items: u64, work: impl FnOnce() -> T + Send) -> T {
    if items >= DETACH_MIN {
        py.detach(work)
    } else {
        work()
    }
}

#[pyclass(frozen, module = "permshard._core", name = "Permutation")]
pub struct Permutation {
    inner: permshard_core::Permutation,
}

#[pymethods]
impl Permutation {
    #[new]
    #[pyo3(signature = (n, seed = 0, epoch = 0))]
    fn new(n: u64, seed: u64, epoch: u64) -> PyResult<Self> {
        let inner = permshard_core::Permutation::new(n, seed, epoch).map_err(to_py)?;
        Ok(Permutation { inner })
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
        check_int64(self.inner.len())?;
        Ok(int64_array(py, self.fill(py, start, stop)?))
    }

    /// π(start), ..., π(stop - 1) as a list of Python ints (any n).
    fn take_list(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        self.fill(py, start, stop)
    }
}

impl Permutation {
    fn fill(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<Vec<u64>> {
        if stop < start || stop > self.inner.len() {
            return Err(PyValueError::new_err(format!(
                "invalid range [{start}, {stop}): expected 0 <= start <= stop <= {}",
                self.inner.len()
            )));
        }
        let mut out = alloc(stop - start)?;
        compute(py, stop - start, || {
            self.inner.fill(start, &mut out).map(|_| out)
        })
        .map_err(to_py)
    }
}

/// `take()` returns int64: refuses orders whose samples may not fit.
pub fn check_int64(n: u64) -> PyResult<()> {
    if n > 1 << 63 {
        return Err(PyValueError::new_err(format!(
            "take() returns int64, which cannot hold samples of n={n} > 2**63; \
             index the permutation or iterate it instead"
        )));
    }
    Ok(())
}

/// Samples of an order of at most 2**63 items as a new int64 array (the cast is exact).
pub fn int64_array(py: Python<'_>, values: Vec<u64>) -> Bound<'_, PyArray1<i64>> {
    let values: Vec<i64> = values.into_iter().map(|v| v as i64).collect();
    values.into_pyarray(py)
}

/// A zeroed buffer of `len` items, or `MemoryError` (never an abort) when it cannot be had.
pub fn alloc(len: u64) -> PyResult<Vec<u64>> {
    let fail = || PyMemoryError::new_err(format!("cannot allocate {len} indices; ask for fewer"));
    let len = usize::try_from(len).map_err(|_| fail())?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| fail())?;
    out.resize(len, 0);
    Ok(out)
}
