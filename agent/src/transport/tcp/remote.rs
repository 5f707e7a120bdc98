//! The command's side of window control over rank 0's listener
//! ([`Remote`]): what `rankscope trigger ENDPOINT` and `rankscope top
//! ENDPOINT` use. Built for the command alone (feature `remote-client`),
//! it is no part of the agent library's API; rank 0's side is `control.rs`.

use std::time::{Duration, Instant};

use rankscope_common::gather::ConnectionRefusal;
use rankscope_common::remote::{RemoteTrigger, StatusSnapshot, TriggerAnswer, MAX_REPORT_WAIT_MS};

use super::control::{AT_ONCE, CONTROLLER, SNAPSHOT_TIMEOUT};
use super::wire::{kind, purpose, sealed, write_frame};
use super::{Link, Unreached, HANDSHAKE_TIMEOUT};

/// The longest a controller waits for one answer: the longest wait rank 0
/// takes, and a minute.
const MAX_ANSWER_WAIT: Duration = Duration::from_millis(MAX_REPORT_WAIT_MS + 60_000);
/// The largest snapshot of statuses a controller reads: every status is
/// bounded (`LiveStatus::bounded`), 65,536 of them fit.
const MAX_SNAPSHOT_BYTES: u64 = 256 << 20;
/// The largest answer to a window request a controller reads (it names a
/// folder: a path may be long).
const MAX_ANSWER_BYTES: u64 = 64 << 10;

/// Why a controller got no answer from rank 0.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// Rank 0 could not be reached, or the exchange failed.
    #[error("rank 0 at {endpoint}: {reason}")]
    Unreached {
        /// Where rank 0 was looked for.
        endpoint: String,
        /// What failed.
        reason: String,
    },
    /// Rank 0 turned the controller away.
    #[error("rank 0 at {endpoint} turned this controller away: {why}")]
    Refused {
        /// Where rank 0 was looked for.
        endpoint: String,
        /// Why, as rank 0 said it (or the connection's end, where it said
        /// nothing).
        why: String,
    },
    /// The answer was not sealed with the token, or was no answer.
    #[error("rank 0 at {endpoint} answered with {what}")]
    Malformed {
        /// Where rank 0 was looked for.
        endpoint: String,
        /// What came.
        what: &'static str,
    },
}

/// A controller of a running session, reaching its rank 0 at `endpoint`
/// with the job's token.
pub struct Remote {
    endpoint: String,
    token: Vec<u8>,
}

/// A window request sent; its answers come one by one.
pub struct TriggerCall<'a> {
    remote: &'a Remote,
    link: Link,
}

impl Remote {
    /// A controller of the session whose rank 0 listens at `endpoint`
    /// (`host:port`), knowing the job's `token`.
    pub fn new(endpoint: &str, token: &[u8]) -> Self {
        Remote {
            endpoint: endpoint.to_string(),
            token: token.to_vec(),
        }
    }

    /// Asks for the window `asked` describes; its first answer is the plan
    /// (or a refusal), and where it asked to wait, the second says whether
    /// the report was written.
    pub fn trigger(&self, asked: &RemoteTrigger) -> Result<TriggerCall<'_>, RemoteError> {
        let mut link = self.open(purpose::TRIGGER)?;
        let body = serde_json::to_vec(asked).expect("a request serialises");
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        let sealed = sealed(
            &self.token,
            &link.challenge,
            &link.nonce,
            kind::REQUEST,
            &body,
        );
        write_frame(&mut link.stream, kind::REQUEST, &sealed, until)
            .map_err(|e| self.failed(e.into()))?;
        Ok(TriggerCall { remote: self, link })
    }

    /// Every rank's fresh status, as rank 0 reads them; the first call
    /// also asks the ranks to share theirs (each within a second).
    pub fn statuses(&self) -> Result<StatusSnapshot, RemoteError> {
        let mut link = self.open(purpose::STATUS)?;
        let until = Instant::now() + SNAPSHOT_TIMEOUT + HANDSHAKE_TIMEOUT;
        let body = self.reply(&mut link, kind::STATUSES, MAX_SNAPSHOT_BYTES, until)?;
        serde_json::from_slice(&body).map_err(|_| RemoteError::Malformed {
            endpoint: self.endpoint.clone(),
            what: "statuses that do not parse",
        })
    }

    fn open(&self, what: u8) -> Result<Link, RemoteError> {
        let until = Instant::now() + HANDSHAKE_TIMEOUT;
        Link::open(&self.endpoint, &self.token, (CONTROLLER, what), until)
            .map_err(|e| self.failed(e))
    }

    fn reply(
        &self,
        link: &mut Link,
        kind: u8,
        max: u64,
        until: Instant,
    ) -> Result<Vec<u8>, RemoteError> {
        link.reply(&self.token, kind, max, until)
            .map_err(|e| self.failed(e))
    }

    fn failed(&self, unreached: Unreached) -> RemoteError {
        let endpoint = self.endpoint.clone();
        let refused = |why: String| RemoteError::Refused {
            endpoint: endpoint.clone(),
            why,
        };
        match unreached {
            Unreached::Exchange(ConnectionRefusal::Closed) => refused(format!(
                "it closed the connection without an answer (is RANKSCOPE_TOKEN this job's \
                 token? rank 0 also turns away more than {AT_ONCE} controllers at once)"
            )),
            Unreached::Refused(refusal) => refused(refusal.why),
            Unreached::TokenRefused => refused("RANKSCOPE_TOKEN is not this job's token".into()),
            Unreached::Unsealed => RemoteError::Malformed {
                endpoint,
                what: "an answer not sealed with this token: it is not this job's rank 0",
            },
            other => RemoteError::Unreached {
                endpoint,
                reason: rankscope_common::error::Chain(&other).to_string(),
            },
        }
    }
}

impl TriggerCall<'_> {
    /// Rank 0's next answer (never [`TriggerAnswer::Waiting`]: those are
    /// passed over), waiting for it up to `wait` and a little more (rank 0
    /// answers within the waits asked for, telling that it waits every
    /// few seconds meanwhile).
    pub fn answer(&mut self, wait: Duration) -> Result<TriggerAnswer, RemoteError> {
        let wait = wait.min(MAX_ANSWER_WAIT) + HANDSHAKE_TIMEOUT;
        let until = Instant::now() + wait;
        let remote = self.remote;
        loop {
            let body = remote.reply(&mut self.link, kind::ANSWER, MAX_ANSWER_BYTES, until)?;
            let answer = serde_json::from_slice(&body).map_err(|_| RemoteError::Malformed {
                endpoint: remote.endpoint.clone(),
                what: "an answer that does not parse",
            })?;
            if answer != TriggerAnswer::Waiting {
                return Ok(answer);
            }
        }
    }
}
