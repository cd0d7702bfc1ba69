//! A test's cluster: one private Redis, replica processes with their own
//! configs and state directories, and a directory for the jobs' side effects;
//! plus the probe job whose `start`/`end` lines show who ran which tick.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Outcome, RedisServer, Replica, read_outcomes, write_config};

/// A test's world: one Redis, some replicas, a directory for side effects.
pub struct Cluster {
    pub redis: RedisServer,
    pub dir: tempfile::TempDir,
    pub replicas: Vec<Replica>,
}

impl Cluster {
    pub fn new(redis: RedisServer) -> Cluster {
        Cluster {
            redis,
            dir: tempfile::tempdir().expect("cannot create a temporary directory"),
            replicas: Vec::new(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Where [`Cluster::config`] writes replica `name`'s config.
    pub fn config_path(&self, name: &str) -> PathBuf {
        self.path(name).join("jobs.toml")
    }

    /// Writes a config for replica `name` (its own state dir) and returns it.
    pub fn config(&self, name: &str, extra_daemon: &str, jobs: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("cannot create a replica directory");
        let extra = format!("replica_id = \"{name}\"\n{extra_daemon}");
        write_config(&dir, &self.redis.url(), &extra, jobs)
    }

    /// Starts replica `name`; returns its index.
    pub fn start(&mut self, name: &str, jobs: &str) -> usize {
        self.start_with(name, "", jobs, None)
    }

    pub fn start_with(
        &mut self,
        name: &str,
        extra_daemon: &str,
        jobs: &str,
        wrapper: Option<Vec<String>>,
    ) -> usize {
        let config = self.config(name, extra_daemon, jobs);
        self.replicas
            .push(Replica::start_with(&config, name, &[], wrapper));
        self.replicas.len() - 1
    }

    pub fn wait_ready(&self) {
        for replica in &self.replicas {
            replica.wait_for_log("ready", Duration::from_secs(20));
        }
    }

    pub fn outcomes(&self, job: &str) -> Vec<Outcome> {
        read_outcomes(&mut self.redis.client(), "cl", job)
    }

    /// SIGTERM to every replica; each must exit 0.
    pub fn stop_all(&mut self) {
        for replica in &self.replicas {
            replica.sigterm();
        }
        for replica in &mut self.replicas {
            let status = replica.wait_exit(Duration::from_secs(20));
            assert!(
                status.is_some_and(|s| s.success()),
                "replica {} did not exit 0 after SIGTERM: {status:?}\n{}",
                replica.name(),
                replica.log()
            );
        }
    }

    /// Every replica's log, for assertion messages.
    pub fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("===== {}\n{}", r.name(), r.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn index_of(&self, name: &str) -> usize {
        self.replicas
            .iter()
            .position(|r| r.name() == name)
            .unwrap_or_else(|| panic!("no replica {name}"))
    }
}

/// A job that appends `start <tick_ms> <fence> <replica>` to FILE, runs
/// `body`, then appends `end …`.
pub fn probe_job(name: &str, schedule: &str, file: &Path, body: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\nshell = '''\
         echo \"start $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}; \
         {body}; \
         echo \"end $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}'''\n{extra}\n",
        file = file.display()
    )
}

/// The `start` lines of a probe file: (tick, fence, replica).
pub fn starts(file: &Path) -> Vec<(i64, i64, String)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (parts.first() == Some(&"start") && parts.len() >= 4).then(|| {
                (
                    parts[1].parse().unwrap(),
                    parts[2].parse().unwrap(),
                    parts[3].to_string(),
                )
            })
        })
        .collect()
}

/// Asserts each tick has exactly one current outcome, and returns them by tick.
#[track_caller]
pub fn current_by_tick(outcomes: &[Outcome], logs: &str) -> BTreeMap<i64, Outcome> {
    let mut by_tick: BTreeMap<i64, Outcome> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| !o.stale()) {
        if outcome.status() == "abandoned" {
            continue;
        }
        if let Some(previous) = by_tick.insert(outcome.tick(), outcome.clone()) {
            panic!(
                "tick {} has two current outcomes: {previous:?} and {outcome:?}\n{logs}",
                outcome.tick()
            );
        }
    }
    by_tick
}
