//! Under MPI, rank 0's listener for the mirrors of the ranks that do not
//! see its session directory ([`MirrorHost`]), and the invitation to it
//! each rank accepts ([`accept_invitation`]): MPI gathers the payloads,
//! the window plans, statuses and payloads travel over TCP as under the
//! TCP transport. Where the job has nodes, each node's leader (but rank
//! 0's) hosts its node's mirrors on loopback as well
//! ([`MirrorHost::for_node`]), and relays them, as under TCP.

use std::net::TcpListener;
use std::ops::Range;
use std::time::Duration;

use super::mirror::{Mirror, MirrorSettings};
use super::server::{Server, ServerSettings, Serves};
use crate::transport::{SessionInfo, TransportError};

/// A listener for mirrors (and, rank 0's, window controllers) alone, for
/// a transport that gathers otherwise (MPI): rank 0's on `RANKSCOPE_ADDR`
/// where set, else on every IPv4 address, under its host's name, at
/// `RANKSCOPE_PORT` where set, else a port the system picks, with the
/// job's token where it was given one, else a fresh one that only the
/// ranks are told ([`MirrorHost::invitation`]); a node leader's on
/// loopback, with rank 0's token.
pub(crate) struct MirrorHost {
    _server: Server,
    endpoint: String,
    token: Vec<u8>,
}

impl MirrorHost {
    /// Rank 0's, for the session `session` of run `run_id`, as `config`
    /// says, taking the statuses relayed by the leaders of nodes of
    /// `node_size` ranks.
    pub(crate) fn start(
        config: &rankscope_common::Config,
        session: &SessionInfo<'_>,
        run_id: &str,
        node_size: Option<u32>,
    ) -> Result<MirrorHost, TransportError> {
        let host = config.addr.clone();
        let address = (
            host.as_deref().unwrap_or("0.0.0.0"),
            config.port.unwrap_or(0),
        );
        let listener = TcpListener::bind(address).map_err(io)?;
        let name = host.unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into());
        let token = match &config.token {
            Some(token) => token.as_bytes().to_vec(),
            None => super::token_file::fresh().map_err(io)?,
        };
        let serves = Serves::WindowFiles { node_size };
        Self::serve(
            listener,
            &name,
            (serves, 1..1),
            token,
            (config, session, run_id),
        )
    }

    /// A node leader's, on loopback, for its node's ranks `members`, with
    /// the `token` of rank 0's invitation.
    pub(crate) fn for_node(
        config: &rankscope_common::Config,
        session: &SessionInfo<'_>,
        run_id: &str,
        (members, token): (Range<u32>, &[u8]),
    ) -> Result<MirrorHost, TransportError> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io)?;
        let serves = (Serves::NodeWindowFiles, members);
        Self::serve(
            listener,
            "127.0.0.1",
            serves,
            token.to_vec(),
            (config, session, run_id),
        )
    }

    /// Serves `listener`, reached as `name`, for `serves` and its
    /// `senders`.
    fn serve(
        listener: TcpListener,
        name: &str,
        (serves, senders): (Serves, Range<u32>),
        token: Vec<u8>,
        (config, session, run_id): (&rankscope_common::Config, &SessionInfo<'_>, &str),
    ) -> Result<MirrorHost, TransportError> {
        let port = listener.local_addr().map_err(io)?.port();
        let settings = ServerSettings {
            serves,
            relay: None,
            // Payloads go the transport's own way: none is taken here
            // (a leader's `senders` are its node's mirrors).
            senders,
            token: token.clone(),
            payload_timeout: Duration::from_secs_f64(config.gather_timeout_s),
            session_id: session.session_id.to_string(),
            run_id: run_id.to_string(),
            world_size: session.world_size,
            max_frame: config.max_frame_bytes,
            clock_shift_ns: config.clock_shift_ns,
            control: session
                .control
                .map(|windows| super::control::ServedControl {
                    session_dir: session.session_dir.to_path_buf(),
                    windows: windows.clone(),
                }),
            check_node: |_, _| Err("no node digest is taken here".into()),
        };
        Ok(MirrorHost {
            _server: Server::start(listener, settings)?,
            endpoint: format!("{name}:{port}"),
            token,
        })
    }

    /// What the other ranks are told to reach it: its endpoint and the
    /// token, NUL-separated (neither holds one).
    pub(crate) fn invitation(&self) -> String {
        format!(
            "{}\0{}",
            self.endpoint,
            String::from_utf8_lossy(&self.token)
        )
    }
}

/// A listener's error, named.
fn io(source: std::io::Error) -> TransportError {
    TransportError::Io {
        path: "a listener for window files".into(),
        source,
    }
}

/// The mirror of rank `session.rank` of run `run_id`, to rank 0's
/// [`MirrorHost`] that sent `invitation` or, where given, to its node
/// leader's at `through` (window payloads still go to rank 0's); `None`
/// where it is no invitation.
pub(crate) fn accept_invitation(
    invitation: &str,
    config: &rankscope_common::Config,
    session: &SessionInfo<'_>,
    (run_id, through): (&str, Option<&str>),
) -> Option<Mirror> {
    let (endpoint, token) = invitation.split_once('\0')?;
    let windows = session.control?.clone();
    Mirror::start(MirrorSettings {
        endpoint: through.unwrap_or(endpoint).to_string(),
        payload_endpoint: endpoint.to_string(),
        token: token.as_bytes().to_vec(),
        rank: session.rank,
        session_dir: session.session_dir.to_path_buf(),
        run_id: run_id.to_string(),
        max_frame: config.max_frame_bytes,
        payload_timeout: Duration::from_secs_f64(config.gather_timeout_s),
        windows,
    })
}
