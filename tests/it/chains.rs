//! Chains end to end: real replicas run a job's followers once per
//! matching upstream outcome, started by the script that records it;
//! fan-in (`after_all`), `after_on = "failed"`, a follower's context in
//! its environment and outcome, a holder killed mid-chain, and `check`
//! refusing cycles and unknown upstreams.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::{
    Cluster, ConfigFile, Outcome, RedisServer, cronlease, wait_until, wait_until_or_show,
};

/// Waits until `job` has at least `n` current outcomes, and returns them.
fn wait_for(cluster: &Cluster, job: &str, n: usize) -> Vec<Outcome> {
    wait_until_or_show(
        Duration::from_secs(30),
        &format!("{n} outcomes of {job}"),
        || cluster.logs(),
        || {
            let current: Vec<Outcome> = cluster
                .outcomes(job)
                .into_iter()
                .filter(|o| !o.stale())
                .collect();
            (current.len() >= n).then_some(current)
        },
    )
}

#[test]
fn a_follower_runs_once_for_each_ok_outcome_with_its_upstream_in_the_environment() {
    let mut cluster = Cluster::new(RedisServer::start());
    let env_file = cluster.path("env");
    let jobs = format!(
        "[jobs.extract]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
         [jobs.load]\nafter = [\"extract\"]\n\
         shell = \"echo $CRONLEASE_UPSTREAM_JOB $CRONLEASE_UPSTREAM_RUN_ID $CRONLEASE_UPSTREAM_STATUS $CRONLEASE_ROOT_TICK_MS $CRONLEASE_TICK_MS >> {}\"\n",
        env_file.display()
    );
    cluster.start_with("a", "dashboard_listen = \"127.0.0.1:0\"\n", &jobs, None);
    cluster.start("b", &jobs);
    cluster.start("c", &jobs);
    cluster.wait_ready();
    wait_for(&cluster, "load", 4);
    // The dashboard's job page links the upstream, and each run to the run
    // it followed.
    let dashboard =
        cluster.replicas[0].logged_address("dashboard on http://", Duration::from_secs(10));
    let page = crate::support::http::get(&dashboard, &dashboard, "/jobs/load", "");
    assert_eq!(page.status, 200, "{page:?}");
    assert!(
        page.body
            .contains("<dt>After</dt><dd><a href=\"/jobs/extract\">extract</a>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("chain after <a href=\"/jobs/extract#run-"),
        "{}",
        page.body
    );
    let upstream_page = crate::support::http::get(&dashboard, &dashboard, "/jobs/extract", "");
    assert!(
        upstream_page
            .body
            .contains("<dt>Then</dt><dd><a href=\"/jobs/load\">load</a>"),
        "{}",
        upstream_page.body
    );
    cluster.stop_all();

    let extracts: BTreeMap<String, Outcome> = cluster
        .outcomes("extract")
        .into_iter()
        .filter(|o| !o.stale() && o.status() == "ok")
        .map(|o| (o.run_id().to_string(), o))
        .collect();
    let loads: Vec<Outcome> = cluster
        .outcomes("load")
        .into_iter()
        .filter(|o| !o.stale())
        .collect();
    let mut seen = BTreeMap::new();
    for load in &loads {
        assert_eq!(load.field("trigger"), Some("chain"), "{load:?}");
        assert_eq!(load.field("upstream_job"), Some("extract"), "{load:?}");
        let cause = load
            .field("upstream_run_id")
            .expect("a follower's outcome names its cause");
        let extract = extracts
            .get(cause)
            .unwrap_or_else(|| panic!("{load:?} follows no ok run of extract"));
        assert_eq!(
            load.field("root_tick"),
            Some(extract.tick().to_string().as_str())
        );
        *seen.entry(cause.to_string()).or_insert(0) += 1;
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "a cause ran twice: {seen:?}"
    );
    // Every extract but the last few (whose followers the stop cut short)
    // has its load.
    let followed = extracts.keys().filter(|id| seen.contains_key(*id)).count();
    assert!(followed >= loads.len() && loads.len() >= 4, "{seen:?}");
    let lines = std::fs::read_to_string(&env_file).unwrap();
    let first = lines
        .lines()
        .next()
        .expect("the follower wrote its environment");
    let words: Vec<&str> = first.split(' ').collect();
    assert_eq!(words.len(), 5, "{first}");
    assert_eq!(words[0], "extract");
    assert!(extracts.contains_key(words[1]), "{first}");
    assert_eq!(words[2], "ok");

    // The operator's views say which run caused which.
    let config = cluster.config_path("a");
    let config = config.to_str().unwrap();
    let status = cronlease(["status", "--config", config])
        .expect_code(0)
        .stdout();
    assert!(status.contains("* * * * * *; then load"), "{status}");
    assert!(status.contains("after extract"), "{status}");
    let load = &loads[0];
    let cause = load.field("upstream_run_id").unwrap();
    let history = cronlease(["history", "load", "--config", config])
        .expect_code(0)
        .stdout();
    assert!(
        history.contains(&format!("chain after extract ok {}", &cause[..8])),
        "{history}"
    );
    let tick = extracts[cause].tick().to_string();
    let explained = cronlease(["explain", "extract", "--tick", &tick, "--config", config])
        .expect_code(0)
        .stdout();
    assert!(explained.contains("  then       load"), "{explained}");
    assert!(
        explained.contains(&format!("  started    load run {}", load.run_id())),
        "{explained}"
    );
    let json = cronlease([
        "explain",
        "load",
        "--tick",
        &load.tick().to_string(),
        "--config",
        config,
        "--json",
    ])
    .expect_code(0)
    .stdout();
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["chain"]["after"][0], "extract", "{json}");
    assert_eq!(
        json["chain"]["caused_by"]["runs"][0]["run_id"], cause,
        "{json}"
    );
}

#[test]
fn after_on_failed_follows_only_failures_and_after_all_waits_for_every_upstream() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = "[jobs.flaky]\nschedule = \"* * * * * *\"\nshell = \"test $(( $(date +%s) % 2 )) -eq 0\"\n\n\
         [jobs.other]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
         [jobs.alert]\nafter = [\"flaky\"]\nafter_on = \"failed\"\ncommand = [\"true\"]\n\n\
         [jobs.report]\nafter = [\"flaky\", \"other\"]\nafter_on = \"any\"\nafter_all = true\ncommand = [\"true\"]\n";
    cluster.start("a", jobs);
    cluster.start("b", jobs);
    cluster.wait_ready();
    wait_for(&cluster, "alert", 2);
    wait_for(&cluster, "report", 3);
    cluster.stop_all();

    let flaky: BTreeMap<String, Outcome> = cluster
        .outcomes("flaky")
        .into_iter()
        .filter(|o| !o.stale())
        .map(|o| (o.run_id().to_string(), o))
        .collect();
    for alert in cluster.outcomes("alert").iter().filter(|o| !o.stale()) {
        let cause = &flaky[alert.field("upstream_run_id").unwrap()];
        assert_eq!(cause.status(), "failed", "{alert:?} follows {cause:?}");
        assert_eq!(alert.field("upstream_status"), Some("failed"));
    }
    let other: BTreeMap<String, Outcome> = cluster
        .outcomes("other")
        .into_iter()
        .map(|o| (o.run_id().to_string(), o))
        .collect();
    let mut roots = BTreeMap::new();
    for report in cluster.outcomes("report").iter().filter(|o| !o.stale()) {
        assert_eq!(
            report.field("upstream_job"),
            Some("flaky,other"),
            "{report:?}"
        );
        let ids: Vec<&str> = report
            .field("upstream_run_id")
            .unwrap()
            .split(',')
            .collect();
        let root: i64 = report.field("root_tick").unwrap().parse().unwrap();
        assert_eq!(flaky[ids[0]].tick(), root, "{report:?}");
        assert_eq!(other[ids[1]].tick(), root, "{report:?}");
        *roots.entry(root).or_insert(0) += 1;
    }
    assert!(
        roots.values().all(|&n| n == 1),
        "a root tick reported twice: {roots:?}"
    );
}

#[test]
fn check_refuses_a_cycle_and_an_unknown_upstream() {
    let cycle = ConfigFile::new(
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n\
         [jobs.a]\nschedule = \"@hourly\"\ncommand = [\"true\"]\n\n\
         [jobs.b]\nafter = [\"a\", \"d\"]\ncommand = [\"true\"]\n\n\
         [jobs.c]\nafter = [\"b\"]\ncommand = [\"true\"]\n\n\
         [jobs.d]\nafter = [\"c\"]\ncommand = [\"true\"]\n",
    );
    let run = cronlease(["check", "--config", cycle.path().to_str().unwrap()]).expect_code(2);
    let err = run.stderr();
    assert!(err.contains("cycle: b → c → d → b"), "{err}");
    assert!(err.contains("field `after`"), "{err}");

    let unknown = ConfigFile::new(
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n\
         [jobs.load]\nafter = [\"extrct\"]\ncommand = [\"true\"]\n\n\
         [jobs.extract]\nschedule = \"@hourly\"\ncommand = [\"true\"]\n",
    );
    let run = cronlease(["check", "--config", unknown.path().to_str().unwrap()]).expect_code(2);
    let err = run.stderr();
    assert!(
        err.contains("\"extrct\" in `after` is not a job of this table"),
        "{err}"
    );
    assert!(err.contains("jobs.toml:5:"), "{err}");

    let fine = ConfigFile::new(
        "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n\
         [jobs.extract]\nschedule = \"@hourly\"\ncommand = [\"true\"]\n\n\
         [jobs.load]\nafter = [\"extract\"]\nafter_on = \"any\"\ncommand = [\"true\"]\n",
    );
    let out = cronlease(["check", "--config", fine.path().to_str().unwrap()])
        .expect_code(0)
        .stdout();
    assert!(out.contains("after extract (each any outcome)"), "{out}");
    assert!(out.contains("then load (on any)"), "{out}");
}

#[test]
fn a_chain_survives_a_kill9_of_the_middle_jobs_holder() {
    let mut cluster = Cluster::new(RedisServer::start());
    let marker = cluster.path("marker");
    // b sleeps through its first run only, so that it can be killed there.
    let jobs = format!(
        "[jobs.a]\nschedule = \"*/2 * * * * *\"\ncommand = [\"true\"]\n\n\
         [jobs.b]\nafter = [\"a\"]\non_holder_lost = \"rerun\"\noverlap = \"allow\"\n\
         shell = \"if [ ! -e {m} ]; then touch {m}; sleep 30; fi\"\n\n\
         [jobs.c]\nafter = [\"b\"]\nafter_on = \"any\"\noverlap = \"allow\"\ncommand = [\"true\"]\n",
        m = marker.display()
    );
    for name in ["r1", "r2", "r3"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let victim = cluster.holder("b");
    // The run dies with its replica: killed before the marker is made, the
    // rerun would sleep instead.
    wait_until(Duration::from_secs(5), "b's first run's marker", || {
        marker.exists().then_some(())
    });
    let index = cluster.index_of(&victim);
    cluster.replicas[index].kill9();
    wait_until_or_show(
        Duration::from_secs(40),
        "the killed run abandoned, rerun, and followed",
        || cluster.logs(),
        || {
            let b = cluster.outcomes("b");
            let rerun = b
                .iter()
                .find(|o| o.field("trigger") == Some("rerun") && o.status() == "ok")?;
            let c = cluster.outcomes("c");
            let followed = c
                .iter()
                .filter(|o| o.field("upstream_run_id") == Some(rerun.run_id()));
            (followed.count() == 1 && c.len() >= 4).then_some(())
        },
    );
    cluster.replicas.remove(index);
    cluster.stop_all();

    let current = |job: &str| -> Vec<Outcome> {
        cluster
            .outcomes(job)
            .into_iter()
            .filter(|o| !o.stale())
            .collect()
    };
    let (a, b, c) = (current("a"), current("b"), current("c"));
    // B: one run per ok outcome of A (a rerun goes on with the same cause).
    let mut first_runs = BTreeMap::new();
    for run in &b {
        let cause = run.field("upstream_run_id").expect("b's runs follow a");
        assert!(
            a.iter().any(|o| o.run_id() == cause && o.status() == "ok"),
            "{run:?} follows no ok run of a"
        );
        if run.field("trigger") == Some("chain") {
            *first_runs.entry(cause.to_string()).or_insert(0) += 1;
        } else {
            assert_eq!(run.field("trigger"), Some("rerun"), "{run:?}");
        }
    }
    assert!(
        first_runs.values().all(|&n| n == 1),
        "a's run started b twice: {first_runs:?}"
    );
    let abandoned: Vec<&Outcome> = b.iter().filter(|o| o.status() == "abandoned").collect();
    assert_eq!(abandoned.len(), 1, "{b:#?}");
    assert_eq!(abandoned[0].replica(), victim);
    // C: one run per outcome of B, the abandoned one included.
    let mut per_b = BTreeMap::new();
    for run in &c {
        let cause = run.field("upstream_run_id").expect("c's runs follow b");
        let b_run = b
            .iter()
            .find(|o| o.run_id() == cause)
            .unwrap_or_else(|| panic!("{run:?} follows no run of b"));
        assert_eq!(run.field("upstream_status"), Some(b_run.status()));
        assert_eq!(
            run.field("root_tick"),
            b_run.field("root_tick"),
            "the root tick is carried down"
        );
        *per_b.entry(cause.to_string()).or_insert(0) += 1;
    }
    assert!(
        per_b.values().all(|&n| n == 1),
        "a run of b started c twice: {per_b:?}"
    );
    assert!(
        per_b.contains_key(abandoned[0].run_id()),
        "the abandoned run of b was not followed"
    );
}

#[test]
fn an_embedded_follower_added_at_runtime_sees_its_upstream_and_a_cycle_is_refused() {
    use cronlease::{AfterOn, JobBuilder, Run, SchedulerError};
    use std::sync::{Arc, Mutex};

    /// (upstream job, upstream run id, status, root tick ms) per run.
    type Seen = (String, String, String, i64);

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    crate::support::multi_thread_runtime().block_on(async {
        let draw = JobBuilder::new("draw", "* * * * * *")
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        let mut scheduler = crate::support::cluster(&redis)
            .await
            .scheduler()
            .replica_id("shop-1")
            .state_dir(&dir.path().join("shop-1"))
            .lease(Duration::from_secs(2))
            .heartbeat(Duration::from_secs(1))
            .job(draw)
            .start()
            .expect("a valid job");
        let recorder = seen.clone();
        let publish = JobBuilder::after("publish", ["draw"])
            .after_on(AfterOn::Any)
            .run(move |run: Run| {
                let recorder = recorder.clone();
                async move {
                    let upstream = run.upstream().expect("a follower's run has its upstream");
                    let up = &upstream.runs()[0];
                    recorder.lock().expect("not poisoned").push((
                        up.job().to_string(),
                        up.run_id().to_string(),
                        up.status().to_string(),
                        upstream.root_tick_ms(),
                    ));
                    Ok::<(), std::io::Error>(())
                }
            });
        scheduler
            .add(publish)
            .expect("a follower of a job of the scheduler");
        let unknown = JobBuilder::after("audit", ["drew"])
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        match scheduler.add(unknown) {
            Err(SchedulerError::Config(e)) => {
                assert!(
                    e.to_string().contains("\"drew\" in `after` is not a job"),
                    "{e}"
                )
            }
            other => panic!("an unknown upstream was taken: {other:?}"),
        }
        let cycle = vec![
            JobBuilder::after("x", ["y"]).run(|_run: Run| async { Ok::<(), std::io::Error>(()) }),
            JobBuilder::after("y", ["x"]).run(|_run: Run| async { Ok::<(), std::io::Error>(()) }),
        ];
        match scheduler.set_jobs(cycle) {
            Err(SchedulerError::Config(e)) => {
                assert!(e.to_string().contains("cycle: x → y → x"), "{e}")
            }
            other => panic!("a cycle was taken: {other:?}"),
        }
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            while seen.lock().expect("not poisoned").len() < 3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        scheduler.shutdown().await.expect("a clean shutdown");
        waited.expect("publish ran after draw");
    });
    let mut outcomes = redis.client();
    let draws = crate::support::read_outcomes(&mut outcomes, "cl", "draw");
    for (job, run_id, status, root) in seen.lock().unwrap().iter() {
        assert_eq!(job, "draw");
        let draw = draws
            .iter()
            .find(|o| o.run_id() == run_id)
            .unwrap_or_else(|| panic!("{run_id} is no run of draw"));
        assert_eq!((draw.status(), draw.tick()), (status.as_str(), *root));
    }
}

#[test]
fn a_follower_with_after_params_pass_gets_the_triggered_runs_values() {
    let mut cluster = Cluster::new(RedisServer::start());
    let seen = cluster.path("seen");
    let jobs = format!(
        "[jobs.draw]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us\"] }}, note = {{ default = \"-\" }} }}\n\n\
         [jobs.publish]\nafter = [\"draw\"]\nafter_params = \"pass\"\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us\", \"cn\"] }} }}\n\
         shell = \"echo $CRONLEASE_PARAM_REGION $CRONLEASE_UPSTREAM_JOB >> {}\"\n\n\
         [jobs.tally]\nafter = [\"draw\"]\n\
         params = {{ region = {{ default = \"cn\" }} }}\n\
         shell = \"echo tally $CRONLEASE_PARAM_REGION >> {}\"\n",
        seen.display(),
        seen.display()
    );
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("a");
    cronlease([
        "trigger",
        "draw",
        "--param",
        "region=us",
        "--config",
        config.to_str().unwrap(),
    ])
    .expect_code(0);
    wait_for(&cluster, "publish", 1);
    wait_for(&cluster, "tally", 1);
    cluster.stop_all();

    let lines = std::fs::read_to_string(&seen).unwrap();
    assert!(lines.lines().any(|l| l == "us draw"), "{lines}");
    assert!(lines.lines().any(|l| l == "tally cn"), "{lines}");
    let publish = &cluster.outcomes("publish")[0];
    assert_eq!(publish.field("param.region"), Some("us"), "{publish:?}");
    assert_eq!(publish.field("param.note"), None, "{publish:?}");
}

#[test]
fn a_followers_fences_keep_rising_after_redis_loses_its_data_whichever_replica_claims() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let mut cluster = Cluster::new(RedisServer::start());
    let chain = "[jobs.up]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
                 [jobs.down]\nafter = [\"up\"]\ncommand = [\"true\"]\n";
    // b has the follower too, so it hears of its claims, but after a job
    // that does not run today: a claims every run of `down`.
    let idle = "[jobs.never]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n\n\
                [jobs.down]\nafter = [\"never\"]\ncommand = [\"true\"]\n";
    let a = cluster.start("a", chain);
    let b = cluster.start("b", idle);
    cluster.wait_ready();
    wait_for(&cluster, "down", 4);
    cluster.replicas[a].sigterm();
    let status = cluster.replicas[a].wait_exit(Duration::from_secs(20));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let before = cluster.outcomes("down");
    assert!(before.iter().all(|o| o.replica() == "a"), "{before:#?}");
    let highest = before.iter().map(Outcome::fence).max().unwrap();

    // Redis loses everything; b is handed the chain and claims from now on.
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut cluster.redis.client())
        .unwrap();
    cluster.config("b", "", chain);
    let pid = Pid::from_raw(cluster.replicas[b].pid() as i32);
    kill(pid, Signal::SIGHUP).unwrap();
    cluster.replicas[b].wait_for_log("job table reloaded", Duration::from_secs(10));
    let after = wait_for(&cluster, "down", 2);
    for outcome in &after {
        assert_eq!(outcome.replica(), "b", "{outcome:?}");
        assert!(
            outcome.fence() > highest,
            "fence {} handed out again after the state loss (a's highest was {highest}): {outcome:?}",
            outcome.fence()
        );
    }
    cluster.replicas.remove(a);
    cluster.stop_all();
}

#[test]
fn a_replica_told_to_stop_claims_no_more_followers_runs_and_records_every_one_it_claimed() {
    let mut cluster = Cluster::new(RedisServer::start());
    // A backlog in down's inbox, as up's outcomes leave it while no
    // replica runs down.
    let now = crate::support::now_ms();
    let mut redis = cluster.redis.client();
    for n in 0..500 {
        let _: String = redis::cmd("XADD")
            .arg("cl:{up}:after:down")
            .arg("*")
            .arg("run_id")
            .arg(format!("backlog-{n}"))
            .arg("status")
            .arg("ok")
            .arg("tick")
            .arg(now)
            .arg("fence")
            .arg(n + 1)
            .arg("root_tick")
            .arg(now)
            .arg("at")
            .arg(now)
            .query(&mut redis)
            .unwrap();
    }
    let jobs = "[jobs.up]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n\n\
                [jobs.down]\nafter = [\"up\"]\noverlap = \"allow\"\ncommand = [\"true\"]\n";
    let a = cluster.start("a", jobs);
    // SIGTERM while it works through the backlog.
    cluster.replicas[a].wait_for_log("claimed a follower's run", Duration::from_secs(20));
    cluster.stop_all();

    // Once told to stop it claims nothing: at most the claim on its way
    // then comes back after.
    let log = cluster.replicas[a].log();
    let (_, after_stop) = log
        .split_once("shutting down: no more claims")
        .expect("the replica logs its shutdown");
    let late = after_stop.matches("claimed a follower's run").count();
    assert!(
        late <= 1,
        "{late} follower's runs claimed after the shutdown began\n{log}"
    );
    // Every run it claimed ran and was recorded before it exited: none is
    // left in flight for a sweep to find abandoned.
    let running: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg("cl:{down}:running")
        .query(&mut redis)
        .unwrap();
    assert!(
        running.is_empty(),
        "runs claimed but never recorded: {running:#?}\n{}",
        cluster.logs()
    );
    let outcomes = cluster.outcomes("down");
    assert!(!outcomes.is_empty());
    for outcome in &outcomes {
        assert!(
            !outcome.stale() && matches!(outcome.status(), "ok" | "interrupted"),
            "{outcome:?}"
        );
    }
}

#[test]
fn a_followers_run_whose_holder_is_killed_and_restarted_at_once_is_recorded_abandoned() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = "[jobs.up]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\n\
                [jobs.down]\nafter = [\"up\"]\nshell = \"sleep 3\"\n";
    let a = cluster.start("a", jobs);
    cluster.wait_ready();
    let victim = cluster.holder("down");
    assert_eq!(victim, "a");
    let running: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg("cl:{down}:running")
        .query(&mut cluster.redis.client())
        .unwrap();
    let killed = running.keys().next().unwrap().clone();
    cluster.replicas[a].kill9();
    cluster.replicas.remove(a);
    // Back under the same name before anyone finds it silent: only the
    // follower's next claims can notice the run it left in flight.
    cluster.start("a", jobs);
    wait_until_or_show(
        Duration::from_secs(30),
        "the killed run recorded abandoned",
        || cluster.logs(),
        || {
            cluster
                .outcomes("down")
                .into_iter()
                .find(|o| o.run_id() == killed && o.status() == "abandoned")
        },
    );
    cluster.stop_all();
}
