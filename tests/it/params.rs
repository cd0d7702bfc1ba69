//! Job parameters end to end: `cronlease trigger --param` reaches the
//! process as `CRONLEASE_PARAM_<NAME>`, the outcome and `history`; values
//! the job table does not allow are refused before anything is queued; a
//! request written straight to Redis with such values is refused by the
//! replica; ticks of the schedule run with the defaults; an HTTP job's
//! `{param.x}`; the library's `Run::param` and `Scheduler::trigger`; and
//! the dashboard's Run now form in a real browser.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cronlease::{JobBuilder, ParamError, ParamSpec, Run, SchedulerError};
use fantoccini::Locator;

use crate::support::{
    self, Browser, Cluster, Outcome, Receiver, RedisServer, cronlease, read_outcomes,
    wait_until_or_show,
};

/// A schedule that does not fire during a test (03:00:00 on January 1).
const YEARLY: &str = "0 0 3 1 1 *";

/// `[jobs.<name>]` on `schedule` with a `region` (eu or us, default eu)
/// and a free `note` (default "none"), appending both to `file` as one
/// line `REGION|NOTE`.
fn export_job(name: &str, schedule: &str, file: &Path) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{schedule}\"\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us\"] }}, note = {{ default = \"none\" }} }}\n\
         shell = '''echo \"$CRONLEASE_PARAM_REGION|$CRONLEASE_PARAM_NOTE\" >> {file}'''\n\n",
        file = file.display()
    )
}

/// The outcome of run `run_id` of `job`, waiting for it.
#[track_caller]
fn outcome_of(cluster: &Cluster, job: &str, run_id: &str) -> Outcome {
    wait_until_or_show(
        Duration::from_secs(30),
        &format!("the outcome of run {run_id} of {job}"),
        || cluster.logs(),
        || {
            cluster
                .outcomes(job)
                .into_iter()
                .find(|o| o.run_id() == run_id)
        },
    )
}

/// The entries of the triggers stream.
fn queued(cluster: &Cluster) -> usize {
    redis::cmd("XLEN")
        .arg("cl:triggers")
        .query(&mut cluster.redis.client())
        .expect("XLEN")
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_triggered_run_gets_its_values_in_its_environment_outcome_and_history() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("export.log");
    let jobs = export_job("export", YEARLY, &file);
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("a").display().to_string();

    let run = cronlease([
        "trigger",
        "export",
        "--param",
        "region=us",
        "--param",
        "note=a b=c",
        "--wait",
        "--timeout",
        "30s",
        "--config",
        &config,
    ])
    .expect_code(0);
    let run_id = run.stdout().lines().next().unwrap_or("").trim().to_string();
    let outcome = outcome_of(&cluster, "export", &run_id);
    assert_eq!(outcome.status(), "ok", "{outcome:?}");
    assert_eq!(outcome.field("param.region"), Some("us"), "{outcome:?}");
    assert_eq!(outcome.field("param.note"), Some("a b=c"), "{outcome:?}");
    assert_eq!(lines_of(&file), ["us|a b=c"]);

    // A value not given takes its default.
    let run = cronlease([
        "trigger",
        "export",
        "--param",
        "note=x",
        "--wait",
        "--timeout",
        "30s",
        "--config",
        &config,
    ])
    .expect_code(0);
    let second = run.stdout().lines().next().unwrap_or("").trim().to_string();
    let outcome = outcome_of(&cluster, "export", &second);
    assert_eq!(outcome.field("param.region"), Some("eu"), "{outcome:?}");
    assert_eq!(lines_of(&file), ["us|a b=c", "eu|x"]);

    // `history` shows them, as text and as JSON.
    let text = cronlease(["history", "export", "--config", &config])
        .expect_code(0)
        .stdout();
    assert!(
        text.lines().next().unwrap_or("").contains("params"),
        "{text}"
    );
    assert!(text.contains("note=a b=c region=us"), "{text}");
    let json = cronlease(["history", "export", "--json", "--config", &config])
        .expect_code(0)
        .stdout();
    let report: serde_json::Value = serde_json::from_str(json.trim()).expect("JSON");
    let first = report["outcomes"]
        .as_array()
        .and_then(|o| o.iter().find(|o| o["run_id"] == run_id.as_str()))
        .unwrap_or_else(|| panic!("run {run_id} in {report}"));
    assert_eq!(first["params"]["region"], "us", "{first}");

    // What the job table does not allow is refused, and nothing is queued.
    let before = queued(&cluster);
    let refusals = [
        (
            "region=mars",
            "\"mars\" is not an allowed value of parameter region: expected one of \"eu\", \"us\"",
        ),
        (
            "zone=x",
            "no parameter \"zone\": expected one of note, region",
        ),
        ("region", "is not NAME=VALUE"),
    ];
    for (param, message) in refusals {
        let run =
            cronlease(["trigger", "export", "--param", param, "--config", &config]).expect_code(2);
        assert!(run.stderr().contains(message), "{}", run.describe());
        assert!(run.stdout().is_empty(), "{}", run.describe());
    }
    let run = cronlease([
        "trigger",
        "export",
        "--param",
        "region=us",
        "--param",
        "region=eu",
        "--config",
        &config,
    ])
    .expect_code(2);
    assert!(run.stderr().contains("given twice"), "{}", run.describe());
    assert_eq!(queued(&cluster), before, "a refused trigger was queued");
    cluster.stop_all();
    assert_eq!(lines_of(&file).len(), 2);
}

#[test]
fn a_request_written_to_redis_with_values_the_job_refuses_runs_nothing() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("export.log");
    cluster.start("a", &export_job("export", YEARLY, &file));
    cluster.wait_ready();
    let mut redis = cluster.redis.client();
    // The replicas' group, as the replica makes it (it may not have yet):
    // the requests below are delivered to it.
    let created: redis::RedisResult<()> = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("cl:triggers")
        .arg("replicas")
        .arg("$")
        .arg("MKSTREAM")
        .query(&mut redis);
    if let Err(e) = created {
        assert_eq!(e.code(), Some("BUSYGROUP"), "{e}");
    }
    let mut forge = |params: &[(&str, &str)]| -> String {
        let run_id = uuid::Uuid::new_v4().to_string();
        let mut command = redis::cmd("XADD");
        command.arg("cl:triggers").arg("*");
        command
            .arg("job")
            .arg("export")
            .arg("run_id")
            .arg(&run_id)
            .arg("requested_by")
            .arg("mallory");
        for (name, value) in params {
            command.arg(format!("param.{name}")).arg(*value);
        }
        let _: String = command.query(&mut redis).expect("XADD");
        run_id
    };
    let refused = [
        forge(&[("region", "mars")]),
        forge(&[("region", "us; rm -rf /")]),
        forge(&[("note", "line\nbreak")]),
        forge(&[("PATH", "/tmp")]),
    ];
    // Then one that fits, with a value missing: it runs with the default.
    let fits = forge(&[("region", "us")]);
    let outcome = outcome_of(&cluster, "export", &fits);
    assert_eq!(outcome.field("param.region"), Some("us"), "{outcome:?}");
    assert_eq!(outcome.field("param.note"), Some("none"), "{outcome:?}");

    let logs = wait_until_or_show(
        Duration::from_secs(10),
        "the replica's refusals in its log",
        || cluster.logs(),
        || {
            let logs = cluster.logs();
            let refusals = logs
                .matches("refusing a trigger request whose parameters do not fit")
                .count();
            (refusals == refused.len()).then_some(logs)
        },
    );
    assert!(
        logs.contains("not an allowed value of parameter region"),
        "{logs}"
    );
    assert!(logs.contains("PATH"), "{logs}");
    let outcomes = cluster.outcomes("export");
    for run_id in &refused {
        assert!(
            outcomes.iter().all(|o| o.run_id() != run_id),
            "a refused request ran: {outcomes:#?}"
        );
    }
    assert_eq!(lines_of(&file), ["us|none"]);
    // Every request was acknowledged: none is taken over and run later.
    let pending: redis::Value = redis::cmd("XPENDING")
        .arg("cl:triggers")
        .arg("replicas")
        .query(&mut cluster.redis.client())
        .expect("XPENDING");
    let redis::Value::Array(summary) = pending else {
        panic!("XPENDING: {pending:?}");
    };
    assert_eq!(summary.first(), Some(&redis::Value::Int(0)), "{summary:?}");
    cluster.stop_all();
}

#[test]
fn ticks_of_the_schedule_run_with_the_defaults() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("export.log");
    cluster.start("a", &export_job("export", "* * * * * *", &file));
    cluster.wait_ready();
    let outcome = wait_until_or_show(
        Duration::from_secs(20),
        "an ok tick",
        || cluster.logs(),
        || {
            cluster
                .outcomes("export")
                .into_iter()
                .find(|o| o.status() == "ok")
        },
    );
    cluster.stop_all();
    assert_eq!(outcome.field("trigger"), Some("schedule"), "{outcome:?}");
    assert_eq!(outcome.field("param.region"), Some("eu"), "{outcome:?}");
    assert_eq!(outcome.field("param.note"), Some("none"), "{outcome:?}");
    assert!(
        lines_of(&file).iter().all(|line| line == "eu|none"),
        "{:?}",
        lines_of(&file)
    );
}

#[test]
fn an_http_job_takes_its_values_into_its_url_and_body() {
    let receiver = Receiver::start(200, "ok");
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = format!(
        "[jobs.hook]\nschedule = \"{YEARLY}\"\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us east\"] }}, note = {{ default = \"a&b\" }} }}\n\
         http = {{ method = \"POST\", url = \"{}\", body = '{{\"region\": \"{{param.region}}\", \"note\": \"{{param.note}}\"}}' }}\n",
        receiver.url("/export/{param.region}?note={param.note}")
    );
    cluster.start("a", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("a").display().to_string();
    let run = cronlease([
        "trigger",
        "hook",
        "--param",
        "region=us east",
        "--param",
        "note=50% off/now",
        "--wait",
        "--timeout",
        "30s",
        "--config",
        &config,
    ])
    .expect_code(0);
    let run_id = run.stdout().lines().next().unwrap_or("").trim().to_string();
    let outcome = outcome_of(&cluster, "hook", &run_id);
    assert_eq!(outcome.status(), "ok", "{outcome:?}");
    let requests = receiver.requests();
    let request = requests
        .iter()
        .find(|r| r.header("cronlease-run-id") == Some(run_id.as_str()))
        .unwrap_or_else(|| panic!("no request of run {run_id}: {requests:#?}"));
    assert_eq!(request.path, "/export/us%20east?note=50%25%20off%2Fnow");
    assert_eq!(
        String::from_utf8_lossy(&request.body),
        r#"{"region": "us east", "note": "50% off/now"}"#
    );

    // `check` names a template that names no parameter.
    let dir = tempfile::tempdir().unwrap();
    let bad = support::write_config(
        dir.path(),
        &cluster.redis.url(),
        "",
        "[jobs.hook]\nschedule = \"@daily\"\nhttp = { url = \"http://127.0.0.1:1/{param.region}\" }\n",
    );
    let run = cronlease(["check", "--config", &bad.display().to_string()]).expect_code(2);
    assert!(
        run.stdout()
            .contains("{param.region} names no parameter of the job")
            || run
                .stderr()
                .contains("{param.region} names no parameter of the job"),
        "{}",
        run.describe()
    );
    cluster.stop_all();
}

/// What the handler saw: (run id, region, note).
type Seen = Arc<Mutex<Vec<(String, Option<String>, Option<String>)>>>;

#[test]
fn a_handler_reads_the_values_it_was_triggered_with() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let recorded = seen.clone();
    let job = JobBuilder::new("export", YEARLY)
        .param("region", ParamSpec::new("eu").allowed(&["eu", "us"]))
        .param("note", ParamSpec::new("none"))
        .run(move |run: Run| {
            let recorded = recorded.clone();
            async move {
                recorded.lock().expect("no panic holding it").push((
                    run.run_id().to_string(),
                    run.param("region").map(str::to_string),
                    run.param("note").map(str::to_string),
                ));
                assert_eq!(run.param("other"), None);
                Ok::<(), std::io::Error>(())
            }
        });
    support::multi_thread_runtime().block_on(async {
        let mut scheduler = support::cluster(&redis)
            .await
            .scheduler()
            .replica_id("shop-1")
            .state_dir(&dir.path().join("shop-1"))
            .lease(Duration::from_secs(2))
            .heartbeat(Duration::from_secs(1))
            .job(job)
            .start()
            .expect("valid");
        scheduler.ready().await.expect("ready");
        let run_id = scheduler
            .trigger("export", &[("region", "us")])
            .await
            .expect("queued");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let runs = seen.lock().expect("no panic holding it").clone();
            if let Some(run) = runs.iter().find(|(id, ..)| *id == run_id) {
                assert_eq!(run.1.as_deref(), Some("us"));
                assert_eq!(run.2.as_deref(), Some("none"));
                break;
            }
            assert!(Instant::now() < deadline, "the triggered run did not come");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refused = scheduler.trigger("export", &[("region", "mars")]).await;
        assert!(
            matches!(
                &refused,
                Err(SchedulerError::Params { job, error: ParamError::NotAllowed { .. } }) if job == "export"
            ),
            "{refused:?}"
        );
        let refused = scheduler.trigger("export", &[("size", "1")]).await;
        assert!(
            matches!(&refused, Err(SchedulerError::Params { error: ParamError::Undeclared { .. }, .. })),
            "{refused:?}"
        );
        assert!(matches!(
            scheduler.trigger("nope", &[]).await,
            Err(SchedulerError::NoSuchJob(_))
        ));
        // A bad spec is the job's problem, named by its field.
        let bad = JobBuilder::new("bad", YEARLY)
            .param("region", ParamSpec::new("mars").allowed(&["eu"]))
            .run(|_run: Run| async { Ok::<(), std::io::Error>(()) });
        let Err(SchedulerError::Config(error)) = scheduler.add(bad) else {
            panic!("a default not in allowed is refused");
        };
        assert_eq!(error.problems[0].field.as_deref(), Some("params.region"));
        scheduler.shutdown().await.expect("clean shutdown");
    });
    let outcomes = read_outcomes(&mut redis.client(), "cl", "export");
    assert_eq!(outcomes.len(), 1, "{outcomes:#?}");
    assert_eq!(outcomes[0].field("param.region"), Some("us"));
}

/// The operator token of the dashboard test.
const TOKEN: &str = "params-dashboard-token-2718281828";
const TOKEN_ENV: &str = "CRONLEASE_TEST_DASHBOARD_TOKEN";

#[test]
fn the_dashboards_run_now_form_gives_the_values_and_refuses_others() {
    use crate::dashboard::{eventually, js};
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let file = cluster.path("export.log");
    let daemon = format!(
        "dashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\ndashboard_read = \"public\"\n"
    );
    cluster.start_with("a", &daemon, &export_job("export", YEARLY, &file), None);
    cluster.wait_ready();
    let addr = cluster.replicas[0].logged_address("dashboard on http://", Duration::from_secs(30));
    let job_page = format!("http://{addr}/jobs/export");
    support::runtime().block_on(async {
        let browser = Browser::start().await;
        let goto = async |url: &str| {
            browser
                .client
                .goto(url)
                .await
                .unwrap_or_else(|e| panic!("cannot open {url}: {e}"));
        };
        goto(&format!("http://{addr}/login?next=/jobs/export")).await;
        let find = async |id: &str| {
            browser
                .client
                .find(Locator::Id(id))
                .await
                .unwrap_or_else(|e| panic!("#{id}: {e}"))
        };
        find("name").await.send_keys("tester").await.expect("typing");
        find("token").await.send_keys(TOKEN).await.expect("typing");
        find("login").await.click().await.expect("logging in");

        // The form: a choice among the allowed values, a text field, each
        // holding its default.
        let fields: (String, Vec<String>, String) = eventually("the Run now form", async || {
            js(
                &browser,
                r#"const region = document.getElementById('param-region');
                   const note = document.getElementById('param-note');
                   return region && note && region.form === document.getElementById('run-now').form
                     ? [region.value, [...region.options].map((o) => o.value), note.value] : null;"#,
            )
            .await
        })
        .await;
        assert_eq!(
            fields,
            ("eu".to_string(), vec!["eu".to_string(), "us".to_string()], "none".to_string())
        );
        find("param-region")
            .await
            .select_by_value("us")
            .await
            .expect("choosing us");
        let note = find("param-note").await;
        note.clear().await.expect("clearing the note");
        note.send_keys("from the browser").await.expect("typing");
        find("run-now").await.click().await.expect("run now");
        let run_id: String = eventually("the notice naming the queued run", async || {
            js(&browser, "return document.querySelector('p.notice code')?.textContent ?? null;")
                .await
        })
        .await;
        let outcome = eventually("the run's outcome", async || {
            read_outcomes(&mut cluster.redis.client(), "cl", "export")
                .into_iter()
                .find(|o| o.run_id() == run_id)
        })
        .await;
        assert_eq!(outcome.field("param.region"), Some("us"), "{outcome:?}");
        assert_eq!(outcome.field("param.note"), Some("from the browser"), "{outcome:?}");

        // The job page's runs show the values.
        let shown: String = eventually("the run in the job's history", async || {
            goto(&job_page).await;
            js(
                &browser,
                &format!(
                    "return [...document.querySelectorAll('table.history tr[data-run=\"{run_id}\"] small.param')].map((s) => s.textContent).join(' ') || null;"
                ),
            )
            .await
        })
        .await;
        assert_eq!(shown, "note=from the browser region=us");

        // A value the page does not offer, posted all the same: refused by
        // the server, nothing queued.
        let before = read_outcomes(&mut cluster.redis.client(), "cl", "export").len();
        let queued_before: usize = redis::cmd("XLEN")
            .arg("cl:triggers")
            .query(&mut cluster.redis.client())
            .expect("XLEN");
        let _: Option<bool> = js(
            &browser,
            r#"const region = document.getElementById('param-region');
               region.options[0].value = 'mars';
               region.value = 'mars';
               document.getElementById('run-now').click();
               return null;"#,
        )
        .await;
        let error = crate::dashboard::refusal(&browser).await;
        assert_eq!(error.0, 400, "{error:?}");
        assert!(
            error.1.contains("Run now refused: job \"export\": \"mars\" is not an allowed value of parameter region"),
            "{error:?}"
        );
        let queued_after: usize = redis::cmd("XLEN")
            .arg("cl:triggers")
            .query(&mut cluster.redis.client())
            .expect("XLEN");
        assert_eq!(queued_after, queued_before, "a refused form was queued");
        assert_eq!(read_outcomes(&mut cluster.redis.client(), "cl", "export").len(), before);
    });
    cluster.stop_all();
    assert_eq!(lines_of(&file), ["us|from the browser"]);
}

#[test]
fn a_triggered_run_whose_holder_dies_is_recorded_and_rerun_with_its_values() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("export.log");
    let marker = cluster.path("marker");
    // The first run sleeps until it is killed; the rerun writes its values.
    let jobs = format!(
        "[jobs.export]\nschedule = \"{YEARLY}\"\non_holder_lost = \"rerun\"\n\
         params = {{ region = {{ default = \"eu\", allowed = [\"eu\", \"us\"] }} }}\n\
         shell = '''if [ ! -e {m} ]; then touch {m}; sleep 30; fi; echo \"$CRONLEASE_PARAM_REGION\" >> {f}'''\n",
        m = marker.display(),
        f = file.display()
    );
    for name in ["a", "b", "c"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    let config = cluster.config_path("a").display().to_string();
    cronlease([
        "trigger",
        "export",
        "--param",
        "region=us",
        "--config",
        &config,
    ])
    .expect_code(0);
    let holder = cluster.holder("export");
    support::wait_until(Duration::from_secs(20), "the first run under way", || {
        marker.exists().then_some(())
    });
    let index = cluster.index_of(&holder);
    cluster.replicas[index].kill9();
    wait_until_or_show(
        Duration::from_secs(30),
        "the abandoned run and its rerun",
        || cluster.logs(),
        || {
            let outcomes = cluster.outcomes("export");
            let rerun = outcomes
                .iter()
                .any(|o| o.field("trigger") == Some("rerun") && o.status() == "ok");
            rerun.then_some(())
        },
    );
    cluster.replicas.remove(index);
    cluster.stop_all();

    let outcomes = cluster.outcomes("export");
    let abandoned = outcomes
        .iter()
        .find(|o| o.status() == "abandoned")
        .expect("the killed run");
    assert_eq!(abandoned.field("param.region"), Some("us"), "{abandoned:?}");
    let rerun = outcomes
        .iter()
        .find(|o| o.field("trigger") == Some("rerun"))
        .unwrap();
    assert_eq!(rerun.field("param.region"), Some("us"), "{rerun:?}");
    assert_eq!(lines_of(&file), ["us"]);
}
