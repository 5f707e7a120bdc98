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
/// each names outside comments: by a `crate::` path (a brace group's
/// every path; a name the crate's root re-exports, as the module it comes
/// from), or, in a file at the top, by `super::`.
fn agent_imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/src");
    let reexported = root_reexports(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let mut imports = BTreeMap::new();
    visit(&src, None, &reexported, &mut imports);
    imports
}

/// The names `lib.rs` re-exports from a module of the agent (`pub use
/// profiler::{Profiler, …};`), by name: the module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in lib.lines().map(str::trim) {
        let Some(path) = line.strip_prefix("pub use ") else {
            continue;
        };
        let Some((module, items)) = path.trim_end_matches(';').split_once("::") else {
            continue;
        };
        let items = items.trim_start_matches('{').trim_end_matches('}');
        for item in items.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let name = item.rsplit("::").next().unwrap_or(item);
            names.insert(name.to_string(), module.to_string());
        }
    }
    names
}

/// The first segments of the path that starts `rest`: one, or a brace
/// group's each (`{a::b, c}`: `a`, `c`).
fn first_segments(rest: &str) -> Vec<&str> {
    let word = |s: &str| -> usize {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    match rest.strip_prefix('{') {
        Some(group) => {
            let (mut depth, mut items, mut start) = (0, Vec::new(), 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        items.push(&group[start..i]);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            items
                .into_iter()
                .map(str::trim)
                .map(|item| &item[..word(item)])
                .filter(|item| !item.is_empty())
                .collect()
        }
        None => vec![&rest[..word(rest)]],
    }
}

/// Adds the imports of every file under `dir` (of top-level module `top`).
fn visit(
    dir: &Path,
    top: Option<&str>,
    reexported: &BTreeMap<String, String>,
    imports: &mut BTreeMap<String, BTreeSet<String>>,
) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = top.unwrap_or(&name).to_string();
        if path.is_dir() {
            visit(&path, Some(&module), reexported, imports);
            continue;
        }
        if module == "lib" || path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let named = imports.entry(module.clone()).or_default();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            // In a file at the top, `super::` at the file's own level (not
            // in an inline module such as its tests) is the crate's root.
            let roots: &[&str] = match top.is_none() && !line.starts_with(' ') {
                true => &["crate::", "super::"],
                false => &["crate::"],
            };
            for root in roots {
                for (at, _) in line.match_indices(root) {
                    for first in first_segments(&line[at + root.len()..]) {
                        let target = reexported.get(first).map_or(first, String::as_str);
                        if target != module {
                            named.insert(target.to_string());
                        }
                    }
                }
            }
        }
    }
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
