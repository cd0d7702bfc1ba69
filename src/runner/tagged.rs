//! Runs without a cgroup: the processes of a run found by the
//! `CRONLEASE_RUN_ID` every one of them inherits. What leaves the run's
//! process group (`setsid`, a double fork) is still found this way, unless
//! it clears its environment or changes that variable: the weaker
//! guarantee of a replica without cgroups (the guide, "Runs and their
//! processes").

use std::fs;
use std::time::Duration;

/// How long to wait before reading again the environment of a process
/// that read empty but is alive: a process in the middle of `execve` has
/// no environment for a moment (its new memory has none yet), and the
/// processes a command leaves often are (`cmd &` forks and execs as the
/// command exits).
const EXEC_WINDOW: Duration = Duration::from_millis(2);

/// The live processes (not zombies) whose environment holds
/// `CRONLEASE_RUN_ID=<run_id>`, this process excluded. A live process
/// whose environment reads empty is read once more after
/// [`EXEC_WINDOW`] (one wait for all of them; it blocks the calling
/// thread, only when there are such processes).
pub fn processes_of(run_id: &str) -> Vec<i32> {
    let needle = format!("CRONLEASE_RUN_ID={run_id}");
    let own = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut unsure = Vec::new();
    for pid in entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if pid == own {
            continue;
        }
        match environment(pid, &needle) {
            Environment::Holds => found.push(pid),
            Environment::Empty if alive_user_process(pid) => unsure.push(pid),
            Environment::Empty | Environment::Other => {}
        }
    }
    if !unsure.is_empty() {
        std::thread::sleep(EXEC_WINDOW);
        found.extend(
            unsure
                .into_iter()
                .filter(|&pid| environment(pid, &needle) == Environment::Holds),
        );
    }
    found
        .into_iter()
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

/// What a process's environment says of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Environment {
    /// It holds the run's variable.
    Holds,
    /// It reads empty: a zombie, a kernel thread, a process in the middle
    /// of `execve`, or one started without any environment.
    Empty,
    /// Anything else, or unreadable (gone, another user's).
    Other,
}

fn environment(pid: u32, needle: &str) -> Environment {
    match fs::read(format!("/proc/{pid}/environ")) {
        Ok(environ) if environ.is_empty() => Environment::Empty,
        Ok(environ)
            if environ
                .split(|&b| b == 0)
                .any(|var| var == needle.as_bytes()) =>
        {
            Environment::Holds
        }
        _ => Environment::Other,
    }
}

/// Whether `pid` is neither a zombie nor a kernel thread (`PF_KTHREAD`
/// in the flags of `/proc/PID/stat`).
fn alive_user_process(pid: u32) -> bool {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // pid (comm) state ppid pgrp session tty_nr tpgid flags …; comm may
    // hold spaces and parentheses, so fields are counted after the last ')'.
    let Some((_, after)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = after.split_whitespace().collect();
    let flags = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .unwrap_or(PF_KTHREAD);
    fields.first() != Some(&"Z") && flags & PF_KTHREAD == 0
}
