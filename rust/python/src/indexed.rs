//! `_core.check_sequence_layout` / `_core.check_document_indices`: a Megatron `.idx`'s
//! arrays, checked over their bytes (numpy uint8 views of the memmap, GIL released).

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;

use crate::convert::compute;
use crate::errors::to_py;

/// The byte where the last sequence ends, or ValueError naming the first bad sequence.
#[pyfunction]
pub fn check_sequence_layout(
    py: Python<'_>,
    lengths: PyReadonlyArray1<'_, u8>,
    pointers: PyReadonlyArray1<'_, u8>,
    itemsize: u64,
) -> PyResult<u64> {
    let (lengths, pointers) = (lengths.as_slice()?, pointers.as_slice()?);
    compute(py, lengths.len() as u64, || {
        permshard_core::check_sequence_layout(lengths, pointers, itemsize)
    })
    .map_err(to_py)
}

/// ValueError unless the document indices run from 0 to `sequences`, never decreasing.
#[pyfunction]
pub fn check_document_indices(
    py: Python<'_>,
    indices: PyReadonlyArray1<'_, u8>,
    sequences: u64,
) -> PyResult<()> {
    let indices = indices.as_slice()?;
    compute(py, indices.len() as u64, || {
        permshard_core::check_document_indices(indices, sequences)
    })
    .map_err(to_py)
}
