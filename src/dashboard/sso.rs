//! Single sign-on (`[dashboard.oidc]`): `GET /sso/login` sends the
//! browser to the provider with a flow cookie (state, nonce, PKCE
//! verifier: `HttpOnly`, `SameSite=Lax`, ten minutes), `GET /sso/callback`
//! takes it back, has `oidc` exchange the code and check the ID token,
//! maps the role claim to a role and job scope (`[[dashboard.oidc.roles]]`,
//! the first entry whose value the claim holds) and stores the sign-in in
//! Redis under the SHA-256 of a random id that only the browser's cookie
//! holds, with the sign-in's lifetime as its expiry. Any replica reads it
//! back (`resolve`, a layer in front of every route), so the pages, the
//! forms and the API see a signed-in person as they see a token's holder,
//! recorded as `sso IDENTITY`. A logout deletes the record and, when the
//! provider has an `end_session_endpoint`, ends the sign-in there too.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::{Deserialize, Serialize};

use super::Dashboard;
use super::auth::{self, Holder, Visitor};
use super::keys::{Key, KeyKind, Scope};
use super::oidc::{self, Claims, Flow, Provider, SignInError};
use super::pages::{layout, respond};
use super::token::Token;
use crate::config::{DashboardRole, OidcSpec};

/// The cookie holding a sign-in's random id.
pub(super) const SIGN_IN_COOKIE: &str = "cronlease_sso";
/// The cookie holding a sign-in's flow while the provider has the browser.
const FLOW_COOKIE: &str = "cronlease_sso_flow";
/// How long a browser may stay at the provider.
const FLOW_SECONDS: u64 = 600;
/// The longest identity or claim value kept.
const MAX_TEXT: usize = 256;

/// A sign-in as Redis holds it (`Keys::sign_in`).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    /// Who signed in (the identity claim).
    who: String,
    /// The provider that vouched for it.
    issuer: String,
    /// The role claim's values: mapped at each request, so a reload's
    /// mapping applies at once.
    values: Vec<String>,
    /// The ID token, for the provider's logout.
    id_token: String,
}

/// A layer in front of every route: reads the request's sign-in from
/// Redis (when single sign-on is configured and the browser has the
/// cookie), for `Visitor::of` to find while the request is served.
pub(super) async fn resolve(
    State(dashboard): State<Arc<Dashboard>>,
    request: Request,
    next: Next,
) -> Response {
    let holder = holder_of(&dashboard, request.headers()).await;
    let mut response = auth::SIGNED_IN.scope(holder, next.run(request)).await;
    if let Some(provider) = dashboard.keys().sso() {
        allow_logout_form(&mut response, &provider.logout_origin());
    }
    response
}

/// A page's `form-action` also allows `origin`, the provider's logout:
/// the logout form's answer leads the browser there.
fn allow_logout_form(response: &mut Response, origin: &str) {
    const CSP: &str = "content-security-policy";
    let Some(policy) = response.headers().get(CSP).and_then(|v| v.to_str().ok()) else {
        return;
    };
    let policy = policy.replace(
        "form-action 'self'",
        &format!("form-action 'self' {origin}"),
    );
    if let Ok(value) = HeaderValue::from_str(&policy) {
        response.headers_mut().insert(CSP, value);
    }
}

/// The holder the request's sign-in cookie names, if its record is in
/// Redis, reads as one cronlease wrote, and its values map to a role.
async fn holder_of(dashboard: &Dashboard, headers: &HeaderMap) -> Option<Holder> {
    let keys = dashboard.keys();
    let provider = keys.sso()?;
    let id = auth::cookie(headers, SIGN_IN_COOKIE).filter(|id| id.len() == 43)?;
    let record = match dashboard.store.sign_in(&oidc::sha256_hex(&id)).await {
        Ok(Some(raw)) => raw,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "dashboard: a sign-in cannot be read from Redis");
            return None;
        }
    };
    let record = match serde_json::from_str::<Record>(&record) {
        Ok(r) if printable(&r.who) && r.values.iter().all(|v| v.len() <= MAX_TEXT) => r,
        _ => {
            tracing::warn!("dashboard: a sign-in record that is not one cronlease wrote, skipped");
            return None;
        }
    };
    if record.issuer != provider.spec.issuer {
        return None;
    }
    let (role, scope) = role_of(&provider.spec, &record.values)?;
    Some(Holder {
        key: Arc::new(Key {
            name: record.who,
            role,
            scope,
            kind: KeyKind::Sso,
            // The forms' CSRF token is an HMAC under the sign-in's id.
            token: Token::new(&id).ok()?,
        }),
        person: None,
    })
}

/// Whether `text` may be shown and logged: 1 to [`MAX_TEXT`] bytes, no
/// control character.
fn printable(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_TEXT && !text.chars().any(char::is_control)
}

/// The role and jobs of the first `[[dashboard.oidc.roles]]` entry whose
/// value is among `values`.
fn role_of(spec: &OidcSpec, values: &[String]) -> Option<(DashboardRole, Scope)> {
    let entry = spec.roles.iter().find(|r| values.contains(&r.value))?;
    let scope = match &entry.jobs {
        None => Scope::All,
        Some(patterns) => Scope::Jobs(patterns.to_vec()),
    };
    Some((entry.role, scope))
}

/// `GET /sso/login?next=…` and `/sso/callback`'s query.
#[derive(Debug, Default, Deserialize)]
pub(super) struct SsoQuery {
    #[serde(default)]
    next: String,
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
    /// The issuer of the answer (RFC 9207), when the provider names it.
    iss: Option<String>,
}

/// `GET /sso/login`: to the provider's sign-in, with a new flow.
pub(super) async fn start(
    State(dashboard): State<Arc<Dashboard>>,
    Query(query): Query<SsoQuery>,
) -> Response {
    let keys = dashboard.keys();
    let Some(provider) = keys.sso() else {
        return not_configured(&dashboard);
    };
    let flow = Flow::new(auth::login_destination(&query.next));
    match provider.authorization_url(&flow).await {
        Ok(url) => {
            let mut response = Redirect::to(&url).into_response();
            let cookie = format!(
                "{FLOW_COOKIE}={}; Path=/sso; HttpOnly; SameSite=Lax; Max-Age={FLOW_SECONDS}{}",
                flow.to_cookie(),
                secure(provider)
            );
            set_cookie(&mut response, &cookie);
            response
        }
        Err(e) => {
            tracing::warn!(reason = %e, "dashboard sign-in cannot start");
            refusal(&dashboard, StatusCode::BAD_GATEWAY, &e)
        }
    }
}

/// `GET /sso/callback`: the provider's answer checked, the sign-in
/// stored and its cookie set; or the refusal page naming why.
pub(super) async fn callback(
    State(dashboard): State<Arc<Dashboard>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(query): Query<SsoQuery>,
    headers: HeaderMap,
) -> Response {
    let keys = dashboard.keys();
    let Some(provider) = keys.sso() else {
        return not_configured(&dashboard);
    };
    let flow = auth::cookie(&headers, FLOW_COOKIE).and_then(|c| Flow::from_cookie(&c));
    let result = match flow {
        Some(flow) => finish(&dashboard, provider, &query, &flow)
            .await
            .map(|done| (done, flow.next)),
        None => Err(SignInError::State),
    };
    let mut response = match result {
        Ok(((id, who, role), next)) => {
            tracing::info!(peer = %peer, identity = %who, role = role.as_str(), "dashboard sign-in");
            let mut response = Redirect::to(auth::login_destination(&next)).into_response();
            let cookie = format!(
                "{SIGN_IN_COOKIE}={id}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{}",
                provider.spec.lifetime.as_secs().max(1),
                secure(provider)
            );
            set_cookie(&mut response, &cookie);
            response
        }
        Err(e) => {
            tracing::warn!(peer = %peer, reason = %e, "dashboard sign-in refused");
            refusal(&dashboard, StatusCode::FORBIDDEN, &e)
        }
    };
    let gone = format!("{FLOW_COOKIE}=; Path=/sso; HttpOnly; SameSite=Lax; Max-Age=0");
    set_cookie(&mut response, &gone);
    response
}

/// The callback's checks in order, then the record stored: the new
/// sign-in's id, who it is and their role.
async fn finish(
    dashboard: &Dashboard,
    provider: &Provider,
    query: &SsoQuery,
    flow: &Flow,
) -> Result<(String, String, DashboardRole), SignInError> {
    if let Some(error) = &query.error {
        let detail = query.error_description.as_deref().unwrap_or_default();
        return Err(SignInError::Refused(oidc::printable(&format!(
            "{error}: {detail}"
        ))));
    }
    if query.state.as_deref() != Some(flow.state.as_str()) {
        return Err(SignInError::State);
    }
    // An answer from another provider (a mix-up) is refused before its
    // code goes anywhere.
    if let Some(iss) = &query.iss
        && iss.trim_end_matches('/') != provider.spec.issuer
    {
        return Err(SignInError::AnswerIssuer);
    }
    let code = query
        .code
        .as_deref()
        .filter(|c| !c.is_empty() && c.len() <= 4096)
        .ok_or_else(|| SignInError::Refused("no code in the provider's answer".into()))?;
    let (claims, id_token) = provider.sign_in(code, flow).await?;
    let record = record_of(provider, &claims, id_token)?;
    let Some((role, _)) = role_of(&provider.spec, &record.values) else {
        return Err(SignInError::NoRole {
            who: record.who,
            claim: provider.spec.role_claim.clone(),
        });
    };
    let id = oidc::random_text();
    let raw = serde_json::to_string(&record).expect("a record is strings");
    dashboard
        .store
        .put_sign_in(&oidc::sha256_hex(&id), &raw, provider.spec.lifetime)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "dashboard: a sign-in cannot be stored in Redis");
            SignInError::Store
        })?;
    Ok((id, record.who, role))
}

/// The record of a checked ID token's claims.
fn record_of(
    provider: &Provider,
    claims: &Claims,
    id_token: String,
) -> Result<Record, SignInError> {
    let who = oidc::identity(claims, provider.spec.identity_claim.as_deref())?;
    let values = oidc::claim_values(claims, &provider.spec.role_claim)
        .into_iter()
        .filter(|v| v.len() <= MAX_TEXT)
        .collect();
    Ok(Record {
        who,
        issuer: provider.spec.issuer.clone(),
        values,
        id_token,
    })
}

/// A logout's part here: the request's sign-in record deleted (on every
/// replica at once: they all read it from Redis) and its cookie's
/// removal; where the browser goes then, the provider's logout when it
/// has one.
pub(super) async fn sign_out(
    dashboard: &Dashboard,
    headers: &HeaderMap,
) -> (Option<String>, String) {
    let gone = format!("{SIGN_IN_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0");
    let keys = dashboard.keys();
    let (Some(provider), Some(id)) = (keys.sso(), auth::cookie(headers, SIGN_IN_COOKIE)) else {
        return (None, gone);
    };
    if id.len() != 43 {
        return (None, gone);
    }
    let hash = oidc::sha256_hex(&id);
    let id_token = match dashboard.store.sign_in(&hash).await {
        Ok(Some(raw)) => serde_json::from_str::<Record>(&raw)
            .ok()
            .map(|r| r.id_token),
        _ => None,
    };
    if let Err(e) = dashboard.store.drop_sign_in(&hash).await {
        tracing::warn!(error = %e, "dashboard: a sign-in cannot be deleted from Redis");
    }
    let to = match id_token {
        Some(token) => provider.logout_url(&token).await,
        None => None,
    };
    (to, gone)
}

/// `; Secure` when the dashboard is served over https.
fn secure(provider: &Provider) -> &'static str {
    if provider.spec.public_url.starts_with("https://") {
        "; Secure"
    } else {
        ""
    }
}

fn set_cookie(response: &mut Response, cookie: &str) {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// The page of a refused sign-in: why, and a way to try again.
fn refusal(dashboard: &Dashboard, status: StatusCode, error: &SignInError) -> Response {
    let visitor = Visitor::Anonymous;
    respond(
        status,
        layout(
            dashboard,
            &visitor,
            "Sign-in refused",
            0,
            html! {},
            html! {
                h1 { "Sign-in refused" }
                p.error #refusal role="alert" { (error.to_string()) }
                p { "Nothing was signed in. " a #again href="/sso/login" { "Sign in again" } " or ask the dashboard's administrator (the replica's log names the reason too)." }
            },
        ),
    )
}

fn not_configured(dashboard: &Dashboard) -> Response {
    super::pages::error_page(
        dashboard,
        &Visitor::Anonymous,
        StatusCode::NOT_FOUND,
        "single sign-on is not configured on this replica ([dashboard.oidc])",
    )
}
