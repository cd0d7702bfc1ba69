//! A replica that is PID 1 (a container's init): the orphans of its PID
//! namespace are handed to it, and it reaps them, without taking a run's
//! exit status from the runner. The replica runs as PID 1 of a new PID
//! namespace (`unshare --pid --fork --mount-proc`, as root); its job leaves
//! processes behind each run, which outlive (or are killed after) the
//! command and so become the replica's children.

use std::time::Duration;

use crate::support::{RedisServer, Replica, read_outcomes, wait_until, write_config};

/// The zombies whose parent is `parent` (host pids), from `/proc`.
fn zombie_children(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let Some((_, after)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut fields = after.split_whitespace();
            fields.next() == Some("Z")
                && fields.next().and_then(|p| p.parse::<u32>().ok()) == Some(parent)
        })
        .collect()
}

#[test]
fn as_pid_1_the_replica_reaps_orphans_and_runs_keep_their_exit_status() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Each run leaves two processes when its shell exits with 3: one that
    // ends on its own, one the leftovers policy kills.
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"",
        "[jobs.work]\nschedule = \"* * * * * *\"\nshell = \"sleep 0.05 & sleep 30 & exit 3\"\n",
    );
    let wrapper = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        .map(String::from)
        .to_vec();
    let mut replica = Replica::start_with(&config, "a", &[], Some(wrapper));
    replica.wait_for_log(
        "running as PID 1: orphaned processes are reaped",
        Duration::from_secs(20),
    );
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), "four runs recorded", || {
        (read_outcomes(&mut conn, "cl", "work").len() >= 4).then_some(())
    });
    replica.wait_for_log("reaped an orphaned process", Duration::from_secs(10));

    // Every run's status is its command's own: the reaper took none.
    for outcome in read_outcomes(&mut conn, "cl", "work") {
        assert_eq!(
            (outcome.field("status"), outcome.field("exit_code")),
            (Some("failed"), Some("3")),
            "{outcome:?}\n{}",
            replica.log()
        );
    }
    // And no zombie stays: runs go on every second, so one may exist for
    // a moment, but not for good (without the reaper, each run's two
    // would pile up).
    let daemon = replica.pid();
    wait_until(
        Duration::from_secs(10),
        "no zombie child of the replica",
        || zombie_children(daemon).is_empty().then_some(()),
    );
    let log = replica.log();
    assert!(!log.contains("unwaitable"), "{log}");

    replica.sigterm();
    replica
        .wait_exit(Duration::from_secs(30))
        .expect("the replica stops");
}

#[test]
fn a_replica_that_is_pid_1_leaves_other_replicas_runs_alone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let host_dir = dir.path().join("host");
    let boxed_dir = dir.path().join("boxed");
    let marker = dir.path().join("long-ended");
    // The host's replica runs a long job in its runs' cgroup; the boxed
    // replica, PID 1 of its own namespace, starts while that run is in
    // flight and must not take its cgroup for a dead replica's.
    let host = write_config(
        &host_dir,
        &redis.url(),
        "replica_id = \"host\"\nmetrics_listen = \"\"\ndashboard_listen = \"\"",
        &format!(
            "[jobs.long]\nschedule = \"0 0 1 1 *\"\nshell = \"sleep 4; touch {}\"\n",
            marker.display()
        ),
    );
    let boxed = write_config(
        &boxed_dir,
        &redis.url(),
        "replica_id = \"boxed\"\nmetrics_listen = \"\"\ndashboard_listen = \"\"",
        "[jobs.other]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
    );
    let host_replica = Replica::start(&host, "host");
    host_replica.wait_for_log("ready", Duration::from_secs(20));
    crate::support::cronlease(["trigger", "long", "--config", host.to_str().unwrap()])
        .expect_code(0);
    host_replica.wait_for_log("started job=long", Duration::from_secs(20));
    let wrapper = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
        .map(String::from)
        .to_vec();
    let boxed_replica = Replica::start_with(&boxed, "boxed", &[], Some(wrapper));
    boxed_replica.wait_for_log("ready", Duration::from_secs(20));
    let mut conn = redis.client();
    let outcome = wait_until(Duration::from_secs(20), "the long run's outcome", || {
        read_outcomes(&mut conn, "cl", "long").into_iter().next()
    });
    assert_eq!(
        outcome.status(),
        "ok",
        "{outcome:?}\n{}",
        host_replica.log()
    );
    assert!(marker.exists(), "the long run was cut short");
    drop(boxed_replica);
    drop(host_replica);
}
