//! `rankscope inspect`: what a payload file holds.

use std::fmt::Write;
use std::path::Path;

use rankscope_common::text::terminal;
use rankscope_common::{payload, spill, Payload, PayloadHeader, Rejection, Table};

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
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_description(&mut out, &name, &bytes, &payload);
    Ok(out)
}

/// The whole description of `payload`, read from `bytes` of the file `name`.
fn write_description(
    w: &mut String,
    name: &str,
    bytes: &[u8],
    payload: &Payload,
) -> std::fmt::Result {
    let h = &payload.header;
    writeln!(
        w,
        "{}: rankscope payload, format version {}, {} bytes",
        terminal(name),
        u16::from_le_bytes([bytes[4], bytes[5]]),
        bytes.len()
    )?;
    write_identity(w, h)?;
    write_clock(w, h)?;
    write_gpus(w, h)?;
    writeln!(w, "agent     {}", terminal(&h.agent_version))?;
    if let Some(ns) = h.encode_ns {
        writeln!(w, "encoded   in {:.3} ms", ns as f64 / 1e6)?;
    }
    write_tables(w, payload)
}

/// The session, its tags and the rank.
fn write_identity(w: &mut String, h: &PayloadHeader) -> std::fmt::Result {
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
    )
}

/// The clock, then the run and how it was gathered.
fn write_clock(w: &mut String, h: &PayloadHeader) -> std::fmt::Result {
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
    )
}

/// The GPU source and each GPU.
fn write_gpus(w: &mut String, h: &PayloadHeader) -> std::fmt::Result {
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
    Ok(())
}

/// The rows of each table, with those dropped.
fn write_tables(w: &mut String, payload: &Payload) -> std::fmt::Result {
    writeln!(w, "tables:")?;
    for table in Table::ALL {
        let dropped = payload
            .header
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
}
