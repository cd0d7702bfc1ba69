//! The replicas' side of backfill (`cronlease backfill`): each replica
//! starts queued backfill ticks of the jobs of its table, one take script
//! call per run (backfill_take.lua decides, atomically, whether one may
//! start now and which tick), so every queued tick runs once whichever
//! replicas take them.
//!
//! A plan that queues ticks publishes the job's name: the replicas look at
//! its queue at once. When a backfill run this replica started ends, it
//! publishes the name again, so that every replica (this one first) takes
//! the next tick without waiting. Each replica also looks at every job the
//! registry names, for a wake-up missed (a replica that was not
//! subscribed, a replica that died with a run in flight, a paused job
//! resumed): every [`VISIT_EVERY`] while the registry names a job of its
//! table, else every [`IDLE_VISIT_EVERY`], so that an idle replica costs
//! Redis next to nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info};
use uuid::Uuid;

use super::capacity::RunSlot;
use super::ctx::Ctx;
use super::notices::job_notices;
use super::runs::{RunStart, start_reruns, start_run, sweep};
use super::time::{pause, rfc3339};
use super::wake::{Woken, wait};
use crate::config::Job;
use crate::outcome::Trigger;
use crate::store::{StoreError, TakeReply};

/// How often every job with queued ticks is looked at (missed wake-ups,
/// runs freed by a sweep, a job resumed) while some job of the table has.
const VISIT_EVERY: Duration = Duration::from_secs(1);

/// How often the registry is read while it names no job of the table.
const IDLE_VISIT_EVERY: Duration = Duration::from_secs(30);

/// A backfill run this replica started: resolves to its job's name when
/// the run's task ends.
type Ending = Pin<Box<dyn Future<Output = String> + Send>>;

/// Starts queued backfill runs until `cancel`.
pub(super) async fn backfiller(ctx: Arc<Ctx>, cancel: CancellationToken) {
    let mut next_visit = Instant::now();
    let mut ending: FuturesUnordered<Ending> = FuturesUnordered::new();
    loop {
        let mut pubsub = match ctx.store.backfill_subscriber().await {
            Ok(pubsub) => Some(pubsub),
            Err(e) => {
                debug!(error = %e, "cannot subscribe to backfill wake-ups yet");
                None
            }
        };
        let mut messages = pubsub.as_mut().map(|p| p.on_message());
        loop {
            let woken = tokio::select! {
                woken = wait(messages.as_mut(), next_visit, &cancel) => woken,
                Some(job) = ending.next(), if !ending.is_empty() => {
                    // Wakes the others too: the slot this run held is free.
                    if let Err(e) = ctx.store.wake_backfill(&job).await {
                        debug!(job = %job, error = %e, "cannot wake the replicas for a backfill");
                    }
                    Woken::Message(Some(job))
                }
            };
            match woken {
                Woken::Cancelled => return,
                Woken::Unsubscribed => break,
                Woken::Message(job) => {
                    if let Some(job) = job
                        && visit(&ctx, Some(job), &mut ending, &cancel).await == Queues::Some
                    {
                        next_visit = next_visit.min(Instant::now() + VISIT_EVERY);
                    }
                }
                Woken::Due => {
                    let every = match visit(&ctx, None, &mut ending, &cancel).await {
                        Queues::Some => VISIT_EVERY,
                        Queues::None => IDLE_VISIT_EVERY,
                    };
                    next_visit = Instant::now() + every;
                    if messages.is_none() {
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

/// Whether a visit found queued ticks of a job of the table (as far as it
/// could tell: a visit Redis did not answer counts as finding some).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queues {
    Some,
    None,
}

/// Takes the queued ticks of `only`, or of every job the registry names,
/// that this replica's table has.
async fn visit(
    ctx: &Arc<Ctx>,
    only: Option<String>,
    ending: &mut FuturesUnordered<Ending>,
    cancel: &CancellationToken,
) -> Queues {
    let names = match only {
        Some(job) => vec![job],
        None => match ctx.store.backfill_jobs().await {
            Ok(names) => names,
            Err(e) => {
                ctx.redis.failed(&e);
                debug!(error = %e, "cannot read the jobs with queued backfill ticks now");
                return Queues::Some;
            }
        },
    };
    let table = ctx.jobs.borrow().clone();
    let mut found = Queues::None;
    for name in names {
        let Some(job) = table.get(&name) else {
            continue;
        };
        found = Queues::Some;
        if cancel.is_cancelled() {
            break;
        }
        if let Err(e) = take(ctx, job, ending, cancel).await {
            ctx.redis.failed(&e);
            debug!(job = %job.name, error = %e, "cannot take a backfill tick now");
            break;
        }
    }
    found
}

/// Starts runs of `job`'s queued ticks while the take script hands them
/// out; stops at the first tick that must wait.
async fn take(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    ending: &mut FuturesUnordered<Ending>,
    cancel: &CancellationToken,
) -> Result<(), StoreError> {
    let notices = job_notices(ctx.store.keys(), job);
    // A drained replica takes no tick (the others do), nor does one whose
    // tags do not match the job's `run_on`.
    let placed = super::ctx::placed_here(&ctx.config, job);
    while placed && !cancel.is_cancelled() && !ctx.drain.is_out() {
        // A replica with its `max_runs` in flight takes no tick: the
        // others do, or this one once a run of its own ends.
        let Some(slot) = ctx.capacity.try_take() else {
            return Ok(());
        };
        let run_id = Uuid::new_v4().to_string();
        let sent = Instant::now();
        let claimant = ctx.claimant(job, ctx.marks.get(&job.name).min_fence(), &notices);
        let reply = ctx
            .store
            .backfill_take(&job.name, &run_id, &claimant, ctx.claims.cluster_hold())
            .await?;
        ctx.redis.answered();
        let expired = match reply {
            TakeReply::Claimed { expired, .. } => {
                start_taken(ctx, job, (run_id, slot), sent, reply, ending);
                if expired > 0 {
                    sweep_job(ctx, job).await;
                }
                continue;
            }
            TakeReply::Wait { expired } => expired,
            TakeReply::Paused => {
                debug!(job = %job.name, "backfill waits: the job is paused");
                0
            }
            TakeReply::Empty => {
                ctx.store.backfill_settle(&job.name).await?;
                0
            }
            TakeReply::Corrupt { field, value } => {
                error!(
                    job = %job.name, field, value, key = %ctx.store.keys().state(&job.name),
                    "backfill tick not started: the job's state hash in Redis holds a {field} cronlease did not write; `cronlease repair` clears it"
                );
                0
            }
        };
        if expired > 0 {
            // Runs whose holder died hold slots: recorded `abandoned`,
            // then the next visit takes the tick that waited.
            sweep_job(ctx, job).await;
        }
        return Ok(());
    }
    Ok(())
}

/// Starts the run of the tick the take script handed this replica
/// (`reply`, claimed with `run_id`, sent at `sent`); `ending` hears when
/// it ends.
fn start_taken(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    (run_id, slot): (String, RunSlot),
    sent: Instant,
    reply: TakeReply,
    ending: &mut FuturesUnordered<Ending>,
) {
    let TakeReply::Claimed {
        tick_ms,
        fence,
        started_ms,
        lease_key,
        backfill_id,
        ..
    } = reply
    else {
        return;
    };
    ctx.marks.note(&job.name, None, Some(fence));
    info!(
        job = %job.name, tick = %rfc3339(tick_ms), fence, %run_id, backfill = %backfill_id,
        replica = %ctx.identity.replica, "claimed a backfill tick"
    );
    let handle = start_run(
        &ctx.run_side(),
        job,
        RunStart {
            tick_ms,
            run_id,
            fence,
            lease_key,
            started_ms,
            trigger: Trigger::Backfill,
            valid_from: sent,
            not_before: None,
            upstream: None,
            params: job.params.defaults(),
            slot: Some(slot),
            traceparent: None,
        },
    );
    let name = job.name.clone();
    ending.push(Box::pin(async move {
        // The run's task is the run tracker's; this only hears that it
        // ended.
        let _ = handle.await;
        name
    }));
    ctx.heartbeat_now.notify_one();
}

/// Records the job's runs whose holder stopped renewing, and starts the
/// reruns the sweep claimed.
async fn sweep_job(ctx: &Arc<Ctx>, job: &Arc<Job>) {
    let side = ctx.run_side();
    start_reruns(&side, job, sweep(&side, job).await);
}
