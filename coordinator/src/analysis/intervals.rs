//! Time intervals `(start, end)` in nanoseconds: merged into disjoint
//! ones, their length, the length two lists share.

/// `intervals` (start, end) merged into disjoint ones in start order; an
/// interval that starts where another ends joins it, as in HTA's
/// `merge_kernel_intervals`.
pub fn merge<T: Ord + Copy>(intervals: impl Iterator<Item = (T, T)>) -> Vec<(T, T)> {
    let mut sorted: Vec<(T, T)> = intervals.collect();
    sorted.sort_unstable();
    let mut merged: Vec<(T, T)> = Vec::with_capacity(sorted.len());
    for (start, end) in sorted {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
}

/// The total length of disjoint intervals (saturating: hostile times do
/// not overflow).
pub fn length(merged: &[(i64, i64)]) -> i64 {
    merged.iter().fold(0i64, |sum, (start, end)| {
        sum.saturating_add(end.saturating_sub(*start))
    })
}

/// The length of the intersection of two lists of disjoint, sorted
/// intervals.
pub fn overlap(a: &[(i64, i64)], b: &[(i64, i64)]) -> i64 {
    let (mut i, mut j, mut total) = (0, 0, 0i64);
    while i < a.len() && j < b.len() {
        let start = a[i].0.max(b[j].0);
        let end = a[i].1.min(b[j].1);
        total = total.saturating_add(end.saturating_sub(start).max(0));
        if a[i].1 < b[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    total
}
