//! The replicas page (`GET /replicas`): each replica's state, host, runs
//! in flight and drain button, and the timeline of the last hour's runs,
//! one lane per replica.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::auth::Visitor;
use super::format::{ago, clock};
use super::pages::{csrf, layout, looking, respond, unavailable};
use super::{Dashboard, Fresh, TIMELINE_SPAN_MS, draw};
use crate::operator::StatusReport;
use crate::outcome::Status;

/// The replicas page's query: how much of the last hour the timeline
/// spans, in minutes.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ReplicasQuery {
    #[serde(default)]
    minutes: Option<i64>,
}

/// The timeline's spans on offer, minutes.
const SPANS: [i64; 4] = [5, 15, 30, 60];

/// `GET /replicas`: the replicas and the last hour's timeline.
pub(super) async fn replicas(
    State(dashboard): State<Arc<Dashboard>>,
    Query(query): Query<ReplicasQuery>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let minutes = query
        .minutes
        .filter(|m| SPANS.contains(m))
        .unwrap_or(TIMELINE_SPAN_MS / 60_000);
    let (visitor, status) = match looking(&dashboard, &headers, &uri).await {
        Ok(seen) => seen,
        Err(page) => return page,
    };
    // The timeline is shared by every visitor: read for every job, then
    // cut to the visitor's.
    let every = match dashboard.status(Fresh::Cached).await {
        Ok(every) => every,
        Err(e) => return unavailable(&dashboard, &visitor, &e),
    };
    let runs = match dashboard.timeline(&every).await {
        Ok(runs) => runs,
        Err(e) => return unavailable(&dashboard, &visitor, &e),
    };
    let scope = visitor.scope();
    let runs: Vec<_> = runs
        .iter()
        .filter(|r| scope.sees(&r.job))
        .cloned()
        .collect();
    let ids: Vec<String> = status.replicas.iter().map(|r| r.id.clone()).collect();
    let main = html! {
        h1 { "Replicas" }
        (replica_table(&dashboard, &visitor, &status))
        h2 #timeline { "Runs of the last " (minutes) " minutes" }
        p {
            "One lane per replica; each run is a bar from its start to its end, coloured by its outcome (hatched: still running). Hover a bar for its job, tick and fence. The picture zooms in to the runs there are; show at most the last "
            @for m in SPANS {
                @if m == minutes { strong { (m) } } @else { a href=(format!("/replicas?minutes={m}#timeline")) { (m) } }
                " "
            }
            "minutes."
        }
        (draw::timeline(&runs, &ids, status.now_ms, minutes * 60_000))
        (legend())
    };
    respond(
        StatusCode::OK,
        layout(
            &dashboard,
            &visitor,
            "Replicas",
            status.now_ms,
            html! {},
            main,
        ),
    )
}

/// The replicas' table: each one's state (with its drain button for who
/// may drain it), host, version, age, runs in flight, containment and the
/// jobs it holds another definition of.
fn replica_table(dashboard: &Dashboard, visitor: &Visitor, status: &StatusReport) -> Markup {
    let csrf = csrf(visitor);
    html! {
        table.replicas {
            thead { tr { th scope="col" { "Replica" } th scope="col" { "State" } th scope="col" { "Host" } th scope="col" { "Version" } th scope="col" { "Started" } th scope="col" { "Last seen" } th scope="col" { "Runs in flight" } th scope="col" { "Runs contained in" } th scope="col" { "Jobs with another definition" } } }
            tbody {
                @for r in &status.replicas {
                    @let drift: Vec<&str> = status.jobs.iter().filter(|j| j.config_drift.contains(&r.id)).map(|j| j.name.as_str()).collect();
                    tr data-replica=(r.id) {
                        th scope="row" { (r.id) @if r.id == dashboard.replica { " " small.muted { "(this one)" } } }
                        td {
                            @if r.alive { span.badge.active { "alive" } } @else { span.badge.s-failed { "dead" } }
                            @if let Some(drain) = r.drain {
                                " " span.badge.paused.drain title=(r.drained_by.as_ref().map(|m| format!("drained by {}", m.by)).unwrap_or_else(|| "shutting down".to_string())) { (drain.as_str()) }
                            }
                            (super::replica_actions::replica_button(dashboard, visitor, r, &csrf))
                        }
                        td { (r.host) " " small.muted { "pid " (r.pid) } }
                        td { (r.version) }
                        td { (ago(status.now_ms, r.started_ms)) }
                        td { (ago(status.now_ms, r.last_seen_ms)) }
                        td {
                            (r.runs_of_max())
                            @for run in &r.runs { br; small { a href=(format!("/jobs/{}", run.job)) { (run.job) } " tick " (clock(run.tick_ms)) " fence " (run.fence) } }
                        }
                        td { (r.containment.as_deref().unwrap_or("–")) }
                        td { @if drift.is_empty() { span.muted { "–" } } @else { span.warn { (drift.join(", ")) } } }
                    }
                }
            }
        }
    }
}

fn legend() -> Markup {
    html! {
        p.legend {
            @for s in Status::ALL { span class=(format!("cell {}", draw::status_class(s))) {} " " (s) " " }
            span.cell.running {} " running"
        }
    }
}
