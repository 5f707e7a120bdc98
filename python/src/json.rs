//! Python values to and from JSON values: stage metadata, event payloads,
//! tags and configuration keys cross the boundary as JSON.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Value};

/// The deepest nesting converted; deeper values (or a list that holds
/// itself) are cut to a note instead of recursing without end.
const MAX_DEPTH: usize = 32;

/// How values of types JSON has no place for are handled.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Other {
    /// Kept as their `str()` (metadata and payloads: never lose a record).
    AsText,
    /// Refused with a `TypeError` (configuration: a wrong type is an error).
    Refuse,
}

/// `value` as JSON. Path-like objects become their path text; numbers that
/// are not finite become `null` (JSON has no place for them).
pub fn to_json(value: &Bound<'_, PyAny>, other: Other) -> PyResult<Value> {
    convert(value, other, 0)
}

fn convert(value: &Bound<'_, PyAny>, other: Other, depth: usize) -> PyResult<Value> {
    if value.is_none() {
        return Ok(Value::Null);
    }
    if value.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(value.extract()?));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(match value.extract::<i64>() {
            Ok(n) => Value::from(n),
            Err(_) => match value.extract::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::String(value.str()?.to_string()),
            },
        });
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(
            serde_json::Number::from_f64(value.extract()?).map_or(Value::Null, Value::Number)
        );
    }
    if value.is_instance_of::<PyString>() {
        return Ok(Value::String(value.extract()?));
    }
    if depth >= MAX_DEPTH {
        return Ok(Value::String(format!("(nested deeper than {MAX_DEPTH})")));
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (key, item) in dict.iter() {
            let key = match key.cast::<PyString>() {
                Ok(key) => key.to_string(),
                Err(_) => key.str()?.to_string(),
            };
            map.insert(key, convert(&item, other, depth + 1)?);
        }
        return Ok(Value::Object(map));
    }
    if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
        let items = value
            .try_iter()?
            .map(|item| convert(&item?, other, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Value::Array(items));
    }
    if let Ok(path) = value.extract::<std::path::PathBuf>() {
        return Ok(Value::String(path.to_string_lossy().into_owned()));
    }
    // Numbers of other libraries (numpy, torch) say what they are through
    // __index__ and __float__.
    if let Ok(n) = value.extract::<i64>() {
        return Ok(Value::from(n));
    }
    if let Ok(x) = value.extract::<f64>() {
        return Ok(serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number));
    }
    match other {
        Other::AsText => Ok(Value::String(value.str()?.to_string())),
        Other::Refuse => Err(PyTypeError::new_err(format!(
            "a value of type {} has no place in a configuration",
            value.get_type().name()?
        ))),
    }
}

/// `value` as a Python object.
pub fn to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(items) => {
            let items = items
                .iter()
                .map(|item| to_py(py, item))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}
