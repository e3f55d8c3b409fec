//! Conversions shared by the classes: buffers, int64 arrays, the GIL around heavy work,
//! and the `take(start, stop)` of any order.

use numpy::{IntoPyArray, PyArray1};
use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;

use permshard_core::{range_len, EpochSpec, SampleOrder, Version};

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

/// A zeroed buffer of `len` items, or `MemoryError` (never an abort) when it cannot be had.
pub fn alloc(len: u64) -> PyResult<Vec<u64>> {
    let fail = || PyMemoryError::new_err(format!("cannot allocate {len} indices; ask for fewer"));
    let len = usize::try_from(len).map_err(|_| fail())?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| fail())?;
    out.resize(len, 0);
    Ok(out)
}

/// Values of a domain of `n` items as a new int64 array; refuses domains whose values
/// may not fit (the cast is then exact).
pub fn int64_array(py: Python<'_>, n: u64, values: Vec<u64>) -> PyResult<Bound<'_, PyArray1<i64>>> {
    if n > 1 << 63 {
        return Err(PyValueError::new_err(format!(
            "int64 cannot hold the values of n={n} > 2**63; use the list-returning \
             variant (take_list) or index instead"
        )));
    }
    let values: Vec<i64> = values.into_iter().map(|v| v as i64).collect();
    Ok(values.into_pyarray(py))
}

/// The samples of `order` at positions `[start, stop)`.
pub fn take_order(
    py: Python<'_>,
    order: &dyn SampleOrder,
    start: u64,
    stop: u64,
) -> PyResult<Vec<u64>> {
    let len = range_len(start, stop, order.len()).map_err(to_py)?;
    let mut out = alloc(len)?;
    compute(py, len, || order.fill(start, &mut out).map(|_| out)).map_err(to_py)
}

/// An int64 array's values as `u64`, or ValueError naming `what` when one is negative.
pub fn non_negative(values: &[i64], what: &str) -> PyResult<Vec<u64>> {
    // The check first, in one branch-free pass (vectorised), then the copy.
    if values.iter().fold(0, |any, &v| any | v) < 0 {
        let v = values.iter().find(|&&v| v < 0).expect("a negative value");
        return Err(PyValueError::new_err(format!(
            "{what} must be >= 0, got {v}"
        )));
    }
    Ok(values.iter().map(|&v| v as u64).collect())
}

/// The field `name` of a configuration object, converted (TypeError or ValueError naming
/// it otherwise).
pub fn field<'py, T: FromPyObjectOwned<'py>>(
    config: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<T> {
    config.getattr(name)?.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        PyValueError::new_err(format!("the configuration's {name} is not valid here: {e}"))
    })
}

/// The fields every epoch has, read from the attributes of `config` (a `ShardConfig` or a
/// `BudgetConfig`): checked by the core.
pub fn epoch_spec(config: &Bound<'_, PyAny>) -> PyResult<EpochSpec> {
    let permutation = Version::named(&field::<String>(config, "permutation")?).map_err(to_py)?;
    EpochSpec {
        n: field(config, "n")?,
        num_replicas: field(config, "num_replicas")?,
        seed: field(config, "seed")?,
        epoch: field(config, "epoch")?,
        shuffle: field(config, "shuffle")?,
        drop_last: field(config, "drop_last")?,
        permutation,
    }
    .checked()
    .map_err(to_py)
}
