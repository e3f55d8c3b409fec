//! `_core.TokenBudget`: the token-budget plan of an epoch (budget-v1, budget-v2), its
//! windows' plans and resume points, over a numpy array of lengths (any native integer
//! dtype, read in place: a memmap is never copied); its passes are `budget_pass.rs`'s.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use permshard_core::{BudgetResume, BudgetStart, WindowPlan};

use crate::convert::{compute, int64_array, non_negative, Fields};
use crate::errors::to_py;
use crate::state::{config_fields, from_mapping, to_dict};

/// Runs `$body` with `$slice` bound to the lengths as a slice of their own dtype.
macro_rules! with_lengths {
    ($lengths:expr, $slice:ident => $body:expr) => {{
        let lengths = $lengths;
        with_lengths!(@ lengths, $slice => $body; u8, u16, u32, u64, i8, i16, i32, i64)
    }};
    (@ $lengths:ident, $slice:ident => $body:expr; $($t:ty),*) => {{
        use ::numpy::PyArrayMethods as _;
        'dispatch: {
        $(
            if let Ok(array) = $lengths.cast::<::numpy::PyArray1<$t>>() {
                let array = array.readonly();
                let $slice = array.as_slice()?;
                break 'dispatch $body;
            }
        )*
        Err(::pyo3::exceptions::PyTypeError::new_err(format!(
            "lengths must be a contiguous 1-D array of a native integer dtype, got {}; pass \
             np.ascontiguousarray(lengths, dtype=np.int64)",
            $lengths.getattr("dtype").map_or_else(|_| $lengths.get_type().to_string(), |d| d.to_string())
        )))
        }
    }};
}
pub(crate) use with_lengths; // budget_pass.rs reads the lengths the same way

/// A resume point of the plan: a window, its positions taken before, steps done.
#[pyclass(frozen, module = "permshard._core", name = "BudgetStart")]
pub struct PyBudgetStart {
    pub inner: BudgetStart,
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
    pub inner: WindowPlan,
    pub world: u64,
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

/// The core's token-budget epoch of `config` (any object with the fields of a
/// `BudgetConfig` as attributes), its fields checked together.
fn budget_epoch(config: &Bound<'_, PyAny>) -> PyResult<permshard_core::BudgetEpoch> {
    let fields = Fields::of_object("budget", config)?;
    permshard_core::BudgetEpoch::new(permshard_core::BudgetEpoch {
        spec: fields.epoch_spec()?,
        max_tokens: fields.int("max_tokens")?,
        window: fields.int("window")?,
    })
    .map_err(to_py)
}

#[pyclass(frozen, module = "permshard._core", name = "BudgetEpoch")]
pub struct BudgetEpoch {
    pub inner: permshard_core::BudgetEpoch,
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

    /// `(epoch, resume)` of a state dict, checked by the core (keys, types, ranges,
    /// algorithm, states of earlier releases; `strict` refuses unknown keys): `resume` is
    /// `BudgetStart`'s keywords, `{"window", "steps", "taken"}`.
    #[staticmethod]
    fn from_state<'py>(
        py: Python<'py>,
        state: &Bound<'py, PyAny>,
        strict: bool,
    ) -> PyResult<(BudgetEpoch, Bound<'py, PyDict>)> {
        let (inner, resume) =
            permshard_core::BudgetEpoch::from_state(&from_mapping(state)?, strict)
                .map_err(to_py)?;
        let point = PyDict::new(py);
        point.set_item("window", resume.window_index)?;
        point.set_item("steps", resume.steps)?;
        point.set_item("taken", PyBytes::new(py, &resume.taken))?;
        Ok((BudgetEpoch { inner }, point))
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
    pub inner: permshard_core::TokenBudget,
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
