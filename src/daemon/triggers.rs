//! The trigger consumer: reads manual run requests (`cronlease trigger`)
//! as one consumer of the replicas' group, takes over requests a dead
//! consumer left pending, and starts the runs this replica wins.

use super::ctx::Ctx;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::runs::{RunStart, start_run};
use super::time::pause;
use crate::config::Job;
use crate::membership::Heartbeat;
use crate::outcome::Trigger;
use crate::store::ManualReply;
use crate::store::ManualRequest;
use crate::store::StoreError;
use crate::store::TriggerReader;
use crate::store::TriggerRequest;
use crate::telemetry;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio::time::sleep;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// How long one read of the triggers stream blocks: the only command an
/// idle consumer sends.
pub(super) const TRIGGER_BLOCK: Duration = Duration::from_secs(5);

/// Reads manual run requests and runs the ones this replica wins.
pub(super) async fn trigger_consumer(ctx: Arc<Ctx>, cancel: CancellationToken) {
    // A request read by a consumer that died is taken over once it has been
    // pending for a lease: by then that consumer's run, if any, is known.
    let min_idle = ctx.config.daemon.lease;
    let mut reader: Option<TriggerReader> = None;
    let mut next_takeover = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return;
        }
        // A drained replica reads no request (the others do).
        if ctx.drain.is_out() && !ctx.drain.wait_in(&cancel).await {
            return;
        }
        let Some(active) = reader.as_mut() else {
            let connected = async {
                ctx.store.ensure_trigger_group().await?;
                ctx.store
                    .trigger_reader(&ctx.identity.replica, TRIGGER_BLOCK)
                    .await
            }
            .await;
            match connected {
                Ok(connected) => reader = Some(connected),
                Err(e) => {
                    debug!(error = %e, "cannot read triggers yet");
                    if !pause(Duration::from_secs(1), &cancel).await {
                        return;
                    }
                }
            }
            continue;
        };
        let mut requests = Vec::new();
        if Instant::now() >= next_takeover {
            match ctx
                .store
                .claim_stale_triggers(&ctx.identity.replica, min_idle)
                .await
            {
                Ok(stale) => requests = stale,
                Err(e) => debug!(error = %e, "cannot take over pending triggers"),
            }
            next_takeover = Instant::now() + min_idle;
        }
        if requests.is_empty() {
            let block = TRIGGER_BLOCK
                .min(next_takeover.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1));
            let read = tokio::select! {
                () = cancel.cancelled() => return,
                read = active.read(block) => read,
            };
            match read {
                Ok(read) => requests = read,
                Err(e) => {
                    debug!(error = %e, "reading triggers failed; reconnecting");
                    reader = None;
                    if !pause(Duration::from_millis(500), &cancel).await {
                        return;
                    }
                    continue;
                }
            }
        }
        for request in requests {
            if cancel.is_cancelled() {
                // Left pending: another replica takes it over.
                return;
            }
            if ctx.drain.is_out() {
                hand_back(&ctx, &request).await;
                continue;
            }
            handle_trigger(&ctx, request).await;
        }
    }
}

/// A request read as the replica was drained: handed back to the others.
async fn hand_back(ctx: &Ctx, request: &TriggerRequest) {
    if let Err(e) = ctx.store.requeue_trigger(request).await {
        debug!(error = %e, "cannot hand a trigger back; it is taken over later");
    }
}

/// How long a replica waits before it hands back a request for a job it
/// does not have: replicas that all lack it cannot pass it around faster.
const HAND_BACK_AFTER: Duration = Duration::from_millis(200);

/// Why a request is not this replica's to run.
#[derive(Clone, Copy)]
enum NotOurs<'a> {
    /// It does not have the job.
    Missing,
    /// Its tags lack some of the job's `run_on` (these).
    Unplaced(&'a [String]),
}

/// A request for a job this replica does not have (its job table differs
/// from another replica's, as during a rolling change of the table) or may
/// not run (its tags do not match the job's `run_on`): handed back to the
/// group while a live replica has the job (and matches), dropped with a
/// warning when none has (a request cronlease did not write, a job no
/// replica runs, or one no live replica has the tags for).
async fn not_ours(ctx: &Ctx, request: &TriggerRequest, why: NotOurs<'_>) {
    let now_ms = ctx.clock.now_ms();
    let keys = ctx.store.keys();
    let read = async {
        let records = ctx.store.hash(&keys.replicas()).await?;
        let hashes = ctx.store.hash(&keys.replica_jobs()).await?;
        Ok::<_, StoreError>((records, hashes))
    };
    let holders: Vec<String> = match read.await {
        Ok((records, hashes)) => records
            .into_iter()
            .filter(|(id, _)| *id != ctx.identity.replica)
            .filter(|(id, raw)| {
                Heartbeat::parse(raw).is_ok_and(|beat| {
                    // Its job hashes are apart from its record, unless an
                    // older replica wrote it.
                    let has_job = beat.config_hash.contains_key(&request.job)
                        || hashes.iter().any(|(of, raw)| {
                            of == id
                                && crate::membership::parse_job_hashes(raw)
                                    .is_ok_and(|jobs| jobs.contains_key(&request.job))
                        });
                    let placed = match why {
                        NotOurs::Missing => true,
                        NotOurs::Unplaced(run_on) => crate::config::tags_match(&beat.tags, run_on),
                    };
                    beat.is_alive(now_ms) && has_job && placed
                })
            })
            .map(|(id, _)| id)
            .collect(),
        Err(e) => {
            // Left pending: taken over later, by this replica or another.
            debug!(error = %e, "cannot read the replicas to hand a trigger on");
            return;
        }
    };
    if holders.is_empty() {
        if let NotOurs::Unplaced(run_on) = why {
            warn!(
                job = %request.job, run_id = %request.run_id, id = %request.id,
                run_on = %run_on.join(","),
                "trigger request for a job no live replica has the tags of its run_on for; dropped"
            );
            let _ = ctx.store.ack_trigger(&request.id).await;
            return;
        }
        warn!(
            job = %request.job, run_id = %request.run_id, id = %request.id,
            "trigger request for a job no live replica has (or not one cronlease wrote); dropped"
        );
        let _ = ctx.store.ack_trigger(&request.id).await;
        return;
    }
    sleep(HAND_BACK_AFTER).await;
    match ctx.store.requeue_trigger(request).await {
        Ok(()) => info!(
            job = %request.job, run_id = %request.run_id, replicas = ?holders,
            "trigger for a job this replica does not have: handed back for the replicas that have it"
        ),
        Err(e) => debug!(error = %e, "cannot hand a trigger back; it is taken over later"),
    }
}

/// Refuses (logs and acknowledges) a request whose run id cronlease did
/// not make.
async fn refuse_run_id(ctx: &Ctx, request: &TriggerRequest) {
    metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "trigger").increment(1);
    error!(
        entry = %crate::inert::escape(&request.id),
        job = %crate::inert::escape(&request.job),
        run_id = %crate::inert::escape(&request.run_id),
        requested_by = %crate::inert::escape(&request.requested_by),
        "refusing a trigger request whose run id cronlease did not make (expected 1 to 64 letters, digits and -): dropped"
    );
    if let Err(e) = ctx.store.ack_trigger(&request.id).await {
        debug!(error = %e, "cannot acknowledge a refused trigger; it is refused again");
    }
}

/// The values of `job`'s parameters for `request`: what it gives, checked
/// against this replica's job (what a request says is evidence), and the
/// defaults. `None` when they do not fit: the request is refused, logged
/// and acknowledged, and nothing runs.
async fn request_params(
    ctx: &Ctx,
    job: &Job,
    request: &TriggerRequest,
) -> Option<crate::config::ParamValues> {
    match job.params.resolve(request.params.iter().cloned()) {
        Ok(params) => Some(params),
        Err(e) => {
            metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "trigger").increment(1);
            error!(
                job = %job.name,
                run_id = %crate::inert::escape(&request.run_id),
                requested_by = %crate::inert::escape(&request.requested_by),
                error = %e,
                "refusing a trigger request whose parameters do not fit the job's (the job tables differ, or the request was not written by cronlease): not run"
            );
            if let Err(e) = ctx.store.ack_trigger(&request.id).await {
                debug!(error = %e, "cannot acknowledge a refused trigger; it is refused again");
            }
            None
        }
    }
}

/// A place in the replica's capacity for a manual run; none when full,
/// and the request is left pending.
fn room_for(ctx: &Ctx, job: &Job, request: &TriggerRequest) -> Option<super::capacity::RunSlot> {
    let slot = ctx.capacity.try_take();
    if slot.is_none() {
        left_pending(ctx, job, request, ClaimCount::Capacity);
    }
    slot
}

/// A manual run with no room here (`why`: the replica's capacity or the
/// job's group): counted, and the request left pending; another replica,
/// or this one once there is room, takes it over.
fn left_pending(ctx: &Ctx, job: &Job, request: &TriggerRequest, why: ClaimCount) {
    ctx.meters.count_claim(&job.name, why);
    debug!(job = %job.name, run_id = %request.run_id, "no room for a manual run here (max_runs, or its group); left pending");
}

/// A manual run its group has no slot for: left pending.
fn group_full(ctx: &Ctx, job: &Job, request: &TriggerRequest) {
    left_pending(ctx, job, request, ClaimCount::GroupFull);
}

/// The job a request asks to run, when this replica may run it: one of
/// its table, not a broadcast job (dropped: it runs only at its ticks),
/// and one whose `run_on` its tags match (else handed back).
async fn job_to_run(ctx: &Arc<Ctx>, request: &TriggerRequest) -> Option<Arc<Job>> {
    let job = ctx.jobs.borrow().get(&request.job).cloned();
    let Some(job) = job else {
        not_ours(ctx, request, NotOurs::Missing).await;
        return None;
    };
    if job.mode == crate::config::Mode::EveryReplica {
        warn!(
            job = %job.name, run_id = %request.run_id, id = %request.id,
            "trigger request for a broadcast job (mode = \"every_replica\"), which runs only at its ticks; dropped"
        );
        let _ = ctx.store.ack_trigger(&request.id).await;
        return None;
    }
    if !super::ctx::placed_here(&ctx.config, &job) {
        not_ours(ctx, request, NotOurs::Unplaced(&job.run_on)).await;
        return None;
    }
    Some(job)
}

/// Starts one manual run (or records why not) and acknowledges the request.
pub(super) async fn handle_trigger(ctx: &Arc<Ctx>, request: TriggerRequest) {
    if !crate::store::is_run_id(&request.run_id) {
        refuse_run_id(ctx, &request).await;
        return;
    }
    let Some(job) = job_to_run(ctx, &request).await else {
        return;
    };
    let Some(params) = request_params(ctx, &job, &request).await else {
        return;
    };
    let Some(slot) = room_for(ctx, &job, &request) else {
        return;
    };
    let sent = Instant::now();
    let notices = job_notices(ctx.store.keys(), &job);
    let reply = ctx
        .store
        .manual_claim(&ManualRequest {
            request: &request,
            claimant: ctx.claimant(&job, ctx.marks.get(&job.name).min_fence(), &notices),
            params: &params,
        })
        .await;
    match reply {
        Ok(ManualReply::Claimed {
            fence,
            started_ms,
            lease_key,
        }) => {
            ctx.marks.note(&job.name, None, Some(fence));
            info!(
                job = %job.name, fence, run_id = %request.run_id, requested_by = %request.requested_by,
                replica = %ctx.identity.replica, "claimed a manual run"
            );
            start_run(
                &ctx.run_side(),
                &job,
                RunStart {
                    tick_ms: request.requested_ms(),
                    run_id: request.run_id.clone(),
                    fence,
                    lease_key,
                    started_ms,
                    trigger: Trigger::Manual,
                    valid_from: sent,
                    not_before: None,
                    upstream: None,
                    params,
                    slot: Some(slot),
                    traceparent: request.traceparent.clone(),
                },
            );
            ctx.heartbeat_now.notify_one();
        }
        Ok(ManualReply::Busy { holder }) => {
            info!(job = %job.name, run_id = %request.run_id, %holder, "manual run recorded as skipped_overlap: a run is in flight");
        }
        Ok(ManualReply::Duplicate) => {
            debug!(run_id = %request.run_id, "manual run already handled")
        }
        Ok(ManualReply::Corrupt { field, value }) => {
            error!(
                job = %job.name, run_id = %request.run_id, field, value, key = %ctx.store.keys().state(&job.name),
                "manual run not started: the job's state hash in Redis holds a {field} cronlease did not write; delete that field to repair it (the replicas re-seed it from what they remember)"
            );
        }
        Ok(ManualReply::GroupFull) => return group_full(ctx, &job, &request),
        Err(e) => {
            // Left pending: taken over (by us or another replica) later.
            ctx.redis.failed(&e);
            return;
        }
    }
    if let Err(e) = ctx.store.ack_trigger(&request.id).await {
        debug!(error = %e, "cannot acknowledge a trigger; a second delivery is recognised by its run id");
    }
}
