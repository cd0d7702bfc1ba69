//! What a replica serves over HTTP besides claiming: `/metrics` and
//! `/healthz` (`telemetry`), and the dashboard (`dashboard`), each on its
//! own listener, each logged and skipped (never fatal) when its port
//! cannot be bound.

use super::ctx::Ctx;
use super::error::DaemonError;
use crate::config::Config;
use crate::telemetry;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

/// Installs the metrics recorder and serves `/metrics` and `/healthz`. A
/// port that cannot be bound is logged, not fatal: claims matter more.
#[cfg(feature = "metrics-server")]
pub(super) async fn start_metrics(
    addr: std::net::SocketAddr,
    daemon: &crate::config::DaemonConfig,
    health: Arc<telemetry::Health>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let exposition = match telemetry::install() {
        Ok(exposition) => exposition,
        Err(e) => {
            error!(error = %e, "metrics are off");
            return;
        }
    };
    match telemetry::bind(addr).await {
        Ok(listener) => {
            let bound = listener
                .local_addr()
                .map_or_else(|_| addr.to_string(), |a| a.to_string());
            let limits = http_limits("metrics", addr, daemon, 0);
            info!(
                addr = %bound, max_connections = limits.max_connections,
                "metrics listening on http://{bound}/metrics"
            );
            tasks.spawn(telemetry::serve(
                listener,
                exposition,
                health,
                limits,
                cancel.clone(),
            ));
        }
        Err(e) => error!(error = %e, "metrics and /healthz are not served"),
    }
}

/// Built without the `metrics-server` feature: nothing is served.
#[cfg(not(feature = "metrics-server"))]
pub(super) async fn start_metrics(
    addr: std::net::SocketAddr,
    _daemon: &crate::config::DaemonConfig,
    _health: Arc<telemetry::Health>,
    _tasks: &TaskTracker,
    _cancel: &CancellationToken,
) {
    tracing::warn!(%addr, "metrics_listen is set, but this build has no metrics server (the `metrics-server` feature)");
}

/// Serves the dashboard. Like the metrics, a port that cannot be bound is
/// logged, not fatal: claims matter more.
#[cfg(feature = "dashboard")]
pub(super) async fn start_dashboard(
    addr: std::net::SocketAddr,
    ctx: &Arc<Ctx>,
    token: DashboardToken,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) {
    let listener = match crate::dashboard::bind(addr).await {
        Ok(listener) => listener,
        Err(e) => {
            error!(%addr, error = %e, "the dashboard is not served: cannot listen");
            return;
        }
    };
    let bound = listener
        .local_addr()
        .map_or_else(|_| addr.to_string(), |a| a.to_string());
    // Its own connections: a page's reads never queue with the claims.
    let store = match crate::store::Store::connect_lazily(&ctx.config.redis) {
        Ok(store) => store,
        Err(e) => {
            error!(%addr, error = %e, "the dashboard is not served: cannot make its Redis connection");
            return;
        }
    };
    let read = ctx.config.daemon.dashboard_read;
    let mode = match (&token, read) {
        (None, _) => "read-only and public (no dashboard token)",
        (Some(_), crate::config::DashboardRead::Token) => "reading and actions need the login",
        (Some(_), crate::config::DashboardRead::Public) => "public to read, actions need the login",
    };
    let limits = http_limits(
        "dashboard",
        addr,
        &ctx.config.daemon,
        crate::dashboard::MAX_BODY,
    );
    info!(addr = %bound, mode, max_connections = limits.max_connections, "dashboard on http://{bound}/");
    let dashboard = crate::dashboard::Dashboard::new(
        store,
        ctx.jobs.subscribe(),
        &ctx.identity.replica,
        &ctx.config.redis.key_prefix,
        token,
        read,
    );
    tasks.spawn(crate::dashboard::serve(
        listener,
        Arc::new(dashboard),
        limits,
        cancel.clone(),
    ));
}

/// What an HTTP server listening on `addr` holds its clients to: the
/// `[daemon]` settings (`http_max_connections`, `dashboard_hosts`), at
/// most an eighth of the soft limit on open files in connections, and
/// bodies of at most `max_body` bytes.
#[cfg(feature = "http-server")]
fn http_limits(
    name: &'static str,
    addr: std::net::SocketAddr,
    daemon: &crate::config::DaemonConfig,
    max_body: usize,
) -> crate::http::Limits {
    let nofile = crate::http::open_files_limit();
    let max_connections = crate::http::connection_limit(daemon.http_max_connections, nofile);
    let hosts = crate::http::Hosts::new(addr.ip(), &daemon.dashboard_hosts);
    crate::http::Limits::new(name, max_connections, max_body, hosts)
}

/// Built without the `dashboard` feature: nothing is served.
#[cfg(not(feature = "dashboard"))]
pub(super) async fn start_dashboard(
    addr: std::net::SocketAddr,
    _ctx: &Arc<Ctx>,
    _token: DashboardToken,
    _tasks: &TaskTracker,
    _cancel: &CancellationToken,
) {
    tracing::warn!(%addr, "dashboard_listen is set, but this build has no dashboard (the `dashboard` feature)");
}

/// The operator token the dashboard's actions need, read at start-up.
#[cfg(feature = "dashboard")]
pub(super) type DashboardToken = Option<crate::dashboard::Token>;

/// The token's value, for the redaction of runs' output.
#[cfg(feature = "dashboard")]
pub(super) fn token_secret(token: &DashboardToken) -> Option<Vec<u8>> {
    token.as_ref().map(|t| t.secret_bytes().to_vec())
}

#[cfg(not(feature = "dashboard"))]
pub(super) fn token_secret(_token: &DashboardToken) -> Option<Vec<u8>> {
    None
}
#[cfg(not(feature = "dashboard"))]
pub(super) type DashboardToken = Option<()>;

/// Reads the dashboard's token where the config says, before anything
/// else starts: a token that was asked for and cannot be read stops the
/// replica with the reason (the operator expects actions to work).
#[cfg(feature = "dashboard")]
pub(super) fn dashboard_token(config: &Config) -> Result<DashboardToken, DaemonError> {
    match (
        &config.daemon.dashboard_listen,
        &config.daemon.dashboard_token,
    ) {
        (Some(_), Some(source)) => Ok(Some(crate::dashboard::Token::load(source)?)),
        _ => Ok(None),
    }
}

#[cfg(not(feature = "dashboard"))]
pub(super) fn dashboard_token(_config: &Config) -> Result<DashboardToken, DaemonError> {
    Ok(None)
}
