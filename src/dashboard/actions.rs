//! The dashboard's actions — run now, pause, resume, kill — and logging in and
//! out: every action through `auth::authorize` and then `operator`, as
//! the command line takes them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Form, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Dashboard;
use super::api::{ActionKind, ErrorCode, Identity, Permission, Subject, permit};
use super::auth::{self, Holder, Refusal, Visitor};
use super::data::{self, JobAction};
use super::pages::{error_page, layout, respond};
use crate::operator::{self, OperatorError};

/// An action form: its CSRF token and, for a run now, the values of the
/// job's parameters (`param.<name>` fields; any other field is ignored).
#[derive(Debug, Default, Deserialize)]
pub(super) struct ActionForm {
    #[serde(default)]
    csrf: Option<String>,
    #[serde(flatten)]
    fields: BTreeMap<String, String>,
}

impl ActionForm {
    /// The parameters given: each `param.<name>` field, name and value.
    fn params(&self) -> Vec<(String, String)> {
        let prefix = crate::config::PARAM_FIELD_PREFIX;
        let given = self.fields.iter().filter_map(|(field, value)| {
            let name = field.strip_prefix(prefix)?;
            Some((name.to_string(), value.clone()))
        });
        given.collect()
    }

    /// A pause's `until` (RFC 3339 or a duration from now, as `cronlease
    /// pause --until` takes) and `reason` fields, checked as the command
    /// line checks them; empty fields are none.
    fn pause_options(&self) -> Result<operator::PauseOptions, OperatorError> {
        let field = |name: &str| {
            self.fields
                .get(name)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let until = match field("until") {
            Some(text) => Some(
                operator::Until::parse(text)
                    .map_err(|e| OperatorError::BadPause(format!("until: {e}")))?,
            ),
            None => None,
        };
        let reason = field("reason").unwrap_or_default().to_string();
        operator::check_reason(&reason).map_err(OperatorError::BadPause)?;
        Ok(operator::PauseOptions { until, reason })
    }
}

/// What an action does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Trigger,
    Pause,
    Resume,
    Kill,
}

impl Action {
    fn parse(text: &str) -> Option<Action> {
        match text {
            "trigger" => Some(Action::Trigger),
            "pause" => Some(Action::Pause),
            "resume" => Some(Action::Resume),
            "kill" => Some(Action::Kill),
            _ => None,
        }
    }

    /// The form's action of a job action.
    fn of(action: &JobAction) -> Action {
        match action {
            JobAction::Trigger(..) => Action::Trigger,
            JobAction::Pause(_) => Action::Pause,
            JobAction::Resume => Action::Resume,
            JobAction::Kill(_) => Action::Kill,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Action::Trigger => "trigger",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Kill => "kill",
        }
    }
}

/// Whether the request came from a script with a bearer token (answered
/// in plain text) or from the page's form (answered with a redirect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Caller {
    Script,
    Browser,
}

/// What the form asks of the job: the action with its fields (a run now's
/// parameters, a pause's end and reason, the run to kill).
fn job_action(action: Action, form: &ActionForm) -> Result<JobAction, OperatorError> {
    Ok(match action {
        Action::Trigger => JobAction::Trigger(form.params(), None),
        Action::Pause => JobAction::Pause(form.pause_options()?),
        Action::Resume => JobAction::Resume,
        Action::Kill => match form.fields.get("run").filter(|r| !r.is_empty()) {
            Some(run_id) => JobAction::Kill(Some(run_id.clone())),
            None => {
                return Err(OperatorError::NotInFlight(
                    "no run named: the form's `run` field is empty".to_string(),
                ));
            }
        },
    })
}

/// Who sent an action's form, for the job and the replica forms alike:
/// the visitor the answer is for, whether a script (a bearer token) or a
/// browser sent it, and the holder its token or login names; or the
/// answer that refuses it. A bearer token is a guess like a login's:
/// counted and throttled. `(what, action)` name what was asked, for the
/// log.
pub(super) fn form_sender(
    dashboard: &Dashboard,
    headers: &HeaderMap,
    peer: SocketAddr,
    csrf: Option<&str>,
    (what, action): (&str, &str),
) -> Result<(Visitor, Caller, auth::Holder), Box<Response>> {
    let keys = dashboard.keys();
    let visitor = Visitor::of(&keys, headers);
    let caller = if headers.contains_key(header::AUTHORIZATION) {
        Caller::Script
    } else {
        Caller::Browser
    };
    if caller == Caller::Script
        && let Err(wait) = dashboard.throttle.check(peer.ip())
    {
        return Err(Box::new(too_many(dashboard, &visitor, wait, peer)));
    }
    match auth::form_holder(&keys, headers, csrf) {
        Ok(holder) => Ok((visitor, caller, holder)),
        Err(refusal) => {
            if caller == Caller::Script && refusal == Refusal::NotAuthorized {
                dashboard.throttle.failed(peer.ip());
            }
            tracing::warn!(what, action, peer = %peer, reason = %refusal, "dashboard action refused");
            Err(Box::new(refused(dashboard, &visitor, &refusal)))
        }
    }
}

/// `POST /jobs/{name}/{action}`: run now, pause, resume or kill (the run
/// its `run` field names, as `cronlease kill JOB RUN_ID`). Refused with
/// 403 and no change unless `auth::authorize` accepts the request.
pub(super) async fn act(
    State(dashboard): State<Arc<Dashboard>>,
    Path((name, action)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<ActionForm>, FormRejection>,
) -> Response {
    // A request that is not a form is refused like any other without its
    // CSRF token (403, not 415: it changes nothing either way).
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let what = format!("job {name}");
    let (visitor, caller, holder) = match form_sender(
        &dashboard,
        &headers,
        peer,
        form.csrf.as_deref(),
        (&what, &action),
    ) {
        Ok(sender) => sender,
        Err(answer) => return *answer,
    };
    let Some(action) = Action::parse(&action) else {
        return error_page(
            &dashboard,
            &visitor,
            StatusCode::NOT_FOUND,
            &format!("no action {action:?}: expected trigger, pause, resume or kill"),
        );
    };
    let who = match permitted(
        &dashboard,
        &holder,
        caller,
        ActionKind::from(action),
        Subject::Job(&name),
        peer,
    ) {
        Ok(who) => who,
        Err(refusal) => {
            tracing::warn!(job = %name, action = action.as_str(), peer = %peer, reason = %refusal, "dashboard action refused");
            return refused(&dashboard, &visitor, &refusal);
        }
    };
    let action = match job_action(action, &form) {
        Ok(job_action) => job_action,
        Err(e) => return answer(&dashboard, &visitor, caller, action, &name, Err(e)),
    };
    let result = match data::act(&dashboard, &name, &action, &who).await {
        Ok(Some(done)) => Ok(done.run()),
        Ok(None) => {
            return error_page(
                &dashboard,
                &visitor,
                StatusCode::NOT_FOUND,
                &format!("no job {name:?}"),
            );
        }
        Err(e) => Err(e),
    };
    answer(
        &dashboard,
        &visitor,
        caller,
        Action::of(&action),
        &name,
        result,
    )
}

impl From<Action> for ActionKind {
    fn from(action: Action) -> ActionKind {
        match action {
            Action::Trigger => ActionKind::Trigger,
            Action::Pause => ActionKind::Pause,
            Action::Resume => ActionKind::Resume,
            Action::Kill => ActionKind::Kill,
        }
    }
}

/// Whether `holder` (a bearer token from a script, a form's login from a
/// browser) may take `kind` on `subject`, as `api::permit` decides for
/// the API: who the action is recorded as when it may.
pub(super) fn permitted(
    dashboard: &Dashboard,
    holder: &Holder,
    caller: Caller,
    kind: ActionKind,
    subject: Subject<'_>,
    peer: SocketAddr,
) -> Result<String, Refusal> {
    let identity = match caller {
        Caller::Script => Identity::Token(holder.clone()),
        Caller::Browser => Identity::Form(holder.clone()),
    };
    permit(dashboard, &identity, Permission::Act(kind, subject)).map_err(|e| match e.code() {
        ErrorCode::JobNotFound => Refusal::Hidden(e.message().to_string()),
        ErrorCode::RoleForbidden => Refusal::Role(e.message().to_string()),
        _ => Refusal::NotAuthorized,
    })?;
    Ok(auth::recorded_as(&holder.who(), &dashboard.replica, peer))
}

/// What the caller is told of an action's `result`: a script a line, a
/// browser the job's page (or an error page either way).
fn answer(
    dashboard: &Dashboard,
    visitor: &Visitor,
    caller: Caller,
    action: Action,
    name: &str,
    result: Result<String, OperatorError>,
) -> Response {
    match result {
        Ok(run) => match caller {
            Caller::Script => (
                StatusCode::OK,
                format!("{} {name} {run}\n", action.as_str()),
            )
                .into_response(),
            Caller::Browser => Redirect::to(&format!(
                "/jobs/{name}?done={}&run={}",
                action.as_str(),
                auth::percent_encode(&run)
            ))
            .into_response(),
        },
        Err(OperatorError::Paused(job)) => error_page(
            dashboard,
            visitor,
            StatusCode::CONFLICT,
            &format!("{job} is paused: resume it first"),
        ),
        Err(OperatorError::BadPause(e)) => error_page(
            dashboard,
            visitor,
            StatusCode::BAD_REQUEST,
            &format!("Pause refused, nothing changed: {e}."),
        ),
        Err(OperatorError::ClusterPaused) => error_page(
            dashboard,
            visitor,
            StatusCode::CONFLICT,
            "The cluster is paused (cronlease pause --all): resume it first",
        ),
        Err(OperatorError::NotInFlight(e)) => error_page(
            dashboard,
            visitor,
            StatusCode::CONFLICT,
            &format!("Kill refused, nothing changed: {e}."),
        ),
        Err(e @ (OperatorError::Params { .. } | OperatorError::ParamsWithoutTable)) => error_page(
            dashboard,
            visitor,
            StatusCode::BAD_REQUEST,
            &format!("Run now refused: {e}."),
        ),
        Err(e) => error_page(
            dashboard,
            visitor,
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("{} {name} failed: {e}", action.as_str()),
        ),
    }
}

/// The page of a refused action: 404 for a job the token does not see
/// (as for one that does not exist), else 403.
pub(super) fn refused(dashboard: &Dashboard, visitor: &Visitor, refusal: &Refusal) -> Response {
    let status = match refusal {
        Refusal::Hidden(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::FORBIDDEN,
    };
    error_page(
        dashboard,
        visitor,
        status,
        &format!("Refused, nothing changed: {refusal}."),
    )
}

/// `429` with `Retry-After`: too many wrong tokens from this address.
pub(super) fn too_many(
    dashboard: &Dashboard,
    visitor: &Visitor,
    wait: Duration,
    peer: SocketAddr,
) -> Response {
    let seconds = wait.as_secs().max(1);
    tracing::warn!(peer = %peer, retry_after_s = seconds, "dashboard login throttled: too many wrong tokens from this address");
    let mut response = error_page(
        dashboard,
        visitor,
        StatusCode::TOO_MANY_REQUESTS,
        &format!("Too many wrong tokens from your address: try again in {seconds} s."),
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
}

/// `GET /login`'s query.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LoginQuery {
    #[serde(default)]
    next: String,
}

/// `GET /login`: the token form.
pub(super) async fn login_form(
    State(dashboard): State<Arc<Dashboard>>,
    Query(query): Query<LoginQuery>,
    headers: HeaderMap,
) -> Response {
    let visitor = Visitor::of(&dashboard.keys(), &headers);
    if visitor == Visitor::ReadOnly {
        return refused(&dashboard, &visitor, &Refusal::NoToken);
    }
    respond(
        StatusCode::OK,
        login_page(
            &dashboard,
            &visitor,
            auth::login_destination(&query.next),
            None,
        ),
    )
}

fn login_page(dashboard: &Dashboard, visitor: &Visitor, next: &str, error: Option<&str>) -> Markup {
    let keys = dashboard.keys();
    let (sso, tokens) = (keys.sso().is_some(), keys.has_tokens());
    layout(
        dashboard,
        visitor,
        "Log in",
        0,
        html! {},
        html! {
            h1 { "Log in" }
            @if sso {
                p { a.button #sso href=(format!("/sso/login?next={}", auth::percent_encode(next))) { "Sign in with single sign-on" } " — your organisation's account; its groups decide what you may do, and your name is recorded with every action you take." }
            }
            @if tokens {
                p { "Any of the dashboard's tokens: the one in this replica's " code { "dashboard_token_env" } " or " code { "dashboard_token_file" } ", or one of its " code { "[[dashboard.tokens]]" } ", whose role decides what you may do. Your name is recorded with every action you take." }
            }
            @if let Some(error) = error { p.error role="alert" { (error) } }
            @if tokens {
                form.login method="post" action="/login" {
                    input type="hidden" name="next" value=(next);
                    label { "Your name " input #name type="text" name="name" required autocomplete="username"; }
                    label { "Operator token " input #token type="password" name="token" required autocomplete="current-password"; }
                    button #login type="submit" { "Log in" }
                }
            }
        },
    )
}

/// `POST /login`'s form.
#[derive(Debug, Default, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    next: String,
}

/// `POST /login`: sets the session cookie when the token is right.
pub(super) async fn login(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let keys = dashboard.keys();
    let visitor = Visitor::of(&keys, &headers);
    if let Err(wait) = dashboard.throttle.check(peer.ip()) {
        return too_many(&dashboard, &visitor, wait, peer);
    }
    let key = match auth::login(&keys, &headers, &form.token) {
        Ok(key) => key,
        Err(refusal) => {
            if refusal == Refusal::NotAuthorized {
                dashboard.throttle.failed(peer.ip());
            }
            tracing::warn!(peer = %peer, reason = %refusal, "dashboard login refused");
            return respond(
                StatusCode::FORBIDDEN,
                login_page(
                    &dashboard,
                    &visitor,
                    &form.next,
                    Some(&format!("Refused: {refusal}.")),
                ),
            );
        }
    };
    let name: String = form
        .name
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    let name = if name.is_empty() {
        "operator".to_string()
    } else {
        name
    };
    tracing::info!(peer = %peer, operator = %name, token = %key.name, role = key.role.as_str(), "dashboard login");
    // Only a path on this site: never an open redirect.
    let mut response = Redirect::to(auth::login_destination(&form.next)).into_response();
    for cookie in auth::login_cookies(&key, &name) {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}

/// `POST /logout`: forgets the token's login and a single sign-on's
/// sign-in (its record deleted, then the provider's logout when it has
/// one).
pub(super) async fn logout(
    State(dashboard): State<Arc<Dashboard>>,
    headers: HeaderMap,
) -> Response {
    let (to, sso_cookie) = super::sso::sign_out(&dashboard, &headers).await;
    let mut response = Redirect::to(to.as_deref().unwrap_or("/")).into_response();
    if let Ok(value) = HeaderValue::from_str(&sso_cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    for cookie in auth::logout_cookies() {
        if let Ok(value) = HeaderValue::from_str(&cookie) {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
    }
    response
}
