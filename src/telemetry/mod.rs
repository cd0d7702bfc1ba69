//! Metrics and health over HTTP: `/metrics` (Prometheus text) and
//! `/healthz`, on `[daemon] metrics_listen` (default 127.0.0.1:9464).
//!
//! Metrics are recorded with the `metrics` facade wherever the event
//! happens (the names are the constants below, so the guide's list and the
//! code cannot drift apart); this module installs the recorder that keeps
//! them and writes the Prometheus text format (`exposition`), and serves
//! it. `/healthz` answers 200 when the supervisor loop ran recently and
//! Redis answered last time it was asked, 503 with the reason otherwise.

#[cfg(feature = "metrics-server")]
use std::net::SocketAddr;
#[cfg(feature = "metrics-server")]
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[cfg(feature = "metrics-server")]
use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use tokio::sync::watch;
use tokio::time::Instant;
#[cfg(feature = "metrics-server")]
use tokio_util::sync::CancellationToken;

#[cfg(feature = "metrics-server")]
pub mod exposition;
#[cfg(feature = "otel-export")]
pub mod otlp;
#[cfg(feature = "metrics-server")]
use exposition::Exposition;

pub const RUNS: &str = "cronlease_runs_total";
pub const CLAIMS: &str = "cronlease_claims_total";
pub const TICK_LATENESS: &str = "cronlease_tick_lateness_seconds";
pub const RUN_DURATION: &str = "cronlease_run_duration_seconds";
pub const RUN_CPU: &str = "cronlease_run_cpu_seconds";
pub const LEASES_HELD: &str = "cronlease_leases_held";
pub const RUNS_IN_FLIGHT: &str = "cronlease_runs_in_flight";
pub const RUNS_MAX: &str = "cronlease_runs_max";
pub const LEASE_RENEWALS: &str = "cronlease_lease_renewals_total";
pub const LOST_LEASES: &str = "cronlease_lost_leases_total";
pub const REDIS_ERRORS: &str = "cronlease_redis_errors_total";
pub const SPOOLED: &str = "cronlease_spooled_outcomes";
pub const UNSPOOLED: &str = "cronlease_unspooled_outcomes";
pub const SPOOL_FULL: &str = "cronlease_spool_full_total";
pub const STATE_LOSS: &str = "cronlease_state_loss_events_total";
pub const UNTRUSTED_DATA: &str = "cronlease_untrusted_data_total";
pub const LAST_SUCCESS: &str = "cronlease_last_success_timestamp_seconds";
pub const MISSED_TICKS: &str = "cronlease_missed_ticks_total";
pub const NOTIFICATIONS: &str = "cronlease_notifications_total";
#[cfg(feature = "metrics-server")]
pub const BUILD_INFO: &str = "cronlease_build_info";

/// The git commit the binary was built from (see build.rs).
#[cfg(feature = "metrics-server")]
pub const GIT_SHA: &str = env!("CRONLEASE_GIT_SHA");

#[cfg(feature = "metrics-server")]
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot install the metrics recorder: this process has one already")]
    Recorder,
    #[error("cannot listen for metrics on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(feature = "metrics-server")]
/// Installs the process-wide Prometheus recorder and describes every metric.
pub fn install() -> Result<Exposition, TelemetryError> {
    let latency = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ];
    let durations = [
        0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14_400.0,
    ];
    let exposition = Exposition::new(&[
        (TICK_LATENESS, &latency),
        (RUN_DURATION, &durations),
        (RUN_CPU, &durations),
    ]);
    metrics::set_global_recorder(exposition.clone()).map_err(|_| TelemetryError::Recorder)?;
    describe_metrics();
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION"), "git_sha" => GIT_SHA)
        .set(1.0);
    Ok(exposition)
}

/// Says what every metric measures (its `# HELP` line).
#[cfg(feature = "metrics-server")]
fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        RUNS,
        "Runs finished by this replica, by job and outcome status."
    );
    describe_counter!(
        CLAIMS,
        "Claim attempts by job and result (claimed, taken, early, busy, paused, wait, error, expired, lapsed)."
    );
    describe_histogram!(
        TICK_LATENESS,
        Unit::Seconds,
        "Run start minus tick, by Redis time, of the ticks this replica claimed."
    );
    describe_histogram!(
        RUN_DURATION,
        Unit::Seconds,
        "Duration of runs finished by this replica."
    );
    describe_histogram!(
        RUN_CPU,
        Unit::Seconds,
        "CPU time of the processes of runs finished by this replica (runs in cgroups only)."
    );
    describe_gauge!(
        RUNS_IN_FLIGHT,
        "Runs this replica has in flight, whatever started them."
    );
    describe_gauge!(
        RUNS_MAX,
        "The most runs this replica keeps in flight at once ([daemon] max_runs); absent without a limit."
    );
    describe_gauge!(
        LEASES_HELD,
        "Leases this replica holds now (runs in flight)."
    );
    describe_counter!(
        LEASE_RENEWALS,
        "Lease renewals by result (ok, lost, error)."
    );
    describe_counter!(
        LOST_LEASES,
        "Runs stopped because their lease was lost or not renewable in time."
    );
    describe_counter!(REDIS_ERRORS, "Redis commands that failed.");
    describe_gauge!(SPOOLED, "Outcomes waiting in the spool for Redis.");
    describe_gauge!(
        UNSPOOLED,
        "Outcomes held in memory: Redis was unreachable and the spool's disk refused them. Lost if the replica dies."
    );
    describe_counter!(
        SPOOL_FULL,
        "Outcomes not written to the spool because it held spool_max_bytes (kept in memory instead)."
    );
    describe_counter!(
        STATE_LOSS,
        "Redis state-loss events detected (epoch changed, high-water mark behind)."
    );
    describe_counter!(
        UNTRUSTED_DATA,
        "Data read from Redis that no honest writer produces, not acted on: forged claim announcements (source=announcement), implausible job state (source=state, field=last_tick|fence|running) and trigger requests with a run id cronlease did not make (source=trigger)."
    );
    describe_gauge!(
        LAST_SUCCESS,
        Unit::Seconds,
        "When this replica last finished a run of the job with status ok."
    );
    describe_counter!(
        MISSED_TICKS,
        "Ticks nobody claimed, recorded as missed by this replica."
    );
    describe_counter!(
        NOTIFICATIONS,
        "Notification delivery attempts by this replica, by channel, event and result (delivered, retrying, dropped)."
    );
    describe_gauge!(BUILD_INFO, "Always 1; the labels say which build runs.");
}

/// What `/healthz` looks at.
pub struct Health {
    /// When the supervisor loop last ran, ms since `origin`.
    beat_ms: AtomicI64,
    origin: Instant,
    /// The supervisor must beat at least this often.
    #[cfg_attr(
        not(feature = "metrics-server"),
        expect(
            dead_code,
            reason = "read by /healthz, which only the metrics server serves"
        )
    )]
    period: Duration,
    #[cfg_attr(
        not(feature = "metrics-server"),
        expect(
            dead_code,
            reason = "read by /healthz, which only the metrics server serves"
        )
    )]
    redis_up: watch::Receiver<bool>,
}

impl Health {
    pub fn new(period: Duration, redis_up: watch::Receiver<bool>) -> Health {
        Health {
            beat_ms: AtomicI64::new(0),
            origin: Instant::now(),
            period,
            redis_up,
        }
    }

    /// Called by the supervisor loop on every turn.
    pub fn beat(&self) {
        let ms = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.beat_ms.store(ms, Ordering::Relaxed);
    }

    /// `Ok` or the reason the replica is not healthy.
    #[cfg(feature = "metrics-server")]
    pub fn check(&self) -> Result<(), String> {
        let now = i64::try_from(self.origin.elapsed().as_millis()).unwrap_or(i64::MAX);
        let silent = now - self.beat_ms.load(Ordering::Relaxed);
        let limit = i64::try_from((self.period * 3).as_millis()).unwrap_or(i64::MAX);
        if silent > limit {
            return Err(format!("scheduler loop stalled: silent for {silent} ms"));
        }
        if !*self.redis_up.borrow() {
            return Err("redis unreachable".to_string());
        }
        Ok(())
    }
}

#[derive(Clone)]
#[cfg(feature = "metrics-server")]
struct Served {
    exposition: Exposition,
    health: Arc<Health>,
}

/// Binds `addr` (a port 0 picks a free one); the caller logs the address.
#[cfg(feature = "metrics-server")]
pub async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, TelemetryError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| TelemetryError::Bind { addr, source })
}

/// Serves `/metrics` and `/healthz` under `limits` (`http::serve`: no
/// request body is read) until `cancel`.
#[cfg(feature = "metrics-server")]
pub async fn serve(
    listener: tokio::net::TcpListener,
    exposition: Exposition,
    health: Arc<Health>,
    limits: crate::http::Limits,
    cancel: CancellationToken,
) {
    let app = Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(healthz))
        .with_state(Served { exposition, health });
    crate::http::serve(listener, app, limits, cancel).await;
}

#[cfg(feature = "metrics-server")]
async fn metrics_page(State(served): State<Served>) -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, exposition::CONTENT_TYPE)],
        served.exposition.body(),
    )
}

#[cfg(feature = "metrics-server")]
async fn healthz(State(served): State<Served>) -> (StatusCode, String) {
    match served.health.check() {
        Ok(()) => (StatusCode::OK, "ok\n".to_string()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}
