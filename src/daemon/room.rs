//! Room for a claim: the replica's capacity (`[daemon] max_runs`) and the
//! job's concurrency group. A full replica makes no claim and waits for
//! room while no claim of the tick is announced and the tick's grace
//! lasts ([`reserve`]); a claim its group refuses (`group_full`) waits
//! the same way, asking again ([`group_full`]). A tick whose grace passes
//! with no room is recorded `skipped_capacity` ([`skip_for_capacity`]).

use std::ops::ControlFlow;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use super::capacity::RunSlot;
use super::ctx::ClaimSide;
use super::ending::ClaimEnd;
use super::meters::ClaimCount;
use super::notices::job_notices;
use super::time::{LATE_MS, rfc3339, to_datetime};
use crate::config::{Job, Misfire};
use crate::outcome::Trigger;
use crate::store::{CapacityCause, CapacitySkip, CapacitySkipReply, ClaimReply, GroupClaim};

/// What a claim that may wait for room carries from attempt to attempt:
/// its trigger (a tick of the schedule that got room after it was on
/// time starts as a late one, `misfire`), its deadline (moved to the end
/// of its grace once it waits for its group) and that end.
pub(super) struct Waiting {
    pub(super) trigger: Trigger,
    pub(super) deadline_ms: i64,
    pub(super) until_ms: i64,
    /// Whether the claim waited for its group: an attempt that then
    /// reaches Redis past its deadline (`expired`) ends the wait, and the
    /// tick is recorded `skipped_capacity` ([`expired`]).
    pub(super) for_group: bool,
}

/// A place in the replica's capacity for a claim of `tick_ms`, and what
/// the claim carries; or the claim's end: another replica announced the
/// tick, the tick was recorded `skipped_capacity`, or the job's loop was
/// cancelled.
pub(super) async fn reserve(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    trigger: Trigger,
    run_id: &str,
    cancel: &CancellationToken,
) -> Result<(RunSlot, Waiting), ClaimEnd> {
    let until_ms = wait_until(job, tick_ms);
    let slot = match room(side, job, tick_ms, until_ms, cancel).await {
        Ok(slot) => slot,
        Err(Full::Cancelled) => return Err(ClaimEnd::Cancelled),
        Err(Full::Taken) => return Err(ClaimEnd::Taken),
        Err(Full::GraceOver) => {
            let skip = SkipFor {
                run_id,
                trigger,
                cause: CapacityCause::Replicas,
                wait_until: until_ms,
            };
            return Err(skip_for_capacity(side, job, tick_ms, skip).await);
        }
    };
    let trigger = late_start(side, tick_ms, trigger);
    let waiting = Waiting {
        trigger,
        deadline_ms: claim_deadline(job, tick_ms, trigger),
        until_ms,
        for_group: false,
    };
    Ok((slot, waiting))
}

/// `trigger`, or `misfire` for a tick of the schedule past the time it is
/// on time.
fn late_start(side: &ClaimSide<'_>, tick_ms: i64, trigger: Trigger) -> Trigger {
    if trigger == Trigger::Schedule && side.clock.now_ms() > tick_ms + LATE_MS {
        Trigger::Misfire
    } else {
        trigger
    }
}

/// A claim's end with the run's place in the capacity handed to the run
/// it won; dropped (given back) otherwise.
pub(super) fn with_slot(end: ClaimEnd, slot: &mut Option<RunSlot>) -> ClaimEnd {
    match end {
        ClaimEnd::Won {
            mut start,
            previous,
            expired,
        } => {
            start.slot = slot.take();
            ClaimEnd::Won {
                start,
                previous,
                expired,
            }
        }
        end => end,
    }
}

/// Redis time after which a claim of `tick_ms` must take no effect: a
/// tick of the schedule is late after [`LATE_MS`], the others when the
/// job's misfire grace has passed.
pub(super) fn claim_deadline(job: &Job, tick_ms: i64, trigger: Trigger) -> i64 {
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

/// A claim's end, but for a claim that waited for its group and whose
/// next attempt reached Redis after the end of the tick's grace
/// (`Late`: it took no effect, and none can any more): the tick is
/// recorded `skipped_capacity`, as when the group answered `group_full`
/// once more.
pub(super) async fn expired(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    waiting: &Waiting,
    end: ClaimEnd,
) -> ClaimEnd {
    if !(waiting.for_group && matches!(end, ClaimEnd::Late)) {
        return end;
    }
    // A record of its own, not the claim that expired.
    let record_id = uuid::Uuid::new_v4().to_string();
    let skip = SkipFor {
        run_id: &record_id,
        trigger: waiting.trigger,
        cause: CapacityCause::Group,
        wait_until: waiting.until_ms,
    };
    skip_for_capacity(side, job, tick_ms, skip).await
}

/// After a `group_full` answer (`reply`: slots used, ticks waiting, the
/// job's fence): ask again in [`GROUP_POLL`] while the tick's grace lasts, the
/// claim's deadline moved to its end; after it, the tick recorded
/// `skipped_capacity`.
pub(super) async fn group_full(
    side: &ClaimSide<'_>,
    job: &Job,
    tick_ms: i64,
    run_id: &str,
    waiting: &mut Waiting,
    reply: ClaimReply,
) -> ControlFlow<ClaimEnd, Duration> {
    let ClaimReply::GroupFull {
        used,
        waiting: queued,
        fence,
    } = reply
    else {
        return ControlFlow::Continue(GROUP_POLL);
    };
    side.redis.answered();
    side.marks.note(&job.name, None, Some(fence));
    if side.clock.now_ms() > waiting.until_ms {
        let skip = SkipFor {
            run_id,
            trigger: waiting.trigger,
            cause: CapacityCause::Group,
            wait_until: waiting.until_ms,
        };
        return ControlFlow::Break(skip_for_capacity(side, job, tick_ms, skip).await);
    }
    side.meters.count_claim(&job.name, ClaimCount::GroupFull);
    debug!(job = %job.name, tick = %rfc3339(tick_ms), used, waiting = queued, "the job's group has no slot free; waiting");
    waiting.trigger = late_start(side, tick_ms, waiting.trigger);
    waiting.for_group = true;
    // The claim may take effect as long as the tick may wait.
    waiting.deadline_ms = waiting.deadline_ms.max(waiting.until_ms);
    ControlFlow::Continue(GROUP_POLL)
}

/// How often a tick waiting for a slot of its group asks again.
pub(super) const GROUP_POLL: Duration = Duration::from_millis(200);

/// How often a replica with its `max_runs` in flight looks again for room
/// besides when a run of its own ends (and for a claim announced).
pub(super) const ROOM_POLL: Duration = Duration::from_millis(200);

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
pub(super) fn group_claim(job: &Job, until_ms: i64) -> Option<GroupClaim<'_>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(extra: &str) -> Job {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n[groups.db]\nmax = 1\n\n[jobs.j]\nschedule = \"*/10 * * * * *\"\ncommand = [\"true\"]\n{extra}\n"
        );
        let config =
            crate::config::Config::parse(&text, std::path::Path::new("/etc/cronlease/jobs.toml"))
                .expect("a valid table");
        config.jobs["j"].clone()
    }

    #[test]
    fn a_tick_waits_for_room_within_its_grace_and_never_past_the_next_tick() {
        let tick = 1_795_000_000_000;
        // run_once: the grace, cut at the next tick (10 s later).
        assert_eq!(
            wait_until(&job("misfire_grace = \"3s\""), tick),
            tick + 3_000
        );
        assert_eq!(
            wait_until(&job("misfire_grace = \"1m\""), tick),
            tick + 10_000
        );
        // skip: only while the tick is on time.
        assert_eq!(
            wait_until(&job("misfire = \"skip\"\nmisfire_grace = \"1m\""), tick),
            tick + LATE_MS
        );
        // run_all: each tick its whole grace.
        assert_eq!(
            wait_until(&job("misfire = \"run_all\"\nmisfire_grace = \"1m\""), tick),
            tick + 60_000
        );
        // The group a claim carries, with the same instant.
        let grouped = job("group = \"db\"\nmisfire_grace = \"3s\"");
        let claim = group_claim(&grouped, wait_until(&grouped, tick)).expect("a group");
        assert_eq!(
            (claim.name, claim.max, claim.until_ms),
            ("db", 1, tick + 3_000)
        );
        assert!(group_claim(&job(""), tick).is_none());
    }
}
