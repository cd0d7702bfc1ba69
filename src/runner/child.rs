//! An attempt's main process: started by `runner/spawn/` (not by
//! tokio's `Command`) and reaped here with `wait4(2)`, which gives, with its exit status, the
//! resource usage of that one process and of the descendants it waited
//! for. That is one run's usage, whatever else runs beside it:
//! `getrusage(RUSAGE_CHILDREN)` would add up every child the replica ever
//! reaped, concurrent runs included.
//!
//! tokio's `Child` cannot be used for this: it reaps its process itself (in
//! `wait`, or from its orphan queue once dropped unwaited), and a second
//! reaper would race it — or, once the pid is reused, reap another run's
//! process. Nothing else in the replica waits for a child by its pid or for
//! any child (`waitpid(-1)`; the orphan reaper of a replica that is PID 1,
//! `orphans`, reaps by pid only zombies not in the runner's table, which
//! holds this process until it is reaped), so a [`Child`] is its process's
//! one reaper;
//! until it reaps, the process stays (at worst a zombie) and its pid
//! cannot name another, so signalling it is safe.
//!
//! A [`Child`] looks at every SIGCHLD the replica gets (tokio's signal
//! stream: how tokio reaps its own children where there is no pidfd; the
//! stream is made before the process is started, so no SIGCHLD of this
//! child is missed),
//! or every [`POLL_WITHOUT_SIGNALS`] where SIGCHLD cannot be listened to.
//! Like tokio's own processes, it needs a runtime with I/O enabled.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::libc;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{ChildStderr, ChildStdout};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

use super::{orphans, spawn};
use crate::task::Usage;

/// How often to look for the exit when SIGCHLD cannot be listened to.
const POLL_WITHOUT_SIGNALS: Duration = Duration::from_millis(20);

/// A started process, reaped by [`Child::wait`] (or killed when dropped
/// before).
#[derive(Debug)]
pub(super) struct Child {
    pid: Pid,
    state: State,
    /// The replica's SIGCHLDs, None where they cannot be listened to.
    sigchld: Option<tokio::signal::unix::Signal>,
    /// Whether a SIGCHLD came (or the poll is due) since `wait4` last
    /// found the process running: only then is it asked again, so a
    /// `select!` that polls [`Child::wait`] once per line of output costs
    /// no system call per line.
    look: Look,
    /// When to look next without SIGCHLD.
    next_poll: Instant,
    /// The replica's own peak resident set (KiB) once the process had
    /// its program: the least `ru_maxrss` can say of it (see
    /// [`ProcessUsage::max_rss_kb`]).
    replica_peak_kb: u64,
}

/// Whether to ask `wait4` about the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    Now,
    AtNextSignal,
}

/// Where a [`Child`]'s process is.
#[derive(Debug, Clone, Copy)]
enum State {
    /// Not reaped yet (running, or a zombie): its pid is still its own.
    Running,
    /// Reaped: this is how it ended (the pid may be another's now).
    Exited(Exit),
    /// `wait4` failed for it: not ours to signal or reap any more.
    Lost,
}

/// A started process and its captured output streams.
pub(super) struct Spawned {
    pub child: Child,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
}

/// How a process ended, and what it used.
#[derive(Debug, Clone, Copy)]
pub(super) struct Exit {
    pub status: ExitStatus,
    pub usage: ProcessUsage,
}

/// What `wait4` says a process and the descendants it waited for used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ProcessUsage {
    /// User and system CPU time together.
    pub cpu_us: u64,
    /// The largest resident set of any one of those processes, not their
    /// sum (`ru_maxrss`, KiB), or None when that figure says nothing of
    /// them. For the process itself the kernel counts the replica's memory
    /// too: the process shares it until `exec` (`runner/spawn/`), and
    /// `exec` keeps the highest resident set of the memory it leaves, so
    /// `ru_maxrss` is never below the replica's own peak resident set
    /// (files included) when the process started. Only a figure above
    /// that peak is the processes' own.
    pub max_rss_kb: Option<u64>,
}

impl Child {
    /// Starts `command`; its stdout and stderr (where piped) as tokio
    /// streams.
    pub(super) fn spawn(command: &spawn::Command) -> io::Result<Spawned> {
        let sigchld = signal(SignalKind::child()).ok();
        // Started and entered in the runner's table together while
        // orphans are reaped (PID 1): the reaper never takes a pid that is
        // not in it yet.
        let started = {
            let table = orphans::lock_for_start();
            let started = command.spawn()?;
            table.unwrap_or_else(orphans::started).insert(started.pid);
            started
        };
        // Read after `spawn`, which returns once the process has its
        // program: the peak can only have grown since the `exec`.
        let replica_peak_kb = own_peak_rss_kb();
        let pid = Pid::from_raw(started.pid);
        // From here on the process is this Child's: dropping it (an error
        // below) kills it.
        let child = Child {
            pid,
            state: State::Running,
            sigchld,
            look: Look::Now,
            next_poll: Instant::now(),
            replica_peak_kb,
        };
        let stdout = started
            .stdout
            .map(|fd| ChildStdout::from_std(std::process::ChildStdout::from(fd)))
            .transpose()?;
        let stderr = started
            .stderr
            .map(|fd| ChildStderr::from_std(std::process::ChildStderr::from(fd)))
            .transpose()?;
        Ok(Spawned {
            child,
            stdout,
            stderr,
        })
    }

    /// The process's pid (also its process group's).
    pub(super) fn pid(&self) -> Pid {
        self.pid
    }

    /// Waits until the process exits and reaps it. Cancel-safe: what a
    /// cancelled call saw is kept, and once reaped, every later call
    /// returns the same exit.
    pub(super) async fn wait(&mut self) -> io::Result<Exit> {
        loop {
            if let State::Exited(exit) = self.state {
                return Ok(exit);
            }
            if self.look == Look::Now {
                self.look = Look::AtNextSignal;
                if let Some(exit) = self.try_wait()? {
                    return Ok(exit);
                }
            }
            match &mut self.sigchld {
                Some(sigchld) => {
                    if sigchld.recv().await.is_none() {
                        // The runtime's signal driver is gone.
                        self.sigchld = None;
                    }
                }
                None => {
                    sleep_until(self.next_poll).await;
                    self.next_poll = Instant::now() + POLL_WITHOUT_SIGNALS;
                }
            }
            self.look = Look::Now;
        }
    }

    /// Reaps the process if it has exited.
    fn try_wait(&mut self) -> io::Result<Option<Exit>> {
        match self.state {
            State::Exited(exit) => return Ok(Some(exit)),
            State::Lost => {
                return Err(io::Error::other(
                    "the command's process was already found unwaitable",
                ));
            }
            State::Running => {}
        }
        let mut status: libc::c_int = 0;
        // SAFETY: rusage is a C struct of integers, for which all zeros is
        // a valid value.
        let mut rusage: libc::rusage = unsafe { std::mem::zeroed() };
        // Held from the reap to the pid's removal from the table: a process
        // started meanwhile (with this pid again) enters it after.
        let mut table = orphans::started();
        loop {
            // SAFETY: wait4 writes only through the two pointers, which
            // point to locals that outlive the call.
            let reaped =
                unsafe { libc::wait4(self.pid.as_raw(), &mut status, libc::WNOHANG, &mut rusage) };
            if reaped == 0 {
                return Ok(None);
            }
            if reaped == self.pid.as_raw() {
                let exit = Exit {
                    status: ExitStatus::from_raw(status),
                    usage: ProcessUsage::of(&rusage, self.replica_peak_kb),
                };
                self.state = State::Exited(exit);
                table.remove(&self.pid.as_raw());
                return Ok(Some(exit));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                self.state = State::Lost;
                table.remove(&self.pid.as_raw());
                return Err(error);
            }
        }
    }
}

impl Drop for Child {
    /// An attempt dropped before its process was reaped (the runtime going
    /// away under it, or an error right after the start): the process is
    /// killed, as tokio's `kill_on_drop` did, and reaped if it is dead
    /// already; otherwise it stays a zombie until the replica exits, or,
    /// when the replica is PID 1, until the orphan reaper (`orphans`)
    /// takes it: it leaves the runner's table here.
    fn drop(&mut self) {
        if let State::Running = self.state {
            let _ = kill(self.pid, Signal::SIGKILL);
            let _ = self.try_wait();
            if let State::Running = self.state {
                // Not reaped, so the pid is still this process's.
                orphans::started().remove(&self.pid.as_raw());
            }
        }
    }
}

/// The replica's peak resident set so far (`ru_maxrss` of itself, KiB);
/// `u64::MAX` if the kernel will not say, as then no process's figure can
/// be told from it.
fn own_peak_rss_kb() -> u64 {
    // SAFETY: rusage is a C struct of integers, for which all zeros is a
    // valid value.
    let mut own: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes only through the pointer, to a local that
    // outlives the call.
    match unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut own) } {
        0 => u64::try_from(own.ru_maxrss).unwrap_or(0),
        _ => u64::MAX,
    }
}

impl ProcessUsage {
    /// The figures of a reaped process started while the replica's peak
    /// resident set was `replica_peak_kb`.
    fn of(rusage: &libc::rusage, replica_peak_kb: u64) -> ProcessUsage {
        let micros = |t: libc::timeval| {
            u64::try_from(t.tv_sec)
                .unwrap_or(0)
                .saturating_mul(1_000_000)
                .saturating_add(u64::try_from(t.tv_usec).unwrap_or(0))
        };
        ProcessUsage {
            cpu_us: micros(rusage.ru_utime).saturating_add(micros(rusage.ru_stime)),
            max_rss_kb: u64::try_from(rusage.ru_maxrss)
                .ok()
                .filter(|&kb| kb > replica_peak_kb),
        }
    }
}

/// An attempt's usage: the cgroup's figures where it has them (its CPU
/// time counts every process that was in it, waited for or not;
/// `memory.peak` is their memory together), else the main process's
/// (`reaped`: it and the descendants it waited for).
pub(super) fn attempt_usage(cgroup: Usage, reaped: Option<ProcessUsage>) -> Usage {
    Usage {
        cpu_us: cgroup.cpu_us.or(reaped.map(|u| u.cpu_us)),
        peak_memory_bytes: cgroup.peak_memory_bytes.or(reaped
            .and_then(|u| u.max_rss_kb)
            .map(|kb| kb.saturating_mul(1024))),
        oom_kills: cgroup.oom_kills,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn without_signals_the_exit_is_found_by_polling_and_kept() {
        let argv = ["sh", "-c", "sleep 0.1; exit 3"].map(String::from);
        let command = spawn::Command::new(&argv, &std::env::temp_dir());
        let Spawned { mut child, .. } = Child::spawn(&command).expect("sh starts");
        // As where SIGCHLD cannot be listened to (`signal` failed).
        child.sigchld = None;
        let exit = child.wait().await.expect("sh is reaped");
        assert_eq!(exit.status.code(), Some(3));
        let again = child.wait().await.expect("the exit is kept");
        assert_eq!(again.status.code(), Some(3));
    }
}
