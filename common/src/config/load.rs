//! Loading a configuration: a preset's defaults, then a YAML or TOML file,
//! then `RANKSCOPE_<KEY>` environment variables (or keys given in code),
//! each merged over the one before and checked.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::diagnostics::{no_such_setting, unknown_variables};
use super::{Config, ConfigError, Preset};

/// The largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

impl Config {
    /// Loads the configuration of this process: the file named by
    /// `RANKSCOPE_CONFIG` (if set), then `RANKSCOPE_*` variables. A
    /// `RANKSCOPE_*` variable that is no key (a misspelling) gets one
    /// warning per process, naming the closest key.
    pub fn from_env() -> Result<Self, ConfigError> {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            for unknown in unknown_variables(std::env::vars_os().map(|(name, _)| name)) {
                let text = unknown.to_string();
                eprintln!("rankscope: warning: {}", crate::text::terminal(&text));
            }
        });
        check_utf8(std::env::vars_os())?;
        Self::load(
            std::env::var_os("RANKSCOPE_CONFIG")
                .map(PathBuf::from)
                .as_deref(),
            |name| std::env::var(name).ok(),
        )
    }

    /// A configuration from keys given in code (a binding's keyword
    /// arguments): the defaults of the `preset` key (if given), each other
    /// key over them, then the ranges checked. An unknown key is named with
    /// the closest known one; a value of the wrong type is named with its key.
    pub fn from_map(keys: Map<String, Value>) -> Result<Self, ConfigError> {
        let preset = match keys.get("preset") {
            Some(value) => serde_json::from_value(value.clone()).map_err(|e| ConfigError::Key {
                key: "preset".into(),
                reason: e.to_string(),
                source: Some(e),
            })?,
            None => Preset::default(),
        };
        let mut merged = Config::preset(preset).as_keys();
        for (key, value) in keys {
            if !merged.contains_key(&key) {
                return Err(ConfigError::Key {
                    reason: no_such_setting(&key, merged.keys()),
                    key,
                    source: None,
                });
            }
            merged.insert(key.clone(), value);
            if let Err(e) = from_keys(merged.clone()) {
                return Err(ConfigError::Key {
                    key,
                    reason: e.to_string(),
                    source: Some(e),
                });
            }
        }
        let config = from_keys(merged).expect("every key was checked");
        config.validate()?;
        Ok(config)
    }

    /// Loads from an optional file and environment variables given by `var`.
    pub fn load(
        file: Option<&Path>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let file_keys = match file {
            Some(path) => read_file(path)?,
            None => Map::new(),
        };
        let file_set: Vec<String> = file_keys.keys().cloned().collect();
        let preset = preset_of(file, &file_keys, &var)?;
        let mut keys = Config::preset(preset).as_keys();
        keys.extend(file_keys);
        let config: Config = from_keys(keys.clone()).map_err(|e| ConfigError::File {
            path: file.unwrap_or(Path::new("")).to_path_buf(),
            reason: e.to_string(),
            source: Some(Box::new(e)),
        })?;
        apply_env(&mut keys, &var)?;
        let config = if keys.is_empty() {
            config
        } else {
            from_keys(keys).expect("every key was checked")
        };
        config
            .validate()
            .map_err(|error| named_where_set(error, file, &file_set, &var))?;
        Ok(config)
    }
}

/// The preset to start from: `RANKSCOPE_PRESET`, else the file's `preset`
/// key, else the default.
fn preset_of(
    file: Option<&Path>,
    file_keys: &Map<String, Value>,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<Preset, ConfigError> {
    match var("RANKSCOPE_PRESET") {
        Some(value) => parse_env_value::<Preset>("RANKSCOPE_PRESET", &value),
        None => match file_keys.get("preset") {
            Some(value) => serde_json::from_value(value.clone()).map_err(|e| ConfigError::File {
                path: file.unwrap_or(Path::new("")).to_path_buf(),
                reason: format!("key `preset`: {e}"),
                source: Some(Box::new(e)),
            }),
            None => Ok(Preset::default()),
        },
    }
}

/// Each key's `RANKSCOPE_<KEY>` variable, where set, over `keys`: the first
/// typed reading of its value the configuration accepts.
fn apply_env(
    keys: &mut Map<String, Value>,
    var: &impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let names: Vec<String> = keys.keys().cloned().collect();
    for key in names {
        let name = format!("RANKSCOPE_{}", key.to_uppercase());
        let Some(value) = var(&name) else { continue };
        let accepted = env_candidates(&value).into_iter().find(|candidate| {
            let mut trial = keys.clone();
            trial.insert(key.clone(), candidate.clone());
            from_keys(trial).is_ok()
        });
        match accepted {
            Some(candidate) => {
                keys.insert(key, candidate);
            }
            None => {
                let mut trial = keys.clone();
                trial.insert(key, Value::String(value.clone()));
                let source = from_keys(trial).err();
                return Err(ConfigError::Env {
                    var: name,
                    value,
                    reason: source.as_ref().map(ToString::to_string).unwrap_or_default(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// A value out of its range named where it was set: its variable, else
/// the file that set it.
fn named_where_set(
    error: ConfigError,
    file: Option<&Path>,
    file_set: &[String],
    var: &impl Fn(&str) -> Option<String>,
) -> ConfigError {
    let ConfigError::Invalid { key, reason } = error else {
        return error;
    };
    let name = format!("RANKSCOPE_{}", key.to_uppercase());
    match (var(&name), file) {
        (Some(value), _) => ConfigError::Env {
            var: name,
            value,
            reason,
            source: None,
        },
        (None, Some(path)) if file_set.iter().any(|k| k == key) => ConfigError::File {
            path: path.to_path_buf(),
            reason,
            source: None,
        },
        _ => ConfigError::Invalid { key, reason },
    }
}

/// Refuses a `RANKSCOPE_*` variable whose value is not UTF-8, which would
/// otherwise read as unset.
fn check_utf8(
    vars: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Result<(), ConfigError> {
    for (name, value) in vars {
        let name = name.to_string_lossy();
        if name.starts_with("RANKSCOPE_") && value.to_str().is_none() {
            return Err(ConfigError::Env {
                var: name.into_owned(),
                value: value.to_string_lossy().into_owned(),
                reason: "the value is not valid UTF-8".into(),
                source: None,
            });
        }
    }
    Ok(())
}

/// A configuration from a map of all its keys.
fn from_keys(keys: Map<String, Value>) -> Result<Config, serde_json::Error> {
    serde_json::from_value(Value::Object(keys))
}

/// An enumerated setting's value from environment variable `var`.
fn parse_env_value<T: serde::de::DeserializeOwned>(
    var: &str,
    value: &str,
) -> Result<T, ConfigError> {
    serde_json::from_value(Value::String(value.to_lowercase())).map_err(|e| ConfigError::Env {
        var: var.to_string(),
        value: value.to_string(),
        reason: e.to_string(),
        source: Some(e),
    })
}

/// The typed readings of an environment string, most specific first.
fn env_candidates(value: &str) -> Vec<Value> {
    let mut out = Vec::new();
    match value.trim().to_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => out.push(Value::Bool(true)),
        "0" | "false" | "no" | "off" => out.push(Value::Bool(false)),
        _ => {}
    }
    if let Ok(number) = value.trim().parse::<u64>() {
        out.push(Value::from(number));
    }
    // A negative whole number is an i64 (`clock_shift_ns: -5`), not a float.
    if let Ok(number) = value.trim().parse::<i64>() {
        out.push(Value::from(number));
    }
    if let Ok(number) = value.trim().parse::<f64>() {
        out.push(Value::from(number));
    }
    // A list of whole numbers (`trace_ranks: 3,17`); none for an empty value.
    let items: Result<Vec<u64>, _> = match value.trim() {
        "" => Ok(Vec::new()),
        list => list.split(',').map(|item| item.trim().parse()).collect(),
    };
    if let Ok(items) = items {
        out.push(Value::from(items));
    }
    out.push(Value::String(value.to_string()));
    out.push(Value::String(value.trim().to_lowercase()));
    out
}

/// The keys of a YAML file (TOML where the name ends in `.toml`).
fn read_file(path: &Path) -> Result<Map<String, Value>, ConfigError> {
    let read = || -> std::io::Result<String> {
        let file = crate::file::open_regular(path, true)?;
        let bytes = crate::file::read_capped(file, MAX_CONFIG_BYTES)?;
        String::from_utf8(bytes).map_err(std::io::Error::other)
    };
    let text = read().map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let is_toml = path.extension().is_some_and(|ext| ext == "toml");
    let parsed: Result<Value, super::Cause> = if is_toml {
        toml::from_str(&text).map_err(Into::into)
    } else {
        yaml_serde::from_str(&text).map_err(Into::into)
    };
    match parsed {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(ConfigError::File {
            path: path.to_path_buf(),
            reason: "expected a map of configuration keys".into(),
            source: None,
        }),
        Err(source) => Err(ConfigError::File {
            path: path.to_path_buf(),
            reason: source.to_string(),
            source: Some(source),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{TransportKind, MAX_TRACE_RANKS};
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn defaults_are_the_development_preset() {
        let config = Config::load(None, env(&[])).unwrap();
        assert_eq!(config, Config::preset(Preset::Development));
        assert_eq!(config.gather_timeout_s, 60.0);
        assert_eq!(config.output_dir, PathBuf::from("profiling_reports"));
    }

    #[test]
    fn keys_given_in_code_name_what_is_wrong() {
        let keys = |pairs: serde_json::Value| match pairs {
            Value::Object(map) => map,
            _ => unreachable!(),
        };
        let config = Config::from_map(keys(serde_json::json!({
            "preset": "production", "output_dir": "/tmp/x", "gather_timeout_s": 5,
        })))
        .unwrap();
        assert_eq!(config.output_dir, PathBuf::from("/tmp/x"));
        assert_eq!(config.gather_timeout_s, 5.0);
        assert_eq!(
            config.gpu_interval_s, 2.0,
            "the production preset's default"
        );

        let unknown = Config::from_map(keys(serde_json::json!({"outptu_dir": "x"})));
        let text = unknown.unwrap_err().to_string();
        assert!(
            text.contains("`outptu_dir`") && text.contains("did you mean `output_dir`"),
            "{text}"
        );
        let wrong = Config::from_map(keys(serde_json::json!({"gather_timeout_s": "soon"})));
        let text = wrong.unwrap_err().to_string();
        assert!(
            text.contains("`gather_timeout_s`") && text.contains("invalid type"),
            "{text}"
        );
        let range = Config::from_map(keys(serde_json::json!({"gather_timeout_s": -1})));
        assert!(range.unwrap_err().to_string().contains("gather_timeout_s"));
        let both = Config::from_map(keys(serde_json::json!({
            "window_every_steps": 10, "window_every_s": 60,
        })));
        let text = both.unwrap_err().to_string();
        assert!(text.contains("by steps or by seconds"), "{text}");
    }

    #[test]
    fn environment_overrides_every_kind_of_key() {
        let config = Config::load(
            None,
            env(&[
                ("RANKSCOPE_ENABLED", "0"),
                ("RANKSCOPE_OUTPUT_DIR", "/tmp/out"),
                ("RANKSCOPE_SESSION_ID", "1234"),
                ("RANKSCOPE_TRANSPORT", "dir"),
                ("RANKSCOPE_GATHER_TIMEOUT_S", "2.5"),
                ("RANKSCOPE_MAX_DATA_POINTS", "10"),
                ("RANKSCOPE_SIMULATED_HOT_RANK", "2"),
                ("RANKSCOPE_CLOCK_SHIFT_NS", "-5"),
                ("RANKSCOPE_TRACE_RANKS", "3, 17,40"),
            ]),
        )
        .unwrap();
        assert_eq!(config.trace_ranks, [3, 17, 40], "a list");
        let one = Config::load(None, env(&[("RANKSCOPE_TRACE_RANKS", "9")])).unwrap();
        assert_eq!(one.trace_ranks, [9], "a list of one");
        let none = Config::load(None, env(&[("RANKSCOPE_TRACE_RANKS", "")])).unwrap();
        assert!(none.trace_ranks.is_empty(), "an empty list");
        let many = (0..=MAX_TRACE_RANKS)
            .map(|r| r.to_string())
            .collect::<Vec<_>>();
        let err = Config::load(None, env(&[("RANKSCOPE_TRACE_RANKS", &many.join(","))]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RANKSCOPE_TRACE_RANKS") && err.contains("256"),
            "{err}"
        );
        let err = Config::load(None, env(&[("RANKSCOPE_TRACE_RANKS", "3,x")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("RANKSCOPE_TRACE_RANKS=\"3,x\""), "{err}");
        let layout = Config::load(None, env(&[("RANKSCOPE_PARALLEL_LAYOUT", "tp=4,dp=2")]));
        assert_eq!(
            layout.unwrap().parallel_layout.as_deref(),
            Some("tp=4,dp=2")
        );
        let err = Config::load(None, env(&[("RANKSCOPE_PARALLEL_LAYOUT", "tp=4,zz=2")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("parallel_layout") && err.contains("`zz` is no dimension"),
            "{err}"
        );
        assert_eq!(config.clock_shift_ns, -5, "a negative number");
        assert!(!config.enabled);
        assert_eq!(config.output_dir, PathBuf::from("/tmp/out"));
        assert_eq!(config.session_id.as_deref(), Some("1234"));
        assert_eq!(config.transport, TransportKind::Dir);
        assert_eq!(config.gather_timeout_s, 2.5);
        assert_eq!(config.max_data_points, 10);
        assert_eq!(config.simulated_hot_rank, Some(2));
    }

    #[test]
    fn file_then_env_with_preset_from_file() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("rankscope.yaml");
        std::fs::write(&yaml, "preset: debugging\nhost_interval_s: 3\n").unwrap();
        let config = Config::load(Some(&yaml), env(&[("RANKSCOPE_HOST_INTERVAL_S", "4")])).unwrap();
        assert_eq!(config.preset, Preset::Debugging);
        assert!(config.live_display, "debugging preset turns the display on");
        assert_eq!(config.gpu_interval_s, 0.1);
        assert_eq!(config.host_interval_s, 4.0, "env beats file");

        let toml = dir.path().join("rankscope.toml");
        std::fs::write(&toml, "preset = \"production\"\nmax_data_points = 7\n").unwrap();
        let config = Config::load(Some(&toml), env(&[])).unwrap();
        assert_eq!(config.preset, Preset::Production);
        assert_eq!(config.max_data_points, 7);
        assert_eq!(config.gpu_interval_s, 2.0);
    }

    #[test]
    fn values_outside_their_range_are_refused_naming_the_variable() {
        for (var, key) in [
            ("RANKSCOPE_GATHER_TIMEOUT_S", "gather_timeout_s"),
            ("RANKSCOPE_GPU_INTERVAL_S", "gpu_interval_s"),
            ("RANKSCOPE_HOST_INTERVAL_S", "host_interval_s"),
        ] {
            let err = Config::load(None, env(&[(var, "1e20")])).unwrap_err();
            assert!(
                matches!(&err, ConfigError::Env { var: v, .. } if v == var),
                "{key}: {err}"
            );
            assert!(err.to_string().contains("outside"), "{err}");
        }
        let err = Config::load(None, env(&[("RANKSCOPE_MAX_WORLD_SIZE", "0")])).unwrap_err();
        assert!(
            err.to_string().contains("RANKSCOPE_MAX_WORLD_SIZE"),
            "{err}"
        );
        // Every numeric key the validation reads has a range, and the
        // defaults of every preset lie inside them.
        for preset in [Preset::Development, Preset::Production, Preset::Debugging] {
            Config::preset(preset).validate().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("c.yaml");
        std::fs::write(&yaml, "display_interval_s: 0\n").unwrap();
        let err = Config::load(Some(&yaml), env(&[])).unwrap_err().to_string();
        assert!(
            err.contains("c.yaml") && err.contains("display_interval_s"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_value_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStringExt;
        let vars = [(
            std::ffi::OsString::from("RANKSCOPE_OUTPUT_DIR"),
            std::ffi::OsString::from_vec(vec![b'/', 0xff]),
        )];
        let err = check_utf8(vars).unwrap_err().to_string();
        assert!(
            err.contains("RANKSCOPE_OUTPUT_DIR") && err.contains("UTF-8"),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_configuration_that_is_no_regular_file_is_refused_at_once() {
        let err = Config::load(Some(Path::new("/dev/zero")), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/dev/zero"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("config.yaml");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        assert!(Config::load(Some(&fifo), env(&[])).is_err());
    }

    #[test]
    fn errors_name_the_file_key_or_variable() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("bad.yaml");
        std::fs::write(&yaml, "gpu_intervall_s: 1\n").unwrap();
        let err = Config::load(Some(&yaml), env(&[])).unwrap_err().to_string();
        assert!(
            err.contains("bad.yaml") && err.contains("gpu_intervall_s"),
            "{err}"
        );

        let err = Config::load(None, env(&[("RANKSCOPE_GATHER_TIMEOUT_S", "soon")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("RANKSCOPE_GATHER_TIMEOUT_S=\"soon\""), "{err}");

        let err = Config::load(None, env(&[("RANKSCOPE_GPU_INTERVAL_S", "0")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("gpu_interval_s"), "{err}");

        let missing = dir.path().join("missing.toml");
        let err = Config::load(Some(&missing), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("missing.toml"), "{err}");
    }

    #[test]
    fn a_file_error_keeps_its_cause_and_a_chain_tells_it_once() {
        let dir = tempfile::tempdir().unwrap();
        let yaml = dir.path().join("broken.yaml");
        std::fs::write(&yaml, "a: [\n").unwrap();
        let err = Config::load(Some(&yaml), env(&[])).unwrap_err();
        assert!(std::error::Error::source(&err).is_some(), "{err}");
        assert_eq!(crate::error::Chain(&err).to_string(), err.to_string());
    }
}
