//! `cronlease backfill` end to end: real replicas run each past tick of a
//! range once, whichever of them take the ticks and though one of them is
//! killed midway; ticks that ran are skipped and listed; a second backfill
//! runs nothing; two backfills of one range at once queue each tick once;
//! `--dry-run` changes nothing; `--concurrency` bounds the runs in flight;
//! a paused job's backfill waits for `resume`; Ctrl-C stops the watch, not
//! the backfill; bad input is refused with exit 2.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use crate::support::{
    Cluster, Outcome, RedisServer, Run, cronlease, wait_until_or_show, write_config,
};

/// A job of every second whose runs append `start|end <tick_ms>
/// <trigger> <replica> <wall ms>` to `file` and last `sleep`.
fn draw_job(file: &Path, sleep: &str, extra: &str) -> String {
    format!(
        "[jobs.draw]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n{extra}\nshell = '''\
         echo \"start $CRONLEASE_TICK_MS $CRONLEASE_TRIGGER $CRONLEASE_REPLICA $(date +%s%3N)\" >> {f}; \
         sleep {sleep}; \
         echo \"end $CRONLEASE_TICK_MS $CRONLEASE_TRIGGER $CRONLEASE_REPLICA $(date +%s%3N)\" >> {f}'''\n",
        f = file.display()
    )
}

/// The lines of `file` whose first word is `kind`, split in words.
fn lines(file: &Path, kind: &str) -> Vec<Vec<String>> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter(|w| w.len() == 5 && w[0] == kind)
        .collect()
}

/// The current outcomes of `job` with trigger `backfill`.
fn backfilled(cluster: &Cluster, job: &str) -> Vec<Outcome> {
    cluster
        .outcomes(job)
        .into_iter()
        .filter(|o| !o.stale() && o.field("trigger") == Some("backfill"))
        .collect()
}

/// Waits until `job` has current outcomes of its schedule for ticks
/// covering at least `n` seconds, and returns the earliest such tick.
fn wait_for_scheduled(cluster: &Cluster, job: &str, n: i64) -> i64 {
    wait_until_or_show(
        Duration::from_secs(30),
        "the schedule's own runs",
        || cluster.logs(),
        || {
            let ticks: BTreeSet<i64> = cluster
                .outcomes(job)
                .iter()
                .filter(|o| o.field("trigger") == Some("schedule") && o.status() == "ok")
                .map(Outcome::tick)
                .collect();
            let first = *ticks.first()?;
            (*ticks.last()? >= first + n * 1000).then_some(first)
        },
    )
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a tick in range")
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The plan `backfill --json` printed first.
fn plan_of(run: &Run) -> serde_json::Value {
    let first = run.stdout().lines().next().unwrap_or_default().to_string();
    serde_json::from_str(&first).unwrap_or_else(|e| panic!("{e}: {}", run.describe()))
}

fn ticks_of(plan: &serde_json::Value, list: &str) -> Vec<i64> {
    plan[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {plan}"))
        .iter()
        .map(|t| t["tick_ms"].as_i64().expect("a tick_ms"))
        .collect()
}

#[test]
fn a_backfill_of_100_ticks_runs_each_once_though_a_replica_is_killed_midway() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("runs");
    let jobs = draw_job(&file, "0.4", "");
    for name in ["r1", "r2", "r3"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    // The schedule ran the range's last 5 ticks; the 95 before them were
    // never run (no replica was up): 100 ticks.
    let first = wait_for_scheduled(&cluster, "draw", 5);
    let (from, to) = (first - 94_000, first + 5_000);
    let config = cluster.config_path("r1");
    let args: Vec<String> = [
        "backfill",
        "--timeout",
        "120s",
        "draw",
        "--from",
        &rfc3339(from),
        "--to",
        &rfc3339(to),
        "--concurrency",
        "3",
        "--json",
        "-c",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([config.display().to_string()])
    .collect();
    let cli = std::thread::spawn(move || cronlease(&args));
    // Midway: kill -9 a replica holding a backfill run.
    let victim = wait_until_or_show(
        Duration::from_secs(60),
        "30 backfill runs, then one in flight",
        || cluster.logs(),
        || {
            if backfilled(&cluster, "draw").len() < 30 {
                return None;
            }
            let running: BTreeMap<String, String> = redis::cmd("HGETALL")
                .arg("cl:{draw}:running")
                .query(&mut cluster.redis.client())
                .unwrap();
            running.values().find_map(|raw| {
                let e: serde_json::Value = serde_json::from_str(raw).unwrap();
                (e["trigger"] == "backfill").then(|| e["replica"].as_str().unwrap().to_string())
            })
        },
    );
    let index = cluster.index_of(&victim);
    cluster.replicas[index].kill9();
    let run = cli.join().expect("the backfill's thread");
    let plan = plan_of(&run);
    let to_run = ticks_of(&plan, "to_run");
    let skipped = ticks_of(&plan, "skipped");
    let later = ticks_of(&plan, "later");
    assert_eq!(
        to_run.len() + skipped.len() + later.len(),
        100,
        "{}",
        run.describe()
    );
    assert!(
        later.is_empty(),
        "every tick is at or below the mark: {}",
        run.describe()
    );
    assert!(to_run.len() >= 94, "{}", run.describe());
    let ran_before: BTreeSet<i64> = cluster
        .outcomes("draw")
        .iter()
        .filter(|o| o.field("trigger") == Some("schedule") && (from..=to).contains(&o.tick()))
        .map(Outcome::tick)
        .collect();
    assert_eq!(
        skipped.iter().copied().collect::<BTreeSet<_>>(),
        ran_before,
        "the ticks the schedule ran are the ones skipped\n{}",
        run.describe()
    );
    for s in plan["skipped"].as_array().unwrap() {
        assert_eq!(s["why"], "ran", "{s}");
        assert_eq!(s["status"], "ok", "{s}");
        assert!(!s["run_id"].as_str().unwrap().is_empty(), "{s}");
    }
    cluster.replicas.remove(index);
    // Each queued tick: exactly one current backfill outcome (ok, or
    // abandoned for a run of the killed replica: the default
    // on_holder_lost = "record" runs nothing again), and at most one start.
    let outcomes = backfilled(&cluster, "draw");
    let mut per_tick: BTreeMap<i64, Vec<&Outcome>> = BTreeMap::new();
    for o in &outcomes {
        per_tick.entry(o.tick()).or_default().push(o);
    }
    let expected: BTreeSet<i64> = to_run.iter().copied().collect();
    assert_eq!(
        per_tick.keys().copied().collect::<BTreeSet<_>>(),
        expected,
        "{outcomes:#?}"
    );
    let mut abandoned = 0;
    for (tick, records) in &per_tick {
        assert_eq!(records.len(), 1, "tick {tick}: {records:#?}");
        match records[0].status() {
            "ok" => {}
            "abandoned" => {
                assert_eq!(records[0].replica(), victim, "{:?}", records[0]);
                abandoned += 1;
            }
            other => panic!("tick {tick} ended {other}: {:?}", records[0]),
        }
    }
    let mut starts: BTreeMap<i64, usize> = BTreeMap::new();
    for words in lines(&file, "start").iter().filter(|w| w[2] == "backfill") {
        *starts.entry(words[1].parse().unwrap()).or_default() += 1;
    }
    assert!(
        starts.values().all(|&n| n == 1),
        "a tick started twice: {starts:?}"
    );
    // A tick that ended ok started once; one the killed replica claimed
    // may have died before its process wrote a line.
    for (tick, records) in &per_tick {
        if records[0].status() == "ok" {
            assert_eq!(starts.get(tick), Some(&1), "tick {tick}: {starts:?}");
        }
    }
    // Exit 0 only when every tick ran ok.
    let code = if abandoned == 0 { 0 } else { 1 };
    assert_eq!(run.code(), Some(code), "{}", run.describe());
    // No tick of the schedule's own ran again.
    for tick in &skipped {
        assert!(!per_tick.contains_key(tick), "tick {tick} ran twice");
    }
    // History shows the runs as backfill.
    let history = cronlease(
        ["history", "draw", "--count", "300", "-c"]
            .iter()
            .map(|s| s.to_string())
            .chain([config.display().to_string()])
            .collect::<Vec<_>>(),
    )
    .expect_code(0);
    assert!(
        history.stdout().contains("backfill"),
        "{}",
        history.describe()
    );

    // A second backfill of the range runs nothing: each tick is listed.
    let again = cronlease(
        [
            "backfill",
            "draw",
            "--from",
            &rfc3339(from),
            "--to",
            &rfc3339(to),
            "-c",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([config.display().to_string()])
        .collect::<Vec<_>>(),
    )
    .expect_code(0);
    assert!(
        again.stdout().contains("0 ticks to run, 100 already ran"),
        "{}",
        again.describe()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(backfilled(&cluster, "draw").len(), outcomes.len());
    cluster.stop_all();
}

#[test]
fn a_dry_run_changes_nothing_and_concurrency_bounds_the_runs_in_flight() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("runs");
    let jobs = draw_job(&file, "0.5", "");
    cluster.start("r1", &jobs);
    cluster.start("r2", &jobs);
    cluster.wait_ready();
    let first = wait_for_scheduled(&cluster, "draw", 1);
    let config = cluster.config_path("r1").display().to_string();
    let (from, to) = (rfc3339(first - 12_000), rfc3339(first - 1_000));
    let dry = cronlease([
        "backfill",
        "draw",
        "--from",
        &from,
        "--to",
        &to,
        "--dry-run",
        "-c",
        &config,
    ])
    .expect_code(0);
    assert!(
        dry.stdout().contains("12 ticks to run"),
        "{}",
        dry.describe()
    );
    assert!(
        dry.stdout().contains("dry run: nothing queued"),
        "{}",
        dry.describe()
    );
    let mut redis = cluster.redis.client();
    let exists: i64 = redis::cmd("EXISTS")
        .arg("cl:{draw}:backfill")
        .arg("cl:{draw}:backfilled")
        .query(&mut redis)
        .unwrap();
    assert_eq!(exists, 0, "a dry run wrote nothing");
    let queued: Option<String> = redis::cmd("HGET")
        .arg("cl:{draw}:state")
        .arg("backfill_queued")
        .query(&mut redis)
        .unwrap();
    assert_eq!(queued, None);
    std::thread::sleep(Duration::from_secs(2));
    assert!(backfilled(&cluster, "draw").is_empty());

    let run = cronlease([
        "backfill",
        "draw",
        "--from",
        &from,
        "--to",
        &to,
        "--concurrency",
        "2",
        "-c",
        &config,
    ])
    .expect_code(0);
    assert!(
        run.stdout()
            .contains("12 ticks backfilled: 12 ok, 0 not ok"),
        "{}",
        run.describe()
    );
    // At most two backfill runs at once, by their start and end times.
    let mut events: Vec<(i64, i32)> = Vec::new();
    for (kind, step) in [("start", 1), ("end", -1)] {
        for w in lines(&file, kind).iter().filter(|w| w[2] == "backfill") {
            events.push((w[4].parse().unwrap(), step));
        }
    }
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, step) in &events {
        now += step;
        most = most.max(now);
    }
    assert_eq!(events.len(), 24, "{events:?}");
    assert!(most <= 2, "{most} backfill runs at once: {events:?}");
    cluster.stop_all();
}

#[test]
fn two_backfills_of_one_range_at_once_queue_each_tick_once_and_skip_waits_for_the_lease() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("runs");
    // overlap = "skip": a backfill run waits while any run holds the lease.
    let jobs = draw_job(&file, "0.2", "").replace("overlap = \"allow\"\n", "");
    cluster.start("r1", &jobs);
    cluster.start("r2", &jobs);
    cluster.wait_ready();
    let first = wait_for_scheduled(&cluster, "draw", 1);
    let config = cluster.config_path("r1").display().to_string();
    let (from, to) = (rfc3339(first - 8_000), rfc3339(first - 1_000));
    let clis: Vec<_> = (0..2)
        .map(|_| {
            let args: Vec<String> = [
                "backfill",
                "--timeout",
                "120s",
                "draw",
                "--from",
                &from,
                "--to",
                &to,
                "--concurrency",
                "4",
                "--json",
                "-c",
                &config,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            std::thread::spawn(move || cronlease(&args))
        })
        .collect();
    let runs: Vec<Run> = clis
        .into_iter()
        .map(|c| c.join().expect("a backfill's thread").expect_code(0))
        .collect();
    let plans: Vec<serde_json::Value> = runs.iter().map(plan_of).collect();
    let (a, b) = (ticks_of(&plans[0], "to_run"), ticks_of(&plans[1], "to_run"));
    let both: BTreeSet<i64> = a.iter().chain(&b).copied().collect();
    assert_eq!(both.len(), 8, "each tick queued once: {a:?} {b:?}");
    assert_eq!(a.len() + b.len(), 8, "no tick queued twice: {a:?} {b:?}");
    let outcomes = backfilled(&cluster, "draw");
    assert_eq!(outcomes.len(), 8, "{outcomes:#?}");
    assert!(outcomes.iter().all(|o| o.status() == "ok"), "{outcomes:#?}");
    // One run of the job at a time: no backfill run began before the run
    // before it (of any trigger) ended.
    let mut spans: Vec<(i64, i64)> = Vec::new();
    let ends = lines(&file, "end");
    for start in lines(&file, "start") {
        let end = ends
            .iter()
            .find(|e| e[1] == start[1] && e[2] == start[2])
            .map_or(i64::MAX, |e| e[4].parse().unwrap());
        spans.push((start[4].parse().unwrap(), end));
    }
    spans.sort();
    for pair in spans.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two runs at once under skip: {pair:?}"
        );
    }
    cluster.stop_all();
}

/// A backfill of the 5 ticks before `draw`'s first, asked while the
/// `cronlease` command `pause` holds and watched to its end after
/// `resume`: nothing of it runs before, all of it after. Returns the
/// cluster, the backfill command's run and the config's path.
fn backfill_held_by(pause: &[&str], resume: &[&str]) -> (Cluster, Run, String) {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("runs");
    let jobs = draw_job(&file, "0", "");
    cluster.start("r1", &jobs);
    cluster.start("r2", &jobs);
    cluster.wait_ready();
    let first = wait_for_scheduled(&cluster, "draw", 1);
    let config = cluster.config_path("r1").display().to_string();
    let with_config = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-c", config.as_str()]);
        cronlease(&all)
    };
    with_config(pause).expect_code(0);
    let (from, to) = (rfc3339(first - 5_000), rfc3339(first - 1_000));
    let args: Vec<String> = [
        "backfill",
        "--timeout",
        "120s",
        "draw",
        "--from",
        &from,
        "--to",
        &to,
        "-c",
        &config,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let cli = std::thread::spawn(move || cronlease(&args));
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        backfilled(&cluster, "draw").is_empty(),
        "a backfill ran under {pause:?}"
    );
    let status = with_config(&["status"]).expect_code(0);
    assert!(
        status.stdout().contains("backfill: 5 of 5 ticks left"),
        "{}",
        status.describe()
    );
    with_config(resume).expect_code(0);
    let run = cli.join().expect("the backfill's thread").expect_code(0);
    assert_eq!(backfilled(&cluster, "draw").len(), 5);
    (cluster, run, config)
}

#[test]
fn a_paused_jobs_backfill_waits_for_resume() {
    let (mut cluster, run, _) = backfill_held_by(&["pause", "draw"], &["resume", "draw"]);
    assert!(
        run.stdout().contains("the job is paused"),
        "{}",
        run.describe()
    );
    let actions: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("cl:{draw}:actions")
        .arg("-")
        .arg("+")
        .query(&mut cluster.redis.client())
        .unwrap();
    let backfill = actions
        .iter()
        .find(|(_, f)| f.iter().any(|(k, v)| k == "action" && v == "backfill"))
        .unwrap_or_else(|| panic!("no backfill action: {actions:?}"));
    assert!(
        backfill
            .1
            .iter()
            .any(|(k, v)| k == "detail" && v.starts_with("5 ticks queued of ")),
        "{backfill:?}"
    );
    cluster.stop_all();
}

#[test]
fn the_clusters_pause_holds_a_backfill_until_it_ends() {
    let (mut cluster, _, _) = backfill_held_by(&["pause", "--all"], &["resume", "--all"]);
    cluster.stop_all();
}

#[test]
fn bad_input_is_refused_with_exit_2() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[jobs.draw]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
                [jobs.after]\nafter = [\"draw\"]\ncommand = [\"true\"]\n";
    let config = write_config(dir.path(), &redis.url(), "", jobs)
        .display()
        .to_string();
    let backfill = |args: &[&str]| {
        let mut all = vec!["backfill", "-c", &config];
        all.extend_from_slice(args);
        cronlease(&all)
    };
    let (from, to) = ("2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z");
    let refusals: [(&[&str], &str); 6] = [
        (
            &["nope", "--from", from, "--to", to],
            "unknown job \"nope\"",
        ),
        (
            &["draw", "--from", "2026-01-02T00:00:00Z", "--to", from],
            "is after --to",
        ),
        (
            &["draw", "--from", from, "--to", "2026-01-01T03:00:00Z"],
            "more than 10000 ticks",
        ),
        (&["draw", "--from", "yesterday", "--to", to], "RFC 3339"),
        (&["after", "--from", from, "--to", to], "no schedule"),
        (
            &["draw", "--from", from, "--to", to, "--concurrency", "0"],
            "concurrency",
        ),
    ];
    for (args, expected) in refusals {
        let refused = backfill(args).expect_code(2);
        assert!(
            refused.stderr().contains(expected),
            "{}",
            refused.describe()
        );
    }
    // What cronlease did not write says nothing of a tick: named nowhere,
    // refused nowhere.
    let mut redis = redis.client();
    let _: () = redis::cmd("HSET")
        .arg("cl:{draw}:state")
        .arg("last_tick")
        .arg("1767225609000")
        .query(&mut redis)
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg("cl:{draw}:runs")
        .arg("*")
        .arg("status")
        .arg("ok")
        .query(&mut redis)
        .unwrap();
    let _: i64 = redis::cmd("ZADD")
        .arg("cl:{draw}:backfilled")
        .arg("1767225601000")
        .arg("garbage")
        .query(&mut redis)
        .unwrap();
    let _: i64 = redis::cmd("HSET")
        .arg("cl:{draw}:reruns")
        .arg("not-a-tick")
        .arg("1")
        .query(&mut redis)
        .unwrap();
    let forged = backfill(&[
        "draw",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:00:09Z",
        "--dry-run",
    ])
    .expect_code(0);
    assert!(
        forged.stdout().contains("10 ticks to run, 0 already ran"),
        "{}",
        forged.describe()
    );
    let _: i64 = redis::cmd("DEL")
        .arg("cl:{draw}:state")
        .query(&mut redis)
        .unwrap();
    // No tick was ever claimed: every tick is the schedule's, nothing queued.
    let later = backfill(&[
        "draw",
        "--from",
        "2026-01-01T00:00:00Z",
        "--to",
        "2026-01-01T00:00:09Z",
    ])
    .expect_code(0);
    assert!(
        later
            .stdout()
            .contains("0 ticks to run, 0 already ran, 10 left to the schedule"),
        "{}",
        later.describe()
    );
}

#[test]
fn ctrl_c_stops_watching_not_the_backfill() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("runs");
    let jobs = draw_job(&file, "0", "");
    cluster.start("r1", &jobs);
    cluster.wait_ready();
    let first = wait_for_scheduled(&cluster, "draw", 1);
    let config = cluster.config_path("r1").display().to_string();
    // Paused, so that nothing lands while the command watches.
    cronlease(["pause", "draw", "-c", &config]).expect_code(0);
    let (from, to) = (rfc3339(first - 3_000), rfc3339(first - 1_000));
    let mut command = std::process::Command::new(crate::support::binary());
    command
        .args([
            "backfill", "draw", "--from", &from, "--to", &to, "-c", &config,
        ])
        .env_remove("CRONLEASE_CONFIG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    crate::support::die_with_this_thread(&mut command);
    let child = command.spawn().expect("cronlease backfill starts");
    std::thread::sleep(Duration::from_secs(2));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("a pid")),
        nix::sys::signal::Signal::SIGINT,
    )
    .expect("SIGINT sent");
    let output = child.wait_with_output().expect("the command ends");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert_eq!(output.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("3 ticks to run"), "{stdout}");
    assert!(
        stderr.contains("stopped watching: the backfill goes on"),
        "{stderr}"
    );
    let status = cronlease(["status", "-c", &config]).expect_code(0);
    assert!(
        status.stdout().contains("backfill: 3 of 3 ticks left"),
        "{}",
        status.describe()
    );
    cronlease(["resume", "draw", "-c", &config]).expect_code(0);
    wait_until_or_show(
        Duration::from_secs(20),
        "the backfill run after the watch stopped",
        || cluster.logs(),
        || (backfilled(&cluster, "draw").len() == 3).then_some(()),
    );
    cluster.stop_all();
}
