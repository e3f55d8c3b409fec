//! Conversions shared by the classes: buffers, int64 arrays, the GIL around heavy work,
//! and the `take(start, stop)` of any order.

use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyMemoryError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict};

use permshard_core::{
    fields_of, range_len, EpochSpec, Field, FieldDefault, FieldKind, SampleOrder, Version,
};

use crate::errors::to_py;

/// Below this many items, computing is cheaper than releasing and retaking the GIL.
const DETACH_MIN: u64 = 4096;

/// Runs `work` on `items` items, with the GIL released when there are enough of them.
pub fn compute<T: Send>(py: Python<'_>, items: u64, work: impl FnOnce() -> T + Send) -> T {
    if items >= DETACH_MIN {
        py.detach(work)
    } else {
        work()
    }
}

/// A zeroed buffer of `len` items, or `MemoryError` (never an abort) when it cannot be had.
pub fn alloc(len: u64) -> PyResult<Vec<u64>> {
    let fail = || PyMemoryError::new_err(format!("cannot allocate {len} indices; ask for fewer"));
    let len = usize::try_from(len).map_err(|_| fail())?;
    let mut out = Vec::new();
    out.try_reserve_exact(len).map_err(|_| fail())?;
    out.resize(len, 0);
    Ok(out)
}

/// Values of a domain of `n` items as a new int64 array; refuses domains whose values
/// may not fit (the cast is then exact).
pub fn int64_array(py: Python<'_>, n: u64, values: Vec<u64>) -> PyResult<Bound<'_, PyArray1<i64>>> {
    if n > 1 << 63 {
        return Err(PyValueError::new_err(format!(
            "int64 cannot hold the values of n={n} > 2**63; use the list-returning \
             variant (take_list) or index instead"
        )));
    }
    let values: Vec<i64> = values.into_iter().map(|v| v as i64).collect();
    Ok(values.into_pyarray(py))
}

/// The samples of `order` at positions `[start, stop)`.
pub fn take_order(
    py: Python<'_>,
    order: &dyn SampleOrder,
    start: u64,
    stop: u64,
) -> PyResult<Vec<u64>> {
    let len = range_len(start, stop, order.len()).map_err(to_py)?;
    let mut out = alloc(len)?;
    compute(py, len, || order.fill(start, &mut out).map(|_| out)).map_err(to_py)
}

/// An int64 array's values as `u64`, or ValueError naming `what` when one is negative.
pub fn non_negative(values: &[i64], what: &str) -> PyResult<Vec<u64>> {
    // The check first, in one branch-free pass (vectorised), then the copy.
    if values.iter().fold(0, |any, &v| any | v) < 0 {
        let v = values.iter().find(|&&v| v < 0).expect("a negative value");
        return Err(PyValueError::new_err(format!(
            "{what} must be >= 0, got {v}"
        )));
    }
    Ok(values.iter().map(|&v| v as u64).collect())
}

/// The keyword arguments of an epoch's configuration, read by the core's table of the
/// family's fields: each converted once, with the message Python's checks give, the
/// table's default where one is not given, and an unknown keyword refused.
pub struct Fields<'py> {
    given: Option<Bound<'py, PyDict>>,
    table: Vec<Field>,
}

impl<'py> Fields<'py> {
    /// The fields of a configuration object of `family` (a `BudgetConfig`): its
    /// attributes the table names.
    pub fn of_object(family: &str, config: &Bound<'py, PyAny>) -> PyResult<Self> {
        let given = PyDict::new(config.py());
        for f in fields_of(family).expect("a family of the core") {
            given.set_item(f.name, config.getattr(f.name)?)?;
        }
        Fields::new(family, Some(given))
    }

    /// The keywords `given` of a configuration of `family` (`"shard"`, `"budget"`).
    pub fn new(family: &str, given: Option<Bound<'py, PyDict>>) -> PyResult<Self> {
        let table = fields_of(family).expect("a family of the core");
        if let Some(given) = &given {
            for key in given.keys() {
                let key: String = key.extract()?;
                if !table.iter().any(|f| f.name == key) {
                    return Err(PyTypeError::new_err(format!(
                        "an epoch's configuration has no field {key:?}"
                    )));
                }
            }
        }
        Ok(Fields { given, table })
    }

    fn field(&self, name: &str) -> &Field {
        self.table
            .iter()
            .find(|f| f.name == name)
            .expect("a field of the table")
    }

    fn value(&self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        match &self.given {
            Some(given) => given.get_item(name),
            None => Ok(None),
        }
    }

    /// An integer field (`Count`: `>= 0`, `Positive`: `>= 1`), below `2**64`.
    pub fn int(&self, name: &str) -> PyResult<u64> {
        let f = self.field(name);
        let Some(value) = self.value(name)? else {
            return match f.default {
                FieldDefault::Int(v) => Ok(v),
                _ => Err(PyTypeError::new_err(format!(
                    "missing the required argument {}",
                    f.argument()
                ))),
            };
        };
        let arg = f.argument();
        if value.is_instance_of::<PyBool>() {
            return Err(PyTypeError::new_err(format!(
                "{arg} must be an integer, got the bool {}",
                value.repr()?
            )));
        }
        let number = value.call_method0("__index__").map_err(|_| {
            let kind = value
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default();
            let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
            PyTypeError::new_err(format!("{arg} must be an integer, got {kind} {repr}"))
        })?;
        let minimum = u64::from(f.kind == FieldKind::Positive);
        match number.extract::<u64>() {
            Ok(v) if v >= minimum => Ok(v),
            _ if f.kind == FieldKind::Positive => Err(PyValueError::new_err(format!(
                "{arg} should be a positive integer below 2**64, got {number}"
            ))),
            _ => Err(PyValueError::new_err(format!(
                "{arg} must be in [{minimum}, 2**64 - 1], got {number}"
            ))),
        }
    }

    /// A flag field: the truth of the value given.
    pub fn flag(&self, name: &str) -> PyResult<bool> {
        match (self.value(name)?, self.field(name).default) {
            (Some(value), _) => value.is_truthy(),
            (None, FieldDefault::Flag(v)) => Ok(v),
            (None, _) => Ok(false),
        }
    }

    /// A choice field, as given (the core names the choices when it refuses one).
    pub fn choice(&self, name: &str) -> PyResult<String> {
        let f = self.field(name);
        match (self.value(name)?, f.default) {
            (Some(value), _) => value.extract::<String>().map_err(|_| {
                let repr = value.repr().map(|r| r.to_string()).unwrap_or_default();
                let choices: Vec<String> = f.choices.iter().map(|c| format!("{c:?}")).collect();
                PyTypeError::new_err(format!(
                    "{} must be a str ({}), got {repr}",
                    f.argument(),
                    choices.join(" or ").replace('"', "'")
                ))
            }),
            (None, FieldDefault::Str(v)) => Ok(v.to_string()),
            (None, _) => Ok(String::new()),
        }
    }

    /// An object field as given (`None` when absent or `None`).
    pub fn object(&self, name: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
        Ok(self.value(name)?.filter(|v| !v.is_none()))
    }

    /// The fields every epoch has, converted and checked.
    pub fn epoch_spec(&self) -> PyResult<EpochSpec> {
        let permutation = Version::named(&self.choice("permutation")?).map_err(to_py)?;
        EpochSpec {
            n: self.int("n")?,
            num_replicas: self.int("num_replicas")?,
            seed: self.int("seed")?,
            epoch: self.int("epoch")?,
            shuffle: self.flag("shuffle")?,
            drop_last: self.flag("drop_last")?,
            permutation,
        }
        .checked()
        .map_err(to_py)
    }
}
