//! `_core.Run`: a run's history, where a sample was read, what a step read, the audit.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use permshard_core::ROW;

use crate::errors::to_py;
use crate::sharding::Sharding;
use crate::state::{from_mapping, to_dict};

#[pyclass(module = "permshard._core", name = "Run")]
pub struct Run {
    inner: permshard_core::Run,
}

/// One read of a sample: `(epoch, step, rank, position, sample, padding)`.
#[pyclass(frozen, get_all, module = "permshard._core", name = "Read")]
pub struct Read {
    epoch: u64,
    step: Option<u64>,
    rank: u64,
    position: u64,
    sample: u64,
    padding: bool,
}

impl From<permshard_core::Audit> for Audit {
    fn from(a: permshard_core::Audit) -> Self {
        Audit {
            epochs: a.epochs,
            segments: a.segments,
            begins: a.begins,
            reads: a.reads,
            recounted: a.recounted,
        }
    }
}

impl From<&permshard_core::Read> for Read {
    fn from(r: &permshard_core::Read) -> Self {
        Read {
            epoch: r.epoch,
            step: r.step,
            rank: r.rank,
            position: r.position,
            sample: r.sample,
            padding: r.padding,
        }
    }
}

#[pymethods]
impl Read {
    fn __repr__(&self) -> String {
        let step = self.step.map_or("None".into(), |s| s.to_string());
        format!(
            "Read(epoch={}, step={step}, rank={}, position={}, sample={}, padding={})",
            self.epoch,
            self.rank,
            self.position,
            self.sample,
            if self.padding { "True" } else { "False" }
        )
    }
}

/// What an audit proved.
#[pyclass(frozen, get_all, module = "permshard._core", name = "Audit")]
pub struct Audit {
    epochs: Vec<u64>,
    segments: usize,
    begins: (u64, u64),
    reads: u128,
    recounted: bool,
}

#[pymethods]
impl Run {
    /// A run of `sharding`'s order with no history yet.
    #[new]
    fn new(sharding: &Sharding) -> Self {
        Run {
            inner: permshard_core::Run::new(sharding.inner.clone()),
        }
    }

    /// The run a state dict holds, checked; its resume point is `consumed`.
    #[staticmethod]
    fn from_state(state: &Bound<'_, PyAny>, strict: bool) -> PyResult<Run> {
        let (inner, _) =
            permshard_core::Run::from_state(&from_mapping(state)?, strict).map_err(to_py)?;
        Ok(Run { inner })
    }

    /// A pass of `sharding` from `start`; the open segment closes at `previous_stop`.
    #[pyo3(signature = (sharding, start, previous_stop = None))]
    fn begin(
        &mut self,
        sharding: &Sharding,
        start: u64,
        previous_stop: Option<u64>,
    ) -> PyResult<()> {
        self.inner
            .begin(&sharding.inner, start, previous_stop)
            .map_err(to_py)
    }

    /// A copy for pickle: the run's fields, exclusion log, rows, whether it is open and
    /// where the next pass starts, by name.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let run = slf.borrow();
        let (base, log, rows, open) = run.inner.parts();
        let parts = PyDict::new(py);
        parts.set_item("base", to_dict(py, base.state(0))?)?;
        parts.set_item("log", log.to_vec())?;
        parts.set_item("rows", rows)?;
        parts.set_item("open", open)?;
        parts.set_item("resume", run.inner.resume_point())?;
        Ok((
            slf.getattr("_restore")?,
            (parts,).into_pyobject(py)?.into_any(),
        ))
    }

    /// The run of `__reduce__`'s parts.
    #[staticmethod]
    fn _restore(parts: &Bound<'_, PyDict>) -> PyResult<Run> {
        let item = |key: &str| {
            parts
                .get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("a pickled Run has no {key:?}")))
        };
        let (base, _) = permshard_core::Sharding::from_state(&from_mapping(&item("base")?)?, true)
            .map_err(to_py)?;
        let rows: Vec<Vec<i128>> = item("rows")?.extract()?;
        let mut inner = permshard_core::Run::restore(
            base,
            item("log")?.extract()?,
            &rows,
            item("open")?.extract()?,
        )
        .map_err(to_py)?;
        inner.resume_at(item("resume")?.extract()?);
        Ok(Run { inner })
    }

    /// Where the next pass starts: global positions of its epoch consumed before it.
    #[getter]
    fn resume_point(&self) -> u64 {
        self.inner.resume_point()
    }

    /// The next pass starts at `start` (`0`: from the epoch's start).
    fn resume_at(&mut self, start: u64) {
        self.inner.resume_at(start);
    }

    /// A copy with the open segment (if any) closed at `stop`: a sampler copied mid-pass
    /// (the copy has no pass to continue it).
    fn closed(&self, stop: u64) -> PyResult<Run> {
        let mut inner = self.inner.clone();
        if inner.is_open() {
            inner.close(stop).map_err(to_py)?;
        }
        Ok(Run { inner })
    }

    /// Whether a pass began the last segment.
    #[getter]
    fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    /// Samples in an epoch.
    #[getter]
    fn n(&self) -> u64 {
        self.inner.base().spec.n
    }

    /// Weight changes the state recorded.
    #[getter]
    fn weight_changes(&self) -> u64 {
        self.inner.weight_changes()
    }

    /// The state dict of `now` after `consumed`, the history's open segment at `open_stop`
    /// unless it reads `now`'s epoch.
    #[pyo3(signature = (now, consumed, open_stop = None, weight_changes = 0))]
    fn state_dict<'py>(
        &self,
        py: Python<'py>,
        now: &Sharding,
        consumed: u64,
        open_stop: Option<u64>,
        weight_changes: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let state = self
            .inner
            .state(&now.inner, consumed, open_stop, weight_changes)
            .map_err(to_py)?;
        to_dict(py, state)
    }

    /// The segments, each a dict of its integers (and the change's name).
    fn segments<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .segments()
            .iter()
            .map(|s| {
                let d = PyDict::new(py);
                for (k, v) in ROW.iter().zip(s.row()) {
                    d.set_item(*k, v)?;
                }
                d.set_item("change", s.change.name())?;
                d.set_item("dealing", s.dealing.name())?;
                d.set_item("drop_last_batch", s.dealing.drop_last())?;
                Ok(d)
            })
            .collect()
    }

    /// Every read of `sample` over the history.
    #[pyo3(signature = (sample, batch_size = 0))]
    fn where_read(&self, py: Python<'_>, sample: u64, batch_size: u64) -> PyResult<Vec<Read>> {
        let reads = py
            .detach(|| self.inner.where_read(sample, batch_size))
            .map_err(to_py)?;
        Ok(reads.iter().map(Read::from).collect())
    }

    /// What every rank read at `step`.
    #[pyo3(signature = (step, batch_size = 0))]
    fn show(&self, py: Python<'_>, step: u64, batch_size: u64) -> PyResult<Vec<Read>> {
        let reads = py
            .detach(|| self.inner.show(step, batch_size))
            .map_err(to_py)?;
        Ok(reads.iter().map(Read::from).collect())
    }

    /// The exactly-once audit (`ShardingError` naming the first sample read twice or never).
    #[pyo3(signature = (recount = true, threads = 0))]
    fn audit(&self, py: Python<'_>, recount: bool, threads: usize) -> PyResult<Audit> {
        let a = py
            .detach(|| self.inner.audit(recount, threads))
            .map_err(to_py)?;
        Ok(Audit::from(a))
    }
}
