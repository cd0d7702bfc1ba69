//! A won tick's run: started under the watchdog's lease, its outcome
//! delivered to Redis (or the spool), a rerun handed over by a finish or a
//! sweep started, and the sweep of runs whose holder died.

use super::*;

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
}

/// Starts a claimed run under the watchdog; the returned task ends when its
/// outcome is recorded or spooled.
pub(super) fn start_run(ctx: &Arc<Ctx>, job: &Arc<Job>, start: RunStart) -> JoinHandle<()> {
    let (stop_tx, stop_rx) = watch::channel(None);
    ctx.watchdog.send(watchdog::Command::Hold(LeaseHold {
        job: job.name.clone(),
        run_id: start.run_id.clone(),
        tick_ms: start.tick_ms,
        fence: start.fence,
        lease_key: start.lease_key.clone(),
        replica: ctx.identity.replica.clone(),
        valid_from: start.valid_from,
        stop: stop_tx,
    }));
    let mut env: Vec<(String, String)> = job
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.extend([
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
            ctx.identity.replica.clone(),
        ),
    ]);
    let spec = RunSpec {
        job: job.name.clone(),
        run_id: start.run_id.clone(),
        tick: rfc3339(start.tick_ms),
        fence: start.fence,
        replica: ctx.identity.replica.clone(),
        command: job.command.clone(),
        workdir: job.workdir.clone(),
        env,
        timeout: job.timeout,
        kill_grace: ctx.config.daemon.kill_grace,
        retries: job.retries,
        retry_backoff: job.retry_backoff,
        output_tail_bytes: ctx.config.daemon.output_tail_bytes,
        stdio: runner::StdioMode::Capture,
    };
    let ctx2 = ctx.clone();
    let job = job.clone();
    ctx.runs.spawn(async move {
        let ctx = ctx2;
        // A panic in the run must not leave its lease renewed forever: it
        // becomes a failed outcome, and the lease is released as always.
        let result = match std::panic::AssertUnwindSafe(runner::execute(&spec, stop_rx)).catch_unwind().await {
            Ok(result) => result,
            Err(_) => {
                error!(job = %spec.job, run_id = %spec.run_id, "the run panicked; recording it as failed");
                runner::RunResult {
                    status: Status::Failed,
                    exit_code: None,
                    signal: None,
                    attempts: 1,
                    output: "[cronlease] internal error: the run panicked (see the replica's log)\n".to_string(),
                }
            }
        };
        // Release before finishing, and wait for the watchdog to drop the
        // lease: a renewal racing the finish would see the lease gone.
        let (done_tx, done_rx) = oneshot::channel();
        ctx.watchdog.send(watchdog::Command::Release {
            run_id: start.run_id.clone(),
            done: done_tx,
        });
        let _ = done_rx.await;
        let outcome = Outcome {
            job: spec.job.clone(),
            tick_ms: start.tick_ms,
            fence: start.fence,
            run_id: start.run_id,
            replica: ctx.identity.replica.clone(),
            host: ctx.identity.host.clone(),
            started_ms: start.started_ms,
            finished_ms: ctx.clock.now_ms(),
            status: result.status,
            exit_code: result.exit_code,
            signal: result.signal,
            attempts: result.attempts,
            output: result.output,
            trigger: start.trigger,
            lease_key: start.lease_key,
        };
        info!(
            job = %outcome.job, tick = %rfc3339(outcome.tick_ms), fence = outcome.fence, run_id = %outcome.run_id,
            replica = %outcome.replica, status = %outcome.status, exit_code = outcome.exit_code,
            attempts = outcome.attempts, duration_ms = outcome.finished_ms - outcome.started_ms, "finished"
        );
        metrics::counter!(telemetry::RUNS, "job" => outcome.job.clone(), "status" => outcome.status.as_str()).increment(1);
        metrics::histogram!(telemetry::RUN_DURATION, "job" => outcome.job.clone())
            .record((outcome.finished_ms - outcome.started_ms).max(0) as f64 / 1000.0);
        if outcome.status == Status::Ok {
            metrics::gauge!(telemetry::LAST_SUCCESS, "job" => outcome.job.clone()).set(outcome.finished_ms as f64 / 1000.0);
        }
        deliver(&ctx, &job, outcome).await;
    })
}

/// Writes an outcome to Redis, or spools it when Redis does not take it.
/// Starts the job's pending rerun if the finish hands one over.
pub(super) async fn deliver(ctx: &Arc<Ctx>, job: &Arc<Job>, outcome: Outcome) {
    let rerun_id = Uuid::new_v4().to_string();
    let offer = RerunOffer {
        overlap: job.overlap,
        lease: ctx.config.daemon.lease,
        new_run_id: &rerun_id,
        min_fence: ctx.marks.get(&job.name).fence,
        replica: &ctx.identity.replica,
        host: &ctx.identity.host,
    };
    let offer = (job.on_holder_lost == OnHolderLost::Rerun && !ctx.claiming.is_cancelled())
        .then_some(&offer);
    for attempt in 0..3 {
        let sent = Instant::now();
        match ctx
            .store
            .finish(&outcome, ctx.config.daemon.history, offer)
            .await
        {
            Ok(reply) => {
                ctx.redis_answered();
                log_finish(&outcome, &reply);
                if let Some(rerun) = reply.rerun {
                    start_rerun(ctx, job, rerun, rerun_id, sent);
                }
                return;
            }
            Err(e) => {
                ctx.redis_failed(&e);
                debug!(run_id = %outcome.run_id, attempt, error = %e, "cannot record outcome yet");
                sleep(Duration::from_millis(200)).await;
            }
        }
    }
    match ctx.spool.save(&outcome) {
        Ok(path) => {
            warn!(job = %outcome.job, run_id = %outcome.run_id, path = %path.display(), "Redis unreachable; outcome spooled");
            count_spooled(ctx);
            ctx.spooled.notify_one();
        }
        Err(e) => error!(
            error = %e, outcome = %serde_json::to_string(&outcome).unwrap_or_default(),
            "cannot spool the outcome either; it is only in this log"
        ),
    }
}

pub(super) fn log_finish(outcome: &Outcome, reply: &FinishReply) {
    let (run_id, id) = (&outcome.run_id, &reply.id);
    match reply.recorded {
        Recorded::Current => debug!(%run_id, stream_id = %id, "outcome recorded"),
        Recorded::Stale => warn!(
            job = %outcome.job, %run_id, stream_id = %id,
            "outcome recorded as stale: another replica had already recorded this run (abandoned)"
        ),
        Recorded::Duplicate => debug!(%run_id, stream_id = %id, "outcome was already recorded"),
    }
}

/// Starts a rerun that a sweep or a finish started in Redis for us.
pub(super) fn start_rerun(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    rerun: Rerun,
    run_id: String,
    sent: Instant,
) {
    ctx.marks.note(&job.name, None, Some(rerun.fence));
    info!(
        job = %job.name, tick = %rfc3339(rerun.tick_ms), fence = rerun.fence, %run_id,
        "claimed a rerun of an abandoned tick"
    );
    start_run(
        ctx,
        job,
        RunStart {
            tick_ms: rerun.tick_ms,
            run_id,
            fence: rerun.fence,
            lease_key: rerun.lease_key,
            started_ms: rerun.started_ms,
            trigger: Trigger::Rerun,
            valid_from: sent,
        },
    );
    ctx.heartbeat_now.notify_one();
}

/// Records abandoned runs of `job` and starts the rerun, if the job wants one.
pub(super) async fn sweep(ctx: &Arc<Ctx>, job: &Arc<Job>) {
    loop {
        let new_run_id = Uuid::new_v4().to_string();
        let sent = Instant::now();
        let request = SweepRequest {
            job: &job.name,
            replica: &ctx.identity.replica,
            host: &ctx.identity.host,
            history: ctx.config.daemon.history,
            rerun: job.on_holder_lost == OnHolderLost::Rerun && !ctx.claiming.is_cancelled(),
            overlap: job.overlap,
            lease: ctx.config.daemon.lease,
            new_run_id: &new_run_id,
            min_fence: ctx.marks.get(&job.name).fence,
        };
        let reply = match ctx.store.sweep(&request).await {
            Ok(reply) => reply,
            Err(e) => {
                ctx.redis_failed(&e);
                warn!(job = %job.name, error = %e, "cannot sweep abandoned runs");
                return;
            }
        };
        if reply.abandoned > 0 {
            warn!(job = %job.name, abandoned = reply.abandoned, "recorded runs whose replica died as abandoned");
        }
        let Some(rerun) = reply.rerun else { return };
        start_rerun(ctx, job, rerun, new_run_id, sent);
        // With overlap = "allow" further pending reruns can start now; else
        // the finish of this one starts the next.
        if job.overlap != Overlap::Allow {
            return;
        }
    }
}
