//! Runs a job's command: one process group per attempt, output to the log and
//! a bounded tail, timeout, retries, and being stopped from outside.
//!
//! The runner never talks to Redis. It is told to stop through a
//! `watch` channel (the watchdog says the lease is lost, the daemon says it is
//! shutting down) and reports how the run ended; the daemon turns that into
//! an [`Outcome`](crate::outcome::Outcome).
//!
//! Every attempt runs in its own process group (so a timeout or a lost lease
//! stops the whole tree, not just the first process), with `PR_SET_PDEATHSIG`
//! set to SIGKILL (a replica killed with -9 does not leave its job running
//! without a lease). When the command exits, what is left of its group is
//! killed too: cronlease never leaves work running that no lease covers.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};
use tracing::{info, warn};

use crate::config::Command;
use crate::outcome::{Status, Tail};

/// Longest line written to the log; the rest is cut (the tail keeps it).
const MAX_LOG_LINE: usize = 8 * 1024;

/// After the command exits, how long to wait for the rest of its output.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunSpec {
    pub job: String,
    /// The run id, tick, fence and replica are for log lines.
    pub run_id: String,
    pub tick: String,
    pub fence: u64,
    pub replica: String,
    pub command: Command,
    pub workdir: PathBuf,
    /// The complete extra environment: the job's `env` and `CRONLEASE_*`.
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    pub kill_grace: Duration,
    pub retries: u32,
    pub retry_backoff: Duration,
    pub output_tail_bytes: usize,
    pub stdio: StdioMode,
}

/// Where a command's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StdioMode {
    /// stdin from /dev/null; stdout and stderr to the log, line by line, and
    /// their tail into the outcome (jobs).
    Capture,
    /// All three inherited from cronlease (`cronlease lock -- CMD`).
    Inherit,
}

/// Why a run is being stopped from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The lease is no longer ours: kill the group now (SIGKILL).
    LostLease,
    /// The replica is shutting down and the grace is over: SIGTERM, then
    /// SIGKILL after `kill_grace`.
    Shutdown,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub status: Status,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub attempts: u32,
    pub output: String,
}

/// Runs `spec` to the end, with retries, unless `stop` says otherwise.
pub async fn execute(spec: &RunSpec, mut stop: watch::Receiver<Option<Stop>>) -> RunResult {
    let mut tail = Tail::new(spec.output_tail_bytes);
    let mut attempts = 0;
    loop {
        attempts += 1;
        if attempts > 1 {
            tail.push_line(
                format!("[cronlease] attempt {attempts} of {}", spec.retries + 1).as_bytes(),
            );
        }
        let attempt = run_once(spec, &mut tail, &mut stop).await;
        let retryable = matches!(attempt.status, Status::Failed | Status::Timeout);
        if !retryable || attempts > spec.retries {
            return RunResult {
                status: attempt.status,
                exit_code: attempt.exit_code,
                signal: attempt.signal,
                attempts,
                output: tail.text(),
            };
        }
        warn!(
            job = %spec.job, run_id = %spec.run_id, attempt = attempts, status = %attempt.status,
            backoff = ?spec.retry_backoff, "attempt failed, retrying"
        );
        // Back off, unless told to stop.
        let stopped = tokio::select! {
            () = sleep(spec.retry_backoff) => None,
            reason = wait_for_stop(&mut stop) => Some(reason),
        };
        if let Some(reason) = stopped {
            return RunResult {
                status: stop_status(reason),
                exit_code: attempt.exit_code,
                signal: attempt.signal,
                attempts,
                output: tail.text(),
            };
        }
    }
}

fn stop_status(reason: Stop) -> Status {
    match reason {
        Stop::LostLease => Status::LostLease,
        Stop::Shutdown => Status::Interrupted,
    }
}

/// Resolves when a stop is requested; never, if the sender is gone.
async fn wait_for_stop(stop: &mut watch::Receiver<Option<Stop>>) -> Stop {
    loop {
        if let Some(reason) = *stop.borrow_and_update() {
            return reason;
        }
        if stop.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

struct Attempt {
    status: Status,
    exit_code: Option<i32>,
    signal: Option<i32>,
}

fn build_command(spec: &RunSpec) -> tokio::process::Command {
    let mut command = match &spec.command {
        Command::Argv(argv) => {
            let mut command = tokio::process::Command::new(&argv[0]);
            command.args(&argv[1..]);
            command
        }
        Command::Shell(script) => {
            let mut command = tokio::process::Command::new("/bin/sh");
            command.arg("-c").arg(script);
            command
        }
        Command::BenchmarkNoop => {
            unreachable!("benchmark_noop runs end in run_once before a process is built")
        }
    };
    command
        .current_dir(&spec.workdir)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        // systemd's channels are cronlease's, not its jobs'.
        .env_remove("NOTIFY_SOCKET")
        .env_remove("WATCHDOG_USEC")
        .env_remove("WATCHDOG_PID")
        .process_group(0)
        .kill_on_drop(true);
    match spec.stdio {
        StdioMode::Capture => command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
        StdioMode::Inherit => command
            .stdin(Stdio::inherit())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit()),
    };
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls prctl(2), which is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    command
}

fn signal_group(pgid: Option<Pid>, signal: Signal) {
    if let Some(pgid) = pgid {
        // ESRCH: the group is already gone, which is what we wanted.
        let _ = killpg(pgid, signal);
    }
}

async fn run_once(
    spec: &RunSpec,
    tail: &mut Tail,
    stop: &mut watch::Receiver<Option<Stop>>,
) -> Attempt {
    if let Some(reason) = *stop.borrow_and_update() {
        return Attempt {
            status: stop_status(reason),
            exit_code: None,
            signal: None,
        };
    }
    if spec.command == Command::BenchmarkNoop {
        return Attempt {
            status: Status::Ok,
            exit_code: Some(0),
            signal: None,
        };
    }
    let mut child = match build_command(spec).spawn() {
        Ok(child) => child,
        Err(e) => {
            let message = format!(
                "[cronlease] cannot start {:?} in {}: {e}",
                spec.command,
                spec.workdir.display()
            );
            warn!(job = %spec.job, run_id = %spec.run_id, "{message}");
            tail.push_line(message.as_bytes());
            return Attempt {
                status: Status::Failed,
                exit_code: None,
                signal: None,
            };
        }
    };
    let pgid = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw);
    info!(
        job = %spec.job, tick = %spec.tick, fence = spec.fence, run_id = %spec.run_id, replica = %spec.replica,
        pid = ?child.id(), "started"
    );
    let mut stdout = child.stdout.take().map(|s| lines(s));
    let mut stderr = child.stderr.take().map(|s| lines(s));

    let timeout_at = spec.timeout.map(|t| Instant::now() + t);
    let mut ending: Option<Status> = None;
    let mut kill_at: Option<Instant> = None;
    let mut stop_open = true;
    let exit: std::io::Result<ExitStatus> = loop {
        tokio::select! {
            line = next_line(&mut stdout) => log_line(spec, tail, "stdout", line, &mut stdout),
            line = next_line(&mut stderr) => log_line(spec, tail, "stderr", line, &mut stderr),
            exit = child.wait() => break exit,
            () = sleep_until(timeout_at.unwrap_or_else(Instant::now)), if timeout_at.is_some() && ending.is_none() => {
                warn!(
                    job = %spec.job, tick = %spec.tick, fence = spec.fence, run_id = %spec.run_id,
                    replica = %spec.replica, timeout = ?spec.timeout, "timed out, stopping"
                );
                ending = Some(Status::Timeout);
                signal_group(pgid, Signal::SIGTERM);
                kill_at = Some(Instant::now() + spec.kill_grace);
            }
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                warn!(job = %spec.job, run_id = %spec.run_id, "still running after kill_grace, sending SIGKILL");
                signal_group(pgid, Signal::SIGKILL);
                kill_at = None;
            }
            changed = stop.changed(), if stop_open => {
                if changed.is_err() {
                    stop_open = false;
                    continue;
                }
                match *stop.borrow_and_update() {
                    Some(Stop::LostLease) => {
                        warn!(
                            job = %spec.job, tick = %spec.tick, fence = spec.fence, run_id = %spec.run_id,
                            replica = %spec.replica, "lease lost: killing the run's process group"
                        );
                        ending = Some(Status::LostLease);
                        signal_group(pgid, Signal::SIGKILL);
                        kill_at = None;
                    }
                    Some(Stop::Shutdown) if ending.is_none() => {
                        warn!(
                            job = %spec.job, tick = %spec.tick, fence = spec.fence, run_id = %spec.run_id,
                            replica = %spec.replica, "shutdown grace over: interrupting the run"
                        );
                        ending = Some(Status::Interrupted);
                        signal_group(pgid, Signal::SIGTERM);
                        kill_at = Some(Instant::now() + spec.kill_grace);
                    }
                    _ => {}
                }
            }
        }
    };
    // Whatever the command left behind in its group goes with it.
    signal_group(pgid, Signal::SIGKILL);
    let drain_until = Instant::now() + DRAIN_AFTER_EXIT;
    while stdout.is_some() || stderr.is_some() {
        tokio::select! {
            line = next_line(&mut stdout) => log_line(spec, tail, "stdout", line, &mut stdout),
            line = next_line(&mut stderr) => log_line(spec, tail, "stderr", line, &mut stderr),
            () = sleep_until(drain_until) => break,
        }
    }
    let (exit_code, signal) = match &exit {
        Ok(status) => (status.code(), status.signal()),
        Err(_) => (None, None),
    };
    let status = ending.unwrap_or(match exit_code {
        Some(0) => Status::Ok,
        _ => Status::Failed,
    });
    if let Err(e) = &exit {
        tail.push_line(format!("[cronlease] cannot wait for the command: {e}").as_bytes());
    }
    info!(
        job = %spec.job, tick = %spec.tick, fence = spec.fence, run_id = %spec.run_id, replica = %spec.replica,
        %status, exit_code, signal, "exited"
    );
    Attempt {
        status,
        exit_code,
        signal,
    }
}

type Lines = tokio::io::Split<BufReader<Box<dyn AsyncRead + Unpin + Send>>>;

fn lines(stream: impl AsyncRead + Unpin + Send + 'static) -> Lines {
    let boxed: Box<dyn AsyncRead + Unpin + Send> = Box::new(stream);
    BufReader::new(boxed).split(b'\n')
}

/// The next line of a stream that is still open; pending forever otherwise,
/// so a closed stream drops out of `select!`.
async fn next_line(lines: &mut Option<Lines>) -> std::io::Result<Option<Vec<u8>>> {
    match lines {
        Some(lines) => lines.next_segment().await,
        None => std::future::pending().await,
    }
}

fn log_line(
    spec: &RunSpec,
    tail: &mut Tail,
    stream: &'static str,
    line: std::io::Result<Option<Vec<u8>>>,
    source: &mut Option<Lines>,
) {
    match line {
        Ok(Some(mut line)) => {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            tail.push_line(&line);
            let shown = String::from_utf8_lossy(&line[..line.len().min(MAX_LOG_LINE)]);
            info!(job = %spec.job, run_id = %spec.run_id, stream, "{shown}");
        }
        Ok(None) | Err(_) => *source = None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(command: Command) -> RunSpec {
        RunSpec {
            job: "test".into(),
            run_id: "r".into(),
            tick: "2026-01-01T00:00:00Z".into(),
            fence: 1,
            replica: "test".into(),
            command,
            workdir: std::env::temp_dir(),
            env: vec![("GREETING".into(), "hello".into())],
            timeout: None,
            kill_grace: Duration::from_millis(200),
            retries: 0,
            retry_backoff: Duration::from_millis(10),
            output_tail_bytes: 4096,
            stdio: StdioMode::Capture,
        }
    }

    fn shell(script: &str) -> Command {
        Command::Shell(script.into())
    }

    async fn run(spec: &RunSpec) -> RunResult {
        let (_tx, rx) = watch::channel(None);
        execute(spec, rx).await
    }

    #[tokio::test]
    async fn ok_failed_and_output() {
        let result = run(&spec(shell("echo $GREETING; echo err >&2"))).await;
        assert_eq!(result.status, Status::Ok);
        assert_eq!(result.exit_code, Some(0));
        assert!(
            result.output.contains("hello\n") && result.output.contains("err\n"),
            "{result:?}"
        );

        let result = run(&spec(shell("exit 3"))).await;
        assert_eq!((result.status, result.exit_code), (Status::Failed, Some(3)));

        let result = run(&spec(Command::Argv(vec!["/nonexistent/program".into()]))).await;
        assert_eq!(result.status, Status::Failed);
        assert!(result.output.contains("cannot start"), "{result:?}");
    }

    #[tokio::test]
    async fn the_benchmark_noop_succeeds_without_a_process() {
        let result = run(&spec(Command::BenchmarkNoop)).await;
        assert_eq!(
            (result.status, result.exit_code, result.attempts),
            (Status::Ok, Some(0), 1)
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let mut spec = spec(shell("sleep 30 & sleep 30; echo never"));
        spec.timeout = Some(Duration::from_millis(200));
        let started = std::time::Instant::now();
        let result = run(&spec).await;
        assert_eq!(result.status, Status::Timeout);
        assert_eq!(result.signal, Some(libc_sigterm()));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    fn libc_sigterm() -> i32 {
        Signal::SIGTERM as i32
    }

    #[tokio::test]
    async fn retries_under_one_call() {
        let dir = tempfile::tempdir().unwrap();
        let counter = dir.path().join("n");
        let mut spec = spec(shell(&format!(
            "echo x >> {0}; [ $(wc -l < {0}) -ge 3 ]",
            counter.display()
        )));
        spec.retries = 5;
        let result = run(&spec).await;
        assert_eq!((result.status, result.attempts), (Status::Ok, 3));
        assert!(result.output.contains("[cronlease] attempt 3 of 6"));
    }

    #[tokio::test]
    async fn lost_lease_kills_at_once_and_shutdown_interrupts() {
        let spec = spec(shell("trap '' TERM; sleep 30"));
        let (tx, rx) = watch::channel(None);
        let handle = tokio::spawn({
            let spec = spec.clone();
            async move { execute(&spec, rx).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(Some(Stop::LostLease)).unwrap();
        let result = handle.await.unwrap();
        assert_eq!(result.status, Status::LostLease);
        assert_eq!(result.signal, Some(Signal::SIGKILL as i32));

        let (tx, rx) = watch::channel(None);
        let handle = tokio::spawn(async move { execute(&spec, rx).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(Some(Stop::Shutdown)).unwrap();
        let result = handle.await.unwrap();
        // TERM is trapped, so the kill_grace ends in SIGKILL.
        assert_eq!(result.status, Status::Interrupted);
        assert_eq!(result.signal, Some(Signal::SIGKILL as i32));
    }
}
