//! The explain page of a job's tick (`/jobs/{name}/explain?tick=T`): what
//! happened to it and why, the same [`operator::explain`] value the
//! command line prints, rendered as HTML. Read-only; `tick` is parsed as
//! strictly as `--tick` (a bad one is a 400 naming the valid forms), and
//! without it the latest due tick is explained.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::format::{ago, duration, iso, utc};
use super::pages::{chain_facts, layout, looking, respond, view_error};
use super::{Dashboard, auth, data};
use crate::operator::{Explanation, Verdict};

/// The page's query: the tick, as `--tick` takes it.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ExplainQuery {
    tick: Option<String>,
}

/// `GET /jobs/{name}/explain`.
pub(super) async fn explain(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    Query(query): Query<ExplainQuery>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (visitor, _) = match looking(&dashboard, &headers, &uri).await {
        Ok(seen) => seen,
        Err(page) => return page,
    };
    if let Some(page) = super::pages::unseen(&dashboard, &visitor, &name) {
        return page;
    }
    let explanation = match data::explanation(&dashboard, &name, query.tick.as_deref()).await {
        Ok(explanation) => explanation,
        Err(e) => {
            let e = data::unseen_names(e, &visitor.scope(), &name);
            return view_error(&dashboard, &visitor, &e);
        }
    };
    let title = format!("{name} · {}", explanation.tick);
    respond(
        StatusCode::OK,
        layout(
            &dashboard,
            &visitor,
            &title,
            explanation.now_ms,
            html! {},
            page(&explanation),
        ),
    )
}

/// The badge class of a verdict (the stylesheet's status colours).
fn verdict_class(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::Ran => "badge ok",
        Verdict::Running => "badge running",
        Verdict::Skipped => "badge skipped",
        Verdict::Excluded => "badge s-excluded",
        Verdict::Missed | Verdict::NotRun => "badge failed",
        Verdict::NotATick | Verdict::NotYetDue => "badge",
    }
}

fn page(e: &Explanation) -> Markup {
    let job_href = format!("/jobs/{}", super::auth::percent_encode(&e.job));
    let verdict = serde_json::to_value(e.verdict)
        .ok()
        .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
        .unwrap_or_default();
    html! {
        h1 { a href=(job_href) { (e.job) } " · tick " time datetime=(iso(e.tick_ms)) { (e.tick) } }
        p.verdict { span class=(verdict_class(e.verdict)) { (verdict) } " " (e.summary) }
        form.inline method="get" action=(format!("{job_href}/explain")) {
            label { "Another tick " input type="text" name="tick" value=(e.tick) size="26"; }
            " " button type="submit" { "Explain" }
            " " small.muted { "RFC 3339 or ms since the epoch" }
        }
        @if let Some(s) = &e.schedule {
            h2 { "Schedule" }
            dl.facts {
                dt { "Expression" } dd { code { (s.expression) } " in " (s.timezone) }
                dt { "The tick, local" } dd { (s.tick_local) }
                dt { "Previous tick" } dd { (s.previous_tick.as_deref().unwrap_or("none")) }
                dt { "Next tick" } dd { (s.next_tick.as_deref().unwrap_or("none: the schedule has ended")) }
                @if let Some(dst) = &s.dst {
                    dt { "Daylight saving" } dd { (dst.kind) " at " (dst.transition) " (" (dst.local_times) "), " code { (dst.rule) } ": " (dst.effect) }
                }
            }
        }
        @if let Some(run) = &e.run {
            h2 { "The run" }
            dl.facts {
                dt { "Run id" } dd { code { (run.run_id) } }
                dt { "Replica" } dd { (run.replica) @if !run.host.is_empty() { " (" (run.host) ")" } }
                dt { "Fence" } dd { (run.fence) }
                dt { "Trigger" } dd { (run.trigger.as_str()) }
                dt { "Started" } dd { (utc(run.started_ms)) ", " (duration(run.late_ms)) " after the tick" }
                @if let Some(status) = run.status { dt { "Outcome" } dd { (status) } }
                @if let Some(d) = run.duration_ms { dt { "Duration" } dd { (duration(d)) } }
                @if let Some(a) = run.attempts { dt { "Attempts" } dd { (a) } }
                @if let Some(code) = run.exit_code { dt { "Exit code" } dd { (code) } }
                @if let Some(signal) = run.signal { dt { "Signal" } dd { (signal) } }
                @if let Some(left) = run.lease_left_ms { dt { "Lease" } dd { (duration(left)) " left unless renewed" } }
            }
        }
        @if let Some(chain) = &e.chain {
            h2 { "Chain" }
            dl.facts {
                (chain_facts(&chain.after, &chain.followers))
                @if let Some(upstream) = &chain.caused_by {
                    dt { "Followed" }
                    dd { @for run in upstream.runs() { a href=(format!("/jobs/{}#run-{}", auth::percent_encode(run.job()), run.run_id())) { (run.job()) } " run " code { (run.run_id()) } " (" (run.status()) ") " } }
                }
                @if !chain.caused.is_empty() {
                    dt { "Started" }
                    dd { @for c in &chain.caused { a href=(format!("/jobs/{}#run-{}", auth::percent_encode(&c.job), c.run_id)) { (c.job) } " run " code { (c.run_id) } " (" (c.status) ") " } }
                }
            }
        }
        @if !e.reasons.is_empty() {
            h2 { "Why" }
            ul.reasons {
                @for r in &e.reasons {
                    li data-kind=(r.kind) {
                        strong { (r.kind) } ": " (r.text)
                        details { summary { "evidence" } pre { (serde_json::to_string_pretty(&r.evidence).unwrap_or_default()) } }
                    }
                }
            }
        }
        h2 { "Replicas" }
        @if e.replicas.is_empty() { p.muted { "No replica has a heartbeat record." } } @else {
            table {
                thead { tr { th scope="col" { "Replica" } th scope="col" { "Host" } th scope="col" { "Alive" } th scope="col" { "Started" } th scope="col" { "Last seen" } th scope="col" { "Up at the tick" } } }
                tbody { @for r in &e.replicas {
                    tr { td { (r.id) } td { (r.host) } td { (if r.alive { "yes" } else { "no" }) } td { (utc(r.started_ms)) } td { (ago(e.now_ms, r.last_seen_ms)) } td { (if r.up_at_tick { "yes" } else { "no" }) } }
                } }
            }
        }
        p.muted { "The same explanation as " code { "cronlease explain " (e.job) " --tick " (e.tick_ms) } "." }
    }
}
