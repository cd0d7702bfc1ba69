//! `cronlease backfill`: the ticks of a job's schedule in a range, planned
//! against what Redis holds (backfill_plan.lua: which ran, which are to
//! run, which are the schedule's own), queued for the replicas, and
//! followed until each queued tick has an outcome. Nothing here runs a
//! job: the replicas take the queued ticks (`daemon/backfill.rs`).

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::DateTime;
use serde::Serialize;

use super::history::{HistoryEntry, OutputTail, history_entry};
use super::{OperatorError, record, rfc3339};
use crate::calendar::Exclusion;
use crate::config::Job;
use crate::outcome::Trigger;
use crate::store::{PlanMode, PlanRequest, SkipReason, Store};

/// The most ticks one backfill covers: a longer range is refused (split
/// it), so one plan script call stays short.
pub const MAX_BACKFILL_TICKS: usize = 10_000;

/// Why a backfill was refused before anything was read or queued.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BackfillError {
    #[error("--from {from} is after --to {to}: nothing to backfill")]
    Reversed { from: String, to: String },
    #[error("job {0:?} has no schedule (it only follows other jobs): it has no ticks to backfill")]
    NoSchedule(String),
    #[error(
        "the range holds more than {MAX_BACKFILL_TICKS} ticks of job {job:?} (the first past the bound: {first_past}): backfill it in shorter ranges"
    )]
    TooMany { job: String, first_past: String },
    #[error("--concurrency must be at least 1")]
    NoConcurrency,
    #[error(
        "job {0:?} is a broadcast job (mode = \"every_replica\"): each replica keeps its own ticks, and a backfill's ticks would run on one replica each"
    )]
    Broadcast(String),
}

/// The ticks of a backfill's range: those it may run, and those the job's
/// calendars leave out (with why), each ascending.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Candidates {
    pub run: Vec<i64>,
    pub excluded: Vec<(i64, Exclusion)>,
}

/// The one decision of which instants of [`from_ms`, `to_ms`] are
/// candidates of a backfill of `job`: its ticks ([`Job::next_after`]:
/// every schedule the job has, inside its active window), ascending, less
/// those its calendars leave out ([`Job::excluded_by`]), which are listed
/// apart. More than [`MAX_BACKFILL_TICKS`] ticks is an error.
pub fn backfill_candidates(
    job: &Job,
    from_ms: i64,
    to_ms: i64,
) -> Result<Candidates, BackfillError> {
    let to_text = |ms: i64| rfc3339(DateTime::from_timestamp_millis(ms).unwrap_or_default());
    if from_ms > to_ms {
        return Err(BackfillError::Reversed {
            from: to_text(from_ms),
            to: to_text(to_ms),
        });
    }
    if job.schedule.is_none() {
        return Err(BackfillError::NoSchedule(job.name.clone()));
    }
    let mut candidates = Candidates::default();
    let mut seen = 0;
    let mut cursor = DateTime::from_timestamp_millis(from_ms.saturating_sub(1)).unwrap_or_default();
    while let Some(tick) = job.next_after(cursor) {
        let ms = tick.timestamp_millis();
        if ms > to_ms {
            break;
        }
        if seen == MAX_BACKFILL_TICKS {
            return Err(BackfillError::TooMany {
                job: job.name.clone(),
                first_past: to_text(ms),
            });
        }
        seen += 1;
        match job.excluded_by(ms) {
            Some(exclusion) => candidates.excluded.push((ms, exclusion)),
            None => candidates.run.push(ms),
        }
        cursor = tick;
    }
    Ok(candidates)
}

/// A tick of the range the job's calendars leave out: not run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackfillExcluded {
    pub tick_ms: i64,
    pub tick: String,
    /// `exclude` or `only`.
    pub rule: &'static str,
    /// The calendar (for `only`, the job's `only` calendars).
    pub calendar: String,
}

/// A tick as the report shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackfillTick {
    pub tick_ms: i64,
    pub tick: String,
}

fn tick_of(ms: i64) -> BackfillTick {
    BackfillTick {
        tick_ms: ms,
        tick: rfc3339(DateTime::from_timestamp_millis(ms).unwrap_or_default()),
    }
}

/// A tick left out because it ran, runs or is queued.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackfillSkipped {
    pub tick_ms: i64,
    pub tick: String,
    pub why: SkipReason,
    /// Its outcome's status, or `running`, `rerun`, `backfill`, `queued`.
    pub status: String,
    /// Its run's id (a queued tick: the backfill's id).
    pub run_id: String,
}

/// What a backfill decided (also the first line of `backfill --json`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct BackfillReport {
    pub job: String,
    /// The backfill's id, kept with each tick it queued.
    pub id: String,
    pub from: String,
    pub to: String,
    /// Nothing was queued (`--dry-run`).
    pub dry_run: bool,
    /// The job's high-water mark: later ticks are the schedule's.
    pub last_tick: Option<String>,
    pub paused: bool,
    /// Ticks queued (with `--dry-run`: that would be).
    pub to_run: Vec<BackfillTick>,
    pub skipped: Vec<BackfillSkipped>,
    /// Ticks the job's calendars leave out: not run.
    pub excluded: Vec<BackfillExcluded>,
    /// Ticks later than the high-water mark, left to the schedule.
    pub later: Vec<BackfillTick>,
}

/// What `backfill` is asked to do.
#[derive(Debug, Clone)]
pub struct BackfillRequest<'a> {
    pub job: &'a Job,
    pub from_ms: i64,
    pub to_ms: i64,
    pub concurrency: u32,
    pub mode: PlanMode,
    /// `user@host` ([`super::operator_identity`]).
    pub who: &'a str,
}

/// Plans a backfill and, unless a dry run, queues its ticks and records it
/// in the job's actions.
pub async fn backfill(
    store: &Store,
    request: &BackfillRequest<'_>,
) -> Result<BackfillReport, BackfillRefusal> {
    if request.concurrency == 0 {
        return Err(BackfillError::NoConcurrency.into());
    }
    if request.job.mode == crate::config::Mode::EveryReplica {
        return Err(BackfillError::Broadcast(request.job.name.clone()).into());
    }
    let candidates = backfill_candidates(request.job, request.from_ms, request.to_ms)?;
    let ticks = candidates.run;
    let job = request.job.name.as_str();
    let id = uuid::Uuid::new_v4().to_string();
    let plan = store
        .backfill_plan(&PlanRequest {
            job,
            id: &id,
            concurrency: request.concurrency,
            mode: request.mode,
            ticks: &ticks,
        })
        .await
        .map_err(OperatorError::from)?;
    let paused = store
        .job_state(job)
        .await
        .map_err(OperatorError::from)?
        .pause
        .is_some();
    let report = BackfillReport {
        job: job.to_string(),
        from: tick_of(request.from_ms).tick,
        to: tick_of(request.to_ms).tick,
        dry_run: request.mode == PlanMode::DryRun,
        last_tick: plan.last_tick_ms.map(|ms| tick_of(ms).tick),
        paused,
        to_run: plan.to_run.iter().copied().map(tick_of).collect(),
        skipped: plan
            .skipped
            .into_iter()
            .map(|s| BackfillSkipped {
                tick: tick_of(s.tick_ms).tick,
                tick_ms: s.tick_ms,
                why: s.why,
                status: s.status,
                run_id: s.run_id,
            })
            .collect(),
        later: plan.later.iter().copied().map(tick_of).collect(),
        excluded: candidates
            .excluded
            .into_iter()
            .map(|(ms, exclusion)| BackfillExcluded {
                tick: tick_of(ms).tick,
                tick_ms: ms,
                rule: exclusion.rule.as_str(),
                calendar: exclusion.calendar,
            })
            .collect(),
        id,
    };
    if request.mode == PlanMode::Queue {
        let detail = format!(
            "{} ticks queued of {}..{} ({} already ran, {} left out by calendars, {} left to the schedule), backfill {}",
            report.to_run.len(),
            report.from,
            report.to,
            report.skipped.len(),
            report.excluded.len(),
            report.later.len(),
            report.id
        );
        record(store, job, "backfill", request.who, &detail).await;
    }
    Ok(report)
}

/// A refused backfill: bad input, or what the operator side refuses.
#[derive(Debug, thiserror::Error)]
pub enum BackfillRefusal {
    #[error(transparent)]
    Input(#[from] BackfillError),
    #[error(transparent)]
    Operator(#[from] OperatorError),
}

/// Follows the outcomes of the ticks `report` queued: calls `landed` with
/// each as it is recorded (its current `backfill` outcome), until every
/// tick has one or `timeout` passes; returns the ticks still without one.
/// Reads the runs stream from `since_ms` (Redis time before the plan).
pub async fn follow_backfill(
    store: &Store,
    report: &BackfillReport,
    since_ms: i64,
    timeout: Duration,
    mut landed: impl FnMut(&HistoryEntry),
) -> Result<Vec<i64>, OperatorError> {
    let mut waiting: BTreeSet<i64> = report.to_run.iter().map(|t| t.tick_ms).collect();
    let mut after = format!("{}-0", since_ms.max(1) - 1);
    let deadline = tokio::time::Instant::now() + timeout;
    while !waiting.is_empty() {
        let entries = store.outcomes_after(&report.job, &after, 500).await?;
        let full = entries.len() == 500;
        for (id, fields) in entries {
            after.clone_from(&id);
            let Ok(entry) = history_entry(id, fields, OutputTail::Omit) else {
                continue;
            };
            if entry.trigger == Trigger::Backfill && !entry.stale && waiting.remove(&entry.tick_ms)
            {
                landed(&entry);
            }
        }
        if full {
            continue;
        }
        if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok(waiting.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn job(schedule: &str) -> Job {
        let text = format!(
            "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n[jobs.j]\nschedule = \"{schedule}\"\ncommand = [\"true\"]\n"
        );
        let config = Config::parse(&text, std::path::Path::new("/etc/cronlease/jobs.toml"))
            .expect("a valid table");
        config.jobs["j"].clone()
    }

    fn ms(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .expect("RFC 3339")
            .timestamp_millis()
    }

    #[test]
    fn the_candidates_are_the_ticks_of_the_range_both_ends_included() {
        let j = job("*/10 * * * * *");
        let ticks = backfill_candidates(&j, ms("2026-01-01T00:00:00Z"), ms("2026-01-01T00:00:30Z"))
            .expect("a short range");
        assert_eq!(ticks.run.len(), 4);
        assert_eq!(ticks.run[0], ms("2026-01-01T00:00:00Z"));
        assert_eq!(ticks.run[3], ms("2026-01-01T00:00:30Z"));
        let none = backfill_candidates(&j, ms("2026-01-01T00:00:01Z"), ms("2026-01-01T00:00:09Z"))
            .expect("a range without ticks");
        assert!(none.run.is_empty());
    }

    #[test]
    fn ticks_the_calendars_leave_out_are_listed_apart() {
        let text = "[redis]\nurl = \"redis://127.0.0.1:1\"\n\n\
                    [calendars.holidays]\ndates = [\"2026-01-02\"]\n\n\
                    [jobs.j]\nschedule = [\"0 12 * * *\", \"0 20 * * *\"]\nexclude = [\"holidays\"]\ncommand = [\"true\"]\n";
        let config = Config::parse(text, std::path::Path::new("/etc/cronlease/jobs.toml"))
            .expect("a valid table");
        let candidates = backfill_candidates(
            &config.jobs["j"],
            ms("2026-01-01T00:00:00Z"),
            ms("2026-01-03T23:00:00Z"),
        )
        .expect("a short range");
        assert_eq!(
            candidates.run,
            [
                ms("2026-01-01T12:00:00Z"),
                ms("2026-01-01T20:00:00Z"),
                ms("2026-01-03T12:00:00Z"),
                ms("2026-01-03T20:00:00Z"),
            ]
        );
        let excluded: Vec<(i64, String)> = candidates
            .excluded
            .into_iter()
            .map(|(tick, e)| (tick, e.calendar))
            .collect();
        assert_eq!(
            excluded,
            [
                (ms("2026-01-02T12:00:00Z"), "holidays".to_string()),
                (ms("2026-01-02T20:00:00Z"), "holidays".to_string()),
            ]
        );
    }

    #[test]
    fn a_reversed_or_too_long_range_is_refused() {
        let j = job("* * * * * *");
        let from = ms("2026-01-01T00:00:00Z");
        assert!(matches!(
            backfill_candidates(&j, from + 1, from),
            Err(BackfillError::Reversed { .. })
        ));
        let at_bound = backfill_candidates(&j, from, from + 9_999_000).expect("10,000 ticks");
        assert_eq!(at_bound.run.len(), MAX_BACKFILL_TICKS);
        assert_eq!(
            backfill_candidates(&j, from, from + 10_000_000),
            Err(BackfillError::TooMany {
                job: "j".to_string(),
                first_past: "2026-01-01T02:46:40Z".to_string()
            })
        );
    }
}
