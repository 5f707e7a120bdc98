//! Telemetry sampling on a thread of its own, never on the caller's: GPU
//! readings (NVML or simulated) and host readings at their own intervals,
//! into ring buffers bounded by `max_data_points`, plus the optional live
//! display. [`Telemetry`] owns what outlives a session (the opened GPU
//! reader) and starts a [`Sampler`] per session.

mod display;
pub(crate) mod gpu;
mod host;
pub(crate) mod nvml;
mod reader;
pub(crate) mod select;
mod simulated;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::config::DisplayRanks;
use rankscope_common::env::RankEnv;
use rankscope_common::error::Chain;
use rankscope_common::payload::{GpuMeta, GpuSource, SamplerStats};
use rankscope_common::table::{EventRecord, GpuSampleRecord, HostSampleRecord, Overhead, Table};
use rankscope_common::window::GpuStatus;
use rankscope_common::Config;

use crate::notice::{notice, spawn_with_notices};
use crate::recorder::Recorder;
use crate::stop::StopSignal;
use crate::sync::{join_within, lock, Joined};
use host::HostReader;
use reader::{GpuEvent, GpuReader, SharedGpuReader};

/// Bytes in a MiB.
const MIB: f64 = (1u64 << 20) as f64;

/// How long a session's end waits for its sampler's last reading.
const HALT_WITHIN: Duration = Duration::from_secs(5);

/// A rank's telemetry: the GPU reader (opened once, at the first session)
/// and the settings of its sampler.
pub(crate) struct Telemetry {
    config: Config,
    env: RankEnv,
    gpu: OnceLock<Option<OpenedGpus>>,
    /// The GPUs' latest readings, one row each, as the sampler last took
    /// them: what a live status shows.
    latest_gpus: Arc<Mutex<Vec<GpuSampleRecord>>>,
}

/// The GPU reader, once open, and what it said of the GPUs as it opened:
/// read without the reader's lock, which a reading holds across driver
/// calls (a header built while one hangs does not wait for it).
struct OpenedGpus {
    reader: SharedGpuReader,
    description: GpuDescription,
    /// A wait for the reader ran out (a reading that does not return).
    wedged: AtomicBool,
}

/// What the payload header says of a rank's GPUs.
#[derive(Clone)]
pub(crate) struct GpuDescription {
    pub(crate) source: GpuSource,
    pub(crate) devices: Vec<GpuMeta>,
    pub(crate) selection: String,
}

impl Telemetry {
    pub(crate) fn new(config: &Config, env: &RankEnv) -> Self {
        Telemetry {
            config: config.clone(),
            env: env.clone(),
            gpu: OnceLock::new(),
            latest_gpus: Arc::default(),
        }
    }

    /// The GPUs' latest readings, and whether they are simulated.
    pub(crate) fn latest_gpus(&self) -> (Vec<GpuStatus>, bool) {
        let described = self.describe_gpus();
        let simulated = described.source == GpuSource::Simulated;
        let devices = described.devices;
        let gpus = lock(&self.latest_gpus)
            .iter()
            .map(|row| GpuStatus {
                index: devices.get(row.gpu as usize).map_or(row.gpu, |d| d.index),
                util_pct: row.util_gpu_pct,
                temperature_c: row.temperature_c,
                memory_used_mib: row.memory_used_bytes.map(|b| b as f64 / MIB),
            })
            .collect();
        (gpus, simulated)
    }

    /// The GPU reader, opened on first use; says once why GPU telemetry is off.
    fn gpu(&self) -> Option<&OpenedGpus> {
        self.gpu
            .get_or_init(|| match gpu::open(&self.config, &self.env) {
                Ok(reader) => reader.map(|reader| OpenedGpus {
                    description: GpuDescription {
                        source: reader.source(),
                        devices: reader.devices().to_vec(),
                        selection: reader.selection().to_string(),
                    },
                    reader: Arc::new(Mutex::new(reader)),
                    wedged: Default::default(),
                }),
                Err(reason) => {
                    notice!("GPU telemetry off: {}", Chain(&reason));
                    None
                }
            })
            .as_ref()
    }

    /// Opens the GPUs now (NVML's start can take a while: before a session's
    /// clock starts).
    pub(crate) fn prepare(&self) {
        self.gpu();
    }

    /// The locked GPU reader, where there is one and it is free within
    /// `wait`: a reading holds it across driver calls, and one that never
    /// returns (a wedged driver) would hold the caller for good. Once a
    /// wait ran out, later calls do not wait until the reader is free again.
    pub(crate) fn lock_gpu_within(
        &self,
        wait: Duration,
    ) -> Option<MutexGuard<'_, Box<dyn GpuReader>>> {
        let gpu = self.gpu()?;
        let until = match gpu.wedged.load(Ordering::Relaxed) {
            true => Instant::now(),
            false => Instant::now() + wait,
        };
        loop {
            match gpu.reader.try_lock() {
                Ok(reader) => {
                    gpu.wedged.store(false, Ordering::Relaxed);
                    return Some(reader);
                }
                Err(TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(TryLockError::WouldBlock) => {
                    gpu.wedged.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        }
    }

    /// The rank's GPUs, for the payload header, as the reader opened.
    pub(crate) fn describe_gpus(&self) -> GpuDescription {
        match self.gpu() {
            Some(gpu) => gpu.description.clone(),
            None => GpuDescription {
                source: GpuSource::None,
                devices: Vec::new(),
                selection: String::new(),
            },
        }
    }

    /// Starts a session's sampler, if there is anything to sample.
    pub(crate) fn start(&self, recorder: &Arc<Recorder>) -> Option<Sampler> {
        let config = &self.config;
        let gpu = self.gpu().map(|g| Arc::clone(&g.reader));
        let host = config.collect_host.then(HostReader::new);
        if gpu.is_none() && host.is_none() {
            return None;
        }
        let displays = config.display_ranks == DisplayRanks::All || self.env.rank == 0;
        let schedule = Schedule {
            gpu: Duration::from_secs_f64(config.gpu_interval_s),
            host: Duration::from_secs_f64(config.host_interval_s),
            pcie: config.pcie_interval_s.map(Duration::from_secs_f64),
            display: (config.live_display && displays)
                .then(|| Duration::from_secs_f64(config.display_interval_s)),
        };
        let sampled = Sampled {
            recorder: Arc::clone(recorder),
            rank: self.env.rank,
            latest_gpus: Arc::clone(&self.latest_gpus),
        };
        match Sampler::start(sampled, gpu, host, schedule) {
            Ok(sampler) => Some(sampler),
            Err(e) => {
                notice!("telemetry off: cannot start its thread: {e}");
                None
            }
        }
    }
}

/// What the sampler thread writes into: the rank's recording, the rank
/// number for its notices and display, and the GPUs' latest readings.
struct Sampled {
    recorder: Arc<Recorder>,
    rank: u32,
    latest_gpus: Arc<Mutex<Vec<GpuSampleRecord>>>,
}

/// When each reading is due.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    gpu: Duration,
    host: Duration,
    pcie: Option<Duration>,
    display: Option<Duration>,
}

/// The running sampler thread of one session.
pub(crate) struct Sampler {
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<SamplerStats>>,
}

impl Sampler {
    /// Starts sampling; the thread takes one reading of each kind at once.
    fn start(
        sampled: Sampled,
        gpu: Option<SharedGpuReader>,
        host: Option<HostReader>,
        schedule: Schedule,
    ) -> std::io::Result<Sampler> {
        let signal = Arc::new(StopSignal::default());
        let thread_signal = Arc::clone(&signal);
        let thread = spawn_with_notices("rankscope-sampler", move || {
            run(&sampled, gpu, host, schedule, &thread_signal)
        })?;
        Ok(Sampler {
            signal,
            thread: Some(thread),
        })
    }

    /// Takes a last reading of each kind, stops the thread and says what
    /// the sampling cost.
    pub(crate) fn stop(mut self) -> SamplerStats {
        self.halt()
    }

    fn halt(&mut self) -> SamplerStats {
        self.signal.stop();
        let Some(thread) = self.thread.take() else {
            return SamplerStats::default();
        };
        match join_within(thread, HALT_WITHIN) {
            Joined::Returned(stats) => stats,
            Joined::Panicked => {
                notice!("the telemetry sampler panicked; its readings so far are kept");
                SamplerStats::default()
            }
            Joined::Detached => {
                notice!(
                    "the telemetry sampler did not stop within {} s (a GPU driver call that \
                     does not return?): it is left running, and its readings so far are kept",
                    HALT_WITHIN.as_secs()
                );
                SamplerStats::default()
            }
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// A timer that is due every `period`.
struct Every {
    period: Duration,
    next: Instant,
}

impl Every {
    fn new(period: Duration, start: Instant) -> Self {
        Every {
            period,
            next: start,
        }
    }

    /// Whether it is due at `now`; if so, schedules the next time.
    fn due(&mut self, now: Instant) -> bool {
        if now < self.next {
            return false;
        }
        self.next += self.period;
        if self.next <= now {
            // Fell behind (a slow reading): skip, do not burst.
            self.next = now + self.period;
        }
        true
    }
}

fn run(
    sampled: &Sampled,
    gpu: Option<SharedGpuReader>,
    mut host: Option<HostReader>,
    schedule: Schedule,
    signal: &StopSignal,
) -> SamplerStats {
    let mut readings = Readings::new(&schedule, Instant::now());
    loop {
        let stopping = signal.is_stopped();
        let now = Instant::now();
        if let Some(reader) = &gpu {
            if readings.gpu_timer.due(now) || stopping {
                readings.read_gpu(sampled, reader, now);
            }
        }
        if let Some(reader) = host.as_mut() {
            if readings.host_timer.due(now) || stopping {
                readings.read_host(sampled, reader);
            }
        }
        if readings.display_timer.as_mut().is_some_and(|t| t.due(now)) {
            readings.show_line(sampled, gpu.as_ref());
        }
        // The stage events recorded since the last reading become rows here,
        // off the recording threads.
        sampled.recorder.pair_events();
        if stopping {
            return readings.finish(sampled);
        }
        let next = readings.next_due(gpu.is_some(), host.is_some());
        signal.wait(next.saturating_duration_since(Instant::now()));
    }
}

/// The sampler thread's state between readings: when each kind is due,
/// the last readings (for the display line) and what reading cost.
struct Readings {
    gpu_timer: Every,
    host_timer: Every,
    pcie_timer: Option<Every>,
    display_timer: Option<Every>,
    gpu_rows: Vec<GpuSampleRecord>,
    events: Vec<GpuEvent>,
    last_host: Option<HostSampleRecord>,
    gpu_cost: Cost,
    host_cost: Cost,
}

impl Readings {
    /// Every kind due at `start` (the display line one period later).
    fn new(schedule: &Schedule, start: Instant) -> Self {
        Readings {
            gpu_timer: Every::new(schedule.gpu, start),
            host_timer: Every::new(schedule.host, start),
            pcie_timer: schedule.pcie.map(|p| Every::new(p, start)),
            display_timer: schedule.display.map(|d| Every::new(d, start + d)),
            gpu_rows: Vec::new(),
            events: Vec::new(),
            last_host: None,
            gpu_cost: Cost::default(),
            host_cost: Cost::default(),
        }
    }

    /// Reads the GPUs (PCIe too when due) and records the readings.
    fn read_gpu(&mut self, sampled: &Sampled, reader: &SharedGpuReader, now: Instant) {
        let pcie = self.pcie_timer.as_mut().is_some_and(|t| t.due(now));
        // The stages are read before the reader is locked: never hold the
        // reader while waiting for a thread buffer.
        let follows = lock(reader).follows_stages();
        let open_stages = if follows {
            sampled.recorder.open_stage_names()
        } else {
            Vec::new()
        };
        let mut reader = lock(reader);
        self.gpu_rows.clear();
        let started = Instant::now();
        reader.sample(
            sampled.recorder.now_ns(),
            &open_stages,
            pcie,
            &mut self.gpu_rows,
            &mut self.events,
        );
        self.gpu_cost.add(started.elapsed());
        drop(reader);
        lock(&sampled.latest_gpus).clone_from(&self.gpu_rows);
        record_gpu(sampled, &self.gpu_rows, &mut self.events);
    }

    /// Reads the host and records the reading.
    fn read_host(&mut self, sampled: &Sampled, reader: &mut HostReader) {
        let started = Instant::now();
        let row = reader.sample(sampled.recorder.now_ns());
        self.host_cost.add(started.elapsed());
        record_host(&sampled.recorder, &row);
        self.last_host = Some(row);
    }

    /// Prints the live display line from the last readings.
    fn show_line(&self, sampled: &Sampled, gpu: Option<&SharedGpuReader>) {
        let text = match gpu {
            Some(reader) => {
                let reader = lock(reader);
                display::line(
                    sampled.rank,
                    reader.source(),
                    reader.devices(),
                    &self.gpu_rows,
                    self.last_host.as_ref(),
                )
            }
            None => match &self.last_host {
                Some(host) => display::line(sampled.rank, Default::default(), &[], &[], Some(host)),
                None => return,
            },
        };
        show(&text);
    }

    /// When the next reading is due. Only the timers of what is sampled
    /// count (an idle timer would be always due); PCIe readings ride on GPU
    /// readings, so their timer waits for those.
    fn next_due(&self, gpu: bool, host: bool) -> Instant {
        [
            gpu.then_some(self.gpu_timer.next),
            host.then_some(self.host_timer.next),
            self.display_timer.as_ref().map(|t| t.next),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the sampler runs only with something to sample")
    }

    /// The sampler's own cost recorded, and what reading cost.
    fn finish(self, sampled: &Sampled) -> SamplerStats {
        if let Some(cpu_ms) = thread_cpu_ms() {
            sampled
                .recorder
                .record_overhead(Overhead::SamplerCpuMs, cpu_ms);
        }
        let (gpu_readings, gpu_read_ns_mean, gpu_read_ns_max) = self.gpu_cost.summary();
        let (host_readings, host_read_ns_mean, host_read_ns_max) = self.host_cost.summary();
        SamplerStats {
            gpu_readings,
            gpu_read_ns_mean,
            gpu_read_ns_max,
            host_readings,
            host_read_ns_mean,
            host_read_ns_max,
        }
    }
}

/// The sampler's own cost: wall time per reading, for the payload header.
#[derive(Default)]
struct Cost {
    count: u64,
    total: Duration,
    max: Duration,
}

impl Cost {
    fn add(&mut self, took: Duration) {
        self.count += 1;
        self.total += took;
        self.max = self.max.max(took);
    }

    /// Readings, mean and longest wall time in nanoseconds.
    fn summary(&self) -> (u64, u64, u64) {
        let mean = self.total.as_nanos() as u64 / self.count.max(1);
        (self.count, mean, self.max.as_nanos() as u64)
    }
}

/// CPU time this thread has used, milliseconds, where the system says.
fn thread_cpu_ms() -> Option<f64> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid timespec for the call to fill.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (read == 0).then(|| time.tv_sec as f64 * 1e3 + time.tv_nsec as f64 / 1e6)
}

/// Prints a live display line with one write, so that the lines of ranks
/// sharing a terminal or pipe do not interleave.
fn show(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{text}\n").as_bytes());
}

/// Appends `row` to a ring of at most `max` rows; returns whether the oldest
/// row was dropped to make room.
fn push_ring<T>(ring: &mut VecDeque<T>, row: T, max: usize) -> bool {
    let full = ring.len() >= max;
    if full {
        ring.pop_front();
    }
    ring.push_back(row);
    full
}

fn record_gpu(sampled: &Sampled, rows: &[GpuSampleRecord], events: &mut Vec<GpuEvent>) {
    let recorder = &sampled.recorder;
    let max = recorder.max_rows();
    let dropped = recorder
        .with_thread(|t| {
            rows.iter()
                .map(|row| u64::from(push_ring(&mut t.records.gpu_samples, row.clone(), max)))
                .sum()
        })
        .unwrap_or(0);
    recorder.count_dropped(Table::GpuSamples, dropped);
    for event in events.drain(..) {
        notice!("{} {}", event.name, event.payload);
        recorder.record_row(Table::Events, |t, ticks| {
            let name = t.names.intern(event.name);
            t.records.events.push_back(EventRecord {
                ts_ns: ticks,
                name,
                payload: Some(event.payload.to_string()),
            });
        });
    }
}

fn record_host(recorder: &Recorder, row: &HostSampleRecord) {
    let max = recorder.max_rows();
    let dropped = recorder
        .with_thread(|t| push_ring(&mut t.records.host_samples, row.clone(), max))
        .unwrap_or(false);
    recorder.count_dropped(Table::HostSamples, u64::from(dropped));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_newest_rows() {
        let mut ring = VecDeque::new();
        let dropped: usize = (0..5)
            .map(|i| usize::from(push_ring(&mut ring, i, 3)))
            .sum();
        assert_eq!(dropped, 2);
        assert_eq!(ring, [2, 3, 4]);
    }

    #[test]
    fn a_late_timer_skips_instead_of_bursting() {
        let start = Instant::now();
        let mut timer = Every::new(Duration::from_millis(10), start);
        assert!(timer.due(start));
        assert!(!timer.due(start + Duration::from_millis(5)));
        assert!(timer.due(start + Duration::from_millis(55)));
        assert!(
            !timer.due(start + Duration::from_millis(56)),
            "no catch-up burst"
        );
        assert_eq!(timer.next, start + Duration::from_millis(65));
    }
}
