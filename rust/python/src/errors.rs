//! Core errors as Python exceptions: a failed proof is `ShardingError` (a `ValueError`),
//! every refused argument a `ValueError`.

use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::PyErr;

create_exception!(
    permshard,
    ShardingError,
    PyValueError,
    "Raised when sharding is proven wrong: a sample missing or repeated, ranks that disagree."
);

pub fn to_py(err: permshard_core::Error) -> PyErr {
    if err.is_violation() {
        ShardingError::new_err(err.to_string())
    } else {
        PyValueError::new_err(err.to_string())
    }
}
