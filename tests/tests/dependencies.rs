//! The crate boundaries: the coordinator (what rank 0 and `rankscope
//! aggregate` run) depends on the data model only, never on the agent, NVML,
//! host sampling or the command line; inside the agent, its modules import
//! each other one way only; and inside every crate, no file names one that
//! names it back.

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

/// Each source file of the crate under `src` as a module path (`lib.rs`:
/// none; `a.rs` or `a/mod.rs`: `a`; `a/b.rs`: `a::b`), with its code on
/// one line (comments left out, so that a statement over several lines
/// reads whole); test modules (`tests.rs`, `test_support.rs`, a file's own
/// inline `#[cfg(test)] mod … {` at its end) left out.
fn file_modules(src: &Path) -> BTreeMap<Vec<String>, String> {
    fn walk(dir: &Path, at: &[String], files: &mut BTreeMap<Vec<String>, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let mut module = at.to_vec();
            if path.is_dir() {
                module.push(name);
                walk(&path, &module, files);
                continue;
            }
            let test_only = ["tests", "test_support"].contains(&name.as_str());
            if path.extension().is_none_or(|e| e != "rs") || test_only {
                continue;
            }
            if !["lib", "mod", "main"].contains(&name.as_str()) {
                module.push(name);
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let inline_tests = |w: &[&str]| {
                w[0] == "#[cfg(test)]" && w[1].starts_with("mod ") && w[1].ends_with('{')
            };
            let product = lines
                .windows(2)
                .position(inline_tests)
                .map_or(&lines[..], |end| &lines[..end]);
            let code: Vec<&str> = product
                .iter()
                .map(|line| line.find("//").map_or(*line, |at| &line[..at]))
                .collect();
            files.insert(module, code.join(" "));
        }
    }
    let mut files = BTreeMap::new();
    walk(src, &[], &mut files);
    files
}

/// The files each file of the crate under `src` names (by a `crate::`,
/// `super::` or `self::` path, or a path from one of its own submodules),
/// leaving out the file's ancestors: a module may use what the modules
/// above it define, as Rust's module tree has it (so a parent and the
/// child it calls into are no circle). A method called on a value names
/// no file, and is not seen.
fn file_imports(src: &Path) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let files = file_modules(src);
    // The file a path names: the longest prefix of it that is a file.
    let file_of = |path: &[String]| -> Option<Vec<String>> {
        (0..=path.len())
            .rev()
            .map(|n| path[..n].to_vec())
            .find(|prefix| files.contains_key(prefix))
    };
    let word = |s: &str| -> usize {
        s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(s.len())
    };
    let mut imports = BTreeMap::new();
    for (module, text) in &files {
        let children: BTreeSet<&str> = files
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m.last().unwrap().as_str())
            .collect();
        let named: &mut BTreeSet<Vec<String>> = imports.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("::") {
            // The path this `::` continues: back to its first segment.
            let before = &text[..at];
            let start = before
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .map_or(0, |i| i + 1);
            if text[start..at].contains("::") {
                continue; // not the path's first `::`
            }
            let root = &text[start..at];
            let mut rest = &text[at + 2..];
            let mut base: Vec<String> = match root {
                "crate" => Vec::new(),
                "self" => module.clone(),
                "super" => module[..module.len().saturating_sub(1)].to_vec(),
                child if children.contains(child) => {
                    [module.clone(), vec![child.to_string()]].concat()
                }
                _ => continue,
            };
            while let Some(more) = rest.strip_prefix("super::") {
                base.pop();
                rest = more;
            }
            for first in first_segments(rest) {
                let mut path = base.clone();
                // Whatever follows the first segment, as far as a
                // plain path goes.
                let after = &rest[rest.find(first).unwrap_or(0)..];
                let plain = &after[..after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(after.len())];
                let segments = plain.split("::").filter(|s| !s.is_empty());
                path.extend(segments.map(|s| s[..word(s)].to_string()));
                let Some(target) = file_of(&path) else {
                    continue;
                };
                if !module.starts_with(&target) {
                    named.insert(target);
                }
            }
        }
    }
    imports
}

/// The circles among the files of the crate under `src`: for each file
/// that reaches itself through others, the files on one such path.
fn file_circles(src: &Path) -> Vec<Vec<String>> {
    let imports = file_imports(src);
    let name = |m: &Vec<String>| match m.is_empty() {
        true => "lib".to_string(),
        false => m.join("::"),
    };
    let mut circles = Vec::new();
    for start in imports.keys() {
        // A path back to `start`, found depth first.
        let mut seen = BTreeSet::new();
        let mut stack: Vec<(Vec<String>, Vec<Vec<String>>)> = vec![(start.clone(), Vec::new())];
        while let Some((module, trail)) = stack.pop() {
            for next in imports.get(&module).into_iter().flatten() {
                let trail = [trail.clone(), vec![next.clone()]].concat();
                if next == start {
                    let mut circle: Vec<String> = vec![name(start)];
                    circle.extend(trail.iter().map(name));
                    circles.push(circle);
                    stack.clear();
                    break;
                }
                if seen.insert(next.clone()) {
                    stack.push((next.clone(), trail));
                }
            }
        }
    }
    circles
}

/// No source file of the agent, the data model, the coordinator, the
/// command line or the Python extension names one that (through others)
/// names it back: each can be read knowing only the files it names. A
/// module may still use what its ancestors define.
#[test]
fn no_source_file_names_one_that_names_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let agent = file_imports(&root.join("agent/src"));
    // The check sees the imports it must: the session names the windows
    // thread below it, the TCP listener the desk beside it.
    let session = vec!["session".to_string()];
    assert!(agent[&session].contains(&vec!["session".into(), "windows".into()]));
    let server: Vec<String> = ["transport", "tcp", "server"].map(String::from).into();
    let desk: Vec<String> = ["transport", "tcp", "control"].map(String::from).into();
    assert!(agent[&server].contains(&desk), "{:?}", agent[&server]);
    let circles: Vec<String> = ["agent", "common", "coordinator", "cli", "python"]
        .into_iter()
        .flat_map(|krate| {
            let circles = file_circles(&root.join(krate).join("src"));
            circles
                .into_iter()
                .map(move |circle| format!("{krate}: {}", circle.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "files that name each other round:\n{}",
        circles.join("\n")
    );
}
