//! The dashboard's JSON API under `/api/v1/`: the pages' data (jobs, a
//! job, its history, runs in flight, replicas, locks, a tick's
//! explanation) and their actions (run now, pause, resume, kill, drain,
//! undrain), read and taken through the same functions as the pages
//! (`data`). Its OpenAPI 3.1 document (`/api/v1/openapi.json`) is
//! generated from the handlers and types here (`doc`).
//!
//! A request says who it is with `Authorization: Bearer <token>` (or, for
//! reads, the pages' login cookie); [`permit`] alone decides what that
//! identity may do. Errors are `{"error": {"code", "message"}}` with a
//! stable code per kind ([`ErrorCode`]).

mod actions;
mod doc;
mod reads;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, any, get, post};
use serde::Serialize;
use serde::de::DeserializeOwned;
use utoipa::ToSchema;

use super::auth::{Holder, Visitor};
use super::data::ViewError;
use super::keys::Scope;
use super::{Dashboard, auth};
use crate::config::{DashboardRead, DashboardRole};
use crate::operator::OperatorError;

/// The largest request body the API reads: its bodies are a few hundred
/// bytes.
pub(super) const MAX_BODY: usize = 16 * 1024;

/// Where every route of the API starts.
pub(super) const PREFIX: &str = "/api/v1";

/// Every route of the API: its method, path and handler. The router is
/// built from this list, and a test compares it with the document's
/// paths.
pub(super) fn routes() -> Vec<(Method, &'static str, MethodRouter<Arc<Dashboard>>)> {
    vec![
        (Method::GET, "/api/v1/openapi.json", get(doc::openapi)),
        (Method::GET, "/api/v1/jobs", get(reads::jobs)),
        (Method::GET, "/api/v1/jobs/{name}", get(reads::job)),
        (
            Method::GET,
            "/api/v1/jobs/{name}/history",
            get(reads::history),
        ),
        (
            Method::GET,
            "/api/v1/jobs/{name}/explain",
            get(reads::explain),
        ),
        (
            Method::POST,
            "/api/v1/jobs/{name}/trigger",
            post(actions::trigger),
        ),
        (
            Method::POST,
            "/api/v1/jobs/{name}/pause",
            post(actions::pause),
        ),
        (
            Method::POST,
            "/api/v1/jobs/{name}/resume",
            post(actions::resume),
        ),
        (
            Method::POST,
            "/api/v1/jobs/{name}/kill",
            post(actions::kill),
        ),
        (Method::GET, "/api/v1/runs", get(reads::runs)),
        (Method::GET, "/api/v1/replicas", get(reads::replicas)),
        (
            Method::POST,
            "/api/v1/replicas/{id}/drain",
            post(actions::drain),
        ),
        (
            Method::POST,
            "/api/v1/replicas/{id}/undrain",
            post(actions::undrain),
        ),
        (Method::GET, "/api/v1/locks", get(reads::locks)),
    ]
}

/// The API's router: [`routes`], a JSON 404 for any other path under
/// [`PREFIX`], and bodies up to [`MAX_BODY`].
pub(super) fn router() -> Router<Arc<Dashboard>> {
    routes()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| {
            router.route(path, handler.fallback(wrong_method))
        })
        .route("/api/v1/{*rest}", any(no_route))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

async fn no_route(method: Method, uri: axum::http::Uri) -> Response {
    ApiError::new(
        ErrorCode::RouteNotFound,
        format!(
            "no route {method} {}: the routes are listed in {PREFIX}/openapi.json",
            uri.path()
        ),
    )
    .into_response()
}

async fn wrong_method(method: Method, uri: axum::http::Uri) -> Response {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!(
            "{} takes no {method}: reads are GET, actions POST (see {PREFIX}/openapi.json)",
            uri.path()
        ),
    )
    .into_response()
}

/// The kind of an error: its `code` in the body, stable across versions,
/// and its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum ErrorCode {
    /// 400: a query parameter that cannot be taken.
    InvalidQuery,
    /// 400: a body that is not the JSON object expected (or has a field
    /// it does not take).
    InvalidBody,
    /// 400: a run's parameters that do not fit the job's.
    InvalidParams,
    /// 400: a pause's `until` or `reason` that cannot be taken.
    InvalidPause,
    /// 400: a trigger's `traceparent` header that is not a W3C trace
    /// context (version 00, ids in lowercase hex, not all zeros).
    InvalidTraceparent,
    /// 401: no token given.
    TokenMissing,
    /// 401: the token given is none of the dashboard's.
    TokenInvalid,
    /// 403: this replica has no dashboard token, so no action is taken.
    ActionsDisabled,
    /// 403: the token's role does not take this action (a viewer takes
    /// none, an operator no replica action).
    RoleForbidden,
    /// 404: no job of that name.
    JobNotFound,
    /// 404: no replica of that id.
    ReplicaNotFound,
    /// 404: no such route under `/api/v1`.
    RouteNotFound,
    /// 405: a route called with a method it does not take.
    MethodNotAllowed,
    /// 409: the job is paused (resume it first).
    JobPaused,
    /// 409: the cluster is paused (`cronlease resume --all` first).
    ClusterPaused,
    /// 409: no run of the job (or not the run named) is in flight.
    NotInFlight,
    /// 409: a broadcast job (`mode = "every_replica"`) is not run on
    /// demand.
    BroadcastJob,
    /// 413: the body is larger than the API reads.
    PayloadTooLarge,
    /// 415: a body that is not `application/json`.
    UnsupportedMediaType,
    /// 429: too many wrong tokens from this address (see `Retry-After`).
    TooManyAttempts,
    /// 500: data in Redis that cronlease did not write (named in the
    /// message).
    UnreadableData,
    /// 503: Redis cannot be reached or answered with an error.
    RedisUnavailable,
}

impl ErrorCode {
    pub(super) fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidQuery
            | ErrorCode::InvalidBody
            | ErrorCode::InvalidParams
            | ErrorCode::InvalidPause
            | ErrorCode::InvalidTraceparent => StatusCode::BAD_REQUEST,
            ErrorCode::TokenMissing | ErrorCode::TokenInvalid => StatusCode::UNAUTHORIZED,
            ErrorCode::ActionsDisabled | ErrorCode::RoleForbidden => StatusCode::FORBIDDEN,
            ErrorCode::JobNotFound | ErrorCode::ReplicaNotFound | ErrorCode::RouteNotFound => {
                StatusCode::NOT_FOUND
            }
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::JobPaused
            | ErrorCode::ClusterPaused
            | ErrorCode::NotInFlight
            | ErrorCode::BroadcastJob => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::TooManyAttempts => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::UnreadableData => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::RedisUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error's body: `{"error": {"code": "job_not_found", "message": "…"}}`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ErrorBody {
    error: ErrorDetail,
}

/// What went wrong: its kind and a sentence for a person.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ErrorDetail {
    code: ErrorCode,
    /// What went wrong, and what would be valid.
    message: String,
}

/// An error the API answers.
#[derive(Debug)]
pub(super) struct ApiError {
    code: ErrorCode,
    message: String,
    /// Seconds, for `Retry-After` (a 429).
    retry_after: Option<u64>,
}

impl ApiError {
    /// The error's kind.
    pub(in crate::dashboard) fn code(&self) -> ErrorCode {
        self.code
    }

    /// The error's sentence.
    pub(in crate::dashboard) fn message(&self) -> &str {
        &self.message
    }

    pub(super) fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = json(self.code.status(), &body);
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.code.status() == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<OperatorError> for ApiError {
    fn from(e: OperatorError) -> ApiError {
        let code = match &e {
            OperatorError::UnknownJob(_) => ErrorCode::JobNotFound,
            OperatorError::BadReplica(_) => ErrorCode::ReplicaNotFound,
            OperatorError::Paused(_) => ErrorCode::JobPaused,
            OperatorError::ClusterPaused => ErrorCode::ClusterPaused,
            OperatorError::BadPause(_) => ErrorCode::InvalidPause,
            OperatorError::Params { .. } | OperatorError::ParamsWithoutTable => {
                ErrorCode::InvalidParams
            }
            OperatorError::NotInFlight(_) => ErrorCode::NotInFlight,
            OperatorError::Broadcast(_) => ErrorCode::BroadcastJob,
            OperatorError::Unreadable { .. } => ErrorCode::UnreadableData,
            OperatorError::Store(_) => ErrorCode::RedisUnavailable,
        };
        let message = match code {
            ErrorCode::RedisUnavailable => format!("cannot reach Redis: {e}"),
            _ => e.to_string(),
        };
        ApiError::new(code, message)
    }
}

impl From<ViewError> for ApiError {
    fn from(e: ViewError) -> ApiError {
        match e {
            ViewError::NoJob(_) => ApiError::new(ErrorCode::JobNotFound, e.to_string()),
            ViewError::BadQuery(message) => ApiError::new(ErrorCode::InvalidQuery, message),
            ViewError::Redis(e) => e.into(),
        }
    }
}

/// `value` as JSON with `status`, never cached.
pub(super) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    let mut response = (status, axum::Json(value)).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Who a request says it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Identity {
    /// No token, no login cookie.
    Nobody,
    /// One of the dashboard's tokens, as a bearer token.
    Token(Holder),
    /// The pages' login cookie (a browser that logged in with a token),
    /// without a form's CSRF token: reads only.
    LoggedIn(Holder),
    /// A page's form: the login cookie, its CSRF token and the same
    /// origin (`auth::form_holder`).
    Form(Holder),
    /// A bearer token that is none of the dashboard's (or a malformed
    /// `Authorization` header).
    Wrong,
}

impl Identity {
    /// The jobs this identity sees: its token's, else every job.
    pub(super) fn scope(&self) -> Scope {
        match self {
            Identity::Token(holder) | Identity::LoggedIn(holder) | Identity::Form(holder) => {
                holder.scope().clone()
            }
            Identity::Nobody | Identity::Wrong => Scope::All,
        }
    }
}

/// What a request asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Permission<'a> {
    /// Read what the pages show: lists (`Subject::Cluster`, filtered to
    /// the token's jobs) or one job.
    Read(Subject<'a>),
    /// Take this action on this subject.
    Act(ActionKind, Subject<'a>),
}

/// What a read or an action is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Subject<'a> {
    /// The cluster: lists, replicas.
    Cluster,
    /// One job, by name.
    Job(&'a str),
}

/// The actions the API takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ActionKind {
    Trigger,
    Pause,
    Resume,
    Kill,
    Drain,
    Undrain,
}

impl ActionKind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ActionKind::Trigger => "trigger",
            ActionKind::Pause => "pause",
            ActionKind::Resume => "resume",
            ActionKind::Kill => "kill",
            ActionKind::Drain => "drain",
            ActionKind::Undrain => "undrain",
        }
    }

    /// The least role that takes the action: job actions an operator,
    /// the replicas' drain and undrain an admin.
    pub(super) fn role(self) -> DashboardRole {
        match self {
            ActionKind::Trigger | ActionKind::Pause | ActionKind::Resume | ActionKind::Kill => {
                DashboardRole::Operator
            }
            ActionKind::Drain | ActionKind::Undrain => DashboardRole::Admin,
        }
    }
}

/// The identity of a request from `peer` with `headers`: a wrong bearer
/// token is counted against the address, and an address with too many is
/// refused (429) before its token is looked at.
pub(super) fn identify(
    dashboard: &Dashboard,
    headers: &HeaderMap,
    peer: SocketAddr,
) -> Result<Identity, ApiError> {
    let keys = dashboard.keys();
    let Some(authorization) = headers.get(header::AUTHORIZATION) else {
        return Ok(match Visitor::of(&keys, headers) {
            Visitor::Operator(holder) => Identity::LoggedIn(holder),
            Visitor::ReadOnly | Visitor::Anonymous => Identity::Nobody,
        });
    };
    if let Err(wait) = dashboard.throttle.check(peer.ip()) {
        let seconds = wait.as_secs().max(1);
        tracing::warn!(peer = %peer, retry_after_s = seconds, "dashboard API throttled: too many wrong tokens from this address");
        return Err(ApiError {
            retry_after: Some(seconds),
            ..ApiError::new(
                ErrorCode::TooManyAttempts,
                format!("too many wrong tokens from your address: try again in {seconds} s"),
            )
        });
    }
    let bearer = authorization
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Bearer "));
    match bearer.and_then(|bearer| keys.bearer(bearer)) {
        Some(key) => Ok(Identity::Token(Holder { key, person: None })),
        None => {
            dashboard.throttle.failed(peer.ip());
            tracing::warn!(peer = %peer, "dashboard API: a wrong bearer token");
            Ok(Identity::Wrong)
        }
    }
}

/// Whether `identity` may do `permission` on this dashboard: the one
/// check every route of the API and every form of the pages passes (the
/// pages' buttons too). Reads follow the pages (open unless `[daemon]
/// dashboard_read = "token"` with a token); actions need a token as a
/// bearer token or a page's form (the login cookie alone would need the
/// pages' CSRF token), whose role takes the action: a viewer none, an
/// operator the job actions, an admin every action. A job outside the
/// token's `jobs` is not found (404), as if it did not exist.
pub(super) fn permit(
    dashboard: &Dashboard,
    identity: &Identity,
    permission: Permission<'_>,
) -> Result<(), ApiError> {
    let has_token = !dashboard.keys().is_empty();
    let wrong = || {
        ApiError::new(
            ErrorCode::TokenInvalid,
            "the token given is none of the dashboard's (expected `Authorization: Bearer <token>` with the token of [daemon] dashboard_token_env or dashboard_token_file, or of a [[dashboard.tokens]] entry)",
        )
    };
    let missing = |what: &str| {
        ApiError::new(
            ErrorCode::TokenMissing,
            format!("{what} needs a dashboard token: send `Authorization: Bearer <token>`"),
        )
    };
    let hidden = |holder: &Holder, subject: Subject<'_>| match subject {
        Subject::Job(name) if !holder.scope().sees(name) => Err(ApiError::new(
            ErrorCode::JobNotFound,
            format!("no job {name:?} in this replica's job table"),
        )),
        _ => Ok(()),
    };
    match permission {
        Permission::Read(subject) => {
            let open = !has_token || dashboard.read == DashboardRead::Public;
            match identity {
                Identity::Wrong => Err(wrong()),
                Identity::Token(holder) | Identity::LoggedIn(holder) | Identity::Form(holder) => {
                    hidden(holder, subject)
                }
                Identity::Nobody if open => Ok(()),
                Identity::Nobody => Err(missing("reading (dashboard_read = \"token\")")),
            }
        }
        Permission::Act(action, subject) => match identity {
            _ if !has_token => Err(ApiError::new(
                ErrorCode::ActionsDisabled,
                format!(
                    "actions are off ({} refused): this replica has no dashboard token ([daemon] dashboard_token_env or dashboard_token_file, or [[dashboard.tokens]])",
                    action.as_str()
                ),
            )),
            Identity::Token(holder) | Identity::Form(holder) => {
                hidden(holder, subject)?;
                let needed = action.role();
                if holder.key.role >= needed {
                    Ok(())
                } else {
                    Err(ApiError::new(
                        ErrorCode::RoleForbidden,
                        format!(
                            "the token {:?} has the role {}: {} needs the role {}{} (the guide, \"Access\")",
                            holder.key.name,
                            holder.key.role.as_str(),
                            action.as_str(),
                            needed.as_str(),
                            if needed == DashboardRole::Admin {
                                ""
                            } else {
                                " or admin"
                            },
                        ),
                    ))
                }
            }
            Identity::Wrong => Err(wrong()),
            Identity::Nobody | Identity::LoggedIn(_) => {
                Err(missing(&format!("an action ({})", action.as_str())))
            }
        },
    }
}

/// The request's identity, if it may do `permission`.
pub(super) fn check(
    dashboard: &Dashboard,
    headers: &HeaderMap,
    peer: SocketAddr,
    permission: Permission<'_>,
) -> Result<Identity, ApiError> {
    let identity = identify(dashboard, headers, peer)?;
    permit(dashboard, &identity, permission)?;
    Ok(identity)
}

/// Who an action by `identity` from `peer` is recorded as in the job's
/// (or the cluster's) actions, as the pages record theirs.
pub(super) fn recorded_as(dashboard: &Dashboard, identity: &Identity, peer: SocketAddr) -> String {
    let name = match identity {
        Identity::Token(holder) | Identity::LoggedIn(holder) | Identity::Form(holder) => {
            holder.who()
        }
        Identity::Nobody | Identity::Wrong => "nobody".to_string(),
    };
    auth::recorded_as(&name, &dashboard.replica, peer)
}

/// An action's body as `T`: none (or an empty one) is `T::default()`;
/// else JSON (`Content-Type: application/json`) with no field `T` does
/// not take.
pub(super) fn body<T: DeserializeOwned + Default>(
    headers: &HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = bytes.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the body is larger than {MAX_BODY} bytes"),
            )
        } else {
            ApiError::new(ErrorCode::InvalidBody, format!("cannot read the body: {e}"))
        }
    })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let media = content_type.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("the body's Content-Type is {content_type:?}: expected application/json"),
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(ErrorCode::InvalidBody, format!("the body: {e}")))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use utoipa::OpenApi as _;

    use super::doc::ApiDoc;
    use super::*;

    /// Every route the router has is in the document, and every path the
    /// document lists is a route, with the same methods.
    #[test]
    fn the_document_lists_the_routes_of_the_router() {
        let routed: BTreeSet<(String, String)> = routes()
            .into_iter()
            .map(|(method, path, _)| (method.to_string(), path.to_string()))
            .collect();
        let doc = ApiDoc::openapi();
        let mut documented = BTreeSet::new();
        for (path, item) in &doc.paths.paths {
            for (method, operation) in [("GET", &item.get), ("POST", &item.post)] {
                if operation.is_some() {
                    documented.insert((method.to_string(), path.clone()));
                }
            }
            assert!(
                item.put.is_none() && item.delete.is_none() && item.patch.is_none(),
                "{path}: a method the router does not route"
            );
        }
        assert_eq!(routed, documented);
    }

    #[test]
    fn the_document_is_openapi_3_1() {
        let doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        assert_eq!(doc["openapi"], "3.1.0");
    }
}
