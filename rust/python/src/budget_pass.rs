//! `_core.BudgetPass`: a pass of the token-budget plan as the samplers iterate, locate
//! and prove it, and `_core.BudgetShare`, a rank's share of its exact proof.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use std::sync::{Mutex, MutexGuard};

use permshard_core::{BudgetBatches, BudgetPass, BudgetShare, BudgetStart, PassPlan};

use crate::budget::{with_lengths, PyBudgetStart, PyWindowPlan, TokenBudget};
use crate::convert::{compute, int64_array};
use crate::errors::to_py;
use crate::verify::{counter, Progress, PyCoverageShare, PyVerdict};

/// What a proof of some windows found, as ranks exchange it.
#[pyclass(frozen, module = "permshard._core", name = "BudgetShare")]
pub struct PyBudgetShare {
    inner: BudgetShare,
    world: u64,
}

#[pymethods]
impl PyBudgetShare {
    /// A share of a pass dealt to `world` ranks from the record of `words()` (another
    /// rank's, gathered).
    #[staticmethod]
    fn from_words(words: Vec<u64>, world: u64) -> PyResult<Self> {
        let inner = BudgetShare::from_words(&words, world).map_err(to_py)?;
        Ok(PyBudgetShare { inner, world })
    }

    /// The fixed-size record of `8 + world` unsigned 64-bit words.
    fn words(&self) -> Vec<u64> {
        self.inner.to_words(self.world)
    }

    /// Windows proven.
    #[getter]
    fn windows(&self) -> u64 {
        self.inner.windows
    }

    /// The smallest window whose proof failed, or `None`.
    #[getter]
    fn failed(&self) -> Option<u64> {
        self.inner.failed
    }
}

/// A pass of the token budget: the planner, the lengths (read in place at every call),
/// where the pass starts and the ranks it is dealt to — the core's `BudgetPass`, whose
/// methods the samplers iterate and prove.
#[pyclass(frozen, module = "permshard._core", name = "BudgetPass")]
pub struct PyBudgetPass {
    budget: Py<TokenBudget>,
    lengths: Py<PyAny>,
    start: BudgetStart,
    world: u64,
}

/// Runs `$body` with `$pass` bound to the core's pass over `$self`'s lengths.
macro_rules! on_pass {
    ($self:ident, $py:ident, $pass:ident => $body:expr) => {{
        let (budget, start, world) = (&$self.budget.get().inner, &$self.start, $self.world);
        with_lengths!($self.lengths.bind($py), l => match BudgetPass::new(budget, l, start.clone(), world) {
            Ok($pass) => $body,
            Err(e) => Err(to_py(e)),
        })
    }};
}

#[pymethods]
impl PyBudgetPass {
    /// The pass of `budget` over `lengths` (a contiguous 1-D array of a native integer
    /// dtype, `budget`'s length) from `start`, dealt to `world` ranks.
    #[new]
    fn new(
        py: Python<'_>,
        budget: Py<TokenBudget>,
        lengths: Py<PyAny>,
        start: &PyBudgetStart,
        world: u64,
    ) -> PyResult<Self> {
        let pass = PyBudgetPass {
            budget,
            lengths,
            start: start.inner.clone(),
            world,
        };
        on_pass!(pass, py, _checked => Ok::<(), PyErr>(()))?;
        Ok(pass)
    }

    /// Where the pass starts.
    #[getter]
    fn start(&self) -> PyBudgetStart {
        PyBudgetStart {
            inner: self.start.clone(),
        }
    }

    /// The ranks it is dealt to.
    #[getter]
    fn num_replicas(&self) -> u64 {
        self.world
    }

    /// The plan of window `k` in this pass.
    fn plan(&self, py: Python<'_>, k: u64) -> PyResult<PyWindowPlan> {
        let window = self.budget.get().inner.window();
        let plan =
            on_pass!(self, py, pass => compute(py, window, || pass.window_plan(k)).map_err(to_py))?;
        Ok(PyWindowPlan {
            inner: plan,
            world: self.world,
        })
    }

    /// `(steps, padding, dropped)` of the pass: steps per rank, samples repeated and
    /// samples left out (every window planned, GIL released).
    #[pyo3(signature = (threads = 0))]
    fn summary(&self, py: Python<'_>, threads: usize) -> PyResult<(u64, u64, u64)> {
        let sum = on_pass!(self, py, pass => py.detach(|| pass.summary(threads)).map_err(to_py))?;
        Ok((sum.steps, sum.padding, sum.dropped))
    }

    /// Every `(rank, step)` of the pass whose batch holds `sample` (the windows before it
    /// planned, every core, GIL released).
    fn locate(&self, py: Python<'_>, sample: u64) -> PyResult<Vec<(u64, u64)>> {
        on_pass!(self, py, pass => py.detach(|| pass.locate_step(sample)).map_err(to_py))
    }

    /// Proves `plan`, as handed out, a plan of window `k` of this pass; ShardingError with
    /// the counter-example.
    fn prove(&self, py: Python<'_>, k: u64, plan: &PyWindowPlan) -> PyResult<()> {
        let items = plan.inner.samples.len() as u64;
        on_pass!(self, py, pass => compute(py, items, || pass.prove_window(k, &plan.inner)).map_err(to_py))?;
        Ok(())
    }

    /// The exact proof of the whole pass, every window planned as the sampler hands it
    /// out and checked through the order's inverse (`"inverse"`, the only proof of these
    /// plans), on `threads` threads (`0`: all cores), GIL released, advancing `progress` by
    /// each window's samples: the verdict, or ShardingError.
    #[pyo3(signature = (method = "inverse", threads = 0, progress = None))]
    fn verify(
        &self,
        py: Python<'_>,
        method: &str,
        threads: usize,
        progress: Option<&Progress>,
    ) -> PyResult<PyVerdict> {
        self.check_method(method)?;
        let done = counter(progress);
        let verdict = on_pass!(self, py, pass => py.detach(|| {
            let first = pass.start().window();
            pass.prove_windows((first, 1), pass.budget(), threads, &done)
                .and_then(|share| pass.judge(&share))
        }).map_err(to_py))?;
        Ok(verdict.into())
    }

    /// Rank `rank`'s share of the exact proof: the windows `start + rank, start + rank +
    /// world, ...` planned as this pass hands them out, checked by `reference`'s plan (the
    /// pass as the configuration every rank agreed on plans it) or this pass's own; every
    /// core, GIL released; failures are recorded.
    #[pyo3(signature = (rank, threads = 0, progress = None, reference = None))]
    fn prove_share(
        &self,
        py: Python<'_>,
        rank: u64,
        threads: usize,
        progress: Option<&Progress>,
        reference: Option<&PyBudgetPass>,
    ) -> PyResult<PyBudgetShare> {
        let by = &reference.unwrap_or(self).budget.get().inner;
        let done = counter(progress);
        let share = on_pass!(self, py, pass => py.detach(|| pass.prove_share_by(rank, by, threads, &done)).map_err(to_py))?;
        Ok(PyBudgetShare {
            inner: share,
            world: self.world,
        })
    }

    /// Judges every rank's share (the words of `prove_share(...).words()`, in rank order),
    /// added up in the core: the verdict, or ShardingError with the first failing
    /// window's counter-example.
    fn judge(&self, py: Python<'_>, rows: Vec<Vec<u64>>) -> PyResult<PyVerdict> {
        let mut total = BudgetShare::default();
        for words in &rows {
            let share = BudgetShare::from_words(words, self.world).map_err(to_py)?;
            total = total.merge(&share);
        }
        let window = self.budget.get().inner.window();
        let verdict =
            on_pass!(self, py, pass => compute(py, window, || pass.judge(&total)).map_err(to_py))?;
        Ok(verdict.into())
    }

    /// Refuses (ValueError, naming the proof to use) a proof these plans do not have: they
    /// are proven by the inverse (`"inverse"`) only, neither by a bitmap nor by a
    /// fingerprint (`"fingerprint"`).
    fn check_method(&self, method: &str) -> PyResult<()> {
        match method {
            "inverse" => Ok(()),
            "fingerprint" => Err(PyValueError::new_err(
                "token-budget plans have no fingerprint proof: prove them exactly, with \
                 verify_distributed() (exact=True, the default)",
            )),
            _ => Err(PyValueError::new_err(format!(
                "token-budget plans are proven by the inverse: pass method='inverse', not '{method}'"
            ))),
        }
    }

    /// Token-budget plans have no coverage fingerprint: refused, naming the exact proof.
    #[allow(unused_variables)] // named as the partition's, which a pass of either kind answers
    fn coverage_share(&self, rank: u64) -> PyResult<PyCoverageShare> {
        Err(self.check_method("fingerprint").unwrap_err())
    }

    /// As `coverage_share`: refused.
    #[allow(unused_variables)]
    fn judge_coverage(&self, rows: Vec<Vec<u64>>) -> PyResult<PyVerdict> {
        Err(self.check_method("fingerprint").unwrap_err())
    }
}

/// One rank's batches of a pass, a window planned at a time as they are handed out (GIL
/// released), and the resume point after any number of them: the core's `BudgetBatches`.
#[pyclass(frozen, module = "permshard._core", name = "BudgetBatches")]
pub struct PyBudgetBatches {
    pass: Py<PyBudgetPass>,
    walk: Mutex<BudgetBatches>,
    as_array: bool,
}

#[pymethods]
impl PyBudgetBatches {
    /// Rank `rank`'s batches of `pass`, each a list of ints (an int64 array with `as_array`).
    #[new]
    #[pyo3(signature = (pass_, rank, as_array = false))]
    fn new(py: Python<'_>, pass_: Py<PyBudgetPass>, rank: u64, as_array: bool) -> PyResult<Self> {
        let of = pass_.get();
        let walk = on_pass!(of, py, pass => BudgetBatches::new(&pass, rank).map_err(to_py))?;
        Ok(PyBudgetBatches {
            pass: pass_,
            walk: Mutex::new(walk),
            as_array,
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let pass = self.pass.get();
        let window = pass.budget.get().inner.window();
        loop {
            // The walk is locked for its own steps only, never while Python objects are made
            // (a finalizer they run may save a state, and lock it again).
            let taken = self.walk().take(pass.world);
            if let Some(batch) = taken {
                return Ok(Some(if self.as_array {
                    int64_array(py, 1 << 63, batch)?.into_any()
                } else {
                    batch.into_pyobject(py)?.into_any()
                }));
            }
            let next = on_pass!(pass, py, p => self.walk().next_window(&p).map_err(to_py))?;
            let Some((k, first)) = next else {
                return Ok(None);
            };
            // Planned with the GIL released and the walk unlocked: a state saved from
            // another thread meanwhile reads the count before this window.
            let plan =
                on_pass!(pass, py, p => compute(py, window, || p.window_plan(k)).map_err(to_py))?;
            self.walk().enter(k, first, plan);
        }
    }

    /// Batches handed out so far.
    #[getter]
    fn handed(&self) -> u64 {
        self.walk().handed()
    }

    /// Where the pass resumes once every rank took its first `done` batches (at most
    /// `handed`).
    fn resume_point(&self, done: u64) -> PyResult<PyBudgetStart> {
        let inner = self.walk().resume_point(done).map_err(to_py)?;
        Ok(PyBudgetStart { inner })
    }
}

impl PyBudgetBatches {
    fn walk(&self) -> MutexGuard<'_, BudgetBatches> {
        // Locked only between calls out, never while planning: no panic under it.
        self.walk
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
