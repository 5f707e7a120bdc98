//! The crate boundaries: the coordinator (what rank 0 and `rankscope
//! aggregate` run) depends on the data model only, never on the agent, NVML,
//! host sampling or the command line; and inside the agent, its modules
//! import each other one way only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

#[test]
fn the_coordinator_depends_on_neither_the_agent_nor_nvml() {
    let output = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "rankscope-coordinator",
            "--edges",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("running cargo tree");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(crates.contains(&"rankscope-common"), "{tree}");
    for forbidden in ["rankscope", "nvml-wrapper", "sysinfo", "clap", "anyhow"] {
        assert!(
            !crates.contains(&forbidden),
            "rankscope-coordinator depends on {forbidden}:\n{tree}"
        );
    }
}

/// The agent's top-level modules (`session`, `recorder`, …) and the others
/// each names by a `crate::` path, outside comments.
fn agent_imports() -> BTreeMap<String, BTreeSet<String>> {
    fn visit(dir: &Path, top: Option<&str>, imports: &mut BTreeMap<String, BTreeSet<String>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let module = top.unwrap_or(&name).to_string();
            if path.is_dir() {
                visit(&path, Some(&module), imports);
                continue;
            }
            if module == "lib" || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let named = imports.entry(module.clone()).or_default();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (at, _) in line.match_indices("crate::") {
                    let rest = &line[at + "crate::".len()..];
                    let end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    if rest[..end] != module {
                        named.insert(rest[..end].to_string());
                    }
                }
            }
        }
    }
    let mut imports = BTreeMap::new();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src");
    visit(&src, None, &mut imports);
    imports
}

/// No module of the agent imports one that (through others) imports it
/// back: each can be read, and changed, knowing only those below it.
#[test]
fn the_agent_s_modules_import_each_other_one_way() {
    let imports = agent_imports();
    assert!(imports.contains_key("session") && imports.contains_key("recorder"));
    for start in imports.keys() {
        // Every module `start` reaches; none may reach it back.
        let mut reached = BTreeSet::new();
        let mut next: Vec<&String> = imports[start].iter().collect();
        while let Some(module) = next.pop() {
            if reached.insert(module.clone()) {
                next.extend(imports.get(module).into_iter().flatten());
            }
        }
        assert!(
            !reached.contains(start),
            "`{start}` imports a module that imports it back: {imports:#?}"
        );
    }
}
