//! Starts the rank processes of a local job: N copies of one program, each
//! told its rank, the world size and the job's session and run ids, with
//! their standard output read line by line — as processes of this launcher
//! ([`Launch::Local`]) or under a real `mpirun` ([`Launch::Mpirun`]), which
//! gives the ranks their places and the job its id. `rankscope demo` and
//! `rankscope launch` use it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result};

/// How often a waiting launcher looks at its ranks.
const POLL: Duration = Duration::from_millis(50);

/// Who starts the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Launch {
    /// This launcher, one process per rank, with the variables torchrun
    /// sets (the ranks gather over TCP).
    Local,
    /// Open MPI's `mpirun` (ranks gather over MPI).
    Mpirun,
}

/// A local job to start.
pub struct Job<'a> {
    /// The program every rank runs.
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [String],
    /// Number of ranks.
    pub ranks: u32,
    /// Variables every rank gets, beside the rank variables.
    pub env: &'a [(String, String)],
    /// MASTER_PORT (rank 0 of the program's own rendezvous); a free one
    /// when `None`, and then rankscope's listener gets a free one too.
    pub master_port: Option<u16>,
    /// Nodes the ranks stand for, each its share of consecutive ranks:
    /// past one, simulated on this machine ([`Launch::Local`] only).
    pub nodes: u32,
}

/// Which of a rank's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Standard output.
    Out,
    /// Standard error.
    Err,
}

/// Called with each line a rank writes.
pub type LineHandler = Arc<dyn Fn(u32, Output, &str) + Send + Sync>;

/// The running ranks of a job. Dropping it before [`Ranks::wait`] returned
/// kills and reaps every rank still running, so a failed start leaves none
/// behind.
pub struct Ranks {
    children: Children,
    readers: Vec<JoinHandle<()>>,
}

/// The rank processes, each with its exit status once reaped. Reaped only
/// under the lock, which a signal sent takes too: a process not reaped yet
/// keeps its pid, so a signal never reaches a stranger that reuses it.
#[derive(Clone, Default)]
pub struct Children(Arc<Mutex<Vec<RankProcess>>>);

/// A rank's process, and its exit status once reaped.
type RankProcess = (Child, Option<ExitStatus>);

impl Children {
    fn lock(&self) -> MutexGuard<'_, Vec<RankProcess>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `signal` to every rank not reaped yet; returns how many.
    pub fn signal(&self, signal: i32) -> usize {
        let children = self.lock();
        let mut sent = 0;
        for (child, _) in children.iter().filter(|(_, status)| status.is_none()) {
            // SAFETY: kill has no memory effects; the child is not reaped
            // (the lock is held), so its pid is still its own.
            if unsafe { libc::kill(child.id() as libc::pid_t, signal) } == 0 {
                sent += 1;
            }
        }
        sent
    }

    /// Reaps the ranks that exited; returns how many have.
    fn reap(&self) -> Result<usize> {
        let mut children = self.lock();
        for (child, status) in children.iter_mut().filter(|(_, s)| s.is_none()) {
            *status = child.try_wait().context("waiting for a rank")?;
        }
        Ok(children.iter().filter(|(_, s)| s.is_some()).count())
    }
}

/// Starts every rank of `job`; `on_line` sees their output lines (with the
/// rank under [`Launch::Local`]; under `mpirun`, whose one output carries
/// every rank's, with 0).
pub fn start(launch: Launch, job: &Job<'_>, job_id: &str, on_line: LineHandler) -> Result<Ranks> {
    let mut ranks = Ranks {
        children: Children::default(),
        readers: Vec::new(),
    };
    match launch {
        Launch::Local => {
            let (master_port, listener_port) = match job.master_port {
                Some(port) => (port, None),
                None => (free_port()?, Some(free_port()?)),
            };
            // A secret of this launch's for the ranks' TCP gather (unless
            // the user gave one): no one else can derive it.
            let token = match std::env::var("RANKSCOPE_TOKEN") {
                Ok(token) if !token.is_empty() => token,
                _ => fresh_token()?,
            };
            let env = LocalRankEnv {
                master_port,
                listener_port,
                job_id,
                token: &token,
            };
            for rank in 0..job.ranks {
                ranks.spawn(env.command(job, rank), job, rank, &on_line)?;
            }
        }
        Launch::Mpirun => {
            ranks
                .spawn(mpirun_command(job), job, 0, &on_line)
                .context("starting mpirun (is Open MPI installed? apt-get install openmpi-bin)")?;
        }
    }
    Ok(ranks)
}

/// What every rank of a [`Launch::Local`] job is told beside its rank.
struct LocalRankEnv<'a> {
    /// MASTER_PORT.
    master_port: u16,
    /// RANKSCOPE_PORT, where rankscope picked it.
    listener_port: Option<u16>,
    /// TORCHELASTIC_RUN_ID.
    job_id: &'a str,
    /// RANKSCOPE_TOKEN.
    token: &'a str,
}

impl LocalRankEnv<'_> {
    /// The command of rank `rank` of `job`, with what torchrun sets: for
    /// a job of several nodes, as on its node, named in `RANKSCOPE_NODE`
    /// (`simulated-node-<n>`).
    fn command(&self, job: &Job<'_>, rank: u32) -> Command {
        // What torchrun sets (a fresh run id per launch).
        let per_node = job.ranks.div_ceil(job.nodes.max(1));
        let node = rank / per_node;
        let mut command = Command::new(job.program);
        command
            .args(job.args)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", (rank % per_node).to_string())
            .env("GROUP_RANK", node.to_string())
            .env("WORLD_SIZE", job.ranks.to_string())
            .env("LOCAL_WORLD_SIZE", per_node.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", self.master_port.to_string())
            .env("TORCHELASTIC_RUN_ID", self.job_id)
            .env("TORCHELASTIC_RESTART_COUNT", "0")
            .env("RANKSCOPE_TOKEN", self.token);
        if let Some(port) = self.listener_port {
            command.env("RANKSCOPE_PORT", port.to_string());
        }
        if job.nodes > 1 {
            command.env("RANKSCOPE_NODE", format!("simulated-node-{node}"));
        }
        // A process group of its own: a terminal's Ctrl-C reaches the
        // launcher alone, which passes it on once.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        command
    }
}

/// The `mpirun` command that starts every rank of `job`.
fn mpirun_command(job: &Job<'_>) -> Command {
    // mpirun gives the ranks their places and the job its id; the
    // ranks inherit this environment on this machine.
    let mut command = Command::new("mpirun");
    command
        .args(["-n", &job.ranks.to_string(), "--oversubscribe"])
        .arg(job.program)
        .args(job.args);
    if is_root() {
        // Open MPI refuses to run as root unless told it is meant.
        command
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    command
}

/// 32 random bytes, in hex.
fn fresh_token() -> Result<String> {
    random_hex(32, "the job token")
}

/// `len` random bytes in hex, for `what`.
pub(crate) fn random_hex(len: usize, what: &str) -> Result<String> {
    let mut bytes = vec![0u8; len];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for {what}: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A TCP port nobody listens on now.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

impl Ranks {
    /// Starts `command` with the job's variables, its output read as `rank`'s.
    fn spawn(
        &mut self,
        mut command: Command,
        job: &Job<'_>,
        rank: u32,
        on_line: &LineHandler,
    ) -> Result<()> {
        command
            .envs(job.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .with_context(|| format!("starting rank {rank} ({})", job.program.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        self.children.lock().push((child, None));
        for (stream, output) in [
            (
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
                Output::Out,
            ),
            (Box::new(stderr), Output::Err),
        ] {
            let on_line = Arc::clone(on_line);
            self.readers.push(std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    on_line(rank, output, &line);
                }
            }));
        }
        Ok(())
    }

    /// The rank processes (mpirun, under mpirun), to signal.
    pub fn children(&self) -> Children {
        self.children.clone()
    }

    /// Waits for every rank to exit; `progress` is called with the number
    /// of ranks finished each time the launcher looks. Returns the exit
    /// status of each rank, by rank.
    pub fn wait(mut self, mut progress: impl FnMut(usize)) -> Result<Vec<ExitStatus>> {
        let ranks = self.children.lock().len();
        loop {
            let done = self.children.reap()?;
            progress(done);
            if done == ranks {
                break;
            }
            std::thread::sleep(POLL);
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        let statuses = self
            .children
            .lock()
            .drain(..)
            .filter_map(|(_, s)| s)
            .collect();
        Ok(statuses)
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        // Every rank reaped here has its status kept: the signal thread,
        // which may outlive this, then passes over its pid.
        for (child, status) in self.children.lock().iter_mut() {
            if status.is_some() {
                continue;
            }
            *status = match child.try_wait() {
                Ok(Some(exited)) => Some(exited),
                _ => {
                    let _ = child.kill();
                    child.wait().ok()
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn start_local(program: &str, args: &[String], ranks: u32) -> Ranks {
        let job = Job {
            program: Path::new(program),
            args,
            ranks,
            env: &[],
            master_port: None,
            nodes: 1,
        };
        start(Launch::Local, &job, "signals", Arc::new(|_, _, _| {})).unwrap()
    }

    /// A running rank gets the signal; once reaped, none does (its pid may
    /// be a stranger's by then).
    #[test]
    fn signals_reach_running_ranks_and_never_a_reaped_ones_pid() {
        let ranks = start_local("sleep", &["30".to_string()], 2);
        let children = ranks.children();
        assert_eq!(children.signal(libc::SIGTERM), 2);
        let statuses = ranks.wait(|_| {}).unwrap();
        assert!(statuses.iter().all(|s| s.signal() == Some(libc::SIGTERM)));
        assert_eq!(children.signal(libc::SIGTERM), 0, "no rank left to signal");

        // Reaped and still listed: passed over.
        let ranks = start_local("true", &[], 1);
        let children = ranks.children();
        while children.reap().unwrap() < 1 {
            std::thread::sleep(POLL);
        }
        assert_eq!(children.lock().len(), 1);
        assert_eq!(children.signal(libc::SIGTERM), 0);
        drop(ranks);

        // Dropped while running: killed, reaped and recorded, so a handle
        // that outlives them signals none.
        let ranks = start_local("sleep", &["30".to_string()], 2);
        let children = ranks.children();
        drop(ranks);
        assert_eq!(children.signal(libc::SIGTERM), 0);
    }
}
