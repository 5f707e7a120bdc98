//! `rankscope inspect`: what a payload file holds.

use std::fmt::Write;
use std::path::Path;

use rankscope_common::text::terminal;
use rankscope_common::{payload, spill, Rejection, Table};

/// Why a file could not be inspected.
#[derive(Debug, thiserror::Error)]
#[error("{path}")]
pub struct InspectError {
    /// The file.
    pub path: String,
    /// What is wrong with it.
    #[source]
    pub reason: Rejection,
}

/// A description of the payload in `path`: header, then rows per table.
pub fn inspect(path: &Path) -> Result<String, InspectError> {
    let name = path.display().to_string();
    let fail = |reason| InspectError {
        path: name.clone(),
        reason,
    };
    let bytes = spill::read_bytes(path).map_err(fail)?;
    let payload = payload::decode(&bytes)
        .map_err(Rejection::Payload)
        .map_err(fail)?;
    let h = &payload.header;
    let mut out = String::new();
    let w = &mut out;
    // Writing to a String cannot fail.
    let _ = (|| -> std::fmt::Result {
        writeln!(
            w,
            "{}: rankscope payload, format version {}, {} bytes",
            terminal(&name),
            u16::from_le_bytes([bytes[4], bytes[5]]),
            bytes.len()
        )?;
        writeln!(
            w,
            "session   {} (id {})",
            terminal(&h.session.name),
            terminal(&h.session.id)
        )?;
        for (key, value) in &h.session.tags {
            writeln!(w, "tag       {}={}", terminal(key), terminal(value))?;
        }
        writeln!(
            w,
            "rank      {} of {} (local rank {}), host {}, pid {}, launcher {}",
            h.rank.rank,
            h.rank.world_size,
            h.rank.local_rank,
            terminal(&h.rank.host),
            h.rank.pid,
            terminal(&h.rank.launcher)
        )?;
        writeln!(
            w,
            "clock     started {} ns after the epoch, lasted {:.3} s, offset to rank 0 {}",
            h.clock.start_unix_ns,
            h.clock.duration_ns as f64 / 1e9,
            h.clock.offset_to_rank0.map_or_else(
                || "not measured".to_string(),
                |o| format!("{} ns (round trip {} ns)", o.offset_ns, o.round_trip_ns)
            )
        )?;
        writeln!(
            w,
            "run       {}, gathered by {:?}, clock sync {:?}",
            terminal(h.session.run_id.as_deref().unwrap_or("(no run id)")),
            h.transport,
            h.clock_sync
        )?;
        writeln!(
            w,
            "gpus      source {}, {} device(s) {}",
            h.gpu_source.as_str(),
            h.gpus.len(),
            terminal(&h.gpu_selection)
        )?;
        for gpu in &h.gpus {
            writeln!(
                w,
                "  gpu {} {} {} {}",
                gpu.index,
                terminal(&gpu.name),
                terminal(&gpu.uuid),
                terminal(&gpu.pci_bus_id)
            )?;
        }
        writeln!(w, "agent     {}", terminal(&h.agent_version))?;
        if let Some(ns) = h.encode_ns {
            writeln!(w, "encoded   in {:.3} ms", ns as f64 / 1e6)?;
        }
        writeln!(w, "tables:")?;
        for table in Table::ALL {
            let dropped = h
                .dropped
                .iter()
                .find(|d| d.table == table.name())
                .map_or(String::new(), |d| format!(" ({} dropped)", d.rows));
            writeln!(
                w,
                "  {:<18} {:>9} rows{dropped}",
                table.name(),
                payload.rows(*table)
            )?;
        }
        Ok(())
    })();
    Ok(out)
}
