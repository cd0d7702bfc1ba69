//! The library (`cronlease::Cluster`) with each instance in a process of its
//! own, as a service deployed several times runs it: three embedded
//! schedulers share a job every second and run each tick once, with fences
//! rising; `kill -9` of the one running a slow tick leaves that tick
//! recorded `abandoned` by a survivor, and later ticks run on the
//! survivors, once each. A cluster lock held by a process that is
//! `kill -9`ed is taken by a waiter in another process once its lease
//! lapses (no release is ever published), with a higher fence; that
//! waiter's own release, with a waiter of its own, is published.
//!
//! The processes are this test binary started again ([`TestChild`]): each
//! runs the hidden test [`child_entry`], which plays the part described in
//! the `CRONLEASE_TEST_CHILD` environment variable and returns at once
//! when it is absent.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cronlease::{Cluster, Job, JobBuilder, RedisSettings, Run};
use serde::{Deserialize, Serialize};
use tokio::signal::unix::{SignalKind, signal};

use crate::support::{
    Outcome, RedisServer, TestChild, cluster, multi_thread_runtime as runtime, read_outcomes,
    wait_until,
};

const PREFIX: &str = "cl";

/// The environment variable that carries a child's [`Part`] (JSON).
const CHILD_ENV: &str = "CRONLEASE_TEST_CHILD";

/// The test a child runs, as libtest names it.
const CHILD_TEST: &str = "embedded_processes::child_entry";

/// The job the schedulers share.
const JOB: &str = "beat";

/// The lock the lock holders contend for.
const LOCK: &str = "migration";

/// Generous for a loaded 2-core machine: every wait below is bounded by it.
const DEADLINE: Duration = Duration::from_secs(30);

/// A child process's part in a test.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "part", rename_all = "snake_case")]
enum Part {
    /// An embedded scheduler named `replica` running [`JOB`] (see
    /// [`beat`]), its state in `state_dir`, its side effects in `dir`,
    /// until SIGTERM.
    Scheduler {
        redis: String,
        replica: String,
        state_dir: PathBuf,
        dir: PathBuf,
    },
    /// Takes [`LOCK`] (it must be free) with a `lease_ms` lease, prints
    /// `CHILD HOLDING fence=N` and holds it until SIGTERM.
    LockHolder { redis: String, lease_ms: u64 },
    /// Prints `CHILD WAITING`, waits up to [`DEADLINE`] for [`LOCK`],
    /// prints `CHILD ACQUIRED fence=N` and holds it until SIGTERM.
    LockWaiter { redis: String, lease_ms: u64 },
}

/// Starts a child playing `part`, its log named `name`.
fn start_child(name: &str, part: &Part) -> TestChild {
    let spec = serde_json::to_string(part).expect("a part serializes");
    TestChild::start(CHILD_TEST, CHILD_ENV, &spec, name)
}

/// Not a test: the body of a child process started by the tests of this
/// file. Ignored, so that only `--include-ignored` (the children's command
/// line) runs it; without [`CHILD_ENV`] it returns at once.
#[test]
#[ignore = "a child process of the tests in this module; they run it"]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let part: Part = serde_json::from_str(&spec).expect("the parent sends a valid part");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    runtime().block_on(async {
        // Watched before anything else, so a SIGTERM at any point below
        // ends the child cleanly once its part is set up.
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM can be watched");
        match part {
            Part::Scheduler {
                redis,
                replica,
                state_dir,
                dir,
            } => {
                let mut scheduler = connect(&redis)
                    .await
                    .scheduler()
                    .replica_id(&replica)
                    .state_dir(&state_dir)
                    .lease(Duration::from_secs(2))
                    .heartbeat(Duration::from_secs(1))
                    .shutdown_grace(Duration::from_secs(1))
                    .kill_grace(Duration::from_millis(500))
                    .job(beat(dir))
                    .start()
                    .expect("the job is valid");
                scheduler.ready().await.expect("the scheduler runs");
                say("CHILD READY");
                term.recv().await;
                scheduler.shutdown().await.expect("a clean shutdown");
            }
            Part::LockHolder { redis, lease_ms } => {
                let guard = connect(&redis)
                    .await
                    .lock(LOCK)
                    .lease(Duration::from_millis(lease_ms))
                    .try_acquire()
                    .await
                    .expect("Redis answers")
                    .expect("the lock is free when the holder starts");
                say(&format!("CHILD HOLDING fence={}", guard.fence()));
                term.recv().await;
                guard.release().await.expect("Redis answers");
            }
            Part::LockWaiter { redis, lease_ms } => {
                let lock = connect(&redis)
                    .await
                    .lock(LOCK)
                    .lease(Duration::from_millis(lease_ms));
                say("CHILD WAITING");
                let guard = lock
                    .acquire_within(DEADLINE)
                    .await
                    .expect("Redis answers")
                    .expect("the lock came free within the deadline");
                say(&format!("CHILD ACQUIRED fence={}", guard.fence()));
                term.recv().await;
                let released = guard.release().await.expect("Redis answers");
                say(&format!("CHILD RELEASED {released}"));
            }
        }
    });
    say("CHILD STOPPED");
}

/// A line on stdout, flushed at once: the parent reads the log while the
/// child runs.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout is writable");
    out.flush().expect("stdout is writable");
}

/// The child's connection to the test's Redis, prefix [`PREFIX`].
async fn connect(redis: &str) -> Cluster {
    Cluster::connect(
        RedisSettings::url(redis)
            .key_prefix(PREFIX)
            .command_timeout(Duration::from_millis(300)),
    )
    .await
    .expect("the test's Redis answers")
}

/// The file under a scheduler test's directory the runs append to.
const EFFECTS: &str = "effects";
/// Created by the test: the next run to see it is the slow one.
const SLOW_WANTED: &str = "slow-wanted";
/// Created (exclusively) by the run that becomes the slow one.
const SLOW_TAKEN: &str = "slow-taken";

/// [`JOB`], every second: each run appends `start TICK FENCE REPLICA KIND`
/// to `dir/effects` and returns; once the test asks for it, one run (KIND
/// `slow`) sleeps far past its lease instead, its lease renewed all along.
fn beat(dir: PathBuf) -> Job {
    JobBuilder::new(JOB, "* * * * * *").run(move |mut run: Run| {
        let dir = dir.clone();
        async move {
            let slow = dir.join(SLOW_WANTED).exists()
                && std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dir.join(SLOW_TAKEN))
                    .is_ok();
            let line = format!(
                "start {} {} {} {}\n",
                run.tick().as_millisecond(),
                run.fence(),
                run.replica(),
                if slow { "slow" } else { "fast" }
            );
            // One write of a short line to a file opened for appending:
            // lines of several processes do not interleave.
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(EFFECTS))?
                .write_all(line.as_bytes())?;
            if slow {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(60)) => {}
                    _ = run.stopped() => {}
                }
            }
            Ok::<(), std::io::Error>(())
        }
    })
}

/// A line of the effects file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Effect {
    tick: i64,
    fence: i64,
    replica: String,
    slow: bool,
}

/// The runs the effects file shows, in the order they started. A last
/// line still being written (no newline yet) is left for the next read.
fn effects(dir: &Path) -> Vec<Effect> {
    let text = std::fs::read_to_string(dir.join(EFFECTS)).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            match parts.as_slice() {
                ["start", tick, fence, replica, kind] => Effect {
                    tick: tick.parse().expect("a tick"),
                    fence: fence.parse().expect("a fence"),
                    replica: replica.to_string(),
                    slow: *kind == "slow",
                },
                _ => panic!("a malformed line in the effects file: {line:?}\n{text}"),
            }
        })
        .collect()
}

/// Every child's log, for assertion messages.
fn logs(children: &[TestChild]) -> String {
    children
        .iter()
        .map(|c| format!("===== {}\n{}", c.name(), c.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn scheduler_processes_run_each_tick_once_and_the_survivors_take_over_after_a_kill9() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut children: Vec<TestChild> = ["a", "b", "c"]
        .into_iter()
        .map(|id| {
            let part = Part::Scheduler {
                redis: redis.url(),
                replica: id.into(),
                state_dir: dir.path().join(format!("state-{id}")),
                dir: dir.path().to_path_buf(),
            };
            start_child(id, &part)
        })
        .collect();
    for child in &mut children {
        child.wait_for_line("CHILD READY", DEADLINE);
    }

    // Between them, several ticks once each.
    wait_until(DEADLINE, "5 ticks run", || {
        (effects(dir.path()).len() >= 5).then_some(())
    });

    // The next run sleeps far past its lease; its process is killed.
    std::fs::write(dir.path().join(SLOW_WANTED), "").expect("the flag is written");
    let slow = wait_until(DEADLINE, "the slow run's start", || {
        effects(dir.path()).into_iter().find(|e| e.slow)
    });
    let victim = children
        .iter()
        .position(|c| c.name() == slow.replica)
        .unwrap_or_else(|| panic!("no child runs replica {}", slow.replica));
    children[victim].kill9();

    wait_until(
        DEADLINE,
        "the slow tick recorded abandoned and 3 later ticks run by the survivors",
        || {
            let outcomes = read_outcomes(&mut redis.client(), PREFIX, JOB);
            let abandoned = outcomes
                .iter()
                .any(|o| o.status() == "abandoned" && o.tick() == slow.tick);
            let later = outcomes
                .iter()
                .filter(|o| o.status() == "ok" && o.tick() > slow.tick)
                .count();
            (abandoned && later >= 3).then_some(())
        },
    );
    for (i, child) in children.iter().enumerate() {
        if i != victim {
            child.sigterm();
        }
    }
    for (i, child) in children.iter_mut().enumerate() {
        if i != victim {
            let status = child.wait_exit(DEADLINE);
            assert!(
                status.is_some_and(|s| s.success()),
                "child {} did not exit 0 after SIGTERM: {status:?}\n--- log\n{}",
                child.name(),
                child.log()
            );
        }
    }

    let logs = logs(&children);
    let runs = effects(dir.path());
    let outcomes = read_outcomes(&mut redis.client(), PREFIX, JOB);
    let shown = format!("runs: {runs:#?}\noutcomes: {outcomes:#?}\n{logs}");

    // Each tick started once, fences rising with the ticks.
    let mut by_tick: BTreeMap<i64, &Effect> = BTreeMap::new();
    for run in &runs {
        let earlier = by_tick.insert(run.tick, run);
        assert!(
            earlier.is_none(),
            "tick {} started twice\n{shown}",
            run.tick
        );
    }
    let fences: Vec<i64> = by_tick.values().map(|r| r.fence).collect();
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences do not rise with the ticks: {fences:?}\n{shown}"
    );

    // Each tick has one current outcome: the started ones theirs (the slow
    // one `abandoned`, recorded by a survivor), the others a skip or a miss.
    assert!(!outcomes.iter().any(Outcome::stale), "{shown}");
    let mut current: BTreeMap<i64, &Outcome> = BTreeMap::new();
    for outcome in &outcomes {
        let earlier = current.insert(outcome.tick(), outcome);
        assert!(
            earlier.is_none(),
            "tick {} has two current outcomes\n{shown}",
            outcome.tick()
        );
    }
    for run in &runs {
        let outcome = current
            .get(&run.tick)
            .unwrap_or_else(|| panic!("tick {} ran but has no outcome\n{shown}", run.tick));
        assert_eq!(outcome.fence(), run.fence, "{shown}");
        assert_eq!(outcome.replica(), run.replica, "{shown}");
        let expected = if run.slow { "abandoned" } else { "ok" };
        assert_eq!(outcome.status(), expected, "tick {}\n{shown}", run.tick);
    }
    for outcome in current.values() {
        assert!(
            matches!(
                outcome.status(),
                "ok" | "abandoned" | "skipped_overlap" | "missed"
            ),
            "{outcome:?}\n{shown}"
        );
        if matches!(outcome.status(), "ok" | "abandoned") {
            assert!(
                by_tick.contains_key(&outcome.tick()),
                "an outcome for a run nobody started: {outcome:?}\n{shown}"
            );
        }
    }
    let abandoned: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.status() == "abandoned")
        .collect();
    assert_eq!(abandoned.len(), 1, "{shown}");
    let recorder = abandoned[0].field("recorded_by").unwrap_or_default();
    assert!(
        recorder != slow.replica && children.iter().any(|c| c.name() == recorder),
        "abandoned recorded by {recorder:?}, not by a survivor\n{shown}"
    );

    // After the kill, only the survivors ran ticks.
    let after: BTreeSet<&str> = runs
        .iter()
        .filter(|r| r.tick > slow.tick)
        .map(|r| r.replica.as_str())
        .collect();
    assert!(
        !after.is_empty() && !after.contains(slow.replica.as_str()),
        "ticks after the kill ran on {after:?}\n{shown}"
    );
}

/// The number of subscribers of `channel` (`PUBSUB NUMSUB`).
fn subscribers(redis: &RedisServer, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut redis.client())
        .expect("PUBSUB NUMSUB");
    reply.1
}

/// The fence in a line `… fence=N`.
fn fence_in(line: &str) -> u64 {
    line.rsplit("fence=")
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no fence in {line:?}"))
}

#[test]
fn a_lock_of_a_killed_process_goes_to_a_waiting_process_when_its_lease_lapses() {
    let redis = RedisServer::start();
    let lease_ms = 3000;
    let channel = format!("{PREFIX}:{{lock:{LOCK}}}:released");
    // Whatever is published on the lock's channel: nothing while the
    // holder dies, the waiter's own release at the end.
    let mut listener = redis.client();
    let mut releases = listener.as_pubsub();
    releases.subscribe(&channel).expect("SUBSCRIBE");
    releases
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");

    let mut holder = start_child(
        "holder",
        &Part::LockHolder {
            redis: redis.url(),
            lease_ms,
        },
    );
    let held_fence = fence_in(&holder.wait_for_line("CHILD HOLDING", DEADLINE));
    let holder_pid = holder.pid();
    let rt = runtime();
    let here = rt.block_on(cluster(&redis));
    // Held by that process: this one cannot take it.
    rt.block_on(async {
        let lock = here.lock(LOCK);
        let info = lock
            .info()
            .await
            .expect("Redis answers")
            .expect("the lock is held");
        assert!(
            info.holder.ends_with(&format!("-{holder_pid}")) && info.fence == held_fence,
            "{info:?}, holder pid {holder_pid}"
        );
        assert!(
            lock.try_acquire().await.expect("Redis answers").is_none(),
            "two holders at once"
        );
    });

    let mut waiter = start_child(
        "waiter",
        &Part::LockWaiter {
            redis: redis.url(),
            lease_ms,
        },
    );
    waiter.wait_for_line("CHILD WAITING", DEADLINE);
    // The waiter sleeps on the channel (ours is the other subscriber).
    wait_until(DEADLINE, "the waiter subscribed", || {
        (subscribers(&redis, &channel) >= 2).then_some(())
    });
    holder.kill9();

    let acquired = fence_in(&waiter.wait_for_line("CHILD ACQUIRED", DEADLINE));
    assert!(acquired > held_fence, "fence {acquired} after {held_fence}");
    let mut published = Vec::new();
    while let Ok(message) = releases.get_message() {
        published.push(message.get_payload::<String>().unwrap_or_default());
    }
    assert!(
        published.is_empty(),
        "a release was published though the holder was killed: {published:?}"
    );
    let waiter_pid = waiter.pid();
    rt.block_on(async {
        let info = here
            .lock(LOCK)
            .info()
            .await
            .expect("Redis answers")
            .expect("the lock is held");
        assert!(
            info.holder.ends_with(&format!("-{waiter_pid}")) && info.fence == acquired,
            "{info:?}, waiter pid {waiter_pid}"
        );
    });

    // A release is published when someone asked for the lock meanwhile:
    // this process now waits for it (its refused attempt marks the
    // holder's record), and the waiter releases on SIGTERM. That release
    // is published (so the silence above was not a deaf listener) and
    // wakes this process.
    let here_waits = {
        let lock = here.lock(LOCK);
        rt.spawn(async move { lock.acquire().await })
    };
    let lease = format!("{PREFIX}:{{lock:{LOCK}}}:lease");
    wait_until(DEADLINE, "this process waits, the record marked", || {
        let record: Option<String> = redis::cmd("GET")
            .arg(&lease)
            .query(&mut redis.client())
            .expect("GET");
        record.filter(|r| r.ends_with('w')).map(|_| ())
    });
    waiter.stop(DEADLINE);
    waiter.wait_for_line("CHILD RELEASED true", DEADLINE);
    let message = wait_until(DEADLINE, "the waiter's release published", || {
        releases.get_message().ok()
    });
    assert_eq!(message.get_channel_name(), channel);
    let guard = rt
        .block_on(here_waits)
        .expect("the waiting task ends")
        .expect("Redis answers");
    assert!(
        guard.fence() > acquired,
        "fence {} after {acquired}",
        guard.fence()
    );
    assert!(rt.block_on(guard.release()).expect("Redis answers"));
}
