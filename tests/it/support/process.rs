//! A process a test started, with its output in a log file: signalled,
//! waited for and killed as systemd, an operator or a crash would. What a
//! daemon replica ([`super::Replica`]) and a copy of this test binary
//! ([`super::TestChild`]) share.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How many log lines a process dropped during a failing test prints.
const LOG_TAIL_ON_PANIC: usize = 200;

/// A running process whose stdout and stderr go to one log file. Dropping
/// it sends SIGKILL and waits (and prints the log's tail when the test is
/// failing), so none outlives its test; it also dies with the thread that
/// started it (`PR_SET_PDEATHSIG`).
pub struct LoggedProcess {
    /// What it is, for messages: `replica`, `child`.
    kind: &'static str,
    name: String,
    /// The spawned process: the program itself, or a wrapper that runs it.
    child: Child,
    /// The process that receives the signals: `child`'s, unless a wrapper
    /// forks (a shell running it, then exiting) and [`LoggedProcess::signal_instead`] named
    /// the program under it.
    pid: u32,
    /// Set once `child` has been reaped, so it is never waited for twice
    /// and its pid is never signalled after it may have been reused.
    exit: Option<ExitStatus>,
    log_path: PathBuf,
    /// Holds the log file; removed when the process is dropped.
    _dir: tempfile::TempDir,
}

impl LoggedProcess {
    /// Starts `command` with stdin null and stdout and stderr in a new log
    /// file named after `name`. The calling thread must live as long as the
    /// process should (the death signal follows the thread that forked):
    /// call it from the test's own thread, not a runtime's worker.
    pub fn start(kind: &'static str, name: &str, mut command: Command) -> LoggedProcess {
        let dir = tempfile::Builder::new()
            .prefix(&format!("cronlease-{kind}-"))
            .tempdir()
            .unwrap_or_else(|e| {
                panic!("cannot create a temporary directory for a {kind} log: {e}")
            });
        let log_path = dir.path().join(format!("{name}.log"));
        let log = File::create(&log_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
        let log_err = log.try_clone().unwrap_or_else(|e| {
            panic!("cannot duplicate the handle of {}: {e}", log_path.display())
        });
        command.stdin(Stdio::null()).stdout(log).stderr(log_err);
        super::die_with_this_thread(&mut command);
        let shown = format!("{command:?}");
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "cannot start {kind} {name}: {e}: {shown}\n\
                 (a missing redis-server is installed by scripts/install-deps)"
            ),
            Err(e) => panic!("cannot start {kind} {name}: {e}: {shown}"),
        };
        LoggedProcess {
            kind,
            name: name.to_string(),
            pid: child.id(),
            child,
            exit: None,
            log_path,
            _dir: dir,
        }
    }

    /// Signals go to `pid` (the program under a forking wrapper) from now
    /// on; waits and exit statuses stay the spawned process's.
    pub fn signal_instead(&mut self, pid: u32) {
        self.pid = pid;
    }

    /// The name given to `start`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id that receives the signals.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The spawned process's id (a wrapper's, if there is one).
    pub fn spawned_pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process has written to stdout and stderr so far.
    pub fn log(&self) -> String {
        match std::fs::read(&self.log_path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => panic!("cannot read {}: {e}", self.log_path.display()),
        }
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Waits until the log contains `needle` and returns the log.
    ///
    /// # Panics
    ///
    /// After `timeout`, with the log in the message.
    #[track_caller]
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if log.contains(needle) {
                return log;
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {needle:?} in the log of {} {}\n--- log\n{log}",
                    self.kind, self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until a line of the log contains `needle` and returns that
    /// line.
    ///
    /// # Panics
    ///
    /// After `timeout`, or when the process exits first, with the log in
    /// the message.
    #[track_caller]
    pub fn wait_for_line(&mut self, needle: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log();
            if let Some(line) = log.lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "{} {} exited with {status} before printing {needle:?}\n--- log\n{log}",
                    self.kind, self.name
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for a line with {needle:?} from {} {}\n--- log\n{log}",
                    self.kind, self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the process (SIGSTOP), like a long GC pause or a VM stall:
    /// its leases run out while it believes it still holds them.
    #[track_caller]
    pub fn sigstop(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Resumes a process frozen by `sigstop`.
    #[track_caller]
    pub fn sigcont(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Asks the process to finish, as systemd does on `stop`.
    #[track_caller]
    pub fn sigterm(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// Kills the process with SIGKILL, as a crash or the OOM killer would
    /// (a daemon's jobs, in their own process groups, are not killed), and
    /// waits for it. Does nothing if it has already exited.
    pub fn kill9(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("cannot wait for {} {}: {e}", self.kind, self.name));
        self.exit = Some(status);
    }

    /// Waits up to `timeout` for the process to exit and returns its
    /// status, or `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status if the process has exited, reaping it.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .unwrap_or_else(|e| panic!("cannot check {} {}: {e}", self.kind, self.name));
        }
        self.exit
    }

    #[track_caller]
    fn signal(&self, signal: Signal) {
        if let Some(status) = self.exit {
            panic!(
                "cannot send {signal} to {} {}: it already exited with {status}\n--- log\n{}",
                self.kind,
                self.name,
                self.log()
            );
        }
        kill(Pid::from_raw(self.pid as i32), signal).unwrap_or_else(|e| {
            panic!(
                "cannot send {signal} to {} {} (pid {}): {e}",
                self.kind, self.name, self.pid
            )
        });
    }
}

impl Drop for LoggedProcess {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_PANIC)..];
            eprintln!(
                "--- last {} lines of {} {} ({})\n{}\n--- end of {} {}",
                tail.len(),
                self.kind,
                self.name,
                self.log_path.display(),
                tail.join("\n"),
                self.kind,
                self.name
            );
        }
    }
}
