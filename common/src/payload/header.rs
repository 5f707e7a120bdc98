//! The payload header: everything about a rank's payload that is not table
//! data. Encoded with bincode (standard configuration, serde). Format
//! versions 2 and 3 share this header; version 1 headers are still read and
//! converted.

use crate::parallel::ParallelCoord;
use crate::window::WindowMeta;
use serde::{Deserialize, Serialize};

/// Where a rank's GPU readings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuSource {
    /// No GPU telemetry (no NVML, or turned off).
    #[default]
    None,
    /// Real devices read through NVML.
    Nvml,
    /// Synthetic readings (the demo): never real hardware.
    Simulated,
}

impl GpuSource {
    /// The name used in reports: `none`, `nvml` or `simulated`.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuSource::None => "none",
            GpuSource::Nvml => "nvml",
            GpuSource::Simulated => "simulated",
        }
    }
}

/// The transport that carried the payloads of a session to rank 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportName {
    /// Spill files in a shared session directory.
    #[default]
    Dir,
    /// An MPI gather.
    Mpi,
    /// Authenticated TCP connections to rank 0.
    Tcp,
    /// None: torch.profiler traces read by `rankscope import` (a report's
    /// session only, never a payload's).
    Import,
}

/// How the ranks' clock offsets to rank 0 were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ClockSync {
    /// Not measured: the transport has no way to (the directory).
    #[default]
    #[serde(rename = "none")]
    None,
    /// Ping-pong rounds over MPI at session start and finish.
    #[serde(rename = "mpi-pingpong")]
    MpiPingpong,
    /// Ping-pong rounds over the TCP rendezvous.
    #[serde(rename = "tcp-pingpong")]
    TcpPingpong,
    /// From the data itself (`rankscope import`): matched collective calls
    /// end together on every rank.
    #[serde(rename = "collectives")]
    Collectives,
}

/// The session a payload belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    /// Id shared by every rank of one job; names the session directory.
    pub id: String,
    /// Session name.
    pub name: String,
    /// Free-form tags.
    pub tags: Vec<(String, String)>,
    /// Identity of this run of the job, the same on every rank of the run
    /// and different between two runs that share the session id; `None`
    /// when neither the launcher nor the transport could establish one.
    pub run_id: Option<String>,
}

/// The rank that wrote a payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankMeta {
    /// Global rank.
    pub rank: u32,
    /// Number of ranks in the job.
    pub world_size: u32,
    /// Rank within its node.
    pub local_rank: u32,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Launcher detected: `single`, `openmpi`, `torchrun`, ...
    pub launcher: String,
}

/// A measured offset between this rank's clock and rank 0's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// This rank's clock minus rank 0's, nanoseconds.
    pub offset_ns: i64,
    /// Round trip of the exchange the offset came from: the offset is
    /// known to within half of it.
    pub round_trip_ns: u64,
}

/// The rank's clock: what its timestamps are relative to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockMeta {
    /// Wall-clock time of the session start, nanoseconds since the Unix epoch.
    pub start_unix_ns: i64,
    /// Session length on this rank's monotonic clock, nanoseconds.
    pub duration_ns: u64,
    /// This rank's offset to rank 0 when the session started, where the
    /// transport measured one.
    pub offset_to_rank0: Option<ClockOffset>,
    /// The same, measured again when the session finished: the difference
    /// is the clocks' drift over the session.
    pub offset_at_finish: Option<ClockOffset>,
}

/// One GPU a rank sampled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMeta {
    /// NVML device index.
    pub index: u32,
    /// Device UUID.
    pub uuid: String,
    /// Device name.
    pub name: String,
    /// PCI bus id.
    pub pci_bus_id: String,
    /// Device memory in all, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Highest SM clock, MHz (read once).
    pub max_sm_clock_mhz: Option<u32>,
    /// Highest memory clock, MHz (read once).
    pub max_mem_clock_mhz: Option<u32>,
}

/// Rows a rank recorded but did not keep, because a table was full.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DroppedRows {
    /// Table name.
    pub table: String,
    /// Rows dropped.
    pub rows: u64,
}

/// Limits a rank reached while recording, beside the rows it dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overflow {
    /// Names seen past `max_names` per thread, recorded as `(other)`.
    pub names_folded: u64,
    /// Stages begun while `max_open_stages` were open on the thread: not recorded.
    pub stages_too_deep: u64,
}

/// What the telemetry sampler cost the rank: readings taken and the wall
/// time of each (all GPUs at once, or the host).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplerStats {
    /// GPU readings taken.
    pub gpu_readings: u64,
    /// Mean wall time of a GPU reading, nanoseconds.
    pub gpu_read_ns_mean: u64,
    /// Longest GPU reading, nanoseconds.
    pub gpu_read_ns_max: u64,
    /// Host readings taken.
    pub host_readings: u64,
    /// Mean wall time of a host reading, nanoseconds.
    pub host_read_ns_mean: u64,
    /// Longest host reading, nanoseconds.
    pub host_read_ns_max: u64,
}

/// Everything about a payload that is not table data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PayloadHeader {
    /// The session.
    pub session: SessionMeta,
    /// The rank.
    pub rank: RankMeta,
    /// The rank's clock.
    pub clock: ClockMeta,
    /// The transport the session used.
    pub transport: TransportName,
    /// How the clock offset was obtained.
    pub clock_sync: ClockSync,
    /// Where rank 0 listened, for a transport that listens (TCP): `host:port`.
    pub endpoint: Option<String>,
    /// Where GPU readings came from.
    pub gpu_source: GpuSource,
    /// The GPUs this rank sampled.
    pub gpus: Vec<GpuMeta>,
    /// How those GPUs were chosen (configuration, CUDA_VISIBLE_DEVICES, ...).
    pub gpu_selection: String,
    /// The telemetry sampler's own cost.
    pub sampler: SamplerStats,
    /// Rows dropped per table.
    pub dropped: Vec<DroppedRows>,
    /// Other limits reached.
    pub overflow: Overflow,
    /// For a payload merged from a rank's flushes, the rank never
    /// having finished: how far into the session it reaches, nanoseconds.
    pub flushed_until_ns: Option<u64>,
    /// What the agent told (or, on a quiet rank, kept from) the user:
    /// GPU telemetry off, a value cut to fit, ...
    pub notices: Vec<String>,
    /// Version of the agent that wrote the payload.
    pub agent_version: String,
    /// Time the agent took to encode this payload's tables when it last
    /// wrote it, nanoseconds: a cost of profiling at the session's end.
    /// `None` where not measured (format 2 and older, payloads written by
    /// other means). Format 3 carries it after the rest of the header
    /// (`HeaderTail`).
    #[serde(skip)]
    pub encode_ns: Option<u64>,
    /// For a window's payload: which window, and its steps and times on
    /// this rank. `None` for a session's own payload. Format 4 carries it
    /// in the header's tail.
    #[serde(skip)]
    pub window: Option<WindowMeta>,
    /// The rank's parallel coordinates (TP, PP, ...), where a trace's
    /// process groups gave them. Format 5 carries them in the header's
    /// tail.
    #[serde(skip)]
    pub parallel: Vec<ParallelCoord>,
}

/// What format 3 writes after the header's fields: the fields that came
/// after format 2, which a format-2 header lacks. (A field added later
/// needs a tail of its own version: bincode knows no optional fields.)
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct HeaderTailV3 {
    pub(super) encode_ns: Option<u64>,
}

/// What format 4 writes after the header's fields: format 3's tail and
/// the window a payload covers.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct HeaderTailV4 {
    pub(super) encode_ns: Option<u64>,
    pub(super) window: Option<WindowMeta>,
}

/// What format 5 writes after the header's fields: format 4's tail and
/// the rank's parallel coordinates.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct HeaderTail {
    pub(super) encode_ns: Option<u64>,
    pub(super) window: Option<WindowMeta>,
    pub(super) parallel: Vec<ParallelCoord>,
}

impl PayloadHeader {
    /// Counts `rows` more dropped from `table`.
    pub fn add_dropped(&mut self, table: &str, rows: u64) {
        match self.dropped.iter_mut().find(|d| d.table == table) {
            Some(dropped) => dropped.rows += rows,
            None => self.dropped.push(DroppedRows {
                table: table.to_string(),
                rows,
            }),
        }
    }

    /// A header for `rank` of `world_size` in session `id` / `name`, with no
    /// tags, run id, GPUs or drops, on this host and process; fill in the
    /// rest as needed.
    pub fn new(id: &str, name: &str, rank: u32, world_size: u32) -> Self {
        PayloadHeader {
            session: SessionMeta {
                id: id.to_string(),
                name: name.to_string(),
                tags: Vec::new(),
                run_id: None,
            },
            rank: RankMeta {
                rank,
                world_size,
                local_rank: 0,
                host: String::new(),
                pid: std::process::id(),
                launcher: "single".to_string(),
            },
            clock: ClockMeta {
                start_unix_ns: 0,
                duration_ns: 0,
                offset_to_rank0: None,
                offset_at_finish: None,
            },
            transport: TransportName::Dir,
            clock_sync: ClockSync::None,
            endpoint: None,
            gpu_source: GpuSource::None,
            gpus: Vec::new(),
            gpu_selection: String::new(),
            sampler: SamplerStats::default(),
            dropped: Vec::new(),
            overflow: Overflow::default(),
            flushed_until_ns: None,
            notices: Vec::new(),
            agent_version: env!("CARGO_PKG_VERSION").to_string(),
            encode_ns: None,
            window: None,
            parallel: Vec::new(),
        }
    }
}

/// The header of format version 1, read for compatibility.
pub(super) mod v1 {
    use serde::Deserialize;

    use super::{
        ClockSync, DroppedRows, GpuMeta, GpuSource, RankMeta, SamplerStats, TransportName,
    };

    #[derive(Deserialize)]
    struct SessionMeta {
        id: String,
        name: String,
        tags: Vec<(String, String)>,
    }

    #[derive(Deserialize)]
    struct ClockMeta {
        start_unix_ns: i64,
        duration_ns: u64,
        /// Always 0 in version 1: no offset was ever measured.
        #[allow(dead_code)]
        offset_to_rank0_ns: i64,
    }

    /// A version-1 header, field for field.
    #[derive(Deserialize)]
    pub(in crate::payload) struct PayloadHeader {
        session: SessionMeta,
        rank: RankMeta,
        clock: ClockMeta,
        gpu_source: GpuSource,
        gpus: Vec<GpuMeta>,
        gpu_selection: String,
        sampler: SamplerStats,
        dropped: Vec<DroppedRows>,
        agent_version: String,
    }

    impl From<PayloadHeader> for super::PayloadHeader {
        /// Version 1 gathered through the directory only, knew no run
        /// identity and measured no clock offset (its 0 was not a measurement).
        fn from(v1: PayloadHeader) -> Self {
            super::PayloadHeader {
                session: super::SessionMeta {
                    id: v1.session.id,
                    name: v1.session.name,
                    tags: v1.session.tags,
                    run_id: None,
                },
                rank: v1.rank,
                clock: super::ClockMeta {
                    start_unix_ns: v1.clock.start_unix_ns,
                    duration_ns: v1.clock.duration_ns,
                    offset_to_rank0: None,
                    offset_at_finish: None,
                },
                transport: TransportName::Dir,
                clock_sync: ClockSync::None,
                endpoint: None,
                gpu_source: v1.gpu_source,
                gpus: v1.gpus,
                gpu_selection: v1.gpu_selection,
                sampler: v1.sampler,
                dropped: v1.dropped,
                overflow: super::Overflow::default(),
                flushed_until_ns: None,
                notices: Vec::new(),
                agent_version: v1.agent_version,
                encode_ns: None,
                window: None,
                parallel: Vec::new(),
            }
        }
    }
}
