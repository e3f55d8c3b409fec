//! `_core.gather_records` / `_core.gather_windows`: a batch out of memory-mapped files
//! (numpy uint8 views of the maps) into the batch's own buffer, GIL released.

use std::sync::{Arc, Mutex};

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use permshard_core::{Batch, RecordsAhead, Source, TokenType, WindowLayout};

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

/// A read-only numpy array of bytes (a memory map), kept alive for the thread that
/// gathers ahead.
struct Mapped {
    _owner: Py<PyAny>,
    start: *const u8,
    len: usize,
}

// SAFETY: the bytes belong to `_owner`, which lives as long as this value, and are never
// written: `RecordsAhead::new` takes only arrays that numpy refuses to write through.
unsafe impl Send for Mapped {}
// SAFETY: as above; every thread only reads.
unsafe impl Sync for Mapped {}

impl Source for Mapped {
    fn bytes(&self) -> &[u8] {
        // SAFETY: `start..start + len` is the array's contiguous, live, unwritten buffer.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }
}

/// A new numpy array of bytes that the gathering thread fills, seen by nothing else until
/// `take` returns it.
struct Fresh {
    array: Py<PyArray1<u8>>,
    start: *mut u8,
    len: usize,
}

// SAFETY: the array was made for this batch and is reachable only through this value
// until the gather is over: one thread at a time writes it.
unsafe impl Send for Fresh {}

impl Batch for Fresh {
    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: the array's own contiguous buffer of `len` bytes, alive with `array`.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

/// `_core.RecordsAhead(source, record_bytes)`: batches of records gathered ahead on a
/// thread of their own (`start(indices, threads)`), fetched with `take(indices)`: a
/// new uint8 array of the batch's bytes, or `None` when these indices were not gathered
/// ahead.
#[pyclass(frozen, module = "permshard._core", name = "RecordsAhead")]
pub struct PyRecordsAhead {
    ahead: Mutex<RecordsAhead<Fresh>>,
    record_bytes: usize,
}

#[pymethods]
impl PyRecordsAhead {
    #[new]
    fn new(source: PyReadonlyArray1<'_, u8>, record_bytes: usize) -> PyResult<Self> {
        let writeable: bool = source.getattr("flags")?.getattr("writeable")?.extract()?;
        if writeable {
            return Err(PyValueError::new_err(
                "a source to gather ahead from must be read-only (a memmap opened with mode='r')",
            ));
        }
        let bytes = source.as_slice()?;
        let mapped = Mapped {
            start: bytes.as_ptr(),
            len: bytes.len(),
            _owner: source.as_any().clone().unbind(),
        };
        let ahead = RecordsAhead::new(Arc::new(mapped), record_bytes).map_err(to_py)?;
        Ok(PyRecordsAhead {
            ahead: Mutex::new(ahead),
            record_bytes,
        })
    }

    #[pyo3(signature = (indices, threads = 0))]
    fn start(
        &self,
        py: Python<'_>,
        indices: PyReadonlyArray1<'_, i64>,
        threads: usize,
    ) -> PyResult<bool> {
        let indices = indices.as_slice()?;
        let len = indices.len() * self.record_bytes;
        Ok(self.lock().start(indices, threads, || {
            // SAFETY: uninitialised bytes, written whole by the gather before anyone reads.
            let array = unsafe { PyArray1::<u8>::new(py, len, false) };
            Fresh {
                start: array.data(),
                len,
                array: array.unbind(),
            }
        }))
    }

    fn take<'py>(
        &self,
        py: Python<'py>,
        indices: PyReadonlyArray1<'py, i64>,
    ) -> PyResult<Option<Bound<'py, PyArray1<u8>>>> {
        let indices = indices.as_slice()?;
        match py.detach(|| self.lock().take(indices)) {
            None => Ok(None),
            Some(batch) => Ok(Some(batch.map_err(to_py)?.array.into_bound(py))),
        }
    }
}

impl PyRecordsAhead {
    fn lock(&self) -> std::sync::MutexGuard<'_, RecordsAhead<Fresh>> {
        self.ahead.lock().unwrap_or_else(|e| e.into_inner())
    }
}
