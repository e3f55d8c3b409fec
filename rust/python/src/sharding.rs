//! `_core.Sharding`: what an epoch is (fields, order, algorithm id, resume limit, dealing).

use pyo3::prelude::*;

use permshard_core::{Dealing, Version};

use pyo3::exceptions::PyTypeError;

use crate::convert::field;
use crate::errors::to_py;
use crate::exclusion::Exclusions;
use crate::partition::Partition;

#[pyclass(frozen, module = "permshard._core", name = "Sharding")]
pub struct Sharding {
    inner: permshard_core::Sharding,
}

#[pymethods]
impl Sharding {
    /// The core's description of the epoch `config` describes: any object with the
    /// fields of a `ShardConfig` as attributes (the one list of them is Python's).
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<Self> {
        let dealing = Dealing::new(
            &field::<String>(config, "dealing")?,
            field(config, "batch_size")?,
            field(config, "drop_last_batch")?,
        )
        .map_err(to_py)?;
        let inner = permshard_core::Sharding::new(
            field(config, "n")?,
            field(config, "num_replicas")?,
            field(config, "seed")?,
            field(config, "epoch")?,
            field(config, "shuffle")?,
            field(config, "drop_last")?,
            field(config, "block_size")?,
            field(config, "window_blocks")?,
        )
        .map_err(to_py)?
        .with_dealing(dealing)
        .with_permutation(Version::named(&field::<String>(config, "permutation")?).map_err(to_py)?);
        let exclude = config.getattr("exclude")?;
        let inner = match exclude.cast::<Exclusions>() {
            Ok(set) => inner
                .with_exclusions(set.get().inner.clone())
                .map_err(to_py)?,
            Err(_) if exclude.is_none() => inner,
            Err(_) => {
                return Err(PyTypeError::new_err(
                    "the configuration's exclude must be an Exclusions or None",
                ))
            }
        };
        Ok(Sharding { inner })
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

    /// Whether a state recorded under `algorithm` resumes with this order.
    fn accepts_algorithm(&self, algorithm: &str) -> bool {
        self.inner.accepts_algorithm(algorithm)
    }

    /// The split across ranks of positions `[start, ...)`.
    #[pyo3(signature = (start = 0))]
    fn partition(&self, start: u64) -> PyResult<Partition> {
        let inner = self.inner.partition(start).map_err(to_py)?;
        Ok(Partition { inner })
    }
}
