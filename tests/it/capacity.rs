//! Placement and capacity: a replica's `[daemon] max_runs` and the
//! concurrency groups (`[groups.<name>] max`, a job's `group`). Real
//! replica processes against a private redis-server; what ran, and when,
//! is read from the jobs' side-effect file (`start`/`end` lines with the
//! job, run id, replica and wall-clock ms), what was recorded from the
//! outcome streams; and the library's `max_runs` on two instances in one
//! process.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::support::{
    Cluster, ConfigFile, REDIS_SECTION, RedisServer, cronlease, now_ms, wait_until,
};

/// A job in `file`'s probe format: `start <job> <run id> <replica> <ms>`,
/// `sleep SECONDS`, then `end …`.
fn job(name: &str, schedule: &str, file: &Path, seconds: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\n{}{extra}\n",
        probe_shell(file, seconds)
    )
}

/// The `shell` line of a job in `file`'s probe format (see [`job`]).
fn probe_shell(file: &Path, seconds: &str) -> String {
    format!(
        "shell = '''\
         echo \"start $CRONLEASE_JOB $CRONLEASE_RUN_ID $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}; \
         sleep {seconds}; \
         echo \"end $CRONLEASE_JOB $CRONLEASE_RUN_ID $CRONLEASE_REPLICA $(date +%s%3N)\" >> {file}'''\n",
        file = file.display()
    )
}

/// Waits until `file` shows `count` ended runs of `job`.
#[track_caller]
fn wait_for_ended(file: &Path, job: &str, count: usize, timeout: Duration) {
    wait_until(timeout, &format!("{count} runs of {job}"), || {
        (spans(file)
            .iter()
            .filter(|s| s.job == job && s.to.is_some())
            .count()
            >= count)
            .then_some(())
    });
}

/// One run as the side-effect file shows it.
#[derive(Debug, Clone)]
struct Span {
    job: String,
    run_id: String,
    replica: String,
    from: i64,
    /// None: no `end` line (the run was killed, or is still running).
    to: Option<i64>,
}

fn spans(file: &Path) -> Vec<Span> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut by_run: BTreeMap<String, Span> = BTreeMap::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        if parts.len() < 5 {
            continue;
        }
        let Ok(at) = parts[4].parse::<i64>() else {
            continue;
        };
        match parts[0] {
            "start" => {
                by_run.insert(
                    parts[2].to_string(),
                    Span {
                        job: parts[1].to_string(),
                        run_id: parts[2].to_string(),
                        replica: parts[3].to_string(),
                        from: at,
                        to: None,
                    },
                );
            }
            "end" => {
                if let Some(span) = by_run.get_mut(parts[2]) {
                    span.to = Some(at);
                }
            }
            _ => {}
        }
    }
    by_run.into_values().collect()
}

/// The most runs among `spans` at once, each ending at its `end` line or,
/// without one, at `open_until` (the run's replica was killed then, or
/// the file was read then); and the runs of that moment.
fn most_at_once(spans: &[&Span], open_until: impl Fn(&Span) -> i64) -> (usize, Vec<String>) {
    let mut events: Vec<(i64, i32, usize)> = Vec::new();
    for (n, span) in spans.iter().enumerate() {
        let to = span
            .to
            .unwrap_or_else(|| open_until(span))
            .max(span.from + 1);
        events.push((span.from, 1, n));
        events.push((to, -1, n));
    }
    // Ends sort before starts at the same instant.
    events.sort_by_key(|&(at, delta, _)| (at, delta));
    let mut open: BTreeSet<usize> = BTreeSet::new();
    let (mut most, mut when) = (0, Vec::new());
    for (_, delta, n) in events {
        if delta > 0 {
            open.insert(n);
            if open.len() > most {
                most = open.len();
                when = open.iter().map(|&i| format!("{:?}", spans[i])).collect();
            }
        } else {
            open.remove(&n);
        }
    }
    (most, when)
}

#[test]
fn a_full_replica_leaves_ticks_to_the_others_and_a_tick_nobody_has_room_for_is_skipped_capacity() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    // 3.5 runs in flight on average for 3 replicas of one slot each: most
    // ticks run, on whichever replica has room; the rest find every
    // replica full and are recorded skipped_capacity.
    let jobs = job(
        "work",
        "* * * * * *",
        &file,
        "3.5",
        "overlap = \"allow\"\nmisfire_grace = \"5s\"",
    );
    for name in ["a", "b", "c"] {
        cluster.start_with(name, "max_runs = 1\n", &jobs, None);
    }
    cluster.wait_ready();
    let begun = now_ms();
    wait_until(Duration::from_secs(40), "15 runs", || {
        (spans(&file).len() >= 15).then_some(())
    });
    // `status` says how full each replica is.
    let status = cronlease([
        "status".into(),
        "--config".into(),
        cluster.config_path("a").into_os_string(),
    ])
    .expect_code(0);
    assert!(
        status.stdout().contains(" of 1"),
        "status shows no capacity\n{}",
        status.describe()
    );
    cluster.stop_all();
    let logs = cluster.logs();
    let all = spans(&file);
    for replica in ["a", "b", "c"] {
        let own: Vec<&Span> = all.iter().filter(|s| s.replica == replica).collect();
        let (most, when) = most_at_once(&own, |_| i64::MAX);
        assert!(
            most <= 1,
            "{replica} ran {most} runs at once: {when:#?}\n{logs}"
        );
    }
    let used: BTreeSet<&str> = all.iter().map(|s| s.replica.as_str()).collect();
    assert_eq!(used.len(), 3, "every replica took ticks: {used:?}\n{logs}");
    let outcomes = cluster.outcomes("work");
    let skipped: Vec<_> = outcomes
        .iter()
        .filter(|o| o.status() == "skipped_capacity")
        .collect();
    assert!(
        !skipped.is_empty(),
        "no tick recorded skipped_capacity: {:?}\n{logs}",
        outcomes.iter().map(|o| o.status()).collect::<Vec<_>>()
    );
    for o in &skipped {
        assert_eq!(o.field("reason"), Some("capacity"), "{o:?}");
        assert!(o.tick() >= begun - 2000, "{o:?}");
    }
    // Each tick once: run, or recorded skipped.
    let mut ticks: BTreeMap<i64, usize> = BTreeMap::new();
    for o in outcomes.iter().filter(|o| !o.stale()) {
        *ticks.entry(o.tick()).or_default() += 1;
    }
    let twice: Vec<_> = ticks.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks recorded twice: {twice:?}\n{logs}");
    let missed = outcomes.iter().filter(|o| o.status() == "missed").count();
    assert_eq!(
        missed, 0,
        "ticks recorded missed instead of skipped_capacity\n{logs}"
    );
}

/// The replica holding a run of one of `jobs` in flight, per Redis.
fn a_holder(cluster: &Cluster, jobs: &[&str]) -> String {
    wait_until(Duration::from_secs(20), "a run in flight", || {
        jobs.iter().find_map(|job| {
            let entries: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg(format!("cl:{{{job}}}:running"))
                .query(&mut cluster.redis.client())
                .unwrap();
            entries.values().next().map(|raw| {
                let entry: serde_json::Value = serde_json::from_str(raw).unwrap();
                entry["replica"].as_str().unwrap().to_string()
            })
        })
    })
}

/// Every process under `pid` (its children, theirs, …).
fn descendants(pid: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut queue = vec![pid];
    while let Some(parent) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                found.push(child);
                queue.push(child);
            }
        }
    }
    found
}

fn signal_all(pids: &[u32], signal: nix::sys::signal::Signal) {
    for pid in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(*pid as i32), signal);
    }
}

#[test]
fn a_group_never_runs_more_than_its_max_even_when_a_holder_dies_or_freezes() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let names = ["g1", "g2", "g3", "g4"];
    let mut jobs = "[groups.db]\nmax = 2\n\n".to_string();
    for name in names {
        jobs.push_str(&job(
            name,
            "* * * * * *",
            &file,
            "2.5",
            "group = \"db\"\nmisfire_grace = \"3s\"",
        ));
    }
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "6 runs", || {
        (spans(&file).len() >= 6).then_some(())
    });
    // `status` shows the group's use.
    let status = cronlease([
        "status".into(),
        "--config".into(),
        cluster.config_path("a").into_os_string(),
    ])
    .expect_code(0);
    assert!(
        status.stdout().contains("db:") && status.stdout().contains("of 2 running"),
        "status shows no group\n{}",
        status.describe()
    );
    // A holder killed: its slot comes back once its lease lapses.
    let killed = a_holder(&cluster, &names);
    let killed_at = now_ms();
    let index = cluster.index_of(&killed);
    cluster.replicas[index].kill9();
    wait_until(Duration::from_secs(20), "runs after the kill", || {
        (spans(&file)
            .iter()
            .filter(|s| s.from > killed_at + 2500)
            .count()
            >= 4)
            .then_some(())
    });
    // A holder frozen with its runs (a stalled host): its slots lapse, the
    // others take them, and it stops its runs when it wakes.
    let frozen = wait_until(Duration::from_secs(20), "a live holder", || {
        let holder = a_holder(&cluster, &names);
        (holder != killed).then_some(holder)
    });
    let index = cluster.index_of(&frozen);
    let mut pids = vec![cluster.replicas[index].pid()];
    pids.extend(descendants(pids[0]));
    let stopped_at = now_ms();
    signal_all(&pids, nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(Duration::from_secs(5));
    signal_all(&pids, nix::sys::signal::Signal::SIGCONT);
    let woke_at = now_ms();
    wait_until(Duration::from_secs(20), "runs after the freeze", || {
        (spans(&file)
            .iter()
            .filter(|s| s.from > woke_at + 1000)
            .count()
            >= 4)
            .then_some(())
    });
    let read_at = now_ms();
    for replica in &mut cluster.replicas {
        if replica.try_exit().is_none() {
            replica.sigterm();
        }
    }
    for replica in &mut cluster.replicas {
        replica.wait_exit(Duration::from_secs(20));
    }
    let logs = cluster.logs();
    let all = spans(&file);
    // A run of the frozen replica in flight at the freeze counts until the
    // freeze only: frozen with its host, it resumed for the moment its
    // woken replica took to stop it (the fence's case, not the slot's).
    let frozen_runs: BTreeSet<String> = all
        .iter()
        .filter(|s| {
            s.replica == frozen && s.from < stopped_at && s.to.is_none_or(|to| to > stopped_at)
        })
        .map(|s| s.run_id.clone())
        .collect();
    let counted: Vec<Span> = all
        .iter()
        .map(|s| {
            let mut s = s.clone();
            if frozen_runs.contains(&s.run_id) {
                s.to = Some(s.to.map_or(stopped_at, |to| to.min(stopped_at)));
            }
            s
        })
        .collect();
    let refs: Vec<&Span> = counted.iter().collect();
    let (most, when) = most_at_once(&refs, |s| {
        // No end line: killed with its replica (the kill's instant), or
        // still running when the file was read.
        if s.replica == killed && s.from < killed_at {
            killed_at
        } else {
            read_at
        }
    });
    assert!(
        most <= 2,
        "{most} runs of the group at once: {when:#?}\n{logs}"
    );
    assert_eq!(most, 2, "the group never ran 2 at once\n{logs}");
    // The ticks that found no slot within their grace are recorded so.
    let skipped: Vec<_> = names
        .iter()
        .flat_map(|job| cluster.outcomes(job))
        .filter(|o| o.status() == "skipped_capacity")
        .collect();
    assert!(
        !skipped.is_empty(),
        "no tick recorded skipped_capacity\n{logs}"
    );
    for o in &skipped {
        assert_eq!(o.field("reason"), Some("group"), "{o:?}");
        assert_eq!(o.field("group"), Some("db"), "{o:?}");
    }
    // The group's slots are given back as runs end.
    let slots: i64 = redis::cmd("ZCARD")
        .arg("cl:{group:db}:slots")
        .query(&mut cluster.redis.client())
        .unwrap();
    assert!(slots <= 2, "{slots} slots held after the stop\n{logs}");
}

#[test]
fn ticks_waiting_for_a_group_slot_go_oldest_first() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    // Every 10 s: `hog` holds the group's one slot for 3 s; `older` (at
    // second 1) and `younger` (second 2) wait for it; when it frees,
    // `older` goes first, every time, whichever replica asks first.
    let mut jobs = "[groups.one]\nmax = 1\n\n".to_string();
    let extra = "group = \"one\"\nmisfire_grace = \"8s\"";
    jobs.push_str(&job("hog", "0/10 * * * * *", &file, "3", extra));
    jobs.push_str(&job("older", "1/10 * * * * *", &file, "0.5", extra));
    jobs.push_str(&job("younger", "2/10 * * * * *", &file, "0.5", extra));
    for name in ["a", "b"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    wait_for_ended(&file, "younger", 3, Duration::from_secs(45));
    cluster.stop_all();
    let logs = cluster.logs();
    let all = spans(&file);
    let mut cycles: BTreeMap<i64, Vec<(&str, i64)>> = BTreeMap::new();
    for s in &all {
        cycles
            .entry(s.from / 10_000)
            .or_default()
            .push((&s.job, s.from));
    }
    let mut checked = 0;
    for (cycle, mut runs) in cycles {
        runs.sort_by_key(|r| r.1);
        let order: Vec<&str> = runs.iter().map(|r| r.0).collect();
        if order == ["hog", "older", "younger"] {
            checked += 1;
        } else if order.contains(&"older") && order.contains(&"younger") {
            let at = |job| order.iter().position(|j| *j == job);
            assert!(
                at("older") < at("younger"),
                "cycle {cycle}: {order:?}\n{logs}"
            );
        }
    }
    assert!(checked >= 2, "too few whole cycles: {all:#?}\n{logs}");
    let (most, when) = most_at_once(&all.iter().collect::<Vec<_>>(), |_| i64::MAX);
    assert!(most <= 1, "{when:#?}\n{logs}");
}

/// `check` on `text`: exit 2 and every fragment in stderr.
#[track_caller]
fn refused(text: &str, fragments: &[&str]) {
    let file = ConfigFile::new(text);
    let run = cronlease([
        "check".into(),
        "--config".into(),
        file.path().as_os_str().to_owned(),
    ]);
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    for fragment in fragments {
        assert!(
            run.stderr().contains(fragment),
            "stderr lacks {fragment:?}\n{}",
            run.describe()
        );
    }
}

#[test]
fn capacity_and_groups_are_checked_with_their_place_and_what_is_valid() {
    let job = "[jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"true\"]\n";
    refused(
        &format!("{REDIS_SECTION}[daemon]\nmax_runs = 0\n{job}"),
        &[
            "max_runs",
            "0 is out of range: expected 1 to 1000000",
            "jobs.toml:4:",
        ],
    );
    refused(
        &format!("{REDIS_SECTION}[daemon]\nmax_runs = \"two\"\n{job}"),
        &["max_runs", "jobs.toml:4:"],
    );
    refused(
        &format!("{REDIS_SECTION}[groups.db]\nmax = 2\n\n{job}group = \"dv\"\n"),
        &[
            "job \"draw\"",
            "field `group`",
            "unknown group \"dv\": expected one of db",
            "jobs.toml:9:",
        ],
    );
    refused(
        &format!("{REDIS_SECTION}[groups.db]\nmax = 0\n\n{job}group = \"db\"\n"),
        &["groups.db", "max", "expected 1 to 100000"],
    );
    refused(
        &format!("{REDIS_SECTION}[groups.db]\n\n{job}group = \"db\"\n"),
        &["groups.db", "missing `max`"],
    );
    refused(
        &format!("{REDIS_SECTION}[groups.db]\nmax = 1\nmin = 1\n\n{job}"),
        &["groups.db", "min"],
    );
    refused(
        &format!(
            "[redis]\ncluster = [\"redis://127.0.0.1:1\"]\n\n[groups.db]\nmax = 1\n\n{job}group = \"db\"\n"
        ),
        &["group", "not available with `[redis] cluster`"],
    );
    refused(
        &format!(
            "[redis]\nquorum = [\"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\", \"redis://127.0.0.1:3\"]\n\n[groups.db]\nmax = 1\n\n{job}group = \"db\"\n"
        ),
        &["group", "not available with `[redis] quorum`"],
    );
    let ok = ConfigFile::new(&format!(
        "{REDIS_SECTION}[daemon]\nmax_runs = 4\n\n[groups.db]\nmax = 2\n\n{job}group = \"db\"\n"
    ));
    cronlease([
        "check".into(),
        "--config".into(),
        ok.path().as_os_str().to_owned(),
    ])
    .expect_code(0);
}

#[test]
fn a_manual_run_of_a_job_whose_group_is_full_waits_for_the_slot() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let mut jobs = "[groups.one]\nmax = 1\n\n".to_string();
    jobs.push_str(&job("hog", "0/10 * * * * *", &file, "4", "group = \"one\""));
    jobs.push_str(&job("asked", "0 0 1 1 *", &file, "0.5", "group = \"one\""));
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "a run of hog", || {
        spans(&file).iter().any(|s| s.job == "hog").then_some(())
    });
    cronlease([
        "trigger".into(),
        "asked".into(),
        "--config".into(),
        cluster.config_path("a").into_os_string(),
    ])
    .expect_code(0);
    let asked = wait_until(Duration::from_secs(30), "the manual run", || {
        spans(&file)
            .into_iter()
            .find(|s| s.job == "asked" && s.to.is_some())
    });
    cluster.stop_all();
    let logs = cluster.logs();
    let all = spans(&file);
    let (most, when) = most_at_once(&all.iter().collect::<Vec<_>>(), |_| i64::MAX);
    assert!(most <= 1, "{when:#?}\n{logs}");
    let hog = all.iter().find(|s| s.job == "hog").expect("a run of hog");
    assert!(
        asked.from >= hog.to.unwrap_or(i64::MAX),
        "the manual run started before the slot was free: {asked:?} {hog:?}\n{logs}"
    );
    let outcomes = cluster.outcomes("asked");
    assert!(
        outcomes
            .iter()
            .any(|o| o.status() == "ok" && o.field("trigger") == Some("manual")),
        "{outcomes:?}\n{logs}"
    );
}

#[test]
fn a_followers_run_in_a_full_group_waits_for_the_slot() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let mut jobs = "[groups.one]\nmax = 1\n\n".to_string();
    // `up` ends while `hog` holds the group's one slot: its follower waits.
    jobs.push_str(&job("hog", "0/10 * * * * *", &file, "4", "group = \"one\""));
    jobs.push_str(&job("up", "1/10 * * * * *", &file, "0.1", ""));
    jobs.push_str(&format!(
        "[jobs.follower]\nafter = [\"up\"]\ngroup = \"one\"\n{}",
        probe_shell(&file, "0.5")
    ));
    cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_for_ended(&file, "follower", 2, Duration::from_secs(40));
    cluster.stop_all();
    let logs = cluster.logs();
    let all = spans(&file);
    let grouped: Vec<&Span> = all.iter().filter(|s| s.job != "up").collect();
    let (most, when) = most_at_once(&grouped, |_| i64::MAX);
    assert!(most <= 1, "{when:#?}\n{logs}");
    // Each follower's run started after the hog's run it met had ended.
    for f in all.iter().filter(|s| s.job == "follower") {
        let up = all
            .iter()
            .filter(|s| s.job == "up" && s.from <= f.from)
            .max_by_key(|s| s.from)
            .expect("the upstream run");
        assert!(f.from >= up.from, "{f:?} {up:?}");
        let hog_then = all
            .iter()
            .find(|s| s.job == "hog" && s.from <= up.from && s.to.is_none_or(|to| to > up.from));
        if let Some(hog) = hog_then {
            assert!(
                f.from >= hog.to.unwrap_or(i64::MAX),
                "the follower started while the hog held the slot: {f:?} {hog:?}\n{logs}"
            );
        }
    }
}

#[test]
fn the_librarys_max_runs_keeps_each_instance_within_its_limit() {
    use std::sync::{Arc, Mutex};

    use std::time::Instant;

    use cronlease::{JobBuilder, Run};

    use crate::support::{cluster as connect, multi_thread_runtime, read_outcomes};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    /// (instance, job, start, end) of a run, by the test's clock.
    type Held = (String, String, Instant, Instant);
    let spans: Arc<Mutex<Vec<Held>>> = Arc::default();
    let job = |name: &str| {
        let spans = spans.clone();
        JobBuilder::new(name, "*/3 * * * * *").run(move |run: Run| {
            let spans = spans.clone();
            async move {
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(1_500)).await;
                spans
                    .lock()
                    .expect("no test thread panics holding it")
                    .push((
                        run.replica().to_string(),
                        run.job().to_string(),
                        from,
                        Instant::now(),
                    ));
                Ok::<(), std::io::Error>(())
            }
        })
    };
    multi_thread_runtime().block_on(async {
        let mut instances = Vec::new();
        for id in ["shop-1", "shop-2"] {
            let scheduler = connect(&redis)
                .await
                .scheduler()
                .replica_id(id)
                .max_runs(1)
                .state_dir(&dir.path().join(id))
                .lease(Duration::from_secs(2))
                .heartbeat(Duration::from_secs(1))
                .shutdown_grace(Duration::from_secs(3))
                .job(job("a"))
                .job(job("b"))
                .job(job("c"))
                .start()
                .expect("valid settings");
            instances.push(scheduler);
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        for scheduler in instances {
            scheduler.shutdown().await.expect("a clean shutdown");
        }
    });
    let spans = spans.lock().expect("no test thread panics").clone();
    assert!(spans.len() >= 4, "too few runs: {spans:?}");
    for instance in ["shop-1", "shop-2"] {
        let mut own: Vec<_> = spans.iter().filter(|s| s.0 == instance).collect();
        own.sort_by_key(|s| s.2);
        for pair in own.windows(2) {
            assert!(
                pair[1].2 >= pair[0].3,
                "{instance} ran two at once: {:?} and {:?}",
                pair[0],
                pair[1]
            );
        }
    }
    // Three jobs, two instances with room for one each: the third waits
    // for room within its grace, and each tick is recorded once: run
    // (`ok`), given up for want of room (`skipped_capacity`) or because
    // the late run of the tick before still ran (`skipped_overlap`).
    let mut recorded = Vec::new();
    for name in ["a", "b", "c"] {
        let outcomes = read_outcomes(&mut redis.client(), "cl", name);
        let ticks: BTreeSet<i64> = outcomes.iter().map(|o| o.tick()).collect();
        assert_eq!(ticks.len(), outcomes.len(), "{name}: a tick recorded twice");
        recorded.extend(
            outcomes
                .iter()
                .map(|o| (name, o.tick(), o.status().to_string())),
        );
    }
    assert!(
        recorded.iter().all(
            |(_, _, status)| ["ok", "skipped_capacity", "skipped_overlap"]
                .contains(&status.as_str())
        ),
        "{recorded:?}"
    );
}
