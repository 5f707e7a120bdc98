//! Traced function calls (the Python package's function tracing): a
//! thread's calls entered and not returned, kept beside its open stages
//! with no lock; each return adds to its function's totals in the thread's
//! buffer (the `python_functions` rows, folded at each read of the rows)
//! and, where it lasted long enough and the row budget has room, keeps the
//! call as a `python_calls` row. Calls are timed in the hot paths' ticks,
//! as stages are: their rows' times become nanoseconds at the next pairing
//! pass, the totals' lengths when they are folded into rows.
//!
//! A function is known by a key its caller chooses (the Python package: the
//! code object's address, the object held alive while traced) and
//! described once per thread.

use rustc_hash::FxHashMap;

use rankscope_common::names::{NameId, OTHER};
use rankscope_common::table::{PythonCallRecord, PythonFunctionRecord, Table};

use super::thread::{ThreadBuffer, ThreadData};
use super::Recorder;
use crate::ticks::Scale;
use std::sync::atomic::Ordering;

/// Where a traced function is: what the report names it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSite<'a> {
    /// Its qualified name, its module first (`pkg.mod.Class.method`).
    pub name: &'a str,
    /// Its source file.
    pub file: &'a str,
    /// Its first line.
    pub line: u32,
}

/// A thread's traced calls, reached without a lock; they belong to one
/// session, and start afresh in the next (its keys may name other
/// functions, its calls under way never return into it).
#[derive(Default)]
pub(super) struct ThreadCalls {
    /// The session they belong to.
    session: u64,
    /// Each function's place in `active` and in the buffer's totals, by key.
    index: FxHashMap<usize, u32>,
    /// Calls of each function open now (its recursion).
    active: Vec<u32>,
    /// The calls entered and not returned, innermost last.
    stack: Vec<OpenCall>,
    /// Calls entered past `python_tracing_max_depth` and not returned.
    too_deep: u32,
    /// Where the functions past `max_names` on this thread add up, once
    /// one was.
    other: Option<u32>,
}

/// A call entered and not returned.
struct OpenCall {
    key: usize,
    function: u32,
    start_ticks: u64,
    /// Time in the traced calls it made, ticks.
    inner_ticks: u64,
}

/// One function's calls on a thread since the rows were last read; times
/// in ticks.
pub(crate) struct FunctionTotals {
    name: NameId,
    file: NameId,
    line: u32,
    calls: u64,
    total_ticks: u64,
    self_ticks: u64,
}

/// How far below the innermost call a return looks for its own: a return
/// of a call further down (its inner calls' returns lost) ends those too.
const RETURN_REACH: usize = 8;

impl ThreadCalls {
    /// Forgets the calls entered and not returned.
    fn clear(&mut self) {
        self.stack.clear();
        self.active.fill(0);
        self.too_deep = 0;
    }

    /// The calls of `session`: the thread's, or a fresh start where they
    /// belong to an earlier one.
    #[inline]
    fn of_session(&mut self, session: u64) -> &mut Self {
        if self.session != session {
            *self = ThreadCalls {
                session,
                ..ThreadCalls::default()
            };
        }
        self
    }

    /// The call that a return of `key` ends, taken off the stack with the
    /// calls above it (whose returns were lost); none where no call of
    /// `key` is near the top (tracing began inside it).
    fn take_returning(&mut self, key: usize) -> Option<OpenCall> {
        let reach = self.stack.len().saturating_sub(RETURN_REACH);
        let at = self.stack[reach..].iter().rposition(|c| c.key == key)? + reach;
        for lost in self.stack.drain(at + 1..) {
            self.active[lost.function as usize] -= 1;
        }
        self.stack.pop()
    }
}

impl ThreadData {
    /// Adds the functions' totals since the last read as `python_functions`
    /// rows, their lengths made nanoseconds by `scale`, and starts them
    /// again.
    pub(super) fn fold_function_totals(&mut self, scale: &Scale) {
        for totals in &mut self.functions {
            if totals.calls == 0 {
                continue;
            }
            self.records
                .python_functions
                .push_back(PythonFunctionRecord {
                    name: totals.name,
                    file: totals.file,
                    line: totals.line,
                    calls: std::mem::take(&mut totals.calls),
                    total_ns: scale.duration_ns(std::mem::take(&mut totals.total_ticks)),
                    self_ns: scale.duration_ns(std::mem::take(&mut totals.self_ticks)),
                });
        }
    }
}

impl Recorder {
    /// Records that this thread entered the function known by `key` now;
    /// `site` describes it, asked once per thread.
    #[inline]
    pub(crate) fn enter_function<'a>(&self, key: usize, site: impl FnOnce() -> FunctionSite<'a>) {
        let start_ticks = self.registry.clock.ticks();
        let session = self.registry.sessions.current();
        self.with_local(|local| {
            let calls = local.calls.of_session(session);
            if calls.too_deep > 0 || calls.stack.len() >= self.max_call_depth {
                calls.too_deep += 1;
                return;
            }
            let function = match calls.index.get(&key) {
                Some(&function) => function,
                None => self.add_function(calls, &local.buffer, key, site()),
            };
            let calls = &mut local.calls;
            calls.active[function as usize] += 1;
            calls.stack.push(OpenCall {
                key,
                function,
                start_ticks,
                inner_ticks: 0,
            });
        });
    }

    /// Records that this thread's innermost call of the function known by
    /// `key` returned now (or unwound). A return with no such call entered
    /// (tracing began inside it) is ignored.
    #[inline]
    pub(crate) fn exit_function(&self, key: usize) {
        let end_ticks = self.registry.clock.ticks();
        let session = self.registry.sessions.current();
        self.with_local(|local| {
            let calls = local.calls.of_session(session);
            if calls.too_deep > 0 {
                calls.too_deep -= 1;
                return;
            }
            let Some(call) = calls.take_returning(key) else {
                return;
            };
            let total_ticks = end_ticks.saturating_sub(call.start_ticks);
            if let Some(caller) = calls.stack.last_mut() {
                caller.inner_ticks += total_ticks;
            }
            let active = &mut calls.active[call.function as usize];
            *active -= 1;
            let outermost = *active == 0;
            let depth = calls.stack.len() as u32;
            let keep = total_ticks >= self.min_call_ticks.load(Ordering::Relaxed)
                && self.registry.budget.admit(Table::PythonCalls);
            let mut data = local.buffer.lock();
            let data = &mut *data;
            // None where the session's start cleared the totals since this
            // thread last looked.
            let Some(totals) = data.functions.get_mut(call.function as usize) else {
                return;
            };
            totals.calls += 1;
            totals.self_ticks += total_ticks.saturating_sub(call.inner_ticks);
            if outermost {
                totals.total_ticks += total_ticks;
            }
            if keep {
                let name = totals.name;
                data.records.python_calls.push_back(PythonCallRecord {
                    name,
                    thread: data.track,
                    depth,
                    start_ns: call.start_ticks,
                    end_ns: end_ticks,
                });
            }
        });
    }

    /// Forgets this thread's calls entered and not returned (tracing
    /// stopped, or starts again, mid-call).
    pub(crate) fn forget_calls(&self) {
        self.with_local(|local| local.calls.clear());
    }

    /// A function new to this thread: its names interned in the buffer.
    /// Past `max_names` functions, each new one adds up as `(other)`.
    #[cold]
    #[inline(never)]
    fn add_function(
        &self,
        calls: &mut ThreadCalls,
        buffer: &ThreadBuffer,
        key: usize,
        site: FunctionSite<'_>,
    ) -> u32 {
        let full = calls.active.len() >= self.max_names;
        if let (true, Some(other)) = (full, calls.other) {
            return other;
        }
        let site = match full {
            true => FunctionSite {
                name: OTHER,
                file: OTHER,
                line: 0,
            },
            false => site,
        };
        let mut data = buffer.lock();
        let function = data.functions.len() as u32;
        calls.active.resize(function as usize, 0);
        let totals = FunctionTotals {
            name: data.names.intern(site.name),
            file: data.names.intern(site.file),
            line: site.line,
            calls: 0,
            total_ticks: 0,
            self_ticks: 0,
        };
        data.functions.push(totals);
        calls.active.push(0);
        match full {
            true => calls.other = Some(function),
            false => {
                calls.index.insert(key, function);
            }
        }
        function
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::table::{PythonCallsView, PythonFunctionsView};
    use rankscope_common::Config;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn site(name: &str) -> FunctionSite<'_> {
        FunctionSite {
            name,
            file: "prog.py",
            line: 7,
        }
    }

    /// Calls of `name` (key: its first byte) around `inside`.
    fn call(recorder: &Recorder, name: &str, inside: impl FnOnce()) {
        let key = usize::from(name.as_bytes()[0]);
        recorder.enter_function(key, || site(name));
        inside();
        recorder.exit_function(key);
    }

    /// Per function name: (calls, total_ns, self_ns); and the rows kept as
    /// (name, depth, start_ns, end_ns).
    type Drained = (
        BTreeMap<String, (u64, u64, u64)>,
        Vec<(String, u32, u64, u64)>,
    );

    fn drained(recorder: &Recorder) -> Drained {
        let tables = recorder.drain().0.finish().unwrap();
        let mut functions = BTreeMap::new();
        if let Some(batch) = tables.get(&Table::PythonFunctions) {
            let view = PythonFunctionsView::new(batch).unwrap();
            for i in 0..batch.num_rows() {
                let entry: &mut (u64, u64, u64) =
                    functions.entry(view.name.get(i).to_string()).or_default();
                entry.0 += view.calls[i];
                entry.1 += view.total_ns[i];
                entry.2 += view.self_ns[i];
            }
        }
        let mut rows = Vec::new();
        if let Some(batch) = tables.get(&Table::PythonCalls) {
            let view = PythonCallsView::new(batch).unwrap();
            for i in 0..batch.num_rows() {
                rows.push((
                    view.name.get(i).to_string(),
                    view.depth[i],
                    view.start_ns[i],
                    view.end_ns[i],
                ));
            }
        }
        (functions, rows)
    }

    /// Equal but for rounding: lengths and times are made nanoseconds
    /// apart, each from its own ticks (and rate reading).
    fn assert_close(a: u64, b: u64, what: &str) {
        assert!(a.abs_diff(b) <= 1_000, "{what}: {a} against {b}");
    }

    fn recorder(config: Config) -> Recorder {
        let recorder = Recorder::new(&config);
        recorder.begin_session();
        recorder
    }

    #[test]
    fn calls_count_nest_and_split_self_from_total_time() {
        let recorder = recorder(Config::default());
        let sleep = |ms| std::thread::sleep(Duration::from_millis(ms));
        call(&recorder, "outer", || {
            sleep(20);
            for _ in 0..3 {
                call(&recorder, "inner", || sleep(10));
            }
        });
        let (functions, rows) = drained(&recorder);
        let (calls, total, own) = functions["outer"];
        assert_eq!(calls, 1);
        let (inner_calls, inner_total, inner_self) = functions["inner"];
        assert_eq!(inner_calls, 3);
        assert_eq!(inner_total, inner_self, "inner calls nothing traced");
        assert_close(
            own,
            total - inner_total,
            "outer's own time is its total less inner's",
        );
        assert!(own >= 20_000_000 && inner_total >= 30_000_000);
        assert_eq!(rows.len(), 4);
        let outer = rows.iter().find(|r| r.0 == "outer").unwrap();
        assert_eq!(outer.1, 0);
        for inner in rows.iter().filter(|r| r.0 == "inner") {
            assert_eq!(inner.1, 1, "one level down");
            assert!(
                outer.2 <= inner.2 && inner.3 <= outer.3,
                "inside its caller"
            );
        }
    }

    #[test]
    fn a_recursive_function_counts_its_time_once_in_its_total() {
        let recorder = recorder(Config::default());
        fn recurse(recorder: &Recorder, depth: u32) {
            call(recorder, "recurse", || {
                std::thread::sleep(Duration::from_millis(2));
                if depth > 0 {
                    recurse(recorder, depth - 1);
                }
            });
        }
        recurse(&recorder, 4);
        let (functions, rows) = drained(&recorder);
        let (calls, total, own) = functions["recurse"];
        assert_eq!(calls, 5);
        assert_eq!(total, own, "all of it is its own");
        let outermost = rows.iter().find(|r| r.1 == 0).unwrap();
        assert_close(
            total,
            outermost.3 - outermost.2,
            "the outermost call's length",
        );
    }

    #[test]
    fn calls_past_the_depth_limit_are_their_callers_own_time() {
        let recorder = recorder(Config {
            python_tracing_max_depth: 2,
            ..Config::default()
        });
        call(&recorder, "a", || {
            call(&recorder, "b", || {
                call(&recorder, "c", || call(&recorder, "d", || {}));
            })
        });
        call(&recorder, "e", || {});
        let (functions, rows) = drained(&recorder);
        assert_eq!(
            functions.keys().collect::<Vec<_>>(),
            ["a", "b", "e"],
            "c and d are too deep; e, after them, is traced"
        );
        assert_eq!(rows.len(), 3);
        assert_eq!(functions["b"].1, functions["b"].2);
    }

    #[test]
    fn short_calls_are_counted_but_not_kept_as_rows() {
        let recorder = recorder(Config {
            python_tracing_min_duration_us: 5_000.0,
            ..Config::default()
        });
        call(&recorder, "slow", || {
            for _ in 0..100 {
                call(&recorder, "quick", || {});
            }
            std::thread::sleep(Duration::from_millis(10));
        });
        let (functions, rows) = drained(&recorder);
        assert_eq!(functions["quick"].0, 100);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].0, "slow");
    }

    #[test]
    fn a_return_without_its_call_and_calls_past_the_row_budget_are_handled() {
        let recorder = recorder(Config {
            max_data_points: 10,
            ..Config::default()
        });
        // Tracing began inside `a`: its return is ignored.
        recorder.exit_function(usize::from(b'a'));
        for _ in 0..25 {
            call(&recorder, "b", || {});
        }
        let dropped = recorder.take_dropped();
        let (functions, rows) = drained(&recorder);
        assert!(!functions.contains_key("a"));
        assert_eq!(functions["b"].0, 25, "every call counted");
        assert_eq!(rows.len(), 10, "rows within the budget");
        assert!(dropped.contains(&(Table::PythonCalls, 15)), "{dropped:?}");
    }

    #[test]
    fn ten_million_calls_are_all_counted_and_rows_stay_within_the_budget() {
        const CALLS: u64 = 10_000_000;
        const BUDGET: usize = 100_000;
        let recorder = recorder(Config {
            max_data_points: BUDGET,
            ..Config::default()
        });
        // A loop calling a step that calls a small helper: 5 million of
        // each, nested.
        let (step, helper) = (usize::from(b's'), usize::from(b'h'));
        for _ in 0..CALLS / 2 {
            recorder.enter_function(step, || site("step"));
            recorder.enter_function(helper, || site("helper"));
            recorder.exit_function(helper);
            recorder.exit_function(step);
        }
        let dropped = recorder.take_dropped();
        let (functions, rows) = drained(&recorder);
        assert_eq!(functions["step"].0, CALLS / 2);
        assert_eq!(functions["helper"].0, CALLS / 2);
        assert_eq!(rows.len(), BUDGET, "rows within the budget");
        let cut = CALLS - BUDGET as u64;
        assert!(dropped.contains(&(Table::PythonCalls, cut)), "{dropped:?}");
    }

    #[test]
    fn a_lost_return_ends_the_calls_above_the_one_that_returns() {
        let recorder = recorder(Config::default());
        let (a, b) = (usize::from(b'a'), usize::from(b'b'));
        recorder.enter_function(a, || site("a"));
        // b's return is lost (a stack switch, another profiler's hook).
        recorder.enter_function(b, || site("b"));
        recorder.exit_function(a);
        call(&recorder, "a", || {});
        let (functions, rows) = drained(&recorder);
        assert_eq!(functions["a"].0, 2, "a's return found below b");
        assert!(!functions.contains_key("b"), "b never returned");
        assert!(
            rows.iter().all(|r| r.1 == 0),
            "the stack is whole again: {rows:?}"
        );
    }

    #[test]
    fn a_call_open_when_its_session_ends_is_forgotten_by_the_next() {
        let recorder = recorder(Config::default());
        recorder.enter_function(usize::from(b'a'), || site("a"));
        recorder.end_session();
        let _ = recorder.drain();
        recorder.begin_session();
        // The same key may name another function now.
        recorder.exit_function(usize::from(b'a'));
        call(&recorder, "a", || {});
        let (functions, rows) = drained(&recorder);
        assert_eq!(
            functions["a"].0, 1,
            "the first session's call is not this one's"
        );
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].1, 0);
    }

    #[test]
    fn functions_past_max_names_add_up_as_other() {
        let recorder = recorder(Config {
            max_names: 16,
            ..Config::default()
        });
        let names: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
        for (key, name) in names.iter().enumerate() {
            recorder.enter_function(key, || site(name));
            recorder.exit_function(key);
        }
        let (functions, _) = drained(&recorder);
        assert!(functions.len() <= 17, "{functions:?}");
        let counted: u64 = functions.values().map(|f| f.0).sum();
        assert_eq!(counted, 40, "every call counted somewhere");
        assert!(functions.contains_key(OTHER));
    }
}
