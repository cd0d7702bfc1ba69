//! From the records of a tick to its verdict and reasons: which record
//! decides (an outcome of the tick, a run in flight, a skip, a `missed`
//! record, none) and what evidence each reason cites.

use serde_json::json;

use super::calendar::{Around, last_tick};
use super::records::{InFlight, Recorded, Records};
use super::report::{Explanation, Reason, ReplicaSeen, RunFacts, Verdict, reason, span, text_of};
use crate::calendar::{CalendarRule, Exclusion};
use crate::config::{Job, Misfire};
use crate::outcome::{Status, Trigger};
use crate::schedule::Timetable;
use crate::store::Action;

/// How long after its tick a tick with no record is still on its way:
/// replicas claim at the tick, and a claim's answer takes a moment.
const CLAIM_SLACK_MS: i64 = 5_000;

/// Decides the verdict from the records, and gives the reasons.
pub(super) fn judge(explanation: &mut Explanation, records: &Records, definition: Option<&Job>) {
    let tick_ms = explanation.tick_ms;
    let of_tick: Vec<&Recorded> = records.of_tick(tick_ms).collect();
    let find = |wanted: Status| of_tick.iter().find(|r| r.entry.status == wanted);
    // The newest: an abandoned run's tick that was run again
    // (`on_holder_lost = "rerun"`) ended with the rerun.
    let ran = of_tick.iter().rev().find(|r| {
        !matches!(
            r.entry.status,
            Status::Missed
                | Status::SkippedOverlap
                | Status::NotDurable
                | Status::Excluded
                | Status::SkippedCapacity
        )
    });
    if let Some(run) = ran {
        ran_verdict(explanation, run);
    } else if let Some(run) = records.running.iter().find(|r| r.tick_ms == tick_ms) {
        running_verdict(explanation, run);
    } else if let Some(excluded) = find(Status::Excluded) {
        excluded_verdict(explanation, excluded);
    } else if let Some(skip) = find(Status::SkippedOverlap) {
        skipped_verdict(explanation, skip, records);
    } else if let Some(full) = find(Status::SkippedCapacity) {
        capacity_verdict(explanation, full);
    } else if let Some(missed) = find(Status::Missed) {
        missed_verdict(explanation, missed, records, definition);
    } else if let Some(lost) = find(Status::NotDurable) {
        explanation.verdict = Verdict::NotRun;
        explanation.summary = format!("claimed by {} but not run", lost.entry.replica);
        explanation.reasons.push(reason(
            "not_durable",
            format!(
                "{} claimed it with fence {}, but fewer Redis replicas than min_replicas_ack acknowledged the claim in time, so it did not run it",
                lost.entry.replica, lost.entry.fence
            ),
            json!({ "recorded_by": lost.entry.replica, "fence": lost.entry.fence }),
        ));
    } else {
        no_record_verdict(explanation, records);
    }
}

/// A `skipped_capacity` outcome: no replica had room for the tick
/// (`capacity`), or its group no slot (`group_full`), within its grace.
fn capacity_verdict(explanation: &mut Explanation, full: &Recorded) {
    let e = &full.entry;
    explanation.verdict = Verdict::NotRun;
    let recorded_by = if e.replica.is_empty() {
        full.recorded_by.clone()
    } else {
        e.replica.clone()
    };
    match &e.group {
        Some(group) => {
            explanation.summary =
                format!("its group {group} had no slot free within the tick's grace");
            explanation.reasons.push(reason(
                "group_full",
                format!(
                    "every slot of the concurrency group {group} was held by runs of its jobs until the tick's grace passed; {recorded_by} recorded it skipped_capacity"
                ),
                json!({ "group": group, "recorded_by": recorded_by, "at_ms": e.finished_ms }),
            ));
        }
        None => {
            explanation.summary = "no replica had room for it within the tick's grace".to_string();
            explanation.reasons.push(reason(
                "capacity",
                format!(
                    "every replica that could claim it had its [daemon] max_runs runs in flight until the tick's grace passed; {recorded_by} recorded it skipped_capacity"
                ),
                json!({ "recorded_by": recorded_by, "at_ms": e.finished_ms }),
            ));
        }
    }
}

/// An outcome of the tick: who ran it, how late, and how it ended.
fn ran_verdict(explanation: &mut Explanation, run: &Recorded) {
    let e = &run.entry;
    explanation.verdict = Verdict::Ran;
    let late_ms = e.started_ms.saturating_sub(e.tick_ms);
    let ending = match (e.exit_code, e.signal) {
        (Some(code), _) if e.status != Status::Ok => format!(" (exit code {code})"),
        (_, Some(signal)) => format!(" (signal {signal})"),
        _ => String::new(),
    };
    explanation.summary = format!(
        "ran on {}{} with fence {}, {} after the tick: {}{ending} after {}, {} attempt{}",
        e.replica,
        host_text(&run.host),
        e.fence,
        span(late_ms),
        e.status,
        span(e.duration_ms),
        e.attempts,
        if e.attempts == 1 { "" } else { "s" },
    );
    explanation.run = Some(RunFacts {
        run_id: e.run_id.clone(),
        replica: e.replica.clone(),
        host: run.host.clone(),
        fence: e.fence,
        trigger: e.trigger,
        started_ms: e.started_ms,
        late_ms,
        status: Some(e.status),
        finished_ms: Some(e.finished_ms),
        duration_ms: Some(e.duration_ms),
        attempts: Some(e.attempts),
        exit_code: e.exit_code,
        signal: e.signal,
        lease_left_ms: None,
    });
}

/// A run of the tick in flight, with what is left of its lease.
fn running_verdict(explanation: &mut Explanation, run: &InFlight) {
    explanation.verdict = Verdict::Running;
    let late_ms = run.started_ms.saturating_sub(run.tick_ms);
    let lease_left_ms = run.expires_ms.saturating_sub(explanation.now_ms);
    explanation.summary = format!(
        "running on {}{} with fence {} since {} ({} after the tick); its lease holds {} more unless renewed",
        run.replica,
        host_text(&run.host),
        run.fence,
        text_of(run.started_ms),
        span(late_ms),
        span(lease_left_ms),
    );
    explanation.run = Some(RunFacts {
        run_id: run.run_id.clone(),
        replica: run.replica.clone(),
        host: run.host.clone(),
        fence: run.fence,
        trigger: Trigger::parse(&run.trigger).unwrap_or(Trigger::Schedule),
        started_ms: run.started_ms,
        late_ms,
        status: None,
        finished_ms: None,
        duration_ms: None,
        attempts: None,
        exit_code: None,
        signal: None,
        lease_left_ms: Some(lease_left_ms),
    });
}

/// An `excluded` outcome: the job's calendars leave the tick out.
fn excluded_verdict(explanation: &mut Explanation, excluded: &Recorded) {
    let e = &excluded.entry;
    explanation.verdict = Verdict::Excluded;
    let calendar = e.calendar.clone().unwrap_or_default();
    let rule = e.calendar_rule.unwrap_or(CalendarRule::Exclude);
    let recorded_by = if e.replica.is_empty() {
        excluded.recorded_by.clone()
    } else {
        e.replica.clone()
    };
    let why = Exclusion {
        rule,
        calendar: calendar.clone(),
    };
    explanation.summary = format!("{why}: not run, recorded excluded by {recorded_by}");
    explanation
        .reasons
        .push(calendar_reason(&why, Some(&recorded_by)));
}

/// Why the job's calendars leave the tick out, with who recorded it
/// (none when no record says so yet).
pub(super) fn calendar_reason(why: &Exclusion, recorded_by: Option<&str>) -> Reason {
    let rule = match why.rule {
        CalendarRule::Exclude => format!(
            "the tick is inside an event of calendar {} (exclude)",
            why.calendar
        ),
        CalendarRule::Only => format!("the tick is inside no event of {} (only)", why.calendar),
    };
    let text = match recorded_by {
        Some(by) => format!("{rule}, so {by} recorded it excluded instead of running it"),
        None => format!("{rule}: the job's calendars leave it out, so it is not run"),
    };
    reason(
        "calendar",
        text,
        json!({ "calendar": why.calendar, "rule": why.rule.as_str(), "recorded_by": recorded_by }),
    )
}

/// A `skipped_overlap` outcome: the tick came while a run was in flight.
fn skipped_verdict(explanation: &mut Explanation, skip: &Recorded, records: &Records) {
    explanation.verdict = Verdict::Skipped;
    let at = skip.entry.started_ms;
    let in_flight = in_flight_at(records, explanation.tick_ms, at);
    explanation.summary = format!("skipped by {}: a run was in flight", skip.entry.replica);
    let holder = in_flight.as_ref().map_or_else(
        || "a run whose record is no longer in the stream".to_string(),
        |r| {
            format!(
                "run {} of tick {} on {} (fence {}, started {})",
                r["run_id"].as_str().unwrap_or_default(),
                r["tick"].as_str().unwrap_or_default(),
                r["replica"].as_str().unwrap_or_default(),
                r["fence"],
                r["started"].as_str().unwrap_or_default(),
            )
        },
    );
    explanation.reasons.push(reason(
        "overlap",
        format!(
            "overlap = skip: when {} claimed the tick at {}, {holder} still held the job's lease, so the tick was recorded skipped_overlap",
            skip.entry.replica,
            text_of(at)
        ),
        json!({
            "recorded_by": skip.entry.replica,
            "recorded_at_ms": at,
            "run_id": skip.entry.run_id,
            "in_flight": in_flight,
        }),
    ));
}

/// The run of an earlier tick that was in flight at `at_ms`: recorded,
/// or still running.
fn in_flight_at(records: &Records, tick_ms: i64, at_ms: i64) -> Option<serde_json::Value> {
    let describe = |run_id: &str, tick: i64, replica: &str, fence: u64, started: i64| {
        json!({
            "run_id": run_id, "tick": text_of(tick), "replica": replica,
            "fence": fence, "started": text_of(started),
        })
    };
    let ended = records.outcomes.iter().find(|r| {
        let e = &r.entry;
        e.tick_ms < tick_ms
            && e.fence > 0
            && e.started_ms <= at_ms
            && e.finished_ms >= at_ms
            && !matches!(
                e.status,
                Status::Missed | Status::SkippedOverlap | Status::Excluded
            )
    });
    if let Some(r) = ended {
        let e = &r.entry;
        return Some(describe(
            &e.run_id,
            e.tick_ms,
            &e.replica,
            e.fence,
            e.started_ms,
        ));
    }
    records
        .running
        .iter()
        .find(|r| r.tick_ms < tick_ms && r.started_ms <= at_ms)
        .map(|r| describe(&r.run_id, r.tick_ms, &r.replica, r.fence, r.started_ms))
}

/// A `missed` record: nobody claimed the tick in time. Why nobody did
/// (no replica up, or Redis away from those that were), and why it was
/// not run late (the misfire policy).
fn missed_verdict(
    explanation: &mut Explanation,
    missed: &Recorded,
    records: &Records,
    definition: Option<&Job>,
) {
    explanation.verdict = Verdict::Missed;
    let recorded_at = missed.entry.started_ms;
    let late_ms = recorded_at.saturating_sub(explanation.tick_ms);
    let recorder = if missed.recorded_by.is_empty() {
        "a replica".to_string()
    } else {
        format!("{}{}", missed.recorded_by, host_text(&missed.host))
    };
    if let Some(run_on) = &missed.entry.no_matching_replica {
        explanation.summary = format!(
            "missed: no live replica had the tags {run_on} its run_on asks for; recorded as missed by {recorder} {} after the tick",
            span(late_ms)
        );
        explanation.reasons.push(reason(
            "no_matching_replica",
            format!(
                "no live replica had every tag of the job's run_on ({run_on}) at the tick, so none could claim it; {recorder} recorded it missed at {}",
                text_of(recorded_at)
            ),
            json!({
                "run_on": run_on.split(',').collect::<Vec<_>>(),
                "recorded_by": missed.recorded_by,
                "recorded_at_ms": recorded_at,
                "replicas": known_json(&explanation.replicas),
            }),
        ));
        return;
    }
    explanation.summary = format!(
        "missed: nobody claimed it in time; recorded as missed by {recorder} {} after the tick",
        span(late_ms)
    );
    let record = format!(
        "the missed record was written by {recorder} at {}, when its claim of a later tick moved past this one",
        text_of(recorded_at)
    );
    explanation
        .reasons
        .push(nobody_claimed(explanation, &record, Some(missed)));
    explanation.reasons.push(misfire_reason(
        explanation.tick_ms,
        missed,
        records,
        definition,
    ));
}

/// Why nobody claimed the tick: no replica was up, or those up could
/// not reach Redis. `record` says what the missed record holds, if any.
fn nobody_claimed(explanation: &Explanation, record: &str, missed: Option<&Recorded>) -> Reason {
    let up: Vec<&ReplicaSeen> = explanation
        .replicas
        .iter()
        .filter(|r| r.up_at_tick)
        .collect();
    let known = known_replicas(&explanation.replicas, explanation.now_ms);
    let evidence = json!({
        "recorded_by": missed.map(|m| m.recorded_by.clone()),
        "recorded_at_ms": missed.map(|m| m.entry.started_ms),
        "up_at_tick": up.iter().map(|r| r.id.clone()).collect::<Vec<_>>(),
        "replicas": known_json(&explanation.replicas),
    });
    if up.is_empty() {
        reason(
            "no_live_replica",
            format!(
                "no replica was running at the tick: none of the known replicas had started by then and been heard from since ({known}); {record}",
            ),
            evidence,
        )
    } else {
        let ids: Vec<&str> = up.iter().map(|r| r.id.as_str()).collect();
        reason(
            "redis_unreachable",
            format!(
                "{} {} running at the tick (started before it, heard from after it) but no claim of it reached Redis: Redis was unreachable from them, or too slow to answer in time; {record}",
                ids.join(", "),
                if ids.len() == 1 { "was" } else { "were" },
            ),
            evidence,
        )
    }
}

/// The replicas known, each with when it started and was last seen.
fn known_replicas(replicas: &[ReplicaSeen], now_ms: i64) -> String {
    if replicas.is_empty() {
        return "no replica has a heartbeat record".to_string();
    }
    replicas
        .iter()
        .map(|r| {
            format!(
                "{}{} started {}, last seen {} ago{}",
                r.id,
                host_text(&r.host),
                text_of(r.started_ms),
                span(now_ms.saturating_sub(r.last_seen_ms)),
                if r.alive { "" } else { ", dead" },
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn known_json(replicas: &[ReplicaSeen]) -> serde_json::Value {
    serde_json::to_value(replicas).unwrap_or_default()
}

/// Why a missed tick was not run late: the job's misfire policy, and
/// the run it was folded into if there was one.
fn misfire_reason(
    tick_ms: i64,
    missed: &Recorded,
    records: &Records,
    definition: Option<&Job>,
) -> Reason {
    let recorded_at = missed.entry.started_ms;
    let late_ms = recorded_at.saturating_sub(tick_ms);
    let instead = records.outcomes.iter().find(|r| {
        r.entry.trigger == Trigger::Misfire && r.entry.tick_ms > tick_ms && !r.entry.stale
    });
    let ran_instead = instead.map(|r| {
        json!({ "tick": text_of(r.entry.tick_ms), "replica": r.entry.replica, "status": r.entry.status, "fence": r.entry.fence })
    });
    let Some(def) = definition else {
        return reason(
            "misfire",
            "the job's misfire policy decided it was not run late (the policy is in the job table, not given)".to_string(),
            json!({ "late_ms": late_ms, "ran_instead": ran_instead }),
        );
    };
    let grace_ms = i64::try_from(def.misfire_grace.as_millis()).unwrap_or(i64::MAX);
    let grace = humantime::format_duration(def.misfire_grace);
    let text = match (def.misfire, instead) {
        (Misfire::Skip, _) => format!(
            "misfire = skip: a tick nobody claimed in time is not run late; the replicas went on {} after it",
            span(late_ms)
        ),
        (Misfire::RunOnce, Some(r)) => format!(
            "misfire = run_once: of the ticks missed, only the latest, {}, ran late (on {}, fence {}); this one was folded into it",
            text_of(r.entry.tick_ms),
            r.entry.replica,
            r.entry.fence
        ),
        (policy, _) if late_ms > grace_ms => format!(
            "misfire = {policy}: when a replica could claim again, {} after the tick, it was older than misfire_grace = {grace}, so it was not run late",
            span(late_ms)
        ),
        (policy, _) => format!(
            "misfire = {policy} with misfire_grace = {grace}: the tick was passed by a claim of a later tick {} after it, and not run late",
            span(late_ms)
        ),
    };
    reason(
        "misfire",
        text,
        json!({ "policy": def.misfire.as_str(), "grace_ms": grace_ms, "late_ms": late_ms, "recorded_at_ms": recorded_at, "ran_instead": ran_instead }),
    )
}

/// No outcome of the tick: paused (nothing is recorded for a paused
/// tick), passed with no record, or not claimed (yet).
fn no_record_verdict(explanation: &mut Explanation, records: &Records) {
    explanation.verdict = Verdict::NotRun;
    let tick_ms = explanation.tick_ms;
    if let Some((summary, paused)) = paused_at(records, tick_ms, explanation.now_ms) {
        explanation.summary = summary.to_string();
        explanation.reasons.push(paused);
        return;
    }
    let passed = records.last_tick.is_some_and(|mark| mark >= tick_ms);
    if passed {
        let mark = records.last_tick.unwrap_or_default();
        explanation.summary = "not run, and no outcome recorded for it".to_string();
        explanation.reasons.push(reason(
            "no_record",
            format!(
                "the job's high-water mark ({}) is past the tick, so it was claimed or passed, but no outcome of it is in the stream: the stream may have trimmed it (`[daemon] history`), or a manual run took it",
                text_of(mark)
            ),
            json!({ "high_water_mark_ms": mark }),
        ));
        return;
    }
    let age = explanation.now_ms.saturating_sub(tick_ms);
    let anyone_alive = explanation.replicas.iter().any(|r| r.alive);
    if age <= CLAIM_SLACK_MS && anyone_alive {
        explanation.summary = "due, and not claimed yet".to_string();
        explanation.reasons.push(reason(
            "not_claimed_yet",
            format!("the tick is {} old: a live replica claims it at its time, and the claim is on its way", span(age)),
            json!({ "high_water_mark_ms": records.last_tick }),
        ));
        return;
    }
    explanation.summary = "not run: nobody has claimed it".to_string();
    let record = format!(
        "no record of it yet: a missed tick is recorded when a replica claims a later one (the high-water mark is {})",
        records
            .last_tick
            .map_or_else(|| "unset".to_string(), text_of)
    );
    let why = nobody_claimed(explanation, &record, None);
    explanation.reasons.push(why);
}

/// A pause found in force at a tick: by whom, since when, until when, why.
struct PauseFound {
    by: String,
    at_ms: i64,
    until_ms: Option<i64>,
    reason: String,
    source: &'static str,
}

/// The newest pause or resume in `actions` at or before `tick_ms`, if it
/// is a pause that held the tick (its end, if it had one, after it).
fn paused_by_actions(actions: &[Action], tick_ms: i64, source: &'static str) -> Option<PauseFound> {
    let action = actions
        .iter()
        .find(|a| a.at_ms <= tick_ms && (a.action == "pause" || a.action == "resume"))?;
    if action.action != "pause" || action.until_ms.is_some_and(|until| until <= tick_ms) {
        return None;
    }
    Some(PauseFound {
        by: action.who.clone(),
        at_ms: action.at_ms,
        until_ms: action.until_ms,
        reason: action.reason.clone(),
        source,
    })
}

/// The job's pause in force at the tick: the state's pause if it began by
/// then and had not ended (its time is when the pause took effect), else
/// the newest pause or resume action at or before the tick.
fn job_paused_at(records: &Records, tick_ms: i64) -> Option<PauseFound> {
    match &records.pause {
        Some(p) if p.at_ms.is_some_and(|at| at <= tick_ms) && p.holds_at(tick_ms) => {
            Some(PauseFound {
                by: p.by.clone().unwrap_or_default(),
                at_ms: p.at_ms.unwrap_or_default(),
                until_ms: p.until_ms,
                reason: p.reason.clone().unwrap_or_default(),
                source: "state",
            })
        }
        _ => paused_by_actions(&records.actions, tick_ms, "actions"),
    }
}

/// The cluster's pause (`pause --all`) in force at the tick, from its
/// record or its actions.
fn cluster_paused_at(records: &Records, tick_ms: i64) -> Option<PauseFound> {
    match &records.cluster_pause {
        Some(p) if p.paused && p.at_ms <= tick_ms && p.holds(tick_ms) => Some(PauseFound {
            by: p.by.clone(),
            at_ms: p.at_ms,
            until_ms: p.until_ms,
            reason: crate::inert::escape(&p.reason).into_owned(),
            source: "cluster",
        }),
        _ => paused_by_actions(&records.cluster_actions, tick_ms, "cluster_actions"),
    }
}

/// The pause in force at the tick, the job's own first, else the
/// cluster's: who paused it, when, until when and why.
fn paused_at(records: &Records, tick_ms: i64, now_ms: i64) -> Option<(&'static str, Reason)> {
    let (found, what, summary) = match job_paused_at(records, tick_ms) {
        Some(found) => (found, "the job", "not run: the job was paused"),
        None => (
            cluster_paused_at(records, tick_ms)?,
            "the whole cluster (pause --all)",
            "not run: the cluster was paused",
        ),
    };
    let still = match found.source {
        "state" => "it is still paused (cronlease resume to go on)",
        "cluster" => "the cluster is still paused (cronlease resume --all to go on)",
        _ => "it has been resumed since",
    };
    let still = match found.until_ms {
        Some(until) if until > now_ms && (found.source == "state" || found.source == "cluster") => {
            format!("{still}; it ends by itself at {}", text_of(until))
        }
        Some(until) => format!("the pause ended at {}", text_of(until)),
        None => still.to_string(),
    };
    let until = found
        .until_ms
        .map(|until| format!(" until {}", text_of(until)))
        .unwrap_or_else(|| " until resumed".to_string());
    let why = if found.reason.is_empty() {
        String::new()
    } else {
        format!(" (reason: {})", found.reason)
    };
    Some((
        summary,
        reason(
            "paused",
            format!(
                "{what} was paused by {} at {}{until}{why}: a paused job's ticks are passed without running and are not caught up on resume; {still}",
                if found.by.is_empty() {
                    "someone unrecorded"
                } else {
                    &found.by
                },
                text_of(found.at_ms),
            ),
            json!({
                "by": found.by, "at_ms": found.at_ms, "until_ms": found.until_ms,
                "reason": found.reason, "source": found.source,
            }),
        ),
    ))
}

fn host_text(host: &str) -> String {
    if host.is_empty() {
        String::new()
    } else {
        format!(" (host {host})")
    }
}

/// The verdict for an instant the schedule does not fire at.
pub(super) fn not_a_tick(explanation: &mut Explanation, at: &Around, schedule: &Timetable) {
    explanation.verdict = Verdict::NotATick;
    if let Some(outside) = outside_window(explanation.tick_ms, schedule) {
        explanation.summary = "not a tick: outside the job's active window".to_string();
        explanation.reasons.push(outside);
        return;
    }
    let expression = schedule.expression();
    let zone = schedule.timezone().name();
    let previous = at.previous_ms.map(text_of);
    let next = at.next_ms.map(text_of);
    let mut text = format!(
        "{expression:?} in {zone} does not fire at {}; the ticks around it are {} and {}",
        explanation.tick,
        previous.as_deref().unwrap_or("none before"),
        next.as_deref().unwrap_or("none after"),
    );
    if explanation.tick_ms % 1000 != 0 {
        text.push_str(" (ticks fall on whole seconds)");
    }
    if let Some(dst) = &at.dst {
        text.push_str(&format!(
            "; a daylight-saving change is near ({} at {}): {}",
            dst.kind, dst.transition, dst.effect
        ));
    }
    explanation.summary = "not a tick of the schedule".to_string();
    explanation.reasons.push(reason(
        "not_a_tick",
        text,
        json!({ "previous_tick": previous, "next_tick": next, "dst": at.dst }),
    ));
    if at.next_ms.is_none() {
        explanation.reasons.push(ended_reason(schedule));
    }
}

/// The schedule has no tick after the one explained: its years passed.
pub(super) fn ended_reason(schedule: &Timetable) -> Reason {
    if let Some(until) = schedule.window().until
        && schedule
            .schedules()
            .iter()
            .any(|s| s.next_after(until - chrono::Duration::seconds(1)).is_some())
    {
        let until_ms = until.timestamp_millis();
        return reason(
            "window_ended",
            format!(
                "the job's active window ended at {} (active_until): its expressions fire on, but no tick of the job comes after it",
                text_of(until_ms)
            ),
            json!({ "active_until": text_of(until_ms) }),
        );
    }
    let last_year = schedule.last_year();
    let last = last_year.and_then(|year| last_tick(schedule, year));
    reason(
        "schedule_ended",
        format!(
            "the schedule has no further tick: its years have passed{}; its last tick was {}",
            last_year
                .map(|y| format!(" (its year field ends at {y})"))
                .unwrap_or_default(),
            last.map_or_else(|| "none".to_string(), text_of),
        ),
        json!({ "last_year": last_year, "previous_tick": last.map(text_of) }),
    )
}

/// Why an instant some expression fires at is no tick of the job: it
/// falls before `active_from` or at or after `active_until`. None when
/// no expression fires at it, or the window holds it.
fn outside_window(tick_ms: i64, schedule: &Timetable) -> Option<Reason> {
    let tick = chrono::DateTime::from_timestamp_millis(tick_ms)?;
    let window = schedule.window();
    if window.contains(tick) || schedule.firing_at(tick).is_empty() {
        return None;
    }
    let from = window.from.map(|t| text_of(t.timestamp_millis()));
    let until = window.until.map(|t| text_of(t.timestamp_millis()));
    let text = match (window.from, &from, &until) {
        (Some(start), Some(from), _) if tick < start => format!(
            "{:?} fires at {}, but the job's ticks start at {from} (active_from)",
            schedule.expression(),
            text_of(tick_ms)
        ),
        (_, _, Some(until)) => format!(
            "{:?} fires at {}, but the job's ticks end at {until} (active_until, not included)",
            schedule.expression(),
            text_of(tick_ms)
        ),
        _ => return None,
    };
    Some(reason(
        "outside_window",
        text,
        json!({ "active_from": from, "active_until": until }),
    ))
}

/// The job has started every run its `max_runs` allows: no tick after
/// the last of them runs.
pub(super) fn max_runs_reason(max_runs: u32, runs_started: u64) -> Reason {
    reason(
        "max_runs_reached",
        format!(
            "the job has started {runs_started} runs of its schedule and max_runs is {max_runs}: its later ticks are not claimed, and each replica's loop for it has ended; raise max_runs to let it run more"
        ),
        json!({ "max_runs": max_runs, "runs_started": runs_started }),
    )
}

/// Replicas whose definition of the job differs from `reference`'s.
pub(super) fn drift_reason(drifted: &[String], reference: &str) -> Reason {
    reason(
        "config_drift",
        format!(
            "replicas disagree on this job: {} hold a definition that differs from {reference} (schedule, time zone or settings), so they may claim other ticks or run them otherwise; give every replica the same table and reload it",
            drifted.join(", ")
        ),
        json!({ "replicas": drifted, "expected": reference }),
    )
}
