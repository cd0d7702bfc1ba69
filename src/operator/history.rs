//! What `history`, `trigger --wait` and the dashboard read of a job's
//! outcomes: the stream's entries as reports, each field checked (an entry
//! cronlease did not write is named and left out).

use std::collections::BTreeMap;

use std::time::Duration;

use chrono::DateTime;
use futures_util::{StreamExt as _, TryStreamExt as _};
use serde::Serialize;

use super::{OperatorError, READ_AHEAD, rfc3339};
use crate::calendar::CalendarRule;
use crate::config::Config;
use crate::outcome::{Status, Trigger, Upstream};
use crate::store::Store;

impl HistoryEntry {
    /// The status as `history` and the dashboard show it: an `excluded`
    /// tick with its calendar (`excluded (holidays-cn)`, `excluded
    /// (outside trading-days)`).
    pub fn status_text(&self) -> String {
        if let Some(who) = &self.killed_by {
            return format!("{} by {who}", self.status);
        }
        if let Some(run_on) = &self.no_matching_replica {
            return format!("{} (no replica with tags {run_on})", self.status);
        }
        if self.status == Status::SkippedCapacity {
            return match &self.group {
                Some(group) => format!("{} (group {group} full)", self.status),
                None => format!("{} (no replica had room)", self.status),
            };
        }
        match (&self.calendar, self.calendar_rule) {
            (Some(calendar), Some(CalendarRule::Only)) => {
                format!("{} (outside {calendar})", self.status)
            }
            (Some(calendar), _) => format!("{} ({calendar})", self.status),
            (None, _) => self.status.to_string(),
        }
    }
}

/// One outcome as `history` shows it (also its `--json` schema).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct HistoryEntry {
    pub id: String,
    pub run_id: String,
    pub tick_ms: i64,
    pub tick: String,
    pub status: Status,
    pub replica: String,
    pub fence: u64,
    /// When the run was claimed and when it ended, by the Redis clock as
    /// its replica estimated it, ms since the epoch (0 when not recorded).
    pub started_ms: i64,
    pub finished_ms: i64,
    pub duration_ms: i64,
    /// CPU time of the run's processes and their peak memory (see
    /// [`crate::outcome::Outcome`]), where the replica measured them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_kb: Option<u64>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub attempts: u32,
    pub trigger: Trigger,
    /// A follower's run: the upstream runs it followed and the chain's
    /// root tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    pub stale: bool,
    /// An `excluded` tick: the calendar that left it out (for `only`, the
    /// job's `only` calendars, comma-separated) and which setting did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calendar_rule: Option<CalendarRule>,
    /// A `missed` tick no live replica had the tags for (its record's
    /// `reason` is `no_matching_replica`): the job's `run_on` then,
    /// comma-separated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_matching_replica: Option<String>,
    /// The values of the run's parameters (`param.<name>` fields), by
    /// name; a field whose name or value no job could have is left out.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub params: BTreeMap<String, String>,
    /// A `killed` run: who asked (`cronlease kill`, the dashboard), its
    /// control characters escaped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub killed_by: Option<String>,
    /// A `skipped_capacity` tick: why (`capacity`: every replica had its
    /// `max_runs` in flight; `group`: the job's group had no slot free)
    /// and the group, escaped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HistoryReport {
    pub job: String,
    pub outcomes: Vec<HistoryEntry>,
    /// Stream entries that are not outcomes cronlease wrote (another
    /// writer, a bug, a partial restore): named and left out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<Unreadable>,
}

/// A stream entry `history` could not read, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Unreadable {
    pub id: String,
    pub reason: String,
}

/// Whether `history` shows each run's recorded output tail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputTail {
    Include,
    Omit,
}

/// One outcome stream entry; an error names what is wrong with it (a
/// status or trigger that is not one of ours).
pub(super) fn history_entry(
    id: String,
    fields: Vec<(String, String)>,
    output: OutputTail,
) -> Result<HistoryEntry, Unreadable> {
    let fields: BTreeMap<String, String> = fields.into_iter().collect();
    let text = |name: &str| fields.get(name).cloned().unwrap_or_default();
    let int = |name: &str| fields.get(name).and_then(|v| v.parse::<i64>().ok());
    let unreadable = |reason: String| Unreadable {
        id: id.clone(),
        reason,
    };
    let status = Status::parse(&text("status"))
        .ok_or_else(|| unreadable(format!("unknown status {:?}", text("status"))))?;
    numbers_read(&fields).map_err(unreadable)?;
    // Outcomes written before manual runs existed carry no trigger.
    let trigger = match fields.get("trigger") {
        None => Trigger::Schedule,
        Some(name) => {
            Trigger::parse(name).ok_or_else(|| unreadable(format!("unknown trigger {name:?}")))?
        }
    };
    let tick_ms = int("tick").unwrap_or(0);
    Ok(HistoryEntry {
        tick: rfc3339(DateTime::from_timestamp_millis(tick_ms).unwrap_or_default()),
        tick_ms,
        status,
        run_id: text("run_id"),
        replica: text("replica"),
        fence: int("fence").unwrap_or(0).max(0) as u64,
        started_ms: int("started_ms").unwrap_or(0),
        finished_ms: int("finished_ms").unwrap_or(0),
        duration_ms: int("duration_ms").unwrap_or(0),
        cpu_ms: int("cpu_ms").and_then(|v| u64::try_from(v).ok()),
        peak_memory_kb: int("peak_memory_kb").and_then(|v| u64::try_from(v).ok()),
        exit_code: int("exit_code").and_then(|v| i32::try_from(v).ok()),
        signal: int("signal").and_then(|v| i32::try_from(v).ok()),
        attempts: int("attempts")
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0),
        trigger,
        upstream: Upstream::from_fields(fields.iter().map(|(n, v)| (n.as_str(), v.as_str()))),
        stale: fields.get("stale").is_some_and(|s| s == "1"),
        calendar: fields
            .get("calendar")
            .filter(|_| status == Status::Excluded)
            .cloned(),
        calendar_rule: fields
            .get("calendar_rule")
            .filter(|_| status == Status::Excluded)
            .and_then(|rule| CalendarRule::parse(rule)),
        params: params(&id, &fields),
        no_matching_replica: no_matching_replica(status, &fields),
        killed_by: killed_by(status, &fields),
        reason: capacity_field(status, &fields, "reason"),
        group: capacity_field(status, &fields, "group"),
        output: (output == OutputTail::Include).then(|| text("output")),
        id,
    })
}

/// The numbers cronlease writes in an outcome: a tick always, the others
/// when present; else what is wrong.
fn numbers_read(fields: &BTreeMap<String, String>) -> Result<(), String> {
    if !fields.contains_key("tick") {
        return Err("no tick".to_string());
    }
    const NUMBERS: [&str; 10] = [
        "tick",
        "fence",
        "started_ms",
        "finished_ms",
        "duration_ms",
        "cpu_ms",
        "peak_memory_kb",
        "exit_code",
        "signal",
        "attempts",
    ];
    for name in NUMBERS {
        if let Some(value) = fields.get(name)
            && value.parse::<i64>().is_err()
        {
            return Err(format!("{name} {value:?} is not a number"));
        }
    }
    Ok(())
}

/// The `run_on` of a `missed` record whose reason is
/// `no_matching_replica` (`unplaced.lua`), comma-separated; none for any
/// other record, or when a tag is not one a job could name.
fn no_matching_replica(status: Status, fields: &BTreeMap<String, String>) -> Option<String> {
    if status != Status::Missed
        || fields.get("reason").map(String::as_str) != Some("no_matching_replica")
    {
        return None;
    }
    let run_on = fields.get("run_on").map(String::as_str).unwrap_or("");
    let tags: Vec<&str> = run_on.split(' ').filter(|t| !t.is_empty()).collect();
    if tags.iter().all(|t| crate::config::is_tag(t)) {
        Some(tags.join(","))
    } else {
        Some("?".to_string())
    }
}

/// A `skipped_capacity` outcome's field `name` (`reason`, `group`),
/// control characters escaped; none for any other status.
fn capacity_field(status: Status, fields: &BTreeMap<String, String>, name: &str) -> Option<String> {
    let value = fields.get(name)?;
    (status == Status::SkippedCapacity).then(|| crate::inert::escape(value).into_owned())
}

/// Who asked for a `killed` run to stop (its `killed_by`), control
/// characters escaped; none for any other status.
fn killed_by(status: Status, fields: &BTreeMap<String, String>) -> Option<String> {
    let who = fields.get("killed_by")?;
    (status == Status::Killed && !who.is_empty()).then(|| crate::inert::escape(who).into_owned())
}

/// The `param.<name>` fields of an outcome, those a job could have: a
/// name of `a-z 0-9 _`, a value of at most 1024 bytes without control
/// characters. Others are evidence of another writer: named in the log
/// (escaped) and left out.
fn params(id: &str, fields: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let prefix = crate::config::PARAM_FIELD_PREFIX;
    let mut params = BTreeMap::new();
    for (field, value) in fields.range(prefix.to_string()..) {
        let Some(name) = field.strip_prefix(prefix) else {
            break;
        };
        if crate::config::is_param_name(name) && crate::config::param_value_problem(value).is_none()
        {
            params.insert(name.to_string(), value.clone());
        } else {
            tracing::warn!(id, field = %crate::inert::escape(field), "a parameter of an outcome that no job could have; left out");
        }
    }
    params
}

/// Fails unless `job` is in the config or known to Redis.
pub async fn require_job(
    store: &Store,
    config: Option<&Config>,
    job: &str,
) -> Result<(), OperatorError> {
    if config.is_some_and(|c| c.jobs.contains_key(job)) {
        return Ok(());
    }
    if config.is_none() && store.job_exists(job).await? {
        return Ok(());
    }
    Err(OperatorError::UnknownJob(job.to_string()))
}

/// The newest `count` outcomes of `job`, newest first.
pub async fn history(
    store: &Store,
    job: &str,
    count: usize,
    output: OutputTail,
) -> Result<HistoryReport, OperatorError> {
    let entries = store.history(job, count).await?;
    Ok(history_report(job, entries, output))
}

/// The `count` outcomes of `job` recorded before the stream entry
/// `before` (an outcome's `id`, itself left out; `None`: the newest),
/// newest first: a page of the dashboard's history.
#[cfg_attr(
    not(feature = "dashboard"),
    allow(dead_code, reason = "read by the dashboard only")
)]
pub async fn history_page(
    store: &Store,
    job: &str,
    before: Option<&str>,
    count: usize,
    output: OutputTail,
) -> Result<HistoryReport, OperatorError> {
    let entries = match before {
        Some(before) => store.history_before(job, before, count).await?,
        None => store.history(job, count).await?,
    };
    Ok(history_report(job, entries, output))
}

/// The report of the stream `entries` of `job`, each read or named
/// unreadable.
fn history_report(
    job: &str,
    entries: Vec<(String, Vec<(String, String)>)>,
    output: OutputTail,
) -> HistoryReport {
    let mut report = HistoryReport {
        job: job.to_string(),
        outcomes: Vec::with_capacity(entries.len()),
        unreadable: Vec::new(),
    };
    for (id, fields) in entries {
        match history_entry(id, fields, output) {
            Ok(entry) => report.outcomes.push(entry),
            Err(bad) => {
                tracing::warn!(job, id = %bad.id, reason = %bad.reason, "unreadable outcome in the stream; left out");
                report.unreadable.push(bad);
            }
        }
    }
    report
}

/// The newest `count` outcomes of `job`, newest first, each with only
/// its status, tick, replica and fence read from Redis (what the
/// dashboard's outcome strips show): no output tail crosses the network.
/// Unreadable entries are left out with a warning, as `history` does.
#[cfg_attr(
    not(feature = "dashboard"),
    allow(dead_code, reason = "read by the dashboard only")
)]
pub async fn outcome_strip(
    store: &Store,
    job: &str,
    count: usize,
) -> Result<Vec<HistoryEntry>, OperatorError> {
    let entries = store
        .history_fields(
            job,
            count,
            &["status", "tick", "replica", "fence", "trigger"],
        )
        .await?;
    let mut strip = Vec::with_capacity(entries.len());
    for (id, fields) in entries {
        match history_entry(id, fields, OutputTail::Omit) {
            Ok(entry) => strip.push(entry),
            Err(bad) => {
                tracing::warn!(job, id = %bad.id, reason = %bad.reason, "unreadable outcome in the stream; left out");
            }
        }
    }
    Ok(strip)
}

/// The latest tick of a broadcast job (`mode = "every_replica"`) with an
/// outcome, and each replica's outcome of it, from its newest `count`
/// outcomes (records of no replica, `missed` ones, left out).
pub(super) async fn broadcast_tick(
    store: &Store,
    job: &str,
    count: usize,
) -> Result<Option<(i64, Vec<HistoryEntry>)>, OperatorError> {
    let entries = store
        .history_fields(
            job,
            count,
            &["status", "tick", "replica", "fence", "trigger"],
        )
        .await?;
    let outcomes: Vec<HistoryEntry> = entries
        .into_iter()
        .filter_map(|(id, fields)| history_entry(id, fields, OutputTail::Omit).ok())
        .filter(|entry| !entry.replica.is_empty())
        .collect();
    let Some(tick_ms) = outcomes.iter().map(|entry| entry.tick_ms).max() else {
        return Ok(None);
    };
    let mut of_tick: Vec<HistoryEntry> = outcomes
        .into_iter()
        .filter(|entry| entry.tick_ms == tick_ms)
        .collect();
    of_tick.sort_by(|a, b| a.replica.cmp(&b.replica));
    Ok(Some((tick_ms, of_tick)))
}

/// The outcomes each of `jobs` recorded since `since_ms` (by the Redis
/// time of their recording), its newest `per_job` at most, read
/// [`READ_AHEAD`] jobs at a time. Unreadable entries are left out with a
/// warning, as `history` does.
#[cfg_attr(
    not(feature = "dashboard"),
    allow(dead_code, reason = "read by the dashboard only")
)]
pub async fn runs_since(
    store: &Store,
    jobs: Vec<String>,
    since_ms: i64,
    per_job: usize,
) -> Result<Vec<(String, HistoryEntry)>, OperatorError> {
    let per_job: Vec<Vec<(String, HistoryEntry)>> = futures_util::stream::iter(jobs)
        .map(|job| async move {
            let entries = store.history_since(&job, since_ms, per_job).await?;
            let mut read = Vec::with_capacity(entries.len());
            for (id, fields) in entries {
                match history_entry(id, fields, OutputTail::Omit) {
                    Ok(entry) => read.push((job.clone(), entry)),
                    Err(bad) => {
                        tracing::warn!(job, id = %bad.id, reason = %bad.reason, "unreadable outcome in the stream; left out");
                    }
                }
            }
            Ok::<_, OperatorError>(read)
        })
        .buffered(READ_AHEAD)
        .try_collect()
        .await?;
    Ok(per_job.into_iter().flatten().collect())
}

/// Waits for the outcome of run `run_id` of `job`, polling its done marker
/// every `poll`; `None` if `timeout` passes first.
pub async fn wait_for_outcome(
    store: &Store,
    job: &str,
    run_id: &str,
    timeout: Duration,
    poll: Duration,
) -> Result<Option<HistoryEntry>, OperatorError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(id) = store.done_marker(job, run_id).await?
            && let Some(fields) = store.outcome_entry(job, &id).await?
        {
            return match history_entry(id, fields, OutputTail::Include) {
                Ok(entry) => Ok(Some(entry)),
                Err(bad) => Err(OperatorError::Unreadable {
                    job: job.to_string(),
                    id: bad.id,
                    reason: bad.reason,
                }),
            };
        }
        if tokio::time::Instant::now() + poll > deadline {
            return Ok(None);
        }
        tokio::time::sleep(poll).await;
    }
}
