//! The two-level gather's layout and its leaders' work, the same over TCP
//! and MPI: a job of several nodes, LOCAL_WORLD_SIZE consecutive ranks to
//! a node (as torchrun and a by-slot MPI mapping lay them out), the first
//! of each its leader. A node's ranks send their payloads to its leader;
//! the leader digests them with its own into one node digest for rank 0
//! (rank 0, the leader of node 0, takes its node's payloads itself).

use std::ops::Range;
use std::time::{Duration, Instant};

use rankscope_common::env::RankEnv;
use rankscope_common::gather::{Candidate, Skipped};
use rankscope_common::{Config, Gathered};

use super::SessionInfo;
use crate::notice::say;

/// The most of a gather's time a node leader keeps to digest its node's
/// payloads and send rank 0 the digest (else a fifth of what is left).
const FORWARD_TIME: Duration = Duration::from_secs(5);

/// The ranks of the node `leader` leads, in a world of `world_size` ranks
/// laid out in nodes of `size`: `None` where `leader` leads no node other
/// than rank 0's.
pub(crate) fn node_led_by(leader: u32, size: u32, world_size: u32) -> Option<Range<u32>> {
    let leads = size > 0 && leader > 0 && leader < world_size && leader.is_multiple_of(size);
    leads.then(|| leader..leader.saturating_add(size).min(world_size))
}

/// A job gathered in two levels.
pub(crate) struct Nodes {
    /// Ranks per node.
    size: u32,
    /// What a leader digests its node's payloads under.
    #[cfg(feature = "report")]
    digest_config: rankscope_coordinator::AnalysisConfig,
}

impl Nodes {
    /// The nodes of the job `env` is a rank of, where it gathers in two
    /// levels: `gather_levels` 2, a build that can digest payloads, and
    /// more than one node of LOCAL_WORLD_SIZE ranks, this rank's local
    /// rank its place in its node.
    pub(crate) fn of(config: &Config, env: &RankEnv) -> Option<Self> {
        let size = env.local_world_size.filter(|&size| size > 0)?;
        let fits = config.gather_levels >= 2
            && cfg!(feature = "report")
            && size < env.world_size
            && env.world_size.is_multiple_of(size)
            && env.rank % size == env.local_rank;
        if !fits {
            return None;
        }
        Some(Nodes {
            size,
            #[cfg(feature = "report")]
            digest_config: rankscope_coordinator::AnalysisConfig::from(config),
        })
    }

    /// Ranks per node.
    pub(crate) fn size(&self) -> u32 {
        self.size
    }

    /// The ranks of `rank`'s node, in a world of `world_size`.
    pub(crate) fn node_of(&self, rank: u32, world_size: u32) -> Range<u32> {
        let leader = rank - rank % self.size;
        leader..leader.saturating_add(self.size).min(world_size)
    }

    /// `rank`'s node leader, unless that is rank 0 (whose node's ranks send
    /// it their payloads, as in one level).
    pub(crate) fn leader(&self, rank: u32) -> Option<u32> {
        let leader = rank - rank % self.size;
        (leader != 0).then_some(leader)
    }

    /// Until when a leader takes its node's payloads, of a gather that
    /// ends at `deadline`: the rest is for digesting and sending.
    pub(crate) fn members_by(deadline: Instant) -> Instant {
        let left = deadline.saturating_duration_since(Instant::now());
        deadline - (left / 5).min(FORWARD_TIME)
    }

    /// A leader's node digest, encoded: its own `payload` and its node's
    /// `arrived` payloads (`refused`: those it refused), gathered as
    /// [`super::gathered_by`] gathers them; `None`, said why, where it
    /// could not be made (the payloads are in their spill files).
    pub(crate) fn digest_node(
        &self,
        payload: &[u8],
        (arrived, refused): (Vec<Candidate>, Vec<Skipped>),
        session: &SessionInfo<'_>,
    ) -> Option<Vec<u8>> {
        // A leader reads no spill file but its own: a rank that did not
        // reach it may have sent rank 0 its payload, which must not arrive
        // twice.
        let own = |rank| rank == session.rank;
        let mut gathered = super::gathered_by(payload, arrived, session, &own);
        gathered.skipped.extend(refused);
        self.digest(&gathered)
            .map_err(|why| {
                say!(
                    "this node's digest could not be made ({why}); its ranks' payloads are in \
                     their spill files"
                )
            })
            .ok()
    }

    /// The node digest of a leader's `gathered` payloads, encoded.
    #[cfg(feature = "report")]
    fn digest(&self, gathered: &Gathered) -> Result<Vec<u8>, String> {
        rankscope_coordinator::analysis::leader_digest(gathered, &self.digest_config)
            .map_err(|e| rankscope_common::error::Chain(&e).to_string())
    }

    /// No digest without the coordinator: a build without the `report`
    /// feature gathers in one level ([`Nodes::of`]).
    #[cfg(not(feature = "report"))]
    fn digest(&self, _gathered: &Gathered) -> Result<Vec<u8>, String> {
        Err("this build has no `report` feature".into())
    }
}

/// What a node digest rank 0 takes must be of: its leader's node's ranks,
/// of rank 0's session and run.
// Read only where a build can read node digests.
#[cfg_attr(not(feature = "report"), allow(dead_code))]
pub(crate) struct NodeExpected<'a> {
    pub(crate) ranks: std::ops::Range<u32>,
    pub(crate) session_id: &'a str,
    pub(crate) run_id: &'a str,
}

/// Whether `bytes` are a node digest of `expected`, else why not; the rest
/// of what makes it this job's is checked as the report is made.
#[cfg(feature = "report")]
pub(crate) fn check_digest(bytes: &[u8], expected: &NodeExpected<'_>) -> Result<(), String> {
    use rankscope_coordinator::analysis::{NodeDigest, NodeOf, NODE_DIGEST_LIMIT};
    NodeDigest::decode(bytes, NODE_DIGEST_LIMIT)
        .map_err(|e| rankscope_common::error::Chain(&e).to_string())?
        .is_of_node(NodeOf {
            ranks: &expected.ranks,
            session_id: expected.session_id,
            run_id: Some(expected.run_id),
        })
}

/// No node digest is read without the coordinator (a build without the
/// `report` feature gathers in one level).
#[cfg(not(feature = "report"))]
pub(crate) fn check_digest(_bytes: &[u8], _expected: &NodeExpected<'_>) -> Result<(), String> {
    Err("this build has no `report` feature to read node digests".into())
}

#[cfg(all(test, feature = "report"))]
mod tests {
    use super::*;

    fn env(rank: u32, world_size: u32, local_rank: u32, local: u32) -> RankEnv {
        RankEnv {
            rank,
            world_size,
            local_rank,
            local_world_size: Some(local),
            ..RankEnv::single()
        }
    }

    #[test]
    fn nodes_of_consecutive_ranks_each_led_by_its_first() {
        let config = Config::default();
        let nodes = Nodes::of(&config, &env(9, 16, 1, 4)).unwrap();
        assert_eq!(nodes.node_of(9, 16), 8..12);
        assert_eq!(nodes.leader(9), Some(8));
        assert_eq!(nodes.leader(8), Some(8));
        assert_eq!(nodes.leader(3), None, "rank 0's node");
        // One node, a layout that is not by node, one level asked for, a
        // world the nodes do not divide: one level.
        assert!(Nodes::of(&config, &env(3, 4, 3, 4)).is_none());
        assert!(Nodes::of(&config, &env(9, 16, 2, 4)).is_none());
        let one = Config {
            gather_levels: 1,
            ..Config::default()
        };
        assert!(Nodes::of(&one, &env(9, 16, 1, 4)).is_none());
        assert!(Nodes::of(&config, &env(9, 18, 1, 4)).is_none());
    }
}
