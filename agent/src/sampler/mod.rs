//! Telemetry sampling on a thread of its own, never on the caller's: GPU
//! readings (NVML or simulated) and host readings at their own intervals,
//! into ring buffers bounded by `max_data_points`, plus the optional live
//! display.

mod display;
pub(crate) mod gpu;
mod host;
pub(crate) mod nvml;
pub(crate) mod select;
mod simulated;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rankscope_common::payload::SamplerStats;
use rankscope_common::table::{GpuSampleRow, HostSampleRow, Table};

use crate::profiler::Inner;
use crate::recorder::EventRecord;
pub(crate) use gpu::SharedGpuReader;
pub(crate) use host::HostReader;

/// When each reading is due.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    pub(crate) gpu: Duration,
    pub(crate) host: Duration,
    pub(crate) pcie: Option<Duration>,
    pub(crate) display: Option<Duration>,
}

/// Asks the sampler thread to stop.
#[derive(Default)]
struct StopSignal {
    stopped: Mutex<bool>,
    wake: Condvar,
}

/// The running sampler thread of one session.
pub(crate) struct Sampler {
    signal: Arc<StopSignal>,
    thread: Option<JoinHandle<SamplerStats>>,
}

impl Sampler {
    /// Starts sampling; the thread takes one reading of each kind at once.
    pub(crate) fn start(
        inner: Arc<Inner>,
        gpu: Option<SharedGpuReader>,
        host: Option<HostReader>,
        schedule: Schedule,
    ) -> std::io::Result<Sampler> {
        let signal = Arc::new(StopSignal::default());
        let thread_signal = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("rankscope-sampler".into())
            .spawn(move || run(&inner, gpu, host, schedule, &thread_signal))?;
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
        *self
            .signal
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = true;
        self.signal.wake.notify_all();
        let Some(thread) = self.thread.take() else {
            return SamplerStats::default();
        };
        thread.join().unwrap_or_else(|_| {
            eprintln!("rankscope: the telemetry sampler panicked; its readings so far are kept");
            SamplerStats::default()
        })
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
    inner: &Inner,
    gpu: Option<SharedGpuReader>,
    mut host: Option<HostReader>,
    schedule: Schedule,
    signal: &StopSignal,
) -> SamplerStats {
    let start = Instant::now();
    let mut gpu_timer = Every::new(schedule.gpu, start);
    let mut host_timer = Every::new(schedule.host, start);
    let mut pcie_timer = schedule.pcie.map(|p| Every::new(p, start));
    let mut display_timer = schedule.display.map(|d| Every::new(d, start + d));
    let mut gpu_rows = Vec::new();
    let mut events = Vec::new();
    let mut last_host: Option<HostSampleRow> = None;
    let mut gpu_cost = Cost::default();
    let mut host_cost = Cost::default();
    loop {
        let stopping = *signal.stopped.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        if let Some(reader) = &gpu {
            if gpu_timer.due(now) || stopping {
                let pcie = pcie_timer.as_mut().is_some_and(|t| t.due(now));
                // The stages are read before the reader is locked: never hold
                // the reader while waiting for a thread buffer.
                let follows = reader
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .follows_stages();
                let open_stages = if follows {
                    inner.recorder.open_stage_names()
                } else {
                    Vec::new()
                };
                let mut reader = reader.lock().unwrap_or_else(|e| e.into_inner());
                gpu_rows.clear();
                let started = Instant::now();
                reader.sample(
                    inner.now_ns(),
                    &open_stages,
                    pcie,
                    &mut gpu_rows,
                    &mut events,
                );
                gpu_cost.add(started.elapsed());
                drop(reader);
                record_gpu(inner, &gpu_rows, &mut events);
            }
        }
        if let Some(reader) = host.as_mut() {
            if host_timer.due(now) || stopping {
                let started = Instant::now();
                let row = reader.sample(inner.now_ns());
                host_cost.add(started.elapsed());
                record_host(inner, &row);
                last_host = Some(row);
            }
        }
        if display_timer.as_mut().is_some_and(|t| t.due(now)) {
            if let Some(reader) = &gpu {
                let reader = reader.lock().unwrap_or_else(|e| e.into_inner());
                let text = display::line(
                    inner.env.rank,
                    reader.source(),
                    reader.devices(),
                    &gpu_rows,
                    last_host.as_ref(),
                );
                show(&text);
            } else if let Some(host) = &last_host {
                let text = display::line(inner.env.rank, Default::default(), &[], &[], Some(host));
                show(&text);
            }
        }
        if stopping {
            let (gpu_readings, gpu_read_ns_mean, gpu_read_ns_max) = gpu_cost.summary();
            let (host_readings, host_read_ns_mean, host_read_ns_max) = host_cost.summary();
            return SamplerStats {
                gpu_readings,
                gpu_read_ns_mean,
                gpu_read_ns_max,
                host_readings,
                host_read_ns_mean,
                host_read_ns_max,
            };
        }
        // Only the timers of what is sampled: an idle timer would be always
        // due. PCIe readings ride on GPU readings, so their timer waits for those.
        let next = [
            gpu.as_ref().map(|_| gpu_timer.next),
            host.as_ref().map(|_| host_timer.next),
            display_timer.as_ref().map(|t| t.next),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("the sampler runs only with something to sample");
        let stopped = signal.stopped.lock().unwrap_or_else(|e| e.into_inner());
        let wait = next.saturating_duration_since(Instant::now());
        let _ = signal
            .wake
            .wait_timeout_while(stopped, wait, |stopped| !*stopped);
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

fn record_gpu(inner: &Inner, rows: &[GpuSampleRow], events: &mut Vec<gpu::GpuEvent>) {
    let max = inner.config.max_data_points;
    let dropped = inner.recorder.with_thread(|t| {
        rows.iter()
            .map(|row| u64::from(push_ring(&mut t.gpu_samples, row.clone(), max)))
            .sum()
    });
    inner.recorder.count_dropped(Table::GpuSamples, dropped);
    for event in events.drain(..) {
        eprintln!(
            "rankscope: rank {}: {} {}",
            inner.env.rank, event.name, event.payload
        );
        inner.record_row(Table::Events, |t, ts_ns| {
            let name = t.names.intern(event.name);
            t.events.push(EventRecord {
                ts_ns,
                name,
                payload: Some(event.payload.to_string()),
            });
        });
    }
}

fn record_host(inner: &Inner, row: &HostSampleRow) {
    let max = inner.config.max_data_points;
    let dropped = inner
        .recorder
        .with_thread(|t| push_ring(&mut t.host_samples, row.clone(), max));
    inner
        .recorder
        .count_dropped(Table::HostSamples, u64::from(dropped));
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
