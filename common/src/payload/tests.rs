use super::codec::{codec_id, compress, compressed_bound, decompress, expansion_allowed};
use super::decode::format_version;
use super::*;
use crate::table::*;
use proptest::prelude::*;

/// A payload with rows in every table.
fn sample() -> Payload {
    let mut header = PayloadHeader::new("job-7", "t2v", 2, 4);
    header.session.tags = vec![("mode".into(), "tp4".into())];
    header.rank.host = "node-1".into();
    header.gpu_source = GpuSource::Simulated;
    header.gpus.push(GpuMeta {
        index: 0,
        uuid: "GPU-0000".into(),
        name: "Simulated GPU".into(),
        pci_bus_id: "00000000:01:00.0".into(),
        memory_total_bytes: Some(80 << 30),
        max_sm_clock_mhz: Some(1980),
        max_mem_clock_mhz: None,
    });
    header.dropped.push(DroppedRows {
        table: "events".into(),
        rows: 3,
    });

    let mut tables = BTreeMap::new();
    let mut stages = StagesBuilder::default();
    for (i, name) in ["text_encoding", "denoise", "denoise", "vae_decode"]
        .into_iter()
        .enumerate()
    {
        stages.append(&StageRow {
            name: name.into(),
            thread: 0,
            thread_name: "main".into(),
            stage_id: i as u64,
            parent_id: (i == 2).then_some(1),
            depth: u32::from(i == 2),
            start_ns: 100 * i as u64,
            end_ns: 100 * i as u64 + 50,
            call_index: u32::from(i == 2),
            metadata: (i == 0).then(|| r#"{"prompt_len":77}"#.into()),
        });
    }
    tables.insert(Table::Stages, stages.finish().unwrap());

    let mut gpu = GpuSamplesBuilder::default();
    gpu.append(&GpuSampleRow {
        ts_ns: 5,
        gpu: 0,
        memory_used_bytes: Some(1 << 30),
        memory_total_bytes: Some(80 << 30),
        memory_reserved_bytes: None,
        util_gpu_pct: Some(85.0),
        util_mem_pct: Some(40.0),
        temperature_c: Some(71.0),
        power_w: Some(300.5),
        power_limit_w: Some(700.0),
        sm_clock_mhz: Some(1980),
        mem_clock_mhz: Some(2619),
        throttle_reasons: Some(0),
        pcie_tx_kbps: None,
        pcie_rx_kbps: None,
    });
    tables.insert(Table::GpuSamples, gpu.finish().unwrap());

    let mut host = HostSamplesBuilder::default();
    host.append(&HostSampleRow {
        ts_ns: 6,
        cpu_pct: Some(12.5),
        memory_used_bytes: 1000,
        memory_total_bytes: 4000,
        load_1: Some(0.5),
        load_5: None,
        load_15: None,
        process_rss_bytes: Some(77),
    });
    tables.insert(Table::HostSamples, host.finish().unwrap());

    let mut steps = DiffusionStepsBuilder::default();
    steps.append(&DiffusionStepRow {
        ts_ns: 7,
        step: 3,
        timestep: 981.0,
        block_size: 16,
        computation_ms: 41.5,
        guidance_scale: Some(7.5),
    });
    tables.insert(Table::DiffusionSteps, steps.finish().unwrap());

    let mut blocks = BlocksBuilder::default();
    blocks.append(&BlockRow {
        ts_ns: 8,
        block_index: 1,
        block_size: 16,
        computation_ms: 170.0,
        memory_mb: None,
    });
    tables.insert(Table::Blocks, blocks.finish().unwrap());

    let mut metrics = MetricsBuilder::default();
    metrics.append(&MetricRow {
        ts_ns: 9,
        section: "custom".into(),
        name: "tokens".into(),
        value: 4096.0,
    });
    tables.insert(Table::Metrics, metrics.finish().unwrap());

    let mut events = EventsBuilder::default();
    events.append(&EventRow {
        ts_ns: 10,
        name: "milestone".into(),
        payload: Some(r#"{"progress":0.5}"#.into()),
    });
    tables.insert(Table::Events, events.finish().unwrap());

    let mut snapshots = MemorySnapshotsBuilder::default();
    snapshots.append(&MemorySnapshotRow {
        ts_ns: 11,
        label: "after_load".into(),
        source: "caller".into(),
        gpu: Some(0),
        allocated_bytes: Some(5),
        reserved_bytes: Some(6),
        max_allocated_bytes: None,
    });
    tables.insert(Table::MemorySnapshots, snapshots.finish().unwrap());

    let mut params = ModelParametersBuilder::default();
    params.append(&ModelParameterRow {
        name: "transformer".into(),
        count: 1_300_000_000,
    });
    tables.insert(Table::ModelParameters, params.finish().unwrap());

    let mut kernels = KernelsBuilder::default();
    kernels.append(&KernelRow {
        window: 1,
        name: "sm90_gemm".into(),
        category: "compute".into(),
        stream: 7,
        device: Some(0),
        start_ns: 12,
        dur_ns: 13,
        launch_ns: Some(11),
    });
    tables.insert(Table::Kernels, kernels.finish().unwrap());

    let mut collectives = CollectivesBuilder::default();
    collectives.append(&CollectiveRow {
        window: 1,
        kind: "all_reduce".into(),
        group: None,
        bytes: Some(4096),
        start_ns: 14,
        dur_ns: 15,
    });
    tables.insert(Table::Collectives, collectives.finish().unwrap());

    let mut ops = CpuOpsBuilder::default();
    ops.append(&CpuOpRow {
        window: 1,
        name: "aten::mm".into(),
        calls: 16,
        total_ns: 17,
    });
    tables.insert(Table::CpuOps, ops.finish().unwrap());

    let mut spans = CpuSpansBuilder::default();
    spans.append(&CpuSpanRow {
        window: 1,
        name: "aten::mm".into(),
        thread: 42,
        start_ns: 18,
        dur_ns: 19,
    });
    tables.insert(Table::CpuSpans, spans.finish().unwrap());

    let mut functions = PythonFunctionsBuilder::default();
    functions.append(&PythonFunctionRow {
        name: "app.Model.forward".into(),
        file: "app/model.py".into(),
        line: 12,
        calls: 3,
        total_ns: 30,
        self_ns: 20,
    });
    tables.insert(Table::PythonFunctions, functions.finish().unwrap());

    let mut calls = PythonCallsBuilder::default();
    calls.append(&PythonCallRow {
        name: "app.Model.forward".into(),
        thread: 0,
        depth: 1,
        start_ns: 20,
        end_ns: 30,
    });
    tables.insert(Table::PythonCalls, calls.finish().unwrap());

    assert_eq!(tables.len(), Table::ALL.len(), "sample covers every table");
    Payload { header, tables }
}

fn sample_bytes() -> Vec<u8> {
    encode(&sample(), Compression::Zstd).unwrap()
}

/// Rewrites the checksum after a deliberate edit, so the edit reaches the parser.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len();
    let crc = crc32fast::hash(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

/// Encodes and decodes the sample payload with `codec`: the same header
/// and tables come back.
fn round_trips_every_table(codec: Compression) {
    let original = sample();
    let decoded = decode(&encode(&original, codec).unwrap()).unwrap();
    assert_eq!(decoded.header, original.header);
    assert_eq!(
        decoded.tables.keys().collect::<Vec<_>>(),
        original.tables.keys().collect::<Vec<_>>()
    );
    for (table, batch) in &original.tables {
        assert_eq!(&decoded.tables[table], batch, "table {}", table.name());
    }
}

#[test]
fn every_table_round_trips_uncompressed() {
    round_trips_every_table(Compression::None);
}

#[test]
fn every_table_round_trips_with_lz4() {
    round_trips_every_table(Compression::Lz4);
}

/// The sample cut to the first tables that, together, hold every column
/// type it has: a table more adds rows Miri interprets the same way, at
/// about half a minute each.
fn sample_of_every_column_type() -> Payload {
    let mut payload = sample();
    let mut seen = std::collections::HashSet::new();
    payload.tables.retain(|_, batch| {
        let types: Vec<_> = batch
            .schema()
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let adds = types.iter().any(|t| !seen.contains(t));
        seen.extend(types);
        adds
    });
    payload
}

/// Also run under Miri (scripts/miri.sh): the codec's framing, the IPC
/// streams and the checks before Arrow reads a buffer, in pure Rust.
#[test]
fn every_column_type_round_trips_with_lz4() {
    let original = sample_of_every_column_type();
    assert!(original.tables.len() < sample().tables.len());
    let decoded = decode(&encode(&original, Compression::Lz4).unwrap()).unwrap();
    assert_eq!(decoded.header, original.header);
    assert_eq!(decoded.tables, original.tables);
}

#[test]
fn every_table_round_trips_with_zstd() {
    round_trips_every_table(Compression::Zstd);
}

#[test]
fn the_sample_reads_back_as_written() {
    let decoded = decode(&sample_bytes()).unwrap();
    let stages = StagesView::new(decoded.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.name.get(3), "vae_decode");
    assert_eq!(stages.name.key(1), stages.name.key(2));
    assert_eq!(stages.parent_id.get(2), Some(1));
    assert_eq!(stages.metadata.get(0), Some(r#"{"prompt_len":77}"#));
    let gpu = GpuSamplesView::new(decoded.table(Table::GpuSamples).unwrap()).unwrap();
    assert_eq!(gpu.memory_reserved_bytes.get(0), None);
    assert_eq!(gpu.sm_clock_mhz.get(0), Some(1980));
}

/// Version 2 stored every column as values; it reads as it was written,
/// and version 3 stores the same rows differently.
#[test]
fn a_version_2_payload_still_decodes() {
    let original = sample();
    let v2 = encode_as(2, &original, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let v3 = encode_as(3, &original, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let v4 = encode_as(4, &original, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let v5 = encode(&original, Compression::Zstd).unwrap();
    assert_eq!(format_version(&v2), 2);
    assert_eq!(format_version(&v3), 3);
    assert_eq!(format_version(&v4), 4);
    assert_eq!(format_version(&v5), 5);
    for bytes in [v2, v3, v4, v5] {
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.header, original.header);
        assert_eq!(decoded.tables, original.tables);
    }
    // Read as version 2 (the header's tail, one byte for no encode time,
    // taken off), version 3's stages show their differences.
    let mut bytes = encode_as(3, &original, Compression::None, &Limits::DEFAULT).unwrap();
    let header_len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    assert_eq!(bytes[20 + header_len - 1], 0, "the tail: no encode time");
    bytes.remove(20 + header_len - 1);
    bytes[16..20].copy_from_slice(&(header_len as u32 - 1).to_le_bytes());
    let total = bytes.len() as u64;
    bytes[8..16].copy_from_slice(&total.to_le_bytes());
    bytes[4..6].copy_from_slice(&2u16.to_le_bytes());
    reseal(&mut bytes);
    let decoded = decode(&bytes).unwrap();
    let stages = StagesView::new(decoded.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.start_ns, [0, 100, 100, 100]);
}

/// The agent's encoder (`encode_capped`) measures how long the tables took
/// and writes it after the header; format 2 has no room for it.
#[test]
fn the_encode_time_travels_in_format_3_only() {
    let mut payload = sample();
    let bytes = encode_capped(&mut payload, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let measured = payload.header.encode_ns;
    assert!(measured.is_some_and(|ns| ns > 0), "{measured:?}");
    assert_eq!(decode(&bytes).unwrap().header.encode_ns, measured);
    // A second encoding (after a clock resync) adds its time.
    let again = encode_capped(&mut payload, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let total = payload.header.encode_ns.unwrap();
    assert!(total > measured.unwrap());
    assert_eq!(decode(&again).unwrap().header.encode_ns, Some(total));
    // Other encoders write the header's value as it is.
    assert_eq!(
        decode(&encode(&payload, Compression::Lz4).unwrap())
            .unwrap()
            .header,
        payload.header
    );
    let v2 = encode_as(2, &payload, Compression::Lz4, &Limits::DEFAULT).unwrap();
    assert_eq!(decode(&v2).unwrap().header.encode_ns, None);
    assert!(matches!(
        encode_as(1, &payload, Compression::Lz4, &Limits::DEFAULT),
        Err(PayloadError::UnwritableVersion(1))
    ));
}

/// A window's payload says which window it covers (format 4), and a
/// rank's parallel coordinates travel (format 5); an older format has no
/// room for them and reads without.
#[test]
fn the_window_travels_in_format_4() {
    let mut payload = sample();
    payload.header.window = Some(crate::window::WindowMeta {
        index: 3,
        trigger: crate::window::Trigger::Command,
        planned_first_step: 40,
        planned_steps: 20,
        first_step: 40,
        steps: 20,
        started_ns: 1_500_000_000,
        duration_ns: 2_000_000_000,
        cancelled: None,
    });
    payload.header.parallel = vec![crate::parallel::ParallelCoord {
        dim: "tp".into(),
        index: 1,
        size: 4,
    }];
    let v5 = encode(&payload, Compression::Zstd).unwrap();
    assert_eq!(decode(&v5).unwrap().header, payload.header);
    let v4 = encode_as(4, &payload, Compression::Zstd, &Limits::DEFAULT).unwrap();
    let read = decode(&v4).unwrap().header;
    assert_eq!(read.window, payload.header.window);
    assert!(
        read.parallel.is_empty(),
        "format 4 has no parallel coordinates"
    );
    let v3 = encode_as(3, &payload, Compression::Zstd, &Limits::DEFAULT).unwrap();
    assert_eq!(decode(&v3).unwrap().header.window, None);
    // Coordinates no trace's groups could give are dropped as read.
    payload.header.parallel[0].dim = "pipeline1".into();
    let v5 = encode(&payload, Compression::Zstd).unwrap();
    assert!(decode(&v5).unwrap().header.parallel.is_empty());
}

#[test]
fn empty_tables_are_left_out() {
    let mut payload = sample();
    payload
        .tables
        .insert(Table::Events, EventsBuilder::default().finish().unwrap());
    let decoded = decode(&encode(&payload, Compression::Lz4).unwrap()).unwrap();
    assert!(decoded.table(Table::Events).is_none());
    assert_eq!(decoded.rows(Table::Events), 0);
}

#[test]
fn a_future_version_is_named() {
    let mut bytes = sample_bytes();
    bytes[4..6].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let err = decode(&bytes).unwrap_err();
    assert!(
        matches!(err, PayloadError::UnsupportedVersion { found, supported: FORMAT_VERSION } if found == FORMAT_VERSION + 1),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains(&format!("version {}", FORMAT_VERSION + 1)),
        "{err}"
    );
}

#[test]
fn another_format_is_not_a_payload() {
    let err = decode(b"{\"schema_version\": 1}").unwrap_err();
    assert!(matches!(err, PayloadError::NotAPayload), "{err}");
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample_bytes();
    for len in 0..bytes.len() {
        let err = decode(&bytes[..len]).expect_err("a truncated payload must not decode");
        if len >= PREAMBLE_BYTES {
            assert!(
                matches!(err, PayloadError::Truncated { found, .. } if found == len as u64),
                "len {len}: {err}"
            );
        }
    }
}

#[test]
fn a_flipped_bit_fails_the_checksum() {
    let bytes = sample_bytes();
    for pos in [PREAMBLE_BYTES, bytes.len() / 2, bytes.len() - 5] {
        let mut corrupt = bytes.clone();
        corrupt[pos] ^= 0x10;
        assert!(matches!(
            decode(&corrupt),
            Err(PayloadError::ChecksumMismatch)
        ));
    }
}

#[test]
fn a_table_of_the_wrong_schema_is_refused() {
    let mut payload = sample();
    let events = payload.tables.remove(&Table::Events).unwrap();
    payload.tables.insert(Table::Metrics, events);
    let err = decode(&encode(&payload, Compression::Lz4).unwrap()).unwrap_err();
    assert!(
        matches!(
            err,
            PayloadError::Table {
                table: "metrics",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn trailing_bytes_and_a_reserved_field_are_refused() {
    // Transports frame payloads themselves: extra bytes mean a damaged or
    // doctored file, not a second payload.
    let mut bytes = sample_bytes();
    bytes.extend_from_slice(b"next");
    let err = decode(&bytes).unwrap_err();
    assert!(matches!(err, PayloadError::TrailingBytes(4)), "{err}");

    let mut bytes = sample_bytes();
    bytes[6] = 1;
    let err = decode(&bytes).unwrap_err();
    assert!(matches!(err, PayloadError::Reserved(1)), "{err}");
}

#[test]
fn an_announced_table_size_past_the_limit_is_refused_before_allocating() {
    let mut payload = sample();
    payload.tables.retain(|&t, _| t == Table::ModelParameters);
    let mut bytes = encode(&payload, Compression::Zstd).unwrap();
    // The table entry follows the header: id, codec, then the raw length.
    let header_len = u32::from_le_bytes(bytes[16..20].try_into().unwrap()) as usize;
    let raw_len_at = PREAMBLE_BYTES + header_len + 2 + 2;
    bytes[raw_len_at..raw_len_at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    reseal(&mut bytes);
    let err = decode(&bytes).unwrap_err().to_string();
    assert!(
        err.contains("model_parameters") && err.contains("exceeds"),
        "{err}"
    );

    // A size a little off is caught after decompression, not trusted.
    bytes[raw_len_at..raw_len_at + 8].copy_from_slice(&7u64.to_le_bytes());
    reseal(&mut bytes);
    let err = decode(&bytes).unwrap_err().to_string();
    assert!(err.contains("7 announced"), "{err}");
}

#[test]
fn a_table_decompresses_no_further_than_announced() {
    let small = vec![9u8; 1_000];
    let zstd = zstd::bulk::compress(&small, 3).unwrap();
    // 1 000 bytes announced as 10: zstd stops at 10.
    let err = decompress(2, &zstd, 10, MAX_TABLE_BYTES)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("decompressing (10 announced)"), "{err}");
    assert_eq!(decompress(2, &zstd, 1_000, MAX_TABLE_BYTES).unwrap(), small);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_preamble_never_panic(
        tail in proptest::collection::vec(any::<u8>(), 0..2048)
    ) {
        let mut bytes = sample_bytes()[..PREAMBLE_BYTES].to_vec();
        bytes.extend_from_slice(&tail);
        bytes.extend_from_slice(&[0; 4]);
        let total = bytes.len() as u64;
        bytes[8..16].copy_from_slice(&total.to_le_bytes());
        reseal(&mut bytes);
        prop_assert!(decode(&bytes).is_err() || tail.is_empty());
    }

    #[test]
    fn corrupt_table_streams_with_a_valid_checksum_are_errors(
        pos in 0usize..4096, value in any::<u8>()
    ) {
        // Edits inside the body, then a fresh checksum: the parser and the
        // Arrow reader see the damage and must answer with an error or a
        // payload, never a panic (not even one the last fence catches).
        let mut bytes = sample_bytes();
        let body_start = PREAMBLE_BYTES;
        let body_len = bytes.len() - 4 - body_start;
        let at = body_start + pos % body_len;
        bytes[at] = value;
        reseal(&mut bytes);
        assert_no_panic_caught(decode(&bytes));
    }

    #[test]
    fn hostile_arrow_streams_never_panic_or_abort(
        edits in proptest::collection::vec((0usize..1 << 16, any::<u8>()), 1..8)
    ) {
        // Uncompressed tables: the edits land in the Arrow IPC bytes themselves.
        let mut bytes = encode(&sample(), Compression::None).unwrap();
        let body_len = bytes.len() - 4 - PREAMBLE_BYTES;
        for (pos, value) in edits {
            bytes[PREAMBLE_BYTES + pos % body_len] = value;
        }
        reseal(&mut bytes);
        assert_no_panic_caught(decode(&bytes));
    }
}

/// A decode answered with a payload or an error found by validation: not
/// with a panic of the Arrow reader that the fence turned into one.
fn assert_no_panic_caught(decoded: Result<Payload, PayloadError>) {
    if let Err(error) = decoded {
        let text = crate::error::Chain(&error).to_string();
        assert!(!text.contains("the reader panicked"), "{text}");
    }
}

/// `rows` stages, each with `metadata_len` bytes of metadata.
fn stages_payload(rows: usize, metadata_len: usize) -> Payload {
    let mut stages = StagesBuilder::default();
    for i in 0..rows {
        stages.append(&StageRow {
            name: format!("stage-{}", i % 7),
            thread: 0,
            thread_name: "main".into(),
            stage_id: i as u64,
            parent_id: None,
            depth: 0,
            start_ns: i as u64,
            end_ns: i as u64 + 1,
            call_index: i as u32,
            metadata: Some("x".repeat(metadata_len)),
        });
    }
    let mut payload = Payload {
        header: PayloadHeader::new("job", "t", 0, 1),
        tables: BTreeMap::new(),
    };
    payload
        .tables
        .insert(Table::Stages, stages.finish().unwrap());
    payload
}

const SMALL: Limits = Limits {
    table_bytes: 64 << 10,
    payload_bytes: 1 << 20,
};

#[test]
fn the_encoder_refuses_what_the_decoder_would() {
    let payload = stages_payload(2_000, 100);
    let err = encode_within(&payload, Compression::Zstd, &SMALL).unwrap_err();
    assert!(
        matches!(err, PayloadError::TableTooLarge { table: Table::Stages, limit, .. } if limit == 64 << 10),
        "{err}"
    );
    // Written without the limit, the same payload is what the decoder refuses.
    let bytes = encode(&payload, Compression::Zstd).unwrap();
    assert!(decode_within(&bytes, &SMALL).is_err());
}

#[test]
fn a_payload_too_large_is_capped_with_the_cut_rows_counted() {
    let mut payload = stages_payload(2_000, 100);
    let bytes = encode_capped(&mut payload, Compression::Zstd, &SMALL).unwrap();
    let decoded = decode_within(&bytes, &SMALL).unwrap();
    let kept = decoded.rows(Table::Stages);
    assert!(kept > 0 && kept < 2_000, "{kept}");
    let dropped = &decoded.header.dropped;
    assert_eq!(dropped.len(), 1);
    assert_eq!(
        (dropped[0].table.as_str(), dropped[0].rows),
        ("stages", 2_000 - kept as u64)
    );
    let stages = StagesView::new(decoded.table(Table::Stages).unwrap()).unwrap();
    assert_eq!(stages.stage_id[0], 0, "the first rows are the ones kept");
}

#[test]
fn a_header_the_decoder_would_refuse_is_never_written() {
    let mut payload = stages_payload(1, 0);
    let gpu = GpuMeta {
        index: 0,
        uuid: "GPU-0000".into(),
        name: "GPU".into(),
        pci_bus_id: "00000000:01:00.0".into(),
        memory_total_bytes: None,
        max_sm_clock_mhz: None,
        max_mem_clock_mhz: None,
    };
    for gpus in [8_000, 20_000, 40_000] {
        payload.header.gpus = vec![gpu.clone(); gpus];
        match encode(&payload, Compression::Zstd) {
            Ok(bytes) => assert!(decode(&bytes).is_ok(), "{gpus} GPUs written unreadable"),
            Err(err) => assert!(
                matches!(err, PayloadError::Header(_) | PayloadError::HeaderDecode(_)),
                "{gpus}: {err}"
            ),
        }
    }
    assert!(
        encode(&payload, Compression::Zstd).is_err(),
        "40 000 GPUs do not fit a header"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn capped_payloads_round_trip_at_the_limits(rows in 0usize..3_000, metadata_len in 0usize..200) {
        let mut payload = stages_payload(rows, metadata_len);
        let bytes = encode_capped(&mut payload, Compression::Lz4, &SMALL).unwrap();
        let decoded = decode_within(&bytes, &SMALL).unwrap();
        let kept = decoded.rows(Table::Stages) as u64;
        let dropped: u64 = decoded.header.dropped.iter().map(|d| d.rows).sum();
        prop_assert_eq!(kept + dropped, rows as u64);
    }
}

#[test]
fn a_payload_over_its_total_limit_is_cut_down_to_fit() {
    // Each table under the table limit, together over the payload limit.
    let mut payload = stages_payload(4_000, 200);
    let limits = Limits {
        table_bytes: 64 << 20,
        payload_bytes: 4 << 10,
    };
    let bytes = encode_capped(&mut payload, Compression::None, &limits).unwrap();
    assert!(bytes.len() as u64 <= limits.payload_bytes);
    let decoded = decode_within(&bytes, &limits).unwrap();
    let dropped: u64 = decoded.header.dropped.iter().map(|d| d.rows).sum();
    assert_eq!(decoded.rows(Table::Stages) as u64 + dropped, 4_000);

    // A limit nothing fits under is an error, not an endless loop.
    let tiny = Limits {
        table_bytes: 64 << 20,
        payload_bytes: 16,
    };
    let err = encode_capped(&mut stages_payload(10, 0), Compression::None, &tiny).unwrap_err();
    assert!(matches!(err, PayloadError::TooLarge { .. }), "{err}");
}

#[test]
fn a_decompression_bomb_is_refused_before_it_expands() {
    // 200 MB of zeros compress to a few kilobytes.
    let zeros = vec![0u8; 200 << 20];
    let bomb = zstd::bulk::compress(&zeros, 3).unwrap();
    assert!(bomb.len() < 100_000);
    let err = decompress(2, &bomb, zeros.len() as u64, MAX_TABLE_BYTES)
        .unwrap_err()
        .to_string();
    assert!(err.contains("decompression bomb"), "{err}");
    // The encoder never writes one: such a table is stored uncompressed.
    assert!(!expansion_allowed(bomb.len(), zeros.len() as u64));
    assert!(expansion_allowed(bomb.len(), EXPANSION_FLOOR));
}

#[test]
fn compressed_bytes_past_what_a_codec_makes_are_refused_as_padding() {
    // Incompressible bytes (splitmix64): the most a codec makes of them,
    // from none to past LZ4's largest block.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut noise = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u8
    };
    for len in [0, 1, 100_000, 5 << 20] {
        let raw: Vec<u8> = (0..len).map(|_| noise()).collect();
        for codec in [Compression::Lz4, Compression::Zstd] {
            let stream = compress(&raw, codec).unwrap();
            if len > 1 {
                assert!(stream.len() > raw.len(), "{codec:?} expands noise");
            }
            assert!(stream.len() as u64 <= compressed_bound(len as u64));
            let id = codec_id(codec);
            let limit = MAX_TABLE_BYTES;
            assert_eq!(decompress(id, &stream, len as u64, limit).unwrap(), raw);
            // The same stream behind 100 KB of padding.
            let mut padded = stream;
            padded.resize(padded.len() + 100_000, 0);
            let err = decompress(id, &padded, len as u64, limit)
                .unwrap_err()
                .to_string();
            assert!(err.contains("more than any codec makes of them"), "{err}");
        }
    }
}

/// A part of `readings` GPU readings at times `first..first + readings`,
/// and one stage, having dropped `dropped` stage rows.
fn flush(first: u64, readings: u64, dropped: u64) -> Payload {
    let mut gpu = GpuSamplesBuilder::default();
    for ts_ns in first..first + readings {
        gpu.append(&GpuSampleRow {
            ts_ns,
            gpu: 0,
            memory_used_bytes: None,
            memory_total_bytes: None,
            memory_reserved_bytes: None,
            util_gpu_pct: None,
            util_mem_pct: None,
            temperature_c: None,
            power_w: None,
            power_limit_w: None,
            sm_clock_mhz: None,
            mem_clock_mhz: None,
            throttle_reasons: None,
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        });
    }
    let mut header = PayloadHeader::new("s", "n", 0, 1);
    header.add_dropped(Table::Stages.name(), dropped);
    let mut payload = Payload {
        header,
        tables: Default::default(),
    };
    payload
        .tables
        .insert(Table::GpuSamples, gpu.finish().unwrap());
    payload.tables.insert(
        Table::Stages,
        stages_payload(1, 0).tables[&Table::Stages].clone(),
    );
    payload
}

#[test]
fn flushes_merge_a_part_at_a_time_keeping_the_newest_telemetry() {
    // Three flushes of 10 readings each, 15 kept: the newest 15.
    let parts = [flush(0, 10, 1), flush(10, 10, 2), flush(20, 10, 4)];
    let merged = Payload::concat(parts, 15).unwrap().unwrap();
    let gpu = GpuSamplesView::new(&merged.tables[&Table::GpuSamples]).unwrap();
    assert_eq!(gpu.ts_ns, (15..30).collect::<Vec<u64>>());
    assert_eq!(merged.rows(Table::Stages), 3, "other tables keep every row");
    let dropped = |table: Table| {
        merged
            .header
            .dropped
            .iter()
            .filter(|d| d.table == table.name())
            .map(|d| d.rows)
            .sum::<u64>()
    };
    assert_eq!(dropped(Table::GpuSamples), 15, "the cut is counted");
    assert_eq!(
        dropped(Table::Stages),
        1 + 2 + 4,
        "and every part's own drops"
    );
    assert!(Payload::concat([], 15).unwrap().is_none());
}
