//! Rank-environment detection: which launcher started this process, and this
//! process's rank, world size, local rank and job id.
//!
//! Detection reads variables through a lookup function, so tests (and
//! callers with their own environment) can pass a map instead of the
//! process environment.

use std::fmt;

/// The launcher that started the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// No launcher: a world of one.
    Single,
    /// `rankscope demo` or `rankscope launch` (RANKSCOPE_RANK, RANKSCOPE_WORLD_SIZE).
    Rankscope,
    /// Open MPI's `mpirun` (OMPI_COMM_WORLD_*).
    OpenMpi,
    /// A PMIx launcher (PMIX_RANK), e.g. Open MPI 5 or `srun --mpi=pmix`.
    Pmix,
    /// MPICH / Hydra or another PMI-1/2 launcher (PMI_RANK, PMI_SIZE).
    Mpich,
    /// `torchrun` or any launcher that sets RANK / WORLD_SIZE.
    Torchrun,
    /// Slurm's `srun` without MPI (SLURM_PROCID, SLURM_NTASKS).
    Slurm,
}

impl Launcher {
    /// Short lowercase name, as in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Launcher::Single => "single",
            Launcher::Rankscope => "rankscope",
            Launcher::OpenMpi => "openmpi",
            Launcher::Pmix => "pmix",
            Launcher::Mpich => "mpich",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "slurm",
        }
    }
}

impl Launcher {
    /// Whether the launcher starts MPI processes (Open MPI, PMIx, MPICH/PMI).
    pub fn is_mpi(self) -> bool {
        matches!(self, Launcher::OpenMpi | Launcher::Pmix | Launcher::Mpich)
    }
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where this process sits in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEnv {
    /// Launcher detected.
    pub launcher: Launcher,
    /// Global rank.
    pub rank: u32,
    /// Number of ranks.
    pub world_size: u32,
    /// Rank within the node.
    pub local_rank: u32,
    /// Ranks on this node, when the launcher says.
    pub local_world_size: Option<u32>,
    /// Id the launcher gives the whole job, shared by every rank.
    pub job_id: Option<String>,
    /// Identity of this run of the job, where the launcher tells one run
    /// from another that reuses the job id: `RANKSCOPE_RUN_ID` (set by
    /// `rankscope demo` and `launch`), torchrun's run id with its restart
    /// count, else the job id of launchers whose ids are never reused.
    pub run_id: Option<String>,
    /// Rank 0's rendezvous address and port (torchrun's MASTER_ADDR / MASTER_PORT).
    pub master: Option<(String, u16)>,
    /// The name of this rank's node where the job gives one
    /// (`RANKSCOPE_NODE`: `rankscope launch --nodes` runs several simulated
    /// nodes on one machine); else the reports name the host.
    pub node: Option<String>,
}

impl RankEnv {
    /// A world of one.
    pub fn single() -> Self {
        RankEnv {
            launcher: Launcher::Single,
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: Some(1),
            job_id: None,
            run_id: None,
            master: None,
            node: None,
        }
    }
}

/// A launcher variable that is present but unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvError {
    /// Not a number.
    #[error("environment variable {var}={value:?} is not a non-negative integer")]
    NotANumber {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// The rank variable is set but its world-size partner is not.
    #[error("{rank_var} is set but {size_var} is not")]
    MissingWorldSize {
        /// The rank variable found.
        rank_var: &'static str,
        /// The size variable missing.
        size_var: &'static str,
    },
    /// `RANKSCOPE_SIMULATED_NODES` does not divide the world.
    #[error("RANKSCOPE_SIMULATED_NODES={nodes} does not divide the world of {world_size} ranks")]
    SimulatedNodes {
        /// The nodes asked for.
        nodes: u32,
        /// The world size.
        world_size: u32,
    },
    /// Rank outside the world.
    #[error("rank {rank} (from {var}) is not below the world size {world_size}")]
    RankOutOfRange {
        /// The rank variable.
        var: &'static str,
        /// Rank found.
        rank: u32,
        /// World size found.
        world_size: u32,
    },
}

/// Variable names a launcher uses for rank, world size and local rank.
struct LauncherVars {
    launcher: Launcher,
    rank: &'static str,
    size: &'static str,
    local_rank: &'static [&'static str],
    local_size: &'static [&'static str],
}

/// In order of precedence: the most specific launcher first. torchrun comes
/// before Slurm because `srun torchrun ...` sets both and RANK is the truth.
const LAUNCHERS: &[LauncherVars] = &[
    LauncherVars {
        launcher: Launcher::Rankscope,
        rank: "RANKSCOPE_RANK",
        size: "RANKSCOPE_WORLD_SIZE",
        local_rank: &["RANKSCOPE_LOCAL_RANK"],
        local_size: &["RANKSCOPE_LOCAL_WORLD_SIZE"],
    },
    LauncherVars {
        launcher: Launcher::OpenMpi,
        rank: "OMPI_COMM_WORLD_RANK",
        size: "OMPI_COMM_WORLD_SIZE",
        local_rank: &["OMPI_COMM_WORLD_LOCAL_RANK"],
        local_size: &["OMPI_COMM_WORLD_LOCAL_SIZE"],
    },
    LauncherVars {
        launcher: Launcher::Pmix,
        rank: "PMIX_RANK",
        size: "PMIX_SIZE",
        local_rank: &["PMIX_LOCAL_RANK", "SLURM_LOCALID"],
        local_size: &["PMIX_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"],
    },
    LauncherVars {
        launcher: Launcher::Mpich,
        rank: "PMI_RANK",
        size: "PMI_SIZE",
        local_rank: &["MPI_LOCALRANKID", "SLURM_LOCALID"],
        local_size: &["MPI_LOCALNRANKS"],
    },
    LauncherVars {
        launcher: Launcher::Torchrun,
        rank: "RANK",
        size: "WORLD_SIZE",
        local_rank: &["LOCAL_RANK"],
        local_size: &["LOCAL_WORLD_SIZE"],
    },
    LauncherVars {
        launcher: Launcher::Slurm,
        rank: "SLURM_PROCID",
        size: "SLURM_NTASKS",
        local_rank: &["SLURM_LOCALID"],
        local_size: &["SLURM_NTASKS_PER_NODE"],
    },
];

/// A fresh job id for a launch that has none: the time and this process's
/// id (`1764121234-4242`), unique on the machine.
pub fn fresh_job_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", now.as_secs(), std::process::id())
}

/// Detects the rank environment from the process environment.
pub fn detect() -> Result<RankEnv, EnvError> {
    detect_with(|name| std::env::var(name).ok())
}

/// Detects the rank environment from variables given by `var`.
pub fn detect_with(var: impl Fn(&str) -> Option<String>) -> Result<RankEnv, EnvError> {
    let number = |name: &'static str| -> Result<Option<u32>, EnvError> {
        match var(name) {
            None => Ok(None),
            Some(value) => value
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| EnvError::NotANumber { var: name, value }),
        }
    };
    let first_number = |names: &[&'static str]| -> Result<Option<u32>, EnvError> {
        for &name in names {
            if let Some(n) = number(name)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    };

    let Some(vars) = LAUNCHERS.iter().find(|l| var(l.rank).is_some()) else {
        return Ok(RankEnv::single());
    };
    let rank = number(vars.rank)?.expect("checked present");
    // PMIx does not always export a size; Slurm's task count stands in.
    let world_size = match (number(vars.size)?, vars.launcher) {
        (Some(n), _) => n,
        (None, Launcher::Pmix) => number("SLURM_NTASKS")?.ok_or(EnvError::MissingWorldSize {
            rank_var: vars.rank,
            size_var: vars.size,
        })?,
        (None, _) => {
            return Err(EnvError::MissingWorldSize {
                rank_var: vars.rank,
                size_var: vars.size,
            })
        }
    };
    if rank >= world_size {
        return Err(EnvError::RankOutOfRange {
            var: vars.rank,
            rank,
            world_size,
        });
    }
    let master = match (var("MASTER_ADDR"), number("MASTER_PORT")?) {
        (Some(addr), Some(port)) => u16::try_from(port).ok().map(|port| (addr, port)),
        _ => None,
    };
    let env = RankEnv {
        launcher: vars.launcher,
        rank,
        world_size,
        local_rank: first_number(vars.local_rank)?.unwrap_or(0),
        local_world_size: first_number(vars.local_size)?,
        job_id: job_id(vars.launcher, &var),
        run_id: run_id(vars.launcher, &var),
        master,
        node: var("RANKSCOPE_NODE").filter(|node| !node.trim().is_empty()),
    };
    match number("RANKSCOPE_SIMULATED_NODES")? {
        Some(nodes) => env.on_simulated_nodes(nodes),
        None => Ok(env),
    }
}

impl RankEnv {
    /// This rank as one of `nodes` simulated nodes on this machine, under
    /// any launcher (`RANKSCOPE_SIMULATED_NODES`, as `rankscope launch
    /// --nodes` gives torchrun's variables): the world's ranks split into
    /// `nodes` runs of consecutive ranks, this rank's local rank its place
    /// in its run, its node `simulated-node-<n>` unless RANKSCOPE_NODE
    /// names one.
    fn on_simulated_nodes(self, nodes: u32) -> Result<Self, EnvError> {
        if nodes == 0 || !self.world_size.is_multiple_of(nodes) {
            return Err(EnvError::SimulatedNodes {
                nodes,
                world_size: self.world_size,
            });
        }
        let size = self.world_size / nodes;
        let node = self
            .node
            .or_else(|| Some(format!("simulated-node-{}", self.rank / size)));
        Ok(RankEnv {
            local_rank: self.rank % size,
            local_world_size: Some(size),
            node,
            ..self
        })
    }
}

/// The id a launcher gives the whole job, the same on every rank.
fn job_id(launcher: Launcher, var: &impl Fn(&str) -> Option<String>) -> Option<String> {
    let slurm = || {
        var("SLURM_JOB_ID").map(|job| match var("SLURM_STEP_ID") {
            Some(step) => format!("{job}.{step}"),
            None => job,
        })
    };
    let from_launcher = match launcher {
        Launcher::Single => None,
        Launcher::Rankscope => var("RANKSCOPE_JOB_ID"),
        Launcher::OpenMpi => var("OMPI_MCA_ess_base_jobid").or_else(|| var("PMIX_NAMESPACE")),
        Launcher::Pmix => var("PMIX_NAMESPACE"),
        Launcher::Mpich => var("PMI_KVSNAME").or_else(|| var("PMI_JOBID")),
        Launcher::Torchrun => var("TORCHELASTIC_RUN_ID"),
        Launcher::Slurm => None,
    };
    from_launcher.or_else(slurm)
}

/// The identity of this run, the same on every rank of it.
fn run_id(launcher: Launcher, var: &impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(run) = var("RANKSCOPE_RUN_ID") {
        return Some(run);
    }
    match launcher {
        // An elastic restart keeps torchrun's run id: the restart count
        // tells runs apart. Without --standalone or --rdzv-id the id is
        // `none` on every launch: that identifies no run at all.
        Launcher::Torchrun => var("TORCHELASTIC_RUN_ID")
            .filter(|id| id != "none")
            .map(|id| {
                let restart = var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".into());
                format!("{id}.{restart}")
            }),
        Launcher::Single | Launcher::Rankscope => None,
        // Open MPI, PMIx, MPICH and Slurm give each launch a fresh job id.
        _ => job_id(launcher, var),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn detect_from(pairs: &[(&str, &str)]) -> Result<RankEnv, EnvError> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        detect_with(|name| map.get(name).cloned())
    }

    /// `rankscope launch --nodes` names each rank's simulated node; an
    /// empty name is none.
    #[test]
    fn a_node_named_in_rankscope_node_is_the_rank_s() {
        let torchrun = [("RANK", "2"), ("WORLD_SIZE", "4")];
        let named = [
            torchrun.as_slice(),
            &[("RANKSCOPE_NODE", "simulated-node-1")],
        ]
        .concat();
        assert_eq!(
            detect_from(&named).unwrap().node.as_deref(),
            Some("simulated-node-1")
        );
        let empty = [torchrun.as_slice(), &[("RANKSCOPE_NODE", " ")]].concat();
        assert_eq!(detect_from(&empty).unwrap().node, None);
        assert_eq!(detect_from(&torchrun).unwrap().node, None);
    }

    /// Under mpirun on one machine, RANKSCOPE_SIMULATED_NODES splits the
    /// world into nodes of consecutive ranks.
    #[test]
    fn simulated_nodes_split_the_world_by_consecutive_ranks() {
        let mpi = [
            ("OMPI_COMM_WORLD_RANK", "9"),
            ("OMPI_COMM_WORLD_SIZE", "16"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "9"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "16"),
        ];
        let four = [mpi.as_slice(), &[("RANKSCOPE_SIMULATED_NODES", "4")]].concat();
        let env = detect_from(&four).unwrap();
        assert_eq!((env.local_rank, env.local_world_size), (1, Some(4)));
        assert_eq!(env.node.as_deref(), Some("simulated-node-2"));
        let three = [mpi.as_slice(), &[("RANKSCOPE_SIMULATED_NODES", "3")]].concat();
        assert_eq!(
            detect_from(&three).unwrap_err().to_string(),
            "RANKSCOPE_SIMULATED_NODES=3 does not divide the world of 16 ranks"
        );
    }

    #[test]
    fn nothing_set_is_a_world_of_one() {
        assert_eq!(detect_from(&[]).unwrap(), RankEnv::single());
    }

    #[test]
    fn open_mpi() {
        let env = detect_from(&[
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "4242"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::OpenMpi);
        assert_eq!((env.rank, env.world_size, env.local_rank), (3, 8, 1));
        assert_eq!(env.local_world_size, Some(2));
        assert_eq!(env.job_id.as_deref(), Some("4242"));
    }

    #[test]
    fn mpich_pmi() {
        let env = detect_from(&[
            ("PMI_RANK", "5"),
            ("PMI_SIZE", "6"),
            ("MPI_LOCALRANKID", "2"),
            ("PMI_KVSNAME", "kvs_77_0"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Mpich);
        assert_eq!((env.rank, env.world_size, env.local_rank), (5, 6, 2));
        assert_eq!(env.job_id.as_deref(), Some("kvs_77_0"));
    }

    #[test]
    fn pmix_takes_the_size_from_slurm_when_absent() {
        let env = detect_from(&[
            ("PMIX_RANK", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_JOB_ID", "900"),
            ("SLURM_STEP_ID", "2"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Pmix);
        assert_eq!((env.rank, env.world_size, env.local_rank), (1, 4, 1));
        assert_eq!(env.job_id.as_deref(), Some("900.2"));
    }

    #[test]
    fn torchrun() {
        let env = detect_from(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "0"),
            ("LOCAL_WORLD_SIZE", "2"),
            ("MASTER_ADDR", "10.1.2.3"),
            ("MASTER_PORT", "29500"),
            ("TORCHELASTIC_RUN_ID", "abc"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Torchrun);
        assert_eq!((env.rank, env.world_size, env.local_rank), (2, 4, 0));
        assert_eq!(env.master, Some(("10.1.2.3".to_string(), 29500)));
        assert_eq!(env.job_id.as_deref(), Some("abc"));
        assert_eq!(env.run_id.as_deref(), Some("abc.0"));
        let restarted = detect_from(&[
            ("RANK", "2"),
            ("WORLD_SIZE", "4"),
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", "1"),
        ])
        .unwrap();
        assert_eq!(restarted.job_id.as_deref(), Some("abc"));
        assert_eq!(
            restarted.run_id.as_deref(),
            Some("abc.1"),
            "a restart is another run"
        );
        let unnamed = detect_from(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "none"),
        ])
        .unwrap();
        assert_eq!(unnamed.run_id, None, "`none` names no run");
    }

    #[test]
    fn torchrun_under_srun_is_torchrun() {
        let env = detect_from(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_JOB_ID", "55"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Torchrun);
        assert_eq!(env.rank, 1);
        // No TORCHELASTIC_RUN_ID: the Slurm job id still ties the ranks together.
        assert_eq!(env.job_id.as_deref(), Some("55"));
    }

    #[test]
    fn slurm_without_mpi() {
        let env = detect_from(&[
            ("SLURM_PROCID", "7"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_LOCALID", "3"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Slurm);
        assert_eq!((env.rank, env.world_size, env.local_rank), (7, 16, 3));
        assert_eq!(env.job_id.as_deref(), Some("1234.0"));
    }

    #[test]
    fn rankscope_launch_wins_over_everything() {
        let env = detect_from(&[
            ("RANKSCOPE_RANK", "1"),
            ("RANKSCOPE_WORLD_SIZE", "3"),
            ("RANK", "0"),
            ("WORLD_SIZE", "1"),
        ])
        .unwrap();
        assert_eq!(env.launcher, Launcher::Rankscope);
        assert_eq!((env.rank, env.world_size), (1, 3));
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = detect_from(&[("RANK", "two"), ("WORLD_SIZE", "4")]).unwrap_err();
        assert!(err.to_string().contains("RANK=\"two\""), "{err}");
        let err = detect_from(&[("RANK", "4"), ("WORLD_SIZE", "4")]).unwrap_err();
        assert!(matches!(err, EnvError::RankOutOfRange { rank: 4, .. }));
        let err = detect_from(&[("PMI_RANK", "0")]).unwrap_err();
        assert_eq!(
            err,
            EnvError::MissingWorldSize {
                rank_var: "PMI_RANK",
                size_var: "PMI_SIZE"
            }
        );
    }
}
