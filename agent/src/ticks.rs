//! The recorder's clock. Every row holds nanoseconds since the session
//! started, on the monotonic clock. The hot paths (stages and the
//! `record_*` calls) read the processor's time-stamp counter instead where
//! it is invariant (it runs at one rate on every core, whatever the power
//! state) and the kernel keeps time by it: one `rdtsc` costs a few
//! nanoseconds, a monotonic clock reading about twenty. (Telemetry rows,
//! stamped on the sampler's thread, read the monotonic clock.) Ticks become
//! nanoseconds at a pairing pass (each sampler reading, a flush, the
//! session's end, a thread past its recorder's budget of event chunks): a
//! row's at the first pass after it, a stage's start and end at the pass
//! that pairs its end. The conversion is the line through two readings of
//! both clocks taken together: one at the session's start and one at the
//! pass. The line is exact at both ends; between them
//! a time is off by the jitter of reading the two clocks together (tens of
//! nanoseconds) plus however much the monotonic clock's rate changed over
//! the session (NTP adjusts it by parts per million). Elsewhere (other
//! processors, a kernel that distrusts the counter, some virtual machines)
//! ticks are the monotonic clock's nanoseconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::sync::lock;

/// The recorder's clock: the monotonic clock, the session's origin on it,
/// and the hot paths' ticks.
pub(crate) struct Clock {
    /// The monotonic clock's zero.
    epoch: Instant,
    /// Start of the running session, nanoseconds after `epoch`.
    origin_ns: AtomicU64,
    /// Whether ticks are the time-stamp counter's.
    tsc: bool,
    /// Both clocks read together at the session's start (or when the clock
    /// was made), where ticks are the counter's.
    anchor: Mutex<Anchor>,
}

/// A tick reading and a monotonic reading (nanoseconds after the epoch)
/// taken together.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    ticks: u64,
    ns: u64,
}

impl Clock {
    /// A clock on the time-stamp counter where it is invariant, else on
    /// the monotonic clock.
    pub(crate) fn new() -> Self {
        let mut clock = Self::monotonic();
        if tsc::trusted() {
            clock.tsc = true;
            *lock(&clock.anchor) = clock.read_anchor();
        }
        clock
    }

    /// A clock whose ticks are the monotonic clock's nanoseconds.
    pub(crate) fn monotonic() -> Self {
        Clock {
            epoch: Instant::now(),
            origin_ns: AtomicU64::new(0),
            tsc: false,
            anchor: Mutex::new(Anchor { ticks: 0, ns: 0 }),
        }
    }

    /// Nanoseconds since the session started, on the monotonic clock.
    #[inline(always)]
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch_ns()
            .saturating_sub(self.origin_ns.load(Ordering::Relaxed))
    }

    /// Makes now the session's start, for both clocks.
    pub(crate) fn start_session(&self) {
        if self.tsc {
            *lock(&self.anchor) = self.read_anchor();
        }
        self.origin_ns.store(self.epoch_ns(), Ordering::Relaxed);
    }

    /// A reading of the hot paths' clock (ticks), to convert with
    /// [`Clock::scale`].
    #[inline(always)]
    pub(crate) fn ticks(&self) -> u64 {
        match self.tsc {
            true => tsc::read(),
            false => self.epoch_ns(),
        }
    }

    /// About how many ticks `ns` nanoseconds last: the counter's rate
    /// measured over a millisecond (the monotonic clock's ticks are its
    /// nanoseconds).
    pub(crate) fn ticks_in(&self, ns: u64) -> u64 {
        if !self.tsc || ns == 0 {
            return ns;
        }
        let start = self.read_anchor();
        std::thread::sleep(std::time::Duration::from_millis(1));
        let end = self.read_anchor();
        let ticks_per_ns = end.ticks.saturating_sub(start.ticks) as f64
            / end.ns.saturating_sub(start.ns).max(1) as f64;
        (ns as f64 * ticks_per_ns) as u64
    }

    /// The conversion of ticks read until now to nanoseconds since the
    /// session started.
    pub(crate) fn scale(&self) -> Scale {
        let origin_ns = self.origin_ns.load(Ordering::Relaxed);
        if !self.tsc {
            return Scale {
                start: Anchor { ticks: 0, ns: 0 },
                ns_per_tick: 1.0,
                origin_ns,
            };
        }
        let start = *lock(&self.anchor);
        let end = self.read_anchor();
        let ticks = end.ticks.saturating_sub(start.ticks);
        // No stretch to measure the rate over (a pairing at the session's
        // very start): every tick read so far converts to the start.
        let ns_per_tick = match ticks {
            0 => 1.0,
            _ => end.ns.saturating_sub(start.ns) as f64 / ticks as f64,
        };
        Scale {
            start,
            ns_per_tick,
            origin_ns,
        }
    }

    fn epoch_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Both clocks read together: the monotonic clock between two counter
    /// readings, matched with their midpoint; the tightest of a few tries,
    /// so that a thread preempted in between does not skew the line.
    fn read_anchor(&self) -> Anchor {
        (0..5)
            .map(|_| {
                let before = tsc::read();
                let ns = self.epoch_ns();
                let after = tsc::read();
                let width = after.saturating_sub(before);
                (
                    width,
                    Anchor {
                        ticks: before + width / 2,
                        ns,
                    },
                )
            })
            .min_by_key(|(width, _)| *width)
            .map(|(_, anchor)| anchor)
            .expect("five tries")
    }
}

/// Ticks to nanoseconds since the session started (see [`Clock::scale`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scale {
    start: Anchor,
    ns_per_tick: f64,
    origin_ns: u64,
}

impl Scale {
    /// A length of `ticks` in nanoseconds.
    #[inline]
    pub(crate) fn duration_ns(&self, ticks: u64) -> u64 {
        (ticks as f64 * self.ns_per_tick) as u64
    }

    /// `ticks` as nanoseconds since the session started (0 for a reading
    /// before it).
    #[inline]
    pub(crate) fn session_ns(&self, ticks: u64) -> u64 {
        let since_start = ticks.saturating_sub(self.start.ticks) as f64 * self.ns_per_tick;
        (self.start.ns + since_start as u64).saturating_sub(self.origin_ns)
    }
}

/// The x86-64 time-stamp counter.
#[cfg(target_arch = "x86_64")]
mod tsc {
    use std::arch::x86_64::{__cpuid, _rdtsc, CpuidResult};

    /// Whether stages may be timed by the counter: it is invariant and, on
    /// Linux, the kernel keeps time by it (it switches away from a counter
    /// it finds unstable).
    pub(super) fn trusted() -> bool {
        let kernel_agrees = || {
            match std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            ) {
                Ok(source) => source.trim() == "tsc",
                // No such file (not Linux): the processor's word alone.
                Err(_) => !cfg!(target_os = "linux"),
            }
        };
        invariant() && kernel_agrees()
    }

    /// Whether the counter is invariant: CPUID leaf 0x8000_0007, EDX bit 8.
    fn invariant() -> bool {
        let leaf = |id: u32| -> CpuidResult {
            #[allow(unused_unsafe)]
            // SAFETY: CPUID exists on every x86-64 processor.
            unsafe {
                __cpuid(id)
            }
        };
        leaf(0x8000_0000).eax >= 0x8000_0007 && leaf(0x8000_0007).edx & (1 << 8) != 0
    }

    #[inline(always)]
    pub(super) fn read() -> u64 {
        #[allow(unused_unsafe)]
        // SAFETY: RDTSC exists on every x86-64 processor.
        unsafe {
            _rdtsc()
        }
    }
}

/// Elsewhere: no counter; ticks are the monotonic clock's.
#[cfg(not(target_arch = "x86_64"))]
mod tsc {
    pub(super) fn trusted() -> bool {
        false
    }

    #[inline(always)]
    pub(super) fn read() -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ticks read around a known stretch of the monotonic clock convert to
    /// at least that stretch, in order, on both kinds of clock.
    #[test]
    fn ticks_convert_to_session_nanoseconds_in_order() {
        for clock in [Clock::new(), Clock::monotonic()] {
            clock.start_session();
            let first = clock.ticks();
            let started = clock.now_ns();
            std::thread::sleep(std::time::Duration::from_millis(5));
            let ended = clock.now_ns();
            let last = clock.ticks();
            let scale = clock.scale();
            let (a, b) = (scale.session_ns(first), scale.session_ns(last));
            // Within 100 µs: the conversion's error is the jitter of
            // reading both clocks together, far below that.
            assert!(a <= started + 100_000, "{a} vs {started}");
            assert!(b + 100_000 >= ended, "{b} vs {ended}");
            assert!(b - a >= 5_000_000, "the sleep's 5 ms at least: {}", b - a);
        }
    }

    #[test]
    fn a_reading_before_the_session_is_its_start() {
        let clock = Clock::monotonic();
        let before = clock.ticks();
        std::thread::sleep(std::time::Duration::from_millis(1));
        clock.start_session();
        assert_eq!(clock.scale().session_ns(before), 0);
    }
}
