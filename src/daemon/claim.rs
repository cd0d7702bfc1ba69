//! Claiming a tick: the claim with its retries until Redis gives a definite
//! answer, returned as a value ([`ClaimEnd`]) for the job loop to act on,
//! and the recording of the missed ticks a claim jumped over.
//!
//! A claim never starts a run, sweeps or delivers: `tick::follow` does.
//! What it sees of the replica is a `ClaimSide`, which holds no runs.

use super::ctx::ClaimSide;
pub(super) use super::ending::ClaimEnd;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::room::{ROOM_POLL, Waiting, expired, group_claim, group_full, reserve, with_slot};
use super::runs::RunStart;
use super::time::{pause, rfc3339, to_datetime};
use crate::calendar::Exclusion;
use crate::config::Job;
use crate::config::Misfire;
use crate::config::Mode;
use crate::outcome::Trigger;
use crate::store::Attempt;
use crate::store::ClaimReply;
use crate::store::ClaimRequest;
use crate::store::Notices;
use crate::store::StoreError;
use crate::store::WhenBusy;
use crate::telemetry;
use std::ops::ControlFlow;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use crate::store::StateCheck;

/// Whether a claim may be made ahead of its tick.
#[derive(Clone, Copy)]
pub(super) enum Ahead {
    /// Not before the tick (by Redis time).
    No,
    /// The preferred replica's claim: it woke `lead` before the tick, at
    /// `woke`, and its first answer measures the claim path's load
    /// (`rendezvous::ClaimLatency`). The run still starts at the tick.
    By { lead: Duration, woke: Instant },
}

impl Ahead {
    /// How far ahead Redis may take the claim, in ms: the lead with some
    /// room, since the replica woke by its estimate of Redis time (a claim
    /// that arrives earlier still is answered `early` and asked again at
    /// the tick).
    fn script_lead_ms(self) -> i64 {
        match self {
            Ahead::No => 0,
            Ahead::By { lead, .. } => {
                let room = lead / 2 + Duration::from_millis(2);
                i64::try_from((lead + room).as_millis()).unwrap_or(i64::MAX)
            }
        }
    }
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
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    trigger: Trigger,
    ahead: Ahead,
    cancel: &CancellationToken,
) -> ClaimEnd {
    let span = crate::trace::claim_span(&job.name, tick_ms);
    let end = claim_attempts(side, job, tick_ms, trigger, ahead, cancel)
        .instrument(span.clone())
        .await;
    let claimed = match &end {
        ClaimEnd::Won { start, .. } | ClaimEnd::NotDurable { start, .. } => {
            Some((start.run_id.as_str(), start.fence))
        }
        _ => None,
    };
    crate::trace::record_claim(&span, end.label(), claimed);
    end
}

/// [`claim`]'s attempts, inside its span.
async fn claim_attempts(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    trigger: Trigger,
    ahead: Ahead,
    cancel: &CancellationToken,
) -> ClaimEnd {
    // One run id for every attempt: the claim script recognises a retry of
    // a claim that won but whose reply was lost.
    let run_id = Uuid::new_v4().to_string();
    let began = Instant::now();
    // A replica with its `max_runs` in flight makes no claim (see `room`).
    let (mut slot, mut waiting) = match reserve(side, job, tick_ms, trigger, &run_id, cancel).await
    {
        Ok((slot, waiting)) => (Some(slot), waiting),
        Err(end) => return end,
    };
    let mut failures = Failures::new(waiting.deadline_ms);
    let mut measure = measure_from(ahead, began);
    let mut attempt = Attempt::First;
    let notices = job_notices(side.store.keys(), job);
    let exclusion = exclusion(job, tick_ms, waiting.trigger);
    let asked = Asked {
        tick_ms,
        run_id: &run_id,
        ahead,
        notices: &notices,
        exclusion: exclusion.as_ref(),
    };
    loop {
        // The one check of the job's cancellation on a claim's path: no
        // attempt is sent once its loop is cancelled (shutdown, a reload),
        // so no run starts from it.
        if cancel.is_cancelled() {
            return ClaimEnd::Cancelled;
        }
        // A drained replica asks nothing; an attempt that may have been
        // sent is asked again, since only an answer tells whether it won.
        if attempt == Attempt::First && side.drain.is_out() {
            return ClaimEnd::Drained;
        }
        let request = request(side, job, &asked, &waiting, attempt);
        let trigger = waiting.trigger;
        let sent = Instant::now();
        attempt = Attempt::Again;
        let next = match send(side, job, &request).await {
            // Definite: the attempt changed nothing, so the next one is a
            // first attempt again.
            Ok(full @ ClaimReply::GroupFull { .. }) => {
                (measure, attempt) = (None, Attempt::First);
                let next = group_full(side, job, tick_ms, &run_id, &mut waiting, full).await;
                failures.deadline_ms = waiting.deadline_ms;
                next
            }
            Ok(reply) => {
                side.redis.answered();
                if let Some(woke) = measure.take() {
                    side.claims.latency.observe(woke.elapsed());
                }
                answer(side, job, tick_ms, trigger, &run_id, sent, reply)
            }
            Err(e) => failures.failed(side, job, tick_ms, &run_id, &e),
        };
        let wait = match next {
            ControlFlow::Break(end) => {
                let end = expired(side, job, tick_ms, &waiting, end).await;
                return with_slot(end, &mut slot);
            }
            ControlFlow::Continue(wait) => wait,
        };
        // Cut short by a cancellation, which the check above then sees.
        pause(wait, cancel).await;
    }
}

/// When the load is measured from: only the first answer measures it (an
/// `early` answer's wait would feed the lead back into itself), and not
/// after a wait for room.
fn measure_from(ahead: Ahead, began: Instant) -> Option<Instant> {
    match ahead {
        Ahead::By { woke, .. } if began.elapsed() < ROOM_POLL / 4 => Some(woke),
        Ahead::By { .. } | Ahead::No => None,
    }
}

/// Sends one attempt: a broadcast job's tick is claimed by each replica
/// for itself, any other job's once in the cluster.
async fn send(
    side: &ClaimSide<'_>,
    job: &Job,
    request: &ClaimRequest<'_>,
) -> Result<ClaimReply, StoreError> {
    match job.mode {
        Mode::EveryReplica => side.store.claim_broadcast(request).await,
        Mode::One => side.store.claim(request).await,
    }
}

/// Why the job's calendars leave out `tick_ms`, if they do. Calendars
/// leave out ticks of the schedule (on time or caught up), never a run
/// asked for; decided once per claim, from this replica's config.
fn exclusion(job: &Job, tick_ms: i64, trigger: Trigger) -> Option<Exclusion> {
    match trigger {
        Trigger::Schedule | Trigger::Misfire => job.excluded_by(tick_ms),
        Trigger::Rerun | Trigger::Manual | Trigger::Chain | Trigger::Backfill => None,
    }
}

/// What every attempt of one claim asks, besides what may change between
/// attempts.
struct Asked<'a> {
    tick_ms: i64,
    run_id: &'a str,
    ahead: Ahead,
    notices: &'a Notices,
    exclusion: Option<&'a Exclusion>,
}

/// One attempt's request.
fn request<'a>(
    side: &ClaimSide<'a>,
    job: &'a Job,
    asked: &Asked<'a>,
    waiting: &Waiting,
    attempt: Attempt,
) -> ClaimRequest<'a> {
    let marks = side.marks.get(&job.name);
    let trigger = waiting.trigger;
    ClaimRequest {
        job: &job.name,
        tick_ms: asked.tick_ms,
        run_id: asked.run_id,
        claimant: side.claimant(job, marks.min_fence(), asked.notices),
        min_tick: marks.last_tick.unwrap_or(-1),
        trigger,
        when_busy: if trigger == Trigger::Misfire && job.misfire == Misfire::RunAll {
            WhenBusy::Wait
        } else {
            WhenBusy::Skip
        },
        deadline_ms: waiting.deadline_ms,
        lead_ms: asked.ahead.script_lead_ms(),
        attempt,
        cluster_pause: side.claims.cluster_hold(),
        exclusion: asked.exclusion,
        group: group_claim(job, waiting.until_ms),
    }
}

/// The failed attempts of one claim.
struct Failures {
    deadline_ms: i64,
    backoff: Duration,
    /// Whether some attempt may have reached Redis without our hearing back.
    maybe_sent: bool,
    warned: bool,
}

impl Failures {
    fn new(deadline_ms: i64) -> Failures {
        Failures {
            deadline_ms,
            backoff: Duration::from_millis(50),
            maybe_sent: false,
            warned: false,
        }
    }

    /// How long to wait before the next attempt, or the claim's end:
    /// `Late` when the deadline passed and no attempt can have reached
    /// Redis.
    fn failed(
        &mut self,
        side: &ClaimSide<'_>,
        job: &Job,
        tick_ms: i64,
        run_id: &str,
        e: &StoreError,
    ) -> ControlFlow<ClaimEnd, Duration> {
        side.meters.count_claim(&job.name, ClaimCount::Error);
        // Quorum masters that answered but split between racing replicas
        // are not an outage.
        if !matches!(
            e,
            StoreError::NoQuorum {
                reachable: true,
                ..
            }
        ) {
            side.redis.failed(e);
        }
        self.maybe_sent |= e.is_ambiguous();
        let tick = rfc3339(tick_ms);
        if side.clock.now_ms() > self.deadline_ms {
            if !self.maybe_sent {
                warn!(job = %job.name, %tick, %run_id, error = %e, "tick not claimed: Redis unreachable");
                return ControlFlow::Break(ClaimEnd::Late);
            }
            if !self.warned {
                self.warned = true;
                warn!(job = %job.name, %tick, %run_id, error = %e, "claim deadline passed with an attempt unanswered; waiting for Redis to say whether it won");
            }
        }
        debug!(job = %job.name, %tick, ambiguous = e.is_ambiguous(), error = %e, "claim failed; retrying");
        // Jitter: with `quorum`, replicas that split the masters between
        // them undo their claims and must not retry in step.
        let jitter = Duration::from_millis((Uuid::new_v4().as_u128() % 50) as u64);
        let wait = self.backoff + jitter;
        self.backoff = (self.backoff * 2).min(Duration::from_secs(1));
        ControlFlow::Continue(wait)
    }
}

/// Reads Redis's answer to a claim: notes the marks it carries, counts and
/// logs it. The claim's end, or how long to wait before asking again when
// Long by design: one arm per answer of the claim script, each the little
// it does with it.
/// Redis said not yet (early by Redis time, or catch-up waiting for a run).
fn answer(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    trigger: Trigger,
    run_id: &str,
    sent: Instant,
    reply: ClaimReply,
) -> ControlFlow<ClaimEnd, Duration> {
    let tick = rfc3339(tick_ms);
    if let Some(state) = reply.state() {
        check_state(side, job, state);
    }
    match reply {
        ClaimReply::Claimed {
            fence,
            started_ms,
            lease_key,
            expired,
            previous,
            acked,
            redis_now_us,
            ..
        } => {
            side.marks.note(&job.name, Some(tick_ms), Some(fence));
            let start = RunStart {
                tick_ms,
                run_id: run_id.to_string(),
                fence,
                lease_key,
                started_ms,
                trigger,
                valid_from: sent,
                not_before: not_before(started_ms, redis_now_us),
                upstream: None,
                params: job.params.defaults(),
                slot: None,
                traceparent: None,
            };
            let facts = WonFacts {
                acked,
                previous,
                expired: expired > 0,
            };
            ControlFlow::Break(won(side, job, start, facts))
        }
        ClaimReply::Early { ms } => {
            side.meters.count_claim(&job.name, ClaimCount::Early);
            debug!(job = %job.name, %tick, early_ms = ms, "early by Redis time; waiting");
            ControlFlow::Continue(Duration::from_millis(u64::try_from(ms).unwrap_or(1).max(1)))
        }
        ClaimReply::Wait { ms } => {
            side.meters.count_claim(&job.name, ClaimCount::Wait);
            debug!(job = %job.name, %tick, "a run is in flight; catch-up waits");
            let ms = u64::try_from(ms).unwrap_or(100).clamp(20, 1000);
            ControlFlow::Continue(Duration::from_millis(ms))
        }
        // `claim` hears GroupFull before.
        ClaimReply::Expired { .. }
        | ClaimReply::Corrupt { .. }
        | ClaimReply::Lapsed
        | ClaimReply::GroupFull { .. } => {
            ControlFlow::Break(not_claimed(side, job, &tick, run_id, reply))
        }
        ClaimReply::Taken {
            last_tick, fence, ..
        } => {
            side.meters.count_claim(&job.name, ClaimCount::Taken);
            side.marks.note(&job.name, Some(last_tick), Some(fence));
            debug!(job = %job.name, %tick, "taken by another replica");
            ControlFlow::Break(ClaimEnd::Taken)
        }
        ClaimReply::Paused { .. } | ClaimReply::Busy { .. } | ClaimReply::Excluded { .. } => {
            ControlFlow::Break(skipped(side, job, tick_ms, reply))
        }
        ClaimReply::Ended {
            runs_started,
            fence,
        } => ControlFlow::Break(ended(side, job, &tick, runs_started, fence)),
    }
}

/// The job has started its `max_runs` runs of the schedule: its loop ends.
fn ended(side: &ClaimSide<'_>, job: &Job, tick: &str, runs_started: u64, fence: u64) -> ClaimEnd {
    side.meters.count_claim(&job.name, ClaimCount::Ended);
    side.marks.note(&job.name, None, Some(fence));
    info!(job = %job.name, %tick, runs_started, max_runs = job.max_runs, "the job has started its max_runs runs; it has no more ticks");
    ClaimEnd::Ended
}

/// A tick the claim moved past without a run: the job is paused, a run
/// is in flight (recorded `skipped_overlap`), or the job's calendars leave
/// it out (recorded `excluded`).
fn skipped(side: &ClaimSide<'_>, job: &Job, tick_ms: i64, reply: ClaimReply) -> ClaimEnd {
    let tick = rfc3339(tick_ms);
    match reply {
        ClaimReply::Paused {
            previous, fence, ..
        } => {
            side.meters.count_claim(&job.name, ClaimCount::Paused);
            side.marks.note(&job.name, Some(tick_ms), Some(fence));
            info!(job = %job.name, %tick, "job (or the cluster) is paused; tick skipped");
            ClaimEnd::Paused { previous }
        }
        ClaimReply::Busy {
            holder,
            previous,
            fence,
            ..
        } => {
            side.meters.count_claim(&job.name, ClaimCount::Busy);
            side.marks.note(&job.name, Some(tick_ms), Some(fence));
            info!(job = %job.name, %tick, %holder, "a run is still in flight; tick recorded as skipped_overlap");
            ClaimEnd::Busy { previous }
        }
        ClaimReply::Excluded {
            previous, fence, ..
        } => {
            side.meters.count_claim(&job.name, ClaimCount::Excluded);
            side.marks.note(&job.name, Some(tick_ms), Some(fence));
            let why = job
                .excluded_by(tick_ms)
                .map(|e| e.to_string())
                .unwrap_or_default();
            info!(job = %job.name, %tick, %why, "tick recorded as excluded: the job's calendars leave it out");
            ClaimEnd::Excluded { previous }
        }
        // The caller hands over only the two above.
        _ => ClaimEnd::Taken,
    }
}

/// When a run claimed ahead of its tick may start: once Redis time reaches
/// `started_ms`, counted from the answer (which left Redis at
/// `redis_now_us`), so never early, whatever the local clock; at most a
/// second away, whatever the reply says (the script claims at most the
/// lead ahead). None: at once.
fn not_before(started_ms: i64, redis_now_us: i64) -> Option<Instant> {
    let ahead = u64::try_from(started_ms.saturating_mul(1000).saturating_sub(redis_now_us))
        .unwrap_or(0)
        .min(1_000_000);
    (ahead > 0).then(|| Instant::now() + Duration::from_micros(ahead))
}

/// A claim that took no effect and will not be asked again: counted and
/// logged with why.
fn not_claimed(
    side: &ClaimSide<'_>,
    job: &Job,
    tick: &str,
    run_id: &str,
    reply: ClaimReply,
) -> ClaimEnd {
    match reply {
        ClaimReply::Corrupt { field, value } => {
            side.meters.count_claim(&job.name, ClaimCount::Corrupt);
            error!(
                job = %job.name, %tick, field, value, key = %side.store.keys().state(&job.name),
                "tick not claimed: the job's state hash in Redis holds a {field} cronlease did not write, so which ticks ran is unknown; delete that field to repair it (the replicas re-seed it from what they remember)"
            );
            ClaimEnd::Refused
        }
        ClaimReply::Lapsed => {
            side.meters.count_claim(&job.name, ClaimCount::Lapsed);
            warn!(job = %job.name, %tick, %run_id, "the claim won, but its lease lapsed before Redis answered: not running it; recording it abandoned");
            ClaimEnd::Lapsed
        }
        ClaimReply::Expired { late_ms } => {
            side.meters.count_claim(&job.name, ClaimCount::Expired);
            warn!(job = %job.name, %tick, %run_id, late_ms, "tick not claimed: Redis unreachable until after the claim deadline");
            ClaimEnd::Late
        }
        // The caller hands over only the three above.
        _ => ClaimEnd::Refused,
    }
}

/// Says what a claim found wrong with the job's state in Redis: a state
/// loss, or a value no honest writer produces (counted, and named with its
/// key and field; the claim already treated it as lost).
fn check_state(side: &ClaimSide<'_>, job: &Job, state: &StateCheck) {
    match state {
        StateCheck::Sound => {}
        StateCheck::Behind => side.redis.state_loss(
            Some(&job.name),
            "the job's high-water mark or fence in Redis was behind what this replica saw",
        ),
        StateCheck::Implausible(field) => {
            let field = field.as_str();
            metrics::counter!(telemetry::UNTRUSTED_DATA, "source" => "state", "field" => field)
                .increment(1);
            error!(
                job = %job.name, key = %side.store.keys().state(&job.name), %field,
                "the job's state in Redis held a {field} no claim could have written (later than Redis time, or a fence past 2^53): treated as lost and re-seeded from what this replica saw; `cronlease status` shows the job as needing repair until `cronlease repair {}`",
                job.name
            );
        }
    }
}

/// What the claim script says of a claim we won, besides its lease.
struct WonFacts {
    /// Redis replicas that acknowledged the claim (with `min_replicas_ack`).
    acked: Option<u32>,
    /// The high-water mark the claim moved past (-1: none).
    previous: i64,
    /// The claim saw leases of the job that lapsed.
    expired: bool,
}

/// A claim Redis says we won: durable (the run may start) or not.
fn won(side: &ClaimSide<'_>, job: &Job, start: RunStart, facts: WonFacts) -> ClaimEnd {
    let WonFacts {
        acked,
        previous,
        expired,
    } = facts;
    let (tick, fence, run_id) = (rfc3339(start.tick_ms), start.fence, &start.run_id);
    let wanted = side.config.redis.min_replicas_ack;
    if let Some(acked) = acked.filter(|&acked| acked < wanted) {
        side.meters.count_claim(&job.name, ClaimCount::NotDurable);
        warn!(job = %job.name, %tick, fence, %run_id, acked, wanted, "claim not durable: fewer Redis replicas acknowledged it than min_replicas_ack within ack_timeout; not running it");
        return ClaimEnd::NotDurable { start, acked };
    }
    side.meters.count_claim(&job.name, ClaimCount::Claimed);
    let lateness_ms = start.started_ms - start.tick_ms;
    // Claimed this long before the tick (the run waits for it).
    let ahead_ms = start.not_before.map_or(0, |at| {
        at.saturating_duration_since(Instant::now()).as_millis()
    });
    info!(job = %job.name, %tick, fence, %run_id, replica = %side.identity.replica, trigger = start.trigger.as_str(), lateness_ms, ahead_ms, "claimed");
    ClaimEnd::Won {
        start,
        previous,
        expired,
    }
}

/// At most this many missed ticks are recorded one by one after a gap.
pub(super) const MAX_MISSED_RECORDED: usize = 1000;

/// Records the schedule's ticks strictly between `previous` (the high-water
/// mark this claim moved past) and `tick_ms` as missed: nobody claimed them.
/// Only the replica whose claim moved the mark sees the gap, and the script
/// records each tick once.
pub(super) async fn record_missed(side: &ClaimSide<'_>, job: &Job, previous: i64, tick_ms: i64) {
    if previous < 0 {
        return;
    }
    let mut missed = Vec::new();
    let mut cursor = to_datetime(previous);
    while let Some(next) = job.next_after(cursor) {
        let next_ms = next.timestamp_millis();
        if next_ms >= tick_ms || missed.len() >= MAX_MISSED_RECORDED {
            break;
        }
        missed.push((next_ms, job.excluded_by(next_ms)));
        cursor = next;
    }
    if missed.is_empty() {
        return;
    }
    // Boxed: a gap is rare, and every claim's future would be the size of
    // this call otherwise.
    Box::pin(store_missed(side, job, missed)).await;
}

/// Records `missed` (ticks of `job`) as missed, or as excluded those its
/// calendars leave out, and says so.
async fn store_missed(side: &ClaimSide<'_>, job: &Job, missed: Vec<(i64, Option<Exclusion>)>) {
    let store = side.store;
    match store
        .record_missed(
            &job.name,
            &missed,
            &side.claimant(job, 0, &job_notices(side.store.keys(), job)),
        )
        .await
    {
        Ok(0) => {}
        Ok(n) => {
            side.meters.job(&job.name).count_missed(n);
            warn!(
                job = %job.name, missed = n, first = %rfc3339(missed[0].0), last = %rfc3339(missed[missed.len() - 1].0),
                "ticks nobody claimed recorded as missed"
            );
        }
        Err(e) => {
            side.redis.failed(&e);
            warn!(job = %job.name, error = %e, "cannot record missed ticks");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_takes_a_claim_a_little_further_ahead_than_the_replica_woke() {
        assert_eq!(Ahead::No.script_lead_ms(), 0);
        let ahead = |ms| Ahead::By {
            lead: Duration::from_millis(ms),
            woke: Instant::now(),
        };
        assert_eq!(ahead(3).script_lead_ms(), 6);
        assert_eq!(ahead(100).script_lead_ms(), 152);
        assert_eq!(ahead(500).script_lead_ms(), 752);
    }
}
