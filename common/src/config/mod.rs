//! Configuration: one flat struct, built from a preset, then a YAML or TOML
//! file, then `RANKSCOPE_<KEY>` environment variables, each overriding the
//! one before.
//!
//! `types` holds the [`Config`] struct and its presets, `load` the loading
//! and merging, `keys` the numeric keys' ranges and the validation,
//! `diagnostics` the names given to unknown keys and variables.

use std::path::PathBuf;

mod diagnostics;
mod keys;
mod load;
mod types;

pub use diagnostics::{unknown_variables, UnknownVariable};
pub use keys::{NumericKey, NUMERIC_KEYS};
pub use types::{
    Config, DisplayRanks, GpuSourceKind, GpuTiming, Preset, PythonTracing, TorchActivities,
    TransportKind, MAX_TRACE_RANKS,
};

/// An underlying error of a configuration file: YAML, TOML or JSON.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A configuration that could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid YAML / TOML, or holds an unknown key or a bad value.
    #[error("configuration file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// The YAML, TOML or JSON error behind it, where there is one.
        #[source]
        source: Option<Cause>,
    },
    /// An environment variable holds a bad value.
    #[error("environment variable {var}={value:?}: {reason}")]
    Env {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
        /// The error reading the value, where there is one.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// A key given in code (a binding's keyword argument) is no setting,
    /// or its value has the wrong type.
    #[error("configuration key `{key}`: {reason}")]
    Key {
        /// The key.
        key: String,
        /// What is wrong.
        reason: String,
        /// The error reading the value, where there is one.
        #[source]
        source: Option<serde_json::Error>,
    },
    /// A value is out of its range.
    #[error("invalid configuration: {reason}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
}
