//! `_core.RankPass`: one rank's items of a pass, read from the core a chunk at a time (the
//! core's chunk rule: a small first chunk, doubling, never past a block-order window),
//! handed out as list iterators so that `itertools.chain.from_iterable` yields the ints at
//! C speed, and counted exactly, mid-chunk too.

use std::sync::{Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::PyList;

use permshard_core::{next_chunk, FIRST_CHUNK};

use crate::errors::to_py;
use crate::partition::Partition;

#[pyclass(frozen, module = "permshard._core", name = "RankPass")]
pub struct RankPass {
    partition: Py<Partition>,
    rank: u64,
    window_len: u64,
    /// Called with the end of each chunk before it is read (a block order's windows).
    announce: Option<Py<PyAny>>,
    /// Called with `(start, stop)` for each chunk's items instead of the partition's
    /// samples (a sampler that maps them, or tags them with the epoch).
    take: Option<Py<PyAny>>,
    /// Where the reads stand. Locked only between calls out: a state saved from another
    /// thread while a chunk is computed (the GIL released) reads the count before it.
    cursor: Mutex<Cursor>,
}

struct Cursor {
    /// Local items read into chunks so far.
    read: u64,
    /// Items of the next chunk at most.
    size: u64,
    /// The iterator over the last chunk handed out.
    current: Option<Py<PyAny>>,
}

impl RankPass {
    fn cursor(&self) -> MutexGuard<'_, Cursor> {
        // A panic cannot happen while the lock is held (no call out under it).
        self.cursor
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[pymethods]
impl RankPass {
    /// `rank`'s items `[0, num_samples)` of `partition`, in chunks; `window_len > 0` stops
    /// each chunk at the window's end, after `announce(end)`.
    #[new]
    #[pyo3(signature = (partition, rank, *, window_len = 0, announce = None, take = None))]
    fn new(
        partition: Bound<'_, Partition>,
        rank: u64,
        window_len: u64,
        announce: Option<Py<PyAny>>,
        take: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        partition
            .get()
            .inner
            .check_slice(rank, 0, 0)
            .map_err(to_py)?;
        Ok(RankPass {
            partition: partition.unbind(),
            rank,
            window_len,
            announce,
            take,
            cursor: Mutex::new(Cursor {
                read: 0,
                size: FIRST_CHUNK,
                current: None,
            }),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// An iterator over the next chunk's items (the GIL released while a large one is
    /// computed), or the end of the pass.
    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let partition = self.partition.get();
        let (start, size) = {
            let cursor = self.cursor();
            (cursor.read, cursor.size)
        };
        let end = partition
            .inner
            .chunk_end(self.rank, start, size, self.window_len)
            .map_err(to_py)?;
        if end == start {
            return Ok(None);
        }
        if let Some(announce) = &self.announce {
            announce.call1(py, (end,))?;
        }
        let items = match &self.take {
            Some(take) => take.bind(py).call1((start, end))?,
            None => PyList::new(py, partition.fill(py, self.rank, start, end)?)?.into_any(),
        };
        let chunk = items.try_iter()?.into_any().unbind();
        let mut cursor = self.cursor();
        cursor.read = end;
        cursor.size = next_chunk(size);
        cursor.current = Some(chunk.clone_ref(py));
        Ok(Some(chunk))
    }

    /// Items handed out so far: those of every chunk before the last, and of the last as
    /// far as it was iterated.
    #[getter]
    fn yielded(&self, py: Python<'_>) -> PyResult<u64> {
        let (read, current) = {
            let cursor = self.cursor();
            match &cursor.current {
                None => return Ok(0),
                Some(current) => (cursor.read, current.clone_ref(py)),
            }
        };
        // A list iterator's __length_hint__ is what it has left (the limited API has no
        // PyObject_LengthHint).
        let left: u64 = current.call_method0(py, "__length_hint__")?.extract(py)?;
        Ok(read.saturating_sub(left))
    }

    /// Whether the pass has handed out a chunk (its first item among them).
    #[getter]
    fn started(&self) -> bool {
        self.cursor().current.is_some()
    }
}
