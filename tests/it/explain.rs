//! `cronlease explain` and the dashboard's explain page, against a private
//! redis-server and real replicas: one test per reason a tick ran or did
//! not, each checked through `--json` (the shape the guide documents) and
//! the exit status.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Cluster, Outcome, RedisServer, Run, cronlease, http, probe_job, wait_until, write_config,
};

/// How long a test waits for replicas to do what it expects.
const PATIENCE: Duration = Duration::from_secs(20);

/// `cronlease explain JOB --config CONFIG [EXTRA…]`.
fn explain(config: &Path, job: &str, extra: &[&str]) -> Run {
    let mut args: Vec<String> = vec![
        "explain".into(),
        job.into(),
        "--config".into(),
        config.to_string_lossy().into_owned(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    cronlease(args)
}

/// `explain … --json`, parsed; it must exit 0 and print one object.
#[track_caller]
fn explain_json(config: &Path, job: &str, extra: &[&str]) -> Value {
    let mut args = extra.to_vec();
    args.push("--json");
    let run = explain(config, job, &args).expect_code(0);
    let value: Value = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("not one JSON value: {e}\n{}", run.describe()));
    assert!(value.is_object(), "{}", run.describe());
    value
}

/// `explain --tick TICK_MS --json`.
#[track_caller]
fn explain_tick(config: &Path, job: &str, tick_ms: i64) -> Value {
    explain_json(config, job, &["--tick", &tick_ms.to_string()])
}

/// The reason of `kind` in an explanation.
#[track_caller]
fn reason<'a>(explanation: &'a Value, kind: &str) -> &'a Value {
    explanation["reasons"]
        .as_array()
        .and_then(|reasons| reasons.iter().find(|r| r["kind"] == kind))
        .unwrap_or_else(|| panic!("no reason {kind:?} in {explanation:#}"))
}

/// A config for a test without replicas: Redis and `jobs`.
fn lone_config(redis: &RedisServer, dir: &Path, jobs: &str) -> PathBuf {
    write_config(dir, &redis.url(), "", jobs)
}

/// Waits for the first outcome of `job` that `wanted` accepts.
#[track_caller]
fn wait_for(
    cluster: &Cluster,
    job: &str,
    what: &str,
    wanted: impl Fn(&Outcome) -> bool,
) -> Outcome {
    wait_until(PATIENCE, what, || {
        cluster
            .outcomes(job)
            .into_iter()
            .find(|o| !o.stale() && wanted(o))
    })
}

/// A cluster whose one replica, alpha, runs `job` every second with
/// `body` and the job settings `extra`, once it is ready.
fn one_replica(job: &str, body: &str, extra: &str) -> Cluster {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("probe");
    let jobs = probe_job(job, "* * * * * *", &file, body, extra);
    cluster.start("alpha", &jobs);
    cluster.wait_ready();
    cluster
}

#[test]
fn explain_says_who_ran_a_tick_with_which_fence_and_how_it_ended() {
    let cluster = one_replica("beat", "true", "");
    let ok = wait_for(&cluster, "beat", "an ok outcome", |o| o.status() == "ok");
    let config = cluster.config_path("alpha");
    let e = explain_tick(&config, "beat", ok.tick());
    assert_eq!(e["verdict"], "ran", "{e:#}");
    assert_eq!(e["run"]["status"], "ok", "{e:#}");
    assert_eq!(e["run"]["replica"], "alpha", "{e:#}");
    assert_eq!(e["run"]["fence"].as_i64(), Some(ok.fence()), "{e:#}");
    assert!(
        e["run"]["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{e:#}"
    );
    assert!(
        e["run"]["late_ms"].as_i64().is_some_and(|l| l >= 0),
        "{e:#}"
    );
    let text = explain(&config, "beat", &["--tick", &ok.tick().to_string()]).expect_code(0);
    assert!(
        text.stdout().contains("RAN: ran on alpha"),
        "{}",
        text.describe()
    );
}

#[test]
fn explain_says_how_a_failed_run_ended() {
    let cluster = one_replica("flaky", "exit 3", "");
    let failed = wait_for(&cluster, "flaky", "a failed outcome", |o| {
        o.status() == "failed"
    });
    let e = explain_tick(&cluster.config_path("alpha"), "flaky", failed.tick());
    assert_eq!(e["verdict"], "ran", "{e:#}");
    assert_eq!(e["run"]["status"], "failed", "{e:#}");
    assert_eq!(e["run"]["exit_code"], 3, "{e:#}");
    assert_eq!(e["run"]["attempts"], 1, "{e:#}");
}

#[test]
fn explain_shows_a_run_in_flight_with_its_lease() {
    let cluster = one_replica("slow", "sleep 30", "overlap = \"skip\"\n");
    let config = cluster.config_path("alpha");
    let tick: i64 = wait_until(PATIENCE, "a run in flight", || {
        let running: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg("cl:{slow}:running")
            .query(&mut cluster.redis.client())
            .ok()?;
        let (_, raw) = running.into_iter().next()?;
        serde_json::from_str::<Value>(&raw).ok()?["tick"].as_i64()
    });
    let e = explain_tick(&config, "slow", tick);
    assert_eq!(e["verdict"], "running", "{e:#}");
    assert_eq!(e["run"]["replica"], "alpha", "{e:#}");
    assert!(e["run"]["status"].is_null(), "{e:#}");
    assert!(
        e["run"]["lease_left_ms"].as_i64().is_some_and(|l| l > 0),
        "{e:#}"
    );
}

#[test]
fn explain_says_an_instant_is_not_a_tick_with_the_dst_rule_near_it() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.close-day]\nschedule = \"0 30 2 * * *\"\ntimezone = \"Europe/Berlin\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    // 03:30 CEST on the day 02:00–03:00 does not exist in Berlin.
    let e = explain_json(&config, "close-day", &["--tick", "2026-03-29T01:30:00Z"]);
    assert_eq!(e["verdict"], "not_a_tick", "{e:#}");
    // 02:30 fell in the gap and ran at its end, 03:00 CEST.
    assert_eq!(
        e["schedule"]["previous_tick"], "2026-03-29T01:00:00Z",
        "{e:#}"
    );
    assert_eq!(e["schedule"]["next_tick"], "2026-03-30T00:30:00Z", "{e:#}");
    assert_eq!(e["schedule"]["dst"]["kind"], "gap", "{e:#}");
    assert_eq!(e["schedule"]["dst"]["rule"], "dst_gap = run_after", "{e:#}");
    assert!(
        reason(&e, "not_a_tick")["text"]
            .as_str()
            .unwrap()
            .contains("dst_gap = run_after")
    );
    // The same instant written with its offset reads the same.
    let same = explain_json(
        &config,
        "close-day",
        &["--tick", "2026-03-29T03:30:00+02:00"],
    );
    assert_eq!(same["tick"], "2026-03-29T01:30:00Z", "{same:#}");
}

#[test]
fn explain_names_who_paused_a_job_and_when() {
    let cluster = one_replica("beat", "true", "");
    wait_for(&cluster, "beat", "an outcome", |_| true);
    let config = cluster.config_path("alpha");
    let paused = cronlease(["pause", "beat", "--config", config.to_str().unwrap()]).expect_code(0);
    let who = paused
        .stdout()
        .trim()
        .rsplit(' ')
        .next()
        .unwrap_or_default()
        .to_string();
    let at: i64 = crate::support::hget(&cluster.redis, "cl:{beat}:state", "paused_at_ms")
        .expect("paused_at_ms")
        .parse()
        .expect("a number");
    let tick = (at / 1000 + 2) * 1000;
    wait_until(PATIENCE, "the paused tick to pass", || {
        let mark: Option<String> =
            crate::support::hget(&cluster.redis, "cl:{beat}:state", "last_tick");
        mark.and_then(|m| m.parse::<i64>().ok())
            .filter(|m| *m >= tick)
    });
    let e = explain_tick(&config, "beat", tick);
    assert_eq!(e["verdict"], "not_run", "{e:#}");
    let paused = reason(&e, "paused");
    assert_eq!(paused["evidence"]["by"], who.as_str(), "{e:#}");
    assert_eq!(paused["evidence"]["at_ms"], at, "{e:#}");
}

/// Runs `job` every second on alpha, stops alpha, lets ticks pass with no
/// replica, starts bravo (with `bravo_daemon` in its `[daemon]`), and
/// returns a tick recorded as missed.
fn outage(job: &str, misfire: &str, bravo_daemon: &str) -> (Cluster, i64) {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("probe");
    let jobs = probe_job(
        job,
        "* * * * * *",
        &file,
        "true",
        &format!("misfire = \"{misfire}\"\n"),
    );
    cluster.start("alpha", &jobs);
    cluster.wait_ready();
    wait_for(&cluster, job, "an outcome", |o| o.status() == "ok");
    cluster.stop_all();
    std::thread::sleep(Duration::from_secs(3));
    cluster.start_with("bravo", bravo_daemon, &jobs, None);
    let missed = wait_for(&cluster, job, "a missed tick", |o| o.status() == "missed");
    (cluster, missed.tick())
}

#[test]
fn explain_says_the_misfire_policy_skipped_a_late_tick() {
    let (cluster, tick) = outage("beat", "skip", "");
    let e = explain_tick(&cluster.config_path("bravo"), "beat", tick);
    assert_eq!(e["verdict"], "missed", "{e:#}");
    let misfire = reason(&e, "misfire");
    assert_eq!(misfire["evidence"]["policy"], "skip", "{e:#}");
    assert!(misfire["evidence"]["ran_instead"].is_null(), "{e:#}");
}

#[test]
fn explain_says_no_replica_was_alive_and_which_were_known() {
    let (cluster, tick) = outage("beat", "run_once", "");
    let e = explain_tick(&cluster.config_path("bravo"), "beat", tick);
    assert_eq!(e["verdict"], "missed", "{e:#}");
    let nobody = reason(&e, "no_live_replica");
    assert_eq!(nobody["evidence"]["recorded_by"], "bravo", "{e:#}");
    let known: Vec<&str> = nobody["evidence"]["replicas"]
        .as_array()
        .expect("the replicas known")
        .iter()
        .filter_map(|r| r["id"].as_str())
        .collect();
    assert!(known.contains(&"bravo"), "{e:#}");
    assert_eq!(
        reason(&e, "misfire")["evidence"]["policy"],
        "run_once",
        "{e:#}"
    );
}

#[test]
fn explain_says_redis_was_unreachable_from_a_live_replica() {
    let cluster = one_replica("beat", "true", "misfire = \"skip\"\n");
    wait_for(&cluster, "beat", "an outcome", |o| o.status() == "ok");
    cluster.redis.pause_clients(4_000);
    let missed = wait_for(&cluster, "beat", "a missed tick", |o| {
        o.status() == "missed"
    });
    let e = explain_tick(&cluster.config_path("alpha"), "beat", missed.tick());
    assert_eq!(e["verdict"], "missed", "{e:#}");
    let away = reason(&e, "redis_unreachable");
    assert_eq!(away["evidence"]["up_at_tick"][0], "alpha", "{e:#}");
    assert_eq!(away["evidence"]["recorded_by"], "alpha", "{e:#}");
}

#[test]
fn explain_names_the_run_in_flight_when_overlap_skipped_a_tick() {
    let cluster = one_replica("slow", "sleep 2.5", "overlap = \"skip\"\n");
    let skipped = wait_for(&cluster, "slow", "a skipped tick", |o| {
        o.status() == "skipped_overlap"
    });
    let e = explain_tick(&cluster.config_path("alpha"), "slow", skipped.tick());
    assert_eq!(e["verdict"], "skipped", "{e:#}");
    let overlap = reason(&e, "overlap");
    let holder = &overlap["evidence"]["in_flight"];
    assert!(
        holder["run_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{e:#}"
    );
    assert_eq!(holder["replica"], "alpha", "{e:#}");
}

#[test]
fn explain_names_replicas_whose_definition_drifted() {
    let mut cluster = Cluster::new(RedisServer::start());
    let job = |command: &str| {
        format!("[jobs.report]\nschedule = \"0 0 0 1 1 *\"\ncommand = [\"{command}\"]\n")
    };
    cluster.start("alpha", &job("true"));
    cluster.start("bravo", &job("false"));
    cluster.wait_ready();
    let config = cluster.config_path("alpha");
    let e = wait_until(PATIENCE, "drift in the explanation", || {
        let e = explain_json(&config, "report", &[]);
        e["reasons"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["kind"] == "config_drift"))
            .then_some(e)
    });
    assert_eq!(
        reason(&e, "config_drift")["evidence"]["replicas"],
        serde_json::json!(["bravo"]),
        "{e:#}"
    );
}

#[test]
fn explain_says_the_schedule_years_have_passed() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.y2k]\nschedule = \"0 0 0 1 1 * 2020\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    let e = explain_json(&config, "y2k", &[]);
    assert_eq!(e["tick"], "2020-01-01T00:00:00Z", "{e:#}");
    assert_eq!(e["tick_choice"], "latest_due", "{e:#}");
    let ended = reason(&e, "schedule_ended");
    assert_eq!(ended["evidence"]["last_year"], 2020, "{e:#}");
    assert!(e["schedule"]["next_tick"].is_null(), "{e:#}");
}

#[test]
fn explain_says_a_future_tick_is_not_yet_due() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.noon]\nschedule = \"0 0 12 * * *\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    let tomorrow = chrono::Utc::now().date_naive() + chrono::Days::new(2);
    let tick = format!("{tomorrow}T12:00:00Z");
    let e = explain_json(&config, "noon", &["--tick", &tick]);
    assert_eq!(e["verdict"], "not_yet_due", "{e:#}");
    assert!(
        reason(&e, "not_yet_due")["evidence"]["due_in_ms"]
            .as_i64()
            .is_some_and(|d| d > 0)
    );
}

#[test]
fn explain_of_an_unknown_job_names_the_close_ones() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.beat]\nschedule = \"* * * * *\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    let run = explain(&config, "beet", &[]);
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    let stderr = run.stderr();
    assert_eq!(stderr.trim().lines().count(), 1, "{}", run.describe());
    assert!(
        stderr.contains("unknown job \"beet\""),
        "{}",
        run.describe()
    );
    assert!(
        stderr.contains("did you mean \"beat\""),
        "{}",
        run.describe()
    );
}

#[test]
fn explain_refuses_a_bad_tick_and_names_the_valid_forms() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.beat]\nschedule = \"* * * * *\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    for bad in ["yesterday", "2026-13-01T00:00:00Z", "12:00"] {
        let run = explain(&config, "beat", &["--tick", bad]);
        assert_eq!(run.code(), Some(2), "{}", run.describe());
        assert!(run.stderr().contains("RFC 3339"), "{}", run.describe());
        assert!(
            run.stderr().contains("milliseconds since the epoch"),
            "{}",
            run.describe()
        );
        assert!(!run.stderr().contains("panicked"), "{}", run.describe());
    }
}

#[test]
fn explain_json_has_the_documented_shape() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let jobs = "[jobs.beat]\nschedule = \"0 * * * * *\"\ncommand = [\"true\"]\n";
    let config = lone_config(&redis, dir.path(), jobs);
    let e = explain_json(&config, "beat", &["--tick", "2026-01-01T00:00:30Z"]);
    let keys: Vec<&str> = e.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "job",
            "now_ms",
            "reasons",
            "replicas",
            "run",
            "schedule",
            "summary",
            "tick",
            "tick_choice",
            "tick_ms",
            "verdict"
        ],
        "{e:#}"
    );
    assert_eq!(e["tick_ms"], 1_767_225_630_000_i64, "{e:#}");
    assert_eq!(e["tick_choice"], "given", "{e:#}");
    let schedule: Vec<&str> = e["schedule"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        schedule,
        [
            "dst",
            "expression",
            "next_tick",
            "previous_tick",
            "tick_local",
            "timezone"
        ],
        "{e:#}"
    );
    let first = &e["reasons"][0];
    let reason_keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(reason_keys, ["evidence", "kind", "text"], "{e:#}");
    assert_eq!(first["kind"], "not_a_tick", "{e:#}");
}

#[test]
fn the_dashboard_explains_a_missed_tick_linked_from_the_job_page() {
    let (cluster, tick) = outage("beat", "skip", "dashboard_listen = \"127.0.0.1:0\"\n");
    let bravo = &cluster.replicas[cluster.index_of("bravo")];
    let addr = bravo.logged_address("dashboard on http://", PATIENCE);
    let link = format!("/jobs/beat/explain?tick={tick}");
    let page = wait_until(PATIENCE, "the missed row's link", || {
        let page = http::get(&addr, &addr, "/jobs/beat", "");
        page.body
            .contains(&format!("href=\"{link}\""))
            .then_some(page)
    });
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("href=\"/jobs/beat/explain\""),
        "no link for the latest tick"
    );
    let explained = http::get(&addr, &addr, &link, "");
    assert_eq!(explained.status, 200, "{}", explained.body);
    assert!(explained.body.contains("missed"), "{}", explained.body);
    assert!(explained.body.contains("misfire"), "{}", explained.body);
    let bad = http::get(&addr, &addr, "/jobs/beat/explain?tick=%3Cscript%3E", "");
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("RFC 3339"), "{}", bad.body);
    assert!(
        !bad.body.contains("<script>"),
        "the bad tick is not escaped: {}",
        bad.body
    );
    let unknown = http::get(&addr, &addr, "/jobs/beet/explain", "");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(unknown.body.contains("beat"), "{}", unknown.body);
}
