//! How `rankscope trigger` and `rankscope top` reach a running session:
//! through its directory's control files, or through its rank 0's TCP
//! listener with the job's token, from a machine that cannot see the
//! directory.

use std::path::PathBuf;

use anyhow::{bail, Result};
use rankscope::transport::tcp::remote::Remote;

/// The environment variable that holds the job's token.
const TOKEN_VAR: &str = "RANKSCOPE_TOKEN";

/// A running session, as a command reaches it.
pub enum Reach {
    /// Its session directory.
    Dir(PathBuf),
    /// Its rank 0's listener (`host:port`).
    Endpoint(Remote),
}

impl Reach {
    /// The session at `endpoint` (with the token in `RANKSCOPE_TOKEN`), or
    /// else in `dir`: clap makes sure exactly one is given.
    pub fn of(endpoint: Option<String>, dir: Option<PathBuf>) -> Result<Self> {
        match (endpoint, dir) {
            (Some(endpoint), None) => {
                if std::path::Path::new(&endpoint).is_dir() {
                    bail!(
                        "`{endpoint}` is a folder, not rank 0's `host:port`: give a session \
                         directory as --dir {endpoint}"
                    );
                }
                let token = match std::env::var(TOKEN_VAR) {
                    Ok(token) if !token.is_empty() => token,
                    _ => bail!(
                        "{TOKEN_VAR} is not set: rank 0 at {endpoint} answers only those who know \
                         the job's token (the RANKSCOPE_TOKEN the job was given; a job given none \
                         on one machine is reached with --dir)"
                    ),
                };
                Ok(Reach::Endpoint(Remote::new(&endpoint, token.as_bytes())))
            }
            (None, Some(dir)) => Ok(Reach::Dir(dir)),
            _ => bail!("give rank 0's ENDPOINT or --dir SESSION_DIR, one of them"),
        }
    }
}
