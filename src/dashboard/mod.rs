//! The web dashboard every replica can serve (`[daemon] dashboard_listen`):
//! jobs, runs, replicas and locks, and — with an operator token — run now,
//! pause and resume.
//!
//! Pages are HTML rendered here (maud) from the same typed reports as
//! `cronlease status` and `history` (`operator`), so the page and the
//! command line cannot disagree. They work without JavaScript; a small
//! embedded script adds countdowns and swaps in fresh content every few
//! seconds. Every asset is compiled into the binary: no CDN, no network.
//!
//! Reads are shared: one status snapshot (every job's state, replicas,
//! locks) and one timeline (the last hour's runs) serve every viewer for
//! [`SNAPSHOT_TTL`] / [`TIMELINE_TTL`], so ten open pages cost Redis what
//! one does. `auth` decides who may act; `pages` draws the pages and
//! `draw` their SVG (outcome strips, the timeline, charts).

mod actions;
mod api;
mod auth;
mod data;
mod draw;
mod explain_page;
mod format;
mod job_page;
mod keys;
mod live;
mod oidc;
mod pages;
mod replica_actions;
mod replicas_page;
mod sso;
mod token;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use tokio::sync::{Mutex, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{DashboardRead, Job};
use crate::operator::{self, Locks, OperatorError, StatusReport};
use crate::outcome::Status;
use crate::store::Store;

pub use keys::Keyring;
pub use token::TokenError;

/// How long one status snapshot serves every viewer.
const SNAPSHOT_TTL: Duration = Duration::from_secs(2);
/// How long one timeline serves every viewer.
const TIMELINE_TTL: Duration = Duration::from_secs(5);
/// How far back the timeline reaches.
const TIMELINE_SPAN_MS: i64 = 3_600_000;
/// About how many runs the timeline reads in all: each job's newest in
/// the hour, this many divided among the jobs (at least one each, at most
/// [`TIMELINE_MAX_PER_JOB`]), so its cost stays bounded with many jobs.
const TIMELINE_RUNS: usize = 5_000;
const TIMELINE_MAX_PER_JOB: usize = 1_000;

/// The live job table of the replica (replaced by a reload).
pub type JobTable = BTreeMap<String, Arc<Job>>;

/// What the dashboard reads from and who it is.
pub struct Dashboard {
    /// A store with connections of its own (`Store::connect_lazily`): a
    /// page's reads never wait behind the claims and renewals, nor delay
    /// them.
    store: Store,
    jobs: watch::Receiver<Arc<JobTable>>,
    replica: String,
    prefix: String,
    /// The tokens as the last load read them (replaced by a reload).
    keys: watch::Receiver<Arc<Keyring>>,
    /// Whether reading needs the login (when there is a token).
    read: DashboardRead,
    /// Wrong tokens per client address (login and bearer).
    throttle: auth::Throttle,
    snapshot: Mutex<Option<(Instant, Arc<StatusReport>)>>,
    timeline: Mutex<Option<(Instant, Arc<Vec<TimelineRun>>)>>,
}

/// One run on the timeline: a finished outcome, or a run in flight.
#[derive(Debug, Clone)]
struct TimelineRun {
    job: String,
    replica: String,
    tick_ms: i64,
    fence: u64,
    started_ms: i64,
    /// Now, for a run in flight.
    finished_ms: i64,
    state: RunState,
}

/// Whether a timeline run has ended, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunState {
    Ended(Status),
    Running,
}

impl Dashboard {
    pub fn new(
        store: Store,
        jobs: watch::Receiver<Arc<JobTable>>,
        replica: &str,
        prefix: &str,
        keys: watch::Receiver<Arc<Keyring>>,
        read: DashboardRead,
    ) -> Dashboard {
        Dashboard {
            store,
            jobs,
            replica: replica.to_string(),
            prefix: prefix.to_string(),
            keys,
            read,
            throttle: auth::Throttle::default(),
            snapshot: Mutex::new(None),
            timeline: Mutex::new(None),
        }
    }

    fn job_table(&self) -> Arc<JobTable> {
        self.jobs.borrow().clone()
    }

    /// The current tokens: a request reads them once, so a
    /// reload never changes them halfway through it.
    fn keys(&self) -> Arc<Keyring> {
        self.keys.borrow().clone()
    }

    /// The status of every job, replica and lock, at most [`SNAPSHOT_TTL`]
    /// old (`Fresh::Now` after an action, so its effect shows at once).
    async fn status(&self, fresh: Fresh) -> Result<Arc<StatusReport>, OperatorError> {
        let mut cached = self.snapshot.lock().await;
        if let (Fresh::Cached, Some((at, report))) = (fresh, cached.as_ref())
            && at.elapsed() < SNAPSHOT_TTL
        {
            return Ok(report.clone());
        }
        let table = self.job_table();
        let report = Arc::new(
            operator::status(&self.store, Some(&*table), &self.prefix, Locks::Existing).await?,
        );
        *cached = Some((Instant::now(), report.clone()));
        Ok(report)
    }

    /// The runs of the last hour on every replica, finished or not, at
    /// most [`TIMELINE_TTL`] old.
    async fn timeline(
        &self,
        status: &StatusReport,
    ) -> Result<Arc<Vec<TimelineRun>>, OperatorError> {
        let mut cached = self.timeline.lock().await;
        if let Some((at, runs)) = cached.as_ref()
            && at.elapsed() < TIMELINE_TTL
        {
            return Ok(runs.clone());
        }
        let since_ms = status.now_ms - TIMELINE_SPAN_MS;
        let names: Vec<String> = status.jobs.iter().map(|j| j.name.clone()).collect();
        let per_job = (TIMELINE_RUNS / names.len().max(1)).clamp(1, TIMELINE_MAX_PER_JOB);
        let mut runs = operator::runs_since(&self.store, names, since_ms, per_job)
            .await?
            .into_iter()
            // Missed and skipped ticks ran nowhere: no bar.
            .filter(|(_, e)| !e.replica.is_empty() && e.started_ms > 0)
            .map(|(job, e)| TimelineRun {
                job,
                replica: e.replica,
                tick_ms: e.tick_ms,
                fence: e.fence,
                started_ms: e.started_ms,
                finished_ms: e.finished_ms.max(e.started_ms),
                state: RunState::Ended(e.status),
            })
            .collect::<Vec<_>>();
        for job in &status.jobs {
            for run in &job.running {
                runs.push(TimelineRun {
                    job: job.name.clone(),
                    replica: run.replica.clone(),
                    tick_ms: run.tick_ms,
                    fence: run.fence,
                    started_ms: run.started_ms,
                    finished_ms: status.now_ms,
                    state: RunState::Running,
                });
            }
        }
        let runs = Arc::new(runs);
        *cached = Some((Instant::now(), runs.clone()));
        Ok(runs)
    }

    /// Forgets the snapshot, so the next page shows an action's effect.
    async fn invalidate(&self) {
        *self.snapshot.lock().await = None;
        *self.timeline.lock().await = None;
    }
}

/// Whether a read may be served from the shared snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fresh {
    Cached,
    Now,
}

/// The dashboard's routes.
fn router(dashboard: Arc<Dashboard>) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/replicas", get(replicas_page::replicas))
        .route("/replicas/{replica}/{action}", post(replica_actions::act))
        .route("/jobs/{name}", get(job_page::job))
        .route("/jobs/{name}/explain", get(explain_page::explain))
        .route("/jobs/{name}/live", get(live::live))
        .route("/jobs/{name}/{action}", post(actions::act))
        .route("/login", get(actions::login_form).post(actions::login))
        .route("/logout", post(actions::logout))
        .route("/sso/login", get(sso::start))
        .route("/sso/callback", get(sso::callback))
        .route("/assets/style.css", get(pages::style))
        .route("/assets/app.js", get(pages::script))
        .merge(api::router())
        .layer(axum::middleware::from_fn_with_state(
            dashboard.clone(),
            sso::resolve,
        ))
        .with_state(dashboard)
}

/// Binds `addr` (a port 0 picks a free one).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// The largest request body the dashboard reads: its forms are a few
/// hundred bytes.
pub const MAX_BODY: usize = 64 * 1024;

/// Serves the dashboard on `listener` under `limits` (`http::serve`)
/// until `cancel`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    dashboard: Arc<Dashboard>,
    limits: crate::http::Limits,
    cancel: CancellationToken,
) {
    crate::http::serve(listener, router(dashboard), limits, cancel).await;
}
