//! `_core.TokenBudget`: budget-v1 plans of a window and their proof, over a numpy array
//! of lengths (any native integer dtype, read in place: a memmap is never copied).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use permshard_core::WindowPlan;

use crate::convert::{compute, int64_array, non_negative};
use crate::errors::to_py;

/// A plan as Python receives it: `(samples, bounds, padding, dropped)`, `bounds` the flat
/// `[start, stop)` pairs of the batches, step-major.
type PlanTuple<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    u64,
    u64,
);

/// A window's proof as Python receives it:
/// `(samples per rank, steps, consumed, covered, padding, dropped)`.
type ProofTuple = (Vec<u64>, u64, u64, u64, u64, u64);

/// Runs `$body` with `$slice` bound to the lengths as a slice of their own dtype.
macro_rules! with_lengths {
    ($lengths:expr, $slice:ident => $body:expr; $($t:ty),*) => {{
        let lengths = $lengths;
        'dispatch: {
        $(
            if let Ok(array) = lengths.cast::<PyArray1<$t>>() {
                let array = array.readonly();
                let $slice = array.as_slice()?;
                break 'dispatch $body;
            }
        )*
        Err(PyTypeError::new_err(format!(
            "lengths must be a contiguous 1-D array of a native integer dtype, got {}; pass \
             np.ascontiguousarray(lengths, dtype=np.int64)",
            lengths.getattr("dtype").map_or_else(|_| lengths.get_type().to_string(), |d| d.to_string())
        )))
        }
    }};
}

#[pyclass(frozen, module = "permshard._core", name = "TokenBudget")]
pub struct TokenBudget {
    inner: permshard_core::TokenBudget,
}

#[pymethods]
impl TokenBudget {
    #[new]
    #[pyo3(signature = (n, max_tokens, window, seed, epoch, shuffle, drop_last))]
    fn new(
        n: u64,
        max_tokens: u64,
        window: u64,
        seed: u64,
        epoch: u64,
        shuffle: bool,
        drop_last: bool,
    ) -> PyResult<Self> {
        let inner = permshard_core::TokenBudget::new(
            n, max_tokens, window, seed, epoch, shuffle, drop_last,
        )
        .map_err(to_py)?;
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

    /// The plan of window `k` for `world` ranks, without the `taken` samples.
    #[pyo3(signature = (lengths, k, taken, world))]
    fn plan<'py>(
        &self,
        py: Python<'py>,
        lengths: &Bound<'py, PyAny>,
        k: u64,
        taken: Option<PyReadonlyArray1<'py, bool>>,
        world: u64,
    ) -> PyResult<PlanTuple<'py>> {
        let taken = taken.as_ref().map(|t| t.as_slice()).transpose()?;
        let inner = &self.inner;
        let plan = with_lengths!(lengths, l => compute(py, inner.window(), || inner.plan(l, k, taken, world)).map_err(to_py); u8, u16, u32, u64, i8, i16, i32, i64)?;
        let bounds = plan.bounds.iter().flat_map(|&(i, j)| [i, j]).collect();
        Ok((
            int64_array(py, inner.n(), plan.samples)?,
            int64_array(py, inner.n(), bounds)?,
            plan.padding,
            plan.dropped,
        ))
    }

    /// Steps per rank from window `k` (from its step `first_step`) to the epoch's end.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (lengths, k, taken, first_step, world, threads = 0))]
    fn count_steps<'py>(
        &self,
        py: Python<'py>,
        lengths: &Bound<'py, PyAny>,
        k: u64,
        taken: Option<PyReadonlyArray1<'py, bool>>,
        first_step: u64,
        world: u64,
        threads: usize,
    ) -> PyResult<u64> {
        let taken = taken.as_ref().map(|t| t.as_slice()).transpose()?;
        let inner = &self.inner;
        with_lengths!(lengths, l => py.detach(|| inner.count_steps(l, k, taken, first_step, world, threads)).map_err(to_py); u8, u16, u32, u64, i8, i16, i32, i64)
    }

    /// Proves a plan of window `k` as handed out (`samples`, flat `bounds`, declared
    /// `padding` and `dropped`); ShardingError with the counter-example.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (lengths, k, taken, first_step, world, samples, bounds, padding, dropped))]
    fn prove<'py>(
        &self,
        py: Python<'py>,
        lengths: &Bound<'py, PyAny>,
        k: u64,
        taken: Option<PyReadonlyArray1<'py, bool>>,
        first_step: u64,
        world: u64,
        samples: PyReadonlyArray1<'py, i64>,
        bounds: PyReadonlyArray1<'py, i64>,
        padding: u64,
        dropped: u64,
    ) -> PyResult<ProofTuple> {
        let taken = taken.as_ref().map(|t| t.as_slice()).transpose()?;
        let (samples, bounds) = (
            non_negative(samples.as_slice()?, "samples")?,
            non_negative(bounds.as_slice()?, "bounds")?,
        );
        let plan = WindowPlan {
            samples,
            bounds: bounds
                .chunks(2)
                .map(|p| (p[0], p.get(1).copied().unwrap_or(0)))
                .collect(),
            padding,
            dropped,
        };
        let inner = &self.inner;
        let proof = with_lengths!(lengths, l => compute(py, plan.samples.len() as u64, || inner.prove(l, k, taken, first_step, world, &plan)).map_err(to_py); u8, u16, u32, u64, i8, i16, i32, i64)?;
        Ok((
            proof.per_rank,
            proof.steps,
            proof.consumed,
            proof.covered,
            proof.padding,
            proof.dropped,
        ))
    }
}
