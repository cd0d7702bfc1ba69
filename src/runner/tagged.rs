//! Runs without a cgroup: the processes of a run found by the
//! `CRONLEASE_RUN_ID` every one of them inherits. What leaves the run's
//! process group (`setsid`, a double fork) is still found this way, unless
//! it clears its environment or changes that variable: the weaker
//! guarantee of a replica without cgroups (README, "Runs that cannot
//! escape").

use std::fs;

/// The live processes (not zombies) whose environment holds
/// `CRONLEASE_RUN_ID=<run_id>`, this process excluded.
pub fn processes_of(run_id: &str) -> Vec<i32> {
    let needle = format!("CRONLEASE_RUN_ID={run_id}");
    let own = std::process::id();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != own)
        .filter(|&pid| {
            // A zombie's environment reads empty: it is dead already.
            fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                environ
                    .split(|&b| b == 0)
                    .any(|var| var == needle.as_bytes())
            })
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}
