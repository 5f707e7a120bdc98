//! Python values to and from JSON values: stage metadata, event payloads,
//! tags and configuration keys cross the boundary as JSON.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};
use serde_json::{Map, Value};

/// The deepest nesting converted; deeper values are cut to a note.
const MAX_DEPTH: usize = 32;
/// The most values converted in one call; past that, the rest are cut to a
/// note. Bounds the work on a list that holds itself (twice) or a large
/// shared structure, which nesting alone does not.
const MAX_VALUES: usize = 10_000;

/// How values of types JSON has no place for are handled.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Other {
    /// Kept as their `str()` (metadata and payloads: never lose a record).
    AsText,
    /// Refused with a `TypeError` (configuration: a wrong type is an error).
    Refuse,
}

/// `value` as JSON. Mappings become objects (their items read once, so a
/// mapping changed meanwhile cannot break the conversion), lists and tuples
/// arrays, path-like objects their path text; strings that are not valid
/// Unicode keep their valid part. With [`Other::AsText`], numbers that are
/// not finite become `null` and anything else its `str()`.
pub fn to_json(value: &Bound<'_, PyAny>, other: Other) -> PyResult<Value> {
    Converter {
        other,
        left: MAX_VALUES,
    }
    .convert(value, 0)
}

struct Converter {
    other: Other,
    /// Values still to be converted before the rest is cut.
    left: usize,
}

impl Converter {
    /// `value` as JSON, `depth` levels down, within what is left of the
    /// values to convert.
    fn convert(&mut self, value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
        if self.left == 0 {
            return Ok(Value::String(format!(
                "(cut: more than {MAX_VALUES} values)"
            )));
        }
        self.left -= 1;
        if let Some(scalar) = self.scalar(value)? {
            return Ok(scalar);
        }
        if depth >= MAX_DEPTH {
            return Ok(Value::String(format!(
                "(cut: nested deeper than {MAX_DEPTH})"
            )));
        }
        if let Some(items) = mapping_items(value)? {
            return self.object(&items, depth);
        }
        if value.is_instance_of::<PyList>() || value.is_instance_of::<PyTuple>() {
            return self.array(value, depth);
        }
        self.foreign(value)
    }

    /// `None`, a bool, an int, a float or a str as JSON; `None` for any
    /// other value.
    fn scalar(&self, value: &Bound<'_, PyAny>) -> PyResult<Option<Value>> {
        if value.is_none() {
            return Ok(Some(Value::Null));
        }
        if value.is_instance_of::<PyBool>() {
            return Ok(Some(Value::Bool(value.extract()?)));
        }
        if value.is_instance_of::<PyInt>() {
            if let Ok(n) = value.extract::<i64>() {
                return Ok(Some(Value::from(n)));
            }
            if let Ok(n) = value.extract::<u64>() {
                return Ok(Some(Value::from(n)));
            }
            return self
                .other(value, "an integer out of the 64-bit range")
                .map(Some);
        }
        if value.is_instance_of::<PyFloat>() {
            return self.float(value, value.extract()?).map(Some);
        }
        if let Ok(text) = value.cast::<PyString>() {
            return Ok(Some(Value::String(text.to_string_lossy().into_owned())));
        }
        Ok(None)
    }

    /// A mapping's `items` (key, value pairs) as a JSON object, its keys as
    /// text.
    fn object(&mut self, items: &Bound<'_, PyList>, depth: usize) -> PyResult<Value> {
        let mut map = Map::new();
        for item in items.iter() {
            let (key, item): (Bound<'_, PyAny>, Bound<'_, PyAny>) = item.extract()?;
            let key = match key.cast::<PyString>() {
                Ok(key) => key.to_string_lossy().into_owned(),
                Err(_) => key.str()?.to_string_lossy().into_owned(),
            };
            map.insert(key, self.convert(&item, depth + 1)?);
        }
        Ok(Value::Object(map))
    }

    /// A list or tuple as a JSON array.
    fn array(&mut self, value: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
        let items: Vec<Bound<'_, PyAny>> = value.try_iter()?.collect::<PyResult<_>>()?;
        let items = items
            .iter()
            .map(|item| self.convert(item, depth + 1))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Value::Array(items))
    }

    /// A value of no JSON kind: a path-like object's path text, a number of
    /// another library, else [`Converter::other`].
    fn foreign(&self, value: &Bound<'_, PyAny>) -> PyResult<Value> {
        if let Ok(path) = value.extract::<std::path::PathBuf>() {
            return Ok(Value::String(path.to_string_lossy().into_owned()));
        }
        // Numbers of other libraries (numpy, torch) say what they are through
        // __index__ and __float__.
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Value::from(n));
        }
        if let Ok(x) = value.extract::<f64>() {
            return self.float(value, x);
        }
        let kind = value.get_type().name()?.to_string();
        self.other(value, &format!("a value of type {kind}"))
    }

    fn float(&self, value: &Bound<'_, PyAny>, x: f64) -> PyResult<Value> {
        match serde_json::Number::from_f64(x) {
            Some(number) => Ok(Value::Number(number)),
            None if self.other == Other::AsText => Ok(Value::Null),
            None => self.other(value, &format!("{x}, not a finite number,")),
        }
    }

    /// A value JSON has no place for: its text, or a `TypeError`.
    fn other(&self, value: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
        match self.other {
            Other::AsText => Ok(Value::String(value.str()?.to_string_lossy().into_owned())),
            Other::Refuse => Err(PyTypeError::new_err(format!(
                "{what} has no place in a configuration"
            ))),
        }
    }
}

/// The items of a dict or other mapping, read once; `None` for any other
/// value.
fn mapping_items<'py>(value: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyList>>> {
    Ok(match value.cast::<PyDict>() {
        Ok(dict) => Some(dict.items()),
        Err(_) => match value.cast::<PyMapping>() {
            Ok(mapping) => Some(mapping.items()?),
            Err(_) => None,
        },
    })
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
