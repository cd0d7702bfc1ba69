//! The spool under stress: a spooled file cut short (power loss mid-write)
//! is quarantined while the rest is delivered; a full disk keeps outcomes
//! in memory, retried until Redis takes them, counted in a metric.

use std::time::Duration;

use crate::support::{RedisServer, Replica, ok_outcome, read_outcomes, wait_until, write_config};

/// A run in flight nearly all the time, so one is when Redis goes away.
const JOB: &str = "[jobs.work]\nschedule = \"* * * * * *\"\ncommand = [\"sleep\", \"0.9\"]\n";

#[test]
fn a_corrupt_spooled_file_is_quarantined_and_the_rest_delivered() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"",
        JOB,
    );
    let spool = dir.path().join("state/spool");
    std::fs::create_dir_all(&spool).unwrap();
    // Cut short mid-write, and one whole outcome behind it.
    std::fs::write(
        spool.join("aaa-cut.json"),
        br#"{"job":"work","tick_ms":17000,"fen"#,
    )
    .unwrap();
    let good = ok_outcome("work", "spooled-run-1", 1_000, 1, "cl:{work}:lease".into());
    std::fs::write(
        spool.join("bbb-good.json"),
        serde_json::to_vec(&good).unwrap(),
    )
    .unwrap();

    let replica = Replica::start(&config, "a");
    replica.wait_for_log("moved to the spool's quarantine", Duration::from_secs(30));
    let mut conn = redis.client();
    wait_until(
        Duration::from_secs(30),
        "the good spooled outcome delivered",
        || {
            read_outcomes(&mut conn, "cl", "work")
                .iter()
                .any(|o| o.field("run_id") == Some("spooled-run-1"))
                .then_some(())
        },
    );
    assert!(
        spool.join("quarantine/aaa-cut.json").exists(),
        "the cut file is kept for an operator"
    );
    wait_until(Duration::from_secs(10), "the spool emptied", || {
        (!spool.join("bbb-good.json").exists()).then_some(())
    });
    let log = replica.log();
    assert_eq!(
        log.matches("moved to the spool's quarantine").count(),
        1,
        "named once:\n{log}"
    );
}

/// `metrics_listen` on a free port: the address the replica logs.
fn metrics_addr(replica: &Replica) -> String {
    replica.logged_address("metrics listening on http://", Duration::from_secs(20))
}

/// The value of a metric without labels on `addr`'s `/metrics`.
fn gauge(addr: &str, name: &str) -> Option<f64> {
    let body = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    body.lines()
        .find(|l| l.starts_with(&format!("{name} ")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn a_full_disk_keeps_outcomes_in_memory_until_redis_takes_them() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"127.0.0.1:0\"\ndashboard_listen = \"\"\nreplica_id = \"a\"",
        JOB,
    );
    // The spool is a 16 KB tmpfs, full before the replica starts, mounted
    // in a mount namespace of the replica's own (unprivileged through a
    // user namespace): every spool write fails with ENOSPC.
    let spool = dir.path().join("state/spool");
    std::fs::create_dir_all(&spool).unwrap();
    let script = format!(
        "mount -t tmpfs -o size=16k tmpfs {spool} && (head -c 1000000 /dev/zero > {spool}/fill 2>/dev/null; true) && exec \"$@\"",
        spool = spool.display()
    );
    let wrapper = ["unshare", "-Urm", "sh", "-c", &script, "sh"]
        .map(String::from)
        .to_vec();
    let mut replica = Replica::start_with(&config, "a", &[], Some(wrapper));
    let addr = metrics_addr(&replica);
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), "first runs", || {
        (read_outcomes(&mut conn, "cl", "work").len() >= 2).then_some(())
    });

    // Redis stops answering for 6 s while a run is in flight: it ends (or
    // loses its lease) with nowhere to write its outcome.
    wait_until(Duration::from_secs(10), "a run in flight", || {
        let n: i64 = redis::cmd("HLEN")
            .arg("cl:{work}:running")
            .query(&mut conn)
            .unwrap();
        (n > 0).then_some(())
    });
    redis.pause_clients(6_000);
    let held = wait_until(Duration::from_secs(6), "outcomes held in memory", || {
        gauge(&addr, "cronlease_unspooled_outcomes").filter(|n| *n >= 1.0)
    });
    replica.wait_for_log("CANNOT SPOOL THE OUTCOME", Duration::from_secs(10));
    replica.wait_for_log("outcome held in memory delivered", Duration::from_secs(30));
    wait_until(Duration::from_secs(15), "nothing held any more", || {
        (gauge(&addr, "cronlease_unspooled_outcomes") == Some(0.0)).then_some(())
    });

    // Stopped cleanly, every run the replica started has its outcome.
    replica.sigterm();
    replica
        .wait_exit(Duration::from_secs(30))
        .expect("the replica stops");
    let log = replica.log();
    let started: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("runner: started") && l.contains("job=work"))
        .filter_map(|l| l.split("run_id=").nth(1)?.split_whitespace().next())
        .collect();
    let recorded: Vec<String> = read_outcomes(&mut conn, "cl", "work")
        .iter()
        .filter_map(|o| o.field("run_id").map(str::to_string))
        .collect();
    let lost: Vec<&&str> = started
        .iter()
        .filter(|id| !recorded.iter().any(|r| r == **id))
        .collect();
    eprintln!(
        "{held} outcomes held in memory at most; {} runs started, {} recorded",
        started.len(),
        recorded.len()
    );
    assert!(lost.is_empty(), "outcomes lost: {lost:?}\n{log}");
    assert!(!log.contains("OUTCOME LOST"), "{log}");
}
