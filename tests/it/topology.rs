//! Redis deployed other ways than one plain server — Sentinel with a
//! failover, Redis Cluster, a quorum of independent servers, TLS with a
//! private CA, an ACL user limited to the key prefix, a replica whose
//! acknowledgement gates each claim — each with two replicas running
//! every-second probe jobs, checked through the jobs' side effects.
//!
//! The `support_*` tests check the helpers that build these deployments,
//! without the daemon.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::support::{
    ClientCert, Cluster, RedisClusterSetup, RedisServer, Replica, Run, SentinelSetup, TlsFiles,
    Topology, cronlease_with_env, now_ms, probe_job, read_outcomes, start_times, starts,
    toml_string, wait_until, write_config_section,
};

/// Every second, on the second.
const EVERY_SECOND: &str = "* * * * * *";

/// The ACL password of the `acl_user_limited_to_the_key_prefix` test.
const PASSWORD: &str = "S3cret-pw";

/// The variable that hands [`PASSWORD`] to the replicas.
const PASSWORD_ENV: &str = "CRONLEASE_TEST_REDIS_PASSWORD";

/// How many ticks after `after_ms` (ms since the epoch) the probe file
/// shows started.
fn ticks_after(file: &Path, after_ms: i64) -> usize {
    starts(file).iter().filter(|s| s.0 > after_ms).count()
}

/// Waits until the probe file shows `count` ticks after `after_ms`.
#[track_caller]
fn wait_for_ticks(file: &Path, count: usize, after_ms: i64, timeout: Duration) {
    wait_until(
        timeout,
        &format!("{count} ticks after {after_ms} in {}", file.display()),
        || (ticks_after(file, after_ms) >= count).then_some(()),
    );
}

/// Asserts that no tick in the probe file ran twice; returns the ticks.
#[track_caller]
fn ticks_ran_once(file: &Path, logs: &str) -> BTreeSet<i64> {
    let side = starts(file);
    let unique: BTreeSet<i64> = side.iter().map(|s| s.0).collect();
    assert_eq!(
        unique.len(),
        side.len(),
        "a tick of {} ran twice: {side:?}\n{logs}",
        file.display()
    );
    unique
}

/// `cronlease status --config CONFIG` with `env`, which must exit 0.
#[track_caller]
fn status_of(config: &Path, env: &[(&str, &str)]) -> Run {
    cronlease_with_env(
        [
            OsStr::new("status"),
            OsStr::new("--config"),
            config.as_os_str(),
        ],
        env,
    )
    .expect_code(0)
}

/// A cluster on `topology` with every-second probe job `beat` and
/// replicas `a` and `b` started and ready; returns the probe file.
fn two_replicas<R: Topology>(cluster: &mut Cluster<R>) -> std::path::PathBuf {
    let file = cluster.path("side-effects");
    let jobs = probe_job("beat", EVERY_SECOND, &file, "true", "");
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    file
}

// -------------------------------------------------------------- helpers

/// `redis-cli --tls --cacert CA [--cert … --key …] -p PORT PING`.
fn tls_ping(port: u16, ca: &Path, client: Option<(&Path, &Path)>) -> Output {
    let mut command = Command::new("redis-cli");
    command.arg("--tls").arg("--cacert").arg(ca);
    if let Some((cert, key)) = client {
        command.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    command
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "PING"])
        .output()
        .expect("cannot run redis-cli (scripts/install-deps installs it)")
}

fn answered_pong(output: &Output) -> bool {
    String::from_utf8_lossy(&output.stdout).trim() == "PONG"
}

#[test]
fn support_tls_server_answers_on_both_ports_and_checks_certificates() {
    let tls = TlsFiles::generate();
    let mut strict = RedisServer::start_tls(&tls, ClientCert::Required);
    assert_eq!(
        strict.tls_url(),
        format!("rediss://127.0.0.1:{}/0", strict.tls_port())
    );
    assert_ne!(strict.tls_port(), strict.port());
    let port = strict.tls_port();
    let client = Some((tls.client_cert(), tls.client_key()));
    let client = client.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));

    let ok = tls_ping(port, &tls.ca(), client);
    assert!(answered_pong(&ok), "{ok:?}\n{}", strict.log_tail(20));
    let no_cert = tls_ping(port, &tls.ca(), None);
    assert!(
        !answered_pong(&no_cert),
        "a client without a certificate got in: {no_cert:?}"
    );
    let wrong_ca = tls_ping(port, &tls.other_ca(), client);
    assert!(
        !answered_pong(&wrong_ca),
        "the server's certificate passed an unrelated CA: {wrong_ca:?}"
    );
    let pong: String = redis::cmd("PING").query(&mut strict.client()).unwrap();
    assert_eq!(pong, "PONG", "the plain port does not answer");

    strict.restart();
    assert_eq!(strict.tls_port(), port);
    let again = tls_ping(port, &tls.ca(), client);
    assert!(
        answered_pong(&again),
        "no TLS after restart: {again:?}\n{}",
        strict.log_tail(20)
    );

    let open = RedisServer::start_tls(&tls, ClientCert::NotAsked);
    let anonymous = tls_ping(open.tls_port(), &tls.ca(), None);
    assert!(
        answered_pong(&anonymous),
        "{anonymous:?}\n{}",
        open.log_tail(20)
    );
}

#[test]
fn support_sentinel_failover_swaps_master_and_replica() {
    let setup = SentinelSetup::start();
    let (first, second) = (setup.nodes[0].port(), setup.nodes[1].port());
    assert_eq!(setup.master_port(), first);
    assert_eq!(setup.sentinel_urls().len(), 3);
    assert_eq!(setup.master_name(), "mymaster");
    assert!(
        setup
            .redis_section()
            .contains("sentinels = [\"redis://127.0.0.1:"),
        "{}",
        setup.redis_section()
    );

    assert_eq!(setup.failover(), second, "{}", setup.logs());
    assert_eq!(setup.master_port(), second);
    redis::cmd("SET")
        .arg("cl:after-failover")
        .arg("1")
        .query::<()>(&mut setup.master().client())
        .unwrap_or_else(|e| panic!("the new master refuses writes: {e}\n{}", setup.logs()));
}

#[test]
fn support_cluster_spreads_the_slots_over_three_nodes() {
    let setup = RedisClusterSetup::start();
    assert_eq!(setup.urls().len(), 3);
    assert_eq!(setup.keyslot("cl:{job-0}:state"), setup.keyslot("job-0"));
    let owners: BTreeSet<usize> = [0, 8_000, 16_383]
        .into_iter()
        .map(|slot| setup.node_of_slot(slot))
        .collect();
    assert_eq!(
        owners.len(),
        3,
        "three slots far apart on fewer than three nodes"
    );
    for i in 0..3 {
        assert_eq!(setup.dbsize(i), 0);
    }
    let key = "cl:{job-0}:state";
    let owner = setup.node_of_slot(setup.keyslot(key));
    redis::cmd("SET")
        .arg(key)
        .arg("1")
        .query::<()>(&mut setup.nodes[owner].client())
        .unwrap_or_else(|e| panic!("the owner of {key} refuses it: {e}\n{}", setup.logs()));
    assert_eq!(setup.dbsize(owner), 1);
}

// ----------------------------------------------------------------- Sentinel

/// How long after the sentinels switch a replica may still write to the
/// old master: its Sentinel connection asks the sentinels again every
/// second, plus a second for the tick's lateness and the test's clock.
const SWITCH_WINDOW_MS: i64 = 2_000;

/// A Sentinel failover forced while two replicas ran an every-second job.
struct Failover {
    /// The replicas, stopped.
    cluster: Cluster<SentinelSetup>,
    /// The probe file.
    file: std::path::PathBuf,
    /// When the failover was asked for and when every sentinel named the
    /// new master (ms since the epoch).
    began: i64,
    ended: i64,
}

/// Two replicas on a Sentinel deployment whose `[redis]` section adds
/// `extra`; forces a failover after 4 ticks and waits for 6 ticks after
/// it, which the new master must have recorded.
fn failover_during_ticks(extra: &str) -> Failover {
    let setup = SentinelSetup::start();
    let section = format!("{}{extra}", setup.redis_section());
    let mut cluster = Cluster::with_section(setup, &section);
    let file = two_replicas(&mut cluster);
    wait_for_ticks(&file, 4, 0, Duration::from_secs(30));
    let began = now_ms();
    let new_master = cluster.redis.failover();
    let ended = now_ms();
    // Ticks after the failover can only be claimed on the new master.
    wait_for_ticks(&file, 6, ended, Duration::from_secs(40));
    cluster.stop_all();
    let recorded = read_outcomes(&mut cluster.redis.node(new_master).client(), "cl", "beat");
    assert!(
        recorded.iter().any(|o| o.tick() > ended),
        "the new master holds no outcome of a tick after the failover: {recorded:#?}\n{}",
        cluster.logs()
    );
    Failover {
        cluster,
        file,
        began,
        ended,
    }
}

#[test]
fn sentinel_failover_with_a_replica_ack_keeps_exactly_once() {
    // A claim runs only once the replica acknowledged it, so the claim a
    // replica took on the old master in the switch's last moments either
    // reached the new master or does not run.
    let run = failover_during_ticks("min_replicas_ack = 1\nack_timeout = \"200ms\"\n");
    let logs = format!("{}\n{}", run.cluster.logs(), run.cluster.redis.logs());
    ticks_ran_once(&run.file, &logs);
}

#[test]
fn sentinel_failover_without_a_replica_ack_runs_a_tick_twice_only_in_the_switch() {
    // Replication is asynchronous: while the sentinels switch, a replica
    // may still claim on the old master a tick the new master never hears
    // of. The guarantee stated for this deployment: only those ticks.
    let Failover {
        cluster,
        file,
        began,
        ended,
    } = failover_during_ticks("");
    let side = starts(&file);
    let mut seen = BTreeSet::new();
    let twice: Vec<i64> = side
        .iter()
        .map(|s| s.0)
        .filter(|&t| !seen.insert(t))
        .collect();
    let outside: Vec<i64> = twice
        .iter()
        .copied()
        .filter(|&t| t < began - 1_000 || t > ended + SWITCH_WINDOW_MS)
        .collect();
    assert!(
        outside.is_empty(),
        "ticks {outside:?} ran twice outside the switch ({began}..{ended}): {side:?}\n{}\n{}",
        cluster.logs(),
        cluster.redis.logs()
    );
}

// ------------------------------------------------------------ Redis Cluster

#[test]
fn cluster_runs_jobs_spread_over_slots_exactly_once() {
    let setup = RedisClusterSetup::start();
    // Two jobs per node, by the slot of their hash tag.
    let mut per_node: Vec<Vec<String>> = vec![Vec::new(); setup.nodes.len()];
    for i in 0..500 {
        if per_node.iter().all(|names| names.len() == 2) {
            break;
        }
        let name = format!("job-{i}");
        let node = setup.node_of_slot(setup.keyslot(&format!("cl:{{{name}}}:state")));
        if per_node[node].len() < 2 {
            per_node[node].push(name);
        }
    }
    let names: Vec<String> = per_node.into_iter().flatten().collect();
    assert_eq!(
        names.len(),
        6,
        "no 6 job names spread over 3 nodes: {names:?}"
    );

    let mut cluster = Cluster::new(setup);
    let jobs: String = names
        .iter()
        .map(|name| probe_job(name, EVERY_SECOND, &cluster.path(name), "true", ""))
        .collect();
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    for name in &names {
        wait_for_ticks(&cluster.path(name), 5, 0, Duration::from_secs(40));
    }
    let status = status_of(&cluster.config_path("a"), &[]);
    for name in &names {
        assert!(
            status.stdout().contains(name.as_str()),
            "`status` does not list {name}\n{}",
            status.describe()
        );
    }
    cluster.stop_all();

    let logs = format!("{}\n{}", cluster.logs(), cluster.redis.logs());
    for name in &names {
        ticks_ran_once(&cluster.path(name), &logs);
    }
    for i in 0..cluster.redis.nodes.len() {
        assert!(
            cluster.redis.dbsize(i) > 0,
            "node {i} holds no key: the jobs' state is not spread\n{logs}"
        );
    }
}

// ------------------------------------------------------------------- Quorum

fn quorum_cluster() -> Cluster<Vec<RedisServer>> {
    Cluster::new((0..3).map(|_| RedisServer::start()).collect::<Vec<_>>())
}

#[test]
fn quorum_with_one_master_killed_still_runs_every_tick_once() {
    let mut cluster = quorum_cluster();
    let file = two_replicas(&mut cluster);
    wait_for_ticks(&file, 4, 0, Duration::from_secs(30));
    cluster.redis[0].kill9();
    let killed = now_ms();
    wait_for_ticks(&file, 6, killed, Duration::from_secs(40));

    // The operator reads from the first master that answers, writes to a
    // majority, and refuses what needs a single Redis.
    let config = cluster.config_path("a");
    let status = status_of(&config, &[]);
    assert!(status.stdout().contains("beat"), "{}", status.describe());
    for (args, code) in [
        (["pause", "beat"], 0),
        (["resume", "beat"], 0),
        (["trigger", "beat"], 2),
    ] {
        let run = cronlease_with_env(
            [
                OsStr::new(args[0]),
                OsStr::new(args[1]),
                OsStr::new("--config"),
                config.as_os_str(),
            ],
            &[],
        )
        .expect_code(code);
        if code == 2 {
            assert!(
                run.stderr().contains("not available with `[redis] quorum`"),
                "{}",
                run.describe()
            );
        }
    }
    cluster.stop_all();
    ticks_ran_once(&file, &cluster.logs());
}

#[test]
fn quorum_with_two_masters_killed_claims_nothing_and_says_so() {
    let mut cluster = quorum_cluster();
    let file = two_replicas(&mut cluster);
    wait_for_ticks(&file, 4, 0, Duration::from_secs(30));
    cluster.redis[0].kill9();
    cluster.redis[1].kill9();
    let killed = now_ms();
    std::thread::sleep(Duration::from_secs(4));

    let logs = cluster.logs();
    let late: Vec<(i64, i64)> = start_times(&file)
        .into_iter()
        .filter(|&(_, started)| started > killed + 1_500)
        .collect();
    assert!(
        late.is_empty(),
        "runs (tick, started ms) began more than 1.5 s after the second of three \
         masters died at {killed}: {late:?}\n{logs}"
    );
    for replica in &cluster.replicas {
        replica.wait_for_log("quorum not reached", Duration::from_secs(10));
    }
    ticks_ran_once(&file, &logs);
}

// ---------------------------------------------------------------------- TLS

#[test]
fn tls_with_a_private_ca_and_client_certificates() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, ClientCert::Required);
    let url = server.tls_url();
    let mut cluster = Cluster::with_section(server, &tls.redis_section(&url, &tls.ca()));
    let file = cluster.path("side-effects");
    let jobs = probe_job("beat", EVERY_SECOND, &file, "true", "");

    // A replica that trusts the wrong CA, beside the two good ones.
    let wrong_dir = cluster.path("wrong-ca");
    std::fs::create_dir_all(&wrong_dir).expect("cannot create a replica directory");
    let wrong_config = write_config_section(
        &wrong_dir,
        &tls.redis_section(&url, &tls.other_ca()),
        "replica_id = \"wrong-ca\"",
        &jobs,
    );
    let mut wrong = Replica::start(&wrong_config, "wrong-ca");

    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    wait_for_ticks(&file, 5, 0, Duration::from_secs(30));
    let named = wait_until(
        Duration::from_secs(20),
        "the wrong-CA replica to log a certificate problem",
        || {
            let log = wrong.log();
            log.to_lowercase().contains("certificate").then_some(log)
        },
    );
    cluster.stop_all();

    let logs = cluster.logs();
    ticks_ran_once(&file, &logs);
    assert!(
        starts(&file).iter().all(|s| s.2 != "wrong-ca"),
        "the replica that distrusts the server ran a job\n{named}"
    );
    // Distrusting the server is a connection failure, not a config error.
    if let Some(status) = wrong.try_exit() {
        assert_ne!(status.code(), Some(2), "the config was rejected\n{named}");
    }
    wrong.kill9();
}

// ---------------------------------------------------------------------- ACL

/// Runs `ACL SETUSER ARGS…`.
#[track_caller]
fn acl_setuser(redis: &mut redis::Connection, args: &str) {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(args.split_whitespace().collect::<Vec<_>>())
        .query::<()>(redis)
        .unwrap_or_else(|e| panic!("ACL SETUSER {args} failed: {e}"));
}

#[test]
fn acl_user_limited_to_the_key_prefix() {
    let redis = RedisServer::start();
    {
        let mut connection = redis.client();
        acl_setuser(&mut connection, "admin on >admin-pw ~* &* +@all");
        acl_setuser(
            &mut connection,
            &format!(
                "cronlease reset on >{PASSWORD} ~cl:* &cl:* +@all -@dangerous \
                 +info +client|setname +client|getname +config|get"
            ),
        );
        acl_setuser(&mut connection, "default off");
    }
    let section = format!(
        "url = {}\nusername = \"cronlease\"\npassword_env = {}\n",
        toml_string(&redis.url()),
        toml_string(PASSWORD_ENV)
    );
    let mut cluster = Cluster::with_section(redis, &section);
    cluster
        .env
        .push((PASSWORD_ENV.to_owned(), PASSWORD.to_owned()));
    let file = two_replicas(&mut cluster);
    wait_for_ticks(&file, 5, 0, Duration::from_secs(30));

    let status = status_of(&cluster.config_path("a"), &[(PASSWORD_ENV, PASSWORD)]);
    assert!(status.stdout().contains("beat"), "{}", status.describe());
    assert!(
        !status.stdout().contains(PASSWORD) && !status.stderr().contains(PASSWORD),
        "`status` shows the password\n{}",
        status.describe()
    );

    // Every connection of the replicas is the cronlease user's; the
    // default user is off, so none can be anyone else's.
    let mut admin = cluster.redis.client_as("admin", "admin-pw");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut admin)
        .expect("CLIENT LIST");
    assert!(clients.contains("user=cronlease"), "{clients}");
    assert!(!clients.contains("user=default"), "{clients}");
    cluster.stop_all();

    let logs = cluster.logs();
    ticks_ran_once(&file, &logs);
    assert!(
        !logs.contains(PASSWORD),
        "a replica logged the password\n{logs}"
    );
    for refusal in ["NOPERM", "cannot read Redis settings"] {
        assert!(
            !logs.contains(refusal),
            "the ACL rule is too narrow ({refusal})\n{logs}"
        );
    }
}

// --------------------------------------------------------------- Durability

/// Whether `replica` has a live link to its master.
fn in_sync(replica: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut replica.client())
        .unwrap_or_default();
    info.lines()
        .any(|line| line.trim() == "master_link_status:up")
}

#[test]
fn durability_gate_waits_for_a_replica_ack() {
    let master = RedisServer::start();
    let mut replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    wait_until(Duration::from_secs(20), "the replica in sync", || {
        in_sync(&replica).then_some(())
    });
    let section = format!(
        "url = {}\nmin_replicas_ack = 1\nack_timeout = \"200ms\"\n",
        toml_string(&master.url())
    );
    let mut cluster = Cluster::with_section(master, &section);
    let file = two_replicas(&mut cluster);
    wait_for_ticks(&file, 3, 0, Duration::from_secs(30));

    replica.kill9();
    let first_refused = wait_until(
        Duration::from_secs(15),
        "a not_durable outcome after the replica died",
        || {
            cluster
                .outcomes("beat")
                .iter()
                .filter(|o| o.status() == "not_durable")
                .map(|o| o.tick())
                .min()
        },
    );
    std::thread::sleep(Duration::from_secs(3));
    let logs = cluster.logs();
    let late: Vec<i64> = starts(&file)
        .iter()
        .map(|s| s.0)
        .filter(|&tick| tick > first_refused)
        .collect();
    assert!(
        late.is_empty(),
        "ticks ran after tick {first_refused} was refused as not durable: {late:?}\n{logs}"
    );
    let refused = cluster
        .outcomes("beat")
        .iter()
        .filter(|o| o.status() == "not_durable")
        .count();
    assert!(
        refused >= 2,
        "only {refused} not_durable outcomes in 3 s\n{logs}"
    );

    replica.restart();
    let restarted = now_ms();
    wait_for_ticks(&file, 2, restarted, Duration::from_secs(30));
    cluster.stop_all();
    ticks_ran_once(&file, &cluster.logs());
}
