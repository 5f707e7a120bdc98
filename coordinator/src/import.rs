//! `rankscope import`: per-rank torch.profiler / Kineto traces into one
//! report, the same files an in-job report has. Traces are read as
//! streams, `jobs` at a time, each reduced to its rank's digest (kernel and
//! operator totals, GPU times, collective calls) before the next: memory is
//! set by the row budget, the jobs and the ranks' digests, not by the size
//! of the traces.

use crate::AnalysisConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};

use rankscope_common::gather::{Gathered, ReportFiles};
use rankscope_common::kineto::{self, TraceError, TraceLimits};
use rankscope_common::parallel::ParallelLayout;
use rankscope_common::payload::TransportName;

use crate::analysis::kernels::{analyze_kernels, RankKernels};
use crate::analysis::shared_names::SharedNames;
use crate::analysis::{add_kernels, analyze};
use crate::model::{Notice, Report, SkippedInput};
use crate::progress::{Progress, Silent};
use crate::report::{create_dir, write_reports, WriteError, REPORT_JSON};

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
}

/// A written report of imported traces.
#[derive(Debug)]
pub struct Imported {
    /// The analysed report.
    pub report: Report,
    /// The files written.
    pub files: ReportFiles,
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
        session.ranks_missing.is_empty() && session.skipped.is_empty() && !cut
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
    let mut ranks: BTreeMap<u32, RankKernels> = BTreeMap::new();
    let mut worlds = std::collections::BTreeSet::new();
    let mut world_size = 0;
    progress.begin("reading traces", files.len() as u64);
    let reads = read_all(&files, options, config.max_world_size, progress);
    for (file, read) in files.iter().zip(reads) {
        let source = file.display().to_string();
        match read {
            Ok(read) if ranks.contains_key(&read.digest.rank) => skipped.push(SkippedInput {
                reason: format!(
                    "a second trace for rank {} (the first: {})",
                    read.digest.rank,
                    ranks[&read.digest.rank]
                        .input
                        .as_ref()
                        .map_or("", |i| i.source.as_str())
                ),
                source,
            }),
            Ok(read) => {
                worlds.extend(read.world_size);
                world_size = world_size
                    .max(read.world_size.unwrap_or(0))
                    .max(read.digest.rank + 1);
                ranks.insert(read.digest.rank, read.digest);
            }
            Err(reason) => skipped.push(SkippedInput { source, reason }),
        }
    }
    if ranks.is_empty() {
        return Err(ImportError::NothingUsable { skipped });
    }
    if let Some(layout) = &options.layout {
        place(&mut ranks, layout, world_size)?;
    }
    let mut report = report(paths, ranks, world_size, skipped, config);
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
    let files = write_reports(&report, out)?;
    Ok(Imported { report, files })
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
    digest: RankKernels,
    world_size: Option<u32>,
}

/// Reads and digests every file, one per core at a time; each result is a
/// digest or why the file was refused. The digests share one copy of each
/// name (many ranks name the same kernels), within the options' budget.
fn read_all(
    files: &[PathBuf],
    options: &ImportOptions,
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
        let read = read_one(file, &options.limits, max_world_size, &names);
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
    limits: &TraceLimits,
    max_world_size: u32,
    names: &SharedNames,
) -> Result<ReadTrace, String> {
    let trace = kineto::read_trace(file, limits)
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
    Ok(ReadTrace {
        world_size: trace.world_size,
        digest: RankKernels::digest(
            (rank, 1),
            file.display().to_string(),
            &trace,
            &trace.analysed_activities(),
            names,
        ),
    })
}

/// The report of the digested ranks: a session of no stages, with the
/// kernel sections.
fn report(
    paths: &[PathBuf],
    ranks: BTreeMap<u32, RankKernels>,
    world_size: u32,
    skipped: Vec<SkippedInput>,
    config: &AnalysisConfig,
) -> Report {
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
    session.launcher = "torch.profiler".into();
    session.transport = TransportName::Import;
    session.ranks_reporting = ranks.keys().copied().collect();
    session.skipped = skipped;
    session.duration_s = ranks
        .values()
        .flat_map(|r| r.gpu_time.iter().map(|g| g.window_s))
        .fold(0.0, f64::max);
    let rule = config.stragglers;
    add_kernels(
        &mut report,
        analyze_kernels(ranks.into_values().collect(), rule),
    );
    report
}
