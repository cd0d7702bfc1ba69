//! The library's embedded scheduler (`cronlease::Scheduler`): instances in this
//! process, each on its own connection, against a private Redis. Each tick
//! runs once with rising fences; an error or a panic is `failed` with its
//! message; a handler that ignores its stop signal is dropped after the
//! grace; a deleted lease fires the signal; jobs come and go at runtime;
//! the operator commands see, trigger, pause and resume embedded jobs; bad
//! settings get the config's messages.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cronlease::Overlap;
use cronlease::Stop;
use cronlease::{Cluster, JobBuilder, RedisSettings, Run, SchedulerError};

use crate::support::{
    RedisServer, cluster, cronlease, multi_thread_runtime as runtime, read_outcomes,
    start_scheduler, wait_until, write_config,
};

const PREFIX: &str = "cl";

/// What handlers saw: (job, tick, fence, replica).
type Seen = Arc<Mutex<Vec<(String, i64, u64, String)>>>;

/// A job every second whose handler records what it was given.
fn recording(name: &str, seen: &Seen) -> cronlease::Job {
    let seen = seen.clone();
    JobBuilder::new(name, "* * * * * *").run(move |run: Run| {
        let seen = seen.clone();
        async move {
            seen.lock()
                .expect("no test thread panics holding it")
                .push((
                    run.job().to_string(),
                    run.tick().as_millisecond(),
                    run.fence(),
                    run.replica().to_string(),
                ));
            Ok::<(), std::io::Error>(())
        }
    })
}

fn seen_of(seen: &Seen, job: &str) -> Vec<(i64, u64, String)> {
    let mut runs: Vec<(i64, u64, String)> = seen
        .lock()
        .expect("no test thread panics holding it")
        .iter()
        .filter(|(j, ..)| j == job)
        .map(|(_, tick, fence, replica)| (*tick, *fence, replica.clone()))
        .collect();
    runs.sort();
    runs
}

#[test]
fn three_instances_run_each_tick_once_with_rising_fences_and_show_in_status() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let rt = runtime();
    rt.block_on(async {
        let mut schedulers = Vec::new();
        for id in ["shop-1", "shop-2", "shop-3"] {
            schedulers
                .push(start_scheduler(&redis, &dir, id, vec![recording("draw", &seen)]).await);
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        // The operator's view: every instance is a replica.
        let config = write_config(
            dir.path(),
            &redis.url(),
            "",
            "[jobs.draw]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n",
        );
        let config = config.display().to_string();
        let status = tokio::task::spawn_blocking(move || {
            cronlease(["status", "--json", "--config", config.as_str()])
        })
        .await
        .expect("the CLI runs");
        let report: serde_json::Value = serde_json::from_str(&status.stdout())
            .unwrap_or_else(|e| panic!("{e}: {}", status.describe()));
        let ids: Vec<&str> = report["replicas"]
            .as_array()
            .map(|r| r.iter().filter_map(|r| r["id"].as_str()).collect())
            .unwrap_or_default();
        for id in ["shop-1", "shop-2", "shop-3"] {
            assert!(ids.contains(&id), "{id} missing from status: {report}");
        }
        for scheduler in schedulers {
            scheduler.shutdown().await.expect("a clean shutdown");
        }
    });
    let runs = seen_of(&seen, "draw");
    assert!(runs.len() >= 3, "too few runs: {runs:?}");
    let mut ticks: Vec<i64> = runs.iter().map(|r| r.0).collect();
    ticks.dedup();
    assert_eq!(ticks.len(), runs.len(), "a tick ran twice: {runs:?}");
    assert!(
        runs.windows(2).all(|w| w[0].1 < w[1].1),
        "fences do not rise with the ticks: {runs:?}"
    );
    let outcomes = read_outcomes(&mut redis.client(), PREFIX, "draw");
    assert_eq!(outcomes.len(), runs.len(), "{outcomes:?}");
    assert!(outcomes.iter().all(|o| o.status() == "ok"), "{outcomes:?}");
}

#[test]
fn an_error_or_a_panic_is_a_failed_outcome_with_its_message() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let failing = JobBuilder::new("failing", "* * * * * *").run(|_run: Run| async {
        let cause = std::io::Error::other("the ticket printer is out of paper");
        Err::<(), _>(Wrapped(cause))
    });
    let panicking = JobBuilder::new("panicking", "* * * * * *").run(|_run: Run| async {
        if true {
            panic!("the draw machine is jammed");
        }
        Ok::<(), std::io::Error>(())
    });
    runtime().block_on(async {
        let scheduler = start_scheduler(&redis, &dir, "shop-1", vec![failing, panicking]).await;
        tokio::time::sleep(Duration::from_millis(2500)).await;
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    let failed = read_outcomes(&mut redis.client(), PREFIX, "failing");
    assert!(!failed.is_empty());
    for outcome in &failed {
        assert_eq!(outcome.status(), "failed", "{outcome:?}");
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            output.contains("error: the draw could not print")
                && output.contains("caused by: the ticket printer is out of paper"),
            "{output}"
        );
    }
    let panicked = read_outcomes(&mut redis.client(), PREFIX, "panicking");
    assert!(
        panicked.len() >= 2,
        "the scheduler stopped after a panic: {panicked:?}"
    );
    for outcome in &panicked {
        assert_eq!(outcome.status(), "failed", "{outcome:?}");
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            output.contains("the run panicked: the draw machine is jammed"),
            "{output}"
        );
    }
}

/// An error with a source, as a service's own error type would be.
#[derive(Debug)]
struct Wrapped(std::io::Error);

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the draw could not print")
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[test]
fn a_handler_that_ignores_its_signal_is_dropped_after_the_grace() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let ignoring = JobBuilder::new("slow", "* * * * * *")
        .timeout(Duration::from_millis(800))
        .overlap(Overlap::Allow)
        .run(|_run: Run| async {
            std::future::pending::<()>().await;
            Ok::<(), std::io::Error>(())
        });
    let heeding = JobBuilder::new("heeding", "* * * * * *")
        .overlap(Overlap::Allow)
        .run(|mut run: Run| async move {
            let reason = run.stopped().await;
            Err::<(), String>(format!("stopped: {reason:?}"))
        });
    runtime().block_on(async {
        let scheduler = start_scheduler(&redis, &dir, "shop-1", vec![ignoring, heeding]).await;
        tokio::time::sleep(Duration::from_millis(3500)).await;
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    let slow = read_outcomes(&mut redis.client(), PREFIX, "slow");
    assert!(!slow.is_empty());
    for outcome in &slow {
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            matches!(outcome.status(), "timeout" | "interrupted")
                && output.contains("did not stop within 500ms")
                && output.contains("dropped"),
            "{outcome:?}"
        );
    }
    assert!(slow.iter().any(|o| o.status() == "timeout"), "{slow:?}");
    let heeding = read_outcomes(&mut redis.client(), PREFIX, "heeding");
    assert!(!heeding.is_empty());
    for outcome in &heeding {
        assert_eq!(outcome.status(), "interrupted", "{outcome:?}");
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            output.contains(&format!("stopped: {:?}", Stop::Shutdown))
                && output.contains("ended after being told to stop"),
            "{output}"
        );
    }
}

#[test]
fn a_lost_lease_fires_the_handlers_signal() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let reasons: Arc<Mutex<Vec<Stop>>> = Arc::default();
    let job = {
        let reasons = reasons.clone();
        JobBuilder::new("held", "* * * * * *").run(move |mut run: Run| {
            let reasons = reasons.clone();
            async move {
                let reason = run.stopped().await;
                reasons.lock().expect("not poisoned").push(reason);
                Ok::<(), std::io::Error>(())
            }
        })
    };
    runtime().block_on(async {
        let scheduler = start_scheduler(&redis, &dir, "shop-1", vec![job]).await;
        let lease = format!("{PREFIX}:{{held}}:lease");
        let mut conn = redis.client();
        wait_until(Duration::from_secs(10), "a lease", || {
            let exists: bool = redis::cmd("EXISTS").arg(&lease).query(&mut conn).ok()?;
            exists.then_some(())
        });
        let _: () = redis::cmd("DEL").arg(&lease).query(&mut conn).expect("DEL");
        tokio::time::sleep(Duration::from_secs(2)).await;
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    assert!(
        reasons.lock().unwrap().contains(&Stop::LostLease),
        "{:?}",
        reasons.lock().unwrap()
    );
    let outcomes = read_outcomes(&mut redis.client(), PREFIX, "held");
    assert!(
        outcomes.iter().any(|o| o.status() == "lost_lease"),
        "{outcomes:?}"
    );
}

#[test]
fn jobs_come_and_go_on_a_running_scheduler() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    runtime().block_on(async {
        let mut scheduler = start_scheduler(&redis, &dir, "shop-1", Vec::new()).await;
        scheduler
            .add(recording("late-comer", &seen))
            .expect("a valid job");
        assert!(matches!(
            scheduler.add(recording("late-comer", &seen)),
            Err(SchedulerError::JobExists(_))
        ));
        tokio::time::sleep(Duration::from_secs(3)).await;
        scheduler.remove("late-comer").expect("it is there");
        let after_removal = seen_of(&seen, "late-comer").len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        // At most a run claimed as the removal arrived.
        assert!(seen_of(&seen, "late-comer").len() <= after_removal + 1);
        assert_eq!(scheduler.jobs(), Vec::<String>::new());
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    assert!(seen_of(&seen, "late-comer").len() >= 2, "{seen:?}");
}

#[test]
fn cronlease_trigger_runs_an_embedded_job_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let yearly = {
        let seen = seen.clone();
        JobBuilder::new("yearly", "0 0 1 1 *").run(move |run: Run| {
            let seen = seen.clone();
            async move {
                seen.lock().expect("not poisoned").push((
                    run.job().to_string(),
                    run.tick().as_millisecond(),
                    run.fence(),
                    run.replica().to_string(),
                ));
                Ok::<(), std::io::Error>(())
            }
        })
    };
    let config = write_config(
        dir.path(),
        &redis.url(),
        "",
        "[jobs.yearly]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
    );
    let rt = runtime();
    rt.block_on(async {
        let scheduler = start_scheduler(&redis, &dir, "shop-1", vec![yearly]).await;
        let config = config.clone();
        let trigger = tokio::task::spawn_blocking(move || {
            cronlease([
                "trigger".to_string(),
                "yearly".to_string(),
                "--wait".to_string(),
                "--timeout".to_string(),
                "20s".to_string(),
                "--config".to_string(),
                config.display().to_string(),
            ])
        })
        .await
        .expect("the CLI runs");
        assert_eq!(trigger.code(), Some(0), "{}", trigger.describe());
        assert!(
            trigger.stdout().contains("yearly ok on shop-1"),
            "{}",
            trigger.describe()
        );
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    assert_eq!(seen_of(&seen, "yearly").len(), 1, "{seen:?}");
}

#[test]
fn bad_settings_get_the_configs_messages_all_at_once() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    runtime().block_on(async {
        let result = cluster(&redis)
            .await
            .scheduler()
            .state_dir(dir.path())
            .job(
                JobBuilder::new("draw", "0 12 31 2 *")
                    .run(|_run: Run| async { Ok::<(), String>(()) }),
            )
            .job(
                JobBuilder::new("report", "0 9 * * *")
                    .timezone("Europe/Berlim")
                    .run(|_run: Run| async { Ok::<(), String>(()) }),
            )
            .start();
        let Err(SchedulerError::Config(error)) = result else {
            panic!("the jobs were accepted");
        };
        let text = error.to_string();
        assert!(
            text.contains("job \"draw\", field `schedule`") && text.contains("February"),
            "{text}"
        );
        assert!(
            text.contains("job \"report\", field `timezone`") && text.contains("Europe/Berlin"),
            "{text}"
        );
    });
    let unreachable = runtime().block_on(Cluster::connect(
        RedisSettings::url("redis://127.0.0.1:1/0").connect_timeout(Duration::from_millis(200)),
    ));
    assert!(
        matches!(unreachable, Err(SchedulerError::Redis(_))),
        "{:?}",
        unreachable.err()
    );
}

#[test]
fn cronlease_pause_and_resume_hold_and_release_an_embedded_job() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let operator = |action: &str| {
        let run = cronlease([
            action,
            "draw",
            "--redis-url",
            &redis.url(),
            "--prefix",
            PREFIX,
        ]);
        assert_eq!(run.code(), Some(0), "{}", run.describe());
    };
    let rt = runtime();
    let scheduler = rt.block_on(start_scheduler(
        &redis,
        &dir,
        "shop-1",
        vec![recording("draw", &seen)],
    ));
    wait_until(Duration::from_secs(10), "a first run", || {
        (!seen_of(&seen, "draw").is_empty()).then_some(())
    });
    operator("pause");
    // A tick claimed as the pause landed may still run; then nothing.
    std::thread::sleep(Duration::from_millis(1500));
    let paused = seen_of(&seen, "draw").len();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(seen_of(&seen, "draw").len(), paused, "ran while paused");
    operator("resume");
    wait_until(Duration::from_secs(10), "runs after the resume", || {
        (seen_of(&seen, "draw").len() >= paused + 2).then_some(())
    });
    rt.block_on(scheduler.shutdown()).expect("a clean shutdown");
}

#[test]
fn cronlease_pause_all_holds_an_embedded_scheduler_once_it_confirmed() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let seen: Seen = Arc::default();
    let operator = |args: &[&str]| {
        let mut all = args.to_vec();
        let url = redis.url();
        all.extend(["--redis-url", &url, "--prefix", PREFIX]);
        let run = cronlease(all);
        assert_eq!(run.code(), Some(0), "{}", run.describe());
        run.stdout()
    };
    let redis_now_ms = || {
        let (seconds, micros): (i64, i64) =
            redis::cmd("TIME").query(&mut redis.client()).expect("TIME");
        seconds * 1000 + micros / 1000
    };
    let rt = runtime();
    let scheduler = rt.block_on(start_scheduler(
        &redis,
        &dir,
        "shop-1",
        vec![recording("draw", &seen)],
    ));
    wait_until(Duration::from_secs(10), "a first run", || {
        (!seen_of(&seen, "draw").is_empty()).then_some(())
    });
    let said = operator(&["pause", "--all", "--reason", "shop closed"]);
    let returned = redis_now_ms();
    assert!(
        said.contains("confirmed by every live replica (1): shop-1"),
        "{said}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let late: Vec<i64> = seen_of(&seen, "draw")
        .into_iter()
        .map(|(tick, ..)| tick)
        .filter(|tick| *tick > returned)
        .collect();
    assert!(
        late.is_empty(),
        "ticks after pause --all returned ran: {late:?}"
    );
    operator(&["resume", "--all"]);
    let resumed = redis_now_ms();
    wait_until(Duration::from_secs(10), "runs after the resume", || {
        (seen_of(&seen, "draw")
            .iter()
            .filter(|(tick, ..)| *tick > resumed)
            .count()
            >= 2)
            .then_some(())
    });
    rt.block_on(scheduler.shutdown()).expect("a clean shutdown");
}

#[test]
fn ready_says_when_a_scheduler_claims_or_why_it_refused_to() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let seen = Seen::default();
    let evicting =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    let sound = RedisServer::start();
    runtime().block_on(async {
        let mut refused =
            start_scheduler(&evicting, &dir, "shop-1", vec![recording("draw", &seen)]).await;
        let error = refused
            .ready()
            .await
            .expect_err("a Redis that evicts keys is refused");
        assert!(matches!(error, SchedulerError::Refused(_)), "{error:?}");
        let message = error.to_string();
        assert!(
            message.contains("allkeys-lru") && message.contains("noeviction"),
            "{message}"
        );
        refused.shutdown().await.expect("nothing left to stop");

        let mut scheduler =
            start_scheduler(&sound, &dir, "shop-2", vec![recording("draw", &seen)]).await;
        scheduler.ready().await.expect("ready");
        scheduler.ready().await.expect("still ready");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while seen_of(&seen, "draw").is_empty() {
            assert!(tokio::time::Instant::now() < deadline, "no run once ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    assert!(
        seen_of(&seen, "draw")
            .iter()
            .all(|(_, _, replica)| replica == "shop-2")
    );
}
