//! `_core.TokenBudget`: budget-v1 plans of a window, resume points, and their proof, over
//! a numpy array of lengths (any native integer dtype, read in place: a memmap is never
//! copied).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use permshard_core::{BudgetPass, BudgetResume, BudgetShare, BudgetStart, PassPlan, WindowPlan};

use crate::convert::{compute, epoch_spec, field, int64_array, non_negative};
use crate::errors::to_py;
use crate::state::{config_fields, from_mapping, to_dict};
use crate::verify::{counter, Progress, PyCoverageShare, PyVerdict};

/// Runs `$body` with `$slice` bound to the lengths as a slice of their own dtype.
macro_rules! with_lengths {
    ($lengths:expr, $slice:ident => $body:expr) => {{
        let lengths = $lengths;
        with_lengths!(@ lengths, $slice => $body; u8, u16, u32, u64, i8, i16, i32, i64)
    }};
    (@ $lengths:ident, $slice:ident => $body:expr; $($t:ty),*) => {{
        'dispatch: {
        $(
            if let Ok(array) = $lengths.cast::<PyArray1<$t>>() {
                let array = array.readonly();
                let $slice = array.as_slice()?;
                break 'dispatch $body;
            }
        )*
        Err(PyTypeError::new_err(format!(
            "lengths must be a contiguous 1-D array of a native integer dtype, got {}; pass \
             np.ascontiguousarray(lengths, dtype=np.int64)",
            $lengths.getattr("dtype").map_or_else(|_| $lengths.get_type().to_string(), |d| d.to_string())
        )))
        }
    }};
}

/// A resume point of the plan: a window, its positions taken before, steps done.
#[pyclass(frozen, module = "permshard._core", name = "BudgetStart")]
pub struct PyBudgetStart {
    inner: BudgetStart,
}

#[pymethods]
impl PyBudgetStart {
    /// The resume point of `budget` at `window` after `steps` steps of its plan; `taken`
    /// holds a bit per position of the window (numpy's `packbits`), empty for none.
    #[new]
    #[pyo3(signature = (budget, window = 0, taken = b"".as_slice(), steps = 0))]
    fn new(budget: &TokenBudget, window: u64, taken: &[u8], steps: u64) -> PyResult<Self> {
        let inner = BudgetStart::new(&budget.inner, window, taken, steps).map_err(to_py)?;
        Ok(PyBudgetStart { inner })
    }

    /// The window the pass starts in.
    #[getter]
    fn window(&self) -> u64 {
        self.inner.window()
    }

    /// Steps of its plan done before.
    #[getter]
    fn steps(&self) -> u64 {
        self.inner.steps()
    }

    /// The taken positions' bits, as `BudgetStart(..., taken=)` reads them.
    #[getter]
    fn taken<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.taken_bits())
    }

    /// The same window after `steps` steps of its plan.
    fn after(&self, steps: u64) -> Self {
        PyBudgetStart {
            inner: self.inner.after(steps),
        }
    }
}

/// One window's plan: its samples sorted by length and each rank's batch per step.
#[pyclass(frozen, module = "permshard._core", name = "WindowPlan")]
pub struct PyWindowPlan {
    inner: WindowPlan,
    world: u64,
}

#[pymethods]
impl PyWindowPlan {
    /// A plan as handed out: `samples`, the flat `[start, stop)` pairs `bounds` of the
    /// batches (step-major, `world` per step), declared `padding` and `dropped`.
    #[new]
    fn new(
        samples: PyReadonlyArray1<'_, i64>,
        bounds: PyReadonlyArray1<'_, i64>,
        padding: u64,
        dropped: u64,
        world: u64,
    ) -> PyResult<Self> {
        let samples = non_negative(samples.as_slice()?, "samples")?;
        let bounds = non_negative(bounds.as_slice()?, "bounds")?;
        if bounds.len() % 2 != 0 || world == 0 {
            return Err(PyValueError::new_err(
                "bounds must hold [start, stop) pairs and world must be at least 1",
            ));
        }
        let bounds = bounds.chunks(2).map(|p| (p[0], p[1])).collect();
        let inner = WindowPlan {
            samples,
            bounds,
            padding,
            dropped,
        };
        Ok(PyWindowPlan { inner, world })
    }

    /// Steps of one batch per rank.
    #[getter]
    fn steps(&self) -> u64 {
        self.inner.steps(self.world)
    }

    #[getter]
    fn padding(&self) -> u64 {
        self.inner.padding
    }

    #[getter]
    fn dropped(&self) -> u64 {
        self.inner.dropped
    }

    /// The window's samples, sorted by length (a new int64 array).
    #[getter]
    fn samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        int64_array(py, 1 << 63, self.inner.samples.clone())
    }

    /// The flat `[start, stop)` pairs of the batches, step-major (a new int64 array).
    #[getter]
    fn bounds<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let flat = self
            .inner
            .bounds
            .iter()
            .flat_map(|&(i, j)| [i, j])
            .collect();
        int64_array(py, 1 << 63, flat)
    }

    /// Rank `rank`'s batch at step `step` (a new int64 array).
    fn batch<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        rank: u64,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        if step >= self.steps() || rank >= self.world {
            return Err(PyValueError::new_err(format!(
                "step {step} of {}, rank {rank} of {}: out of the plan",
                self.steps(),
                self.world
            )));
        }
        let (i, j) = self.inner.bounds[(step * self.world + rank) as usize];
        int64_array(
            py,
            1 << 63,
            self.inner.samples[i as usize..j as usize].to_vec(),
        )
    }
}

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

/// The core's token-budget epoch of `config` (any object with the fields of a
/// `BudgetConfig` as attributes), its fields checked together.
fn budget_epoch(config: &Bound<'_, PyAny>) -> PyResult<permshard_core::BudgetEpoch> {
    permshard_core::BudgetEpoch::new(permshard_core::BudgetEpoch {
        spec: epoch_spec(config)?,
        max_tokens: field(config, "max_tokens")?,
        window: field(config, "window")?,
    })
    .map_err(to_py)
}

#[pyclass(frozen, module = "permshard._core", name = "BudgetEpoch")]
pub struct BudgetEpoch {
    inner: permshard_core::BudgetEpoch,
}

#[pymethods]
impl BudgetEpoch {
    /// The core's token-budget epoch `config` describes (any object with the fields of a
    /// `BudgetConfig` as attributes), its fields checked together.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(BudgetEpoch {
            inner: budget_epoch(config)?,
        })
    }

    /// The algorithm id of the plan (budget-v2, budget-v1).
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// The state dict of this epoch resumed at `start`.
    fn state_dict<'py>(
        &self,
        py: Python<'py>,
        start: &PyBudgetStart,
    ) -> PyResult<Bound<'py, PyDict>> {
        let resume = BudgetResume {
            window_index: start.inner.window(),
            steps: start.inner.steps(),
            taken: start.inner.taken_bits(),
        };
        to_dict(py, self.inner.state(&resume))
    }

    /// `(epoch, window_index, steps, taken)` of a state dict, checked by the core (keys,
    /// types, ranges, algorithm, states of earlier releases); `strict` refuses unknown keys.
    #[staticmethod]
    fn from_state<'py>(
        py: Python<'py>,
        state: &Bound<'py, PyAny>,
        strict: bool,
    ) -> PyResult<(BudgetEpoch, u64, u64, Bound<'py, PyBytes>)> {
        let (inner, resume) =
            permshard_core::BudgetEpoch::from_state(&from_mapping(state)?, strict)
                .map_err(to_py)?;
        let taken = PyBytes::new(py, &resume.taken);
        Ok((
            BudgetEpoch { inner },
            resume.window_index,
            resume.steps,
            taken,
        ))
    }

    /// The fields a configuration is built from (`BudgetConfig(**fields)`).
    fn fields<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        config_fields(py, self.inner.values(), self.inner.spec.permutation)
    }

    /// Refuses to resume a state saved under `saved` unless it plans the same batches.
    fn check_resumable(&self, saved: &BudgetEpoch) -> PyResult<()> {
        self.inner.check_resumable(&saved.inner).map_err(to_py)
    }
}

#[pyclass(frozen, module = "permshard._core", name = "TokenBudget")]
pub struct TokenBudget {
    inner: permshard_core::TokenBudget,
}

#[pymethods]
impl TokenBudget {
    /// The planner of the epoch `config` describes: any object with the fields of a
    /// `BudgetConfig` as attributes.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let inner = permshard_core::TokenBudget::of(&budget_epoch(config)?).map_err(to_py)?;
        Ok(TokenBudget { inner })
    }

    /// Number of windows.
    #[getter]
    fn windows(&self) -> u64 {
        self.inner.windows()
    }

    /// The samples of window `k`, in the order's order.
    fn samples<'py>(&self, py: Python<'py>, k: u64) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let samples = self.inner.samples(k).map_err(to_py)?;
        int64_array(py, self.inner.n(), samples)
    }

    /// `saved`, a resume point under `saved_world` ranks, under `world` ranks.
    fn resume(
        &self,
        py: Python<'_>,
        lengths: &Bound<'_, PyAny>,
        saved: &PyBudgetStart,
        saved_world: u64,
        world: u64,
    ) -> PyResult<PyBudgetStart> {
        let inner = &self.inner;
        let start = with_lengths!(lengths, l => compute(py, inner.window(), || inner.resume(l, &saved.inner, saved_world, world)).map_err(to_py))?;
        Ok(PyBudgetStart { inner: start })
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
