//! `rankscope import`: per-rank torch.profiler / Kineto traces, and
//! VizTracer traces of the same or other ranks, into one report: the same
//! files an in-job report has, `trace.json.gz` included. Traces are read
//! as streams, `jobs` at a time, each reduced to its rank's digest (kernel
//! and operator totals, GPU times, collective calls, Python functions)
//! and the earliest `trace_max_stages` rows of each kind for the timeline
//! before the next: memory is set by the row budget, the jobs and the
//! ranks' digests, not by the size of the traces. The traces' clocks are
//! aligned from their collectives (the `clock` module).

mod clock;
mod python;
mod timeline;

use crate::AnalysisConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use rankscope_common::gather::{Gathered, ReportFiles};
use rankscope_common::kineto::{self, TraceError, TraceLimits};
use rankscope_common::parallel::ParallelLayout;
use rankscope_common::payload::{ClockSync, TransportName};

use crate::analysis::kernels::{analyze_kernels, RankKernels};
use crate::analysis::python::{across_ranks, RankFunction};
use crate::analysis::shared_names::SharedNames;
use crate::analysis::{account, add_kernels, analyze};
use crate::model::{Notice, RankSummary, Report, SkippedInput};
use crate::progress::{Progress, Silent};
use crate::report::{create_dir, write_reports, TraceFile, WriteError, REPORT_JSON};
use clock::{CollectiveMarks, Offset};
use timeline::Timeline;

/// Why no report could be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// A path given could not be read.
    #[error("reading {path}")]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No `.json` or `.json.gz` file among the paths.
    #[error("no trace (.json or .json.gz) in {}", .paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoTraces {
        /// The paths given.
        paths: Vec<PathBuf>,
    },
    /// Not one trace could be used.
    #[error("no usable trace:{}", .skipped.iter().map(|s| format!("\n  {}: {}", s.source, s.reason)).collect::<String>())]
    NothingUsable {
        /// Every trace refused, with the reason.
        skipped: Vec<SkippedInput>,
    },
    /// `--parallel-layout` places another number of ranks than the traces'
    /// world holds.
    #[error("the parallel layout {layout} places {} ranks; the traces' world has {world_size}", .layout.ranks())]
    Layout {
        /// The layout given.
        layout: ParallelLayout,
        /// The traces' world size.
        world_size: u32,
    },
    /// The output directory could not be made, or a report file written.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A trace's rows for the timeline could not be read back.
    #[error("the timeline rows of {trace}")]
    Timeline {
        /// The trace.
        trace: String,
        /// Why.
        #[source]
        source: timeline::TimelineError,
    },
}

/// A written report of imported traces.
#[derive(Debug)]
pub struct Imported {
    /// The analysed report.
    pub report: Report,
    /// The files written.
    pub files: ReportFiles,
    /// Python calls of VizTracer traces past the row budget, left out of
    /// `python_functions`.
    pub python_calls_cut: u64,
}

impl Imported {
    /// Whether every rank of the traces' world is in the report, every
    /// trace was used, and none was cut by a budget.
    pub fn is_complete(&self) -> bool {
        let session = &self.report.session;
        let cut = self
            .report
            .kernel_traces
            .iter()
            .any(|t| t.cut.is_some_and(|c| !c.is_empty()));
        session.ranks_missing.is_empty()
            && session.skipped.is_empty()
            && !cut
            && self.python_calls_cut == 0
    }
}

/// How [`import`] reads the traces.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The bounds of each trace's read.
    pub limits: TraceLimits,
    /// Traces read at once (default: the cores); each holds up to its row
    /// budget while it is read.
    pub jobs: usize,
    /// The job's parallel layout: it places each rank whose trace's
    /// process groups do not.
    pub layout: Option<ParallelLayout>,
    /// The bytes of distinct names all the traces' digests hold at most
    /// (one copy of each, shared by the ranks that name it): a name past
    /// it is counted in its trace's cut, and its totals go to the name
    /// standing for its category's. With more than one job, which names
    /// come first (and so stay named) depends on the order the traces are
    /// read in.
    pub name_budget_bytes: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            limits: TraceLimits::default(),
            jobs: std::thread::available_parallelism().map_or(1, usize::from),
            layout: None,
            name_budget_bytes: 128 << 20,
        }
    }
}

/// Reads the traces at `paths` (files, or directories whose `.json` and
/// `.json.gz` files are taken) and writes their report into `out`.
pub fn import(
    paths: &[PathBuf],
    out: &Path,
    options: &ImportOptions,
    config: &AnalysisConfig,
) -> Result<Imported, ImportError> {
    import_with(paths, out, options, config, &Silent)
}

/// [`import`], telling `progress` as each trace is read.
pub fn import_with(
    paths: &[PathBuf],
    out: &Path,
    options: &ImportOptions,
    config: &AnalysisConfig,
    progress: &dyn Progress,
) -> Result<Imported, ImportError> {
    // A bad output directory is said before the traces are read.
    create_dir(out)?;
    let (files, mut skipped) = trace_files(paths)?;
    let mut ranks: BTreeMap<u32, RankFiles> = BTreeMap::new();
    let mut worlds = std::collections::BTreeSet::new();
    let mut world_size = 0;
    progress.begin("reading traces", files.len() as u64);
    let limits = (options.limits, config.trace_max_stages);
    // Each trace's rows for the timeline wait here, not in memory.
    let spill = tempfile::Builder::new()
        .prefix(".rankscope-import-")
        .tempdir_in(out)
        .map_err(|source| ImportError::Read {
            path: out.to_path_buf(),
            source,
        })?;
    let reads = read_all(
        &files,
        spill.path(),
        options,
        limits,
        config.max_world_size,
        progress,
    );
    for (file, read) in files.iter().zip(reads) {
        let source = file.display().to_string();
        let read = match read {
            Ok(read) => read,
            Err(reason) => {
                skipped.push(SkippedInput { source, reason });
                continue;
            }
        };
        let rank = read.rank;
        let slot = ranks.entry(rank).or_default().slot(read.viztracer);
        if let Some(first) = slot {
            skipped.push(SkippedInput {
                reason: format!(
                    "a second {} trace for rank {rank} (the first: {})",
                    read.kind(),
                    first.source
                ),
                source,
            });
            continue;
        }
        worlds.extend(read.world_size);
        world_size = world_size.max(read.world_size.unwrap_or(0)).max(rank + 1);
        *slot = Some(read);
    }
    if ranks.is_empty() {
        return Err(ImportError::NothingUsable { skipped });
    }
    let aligned = align(&mut ranks);
    let inputs = Inputs {
        paths,
        world_size,
        skipped,
        aligned: &aligned,
    };
    let mut report = report(inputs, &mut ranks, config, options)?;
    if worlds.len() > 1 {
        let claims: Vec<String> = worlds.iter().map(u32::to_string).collect();
        report.session.notices.push(Notice {
            message: format!(
                "the traces disagree on the world size ({}): the report takes the largest, {world_size}",
                claims.join(", ")
            ),
            ranks: report.session.ranks_reporting.clone(),
        });
    }
    aligned.note(&mut report);
    let trace = write_timeline(&ranks, &aligned, &mut report, out, config)?;
    let mut files = write_reports(&report, out)?;
    files.files.push(crate::report::raw::write_account(
        &report.time_account,
        &out.join(crate::report::raw::RAW_DIR),
    )?);
    files.files.push(trace);
    let python_calls_cut = ranks
        .values()
        .flat_map(RankFiles::traces)
        .map(|t| t.python_cut)
        .sum();
    Ok(Imported {
        report,
        files,
        python_calls_cut,
    })
}

/// One rank's traces: at most one of each kind.
#[derive(Default)]
struct RankFiles {
    kineto: Option<ReadTrace>,
    viztracer: Option<ReadTrace>,
}

impl RankFiles {
    /// The place of a VizTracer trace, or of a torch.profiler one.
    fn slot(&mut self, viztracer: bool) -> &mut Option<ReadTrace> {
        if viztracer {
            &mut self.viztracer
        } else {
            &mut self.kineto
        }
    }

    /// The trace whose clock is the rank's (its torch.profiler trace's,
    /// else its VizTracer trace's), and the other.
    fn primary_first(&self) -> (&ReadTrace, Option<&ReadTrace>) {
        match (&self.kineto, &self.viztracer) {
            (Some(kineto), viztracer) => (kineto, viztracer.as_ref()),
            (None, Some(viztracer)) => (viztracer, None),
            (None, None) => unreachable!("a rank is made with a trace"),
        }
    }

    fn traces(&self) -> impl Iterator<Item = &ReadTrace> {
        self.kineto.iter().chain(&self.viztracer)
    }
}

/// Each trace's clock against the reference (a rank's primary trace: see
/// [`reference_rank`]), by source.
struct Aligned {
    reference: u32,
    /// Per trace: its offset from the collectives, or `None` where it
    /// shares none with the reference (it is then placed to begin with
    /// it).
    offsets: BTreeMap<String, Option<Offset>>,
    /// Per trace, the ns its times move back to reach the reference clock.
    shift: BTreeMap<String, i64>,
    /// The earliest start of any trace's rows, on the reference clock.
    earliest: i64,
    /// Whether a rank's clock was aligned to another's from collectives.
    across_ranks: bool,
}

impl Aligned {
    /// The ns `trace`'s times move back to reach the reference clock.
    fn shift_of(&self, trace: &ReadTrace) -> i64 {
        self.shift.get(&trace.source).copied().unwrap_or(0)
    }

    /// Where `trace` begins on the shared timeline: seconds after the
    /// earliest trace.
    fn started_s(&self, trace: &ReadTrace) -> f64 {
        let start = self.start(trace);
        start.saturating_sub(self.earliest) as f64 / 1e9
    }

    /// Where `trace`'s rows begin, on the reference clock.
    fn start(&self, trace: &ReadTrace) -> i64 {
        trace.timeline.origin.saturating_sub(self.shift_of(trace))
    }

    /// Records `trace`'s `offset` to the `reference` trace; without one, a
    /// trace keeps its clock where both are Unix time, and is otherwise
    /// placed to begin with the reference. Returns the shift taken.
    fn place(&mut self, trace: &ReadTrace, offset: Option<Offset>, reference: &ReadTrace) -> i64 {
        let shift = match offset {
            Some(offset) => offset.ns,
            None if trace.unix_clock() && reference.unix_clock() => 0,
            None => trace
                .timeline
                .origin
                .saturating_sub(reference.timeline.origin),
        };
        self.record(trace, offset, shift);
        shift
    }

    /// Records `trace`'s offset (where one was measured) and the shift it
    /// takes onto the reference clock.
    fn record(&mut self, trace: &ReadTrace, offset: Option<Offset>, shift: i64) {
        self.offsets.insert(trace.source.clone(), offset);
        self.shift.insert(trace.source.clone(), shift);
    }

    /// Says in `report` which traces could not be aligned.
    fn note(&self, report: &mut Report) {
        let unaligned: Vec<&str> = self
            .offsets
            .iter()
            .filter(|(_, offset)| offset.is_none())
            .map(|(source, _)| source.as_str())
            .collect();
        if unaligned.is_empty() {
            return;
        }
        report.session.notices.push(Notice {
            message: format!(
                "not aligned from collectives (none matched rank {}'s trace, or its own \
                 torch.profiler trace's): {}. On the timeline a trace keeps its Unix clock \
                 (torch.profiler's; VizTracer's where it gives its base), or is placed by its \
                 rank's torch.profiler trace where their calls matched, or else begins with \
                 rank {0}'s trace",
                self.reference,
                unaligned.join(", ")
            ),
            ranks: Vec::new(),
        });
    }
}

/// Aligns every trace's clock with the reference's: a rank's primary
/// trace by the collectives it shares with the reference (GPU kernels
/// where both have them), else through the two ranks' VizTracer traces'
/// barriers; its other trace by the host calls it shares with its
/// primary. Shifts the kernel digests onto the reference clock.
fn align(ranks: &mut BTreeMap<u32, RankFiles>) -> Aligned {
    let reference_rank = reference_rank(ranks);
    let reference = ranks[&reference_rank].primary_first().0;
    // Per rank, its other trace's clock against its primary's.
    let same_rank: BTreeMap<u32, Option<Offset>> = ranks
        .iter()
        .map(|(&rank, files)| {
            let (primary, other) = files.primary_first();
            let offset = other.and_then(|o| clock::same_rank_offset(&primary.marks, &o.marks));
            (rank, offset)
        })
        .collect();
    // A rank's VizTracer trace and its clock against the rank's primary's.
    let viztracer = |rank: u32| -> Option<(&ReadTrace, Offset)> {
        let files = &ranks[&rank];
        match (&files.kineto, &files.viztracer) {
            (None, Some(calls)) => Some((calls, Offset::ZERO)),
            (Some(_), Some(calls)) => same_rank[&rank].map(|offset| (calls, offset)),
            _ => None,
        }
    };
    // Where two ranks' primaries share no collective (torch.profiler
    // traces of a CPU job): their VizTracer traces' barriers, each
    // VizTracer clock taken back to its rank's primary.
    let bridged = |rank: u32| -> Option<Offset> {
        let (reference_calls, reference_lag) = viztracer(reference_rank)?;
        let (calls, lag) = viztracer(rank)?;
        let across = clock::offset(&reference_calls.marks, &calls.marks)?;
        Some(Offset {
            ns: across
                .ns
                .saturating_sub(lag.ns)
                .saturating_add(reference_lag.ns),
            // Each same-rank step's lag is an error of its own.
            spread_ns: across
                .spread_ns
                .saturating_add(lag.spread_ns)
                .saturating_add(reference_lag.spread_ns),
            ..across
        })
    };
    let mut aligned = Aligned {
        reference: reference_rank,
        offsets: BTreeMap::new(),
        shift: BTreeMap::new(),
        earliest: 0,
        across_ranks: false,
    };
    for (&rank, files) in ranks.iter() {
        let (primary, other) = files.primary_first();
        let offset = if std::ptr::eq(primary, reference) {
            Some(Offset::ZERO)
        } else {
            let offset = clock::offset(&reference.marks, &primary.marks).or_else(|| bridged(rank));
            aligned.across_ranks |= offset.is_some();
            offset
        };
        let primary_shift = aligned.place(primary, offset, reference);
        let Some(other) = other else { continue };
        match same_rank[&rank] {
            Some(same_rank) => {
                let on_primary = same_rank.ns.saturating_add(primary_shift);
                let aligned_offset = offset.map(|_| Offset {
                    ns: on_primary,
                    ..same_rank
                });
                aligned.record(other, aligned_offset, on_primary);
            }
            // One host's two Unix clocks: the rank's VizTracer trace moves
            // with its torch.profiler trace.
            None if other.unix_clock() && primary.unix_clock() => {
                aligned.record(other, None, primary_shift);
            }
            None => {
                aligned.place(other, None, reference);
            }
        }
    }
    let traces = ranks.values().flat_map(RankFiles::traces);
    aligned.earliest = traces.map(|t| aligned.start(t)).min().unwrap_or(0);
    // The digests' times go where the timeline puts the traces.
    for files in ranks.values_mut() {
        if let Some(kineto) = &mut files.kineto {
            let shift = aligned.shift_of(kineto);
            if let Some(digest) = &mut kineto.digest {
                digest.shift_clock(shift);
            }
        }
    }
    aligned
}

/// The rank whose primary trace is the reference clock: the lowest rank's
/// with GPU collective kernels, whose ends align every rank that has them
/// (a VizTracer-only rank 0 beside NCCL ranks would align none); else the
/// lowest rank's.
fn reference_rank(ranks: &BTreeMap<u32, RankFiles>) -> u32 {
    let has_kernels = |files: &RankFiles| !files.primary_first().0.marks.gpu_ends.is_empty();
    let (&rank, _) = ranks
        .iter()
        .find(|(_, files)| has_kernels(files))
        .or_else(|| ranks.iter().next())
        .expect("a rank");
    rank
}

/// Writes `trace.json.gz`: each trace's rows on the reference clock, each
/// rank one process; returns its path.
fn write_timeline(
    ranks: &BTreeMap<u32, RankFiles>,
    aligned: &Aligned,
    report: &mut Report,
    out: &Path,
    config: &AnalysisConfig,
) -> Result<PathBuf, ImportError> {
    let summaries: BTreeMap<u32, RankSummary> =
        report.ranks.iter().map(|r| (r.rank, r.clone())).collect();
    let mut file = TraceFile::create(out, config.trace_max_stages)?;
    for (rank, files) in ranks {
        for trace in files.traces() {
            let summary = RankSummary {
                started_s: aligned.started_s(trace),
                ..summaries[rank].clone()
            };
            let events = trace
                .timeline
                .events(&summary, config.trace_max_stages)
                .map_err(|source| ImportError::Timeline {
                    trace: trace.source.clone(),
                    source,
                })?;
            file.add(*rank, events)?;
        }
    }
    Ok(file.finish(report)?)
}

/// Places by `layout` each rank its trace's process groups did not place.
fn place(
    ranks: &mut BTreeMap<u32, RankKernels>,
    layout: &ParallelLayout,
    world_size: u32,
) -> Result<(), ImportError> {
    if layout.ranks() != u64::from(world_size) {
        return Err(ImportError::Layout {
            layout: layout.clone(),
            world_size,
        });
    }
    for (rank, kernels) in ranks {
        if let Some(input) = kernels.input.as_mut().filter(|i| i.parallel.is_empty()) {
            input.parallel = layout.coordinates(*rank);
        }
    }
    Ok(())
}

/// The trace files among `paths` (in name order within a directory), and
/// the paths refused: what is not a regular file (a FIFO would block the
/// read), cannot be read, or is a report of rankscope's own.
fn trace_files(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<SkippedInput>), ImportError> {
    let named_trace = |path: &Path| {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        (name.ends_with(".json") || name.ends_with(".json.gz")) && name != REPORT_JSON
    };
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    let mut take = |path: PathBuf, skipped: &mut Vec<SkippedInput>| match std::fs::metadata(&path) {
        Ok(meta) if meta.is_file() => files.push(path),
        Ok(_) => skipped.push(SkippedInput {
            source: path.display().to_string(),
            reason: "not a regular file".into(),
        }),
        Err(error) => skipped.push(SkippedInput {
            source: path.display().to_string(),
            reason: format!("cannot be read: {error}"),
        }),
    };
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| ImportError::Read {
                path: path.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| named_trace(p))
                .collect();
            found.sort();
            for file in found {
                take(file, &mut skipped);
            }
        } else {
            take(path.clone(), &mut skipped);
        }
    }
    if files.is_empty() && skipped.is_empty() {
        return Err(ImportError::NoTraces {
            paths: paths.to_vec(),
        });
    }
    Ok((files, skipped))
}

/// One trace, read and digested.
struct ReadTrace {
    /// The file.
    source: String,
    rank: u32,
    world_size: Option<u32>,
    /// Whether it is VizTracer's (else torch.profiler's).
    viztracer: bool,
    /// The host that wrote it, where it says.
    host: Option<String>,
    /// Whether it said the Unix time its clock counts from.
    base_known: bool,
    /// Its kernels, operators and collectives: `None` for a VizTracer
    /// trace, which has none (and once taken for the report).
    digest: Option<RankKernels>,
    /// Its Python functions (a VizTracer trace's).
    functions: Vec<RankFunction>,
    /// What the read cut: counted for a VizTracer trace here (a
    /// torch.profiler trace's is in its digest).
    python_cut: u64,
    /// Its collectives' times, to align its clock by.
    marks: CollectiveMarks,
    /// Its rows for `trace.json.gz`.
    timeline: Timeline,
}

impl ReadTrace {
    /// A VizTracer trace's digest: its `torch.distributed` calls as the
    /// host's collective calls, on the reference clock (`shift_ns` back),
    /// for a rank with no torch.profiler trace.
    fn host_calls_digest(&self, shift_ns: i64) -> RankKernels {
        let mut digest = RankKernels::of_host_calls(self.rank, self.marks.host_calls());
        digest.shift_clock(shift_ns);
        digest
    }

    /// Whether its times are Unix times: torch.profiler's always,
    /// VizTracer's where its metadata gives its base (0.16 on).
    fn unix_clock(&self) -> bool {
        !self.viztracer || self.base_known
    }

    /// The kind of trace, in words.
    fn kind(&self) -> &'static str {
        if self.viztracer {
            "VizTracer"
        } else {
            "torch.profiler"
        }
    }
}

/// Reads and digests every file, one per core at a time; each result is a
/// digest or why the file was refused. The digests share one copy of each
/// name (many ranks name the same kernels), within the options' budget.
/// `limits`: the read's, and the rows of each kind kept for the timeline,
/// written into `spill`.
fn read_all(
    files: &[PathBuf],
    spill: &Path,
    options: &ImportOptions,
    limits: (TraceLimits, u64),
    max_world_size: u32,
    progress: &dyn Progress,
) -> Vec<Result<ReadTrace, String>> {
    let next = AtomicUsize::new(0);
    let names = SharedNames::within(options.name_budget_bytes);
    let results: Mutex<Vec<Option<Result<ReadTrace, String>>>> =
        Mutex::new((0..files.len()).map(|_| None).collect());
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(file) = files.get(i) else { break };
        let read = read_one(file, spill, limits, max_world_size, &names);
        results.lock().unwrap_or_else(PoisonError::into_inner)[i] = Some(read);
        progress.advance(1);
    };
    let workers = options.jobs.clamp(1, files.len().max(1));
    std::thread::scope(|scope| {
        // Where a thread cannot be had, the work left is done here.
        for _ in 1..workers {
            let _ = std::thread::Builder::new()
                .name("rankscope-import".into())
                .spawn_scoped(scope, work);
        }
        work();
    });
    results
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("not read".into())))
        .collect()
}

/// Reads one trace and digests it. Its rank comes from its
/// `distributedInfo`, else from its name; a trace whose two disagree, or
/// that claims a world (or a rank) past `max_world_size`, is refused.
fn read_one(
    file: &Path,
    spill: &Path,
    (limits, timeline_rows): (TraceLimits, u64),
    max_world_size: u32,
    names: &SharedNames,
) -> Result<ReadTrace, String> {
    let limits = TraceLimits {
        cpu_spans: true,
        ..limits
    };
    let trace = kineto::read_trace(file, &limits)
        .map_err(|e: TraceError| rankscope_common::error::Chain(&e).to_string())?;
    if let Some(field) = &trace.invalid_info {
        return Err(format!("its distributedInfo has an unusable {field}"));
    }
    let named = kineto::rank_from_file_name(file);
    let rank = match (trace.rank, named) {
        (Some(claimed), Some(named)) if claimed != named => {
            return Err(format!(
                "its distributedInfo says rank {claimed}, its name rank {named}: which rank it \
                 is cannot be told"
            ))
        }
        (Some(rank), _) | (None, Some(rank)) => rank,
        (None, None) => {
            return Err(
                "no rank: neither a distributedInfo in the trace nor `rank<N>` in its \
                        name"
                    .into(),
            )
        }
    };
    let world = trace.world_size.unwrap_or(rank.saturating_add(1));
    if world > max_world_size || rank >= max_world_size {
        return Err(format!(
            "it claims rank {rank} of {world}: past max_world_size ({max_world_size})"
        ));
    }
    if rank >= world {
        return Err(format!("rank {rank} is outside its world of {world} ranks"));
    }
    let source = file.display().to_string();
    let calls = python::calls(&trace);
    let max_rows = usize::try_from(timeline_rows).unwrap_or(usize::MAX);
    Ok(ReadTrace {
        rank,
        world_size: trace.world_size,
        viztracer: trace.viztracer,
        host: trace.host.clone(),
        base_known: trace.base_time_ns.is_some(),
        digest: (!trace.viztracer).then(|| {
            RankKernels::digest(
                (rank, 1),
                source.clone(),
                &trace,
                &trace.analysed_activities(),
                names,
            )
        }),
        functions: calls.functions,
        python_cut: if trace.viztracer { trace.cut.rows } else { 0 },
        marks: CollectiveMarks::of(&trace),
        timeline: Timeline::of(&trace, &calls.depth, max_rows, spill)
            .map_err(|e| format!("its rows for the timeline: {e}"))?,
        source,
    })
}

/// What the report says of the inputs beside the ranks' traces.
struct Inputs<'a> {
    paths: &'a [PathBuf],
    world_size: u32,
    skipped: Vec<SkippedInput>,
    aligned: &'a Aligned,
}

/// The report of the ranks' traces: a session of no stages, with the
/// kernel and Python sections and a summary per rank.
fn report(
    inputs: Inputs<'_>,
    ranks: &mut BTreeMap<u32, RankFiles>,
    config: &AnalysisConfig,
    options: &ImportOptions,
) -> Result<Report, ImportError> {
    let Inputs {
        paths,
        world_size,
        skipped,
        aligned,
    } = inputs;
    // A rank's torch.profiler digest; where no rank has one, its VizTracer
    // trace's collective calls (the k-th call of one rank is compared with
    // the k-th of another: a torch.profiler trace's also holds calls
    // Python made none of, DDP's).
    let any_kineto = ranks.values().any(|f| f.kineto.is_some());
    let mut digests: BTreeMap<u32, RankKernels> = ranks
        .iter_mut()
        .filter_map(
            |(&rank, files)| match (&mut files.kineto, &files.viztracer) {
                (Some(kineto), _) => Some((rank, kineto.digest.take()?)),
                (None, Some(viztracer))
                    if !any_kineto && !viztracer.marks.python_calls.is_empty() =>
                {
                    Some((
                        rank,
                        viztracer.host_calls_digest(aligned.shift_of(viztracer)),
                    ))
                }
                (None, _) => None,
            },
        )
        .collect();
    if let Some(layout) = &options.layout {
        place(&mut digests, layout, world_size)?;
    }
    let gathered: Gathered = Gathered {
        world_size,
        missing: (0..world_size).filter(|r| !ranks.contains_key(r)).collect(),
        ..Gathered::default()
    };
    let mut report = analyze(&gathered, config);
    let session = &mut report.session;
    session.id = "import".into();
    session.name = paths
        .first()
        .and_then(|p| p.file_name())
        .map_or_else(|| "import".into(), |n| n.to_string_lossy().into_owned());
    let kinds = (
        ranks.values().any(|f| f.kineto.is_some()),
        ranks.values().any(|f| f.viztracer.is_some()),
    );
    session.launcher = match kinds {
        (true, true) => "torch.profiler, viztracer",
        (false, true) => "viztracer",
        _ => "torch.profiler",
    }
    .into();
    session.transport = TransportName::Import;
    if aligned.across_ranks {
        session.clock_sync = ClockSync::Collectives;
    }
    session.ranks_reporting = ranks.keys().copied().collect();
    session.skipped = skipped;
    let gpu_windows = digests
        .values()
        .flat_map(|r| r.gpu_time.iter().map(|g| g.window_s));
    let timelines = ranks
        .values()
        .flat_map(RankFiles::traces)
        .map(|t| t.timeline.span_s());
    session.duration_s = gpu_windows.chain(timelines).fold(0.0, f64::max);
    report.ranks = rank_summaries(ranks, &digests, aligned);
    let functions: Vec<(u32, &[RankFunction])> = ranks
        .iter()
        .filter_map(|(&rank, files)| Some((rank, files.viztracer.as_ref()?.functions.as_slice())))
        .collect();
    report.python_functions = across_ranks(&functions);
    let python_stragglers = crate::analysis::python::stragglers(&functions, config.stragglers);
    for trace in ranks.values().flat_map(RankFiles::traces) {
        if trace.python_cut > 0 {
            report.session.notices.push(Notice {
                message: format!(
                    "{} Python calls of {} past --max-rows were left out of python_functions",
                    trace.python_cut, trace.source
                ),
                ranks: vec![trace.rank],
            });
        }
    }
    let rule = config.stragglers;
    let analysis = analyze_kernels(digests.into_values().collect(), rule);
    let walls = report
        .ranks
        .iter()
        .map(|r| (r.rank, r.duration_s))
        .collect();
    report.time_account = account::of_traces(&walls, &analysis.traced, &analysis.collectives);
    add_kernels(&mut report, analysis.with_stragglers(python_stragglers));
    Ok(report)
}

/// A summary per rank: its place in the job, and its clock against the
/// reference's where collectives aligned it.
fn rank_summaries(
    ranks: &BTreeMap<u32, RankFiles>,
    digests: &BTreeMap<u32, RankKernels>,
    aligned: &Aligned,
) -> Vec<RankSummary> {
    ranks
        .iter()
        .map(|(&rank, files)| {
            let primary = files.primary_first().0;
            let offset = aligned.offsets.get(&primary.source).copied().flatten();
            RankSummary {
                rank,
                host: files
                    .traces()
                    .find_map(|t| t.host.clone())
                    .unwrap_or_default(),
                clock_offset_ns: offset.map(|o| o.ns),
                clock_offset_spread_ns: offset.map(|o| o.spread_ns),
                started_s: aligned.started_s(primary),
                parallel: digests
                    .get(&rank)
                    .and_then(|d| d.input.as_ref())
                    .map(|i| i.parallel.clone())
                    .unwrap_or_default(),
                duration_s: files
                    .traces()
                    .map(|t| t.timeline.span_s())
                    .fold(0.0, f64::max),
                ..RankSummary::default()
            }
        })
        .collect()
}
