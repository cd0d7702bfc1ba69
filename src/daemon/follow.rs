//! The followers' side of chains: each replica reads the inboxes of the
//! followers in its job table (one stream per upstream and follower,
//! filled by the scripts that record the upstream's outcomes) and starts
//! one run per entry through after.lua, which makes the run exactly once
//! whichever replicas read the entry; then deletes the entry.
//!
//! A script that fills an inbox publishes the upstream's name: the
//! replicas read its followers' inboxes at once. Every [`VISIT_EVERY`]
//! they also read every inbox they know, for a wake-up missed (a replica
//! that was not subscribed, a run that died between its claim and the
//! deletion of its entry).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use super::capacity::RunSlot;
use super::ctx::Ctx;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::runs::{RunStart, start_reruns, start_run, sweep};
use super::time::pause;
use super::wake::{Woken, wait};
use crate::config::{AfterParams, Job, Join, Misfire, ParamValues};
use crate::inert::escape;
use crate::outcome::{Trigger, Upstream};
use crate::store::{FollowReply, FollowRequest, InboxEntry, StoreError};
use crate::telemetry;

/// How often every inbox is read (missed wake-ups, entries left behind).
const VISIT_EVERY: Duration = Duration::from_secs(2);

/// Entries read from one inbox at once.
const BATCH: usize = 100;

/// How long after reading an entry the script may still start its run:
/// after.lua forgets a cause an hour after its entry was deleted, so a
/// reader that stalled past this (a paused process) cannot start a second
/// run for an entry another replica dealt with meanwhile.
const FOLLOW_WITHIN_MS: i64 = 30_000;

/// Starts followers' runs until `cancel`.
pub(super) async fn follower(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let mut next_visit = Instant::now();
    loop {
        let mut pubsub = match ctx.store.after_subscriber().await {
            Ok(pubsub) => Some(pubsub),
            Err(e) => {
                debug!(error = %e, "cannot subscribe to chain wake-ups yet");
                None
            }
        };
        let mut messages = pubsub.as_mut().map(|p| p.on_message());
        loop {
            match wait(messages.as_mut(), next_visit, &cancel).await {
                Woken::Cancelled => return,
                Woken::Unsubscribed => break,
                Woken::Message(upstream) => {
                    if let Some(upstream) = upstream {
                        visit(&ctx, Some(&upstream), &cancel).await;
                    }
                }
                Woken::Due => {
                    visit(&ctx, None, &cancel).await;
                    next_visit = Instant::now() + VISIT_EVERY;
                    if messages.is_none() {
                        // Not subscribed: try again; the visits meanwhile
                        // find what wake-ups would have.
                        break;
                    }
                }
            }
        }
        if !pause(Duration::from_millis(200), &cancel).await {
            return;
        }
    }
}

/// Reads the inboxes of the table's followers: of `upstream` only, or all.
async fn visit(ctx: &Arc<Ctx>, upstream: Option<&str>, cancel: &CancellationToken) {
    let table = ctx.jobs.borrow().clone();
    for job in table.values() {
        let Some(after) = &job.after else { continue };
        for from in &after.upstreams {
            if upstream.is_some_and(|u| u != from) {
                continue;
            }
            if cancel.is_cancelled() {
                return;
            }
            if let Err(e) = read_inbox(ctx, job, from, cancel).await {
                ctx.redis.failed(&e);
                debug!(job = %job.name, upstream = %from, error = %e, "cannot read a follower's inbox now");
                return;
            }
        }
    }
}

/// Deals with the entries of `job`'s inbox at `upstream`, until `cancel`
/// (the shutdown: no more claims; the entries left are read by the other
/// replicas, or by this one when it is back).
async fn read_inbox(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    upstream: &str,
    cancel: &CancellationToken,
) -> Result<(), StoreError> {
    loop {
        let (entries, forged) = ctx.store.read_inbox(upstream, &job.name, BATCH).await?;
        for bad in &forged {
            metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "inbox").increment(1);
            error!(
                job = %job.name, upstream = %upstream, entry = %escape(&bad.id), why = bad.why,
                key = %ctx.store.keys().inbox(upstream, &job.name),
                "an entry of a follower's inbox is not one cronlease wrote: deleted, nothing run for it"
            );
            ctx.store
                .inbox_done(&job.name, upstream, &bad.id, "", ctx.clock.now_ms())
                .await?;
        }
        let full = entries.len() + forged.len() == BATCH;
        for entry in &entries {
            // A drained replica leaves the entries to the others, and so
            // does one whose tags do not match the job's `run_on`.
            if cancel.is_cancelled()
                || ctx.drain.is_out()
                || !super::ctx::placed_here(&ctx.config, job)
                || !follow(ctx, job, upstream, entry).await?
            {
                return Ok(());
            }
        }
        if !full {
            return Ok(());
        }
    }
}

/// Starts (or records why not) the run one entry asks for, then deletes
/// the entry. False when the entry is left for later.
async fn follow(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    upstream: &str,
    entry: &InboxEntry,
) -> Result<bool, StoreError> {
    let Some(after) = &job.after else {
        return Ok(false);
    };
    // A replica with its `max_runs` in flight leaves the entry to the
    // others (or to its next visit).
    let Some(slot) = ctx.capacity.try_take() else {
        ctx.meters.count_claim(&job.name, ClaimCount::Capacity);
        return Ok(false);
    };
    let run_id = Uuid::new_v4().to_string();
    let join: &[String] = match after.join {
        Join::All => &after.upstreams,
        Join::Each => &[],
    };
    let skip_after = (job.misfire == Misfire::Skip).then_some(job.misfire_grace);
    let params = follower_params(job, after.params, entry);
    let given: Vec<(String, String)> = params.clone().into_iter().collect();
    let notices = job_notices(ctx.store.keys(), job);
    let sent = Instant::now();
    let reply = ctx
        .store
        .follow(&FollowRequest {
            job: &job.name,
            upstream,
            entry,
            deadline_ms: ctx.clock.now_ms() + FOLLOW_WITHIN_MS,
            run_id: &run_id,
            claimant: ctx.claimant(job, ctx.marks.get(&job.name).min_fence(), &notices),
            join,
            skip_after,
            params: &given,
            cluster_pause: ctx.claims.cluster_hold(),
        })
        .await?;
    ctx.redis.answered();
    if !act_on(
        ctx,
        job,
        upstream,
        entry,
        Started {
            run_id,
            sent,
            params,
            slot,
        },
        reply,
    )
    .await
    {
        return Ok(false);
    }
    ctx.store
        .inbox_done(
            &job.name,
            upstream,
            &entry.id,
            &entry.upstream_run_id,
            ctx.clock.now_ms(),
        )
        .await?;
    Ok(true)
}

/// A follower's run its group has no slot for: counted, and the entry
/// left for a later reading (false).
fn group_full(ctx: &Ctx, job: &Job, upstream: &str, cause: &str) -> bool {
    ctx.meters.count_claim(&job.name, ClaimCount::GroupFull);
    debug!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, "follower's run waits: its group has no slot free");
    false
}

/// The values of a follower's parameters: its defaults, and with
/// `after_params = "pass"` the upstream run's values of the parameters it
/// declares (one it does not allow gives way to its default, logged).
fn follower_params(job: &Job, pass: AfterParams, entry: &InboxEntry) -> ParamValues {
    let mut values = job.params.defaults();
    if pass != AfterParams::Pass {
        return values;
    }
    for (name, value) in &entry.params {
        if !values.contains_key(name) {
            continue;
        }
        match job.params.resolve([(name.clone(), value.clone())]) {
            Ok(mut resolved) => {
                if let Some(value) = resolved.remove(name) {
                    values.insert(name.clone(), value);
                }
            }
            Err(e) => warn!(
                job = %job.name, param = %name, error = %e,
                "the upstream's value of a parameter does not fit this job: its default is used"
            ),
        }
    }
    values
}

/// What a follower's run is started with once claimed.
struct Started {
    run_id: String,
    sent: Instant,
    params: ParamValues,
    slot: RunSlot,
}

/// Starts the run `reply` claimed (and sweeps the job when the claim saw
/// runs whose lease lapsed), or logs why there is none; false when the
/// entry is to be read again (past its deadline, or the job's state not
// Long by design: one arm per answer of after.lua, each the little it does
// with it.
/// readable).
async fn act_on(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    upstream: &str,
    entry: &InboxEntry,
    started: Started,
    reply: FollowReply,
) -> bool {
    let Started {
        run_id,
        sent,
        params,
        slot,
    } = started;
    let cause = &entry.upstream_run_id;
    match reply {
        FollowReply::Claimed {
            fence,
            started_ms,
            lease_key,
            context,
            expired,
        } => {
            ctx.marks.note(&job.name, None, Some(fence));
            let upstream_of =
                Upstream::from_fields(context.iter().map(|(n, v)| (n.as_str(), v.as_str())));
            info!(
                job = %job.name, fence, %run_id, upstream = %upstream, upstream_run_id = %cause,
                status = %entry.status, replica = %ctx.identity.replica, "claimed a follower's run"
            );
            start_run(
                &ctx.run_side(),
                job,
                RunStart {
                    tick_ms: entry.at_ms,
                    run_id,
                    fence,
                    lease_key,
                    started_ms,
                    trigger: Trigger::Chain,
                    valid_from: sent,
                    not_before: None,
                    upstream: upstream_of.map(Arc::new),
                    params,
                    slot: Some(slot),
                    traceparent: None,
                },
            );
            ctx.heartbeat_now.notify_one();
            if expired > 0 {
                let side = ctx.run_side();
                start_reruns(&side, job, sweep(&side, job).await);
            }
        }
        FollowReply::Waiting => {
            debug!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, "after_all: waiting for the other upstreams")
        }
        FollowReply::Busy { holder } => {
            info!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, %holder, "follower's run recorded as skipped_overlap: a run is in flight")
        }
        FollowReply::Missed => {
            info!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, "follower's run recorded as missed: later than misfire_grace")
        }
        FollowReply::Paused => {
            info!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, "follower's run not started: the job or the cluster is paused")
        }
        FollowReply::Duplicate => {
            debug!(job = %job.name, upstream = %upstream, upstream_run_id = %cause, "inbox entry dealt with before")
        }
        FollowReply::Expired => return false,
        FollowReply::GroupFull => return group_full(ctx, job, upstream, cause),
        FollowReply::Corrupt { field, value } => {
            error!(
                job = %job.name, field, value, key = %ctx.store.keys().state(&job.name),
                "follower's run not started: the job's state hash in Redis holds a {field} cronlease did not write; delete that field to repair it"
            );
            return false;
        }
    }
    true
}
