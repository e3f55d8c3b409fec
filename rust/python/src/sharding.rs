//! `_core.Sharding`: what an epoch is (fields, order, algorithm id, resume limit, dealing).

use pyo3::prelude::*;

use permshard_core::Dealing;

use crate::errors::to_py;
use crate::partition::Partition;

#[pyclass(frozen, module = "permshard._core", name = "Sharding")]
pub struct Sharding {
    inner: permshard_core::Sharding,
}

#[pymethods]
impl Sharding {
    #[new]
    #[pyo3(signature = (n, num_replicas, *, seed = 0, epoch = 0, shuffle = true, drop_last = false, block_size = 0, window_blocks = 0, dealing = "round-robin", batch_size = 0, drop_last_batch = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        n: u64,
        num_replicas: u64,
        seed: u64,
        epoch: u64,
        shuffle: bool,
        drop_last: bool,
        block_size: u64,
        window_blocks: u64,
        dealing: &str,
        batch_size: u64,
        drop_last_batch: bool,
    ) -> PyResult<Self> {
        let dealing = Dealing::new(dealing, batch_size, drop_last_batch).map_err(to_py)?;
        let inner = permshard_core::Sharding::new(
            n,
            num_replicas,
            seed,
            epoch,
            shuffle,
            drop_last,
            block_size,
            window_blocks,
        )
        .map_err(to_py)?
        .with_dealing(dealing);
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
