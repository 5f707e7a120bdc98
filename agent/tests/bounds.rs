//! Memory stays bounded by configuration whatever the program does: names
//! it invents, stages it never ends. What did not fit is counted and
//! reported.

use rankscope::{Config, Profiler, RankEnv};
use rankscope_common::config::GpuSourceKind;
use rankscope_common::payload;
use rankscope_common::table::StagesView;

fn profiler(out: &std::path::Path, tweak: impl FnOnce(&mut Config)) -> Profiler {
    let mut config = Config {
        output_dir: out.into(),
        gpu_source: GpuSourceKind::None,
        collect_host: false,
        ..Config::default()
    };
    tweak(&mut config);
    Profiler::with_rank_env(config, RankEnv::single())
}

// `stop` and `start` by a name's text are deprecated in Rust, and what
// Python's `prof.stop` and `prof.start` call: their bounds hold.
#[allow(deprecated)]
#[test]
fn invented_names_fold_into_other_past_max_names() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.max_names = 64);
    let session = profiler.session("names", &[]).unwrap();
    for i in 0..20_000 {
        drop(profiler.stage(&format!("request-{i}")));
        profiler.stop(&format!("never-started-{i}"));
    }
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(&outcome.spill_file).unwrap()).unwrap();
    let stages: StagesView = payload.view().unwrap().unwrap();
    assert_eq!(
        stages.len, 20_000,
        "every stage is kept, under its name or `(other)`"
    );
    let distinct: std::collections::BTreeSet<&str> =
        (0..stages.len).map(|i| stages.name.get(i)).collect();
    assert!(distinct.len() <= 64, "{}", distinct.len());
    assert!(distinct.contains("(other)"));
    // 20 000 distinct names were started; 56 fit, 8 of the 64 being the
    // thread's and the profiler's own (stopping a name never started
    // interns nothing).
    assert!(payload.header.overflow.names_folded > 19_000);

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(outcome.session_dir.join("report.json")).unwrap())
            .unwrap();
    assert!(
        report["ranks"][0]["overflow"]["names_folded"]
            .as_u64()
            .unwrap()
            > 19_000
    );
    let said = report["recommendations"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["message"].as_str().unwrap().contains("max_names"));
    assert!(said, "the report says what to raise");
}

#[allow(deprecated)]
#[test]
fn stages_never_ended_stop_at_max_open_stages() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.max_open_stages = 16);
    let session = profiler.session("open", &[]).unwrap();
    for _ in 0..10_000 {
        profiler.start("leak");
    }
    // The open stack holds 16. The calls refused are innermost: they end
    // first, then the open ones.
    for _ in 0..10_000 - 16 {
        assert!(profiler.stop("leak"));
    }
    assert!(profiler.stop("leak"));
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(&outcome.spill_file).unwrap()).unwrap();
    assert_eq!(payload.header.overflow.stages_too_deep, 10_000 - 16);
    let stages: StagesView = payload.view().unwrap().unwrap();
    assert_eq!(stages.len, 1);
    assert_eq!(stages.depth[0], 15);
}

#[test]
fn a_huge_session_name_or_tag_is_cut_and_the_payload_still_spilled() {
    let out = tempfile::tempdir().unwrap();
    let profiler = profiler(out.path(), |c| c.session_id = Some("job".into()));
    let huge = "n".repeat(2 << 20);
    let tags: Vec<(String, String)> = (0..100).map(|i| (format!("k{i}"), huge.clone())).collect();
    let tags: Vec<(&str, &str)> = tags.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let session = profiler.session(&huge, &tags).unwrap();
    drop(profiler.stage("work"));
    let outcome = session.finish().unwrap();
    let payload = payload::decode(&std::fs::read(&outcome.spill_file).unwrap()).unwrap();
    let meta = &payload.header.session;
    assert_eq!(meta.name.len(), 256);
    assert_eq!(meta.tags.len(), 64);
    assert!(meta.tags.iter().all(|(_, v)| v.len() == 1024));
    assert_eq!(payload.rows(rankscope_common::Table::Stages), 1);
}
