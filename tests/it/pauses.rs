//! Pauses with an end and a reason, and the cluster's pause (`pause
//! --all`): run against a private redis-server and real replica
//! processes, checked through the jobs' side effects, `status --json` and
//! the actions streams.

use std::path::Path;
use std::time::Duration;

use cronlease::config::Overlap;
use cronlease::store::{ClaimReply, PauseAnswer, PauseRequest};
use serde_json::Value;

use crate::support::{
    Cluster, RedisServer, Run, claim_request, connect_store, cronlease, probe_job, runtime, starts,
    test_claimant, wait_until,
};

/// `cronlease ARGS… --config CONFIG`.
fn op(args: &[&str], config: &Path) -> Run {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    all.push("--config".into());
    all.push(config.into());
    cronlease(all)
}

/// `cronlease explain JOB --tick TICK --json`, and its `paused` reason.
#[track_caller]
fn explained_pause(config: &Path, job: &str, tick: i64) -> (Value, Value) {
    let run = op(
        &["explain", job, "--tick", &tick.to_string(), "--json"],
        config,
    )
    .expect_code(0);
    let e: Value = serde_json::from_str(run.stdout().trim()).expect("explain --json");
    let paused = e["reasons"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["kind"] == "paused"))
        .cloned()
        .unwrap_or_else(|| panic!("no paused reason in {e:#}"));
    (e, paused)
}

/// `cronlease status --json`.
fn status(config: &Path) -> Value {
    let run = op(&["status", "--json"], config).expect_code(0);
    serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{}", run.describe()))
}

fn job<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|j| j["name"] == name))
        .unwrap_or_else(|| panic!("no job {name} in {report:#}"))
}

fn redis_now_ms(redis: &RedisServer) -> i64 {
    let (seconds, micros): (i64, i64) =
        redis::cmd("TIME").query(&mut redis.client()).expect("TIME");
    seconds * 1000 + micros / 1000
}

/// The entries of a stream, oldest first, as field maps.
fn stream(redis: &RedisServer, key: &str) -> Vec<std::collections::BTreeMap<String, String>> {
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut redis.client())
        .expect("XRANGE");
    entries
        .into_iter()
        .map(|(_, fields)| fields.into_iter().collect())
        .collect()
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("a time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The ticks of a probe file's `start` lines.
fn ticks(file: &Path) -> Vec<i64> {
    starts(file).into_iter().map(|(tick, _, _)| tick).collect()
}

#[test]
fn a_timed_pause_ends_at_its_until_once_though_every_replica_was_replaced() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("beat");
    let jobs = probe_job("beat", "* * * * * *", &file, "true", "");
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "2 runs of beat", || {
        (ticks(&file).len() >= 2).then_some(())
    });
    let config = cluster.config_path("alpha");

    // The end on a whole second, so that the tick at it is due then.
    let until = (redis_now_ms(&cluster.redis) / 1000 + 8) * 1000;
    let run = op(
        &[
            "pause",
            "beat",
            "--until",
            &rfc3339(until),
            "--reason",
            "disk swap on the NAS",
        ],
        &config,
    )
    .expect_code(0);
    assert!(
        run.stdout().contains("until") && run.stdout().contains("disk swap"),
        "{}",
        run.describe()
    );
    let paused_at = redis_now_ms(&cluster.redis);
    let report = status(&config);
    let beat = job(&report, "beat");
    assert_eq!(beat["paused"], true, "{report:#}");
    assert_eq!(beat["paused_until_ms"], until, "{report:#}");
    assert_eq!(beat["paused_reason"], "disk swap on the NAS", "{report:#}");
    let text = op(&["status"], &config).expect_code(0).stdout();
    assert!(text.contains("disk swap on the NAS"), "{text}");

    // Every replica goes during the pause, and new ones come.
    std::thread::sleep(Duration::from_millis(1_500));
    cluster.stop_all();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start("charlie", &jobs);
    cluster.start("delta", &jobs);
    cluster.replicas[2].wait_for_log("ready", Duration::from_secs(20));
    cluster.replicas[3].wait_for_log("ready", Duration::from_secs(20));

    wait_until(Duration::from_secs(30), "3 runs from the end on", || {
        (ticks(&file).iter().filter(|t| **t >= until).count() >= 3).then_some(())
    });
    let all = ticks(&file);
    let during: Vec<i64> = all
        .iter()
        .copied()
        .filter(|t| *t > paused_at + 1_000 && *t < until)
        .collect();
    assert!(
        during.is_empty(),
        "ticks of the pause ran: {during:?}\n{}",
        cluster.logs()
    );
    for tick in [until, until + 1_000, until + 2_000] {
        assert_eq!(
            all.iter().filter(|t| **t == tick).count(),
            1,
            "tick {tick} (the end is {until}) did not run exactly once: {all:?}\n{}",
            cluster.logs()
        );
    }
    // Its end is recorded once, with the pause's end and reason; then the
    // status says active.
    std::thread::sleep(Duration::from_secs(3));
    let actions = stream(&cluster.redis, "cl:{beat}:actions");
    let pauses: Vec<_> = actions.iter().filter(|a| a["action"] == "pause").collect();
    let resumes: Vec<_> = actions.iter().filter(|a| a["action"] == "resume").collect();
    assert_eq!(pauses.len(), 1, "{actions:#?}");
    assert_eq!(pauses[0]["until_ms"], until.to_string(), "{actions:#?}");
    assert_eq!(pauses[0]["reason"], "disk swap on the NAS", "{actions:#?}");
    assert_eq!(resumes.len(), 1, "{actions:#?}\n{}", cluster.logs());
    assert_eq!(resumes[0]["who"], "cronlease (timed pause ended)");
    assert_eq!(resumes[0]["until_ms"], until.to_string());
    let report = status(&config);
    assert_eq!(job(&report, "beat")["paused"], false, "{report:#}");
}

#[test]
fn pause_all_stops_every_job_once_confirmed_and_resume_all_keeps_a_job_paused_on_its_own() {
    let mut cluster = Cluster::new(RedisServer::start());
    let first = cluster.path("first");
    let second = cluster.path("second");
    let jobs = probe_job("first", "* * * * * *", &first, "true", "")
        + &probe_job("second", "* * * * * *", &second, "true", "");
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "runs of both jobs", || {
        (ticks(&first).len() >= 2 && ticks(&second).len() >= 2).then_some(())
    });
    let config = cluster.config_path("alpha");

    let run = op(&["pause", "--all", "--reason", "Redis upgrade"], &config).expect_code(0);
    let returned = redis_now_ms(&cluster.redis);
    assert!(
        run.stdout()
            .contains("confirmed by every live replica (2): alpha, bravo"),
        "{}",
        run.describe()
    );
    let report = status(&config);
    assert_eq!(report["cluster_pause"]["paused"], true, "{report:#}");
    assert_eq!(
        report["cluster_pause"]["reason"], "Redis upgrade",
        "{report:#}"
    );
    let text = op(&["status"], &config).expect_code(0).stdout();
    assert!(
        text.starts_with("CLUSTER PAUSED") && text.contains("Redis upgrade"),
        "{text}"
    );
    std::thread::sleep(Duration::from_secs(3));
    for file in [&first, &second] {
        let late: Vec<i64> = ticks(file).into_iter().filter(|t| *t > returned).collect();
        assert!(
            late.is_empty(),
            "ticks after pause --all returned ran: {late:?}\n{}",
            cluster.logs()
        );
    }
    // explain of a tick the cluster's pause held says so, and why.
    let tick = (returned / 1000 + 2) * 1000;
    let (e, paused) = explained_pause(&config, "first", tick);
    assert_eq!(e["summary"], "not run: the cluster was paused", "{e:#}");
    assert_eq!(paused["evidence"]["source"], "cluster", "{e:#}");
    assert_eq!(paused["evidence"]["reason"], "Redis upgrade", "{e:#}");
    // A trigger is refused while the cluster is paused.
    let refused = op(&["trigger", "first"], &config);
    assert_eq!(refused.code(), Some(1), "{}", refused.describe());
    assert!(
        refused.stderr().contains("cluster is paused"),
        "{}",
        refused.describe()
    );

    // A job paused on its own stays paused when the cluster resumes.
    op(&["pause", "first"], &config).expect_code(0);
    let run = op(&["resume", "--all"], &config).expect_code(0);
    assert!(
        run.stdout().contains("confirmed by every live replica"),
        "{}",
        run.describe()
    );
    let resumed = redis_now_ms(&cluster.redis);
    wait_until(Duration::from_secs(15), "second runs again", || {
        (ticks(&second).iter().filter(|t| **t > resumed).count() >= 2).then_some(())
    });
    assert!(
        ticks(&first).iter().all(|t| *t <= returned),
        "first ran though paused on its own\n{}",
        cluster.logs()
    );
    let report = status(&config);
    assert!(report["cluster_pause"].is_null(), "{report:#}");
    assert_eq!(job(&report, "first")["paused"], true, "{report:#}");
    op(&["resume", "first"], &config).expect_code(0);

    // A timed cluster pause ends by itself, recorded once.
    let run = op(&["pause", "--all", "--until", "4s"], &config).expect_code(0);
    let returned = redis_now_ms(&cluster.redis);
    let report = status(&config);
    let until = report["cluster_pause"]["until_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("no until in {report:#}\n{}", run.describe()));
    wait_until(
        Duration::from_secs(20),
        "both jobs run after the end",
        || {
            let after = |file: &Path| ticks(file).iter().filter(|t| **t >= until).count() >= 2;
            (after(&first) && after(&second)).then_some(())
        },
    );
    for file in [&first, &second] {
        let during: Vec<i64> = ticks(file)
            .into_iter()
            .filter(|t| *t > returned && *t < until)
            .collect();
        assert!(during.is_empty(), "ticks of the pause ran: {during:?}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let actions = stream(&cluster.redis, "cl:{cl:pause_all}:actions");
    let ended = actions
        .iter()
        .filter(|a| a["who"] == "cronlease (timed pause ended)")
        .count();
    assert_eq!(ended, 1, "{actions:#?}\n{}", cluster.logs());
    assert_eq!(
        actions.iter().filter(|a| a["action"] == "pause").count(),
        2,
        "{actions:#?}"
    );
}

#[test]
fn a_pause_ending_in_the_past_or_with_a_bad_reason_is_refused() {
    let cluster = Cluster::new(RedisServer::start());
    let config = cluster.config(
        "alpha",
        "",
        "[jobs.beat]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
    );
    let past = rfc3339(redis_now_ms(&cluster.redis) - 3_600_000);
    let long = "x".repeat(501);
    for (args, says) in [
        (
            vec!["pause", "beat", "--until", &past],
            "not after Redis time",
        ),
        (
            vec!["pause", "--all", "--until", &past],
            "not after Redis time",
        ),
        (
            vec!["pause", "beat", "--until", "soon"],
            "neither an RFC 3339 time",
        ),
        (vec!["pause", "beat", "--reason", &long], "at most 500"),
        (
            vec!["pause", "beat", "--reason", "two\nlines"],
            "control character",
        ),
        (vec!["pause"], "required"),
    ] {
        let run = op(&args, &config);
        assert_eq!(run.code(), Some(2), "{args:?}\n{}", run.describe());
        assert!(
            run.stderr().contains(says),
            "{args:?}: expected {says:?}\n{}",
            run.describe()
        );
    }
    let state: Option<String> = redis::cmd("HGET")
        .arg("cl:{beat}:state")
        .arg("paused")
        .query(&mut cluster.redis.client())
        .expect("HGET");
    assert_eq!(state, None, "a refused pause changed the state");
    let record: i64 = redis::cmd("EXISTS")
        .arg("cl:pause_all")
        .query(&mut cluster.redis.client())
        .expect("EXISTS");
    assert_eq!(record, 0, "a refused pause --all wrote its record");
}

#[test]
fn replicas_racing_to_end_an_expired_pause_record_its_end_once() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let one = connect_store(&server, "cl", "2s").await;
        let two = connect_store(&server, "cl", "2s").await;
        let claimant = test_claimant(Duration::from_secs(30), Overlap::Skip, 100);
        for round in 0..20 {
            let job = format!("race{round}");
            let now = one.server_time_ms().await.expect("TIME");
            let until = now + 200;
            let request = PauseRequest {
                who: "test",
                until_ms: Some(until),
                reason: "race",
            };
            assert!(matches!(
                one.pause(&job, &request).await.expect("pause"),
                PauseAnswer::Done { .. }
            ));
            // A tick of the pause: held.
            let held = one
                .claim(&claim_request(&job, "held", now, claimant))
                .await
                .expect("claim");
            assert!(matches!(held, ClaimReply::Paused { .. }), "{held:?}");
            tokio::time::sleep(Duration::from_millis(250)).await;
            // Two sweeps and a claim of the tick at the end, at once.
            let tick = claim_request(&job, "at-end", until, claimant);
            let (a, b, claimed) = tokio::join!(
                one.end_pause(&job, until),
                two.end_pause(&job, until),
                two.claim(&tick)
            );
            let claimed = claimed.expect("claim");
            assert!(
                matches!(claimed, ClaimReply::Claimed { .. }),
                "the tick at the end: {claimed:?}"
            );
            let ended = [a.expect("end"), b.expect("end")];
            assert!(ended.iter().filter(|e| **e).count() <= 1, "{ended:?}");
            let resumes = stream(&server, &format!("cl:{{{job}}}:actions"))
                .into_iter()
                .filter(|a| a["action"] == "resume")
                .count();
            assert_eq!(
                resumes, 1,
                "round {round}: the end recorded {resumes} times"
            );
            // A late claim of a tick of the pause does not run it.
            let late = one
                .claim(&claim_request(&job, "late", until - 100, claimant))
                .await
                .expect("claim");
            assert!(
                !matches!(late, ClaimReply::Claimed { .. }),
                "a tick of the pause claimed after its end ran: {late:?}"
            );
        }
    });
}

#[test]
fn the_dashboards_pause_form_takes_an_end_and_a_reason_shown_everywhere() {
    use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr, eventually, goto, js};
    use fantoccini::Locator;

    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let file = cluster.path("draw");
    let jobs = probe_job("draw", "* * * * * *", &file, "true", "");
    let daemon = format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n"
    );
    cluster.start_with("alpha", &daemon, &jobs, None);
    cluster.wait_ready();
    let base = format!("http://{}", dashboard_addr(&cluster.replicas[0]));
    let config = cluster.config_path("alpha");
    runtime().block_on(async {
        let browser = crate::support::Browser::start().await;
        goto(&browser, &format!("{base}/login?next=/jobs/draw")).await;
        let find = async |id: &str| {
            browser
                .client
                .find(Locator::Id(id))
                .await
                .unwrap_or_else(|e| panic!("#{id}: {e}"))
        };
        find("name")
            .await
            .send_keys("tester")
            .await
            .expect("typing");
        find("token").await.send_keys(TOKEN).await.expect("typing");
        find("login").await.click().await.expect("logging in");
        eventually("the job page's pause form", async || {
            js::<bool>(&browser, "return !!document.getElementById('pause-until');")
                .await
                .then_some(())
        })
        .await;

        // An end that is no time: refused, nothing paused.
        find("pause-until")
            .await
            .send_keys("yesterday")
            .await
            .expect("typing");
        find("pause").await.click().await.expect("a click");
        let (code, error) = crate::dashboard::refusal(&browser).await;
        assert_eq!(code, 400, "{error}");
        assert!(error.contains("Pause refused"), "{error}");
        assert_eq!(job(&status(&config), "draw")["paused"], false);

        goto(&browser, &format!("{base}/jobs/draw")).await;
        eventually("the pause form again", async || {
            js::<bool>(&browser, "return !!document.getElementById('pause-until');")
                .await
                .then_some(())
        })
        .await;
        find("pause-until")
            .await
            .send_keys("1h")
            .await
            .expect("typing");
        find("pause-reason")
            .await
            .send_keys("rotating the draw's keys")
            .await
            .expect("typing");
        // What is typed survives the page's refresh (every 3 s).
        tokio::time::sleep(Duration::from_millis(4_000)).await;
        let typed: (String, String) = js(
            &browser,
            "return [document.getElementById('pause-until').value, document.getElementById('pause-reason').value];",
        )
        .await;
        assert_eq!(typed, ("1h".to_string(), "rotating the draw's keys".to_string()));
        let before = redis_now_ms(&cluster.redis);
        find("pause").await.click().await.expect("a click pauses");
        let shown: String = eventually("the job shown paused with its reason", async || {
            let text: String = js(&browser, "return document.body.textContent;").await;
            (text.contains("rotating the draw's keys") && text.contains("until")).then_some(text)
        })
        .await;
        assert!(shown.contains("Resume"), "{shown}");

        let report = status(&config);
        let draw = job(&report, "draw");
        assert_eq!(draw["paused"], true, "{report:#}");
        assert_eq!(
            draw["paused_reason"], "rotating the draw's keys",
            "{report:#}"
        );
        let until = draw["paused_until_ms"].as_i64().expect("an until");
        assert!(
            (before + 3_600_000 - 5_000..=before + 3_600_000 + 5_000).contains(&until),
            "until {until}, paused at about {before}"
        );
        let actions = stream(&cluster.redis, "cl:{draw}:actions");
        let pause = actions
            .iter()
            .find(|a| a["action"] == "pause")
            .expect("the pause");
        assert_eq!(pause["reason"], "rotating the draw's keys", "{actions:#?}");
        assert!(pause["who"].contains("tester"), "{actions:#?}");

        // explain of a tick of the pause says who, until when and why.
        let tick = (redis_now_ms(&cluster.redis) / 1000 + 2) * 1000;
        wait_until(Duration::from_secs(20), "the paused tick to pass", || {
            let mark: Option<String> = redis::cmd("HGET")
                .arg("cl:{draw}:state")
                .arg("last_tick")
                .query(&mut cluster.redis.client())
                .ok()?;
            mark.and_then(|m| m.parse::<i64>().ok())
                .filter(|m| *m >= tick)
        });
        let (e, paused) = explained_pause(&config, "draw", tick);
        assert_eq!(e["verdict"], "not_run", "{e:#}");
        assert_eq!(
            paused["evidence"]["reason"], "rotating the draw's keys",
            "{e:#}"
        );
        assert_eq!(paused["evidence"]["until_ms"], until, "{e:#}");

        // The cluster's pause shows as a banner on the overview.
        op(&["pause", "--all", "--reason", "datacentre move"], &config).expect_code(0);
        goto(&browser, &format!("{base}/")).await;
        let banner: String = eventually("the cluster pause banner", async || {
            js(
                &browser,
                "return document.getElementById('cluster-paused')?.textContent ?? null;",
            )
            .await
        })
        .await;
        assert!(banner.contains("datacentre move"), "{banner}");
    });
}

#[test]
fn a_follower_whose_upstream_ends_during_the_clusters_pause_is_not_started() {
    let mut cluster = Cluster::new(RedisServer::start());
    let sink = cluster.path("sink");
    let jobs = format!(
        "[jobs.source]\nschedule = \"* * * * * *\"\nshell = \"sleep 2\"\n\n\
         [jobs.sink]\nafter = [\"source\"]\nshell = \"echo $CRONLEASE_TICK_MS >> {}\"\n",
        sink.display()
    );
    cluster.start("alpha", &jobs);
    cluster.wait_ready();
    let sink_ticks = || -> Vec<i64> {
        std::fs::read_to_string(&sink)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    wait_until(Duration::from_secs(20), "a run of the follower", || {
        (!sink_ticks().is_empty()).then_some(())
    });
    // A run of the upstream is in flight when the cluster is paused: it
    // ends during the pause, and its follower does not start.
    cluster.holder("source");
    let config = cluster.config_path("alpha");
    op(&["pause", "--all"], &config).expect_code(0);
    let returned = redis_now_ms(&cluster.redis);
    std::thread::sleep(Duration::from_secs(4));
    let late: Vec<i64> = sink_ticks().into_iter().filter(|t| *t > returned).collect();
    assert!(
        late.is_empty(),
        "followers started during the pause: {late:?}\n{}",
        cluster.logs()
    );
    assert!(
        cluster
            .logs()
            .contains("follower's run not started: the job or the cluster is paused"),
        "{}",
        cluster.logs()
    );
}
