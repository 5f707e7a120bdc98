//! The TCP transport with real processes and sockets on 127.0.0.1: rank 0
//! (a real rank program) gathers while strangers connect to it, and a
//! torchrun restart under the same run id.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;

mod support;
use support::{free_port, rank_program};

/// A rank of a torchrun-like job whose rank 0 listens at `port`.
fn rank(rank: u32, world: u32, out: &Path, port: u16, extra: &[(&str, &str)]) -> Child {
    rank_command(rank, world, out, port, extra).spawn().unwrap()
}

fn rank_command(rank: u32, world: u32, out: &Path, port: u16, extra: &[(&str, &str)]) -> Command {
    let mut command = rank_program();
    command
        .env("RANK", rank.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "1")
        .env("RANKSCOPE_PORT", port.to_string())
        .env("RANKSCOPE_TOKEN", "the-job-token")
        .env("TORCHELASTIC_RUN_ID", "tcp-test")
        .env("RANKSCOPE_OUTPUT_DIR", out)
        .env("RANKSCOPE_GPU_SOURCE", "none")
        .envs(extra.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn report(out: &Path) -> serde_json::Value {
    let dirs: Vec<PathBuf> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let text = std::fs::read_to_string(dirs[0].join("report.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Connects once rank 0 listens.
fn connect(port: u16) -> TcpStream {
    let started = Instant::now();
    loop {
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            return stream;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "rank 0 never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Reads a frame of `kind`.
fn read_frame(stream: &mut TcpStream, kind: u8) -> Vec<u8> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(head[0], kind);
    let mut body = vec![0u8; u64::from_le_bytes(head[1..].try_into().unwrap()) as usize];
    stream.read_exact(&mut body).unwrap();
    body
}

/// The run identity rank 0 gives rank 1 at its rendezvous.
fn rendezvous(port: u16) -> String {
    let mut stream = connect(port);
    greet_for(&mut stream, 1, b"the-job-token", 1);
    // The run identity, sealed by rank 0 (32 bytes of HMAC after it).
    let sealed = read_frame(&mut stream, 4);
    let run = String::from_utf8(sealed[..sealed.len() - 32].to_vec()).unwrap();
    for _ in 0..8 {
        read_frame(&mut stream, 5);
        stream.write_all(&frame(6, &0i64.to_le_bytes())).unwrap();
    }
    read_frame(&mut stream, 7);
    run
}

/// Reads rank 0's challenge and greets it as `rank` with `token`, for a
/// payload.
fn greet(stream: &mut TcpStream, rank: u32, token: &[u8]) {
    greet_for(stream, rank, token, 3);
}

fn greet_for(stream: &mut TcpStream, rank: u32, token: &[u8], purpose: u8) {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(head[0], 1, "a challenge comes first");
    let mut challenge = vec![0u8; u64::from_le_bytes(head[1..].try_into().unwrap()) as usize];
    stream.read_exact(&mut challenge).unwrap();
    let nonce = [9u8; 16];
    let mut mac = Hmac::<Sha256>::new_from_slice(token).unwrap();
    mac.update(&challenge);
    mac.update(&rank.to_le_bytes());
    mac.update(&[purpose]);
    mac.update(&nonce);
    let mut hello = rank.to_le_bytes().to_vec();
    hello.push(purpose);
    hello.extend_from_slice(&nonce);
    hello.extend_from_slice(&mac.finalize().into_bytes());
    stream.write_all(&frame(2, &hello)).unwrap();
}

/// Strangers, a payload of another session, a second payload of one rank
/// and a window payload for a window rank 0 never planned: each is cut off
/// and named in the report, nothing of theirs kept, and rank 0 finishes.
#[test]
fn strangers_are_cut_off_and_named_and_rank_zero_still_finishes() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let started = Instant::now();
    // A world of 3 whose ranks 1 and 2 never come: rank 0 listens until its deadline.
    let rank0 = rank(
        0,
        3,
        out.path(),
        port,
        &[("RANKSCOPE_GATHER_TIMEOUT_S", "6")],
    );

    // A peer with the wrong token.
    let mut wrong = connect(port);
    greet(&mut wrong, 1, b"a-guess");
    // A peer that announces a 4 GiB frame, then stalls.
    let mut huge = connect(port);
    greet(&mut huge, 1, b"the-job-token");
    huge.write_all(&[8]).unwrap();
    huge.write_all(&(4u64 << 30).to_le_bytes()).unwrap();
    // A peer that connects and never sends.
    let _silent = connect(port);
    // A peer that sends random bytes.
    let mut noise = connect(port);
    noise.write_all(&[0x5a; 200]).unwrap();
    // With the token: a payload of another session is refused; two
    // payloads claiming rank 1 in this run: one is taken, one refused.
    let run = rendezvous(port);
    let payload = |session: &str| {
        let mut header = rankscope_common::PayloadHeader::new(session, "t", 1, 3);
        header.session.run_id = Some(run.clone());
        let payload = rankscope_common::Payload {
            header,
            tables: Default::default(),
        };
        rankscope_common::payload::encode(&payload, rankscope_common::payload::Compression::Zstd)
            .unwrap()
    };
    for session in ["another-session", "tcp-test", "tcp-test"] {
        let mut claim = connect(port);
        greet(&mut claim, 1, b"the-job-token");
        claim.write_all(&frame(8, &payload(session))).unwrap();
        let mut answer = [0u8; 9];
        let _ = claim.read_exact(&mut answer);
    }
    // With the token: a window payload of rank 1 for a window rank 0 never
    // planned is refused before its bytes are read.
    let mut window = connect(port);
    greet_for(&mut window, 1, b"the-job-token", 8);
    let name = rankscope_common::spill::SpillName {
        rank: 1,
        run_id: Some(&run),
        process: 7,
    }
    .file_name();
    let named = format!("1000000000/{name}");
    window.write_all(&frame(18, named.as_bytes())).unwrap();
    let _ = window.write_all(&frame(8, b"not a payload"));
    let mut answer = [0u8; 9];
    let _ = window.read_exact(&mut answer);

    let output = rank0.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The deadline is 6 s; far less than this bound, rank 0 did not hang.
    assert!(started.elapsed() < Duration::from_secs(60));
    let report = report(out.path());
    let session = &report["session"];
    assert_eq!(session["transport"], "tcp");
    assert_eq!(
        session["ranks_missing"],
        serde_json::json!([2]),
        "only the peer with the token and this run's payload became rank 1"
    );
    let reasons: Vec<String> = session["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["reason"].as_str().unwrap().to_string())
        .collect();
    for expected in [
        "wrong job token",
        "more than the 268435456-byte limit",
        "went silent",
        "not the rankscope protocol",
        "a conflict: rank 1's payload already arrived from rank 1 over TCP from 127.0.0.1:",
        "it is another session's",
        "a payload of a window rank 0 did not plan",
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(expected)),
            "`{expected}` among {reasons:#?}"
        );
    }
    let dir = support::only_session_dir(out.path());
    assert!(!dir.join("window-1000000000").exists());
}

#[test]
fn a_torchrun_restart_under_the_same_run_id_gives_a_new_report() {
    let out = tempfile::tempdir().unwrap();
    for restart in ["0", "1"] {
        let port = free_port();
        let env = [("TORCHELASTIC_RESTART_COUNT", restart)];
        let ranks: Vec<Child> = (0..2).map(|r| rank(r, 2, out.path(), port, &env)).collect();
        for child in ranks {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let report = report(out.path());
        let run = report["session"]["run_id"].as_str().unwrap();
        assert!(run.starts_with(&format!("tcp-test.{restart}~")), "{run}");
        assert_eq!(
            report["session"]["ranks_reporting"],
            serde_json::json!([0, 1])
        );
        // Each report holds its own run: 2 ranks × 3 stages, not 4 × 3.
        assert_eq!(report["stages"][0]["count"], 6);
    }
}

#[test]
fn a_port_in_use_falls_back_to_the_session_directory() {
    let out = tempfile::tempdir().unwrap();
    // Someone else listens where rank 0 would: a port the system hands out,
    // held from the start, so no other process can take it first.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = squatter.local_addr().unwrap().port();
    // Rank 1 gives up on the rendezvous soon; rank 0 waits longer for its file.
    let ranks: Vec<Child> = [(0, "30"), (1, "2")]
        .into_iter()
        .map(|(r, timeout)| {
            rank(
                r,
                2,
                out.path(),
                port,
                &[("RANKSCOPE_GATHER_TIMEOUT_S", timeout)],
            )
        })
        .collect();
    let outputs: Vec<_> = ranks
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    for output in &outputs {
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(String::from_utf8_lossy(&outputs[0].stderr).contains("cannot listen"));
    let report = report(out.path());
    assert_eq!(report["session"]["transport"], "dir");
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );
}

#[test]
fn a_rank_killed_mid_session_is_named_missing_and_recovered_from_its_flushes() {
    use std::io::BufRead;
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let flush = ("RANKSCOPE_FLUSH_INTERVAL_S", "0.1");
    // Rank 1 records, then waits to be stopped: it never finishes.
    let mut rank1 = rank_command(1, 2, out.path(), port, &[flush])
        .arg("--wait-for-signal")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rank0 = rank(
        0,
        2,
        out.path(),
        port,
        &[("RANKSCOPE_GATHER_TIMEOUT_S", "4"), flush],
    );
    let mut ready = String::new();
    std::io::BufReader::new(rank1.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert!(ready.starts_with("ready"), "{ready}");
    // A flush after `ready` (it holds every step: host readings keep coming,
    // so flushes go on), then SIGKILL: no handler runs, nothing more is
    // written.
    let session_dir = PathBuf::from(ready.trim_start_matches("ready ").trim_end());
    let rank1_parts = || -> Vec<PathBuf> {
        let mut parts: Vec<PathBuf> = std::fs::read_dir(&session_dir)
            .map(|entries| entries.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default();
        parts.retain(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.starts_with("rank-00001.") && name.ends_with(".part")
        });
        parts
    };
    let before = rank1_parts();
    let waited = std::time::Instant::now();
    while rank1_parts().iter().all(|p| before.contains(p)) {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "no flush after a minute"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    rank1.kill().unwrap();
    rank1.wait().unwrap();

    let output = rank0.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written = report(out.path());
    assert_eq!(written["session"]["ranks_missing"], serde_json::json!([1]));

    // Later, the spill files and the dead rank's flushes rebuild the report.
    let dir = std::fs::read_dir(out.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let config = rankscope_coordinator::AnalysisConfig::default();
    let aggregated = rankscope_coordinator::aggregate::aggregate(
        &dir,
        None,
        None,
        rankscope_coordinator::aggregate::Outputs::All,
        &config,
    )
    .unwrap();
    let session = &aggregated.report.session;
    assert!(
        session.ranks_missing.is_empty(),
        "{:?}",
        session.ranks_missing
    );
    let dead = &aggregated.report.ranks[1];
    assert!(
        dead.partial,
        "rank 1 is there up to its last flush, and says so"
    );
    let steps = aggregated
        .report
        .stages
        .iter()
        .find(|s| s.name == "denoise_step")
        .unwrap();
    assert_eq!(
        steps.count, 6,
        "rank 1's three flushed steps with rank 0's three"
    );
    assert!(!aggregated.is_complete());
}

/// 80 strangers reconnecting without the token while a 4-rank job runs
/// (more than rank 0 keeps waiting to authenticate) keep no rank out: the
/// oldest connection not greeted yet is cut off for each new one, a rank
/// greets in one round trip, and a rank cut off before that tries again
/// until its deadline, so no rank depends on winning a race.
#[test]
fn a_flood_of_strangers_keeps_no_rank_out_of_the_gather() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let timeout = ("RANKSCOPE_GATHER_TIMEOUT_S", "60");
    let rank0 = rank(0, 4, out.path(), port, &[timeout]);
    drop(connect(port));
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..80)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    // Connect, say nothing, wait until cut off (or 2 s).
                    if let Ok(mut stranger) = TcpStream::connect(("127.0.0.1", port)) {
                        let _ = stranger.set_read_timeout(Some(Duration::from_secs(2)));
                        let mut sink = [0u8; 64];
                        while matches!(stranger.read(&mut sink), Ok(n) if n > 0) {}
                    }
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    every_rank_reports(rank0, out.path(), port, &[timeout]);
    stop.store(true, Ordering::SeqCst);
    for thread in flood {
        thread.join().unwrap();
    }
}

/// Starts ranks 1 to 3 of a 4-rank job beside `rank0`, waits for the four
/// (each must succeed), checks that every rank is in the report with its
/// clock offset measured (it met rank 0 at its rendezvous), and returns
/// the report.
fn every_rank_reports(
    rank0: Child,
    out: &Path,
    port: u16,
    extra: &[(&str, &str)],
) -> serde_json::Value {
    let mut ranks: Vec<Child> = (1..4).map(|r| rank(r, 4, out, port, extra)).collect();
    ranks.push(rank0);
    support::wait_all(ranks, &[]);
    let report = report(out);
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1, 2, 3])
    );
    let ranks = report["ranks"].as_array().unwrap();
    assert!(
        ranks.iter().all(|r| !r["clock_offset_ns"].is_null()),
        "{ranks:?}"
    );
    report
}

/// A 4-rank job whose rank 0 `peers` peers with the token reach first,
/// each claiming rank 3 for a payload and writing what `write` writes
/// until it returns or the job is over (the flag it is given); the
/// report, every rank in it ([`every_rank_reports`]).
fn job_beside_peers_claiming_rank_3(
    peers: usize,
    write: fn(&mut TcpStream, &AtomicBool),
) -> serde_json::Value {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let timeout = ("RANKSCOPE_GATHER_TIMEOUT_S", "60");
    let rank0 = rank(0, 4, out.path(), port, &[timeout]);
    drop(connect(port));
    let done = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..peers)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut peer = connect(port);
                greet(&mut peer, 3, b"the-job-token");
                write(&mut peer, &done);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let report = every_rank_reports(rank0, out.path(), port, &[timeout]);
    done.store(true, Ordering::SeqCst);
    for thread in threads {
        thread.join().unwrap();
    }
    report
}

/// Forty peers with the token that claim rank 3 and drip a payload frame
/// a byte a second, before the ranks start: they take rank 3's own places
/// alone (the other ranks get in at once), and lose them within the pace's
/// grace, so rank 3, refused while they hold them, tries again and gets
/// in. Every rank is in the report with its clock offset, and the drips
/// are named.
#[test]
fn peers_with_the_token_dripping_frames_keep_no_rank_out() {
    let report = job_beside_peers_claiming_rank_3(40, |peer, done| {
        let mut frame = vec![8u8];
        frame.extend_from_slice(&1000u64.to_le_bytes());
        frame.resize(9 + 1000, 0);
        for byte in frame.chunks(1) {
            if done.load(Ordering::SeqCst) || peer.write_all(byte).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    let skipped = report["session"]["skipped"].to_string();
    assert!(skipped.contains("slower than"), "{skipped}");
}

/// Two peers with the token claim rank 3 and each send a 256 MiB frame at
/// a little over the least pace: together they hold all the frame bytes
/// rank 0 takes at once. The ranks' payloads that wait for room have the
/// slowest of them cut off after a second, so every rank is in the report
/// and the cut is named.
#[test]
fn frames_dripped_at_the_least_pace_cannot_keep_the_budget_from_the_ranks() {
    let report = job_beside_peers_claiming_rank_3(2, |peer, done| {
        let mut head = vec![8u8];
        head.extend_from_slice(&(256u64 << 20).to_le_bytes());
        peer.write_all(&head).unwrap();
        let chunk = vec![0u8; 64 << 10];
        while !done.load(Ordering::SeqCst) && peer.write_all(&chunk).is_ok() {
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let skipped = report["session"]["skipped"].to_string();
    assert!(skipped.contains("slower than 16777216"), "{skipped}");
}

/// Rank 1 does not meet rank 0 at its rendezvous (its token is not the
/// job's): it says so on its standard error though it is a quiet rank,
/// and spills under the launcher's run; rank 0 takes that spill file as
/// this run's, so both ranks are in the report, with rank 1's notice.
#[test]
fn a_rank_that_did_not_meet_rank_0_is_taken_from_its_spill_file() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let timeout = ("RANKSCOPE_GATHER_TIMEOUT_S", "8");
    let rank0 = rank(0, 2, out.path(), port, &[timeout]);
    drop(connect(port));
    let rank1 = rank(
        1,
        2,
        out.path(),
        port,
        &[timeout, ("RANKSCOPE_TOKEN", "not-the-job-token")],
    );
    let rank1 = rank1.wait_with_output().unwrap();
    let rank0 = rank0.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&rank1.stderr);
    assert!(rank1.status.success() && rank0.status.success(), "{said}");
    assert!(
        said.contains("rank 1: this rank did not meet rank 0")
            && said.contains("its job token is not this rank's"),
        "{said}"
    );
    let report = report(out.path());
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );
    let notices = report["session"]["notices"].as_array().unwrap();
    assert!(
        notices.iter().any(|n| n["ranks"] == serde_json::json!([1])
            && n["message"]
                .as_str()
                .unwrap()
                .contains("did not meet rank 0")),
        "{notices:?}"
    );
}

/// A peer with the token that claims to lead node 1 (ranks 2 and 3 of two
/// nodes of two) and sends rank 0 garbage as its node digest before the
/// real leader: the garbage is refused and named, and the node is still
/// awaited, so its ranks are in the report.
#[test]
fn a_garbage_node_digest_leaves_the_node_awaited_from_its_real_leader() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let on_node = |rank: u32| {
        [
            ("LOCAL_RANK", (rank % 2).to_string()),
            ("LOCAL_WORLD_SIZE", "2".to_string()),
            ("RANKSCOPE_NODE", format!("node-{}", rank / 2)),
            ("RANKSCOPE_GATHER_TIMEOUT_S", "60".to_string()),
        ]
    };
    let start = |r: u32| {
        let env = on_node(r);
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        rank(r, 4, out.path(), port, &env)
    };
    let rank0 = start(0);
    let mut forger = connect(port);
    greet_for(&mut forger, 2, b"the-job-token", 4);
    forger
        .write_all(&frame(10, b"RSND not a node digest at all"))
        .unwrap();
    // Rank 0 read the frame and refused it: it closes the connection.
    let mut sink = Vec::new();
    let _ = forger.read_to_end(&mut sink);
    let mut ranks: Vec<Child> = (1..4).map(start).collect();
    ranks.push(rank0);
    support::wait_all(ranks, &[]);
    let report = report(out.path());
    let session = &report["session"];
    assert_eq!(session["ranks_reporting"], serde_json::json!([0, 1, 2, 3]));
    let skipped = session["skipped"].to_string();
    assert!(
        skipped.contains("a node digest refused"),
        "the forged digest is named: {skipped}"
    );
}

/// Ten peers with the token announce 200 MiB frames, send 60 MiB of each
/// and stall, while the real rank 1 sends its payload: rank 0 holds at
/// most its budget of frame bytes (a frame takes its whole length from it
/// before its body is read), so the stalled frames cannot share out the
/// budget among themselves and keep rank 1's small one waiting until the
/// deadline; and rank 0's memory stays bounded. The largest resident set
/// of this test binary's children is rank 0's here: the other tests'
/// ranks stay far below it.
#[test]
fn peers_sending_large_frames_at_once_share_a_bounded_budget() {
    let out = tempfile::tempdir().unwrap();
    let port = free_port();
    let timeout = ("RANKSCOPE_GATHER_TIMEOUT_S", "20");
    let rank0 = rank(0, 2, out.path(), port, &[timeout]);
    drop(connect(port));
    let done = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..10)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                let mut sender = connect(port);
                greet(&mut sender, 1, b"the-job-token");
                let mut head = vec![8u8];
                head.extend_from_slice(&(200u64 << 20).to_le_bytes());
                let _ = sender.write_all(&head);
                let _ = sender.set_write_timeout(Some(Duration::from_secs(1)));
                let mib = vec![0u8; 1 << 20];
                for _ in 0..60 {
                    if done.load(Ordering::SeqCst) || sender.write_all(&mib).is_err() {
                        break;
                    }
                }
                // Stalled, the frame unfinished, until the job is over.
                while !done.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let rank1 = rank(1, 2, out.path(), port, &[timeout]);
    for child in [rank1, rank0] {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    done.store(true, Ordering::SeqCst);
    for sender in senders {
        sender.join().unwrap();
    }
    let report = report(out.path());
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1]),
        "rank 1's payload got through the stalled frames"
    );
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) },
        0
    );
    // SAFETY: written by the successful call above.
    let peak_mib = unsafe { usage.assume_init() }.ru_maxrss / 1024;
    assert!(
        peak_mib < 400,
        "rank 0 peaked at {peak_mib} MiB for 600 MiB of frames"
    );
}

/// A job on one machine given no RANKSCOPE_TOKEN (torchrun's variables
/// alone): rank 0 makes a secret and leaves it in an owner-only file of the
/// session directory for the others. Someone who derives the token from
/// the launcher's variables, as every rank did before, is refused; the
/// real ranks report, and none says its token is public.
#[test]
fn without_a_token_a_one_machine_job_shares_a_secret_the_variables_do_not_give() {
    use std::os::unix::fs::PermissionsExt;
    let out = tempfile::tempdir().unwrap();
    let master_port = free_port() - 1;
    let endpoint = format!("127.0.0.1:{}", master_port + 1);
    let rank0 = support::torchrun_rank(0, 2, out.path(), master_port)
        .args(["--steps", "100"])
        .spawn()
        .unwrap();
    // What the public derivation gives: the run id and the endpoint.
    let mut hasher = <Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut hasher, b"rankscope job token\0");
    sha2::Digest::update(&mut hasher, b"agent-only-test");
    sha2::Digest::update(&mut hasher, b"\0");
    sha2::Digest::update(&mut hasher, endpoint.as_bytes());
    let derived = sha2::Digest::finalize(hasher).to_vec();
    let mut forger = connect(master_port + 1);
    greet_for(&mut forger, 1, &derived, 1);
    // Rank 0 refuses it (kind 19), and gives it no run (kind 4).
    let mut answer = [0u8; 1];
    let refused = matches!(forger.read(&mut answer), Ok(0) | Err(_)) || answer[0] == 19;
    assert!(
        refused,
        "rank 0 answered a greeting under the derived token: {answer:?}"
    );
    let rank1 = support::torchrun_rank(1, 2, out.path(), master_port)
        .args(["--steps", "100"])
        .spawn()
        .unwrap();
    support::wait_all(vec![rank0, rank1], &[]);
    let report = report(out.path());
    assert_eq!(
        report["session"]["ranks_reporting"],
        serde_json::json!([0, 1])
    );
    let notices = report["session"]["notices"].to_string();
    assert!(!notices.contains("no RANKSCOPE_TOKEN"), "{notices}");
    let session = support::only_session_dir(out.path());
    let token_files: Vec<_> = std::fs::read_dir(&session)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".rankscope-tcp-")
        })
        .collect();
    assert_eq!(token_files.len(), 1);
    let mode = token_files[0].metadata().unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}
