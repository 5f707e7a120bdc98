//! The distribution of a stage's call durations across ranks, mergeable:
//! every value while they are few ([`EXACT_CALLS`]), past that a DDSketch
//! (Masson, Rim and Lee, VLDB 2019) whose quantiles are within
//! [`RELATIVE_ERROR`] of the value at the quantile's rank. Merging is exact
//! either way (a sketch's buckets add), so the merge of any grouping of
//! the same values gives the same quantiles: a two-level gather reports
//! what one level does.

use serde::{Deserialize, Serialize};

use super::stats::percentiles;
use crate::model::Percentiles;

/// Values kept one by one, across all ranks, before they are counted in
/// buckets instead: 256 KiB of single-precision seconds per stage.
pub const EXACT_CALLS: usize = 1 << 16;

/// How far a quantile read from the sketch may be from the value at its
/// rank, relative to that value.
pub const RELATIVE_ERROR: f64 = 0.01;

/// The call durations of one stage (seconds, single precision), every one
/// or counted in logarithmic buckets, with their exact count, sum, least
/// and greatest.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CallQuantiles {
    /// The values one by one, or their buckets.
    kept: Kept,
    /// How many values.
    count: u64,
    /// Their sum, seconds.
    sum_s: f64,
    /// The least and greatest, once there is one.
    range: Option<(f32, f32)>,
}

/// How the values are kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
enum Kept {
    /// Every value, while at most [`EXACT_CALLS`].
    Exact(Vec<f32>),
    /// Counted in buckets.
    Sketch(Buckets),
}

impl Default for Kept {
    fn default() -> Self {
        Kept::Exact(Vec::new())
    }
}

/// The sketch's buckets, densely: bucket `i` holds the values in
/// (γ^(i−1), γ^i], γ = (1 + α) / (1 − α).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Buckets {
    /// The index of `counts[0]`.
    first: i32,
    /// Values per bucket, from `first` up.
    counts: Vec<u64>,
    /// Values of 0.
    zeros: u64,
}

/// The lowest and highest bucket a positive single-precision value can
/// fall in (the least subnormal, 1.4e-45, and the largest, 3.4e38): a
/// sketch spans at most this many buckets.
const BUCKETS: std::ops::RangeInclusive<i32> = -5_200..=4_500;

/// γ.
fn gamma() -> f64 {
    (1.0 + RELATIVE_ERROR) / (1.0 - RELATIVE_ERROR)
}

impl Buckets {
    /// Counts `values`.
    fn add(&mut self, values: &[f32]) {
        let ln_gamma = gamma().ln();
        for &v in values {
            if v > 0.0 {
                // A value past every single-precision one (an infinity
                // from a damaged digest) counts in the last bucket.
                let index = ((f64::from(v).ln() / ln_gamma).ceil() as i32)
                    .clamp(*BUCKETS.start(), *BUCKETS.end());
                self.cover(index, index);
                self.counts[(index - self.first) as usize] += 1;
            } else {
                self.zeros += 1;
            }
        }
    }

    /// Adds the counts of `other`.
    fn merge(&mut self, other: &Buckets) {
        self.zeros += other.zeros;
        let Some(last) = other.last() else {
            return;
        };
        self.cover(other.first, last);
        let at = (other.first - self.first) as usize;
        for (mine, theirs) in self.counts[at..].iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
    }

    /// The index of the last bucket, where there is one (and it is an
    /// index).
    fn last(&self) -> Option<i32> {
        let len = i32::try_from(self.counts.len()).ok()?;
        (len > 0).then(|| self.first.checked_add(len - 1))?
    }

    /// Makes room for buckets `low..=high`.
    fn cover(&mut self, low: i32, high: i32) {
        let Some(last) = self.last() else {
            self.first = low;
            self.counts = vec![0; (high - low + 1) as usize];
            return;
        };
        if low < self.first {
            let more = (self.first - low) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, more));
            self.first = low;
        }
        if high > last {
            self.counts
                .resize(self.counts.len() + (high - last) as usize, 0);
        }
    }

    /// How many values, unless the counts overflow.
    fn total(&self) -> Option<u64> {
        self.counts
            .iter()
            .try_fold(self.zeros, |sum, &n| sum.checked_add(n))
    }

    /// Whether the buckets lie where values can fall.
    fn is_whole(&self) -> bool {
        match self.last() {
            Some(last) => BUCKETS.contains(&self.first) && BUCKETS.contains(&last),
            None => self.counts.is_empty(),
        }
    }

    /// The quantile `q` of the `count` values counted: the middle of the
    /// bucket that holds the value of rank ⌊q·(count − 1)⌋.
    fn quantile(&self, count: u64, q: f64) -> f64 {
        let rank = (q.clamp(0.0, 1.0) * count.saturating_sub(1) as f64).floor() as u64;
        if rank < self.zeros {
            return 0.0;
        }
        let mut below = self.zeros;
        let gamma = gamma();
        for (index, &n) in (self.first..).zip(&self.counts) {
            below += n;
            if rank < below {
                return 2.0 * gamma.powi(index) / (gamma + 1.0);
            }
        }
        f64::INFINITY
    }
}

impl CallQuantiles {
    /// Adds `values` (finite, not negative).
    pub fn add(&mut self, values: &[f32]) {
        for &v in values {
            self.count += 1;
            self.sum_s += f64::from(v);
            self.range = Some(match self.range {
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
                None => (v, v),
            });
        }
        match &mut self.kept {
            Kept::Exact(all) => all.extend_from_slice(values),
            Kept::Sketch(buckets) => buckets.add(values),
        }
        self.bucket_past(EXACT_CALLS as u64);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: CallQuantiles) {
        self.count = self.count.saturating_add(other.count);
        self.sum_s += other.sum_s;
        self.range = match (self.range, other.range) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (one, other) => one.or(other),
        };
        match (&mut self.kept, other.kept) {
            (Kept::Exact(all), Kept::Exact(values)) => all.extend(values),
            (Kept::Sketch(buckets), Kept::Exact(values)) => buckets.add(&values),
            (Kept::Sketch(buckets), Kept::Sketch(theirs)) => buckets.merge(&theirs),
            (Kept::Exact(values), Kept::Sketch(mut theirs)) => {
                theirs.add(values);
                self.kept = Kept::Sketch(theirs);
            }
        }
        self.bucket_past(EXACT_CALLS as u64);
    }

    /// Counts the values in buckets now where `total`, the values of the
    /// whole job as foreseen, will be past [`EXACT_CALLS`]: a node
    /// leader's digest travels as buckets, and rank 0 adds buckets rather
    /// than counting every call of the job (what it counts is the same
    /// either way; only where the foresight is wrong may a report be
    /// sketched that one level would have made exact).
    pub fn bucket_for(&mut self, total: u64) {
        if total > EXACT_CALLS as u64 {
            self.bucket_past(0);
        }
    }

    /// How many values.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Whether the parts fit together as adding and merging leave them:
    /// `calls` values, kept one by one (at most [`EXACT_CALLS`], each
    /// finite, not negative and in the range) or counted in buckets where
    /// values can fall; a range where there are values, finite and not
    /// negative; a finite sum.
    pub fn is_whole(&self, calls: u64) -> bool {
        let range = match self.range {
            Some((lo, hi)) => {
                calls > 0 && lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi
            }
            None => calls == 0,
        };
        let in_range = |v: &f32| self.range.is_some_and(|(lo, hi)| (lo..=hi).contains(v));
        let kept = match &self.kept {
            Kept::Exact(values) => {
                values.len() <= EXACT_CALLS
                    && values.len() as u64 == calls
                    && values.iter().all(in_range)
            }
            Kept::Sketch(buckets) => buckets.is_whole() && buckets.total() == Some(calls),
        };
        self.count == calls && range && kept && self.sum_s.is_finite() && self.sum_s >= 0.0
    }

    /// p50 / p95 / p99, min, mean and max, in milliseconds; `None` when
    /// empty. Exact while the values are kept one by one; from the sketch
    /// past that (the least, greatest and mean are exact either way).
    pub fn percentiles_ms(&self) -> Option<Percentiles> {
        let (min, max) = self.range?;
        if self.count == 0 {
            return None;
        }
        match &self.kept {
            Kept::Exact(values) => {
                let mut ms: Vec<f64> = values.iter().map(|&s| f64::from(s) * 1e3).collect();
                percentiles(&mut ms)
            }
            Kept::Sketch(buckets) => {
                let (min, max) = (f64::from(min), f64::from(max));
                let at = |q: f64| buckets.quantile(self.count, q).clamp(min, max) * 1e3;
                Some(Percentiles {
                    p50: at(0.50),
                    p95: at(0.95),
                    p99: at(0.99),
                    min: min * 1e3,
                    mean: self.sum_s / self.count as f64 * 1e3,
                    max: max * 1e3,
                    relative_error: Some(RELATIVE_ERROR),
                })
            }
        }
    }

    /// Counts the values in buckets once they are more than `most`.
    fn bucket_past(&mut self, most: u64) {
        if let Kept::Exact(values) = &mut self.kept {
            if values.len() as u64 > most {
                let mut buckets = Buckets::default();
                buckets.add(values);
                self.kept = Kept::Sketch(buckets);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::stats::quantiles;

    /// `n` durations spread over six decades (1 µs to 1 s), from `seed`.
    fn durations(n: usize, seed: u64) -> Vec<f32> {
        let mut state = seed | 1;
        (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let unit = (state >> 11) as f64 / (1u64 << 53) as f64;
                10f64.powf(-6.0 + 6.0 * unit) as f32
            })
            .collect()
    }

    #[test]
    fn few_values_give_exact_percentiles() {
        let values = [0.25f32, 0.5, 0.5, 0.75, 1.0, 2.0];
        let mut kept = CallQuantiles::default();
        kept.add(&values[..3]);
        let mut rest = CallQuantiles::default();
        rest.add(&values[3..]);
        kept.merge(rest);
        let p = kept.percentiles_ms().unwrap();
        assert!((p.p50 - 625.0).abs() < 1e-9, "{}", p.p50);
        assert_eq!((p.min, p.max), (250.0, 2000.0));
        assert_eq!(p.relative_error, None, "exact");
    }

    #[test]
    fn many_values_are_within_the_bound_of_the_value_at_each_rank() {
        let values = durations(200_000, 7);
        let mut kept = CallQuantiles::default();
        for chunk in values.chunks(3_000) {
            kept.add(chunk);
        }
        let p = kept.percentiles_ms().unwrap();
        assert_eq!(p.relative_error, Some(RELATIVE_ERROR));
        let mut sorted: Vec<f64> = values.iter().map(|&s| f64::from(s) * 1e3).collect();
        sorted.sort_by(f64::total_cmp);
        for (q, found) in [(0.50, p.p50), (0.95, p.p95), (0.99, p.p99)] {
            let at_rank = sorted[(q * (sorted.len() - 1) as f64).floor() as usize];
            let error = (found - at_rank).abs() / at_rank;
            assert!(error <= RELATIVE_ERROR, "q {q}: {found} against {at_rank}");
        }
        assert_eq!((p.min, p.max), (sorted[0], sorted[sorted.len() - 1]));
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        assert!((p.mean - mean).abs() / mean < 1e-9);
    }

    #[test]
    fn any_grouping_of_the_same_values_merges_to_the_same_quantiles() {
        // 80,000 values as 16 ranks' calls: merged rank by rank (one
        // level), and four ranks at a time first (two levels).
        let values = durations(80_000, 11);
        let ranks: Vec<&[f32]> = values.chunks(5_000).collect();
        let of = |ranks: &[&[f32]]| {
            let mut kept = CallQuantiles::default();
            for rank in ranks {
                kept.add(rank);
            }
            kept
        };
        let one_level = of(&ranks).percentiles_ms().unwrap();
        let mut two_level = CallQuantiles::default();
        for node in ranks.chunks(4) {
            two_level.merge(of(node));
        }
        let two_level = two_level.percentiles_ms().unwrap();
        assert_eq!(
            [one_level.p50, one_level.p95, one_level.p99],
            [two_level.p50, two_level.p95, two_level.p99]
        );
        assert_eq!(one_level.relative_error, Some(RELATIVE_ERROR));
        // And the exact quantiles of the same values, for scale.
        let mut ms: Vec<f64> = values.iter().map(|&s| f64::from(s) * 1e3).collect();
        let [p50] = quantiles(&mut ms, [0.5]);
        assert!((one_level.p50 - p50).abs() / p50 <= 2.0 * RELATIVE_ERROR);
    }

    #[test]
    fn values_bucketed_early_count_as_those_bucketed_late() {
        // A leader foresees 40 nodes like its own and buckets its 5,000
        // values; rank 0 adds 39 more nodes' values as they come.
        let values = durations(200_000, 3);
        let nodes: Vec<&[f32]> = values.chunks(5_000).collect();
        let mut late = CallQuantiles::default();
        for node in &nodes {
            late.add(node);
        }
        let mut early = CallQuantiles::default();
        for node in &nodes {
            let mut kept = CallQuantiles::default();
            kept.add(node);
            kept.bucket_for(kept.count() * nodes.len() as u64);
            assert!(matches!(kept.kept, Kept::Sketch(_)));
            early.merge(kept);
        }
        assert!(matches!((&early.kept, &late.kept), (Kept::Sketch(a), Kept::Sketch(b)) if a == b));
        // A job foreseen small stays exact.
        let mut small = CallQuantiles::default();
        small.add(nodes[0]);
        small.bucket_for(EXACT_CALLS as u64);
        assert!(matches!(small.kept, Kept::Exact(_)));
    }

    #[test]
    fn buckets_out_of_reach_of_any_value_are_not_whole() {
        let mut kept = CallQuantiles::default();
        kept.add(&[1e-30, 1.0, 1e30]);
        kept.bucket_for(u64::MAX);
        assert!(kept.is_whole(3));
        assert!(!kept.is_whole(4), "a count not the stage's calls");
        for (first, why) in [
            (i32::MIN, "before the first index"),
            (i32::MAX, "past the last"),
        ] {
            if let Kept::Sketch(buckets) = &mut kept.kept {
                buckets.first = first;
            }
            assert!(!kept.is_whole(3), "{why}");
        }
    }

    #[test]
    fn zero_length_calls_count_below_every_bucket() {
        let mut kept = CallQuantiles::default();
        kept.add(&vec![0.0; EXACT_CALLS]);
        kept.add(&[1.0; 10]);
        let p = kept.percentiles_ms().unwrap();
        assert_eq!((p.p50, p.p95, p.min), (0.0, 0.0, 0.0));
        assert_eq!(p.max, 1000.0);
    }
}
