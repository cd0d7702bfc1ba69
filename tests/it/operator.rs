//! The operator commands — `status`, `history`, `trigger`, `pause`,
//! `resume` and `lock` — run as an operator would, against real replicas
//! and a private redis-server, and checked through their output, their exit
//! status, the outcome streams and the jobs' side effects.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    Cluster, Outcome, RedisServer, Run, binary, probe_job, starts, toml_string, wait_until,
    write_config,
};

/// The longest any operator command may take before the test calls it hung.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

/// One stream's entries in an `XREADGROUP` reply: the stream, then each
/// entry's id and flat field/value list.
type StreamEntries = (String, Vec<(String, Vec<String>)>);

/// A `cronlease` process started in the background, its stdout and stderr
/// going to files. Dropping it kills it with SIGKILL.
struct Background {
    command: String,
    child: Child,
    started: Instant,
    stdout: std::path::PathBuf,
    stderr: std::path::PathBuf,
    reaped: bool,
    /// Holds the output files.
    _dir: tempfile::TempDir,
}

impl Background {
    fn spawn<I, S>(args: I) -> Background
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let dir = tempfile::Builder::new()
            .prefix("cronlease-op-")
            .tempdir()
            .expect("cannot create a temporary directory");
        let stdout = dir.path().join("stdout");
        let stderr = dir.path().join("stderr");
        let create = |path: &Path| {
            File::create(path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()))
        };
        let mut command = Command::new(binary());
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(create(&stdout))
            .stderr(create(&stderr))
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .env_remove("CRONLEASE_CONFIG");
        let shown = format!("{command:?}");
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
        Background {
            command: shown,
            child,
            started: Instant::now(),
            stdout,
            stderr,
            reaped: false,
            _dir: dir,
        }
    }

    /// Waits for the process to exit and returns what it did.
    ///
    /// # Panics
    ///
    /// After `timeout` (the process is killed first), with its output.
    #[track_caller]
    fn wait(&mut self, timeout: Duration) -> Run {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.reaped = true;
                    return Run {
                        command: self.command.clone(),
                        output: Output {
                            status,
                            stdout: std::fs::read(&self.stdout).unwrap_or_default(),
                            stderr: std::fs::read(&self.stderr).unwrap_or_default(),
                        },
                    };
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    self.reaped = true;
                    panic!(
                        "{} did not exit within {timeout:?}\n--- stdout\n{}\n--- stderr\n{}",
                        self.command,
                        String::from_utf8_lossy(&std::fs::read(&self.stdout).unwrap_or_default()),
                        String::from_utf8_lossy(&std::fs::read(&self.stderr).unwrap_or_default()),
                    );
                }
                Err(e) => panic!("cannot wait for {}: {e}", self.command),
            }
        }
    }

    /// How long ago the process was started.
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `cronlease ARGS…` to completion (at most [`COMMAND_TIMEOUT`]).
#[track_caller]
fn op<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Background::spawn(args).wait(COMMAND_TIMEOUT)
}

/// `ARGS… --config CONFIG` as the arguments of [`op`].
fn with_config(args: &[&str], config: &Path) -> Vec<OsString> {
    let mut all: Vec<OsString> = args.iter().map(OsString::from).collect();
    all.push("--config".into());
    all.push(config.into());
    all
}

/// Parses stdout as exactly one JSON object (anything after it is an error).
#[track_caller]
fn json_of(run: Run) -> Value {
    let run = run.expect_code(0);
    let value: Value = serde_json::from_str(run.stdout().trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not exactly one JSON value: {e}\n{}",
            run.describe()
        )
    });
    assert!(value.is_object(), "not a JSON object\n{}", run.describe());
    value
}

/// `cronlease status --json --config CONFIG`.
#[track_caller]
fn status(config: &Path) -> Value {
    json_of(op(with_config(&["status", "--json"], config)))
}

/// Polls `status --json` (through `args`) until `ready` holds; panics with
/// the last report after `timeout`.
#[track_caller]
fn wait_for_status(
    args: &[OsString],
    timeout: Duration,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        let report = json_of(op(args));
        if ready(&report) {
            return report;
        }
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; last report:\n{}",
                serde_json::to_string_pretty(&report).unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The element of the array `list` whose `key` is `value`.
#[track_caller]
fn find<'a>(list: &'a Value, key: &str, value: &str) -> &'a Value {
    list.as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .find(|item| item[key] == value)
        .unwrap_or_else(|| panic!("no element with {key} = {value:?} in {list:#}"))
}

/// Whether the array `list` has an element whose `key` is `value`.
fn has(list: &Value, key: &str, value: &str) -> bool {
    list.as_array()
        .is_some_and(|items| items.iter().any(|item| item[key] == value))
}

/// The strings of a JSON array, sorted.
#[track_caller]
fn strings(list: &Value) -> Vec<String> {
    let mut items: Vec<String> = list
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {list}"))
        .iter()
        .map(|item| {
            item.as_str()
                .unwrap_or_else(|| panic!("not a string: {item} in {list}"))
                .to_string()
        })
        .collect();
    items.sort();
    items
}

#[track_caller]
fn int(value: &Value, what: &str) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("{what} is not an integer: {value}"))
}

/// An RFC 3339 instant as ms since the epoch.
#[track_caller]
fn rfc3339_ms(value: &Value, what: &str) -> i64 {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value}"));
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("{what} = {text:?} is not RFC 3339: {e}"))
        .timestamp_millis()
}

/// Redis `TIME` in ms.
#[track_caller]
fn redis_now_ms(redis: &mut redis::Connection) -> i64 {
    let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(redis).expect("TIME failed");
    seconds * 1000 + micros / 1000
}

#[track_caller]
fn hget(redis: &mut redis::Connection, key: &str, field: &str) -> Option<String> {
    redis::cmd("HGET")
        .arg(key)
        .arg(field)
        .query(redis)
        .unwrap_or_else(|e| panic!("HGET {key} {field} failed: {e}"))
}

/// A job's high-water mark, `HGET cl:{JOB}:state last_tick`.
#[track_caller]
fn last_tick(cluster: &Cluster, job: &str) -> Option<i64> {
    hget(
        &mut cluster.redis.client(),
        &format!("cl:{{{job}}}:state"),
        "last_tick",
    )
    .map(|text| text.parse().expect("last_tick is not an integer"))
}

/// The outcomes of `job` with run id `run_id`.
fn outcomes_of(cluster: &Cluster, job: &str, run_id: &str) -> Vec<Outcome> {
    cluster
        .outcomes(job)
        .into_iter()
        .filter(|o| o.field("run_id") == Some(run_id))
        .collect()
}

/// Waits for the one outcome of run `run_id` of `job`.
#[track_caller]
fn wait_for_outcome(cluster: &Cluster, job: &str, run_id: &str, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    loop {
        let found = outcomes_of(cluster, job, run_id);
        if let Some(outcome) = found.first() {
            return outcome.clone();
        }
        if Instant::now() >= deadline {
            panic!(
                "no outcome of {job} with run id {run_id} within {timeout:?}; stream: {:#?}\n{}",
                cluster.outcomes(job),
                cluster.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first line of stdout, which `trigger` makes the run id; checked to
/// be a UUID.
#[track_caller]
fn run_id_of(run: &Run) -> String {
    let stdout = run.stdout();
    let first = stdout.lines().next().unwrap_or("").trim().to_string();
    assert!(
        uuid::Uuid::parse_str(&first).is_ok(),
        "the first line of stdout is not a run id (UUID)\n{}",
        run.describe()
    );
    first
}

/// The non-empty lines of a file (none when it does not exist).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// Asserts the exit status and that stderr is one line starting with
/// `error: ` and no panic.
#[track_caller]
fn expect_error(run: &Run, code: i32) {
    assert_eq!(
        run.code(),
        Some(code),
        "unexpected exit status\n{}",
        run.describe()
    );
    let stderr = run.stderr();
    assert!(
        !stderr.contains("panicked"),
        "the command panicked\n{}",
        run.describe()
    );
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "stderr is not one line\n{}", run.describe());
    assert!(
        lines[0].starts_with("error: "),
        "stderr does not start with `error: `\n{}",
        run.describe()
    );
}

// ---------------------------------------------------------------- status

#[test]
fn status_names_and_skips_an_unreadable_heartbeat_record() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "",
        "[jobs.daily]\nschedule = \"@daily\"\ncommand = [\"true\"]\n",
    );
    let _: () = redis::cmd("HSET")
        .arg("cl:replicas")
        .arg("broken")
        .arg("{\"host\": 3")
        .query(&mut redis.client())
        .expect("HSET");
    let run = op(with_config(&["status", "--json"], &config)).expect_code(0);
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert!(!has(&report["replicas"], "id", "broken"), "{report}");
    let stderr = run.stderr();
    assert!(
        stderr.contains("unreadable heartbeat record") && stderr.contains("broken"),
        "{}",
        run.describe()
    );
}

#[test]
fn history_and_status_name_and_skip_outcomes_that_are_not_ours() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "",
        "[jobs.daily]\nschedule = \"@daily\"\ncommand = [\"true\"]\n",
    );
    let mut conn = redis.client();
    for (status, trigger) in [("ok", "schedule"), ("bogus", "schedule"), ("ok", "whim")] {
        let _: String = redis::cmd("XADD")
            .arg("cl:{daily}:runs")
            .arg("*")
            .arg(&[
                "status",
                status,
                "trigger",
                trigger,
                "tick",
                "1795000000000",
                "fence",
                "1",
            ])
            .query(&mut conn)
            .expect("XADD");
    }
    let _: () = redis::cmd("HSET")
        .arg("cl:{daily}:state")
        .arg(&["outcome_status", "bogus", "outcome_tick", "1795000000000"])
        .query(&mut conn)
        .expect("HSET");

    let run = op(with_config(&["history", "daily", "--json"], &config)).expect_code(0);
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(
        report["outcomes"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["outcomes"][0]["status"], "ok", "{report}");
    let reasons: Vec<&str> = report["unreadable"]
        .as_array()
        .map(|bad| bad.iter().filter_map(|b| b["reason"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        reasons,
        ["unknown trigger \"whim\"", "unknown status \"bogus\""],
        "{report}"
    );
    let human = op(with_config(&["history", "daily"], &config)).expect_code(0);
    assert!(
        human
            .stdout()
            .contains("unreadable: unknown status \"bogus\""),
        "{}",
        human.describe()
    );

    let run = op(with_config(&["status", "--json"], &config)).expect_code(0);
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert!(
        find(&report["jobs"], "name", "daily")["last_outcome"].is_null(),
        "{report}"
    );
    assert!(
        run.stderr().contains("unreadable last outcome"),
        "{}",
        run.describe()
    );
}

#[test]
fn status_names_a_job_whose_schedule_has_ended() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let jobs = "[jobs.once]\nschedule = \"0 0 12 1 6 * 2020\"\ncommand = [\"true\"]\n\
                [jobs.daily]\nschedule = \"@daily\"\ncommand = [\"true\"]\n";
    let config = write_config(dir.path(), &redis.url(), "", jobs);
    let report = status(&config);
    let once = find(&report["jobs"], "name", "once");
    assert_eq!(once["next_tick"], Value::Null, "{report}");
    let warning = once["warning"].as_str().unwrap_or_default();
    assert!(warning.contains("its year field ends at 2020"), "{report}");
    assert_eq!(
        find(&report["jobs"], "name", "daily")["warning"],
        Value::Null
    );
    let text = op(with_config(&["status"], &config))
        .expect_code(0)
        .stdout();
    for needle in [
        "never (see warnings)",
        "warnings (1):",
        "job \"once\": schedule",
    ] {
        assert!(text.contains(needle), "`status` lacks {needle:?}\n{text}");
    }
}

#[test]
fn status_shows_replicas_jobs_and_outcomes_and_a_dead_replica() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("beat");
    // One workdir for all: the default, each config's own directory, would
    // be drift.
    let workdir = format!(
        "workdir = {}",
        toml_string(&cluster.dir.path().to_string_lossy())
    );
    let jobs = probe_job("beat", "* * * * * *", &file, "true", &workdir);
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "3 outcomes of beat", || {
        (cluster.outcomes("beat").len() >= 3).then_some(())
    });
    let config = cluster.config_path("alpha");
    let stream_before = cluster.outcomes("beat");
    let last_tick_before = stream_before.iter().map(Outcome::tick).max().unwrap();

    let report = status(&config);
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(report["prefix"], "cl", "{shown}");
    let now_ms = int(&report["now_ms"], "now_ms");
    let redis_now = redis_now_ms(&mut cluster.redis.client());
    assert!(
        (0..10_000).contains(&(redis_now - now_ms)),
        "now_ms {now_ms} is not Redis time (now {redis_now})\n{shown}"
    );

    // Replicas: both, alive, with what their heartbeats say.
    let replicas = &report["replicas"];
    let ids: Vec<String> = replicas
        .as_array()
        .unwrap_or_else(|| panic!("replicas is not an array\n{shown}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap_or_default().to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(ids, ["alpha", "bravo"], "{shown}");
    for name in ["alpha", "bravo"] {
        let replica = find(replicas, "id", name);
        assert_eq!(replica["alive"], true, "{name}\n{shown}");
        assert!(
            replica["host"].as_str().is_some_and(|h| !h.is_empty()),
            "{name} has no host\n{shown}"
        );
        assert_eq!(
            replica["version"],
            env!("CARGO_PKG_VERSION"),
            "{name}\n{shown}"
        );
        let pid = cluster.replicas[cluster.index_of(name)].pid();
        assert_eq!(int(&replica["pid"], "pid"), i64::from(pid), "{shown}");
        let started = int(&replica["started_ms"], "started_ms");
        let seen = int(&replica["last_seen_ms"], "last_seen_ms");
        assert!(started <= seen, "{name}: started after last seen\n{shown}");
        assert!(
            now_ms - seen <= 3_000,
            "{name}: last seen {} ms ago, yet alive\n{shown}",
            now_ms - seen
        );
        for run in replica["runs"]
            .as_array()
            .unwrap_or_else(|| panic!("{name}: runs is not an array\n{shown}"))
        {
            assert_eq!(run["job"], "beat", "{shown}");
            assert!(run["run_id"].is_string(), "{shown}");
            int(&run["tick_ms"], "runs[].tick_ms");
            int(&run["fence"], "runs[].fence");
        }
    }

    // The job: from the config, with its next tick and last outcome.
    let jobs = report["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("jobs is not an array\n{shown}"));
    assert_eq!(jobs.len(), 1, "{shown}");
    let beat = find(&report["jobs"], "name", "beat");
    assert_eq!(beat["schedule"], "* * * * * *", "{shown}");
    assert_eq!(beat["timezone"], "UTC", "{shown}");
    let next = rfc3339_ms(&beat["next_tick"], "next_tick");
    assert_eq!(next % 1000, 0, "next_tick is not a whole second\n{shown}");
    assert!(
        next > now_ms - 1_000 && next <= now_ms + 2_000,
        "next_tick {next} is not the next second after now {now_ms}\n{shown}"
    );
    assert_eq!(beat["paused"], false, "{shown}");
    assert!(beat["paused_by"].is_null(), "{shown}");
    assert!(beat["paused_at_ms"].is_null(), "{shown}");
    for run in beat["running"]
        .as_array()
        .unwrap_or_else(|| panic!("running is not an array\n{shown}"))
    {
        assert!(
            run["replica"] == "alpha" || run["replica"] == "bravo",
            "{shown}"
        );
        assert!(run["run_id"].is_string(), "{shown}");
        int(&run["tick_ms"], "running[].tick_ms");
        int(&run["fence"], "running[].fence");
        int(&run["started_ms"], "running[].started_ms");
    }
    let last = &beat["last_outcome"];
    assert_eq!(last["status"], "ok", "{shown}");
    let last_tick_ms = int(&last["tick_ms"], "last_outcome.tick_ms");
    assert!(
        last_tick_ms >= last_tick_before,
        "last_outcome is older than the newest outcome before the call ({last_tick_before})\n{shown}"
    );
    let recorded = cluster
        .outcomes("beat")
        .into_iter()
        .find(|o| o.tick() == last_tick_ms && !o.stale())
        .unwrap_or_else(|| panic!("last_outcome's tick is not in the stream\n{shown}"));
    assert_eq!(last["replica"], recorded.replica(), "{shown}");
    assert_eq!(int(&last["fence"], "fence"), recorded.fence(), "{shown}");
    assert!(int(&last["duration_ms"], "duration_ms") >= 0, "{shown}");
    assert!(
        int(&last["finished_ms"], "finished_ms") >= last_tick_ms,
        "{shown}"
    );
    assert_eq!(
        strings(&beat["config_drift"]),
        Vec::<String>::new(),
        "{shown}"
    );

    // The human view names both replicas and the job.
    let human = op(with_config(&["status"], &config)).expect_code(0);
    for needle in ["alpha", "bravo", "beat"] {
        assert!(
            human.stdout().contains(needle),
            "`status` does not mention {needle}\n{}",
            human.describe()
        );
    }
    assert!(
        !human.stdout().contains('\x1b'),
        "colour without a terminal\n{}",
        human.describe()
    );

    // A replica killed with -9 stops being alive once its heartbeat is
    // older than max(3 heartbeats, lease) = 3 s.
    let bravo = cluster.index_of("bravo");
    cluster.replicas[bravo].kill9();
    let killed = Instant::now();
    let report = wait_for_status(
        &with_config(&["status", "--json"], &config),
        Duration::from_secs(20),
        "bravo shown as not alive",
        |report| {
            has(&report["replicas"], "id", "bravo")
                && find(&report["replicas"], "id", "bravo")["alive"] == false
        },
    );
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert!(
        killed.elapsed() >= Duration::from_millis(1_500),
        "bravo was declared dead {:?} after kill -9, before its heartbeat could be 3 s old\n{shown}",
        killed.elapsed()
    );
    let dead = find(&report["replicas"], "id", "bravo");
    let age = int(&report["now_ms"], "now_ms") - int(&dead["last_seen_ms"], "last_seen_ms");
    assert!(age > 3_000, "dead although last seen {age} ms ago\n{shown}");
    assert_eq!(
        find(&report["replicas"], "id", "alpha")["alive"],
        true,
        "{shown}"
    );

    // Without a config: the jobs come from the heartbeats, without schedules.
    let url = cluster.redis.url();
    let report = json_of(op([
        "status",
        "--redis-url",
        &url,
        "--prefix",
        "cl",
        "--json",
    ]));
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(report["prefix"], "cl", "{shown}");
    assert_eq!(
        find(&report["replicas"], "id", "alpha")["alive"],
        true,
        "{shown}"
    );
    let beat = find(&report["jobs"], "name", "beat");
    assert!(beat["schedule"].is_null(), "{shown}");
    assert!(beat["timezone"].is_null(), "{shown}");
    assert!(beat["next_tick"].is_null(), "{shown}");
    assert_eq!(beat["paused"], false, "{shown}");
    assert_eq!(beat["last_outcome"]["status"], "ok", "{shown}");
    assert_eq!(
        strings(&beat["config_drift"]),
        Vec::<String>::new(),
        "{shown}"
    );
}

#[test]
fn status_names_the_replicas_whose_job_definition_drifted() {
    let mut cluster = Cluster::new(RedisServer::start());
    // The hash covers the resolved workdir, which defaults to each config's
    // own directory: give every replica the same one.
    let workdir = toml_string(&cluster.dir.path().to_string_lossy());
    let jobs = |timeout: &str| {
        format!(
            "[jobs.same]\nschedule = \"{NEVER}\"\nshell = \"true\"\nworkdir = {workdir}\n\n\
             [jobs.differ]\nschedule = \"{NEVER}\"\nshell = \"true\"\nworkdir = {workdir}\n\
             timeout = \"{timeout}\"\n"
        )
    };
    cluster.start("alpha", &jobs("10s"));
    cluster.start("bravo", &jobs("20s"));
    cluster.start("charlie", &jobs("10s"));
    cluster.wait_ready();
    let all_alive = |report: &Value| {
        ["alpha", "bravo", "charlie"].iter().all(|name| {
            has(&report["replicas"], "id", name)
                && find(&report["replicas"], "id", name)["alive"] == true
        })
    };

    // Against alpha's table, bravo differs.
    let report = wait_for_status(
        &with_config(&["status", "--json"], &cluster.config_path("alpha")),
        Duration::from_secs(20),
        "three live replicas",
        all_alive,
    );
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(
        strings(&find(&report["jobs"], "name", "differ")["config_drift"]),
        ["bravo"],
        "{shown}"
    );
    assert_eq!(
        strings(&find(&report["jobs"], "name", "same")["config_drift"]),
        Vec::<String>::new(),
        "{shown}"
    );

    // Against bravo's table, the two others differ.
    let report = status(&cluster.config_path("bravo"));
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(
        strings(&find(&report["jobs"], "name", "differ")["config_drift"]),
        ["alpha", "charlie"],
        "{shown}"
    );
    assert_eq!(
        strings(&find(&report["jobs"], "name", "same")["config_drift"]),
        Vec::<String>::new(),
        "{shown}"
    );

    // Without a config, the odd one out of the largest group.
    let url = cluster.redis.url();
    let report = json_of(op([
        "status",
        "--json",
        "--redis-url",
        &url,
        "--prefix",
        "cl",
    ]));
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(
        strings(&find(&report["jobs"], "name", "differ")["config_drift"]),
        ["bravo"],
        "{shown}"
    );
    assert_eq!(
        strings(&find(&report["jobs"], "name", "same")["config_drift"]),
        Vec::<String>::new(),
        "{shown}"
    );

    // The hashes are not in the records every replica reads at every
    // heartbeat, but apart, written when the table changes.
    let mut conn = cluster.redis.client();
    let mut json = |key: &str| -> Value {
        let raw = hget(&mut conn, key, "bravo").unwrap_or_else(|| panic!("no bravo in {key}"));
        serde_json::from_str(&raw).unwrap()
    };
    let record = json("cl:replicas");
    assert_eq!(record["config_hash"], serde_json::json!({}), "{record}");
    let hashes = json("cl:{cl:replicas}:jobs");
    assert_eq!(
        hashes
            .as_object()
            .map(|jobs| jobs.keys().cloned().collect::<Vec<_>>()),
        Some(vec!["differ".to_string(), "same".to_string()]),
        "{hashes}"
    );

    // Hashes that do not parse are named and skipped: bravo's drift is
    // then unknown, not a difference.
    let _: () = redis::cmd("HSET")
        .arg("cl:{cl:replicas}:jobs")
        .arg("bravo")
        .arg("{\"differ\": 3")
        .query(&mut conn)
        .expect("HSET");
    let run = op(with_config(
        &["status", "--json"],
        &cluster.config_path("alpha"),
    ))
    .expect_code(0);
    let report: Value = serde_json::from_str(&run.stdout()).unwrap();
    assert_eq!(
        strings(&find(&report["jobs"], "name", "differ")["config_drift"]),
        Vec::<String>::new(),
        "{report}"
    );
    assert!(
        run.stderr().contains("unreadable job hashes") && run.stderr().contains("bravo"),
        "{}",
        run.stderr()
    );

    // Lost (Redis lost them, or someone deleted them): each replica
    // writes its own again at its next heartbeat.
    let _: () = redis::cmd("DEL")
        .arg("cl:{cl:replicas}:jobs")
        .query(&mut conn)
        .expect("DEL");
    let report = wait_for_status(
        &with_config(&["status", "--json"], &cluster.config_path("alpha")),
        Duration::from_secs(20),
        "bravo's drift shown again",
        |report| strings(&find(&report["jobs"], "name", "differ")["config_drift"]) == ["bravo"],
    );
    assert!(all_alive(&report), "{report}");
}

// ---------------------------------------------------------------- history

#[test]
fn history_lists_the_newest_outcomes_first_with_their_output() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = "[jobs.echoer]\nschedule = \"* * * * * *\"\n\
                shell = 'echo \"hello $CRONLEASE_FENCE\"'\n";
    cluster.start("alpha", jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "3 outcomes of echoer", || {
        (cluster.outcomes("echoer").len() >= 3).then_some(())
    });
    // A stopped cluster keeps the stream still while it is compared.
    cluster.stop_all();
    let config = cluster.config_path("alpha");
    let stream = cluster.outcomes("echoer");
    let newest: Vec<&Outcome> = stream.iter().rev().take(2).collect();

    let report = json_of(op(with_config(
        &["history", "echoer", "-n", "2", "--json"],
        &config,
    )));
    let shown = serde_json::to_string_pretty(&report).unwrap();
    assert_eq!(report["job"], "echoer", "{shown}");
    let listed = report["outcomes"]
        .as_array()
        .unwrap_or_else(|| panic!("outcomes is not an array\n{shown}"));
    assert_eq!(listed.len(), 2, "{shown}");
    assert!(
        int(&listed[0]["tick_ms"], "tick_ms") > int(&listed[1]["tick_ms"], "tick_ms"),
        "not newest first\n{shown}"
    );
    for (entry, outcome) in listed.iter().zip(&newest) {
        let field_int = |name: &str| -> Option<i64> {
            outcome
                .field(name)
                .filter(|text| !text.is_empty())
                .map(|text| text.parse().unwrap())
        };
        assert_eq!(entry["id"], outcome.id.as_str(), "{shown}\n{outcome:?}");
        assert_eq!(int(&entry["tick_ms"], "tick_ms"), outcome.tick(), "{shown}");
        assert_eq!(
            rfc3339_ms(&entry["tick"], "tick"),
            outcome.tick(),
            "{shown}"
        );
        assert_eq!(entry["status"], "ok", "{shown}");
        assert_eq!(entry["status"], outcome.status(), "{shown}");
        assert_eq!(entry["replica"], "alpha", "{shown}");
        assert_eq!(int(&entry["fence"], "fence"), outcome.fence(), "{shown}");
        assert_eq!(
            entry["duration_ms"].as_i64(),
            field_int("duration_ms"),
            "{shown}\n{outcome:?}"
        );
        assert_eq!(entry["exit_code"], 0, "{shown}");
        assert!(entry["signal"].is_null(), "{shown}");
        assert_eq!(int(&entry["attempts"], "attempts"), 1, "{shown}");
        assert_eq!(
            entry["trigger"],
            outcome.field("trigger").unwrap_or("schedule"),
            "{shown}"
        );
        assert_eq!(entry["stale"], false, "{shown}");
        assert!(
            entry.get("output").is_none(),
            "output without --output\n{shown}"
        );
    }

    // --output adds the tail.
    let report = json_of(op(with_config(
        &["history", "echoer", "-n", "2", "--json", "--output"],
        &config,
    )));
    let shown = serde_json::to_string_pretty(&report).unwrap();
    for (entry, outcome) in report["outcomes"].as_array().unwrap().iter().zip(&newest) {
        let output = entry["output"]
            .as_str()
            .unwrap_or_else(|| panic!("no output with --output\n{shown}"));
        assert!(
            output.contains(&format!("hello {}", outcome.fence())),
            "{shown}"
        );
    }

    // The default is 20, here more than there are.
    let report = json_of(op(with_config(&["history", "echoer", "--json"], &config)));
    assert_eq!(
        report["outcomes"].as_array().map(Vec::len),
        Some(stream.len().min(20)),
        "{report:#}"
    );

    // The table: a header, then one row per outcome.
    let human = op(with_config(&["history", "echoer", "-n", "2"], &config)).expect_code(0);
    let stdout = human.stdout();
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    let header = lines.first().copied().unwrap_or("");
    for column in [
        "tick", "status", "replica", "fence", "duration", "cpu", "peak mem", "exit", "trigger",
    ] {
        assert!(
            header.contains(column),
            "the header lacks {column}\n{}",
            human.describe()
        );
    }
    assert_eq!(
        lines.iter().filter(|l| l.contains("alpha")).count(),
        2,
        "not two rows\n{}",
        human.describe()
    );
    assert!(
        lines[1..].iter().all(|l| !l.contains("hello")),
        "output without --output\n{}",
        human.describe()
    );
    let human = op(with_config(
        &["history", "echoer", "-n", "2", "--output"],
        &config,
    ))
    .expect_code(0);
    for outcome in &newest {
        assert!(
            human
                .stdout()
                .contains(&format!("hello {}", outcome.fence())),
            "the output tail of fence {} is missing\n{}",
            outcome.fence(),
            human.describe()
        );
    }
}

// ---------------------------------------------------------------- trigger

/// A job that never fires on schedule and appends `RUN_ID FENCE TRIGGER`
/// to `file` when run, then runs `body`.
fn manual_job(name: &str, file: &Path, body: &str) -> String {
    format!(
        "[jobs.{name}]\nschedule = \"{NEVER}\"\noverlap = \"skip\"\nshell = '''\
         echo \"$CRONLEASE_RUN_ID $CRONLEASE_FENCE\" >> {file}; {body}'''\n\n",
        file = file.display()
    )
}

#[test]
fn trigger_runs_a_job_once_with_a_new_fence_and_leaves_the_schedule_alone() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("manual");
    let broken_file = cluster.path("broken");
    let jobs = manual_job("manual", &file, "true") + &manual_job("broken", &broken_file, "false");
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");

    let run = op(with_config(
        &["trigger", "manual", "--wait", "--timeout", "20s"],
        &config,
    ));
    let run = run.expect_code(0);
    let run_id = run_id_of(&run);
    assert!(
        run.stdout().lines().skip(1).any(|l| l.contains("ok")),
        "--wait did not print the status\n{}",
        run.describe()
    );
    let logs = cluster.logs();
    let found = outcomes_of(&cluster, "manual", &run_id);
    assert_eq!(found.len(), 1, "{found:#?}\n{logs}");
    let first = &found[0];
    assert_eq!(first.status(), "ok", "{first:?}");
    assert_eq!(first.field("trigger"), Some("manual"), "{first:?}");
    assert!(first.fence() >= 1, "{first:?}");

    // Longer than the lease: a request left unacknowledged would have been
    // claimed again by now.
    std::thread::sleep(Duration::from_secs(3));
    let logs = cluster.logs();
    let all = cluster.outcomes("manual");
    assert_eq!(
        all.len(),
        1,
        "a trigger ran more than once: {all:#?}\n{logs}"
    );
    let side = lines_of(&file);
    assert_eq!(
        side,
        [format!("{run_id} {}", first.fence())],
        "side effects\n{logs}"
    );
    assert_eq!(
        last_tick(&cluster, "manual"),
        None,
        "a manual run moved last_tick"
    );

    // A second trigger: another run id, a higher fence.
    let run = op(with_config(&["trigger", "manual"], &config)).expect_code(0);
    let second_id = run_id_of(&run);
    assert_ne!(second_id, run_id);
    let second = wait_for_outcome(&cluster, "manual", &second_id, Duration::from_secs(20));
    assert_eq!(second.status(), "ok", "{second:?}");
    assert_eq!(second.field("trigger"), Some("manual"), "{second:?}");
    assert!(
        second.fence() > first.fence(),
        "fence did not grow: {first:?} then {second:?}"
    );
    assert_eq!(last_tick(&cluster, "manual"), None);

    // A failing run: --wait exits 1 and says so.
    let run = op(with_config(
        &["trigger", "broken", "--wait", "--timeout", "20s"],
        &config,
    ));
    let run = run.expect_code(1);
    let broken_id = run_id_of(&run);
    assert!(
        run.stdout().contains("failed"),
        "--wait did not print the status\n{}",
        run.describe()
    );
    let broken = outcomes_of(&cluster, "broken", &broken_id);
    assert_eq!(broken.len(), 1, "{broken:#?}");
    assert_eq!(broken[0].status(), "failed", "{broken:?}");
    assert_eq!(broken[0].field("trigger"), Some("manual"), "{broken:?}");
    assert_eq!(lines_of(&broken_file).len(), 1);
}

#[test]
fn a_trigger_while_a_run_is_in_flight_is_skipped_under_overlap_skip() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("slow");
    let jobs = manual_job("slow", &file, "sleep 3");
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("alpha");

    let run = op(with_config(&["trigger", "slow"], &config)).expect_code(0);
    let first_id = run_id_of(&run);
    wait_until(Duration::from_secs(10), "the first run in flight", || {
        hget(&mut cluster.redis.client(), "cl:{slow}:running", &first_id).map(|_| ())
    });

    let run = op(with_config(
        &["trigger", "slow", "--wait", "--timeout", "20s"],
        &config,
    ));
    let run = run.expect_code(1);
    let second_id = run_id_of(&run);
    assert!(
        run.stdout().contains("skipped_overlap"),
        "--wait did not print the status\n{}",
        run.describe()
    );
    let skipped = outcomes_of(&cluster, "slow", &second_id);
    assert_eq!(skipped.len(), 1, "{skipped:#?}\n{}", cluster.logs());
    assert_eq!(skipped[0].status(), "skipped_overlap", "{skipped:?}");
    assert_eq!(skipped[0].field("trigger"), Some("manual"), "{skipped:?}");

    let first = wait_for_outcome(&cluster, "slow", &first_id, Duration::from_secs(20));
    assert_eq!(first.status(), "ok", "{first:?}");
    assert_eq!(first.field("trigger"), Some("manual"), "{first:?}");
    let side = lines_of(&file);
    assert_eq!(side.len(), 1, "{side:?}\n{}", cluster.logs());
    assert!(side[0].starts_with(&first_id), "{side:?}");
}

#[test]
fn a_trigger_pending_with_a_dead_consumer_is_taken_over_and_run_once() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("ghosted");
    let jobs = manual_job("ghosted", &file, "true");
    let run_id = uuid::Uuid::new_v4().to_string();

    // A consumer "ghost" reads the request and dies without acknowledging.
    let mut redis = cluster.redis.client();
    match redis::cmd("XGROUP")
        .arg("CREATE")
        .arg("cl:triggers")
        .arg("replicas")
        .arg("$")
        .arg("MKSTREAM")
        .query::<()>(&mut redis)
    {
        Ok(()) => {}
        Err(e) if e.code() == Some("BUSYGROUP") => {}
        Err(e) => panic!("XGROUP CREATE failed: {e}"),
    }
    let entry: String = redis::cmd("XADD")
        .arg("cl:triggers")
        .arg("*")
        .arg("job")
        .arg("ghosted")
        .arg("run_id")
        .arg(&run_id)
        .arg("requested_by")
        .arg("test")
        .query(&mut redis)
        .expect("XADD failed");
    let read: Vec<StreamEntries> = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("replicas")
        .arg("ghost")
        .arg("COUNT")
        .arg(1)
        .arg("STREAMS")
        .arg("cl:triggers")
        .arg(">")
        .query(&mut redis)
        .expect("XREADGROUP failed");
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!(read[0].1.len(), 1, "{read:?}");
    assert_eq!(read[0].1[0].0, entry, "{read:?}");
    let pending = |redis: &mut redis::Connection| -> Vec<(String, String, i64, i64)> {
        redis::cmd("XPENDING")
            .arg("cl:triggers")
            .arg("replicas")
            .arg("-")
            .arg("+")
            .arg(10)
            .query(redis)
            .expect("XPENDING failed")
    };
    let before = pending(&mut redis);
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(
        (before[0].0.as_str(), before[0].1.as_str()),
        (entry.as_str(), "ghost")
    );

    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    let outcome = wait_for_outcome(&cluster, "ghosted", &run_id, Duration::from_secs(15));
    assert_eq!(outcome.status(), "ok", "{outcome:?}");
    assert_eq!(outcome.field("trigger"), Some("manual"), "{outcome:?}");
    assert!(
        ["alpha", "bravo"].contains(&outcome.replica()),
        "{outcome:?}"
    );

    // Acknowledged once run, and run once.
    wait_until(Duration::from_secs(10), "the request acknowledged", || {
        pending(&mut redis).is_empty().then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let logs = cluster.logs();
    let all = cluster.outcomes("ghosted");
    assert_eq!(all.len(), 1, "{all:#?}\n{logs}");
    assert_eq!(
        lines_of(&file),
        [format!("{run_id} {}", outcome.fence())],
        "{logs}"
    );
    assert_eq!(last_tick(&cluster, "ghosted"), None);
}

// ---------------------------------------------------------------- pause

#[test]
fn pause_skips_ticks_and_resume_does_not_catch_them_up() {
    let mut cluster = Cluster::new(RedisServer::start());
    let file = cluster.path("beat");
    let jobs = probe_job("beat", "* * * * * *", &file, "true", "");
    cluster.start("alpha", &jobs);
    cluster.start("bravo", &jobs);
    cluster.wait_ready();
    wait_until(Duration::from_secs(20), "2 outcomes of beat", || {
        (cluster.outcomes("beat").len() >= 2).then_some(())
    });
    let config = cluster.config_path("alpha");

    let run = op(with_config(&["pause", "beat"], &config)).expect_code(0);
    assert_eq!(
        run.stdout().trim().lines().count(),
        1,
        "not a one-line confirmation\n{}",
        run.describe()
    );
    let report = status(&config);
    let shown = serde_json::to_string_pretty(&report).unwrap();
    let now_ms = int(&report["now_ms"], "now_ms");
    let beat = find(&report["jobs"], "name", "beat");
    assert_eq!(beat["paused"], true, "{shown}");
    assert!(
        beat["paused_by"].as_str().is_some_and(|by| !by.is_empty()),
        "{shown}"
    );
    let paused_at = int(&beat["paused_at_ms"], "paused_at_ms");
    assert!(
        (now_ms - 10_000..=now_ms).contains(&paused_at),
        "paused_at_ms {paused_at} vs now {now_ms}\n{shown}"
    );

    // A run claimed just before the pause may still finish; then nothing.
    std::thread::sleep(Duration::from_millis(1_500));
    let before = cluster.outcomes("beat");
    let mark_before = last_tick(&cluster, "beat").expect("no last_tick");
    std::thread::sleep(Duration::from_secs(3));
    let during = cluster.outcomes("beat");
    assert_eq!(
        during.len(),
        before.len(),
        "outcomes while paused: {:#?}\n{}",
        &during[before.len().min(during.len())..],
        cluster.logs()
    );
    let mark_after = last_tick(&cluster, "beat").expect("no last_tick");
    assert!(
        mark_after >= mark_before + 2_000,
        "last_tick did not move on while paused: {mark_before} then {mark_after}"
    );

    // A paused job refuses a trigger.
    let refused = op(with_config(&["trigger", "beat"], &config));
    assert_eq!(refused.code(), Some(1), "{}", refused.describe());
    assert!(
        refused.stderr().contains("paused"),
        "{}",
        refused.describe()
    );

    let resumed_at = redis_now_ms(&mut cluster.redis.client());
    let run = op(with_config(&["resume", "beat"], &config)).expect_code(0);
    assert_eq!(
        run.stdout().trim().lines().count(),
        1,
        "not a one-line confirmation\n{}",
        run.describe()
    );
    let report = status(&config);
    let shown = serde_json::to_string_pretty(&report).unwrap();
    let beat = find(&report["jobs"], "name", "beat");
    assert_eq!(beat["paused"], false, "{shown}");
    assert!(beat["paused_by"].is_null(), "{shown}");
    assert!(beat["paused_at_ms"].is_null(), "{shown}");

    wait_until(Duration::from_secs(15), "2 outcomes after resume", || {
        (cluster.outcomes("beat").len() >= during.len() + 2).then_some(())
    });
    let logs = cluster.logs();
    let after = cluster.outcomes("beat");
    let fresh = &after[during.len()..];
    for outcome in fresh {
        assert_eq!(
            outcome.field("trigger"),
            Some("schedule"),
            "a tick of the paused period was caught up: {outcome:?}\n{logs}"
        );
        assert!(
            outcome.tick() >= resumed_at - 1_500,
            "a tick from while paused ran after resume: {outcome:?} (resumed at {resumed_at})\n{logs}"
        );
        assert_eq!(outcome.status(), "ok", "{outcome:?}");
    }
    assert!(
        after.iter().all(|o| o.field("trigger") != Some("misfire")),
        "{after:#?}"
    );
    // The side effects agree: no start line for a tick inside the pause.
    for (tick, _, _) in starts(&file) {
        assert!(
            tick <= mark_before - 1_000 || tick >= resumed_at - 1_500,
            "tick {tick} ran inside the pause ({mark_before}..{resumed_at})\n{logs}"
        );
    }
}

// ---------------------------------------------------------------- lock

/// `lock NAME --redis-url URL --prefix cl EXTRA… -- CMD…`.
fn lock_args(redis: &RedisServer, name: &str, extra: &[&str], command: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "lock".into(),
        name.into(),
        "--redis-url".into(),
        redis.url(),
        "--prefix".into(),
        "cl".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args.push("--".into());
    args.extend(command.iter().map(|a| a.to_string()));
    args
}

#[test]
fn lock_runs_holders_one_after_the_other_and_wakes_the_waiter() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("log");
    let script = format!(
        "echo \"start $CRONLEASE_FENCE $CRONLEASE_LOCK $CRONLEASE_RUN_ID $(date +%s%3N)\" >> {f}; \
         sleep 2; \
         echo \"end $CRONLEASE_FENCE $(date +%s%3N)\" >> {f}",
        f = file.display()
    );
    let args = lock_args(&redis, "shared", &["--wait", "20s"], &["sh", "-c", &script]);
    let mut first = Background::spawn(&args);
    let mut second = Background::spawn(&args);
    let one = first.wait(Duration::from_secs(40)).expect_code(0);
    let two = second.wait(Duration::from_secs(40)).expect_code(0);
    assert!(
        second.elapsed() < Duration::from_secs(12),
        "the waiter was not woken by the release ({:?})\n{}\n{}",
        second.elapsed(),
        one.describe(),
        two.describe()
    );

    let lines = lines_of(&file);
    let shown = format!("{lines:#?}\n{}\n{}", one.describe(), two.describe());
    assert_eq!(lines.len(), 4, "{shown}");
    let fields: Vec<Vec<&str>> = lines
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let kinds: Vec<&str> = fields.iter().map(|f| f[0]).collect();
    assert_eq!(
        kinds,
        ["start", "end", "start", "end"],
        "interleaved: {shown}"
    );
    let fence = |i: usize| -> i64 { fields[i][1].parse().unwrap_or_else(|_| panic!("{shown}")) };
    let ms = |i: usize| -> i64 {
        fields[i]
            .last()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("{shown}"))
    };
    assert_eq!(fence(0), fence(1), "{shown}");
    assert_eq!(fence(2), fence(3), "{shown}");
    assert!(fence(0) >= 1, "{shown}");
    assert!(fence(2) > fence(0), "fences did not increase: {shown}");
    assert_eq!(
        fields[0].len(),
        5,
        "CRONLEASE_LOCK or _RUN_ID missing: {shown}"
    );
    assert_eq!(
        (fields[0][2], fields[2][2]),
        ("shared", "shared"),
        "{shown}"
    );
    assert_ne!(fields[0][3], fields[2][3], "the same run id twice: {shown}");
    let gap = ms(2) - ms(1);
    assert!(
        (0..2_000).contains(&gap),
        "the waiter started {gap} ms after the release: not woken by it\n{shown}"
    );

    // The next acquisition gets the next fence.
    let third = op(lock_args(
        &redis,
        "shared",
        &[],
        &["sh", "-c", "echo \"fence $CRONLEASE_FENCE\""],
    ))
    .expect_code(0);
    let fence3: i64 = third
        .stdout()
        .trim()
        .strip_prefix("fence ")
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no fence printed\n{}", third.describe()));
    assert!(fence3 > fence(2), "{shown}\n{}", third.describe());
}

#[test]
fn lock_held_elsewhere_fails_with_75_at_once_or_after_the_wait() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("holding");
    let never = dir.path().join("never");
    let mut holder = Background::spawn(lock_args(
        &redis,
        "held",
        &[],
        &["sh", "-c", &format!("touch {}; sleep 5", marker.display())],
    ));
    wait_until(Duration::from_secs(10), "the holder running", || {
        marker.exists().then_some(())
    });

    let touch_never = ["touch", never.to_str().unwrap()];
    let started = Instant::now();
    let refused = op(lock_args(&redis, "held", &[], &touch_never));
    let took = started.elapsed();
    assert_eq!(refused.code(), Some(75), "{}", refused.describe());
    assert!(
        took < Duration::from_millis(1_500),
        "not at once: {took:?}\n{}",
        refused.describe()
    );

    let started = Instant::now();
    let refused = op(lock_args(&redis, "held", &["--wait", "1s"], &touch_never));
    let took = started.elapsed();
    assert_eq!(refused.code(), Some(75), "{}", refused.describe());
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_millis(3_500),
        "--wait 1s gave up after {took:?}\n{}",
        refused.describe()
    );
    assert!(!never.exists(), "a refused command ran");

    holder.wait(Duration::from_secs(20)).expect_code(0);
    // Released: the next one gets it at once.
    op(lock_args(&redis, "held", &[], &touch_never)).expect_code(0);
    assert!(never.exists());
}

#[test]
fn lock_passes_the_command_status_and_output_through() {
    let redis = RedisServer::start();
    op(lock_args(&redis, "code", &[], &["sh", "-c", "exit 7"])).expect_code(7);
    op(lock_args(&redis, "code", &[], &["sh", "-c", "kill -9 $$"])).expect_code(128 + 9);
    let run = op(lock_args(
        &redis,
        "code",
        &[],
        &["sh", "-c", "echo \"out $CRONLEASE_LOCK\"; echo err >&2"],
    ))
    .expect_code(0);
    assert!(run.stdout().contains("out code"), "{}", run.describe());
    assert!(run.stderr().contains("err"), "{}", run.describe());
}

/// Whether process `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').map_or(0, |i| i + 1)..]
                .split_whitespace()
                .next()
                .unwrap_or("");
            state != "Z"
        }
        Err(_) => false,
    }
}

#[test]
fn lock_kills_the_command_when_the_lease_is_lost() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut holder = Background::spawn(lock_args(
        &redis,
        "lost",
        &["--lease", "16s"],
        &[
            "sh",
            "-c",
            &format!("echo $$ > {}; exec sleep 30", pid_file.display()),
        ],
    ));
    let mut client = redis.client();
    let lease_key = "cl:{lock:lost}:lease";
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let exists: bool = redis::cmd("EXISTS")
            .arg(lease_key)
            .query(&mut client)
            .unwrap();
        if exists && !lines_of(&pid_file).is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let keys: Vec<String> = redis::cmd("KEYS").arg("cl:*").query(&mut client).unwrap();
            panic!("no {lease_key} or no command within 10 s; keys: {keys:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = lines_of(&pid_file)[0].trim().parse().unwrap();

    redis::cmd("DEL")
        .arg(lease_key)
        .query::<()>(&mut client)
        .unwrap();
    let deleted = Instant::now();
    let run = holder.wait(Duration::from_secs(15));
    let took = deleted.elapsed();
    assert_eq!(run.code(), Some(75), "{}", run.describe());
    // Found at the next renewal, a third of the 16 s lease later (the
    // shortest lease with --redis-url's 5 s command timeout is 15 s).
    assert!(
        took < Duration::from_secs(8),
        "killed {took:?} after the lease was lost\n{}",
        run.describe()
    );
    wait_until(Duration::from_secs(2), "the command gone", || {
        (!alive(pid)).then_some(())
    });
}

// ---------------------------------------------------------------- errors

#[test]
fn operator_errors_are_one_line_with_the_documented_status() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &redis.url(),
        "",
        &format!("[jobs.known]\nschedule = \"{NEVER}\"\nshell = \"true\"\n"),
    );

    // Nothing listens on port 1.
    let run = op([
        "status",
        "--redis-url",
        "redis://127.0.0.1:1/0",
        "--prefix",
        "cl",
    ]);
    expect_error(&run, 1);

    // Unknown jobs.
    for args in [
        &["history", "nope"][..],
        &["trigger", "nope"],
        &["pause", "nope"],
        &["resume", "nope"],
    ] {
        expect_error(&op(with_config(args, &config)), 2);
    }
    // Nothing was queued or paused for them.
    let mut client = redis.client();
    let queued: i64 = redis::cmd("XLEN")
        .arg("cl:triggers")
        .query(&mut client)
        .unwrap();
    assert_eq!(queued, 0, "a trigger for an unknown job was queued");
    let paused: bool = redis::cmd("EXISTS")
        .arg("cl:{nope}:state")
        .query(&mut client)
        .unwrap();
    assert!(!paused, "state was written for an unknown job");

    // A missing or invalid config: `check`'s report, the `error:` line
    // followed by one line per problem (the guide, "The job table").
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[redis]\nurl = 5\n").unwrap();
    for config in [dir.path().join("missing.toml"), bad] {
        let run = op(with_config(&["status"], &config));
        assert_eq!(run.code(), Some(2), "{}", run.describe());
        assert!(run.stderr().starts_with("error: "), "{}", run.describe());
        assert!(!run.stderr().contains("panicked"), "{}", run.describe());
    }

    // Bad flags (clap's own message, several lines).
    for args in [
        &["trigger"][..],
        &["history"],
        &["status", "--no-such-flag"],
    ] {
        let run = op(args);
        assert_eq!(run.code(), Some(2), "{}", run.describe());
        assert!(run.stderr().starts_with("error: "), "{}", run.describe());
        assert!(!run.stderr().contains("panicked"), "{}", run.describe());
    }
    // A lease under 1 s.
    let run = op(lock_args(&redis, "short", &["--lease", "500ms"], &["true"]));
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    assert!(run.stderr().starts_with("error: "), "{}", run.describe());
}

#[test]
fn a_trigger_read_by_a_replica_without_the_job_runs_on_one_that_has_it() {
    // A rolling change of the job table: `fresh` is on a only. Every
    // trigger of it runs once, whichever replica reads the request.
    let redis = RedisServer::start();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let common = "[jobs.common]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n";
    let fresh = "[jobs.fresh]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n";
    let daemon =
        |id: &str| format!("metrics_listen = \"\"\ndashboard_listen = \"\"\nreplica_id = \"{id}\"");
    let config_a = write_config(
        dir_a.path(),
        &redis.url(),
        &daemon("a"),
        &format!("{common}{fresh}"),
    );
    let config_b = write_config(dir_b.path(), &redis.url(), &daemon("b"), common);
    let a = crate::support::Replica::start(&config_a, "a");
    let b = crate::support::Replica::start(&config_b, "b");
    for replica in [&a, &b] {
        replica.wait_for_log("ready", Duration::from_secs(30));
    }
    // Both heartbeats are in, so each knows what the other runs.
    std::thread::sleep(Duration::from_secs(2));
    let run_ids: Vec<String> = (0..6)
        .map(|_| run_id_of(&op(with_config(&["trigger", "fresh"], &config_a)).expect_code(0)))
        .collect();
    let mut conn = redis.client();
    wait_until(
        Duration::from_secs(60),
        "every trigger of fresh ran",
        || {
            let recorded = crate::support::read_outcomes(&mut conn, "cl", "fresh");
            run_ids
                .iter()
                .all(|id| {
                    recorded
                        .iter()
                        .filter(|o| o.field("run_id") == Some(id))
                        .count()
                        == 1
                })
                .then_some(())
        },
    );
    let log_b = b.log();
    assert!(!log_b.contains("dropped"), "{log_b}");
    eprintln!(
        "b handed back {} of the 6 requests",
        log_b
            .matches("handed back for the replicas that have it")
            .count()
    );
}
