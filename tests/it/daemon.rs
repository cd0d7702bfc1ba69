//! `cronlease run`: real replicas against a private redis-server, checked
//! through the job's side effects (a file outside Redis) and the outcome
//! stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::{
    Cluster, Outcome, RedisServer, current_by_tick, probe_job, start_times, starts, wait_until,
};

#[test]
fn three_replicas_run_every_tick_exactly_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("every-second", "* * * * * *", &file, "true", "");
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    wait_for_starts(&file, 12, Duration::from_secs(40), "12 ticks run");
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
    // The preferred replica claims ahead of the tick (`ahead_ms` in the
    // claim's log line), yet no run started before its tick: Redis runs on
    // this machine, so the local clock the probe reads is Redis's.
    assert!(
        logs.lines().any(|line| line.contains("claimed")
            && line.contains("ahead_ms=")
            && !line.contains("ahead_ms=0")),
        "no claim was made ahead of its tick\n{logs}"
    );
    for (tick, started) in start_times(&file) {
        assert!(
            started >= tick,
            "a run started {} ms before its tick {tick}\n{logs}",
            tick - started
        );
    }
}

#[test]
fn clock_skew_keeps_exactly_once_and_never_starts_early() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("skewed", "* * * * * *", &file, "true", "");
    cluster.start_skewed("ahead", &jobs, "+1.5s");
    cluster.start_skewed("behind", &jobs, "-0.7s");
    cluster.start("exact", &jobs);
    cluster.wait_ready();
    wait_for_starts(&file, 10, Duration::from_secs(40), "10 ticks run");
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
    let victim = cluster.holder("long");
    // The run is killed with its replica, so the victim goes only once the
    // marker is made: killed before that, the next run would sleep instead.
    let first = wait_until(
        Duration::from_secs(5),
        "the first run's start line and marker",
        || starts(&file).first().cloned().filter(|_| marker.exists()),
    );
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
    let victim = cluster.holder("long");
    let first = wait_until(Duration::from_secs(5), "the first run's pid", || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
    });
    let first_tick = wait_until(Duration::from_secs(5), "the first run's start line", || {
        starts(&file).first().map(|s| s.0)
    });
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

/// (start, end) wall-clock ms of each run in a probe file, by tick.
fn intervals(file: &Path) -> Vec<(i64, i64, i64)> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut open: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    let mut done = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() < 5 {
            continue;
        }
        let key = (parts[1].parse().unwrap(), parts[2].parse().unwrap());
        let at: i64 = parts[4].parse().unwrap();
        match parts[0] {
            "start" => {
                open.insert(key, at);
            }
            "end" => {
                if let Some(start) = open.remove(&key) {
                    done.push((key.0, start, at));
                }
            }
            _ => {}
        }
    }
    done
}

/// The most runs that were in flight at once.
fn max_concurrency(runs: &[(i64, i64, i64)]) -> usize {
    runs.iter()
        .map(|&(_, start, _)| {
            runs.iter()
                .filter(|&&(_, s, e)| s <= start && start < e)
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[test]
fn overlap_skip_allow_and_replace() {
    let mut cluster = Cluster::new(RedisServer::start());
    let (skip, allow, replace) = (
        cluster.path("skip"),
        cluster.path("allow"),
        cluster.path("replace"),
    );
    let jobs = [
        probe_job(
            "skip",
            "* * * * * *",
            &skip,
            "sleep 2.5",
            "overlap = \"skip\"",
        ),
        probe_job(
            "allow",
            "* * * * * *",
            &allow,
            "sleep 2.5",
            "overlap = \"allow\"",
        ),
        probe_job(
            "replace",
            "* * * * * *",
            &replace,
            "sleep 10",
            "overlap = \"replace\"",
        ),
    ]
    .concat();
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "runs of every policy", || {
        (intervals(&skip).len() >= 2 && intervals(&allow).len() >= 3 && starts(&replace).len() >= 4)
            .then_some(())
    });
    cluster.stop_all();
    let logs = cluster.logs();

    let skip_runs = intervals(&skip);
    assert_eq!(
        max_concurrency(&skip_runs),
        1,
        "skip ran concurrently: {skip_runs:?}\n{logs}"
    );
    let skip_outcomes = cluster.outcomes("skip");
    assert!(
        skip_outcomes
            .iter()
            .any(|o| o.status() == "skipped_overlap"),
        "{skip_outcomes:#?}"
    );
    current_by_tick(&skip_outcomes, &logs);

    let allow_runs = intervals(&allow);
    assert!(
        max_concurrency(&allow_runs) >= 2,
        "allow never overlapped: {allow_runs:?}"
    );
    let allow_outcomes = cluster.outcomes("allow");
    assert!(
        allow_outcomes.iter().all(|o| o.status() == "ok"),
        "{allow_outcomes:#?}"
    );
    current_by_tick(&allow_outcomes, &logs);

    // Each replaced run loses its lease and is killed; the last one is
    // interrupted by the shutdown.
    let replace_outcomes = cluster.outcomes("replace");
    let lost = replace_outcomes
        .iter()
        .filter(|o| o.status() == "lost_lease" && !o.stale())
        .count();
    assert!(lost >= 2, "{replace_outcomes:#?}\n{logs}");
    assert!(
        replace_outcomes.iter().all(|o| o.status() != "ok"),
        "{replace_outcomes:#?}"
    );
    current_by_tick(&replace_outcomes, &logs);
}

#[test]
fn misfire_policies_after_every_replica_was_down() {
    let mut cluster = Cluster::new(RedisServer::start());
    let files: Vec<PathBuf> = ["once", "skip", "all"]
        .iter()
        .map(|n| cluster.path(n))
        .collect();
    let jobs = [
        probe_job(
            "once",
            "* * * * * *",
            &files[0],
            "true",
            "misfire = \"run_once\"\nmisfire_grace = \"1m\"",
        ),
        probe_job(
            "skip",
            "* * * * * *",
            &files[1],
            "true",
            "misfire = \"skip\"\nmisfire_grace = \"1m\"",
        ),
        probe_job(
            "all",
            "* * * * * *",
            &files[2],
            "true",
            "misfire = \"run_all\"\nmisfire_grace = \"1m\"",
        ),
    ]
    .concat();
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "two ticks of each job", || {
        files.iter().all(|f| starts(f).len() >= 2).then_some(())
    });
    cluster.stop_all();
    let before: Vec<i64> = files
        .iter()
        .map(|f| starts(f).iter().map(|s| s.0).max().unwrap())
        .collect();
    std::thread::sleep(Duration::from_secs(5));
    cluster.replicas.clear();
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "ticks after the restart", || {
        files
            .iter()
            .zip(&before)
            .all(|(f, b)| starts(f).iter().filter(|s| s.0 > b + 6000).count() >= 2)
            .then_some(())
    });
    cluster.stop_all();
    let logs = cluster.logs();

    let ticks = |i: usize| -> Vec<i64> { starts(&files[i]).iter().map(|s| s.0).collect() };
    let misfires = |job: &str| -> Vec<i64> {
        cluster
            .outcomes(job)
            .iter()
            .filter(|o| o.field("trigger") == Some("misfire"))
            .map(Outcome::tick)
            .collect()
    };
    let gaps = |ticks: &[i64]| -> i64 { ticks.windows(2).map(|w| (w[1] - w[0]) / 1000 - 1).sum() };

    // run_once: one run for the latest missed tick; the older ones are gone.
    let once = misfires("once");
    assert_eq!(once.len(), 1, "{once:?}\n{logs}");
    assert!(
        gaps(&ticks(0)) >= 2,
        "run_once ran more than the latest missed tick: {:?}",
        ticks(0)
    );
    // skip: none of the missed ticks.
    assert!(misfires("skip").is_empty(), "{:?}", misfires("skip"));
    assert!(
        gaps(&ticks(1)) >= 3,
        "skip ran missed ticks: {:?}",
        ticks(1)
    );
    // run_all: every missed tick, oldest first: no gap at all.
    let all = misfires("all");
    assert!(all.len() >= 3, "{all:?}\n{logs}");
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "not oldest first: {all:?}"
    );
    assert_eq!(gaps(&ticks(2)), 0, "run_all left a gap: {:?}", ticks(2));
    for job in ["once", "skip", "all"] {
        current_by_tick(&cluster.outcomes(job), &logs);
    }
}

#[test]
fn timeout_retries_and_the_output_tail() {
    let mut cluster = Cluster::new(RedisServer::start());
    let counter = cluster.path("attempts");
    let jobs = format!(
        "[jobs.slow]\nschedule = \"* * * * * *\"\ncommand = [\"sleep\", \"10\"]\ntimeout = \"500ms\"\n\
         [jobs.flaky]\nschedule = \"* * * * * *\"\nretries = 3\nretry_backoff = \"100ms\"\n\
         shell = 'echo attempt >> {c}; [ $(wc -l < {c}) -ge 3 ]'\n\
         [jobs.chatty]\nschedule = \"* * * * * *\"\nshell = 'for i in $(seq 1 3000); do echo line-$i; done; sleep 0.3; echo oops >&2'\n",
        c = counter.display()
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "an outcome of each job", || {
        ["slow", "flaky", "chatty"]
            .iter()
            .all(|j| !cluster.outcomes(j).is_empty())
            .then_some(())
    });
    cluster.stop_all();

    let slow = &cluster.outcomes("slow")[0];
    assert_eq!(
        (slow.status(), slow.field("signal")),
        ("timeout", Some("15")),
        "{slow:?}"
    );
    let flaky = &cluster.outcomes("flaky")[0];
    assert_eq!(
        (flaky.status(), flaky.field("attempts")),
        ("ok", Some("3")),
        "{flaky:?}"
    );
    let chatty = &cluster.outcomes("chatty")[0];
    let output = chatty.field("output").unwrap();
    assert!(
        output.len() <= 4096 && output.len() > 4000,
        "tail of {} bytes",
        output.len()
    );
    assert!(output.ends_with("line-3000\noops\n"), "{output:?}");
}

#[test]
fn sigterm_lets_runs_finish_within_the_grace_then_interrupts_the_rest() {
    let mut cluster = Cluster::new(RedisServer::start());
    let (short, long) = (cluster.path("short"), cluster.path("long"));
    let jobs = [
        probe_job("short", "* * * * * *", &short, "sleep 2", ""),
        probe_job("long", "* * * * * *", &long, "sleep 60", ""),
    ]
    .concat();
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(10), "both jobs running", || {
        (!starts(&short).is_empty() && !starts(&long).is_empty()).then_some(())
    });
    let stopping = std::time::Instant::now();
    cluster.replicas[0].sigterm();
    let status = cluster.replicas[0].wait_exit(Duration::from_secs(20));
    let took = stopping.elapsed();
    let logs = cluster.logs();
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{logs}");
    // shutdown_grace is 5 s and kill_grace 1 s.
    assert!(
        took < Duration::from_secs(12),
        "drain took {took:?}\n{logs}"
    );
    let short_outcomes = cluster.outcomes("short");
    assert_eq!(
        short_outcomes.last().map(Outcome::status),
        Some("ok"),
        "{short_outcomes:#?}"
    );
    let long_outcomes = cluster.outcomes("long");
    assert_eq!(
        long_outcomes.last().map(Outcome::status),
        Some("interrupted"),
        "{long_outcomes:#?}"
    );
    // No lease is left behind.
    let leases: Vec<String> = redis::cmd("KEYS")
        .arg("cl:*:lease*")
        .query(&mut cluster.redis.client())
        .unwrap();
    assert!(leases.is_empty(), "{leases:?}");
}

/// Asserts that the probe file shows every tick started once and fences
/// rising with the ticks.
#[track_caller]
fn assert_each_tick_once_with_rising_fences(file: &Path) {
    let side = starts(file);
    let ticks: BTreeSet<i64> = side.iter().map(|s| s.0).collect();
    assert_eq!(ticks.len(), side.len(), "a tick ran twice: {side:?}");
    let fences: Vec<i64> = side.iter().map(|s| s.1).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "a fence went back: {fences:?}"
    );
}

/// The run ids a replica's log says it claimed.
fn claimed_run_ids(log: &str) -> Vec<String> {
    run_ids_on_lines(log, |l| {
        l.contains(" claimed ") || l.contains("claimed a rerun")
    })
}

/// The `run_id=` values of the log lines that `select` picks.
fn run_ids_on_lines(log: &str, select: impl Fn(&str) -> bool) -> Vec<String> {
    log.lines()
        .filter(|l| select(l))
        .filter_map(|l| l.split("run_id=").nth(1))
        .map(|rest| {
            rest.split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[test]
fn a_redis_restart_with_aof_loses_no_outcome_and_delivers_spooled_ones_once() {
    let mut cluster = Cluster::new(RedisServer::start_with(&[
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ]));
    let file = cluster.path("side-effects");
    let jobs = probe_job("steady", "* * * * * *", &file, "sleep 1.5", "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "two outcomes", || {
        (cluster.outcomes("steady").len() >= 2).then_some(())
    });
    // Kill Redis under a run in flight: its outcome has nowhere to go.
    cluster.holder("steady");
    cluster.redis.kill9();
    cluster.replicas[0].wait_for_log("outcome spooled", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        cluster.replicas[0].try_exit().is_none(),
        "the daemon exited while Redis was away"
    );
    cluster.redis.restart();
    cluster.replicas[0].wait_for_log("spooled outcome delivered", Duration::from_secs(20));
    let restarted = cluster.outcomes("steady").len();
    wait_until(
        Duration::from_secs(20),
        "new runs after the restart",
        || (cluster.outcomes("steady").len() >= restarted + 2).then_some(()),
    );
    cluster.stop_all();
    let log = cluster.replicas[0].log();
    let outcomes = cluster.outcomes("steady");
    // Every claimed run has exactly one outcome of its own (an `abandoned`
    // recorded by a sweep is a second record, never a second own one).
    for run_id in claimed_run_ids(&log) {
        let own = outcomes
            .iter()
            .filter(|o| o.run_id() == run_id && o.status() != "abandoned")
            .count();
        assert_eq!(
            own, 1,
            "run {run_id} has {own} outcomes\n{outcomes:#?}\n{log}"
        );
    }
    let spool = cluster.path("a").join("state").join("spool");
    let left: Vec<_> = std::fs::read_dir(&spool).unwrap().collect();
    assert!(left.is_empty(), "spool not empty: {left:?}");
    current_by_tick(&outcomes, &log);
}

#[test]
fn a_redis_restart_without_persistence_is_detected_and_fences_never_go_back() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("steady", "* * * * * *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_for_starts(&file, 3, Duration::from_secs(20), "three runs");
    cluster.redis.stop();
    cluster.redis.restart();
    cluster.replicas[0].wait_for_log("REDIS STATE LOSS DETECTED", Duration::from_secs(20));
    let before = starts(&file).len();
    wait_for_starts(
        &file,
        before + 2,
        Duration::from_secs(20),
        "runs after the restart",
    );
    cluster.stop_all();
    assert_each_tick_once_with_rising_fences(&file);
}

#[test]
fn redis_that_can_evict_keys_is_refused() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let mut cluster = Cluster::new(RedisServer::start_with(&[
            "--maxmemory",
            "100mb",
            "--maxmemory-policy",
            policy,
        ]));
        cluster.start(
            "a",
            &probe_job("j", "@hourly", &cluster.path("x"), "true", ""),
        );
        let status = cluster.replicas[0].wait_exit(Duration::from_secs(20));
        let log = cluster.replicas[0].log();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(78),
            "{policy}: {status:?}\n{log}"
        );
        assert!(
            log.contains(&format!("maxmemory-policy {policy}")) && log.contains("noeviction"),
            "{log}"
        );
    }
    let mut cluster = Cluster::new(RedisServer::start_with(&[
        "--maxmemory",
        "100mb",
        "--maxmemory-policy",
        "noeviction",
    ]));
    cluster.start(
        "a",
        &probe_job("j", "@hourly", &cluster.path("x"), "true", ""),
    );
    cluster.wait_ready();
    cluster.stop_all();
}

#[test]
fn the_lottery_draw_refuses_a_stale_fence_and_a_second_draw() {
    let redis = RedisServer::start();
    let script = crate::support::repository().join("examples/lottery-draw.sh");
    let draw = |tick: &str, fence: &str| {
        std::process::Command::new(&script)
            .args(["--winners", "3"])
            .env("LOTTERY_REDIS_URL", redis.url())
            .env("CRONLEASE_JOB", "lottery-draw")
            .env("CRONLEASE_TICK", "2026-11-22T04:00:00Z")
            .env("CRONLEASE_TICK_MS", tick)
            .env("CRONLEASE_FENCE", fence)
            .env("CRONLEASE_RUN_ID", "run")
            .env("CRONLEASE_REPLICA", "a")
            .output()
            .expect("cannot run the lottery example")
    };
    assert_eq!(draw("1000", "5").status.code(), Some(0));
    assert_eq!(
        draw("1000", "6").status.code(),
        Some(4),
        "a tick was drawn twice"
    );
    let stale = draw("2000", "4");
    assert_eq!(stale.status.code(), Some(3), "a stale fence was accepted");
    assert!(String::from_utf8_lossy(&stale.stderr).contains("stale fence 4"));
}

#[test]
fn a_redis_that_forbids_config_get_is_used_with_a_warning() {
    let mut cluster = Cluster::new(RedisServer::start_with(&["--rename-command", "CONFIG", ""]));
    let file = cluster.path("side-effects");
    cluster.start("a", &probe_job("j", "* * * * * *", &file, "true", ""));
    cluster.wait_ready();
    wait_until(Duration::from_secs(10), "a run", || {
        (!starts(&file).is_empty()).then_some(())
    });
    cluster.stop_all();
    assert!(
        cluster.logs().contains("cannot read Redis settings"),
        "{}",
        cluster.logs()
    );
}

#[test]
fn a_replica_restarted_with_an_emptied_redis_still_remembers_its_marks() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("steady", "* * * * * *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_for_starts(&file, 3, Duration::from_secs(20), "three runs");
    cluster.stop_all();
    let marks = std::fs::read_to_string(cluster.path("a").join("state").join("marks.json"))
        .expect("marks were saved");
    assert!(marks.contains("steady"), "{marks}");
    // Redis loses everything while the replica is down.
    cluster.redis.stop();
    cluster.redis.restart();
    cluster.replicas.clear();
    cluster.start("a", &jobs);
    let before = starts(&file).len();
    cluster.replicas[0].wait_for_log("REDIS STATE LOSS DETECTED", Duration::from_secs(20));
    wait_for_starts(
        &file,
        before + 2,
        Duration::from_secs(20),
        "runs after the restart",
    );
    cluster.stop_all();
    assert_each_tick_once_with_rising_fences(&file);
}

/// Regression (found by the chaos suite, seeds 8, 9, 15): after Redis lost
/// its data, a replica that had not won the latest ticks re-issued fences
/// another replica had already handed out. Every reply and announcement now
/// carries the job's fence, so each replica remembers the highest one.
#[test]
fn after_redis_loses_its_data_no_replica_reissues_a_fence() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("steady", "* * * * * *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    for wipe in 1..=3 {
        let before = starts(&file).len();
        wait_for_starts(
            &file,
            before + 3,
            Duration::from_secs(20),
            "runs before the wipe",
        );
        if wipe > 1 {
            // The wipe before was detected: by a heartbeat (a new epoch),
            // or by a claim whose replica's own answers show Redis behind.
            wait_until(Duration::from_secs(20), "the state loss detected", || {
                cluster
                    .logs()
                    .contains("REDIS STATE LOSS DETECTED")
                    .then_some(())
            });
        }
        cluster.redis.stop();
        cluster.redis.restart();
    }
    let before = starts(&file).len();
    wait_for_starts(
        &file,
        before + 3,
        Duration::from_secs(20),
        "runs after the last wipe",
    );
    cluster.stop_all();
    assert_each_tick_once_with_rising_fences(&file);
}

/// A claim that reaches Redis after its replica stopped waiting for it must
/// take no effect. `CLIENT PAUSE` holds a tick's claim attempts until past
/// the claim deadline; before the fix the first of them won when Redis
/// resumed, though its replica had given the tick up: nobody ran it, the
/// next ticks were `skipped_overlap` behind its lease, and it ended
/// `abandoned`. Now it answers `expired`, and the misfire policy decides.
#[test]
fn a_claim_that_reaches_redis_after_its_deadline_takes_no_effect() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("held", "* * * * * *", &file, "true", "");
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_for_starts(&file, 2, Duration::from_secs(20), "two runs");
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(2_500)
        .arg("ALL")
        .query::<()>(&mut cluster.redis.client())
        .expect("CLIENT PAUSE");
    std::thread::sleep(Duration::from_millis(2_500));
    let before = starts(&file).len();
    wait_for_starts(
        &file,
        before + 4,
        Duration::from_secs(20),
        "runs after the pause",
    );
    cluster.stop_all();

    let log = cluster.logs();
    assert!(
        log.contains("tick not claimed: Redis unreachable"),
        "no claim was held past its deadline; the test did not test anything\n{log}"
    );
    let outcomes = cluster.outcomes("held");
    let given_up = run_ids_on_lines(&log, |l| l.contains("tick not claimed"));
    let phantoms: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| given_up.iter().any(|id| id == o.run_id()) || o.status() == "abandoned")
        .collect();
    assert!(
        phantoms.is_empty(),
        "a claim took effect after its replica gave up: {phantoms:#?}\n{log}"
    );
    assert_each_tick_once_with_rising_fences(&file);
    current_by_tick(&outcomes, &log);
}

/// Waits until `file` holds at least `count` starts.
#[track_caller]
fn wait_for_starts(file: &Path, count: usize, timeout: Duration, what: &str) {
    wait_until(timeout, what, || {
        (starts(file).len() >= count).then_some(())
    });
}
