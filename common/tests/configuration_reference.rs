//! docs/configuration.md is generated from the configuration's own table:
//! each key of `Config` with its doc comment (read from the source), its
//! default and, for a numeric key, its range (`NUMERIC_KEYS`). The page
//! cannot drift: this test fails where it differs from what the code
//! says. `UPDATE_DOCS=1 cargo test -p rankscope-common --test
//! configuration_reference` writes it again.

use std::path::PathBuf;

use rankscope_common::config::NUMERIC_KEYS;
use rankscope_common::Config;

/// Each `pub` field of `Config` in `types.rs`, in order, with the doc
/// comment above it joined into one paragraph.
fn documented_keys(source: &str) -> Vec<(String, String)> {
    let body = source
        .split_once("pub struct Config {")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(body, _)| body)
        .expect("the Config struct in types.rs");
    let mut keys = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in body.lines().map(str::trim) {
        if let Some(text) = line.strip_prefix("///") {
            doc.push(text.trim());
        } else if let Some(field) = line.strip_prefix("pub ") {
            let name = field.split(':').next().unwrap_or("").trim().to_string();
            keys.push((name, doc.join(" ")));
            doc.clear();
        } else if !line.starts_with("#[") {
            doc.clear();
        }
    }
    keys
}

/// The reference page.
fn reference() -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/config/types.rs")).unwrap();
    let defaults = serde_json::to_value(Config::default()).unwrap();
    let mut page = String::from(
        "# Configuration reference\n\n\
         Generated from `common/src/config/types.rs` (each key's doc comment), \
         `Config::default()` and `NUMERIC_KEYS` by \
         `common/tests/configuration_reference.rs`; do not edit by hand.\n\n\
         Every key can be set in a YAML or TOML file named by `RANKSCOPE_CONFIG`, \
         after a preset (`preset: development | production | debugging`), or as \
         `RANKSCOPE_<KEY>` (upper case) in the environment, which wins. A numeric \
         value outside its range, or a `RANKSCOPE_*` value that is not UTF-8, is an \
         error naming the key; a `RANKSCOPE_*` variable that is no key gets a \
         warning naming the closest one.\n\n\
         | key | default | range | what it is |\n|---|---|---|---|\n",
    );
    for (key, doc) in documented_keys(&source) {
        let default = match &defaults[&key] {
            serde_json::Value::Null => "unset".to_string(),
            value => format!("`{value}`"),
        };
        let range = NUMERIC_KEYS
            .iter()
            .find(|numeric| numeric.key == key)
            .map_or(String::new(), |n| format!("{} ..= {}", n.min, n.max));
        let doc = doc.replace('|', "\\|");
        page += &format!("| `{key}` | {default} | {range} | {doc} |\n");
    }
    page
}

#[test]
fn the_configuration_reference_is_what_the_code_says() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    let generated = reference();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        written == generated,
        "docs/configuration.md differs from the code: run UPDATE_DOCS=1 cargo test -p \
         rankscope-common --test configuration_reference"
    );
}

/// Every key of the configuration is in the reference, and nothing else.
#[test]
fn every_key_is_documented() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let source = std::fs::read_to_string(root.join("src/config/types.rs")).unwrap();
    let mut documented: Vec<String> = documented_keys(&source)
        .into_iter()
        .map(|(key, doc)| {
            assert!(!doc.is_empty(), "`{key}` has no doc comment");
            key
        })
        .collect();
    let mut keys = Config::keys();
    documented.sort();
    keys.sort();
    assert_eq!(documented, keys);
}
