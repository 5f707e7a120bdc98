//! Every command of the `rankscope` program has its row in docs/cli.md's
//! table, and every flag of each (read from the program's own help) is a
//! word of that row: a flag added without a word in the docs fails here.

use std::collections::BTreeSet;
use std::process::Command;

/// The help text of `rankscope ARGS --help`.
fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_rankscope"))
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(output.status.success(), "{args:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The commands the top-level help lists (but `help`).
fn commands() -> Vec<String> {
    let top = help(&[]);
    let listed = top
        .split_once("Commands:")
        .and_then(|(_, rest)| rest.split_once("\n\n"))
        .map(|(commands, _)| commands)
        .expect("a Commands: section");
    listed
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|&command| command != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a command's help lists (but `--help` and `--version`).
fn flags(command: &str) -> BTreeSet<String> {
    help(&[command])
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=')
        .filter(|word| word.starts_with("--") && word.len() > 2)
        .map(|word| {
            word.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-')
                .to_string()
        })
        .filter(|flag| flag != "--help" && flag != "--version")
        .collect()
}

#[test]
fn every_command_and_flag_is_in_the_cli_docs() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md")).unwrap();
    let commands = commands();
    assert!(commands.len() >= 9, "{commands:?}");
    let mut missing = Vec::new();
    for command in &commands {
        // The command's row of the table: its flags are said there.
        let row = docs
            .lines()
            .find(|line| line.starts_with(&format!("| `rankscope {command} ")));
        let Some(row) = row else {
            missing.push(format!("rankscope {command}"));
            continue;
        };
        let words: BTreeSet<&str> = row
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .collect();
        for flag in flags(command) {
            if !words.contains(flag.as_str()) {
                missing.push(format!("rankscope {command} {flag}"));
            }
        }
    }
    assert!(missing.is_empty(), "not in docs/cli.md: {missing:?}");
}
