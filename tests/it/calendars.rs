//! Calendars end to end: replicas leave out the ticks inside an event of
//! an `exclude` calendar, and those outside every `only` calendar, each
//! recorded once as `excluded` with its calendar while the others run
//! once; missed ticks a calendar leaves out are recorded `excluded`, not
//! `missed`; `check` shows what runs and what does not; `history` and
//! `explain` name the calendar; replicas whose calendar files differ are
//! drift in `status`; bad calendars are refused with their place.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::support::{
    Cluster, Outcome, REDIS_SECTION, RedisServer, cronlease, http, now_ms, probe_job, starts,
    wait_until_or_show,
};

/// `ms` as an iCalendar UTC date-time.
fn ics_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a valid instant")
        .format("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// An iCalendar text with one timed event per [start, end) in ms.
fn ics(events: &[(i64, i64)]) -> String {
    let mut text =
        String::from("BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//cronlease tests//EN\r\n");
    for (i, (start, end)) in events.iter().enumerate() {
        text.push_str(&format!(
            "BEGIN:VEVENT\r\nUID:e{i}\r\nDTSTART:{}\r\nDTEND:{}\r\nEND:VEVENT\r\n",
            ics_time(*start),
            ics_time(*end)
        ));
    }
    text.push_str("END:VCALENDAR\r\n");
    text
}

/// Writes `text` as `name` in replica `replica`'s directory (where its
/// config is, so `file = "name"` finds it).
fn write_beside(cluster: &Cluster, replica: &str, name: &str, text: &str) {
    let dir = cluster.path(replica);
    std::fs::create_dir_all(&dir).expect("a replica directory");
    std::fs::write(dir.join(name), text).expect("the calendar is written");
}

/// The outcomes of `job` by tick, for the ticks from `from` to `to`
/// (inclusive, whole seconds), once each has one.
#[track_caller]
fn outcomes_of(cluster: &Cluster, job: &str, from: i64, to: i64) -> BTreeMap<i64, Vec<Outcome>> {
    wait_until_or_show(
        Duration::from_secs(40),
        &format!("an outcome of every tick of {job} from {from} to {to}"),
        || cluster.logs(),
        || {
            let mut by_tick: BTreeMap<i64, Vec<Outcome>> = BTreeMap::new();
            for outcome in cluster.outcomes(job) {
                if (from..=to).contains(&outcome.tick()) {
                    by_tick.entry(outcome.tick()).or_default().push(outcome);
                }
            }
            (by_tick.len() as i64 == (to - from) / 1000 + 1).then_some(by_tick)
        },
    )
}

#[test]
fn excluded_ticks_are_recorded_once_each_with_their_calendar_and_the_others_run_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    // Whole seconds far enough ahead for three replicas to be up.
    let base = (now_ms() / 1000 + 9) * 1000;
    let s = |n: i64| base + n * 1000;
    // `quiet`: seconds 2, 3 and 6 of the window; `open`: seconds 1 and 2.
    let quiet = ics(&[(s(2), s(4)), (s(6), s(7))]);
    let open = ics(&[(s(1), s(3))]);
    let excluding = cluster.path("excluding.log");
    let keeping = cluster.path("keeping.log");
    let jobs = format!(
        "[calendars.quiet]\nfile = \"quiet.ics\"\n\
         [calendars.open]\nfile = \"open.ics\"\n\n{}{}",
        probe_job(
            "excluding",
            "* * * * * *",
            &excluding,
            "true",
            "exclude = [\"quiet\"]"
        ),
        probe_job(
            "keeping",
            "* * * * * *",
            &keeping,
            "true",
            "only = [\"open\"]"
        ),
    );
    for name in ["a", "b", "c"] {
        write_beside(&cluster, name, "quiet.ics", &quiet);
        write_beside(&cluster, name, "open.ics", &open);
        let daemon = if name == "a" {
            "dashboard_listen = \"127.0.0.1:0\"\n"
        } else {
            ""
        };
        cluster.start_with(name, daemon, &jobs, None);
    }
    cluster.wait_ready();

    let excluding_outcomes = outcomes_of(&cluster, "excluding", s(0), s(8));
    let keeping_outcomes = outcomes_of(&cluster, "keeping", s(0), s(8));
    let logs = cluster.logs();
    let ran = |file: &Path, tick: i64| starts(file).iter().filter(|(t, _, _)| *t == tick).count();
    for n in 0..=8 {
        let tick = s(n);
        let excluded = [2, 3, 6].contains(&n);
        let outcomes = &excluding_outcomes[&tick];
        assert_eq!(outcomes.len(), 1, "second {n}: {outcomes:?}\n{logs}");
        let outcome = &outcomes[0];
        if excluded {
            assert_eq!(outcome.status(), "excluded", "second {n}: {outcome:?}");
            assert_eq!(outcome.field("calendar"), Some("quiet"), "{outcome:?}");
            assert_eq!(
                outcome.field("calendar_rule"),
                Some("exclude"),
                "{outcome:?}"
            );
            assert_eq!(ran(&excluding, tick), 0, "second {n} ran\n{logs}");
        } else {
            assert_eq!(outcome.status(), "ok", "second {n}: {outcome:?}\n{logs}");
            assert_eq!(ran(&excluding, tick), 1, "second {n}\n{logs}");
        }

        let kept = [1, 2].contains(&n);
        let outcomes = &keeping_outcomes[&tick];
        assert_eq!(outcomes.len(), 1, "second {n}: {outcomes:?}\n{logs}");
        let outcome = &outcomes[0];
        if kept {
            assert_eq!(outcome.status(), "ok", "second {n}: {outcome:?}\n{logs}");
            assert_eq!(ran(&keeping, tick), 1, "second {n}\n{logs}");
        } else {
            assert_eq!(outcome.status(), "excluded", "second {n}: {outcome:?}");
            assert_eq!(outcome.field("calendar"), Some("open"), "{outcome:?}");
            assert_eq!(outcome.field("calendar_rule"), Some("only"), "{outcome:?}");
            assert_eq!(ran(&keeping, tick), 0, "second {n} ran\n{logs}");
        }
    }

    // The operator's views name the calendar.
    let config = cluster.config_path("a");
    let config = config.to_str().expect("a UTF-8 path");
    let history = cronlease(["history", "excluding", "-c", config, "-n", "100"]).expect_code(0);
    assert!(
        history.stdout().contains("excluded (quiet)"),
        "{}",
        history.stdout()
    );
    let history = cronlease(["history", "keeping", "-c", config, "-n", "100"]).expect_code(0);
    assert!(
        history.stdout().contains("excluded (outside open)"),
        "{}",
        history.stdout()
    );
    let json =
        cronlease(["history", "keeping", "-c", config, "-n", "100", "--json"]).expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&json.stdout()).expect("JSON");
    let excluded = report["outcomes"]
        .as_array()
        .expect("outcomes")
        .iter()
        .find(|o| o["tick_ms"] == s(5))
        .expect("second 5 is in the history");
    assert_eq!(excluded["status"], "excluded", "{excluded}");
    assert_eq!(excluded["calendar"], "open", "{excluded}");
    assert_eq!(excluded["calendar_rule"], "only", "{excluded}");

    let tick = s(3).to_string();
    let explain = cronlease(["explain", "excluding", "--tick", &tick, "-c", config]).expect_code(0);
    assert!(
        explain.stdout().contains("excluded by calendar quiet"),
        "{}",
        explain.stdout()
    );
    let json = cronlease([
        "explain",
        "excluding",
        "--tick",
        &tick,
        "-c",
        config,
        "--json",
    ])
    .expect_code(0);
    let explanation: serde_json::Value = serde_json::from_str(&json.stdout()).expect("JSON");
    assert_eq!(explanation["verdict"], "excluded", "{explanation}");
    assert_eq!(
        explanation["reasons"][0]["kind"], "calendar",
        "{explanation}"
    );
    assert_eq!(
        explanation["reasons"][0]["evidence"]["calendar"], "quiet",
        "{explanation}"
    );

    let status = cronlease(["status", "-c", config]).expect_code(0);
    assert!(
        status.stdout().contains("exclude quiet"),
        "{}",
        status.stdout()
    );
    assert!(status.stdout().contains("only open"), "{}", status.stdout());

    // The dashboard's job page: the calendars, and the excluded outcome
    // with its calendar linked to its explanation; the explain page.
    let addr = cluster.replicas[0].logged_address("dashboard on http://", Duration::from_secs(20));
    let page = http::get(&addr, &addr, "/jobs/excluding", "");
    assert_eq!(page.status, 200, "{page:?}");
    for expected in [
        "Calendars",
        "exclude <code>quiet</code>",
        "s-excluded",
        "(quiet)",
    ] {
        assert!(
            page.body.contains(expected),
            "{expected} not in {}",
            page.body
        );
    }
    let page = http::get(
        &addr,
        &addr,
        &format!("/jobs/excluding/explain?tick={tick}"),
        "",
    );
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body.contains("excluded by calendar quiet"),
        "{}",
        page.body
    );
    cluster.stop_all();
}

#[test]
fn missed_ticks_a_calendar_leaves_out_are_recorded_excluded_not_missed() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("probe.log");
    // Nobody claims seconds 0 to 5 of the window; 1 and 2 are holidays.
    let base = (now_ms() / 1000 + 8) * 1000;
    let s = |n: i64| base + n * 1000;
    let holidays = ics(&[(s(1), s(3))]);
    let jobs = format!(
        "[calendars.holidays]\nfile = \"holidays.ics\"\n\n{}",
        probe_job(
            "gap",
            "* * * * * *",
            &file,
            "true",
            "exclude = [\"holidays\"]\nmisfire = \"skip\""
        ),
    );
    write_beside(&cluster, "a", "holidays.ics", &holidays);
    let a = cluster.start("a", &jobs);
    cluster.wait_ready();
    wait_until_or_show(
        Duration::from_secs(20),
        "a tick run before the window",
        || cluster.logs(),
        || {
            starts(&file)
                .iter()
                .any(|(tick, _, _)| *tick < s(0))
                .then_some(())
        },
    );
    cluster.replicas[a].sigstop();
    wait_until_or_show(
        Duration::from_secs(20),
        "the window to pass",
        String::new,
        || (now_ms() > s(6)).then_some(()),
    );
    cluster.replicas[a].sigcont();

    let outcomes = outcomes_of(&cluster, "gap", s(0), s(5));
    let logs = cluster.logs();
    for n in 0..=5 {
        let outcome = &outcomes[&s(n)];
        assert_eq!(outcome.len(), 1, "second {n}: {outcome:?}\n{logs}");
        let (status, calendar) = (outcome[0].status(), outcome[0].field("calendar"));
        if [1, 2].contains(&n) {
            assert_eq!(
                (status, calendar),
                ("excluded", Some("holidays")),
                "second {n}\n{logs}"
            );
        } else {
            assert_eq!((status, calendar), ("missed", None), "second {n}\n{logs}");
        }
    }
    cluster.stop_all();
}

#[test]
fn replicas_whose_calendar_files_differ_are_drift_in_status() {
    let mut cluster = Cluster::new(RedisServer::start());
    let day = 86_400_000;
    let start = (now_ms() / day + 30) * day;
    let jobs = "[calendars.holidays]\nfile = \"holidays.ics\"\n\n\
                [jobs.draw]\nschedule = \"0 0 3 1 1 *\"\ncommand = [\"true\"]\nworkdir = \"/\"\nexclude = [\"holidays\"]\n";
    write_beside(&cluster, "a", "holidays.ics", &ics(&[(start, start + day)]));
    // The same events in another file's words: not drift.
    let mut reworded = ics(&[(start, start + day)]);
    reworded = reworded.replace("UID:e0\r\n", "UID:other\r\nSUMMARY:A holiday\r\n");
    write_beside(&cluster, "b", "holidays.ics", &reworded);
    write_beside(
        &cluster,
        "c",
        "holidays.ics",
        &ics(&[(start, start + 2 * day)]),
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, jobs);
    }
    cluster.wait_ready();
    let config = cluster.config_path("a");
    let config = config.to_str().expect("a UTF-8 path");
    let report = wait_until_or_show(
        Duration::from_secs(20),
        "status to see every replica's hashes",
        || cluster.logs(),
        || {
            let run = cronlease(["status", "--json", "-c", config]).expect_code(0);
            let report: serde_json::Value = serde_json::from_str(&run.stdout()).expect("JSON");
            let alive = report["replicas"]
                .as_array()?
                .iter()
                .filter(|r| r["alive"] == true)
                .count();
            let drift = &report["jobs"][0]["config_drift"];
            (alive == 3 && !drift.as_array()?.is_empty()).then_some(report)
        },
    );
    // Every replica has published its hashes by its third heartbeat.
    std::thread::sleep(Duration::from_millis(2500));
    let run = cronlease(["status", "--json", "-c", config]).expect_code(0);
    let again: serde_json::Value = serde_json::from_str(&run.stdout()).expect("JSON");
    assert_eq!(
        again["jobs"][0]["config_drift"],
        serde_json::json!(["c"]),
        "{again}"
    );
    let job = &report["jobs"][0];
    assert_eq!(job["calendars"][0]["name"], "holidays", "{report}");
    assert_eq!(job["calendars"][0]["rule"], "exclude", "{report}");
    let text = cronlease(["status", "-c", config]).expect_code(0);
    assert!(text.stdout().contains("DIFFERS on c"), "{}", text.stdout());
    cluster.stop_all();
}

#[test]
fn check_shows_the_ticks_that_run_and_those_the_calendars_leave_out() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("holidays-cn.ics"),
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:National Day\r\nDTSTART;VALUE=DATE:20261001\r\n\
         DTEND;VALUE=DATE:20261008\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    .expect("written");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!(
            "{REDIS_SECTION}[calendars.holidays-cn]\nfile = \"holidays-cn.ics\"\ntimezone = \"Asia/Shanghai\"\n\
             [calendars.trading-days]\ndates = [\"2026-09-29\", \"2026-09-30\", \"2026-10-08\"]\ntimezone = \"Asia/Shanghai\"\n\
             [jobs.lottery-draw]\nschedule = \"0 12 * * 1-5\"\ntimezone = \"Asia/Shanghai\"\ncommand = [\"draw\"]\n\
             exclude = [\"holidays-cn\"]\nonly = [\"trading-days\"]\n"
        ),
    )
    .expect("written");
    let config = config.to_str().expect("a UTF-8 path");
    let from = ["--from", "2026-09-28T00:00:00Z", "--count", "3"];
    let run = cronlease(["check", "-c", config].into_iter().chain(from)).expect_code(0);
    let stdout = run.stdout();
    let lines: Vec<&str> = stdout.lines().skip(3).map(str::trim).collect();
    assert_eq!(
        lines,
        [
            "exclude calendar holidays-cn (1 event, Asia/Shanghai)",
            "only calendar trading-days (3 events, Asia/Shanghai)",
            "2026-09-28 12:00:00 +08:00 Mon  =  2026-09-28T04:00:00Z  not run: outside calendar trading-days",
            "2026-09-29 12:00:00 +08:00 Tue  =  2026-09-29T04:00:00Z",
            "2026-09-30 12:00:00 +08:00 Wed  =  2026-09-30T04:00:00Z",
            "2026-10-01 12:00:00 +08:00 Thu  =  2026-10-01T04:00:00Z  not run: excluded by calendar holidays-cn",
            "2026-10-02 12:00:00 +08:00 Fri  =  2026-10-02T04:00:00Z  not run: excluded by calendar holidays-cn",
            "2026-10-05 12:00:00 +08:00 Mon  =  2026-10-05T04:00:00Z  not run: excluded by calendar holidays-cn",
            "2026-10-06 12:00:00 +08:00 Tue  =  2026-10-06T04:00:00Z  not run: excluded by calendar holidays-cn",
            "2026-10-07 12:00:00 +08:00 Wed  =  2026-10-07T04:00:00Z  not run: excluded by calendar holidays-cn",
            "2026-10-08 12:00:00 +08:00 Thu  =  2026-10-08T04:00:00Z",
        ],
        "{stdout}"
    );
    let json = cronlease(["check", "-c", config, "--json"].into_iter().chain(from)).expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&json.stdout()).expect("JSON");
    let job = &report["jobs"][0];
    assert_eq!(
        job["next"],
        serde_json::json!([
            "2026-09-29T04:00:00Z",
            "2026-09-30T04:00:00Z",
            "2026-10-08T04:00:00Z"
        ]),
        "{job}"
    );
    assert_eq!(job["excluded"][0]["tick"], "2026-09-28T04:00:00Z", "{job}");
    assert_eq!(job["excluded"][0]["rule"], "only", "{job}");
    assert_eq!(job["excluded"][1]["calendar"], "holidays-cn", "{job}");
    assert_eq!(job["calendars"][0]["name"], "holidays-cn", "{job}");
}

#[test]
fn bad_calendars_are_refused_with_their_file_line_and_field() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(
        dir.path().join("bad.ics"),
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART;VALUE=DATE:20261001\nRRULE:FREQ=FORTNIGHTLY\nEND:VEVENT\nEND:VCALENDAR\n",
    )
    .expect("written");
    let config = dir.path().join("jobs.toml");
    std::fs::write(
        &config,
        format!(
            "{REDIS_SECTION}[calendars.bad]\nfile = \"bad.ics\"\n\
             [calendars.both]\nfile = \"bad.ics\"\ndates = [\"2026-10-01\"]\n\
             [jobs.draw]\nschedule = \"0 12 * * *\"\ncommand = [\"draw\"]\nexclude = [\"holidayz\"]\n"
        ),
    )
    .expect("written");
    let path = config.to_str().expect("a UTF-8 path");
    let run = cronlease(["check", "-c", path]).expect_code(2);
    let stderr = run.stderr();
    let ics = dir.path().join("bad.ics");
    for expected in [
        format!(
            "{path}:4:8: [calendars.bad], field `file`: {}:4: RRULE: invalid rule \"FREQ=FORTNIGHTLY\"",
            ics.display()
        ),
        format!("{path}:7:9: [calendars.both], field `dates`: both `file` and `dates` are set"),
        format!(
            "{path}:11:12: job \"draw\", field `exclude`: unknown calendar \"holidayz\": expected one of \"bad\", \"both\""
        ),
    ] {
        assert!(stderr.contains(&expected), "{expected}\nnot in\n{stderr}");
    }
}

#[test]
fn an_embedded_scheduler_records_the_ticks_a_calendar_leaves_out() {
    use cronlease::{Calendar, JobBuilder, Run};
    use std::sync::{Arc, Mutex};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let base = (now_ms() / 1000 + 4) * 1000;
    let s = |n: i64| base + n * 1000;
    let quiet = Calendar::from_ics("quiet", &ics(&[(s(1), s(3))]), "UTC").expect("valid");
    let ran: Arc<Mutex<Vec<i64>>> = Arc::default();
    let rt = crate::support::multi_thread_runtime();
    rt.block_on(async {
        let mut schedulers = Vec::new();
        for id in ["shop-1", "shop-2"] {
            let ran = ran.clone();
            let job = JobBuilder::new("draw", "* * * * * *")
                .exclude(quiet.clone())
                .run(move |run: Run| {
                    let ran = ran.clone();
                    async move {
                        ran.lock()
                            .expect("no test thread panics holding it")
                            .push(run.tick().as_millisecond());
                        Ok::<(), std::io::Error>(())
                    }
                });
            schedulers.push(crate::support::start_scheduler(&redis, &dir, id, vec![job]).await);
        }
        while now_ms() < s(5) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for scheduler in schedulers {
            scheduler.shutdown().await.expect("a clean shutdown");
        }
    });
    let outcomes = crate::support::read_outcomes(&mut redis.client(), "cl", "draw");
    let ran = ran
        .lock()
        .expect("no test thread panics holding it")
        .clone();
    for n in 0..=4 {
        let of_tick: Vec<&Outcome> = outcomes.iter().filter(|o| o.tick() == s(n)).collect();
        assert_eq!(of_tick.len(), 1, "second {n}: {outcomes:?}");
        let runs = ran.iter().filter(|tick| **tick == s(n)).count();
        if [1, 2].contains(&n) {
            assert_eq!(of_tick[0].status(), "excluded", "second {n}: {of_tick:?}");
            assert_eq!(of_tick[0].field("calendar"), Some("quiet"), "{of_tick:?}");
            assert_eq!(runs, 0, "second {n} ran");
        } else {
            assert_eq!(of_tick[0].status(), "ok", "second {n}: {of_tick:?}");
            assert_eq!(runs, 1, "second {n}");
        }
    }
}

#[test]
fn a_reload_reads_the_calendar_files_again_and_a_bad_one_keeps_the_old_table() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("probe.log");
    let far = (now_ms() / 1000 + 86_400 * 400) * 1000;
    let jobs = format!(
        "[calendars.quiet]\nfile = \"quiet.ics\"\n\n{}",
        probe_job(
            "beat",
            "* * * * * *",
            &file,
            "true",
            "exclude = [\"quiet\"]"
        ),
    );
    write_beside(&cluster, "a", "quiet.ics", &ics(&[(far, far + 1000)]));
    let a = cluster.start("a", &jobs);
    cluster.wait_ready();
    let pid = Pid::from_raw(cluster.replicas[a].pid() as i32);

    // A file that does not parse: the replica keeps its table.
    write_beside(
        &cluster,
        "a",
        "quiet.ics",
        "BEGIN:VCALENDAR\nBEGIN:VEVENT\n",
    );
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    let log = cluster.replicas[a].wait_for_log("reload rejected", Duration::from_secs(10));
    assert!(log.contains("quiet.ics"), "{log}");

    let base = (now_ms() / 1000 + 4) * 1000;
    let s = |n: i64| base + n * 1000;
    write_beside(&cluster, "a", "quiet.ics", &ics(&[(s(1), s(3))]));
    kill(pid, Signal::SIGHUP).expect("SIGHUP");
    cluster.replicas[a].wait_for_log("job table reloaded", Duration::from_secs(10));
    assert!(
        now_ms() < s(0),
        "the reload took too long for the test's window"
    );
    let outcomes = outcomes_of(&cluster, "beat", s(0), s(4));
    for n in 0..=4 {
        let outcome = &outcomes[&s(n)];
        assert_eq!(outcome.len(), 1, "second {n}: {outcome:?}");
        let expected = if [1, 2].contains(&n) {
            "excluded"
        } else {
            "ok"
        };
        assert_eq!(
            outcome[0].status(),
            expected,
            "second {n}\n{}",
            cluster.logs()
        );
    }
    cluster.stop_all();
}
