//! Host readings through sysinfo: CPU use, memory, load average and this
//! process's resident memory.

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};

use rankscope_common::table::HostSampleRecord;

/// Reads the host this rank runs on.
pub(crate) struct HostReader {
    system: System,
    pid: Pid,
    /// CPU use needs two readings; the first has none.
    primed: bool,
}

impl HostReader {
    pub(crate) fn new() -> Self {
        HostReader {
            system: System::new(),
            pid: Pid::from_u32(std::process::id()),
            primed: false,
        }
    }

    /// One reading.
    pub(crate) fn sample(&mut self, ts_ns: u64) -> HostSampleRecord {
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.system.refresh_processes_specifics(
            ProcessesToUpdate::Some(&[self.pid]),
            false,
            ProcessRefreshKind::nothing().with_memory(),
        );
        let cpu_pct = self
            .primed
            .then(|| f64::from(self.system.global_cpu_usage()));
        self.primed = true;
        let load = if cfg!(unix) {
            Some(System::load_average())
        } else {
            None
        };
        HostSampleRecord {
            ts_ns,
            cpu_pct,
            memory_used_bytes: self.system.used_memory(),
            memory_total_bytes: self.system.total_memory(),
            load_1: load.as_ref().map(|l| l.one),
            load_5: load.as_ref().map(|l| l.five),
            load_15: load.as_ref().map(|l| l.fifteen),
            process_rss_bytes: self.system.process(self.pid).map(|p| p.memory()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_real_machine() {
        let mut reader = HostReader::new();
        let first = reader.sample(1);
        assert_eq!(first.cpu_pct, None, "no CPU use from a single reading");
        std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
        let second = reader.sample(2);
        let cpu = second.cpu_pct.expect("CPU use from the second reading");
        assert!((0.0..=100.0).contains(&cpu), "{cpu}");
        assert!(second.memory_total_bytes > 0);
        assert!(second.memory_used_bytes <= second.memory_total_bytes);
        let rss = second.process_rss_bytes.expect("this process's RSS");
        assert!(rss > 1 << 20, "a test process holds more than 1 MiB: {rss}");
        assert!(second.load_1.is_some_and(|l| l >= 0.0));
    }
}
