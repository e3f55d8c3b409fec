//! `_core.gather_records` / `_core.gather_windows`: a batch out of memory-mapped files
//! (numpy uint8 views of the maps) into the batch's own buffer, GIL released.

use numpy::{PyReadonlyArray1, PyReadwriteArray1};
use pyo3::prelude::*;

use permshard_core::{TokenType, WindowLayout};

use crate::errors::to_py;

/// Output bytes below which the GIL is kept: releasing it costs more than the copy.
const DETACH_MIN_BYTES: usize = 1 << 14;

fn run(py: Python<'_>, bytes: usize, work: impl FnOnce() -> PyResult<()> + Send) -> PyResult<()> {
    if bytes >= DETACH_MIN_BYTES {
        py.detach(work)
    } else {
        work()
    }
}

/// `out` (bytes) = the records `indices` of `source`, `record_bytes` each.
#[pyfunction]
#[pyo3(signature = (source, record_bytes, indices, out, threads = 0))]
pub fn gather_records(
    py: Python<'_>,
    source: PyReadonlyArray1<'_, u8>,
    record_bytes: usize,
    indices: PyReadonlyArray1<'_, i64>,
    mut out: PyReadwriteArray1<'_, u8>,
    threads: usize,
) -> PyResult<()> {
    let (source, indices, out) = (source.as_slice()?, indices.as_slice()?, out.as_slice_mut()?);
    run(py, out.len(), || {
        permshard_core::gather_records(source, record_bytes, indices, out, threads).map_err(to_py)
    })
}

/// `out` (int64 rows of `width`) = the windows `indices` of the files, cast from their
/// tokens (`token_bytes` wide, `signed`, `big_endian`).
#[pyfunction]
#[pyo3(signature = (files, token_bytes, signed, big_endian, starts, bases, shift, stride, indices, out, threads = 0))]
#[allow(clippy::too_many_arguments)]
pub fn gather_windows(
    py: Python<'_>,
    files: Vec<PyReadonlyArray1<'_, u8>>,
    token_bytes: usize,
    signed: bool,
    big_endian: bool,
    starts: PyReadonlyArray1<'_, u64>,
    bases: PyReadonlyArray1<'_, u64>,
    shift: u64,
    stride: u64,
    indices: PyReadonlyArray1<'_, i64>,
    mut out: PyReadwriteArray1<'_, i64>,
    threads: usize,
) -> PyResult<()> {
    let token = TokenType::new(token_bytes, signed, big_endian).map_err(to_py)?;
    let files: Vec<&[u8]> = files
        .iter()
        .map(|f| f.as_slice())
        .collect::<Result<_, _>>()?;
    let (indices, out) = (indices.as_slice()?, out.as_slice_mut()?);
    let width = match indices.len() {
        0 => 1,
        k => out.len() / k,
    };
    let layout = WindowLayout {
        starts: starts.as_slice()?,
        bases: bases.as_slice()?,
        shift,
        stride,
        width,
    };
    run(py, out.len() * 8, || {
        permshard_core::gather_windows(&files, token, layout, indices, out, threads).map_err(to_py)
    })
}
