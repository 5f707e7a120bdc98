//! Clock offsets between ranks, estimated by ping-pong as NTP does: one
//! side notes when it sends, the peer answers with its own clock, the
//! first notes when the answer arrives. Assuming the two legs take equally
//! long, the peer's clock minus the first's is `peer − (sent + received) /
//! 2`, known to within half the round trip; of a few rounds, the one with
//! the shortest round trip is kept. Over TCP rank 0 (or a node leader)
//! measures each rank; over MPI each rank measures the rank it sends its
//! payload to. The MPI and TCP transports share this code.

use std::time::{SystemTime, UNIX_EPOCH};

use rankscope_common::payload::ClockOffset;

/// Ping-pong rounds per rank.
pub const ROUNDS: usize = 8;

/// One ping-pong round, in nanoseconds of the Unix epoch: when the
/// measuring side sent the ping, the peer's clock when it answered, when
/// the measuring side got the answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    /// The measuring side's clock when it sent.
    pub sent_ns: i64,
    /// The peer's clock when it answered.
    pub peer_ns: i64,
    /// The measuring side's clock when the answer arrived.
    pub received_ns: i64,
}

/// The offset from the round with the shortest round trip; `None` without
/// a usable round.
pub fn estimate(rounds: &[Round]) -> Option<ClockOffset> {
    rounds
        .iter()
        .filter(|r| r.received_ns >= r.sent_ns)
        .min_by_key(|r| r.received_ns - r.sent_ns)
        .map(|r| {
            let midpoint = r.sent_ns + (r.received_ns - r.sent_ns) / 2;
            ClockOffset {
                offset_ns: r.peer_ns.saturating_sub(midpoint),
                round_trip_ns: (r.received_ns - r.sent_ns) as u64,
            }
        })
}

/// A rank's offset to rank 0 measured through its node leader: its offset
/// to the leader (`to_leader`) and the leader's to rank 0 added, each
/// known to within half its round trip, so the sum to within half of both.
pub fn through_leader(to_leader: ClockOffset, leader_to_rank0: ClockOffset) -> ClockOffset {
    ClockOffset {
        offset_ns: to_leader
            .offset_ns
            .saturating_add(leader_to_rank0.offset_ns),
        round_trip_ns: to_leader
            .round_trip_ns
            .saturating_add(leader_to_rank0.round_trip_ns),
    }
}

/// An offset as it travels to its rank: 16 bytes, little endian.
pub fn encode(offset: &ClockOffset) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&offset.offset_ns.to_le_bytes());
    bytes[8..].copy_from_slice(&offset.round_trip_ns.to_le_bytes());
    bytes
}

/// An offset from the 16 bytes [`encode`] makes; `None` for other bytes.
pub fn decode(bytes: &[u8]) -> Option<ClockOffset> {
    if bytes.len() != 16 {
        return None;
    }
    Some(ClockOffset {
        offset_ns: i64::from_le_bytes(bytes[..8].try_into().ok()?),
        round_trip_ns: u64::from_le_bytes(bytes[8..].try_into().ok()?),
    })
}

/// The identity rank 0 gives a session of a run: the launcher's run id (or
/// `transport` where there is none) and rank 0's clock, so that two
/// sessions — two launches reusing a run id, or two sessions of one
/// process — never share one, and a payload late for one cannot enter
/// the next.
pub fn session_run_id(launcher_run: Option<&str>, transport: &str, now_ns: i64) -> String {
    format!("{}~{now_ns:x}", launcher_run.unwrap_or(transport))
}

/// This rank's wall clock, nanoseconds since the Unix epoch, moved by
/// `shift_ns` (the `clock_shift_ns` setting: tests skew a rank on purpose).
pub fn wall_now_ns(shift_ns: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    now.saturating_add(shift_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_round_trip_wins() {
        // The peer's clock runs 1 000 ns ahead; the slow round's legs are uneven.
        let rounds = [
            Round {
                sent_ns: 0,
                peer_ns: 9_000,
                received_ns: 10_000,
            },
            Round {
                sent_ns: 20_000,
                peer_ns: 21_100,
                received_ns: 20_200,
            },
        ];
        let offset = estimate(&rounds).unwrap();
        assert_eq!(offset.round_trip_ns, 200);
        assert_eq!(offset.offset_ns, 1_000);
        assert_eq!(estimate(&[]), None);
    }

    #[test]
    fn an_offset_through_a_leader_adds_both_and_their_bounds() {
        let to_leader = ClockOffset {
            offset_ns: 1_000,
            round_trip_ns: 50,
        };
        let leader = ClockOffset {
            offset_ns: -300,
            round_trip_ns: 400,
        };
        let found = through_leader(to_leader, leader);
        assert_eq!((found.offset_ns, found.round_trip_ns), (700, 450));
    }
}
