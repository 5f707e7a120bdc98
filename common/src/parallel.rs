//! A rank's parallel coordinates (TP, DP, PP, EP, CP, SP): its place in
//! each process group that shards one dimension of the job, as a trace's
//! process groups (Kineto's `distributedInfo.pg_config`) give them.
//!
//! A group's dimension comes from its description (`pg_desc`): the names
//! that Megatron-LM (`TENSOR_MODEL_PARALLEL_GROUP`), DeviceMesh
//! (`mesh_tp`) and the serving frameworks (`tp`, `pp`) give their groups.
//! A description that names no dimension (`default_pg`, `undefined`), or
//! more than one (`TENSOR_AND_DATA_PARALLEL_GROUP`), gives none; so does a
//! group that lists a rank twice or holds more ranks than the world.
//!
//! Where no trace gives the groups, a [`ParallelLayout`] the user declares
//! (`parallel_layout: tp=4,dp=2`) places every rank the same way.

use std::str::FromStr;

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

/// The longest description read: longer ones name no dimension.
pub const MAX_DESC_BYTES: usize = 256;

/// The dimension a group's description names, where it names exactly one.
pub fn dimension_of(desc: &str) -> Option<&'static str> {
    if desc.len() > MAX_DESC_BYTES {
        return None;
    }
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

/// `rank`'s coordinates, in a world of `world_size` ranks where known,
/// along each dimension of `groups` that hold it and more than one rank:
/// of each dimension the largest such group (the first of equals: of a
/// DeviceMesh's `mesh_dp_replicate` and `mesh_dp`, the whole data-parallel
/// group), in the order tp, dp, pp, ep, cp, sp. A group listing a rank
/// twice, or more ranks than the world, is passed over.
pub fn coordinates(
    rank: u32,
    world_size: Option<u32>,
    groups: &[ProcessGroup],
) -> Vec<ParallelCoord> {
    let mut best: [Option<(usize, usize)>; DIMENSIONS.len()] = [None; DIMENSIONS.len()];
    for group in groups {
        let size = group.ranks.len();
        let fits = size > 1 && world_size.is_none_or(|world| size <= world as usize);
        let Some(index) = group.ranks.iter().position(|&r| r == rank).filter(|_| fits) else {
            continue;
        };
        let Some(dim) = dimension_of(&group.desc) else {
            continue;
        };
        let mut sorted = group.ranks.clone();
        sorted.sort_unstable();
        if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
            continue;
        }
        let slot = DIMENSIONS
            .iter()
            .position(|(d, _)| *d == dim)
            .expect("a dimension of the table");
        if best[slot].is_none_or(|(_, larger)| size > larger) {
            best[slot] = Some((index, size));
        }
    }
    DIMENSIONS
        .iter()
        .zip(best)
        .filter_map(|((dim, _), best)| {
            let (index, size) = best?;
            Some(ParallelCoord {
                dim: (*dim).to_string(),
                index: u32::try_from(index).ok()?,
                size: u32::try_from(size).ok()?,
            })
        })
        .collect()
}

/// Whether `coords` are coordinates as [`coordinates`] makes them: each
/// of the six dimensions at most once, in order, each index within its
/// size. What a payload or a node digest carries is checked so.
pub fn are_valid(coords: &[ParallelCoord]) -> bool {
    let slots: Option<Vec<usize>> = coords
        .iter()
        .map(|c| DIMENSIONS.iter().position(|(d, _)| *d == c.dim))
        .collect();
    let in_order = slots.is_some_and(|s| s.windows(2).all(|pair| pair[0] < pair[1]));
    in_order && coords.iter().all(|c| c.index < c.size)
}

/// A job's ranks laid out along independent parallel dimensions, as the
/// user declares them where no trace gives the process groups:
/// `tp=4,dp=2,pp=2`, the dimension along which neighbouring ranks differ
/// first (as Megatron-LM's default order, tp-cp-ep-dp-pp, lists them).
/// The sizes multiply to the world size; a dimension carved out of another
/// (Megatron's expert parallelism within data parallelism) cannot be
/// written so, and is left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelLayout {
    /// Each dimension with its size, fastest first.
    dims: Vec<(&'static str, u32)>,
}

/// Why a [`ParallelLayout`] could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// An item is not `dim=size`.
    #[error("`{0}` is not dim=size (as in tp=4,dp=2)")]
    NotAPair(String),
    /// A dimension no group of the six.
    #[error("`{0}` is no dimension: tp, dp, pp, ep, cp or sp")]
    UnknownDim(String),
    /// A dimension given twice.
    #[error("`{0}` is given twice")]
    Twice(String),
    /// A size that is no whole number from 1.
    #[error("the size of `{dim}`, `{size}`, is no whole number from 1")]
    BadSize {
        /// The dimension.
        dim: String,
        /// What was given.
        size: String,
    },
    /// The sizes multiply past any world.
    #[error("the sizes multiply past 2^32 ranks")]
    TooLarge,
    /// No dimension at all.
    #[error("it names no dimension")]
    Empty,
}

impl FromStr for ParallelLayout {
    type Err = LayoutError;

    fn from_str(text: &str) -> Result<Self, LayoutError> {
        let mut dims: Vec<(&'static str, u32)> = Vec::new();
        let mut ranks = 1u32;
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (dim, size) = item
                .split_once('=')
                .ok_or_else(|| LayoutError::NotAPair(item.to_string()))?;
            let (dim, size) = (dim.trim(), size.trim());
            let known = DIMENSIONS
                .iter()
                .map(|(d, _)| *d)
                .find(|d| d.eq_ignore_ascii_case(dim))
                .ok_or_else(|| LayoutError::UnknownDim(dim.to_string()))?;
            if dims.iter().any(|(d, _)| *d == known) {
                return Err(LayoutError::Twice(known.to_string()));
            }
            let size = size
                .parse::<u32>()
                .ok()
                .filter(|&s| s >= 1)
                .ok_or_else(|| LayoutError::BadSize {
                    dim: known.to_string(),
                    size: size.to_string(),
                })?;
            ranks = ranks.checked_mul(size).ok_or(LayoutError::TooLarge)?;
            dims.push((known, size));
        }
        if dims.is_empty() {
            return Err(LayoutError::Empty);
        }
        Ok(ParallelLayout { dims })
    }
}

impl std::fmt::Display for ParallelLayout {
    /// As written: `tp=4,dp=2`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let items: Vec<String> = self
            .dims
            .iter()
            .map(|(dim, size)| format!("{dim}={size}"))
            .collect();
        f.write_str(&items.join(","))
    }
}

impl ParallelLayout {
    /// The ranks the layout places: its sizes multiplied (within `u32`,
    /// as read).
    pub fn ranks(&self) -> u64 {
        self.dims.iter().map(|(_, size)| u64::from(*size)).product()
    }

    /// `rank`'s coordinates along each dimension of more than one rank, in
    /// the order [`coordinates`] gives them; none for a rank past the
    /// layout.
    pub fn coordinates(&self, rank: u32) -> Vec<ParallelCoord> {
        if u64::from(rank) >= self.ranks() {
            return Vec::new();
        }
        let mut stride = 1u32;
        let mut coords: Vec<ParallelCoord> = Vec::new();
        for (dim, size) in &self.dims {
            if *size > 1 {
                coords.push(ParallelCoord {
                    dim: (*dim).to_string(),
                    index: rank / stride % size,
                    size: *size,
                });
            }
            // Within u32: the product of all sizes is (checked as read).
            stride = stride.saturating_mul(*size);
        }
        coords.sort_by_key(|c| DIMENSIONS.iter().position(|(d, _)| *d == c.dim));
        coords
    }
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
        let coords = coordinates(6, Some(8), &groups);
        assert_eq!(label(&coords), "tp 2/4 · pp 1/2");
        assert!(are_valid(&coords));
        assert!(coordinates(6, Some(8), &groups[..1]).is_empty());
        assert_eq!(label(&[]), "");
    }

    #[test]
    fn groups_that_cannot_be_are_passed_over_and_the_largest_counts() {
        // A rank listed twice; more ranks than the world.
        assert!(coordinates(6, Some(8), &[group("tp", &[6, 6])]).is_empty());
        assert!(coordinates(2, Some(8), &[group("tp", &[0, 1, 1, 2])]).is_empty());
        let wide: Vec<u32> = (0..16).collect();
        assert!(coordinates(2, Some(8), &[group("tp", &wide)]).is_empty());
        assert_eq!(
            label(&coordinates(2, None, &[group("tp", &wide)])),
            "tp 2/16"
        );
        // HSDP: the replicate group first, then the whole data-parallel one.
        let groups = [
            group("mesh_dp_replicate", &[1, 5]),
            group("mesh_dp", &[0, 1, 2, 3, 4, 5, 6, 7]),
        ];
        assert_eq!(label(&coordinates(5, Some(8), &groups)), "dp 5/8");
        // A description past the bound names nothing.
        let long = format!("tp_{}", "x".repeat(MAX_DESC_BYTES));
        assert!(coordinates(0, Some(8), &[group(&long, &[0, 1])]).is_empty());
    }

    #[test]
    fn a_layout_places_ranks_fastest_dimension_first() {
        let layout: ParallelLayout = "tp=4, PP=2,dp=1".parse().unwrap();
        assert_eq!(
            (layout.ranks(), layout.to_string().as_str()),
            (8, "tp=4,pp=2,dp=1")
        );
        // Ranks 0-3 are one TP group; rank 6 is TP 2 of 4 on PP stage 1.
        assert_eq!(label(&layout.coordinates(6)), "tp 2/4 · pp 1/2");
        assert_eq!(label(&layout.coordinates(1)), "tp 1/4 · pp 0/2");
        assert!(layout.coordinates(8).is_empty(), "past the layout");
        // Listed slowest first, they come out in the usual order.
        let layout: ParallelLayout = "pp=2,tp=4".parse().unwrap();
        assert_eq!(label(&layout.coordinates(6)), "tp 3/4 · pp 0/2");
        assert!(are_valid(&layout.coordinates(7)));
        // Agreeing with the groups of the same job.
        let megatron: ParallelLayout = "tp=4,pp=2".parse().unwrap();
        let groups = [
            group("TENSOR_MODEL_PARALLEL_GROUP", &[4, 5, 6, 7]),
            group("PIPELINE_MODEL_PARALLEL_GROUP", &[2, 6]),
        ];
        assert_eq!(megatron.coordinates(6), coordinates(6, Some(8), &groups));
    }

    #[test]
    fn a_layout_that_cannot_be_is_refused_by_name() {
        for (text, error) in [
            ("tp4", LayoutError::NotAPair("tp4".into())),
            ("zz=2", LayoutError::UnknownDim("zz".into())),
            ("tp=2,tp=2", LayoutError::Twice("tp".into())),
            (
                "tp=0",
                LayoutError::BadSize {
                    dim: "tp".into(),
                    size: "0".into(),
                },
            ),
            (
                "dp=-1",
                LayoutError::BadSize {
                    dim: "dp".into(),
                    size: "-1".into(),
                },
            ),
            ("tp=65536,dp=65536", LayoutError::TooLarge),
            // Past u64 too, and wrapping to a small number there.
            ("tp=4194304,dp=2097152,pp=2097152", LayoutError::TooLarge),
            (
                "tp=8,dp=1229673,pp=3935371,ep=7623851",
                LayoutError::TooLarge,
            ),
            (" , ", LayoutError::Empty),
        ] {
            assert_eq!(text.parse::<ParallelLayout>(), Err(error), "{text}");
        }
    }

    #[test]
    fn only_coordinates_as_made_are_valid() {
        let coord = |dim: &str, index, size| ParallelCoord {
            dim: dim.into(),
            index,
            size,
        };
        assert!(are_valid(&[coord("tp", 1, 4), coord("pp", 0, 2)]));
        assert!(are_valid(&[]));
        assert!(!are_valid(&[coord("pipeline1", 0, 2)]));
        assert!(!are_valid(&[coord("tp", 4, 4)]));
        assert!(!are_valid(&[coord("pp", 0, 2), coord("tp", 1, 4)]), "order");
        assert!(!are_valid(&[coord("tp", 0, 2), coord("tp", 1, 2)]), "twice");
    }
}
