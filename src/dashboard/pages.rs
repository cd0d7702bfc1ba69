//! The dashboard's pages: the overview of every job and the parts a job's
//! page shares with it, and the frame every page shares (`layout`,
//! `respond`, `error_page`), which `actions` also uses. The replicas page
//! is `replicas_page`'s, a job's `job_page`'s.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::DateTime;
use maud::{DOCTYPE, Markup, html};
use serde::Deserialize;

use super::api::{ActionKind, Identity, Permission, Subject, permit};
use super::auth::{self, Visitor};
use super::data::{self, StateFilter, ViewError, jobs_matching};
use super::format::{ago, clock, duration, iso, until, utc};
use super::keys::KeyKind;
use super::{Dashboard, Fresh, draw};
use crate::config::{DashboardRead, Job};
use crate::operator::{self, JobStatus, OperatorError, StatusReport};
use crate::outcome::Status;
use crate::store::GaveUp;

/// Jobs per overview page.
const PAGE_SIZE: usize = 100;
/// Outcomes in a job's strip on the overview.
const STRIP_LENGTH: usize = 30;
/// Outcomes on a job's page (history and charts).
pub(super) const JOB_HISTORY: usize = 50;
/// Upcoming ticks on a job's page.
pub(super) const UPCOMING: usize = 10;
/// Actions listed on a job's page.
pub(super) const ACTIONS_SHOWN: usize = 20;

const STYLE: &str = include_str!("assets/style.css");
const SCRIPT: &str = include_str!("assets/app.js");

pub(super) async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}

pub(super) async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// A whole page: `status` and the markup, never cached by the browser.
pub(super) fn respond(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response.headers_mut().insert(
        "content-security-policy",
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
        ),
    );
    response.headers_mut().insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The frame every page shares: navigation, who is looking, and `main`,
/// the part the script refreshes.
pub(super) fn layout(
    dashboard: &Dashboard,
    visitor: &Visitor,
    title: &str,
    now_ms: i64,
    top: Markup,
    main: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · cronlease" }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body data-now-ms=(now_ms) {
                header {
                    nav aria-label="main" {
                        a.brand href="/" { "cronlease" }
                        a href="/" { "Jobs" }
                        a href="/replicas" { "Replicas & timeline" }
                        span.who {
                            "replica " strong { (dashboard.replica) } " · prefix " code { (dashboard.prefix) } " · "
                            @match visitor {
                                Visitor::ReadOnly => span title="no operator token is configured" { "read-only" },
                                Visitor::Anonymous => a href="/login" { "log in to act" },
                                Visitor::Operator(holder) => {
                                    @match holder.key.kind {
                                        KeyKind::Daemon => { "operator " strong { (holder.person.as_deref().unwrap_or("operator")) } " " }
                                        KeyKind::Named => {
                                            (holder.person.as_deref().unwrap_or("operator")) " with token " strong { (holder.key.name) }
                                            " " span.badge.role title="the token's role" { (holder.key.role.as_str()) } " "
                                        }
                                        KeyKind::Sso => {
                                            "signed in as " strong #identity { (holder.key.name) }
                                            " " span.badge.role title="the role single sign-on gave" { (holder.key.role.as_str()) } " "
                                        }
                                    }
                                    form.inline method="post" action="/logout" {
                                        button type="submit" { "log out" }
                                    }
                                }
                            }
                        }
                    }
                }
                (top)
                main #live data-live {
                    (main)
                }
                footer {
                    "cronlease " (env!("CARGO_PKG_VERSION")) " · Redis time " time datetime=(iso(now_ms)) { (utc(now_ms)) }
                    " · refreshes every few seconds with JavaScript, or reload"
                }
            }
        }
    }
}

/// A page saying what went wrong.
pub(super) fn error_page(
    dashboard: &Dashboard,
    visitor: &Visitor,
    status: StatusCode,
    message: &str,
) -> Response {
    respond(
        status,
        layout(
            dashboard,
            visitor,
            status.canonical_reason().unwrap_or("error"),
            0,
            html! {},
            html! {
                h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
                p.error role="alert" { (message) }
                p { a href="/" { "Back to the jobs" } }
            },
        ),
    )
}

/// Who is looking, and the shared status snapshot every page starts from;
/// the "cannot read from Redis" page when there is none, and the way to
/// the login (back to `uri` after it) when reading needs one
/// (`[daemon] dashboard_read = "token"` with a token) and the visitor has
/// not logged in.
pub(super) async fn looking(
    dashboard: &Dashboard,
    headers: &HeaderMap,
    uri: &Uri,
) -> Result<(Visitor, Arc<StatusReport>), Response> {
    let visitor = Visitor::of(&dashboard.keys(), headers);
    if visitor == Visitor::Anonymous && dashboard.read == DashboardRead::Token {
        let back = uri.path_and_query().map_or("/", |p| p.as_str());
        return Err(
            Redirect::to(&format!("/login?next={}", auth::percent_encode(back))).into_response(),
        );
    }
    match data::status_seen(dashboard, &visitor.scope(), Fresh::Cached).await {
        Ok(status) => Ok((visitor, status)),
        Err(e) => Err(unavailable(dashboard, &visitor, &e)),
    }
}

/// The identity a page's visitor reads with (`api::permit` decides).
pub(super) fn reader(visitor: &Visitor) -> Identity {
    match visitor {
        Visitor::Operator(holder) => Identity::LoggedIn(holder.clone()),
        Visitor::ReadOnly | Visitor::Anonymous => Identity::Nobody,
    }
}

/// Whether the visitor's forms may take `kind` on `subject`: what
/// `api::permit` answers for them, which decides the buttons a page
/// shows.
pub(super) fn may(
    dashboard: &Dashboard,
    visitor: &Visitor,
    kind: ActionKind,
    subject: Subject<'_>,
) -> bool {
    match visitor {
        Visitor::Operator(holder) => permit(
            dashboard,
            &Identity::Form(holder.clone()),
            Permission::Act(kind, subject),
        )
        .is_ok(),
        Visitor::ReadOnly | Visitor::Anonymous => false,
    }
}

/// The CSRF token of the visitor's forms (none without a login).
pub(super) fn csrf(visitor: &Visitor) -> String {
    match visitor {
        Visitor::Operator(holder) => holder.key.token.csrf(),
        Visitor::ReadOnly | Visitor::Anonymous => String::new(),
    }
}

/// The 404 page of job `name` when the visitor's token does not see it
/// (as for a job that does not exist).
pub(super) fn unseen(dashboard: &Dashboard, visitor: &Visitor, name: &str) -> Option<Response> {
    permit(
        dashboard,
        &reader(visitor),
        Permission::Read(Subject::Job(name)),
    )
    .err()
    .map(|e| error_page(dashboard, visitor, e.code().status(), e.message()))
}

pub(super) fn unavailable(dashboard: &Dashboard, visitor: &Visitor, e: &OperatorError) -> Response {
    error_page(
        dashboard,
        visitor,
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("cannot read from Redis: {e}"),
    )
}

/// The page of a view's error: 404 for a job that does not exist, 400
/// for a query that cannot be taken, 503 when Redis cannot be read.
pub(super) fn view_error(dashboard: &Dashboard, visitor: &Visitor, e: &ViewError) -> Response {
    match e {
        ViewError::NoJob(_) => {
            error_page(dashboard, visitor, StatusCode::NOT_FOUND, &e.to_string())
        }
        ViewError::BadQuery(message) => {
            error_page(dashboard, visitor, StatusCode::BAD_REQUEST, message)
        }
        ViewError::Redis(e) => unavailable(dashboard, visitor, e),
    }
}

/// The overview's query: a name filter, a state filter and the page.
#[derive(Debug, Default, Deserialize)]
pub(super) struct OverviewQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    page: Option<usize>,
}

/// `GET /`: every job, filtered and paged.
pub(super) async fn overview(
    State(dashboard): State<Arc<Dashboard>>,
    Query(query): Query<OverviewQuery>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let (visitor, status) = match looking(&dashboard, &headers, &uri).await {
        Ok(seen) => seen,
        Err(page) => return page,
    };
    let filter = StateFilter::parse(&query.state).unwrap_or(StateFilter::All);
    let matching = jobs_matching(&status, &query.q, filter);
    let pages = matching.len().div_ceil(PAGE_SIZE).max(1);
    let page = query.page.unwrap_or(1).clamp(1, pages);
    let shown = &matching[(page - 1) * PAGE_SIZE..(page * PAGE_SIZE).min(matching.len())];
    let names: Vec<String> = shown.iter().map(|j| j.name.clone()).collect();
    let strips = match strips(&dashboard, names).await {
        Ok(strips) => strips,
        Err(e) => return unavailable(&dashboard, &visitor, &e),
    };
    let table = dashboard.job_table();
    let alive = status.replicas.iter().filter(|r| r.alive).count();
    let top = html! {
        section.filters aria-label="filter jobs" {
            form method="get" action="/" {
                label { "Name " input type="search" name="q" value=(query.q) placeholder="part of a job name"; }
                label { "Show "
                    select name="state" {
                        @for f in StateFilter::ALL {
                            option value=(f.as_str()) selected[f == filter] { (f.label()) }
                        }
                    }
                }
                button type="submit" { "Filter" }
            }
        }
    };
    let main = html! {
        h1 { "Jobs" }
        (cluster_pause_banner(&status))
        p.summary {
            (status.jobs.len()) " jobs · "
            (status.jobs.iter().filter(|j| j.paused).count()) " paused · "
            (status.jobs.iter().filter(|j| !j.running.is_empty()).count()) " running · "
            (status.jobs.iter().filter(|j| StateFilter::Failing.keeps(j)).count()) " last run not ok · "
            a href="/replicas" { (alive) " of " (status.replicas.len()) " replicas alive" }
        }
        @if matching.is_empty() {
            p { "No job matches." }
        } @else {
            table.jobs {
                caption { (matching.len()) " shown of " (status.jobs.len()) ", page " (page) " of " (pages) }
                thead { tr {
                    th scope="col" { "Job" } th scope="col" { "Schedule" } th scope="col" { "Next tick" }
                    th scope="col" { "State" } th scope="col" { "In flight" } th scope="col" { "Last outcome" }
                    th scope="col" { "Last " (STRIP_LENGTH) } th scope="col" { "Missed" } th scope="col" { "Drift" }
                } }
                tbody {
                    @for job in shown {
                        (job_row(job, table.get(&job.name).map(|j| &**j), strips.get(&job.name), status.now_ms))
                    }
                }
            }
            (pager(&query, filter, page, pages))
        }
        (locks(&status))
        (channels(&status))
    };
    respond(
        StatusCode::OK,
        layout(&dashboard, &visitor, "Jobs", status.now_ms, top, main),
    )
}

/// The last outcomes of each job in `names`, newest first.
async fn strips(
    dashboard: &Dashboard,
    names: Vec<String>,
) -> Result<BTreeMap<String, Vec<operator::HistoryEntry>>, OperatorError> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    futures_util::stream::iter(names)
        .map(|name| async move {
            let outcomes = operator::outcome_strip(&dashboard.store, &name, STRIP_LENGTH).await?;
            Ok::<_, OperatorError>((name, outcomes))
        })
        .buffered(32)
        .try_collect()
        .await
}

fn job_row(
    job: &JobStatus,
    definition: Option<&Job>,
    strip: Option<&Vec<operator::HistoryEntry>>,
    now_ms: i64,
) -> Markup {
    html! {
        tr data-job=(job.name) {
            th scope="row" { a href=(format!("/jobs/{}", job.name)) { (job.name) } }
            td { (schedule_cell(job, definition)) }
            td { (next_tick_cell(job, definition, now_ms)) }
            td { (state_cell(job, now_ms)) }
            td {
                @for run in &job.running {
                    div { span.badge.running { "running" } " on " (run.replica) " since " (clock(run.started_ms)) }
                }
                @if job.running.is_empty() { span.muted { "–" } }
            }
            td {
                @match (&job.broadcast, &job.last_outcome) {
                    (Some(tick), _) => {
                        span class=(format!("badge {}", if tick.ok == tick.outcomes.len() { "s-ok" } else { "s-failed" })) { "last: " (tick.summary()) }
                        " " small { (ago(now_ms, tick.tick_ms)) }
                    }
                    (None, Some(o)) => {
                        span class=(format!("badge {}", draw::status_class(o.status))) { (o.status) }
                        @if let Some(who) = &o.killed_by { " " small { "by " (who) } }
                        " " small { "on " (if o.replica.is_empty() { "–" } else { &o.replica }) ", " (ago(now_ms, o.finished_ms)) }
                    }
                    (None, None) => span.muted { "never ran" },
                }
            }
            td { @if let Some(strip) = strip { (draw::strip(strip)) } }
            td.num { (job.missed_ticks) }
            td {
                @if job.config_drift.is_empty() { span.muted { "–" } }
                @else { span.warn title="these replicas run another definition of the job" { (job.config_drift.join(", ")) } }
            }
        }
    }
}

pub(super) fn schedule_cell(job: &JobStatus, definition: Option<&Job>) -> Markup {
    html! {
        @match definition.map(|def| (def, &def.schedule)) {
            Some((_, Some(schedule))) => {
                code { (schedule.expression()) }
                @if schedule.resolved() != schedule.expression() {
                    " " small.muted { "(" (schedule.describe()) ")" }
                }
                br;
                small { (schedule.describe()) ", " (schedule.timezone().name()) }
            }
            Some((def, None)) => {
                @if let Some(after) = &def.after {
                    "after " (after.upstreams.join(", "))
                    br;
                    small.muted { "each " (after.on.as_str()) " outcome" }
                }
            }
            None => code { (job.schedule.as_deref().unwrap_or("–")) },
        }
    }
}

pub(super) fn next_tick_cell(job: &JobStatus, definition: Option<&Job>, now_ms: i64) -> Markup {
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let next = definition
        .and_then(|d| d.schedule.as_ref())
        // None once the job has ended (its status has no next tick, and a
        // warning says why: max_runs reached, its window or years past).
        .filter(|_| job.next_tick.is_some() || job.warning.is_none())
        .and_then(|s| Some((s, s.next_after(now)?)));
    html! {
        @match next {
            Some((schedule, tick)) => {
                time datetime=(iso(tick.timestamp_millis())) { (schedule.timezone().format_local(tick)) }
                br;
                small { (utc(tick.timestamp_millis())) " · " span.countdown data-at-ms=(tick.timestamp_millis()) { (until(now_ms, tick.timestamp_millis())) } }
            }
            None => {
                @if let Some(warning) = &job.warning { span.warn { "none: " (warning) } } @else { span.muted { "–" } }
            }
        }
    }
}

/// The job's action buttons for an operator, or what another visitor may do.
/// `run_now_fields`: the Run now form's fields besides its CSRF token
/// (the job's parameters).
pub(super) fn job_actions(
    dashboard: &Dashboard,
    visitor: &Visitor,
    job: &JobStatus,
    csrf: &str,
    run_now_fields: Markup,
) -> Markup {
    let name = &job.name;
    let acts = may(dashboard, visitor, ActionKind::Trigger, Subject::Job(name));
    html! {
        section.actions aria-label="actions" {
            @match visitor {
                Visitor::Operator(holder) if !acts => p.muted { "Your token " strong { (holder.key.name) } " has the role " (holder.key.role.as_str()) ": it reads, and takes no action on this job." },
                Visitor::Operator(_) => {
                    form.inline method="post" action=(format!("/jobs/{name}/trigger")) {
                        input type="hidden" name="csrf" value=(csrf);
                        (run_now_fields)
                        button #run-now type="submit" disabled[job.paused] { "Run now" }
                    }
                    @if job.paused {
                        form.inline method="post" action=(format!("/jobs/{name}/resume")) {
                            input type="hidden" name="csrf" value=(csrf);
                            button #resume type="submit" { "Resume" }
                        }
                    } @else {
                        form.inline #pause-form method="post" action=(format!("/jobs/{name}/pause")) {
                            input type="hidden" name="csrf" value=(csrf);
                            label { "until " input #pause-until type="text" name="until" size="22"
                                placeholder="2h or 2026-11-26T22:00:00Z"
                                title="optional: an RFC 3339 time or a duration from now; empty: until resumed"; }
                            " "
                            label { "reason " input #pause-reason type="text" name="reason" size="30"
                                maxlength=(crate::operator::REASON_MAX_CHARS) title="optional: why, one line"; }
                            " "
                            button #pause type="submit" { "Pause" }
                        }
                    }
                }
                Visitor::Anonymous => p { a href=(format!("/login?next=/jobs/{name}")) { "Log in" } " with the operator token to run, pause or resume this job." },
                Visitor::ReadOnly => p.muted { "Read-only: this replica has no operator token, so nothing can be changed from here." },
            }
    }
    }
}

/// The job's recent outcomes, each with its output behind a disclosure.
/// The history of job `job`; a missed or skipped tick links to its
/// explanation.
pub(super) fn history_table(job: &str, history: &[operator::HistoryEntry]) -> Markup {
    html! {
        @if history.is_empty() { p.muted { "No outcome recorded yet." } } @else {
            table.history {
                thead { tr { th scope="col" { "Tick" } th scope="col" { "Status" } th scope="col" { "Replica" } th scope="col" { "Fence" } th scope="col" { "Duration" } th scope="col" { "CPU" } th scope="col" { "Exit" } th scope="col" { "Trigger" } th scope="col" { "Output" } } }
                tbody {
                    @for e in history {
                        tr id=(format!("run-{}", e.run_id)) data-run=(e.run_id) {
                            td {
                                @if matches!(e.status, Status::Missed | Status::SkippedOverlap | Status::Excluded) {
                                    a.explain href=(explain_href(job, e.tick_ms)) title="why did this tick not run?" { (e.tick) }
                                } @else { (e.tick) }
                            }
                            td { span class=(format!("badge {}", draw::status_class(e.status))) { (e.status) } @if e.calendar.is_some() { " " small { (e.status_text().trim_start_matches(e.status.as_str()).trim()) } } @if let Some(who) = &e.killed_by { " " small { "by " (who) } } @if e.stale { " " small.muted { "(stale)" } } }
                            td { (if e.replica.is_empty() { "–" } else { &e.replica }) }
                            td.num { (e.fence) }
                            td.num { (duration(e.duration_ms)) }
                            td.num title=(e.peak_memory_kb.map(|kb| format!("peak memory {kb} kB")).unwrap_or_default()) { (e.cpu_ms.map(|ms| duration(i64::try_from(ms).unwrap_or(i64::MAX))).unwrap_or_else(|| "–".into())) }
                            td { @if let Some(code) = e.exit_code { (code) } @else if let Some(signal) = e.signal { "signal " (signal) } @else { "–" } @if e.attempts > 1 { " " small { "(" (e.attempts) " attempts)" } } }
                            td {
                                (e.trigger.as_str())
                                @if let Some(upstream) = &e.upstream {
                                    " after"
                                    @for run in upstream.runs() {
                                        " " a href=(format!("/jobs/{}#run-{}", auth::percent_encode(run.job()), run.run_id())) title=(format!("run {}", run.run_id())) { (run.job()) }
                                        " " small { (run.status()) }
                                    }
                                }
                                @for (name, value) in &e.params { br; small.param { (name) "=" (value) } }
                            }
                            td {
                                @match e.output.as_deref() {
                                    Some(output) if !output.is_empty() => {
                                        details id=(format!("out-{}", e.id)) {
                                            summary { (output.lines().count()) " lines" }
                                            pre.output { (output) }
                                        }
                                    }
                                    _ => span.muted { "–" },
                                }
                            }
                        }
                    }
                }
            }
    }
    }
}

/// A job's upstreams (`After`) and followers (`Then`) as facts, each a
/// link to its page; nothing for a job in no chain.
pub(super) fn chain_facts(after: &[String], followers: &[String]) -> Markup {
    html! {
        @for (label, jobs) in [("After", after), ("Then", followers)] {
            @if !jobs.is_empty() {
                dt { (label) }
                dd { @for (i, job) in jobs.iter().enumerate() { @if i > 0 { ", " } a href=(format!("/jobs/{}", auth::percent_encode(job))) { (job) } } }
            }
        }
    }
}

/// The explain page of `job`'s tick `tick_ms`.
pub(super) fn explain_href(job: &str, tick_ms: i64) -> String {
    format!("/jobs/{}/explain?tick={tick_ms}", auth::percent_encode(job))
}

/// The banner of the cluster's pause (`cronlease pause --all`), while it
/// holds: by whom, since when, until when and why.
pub(super) fn cluster_pause_banner(status: &StatusReport) -> Markup {
    let now_ms = status.now_ms;
    html! {
        @if let Some(pause) = &status.cluster_pause {
            p.notice.cluster-paused #cluster-paused role="status" {
                strong { "Cluster paused" } " by " (pause.by) " " (ago(now_ms, pause.at_ms))
                @if let Some(end) = pause.until_ms {
                    " until " time datetime=(iso(end)) { (utc(end)) } " (" (until(now_ms, end)) ")"
                } @else {
                    " until resumed (cronlease resume --all)"
                }
                @if !pause.reason.is_empty() { " — " (pause.reason) }
                ": no job's tick starts."
            }
        }
    }
}

pub(super) fn state_cell(job: &JobStatus, now_ms: i64) -> Markup {
    html! {
        @if let Some(repair) = &job.needs_repair {
            span.badge.repair title=(format!("its state in Redis held {} = {:?}, which no replica writes: check who writes to Redis, then run `cronlease repair {}`", repair.field, repair.value, job.name)) {
                "needs repair (" (repair.field) ")"
            }
            " "
        }
        @if let Some(why) = &job.unplaced {
            span.badge.unplaced title=(why) { "no matching replica" }
            " "
        }
        @if job.paused {
            span.badge.paused { "paused" }
            @if let Some(by) = &job.paused_by { " " small { "by " (by) } }
            @if let Some(at) = job.paused_at_ms { " " small { (ago(now_ms, at)) } }
            @if let Some(end) = job.paused_until_ms {
                " " small.until { "until " time datetime=(iso(end)) { (utc(end)) } " (" (until(now_ms, end)) ")" }
            }
            @if let Some(reason) = &job.paused_reason { " " small.reason { "— " (reason) } }
        } @else if job.warning.is_some() {
            span.badge.ended { "ended" }
        } @else {
            span.badge.active { "active" }
        }
    }
}

fn pager(query: &OverviewQuery, filter: StateFilter, page: usize, pages: usize) -> Markup {
    let link = |n: usize| {
        format!(
            "/?q={}&state={}&page={n}",
            auth::percent_encode(&query.q),
            filter.as_str()
        )
    };
    html! {
        nav.pager aria-label="pages" {
            @if page > 1 { a rel="prev" href=(link(page - 1)) { "← previous" } }
            " page " (page) " of " (pages) " "
            @if page < pages { a rel="next" href=(link(page + 1)) { "next →" } }
        }
    }
}

fn locks(status: &StatusReport) -> Markup {
    html! {
        section aria-labelledby="locks" {
            h2 #locks { "Locks" }
            @if status.locks.is_empty() {
                p.muted { "No cluster lock is held (" code { "cronlease lock" } " or the library's)." }
            } @else {
                table.locks {
                    thead { tr { th scope="col" { "Lock" } th scope="col" { "Holder" } th scope="col" { "Host" } th scope="col" { "Fence" } th scope="col" { "Since" } th scope="col" { "Time left" } th scope="col" { "Holds" } } }
                    tbody {
                        @for lock in &status.locks {
                            tr data-lock=(lock.name) {
                                th scope="row" { (lock.name) }
                                @match &lock.holder {
                                    Some(holder) => {
                                        td { (holder) } td { (lock.host.as_deref().unwrap_or("")) }
                                        td.num { (lock.fence.unwrap_or(0)) }
                                        td { (lock.since_ms.map(|s| ago(status.now_ms, s)).unwrap_or_default()) }
                                        td { (lock.time_left_ms.map(duration).unwrap_or_default()) }
                                        td.num { (lock.holds.unwrap_or(1)) }
                                    }
                                    None => td colspan="6" { span.muted { "free" } },
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The notification channels some replica delivered through or tried to:
/// the last delivery, and the last failure when it came after it.
fn channels(status: &StatusReport) -> Markup {
    html! {
        @if !status.channels.is_empty() {
            section aria-labelledby="channels" {
                h2 #channels { "Notification channels" }
                table.channels {
                    thead { tr { th scope="col" { "Channel" } th scope="col" { "Last delivered" } th scope="col" { "Last failure" } } }
                    tbody {
                        @for channel in &status.channels {
                            tr data-channel=(channel.channel) {
                                th scope="row" { (channel.channel) }
                                td { (channel.ok_ms.map(|ms| ago(status.now_ms, ms)).unwrap_or_else(|| "never".to_string())) }
                                @match &channel.failure {
                                    Some(failure) => td {
                                        span.warn {
                                            (ago(status.now_ms, failure.at_ms)) ": " (failure.event)
                                            @if let Some(job) = &failure.job { " of " (job) }
                                            " — " (failure.error) " — "
                                            @match failure.gave_up {
                                                GaveUp::Retrying => "retrying",
                                                GaveUp::Dropped => "dropped",
                                            }
                                        }
                                    },
                                    None => td { span.muted { "–" } },
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
