//! The API's actions: run now, pause, resume and kill a job, drain and
//! undrain a replica, through the same `data` functions as the pages'
//! forms, recorded in the job's (or the cluster's) actions the same way.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{
    ActionKind, ApiError, ErrorBody, ErrorCode, Permission, Subject, body, check, json, recorded_as,
};
use crate::dashboard::Dashboard;
use crate::dashboard::data::{self, ActionDone, JobAction, ReplicaAction};
use crate::operator::{self, OperatorError, PauseOptions};

/// `POST /api/v1/jobs/{name}/trigger`'s body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerBody {
    /// Values of the job's parameters, by name; a parameter not given
    /// takes its default.
    #[serde(default)]
    params: BTreeMap<String, String>,
}

/// A queued manual run.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Triggered {
    job: String,
    /// The run's id: its outcome in the history carries it.
    run_id: String,
}

/// `POST /api/v1/jobs/{name}/pause`'s body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct PauseBody {
    /// When the pause ends by itself: RFC 3339, or a duration from now
    /// (`2h`, `30m`); none: until resumed.
    until: Option<String>,
    /// Why, one line (shown with the pause).
    reason: Option<String>,
}

/// A pause taken.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct PausedBody {
    job: String,
    /// Redis ms of the pause.
    at_ms: i64,
    /// When it ends by itself, Redis ms; none: until resumed.
    until_ms: Option<i64>,
}

/// A body that holds nothing (`{}`, or none at all).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EmptyBody {}

/// A resume taken.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ResumedBody {
    job: String,
    /// Redis ms of the resume.
    at_ms: i64,
}

/// `POST /api/v1/jobs/{name}/kill`'s body (optional).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct KillBody {
    /// The run to stop; none: every run of the job in flight.
    run_id: Option<String>,
}

/// The runs asked to stop: each one's replica stops it within a second
/// and records it `killed`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct KilledBody {
    job: String,
    run_ids: Vec<String>,
}

/// A drain or undrain taken.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReplicaDone {
    replica: String,
    /// `drain` or `undrain`.
    action: String,
    /// Redis ms it was recorded at.
    at_ms: i64,
    /// Whether the replica's mark changed (draining a drained replica
    /// changes nothing but the record of the action).
    changed: bool,
}

/// Takes `action` on job `name` for a request from `peer`.
async fn act(
    dashboard: &Dashboard,
    name: &str,
    action: JobAction,
    identity: &super::Identity,
    peer: SocketAddr,
) -> Result<ActionDone, ApiError> {
    let who = recorded_as(dashboard, identity, peer);
    match data::act(dashboard, name, &action, &who).await? {
        Some(done) => Ok(done),
        None => Err(OperatorError::UnknownJob(name.to_string()).into()),
    }
}

/// The answer to an action on job `name` that did `done`.
fn answer(name: String, done: ActionDone) -> Response {
    match done {
        ActionDone::Triggered { run_id } => {
            json(StatusCode::ACCEPTED, &Triggered { job: name, run_id })
        }
        ActionDone::Paused(paused) => json(
            StatusCode::OK,
            &PausedBody {
                job: name,
                at_ms: paused.at_ms,
                until_ms: paused.until_ms,
            },
        ),
        ActionDone::Resumed { at_ms } => json(StatusCode::OK, &ResumedBody { job: name, at_ms }),
        ActionDone::Killed { run_ids } => json(StatusCode::OK, &KilledBody { job: name, run_ids }),
    }
}

/// `POST /api/v1/jobs/{name}/trigger`: queues a manual run (one replica
/// runs it).
///
/// Needs a token with the role `operator` or `admin`; a token whose
/// `jobs` leave the job out gets 404, as for a job that does not exist.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{name}/trigger",
    tag = "actions",
    params(
        ("name" = String, Path, description = "The job's name"),
        ("traceparent" = Option<String>, Header, description = "A W3C trace context (`00-<trace id>-<span id>-<flags>`): the run's span continues that trace as a child of that span. One that is not valid is refused (invalid_traceparent)"),
    ),
    request_body(content = Option<TriggerBody>, content_type = "application/json"),
    responses(
        (status = 202, description = "Queued", body = Triggered),
        (status = 400, description = "invalid_body, invalid_params, invalid_traceparent", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role operator or admin)", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 409, description = "job_paused, cluster_paused, broadcast_job", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 415, description = "unsupported_media_type", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn trigger(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Act(ActionKind::Trigger, Subject::Job(&name)),
    )?;
    let traceparent = traceparent(&headers)?;
    let request: TriggerBody = body(&headers, bytes)?;
    let params = request.params.into_iter().collect();
    let done = act(
        &dashboard,
        &name,
        JobAction::Trigger(params, traceparent),
        &identity,
        peer,
    )
    .await?;
    Ok(answer(name, done))
}

/// A trigger's `traceparent` header, checked; none when it has none.
fn traceparent(headers: &HeaderMap) -> Result<Option<crate::trace::TraceParent>, ApiError> {
    let Some(value) = headers.get("traceparent") else {
        return Ok(None);
    };
    let refuse = |message: String| {
        ApiError::new(
            ErrorCode::InvalidTraceparent,
            format!("{message}; nothing queued"),
        )
    };
    let text = value
        .to_str()
        .map_err(|_| refuse("the traceparent header is not ASCII".to_string()))?;
    crate::trace::TraceParent::parse(text.trim())
        .map(Some)
        .map_err(|e| refuse(e.to_string()))
}

/// `POST /api/v1/jobs/{name}/pause`: no tick of the job starts until it
/// is resumed, or its `until` passes.
///
/// Needs a token with the role `operator` or `admin`; a token whose
/// `jobs` leave the job out gets 404, as for a job that does not exist.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{name}/pause",
    tag = "actions",
    params(("name" = String, Path, description = "The job's name")),
    request_body(content = Option<PauseBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "Paused", body = PausedBody),
        (status = 400, description = "invalid_body, invalid_pause", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role operator or admin)", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 413, description = "payload_too_large", body = ErrorBody),
        (status = 415, description = "unsupported_media_type", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn pause(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Act(ActionKind::Pause, Subject::Job(&name)),
    )?;
    let request: PauseBody = body(&headers, bytes)?;
    let until = match request.until.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(operator::Until::parse(text).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidPause,
                format!("until: {e}; nothing paused"),
            )
        })?),
    };
    let reason = request.reason.unwrap_or_default().trim().to_string();
    operator::check_reason(&reason).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidPause,
            format!("reason: {e}; nothing paused"),
        )
    })?;
    let options = PauseOptions { until, reason };
    let done = act(
        &dashboard,
        &name,
        JobAction::Pause(options),
        &identity,
        peer,
    )
    .await?;
    Ok(answer(name, done))
}

/// `POST /api/v1/jobs/{name}/resume`: ends the job's pause.
///
/// Needs a token with the role `operator` or `admin`; a token whose
/// `jobs` leave the job out gets 404, as for a job that does not exist.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{name}/resume",
    tag = "actions",
    params(("name" = String, Path, description = "The job's name")),
    request_body(content = Option<EmptyBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "Resumed", body = ResumedBody),
        (status = 400, description = "invalid_body", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role operator or admin)", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn resume(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Act(ActionKind::Resume, Subject::Job(&name)),
    )?;
    let EmptyBody {} = body(&headers, bytes)?;
    let done = act(&dashboard, &name, JobAction::Resume, &identity, peer).await?;
    Ok(answer(name, done))
}

/// `POST /api/v1/jobs/{name}/kill`: asks the replicas running the job's
/// run (or every run of it in flight) to stop it.
///
/// Needs a token with the role `operator` or `admin`; a token whose
/// `jobs` leave the job out gets 404, as for a job that does not exist.
#[utoipa::path(
    post,
    path = "/api/v1/jobs/{name}/kill",
    tag = "actions",
    params(("name" = String, Path, description = "The job's name")),
    request_body(content = Option<KillBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "Asked", body = KilledBody),
        (status = 400, description = "invalid_body", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role operator or admin)", body = ErrorBody),
        (status = 404, description = "job_not_found", body = ErrorBody),
        (status = 409, description = "not_in_flight", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn kill(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let identity = check(
        &dashboard,
        &headers,
        peer,
        Permission::Act(ActionKind::Kill, Subject::Job(&name)),
    )?;
    let request: KillBody = body(&headers, bytes)?;
    let run = request.run_id.filter(|r| !r.trim().is_empty());
    let done = act(&dashboard, &name, JobAction::Kill(run), &identity, peer).await?;
    Ok(answer(name, done))
}

/// Drains or undrains replica `id` for a request from `peer`.
async fn replica_action(
    dashboard: &Dashboard,
    id: String,
    action: ReplicaAction,
    headers: &HeaderMap,
    peer: SocketAddr,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let kind = match action {
        ReplicaAction::Drain => ActionKind::Drain,
        ReplicaAction::Undrain => ActionKind::Undrain,
    };
    let identity = check(
        dashboard,
        headers,
        peer,
        Permission::Act(kind, Subject::Cluster),
    )?;
    let EmptyBody {} = body(headers, bytes)?;
    let who = recorded_as(dashboard, &identity, peer);
    let done = data::act_on_replica(dashboard, &id, action, &who).await?;
    Ok(json(
        StatusCode::OK,
        &ReplicaDone {
            replica: id,
            action: action.as_str().to_string(),
            at_ms: done.at_ms,
            changed: done.changed,
        },
    ))
}

/// `POST /api/v1/replicas/{id}/drain`: the replica claims nothing until
/// undrained; its runs in flight go on.
///
/// Needs a token with the role `admin`.
#[utoipa::path(
    post,
    path = "/api/v1/replicas/{id}/drain",
    tag = "actions",
    params(("id" = String, Path, description = "The replica's id")),
    request_body(content = Option<EmptyBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "Drained", body = ReplicaDone),
        (status = 400, description = "invalid_body", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role admin)", body = ErrorBody),
        (status = 404, description = "replica_not_found", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn drain(
    State(dashboard): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    replica_action(&dashboard, id, ReplicaAction::Drain, &headers, peer, bytes).await
}

/// `POST /api/v1/replicas/{id}/undrain`: the replica claims again.
///
/// Needs a token with the role `admin`.
#[utoipa::path(
    post,
    path = "/api/v1/replicas/{id}/undrain",
    tag = "actions",
    params(("id" = String, Path, description = "The replica's id")),
    request_body(content = Option<EmptyBody>, content_type = "application/json"),
    responses(
        (status = 200, description = "Undrained", body = ReplicaDone),
        (status = 400, description = "invalid_body", body = ErrorBody),
        (status = 401, description = "token_missing, token_invalid", body = ErrorBody),
        (status = 403, description = "actions_disabled, role_forbidden (needs the role admin)", body = ErrorBody),
        (status = 404, description = "replica_not_found", body = ErrorBody),
        (status = 429, description = "too_many_attempts", body = ErrorBody),
        (status = 503, description = "redis_unavailable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub(super) async fn undrain(
    State(dashboard): State<Arc<Dashboard>>,
    Path(id): Path<String>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    replica_action(
        &dashboard,
        id,
        ReplicaAction::Undrain,
        &headers,
        peer,
        bytes,
    )
    .await
}
