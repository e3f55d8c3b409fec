//! `_core.BudgetRun`: a token-budget run's history; where a sample was read, what a step
//! read and the audit, each over the run's lengths.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use permshard_core::{BudgetResume, BUDGET_ROW};

use crate::budget::{with_lengths, BudgetEpoch, PyBudgetStart};
use crate::errors::to_py;
use crate::run::{Audit, Read};
use crate::state::{from_mapping, to_dict};

#[pyclass(module = "permshard._core", name = "BudgetRun")]
pub struct BudgetRun {
    inner: permshard_core::BudgetRun,
}

/// What a run's answers need over its lengths: each segment's start, and its steps before
/// each window it read.
#[pyclass(frozen, module = "permshard._core", name = "BudgetIndex")]
pub struct BudgetIndex {
    inner: permshard_core::BudgetIndex,
}

#[pymethods]
impl BudgetRun {
    /// A run of `epoch`'s plan with no history yet.
    #[new]
    fn new(epoch: &BudgetEpoch) -> Self {
        BudgetRun {
            inner: permshard_core::BudgetRun::new(epoch.inner.clone()),
        }
    }

    /// The run a state dict holds, checked.
    #[staticmethod]
    fn from_state(state: &Bound<'_, PyAny>, strict: bool) -> PyResult<BudgetRun> {
        let inner =
            permshard_core::BudgetRun::from_state(&from_mapping(state)?, strict).map_err(to_py)?;
        Ok(BudgetRun { inner })
    }

    /// A pass of `epoch` (its epoch and ranks) from `start`; the open segment closes at
    /// `previous_done` steps.
    #[pyo3(signature = (epoch, start, previous_done = None))]
    fn begin(
        &mut self,
        epoch: &BudgetEpoch,
        start: &PyBudgetStart,
        previous_done: Option<u64>,
    ) -> PyResult<()> {
        self.inner
            .begin(&epoch.inner, &start.inner, previous_done)
            .map_err(to_py)
    }

    /// A copy with the open segment (if any) closed at `done` steps.
    fn closed(&self, done: u64) -> PyResult<BudgetRun> {
        let inner = self.inner.closed(Some(done)).map_err(to_py)?;
        Ok(BudgetRun { inner })
    }

    /// Whether a pass began the last segment.
    #[getter]
    fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    /// The state dict of `now` resumed at `start`, the open segment at `done` steps.
    #[pyo3(signature = (now, start, done = None))]
    fn state_dict<'py>(
        &self,
        py: Python<'py>,
        now: &BudgetEpoch,
        start: &PyBudgetStart,
        done: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let resume = BudgetResume {
            window_index: start.inner.window(),
            steps: start.inner.steps(),
            taken: start.inner.taken_bits(),
        };
        let state = self.inner.state(&now.inner, &resume, done).map_err(to_py)?;
        to_dict(py, state)
    }

    /// A copy for pickle: the run's fields, rows, first taken bits and whether it is open.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
        let py = slf.py();
        let run = slf.borrow();
        let (base, rows, taken, open) = run.inner.parts();
        let parts = PyDict::new(py);
        let start = BudgetResume {
            window_index: 0,
            steps: 0,
            taken: Vec::new(),
        };
        parts.set_item("base", to_dict(py, base.state(&start))?)?;
        parts.set_item("rows", rows)?;
        parts.set_item("taken", PyBytes::new(py, taken))?;
        parts.set_item("open", open)?;
        Ok((
            slf.getattr("_restore")?,
            (parts,).into_pyobject(py)?.into_any(),
        ))
    }

    /// The run of `__reduce__`'s parts.
    #[staticmethod]
    fn _restore(parts: &Bound<'_, PyDict>) -> PyResult<BudgetRun> {
        let item = |key: &str| {
            parts
                .get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("a pickled BudgetRun has no {key:?}")))
        };
        let (base, _) =
            permshard_core::BudgetEpoch::from_state(&from_mapping(&item("base")?)?, true)
                .map_err(to_py)?;
        let rows: Vec<Vec<i128>> = item("rows")?.extract()?;
        let inner = permshard_core::BudgetRun::restore(
            base,
            &rows,
            item("taken")?.extract()?,
            item("open")?.extract()?,
        )
        .map_err(to_py)?;
        Ok(BudgetRun { inner })
    }

    /// The segments, each a dict of its integers (and the change's name).
    fn segments<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .segments()
            .iter()
            .map(|s| {
                let d = PyDict::new(py);
                for (k, v) in BUDGET_ROW.iter().zip(s.row()) {
                    d.set_item(*k, v)?;
                }
                d.set_item("change", s.change.name())?;
                Ok(d)
            })
            .collect()
    }

    /// Samples in an epoch.
    #[getter]
    fn n(&self) -> u64 {
        self.inner.base().spec.n
    }

    /// What the answers need over `lengths`: every window the history read planned once,
    /// on all cores.
    fn index(&self, py: Python<'_>, lengths: &Bound<'_, PyAny>) -> PyResult<BudgetIndex> {
        let run = &self.inner;
        let inner = with_lengths!(lengths, l => py.detach(|| run.index(l, 0)).map_err(to_py))?;
        Ok(BudgetIndex { inner })
    }

    /// Every read of `sample` over the history (`index`: `index(lengths)`'s).
    fn where_read(
        &self,
        py: Python<'_>,
        lengths: &Bound<'_, PyAny>,
        index: &BudgetIndex,
        sample: u64,
    ) -> PyResult<Vec<Read>> {
        let (run, index) = (&self.inner, &index.inner);
        let reads = with_lengths!(lengths, l => py.detach(|| run.where_read(l, index, sample)).map_err(to_py))?;
        Ok(reads.iter().map(Read::from).collect())
    }

    /// What every rank read at `step` (`index`: `index(lengths)`'s).
    fn show(
        &self,
        py: Python<'_>,
        lengths: &Bound<'_, PyAny>,
        index: &BudgetIndex,
        step: u64,
    ) -> PyResult<Vec<Read>> {
        let (run, index) = (&self.inner, &index.inner);
        let reads =
            with_lengths!(lengths, l => py.detach(|| run.show(l, index, step)).map_err(to_py))?;
        Ok(reads.iter().map(Read::from).collect())
    }

    /// The exactly-once audit, every read counted (`ShardingError` naming the first
    /// sample read twice or never).
    fn audit(&self, py: Python<'_>, lengths: &Bound<'_, PyAny>) -> PyResult<Audit> {
        let run = &self.inner;
        let audit = with_lengths!(lengths, l => py.detach(|| run.audit(l)).map_err(to_py))?;
        Ok(Audit::from(audit))
    }
}
