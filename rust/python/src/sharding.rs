//! `_core.Sharding`: what an epoch is (fields, order, algorithm id, resume limit, dealing).

use std::sync::OnceLock;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use permshard_core::{Dealing, EpochSpec, Order};

use crate::convert::Fields;
use crate::errors::to_py;
use crate::exclusion::Exclusions;
use crate::partition::Partition;
use crate::state::{config_fields, from_mapping, to_dict};

/// An epoch, and its order once a partition needed it (kept: a small `n` builds a lookup
/// table; another dealing of the same epoch shares it).
#[pyclass(frozen, module = "permshard._core", name = "Sharding")]
pub struct Sharding {
    pub inner: permshard_core::Sharding,
    order: OnceLock<Order>,
}

impl Sharding {
    fn of(inner: permshard_core::Sharding) -> Self {
        Sharding {
            inner,
            order: OnceLock::new(),
        }
    }

    /// This epoch's order, built at the first call.
    fn order(&self) -> PyResult<Order> {
        if let Some(order) = self.order.get() {
            return Ok(order.clone());
        }
        let order = self.inner.order().map_err(to_py)?;
        Ok(self.order.get_or_init(|| order).clone())
    }
}

#[pymethods]
impl Sharding {
    /// The core's description of an epoch, from the fields of `ShardConfig` as keywords
    /// (the core's table of them, `fields("shard")`, gives the defaults): each converted
    /// once, then checked together.
    #[new]
    #[pyo3(signature = (**fields))]
    fn new(fields: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let fields = Fields::new("shard", fields.cloned())?;
        let spec = fields.epoch_spec()?;
        let (block_size, window_blocks) = (fields.int("block_size")?, fields.int("window_blocks")?);
        let dealing = Dealing::new(
            &fields.choice("dealing")?,
            fields.int("batch_size")?,
            fields.flag("drop_last_batch")?,
        )
        .map_err(to_py)?;
        let inner = permshard_core::Sharding::of_spec(spec, block_size, window_blocks)
            .map_err(to_py)?
            .with_dealing(dealing);
        let inner = match fields.object("exclude")? {
            None => inner,
            Some(exclude) => match exclude.cast::<Exclusions>() {
                Ok(set) => inner
                    .with_exclusions(set.get().inner.clone())
                    .map_err(to_py)?,
                Err(_) => {
                    return Err(PyTypeError::new_err(
                        "exclude must be the core's Exclusions or None",
                    ))
                }
            },
        };
        Ok(Sharding::of(inner))
    }

    /// The same epoch's fields with another epoch number (no field is read again).
    fn with_epoch(&self, epoch: u64) -> Sharding {
        Sharding::of(permshard_core::Sharding {
            spec: EpochSpec {
                epoch,
                ..self.inner.spec
            },
            ..self.inner.clone()
        })
    }

    /// The same epoch dealt by `dealing` in batches of `batch_size` (its order shared).
    fn with_dealing(
        &self,
        dealing: &str,
        batch_size: u64,
        drop_last_batch: bool,
    ) -> PyResult<Sharding> {
        let dealing = Dealing::new(dealing, batch_size, drop_last_batch).map_err(to_py)?;
        Ok(Sharding {
            inner: self.inner.clone().with_dealing(dealing),
            order: self.order.clone(),
        })
    }

    /// The epoch number.
    #[getter]
    fn epoch(&self) -> u64 {
        self.inner.spec.epoch
    }

    /// The algorithm id of the order used.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    /// The dealing's name (`round-robin`, `step`).
    #[getter]
    fn dealing(&self) -> &'static str {
        self.inner.dealing.name()
    }

    /// Positions per window of the block order (`0` without blocks).
    #[getter]
    fn window_len(&self) -> u64 {
        self.inner.window_len()
    }

    /// Samples an epoch deals: `n` less the excluded.
    #[getter]
    fn kept(&self) -> u64 {
        self.inner.kept()
    }

    /// This epoch's resume point for a state saved by `saved` after `consumed` of its
    /// positions (`saved` may exclude fewer samples).
    fn resume_from(&self, saved: &Sharding, consumed: u64) -> PyResult<u64> {
        self.inner
            .resume_from(&saved.inner, consumed)
            .map_err(to_py)
    }

    /// The most global positions an epoch can consume.
    #[getter]
    fn max_consumed(&self) -> u64 {
        self.inner.max_consumed()
    }

    /// The state dict of this epoch after `consumed` of its global positions.
    fn state_dict<'py>(&self, py: Python<'py>, consumed: u64) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, self.inner.state(consumed))
    }

    /// `(epoch, consumed)` of a state dict, checked by the core (keys, types, ranges,
    /// algorithm, states of earlier releases); `strict` refuses unknown keys.
    #[staticmethod]
    fn from_state(state: &Bound<'_, PyAny>, strict: bool) -> PyResult<(Sharding, u64)> {
        let (inner, consumed) =
            permshard_core::Sharding::from_state(&from_mapping(state)?, strict).map_err(to_py)?;
        Ok((Sharding::of(inner), consumed))
    }

    /// The fields a configuration is built from (`ShardConfig(**fields)`); with
    /// `dealing`, how the pass is dealt too.
    #[pyo3(signature = (dealing = false))]
    fn fields<'py>(&self, py: Python<'py>, dealing: bool) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.inner;
        let exclude = (!s.exclusions.is_empty()).then(|| Exclusions {
            inner: s.exclusions.clone(),
        });
        let dict = config_fields(py, s.values(), s.spec.permutation)?;
        dict.set_item("exclude", exclude)?;
        if dealing {
            dict.set_item("dealing", s.dealing.name())?;
            dict.set_item("batch_size", s.dealing.batch_size())?;
            dict.set_item("drop_last_batch", s.dealing.drop_last())?;
        }
        Ok(dict)
    }

    /// Refuses to resume a state saved under `saved` unless it reads the same order.
    fn check_resumable(&self, saved: &Sharding) -> PyResult<()> {
        self.inner.check_resumable(&saved.inner).map_err(to_py)
    }

    /// The split across ranks of positions `[start, ...)`.
    #[pyo3(signature = (start = 0))]
    fn partition(&self, start: u64) -> PyResult<Partition> {
        let inner = self
            .inner
            .partition_over(self.order()?, start)
            .map_err(to_py)?;
        Ok(Partition { inner })
    }
}
