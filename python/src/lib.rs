//! The native module of the `rankscope` Python package: the agent's
//! profiler, stages and sessions for Python ranks. The pure-Python layer in
//! `python/rankscope/` adds decorators and the PyTorch integration.

mod config;
mod function_trace;
mod json;
mod profiler;

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    rankscope,
    ConfigError,
    PyValueError,
    "A configuration key, file or variable is invalid; the message names it."
);
pyo3::create_exception!(
    rankscope,
    SessionError,
    PyRuntimeError,
    "A session could not start or finish."
);

#[pymodule]
fn _rankscope(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<config::Config>()?;
    m.add_class::<profiler::Profiler>()?;
    m.add_class::<profiler::Stage>()?;
    m.add_class::<profiler::Session>()?;
    m.add_class::<profiler::Outcome>()?;
    m.add_function(wrap_pyfunction!(config::_config_from_dict, m)?)?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("SessionError", m.py().get_type::<SessionError>())?;
    m.add(
        "__all__",
        [
            "Config",
            "ConfigError",
            "Outcome",
            "Profiler",
            "Session",
            "SessionError",
            "Stage",
        ],
    )?;
    Ok(())
}
