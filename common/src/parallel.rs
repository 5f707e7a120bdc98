//! A rank's parallel coordinates (TP, DP, PP, EP, CP, SP): its place in
//! each process group that shards one dimension of the job, as a trace's
//! process groups (Kineto's `distributedInfo.pg_config`) give them.
//!
//! A group's dimension comes from its description (`pg_desc`): the names
//! that Megatron-LM (`TENSOR_MODEL_PARALLEL_GROUP`), DeviceMesh
//! (`mesh_tp`) and the serving frameworks (`tp`, `pp`) give their groups.
//! A description that names no dimension (`default_pg`, `undefined`), or
//! more than one (`TENSOR_AND_DATA_PARALLEL_GROUP`), gives none.

use serde::{Deserialize, Serialize};

/// One coordinate: `index` of `size` along dimension `dim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParallelCoord {
    /// The dimension: `tp`, `dp`, `pp`, `ep`, `cp` or `sp`.
    pub dim: String,
    /// The rank's place in its group along the dimension, from 0.
    pub index: u32,
    /// Ranks in that group.
    pub size: u32,
}

/// A process group as a trace lists it: its description and its ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessGroup {
    /// `pg_desc`.
    pub desc: String,
    /// The ranks, in the group's order.
    pub ranks: Vec<u32>,
}

/// Each dimension with the words that name it in a group's description.
const DIMENSIONS: [(&str, &[&str]); 6] = [
    ("tp", &["tp", "tensor"]),
    ("dp", &["dp", "data"]),
    ("pp", &["pp", "pipeline"]),
    ("ep", &["ep", "expert"]),
    ("cp", &["cp", "context"]),
    ("sp", &["sp", "sequence", "ulysses"]),
];

/// The dimension a group's description names, where it names exactly one.
pub fn dimension_of(desc: &str) -> Option<&'static str> {
    let lower = desc.to_ascii_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let mut named = DIMENSIONS
        .iter()
        .filter(|(_, names)| words.iter().any(|w| names.contains(w)))
        .map(|(dim, _)| *dim);
    match (named.next(), named.next()) {
        (Some(dim), None) => Some(dim),
        _ => None,
    }
}

/// `rank`'s coordinates along each dimension of `groups` that hold it and
/// more than one rank: the first such group of each dimension, in the
/// order tp, dp, pp, ep, cp, sp.
pub fn coordinates(rank: u32, groups: &[ProcessGroup]) -> Vec<ParallelCoord> {
    DIMENSIONS
        .iter()
        .filter_map(|(dim, _)| {
            groups
                .iter()
                .filter(|g| g.ranks.len() > 1 && dimension_of(&g.desc) == Some(dim))
                .find_map(|g| {
                    let index = g.ranks.iter().position(|&r| r == rank)?;
                    Some(ParallelCoord {
                        dim: (*dim).to_string(),
                        index: u32::try_from(index).ok()?,
                        size: u32::try_from(g.ranks.len()).ok()?,
                    })
                })
        })
        .collect()
}

/// `coords` as a label: `tp 1/4 · pp 0/2`; empty for none.
pub fn label(coords: &[ParallelCoord]) -> String {
    coords
        .iter()
        .map(|c| format!("{} {}/{}", c.dim, c.index, c.size))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(desc: &str, ranks: &[u32]) -> ProcessGroup {
        ProcessGroup {
            desc: desc.into(),
            ranks: ranks.to_vec(),
        }
    }

    #[test]
    fn descriptions_name_one_dimension_or_none() {
        for (desc, dim) in [
            ("TENSOR_MODEL_PARALLEL_GROUP", Some("tp")),
            ("mesh_tp", Some("tp")),
            ("pp", Some("pp")),
            ("PIPELINE_MODEL_PARALLEL_GROUP", Some("pp")),
            ("DATA_PARALLEL_GROUP", Some("dp")),
            ("EXPERT_MODEL_PARALLEL_GROUP", Some("ep")),
            ("CONTEXT_PARALLEL_GROUP", Some("cp")),
            ("ulysses_sp", Some("sp")),
            ("default_pg", None),
            ("undefined", None),
            ("MODEL_PARALLEL_GROUP", None),
            ("TENSOR_AND_DATA_PARALLEL_GROUP", None),
            ("temperature", None),
        ] {
            assert_eq!(dimension_of(desc), dim, "{desc}");
        }
    }

    #[test]
    fn a_rank_is_placed_in_the_first_group_of_each_dimension_that_holds_it() {
        // 8 ranks, TP 4 × PP 2: rank 6 is TP 2 of 4, PP 1 of 2.
        let groups = [
            group("default_pg", &[0, 1, 2, 3, 4, 5, 6, 7]),
            group("TENSOR_MODEL_PARALLEL_GROUP", &[0, 1, 2, 3]),
            group("TENSOR_MODEL_PARALLEL_GROUP", &[4, 5, 6, 7]),
            group("PIPELINE_MODEL_PARALLEL_GROUP", &[2, 6]),
            group("DATA_PARALLEL_GROUP", &[6]),
        ];
        let coords = coordinates(6, &groups);
        assert_eq!(label(&coords), "tp 2/4 · pp 1/2");
        assert!(coordinates(6, &groups[..1]).is_empty());
        assert_eq!(label(&[]), "");
    }
}
