//! Runs in cgroups: each attempt of a command in a cgroup v2 of its own, so
//! nothing it starts can leave — not by `setsid`, not by a double fork, not
//! by a daemonizing tool — and a run is over only when its cgroup is empty.
//!
//! The replica finds the unified hierarchy (`cgroup2` in its mountinfo:
//! `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a hybrid
//! one) and its own cgroup in it, and makes its runs' parent there:
//!
//! - its own cgroup is the root (a root process outside systemd): a
//!   `cronlease.<replica>.<pid>` child of the root (removed at its end; a
//!   crashed replica's is removed by the next start on the host);
//! - its own cgroup is `…/supervisor` (systemd's `DelegateSubgroup=` with
//!   `Delegate=yes`, as the shipped unit does): a `runs` sibling of it;
//! - otherwise (a delegated cgroup without the subgroup): a `runs` child
//!   of its own.
//!
//! Where none of these can be created the replica falls back to process
//! groups (`Containment::ProcessGroup`) and says so. A child joins its
//! cgroup between its start and exec (it writes `0` to `cgroup.procs`,
//! `runner/spawn/`), so not
//! even its first instruction runs outside. Killing writes `cgroup.kill`
//! (Linux 5.14), or SIGKILLs every member until none is left on older
//! kernels.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Where this replica's runs get their cgroups.
#[derive(Debug)]
pub struct Cgroups {
    /// The parent of every run's cgroup.
    base: PathBuf,
    /// `base` was made by this replica for itself (removed at its end).
    owned: Owned,
}

/// Whether the runs' parent cgroup is this replica's to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owned {
    Replica,
    Shared,
}

impl Cgroups {
    /// The runs' parent cgroup of this process, created if needed; the
    /// reason when there is none (no cgroup v2, not writable).
    pub fn detect(replica: &str) -> Result<Cgroups, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let mount =
            cgroup2_mount(&mountinfo).ok_or("no cgroup v2 (cgroup2) file system is mounted")?;
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let own = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or("this process has no cgroup v2 membership")?
            .trim();
        let own_dir = mount.join(own.trim_start_matches('/'));
        let (base, owned) = if own == "/" {
            remove_stale(&mount);
            let name = format!("cronlease.{replica}.{}", std::process::id());
            (mount.join(name), Owned::Replica)
        } else if own_dir.file_name().is_some_and(|n| n == "supervisor") {
            let parent = own_dir.parent().unwrap_or(&mount).to_path_buf();
            (parent.join("runs"), Owned::Shared)
        } else {
            (own_dir.join("runs"), Owned::Shared)
        };
        match fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "cannot create the runs' cgroup {}: {e} (delegate a cgroup to the service: systemd's Delegate=yes)",
                    base.display()
                ));
            }
        }
        // Probe: a run's cgroup can be made and removed here.
        let probe = base.join(format!("probe-{}", std::process::id()));
        fs::create_dir(&probe)
            .and_then(|()| fs::remove_dir(&probe))
            .map_err(|e| format!("cannot create cgroups under {}: {e}", base.display()))?;
        Ok(Cgroups { base, owned })
    }

    /// The parent of the runs' cgroups.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Makes `controllers` available to the runs' cgroups (enables them in
    /// the parent's `cgroup.subtree_control`, and in the root's first when
    /// the parent is this replica's own child of the root); the reason
    /// when one cannot be.
    pub fn enable(&self, controllers: &[&str]) -> Result<(), String> {
        let read = |path: PathBuf| fs::read_to_string(path).unwrap_or_default();
        let has = |text: &str, c: &str| text.split_whitespace().any(|w| w == c);
        for &controller in controllers {
            if has(&read(self.base.join("cgroup.subtree_control")), controller) {
                continue;
            }
            if !has(&read(self.base.join("cgroup.controllers")), controller)
                && self.owned == Owned::Replica
                && let Some(root) = self.base.parent()
            {
                let _ = fs::write(
                    root.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                );
            }
            let available = read(self.base.join("cgroup.controllers"));
            if !has(&available, controller) {
                return Err(format!(
                    "the {controller} controller is not available to the runs' cgroups under {} (available there: {})",
                    self.base.display(),
                    if available.trim().is_empty() {
                        "none"
                    } else {
                        available.trim()
                    }
                ));
            }
            fs::write(
                self.base.join("cgroup.subtree_control"),
                format!("+{controller}"),
            )
            .map_err(|e| {
                format!(
                    "cannot enable the {controller} controller for the runs' cgroups under {}: {e}",
                    self.base.display()
                )
            })?;
        }
        Ok(())
    }

    /// A new cgroup for one attempt of run `run_id`, with `limits`.
    pub fn create(
        &self,
        run_id: &str,
        attempt: u32,
        limits: &crate::config::Limits,
    ) -> std::io::Result<RunCgroup> {
        if !crate::store::is_run_id(run_id) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the run id is not one cronlease makes (letters, digits and -): no cgroup is named after it",
            ));
        }
        let dir = self.base.join(format!("run-{run_id}-{attempt}"));
        match fs::create_dir_all(&dir) {
            Ok(()) => {}
            // Left by an attempt of the same run id that ended abnormally.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let set = |file: &str, value: String| {
            fs::write(dir.join(file), value).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("cannot set {file} of {}: {e}", dir.display()),
                )
            })
        };
        if let Some(bytes) = limits.memory_max_bytes {
            set("memory.max", bytes.to_string())?;
        }
        if let Some(percent) = limits.cpu_max_percent {
            // A quota per 100 ms period: 1% of one CPU is 1 ms.
            set("cpu.max", format!("{} 100000", u64::from(percent) * 1000))?;
        }
        if let Some(tasks) = limits.tasks_max {
            set("pids.max", tasks.to_string())?;
        }
        let procs = OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_CLOEXEC)
            .open(dir.join("cgroup.procs"))?;
        Ok(RunCgroup { dir, procs })
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        if self.owned == Owned::Replica {
            // Empty by now (every run ended); if not, left for the next
            // start of this replica.
            let _ = fs::remove_dir(&self.base);
        }
    }
}

/// Removes the runs' cgroups of replicas that died without removing them
/// (`cronlease.<replica>.<pid>` whose pid is gone), killing what their runs
/// left: a replica killed with -9 takes its commands with it
/// (`PR_SET_PDEATHSIG`), but not what they moved out of their group.
/// (Under systemd, the unit's own stop does this for the delegated cgroup.)
/// A replica that is PID 1 (a container's init, in a PID namespace of its
/// own) sees no process outside its namespace, so it cannot tell a live
/// replica's cgroup from a dead one's: it leaves them all alone.
fn remove_stale(mount: &Path) {
    if std::process::id() == 1 {
        return;
    }
    let Ok(entries) = fs::read_dir(mount) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("cronlease.")
            .and_then(|rest| rest.rsplit('.').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(runs) = fs::read_dir(entry.path()) {
            for run in runs.flatten().filter(|r| r.path().is_dir()) {
                let _ = fs::write(run.path().join("cgroup.kill"), b"1");
                for _ in 0..100 {
                    if fs::remove_dir(run.path()).is_ok() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let _ = fs::remove_dir(entry.path());
    }
}

/// The mount point of the cgroup2 file system in a mountinfo text.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // id parent major:minor root mount-point options… - fstype source …
        let (left, right) = line.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// One attempt's cgroup.
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, open for the child to write itself into.
    procs: File,
}

impl RunCgroup {
    /// `cgroup.procs` for a child to write `0` into between its start and
    /// exec (one write(2) on a file opened before, nothing that allocates
    /// or locks), which moves it into this cgroup.
    pub fn procs_for_child(&self) -> std::io::Result<File> {
        self.procs.try_clone()
    }

    /// The processes in the cgroup now.
    pub fn members(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Sends `signal` to every process in the cgroup.
    pub fn signal(&self, signal: Signal) {
        if signal == Signal::SIGKILL && fs::write(self.dir.join("cgroup.kill"), b"1").is_ok() {
            return;
        }
        for pid in self.members() {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// What the cgroup's processes used: CPU from `cpu.stat` (always there
    /// in cgroup v2), the peak memory from `memory.peak` (only with the
    /// memory controller enabled for it, and Linux 5.19).
    pub fn usage(&self) -> crate::task::Usage {
        let cpu_us = fs::read_to_string(self.dir.join("cpu.stat"))
            .ok()
            .and_then(|stat| {
                stat.lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse().ok())
            });
        let peak_memory_bytes = fs::read_to_string(self.dir.join("memory.peak"))
            .ok()
            .and_then(|v| v.trim().parse().ok());
        let oom_kills = fs::read_to_string(self.dir.join("memory.events"))
            .ok()
            .and_then(|events| {
                events
                    .lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            });
        crate::task::Usage {
            cpu_us,
            peak_memory_bytes,
            oom_kills,
        }
    }

    /// Removes the (empty) cgroup.
    pub fn remove(&self) {
        // The last members may take a moment to be reaped by the kernel.
        for _ in 0..50 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
        tracing::warn!(cgroup = %self.dir.display(), "cannot remove a run's cgroup; it stays until the replica's next start");
    }
}

/// What a process in a cgroup is: `pid command line`, for the log.
pub fn describe(pid: i32) -> String {
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let text: Vec<String> = cmdline
        .split(|&b| b == 0)
        .filter(|part| !part.is_empty())
        .map(|part| String::from_utf8_lossy(part).into_owned())
        .collect();
    format!("{pid} {}", text.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup2_mount_is_found_in_pure_and_hybrid_hierarchies() {
        let hybrid = "35 25 0:30 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n\
                      36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n\
                      37 35 0:32 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory\n";
        assert_eq!(
            cgroup2_mount(hybrid),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let pure = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
        assert_eq!(cgroup2_mount(pure), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(cgroup2_mount("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n"), None);
    }
}
