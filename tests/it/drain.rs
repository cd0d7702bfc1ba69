//! `cronlease drain` and `undrain`: a drained replica claims nothing and
//! finishes its runs, the others take its ticks, and a rolling restart of
//! three replicas under drain runs every tick exactly once. Real replica
//! processes against a private redis-server, checked through the jobs'
//! side effects, `status --json` and the cluster's actions stream.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Cluster, RedisServer, Run, cronlease, now_ms, probe_job, starts, wait_until};

/// `cronlease ARGS… --config CONFIG`.
fn op(args: &[&str], config: &Path) -> Run {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    all.push("--config".into());
    all.push(config.into());
    cronlease(all)
}

/// What `status --json` says of replica `id`.
fn replica_status(config: &Path, id: &str) -> Value {
    let run = op(&["status", "--json"], config).expect_code(0);
    let report: Value = serde_json::from_str(run.stdout().trim())
        .unwrap_or_else(|e| panic!("status --json is not JSON: {e}\n{}", run.describe()));
    report["replicas"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("no replica {id} in {report:#}"))
}

/// The probe file's `start` lines as (tick, replica, wall-clock ms).
fn timed_starts(file: &Path) -> Vec<(i64, String, i64)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|parts| parts.len() >= 5 && parts[0] == "start")
        .map(|parts| {
            (
                parts[1].parse().unwrap(),
                parts[3].to_string(),
                parts[4].parse().unwrap(),
            )
        })
        .collect()
}

/// The ticks with an `end` line.
fn ended(file: &Path) -> BTreeSet<i64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|parts| parts.len() >= 2 && parts[0] == "end")
        .map(|parts| parts[1].parse().unwrap())
        .collect()
}

/// Asserts every tick from the first to the last started exactly once.
#[track_caller]
fn every_tick_once(file: &Path, logs: &str) -> BTreeSet<i64> {
    let side = starts(file);
    let mut runs: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
    for (tick, _, replica) in &side {
        runs.entry(*tick).or_default().push(replica);
    }
    let twice: Vec<_> = runs.iter().filter(|(_, r)| r.len() > 1).collect();
    assert!(twice.is_empty(), "ticks run twice: {twice:?}\n{logs}");
    let ticks: BTreeSet<i64> = runs.keys().copied().collect();
    let (first, last) = (*ticks.first().unwrap(), *ticks.last().unwrap());
    let missing: Vec<i64> = (0..=(last - first) / 1000)
        .map(|i| first + i * 1000)
        .filter(|tick| !ticks.contains(tick))
        .collect();
    assert!(
        missing.is_empty(),
        "ticks missed: {missing:?} (of {first}..={last})\n{side:?}\n{logs}"
    );
    ticks
}

/// SIGTERM to every replica still running; each must exit 0.
fn stop_running(cluster: &mut Cluster) {
    for replica in &mut cluster.replicas {
        if replica.try_exit().is_none() {
            replica.sigterm();
        }
    }
    for replica in &mut cluster.replicas {
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
fn a_rolling_restart_under_drain_misses_no_tick() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("every-second", "* * * * * *", &file, "sleep 0.3", "");
    let mut index = BTreeMap::new();
    for name in ["a", "b", "c"] {
        index.insert(name, cluster.start(name, &jobs));
    }
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "3 ticks run", || {
        (starts(&file).len() >= 3).then_some(())
    });
    let config = cluster.config_path("a");
    for name in ["a", "b", "c"] {
        let drained = op(&["drain", name, "--wait", "--timeout", "20s"], &config).expect_code(0);
        assert!(
            drained.stdout().contains(&format!("{name} is drained")),
            "{}",
            drained.describe()
        );
        let drained_at = now_ms();
        let old = index[name];
        cluster.replicas[old].sigterm();
        let status = cluster.replicas[old].wait_exit(Duration::from_secs(30));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        let new = cluster.start(name, &jobs);
        index.insert(name, new);
        cluster.replicas[new].wait_for_log("ready", Duration::from_secs(20));
        // Started drained: the mark is in Redis.
        wait_until(
            Duration::from_secs(10),
            "the restarted replica drained",
            || (replica_status(&config, name)["drain"] == "drained").then_some(()),
        );
        std::thread::sleep(Duration::from_millis(1500));
        let during: Vec<_> = timed_starts(&file)
            .into_iter()
            .filter(|(_, replica, at)| replica == name && *at > drained_at)
            .collect();
        assert!(
            during.is_empty(),
            "{name} started runs while drained: {during:?}\n{}",
            cluster.logs()
        );
        op(&["undrain", name], &config).expect_code(0);
        wait_until(Duration::from_secs(10), "the replica undrained", || {
            replica_status(&config, name)
                .get("drain")
                .is_none()
                .then_some(())
        });
        std::thread::sleep(Duration::from_secs(1));
    }
    let end = now_ms() + 3000;
    wait_until(Duration::from_secs(20), "ticks after the restarts", || {
        starts(&file).iter().any(|s| s.0 > end).then_some(())
    });
    stop_running(&mut cluster);
    let logs = cluster.logs();
    let ticks = every_tick_once(&file, &logs);
    assert!(ticks.len() >= 15, "{ticks:?}");
    // The ticks after the restarts ran too.
    let late: BTreeSet<String> = timed_starts(&file)
        .into_iter()
        .filter(|(tick, _, _)| *tick > end - 3000)
        .map(|(_, replica, _)| replica)
        .collect();
    assert!(!late.is_empty(), "{logs}");
    // Every drain and undrain is in the cluster's actions stream.
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("cl:{cl:pause_all}:actions")
        .arg("-")
        .arg("+")
        .query(&mut cluster.redis.client())
        .expect("XRANGE");
    let actions: Vec<(String, String)> = entries
        .into_iter()
        .map(|(_, fields)| {
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (field("action"), field("detail"))
        })
        .collect();
    let expected: Vec<(String, String)> = ["a", "b", "c"]
        .iter()
        .flat_map(|n| {
            [
                ("drain".to_string(), n.to_string()),
                ("undrain".to_string(), n.to_string()),
            ]
        })
        .collect();
    assert_eq!(actions, expected);
}

#[test]
fn a_rolling_restart_by_sigterm_alone_misses_no_tick() {
    // What `systemctl restart` does on one host after another: the stop
    // leaves the rendezvous by itself, and the new process starts in.
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("every-second", "* * * * * *", &file, "sleep 0.3", "");
    let mut index = BTreeMap::new();
    for name in ["a", "b", "c"] {
        index.insert(name, cluster.start(name, &jobs));
    }
    cluster.wait_ready();
    wait_until(Duration::from_secs(30), "3 ticks run", || {
        (starts(&file).len() >= 3).then_some(())
    });
    for name in ["a", "b", "c"] {
        let old = index[name];
        cluster.replicas[old].sigterm();
        let status = cluster.replicas[old].wait_exit(Duration::from_secs(30));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        let new = cluster.start(name, &jobs);
        index.insert(name, new);
        cluster.replicas[new].wait_for_log("ready", Duration::from_secs(20));
        std::thread::sleep(Duration::from_secs(2));
    }
    let end = now_ms() + 2000;
    wait_until(Duration::from_secs(20), "ticks after the restarts", || {
        starts(&file).iter().any(|s| s.0 > end).then_some(())
    });
    stop_running(&mut cluster);
    let ticks = every_tick_once(&file, &cluster.logs());
    assert!(ticks.len() >= 10, "{ticks:?}");
}

/// Replicas `a` and `b` of a job every second whose runs do `body`
/// (`overlap = "allow"`), once a run of `a` is in flight: the cluster, the
/// side-effect file, `b`'s config and that run's tick.
fn two_replicas_with_a_run_of_a(body: &str) -> (Cluster, PathBuf, PathBuf, i64) {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("side-effects");
    let jobs = probe_job("slow", "* * * * * *", &file, body, "overlap = \"allow\"");
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("b");
    let in_flight = wait_until(Duration::from_secs(30), "a run of a in flight", || {
        let done = ended(&file);
        timed_starts(&file)
            .into_iter()
            .find(|(tick, replica, _)| replica == "a" && !done.contains(tick))
            .map(|(tick, _, _)| tick)
    });
    (cluster, file, config, in_flight)
}

#[test]
fn a_drained_replica_claims_nothing_and_finishes_its_run() {
    // A run of `a` in flight (started, not ended).
    let (mut cluster, file, config, in_flight) = two_replicas_with_a_run_of_a("sleep 2.5");
    let run = op(&["drain", "a"], &config).expect_code(0);
    assert!(run.stdout().contains("a drained by"), "{}", run.describe());
    let state = replica_status(&config, "a");
    assert_eq!(state["drain"], "draining", "{state:#}");
    assert!(
        state["drained_by"]["by"]
            .as_str()
            .is_some_and(|by| !by.is_empty()),
        "{state:#}"
    );
    let text = op(&["status"], &config).expect_code(0).stdout();
    assert!(text.contains("draining by"), "{text}");
    let started = Instant::now();
    let waited = op(&["drain", "a", "--wait", "--timeout", "20s"], &config).expect_code(0);
    assert!(
        waited.stdout().contains("a is drained"),
        "{}",
        waited.describe()
    );
    // It waited for the run in flight, which ended.
    assert!(ended(&file).contains(&in_flight), "{}", cluster.logs());
    assert!(started.elapsed() < Duration::from_secs(20));
    let drained_at = now_ms();
    let b_lines = cluster.replicas[1].log().lines().count();
    assert_eq!(replica_status(&config, "a")["drain"], "drained");
    let text = op(&["status"], &config).expect_code(0).stdout();
    assert!(text.contains("drained by"), "{text}");
    // Drained: a starts nothing (not even a manual run), b takes every
    // tick.
    op(&["trigger", "slow"], &config).expect_code(0);
    std::thread::sleep(Duration::from_secs(6));
    // The drained replica left the ranking: b is the preferred replica of
    // every tick and claims it at once, not after waiting for a's turn
    // (`RANK_STEP`, 100 ms: about half the ticks would wait if a still
    // ranked).
    let lateness: Vec<i64> = cluster.replicas[1]
        .log()
        .lines()
        .skip(b_lines)
        .filter(|line| line.contains(" claimed ") && line.contains("trigger=\"schedule\""))
        .filter_map(|line| {
            let (_, rest) = line.split_once("lateness_ms=")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect();
    let prompt = lateness.iter().filter(|ms| **ms < 100).count();
    assert!(
        lateness.len() >= 4 && prompt * 4 >= lateness.len() * 3,
        "b waited for the drained replica's turn: claim lateness {lateness:?} ms\n{}",
        cluster.logs()
    );
    let by_a: Vec<_> = timed_starts(&file)
        .into_iter()
        .filter(|(_, replica, at)| replica == "a" && *at > drained_at)
        .collect();
    assert!(
        by_a.is_empty(),
        "a started runs while drained: {by_a:?}\n{}",
        cluster.logs()
    );
    assert!(
        timed_starts(&file)
            .iter()
            .filter(|(_, replica, at)| replica == "b" && *at > drained_at)
            .count()
            >= 3,
        "{}",
        cluster.logs()
    );
    // Undrained: a claims again.
    let run = op(&["undrain", "a"], &config).expect_code(0);
    assert!(
        run.stdout().contains("a undrained by"),
        "{}",
        run.describe()
    );
    let undrained_at = now_ms();
    wait_until(Duration::from_secs(20), "a run by a again", || {
        timed_starts(&file)
            .iter()
            .any(|(_, replica, at)| replica == "a" && *at > undrained_at)
            .then_some(())
    });
    assert!(replica_status(&config, "a").get("drain").is_none());
    // Unknown replicas are refused, naming the known ones.
    let refused = op(&["drain", "nobody"], &config).expect_code(2);
    assert!(
        refused.stderr().contains("unknown replica \"nobody\""),
        "{}",
        refused.describe()
    );
    assert!(refused.stderr().contains("a, b"), "{}", refused.describe());
    stop_running(&mut cluster);
    every_tick_once(&file, &cluster.logs());
}

#[test]
fn the_dashboard_drains_and_undrains_a_replica_for_an_operator_only() {
    use crate::dashboard::{TOKEN, TOKEN_ENV, dashboard_addr, eventually, goto, js};
    use crate::support::Browser;
    use fantoccini::Locator;

    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let file = cluster.path("side-effects");
    let jobs = probe_job("every-second", "* * * * * *", &file, "true", "");
    let daemon = format!(
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\ndashboard_token_env = \"{TOKEN_ENV}\"\n"
    );
    cluster.start_with("a", &daemon, &jobs, None);
    cluster.start_with("b", &daemon, &jobs, None);
    cluster.wait_ready();
    let config = cluster.config_path("a");
    let base = format!("http://{}", dashboard_addr(&cluster.replicas[0]));
    let state_of_b = r#"const row = document.querySelector('table.replicas tr[data-replica="b"]');
        if (!row) return null;
        return [row.querySelector('.badge.drain')?.textContent ?? '',
                row.querySelector('button.drain') ? 'drain' : (row.querySelector('button.undrain') ? 'undrain' : '')];"#;
    crate::support::runtime().block_on(async {
        let browser = Browser::start().await;
        // No session: no button, and a POST is refused.
        goto(&browser, &format!("{base}/replicas")).await;
        let buttons: usize = js(
            &browser,
            "return document.querySelectorAll('button.drain, button.undrain').length;",
        )
        .await;
        assert_eq!(buttons, 0, "drain offered without logging in");
        let forged = ureq_post(&format!("{base}/replicas/b/drain"), &[("csrf", "00ff")]);
        assert_eq!(forged, 403);
        assert!(replica_status(&config, "b").get("drain").is_none());

        goto(&browser, &format!("{base}/login?next=/replicas")).await;
        let name = browser
            .client
            .find(Locator::Id("name"))
            .await
            .expect("#name");
        name.send_keys("tester").await.expect("typing a name");
        let token = browser
            .client
            .find(Locator::Id("token"))
            .await
            .expect("#token");
        token.send_keys(TOKEN).await.expect("typing the token");
        browser
            .client
            .find(Locator::Id("login"))
            .await
            .expect("#login")
            .click()
            .await
            .expect("log in");
        eventually("the Drain button of b", async || {
            let state: Option<(String, String)> = js(&browser, state_of_b).await;
            state.filter(|(_, button)| button == "drain")
        })
        .await;
        browser
            .client
            .find(Locator::Css(r#"tr[data-replica="b"] button.drain"#))
            .await
            .expect("b's Drain button")
            .click()
            .await
            .expect("a click drains");
        eventually("b shown drained, with an Undrain button", async || {
            let state: Option<(String, String)> = js(&browser, state_of_b).await;
            state.filter(|(badge, button)| badge == "drained" && button == "undrain")
        })
        .await;
        let b = replica_status(&config, "b");
        assert_eq!(b["drain"], "drained", "{b:#}");
        assert!(
            b["drained_by"]["by"]
                .as_str()
                .is_some_and(|by| by.contains("tester")),
            "{b:#}"
        );
        browser
            .client
            .find(Locator::Css(r#"tr[data-replica="b"] button.undrain"#))
            .await
            .expect("b's Undrain button")
            .click()
            .await
            .expect("a click undrains");
        eventually("b shown in again", async || {
            let state: Option<(String, String)> = js(&browser, state_of_b).await;
            state.filter(|(badge, button)| badge.is_empty() && button == "drain")
        })
        .await;
        assert!(replica_status(&config, "b").get("drain").is_none());
    });
    stop_running(&mut cluster);
    every_tick_once(&file, &cluster.logs());
}

/// POSTs `form` to `url` without a session: the status code.
fn ureq_post(url: &str, form: &[(&str, &str)]) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into();
    agent
        .post(url)
        .send_form(form.iter().copied())
        .unwrap_or_else(|e| panic!("POST {url} failed: {e}"))
        .status()
        .as_u16()
}

#[test]
fn a_stopping_replica_leaves_the_ranking_while_its_run_finishes() {
    let (mut cluster, file, config, in_flight) = two_replicas_with_a_run_of_a("sleep 4");
    let b_lines = cluster.replicas[1].log().lines().count();
    // SIGTERM, as systemd's stop: a claims nothing more, says so in its
    // heartbeat, and finishes its run.
    cluster.replicas[0].sigterm();
    let stopped_at = now_ms();
    wait_until(Duration::from_secs(5), "a shown draining", || {
        (replica_status(&config, "a")["drain"] == "draining").then_some(())
    });
    std::thread::sleep(Duration::from_millis(2500));
    let status = cluster.replicas[0].wait_exit(Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(ended(&file).contains(&in_flight), "{}", cluster.logs());
    let by_a: Vec<_> = timed_starts(&file)
        .into_iter()
        .filter(|(_, replica, at)| replica == "a" && *at > stopped_at)
        .collect();
    assert!(by_a.is_empty(), "a started runs while stopping: {by_a:?}");
    // b took a's ticks at once, not after a's turn.
    let lateness: Vec<i64> = cluster.replicas[1]
        .log()
        .lines()
        .skip(b_lines)
        .filter(|line| line.contains(" claimed ") && line.contains("trigger=\"schedule\""))
        .filter_map(|line| {
            let (_, rest) = line.split_once("lateness_ms=")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .collect();
    let prompt = lateness.iter().filter(|ms| **ms < 100).count();
    assert!(
        lateness.len() >= 3 && prompt * 4 >= lateness.len() * 3,
        "b waited for the stopping replica's turn: claim lateness {lateness:?} ms\n{}",
        cluster.logs()
    );
    stop_running(&mut cluster);
    every_tick_once(&file, &cluster.logs());
}
