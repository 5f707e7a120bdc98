//! Clocks of imported traces aligned from the data itself. Traces from
//! different hosts (or a VizTracer trace on the monotonic clock beside a
//! torch.profiler trace on the wall clock) share no clock; but a
//! collective completes together on every rank that takes part, and one
//! rank's two traces see its calls begin together, so matched calls give
//! each trace's offset to a reference trace's clock.
//!
//! Calls are matched in order: the i-th call of a kind on one trace with
//! the i-th of that kind on the other, unless skewing the match by a few
//! calls (one trace holds calls the other began after) lines them up far
//! more tightly. The offset is the median of the
//! matched times' differences, robust to the calls that do not line up
//! (a one-off stall), and its spread the median absolute deviation from
//! it.
//!
//! What is compared:
//! - across ranks, the ends of GPU collective kernels
//!   (`ncclDevKernel_AllReduce…`) where both traces have them;
//! - else, across ranks, the ends of the `barrier` calls of VizTracer
//!   traces: a barrier blocks the host until every rank arrived, whatever
//!   the backend. Another Python call may return at enqueue (NCCL), and
//!   torch.profiler's host spans of collectives end when the host is done:
//!   those are never compared across ranks;
//! - across ranks whose torch.profiler traces share no GPU kernel, those
//!   barriers of their VizTracer traces, each taken back to its rank's
//!   torch.profiler clock by the comparison below (`import::align`);
//! - within a rank, between its VizTracer and torch.profiler traces, each
//!   Python collective call and the dispatcher op (`c10d::allreduce_`)
//!   it makes: the offset is the one at which most calls hold an op.
//!
//! Collectives are matched by kind, not by process group: where ranks
//! run collectives in several groups (tensor and pipeline parallel), the
//! i-th call of a kind on two ranks may be two groups' calls, and the
//! spread says so.

use std::collections::BTreeMap;
use std::sync::Arc;

use rankscope_common::kineto::{collective_kind, function_kind, KernelCategory, RankTrace};

use super::python::site;
use crate::analysis::kernels::CollectiveCall;

/// The `torch.distributed` module whose functions are the collectives of
/// a VizTracer trace.
const C10D_FILE: &str = "torch/distributed/distributed_c10d.py";

/// Point-to-point kinds: a send and its receive are two ranks' calls,
/// and the i-th of one rank is not the i-th of another.
const POINT_TO_POINT: [&str; 3] = ["send", "recv", "send_recv"];

/// Times by collective kind, in call order, ns on a trace's clock.
type ByKind = BTreeMap<String, Vec<i64>>;

/// The most marks of a kind kept per trace (the earliest): a median needs
/// far fewer, and the marks of every rank are held until all are read.
const MAX_MARKS: usize = 4_096;

/// Python calls of a kind considered when one rank's two traces are set
/// side by side (the earliest), each weighed against the earliest
/// [`MAX_CONSENSUS_OPS`] dispatcher ops of its kind.
const MAX_CONSENSUS_CALLS: usize = 64;

/// Dispatcher ops of a kind the calls are weighed against.
const MAX_CONSENSUS_OPS: usize = 1_024;

/// Fewest calls that must hold their op, where that many were considered.
const CONSENSUS_FLOOR: usize = 3;

/// The share of a rank's Python collective calls that must hold a
/// dispatcher op of their kind once aligned, or the trace is not aligned.
const CONSENSUS_SHARE: f64 = 0.8;

/// The one collective that blocks the host until every rank arrived,
/// whatever the backend (NCCL's `barrier` synchronises the device): a
/// Python call of another kind may return at enqueue.
const BLOCKING: &str = "barrier";

/// The times of a trace's collective calls that can align its clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectiveMarks {
    /// The ends of GPU collective kernels.
    pub gpu_ends: ByKind,
    /// The `torch.distributed` calls a VizTracer trace holds: (start, end)
    /// by kind, in time order.
    pub python_calls: BTreeMap<String, Vec<(i64, i64)>>,
    /// The starts of torch.profiler's dispatcher ops of collectives
    /// (`c10d::allreduce_`; else its collective spans).
    pub host_starts: ByKind,
}

impl CollectiveMarks {
    /// The marks of `trace`'s collectives, the earliest [`MAX_MARKS`] of
    /// each kind.
    pub fn of(trace: &RankTrace) -> Self {
        let at = |ns: i64| trace.base_time_ns.unwrap_or(0).saturating_add(ns);
        let gpu = &trace.gpu;
        let kernels = (0..gpu.name.len())
            .filter(|&i| gpu.category[i] == KernelCategory::Communication)
            .filter_map(|i| {
                let kind = collective_kind(&trace.names[gpu.name[i] as usize])?;
                Some((at(gpu.start_ns[i].saturating_add(gpu.dur_ns[i])), kind))
            });
        // The dispatcher's `c10d::allreduce_` runs on the calling thread,
        // just inside the Python call; a backend's span (`gloo:all_reduce`)
        // may begin later, on its own thread.
        let spans = &trace.cpu_spans;
        let mut host: Vec<(i64, String)> = (0..spans.name.len())
            .filter_map(|i| {
                let op = trace.names[spans.name[i] as usize].strip_prefix("c10d::")?;
                Some((at(spans.start_ns[i]), function_kind(op)?.to_string()))
            })
            .collect();
        if host.is_empty() {
            let calls = &trace.collectives;
            host.extend((0..calls.kind.len()).map(|i| {
                let kind = trace.names[calls.kind[i] as usize].clone();
                (at(calls.start_ns[i]), kind)
            }));
        }
        let python = &trace.python_calls;
        let mut python_calls: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for i in 0..python.name.len() {
            let (function, file, _) = site(&trace.names[python.name[i] as usize]);
            let Some(kind) = function_kind(function).filter(|_| is_c10d(file)) else {
                continue;
            };
            let start = python.start_ns[i];
            let end = start.saturating_add(python.dur_ns[i]);
            python_calls
                .entry(kind.to_string())
                .or_default()
                .push((at(start), at(end)));
        }
        for calls in python_calls.values_mut() {
            // All of them: a VizTracer-only rank's collectives are these.
            calls.sort_unstable();
        }
        CollectiveMarks {
            gpu_ends: by_kind(kernels),
            python_calls,
            host_starts: by_kind(host.into_iter()),
        }
    }

    /// The `torch.distributed` calls of a VizTracer trace as collective
    /// calls on the host (window 1, no group).
    pub fn host_calls(&self) -> Vec<CollectiveCall> {
        let mut calls = Vec::new();
        for (kind, spans) in &self.python_calls {
            let kind: Arc<str> = Arc::from(kind.as_str());
            calls.extend(spans.iter().map(|&(start, end)| CollectiveCall {
                window: 1,
                kind: Arc::clone(&kind),
                group: None,
                bytes: None,
                start_ns: start,
                dur_ns: end.saturating_sub(start),
                steady: true,
            }));
        }
        calls
    }

    /// The ends of the Python calls of `kind`.
    fn python_ends(&self, kind: &str) -> ByKind {
        let ends = self
            .python_calls
            .get(kind)
            .map(|calls| calls.iter().map(|c| c.1).collect());
        ends.map(|ends| ByKind::from([(kind.to_string(), ends)]))
            .unwrap_or_default()
    }
}

/// Whether `file` is `torch.distributed`'s module of collectives.
pub fn is_c10d(file: &str) -> bool {
    let file = file.replace('\\', "/");
    file.ends_with(C10D_FILE)
}

/// `(time, kind)` pairs grouped by kind, each kind's earliest
/// [`MAX_MARKS`] in time order.
fn by_kind(marks: impl Iterator<Item = (i64, String)>) -> ByKind {
    let mut grouped = ByKind::new();
    for (at, kind) in marks.filter(|(_, kind)| !POINT_TO_POINT.contains(&kind.as_str())) {
        grouped.entry(kind).or_default().push(at);
    }
    for times in grouped.values_mut() {
        times.sort_unstable();
        times.truncate(MAX_MARKS);
    }
    grouped
}

/// A trace's clock against the reference's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// The trace's clock minus the reference's, ns.
    pub ns: i64,
    /// The median absolute deviation of the matched times' differences
    /// from `ns`: how far a typical call is off once aligned.
    pub spread_ns: u64,
    /// Calls matched.
    pub matched: usize,
    /// Whether GPU kernels were compared (else the host's calls).
    pub gpu: bool,
}

impl Offset {
    /// The reference's own.
    pub const ZERO: Offset = Offset {
        ns: 0,
        spread_ns: 0,
        matched: 0,
        gpu: false,
    };
}

/// The offset of `other`'s clock to `reference`'s, two ranks' traces:
/// from the ends of their GPU collective kernels where both have a kind in
/// common, else of their `barrier` calls (VizTracer's); `None` where they
/// share neither.
pub fn offset(reference: &CollectiveMarks, other: &CollectiveMarks) -> Option<Offset> {
    offset_of(&reference.gpu_ends, &other.gpu_ends, true).or_else(|| {
        offset_of(
            &reference.python_ends(BLOCKING),
            &other.python_ends(BLOCKING),
            false,
        )
    })
}

/// The offset of `calls`' clock (a VizTracer trace's) to `ops`' (the same
/// rank's torch.profiler trace): the offset at which the most Python
/// collective calls hold a dispatcher op of their kind (a call may make
/// none, as DDP's bucket all-reduces have no Python call of their own),
/// at least [`CONSENSUS_SHARE`] of those that overlap the ops' span there
/// (a torch.profiler window may cover fewer steps than VizTracer) and at
/// least [`CONSENSUS_FLOOR`]: within a region of such offsets
/// the least (each call begins before its op, and the call whose op came
/// soonest bounds it), and of several regions the one whose calls reach
/// their ops soonest. Its spread is the median lag from a call's start to
/// its op.
pub fn same_rank_offset(ops: &CollectiveMarks, calls: &CollectiveMarks) -> Option<Offset> {
    // Per call, the offsets at which an op of its kind starts inside it:
    // [start - op, end - op], merged; swept for the most calls at once.
    let mut edges: Vec<(i64, i32)> = Vec::new();
    let mut considered = 0usize;
    for (kind, python) in &calls.python_calls {
        let Some(op_starts) = consensus_ops(ops, kind) else {
            continue;
        };
        for &(start, end) in python.iter().take(MAX_CONSENSUS_CALLS) {
            considered += 1;
            let mut spans: Vec<(i64, i64)> = op_starts
                .iter()
                .map(|op| (start.saturating_sub(*op), end.saturating_sub(*op)))
                .collect();
            spans.sort_unstable();
            let mut merged: Vec<(i64, i64)> = Vec::new();
            for (lo, hi) in spans {
                match merged.last_mut() {
                    Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
            for (lo, hi) in merged {
                // Closed spans: an opening counts before a closing at one offset.
                edges.push((lo, 1));
                edges.push((hi, 2));
            }
        }
    }
    edges.sort_unstable();
    // Where the most calls hold an op: each such region's least offset.
    let (mut open, mut most, mut regions) = (0usize, 0usize, Vec::new());
    for (at, edge) in edges {
        if edge == 1 {
            open += 1;
            if open > most {
                (most, regions) = (open, vec![at]);
            } else if open == most {
                regions.push(at);
            }
        } else {
            open = open.saturating_sub(1);
        }
    }
    let floor = CONSENSUS_FLOOR.min(considered).max(1);
    // Of those (ops recurring each step may fit calls at more than one),
    // the one whose calls reach their ops soonest.
    regions
        .into_iter()
        .filter_map(|ns| {
            let (mut lags, overlapping) = fit_at(ops, calls, ns);
            let held = lags.len();
            let enough = held >= floor && held as f64 >= CONSENSUS_SHARE * overlapping as f64;
            enough.then(|| Offset {
                ns,
                spread_ns: median(&mut lags).unwrap_or(0).unsigned_abs(),
                matched: held,
                gpu: false,
            })
        })
        .min_by_key(|o| (o.spread_ns, std::cmp::Reverse(o.ns)))
}

/// The dispatcher ops of `kind` the consensus weighs (the earliest).
fn consensus_ops<'a>(ops: &'a CollectiveMarks, kind: &str) -> Option<&'a [i64]> {
    let starts = ops.host_starts.get(kind)?;
    Some(&starts[..starts.len().min(MAX_CONSENSUS_OPS)])
}

/// With `calls` moved back by `ns`: the lag from each call's start to the
/// first op of its kind inside it (where one is), and how many calls
/// overlap their kind's ops' span at all.
fn fit_at(ops: &CollectiveMarks, calls: &CollectiveMarks, ns: i64) -> (Vec<i64>, usize) {
    let (mut lags, mut overlapping) = (Vec::new(), 0);
    for (kind, python) in &calls.python_calls {
        let Some(op_starts) = consensus_ops(ops, kind) else {
            continue;
        };
        let (Some(&first_op), Some(&last_op)) = (op_starts.first(), op_starts.last()) else {
            continue;
        };
        for &(start, end) in python.iter().take(MAX_CONSENSUS_CALLS) {
            let (start, end) = (start.saturating_sub(ns), end.saturating_sub(ns));
            if end < first_op || start > last_op {
                continue;
            }
            overlapping += 1;
            let first = op_starts.partition_point(|&op| op < start);
            if let Some(&op) = op_starts.get(first).filter(|&&op| op <= end) {
                lags.push(op.saturating_sub(start));
            }
        }
    }
    (lags, overlapping)
}

/// The median difference of `other`'s times to `reference`'s, matched by
/// kind and order.
fn offset_of(reference: &ByKind, other: &ByKind, gpu: bool) -> Option<Offset> {
    median_offset(differences(reference, other), gpu)
}

/// Calls one trace may have begun or ended with that the other did not:
/// the i-th of a kind is matched with the (i + k)-th, |k| up to this.
const MAX_SKEW: usize = 8;

/// Each matched pair's time on `other` less that on `reference`, kind by
/// kind: the i-th call with the i-th, unless another skew (one trace
/// holding calls the other missed at its start) matches them far more
/// tightly.
fn differences(reference: &ByKind, other: &ByKind) -> Vec<i64> {
    let mut differences: Vec<i64> = Vec::new();
    for (kind, times) in other {
        if let Some(reference_times) = reference.get(kind) {
            differences.extend(best_skew(reference_times, times));
        }
    }
    differences
}

/// The differences of `times` to `reference` under the skew whose spread
/// is least: in order (skew 0) unless another's is under a quarter of it,
/// over at least 3 pairs (of equal spreads, the most pairs).
fn best_skew(reference: &[i64], times: &[i64]) -> Vec<i64> {
    let skewed = |skip_reference: usize, skip_times: usize| -> Vec<i64> {
        let pairs = times
            .iter()
            .skip(skip_times)
            .zip(reference.iter().skip(skip_reference));
        pairs.map(|(t, at)| t.saturating_sub(*at)).collect()
    };
    let spread =
        |differences: &[i64]| median_offset(differences.to_vec(), false).map(|o| o.spread_ns);
    let in_order = skewed(0, 0);
    let Some(in_order_spread) = spread(&in_order) else {
        return in_order;
    };
    let bar = in_order_spread / 4;
    let mut best: Option<(u64, Vec<i64>)> = None;
    for skew in 1..=MAX_SKEW {
        for candidate in [skewed(skew, 0), skewed(0, skew)] {
            let Some(s) = spread(&candidate).filter(|&s| s < bar && candidate.len() >= 3) else {
                continue;
            };
            let better = best.as_ref().is_none_or(|(least, kept)| {
                s < *least || (s == *least && candidate.len() > kept.len())
            });
            if better {
                best = Some((s, candidate));
            }
        }
    }
    best.map_or(in_order, |(_, differences)| differences)
}

/// The offset the median of `differences` gives, with their spread.
fn median_offset(mut differences: Vec<i64>, gpu: bool) -> Option<Offset> {
    let ns = median(&mut differences)?;
    let mut deviations: Vec<i64> = differences
        .iter()
        .map(|d| d.saturating_sub(ns).saturating_abs())
        .collect();
    let spread = median(&mut deviations).unwrap_or(0);
    Some(Offset {
        ns,
        spread_ns: spread.unsigned_abs(),
        matched: differences.len(),
        gpu,
    })
}

/// The median of `values` (the lower of the middle two); `None` if empty.
fn median(values: &mut [i64]) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let middle = (values.len() - 1) / 2;
    Some(*values.select_nth_unstable(middle).1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(kind: &str, at: &[i64]) -> ByKind {
        BTreeMap::from([(kind.to_string(), at.to_vec())])
    }

    #[test]
    fn the_offset_is_the_median_difference_and_a_stray_call_does_not_move_it() {
        let reference = CollectiveMarks {
            gpu_ends: times("all_reduce", &[100, 200, 300, 400, 500]),
            ..CollectiveMarks::default()
        };
        // Shifted by 1,000 ns, one call's end 50 ns late.
        let other = CollectiveMarks {
            gpu_ends: times("all_reduce", &[1_100, 1_200, 1_350, 1_400, 1_500]),
            ..CollectiveMarks::default()
        };
        let offset = offset(&reference, &other).unwrap();
        assert_eq!((offset.ns, offset.spread_ns, offset.matched), (1_000, 0, 5));
        assert!(offset.gpu);
    }

    /// Python calls of `kind`, (start, end) each.
    fn calls(kind: &str, spans: &[(i64, i64)]) -> BTreeMap<String, Vec<(i64, i64)>> {
        BTreeMap::from([(kind.to_string(), spans.to_vec())])
    }

    #[test]
    fn barriers_align_ranks_without_gpu_kernels_and_other_calls_never_do() {
        let reference = CollectiveMarks {
            gpu_ends: times("all_reduce", &[100]),
            python_calls: calls("barrier", &[(0, 10), (15, 20), (25, 30)]),
            ..CollectiveMarks::default()
        };
        let other = CollectiveMarks {
            python_calls: calls("barrier", &[(0, 5), (12, 16), (20, 24)]),
            ..CollectiveMarks::default()
        };
        let offset = offset(&reference, &other).unwrap();
        assert_eq!((offset.ns, offset.spread_ns, offset.gpu), (-5, 1, false));
        // An NCCL all_reduce's Python call returns at enqueue; the host's
        // dispatcher ops end when the host is done.
        let not_blocking = CollectiveMarks {
            python_calls: calls("all_reduce", &[(0, 5), (12, 16), (20, 24)]),
            host_starts: times("barrier", &[1, 2, 3]),
            ..CollectiveMarks::default()
        };
        assert_eq!(super::offset(&reference, &not_blocking), None);
    }

    #[test]
    fn one_ranks_python_calls_are_placed_where_most_hold_their_ops() {
        // Steps of 10,000 ns: DDP's bucket all-reduces at uneven times in
        // each (no Python call of their own), then the user's Python
        // all_reduce, beginning 10 to 40 ns before its op and lasting
        // 200 ns, on a clock 50,000 ns ahead.
        let lags = [10, 40, 25, 30, 15, 35, 20, 10, 30, 25];
        let mut ops = Vec::new();
        let mut python = Vec::new();
        // Steps are never quite equal: each begins up to 5,000 ns late,
        // far more than a call lasts (a step's time varies by more than an
        // enqueue takes), so only the true offset fits every call.
        let late = [0, 3_100, 700, 4_400, 1_900, 2_600, 400, 3_800, 1_200, 4_900];
        let step_at = |step: i64| step * 20_000 + late[step as usize];
        for (step, lag) in lags.iter().enumerate() {
            let at = step_at(step as i64);
            let jitter = (step as i64 * 37) % 300;
            ops.extend([
                at + 1_000 + jitter,
                at + 1_900 - jitter,
                at + 3_100 + 2 * jitter,
            ]);
            ops.push(at + 6_000);
            let start = at + 6_000 - lag + 50_000;
            python.push((start, start + 200));
        }
        let torch = CollectiveMarks {
            host_starts: times("all_reduce", &ops),
            ..CollectiveMarks::default()
        };
        let viztracer = CollectiveMarks {
            python_calls: calls("all_reduce", &python),
            ..CollectiveMarks::default()
        };
        let offset = same_rank_offset(&torch, &viztracer).unwrap();
        // The least lag (10 ns) bounds it: every call holds its op.
        assert_eq!((offset.ns, offset.matched), (50_000 - 10, 10));
        assert_eq!(
            offset.spread_ns, 15,
            "the median lag less the least (10 ns)"
        );
        // A torch.profiler window of 3 of the 10 steps: the calls outside
        // it cannot hold an op, and do not count against it.
        let window_ops: Vec<i64> = (3..6).map(|step| step_at(step) + 6_000).collect();
        let window = CollectiveMarks {
            host_starts: times("all_reduce", &window_ops),
            ..CollectiveMarks::default()
        };
        let offset = same_rank_offset(&window, &viztracer).unwrap();
        assert_eq!((offset.ns, offset.matched), (50_000 - 15, 3));
        // Calls that hold no op wherever they are placed: not aligned.
        let strays = CollectiveMarks {
            python_calls: calls("all_reduce", &[(0, 1), (5_000_000, 5_000_001)]),
            ..CollectiveMarks::default()
        };
        assert_eq!(same_rank_offset(&torch, &strays), None);
    }

    #[test]
    fn a_trace_that_began_calls_earlier_is_matched_by_its_skew() {
        // Steps of uneven length; the other trace began 2 calls earlier,
        // on a clock 5,000 ns ahead.
        let ends = [1_000, 2_300, 3_100, 4_900, 5_400, 7_000, 7_900];
        let reference = CollectiveMarks {
            gpu_ends: times("all_reduce", &ends[2..]),
            ..CollectiveMarks::default()
        };
        let shifted: Vec<i64> = ends.iter().map(|e| e + 5_000).collect();
        let other = CollectiveMarks {
            gpu_ends: times("all_reduce", &shifted),
            ..CollectiveMarks::default()
        };
        let offset = offset(&reference, &other).unwrap();
        assert_eq!((offset.ns, offset.spread_ns, offset.matched), (5_000, 0, 5));
    }

    #[test]
    fn point_to_point_calls_never_align_ranks() {
        let kernels = |ends: &[i64]| by_kind(ends.iter().map(|&at| (at, "send_recv".to_string())));
        assert!(kernels(&[1, 2]).is_empty());
    }
}
