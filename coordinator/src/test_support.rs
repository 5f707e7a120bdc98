//! What the crate's unit tests share.

use rankscope_common::gather::{accept, Candidate, Expect};
use rankscope_common::payload::{Payload, PayloadHeader};

use crate::model::Report;

/// The report of a job of one rank that recorded nothing: every field of
/// report.json there, most of them empty.
pub(crate) fn report_of_one_idle_rank() -> Report {
    let candidate = Candidate {
        source: "rank 0".into(),
        payload: Ok(Payload {
            header: PayloadHeader::new("job", "t2v", 0, 1),
            tables: Default::default(),
        }),
    };
    let gathered = accept(vec![candidate], &Expect::default());
    crate::analysis::analyze(&gathered, &crate::AnalysisConfig::default())
}
