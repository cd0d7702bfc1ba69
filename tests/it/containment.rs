//! Runs that cannot escape: a job that moves a process out of its process
//! group (`setsid`) has it killed at its timeout, at a lost lease, at
//! shutdown and when the job's command exits (or waited for, with
//! `leftovers = "wait"`) — in a cgroup per run, and without cgroups by the
//! run id every process of the run inherits. And in both modes every
//! outcome has its own run's CPU time and peak memory.

use std::path::Path;
use std::time::Duration;

use crate::support::{
    Outcome, RedisServer, Replica, cronlease, peak_rss_kb, read_outcomes, wait_until, write_config,
};

/// A job that leaves a `sleep 60` in a session of its own, its pid in
/// `DIR/NAME.pid`, then runs `then`.
fn escaping(dir: &Path, name: &str, then: &str, extra: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"0 0 1 1 *\"\n\
         shell = \"setsid sh -c 'echo $$ > {dir}/{name}.pid; exec sleep 60' & {then}\"\n{extra}\n",
        dir = dir.display()
    )
}

/// Whether `pid` is alive (a zombie is not).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
    })
}

/// The pid the job's escaped process wrote.
fn escaped_pid(dir: &Path, name: &str) -> i32 {
    wait_until(
        Duration::from_secs(30),
        &format!("{name}'s escaped process"),
        || {
            std::fs::read_to_string(dir.join(format!("{name}.pid")))
                .ok()?
                .trim()
                .parse()
                .ok()
        },
    )
}

fn outcome_status(redis: &RedisServer, job: &str) -> String {
    let mut conn = redis.client();
    wait_until(Duration::from_secs(30), &format!("{job}'s outcome"), || {
        read_outcomes(&mut conn, "cl", job)
            .last()
            .map(|o| o.status().to_string())
    })
}

fn trigger(config: &str, job: &str) {
    cronlease(["trigger", job, "--config", config]).expect_code(0);
}

fn nothing_escapes(mode: &str) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pids = tempfile::tempdir().unwrap();
    let jobs = [
        escaping(pids.path(), "timeout", "sleep 30", "timeout = \"2s\""),
        escaping(pids.path(), "exits", "sleep 0.3", ""),
        escaping(pids.path(), "lease", "sleep 30", ""),
        escaping(pids.path(), "shutdown", "sleep 30", ""),
        "[jobs.waits]\nschedule = \"0 0 1 1 *\"\nleftovers = \"wait\"\n\
         shell = \"setsid sh -c 'sleep 1; echo late-words' & echo main-done\"\n"
            .to_string(),
    ]
    .concat();
    let config = write_config(
        dir.path(),
        &redis.url(),
        &format!(
            "metrics_listen = \"\"\ndashboard_listen = \"\"\nreplica_id = \"a\"\ncontainment = \"{mode}\""
        ),
        &jobs,
    );
    let config_arg = config.to_string_lossy().to_string();
    let mut replica = Replica::start(&config, "a");
    replica.wait_for_log("ready", Duration::from_secs(30));
    // Its first heartbeat record may come a moment after it says ready.
    let (status, report) = wait_until(Duration::from_secs(10), "the replica's record", || {
        let status = cronlease(["status", "--json", "--config", &config_arg]).expect_code(0);
        let report: serde_json::Value = serde_json::from_str(&status.stdout()).unwrap();
        (report["replicas"][0].is_object()).then_some((status, report))
    });
    assert_eq!(
        report["replicas"][0]["containment"],
        mode,
        "{}",
        status.describe()
    );

    // At the timeout.
    trigger(&config_arg, "timeout");
    let pid = escaped_pid(pids.path(), "timeout");
    assert_eq!(outcome_status(&redis, "timeout"), "timeout");
    wait_until(
        Duration::from_secs(10),
        "the escaped process killed at the timeout",
        || (!alive(pid)).then_some(()),
    );

    // When the command exits, leaving it behind.
    trigger(&config_arg, "exits");
    let pid = escaped_pid(pids.path(), "exits");
    assert_eq!(outcome_status(&redis, "exits"), "ok");
    wait_until(Duration::from_secs(10), "the leftover killed", || {
        (!alive(pid)).then_some(())
    });
    replica.wait_for_log(
        "left processes behind: killing them",
        Duration::from_secs(10),
    );
    // Its processes' CPU time is in the outcome in either mode, and their
    // peak memory where the cgroup's `memory.peak` measures it (else only
    // a run larger than the replica has one: `usage_is_each_runs_own`
    // checks the figures).
    let mut conn = redis.client();
    let exits = read_outcomes(&mut conn, "cl", "exits");
    let usage = exits
        .last()
        .map(|o| (o.field("cpu_ms"), o.field("peak_memory_kb")));
    let measured_peak = mode == "cgroup" && v2_offers("memory");
    assert!(
        matches!(usage, Some((Some(_), peak)) if peak.is_some() || !measured_peak),
        "cpu_ms and peak_memory_kb {usage:?} in mode {mode}"
    );

    // Waited for, with leftovers = "wait": the run ends when it does, and
    // its output is the run's.
    trigger(&config_arg, "waits");
    assert_eq!(outcome_status(&redis, "waits"), "ok");
    let output = read_outcomes(&mut conn, "cl", "waits")
        .last()
        .and_then(|o| o.field("output").map(str::to_string))
        .unwrap_or_default();
    assert!(
        output.contains("main-done") && output.contains("late-words"),
        "{output:?}"
    );

    // At a lost lease (Redis silent past the 2 s lease).
    trigger(&config_arg, "lease");
    let pid = escaped_pid(pids.path(), "lease");
    redis.pause_clients(4_000);
    wait_until(
        Duration::from_secs(10),
        "the escaped process killed at the lost lease",
        || (!alive(pid)).then_some(()),
    );
    assert_eq!(outcome_status(&redis, "lease"), "lost_lease");

    // At shutdown (after the 5 s shutdown grace).
    trigger(&config_arg, "shutdown");
    let pid = escaped_pid(pids.path(), "shutdown");
    replica.sigterm();
    replica
        .wait_exit(Duration::from_secs(30))
        .expect("the replica stops");
    wait_until(
        Duration::from_secs(10),
        "the escaped process killed at shutdown",
        || (!alive(pid)).then_some(()),
    );
    assert_eq!(outcome_status(&redis, "shutdown"), "interrupted");
    let log = replica.log();
    assert!(!log.contains("survive SIGKILL"), "{log}");
}

#[test]
fn nothing_a_run_starts_outlives_it_in_a_cgroup() {
    nothing_escapes("cgroup");
}

#[test]
fn nothing_a_run_starts_outlives_it_without_cgroups() {
    nothing_escapes("process_group");
}

/// A job that burns about 0.3 s of CPU, then holds about 100 MB (perl
/// builds a 50 MB string by way of a copy), then says so through the FIFO
/// `fifo`; and one that sleeps on that FIFO beside it (no CPU), and one
/// second more, so it ends after the busy one was reaped.
fn busy_and_idle(fifo: &Path) -> String {
    format!(
        r#"[jobs.busy]
schedule = "0 0 1 1 *"
timeout = "60s"
shell = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; perl -e '$x = \"a\" x 50_000_000'; echo done > {fifo}"

[jobs.idle]
schedule = "0 0 1 1 *"
timeout = "60s"
shell = "read word < {fifo}; sleep 1"
"#,
        fifo = fifo.display()
    )
}

/// The outcome's `field`, a number.
fn number(outcome: Option<&Outcome>, field: &str) -> Option<u64> {
    outcome?.field(field)?.parse().ok()
}

/// Every outcome records its run's CPU time and peak memory, and only its
/// own: two runs side by side, one busy, one idle.
fn usage_is_each_runs_own(mode: &str) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}: {made}", fifo.display());
    let config = write_config(
        dir.path(),
        &redis.url(),
        &format!("metrics_listen = \"\"\ndashboard_listen = \"\"\ncontainment = \"{mode}\""),
        &busy_and_idle(&fifo),
    );
    let config_arg = config.to_string_lossy().to_string();
    let replica = Replica::start(&config, "a");
    replica.wait_for_log("ready", Duration::from_secs(30));
    trigger(&config_arg, "idle");
    trigger(&config_arg, "busy");
    assert_eq!(outcome_status(&redis, "busy"), "ok");
    assert_eq!(outcome_status(&redis, "idle"), "ok");
    let mut conn = redis.client();
    let (busy, idle) = (
        read_outcomes(&mut conn, "cl", "busy"),
        read_outcomes(&mut conn, "cl", "idle"),
    );
    let figures = |outcomes: &[Outcome]| {
        (
            number(outcomes.last(), "cpu_ms"),
            number(outcomes.last(), "peak_memory_kb"),
        )
    };
    let (busy, idle) = (figures(&busy), figures(&idle));
    // Without the cgroup's memory.peak, a command's process counts the
    // replica's peak resident set too (it shared the replica's memory
    // until exec: the guide, "Runs and their processes"): a figure is
    // the run's own only above it.
    let replica_kb = peak_rss_kb(replica.pid());
    // CPU time, unlike wall time, does not stretch on a busy machine: the
    // loop takes about 300 ms of it, the sleeping shell a few.
    assert!(
        matches!(busy, (Some(cpu), Some(kb)) if cpu >= 100 && kb > replica_kb + 40_000),
        "busy: (cpu_ms, peak_memory_kb) {busy:?} in mode {mode}, replica's peak {replica_kb} kB"
    );
    // The idle run's `ru_maxrss` is the replica's peak, which says
    // nothing of the run: it is not recorded. The cgroup's `memory.peak`,
    // where there is one, is the run's own.
    let idle_peak_ok = |kb: Option<u64>| match kb {
        Some(kb) => mode == "cgroup" && v2_offers("memory") && kb < replica_kb + 20_000,
        None => !(mode == "cgroup" && v2_offers("memory")),
    };
    assert!(
        matches!(idle, (Some(cpu), kb) if cpu < 50 && idle_peak_ok(kb)),
        "idle: (cpu_ms, peak_memory_kb) {idle:?} beside busy {busy:?} in mode {mode}, replica's peak {replica_kb} kB"
    );
}

#[test]
fn usage_is_each_runs_own_in_a_cgroup() {
    usage_is_each_runs_own("cgroup");
}

#[test]
fn usage_is_each_runs_own_without_cgroups() {
    usage_is_each_runs_own("process_group");
}

/// Whether the cgroup v2 root of this host offers `controller`.
fn v2_offers(controller: &str) -> bool {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let Some(mount) = mountinfo.lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(str::to_string))?
    }) else {
        return false;
    };
    std::fs::read_to_string(format!("{mount}/cgroup.controllers"))
        .is_ok_and(|c| c.split_whitespace().any(|w| w == controller))
}

/// A replica with a job limited to 64 MB that wants 200 MB.
fn limited(dir: &Path, redis: &RedisServer, mode: &str) -> std::path::PathBuf {
    write_config(
        dir,
        &redis.url(),
        &format!("metrics_listen = \"\"\ndashboard_listen = \"\"\ncontainment = \"{mode}\""),
        "[jobs.hog]\nschedule = \"0 0 1 1 *\"\nmemory_max = \"64M\"\n\
         command = [\"python3\", \"-c\", \"x = bytearray(200 * 1024 * 1024)\"]\n",
    )
}

#[test]
fn limits_are_refused_where_their_controller_is_missing_and_enforced_where_it_is() {
    let redis = RedisServer::start();
    // Without cgroups a limit cannot be had: the replica says so and stops.
    let dir = tempfile::tempdir().unwrap();
    let run = cronlease([
        "run".to_string(),
        "--config".to_string(),
        limited(dir.path(), &redis, "process_group")
            .to_string_lossy()
            .to_string(),
    ])
    .expect_code(2);
    assert!(
        run.stderr().contains("job \"hog\": its memory_max, cpu_max or tasks_max cannot be applied: limits need runs in cgroups"),
        "{}",
        run.describe()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = limited(dir.path(), &redis, "cgroup");
    if !v2_offers("memory") {
        // This host's memory controller is cgroup v1's (a hybrid host).
        let run = cronlease([
            "run".to_string(),
            "--config".to_string(),
            config.to_string_lossy().to_string(),
        ])
        .expect_code(2);
        assert!(
            run.stderr()
                .contains("the memory controller is not available to the runs' cgroups under"),
            "{}",
            run.describe()
        );
        return;
    }
    // Where it is: the run is killed by the OOM killer, and says so.
    let config_arg = config.to_string_lossy().to_string();
    let replica = Replica::start(&config, "a");
    replica.wait_for_log("ready", Duration::from_secs(30));
    trigger(&config_arg, "hog");
    assert_eq!(outcome_status(&redis, "hog"), "failed");
    let mut conn = redis.client();
    let hog = read_outcomes(&mut conn, "cl", "hog");
    let last = hog.last().expect("an outcome");
    assert!(
        last.field("oom_kills").is_some_and(|n| n != "0"),
        "{:?}",
        last.fields
    );
}
