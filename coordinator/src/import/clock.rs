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
//! - else, across ranks, the ends of the `torch.distributed` calls of
//!   VizTracer traces: a call that blocks until the collective completes
//!   (gloo, `barrier`) ends together on every rank. A host's view of an
//!   NCCL call returns before it completes, and so does torch.profiler's
//!   host span of any collective: those are never compared across ranks;
//! - within a rank, between its VizTracer and torch.profiler traces, the
//!   starts of its collective calls on the host: the Python call, and
//!   the dispatcher op (`c10d::allreduce_`) just inside it.

use std::collections::BTreeMap;

use rankscope_common::kineto::{collective_kind, function_kind, KernelCategory, RankTrace};

use super::python::site;

/// The `torch.distributed` module whose functions are the collectives of
/// a VizTracer trace.
const C10D_FILE: &str = "torch/distributed/distributed_c10d.py";

/// Point-to-point kinds: a send and its receive are two ranks' calls,
/// and the i-th of one rank is not the i-th of another.
const POINT_TO_POINT: [&str; 3] = ["send", "recv", "send_recv"];

/// Times by collective kind, in call order, ns on a trace's clock.
type ByKind = BTreeMap<String, Vec<i64>>;

/// The times of a trace's collective calls that can align its clock.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollectiveMarks {
    /// The ends of GPU collective kernels.
    pub gpu_ends: ByKind,
    /// The ends of the `torch.distributed` calls a VizTracer trace holds.
    pub python_ends: ByKind,
    /// The starts of collective calls on the host: torch.profiler's
    /// dispatcher ops (`c10d::allreduce_`; else its collective spans), or
    /// the `torch.distributed` calls a VizTracer trace holds.
    pub host_starts: ByKind,
}

impl CollectiveMarks {
    /// The marks of `trace`'s collectives.
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
        let c10d: Vec<(i64, i64, &str)> = (0..python.name.len())
            .filter_map(|i| {
                let (function, file, _) = site(&trace.names[python.name[i] as usize]);
                let kind = function_kind(function).filter(|_| file.ends_with(C10D_FILE))?;
                let start = python.start_ns[i];
                Some((at(start), at(start.saturating_add(python.dur_ns[i])), kind))
            })
            .collect();
        let to_owned = |(t, kind): (i64, &str)| (t, kind.to_string());
        CollectiveMarks {
            gpu_ends: by_kind(kernels),
            python_ends: by_kind(c10d.iter().map(|c| (c.1, c.2)).map(to_owned)),
            host_starts: by_kind(
                host.into_iter()
                    .chain(c10d.iter().map(|c| (c.0, c.2)).map(to_owned)),
            ),
        }
    }
}

/// `(time, kind)` pairs grouped by kind, each kind's in time order.
fn by_kind(marks: impl Iterator<Item = (i64, String)>) -> ByKind {
    let mut grouped = ByKind::new();
    for (at, kind) in marks.filter(|(_, kind)| !POINT_TO_POINT.contains(&kind.as_str())) {
        grouped.entry(kind).or_default().push(at);
    }
    for times in grouped.values_mut() {
        times.sort_unstable();
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
/// common, else of their `torch.distributed` calls; `None` where they
/// share neither.
pub fn offset(reference: &CollectiveMarks, other: &CollectiveMarks) -> Option<Offset> {
    offset_of(&reference.gpu_ends, &other.gpu_ends, true)
        .or_else(|| offset_of(&reference.python_ends, &other.python_ends, false))
}

/// The offset of `other`'s clock (a VizTracer trace's) to `reference`'s
/// (the same rank's torch.profiler trace): from the starts of their
/// collective calls on the host. A Python call begins before the
/// dispatcher op it makes, by a lag that varies with what the tracer does
/// in between; the call with the least lag bounds the offset, so the
/// largest difference is taken, of those near the median (a mismatched
/// pair is not).
pub fn same_rank_offset(reference: &CollectiveMarks, other: &CollectiveMarks) -> Option<Offset> {
    let differences = differences(&reference.host_starts, &other.host_starts);
    let median = median_offset(differences.clone(), false)?;
    let near = median.spread_ns.saturating_mul(10).saturating_add(10_000);
    let least_lag = differences
        .into_iter()
        .filter(|d| d.abs_diff(median.ns) <= near)
        .max()?;
    Some(Offset {
        ns: least_lag,
        ..median
    })
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

    #[test]
    fn python_calls_align_ranks_without_gpu_kernels_and_host_spans_never_do() {
        let reference = CollectiveMarks {
            gpu_ends: times("all_reduce", &[100]),
            python_ends: times("barrier", &[10, 20, 30]),
            host_starts: times("barrier", &[1, 2, 3]),
        };
        let other = CollectiveMarks {
            python_ends: times("barrier", &[5, 16, 24]),
            host_starts: times("barrier", &[1, 2, 3]),
            ..CollectiveMarks::default()
        };
        let offset = offset(&reference, &other).unwrap();
        assert_eq!((offset.ns, offset.spread_ns, offset.gpu), (-5, 1, false));
        let host_spans_only = CollectiveMarks {
            host_starts: times("barrier", &[1, 2, 3]),
            ..CollectiveMarks::default()
        };
        assert_eq!(super::offset(&reference, &host_spans_only), None);
        let same_rank = same_rank_offset(&reference, &host_spans_only).unwrap();
        assert_eq!((same_rank.ns, same_rank.matched), (0, 3));
    }

    #[test]
    fn one_ranks_python_calls_are_aligned_by_the_least_lag_before_their_ops() {
        // Four ops, steps apart; the Python calls begin 10, 40, 25 and 30
        // ns before them on a clock 1,000 ns ahead; a fifth pair is
        // mismatched by far.
        let ops = CollectiveMarks {
            host_starts: times("all_reduce", &[100, 2_300, 3_000, 6_600, 7_000]),
            ..CollectiveMarks::default()
        };
        let calls = CollectiveMarks {
            host_starts: times("all_reduce", &[1_090, 3_260, 3_975, 7_570, 19_000]),
            ..CollectiveMarks::default()
        };
        let offset = same_rank_offset(&ops, &calls).unwrap();
        assert_eq!((offset.ns, offset.matched), (990, 5));
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
