//! Reaping as PID 1. In a container the replica is often the first
//! process of its PID namespace, and every process whose parent dies is
//! handed to it: a run's leftovers killed when its command exits, a daemon
//! a job double-forked. Nobody else will reap them, so each would stay a
//! zombie (a pid and a process-table entry) until the container stops.
//!
//! When the replica is PID 1, [`reap_orphans`] reaps, at each SIGCHLD and
//! every [`SWEEP`], the zombies among its children that the runner did not
//! start. It never waits for any child (`waitpid(-1)`), which would take
//! the exit status of a run's process from `runner/child.rs`: it finds the
//! zombies in `/proc` and reaps each by its pid, if that pid is not in the
//! runner's table of the processes it started ([`Started`]). The runner
//! adds a pid to the table under the same lock as it starts the process
//! (so no zombie can be reaped here between its start and its entry), and
//! takes it out once it has reaped it or given it up.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::libc;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How often to look for zombies without a SIGCHLD (a missed signal, a
/// zombie skipped while its pid was in the table).
const SWEEP: Duration = Duration::from_secs(5);

/// The pids of the processes the runner started and reaps itself.
pub(super) type Started = BTreeSet<i32>;

/// The runner's processes. A `std` mutex, never held across an `.await`:
/// held for a table update, for a process's start while orphans are being
/// reaped, and for the reaping of the zombies one sweep found.
static STARTED: Mutex<Started> = Mutex::new(BTreeSet::new());

/// Whether [`reap_orphans`] runs: only then does a process's start hold
/// the table's lock (starts are otherwise concurrent).
static REAPING: AtomicBool = AtomicBool::new(false);

/// The table, locked.
pub(super) fn started() -> MutexGuard<'static, Started> {
    // The table is a set of integers: a panic cannot leave it half-updated.
    STARTED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The table locked if orphans are reaped, for the start of a process.
pub(super) fn lock_for_start() -> Option<MutexGuard<'static, Started>> {
    REAPING.load(Ordering::Acquire).then(started)
}

/// Whether this process is the first of its PID namespace (a container's
/// init), which the kernel hands every orphan of the namespace.
pub fn is_init() -> bool {
    std::process::id() == 1
}

/// Reaps zombie children the runner did not start, at each SIGCHLD and
/// every [`SWEEP`], until `stop` is cancelled. For a replica that is PID 1
/// ([`is_init`]); the caller awaits it.
pub async fn reap_orphans(stop: CancellationToken) {
    REAPING.store(true, Ordering::Release);
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(sigchld) => Some(sigchld),
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGCHLD; orphaned processes are reaped every 5 s");
            None
        }
    };
    loop {
        if let Err(e) = tokio::task::spawn_blocking(reap_zombies).await {
            warn!(error = %e, "reaping orphaned processes failed");
        }
        tokio::select! {
            () = stop.cancelled() => break,
            Some(()) = async {
                match &mut sigchld {
                    Some(sigchld) => sigchld.recv().await,
                    None => std::future::pending().await,
                }
            } => {}
            () = sleep(SWEEP) => {}
        }
    }
    REAPING.store(false, Ordering::Release);
}

/// Reaps the zombie children of this process that are not in the table.
fn reap_zombies() {
    let zombies = zombie_children(std::process::id());
    if zombies.is_empty() {
        return;
    }
    let started = started();
    for pid in zombies {
        if started.contains(&pid) {
            continue;
        }
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid writes only the status, a local that outlives
        // the call. By this pid only: a zombie, our child, not the
        // runner's (checked under the lock the runner starts processes
        // under).
        let reaped = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if reaped == pid {
            debug!(pid, status, "reaped an orphaned process");
        }
    }
}

/// The pids of the zombies whose parent is `parent`, from `/proc`.
fn zombie_children(parent: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // pid (comm) state ppid …; comm may hold spaces and
            // parentheses, so fields are counted after the last ')'.
            let Some((_, after)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = after.split_whitespace();
            fields.next() == Some("Z")
                && fields.next().and_then(|p| p.parse::<u32>().ok()) == Some(parent)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_child_is_found_in_proc() {
        let child = std::process::Command::new("true")
            .spawn()
            .expect("true starts");
        let pid = i32::try_from(child.id()).expect("a pid fits an i32");
        let found = (0..500).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            zombie_children(std::process::id()).contains(&pid)
        });
        let mut child = child;
        let _ = child.wait();
        assert!(
            found,
            "the exited child {pid} is a zombie child of this process"
        );
    }
}
