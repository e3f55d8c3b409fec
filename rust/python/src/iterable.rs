//! `_core.Consumer`, `_core.Layer`: an iterable dealt to ranks × DataLoader workers, and
//! what a run before a resume took of it.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use permshard_core::Spread;

use crate::errors::to_py;
use crate::state::{from_mapping, to_dict};

#[pyclass(frozen, module = "permshard._core", name = "Consumer")]
pub struct Consumer {
    inner: permshard_core::Consumer,
}

#[pymethods]
impl Consumer {
    /// DataLoader worker `worker` of `workers` on rank `rank` of `ranks`.
    #[new]
    fn new(rank: u64, ranks: u64, worker: u64, workers: u64) -> PyResult<Self> {
        let inner = permshard_core::Consumer::new(rank, ranks, worker, workers).map_err(to_py)?;
        Ok(Consumer { inner })
    }

    #[getter]
    fn rank(&self) -> u64 {
        self.inner.rank
    }

    #[getter]
    fn ranks(&self) -> u64 {
        self.inner.ranks
    }

    #[getter]
    fn worker(&self) -> u64 {
        self.inner.worker
    }

    #[getter]
    fn workers(&self) -> u64 {
        self.inner.workers
    }

    /// This consumer's index among all: `rank * workers + worker`.
    #[getter]
    fn index(&self) -> u64 {
        self.inner.index()
    }

    /// Consumers in all: `ranks * workers`.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count()
    }

    fn __repr__(&self) -> String {
        let c = &self.inner;
        format!(
            "Consumer(rank={}, ranks={}, worker={}, workers={})",
            c.rank, c.ranks, c.worker, c.workers
        )
    }
}

/// How a fresh run over `shards` shards (`None`: a stream of elements) deals to `ranks`:
/// `"shards"` (whole shards to each rank) or `"stride"`.
#[pyfunction]
#[pyo3(signature = (shards, ranks, even))]
pub fn fresh_spread(shards: Option<u64>, ranks: u64, even: bool) -> &'static str {
    Spread::of_fresh_run(shards, ranks, even).name()
}

#[pyclass(frozen, module = "permshard._core", name = "Layer")]
pub struct Layer {
    inner: permshard_core::Layer,
    left: permshard_core::Left,
}

impl Layer {
    fn of(inner: permshard_core::Layer) -> Self {
        let left = inner.left();
        Layer { inner, left }
    }
}

#[pymethods]
impl Layer {
    /// A run that dealt by `dealt` (`"stride"` or `"shards"`) to `ranks` × `workers`
    /// consumers, whose loops took `batches` batches of `batch_size` on every rank.
    #[new]
    fn new(dealt: &str, ranks: u64, workers: u64, batch_size: u64, batches: u64) -> PyResult<Self> {
        let spread = Spread::of_name(dealt).map_err(to_py)?;
        let inner = permshard_core::Layer::new(spread, ranks, workers, batch_size, batches)
            .map_err(to_py)?;
        Ok(Layer::of(inner))
    }

    /// The layer a state dict's `layers` entry records, checked.
    #[staticmethod]
    fn from_state(state: &Bound<'_, PyAny>) -> PyResult<Self> {
        let inner = permshard_core::Layer::from_state(&from_mapping(state)?).map_err(to_py)?;
        Ok(Layer::of(inner))
    }

    /// This layer as a state dict's `layers` entry.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        to_dict(py, self.inner.state())
    }

    /// `"stride"` or `"shards"`.
    #[getter]
    fn dealt(&self) -> &'static str {
        self.inner.spread.name()
    }

    /// The rank whose stream held shard `shard` (a shards layer).
    fn rank_of_shard(&self, shard: u64) -> u64 {
        self.inner.rank_of_shard(shard)
    }

    /// Every element of a stream before it was taken by this layer.
    #[getter]
    fn taken_below(&self) -> u64 {
        self.left.taken_below
    }

    /// Every element of a stream from it on was left by this layer.
    #[getter]
    fn kept_from(&self) -> u64 {
        self.left.kept_from
    }

    /// Whether element `i` of a stream (its input, or a rank's shards) was left.
    fn keeps(&self, i: u64) -> bool {
        self.left.keeps(i)
    }

    fn __repr__(&self) -> String {
        let l = &self.inner;
        format!(
            "Layer(dealt={:?}, ranks={}, workers={}, batch_size={}, batches={})",
            l.spread.name(),
            l.ranks,
            l.workers,
            l.batch_size,
            l.batches
        )
    }
}

/// Refuses `layers` unless only the first dealt whole shards.
#[pyfunction]
pub fn check_layers(layers: Vec<PyRef<'_, Layer>>) -> PyResult<()> {
    let layers: Vec<permshard_core::Layer> = layers.iter().map(|l| l.inner).collect();
    permshard_core::check_layers(&layers).map_err(to_py)
}
