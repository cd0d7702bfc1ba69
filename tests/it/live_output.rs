//! Live output: a run's lines read from another process while it runs
//! (`cronlease logs --follow`), a flood kept within the stream's cap, an
//! embedded handler's writer and `tracing` events, and `logs`'s errors.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cronlease::{JobBuilder, Run};

use crate::support::{
    Cluster, RedisServer, binary, cronlease, multi_thread_runtime as runtime, start_scheduler,
    wait_until, write_config,
};

/// The lines the flood's replica keeps per run (`live_output_lines`), and
/// the longest line.
const MAX_LINES: usize = 100;
const MAX_LINE_BYTES: usize = 2_048;

/// A job that only runs when triggered.
fn manual(name: &str, shell: &str) -> String {
    format!("[jobs.{name}]\nschedule = \"0 0 1 1 *\"\nshell = '''{shell}'''\n\n")
}

/// `cronlease trigger JOB --config CONFIG`: the run id.
fn trigger(config: &Path, job: &str) -> String {
    let run = cronlease(["trigger", job, "--config", &config.display().to_string()]).expect_code(0);
    run.stdout().trim().to_owned()
}

/// The fields of the entries of `key` (a stream).
fn stream_fields(redis: &RedisServer, key: &str) -> Vec<Vec<(String, String)>> {
    let reply: redis::streams::StreamRangeReply = redis::cmd("XRANGE")
        .arg(key)
        .arg("-")
        .arg("+")
        .query(&mut redis.client())
        .expect("XRANGE");
    reply
        .ids
        .iter()
        .map(|entry| {
            let mut fields: Vec<(String, String)> = entry
                .map
                .iter()
                .map(|(k, v)| {
                    let v: String = redis::from_redis_value(v.clone()).unwrap_or_default();
                    (k.clone(), v)
                })
                .collect();
            fields.sort();
            fields
        })
        .collect()
}

#[test]
fn logs_follow_prints_a_runs_lines_while_it_runs() {
    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = manual(
        "ticker",
        "for i in 1 2 3 4 5 6; do echo \"line $i\"; sleep 1; done; echo oops >&2",
    );
    cluster.start("a", &jobs);
    cluster.start("b", &jobs);
    cluster.wait_ready();
    let config = cluster.config_path("b");
    let run_id = trigger(&config, "ticker");
    // Whichever replica holds the run, `logs` reads it from anywhere.
    let mut follow = Command::new(binary())
        .args(["logs", "ticker", "--follow", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start `cronlease logs`");
    let stdout = follow.stdout.take().expect("piped");
    let mut received = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("logs prints text");
        let finished = !cluster.outcomes("ticker").is_empty();
        received.push((line, finished, Instant::now()));
    }
    let status = follow.wait().expect("logs exits");
    assert!(status.success(), "logs --follow: {status}");
    let lines: Vec<&str> = received.iter().map(|(line, ..)| line.as_str()).collect();
    assert_eq!(
        lines,
        [
            "line 1",
            "line 2",
            "line 3",
            "line 4",
            "line 5",
            "line 6",
            "[stderr] oops"
        ]
    );
    // The lines came as they were printed, a second apart, while the run
    // was in flight: not at its end.
    let before_end = received.iter().filter(|(_, finished, _)| !finished).count();
    assert!(before_end >= 5, "{received:?}");
    let spread = received[5].2 - received[1].2;
    assert!(spread >= Duration::from_secs(3), "{received:?}");
    let outcome = &cluster.outcomes("ticker")[0];
    assert_eq!(outcome.field("run_id"), Some(run_id.as_str()));

    // After the end the stream is kept a minute, ended.
    let key = format!("cl:{{ticker}}:live:{run_id}");
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query(&mut cluster.redis.client())
        .expect("PTTL");
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    let again = cronlease(["logs", "ticker", "--config", &config.display().to_string()]);
    assert_eq!(again.expect_code(0).stdout().lines().count(), 7);
    cluster.stop_all();
}

#[test]
fn a_flood_keeps_the_run_stream_within_its_cap() {
    let mut cluster = Cluster::new(RedisServer::start());
    // 20,000 lines of 5,000 bytes as fast as a shell prints them, then a
    // while in flight to be measured.
    let long = "x".repeat(5_000);
    let jobs = manual(
        "flood",
        &format!("i=0; while [ $i -lt 20000 ]; do echo \"$i {long}\"; i=$((i+1)); done; sleep 3"),
    );
    cluster.start_with(
        "a",
        &format!("live_output_lines = {MAX_LINES}\n"),
        &jobs,
        None,
    );
    cluster.wait_ready();
    let config = cluster.config_path("a");
    let run_id = trigger(&config, "flood");
    let key = format!("cl:{{flood}}:live:{run_id}");
    let mut redis = cluster.redis.client();
    let mut largest = (0usize, 0u64);
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster.outcomes("flood").is_empty() && Instant::now() < deadline {
        let len: usize = redis::cmd("XLEN").arg(&key).query(&mut redis).unwrap_or(0);
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .query(&mut redis)
            .unwrap_or(None);
        largest = (largest.0.max(len), largest.1.max(bytes.unwrap_or(0)));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !cluster.outcomes("flood").is_empty(),
        "the flood never ended"
    );
    let entries = stream_fields(&cluster.redis, &key);
    // The cap (reached: the log's burst alone is 200 lines), plus the end
    // entry.
    assert!(largest.0 >= MAX_LINES, "{largest:?}");
    assert!(largest.0 <= MAX_LINES + 1, "{largest:?}");
    assert!(entries.len() <= MAX_LINES + 1, "{}", entries.len());
    // Each line within its length; so the stream within lines × length.
    for entry in &entries {
        for (field, value) in entry {
            if field == "l" {
                assert!(value.len() <= MAX_LINE_BYTES, "{}", value.len());
            }
        }
    }
    let bound = (MAX_LINES * (MAX_LINE_BYTES + 1024)) as u64;
    assert!(largest.1 <= bound, "{largest:?} > {bound}");
    println!(
        "flood: at most {} entries and {} bytes (MEMORY USAGE) in the run's stream, bound {bound}",
        largest.0, largest.1
    );
    // The log's rate limit left lines out, and the stream says so.
    assert!(
        entries
            .iter()
            .any(|e| e.iter().any(|(f, v)| f == "s" && v == "cronlease")),
        "no line says what was left out"
    );
    cluster.stop_all();
}

/// Runs `job` (named `import`) once on an instance in `runtime` and
/// returns what `cronlease logs import` printed while it ran (its first
/// lines) and what `logs --follow` printed to its end.
fn embedded_logs(runtime: &tokio::runtime::Runtime, job: cronlease::Job) -> (String, String) {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = write_config(
        dir.path(),
        &redis.url(),
        "",
        "[jobs.import]\nschedule = \"0 0 1 1 *\"\ncommand = [\"true\"]\n",
    );
    runtime.block_on(async {
        let scheduler = start_scheduler(&redis, &dir, "svc-1", vec![job]).await;
        let config = config.display().to_string();
        let printed = tokio::task::spawn_blocking(move || {
            trigger(Path::new(&config), "import");
            let first = wait_until(Duration::from_secs(10), "a line in flight", || {
                let run = cronlease(["logs", "import", "--config", &config]);
                (run.code() == Some(0) && !run.stdout().is_empty()).then(|| run.stdout())
            });
            let all = cronlease(["logs", "import", "--follow", "--config", &config]);
            (first, all.expect_code(0).stdout())
        })
        .await
        .expect("the CLI runs");
        scheduler.shutdown().await.expect("a clean shutdown");
        printed
    })
}

#[test]
fn an_embedded_handlers_writer_is_live_output() {
    let job = JobBuilder::new("import", "0 0 1 1 *").run(|run: Run| async move {
        use std::io::Write;
        let mut out = run.output();
        for batch in 1..=3 {
            writeln!(out, "imported batch {batch}")?;
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        write!(out, "done")?;
        Ok::<(), std::io::Error>(())
    });
    let printed = embedded_logs(&runtime(), job);
    assert!(printed.0.starts_with("imported batch 1\n"), "{printed:?}");
    assert_eq!(
        printed.1,
        "imported batch 1\nimported batch 2\nimported batch 3\ndone\n"
    );
}

#[test]
fn an_embedded_handlers_tracing_events_are_live_output() {
    use tracing_subscriber::prelude::*;

    let job = JobBuilder::new("import", "0 0 1 1 *").run(|_run: Run| async move {
        for batch in 1..=3 {
            tracing::info!(rows = batch * 10, "imported batch {batch}");
            tracing::debug!("below the layer's level");
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        Ok::<(), std::io::Error>(())
    });
    // The service's own subscriber, on the one thread that polls every
    // task.
    let _subscriber = tracing_subscriber::registry()
        .with(cronlease::LiveOutputLayer::new())
        .set_default();
    let current_thread = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let printed = embedded_logs(&current_thread, job);
    assert!(
        printed.0.starts_with("INFO imported batch 1 rows=10\n"),
        "{printed:?}"
    );
    assert_eq!(
        printed.1,
        "INFO imported batch 1 rows=10\nINFO imported batch 2 rows=20\nINFO imported batch 3 rows=30\n"
    );
}

#[test]
fn logs_says_what_it_cannot_show() {
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.start("a", &manual("idle", "true"));
    cluster.wait_ready();
    let config = cluster.config_path("a").display().to_string();
    let none = cronlease(["logs", "idle", "--config", &config]).expect_code(1);
    assert!(
        none.stderr().contains("no run in flight")
            && none.stderr().contains("history idle --output"),
        "{}",
        none.describe()
    );
    let bad = cronlease(["logs", "idle", "--run", "../../etc", "--config", &config]).expect_code(1);
    assert!(
        bad.stderr().contains("is not a run id"),
        "{}",
        bad.describe()
    );
    let unknown = cronlease(["logs", "nope", "--config", &config]);
    assert_ne!(unknown.code(), Some(0), "{}", unknown.describe());
    assert!(unknown.stderr().contains("nope"), "{}", unknown.describe());
    // A run id that was never a run: nothing in flight, nothing kept.
    let gone = cronlease([
        "logs",
        "idle",
        "--follow",
        "--run",
        "0b7e3c1e-0000-4000-8000-000000000000",
        "--config",
        &config,
    ])
    .expect_code(1);
    assert!(
        gone.stderr().contains("no longer in flight"),
        "{}",
        gone.describe()
    );
    cluster.stop_all();
}

#[test]
fn the_job_page_streams_a_runs_lines_while_it_runs() {
    use crate::dashboard::{dashboard_addr, eventually, goto, js};

    let mut cluster = Cluster::new(RedisServer::start());
    let jobs = manual(
        "ticker",
        "for i in 1 2 3 4 5 6 7 8; do echo \"line $i\"; sleep 1; done",
    );
    let daemon = "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:0\"\n";
    cluster.start_with("alpha", daemon, &jobs, None);
    cluster.start_with("bravo", daemon, &jobs, None);
    cluster.wait_ready();
    let base = format!("http://{}", dashboard_addr(&cluster.replicas[0]));
    trigger(&cluster.config_path("alpha"), "ticker");
    wait_until(Duration::from_secs(10), "the run in flight", || {
        cronlease([
            "logs",
            "ticker",
            "--config",
            &cluster.config_path("alpha").display().to_string(),
        ])
        .stdout()
        .contains("line 1")
        .then_some(())
    });
    crate::support::runtime().block_on(async {
        let browser = crate::support::Browser::start().await;
        goto(&browser, &format!("{base}/jobs/ticker")).await;
        let shown = "return document.querySelector('pre.live')?.textContent ?? '';";
        let early: String = eventually("line 3 on the page", async || {
            let text: String = js(&browser, shown).await;
            text.contains("line 3").then_some(text)
        })
        .await;
        assert!(
            cluster.outcomes("ticker").is_empty(),
            "the lines came only after the run: {early}"
        );
        assert!(early.starts_with("line 1\nline 2\nline 3\n"), "{early}");
        let state = "return document.querySelector('#live-output .state')?.textContent ?? '';";
        eventually("the end of the run on the page", async || {
            let text: String = js(&browser, state).await;
            (text == "the run ended").then_some(())
        })
        .await;
        let all: String = js(&browser, shown).await;
        let expected: String = (1..=8).map(|i| format!("line {i}\n")).collect();
        assert_eq!(all, expected);
    });
    cluster.stop_all();
}
