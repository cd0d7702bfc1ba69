//! One replica "host": its files, its clock skew, and the `cronlease run`
//! process while it runs (with libfaketime preloaded when the host's clock
//! is skewed).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{detach_and_tie_to_parent, tail};
use crate::wall::{now_ms, rfc3339};

/// How long a replica may take to log `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// What starts a replica: its program (the `cronlease` binary, or the
/// embedded `chaos_replica`), the `cronlease` binary (for `check`), and
/// libfaketime (when clock skew is among the faults).
pub struct Launcher {
    pub program: PathBuf,
    pub cronlease: PathBuf,
    /// Preloaded into a replica whose host's clock is skewed.
    pub libfaketime: Option<PathBuf>,
}

/// A replica "host": its config, log, clock skew, and the daemon process
/// while it runs. Dropping it kills the process.
pub struct Replica {
    pub name: String,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    pub proxy_port: u16,
    /// The webhook sink's URL, for the `[notify.sink]` channel.
    pub sink_url: String,
    /// libfaketime's `FAKETIME` offset of this host's clock ("+5s"); kept
    /// across restarts.
    pub skew: Option<&'static str>,
    /// The harmless change a reload toggles: `timeout = "30s"` on `quick`.
    pub quick_timeout: bool,
    pub process: Option<Daemon>,
}

/// One running `cronlease run`.
pub struct Daemon {
    child: Child,
    /// `child`'s pid, which receives the signals.
    pid: i32,
    /// Where this process's part of the log starts.
    log_offset: u64,
    exit: Option<ExitStatus>,
}

impl Replica {
    pub fn skew_ms(&self) -> i64 {
        self.skew.map_or(0, skew_ms)
    }

    pub fn running(&self) -> bool {
        self.process.as_ref().is_some_and(|d| d.exit.is_none())
    }

    pub fn pid(&self) -> Option<i32> {
        self.process
            .as_ref()
            .filter(|d| d.exit.is_none())
            .map(|d| d.pid)
    }

    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Whether the process has exited; reaps it.
    pub fn poll(&mut self) -> Option<ExitStatus> {
        let daemon = self.process.as_mut()?;
        if daemon.exit.is_none() {
            daemon.exit = daemon.child.try_wait().ok().flatten();
        }
        daemon.exit
    }

    pub fn kill9(&mut self) {
        let Some(daemon) = self.process.as_mut() else {
            return;
        };
        if daemon.exit.is_none() {
            let _ = daemon.child.kill();
            daemon.exit = daemon.child.wait().ok();
            if self.skew.is_some() {
                // libfaketime names a semaphore and a shared memory object
                // after the process and removes them at exit, which a
                // SIGKILL skips.
                for name in ["sem.faketime_sem", "faketime_shm"] {
                    let _ = std::fs::remove_file(format!("/dev/shm/{name}_{}", daemon.pid));
                }
            }
        }
    }

    /// The log written by the current process so far.
    pub fn current_log(&self) -> String {
        let offset = self.process.as_ref().map_or(0, |d| d.log_offset);
        read_from(&self.log, offset)
    }

    fn appears_in_log(&self, needle: &str) -> bool {
        self.current_log().contains(needle)
    }

    /// Starts the daemon (with libfaketime when the host is skewed).
    pub fn spawn(&mut self, launcher: &Launcher) -> Result<()> {
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .with_context(|| format!("cannot open {}", self.log.display()))?;
        writeln!(
            log,
            "===== chaos: starting {} at {} (clock skew {})",
            self.name,
            rfc3339(now_ms()),
            self.skew.unwrap_or("none")
        )?;
        let log_offset = log.metadata()?.len();
        let mut command = self.command(launcher)?;
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        detach_and_tie_to_parent(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start replica {}", self.name))?;
        self.process = Some(Daemon {
            pid: child.id() as i32,
            child,
            log_offset,
            exit: None,
        });
        Ok(())
    }

    /// `cronlease run` with the replica's config and a clean environment;
    /// libfaketime preloaded when the host is skewed, its monotonic clock
    /// left real as a host's is.
    fn command(&self, launcher: &Launcher) -> Result<Command> {
        let mut command = Command::new(&launcher.program);
        match self.skew {
            Some(skew) => {
                let Some(libfaketime) = &launcher.libfaketime else {
                    bail!(
                        "{} has a skewed clock but libfaketime was not looked for",
                        self.name
                    );
                };
                command.envs(crate::faketime::skewed_clock(libfaketime, skew));
            }
            None => {
                command.env_remove("LD_PRELOAD").env_remove("FAKETIME");
            }
        }
        command
            .arg("run")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "cronlease=debug,info")
            .env("NO_COLOR", "1")
            .env_remove("CRONLEASE_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID")
            .env_remove("JOURNAL_STREAM");
        Ok(command)
    }

    /// Waits until the daemon logs `ready` (its signal handlers are
    /// installed and Redis answered).
    pub fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if self.appears_in_log("cronlease::daemon: ready") {
                return Ok(());
            }
            if let Some(status) = self.poll() {
                bail!(
                    "replica {} exited with {status} before it was ready:\n{}",
                    self.name,
                    self.current_log()
                );
            }
            if Instant::now() >= deadline {
                bail!(
                    "replica {} was not ready within {READY_TIMEOUT:?}:\n{}",
                    self.name,
                    tail(&self.log, 30)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // SIGKILL also ends a stopped process.
        self.kill9();
    }
}

/// A `FAKETIME` offset in ms ("+0.5s" → 500).
fn skew_ms(skew: &str) -> i64 {
    let number = skew.trim_end_matches('s');
    (number.parse::<f64>().unwrap_or(0.0) * 1000.0).round() as i64
}

/// The file's content from byte `offset` on (lossy UTF-8).
pub fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = file.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}
