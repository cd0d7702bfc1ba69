//! `cronlease run`: real replicas against a private redis-server, checked
//! through the job's side effects (a file outside Redis) and the outcome
//! stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{Outcome, RedisServer, Replica, read_outcomes, wait_until, write_config};

/// A test's world: one Redis, some replicas, a directory for side effects.
struct Cluster {
    redis: RedisServer,
    dir: tempfile::TempDir,
    replicas: Vec<Replica>,
}

impl Cluster {
    fn new(redis: RedisServer) -> Cluster {
        Cluster {
            redis,
            dir: tempfile::tempdir().expect("cannot create a temporary directory"),
            replicas: Vec::new(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a config for replica `name` (its own state dir) and returns it.
    fn config(&self, name: &str, extra_daemon: &str, jobs: &str) -> PathBuf {
        let dir = self.path(name);
        std::fs::create_dir_all(&dir).expect("cannot create a replica directory");
        let extra = format!("replica_id = \"{name}\"\n{extra_daemon}");
        write_config(&dir, &self.redis.url(), &extra, jobs)
    }

    /// Starts replica `name`; returns its index.
    fn start(&mut self, name: &str, jobs: &str) -> usize {
        self.start_with(name, "", jobs, None)
    }

    fn start_with(
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

    fn wait_ready(&self) {
        for replica in &self.replicas {
            replica.wait_for_log("ready", Duration::from_secs(20));
        }
    }

    fn outcomes(&self, job: &str) -> Vec<Outcome> {
        read_outcomes(&mut self.redis.client(), "cl", job)
    }

    /// SIGTERM to every replica; each must exit 0.
    fn stop_all(&mut self) {
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
    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|r| format!("===== {}\n{}", r.name(), r.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn index_of(&self, name: &str) -> usize {
        self.replicas
            .iter()
            .position(|r| r.name() == name)
            .unwrap_or_else(|| panic!("no replica {name}"))
    }
}

/// A job that appends `start <tick_ms> <fence> <replica>` to FILE, runs
/// `body`, then appends `end …`.
fn probe_job(name: &str, schedule: &str, file: &Path, body: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\nshell = '''\
         echo \"start $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}; \
         {body}; \
         echo \"end $CRONLEASE_TICK_MS $CRONLEASE_FENCE $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}'''\n{extra}\n",
        file = file.display()
    )
}

/// The `start` lines of a probe file: (tick, fence, replica).
fn starts(file: &Path) -> Vec<(i64, i64, String)> {
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
fn current_by_tick(outcomes: &[Outcome], logs: &str) -> BTreeMap<i64, Outcome> {
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

#[test]
fn three_replicas_run_every_tick_exactly_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("every-second", "* * * * * *", &file, "true", "");
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    wait_until(Duration::from_secs(40), "12 ticks run", || {
        (starts(&file).len() >= 12).then_some(())
    });
    cluster.stop_all();

    let logs = cluster.logs();
    let side = starts(&file);
    let ticks: Vec<i64> = side.iter().map(|s| s.0).collect();
    let unique: BTreeSet<i64> = ticks.iter().copied().collect();
    assert_eq!(
        unique.len(),
        ticks.len(),
        "a tick ran twice: {side:?}\n{logs}"
    );
    // No gap: every second between the first and the last tick ran.
    let first = *unique.first().unwrap();
    let last = *unique.last().unwrap();
    assert_eq!(
        unique.len() as i64,
        (last - first) / 1000 + 1,
        "a tick was missed: {side:?}\n{logs}"
    );

    let outcomes = cluster.outcomes("every-second");
    let current = current_by_tick(&outcomes, &logs);
    assert_eq!(
        current.keys().copied().collect::<BTreeSet<_>>(),
        unique,
        "stream and side effects disagree\n{logs}"
    );
    assert!(current.values().all(|o| o.status() == "ok"), "{outcomes:?}");
    let fences: Vec<i64> = current.values().map(Outcome::fence).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing: {fences:?}"
    );
    for (tick, fence, _) in &side {
        assert_eq!(
            current[tick].fence(),
            *fence,
            "the run saw another fence than recorded"
        );
    }
    // The runs were shared: more than one replica won ticks.
    let winners: BTreeSet<&str> = current.values().map(Outcome::replica).collect();
    assert!(!winners.is_empty());
}

#[test]
fn clock_skew_keeps_exactly_once_and_never_starts_early() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("skewed", "* * * * * *", &file, "true", "");
    let faketime = |offset: &str| {
        Some(vec![
            "faketime".to_string(),
            "-f".to_string(),
            offset.to_string(),
        ])
    };
    cluster.start_with("ahead", "", &jobs, faketime("+1.5s"));
    cluster.start_with("behind", "", &jobs, faketime("-0.7s"));
    cluster.start("exact", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(40), "10 ticks run", || {
        (starts(&file).len() >= 10).then_some(())
    });
    cluster.stop_all();

    let logs = cluster.logs();
    assert!(
        logs.contains("offset_ms=-15") || logs.contains("offset_ms=-14"),
        "the +1.5 s replica did not measure its offset\n{logs}"
    );
    let side = starts(&file);
    let unique: BTreeSet<i64> = side.iter().map(|s| s.0).collect();
    assert_eq!(
        unique.len(),
        side.len(),
        "a tick ran twice: {side:?}\n{logs}"
    );
    let outcomes = cluster.outcomes("skewed");
    let current = current_by_tick(&outcomes, &logs);
    for outcome in current.values() {
        let started: i64 = outcome.field("started_ms").unwrap().parse().unwrap();
        assert!(
            started >= outcome.tick(),
            "run started {} ms before its tick by Redis time: {outcome:?}",
            outcome.tick() - started
        );
    }
}

/// The replica named in the job's `running` hash, once a run is in flight.
fn holder(cluster: &Cluster, job: &str) -> String {
    wait_until(Duration::from_secs(20), "a run in flight", || {
        let entries: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("cl:{{{job}}}:running"))
            .query(&mut cluster.redis.client())
            .unwrap();
        entries.values().next().map(|raw| {
            let entry: serde_json::Value = serde_json::from_str(raw).unwrap();
            entry["replica"].as_str().unwrap().to_string()
        })
    })
}

/// A job that sleeps on its first run only (a marker file remembers it).
fn long_first_run(name: &str, file: &Path, marker: &Path, extra: &str) -> String {
    probe_job(
        name,
        "* * * * * *",
        file,
        &format!(
            "if [ ! -e {m} ]; then touch {m}; sleep 30; fi",
            m = marker.display()
        ),
        extra,
    )
}

fn holder_lost(on_holder_lost: &str) {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let marker = cluster.path("marker");
    let jobs = long_first_run(
        "long",
        &file,
        &marker,
        &format!("on_holder_lost = \"{on_holder_lost}\""),
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let victim = holder(&cluster, "long");
    let first = starts(&file)[0].clone();
    let index = cluster.index_of(&victim);
    cluster.replicas[index].kill9();
    wait_until(
        Duration::from_secs(30),
        "abandoned recorded and later ticks run elsewhere",
        || {
            let outcomes = cluster.outcomes("long");
            let abandoned = outcomes
                .iter()
                .any(|o| o.status() == "abandoned" && o.tick() == first.0);
            let later = outcomes
                .iter()
                .filter(|o| o.status() == "ok" && o.tick() > first.0 && o.replica() != victim)
                .count();
            (abandoned && later >= 2).then_some(())
        },
    );
    if on_holder_lost == "rerun" {
        wait_until(Duration::from_secs(20), "the rerun recorded", || {
            cluster
                .outcomes("long")
                .iter()
                .any(|o| o.field("trigger") == Some("rerun") && o.status() != "skipped_overlap")
                .then_some(())
        });
    }
    cluster.replicas.remove(index);
    cluster.stop_all();

    let logs = cluster.logs();
    let outcomes = cluster.outcomes("long");
    let abandoned: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.status() == "abandoned")
        .collect();
    assert_eq!(abandoned.len(), 1, "{outcomes:#?}\n{logs}");
    assert_eq!(
        (abandoned[0].tick(), abandoned[0].replica()),
        (first.0, victim.as_str())
    );
    assert_eq!(abandoned[0].fence(), first.1);
    let reruns: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.field("trigger") == Some("rerun"))
        .collect();
    if on_holder_lost == "rerun" {
        assert_eq!(reruns.len(), 1, "{outcomes:#?}");
        assert_eq!(reruns[0].tick(), first.0);
        assert_eq!(reruns[0].status(), "ok");
        assert!(
            reruns[0].fence() > first.1,
            "the rerun has no new fence: {reruns:?}"
        );
    } else {
        assert!(reruns.is_empty(), "{reruns:?}");
    }
    // Apart from the rerun, no tick started twice.
    let side = starts(&file);
    let mut seen = BTreeSet::new();
    for (tick, fence, _) in &side {
        let is_rerun = reruns
            .iter()
            .any(|r| r.tick() == *tick && r.fence() == *fence);
        assert!(
            seen.insert(*tick) || is_rerun,
            "tick {tick} started twice: {side:?}\n{logs}"
        );
    }
}

#[test]
fn kill9_of_the_holder_is_recorded_as_abandoned() {
    holder_lost("record");
}

#[test]
fn kill9_of_the_holder_with_rerun_runs_the_tick_again_with_a_new_fence() {
    holder_lost("rerun");
}

#[test]
fn a_holder_paused_past_its_lease_kills_its_run_and_records_a_stale_lost_lease() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let marker = cluster.path("marker");
    let pid_file = cluster.path("pid");
    let jobs = probe_job(
        "long",
        "* * * * * *",
        &file,
        &format!(
            "if [ ! -e {m} ]; then touch {m}; echo $$ > {p}; sleep 30; fi",
            m = marker.display(),
            p = pid_file.display()
        ),
        "",
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let victim = holder(&cluster, "long");
    let first = wait_until(Duration::from_secs(5), "the first run's pid", || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
    });
    let first_tick = starts(&file)[0].0;
    let index = cluster.index_of(&victim);
    cluster.replicas[index].sigstop();
    // Past the lease (2 s) and the others' sweep of a silent replica (3 s).
    wait_until(
        Duration::from_secs(20),
        "abandoned recorded while paused",
        || {
            cluster
                .outcomes("long")
                .iter()
                .any(|o| o.status() == "abandoned")
                .then_some(())
        },
    );
    cluster.replicas[index].sigcont();
    wait_until(
        Duration::from_secs(10),
        "the paused holder's child killed",
        || (nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), None).is_err()).then_some(()),
    );
    wait_until(
        Duration::from_secs(10),
        "the stale lost_lease recorded",
        || {
            cluster
                .outcomes("long")
                .iter()
                .any(|o| o.status() == "lost_lease")
                .then_some(())
        },
    );
    cluster.stop_all();

    let logs = cluster.logs();
    let outcomes = cluster.outcomes("long");
    let lost: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.status() == "lost_lease")
        .collect();
    assert_eq!(lost.len(), 1, "{outcomes:#?}");
    assert_eq!(
        (lost[0].tick(), lost[0].replica(), lost[0].stale()),
        (first_tick, victim.as_str(), true),
        "{lost:?}"
    );
    current_by_tick(&outcomes, &logs);
    let side = starts(&file);
    let unique: BTreeSet<i64> = side.iter().map(|s| s.0).collect();
    assert_eq!(
        unique.len(),
        side.len(),
        "a tick ran twice: {side:?}\n{logs}"
    );
}
