//! The spool under stress: a spooled file cut short (power loss mid-write)
//! is quarantined while the rest is delivered; a full disk keeps outcomes
//! in memory, retried until Redis takes them, counted in a metric, and
//! leaves no temporary file. The spool as a trust boundary: a private
//! directory of private files, a symbolic link in it never followed, and a
//! size cap that keeps outcomes in memory instead of on disk.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
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
    // The spool as the replica sees it (its tmpfs, in its mount namespace):
    // the write that failed left no temporary file.
    let seen = Path::new(&format!("/proc/{}/root", replica.pid())).join(
        spool
            .strip_prefix("/")
            .expect("the temporary directory is absolute"),
    );
    assert_eq!(
        names(&seen),
        ["fill"],
        "only the filler in the full spool\n{}",
        replica.log()
    );
    replica.wait_for_log("outcome held in memory delivered", Duration::from_secs(30));
    wait_until(Duration::from_secs(15), "nothing held any more", || {
        (gauge(&addr, "cronlease_unspooled_outcomes") == Some(0.0)).then_some(())
    });

    eprintln!("{held} outcomes held in memory at most");
    stop_with_every_outcome_recorded(&mut replica, &mut conn);
}

/// Stops `replica` cleanly and checks that every run it started has its
/// outcome in Redis and none was lost.
fn stop_with_every_outcome_recorded(replica: &mut Replica, conn: &mut redis::Connection) {
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
    let recorded: Vec<String> = read_outcomes(conn, "cl", "work")
        .iter()
        .filter_map(|o| o.field("run_id").map(str::to_string))
        .collect();
    let lost: Vec<&&str> = started
        .iter()
        .filter(|id| !recorded.iter().any(|r| r == **id))
        .collect();
    eprintln!(
        "{} runs started, {} recorded",
        started.len(),
        recorded.len()
    );
    assert!(lost.is_empty(), "outcomes lost: {lost:?}\n{log}");
    assert!(!log.contains("OUTCOME LOST"), "{log}");
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| {
            e.expect("a directory entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

/// The permission bits of `path` itself (a symbolic link is not followed).
fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("cannot stat {}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[test]
fn a_symbolic_link_in_the_spool_is_not_followed_and_the_spool_is_made_private() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"",
        JOB,
    );
    // A spool open to everyone, as an older release or a careless
    // operator left it.
    let spool = dir.path().join("state/spool");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::set_permissions(&spool, std::fs::Permissions::from_mode(0o777)).unwrap();
    // A link to a file elsewhere that reads as an outcome: were it
    // followed, that outcome would be delivered and the file deleted.
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("not-the-spools.json");
    let bait = ok_outcome("work", "via-link", 1_000, 1, "cl:{work}:lease".into());
    let bait_bytes = serde_json::to_vec(&bait).unwrap();
    std::fs::write(&target, &bait_bytes).unwrap();
    std::os::unix::fs::symlink(&target, spool.join("aaa-link.json")).unwrap();
    let good = ok_outcome("work", "spooled-run-1", 2_000, 1, "cl:{work}:lease".into());
    std::fs::write(
        spool.join("bbb-good.json"),
        serde_json::to_vec(&good).unwrap(),
    )
    .unwrap();
    std::fs::set_permissions(
        spool.join("bbb-good.json"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    let replica = Replica::start(&config, "a");
    let log = replica.wait_for_log(
        "aaa-link.json: a symbolic link, not followed",
        Duration::from_secs(30),
    );
    assert!(
        log.contains("spool directory was open to other users; its mode is now 0700"),
        "{log}"
    );
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
    assert_eq!(mode(&spool), 0o700);
    let quarantined = spool.join("quarantine/aaa-link.json");
    assert!(
        std::fs::symlink_metadata(&quarantined).is_ok_and(|m| m.file_type().is_symlink()),
        "the link itself is moved aside\n{}",
        replica.log()
    );
    assert_eq!(mode(&spool.join("quarantine")), 0o700);
    assert_eq!(
        std::fs::read(&target).expect("the link's target is still there"),
        bait_bytes,
        "the link's target is unchanged"
    );
    assert!(
        !read_outcomes(&mut conn, "cl", "work")
            .iter()
            .any(|o| o.field("run_id") == Some("via-link")),
        "the outcome behind the link was not delivered"
    );
    let log = replica.log();
    let line = log
        .lines()
        .find(|l| l.contains("aaa-link.json: a symbolic link"))
        .expect("the line is there");
    assert!(line.contains("ERROR"), "an error line: {line}");
}

#[test]
fn spooled_outcomes_are_files_of_the_replica_alone() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"\"\ndashboard_listen = \"\"",
        JOB,
    );
    let spool = dir.path().join("state/spool");
    // The umask a shell or a container commonly gives: files 0644.
    let wrapper = ["sh", "-c", "umask 022 && exec \"$@\"", "sh"]
        .map(String::from)
        .to_vec();
    let mut replica = Replica::start_with(&config, "a", &[], Some(wrapper));
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), "a run in flight", || {
        let n: i64 = redis::cmd("HLEN")
            .arg("cl:{work}:running")
            .query(&mut conn)
            .unwrap();
        (n > 0).then_some(())
    });
    // Long enough that the spooled file is still there when looked at.
    redis.pause_clients(15_000);
    replica.wait_for_log("outcome spooled", Duration::from_secs(12));
    let files: Vec<String> = names(&spool)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert!(!files.is_empty(), "a spooled file\n{}", replica.log());
    for name in &files {
        assert_eq!(mode(&spool.join(name)), 0o600, "{name}");
    }
    assert_eq!(mode(&spool), 0o700);
    replica.wait_for_log("spooled outcome delivered", Duration::from_secs(30));
    stop_with_every_outcome_recorded(&mut replica, &mut conn);
}

#[test]
fn past_the_spool_cap_outcomes_wait_in_memory_counted_and_logged() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    // Each outcome holds a 4096-byte output tail: more than the whole
    // spool may hold.
    let config = write_config(
        dir.path(),
        &redis.url(),
        "metrics_listen = \"127.0.0.1:0\"\ndashboard_listen = \"\"\nspool_max_bytes = 4096",
        "[jobs.work]\nschedule = \"* * * * * *\"\nshell = \"head -c 6000 /dev/zero | tr '\\\\0' x; sleep 0.9\"\n",
    );
    let mut replica = Replica::start(&config, "a");
    let addr = metrics_addr(&replica);
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), "a run in flight", || {
        let n: i64 = redis::cmd("HLEN")
            .arg("cl:{work}:running")
            .query(&mut conn)
            .unwrap();
        (n > 0).then_some(())
    });
    redis.pause_clients(6_000);
    let line = replica.wait_for_log("SPOOL FULL", Duration::from_secs(12));
    let line = line
        .lines()
        .find(|l| l.contains("SPOOL FULL"))
        .expect("the line is there")
        .to_string();
    for part in [
        "ERROR",
        "job=work",
        "run_id=",
        "spool_max_bytes=4096",
        "xxxxxxxxxxxxxxxx",
    ] {
        assert!(line.contains(part), "{part:?} in {line}");
    }
    let refused = wait_until(Duration::from_secs(10), "the refusal counted", || {
        gauge(&addr, "cronlease_spool_full_total").filter(|n| *n >= 1.0)
    });
    assert!(
        names(&dir.path().join("state/spool"))
            .iter()
            .all(|n| !n.ends_with(".json") && !n.ends_with(".tmp")),
        "nothing written to the spool"
    );
    replica.wait_for_log("outcome held in memory delivered", Duration::from_secs(30));
    eprintln!("{refused} outcomes refused by the cap");
    stop_with_every_outcome_recorded(&mut replica, &mut conn);
}
