//! The replicas page's actions: drain and undrain a replica (`cronlease
//! drain` and `undrain`), through `auth::authorize` as the job actions.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Form, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::Dashboard;
use super::actions::{Caller, form_sender, permitted};
use super::api::{ActionKind, Subject};
use super::auth::{self, Visitor};
use super::data::{self, ReplicaAction};
use super::pages::error_page;
use crate::operator::{OperatorError, ReplicaStatus};

/// A drain or undrain form: its CSRF token.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ReplicaForm {
    #[serde(default)]
    csrf: Option<String>,
}

/// The replica action named `text`.
fn parse(text: &str) -> Option<ReplicaAction> {
    match text {
        "drain" => Some(ReplicaAction::Drain),
        "undrain" => Some(ReplicaAction::Undrain),
        _ => None,
    }
}

/// `POST /replicas/{id}/{action}`: drain or undrain. Refused with 403 and
/// no change unless `auth::authorize` accepts the request. A script (a
/// bearer token) is answered a line, a browser the replicas page.
pub(super) async fn act(
    State(dashboard): State<Arc<Dashboard>>,
    Path((replica, action)): Path<(String, String)>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<ReplicaForm>, FormRejection>,
) -> Response {
    let form = form.map(|Form(f)| f).unwrap_or_default();
    let what = format!("replica {replica}");
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
    let Some(action) = parse(&action) else {
        return error_page(
            &dashboard,
            &visitor,
            StatusCode::NOT_FOUND,
            &format!("no action {action:?}: expected drain or undrain"),
        );
    };
    let kind = match action {
        ReplicaAction::Drain => ActionKind::Drain,
        ReplicaAction::Undrain => ActionKind::Undrain,
    };
    let who = match permitted(&dashboard, &holder, caller, kind, Subject::Cluster, peer) {
        Ok(who) => who,
        Err(refusal) => {
            tracing::warn!(%replica, action = action.as_str(), peer = %peer, reason = %refusal, "dashboard action refused");
            return super::actions::refused(&dashboard, &visitor, &refusal);
        }
    };
    let script = caller == Caller::Script;
    match data::act_on_replica(&dashboard, &replica, action, &who).await {
        Ok(_) => {
            if script {
                (StatusCode::OK, format!("{} {replica}\n", action.as_str())).into_response()
            } else {
                Redirect::to("/replicas").into_response()
            }
        }
        Err(e @ OperatorError::BadReplica(_)) => {
            error_page(&dashboard, &visitor, StatusCode::NOT_FOUND, &e.to_string())
        }
        Err(e) => error_page(
            &dashboard,
            &visitor,
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("{} {replica} failed: {e}", action.as_str()),
        ),
    }
}

/// The replica's Drain or Undrain button, for a token whose role takes
/// it (an admin).
pub(super) fn replica_button(
    dashboard: &Dashboard,
    visitor: &Visitor,
    replica: &ReplicaStatus,
    csrf: &str,
) -> Markup {
    let id = auth::percent_encode(&replica.id);
    let kind = if replica.drained_by.is_some() {
        ActionKind::Undrain
    } else {
        ActionKind::Drain
    };
    html! {
        @if super::pages::may(dashboard, visitor, kind, Subject::Cluster) {
            @if replica.drained_by.is_some() {
                form.inline method="post" action=(format!("/replicas/{id}/undrain")) {
                    input type="hidden" name="csrf" value=(csrf);
                    button.undrain type="submit" title="it claims again" { "Undrain" }
                }
            } @else {
                form.inline method="post" action=(format!("/replicas/{id}/drain")) {
                    input type="hidden" name="csrf" value=(csrf);
                    button.drain type="submit" title="it claims nothing, the others take its ticks, its runs in flight go on" { "Drain" }
                }
            }
        }
    }
}
