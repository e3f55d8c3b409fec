//! `_core.Sharding`: what an epoch is (fields, order, algorithm id, resume limit, layouts).

use pyo3::prelude::*;

use crate::errors::to_py;
use crate::partition::Partition;

#[pyclass(frozen, module = "permshard._core", name = "Sharding")]
pub struct Sharding {
    inner: permshard_core::Sharding,
}

#[pymethods]
impl Sharding {
    #[new]
    #[pyo3(signature = (n, num_replicas, *, seed = 0, epoch = 0, shuffle = true, drop_last = false, block_size = 0, window_blocks = 0))]
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
    ) -> PyResult<Self> {
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
        .map_err(to_py)?;
        Ok(Sharding { inner })
    }

    /// The algorithm id of the order used.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
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

    /// `(first, count)`: the global positions rank `rank` takes at `step` (step layout).
    fn step_positions(
        &self,
        start: u64,
        num_samples: u64,
        rank: u64,
        step: u64,
        batch_size: u64,
    ) -> PyResult<(u64, u64)> {
        self.inner
            .step_positions(start, num_samples, rank, step, batch_size)
            .map_err(to_py)
    }
}
