//! Diagnostics of settings that are no setting: unknown keys and
//! `RANKSCOPE_*` variables, each named with the closest known name.

use super::Config;

/// The name among `known` closest to `name` by edit distance, when it is
/// within a third of `name`'s length.
pub(super) fn closest<'k>(
    name: &str,
    known: impl IntoIterator<Item = &'k String>,
) -> Option<&'k String> {
    known
        .into_iter()
        .map(|k| (strsim::levenshtein(name, k), k))
        .min()
        .filter(|(distance, _)| *distance <= name.len().div_ceil(3))
        .map(|(_, k)| k)
}

/// Why configuration key `key` given in code is refused when no setting
/// has its name: `no such setting`, with the closest among `known`.
pub(super) fn no_such_setting<'k>(
    key: &str,
    known: impl IntoIterator<Item = &'k String>,
) -> String {
    let closest = closest(key, known).map_or(String::new(), |k| format!("; did you mean `{k}`?"));
    format!("no such setting{closest}")
}

/// `RANKSCOPE_*` variables that are neither a configuration key nor one of
/// the launcher variables `rankscope demo` and `rankscope launch` set.
const NON_KEY_VARIABLES: &[&str] = &[
    "RANKSCOPE_CONFIG",
    "RANKSCOPE_RANK",
    "RANKSCOPE_WORLD_SIZE",
    "RANKSCOPE_LOCAL_RANK",
    "RANKSCOPE_LOCAL_WORLD_SIZE",
    "RANKSCOPE_JOB_ID",
    "RANKSCOPE_RUN_ID",
    "RANKSCOPE_NODE",
    "RANKSCOPE_SIMULATED_NODES",
];

/// A `RANKSCOPE_*` variable that no code reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable.
    pub name: String,
    /// The closest known variable, when one is close.
    pub closest: Option<String>,
}

impl std::fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a rankscope setting; it is ignored", self.name)?;
        match &self.closest {
            Some(closest) => write!(f, " (did you mean {closest}?)"),
            None => Ok(()),
        }
    }
}

/// The `RANKSCOPE_*` names among `names` that are no setting, each with the
/// closest known name (within an edit distance of a third of its length).
pub fn unknown_variables(
    names: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<UnknownVariable> {
    let known: Vec<String> = Config::keys()
        .iter()
        .map(|key| format!("RANKSCOPE_{}", key.to_uppercase()))
        .chain(NON_KEY_VARIABLES.iter().map(|v| v.to_string()))
        .collect();
    let mut unknown: Vec<UnknownVariable> = names
        .into_iter()
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.starts_with("RANKSCOPE_") && !known.contains(name))
        .map(|name| {
            let closest = closest(&name, &known).cloned();
            UnknownVariable { name, closest }
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_variable_is_named_with_the_closest_key() {
        let names = [
            "RANKSCOPE_GATHER_TIMEOUT",
            "RANKSCOPE_OUTPUT_DIR",
            "RANKSCOPE_RANK",
            "RANKSCOPE_ZZZZZZZZZZZZZZZZZZZZ",
            "PATH",
        ]
        .map(std::ffi::OsString::from);
        let unknown = unknown_variables(names);
        assert_eq!(
            unknown,
            [
                UnknownVariable {
                    name: "RANKSCOPE_GATHER_TIMEOUT".into(),
                    closest: Some("RANKSCOPE_GATHER_TIMEOUT_S".into()),
                },
                UnknownVariable {
                    name: "RANKSCOPE_ZZZZZZZZZZZZZZZZZZZZ".into(),
                    closest: None,
                },
            ]
        );
        assert!(unknown[0]
            .to_string()
            .contains("did you mean RANKSCOPE_GATHER_TIMEOUT_S?"));
    }
}
