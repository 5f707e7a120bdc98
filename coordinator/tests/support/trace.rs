#![allow(dead_code)] // each user takes its share

//! `trace.json.gz` as Perfetto reads it: one JSON document whose events
//! each have what their phase needs, in named processes, nesting per
//! thread.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use serde_json::Value;

pub fn read_trace(path: &Path) -> Value {
    let mut json = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_string(&mut json)
        .unwrap();
    serde_json::from_str(&json).expect("the trace is one JSON document")
}

/// Checks what Perfetto and chrome://tracing need of each event, that every
/// process is named and that the complete events of each thread nest.
/// Returns the complete (`X`) and the instant (`i`) events per pid.
pub fn check_trace(trace: &Value) -> (BTreeMap<u64, usize>, BTreeMap<u64, usize>) {
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut named = Vec::new();
    // (pid, tid) → (start, duration, name) of each complete event.
    type Slices = HashMap<(u64, u64), Vec<(f64, f64, String)>>;
    let mut slices = Slices::new();
    let mut per_pid = BTreeMap::new();
    let mut instants = BTreeMap::new();
    for event in events {
        let ph = event["ph"].as_str().expect("ph");
        // Perfetto reads ids as 32-bit numbers and treats pid 0 apart.
        let pid = event["pid"].as_u64().expect("pid");
        assert!((1..=u64::from(u32::MAX)).contains(&pid), "{event}");
        if let Some(tid) = event["tid"].as_u64() {
            assert!(tid <= u64::from(u32::MAX), "{event}");
        }
        assert!(event["name"].is_string(), "name: {event}");
        let ts = || {
            event["ts"]
                .as_f64()
                .unwrap_or_else(|| panic!("ts: {event}"))
        };
        match ph {
            "M" => {
                if event["name"] == "process_name" {
                    let name = event["args"]["name"].as_str().unwrap();
                    // `rank N @ host`; an imported trace may not say its host.
                    let rank = format!("rank {}", pid - 1);
                    assert!(
                        name == rank || name.starts_with(&format!("{rank} @ ")),
                        "{name}"
                    );
                    named.push(pid);
                }
                assert!(event["args"].is_object(), "{event}");
            }
            "X" => {
                let dur = event["dur"].as_f64().expect("dur");
                assert!(dur >= 0.0, "{event}");
                let tid = event["tid"].as_u64().expect("tid");
                let name = event["name"].as_str().unwrap().to_string();
                slices
                    .entry((pid, tid))
                    .or_default()
                    .push((ts(), dur, name));
                *per_pid.entry(pid).or_insert(0) += 1;
            }
            "i" => {
                ts();
                assert_eq!(event["s"], "t", "{event}");
                assert!(event["tid"].is_u64(), "{event}");
                *instants.entry(pid).or_insert(0) += 1;
            }
            "C" => {
                ts();
                let args = event["args"].as_object().expect("counter args");
                assert!(args.values().all(Value::is_number), "{event}");
            }
            // A kernel's launch: an arrow from the host to its slice.
            "s" | "f" => {
                ts();
                assert!(event["id"].is_u64(), "{event}");
            }
            other => panic!("unexpected phase {other}: {event}"),
        }
    }
    for pid in per_pid.keys() {
        assert!(named.contains(pid), "process {pid} has no name");
    }
    // Per thread, in start order (longest first on a tie), each slice lies
    // inside the one open around it or after it ends.
    // Times are whole nanoseconds: an imported trace's start and length
    // are each rounded to one.
    const SLACK_US: f64 = 2e-3;
    for ((pid, tid), mut list) in slices {
        list.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1)));
        let mut open: Vec<f64> = Vec::new();
        for (start, dur, name) in list {
            while open.last().is_some_and(|&end| start >= end - SLACK_US) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(
                    start + dur <= end + SLACK_US,
                    "pid {pid} tid {tid}: `{name}` at {start} overlaps its enclosing slice"
                );
            }
            open.push(start + dur);
        }
    }
    (per_pid, instants)
}
