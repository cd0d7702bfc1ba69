//! Hostile or corrupt data in Redis (another writer, a bug, a partial
//! restore), written with `redis-cli` as an operator's mistake would be:
//! no command and no live replica panics; each bad record is named and
//! left out, and everything else keeps working.

use std::process::Command;
use std::time::Duration;

use crate::support::{RedisServer, Replica, cronlease, read_outcomes, wait_until, write_config};

const JOBS: &str = "\
[jobs.good]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\
[jobs.victim]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\
[jobs.stuck]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\
[jobs.quiet]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n";

/// Runs `redis-cli -p PORT ARGS…` and fails the test if it does.
fn redis_cli(redis: &RedisServer, args: &[&str]) {
    let output = Command::new("redis-cli")
        .arg("-p")
        .arg(redis.port().to_string())
        .args(args)
        .output()
        .expect("redis-cli runs");
    assert!(
        output.status.success() && !String::from_utf8_lossy(&output.stdout).starts_with("ERR"),
        "redis-cli {args:?}: {output:?}"
    );
}

/// Every kind of garbage the issue names, in every structure a replica or
/// an operator command reads.
fn write_garbage(redis: &RedisServer) {
    let garbage: &[&[&str]] = &[
        // `running`: an entry that is not JSON, one with the wrong types.
        &["HSET", "cl:{victim}:running", "bogus-run", "not json {"],
        &[
            "HSET",
            "cl:{victim}:running",
            "typed-run",
            r#"{"tick":"x","fence":-5,"expires":"soon"}"#,
        ],
        // The state hash of a job that fires: a high-water mark that is not
        // a number. Which ticks ran is unknown: the job must claim nothing.
        &["HSET", "cl:{stuck}:state", "last_tick", "not-a-tick"],
        // The state hash: numbers that are not, a status that is not ours.
        &[
            "HSET",
            "cl:{quiet}:state",
            "last_tick",
            "abc",
            "fence",
            "xyz",
            "paused",
            "maybe",
        ],
        &[
            "HSET",
            "cl:{quiet}:state",
            "outcome_status",
            "weird",
            "missed_total",
            "lots",
        ],
        // The heartbeat hash: a replica whose record is not JSON.
        &["HSET", "cl:replicas", "ghost", "not json"],
        &[
            "HSET",
            "cl:replicas",
            "typed-ghost",
            r#"{"host":5,"runs":"none"}"#,
        ],
        // The outcome stream: entries cronlease did not write.
        &[
            "XADD",
            "cl:{quiet}:runs",
            "*",
            "status",
            "bogus",
            "tick",
            "nope",
        ],
        &["XADD", "cl:{quiet}:runs", "*", "garbage", "1"],
        &[
            "XADD",
            "cl:{victim}:runs",
            "*",
            "status",
            "ok",
            "tick",
            "x",
            "fence",
            "y",
        ],
        // The triggers stream: a request without fields, one for no job.
        &["XADD", "cl:triggers", "*", "foo", "bar"],
        &[
            "XADD",
            "cl:triggers",
            "*",
            "job",
            "no-such-job",
            "run_id",
            "r",
            "requested_by",
            "x",
        ],
        // A lock whose lease has no holder record.
        &["SET", "cl:{lock:weird}:lease", "someone", "PX", "600000"],
        // The actions stream.
        &["XADD", "cl:{quiet}:actions", "*", "nonsense", "1"],
    ];
    for args in garbage {
        redis_cli(redis, args);
    }
}

#[test]
fn garbage_in_redis_is_named_and_skipped_by_every_command_and_a_live_replica() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"",
        JOBS,
    );
    let config_arg = config.to_string_lossy().to_string();
    let replica = Replica::start(&config, "a");
    let mut conn = redis.client();
    let count = |conn: &mut redis::Connection, job: &str| {
        read_outcomes(conn, "cl", job)
            .iter()
            .filter(|o| o.status() == "ok")
            .count()
    };
    wait_until(Duration::from_secs(30), "first outcomes", || {
        (count(&mut conn, "good") > 0 && count(&mut conn, "victim") > 0).then_some(())
    });

    write_garbage(&redis);

    // The live replica goes on running its jobs (its heartbeat, trigger
    // consumer and sweeps read the garbage meanwhile).
    let before = count(&mut conn, "good");
    wait_until(
        Duration::from_secs(30),
        "more runs of good after the garbage",
        || (count(&mut conn, "good") >= before + 3).then_some(()),
    );
    let victim_before = count(&mut conn, "victim");
    wait_until(
        Duration::from_secs(30),
        "more runs of victim after the garbage",
        || (count(&mut conn, "victim") >= victim_before + 3).then_some(()),
    );

    // The unreadable runs in flight were moved to the quarantine hash.
    wait_until(
        Duration::from_secs(30),
        "victim's garbage quarantined",
        || {
            let quarantined: Vec<String> = redis::cmd("HKEYS")
                .arg("cl:{victim}:quarantine")
                .query(&mut conn)
                .unwrap();
            (quarantined.len() == 2).then_some(())
        },
    );
    let running: Vec<String> = redis::cmd("HKEYS")
        .arg("cl:{victim}:running")
        .query(&mut conn)
        .unwrap();
    assert!(!running.iter().any(|r| r.contains("-run")), "{running:?}");
    replica.wait_for_log("moved to its quarantine hash", Duration::from_secs(10));

    // The job with a corrupt high-water mark claims nothing, and says why.
    replica.wait_for_log(
        "holds a last_tick cronlease did not write",
        Duration::from_secs(10),
    );
    let stuck = count(&mut conn, "stuck");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        count(&mut conn, "stuck"),
        stuck,
        "a job whose state is unknown claimed a tick"
    );
    // Repaired as the log says: the replica re-seeds the mark and goes on,
    // with no tick run twice.
    redis_cli(&redis, &["HDEL", "cl:{stuck}:state", "last_tick"]);
    wait_until(
        Duration::from_secs(30),
        "stuck runs again after the repair",
        || (count(&mut conn, "stuck") >= stuck + 2).then_some(()),
    );
    let ticks: Vec<i64> = read_outcomes(&mut conn, "cl", "stuck")
        .iter()
        .filter(|o| o.status() == "ok")
        .map(|o| o.tick())
        .collect();
    let mut unique = ticks.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        ticks.len(),
        "a tick of stuck ran twice: {ticks:?}"
    );

    // Every operator command works and names what it left out.
    let status = cronlease(["status", "--config", &config_arg]).expect_code(0);
    assert!(status.stdout().contains("good"), "{}", status.describe());
    assert!(
        status.stderr().contains("ghost"),
        "the bad heartbeat is named: {}",
        status.describe()
    );
    let json = cronlease([
        "status",
        "--json",
        "--config",
        &config_arg,
        "--lock",
        "weird",
    ])
    .expect_code(0);
    let report: serde_json::Value =
        serde_json::from_str(&json.stdout()).expect("status --json is JSON");
    assert!(
        report["jobs"].as_array().is_some_and(|j| j.len() == 4),
        "{}",
        json.describe()
    );
    for job in ["victim", "quiet"] {
        let history = cronlease(["history", job, "--config", &config_arg]).expect_code(0);
        assert!(
            history.stderr().contains("unreadable"),
            "{}",
            history.describe()
        );
    }
    cronlease([
        "trigger",
        "good",
        "--wait",
        "--timeout",
        "30s",
        "--config",
        &config_arg,
    ])
    .expect_code(0);
    cronlease(["pause", "quiet", "--config", &config_arg]).expect_code(0);
    cronlease(["resume", "quiet", "--config", &config_arg]).expect_code(0);

    // A replica started after the garbage starts and claims too.
    let dir_b = tempfile::tempdir().unwrap();
    let config_b = write_config(
        dir_b.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"\nreplica_id = \"b\"",
        JOBS,
    );
    let b = Replica::start(&config_b, "b");
    b.wait_for_log("ready", Duration::from_secs(30));
    let before = count(&mut conn, "good");
    wait_until(
        Duration::from_secs(30),
        "runs go on with two replicas",
        || (count(&mut conn, "good") >= before + 3).then_some(()),
    );

    for r in [&replica, &b] {
        let log = r.log();
        assert!(!log.contains("panicked"), "{} panicked:\n{log}", r.name());
    }
}
