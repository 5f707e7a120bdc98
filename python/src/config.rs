//! `rankscope.Config`: the agent's configuration, made from keyword
//! arguments, a YAML or TOML file, or the environment.

use std::path::PathBuf;

use pyo3::exceptions::PyAttributeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyTuple};
use serde_json::{Map, Value};

use crate::json::{self, Other};
use crate::ConfigError;

/// Every setting of the agent (the keys of DESIGN.md and
/// `RANKSCOPE_<KEY>`). `Config(output_dir="out", gather_timeout_s=30)` starts
/// from the defaults of `preset` (default "development"); an unknown key, a
/// value of the wrong type or out of its range raises `ConfigError` naming it.
#[pyclass(frozen, module = "rankscope._rankscope", name = "Config")]
#[derive(Clone)]
pub struct Config {
    pub(crate) inner: rankscope::Config,
}

#[pymethods]
impl Config {
    #[new]
    #[pyo3(signature = (**keys), text_signature = "(**keys)")]
    fn new(keys: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let inner = rankscope::Config::from_map(key_map(keys)?).map_err(config_error)?;
        Ok(Config { inner })
    }

    /// The configuration of this process: the file `RANKSCOPE_CONFIG`
    /// names (if set), then `RANKSCOPE_*` variables.
    #[staticmethod]
    pub(crate) fn from_env() -> PyResult<Self> {
        let inner = rankscope::Config::from_env().map_err(config_error)?;
        Ok(Config { inner })
    }

    /// The configuration in a YAML (or, by its `.toml` name, TOML) file,
    /// with `RANKSCOPE_*` variables over it.
    #[staticmethod]
    pub(crate) fn from_yaml(path: PathBuf) -> PyResult<Self> {
        let inner = rankscope::Config::load(Some(&path), |name| std::env::var(name).ok())
            .map_err(config_error)?;
        Ok(Config { inner })
    }

    /// The names of every setting.
    #[staticmethod]
    fn keys() -> Vec<String> {
        rankscope::Config::keys()
    }

    /// Every setting and its value.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        json::to_py(py, &self.as_json())
    }

    /// A copy with the given keys changed.
    #[pyo3(signature = (**keys))]
    fn replace(&self, keys: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let Value::Object(mut map) = self.as_json() else {
            unreachable!("Config serializes to a map")
        };
        let changes = key_map(keys)?;
        if changes.contains_key("preset") {
            return Err(ConfigError::new_err(
                "configuration key `preset`: a preset sets the defaults a Config starts from; \
                 make a new Config(preset=..., ...) instead of replacing it",
            ));
        }
        // The preset's defaults are already in the map.
        map.remove("preset");
        map.extend(changes);
        let mut inner = rankscope::Config::from_map(map).map_err(config_error)?;
        inner.preset = self.inner.preset;
        Ok(Config { inner })
    }

    fn __getattr__<'py>(&self, py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        match self.as_json().get(name) {
            Some(value) => json::to_py(py, value),
            None => Err(PyAttributeError::new_err(format!(
                "Config has no setting `{name}`"
            ))),
        }
    }

    fn __eq__<'py>(&self, other: &Bound<'py, PyAny>) -> Bound<'py, PyAny> {
        let py = other.py();
        match other.extract::<PyRef<'_, Config>>() {
            Ok(other) => PyBool::new(py, other.inner == self.inner)
                .to_owned()
                .into_any(),
            Err(_) => py.NotImplemented().into_bound(py),
        }
    }

    /// The settings, the job token (a secret) left out.
    fn __repr__(&self) -> String {
        let mut shown = self.as_json();
        if let Some(token) = shown.get_mut("token").filter(|t| !t.is_null()) {
            *token = Value::String("(set, not shown)".into());
        }
        format!("Config({shown})")
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        // Pickled as `Config(**to_dict())`, for multiprocessing.
        let rebuild = py
            .import("rankscope._rankscope")?
            .getattr("_config_from_dict")?;
        PyTuple::new(
            py,
            [rebuild, PyTuple::new(py, [self.to_dict(py)?])?.into_any()],
        )
    }
}

impl Config {
    fn as_json(&self) -> Value {
        serde_json::to_value(&self.inner).expect("Config serializes")
    }
}

/// Keyword arguments as configuration keys and JSON values.
fn key_map(keys: Option<&Bound<'_, PyDict>>) -> PyResult<Map<String, Value>> {
    let mut map = Map::new();
    if let Some(keys) = keys {
        for item in keys.items().iter() {
            let (key, value): (String, Bound<'_, PyAny>) = item.extract()?;
            let value = key_value(&key, &value)?;
            map.insert(key, value);
        }
    }
    Ok(map)
}

/// The JSON value of configuration key `key`; a Python value of a type no
/// setting takes is refused, naming the key.
fn key_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<Value> {
    json::to_json(value, Other::Refuse).map_err(|e| {
        let reason = e.value(value.py()).to_string();
        ConfigError::new_err(format!("configuration key `{key}`: {reason}"))
    })
}

/// `Config(**keys)`, for unpickling.
#[pyfunction]
pub fn _config_from_dict(keys: &Bound<'_, PyDict>) -> PyResult<Config> {
    Config::new(Some(keys))
}

/// A configuration error as `rankscope.ConfigError`.
pub fn config_error(error: rankscope::ConfigError) -> PyErr {
    ConfigError::new_err(error.to_string())
}
