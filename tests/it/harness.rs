//! The test harness itself: a private Redis that starts, keeps its data
//! across a restart when told to, and leaves nothing behind; replicas whose
//! failures are visible; configs the daemon accepts. When these fail, every
//! other integration test is suspect.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use crate::support::{RedisServer, Replica, cronlease, read_outcomes, wait_until, write_config};

fn get(redis: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(redis)
        .unwrap_or_else(|e| panic!("GET {key} failed: {e}"))
}

fn set(redis: &mut redis::Connection, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(redis)
        .unwrap_or_else(|e| panic!("SET {key} failed: {e}"));
}

#[test]
fn a_private_redis_answers_on_its_own_port() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379, "tests must never use the system Redis");
    assert_eq!(
        server.url(),
        format!("redis://127.0.0.1:{}/0", server.port())
    );
    let mut redis = server.client();
    set(&mut redis, "greeting", "hello");
    assert_eq!(get(&mut redis, "greeting").as_deref(), Some("hello"));
    assert!(server.dir().join("redis.log").exists());
}

#[test]
fn with_appendonly_the_data_survives_a_restart_on_the_same_port() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes"]);
    let port = server.port();
    set(&mut server.client(), "draw", "alice bob carol");
    let before = server.pid();
    server.restart();
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), before, "restart must start a new process");
    assert_eq!(
        get(&mut server.client(), "draw").as_deref(),
        Some("alice bob carol")
    );
}

#[test]
fn with_appendfsync_always_the_data_survives_kill9() {
    let mut server = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    set(&mut server.client(), "fence", "7");
    server.kill9();
    assert_eq!(server.pid(), None);
    server.restart();
    assert_eq!(get(&mut server.client(), "fence").as_deref(), Some("7"));
}

#[test]
fn without_persistence_a_restart_loses_everything() {
    // The failure mode DESIGN.md's "When Redis itself loses state" is about.
    let mut server = RedisServer::start();
    set(&mut server.client(), "fence", "7");
    server.restart();
    assert_eq!(get(&mut server.client(), "fence"), None);
}

#[test]
fn stop_leaves_no_process_and_no_listener() {
    let mut server = RedisServer::start();
    let pid = server.pid().expect("a started server has a pid");
    server.stop();
    assert_eq!(server.pid(), None);
    assert_eq!(
        kill(Pid::from_raw(pid as i32), None),
        Err(Errno::ESRCH),
        "redis-server {pid} still exists after stop()"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", server.port())).is_err(),
        "something still listens on port {}",
        server.port()
    );
    server.stop(); // a second stop is harmless
}

#[test]
fn dropping_the_server_kills_it() {
    let server = RedisServer::start();
    let pid = server.pid().expect("a started server has a pid");
    drop(server);
    assert_eq!(kill(Pid::from_raw(pid as i32), None), Err(Errno::ESRCH));
}

#[test]
fn paused_clients_wait() {
    let server = RedisServer::start();
    let mut redis = server.client();
    server.pause_clients(400);
    let started = Instant::now();
    set(&mut redis, "k", "v");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "SET returned after {:?} during a 400 ms CLIENT PAUSE",
        started.elapsed()
    );
}

#[test]
fn outcomes_are_read_from_the_job_stream() {
    let server = RedisServer::start();
    let mut redis = server.client();
    let add = |redis: &mut redis::Connection, fields: &[(&str, &str)]| {
        let mut cmd = redis::cmd("XADD");
        cmd.arg("cl:{draw}:runs").arg("*");
        for (name, value) in fields {
            cmd.arg(name).arg(value);
        }
        cmd.query::<String>(redis)
            .unwrap_or_else(|e| panic!("XADD failed: {e}"));
    };
    assert!(read_outcomes(&mut redis, "cl", "draw").is_empty());
    add(
        &mut redis,
        &[
            ("tick", "1767225600000"),
            ("fence", "1"),
            ("run_id", "r-1"),
            ("replica", "a"),
            ("status", "ok"),
            ("output", ""),
            ("stale", "0"),
        ],
    );
    add(
        &mut redis,
        &[
            ("tick", "1767225602000"),
            ("fence", "2"),
            ("run_id", "r-2"),
            ("replica", "b"),
            ("status", "lost_lease"),
            ("stale", "1"),
        ],
    );
    let outcomes = read_outcomes(&mut redis, "cl", "draw");
    assert_eq!(outcomes.len(), 2);
    let (first, second) = (&outcomes[0], &outcomes[1]);
    assert_eq!(first.tick(), 1_767_225_600_000);
    assert_eq!(first.fence(), 1);
    assert_eq!(first.run_id(), "r-1");
    assert_eq!(first.replica(), "a");
    assert_eq!(first.status(), "ok");
    assert!(!first.stale());
    assert_eq!(first.field("output"), Some(""));
    assert_eq!(first.field("exit_code"), None);
    assert_eq!(second.status(), "lost_lease");
    assert!(second.stale());
    assert!(first.id < second.id || first.id.len() < second.id.len());
    assert!(read_outcomes(&mut redis, "cl", "other").is_empty());
}

#[test]
fn wait_until_returns_the_value_once_it_is_there() {
    let mut calls = 0;
    let value = wait_until(Duration::from_secs(2), "the third call", || {
        calls += 1;
        (calls == 3).then_some(calls * 10)
    });
    assert_eq!(value, 30);
}

#[test]
#[should_panic(expected = "waiting for godot")]
fn wait_until_names_what_never_came() {
    wait_until(Duration::from_millis(120), "godot", || None::<()>);
}

#[test]
fn the_test_config_is_valid() {
    let dir = tempfile::tempdir().expect("cannot create a temporary directory");
    let path = write_config(
        dir.path(),
        "redis://127.0.0.1:1/0",
        "replica_id = \"replica-a\"",
        "[jobs.draw]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n",
    );
    assert!(dir.path().join("state").is_dir());
    let text = std::fs::read_to_string(&path).expect("cannot read the written config");
    assert!(text.contains("replica_id = \"replica-a\"\n"), "{text}");
    cronlease(["check".as_ref(), "--config".as_ref(), path.as_os_str()]).expect_code(0);
}

#[test]
fn a_replica_that_cannot_start_shows_why() {
    let mut replica = Replica::start("/nonexistent/jobs.toml".as_ref(), "doomed");
    let status = replica
        .wait_exit(Duration::from_secs(10))
        .expect("a replica without a config file must exit");
    assert!(!status.success(), "exited with {status}");
    assert!(!replica.log().trim().is_empty(), "the log shows why");
    assert_eq!(replica.try_exit(), Some(status));
    replica.kill9(); // harmless after exit
}

/// A one-second job that succeeds, under the test config.
const EVERY_SECOND: &str = "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n";

#[test]
fn a_replica_runs_a_job_and_stops_cleanly_on_sigterm() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("cannot create a temporary directory");
    let config = write_config(
        dir.path(),
        &server.url(),
        "replica_id = \"replica-a\"",
        EVERY_SECOND,
    );
    let mut replica = Replica::start(&config, "a");
    let mut redis = server.client();
    let outcome = wait_until(Duration::from_secs(10), "an outcome of job tick", || {
        read_outcomes(&mut redis, "cl", "tick").into_iter().next()
    });
    assert_eq!(outcome.status(), "ok", "{outcome:?}");
    assert_eq!(outcome.replica(), "replica-a", "{outcome:?}");
    assert_eq!(outcome.tick() % 1000, 0, "{outcome:?}");
    assert!(!outcome.stale(), "{outcome:?}");
    replica.sigterm();
    let status = replica
        .wait_exit(Duration::from_secs(10))
        .expect("a replica exits within 10 s of SIGTERM");
    assert!(status.success(), "exited with {status}\n{}", replica.log());
    assert!(!replica.log().is_empty());
}

/// The state letter of `/proc/PID/stat` (`T` when stopped).
fn process_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/stat: {e}"));
    let after_name = &stat[stat
        .rfind(')')
        .expect("stat has the command in parentheses")
        + 1..];
    after_name
        .trim_start()
        .chars()
        .next()
        .expect("stat has a state")
}

#[test]
fn signals_reach_the_daemon_under_a_forking_wrapper() {
    // A shell that runs the daemon and then exits with its status forks and
    // waits: the signals must go to its child, the daemon.
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("cannot create a temporary directory");
    let config = write_config(dir.path(), &server.url(), "", EVERY_SECOND);
    let wrapper = ["sh", "-c", "\"$@\"; exit $?", "sh"]
        .map(String::from)
        .to_vec();
    let mut replica = Replica::start_with(&config, "skewed", &[], Some(wrapper));
    let exe = std::fs::read_link(format!("/proc/{}/exe", replica.pid()))
        .expect("the daemon's process exists");
    assert_eq!(
        exe,
        crate::support::binary()
            .canonicalize()
            .expect("the binary exists")
    );
    replica.sigstop();
    wait_until(Duration::from_secs(5), "the daemon to stop", || {
        (process_state(replica.pid()) == 'T').then_some(())
    });
    replica.sigcont();
    wait_until(Duration::from_secs(5), "the daemon to continue", || {
        (process_state(replica.pid()) != 'T').then_some(())
    });
    let pid = replica.pid();
    replica.kill9();
    // The wrapper reaps the daemon and then exits itself: both take a moment.
    wait_until(Duration::from_secs(5), "the daemon to be gone", || {
        (kill(Pid::from_raw(pid as i32), None) == Err(Errno::ESRCH)).then_some(())
    });
    assert!(replica.wait_exit(Duration::from_secs(5)).is_some());
}
