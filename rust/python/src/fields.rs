//! The core's tables of an epoch's fields, as Python dicts.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use permshard_core::{fields_of, FieldDefault, FieldKind};

/// The fields of `family` (`"shard"` or `"budget"`), in order: each a dict of `name`,
/// `kind` (`"count"`, `"positive"`, `"flag"`, `"choice"`, `"ids"`), `required`,
/// `default`, `help`, `flags`, `metavar`, `choices` and `dealing`.
#[pyfunction]
pub fn fields<'py>(py: Python<'py>, family: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let table = fields_of(family).ok_or_else(|| {
        PyValueError::new_err(format!("no epoch family {family:?}: 'shard' or 'budget'"))
    })?;
    table
        .iter()
        .map(|f| {
            let d = PyDict::new(py);
            d.set_item("name", f.name)?;
            let kind = match f.kind {
                FieldKind::Count => "count",
                FieldKind::Positive => "positive",
                FieldKind::Flag => "flag",
                FieldKind::Choice => "choice",
                FieldKind::Ids => "ids",
            };
            d.set_item("kind", kind)?;
            d.set_item("required", f.default == FieldDefault::Required)?;
            match f.default {
                FieldDefault::Int(v) => d.set_item("default", v)?,
                FieldDefault::Flag(v) => d.set_item("default", v)?,
                FieldDefault::Str(v) => d.set_item("default", v)?,
                FieldDefault::Required | FieldDefault::Nothing => {
                    d.set_item("default", py.None())?
                }
            }
            d.set_item("help", f.help)?;
            d.set_item("flags", f.flags.to_vec())?;
            d.set_item("metavar", (!f.metavar.is_empty()).then_some(f.metavar))?;
            d.set_item("choices", f.choices.to_vec())?;
            d.set_item("dealing", f.dealing)?;
            Ok(d)
        })
        .collect()
}
