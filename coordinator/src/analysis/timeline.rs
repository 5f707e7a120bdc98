//! One timeline for every rank: each rank's timestamps count from its own
//! session start on its own clock. Placing a rank on rank 0's clock takes
//! its session start (wall clock) less its measured offset to rank 0; where
//! no offset was measured, the wall clocks are taken as they are.

use rankscope_common::PayloadHeader;

/// A rank's session start on the shared timeline, nanoseconds since the
/// Unix epoch of rank 0's clock.
pub fn aligned_start_ns(header: &PayloadHeader) -> i64 {
    let offset = header.clock.offset_to_rank0.map_or(0, |o| o.offset_ns);
    header.clock.start_unix_ns.saturating_sub(offset)
}

/// How much the rank's clock drifted against rank 0's over the session,
/// where the offset was measured at start and at finish.
pub fn drift_ns(header: &PayloadHeader) -> Option<i64> {
    let start = header.clock.offset_to_rank0?;
    let finish = header.clock.offset_at_finish?;
    Some(finish.offset_ns.saturating_sub(start.offset_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankscope_common::payload::ClockOffset;

    #[test]
    fn a_measured_offset_moves_the_rank_onto_rank_zeros_clock() {
        let mut header = PayloadHeader::new("s", "n", 1, 2);
        header.clock.start_unix_ns = 10_000_000_000;
        assert_eq!(
            aligned_start_ns(&header),
            10_000_000_000,
            "unmeasured: as it is"
        );
        header.clock.offset_to_rank0 = Some(ClockOffset {
            offset_ns: 5_000_000_000,
            round_trip_ns: 100,
        });
        assert_eq!(aligned_start_ns(&header), 5_000_000_000);
        assert_eq!(drift_ns(&header), None);
        header.clock.offset_at_finish = Some(ClockOffset {
            offset_ns: 5_000_000_300,
            round_trip_ns: 80,
        });
        assert_eq!(drift_ns(&header), Some(300));
    }
}
