//! Sparse files of gigabytes behind a valid preamble (8 KiB on disk) cost
//! `inspect` and `aggregate` no more memory than a small file does: the
//! layout is walked, then the checksum checked in small pieces, before the
//! file's size is allocated. Its own test binary: the peak memory read is
//! that of this process's children, which only this test starts.

mod support;

use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use support::rankscope;

/// A file of `size` bytes, all hole but for a real payload's preamble
/// announcing that size and, with `layout`, its header and one table entry
/// of `layout` uncompressed bytes whose compressed bytes run to the
/// checksum (a layout that holds where a codec could make that many bytes
/// of them, contents that do not); with `checksum`, the checksum that
/// holds over it all.
fn sparse_payload(path: &Path, size: u64, layout: Option<u64>, checksum: bool) {
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("../common/tests/data/payload-v3.rsp");
    let real = std::fs::read(real).unwrap();
    let mut start = real[..20].to_vec();
    start[8..16].copy_from_slice(&size.to_le_bytes());
    if let Some(raw_len) = layout {
        let header_len = u32::from_le_bytes(real[16..20].try_into().unwrap()) as usize;
        start.extend_from_slice(&real[20..20 + header_len]);
        start.extend_from_slice(&1u16.to_le_bytes());
        let table_bytes = size - start.len() as u64 - 18 - 4;
        start.extend_from_slice(&[1, 1]); // the stages table, zstd
        start.extend_from_slice(&raw_len.to_le_bytes());
        start.extend_from_slice(&table_bytes.to_le_bytes());
    }
    std::fs::write(path, &start).unwrap();
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(size).unwrap();
    if checksum {
        let mut crc = crc32fast::Hasher::new();
        crc.update(&start);
        let zeros = vec![0u8; 1 << 20];
        let mut left = size - 4 - start.len() as u64;
        while left > 0 {
            let n = left.min(zeros.len() as u64);
            crc.update(&zeros[..n as usize]);
            left -= n;
        }
        file.seek(SeekFrom::Start(size - 4)).unwrap();
        file.write_all(&crc.finalize().to_le_bytes()).unwrap();
    }
}

/// The largest resident set of any child this process has waited for, KiB.
fn children_peak_kib() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) },
        0
    );
    // SAFETY: written by the successful call above.
    unsafe { usage.assume_init() }.ru_maxrss
}

#[test]
fn sparse_gigabyte_files_are_refused_in_little_memory() {
    let dir = tempfile::tempdir().unwrap();
    // No payload past the preamble: refused on its header.
    for name in ["rank-00000.rsp", "rank-00001.rsp"] {
        sparse_payload(&dir.path().join(name), 3 << 30, None, false);
    }
    // A layout that holds: refused on its checksum, read in pieces.
    sparse_payload(
        &dir.path().join("rank-00002.rsp"),
        512 << 20,
        Some(530 << 20),
        false,
    );
    // 128 MiB of compressed bytes for a table of 1,000, with a checksum
    // that holds: padding, refused on its layout before it is read.
    sparse_payload(
        &dir.path().join("rank-00003.rsp"),
        128 << 20,
        Some(1000),
        true,
    );
    for (file, why) in [
        ("rank-00000.rsp", "payload header"),
        ("rank-00002.rsp", "checksum mismatch"),
        ("rank-00003.rsp", "more than any codec makes of them"),
    ] {
        let inspect = rankscope(&["inspect", dir.path().join(file).to_str().unwrap()], &[]);
        let stderr = String::from_utf8_lossy(&inspect.stderr);
        assert!(!inspect.status.success());
        assert!(stderr.contains(why), "{file}: {stderr}");
    }

    let out = dir.path().join("out");
    let aggregate = rankscope(
        &[
            "aggregate",
            "--reports-dir",
            dir.path().to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&aggregate.stderr);
    assert!(!aggregate.status.success(), "no usable payload: {stderr}");
    assert!(
        stderr.contains("payload header")
            && stderr.contains("checksum mismatch")
            && stderr.contains("more than any codec makes of them"),
        "{stderr}"
    );
    let peak_mib = children_peak_kib() / 1024;
    assert!(
        peak_mib < 64,
        "peak {peak_mib} MiB for 6.6 GiB of sparse files"
    );
}
