//! The Python calls of a VizTracer trace: each function's calls, total
//! and own time (as the in-job tracer counts them), and each call's depth
//! on its thread, from the calls' nesting in time.

use std::collections::HashMap;

use rankscope_common::kineto::RankTrace;

use crate::analysis::python::{most_own_time_first, RankFunction, RANK_FUNCTIONS};

/// A VizTracer call's function, file and line, from its name
/// (`Class.method (path/file.py:12)`); a name without a site (a C
/// function's) is the function, in no file.
pub fn site(name: &str) -> (&str, &str, u32) {
    let Some((function, site)) = name
        .strip_suffix(')')
        .and_then(|rest| rest.split_once(" ("))
    else {
        return (name, "", 0);
    };
    match site.rsplit_once(':') {
        Some((file, line)) => (function, file, line.parse().unwrap_or(0)),
        None => (function, site, 0),
    }
}

/// A trace's Python calls, analysed.
#[derive(Debug, Default)]
pub struct Calls {
    /// Its functions, the most own time first, at most [`RANK_FUNCTIONS`].
    pub functions: Vec<RankFunction>,
    /// Each call's depth on its thread, by row of the trace's
    /// `python_calls`.
    pub depth: Vec<u32>,
}

/// One open call while a thread's calls are walked.
struct Open {
    name: u32,
    end_ns: i64,
    dur_ns: i64,
    /// Time in the calls it made.
    inner_ns: i64,
}

/// Per name id: calls, total and own time.
type Totals = HashMap<u32, (u64, i64, i64)>;

/// Counts `call`, which returned, in its function's totals; `open_of`
/// holds how many calls of each function are open (its total counts only
/// the outermost).
fn close(call: Open, totals: &mut Totals, open_of: &mut HashMap<u32, u32>) {
    let open = open_of.entry(call.name).or_default();
    *open = open.saturating_sub(1);
    let entry = totals.entry(call.name).or_default();
    entry.0 += 1;
    if *open == 0 {
        entry.1 = entry.1.saturating_add(call.dur_ns);
    }
    let own = call.dur_ns.saturating_sub(call.inner_ns).max(0);
    entry.2 = entry.2.saturating_add(own);
}

/// The functions and depths of `trace`'s Python calls. A call inside
/// another (in time, on one thread) is its callee; a recursive call's time
/// counts once in its function's total, in its outermost call.
pub fn calls(trace: &RankTrace) -> Calls {
    let rows = &trace.python_calls;
    let mut order: Vec<usize> = (0..rows.name.len()).collect();
    // By thread; within it, a caller before its callees.
    order.sort_unstable_by_key(|&i| {
        (
            rows.thread[i],
            rows.start_ns[i],
            std::cmp::Reverse(rows.dur_ns[i]),
        )
    });
    let mut depth = vec![0; rows.name.len()];
    // Per name id: calls, total, own; and how many of its calls are open.
    let mut totals = Totals::new();
    let mut open_of: HashMap<u32, u32> = HashMap::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut thread = None;
    for i in order {
        if thread != Some(rows.thread[i]) {
            thread = Some(rows.thread[i]);
            while let Some(call) = stack.pop() {
                close(call, &mut totals, &mut open_of);
            }
        }
        let start = rows.start_ns[i];
        while stack.last().is_some_and(|top| top.end_ns <= start) {
            let call = stack.pop().expect("a call is open");
            close(call, &mut totals, &mut open_of);
        }
        depth[i] = stack.len() as u32;
        let dur_ns = rows.dur_ns[i];
        if let Some(caller) = stack.last_mut() {
            caller.inner_ns = caller.inner_ns.saturating_add(dur_ns);
        }
        *open_of.entry(rows.name[i]).or_default() += 1;
        stack.push(Open {
            name: rows.name[i],
            end_ns: start.saturating_add(dur_ns),
            dur_ns,
            inner_ns: 0,
        });
    }
    while let Some(call) = stack.pop() {
        close(call, &mut totals, &mut open_of);
    }
    let mut functions: Vec<RankFunction> = totals
        .into_iter()
        .map(|(id, (calls, total_ns, self_ns))| {
            let (name, file, line) = site(&trace.names[id as usize]);
            RankFunction {
                name: name.to_string(),
                file: file.to_string(),
                line,
                calls,
                total_ns: total_ns.unsigned_abs(),
                self_ns: self_ns.unsigned_abs(),
            }
        })
        .collect();
    most_own_time_first(&mut functions);
    functions.truncate(RANK_FUNCTIONS);
    Calls { functions, depth }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(calls: &[(&str, i64, i64, i64)]) -> RankTrace {
        let mut trace = RankTrace::default();
        for &(name, thread, start_ns, dur_ns) in calls {
            let id = match trace.names.iter().position(|n| n == name) {
                Some(id) => id,
                None => {
                    trace.names.push(name.to_string());
                    trace.names.len() - 1
                }
            };
            let rows = &mut trace.python_calls;
            rows.name.push(id as u32);
            rows.thread.push(thread);
            rows.start_ns.push(start_ns);
            rows.dur_ns.push(dur_ns);
        }
        trace
    }

    #[test]
    fn own_time_leaves_out_the_callees_and_recursion_counts_once_in_the_total() {
        // main [0, 100) calls fib [10, 60) which calls fib [20, 40); and
        // on another thread, work [0, 30).
        let calls = calls(&trace(&[
            ("fib (/p.py:5)", 1, 20, 20),
            ("main (/p.py:1)", 1, 0, 100),
            ("fib (/p.py:5)", 1, 10, 50),
            ("work (/p.py:9)", 2, 0, 30),
        ]));
        assert_eq!(calls.depth, [2, 0, 1, 0]);
        let by_name: HashMap<&str, &RankFunction> = calls
            .functions
            .iter()
            .map(|f| (f.name.as_str(), f))
            .collect();
        let fib = by_name["fib"];
        assert_eq!((fib.calls, fib.total_ns, fib.self_ns), (2, 50, 50));
        assert_eq!((fib.file.as_str(), fib.line), ("/p.py", 5));
        let main = by_name["main"];
        assert_eq!((main.calls, main.total_ns, main.self_ns), (1, 100, 50));
        assert_eq!(by_name["work"].self_ns, 30);
        assert_eq!(
            calls.functions[0].name, "fib",
            "the most own time first, then by site"
        );
    }

    #[test]
    fn a_name_gives_its_function_file_and_line() {
        assert_eq!(
            site("Work.run (/job/train.py:12)"),
            ("Work.run", "/job/train.py", 12)
        );
        assert_eq!(
            site("all_reduce (/x (y)/distributed_c10d.py:2050)"),
            ("all_reduce", "/x (y)/distributed_c10d.py", 2050)
        );
        assert_eq!(site("builtins.len"), ("builtins.len", "", 0));
    }
}
