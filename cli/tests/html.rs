//! report.html as a person sees it: opened in a real headless Chromium, it
//! draws every chart with data, logs no error, loads nothing from the
//! network, and shows hostile stage names as text without running them.
//! A screenshot of each page is kept under `target/tmp/artifacts/`.

use std::path::{Path, PathBuf};

use rankscope_common::payload::{self, Compression, GpuMeta, GpuSource, Payload, PayloadHeader};
use rankscope_common::spill::{self, SpillName};
use rankscope_common::table::{GpuSampleRow, GpuSamplesBuilder, StageRow, StagesBuilder, Table};
use serde_json::json;

mod support;

use support::browser::Browser;
use support::{demo, rankscope};

/// Every chart of the page.
const CHARTS: [&str; 10] = [
    "chart-account",
    "chart-heatmap",
    "chart-timeline",
    "chart-gpu-util",
    "chart-gpu-memory",
    "chart-gpu-temperature",
    "chart-gpu-power",
    "chart-gpu-clock",
    "chart-steps",
    "chart-fps",
];

const CHARTS_READY: &str = "document.body && document.body.getAttribute('data-charts') === 'ready'";

fn artifact(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("artifacts")
        .join(name)
}

/// The points a chart shows (its `data-points`), and whether ECharts drew
/// it (a canvas inside).
fn chart(browser: &mut Browser, id: &str) -> (u64, bool) {
    let found = browser.eval(&format!(
        "(() => {{ const el = document.getElementById('{id}');
                   return el && [Number(el.getAttribute('data-points')),
                                 el.querySelector('canvas') !== null]; }})()"
    ));
    let found = found
        .as_array()
        .unwrap_or_else(|| panic!("#{id} is missing"));
    (found[0].as_u64().unwrap(), found[1].as_bool().unwrap())
}

#[test]
fn the_demo_report_opens_offline_with_every_chart_drawn() {
    let out = tempfile::tempdir().unwrap();
    let (run, dir) = demo(out.path(), &["--ranks", "4", "--straggler", "2"]);
    let html = dir.join("report.html");
    assert!(
        String::from_utf8_lossy(&run.stdout).contains(&html.display().to_string()),
        "the demo prints where the page is"
    );

    let mut browser = Browser::launch(1400);
    browser.open(&html, CHARTS_READY);
    for id in CHARTS {
        let (points, drawn) = chart(&mut browser, id);
        assert!(
            points > 0 && drawn,
            "#{id}: {points} points, drawn: {drawn}"
        );
    }
    // The time account: a bar for the job and one per rank.
    assert_eq!(chart(&mut browser, "chart-account").0, 5);
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    // Self-contained: nothing was fetched, from the network or the disk.
    assert_eq!(
        browser.eval("performance.getEntriesByType('resource').length"),
        json!(0)
    );
    // Simulated GPUs say so where they show.
    assert_eq!(
        browser.eval("getComputedStyle(document.getElementById('simulated-badge')).display"),
        json!("inline")
    );
    let text = browser.eval("document.body.innerText").to_string();
    assert!(text.contains("SIMULATED GPU DATA"), "{text}");
    // The verdict heads the page: the straggler alone, its stage and its
    // GPU's state.
    let top = browser.eval("document.getElementById('verdict').textContent");
    let top = top.as_str().unwrap();
    assert!(
        top.starts_with("Verdict (straggler): rank 2 holds the job back")
            && top.contains("`vae_decode`")
            && top.contains("thermal"),
        "verdict: {top}"
    );
    // The tables sort on a click.
    browser.eval("document.querySelector('#stage-table th:nth-child(4)').click()");
    let totals = browser.eval(
        "[...document.querySelectorAll('#stage-table tbody tr td:nth-child(4)')]
            .map(td => Number(td.getAttribute('data-sort')))",
    );
    let totals: Vec<f64> = serde_json::from_value(totals).unwrap();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    browser.screenshot(&artifact("report-demo.png"));
}

/// Strings a rank could send that would run script if they reached the
/// page unescaped.
const SCRIPT_CLOSE: &str = "</script><script>window.pwned=1</script>";
/// With control characters, which HTML cannot carry, after it: the page
/// shows them as `?` (IMG_SHOWN).
const IMG_ONERROR: &str = "<img src=x onerror=\"window.pwned=2\">\u{1b}[2J\u{0}";
const IMG_SHOWN: &str = "<img src=x onerror=\"window.pwned=2\">?[2J?";

/// A rank's payload whose every name is hostile.
fn hostile_rank(rank: u32) -> Payload {
    let mut stages = StagesBuilder::default();
    for call in 0..3u64 {
        let start = call * 1_000_000_000;
        for (id, parent, name, from, to) in [
            (2 * call + 1, None, SCRIPT_CLOSE, 0, 900_000_000),
            (
                2 * call + 2,
                Some(2 * call + 1),
                IMG_ONERROR,
                100_000_000,
                600_000_000,
            ),
        ] {
            stages.append(&StageRow {
                name: name.into(),
                thread: 0,
                thread_name: IMG_ONERROR.into(),
                stage_id: id,
                parent_id: parent,
                depth: u32::from(parent.is_some()),
                start_ns: start + from,
                end_ns: start + to + u64::from(rank) * 200_000_000,
                call_index: call as u32,
                metadata: Some(SCRIPT_CLOSE.into()),
            });
        }
    }
    let mut gpu = GpuSamplesBuilder::default();
    for i in 0..30u64 {
        gpu.append(&GpuSampleRow {
            ts_ns: i * 100_000_000,
            gpu: 0,
            memory_used_bytes: Some(10 << 30),
            memory_total_bytes: Some(80 << 30),
            memory_reserved_bytes: None,
            util_gpu_pct: Some(90.0),
            util_mem_pct: None,
            temperature_c: Some(60.0),
            power_w: Some(300.0),
            power_limit_w: Some(700.0),
            sm_clock_mhz: Some(1_900),
            mem_clock_mhz: None,
            throttle_reasons: Some(0),
            pcie_tx_kbps: None,
            pcie_rx_kbps: None,
        });
    }
    let mut header = PayloadHeader::new("hostile", SCRIPT_CLOSE, rank, 2);
    header.session.tags = vec![(IMG_ONERROR.into(), SCRIPT_CLOSE.into())];
    header.rank.host = IMG_ONERROR.into();
    header.clock.duration_ns = 3_500_000_000;
    header.gpu_source = GpuSource::Simulated;
    header.notices = vec![SCRIPT_CLOSE.into()];
    header.gpus.push(GpuMeta {
        index: 0,
        uuid: SCRIPT_CLOSE.into(),
        name: IMG_ONERROR.into(),
        pci_bus_id: IMG_ONERROR.into(),
        memory_total_bytes: Some(80 << 30),
        max_sm_clock_mhz: Some(1_980),
        max_mem_clock_mhz: None,
    });
    let mut payload = Payload {
        header,
        tables: Default::default(),
    };
    payload
        .tables
        .insert(Table::Stages, stages.finish().unwrap());
    payload
        .tables
        .insert(Table::GpuSamples, gpu.finish().unwrap());
    payload
}

#[test]
fn hostile_names_show_as_text_and_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for rank in 0..2 {
        let name = SpillName {
            rank,
            run_id: None,
            process: u64::from(rank),
        };
        let bytes = payload::encode(&hostile_rank(rank), Compression::Zstd).unwrap();
        spill::write(dir.path(), &name, &bytes).unwrap();
    }
    let run = rankscope(
        &["aggregate", "--reports-dir", dir.path().to_str().unwrap()],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let html = dir.path().join("report.html");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains(SCRIPT_CLOSE) && !page.contains(IMG_ONERROR));
    assert!(
        !page.contains('\u{1b}') && !page.contains('\u{0}'),
        "control characters reach the page"
    );

    let mut browser = Browser::launch(1200);
    browser.open(&html, CHARTS_READY);
    // Hover every chart's first element: tooltips are HTML too.
    for id in CHARTS {
        browser.eval(&format!(
            "(() => {{ const c = echarts.getInstanceByDom(document.getElementById('{id}'));
                       if (c) c.dispatchAction({{ type: 'showTip', seriesIndex: 0, dataIndex: 0 }});
                       return true; }})()"
        ));
    }
    assert_eq!(browser.eval("typeof window.pwned"), json!("undefined"));
    assert_eq!(
        browser.eval("document.querySelectorAll('img').length"),
        json!(0),
        "no injected element"
    );
    assert_eq!(
        browser.eval("document.scripts.length"),
        json!(3),
        "the data block, ECharts and the page's script; no more"
    );
    // The names are there, as text.
    let stages = browser.eval("document.getElementById('stage-table').textContent");
    let stages = stages.as_str().unwrap();
    assert!(
        stages.contains(SCRIPT_CLOSE) && stages.contains(IMG_SHOWN),
        "{stages}"
    );
    let title = browser.eval("document.title");
    assert_eq!(title, json!(format!("rankscope · {SCRIPT_CLOSE}")));
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    browser.screenshot(&artifact("report-hostile.png"));
}

/// Asserts two pages are the same, naming the first difference (not
/// printing a megabyte of bytes).
fn same_page(page: &[u8], expected: &[u8]) {
    if let Some(at) = (0..page.len().min(expected.len())).find(|&i| page[i] != expected[i]) {
        let around = |bytes: &[u8]| {
            String::from_utf8_lossy(&bytes[at.saturating_sub(60)..(at + 60).min(bytes.len())])
                .into_owned()
        };
        panic!(
            "pages differ at byte {at}: {:?} vs {:?}",
            around(page),
            around(expected)
        );
    }
    assert_eq!(page.len(), expected.len(), "one page is longer");
}

#[test]
fn rankscope_report_renders_the_same_page_again_from_report_json() {
    let out = tempfile::tempdir().unwrap();
    let (_, dir) = demo(out.path(), &["--ranks", "3"]);
    let written = std::fs::read(dir.join("report.html")).unwrap();
    let elsewhere = out.path().join("elsewhere.html");
    let again = rankscope(
        &[
            "report",
            dir.to_str().unwrap(),
            "--html",
            elsewhere.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    same_page(&std::fs::read(&elsewhere).unwrap(), &written);

    // Beside report.json by default, from the file as well as the folder.
    std::fs::remove_file(dir.join("report.html")).unwrap();
    let json = dir.join("report.json");
    let again = rankscope(&["report", json.to_str().unwrap()], &[]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    same_page(&std::fs::read(dir.join("report.html")).unwrap(), &written);

    // A folder without a report is an error that says so.
    let empty = tempfile::tempdir().unwrap();
    let failed = rankscope(&["report", empty.path().to_str().unwrap()], &[]);
    assert_eq!(failed.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("report.json"), "{stderr}");
}

#[path = "../../coordinator/tests/support/synthetic.rs"]
mod synthetic;

/// A synthetic job of `ranks` ranks of `shape`, aggregated (report only)
/// into the folder of its rank files.
fn synthetic_report(ranks: u32, shape: &synthetic::Shape) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    synthetic::write_job(dir.path(), ranks, shape, &mut std::io::sink()).unwrap();
    let run = rankscope(
        &[
            "aggregate",
            "--report-only",
            "--reports-dir",
            dir.path().to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    dir
}

#[test]
fn many_gpus_are_drawn_as_their_spread() {
    // 24 ranks, a GPU each: more than the page draws one line for.
    let dir = synthetic_report(24, &synthetic::BENCH);

    let mut browser = Browser::launch(1200);
    browser.open(&dir.path().join("report.html"), CHARTS_READY);
    for id in CHARTS.iter().filter(|id| id.starts_with("chart-gpu")) {
        let (points, drawn) = chart(&mut browser, id);
        assert!(points > 0 && drawn, "#{id}");
        let names = browser.eval(&format!(
            "echarts.getInstanceByDom(document.getElementById('{id}'))
                .getOption().series.map(s => s.name)"
        ));
        assert_eq!(
            names,
            json!(["highest of 24 GPUs", "mean", "lowest"]),
            "#{id}: the spread, no GPU flagged"
        );
    }
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    browser.screenshot(&artifact("report-24-ranks.png"));
}

/// 4,096 ranks (512 hosts of 8): the page opens in a real browser with
/// every chart drawn from data and no error, within the same deadline as
/// the small pages (the browser's open waits at most 60 s for the charts).
#[test]
fn a_page_of_4096_ranks_draws_every_chart() {
    const RANKS: u32 = 4_096;
    let small = synthetic::Shape {
        steps: 3,
        inner_per_step: 2,
        inner_ns: (1_000_000, 3_000_000),
        gpu_readings: 20,
        host_readings: 10,
        ..synthetic::BENCH
    };
    let dir = synthetic_report(RANKS, &small);
    let page = dir.path().join("report.html");
    let mut browser = Browser::launch(1400);
    browser.open(&page, CHARTS_READY);
    // The synthetic ranks record no blocks: every other chart has data.
    for id in CHARTS.iter().filter(|id| **id != "chart-fps") {
        let (points, drawn) = chart(&mut browser, id);
        assert!(
            points > 0 && drawn,
            "#{id}: {points} points, drawn: {drawn}"
        );
    }
    assert_eq!(browser.errors(), Vec::<String>::new(), "console errors");
    // The tables of one row per rank or GPU show their first 64 rows (the
    // GPUs with a bottleneck first) and count the rest.
    for table in ["rank-table", "gpu-table", "overhead-table"] {
        let rows = browser.eval(&format!(
            "document.querySelectorAll('#{table} tbody tr').length"
        ));
        assert_eq!(rows, json!(64), "#{table}");
    }
    let text = browser.eval("document.body.innerText").to_string();
    assert!(
        text.contains("and 4032 more rows, in report.json"),
        "the rest counted"
    );
    // The heatmap draws runs of 16 ranks, each cell its slowest, named;
    // the timeline 64 ranks, the others counted.
    let (cells, _) = chart(&mut browser, "chart-heatmap");
    assert!(cells <= 256 * 50, "{cells} heatmap cells");
    assert!(text.contains("16 consecutive ranks a column"), "{text}");
    assert!(text.contains("64 ranks are drawn"), "{text}");
    assert!(text.contains("4032 more are not"), "{text}");
    let label = browser.eval(
        "echarts.getInstanceByDom(document.getElementById('chart-heatmap'))
             .getOption().xAxis[0].data[1]",
    );
    assert_eq!(label, json!("ranks 16–31"));
    browser.screenshot(&artifact("report-4096-ranks.png"));
}
