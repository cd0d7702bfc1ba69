//! Claiming a tick: the claim with its retries until Redis gives a definite
//! answer, returned as a value ([`ClaimEnd`]) for the job loop to act on,
//! and the recording of the missed ticks a claim jumped over.
//!
//! A claim never starts a run, sweeps or delivers: `tick::follow` does.
//! What it sees of the replica is a `ClaimSide`, which holds no runs.

use super::capacity::RunSlot;
use super::ctx::ClaimSide;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::runs::RunStart;
use super::time::{LATE_MS, pause, rfc3339, to_datetime};
use crate::calendar::Exclusion;
use crate::config::Job;
use crate::config::Misfire;
use crate::outcome::Trigger;
use crate::store::Attempt;
use crate::store::ClaimReply;
use crate::store::ClaimRequest;
use crate::store::StoreError;
use crate::store::WhenBusy;
use crate::store::{CapacityCause, CapacitySkip, CapacitySkipReply, GroupClaim};
use crate::telemetry;
use std::ops::ControlFlow;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use crate::store::StateCheck;

/// How the claim of a tick ended.
pub(super) enum ClaimEnd {
    /// Ours: the run may start. `previous` is the high-water mark this claim
    /// moved past (-1: none); `expired` says the claim saw leases of this
    /// job that lapsed (a sweep records them).
    Won {
        start: RunStart,
        previous: i64,
        expired: bool,
    },
    /// Ours, but fewer Redis replicas than `min_replicas_ack` acknowledged
    /// the claim: it is recorded, not run.
    NotDurable {
        start: RunStart,
        acked: u32,
    },
    /// Ours, but the lease lapsed before Redis answered: not run; a sweep
    /// records it abandoned.
    Lapsed,
    /// Another replica has it.
    Taken,
    /// Not asked: this replica is drained (`cronlease drain`, shutdown),
    /// the others claim.
    Drained,
    /// Redis holds a state for the job that cronlease did not write: not
    /// claimed, and logged; the next tick asks again.
    Refused,
    /// The job is paused: the tick is skipped.
    Paused {
        previous: i64,
    },
    /// A run is in flight and the job's overlap policy skips the tick.
    Busy {
        previous: i64,
    },
    /// The job has started its `max_runs` runs of the schedule: it has no
    /// more ticks.
    Ended,
    /// The job's calendars leave the tick out: recorded `excluded`.
    Excluded {
        previous: i64,
    },
    /// No replica had room for the tick (`[daemon] max_runs`), or the
    /// job's group no slot, within its grace: recorded `skipped_capacity`.
    SkippedCapacity {
        previous: i64,
    },
    /// The tick was not claimed in time (Redis was unreachable, or answered
    /// only after the deadline): the misfire policy decides.
    Late,
    Cancelled,
}

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
    // One run id for every attempt: the claim script recognises a retry of
    // a claim that won but whose reply was lost.
    let run_id = Uuid::new_v4().to_string();
    let mut trigger = trigger;
    let wait_until = wait_until(job, tick_ms);
    // A replica with its `max_runs` in flight makes no claim: the others
    // take the tick at their turn, and this one waits for room within the
    // tick's grace.
    let mut slot = match room(side, job, tick_ms, wait_until, cancel).await {
        Ok(slot) => Some(slot),
        Err(Full::Cancelled) => return ClaimEnd::Cancelled,
        Err(Full::Taken) => return ClaimEnd::Taken,
        Err(Full::GraceOver) => {
            let skip = SkipFor {
                run_id: &run_id,
                trigger,
                cause: CapacityCause::Replicas,
                wait_until,
            };
            return skip_for_capacity(side, job, tick_ms, skip).await;
        }
    };
    if side.clock.now_ms() > tick_ms + LATE_MS && trigger == Trigger::Schedule {
        // Waited past the time a tick is on time: a late start.
        trigger = Trigger::Misfire;
    }
    let mut deadline_ms = claim_deadline(job, tick_ms, trigger);
    let mut failures = Failures::new(deadline_ms);
    // Only the first answer measures the load: an `early` answer's wait
    // for the tick would feed the lead back into itself.
    let mut measure = match ahead {
        Ahead::By { woke, .. } => Some(woke),
        Ahead::No => None,
    };
    let mut attempt = Attempt::First;
    let notices = job_notices(side.store.keys(), job);
    // Calendars leave out ticks of the schedule (on time or caught up),
    // never a run asked for; decided once, from this replica's config.
    let exclusion = match trigger {
        Trigger::Schedule | Trigger::Misfire => job.excluded_by(tick_ms),
        Trigger::Rerun | Trigger::Manual | Trigger::Chain | Trigger::Backfill => None,
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
        let marks = side.marks.get(&job.name);
        let request = ClaimRequest {
            job: &job.name,
            tick_ms,
            run_id: &run_id,
            claimant: side.claimant(job, marks.min_fence(), &notices),
            min_tick: marks.last_tick.unwrap_or(-1),
            trigger,
            when_busy: if trigger == Trigger::Misfire && job.misfire == Misfire::RunAll {
                WhenBusy::Wait
            } else {
                WhenBusy::Skip
            },
            deadline_ms,
            lead_ms: ahead.script_lead_ms(),
            attempt,
            cluster_pause: side.claims.cluster_hold(),
            exclusion: exclusion.as_ref(),
            group: group_claim(job, wait_until),
        };
        let sent = Instant::now();
        attempt = Attempt::Again;
        let next = match side.store.claim(&request).await {
            Ok(ClaimReply::GroupFull {
                used,
                waiting,
                fence,
            }) => {
                // Definite: the attempt changed nothing, so the next one
                // is a first attempt again.
                side.redis.answered();
                measure = None;
                attempt = Attempt::First;
                side.marks.note(&job.name, None, Some(fence));
                let now = side.clock.now_ms();
                if now > wait_until {
                    let skip = SkipFor {
                        run_id: &run_id,
                        trigger,
                        cause: CapacityCause::Group,
                        wait_until,
                    };
                    return skip_for_capacity(side, job, tick_ms, skip).await;
                }
                side.meters.count_claim(&job.name, ClaimCount::GroupFull);
                debug!(job = %job.name, tick = %rfc3339(tick_ms), used, waiting, "the job's group has no slot free; waiting");
                if now > tick_ms + LATE_MS {
                    trigger = Trigger::Misfire;
                }
                // The claim may take effect as long as the tick may wait.
                deadline_ms = deadline_ms.max(wait_until);
                failures.deadline_ms = deadline_ms;
                ControlFlow::Continue(GROUP_POLL)
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
            ControlFlow::Break(ClaimEnd::Won {
                mut start,
                previous,
                expired,
            }) => {
                start.slot = slot.take();
                return ClaimEnd::Won {
                    start,
                    previous,
                    expired,
                };
            }
            ControlFlow::Break(end) => return end,
            ControlFlow::Continue(wait) => wait,
        };
        // Cut short by a cancellation, which the check above then sees.
        pause(wait, cancel).await;
    }
}

/// How often a tick waiting for a slot of its group asks again.
const GROUP_POLL: Duration = Duration::from_millis(200);

/// How often a replica with its `max_runs` in flight looks again for room
/// besides when a run of its own ends (and for a claim announced).
const ROOM_POLL: Duration = Duration::from_millis(200);

/// Redis time until which a tick of `job` may wait for room (a replica
/// with a slot free, a slot of its group): its misfire grace (only
/// [`LATE_MS`] with `misfire = "skip"`), and at most until the job's next
/// tick, which then takes its place (but with `misfire = "run_all"`,
/// whose ticks each wait their grace). Every replica computes the same
/// instant, which names the tick among a group's waiting ones.
fn wait_until(job: &Job, tick_ms: i64) -> i64 {
    let window = match job.misfire {
        Misfire::Skip => LATE_MS,
        Misfire::RunOnce | Misfire::RunAll => {
            i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX)
        }
    };
    let end = tick_ms.saturating_add(window.max(LATE_MS));
    if job.misfire == Misfire::RunAll {
        return end;
    }
    match job.next_after(to_datetime(tick_ms)) {
        Some(next) => end.min(next.timestamp_millis().max(tick_ms + LATE_MS)),
        None => end,
    }
}

/// The job's group, as its claim says it.
fn group_claim(job: &Job, until_ms: i64) -> Option<GroupClaim<'_>> {
    job.group.as_ref().map(|group| GroupClaim {
        name: &group.name,
        max: group.max,
        until_ms,
    })
}

/// Why a full replica makes no claim of a tick.
enum Full {
    Cancelled,
    /// Another replica announced its claim.
    Taken,
    /// The tick's grace passed with no room here.
    GraceOver,
}

/// A slot of the replica's capacity for a claim of `tick_ms`, waiting for
/// one while no other replica announces the tick and its grace lasts.
async fn room(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    wait_until: i64,
    cancel: &CancellationToken,
) -> Result<RunSlot, Full> {
    let mut counted = false;
    loop {
        // Registered before the count is read: a run ending in between
        // wakes the wait below.
        let freed = side.capacity.freed();
        if let Some(slot) = side.capacity.try_take() {
            return Ok(slot);
        }
        if !counted {
            counted = true;
            side.meters.count_claim(&job.name, ClaimCount::Capacity);
            debug!(
                job = %job.name, tick = %rfc3339(tick_ms), in_flight = side.capacity.in_flight(),
                max_runs = side.capacity.max(), "this replica is full; the tick is left to the others"
            );
        }
        if cancel.is_cancelled() {
            return Err(Full::Cancelled);
        }
        if side.marks.covers(&job.name, tick_ms) {
            side.meters.count_claim(&job.name, ClaimCount::Announced);
            return Err(Full::Taken);
        }
        if side.clock.now_ms() > wait_until {
            return Err(Full::GraceOver);
        }
        tokio::select! {
            () = freed => {}
            () = tokio::time::sleep(ROOM_POLL) => {}
            () = cancel.cancelled() => {}
        }
    }
}

/// What a tick with no room is recorded with.
struct SkipFor<'a> {
    run_id: &'a str,
    trigger: Trigger,
    cause: CapacityCause,
    wait_until: i64,
}

/// Records `tick_ms` `skipped_capacity` (once, whichever replica gives up
/// first); the claim's end.
async fn skip_for_capacity(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    skip: SkipFor<'_>,
) -> ClaimEnd {
    let notices = job_notices(side.store.keys(), job);
    let request = CapacitySkip {
        job: &job.name,
        tick_ms,
        run_id: skip.run_id,
        claimant: side.claimant(job, side.marks.get(&job.name).min_fence(), &notices),
        trigger: skip.trigger,
        cause: skip.cause,
        group: group_claim(job, skip.wait_until),
    };
    let tick = rfc3339(tick_ms);
    match side.store.skip_for_capacity(&request).await {
        Ok(CapacitySkipReply::Skipped { previous, fence }) => {
            side.redis.answered();
            side.meters
                .count_claim(&job.name, ClaimCount::SkippedCapacity);
            side.marks.note(&job.name, Some(tick_ms), Some(fence));
            let group = job.group.as_ref().map(|g| g.name.as_str());
            warn!(
                job = %job.name, %tick, reason = skip.cause.as_str(), group,
                "tick recorded as skipped_capacity: no room for it within its grace"
            );
            ClaimEnd::SkippedCapacity { previous }
        }
        Ok(CapacitySkipReply::Taken { last_tick, fence }) => {
            side.redis.answered();
            side.marks.note(&job.name, Some(last_tick), Some(fence));
            ClaimEnd::Taken
        }
        Ok(CapacitySkipReply::Corrupt { field, value }) => {
            side.meters.count_claim(&job.name, ClaimCount::Corrupt);
            error!(
                job = %job.name, %tick, field, value, key = %side.store.keys().state(&job.name),
                "tick not recorded: the job's state hash in Redis holds a {field} cronlease did not write; `cronlease repair` clears it"
            );
            ClaimEnd::Refused
        }
        Err(e) => {
            side.redis.failed(&e);
            warn!(job = %job.name, %tick, error = %e, "cannot record a tick skipped for capacity; the next claim records it missed");
            ClaimEnd::Refused
        }
    }
}

/// Redis time after which a claim of `tick_ms` must take no effect: a
/// tick of the schedule is late after [`LATE_MS`], the others when the
/// job's misfire grace has passed.
fn claim_deadline(job: &Job, tick_ms: i64, trigger: Trigger) -> i64 {
    match trigger {
        Trigger::Schedule => tick_ms + LATE_MS,
        Trigger::Misfire
        | Trigger::Rerun
        | Trigger::Manual
        | Trigger::Chain
        | Trigger::Backfill => {
            tick_ms.saturating_add(i64::try_from(job.misfire_grace.as_millis()).unwrap_or(i64::MAX))
        }
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
        // `claim` hears it before: asked again.
        ClaimReply::GroupFull { .. } => ControlFlow::Continue(GROUP_POLL),
        ClaimReply::Expired { .. } | ClaimReply::Corrupt { .. } | ClaimReply::Lapsed => {
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
        } => {
            side.meters.count_claim(&job.name, ClaimCount::Ended);
            side.marks.note(&job.name, None, Some(fence));
            info!(job = %job.name, %tick, runs_started, max_runs = job.max_runs, "the job has started its max_runs runs; it has no more ticks");
            ControlFlow::Break(ClaimEnd::Ended)
        }
    }
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
