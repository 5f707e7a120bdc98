//! The session lifecycle seen from a transport and a reporter that the
//! program hands in: the transport opens when the session starts, gathers
//! when it finishes, and what its rendezvous established reaches the
//! payload and the report.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rankscope::transport::dir::DirTransport;
use rankscope::transport::{Rendezvous, SessionInfo, Transport, TransportError};
use rankscope::{Config, Gathered, Profiler, RankEnv, ReportFiles, Reporter};
use rankscope_common::payload::{ClockOffset, ClockSync, TransportName};

/// Delegates to the directory transport, records what it is asked, and
/// reports an offset as a transport that measured one would.
#[derive(Default)]
struct Recording {
    calls: Arc<Mutex<Vec<String>>>,
    inner: DirTransport,
}

const OFFSET: ClockOffset = ClockOffset {
    offset_ns: -1_500,
    round_trip_ns: 8_000,
};

impl Transport for Recording {
    fn name(&self) -> TransportName {
        TransportName::Dir
    }

    fn open(
        &mut self,
        session: &SessionInfo<'_>,
        _deadline: Instant,
    ) -> Result<Rendezvous, TransportError> {
        self.calls.lock().unwrap().push(format!(
            "open {} proposed {:?}",
            session.session_id, session.run_id
        ));
        Ok(Rendezvous {
            run_id: Some("agreed-run".into()),
            clock_sync: ClockSync::TcpPingpong,
            offset: Some(OFFSET),
            endpoint: None,
        })
    }

    fn gather(
        &mut self,
        payload: &[u8],
        session: &SessionInfo<'_>,
        deadline: Instant,
    ) -> Result<Option<Gathered>, TransportError> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("gather run {:?}", session.run_id));
        self.inner.gather(payload, session, deadline)
    }
}

/// Counts its reports and writes nothing.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Reporter for Counting {
    fn report(
        &self,
        gathered: &Gathered,
        _dir: &Path,
        _config: &Config,
    ) -> Result<ReportFiles, Box<dyn std::error::Error + Send + Sync>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(ReportFiles {
            files: Vec::new(),
            summary: format!("{} payloads", gathered.payloads.len()),
        })
    }
}

fn config(out: &Path) -> Config {
    Config {
        output_dir: out.into(),
        session_id: Some("job-7".into()),
        gpu_source: rankscope_common::config::GpuSourceKind::None,
        collect_host: false,
        ..Config::default()
    }
}

#[test]
fn a_program_transport_opens_at_start_and_gathers_at_finish_each_session() {
    let out = tempfile::tempdir().unwrap();
    let transport = Recording::default();
    let calls = Arc::clone(&transport.calls);
    let profiler = Profiler::builder(config(out.path()))
        .rank_env(RankEnv::single())
        .transport(transport)
        .build()
        .unwrap();

    let session = profiler.session("job", &[]).unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        ["open job-7 proposed None"],
        "the rendezvous happens when the session starts"
    );
    drop(profiler.stage("work"));
    let outcome = session.finish().unwrap();
    assert_eq!(calls.lock().unwrap().len(), 2);
    assert_eq!(calls.lock().unwrap()[1], "gather run Some(\"agreed-run\")");

    // What the rendezvous established is in the payload and the report.
    let bytes = std::fs::read(&outcome.spill_file).unwrap();
    let header = rankscope_common::payload::decode(&bytes).unwrap().header;
    assert_eq!(header.session.run_id.as_deref(), Some("agreed-run"));
    assert_eq!(header.clock.offset_to_rank0, Some(OFFSET));
    assert_eq!(header.clock_sync, ClockSync::TcpPingpong);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(outcome.session_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["session"]["clock_sync"], "tcp-pingpong");
    assert_eq!(report["session"]["run_id"], "agreed-run");
    assert_eq!(report["ranks"][0]["clock_offset_ns"], -1_500);
    assert_eq!(report["ranks"][0]["clock_round_trip_ns"], 8_000);

    // The same transport serves the next session.
    profiler.session("job", &[]).unwrap().finish().unwrap();
    assert_eq!(calls.lock().unwrap().len(), 4);
}

#[test]
fn a_program_reporter_replaces_the_default_report() {
    let out = tempfile::tempdir().unwrap();
    let reporter = Arc::new(Counting::default());
    let profiler = Profiler::builder(config(out.path()))
        .rank_env(RankEnv::single())
        .reporter(reporter.clone())
        .build()
        .unwrap();
    let outcome = profiler.session("job", &[]).unwrap().finish().unwrap();
    assert_eq!(reporter.0.load(Ordering::Relaxed), 1);
    assert_eq!(outcome.report.unwrap().summary, "1 payloads");
    assert!(!outcome.session_dir.join("report.json").exists());
}

#[test]
fn without_a_reporter_set_rank_zero_writes_the_report() {
    let out = tempfile::tempdir().unwrap();
    let profiler = Profiler::with_rank_env(config(out.path()), RankEnv::single());
    let outcome = profiler.session("job", &[]).unwrap().finish().unwrap();
    let files = outcome.report.expect("the default reporter ran").files;
    assert!(files.contains(&outcome.session_dir.join("report.json")));
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(outcome.session_dir.join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["session"]["transport"], "dir");
    assert_eq!(report["session"]["clock_sync"], "none");
    assert!(report["ranks"][0]["clock_offset_ns"].is_null());
}
