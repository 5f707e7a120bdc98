//! Traced Python functions across ranks (`python_functions[]`): each
//! rank's `python_functions` rows summed per function (its flushes' and
//! threads' rows together), the costliest [`RANK_FUNCTIONS`] kept in its
//! digest; across ranks, each function's calls and times, the ranks with
//! the least and the most of its own time, and how far the most is past
//! the others' median.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::stats::imbalance_pct;
use super::stragglers::StragglerRule;
use crate::model::{KernelStraggler, PythonFunctionStats};
use rankscope_common::table::PythonFunctionsView;
use rankscope_common::Payload;

/// Functions a rank's digest keeps, the most own time first.
pub const RANK_FUNCTIONS: usize = 500;

/// Functions `python_functions[]` lists, the most own time first.
pub const FUNCTIONS_LISTED: usize = 100;

/// The category of a Python function's entry in `kernel_stragglers[]`.
pub const PYTHON_FUNCTION: &str = "python_function";

/// Where `torch.distributed` lives: a function there spends its own time
/// waiting for the other ranks (the collective's C++ call and its wait are
/// inside it), so its being longest on a rank is no work of that rank's.
const WAITING_FILES: [&str; 2] = ["torch/distributed/", "torch\\distributed\\"];

/// C functions (traced as such: VizTracer's default, or
/// `python_tracing_c_functions`) whose own time is a wait for the other
/// ranks or for the GPU.
const WAITING_NAMES: [&str; 3] = [
    "torch._C._distributed_c10d",
    "torch.cuda.synchronize",
    "torch._C._cuda_synchronize",
];

/// Whether `function`'s own time is waiting, not work.
fn waits(function: &RankFunction) -> bool {
    WAITING_FILES.iter().any(|w| function.file.contains(w))
        || WAITING_NAMES.iter().any(|w| function.name.starts_with(w))
}

/// One function's calls on one rank.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RankFunction {
    /// Qualified name.
    pub name: String,
    /// Source file.
    pub file: String,
    /// First line.
    pub line: u32,
    /// Calls that returned.
    pub calls: u64,
    /// Time in its calls, those they made included, ns.
    pub total_ns: u64,
    /// Time in its calls less that in the traced calls they made, ns.
    pub self_ns: u64,
}

/// A rank's traced functions, the most own time first (at most
/// [`RANK_FUNCTIONS`]); empty where it traced none.
pub fn rank_functions(payload: &Payload) -> Result<Vec<RankFunction>, String> {
    let view = match payload.view::<PythonFunctionsView>() {
        Ok(Some(view)) => view,
        Ok(None) => return Ok(Vec::new()),
        Err(e) => return Err(e.to_string()),
    };
    let mut summed: HashMap<(&str, &str, u32), RankFunction> = HashMap::new();
    for i in 0..view.calls.len() {
        let key = (view.name.get(i), view.file.get(i), view.line[i]);
        let function = summed.entry(key).or_insert_with(|| RankFunction {
            name: key.0.to_string(),
            file: key.1.to_string(),
            line: key.2,
            ..RankFunction::default()
        });
        function.calls = function.calls.saturating_add(view.calls[i]);
        function.total_ns = function.total_ns.saturating_add(view.total_ns[i]);
        function.self_ns = function.self_ns.saturating_add(view.self_ns[i]);
    }
    let mut functions: Vec<RankFunction> = summed.into_values().collect();
    most_own_time_first(&mut functions);
    functions.truncate(RANK_FUNCTIONS);
    Ok(functions)
}

/// `python_functions[]` from each rank's traced functions, `(rank,
/// functions)`; a function a tracing rank did not call counts 0 there,
/// unless the rank's list was cut at [`RANK_FUNCTIONS`] (it may have called
/// it: that rank is left out of the function's least, most and imbalance).
pub fn across_ranks(ranks: &[(u32, &[RankFunction])]) -> Vec<PythonFunctionStats> {
    let tracing = complete_lists(ranks);
    let mut across: HashMap<(&str, &str, u32), Across> = HashMap::new();
    for (rank, functions) in ranks {
        for f in functions.iter() {
            let entry = across
                .entry((&f.name, &f.file, f.line))
                .or_insert_with(|| Across::new(&tracing));
            entry.calls = entry.calls.saturating_add(f.calls);
            entry.total_ns = entry.total_ns.saturating_add(f.total_ns);
            entry.self_s.insert(*rank, f.self_ns as f64 / 1e9);
        }
    }
    let mut stats: Vec<PythonFunctionStats> = across
        .into_iter()
        .map(|((name, file, line), across)| across.stats(name, file, line))
        .collect();
    most_own_time_first(&mut stats);
    stats.truncate(FUNCTIONS_LISTED);
    stats
}

/// The ranks slow at a function, by its own time past the straggler
/// `rule` over the other tracing ranks' median, as `kernel_stragglers[]`
/// entries of category [`PYTHON_FUNCTION`]: one more link from a slow
/// rank to its cause. Functions whose own time is waiting (those of
/// `torch.distributed`, its C calls', a CUDA synchronisation's) are left
/// out, and so are the ranks whose list was cut.
pub fn stragglers(ranks: &[(u32, &[RankFunction])], rule: StragglerRule) -> Vec<KernelStraggler> {
    let tracing: Vec<u32> = complete_lists(ranks);
    let mut own: HashMap<(&str, &str, u32), BTreeMap<u32, f64>> = HashMap::new();
    for (rank, functions) in ranks.iter().filter(|(rank, _)| tracing.contains(rank)) {
        for f in functions.iter() {
            if waits(f) {
                continue;
            }
            let by_rank = own
                .entry((&f.name, &f.file, f.line))
                .or_insert_with(|| tracing.iter().map(|&r| (r, 0.0)).collect());
            by_rank.insert(*rank, f.self_ns as f64 / 1e9);
        }
    }
    own.into_iter()
        .flat_map(|((name, _, _), by_rank)| {
            rule.slow_ranks(by_rank.into_iter().collect())
                .into_iter()
                .map(move |slow| KernelStraggler {
                    rank: slow.rank,
                    kernel: name.to_string(),
                    category: PYTHON_FUNCTION.to_string(),
                    slowdown: slow.total / slow.median,
                    excess_s: slow.total - slow.median,
                    stage: None,
                    evidence: Vec::new(),
                })
        })
        .collect()
}

/// The ranks that traced functions and whose list was not cut at
/// [`RANK_FUNCTIONS`].
fn complete_lists(ranks: &[(u32, &[RankFunction])]) -> Vec<u32> {
    ranks
        .iter()
        .filter(|(_, functions)| !functions.is_empty() && functions.len() < RANK_FUNCTIONS)
        .map(|(rank, _)| *rank)
        .collect()
}

/// One function's calls across ranks.
struct Across {
    calls: u64,
    total_ns: u64,
    /// Own time per tracing rank, seconds.
    self_s: BTreeMap<u32, f64>,
}

impl Across {
    fn new(tracing: &[u32]) -> Self {
        Across {
            calls: 0,
            total_ns: 0,
            self_s: tracing.iter().map(|&rank| (rank, 0.0)).collect(),
        }
    }

    fn stats(self, name: &str, file: &str, line: u32) -> PythonFunctionStats {
        let least = self.self_s.iter().min_by(|a, b| a.1.total_cmp(b.1));
        let most = self.self_s.iter().max_by(|a, b| a.1.total_cmp(b.1));
        let mut sorted: Vec<f64> = self.self_s.values().copied().collect();
        sorted.sort_by(f64::total_cmp);
        PythonFunctionStats {
            name: name.to_string(),
            file: file.to_string(),
            line,
            calls: self.calls,
            self_s: sorted.iter().sum(),
            total_s: self.total_ns as f64 / 1e9,
            min_rank: least.map(|(&rank, _)| rank),
            min_s: least.map(|(_, &s)| s),
            max_rank: most.map(|(&rank, _)| rank),
            max_s: most.map(|(_, &s)| s),
            imbalance_pct: imbalance_pct(&sorted),
        }
    }
}

/// A function's own time and where it is, to order functions by.
pub(crate) trait OwnTime {
    fn own(&self) -> f64;
    fn site(&self) -> (&str, &str, u32);
}

impl OwnTime for RankFunction {
    fn own(&self) -> f64 {
        self.self_ns as f64
    }
    fn site(&self) -> (&str, &str, u32) {
        (&self.name, &self.file, self.line)
    }
}

impl OwnTime for PythonFunctionStats {
    fn own(&self) -> f64 {
        self.self_s
    }
    fn site(&self) -> (&str, &str, u32) {
        (&self.name, &self.file, self.line)
    }
}

/// Sorts `items` by their own time, the most first, then by site.
pub(crate) fn most_own_time_first(items: &mut [impl OwnTime]) {
    items.sort_by(|a, b| {
        b.own()
            .total_cmp(&a.own())
            .then_with(|| a.site().cmp(&b.site()))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn function(name: &str, calls: u64, self_ms: u64) -> RankFunction {
        RankFunction {
            name: name.into(),
            file: "prog.py".into(),
            line: 1,
            calls,
            total_ns: self_ms * 2_000_000,
            self_ns: self_ms * 1_000_000,
        }
    }

    #[test]
    fn a_rank_slow_in_a_function_is_its_straggler_but_not_one_waiting_in_a_collective() {
        let waiting = |self_ms| RankFunction {
            file: "/venv/torch/distributed/distributed_c10d.py".into(),
            ..function("all_reduce", 10, self_ms)
        };
        // VizTracer's C functions: the wait inside the collective's call.
        let c_wait = |self_ms| RankFunction {
            file: String::new(),
            ..function("torch._C._distributed_c10d.Work.wait", 10, self_ms)
        };
        // Rank 1 tokenizes 4x as long; rank 0 waits for it in all_reduce,
        // 300x as long as rank 1 does.
        let fast = vec![function("app.tokenize", 10, 100), waiting(300), c_wait(300)];
        let slow = vec![function("app.tokenize", 10, 400), waiting(1), c_wait(1)];
        let ranks: Vec<(u32, &[RankFunction])> = vec![(0, &fast), (1, &slow)];
        let rule = StragglerRule {
            threshold_pct: 10.0,
            min_excess_s: 0.01,
        };
        let found = stragglers(&ranks, rule);
        let [straggler] = found.as_slice() else {
            panic!("{found:?}")
        };
        assert_eq!(
            (
                straggler.rank,
                straggler.kernel.as_str(),
                straggler.category.as_str()
            ),
            (1, "app.tokenize", PYTHON_FUNCTION)
        );
        assert!((straggler.slowdown - 4.0).abs() < 1e-9);
        assert!((straggler.excess_s - 0.3).abs() < 1e-9);
    }

    #[test]
    fn a_function_slow_on_one_rank_is_named_with_it() {
        let fast = vec![
            function("app.tokenize", 10, 100),
            function("app.step", 10, 50),
        ];
        let slow = vec![
            function("app.tokenize", 10, 400),
            function("app.step", 10, 50),
        ];
        let ranks: Vec<(u32, &[RankFunction])> =
            vec![(0, &fast), (1, &fast), (2, &slow), (3, &fast)];
        let stats = across_ranks(&ranks);
        assert_eq!(stats[0].name, "app.tokenize", "the most own time first");
        assert_eq!(stats[0].calls, 40);
        assert_eq!(stats[0].max_rank, Some(2));
        assert_eq!(stats[0].min_rank, Some(0));
        assert!((stats[0].imbalance_pct - 300.0).abs() < 1e-9);
        assert!((stats[0].self_s - 0.7).abs() < 1e-9);
        assert!((stats[0].total_s - 1.4).abs() < 1e-9);
        assert_eq!(stats[1].imbalance_pct, 0.0);
    }

    #[test]
    fn a_rank_whose_list_was_cut_is_not_counted_at_0_for_what_it_left_out() {
        let full: Vec<RankFunction> = (0..RANK_FUNCTIONS)
            .map(|i| function(&format!("app.f{i}"), 1, 1000 + i as u64))
            .collect();
        let small = vec![function("app.small", 1, 10_000)];
        let ranks: Vec<(u32, &[RankFunction])> = vec![(0, &full), (1, &small), (2, &small)];
        let stats = across_ranks(&ranks);
        let only = stats.iter().find(|s| s.name == "app.small").unwrap();
        assert_eq!(
            only.min_s,
            Some(10.0),
            "rank 0's cut list says nothing of it"
        );
        assert_eq!(only.imbalance_pct, 0.0);
    }

    #[test]
    fn a_function_one_rank_never_called_counts_nothing_there() {
        let called = vec![function("app.only_here", 1, 10)];
        let other = vec![function("app.elsewhere", 1, 10)];
        let none: Vec<RankFunction> = Vec::new();
        let ranks: Vec<(u32, &[RankFunction])> = vec![(0, &called), (1, &other), (2, &none)];
        let stats = across_ranks(&ranks);
        let only = stats.iter().find(|s| s.name == "app.only_here").unwrap();
        assert_eq!(only.min_rank, Some(1), "a tracing rank without it: 0 there");
        assert_eq!(only.min_s, Some(0.0));
        assert_eq!(only.max_rank, Some(0));
    }
}
