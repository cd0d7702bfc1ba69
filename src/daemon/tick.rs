//! The path of a tick, top to bottom. The timer's task ([`ring`]) sleeps
//! until the earliest alarm (`timer`). When one rings, [`on_alarm`] (in
//! that task) turns a tick found late into a catch-up, sets a replica that
//! is not the tick's preferred one another alarm at its rendezvous turn,
//! and at that turn ends the tick there if another replica announced its
//! claim. Otherwise a short task runs the job's step ([`job_step`]): it
//! claims the tick, and [`follow`] — the one place that acts on a claim's
//! value — starts the run, records missed ticks, sweeps, or delivers an
//! outcome; then the step asks the schedule for the next tick and sets
//! the job's alarm a little ahead of it by Redis time. After a start or an outage, [`catch_up`] applies the
//! misfire policy to the ticks that passed, at most [`CATCHING_UP`] jobs
//! at once: the others wait their turn as alarms in a queue, not as
//! tasks, so 100,000 jobs starting together cost 100,000 alarms.

use super::claim::{Ahead, ClaimEnd, claim, record_missed};
use super::ctx::Ctx;
use super::ctx::placed_here;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::rendezvous::{MAX_RANK_WAIT, rank, rank_wait};
use super::runs::{deliver, not_durable_outcome, start_reruns, start_run, sweep};
use super::step::{JobAlarm, Step};
use super::time::{LATE_MS, pause, rfc3339, to_datetime};
use super::timer::Alarm;
use crate::config::Job;
use crate::config::Misfire;
use crate::config::Mode;
use crate::outcome::Trigger;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

/// At most this many jobs read their state and sweep at once when they
/// catch up (at start, or when Redis is back).
const CATCHING_UP: usize = 256;

/// At most this many missed ticks are caught up by `misfire = "run_all"`
/// (the most recent ones).
pub(super) const MAX_CATCH_UP: usize = 100;

/// The timer's task, until `claiming` is cancelled: starts each due
/// alarm's step as a task in `steps`, catch-ups [`CATCHING_UP`] at a time.
pub(super) async fn ring(ctx: Arc<Ctx>, steps: TaskTracker, claiming: CancellationToken) {
    let turns = Arc::new(Semaphore::new(CATCHING_UP));
    let mut waiting: VecDeque<JobAlarm> = VecDeque::new();
    loop {
        // Registered before the heap is read: an earlier alarm set in
        // between wakes it (`notify_one` keeps a permit besides).
        let earlier = ctx.timer.earlier();
        let next_at = ctx.timer.next_at();
        // Due alarms first: catch-ups that finish quickly hand their turn
        // on at once, and must not keep the ticks of caught-up jobs waiting.
        tokio::select! {
            biased;
            () = claiming.cancelled() => return,
            () = sleep_until_some(next_at) => {
                for alarm in ctx.timer.take_due(Instant::now()) {
                    match alarm.step {
                        Step::CatchUp => waiting.push_back(alarm),
                        Step::Tick { .. } | Step::Turn { .. } => start(&ctx, &steps, alarm, None),
                    }
                }
            }
            turn = turns.clone().acquire_owned(), if !waiting.is_empty() => {
                // The semaphore is never closed.
                let Ok(turn) = turn else { continue };
                if let Some(alarm) = waiting.pop_front() {
                    start(&ctx, &steps, alarm, Some(turn));
                }
            }
            () = earlier => {}
        }
    }
}

/// Starts `alarm`'s step (unless its job was cancelled meanwhile); the step
/// sets the job's next alarm when it ends.
fn start(ctx: &Arc<Ctx>, steps: &TaskTracker, alarm: JobAlarm, turn: Option<OwnedSemaphorePermit>) {
    if alarm.cancel.is_cancelled() {
        return;
    }
    let Some(alarm) = on_alarm(ctx, alarm) else {
        return;
    };
    let ctx = ctx.clone();
    steps.spawn(async move {
        let Alarm {
            at,
            job,
            cancel,
            step,
        } = alarm;
        if let Some((at, step)) = job_step(&ctx, &job, &cancel, at, step, turn).await {
            ctx.timer.set(Alarm {
                at,
                job,
                cancel,
                step,
            });
        }
    });
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// What the timer does with a due alarm before any task is made for it.
/// A tick found late becomes a catch-up, in turn with the others. A
/// replica that is not the tick's preferred one waits for its turn as an
/// alarm (`Step::Turn`), and at its turn a tick whose claim was announced
/// ends there, its next alarm set: most due alarms of a replica among
/// several need no task at all. Returns the alarm whose step needs one
/// ([`job_step`]).
fn on_alarm(ctx: &Arc<Ctx>, mut alarm: JobAlarm) -> Option<JobAlarm> {
    match alarm.step {
        Step::CatchUp => Some(alarm),
        Step::Tick { tick_ms, .. } => {
            if ctx.clock.now_ms() - tick_ms > LATE_MS {
                // This replica was stalled (a pause, a long catch-up): the
                // tick is missed, and the misfire policy decides, in turn
                // with the other catch-ups. The one check of lateness on
                // a tick's path: a claim that reaches Redis too late
                // anyway is answered `expired` (`ClaimEnd::Late`).
                alarm.at = Instant::now();
                alarm.step = Step::CatchUp;
                ctx.timer.set(alarm);
                return None;
            }
            // Rendezvous: the preferred replica claims at once; the others
            // wait their turn and claim only if no claim was announced
            // meanwhile, so Redis sees about one claim per tick however
            // many replicas run. Ranked now, not when the alarm was set:
            // replicas come and go.
            let job = &alarm.job;
            let own = &ctx.identity.replica;
            if !placed_here(&ctx.config, job) {
                return unplaced_alarm(ctx, alarm, tick_ms);
            }
            // A broadcast job: each matching replica claims its own run.
            if job.mode == Mode::EveryReplica {
                return Some(alarm);
            }
            let rank = rank(&ctx.claims.live, own, (&job.name, &job.run_on), tick_ms);
            if rank == 0 {
                return Some(alarm);
            }
            alarm.at = ctx.clock.instant_at(tick_ms) + rank_wait(rank, ctx.claims.latency.ms());
            alarm.step = Step::Turn { tick_ms };
            ctx.timer.set(alarm);
            None
        }
        Step::Turn { tick_ms } => {
            if !announced(ctx, &alarm.job, tick_ms) {
                return Some(alarm);
            }
            if let Some((at, step)) = next_alarm(ctx, &alarm.job, tick_ms) {
                alarm.at = at;
                alarm.step = step;
                ctx.timer.set(alarm);
            }
            None
        }
    }
}

/// The alarm of a tick of a job this replica may not run (its tags lack
/// some of the job's `run_on`): nothing to do while a live replica
/// matches (the job's next tick is its next alarm); else a turn after
/// the whole rendezvous wait, plus a step per rank among all live
/// replicas, at which the tick is recorded missed with the reason
/// `no_matching_replica` unless a claim or a record was announced
/// ([`claim_turn`]).
fn unplaced_alarm(ctx: &Arc<Ctx>, mut alarm: JobAlarm, tick_ms: i64) -> Option<JobAlarm> {
    let job = &alarm.job;
    if ctx.claims.live.any_match(&job.run_on) {
        if let Some((at, step)) = next_alarm(ctx, job, tick_ms) {
            alarm.at = at;
            alarm.step = step;
            ctx.timer.set(alarm);
        }
        return None;
    }
    let rank = rank(
        &ctx.claims.live,
        &ctx.identity.replica,
        (&job.name, &[]),
        tick_ms,
    );
    let latency = ctx.claims.latency.ms();
    alarm.at = ctx.clock.instant_at(tick_ms)
        + rank_wait(MAX_RANK_WAIT, latency)
        + rank_wait(rank, latency);
    alarm.step = Step::Turn { tick_ms };
    ctx.timer.set(alarm);
    None
}

/// One step of a job's life, from its alarm `at` to the next one: catch
/// up, or claim a tick and act on the claim; then the next alarm, or None
/// when the job is cancelled or its schedule has no more ticks. `turn` is
/// the catch-up's turn (see `timer`), dropped once its reads and sweep
/// are done.
async fn job_step(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    cancel: &CancellationToken,
    at: Instant,
    step: Step,
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Option<(Instant, Step)> {
    // A step is a task of its own, made only when the job is due (an idle
    // job is an alarm, not a future). A catch-up is rare and its future
    // large: boxed, so that the tick's steps are not made its size.
    match step {
        Step::CatchUp => next_alarm(ctx, job, Box::pin(catch_up(ctx, job, cancel, turn)).await?),
        // Only the preferred replica's alarm comes here: `on_alarm` ranked
        // the job (the others wait for their turn as alarms, then
        // `claim_turn`); a replica that came or went in the microseconds
        // since only makes this claim one that did not need to be made,
        // which the claim script answers.
        Step::Tick { tick_ms, lead } => {
            let ahead = Ahead::By { lead, woke: at };
            claim_and_follow(ctx, job, cancel, tick_ms, ahead).await
        }
        Step::Turn { tick_ms } => claim_turn(ctx, job, cancel, tick_ms).await,
    }
}

/// The alarm of the first tick after `after`: a little ahead of it by
/// Redis time. None when the schedule has no more ticks.
fn next_alarm(ctx: &Ctx, job: &Job, after: i64) -> Option<(Instant, Step)> {
    let Some(schedule) = &job.schedule else {
        debug!(job = %job.name, "no schedule: runs only after the jobs it follows");
        return None;
    };
    let Some(tick) = schedule.next_after(to_datetime(after)) else {
        info!(job = %job.name, "the schedule has no more ticks");
        return None;
    };
    let tick_ms = tick.timestamp_millis();
    // Awake a little ahead of the tick: the preferred replica claims then,
    // so that its run starts at the tick rather than a round trip after
    // it, and the others hear of the claim before their turn.
    let lead = ctx.claims.latency.lead();
    let at_tick = ctx.clock.instant_at(tick_ms);
    let wake = at_tick.checked_sub(lead).unwrap_or(at_tick);
    Some((wake, Step::Tick { tick_ms, lead }))
}

/// At this replica's rendezvous turn for `tick_ms`: claims it unless a
/// claim was announced; the job's next alarm.
async fn claim_turn(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    cancel: &CancellationToken,
    tick_ms: i64,
) -> Option<(Instant, Step)> {
    if announced(ctx, job, tick_ms) {
        return next_alarm(ctx, job, tick_ms);
    }
    if !placed_here(&ctx.config, job) {
        // A drained replica records nothing either: the others do.
        if !ctx.drain.is_out() && !ctx.claims.live.any_match(&job.run_on) {
            record_unplaced(ctx, job, tick_ms).await;
        }
        return next_alarm(ctx, job, tick_ms);
    }
    // Only the preferred replica's claims are made ahead and measure the
    // load: the others' come when their turn does, and one that claims
    // after a dead preferred replica must not stretch the next takeover.
    claim_and_follow(ctx, job, cancel, tick_ms, Ahead::No).await
}

/// Records `tick_ms` of `job`, which no live replica may run, as missed
/// with the reason `no_matching_replica` (once in the cluster: the
/// script records it only past the job's high-water mark).
async fn record_unplaced(ctx: &Ctx, job: &Job, tick_ms: i64) {
    let notices = job_notices(ctx.store.keys(), job);
    let recorder = ctx.claimant(job, 0, &notices);
    match ctx
        .store
        .record_unplaced(&job.name, tick_ms, &recorder, &job.run_on)
        .await
    {
        Ok(recorded) => {
            ctx.redis.answered();
            if let Some(previous) = recorded {
                ctx.meters.job(&job.name).count_missed(1);
                warn!(
                    job = %job.name, tick = %rfc3339(tick_ms), run_on = %job.run_on.join(","),
                    "tick recorded missed: no live replica has the tags the job's run_on asks for"
                );
                // Ticks between the mark and this one that nobody claimed
                // (a matching replica died and was still taken as alive).
                record_missed(&ctx.claim_side(), job, previous, tick_ms).await;
            }
        }
        Err(e) => {
            ctx.redis.failed(&e);
            warn!(job = %job.name, error = %e, "cannot record a tick no replica may run");
        }
    }
}

/// Whether a claim of `tick_ms` is known: another replica announced it (or
/// a later one), or Redis answered this one so. Then counted: this replica
/// is done with the tick.
fn announced(ctx: &Ctx, job: &Job, tick_ms: i64) -> bool {
    if !ctx.marks.covers(&job.name, tick_ms) {
        return false;
    }
    ctx.meters.count_claim(&job.name, ClaimCount::Announced);
    true
}

/// Claims `tick_ms`, acts on the claim, and says what the job does next:
/// the next tick's alarm; a catch-up at once when the tick was not
/// claimed in time (the misfire policy decides); nothing when cancelled.
async fn claim_and_follow(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    cancel: &CancellationToken,
    tick_ms: i64,
    ahead: Ahead,
) -> Option<(Instant, Step)> {
    // Boxed: the claim and what follows it are most of a step's size, and
    // only a replica that claims needs them. A step lives from its alarm
    // to the end of its claim, and at an instant when thousands of jobs
    // are due there are thousands of steps.
    Box::pin(async {
        let claims = ctx.claim_side();
        match claim(&claims, job, tick_ms, Trigger::Schedule, ahead, cancel).await {
            ClaimEnd::Late => Some((Instant::now(), Step::CatchUp)),
            // `max_runs` reached: the job's loop ends here, as when its
            // schedule has no more ticks.
            ClaimEnd::Ended | ClaimEnd::Cancelled => None,
            end => {
                follow(ctx, job, tick_ms, end).await;
                next_alarm(ctx, job, tick_ms)
            }
        }
    })
    .await
}

/// Acts on a claim's value: the only place that decides what follows a
/// claim that was made. Returns the run it started, if any (its task ends
/// when its outcome is recorded).
async fn follow(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    tick_ms: i64,
    end: ClaimEnd,
) -> Option<JoinHandle<()>> {
    let runs = ctx.run_side();
    match end {
        ClaimEnd::Won {
            start,
            previous,
            expired,
        } => {
            let run = start_run(&runs, job, start);
            record_missed(&ctx.claim_side(), job, previous, tick_ms).await;
            if expired {
                start_reruns(&runs, job, Box::pin(sweep(&runs, job)).await);
            }
            Some(run)
        }
        // The rare branches' futures are boxed, so that a claim's is not
        // their size (a claim's future is alive from its alarm to Redis's
        // answer, and thousands may be at one instant).
        ClaimEnd::NotDurable { start, acked } => {
            let outcome = not_durable_outcome(&runs, job, start, acked);
            if let Some(rerun) = Box::pin(deliver(&runs, job, &outcome)).await {
                start_reruns(&runs, job, vec![rerun]);
            }
            None
        }
        ClaimEnd::Lapsed => {
            start_reruns(&runs, job, Box::pin(sweep(&runs, job)).await);
            None
        }
        ClaimEnd::Paused { previous }
        | ClaimEnd::Busy { previous }
        | ClaimEnd::Excluded { previous }
        | ClaimEnd::SkippedCapacity { previous } => {
            record_missed(&ctx.claim_side(), job, previous, tick_ms).await;
            None
        }
        ClaimEnd::Taken | ClaimEnd::Drained | ClaimEnd::Refused | ClaimEnd::Ended => None,
        // Not claimed in time, or not at all: what the job does next is
        // for its loop to say (a catch-up, or its end).
        ClaimEnd::Late | ClaimEnd::Cancelled => None,
    }
}

/// Handles ticks that passed while this replica could not claim them (it was
/// not running, or Redis was away), per the job's misfire policy. Returns
/// the instant up to which ticks are handled, or None when cancelled.
async fn catch_up(
    ctx: &Arc<Ctx>,
    job: &Arc<Job>,
    cancel: &CancellationToken,
    turn: Option<tokio::sync::OwnedSemaphorePermit>,
) -> Option<i64> {
    let stored = last_tick(ctx, job, cancel).await?;
    // A drained replica leaves abandoned runs to the others' sweeps, which
    // rerun them (its own would record them without a rerun).
    if !ctx.drain.is_out() {
        start_reruns(&ctx.run_side(), job, sweep(&ctx.run_side(), job).await);
    }
    // The turn covers the reads and the sweep, not the claims below (nor
    // `run_all` waiting for its runs).
    drop(turn);
    // A replica that may not run the job claims none of its ticks: the
    // matching ones catch up.
    if !placed_here(&ctx.config, job) {
        return Some(ctx.clock.now_ms());
    }
    let now = ctx.clock.now_ms();
    let last = match (stored, ctx.marks.get(&job.name).last_tick) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => match a.or(b) {
            Some(last) => last,
            // Never claimed anywhere: nothing was missed.
            None => return Some(now),
        },
    };
    let (missed, on_time) = passed_ticks(job, last, now);
    let claims = ctx.claim_side();
    let to_claim: Vec<i64> = match job.misfire {
        Misfire::Skip => Vec::new(),
        // The latest missed tick the job's calendars keep: an excluded
        // one is recorded `excluded` (by the claim's record of the ticks
        // it moved past), never run.
        Misfire::RunOnce => missed
            .iter()
            .rev()
            .find(|tick_ms| job.excluded_by(**tick_ms).is_none())
            .copied()
            .into_iter()
            .collect(),
        Misfire::RunAll => missed,
    };
    for tick_ms in to_claim {
        let end = claim(&claims, job, tick_ms, Trigger::Misfire, Ahead::No, cancel).await;
        match end {
            ClaimEnd::Cancelled => return None,
            // The next tick's claim hears it again and ends the loop.
            ClaimEnd::Ended => return Some(now),
            _ => {}
        }
        // run_all runs missed ticks one after another.
        if let Some(run) = follow(ctx, job, tick_ms, end).await
            && job.misfire == Misfire::RunAll
        {
            tokio::select! {
                _ = run => {}
                () = cancel.cancelled() => return None,
            }
        }
    }
    for tick_ms in on_time {
        let end = claim(&claims, job, tick_ms, Trigger::Schedule, Ahead::No, cancel).await;
        match end {
            ClaimEnd::Cancelled => return None,
            ClaimEnd::Ended => return Some(now),
            _ => {}
        }
        follow(ctx, job, tick_ms, end).await;
    }
    Some(now)
}

/// The job's high-water mark in Redis, waiting for Redis as long as it
/// takes; None when cancelled.
async fn last_tick(ctx: &Ctx, job: &Job, cancel: &CancellationToken) -> Option<Option<i64>> {
    let mut backoff = Duration::from_millis(100);
    loop {
        // A broadcast job's mark is this replica's own.
        let read = match job.mode {
            Mode::EveryReplica => {
                ctx.store
                    .replica_last_tick(&job.name, &ctx.identity.replica)
                    .await
            }
            _ => ctx.store.last_tick(&job.name).await,
        };
        match read {
            Ok(stored) => {
                ctx.redis.answered();
                return Some(stored);
            }
            Err(e) => {
                ctx.redis.failed(&e);
                debug!(job = %job.name, error = %e, "waiting for Redis to catch up");
                if !pause(backoff, cancel).await {
                    return None;
                }
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The ticks after `last` up to `now` within the misfire grace: missed
/// ones (at most [`MAX_CATCH_UP`], the latest) and ones still on time.
fn passed_ticks(job: &Job, last: i64, now: i64) -> (Vec<i64>, Vec<i64>) {
    let grace_ms = i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX);
    let horizon = last.max(now.saturating_sub(grace_ms).saturating_sub(1));
    let mut missed: Vec<i64> = Vec::new();
    let mut on_time: Vec<i64> = Vec::new();
    let mut cursor = to_datetime(horizon);
    while let Some(tick) = job.next_after(cursor) {
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
    (missed, on_time)
}
