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
#[cfg(any(feature = "metrics-server", feature = "dashboard"))]
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
    let (tokens, open, sso) = {
        let keys = ctx.dashboard_keys.borrow();
        (keys.len(), keys.is_empty(), keys.sso_issuer())
    };
    let mode = match (open, read) {
        (true, _) => "read-only and public (no dashboard token)",
        (_, crate::config::DashboardRead::Token) => "reading and actions need the login",
        (_, crate::config::DashboardRead::Public) => "public to read, actions need the login",
    };
    let limits = http_limits(
        "dashboard",
        addr,
        &ctx.config.daemon,
        crate::dashboard::MAX_BODY,
    );
    let sso = sso.unwrap_or_else(|| "off".to_string());
    info!(addr = %bound, mode, tokens, sso, max_connections = limits.max_connections, "dashboard on http://{bound}/");
    let dashboard = crate::dashboard::Dashboard::new(
        store,
        ctx.jobs.subscribe(),
        &ctx.identity.replica,
        &ctx.config.redis.key_prefix,
        ctx.dashboard_keys.subscribe(),
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
    _tasks: &TaskTracker,
    _cancel: &CancellationToken,
) {
    tracing::warn!(%addr, "dashboard_listen is set, but this build has no dashboard (the `dashboard` feature)");
}

/// The dashboard's tokens, read at start-up and again by each SIGHUP
/// reload (`send_replace`d to the dashboard, which reads the current
/// ones for each request).
#[cfg(feature = "dashboard")]
pub(super) type DashboardKeys = tokio::sync::watch::Sender<Arc<crate::dashboard::Keyring>>;

/// Built without the `dashboard` feature: no token.
#[cfg(not(feature = "dashboard"))]
pub(super) struct DashboardKeys;

/// The tokens' values, for the redaction of runs' output.
#[cfg(feature = "dashboard")]
pub(super) fn token_secrets(keys: &DashboardKeys) -> Vec<Vec<u8>> {
    keys.borrow().secrets()
}

#[cfg(not(feature = "dashboard"))]
pub(super) fn token_secrets(_keys: &DashboardKeys) -> Vec<Vec<u8>> {
    Vec::new()
}

/// Reads the dashboard's tokens where the config says, before anything
/// else starts: a token that was asked for and cannot be read stops the
/// replica with the reason (the operator expects actions to work).
#[cfg(feature = "dashboard")]
pub(super) fn dashboard_token(config: &Config) -> Result<DashboardKeys, DaemonError> {
    let keys = load_keys(config, config)?;
    Ok(tokio::sync::watch::Sender::new(Arc::new(keys)))
}

/// The tokens of `running`'s `[daemon]` (what a restart alone changes:
/// whether the dashboard is served, its own token) and `reloaded`'s
/// `[[dashboard.tokens]]`; none when no dashboard is served.
#[cfg(feature = "dashboard")]
fn load_keys(
    running: &Config,
    reloaded: &Config,
) -> Result<crate::dashboard::Keyring, crate::dashboard::TokenError> {
    if running.daemon.dashboard_listen.is_none() {
        return Ok(crate::dashboard::Keyring::empty());
    }
    crate::dashboard::Keyring::load(&running.daemon, &reloaded.dashboard, &reloaded.source)
}

/// Reads the tokens for the dashboard again, with `reloaded`'s
/// `[[dashboard.tokens]]`: `Err` (the reason) when one cannot be read,
/// and the old tokens stay.
#[cfg(feature = "dashboard")]
pub(super) fn reload_keys(
    running: &Config,
    reloaded: &Config,
) -> Result<Option<Arc<crate::dashboard::Keyring>>, String> {
    load_keys(running, reloaded)
        .map(|keys| Some(Arc::new(keys)))
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "dashboard"))]
pub(super) fn reload_keys(_running: &Config, _reloaded: &Config) -> Result<Option<()>, String> {
    Ok(None)
}

/// Hands the reloaded tokens to the dashboard.
#[cfg(feature = "dashboard")]
pub(super) fn replace_keys(sender: &DashboardKeys, keys: Arc<crate::dashboard::Keyring>) {
    info!(tokens = keys.len(), "dashboard tokens reloaded");
    sender.send_replace(keys);
}

#[cfg(not(feature = "dashboard"))]
pub(super) fn replace_keys(_sender: &DashboardKeys, _keys: ()) {}

#[cfg(not(feature = "dashboard"))]
pub(super) fn dashboard_token(_config: &Config) -> Result<DashboardKeys, DaemonError> {
    Ok(DashboardKeys)
}
