//! Starts the rank processes of a local job: N copies of one program, each
//! told its rank, the world size and the job's session and run ids, with
//! their standard output read line by line — as processes of this launcher
//! ([`Launch::Local`]) or under a real `mpirun` ([`Launch::Mpirun`]), which
//! gives the ranks their places and the job its id. `rankscope demo` uses
//! it; a later `rankscope launch` will too.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
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
    children: Vec<Child>,
    readers: Vec<JoinHandle<()>>,
}

/// Starts every rank of `job`; `on_line` sees their output lines (with the
/// rank under [`Launch::Local`]; under `mpirun`, whose one output carries
/// every rank's, with 0).
pub fn start(launch: Launch, job: &Job<'_>, job_id: &str, on_line: LineHandler) -> Result<Ranks> {
    let mut ranks = Ranks {
        children: Vec::new(),
        readers: Vec::new(),
    };
    match launch {
        Launch::Local => {
            let (master_port, listener_port) = match job.master_port {
                Some(port) => (port, None),
                None => (free_port()?, Some(free_port()?)),
            };
            for rank in 0..job.ranks {
                // What torchrun sets, for one node (a fresh run id per launch).
                let mut command = Command::new(job.program);
                command
                    .args(job.args)
                    .env("RANK", rank.to_string())
                    .env("LOCAL_RANK", rank.to_string())
                    .env("GROUP_RANK", "0")
                    .env("WORLD_SIZE", job.ranks.to_string())
                    .env("LOCAL_WORLD_SIZE", job.ranks.to_string())
                    .env("MASTER_ADDR", "127.0.0.1")
                    .env("MASTER_PORT", master_port.to_string())
                    .env("TORCHELASTIC_RUN_ID", job_id)
                    .env("TORCHELASTIC_RESTART_COUNT", "0");
                if let Some(port) = listener_port {
                    command.env("RANKSCOPE_PORT", port.to_string());
                }
                // A process group of its own: a terminal's Ctrl-C reaches the
                // launcher alone, which passes it on once.
                std::os::unix::process::CommandExt::process_group(&mut command, 0);
                ranks.spawn(command, job, rank, &on_line)?;
            }
        }
        Launch::Mpirun => {
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
            ranks
                .spawn(command, job, 0, &on_line)
                .context("starting mpirun (is Open MPI installed? apt-get install openmpi-bin)")?;
        }
    }
    Ok(ranks)
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
        self.children.push(child);
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

    /// The process ids of the ranks (of mpirun, under mpirun).
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits for every rank to exit; `progress` is called with the number
    /// of ranks finished each time the launcher looks. Returns the exit
    /// status of each rank, by rank.
    pub fn wait(mut self, mut progress: impl FnMut(usize)) -> Result<Vec<ExitStatus>> {
        let mut statuses: Vec<Option<ExitStatus>> = vec![None; self.children.len()];
        while statuses.iter().any(Option::is_none) {
            for (status, child) in statuses.iter_mut().zip(&mut self.children) {
                if status.is_none() {
                    *status = child.try_wait().context("waiting for a rank")?;
                }
            }
            progress(statuses.iter().filter(|s| s.is_some()).count());
            std::thread::sleep(POLL);
        }
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
        self.children.clear();
        Ok(statuses.into_iter().flatten().collect())
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        for child in &mut self.children {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
