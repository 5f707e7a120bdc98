//! What a rank's GPU did in its traced windows, beside what its host did:
//! the window's time split once into the GPU busy (computing, else
//! communicating, else copying memory) and idle, and the idle time by what
//! the host was doing meanwhile: in a collective call (the collective's
//! transfer, or waiting for another rank), or its own work (the host does
//! not keep the GPU busy: launch-bound). Read from the kernels' and the
//! host's collective calls' intervals, window by window, when the rank's
//! trace is digested.

use serde::{Deserialize, Serialize};

use rankscope_common::kineto::KernelCategory;

use super::super::intervals::{length, merge, overlap};

/// One rank's traced windows, summed, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuAccount {
    /// The windows' time, each from its first GPU activity's start to its
    /// last one's end (HTA's window).
    pub window_s: f64,
    /// The GPU computing.
    pub compute_s: f64,
    /// The GPU communicating, not computing.
    pub communication_s: f64,
    /// The GPU copying or setting memory, neither computing nor
    /// communicating.
    pub memory_s: f64,
    /// The host in collective calls, within the windows.
    pub collective_s: f64,
    /// The GPU idle while the host was in a collective call.
    pub idle_in_collective_s: f64,
    /// The GPU computing while the host was in a collective call: the
    /// collectives' time that compute overlaps.
    pub compute_in_collective_s: f64,
}

impl GpuAccount {
    /// One window: the GPU activities `kernels` (category, start, end) and
    /// the host's collective calls `collectives` (start, end), on one
    /// clock, nanoseconds. An empty window is all zero.
    pub fn of_window(
        kernels: impl Iterator<Item = (KernelCategory, i64, i64)>,
        collectives: impl Iterator<Item = (i64, i64)>,
    ) -> Self {
        let mut compute = Vec::new();
        let mut communication = Vec::new();
        let mut memory = Vec::new();
        for (category, start, end) in kernels {
            let list = match category {
                KernelCategory::Compute => &mut compute,
                KernelCategory::Communication => &mut communication,
                KernelCategory::Memory => &mut memory,
                _ => continue,
            };
            list.push((start, end.max(start)));
        }
        let busy = merge(compute.iter().chain(&communication).chain(&memory).copied());
        let (Some(first), Some(last)) = (busy.first(), busy.last()) else {
            return GpuAccount::default();
        };
        let window = (first.0, last.1);
        let compute = merge(compute.into_iter());
        let computing_or_communicating = merge(compute.iter().chain(&communication).copied());
        let within = |(start, end): (i64, i64)| (start.max(window.0), end.min(window.1));
        let host = merge(collectives.map(within).filter(|(start, end)| start < end));
        let seconds = |ns: i64| ns.max(0) as f64 / 1e9;
        let in_collective_busy = overlap(&host, &busy);
        let (compute_ns, either_ns) = (length(&compute), length(&computing_or_communicating));
        GpuAccount {
            window_s: seconds(window.1.saturating_sub(window.0)),
            compute_s: seconds(compute_ns),
            communication_s: seconds(either_ns.saturating_sub(compute_ns)),
            memory_s: seconds(length(&busy).saturating_sub(either_ns)),
            collective_s: seconds(length(&host)),
            idle_in_collective_s: seconds(length(&host).saturating_sub(in_collective_busy)),
            compute_in_collective_s: seconds(overlap(&host, &compute)),
        }
    }

    /// Two windows (or ranks' windows of one GPU) together.
    pub fn add(&mut self, other: &GpuAccount) {
        self.window_s += other.window_s;
        self.compute_s += other.compute_s;
        self.communication_s += other.communication_s;
        self.memory_s += other.memory_s;
        self.collective_s += other.collective_s;
        self.idle_in_collective_s += other.idle_in_collective_s;
        self.compute_in_collective_s += other.compute_in_collective_s;
    }

    /// The GPU busy.
    pub fn busy_s(&self) -> f64 {
        self.compute_s + self.communication_s + self.memory_s
    }

    /// The GPU idle.
    pub fn idle_s(&self) -> f64 {
        (self.window_s - self.busy_s()).max(0.0)
    }

    /// The GPU idle while the host did its own work (in no collective
    /// call).
    pub fn idle_in_host_work_s(&self) -> f64 {
        (self.idle_s() - self.idle_in_collective_s).max(0.0)
    }

    /// Whether every figure is finite and not negative (a digest read from
    /// elsewhere is checked).
    pub fn is_whole(&self) -> bool {
        [
            self.window_s,
            self.compute_s,
            self.communication_s,
            self.memory_s,
            self.collective_s,
            self.idle_in_collective_s,
            self.compute_in_collective_s,
        ]
        .iter()
        .all(|s| s.is_finite() && *s >= 0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_splits_into_busy_and_idle_by_what_the_host_did() {
        use KernelCategory::*;
        // 0–100: compute 0–20, 65–68 and 99–100; memcpy 15–30 (10 of it
        // past compute); communication 60–70 (7 past compute); the host in
        // a collective 40–80.
        let kernels = [
            (Compute, 0, 20),
            (Memory, 15, 30),
            (Communication, 60, 70),
            (Compute, 65, 68),
            (Compute, 99, 100),
        ];
        let gpu = GpuAccount::of_window(kernels.into_iter(), [(40, 80)].into_iter());
        let s = |ns: f64| ns / 1e9;
        assert_eq!(gpu.window_s, s(100.0));
        assert_eq!(gpu.compute_s, s(24.0));
        assert_eq!(gpu.communication_s, s(7.0));
        assert_eq!(gpu.memory_s, s(10.0));
        assert_eq!(gpu.collective_s, s(40.0));
        // In the collective call: busy 60–70, idle 30 of its 40.
        assert_eq!(gpu.idle_in_collective_s, s(30.0));
        assert_eq!(gpu.compute_in_collective_s, s(3.0));
        // Idle 59 in all: 30 in the collective, 29 in the host's own work
        // (of its 60).
        assert!((gpu.idle_s() - s(59.0)).abs() < 1e-15);
        assert!((gpu.idle_in_host_work_s() - s(29.0)).abs() < 1e-15);
        let split = super::super::gpu_split(&gpu, 0.25).unwrap();
        assert!((split.launch_bound_share().unwrap() - 29.0 / 60.0).abs() < 1e-9);
        assert!((split.overlap_share().unwrap() - 3.0 / 40.0).abs() < 1e-9);
        assert!((split.idle.collective_wait - s(7.5)).abs() < 1e-15);
        // A collective call past the window counts within it only.
        let clipped = GpuAccount::of_window([(Compute, 10, 20)].into_iter(), [(0, 50)].into_iter());
        assert_eq!(clipped.collective_s, s(10.0));
        assert_eq!(clipped.idle_in_collective_s, 0.0);
        assert_eq!(
            GpuAccount::of_window([].into_iter(), [(0, 5)].into_iter()),
            GpuAccount::default()
        );
    }
}
