//! A `cronlease run` daemon process under the test's control: started,
//! paused, signalled and killed as systemd, an operator or a crash would.

use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::process::LoggedProcess;

/// How long a wrapper (e.g. `unshare`, or one that forks) may take to start
/// the daemon process itself.
const WRAPPER_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `cronlease run --config FILE`: a [`LoggedProcess`] whose
/// signals go to the daemon itself, under a wrapper if there is one.
pub struct Replica(LoggedProcess);

impl Replica {
    /// Starts `cronlease run --config CONFIG` with `RUST_LOG=cronlease=debug,info`.
    /// `name` names the log file and the messages about this replica.
    pub fn start(config: &Path, name: &str) -> Replica {
        Replica::start_with(config, name, &[], None)
    }

    /// Starts the daemon with extra environment `env` (which may override
    /// `RUST_LOG`; [`super::skewed_clock`] skews its clock) and, when
    /// `wrapper` is given, through that command prefix, e.g.
    /// `["unshare", "-Urm", "sh", "-c", …]`.
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
            .env("RUST_LOG", "cronlease=debug,info")
            .env("NO_COLOR", "1")
            .env_remove("CRONLEASE_CONFIG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("WATCHDOG_PID");
        command.envs(env.iter().copied());
        let mut replica = Replica(LoggedProcess::start("replica", name, command));
        if wrapped {
            let daemon = replica.find_daemon(&binary);
            replica.signal_instead(daemon);
        }
        replica
    }

    /// The pid of the process under the wrapper that runs `binary`.
    fn find_daemon(&mut self, binary: &Path) -> u32 {
        let binary = binary
            .canonicalize()
            .unwrap_or_else(|_| binary.to_path_buf());
        let deadline = Instant::now() + WRAPPER_TIMEOUT;
        loop {
            // The wrapper itself once it has exec'd the daemon (unshare,
            // sh -c 'exec …'), or a child of it (sh -c '"$@"; exit $?' forks).
            if let Some(pid) = std::iter::once(self.spawned_pid())
                .chain(descendants(self.spawned_pid()))
                .find(|&pid| runs(pid, &binary))
            {
                return pid;
            }
            if let Some(status) = self.try_exit() {
                panic!(
                    "the wrapper of replica {} exited with {status} before starting {}\n--- log\n{}",
                    self.name(),
                    binary.display(),
                    self.log()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "the wrapper of replica {} did not start {} within {WRAPPER_TIMEOUT:?}\n--- log\n{}",
                    self.name(),
                    binary.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Replica {
    /// The `host:port` this replica logs after `prefix` (`"metrics
    /// listening on http://"`, `"dashboard on http://"`), once it has.
    pub fn logged_address(&self, prefix: &str, timeout: Duration) -> String {
        let log = self.wait_for_log(prefix, timeout);
        let rest = log.split(prefix).nth(1).expect("the line is there");
        rest.split('/')
            .next()
            .expect("an address before the path")
            .to_string()
    }
}

impl Deref for Replica {
    type Target = LoggedProcess;

    fn deref(&self) -> &LoggedProcess {
        &self.0
    }
}

impl DerefMut for Replica {
    fn deref_mut(&mut self) -> &mut LoggedProcess {
        &mut self.0
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
