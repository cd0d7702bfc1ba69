//! A job's ticks beyond one expression, with real replicas: several
//! schedules fire at their union, each instant once; `active_from` and
//! `active_until` bound the ticks; `max_runs` is counted across replicas
//! by the claim, so the cluster starts exactly that many runs and `status`
//! says the job ended; `check` shows all of it; an embedded job takes the
//! same from its builder.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cronlease::{JobBuilder, Run};

use crate::support::{
    Cluster, RedisServer, cronlease, multi_thread_runtime as runtime, now_ms, probe_job,
    read_outcomes, start_scheduler, starts, wait_until_or_show,
};

/// RFC 3339 of Unix ms.
fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a test instant")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Ticks started, each with how many runs it had.
fn run_counts(file: &std::path::Path) -> BTreeMap<i64, usize> {
    let mut counts = BTreeMap::new();
    for (tick, _, _) in starts(file) {
        *counts.entry(tick).or_default() += 1;
    }
    counts
}

#[test]
fn several_schedules_fire_at_their_union_each_instant_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("union.log");
    // Every second whose number is a multiple of 2 or of 3: the
    // multiples of 6 are both, and must run once.
    let jobs = probe_job("union", "x", &file, "true", "").replace(
        "schedule = \"x\"",
        "schedule = [\"*/2 * * * * *\", \"*/3 * * * * *\"]",
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let begin = now_ms() + 1000;
    let counts = wait_until_or_show(
        Duration::from_secs(30),
        "12 seconds of ticks",
        || cluster.logs(),
        || {
            let counts = run_counts(&file);
            (counts.range(begin..).count() >= 8 && counts.keys().last()? - begin >= 12_000)
                .then_some(counts)
        },
    );
    cluster.stop_all();
    let end = *counts.keys().last().expect("ticks ran") - 3000;
    for (tick, n) in &counts {
        assert_eq!(*n, 1, "tick {tick} ran {n} times");
        let second = tick / 1000 % 60;
        assert!(
            second % 2 == 0 || second % 3 == 0,
            "tick {tick} is of neither expression"
        );
    }
    // Every instant of the union in the span ran.
    for tick in (begin.div_euclid(1000) * 1000 + 1000..end).step_by(1000) {
        let second = tick / 1000 % 60;
        if second % 2 == 0 || second % 3 == 0 {
            assert!(
                counts.contains_key(&tick),
                "tick {tick} (second {second}) did not run"
            );
        }
    }
}

#[test]
fn a_window_runs_the_ticks_from_its_start_up_to_its_end() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("window.log");
    let from = (now_ms() / 1000 + 6) * 1000;
    let until = from + 4000;
    let extra = format!(
        "active_from = \"{}\"\nactive_until = \"{}\"",
        rfc3339(from),
        rfc3339(until)
    );
    let jobs = probe_job("windowed", "* * * * * *", &file, "true", &extra);
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("a").display().to_string();
    let status = cronlease(["status", "--config", config.as_str()]).expect_code(0);
    assert!(
        status
            .stdout()
            .contains(&format!("active {} to {}", rfc3339(from), rfc3339(until))),
        "{}",
        status.stdout()
    );
    wait_until_or_show(
        Duration::from_secs(30),
        "the window to close",
        || cluster.logs(),
        || (now_ms() > until + 2500).then_some(()),
    );
    cluster.stop_all();
    let counts = run_counts(&file);
    let ticks: Vec<i64> = counts.keys().copied().collect();
    assert_eq!(
        ticks,
        vec![from, from + 1000, from + 2000, from + 3000],
        "ticks from active_from, up to active_until not included"
    );
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    // After the window, the job has no tick: `status` warns.
    let after = cronlease(["status", "--config", config.as_str()]).expect_code(0);
    assert!(
        after.stdout().contains("active_until"),
        "{}",
        after.stdout()
    );
    assert!(after.stdout().contains("has passed"), "{}", after.stdout());
    // `explain` says why the seconds around the window are no ticks.
    let explain = |tick: i64| {
        let tick = rfc3339(tick);
        cronlease([
            "explain",
            "windowed",
            "--tick",
            tick.as_str(),
            "--json",
            "--config",
            config.as_str(),
        ])
        .expect_code(0)
        .stdout()
    };
    let before: serde_json::Value = serde_json::from_str(&explain(from - 1000)).expect("JSON");
    assert_eq!(before["verdict"], "not_a_tick", "{before}");
    assert_eq!(before["reasons"][0]["kind"], "outside_window", "{before}");
    let at_end: serde_json::Value = serde_json::from_str(&explain(until)).expect("JSON");
    assert_eq!(at_end["reasons"][0]["kind"], "outside_window", "{at_end}");
    assert!(
        at_end["reasons"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("active_until, not included")),
        "{at_end}"
    );
}

#[test]
fn max_runs_is_counted_across_replicas_and_ends_the_job() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("limited.log");
    let jobs = probe_job("limited", "* * * * * *", &file, "true", "max_runs = 3");
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    wait_until_or_show(
        Duration::from_secs(30),
        "three runs",
        || cluster.logs(),
        || (starts(&file).len() >= 3).then_some(()),
    );
    // Long enough for any fourth to have started.
    std::thread::sleep(Duration::from_secs(4));
    let config = cluster.config_path("a").display().to_string();
    let status = cronlease(["status", "--config", config.as_str()]).expect_code(0);
    let explained = cronlease(["explain", "limited", "--json", "--config", config.as_str()])
        .expect_code(0)
        .stdout();
    let logs = cluster.logs();
    cluster.stop_all();
    let counts = run_counts(&file);
    assert_eq!(counts.len(), 3, "three ticks ran: {counts:?}\n{logs}");
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    let out = status.stdout();
    assert!(out.contains("3 of 3 runs"), "{out}");
    assert!(
        out.contains("max_runs is 3: it will not run again"),
        "{out}"
    );
    assert!(out.contains("never (see warnings)"), "{out}");
    let explained: serde_json::Value = serde_json::from_str(&explained).expect("JSON");
    assert_eq!(
        explained["reasons"][0]["kind"], "max_runs_reached",
        "{explained}"
    );
    assert!(
        logs.contains("the job has started its max_runs runs"),
        "every replica hears that the job ended:\n{logs}"
    );
}

#[test]
fn check_shows_each_schedule_the_window_and_the_ticks_of_the_union() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n\
         [jobs.lottery-draw]\nschedule = [\"0 12 * * 1-5\", \"0 20 * * 6\"]\ntimezone = \"Asia/Shanghai\"\n\
         active_from = 2026-12-01\nactive_until = 2027-01-01\nmax_runs = 30\ncommand = [\"/usr/local/bin/draw\"]\n",
    )
    .expect("write the table");
    let config = config.display().to_string();
    let out = cronlease([
        "check",
        "--config",
        config.as_str(),
        "--from",
        "2026-12-03T05:00:00Z",
        "--count",
        "4",
    ])
    .expect_code(0)
    .stdout();
    let expected = "\
lottery-draw  \"0 12 * * 1-5\"  (Asia/Shanghai; fixed time, dst_gap run_after, dst_repeat first)
              \"0 20 * * 6\"  (Asia/Shanghai; fixed time, dst_gap run_after, dst_repeat first)
  active from 2026-12-01 00:00:00 +08:00 Tue (2026-11-30T16:00:00Z)
  active until 2027-01-01 00:00:00 +08:00 Fri (2026-12-31T16:00:00Z), not included
  at most 30 runs of its schedule
  2026-12-04 12:00:00 +08:00 Fri  =  2026-12-04T04:00:00Z
  2026-12-05 20:00:00 +08:00 Sat  =  2026-12-05T12:00:00Z
  2026-12-07 12:00:00 +08:00 Mon  =  2026-12-07T04:00:00Z
  2026-12-08 12:00:00 +08:00 Tue  =  2026-12-08T04:00:00Z
";
    assert!(out.ends_with(expected), "{out}");
    let json = cronlease([
        "check",
        "--json",
        "--config",
        config.as_str(),
        "--from",
        "2026-12-30T05:00:00Z",
    ])
    .expect_code(0)
    .stdout();
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let job = &json["jobs"][0];
    assert_eq!(job["schedule"], "0 12 * * 1-5 | 0 20 * * 6");
    assert_eq!(job["schedules"][1]["expression"], "0 20 * * 6");
    assert_eq!(job["active_until"], "2026-12-31T16:00:00Z");
    assert_eq!(job["max_runs"], 30);
    // 2026-12-31 12:00 in Shanghai is the last tick before the end.
    assert_eq!(job["next"], serde_json::json!(["2026-12-31T04:00:00Z"]));
}

#[test]
fn an_embedded_job_takes_several_schedules_and_max_runs_from_its_builder() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let seen: Arc<Mutex<Vec<i64>>> = Arc::default();
    let rt = runtime();
    rt.block_on(async {
        let record = |seen: Arc<Mutex<Vec<i64>>>| {
            move |run: Run| {
                let seen = seen.clone();
                async move {
                    seen.lock()
                        .expect("no test thread panics holding it")
                        .push(run.tick().as_millisecond());
                    Ok::<(), std::io::Error>(())
                }
            }
        };
        let mut schedulers = Vec::new();
        for id in ["one", "two"] {
            let job = JobBuilder::new("sampled", "*/2 * * * * *")
                .also_at("*/3 * * * * *")
                .max_runs(4)
                .run(record(seen.clone()));
            schedulers.push(start_scheduler(&redis, &dir, id, vec![job]).await);
        }
        tokio::time::sleep(Duration::from_secs(12)).await;
        for scheduler in schedulers {
            scheduler.shutdown().await.expect("a clean stop");
        }
    });
    let ticks = seen.lock().expect("no thread panicked").clone();
    assert_eq!(ticks.len(), 4, "{ticks:?}");
    for tick in &ticks {
        let second = tick / 1000 % 60;
        assert!(second % 2 == 0 || second % 3 == 0, "{ticks:?}");
    }
    let mut redis_conn = redis.client();
    let outcomes = read_outcomes(&mut redis_conn, "cl", "sampled");
    assert_eq!(outcomes.len(), 4, "one outcome per run");
}
