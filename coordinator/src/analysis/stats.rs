//! Descriptive statistics: spread across ranks, percentiles, median.

use crate::model::{Percentiles, Spread};

/// Min / max / avg / population std of `(rank, value)` pairs, with the rank
/// of each extreme (the lowest rank on ties). `None` when empty.
pub fn spread(values: &[(u32, f64)]) -> Option<Spread> {
    let &(first_rank, first) = values.first()?;
    let plain: Vec<f64> = values.iter().map(|&(_, v)| v).collect();
    let (avg, std) = mean_std(&plain)?;
    let mut spread = Spread {
        min: first,
        max: first,
        avg,
        std,
        min_rank: first_rank,
        max_rank: first_rank,
    };
    for &(rank, value) in &values[1..] {
        if value < spread.min || (value == spread.min && rank < spread.min_rank) {
            (spread.min, spread.min_rank) = (value, rank);
        }
        if value > spread.max || (value == spread.max && rank < spread.max_rank) {
            (spread.max, spread.max_rank) = (value, rank);
        }
    }
    Some(spread)
}

/// Mean and population standard deviation of `values`; `None` when empty.
pub fn mean_std(values: &[f64]) -> Option<(f64, f64)> {
    if values.is_empty() {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    Some((mean, variance.sqrt()))
}

/// The quantiles `qs` (each 0..=1) of `values`, each interpolated linearly
/// between the two nearest values (numpy's default). Selects rather than
/// sorts (linear time), reordering `values`; given in ascending order, each
/// quantile is selected among the values from the one before up, not among
/// all of them. A quantile that falls on a value is that value, whatever
/// its neighbour (an infinite one included).
pub fn quantiles<const N: usize>(values: &mut [f64], qs: [f64; N]) -> [f64; N] {
    let n = values.len();
    if n == 0 {
        return [f64::NAN; N];
    }
    // values[from..] are the largest values, every one before them no larger.
    let mut from = 0;
    qs.map(|q| {
        let position = q.clamp(0.0, 1.0) * (n - 1) as f64;
        let below = position.floor() as usize;
        if below < from {
            from = 0;
        }
        let (_, &mut at_below, above) =
            values[from..].select_nth_unstable_by(below - from, f64::total_cmp);
        from = below;
        let fraction = position - below as f64;
        // The next value in order is the least of those above.
        let at_above = if fraction == 0.0 {
            at_below
        } else {
            above
                .iter()
                .copied()
                .min_by(f64::total_cmp)
                .unwrap_or(at_below)
        };
        at_below + (at_above - at_below) * fraction
    })
}

/// p50 / p95 / p99, min, mean and max of `values` (reordered in place).
/// `None` when empty.
pub fn percentiles(values: &mut [f64]) -> Option<Percentiles> {
    if values.is_empty() {
        return None;
    }
    // One pass for the least, the greatest and the sum.
    let first = values[0];
    let (min, max, sum) = values[1..]
        .iter()
        .fold((first, first, first), |(min, max, sum), &v| {
            (min.min(v), max.max(v), sum + v)
        });
    let mean = sum / values.len() as f64;
    let [p50, p95, p99] = quantiles(values, [0.50, 0.95, 0.99]);
    Some(Percentiles {
        p50,
        p95,
        p99,
        min,
        mean,
        max,
        relative_error: None,
    })
}

/// The imbalance of per-rank totals (`sorted`), percent: how much slower
/// the slowest rank is than the median of the others; a straggler's
/// slowdown is the same ratio for its rank. 0 for fewer than two ranks or
/// nothing to compare with.
pub fn imbalance_pct(sorted: &[f64]) -> f64 {
    let Some(&slowest) = sorted.last() else {
        return 0.0;
    };
    match median_without(sorted, sorted.len() - 1) {
        Some(reference) if reference > 0.0 => (slowest / reference - 1.0) * 100.0,
        _ => 0.0,
    }
}

/// The median of `sorted` without its `i`-th value: what a rank is
/// compared with is the median of the other ranks (with two ranks, the
/// other one). `None` when no other value is left.
pub fn median_without(sorted: &[f64], i: usize) -> Option<f64> {
    let n = sorted.len().checked_sub(1).filter(|&n| n > 0)?;
    let at = |j: usize| sorted[if j < i { j } else { j + 1 }];
    Some(if n % 2 == 1 {
        at(n / 2)
    } else {
        (at(n / 2 - 1) + at(n / 2)) / 2.0
    })
}

/// The spread of `sorted` (ascending) from its lower half alone: 1.4826 ×
/// the median of how far the values at or below the median lie below it
/// (the standard deviation for normally spread values), which values
/// above the median, however many or far, do not move. `None` when empty.
pub fn lower_spread(sorted: &[f64]) -> Option<f64> {
    let middle = median(sorted)?;
    let lower = &sorted[..sorted.partition_point(|&v| v <= middle)];
    let mut below: Vec<f64> = lower.iter().rev().map(|v| middle - v).collect();
    below.sort_by(f64::total_cmp);
    Some(1.4826 * median(&below)?)
}

/// The median of `values` (any order; they are reordered), in linear
/// time; `None` when empty.
pub fn median_of(values: &mut [f64]) -> Option<f64> {
    (!values.is_empty()).then(|| quantiles(values, [0.5])[0])
}

/// The median of `sorted` (ascending); `None` when empty.
pub fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    (n > 0).then(|| {
        if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        }
    })
}

/// The standard normal quantile: the `z` with P(Z ≤ z) = `p`, for `p` in
/// (0, 1) (Acklam's rational approximation, relative error below 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383_577_518_672_69e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    const LOW: f64 = 0.02425;
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - LOW {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantiles_are_the_tables() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_985),
            (0.999, 3.090_232_306),
            (1.0 - 1e-5, 4.264_890_794),
            (0.01, -2.326_347_874),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-7,
                "{p}: {}",
                normal_quantile(p)
            );
        }
    }

    #[test]
    fn the_lower_spread_ignores_whatever_lies_above_the_median() {
        // Median 10; below it 8 and 9 (and 10 itself): 2, 1, 0 → median 1.
        let sorted = [8.0, 9.0, 10.0, 50.0, 90.0];
        assert!((lower_spread(&sorted).unwrap() - 1.4826).abs() < 1e-12);
        assert_eq!(lower_spread(&[]), None);
    }

    #[test]
    fn spread_by_hand() {
        // Mean 5, squared deviations 9 + 1 + 1 + 9 = 20, variance 5.
        let s = spread(&[(0, 2.0), (1, 4.0), (2, 6.0), (3, 8.0)]).unwrap();
        assert_eq!((s.min, s.min_rank, s.max, s.max_rank), (2.0, 0, 8.0, 3));
        assert_eq!(s.avg, 5.0);
        assert!((s.std - 5f64.sqrt()).abs() < 1e-12);
        assert!(spread(&[]).is_none());
    }

    #[test]
    fn spread_ties_go_to_the_lowest_rank() {
        let s = spread(&[(3, 1.0), (1, 1.0), (2, 1.0)]).unwrap();
        assert_eq!((s.min_rank, s.max_rank, s.std), (1, 1, 0.0));
    }

    #[test]
    fn percentiles_by_hand() {
        // 1..=10: p50 at position 4.5 → 5.5; p95 at 8.55 → 9.55; p99 at 8.91 → 9.91.
        let mut values: Vec<f64> = (1..=10).rev().map(f64::from).collect();
        let p = percentiles(&mut values).unwrap();
        assert!((p.p50 - 5.5).abs() < 1e-12);
        assert!((p.p95 - 9.55).abs() < 1e-12);
        assert!((p.p99 - 9.91).abs() < 1e-12);
        assert_eq!((p.min, p.mean, p.max), (1.0, 5.5, 10.0));
        assert!(percentiles(&mut []).is_none());
    }

    #[test]
    fn quantiles_in_any_order_agree_with_the_sorted_values() {
        // 37 values in a scrambled order, repeats among them.
        let values: Vec<f64> = (0..37u32).map(|i| f64::from(i * 17 % 23)).collect();
        let mut sorted = values.clone();
        sorted.sort_by(f64::total_cmp);
        let by_sorting = |q: f64| {
            let position = q * (sorted.len() - 1) as f64;
            let (below, fraction) = (position.floor() as usize, position.fract());
            let above = sorted.get(below + 1).copied().unwrap_or(sorted[below]);
            sorted[below] + (above - sorted[below]) * fraction
        };
        let qs = [0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0, 0.1, 0.5];
        let found = quantiles(&mut values.clone(), qs);
        for (q, value) in qs.into_iter().zip(found) {
            assert!((value - by_sorting(q)).abs() < 1e-12, "q {q}: {value}");
        }
    }

    #[test]
    fn a_quantile_on_a_value_is_that_value_beside_an_infinity() {
        // p50 of three values falls on the middle one.
        let [p50] = quantiles(&mut [1.0, 2.0, f64::INFINITY], [0.5]);
        assert_eq!(p50, 2.0);
        // Between a value and an infinity, interpolation is infinite.
        let [p75] = quantiles(&mut [1.0, 2.0, f64::INFINITY], [0.75]);
        assert_eq!(p75, f64::INFINITY);
    }

    #[test]
    fn imbalance_is_the_slowest_rank_against_the_median_of_the_others() {
        assert_eq!(imbalance_pct(&[1.0, 1.0, 1.0, 2.0]), 100.0);
        assert!(
            (imbalance_pct(&[1.0, 1.4]) - 40.0).abs() < 1e-9,
            "two ranks"
        );
        assert_eq!(imbalance_pct(&[5.0]), 0.0);
        assert_eq!(imbalance_pct(&[]), 0.0);
        assert_eq!(imbalance_pct(&[0.0, 0.0]), 0.0);
    }

    #[test]
    fn the_median_without_one_value_by_hand_and_against_the_long_way() {
        assert_eq!(median_without(&[1.0, 2.0], 0), Some(2.0), "the other one");
        assert_eq!(median_without(&[1.0, 2.0], 1), Some(1.0));
        assert_eq!(median_without(&[1.0, 2.0, 3.0, 4.0], 0), Some(3.0));
        assert_eq!(median_without(&[1.0, 2.0, 3.0, 4.0], 3), Some(2.0));
        assert_eq!(median_without(&[1.0, 2.0, 3.0], 1), Some(2.0));
        assert_eq!(median_without(&[5.0], 0), None);
        for n in 2..9 {
            let sorted: Vec<f64> = (0..n).map(|i| f64::from(i * i)).collect();
            for i in 0..sorted.len() {
                let mut others = sorted.clone();
                others.remove(i);
                assert_eq!(
                    median_without(&sorted, i),
                    Some(quantiles(&mut others, [0.5])[0])
                );
            }
        }
    }
}
