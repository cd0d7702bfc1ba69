//! Hostile or corrupt data in Redis (another writer, a bug, a partial
//! restore), written with `redis-cli` as an operator's mistake would be:
//! no command and no live replica panics; each bad record is named and
//! left out, and everything else keeps working.
//!
//! And hostile clients of a replica's HTTP servers (the dashboard,
//! `/metrics`) on the same host: a flood of idle connections under the
//! usual file limit of 1,024, a slowloris client, a huge body, a rebound
//! `Host`. Runs go on starting at every tick, and every such client is
//! refused or cut off.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    self, Cluster, RedisServer, Replica, cronlease, http, probe_job, read_outcomes, starts,
    wait_until, write_config,
};

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

/// Every kind of garbage a forger could write, in every structure a replica or
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
        "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"",
        JOBS,
    );
    let config_arg = config.to_string_lossy().to_string();
    let replica = Replica::start(&config, "a");
    let dashboard = replica.logged_address("dashboard on http://", Duration::from_secs(30));
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

    // The dashboard shows every page over the garbage, the job whose runs
    // in flight were quarantined as needing repair.
    for path in [
        "/",
        "/replicas",
        "/jobs/good",
        "/jobs/victim",
        "/jobs/quiet",
        "/jobs/stuck",
    ] {
        let page = crate::support::http::get(&dashboard, &dashboard, path, "");
        assert_eq!(page.status, 200, "{path}: {page:?}");
        if path == "/jobs/victim" {
            assert!(
                page.body.contains("needs repair (running)"),
                "{}",
                page.body
            );
        }
    }

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

/// The HTTP servers' settings of the tests below: both on free ports.
const HTTP: &str = "metrics_listen = \"127.0.0.1:0\"\ndashboard_listen = \"127.0.0.1:0\"\n";

/// The addresses a replica logs for its dashboard and `/metrics`.
fn http_addrs(replica: &Replica) -> (String, String) {
    let patience = Duration::from_secs(30);
    (
        replica.logged_address("dashboard on http://", patience),
        replica.logged_address("metrics listening on http://", patience),
    )
}

/// Raises this test process's own soft limit on open files to its hard
/// limit: the flood below needs a descriptor per connection here too.
fn raise_own_file_limit(needed: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("the open-files limit");
    if soft < needed {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).expect("raising the open-files limit");
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).expect("the open-files limit");
    assert!(
        soft >= needed,
        "this test needs {needed} open files; the hard limit is {soft}"
    );
}

#[test]
fn idle_connections_under_a_file_limit_of_1024_leave_every_run_started_and_the_replica_answering() {
    const FLOOD: usize = 1_100;
    raise_own_file_limit(3 * FLOOD as u64);
    let mut cluster = Cluster::new(RedisServer::start());
    let probe = cluster.path("probe");
    let jobs = probe_job("every-second", "* * * * * *", &probe, "true", "");
    // Soft and hard limit 1,024: the replica cannot raise it, so its HTTP
    // servers must keep their connections well below it.
    let wrapper = ["prlimit", "--nofile=1024:1024", "--"]
        .map(String::from)
        .to_vec();
    cluster.start_with("a", HTTP, &jobs, Some(wrapper));
    cluster.wait_ready();
    let replica = &cluster.replicas[0];
    let (dashboard, metrics) = http_addrs(replica);
    wait_until(Duration::from_secs(30), "a first run", || {
        (!starts(&probe).is_empty()).then_some(())
    });

    // 1,100 idle connections to each server, held open by this test.
    let mut flood = Vec::with_capacity(2 * FLOOD);
    for addr in [&dashboard, &metrics] {
        for _ in 0..FLOOD {
            flood.push(
                TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting to {addr}: {e}")),
            );
        }
    }
    let flooded_at = support::now_ms();
    // Meanwhile every tick's run starts: eight in a row, with no gap.
    let ticks = wait_until(
        Duration::from_secs(60),
        "eight runs started during the flood",
        || {
            let ticks: Vec<i64> = starts(&probe)
                .into_iter()
                .map(|(tick, _, _)| tick)
                .filter(|tick| *tick > flooded_at)
                .collect();
            (ticks.len() >= 8).then_some(ticks)
        },
    );
    for pair in ticks.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1_000,
            "a tick without a run during the flood: {ticks:?}\n{}",
            replica.log()
        );
    }
    // The servers' idle deadlines close the idle connections they took (and
    // the ones beyond their limit were closed at once): every connection of
    // the flood ends, seen from this side as the end of the stream.
    for stream in &flood {
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("a read timeout");
    }
    for (i, stream) in flood.iter_mut().enumerate() {
        let mut buf = [0u8; 512];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                // The 503 written to a connection beyond the limit.
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => panic!("connection {i} of the flood was not closed by the replica: {e}"),
            }
        }
    }
    // The replica answers on both servers, still holding our sockets.
    let health = http::get(&metrics, "127.0.0.1", "/healthz", "");
    assert_eq!(health.status, 200, "{health:?}");
    let overview = http::get(&dashboard, "127.0.0.1", "/", "");
    assert_eq!(overview.status, 200, "{overview:?}");
    let log = replica.log();
    assert!(
        log.contains("too many connections: refused"),
        "the refusals are logged:\n{log}"
    );
    assert!(!log.contains("Too many open files"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    drop(flood);
}

#[test]
fn slowloris_huge_bodies_and_rebound_hosts_are_refused() {
    let mut cluster = Cluster::new(RedisServer::start());
    let probe = cluster.path("probe");
    let jobs = probe_job("every-second", "* * * * * *", &probe, "true", "");
    cluster.start_with("a", HTTP, &jobs, None);
    cluster.wait_ready();
    let replica = &cluster.replicas[0];
    let (dashboard, metrics) = http_addrs(replica);

    // A slowloris client: a header byte a second. The dashboard closes the
    // connection at its header deadline (10 s), long before the 40 bytes
    // this client would send.
    let mut slow = http::connect(&dashboard);
    slow.set_read_timeout(Some(Duration::from_millis(1_000)))
        .expect("a read timeout");
    slow.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("the request line");
    let started = Instant::now();
    let mut sent = 0;
    let cut_off = loop {
        if sent == 40 {
            break false;
        }
        if slow.write_all(b"X").is_err() {
            break true;
        }
        sent += 1;
        let mut buf = [0u8; 256];
        match slow.read(&mut buf) {
            // Closed (or answered, which only happens on a timeout: hyper
            // writes nothing else before the headers are complete).
            Ok(_) => break true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break true,
        }
    };
    assert!(
        cut_off,
        "a client sending a header byte a second was not cut off after {sent} bytes ({:?})",
        started.elapsed()
    );

    // 100 MB announced: 413 before a byte of the body is sent, and the
    // connection closed, so the body cannot be sent either.
    for (addr, path) in [(&dashboard, "/login"), (&metrics, "/metrics")] {
        let mut stream = http::connect(addr);
        stream
            .write_all(
                format!(
                    "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: 104857600\r\n\r\n"
                )
                .as_bytes(),
            )
            .expect("the head");
        let answer = http::read_answer(&mut stream);
        assert_eq!(answer.status, 413, "{path}: {answer:?}");
        let chunk = vec![b'a'; 1 << 20];
        let mut written = 0usize;
        while written < 104_857_600 {
            match stream.write(&chunk) {
                Ok(n) => written += n,
                Err(_) => break,
            }
        }
        assert!(
            written < 104_857_600,
            "{path}: the whole 100 MB body was taken"
        );
    }
    // A body sent without a length (chunked) is cut at the limit too.
    let mut stream = http::connect(&dashboard);
    stream
        .write_all(b"POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n")
        .expect("the head");
    let chunk = format!("10000\r\n{}\r\n", "a".repeat(0x10000));
    for _ in 0..2 {
        if stream.write_all(chunk.as_bytes()).is_err() {
            break;
        }
    }
    let answer = http::read_answer(&mut stream);
    assert_eq!(answer.status, 413, "{answer:?}");

    // A name rebound to this host: 400 on both servers; the servers' own
    // names are answered.
    for addr in [&dashboard, &metrics] {
        let port = addr.rsplit(':').next().expect("a port");
        for host in [format!("evil.example:{port}"), "evil.example".to_string()] {
            let answer = http::get(addr, &host, "/healthz", "");
            assert_eq!(answer.status, 400, "Host {host} on {addr}: {answer:?}");
        }
        let answer = http::get(addr, "localhost", "/", "");
        assert_ne!(answer.status, 400, "Host localhost on {addr}: {answer:?}");
    }
    let answer = http::get(&metrics, &metrics, "/healthz", "");
    assert_eq!(answer.status, 200, "{answer:?}");
    let answer = http::get(&dashboard, "[::1]", "/", "");
    assert_eq!(answer.status, 200, "{answer:?}");

    // None of it kept a run from starting.
    let ticks: Vec<i64> = starts(&probe)
        .into_iter()
        .map(|(tick, _, _)| tick)
        .collect();
    assert!(ticks.len() >= 5, "{ticks:?}");
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "a tick without a run: {ticks:?}");
    }
}
