//! State dicts between Python and the core: a mapping's values as the core's `Value`s
//! and back. Which keys there are, their types and their checks are the core's.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyList, PyMapping, PyString, PyTuple};

use permshard_core::{Value, Version};

/// The items of `state`, a mapping, as the core reads them.
pub fn from_mapping(state: &Bound<'_, PyAny>) -> PyResult<Vec<(String, Value)>> {
    let mapping = state.cast::<PyMapping>().map_err(|_| {
        PyTypeError::new_err(format!(
            "state_dict must be a mapping, got {}",
            state
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let mut items = Vec::new();
    for item in mapping.items()?.iter() {
        let (key, value): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
        let key = match key.cast::<PyString>() {
            Ok(s) => s.to_string(),
            Err(_) => key.repr()?.to_string(),
        };
        items.push((key, to_value(&value)?));
    }
    Ok(items)
}

/// `value` as the core's [`Value`]: ints (any object with `__index__` but a bool), bools,
/// strings, lists or tuples of ints; anything else by its type and repr, for the error.
fn to_value(value: &Bound<'_, PyAny>) -> PyResult<Value> {
    if let Ok(flag) = value.cast::<PyBool>() {
        return Ok(Value::Bool(flag.is_true()));
    }
    if let Some(int) = as_int(value) {
        return Ok(Value::Int(int));
    }
    if let Ok(text) = value.cast::<PyString>() {
        return Ok(Value::Str(text.to_string()));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let ids: Option<Vec<i128>> = value
            .try_iter()?
            .map(|item| {
                item.ok()
                    .filter(|i| !i.is_instance_of::<PyBool>())
                    .and_then(|i| as_int(&i))
            })
            .collect();
        if let Some(ids) = ids {
            return Ok(Value::Ids(ids));
        }
        if let Some(rows) = as_rows(value)? {
            return Ok(Value::Rows(rows));
        }
    }
    Ok(Value::Other {
        type_name: value.get_type().name()?.to_string(),
        repr: value.repr()?.to_string(),
    })
}

/// A list (or tuple) of lists of ints, or `None`.
fn as_rows(value: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Vec<i128>>>> {
    let mut rows = Vec::new();
    for row in value.try_iter()? {
        let row = row?;
        if !(row.is_instance_of::<PyList>() || row.is_instance_of::<PyTuple>()) {
            return Ok(None);
        }
        match to_value(&row)? {
            Value::Ids(ints) => rows.push(ints),
            _ => return Ok(None),
        }
    }
    Ok(Some(rows))
}

/// An int, or an object with `__index__` (numpy's ints), within `i128`.
fn as_int(value: &Bound<'_, PyAny>) -> Option<i128> {
    if value.is_instance_of::<PyInt>() {
        return value.extract().ok();
    }
    if value.hasattr("__index__").unwrap_or(false) {
        return value.call_method0("__index__").ok()?.extract().ok();
    }
    None
}

/// A state the core wrote, as a dict in its order.
pub fn to_dict<'py>(
    py: Python<'py>,
    state: Vec<(&'static str, Value)>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for (key, value) in state {
        match value {
            Value::Int(v) => dict.set_item(key, v)?,
            Value::Bool(v) => dict.set_item(key, v)?,
            Value::Str(v) => dict.set_item(key, v)?,
            Value::Ids(v) => dict.set_item(key, v)?,
            Value::Rows(v) => dict.set_item(key, v)?,
            Value::Other { repr, .. } => dict.set_item(key, repr)?,
        }
    }
    Ok(dict)
}

/// The keyword arguments of a configuration from an epoch's saved `values`: the
/// permutation its algorithm is built on instead of the algorithm id.
pub fn config_fields<'py>(
    py: Python<'py>,
    values: Vec<(&'static str, Value)>,
    permutation: Version,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = to_dict(py, values)?;
    dict.del_item("algorithm")?;
    dict.set_item("permutation", permutation.algorithm())?;
    Ok(dict)
}
