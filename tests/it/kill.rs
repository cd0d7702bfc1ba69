//! `cronlease kill`: a run in flight stopped from any host, by the
//! PUBLISH its holder hears or, when that is lost, at the holder's next
//! lease renewal; recorded `killed` with who asked, once, never retried
//! nor rerun. Also prints the kill latency (p50/p99) it measured.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Cluster, Outcome, RedisServer, Run, cronlease_with_env, wait_until};

/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

/// A job run by hand only that appends the pid of its `sleep` (as long
/// as the file `duration` says, in seconds) to `pids`. Retries and reruns
/// asked for: a killed run must get neither.
fn long_job(name: &str, duration: &Path, pids: &Path) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{NEVER}\"\noverlap = \"skip\"\nretries = 2\n\
         retry_backoff = \"100ms\"\non_holder_lost = \"rerun\"\nshell = '''\
         sleep $(cat {duration}) & echo $! >> {pids}; wait'''\n\n",
        duration = duration.display(),
        pids = pids.display()
    )
}

/// `cronlease ARGS… --config CONFIG`, with a `USER` that is not whoever
/// runs it (it is not whom the actions are recorded under).
fn op(args: &[&str], config: &Path) -> Run {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    all.push("--config".into());
    all.push(config.into());
    cronlease_with_env(all, &[("USER", "kill-tester"), ("LOGNAME", "kill-tester")])
}

/// Who `cronlease kill` records as having asked: the operating system's
/// user (`id -un`) at the host.
fn who() -> String {
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let user = std::process::Command::new("id")
        .arg("-un")
        .output()
        .expect("id -un runs");
    format!("{}@{host}", String::from_utf8_lossy(&user.stdout).trim())
}

/// The pids the job's runs appended, in order.
fn pids(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether process `pid` is gone (a zombie counts as gone: it runs no
/// more, and its parent, the replica, reaps it).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The outcomes of `job` with run id `run_id`.
fn outcomes_of(cluster: &Cluster, job: &str, run_id: &str) -> Vec<Outcome> {
    cluster
        .outcomes(job)
        .into_iter()
        .filter(|o| o.field("run_id") == Some(run_id))
        .collect()
}

/// Triggers `job` and waits for its run in flight, its `sleep` started;
/// returns the run id and the sleep's pid.
fn start_run(cluster: &Cluster, config: &Path, job: &str, pid_file: &Path) -> (String, i32) {
    let before = pids(pid_file).len();
    let run = op(&["trigger", job], config).expect_code(0);
    let run_id = run.stdout().lines().next().unwrap().trim().to_string();
    let pid = wait_until(Duration::from_secs(20), "the run's sleep started", || {
        pids(pid_file).get(before).copied()
    });
    wait_until(Duration::from_secs(10), "the run in flight", || {
        crate::support::hget(&cluster.redis, &format!("cl:{{{job}}}:running"), &run_id)
    });
    (run_id, pid)
}

/// Waits for the one outcome of `run_id`.
fn outcome(cluster: &Cluster, job: &str, run_id: &str) -> Outcome {
    wait_until(Duration::from_secs(20), "the killed run's outcome", || {
        outcomes_of(cluster, job, run_id).into_iter().next()
    })
}

#[test]
fn kill_stops_a_run_in_flight_from_any_replica_once_and_for_good() {
    let mut cluster = Cluster::new(RedisServer::start());
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let jobs = long_job("long", &duration, &pid_file);
    for name in ["alpha", "bravo", "charlie"] {
        cluster.start(name, &jobs);
    }
    cluster.wait_ready();
    // Asked through a replica's config that may or may not hold the run.
    let config = cluster.config_path("charlie");

    // Every run of the job in flight.
    let (run_id, pid) = start_run(&cluster, &config, "long", &pid_file);
    let run = op(&["kill", "long"], &config).expect_code(0);
    assert!(
        run.stdout().contains(&run_id) && run.stdout().contains(&who()),
        "{}",
        run.describe()
    );
    wait_until(Duration::from_secs(10), "the run's sleep gone", || {
        gone(pid).then_some(())
    });
    let killed = outcome(&cluster, "long", &run_id);
    assert_eq!(killed.status(), "killed", "{killed:?}\n{}", cluster.logs());
    assert_eq!(
        killed.field("killed_by"),
        Some(who().as_str()),
        "{killed:?}"
    );
    assert_eq!(killed.field("attempts"), Some("1"), "retried: {killed:?}");

    // Longer than the lease: no retry, no rerun, recorded once.
    std::thread::sleep(Duration::from_secs(3));
    let all = cluster.outcomes("long");
    assert_eq!(all.len(), 1, "{all:#?}\n{}", cluster.logs());
    assert_eq!(
        pids(&pid_file).len(),
        1,
        "started again\n{}",
        cluster.logs()
    );

    // `history` and `status` say who asked; the actions name the kill.
    let history = op(&["history", "long"], &config).expect_code(0);
    assert!(
        history.stdout().contains(&format!("killed by {}", who())),
        "{}",
        history.describe()
    );
    let status = op(&["status"], &config).expect_code(0);
    assert!(
        status.stdout().contains(&format!("killed by {}", who())),
        "{}",
        status.describe()
    );
    let actions: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("cl:{long}:actions")
        .arg("-")
        .arg("+")
        .query(&mut cluster.redis.client())
        .unwrap();
    let kills: Vec<_> = actions
        .iter()
        .filter(|(_, f)| f.contains(&("action".into(), "kill".into())))
        .collect();
    assert_eq!(kills.len(), 1, "{actions:?}");
    assert!(kills[0].1.contains(&("who".into(), who())), "{kills:?}");
    assert!(
        kills[0].1.contains(&("detail".into(), run_id.clone())),
        "{kills:?}"
    );

    // One run by its id; the next one runs as usual.
    let (second_id, second_pid) = start_run(&cluster, &config, "long", &pid_file);
    op(&["kill", "long", &second_id], &config).expect_code(0);
    let second = outcome(&cluster, "long", &second_id);
    assert_eq!(second.status(), "killed", "{second:?}");
    wait_until(Duration::from_secs(10), "the second sleep gone", || {
        gone(second_pid).then_some(())
    });

    // Nothing in flight: a clear error, exit 1.
    let again = op(&["kill", "long", &second_id], &config);
    assert_eq!(again.code(), Some(1), "{}", again.describe());
    assert!(
        again.stderr().starts_with("error: ") && again.stderr().contains("not in flight"),
        "{}",
        again.describe()
    );
    let none = op(&["kill", "long"], &config);
    assert_eq!(none.code(), Some(1), "{}", none.describe());
    assert!(
        none.stderr().contains("no run in flight"),
        "{}",
        none.describe()
    );
    let unknown = op(&["kill", "nosuch"], &config);
    assert_eq!(unknown.code(), Some(2), "{}", unknown.describe());

    std::fs::write(&duration, "0").unwrap();
    let run = op(&["trigger", "long", "--wait", "--timeout", "20s"], &config);
    run.expect_code(0);
    assert_eq!(cluster.outcomes("long").len(), 3, "{}", cluster.logs());
    cluster.stop_all();
}

#[test]
fn followers_on_failed_and_any_run_after_a_killed_run_and_those_on_ok_do_not() {
    let mut cluster = Cluster::new(RedisServer::start());
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let mut jobs = long_job("long", &duration, &pid_file);
    for (follower, on) in [("on-ok", "ok"), ("on-failed", "failed"), ("on-any", "any")] {
        jobs.push_str(&format!(
            "[jobs.{follower}]\nafter = [\"long\"]\nafter_on = \"{on}\"\ncommand = [\"true\"]\n\n"
        ));
    }
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");
    let (run_id, _) = start_run(&cluster, &config, "long", &pid_file);
    op(&["kill", "long"], &config).expect_code(0);
    assert_eq!(outcome(&cluster, "long", &run_id).status(), "killed");
    for follower in ["on-failed", "on-any"] {
        let run = wait_until(Duration::from_secs(20), "the follower's run", || {
            cluster.outcomes(follower).into_iter().next()
        });
        assert_eq!(run.status(), "ok", "{follower}: {run:?}");
        assert_eq!(run.field("upstream_status"), Some("killed"), "{run:?}");
    }
    std::thread::sleep(Duration::from_secs(2));
    assert!(cluster.outcomes("on-ok").is_empty(), "{}", cluster.logs());
    cluster.stop_all();
}

#[test]
fn a_kill_whose_publish_is_lost_stops_the_run_at_its_next_renewal() {
    let mut cluster = Cluster::new(RedisServer::start());
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let jobs = long_job("long", &duration, &pid_file);
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");
    let (run_id, pid) = start_run(&cluster, &config, "long", &pid_file);

    // The request as kill.lua writes it, and no PUBLISH.
    let mut redis = cluster.redis.client();
    let key = "cl:{long}:running";
    let raw: String = redis::cmd("HGET")
        .arg(key)
        .arg(&run_id)
        .query(&mut redis)
        .unwrap();
    let mut entry: serde_json::Value = serde_json::from_str(&raw).unwrap();
    entry["kill"] = "ops@elsewhere".into();
    let _: () = redis::cmd("HSET")
        .arg(key)
        .arg(&run_id)
        .arg(entry.to_string())
        .query(&mut redis)
        .unwrap();
    let asked = Instant::now();
    // Until its holder stops it, `status` says a kill was asked.
    let status = op(&["status"], &config).expect_code(0);
    if outcomes_of(&cluster, "long", &run_id).is_empty() {
        assert!(
            status.stdout().contains("kill asked by ops@elsewhere")
                || !status.stdout().contains(&run_id),
            "{}",
            status.describe()
        );
    }

    let killed = outcome(&cluster, "long", &run_id);
    assert_eq!(killed.status(), "killed", "{killed:?}\n{}", cluster.logs());
    assert_eq!(
        killed.field("killed_by"),
        Some("ops@elsewhere"),
        "{killed:?}"
    );
    assert!(gone(pid), "the run's sleep is still there");
    // The lease is 2 s, renewed every third of it.
    println!(
        "killed at the next renewal {:?} after the request",
        asked.elapsed()
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cluster.outcomes("long").len(), 1, "{}", cluster.logs());
    cluster.stop_all();
}

#[test]
fn a_run_whose_holder_died_after_a_kill_was_asked_is_abandoned_and_not_rerun() {
    let mut cluster = Cluster::new(RedisServer::start());
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let jobs = long_job("long", &duration, &pid_file);
    cluster.start("alpha", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");
    let (run_id, pid) = start_run(&cluster, &config, "long", &pid_file);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    // The holder hears nothing (frozen), then dies.
    cluster.replicas[0].sigstop();
    op(&["kill", "long"], &config).expect_code(0);
    cluster.replicas[0].kill9();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let swept = outcome(&cluster, "long", &run_id);
    assert_eq!(swept.status(), "abandoned", "{swept:?}\n{}", cluster.logs());
    assert_eq!(
        swept.field("kill_asked_by"),
        Some(who().as_str()),
        "{swept:?}"
    );
    // on_holder_lost = "rerun", and yet no rerun: the operator asked for
    // the run to stop.
    std::thread::sleep(Duration::from_secs(4));
    let all = cluster.outcomes("long");
    assert_eq!(all.len(), 1, "{all:#?}\n{}", cluster.logs());
    assert_eq!(pids(&pid_file).len(), 1, "rerun\n{}", cluster.logs());
}

/// The `p`th percentile (0–100) of sorted `values`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (p * sorted.len()).div_ceil(100).max(1) - 1;
    sorted[rank.min(sorted.len() - 1)]
}

#[test]
fn kill_latency_is_measured_over_twenty_kills() {
    let mut cluster = Cluster::new(RedisServer::start());
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let jobs = long_job("long", &duration, &pid_file);
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");

    let mut to_gone = Vec::new();
    let mut to_outcome = Vec::new();
    let mut command = Vec::new();
    for _ in 0..20 {
        let (run_id, pid) = start_run(&cluster, &config, "long", &pid_file);
        let started = Instant::now();
        op(&["kill", "long", &run_id], &config).expect_code(0);
        let returned = Instant::now();
        command.push(returned - started);
        while !gone(pid) {
            assert!(
                returned.elapsed() < Duration::from_secs(10),
                "the sleep outlived its kill"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        to_gone.push(returned.elapsed());
        while outcomes_of(&cluster, "long", &run_id).is_empty() {
            assert!(returned.elapsed() < Duration::from_secs(20), "no outcome");
            std::thread::sleep(Duration::from_millis(2));
        }
        to_outcome.push(returned.elapsed());
    }
    let all = cluster.outcomes("long");
    assert_eq!(all.len(), 20, "{}", cluster.logs());
    assert!(all.iter().all(|o| o.status() == "killed"), "{all:#?}");
    to_gone.sort();
    to_outcome.sort();
    command.sort();
    println!(
        "kill latency over 20 kills: the `cronlease kill` command itself (start to exit) p50 {:?} p99 {:?}; from its exit: process gone p50 {:?} p99 {:?} max {:?}; outcome recorded p50 {:?} p99 {:?} max {:?}",
        percentile(&command, 50),
        percentile(&command, 99),
        percentile(&to_gone, 50),
        percentile(&to_gone, 99),
        to_gone[to_gone.len() - 1],
        percentile(&to_outcome, 50),
        percentile(&to_outcome, 99),
        to_outcome[to_outcome.len() - 1],
    );
    cluster.stop_all();
}

#[test]
fn the_dashboards_kill_button_stops_the_run_it_stands_beside() {
    use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr, eventually, goto, js};
    use fantoccini::Locator;

    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let duration = cluster.path("duration");
    let pid_file = cluster.path("pids");
    std::fs::write(&duration, "60").unwrap();
    let jobs = long_job("long", &duration, &pid_file);
    let daemon = format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n\
         dashboard_read = \"public\"\n"
    );
    cluster.start_with("alpha", &daemon, &jobs, None);
    cluster.start_with("bravo", &daemon, &jobs, None);
    cluster.wait_ready();
    let base = format!("http://{}", dashboard_addr(&cluster.replicas[0]));
    let config = cluster.config_path("alpha");
    let (run_id, pid) = start_run(&cluster, &config, "long", &pid_file);
    let buttons =
        format!("return document.querySelectorAll('button.kill[data-run=\"{run_id}\"]').length;");
    crate::support::runtime().block_on(async {
        let browser = crate::support::Browser::start().await;
        // A reader without the token sees the run, and no button.
        goto(&browser, &format!("{base}/jobs/long")).await;
        let text: String = js(&browser, "return document.body.textContent;").await;
        assert!(
            text.contains(&run_id),
            "the run in flight is not shown: {text}"
        );
        assert_eq!(
            js::<usize>(&browser, &buttons).await,
            0,
            "a Kill button without the token"
        );

        goto(&browser, &format!("{base}/login?next=/jobs/long")).await;
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
        eventually("the Kill button beside the run", async || {
            (js::<usize>(&browser, &buttons).await == 1).then_some(())
        })
        .await;
        browser
            .client
            .find(Locator::Css(&format!("button.kill[data-run=\"{run_id}\"]")))
            .await
            .expect("the Kill button")
            .click()
            .await
            .expect("a click kills");
        let notice: String = eventually("the notice naming the killed run", async || {
            js(
                &browser,
                "return document.querySelector('p.notice')?.textContent ?? null;",
            )
            .await
        })
        .await;
        assert!(notice.contains(&run_id), "{notice}");
    });
    let killed = outcome(&cluster, "long", &run_id);
    assert_eq!(killed.status(), "killed", "{killed:?}\n{}", cluster.logs());
    let by = killed.field("killed_by").unwrap_or_default();
    assert!(by.contains("tester"), "killed_by {by:?}");
    // The job page's history says who killed it (refreshed in place).
    crate::support::runtime().block_on(async {
        let browser = crate::support::Browser::start().await;
        goto(&browser, &format!("{base}/jobs/long")).await;
        eventually("the killed run and who asked in the history", async || {
            let row: Option<String> = js(
                &browser,
                &format!(
                    "return document.querySelector('tr[data-run=\"{run_id}\"]')?.textContent ?? null;"
                ),
            )
            .await;
            row.filter(|r| r.contains("killed") && r.contains("by tester"))
        })
        .await;
    });
    wait_until(Duration::from_secs(10), "the run's sleep gone", || {
        gone(pid).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(cluster.outcomes("long").len(), 1, "{}", cluster.logs());
    cluster.stop_all();
}

#[test]
fn an_embedded_handler_is_told_stop_killed() {
    use cronlease::{JobBuilder, Run as HandlerRun, Stop};
    use std::sync::{Arc, Mutex};

    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let reasons: Arc<Mutex<Vec<Stop>>> = Arc::default();
    let job = {
        let reasons = reasons.clone();
        JobBuilder::new("held", NEVER).run(move |mut run: HandlerRun| {
            let reasons = reasons.clone();
            async move {
                let reason = run.stopped().await;
                reasons.lock().expect("not poisoned").push(reason);
                Ok::<(), std::io::Error>(())
            }
        })
    };
    let config = crate::support::write_config(
        dir.path(),
        &redis.url(),
        "",
        &format!("[jobs.held]\nschedule = \"{NEVER}\"\ncommand = [\"true\"]\n"),
    );
    crate::support::multi_thread_runtime().block_on(async {
        let scheduler = crate::support::cluster(&redis)
            .await
            .scheduler()
            .replica_id("shop-1")
            .state_dir(&dir.path().join("shop-1"))
            .lease(Duration::from_secs(2))
            .heartbeat(Duration::from_secs(1))
            .kill_grace(Duration::from_millis(500))
            .job(job)
            .start()
            .expect("a valid job");
        let cli = |args: Vec<String>| {
            let config = config.clone();
            tokio::task::spawn_blocking(move || {
                op(
                    &args.iter().map(String::as_str).collect::<Vec<_>>(),
                    &config,
                )
            })
        };
        let trigger = cli(vec!["trigger".into(), "held".into()]).await.unwrap();
        let run_id = trigger
            .expect_code(0)
            .stdout()
            .lines()
            .next()
            .unwrap()
            .trim()
            .to_string();
        let mut conn = redis.client();
        wait_until(Duration::from_secs(10), "the run in flight", || {
            let raw: Option<String> = redis::cmd("HGET")
                .arg("cl:{held}:running")
                .arg(&run_id)
                .query(&mut conn)
                .ok()?;
            raw.map(|_| ())
        });
        cli(vec!["kill".into(), "held".into()])
            .await
            .unwrap()
            .expect_code(0);
        let outcome = loop {
            let all = crate::support::read_outcomes(&mut conn, "cl", "held");
            if let Some(o) = all
                .into_iter()
                .find(|o| o.field("run_id") == Some(run_id.as_str()))
            {
                break o;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(outcome.status(), "killed", "{outcome:?}");
        assert_eq!(
            outcome.field("killed_by"),
            Some(who().as_str()),
            "{outcome:?}"
        );
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    assert_eq!(*reasons.lock().unwrap(), [Stop::Killed]);
}
