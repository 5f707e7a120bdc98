//! Under MPI, rank 0's listener for the mirrors of the ranks that do not
//! see its session directory ([`MirrorHost`]), and the invitation to it
//! each rank accepts ([`accept_invitation`]): MPI gathers the payloads,
//! the window plans, statuses and payloads travel over TCP as under the
//! TCP transport.

use std::time::Duration;

use super::mirror::{Mirror, MirrorSettings};

/// Rank 0's listener for mirrors (and window controllers) alone, for a
/// transport that gathers otherwise (MPI): on `RANKSCOPE_ADDR` where set,
/// else on every IPv4 address, under its host's name, at a port the system
/// picks, with the job's token where it was given one, else a fresh one
/// that only the ranks are told ([`MirrorHost::invitation`]).
pub(crate) struct MirrorHost {
    _server: super::server::Server,
    endpoint: String,
    token: Vec<u8>,
}

impl MirrorHost {
    /// Listens for the session `session` of run `run_id`, as `config` says.
    pub(crate) fn start(
        config: &rankscope_common::Config,
        session: &crate::transport::SessionInfo<'_>,
        run_id: &str,
    ) -> Result<MirrorHost, crate::transport::TransportError> {
        let io = |source| crate::transport::TransportError::Io {
            path: "rank 0's listener for window files".into(),
            source,
        };
        let host = config.addr.clone();
        let listener =
            std::net::TcpListener::bind((host.as_deref().unwrap_or("0.0.0.0"), 0)).map_err(io)?;
        let port = listener.local_addr().map_err(io)?.port();
        let name = host.unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into());
        let token = match &config.token {
            Some(token) => token.as_bytes().to_vec(),
            None => super::token_file::fresh().map_err(io)?,
        };
        let settings = super::server::ServerSettings {
            serves: super::server::Serves::WindowFiles,
            relay: None,
            // Payloads go the transport's own way.
            senders: 1..1,
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
            _server: super::server::Server::start(listener, settings)?,
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

/// The mirror of rank `session.rank` of run `run_id`, to rank 0's
/// [`MirrorHost`] that sent `invitation`; `None` where it is no
/// invitation.
pub(crate) fn accept_invitation(
    invitation: &str,
    config: &rankscope_common::Config,
    session: &crate::transport::SessionInfo<'_>,
    run_id: &str,
) -> Option<Mirror> {
    let (endpoint, token) = invitation.split_once('\0')?;
    let windows = session.control?.clone();
    Mirror::start(MirrorSettings {
        endpoint: endpoint.to_string(),
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
