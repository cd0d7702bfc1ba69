//! A job's state hash and its runs in flight as the operator reads them
//! (`status`, the dashboard, `trigger`): every field by the name the
//! scripts write it under, here beside them and nowhere else, parsed into
//! types. A value cronlease never writes is evidence, not data: named in a
//! warning and taken as absent.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Store, StoreError};
use crate::outcome::Status;

/// The state fields that hold numbers.
const NUMBERS: [&str; 13] = [
    "last_tick",
    "runs_started",
    "paused_until_ms",
    "fence",
    "missed_total",
    "missed_until",
    "paused_at_ms",
    "outcome_tick",
    "outcome_fence",
    "outcome_duration_ms",
    "outcome_finished_ms",
    "backfill_queued",
    "backfill_concurrency",
];

/// What a job's state hash says, for operators.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobState {
    /// Paused, by whom and when (Redis ms); None when not paused.
    pub pause: Option<Pause>,
    /// The last outcome recorded, if there is one.
    pub last_outcome: Option<LastOutcome>,
    /// Ticks nobody claimed, recorded as `missed` (ever, for this job).
    pub missed_ticks: u64,
    /// What a replica found that no honest writer puts there.
    pub needs_repair: Option<Repair>,
    /// Runs of the schedule started while the job had `max_runs`.
    pub runs_started: u64,
    /// Backfill ticks queued since the job's queue was last empty (the
    /// total of "37 of 100 ticks left"); 0 when none is queued.
    pub backfill_queued: u64,
}

/// Who paused a job, when, until when and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pause {
    /// `user@host` of the operator.
    pub by: Option<String>,
    /// Redis ms.
    pub at_ms: Option<i64>,
    /// Redis ms the pause ends at by itself; None: until resumed.
    pub until_ms: Option<i64>,
    /// Why, when the operator said.
    pub reason: Option<String>,
}

impl Pause {
    /// Whether the pause still holds at Redis time `now_ms` (a timed pause
    /// whose end has come is over, even before a claim or a sweep
    /// recorded its end).
    pub fn holds_at(&self, now_ms: i64) -> bool {
        self.until_ms.is_none_or(|until| now_ms < until)
    }
}

/// A run in flight, from the job's `running` hash.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct RunningStatus {
    /// The run's id.
    pub run_id: String,
    /// The replica running it.
    pub replica: String,
    /// Its tick (Unix ms).
    pub tick_ms: i64,
    /// Its fence.
    pub fence: u64,
    /// When it started (Redis ms).
    pub started_ms: i64,
    /// Who asked for it to stop (`cronlease kill`), while its holder has
    /// not stopped it yet (control characters escaped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kill_asked_by: Option<String>,
}

/// The last outcome a job's state hash records.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct LastOutcome {
    /// How the run ended.
    pub status: Status,
    /// Its tick (Unix ms).
    pub tick_ms: i64,
    /// The replica that ran it.
    pub replica: String,
    /// Its fence.
    pub fence: u64,
    /// How long it ran.
    pub duration_ms: i64,
    /// When it finished (Redis ms).
    pub finished_ms: i64,
    /// A `killed` run: who asked (control characters escaped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed_by: Option<String>,
}

/// A finding in a job's state: a `field` whose `value` no honest writer
/// produces (`last_tick`, `fence`: what a claim replaced; `running`: an
/// entry a sweep quarantined, by run id), found at `at_ms` (Redis time).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct Repair {
    /// The field.
    pub field: String,
    /// Its value, escaped for a terminal or a page.
    pub value: String,
    /// When it was found (Redis ms), if a replica recorded it.
    pub at_ms: Option<i64>,
}

impl Store {
    /// `job`'s state hash, parsed; unreadable fields named in warnings.
    pub async fn job_state(&self, job: &str) -> Result<JobState, StoreError> {
        let state: BTreeMap<String, String> = self
            .hash(&self.keys.state(job))
            .await?
            .into_iter()
            .collect();
        Ok(JobState::parse(job, &state))
    }

    /// `job`'s runs in flight, oldest first.
    pub async fn running_runs(&self, job: &str) -> Result<Vec<RunningStatus>, StoreError> {
        Ok(runs_in_flight(&self.hash(&self.keys.running(job)).await?))
    }
}

impl JobState {
    /// The state in `state` (field → value) of `job`.
    pub fn parse(job: &str, state: &BTreeMap<String, String>) -> JobState {
        warn_unreadable(job, state);
        let int = |field: &str| state.get(field).and_then(|v| v.parse::<i64>().ok());
        JobState {
            pause: state
                .get("paused")
                .is_some_and(|p| p == "1")
                .then(|| Pause {
                    by: state.get("paused_by").cloned(),
                    at_ms: int("paused_at_ms"),
                    until_ms: int("paused_until_ms"),
                    reason: state
                        .get("paused_reason")
                        .map(|r| crate::inert::escape(r).into_owned()),
                }),
            last_outcome: last_outcome(state),
            missed_ticks: int("missed_total").unwrap_or(0).max(0) as u64,
            needs_repair: needs_repair(state),
            runs_started: int("runs_started").unwrap_or(0).max(0) as u64,
            backfill_queued: int("backfill_queued").unwrap_or(0).max(0) as u64,
        }
    }
}

/// The finding a claim or a sweep recorded in the job's state, or a
/// high-water mark or fence that is not a number (which the claim refuses
/// to guess past).
fn needs_repair(state: &BTreeMap<String, String>) -> Option<Repair> {
    let text = |field: &str| {
        state
            .get(field)
            .map(|v| crate::inert::escape(v).into_owned())
    };
    if let Some(field) = text("repair_field") {
        return Some(Repair {
            field,
            value: text("repair_value").unwrap_or_default(),
            at_ms: state.get("repair_at").and_then(|v| v.parse().ok()),
        });
    }
    ["last_tick", "fence"].into_iter().find_map(|field| {
        let value = state.get(field)?;
        value.parse::<i64>().is_err().then(|| Repair {
            field: field.to_string(),
            value: crate::inert::escape(value).into_owned(),
            at_ms: None,
        })
    })
}

/// Names each field of a job's state hash that holds what cronlease never
/// writes there (the report shows it as absent or zero).
fn warn_unreadable(job: &str, state: &BTreeMap<String, String>) {
    for field in NUMBERS {
        if let Some(value) = state.get(field)
            && value.parse::<i64>().is_err()
        {
            tracing::warn!(job, field, value = %value, "unreadable number in the job's state hash in Redis; shown as absent");
        }
    }
    if let Some(value) = state.get("paused")
        && value != "0"
        && value != "1"
    {
        tracing::warn!(job, field = "paused", value = %value, "unreadable pause flag in the job's state hash in Redis; shown as not paused");
    }
}

/// The job's last outcome as its state hash records it, if it has one; a
/// status that is not one of ours is named in a warning and left out.
fn last_outcome(state: &BTreeMap<String, String>) -> Option<LastOutcome> {
    let int = |field: &str| state.get(field).and_then(|v| v.parse::<i64>().ok());
    let text = state.get("outcome_status")?;
    let Some(status) = Status::parse(text) else {
        tracing::warn!(status = %text, "unreadable last outcome in the job's state hash (unknown status); left out");
        return None;
    };
    Some(LastOutcome {
        status,
        tick_ms: int("outcome_tick").unwrap_or(0),
        replica: state.get("outcome_replica").cloned().unwrap_or_default(),
        fence: int("outcome_fence").unwrap_or(0).max(0) as u64,
        duration_ms: int("outcome_duration_ms").unwrap_or(0),
        finished_ms: int("outcome_finished_ms").unwrap_or(0),
        killed_by: state
            .get("outcome_killed_by")
            .filter(|who| status == Status::Killed && !who.is_empty())
            .map(|who| crate::inert::escape(who).into_owned()),
    })
}

/// The job's `running` hash (run id → JSON entry), oldest run first; an
/// entry that does not parse shows as zeros.
fn runs_in_flight(running: &[(String, String)]) -> Vec<RunningStatus> {
    let mut runs: Vec<RunningStatus> = running
        .iter()
        .map(|(run_id, raw)| {
            let entry: serde_json::Value = serde_json::from_str(raw).unwrap_or_default();
            RunningStatus {
                run_id: run_id.clone(),
                replica: entry["replica"].as_str().unwrap_or_default().to_string(),
                tick_ms: entry["tick"].as_i64().unwrap_or(0),
                fence: entry["fence"].as_u64().unwrap_or(0),
                started_ms: entry["started"].as_i64().unwrap_or(0),
                kill_asked_by: entry["kill"]
                    .as_str()
                    .map(|who| crate::inert::escape(who).into_owned()),
            }
        })
        .collect();
    runs.sort_by_key(|r| r.started_ms);
    runs
}
