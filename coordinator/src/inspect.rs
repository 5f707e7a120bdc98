//! `rankscope inspect`: what a payload file holds.

use std::fmt::Write;
use std::path::Path;

use rankscope_common::{payload, Table};

/// Why a file could not be inspected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a usable payload.
    #[error("{path}: {source}")]
    Payload {
        /// The file.
        path: String,
        /// What is wrong.
        source: payload::PayloadError,
    },
}

/// A description of the payload in `path`: header, then rows per table.
pub fn inspect(path: &Path) -> Result<String, InspectError> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| InspectError::Read {
        path: name.clone(),
        source,
    })?;
    let payload = payload::decode(&bytes).map_err(|source| InspectError::Payload {
        path: name.clone(),
        source,
    })?;
    let h = &payload.header;
    let mut out = String::new();
    let w = &mut out;
    // Writing to a String cannot fail.
    let _ = (|| -> std::fmt::Result {
        writeln!(
            w,
            "{name}: rankscope payload, format version {}, {} bytes",
            u16::from_le_bytes([bytes[4], bytes[5]]),
            bytes.len()
        )?;
        writeln!(w, "session   {} (id {})", h.session.name, h.session.id)?;
        for (key, value) in &h.session.tags {
            writeln!(w, "tag       {key}={value}")?;
        }
        writeln!(
            w,
            "rank      {} of {} (local rank {}), host {}, pid {}, launcher {}",
            h.rank.rank,
            h.rank.world_size,
            h.rank.local_rank,
            h.rank.host,
            h.rank.pid,
            h.rank.launcher
        )?;
        writeln!(
            w,
            "clock     started {} ns after the epoch, lasted {:.3} s, offset to rank 0 {} ns",
            h.clock.start_unix_ns,
            h.clock.duration_ns as f64 / 1e9,
            h.clock.offset_to_rank0_ns
        )?;
        writeln!(
            w,
            "gpus      source {}, {} device(s) {}",
            h.gpu_source.as_str(),
            h.gpus.len(),
            h.gpu_selection
        )?;
        for gpu in &h.gpus {
            writeln!(
                w,
                "  gpu {} {} {} {}",
                gpu.index, gpu.name, gpu.uuid, gpu.pci_bus_id
            )?;
        }
        writeln!(w, "agent     {}", h.agent_version)?;
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
