//! The engine as a library: replicas built in this process from a
//! [`World`] (their own store connection, clock and tasks) and run with
//! `daemon::run`, the way an embedding program would. The jobs run
//! in-process tasks registered through the task boundary, not processes:
//! every tick runs once across the replicas, a panicking task is a failed
//! outcome with its message, and a task still going when the shutdown grace
//! is over is stopped through its stop signal and its outcome written.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cronlease::clock::RedisClock;
use cronlease::config::Config;
use cronlease::daemon::{self, World};
use cronlease::outcome::{Status, Tail};
use cronlease::task::{Attempt, AttemptEnd, RunContext, Stop, StopSignal, Task, Tasks};
use tokio_util::sync::CancellationToken;

use crate::support::{RedisServer, multi_thread_runtime as runtime, read_outcomes, write_config};

/// What the recording task saw: (tick, fence, replica) per attempt.
type Seen = Arc<Mutex<Vec<(i64, u64, String)>>>;

/// Records each attempt and succeeds.
struct Record(Seen);

impl Task for Record {
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        _stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(async move {
            self.0
                .lock()
                .expect("no test thread panics holding the lock")
                .push((run.tick_ms, run.fence, run.replica.clone()));
            output.push_line(format!("drew the winners of fence {}", run.fence).as_bytes());
            AttemptEnd::bare(Status::Ok)
        })
    }
}

/// Panics, as a handler with a bug would.
struct Jammed;

impl Task for Jammed {
    fn attempt<'a>(
        &'a self,
        _run: &'a RunContext,
        _stop: StopSignal,
        _output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(async { panic!("the draw machine is jammed") })
    }
}

/// Runs until told to stop, and says why it stopped.
struct UntilStopped;

impl Task for UntilStopped {
    fn attempt<'a>(
        &'a self,
        _run: &'a RunContext,
        mut stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(async move {
            let reason = stop.next().await;
            output.push_line(format!("stopped: {reason:?}").as_bytes());
            AttemptEnd::bare(match reason {
                Stop::LostLease => Status::LostLease,
                Stop::Timeout => Status::Timeout,
                // Stop::Shutdown (the enum is non-exhaustive).
                _ => Status::Interrupted,
            })
        })
    }
}

/// One replica's config: its own state directory, `jobs` as given.
fn replica_config(dir: &tempfile::TempDir, redis: &RedisServer, id: &str, jobs: &str) -> Config {
    let path = write_config(
        dir.path(),
        &redis.url(),
        &format!("replica_id = \"{id}\""),
        jobs,
    );
    Config::load(&path).unwrap_or_else(|e| panic!("the test config is valid: {e}"))
}

/// Runs one replica per config, each on its own connection, until `for_`
/// has passed, then shuts them down and waits for them.
async fn run_replicas(configs: Vec<Config>, tasks: Tasks, for_: Duration) {
    let shutdown = CancellationToken::new();
    let mut replicas = Vec::new();
    for config in configs {
        let store = daemon::connect(&config.redis, &shutdown)
            .await
            .expect("the test's Redis answers");
        let world = World {
            store,
            clock: RedisClock::new(),
            tasks: tasks.clone(),
            ready: None,
        };
        let (_reload, reload_rx) = tokio::sync::mpsc::unbounded_channel();
        replicas.push(tokio::spawn(daemon::run(
            config,
            world,
            shutdown.clone(),
            reload_rx,
        )));
    }
    tokio::time::sleep(for_).await;
    shutdown.cancel();
    for replica in replicas {
        replica
            .await
            .expect("a replica does not panic")
            .expect("a replica stops cleanly");
    }
}

const EVERY_SECOND: &str =
    "[jobs.draw]\nschedule = \"* * * * * *\"\ncommand = [\"/nonexistent/never-run\"]\n";

#[test]
fn in_process_replicas_run_each_tick_once_through_a_registered_task() {
    let redis = RedisServer::start();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let configs = vec![
        replica_config(&dirs[0], &redis, "lib-a", EVERY_SECOND),
        replica_config(&dirs[1], &redis, "lib-b", EVERY_SECOND),
    ];
    let seen: Seen = Arc::default();
    let tasks = Tasks::processes().job("draw", Arc::new(Record(seen.clone())));
    runtime().block_on(run_replicas(configs, tasks, Duration::from_secs(5)));

    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() >= 3, "too few ticks ran: {seen:?}");
    let mut ticks: Vec<i64> = seen.iter().map(|(tick, _, _)| *tick).collect();
    ticks.sort_unstable();
    ticks.dedup();
    assert_eq!(ticks.len(), seen.len(), "a tick ran twice: {seen:?}");
    let mut by_tick = seen.clone();
    by_tick.sort_unstable();
    assert!(
        by_tick.windows(2).all(|w| w[0].1 < w[1].1),
        "fences do not grow with the ticks: {by_tick:?}"
    );
    // The outcomes are in Redis, as the operator commands read them; the
    // command in the job table never ran.
    let outcomes = read_outcomes(&mut redis.client(), "cl", "draw");
    assert_eq!(outcomes.len(), seen.len(), "{outcomes:?}");
    for outcome in &outcomes {
        assert_eq!(outcome.status(), "ok", "{outcome:?}");
        let output = outcome.field("output").unwrap_or_default();
        assert!(output.contains("drew the winners"), "{outcome:?}");
    }
}

#[test]
fn a_panicking_task_is_a_failed_outcome_with_its_message_and_the_replica_goes_on() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let configs = vec![replica_config(&dir, &redis, "lib-a", EVERY_SECOND)];
    let tasks = Tasks::every_job(Arc::new(Jammed));
    runtime().block_on(run_replicas(configs, tasks, Duration::from_secs(3)));

    let outcomes = read_outcomes(&mut redis.client(), "cl", "draw");
    assert!(
        outcomes.len() >= 2,
        "the replica stopped ticking: {outcomes:?}"
    );
    for outcome in &outcomes {
        assert_eq!(outcome.status(), "failed", "{outcome:?}");
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            output.contains("the run panicked: the draw machine is jammed"),
            "{outcome:?}"
        );
    }
}

#[test]
fn shutdown_stops_a_task_through_its_signal_after_the_grace() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let jobs =
        "[jobs.draw]\nschedule = \"* * * * * *\"\ncommand = [\"true\"]\noverlap = \"allow\"\n";
    let configs = vec![replica_config(&dir, &redis, "lib-a", jobs)];
    let tasks = Tasks::every_job(Arc::new(UntilStopped));
    // The runs outlive shutdown_grace (5 s): the drain stops them.
    runtime().block_on(run_replicas(configs, tasks, Duration::from_millis(2500)));

    let outcomes = read_outcomes(&mut redis.client(), "cl", "draw");
    assert!(!outcomes.is_empty(), "no run started");
    for outcome in &outcomes {
        assert_eq!(
            outcome.status(),
            Status::Interrupted.as_str(),
            "{outcome:?}"
        );
        let output = outcome.field("output").unwrap_or_default();
        assert!(
            output.contains(&format!("stopped: {:?}", Stop::Shutdown)),
            "{outcome:?}"
        );
    }
}
