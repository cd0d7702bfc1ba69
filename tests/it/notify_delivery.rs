//! Notifications end to end: real replicas record outcomes, the scripts
//! write the events, and the replicas' notifiers deliver them to a real
//! HTTP receiver — once per event, signed, with the same key on every
//! attempt, again (same key) after the delivering replica is killed
//! between sending and acknowledging, and the dead man's switch and a
//! replica's death decided by the cluster.

use std::time::Duration;

use crate::support::{
    Cluster, Receiver, RedisServer, cronlease, http, python_hmac, wait_until, wait_until_or_show,
};

/// A webhook channel `hook` to `receiver`, signed with `secret_env`
/// `HOOK_SECRET`, whose attempts time out after `timeout`.
fn hook(receiver: &Receiver, timeout: &str) -> String {
    format!(
        "[notify.hook]\nkind = \"webhook\"\nurl = \"{}\"\nsecret_env = \"HOOK_SECRET\"\ntimeout = \"{timeout}\"\n",
        receiver.url("/hook")
    )
}

/// The events the receiver got, as (event, job, idempotency key).
fn received(receiver: &Receiver) -> Vec<(String, String, String)> {
    receiver
        .requests()
        .iter()
        .map(|request| {
            let body = request.json();
            (
                body["event"].as_str().unwrap_or("").to_string(),
                body["job"].as_str().unwrap_or("").to_string(),
                request.header("idempotency-key").unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn count(receiver: &Receiver, event: &str) -> usize {
    received(receiver)
        .iter()
        .filter(|(kind, _, _)| kind == event)
        .count()
}

fn cluster_with_secret() -> Cluster {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster
        .env
        .push(("HOOK_SECRET".to_string(), "s3cret".to_string()));
    cluster
}

#[test]
fn a_job_failing_every_second_is_told_once_then_recovered_once() {
    let receiver = Receiver::start(200, "ok");
    let mut cluster = cluster_with_secret();
    let flag = cluster.path("healthy");
    let jobs = format!(
        "{}[jobs.draw]\nschedule = \"* * * * * *\"\nshell = \"test -e {}\"\nnotify = [\"hook\"]\n",
        hook(&receiver, "2s"),
        flag.display()
    );
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    wait_until_or_show(
        Duration::from_secs(20),
        "five failed runs",
        || cluster.logs(),
        || {
            let failed = cluster
                .outcomes("draw")
                .iter()
                .filter(|o| o.status() == "failed")
                .count();
            (failed >= 5).then_some(())
        },
    );
    std::fs::write(&flag, "").expect("the flag");
    wait_until_or_show(
        Duration::from_secs(20),
        "recovered delivered",
        || format!("{:?}\n{}", received(&receiver), cluster.logs()),
        || (count(&receiver, "recovered") == 1).then_some(()),
    );
    // Whatever else is delivered meanwhile comes in time: give it a moment.
    std::thread::sleep(Duration::from_secs(2));
    let events = received(&receiver);
    let kinds: Vec<&str> = events.iter().map(|(kind, _, _)| kind.as_str()).collect();
    assert_eq!(kinds, ["failed", "recovered"], "{events:?}");
    assert!(events.iter().all(|(_, job, _)| job == "draw"));
    assert_ne!(events[0].2, events[1].2, "each event has its own key");
    for request in receiver.requests() {
        let signature = request
            .header("cronlease-signature")
            .expect("a signed request");
        assert_eq!(
            signature,
            format!("sha256={}", python_hmac("s3cret", &request.body))
        );
    }
    cluster.stop_all();
}

#[test]
fn a_delivery_whose_sender_is_killed_before_it_acknowledges_is_sent_again_with_the_same_key() {
    let receiver = Receiver::start(200, "ok");
    // The receiver takes the request and answers only after the sender is
    // dead: the event is sent, never acknowledged.
    receiver.hold(Duration::from_secs(4));
    let mut cluster = cluster_with_secret();
    let jobs = format!(
        "{}[jobs.draw]\nschedule = \"@yearly\"\ncommand = [\"false\"]\nnotify = [\"hook\"]\n",
        hook(&receiver, "1s"),
    );
    let a = cluster.start("a", &jobs);
    cluster.wait_ready();
    cronlease([
        "trigger",
        "draw",
        "--config",
        &cluster.config_path("a").to_string_lossy(),
    ])
    .expect_code(0);
    wait_until_or_show(
        Duration::from_secs(20),
        "the failed event sent",
        || cluster.logs(),
        || (!receiver.requests().is_empty()).then_some(()),
    );
    cluster.replicas[a].kill9();
    receiver.hold(Duration::ZERO);
    cluster.start("b", &jobs);
    wait_until_or_show(
        Duration::from_secs(30),
        "the event sent again by the other replica",
        || cluster.logs(),
        || (receiver.requests().len() >= 2).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(1));
    let events = received(&receiver);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], events[1], "the same event with the same key");
    assert_eq!(events[0].0, "failed");
    let log = cluster.replicas[1].log();
    assert!(log.contains("notification delivered"), "{log}");
}

#[test]
fn overdue_fires_once_though_every_replica_restarts_during_the_window() {
    let receiver = Receiver::start(200, "ok");
    let mut cluster = cluster_with_secret();
    let jobs = format!(
        "{}[jobs.report]\nschedule = \"@yearly\"\ncommand = [\"true\"]\nnotify = [\"hook\"]\nexpect_success_within = \"5s\"\n",
        hook(&receiver, "1s"),
    );
    let a = cluster.start("a", &jobs);
    cluster.wait_ready();
    std::thread::sleep(Duration::from_secs(2));
    cluster.replicas[a].sigterm();
    cluster.replicas[a].wait_exit(Duration::from_secs(20));
    let b = cluster.start("b", &jobs);
    cluster.replicas[b].wait_for_log("ready", Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    cluster.replicas[b].sigterm();
    cluster.replicas[b].wait_exit(Duration::from_secs(20));
    cluster.start("c", &jobs);
    cluster.start("d", &jobs);
    wait_until_or_show(
        Duration::from_secs(20),
        "overdue delivered",
        || cluster.logs(),
        || (count(&receiver, "overdue") == 1).then_some(()),
    );
    // Counted from when the first replica started watching, not from
    // the restarts: told about five seconds after the first start.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(count(&receiver, "overdue"), 1, "{:?}", received(&receiver));
    for replica in &mut cluster.replicas[2..] {
        replica.sigterm();
        replica.wait_exit(Duration::from_secs(20));
    }
}

#[test]
fn a_replica_killed_is_told_dead_once_by_the_others() {
    let receiver = Receiver::start(200, "ok");
    let mut cluster = cluster_with_secret();
    let jobs = format!(
        "{}[jobs.idle]\nschedule = \"@yearly\"\ncommand = [\"true\"]\n",
        hook(&receiver, "1s"),
    );
    let extra = "notify = [\"hook\"]\nnotify_on = [\"replica_dead\"]\n";
    let a = cluster.start_with("a", extra, &jobs, None);
    cluster.start_with("b", extra, &jobs, None);
    cluster.start_with("c", extra, &jobs, None);
    cluster.wait_ready();
    // Every replica has seen the others before one dies.
    std::thread::sleep(Duration::from_secs(2));
    cluster.replicas[a].kill9();
    wait_until_or_show(
        Duration::from_secs(30),
        "replica_dead delivered",
        || cluster.logs(),
        || (count(&receiver, "replica_dead") == 1).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(3));
    let body = receiver.requests()[0].json();
    assert_eq!(
        count(&receiver, "replica_dead"),
        1,
        "{:?}",
        received(&receiver)
    );
    assert_eq!(body["replica"], "a");
    assert!(body["job"].is_null());
    for replica in &mut cluster.replicas[1..] {
        replica.sigterm();
        replica.wait_exit(Duration::from_secs(20));
    }
}

#[test]
fn a_failing_receiver_shows_in_status_and_gets_the_event_once_it_answers() {
    let receiver = Receiver::start(503, "down for maintenance");
    let mut cluster = cluster_with_secret();
    let jobs = format!(
        "{}[jobs.draw]\nschedule = \"@yearly\"\ncommand = [\"false\"]\nnotify = [\"hook\"]\n",
        hook(&receiver, "1s"),
    );
    let listeners = "dashboard_listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n";
    let a = cluster.start_with("a", listeners, &jobs, None);
    cluster.wait_ready();
    let dashboard =
        cluster.replicas[a].logged_address("dashboard on http://", Duration::from_secs(20));
    let metrics =
        cluster.replicas[a].logged_address("metrics listening on http://", Duration::from_secs(20));
    let config = cluster.config_path("a");
    cronlease(["trigger", "draw", "--config", &config.to_string_lossy()]).expect_code(0);
    let status = wait_until(Duration::from_secs(20), "status shows the failure", || {
        let run = cronlease(["status", "--config", &config.to_string_lossy()]);
        let text = run.stdout();
        // The channel's warning line: a pid or run id may hold "503" too.
        text.lines()
            .any(|l| l.contains("notification channel \"hook\"") && l.contains("503"))
            .then_some(text)
    });
    assert!(status.contains("hook"), "{status}");
    assert!(status.contains("retrying"), "{status}");
    let page = wait_until(Duration::from_secs(20), "the dashboard shows it", || {
        let page = http::get(&dashboard, &dashboard, "/", "");
        page.body.contains("down for maintenance").then_some(page)
    });
    assert!(page.body.contains("Notification channels"), "{}", page.body);
    assert!(page.body.contains("data-channel=\"hook\""), "{}", page.body);
    let scraped = http::get(&metrics, &metrics, "/metrics", "").body;
    assert!(
        scraped
            .lines()
            .any(|line| line.starts_with("cronlease_notifications_total{")
                && line.contains("channel=\"hook\"")
                && line.contains("event=\"failed\"")
                && line.contains("result=\"retrying\"")),
        "{scraped}"
    );
    receiver.respond(200, "ok");
    wait_until_or_show(
        Duration::from_secs(30),
        "the event delivered after the backoff",
        || cluster.logs(),
        || (receiver.requests().len() >= 2).then_some(()),
    );
    let events = received(&receiver);
    assert!(
        events.windows(2).all(|w| w[0] == w[1]),
        "one event, one key: {events:?}"
    );
    let status = wait_until(Duration::from_secs(10), "status clear", || {
        let text = cronlease(["status", "--config", &config.to_string_lossy()]).stdout();
        (!text.contains("503")).then_some(text)
    });
    assert!(!status.contains("retrying"), "{status}");
    cluster.stop_all();
}

#[test]
fn an_embedded_schedulers_failing_handler_is_told_through_its_channel() {
    use cronlease::{Channel, JobBuilder, Run};

    let receiver = Receiver::start(200, "ok");
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let rt = crate::support::multi_thread_runtime();
    rt.block_on(async {
        let job = JobBuilder::new("draw", "* * * * * *")
            .notify(&["hook"])
            .run(|_run: Run| async { Err::<(), _>(std::io::Error::other("no winners drawn")) });
        let scheduler = crate::support::cluster(&redis)
            .await
            .scheduler()
            .replica_id("embedded")
            .state_dir(&dir.path().join("state"))
            .lease(Duration::from_secs(2))
            .heartbeat(Duration::from_secs(1))
            .shutdown_grace(Duration::from_secs(1))
            .channel(
                "hook",
                Channel::webhook(&receiver.url("/hook")).secret("embedded-secret"),
            )
            .job(job)
            .start()
            .expect("the job and channel are valid");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while count(&receiver, "failed") == 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // More failures follow each second; the streak is told once.
        tokio::time::sleep(Duration::from_secs(3)).await;
        scheduler.shutdown().await.expect("a clean shutdown");
    });
    let events = received(&receiver);
    assert_eq!(
        events
            .iter()
            .map(|(kind, _, _)| kind.as_str())
            .collect::<Vec<_>>(),
        ["failed"],
        "{events:?}"
    );
    let request = &receiver.requests()[0];
    assert_eq!(
        request.header("cronlease-signature"),
        Some(format!("sha256={}", python_hmac("embedded-secret", &request.body)).as_str())
    );
    assert!(
        request.json()["output_tail"]
            .as_str()
            .is_some_and(|tail| tail.contains("no winners drawn")),
        "{}",
        request.json()
    );
}
