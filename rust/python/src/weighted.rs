//! `_core.Weights` / `_core.EpochDraws`: weighted-v1, one stream of weighted draws per
//! `(seed, epoch)`, position → sample id.

use numpy::PyReadonlyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use permshard_core::{range_len, DRAWS};

use crate::convert::{alloc, compute};
use crate::errors::to_py;
use crate::partition::Partition;
use crate::state::{from_mapping, to_dict};

#[pyclass(frozen, module = "permshard._core", name = "Weights")]
pub struct Weights {
    inner: permshard_core::Weights,
}

#[pymethods]
impl Weights {
    /// Checks `weights` and builds the alias table (with `replacement`; GIL released).
    #[new]
    fn new(
        py: Python<'_>,
        weights: PyReadonlyArray1<'_, f64>,
        replacement: bool,
    ) -> PyResult<Self> {
        let weights = weights.as_slice()?;
        let inner = compute(py, weights.len() as u64, || {
            permshard_core::Weights::new(weights, replacement)
        })
        .map_err(to_py)?;
        Ok(Weights { inner })
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// Weights that are positive.
    #[getter]
    fn positive(&self) -> u64 {
        self.inner.positive()
    }

    #[getter]
    fn replacement(&self) -> bool {
        self.inner.replacement()
    }

    /// A 64-bit digest of the weights.
    #[getter]
    fn digest(&self) -> u64 {
        self.inner.digest()
    }

    /// The fields a state dict records of these draws (the core's schema).
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, self.inner.state())
    }

    /// The sharded epoch's part of a weighted stream's `state`, once the draws' fields
    /// are checked against these weights (ValueError naming the field that differs).
    fn sharded_state<'py>(
        &self,
        py: Python<'py>,
        state: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.inner
            .check_state(&from_mapping(state)?)
            .map_err(to_py)?;
        // The rest as the caller gave it (the sharded epoch's reader checks it).
        let dict = PyDict::new(py);
        for item in state.call_method0("items")?.try_iter()? {
            let (key, value): (Bound<'py, PyAny>, Bound<'py, PyAny>) = item?.extract()?;
            let drawn = key.extract::<String>().is_ok_and(|k| DRAWS.has(&k));
            if !drawn {
                dict.set_item(key, value)?;
            }
        }
        Ok(dict)
    }

    /// ValueError unless an epoch of `num_samples` draws can be had.
    fn check_draws(&self, num_samples: u64) -> PyResult<()> {
        self.inner.check_draws(num_samples).map_err(to_py)
    }

    /// The draws of `epoch` keyed by `seed`: `num_samples` positions (GIL released).
    fn epoch(
        &self,
        py: Python<'_>,
        seed: u64,
        epoch: u64,
        num_samples: u64,
    ) -> PyResult<EpochDraws> {
        let work = if self.inner.replacement() {
            0
        } else {
            self.inner.len()
        };
        let inner =
            compute(py, work, || self.inner.epoch(seed, epoch, num_samples)).map_err(to_py)?;
        Ok(EpochDraws { inner })
    }
}

#[pyclass(frozen, module = "permshard._core", name = "EpochDraws")]
pub struct EpochDraws {
    inner: permshard_core::EpochDraws,
}

#[pymethods]
impl EpochDraws {
    #[getter]
    fn num_samples(&self) -> u64 {
        self.inner.num_samples()
    }

    /// The sample drawn at position `position`.
    fn at(&self, position: u64) -> PyResult<u64> {
        self.inner.at(position).map_err(to_py)
    }

    /// The samples drawn at `rank`'s positions `[start, stop)` of `partition` (a partition
    /// of the stream's positions, in the identity order).
    fn take_list(
        &self,
        py: Python<'_>,
        partition: &Partition,
        rank: u64,
        start: u64,
        stop: u64,
    ) -> PyResult<Vec<u64>> {
        let part = &partition.inner;
        let count = range_len(start, stop, part.num_samples()).map_err(to_py)?;
        let mut out = alloc(count)?;
        compute(py, count, || {
            part.fill_rank(rank, start, &mut out)?;
            self.inner.map_in_place(&mut out).map(|_| out)
        })
        .map_err(to_py)
    }
}
