//! Life under systemd: the notify protocol, reloads on SIGHUP, the log
//! formats, and the unit files themselves.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::support::{RedisServer, Replica, read_outcomes, wait_until, write_config};

fn signal(replica: &Replica, signal: Signal) {
    kill(Pid::from_raw(replica.pid() as i32), signal).expect("cannot signal the replica");
}

/// SIGTERM, and the replica must exit 0.
#[track_caller]
fn stop(replica: &mut Replica) {
    signal(replica, Signal::SIGTERM);
    assert!(
        replica
            .wait_exit(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
}

/// Reads notify datagrams until one contains `needle`; returns all read.
#[track_caller]
fn expect_notify(socket: &UnixDatagram, needle: &str, seen: &mut Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = socket.recv(&mut buffer) {
            let message = String::from_utf8_lossy(&buffer[..n]).into_owned();
            let found = message.lines().any(|line| line == needle);
            seen.push(message);
            if found {
                return;
            }
        }
    }
    panic!("no {needle:?} from the daemon; got {seen:#?}");
}

const EVERY_SECOND: &str = "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n";

#[test]
fn the_notify_protocol_is_spoken() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &redis.url(), "", EVERY_SECOND);
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("cannot bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let socket_env = socket_path.to_string_lossy().into_owned();
    let replica = Replica::start_with(
        &config,
        "notified",
        &[
            ("NOTIFY_SOCKET", socket_env.as_str()),
            ("WATCHDOG_USEC", "1000000"),
        ],
        None,
    );
    let mut seen = Vec::new();
    expect_notify(&socket, "READY=1", &mut seen);
    assert!(
        seen.last()
            .unwrap()
            .contains("STATUS=1 jobs, 0 runs in flight, Redis up"),
        "{seen:#?}"
    );
    expect_notify(&socket, "WATCHDOG=1", &mut seen);
    signal(&replica, Signal::SIGHUP);
    expect_notify(&socket, "RELOADING=1", &mut seen);
    expect_notify(&socket, "READY=1", &mut seen);
    signal(&replica, Signal::SIGTERM);
    expect_notify(&socket, "STOPPING=1", &mut seen);
    let mut replica = replica;
    assert!(
        replica
            .wait_exit(Duration::from_secs(15))
            .is_some_and(|s| s.success())
    );
}

/// A job that sleeps, then appends a line, so a run in flight can be seen
/// to finish undisturbed.
fn slow_job(file: &Path) -> String {
    format!(
        "[jobs.slow]\nschedule = \"* * * * * *\"\nshell = 'sleep 3; echo $CRONLEASE_TICK_MS >> {}'\n",
        file.display()
    )
}

#[test]
fn sighup_applies_a_valid_table_and_keeps_runs_in_flight() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("slow-done");
    let config = write_config(dir.path(), &redis.url(), "", &slow_job(&done));
    let mut replica = Replica::start(&config, "reloaded");
    replica.wait_for_log("started job=slow", Duration::from_secs(15));
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[jobs.added]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\n"),
    )
    .unwrap();
    signal(&replica, Signal::SIGHUP);
    replica.wait_for_log("job table reloaded", Duration::from_secs(10));
    wait_until(Duration::from_secs(15), "runs of the new job", || {
        (read_outcomes(&mut redis.client(), "cl", "added").len() >= 2).then_some(())
    });
    // The run that was in flight during the reload finished as it would have.
    let first = wait_until(Duration::from_secs(15), "the slow run's outcome", || {
        read_outcomes(&mut redis.client(), "cl", "slow")
            .into_iter()
            .find(|o| o.status() == "ok")
    });
    let slow = read_outcomes(&mut redis.client(), "cl", "slow");
    assert!(
        slow.iter()
            .all(|o| matches!(o.status(), "ok" | "skipped_overlap")),
        "{slow:#?}\n{}",
        replica.log()
    );
    let finished = std::fs::read_to_string(&done).unwrap_or_default();
    assert!(
        finished.lines().any(|l| l == first.tick().to_string()),
        "{finished}"
    );
    stop(&mut replica);
}

#[test]
fn sighup_with_a_broken_file_keeps_the_old_table() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &redis.url(), "", EVERY_SECOND);
    let mut replica = Replica::start(&config, "kept");
    wait_until(Duration::from_secs(15), "a first run", || {
        (!read_outcomes(&mut redis.client(), "cl", "tick").is_empty()).then_some(())
    });
    std::fs::write(&config, "[redis\nthis is not toml\n").unwrap();
    signal(&replica, Signal::SIGHUP);
    let log = replica.wait_for_log("reload rejected", Duration::from_secs(10));
    assert!(log.contains("invalid TOML"), "{log}");
    let before = read_outcomes(&mut redis.client(), "cl", "tick").len();
    wait_until(
        Duration::from_secs(15),
        "runs after the rejected reload",
        || (read_outcomes(&mut redis.client(), "cl", "tick").len() >= before + 2).then_some(()),
    );
    stop(&mut replica);
}

#[test]
fn logs_suit_journald_and_log_shippers() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &redis.url(), "", EVERY_SECOND);
    let mut journal = Replica::start_with(
        &config,
        "journal",
        &[("JOURNAL_STREAM", "8:12345"), ("RUST_LOG", "info")],
        None,
    );
    let log = journal.wait_for_log("ready", Duration::from_secs(15));
    signal(&journal, Signal::SIGTERM);
    journal.wait_exit(Duration::from_secs(15));
    for line in log.lines().filter(|l| !l.is_empty()) {
        assert!(
            line.starts_with("<6>") || line.starts_with("<4>") || line.starts_with("<3>"),
            "{line:?}\n{log}"
        );
        // journald stamps lines itself: none starts with a time of its own
        // (a tick's date inside a line, `tick=2026-…`, is a field).
        let text = &line[3..];
        assert!(
            !text.starts_with(|c: char| c.is_ascii_digit()) && !line.contains("Z  INFO"),
            "a timestamp in {line:?}"
        );
    }

    let json_dir = tempfile::tempdir().unwrap();
    let config = write_config(
        json_dir.path(),
        &redis.url(),
        "log_format = \"json\"",
        EVERY_SECOND,
    );
    let mut shipper = Replica::start_with(&config, "json", &[("RUST_LOG", "info")], None);
    let log = shipper.wait_for_log("ready", Duration::from_secs(15));
    signal(&shipper, Signal::SIGTERM);
    shipper.wait_exit(Duration::from_secs(15));
    for line in log.lines().filter(|l| !l.is_empty()) {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert!(
            value["level"].is_string() && value["fields"]["message"].is_string(),
            "{line}"
        );
    }
}

/// The unit files with ExecStart pointing at the built binary, in a
/// temporary directory, as `systemd-analyze` needs an executable.
fn units_for_analysis(dir: &Path) -> Vec<PathBuf> {
    let binary = crate::support::binary();
    let source = crate::support::repository().join("systemd");
    [
        ("cronlease.service", "cronlease.service"),
        ("cronlease@.service", "cronlease@test.service"),
    ]
    .iter()
    .map(|(from, to)| {
        let text =
            std::fs::read_to_string(source.join(from)).unwrap_or_else(|e| panic!("{from}: {e}"));
        let path = dir.join(to);
        std::fs::write(
            &path,
            text.replace("/usr/bin/cronlease", &binary.to_string_lossy()),
        )
        .unwrap();
        path
    })
    .collect()
}

fn systemd_analyze(args: &[&str]) -> std::process::Output {
    Command::new("systemd-analyze")
        .args(args)
        .env("SYSTEMD_LOG_LEVEL", "warning")
        .output()
        .unwrap_or_else(|e| panic!("cannot run systemd-analyze ({e}); scripts/install-deps installs the systemd package"))
}

#[test]
fn the_units_verify_and_are_hardened() {
    let dir = tempfile::tempdir().unwrap();
    for unit in units_for_analysis(dir.path()) {
        let unit = unit.to_string_lossy().into_owned();
        let verify = systemd_analyze(&["verify", &unit]);
        let stderr = String::from_utf8_lossy(&verify.stderr);
        // Outside a booted systemd, verify may only note that the unit's user
        // does not exist on this machine; anything else is a real problem.
        let problems: Vec<&str> = stderr
            .lines()
            .filter(|l| {
                !l.trim().is_empty()
                    && !l.contains("Failed to resolve user")
                    && !l.contains("User=cronlease")
            })
            .collect();
        assert!(
            verify.status.success() && problems.is_empty(),
            "{unit}: {stderr}"
        );
        let security = systemd_analyze(&["security", "--offline=true", &unit]);
        let stdout = String::from_utf8_lossy(&security.stdout);
        let score: f64 = stdout
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|rest| rest.split(": ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no score in {stdout}"));
        assert!(score <= 2.0, "{unit}: exposure {score}\n{stdout}");
    }
}
