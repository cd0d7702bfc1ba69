//! Claiming a tick: the catch-up after a start or an outage (the misfire
//! policy), the claim with its retries until Redis gives a definite answer,
//! and the missed ticks a claim jumped over.

use super::*;

/// How one attempt to claim a tick ended.
pub(super) enum ClaimEnd {
    /// Redis answered: the tick is ours (the run is started) or not.
    Answered(Option<JoinHandle<()>>),
    /// The tick was not claimed in time (Redis was unreachable, or answered
    /// only after the deadline): the misfire policy decides.
    Late,
    Cancelled,
}

/// Handles ticks that passed while this replica could not claim them (it was
/// not running, or Redis was away), per the job's misfire policy. Returns
/// the instant up to which ticks are handled, or None when cancelled.
pub(super) async fn catch_up(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    cancel: &CancellationToken,
) -> Option<i64> {
    let mut backoff = Duration::from_millis(100);
    let stored = loop {
        match ctx.store.last_tick(&job.name).await {
            Ok(stored) => break stored,
            Err(e) => {
                ctx.redis_failed(&e);
                debug!(job = %job.name, error = %e, "waiting for Redis to catch up");
                if !pause(backoff, cancel).await {
                    return None;
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    };
    ctx.redis_answered();
    sweep(ctx, job).await;
    let now = ctx.clock.now_ms();
    let last = match (stored, ctx.marks.get(&job.name).last_tick) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => match a.or(b) {
            Some(last) => last,
            // Never claimed anywhere: nothing was missed.
            None => return Some(now),
        },
    };
    let grace_ms = i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX);
    let horizon = last.max(now.saturating_sub(grace_ms).saturating_sub(1));
    let mut missed: Vec<i64> = Vec::new();
    let mut on_time: Vec<i64> = Vec::new();
    let mut cursor = to_datetime(horizon);
    while let Some(tick) = job.schedule.next_after(cursor) {
        let tick_ms = tick.timestamp_millis();
        if tick_ms > now {
            break;
        }
        if now - tick_ms <= LATE_MS {
            on_time.push(tick_ms);
        } else {
            missed.push(tick_ms);
            if missed.len() > MAX_CATCH_UP {
                missed.remove(0);
            }
        }
        cursor = tick;
    }
    if !missed.is_empty() {
        info!(
            job = %job.name, missed = missed.len(), policy = %job.misfire,
            oldest = %rfc3339(missed[0]), latest = %rfc3339(missed[missed.len() - 1]),
            "ticks were missed"
        );
    }
    let to_claim: Vec<i64> = match job.misfire {
        Misfire::Skip => Vec::new(),
        Misfire::RunOnce => missed.last().copied().into_iter().collect(),
        Misfire::RunAll => missed,
    };
    for tick_ms in to_claim {
        match claim(ctx, job, tick_ms, Trigger::Misfire, cancel).await {
            // run_all runs missed ticks one after another.
            ClaimEnd::Answered(Some(run)) if job.misfire == Misfire::RunAll => {
                tokio::select! {
                    _ = run => {}
                    () = cancel.cancelled() => return None,
                }
            }
            ClaimEnd::Answered(_) | ClaimEnd::Late => {}
            ClaimEnd::Cancelled => return None,
        }
    }
    for tick_ms in on_time {
        if let ClaimEnd::Cancelled = claim(ctx, job, tick_ms, Trigger::Schedule, cancel).await {
            return None;
        }
    }
    Some(now)
}

/// Claims one tick, retrying while Redis is away, until Redis answers.
///
/// Every attempt carries the claim's deadline (by Redis time: `LATE_MS`
/// after the tick, `misfire_grace` for catch-up): an attempt that reaches
/// Redis after it takes no effect. So once an attempt may have been sent
/// (an ambiguous error), the loop does not give up on its own: only an
/// answer tells whether an earlier attempt won, and an answer after the
/// deadline is definite (`Expired`: nothing can win any more; `Claimed`:
/// an earlier attempt won and its lease still holds).
pub(super) async fn claim(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    tick_ms: i64,
    trigger: Trigger,
    cancel: &CancellationToken,
) -> ClaimEnd {
    // One run id for every attempt: the claim script recognises a retry of
    // a claim that won but whose reply was lost.
    let run_id = Uuid::new_v4().to_string();
    let deadline_ms = match trigger {
        Trigger::Schedule => tick_ms + LATE_MS,
        Trigger::Misfire | Trigger::Rerun | Trigger::Manual => {
            tick_ms.saturating_add(i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX))
        }
    };
    let mut backoff = Duration::from_millis(50);
    // Whether some attempt may have reached Redis without our hearing back.
    let mut maybe_sent = false;
    let mut warned = false;
    loop {
        if cancel.is_cancelled() {
            return ClaimEnd::Cancelled;
        }
        let marks = ctx.marks.get(&job.name);
        let request = ClaimRequest {
            job: &job.name,
            tick_ms,
            run_id: &run_id,
            lease: ctx.config.daemon.lease,
            overlap: job.overlap,
            replica: &ctx.identity.replica,
            host: &ctx.identity.host,
            history: ctx.config.daemon.history,
            min_tick: marks.last_tick.unwrap_or(-1),
            min_fence: marks.fence,
            trigger,
            wait_if_busy: trigger == Trigger::Misfire && job.misfire == Misfire::RunAll,
            deadline_ms,
        };
        let sent = Instant::now();
        let reply = match ctx.store.claim(&request).await {
            Ok(reply) => reply,
            Err(e) => {
                count_claim(job, "error");
                // Quorum masters that answered but split between racing
                // replicas are not an outage.
                if !matches!(
                    e,
                    StoreError::NoQuorum {
                        reachable: true,
                        ..
                    }
                ) {
                    ctx.redis_failed(&e);
                }
                maybe_sent |= e.is_ambiguous();
                if ctx.clock.now_ms() > deadline_ms {
                    if !maybe_sent {
                        warn!(job = %job.name, tick = %rfc3339(tick_ms), %run_id, error = %e, "tick not claimed: Redis unreachable");
                        return ClaimEnd::Late;
                    }
                    if !warned {
                        warned = true;
                        warn!(job = %job.name, tick = %rfc3339(tick_ms), %run_id, error = %e, "claim deadline passed with an attempt unanswered; waiting for Redis to say whether it won");
                    }
                }
                debug!(job = %job.name, tick = %rfc3339(tick_ms), ambiguous = e.is_ambiguous(), error = %e, "claim failed; retrying");
                // Jitter: with `quorum`, replicas that split the masters
                // between them undo their claims and must not retry in step.
                let jitter = Duration::from_millis((Uuid::new_v4().as_u128() % 50) as u64);
                if !pause(backoff + jitter, cancel).await {
                    return ClaimEnd::Cancelled;
                }
                backoff = (backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        ctx.redis_answered();
        let tick = rfc3339(tick_ms);
        match reply {
            ClaimReply::Claimed {
                fence,
                started_ms,
                lease_key,
                expired,
                regressed,
                previous,
                acked,
            } => {
                let wanted = ctx.config.redis.min_replicas_ack;
                if let Some(acked) = acked.filter(|&acked| acked < wanted) {
                    count_claim(job, "not_durable");
                    ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                    warn!(job = %job.name, %tick, fence, %run_id, acked, wanted, "claim not durable: fewer Redis replicas acknowledged it than min_replicas_ack within ack_timeout; not running it");
                    let outcome = Outcome {
                        job: job.name.clone(),
                        tick_ms,
                        fence,
                        run_id,
                        replica: ctx.identity.replica.clone(),
                        host: ctx.identity.host.clone(),
                        started_ms,
                        finished_ms: started_ms,
                        status: Status::NotDurable,
                        exit_code: None,
                        signal: None,
                        attempts: 0,
                        output: format!(
                            "[cronlease] the claim reached {acked} of {wanted} Redis replicas within ack_timeout; not run\n"
                        ),
                        trigger,
                        lease_key,
                    };
                    deliver(ctx, job, outcome).await;
                    return ClaimEnd::Answered(None);
                }
                count_claim(job, "claimed");
                metrics::histogram!(telemetry::TICK_LATENESS, "job" => job.name.clone())
                    .record((started_ms - tick_ms).max(0) as f64 / 1000.0);
                if regressed {
                    ctx.state_loss(Some(&job.name), "the job's high-water mark or fence in Redis was behind what this replica saw");
                }
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, fence, %run_id, replica = %ctx.identity.replica, trigger = trigger.as_str(), lateness_ms = started_ms - tick_ms, "claimed");
                let run = start_run(
                    ctx,
                    job,
                    RunStart {
                        tick_ms,
                        run_id,
                        fence,
                        lease_key,
                        started_ms,
                        trigger,
                        valid_from: sent,
                    },
                );
                record_missed(ctx, job, previous, tick_ms).await;
                if expired > 0 {
                    sweep(ctx, job).await;
                }
                return ClaimEnd::Answered(Some(run));
            }
            ClaimReply::Early { ms } => {
                count_claim(job, "early");
                debug!(job = %job.name, %tick, early_ms = ms, "early by Redis time; waiting");
                if !pause(
                    Duration::from_millis(u64::try_from(ms).unwrap_or(1).max(1)),
                    cancel,
                )
                .await
                {
                    return ClaimEnd::Cancelled;
                }
            }
            ClaimReply::Wait { ms } => {
                count_claim(job, "wait");
                debug!(job = %job.name, %tick, "a run is in flight; catch-up waits");
                let wait = Duration::from_millis(u64::try_from(ms).unwrap_or(100).clamp(20, 1000));
                if !pause(wait, cancel).await {
                    return ClaimEnd::Cancelled;
                }
            }
            ClaimReply::Expired { late_ms } => {
                count_claim(job, "expired");
                warn!(job = %job.name, %tick, %run_id, late_ms, "tick not claimed: Redis unreachable until after the claim deadline");
                return ClaimEnd::Late;
            }
            ClaimReply::Lapsed => {
                count_claim(job, "lapsed");
                warn!(job = %job.name, %tick, %run_id, "the claim won, but its lease lapsed before Redis answered: not running it; recording it abandoned");
                sweep(ctx, job).await;
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Taken {
                last_tick,
                regressed,
                fence,
            } => {
                if regressed {
                    ctx.state_loss(
                        Some(&job.name),
                        "the job's high-water mark in Redis was behind what this replica saw",
                    );
                }
                count_claim(job, "taken");
                ctx.marks.note(&job.name, Some(last_tick), Some(fence));
                debug!(job = %job.name, %tick, "taken by another replica");
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Paused {
                previous, fence, ..
            } => {
                count_claim(job, "paused");
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, "job is paused; tick skipped");
                record_missed(ctx, job, previous, tick_ms).await;
                return ClaimEnd::Answered(None);
            }
            ClaimReply::Busy {
                holder,
                previous,
                fence,
                ..
            } => {
                count_claim(job, "busy");
                ctx.marks.note(&job.name, Some(tick_ms), Some(fence));
                info!(job = %job.name, %tick, %holder, "a run is still in flight; tick recorded as skipped_overlap");
                record_missed(ctx, job, previous, tick_ms).await;
                return ClaimEnd::Answered(None);
            }
        }
    }
}

pub(super) fn count_claim(job: &Job, result: &'static str) {
    metrics::counter!(telemetry::CLAIMS, "job" => job.name.clone(), "result" => result)
        .increment(1);
}

/// At most this many missed ticks are recorded one by one after a gap.
pub(super) const MAX_MISSED_RECORDED: usize = 1000;

/// Records the schedule's ticks strictly between `previous` (the high-water
/// mark this claim moved past) and `tick_ms` as missed: nobody claimed them.
/// Only the replica whose claim moved the mark sees the gap, and the script
/// records each tick once.
pub(super) async fn record_missed(ctx: &Ctx, job: &Job, previous: i64, tick_ms: i64) {
    if previous < 0 {
        return;
    }
    let mut missed = Vec::new();
    let mut cursor = to_datetime(previous);
    while let Some(next) = job.schedule.next_after(cursor) {
        let next_ms = next.timestamp_millis();
        if next_ms >= tick_ms || missed.len() >= MAX_MISSED_RECORDED {
            break;
        }
        missed.push(next_ms);
        cursor = next;
    }
    if missed.is_empty() {
        return;
    }
    let store = &ctx.store;
    match store
        .record_missed(
            &job.name,
            &missed,
            &ctx.identity.replica,
            &ctx.identity.host,
            ctx.config.daemon.history,
        )
        .await
    {
        Ok(0) => {}
        Ok(n) => {
            metrics::counter!(telemetry::MISSED_TICKS, "job" => job.name.clone()).increment(n);
            warn!(
                job = %job.name, missed = n, first = %rfc3339(missed[0]), last = %rfc3339(missed[missed.len() - 1]),
                "ticks nobody claimed recorded as missed"
            );
        }
        Err(e) => {
            ctx.redis_failed(&e);
            warn!(job = %job.name, error = %e, "cannot record missed ticks");
        }
    }
}
