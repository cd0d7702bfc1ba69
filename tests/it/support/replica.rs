//! A `cronlease run` daemon process under the test's control: started,
//! paused, signalled and killed as systemd, an operator or a crash would.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a wrapper (e.g. `faketime`, which forks) may take to start the
/// daemon process itself.
const WRAPPER_TIMEOUT: Duration = Duration::from_secs(10);

/// How many log lines a replica dropped during a failing test prints.
const LOG_TAIL_ON_PANIC: usize = 200;

/// A running `cronlease run --config FILE`. Dropping it sends SIGKILL and
/// waits, so no daemon outlives its test.
pub struct Replica {
    name: String,
    /// The spawned process: the daemon itself, or the wrapper that runs it.
    child: Child,
    /// The process running the `cronlease` binary, which receives the
    /// signals. Not `child` when a wrapper forks (faketime does).
    pid: u32,
    /// Set once `child` has been reaped, so it is never waited for twice
    /// and its pid is never signalled after it may have been reused.
    exit: Option<ExitStatus>,
    log_path: PathBuf,
    /// Holds the log file; removed when the replica is dropped.
    _dir: tempfile::TempDir,
}

impl Replica {
    /// Starts `cronlease run --config CONFIG` with `RUST_LOG=cronlease=debug,info`.
    /// `name` names the log file and the messages about this replica.
    pub fn start(config: &Path, name: &str) -> Replica {
        Replica::start_with(config, name, &[], None)
    }

    /// Starts the daemon with extra environment `env` (which may override
    /// `RUST_LOG`) and, when `wrapper` is given, through that command
    /// prefix, e.g. `["faketime", "-f", "+1.5s"]` for a host whose clock is
    /// 1.5 s ahead; `FAKETIME_DONT_FAKE_MONOTONIC=1` is then set so only the
    /// wall clock is skewed, as on a real host.
    ///
    /// The daemon's stdout and stderr go to one log file ([`Replica::log`]);
    /// its stdin is null. Variables that would make it talk to this
    /// machine's systemd (`NOTIFY_SOCKET`, `WATCHDOG_*`) are removed.
    pub fn start_with(
        config: &Path,
        name: &str,
        env: &[(&str, &str)],
        wrapper: Option<Vec<String>>,
    ) -> Replica {
        let binary = super::binary();
        let dir = tempfile::Builder::new()
            .prefix("cronlease-replica-")
            .tempdir()
            .expect("cannot create a temporary directory for a replica log");
        let log_path = dir.path().join(format!("{name}.log"));
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log_path.display()));
        let log_err = log.try_clone().unwrap_or_else(|e| {
            panic!("cannot duplicate the handle of {}: {e}", log_path.display())
        });

        let wrapped = wrapper.as_ref().is_some_and(|w| !w.is_empty());
        let mut command = match wrapper.as_deref() {
            Some([program, args @ ..]) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
            _ => Command::new(&binary),
        };
        command
            .arg("run")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .env("RUST_LOG", "cronlease=debug,info")
            .env("NO_COLOR", "1")
            .env_remove("CRONLEASE_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        if wrapped {
            command.env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        command.envs(env.iter().copied());
        let shown = format!("{command:?}");
        super::die_with_this_thread(&mut command);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "cannot start replica {name}: {e}: {shown}\n\
                 (a missing faketime or redis-server is installed by scripts/install-deps)"
            ),
            Err(e) => panic!("cannot start replica {name}: {e}: {shown}"),
        };
        let pid = child.id();
        let mut replica = Replica {
            name: name.to_string(),
            child,
            pid,
            exit: None,
            log_path,
            _dir: dir,
        };
        if wrapped {
            replica.pid = replica.find_daemon(&binary);
        }
        replica
    }

    /// The replica's name as given to `start`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The process id of the daemon itself (not of a wrapper).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Everything the daemon has written to stdout and stderr so far.
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
                    "timed out after {timeout:?} waiting for {needle:?} in the log of replica {}\n--- log\n{log}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Freezes the daemon (SIGSTOP), like a long GC pause or a VM stall:
    /// its leases run out while it believes it still holds them.
    #[track_caller]
    pub fn sigstop(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// Resumes a daemon frozen by `sigstop`.
    #[track_caller]
    pub fn sigcont(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// Asks the daemon to shut down, as systemd does on `stop`.
    #[track_caller]
    pub fn sigterm(&self) {
        self.signal(Signal::SIGTERM);
    }

    /// Kills the daemon with SIGKILL, as a crash or the OOM killer would
    /// (its jobs, in their own process groups, are not killed), and waits
    /// for it. Does nothing if it has already exited.
    pub fn kill9(&mut self) {
        if self.exit.is_some() {
            return;
        }
        let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
        let _ = self.child.kill();
        let status = self
            .child
            .wait()
            .unwrap_or_else(|e| panic!("cannot wait for replica {}: {e}", self.name));
        self.exit = Some(status);
    }

    /// Waits up to `timeout` for the daemon to exit and returns its status,
    /// or `None` if it is still running.
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

    /// The exit status if the daemon has exited, reaping it.
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self
                .child
                .try_wait()
                .unwrap_or_else(|e| panic!("cannot check replica {}: {e}", self.name));
        }
        self.exit
    }

    /// `kill9` that never panics, for `Drop`.
    fn kill9_quietly(&mut self) {
        if self.exit.is_none() {
            let _ = kill(Pid::from_raw(self.pid as i32), Signal::SIGKILL);
            let _ = self.child.kill();
            self.exit = self.child.wait().ok();
        }
    }

    #[track_caller]
    fn signal(&self, signal: Signal) {
        if let Some(status) = self.exit {
            panic!(
                "cannot send {signal} to replica {}: it already exited with {status}\n--- log\n{}",
                self.name,
                self.log()
            );
        }
        kill(Pid::from_raw(self.pid as i32), signal).unwrap_or_else(|e| {
            panic!(
                "cannot send {signal} to replica {} (pid {}): {e}",
                self.name, self.pid
            )
        });
    }

    /// The pid of the process under the wrapper that runs `binary`.
    fn find_daemon(&mut self, binary: &Path) -> u32 {
        let binary = binary
            .canonicalize()
            .unwrap_or_else(|_| binary.to_path_buf());
        let deadline = Instant::now() + WRAPPER_TIMEOUT;
        loop {
            if let Some(pid) = descendants(self.child.id())
                .into_iter()
                .find(|&pid| runs(pid, &binary))
            {
                return pid;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "the wrapper of replica {} exited with {status} before starting {}\n--- log\n{}",
                    self.name,
                    binary.display(),
                    self.log()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "the wrapper of replica {} did not start {} within {WRAPPER_TIMEOUT:?}\n--- log\n{}",
                    self.name,
                    binary.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill9_quietly();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_ON_PANIC)..];
            eprintln!(
                "--- last {} lines of replica {} ({})\n{}\n--- end of replica {}",
                tail.len(),
                self.name,
                self.log_path.display(),
                tail.join("\n"),
                self.name
            );
        }
    }
}

/// `root` and every process below it, parents before children.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
                continue;
            };
            if let Some(ppid) = parent_of(pid) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|&&(_, p)| p == parent)
                .map(|&(c, _)| c),
        );
        next += 1;
    }
    found
}

/// The parent pid from `/proc/PID/stat` (the field after the command name,
/// which may itself hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid` is executing `binary`.
fn runs(pid: u32, binary: &Path) -> bool {
    std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == binary)
}
