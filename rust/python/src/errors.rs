//! Core errors as Python exceptions: a failed proof is `ShardingError` (a `ValueError`),
//! memory that cannot be had a `MemoryError`, an index past a sequence an `IndexError`,
//! a value of the wrong type a `TypeError`, every other refused argument a `ValueError`.

use pyo3::create_exception;
use pyo3::exceptions::{PyIndexError, PyMemoryError, PyTypeError, PyValueError};
use pyo3::PyErr;

create_exception!(
    permshard,
    ShardingError,
    PyValueError,
    "Raised when sharding is proven wrong: a sample missing or repeated, ranks that disagree."
);

pub fn to_py(err: permshard_core::Error) -> PyErr {
    match err {
        permshard_core::Error::Violation(msg) => ShardingError::new_err(msg),
        permshard_core::Error::OutOfMemory { .. } => PyMemoryError::new_err(err.to_string()),
        permshard_core::Error::IndexOutOfRange { .. } => PyIndexError::new_err(err.to_string()),
        permshard_core::Error::WrongType(msg) => PyTypeError::new_err(msg),
        other => PyValueError::new_err(other.to_string()),
    }
}
