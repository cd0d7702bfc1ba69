//! Observability: `/metrics` counters move, `/healthz` follows Redis, and a
//! tick nobody claimed is recorded as missed exactly once.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::support::{Cluster, RedisServer, Replica, cronlease, wait_until};

/// `metrics_listen` on a free port; the replica logs where.
const METRICS: &str = "metrics_listen = \"127.0.0.1:0\"";

/// The address a replica's log says it serves metrics on.
fn metrics_addr(replica: &Replica) -> String {
    replica.logged_address("metrics listening on http://", Duration::from_secs(20))
}

/// GET `path` from `addr`: (status code, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream =
        TcpStream::connect(addr).unwrap_or_else(|e| panic!("cannot connect to {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

/// The value of the sample of `name` whose labels include every `label`.
fn sample(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn counters_move_for_every_kind_of_outcome() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = "[jobs.good]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n\
                [jobs.bad]\nschedule = \"* * * * * *\"\ncommand = [\"false\"]\n\
                [jobs.slow]\nschedule = \"* * * * * *\"\ncommand = [\"sleep\", \"5\"]\ntimeout = \"300ms\"\n\
                [jobs.held]\nschedule = \"* * * * * *\"\ncommand = [\"sleep\", \"30\"]\n";
    cluster.start_with("a", METRICS, jobs, None);
    cluster.wait_ready();
    let addr = metrics_addr(&cluster.replicas[0]);
    // Take the lease away from the long run: its next renewal fails.
    wait_until(Duration::from_secs(10), "the long run's lease", || {
        let lease: Option<String> = redis::cmd("GET")
            .arg("cl:{held}:lease")
            .query(&mut cluster.redis.client())
            .unwrap();
        lease
    });
    let _: () = redis::cmd("DEL")
        .arg("cl:{held}:lease")
        .query(&mut cluster.redis.client())
        .unwrap();
    let metrics = wait_until(Duration::from_secs(20), "every counter to move", || {
        let (status, body) = get(&addr, "/metrics");
        let moved = status == 200
            && sample(
                &body,
                "cronlease_runs_total",
                &["job=\"good\"", "status=\"ok\""],
            ) >= 1.0
            && sample(
                &body,
                "cronlease_runs_total",
                &["job=\"bad\"", "status=\"failed\""],
            ) >= 1.0
            && sample(
                &body,
                "cronlease_runs_total",
                &["job=\"slow\"", "status=\"timeout\""],
            ) >= 1.0
            && sample(
                &body,
                "cronlease_runs_total",
                &["job=\"held\"", "status=\"lost_lease\""],
            ) >= 1.0
            && sample(&body, "cronlease_lost_leases_total", &["job=\"held\""]) >= 1.0;
        moved.then_some(body)
    });
    for (name, labels) in [
        (
            "cronlease_claims_total",
            vec!["job=\"good\"", "result=\"claimed\""],
        ),
        (
            "cronlease_tick_lateness_seconds_count",
            vec!["job=\"good\""],
        ),
        ("cronlease_run_duration_seconds_count", vec!["job=\"good\""]),
        (
            "cronlease_last_success_timestamp_seconds",
            vec!["job=\"good\""],
        ),
        ("cronlease_lease_renewals_total", vec!["result=\"lost\""]),
        ("cronlease_build_info", vec!["version=\""]),
    ] {
        assert!(
            sample(&metrics, name, &labels) > 0.0,
            "{name} {labels:?} not above 0:\n{metrics}"
        );
    }
    assert!(metrics.contains("cronlease_leases_held"), "{metrics}");
    assert!(
        metrics.contains("# TYPE cronlease_tick_lateness_seconds histogram"),
        "{metrics}"
    );
    promtool_accepts(&metrics);
    cluster.stop_all();
}

/// `promtool check metrics` (Debian's prometheus package, which
/// `scripts/check-alerts` installs when it can) reads `page` without a
/// problem: the format and Prometheus' naming rules. Without promtool,
/// says so and checks nothing.
fn promtool_accepts(page: &str) {
    let child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            eprintln!("promtool unavailable ({e}): the page's format is not checked");
            return;
        }
    };
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(page.as_bytes())
        .expect("promtool reads its standard input");
    let output = child.wait_with_output().expect("promtool runs");
    assert!(
        output.status.success(),
        "promtool check metrics: {}\n{}{}\n{page}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
}

#[test]
fn healthz_follows_redis() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.start_with(
        "a",
        METRICS,
        "[jobs.j]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n",
        None,
    );
    cluster.wait_ready();
    let addr = metrics_addr(&cluster.replicas[0]);
    wait_until(Duration::from_secs(10), "healthz 200", || {
        (get(&addr, "/healthz").0 == 200).then_some(())
    });
    cluster.redis.stop();
    let body = wait_until(
        Duration::from_secs(15),
        "healthz 503 while Redis is down",
        || {
            let (status, body) = get(&addr, "/healthz");
            (status == 503).then_some(body)
        },
    );
    assert!(body.contains("redis unreachable"), "{body}");
    cluster.redis.restart();
    wait_until(Duration::from_secs(20), "healthz 200 again", || {
        (get(&addr, "/healthz").0 == 200).then_some(())
    });
    cluster.stop_all();
}

#[test]
fn a_tick_missed_by_every_replica_is_recorded_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs =
        "[jobs.beat]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\nmisfire = \"skip\"\n";
    cluster.start_with("a", METRICS, jobs, None);
    cluster.start_with("b", METRICS, jobs, None);
    cluster.wait_ready();
    let addrs: Vec<String> = cluster.replicas.iter().map(metrics_addr).collect();
    wait_until(Duration::from_secs(15), "a few runs", || {
        (cluster.outcomes("beat").len() >= 3).then_some(())
    });
    for replica in &cluster.replicas {
        replica.sigstop();
    }
    std::thread::sleep(Duration::from_millis(3500));
    for replica in &cluster.replicas {
        replica.sigcont();
    }
    wait_until(Duration::from_secs(15), "missed ticks recorded", || {
        cluster
            .outcomes("beat")
            .iter()
            .any(|o| o.status() == "missed")
            .then_some(())
    });
    // Let any second recording (there must be none) happen.
    std::thread::sleep(Duration::from_secs(3));
    let config = cluster.config_path("a");
    let status = cronlease([
        "status".as_ref(),
        "--json".as_ref(),
        "--config".as_ref(),
        config.as_os_str(),
    ])
    .expect_code(0);
    let metrics_missed: f64 = addrs
        .iter()
        .map(|addr| {
            sample(
                &get(addr, "/metrics").1,
                "cronlease_missed_ticks_total",
                &["job=\"beat\""],
            )
        })
        .sum();
    cluster.stop_all();

    let logs = cluster.logs();
    let outcomes = cluster.outcomes("beat");
    let missed: Vec<i64> = outcomes
        .iter()
        .filter(|o| o.status() == "missed")
        .map(|o| o.tick())
        .collect();
    let unique: BTreeSet<i64> = missed.iter().copied().collect();
    assert_eq!(
        unique.len(),
        missed.len(),
        "a tick recorded missed twice: {missed:?}\n{logs}"
    );
    assert!(
        missed.len() >= 2,
        "a 3.5 s pause misses at least 2 ticks: {missed:?}\n{logs}"
    );
    let ran: BTreeSet<i64> = outcomes
        .iter()
        .filter(|o| o.status() == "ok")
        .map(|o| o.tick())
        .collect();
    assert!(
        unique.is_disjoint(&ran),
        "a tick both ran and was missed\n{outcomes:#?}"
    );
    assert_eq!(
        metrics_missed as usize,
        missed.len(),
        "the counters disagree with the stream"
    );
    let json: serde_json::Value = serde_json::from_str(&status.stdout()).unwrap();
    assert_eq!(
        json["jobs"][0]["missed_ticks"],
        missed.len(),
        "{}",
        status.stdout()
    );
}

/// Two replicas started together with a 30 s heartbeat: the first to beat
/// finds no other record, and counted itself alone until its next beat, 30
/// s later, claiming every tick in a race with the other. Its first beats
/// now come within seconds of one another, so both count two replicas
/// within ~2 s and the race ends: claims answered `taken` stop growing.
#[test]
fn replicas_started_together_learn_of_each_other_within_seconds() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs: String = (0..20)
        .map(|i| format!("[jobs.j{i}]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n"))
        .collect();
    let daemon = format!("{METRICS}\nheartbeat = \"30s\"\n");
    cluster.start_with("a", &daemon, &jobs, None);
    cluster.start_with("b", &daemon, &jobs, None);
    cluster.wait_ready();
    let addrs: Vec<String> = cluster.replicas.iter().map(metrics_addr).collect();
    let taken = || -> f64 {
        addrs
            .iter()
            .map(|addr| {
                sample(
                    &get(addr, "/metrics").1,
                    "cronlease_claims_total",
                    &["result=\"taken\""],
                )
            })
            .sum()
    };
    std::thread::sleep(Duration::from_secs(4));
    let before = taken();
    std::thread::sleep(Duration::from_secs(5));
    let after = taken();
    let logs = cluster.logs();
    cluster.stop_all();
    // 20 jobs a second for 5 s: a race on half of them would be ~50.
    assert!(
        after - before <= 3.0,
        "claims answered `taken` went from {before} to {after} in 5 s:\n{logs}"
    );
}
