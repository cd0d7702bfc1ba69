//! What the pages and the JSON API (`api`) read and do, one function per
//! view or action: a page draws its value as HTML, the API sends it as
//! JSON, so the two cannot disagree and no query is written twice.

use std::sync::Arc;

use chrono::DateTime;

use super::keys::Scope;
use super::{Dashboard, Fresh};
use crate::config::Job;
use crate::operator::{
    self, ExplainError, Explanation, HistoryEntry, JobStatus, OperatorError, OutputTail,
    PauseOptions, RunningStatus, StatusReport,
};
use crate::outcome::Status;
use crate::store::Action;

/// Why a view could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum ViewError {
    /// No job of that name, in the job table or in Redis (the message
    /// says which, and the names close to it where known).
    #[error("{0}")]
    NoJob(String),
    /// A query value that cannot be taken (which, and what would be valid).
    #[error("{0}")]
    BadQuery(String),
    /// Redis could not be read.
    #[error("cannot read from Redis: {0}")]
    Redis(#[from] OperatorError),
}

/// The overview's state filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StateFilter {
    All,
    Active,
    Paused,
    Running,
    Failing,
    Drift,
    Ended,
}

impl StateFilter {
    pub(super) const ALL: [StateFilter; 7] = [
        StateFilter::All,
        StateFilter::Active,
        StateFilter::Paused,
        StateFilter::Running,
        StateFilter::Failing,
        StateFilter::Drift,
        StateFilter::Ended,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            StateFilter::All => "all",
            StateFilter::Active => "active",
            StateFilter::Paused => "paused",
            StateFilter::Running => "running",
            StateFilter::Failing => "failing",
            StateFilter::Drift => "drift",
            StateFilter::Ended => "ended",
        }
    }

    pub(super) fn label(self) -> &'static str {
        match self {
            StateFilter::All => "all jobs",
            StateFilter::Active => "active",
            StateFilter::Paused => "paused",
            StateFilter::Running => "running now",
            StateFilter::Failing => "last run not ok",
            StateFilter::Drift => "config drift",
            StateFilter::Ended => "past their last tick",
        }
    }

    /// The filter named `text`, if one is.
    pub(super) fn parse(text: &str) -> Option<StateFilter> {
        StateFilter::ALL.into_iter().find(|f| f.as_str() == text)
    }

    pub(super) fn keeps(self, job: &JobStatus) -> bool {
        match self {
            StateFilter::All => true,
            StateFilter::Active => !job.paused && job.warning.is_none(),
            StateFilter::Paused => job.paused,
            StateFilter::Running => !job.running.is_empty(),
            StateFilter::Failing => job
                .last_outcome
                .as_ref()
                // A tick its calendars left out is not a failure.
                .is_some_and(|o| !matches!(o.status, Status::Ok | Status::Excluded)),
            StateFilter::Drift => !job.config_drift.is_empty(),
            StateFilter::Ended => job.warning.is_some(),
        }
    }
}

/// The status [`Dashboard::status`] reads, as `scope` sees it: the jobs
/// outside it, and their runs on the replicas, left out.
pub(super) async fn status_seen(
    dashboard: &Dashboard,
    scope: &Scope,
    fresh: Fresh,
) -> Result<Arc<StatusReport>, OperatorError> {
    let status = dashboard.status(fresh).await?;
    Ok(match scope {
        Scope::All => status,
        Scope::Jobs(_) => {
            let mut seen = (*status).clone();
            seen.jobs.retain(|job| scope.sees(&job.name));
            for replica in &mut seen.replicas {
                replica.runs.retain(|run| scope.sees(&run.job));
            }
            Arc::new(seen)
        }
    })
}

/// The jobs of `status` whose name holds `needle` (any case; empty: all)
/// and that `filter` keeps, in the report's order: the overview's rows.
pub(super) fn jobs_matching<'a>(
    status: &'a StatusReport,
    needle: &str,
    filter: StateFilter,
) -> Vec<&'a JobStatus> {
    let needle = needle.trim().to_lowercase();
    status
        .jobs
        .iter()
        .filter(|j| needle.is_empty() || j.name.to_lowercase().contains(&needle))
        .filter(|j| filter.keeps(j))
        .collect()
}

/// One of a job's next ticks.
#[derive(Debug, Clone)]
pub(super) struct UpcomingTick {
    pub(super) at: DateTime<chrono::Utc>,
    /// The tick in the schedule's zone.
    pub(super) local: String,
    /// The calendar that leaves it out, when one does.
    pub(super) excluded_by: Option<String>,
}

/// What a job's page shows besides its history.
pub(super) struct JobView {
    pub(super) status: Arc<StatusReport>,
    /// The job's entry of `status.jobs`.
    index: usize,
    /// Its definition, when this replica's job table has it.
    pub(super) definition: Option<Arc<Job>>,
    /// Its next ticks after `status.now_ms`.
    pub(super) upcoming: Vec<UpcomingTick>,
    /// The newest operator actions on it, newest first.
    pub(super) actions: Vec<Action>,
}

impl JobView {
    pub(super) fn job(&self) -> &JobStatus {
        &self.status.jobs[self.index]
    }
}

/// Job `name`'s state, next `upcoming` ticks and newest `actions` actions.
pub(super) async fn job_view(
    dashboard: &Dashboard,
    name: &str,
    upcoming: usize,
    actions: usize,
) -> Result<JobView, ViewError> {
    let status = dashboard.status(Fresh::Cached).await?;
    let index = status
        .jobs
        .iter()
        .position(|j| j.name == name)
        .ok_or_else(|| no_job(name))?;
    let definition = dashboard.job_table().get(name).cloned();
    let ticks = upcoming_ticks(definition.as_deref(), status.now_ms, upcoming);
    let actions = operator::actions(&dashboard.store, name, actions).await?;
    Ok(JobView {
        status,
        index,
        definition,
        upcoming: ticks,
        actions,
    })
}

/// The next `count` ticks of `definition`'s schedule after `now_ms`.
fn upcoming_ticks(definition: Option<&Job>, now_ms: i64, count: usize) -> Vec<UpcomingTick> {
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let Some((job, schedule)) = definition.and_then(|d| Some((d, d.schedule.as_ref()?))) else {
        return Vec::new();
    };
    schedule
        .upcoming(now, count)
        .into_iter()
        .map(|at| UpcomingTick {
            at,
            local: schedule.timezone().format_local(at),
            excluded_by: job
                .excluded_by(at.timestamp_millis())
                .map(|e| e.to_string()),
        })
        .collect()
}

/// A page of a job's history: `limit` outcomes before the outcome
/// `before` (its id; `None`: the newest).
#[derive(Debug, Clone, Copy)]
pub(super) struct HistoryPage<'a> {
    pub(super) before: Option<&'a str>,
    pub(super) limit: usize,
    pub(super) output: OutputTail,
}

/// A page of job `name`'s outcomes, newest first.
pub(super) async fn history(
    dashboard: &Dashboard,
    name: &str,
    page: HistoryPage<'_>,
) -> Result<Vec<HistoryEntry>, ViewError> {
    if let Some(before) = page.before
        && !stream_id(before)
    {
        return Err(ViewError::BadQuery(format!(
            "before: {before:?} is not an outcome's id (expected MS-SEQ, e.g. 1764190800000-0, the `id` of an outcome)"
        )));
    }
    require_job(dashboard, name).await?;
    let report =
        operator::history_page(&dashboard.store, name, page.before, page.limit, page.output)
            .await?;
    Ok(report.outcomes)
}

/// Whether `text` is a Redis stream id (`MS-SEQ`, or `MS`).
fn stream_id(text: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit());
    match text.split_once('-') {
        Some((ms, seq)) => number(ms) && number(seq),
        None => number(text),
    }
}

/// Fails unless `name` is in the job table or known to Redis.
pub(super) async fn require_job(dashboard: &Dashboard, name: &str) -> Result<(), ViewError> {
    if dashboard.job_table().contains_key(name)
        || dashboard
            .store
            .job_exists(name)
            .await
            .map_err(OperatorError::from)?
    {
        Ok(())
    } else {
        Err(no_job(name))
    }
}

/// The error of a job named `name` that does not exist.
fn no_job(name: &str) -> ViewError {
    ViewError::NoJob(format!("no job {name:?} in this replica's job table"))
}

/// The explanation of job `name`'s `tick` (as `--tick` takes it; `None`:
/// the latest due tick), as `cronlease explain` gives it.
pub(super) async fn explanation(
    dashboard: &Dashboard,
    name: &str,
    tick: Option<&str>,
) -> Result<Explanation, ViewError> {
    let tick = match tick.map(operator::parse_tick) {
        None => None,
        Some(Ok(tick)) => Some(tick),
        Some(Err(message)) => return Err(ViewError::BadQuery(format!("tick: {message}"))),
    };
    let table = dashboard.job_table();
    match operator::explain(&dashboard.store, Some(&*table), name, tick).await {
        Ok(explanation) => Ok(explanation),
        Err(ExplainError::Operator(e)) => Err(ViewError::Redis(e)),
        Err(e @ ExplainError::UnknownJob { .. }) => Err(ViewError::NoJob(e.to_string())),
        Err(e @ ExplainError::NoSchedule(_)) => Err(ViewError::BadQuery(e.to_string())),
    }
}

/// `e` for a token that sees only some jobs: an unknown job's error
/// without the names close to it (they may be jobs it does not see).
pub(super) fn unseen_names(e: ViewError, scope: &Scope, name: &str) -> ViewError {
    match (e, scope) {
        (ViewError::NoJob(_), Scope::Jobs(_)) => no_job(name),
        (e, _) => e,
    }
}

/// Every run in flight of `status`, with its job, in the report's order.
pub(super) fn in_flight(status: &StatusReport) -> Vec<(&str, &RunningStatus)> {
    status
        .jobs
        .iter()
        .flat_map(|j| j.running.iter().map(move |r| (j.name.as_str(), r)))
        .collect()
}

/// An operator's action on a job, as the pages' forms and the API ask it.
#[derive(Debug, Clone)]
pub(super) enum JobAction {
    /// Run now with these parameters (name, value), continuing this
    /// trace context (an API request's `traceparent` header).
    Trigger(Vec<(String, String)>, Option<crate::trace::TraceParent>),
    Pause(PauseOptions),
    Resume,
    /// Stop the run named (`None`: every run of the job in flight).
    Kill(Option<String>),
}

impl JobAction {
    pub(super) fn as_str(&self) -> &'static str {
        match self {
            JobAction::Trigger(..) => "trigger",
            JobAction::Pause(_) => "pause",
            JobAction::Resume => "resume",
            JobAction::Kill(_) => "kill",
        }
    }
}

/// What a job action did.
#[derive(Debug, Clone)]
pub(super) enum ActionDone {
    /// The manual run queued.
    Triggered {
        run_id: String,
    },
    Paused(operator::Paused),
    /// Redis ms of the resume.
    Resumed {
        at_ms: i64,
    },
    /// The runs asked to stop.
    Killed {
        run_ids: Vec<String>,
    },
}

impl ActionDone {
    /// The run the action concerns, for the page's notice and the log
    /// (the run ids, space-separated, for a kill).
    pub(super) fn run(&self) -> String {
        match self {
            ActionDone::Triggered { run_id } => run_id.clone(),
            ActionDone::Killed { run_ids } => run_ids.join(" "),
            ActionDone::Paused(_) | ActionDone::Resumed { .. } => String::new(),
        }
    }
}

/// Takes `action` on job `name` as `who` (recorded in the job's actions),
/// after checking that the job exists (`Ok(None)` when it does not). The
/// snapshot is read again after it, so the next page shows its effect.
pub(super) async fn act(
    dashboard: &Dashboard,
    name: &str,
    action: &JobAction,
    who: &str,
) -> Result<Option<ActionDone>, OperatorError> {
    let known = dashboard.job_table().contains_key(name);
    if !known && !dashboard.store.job_exists(name).await.unwrap_or(false) {
        return Ok(None);
    }
    let result = match action {
        JobAction::Trigger(params, traceparent) => {
            let table = dashboard.job_table();
            operator::check_params(table.get(name).map(|j| &**j), name, params)?;
            operator::trigger(&dashboard.store, name, who, params, traceparent.as_ref())
                .await
                .map(|run_id| ActionDone::Triggered { run_id })
        }
        JobAction::Pause(options) => operator::pause(&dashboard.store, name, who, options)
            .await
            .map(ActionDone::Paused),
        JobAction::Resume => operator::resume(&dashboard.store, name, who)
            .await
            .map(|at_ms| ActionDone::Resumed { at_ms }),
        JobAction::Kill(run) => operator::kill(&dashboard.store, name, run.as_deref(), who)
            .await
            .map(|run_ids| ActionDone::Killed { run_ids }),
    };
    dashboard.invalidate().await;
    if let Ok(done) = &result {
        tracing::info!(job = %name, action = action.as_str(), %who, run = %done.run(), "dashboard action");
        // Read the state again now, so the next page shows the change.
        let _ = dashboard.status(Fresh::Now).await;
    }
    result.map(Some)
}

/// What a replica action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplicaAction {
    Drain,
    Undrain,
}

impl ReplicaAction {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ReplicaAction::Drain => "drain",
            ReplicaAction::Undrain => "undrain",
        }
    }
}

/// Drains or undrains `replica` as `who` (recorded in the cluster's
/// actions), as `cronlease drain` and `undrain` do.
pub(super) async fn act_on_replica(
    dashboard: &Dashboard,
    replica: &str,
    action: ReplicaAction,
    who: &str,
) -> Result<operator::DrainDone, OperatorError> {
    let result = match action {
        ReplicaAction::Drain => operator::drain(&dashboard.store, replica, who).await,
        ReplicaAction::Undrain => operator::undrain(&dashboard.store, replica, who).await,
    };
    dashboard.invalidate().await;
    if result.is_ok() {
        tracing::info!(%replica, action = action.as_str(), %who, "dashboard action");
        let _ = dashboard.status(Fresh::Now).await;
    }
    result
}
