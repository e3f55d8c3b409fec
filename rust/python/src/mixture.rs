//! `_core.Mixture`: mix-v1 or mix-v2, weighted sources as a map from position to
//! `(source, index)`.

use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use permshard_core::{range_len, MixVersion};

use crate::convert::{alloc, compute, int64_array, non_negative};
use crate::errors::to_py;

/// Two int64 arrays: the sources and the indices.
type Pairs<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

/// A mixture proof as Python receives it: `(positions, per source, complete passes)`.
type ProofTuple = (u64, Vec<u64>, Vec<u64>);

#[pyclass(frozen, module = "permshard._core", name = "Mixture")]
pub struct Mixture {
    inner: permshard_core::Mixture,
}

#[pymethods]
impl Mixture {
    /// `stages[j] = (start, weights)`: the weights from position `start` on (the first
    /// stage starts at 0).
    #[new]
    #[pyo3(signature = (sizes, stages, num_samples = None, seed = 0, algorithm = "mix-v3"))]
    fn new(
        sizes: Vec<u64>,
        stages: Vec<(u64, Vec<f64>)>,
        num_samples: Option<u64>,
        seed: u64,
        algorithm: &str,
    ) -> PyResult<Self> {
        let version = MixVersion::named(algorithm).map_err(to_py)?;
        let inner = permshard_core::Mixture::scheduled(&sizes, &stages, num_samples, seed)
            .map_err(to_py)?
            .with_algorithm(version);
        Ok(Mixture { inner })
    }

    /// The construction's id: `mix-v1`, `mix-v2` or `mix-v3`.
    #[getter]
    fn algorithm(&self) -> &'static str {
        self.inner.algorithm()
    }

    #[getter]
    fn num_samples(&self) -> u64 {
        self.inner.num_samples()
    }

    /// Bytes of the tables of all its passes (0 for mix-v1).
    #[getter]
    fn table_bytes(&self) -> u64 {
        self.inner.table_bytes()
    }

    /// Bytes of tables its store keeps in this process.
    #[getter]
    fn table_store_bytes(&self) -> u64 {
        self.inner.table_store_bytes()
    }

    /// `(source, index)` at `position`.
    fn at(&self, position: u64) -> PyResult<(usize, u64)> {
        self.inner.at(position).map_err(to_py)
    }

    /// Sources and indices at positions `[start, stop)`.
    fn take<'py>(&self, py: Python<'py>, start: u64, stop: u64) -> PyResult<Pairs<'py>> {
        let count = range_len(start, stop, self.inner.num_samples()).map_err(to_py)?;
        let (mut sources, mut indices) = (alloc(count)?, alloc(count)?);
        compute(py, count, || {
            self.inner.fill(start, &mut sources, &mut indices)
        })
        .map_err(to_py)?;
        as_arrays(py, sources, indices)
    }

    /// Sources and indices at the given positions (any order): an int64 array (read in
    /// place) or a sequence of ints.
    fn at_positions<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Pairs<'py>> {
        let positions: Vec<u64> = match positions.cast::<PyArray1<i64>>() {
            Ok(array) => non_negative(array.readonly().as_slice()?, "a position")?,
            Err(_) => positions.extract()?,
        };
        let count = positions.len() as u64;
        let (mut sources, mut indices) = (alloc(count)?, alloc(count)?);
        compute(py, count, || {
            self.inner.fill_at(&positions, &mut sources, &mut indices)
        })
        .map_err(to_py)?;
        as_arrays(py, sources, indices)
    }

    /// The shortest length that reads every weighted source in full.
    fn covering_length(&self) -> u64 {
        self.inner.covering_length()
    }

    /// How many of the positions `[0, n)` each source takes.
    fn counts(&self, n: u64) -> Vec<u64> {
        self.inner.counts(n)
    }

    /// Proves positions `[start, stop)` by the inverse: `(positions, per source, complete
    /// passes per source)`, or ShardingError.
    fn prove(&self, py: Python<'_>, start: u64, stop: u64) -> PyResult<ProofTuple> {
        let proof = py
            .detach(|| self.inner.prove_range(start, stop))
            .map_err(to_py)?;
        Ok((proof.positions, proof.per_source, proof.complete_passes))
    }

    /// Proves pass `pass_` of `source`, wherever its positions lie.
    fn prove_pass(&self, py: Python<'_>, source: usize, pass_: u64) -> PyResult<ProofTuple> {
        let proof = py
            .detach(|| self.inner.prove_pass(source, pass_))
            .map_err(to_py)?;
        Ok((proof.positions, proof.per_source, proof.complete_passes))
    }

    /// Every position at which `(source, index)` appears.
    fn locate(&self, py: Python<'_>, source: usize, index: u64) -> PyResult<Vec<u64>> {
        py.detach(|| self.inner.locate(source, index))
            .map_err(to_py)
    }
}

/// Sources and sample indices as int64 arrays (sources are fewer than 2^63, and so are
/// the samples of the datasets they index).
fn as_arrays(py: Python<'_>, sources: Vec<u64>, indices: Vec<u64>) -> PyResult<Pairs<'_>> {
    Ok((
        int64_array(py, 1 << 63, sources)?,
        int64_array(py, 1 << 63, indices)?,
    ))
}
