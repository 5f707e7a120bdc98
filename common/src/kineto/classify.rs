//! What a GPU activity is, by its name, with HTA's rules; and what kind of
//! collective a name stands for.

use serde::{Deserialize, Serialize};

/// A GPU activity's category, as Holistic Trace Analysis (HTA) names it:
/// the communication, memory and compute patterns of its repository's
/// `hta/common/types.py` (commit f4d0062), tried in that order. HTA 0.5.0
/// on PyPI (what the tests run) has older patterns (`^nccl.*Kernel`;
/// `^Memcpy|^Memset|^dma`): they agree on NCCL kernels, copies, sets and
/// CUDA compute kernels, and differ on names that start with `hip` or
/// `hccl` (communication here) or hold `dma` after their start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelCategory {
    /// Arithmetic: every kernel that is none of the others.
    Compute,
    /// NCCL (or RCCL, HCCL) kernels.
    Communication,
    /// Memory copies and sets.
    Memory,
    /// Neither: synchronisation and stream waits.
    Other,
    /// Not a GPU activity: a CPU operator (a `cpu_op` event), compared
    /// across ranks as kernels are.
    CpuOp,
    /// Not a GPU activity: a rankscope stage, holding the GPU time of the
    /// activities launched inside it.
    Stage,
}

impl KernelCategory {
    /// The category of the GPU activity named `name`.
    pub fn of(name: &str) -> KernelCategory {
        if is_communication(name) {
            KernelCategory::Communication
        } else if is_memory(name) {
            KernelCategory::Memory
        } else if is_compute(name) {
            KernelCategory::Compute
        } else {
            KernelCategory::Other
        }
    }

    /// The name report.json uses.
    pub fn as_str(self) -> &'static str {
        match self {
            KernelCategory::Compute => "compute",
            KernelCategory::Communication => "communication",
            KernelCategory::Memory => "memory",
            KernelCategory::Other => "other",
            KernelCategory::CpuOp => "cpu_op",
            KernelCategory::Stage => "stage",
        }
    }
}

/// `(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)`
fn is_communication(name: &str) -> bool {
    ["nccl", "hip", "hccl"].iter().any(|p| name.starts_with(p)) || name.contains("ncclKernel")
}

/// `(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)`
fn is_memory(name: &str) -> bool {
    let name = name.strip_prefix("hip").unwrap_or(name);
    ["Memcpy", "Memset", "dma"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// None of HTA's non-compute patterns: `(^nccl)|(.*Memcpy)|(.*Memset)|
/// (.*dma)|(^.*Sync)|(^Stream Wait Event)|(cuda.*LaunchKernel)|
/// (^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|
/// (^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)`.
fn is_compute(name: &str) -> bool {
    const PREFIXES: [&str; 10] = [
        "nccl",
        "Stream Wait Event",
        "runFunction",
        "hip",
        "job_exe",
        "packet",
        "pe_exe",
        "cpum_exe_subgraph",
        "hccl",
        "collective_subgraph_execution",
    ];
    // Python's `.` stops at a line break: `.*X` looks at the first line.
    let line = name.split('\n').next().unwrap_or_default();
    let launch = name
        .strip_prefix("cuda")
        .and_then(|rest| rest.split('\n').next())
        .is_some_and(|rest| rest.contains("LaunchKernel"));
    !(PREFIXES.iter().any(|p| name.starts_with(p))
        || ["Memcpy", "Memset", "dma", "Sync"]
            .iter()
            .any(|p| line.contains(p))
        || launch)
}

/// The collective a name stands for, in one spelling: `all_reduce`,
/// `all_gather`, `reduce_scatter`, `all_to_all`, `broadcast`, `send_recv`,
/// …, from a host annotation (`nccl:all_reduce`, `gloo:_all_gather_base`),
/// a `record_param_comms` argument (`allreduce`) or an NCCL kernel
/// (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`). `None` for other names.
pub fn collective_kind(name: &str) -> Option<String> {
    let raw = if let Some(rest) = name
        .split_once("Kernel_")
        .filter(|(head, _)| head.starts_with("nccl"))
        .map(|(_, rest)| rest)
    {
        rest.split(['_', '(']).next().unwrap_or_default()
    } else {
        let (backend, kind) = name.split_once(':')?;
        if !["nccl", "gloo", "mpi", "ucc", "xccl", "hccl"].contains(&backend) {
            return None;
        }
        kind
    };
    Some(normalize_kind(raw))
}

/// `AllReduce`, `allreduce`, `all_reduce`, `_all_gather_base`,
/// `all_gather_into_tensor` → `all_reduce`, `all_gather`; a kind it does
/// not know, lower-cased.
pub(crate) fn normalize_kind(raw: &str) -> String {
    known_kind(raw).map_or_else(|| raw.trim_matches('_').to_lowercase(), str::to_string)
}

/// The collective a `torch.distributed` function's name stands for
/// (`all_reduce`, `all_gather_into_tensor`, `barrier`), in
/// [`collective_kind`]'s spelling; `None` for a name that is no collective.
pub fn function_kind(function: &str) -> Option<&'static str> {
    known_kind(function)
}

/// The kind `raw` spells, among those rankscope knows.
fn known_kind(raw: &str) -> Option<&'static str> {
    let squashed: String = raw
        .chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    const KINDS: [(&str, &str); 12] = [
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("sendrecv", "send_recv"),
        ("barrier", "barrier"),
        ("reduce", "reduce"),
        ("gather", "gather"),
        ("scatter", "scatter"),
        ("send", "send"),
        ("recv", "recv"),
    ];
    let mut stem = squashed.as_str();
    while let Some(shorter) = ["coalesced", "base", "intotensor", "tensor"]
        .iter()
        .find_map(|suffix| stem.strip_suffix(suffix))
    {
        stem = shorter;
    }
    KINDS
        .iter()
        .find(|(spelled, _)| stem == *spelled)
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_follow_htas_patterns() {
        use KernelCategory::*;
        let cases = [
            (
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                Communication,
            ),
            ("void at::native::ncclKernel_wrapped()", Communication),
            ("hipMemcpyAsync", Communication), // HTA tries `^hip` first
            ("Memcpy DtoH (Device -> Pageable)", Memory),
            ("Memset (Device)", Memory),
            ("dma_transfer", Memory),
            (
                "void at::native::vectorized_elementwise_kernel<4>()",
                Compute,
            ),
            ("sm90_xmma_gemm_bf16bf16_bf16f32", Compute),
            ("Event Sync", Other),
            ("Stream Wait Event", Other),
            ("cudaLaunchKernelExC", Other),
            ("void copy_Memcpy_like()", Other), // `.*Memcpy` is not compute
        ];
        for (name, category) in cases {
            assert_eq!(KernelCategory::of(name), category, "{name}");
        }
    }

    #[test]
    fn collective_kinds_in_one_spelling() {
        let cases = [
            ("nccl:all_reduce", Some("all_reduce")),
            ("gloo:all_reduce", Some("all_reduce")),
            ("nccl:_all_gather_base", Some("all_gather")),
            ("nccl:all_to_all", Some("all_to_all")),
            (
                "nccl:reduce_scatter_tensor_coalesced",
                Some("reduce_scatter"),
            ),
            (
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
                Some("all_reduce"),
            ),
            (
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)",
                Some("send_recv"),
            ),
            ("aten::add", None),
            ("ProfilerStep#3", None),
            ("http://x", None),
        ];
        for (name, kind) in cases {
            assert_eq!(collective_kind(name).as_deref(), kind, "{name}");
        }
        assert_eq!(normalize_kind("allreduce"), "all_reduce");
        assert_eq!(normalize_kind("all_gather_into_tensor"), "all_gather");
        assert_eq!(function_kind("all_gather_into_tensor"), Some("all_gather"));
        assert_eq!(function_kind("barrier"), Some("barrier"));
        assert_eq!(function_kind("init_process_group"), None);
    }
}
