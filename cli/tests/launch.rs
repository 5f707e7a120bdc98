//! `rankscope launch`: N real processes with torchrun's variables, output
//! prefixed with the rank, stop signals passed on, the worst exit status.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use support::rankscope;

#[test]
fn ranks_get_torchrun_variables_and_the_worst_exit_status_is_returned() {
    let run = rankscope(
        &[
            "launch",
            "-n",
            "3",
            "--",
            "sh",
            "-c",
            "echo rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE addr=$MASTER_ADDR \
             port=$MASTER_PORT run=$TORCHELASTIC_RUN_ID restart=$TORCHELASTIC_RESTART_COUNT; \
             echo complaint >&2; exit $RANK",
        ],
        &[],
    );
    assert_eq!(run.status.code(), Some(2), "the worst of 0, 1 and 2");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    let mut runs = std::collections::BTreeSet::new();
    for rank in 0..3 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("[rank {rank}] rank={rank} ")))
            .unwrap_or_else(|| panic!("rank {rank}'s line, prefixed: {stdout}"));
        assert!(line.contains(&format!("local={rank} world=3 addr=127.0.0.1 port=")));
        assert!(line.ends_with("restart=0"), "{line}");
        runs.insert(
            line.split("run=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_string(),
        );
        assert!(
            stderr.contains(&format!("[rank {rank}] complaint")),
            "{stderr}"
        );
    }
    assert_eq!(runs.len(), 1, "one run id for every rank: {runs:?}");

    let again = rankscope(
        &[
            "launch",
            "-n",
            "1",
            "--",
            "sh",
            "-c",
            "echo $TORCHELASTIC_RUN_ID",
        ],
        &[],
    );
    let second = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(
        !second.contains(runs.iter().next().unwrap()),
        "a fresh run id per launch"
    );
}

#[test]
fn a_stop_signal_is_passed_on_to_every_rank() {
    let mut launch = Command::new(support::rankscope_bin())
        .args([
            "launch",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "trap 'echo stopped; exit 7' TERM; echo ready; while :; do sleep 0.1; done",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(launch.stdout.take().unwrap()).lines();
    let mut ready = 0;
    while ready < 2 {
        let line = lines.next().expect("the ranks say ready").unwrap();
        ready += usize::from(line.ends_with("ready"));
    }
    let sent = Command::new("kill")
        .args(["-TERM", &launch.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = launch.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "the ranks' own exit status: {rest:?}"
    );
    assert_eq!(
        rest.iter().filter(|l| l.ends_with("stopped")).count(),
        2,
        "{rest:?}"
    );
}

/// Each launch gives its ranks a secret job token of its own (for their
/// TCP gather), the same on every rank: no one can derive it from the
/// variables torchrun sets.
#[test]
fn a_launch_gives_its_ranks_a_fresh_secret_token() {
    let tokens = || {
        let run = rankscope(
            &[
                "launch",
                "-n",
                "2",
                "--",
                "sh",
                "-c",
                "echo token=$RANKSCOPE_TOKEN",
            ],
            &[],
        );
        let stdout = String::from_utf8_lossy(&run.stdout).to_string();
        let tokens: std::collections::BTreeSet<String> = stdout
            .lines()
            .filter_map(|l| l.split("token=").nth(1))
            .map(str::to_string)
            .collect();
        assert_eq!(tokens.len(), 1, "one token for every rank: {stdout}");
        let token = tokens.into_iter().next().unwrap();
        assert!(
            token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit()),
            "{token}"
        );
        token
    };
    assert_ne!(tokens(), tokens(), "a fresh token per launch");
}

/// `--nodes K`: each rank gets its node's local rank, local world size and
/// group rank, and its node's name; ranks that do not divide are refused.
#[test]
fn ranks_of_simulated_nodes_get_their_node_s_variables() {
    let run = rankscope(
        &[
            "launch",
            "-n",
            "4",
            "--nodes",
            "2",
            "--",
            "sh",
            "-c",
            "echo local=$LOCAL_RANK of=$LOCAL_WORLD_SIZE group=$GROUP_RANK node=$RANKSCOPE_NODE",
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    for (rank, expected) in [
        (0, "local=0 of=2 group=0 node=simulated-node-0"),
        (1, "local=1 of=2 group=0 node=simulated-node-0"),
        (2, "local=0 of=2 group=1 node=simulated-node-1"),
        (3, "local=1 of=2 group=1 node=simulated-node-1"),
    ] {
        assert!(
            stdout.contains(&format!("[rank {rank}] {expected}")),
            "rank {rank}: {stdout}"
        );
    }
    let uneven = rankscope(&["launch", "-n", "3", "--nodes", "2", "--", "true"], &[]);
    assert!(!uneven.status.success());
    assert!(
        String::from_utf8_lossy(&uneven.stderr).contains("3 ranks do not divide into 2 nodes"),
        "{}",
        String::from_utf8_lossy(&uneven.stderr)
    );
}
