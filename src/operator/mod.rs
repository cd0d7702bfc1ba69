//! The operator's view: what `status`, `history`, `trigger`, `pause` and
//! `resume` read and write, as plain data.
//!
//! Each function takes a connected [`Store`] (and the job table when the
//! operator has one) and returns a serializable report; the `--json` output
//! is that report, and the text output is rendered from it (`render`), so
//! both always say the same. Nothing here runs a job: `trigger` only queues
//! a request for the replicas.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::config::Job;
use crate::membership::{DrainState, Heartbeat, RunInFlight};
use crate::store::{Action, ChannelHealth, Store, StoreError};
pub use crate::store::{LastOutcome, PlanMode, Repair, RunningStatus};

mod backfill;
mod drain;
mod explain;
mod groups;
pub use groups::GroupStatus;
mod history;
mod live;
mod pause;
mod render;
mod status;

pub use backfill::{BackfillRefusal, BackfillReport, BackfillRequest, backfill, follow_backfill};
#[cfg(feature = "dashboard")]
pub use drain::DrainDone;
pub use drain::{DrainWait, drain, undrain, wait_drained};
#[cfg(feature = "dashboard")]
pub(crate) use explain::span;
pub use explain::{ExplainError, explain, parse_tick, render_explanation};
#[cfg(feature = "dashboard")]
pub use explain::{Explanation, Verdict};
pub use history::{
    HistoryEntry, HistoryReport, OutputTail, history, require_job, wait_for_outcome,
};
#[cfg(feature = "dashboard")]
pub use history::{history_page, outcome_strip, runs_since};
#[cfg(feature = "dashboard")]
pub use live::live_kept;
pub use live::{Follow, LiveEnd, follow_live, live_run};
#[cfg(feature = "dashboard")]
pub use pause::Paused;
#[cfg(feature = "dashboard")]
pub use pause::REASON_MAX_CHARS;
pub use pause::{
    ClusterChange, PauseOptions, Until, check_reason, pause, pause_all, resume, resume_all,
};
pub use render::{OutputText, render_history, render_status, use_colour};
pub use status::status;

/// Failures of an operator command.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// The job is neither in the config nor known to Redis.
    #[error("unknown job {0:?}: not in the job table and nothing recorded for it in Redis")]
    UnknownJob(String),
    /// An outcome cronlease cannot read (not one it wrote).
    #[error("the outcome {id} of job {job:?} in Redis is unreadable: {reason}")]
    Unreadable {
        job: String,
        id: String,
        reason: String,
    },
    /// A replica that cannot be drained or undrained (unknown, or its
    /// record unreadable).
    #[error("{0}")]
    BadReplica(String),
    #[error("job {0:?} is paused (cronlease resume {0} first)")]
    Paused(String),
    /// The cluster is paused (`cronlease pause --all`).
    #[error("the cluster is paused (cronlease resume --all first)")]
    ClusterPaused,
    /// A pause's end or reason that cannot be taken.
    #[error("{0}")]
    BadPause(String),
    /// The parameters given for a manual run do not fit the job's.
    #[error("job {job:?}: {error}; nothing queued")]
    Params {
        job: String,
        #[source]
        error: crate::config::ParamError,
    },
    /// `cronlease kill`: nothing of the job is in flight (no run at all,
    /// or not the run named).
    #[error("{0}")]
    NotInFlight(String),
    /// A broadcast job (`mode = "every_replica"`) runs only at its ticks,
    /// once on every matching replica: a manual run of it is refused.
    #[error(
        "job {0:?} is a broadcast job (mode = \"every_replica\"): it runs at its ticks on every matching replica, and a manual run would run on one of them only; nothing queued"
    )]
    Broadcast(String),
    /// Parameters were given with no job table to check them against.
    #[error("parameters need the job table to be checked against (--config): nothing queued")]
    ParamsWithoutTable,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A replica as its heartbeat describes it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct ReplicaStatus {
    pub id: String,
    pub host: String,
    pub pid: u64,
    pub version: String,
    pub started_ms: i64,
    pub last_seen_ms: i64,
    /// Heard from within max(3 heartbeats, its lease)
    /// ([`Heartbeat::is_alive`]).
    pub alive: bool,
    pub runs: Vec<RunInFlight>,
    /// How it contains its runs' processes (`cgroup`, `process_group`),
    /// once it has run a process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub containment: Option<String>,
    /// Per job: the hash of its definition on that replica.
    #[serde(skip)]
    pub config_hash: BTreeMap<String, String>,
    /// The id of the cluster's pause record it holds (see
    /// [`StatusReport::cluster_pause`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_pause: Option<String>,
    /// Out of the rendezvous (`cronlease drain`, or shutting down):
    /// `draining` while it has runs in flight, then `drained`. A drain its
    /// heartbeat has not told yet shows as `draining`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainState>,
    /// The operator's drain of it, until `cronlease undrain`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drained_by: Option<crate::store::DrainMark>,
    /// Its `[daemon] tags`, which jobs' `run_on` ask for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The most runs it keeps in flight at once (`[daemon] max_runs`);
    /// none: no limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
}

impl ReplicaStatus {
    /// Its runs in flight, and of how many when it has a limit: `2 of 2`.
    pub fn runs_of_max(&self) -> String {
        match self.max_runs {
            Some(max) => format!("{} of {max}", self.runs.len()),
            None => self.runs.len().to_string(),
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct JobStatus {
    pub name: String,
    /// From the job table; `None` when the operator has none.
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub next_tick: Option<String>,
    /// Why the job will not run again, when its schedule has no tick after
    /// now (a year field that has passed); see `Config::warnings`.
    pub warning: Option<String>,
    pub paused: bool,
    pub paused_by: Option<String>,
    pub paused_at_ms: Option<i64>,
    /// When the job's pause ends by itself (Redis ms); None: until
    /// resumed. A pause whose end has passed shows as over.
    pub paused_until_ms: Option<i64>,
    /// Why it was paused, when the operator said.
    pub paused_reason: Option<String>,
    pub running: Vec<RunningStatus>,
    pub last_outcome: Option<LastOutcome>,
    /// Ticks nobody claimed, recorded as `missed` (ever, for this job).
    pub missed_ticks: u64,
    /// Replicas whose definition of the job differs (see [`status`]).
    pub config_drift: Vec<String>,
    /// What a replica found in the job's state that no honest writer puts
    /// there, until `cronlease repair` clears it.
    pub needs_repair: Option<Repair>,
    /// From the job table: the jobs whose outcomes start this one
    /// (`after`), and the jobs this one's outcomes start.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub followers: Vec<String>,
    /// From the job table: when its ticks start and end (`active_from`,
    /// `active_until`, RFC 3339 UTC) and how many may run (`max_runs`).
    pub active_from: Option<String>,
    pub active_until: Option<String>,
    pub max_runs: Option<u32>,
    /// Runs of the schedule started while the job had `max_runs`.
    pub runs_started: u64,
    /// From the job table: the calendars that leave its ticks out
    /// (`exclude`, `only`), each with its content hash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub calendars: Vec<JobCalendar>,
    /// A backfill's queued ticks not started yet, and how many were
    /// queued since the queue was last empty (`cronlease backfill`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backfill: Option<BackfillLeft>,
    /// From the job table: the tags a replica needs to run it (`run_on`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub run_on: Vec<String>,
    /// From the job table: `every_replica` for a broadcast job; absent
    /// for one run per tick.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::config::Mode>,
    /// Why no run of the job starts while no live replica has the
    /// tags of its `run_on` ("no live replica has tags gpu"): its ticks
    /// are recorded missed meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unplaced: Option<String>,
    /// A broadcast job's latest tick with an outcome: how its replicas'
    /// runs of it ended (`status`: "last: 3 of 3 ok").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<BroadcastTick>,
    /// The live replicas, not drained, whose tags match the job's
    /// `run_on` (all live ones when it has none).
    pub matching_replicas: Vec<String>,
}

/// The latest tick of a broadcast job (`mode = "every_replica"`) with an
/// outcome, replica by replica.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct BroadcastTick {
    pub tick: String,
    pub tick_ms: i64,
    /// Its outcomes, one per replica that ran it, by replica name.
    pub outcomes: Vec<BroadcastOutcome>,
    /// How many of them are `ok`.
    pub ok: usize,
    /// Its runs still in flight.
    pub running: usize,
}

/// One replica's outcome of a broadcast tick.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct BroadcastOutcome {
    pub replica: String,
    pub status: crate::outcome::Status,
}

impl BroadcastTick {
    /// As `status` shows it: `3 of 3 ok`, `2 of 3 ok, 1 running`.
    pub fn summary(&self) -> String {
        let done = self.outcomes.len();
        let total = done + self.running;
        match self.running {
            0 => format!("{} of {total} ok", self.ok),
            running => format!("{} of {total} ok, {running} running", self.ok),
        }
    }
}

/// One of a job's calendars as `status` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct JobCalendar {
    pub name: String,
    pub rule: crate::calendar::CalendarRule,
    /// The hash of what its events mean, part of the job's definition
    /// hash (replicas whose calendars differ show as drift).
    pub hash: String,
    /// Its events (a recurring one counts once).
    pub events: usize,
    /// The zone its all-day events and floating times are read in.
    pub timezone: String,
}

/// The calendars of `job`, `exclude` first, for `status`.
pub fn job_calendars(job: &crate::config::Job) -> Vec<JobCalendar> {
    job.calendars
        .all()
        .map(|(rule, calendar)| JobCalendar {
            name: calendar.name().to_string(),
            rule,
            hash: calendar.content_hash().to_string(),
            events: calendar.events(),
            timezone: calendar.zone().name().to_string(),
        })
        .collect()
}

/// What is left of a job's backfill.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct BackfillLeft {
    pub left: u64,
    pub queued: u64,
}

/// The whole `cronlease status` report (also its `--json` schema).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StatusReport {
    pub prefix: String,
    pub now_ms: i64,
    /// The cluster's pause (`cronlease pause --all`) while it holds: no
    /// job's tick starts. The last resume or end is not shown.
    pub cluster_pause: Option<crate::store::ClusterPause>,
    pub replicas: Vec<ReplicaStatus>,
    pub jobs: Vec<JobStatus>,
    /// The locks asked about (`--lock NAME`), held or free.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locks: Vec<LockStatus>,
    /// Every notification channel some replica delivered through, or
    /// tried to: its last delivery, and its last failure when that came
    /// after.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<ChannelHealth>,
    /// The concurrency groups the job table's jobs name, with their use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<GroupStatus>,
}

/// A cluster lock as `status --lock NAME` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[cfg_attr(feature = "dashboard", derive(utoipa::ToSchema))]
pub struct LockStatus {
    pub name: String,
    /// None: free.
    pub holder: Option<String>,
    pub host: Option<String>,
    pub fence: Option<u64>,
    pub since_ms: Option<i64>,
    /// What is left of the holder's lease.
    pub time_left_ms: Option<i64>,
    /// Acquisitions not yet released (more than 1: re-entered).
    pub holds: Option<u32>,
}

/// Which locks a status report shows.
#[derive(Debug, Clone, Copy)]
pub enum Locks<'a> {
    /// These, held or free (`status --lock NAME`).
    Named(&'a [String]),
    /// Every lock that exists in Redis now (found by SCAN: the dashboard).
    #[cfg_attr(
        not(feature = "dashboard"),
        allow(dead_code, reason = "read by the dashboard only")
    )]
    Existing,
}

/// Clears what no honest writer puts in `job`'s state (`cronlease
/// repair`); returns what was cleared. Recorded in the job's actions.
pub async fn repair(store: &Store, job: &str, who: &str) -> Result<Vec<String>, OperatorError> {
    let cleared = store.repair(job).await?;
    record(store, job, "repair", who, &cleared.join(" ")).await;
    Ok(cleared)
}

/// Asks the holders of `job`'s runs in flight to stop them (`run_id`:
/// only that run), recorded in the job's actions (`kill`, the run ids);
/// returns the run ids asked. None in flight (or not `run_id`) is
/// [`OperatorError::NotInFlight`].
pub async fn kill(
    store: &Store,
    job: &str,
    run_id: Option<&str>,
    who: &str,
) -> Result<Vec<String>, OperatorError> {
    let asked = store.kill(job, run_id, who).await?;
    if asked.is_empty() {
        return Err(OperatorError::NotInFlight(match run_id {
            Some(run_id) => format!(
                "run {run_id:?} of job {job:?} is not in flight (finished, never started, or of another job): nothing to kill; `cronlease status` lists the runs in flight"
            ),
            None => format!("job {job:?} has no run in flight: nothing to kill"),
        }));
    }
    record(store, job, "kill", who, &asked.join(" ")).await;
    Ok(asked)
}

/// The live replicas (at Redis time `now_ms`) whose heartbeat names the
/// cluster's pause record `id`, and those whose does not.
async fn record_replicas(
    store: &Store,
    now_ms: i64,
    id: &str,
) -> Result<(Vec<String>, Vec<String>), OperatorError> {
    let mut confirmed = Vec::new();
    let mut unconfirmed = Vec::new();
    for (replica, raw) in store.hash(&store.keys().replicas()).await? {
        let Ok(record) = Heartbeat::parse_without_hashes(&raw) else {
            continue;
        };
        if !record.is_alive(now_ms) {
            continue;
        }
        if record.cluster_pause.as_deref() == Some(id) {
            confirmed.push(replica);
        } else {
            unconfirmed.push(replica);
        }
    }
    confirmed.sort();
    unconfirmed.sort();
    Ok((confirmed, unconfirmed))
}

/// Unix ms as RFC 3339 (UTC, seconds).
fn rfc3339_ms(ms: i64) -> String {
    rfc3339(DateTime::from_timestamp_millis(ms).unwrap_or_default())
}

/// Adds an action that was taken to the job's actions. It has happened
/// whatever this says, so a failure to record it is logged, not returned.
async fn record(store: &Store, job: &str, action: &str, who: &str, detail: &str) {
    if let Err(e) = store.record_action(job, action, who, detail).await {
        tracing::warn!(job, action, %who, error = %e, "the action was taken but could not be recorded in the job's actions");
    }
}

/// The newest `count` operator actions on `job`, newest first.
#[cfg_attr(
    not(feature = "dashboard"),
    allow(dead_code, reason = "read by the dashboard only")
)]
pub async fn actions(store: &Store, job: &str, count: usize) -> Result<Vec<Action>, OperatorError> {
    Ok(store.actions(job, count).await?)
}

/// `--param NAME=VALUE`: the name and the value (which may hold `=`).
pub fn parse_param(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!(
            "{text:?} is not NAME=VALUE: expected e.g. --param region=us"
        )),
    }
}

/// Checks a manual run of `job` against `definition`, the job as the
/// caller's job table has it: a broadcast job is refused; the parameters
/// `given` (name, value): every
/// name declared, given once, every value valid and allowed. None given
/// is always valid (the replica uses the defaults); some given with no
/// definition (no table, or a job not in it) cannot be checked and are
/// refused.
pub fn check_params(
    definition: Option<&Job>,
    job: &str,
    given: &[(String, String)],
) -> Result<(), OperatorError> {
    if definition.is_some_and(|d| d.mode == crate::config::Mode::EveryReplica) {
        return Err(OperatorError::Broadcast(job.to_string()));
    }
    if given.is_empty() {
        return Ok(());
    }
    let Some(definition) = definition else {
        return Err(OperatorError::ParamsWithoutTable);
    };
    definition
        .params
        .resolve(given.iter().cloned())
        .map(|_| ())
        .map_err(|error| OperatorError::Params {
            job: job.to_string(),
            error,
        })
}

/// Queues a manual run of `job` with the parameters `params` (checked by
/// [`check_params`]: the replica checks them again) and the trace context
/// its run's span continues, if any; returns its run id.
pub async fn trigger(
    store: &Store,
    job: &str,
    who: &str,
    params: &[(String, String)],
    traceparent: Option<&crate::trace::TraceParent>,
) -> Result<String, OperatorError> {
    let now_ms = store.server_time_ms().await?;
    if store
        .job_state(job)
        .await?
        .pause
        .is_some_and(|p| p.holds_at(now_ms))
    {
        return Err(OperatorError::Paused(job.to_string()));
    }
    if store
        .cluster_pause()
        .await?
        .is_some_and(|p| p.holds(now_ms))
    {
        return Err(OperatorError::ClusterPaused);
    }
    let run_id = uuid::Uuid::new_v4().to_string();
    store
        .enqueue_trigger(job, &run_id, who, params, traceparent)
        .await?;
    record(store, job, "trigger", who, &run_id).await;
    Ok(run_id)
}

/// `user@host` of whoever runs the command, for `paused_by` and
/// `requested_by`. The user is the operating system's: the name of the
/// process's real user id in the user database, never `$USER` or
/// `$LOGNAME`, which whoever starts the command sets as they please (a uid
/// without a name is written `uid<N>`).
pub fn operator_identity() -> String {
    let uid = nix::unistd::getuid();
    let user = match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) if plain_name(&user.name) => user.name,
        _ => format!("uid{uid}"),
    };
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| plain_name(h))
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{user}@{host}")
}

/// Whether a user or host name may go into a record as it is: 1 to 255
/// printable characters without spaces (what the user database and the
/// kernel hold is trusted no further than that).
fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .chars()
            .all(|c| c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control()))
}

/// How many jobs' keys are read at once (one connection, pipelined by
/// the multiplexer): 10,000 jobs take 150 round trips' time, not 20,000.
const READ_AHEAD: usize = 64;

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[cfg(test)]
mod tests {
    use super::status::drift;
    use super::*;
    use crate::outcome::Status;

    #[test]
    fn a_missed_tick_reads_as_missed_not_unreadable() {
        // What missed.lua writes for a tick nobody claimed.
        let fields = [
            ("tick", "1700000000000"),
            ("fence", "0"),
            ("run_id", ""),
            ("status", "missed"),
            ("trigger", "schedule"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
        let entry =
            history::history_entry("1-0".into(), fields, OutputTail::Omit).expect("readable");
        assert_eq!(entry.status, Status::Missed);
    }

    #[test]
    fn only_parameters_a_job_could_have_are_read_from_an_outcome() {
        let long = "x".repeat(1025);
        let fields = [
            ("tick", "1700000000000"),
            ("status", "ok"),
            ("param.region", "us"),
            ("param.note", "a b=c"),
            ("param.Bad", "x"),
            ("param.", "x"),
            ("param.escape", "a\u{1b}[31mred"),
            ("param.long", long.as_str()),
            ("paramz", "x"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .to_vec();
        let entry =
            history::history_entry("1-0".into(), fields, OutputTail::Omit).expect("readable");
        let params: Vec<(&str, &str)> = entry
            .params
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        assert_eq!(params, [("note", "a b=c"), ("region", "us")]);
    }

    #[test]
    fn drift_names_the_odd_one_out() {
        let replica = |id: &str, hash: &str| ReplicaStatus {
            id: id.into(),
            host: String::new(),
            pid: 0,
            version: String::new(),
            started_ms: 0,
            last_seen_ms: 0,
            alive: true,
            runs: Vec::new(),
            containment: None,
            config_hash: [("j".to_string(), hash.to_string())].into(),
            cluster_pause: None,
            drain: None,
            tags: Vec::new(),
            drained_by: None,
            max_runs: None,
        };
        let replicas = [replica("a", "1"), replica("b", "1"), replica("c", "2")];
        assert_eq!(drift("j", None, &replicas), ["c"]);
        assert_eq!(drift("j", Some("2".into()), &replicas), ["a", "b"]);
        assert!(drift("other", None, &replicas).is_empty());
    }
}
