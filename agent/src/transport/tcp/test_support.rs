//! What the listener's tests share: rank 0's listener of a small session.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use super::control::ServedControl;
use super::server::{Server, ServerSettings, Serves};
use crate::control::Inbox;
use crate::WindowControl;

/// The job token of the tests' sessions.
pub(super) const TOKEN: &[u8] = b"the job's token";

/// Rank 0's listener in a test, where its endpoint is, and its windows
/// thread's inbox (the test answers it as the thread would).
pub(super) struct TestRank0 {
    pub(super) _server: Server,
    pub(super) endpoint: String,
    pub(super) inbox: Inbox,
}

/// Rank 0's listener of a 2-rank session of run `r` in `dir`, serving
/// controllers and mirrors, its session said to run there
/// (`control/live`).
pub(super) fn rank_0(dir: &Path) -> TestRank0 {
    let (windows, inbox) = WindowControl::new(std::sync::Arc::new(()));
    rankscope_common::window::write_live(dir, "here").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let settings = ServerSettings {
        serves: Serves::Rank0 { node_size: None },
        relay: None,
        senders: 1..2,
        token: TOKEN.to_vec(),
        payload_timeout: Duration::from_secs(1),
        session_id: "s".into(),
        run_id: "r".into(),
        world_size: 2,
        max_frame: 1 << 20,
        clock_shift_ns: 0,
        control: Some(ServedControl {
            session_dir: dir.to_path_buf(),
            windows,
        }),
        check_node: |_, _| Ok(()),
    };
    TestRank0 {
        _server: Server::start(listener, settings).unwrap(),
        endpoint,
        inbox,
    }
}
