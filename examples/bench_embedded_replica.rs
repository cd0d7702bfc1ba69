//! The benchmark's embedded replica (`bench --replica-kind embedded`): a
//! service built on the `cronlease` library API alone whose every job is a no-op
//! async handler, so that the benchmark measures what an embedding service
//! gets: tick-to-handler lateness. It takes `bench_replica`'s command line
//! and config file, so the benchmark starts either the same way:
//!
//! ```sh
//! cargo run --release --example bench_embedded_replica -- run --config bench-1.toml
//! cargo run --release --example bench_embedded_replica -- check --config bench-1.toml
//! ```
//!
//! - **Config.** The file the benchmark writes (`examples/bench/cluster/
//!   config.rs`), read here as a service reads its own settings: `[redis]`
//!   `url`, `key_prefix`, `command_timeout` become the [`RedisSettings`];
//!   `[daemon]` `replica_id`, `state_dir`, `lease`, `heartbeat`,
//!   `shutdown_grace`, `kill_grace` and `history` the scheduler's settings,
//!   `metrics_listen` where this program serves `/metrics`; every
//!   `[jobs.NAME]` is a [`JobBuilder`] with its `schedule` (a job has
//!   nothing else). `check` reads the file and stops; the schedules are
//!   validated by the scheduler at start, with the config's messages.
//! - **Handler.** It reads the wall clock (µs since the epoch) as the first
//!   thing it does and returns `Ok`. The calls (job, tick, wall clock) are
//!   kept in memory and appended to `<state_dir>/handler-calls.tsv` every
//!   second and at the end: a run's outcome says when it was claimed (by
//!   Redis time, inside the claim script), not when its handler ran. The
//!   benchmark runs Redis and every replica on one host, so the wall clock
//!   read here is the clock Redis's `TIME` reads; the benchmark measures
//!   the offset between the two anyway and applies it.
//! - **Metrics.** The `metrics` facade's Prometheus recorder (histograms
//!   with buckets, as the daemon's), installed before the scheduler
//!   starts, served on `GET /metrics` at
//!   `metrics_listen`; the line `metrics listening on http://ADDR/metrics`
//!   goes to stderr whatever `RUST_LOG` says (the benchmark reads the port
//!   from it). The benchmark counts claim attempts from
//!   `cronlease_claims_total`, as for daemon replicas.
//! - **Readiness and signals.** The scheduler says `READY=1` on
//!   `NOTIFY_SOCKET` (and logs `ready`) as the daemon does. SIGTERM or
//!   SIGINT shut it down ([`Scheduler::shutdown`]), write the last calls
//!   and exit 0.
//! - **Log.** Text on stderr filtered by `RUST_LOG` (default `info`).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use axum::Router;
use axum::routing::get;
use clap::{Parser, Subcommand};
use cronlease::{Cluster, Job, JobBuilder, RedisSettings, Run, SchedulerBuilder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};
use tracing_subscriber::EnvFilter;

/// The file, in the state directory, the handler's calls are appended to.
const CALLS_FILE: &str = "handler-calls.tsv";

/// How often the calls are appended to it.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The buckets of every histogram, in seconds (lateness and run durations).
const HISTOGRAM_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0,
    3600.0,
];

/// An embedded cronlease replica with a no-op handler per job.
#[derive(Debug, Parser)]
#[command(name = "bench_embedded_replica")]
struct Cli {
    #[command(subcommand)]
    command: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Run the replica (as `cronlease run`).
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// Read the config file and stop (as `cronlease check`, without the
    /// schedules' validation, which happens at start).
    Check {
        #[arg(long)]
        config: PathBuf,
    },
}

/// The same allocator, set up the same way, as the `cronlease` binary.
#[path = "../cli/src/allocator.rs"]
mod allocator;

fn main() -> ExitCode {
    allocator::return_freed_memory_at_once();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let result = match Cli::parse().command {
        Verb::Check { config } => Settings::load(&config).map(|settings| {
            println!(
                "{}: {} jobs, replica {}",
                config.display(),
                settings.jobs.len(),
                settings.daemon.replica_id
            );
        }),
        Verb::Run { config } => tokio::runtime::Runtime::new()
            .context("cannot start the runtime")
            .and_then(|runtime| runtime.block_on(run(&config))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The benchmark's config file, as far as this program reads it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    redis: RedisPart,
    daemon: DaemonPart,
    #[serde(default)]
    jobs: BTreeMap<String, JobPart>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedisPart {
    url: String,
    key_prefix: String,
    command_timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DaemonPart {
    replica_id: String,
    state_dir: PathBuf,
    metrics_listen: SocketAddr,
    lease: String,
    heartbeat: String,
    shutdown_grace: String,
    kill_grace: String,
    history: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobPart {
    schedule: String,
}

impl Settings {
    fn load(path: &Path) -> Result<Settings> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let settings: Settings =
            toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))?;
        // Every duration, so that a bad one is reported by `check`.
        settings.scheduler_durations()?;
        duration("redis.command_timeout", &settings.redis.command_timeout)?;
        Ok(settings)
    }

    /// lease, heartbeat, shutdown_grace, kill_grace.
    fn scheduler_durations(&self) -> Result<[Duration; 4]> {
        let d = &self.daemon;
        Ok([
            duration("daemon.lease", &d.lease)?,
            duration("daemon.heartbeat", &d.heartbeat)?,
            duration("daemon.shutdown_grace", &d.shutdown_grace)?,
            duration("daemon.kill_grace", &d.kill_grace)?,
        ])
    }
}

fn duration(field: &str, text: &str) -> Result<Duration> {
    humantime::parse_duration(text).with_context(|| format!("{field}: {text:?} is not a duration"))
}

async fn run(path: &Path) -> Result<()> {
    // Before anything else: the benchmark may signal as soon as it is ready.
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let settings = Settings::load(path)?;
    // Histograms with buckets, as the daemon's: without, the exporter keeps
    // a summary (a rolling window of sketches) per job and metric.
    let metrics = PrometheusBuilder::new()
        .set_buckets(&HISTOGRAM_BUCKETS)
        .context("cannot set the histograms' buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let service = CancellationToken::new();
    let server = serve_metrics(settings.daemon.metrics_listen, metrics, service.clone()).await?;

    let redis = &settings.redis;
    let cluster = Cluster::connect(
        RedisSettings::url(&redis.url)
            .key_prefix(&redis.key_prefix)
            .command_timeout(duration("redis.command_timeout", &redis.command_timeout)?),
    )
    .await
    .context("cannot connect")?;
    let calls = Calls::new(settings.daemon.state_dir.join(CALLS_FILE));
    let scheduler = settings
        .jobs
        .iter()
        .map(|(name, job)| no_op_job(name, &job.schedule, &calls))
        .fold(scheduler(&cluster, &settings)?, SchedulerBuilder::job)
        .start()
        .context("cannot start the scheduler")?;
    let flusher = tokio::spawn(calls.clone().flush_every(FLUSH_EVERY, service.clone()));

    tokio::select! {
        _ = term.recv() => info!("SIGTERM received"),
        _ = int.recv() => info!("SIGINT received"),
    }
    let stopped = scheduler.shutdown().await.context("shutdown failed");
    service.cancel();
    let _ = flusher.await;
    let _ = server.await;
    calls.flush().await?;
    stopped?;
    info!("stopped");
    Ok(())
}

/// The scheduler with the `[daemon]` settings, no jobs yet.
fn scheduler(cluster: &Cluster, settings: &Settings) -> Result<SchedulerBuilder> {
    let daemon = &settings.daemon;
    let [lease, heartbeat, shutdown_grace, kill_grace] = settings.scheduler_durations()?;
    let builder = cluster
        .scheduler()
        .replica_id(&daemon.replica_id)
        .state_dir(&daemon.state_dir)
        .lease(lease)
        .heartbeat(heartbeat)
        .shutdown_grace(shutdown_grace)
        .kill_grace(kill_grace);
    Ok(match daemon.history {
        Some(history) => builder.history(history),
        None => builder,
    })
}

/// A job whose handler notes when it was called and does nothing else.
fn no_op_job(name: &str, schedule: &str, calls: &Calls) -> Job {
    let calls = calls.clone();
    JobBuilder::new(name, schedule).run(move |run: Run| {
        let calls = calls.clone();
        async move {
            let wall_us = wall_clock_us();
            calls.note(Call {
                job: run.job().to_string(),
                tick_ms: run.tick().as_millisecond(),
                wall_us,
            });
            Ok::<(), Infallible>(())
        }
    })
}

/// µs since the Unix epoch, by this host's wall clock.
fn wall_clock_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// One call of a handler.
struct Call {
    job: String,
    tick_ms: i64,
    wall_us: i64,
}

/// The calls not yet written, and the file they go to.
#[derive(Clone)]
struct Calls {
    /// A std mutex: held for a push or a swap, never across an await.
    pending: Arc<Mutex<Vec<Call>>>,
    file: Arc<PathBuf>,
}

impl Calls {
    fn new(file: PathBuf) -> Calls {
        Calls {
            pending: Arc::default(),
            file: Arc::new(file),
        }
    }

    fn note(&self, call: Call) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }

    /// Appends the pending calls to the file, one `JOB TICK_MS WALL_US`
    /// line (tab-separated) each.
    async fn flush(&self) -> Result<()> {
        let calls =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner));
        if calls.is_empty() {
            return Ok(());
        }
        let mut text = String::with_capacity(calls.len() * 40);
        for Call {
            job,
            tick_ms,
            wall_us,
        } in &calls
        {
            text.push_str(&format!("{job}\t{tick_ms}\t{wall_us}\n"));
        }
        let mut file = tokio::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&*self.file)
            .await
            .with_context(|| format!("cannot open {}", self.file.display()))?;
        file.write_all(text.as_bytes())
            .await
            .with_context(|| format!("cannot write {}", self.file.display()))
    }

    async fn flush_every(self, period: Duration, cancel: CancellationToken) {
        let mut every = tokio::time::interval(period);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            if let Err(e) = self.flush().await {
                error!("{e:#}");
            }
        }
    }
}

/// Serves `GET /metrics` on `addr` until `cancel`; says where on stderr.
async fn serve_metrics(
    addr: SocketAddr,
    handle: PrometheusHandle,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let bound = listener
        .local_addr()
        .context("cannot read the metrics address")?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let handle = handle.clone();
            async move {
                handle.run_upkeep();
                handle.render()
            }
        }),
    );
    // Whatever RUST_LOG lets through: the benchmark reads the port here.
    eprintln!("metrics listening on http://{bound}/metrics");
    Ok(tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(cancel.cancelled_owned())
            .await;
        if let Err(e) = served {
            error!("the metrics server stopped: {e}");
        }
    }))
}
