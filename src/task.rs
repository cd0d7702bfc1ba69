//! What a run executes: the boundary between the engine, which holds a
//! tick's lease, and the work done under it.
//!
//! The engine claims a tick, keeps its lease alive and records its outcome;
//! a [`Task`] does the work, one attempt at a time, given a [`RunContext`]
//! and a [`StopSignal`] that says when and why to stop (the lease is lost,
//! the attempt timed out, the replica is shutting down). [`execute`] is the
//! engine's side of one run: attempts, timeout, retries with backoff, the
//! output tail, and a panicking task turned into a `failed` attempt.
//!
//! Task kinds: a process ([`crate::runner::Process`], the job's command),
//! a request (`crate::http_job::HttpTask`, the job's `http`), and [`Noop`] (succeeds at once; the benchmark measures coordination with
//! it). [`Tasks`] says which task runs which job.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until};
use tracing::{error, warn};

use crate::outcome::{Status, Tail};

/// Why a run is being stopped: what [`Run::stopped`](crate::Run::stopped)
/// resolves with.
///
/// A handler told to stop has the scheduler's `kill_grace`
/// to return, whatever the reason, and is dropped after it; the daemon's
/// processes get the signals named below.
///
/// ```
/// use cronlease::{JobBuilder, Run, Stop};
///
/// let job = JobBuilder::new("export", "*/5 * * * *").run(|mut run: Run| async move {
///     match run.stopped().await {
///         // Another instance may run the tick now: write nothing more.
///         Stop::LostLease => Err(std::io::Error::other("lease lost")),
///         // Timeout, shutdown (or a reason a later release adds): the next
///         // tick, or a retry after a timeout, picks up.
///         _ => Ok(()),
///     }
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// The lease is no longer ours (a renewal found it gone, none got
    /// through in time, or `overlap = "replace"` started a newer run):
    /// stop now, another instance may run the tick. A process group gets
    /// SIGKILL.
    LostLease,
    /// The attempt ran past the job's `timeout`: stop within `kill_grace`
    /// (SIGTERM, then SIGKILL).
    Timeout,
    /// The replica is shutting down
    /// ([`Scheduler::shutdown`](crate::Scheduler::shutdown), or SIGTERM for
    /// the daemon) and `shutdown_grace` is over: stop within `kill_grace`
    /// (SIGTERM, then SIGKILL).
    Shutdown,
    /// An operator asked for the run to stop (`cronlease kill`, the
    /// dashboard's Kill button): stop within `kill_grace` (SIGTERM, then
    /// SIGKILL). Recorded `killed`; never retried.
    Killed,
}

impl Stop {
    /// The status of a run stopped for this reason, as `cronlease history`
    /// shows it (`lost_lease`, `timeout`, `interrupted`).
    pub(crate) fn status(self) -> Status {
        match self {
            Stop::LostLease => Status::LostLease,
            Stop::Timeout => Status::Timeout,
            Stop::Shutdown => Status::Interrupted,
            Stop::Killed => Status::Killed,
        }
    }
}

/// Tells a task when and why to stop. Only the engine sends it.
#[derive(Debug, Clone)]
pub struct StopSignal(watch::Receiver<Option<Stop>>);

impl StopSignal {
    /// The stop requested so far, if any.
    pub fn requested(&self) -> Option<Stop> {
        *self.0.borrow()
    }

    /// Resolves with the reason of each new stop request: the first one,
    /// and any later one (a lost lease after a timeout). Pending forever
    /// once the engine is gone.
    pub async fn next(&mut self) -> Stop {
        loop {
            if self.0.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
            if let Some(reason) = *self.0.borrow_and_update() {
                return reason;
            }
        }
    }
}

/// Who and what an attempt runs for.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The job (for a `cronlease lock` command: `lock:<name>`).
    pub job: String,
    /// The tick, ms since the epoch (UTC); 0 for a lock's command.
    pub tick_ms: i64,
    /// The fence of the claim: higher than every earlier claim's of the job.
    pub fence: u64,
    /// This run's id (one per claim; retries of an attempt share it).
    pub run_id: String,
    /// This replica.
    pub replica: String,
    /// 1 for the first attempt, 2 for the first retry, …
    pub attempt: u32,
    /// How long the task may go on once told to stop by a timeout or a
    /// shutdown (`kill_grace`): a process then gets SIGKILL, a handler is
    /// dropped.
    pub grace: Duration,
    /// A follower's run: the upstream runs it follows.
    pub upstream: Option<std::sync::Arc<crate::outcome::Upstream>>,
    /// What started the run (a lock's command: `Manual`).
    pub trigger: crate::outcome::Trigger,
    /// The values of the run's parameters (the job's `params`), by name:
    /// checked, defaults included; empty for a job without any.
    pub params: crate::config::ParamValues,
    /// Where its output lines go while it runs (see [`crate::live`]).
    pub live: crate::live::LiveLines,
    /// The trace context of the run's span, handed on to what the run
    /// starts (`TRACEPARENT`, a `traceparent` header,
    /// [`Run::traceparent`](crate::Run::traceparent)); None when no
    /// OpenTelemetry layer records the span.
    pub trace: Option<crate::trace::TraceParent>,
}

impl RunContext {
    /// The tick for log lines: RFC 3339, or `-` when there is none.
    pub fn tick_label(&self) -> String {
        if self.tick_ms <= 0 {
            return "-".to_string();
        }
        chrono::DateTime::from_timestamp_millis(self.tick_ms).map_or_else(String::new, |t| {
            t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        })
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptEnd {
    pub status: Status,
    /// A process's exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended a process, when one did.
    pub signal: Option<i32>,
    /// What the attempt used, where it can be measured.
    pub usage: Usage,
}

impl AttemptEnd {
    /// An attempt that ended with `status` and no process status.
    pub fn bare(status: Status) -> AttemptEnd {
        AttemptEnd {
            status,
            exit_code: None,
            signal: None,
            usage: Usage::default(),
        }
    }
}

/// The CPU time and peak memory of a run's processes, where the task can
/// measure them (the process task always does: from its cgroup's
/// `cpu.stat` and `memory.peak`, else from `wait4`); `None` where it
/// cannot (a handler, an attempt that did not start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User and system CPU time.
    pub cpu_us: Option<u64>,
    /// The memory of all the run's processes together (`memory.peak`), or
    /// where there is no such figure the largest resident set of any one
    /// of them (`ru_maxrss`).
    pub peak_memory_bytes: Option<u64>,
    /// Processes the kernel's OOM killer killed (`memory_max` reached).
    pub oom_kills: Option<u64>,
}

impl Usage {
    /// Two attempts' usage together: CPU adds up, the peak is the higher.
    pub fn and(self, other: Usage) -> Usage {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        Usage {
            cpu_us: sum(self.cpu_us, other.cpu_us),
            peak_memory_bytes: self.peak_memory_bytes.max(other.peak_memory_bytes),
            oom_kills: sum(self.oom_kills, other.oom_kills),
        }
    }
}

/// One attempt of a task, borrowing its context and the run's output.
pub type Attempt<'a> = Pin<Box<dyn Future<Output = AttemptEnd> + Send + 'a>>;

/// The work a run does.
pub trait Task: Send + Sync {
    /// Runs one attempt. Lines of output go to `output` (the outcome keeps
    /// its tail). After `stop` resolves the attempt ends as soon as it can,
    /// with the stop's status.
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a>;
}

/// Runs nothing and succeeds at once, in process: the benchmark's task,
/// which leaves only the coordination to measure.
#[cfg(any(test, feature = "internals"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct Noop;

#[cfg(any(test, feature = "internals"))]
impl Task for Noop {
    fn attempt<'a>(
        &'a self,
        _run: &'a RunContext,
        _stop: StopSignal,
        _output: &'a mut Tail,
    ) -> Attempt<'a> {
        Box::pin(std::future::ready(AttemptEnd {
            status: Status::Ok,
            exit_code: Some(0),
            signal: None,
            usage: Usage::default(),
        }))
    }
}

/// A handler job whose handler this process did not register (a job the
/// library added in another program, seen here through a shared job
/// table): every attempt fails and says so.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unregistered;

impl Task for Unregistered {
    fn attempt<'a>(
        &'a self,
        run: &'a RunContext,
        _stop: StopSignal,
        output: &'a mut Tail,
    ) -> Attempt<'a> {
        output.push_line(
            format!(
                "[cronlease] no handler is registered for job {:?} in this process",
                run.job
            )
            .as_bytes(),
        );
        Box::pin(std::future::ready(AttemptEnd::bare(Status::Failed)))
    }
}

/// Which task runs which job: the job's command in a process, unless the
/// program that embeds the daemon registered a task for it.
#[derive(Clone, Default)]
pub struct Tasks {
    every_job: Option<Arc<dyn Task>>,
    by_job: HashMap<String, Arc<dyn Task>>,
}

impl fmt::Debug for Tasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tasks")
            .field("every_job", &self.every_job.is_some())
            .field("by_job", &self.by_job.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Tasks {
    /// Every job runs its command (the `cronlease` binary).
    pub fn processes() -> Tasks {
        Tasks::default()
    }

    /// Every job runs `task` instead of its command (the benchmark's and
    /// the engine tests' replicas).
    #[cfg(feature = "internals")]
    pub fn every_job(task: Arc<dyn Task>) -> Tasks {
        Tasks {
            every_job: Some(task),
            by_job: HashMap::new(),
        }
    }

    /// `job` runs `task` instead of its command.
    pub fn job(mut self, job: &str, task: Arc<dyn Task>) -> Tasks {
        self.by_job.insert(job.to_string(), task);
        self
    }

    /// Registers `task` for `job` in place (a job added while running).
    pub fn insert(&mut self, job: &str, task: Arc<dyn Task>) {
        self.by_job.insert(job.to_string(), task);
    }

    /// Forgets the task of `job` (a job removed while running).
    pub fn remove(&mut self, job: &str) {
        self.by_job.remove(job);
    }

    /// The task registered for `job`; None: its command runs.
    pub fn registered(&self, job: &str) -> Option<Arc<dyn Task>> {
        self.by_job.get(job).or(self.every_job.as_ref()).cloned()
    }
}

/// How a run's attempts are bounded and repeated.
#[derive(Debug, Clone, Copy)]
pub struct Attempts {
    /// Per attempt; None: no limit.
    pub timeout: Option<Duration>,
    /// Attempts after the first one that failed or timed out.
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Bytes of output the outcome keeps (the tail).
    pub output_tail_bytes: usize,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    /// The last attempt's status.
    pub status: Status,
    /// The last attempt's exit code and signal (see [`AttemptEnd`]).
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// How many attempts ran.
    pub attempts: u32,
    /// The tail of the output of every attempt, attempt markers included.
    pub output: String,
    /// What every attempt used together.
    pub usage: Usage,
}

/// Runs `task` to the end: attempts until one succeeds, the retries are
/// used up, or `stop` (the lease's signal: lost lease, shutdown) ends it.
pub async fn execute(
    task: &dyn Task,
    mut run: RunContext,
    attempts: Attempts,
    mut stop: watch::Receiver<Option<Stop>>,
) -> RunResult {
    let mut tail = Tail::new(attempts.output_tail_bytes);
    let mut usage = Usage::default();
    loop {
        run.attempt += 1;
        if run.attempt > 1 {
            tail.push_line(
                format!(
                    "[cronlease] attempt {} of {}",
                    run.attempt,
                    attempts.retries + 1
                )
                .as_bytes(),
            );
        }
        let end = attempt(task, &run, attempts.timeout, &mut stop, &mut tail).await;
        usage = usage.and(end.usage);
        let retryable = matches!(end.status, Status::Failed | Status::Timeout);
        let result = |status| RunResult {
            status,
            exit_code: end.exit_code,
            signal: end.signal,
            attempts: run.attempt,
            output: tail.text(),
            usage,
        };
        if !retryable || run.attempt > attempts.retries {
            return result(end.status);
        }
        warn!(
            job = %run.job, run_id = %run.run_id, attempt = run.attempt, status = %end.status,
            backoff = ?attempts.retry_backoff, "attempt failed, retrying"
        );
        tokio::select! {
            () = sleep(attempts.retry_backoff) => {}
            reason = next_stop(&mut stop) => return result(reason.status()),
        }
    }
}

/// One attempt under the lease's stop signal and the timeout: both are
/// forwarded to the task, which ends the attempt.
async fn attempt(
    task: &dyn Task,
    run: &RunContext,
    timeout: Option<Duration>,
    lease: &mut watch::Receiver<Option<Stop>>,
    tail: &mut Tail,
) -> AttemptEnd {
    if let Some(reason) = *lease.borrow_and_update() {
        return AttemptEnd::bare(reason.status());
    }
    let (tell, told) = watch::channel(None);
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut timed_out = false;
    let mut lease_open = true;
    // Boxed futures are Unpin: `work` is polled in place and dropped before
    // the tail is written again.
    let mut work =
        std::panic::AssertUnwindSafe(task.attempt(run, StopSignal(told), tail)).catch_unwind();
    let ended = loop {
        tokio::select! {
            end = &mut work => break end,
            () = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() && !timed_out => {
                timed_out = true;
                warn!(
                    job = %run.job, tick = %run.tick_label(), fence = run.fence, run_id = %run.run_id,
                    replica = %run.replica, ?timeout, "timed out, stopping"
                );
                tell.send_replace(Some(Stop::Timeout));
            }
            changed = lease.changed(), if lease_open => match changed {
                Ok(()) => {
                    if let Some(reason) = *lease.borrow_and_update() {
                        tell.send_replace(Some(reason));
                    }
                }
                Err(_) => lease_open = false,
            },
        }
    };
    drop(work);
    ended.unwrap_or_else(|panic| {
        let message = panic_message(&*panic);
        error!(job = %run.job, run_id = %run.run_id, panic = %message, "the run panicked; recording the attempt as failed");
        tail.push_line(format!("[cronlease] the run panicked: {message}").as_bytes());
        AttemptEnd::bare(Status::Failed)
    })
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

/// Resolves with the stop requested already or the next one; never, once
/// the sender is gone.
async fn next_stop(stop: &mut watch::Receiver<Option<Stop>>) -> Stop {
    first_stop(stop, |_| true).await
}

/// Resolves with the first stop `wanted` accepts, among the one requested
/// already and those that follow; never, once the sender is gone.
pub(crate) async fn first_stop(
    stop: &mut watch::Receiver<Option<Stop>>,
    wanted: impl Fn(Stop) -> bool,
) -> Stop {
    let mut found = None;
    // The borrow `wait_for` returns is dropped at once: it must not be
    // held across an await.
    let sender_gone = stop
        .wait_for(|requested| {
            found = requested.filter(|&reason| wanted(reason));
            found.is_some()
        })
        .await
        .is_err();
    match found {
        Some(reason) if !sender_gone => reason,
        _ => std::future::pending().await,
    }
}
