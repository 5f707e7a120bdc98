//! What the listener's tests share: rank 0's listener of a small session.

use std::net::TcpListener;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use super::control::ServedControl;
use super::server::{Server, ServerSettings, Serves};
use crate::control::Inbox;
use crate::WindowControl;

/// The job token of the tests' sessions.
pub(super) const TOKEN: &[u8] = b"the job's token";

/// A listener in a test (rank 0's or a node leader's), where its endpoint
/// is, and its rank's windows: the inbox (the test answers it as the
/// windows thread would) and a handle.
pub(super) struct TestListener {
    pub(super) server: Server,
    pub(super) endpoint: String,
    pub(super) inbox: Inbox,
    pub(super) windows: WindowControl,
}

/// Rank 0's listener of a 2-rank session of run `r` in `dir`, serving
/// controllers and mirrors, its session said to run there
/// (`control/live`).
pub(super) fn rank_0(dir: &Path) -> TestListener {
    listener(dir, Serves::Rank0 { node_size: None }, (2, 1..2))
}

/// The listener that `serves`, of a session of `world_size` ranks of run
/// `r` in `dir`, taking the payloads of `senders`, serving window control,
/// its session said to run there (`control/live`).
pub(super) fn listener(
    dir: &Path,
    serves: Serves,
    (world_size, senders): (u32, Range<u32>),
) -> TestListener {
    let (windows, inbox) = WindowControl::new(std::sync::Arc::new(()));
    rankscope_common::window::write_live(dir, "here").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = listener.local_addr().unwrap().to_string();
    let settings = ServerSettings {
        serves,
        relay: None,
        senders,
        token: TOKEN.to_vec(),
        payload_timeout: Duration::from_secs(1),
        session_id: "s".into(),
        run_id: "r".into(),
        world_size,
        max_frame: 1 << 20,
        clock_shift_ns: 0,
        control: Some(ServedControl {
            session_dir: dir.to_path_buf(),
            windows: windows.clone(),
        }),
        check_node: |_, _| Ok(()),
    };
    TestListener {
        server: Server::start(listener, settings).unwrap(),
        endpoint,
        inbox,
        windows,
    }
}
