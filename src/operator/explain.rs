//! `cronlease explain`: what became of one tick of a job, and why, from
//! the records in Redis and the job table. A verdict first, then the
//! evidence (Temporal's schedule audit is the shape).
//!
//! The command line and the dashboard's explain page both call
//! [`explain`] and render the one [`Explanation`] it returns: text
//! (`explain/text.rs`), JSON (the value itself, `explain/report.rs`, its
//! shape in the guide's "Why didn't my job run?") and HTML. Nothing here
//! writes to Redis.
//!
//! The children, each importing only those after it: `verdicts` (which
//! record decides, and the reasons), `records` (the reads), `calendar`
//! (the schedule around a tick), `text`, and `report` (the value).
//!
//! The records it reads: the outcome stream (an outcome of the tick, a
//! `skipped_overlap`, a `missed` and who recorded it when), the runs in
//! flight, the job's high-water mark and pause, the operator actions (who
//! paused, when, from where), the replicas' heartbeats (who was up at the
//! tick) and their definition hashes (drift). What no record says is
//! inferred and worded as such.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use chrono::DateTime;
use serde_json::json;

use super::status::{drift, read_replicas};
use super::{OperatorError, OutputTail, ReplicaStatus, history};
use crate::config::Job;
use crate::schedule::Timetable;
use crate::store::{Store, StoreError};

mod calendar;
mod records;
mod report;
mod text;
mod verdicts;

use calendar::{Around, IsTick, around, latest_due, next_after_ms};
use records::Records;
pub(crate) use report::span;
use report::{CausedRun, ChainFacts, ReplicaSeen, ScheduleFacts, TickChoice};
pub use report::{Explanation, Verdict};
use report::{reason, text_of};
pub use text::render_explanation;

/// How many close names an unknown job's error suggests.
const CLOSE_NAMES: usize = 5;

/// Failures of `explain`.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// The job is neither in the job table nor known to Redis.
    #[error("unknown job {job:?}: {}", close_names_text(.close))]
    UnknownJob { job: String, close: Vec<String> },
    /// No tick was given and there is no schedule to pick one from.
    #[error(
        "job {0:?}: there is no schedule to pick its latest tick from (without the job table, --config, or for a job that only follows others); give --tick"
    )]
    NoSchedule(String),
    #[error(transparent)]
    Operator(#[from] OperatorError),
}

impl From<StoreError> for ExplainError {
    fn from(e: StoreError) -> ExplainError {
        ExplainError::Operator(e.into())
    }
}

fn close_names_text(close: &[String]) -> String {
    if close.is_empty() {
        "not in the job table and nothing recorded for it in Redis".to_string()
    } else {
        format!(
            "not in the job table and nothing recorded for it in Redis (did you mean {}?)",
            close
                .iter()
                .map(|n| format!("{n:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// The valid forms of a tick, for error messages.
pub const TICK_FORMS: &str = "expected RFC 3339 (e.g. 2026-03-29T02:00:00Z or 2026-03-29T04:00:00+02:00) or milliseconds since the epoch (as CRONLEASE_TICK_MS and history --json's tick_ms)";

/// Reads a tick as `--tick` and the dashboard's `?tick=` take it: RFC
/// 3339, or milliseconds since the epoch; anything else is refused with
/// the forms that are valid.
pub fn parse_tick(text: &str) -> Result<i64, String> {
    let text = text.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<i64>()
            .ok()
            .filter(|ms| DateTime::from_timestamp_millis(*ms).is_some())
            .ok_or_else(|| format!("invalid tick {text:?}: out of range; {TICK_FORMS}"));
    }
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| {
            format!(
                "invalid tick {:?}: {e}; {TICK_FORMS}",
                crate::inert::escape(text)
            )
        })
}

/// Explains tick `tick` of `job` (by default the latest due by Redis
/// time), with its definition from `jobs` (a config's, or a running
/// replica's table) when there is one.
pub async fn explain<J: Borrow<Job>>(
    store: &Store,
    jobs: Option<&BTreeMap<String, J>>,
    job: &str,
    tick: Option<i64>,
) -> Result<Explanation, ExplainError> {
    let now_ms = store.server_time_ms().await?;
    let replicas = read_replicas(store, now_ms).await?;
    let definition = jobs.and_then(|table| table.get(job)).map(Borrow::borrow);
    require_known(store, jobs, job, &replicas).await?;
    let schedule = definition.and_then(|def| def.schedule.as_ref());
    let (tick_ms, tick_choice) = match (tick, schedule) {
        (Some(tick), _) => (tick, TickChoice::Given),
        (None, Some(schedule)) => match latest_due(schedule, now_ms) {
            Some(tick) => (tick, TickChoice::LatestDue),
            None => (
                next_after_ms(schedule, now_ms).unwrap_or(now_ms),
                TickChoice::First,
            ),
        },
        (None, _) => return Err(ExplainError::NoSchedule(job.to_string())),
    };
    let calendar = schedule.map(|schedule| around(schedule, tick_ms));
    let mut explanation = Explanation {
        job: job.to_string(),
        tick: text_of(tick_ms),
        tick_ms,
        tick_choice,
        now_ms,
        verdict: Verdict::NotRun,
        summary: String::new(),
        schedule: schedule
            .zip(calendar.as_ref())
            .map(|(schedule, at)| schedule_facts(schedule, at, tick_ms)),
        run: None,
        chain: definition.and_then(chain_of),
        reasons: Vec::new(),
        replicas: replicas.iter().map(|r| seen(r, tick_ms)).collect(),
    };
    if let (Some(at), Some(schedule)) = (&calendar, schedule)
        && at.is_tick == IsTick::No
    {
        verdicts::not_a_tick(&mut explanation, at, schedule);
        return Ok(explanation);
    }
    if tick_ms > now_ms {
        explanation.verdict = Verdict::NotYetDue;
        explanation.summary = format!("not yet due: its time comes in {}", span(tick_ms - now_ms));
        explanation.reasons.push(reason(
            "not_yet_due",
            format!(
                "the tick is {} ahead of Redis time, the clock every replica claims by",
                span(tick_ms - now_ms)
            ),
            json!({ "due_in_ms": tick_ms - now_ms }),
        ));
        calendar_reason(&mut explanation, definition);
        return Ok(explanation);
    }
    let records = Records::read(store, job, tick_ms).await?;
    verdicts::judge(&mut explanation, &records, definition);
    calendar_reason(&mut explanation, definition);
    max_runs_reason(store, &mut explanation, definition).await?;
    follow_chain(store, &mut explanation, &records).await?;
    drift_reason(&mut explanation, definition, &replicas);
    if let (Some(schedule), Some(at)) = (schedule, &calendar)
        && at.next_ms.is_none()
    {
        explanation.reasons.push(verdicts::ended_reason(schedule));
    }
    Ok(explanation)
}

/// A tick not run because the job has started its `max_runs` runs: that
/// reason first.
async fn max_runs_reason(
    store: &Store,
    explanation: &mut Explanation,
    definition: Option<&Job>,
) -> Result<(), ExplainError> {
    let Some(max_runs) = definition.and_then(|def| def.max_runs) else {
        return Ok(());
    };
    if explanation.verdict != Verdict::NotRun {
        return Ok(());
    }
    let runs_started = store.job_state(&explanation.job).await?.runs_started;
    if runs_started >= u64::from(max_runs) {
        explanation.summary = "not run: the job has started its max_runs runs".to_string();
        let why = verdicts::max_runs_reason(max_runs, runs_started);
        explanation.reasons.insert(0, why);
    }
    Ok(())
}

/// Replicas whose definition of the job differs from this job table's
/// (or, without one, from most replicas').
fn drift_reason(
    explanation: &mut Explanation,
    definition: Option<&Job>,
    replicas: &[ReplicaStatus],
) {
    let (hash, whose) = match definition {
        Some(def) => (Some(def.definition_hash()), "this job table's"),
        None => (None, "most replicas'"),
    };
    let drifted = drift(&explanation.job, hash, replicas);
    if !drifted.is_empty() {
        explanation
            .reasons
            .push(verdicts::drift_reason(&drifted, whose));
    }
}

/// When this job table's calendars leave the tick out and no record says
/// so (it is not due yet, or a replica with other calendars ran it), the
/// reason why it is not meant to run.
fn calendar_reason(explanation: &mut Explanation, definition: Option<&Job>) {
    if explanation.verdict == Verdict::Excluded {
        return;
    }
    if let Some(why) = definition.and_then(|d| d.excluded_by(explanation.tick_ms)) {
        explanation
            .reasons
            .push(verdicts::calendar_reason(&why, None));
    }
}

/// The job's upstreams and followers; None when it has neither.
fn chain_of(def: &Job) -> Option<ChainFacts> {
    let after = def
        .after
        .as_ref()
        .map(|a| a.upstreams.clone())
        .unwrap_or_default();
    let followers: Vec<String> = def.followers.iter().map(|f| f.job.clone()).collect();
    (!after.is_empty() || !followers.is_empty()).then_some(ChainFacts {
        after,
        followers,
        ..ChainFacts::default()
    })
}

/// What the tick's run followed (its outcome's upstream fields), and the
/// records of its followers that name it (read from the run's start on).
async fn follow_chain(
    store: &Store,
    explanation: &mut Explanation,
    records: &Records,
) -> Result<(), StoreError> {
    let (Some(run), Some(chain)) = (&explanation.run, explanation.chain.as_mut()) else {
        return Ok(());
    };
    chain.caused_by = records
        .outcomes
        .iter()
        .find(|r| r.entry.run_id == run.run_id)
        .and_then(|r| r.entry.upstream.clone());
    for follower in &chain.followers {
        let entries = store
            .history_since(follower, run.started_ms, FOLLOWER_RECORDS_READ)
            .await?;
        for (id, fields) in entries {
            let Ok(entry) = history::history_entry(id, fields, OutputTail::Omit) else {
                continue;
            };
            let caused = entry
                .upstream
                .as_ref()
                .is_some_and(|u| u.runs().iter().any(|r| r.run_id() == run.run_id));
            if caused && !entry.stale {
                chain.caused.push(CausedRun {
                    job: follower.clone(),
                    run_id: entry.run_id,
                    tick: entry.tick,
                    status: entry.status,
                });
            }
        }
    }
    Ok(())
}

/// The most records of each follower `explain` reads for the runs the
/// tick's run started.
const FOLLOWER_RECORDS_READ: usize = 1_000;

/// Fails unless `job` is in the table (or, without one, known to Redis),
/// naming the close names there are.
async fn require_known<J: Borrow<Job>>(
    store: &Store,
    jobs: Option<&BTreeMap<String, J>>,
    job: &str,
    replicas: &[ReplicaStatus],
) -> Result<(), ExplainError> {
    let names: Vec<String> = match jobs {
        Some(table) if table.contains_key(job) => return Ok(()),
        Some(table) => table.keys().cloned().collect(),
        None if store.job_exists(job).await? => return Ok(()),
        None => super::status::job_names::<Job>(None, replicas),
    };
    Err(ExplainError::UnknownJob {
        job: job.to_string(),
        close: close_names(job, &names),
    })
}

/// The names within a few edits of `name` (or containing it, or contained
/// in it), closest first.
pub fn close_names(name: &str, names: &[String]) -> Vec<String> {
    let lower = name.to_lowercase();
    let most = (name.chars().count() / 3).max(2);
    let mut close: Vec<(usize, &String)> = names
        .iter()
        .filter_map(|candidate| {
            let other = candidate.to_lowercase();
            let distance = strsim::levenshtein(&lower, &other);
            let related = other.contains(&lower) || lower.contains(&other);
            (distance <= most || related).then_some((distance, candidate))
        })
        .collect();
    close.sort();
    close
        .into_iter()
        .take(CLOSE_NAMES)
        .map(|(_, n)| n.clone())
        .collect()
}

fn schedule_facts(schedule: &Timetable, at: &Around, tick_ms: i64) -> ScheduleFacts {
    let zone = schedule.timezone();
    ScheduleFacts {
        expression: schedule.expression(),
        timezone: zone.name().to_string(),
        tick_local: zone.format_local(DateTime::from_timestamp_millis(tick_ms).unwrap_or_default()),
        previous_tick: at.previous_ms.map(text_of),
        next_tick: at.next_ms.map(text_of),
        dst: at.dst.clone(),
    }
}

fn seen(replica: &ReplicaStatus, tick_ms: i64) -> ReplicaSeen {
    ReplicaSeen {
        id: replica.id.clone(),
        host: replica.host.clone(),
        alive: replica.alive,
        started_ms: replica.started_ms,
        last_seen_ms: replica.last_seen_ms,
        up_at_tick: replica.started_ms <= tick_ms && replica.last_seen_ms >= tick_ms,
    }
}
