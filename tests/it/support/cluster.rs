//! A test's cluster: one private Redis (or any [`Topology`] of them),
//! replica processes with their own configs and state directories, and a
//! directory for the jobs' side effects; plus the probe job whose
//! `start`/`end` lines show who ran which tick.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Outcome, RedisServer, Replica, Topology, read_outcomes, write_config_section};

/// A test's world: one Redis (by default a single [`RedisServer`]; any
/// [`Topology`]), some replicas, a directory for side effects.
pub struct Cluster<R = RedisServer> {
    pub redis: R,
    pub dir: tempfile::TempDir,
    pub replicas: Vec<Replica>,
    /// The body of every replica's `[redis]` section: the topology's own
    /// unless given to [`Cluster::with_section`].
    pub section: String,
    /// Extra environment for every replica started from now on.
    pub env: Vec<(String, String)>,
}

impl<R: Topology> Cluster<R> {
    /// Replicas reach `redis` as [`Topology::redis_section`] says.
    pub fn new(redis: R) -> Cluster<R> {
        let section = redis.redis_section();
        Cluster::with_section(redis, &section)
    }

    /// Replicas reach `redis` through the `[redis]` section body `section`
    /// (e.g. with TLS files or an ACL user added).
    pub fn with_section(redis: R, section: &str) -> Cluster<R> {
        Cluster {
            redis,
            dir: tempfile::tempdir().expect("cannot create a temporary directory"),
            replicas: Vec::new(),
            section: section.to_owned(),
            env: Vec::new(),
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
        write_config_section(&dir, &self.section, &extra, jobs)
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
        self.launch(name, extra_daemon, jobs, &[], wrapper)
    }

    /// Starts replica `name` on a host whose wall clock is `offset`
    /// (`"+1.5s"`) off ([`super::skewed_clock`]).
    pub fn start_skewed(&mut self, name: &str, jobs: &str, offset: &str) -> usize {
        self.launch(name, "", jobs, &super::skewed_clock(offset), None)
    }

    /// Starts replica `name` with the cluster's environment and `env`.
    fn launch(
        &mut self,
        name: &str,
        extra_daemon: &str,
        jobs: &str,
        env: &[(String, String)],
        wrapper: Option<Vec<String>>,
    ) -> usize {
        let config = self.config(name, extra_daemon, jobs);
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .chain(env)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.replicas
            .push(Replica::start_with(&config, name, &env, wrapper));
        self.replicas.len() - 1
    }

    pub fn wait_ready(&self) {
        for replica in &self.replicas {
            replica.wait_for_log("ready", Duration::from_secs(20));
        }
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

impl Cluster<RedisServer> {
    /// `job`'s outcome stream, read from the one Redis.
    pub fn outcomes(&self, job: &str) -> Vec<Outcome> {
        read_outcomes(&mut self.redis.client(), "cl", job)
    }

    /// The replica holding a run of `job`, once one is in flight (20 s at
    /// most).
    pub fn holder(&self, job: &str) -> String {
        super::wait_until(Duration::from_secs(20), "a run in flight", || {
            let entries: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(format!("cl:{{{job}}}:running"))
                .query(&mut self.redis.client())
                .unwrap();
            entries.values().next().map(|raw| {
                let entry: serde_json::Value = serde_json::from_str(raw).unwrap();
                entry["replica"].as_str().unwrap().to_string()
            })
        })
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
    start_lines(file, 4)
        .into_iter()
        .map(|parts| {
            (
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
                parts[3].clone(),
            )
        })
        .collect()
}

/// The `start` lines of a probe file as (tick, wall-clock ms when the run
/// began on this machine).
pub fn start_times(file: &Path) -> Vec<(i64, i64)> {
    start_lines(file, 5)
        .into_iter()
        .map(|parts| (parts[1].parse().unwrap(), parts[4].parse().unwrap()))
        .collect()
}

/// The words of each `start` line of a probe file with at least `fields`.
fn start_lines(file: &Path, fields: usize) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .filter(|parts: &Vec<String>| parts.len() >= fields && parts[0] == "start")
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
