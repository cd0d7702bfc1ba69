//! The page of one job (`/jobs/{name}`): its schedule, state and settings,
//! its runs in flight, next ticks, recent runs charted, history and the
//! operators' actions.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::data::{self, HistoryPage, UpcomingTick};
use super::format::{ago, iso, until, utc};
use super::pages::{
    ACTIONS_SHOWN, JOB_HISTORY, UPCOMING, chain_facts, history_table, job_actions, layout, looking,
    next_tick_cell, respond, schedule_cell, state_cell, view_error,
};
use super::{Dashboard, draw};
use crate::config::Job;
use crate::operator::{self, JobStatus, OutputTail};
use crate::outcome::Status;

/// A job page's query: what an action just did.
#[derive(Debug, Default, Deserialize)]
pub(super) struct JobQuery {
    #[serde(default)]
    done: String,
    #[serde(default)]
    run: String,
}

/// `GET /jobs/{name}`.
pub(super) async fn job(
    State(dashboard): State<Arc<Dashboard>>,
    Path(name): Path<String>,
    Query(query): Query<JobQuery>,
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
    let view = match data::job_view(&dashboard, &name, UPCOMING, ACTIONS_SHOWN).await {
        Ok(view) => view,
        Err(e) => return view_error(&dashboard, &visitor, &e),
    };
    let page = HistoryPage {
        before: None,
        limit: JOB_HISTORY,
        output: OutputTail::Include,
    };
    let history = match data::history(&dashboard, &name, page).await {
        Ok(history) => history,
        Err(e) => return view_error(&dashboard, &visitor, &e),
    };
    let (status, job, definition) = (&view.status, view.job(), view.definition.as_deref());
    let actions = &view.actions;
    let csrf = super::pages::csrf(&visitor);
    let kills = super::pages::may(
        &dashboard,
        &visitor,
        super::api::ActionKind::Kill,
        super::api::Subject::Job(&name),
    );
    let main = html! {
        h1 { (name) }
        (super::pages::cluster_pause_banner(status))
        (done_notice(&query))
        (facts(job, definition, status.now_ms))
        (job_actions(&dashboard, &visitor, job, &csrf, param_fields(definition)))
        p { a.explain href=(format!("/jobs/{}/explain", super::auth::percent_encode(&name))) { "Explain the latest tick" } " — what happened to it and why" }
        @if !job.running.is_empty() {
            h2 { "In flight" }
            ul { @for run in &job.running { li {
                "run " code { (run.run_id) } " on " (run.replica) ", tick " (utc(run.tick_ms)) ", fence " (run.fence) ", since " (ago(status.now_ms, run.started_ms))
                @if let Some(who) = &run.kill_asked_by { " — " strong { "kill asked by " (who) } }
                @if kills {
                    " "
                    form.inline.kill method="post" action=(format!("/jobs/{}/kill", super::auth::percent_encode(&name))) {
                        input type="hidden" name="csrf" value=(csrf);
                        input type="hidden" name="run" value=(run.run_id);
                        button.kill type="submit" data-run=(run.run_id) title="stop this run on its replica (SIGTERM, then SIGKILL after kill_grace); recorded as killed, never retried" { "Kill" }
                    }
                }
            } } }
            section #live-output data-src=(format!("/jobs/{}/live", super::auth::percent_encode(&name))) {
                h2 { "Live output" }
                p.muted.state { "The newest run's output as it prints it (the log's lines, the newest 1,000 kept); with JavaScript only." }
                pre.live {}
            }
        }
        h2 { "Upcoming ticks" }
        (upcoming_ticks(definition, &view.upcoming, status.now_ms))
        (recent_runs(&history))
        h2 { "History" }
        (history_table(&name, &history))
        h2 { "Operator actions" }
        @if actions.is_empty() { p.muted { "None recorded." } } @else {
            ul.actions-log { @for a in actions { li { time datetime=(iso(a.at_ms)) { (utc(a.at_ms)) } " " strong { (a.action) } " by " (a.who) @if !a.detail.is_empty() { " (" code { (a.detail) } ")" } @if let Some(end) = a.until_ms { " until " (utc(end)) } @if !a.reason.is_empty() { " — " (a.reason) } } } }
        }
    };
    respond(
        StatusCode::OK,
        layout(&dashboard, &visitor, &name, status.now_ms, html! {}, main),
    )
}

/// What the action just done (`?done=`) did, if one was.
fn done_notice(query: &JobQuery) -> Markup {
    html! {
        @if !query.done.is_empty() {
            p.notice role="status" {
                @match query.done.as_str() {
                    "trigger" => { "Run now: queued as run " code { (query.run) } "; a replica picks it up within a second or two." }
                    "pause" => "Paused: no tick of this job starts until it is resumed, or its until passes.",
                    "resume" => "Resumed.",
                    "kill" => { "Kill asked for run " code { (query.run) } "; its replica stops it within a second and records it killed." }
                    other => (other),
                }
            }
        }
    }
}

/// The Run now form's field of each of the job's parameters: a choice
/// among its allowed values, else a text field, each holding its default.
fn param_fields(definition: Option<&Job>) -> Markup {
    let params = definition.map(|d| &d.params.0);
    html! {
        @for (name, param) in params.into_iter().flatten() {
            @let field = format!("{}{name}", crate::config::PARAM_FIELD_PREFIX);
            @let default = param.default.as_deref().unwrap_or_default();
            label.param {
                (name) " "
                @match &param.allowed {
                    Some(allowed) => select id=(format!("param-{name}")) name=(field) {
                        @for value in allowed { option value=(value) selected[value == default] { (value) } }
                    },
                    None => input id=(format!("param-{name}")) type="text" name=(field) value=(default) maxlength=(crate::config::MAX_PARAM_VALUE_BYTES);,
                }
            }
            " "
        }
    }
}

/// A job's schedule, state and settings.
fn facts(job: &JobStatus, definition: Option<&Job>, now_ms: i64) -> Markup {
    html! {
        dl.facts {
            dt { "Schedule" } dd { (schedule_cell(job, definition)) }
            dt { "Next tick" } dd { (next_tick_cell(job, definition, now_ms)) }
            @if job.active_from.is_some() || job.active_until.is_some() {
                dt { "Active" } dd {
                    @if let Some(from) = &job.active_from { "from " (from) }
                    @if job.active_from.is_some() && job.active_until.is_some() { " " }
                    @if let Some(until) = &job.active_until { "until " (until) " (not included)" }
                }
            }
            @if let Some(max) = job.max_runs {
                dt { "Runs of the schedule" } dd { (job.runs_started) " of " (max) " (max_runs)" }
            }
            dt { "State" } dd { (state_cell(job, now_ms)) }
            @if let Some(def) = definition {
                dt { "Timeout" } dd { (def.timeout.map(|t| humantime::format_duration(t).to_string()).unwrap_or_else(|| "none".into())) }
                dt { "Overlap · misfire · retries" } dd { (def.overlap) " · " (def.misfire) " · " (def.retries) }
                @if let Some(group) = &def.group {
                    dt { "Concurrency group" } dd { code { (group.name) } " " small.muted { "(at most " (group.max) " runs of its jobs at once)" } }
                }
            }
            (chain_facts(&job.after, &job.followers))
            @if !job.calendars.is_empty() {
                dt { "Calendars" }
                dd { @for (i, c) in job.calendars.iter().enumerate() {
                    @if i > 0 { " · " }
                    (c.rule.as_str()) " " code { (c.name) } " " small.muted { "(" (c.events) " events, " (c.timezone) ", " (c.hash) ")" }
                } }
            }
            @if !job.run_on.is_empty() || job.mode.is_some() {
                dt { "Runs on" } dd {
                    @if job.run_on.is_empty() { "any replica" } @else { "replicas with tags " code { (job.run_on.join(", ")) } }
                    @if let Some(mode) = job.mode { " · mode " code { (mode) } }
                    " · matching replicas: "
                    @if job.matching_replicas.is_empty() { span.warn { "none" } } @else { (job.matching_replicas.join(", ")) }
                }
            }
            @if let Some(tick) = &job.broadcast {
                dt { "Last tick" } dd {
                    (tick.summary()) " " small.muted { "(" (tick.tick) ")" }
                    @for o in &tick.outcomes {
                        " " span class=(format!("badge {}", super::draw::status_class(o.status))) title=(o.status) { (o.replica) }
                    }
                }
            }
            dt { "Missed ticks" } dd { (job.missed_ticks) }
            @if let Some(b) = &job.backfill { dt { "Backfill" } dd { (b.left) " of " (b.queued) " ticks left" } }
            @if !job.config_drift.is_empty() { dt { "Config drift" } dd.warn { (job.config_drift.join(", ")) } }
        }
    }
}

/// The job's next ticks, local and UTC, with a countdown.
fn upcoming_ticks(definition: Option<&Job>, upcoming: &[UpcomingTick], now_ms: i64) -> Markup {
    let zone = definition
        .and_then(|d| d.schedule.as_ref())
        .map(|s| s.timezone().name())
        .unwrap_or("");
    html! {
        @if upcoming.is_empty() { p.muted { "None." } } @else {
            table.upcoming {
                thead { tr { th scope="col" { "Local (" (zone) ")" } th scope="col" { "UTC" } th scope="col" { "In" } } }
                tbody { @for tick in upcoming {
                    @let at_ms = tick.at.timestamp_millis();
                    tr.excluded[tick.excluded_by.is_some()] { td { (tick.local) } td { (utc(at_ms)) } td { span.countdown data-at-ms=(at_ms) { (until(now_ms, at_ms)) } @if let Some(e) = &tick.excluded_by { " " span.badge.s-excluded { "not run: " (e) } } } }
                } }
            }
        }
    }
}

/// Charts of the recent runs' durations and lateness, oldest first
/// (nothing when none ran).
fn recent_runs(history: &[operator::HistoryEntry]) -> Markup {
    let ran: Vec<&operator::HistoryEntry> = history
        .iter()
        .rev()
        .filter(|e| e.started_ms > 0 && !e.replica.is_empty() && e.status != Status::Excluded)
        .collect();
    let points = |value: fn(&operator::HistoryEntry) -> i64| -> Vec<(i64, String, Status)> {
        ran.iter()
            .map(|e| (value(e), format!("{} on {}", e.tick, e.replica), e.status))
            .collect()
    };
    let durations = points(|e| e.duration_ms);
    let lateness = points(|e| e.started_ms.saturating_sub(e.tick_ms).max(0));
    html! {
        @if !ran.is_empty() {
            h2 { "Recent runs" }
            div.charts {
                figure { (draw::chart("duration of the recent runs", &durations)) figcaption { "Duration, oldest to newest" } }
                figure { (draw::chart("lateness of the recent runs", &lateness)) figcaption { "Tick to start (lateness)" } }
            }
        }
    }
}
