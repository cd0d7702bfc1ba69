//! The API's reads: the data of the overview, a job's page, its history,
//! the replicas page and the explain page, through the same `data`
//! functions as the pages.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{ApiError, ErrorBody, ErrorCode, Permission, Subject, check, json};
use crate::dashboard::data::{self, HistoryPage, StateFilter};
use crate::dashboard::format::iso;
use crate::dashboard::pages::{ACTIONS_SHOWN, UPCOMING};
use crate::dashboard::{Dashboard, Fresh};
use crate::operator::{
    Explanation, HistoryEntry, JobStatus, LockStatus, OutputTail, ReplicaStatus,
};
use crate::store::ClusterPause;

/// The most outcomes one page of a history holds.
pub(super) const HISTORY_MAX: usize = 500;
/// Outcomes in a page of a history when `limit` is not given.
const HISTORY_DEFAULT: usize = 50;
/// The most jobs one page of `/jobs` holds, and how many when `limit` is
/// not given.
const JOBS_MAX: usize = 1_000;

/// A query `T`, or the 400 that says what is wrong with it.
fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::new(ErrorCode::InvalidQuery, e.body_text()))
}

/// `GET /api/v1/jobs`'s query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct JobsQuery {
    /// Only the jobs whose name holds this (any case).
    #[serde(default)]
    q: String,
    /// Only the jobs in this state: `all`, `active`, `paused`, `running`,
    /// `failing` (last run not ok), `drift` (config drift) or `ended`
    /// (past their last tick).
    #[serde(default)]
    state: Option<String>,
    /// Jobs in the page, 1 to 1000 (default 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
    /// The jobs whose name sorts after this one (the previous page's
    /// `next_after`); none: from the first.
    after: Option<String>,
}

/// Every job the overview shows.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobsBody {
    /// Redis time of the snapshot, ms since the epoch.
    now_ms: i64,
    /// The cluster's pause (`cronlease pause --all`) while it holds.
    cluster_pause: Option<ClusterPause>,
    /// How many jobs there are in all, before the filters.
    total: usize,
    /// The jobs that match, by name, each as `cronlease status --json`
    /// gives it.
    jobs: Vec<JobStatus>,
    /// The `after` of the next page; none when this page is the last.
    next_after: Option<String>,
}

/// `GET /api/v1/jobs`: every job, as the overview lists it.
#[utoipa::path(
    get,
    path = "/api/v1/jobs",
    tag = "reads",
    params(JobsQuery),
    responses(
        (status = 200, description = "The jobs", body = JobsBody),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn jobs(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<JobsQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Cluster),
    )?;
    let q = query(q)?;
    let filter = match q.state.as_deref() {
        None => StateFilter::All,
        Some(text) => StateFilter::parse(text).ok_or_else(|| {
            let valid: Vec<&str> = StateFilter::ALL.iter().map(|f| f.as_str()).collect();
            ApiError::new(
                ErrorCode::InvalidQuery,
                format!(
                    "state: {text:?} is not a state; expected one of {}",
                    valid.join(", ")
                ),
            )
        })?,
    };
    let limit = q.limit.unwrap_or(JOBS_MAX);
    if !(1..=JOBS_MAX).contains(&limit) {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!("limit: {limit} is out of range; expected 1 to {JOBS_MAX}"),
        ));
    }
    let status = data::status_seen(&dashboard, &identity.scope(), Fresh::Cached).await?;
    let mut matching = data::jobs_matching(&status, &q.q, filter);
    matching.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    if let Some(after) = &q.after {
        matching.retain(|j| j.name.as_str() > after.as_str());
    }
    let next_after = (matching.len() > limit).then(|| matching[limit - 1].name.clone());
    let jobs = matching.into_iter().take(limit).cloned().collect();
    Ok(json(
        StatusCode::OK,
        &JobsBody {
            now_ms: status.now_ms,
            cluster_pause: status.cluster_pause.clone(),
            total: status.jobs.len(),
            jobs,
            next_after,
        },
    ))
}

/// One of a job's next ticks.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NextTick {
    /// ms since the epoch.
    at_ms: i64,
    /// RFC 3339, UTC.
    at: String,
    /// In the schedule's time zone.
    local: String,
    /// The calendar that leaves this tick out, when one does (it is not
    /// run).
    excluded_by: Option<String>,
}

/// A parameter of the job, which a run now may give.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ParamSetting {
    /// What a run that does not give it runs with.
    default: Option<String>,
    /// The only values it may take; none: any.
    allowed: Option<Vec<String>>,
}

/// A job's settings, from this replica's job table.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobSettings {
    /// How long a run may take, ms; none: no limit.
    timeout_ms: Option<u64>,
    /// `overlap`: what a tick does while a run is in flight.
    overlap: String,
    /// `misfire`: what a late tick does.
    misfire: String,
    misfire_grace_ms: u64,
    retries: u32,
    /// The job's parameters, by name.
    params: BTreeMap<String, ParamSetting>,
}

/// An operator's action on the job.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ActionRecord {
    /// Its id in the job's actions stream.
    id: String,
    /// Redis ms.
    at_ms: i64,
    /// `trigger`, `pause`, `resume`, `kill`, `repair`, …
    action: String,
    /// Who asked (`NAME via dashboard on REPLICA from ADDRESS` from the
    /// dashboard and its API, `user@host` from the command line).
    who: String,
    /// What it made: a trigger's run id, a kill's run ids.
    detail: String,
    /// A pause's end, Redis ms.
    until_ms: Option<i64>,
    /// A pause's reason.
    reason: String,
}

/// What a job's page shows besides its history.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobBody {
    now_ms: i64,
    /// Its state, as `cronlease status --json` gives it.
    job: JobStatus,
    /// Its next ticks.
    next_ticks: Vec<NextTick>,
    /// Its settings; none when this replica's job table does not have it.
    settings: Option<JobSettings>,
    /// The newest operator actions on it, newest first.
    actions: Vec<ActionRecord>,
}

/// `GET /api/v1/jobs/{name}`: a job's state, next ticks, settings and
/// newest actions.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{name}",
    tag = "reads",
    params(("name" = String, Path, description = "The job's name")),
    responses(
        (status = 200, description = "The job", body = JobBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn job(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Job(&name)),
    )?;
    let view = data::job_view(&dashboard, &name, UPCOMING, ACTIONS_SHOWN).await?;
    let settings = view.definition.as_deref().map(|def| JobSettings {
        timeout_ms: def
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
        overlap: def.overlap.to_string(),
        misfire: def.misfire.to_string(),
        misfire_grace_ms: u64::try_from(def.misfire_grace.as_millis()).unwrap_or(u64::MAX),
        retries: def.retries,
        params: def
            .params
            .0
            .iter()
            .map(|(name, p)| {
                let setting = ParamSetting {
                    default: p.default.clone(),
                    allowed: p.allowed.clone(),
                };
                (name.clone(), setting)
            })
            .collect(),
    });
    let body = JobBody {
        now_ms: view.status.now_ms,
        job: view.job().clone(),
        next_ticks: view
            .upcoming
            .iter()
            .map(|t| NextTick {
                at_ms: t.at.timestamp_millis(),
                at: iso(t.at.timestamp_millis()),
                local: t.local.clone(),
                excluded_by: t.excluded_by.clone(),
            })
            .collect(),
        settings,
        actions: view
            .actions
            .iter()
            .map(|a| ActionRecord {
                id: a.id.clone(),
                at_ms: a.at_ms,
                action: a.action.clone(),
                who: a.who.clone(),
                detail: a.detail.clone(),
                until_ms: a.until_ms,
                reason: a.reason.clone(),
            })
            .collect(),
    };
    Ok(json(StatusCode::OK, &body))
}

/// `GET /api/v1/jobs/{name}/history`'s query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct HistoryQuery {
    /// Outcomes in the page, 1 to 500 (default 50).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// The outcomes recorded before this one (an outcome's `id`, the
    /// previous page's `next_before`); none: the newest.
    before: Option<String>,
}

/// A page of a job's outcomes, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct HistoryBody {
    job: String,
    /// Each as `cronlease history --json` gives it, its output tail
    /// included.
    outcomes: Vec<HistoryEntry>,
    /// The `before` of the next (older) page; none when this page is the
    /// last.
    next_before: Option<String>,
}

/// `GET /api/v1/jobs/{name}/history`: a page of the job's outcomes.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{name}/history",
    tag = "reads",
    params(("name" = String, Path, description = "The job's name"), HistoryQuery),
    responses(
        (status = 200, description = "A page of outcomes", body = HistoryBody),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn history(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Job(&name)),
    )?;
    let q = query(q)?;
    let limit = q.limit.unwrap_or(HISTORY_DEFAULT);
    if !(1..=HISTORY_MAX).contains(&limit) {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            format!("limit: {limit} is out of range; expected 1 to {HISTORY_MAX}"),
        ));
    }
    let page = HistoryPage {
        before: q.before.as_deref(),
        limit,
        output: OutputTail::Include,
    };
    let outcomes = data::history(&dashboard, &name, page).await?;
    let next_before = (outcomes.len() == limit)
        .then(|| outcomes.last().map(|e| e.id.clone()))
        .flatten();
    let body = HistoryBody {
        job: name,
        outcomes,
        next_before,
    };
    Ok(json(StatusCode::OK, &body))
}

/// `GET /api/v1/jobs/{name}/explain`'s query.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct ExplainQuery {
    /// The tick: RFC 3339 or ms since the epoch; none: the latest due
    /// tick.
    tick: Option<String>,
}

/// `GET /api/v1/jobs/{name}/explain`: what happened to a tick and why,
/// as `cronlease explain --json` gives it.
#[utoipa::path(
    get,
    path = "/api/v1/jobs/{name}/explain",
    tag = "reads",
    params(("name" = String, Path, description = "The job's name"), ExplainQuery),
    responses(
        (status = 200, description = "The explanation, as `cronlease explain --json`", body = Explanation),
        (status = 400, description = "invalid_query", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn explain(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    q: Result<Query<ExplainQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Job(&name)),
    )?;
    let q = query(q)?;
    let explanation: Explanation = data::explanation(&dashboard, &name, q.tick.as_deref())
        .await
        .map_err(|e| data::unseen_names(e, &identity.scope(), &name))?;
    Ok(json(StatusCode::OK, &explanation))
}

/// A run in flight.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct JobRun {
    job: String,
    run_id: String,
    /// The replica running it.
    replica: String,
    /// Its tick, ms since the epoch.
    tick_ms: i64,
    fence: u64,
    /// When it started, Redis ms.
    started_ms: i64,
    /// Who asked for it to stop, while its replica has not stopped it yet.
    kill_asked_by: Option<String>,
}

/// Every run in flight.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunsBody {
    now_ms: i64,
    runs: Vec<JobRun>,
}

/// `GET /api/v1/runs`: every job's runs in flight.
#[utoipa::path(
    get,
    path = "/api/v1/runs",
    tag = "reads",
    responses(
        (status = 200, description = "The runs in flight", body = RunsBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn runs(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Cluster),
    )?;
    let status = data::status_seen(&dashboard, &identity.scope(), Fresh::Cached).await?;
    let runs = data::in_flight(&status)
        .into_iter()
        .map(|(job, r)| JobRun {
            job: job.to_string(),
            run_id: r.run_id.clone(),
            replica: r.replica.clone(),
            tick_ms: r.tick_ms,
            fence: r.fence,
            started_ms: r.started_ms,
            kill_asked_by: r.kill_asked_by.clone(),
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &RunsBody {
            now_ms: status.now_ms,
            runs,
        },
    ))
}

/// Every replica with a heartbeat record.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReplicasBody {
    now_ms: i64,
    /// Each as `cronlease status --json` gives it.
    replicas: Vec<ReplicaStatus>,
}

/// `GET /api/v1/replicas`: the replicas, alive or not, drained or not.
#[utoipa::path(
    get,
    path = "/api/v1/replicas",
    tag = "reads",
    responses(
        (status = 200, description = "The replicas", body = ReplicasBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn replicas(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Cluster),
    )?;
    let status = data::status_seen(&dashboard, &identity.scope(), Fresh::Cached).await?;
    Ok(json(
        StatusCode::OK,
        &ReplicasBody {
            now_ms: status.now_ms,
            replicas: status.replicas.clone(),
        },
    ))
}

/// Every cluster lock that exists.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct LocksBody {
    now_ms: i64,
    locks: Vec<LockStatus>,
}

/// `GET /api/v1/locks`: the cluster locks that are held.
#[utoipa::path(
    get,
    path = "/api/v1/locks",
    tag = "reads",
    responses(
        (status = 200, description = "The locks", body = LocksBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security((), ("bearer" = []))
)]
pub(super) async fn locks(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check(
        &dashboard,
        &headers,
        peer,
        Permission::Read(Subject::Cluster),
    )?;
    let status = dashboard.status(Fresh::Cached).await?;
    Ok(json(
        StatusCode::OK,
        &LocksBody {
            now_ms: status.now_ms,
            locks: status.locks.clone(),
        },
    ))
}
