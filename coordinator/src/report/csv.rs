//! `stages.csv`: one row per stage with the cross-rank statistics.

use std::fmt::Write;

use rankscope_common::text::csv_field;

use crate::model::Report;

const HEADER: &str = "name,parent,count,ranks,total_avg_s,total_min_s,total_min_rank,total_max_s,\
total_max_rank,total_std_s,self_avg_s,self_min_s,self_max_s,call_p50_ms,call_p95_ms,call_p99_ms,call_min_ms,call_mean_ms,\
call_max_ms,imbalance_pct,share_pct";

/// The stage table as CSV (RFC 4180 quoting).
pub fn stages_csv(report: &Report) -> String {
    let mut out = String::from(HEADER);
    out.push('\n');
    for s in &report.stages {
        let (t, c) = (&s.total_s, &s.per_call_ms);
        writeln!(
            out,
            "{},{},{},{},{:.6},{:.6},{},{:.6},{},{:.6},{:.6},{:.6},{:.6},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2},{:.2}",
            csv_field(&s.name),
            csv_field(s.parent.as_deref().unwrap_or("")),
            s.count,
            s.ranks,
            t.avg,
            t.min,
            t.min_rank,
            t.max,
            t.max_rank,
            t.std,
            s.self_s.avg,
            s.self_s.min,
            s.self_s.max,
            c.p50,
            c.p95,
            c.p99,
            c.min,
            c.mean,
            c.max,
            s.imbalance_pct,
            s.share_pct
        )
        .expect("writing to a String cannot fail");
    }
    out
}
