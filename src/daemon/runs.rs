//! A won tick's run: its task started under the watchdog's lease, its
//! outcome delivered to Redis (or the spool), and the sweep of runs whose
//! holder died. Delivering and sweeping return the reruns they claimed;
//! the caller starts them. What it sees of the replica is a `RunSide`
//! (a run's task keeps a `RunHandle`), which holds no claims.

use super::capacity::RunSlot;
use super::courier::{log_finish, spool_or_hold};
use super::ctx::RunSide;
use super::meters::JobMeters;
use super::notices::job_notices;
use super::time::{rfc3339, to_datetime};
use crate::config::Job;
use crate::config::OnHolderLost;
use crate::config::Overlap;
use crate::outcome::Outcome;
use crate::outcome::Status;
use crate::outcome::Trigger;
use crate::outcome::Upstream;
#[cfg(feature = "process")]
use crate::runner;
use crate::store::Attempt;
use crate::store::Rerun;
use crate::store::RerunOffer;
use crate::store::SweepRequest;
use crate::task;
use crate::task::Attempts;
use crate::task::RunContext;
use crate::task::RunResult;
use crate::watchdog::LeaseHold;
use chrono::SecondsFormat;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio::time::sleep;
use tokio::time::sleep_until;
use tracing::Instrument;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

/// A claimed tick about to run.
pub(super) struct RunStart {
    pub(super) tick_ms: i64,
    pub(super) run_id: String,
    pub(super) fence: u64,
    pub(super) lease_key: String,
    /// Redis time of the claim.
    pub(super) started_ms: i64,
    pub(super) trigger: Trigger,
    /// When the claim was sent: the lease is valid for `lease` from then.
    pub(super) valid_from: Instant,
    /// A tick claimed ahead: not started before this instant, which is
    /// the tick by Redis time (the lease holds meanwhile).
    pub(super) not_before: Option<Instant>,
    /// A follower's run: the upstream runs it follows.
    pub(super) upstream: Option<Arc<Upstream>>,
    /// The values of the job's parameters the run is given, checked: the
    /// defaults for a tick of the schedule, those of the request for a
    /// manual run, the upstream's or the defaults for a follower's, the
    /// first run's for a rerun. They go to its task and its outcome (and,
    /// but for a tick of the schedule, into Redis's record of the run in
    /// flight, for its `abandoned` record and its rerun).
    pub(super) params: crate::config::ParamValues,
    /// The run's place in the replica's capacity, taken before its claim
    /// was sent; None for a run Redis handed over (a rerun), which takes
    /// one when it starts.
    pub(super) slot: Option<RunSlot>,
    /// The trace context the run continues (a trigger that carried one):
    /// its span's parent. None: the run's span is a root.
    pub(super) traceparent: Option<crate::trace::TraceParent>,
}

/// Starts a claimed run under the watchdog; the returned task ends when its
/// outcome is recorded or spooled (and starts the rerun the finish handed
/// over, if any).
pub(super) fn start_run(side: &RunSide<'_>, job: &Arc<Job>, mut start: RunStart) -> JoinHandle<()> {
    // Kept until the run's outcome is delivered (or spooled).
    let slot = start
        .slot
        .take()
        .unwrap_or_else(|| side.capacity.take_anyway());
    let (stop_tx, mut stop_rx) = watch::channel(None);
    let held = side.runs.watchdog.hold(LeaseHold {
        job: job.name.clone(),
        run_id: start.run_id.clone(),
        tick_ms: start.tick_ms,
        fence: start.fence,
        lease_key: start.lease_key.clone(),
        replica: side.identity.replica.clone(),
        valid_from: start.valid_from,
        stop: stop_tx,
    });
    let registered = side
        .runs
        .tasks
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .registered(&job.name);
    let (span, trace) = run_span(side, job, &start);
    let task = registered.unwrap_or_else(|| command_task(side, job, &start, trace.as_ref()));
    let (live, live_writer) = crate::live::channel(
        &job.name,
        &start.run_id,
        side.config.daemon.live_output_lines,
    );
    let run = run_context(side, job, &start, live, trace);
    let attempts = Attempts {
        timeout: job.timeout,
        retries: job.retries,
        retry_backoff: job.retry_backoff,
        output_tail_bytes: side.config.daemon.output_tail_bytes,
    };
    // Looked up once: the run records three of its series.
    let meters = side.meters.job(&job.name);
    let handle = side.handle();
    let job = job.clone();
    side.runs.tracker.spawn(async move {
        if let Some(at) = start.not_before {
            // Claimed ahead: wait for the tick. A stop meanwhile (lost
            // lease, shutdown) ends the wait, and the run, unstarted.
            tokio::select! {
                () = sleep_until(at) => {}
                Ok(()) = stop_rx.changed() => {}
            }
            start.started_ms = start.started_ms.max(handle.side().clock.now_ms());
        }
        let lateness_ms = start.started_ms - start.tick_ms;
        crate::trace::record_start(&span, lateness_ms);
        if matches!(start.trigger, Trigger::Schedule | Trigger::Misfire) {
            meters.lateness().record(lateness_ms.max(0) as f64 / 1000.0);
        }
        let result = execute(&*task, run, attempts, stop_rx, live_writer, &handle)
            .instrument(span.clone())
            .await;
        crate::trace::record_end(&span, result.status.as_str(), result.attempts);
        // Opened once the task is done: while it runs, only the handle is
        // kept (thousands of runs may be in flight).
        let side = handle.side();
        // Released before the finish deletes the lease: a renewal on its
        // way that finds it gone is then not taken for a loss.
        side.runs.watchdog.release(held);
        let finished_ms = side.clock.now_ms();
        let outcome = outcome(&side, &job, start, finished_ms, result);
        count_finished(&meters, &outcome);
        hand_over(&side, &job, deliver(&side, &job, &outcome).await, slot);
        if side.drain.is_out() {
            // Drained: its record says so once its last run is done.
            side.heartbeat_now.notify_one();
        }
    })
}

/// What a run's task is told of the run.
fn run_context(
    side: &RunSide<'_>,
    job: &Job,
    start: &RunStart,
    live: crate::live::LiveLines,
    trace: Option<crate::trace::TraceParent>,
) -> RunContext {
    RunContext {
        job: job.name.clone(),
        tick_ms: start.tick_ms,
        fence: start.fence,
        run_id: start.run_id.clone(),
        replica: side.identity.replica.clone(),
        attempt: 0,
        grace: side.config.daemon.kill_grace,
        upstream: start.upstream.clone(),
        trigger: start.trigger,
        params: start.params.clone(),
        live,
        trace,
    }
}

/// The run's span (`cronlease.run`), a child of the trigger's trace
/// context if it carried one, and the trace context it hands on (None when
/// no OpenTelemetry layer records it).
fn run_span(
    side: &RunSide<'_>,
    job: &Job,
    start: &RunStart,
) -> (tracing::Span, Option<crate::trace::TraceParent>) {
    let span = crate::trace::run_span(
        crate::trace::RunFields {
            job: &job.name,
            tick_ms: start.tick_ms,
            fence: start.fence,
            replica: &side.identity.replica,
            run_id: &start.run_id,
            trigger: start.trigger.as_str(),
        },
        start.traceparent.as_ref(),
    );
    let trace = crate::trace::traceparent_of(&span);
    (span, trace)
}

/// Runs the task's attempts with the live output's writer beside them, in
/// the same future: the writer ends with the task, its last lines and
/// the end entry sent before the outcome is recorded.
async fn execute(
    task: &dyn task::Task,
    run: RunContext,
    attempts: Attempts,
    stop: watch::Receiver<Option<task::Stop>>,
    live_writer: crate::live::LiveWriter,
    handle: &super::ctx::RunHandle,
) -> RunResult {
    let store = handle.side().store;
    let task_ended = tokio::sync::Notify::new();
    let (result, ()) = tokio::join!(
        async {
            let result = task::execute(task, run, attempts, stop).await;
            task_ended.notify_one();
            result
        },
        live_writer.run(store, task_ended.notified())
    );
    result
}

/// Starts the rerun a finish handed over, if any, in the ended run's
/// place in the capacity; else gives the place back.
fn hand_over(side: &RunSide<'_>, job: &Arc<Job>, rerun: Option<RunStart>, slot: RunSlot) {
    if let Some(mut rerun) = rerun {
        rerun.slot = Some(slot);
        start_reruns(side, job, vec![rerun]);
    }
}

/// The job's command as a process task, or its request as an HTTP task;
/// a job with neither (an embedded job whose handler this program lacks,
/// or work this build cannot do) fails and says so.
#[cfg_attr(
    not(all(feature = "process", feature = "http-jobs")),
    allow(unused_variables)
)]
fn command_task(
    side: &RunSide<'_>,
    job: &Job,
    start: &RunStart,
    trace: Option<&crate::trace::TraceParent>,
) -> Arc<dyn task::Task> {
    #[cfg(feature = "http-jobs")]
    if let crate::config::Command::Http(request) = &job.command {
        let request = (**request).clone();
        return Arc::new(crate::http_job::HttpTask {
            client: side
                .runs
                .http_clients
                .client(request.ca_file.as_deref(), request.redirects),
            request,
            output_bytes: side.config.daemon.output_tail_bytes,
        });
    }
    #[cfg(feature = "process")]
    if let Some(argv) = runner::Process::argv(&job.command) {
        return Arc::new(process(side, job, start, argv, trace));
    }
    Arc::new(task::Unregistered)
}

/// The job's command (`argv`) as a process task, with the run's
/// `CRONLEASE_*` environment.
#[cfg(feature = "process")]
fn process(
    side: &RunSide<'_>,
    job: &Job,
    start: &RunStart,
    argv: Vec<String>,
    trace: Option<&crate::trace::TraceParent>,
) -> runner::Process {
    let mut run = vec![
        ("CRONLEASE_JOB".to_string(), job.name.clone()),
        (
            "CRONLEASE_TICK".to_string(),
            to_datetime(start.tick_ms).to_rfc3339_opts(SecondsFormat::Secs, true),
        ),
        ("CRONLEASE_TICK_MS".to_string(), start.tick_ms.to_string()),
        ("CRONLEASE_FENCE".to_string(), start.fence.to_string()),
        ("CRONLEASE_RUN_ID".to_string(), start.run_id.clone()),
        (
            "CRONLEASE_REPLICA".to_string(),
            side.identity.replica.clone(),
        ),
        (
            "CRONLEASE_TRIGGER".to_string(),
            start.trigger.as_str().to_string(),
        ),
    ];
    if let Some(trace) = trace {
        // W3C Trace Context's environment carrier: the process's spans
        // join the run's trace as its children.
        run.push(("TRACEPARENT".to_string(), trace.to_string()));
    }
    if let Some(upstream) = &start.upstream {
        run.extend(upstream.env());
    }
    let params = start.params.iter();
    run.extend(params.map(|(name, value)| (crate::config::param_env_name(name), value.clone())));
    // Read in place, not copied: the guard ends with this statement.
    let env = runner::RunEnv::new(
        &side
            .runs
            .replica_env
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
        &side.config.daemon.inherit_env,
        job,
        run,
    );
    runner::Process {
        argv,
        workdir: job.workdir.clone(),
        env,
        stdio: runner::StdioMode::Capture,
        containment: side.containment().clone(),
        leftovers: job.leftovers,
        limits: job.limits,
    }
}

/// The finish log line and the run metrics.
fn count_finished(meters: &JobMeters, outcome: &Outcome) {
    info!(
        job = %outcome.job, tick = %rfc3339(outcome.tick_ms), fence = outcome.fence, run_id = %outcome.run_id,
        replica = %outcome.replica, status = %outcome.status, exit_code = outcome.exit_code,
        attempts = outcome.attempts, duration_ms = outcome.finished_ms - outcome.started_ms, "finished"
    );
    meters.count_run(outcome.status);
    if let Some(cpu_ms) = outcome.cpu_ms {
        meters.cpu().record(cpu_ms as f64 / 1000.0);
    }
    meters
        .duration()
        .record((outcome.finished_ms - outcome.started_ms).max(0) as f64 / 1000.0);
    if outcome.status == Status::Ok {
        meters
            .last_success()
            .set(outcome.finished_ms as f64 / 1000.0);
    }
}

/// The record that ends the run `start` of `job`.
fn outcome(
    side: &RunSide<'_>,
    job: &Job,
    start: RunStart,
    finished_ms: i64,
    result: RunResult,
) -> Outcome {
    Outcome {
        job: job.name.clone(),
        tick_ms: start.tick_ms,
        fence: start.fence,
        run_id: start.run_id,
        replica: side.identity.replica.clone(),
        host: side.identity.host.clone(),
        started_ms: start.started_ms,
        finished_ms,
        status: result.status,
        exit_code: result.exit_code,
        signal: result.signal,
        attempts: result.attempts,
        output: result.output,
        trigger: start.trigger,
        lease_key: start.lease_key,
        cpu_ms: result.usage.cpu_us.map(|us| us / 1000),
        oom_kills: result.usage.oom_kills.filter(|&n| n > 0),
        peak_memory_kb: result.usage.peak_memory_bytes.map(|b| b / 1024),
        upstream: start.upstream,
        params: start.params,
    }
}

/// The outcome of a tick claimed but not run because the claim is not
/// durable (fewer Redis replicas acknowledged it than `min_replicas_ack`).
pub(super) fn not_durable_outcome(
    side: &RunSide<'_>,
    job: &Job,
    start: RunStart,
    acked: u32,
) -> Outcome {
    let wanted = side.config.redis.min_replicas_ack;
    let finished_ms = start.started_ms;
    let result = RunResult {
        status: Status::NotDurable,
        exit_code: None,
        signal: None,
        attempts: 0,
        output: format!(
            "[cronlease] the claim reached {acked} of {wanted} Redis replicas within ack_timeout; not run\n"
        ),
        usage: crate::task::Usage::default(),
    };
    outcome(side, job, start, finished_ms, result)
}

/// Writes an outcome to Redis, or spools it when Redis does not take it.
/// Returns the job's pending rerun when the finish hands one over (its
/// claim is made: the caller starts it). The outcome is borrowed: a run's
/// task keeps it once while the finish waits for its batch, not also in
/// this future (272 bytes each, thousands of runs at once under load).
#[must_use = "a rerun handed over is claimed in Redis and must be started"]
pub(super) async fn deliver(side: &RunSide<'_>, job: &Job, outcome: &Outcome) -> Option<RunStart> {
    // A rerun's id and offer only for a job whose lost runs are rerun: the
    // usual finish makes neither (a UUID and a marks look-up per run).
    let rerun_id = reruns_wanted(side, job).then(|| Uuid::new_v4().to_string());
    let notices = job_notices(side.store.keys(), job);
    let offer = rerun_id.as_deref().map(|new_run_id| RerunOffer {
        claimant: side.claimant(job, side.marks.get(&job.name).min_fence(), &notices),
        new_run_id,
    });
    for attempt in [Attempt::First, Attempt::Again, Attempt::Again] {
        let sent = Instant::now();
        match side
            .store
            .finish(
                outcome,
                side.config.daemon.history,
                offer.as_ref(),
                attempt,
                (&notices, crate::store::GroupSlot::of(job)),
            )
            .await
        {
            Ok(reply) => {
                side.redis.answered();
                log_finish(outcome, &reply);
                return reply.rerun.map(|rerun| {
                    let run_id = rerun_id.expect(
                        "a finish hands a rerun over only when it was offered one, with its run id",
                    );
                    rerun_start(side, job, rerun, run_id, sent)
                });
            }
            Err(e) => {
                side.redis.failed(&e);
                debug!(run_id = %outcome.run_id, ?attempt, error = %e, "cannot record outcome yet");
                sleep(Duration::from_millis(200)).await;
            }
        }
    }
    spool_or_hold(side, outcome.clone()).await;
    None
}

/// The run of a rerun that a sweep or a finish claimed in Redis for us.
fn rerun_start(
    side: &RunSide<'_>,
    job: &Job,
    rerun: Rerun,
    run_id: String,
    sent: Instant,
) -> RunStart {
    side.marks.note(&job.name, None, Some(rerun.fence));
    info!(
        job = %job.name, tick = %rfc3339(rerun.tick_ms), fence = rerun.fence, %run_id,
        "claimed a rerun of an abandoned tick"
    );
    RunStart {
        tick_ms: rerun.tick_ms,
        run_id,
        fence: rerun.fence,
        lease_key: rerun.lease_key,
        started_ms: rerun.started_ms,
        trigger: Trigger::Rerun,
        valid_from: sent,
        not_before: None,
        upstream: Upstream::from_fields(
            rerun
                .context
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        )
        .map(Arc::new),
        params: rerun_params(job, &rerun.context),
        slot: None,
        traceparent: None,
    }
}

/// The parameters of a rerun: the first run's, which Redis kept with it
/// (checked again: they are read back), else the job's defaults.
fn rerun_params(job: &Job, context: &[(String, String)]) -> crate::config::ParamValues {
    let given = context.iter().filter_map(|(name, value)| {
        let name = name.strip_prefix(crate::config::PARAM_FIELD_PREFIX)?;
        Some((name.to_string(), value.clone()))
    });
    job.params.resolve(given).unwrap_or_else(|e| {
        warn!(job = %job.name, error = %e, "a rerun's parameters read back from Redis do not fit the job: it runs with the defaults");
        job.params.defaults()
    })
}

/// Starts reruns handed over by a finish or a sweep, and wakes the
/// heartbeat so that the runs it lists are fresh.
pub(super) fn start_reruns(side: &RunSide<'_>, job: &Arc<Job>, reruns: Vec<RunStart>) {
    if reruns.is_empty() {
        return;
    }
    for rerun in reruns {
        start_run(side, job, rerun);
    }
    side.heartbeat_now.notify_one();
}

/// Whether a finish or a sweep may claim a rerun of `job` for us: the job
/// wants abandoned runs rerun, no shutdown has begun and the replica is
/// not drained.
fn reruns_wanted(side: &RunSide<'_>, job: &Job) -> bool {
    job.on_holder_lost == OnHolderLost::Rerun
        && super::ctx::placed_here(side.config, job)
        && !side.claiming.is_cancelled()
        && !side.drain.is_out()
}

/// Records abandoned runs of `job`; returns the reruns claimed for us, if
/// the job wants them (the caller starts them).
#[must_use = "reruns handed over are claimed in Redis and must be started"]
pub(super) async fn sweep(side: &RunSide<'_>, job: &Job) -> Vec<RunStart> {
    let mut reruns = Vec::new();
    let notices = job_notices(side.store.keys(), job);
    loop {
        let new_run_id = Uuid::new_v4().to_string();
        let sent = Instant::now();
        let request = SweepRequest {
            job: &job.name,
            claimant: side.claimant(job, side.marks.get(&job.name).min_fence(), &notices),
            rerun: reruns_wanted(side, job).then_some(new_run_id.as_str()),
        };
        let reply = match side.store.sweep(&request).await {
            Ok(reply) => reply,
            Err(e) => {
                side.redis.failed(&e);
                warn!(job = %job.name, error = %e, "cannot sweep abandoned runs");
                return reruns;
            }
        };
        if reply.abandoned > 0 {
            warn!(job = %job.name, abandoned = reply.abandoned, "recorded runs whose replica died as abandoned");
        }
        if !reply.quarantined.is_empty() {
            metrics::counter!(crate::telemetry::UNTRUSTED_DATA, "source" => "state", "field" => "running")
                .increment(reply.quarantined.len() as u64);
            error!(
                job = %job.name, run_ids = ?reply.quarantined, key = %side.store.keys().quarantine(&job.name),
                "entries of the job's runs in flight that cronlease did not write were moved to its quarantine hash; `cronlease status` shows the job as needing repair until `cronlease repair {}`",
                job.name
            );
        }
        let Some(rerun) = reply.rerun else {
            return reruns;
        };
        reruns.push(rerun_start(side, job, rerun, new_run_id, sent));
        // With overlap = "allow" further pending reruns can be claimed now;
        // else the finish of this one hands over the next.
        if job.overlap != Overlap::Allow {
            return reruns;
        }
    }
}

/// What runs may inherit of this replica's environment, and the values of
/// its secrets; logs once which of its variables runs do not inherit
/// (names only).
#[cfg(feature = "process")]
pub(super) fn replica_env(
    config: &crate::config::Config,
    jobs: &super::table::JobTable,
    keys: &super::serve::DashboardKeys,
) -> crate::runner::ReplicaEnv {
    let env = crate::runner::ReplicaEnv::for_config(config, super::serve::token_secrets(keys));
    let job_patterns = jobs.values().map(|job| &job.inherit_env[..]);
    let dropped = env.not_inherited(&config.daemon.inherit_env, job_patterns);
    if !dropped.is_empty() {
        info!(
            variables = %dropped.join(" "),
            "no run inherits these variables of the replica's environment; list a name in [daemon] inherit_env (every run) or a job's inherit_env to pass it on"
        );
    }
    env
}

/// After a reload: what runs may inherit, with the secrets of `reloaded`
/// (the tokens and channels it adds) beside those of the running config.
#[cfg(feature = "process")]
pub(super) fn renew_replica_env(ctx: &super::ctx::Ctx, reloaded: &crate::config::Config) {
    let env = crate::runner::ReplicaEnv::for_reload(
        &ctx.config,
        reloaded,
        super::serve::token_secrets(&ctx.dashboard_keys),
    );
    *ctx.runs
        .replica_env
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = env;
}
