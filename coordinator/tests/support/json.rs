#![allow(dead_code)] // each user takes its share

//! Reports compared as JSON, numbers within a tolerance: two reports of the
//! same ranks whose sums were taken in another order (a two-level gather's
//! against one level's) differ in the last bits.

use serde_json::Value;

/// Asserts `a` and `b` equal, numbers within `relative` of each other.
pub fn assert_same(a: &Value, b: &Value, relative: f64, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            let scale = x.abs().max(y.abs()).max(1e-12);
            assert!((x - y).abs() / scale <= relative, "{at}: {x} against {y}");
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}: lengths");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                assert_same(x, y, relative, &format!("{at}[{i}]"));
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys = |o: &serde_json::Map<String, Value>| o.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(x), keys(y), "{at}: keys");
            for (key, x) in x {
                assert_same(x, &y[key], relative, &format!("{at}.{key}"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// The process names of the gzipped trace at `path` (`rank N @ host`), in
/// the trace's order.
pub fn trace_process_names(path: &std::path::Path) -> Vec<String> {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let trace: Value = serde_json::from_reader(flate2::read::GzDecoder::new(file)).unwrap();
    trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "process_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect()
}
