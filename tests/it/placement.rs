//! Placement: replica tags and a job's `run_on` (only matching replicas
//! run it; a tick no live replica matches is recorded missed with the
//! reason `no_matching_replica`), and their config errors. Real replica
//! processes against a private redis-server, checked through the jobs'
//! side effects, the outcome stream and the operator commands.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Cluster, ConfigFile, RedisServer, Run, cronlease, now_ms, probe_job, starts, wait_until,
};

/// `cronlease ARGS… --config CONFIG`.
fn op(args: &[&str], config: &Path) -> Run {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    all.push("--config".into());
    all.push(config.into());
    cronlease(all)
}

/// `ARGS… --json`, parsed.
#[track_caller]
fn op_json(args: &[&str], config: &Path) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let run = op(&all, config).expect_code(0);
    serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("not JSON: {e}\n{}", run.describe()))
}

/// The ticks started, each with the replicas that started it.
fn runs_by_tick(file: &Path) -> BTreeMap<i64, Vec<String>> {
    let mut by_tick: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (tick, _, replica) in starts(file) {
        by_tick.entry(tick).or_default().push(replica);
    }
    by_tick
}

/// SIGTERM to every replica still running; each must exit 0.
fn stop_running(cluster: &mut Cluster) {
    let mut running = Vec::new();
    for (index, replica) in cluster.replicas.iter_mut().enumerate() {
        if replica.try_exit().is_none() {
            replica.sigterm();
            running.push(index);
        }
    }
    for index in running {
        let replica = &mut cluster.replicas[index];
        let status = replica.wait_exit(Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "replica {} did not exit 0: {status:?}\n{}",
            replica.name(),
            replica.log()
        );
    }
}

#[test]
fn only_replicas_with_every_tag_run_a_job_and_ticks_none_matches_are_missed() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job(
        "train",
        "* * * * * *",
        &file,
        "true",
        "run_on = [\"gpu\", \"eu\"]",
    );
    let b_tags = "tags = [\"gpu\", \"eu\"]";
    cluster.start_with("a", "tags = [\"gpu\"]", &jobs, None);
    let b = cluster.start_with("b", b_tags, &jobs, None);
    cluster.start("c", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "5 ticks run", || {
        (runs_by_tick(&file).len() >= 5).then_some(())
    });
    let config = cluster.config_path("a");
    let status = op(&["status"], &config).expect_code(0).stdout();
    assert!(status.contains("tags"), "a tags column: {status}");
    assert!(!status.contains("no live replica has tags"), "{status}");

    // The matching replica stops: the others record its ticks missed.
    cluster.replicas[b].sigterm();
    let stopped = cluster.replicas[b].wait_exit(Duration::from_secs(20));
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
    let stopped_ms = now_ms();
    let unplaced = wait_until(Duration::from_secs(20), "3 ticks recorded unplaced", || {
        let missed: Vec<i64> = cluster
            .outcomes("train")
            .iter()
            .filter(|o| o.field("reason") == Some("no_matching_replica"))
            .map(|o| o.tick())
            .collect();
        (missed.len() >= 3).then_some(missed)
    });
    let outcomes = cluster.outcomes("train");
    for tick in &unplaced {
        let records: Vec<_> = outcomes.iter().filter(|o| o.tick() == *tick).collect();
        assert_eq!(records.len(), 1, "tick {tick} recorded once: {records:?}");
        assert_eq!(records[0].status(), "missed");
        assert_eq!(records[0].field("run_on"), Some("eu gpu"));
    }
    let status = op(&["status"], &config).expect_code(0).stdout();
    assert!(
        status.contains("job \"train\": no live replica has tags eu, gpu"),
        "{status}"
    );
    let report = op_json(&["status"], &config);
    let job = &report["jobs"][0];
    assert_eq!(job["run_on"], serde_json::json!(["eu", "gpu"]), "{job:#}");
    assert_eq!(job["matching_replicas"], serde_json::json!([]), "{job:#}");
    let history = op_json(&["history", "train"], &config);
    let shown = history["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .filter(|o| o["no_matching_replica"] == "eu,gpu")
        .count();
    assert!(shown >= 3, "{history:#}");
    let text = op(&["history", "train"], &config).expect_code(0).stdout();
    assert!(
        text.contains("missed (no replica with tags eu,gpu)"),
        "{text}"
    );
    let tick = unplaced[0].to_string();
    let explained = op_json(&["explain", "train", "--tick", &tick], &config);
    assert_eq!(explained["verdict"], "missed", "{explained:#}");
    assert_eq!(
        explained["reasons"][0]["kind"], "no_matching_replica",
        "{explained:#}"
    );
    let text = op(&["explain", "train", "--tick", &tick], &config)
        .expect_code(0)
        .stdout();
    assert!(
        text.contains("no live replica had the tags eu,gpu"),
        "{text}"
    );

    // Back: its runs resume, and the others still run none.
    let b = cluster.start_with("b", b_tags, &jobs, None);
    cluster.replicas[b].wait_for_log("ready", Duration::from_secs(20));
    let restarted_ms = now_ms();
    wait_until(
        Duration::from_secs(30),
        "3 ticks run after the restart",
        || {
            let after = runs_by_tick(&file)
                .into_keys()
                .filter(|tick| *tick > restarted_ms)
                .count();
            (after >= 3).then_some(())
        },
    );
    stop_running(&mut cluster);
    let logs = cluster.logs();
    let by_tick = runs_by_tick(&file);
    for (tick, replicas) in &by_tick {
        assert_eq!(replicas, &["b"], "tick {tick} run by b alone, once\n{logs}");
        assert!(
            !unplaced.contains(tick),
            "tick {tick} both run and missed\n{logs}"
        );
    }
    let late: Vec<_> = by_tick
        .keys()
        .filter(|tick| **tick > stopped_ms + 1000 && **tick < restarted_ms - 1000)
        .collect();
    assert!(late.is_empty(), "ran while b was away: {late:?}\n{logs}");
}

#[test]
fn bad_tags_and_broadcast_combinations_are_refused_with_their_place() {
    let check = |text: &str, expected: &[&str]| {
        let config = ConfigFile::new(text);
        let run = cronlease(["check", "--config", &config.path().to_string_lossy()]);
        let out = format!("{}{}", run.stdout(), run.stderr());
        assert_ne!(run.code(), Some(0), "{text}\n{}", run.describe());
        for fragment in expected {
            assert!(
                out.contains(fragment),
                "{fragment:?} not in:\n{out}\nfor:\n{text}"
            );
        }
    };
    let redis = "[redis]\nurl = \"redis://127.0.0.1:1\"\n";
    let job = "[jobs.clean]\nschedule = \"@hourly\"\ncommand = [\"true\"]\n";
    check(
        &format!("{redis}[daemon]\ntags = [\"gpu\", \"e u\"]\n{job}"),
        &[
            ":4:",
            "field `tags`",
            "invalid tag \"e u\"",
            "A-Z a-z 0-9 _ . -",
        ],
    );
    check(
        &format!("{redis}{job}run_on = [\"\"]\n"),
        &[":6:", "job \"clean\"", "field `run_on`", "invalid tag \"\""],
    );
    check(
        &format!("{redis}{job}mode = \"all\"\n"),
        &[
            ":6:",
            "field `mode`",
            "unknown variant `all`",
            "`one`",
            "`every_replica`",
        ],
    );
    check(
        &format!("{redis}{job}mode = \"every_replica\"\noverlap = \"replace\"\n"),
        &[
            ":6:",
            "field `mode`",
            "cannot go with `overlap = \"replace\"`",
        ],
    );
    check(
        &format!("{redis}{job}mode = \"every_replica\"\nmax_runs = 3\n"),
        &["field `mode`", "cannot go with `max_runs`"],
    );
    check(
        &format!("{redis}[groups.db]\nmax = 2\n\n{job}mode = \"every_replica\"\ngroup = \"db\"\n"),
        &["field `mode`", "cannot go with `group`"],
    );
    check(
        &format!(
            "{redis}{job}[jobs.after]\nafter = [\"clean\"]\ncommand = [\"true\"]\nmode = \"every_replica\"\n"
        ),
        &[":9:", "job \"after\"", "cannot go with `after`"],
    );
    check(
        &format!(
            "[redis]\nquorum = [\"redis://127.0.0.1:1\", \"redis://127.0.0.1:2\", \"redis://127.0.0.1:3\"]\n{job}mode = \"every_replica\"\n"
        ),
        &["field `mode`", "cannot go with `[redis] quorum`"],
    );
    check(
        &format!("{redis}{job}mode = \"every_replica\"\non_holder_lost = \"rerun\"\n"),
        &[
            "field `mode`",
            "cannot go with `on_holder_lost = \"rerun\"`",
        ],
    );
    check(
        &format!(
            "{redis}{job}mode = \"every_replica\"\n[jobs.report]\nafter = [\"clean\"]\ncommand = [\"true\"]\n"
        ),
        &[
            "job \"report\"",
            "field `after`",
            "\"clean\" in `after` is a broadcast job",
        ],
    );
}

#[test]
fn the_library_runs_a_job_only_on_instances_with_its_tags() {
    use std::sync::{Arc, Mutex};

    use cronlease::{JobBuilder, Run, SchedulerError};

    use crate::support::{cluster as connect, multi_thread_runtime};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let seen: Arc<Mutex<Vec<(i64, String)>>> = Arc::default();
    let job = || {
        let seen = seen.clone();
        JobBuilder::new("train", "* * * * * *")
            .run_on(["gpu"])
            .run(move |run: Run| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .expect("no test thread panics holding it")
                        .push((run.tick().as_millisecond(), run.replica().to_string()));
                    Ok::<(), std::io::Error>(())
                }
            })
    };
    multi_thread_runtime().block_on(async {
        let mut schedulers = Vec::new();
        for (id, tags) in [
            ("shop-gpu", vec!["gpu", "eu"]),
            ("shop-1", vec![]),
            ("shop-2", vec!["eu"]),
        ] {
            let scheduler = connect(&redis)
                .await
                .scheduler()
                .replica_id(id)
                .tags(tags)
                .state_dir(&dir.path().join(id))
                .lease(Duration::from_secs(2))
                .heartbeat(Duration::from_secs(1))
                .shutdown_grace(Duration::from_secs(1))
                .job(job())
                .start()
                .expect("valid settings");
            schedulers.push(scheduler);
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        let refused = connect(&redis)
            .await
            .scheduler()
            .tag("g p u")
            .state_dir(&dir.path().join("bad"))
            .start();
        let Err(SchedulerError::Config(error)) = refused else {
            panic!("a bad tag was accepted");
        };
        let text = error.to_string();
        assert!(
            text.contains("field `tags`") && text.contains("invalid tag \"g p u\""),
            "{text}"
        );
        for scheduler in schedulers {
            scheduler.shutdown().await.expect("a clean shutdown");
        }
    });
    let seen = seen
        .lock()
        .expect("no test thread panics holding it")
        .clone();
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(
        seen.iter().all(|(_, replica)| replica == "shop-gpu"),
        "{seen:?}"
    );
    let mut ticks: Vec<i64> = seen.iter().map(|(tick, _)| *tick).collect();
    ticks.dedup();
    assert_eq!(ticks.len(), seen.len(), "each tick once: {seen:?}");
}

#[test]
fn a_broadcast_job_runs_each_tick_once_on_every_replica_across_a_kill_and_restart() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job(
        "clean-cache",
        "* * * * * *",
        &file,
        "sleep 0.3",
        "mode = \"every_replica\"",
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let config = cluster.config_path("a");
    // Each of the three runs each tick.
    let full = wait_until(Duration::from_secs(30), "3 ticks run by all three", || {
        let full: Vec<i64> = runs_by_tick(&file)
            .into_iter()
            .filter(|(_, replicas)| replicas.len() == 3)
            .map(|(tick, _)| tick)
            .collect();
        (full.len() >= 3).then_some(full)
    });
    wait_until(Duration::from_secs(10), "status: last 3 of 3 ok", || {
        let text = op(&["status"], &config).expect_code(0).stdout();
        text.contains("last: 3 of 3 ok").then_some(())
    });
    let history = op_json(&["history", "clean-cache"], &config);
    let tick = full[0];
    let mut replicas: Vec<&str> = history["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .filter(|o| o["tick_ms"] == tick)
        .map(|o| o["replica"].as_str().expect("a replica"))
        .collect();
    replicas.sort();
    assert_eq!(replicas, ["a", "b", "c"], "{history:#}");

    // b dies without a word and comes back under its name.
    let b = cluster.index_of("b");
    cluster.replicas[b].kill9();
    let killed_ms = now_ms();
    std::thread::sleep(Duration::from_millis(2500));
    let b = cluster.start("b", &jobs);
    cluster.replicas[b].wait_for_log("ready", Duration::from_secs(20));
    let restarted_ms = now_ms();
    wait_until(Duration::from_secs(30), "b runs again", || {
        let again = runs_by_tick(&file)
            .into_iter()
            .filter(|(tick, replicas)| *tick > restarted_ms && replicas.iter().any(|r| r == "b"))
            .count();
        (again >= 3).then_some(())
    });
    stop_running(&mut cluster);
    let logs = cluster.logs();
    let by_tick = runs_by_tick(&file);
    for (tick, replicas) in &by_tick {
        let mut sorted = replicas.clone();
        sorted.sort();
        let before = sorted.len();
        sorted.dedup();
        assert_eq!(
            before,
            sorted.len(),
            "tick {tick} run twice on one replica: {replicas:?}\n{logs}"
        );
    }
    // a and c missed nothing meanwhile.
    let (first, last) = (
        *by_tick.keys().next().expect("ticks"),
        *by_tick.keys().last().expect("ticks"),
    );
    for name in ["a", "c"] {
        let missing: Vec<i64> = (0..=(last - first) / 1000)
            .map(|i| first + i * 1000)
            .filter(|tick| *tick > killed_ms - 3000 && *tick < restarted_ms + 3000)
            .filter(|tick| {
                !by_tick
                    .get(tick)
                    .is_some_and(|r| r.iter().any(|r| r == name))
            })
            .collect();
        assert!(missing.is_empty(), "{name} missed {missing:?}\n{logs}");
    }
}

#[test]
fn a_broadcast_job_is_not_triggered_by_hand() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = crate::support::write_config(
        dir.path(),
        &redis.url(),
        "",
        "[jobs.clean-cache]\nschedule = \"@hourly\"\ncommand = [\"true\"]\nmode = \"every_replica\"\n",
    );
    let run = op(&["trigger", "clean-cache"], &config).expect_code(2);
    assert!(
        run.stderr().contains("broadcast job") && run.stderr().contains("nothing queued"),
        "{}",
        run.describe()
    );
}

#[test]
fn the_dashboard_shows_a_job_no_replica_matches_and_a_broadcast_tick() {
    use crate::support::http;

    let mut cluster = Cluster::new(RedisServer::start());
    let daemon = "dashboard_listen = \"127.0.0.1:0\"\ndashboard_read = \"public\"\n";
    let jobs = "[jobs.train]\nschedule = \"* * * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\nrun_on = [\"gpu\"]\n\
                [jobs.clean-cache]\nschedule = \"* * * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\nmode = \"every_replica\"\n";
    let web = cluster.start_with("web-1", daemon, jobs, None);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "a tick recorded unplaced", || {
        cluster
            .outcomes("train")
            .iter()
            .any(|o| o.field("reason") == Some("no_matching_replica"))
            .then_some(())
    });
    let addr = crate::dashboard::dashboard_addr(&cluster.replicas[web]);
    let get = |path: &str| {
        let answer = http::get(&addr, &addr, path, "");
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
        answer.body
    };
    let overview = get("/");
    assert!(overview.contains("no matching replica"), "{overview}");
    assert!(overview.contains("last: 1 of 1 ok"), "{overview}");
    let page = get("/jobs/train");
    assert!(
        page.contains("no live replica has tags gpu") && page.contains("replicas with tags"),
        "{page}"
    );
    let page = get("/jobs/clean-cache");
    assert!(
        page.contains("every_replica") && page.contains("1 of 1 ok"),
        "{page}"
    );
    cluster.stop_all();
}
